//! `planb-retro`: the read-only replay timeline of planb sessions (a later
//! capability). Until it exists this binary says so instead of pretending.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("planb-retro: the replay timeline is not part of this build yet");
    ExitCode::from(2)
}
