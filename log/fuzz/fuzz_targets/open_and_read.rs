//! Fuzzes recovery and reading of arbitrary segment files with the harness in
//! `planb_log::fuzzing` (also run deterministically by `log/tests/log/fuzz_smoke.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    planb_log::fuzzing::open_and_read(input);
});
