//! What the checkpoint lock owns in a bridge task, and what each mail does to it.
//!
//! The lock owns a legacy [`SourceCell`] whose backend is a [`ChainBody`]: the source's state,
//! the context's bookkeeping, and the operator chain with the task's output. The source thread
//! reaches the chain through the cell's [`SourceOutput`] methods (inside its locked sections);
//! the mailbox thread through the mails below, each run under the lock by the
//! [`CheckpointLockExecutor`](crate::CheckpointLockExecutor).
//!
//! # Phases (changed only under the lock)
//!
//! | phase | triggers | notices | events | moves to |
//! |---|---|---|---|---|
//! | `Opening` | declined | delivered | delivered | `Running` (restored and opened) |
//! | `Running` | snapshot | delivered | delivered | `InputEnded` (the source ended its input) |
//! | `InputEnded` | declined | delivered | delivered | `Finished` (the task thread finished the chain) |
//! | `Finished` | declined | delivered | dropped | `Closed` |
//! | `Closed` | declined | dropped (FLINK-16383) | dropped | - |
//!
//! Any phase but `Closed` may also move to `Closed` directly (cancellation, failure).

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Instant;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{Context, OperatorEvent, Output, TaskOutput, TaskServices};
use streamtask_core::task::{CheckpointResponder, DeclineReason, TaskError, TaskFailure};
use streamtask_core::trace::{RecordRun, Tracer};
use streamtask_core::{
    CheckpointBarrier, Operator, OperatorError, StreamRecord, StreamStatus, TaskSnapshot, Timer,
    Watermark,
};
use streamtask_legacy::{
    CONTEXT_TIMER_OPERATOR, CancellationToken, SourceCell, SourceOutput, restore_source_state,
};
use streamtask_mailbox::OperatorMails;

/// Records counted in plain integers before they are added to the task's metrics.
const PUBLISH_EVERY: u64 = 1024;

/// A failure that ends the mailbox loop. A type of this crate, so that the crate may implement
/// the mailbox's [`OperatorMails`] for legacy's [`SourceCell`] (the orphan rule wants one local
/// type in the impl).
pub(crate) struct MailFailure(pub(crate) TaskFailure);

impl fmt::Debug for MailFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Restoring and opening the chain.
    Opening,
    /// The source runs; triggers snapshot.
    Running,
    /// The source emitted `Watermark::MAX` and ended the chain's input.
    InputEnded,
    /// The chain finished and the output ended.
    Finished,
    /// The chain is closed; nothing reaches it any more.
    Closed,
}

/// The task's output, counting records in a plain integer.
struct Counted<W> {
    inner: W,
    records: u64,
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

/// What the body keeps besides the chain and output.
pub(crate) struct BodyEnv {
    pub(crate) name: String,
    pub(crate) source_name: String,
    pub(crate) metrics: StdArc<TaskMetrics>,
    pub(crate) tracer: Tracer,
    pub(crate) responder: CheckpointResponder,
    pub(crate) cancel: CancellationToken,
    pub(crate) phase: Phase,
    records_in: u64,
    run: RecordRun,
}

impl BodyEnv {
    pub(crate) fn new(
        name: String,
        source_name: String,
        metrics: StdArc<TaskMetrics>,
        tracer: Tracer,
        responder: CheckpointResponder,
        cancel: CancellationToken,
    ) -> Self {
        BodyEnv {
            name,
            source_name,
            metrics,
            tracer,
            responder,
            cancel,
            phase: Phase::Opening,
            records_in: 0,
            run: RecordRun::new(),
        }
    }

    fn failure(&self, error: impl Into<TaskError>) -> MailFailure {
        MailFailure(TaskFailure::new(self.name.clone(), error))
    }
}

/// The operator chain and the task's output: the backend the legacy source emits into, under
/// the checkpoint lock.
pub(crate) struct ChainBody<C, W> {
    chain: C,
    output: Counted<W>,
    services: TaskServices,
    pub(crate) env: BodyEnv,
}

/// What the checkpoint lock owns: the source's state and context, then the chain.
pub(crate) type BridgeCell<S, C, W> = SourceCell<S, ChainBody<C, W>>;

/// Splits a body into its chain and a context over its output (operator index 0).
macro_rules! ctx {
    ($body:expr) => {{
        let body = &mut *$body;
        (
            &mut body.chain,
            Context::new(&mut body.output, &body.services, 0),
        )
    }};
}

impl<C, W> ChainBody<C, W>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    pub(crate) fn new(chain: C, output: W, services: TaskServices, env: BodyEnv) -> Self {
        ChainBody {
            chain,
            output: Counted {
                inner: output,
                records: 0,
            },
            services,
            env,
        }
    }

