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

use streamtask_core::TaskSnapshot;
use streamtask_core::keygroup::{
    StateKind, redistribute_key_groups, redistribute_operator_state, state_kind,
};

use streamtask_core::sync::{Condvar, Mutex};

use super::graph::JobGraph;
use super::{JobConfig, JobError};
use crate::checkpoint::{CompletedCheckpoint, Savepoint, SavepointWriter, VertexShape};

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

/// Where [`SavepointHandle::wait_written`] waits: the path, once written.
#[derive(Debug, Default)]
struct Written {
    path: Mutex<Option<PathBuf>>,
    changed: Condvar,
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
    /// in time (the job may have ended first, or the savepoint failed). Returns at once once
    /// written.
    pub fn wait_written(&self, timeout: Duration) -> Option<PathBuf> {
        let deadline = Instant::now().checked_add(timeout);
        let mut path = self.written.path.lock();
        // The lost-wakeup rule: the path changes under the mutex, and is re-read after every
        // wake-up.
        while path.is_none() {
            match deadline {
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return None;
                    }
                    self.written.changed.wait_for(&mut path, deadline - now);
                }
                None => self.written.changed.wait(&mut path),
            }
        }
        path.clone()
    }

    /// The savepoint written, if any yet (see [`wait_written`](Self::wait_written)).
    pub fn written(&self) -> Option<PathBuf> {
        self.written.path.lock().clone()
    }

    /// The coordinator wrote the savepoint at `path`: wakes the waiters.
    fn set_written(&self, path: PathBuf) {
        *self.written.path.lock() = Some(path);
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
}

impl StopWithSavepoint {
    /// Savepoints go into `dir` (created if missing), one `savepoint-<id>-<millis>` directory
    /// each. The stop happens when the [`handle`](Self::handle) is pulled.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StopWithSavepoint {
            dir: dir.into(),
            after_checkpoints: None,
            handle: SavepointHandle::new(),
        }
    }

    /// Also stops once the run completed `n` checkpoints (deterministic for tests and
    /// scripts).
    pub fn after_checkpoints(mut self, n: u64) -> Self {
        self.after_checkpoints = Some(n);
        self
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
                triggered: AtomicBool::new(false),
                complete: AtomicBool::new(false),
            }),
        }))
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
    /// Turns `savepoint` into a checkpoint of this job's tasks: every state entry found by its
    /// operator id and redistributed to this job's parallelism (see the module docs).
    pub(crate) fn restore_savepoint(
        &self,
        savepoint: &Savepoint,
        allow_non_restored: bool,
    ) -> Result<CompletedCheckpoint, JobError> {
        let meta = &savepoint.metadata;
        if meta.max_parallelism != self.max_parallelism() {
            return Err(JobError::MaxParallelismChanged {
                path: savepoint.path.clone(),
                savepoint: meta.max_parallelism,
                job: self.max_parallelism(),
            });
        }
        // operator id -> (old vertex, entry key, old parallelism)
        let mut old: BTreeMap<&str, (&str, &str, usize)> = BTreeMap::new();
        for v in &meta.vertices {
            for s in &v.states {
                old.insert(&s.operator_id, (&v.name, &s.key, v.parallelism));
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
        let mut tasks: BTreeMap<String, TaskSnapshot> = self
            .task_names()
            .into_iter()
            .map(|(_, _, name)| (name, TaskSnapshot::new()))
            .collect();
        let mut claimed = BTreeSet::new();
        for vertex in self.shape()? {
            let to = vertex.parallelism;
            if to > self.max_parallelism() as usize {
                return Err(JobError::MaxParallelism {
                    vertex: vertex.name.clone(),
                    source: streamtask_core::keygroup::KeyGroupError::ParallelismAboveMax {
                        parallelism: u32::try_from(to).unwrap_or(u32::MAX),
                        max_parallelism: self.max_parallelism(),
                    },
                });
            }
            for entry in &vertex.states {
                let Some(&(old_vertex, old_key, from)) = old.get(entry.operator_id.as_str()) else {
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
                let moved = redistribute(&entry.operator_id, &bytes, to, self.max_parallelism())?;
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
        let dropped: Vec<String> = old
            .iter()
            .filter(|(id, (v, k, p))| !claimed.contains(**id) && has_state(v, k, *p))
            .map(|(id, _)| (*id).to_string())
            .collect();
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
