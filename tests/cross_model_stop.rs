//! How a job stops when something goes wrong, the same under every model: a stop-with-savepoint
//! whose savepoint cannot complete, and a cancel with a task stuck in user code. Each test runs
//! one job per model through the same thin adapter (`run_bounded`), which runs the job on a
//! thread of its own and waits for it with a hang guard: a hang fails the test (after
//! cancelling the job), it never hangs the suite. Nothing is timed: the guards only bound waits.
//! The stop-with-savepoint tests run with and without drain (`StopWithSavepoint::with_drain`;
//! what a drain produces and restores is `drain.rs`).
//!
//! | test | what broke before |
//! |---|---|
//! | `a_stop_with_savepoint_whose_savepoint_expires_fails_the_stop_instead_of_hanging` | the savepoint was retried forever; a task that took an already-aborted savepoint's barrier stayed suspended, declining every retry (mailbox, bridge: about 1 run in 10 with a 35 ms timeout) |
//! | `a_stop_with_savepoint_whose_savepoint_cannot_be_written_fails_the_stop` | "checkpoint 1 could not be stored", then the savepoint was retried forever |
//! | `an_unusable_savepoint_directory_is_refused_before_anything_runs` | the run started and hung at the stop |
//! | `a_cancel_with_a_stuck_task_leaves_only_the_stuck_thread_and_names_it` | legacy and bridge left the source task's threads behind (blocked sending into the stuck task's full channel), and the error named nothing |
//! | `a_panic_is_reported_with_the_operator_that_panicked` | the failure was a string naming the chain's task only |

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;
use std::thread;
use std::time::{Duration, Instant};

use streamtask::checkpoint::AbortReason;
use streamtask::prelude::*;
use streamtask::{
    JobError, JobResult, SavepointDirProblem, SavepointHandle, TaskFailed, sink::CollectHandle,
};
use streamtask_core::operator::Context;
use streamtask_core::state::encode;
use streamtask_core::{StreamRecord, task::TaskError};

#[path = "common/bounded_run.rs"]
mod bounded_run;
const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];
/// Hang guard for a run and for threads to end; never an assertion on time.
const HANG_GUARD: Duration = Duration::from_secs(60);
/// Where the sources ask for the stop.
const STOP_AT: u64 = 500;
/// The checkpoint timeout of the report: savepoints may expire.
const TIGHT: Duration = Duration::from_millis(35);
/// A timeout no savepoint of these jobs reaches.
const ROOMY: Duration = Duration::from_secs(30);

/// The suite's adapter with its hang guard (`common/bounded_run.rs`).
fn run_bounded(
    model: Model,
    config: JobConfig,
    build: impl FnOnce(&StreamEnvironment) + Send + 'static,
) -> Result<JobResult, JobError> {
    bounded_run::run_bounded(model, config, HANG_GUARD, build)
}

// ---- stop-with-savepoint -----------------------------------------------------------------

/// What a source does when it reaches `STOP_AT`.
#[derive(Clone)]
struct StopProbe {
    savepoint: SavepointHandle,
    /// Snapshot slowly once the stop was asked for, so the savepoint expires.
    slow_savepoint: bool,
    /// Replace the savepoint directory by a file before asking, so the savepoint cannot be
    /// written.
    break_dir: Option<PathBuf>,
    /// Stop with drain (`StopWithSavepoint::with_drain`): the same failures fail the stop.
    drain: bool,
}

impl StopProbe {
    fn request(&self) {
        if let Some(dir) = &self.break_dir {
            // Idempotent: both sources get here; whichever is first breaks the directory.
            if dir.is_dir() {
                let _ = std::fs::remove_dir_all(dir);
            }
            let _ = std::fs::write(dir, b"not a directory");
        }
        self.savepoint.stop_with_savepoint();
    }
}

/// A new-style source counting from 0 that asks for the stop at `STOP_AT` and waits there.
struct Counter {
    next: u64,
    probe: StopProbe,
    slept: bool,
}

