//! A job moves between the local executor and timely through savepoints, rescaled by key
//! group: local (1 subtask) -> timely (2 workers) -> local (3 subtasks), and local (2) -> 2
//! timely processes -> local (1), the committed output
//! exactly once and identical to an uninterrupted local run; other jobs and other input are
//! refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use streamtask::checkpoint::CheckpointConfig;
use streamtask::sink::read_committed;
use streamtask::{JobConfig, Model, Restore, StopWithSavepoint};

use streamtask::SavepointHandle;
use streamtask_core::OperatorError;
use streamtask_timely::sample::{local_job, local_job_reading, source, timely_job, write_input};
use streamtask_timely::{
    Cluster, LineFiles, SplitRecords, SplitSource, TimelyConfig, TimelyError, run,
};

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

/// Asserts that `out` committed exactly `expected` (sorted), naming a few differences.
fn assert_committed(out: &Path, expected: &[String]) {
    let got = sorted(read_committed(out).unwrap());
    if got != expected {
        let missing: Vec<&String> = expected
            .iter()
            .filter(|l| !got.contains(l))
            .take(5)
            .collect();
        let extra: Vec<&String> = got
            .iter()
            .filter(|l| !expected.contains(l))
            .take(5)
            .collect();
        panic!(
            "committed {} lines, expected {}; missing e.g. {missing:?}, unexpected e.g. {extra:?}",
            got.len(),
            expected.len()
        );
    }
}

/// An uninterrupted local run's committed output.
fn reference(inputs: &[PathBuf], work: &Path) -> Vec<String> {
    let out = work.join("reference-out");
    let job = local_job(Model::Mailbox, inputs.to_vec(), 1, &out).unwrap();
    job.run(&JobConfig::new(work.join("reference"))).unwrap();
    sorted(read_committed(&out).unwrap())
}

/// The sample's source, asking for a savepoint once `after` records were read, and from then
/// on reading a record a millisecond, so the savepoint's barrier comes long before the end.
struct StopAfter {
    inner: LineFiles,
    read: Arc<AtomicU64>,
    after: u64,
    handle: SavepointHandle,
}

impl SplitSource for StopAfter {
    type Out = String;

    fn splits(&self) -> usize {
        self.inner.splits()
    }

    fn open(&self, split: usize, skip: u64) -> Result<SplitRecords<String>, OperatorError> {
        let (read, after, handle) = (Arc::clone(&self.read), self.after, self.handle.clone());
        Ok(Box::new(self.inner.open(split, skip)?.inspect(move |_| {
            if read.fetch_add(1, Ordering::Relaxed) >= after {
                handle.stop_with_savepoint();
                std::thread::sleep(Duration::from_millis(1));
            }
        })))
    }

    fn identity(&self) -> Option<String> {
        self.inner.identity()
    }
}

/// Runs the local job at `parallelism` until its savepoint, asked for after 2 000 records.
fn local_savepoint(inputs: &[PathBuf], out: &Path, work: &Path, parallelism: usize) -> PathBuf {
    let stop = StopWithSavepoint::new(work.join("sp-local"));
    let source = StopAfter {
        inner: source(inputs.to_vec()),
        read: Arc::new(AtomicU64::new(0)),
        after: 2_000,
        handle: stop.handle(),
    };
    let job = local_job_reading(Model::Mailbox, Arc::new(source), parallelism, out).unwrap();
    let config = JobConfig::new(work.join("local-1"))
        .with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(2))))
        .with_stop_with_savepoint(stop);
    let result = job.run(&config).unwrap();
    result
        .savepoint
        .expect("the local run stopped with a savepoint")
}

fn checkpoint_id(savepoint: &Path) -> u64 {
    streamtask::checkpoint::Savepoint::load(savepoint)
        .unwrap()
        .metadata
        .checkpoint_id
}

