//! `planb-test-appender <log-dir> <writer-tag> <count|forever>`: a separate process
//! that appends to a log as fast as it can, for the multi-process tests in
//! `tests/tests/system/log_processes.rs`.
//!
//! Payloads are `<writer-tag>:<seq>` with `seq` counting from 0. Stdout is the side
//! channel of acknowledged appends: a line `<cursor> <writer-tag>:<seq>` is written
//! and flushed only after `Log::append` has returned Ok, so every line a test reads
//! names a record the log promised was durable. A process killed between the append
//! and the line leaves a record without a line, which is allowed; a line without a
//! record is the bug the tests look for. Errors go to stderr with exit code 1.
//!
//! With `PLANB_TEST_SMALL_SEGMENTS=1` the log has 1 KiB segments and records of
//! at most 256 bytes, and each payload is led by dots to a length that varies
//! with its sequence number, so writers roll segments over at every fill level.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use planb_log::{LogOptions, open_dir};

/// How many records to append.
#[derive(Debug, Clone, Copy)]
enum Count {
    Exactly(u64),
    Forever,
}

#[derive(Debug)]
struct Args {
    dir: PathBuf,
    tag: String,
    count: Count,
}

fn parse_args() -> anyhow::Result<Args> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, tag, count] = args.as_slice() else {
        return Err(anyhow::anyhow!(
            "usage: planb-test-appender <log-dir> <writer-tag> <count|forever>, got {} arguments",
            args.len()
        ));
    };
    let count = if count == "forever" {
        Count::Forever
    } else {
        Count::Exactly(count.parse().map_err(|e| {
            anyhow::anyhow!("count: {count:?} is neither a number nor forever: {e}")
        })?)
    };
    Ok(Args {
        dir: PathBuf::from(dir),
        tag: tag.clone(),
        count,
    })
}

/// The limits of `PLANB_TEST_SMALL_SEGMENTS=1`.
const SMALL: LogOptions = LogOptions {
    max_record_bytes: 256,
    max_segment_bytes: 1024,
};

fn run(args: &Args) -> anyhow::Result<()> {
    let small = std::env::var("PLANB_TEST_SMALL_SEGMENTS").is_ok_and(|v| v == "1");
    let options = if small { SMALL } else { LogOptions::default() };
    let (log, _report) = open_dir(&args.dir, options)
        .map_err(|e| anyhow::anyhow!("open {}: {e}", args.dir.display()))?;
    let mut stdout = std::io::stdout().lock();
    let mut seq: u64 = 0;
    while match args.count {
        Count::Exactly(count) => seq < count,
        Count::Forever => true,
    } {
        let mut payload = format!("{}:{seq}", args.tag);
        if small {
            let dots = (seq as usize * 37 + args.tag.len() * 11)
                % (SMALL.max_record_bytes as usize - payload.len());
            payload.insert_str(0, &".".repeat(dots));
        }
        let range = log
            .append(&[payload.as_bytes()])
            .map_err(|e| anyhow::anyhow!("append {payload}: {e}"))?;
        // One short write per line: a pipe delivers writes under PIPE_BUF bytes
        // whole, so a reader never sees half of an acknowledgement.
        writeln!(stdout, "{} {payload}", range.first)
            .and_then(|()| stdout.flush())
            .map_err(|e| anyhow::anyhow!("stdout: {e}"))?;
        seq += 1;
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(|args| run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("planb-test-appender: {message}");
            ExitCode::FAILURE
        }
    }
}
