//! Savepoints: stop-with-savepoint from the library and the CLI, restore by operator id, the
//! refusals, and the CLI flow across every pair of models (a run stopped halfway with a
//! savepoint, continued by another model, commits exactly the output of an uninterrupted run).

mod common;
#[path = "../../tests/common/counting.rs"]
mod counting;

use std::path::Path;

use common::{code, stderr, stdout, streamtask};
use counting::{RECORDS, build, committed, config, reference, run};
use streamtask::checkpoint::{CheckpointStorage, Savepoint};
use streamtask::prelude::*;
use streamtask::{JobError, SavepointHandle};
use streamtask_core::state::TaskSnapshot;

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let first = run(Model::Mailbox, work, 2, Some(100), Restore::Fresh).unwrap();
    let path = first.savepoint.expect("stopped with a savepoint");
    assert_eq!(
        committed(work).len(),
        100,
        "the sinks committed the savepoint"
    );
    let savepoint = Savepoint::load(&path).unwrap();
    assert_eq!(savepoint.metadata.max_parallelism, 128);
    let vertices: Vec<(&str, usize)> = savepoint
        .metadata
        .vertices
        .iter()
        .map(|v| (v.name.as_str(), v.parallelism))
        .collect();
    assert_eq!(vertices, vec![("numbers", 1), ("totals", 2)]);
    let ids: Vec<&str> = savepoint
        .metadata
        .vertices
        .iter()
        .flat_map(|v| v.states.iter().map(|s| s.operator_id.as_str()))
        .collect();
    // Every source declares its elements in flight beside its position.
    assert_eq!(ids, vec!["numbers", "numbers/in-flight", "totals", "sink"]);

    run(Model::Mailbox, work, 2, None, Restore::Savepoint(path)).unwrap();
    assert_eq!(committed(work), reference());
}

#[test]
fn a_savepoint_restores_after_being_moved() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let first = run(Model::Legacy, work, 1, Some(RECORDS / 2), Restore::Fresh).unwrap();
    let path = first.savepoint.unwrap();
    // Moved elsewhere: it names nothing outside itself.
    let moved = dir.path().join("moved-savepoint");
    std::fs::rename(&path, &moved).unwrap();
    let second = run(Model::Legacy, work, 1, None, Restore::Savepoint(moved)).unwrap();
    assert!(second.savepoint.is_none(), "the second run ran to its end");
    assert_eq!(committed(work), reference());
}

#[test]
fn checkpoint_retention_never_deletes_a_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    // Savepoints written into the checkpoint directory itself, one checkpoint retained.
    let handle = SavepointHandle::new();
    let job = build(
        Model::Mailbox,
        work,
        2,
        Some(RECORDS / 2),
        &handle,
        "totals",
        None,
    )
    .unwrap();
    let mut cfg = config(work, Restore::Fresh, &handle).with_stop_with_savepoint(
        streamtask::StopWithSavepoint::new(work.join("checkpoints")).with_handle(handle.clone()),
    );
    cfg.retained_checkpoints = 1;
    let path = job.run(&cfg).unwrap().savepoint.unwrap();
    assert!(path.starts_with(work.join("checkpoints")));

    // The second run's source pauses at 3/4 and pulls a handle nobody listens to; the run
    // stops with a savepoint after 3 completed checkpoints, so retention deleted 2.
    let job = build(
        Model::Mailbox,
        work,
        2,
        Some(3 * RECORDS / 4),
        &SavepointHandle::new(),
        "totals",
        None,
    )
    .unwrap();
    let mut cfg = JobConfig::new(work)
        .with_checkpoints(Some(CheckpointConfig::new(
            std::time::Duration::from_millis(5),
        )))
        .with_restore(Restore::Savepoint(path.clone()))
        .with_stop_with_savepoint(
            streamtask::StopWithSavepoint::new(work.join("checkpoints")).after_checkpoints(3),
        );
    cfg.retained_checkpoints = 1;
    let second = job.run(&cfg).unwrap();
    assert!(second.checkpoints_completed >= 3);
    let last = second.savepoint.expect("stopped after 3 checkpoints");
    assert!(
        Savepoint::load(&path).is_ok(),
        "the first savepoint is intact"
    );

    let handle = SavepointHandle::new();
    let job = build(Model::Mailbox, work, 2, None, &handle, "totals", None).unwrap();
    job.run(&config(work, Restore::Savepoint(last), &handle))
        .unwrap();
    assert_eq!(committed(work), reference());
}

