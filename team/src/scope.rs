//! Which events leave the machine: the projects a person named in
//! `PLANB_TEAM_PROJECTS`, and the rule that places each event in one.
//!
//! A session belongs to the project path it was created with; its asks,
//! answers and plan versions follow it. A named plan belongs to the folder
//! its file is in. Tasks and execution plans record no project, so they are
//! shipped only when the list is `*` (everything). An event whose place is
//! unknown is withheld: nothing leaves by default.

use std::path::{Component, Path, PathBuf};

use std::collections::HashMap;

use planb_core::event::EventBody;
use planb_core::id::{AskId, SessionId, TaskId};

/// Longest `PLANB_TEAM_PROJECTS` value read, in bytes.
pub const PROJECTS_BYTES_MAX: usize = 64 * 1024;
/// Most entries in `PLANB_TEAM_PROJECTS`.
pub const PROJECTS_MAX: usize = 256;

/// The projects whose events are shipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Projects {
    everything: bool,
    patterns: Vec<glob::Pattern>,
    written: Vec<String>,
}

impl std::fmt::Display for Projects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.written.join(", "))
    }
}

/// Why an entry of `PLANB_TEAM_PROJECTS` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PLANB_TEAM_PROJECTS: entry {entry:?} {problem}")]
pub struct ProjectsError {
    /// The entry as written (shortened).
    pub entry: String,
    /// What is wrong with it.
    pub problem: String,
}

/// How a pattern meets a path: `*`, `?` and `[…]` stay within one
/// component, `**` spans any number of them; case counts.
const MATCHING: glob::MatchOptions = glob::MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

/// Where an event goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Shipped, under this project path when it has one.
    Ship {
        /// The session's project path or the named plan's folder.
        project: Option<String>,
    },
    /// Kept on this machine.
    Withhold,
}

impl Projects {
    /// Parses a list of absolute paths or globs separated by `:` or new
    /// lines (shell patterns: `*` and `?` within a component, `[ab]` and
    /// `[!ab]` classes, `**` as a whole component for any number of them;
    /// `~/` is `home`); `*` alone is everything. A path names its folder and
    /// everything under it; `.` and `..` are resolved as written.
    pub fn parse(text: &str, home: Option<&Path>) -> Result<Projects, ProjectsError> {
        if text.len() > PROJECTS_BYTES_MAX {
            return Err(problem(text, "starts a value longer than 64 KiB".into()));
        }
        let mut projects = Projects::default();
        for entry in text
            .split([':', '\n'])
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            if projects.patterns.len() >= PROJECTS_MAX {
                return Err(problem(entry, "is past the 256 entries read".into()));
            }
            projects.written.push(entry.to_string());
            if entry == "*" {
                projects.everything = true;
                continue;
            }
            projects.patterns.push(pattern(entry, home)?);
        }
        Ok(projects)
    }

    /// Everything is shipped (`*`).
    pub fn everything() -> Projects {
        Projects {
            everything: true,
            patterns: Vec::new(),
            written: vec!["*".into()],
        }
    }

    /// The list as one text (entries joined by `:`), to tell a change of
    /// scope.
    pub fn key(&self) -> String {
        self.written.join(":")
    }

    /// Nothing is shipped (the list is empty).
    pub fn is_empty(&self) -> bool {
        !self.everything && self.patterns.is_empty()
    }

    /// Whether tasks and execution plans are shipped.
    pub fn ships_tasks(&self) -> bool {
        self.everything
    }

    /// Whether `path` (a project folder or a folder under one) is shipped:
    /// where it leads once `.` and `..` are resolved; a relative path, or
    /// one whose `..` climbs above the root, is not.
    pub fn includes(&self, path: &str) -> bool {
        if self.everything {
            return true;
        }
        let Some(path) = lexical(Path::new(path)) else {
            return false;
        };
        path.ancestors().any(|folder| {
            self.patterns
                .iter()
                .any(|pattern| pattern.matches_path_with(folder, MATCHING))
        })
    }
}

fn problem(entry: &str, problem: String) -> ProjectsError {
    ProjectsError {
        entry: entry.chars().take(80).collect(),
        problem,
    }
}

