//! Session plan texts, read from the log on demand.
//!
//! The state keeps a plan version's length and hash, not its text (a session
//! may hold thousands of versions of a long plan); the text is in the
//! `PlanVersionSaved` event the version names, and the log is the one copy
//! that cannot be wrong. The write path has the texts of the events it just
//! folded at hand; everything else (a full rewrite of the tree, a rebuild,
//! an export, a page of an old version) reads them here.

use std::collections::BTreeSet;
use std::sync::Arc;

use planb_core::{Cursor, EventBody, decode};
use planb_log::{LogOptions, LogReader, Storage};

use crate::StoreError;

/// Reads the plan texts saved by the events at `wanted`, in one pass over the
/// log from the first of them, and gives each to `each` with its cursor. An
/// event at a wanted cursor that saved no plan, or a log that ends before
/// one, is [`StoreError::PlanTextMissing`].
pub(crate) fn read(
    log: &Arc<dyn Storage>,
    wanted: &BTreeSet<Cursor>,
    mut each: impl FnMut(Cursor, String) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let (Some(&first), Some(&last)) = (wanted.first(), wanted.last()) else {
        return Ok(());
    };
    let mut reader = LogReader::new(
        Arc::clone(log),
        LogOptions::default(),
        planb_log::Cursor(first.0),
    );
    let mut found = 0;
    while let Some(record) = reader.next()? {
        let cursor = Cursor(record.cursor.0);
        if wanted.contains(&cursor) {
            match decode(&record.payload, cursor)?.event.body {
                EventBody::PlanVersionSaved { content, .. } => {
                    found += 1;
                    each(cursor, content)?;
                }
                _ => return Err(StoreError::PlanTextMissing { cursor: cursor.0 }),
            }
        }
        if cursor >= last {
            break;
        }
    }
    if found < wanted.len() {
        let read_to = reader.next_cursor().0;
        let missing = wanted.iter().find(|c| c.0 >= read_to).unwrap_or(&last);
        return Err(StoreError::PlanTextMissing { cursor: missing.0 });
    }
    Ok(())
}

/// The text saved by the event at `cursor`.
pub(crate) fn read_one(log: &Arc<dyn Storage>, cursor: Cursor) -> Result<String, StoreError> {
    let mut text = None;
    read(log, &BTreeSet::from([cursor]), |_, content| {
        text = Some(content);
        Ok(())
    })?;
    text.ok_or(StoreError::PlanTextMissing { cursor: cursor.0 })
}
