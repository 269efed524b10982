//! Events: the facts the log records, and their byte encoding.
//!
//! The log treats payloads as opaque bytes; this module owns what is inside
//! them. A payload is
//!
//! ```text
//! offset  size  field
//! 0       2     magic  b"PE" (planb event)
//! 2       2     schema version, u16 little-endian (currently 6)
//! 4       n     rkyv archive of the `Event` of that schema version
//! ```
//!
//! The rkyv archive uses rkyv's default format (little-endian, 32-bit
//! relative pointers, aligned), so it is the same on every platform. Decoding
//! copies the payload into an aligned buffer and validates it with bytecheck
//! before deserializing, so damaged bytes give an error, never a panic or
//! undefined behaviour. The current schema lives in the frozen module
//! [`v7`]; older versions are upcast to it on decode.

/// The body of an event of an older schema as the newer one: each variant
/// named in `same { … }` keeps its name and its fields, moved as they are;
/// the arms after it map the variants that changed. A variant left out is a
/// compile error (the match must be whole), so a new schema names each one.
macro_rules! upcast_body {
    (
        $body:expr, $old:ident => $new:ident,
        same { $($variant:ident { $($field:ident),* $(,)? }),* $(,)? }
        $(, $changed:pat => $into:expr)* $(,)?
    ) => {
        match $body {
            $($old::$variant { $($field),* } => $new::$variant { $($field),* },)*
            $($changed => $into,)*
        }
    };
}

/// `From` the events of each older schema in `$old`, through `$via` (the
/// schema just before this one), whose upcast is written out.
macro_rules! upcast_through {
    ($via:ident: $($old:ident),+) => {
        $(
            impl From<super::$old::Event> for Event {
                fn from(event: super::$old::Event) -> Event {
                    super::$via::Event::from(event).into()
                }
            }
        )+
    };
}

#[cfg(test)]
mod golden;
#[cfg(test)]
pub(crate) use golden::fixed_events as golden_events_for_tests;
#[cfg(test)]
mod tests;
pub mod v1;
pub mod v2;
pub mod v3;
pub mod v4;
pub mod v5;
#[macro_use]
pub mod v6;
#[macro_use]
pub mod v7;

use rkyv::rancor;
use rkyv::util::AlignedVec;

use crate::id::{AskId, EventId, PlanName, SessionId};
use crate::time::Cursor;

pub use v1::{DeclineAction, Delivery, ReviewChannel, ReviewComment, Verdict};
pub use v3::RunOutcome;
pub use v7::{Event, EventBody};

/// SHA-256 of a form's secret sid, as the log records it.
pub fn sid_sha256(sid: &str) -> [u8; 32] {
    crate::hash::ContentHash::of(sid).0
}

/// Splits a form URL of event schema 1 (`…/ask?sid=<sid>`) into the address
/// without its query and the hash of the sid (all zeros when it has none,
/// which matches no sid): what schema 2 records instead of the URL.
pub fn split_form_url(url: &str) -> (String, [u8; 32]) {
    let (address, query) = url.split_once('?').unwrap_or((url, ""));
    let sid = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("sid="))
        .filter(|sid| !sid.is_empty());
    (address.to_owned(), sid.map_or([0; 32], sid_sha256))
}

/// First two bytes of every event payload.
pub const MAGIC: [u8; 2] = *b"PE";
/// The schema version [`encode`] writes.
pub const SCHEMA_VERSION: u16 = 7;
/// Bytes before the rkyv archive: magic and schema version.
pub const HEADER_LEN: usize = 4;

/// An event together with its position in the log.
#[derive(Clone, PartialEq, Debug)]
pub struct Envelope {
    /// Where the log stored the event (assigned by the log, not encoded in
    /// the payload).
    pub cursor: Cursor,
    /// The event.
    pub event: Event,
}

/// Why an event could not be encoded.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("cannot encode event {event}: {detail}")]
pub struct EncodeError {
    /// The event that failed.
    pub event: EventId,
    /// rkyv's description (in practice: a string or list over 2 GiB, which
    /// 32-bit relative pointers cannot address).
    pub detail: String,
}

/// Why a payload could not be decoded into an event.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The payload is shorter than the header.
    #[error(
        "event at cursor {cursor}: payload of {len} bytes is shorter than the {HEADER_LEN}-byte header"
    )]
    TooShort {
        /// Position of the event in the log.
        cursor: Cursor,
        /// Length of the payload in bytes.
        len: usize,
    },
    /// The payload does not start with [`MAGIC`].
    #[error("event at cursor {cursor}: bad magic {found:02x?}, expected {MAGIC:02x?} (\"PE\")")]
    BadMagic {
        /// Position of the event in the log.
        cursor: Cursor,
        /// The first two bytes found.
        found: [u8; 2],
    },
    /// The schema version is not one this build can read, for example a log
    /// written by a newer planb.
    #[error(
        "event at cursor {cursor}: unknown schema version {version} (this build reads 1 to {SCHEMA_VERSION})"
    )]
    UnknownVersion {
        /// Position of the event in the log.
        cursor: Cursor,
        /// The version found in the header.
        version: u16,
    },
    /// The archive failed validation or holds a value that breaks an
    /// invariant of its type.
    #[error("event at cursor {cursor}: malformed schema v{version} payload: {detail}")]
    Malformed {
        /// Position of the event in the log.
        cursor: Cursor,
        /// The schema version from the header.
        version: u16,
        /// What validation reported.
        detail: Malformation,
    },
}

