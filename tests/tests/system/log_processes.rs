//! The log across real processes: `kill -9` in the middle of appending loses no
//! acknowledged append, several processes appending to one directory get one
//! gapless order, and a reader in another process follows a live writer.
//!
//! The writers are `planb-test-appender` processes. Each prints `<cursor> <payload>`
//! on stdout after an append returned Ok, so the lines a test collects are exactly
//! the appends the log acknowledged as durable, and they are checked against what
//! the log holds afterwards. No test waits on time: each waits on lines or exits.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use planb_log::{Cursor, FsStorage, LogOptions, Record, open_dir, read_dir, verify};

/// One acknowledged append as the writer reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Acknowledged {
    cursor: u64,
    payload: String,
}

fn spawn_appender(dir: &Path, tag: &str, count: &str) -> Child {
    appender(dir, tag, count)
        .spawn()
        .expect("spawn planb-test-appender")
}

fn appender(dir: &Path, tag: &str, count: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_planb-test-appender"));
    command
        .arg(dir)
        .arg(tag)
        .arg(count)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

fn parse_line(line: &str) -> Acknowledged {
    let (cursor, payload) = line
        .split_once(' ')
        .unwrap_or_else(|| panic!("malformed acknowledgement {line:?}"));
    Acknowledged {
        cursor: cursor
            .parse()
            .unwrap_or_else(|e| panic!("bad cursor in {line:?}: {e}")),
        payload: payload.to_string(),
    }
}

/// Forwards each complete line of `stdout` as it arrives. A line without its
/// newline can only come from a writer killed mid-write, and its append was never
/// acknowledged to anyone, so it is dropped.
fn forward_lines(stdout: ChildStdout) -> (mpsc::Receiver<Acknowledged>, JoinHandle<()>) {
    let (sender, receiver) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) => return,
                Ok(_) if line.ends_with('\n') => {
                    if sender.send(parse_line(line.trim_end())).is_err() {
                        return;
                    }
                }
                Ok(_) => return,
                Err(e) => panic!("reading the appender's stdout: {e}"),
            }
        }
    });
    (receiver, thread)
}

/// Everything in the log in `dir`, read by a fresh reader; any error fails the test.
fn read_all(dir: &Path) -> Vec<Record> {
    read_all_with(dir, LogOptions::default())
}

fn read_all_with(dir: &Path, options: LogOptions) -> Vec<Record> {
    let mut reader = read_dir(dir, options, Cursor(1)).expect("reader");
    let mut records = Vec::new();
    while let Some(record) = reader.next().expect("read the log") {
        records.push(record);
    }
    records
}

fn assert_gapless_from_one(records: &[Record]) {
    for (index, record) in records.iter().enumerate() {
        assert_eq!(
            record.cursor,
            Cursor(index as u64 + 1),
            "cursor gap at index {index}"
        );
    }
}

/// Every acknowledged append is in `records` at exactly its cursor.
fn assert_acknowledged_present(records: &[Record], acknowledged: &[Acknowledged]) {
    for ack in acknowledged {
        let record = usize::try_from(ack.cursor - 1)
            .ok()
            .and_then(|index| records.get(index))
            .unwrap_or_else(|| {
                panic!(
                    "acknowledged {ack:?} is missing: the log holds {} records",
                    records.len()
                )
            });
        assert_eq!(
            String::from_utf8_lossy(&record.payload),
            ack.payload,
            "record at acknowledged cursor {} differs",
            ack.cursor
        );
    }
}

fn assert_no_duplicate_payloads(records: &[Record]) {
    let mut seen = HashSet::new();
    for record in records {
        assert!(
            seen.insert(record.payload.as_slice()),
            "payload {:?} appears twice, again at cursor {}",
            String::from_utf8_lossy(&record.payload),
            record.cursor
        );
    }
}

fn verify_dir(dir: &Path) -> planb_log::VerifyReport {
    verify_dir_with(dir, LogOptions::default())
}

fn verify_dir_with(dir: &Path, options: LogOptions) -> planb_log::VerifyReport {
    let storage = FsStorage::open_read_only(dir).expect("open read-only");
    verify(Arc::new(storage), options).expect("verify finds no corruption")
}

