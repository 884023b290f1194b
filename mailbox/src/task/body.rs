//! What every task body shares: its environment, the counting output, the phase machine, and
//! the snapshot and backpressure steps.
//!
//! # Phases
//!
//! | phase | default action | events | checkpoint triggers | moves to |
//! |---|---|---|---|---|
//! | `Running` | pulls input | delivered | snapshot | `Draining` (end of input) |
//! | `Draining` | ends the chain's input operator by operator, waiting before each until the chain accepts input, then finishes | delivered | declined | `Finished` |
//! | `Finished` | - (the loop ended) | dropped | declined | - |

use std::time::Instant;

use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{Context, TaskServices};
use streamtask_core::task::{CheckpointResponder, DeclineReason};
use streamtask_core::trace::{RecordRun, Tracer};
use streamtask_core::{
    CheckpointBarrier, Operator, OperatorError, Output, StreamRecord, StreamStatus, TaskError,
    TaskFailure, TaskOutput, TaskSnapshot, Watermark,
};

use crate::processor::{Controller, SuspendCause, Suspension};
use crate::services::OperatorMails;

/// Records counted locally before they are published to [`TaskMetrics`].
const PUBLISH_EVERY: u64 = 1024;

/// The body of a task: its state, the default action and what its mails do.
pub(crate) trait TaskBody: OperatorMails<TaskFailure> + Send + 'static {
    /// Restores and opens the chain (and reader).
    fn open(&mut self) -> Result<(), TaskFailure>;
    /// One step of the default action.
    fn step(&mut self, controller: &mut Controller<'_>) -> Result<(), TaskFailure>;
    /// A checkpoint trigger mail (source tasks only).
    fn trigger_checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        triggered: Instant,
    ) -> Result<(), TaskFailure>;
    /// A checkpoint-complete notice.
    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), TaskFailure>;
    /// A checkpoint-aborted notice.
    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), TaskFailure>;
    /// Whether the chain finished (end of input fully processed).
    fn is_finished(&self) -> bool;
    /// Publishes the locally counted records.
    fn publish_metrics(&mut self);
    /// Closes the chain (and reader), logging errors.
    fn close(&mut self);
}

/// See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Pulling input.
    Running,
    /// Ending the chain's input one operator at a time, head to tail; before each operator's
    /// `end_input`, and before `finish`, waiting until the chain accepts input (everything
    /// upstream drained: an async operator's in-flight calls completed and emitted).
    Draining,
    /// `finish` ran and end of input went downstream.
    Finished,
}

/// What every body keeps besides its input, chain and output.
pub(crate) struct TaskEnv {
    pub(crate) name: String,
    pub(crate) services: TaskServices,
    pub(crate) responder: CheckpointResponder,
    pub(crate) metrics: std::sync::Arc<TaskMetrics>,
    pub(crate) tracer: Tracer,
    pub(crate) run: RecordRun,
    pub(crate) phase: Phase,
    /// While draining: how many operators of the chain (head first) had their input ended.
    pub(crate) inputs_ended: usize,
    /// Records in, not yet published.
    pub(crate) records_in: u64,
    pub(crate) restore: Option<TaskSnapshot>,
    /// A suspension waiting for the chain to accept input; every mail re-checks it.
    pub(crate) parked: Option<Suspension>,
    /// The suspension of a default action waiting for input, for mails that make input
    /// readable without new data arriving (an abort releasing channels held for alignment).
    pub(crate) idle: Option<Suspension>,
}

impl TaskEnv {
    pub(crate) fn new(
        name: String,
        services: TaskServices,
        responder: CheckpointResponder,
        metrics: std::sync::Arc<TaskMetrics>,
        tracer: Tracer,
        restore: Option<TaskSnapshot>,
    ) -> Self {
        TaskEnv {
            name,
            services,
            responder,
            metrics,
            tracer,
            run: RecordRun::new(),
            phase: Phase::Running,
            inputs_ended: 0,
            records_in: 0,
            restore,
            parked: None,
            idle: None,
        }
    }

    pub(crate) fn failure(&self, error: impl Into<TaskError>) -> TaskFailure {
        TaskFailure::new(self.name.clone(), error)
    }

    /// Counts one record in: plain integers and one branch when tracing is off.
    #[inline]
    pub(crate) fn count_in(&mut self, records: u64) -> bool {
        self.records_in += records;
        if self.tracer.is_on() {
            for _ in 0..records {
                self.run.record(&self.tracer);
            }
        }
        self.records_in >= PUBLISH_EVERY
    }

    pub(crate) fn publish(&mut self, records_out: &mut u64) {
        if self.records_in > 0 {
            self.metrics
                .records_in
                .add(std::mem::take(&mut self.records_in));
        }
        if *records_out > 0 {
            self.metrics.records_out.add(std::mem::take(records_out));
        }
    }

    /// Before a mail touches the chain: end the current run of records.
    pub(crate) fn begin_mail(&mut self) {
        self.run.interrupt(&self.tracer);
    }

    /// After a mail: if the default action waits for the chain and the chain now accepts
    /// input, resume it.
    pub(crate) fn end_mail(&mut self, accepts_input: impl FnOnce() -> bool) {
        if self.parked.is_some() && accepts_input() {
            if let Some(suspension) = self.parked.take() {
                suspension.resume();
            }
        }
    }