#[test]
fn state_is_matched_by_uid_not_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let handle = SavepointHandle::new();
    let job = build(
        Model::Bridge,
        work,
        2,
        Some(RECORDS / 2),
        &handle,
        "totals",
        Some("totals-v1"),
    )
    .unwrap();
    let path = job
        .run(&config(work, Restore::Fresh, &handle))
        .unwrap()
        .savepoint
        .unwrap();
    // Renamed, same uid: the totals continue.
    let handle = SavepointHandle::new();
    let job = build(
        Model::Bridge,
        work,
        2,
        None,
        &handle,
        "running totals",
        Some("totals-v1"),
    )
    .unwrap();
    job.run(&config(work, Restore::Savepoint(path), &handle))
        .unwrap();
    assert_eq!(committed(work), reference());
}

#[test]
fn state_for_a_missing_operator_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let path = run(Model::Mailbox, work, 2, Some(50), Restore::Fresh)
        .unwrap()
        .savepoint
        .unwrap();
    // The totals now carry another id: the savepoint's "totals" state has no operator.
    let handle = SavepointHandle::new();
    let job = build(
        Model::Mailbox,
        work,
        2,
        None,
        &handle,
        "totals",
        Some("totals-v2"),
    )
    .unwrap();
    let err = job
        .run(&config(work, Restore::Savepoint(path.clone()), &handle))
        .unwrap_err();
    match &err {
        JobError::NonRestoredState { operators, .. } => {
            assert_eq!(operators, &vec!["totals".to_string()]);
        }
        other => panic!("expected NonRestoredState, got {other}"),
    }
    assert!(
        err.to_string().contains("--allow-non-restored-state"),
        "{err}"
    );
    assert!(
        err.to_string().contains("with_allow_non_restored_state"),
        "{err}"
    );

    // Allowed: the dropped operator starts empty, the rest restores (the source continues
    // at 50, so only keys' totals from there on are counted).
    let cfg = config(work, Restore::Savepoint(path), &handle).with_allow_non_restored_state(true);
    job.run(&cfg).unwrap();
    let lines = committed(work);
    assert_eq!(lines.len() as u64, RECORDS, "nothing lost, nothing twice");
    // Key 13's first value after the restore is 50 + (13 - 50 % 37) = 50 (50 % 37 = 13): its
    // total starts over there, as a fresh operator's does.
    assert!(
        lines.contains(&"13,50,50".to_string()),
        "fresh state after 50"
    );
}

#[test]
fn a_savepoint_of_another_kind_of_directory_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let handle = SavepointHandle::new();
    let job = build(Model::Mailbox, dir.path(), 1, None, &handle, "totals", None).unwrap();
    let err = job
        .run(&config(
            dir.path(),
            Restore::Savepoint(dir.path().join("nowhere")),
            &handle,
        ))
        .unwrap_err();
    assert!(err.to_string().contains("is not a savepoint"), "{err}");
}

#[test]
fn a_job_that_ends_before_the_savepoint_reports_none() {
    let dir = tempfile::tempdir().unwrap();
    // Never pulled: the job runs to its end.
    let result = run(Model::Legacy, dir.path(), 2, None, Restore::Fresh).unwrap();
    assert!(result.savepoint.is_none());
    assert_eq!(committed(dir.path()), reference());
}

