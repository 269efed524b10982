//! Link options for the `planb-mcp` binary.
//!
//! On Linux with GNU tools the executable's relative relocations are packed
//! (`DT_RELR`): the loader then reads a few kilobytes of relocation records
//! at start instead of about a megabyte, which the server would otherwise
//! keep resident for its whole life.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
