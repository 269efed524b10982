//! The blob store: the DAG engine's artifact bytes, content-addressed by
//! SHA-256 under `<root>/blobs/<first two hex digits>/<all 64>`.
//!
//! A large blob is ground truth next to the log (the log names it by hash
//! and never holds its bytes), so unlike the projections it is durable
//! before it is named: [`Blobs::put`] syncs the file, renames it into place
//! and syncs the directory, and only then may the caller append the event
//! that names the hash. A writer killed before its event leaves a blob
//! nothing names, which costs space and nothing else; one killed before the
//! rename leaves a temp file that a later `put` of the same bytes replaces.
//!
//! A small blob (at most `planb_core::INLINE_BLOB_BYTES_MAX` bytes) is
//! recorded in the log itself, in an `EventBody::BlobStored` ahead of the
//! event that names it, in the same append: one sync covers both. It has no
//! file: [`Blobs::get`] reads its record where the places file says it is
//! (`crate::blob_places`), or looks through the log for it. (Data roots
//! written before kept a copy of each as a file; such a copy is still read,
//! and `rebuild` removes it.)
//!
//! Every read checks the bytes against their name, so a damaged blob is an
//! error, never wrong content.

use std::io::Write;
use std::path::{Path, PathBuf};

use planb_core::{ContentHash, Cursor};

use crate::StoreError;

/// Largest blob, in bytes (a report or a zip of every artifact of a run).
pub const BLOB_BYTES_MAX: u64 = 256 << 20;

/// A blob's name: the SHA-256 of its bytes.
pub type BlobHash = [u8; 32];

/// The blob store of a data root.
#[derive(Debug, Clone)]
pub struct Blobs {
    dir: PathBuf,
    /// The log whose `BlobStored` events small blobs are read from.
    log: Option<PathBuf>,
    /// Whether a read that had to look through the log for a small blob
    /// notes what it found in the places file (a reader that must not
    /// write, planb-retro, does not).
    restore: bool,
}

fn hex(hash: &BlobHash) -> String {
    ContentHash(*hash).to_hex()
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.display().to_string();
    move |source| StoreError::Io { op, path, source }
}

