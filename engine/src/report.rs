//! The `report` renderer: one self-contained HTML file from a task's
//! artifacts (no script, no network: styles inline, the Gantt chart as
//! inline SVG), which opens straight from disk.
//!
//! Sections follow the render step's `needs` in order. Markdown is rendered
//! and sanitised by `planb-ui`. An artifact holding a schedule
//! (`{"tasks": [{id, name, duration_days, depends_on}]}`) becomes a Gantt
//! chart and a table; one that does not parse is shown as text with a note.

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, PreEscaped, html};
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
const GANTT_TASKS_MAX: usize = 500;
/// Longest task in days that is drawn as given.
const DAYS_MAX: u64 = 100_000;

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
pub fn schedule(text: &str) -> Result<Vec<Scheduled>, String> {
    let body = unfenced(text);
    let value: Value =
        serde_json::from_str(body).map_err(|e| format!("the schedule is not JSON: {e}"))?;
    let tasks = value
        .get("tasks")
        .and_then(Value::as_array)
        .ok_or("the schedule has no \"tasks\" list")?;
    if tasks.is_empty() || tasks.len() > GANTT_TASKS_MAX {
        return Err(format!(
            "the schedule must hold 1 to {GANTT_TASKS_MAX} tasks (got {})",
            tasks.len()
        ));
    }
    let mut parsed = Vec::with_capacity(tasks.len());
    for (index, task) in tasks.iter().enumerate() {
        let field = |key: &str| task.get(key);
        let id = match field("id") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
            Some(Value::Number(n)) => n.to_string(),
            _ => return Err(format!("tasks[{index}].id: required, a string")),
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
            .ok_or(format!("tasks[{index}].duration_days: required, a number"))?
            .min(DAYS_MAX);
        let depends_on = match field("depends_on") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|d| match d {
                    Value::String(s) => Ok(s.trim().to_owned()),
                    Value::Number(n) => Ok(n.to_string()),
                    _ => Err(format!("tasks[{index}].depends_on: ids must be strings")),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(format!("tasks[{index}].depends_on: must be a list")),
        };
        parsed.push((id, name, days, depends_on));
    }
    let mut at: BTreeMap<&str, usize> = BTreeMap::new();
    for (index, (id, ..)) in parsed.iter().enumerate() {
        if at.insert(id, index).is_some() {
            return Err(format!("tasks[{index}].id: {id:?} appears twice"));
        }
    }
    // Earliest start: after every dependency ends (Kahn order).
    let mut waiting: Vec<usize> = vec![0; parsed.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); parsed.len()];
    for (index, (_, _, _, deps)) in parsed.iter().enumerate() {
        for dep in deps {
            let &from = at
                .get(dep.as_str())
                .ok_or(format!("tasks[{index}].depends_on: no task {dep:?}"))?;
            waiting[index] += 1;
            dependents[from].push(index);
        }
    }
    let mut start = vec![0u64; parsed.len()];
    let mut ready: Vec<usize> = (0..parsed.len()).filter(|&i| waiting[i] == 0).collect();
    let mut done = 0;
    while let Some(index) = ready.pop() {
        done += 1;
        let end = start[index] + parsed[index].2;
        for &next in &dependents[index] {
            start[next] = start[next].max(end);
            waiting[next] -= 1;
            if waiting[next] == 0 {
                ready.push(next);
            }
        }
    }
    if done < parsed.len() {
        return Err("the schedule's dependencies form a cycle".into());
    }
    Ok(parsed
        .into_iter()
        .zip(start)
        .map(|((id, name, days, depends_on), start)| Scheduled {
            id,
            name,
            start,
            days,
            depends_on,
        })
        .collect())
}

fn gantt(tasks: &[Scheduled]) -> Markup {
    let span = tasks
        .iter()
        .map(|t| t.start + t.days)
        .max()
        .unwrap_or(1)
        .max(1);
    let (label_w, chart_w, row_h) = (260.0, 640.0, 22.0);
    let scale = chart_w / span as f64;
    let height = row_h * tasks.len() as f64 + 30.0;
    let width = label_w + chart_w + 20.0;
    html! {
        svg.gantt xmlns="http://www.w3.org/2000/svg" role="img"
            viewBox=(format!("0 0 {width} {height}")) width=(width) height=(height)
            aria-label=(format!("Gantt chart of {} tasks over {span} working days", tasks.len())) {
            @for week in (0..=span).step_by(usize::try_from((span / 10).max(5)).unwrap_or(5)) {
                @let x = label_w + week as f64 * scale;
                line x1=(x) x2=(x) y1="0" y2=(height - 20.0) class="grid" {}
                text x=(x) y=(height - 6.0) class="axis" { "d" (week) }
            }
            @for (row, task) in tasks.iter().enumerate() {
                @let y = row as f64 * row_h;
                text x="4" y=(y + 15.0) class="label" {
                    (task.id) " " (task.name.chars().take(34).collect::<String>())
                }
                rect x=(label_w + task.start as f64 * scale) y=(y + 4.0)
                    width=((task.days as f64 * scale).max(2.0)) height=(row_h - 8.0) rx="3" class="bar" {
                    title { (task.name) ": day " (task.start) " to " (task.start + task.days) }
                }
            }
        }
    }
}

