use proptest::collection::vec;
use proptest::prelude::*;

use super::*;
use crate::arbitrary;
use crate::time::Timestamp;

fn encoded(event: &Event) -> Vec<u8> {
    encode(event).unwrap()
}

/// Decodes mangled bytes and checks the error is the one the mangling
/// calls for. Ok results are allowed where noted: a flipped bit inside a
/// string is still a valid event.
fn check_decode_error(payload: &[u8], cursor: Cursor) -> Option<DecodeError> {
    match decode(payload, cursor) {
        Ok(envelope) => {
            assert_eq!(envelope.cursor, cursor);
            None
        }
        Err(error) => Some(error),
    }
}

proptest! {
    #[test]
    fn encode_then_decode_gives_the_same_event(event in arbitrary::event(), cursor in any::<u64>()) {
        let payload = encoded(&event);
        prop_assert_eq!(&payload[..2], b"PE");
        prop_assert_eq!(&payload[2..4], &SCHEMA_VERSION.to_le_bytes());
        let envelope = decode(&payload, Cursor(cursor)).unwrap();
        prop_assert_eq!(envelope, Envelope { cursor: Cursor(cursor), event: event.clone() });
        // Encoding is deterministic: the golden test depends on it.
        prop_assert_eq!(encoded(&event), payload);
    }

    #[test]
    fn decode_of_random_bytes_never_panics(bytes in vec(any::<u8>(), 0..300)) {
        if let Some(error) = check_decode_error(&bytes, Cursor(3)) {
            let expected_kind = if bytes.len() < HEADER_LEN {
                "too short"
            } else if bytes[..2] != MAGIC {
                "bad magic"
            } else if !(1..=SCHEMA_VERSION).contains(&u16::from_le_bytes([bytes[2], bytes[3]])) {
                "unknown version"
            } else {
                "malformed"
            };
            let kind = match error {
                DecodeError::TooShort { .. } => "too short",
                DecodeError::BadMagic { .. } => "bad magic",
                DecodeError::UnknownVersion { .. } => "unknown version",
                DecodeError::Malformed { .. } => "malformed",
            };
            prop_assert_eq!(kind, expected_kind);
        }
    }

    #[test]
    fn decode_of_random_archives_never_panics(bytes in vec(any::<u8>(), 0..300)) {
        let mut payload = b"PE\x01\x00".to_vec();
        payload.extend_from_slice(&bytes);
        if let Some(error) = check_decode_error(&payload, Cursor(9)) {
            let is_malformed = matches!(
                error,
                DecodeError::Malformed { cursor: Cursor(9), version: 1, .. }
            );
            prop_assert!(is_malformed, "unexpected error {error}");
        }
    }

    #[test]
    fn decode_of_truncated_payloads_never_panics(event in arbitrary::event(), cut in any::<prop::sample::Index>()) {
        let payload = encoded(&event);
        let len = cut.index(payload.len());
        let error = check_decode_error(&payload[..len], Cursor(1));
        if len < HEADER_LEN {
            let is_too_short = matches!(error, Some(DecodeError::TooShort { len: l, .. }) if l == len);
            prop_assert!(is_too_short, "{error:?}");
        } else if let Some(error) = error {
            let is_malformed = matches!(error, DecodeError::Malformed { version: SCHEMA_VERSION, .. });
            prop_assert!(is_malformed, "{error}");
        }
    }

    #[test]
    fn decode_of_bit_flipped_payloads_never_panics(event in arbitrary::event(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut payload = encoded(&event);
        let index = at.index(payload.len());
        payload[index] ^= 1 << bit;
        let error = check_decode_error(&payload, Cursor(1));
        match index {
            0 | 1 => {
                let is_bad_magic = matches!(error, Some(DecodeError::BadMagic { .. }));
                prop_assert!(is_bad_magic, "{error:?}");
            }
            2 | 3 => {
                // A flip can land on an older known version: then the
                // archive is read as that version's and must be refused or
                // decode cleanly (an event whose shape did not change between
                // versions does), never panic.
                let flipped = u16::from_le_bytes([payload[2], payload[3]]);
                let expected = match &error {
                    Some(DecodeError::UnknownVersion { version, .. }) => {
                        *version == flipped && !(1..=SCHEMA_VERSION).contains(&flipped)
                    }
                    Some(DecodeError::Malformed { version, .. }) => *version == flipped,
                    None => (1..SCHEMA_VERSION).contains(&flipped),
                    _ => false,
                };
                prop_assert!(expected, "{error:?}");
            }
            _ => {
                if let Some(error) = error {
                    let is_malformed = matches!(error, DecodeError::Malformed { version: SCHEMA_VERSION, .. });
                    prop_assert!(is_malformed, "{error}");
                }
            }
        }
    }
}

#[test]
fn decode_errors_name_the_cursor_and_the_problem() {
    let check = |payload: &[u8], expected: &str| {
        let error = decode(payload, Cursor(12)).unwrap_err();
        assert_eq!(error.to_string(), expected);
    };
    check(
        b"PE",
        "event at cursor 12: payload of 2 bytes is shorter than the 4-byte header",
    );
    check(
        b"XY\x01\x00",
        "event at cursor 12: bad magic [58, 59], expected [50, 45] (\"PE\")",
    );
    check(
        b"PE\x08\x00",
        "event at cursor 12: unknown schema version 8 (this build reads 1 to 7)",
    );
    let error = decode(b"PE\x01\x00\x00", Cursor(12)).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("event at cursor 12: malformed schema v1 payload: "),
        "{error}"
    );
}

