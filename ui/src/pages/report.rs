//! The `report` page: one self-contained HTML file from a task's artifacts
//! (no script, no network: styles inline, the Gantt chart as inline SVG),
//! which opens straight from disk.
//!
//! Sections follow the render step's `needs` in order. Markdown is rendered
//! and sanitised as on every page. An artifact holding a schedule becomes a
//! Gantt chart and a table (`planb_core::report::schedule`); one that does
//! not parse is shown as text with a note.

use maud::{DOCTYPE, Markup, PreEscaped, html};
use planb_core::report::{Scheduled, Section, schedule};

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
        html! { (PreEscaped(crate::markdown::render(section.text))) }
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
