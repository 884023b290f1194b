//! Continuous file reading under every model: a monitoring source lists a
//! directory, split readers read the splits into lines, and the committed output holds every
//! line of every file exactly once, also with files added while the job runs and faults
//! injected in the monitoring source and in the readers. The reader's two forms (thread,
//! mails) keep one snapshot and continue a split mid-way after a restore.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::files::{FileSplit, ReadMode, ReaderSnapshot, SplitReader};
use streamtask::prelude::*;
use streamtask::{ContinuousFiles, JobPhase};
use streamtask_core::state::TaskSnapshot;
use streamtask_core::state::decode;
use streamtask_core::testing::OperatorHarness;

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

/// A hang guard only: nothing asserts on time.
const GUARD: Duration = Duration::from_secs(60);

/// Writes `name` atomically: under a hidden name first, then renamed into place, so the
/// monitoring source never lists a half-written file (see the `streamtask::files` module docs).
fn write_file(dir: &Path, name: &str, lines: &[String]) {
    let hidden = dir.join(format!(".{name}.tmp"));
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(&hidden, text).unwrap();
    std::fs::rename(&hidden, dir.join(name)).unwrap();
}

fn lines_of(file: usize, count: usize) -> Vec<String> {
    (0..count)
        .map(|l| format!("file{file:02}-line{l:04}"))
        .collect()
}

/// Checkpoints every 10 ms (expiring after 250 ms), up to 10 restarts 1 ms apart, small
/// channels, a fair checkpoint lock (as tests/job_shapes.rs).
fn config(dir: &Path, committed: &Arc<AtomicU64>) -> JobConfig {
    let committed = Arc::clone(committed);
    JobConfig::new(dir)
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointCommitting { .. } = phase {
                committed.fetch_add(1, Ordering::AcqRel);
            }
        }))
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(Duration::from_millis(250))
                // An expiry under load is no failure of what this tests.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::fixed_delay(10, Duration::from_millis(1)))
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair)
}

struct Run {
    lines: Vec<String>,
    restarts: u32,
}

/// Runs the continuous-read job under `model` over `files` files of `per_file` lines: `before`
/// of them exist at the start, the rest are added by a writer thread while the job runs (after
/// each checkpoint commit, so some land between checkpoints and faults).
fn run(
    model: Model,
    files: usize,
    per_file: usize,
    before: usize,
    split_bytes: u64,
    faults: FaultPlan,
) -> Run {
    let input = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    for f in 0..before {
        write_file(
            input.path(),
            &format!("f{f:02}.txt"),
            &lines_of(f, per_file),
        );
    }
    let faults = Arc::new(faults);
    let env = StreamEnvironment::new(model);
    let out = CollectHandle::new();
    env.read_files(
        ContinuousFiles::new(input.path(), Duration::from_millis(5), 3)
            .with_split_bytes(split_bytes)
            .stop_after_files(files as u64)
            .with_faults(Arc::clone(&faults)),
    )
    .collect_sink("collect", &out);
    let committed = Arc::new(AtomicU64::new(0));
    let job = env.build().unwrap_or_else(|e| panic!("{model}: {e}"));
    let dir = input.path().to_path_buf();
    let writer_committed = Arc::clone(&committed);
    let writer = std::thread::spawn(move || {
        for f in before..files {
            // Wait (bounded) for one more committed checkpoint before each file.
            let seen = writer_committed.load(Ordering::Acquire);
            let start = Instant::now();
            while writer_committed.load(Ordering::Acquire) == seen && start.elapsed() < GUARD {
                std::thread::sleep(Duration::from_millis(2));
            }
            write_file(&dir, &format!("f{f:02}.txt"), &lines_of(f, per_file));
        }
    });
    let result = job.run(&config(work.path(), &committed));
    writer.join().unwrap();
    let result = result.unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(
        faults.fired(),
        faults.planned().len(),
        "{model}: not every planned fault fired"
    );
    assert!(
        result.failures.iter().all(|f| f.is_injected()),
        "{model}: a failure that was not injected: {:?}",
        result.failures
    );
    let mut lines = out.committed();
    lines.sort();
    Run {
        lines,
        restarts: result.restarts,
    }
}

fn expected(files: usize, per_file: usize) -> Vec<String> {
    let mut all: Vec<String> = (0..files).flat_map(|f| lines_of(f, per_file)).collect();
    all.sort();
    all
}

