//! Stop-with-savepoint, and the restore of a savepoint into a job that may have changed.
//!
//! # Stopping with a savepoint (Flink's `stop --savepointPath`)
//!
//! 1. The user asks: [`SavepointHandle::stop_with_savepoint`] (the CLI does on Ctrl-C/SIGTERM),
//!    or the run reached [`StopWithSavepoint::after_checkpoints`] completed checkpoints.
//! 2. The coordinator triggers a barrier of kind `Savepoint` on the sources and triggers no
//!    checkpoint after it. The barrier flows and aligns like any other.
//! 3. Once every task acknowledged, the savepoint is written (a relocatable directory, see
//!    `checkpoint/savepoint.rs`) and only then do its completion notices go out.
//!    [`SavepointHandle::wait_written`] returns its path from here on.
//! 4. The savepoint is synchronous, as Flink's: from its barrier on a source emits nothing
//!    (the one check is `ChainBody::source_may_emit` in the runtime kit (`streamtask-runtime`): a legacy source's
//!    next locked section waits on the lock's condition, a reader is not polled, its task only
//!    runs mails), and every task that took the barrier is `Suspending` (triggers declined,
//!    notices delivered). The savepoint's completion notice commits the two-phase sinks'
//!    transactions it pre-committed and moves each task to `Suspended`: its stop hook ends it
//!    without end of input (no `Watermark::MAX`, no flush, no `finish`: Flink's stop without
//!    `--drain`), and the executor joins them (it cancels nothing). Nothing a source read is
//!    lost or read twice: what it emitted is exactly the position its savepoint holds. What
//!    tasks behind it emit while the savepoint is pending (the results of async calls in
//!    flight at the barrier, which the savepoint holds as inputs and the restored job calls
//!    again; timers) is after the barrier and never committed; the stop does not wait for it.
//!    An aborted savepoint resumes the tasks (`Suspending -> Running`).
//! 5. The run returns with [`JobResult::savepoint`](crate::JobResult::savepoint) set.
//!
//! A savepoint that expires, is declined or cannot be written fails the stop, as Flink's
//! contract says: it is not triggered again (a savepoint that cannot be written would be
//! retried forever), the tasks are cancelled and the run returns
//! [`JobError::SavepointFailed`] naming the savepoint and why; the latest checkpoint stays, so
//! the run can be resumed. An abort because the job is ending by itself (a task finished, or
//! declined as finishing) is no failure: the run ends as the job does, without a savepoint.
//!
//! # Stopping with drain (Flink's `stop --drain`)
//!
//! [`StopWithSavepoint::with_drain`] makes the savepoint's barrier a
//! `CheckpointKind::DrainingSavepoint`. Each task, when the barrier reaches it (triggered at a
//! source, aligned elsewhere), first drains its chain (`ChainBody::drain_for` in the runtime
//! kit, one implementation for every model): `Watermark::MAX` through the chain (event-time
//! windows and timers fire), then every operator's input ends, an operator only once
//! everything upstream of it emitted (a model waits for async calls in flight as it does at
//! end of input: the lock's condition, a suspended default action), then every operator's
//! `finish`, head to tail (Flink's FLIP-147). What that produces goes downstream before the
//! barrier, so the savepoint's pre-commit holds it and its notice commits it; the rest is step
//! 4 above (the sources stop at the barrier in every model, a legacy source's thread at its
//! next locked section). A sink takes one snapshot after its `finish`, the savepoint's, which
//! pre-commits its last records for the savepoint (the [sink module](crate::sink), "Drain"),
//! so they are committed with it exactly once. An abort after a task drained fails
//! that task (its chain cannot take input again); the stop fails as any failed savepoint does.
//!
//! Every drained task's snapshot holds `TaskSnapshot::FINISHED`, and the restore of a
//! drained savepoint ([`Savepoint::is_drained`]) gives it to every task of the new job: the
//! job starts after end of input. Its sources emit nothing and end at once (a legacy source's
//! `run` is not called, a reader is not polled; a bounded source with input left reads none of
//! it), its operators get no records, watermarks, timers or end of input, so it ends with no
//! new output.
//!
//! # Restoring a savepoint
//!
//! [`Restore::Savepoint`](crate::Restore::Savepoint) goes through the same restore path as a
//! checkpoint: the savepoint is turned into a checkpoint of the new job's tasks here, then
//! restored as any checkpoint is. Each state entry of the new job is found by its operator id
//! (see `identity.rs`); where the parallelism changed it is redistributed:
//!
//! | state | how it moves | examples |
//! |---|---|---|
//! | keyed (`KeyGroupedState`) | by key group to the subtask whose range holds it | `key_by(..).process(..)` state and timers |
//! | union (`UnionState`) | every new subtask gets every old subtask's items | the two-phase file sink's transactions |
//! | list (`ListState`) | concatenated, split evenly | `from_sequence`/`from_sequence_parallel`'s ranges left (a range belongs to no subtask); `async_wait`'s in-flight inputs (each re-submitted once where it lands; union state would repeat it on every subtask) |
//! | list (`ListState`) of FLIP-27 file splits | concatenated, split evenly: each new reader reads the splits it got (in progress ones from their offsets), then asks the enumerator | `from_source`'s readers: splits held, recently finished ones, and the enumerator's trigger-time snapshots (reader 0's; any reader after a rescale), under every model |
//! | anything else | only to the same parallelism | the offsets of user sources that do not snapshot list state; `from_iter`'s position (always parallelism 1) |
//!
//! A savepoint entry no operator of the new job claims is refused
//! ([`JobError::NonRestoredState`]) unless the user allows dropping it; an operator the
//! savepoint has no state for starts empty.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use streamtask_core::keygroup::{
    StateKind, redistribute_key_groups, redistribute_operator_state, state_kind,
};
use streamtask_core::state::TaskSnapshot;