impl SourceReader<u64> for Counter {
    fn name(&self) -> &str {
        "counter"
    }

    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next == STOP_AT {
            self.probe.request();
            return Ok(InputStatus::NothingAvailable);
        }
        out.collect(self.next)?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        // At the stop the source waits to be stopped: never woken.
        if self.next != STOP_AT {
            waker.wake_by_ref();
        }
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        if self.probe.slow_savepoint && self.next == STOP_AT && !self.slept {
            // Longer than the checkpoint timeout: the savepoint's barrier reaches the sink
            // after the savepoint expired and its abort notice went out.
            self.slept = true;
            thread::sleep(Duration::from_millis(150));
        }
        encode(&self.next).map_err(|e| OperatorError::state("counter", e))
    }
}

/// The job of the report: a union of two readers, no operators, into a collecting sink;
/// checkpoints every 10 ms, timing out after `timeout` (35 ms in the report).
fn union_of_two_readers(
    model: Model,
    dir: &Path,
    probe: &StopProbe,
    timeout: Duration,
) -> Result<JobResult, JobError> {
    let config = JobConfig::new(dir)
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(timeout)
                // As when the stop was reported: expired checkpoints are tolerated, only the
                // savepoint's own failure ends the run.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::NONE)
        .with_stop_with_savepoint(
            StopWithSavepoint::new(dir.join("savepoints"))
                .with_handle(probe.savepoint.clone())
                .with_drain(probe.drain),
        );
    let probe = probe.clone();
    run_bounded(model, config, move |env| {
        let reader = |probe: StopProbe| {
            move |_| Counter {
                next: 0,
                probe: probe.clone(),
                slept: false,
            }
        };
        let left = env.add_reader("left", reader(probe.clone()));
        let right = env.add_reader("right", reader(probe));
        left.union("both", [right])
            .collect_sink("out", &CollectHandle::new());
    })
}

#[test]
fn smoke() {
    // Without trouble the stop completes under every model, with and without drain.
    for (model, drain) in MODELS.into_iter().flat_map(|m| [(m, false), (m, true)]) {
        let dir = tempfile::tempdir().unwrap();
        let probe = StopProbe {
            savepoint: SavepointHandle::new(),
            slow_savepoint: false,
            break_dir: None,
            drain,
        };
        let config_dir = dir.path().to_path_buf();
        let result = union_of_two_readers(model, &config_dir, &probe, ROOMY)
            .unwrap_or_else(|e| panic!("{model:?}: {e}"));
        assert!(
            result.savepoint.is_some(),
            "{model:?} drain={drain}: stopped with a savepoint"
        );
    }
}

#[test]
fn a_stop_with_savepoint_whose_savepoint_expires_fails_the_stop_instead_of_hanging() {
    // With drain the tasks that drained at the barrier cannot resume on the abort: they fail,
    // and the stop's failure is still what the run returns.
    for (model, drain) in MODELS.into_iter().flat_map(|m| [(m, false), (m, true)]) {
        let dir = tempfile::tempdir().unwrap();
        let probe = StopProbe {
            savepoint: SavepointHandle::new(),
            slow_savepoint: true,
            break_dir: None,
            drain,
        };
        let err = union_of_two_readers(model, dir.path(), &probe, TIGHT)
            .map(|r| r.savepoint)
            .expect_err("the savepoint expired: the stop fails");
        let JobError::SavepointFailed { failure } = &err else {
            panic!("{model:?} drain={drain}: {err}");
        };
        assert!(
            matches!(failure.reason, AbortReason::Expired),
            "{model:?} drain={drain}: {err}"
        );
        assert!(
            probe.savepoint.has_failed(),
            "{model:?}: the handle says so"
        );
        assert_eq!(probe.savepoint.written(), None, "{model:?}");
    }
}

/// The report's runs as they were: nothing forced, the tight timeout, repeated. A savepoint
/// may complete or expire; either way the run returns, with the savepoint or with the stop's
/// failure.
#[test]
fn a_stop_with_savepoint_under_a_tight_timeout_always_returns() {
    for model in MODELS {
        for round in 0..10 {
            let dir = tempfile::tempdir().unwrap();
            let probe = StopProbe {
                savepoint: SavepointHandle::new(),
                slow_savepoint: false,
                break_dir: None,
                drain: false,
            };
            match union_of_two_readers(model, dir.path(), &probe, TIGHT) {
                Ok(result) => assert!(
                    result.savepoint.is_some(),
                    "{model:?} round {round}: stopped with a savepoint"
                ),
                Err(JobError::SavepointFailed { .. }) => assert!(probe.savepoint.has_failed()),
                Err(e) => panic!("{model:?} round {round}: {e}"),
            }
        }
    }
}