/// What is wrong with a payload whose header reads.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum Malformation {
    /// The archive fails validation (bytecheck), as said.
    #[error("{0}")]
    Archive(String),
    /// A plan name that could smuggle a path into a file name.
    #[error(transparent)]
    PlanName(#[from] crate::id::IdError),
}

/// Encodes an event as a payload of the current schema version.
pub fn encode(event: &Event) -> Result<Vec<u8>, EncodeError> {
    let archive = rkyv::to_bytes::<rancor::Error>(event).map_err(|e| EncodeError {
        event: event.id,
        detail: e.to_string(),
    })?;
    let mut payload = Vec::with_capacity(HEADER_LEN + archive.len());
    payload.extend_from_slice(&MAGIC);
    payload.extend_from_slice(&SCHEMA_VERSION.to_le_bytes());
    payload.extend_from_slice(&archive);
    Ok(payload)
}

/// Decodes a payload read from the log at `cursor`.
pub fn decode(payload: &[u8], cursor: Cursor) -> Result<Envelope, DecodeError> {
    let Some((header, archive)) = payload.split_first_chunk::<HEADER_LEN>() else {
        return Err(DecodeError::TooShort {
            cursor,
            len: payload.len(),
        });
    };
    let found = [header[0], header[1]];
    if found != MAGIC {
        return Err(DecodeError::BadMagic { cursor, found });
    }
    let version = u16::from_le_bytes([header[2], header[3]]);
    let malformed = |detail: Malformation| DecodeError::Malformed {
        cursor,
        version,
        detail,
    };
    let event = match version {
        // Older versions are upcast to the current shape by `From`.
        1 => decode_archive::<v1::Event>(archive).map_err(malformed)?,
        2 => decode_archive::<v2::Event>(archive).map_err(malformed)?,
        3 => decode_archive::<v3::Event>(archive).map_err(malformed)?,
        4 => decode_archive::<v4::Event>(archive).map_err(malformed)?,
        5 => decode_archive::<v5::Event>(archive).map_err(malformed)?,
        6 => decode_archive::<v6::Event>(archive).map_err(malformed)?,
        7 => decode_archive::<v7::Event>(archive).map_err(malformed)?,
        _ => return Err(DecodeError::UnknownVersion { cursor, version }),
    };
    Ok(Envelope { cursor, event })
}

fn decode_archive<E>(archive: &[u8]) -> Result<Event, Malformation>
where
    E: rkyv::Archive + Into<Event>,
    E::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rancor::Error>>
        + rkyv::Deserialize<E, rkyv::api::high::HighDeserializer<rancor::Error>>,
{
    // rkyv reads archives in place and needs them aligned; a slice of a
    // log segment has no alignment guarantee, so copy.
    let mut aligned: AlignedVec = AlignedVec::with_capacity(archive.len());
    aligned.extend_from_slice(archive);
    let event: Event = rkyv::from_bytes::<E, rancor::Error>(&aligned)
        .map_err(|e| Malformation::Archive(e.to_string()))?
        .into();
    check_invariants(&event.body)?;
    Ok(event)
}

/// Checks invariants bytecheck cannot see. Plan names become file names, so
/// a damaged or forged payload must not smuggle a path through one.
fn check_invariants(body: &EventBody) -> Result<(), Malformation> {
    if let Some(plan) = body.plan() {
        PlanName::parse_recorded(plan.as_str())?;
    }
    Ok(())
}