/// The counting job with its source declaring `identity`.
fn build_reading(
    work: &Path,
    identity: &str,
    pause_at: Option<u64>,
    handle: &SavepointHandle,
) -> JobGraph {
    let source_handle = handle.clone();
    let env = StreamEnvironment::new(Model::Mailbox);
    env.add_reader("numbers", move |_| {
        counting::Numbers::new(pause_at, source_handle.clone())
    })
    .source_identity(identity)
    .key_by(|(k, _): &(u64, u64)| *k)
    .process("totals", 2, |_| counting::RunningTotal)
    .two_phase_file_sink("sink", work.join("output"), |s: &String| s.clone());
    env.build().unwrap()
}

#[test]
fn a_savepoint_restored_into_a_source_over_other_input_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let handle = SavepointHandle::new();
    let first = build_reading(work, "numbers 0..3000", Some(100), &handle)
        .run(&config(work, Restore::Fresh, &handle))
        .unwrap();
    let path = first.savepoint.expect("stopped with a savepoint");
    let before = committed(work);

    let handle = SavepointHandle::new();
    let other = build_reading(work, "numbers 0..2000", None, &handle);
    match other.run(&config(work, Restore::Savepoint(path.clone()), &handle)) {
        Err(JobError::SourceMismatch {
            operator,
            savepoint,
            job,
            ..
        }) => {
            assert_eq!(operator, "numbers");
            assert_eq!(savepoint, "numbers 0..3000");
            assert_eq!(job, "numbers 0..2000");
        }
        other => panic!("expected a source mismatch, got {other:?}"),
    }
    assert_eq!(committed(work), before, "nothing was committed");

    let same = build_reading(work, "numbers 0..3000", None, &handle);
    same.run(&config(work, Restore::Savepoint(path), &handle))
        .unwrap();
    assert_eq!(committed(work), reference());
}

/// Runs the counting job reading `identity` until its source pauses at `pause_at` and at least
/// one checkpoint completed, then cancels it: an unfinished run with checkpoints.
fn leave_unfinished_run(work: &Path, identity: &str, pause_at: u64) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    // Pulled by the paused source; nobody listens, so the run keeps checkpointing.
    let handle = SavepointHandle::new();
    let job = build_reading(work, identity, Some(pause_at), &handle);
    let cancel = Arc::new(AtomicBool::new(false));
    let config = JobConfig::new(work)
        .with_checkpoints(Some(CheckpointConfig::new(
            std::time::Duration::from_millis(20),
        )))
        .with_cancel(Arc::clone(&cancel));
    let checkpoints = work.join("checkpoints");
    std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            // Until a checkpoint after the pause completed: it holds the paused position.
            // Read-only: each completed checkpoint directory is loaded on its own (opening
            // the storage would tidy the directory the run is writing into).
            let holds_pause = || {
                std::fs::read_dir(&checkpoints)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|e| CheckpointStorage::load_path(&e.path()).ok())
                    .filter_map(|c| {
                        c.task("numbers#0")?
                            .get_value::<u64>(TaskSnapshot::SOURCE)
                            .ok()?
                    })
                    .any(|position| position == pause_at)
            };
            while !handle.is_requested() || !holds_pause() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            cancel.store(true, Ordering::SeqCst);
        });
        let _ = job.run(&config);
        watcher.join().unwrap();
    });
}