    /// Suspends the default action until input may be available; `register` hands the waker to
    /// the input.
    pub(crate) fn suspend_idle(
        &mut self,
        controller: &mut Controller<'_>,
        register: impl FnOnce(&std::task::Waker),
    ) {
        self.run.interrupt(&self.tracer);
        let suspension = controller.suspend_default_action_for(SuspendCause::Idle);
        register(&suspension.waker());
        self.idle = Some(suspension);
    }

    /// Resumes a default action waiting for input: a mail made input readable that no data
    /// waker will announce (channels held back for an aborted checkpoint were released, their
    /// data was already there). Resuming a suspension that already ended does nothing.
    pub(crate) fn resume_idle(&mut self) {
        if let Some(suspension) = self.idle.take() {
            suspension.resume();
        }
    }

    /// Suspends the default action until the chain accepts input and the output has room.
    pub(crate) fn suspend_backpressured<T>(
        &mut self,
        controller: &mut Controller<'_>,
        chain_accepts: bool,
        output: &impl TaskOutput<T>,
    ) {
        self.run.interrupt(&self.tracer);
        let suspension = controller.suspend_default_action_for(SuspendCause::Backpressure);
        let mut waiting = false;
        if !chain_accepts {
            // Only mails (of this thread) change what the chain accepts; each re-checks.
            self.parked = Some(suspension.clone());
            waiting = true;
        }
        if !output.is_available() {
            // Wakes at once if room freed since the check.
            output.register_availability_waker(&suspension.waker());
            waiting = true;
        }
        if !waiting {
            // Both recovered between the caller's check and now.
            suspension.resume();
        }
    }

    /// Declines a trigger that reached a task that is not running.
    pub(crate) fn decline_not_running(&self, id: u64) {
        self.responder.decline(id, DeclineReason::NotRunning);
    }
}

/// The task's output, counting records into a plain integer.
pub(crate) struct Counted<W> {
    pub(crate) inner: W,
    pub(crate) records: u64,
}

impl<W> Counted<W> {
    pub(crate) fn new(inner: W) -> Self {
        Counted { inner, records: 0 }
    }
}

impl<T, W: Output<T>> Output<T> for Counted<W> {
    #[inline]
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.records += 1;
        self.inner.collect(record)
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.inner.emit_watermark(watermark)
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.inner.emit_status(status)
    }
}

impl<T, W: TaskOutput<T>> TaskOutput<T> for Counted<W> {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        self.inner.broadcast_barrier(barrier)
    }

    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.inner.end_of_input()
    }

    #[inline]
    fn is_available(&self) -> bool {
        self.inner.is_available()
    }

    fn register_availability_waker(&self, waker: &std::task::Waker) {
        self.inner.register_availability_waker(waker);
    }
}

/// Snapshots a one-input chain (and a reader's bytes) for `barrier`, Flink's order: prepare the
/// chain (it may flush), send the barrier downstream, snapshot, acknowledge. `since` is when the
/// checkpoint was asked for (the trigger call, or the aligned barrier).
pub(crate) fn perform_checkpoint<O, W>(
    chain: &mut O,
    output: &mut Counted<W>,
    env: &mut TaskEnv,
    barrier: CheckpointBarrier,
    since: Instant,
    source_state: impl FnOnce(u64) -> Result<Option<Vec<u8>>, OperatorError>,
) -> Result<(), TaskFailure>
where
    O: Operator,
    W: TaskOutput<O::Out>,
{
    let started = Instant::now();
    env.metrics
        .checkpoint_delay
        .record(started.saturating_duration_since(since));
    let id = barrier.id;
    let _span = env.tracer.span("checkpoint", || format!("checkpoint {id}"));
    let services = &env.services;
    let taken = (|| -> Result<TaskSnapshot, OperatorError> {
        chain.prepare_snapshot_pre_barrier(id, &mut Context::new(output, services, 0))?;
        output.broadcast_barrier(barrier)?;
        let mut snapshot = TaskSnapshot::new();
        if let Some(bytes) = source_state(id)? {
            snapshot.put(TaskSnapshot::SOURCE, bytes);
        }
        chain.snapshot_chain(id, 0, &mut snapshot)?;
        Ok(snapshot)
    })();
    finish_checkpoint(env, id, started, taken)
}

/// Acknowledges (or declines and fails) a snapshot.
pub(crate) fn finish_checkpoint(
    env: &mut TaskEnv,
    id: u64,
    started: Instant,
    taken: Result<TaskSnapshot, OperatorError>,
) -> Result<(), TaskFailure> {
    match taken {
        Ok(snapshot) => {
            env.metrics.checkpoint_duration.record(started.elapsed());
            env.metrics.checkpoints.inc();
            env.responder.acknowledge(id, snapshot);
            Ok(())
        }
        Err(error) => {
            let message = error.to_string();
            env.responder
                .decline(id, DeclineReason::Failed(message.clone()));
            Err(env.failure(TaskError::Checkpoint {
                checkpoint: id,
                message,
            }))
        }
    }
}
