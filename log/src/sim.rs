//! A simulated storage that loses power on demand, for crash tests.
//!
//! Every file keeps two versions of its bytes: what was written (what reads see)
//! and what is durable (what the last `sync_data` saw). Directory entries are
//! durable only after `sync_dir`. The `crash_at_sync` knob makes the Nth sync
//! (file or directory) fail as if power was cut during it; every later operation
//! fails too. [`SimStorage::after_crash`] then builds the storage a reboot would
//! find: durable bytes, plus, chosen by a seed per file, none, all or a prefix of
//! the bytes written since the last sync, possibly with garbage at the cut.
//! That is the failure model of a file system that persists unsynced appends in
//! order (ext4 `data=ordered`); see `docs/log-format.md`.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::storage::{Storage, StorageFile, StorageLock};

#[derive(Debug, Default, Clone)]
struct SimFile {
    written: Vec<u8>,
    durable: Vec<u8>,
    /// The name is present in the directory as reads see it.
    visible: bool,
    /// The name is present in the directory as the disk has it.
    durable_entry: bool,
}

#[derive(Debug, Default)]
struct SimState {
    files: BTreeMap<String, SimFile>,
    syncs: u64,
    crash_at_sync: Option<u64>,
    crashed: bool,
}

/// In-memory storage with separate written and durable bytes.
#[derive(Debug, Clone, Default)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
    append_lock: Arc<(Mutex<bool>, Condvar)>,
}

fn crashed() -> io::Error {
    io::Error::other("simulated power loss")
}