/// Why a blob could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// No blob of that hash.
    #[error("blob {0} is missing")]
    Missing(String),
    /// The file's bytes do not hash to its name.
    #[error("blob {name} is damaged: its bytes hash to {actual}")]
    Damaged {
        /// The blob's name.
        name: String,
        /// What its bytes hash to.
        actual: String,
    },
    /// Larger than [`BLOB_BYTES_MAX`].
    #[error("blob {name}: {bytes} bytes is over the {BLOB_BYTES_MAX}-byte limit")]
    TooLarge {
        /// The blob's name.
        name: String,
        /// Its size.
        bytes: u64,
    },
    /// The file could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Blobs {
    /// The store under `dir` (normally `DataRoot::blobs_dir`).
    pub fn new(dir: impl Into<PathBuf>) -> Blobs {
        Blobs {
            dir: dir.into(),
            log: None,
            restore: false,
        }
    }

    /// The store under `dir` whose small blobs the log in `log` holds.
    pub fn with_log(dir: impl Into<PathBuf>, log: impl Into<PathBuf>) -> Blobs {
        Blobs {
            dir: dir.into(),
            log: Some(log.into()),
            restore: true,
        }
    }

    /// The same store for a reader that writes nothing: a small blob is
    /// still read from the log, and nothing is noted or removed.
    pub fn reading_only(self) -> Blobs {
        Blobs {
            restore: false,
            ..self
        }
    }

    /// Where the blob of `hash` lives.
    pub fn path(&self, hash: &BlobHash) -> PathBuf {
        let name = hex(hash);
        self.dir.join(&name[..2]).join(name)
    }

    /// Stores `bytes` durably and returns their hash: once this returns,
    /// an event may name the blob. Storing bytes already there changes
    /// nothing.
    pub fn put(&self, bytes: &[u8]) -> Result<BlobHash, BlobError> {
        let hash: BlobHash = ContentHash::of_bytes(bytes).0;
        let name = hex(&hash);
        if bytes.len() as u64 > BLOB_BYTES_MAX {
            return Err(BlobError::TooLarge {
                name,
                bytes: bytes.len() as u64,
            });
        }
        let path = self.path(&hash);
        let shard = path.parent().unwrap_or(&self.dir).to_path_buf();
        if self.read(&hash).is_ok() {
            // Another writer may have renamed it into place and not yet
            // synced the directories (or died first): an event may name it
            // only once its entry is durable.
            sync_dir(&shard)?;
            sync_dir(&self.dir)?;
            return Ok(hash);
        }
        if !shard.is_dir() {
            std::fs::create_dir_all(&shard).map_err(io("create directory", &shard))?;
            sync_dir(&self.dir)?;
        }
        // Unique per call: two threads may put the same bytes at once.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = shard.join(format!(".{name}.{}.{seq}.tmp", std::process::id()));
        let written = std::fs::File::create(&tmp).and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        });
        if let Err(source) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io("write", &tmp)(source).into());
        }
        if let Err(source) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(io("rename into", &path)(source).into());
        }
        sync_dir(&shard)?;
        Ok(hash)
    }

    /// The bytes of blob `hash`, checked against it. A blob with no intact
    /// file is read from the log when the log holds it: at the place the
    /// places file gives, else by looking through the part of the log this
    /// process has not looked through yet, then, if that did not hold it,
    /// the whole log (noting the places found on the way). A damaged file
    /// of a blob the log holds is removed.
    pub fn get(&self, hash: &BlobHash) -> Result<Vec<u8>, BlobError> {
        let error = match self.read(hash) {
            Err(error @ (BlobError::Missing(_) | BlobError::Damaged { .. }))
                if self.log.is_some() =>
            {
                error
            }
            other => return other,
        };
        let mut found = self.at_its_place(hash);
        if found.is_none() {
            // A blob with no place yet is nearly always a recent one: the
            // part of the log not looked through yet (at first, the last
            // segment), then the whole log.
            let from = self.scanned_to();
            found = self.look_through_log(from, self.restore, Some(hash))?.1;
            if found.is_none() && from > Cursor(1) {
                found = self
                    .look_through_log(Cursor(1), self.restore, Some(hash))?
                    .1;
            }
        }
        let damaged = matches!(error, BlobError::Damaged { .. });
        let bytes = found.ok_or(error)?;
        if self.restore && damaged {
            // A copy from before small blobs lost their files: the log
            // holds the bytes.
            let _ = std::fs::remove_file(self.path(hash));
        }
        Ok(bytes)
    }

    /// The blob read from the record the places file points at, if that
    /// record is there and holds it.
    fn at_its_place(&self, hash: &BlobHash) -> Option<Vec<u8>> {
        let log = self.log.as_ref()?;
        let at = crate::blob_places::find(&self.dir, hash, self.restore)?;
        let mut reader = planb_log::read_dir_at(log, planb_log::LogOptions::default(), at).ok()?;
        let record = reader.next().ok()??;
        if record.cursor != at.cursor {
            return None;
        }
        match planb_core::decode(&record.payload, Cursor(record.cursor.0))
            .ok()?
            .event
            .body
        {
            planb_core::EventBody::BlobStored { bytes, .. }
                if ContentHash::of_bytes(&bytes).0 == *hash =>
            {
                Some(bytes)
            }
            _ => None,
        }
    }

    /// Where this process's last look through the log for blobs ended; at
    /// first, where the log's last segment begins.
    fn scanned_to(&self) -> Cursor {
        let Some(log) = &self.log else {
            return Cursor(1);
        };
        if let Some(at) = lock(scanned()).get(log) {
            return *at;
        }
        std::fs::read_dir(log)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                planb_log::format::parse_segment_name(&entry.file_name().to_string_lossy())
            })
            .max()
            .map_or(Cursor(1), Cursor)
    }

    /// The blobs the log holds, writing nothing (for `check`).
    pub fn held_in_log(&self) -> Result<std::collections::BTreeSet<BlobHash>, BlobError> {
        Ok(self.look_through_log(Cursor(1), false, None)?.0)
    }

    /// The bytes of blob `hash` as its file holds them, checked against it,
    /// with no look at the log.
    pub fn read_file(&self, hash: &BlobHash) -> Result<Vec<u8>, BlobError> {
        self.read(hash)
    }

    /// Looks through the log from `from` on: the blobs it holds and the
    /// bytes of `want`, if there. The place of each blob's first record is
    /// kept for this process's later reads, and noted in the places file
    /// when `restore` (a blob with a place already keeps it, except `want`,
    /// whose place failed). A log error past `want`'s record does not lose
    /// it: the bytes are returned and the rest is left for a later look.
    fn look_through_log(
        &self,
        from: Cursor,
        restore: bool,
        want: Option<&BlobHash>,
    ) -> Result<(std::collections::BTreeSet<BlobHash>, Option<Vec<u8>>), BlobError> {
        let mut held = std::collections::BTreeSet::new();
        let mut found = None;
        let Some(log) = &self.log else {
            return Ok((held, found));
        };
        let failed = |detail: String| {
            BlobError::Store(StoreError::Io {
                op: "read the log for blobs",
                path: log.display().to_string(),
                source: std::io::Error::other(detail),
            })
        };
        let mut reader = planb_log::read_dir(
            log,
            planb_log::LogOptions::default(),
            planb_log::Cursor(from.0),
        )
        .map_err(|e| failed(e.to_string()))?;
        let mut places: std::collections::HashMap<BlobHash, planb_log::ReadPosition> =
            std::collections::HashMap::new();
        let mut whole = true;
        loop {
            let record = match reader.next() {
                Ok(Some(record)) => record,
                Ok(None) => break,
                Err(error) if found.is_some() => {
                    tracing::warn!("the log could not be read past a blob found in it: {error}");
                    whole = false;
                    break;
                }
                Err(error) => return Err(failed(error.to_string())),
            };
            let Ok(envelope) = planb_core::decode(&record.payload, Cursor(record.cursor.0)) else {
                continue;
            };
            if let planb_core::EventBody::BlobStored { bytes, .. } = envelope.event.body {
                let hash = ContentHash::of_bytes(&bytes).0;
                if want == Some(&hash) && found.is_none() {
                    found = Some(bytes);
                }
                places.entry(hash).or_insert(record.position);
                held.insert(hash);
            }
        }
        let places: Vec<crate::blob_places::Place> = places
            .into_iter()
            .map(|(hash, at)| crate::blob_places::Place { hash, at })
            .collect();
        if let Err(error) = crate::blob_places::note(&self.dir, places, want, restore) {
            tracing::warn!("the places of blobs found in the log were not noted: {error}");
        }
        if !whole {
            return Ok((held, found));
        }
        let mut scanned = lock(scanned());
        let end = Cursor(reader.next_cursor().0);
        let at = scanned.entry(log.clone()).or_insert(end);
        *at = (*at).max(end);
        Ok((held, found))
    }

    /// The bytes of blob `hash` as its file holds them, checked against it.
    fn read(&self, hash: &BlobHash) -> Result<Vec<u8>, BlobError> {
        let path = self.path(hash);
        let name = hex(hash);
        let size = match std::fs::metadata(&path) {
            Ok(meta) => meta.len(),
            // No such file, or something other than a directory where its
            // directory should be: not there either way.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Err(BlobError::Missing(name));
            }
            Err(source) => return Err(io("stat", &path)(source).into()),
        };
        if size > BLOB_BYTES_MAX {
            return Err(BlobError::TooLarge { name, bytes: size });
        }
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BlobError::Missing(name));
            }
            Err(source) => return Err(io("read", &path)(source).into()),
        };
        let actual: BlobHash = ContentHash::of_bytes(&bytes).0;
        if actual != *hash {
            return Err(BlobError::Damaged {
                name,
                actual: hex(&actual),
            });
        }
        Ok(bytes)
    }
}

