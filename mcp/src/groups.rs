//! Tool groups: which tools a server lists and serves (`--tools`,
//! `PLANB_TOOLS`), so an agent that needs only some pays only for those in
//! its context. Every tool belongs to one group; the default is all.

use std::collections::BTreeSet;

use crate::args::ArgErrors;

/// A group of tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// `init_planb_session`, `ask_user`, `save_plan`.
    Sessions,
    /// `write_plan`, `edit_plan`, `submit_plan` (and the `plan` prompt).
    Review,
    /// `prompt_examples` and the `task_*` tools.
    Tasks,
    /// The execution-plan tools `plan_*`.
    Plans,
}

/// Every group, in the order they are named.
pub const GROUPS: [Group; 4] = [Group::Sessions, Group::Review, Group::Tasks, Group::Plans];

impl Group {
    /// Its name in `--tools`.
    pub fn name(self) -> &'static str {
        match self {
            Group::Sessions => "sessions",
            Group::Review => "review",
            Group::Tasks => "tasks",
            Group::Plans => "plans",
        }
    }

    /// The group of the tool `tool`.
    pub fn of(tool: &str) -> Option<Group> {
        match tool {
            "init_planb_session" | "init_browser_plan_session" | "ask_user" | "save_plan" => {
                Some(Group::Sessions)
            }
            "write_plan" | "edit_plan" | "submit_plan" => Some(Group::Review),
            "prompt_examples" => Some(Group::Tasks),
            t if t.starts_with("task_") => Some(Group::Tasks),
            t if t.starts_with("plan_") => Some(Group::Plans),
            _ => None,
        }
    }
}

/// Whether `tool` is another name for a tool (served, listed only when
/// `aliases` is selected).
pub fn is_alias(tool: &str) -> bool {
    matches!(tool, "task_recent" | "init_browser_plan_session")
}

/// The groups a server serves, and whether it lists the other names tools
/// have (`aliases`: `task_recent`, `init_browser_plan_session`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection(BTreeSet<Group>, bool);

impl Default for Selection {
    fn default() -> Selection {
        Selection(GROUPS.into_iter().collect(), false)
    }
}

/// What a selection may name.
const KNOWN: &str = "groups: sessions, review, tasks, plans, all; and aliases";

impl Selection {
    /// `sessions,review`, `all`, `tasks,aliases`: names separated by commas
    /// (spaces allowed). `aliases` alone lists the other names beside every
    /// tool. An unknown name is an error listing the known ones.
    pub fn parse(text: &str) -> Result<Selection, ArgErrors> {
        let mut chosen = BTreeSet::new();
        let mut aliases = false;
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "all" => chosen.extend(GROUPS),
                "aliases" => aliases = true,
                _ => {
                    let group = GROUPS
                        .into_iter()
                        .find(|g| g.name() == word)
                        .ok_or_else(|| {
                            ArgErrors::one(format!("unknown tool group {word:?} ({KNOWN})"))
                        })?;
                    chosen.insert(group);
                }
            }
        }
        if chosen.is_empty() && !aliases {
            return Err(ArgErrors::one(format!("names no tool group ({KNOWN})")));
        }
        if chosen.is_empty() {
            chosen.extend(GROUPS);
        }
        Ok(Selection(chosen, aliases))
    }

    /// Whether the other names tools have are listed.
    pub fn aliases(&self) -> bool {
        self.1
    }

    /// Whether `tool` (one served) is listed: another name only with
    /// `aliases`, or, for browser-plan's, when its setup was brought along.
    pub fn lists(&self, tool: &str, browser_plan_names: bool) -> bool {
        match tool {
            "init_browser_plan_session" => browser_plan_names || self.aliases(),
            _ => !is_alias(tool) || self.aliases(),
        }
    }

    /// Whether `group` is served.
    pub fn has(&self, group: Group) -> bool {
        self.0.contains(&group)
    }

    /// Whether the tool `tool` is served (a tool of no group always is).
    pub fn serves(&self, tool: &str) -> bool {
        Group::of(tool).is_none_or(|g| self.has(g))
    }

    /// What a call of `tool`, which is not served, is told.
    pub fn refusal(tool: &str) -> String {
        let group = Group::of(tool).map_or("all", Group::name);
        format!(
            "{tool} is not enabled in this planb-mcp: its group is \"{group}\". Start planb-mcp with --tools {group} (or PLANB_TOOLS={group}; \"all\" serves every tool) to use it"
        )
    }
}

/// `tool` as listed, without what costs every agent tokens and tells it
/// nothing: the schemas' `$schema` and titles, the input schema's own
/// description (the tool's says it), and the descriptions inside the output
/// schema (which serves validation; the tool's description says what comes
/// back).
pub fn lean(tool: &mut rmcp::model::Tool) {
    if let Some(hints) = &mut tool.annotations {
        lean_hints(hints, tool.title.as_deref());
        if *hints == rmcp::model::ToolAnnotations::default() {
            tool.annotations = None;
        }
    }
    let mut input = (*tool.input_schema).clone();
    for key in ["$schema", "title", "description"] {
        input.remove(key);
    }
    let mut input = serde_json::Value::Object(input);
    crate::schema::optional_not_null(&mut input);
    if let serde_json::Value::Object(input) = input {
        tool.input_schema = std::sync::Arc::new(input);
    }
    if let Some(output) = &tool.output_schema {
        let mut output = serde_json::Value::Object((**output).clone());
        crate::schema::strip_prose(&mut output);
        if let serde_json::Value::Object(output) = output {
            tool.output_schema = Some(std::sync::Arc::new(output));
        }
    }
}

/// Leaves out of a tool's annotations what the protocol already says: a
/// title the tool's own repeats, a hint at its default value (read-only
/// false, destructive true, idempotent false, open-world true), and the
/// destructive and idempotent hints of a read-only tool, which mean nothing
/// there.
fn lean_hints(hints: &mut rmcp::model::ToolAnnotations, title: Option<&str>) {
    if hints.title.as_deref() == title {
        hints.title = None;
    }
    let read_only = hints.read_only_hint == Some(true);
    if hints.read_only_hint == Some(false) {
        hints.read_only_hint = None;
    }
    if read_only || hints.destructive_hint == Some(true) {
        hints.destructive_hint = None;
    }
    if read_only || hints.idempotent_hint == Some(false) {
        hints.idempotent_hint = None;
    }
    if hints.open_world_hint == Some(true) {
        hints.open_world_hint = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_parse_by_name_and_every_tool_has_one() {
        let picked = Selection::parse("sessions, plans").expect("valid");
        assert!(picked.serves("ask_user") && picked.serves("plan_execute"));
        assert!(!picked.serves("task_create") && !picked.serves("write_plan"));
        assert_eq!(Selection::parse("all"), Ok(Selection::default()));
        let unknown = Selection::parse("sessions,everything").expect_err("unknown");
        assert!(unknown.to_string().contains("\"everything\""), "{unknown}");
        assert!(Selection::parse(" , ").is_err());
        assert!(Selection::refusal("task_create").contains("--tools tasks"));
        let named = Selection::parse("aliases").expect("valid");
        assert!(named.aliases() && named.serves("task_list") && named.serves("plan_show"));
        assert!(!Selection::default().aliases());
    }
}
