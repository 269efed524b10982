//! Keeps ARCHITECTURE.md a true map: each crate depends on exactly the planb
//! crates its section names; `planb-mcp`'s async code reaches blocking work
//! only through its one bridge (`mcp/src/blocking.rs`); every golden fixture
//! is named; no file cites a document (or an issue of the tracker) that is
//! not in the repository; and the
//! map stays one page.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The largest the map may grow: one page.
const MAP_BYTES_MAX: usize = 12 * 1024;

/// The crate sections of the map: (folder, package, the planb crates it says
/// the crate depends on).
fn map_sections(map: &str) -> Vec<(String, String, BTreeSet<String>)> {
    let mut sections = Vec::new();
    for section in map.split("\n### `").skip(1) {
        let Some((folder, rest)) = section.split_once("/` (`") else {
            continue;
        };
        let Some((package, body)) = rest.split_once("`)") else {
            continue;
        };
        let body = body.split("\n## ").next().unwrap_or_default();
        let depends = body
            .split_once("Depends on:")
            .unwrap_or_else(|| panic!("the map's {folder}/ section has no 'Depends on:' line"))
            .1;
        let sentence = depends.split_once('.').map_or(depends, |(s, _)| s);
        let named = sentence
            .split([',', ' ', '\n'])
            .filter(|w| w.starts_with("planb-"))
            .map(str::to_owned)
            .collect();
        sections.push((folder.to_owned(), package.to_owned(), named));
    }
    sections
}

/// The planb crates a manifest's `[dependencies]` name (not dev ones).
fn planb_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut in_dependencies = false;
    let mut found = BTreeSet::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies && line.starts_with("planb-") {
            let name = line
                .split(['.', ' ', '='])
                .next()
                .unwrap_or_default()
                .to_owned();
            found.insert(name);
        }
    }
    found
}

/// The workspace's member folders.
fn members() -> Vec<String> {
    let manifest = read(&root().join("Cargo.toml"));
    let list = manifest
        .split_once("members")
        .and_then(|(_, rest)| rest.split_once('['))
        .and_then(|(_, rest)| rest.split_once(']'))
        .expect("workspace members")
        .0;
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

#[test]
fn each_crate_depends_on_exactly_what_the_map_says() {
    let map = read(&root().join("ARCHITECTURE.md"));
    let sections = map_sections(&map);
    let mut problems = Vec::new();
    for member in members() {
        let Some((_, package, named)) = sections.iter().find(|(f, _, _)| *f == member) else {
            problems.push(format!("{member}/ has no section in the map"));
            continue;
        };
        let manifest = read(&root().join(&member).join("Cargo.toml"));
        if !manifest.contains(&format!("name = \"{package}\"")) {
            problems.push(format!("{member}/ is not the package {package}"));
        }
        let actual = planb_dependencies(&manifest);
        for extra in actual.difference(named) {
            problems.push(format!(
                "{package} depends on {extra}, which the map does not allow"
            ));
        }
        for missing in named.difference(&actual) {
            problems.push(format!(
                "the map says {package} depends on {missing}; it does not"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_map_is_one_page_and_names_every_golden_fixture() {
    let map = read(&root().join("ARCHITECTURE.md"));
    assert!(
        map.len() <= MAP_BYTES_MAX,
        "ARCHITECTURE.md is {} bytes, over {MAP_BYTES_MAX}",
        map.len()
    );
    let golden = root().join("fixtures/golden");
    for entry in std::fs::read_dir(&golden).expect("fixtures/golden") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        assert!(
            map.contains(&format!("`{name}`")),
            "the golden fixture {name} is not named in ARCHITECTURE.md"
        );
    }
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, found: &mut Vec<PathBuf>, extensions: &[&str]) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let skipped = ["target", ".git", "node_modules", ".venv", "fixtures"];
            if !skipped.contains(&name.as_str()) {
                sources(&path, found, extensions);
            }
        } else if extensions
            .iter()
            .any(|ext| path.extension().is_some_and(|e| e == *ext))
        {
            found.push(path);
        }
    }
}

#[test]
fn planb_mcp_reaches_blocking_work_only_through_its_bridge() {
    let mut files = Vec::new();
    sources(&root().join("mcp/src"), &mut files, &["rs"]);
    let bridge = root().join("mcp/src/blocking.rs");
    let call = ["spawn", "_blocking"].concat();
    let outside: Vec<String> = files
        .iter()
        .filter(|f| **f != bridge && read(f).contains(&call))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        outside.is_empty(),
        "{call} outside mcp/src/blocking.rs: {outside:?}"
    );
}

#[test]
fn no_file_cites_a_document_that_is_not_in_the_repository() {
    let mut files = Vec::new();
    sources(&root(), &mut files, &["rs", "md", "toml", "sh"]);
    // Split so that this file does not match itself.
    let design = ["DES", "IGN"].concat();
    let seed = ["se", "ed"].concat();
    let issue = ["iss", "ue"].concat();
    let mut found = Vec::new();
    for file in &files {
        for (n, line) in read(file).lines().enumerate() {
            let numbered = line.match_indices(&format!("{seed} 0")).any(|(at, _)| {
                line[at + seed.len() + 1..].starts_with(|c: char| c.is_ascii_digit())
            });
            // An issue of the tracker, which is not in the repository either.
            let lower = line.to_ascii_lowercase();
            let tracked = [" ", "_"].iter().any(|sep| {
                lower
                    .match_indices(&format!("{issue}{sep}"))
                    .any(|(at, _)| {
                        lower[at + issue.len() + 1..].starts_with(|c: char| c.is_ascii_digit())
                    })
            });
            if line.contains(&design) || line.contains(&format!("{seed}'s")) || numbered || tracked
            {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "citations of absent documents:\n{}",
        found.join("\n")
    );
}