use streamtask_core::sync::{Condvar, Mutex};

use super::environment::JobGraph;
use super::error::SavepointDirProblem;
use super::{JobConfig, JobError};
use crate::checkpoint::{
    CompletedCheckpoint, CoordinatorAction, Savepoint, SavepointFailure, SavepointWriter,
    VertexShape,
};

/// Asks a running job to stop with a savepoint, from any thread, and tells when it was written.
///
/// # Examples
///
/// ```
/// use streamtask::SavepointHandle;
///
/// let handle = SavepointHandle::new();
/// let for_signal = handle.clone();
/// assert!(!handle.is_requested());
/// for_signal.stop_with_savepoint();
/// assert!(handle.is_requested());
/// ```
///
/// Waiting for the savepoint from another thread while the job runs
/// ([`wait_written`](Self::wait_written)), here to release work the job holds in flight:
///
/// ```
/// use std::time::Duration;
/// use streamtask::prelude::*;
///
/// let work = tempfile::tempdir().unwrap();
/// let env = StreamEnvironment::new(Model::Mailbox);
/// env.from_sequence("numbers", 0..u64::MAX)
///     .map("double", |n: u64| n * 2)
///     .two_phase_file_sink("sink", work.path().join("out"), |n: &u64| n.to_string());
/// let job = env.build().unwrap();
/// let stop = StopWithSavepoint::new(work.path().join("savepoints")).after_checkpoints(1);
/// let handle = stop.handle();
/// let config = JobConfig::new(work.path())
///     .with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(10))))
///     .with_stop_with_savepoint(stop);
/// let waiter = std::thread::spawn(move || handle.wait_written(Duration::from_secs(60)));
/// let result = job.run(&config).unwrap();
/// let written = waiter.join().unwrap().expect("written while the job ran");
/// assert_eq!(result.savepoint, Some(written));
/// ```
#[derive(Debug, Clone, Default)]
pub struct SavepointHandle {
    requested: Arc<AtomicBool>,
    written: Arc<Written>,
}

/// Where [`SavepointHandle::wait_written`] waits: the path once written, or the failure.
#[derive(Debug, Default)]
struct Written {
    path: Mutex<Outcome>,
    changed: Condvar,
}

/// How the stop-with-savepoint went, as far as the handle knows.
#[derive(Debug, Default)]
struct Outcome {
    path: Option<PathBuf>,
    failed: bool,
}

impl SavepointHandle {
    /// A handle nobody pulled yet.
    pub fn new() -> Self {
        SavepointHandle::default()
    }

    /// Asks the job to take a savepoint and stop (idempotent).
    pub fn stop_with_savepoint(&self) {
        // Release: whatever the caller did before asking is visible to the executor's
        // thread that reads the flag with Acquire.
        self.requested.store(true, Ordering::Release);
    }