#[test]
fn a_job_moves_local_to_timely_to_local_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let inputs = write_input(&work.join("in"), 4, 5_000).unwrap();
    let expected = reference(&inputs, work);
    let out = work.join("out");

    // 1. The local executor, one subtask per vertex, stops with a savepoint mid-input.
    let local_sp = local_savepoint(&inputs, &out, work, 1);
    let after_local = read_committed(&out).unwrap().len();
    assert!(
        after_local < expected.len(),
        "the local run stopped mid-input"
    );

    // 2. Timely on 2 workers restores it and stops with its own savepoint 3 epochs later.
    let id = checkpoint_id(&local_sp);
    let config = TimelyConfig::new(work.join("timely-chk"))
        .workers(2)
        .checkpoint_interval(Duration::from_millis(2))
        .max_epoch_records(100)
        .from_savepoint(&local_sp)
        .stop_with_savepoint(id + 3, work.join("sp-timely"));
    let summary = run(timely_job(inputs.clone(), &out), &config).unwrap();
    assert_eq!(summary.restored_from, Some(id));
    assert_eq!(summary.last_checkpoint, Some(id + 3));
    assert_eq!(
        summary.records_read,
        3 * 2 * 100,
        "3 epochs of 100 records per worker"
    );
    let timely_sp = summary.savepoint.expect("the timely run wrote a savepoint");
    let after_timely = read_committed(&out).unwrap().len();
    assert!(after_timely > after_local && after_timely < expected.len());

    // 3. The local executor, 3 subtasks per vertex, restores the timely savepoint and ends.
    let job = local_job(Model::Mailbox, inputs.clone(), 3, &out).unwrap();
    let config = JobConfig::new(work.join("local-2"))
        .with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(5))))
        .with_restore(Restore::Savepoint(timely_sp));
    job.run(&config).unwrap();
    assert_committed(&out, &expected);
}

#[test]
fn a_job_moves_local_to_two_timely_processes_to_local_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let inputs = write_input(&work.join("in"), 4, 5_000).unwrap();
    let expected = reference(&inputs, work);
    let out = work.join("out");
    let local_sp = local_savepoint(&inputs, &out, work, 2);
    let after_local = read_committed(&out).unwrap().len();

    // Two worker processes on loopback ports restore it and stop with a savepoint.
    let id = checkpoint_id(&local_sp);
    let p = |p: &Path| p.display().to_string();
    let args = [
        "--inputs".to_string(),
        p(&work.join("in")),
        "--out".into(),
        p(&out),
        "--checkpoints".into(),
        p(&work.join("timely-chk")),
        "--interval-ms".into(),
        "2".into(),
        "--max-epoch-records".into(),
        "100".into(),
        "--from-savepoint".into(),
        p(&local_sp),
        "--stop-with-savepoint".into(),
        (id + 3).to_string(),
        "--savepoint-dir".into(),
        p(&work.join("sp-timely")),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(
        env!("CARGO_BIN_EXE_streamtask-timely-worker"),
        &args,
        2,
        work,
    )
    .unwrap();
    let statuses = cluster.wait().unwrap();
    assert!(statuses.iter().all(|s| s.success()), "{statuses:?}");
    let written: Vec<PathBuf> = std::fs::read_dir(work.join("sp-timely"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let [timely_sp] = written.as_slice() else {
        panic!("one savepoint, not {written:?}");
    };
    assert_eq!(checkpoint_id(timely_sp), id + 3);
    let after_timely = read_committed(&out).unwrap().len();
    assert!(after_timely > after_local && after_timely < expected.len());

    // One local subtask per vertex restores it and ends.
    let job = local_job(Model::Mailbox, inputs, 1, &out).unwrap();
    let config =
        JobConfig::new(work.join("local-2")).with_restore(Restore::Savepoint(timely_sp.clone()));
    job.run(&config).unwrap();
    assert_committed(&out, &expected);
}

#[test]
fn a_savepoint_of_other_input_or_another_job_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let inputs = write_input(&work.join("in"), 2, 4_000).unwrap();
    let out = work.join("out");
    let local_sp = local_savepoint(&inputs, &out, work, 2);

    // Other input: the same file names, other contents.
    let other = write_input(&work.join("other"), 2, 3_000).unwrap();
    let config = TimelyConfig::new(work.join("chk-a")).from_savepoint(&local_sp);
    let refused = run(timely_job(other, &work.join("out-a")), &config);
    assert!(
        matches!(refused, Err(TimelyError::SavepointOfOtherInput { .. })),
        "{refused:?}"
    );

    // Another job: its keyed stage has another name, so the savepoint's keyed state and sink
    // transactions have no operator to go to.
    let other_job = streamtask_timely::TimelyJob::new(
        "lines",
        source(inputs.clone()),
        streamtask_timely::sample::OUT_OF_ORDERNESS_MS,
        || -> streamtask_core::operator::BoxOperator<String, String> {
            Box::new(streamtask_core::operator::Map::new("parse", |l: String| l))
        },
        |line: &String| line.clone(),
        "counts",
        || -> streamtask_core::operator::BoxOperator<String, String> {
            Box::new(streamtask_core::operator::Map::new("keep", |l: String| l))
        },
        work.join("out-b"),
        |line: &String| line.clone(),
    );
    let config = TimelyConfig::new(work.join("chk-b")).from_savepoint(&local_sp);
    let refused = run(other_job, &config);
    let Err(TimelyError::SavepointOfOtherJob { operators, .. }) = refused else {
        panic!("{refused:?}");
    };
    assert!(operators.iter().any(|o| o == "totals"), "{operators:?}");
}
