//! Time and position: [`Timestamp`] (wall-clock milliseconds, passed in by the
//! caller) and [`Cursor`] (an event's position in the log).
//!
//! The core never reads a clock; callers stamp events. Timestamps keep
//! millisecond precision because that is what the planb-mcp file layout
//! prints (`2026-06-07T18:21:10.123Z`) and what JavaScript's `Date` holds.

use std::fmt;

use chrono::{DateTime, Datelike, Timelike};
use serde::de::Error as _;

use crate::json::echo;

/// Milliseconds since the Unix epoch, UTC.
///
/// Any `i64` is a valid value, but the text forms cover years 0000 to 9999
/// only (four-digit years keep file names sortable); formatting saturates at
/// those bounds, which only values decoded from a damaged log can reach.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Debug,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub struct Timestamp(pub i64);

/// Why a timestamp could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeError {
    /// The text is not an RFC 3339 / ISO-8601 date-time with an offset.
    #[error("not an iso-8601 timestamp: {input:?}")]
    NotIso8601 {
        /// The rejected text, shortened to at most 64 characters.
        input: String,
    },
    /// The time lies outside the years 0000 to 9999.
    #[error("timestamp out of range (years 0000 to 9999): {input:?}")]
    OutOfRange {
        /// The rejected text, shortened to at most 64 characters.
        input: String,
    },
}

impl Timestamp {
    /// The earliest timestamp with a text form: `0000-01-01T00:00:00.000Z`.
    pub const MIN: Timestamp = Timestamp(-62_167_219_200_000);
    /// The latest timestamp with a text form: `9999-12-31T23:59:59.999Z`.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999);

    /// Wraps milliseconds since the Unix epoch.
    pub const fn from_unix_ms(unix_ms: i64) -> Self {
        Self(unix_ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn unix_ms(self) -> i64 {
        self.0
    }

    /// `2026-06-07T18:21:10.123Z`: UTC, always with milliseconds.
    pub fn to_iso8601(self) -> String {
        let unix_ms = self.0.clamp(Self::MIN.0, Self::MAX.0);
        match DateTime::from_timestamp_millis(unix_ms) {
            Some(t) => format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                t.year(),
                t.month(),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.timestamp_subsec_millis()
            ),
            // Unreachable: the clamp keeps the value inside chrono's range
            // (years -262143 to 262142). Say so in the output instead of panicking.
            None => format!("invalid-timestamp-{unix_ms}"),
        }
    }

    /// `7 June 2026, 18:21 UTC`: the time as a person reads it.
    pub fn to_human(self) -> String {
        let unix_ms = self.0.clamp(Self::MIN.0, Self::MAX.0);
        match DateTime::from_timestamp_millis(unix_ms) {
            Some(t) => format!(
                "{} {} {}, {:02}:{:02} UTC",
                t.day(),
                t.format("%B"),
                t.year(),
                t.hour(),
                t.minute()
            ),
            None => format!("invalid-timestamp-{unix_ms}"),
        }
    }

    /// `20260607T182110123Z`: the ISO-8601 form without `-`, `:` and `.`,
    /// used in file names.
    pub fn to_compact(self) -> String {
        self.to_iso8601()
            .chars()
            .filter(|c| !matches!(c, '-' | ':' | '.'))
            .collect()
    }

    /// Parses an RFC 3339 date-time (the ISO-8601 profile JavaScript's
    /// `toISOString` writes). Any offset is accepted and converted to UTC;
    /// digits below the millisecond are dropped (rounding toward the past).
    pub fn parse_iso8601(text: &str) -> Result<Self, TimeError> {
        let parsed = DateTime::parse_from_rfc3339(text)
            .map_err(|_| TimeError::NotIso8601 { input: echo(text) })?;
        // Whole seconds and the milliseconds below them: flooring, since
        // the sub-second part counts forward from the second even before 1970.
        let unix_ms = i128::from(parsed.timestamp()) * 1_000
            + i128::from(parsed.timestamp_subsec_millis().min(999));
        let in_range = i128::from(Self::MIN.0)..=i128::from(Self::MAX.0);
        if !in_range.contains(&unix_ms) {
            return Err(TimeError::OutOfRange { input: echo(text) });
        }
        i64::try_from(unix_ms)
            .map(Self)
            .map_err(|_| TimeError::OutOfRange { input: echo(text) })
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_iso8601())
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_iso8601())
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse_iso8601(&text).map_err(D::Error::custom)
    }
}

