//! Issue 14's whole job under every model: a monitoring source lists a directory that files are
//! added to while the job runs, three split readers read the splits in parallel, the values are
//! halved in an iteration until they fall below a bound (the rest fed back to the head), and the
//! results go to the exactly-once two-phase file sink. The committed output must equal a
//! reference computed without the runtime, identical under the three models, with a fault
//! injected in the monitoring source, in a reader, or inside the loop.
//!
//! How the job ends: the monitoring source stops once it forwarded the last file
//! (`stop_after_files`), the readers end after their last split, and the iteration head ends
//! when no feedback came for its wait timeout after its input ended.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use streamtask::demo::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;
use streamtask::sink::read_committed;
use streamtask::{ContinuousFiles, JobPhase};

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];
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

/// Where the fault fires.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// The monitoring source, at the 3rd file it forwards.
    Monitor,
    /// A split reader, at the 250th line emitted.
    Reader,
    /// The loop's requeue task, at its 1500th record after the first committed checkpoint.
    Loop,
}

struct Ran {
    output: Vec<String>,
    restarts: u32,
}

fn run(model: Model, place: Option<Place>) -> Ran {
    let input = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    write_file(input.path(), 0);
    let file_faults = Arc::new(match place {
        Some(Place::Monitor) => FaultPlan::at(&[(FaultKind::Source, 3)]),
        Some(Place::Reader) => FaultPlan::at(&[(FaultKind::Operator, 250)]),
        _ => FaultPlan::none(),
    });
    let loop_faults = Arc::new(match place {
        Some(Place::Loop) => FaultPlan::at(&[(FaultKind::Operator, 1_500)]),
        _ => FaultPlan::none(),
    });
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
    assert_eq!(
        fired,
        usize::from(place.is_some()),
        "{model}: the planned fault fired"
    );
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

/// Every model commits the reference; a fault restarts the job.
fn every_model(place: Option<Place>) {
    let expected = reference();
    let mut outputs = Vec::new();
    for model in MODELS {
        let ran = run(model, place);
        match place {
            Some(place) => assert!(
                ran.restarts >= 1,
                "{model}: the fault at {place:?} restarted"
            ),
            None => assert_eq!(ran.restarts, 0, "{model}: restarted without faults"),
        }
        assert_eq!(
            ran.output, expected,
            "{model} ({place:?}): not exactly the reference"
        );
        outputs.push(ran.output);
    }
    assert!(
        outputs.windows(2).all(|w| w[0] == w[1]),
        "identical under the three models"
    );
}

#[test]
fn smoke() {
    every_model(None);
}

#[test]
fn a_fault_in_the_monitoring_source_commits_the_reference_under_every_model() {
    every_model(Some(Place::Monitor));
}

#[test]
fn a_fault_in_a_reader_commits_the_reference_under_every_model() {
    every_model(Some(Place::Reader));
}

#[test]
fn a_fault_inside_the_loop_commits_the_reference_under_every_model() {
    every_model(Some(Place::Loop));
}