#[test]
fn a_checkpoint_resumed_by_a_source_over_other_input_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    leave_unfinished_run(work, "numbers 0..3000", 1_000);
    let before = committed(work);
    assert!(before.len() <= 1_000, "the run stopped at the pause");

    let handle = SavepointHandle::new();
    let other = build_reading(work, "numbers 0..2000", None, &handle);
    let resume = JobConfig::new(work)
        .with_checkpoints(Some(CheckpointConfig::new(
            std::time::Duration::from_millis(20),
        )))
        .with_restore(Restore::Latest);
    for err in [
        other.check_restore(&resume).unwrap_err(),
        other.run(&resume).unwrap_err(),
    ] {
        match err {
            JobError::SourceMismatch {
                operator,
                savepoint,
                job,
                path,
            } => {
                assert_eq!(operator, "numbers");
                assert_eq!(savepoint, "numbers 0..3000");
                assert_eq!(job, "numbers 0..2000");
                assert!(path.starts_with(work.join("checkpoints")), "{path:?}");
            }
            other => panic!("expected a source mismatch, got {other:?}"),
        }
    }
    assert_eq!(committed(work), before, "nothing was committed");

    // The same input resumes, exactly once.
    let same = build_reading(work, "numbers 0..3000", None, &handle);
    same.check_restore(&resume).unwrap();
    same.run(&resume).unwrap();
    assert_eq!(committed(work), reference());
}

// ---- the CLI flow ----------------------------------------------------------------------------

const ORDERS: u64 = 6_000;

fn cli_args(model: &str, work: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = common::run_args_sized(model, work, ORDERS, &[]);
    args.extend(
        ["--output-dir", out.to_str().unwrap()]
            .iter()
            .chain(extra)
            .map(|s| s.to_string()),
    );
    args
}

/// `run --model <first> --stop-with-savepoint` halfway, then `run --model <second>
/// --from-savepoint`: exactly-once, the reference output.
fn stop_and_continue(first: &str, second: &str) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let out = dir.path().join("out");
    let savepoints = dir.path().join("savepoints");
    let half = (ORDERS / 2).to_string();
    let stopped = streamtask(&cli_args(
        first,
        &work,
        &out,
        &[
            "--stop-with-savepoint",
            savepoints.to_str().unwrap(),
            "--stop-with-savepoint-after-records",
            &half,
        ],
    ));
    assert_eq!(code(&stopped), 0, "{first}: {}", stderr(&stopped));
    let printed = stdout(&stopped);
    let path = printed
        .lines()
        .find_map(|l| l.strip_prefix("savepoint: "))
        .unwrap_or_else(|| panic!("{first} printed no savepoint: {printed}"))
        .to_string();
    assert!(Path::new(&path).starts_with(&savepoints));
    let partial = streamtask::sink::read_committed(&out).unwrap().len();
    let mut expected = streamtask_cli::demo::data::expected_output(&common::data(ORDERS));
    assert!(partial > 0 && partial < expected.len(), "stopped halfway");

    let continued = streamtask(&cli_args(second, &work, &out, &["--from-savepoint", &path]));
    assert_eq!(
        code(&continued),
        0,
        "{first} -> {second}: {}",
        stderr(&continued)
    );
    let table = stdout(&continued);
    assert!(
        table.contains("committed output equals the reference, exactly-once held"),
        "{first} -> {second}: {table}"
    );
    let mut committed = streamtask::sink::read_committed(&out).unwrap();
    committed.sort_unstable();
    expected.sort_unstable();
    assert!(committed == expected, "{first} -> {second}: output differs");
}

#[test]
fn cli_legacy_to_mailbox() {
    stop_and_continue("legacy", "mailbox");
}

#[test]
fn cli_mailbox_to_legacy() {
    stop_and_continue("mailbox", "legacy");
}

#[test]
fn cli_legacy_to_bridge() {
    stop_and_continue("legacy", "bridge");
}

#[test]
fn cli_bridge_to_legacy() {
    stop_and_continue("bridge", "legacy");
}

#[test]
fn cli_mailbox_to_bridge() {
    stop_and_continue("mailbox", "bridge");
}

#[test]
fn cli_bridge_to_mailbox() {
    stop_and_continue("bridge", "mailbox");
}

#[test]
fn cli_same_model() {
    for model in ["legacy", "mailbox", "bridge"] {
        stop_and_continue(model, model);
    }
}