#[test]
fn kill_minus_nine_never_loses_an_acknowledged_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("log");
    // Acknowledgements of every round: later rounds append after earlier crashes,
    // and recovery from those must never take back what an earlier round was promised.
    let mut acknowledged: Vec<Acknowledged> = Vec::new();
    for round in 0..15u64 {
        let mut child = spawn_appender(&log_dir, &format!("r{round}"), "forever");
        let (lines, reader_thread) = forward_lines(child.stdout.take().expect("piped stdout"));
        // A threshold that varies per round lets the kill land at a different point
        // of the append cycle each time, rather than at one repeated phase.
        let threshold = 50 + round * 37;
        let mut this_round = Vec::new();
        while (this_round.len() as u64) < threshold {
            match lines.recv() {
                Ok(ack) => this_round.push(ack),
                Err(_) => {
                    let status = child.wait().expect("wait");
                    panic!(
                        "round {round}: appender stopped after {} acknowledgements: {status}",
                        this_round.len()
                    );
                }
            }
        }
        child.kill().expect("SIGKILL the appender");
        let status = child.wait().expect("wait");
        assert!(
            !status.success(),
            "round {round}: a killed appender exited cleanly"
        );
        reader_thread.join().expect("stdout reader thread");
        this_round.extend(lines.try_iter());
        acknowledged.extend(this_round);

        // The log as the killed process left it: a torn tail is allowed, damage is not.
        let before_recovery = verify_dir(&log_dir);

        let (log, report) = open_dir(&log_dir, LogOptions::default()).expect("reopen");
        eprintln!("round {round}: verify before recovery {before_recovery:?}; recovery {report:?}");
        drop(log);
        let records = read_all(&log_dir);
        assert_eq!(report.next_cursor, Cursor(records.len() as u64 + 1));
        assert_gapless_from_one(&records);
        assert_acknowledged_present(&records, &acknowledged);
        assert_no_duplicate_payloads(&records);
        let after_recovery = verify_dir(&log_dir);
        assert_eq!(after_recovery.records, records.len() as u64);
        assert_eq!(after_recovery.torn_tail, None, "recovery left a torn tail");
    }
}

#[test]
fn several_processes_append_to_one_log_in_one_gapless_order() {
    const WRITERS: usize = 4;
    const PER_WRITER: u64 = 300;
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("log");
    // Every child is running before any is waited for, so their appends interleave.
    let children: Vec<(String, Child)> = (0..WRITERS)
        .map(|w| {
            let tag = format!("w{w}");
            let child = spawn_appender(&log_dir, &tag, &PER_WRITER.to_string());
            (tag, child)
        })
        .collect();
    // Each child's stdout is drained on its own thread so no child blocks on a full pipe.
    let waiters: Vec<_> = children
        .into_iter()
        .map(|(tag, child)| {
            let waiter = std::thread::spawn(move || {
                let output = child.wait_with_output().expect("wait for appender");
                let text = String::from_utf8(output.stdout).expect("utf-8 stdout");
                (
                    output.status,
                    text.lines().map(parse_line).collect::<Vec<_>>(),
                )
            });
            (tag, waiter)
        })
        .collect();
    let mut acknowledged = Vec::new();
    for (tag, waiter) in waiters {
        let (status, lines) = waiter.join().expect("waiter thread");
        assert!(status.success(), "appender {tag} failed: {status}");
        assert_eq!(
            lines.len() as u64,
            PER_WRITER,
            "appender {tag} acknowledgements"
        );
        acknowledged.extend(lines);
    }

    let records = read_all(&log_dir);
    assert_eq!(records.len() as u64, WRITERS as u64 * PER_WRITER);
    assert_gapless_from_one(&records);
    assert_acknowledged_present(&records, &acknowledged);
    let mut next_seq: HashMap<String, u64> = HashMap::new();
    for record in &records {
        let payload = String::from_utf8(record.payload.clone()).expect("utf-8 payload");
        let (tag, seq) = payload
            .split_once(':')
            .unwrap_or_else(|| panic!("payload {payload:?} at cursor {}", record.cursor));
        let seq: u64 = seq.parse().expect("numeric seq");
        let expected = next_seq.entry(tag.to_string()).or_insert(0);
        assert_eq!(
            seq, *expected,
            "writer {tag} out of order at cursor {}",
            record.cursor
        );
        *expected += 1;
    }
    assert_eq!(next_seq.len(), WRITERS, "writers present in the log");
    assert!(next_seq.values().all(|&n| n == PER_WRITER), "{next_seq:?}");
    assert_eq!(verify_dir(&log_dir).records, WRITERS as u64 * PER_WRITER);
}