    /// Whether a stop was asked for.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    /// Waits until the savepoint was written (durable, before its completion notices go out
    /// and the tasks end), at most `timeout`; returns its path, or `None` if none was written
    /// in time (the job may have ended first) or the savepoint failed (then at once, see
    /// [`has_failed`](Self::has_failed)). Returns at once once written.
    pub fn wait_written(&self, timeout: Duration) -> Option<PathBuf> {
        let deadline = Instant::now().checked_add(timeout);
        let mut outcome = self.written.path.lock();
        // The lost-wakeup rule: the outcome changes under the mutex, and is re-read after
        // every wake-up.
        while outcome.path.is_none() && !outcome.failed {
            match deadline {
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return None;
                    }
                    self.written.changed.wait_for(&mut outcome, deadline - now);
                }
                None => self.written.changed.wait(&mut outcome),
            }
        }
        outcome.path.clone()
    }

    /// The savepoint written, if any yet (see [`wait_written`](Self::wait_written)).
    pub fn written(&self) -> Option<PathBuf> {
        self.written.path.lock().path.clone()
    }

    /// Whether the savepoint failed (expired, declined, or could not be written): the stop
    /// failed, and the run ends with [`JobError::SavepointFailed`].
    pub fn has_failed(&self) -> bool {
        self.written.path.lock().failed
    }

    /// The coordinator wrote the savepoint at `path`: wakes the waiters.
    fn set_written(&self, path: PathBuf) {
        self.written.path.lock().path = Some(path);
        self.written.changed.notify_all();
    }

    /// The savepoint failed: wakes the waiters.
    fn set_failed(&self) {
        self.written.path.lock().failed = true;
        self.written.changed.notify_all();
    }
}

/// How a run stops with a savepoint, set with
/// [`JobConfig::with_stop_with_savepoint`](crate::JobConfig::with_stop_with_savepoint).
///
/// # Examples
///
/// ```
/// use streamtask::StopWithSavepoint;
///
/// let stop = StopWithSavepoint::new("/tmp/savepoints").after_checkpoints(3);
/// let handle = stop.handle(); // pull it from anywhere to stop earlier
/// assert_eq!(stop.dir(), std::path::Path::new("/tmp/savepoints"));
/// # drop(handle);
/// ```
#[derive(Debug, Clone)]
pub struct StopWithSavepoint {
    dir: PathBuf,
    after_checkpoints: Option<u64>,
    handle: SavepointHandle,
    drain: bool,
}

impl StopWithSavepoint {
    /// Savepoints go into `dir` (created if missing), one `savepoint-<id>-<millis>` directory
    /// each. The stop happens when the [`handle`](Self::handle) is pulled.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StopWithSavepoint {
            dir: dir.into(),
            after_checkpoints: None,
            handle: SavepointHandle::new(),
            drain: false,
        }
    }

    /// Also stops once the run completed `n` checkpoints (deterministic for tests and
    /// scripts).
    pub fn after_checkpoints(mut self, n: u64) -> Self {
        self.after_checkpoints = Some(n);
        self
    }

    /// Drains the job before the savepoint (Flink's `stop --drain`; default `false`, Flink's
    /// stop without drain). Every task, at the savepoint's barrier, first advances event time
    /// to [`Watermark::MAX`](streamtask_core::Watermark::MAX) (event-time windows and timers
    /// fire), ends its operators' input and runs their `finish`, so the output holds what end
    /// of input produces and the savepoint commits it. The job is over then: a restore of the savepoint starts after
    /// end of input (its sources emit nothing, whether bounded or not, and its operators get
    /// nothing more), so it ends at once with no new output. Use it to end a job for good;
    /// stop without drain to move, upgrade or rescale a job that goes on. Same in every model.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::StopWithSavepoint;
    ///
    /// let stop = StopWithSavepoint::new("/tmp/savepoints").with_drain(true);
    /// assert!(stop.drains());
    /// ```
    pub fn with_drain(mut self, drain: bool) -> Self {
        self.drain = drain;
        self
    }

    /// Whether the savepoint drains the job first (see [`with_drain`](Self::with_drain)).
    pub fn drains(&self) -> bool {
        self.drain
    }

    /// Uses `handle` (shared with a signal handler, a source, another thread).
    pub fn with_handle(mut self, handle: SavepointHandle) -> Self {
        self.handle = handle;
        self
    }

    /// The handle that stops the run.
    pub fn handle(&self) -> SavepointHandle {
        self.handle.clone()
    }

    /// Where savepoints go.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Checks that savepoints can be written into [`dir`](Self::dir): it is a directory (or
    /// can be created as one) and writable. [`JobGraph::run`](crate::JobGraph::run) checks
    /// it before anything runs; call it earlier to refuse a bad path before other work.
    ///
    /// # Errors
    ///
    /// [`JobError::SavepointDirectory`] naming what is wrong.
    pub fn check_dir(&self) -> Result<(), JobError> {
        let fail = |problem: SavepointDirProblem| JobError::SavepointDirectory {
            path: self.dir.clone(),
            problem,
        };
        // The nearest part of the path that exists must be a directory we may write into;
        // what does not exist yet is created there when the savepoint is written.
        let mut existing = self.dir.as_path();
        loop {
            match std::fs::metadata(existing) {
                Ok(meta) if meta.is_dir() => break,
                Ok(_) if existing == self.dir.as_path() => {
                    return Err(fail(SavepointDirProblem::NotADirectory));
                }
                Ok(_) => {
                    return Err(fail(SavepointDirProblem::UnderAFile(
                        existing.to_path_buf(),
                    )));
                }
                // Missing, or under a file (which the parent's metadata then says).
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
                {
                    match existing.parent() {
                        Some(parent) if !parent.as_os_str().is_empty() => existing = parent,
                        _ => {
                            existing = Path::new(".");
                            break;
                        }
                    }
                }
                Err(e) => return Err(fail(SavepointDirProblem::Unreadable(Arc::new(e)))),
            }
        }
        let probe = existing.join(format!(
            ".streamtask-savepoint-check-{}",
            std::process::id()
        ));
        match std::fs::File::create(&probe) {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
                Ok(())
            }
            Err(e) => Err(fail(SavepointDirProblem::NotWritable {
                dir: existing.to_path_buf(),
                source: Arc::new(e),
            })),
        }
    }

    /// Whether the savepoint is due, after `completed` checkpoints of the run.
    pub(crate) fn is_due(&self, completed: u64) -> bool {
        self.handle.is_requested() || self.after_checkpoints.is_some_and(|n| completed >= n)
    }
}