#[test]
fn cli_stop_with_savepoint_needs_run() {
    let dir = tempfile::tempdir().unwrap();
    let output = streamtask(&[
        "compare".to_string(),
        "--stop-with-savepoint".to_string(),
        dir.path().to_str().unwrap().to_string(),
    ]);
    assert_eq!(code(&output), 2, "{}", stderr(&output));
    // `compare` does not take it: clap refuses it, and `run --help` is where it is listed.
    assert!(
        stderr(&output).contains("unexpected argument '--stop-with-savepoint'"),
        "{}",
        stderr(&output)
    );
    let help = stdout(&streamtask(&["run".to_string(), "--help".to_string()]));
    assert!(help.contains("--stop-with-savepoint <DIR>"), "{help}");
}

/// SIGTERM with `--stop-with-savepoint`: the run stops with a savepoint (exit 0, the path
/// printed), or, if the signal came after the job's end, reports its complete output; either
/// way the savepoint continues to the reference output.
#[test]
fn cli_sigterm_stops_with_a_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let out = dir.path().join("out");
    let savepoints = dir.path().join("savepoints");
    let args = cli_args(
        "mailbox",
        &work,
        &out,
        &["--stop-with-savepoint", savepoints.to_str().unwrap()],
    );
    // Paused in the middle of generating the data: the signal arrives before the job starts,
    // so the savepoint is asked for at once.
    let mut child = common::Paused::spawn(&args);
    assert_eq!(child.next_phase().as_deref(), Some("generate"));
    let pid = child.child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.finish();
    assert_eq!(exit, 0);
    let mut expected = streamtask_cli::demo::data::expected_output(&common::data(ORDERS));
    expected.sort_unstable();
    let entries: Vec<_> = std::fs::read_dir(&savepoints)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    if let Some(path) = entries.iter().find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("savepoint-"))
    }) {
        let continued = streamtask(&cli_args(
            "legacy",
            &work,
            &out,
            &["--from-savepoint", path.to_str().unwrap()],
        ));
        assert_eq!(code(&continued), 0, "{}", stderr(&continued));
    }
    let mut committed = streamtask::sink::read_committed(&out).unwrap();
    committed.sort_unstable();
    assert!(committed == expected, "output differs");
}

// ---- synchronous stop-with-savepoint: nothing read after the barrier is emitted -------------

/// What an endless counting reader did: how many records it emitted, and the position each of
/// its snapshots held, by snapshot call.
#[derive(Default)]
struct Emitted {
    emitted: std::sync::atomic::AtomicU64,
    positions: streamtask_core::sync::Mutex<Vec<u64>>,
}

/// Counts from 0 until `end` (or for ever), as `(n % KEYS, n)` records.
struct Endless {
    next: u64,
    end: u64,
    log: std::sync::Arc<Emitted>,
}

impl SourceReader<(u64, u64)> for Endless {
    fn name(&self) -> &str {
        "numbers"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = streamtask_core::state::decode(bytes)
                .map_err(|e| OperatorError::state("numbers", e))?;
        }
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, (u64, u64)>,
    ) -> Result<InputStatus, OperatorError> {
        if self.next == self.end {
            return Ok(InputStatus::EndOfInput);
        }
        output.collect((self.next % counting::KEYS, self.next))?;
        self.next += 1;
        self.log
            .emitted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &std::task::Waker) {
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _id: u64) -> Result<Vec<u8>, OperatorError> {
        self.log.positions.lock().push(self.next);
        streamtask_core::state::encode(&self.next).map_err(|e| OperatorError::state("numbers", e))
    }
}