#[test]
fn a_reader_in_another_process_sees_records_live() {
    const COUNT: u64 = 500;
    let dir = tempfile::tempdir().expect("tempdir");
    // The reader opens the directory read-only, which requires it to exist before the
    // writer has created anything in it.
    let log_dir = dir.path();
    let mut child = spawn_appender(log_dir, "w", &COUNT.to_string());
    let (lines, reader_thread) = forward_lines(child.stdout.take().expect("piped stdout"));
    let mut reader = read_dir(log_dir, LogOptions::default(), Cursor(1)).expect("reader");
    let mut records = Vec::new();
    let mut seen_while_running = 0usize;
    let status = loop {
        match reader.next() {
            Ok(Some(record)) => records.push(record),
            Ok(None) => {
                if let Some(status) = child.try_wait().expect("try_wait") {
                    break status;
                }
                seen_while_running = records.len();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(error) => panic!(
                "reader failed after {} records while the writer ran: {error}",
                records.len()
            ),
        }
    };
    // Everything the writer appended is durable before it exits; drain the rest.
    while let Some(record) = reader.next().expect("read after the writer exited") {
        records.push(record);
    }
    eprintln!("reader saw {seen_while_running} records before the writer exited");
    assert!(status.success(), "appender failed: {status}");
    reader_thread.join().expect("stdout reader thread");
    let acknowledged: Vec<Acknowledged> = lines.try_iter().collect();
    assert_eq!(acknowledged.len() as u64, COUNT);

    assert_eq!(records.len() as u64, COUNT);
    assert_gapless_from_one(&records);
    for (seq, record) in records.iter().enumerate() {
        assert_eq!(record.payload, format!("w:{seq}").into_bytes());
    }
    assert_acknowledged_present(&records, &acknowledged);
}

#[test]
fn processes_find_each_others_roll_overs_at_every_segment_fill_level() {
    // Three processes with 1 KiB segments and records of every size up to
    // the largest: each must find the segment another rolled on to, whether
    // the segment it knew had just passed the point where a roll-over
    // becomes possible or was nearly full.
    const WRITERS: usize = 3;
    const PER_WRITER: u64 = 200;
    let small = LogOptions {
        max_record_bytes: 256,
        max_segment_bytes: 1024,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let log_dir = dir.path().join("log");
    let children: Vec<(String, Child)> = (0..WRITERS)
        .map(|w| {
            let tag = format!("w{w}");
            let child = appender(&log_dir, &tag, &PER_WRITER.to_string())
                .env("PLANB_TEST_SMALL_SEGMENTS", "1")
                .spawn()
                .expect("spawn planb-test-appender");
            (tag, child)
        })
        .collect();
    let mut acknowledged = Vec::new();
    for (tag, child) in children {
        let output = child.wait_with_output().expect("wait for appender");
        assert!(
            output.status.success(),
            "appender {tag} failed: {}",
            output.status
        );
        let text = String::from_utf8(output.stdout).expect("utf-8 stdout");
        acknowledged.extend(text.lines().map(parse_line));
    }
    assert_eq!(acknowledged.len() as u64, WRITERS as u64 * PER_WRITER);
    let records = read_all_with(&log_dir, small);
    assert_eq!(records.len(), acknowledged.len());
    assert_gapless_from_one(&records);
    assert_acknowledged_present(&records, &acknowledged);
    assert_no_duplicate_payloads(&records);
    let segments = std::fs::read_dir(&log_dir)
        .expect("log dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".seg"))
        })
        .count();
    assert!(
        segments > 40,
        "only {segments} segments: too few roll-overs"
    );
    assert_eq!(
        verify_dir_with(&log_dir, small).records,
        records.len() as u64
    );
}