/// One attempt's stop-with-savepoint: shared by the executor's loop and the coordinator's
/// thread (which writes the savepoint and carries out its notices).
#[derive(Debug, Clone)]
pub(crate) struct AttemptSavepoint {
    shared: Arc<AttemptShared>,
}

#[derive(Debug)]
struct AttemptShared {
    stop: StopWithSavepoint,
    model: String,
    max_parallelism: u32,
    shape: Vec<VertexShape>,
    /// The savepoint written: its id and path.
    written: Mutex<Option<(u64, PathBuf)>>,
    /// The savepoint triggered, once it was.
    pending: Mutex<Option<u64>>,
    /// Why the savepoint failed, if it did.
    failure: Mutex<Option<SavepointFailure>>,
    triggered: AtomicBool,
    complete: AtomicBool,
}

impl AttemptSavepoint {
    /// The attempt's savepoint, if the run stops with one.
    pub(crate) fn new(graph: &JobGraph, config: &JobConfig) -> Result<Option<Self>, JobError> {
        let Some(stop) = &config.stop_with_savepoint else {
            return Ok(None);
        };
        Ok(Some(AttemptSavepoint {
            shared: Arc::new(AttemptShared {
                stop: stop.clone(),
                model: graph.model().name().to_string(),
                max_parallelism: graph.max_parallelism(),
                shape: graph.shape()?,
                written: Mutex::new(None),
                pending: Mutex::new(None),
                failure: Mutex::new(None),
                triggered: AtomicBool::new(false),
                complete: AtomicBool::new(false),
            }),
        }))
    }

    /// Whether the savepoint drains the job first.
    pub(crate) fn drains(&self) -> bool {
        self.shared.stop.drains()
    }

    /// What the coordinator calls with the completed savepoint, before its notices.
    pub(crate) fn writer(&self) -> SavepointWriter {
        let shared = Arc::clone(&self.shared);
        Box::new(move |checkpoint| {
            let path = Savepoint::write(
                shared.stop.dir(),
                checkpoint,
                &shared.model,
                shared.max_parallelism,
                shared.shape.clone(),
            )?;
            log::info!("savepoint {} written to {}", checkpoint.id, path.display());
            shared.stop.handle.set_written(path.clone());
            *shared.written.lock() = Some((checkpoint.id, path));
            Ok(())
        })
    }