#[test]
fn a_stop_with_savepoint_whose_savepoint_cannot_be_written_fails_the_stop() {
    for (model, drain) in MODELS.into_iter().flat_map(|m| [(m, false), (m, true)]) {
        let dir = tempfile::tempdir().unwrap();
        let probe = StopProbe {
            savepoint: SavepointHandle::new(),
            slow_savepoint: false,
            break_dir: Some(dir.path().join("savepoints")),
            drain,
        };
        let err = union_of_two_readers(model, dir.path(), &probe, ROOMY)
            .map(|r| r.savepoint)
            .expect_err("the savepoint could not be written: the stop fails");
        let JobError::SavepointFailed { failure } = &err else {
            panic!("{model:?} drain={drain}: {err}");
        };
        assert!(
            matches!(failure.reason, AbortReason::StorageFailed(_)),
            "{model:?} drain={drain}: {err}"
        );
        assert!(
            err.to_string().contains("stop-with-savepoint failed"),
            "{err}"
        );
    }
}

#[test]
fn an_unusable_savepoint_directory_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    for (path, problem) in [(file.clone(), "is a file"), (file.join("sp"), "is under")] {
        for model in MODELS {
            let started = Arc::new(AtomicBool::new(false));
            let probe_started = Arc::clone(&started);
            let config = JobConfig::new(dir.path())
                .with_restart(RestartStrategy::NONE)
                .with_stop_with_savepoint(StopWithSavepoint::new(&path));
            let err = run_bounded(model, config, move |env| {
                env.from_sequence("numbers", 0..10)
                    .map("seen", move |n: u64| {
                        probe_started.store(true, Ordering::Release);
                        n
                    })
                    .collect_sink("out", &CollectHandle::new());
            })
            .expect_err("refused");
            assert!(
                matches!(
                    &err,
                    JobError::SavepointDirectory {
                        problem: SavepointDirProblem::NotADirectory
                            | SavepointDirProblem::UnderAFile(_),
                        ..
                    }
                ),
                "{model:?}: {err}"
            );
            assert!(err.to_string().contains(problem), "{model:?}: {err}");
            assert!(!started.load(Ordering::Acquire), "{model:?}: nothing ran");
        }
    }
}

// ---- cancel with a stuck task ------------------------------------------------------------

/// An operator that loops at its `STUCK_AT`th record, ignoring cancellation, until released.
struct Spin {
    seen: u64,
    reached: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
}

const STUCK_AT: u64 = 5_000;

impl Operator for Spin {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        "spin"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.seen += 1;
        if self.seen == STUCK_AT {
            self.reached.store(true, Ordering::Release);
            // User code that never looks at cancellation; sleeps so it burns no core.
            while !self.release.load(Ordering::Acquire) {
                thread::sleep(Duration::from_millis(1));
            }
        }
        ctx.collect(record)
    }
}

/// Names of this process's live threads that start with `prefix` (the kernel keeps 15
/// characters of a name).
fn threads_named(prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let Ok(entry) = entry else { continue };
        if let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) {
            let comm = comm.trim_end().to_string();
            if comm.starts_with(prefix) {
                names.push(comm);
            }
        }
    }
    names
}

