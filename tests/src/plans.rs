//! Execution plans as the tests write them, and the calls the `downstream`
//! example MCP server notes (one JSON line per call, in the file its
//! `DOWNSTREAM_CALLS` names).

use std::path::Path;

use serde_json::{Value, json};

/// An execution-plan step titled "Step <index>", binding `var` when given.
pub fn step(index: &str, tool: &str, args: Value, deps: &[&str], var: Option<&str>) -> Value {
    let mut step = json!({"index": index, "title": format!("Step {index}"),
        "tool": tool, "args": args, "depends_on": deps});
    if let Some(var) = var {
        step["result_variable"] = json!(var);
    }
    step
}

/// The calls the downstream servers noted in `file` so far, in order
/// (none when it does not exist yet).
pub fn calls(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("call line"))
        .collect()
}