/// The pattern an entry of the list names.
fn pattern(entry: &str, home: Option<&Path>) -> Result<glob::Pattern, ProjectsError> {
    let path = match (entry.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => home.join(rest),
        (Some(_), None) => {
            return Err(problem(entry, "starts with ~/ but HOME is not set".into()));
        }
        (None, _) => PathBuf::from(entry),
    };
    if !path.is_absolute() {
        return Err(problem(entry, "is not an absolute path (nor `*`)".into()));
    }
    let path =
        lexical(&path).ok_or_else(|| problem(entry, "climbs above the root with `..`".into()))?;
    let text = path
        .to_str()
        .ok_or_else(|| problem(entry, "is not UTF-8 once HOME is put in".into()))?;
    if has_brace(text) {
        return Err(problem(
            entry,
            "has braces, which these patterns do not expand: write each alternative as an entry of its own ([{] matches a brace)".into(),
        ));
    }
    glob::Pattern::new(text)
        .map_err(|e| problem(entry, format!("is not a pattern this reads: {e}")))
}

/// Whether `pattern` has a brace outside a `[…]` class.
fn has_brace(pattern: &str) -> bool {
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' | '}' => return true,
            '[' => {
                // A class: `]` right after `[` or `[!` is one of its members.
                chars.next_if_eq(&'!');
                chars.next_if_eq(&']');
                chars.by_ref().find(|c| *c == ']');
            }
            _ => {}
        }
    }
    false
}