/// Waits (bounded) until no thread starts with `prefix`; the ones still there at the guard.
fn wait_threads_gone(prefix: &str) -> Vec<String> {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let left = threads_named(prefix);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_cancel_with_a_stuck_task_leaves_only_the_stuck_thread_and_names_it() {
    for (model, tag) in [
        (Model::Legacy, 'L'),
        (Model::Mailbox, 'M'),
        (Model::Bridge, 'B'),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let reached = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let cancel = Arc::new(AtomicBool::new(false));
        let config = JobConfig::new(dir.path())
            .with_checkpoints(None)
            .with_restart(RestartStrategy::NONE)
            .with_channel_capacity(64)
            .with_cancel(Arc::clone(&cancel))
            .with_cancel_grace(Duration::from_millis(300));
        let (source, stage) = (format!("nums{tag}"), format!("stage{tag}"));
        let (spin_reached, spin_release) = (Arc::clone(&reached), Arc::clone(&release));
        let names = (source.clone(), stage.clone());
        let canceller = {
            let (reached, cancel) = (Arc::clone(&reached), Arc::clone(&cancel));
            thread::spawn(move || {
                let deadline = Instant::now() + HANG_GUARD;
                while !reached.load(Ordering::Acquire) && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(1));
                }
                cancel.store(true, Ordering::Release);
            })
        };
        let err = run_bounded(model, config, move |env| {
            let (source, stage) = names;
            env.from_sequence(&source, 0..3_000_000)
                .key_by(|n: &u64| *n % 7)
                .map_with_parallelism(&stage, 1, |n: u64| n * 2)
                .map("plus", |n: u64| n + 1)
                .operator(move |_| Spin {
                    seen: 0,
                    reached: Arc::clone(&spin_reached),
                    release: Arc::clone(&spin_release),
                })
                .collect_sink("out", &CollectHandle::new());
        })
        .expect_err("cancelled");
        canceller.join().unwrap();
        assert!(
            reached.load(Ordering::Acquire),
            "{model:?}: the operator got stuck"
        );

        // The error names the task and the operator that ignored cancellation.
        let JobError::Cancelled { left_behind } = &err else {
            panic!("{model:?}: {err}");
        };
        let names: Vec<(String, Option<String>)> = left_behind
            .iter()
            .map(|t: &TaskFailed| (t.task.clone(), t.operator.clone()))
            .collect();
        assert_eq!(
            names,
            [(format!("{stage}#0"), Some("spin".to_string()))],
            "{model:?}: {err}"
        );
        assert!(
            matches!(
                left_behind[0].error(),
                Some(TaskError::CancellationIgnored { .. })
            ),
            "{model:?}: {err}"
        );
        assert!(err.to_string().contains("spin"), "{model:?}: {err}");

        // Only the stuck thread is left: every thread of the source task ended.
        let source_left = wait_threads_gone(&format!("{source}#"));
        let stuck_left = threads_named(&format!("{stage}#"));
        release.store(true, Ordering::Release);
        assert!(
            source_left.is_empty(),
            "{model:?}: threads of the source task left behind: {source_left:?}"
        );
        assert!(
            !stuck_left.is_empty(),
            "{model:?}: the stuck thread is the one left behind"
        );
        // Released, the stuck thread returns and cleans up after itself.
        let stuck_left = wait_threads_gone(&format!("{stage}#"));
        assert!(stuck_left.is_empty(), "{model:?}: {stuck_left:?}");
    }
}

/// Panics at its 10th record.
struct Boom {
    seen: u64,
}

impl Operator for Boom {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        "boom"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.seen += 1;
        assert!(self.seen < 10, "boom at record {}", self.seen);
        ctx.collect(record)
    }
}

#[test]
fn a_panic_is_reported_with_the_operator_that_panicked() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let config = JobConfig::new(dir.path())
            .with_checkpoints(None)
            .with_restart(RestartStrategy::NONE);
        let err = run_bounded(model, config, |env| {
            env.from_sequence("numbers", 0..1_000)
                .key_by(|n: &u64| *n % 7)
                .map_with_parallelism("stage", 1, |n: u64| n * 2)
                .map("plus", |n: u64| n + 1)
                .operator(|_| Boom { seen: 0 })
                .collect_sink("out", &CollectHandle::new());
        })
        .expect_err("the operator panicked");
        let JobError::Failed {
            last: streamtask::AttemptFailure::Task(last),
            ..
        } = &err
        else {
            panic!("{model:?}: {err}");
        };
        assert_eq!(last.task, "stage#0", "{model:?}: {err}");
        assert_eq!(last.operator.as_deref(), Some("boom"), "{model:?}: {err}");
        assert!(
            matches!(last.error(), Some(TaskError::Panic(message)) if message.contains("boom at record 10")),
            "{model:?}: {err}"
        );
        assert!(
            err.to_string().contains("stage#0 (operator \"boom\")"),
            "{model:?}: {err}"
        );
    }
}