    /// Adds the locally counted records to the task's metrics.
    pub(crate) fn publish_metrics(&mut self) {
        let records_in = std::mem::take(&mut self.env.records_in);
        if records_in > 0 {
            self.env.metrics.records_in.add(records_in);
        }
        let records_out = std::mem::take(&mut self.output.records);
        if records_out > 0 {
            self.env.metrics.records_out.add(records_out);
        }
    }

    fn interrupt_run(&mut self) {
        self.env.run.interrupt(&self.env.tracer);
    }

    /// End of input, second half (the source's thread did the first: `Watermark::MAX` and
    /// `end_input`): `finish` head to tail. Only in `InputEnded`.
    pub(crate) fn finish_chain(&mut self) -> Result<(), OperatorError> {
        debug_assert_eq!(self.env.phase, Phase::InputEnded);
        self.interrupt_run();
        let (chain, mut ctx) = ctx!(self);
        chain.finish(&mut ctx)
    }

    /// Tells downstream that nothing follows; the chain is `Finished`.
    pub(crate) fn end_output(&mut self) -> Result<(), OperatorError> {
        self.env.phase = Phase::Finished;
        self.publish_metrics();
        self.output.inner.end_of_input()
    }
}

impl<C, W> Output<C::In> for ChainBody<C, W>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    #[inline]
    fn collect(&mut self, record: StreamRecord<C::In>) -> Result<(), OperatorError> {
        self.env.records_in += 1;
        self.env.run.record(&self.env.tracer);
        if self.env.records_in >= PUBLISH_EVERY {
            self.publish_metrics();
        }
        let (chain, mut ctx) = ctx!(self);
        chain.process_element(record, &mut ctx)
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.interrupt_run();
        let (chain, mut ctx) = ctx!(self);
        chain.process_watermark(watermark, &mut ctx)
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        let (chain, mut ctx) = ctx!(self);
        chain.process_status(status, &mut ctx)
    }
}

/// The bridge's backend: the source's emits go through the chain, on the source's thread.
impl<C, W> SourceOutput<C::In> for ChainBody<C, W>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    fn end_input(&mut self) -> Result<(), OperatorError> {
        self.interrupt_run();
        self.env.phase = Phase::InputEnded;
        let (chain, mut ctx) = ctx!(self);
        chain.end_input(&mut ctx)
    }

    #[inline]
    fn has_capacity(&self) -> bool {
        // Always true in practice: the chaining rule keeps operators that stop accepting input
        // (async ones) out of bridge chains.
        self.chain.accepts_input()
    }
}

/// Restores the source state and the chain from `restore`, then opens the chain (tail first);
/// the body is `Running` afterwards. On the task thread, under the lock.
pub(crate) fn open<S, C, W>(
    cell: &mut BridgeCell<S, C, W>,
    restore: Option<&TaskSnapshot>,
) -> Result<(), TaskError>
where
    S: DeserializeOwned + Default,
    C: Operator,
    W: TaskOutput<C::Out>,
{
    let source_name = cell.output().env.source_name.clone();
    *cell.state_mut() =
        restore_source_state(restore).map_err(|e| OperatorError::state(source_name, e))?;
    let body = cell.output_mut();
    body.chain.restore_chain(restore, 0)?;
    let (chain, mut ctx) = ctx!(body);
    chain.open(&mut ctx)?;
    body.env.phase = Phase::Running;
    Ok(())
}

/// Closes the context and the chain once, logging errors: on every exit path, under the lock.
/// Afterwards nothing reaches the chain (checkpoint notices included, FLINK-16383).
pub(crate) fn close<S, C, W>(cell: &mut BridgeCell<S, C, W>)
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    if cell.output().env.phase == Phase::Closed {
        return;
    }
    cell.close_context();
    let body = cell.output_mut();
    body.interrupt_run();
    body.env.phase = Phase::Closed;
    body.publish_metrics();
    match streamtask_core::catch_panic(|| body.chain.close()) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::warn!("{}: closing the chain failed: {e}", body.env.name),
        Err(panic) => log::warn!("{}: closing the chain panicked: {panic}", body.env.name),
    }
}

/// A checkpoint trigger on its way to the mailbox thread. Dropped without running (the
/// mailbox refused it, or closed before it ran, or the task is not running when it runs) it
/// declines the checkpoint, so the coordinator always hears back.
pub(crate) struct PendingTrigger {
    barrier: CheckpointBarrier,
    requested: Instant,
    responder: CheckpointResponder,
    armed: bool,
}

impl PendingTrigger {
    pub(crate) fn new(barrier: CheckpointBarrier, responder: CheckpointResponder) -> Self {
        PendingTrigger {
            barrier,
            requested: Instant::now(),
            responder,
            armed: true,
        }
    }

    fn disarm(mut self) -> (CheckpointBarrier, Instant) {
        self.armed = false;
        (self.barrier, self.requested)
    }
}

impl Drop for PendingTrigger {
    fn drop(&mut self) {
        if self.armed {
            self.responder
                .decline(self.barrier.id, DeclineReason::NotRunning);
        }
    }
}