/// Runs `numbers` (endless, or up to `end`) -> key_by -> `totals` -> `sink` under `model`,
/// stopping with a savepoint after two completed checkpoints when `end` is `None`.
fn run_endless(
    model: Model,
    work: &Path,
    end: Option<u64>,
    restore: Restore,
) -> (streamtask::JobResult, std::sync::Arc<Emitted>) {
    let log = std::sync::Arc::new(Emitted::default());
    let for_reader = std::sync::Arc::clone(&log);
    let env = StreamEnvironment::new(model);
    env.add_reader("numbers", move |_| Endless {
        next: 0,
        end: end.unwrap_or(u64::MAX),
        log: std::sync::Arc::clone(&for_reader),
    })
    .key_by(|(k, _): &(u64, u64)| *k)
    .process("totals", 2, |_| counting::RunningTotal)
    .two_phase_file_sink("sink", work.join("output"), |s: &String| s.clone());
    let mut config = JobConfig::new(work)
        .with_checkpoints(Some(CheckpointConfig::new(
            std::time::Duration::from_millis(10),
        )))
        .with_restore(restore);
    if end.is_none() {
        config = config.with_stop_with_savepoint(
            streamtask::StopWithSavepoint::new(work.join("savepoints")).after_checkpoints(2),
        );
    }
    let result = env.build().unwrap().run(&config).unwrap();
    (result, log)
}

/// The transaction files of `work/output` still in progress (written, never pre-committed).
fn in_progress(work: &Path) -> Vec<String> {
    std::fs::read_dir(work.join("output"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".inprogress"))
        .collect()
}

/// Flink's synchronous savepoint: once the source emitted the stop-with-savepoint barrier it
/// emits nothing more, so what it emitted is exactly the position its savepoint holds (before,
/// the executor stopped the tasks after the savepoint's notices, and the records the source
/// read meanwhile were processed and never committed); the sinks have no transaction left
/// open; and the restored job continues from there, each record once.
fn no_record_read_after_the_barrier_is_emitted(model: Model) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let (first, log) = run_endless(model, work, None, Restore::Fresh);
    let path = first.savepoint.expect("stopped with a savepoint");
    // The savepoint is the last snapshot the source took.
    let position = *log.positions.lock().last().expect("the source snapshotted");
    assert_eq!(
        log.emitted.load(std::sync::atomic::Ordering::Relaxed),
        position,
        "{model}: the source emitted nothing after the savepoint's barrier"
    );
    assert_eq!(committed(work).len() as u64, position, "{model}");
    assert_eq!(
        in_progress(work),
        Vec::<String>::new(),
        "{model}: nothing left open"
    );
    assert!(Savepoint::load(&path).is_ok());

    let end = position + 500;
    let (second, log) = run_endless(model, work, Some(end), Restore::Savepoint(path));
    assert!(second.savepoint.is_none());
    assert_eq!(
        log.emitted.load(std::sync::atomic::Ordering::Relaxed),
        500,
        "{model}: the restored source reads on from the savepoint's position"
    );
    let mut totals = vec![0u64; counting::KEYS as usize];
    let mut expected: Vec<String> = (0..end)
        .map(|n| {
            let key = n % counting::KEYS;
            totals[key as usize] += n;
            format!("{key},{n},{}", totals[key as usize])
        })
        .collect();
    expected.sort_unstable();
    assert_eq!(committed(work), expected, "{model}");
}

#[test]
fn no_record_read_after_the_barrier_is_emitted_under_the_legacy_model() {
    no_record_read_after_the_barrier_is_emitted(Model::Legacy);
}

#[test]
fn no_record_read_after_the_barrier_is_emitted_under_the_mailbox_model() {
    no_record_read_after_the_barrier_is_emitted(Model::Mailbox);
}

#[test]
fn no_record_read_after_the_barrier_is_emitted_under_the_bridge_model() {
    no_record_read_after_the_barrier_is_emitted(Model::Bridge);
}

/// A savepoint of the CLI's job stopped at half of its input, into `savepoints`; its path.
fn cli_savepoint(work: &Path, out: &Path, savepoints: &Path) -> String {
    let half = (ORDERS / 2).to_string();
    let stopped = streamtask(&cli_args(
        "mailbox",
        work,
        out,
        &[
            "--stop-with-savepoint",
            savepoints.to_str().unwrap(),
            "--stop-with-savepoint-after-records",
            &half,
        ],
    ));
    assert_eq!(code(&stopped), 0, "{}", stderr(&stopped));
    stdout(&stopped)
        .lines()
        .find_map(|l| l.strip_prefix("savepoint: "))
        .expect("a savepoint printed")
        .to_string()
}