#[test]
fn smoke() {
    for model in MODELS {
        let run = run(model, 3, 5, 3, 1 << 20, FaultPlan::none());
        assert_eq!(run.restarts, 0, "{model}");
        assert_eq!(run.lines, expected(3, 5), "{model}");
    }
}

#[test]
fn files_added_while_the_job_runs_are_read_exactly_once_through_faults() {
    // 8 files of 120 lines, 6 of them added while it runs; splits of 1 KiB (about 3 a file),
    // so the readers restore mid-split. One fault in the monitoring source (at the 4th file
    // forwarded), two in the readers (at lines 150 and 600).
    let faults = [
        (FaultKind::Source, 4),
        (FaultKind::Operator, 150),
        (FaultKind::Operator, 600),
    ];
    for model in MODELS {
        let clean = run(model, 8, 120, 2, 1024, FaultPlan::none());
        assert_eq!(clean.restarts, 0, "{model}: restarted without faults");
        assert_eq!(
            clean.lines,
            expected(8, 120),
            "{model}: output without faults"
        );
        let faulty = run(model, 8, 120, 2, 1024, FaultPlan::at(&faults));
        assert!(
            faulty.restarts >= 1,
            "{model}: the faults did not restart the job"
        );
        assert_eq!(
            faulty.lines,
            expected(8, 120),
            "{model}: output with faults is not exactly once"
        );
    }
}

/// Drives a reader in a harness until `n` lines came out (the thread form's lines arrive as
/// events from its thread: they are delivered as they come, with a hang guard only).
fn read_lines(harness: &mut OperatorHarness<SplitReader>, n: usize) -> Vec<String> {
    let start = Instant::now();
    let mut out = Vec::new();
    while out.len() < n {
        assert!(
            start.elapsed() < GUARD,
            "only {} of {n} lines came",
            out.len()
        );
        if harness.process_events().unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        out.extend(harness.output_values());
    }
    out
}

#[test]
fn a_restored_reader_continues_its_split_mid_way_in_both_forms() {
    let input = tempfile::tempdir().unwrap();
    let lines = lines_of(0, 50);
    write_file(input.path(), "big.txt", &lines);
    let path = input.path().join("big.txt");
    let len = std::fs::metadata(&path).unwrap().len();
    for mode in [ReadMode::Thread, ReadMode::Mails { chunk: 3 }] {
        let split = FileSplit::of_file(path.clone(), 0, len, len).remove(0);
        let second = FileSplit::of_file(path.clone(), 0, len, len).remove(0);
        let faults = Arc::new(FaultPlan::none());
        let mut harness =
            OperatorHarness::new(SplitReader::new("r".into(), mode, Arc::clone(&faults)));
        harness.open().unwrap();
        harness.process(split).unwrap();
        harness.process(second).unwrap();
        let mut got = read_lines(&mut harness, 20);
        // Lines read ahead by the thread but not delivered are not in the snapshot: it holds
        // exactly what was emitted.
        let snapshot: TaskSnapshot = harness.snapshot(1).unwrap();
        let state: ReaderSnapshot =
            decode(snapshot.get(&TaskSnapshot::operator_key(0)).unwrap()).unwrap();
        // Every line is 16 bytes; the splits not in the state were read to their end.
        let finished = 2 - state.pending.len() - usize::from(state.current.is_some());
        let in_current = got.len() - 50 * finished;
        if let Some(current) = &state.current {
            assert_eq!(
                current.position,
                Some(16 * in_current as u64),
                "{mode:?}: the offset is that of the last line emitted"
            );
        } else {
            assert_eq!(
                in_current, 0,
                "{mode:?}: no split open, no line of one emitted"
            );
        }
        harness.close().unwrap();
        drop(harness);

        let mut restored =
            OperatorHarness::restored(SplitReader::new("r".into(), mode, faults), &snapshot);
        restored.open().unwrap();
        let rest = 100 - got.len();
        got.extend(read_lines(&mut restored, rest));
        restored.close().unwrap();
        let mut twice = lines.clone();
        twice.extend(lines.iter().cloned());
        assert_eq!(
            got, twice,
            "{mode:?}: the restore continued mid-split, then the next one"
        );
    }
}