    /// Called after the completion notices of checkpoint `id` went out.
    pub(crate) fn completed(&self, id: u64) {
        if self
            .shared
            .written
            .lock()
            .as_ref()
            .is_some_and(|(w, _)| *w == id)
        {
            self.shared.complete.store(true, Ordering::Release);
        }
    }

    /// The coordinator carries out `action`: follows the savepoint's trigger and abort (the
    /// coordinator's verdict on whether an abort fails the stop, see
    /// [`AbortReason::is_job_ending`](crate::checkpoint::AbortReason::is_job_ending)).
    pub(crate) fn on_action(&self, action: &CoordinatorAction) {
        match action {
            CoordinatorAction::Trigger(barrier) if barrier.kind.is_synchronous() => {
                *self.shared.pending.lock() = Some(barrier.id);
            }
            CoordinatorAction::Abort { id, reason }
                if *self.shared.pending.lock() == Some(*id) && !reason.is_job_ending() =>
            {
                *self.shared.failure.lock() = Some(SavepointFailure {
                    id: *id,
                    reason: reason.clone(),
                });
                self.shared.stop.handle.set_failed();
            }
            _ => {}
        }
    }

    /// Why the savepoint failed, if it did: the stop failed, and the attempt ends.
    pub(crate) fn failure(&self) -> Option<SavepointFailure> {
        self.shared.failure.lock().clone()
    }

    /// Whether to trigger the savepoint now (once per attempt), after `completed` checkpoints.
    pub(crate) fn trigger_if_due(&self, completed: u64) -> bool {
        !self.shared.triggered.load(Ordering::Relaxed)
            && self.shared.stop.is_due(completed)
            && !self.shared.triggered.swap(true, Ordering::Relaxed)
    }

    /// Whether the savepoint is written and its notices are out.
    pub(crate) fn is_complete(&self) -> bool {
        self.shared.complete.load(Ordering::Acquire)
    }

    /// The savepoint's path, once complete.
    pub(crate) fn path(&self) -> Option<PathBuf> {
        if !self.is_complete() {
            return None;
        }
        self.shared.written.lock().as_ref().map(|(_, p)| p.clone())
    }
}

impl JobGraph {
    /// A source's state is a position in what it read: every source of this job that declares
    /// an identity must read what its namesake (by operator id) in the savepoint read, if that
    /// one declared an identity too.
    pub(crate) fn check_source_identities(&self, savepoint: &Savepoint) -> Result<(), JobError> {
        check_source_identities(savepoint, &self.shape()?)
    }

    /// Turns `savepoint` into a checkpoint of this job's tasks: every state entry found by its
    /// operator id and redistributed to this job's parallelism (see the module docs).
    pub(crate) fn restore_savepoint(
        &self,
        savepoint: &Savepoint,
        allow_non_restored: bool,
    ) -> Result<CompletedCheckpoint, JobError> {
        rescale_savepoint(
            savepoint,
            &self.shape()?,
            self.max_parallelism(),
            allow_non_restored,
        )
    }
}

/// Every source of `shape` that declares an identity must read what its namesake (by
/// operator id) in the savepoint read, if that one declared an identity too.
fn check_source_identities(savepoint: &Savepoint, shape: &[VertexShape]) -> Result<(), JobError> {
    let source_of = |v: &VertexShape| {
        v.states
            .iter()
            .find(|s| s.key == TaskSnapshot::SOURCE)
            .map(|s| s.operator_id.clone())
    };
    for vertex in shape {
        let (Some(job), Some(operator)) = (&vertex.source_identity, source_of(vertex)) else {
            continue;
        };
        let taken = savepoint
            .metadata
            .vertices
            .iter()
            .filter(|v| source_of(v).as_ref() == Some(&operator))
            .find_map(|v| v.source_identity.as_ref());
        if let Some(taken) = taken.filter(|t| *t != job) {
            return Err(JobError::SourceMismatch {
                path: savepoint.path.clone(),
                operator,
                savepoint: taken.clone(),
                job: job.clone(),
            });
        }
    }
    Ok(())
}

