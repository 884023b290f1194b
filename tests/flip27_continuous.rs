//! The continuous FLIP-27 file source under every model: a split enumerator
//! that discovers files while the job runs (`FileSource::monitor_continuously`), snapshotted
//! when each checkpoint is triggered; the committed output holds every line exactly once
//! through reader faults and enumerator failures (the enumerator restored from its snapshot),
//! and through savepoints that rescale the readers 2 -> 3 -> 1.
//!
//! No timing decides what is read: the job itself writes file `k + 1` when it reads the last
//! line of file `k`, and the end marker after the last file, so files appear while it runs and
//! the job ends once every file was read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::files::FileSource;
use streamtask::prelude::*;

#[path = "common/split_files.rs"]
mod split_files;

use split_files::{expected, lines_of};

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];
const MARKER: &str = "_done";

/// Writes file `f` unless it exists: under a hidden name first, then renamed into place, so
/// the enumerator never lists a half-written file, and a re-read last line (after a restore)
/// does not write it again (which would give it a newer time and read it twice).
fn write_file(dir: &Path, f: usize, per_file: usize) {
    let path = dir.join(format!("f{f:02}.txt"));
    if path.exists() {
        return;
    }
    let temp = dir.join(format!(".f{f:02}.txt.tmp"));
    let mut text = lines_of(f, per_file).join("\n");
    text.push('\n');
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, &path).unwrap();
}

fn config(work: &Path) -> JobConfig {
    JobConfig::new(work)
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(3))
                .with_timeout(Duration::from_millis(500))
                // An expiry under load is no failure of what this tests.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::fixed_delay(10, Duration::from_millis(1)))
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair)
}

/// The job: a continuous file source of `parallelism` readers over `input`, a map that
/// writes the next file (or, after the last, the end marker) when it sees a file's last line,
/// and a two-phase file sink into `output`. Without `marker` the job writes no end marker and
/// cannot end by itself.
fn build(
    model: Model,
    input: &Path,
    output: &Path,
    (files, per_file): (usize, usize),
    parallelism: usize,
    (faults, marker): (&Arc<FaultPlan>, bool),
) -> JobGraph {
    let env = StreamEnvironment::new(model);
    let source = FileSource::for_dir(input)
        .with_split_bytes(2048)
        .with_faults(Arc::clone(faults))
        .monitor_continuously(Duration::from_millis(2))
        .end_marker(MARKER);
    let dir: PathBuf = input.to_path_buf();
    let last = format!("-line{:04}", per_file - 1);
    env.from_source("files", source, parallelism)
        .map("next-file", move |line: String| {
            if let Some(f) = line
                .strip_suffix(last.as_str())
                .and_then(|l| l.strip_prefix("file"))
                .and_then(|n| n.parse::<usize>().ok())
            {
                if f + 1 < files {
                    write_file(&dir, f + 1, per_file);
                } else if marker {
                    std::fs::write(dir.join(MARKER), "").unwrap();
                }
            }
            line
        })
        .two_phase_file_sink("sink", output.to_path_buf(), |s: &String| s.clone());
    env.build().unwrap_or_else(|e| panic!("{model}: {e}"))
}

fn committed(output: &Path) -> Vec<String> {
    let mut lines = streamtask::sink::read_committed(output).unwrap();
    lines.sort();
    lines
}

/// Runs the job from file 0 to the end; returns the sorted committed lines and the restarts.
fn run(
    model: Model,
    shape: (usize, usize),
    parallelism: usize,
    faults: FaultPlan,
) -> (Vec<String>, u32) {
    let input = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    write_file(input.path(), 0, shape.1);
    let faults = Arc::new(faults);
    let output = work.path().join("output");
    let job = build(
        model,
        input.path(),
        &output,
        shape,
        parallelism,
        (&faults, true),
    );
    let result = job
        .run(&config(work.path()))
        .unwrap_or_else(|e| panic!("{model}: {e}"));
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
    (committed(&output), result.restarts)
}

#[test]
fn smoke() {
    for model in MODELS {
        let (lines, restarts) = run(model, (3, 20), 2, FaultPlan::none());
        assert_eq!(restarts, 0, "{model}");
        assert_eq!(lines, expected(3, 20), "{model}");
    }
}