impl SimStorage {
    /// An empty directory that never crashes.
    pub fn new() -> SimStorage {
        SimStorage::default()
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the `n`th sync from now on (1 = the next one) cut the power.
    pub fn crash_at_sync(&self, n: u64) {
        let mut state = self.state();
        state.crash_at_sync = Some(state.syncs + n);
    }

    /// Syncs performed so far (file and directory).
    pub fn syncs(&self) -> u64 {
        self.state().syncs
    }

    /// Whether the power has been cut.
    pub fn has_crashed(&self) -> bool {
        self.state().crashed
    }

    /// Cuts the power now, without waiting for a sync.
    pub fn crash_now(&self) {
        self.state().crashed = true;
    }

    /// The storage found after reboot. `seed` chooses, per file, how much of what
    /// was written since the last sync reached the disk.
    pub fn after_crash(&self, seed: u64) -> SimStorage {
        let state = self.state();
        let mut rng = SplitMix(seed);
        let mut files = BTreeMap::new();
        for (name, file) in &state.files {
            // How the unsynced part of this file fared: 0 lost, 1 kept, 2 a prefix,
            // 3 a prefix with garbage at the cut (where the file grew).
            let fate = rng.next_u64() % 4;
            let entry_survives = file.durable_entry || (file.visible && fate != 0);
            if !entry_survives {
                continue;
            }
            // The unsynced change starts where written and durable bytes
            // first differ: an append, or a write over the zeroed runway.
            let from = file
                .written
                .iter()
                .zip(&file.durable)
                .position(|(a, b)| a != b)
                .unwrap_or(file.written.len().min(file.durable.len()));
            let pending = &file.written[from.min(file.written.len())..];
            let mut bytes = file.durable.clone();
            let mut overlay = |at: usize, data: &[u8]| {
                if bytes.len() < at + data.len() {
                    bytes.resize(at + data.len(), 0);
                }
                bytes[at..at + data.len()].copy_from_slice(data);
            };
            match fate {
                1 => overlay(from, pending),
                2 | 3 if !pending.is_empty() => {
                    let cut = (rng.next_u64() % (pending.len() as u64 + 1)) as usize;
                    overlay(from, &pending[..cut]);
                    // Garbage only where the file grew: a block written
                    // in place holds its old bytes or its new ones.
                    if fate == 3 && from + cut >= file.durable.len() {
                        let garbage: Vec<u8> = (0..rng.next_u64() % 16)
                            .map(|_| rng.next_u64() as u8)
                            .collect();
                        overlay(from + cut, &garbage);
                    }
                }
                _ => {}
            }
            if fate == 1 {
                // Everything written survived, a shortening included.
                bytes.clone_from(&file.written);
            }
            files.insert(
                name.clone(),
                SimFile {
                    written: bytes.clone(),
                    durable: bytes,
                    visible: true,
                    durable_entry: true,
                },
            );
        }
        SimStorage {
            state: Arc::new(Mutex::new(SimState {
                files,
                ..SimState::default()
            })),
            append_lock: Arc::default(),
        }
    }

    /// The bytes of a file as reads see them (for tests that damage files).
    pub fn file_bytes(&self, name: &str) -> Option<Vec<u8>> {
        let state = self.state();
        state
            .files
            .get(name)
            .filter(|f| f.visible)
            .map(|f| f.written.clone())
    }

    /// Replaces a file's bytes, durably (for tests that damage files).
    pub fn set_file_bytes(&self, name: &str, bytes: Vec<u8>) {
        let mut state = self.state();
        let file = state.files.entry(name.to_string()).or_default();
        file.written = bytes.clone();
        file.durable = bytes;
        file.visible = true;
        file.durable_entry = true;
    }

    fn sync(&self, apply: impl FnOnce(&mut SimState)) -> io::Result<()> {
        let mut state = self.state();
        if state.crashed {
            return Err(crashed());
        }
        state.syncs += 1;
        if state.crash_at_sync == Some(state.syncs) {
            state.crashed = true;
            return Err(crashed());
        }
        apply(&mut state);
        Ok(())
    }

    fn with_file<T>(&self, name: &str, f: impl FnOnce(&mut SimFile) -> T) -> io::Result<T> {
        let mut state = self.state();
        if state.crashed {
            return Err(crashed());
        }
        match state.files.get_mut(name) {
            Some(file) if file.visible => Ok(f(file)),
            _ => Err(io::Error::new(io::ErrorKind::NotFound, name.to_string())),
        }
    }
}

impl Storage for SimStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        let state = self.state();
        if state.crashed {
            return Err(crashed());
        }
        Ok(state
            .files
            .iter()
            .filter(|(_, f)| f.visible)
            .map(|(n, _)| n.clone())
            .collect())
    }

    fn open(&self, name: &str, _write: bool) -> io::Result<Box<dyn StorageFile>> {
        self.with_file(name, |_| ())?;
        Ok(Box::new(SimHandle {
            storage: self.clone(),
            name: name.to_string(),
        }))
    }

    fn create_new(&self, name: &str) -> io::Result<Box<dyn StorageFile>> {
        {
            let mut state = self.state();
            if state.crashed {
                return Err(crashed());
            }
            let file = state.files.entry(name.to_string()).or_default();
            if file.visible {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    name.to_string(),
                ));
            }
            file.visible = true;
            file.written.clear();
            file.durable.clear();
        }
        self.open(name, true)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        self.with_file(name, |f| f.visible = false)
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.sync(|state| {
            state.files.retain(|_, f| f.visible);
            for file in state.files.values_mut() {
                file.durable_entry = true;
            }
        })
    }

    fn lock(&self) -> io::Result<Box<dyn StorageLock>> {
        let (held, released) = &*self.append_lock;
        let mut held = held.lock().unwrap_or_else(|p| p.into_inner());
        while *held {
            held = released.wait(held).unwrap_or_else(|p| p.into_inner());
        }
        *held = true;
        Ok(Box::new(SimLock(Arc::clone(&self.append_lock))))
    }

    fn describe(&self, name: &str) -> String {
        format!("sim:{name}")
    }
}

#[derive(Debug)]
struct SimHandle {
    storage: SimStorage,
    name: String,
}

impl StorageFile for SimHandle {
    fn len(&self) -> io::Result<u64> {
        self.storage
            .with_file(&self.name, |f| f.written.len() as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.storage.with_file(&self.name, |f| {
            let start = (offset as usize).min(f.written.len());
            let n = buf.len().min(f.written.len() - start);
            buf[..n].copy_from_slice(&f.written[start..start + n]);
            n
        })
    }

    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.storage.with_file(&self.name, |f| {
            let end = offset as usize + data.len();
            if f.written.len() < end {
                f.written.resize(end, 0);
            }
            f.written[offset as usize..end].copy_from_slice(data);
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.storage
            .with_file(&self.name, |f| f.written.resize(len as usize, 0))
    }

    fn sync_data(&self) -> io::Result<()> {
        let name = self.name.clone();
        self.storage.sync(|state| {
            if let Some(file) = state.files.get_mut(&name) {
                file.durable = file.written.clone();
            }
        })
    }
}

#[derive(Debug)]
struct SimLock(Arc<(Mutex<bool>, Condvar)>);

impl StorageLock for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        let (held, released) = &*self.0;
        *held.lock().unwrap_or_else(|p| p.into_inner()) = false;
        released.notify_all();
    }
}

/// A small deterministic generator (SplitMix64): crash outcomes here, damage
/// in the fuzz tests. A failure reproduces from its seed alone.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
