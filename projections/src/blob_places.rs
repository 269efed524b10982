//! Where the log holds each small blob: `<root>/blobs/places`, a list of
//! (hash, position of its `BlobStored` record) that lets a read go straight
//! to the record instead of looking through the log. A small blob has no
//! file of its own: the log is where it lives, and one file per blob would
//! cost a filesystem block (4 KiB) for a few hundred bytes, every step of
//! every run.
//!
//! The list is a projection, and only a hint. Each process appends the
//! places of the blobs it recorded, in batches, off the append's path
//! (the places writer thread); a read that finds no place, or a place
//! whose record does not hold the blob, looks through the log and adds what
//! it finds. Losing the file, or its last entries in a crash, costs time,
//! never bytes; `rebuild` writes it whole.
//!
//! An entry is 68 bytes: the magic `PBLP`, the hash (32), then the
//! position's segment, offset and cursor (u64 each, little-endian), the
//! checksum of the record before it (u32), and a CRC-32 of the 64 bytes
//! before it. Several processes append to the file at once (`O_APPEND`,
//! each batch in one write); a reader takes every entry whose magic and
//! checksum hold and steps over anything else a byte at a time, so a write
//! cut short by a crash costs its own entries and no others.

use std::collections::HashMap;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use planb_core::ContentHash;
use planb_log::ReadPosition;

use crate::BlobHash;

/// The file's name in the blob store's directory.
pub(crate) const FILE: &str = "places";
const MAGIC: [u8; 4] = *b"PBLP";
/// Bytes of one entry.
const ENTRY_BYTES: usize = 68;

/// Where the log holds a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    /// The blob's hash.
    pub(crate) hash: BlobHash,
    /// Where its `BlobStored` record begins.
    pub(crate) at: ReadPosition,
}

fn encode(place: &Place, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&place.hash);
    out.extend_from_slice(&place.at.segment.to_le_bytes());
    out.extend_from_slice(&place.at.offset.to_le_bytes());
    out.extend_from_slice(&place.at.cursor.0.to_le_bytes());
    out.extend_from_slice(&place.at.prev_checksum.to_le_bytes());
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

fn decode_one(bytes: &[u8]) -> Option<Place> {
    let entry = bytes.get(..ENTRY_BYTES)?;
    if entry[..4] != MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(entry[64..68].try_into().ok()?);
    if crc32fast::hash(&entry[..64]) != crc {
        return None;
    }
    let u64_at = |i: usize| entry[i..i + 8].try_into().ok().map(u64::from_le_bytes);
    Some(Place {
        hash: entry[4..36].try_into().ok()?,
        at: ReadPosition {
            segment: u64_at(36)?,
            offset: u64_at(44)?,
            cursor: planb_log::Cursor(u64_at(52)?),
            prev_checksum: u32::from_le_bytes(entry[60..64].try_into().ok()?),
        },
    })
}

/// `places` as entries, one after another.
fn encode_all(places: &[Place]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(places.len() * ENTRY_BYTES);
    for place in places {
        encode(place, &mut bytes);
    }
    bytes
}

/// The entries in `bytes`, and how many bytes they take up to the end of
/// the last one (what follows it may be a write still under way).
fn decode(bytes: &[u8]) -> (Vec<Place>, usize) {
    let mut places = Vec::with_capacity(bytes.len() / ENTRY_BYTES);
    let (mut at, mut consumed) = (0, 0);
    while bytes.len() - at >= ENTRY_BYTES {
        match decode_one(&bytes[at..]) {
            Some(place) => {
                places.push(place);
                at += ENTRY_BYTES;
                consumed = at;
            }
            None => at += 1,
        }
    }
    (places, consumed)
}