#[test]
fn files_discovered_while_running_are_committed_exactly_once_through_reader_faults() {
    // 5 files of 600 lines (splits of 2 KiB, about 5 a file), 3 readers; faults at the 700th
    // and 2100th line emitted: restores mid-split, with splits discovered and unassigned.
    let faults = [(FaultKind::Operator, 700), (FaultKind::Operator, 2100)];
    for model in MODELS {
        let (lines, restarts) = run(model, (5, 600), 3, FaultPlan::at(&faults));
        assert!(restarts >= 1, "{model}: the faults did not restart the job");
        assert_eq!(lines, expected(5, 600), "{model}: not exactly once");
    }
}

#[test]
fn an_enumerator_failure_restarts_from_its_trigger_time_snapshot_exactly_once() {
    // The enumerator fails discovering the 3rd file and again at the 6th discovery (a file
    // discovered again after the first restore counts too); the readers fail with it, and
    // the job restarts with the enumerator restored from the latest checkpoint's snapshot.
    let faults = [(FaultKind::Source, 3), (FaultKind::Source, 6)];
    for model in MODELS {
        let (lines, restarts) = run(model, (5, 300), 2, FaultPlan::at(&faults));
        assert!(
            restarts >= 2,
            "{model}: the enumerator failures did not restart"
        );
        assert_eq!(lines, expected(5, 300), "{model}: not exactly once");
    }
}

/// One run of the rescale chain: `parallelism` readers, restored from `from`, stopping with a
/// savepoint after `stop_after` checkpoints (or running to the end).
fn rescale_step(
    model: Model,
    dirs: (&Path, &Path),
    shape: (usize, usize),
    parallelism: usize,
    from: Option<PathBuf>,
    stop_after: Option<u64>,
) -> Option<PathBuf> {
    let (input, work) = dirs;
    let output = work.join("output");
    let faults = Arc::new(FaultPlan::none());
    let job = build(model, input, &output, shape, parallelism, (&faults, false));
    let mut config = config(work).with_restart(RestartStrategy::NONE);
    if let Some(path) = from {
        config = config.with_restore(Restore::Savepoint(path));
    }
    if let Some(n) = stop_after {
        config = config.with_stop_with_savepoint(
            StopWithSavepoint::new(work.join("savepoints")).after_checkpoints(n),
        );
    }
    let result = job.run(&config).unwrap_or_else(|e| panic!("{model}: {e}"));
    result.savepoint
}

#[test]
fn a_file_source_rescaled_2_3_1_through_savepoints_commits_exactly_once() {
    // The first two runs write no end marker: they cannot finish before their savepoints,
    // whenever those fall. Before the last run the test writes every file still missing and
    // the marker (files written after the marker would not be discovered). Each savepoint holds the readers' splits
    // (in progress with offsets, pending, finished) and the enumerator's snapshot; the next run
    // redistributes them over another parallelism.
    let shape = (6, 400);
    // Under the legacy model the reader runs inside a `ReaderSource`, which writes the reader's
    // own bytes (its list state), so the splits rescale there as under the other models.
    for model in MODELS {
        let input = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        write_file(input.path(), 0, shape.1);
        let dirs = (input.path(), work.path());
        let first = rescale_step(model, dirs, shape, 2, None, Some(3));
        let first =
            first.unwrap_or_else(|| panic!("{model}: the first run stops with a savepoint"));
        let second = rescale_step(model, dirs, shape, 3, Some(first), Some(3));
        let second =
            second.unwrap_or_else(|| panic!("{model}: the second run stops with a savepoint"));
        (0..shape.0).for_each(|f| write_file(input.path(), f, shape.1));
        std::fs::write(input.path().join(MARKER), "").unwrap();
        let third = rescale_step(model, dirs, shape, 1, Some(second), None);
        assert!(third.is_none(), "{model}: the last run runs to its end");
        assert_eq!(
            committed(&work.path().join("output")),
            expected(shape.0, shape.1),
            "{model}: not exactly once across the rescales"
        );
    }
}
