//! Append benchmarks, reported as ratios against the physical floor measured in the
//! same run on the same disk.
//!
//! - single durable append vs a raw `write` + `fdatasync` of the same record size;
//! - 32 concurrent appenders (group commit) vs the unbatched single-writer rate;
//! - reopen (recovery) and a full verifying read of a log of 1 000 000 records.
//!
//! Run with `cargo bench -p planb-log`. Files go under cargo's target tmp dir (a
//! real disk, not tmpfs), or `PLANB_BENCH_DIR` if set.

#![allow(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use planb_log::{FsStorage, LogOptions, open_dir, verify};

const PAYLOAD_BYTES: usize = 200;
const SINGLE_ITERATIONS: usize = 3000;
const WRITERS: usize = 32;
const APPENDS_PER_WRITER: usize = 1500;
const LARGE_LOG_RECORDS: u64 = 1_000_000;

fn bench_dir(name: &str) -> PathBuf {
    let root = std::env::var_os("PLANB_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let dir = root.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create bench dir");
    dir
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The floor: append the same number of bytes to a plain file and fdatasync it.
fn raw_fdatasync() -> Vec<Duration> {
    let dir = bench_dir("raw");
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("raw"))
        .expect("open raw file");
    let record = vec![0xabu8; PAYLOAD_BYTES + planb_log::format::RECORD_HEADER_LEN];
    (0..SINGLE_ITERATIONS)
        .map(|_| {
            let start = Instant::now();
            file.write_all(&record).expect("write");
            file.sync_data().expect("fdatasync");
            start.elapsed()
        })
        .collect()
}

fn single_appends() -> Vec<Duration> {
    let (log, _) = open_dir(&bench_dir("single"), LogOptions::default()).expect("open log");
    let payload = vec![0xcdu8; PAYLOAD_BYTES];
    (0..SINGLE_ITERATIONS)
        .map(|_| {
            let start = Instant::now();
            log.append(&[&payload]).expect("append");
            start.elapsed()
        })
        .collect()
}

fn concurrent_appends() -> (f64, u64) {
    let (log, _) = open_dir(&bench_dir("concurrent"), LogOptions::default()).expect("open log");
    let payload = vec![0xefu8; PAYLOAD_BYTES];
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..WRITERS {
            let log = log.clone();
            let payload = &payload;
            scope.spawn(move || {
                for _ in 0..APPENDS_PER_WRITER {
                    log.append(&[payload]).expect("append");
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let total = (WRITERS * APPENDS_PER_WRITER) as u64;
    (total as f64 / elapsed.as_secs_f64(), total)
}

fn large_log() {
    let dir = bench_dir("large");
    {
        let (log, _) = open_dir(&dir, LogOptions::default()).expect("open log");
        let payload = vec![0x11u8; PAYLOAD_BYTES];
        let batch: Vec<&[u8]> = (0..1000).map(|_| payload.as_slice()).collect();
        for _ in 0..LARGE_LOG_RECORDS / 1000 {
            log.append(&batch).expect("append batch");
        }
    }
    let start = Instant::now();
    let (_, report) = open_dir(&dir, LogOptions::default()).expect("reopen");
    let reopen = start.elapsed();
    assert_eq!(report.next_cursor.0, LARGE_LOG_RECORDS + 1);
    let start = Instant::now();
    let storage = FsStorage::open_read_only(&dir).expect("open read-only");
    let verified = verify(Arc::new(storage), LogOptions::default()).expect("verify");
    let read_all = start.elapsed();
    assert_eq!(verified.records, LARGE_LOG_RECORDS);
    println!(
        "log of {LARGE_LOG_RECORDS} records x {PAYLOAD_BYTES} B ({} segments): \
         reopen with recovery {:.1} ms; verifying full read {:.0} ms ({:.2} M records/s)",
        verified.segments,
        reopen.as_secs_f64() * 1e3,
        read_all.as_secs_f64() * 1e3,
        LARGE_LOG_RECORDS as f64 / read_all.as_secs_f64() / 1e6
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing and
    // only wants to know that the target runs, so a quick pass is enough there.
    if !std::env::args().any(|a| a == "--bench") {
        println!("planb-log bench: run with `cargo bench -p planb-log`");
        return;
    }
    let mut raw = raw_fdatasync();
    let mut single = single_appends();
    let raw_median = median(&mut raw);
    let single_median = median(&mut single);
    println!(
        "raw write+fdatasync of {} B: median {:.1} us, p99 {:.1} us",
        PAYLOAD_BYTES + planb_log::format::RECORD_HEADER_LEN,
        micros(raw_median),
        micros(percentile(&mut raw, 0.99))
    );
    println!(
        "durable single append of {PAYLOAD_BYTES} B: median {:.1} us, p99 {:.1} us",
        micros(single_median),
        micros(percentile(&mut single, 0.99))
    );
    println!(
        "  ratio to floor: {:.2}x (budget <= 1.5x)",
        single_median.as_secs_f64() / raw_median.as_secs_f64()
    );
    let unbatched_rate = single.len() as f64 / single.iter().sum::<Duration>().as_secs_f64();
    let (concurrent_rate, total) = concurrent_appends();
    println!("unbatched single-writer rate: {unbatched_rate:.0} appends/s");
    println!(
        "{WRITERS} concurrent writers, {total} durable appends: {concurrent_rate:.0} appends/s"
    );
    println!(
        "  ratio to unbatched: {:.1}x (budget >= 20x)",
        concurrent_rate / unbatched_rate
    );
    large_log();
}
