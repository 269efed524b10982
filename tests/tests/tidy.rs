//! Keeps ARCHITECTURE.md a true map: each crate depends on exactly the planb
//! crates its section names; async code reaches blocking work only through
//! the bridges (the engine's run host, planb-app's `store.rs`); the
//! front doors (planb-mcp, planb-cli, planb-forms) build no store command
//! themselves; the person's pages and the agent's protocol stay apart;
//! the two runners share the host and the settle loop and import neither the
//! other; no crate's modules import each other in a circle; no
//! source function is over the limit; every golden fixture is
//! named; no file cites a document (or an issue of the tracker) that is not
//! in the repository; and the map stays one page.

use std::collections::{BTreeMap, BTreeSet};
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
    dependency_names(manifest)
        .into_iter()
        .filter(|name| name.starts_with("planb-"))
        .collect()
}

/// Every crate a manifest's `[dependencies]` name, planb's and others.
fn dependency_names(manifest: &str) -> BTreeSet<String> {
    let mut in_dependencies = false;
    let mut found = BTreeSet::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
        } else if in_dependencies && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['.', ' ', '=']).next().unwrap_or_default();
            found.insert(name.to_owned());
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
fn async_code_reaches_blocking_work_only_through_the_bridges() {
    // The engine's run host is the bridge; planb-app's store, which a
    // long-lived front door opens beside its start, runs a call in place
    // once the store is open.
    let bridges = [
        root().join("engine/src/host.rs"),
        root().join("app/src/store.rs"),
    ];
    let mut files = Vec::new();
    for dir in [
        "app/src",
        "cli/src",
        "engine/src",
        "forms/src",
        "mcp/src",
        "team/src",
    ] {
        sources(&root().join(dir), &mut files, &["rs"]);
    }
    let call = ["spawn", "_blocking"].concat();
    let outside: Vec<String> = files
        .iter()
        .filter(|f| !bridges.contains(f) && read(f).contains(&call))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        outside.is_empty(),
        "{call} outside the bridges: {outside:?}"
    );
}

#[test]
fn the_two_runners_share_the_host_and_the_settle_loop_and_import_neither_other() {
    let worker = read(&root().join("engine/src/worker.rs"));
    let plan_run = read(&root().join("engine/src/plans/run.rs"));
    assert!(
        !plan_run.contains("crate::worker"),
        "engine/src/plans/run.rs imports the task worker"
    );
    assert!(
        !worker.contains("plans::run"),
        "engine/src/worker.rs imports the plan runner"
    );
    for (name, text) in [("worker.rs", &worker), ("plans/run.rs", &plan_run)] {
        for shared in ["crate::host::", "crate::settle::"] {
            assert!(
                text.contains(shared),
                "engine/src/{name} does not use {shared}"
            );
        }
    }
}

/// Whether `text` names planb-core's `Command` (what records an event).
fn names_core_command(text: &str) -> bool {
    if text.contains("planb_core::Command") {
        return true;
    }
    text.split("use planb_core::{").skip(1).any(|rest| {
        let list = rest.split_once('}').map_or(rest, |(list, _)| list);
        list.split([',', ' ', '\n']).any(|name| name == "Command")
    })
}

#[test]
fn the_front_doors_build_no_store_command_themselves() {
    let mut files = Vec::new();
    for dir in ["mcp/src", "cli/src", "forms/src"] {
        sources(&root().join(dir), &mut files, &["rs"]);
    }
    // Unit tests may set a store up by hand.
    let recording: Vec<String> = files
        .iter()
        .filter(|f| !f.ends_with("tests.rs") && names_core_command(&read(f)))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        recording.is_empty(),
        "front doors that build a store command themselves: {recording:?}"
    );
}

