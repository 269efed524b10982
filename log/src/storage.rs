//! The storage seam: the few file operations the log needs, behind a trait.
//!
//! [`FsStorage`] is the real directory on disk. The simulated backend in
//! [`crate::sim`] implements the same trait and keeps written and durable bytes
//! apart, so crash tests can cut power at any sync. The log never touches
//! `std::fs` outside this module.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A directory of segment files plus the cross-process append lock.
pub trait Storage: Send + Sync + Debug {
    /// Names of the files in the directory (any order).
    fn list(&self) -> io::Result<Vec<String>>;
    /// Opens an existing file, for reading and, if `write`, for writing.
    fn open(&self, name: &str, write: bool) -> io::Result<Box<dyn StorageFile>>;
    /// Creates a new, empty file; fails if it exists.
    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>>;
    /// Removes a file.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes the directory's entries (created and removed files) durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// Blocks until this handle holds the exclusive append lock, shared by all processes.
    fn lock(&self) -> io::Result<Box<dyn StorageLock>>;
    /// A human-readable location for messages.
    fn describe(&self, name: &str) -> String;
}

/// One open file.
#[allow(
    clippy::len_without_is_empty,
    reason = "a file length, not a collection; callers compare offsets with it"
)]
pub trait StorageFile: Send + Sync + Debug {
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at the end).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes all of `data` at `offset`.
    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
}

/// Held while appending; dropping it releases the lock.
pub trait StorageLock: Send + Debug {}

/// Reads exactly `buf.len()` bytes at `offset`, or fewer if the file ends first.
pub(crate) fn read_full_at(
    file: &dyn StorageFile,
    offset: u64,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(offset + done as u64, &mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The name of the lock file inside the log directory.
pub const LOCK_FILE: &str = "LOCK";

/// A real directory.
#[derive(Debug)]
pub struct FsStorage {
    dir: PathBuf,
    /// The lock file, opened once; `flock` on it serialises appenders across processes.
    lock_file: Option<Arc<File>>,
}

impl FsStorage {
    /// Opens `dir` for appending, creating it and its lock file if needed.
    pub fn open_writable(dir: &Path) -> io::Result<FsStorage> {
        if !dir.is_dir() {
            std::fs::create_dir_all(dir)?;
            // The new directory's entry must be durable before anything in it is.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                File::open(parent)?.sync_all()?;
            }
        }
        let lock_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))?;
        Ok(FsStorage {
            dir: dir.to_path_buf(),
            lock_file: Some(Arc::new(lock_file)),
        })
    }

    /// Opens `dir` for reading only: nothing is created, locked or written.
    pub fn open_read_only(dir: &Path) -> io::Result<FsStorage> {
        if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("log directory {} does not exist", dir.display()),
            ));
        }
        Ok(FsStorage {
            dir: dir.to_path_buf(),
            lock_file: None,
        })
    }
}

impl Storage for FsStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn open(&self, name: &str, write: bool) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .open(self.dir.join(name))?;
        Ok(Box::new(FsFile(file)))
    }

    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.dir.join(name))?;
        Ok(Box::new(FsFile(file)))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(name))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn lock(&self) -> io::Result<Box<dyn StorageLock>> {
        let file = self.lock_file.as_ref().ok_or_else(|| {
            io::Error::new(io::ErrorKind::PermissionDenied, "log opened read-only")
        })?;
        file.lock()?;
        Ok(Box::new(FsLock(Arc::clone(file))))
    }

    fn describe(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

#[derive(Debug)]
struct FsFile(File);

impl StorageFile for FsFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

#[derive(Debug)]
struct FsLock(Arc<File>);

impl StorageLock for FsLock {}

impl Drop for FsLock {
    fn drop(&mut self) {
        // Unlocking cannot meaningfully fail on a valid descriptor; if it did, the
        // lock is released anyway when the process exits.
        let _ = self.0.unlock();
    }
}
