//! The files-and-loop job, written once for `tests/files_and_loop.rs` and
//! `examples/files_and_loop.rs` (which includes this file with `#[path]`): a monitoring source
//! lists a directory that files are added to while the job runs (one after each committed
//! checkpoint), three split readers read the splits in parallel, an iteration halves the values
//! until they fall below a bound (the rest fed back to the head), and the two-phase file sink
//! commits exactly once. [`run`] builds and runs it under one model with the faults it is
//! given and returns what was committed; [`reference`] is the output computed without the
//! runtime.
//!
//! How the job ends: the monitoring source stops once it forwarded the last file
//! (`stop_after_files`), the readers end after their last split, and the iteration head ends
//! when no feedback came for its wait timeout after its input ended.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;
use streamtask::sink::read_committed;
use streamtask::{ContinuousFiles, JobPhase};

/// The three models, in the order the runs go.
pub const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

pub const FILES: u64 = 6;
pub const LINES: u64 = 100;
pub const BOUND: u64 = 10;
/// Longer than any trip around the loop on a loaded machine (a late record fails the tail,
/// never lost).
pub const MAX_WAIT: Duration = Duration::from_millis(1_000);
/// A hang guard for the file writer only: nothing asserts on time.
pub const GUARD: Duration = Duration::from_secs(60);

pub fn value(id: u64) -> u64 {
    (id * 7_919) % 65_536 + 1
}

/// File `f`'s lines: `<id> <value>`.
pub fn write_file(dir: &Path, f: u64) {
    let text: String = (f * LINES..(f + 1) * LINES)
        .map(|id| format!("{id} {}\n", value(id)))
        .collect();
    let hidden = dir.join(format!(".f{f}.tmp"));
    std::fs::write(&hidden, text).unwrap();
    std::fs::rename(&hidden, dir.join(format!("f{f}.txt"))).unwrap();
}

/// The job without the runtime, as the sink formats it.
pub fn reference() -> Vec<String> {
    let mut out: Vec<String> = (0..FILES * LINES)
        .map(|id| {
            let mut v = value(id) / 2;
            while v >= BOUND {
                v /= 2;
            }
            format!("{id} {v}")
        })
        .collect();
    out.sort();
    out
}

/// What a run committed (sorted) and how often the job restarted.
pub struct Ran {
    pub output: Vec<String>,
    pub restarts: u32,
}

/// Runs the job under `model` with `file_faults` in the monitoring source (`Source`, counted
/// per file forwarded) and the readers (`Operator`, per line emitted), and `loop_faults` in the
/// loop's requeue task (`Operator`, per record once a checkpoint committed, so the restore has
/// records in the loop). Asserts that every planned fault fired and that every failure was an
/// injected one.
pub fn run(model: Model, file_faults: FaultPlan, loop_faults: FaultPlan) -> Ran {
    let input = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    write_file(input.path(), 0);
    let planned = file_faults.planned().len() + loop_faults.planned().len();
    let (file_faults, loop_faults) = (Arc::new(file_faults), Arc::new(loop_faults));
    let committed = Arc::new(AtomicU64::new(0));

    let env = StreamEnvironment::new(model);
    let (iteration, head) = env
        .read_files(
            ContinuousFiles::new(input.path(), Duration::from_millis(5), 3)
                .with_split_bytes(512)
                .stop_after_files(FILES)
                .with_faults(Arc::clone(&file_faults)),
        )
        .map("parse", |line: String| {
            let (id, v) = line.split_once(' ').expect("`<id> <value>`");
            (id.parse::<u64>().unwrap(), v.parse::<u64>().unwrap())
        })
        .rebalance("spread", 2)
        .iterate("halve loop", MAX_WAIT);
    let mut branches = head
        .map("halve", |(id, v): (u64, u64)| (id, v / 2))
        .fan_out(&["again", "done"]);
    let done = branches.pop().unwrap();
    let again = branches.pop().unwrap();
    let (plan, seen) = (Arc::clone(&loop_faults), Arc::clone(&committed));
    iteration.close_with(
        again
            .filter("big", |&(_, v): &(u64, u64)| v >= BOUND)
            .key_by(|&(id, _): &(u64, u64)| id % 5)
            .map_with_parallelism("requeue", 2, move |record: (u64, u64)| {
                // Counted once a checkpoint committed: the restore has records in the loop.
                if seen.load(Ordering::Acquire) >= 1 {
                    plan.check(FaultKind::Operator);
                }
                record
            }),
    );
    let out_dir = work.path().join("out");
    done.filter("small", |&(_, v): &(u64, u64)| v < BOUND)
        .two_phase_file_sink("sink", &out_dir, |&(id, v): &(u64, u64)| {
            format!("{id} {v}")
        });
    let job = env.build().unwrap_or_else(|e| panic!("{model}: {e}"));

    let counter = Arc::clone(&committed);
    let config = JobConfig::new(work.path())
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointCommitting { .. } = phase {
                counter.fetch_add(1, Ordering::AcqRel);
            }
        }))
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(Duration::from_millis(500))
                // An expiry under load is no failure of what this tests.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::fixed_delay(5, Duration::from_millis(1)))
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair);
    // Files appear while the job runs: one after each committed checkpoint (bounded wait).
    let dir = input.path().to_path_buf();
    let writer_seen = Arc::clone(&committed);
    let writer = std::thread::spawn(move || {
        for f in 1..FILES {
            let before = writer_seen.load(Ordering::Acquire);
            let start = Instant::now();
            while writer_seen.load(Ordering::Acquire) == before && start.elapsed() < GUARD {
                std::thread::sleep(Duration::from_millis(2));
            }
            write_file(&dir, f);
        }
    });
    let result = job.run(&config);
    writer.join().unwrap();
    let result = result.unwrap_or_else(|e| panic!("{model}: {e}"));
    let fired = file_faults.fired() + loop_faults.fired();
    assert_eq!(fired, planned, "{model}: every planned fault fired");
    assert!(
        result.failures.iter().all(|f| f.is_injected()),
        "{model}: a failure that was not injected: {:?}",
        result.failures
    );
    let mut output = read_committed(&out_dir).unwrap();
    output.sort();
    Ran {
        output,
        restarts: result.restarts,
    }
}