/// Appends `places` to the file in `dir` in one write, creating both as
/// needed. Not synced: the list is a hint.
pub(crate) fn append(dir: &Path, places: &[Place]) -> std::io::Result<()> {
    if places.is_empty() {
        return Ok(());
    }
    let bytes = encode_all(places);
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(FILE))
    };
    let mut file = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir)?;
            open()?
        }
        other => other?,
    };
    file.write_all(&bytes)
}

/// Replaces the file in `dir` by one holding `places` (for `rebuild`).
pub(crate) fn replace(dir: &Path, places: &[Place]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bytes = encode_all(places);
    let tmp = dir.join(format!(".{FILE}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, &bytes)?;
    std::fs::rename(&tmp, dir.join(FILE)).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    forget(dir);
    Ok(())
}

/// What this process has read of one places file.
#[derive(Default)]
struct Known {
    places: HashMap<BlobHash, ReadPosition>,
    /// Bytes of the file read into `places`.
    read_to: u64,
}

/// What this process knows of each places file, by its directory and by
/// whether the readers that learn it write the file: a reader that writes
/// nothing keeps the places it finds in the log in memory, and a writer
/// must not take those as written.
type KnownFiles = HashMap<(PathBuf, bool), Known>;

fn known() -> &'static Mutex<KnownFiles> {
    static KNOWN: std::sync::OnceLock<Mutex<KnownFiles>> = std::sync::OnceLock::new();
    KNOWN.get_or_init(Default::default)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Longest places file read, in bytes (about 15 million blobs); a longer
/// one is read no further and blobs past it are found in the log.
const FILE_BYTES_MAX: u64 = 1 << 30;

/// Where the places file in `dir` says the log holds `hash`: read as far
/// as the file goes when this process has not seen the hash yet. `write`:
/// whether the reader asking writes the file (see [`note`]).
pub(crate) fn find(dir: &Path, hash: &BlobHash, write: bool) -> Option<ReadPosition> {
    let mut all = lock(known());
    let known = all.entry((dir.to_path_buf(), write)).or_default();
    if let Some(at) = known.places.get(hash) {
        return Some(*at);
    }
    known.read_on(dir);
    known.places.get(hash).copied()
}

/// Takes `places` (found by looking through the log, or recorded by this
/// process) as this process's for the blobs that have none yet, and for
/// `replacing`, whose place failed; and, when `write`, appends those to
/// the file in `dir`. A blob with a place keeps it, so a log that holds the
/// same blob many times, looked through or recorded again, adds nothing.
pub(crate) fn note(
    dir: &Path,
    places: Vec<Place>,
    replacing: Option<&BlobHash>,
    write: bool,
) -> std::io::Result<()> {
    let mut all = lock(known());
    let known = all.entry((dir.to_path_buf(), write)).or_default();
    known.read_on(dir);
    let mut seen = std::collections::HashSet::new();
    let new: Vec<Place> = places
        .into_iter()
        .filter(|place| match known.places.get(&place.hash) {
            None => seen.insert(place.hash),
            Some(at) => {
                Some(&place.hash) == replacing && *at != place.at && seen.insert(place.hash)
            }
        })
        .collect();
    if write {
        append(dir, &new)?;
    }
    for place in new {
        known.places.insert(place.hash, place.at);
    }
    Ok(())
}

impl Known {
    /// Reads what the file gained since this process last read it.
    fn read_on(&mut self, dir: &Path) {
        let Ok(mut file) = std::fs::File::open(dir.join(FILE)) else {
            return;
        };
        let Ok(meta) = file.metadata() else {
            return;
        };
        let len = meta.len().min(FILE_BYTES_MAX);
        if len < self.read_to {
            // Replaced by a shorter one (`rebuild`): read it from the start.
            self.read_to = 0;
        }
        if len == self.read_to || file.seek(std::io::SeekFrom::Start(self.read_to)).is_err() {
            return;
        }
        let mut bytes = Vec::with_capacity((len - self.read_to) as usize);
        if file
            .take(len - self.read_to)
            .read_to_end(&mut bytes)
            .is_err()
        {
            return;
        }
        let (places, consumed) = decode(&bytes);
        self.read_to += consumed as u64;
        for place in places {
            self.places.insert(place.hash, place.at);
        }
    }
}

/// Drops what this process read of the file in `dir` (it was replaced).
fn forget(dir: &Path) {
    lock(known()).retain(|(known, _), _| known != dir);
}

/// How long the writer gathers places before writing them.
const BATCH: Duration = Duration::from_millis(100);

/// The thread that appends the places of the blobs this process records.
#[derive(Debug)]
pub(crate) struct PlacesWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when the queue stops being empty, and at close.
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    /// Blobs and where their records begin, hashed by the thread.
    blobs: Vec<(Vec<u8>, ReadPosition)>,
    /// Their bytes.
    bytes: usize,
    closed: bool,
}

/// Most bytes of blobs waiting for their places to be written; past it a
/// blob is left for a read to find in the log (should the file's writes
/// stall, memory does not grow with them).
const QUEUE_BYTES_MAX: usize = 64 << 20;

impl PlacesWriter {
    /// Starts the thread appending to the places file in `dir`.
    pub(crate) fn start(dir: PathBuf) -> PlacesWriter {
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("planb-blob-places".into())
            .spawn({
                let shared = Arc::clone(&shared);
                move || write_until_closed(&dir, &shared)
            });
        let thread = match thread {
            Ok(thread) => Some(thread),
            Err(error) => {
                // Blobs are then found by looking through the log.
                tracing::warn!("cannot start the blob places writer: {error}");
                None
            }
        };
        PlacesWriter { shared, thread }
    }

    /// Has the place of the blob `bytes`, recorded at `at`, written within
    /// about [`BATCH`]. Only the first of a batch wakes the thread.
    pub(crate) fn note(&self, bytes: Vec<u8>, at: ReadPosition) {
        if self.thread.is_none() {
            return;
        }
        let mut queue = lock(&self.shared.queue);
        if queue.bytes + bytes.len() > QUEUE_BYTES_MAX {
            // The blob is found by looking through the log instead.
            tracing::debug!("the blob places queue is full; a place is left for a scan to find");
            return;
        }
        queue.bytes += bytes.len();
        queue.blobs.push((bytes, at));
        if queue.blobs.len() == 1 {
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for PlacesWriter {
    /// Writes what is pending, then ends the thread.
    fn drop(&mut self) {
        lock(&self.shared.queue).closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn write_until_closed(dir: &Path, shared: &Shared) {
    let mut queue = lock(&shared.queue);
    loop {
        while queue.blobs.is_empty() && !queue.closed {
            queue = shared.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
        }
        // Gather for a while (a close cuts it short).
        let until = Instant::now() + BATCH;
        while !queue.closed {
            let now = Instant::now();
            if now >= until {
                break;
            }
            queue = shared
                .wake
                .wait_timeout(queue, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let batch = std::mem::take(&mut queue.blobs);
        queue.bytes = 0;
        let closed = queue.closed;
        drop(queue);
        let places: Vec<Place> = batch
            .iter()
            .map(|(bytes, at)| Place {
                hash: ContentHash::of_bytes(bytes).0,
                at: *at,
            })
            .collect();
        // As a scan does: a blob recorded again (a plan run again makes
        // the same calls) keeps the place it has.
        let count = places.len();
        if let Err(error) = note(dir, places, None, true) {
            tracing::warn!(
                "the places of {} blob(s) were not written (reads find them in the log): {error}",
                count
            );
        }
        if closed {
            return;
        }
        queue = lock(&shared.queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(n: u8) -> Place {
        Place {
            hash: [n; 32],
            at: ReadPosition {
                segment: 1,
                offset: 32 + u64::from(n) * 100,
                cursor: planb_log::Cursor(u64::from(n) + 1),
                prev_checksum: u32::from(n) * 7,
            },
        }
    }

    #[test]
    fn entries_read_back_and_a_torn_write_costs_only_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = dir.path().join("blobs");
        append(&blobs, &[place(1), place(2)]).expect("append");
        // A write cut short part way through an entry, then more appends.
        let mut torn = Vec::new();
        encode(&place(3), &mut torn);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(blobs.join(FILE))
            .expect("open");
        file.write_all(&torn[..30]).expect("torn");
        append(&blobs, &[place(4)]).expect("append");
        // A flipped bit in an entry: it is skipped, its neighbours are not.
        append(&blobs, &[place(5), place(6)]).expect("append");
        let mut bytes = std::fs::read(blobs.join(FILE)).expect("read");
        let fifth = 2 * ENTRY_BYTES + 30 + ENTRY_BYTES + 10;
        bytes[fifth] ^= 1;
        std::fs::write(blobs.join(FILE), &bytes).expect("write");

        let (places, consumed) = decode(&bytes);
        let found: Vec<u8> = places.iter().map(|p| p.hash[0]).collect();
        assert_eq!(found, [1, 2, 4, 6]);
        assert_eq!(consumed, bytes.len());
        assert_eq!(places[2], place(4));
        assert_eq!(find(&blobs, &[4; 32], true), Some(place(4).at));
        assert_eq!(find(&blobs, &[3; 32], true), None);
        assert_eq!(find(&blobs, &[5; 32], true), None);
        // An entry still being written is read once it is whole.
        let mut partial = Vec::new();
        encode(&place(7), &mut partial);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(blobs.join(FILE))
            .expect("open");
        file.write_all(&partial[..40]).expect("first part");
        assert_eq!(find(&blobs, &[7; 32], true), None);
        file.write_all(&partial[40..]).expect("rest");
        assert_eq!(find(&blobs, &[7; 32], true), Some(place(7).at));
        // Replaced by a shorter file: read again from its start.
        replace(&blobs, &[place(8)]).expect("replace");
        assert_eq!(find(&blobs, &[8; 32], true), Some(place(8).at));
        assert_eq!(find(&blobs, &[1; 32], true), None);
    }

    #[test]
    fn places_a_reader_keeps_in_memory_are_still_written_by_a_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = dir.path().join("blobs");
        std::fs::create_dir_all(&blobs).expect("dir");
        let size = || std::fs::metadata(blobs.join(FILE)).map_or(0, |m| m.len());
        // A reader that writes nothing (planb-retro, `check`) keeps what it
        // found in the log in memory only.
        note(&blobs, vec![place(1), place(2)], None, false).expect("note");
        assert_eq!(size(), 0);
        assert_eq!(find(&blobs, &[1; 32], false), Some(place(1).at));
        // A writer in the same process still writes them, once each,
        // however often they are noted or repeated in one batch.
        assert_eq!(find(&blobs, &[1; 32], true), None);
        note(&blobs, vec![place(1), place(2), place(1)], None, true).expect("note");
        note(&blobs, vec![place(2)], None, true).expect("note again");
        assert_eq!(size(), 2 * ENTRY_BYTES as u64);
        assert_eq!(find(&blobs, &[2; 32], true), Some(place(2).at));
    }

    #[test]
    fn threads_appending_at_once_lose_no_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = dir.path().join("blobs");
        std::thread::scope(|scope| {
            for t in 0..4u8 {
                let blobs = &blobs;
                scope.spawn(move || {
                    for n in 0..50u8 {
                        let mut one = place(n);
                        one.hash[1] = t;
                        append(blobs, &[one, one]).expect("append");
                    }
                });
            }
        });
        let bytes = std::fs::read(blobs.join(FILE)).expect("read");
        assert_eq!(bytes.len(), 4 * 50 * 2 * ENTRY_BYTES);
        assert_eq!(decode(&bytes).0.len(), 4 * 50 * 2);
    }
}