/// The checkpoint trigger mail, under the lock: so the source is between two locked sections
/// and its state agrees with what it emitted. Flink's order: prepare the chain, broadcast the
/// barrier, snapshot the source state and the chain, acknowledge.
pub(crate) fn trigger_checkpoint<S, C, W>(
    cell: &mut BridgeCell<S, C, W>,
    trigger: PendingTrigger,
) -> Result<(), MailFailure>
where
    S: Serialize,
    C: Operator,
    W: TaskOutput<C::Out>,
{
    {
        let env = &cell.output().env;
        if env.phase != Phase::Running || env.cancel.is_cancelled() {
            return Ok(()); // `trigger` declines as it drops
        }
    }
    let (barrier, requested) = trigger.disarm();
    let id = barrier.id;
    let started = Instant::now();
    let body = cell.output_mut();
    body.env
        .metrics
        .checkpoint_delay
        .record(started.saturating_duration_since(requested));
    let span = body
        .env
        .tracer
        .span("checkpoint", || format!("checkpoint {id}"));
    body.interrupt_run();
    let taken = snapshot(cell, barrier);
    drop(span);
    let body = cell.output_mut();
    body.publish_metrics();
    match taken {
        Ok(snapshot) => {
            body.env
                .metrics
                .checkpoint_duration
                .record(started.elapsed());
            body.env.metrics.checkpoints.inc();
            body.env.responder.acknowledge(id, snapshot);
            Ok(())
        }
        Err(error) => {
            let message = error.to_string();
            body.env
                .responder
                .decline(id, DeclineReason::Failed(message.clone()));
            Err(body.env.failure(TaskError::Checkpoint {
                checkpoint: id,
                message,
            }))
        }
    }
}

fn snapshot<S, C, W>(
    cell: &mut BridgeCell<S, C, W>,
    barrier: CheckpointBarrier,
) -> Result<TaskSnapshot, OperatorError>
where
    S: Serialize,
    C: Operator,
    W: TaskOutput<C::Out>,
{
    {
        let body = cell.output_mut();
        let (chain, mut ctx) = ctx!(body);
        chain.prepare_snapshot_pre_barrier(barrier.id, &mut ctx)?;
        body.output.inner.broadcast_barrier(barrier)?;
    }
    let mut snapshot = TaskSnapshot::new();
    cell.snapshot_state(&mut snapshot)
        .map_err(|e| OperatorError::state(cell.output().env.source_name.clone(), e))?;
    cell.output_mut()
        .chain
        .snapshot_chain(barrier.id, 0, &mut snapshot)?;
    Ok(snapshot)
}

/// A checkpoint-complete (`completed`) or -aborted notice, under the lock; never delivered to a
/// closed chain (FLINK-16383).
pub(crate) fn notify<S, C, W>(
    cell: &mut BridgeCell<S, C, W>,
    id: u64,
    completed: bool,
) -> Result<(), MailFailure>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    let body = cell.output_mut();
    if body.env.phase == Phase::Closed {
        return Ok(());
    }
    body.interrupt_run();
    let notified = if completed {
        body.chain.notify_checkpoint_complete(id)
    } else {
        body.chain.notify_checkpoint_aborted(id)
    };
    notified.map_err(|e| body.env.failure(e))
}

/// Timers and events of the chain, as mails under the lock. Context timers (automatic
/// watermarks, idleness checks) go to the source's context.
impl<S, C, W> OperatorMails<MailFailure> for BridgeCell<S, C, W>
where
    S: Send + 'static,
    C: Operator + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    fn on_timer(&mut self, timer: Timer) -> Result<(), MailFailure> {
        if self.output().env.phase == Phase::Closed {
            return Ok(());
        }
        self.output_mut().interrupt_run();
        let fired = if timer.operator == CONTEXT_TIMER_OPERATOR {
            self.on_context_timer::<C::In>(timer)
        } else {
            let body = self.output_mut();
            let (chain, mut ctx) = ctx!(body);
            chain.dispatch_timer(timer, &mut ctx)
        };
        fired.map_err(|e| self.output().env.failure(e))
    }

    fn on_event(&mut self, operator: usize, event: OperatorEvent) -> Result<(), MailFailure> {
        let body = self.output_mut();
        if matches!(body.env.phase, Phase::Finished | Phase::Closed) {
            log::debug!(
                "{}: event for operator {operator} after the chain finished dropped",
                body.env.name
            );
            return Ok(());
        }
        body.interrupt_run();
        let (chain, mut ctx) = ctx!(body);
        chain
            .dispatch_event(operator, event, &mut ctx)
            .map_err(|e| body.env.failure(e))
    }
}

impl<C, W> fmt::Debug for ChainBody<C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainBody")
            .field("task", &self.env.name)
            .field("phase", &self.env.phase)
            .finish_non_exhaustive()
    }
}