#[test]
fn cli_a_savepoint_restored_into_other_data_is_refused_before_anything_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let out = dir.path().join("out");
    let path = cli_savepoint(&work, &out, &dir.path().join("savepoints"));
    let committed_before = streamtask::sink::read_committed(&out).unwrap();
    let fewer = (ORDERS / 3 * 2).to_string();
    for other in [
        &["--seed", "8"][..],
        &["--customers", "499"][..],
        &["--records", &fewer][..],
    ] {
        let mut args = cli_args("mailbox", &work, &out, &["--from-savepoint", &path]);
        let at = args.iter().position(|a| a == other[0]).unwrap() + 1;
        args[at] = other[1].to_string();
        let refused = streamtask(&args);
        let err = stderr(&refused);
        assert_eq!(code(&refused), 2, "{other:?}: {err}");
        assert!(
            err.contains("seed 7"),
            "{other:?} names the savepoint's data: {err}"
        );
        assert!(
            err.contains("same --records, --customers and --seed"),
            "{other:?}: {err}"
        );
        assert_eq!(
            streamtask::sink::read_committed(&out).unwrap(),
            committed_before,
            "{other:?}: nothing committed"
        );
    }
}

#[test]
fn cli_a_resume_over_other_data_is_refused_before_the_data_is_generated_again() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let out = dir.path().join("out");
    let first = streamtask(&cli_args("mailbox", &work, &out, &[]));
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    // As a SIGKILL leaves it: the run marker says running, the checkpoints are there.
    let marker = work.join("mailbox").join("checkpoints").join("_run");
    assert!(marker.is_file(), "the run left its marker at {marker:?}");
    std::fs::write(&marker, "running\n").unwrap();
    let data = std::fs::read(work.join("orders.csv")).unwrap();
    let committed_before = streamtask::sink::read_committed(&out).unwrap();
    let fewer = (ORDERS / 3 * 2).to_string();
    for other in [&["--seed", "8"][..], &["--records", &fewer][..]] {
        let mut args = cli_args("mailbox", &work, &out, &["--resume"]);
        let at = args.iter().position(|a| a == other[0]).unwrap() + 1;
        args[at] = other[1].to_string();
        let refused = streamtask(&args);
        let err = stderr(&refused);
        assert_eq!(code(&refused), 2, "{other:?}: {err}");
        assert!(
            err.contains("seed 7"),
            "{other:?} names the checkpoint's data: {err}"
        );
        assert!(
            err.contains("--discard-state"),
            "{other:?} names the fix: {err}"
        );
        assert!(
            !err.contains("generating data"),
            "{other:?}: refused before generating: {err}"
        );
        assert!(
            std::fs::read(work.join("orders.csv")).unwrap() == data,
            "{other:?}: the input the checkpoints point into is kept"
        );
        assert_eq!(
            streamtask::sink::read_committed(&out).unwrap(),
            committed_before,
            "{other:?}: nothing committed"
        );
    }
    // The same data resumes.
    let resumed = streamtask(&cli_args("mailbox", &work, &out, &["--resume"]));
    assert_eq!(code(&resumed), 0, "{}", stderr(&resumed));
}

#[test]
fn cli_a_transaction_lost_to_another_output_dir_fails_at_once_without_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let path = cli_savepoint(
        &work,
        &dir.path().join("out"),
        &dir.path().join("savepoints"),
    );
    let elsewhere = dir.path().join("elsewhere");
    let out = common::streamtask_default_log(&cli_args(
        "mailbox",
        &work,
        &elsewhere,
        &["--from-savepoint", &path],
    ));
    let err = stderr(&out);
    assert_eq!(code(&out), 1, "{err}");
    assert!(err.contains("is lost"), "{err}");
    assert!(err.contains("a restart cannot fix"), "{err}");
    // The executor logs each failed attempt once; other warnings (a checkpoint declined while
    // the failing attempt was torn down) are not attempts.
    let attempts = err
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("attempt ") && l.contains(" failed"))
        .count();
    assert_eq!(attempts, 1, "one attempt, no restarts: {err}");
}

