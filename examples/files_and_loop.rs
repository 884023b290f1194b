//! Issue 14's whole job, written once and run under the legacy, mailbox and bridge models: a
//! monitoring source lists a directory that files are added to while the job runs, three split
//! readers read the splits in parallel, an iteration halves the values until they fall below a
//! bound (the rest fed back to the head), and the two-phase file sink commits exactly once.
//! Three faults are injected in every run: in the monitoring source, in a reader and inside the
//! loop. The committed output must equal a reference computed without the runtime, under every
//! model; the example asserts it.
//!
//! The job ends because the monitoring source stops after the last file (`stop_after_files`);
//! the readers then end, and the iteration head ends when no feedback came for its wait timeout.
//!
//! Run with `cargo run --example files_and_loop`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use streamtask::demo::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;
use streamtask::sink::read_committed;
use streamtask::{ContinuousFiles, JobPhase};
use streamtask_legacy::Fairness;

const FILES: u64 = 6;
const LINES: u64 = 100;
const BOUND: u64 = 10;
/// Longer than any trip around the loop on a loaded machine (a late record fails the tail,
/// never lost).
const MAX_WAIT: Duration = Duration::from_millis(1_000);
/// A hang guard for the file writer only: nothing asserts on time.
const GUARD: Duration = Duration::from_secs(60);

fn value(id: u64) -> u64 {
    (id * 7_919) % 65_536 + 1
}

/// File `f`'s lines: `<id> <value>`.
fn write_file(dir: &Path, f: u64) {
    let text: String = (f * LINES..(f + 1) * LINES)
        .map(|id| format!("{id} {}\n", value(id)))
        .collect();
    let hidden = dir.join(format!(".f{f}.tmp"));
    std::fs::write(&hidden, text).unwrap();
    std::fs::rename(&hidden, dir.join(format!("f{f}.txt"))).unwrap();
}

/// The job without the runtime, as the sink formats it.
fn reference() -> Vec<String> {
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

struct Ran {
    output: Vec<String>,
    restarts: u32,
}

fn run(model: Model) -> Ran {
    let input = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    write_file(input.path(), 0);
    // The monitor fails at the 3rd file it forwards, a reader at the 250th line emitted.
    let file_faults = Arc::new(FaultPlan::at(&[
        (FaultKind::Source, 3),
        (FaultKind::Operator, 250),
    ]));
    // The loop's requeue task, at its 1500th record after the first committed checkpoint.
    let loop_faults = Arc::new(FaultPlan::at(&[(FaultKind::Operator, 1_500)]));
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
                .with_timeout(Duration::from_millis(500)),
        ))
        .with_restart(RestartStrategy::fixed_delay(5, Duration::from_millis(1)))
        .with_channel_capacity(16)
        .with_fairness(Fairness::Fair);
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
    assert_eq!(fired, 3, "{model}: the three planned faults fired");
    assert!(
        result.failures.iter().all(|f| f.contains("injected fault")),
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

fn main() {
    // The injected faults panic on purpose: keep their messages out of the output.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        if !message.starts_with("injected fault") {
            default_hook(info);
        }
    }));
    let expected = reference();
    let mut outputs = Vec::new();
    for model in [Model::Legacy, Model::Mailbox, Model::Bridge] {
        let ran = run(model);
        assert!(ran.restarts >= 1, "{model}: the faults restarted the job");
        assert_eq!(ran.output, expected, "{model}: exactly the reference, once");
        println!(
            "{model:<8} {} results from {FILES} files committed exactly once through {} restart(s)",
            ran.output.len(),
            ran.restarts
        );
        outputs.push(ran.output);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    println!("identical output under the three models");
}
