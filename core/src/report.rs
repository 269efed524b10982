//! A report's data: its sections, and the schedule a section's artifact
//! may hold (`{"tasks": [{id, name, duration_days, depends_on}]}`), each task
//! placed after its dependencies. The page itself is `planb-ui`'s.

use std::collections::BTreeMap;

use serde_json::Value;

/// One section of the report.
#[derive(Debug, Clone)]
pub struct Section<'a> {
    /// The step's id (the anchor).
    pub id: &'a str,
    /// The step's title.
    pub title: &'a str,
    /// Its artifact.
    pub text: &'a str,
}

/// A schedule's task with its computed start.
#[derive(Debug, Clone, PartialEq)]
pub struct Scheduled {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// First working day (0-based).
    pub start: u64,
    /// Working days.
    pub days: u64,
    /// What it waits for.
    pub depends_on: Vec<String>,
}

/// Most tasks drawn in one chart.
pub const GANTT_TASKS_MAX: usize = 500;
/// Longest task in days that is drawn as given.
const DAYS_MAX: u64 = 100_000;

/// Why a schedule artifact cannot be drawn; a task is named by its
/// position in `tasks`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The text does not parse; the parser's words.
    #[error("the schedule is not JSON: {0}")]
    NotJson(String),
    /// No `tasks` array.
    #[error("the schedule has no \"tasks\" list")]
    NoTasks,
    /// No tasks, or more than [`GANTT_TASKS_MAX`] (how many).
    #[error("the schedule must hold 1 to {GANTT_TASKS_MAX} tasks (got {0})")]
    TaskCount(usize),
    /// A task without an id.
    #[error("tasks[{0}].id: required, a string")]
    NoId(usize),
    /// A task without a duration.
    #[error("tasks[{0}].duration_days: required, a number")]
    NoDuration(usize),
    /// A dependency that is neither text nor a number.
    #[error("tasks[{0}].depends_on: ids must be strings")]
    DependencyNotAnId(usize),
    /// `depends_on` that is not a list.
    #[error("tasks[{0}].depends_on: must be a list")]
    DependsOnNotAList(usize),
    /// An id an earlier task has.
    #[error("tasks[{index}].id: {id:?} appears twice")]
    Twice {
        /// The later task.
        index: usize,
        /// The id.
        id: String,
    },
    /// A dependency no task has as its id.
    #[error("tasks[{index}].depends_on: no task {dependency:?}")]
    UnknownDependency {
        /// The task.
        index: usize,
        /// The id it waits for.
        dependency: String,
    },
    /// The dependencies form a cycle.
    #[error("the schedule's dependencies form a cycle")]
    Cycle,
}

/// `text` without a Markdown code fence around it (```` ```json ```` or
/// ```` ``` ````), trimmed.
pub fn unfenced(text: &str) -> &str {
    let trimmed = text.trim();
    trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .map_or(trimmed, str::trim)
}

/// Reads a schedule artifact and places each task after its dependencies.
/// A JSON answer wrapped in a Markdown code fence is accepted.
pub fn schedule(text: &str) -> Result<Vec<Scheduled>, ScheduleError> {
    let body = unfenced(text);
    let value: Value =
        serde_json::from_str(body).map_err(|e| ScheduleError::NotJson(e.to_string()))?;
    let tasks = value
        .get("tasks")
        .and_then(Value::as_array)
        .ok_or(ScheduleError::NoTasks)?;
    if tasks.is_empty() || tasks.len() > GANTT_TASKS_MAX {
        return Err(ScheduleError::TaskCount(tasks.len()));
    }
    let mut parsed = tasks
        .iter()
        .enumerate()
        .map(|(index, task)| schedule_task(index, task))
        .collect::<Result<Vec<_>, _>>()?;
    let starts = earliest_starts(&parsed)?;
    for (task, start) in parsed.iter_mut().zip(starts) {
        task.start = start;
    }
    Ok(parsed)
}

/// Reads `tasks[index]` of a schedule, its start still 0.
fn schedule_task(index: usize, task: &Value) -> Result<Scheduled, ScheduleError> {
    let field = |key: &str| task.get(key);
    let id = match field("id") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(ScheduleError::NoId(index)),
    };
    let name = field("name")
        .and_then(Value::as_str)
        .unwrap_or(&id)
        .to_owned();
    let days = field("duration_days")
        .and_then(|d| {
            d.as_u64()
                .or_else(|| d.as_f64().map(|f| f.ceil().max(0.0) as u64))
        })
        .ok_or(ScheduleError::NoDuration(index))?
        .min(DAYS_MAX);
    let depends_on = match field("depends_on") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|d| match d {
                Value::String(s) => Ok(s.trim().to_owned()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(ScheduleError::DependencyNotAnId(index)),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ScheduleError::DependsOnNotAList(index)),
    };
    Ok(Scheduled {
        id,
        name,
        start: 0,
        days,
        depends_on,
    })
}

/// Each task's earliest start: after every dependency ends (Kahn order).
/// Refuses an id given twice, an unknown dependency and a cycle.
fn earliest_starts(parsed: &[Scheduled]) -> Result<Vec<u64>, ScheduleError> {
    let mut at: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, task) in parsed.iter().enumerate() {
        let id = &task.id;
        if at.insert(id, index).is_some() {
            return Err(ScheduleError::Twice {
                index,
                id: id.clone(),
            });
        }
    }
    let mut waiting: Vec<usize> = vec![0; parsed.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); parsed.len()];
    for (index, task) in parsed.iter().enumerate() {
        for dep in &task.depends_on {
            let &from = at
                .get(dep.as_str())
                .ok_or_else(|| ScheduleError::UnknownDependency {
                    index,
                    dependency: dep.clone(),
                })?;
            waiting[index] += 1;
            dependents[from].push(index);
        }
    }
    let mut start = vec![0u64; parsed.len()];
    let mut ready: Vec<usize> = (0..parsed.len()).filter(|&i| waiting[i] == 0).collect();
    let mut done = 0;
    while let Some(index) = ready.pop() {
        done += 1;
        let end = start[index] + parsed[index].days;
        for &next in &dependents[index] {
            start[next] = start[next].max(end);
            waiting[next] -= 1;
            if waiting[next] == 0 {
                ready.push(next);
            }
        }
    }
    if done < parsed.len() {
        return Err(ScheduleError::Cycle);
    }
    Ok(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_places_tasks_after_their_dependencies() {
        let tasks = schedule(
            r#"```json
            {"tasks": [
              {"id": "1", "name": "Design", "duration_days": 5},
              {"id": "2", "name": "Build", "duration_days": 10, "depends_on": ["1"]},
              {"id": "3", "name": "Permits", "duration_days": 12},
              {"id": "4", "name": "Open", "duration_days": 1, "depends_on": ["2", "3"]}
            ]}
            ```"#,
        )
        .expect("a schedule");
        let starts: Vec<u64> = tasks.iter().map(|t| t.start).collect();
        assert_eq!(starts, [0, 5, 0, 15]);
        assert!(
            schedule(r#"{"tasks":[{"id":"a","duration_days":1,"depends_on":["a"]}]}"#)
                .expect_err("cycle")
                .to_string()
                .contains("cycle")
        );
        assert!(
            schedule(r#"{"tasks":[{"id":"a","duration_days":1,"depends_on":["b"]}]}"#)
                .expect_err("unknown")
                .to_string()
                .contains("no task \"b\"")
        );
        assert!(schedule("Just words").is_err());
    }
}
