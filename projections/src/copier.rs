//! Writes the files of the small blobs the log holds (`BlobStored`), off
//! the append's path and in batches. A file created between two syncs of
//! the log is carried by the next one (the filesystem's journal orders it
//! before the log's), so a file per step written on the way would cost
//! every step about a second sync. Until its file is written, a blob is
//! read from the log ([`Blobs::get`]); a process killed before writing them
//! loses only copies.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Blobs;

/// How long the copier gathers blobs before writing them.
const BATCH: Duration = Duration::from_millis(100);

/// The copier thread.
#[derive(Debug)]
pub(crate) struct Copier {
    send: Option<Sender<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

impl Copier {
    /// Starts the thread writing into `blobs`.
    pub(crate) fn start(blobs: Blobs) -> Copier {
        let (send, receive) = channel::<Vec<u8>>();
        let thread = std::thread::Builder::new()
            .name("planb-blob-copies".into())
            .spawn(move || copy_until_closed(&blobs, &receive));
        match thread {
            Ok(thread) => Copier {
                send: Some(send),
                thread: Some(thread),
            },
            Err(error) => {
                // The blobs are then read from the log until a reader
                // restores their files.
                tracing::warn!("cannot start the blob copier: {error}");
                Copier {
                    send: None,
                    thread: None,
                }
            }
        }
    }

    /// Has a copy of `bytes` written soon.
    pub(crate) fn copy(&self, bytes: Vec<u8>) {
        if let Some(send) = &self.send {
            let _ = send.send(bytes);
        }
    }
}

impl Drop for Copier {
    /// Writes what is pending, then ends the thread.
    fn drop(&mut self) {
        self.send = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn copy_until_closed(blobs: &Blobs, receive: &Receiver<Vec<u8>>) {
    while let Ok(first) = receive.recv() {
        let mut batch = vec![first];
        let until = Instant::now() + BATCH;
        let mut closed = false;
        loop {
            match receive.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(bytes) => batch.push(bytes),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        for bytes in &batch {
            if let Err(error) = blobs.put_copy(bytes) {
                tracing::warn!("a blob's file was not written (the log holds it): {error}");
            }
        }
        if closed {
            return;
        }
    }
}