/// How far this process has looked through each log for blobs.
fn scanned() -> &'static std::sync::Mutex<std::collections::HashMap<PathBuf, Cursor>> {
    static SCANNED: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<PathBuf, Cursor>>,
    > = std::sync::OnceLock::new();
    SCANNED.get_or_init(Default::default)
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync directory", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_stored_once_under_its_hash_and_read_back_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = Blobs::new(dir.path().join("blobs"));
        let hash = blobs.put(b"# Intake\n").expect("put");
        assert_eq!(hash, ContentHash::of_bytes(b"# Intake\n").0);
        let path = blobs.path(&hash);
        assert!(path.starts_with(dir.path().join("blobs").join(&hex(&hash)[..2])));
        assert_eq!(blobs.get(&hash).expect("get"), b"# Intake\n");
        assert_eq!(blobs.put(b"# Intake\n").expect("again"), hash);
        let shard = path.parent().expect("shard");
        let names: Vec<_> = std::fs::read_dir(shard).expect("list").collect();
        assert_eq!(names.len(), 1, "no temp file left behind");

        std::fs::write(&path, b"# Intake, damaged\n").expect("damage");
        let damaged = blobs.get(&hash).expect_err("damaged");
        assert!(
            damaged
                .to_string()
                .starts_with(&format!("blob {} is damaged", hex(&hash))),
            "{damaged}"
        );
        // Storing the bytes again repairs it.
        assert_eq!(blobs.put(b"# Intake\n").expect("repair"), hash);
        assert_eq!(blobs.get(&hash).expect("get"), b"# Intake\n");

        let missing = blobs.get(&[7; 32]).expect_err("missing");
        assert_eq!(
            missing.to_string(),
            format!("blob {} is missing", "07".repeat(32))
        );
    }
}