fn section(section: &Section<'_>) -> Markup {
    let looks_like_schedule =
        section.text.trim_start().starts_with('{') || section.text.trim_start().starts_with("```");
    let body = if looks_like_schedule {
        match schedule(section.text) {
            Ok(tasks) => html! {
                (gantt(&tasks))
                table {
                    thead { tr { th { "Id" } th { "Task" } th { "Start (day)" } th { "Days" } th { "After" } } }
                    tbody {
                        @for t in &tasks {
                            tr { td { (t.id) } td { (t.name) } td { (t.start) } td { (t.days) } td { (t.depends_on.join(", ")) } }
                        }
                    }
                }
            },
            Err(problem) => html! {
                p.note { "This artifact could not be drawn as a schedule: " (problem) }
                pre { (section.text) }
            },
        }
    } else {
        html! { (PreEscaped(planb_ui::markdown::render(section.text))) }
    };
    html! {
        section id=(section.id) {
            h2 { (section.title) }
            (body)
        }
    }
}

const STYLE: &str = "
:root{color-scheme:light dark;--fg:#1d1f23;--bg:#fff;--muted:#5d6470;--line:#d9dde3;--accent:#2f6fd0}
@media (prefers-color-scheme:dark){:root{--fg:#e6e8eb;--bg:#16181c;--muted:#9aa1ab;--line:#343a42;--accent:#6aa2ff}}
body{font:16px/1.55 system-ui,sans-serif;color:var(--fg);background:var(--bg);margin:0}
main{max-width:60rem;margin:0 auto;padding:2rem 1.25rem 4rem}
header p{color:var(--muted)} nav ol{columns:2;padding-left:1.2rem}
section{border-top:1px solid var(--line);padding-top:1rem;margin-top:2rem}
table{border-collapse:collapse;width:100%;margin:1rem 0}td,th{border:1px solid var(--line);padding:.3rem .5rem;text-align:left;vertical-align:top}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:rgba(127,127,127,.1);padding:.75rem;border-radius:6px}
a{color:var(--accent)} .note{color:var(--muted)}
svg.gantt{max-width:100%;height:auto;font:11px system-ui,sans-serif}
svg.gantt .bar{fill:var(--accent)} svg.gantt .grid{stroke:var(--line)} svg.gantt text{fill:var(--fg)} svg.gantt .axis{fill:var(--muted)}
";

/// The report: a title, the request, a table of contents and each section.
pub fn render(title: &str, request: &str, generated_at: &str, sections: &[Section<'_>]) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:";
                title { (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                main {
                    header {
                        h1 { (title) }
                        p { "A draft plan generated by planb on " (generated_at) ". Refine it before acting on it." }
                        details { summary { "The request" } pre { (request) } }
                    }
                    nav aria-label="Contents" {
                        h2 { "Contents" }
                        ol { @for s in sections { li { a href=(format!("#{}", s.id)) { (s.title) } } } }
                    }
                    @for s in sections { (section(s)) }
                }
            }
        }
    }
    .into_string()
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
                .contains("cycle")
        );
        assert!(
            schedule(r#"{"tasks":[{"id":"a","duration_days":1,"depends_on":["b"]}]}"#)
                .expect_err("unknown")
                .contains("no task \"b\"")
        );
        assert!(schedule("Just words").is_err());
    }

    #[test]
    fn the_report_escapes_text_and_draws_the_schedule() {
        let html = render(
            "Plan <b>",
            "Open a bakery <script>",
            "2026-11-23",
            &[
                Section {
                    id: "summary",
                    title: "Summary",
                    text: "Hello **world** <script>alert(1)</script>",
                },
                Section {
                    id: "schedule",
                    title: "Schedule",
                    text: r#"{"tasks":[{"id":"1","name":"Dig","duration_days":3}]}"#,
                },
                Section {
                    id: "broken",
                    title: "Broken",
                    text: "{not json",
                },
            ],
        );
        assert!(html.contains("<strong>world</strong>"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("Plan &lt;b&gt;"));
        assert!(html.contains("<svg class=\"gantt\""));
        assert!(html.contains("could not be drawn as a schedule"));
        assert!(html.contains("href=\"#schedule\""));
    }
}
