//! How `plan run` / `plan resume` show a run as it goes.
//!
//! On a terminal the DAG is redrawn in place (marks ○ ◉ ● ✗),
//! with a line of counts and the latest failures under it; each frame
//! replaces the last one by moving the cursor up over it and clearing to
//! the end of the screen. A DAG taller than the terminal is shown as the
//! counts and the running and failed steps only. Lines are cut to the
//! terminal's width so none wraps (a wrapped line would throw the
//! cursor arithmetic off). Frames are at most one per [`FRAME_INTERVAL`]:
//! an event that comes sooner is drawn at the next [`Display::tick`], which
//! also keeps the elapsed time moving; the last frame is always drawn.
//!
//! Anywhere else (a pipe, a file, `TERM=dumb`) each event is one plain
//! line, so logs and scripts read it.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_app::plans::Progress;
use planb_core::exec_plan::{ExecPlan, StepMark, render_dag};
use planb_core::text::{clip, visible};

/// The shortest time between two frames, and how often to [`Display::tick`].
pub(crate) const FRAME_INTERVAL: Duration = Duration::from_millis(100);
/// The longest time between two frames while a run goes on.
const REFRESH: Duration = Duration::from_millis(500);
/// Failures kept under a live frame (the newest).
const FAILURES_SHOWN: usize = 3;