/// Turns `savepoint` into a checkpoint of the tasks of a job of `shape` (tasks
/// `<vertex>#<subtask>`, its vertices at their parallelism) with `max_parallelism` key groups:
/// every state entry is found by its operator id and redistributed to the new parallelism as
/// the [module docs](crate::StopWithSavepoint) table says (keyed state by key group, list
/// state split evenly, union state to every subtask). This is the restore of
/// [`Restore::Savepoint`](crate::Restore::Savepoint), for engines that run a job's operators
/// outside the local executor (a job moving between them through a savepoint).
///
/// # Errors
///
/// [`JobError::MaxParallelismChanged`], [`JobError::SourceMismatch`] (a source declares
/// another input than the savepoint's), [`JobError::MaxParallelism`], [`JobError::Rescale`]
/// (state that cannot move to another parallelism), [`JobError::NonRestoredState`] (state
/// for operators `shape` lacks, unless `allow_non_restored`).
///
/// # Examples
///
/// ```
/// use std::collections::BTreeMap;
/// use streamtask::checkpoint::{CompletedCheckpoint, Savepoint, StateEntry, VertexShape};
/// use streamtask_core::keygroup::ListState;
/// use streamtask_core::state::TaskSnapshot;
///
/// let shape = |parallelism| {
///     vec![VertexShape {
///         name: "numbers".into(),
///         parallelism,
///         states: vec![StateEntry { key: "source".into(), operator_id: "numbers".into() }],
///         source_identity: None,
///     }]
/// };
/// let mut task = TaskSnapshot::new();
/// task.put(TaskSnapshot::SOURCE, ListState::new(vec![1u64, 2, 3, 4]).encode().unwrap());
/// let checkpoint = CompletedCheckpoint {
///     id: 7,
///     timestamp: 0,
///     tasks: BTreeMap::from([("numbers#0".to_string(), task)]),
/// };
/// let dir = tempfile::tempdir().unwrap();
/// let path = Savepoint::write(dir.path(), &checkpoint, "mailbox", 128, shape(1)).unwrap();
/// let savepoint = Savepoint::load(&path).unwrap();
/// let rescaled = streamtask::rescale_savepoint(&savepoint, &shape(2), 128, false).unwrap();
/// assert_eq!(rescaled.tasks.len(), 2);
/// assert!(rescaled.task("numbers#1").unwrap().get(TaskSnapshot::SOURCE).is_some());
/// ```
pub fn rescale_savepoint(
    savepoint: &Savepoint,
    shape: &[VertexShape],
    max_parallelism: u32,
    allow_non_restored: bool,
) -> Result<CompletedCheckpoint, JobError> {
    let meta = &savepoint.metadata;
    if meta.max_parallelism != max_parallelism {
        return Err(JobError::MaxParallelismChanged {
            path: savepoint.path.clone(),
            savepoint: meta.max_parallelism,
            job: max_parallelism,
        });
    }
    check_source_identities(savepoint, shape)?;
    // operator id -> (old vertex, entry key, old parallelism)
    let mut old: BTreeMap<String, (&str, &str, usize)> = BTreeMap::new();
    for v in &meta.vertices {
        for s in &v.states {
            old.insert(s.operator_id.clone(), (&v.name, &s.key, v.parallelism));
        }
        // A source's elements in flight belong to the source, also where the shape left
        // them out (savepoints whose shape declared them only for `add_source`'s
        // functions, while a reader given to `add_reader` wrote them too).
        let declares = |key: &str| v.states.iter().any(|s| s.key == key);
        if !declares(TaskSnapshot::SOURCE_IN_FLIGHT)
            && let Some(source) = v.states.iter().find(|s| s.key == TaskSnapshot::SOURCE)
        {
            old.insert(
                format!("{}/in-flight", source.operator_id),
                (&v.name, TaskSnapshot::SOURCE_IN_FLIGHT, v.parallelism),
            );
        }
    }
    let has_state = |vertex: &str, key: &str, parallelism: usize| {
        (0..parallelism).any(|i| {
            savepoint
                .checkpoint
                .task(&format!("{vertex}#{i}"))
                .is_some_and(|t| t.get(key).is_some())
        })
    };
    let mut tasks: BTreeMap<String, TaskSnapshot> = shape
        .iter()
        .flat_map(|v| {
            (0..v.parallelism).map(move |i| (format!("{}#{i}", v.name), TaskSnapshot::new()))
        })
        .collect();
    let mut claimed = BTreeSet::new();
    for vertex in shape {
        let to = vertex.parallelism;
        if to > max_parallelism as usize {
            return Err(JobError::MaxParallelism {
                vertex: vertex.name.clone(),
                source: streamtask_core::keygroup::KeyGroupError::ParallelismAboveMax {
                    parallelism: u32::try_from(to).unwrap_or(u32::MAX),
                    max_parallelism,
                },
            });
        }
        for entry in &vertex.states {
            let Some(&(old_vertex, old_key, from)) = old.get(&entry.operator_id) else {
                log::info!(
                    "operator {:?} has no state in savepoint {}; it starts empty",
                    entry.operator_id,
                    savepoint.path.display()
                );
                continue;
            };
            claimed.insert(entry.operator_id.clone());
            let bytes: Vec<Option<&[u8]>> = (0..from)
                .map(|i| {
                    savepoint
                        .checkpoint
                        .task(&format!("{old_vertex}#{i}"))
                        .and_then(|t| t.get(old_key))
                })
                .collect();
            let moved = redistribute(&entry.operator_id, &bytes, to, max_parallelism)?;
            for (i, state) in moved.into_iter().enumerate() {
                if let Some(state) = state {
                    let task = tasks
                        .get_mut(&format!("{}#{i}", vertex.name))
                        .expect("every task of the job has a snapshot");
                    task.put(entry.key.clone(), state);
                }
            }
        }
    }
    let mut dropped: Vec<String> = old
        .iter()
        .filter(|(id, (v, k, p))| !claimed.contains(*id) && has_state(v, k, *p))
        .map(|(id, _)| id.clone())
        .collect();
    // An entry no operator id names would be lost without a word: refused as well.
    let named: BTreeSet<(&str, &str)> = old.values().map(|&(v, k, _)| (v, k)).collect();
    for v in &meta.vertices {
        for i in 0..v.parallelism {
            let task = format!("{}#{i}", v.name);
            let Some(snapshot) = savepoint.checkpoint.task(&task) else {
                continue;
            };
            for (key, _) in snapshot.iter() {
                if key != TaskSnapshot::FINISHED && !named.contains(&(v.name.as_str(), key)) {
                    dropped.push(format!("{task}: {key} (no operator id in the savepoint)"));
                }
            }
        }
    }
    if !dropped.is_empty() {
        if !allow_non_restored {
            return Err(JobError::NonRestoredState {
                path: savepoint.path.clone(),
                operators: dropped,
            });
        }
        log::warn!(
            "dropping the state of operators the job no longer has, as allowed: {dropped:?}"
        );
    }
    // A drained savepoint's job ended its input: the restored job starts after it, every
    // task of it (a source emits nothing, whether bounded or not; see
    // `TaskSnapshot::FINISHED`).
    if savepoint.is_drained() {
        log::info!(
            "savepoint {} was drained: the job restores after end of input",
            savepoint.path.display()
        );
        for task in tasks.values_mut() {
            task.put(TaskSnapshot::FINISHED, Vec::new());
        }
    }
    log::info!(
        "restoring savepoint {} (checkpoint {}, taken under the {} model) from {}",
        savepoint.path.display(),
        meta.checkpoint_id,
        meta.model,
        savepoint.path.display()
    );
    Ok(CompletedCheckpoint {
        id: savepoint.checkpoint.id,
        timestamp: savepoint.checkpoint.timestamp,
        tasks,
    })
}

