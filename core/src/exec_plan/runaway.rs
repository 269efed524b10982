//! Runaway detection over a run's numeric results, checked before each
//! call. A run is stopped when its numbers say more calls cannot help:
//!
//! - **degenerate**: a result of exactly 0 or 1, the second such result of
//!   the run;
//! - **saturation**: a result that is not zero but smaller in size than
//!   1e-12 (effectively zero);
//! - **repeating**: the last three numeric results are the same value.
//!
//! Only results that are JSON numbers count; the last five are kept.

use std::collections::VecDeque;
use std::fmt;

use serde_json::Value;

/// Numeric results kept.
const WINDOW: usize = 5;
/// Equal results in a row that make a repeat.
const REPEATS: usize = 3;
/// Degenerate results that stop a run.
const DEGENERATE_MAX: u32 = 2;
/// Below this size a non-zero result is effectively zero.
const SATURATION: f64 = 1e-12;

const _: () = assert!(REPEATS <= WINDOW, "a repeat must fit the window");

/// The pattern that stopped a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunawayPattern {
    /// 0 or 1 again.
    Degenerate,
    /// Effectively zero.
    Saturation,
    /// One value over and over.
    Repeating,
}

impl RunawayPattern {
    /// The pattern's name.
    pub fn name(self) -> &'static str {
        match self {
            RunawayPattern::Degenerate => "degenerate",
            RunawayPattern::Saturation => "saturation",
            RunawayPattern::Repeating => "repeating",
        }
    }
}

/// Why a run is stopped: the pattern and the value that showed it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunawayStop {
    /// The pattern.
    pub pattern: RunawayPattern,
    /// The last numeric result.
    pub value: f64,
}

impl fmt::Display for RunawayStop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.value;
        match self.pattern {
            RunawayPattern::Degenerate => write!(
                f,
                "a second result of 0 or 1 (the last was {value}): the results have degenerated"
            ),
            RunawayPattern::Saturation => {
                write!(f, "the last result, {value:e}, is effectively zero")
            }
            RunawayPattern::Repeating => {
                write!(f, "the last {REPEATS} numeric results were all {value}")
            }
        }
    }
}

/// A run's numeric results so far.
#[derive(Clone, Debug, Default)]
pub struct Runaway {
    recent: VecDeque<f64>,
    degenerate: u32,
}

impl Runaway {
    /// Notes a step's result; anything but a JSON number is passed over.
    pub fn record(&mut self, result: &Value) {
        let Some(value) = result.as_f64().filter(|v| v.is_finite()) else {
            return;
        };
        if value == 0.0 || value == 1.0 {
            self.degenerate = self.degenerate.saturating_add(1);
        }
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(value);
    }

    /// Why the next call should not be made, if it should not.
    pub fn check(&self) -> Option<RunawayStop> {
        let &value = self.recent.back()?;
        let stop = |pattern| Some(RunawayStop { pattern, value });
        if (value == 0.0 || value == 1.0) && self.degenerate >= DEGENERATE_MAX {
            return stop(RunawayPattern::Degenerate);
        }
        if value != 0.0 && value.abs() < SATURATION {
            return stop(RunawayPattern::Saturation);
        }
        let repeated = self.recent.len() >= REPEATS
            && self.recent.iter().rev().take(REPEATS).all(|&v| v == value);
        if repeated {
            return stop(RunawayPattern::Repeating);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn after(results: &[Value]) -> Option<RunawayPattern> {
        let mut runaway = Runaway::default();
        for result in results {
            runaway.record(result);
        }
        runaway.check().map(|stop| stop.pattern)
    }

    #[test]
    fn each_pattern_stops_a_run_and_ordinary_results_do_not() {
        use RunawayPattern::*;
        assert_eq!(after(&[]), None);
        assert_eq!(after(&[json!(0)]), None, "one 0 is a result like any");
        assert_eq!(after(&[json!(0), json!(1)]), Some(Degenerate));
        assert_eq!(after(&[json!(1.0), json!(5), json!(1)]), Some(Degenerate));
        assert_eq!(after(&[json!(0), json!(5)]), None, "the last is not 0 or 1");
        assert_eq!(after(&[json!(3e-13)]), Some(Saturation));
        assert_eq!(after(&[json!(-3e-13)]), Some(Saturation));
        assert_eq!(after(&[json!(1e-11)]), None);
        assert_eq!(after(&[json!(7), json!(7)]), None);
        assert_eq!(after(&[json!(7), json!(7), json!(7)]), Some(Repeating));
        assert_eq!(after(&[json!(7), json!(7), json!(8), json!(7)]), None);
        // Text, objects and lists are not numbers: they neither count nor
        // break a run of numbers.
        let mixed = [json!(7), json!("7"), json!({"sum": 7}), json!(7), json!(7)];
        assert_eq!(after(&mixed), Some(Repeating));
        assert_eq!(after(&[json!("0"), json!("1"), json!(true)]), None);
    }

    #[test]
    fn a_stop_says_what_it_saw() {
        let mut runaway = Runaway::default();
        runaway.record(&json!(0));
        runaway.record(&json!(0));
        let stop = runaway.check().expect("stopped");
        assert_eq!(
            stop.to_string(),
            "a second result of 0 or 1 (the last was 0): the results have degenerated"
        );
    }
}