/// Whether stdout is a terminal that understands cursor movement.
pub fn stdout_is_live() -> bool {
    use std::io::IsTerminal;
    io::stdout().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// The terminal's size as (rows, columns), if stdout is one.
fn terminal_size() -> Option<(usize, usize)> {
    let size = rustix::termios::tcgetwinsize(io::stdout()).ok()?;
    (size.ws_row > 0 && size.ws_col > 0)
        .then(|| (usize::from(size.ws_row), usize::from(size.ws_col)))
}

/// A run's progress as shown.
pub(crate) enum Display {
    /// One plain line per event.
    Lines,
    /// The DAG redrawn in place.
    Live(Box<Live>),
}

impl Display {
    /// Shows `event`.
    pub(crate) fn show(&mut self, event: &Progress, out: &mut dyn Write) -> io::Result<()> {
        match (self, event) {
            (Display::Lines, _) => line(event, out),
            // A revised plan is drawn anew below the last frame of the one
            // it revises.
            (Display::Live(live), Progress::Revised(revised)) => {
                live.draw(out, true)?;
                line(event, out)?;
                let steps = revised.plan.steps.len();
                **live = Live::new(Arc::clone(&revised.plan), vec![StepMark::Pending; steps]);
                live.draw(out, false)
            }
            (Display::Live(live), _) => {
                live.apply(event);
                live.draw(out, false)
            }
        }
    }

    /// Draws what waits to be drawn (live).
    pub(crate) fn tick(&mut self, out: &mut dyn Write) -> io::Result<()> {
        match self {
            Display::Lines => Ok(()),
            Display::Live(live) => {
                let stale = live.last_frame.is_none_or(|t| t.elapsed() >= REFRESH);
                if live.dirty || stale {
                    live.draw(out, false)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Draws the last frame (live) once the run has ended.
    pub(crate) fn finish(&mut self, out: &mut dyn Write) -> io::Result<()> {
        match self {
            Display::Lines => Ok(()),
            Display::Live(live) => live.draw(out, true),
        }
    }
}

/// One event as a line; a title, tool name or error shows its control
/// characters instead of sending them to the terminal.
fn line(event: &Progress, out: &mut dyn Write) -> io::Result<()> {
    let text = match event {
        Progress::Started { index } => format!("  ◉ step {index} started"),
        Progress::Ended(report) if report.reused => format!(
            "  ● step {} {} [{}]: recorded result reused, not called again",
            report.index, report.title, report.tool
        ),
        Progress::Ended(report) if report.success => format!(
            "  ● step {} {} [{}] ({} ms)",
            report.index, report.title, report.tool, report.duration_ms
        ),
        Progress::Ended(report) => format!(
            "  ✗ step {} {} [{}]: {}",
            report.index,
            report.title,
            report.tool,
            report.error.as_deref().unwrap_or("failed")
        ),
        Progress::Replanning { number, step, .. } => {
            format!("  ↻ step {step} failed: asking the model for revised plan {number}")
        }
        Progress::Revised(revised) => format!(
            "\nRevised plan {}: {} ({}), run with the variables as they are:\n\n{}",
            revised.number,
            revised.plan.title,
            revised.plan_id,
            render_dag(&revised.plan, |_| StepMark::Pending)
        ),
    };
    // Only a revised plan's drawing spans lines.
    let lines = matches!(event, Progress::Revised(_));
    writeln!(out, "{}", visible(&text, lines))?;
    out.flush()
}

/// The state of a live display.
pub(crate) struct Live {
    plan: Arc<ExecPlan>,
    marks: Vec<StepMark>,
    failures: Vec<String>,
    started: Instant,
    /// Rows the last frame took (the cursor is on the row below it).
    drawn: usize,
    last_frame: Option<Instant>,
    /// Something changed since the last frame.
    dirty: bool,
    /// The terminal's size; `None` draws at 24 × 80.
    size: fn() -> Option<(usize, usize)>,
}

impl Live {
    /// A live display of `plan`, its steps marked `marks` to begin with (a
    /// resume starts with what earlier runs completed).
    pub(crate) fn new(plan: Arc<ExecPlan>, marks: Vec<StepMark>) -> Live {
        Live {
            plan,
            marks,
            failures: Vec::new(),
            started: Instant::now(),
            drawn: 0,
            last_frame: None,
            dirty: true,
            size: terminal_size,
        }
    }

    fn apply(&mut self, event: &Progress) {
        self.dirty = true;
        let (index, mark) = match event {
            Progress::Replanning { number, step, .. } => {
                self.failures.push(format!(
                    "↻ step {step} failed: asking the model for revised plan {number}"
                ));
                return;
            }
            Progress::Revised(_) => return,
            Progress::Started { index } => (index, StepMark::Running),
            Progress::Ended(report) => {
                if !report.success {
                    self.failures.push(format!(
                        "✗ step {} [{}]: {}",
                        report.index,
                        report.tool,
                        report.error.as_deref().unwrap_or("failed")
                    ));
                    let extra = self.failures.len().saturating_sub(FAILURES_SHOWN);
                    self.failures.drain(..extra);
                }
                let mark = if report.success {
                    StepMark::Completed
                } else {
                    StepMark::Failed
                };
                (&report.index, mark)
            }
        };
        if let Some(at) = self.plan.position(index) {
            self.marks[at] = mark;
        }
    }

    fn counts(&self) -> String {
        let count = |m: StepMark| self.marks.iter().filter(|&&x| x == m).count();
        let mut text = format!(
            "{}/{} steps done",
            count(StepMark::Completed),
            self.marks.len()
        );
        for (mark, word) in [(StepMark::Running, "running"), (StepMark::Failed, "failed")] {
            let n = count(mark);
            if n > 0 {
                text.push_str(&format!(" · {n} {word}"));
            }
        }
        text.push_str(&format!(" · {:.1}s", self.started.elapsed().as_secs_f64()));
        text
    }

    /// The frame's lines for a terminal of `rows` × `columns`.
    fn frame(&self, rows: usize, columns: usize) -> Vec<String> {
        let width = columns.saturating_sub(1).max(1);
        let cut = |text: &str| clip(&visible(text, false), width);
        let dag = render_dag(&self.plan, |at| self.marks[at]);
        let mut lines: Vec<String> = dag.lines().map(cut).collect();
        lines.push(String::new());
        lines.push(cut(&self.counts()));
        lines.extend(self.failures.iter().map(|f| cut(f)));
        // The cursor needs a row below the frame.
        if lines.len() < rows {
            return lines;
        }
        // Too tall: the counts, then the running and failed steps, as many
        // as fit.
        let mut compact = vec![cut(&self.counts())];
        let room = rows.saturating_sub(2).max(1);
        let active: Vec<String> = self
            .plan
            .steps
            .iter()
            .zip(&self.marks)
            .filter(|(_, m)| matches!(m, StepMark::Running | StepMark::Failed))
            .map(|(step, m)| cut(&format!("  {} {}. {}", m.symbol(), step.index, step.title)))
            .collect();
        if active.len() <= room.saturating_sub(1) {
            compact.extend(active);
        } else {
            let shown = room.saturating_sub(2);
            compact.extend(active.iter().take(shown).cloned());
            compact.push(format!("  … {} more", active.len() - shown));
        }
        compact
    }

    fn draw(&mut self, out: &mut dyn Write, last: bool) -> io::Result<()> {
        let now = Instant::now();
        if !last && self.last_frame.is_some_and(|t| now - t < FRAME_INTERVAL) {
            return Ok(());
        }
        self.last_frame = Some(now);
        self.dirty = false;
        let (rows, columns) = (self.size)().unwrap_or((24, 80));
        let frame = self.frame(rows, columns);
        let mut text = String::new();
        if self.drawn > 0 {
            // Up over the last frame, to its first column, and clear from
            // there to the end of the screen.
            text.push_str(&format!("\x1b[{}A\r\x1b[J", self.drawn));
        }
        for line in &frame {
            text.push_str(line);
            text.push('\n');
        }
        self.drawn = frame.len();
        out.write_all(text.as_bytes())?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use planb_app::plans::StepReport;
    use serde_json::json;

    fn plan() -> ExecPlan {
        let value = json!({"title": "t", "steps": [
            {"index": "1", "title": "First", "tool": "a__echo", "args": {}},
            {"index": "2", "title": "Second", "tool": "a__echo", "args": {}, "depends_on": ["1"]},
            {"index": "3", "title": "Third", "tool": "a__echo", "args": {}, "depends_on": ["1"]},
        ]});
        ExecPlan::from_json(&value).expect("plan")
    }

    fn ended(index: &str, success: bool) -> Progress {
        Progress::Ended(Box::new(StepReport {
            index: index.into(),
            title: format!("Step {index}"),
            tool: "a__echo".into(),
            args: json!({}),
            success,
            result: None,
            error: (!success).then(|| "it broke".to_owned()),
            duration_ms: 1,
            reused: false,
            code: None,
            typed: Vec::new(),
            revision: 0,
        }))
    }

    /// Plays `bytes` on a screen: text, `\n`, `\r`, cursor up and clear
    /// to the end, which is all a frame uses.
    fn screen(bytes: &[u8]) -> Vec<String> {
        let text = String::from_utf8_lossy(bytes);
        let mut rows: Vec<String> = vec![String::new()];
        let mut row = 0usize;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\n' => {
                    row += 1;
                    if rows.len() <= row {
                        rows.push(String::new());
                    }
                }
                '\r' => {}
                '\x1b' => {
                    assert_eq!(chars.next(), Some('['));
                    let mut n = String::new();
                    while let Some(d) = chars.next_if(char::is_ascii_digit) {
                        n.push(d);
                    }
                    match chars.next() {
                        Some('A') => row -= n.parse::<usize>().expect("count"),
                        Some('J') => rows.truncate(row + 1),
                        other => panic!("unexpected escape {other:?}"),
                    }
                    rows[row].clear();
                }
                c => rows[row].push(c),
            }
        }
        rows
    }

    #[test]
    fn each_frame_replaces_the_last_and_the_last_shows_the_end() {
        let mut live = Live::new(Arc::new(plan()), vec![StepMark::Pending; 3]);
        live.size = || Some((40, 100));
        let mut out = Vec::new();
        let mut display = Display::Live(Box::new(live));
        display.finish(&mut out).expect("first frame");
        for event in [
            Progress::Started { index: "1".into() },
            ended("1", true),
            Progress::Started { index: "2".into() },
            Progress::Started { index: "3".into() },
            ended("2", true),
            ended("3", false),
        ] {
            display.show(&event, &mut out).expect("shown");
        }
        display.finish(&mut out).expect("last frame");
        let rows = screen(&out);
        let shown = rows.join("\n");
        assert!(shown.contains("● 1. First"), "{shown}");
        assert!(shown.contains("● 2. Second"), "{shown}");
        assert!(shown.contains("✗ 3. Third"), "{shown}");
        assert!(shown.contains("2/3 steps done · 1 failed"), "{shown}");
        assert!(shown.contains("✗ step 3 [a__echo]: it broke"), "{shown}");
        // One frame on the screen: step 1 appears once.
        assert_eq!(shown.matches("1. First").count(), 1, "{shown}");
    }

    #[test]
    fn a_change_too_soon_for_a_frame_is_drawn_at_the_next_tick() {
        let mut live = Live::new(Arc::new(plan()), vec![StepMark::Pending; 3]);
        live.size = || Some((40, 100));
        let mut display = Display::Live(Box::new(live));
        let mut out = Vec::new();
        display
            .show(&Progress::Started { index: "1".into() }, &mut out)
            .expect("first frame");
        // Right after a frame: recorded, not drawn.
        display
            .show(&Progress::Started { index: "2".into() }, &mut out)
            .expect("shown");
        assert!(!screen(&out).join("\n").contains("◉ 2."));
        // A frame interval later, the tick draws it.
        if let Display::Live(live) = &mut display {
            live.last_frame = live.last_frame.map(|at| at - FRAME_INTERVAL);
        }
        display.tick(&mut out).expect("tick");
        let shown = screen(&out).join("\n");
        assert!(shown.contains("◉ 2. Second"), "{shown}");
        assert!(shown.contains("2 running"), "{shown}");
        // Nothing new: a tick draws nothing.
        let before = out.len();
        display.tick(&mut out).expect("tick");
        assert_eq!(out.len(), before);
    }

    #[test]
    fn a_dag_taller_than_the_terminal_shows_the_active_steps_and_narrow_lines_are_cut() {
        let mut live = Live::new(Arc::new(plan()), vec![StepMark::Pending; 3]);
        live.apply(&Progress::Started { index: "2".into() });
        let frame = live.frame(4, 100);
        assert!(frame.len() < 4, "{frame:?}");
        assert!(
            frame[0].starts_with("0/3 steps done · 1 running"),
            "{frame:?}"
        );
        assert_eq!(frame[1], "  ◉ 2. Second");
        let narrow = live.frame(40, 12);
        assert!(narrow.iter().all(|l| l.chars().count() <= 11), "{narrow:?}");
        assert!(narrow.iter().any(|l| l.ends_with('…')), "{narrow:?}");
    }
}
