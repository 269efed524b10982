//! The minimum Rust version the workspace declares (`rust-version` in
//! Cargo.toml, repeated in the README) is true: no locked dependency needs a
//! newer compiler. `cargo install --locked` builds exactly these versions, so
//! a dependency update that raises the floor fails here, not on a user's
//! machine.

use std::process::Command;

use serde_json::Value;

/// `1.90` or `1.89.0` as comparable numbers (missing parts are 0).
fn version(text: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = text
        .split('.')
        .map(|part| {
            part.parse()
                .unwrap_or_else(|_| panic!("rust-version {text:?} is not numeric"))
        })
        .collect();
    parts.resize(3, 0);
    parts
}

#[test]
fn no_locked_dependency_needs_a_newer_rust_than_the_workspace_declares() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--locked",
            "--format-version",
            "1",
            "--manifest-path",
            manifest,
        ])
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata --locked: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata JSON");
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let packages = metadata["packages"].as_array().expect("packages");
    let declared: Vec<&str> = packages
        .iter()
        .filter(|p| members.contains(&p["id"].as_str().unwrap_or_default()))
        .map(|p| {
            p["rust_version"]
                .as_str()
                .expect("every member declares rust-version")
        })
        .collect();
    assert!(!declared.is_empty());
    assert!(
        declared.windows(2).all(|w| w[0] == w[1]),
        "members declare different rust-versions: {declared:?}"
    );
    let floor = version(declared[0]);
    let too_new: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            (version(needs) > floor)
                .then(|| format!("{} {} needs {needs}", p["name"], p["version"]))
        })
        .collect();
    assert!(
        too_new.is_empty(),
        "the workspace declares rust-version {} but {too_new:?}; raise it (and the README)",
        declared[0]
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README");
    assert!(
        readme.contains(&format!("Rust toolchain ({} or newer)", declared[0])),
        "the README does not state rust-version {}",
        declared[0]
    );
}