/// A forged payload must not carry a plan name that is a path: it would
/// become a file name in the projections.
#[test]
fn decode_rejects_invalid_plan_names() {
    let good = PlanName::parse("abcd").unwrap();
    let event = Event {
        id: EventId::from_uuid(uuid::Uuid::from_u128(1)),
        at: Timestamp(0),
        body: EventBody::NamedPlanSubmitted {
            plan: good,
            plans_dir: "/p".into(),
            round: 1,
        },
    };
    let mut payload = encoded(&event);
    // The name is short, so rkyv stores it inline; replace it in place.
    let at = payload.windows(4).position(|w| w == b"abcd").unwrap();
    payload[at..at + 4].copy_from_slice(b"../x");
    let error = decode(&payload, Cursor(5)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "event at cursor 5: malformed schema v7 payload: planName: must contain only letters, digits, '-' and '_' (found '.')"
    );
}

#[test]
fn kind_names_are_distinct_and_snake_case() {
    let bodies = super::golden::fixed_events();
    let mut names: Vec<&str> = bodies.iter().map(|e| e.body.kind_name()).collect();
    assert!(
        names
            .iter()
            .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
    );
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 28);
}

#[test]
fn body_names_its_session_ask_plan_and_task() {
    let events = super::golden::fixed_events();
    let summary: Vec<(&str, bool, bool, bool, bool)> = events
        .iter()
        .map(|e| {
            let b = &e.body;
            (
                b.kind_name(),
                b.session().is_some(),
                b.ask().is_some(),
                b.plan().is_some(),
                b.task().is_some(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("session_created", true, false, false, false),
            ("ask_opened", true, true, false, false),
            ("ask_draft_saved", false, true, false, false),
            ("ask_answered", false, true, false, false),
            ("ask_timed_out", false, true, false, false),
            ("ask_declined", false, true, false, false),
            ("ask_failed", false, true, false, false),
            ("ask_late_answer", false, true, false, false),
            ("plan_version_saved", true, false, false, false),
            ("named_plan_written", true, false, true, false),
            ("named_plan_edited", false, false, true, false),
            ("named_plan_changed_outside", false, false, true, false),
            ("named_plan_submitted", false, false, true, false),
            ("named_plan_reviewed", false, false, true, false),
            ("task_created", false, false, false, true),
            ("run_started", false, false, false, true),
            ("step_started", false, false, false, true),
            ("step_failed", false, false, false, true),
            ("step_succeeded", false, false, false, true),
            ("artifact_edited", false, false, false, true),
            ("stop_requested", false, false, false, true),
            ("run_log", false, false, false, true),
            ("run_ended", false, false, false, true),
            ("run_started", false, false, false, true),
            ("run_ended", false, false, false, true),
            ("plan_created", false, false, false, true),
            ("run_started", false, false, false, true),
            ("step_started", false, false, false, true),
            ("step_succeeded", false, false, false, true),
            ("run_ended", false, false, false, true),
            ("plan_deleted", false, false, false, true),
            ("blob_stored", false, false, false, true),
            ("task_archived", false, false, false, true),
            ("task_deleted", false, false, false, true),
            ("task_created", false, false, false, true),
            ("plan_created", false, false, false, true),
        ]
    );
}

#[test]
fn the_json_rendering_names_each_kind_as_kind_name_does_and_shows_hashes_in_hex() {
    for event in super::golden_events_for_tests() {
        let json = serde_json::to_value(&event).expect("every event renders");
        assert_eq!(json["body"]["kind"], event.body.kind_name(), "{json}");
        assert!(json["at"].is_string(), "{json}");
        if let EventBody::StepSucceeded { artifact, .. } = &event.body {
            let hex = json["body"]["artifact"].as_str().expect("hex");
            assert_eq!(hex.len(), 64);
            assert_eq!(hex[..2], format!("{:02x}", artifact[0]));
        }
    }
}