// ---- tolerable checkpoint failures ---------------------------------------------------------

/// Blocks in its first record until released, ignoring cancellation: no barrier gets past it.
struct Block {
    release: Arc<AtomicBool>,
}

impl Operator for Block {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        "block"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        while !self.release.load(Ordering::Acquire) {
            thread::sleep(Duration::from_millis(1));
        }
        ctx.collect(record)
    }
}

/// Flink's tolerable checkpoint failures, default 0: a user function that blocks forever holds
/// every checkpoint back; the first one to expire fails the attempt, the restart blocks again,
/// and the job fails instead of hanging.
#[test]
fn a_blocked_function_fails_the_job_once_its_checkpoints_expire() {
    for (model, tag) in [
        (Model::Legacy, 'L'),
        (Model::Mailbox, 'M'),
        (Model::Bridge, 'B'),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let release = Arc::new(AtomicBool::new(false));
        let config = JobConfig::new(dir.path())
            .with_checkpoints(Some(
                CheckpointConfig::new(Duration::from_millis(50))
                    .with_timeout(Duration::from_secs(1)),
            ))
            .with_restart(RestartStrategy::fixed_delay(1, Duration::from_millis(10)))
            .with_channel_capacity(64)
            .with_cancel_grace(Duration::from_millis(200));
        assert_eq!(
            config.checkpoint.unwrap().tolerable_failures,
            0,
            "Flink's default"
        );
        let stage = format!("blk{tag}");
        let (name, blocked) = (stage.clone(), Arc::clone(&release));
        let err = run_bounded(model, config, move |env| {
            env.from_sequence("numbers", 0..u64::MAX)
                .rebalance(&name, 1)
                .operator(move |_| Block {
                    release: Arc::clone(&blocked),
                })
                .collect_sink("out", &CollectHandle::new());
        })
        .expect_err("the job fails");
        let JobError::Failed {
            attempts,
            last: streamtask::AttemptFailure::Checkpoints(failures),
        } = &err
        else {
            panic!("{model:?}: {err}");
        };
        assert_eq!(*attempts, 2, "{model:?}: restarted once, then failed");
        assert!(
            matches!(failures.reason, AbortReason::Expired),
            "{model:?}: {err}"
        );
        assert_eq!((failures.failures, failures.tolerable), (1, 0), "{model:?}");
        // Each attempt left its blocked thread behind; released, they end.
        release.store(true, Ordering::Release);
        let left = wait_threads_gone(&format!("{stage}#"));
        assert!(left.is_empty(), "{model:?}: {left:?}");
    }
}

/// With failures tolerated, the same expiries are only counted: the job keeps running until
/// it is cancelled.
#[test]
fn tolerated_checkpoint_failures_do_not_fail_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let release = Arc::new(AtomicBool::new(false));
    let cancel = Arc::new(AtomicBool::new(false));
    let config = JobConfig::new(dir.path())
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(Duration::from_millis(20))
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::NONE)
        .with_channel_capacity(64)
        .with_cancel(Arc::clone(&cancel))
        .with_cancel_grace(Duration::from_millis(200));
    let blocked = Arc::clone(&release);
    let stopper = {
        let cancel = Arc::clone(&cancel);
        thread::spawn(move || {
            // Long enough for several checkpoints to expire (the assertion holds either way).
            thread::sleep(Duration::from_millis(300));
            cancel.store(true, Ordering::Release);
        })
    };
    let err = run_bounded(Model::Mailbox, config, move |env| {
        env.from_sequence("numbers", 0..u64::MAX)
            .rebalance("blkT", 1)
            .operator(move |_| Block {
                release: Arc::clone(&blocked),
            })
            .collect_sink("out", &CollectHandle::new());
    })
    .expect_err("cancelled");
    stopper.join().unwrap();
    assert!(matches!(err, JobError::Cancelled { .. }), "{err}");
    release.store(true, Ordering::Release);
    let left = wait_threads_gone("blkT#");
    assert!(left.is_empty(), "{left:?}");
}