impl EventBody {
    /// A short stable name for logs, metrics and indexes, such as
    /// `session_created`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            EventBody::SessionCreated { .. } => "session_created",
            EventBody::AskOpened { .. } => "ask_opened",
            EventBody::AskDraftSaved { .. } => "ask_draft_saved",
            EventBody::AskAnswered { .. } => "ask_answered",
            EventBody::AskTimedOut { .. } => "ask_timed_out",
            EventBody::AskDeclined { .. } => "ask_declined",
            EventBody::AskFailed { .. } => "ask_failed",
            EventBody::AskLateAnswer { .. } => "ask_late_answer",
            EventBody::PlanVersionSaved { .. } => "plan_version_saved",
            EventBody::NamedPlanWritten { .. } => "named_plan_written",
            EventBody::NamedPlanEdited { .. } => "named_plan_edited",
            EventBody::NamedPlanChangedOutside { .. } => "named_plan_changed_outside",
            EventBody::NamedPlanSubmitted { .. } => "named_plan_submitted",
            EventBody::NamedPlanReviewed { .. } => "named_plan_reviewed",
            EventBody::TaskCreated { .. } => "task_created",
            EventBody::RunStarted { .. } => "run_started",
            EventBody::StepStarted { .. } => "step_started",
            EventBody::StepSucceeded { .. } => "step_succeeded",
            EventBody::StepFailed { .. } => "step_failed",
            EventBody::ArtifactEdited { .. } => "artifact_edited",
            EventBody::StopRequested { .. } => "stop_requested",
            EventBody::RunEnded { .. } => "run_ended",
            EventBody::RunLog { .. } => "run_log",
            EventBody::PlanCreated { .. } => "plan_created",
            EventBody::PlanDeleted { .. } => "plan_deleted",
            EventBody::BlobStored { .. } => "blob_stored",
            EventBody::TaskArchived { .. } => "task_archived",
            EventBody::TaskDeleted { .. } => "task_deleted",
        }
    }

    /// The task the event is about, for the DAG engine's events.
    pub fn task(&self) -> Option<crate::id::TaskId> {
        match self {
            EventBody::TaskCreated { task, .. }
            | EventBody::RunStarted { task, .. }
            | EventBody::StepStarted { task, .. }
            | EventBody::StepSucceeded { task, .. }
            | EventBody::StepFailed { task, .. }
            | EventBody::ArtifactEdited { task, .. }
            | EventBody::StopRequested { task, .. }
            | EventBody::RunEnded { task, .. }
            | EventBody::RunLog { task, .. }
            | EventBody::PlanCreated { task, .. }
            | EventBody::PlanDeleted { task }
            | EventBody::BlobStored { task, .. }
            | EventBody::TaskArchived { task }
            | EventBody::TaskDeleted { task } => Some(*task),
            _ => None,
        }
    }

    /// The stored blob the event names by hash (a step's call, a step's or
    /// an edit's artifact), which lives beside the log, not in the event.
    pub fn named_blob(&self) -> Option<&[u8; 32]> {
        match self {
            EventBody::StepStarted {
                call: Some(hash), ..
            }
            | EventBody::StepSucceeded { artifact: hash, .. }
            | EventBody::ArtifactEdited { artifact: hash, .. } => Some(hash),
            _ => None,
        }
    }

    /// The session the event names directly. Ask events other than
    /// `AskOpened` name only the ask (look its session up in the state), and
    /// named-plan events other than a write with a session name none.
    pub fn session(&self) -> Option<SessionId> {
        match self {
            EventBody::SessionCreated { session, .. }
            | EventBody::AskOpened { session, .. }
            | EventBody::PlanVersionSaved { session, .. } => Some(*session),
            EventBody::NamedPlanWritten { session, .. } => *session,
            _ => None,
        }
    }

    /// The ask the event is about, for ask events.
    pub fn ask(&self) -> Option<AskId> {
        match self {
            EventBody::AskOpened { ask, .. }
            | EventBody::AskDraftSaved { ask, .. }
            | EventBody::AskAnswered { ask, .. }
            | EventBody::AskTimedOut { ask }
            | EventBody::AskDeclined { ask, .. }
            | EventBody::AskFailed { ask, .. }
            | EventBody::AskLateAnswer { ask, .. } => Some(*ask),
            _ => None,
        }
    }

    /// The named plan the event is about, with its directory.
    pub fn plan_key(&self) -> Option<crate::id::PlanKey> {
        let (plan, dir) = self.plan().zip(self.plans_dir())?;
        Some(crate::id::PlanKey::new(dir.to_owned(), plan.clone()))
    }

    /// The folder of the named plan's file, for named-plan events.
    pub fn plans_dir(&self) -> Option<&str> {
        match self {
            EventBody::NamedPlanWritten { plans_dir, .. }
            | EventBody::NamedPlanEdited { plans_dir, .. }
            | EventBody::NamedPlanChangedOutside { plans_dir, .. }
            | EventBody::NamedPlanSubmitted { plans_dir, .. }
            | EventBody::NamedPlanReviewed { plans_dir, .. } => Some(plans_dir),
            _ => None,
        }
    }

    /// The named plan the event is about, for named-plan events.
    pub fn plan(&self) -> Option<&PlanName> {
        match self {
            EventBody::NamedPlanWritten { plan, .. }
            | EventBody::NamedPlanEdited { plan, .. }
            | EventBody::NamedPlanChangedOutside { plan, .. }
            | EventBody::NamedPlanSubmitted { plan, .. }
            | EventBody::NamedPlanReviewed { plan, .. } => Some(plan),
            _ => None,
        }
    }
}