/// `run --model <first> --stop-with-savepoint --drain` halfway, then `run --model <second>
/// --from-savepoint`: the drained stop commits the output of the orders it read, its open
/// windows fired (a stop without drain leaves them in the savepoint); the restore reads
/// nothing more and commits nothing new.
fn drain_and_restore(first: &str, second: &str) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let out = dir.path().join("out");
    let savepoints = dir.path().join("savepoints");
    let json = dir.path().join("stop.json");
    let half = ORDERS / 2;
    let stopped = streamtask(&cli_args(
        first,
        &work,
        &out,
        &[
            "--stop-with-savepoint",
            savepoints.to_str().unwrap(),
            "--stop-with-savepoint-after-records",
            &half.to_string(),
            "--drain",
            "--json",
            json.to_str().unwrap(),
        ],
    ));
    assert_eq!(code(&stopped), 0, "{first}: {}", stderr(&stopped));
    let printed = stdout(&stopped);
    let path = printed
        .lines()
        .find_map(|l| l.strip_prefix("savepoint: "))
        .unwrap_or_else(|| panic!("{first} printed no savepoint: {printed}"))
        .to_string();
    assert!(printed.lines().any(|l| l == "drained: true"), "{printed}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["drained"], serde_json::Value::Bool(true), "{report}");
    assert!(Savepoint::load(Path::new(&path)).unwrap().is_drained());
    let inspected = stdout(&streamtask(&["inspect".to_string(), path.clone()]));
    assert!(
        inspected
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["drained", "yes"]),
        "{inspected}"
    );

    // Everything the orders before the stop produce, the windows still open at the stop
    // included: the output of a job over exactly those orders.
    let mut drained = streamtask::sink::read_committed(&out).unwrap();
    drained.sort_unstable();
    let read = streamtask_cli::demo::data::expected_output(&common::data(half));
    assert!(drained == read, "{first}: the drained output");
    let windows = |lines: &[String]| lines.iter().filter(|l| l.starts_with("window ")).count();
    let closed_by_then = streamtask_cli::demo::data::expected_output(&common::data(ORDERS))
        .into_iter()
        .filter(|l| read.contains(l))
        .collect::<Vec<_>>();
    assert!(
        windows(&drained) > windows(&closed_by_then),
        "{first}: the drain fired windows a full run closes later, with other totals"
    );

    let restored = streamtask(&cli_args(second, &work, &out, &["--from-savepoint", &path]));
    assert_eq!(
        code(&restored),
        0,
        "{first} -> {second}: {}",
        stderr(&restored)
    );
    let table = stdout(&restored);
    assert!(
        table.contains("committed output equals the reference, exactly-once held"),
        "{first} -> {second}: {table}"
    );
    let mut after = streamtask::sink::read_committed(&out).unwrap();
    after.sort_unstable();
    assert!(
        after == drained,
        "{first} -> {second}: nothing new, nothing twice"
    );
}

#[test]
fn cli_drain_legacy_to_mailbox() {
    drain_and_restore("legacy", "mailbox");
}

#[test]
fn cli_drain_mailbox_to_bridge() {
    drain_and_restore("mailbox", "bridge");
}

#[test]
fn cli_drain_bridge_to_legacy() {
    drain_and_restore("bridge", "legacy");
}

#[test]
fn cli_drain_requires_stop_with_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let refused = streamtask(&cli_args(
        "mailbox",
        &dir.path().join("work"),
        &dir.path().join("out"),
        &["--drain"],
    ));
    assert_eq!(code(&refused), 2, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--stop-with-savepoint"));
}