/// `path` with `.` and `..` resolved as written (no link is followed);
/// `None` when it is relative or its `..` climbs above the root.
fn lexical(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(part) => out.push(part),
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What placing an event needs to remember of the events before it: the
/// sessions shipped and their asks, the tasks and plans shipped. What is
/// kept back is not remembered (not being known is being kept back), so
/// with `*` nothing is.
#[derive(Debug, Clone, Default)]
pub struct Placer {
    projects: Projects,
    sessions: HashMap<SessionId, String>,
    asks: HashMap<AskId, SessionId>,
    tasks: HashMap<TaskId, String>,
}

impl Placer {
    /// A placer that has seen no event yet.
    pub fn new(projects: Projects) -> Placer {
        Placer {
            projects,
            sessions: HashMap::new(),
            asks: HashMap::new(),
            tasks: HashMap::new(),
        }
    }

    /// Whether each event must be seen, from the log's start, to place the
    /// ones after it (not when everything is shipped).
    pub fn needs_history(&self) -> bool {
        !self.projects.everything
    }

    /// Where `body` goes; every event must be placed in the log's order.
    pub fn place(&mut self, body: &EventBody) -> Place {
        if self.projects.everything {
            return Place::Ship {
                project: project_of(body).filter(|p| !p.is_empty()),
            };
        }
        if let Some(task) = body.task() {
            return match self.task_project(task, body) {
                Some(project) => Place::Ship {
                    project: Some(project),
                },
                None => Place::Withhold,
            };
        }
        match self.named_project_of(body) {
            Some(project) => Place::Ship {
                project: Some(project),
            },
            None => Place::Withhold,
        }
    }

    /// The project `body` belongs to when it is one the projects name: a
    /// session's own, or its session's (an ask's through its session), or
    /// a named plan's by its plans directory. Sessions and asks are noted
    /// as they come.
    fn named_project_of(&mut self, body: &EventBody) -> Option<String> {
        match body {
            EventBody::SessionCreated {
                session,
                project_path: Some(path),
                ..
            } if self.projects.includes(path) => {
                self.sessions.insert(*session, path.clone());
                Some(path.clone())
            }
            EventBody::AskOpened { session, ask, .. } => {
                let project = self.sessions.get(session).cloned();
                if project.is_some() {
                    self.asks.insert(*ask, *session);
                }
                project
            }
            // A session of no project, or of one not named, and the rest.
            EventBody::SessionCreated { .. }
            | EventBody::AskDraftSaved { .. }
            | EventBody::AskAnswered { .. }
            | EventBody::AskTimedOut { .. }
            | EventBody::AskDeclined { .. }
            | EventBody::AskFailed { .. }
            | EventBody::AskLateAnswer { .. }
            | EventBody::PlanVersionSaved { .. }
            | EventBody::NamedPlanWritten { .. }
            | EventBody::NamedPlanEdited { .. }
            | EventBody::NamedPlanChangedOutside { .. }
            | EventBody::NamedPlanSubmitted { .. }
            | EventBody::NamedPlanReviewed { .. }
            | EventBody::TaskCreated { .. }
            | EventBody::RunStarted { .. }
            | EventBody::StepStarted { .. }
            | EventBody::StepSucceeded { .. }
            | EventBody::StepFailed { .. }
            | EventBody::ArtifactEdited { .. }
            | EventBody::StopRequested { .. }
            | EventBody::RunEnded { .. }
            | EventBody::RunLog { .. }
            | EventBody::PlanCreated { .. }
            | EventBody::PlanDeleted { .. }
            | EventBody::BlobStored { .. }
            | EventBody::TaskArchived { .. }
            | EventBody::TaskDeleted { .. } => match body.plans_dir() {
                Some(dir) => self.projects.includes(dir).then(|| dir.to_string()),
                None => self
                    .session_of(body)
                    .and_then(|s| self.sessions.get(&s).cloned()),
            },
        }
    }

    /// The project of the task or plan `task` an event is about when it is
    /// one the projects name: the one its creation recorded (noted then).
    fn task_project(&mut self, task: TaskId, body: &EventBody) -> Option<String> {
        if let EventBody::TaskCreated { project_path, .. }
        | EventBody::PlanCreated { project_path, .. } = body
        {
            let project = project_path.clone().filter(|p| self.projects.includes(p))?;
            self.tasks.insert(task, project.clone());
            return Some(project);
        }
        self.tasks.get(&task).cloned()
    }

    /// The shipped session an event is about, directly or through its ask.
    fn session_of(&self, body: &EventBody) -> Option<SessionId> {
        body.session()
            .or_else(|| body.ask().and_then(|ask| self.asks.get(&ask).copied()))
    }
}

/// The project an event names when everything is shipped: a session's
/// project path, or a named plan's plans directory.
fn project_of(body: &EventBody) -> Option<String> {
    match body {
        EventBody::SessionCreated { project_path, .. }
        | EventBody::TaskCreated { project_path, .. }
        | EventBody::PlanCreated { project_path, .. } => project_path.clone(),
        EventBody::AskOpened { .. }
        | EventBody::AskDraftSaved { .. }
        | EventBody::AskAnswered { .. }
        | EventBody::AskTimedOut { .. }
        | EventBody::AskDeclined { .. }
        | EventBody::AskFailed { .. }
        | EventBody::AskLateAnswer { .. }
        | EventBody::PlanVersionSaved { .. }
        | EventBody::NamedPlanWritten { .. }
        | EventBody::NamedPlanEdited { .. }
        | EventBody::NamedPlanChangedOutside { .. }
        | EventBody::NamedPlanSubmitted { .. }
        | EventBody::NamedPlanReviewed { .. }
        | EventBody::RunStarted { .. }
        | EventBody::StepStarted { .. }
        | EventBody::StepSucceeded { .. }
        | EventBody::StepFailed { .. }
        | EventBody::ArtifactEdited { .. }
        | EventBody::StopRequested { .. }
        | EventBody::RunEnded { .. }
        | EventBody::RunLog { .. }
        | EventBody::PlanDeleted { .. }
        | EventBody::BlobStored { .. }
        | EventBody::TaskArchived { .. }
        | EventBody::TaskDeleted { .. } => body.plans_dir().map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn projects(text: &str) -> Projects {
        Projects::parse(text, Some(Path::new("/home/ana"))).expect("parses")
    }

    #[test]
    fn a_path_names_its_folder_and_everything_under_it() {
        let p = projects("/src/shop");
        assert!(p.includes("/src/shop"));
        assert!(p.includes("/src/shop/docs/plans"));
        assert!(!p.includes("/src/shopping"));
        assert!(!p.includes("/src"));
        assert!(!p.includes("src/shop"));
        assert!(!p.ships_tasks());
    }

    #[test]
    fn globs_match_within_a_component_or_across_with_two_stars() {
        let p = projects("~/work/*-api:/srv/**/plans");
        assert!(p.includes("/home/ana/work/shop-api/docs"));
        assert!(!p.includes("/home/ana/work/shop-web"));
        assert!(p.includes("/srv/a/b/plans"));
        assert!(p.includes("/srv/plans/x"));
        assert!(!p.includes("/srv/a/b"));
    }

    #[test]
    fn star_alone_is_everything_and_empty_is_nothing() {
        assert!(projects("*").includes("relative/too"));
        assert!(projects("*").ships_tasks());
        assert!(projects(" : \n").is_empty());
    }

    #[test]
    fn a_task_or_plan_follows_the_project_it_was_made_for_and_so_do_its_runs() {
        let id = |n: u128| TaskId::from_uuid(uuid::Uuid::from_u128(n));
        let task = |task, project: Option<&str>| EventBody::TaskCreated {
            task,
            pipeline: "project-plan".into(),
            pipeline_version: 1,
            prompt: "p".into(),
            speed: "fast".into(),
            target: "build_plan".into(),
            model_profile: None,
            client_request_id: None,
            project_path: project.map(Into::into),
        };
        let plan = |task, project: &str| EventBody::PlanCreated {
            task,
            title: "t".into(),
            definition: "{}".into(),
            client_request_id: None,
            project_path: Some(project.into()),
        };
        let ended = |task| EventBody::TaskArchived { task };
        let shop = Place::Ship {
            project: Some("/src/shop".into()),
        };
        let mut placer = Placer::new(projects("/src/shop"));
        assert_eq!(placer.place(&task(id(1), Some("/src/shop"))), shop);
        assert_eq!(
            placer.place(&task(id(2), Some("/src/secret"))),
            Place::Withhold
        );
        assert_eq!(placer.place(&task(id(3), None)), Place::Withhold);
        assert_eq!(placer.place(&plan(id(4), "/src/shop")), shop);
        // A project's path as written, dots resolved: not the shop.
        assert_eq!(
            placer.place(&plan(id(5), "/src/shop/../secret")),
            Place::Withhold
        );
        for (n, place) in [(1, &shop), (2, &Place::Withhold), (3, &Place::Withhold)] {
            assert_eq!(placer.place(&ended(id(n))), *place, "task {n}");
        }
        assert_eq!(placer.place(&ended(id(4))), shop);
        assert_eq!(placer.place(&ended(id(5))), Place::Withhold);
        // Everything ships; a task's creation names its project.
        let mut everything = Placer::new(Projects::everything());
        assert_eq!(everything.place(&task(id(6), Some("/src/shop"))), shop);
        assert_eq!(
            everything.place(&task(id(7), None)),
            Place::Ship { project: None }
        );
    }

    #[test]
    fn a_session_s_asks_and_plans_follow_it_and_a_task_of_no_named_project_stays() {
        use planb_core::id::PlanName;
        let id = |n: u128| uuid::Uuid::from_u128(n);
        let (shop, secret) = (SessionId::from_uuid(id(1)), SessionId::from_uuid(id(2)));
        let session = |session, path: &str| EventBody::SessionCreated {
            session,
            title: None,
            intent: None,
            project_path: Some(path.into()),
        };
        let ask = |session, n| EventBody::AskOpened {
            session,
            ask: AskId::from_uuid(id(n)),
            spec: planb_core::AskSpec::from_json(&serde_json::json!({
                "title": "t", "questions": [{"id": "q", "kind": "text", "label": "Q"}]
            }))
            .expect("spec"),
            delivery: planb_core::Delivery::BrowserOpened,
            url: String::new(),
            sid_sha256: [0; 32],
        };
        let timed_out = |n| EventBody::AskTimedOut {
            ask: AskId::from_uuid(id(n)),
        };
        let plan = |dir: &str| EventBody::NamedPlanSubmitted {
            plan: PlanName::parse("p").expect("name"),
            plans_dir: dir.into(),
            round: 1,
        };
        let task = EventBody::TaskDeleted {
            task: TaskId::from_uuid(id(9)),
        };
        let mut placer = Placer::new(projects("/src/shop"));
        let shipped = |place: Place| matches!(place, Place::Ship { project: Some(p) } if p.starts_with("/src/shop"));
        assert!(shipped(placer.place(&session(shop, "/src/shop"))));
        assert_eq!(
            placer.place(&session(secret, "/src/secret")),
            Place::Withhold
        );
        assert!(shipped(placer.place(&ask(shop, 10))));
        assert_eq!(placer.place(&ask(secret, 11)), Place::Withhold);
        assert!(shipped(placer.place(&timed_out(10))));
        assert_eq!(placer.place(&timed_out(11)), Place::Withhold);
        assert!(shipped(placer.place(&plan("/src/shop/docs/plans"))));
        assert_eq!(
            placer.place(&plan("/src/secret/docs/plans")),
            Place::Withhold
        );
        assert_eq!(placer.place(&task), Place::Withhold);
        let mut everything = Placer::new(Projects::everything());
        assert!(!everything.needs_history());
        assert_eq!(everything.place(&task), Place::Ship { project: None });
    }

    /// A path through `..` is matched where it leads, not as written: a
    /// session in `/work/allowed/../secret` is in `/work/secret`.
    #[test]
    fn a_path_is_matched_where_its_dots_lead() {
        let p = projects("/work/allowed/*");
        assert!(!p.includes("/work/allowed/../secret"));
        assert!(!p.includes("/work/allowed/x/../../secret"));
        assert!(p.includes("/work/allowed/./x/../y"));
        assert!(
            !p.includes("/work/allowed/x/../../../../etc"),
            "above the root"
        );
        let p = projects("/work/a/../b");
        assert!(p.includes("/work/b/c"), "an entry is normalised too");
        assert!(!p.includes("/work/a/c"));
        let mut placer = Placer::new(projects("/work/allowed/*"));
        let session = EventBody::SessionCreated {
            session: SessionId::from_uuid(uuid::Uuid::from_u128(1)),
            title: None,
            intent: None,
            project_path: Some("/work/allowed/../secret".into()),
        };
        assert_eq!(placer.place(&session), Place::Withhold);
    }

    /// Character classes match as a shell's do; a pattern that cannot be
    /// read is refused, naming it.
    #[test]
    fn globs_have_a_shell_s_character_classes() {
        let p = projects("/tmp/proj-[ab]-*");
        assert!(p.includes("/tmp/proj-a-1"));
        assert!(p.includes("/tmp/proj-b-2/docs"));
        assert!(!p.includes("/tmp/proj-c-1"));
        let p = projects("/tmp/proj-[!ab]?");
        assert!(p.includes("/tmp/proj-cx"));
        assert!(!p.includes("/tmp/proj-ax"));
        assert!(!projects("/srv/*").includes("/srv"), "a star needs a name");
        let error = Projects::parse("/ok:/tmp/proj-[ab", None).expect_err("unclosed");
        assert_eq!(error.entry, "/tmp/proj-[ab");
        assert!(error.to_string().contains("PLANB_TEAM_PROJECTS"), "{error}");
        let error = Projects::parse("/tmp/a**b", None).expect_err("** inside a name");
        assert!(error.to_string().contains("a**b"), "{error}");
        let error = Projects::parse("/src/{shop,web}", None).expect_err("braces");
        assert!(error.to_string().contains("braces"), "{error}");
        assert!(projects("/src/[{]shop[}]").includes("/src/{shop}"));
    }

    #[test]
    fn a_relative_entry_is_refused_naming_it() {
        let error = Projects::parse("/ok:docs/x", None).expect_err("relative");
        assert_eq!(error.entry, "docs/x");
        assert!(error.to_string().contains("PLANB_TEAM_PROJECTS"), "{error}");
        assert!(Projects::parse("~/x", None).is_err());
    }
}