/// The new subtasks' snapshots of one operator's state, from the old subtasks'.
fn redistribute(
    operator: &str,
    old: &[Option<&[u8]>],
    to: usize,
    max_parallelism: u32,
) -> Result<Vec<Option<Vec<u8>>>, JobError> {
    let from = old.len();
    if from == to {
        // Same parallelism: every subtask gets its own snapshot back, whatever its kind.
        return Ok(old.iter().map(|b| b.map(<[u8]>::to_vec)).collect());
    }
    let fail = |reason: String| JobError::Rescale {
        operator: operator.to_string(),
        from,
        to,
        reason,
    };
    let Some(first) = old.iter().flatten().next() else {
        return Ok(vec![None; to]);
    };
    let to_u32 = u32::try_from(to).unwrap_or(u32::MAX);
    match state_kind(first) {
        StateKind::KeyGrouped => {
            redistribute_key_groups(old, max_parallelism, to_u32).map_err(|e| fail(e.to_string()))
        }
        StateKind::List | StateKind::Union => {
            redistribute_operator_state(old, to).map_err(|e| fail(e.to_string()))
        }
        StateKind::Subtask => Err(fail(
            "it is tied to its subtask (not keyed, list or union state); restore with the \
             old parallelism, or snapshot it as ListState or UnionState"
                .to_string(),
        )),
    }
}