#[test]
fn the_front_doors_reach_the_engine_only_through_planb_app() {
    let mut problems = Vec::new();
    for door in ["mcp", "cli", "forms"] {
        let folder = root().join(door);
        if read(&folder.join("Cargo.toml")).contains("planb-engine") {
            problems.push(format!("{door}/Cargo.toml depends on planb-engine"));
        }
        let mut files = Vec::new();
        for dir in ["src", "tests", "benches"] {
            sources(&folder.join(dir), &mut files, &["rs"]);
        }
        for file in files {
            if read(&file).contains("planb_engine") {
                problems.push(format!("{} names planb_engine", file.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_person_s_pages_and_the_agent_s_protocol_stay_apart() {
    let names = |folder: &str| dependency_names(&read(&root().join(folder).join("Cargo.toml")));
    let forms = names("forms");
    assert!(
        !forms.contains("rmcp"),
        "planb-forms depends on rmcp: the callback server knows nothing of MCP"
    );
    let mcp = names("mcp");
    for http in ["axum", "planb-http", "planb-ui"] {
        assert!(
            !mcp.contains(http),
            "planb-mcp depends on {http}: pages are served by planb-forms"
        );
    }
}

/// The longest a source function may be.
const FUNCTION_LINES_MAX: usize = 70;

/// The lines of `text` outside its `#[cfg(test)]` items: an item so marked
/// is skipped to its end (a `;` line, or the `}` closing it at its indent),
/// and what follows it is read on.
fn outside_tests(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut kept = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at];
        if !line.trim_start().starts_with("#[cfg(test)]") {
            kept.push((at, line));
            at += 1;
            continue;
        }
        // The item the attribute marks: past further attributes.
        let mut item = at + 1;
        while item < lines.len() && lines[item].trim_start().starts_with("#[") {
            item += 1;
        }
        let Some(first) = lines.get(item) else {
            break;
        };
        let indent = &first[..first.len() - first.trim_start().len()];
        let close = format!("{indent}}}");
        let end = if first.trim_end().ends_with(';') {
            item
        } else {
            (item..lines.len())
                .find(|&n| lines[n].trim_end() == close)
                .unwrap_or(lines.len() - 1)
        };
        at = end + 1;
    }
    kept
}

/// The name of the function a line begins, if it begins one.
fn function_named(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// Each function of `text` (outside its tests) over the limit: its name,
/// its first line and its length.
fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let kept = outside_tests(text);
    let lines: Vec<&str> = kept.iter().map(|(_, l)| *l).collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = function_named(line) else {
            continue;
        };
        if line.trim_end().ends_with(';') {
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let close = format!("{indent}}}");
        let Some(length) = lines[at..].iter().position(|l| l.trim_end() == close) else {
            continue;
        };
        if length + 1 > FUNCTION_LINES_MAX {
            found.push((name.to_owned(), kept[at].0 + 1, length + 1));
        }
    }
    found
}

/// The files of `files` that are modules only tests compile: declared
/// `#[cfg(test)] mod name;` in their parent.
fn test_only_files(files: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    for parent in files {
        let text = read(parent);
        let lines: Vec<&str> = text.lines().collect();
        let stem = parent
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let dir = parent.parent().unwrap_or(Path::new(""));
        // A `lib.rs`, `main.rs` or `mod.rs` holds its children beside it;
        // `event.rs` holds them in `event/`.
        let children = if ["lib", "main", "mod"].contains(&stem) {
            dir.to_path_buf()
        } else {
            dir.join(stem)
        };
        for pair in lines.windows(2) {
            let name = pair[1]
                .trim()
                .strip_prefix("mod ")
                .and_then(|r| r.strip_suffix(';'));
            if let (true, Some(name)) = (pair[0].trim() == "#[cfg(test)]", name) {
                found.insert(children.join(format!("{name}.rs")));
                found.insert(children.join(name).join("mod.rs"));
            }
        }
    }
    found
}

#[test]
fn no_source_function_is_over_the_limit() {
    let mut files = Vec::new();
    for member in members() {
        sources(&root().join(&member).join("src"), &mut files, &["rs"]);
    }
    let core_src = root().join("core/src");
    let test_only = test_only_files(&files);
    let mut over = Vec::new();
    for file in &files {
        // Tests, and the proptest generators of every event.
        if test_only.contains(file) || file.starts_with(core_src.join("arbitrary.rs")) {
            continue;
        }
        for (function, line, length) in long_functions(&read(file)) {
            over.push(format!(
                "{}:{line}: {function} is {length} lines",
                file.display()
            ));
        }
    }
    assert!(
        over.is_empty(),
        "functions over {FUNCTION_LINES_MAX} lines:\n{}",
        over.join("\n")
    );
}

/// The error types of the `Result<…, E>`s written in `text`, as written.
fn result_error_types(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("Result<") {
        let args = &rest[at + "Result<".len()..];
        let (mut depth, mut last_comma, mut end) = (0usize, None, None);
        for (i, c) in args.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth == 0 => {
                    end = Some(i);
                    break;
                }
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => last_comma = Some(i),
                _ => {}
            }
        }
        if let (Some(comma), Some(end)) = (last_comma, end) {
            found.push(args[comma + 1..end].trim().to_owned());
        }
        rest = args;
    }
    found
}

#[test]
fn no_source_function_answers_a_bare_string_as_its_error() {
    let mut files = Vec::new();
    for member in members() {
        sources(&root().join(&member).join("src"), &mut files, &["rs"]);
    }
    let test_only = test_only_files(&files);
    let mut bare = Vec::new();
    for file in files.iter().filter(|f| !test_only.contains(*f)) {
        for (line, text) in outside_tests(&read(file)) {
            if result_error_types(text).iter().any(|e| e == "String") {
                bare.push(format!("{}:{line}", file.display()));
            }
        }
    }
    assert!(
        bare.is_empty(),
        "Result<_, String> (give the error a type): {bare:?}"
    );
    assert_eq!(
        result_error_types("fn f() -> Result<BTreeMap<String, String>, ServersError> {"),
        ["ServersError"]
    );
    assert_eq!(
        result_error_types("Result<(u8, String), String>"),
        ["String"]
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

/// The module a source file is, as its path under `src/` names it.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| ["lib", "main", "mod"].contains(&p.as_str()))
    {
        parts.pop();
    }
    parts
}

/// The modules `text` (module `at`) names by `crate::` or `super::` paths,
/// outside comments and tests: each the longest prefix that is a module.
fn named_modules(
    text: &str,
    at: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> BTreeSet<Vec<String>> {
    let mut found = BTreeSet::new();
    let code = outside_tests(text)
        .into_iter()
        .map(|(_, l)| l)
        .filter(|l| !l.trim_start().starts_with("//"));
    // Its child modules, named by a path relative to it (`use v6::…`).
    let children: Vec<&Vec<String>> = modules
        .iter()
        .filter(|m| m.len() == at.len() + 1 && m.starts_with(at))
        .collect();
    for line in code {
        for child in &children {
            let name = format!("{}::", child[at.len()]);
            let relative = line.match_indices(&name).any(|(start, _)| {
                let before = line[..start].chars().last();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if relative || line.contains(&format!("self::{name}")) {
                found.insert((*child).clone());
            }
        }
        for (prefix, base) in [
            ("crate::", Vec::new()),
            ("super::", at[..at.len().saturating_sub(1)].to_vec()),
        ] {
            for (start, _) in line.match_indices(prefix) {
                let before = line[..start].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let path: Vec<String> = line[start + prefix.len()..]
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or_default()
                    .split("::")
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
                let full: Vec<String> = base.iter().cloned().chain(path).collect();
                let named = (base.len()..=full.len())
                    .rev()
                    .map(|n| full[..n].to_vec())
                    .find(|m| modules.contains(m));
                if let Some(named) = named.filter(|m| m.as_slice() != at && !m.is_empty()) {
                    found.insert(named);
                }
            }
        }
    }
    found
}

/// A circle of modules importing each other in `graph`, if there is one.
fn a_circle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        path: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            return Some(path[at..].iter().map(|m| m.join("::")).collect());
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_modules_importing_each_other_in_a_circle() {
    let mut circles = Vec::new();
    for member in members() {
        let src = root().join(&member).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files, &["rs"]);
        files.retain(|f| {
            !f.starts_with(src.join("bin")) && f.file_name().is_some_and(|n| n != "tests.rs")
        });
        let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
        let graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = files
            .iter()
            .map(|f| {
                let at = module_of(&src, f);
                // A module naming its ancestors (`super::`) is the module
                // tree itself, not a circle to untie.
                let mut named = named_modules(&read(f), &at, &modules);
                named.retain(|m| !(m.len() < at.len() && at.starts_with(m)));
                (at, named)
            })
            .collect();
        if let Some(circle) = a_circle(&graph) {
            circles.push(format!("{member}: {}", circle.join(" → ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The README counts the built-in pipeline's steps as it is: all of them,
/// and those a default run (`build_plan`) does.
#[test]
fn the_readme_counts_the_built_in_pipeline_s_steps() {
    let readme = read(&root().join("README.md"));
    let pipeline = planb_core::pipelines::project_plan();
    let target = planb_core::dag::StepId::parse("build_plan").expect("id");
    let closure = pipeline.closure(&target).expect("build_plan is a step");
    let all = format!("pipeline ({} steps;", pipeline.steps().len());
    let default = format!(
        "`build_plan`, runs the {} that make the report",
        closure.len()
    );
    assert!(
        readme.contains(&all) && readme.contains(&default),
        "the README should say {all:?} and {default:?}"
    );
}

/// The checks see what they are meant to: a 71-line function planted after
/// a `#[cfg(test)] mod tests;` line is found, and a circle planted through a
/// relative path (`use b::…` in module `a`) is named.
#[test]
fn a_planted_long_function_and_a_planted_circle_are_found() {
    let mut text = String::from("#[cfg(test)]\nmod tests;\n\nfn planted() {\n");
    for n in 0..69 {
        text.push_str(&format!("    let _{n} = {n};\n"));
    }
    text.push_str("}\n");
    assert_eq!(long_functions(&text), [("planted".to_owned(), 4, 71)]);
    let module = |path: &str| -> Vec<String> { path.split("::").map(str::to_owned).collect() };
    let modules: BTreeSet<Vec<String>> = ["a", "a::b", "c"].into_iter().map(module).collect();
    let graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = [
        ("a", "mod b;\nuse b::Thing;\n"),
        ("a::b", "use crate::c::Other;\n"),
        ("c", "use crate::a::Thing;\n"),
    ]
    .into_iter()
    .map(|(at, text)| (module(at), named_modules(text, &module(at), &modules)))
    .collect();
    assert_eq!(
        a_circle(&graph),
        Some(vec!["a".to_owned(), "a::b".to_owned(), "c".to_owned()])
    );
}