/// The position of an event in the log, 1-based: cursor N is the Nth event.
///
/// [`Cursor::ZERO`] means "before any event"; a reader that has applied
/// nothing yet sits there. The log assigns cursors; the core only compares
/// and stores them.
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Debug,
    Default,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Cursor(pub u64);

impl Cursor {
    /// Before any event.
    pub const ZERO: Cursor = Cursor(0);

    /// Wraps a raw position.
    pub const fn new(position: u64) -> Self {
        Self(position)
    }

    /// The raw position.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The cursor of the event after this one.
    ///
    /// Saturates at `u64::MAX`; a log would need half a million years at a
    /// million events a second to get there, so no caller handles it.
    pub const fn next(self) -> Cursor {
        Cursor(self.0.saturating_add(1))
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_format(unix_ms: i64, iso: &str, compact: &str) {
        let t = Timestamp(unix_ms);
        assert_eq!(t.to_iso8601(), iso);
        assert_eq!(t.to_compact(), compact);
        assert_eq!(Timestamp::parse_iso8601(iso), Ok(t));
    }

    #[test]
    fn a_person_reads_the_day_the_month_by_name_and_the_minute() {
        assert_eq!(
            Timestamp(1_780_856_470_123).to_human(),
            "7 June 2026, 18:21 UTC"
        );
    }

    #[test]
    fn formats_with_milliseconds() {
        check_format(
            1_780_856_470_123,
            "2026-06-07T18:21:10.123Z",
            "20260607T182110123Z",
        );
        check_format(0, "1970-01-01T00:00:00.000Z", "19700101T000000000Z");
        check_format(-1, "1969-12-31T23:59:59.999Z", "19691231T235959999Z");
        check_format(
            Timestamp::MIN.0,
            "0000-01-01T00:00:00.000Z",
            "00000101T000000000Z",
        );
        check_format(
            Timestamp::MAX.0,
            "9999-12-31T23:59:59.999Z",
            "99991231T235959999Z",
        );
    }

    #[test]
    fn formatting_saturates_outside_the_four_digit_years() {
        assert_eq!(Timestamp(i64::MAX).to_iso8601(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp(i64::MIN).to_iso8601(), "0000-01-01T00:00:00.000Z");
    }

    #[test]
    fn parses_offsets_and_drops_sub_millisecond_digits() {
        let expected = Ok(Timestamp(1_780_856_470_123));
        assert_eq!(
            Timestamp::parse_iso8601("2026-06-07T20:21:10.123+02:00"),
            expected
        );
        assert_eq!(
            Timestamp::parse_iso8601("2026-06-07T18:21:10.123999Z"),
            expected
        );
        assert_eq!(
            Timestamp::parse_iso8601("1969-12-31T23:59:59.9995Z"),
            Ok(Timestamp(-1))
        );
    }

    #[test]
    fn rejects_bad_text() {
        let err = Timestamp::parse_iso8601("yesterday").unwrap_err();
        assert_eq!(err.to_string(), r#"not an iso-8601 timestamp: "yesterday""#);
        let err = Timestamp::parse_iso8601("2026-06-07T18:21:10.123").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"not an iso-8601 timestamp: "2026-06-07T18:21:10.123""#
        );
    }

    #[test]
    fn serde_uses_the_iso_form() {
        let t = Timestamp(1_780_856_470_123);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#""2026-06-07T18:21:10.123Z""#);
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
    }

    proptest::proptest! {
        /// Every timestamp with a text form reads back as itself.
        #[test]
        fn the_text_form_reads_back(unix_ms in Timestamp::MIN.0..=Timestamp::MAX.0) {
            let t = Timestamp(unix_ms);
            proptest::prop_assert_eq!(Timestamp::parse_iso8601(&t.to_iso8601()), Ok(t));
        }
    }

    #[test]
    fn cursor_counts_from_one() {
        assert_eq!(Cursor::ZERO.next(), Cursor(1));
        assert_eq!(Cursor(41).next().get(), 42);
        assert_eq!(Cursor(7).to_string(), "7");
        assert_eq!(serde_json::to_string(&Cursor(7)).unwrap(), "7");
    }
}
