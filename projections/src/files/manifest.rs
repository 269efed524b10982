//! `session.json` put together from pieces: its head (everything but the
//! plan entries) rendered anew, and each plan version's entry rendered once
//! and kept, since a saved version's entry never changes. So rewriting the
//! manifest at every save costs copying it, not rendering it, at version 10
//! or 10,000. The bytes are exactly those of the whole value pretty-printed
//! (the unit tests compare them).

use std::collections::HashMap;

use planb_core::{Ask, Cursor, Session, SessionId};

use super::{plan_entry_json, pretty, session_json_head};

/// The most bytes of rendered entries a process keeps; past it the cache
/// starts again empty (and fills with the sessions that are written).
const CACHE_BYTES_MAX: usize = 64 << 20;

/// What the head of a manifest with no plan entries ends with.
const EMPTY_PLANS_END: &[u8] = b"[]\n}\n";

/// Rendered plan entries by session, each with the cursor of the event
/// that saved its version.
#[derive(Debug, Default)]
pub(crate) struct ManifestCache {
    sessions: HashMap<SessionId, Vec<(Cursor, Vec<u8>)>>,
    bytes: usize,
}

impl ManifestCache {
    /// The bytes of `session.json` for `session` and its `asks`.
    pub(crate) fn render(&mut self, session: &Session, asks: &[&Ask]) -> Vec<u8> {
        let mut bytes = pretty(&session_json_head(session, asks));
        if session.plans.is_empty() {
            return bytes;
        }
        assert!(
            bytes.ends_with(EMPTY_PLANS_END),
            "plans is the manifest's last key"
        );
        bytes.truncate(bytes.len() - EMPTY_PLANS_END.len());
        bytes.extend_from_slice(b"[\n");
        for (i, entry) in self.entries(session).iter().enumerate() {
            if i > 0 {
                bytes.extend_from_slice(b",\n");
            }
            bytes.extend_from_slice(&entry.1);
        }
        bytes.extend_from_slice(b"\n  ]\n}\n");
        bytes
    }

    /// `session`'s plan entries, rendering those not kept (or kept for
    /// another event: the log was replaced).
    fn entries(&mut self, session: &Session) -> &[(Cursor, Vec<u8>)] {
        if self.bytes > CACHE_BYTES_MAX {
            self.sessions.clear();
            self.bytes = 0;
        }
        let kept = self.sessions.entry(session.id).or_default();
        let same = kept
            .iter()
            .zip(&session.plans)
            .take_while(|((cursor, _), plan)| *cursor == plan.cursor)
            .count();
        for (_, dropped) in kept.drain(same..) {
            self.bytes -= dropped.len();
        }
        for plan in &session.plans[same..] {
            let entry = indented(&pretty(&plan_entry_json(plan)));
            self.bytes += entry.len();
            kept.push((plan.cursor, entry));
        }
        kept
    }
}

/// A pretty-printed object (with its trailing newline) as an item of an
/// array two levels deep: every line indented by four spaces. Strings hold
/// no raw newline (JSON escapes it), so every newline ends a line.
fn indented(object: &[u8]) -> Vec<u8> {
    let object = object.strip_suffix(b"\n").unwrap_or(object);
    let mut out = Vec::with_capacity(object.len() + 64);
    out.extend_from_slice(b"    ");
    for &byte in object {
        out.push(byte);
        if byte == b'\n' {
            out.extend_from_slice(b"    ");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use planb_core::{Command, State, Timestamp};
    use serde_json::Value;

    /// The manifest as one value, pretty-printed whole.
    fn whole(session: &Session, asks: &[&Ask]) -> Vec<u8> {
        let mut value = session_json_head(session, asks);
        let entries = session.plans.iter().map(plan_entry_json).collect();
        value["plans"] = Value::Array(entries);
        pretty(&value)
    }

    #[test]
    fn the_manifest_put_together_is_the_whole_value_pretty_printed() {
        let mut state = State::default();
        let id = SessionId::from_uuid(uuid::Uuid::from_u128(7));
        fn run(state: &mut State, command: Command, at: i64, cursor: u64) {
            for body in state.decide(command).expect("decided") {
                let event = planb_core::Event {
                    id: planb_core::EventId::from_uuid(uuid::Uuid::from_u128(cursor.into())),
                    at: Timestamp(1_780_000_000_000 + at),
                    body,
                };
                state.apply(&planb_core::Envelope {
                    cursor: Cursor(cursor),
                    event,
                });
            }
        }
        run(
            &mut state,
            Command::CreateSession {
                session: id,
                title: Some("Tab\t \"quoted\" ünï \u{1F600}".into()),
                intent: Some("line\nbreak".into()),
                project_path: None,
            },
            0,
            1,
        );
        let mut cache = ManifestCache::default();
        let titles = [
            None,
            Some("a \"title\"\nwith a break"),
            Some("\u{7f}\u{9b}"),
        ];
        for n in 0..6u64 {
            let session = state.session(&id).expect("session").clone();
            assert_eq!(cache.render(&session, &[]), whole(&session, &[]), "{n}");
            let title = titles[n as usize % titles.len()].map(str::to_owned);
            let content = format!("# v{n}\n");
            run(
                &mut state,
                Command::SavePlan {
                    session: id,
                    title,
                    content,
                },
                n as i64 + 1,
                n + 2,
            );
        }
        // Entries kept for events the log no longer holds are rendered anew.
        let mut session = state.session(&id).expect("session").clone();
        session.plans[2].cursor = Cursor(99);
        session.plans[2].title = Some("another version 3".into());
        assert_eq!(cache.render(&session, &[]), whole(&session, &[]));
    }
}
