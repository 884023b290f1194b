//! What the checkpoint lock owns in each kind of task (its "body"), and the operations the
//! task's threads run on it under the lock.
//!
//! | task | body |
//! |---|---|
//! | `SourceStreamTask` | `SourceCell<S, ChainBody<C, O>>`: source state, context bookkeeping, chain, output |
//! | `OneInputStreamTask` | `ChainBody<C, O>`: chain, output |
//! | `TwoInputStreamTask` | `TwoInputBody<H, T, O>`: two-input chain, output |
//!
//! Records are counted in plain fields (the body is only touched under the lock) and published
//! to [`TaskMetrics`] every [`PUBLISH_EVERY`] records, at every checkpoint and at the end: no
//! atomic read-modify-write per record.

use std::sync::Arc as StdArc;

use serde::Serialize;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{
    Context, Operator, OperatorEvent, Output, TaskOutput, TaskServices, TwoInputChain,
    TwoInputOperator,
};
use streamtask_core::task::TaskError;
use streamtask_core::trace::{RecordRun, Tracer};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, TaskSnapshot, Timer, Watermark,
};

use crate::source::{CONTEXT_TIMER_OPERATOR, SourceCell, SourceOutput, restore_source_state};

/// Records counted locally before being added to the task's metrics.
pub(crate) const PUBLISH_EVERY: u64 = 1 << 10;

/// What every task's threads do to its body, holding the checkpoint lock.
pub(crate) trait TaskBody: Send + 'static {
    /// Restores the chain (and source state) from `snapshot` (`None`: fresh start).
    fn restore(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), TaskError>;
    /// Opens the chain, tail first.
    fn open(&mut self) -> Result<(), OperatorError>;
    /// Flink's `performCheckpoint`: prepare, broadcast the barrier, snapshot into `into`.
    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError>;
    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError>;
    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), OperatorError>;
    fn dispatch_timer(&mut self, timer: Timer) -> Result<(), OperatorError>;
    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
    ) -> Result<(), OperatorError>;
    /// Tells downstream that nothing follows.
    fn end_output(&mut self) -> Result<(), OperatorError>;
    /// Releases the chain's resources (every exit path).
    fn close(&mut self) -> Result<(), OperatorError>;
    /// Adds the locally counted records to the task's metrics.
    fn publish_metrics(&mut self);
}

/// A task output that counts the records going through it in a plain field.
pub(crate) struct CountingOutput<O> {
    inner: O,
    unpublished: u64,
}

impl<T, O: Output<T>> Output<T> for CountingOutput<O> {
    #[inline]
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.unpublished += 1;
        self.inner.collect(record)
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.inner.emit_watermark(watermark)
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.inner.emit_status(status)
    }
}

/// The per-task parts every body has besides its chain.
pub(crate) struct BodyParts<O> {
    output: CountingOutput<O>,
    services: TaskServices,
    metrics: StdArc<TaskMetrics>,
    tracer: Tracer,
    run: RecordRun,
    unpublished_in: u64,
}

impl<O> BodyParts<O> {
    pub(crate) fn new(
        output: O,
        services: TaskServices,
        metrics: StdArc<TaskMetrics>,
        tracer: Tracer,
    ) -> Self {
        BodyParts {
            output: CountingOutput {
                inner: output,
                unpublished: 0,
            },
            services,
            metrics,
            tracer,
            run: RecordRun::new(),
            unpublished_in: 0,
        }
    }

    #[inline]
    fn count_in(&mut self) {
        self.unpublished_in += 1;
        self.run.record(&self.tracer);
        if self.unpublished_in >= PUBLISH_EVERY {
            self.publish();
        }
    }

    fn publish(&mut self) {
        self.metrics
            .records_in
            .add(std::mem::take(&mut self.unpublished_in));
        self.metrics
            .records_out
            .add(std::mem::take(&mut self.output.unpublished));
    }

    /// Something other than a record runs now: end the current record-run span.
    fn interrupt(&mut self) {
        self.run.interrupt(&self.tracer);
    }
}

/// A one-input chain and the task output behind it.
pub(crate) struct ChainBody<C: Operator, O> {
    chain: C,
    parts: BodyParts<O>,
}

/// Splits a body into its chain and a context over its output (operator index 0).
macro_rules! ctx {
    ($body:expr) => {{
        let body = &mut *$body;
        (
            &mut body.chain,
            Context::new(&mut body.parts.output, &body.parts.services, 0),
        )
    }};
}

impl<C, O> ChainBody<C, O>
where
    C: Operator,
    O: TaskOutput<C::Out>,
{
    pub(crate) fn new(chain: C, parts: BodyParts<O>) -> Self {
        ChainBody { chain, parts }
    }

    /// One record through the chain.
    #[inline]
    pub(crate) fn process(&mut self, record: StreamRecord<C::In>) -> Result<(), OperatorError> {
        self.parts.count_in();
        let (chain, mut ctx) = ctx!(self);
        chain.process_element(record, &mut ctx)
    }

    pub(crate) fn process_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.parts.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.process_watermark(watermark, &mut ctx)
    }

    pub(crate) fn process_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        let (chain, mut ctx) = ctx!(self);
        chain.process_status(status, &mut ctx)
    }

    /// Whether the chain takes a record now (an async head with a full queue does not).
    #[inline]
    pub(crate) fn accepts_input(&self) -> bool {
        self.chain.accepts_input()
    }

    /// End of input: `end_input`, then `finish`, head to tail.
    pub(crate) fn end_input_and_finish(&mut self) -> Result<(), OperatorError> {
        self.parts.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.end_input(&mut ctx)?;
        chain.finish(&mut ctx)
    }

    fn end_input_only(&mut self) -> Result<(), OperatorError> {
        self.parts.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.end_input(&mut ctx)
    }

    /// `finish` after the source's `end_input`.
    pub(crate) fn finish(&mut self) -> Result<(), OperatorError> {
        let (chain, mut ctx) = ctx!(self);
        chain.finish(&mut ctx)
    }

    /// Prepare and broadcast: the part of a checkpoint before the state snapshot.
    fn prepare_and_broadcast(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        self.parts.interrupt();
        {
            let (chain, mut ctx) = ctx!(self);
            chain.prepare_snapshot_pre_barrier(barrier.id, &mut ctx)?;
        }
        self.parts.output.inner.broadcast_barrier(barrier)
    }
}

impl<C, O> Output<C::In> for ChainBody<C, O>
where
    C: Operator,
    O: TaskOutput<C::Out>,
{
    #[inline]
    fn collect(&mut self, record: StreamRecord<C::In>) -> Result<(), OperatorError> {
        self.process(record)
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.process_watermark(watermark)
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.process_status(status)
    }
}

/// The source task's backend: a source's emits go through the chain.
impl<C, O> SourceOutput<C::In> for ChainBody<C, O>
where
    C: Operator,
    O: TaskOutput<C::Out>,
{
    fn end_input(&mut self) -> Result<(), OperatorError> {
        self.end_input_only()
    }

    #[inline]
    fn has_capacity(&self) -> bool {
        self.accepts_input()
    }
}

impl<C, O> TaskBody for ChainBody<C, O>
where
    C: Operator + 'static,
    O: TaskOutput<C::Out> + 'static,
{
    fn restore(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), TaskError> {
        Ok(self.chain.restore_chain(snapshot, 0)?)
    }

    fn open(&mut self) -> Result<(), OperatorError> {
        let (chain, mut ctx) = ctx!(self);
        chain.open(&mut ctx)
    }

    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        self.prepare_and_broadcast(barrier)?;
        self.chain.snapshot_chain(barrier.id, 0, into)?;
        self.parts.publish();
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.chain.notify_checkpoint_complete(id)
    }

    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), OperatorError> {
        self.chain.notify_checkpoint_aborted(id)
    }

    fn dispatch_timer(&mut self, timer: Timer) -> Result<(), OperatorError> {
        self.parts.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.dispatch_timer(timer, &mut ctx)
    }

    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
    ) -> Result<(), OperatorError> {
        self.parts.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.dispatch_event(operator, event, &mut ctx)
    }

    fn end_output(&mut self) -> Result<(), OperatorError> {
        self.parts.output.inner.end_of_input()
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.parts.interrupt();
        self.chain.close()
    }

    fn publish_metrics(&mut self) {
        self.parts.publish();
    }
}

/// The source task's body: the source's state and context bookkeeping, then the chain.
impl<S, C, O> TaskBody for SourceCell<S, ChainBody<C, O>>
where
    S: Serialize + serde::de::DeserializeOwned + Default + Send + 'static,
    C: Operator + 'static,
    O: TaskOutput<C::Out> + 'static,
{
    fn restore(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), TaskError> {
        *self.state_mut() =
            restore_source_state(snapshot).map_err(|e| OperatorError::state("source", e))?;
        self.output_mut().restore(snapshot)
    }

    fn open(&mut self) -> Result<(), OperatorError> {
        self.output_mut().open()
    }

    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        self.output_mut().prepare_and_broadcast(barrier)?;
        self.snapshot_state(into)
            .map_err(|e| OperatorError::state("source", e))?;
        let body = self.output_mut();
        body.chain.snapshot_chain(barrier.id, 0, into)?;
        body.parts.publish();
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.output_mut().notify_checkpoint_complete(id)
    }

    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), OperatorError> {
        self.output_mut().notify_checkpoint_aborted(id)
    }

    fn dispatch_timer(&mut self, timer: Timer) -> Result<(), OperatorError> {
        if timer.operator == CONTEXT_TIMER_OPERATOR {
            self.on_context_timer::<C::In>(timer)
        } else {
            self.output_mut().dispatch_timer(timer)
        }
    }

    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
    ) -> Result<(), OperatorError> {
        self.output_mut().dispatch_event(operator, event)
    }

    fn end_output(&mut self) -> Result<(), OperatorError> {
        self.output_mut().end_output()
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.close_context();
        self.output_mut().close()
    }

    fn publish_metrics(&mut self) {
        self.output_mut().publish_metrics();
    }
}

/// A two-input chain and the task output behind it.
pub(crate) struct TwoInputBody<H: TwoInputOperator, T: Operator<In = H::Out>, O> {
    chain: TwoInputChain<H, T>,
    parts: BodyParts<O>,
}

impl<H, T, O> TwoInputBody<H, T, O>
where
    H: TwoInputOperator,
    T: Operator<In = H::Out>,
    O: TaskOutput<T::Out>,
{
    pub(crate) fn new(chain: TwoInputChain<H, T>, parts: BodyParts<O>) -> Self {
        TwoInputBody { chain, parts }
    }

    #[inline]
    pub(crate) fn process1(&mut self, record: StreamRecord<H::In1>) -> Result<(), OperatorError> {
        self.parts.count_in();
        let (chain, mut ctx) = ctx!(self);
        chain.process_element1(record, &mut ctx)
    }

    #[inline]
    pub(crate) fn process2(&mut self, record: StreamRecord<H::In2>) -> Result<(), OperatorError> {
        self.parts.count_in();
        let (chain, mut ctx) = ctx!(self);
        chain.process_element2(record, &mut ctx)
    }

    pub(crate) fn process_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.parts.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.process_watermark(watermark, &mut ctx)
    }

    pub(crate) fn process_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        let (chain, mut ctx) = ctx!(self);
        chain.process_status(status, &mut ctx)
    }

    #[inline]
    pub(crate) fn accepts_input(&self) -> bool {
        self.chain.accepts_input()
    }

    pub(crate) fn end_input(&mut self, input: u8) -> Result<(), OperatorError> {
        self.parts.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.end_input(input, &mut ctx)
    }

    pub(crate) fn end_of_both(&mut self) -> Result<(), OperatorError> {
        let (chain, mut ctx) = ctx!(self);
        chain.end_of_both(&mut ctx)
    }
}

impl<H, T, O> TaskBody for TwoInputBody<H, T, O>
where
    H: TwoInputOperator + 'static,
    T: Operator<In = H::Out> + 'static,
    O: TaskOutput<T::Out> + 'static,
{
    fn restore(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), TaskError> {
        Ok(self.chain.restore(snapshot)?)
    }

    fn open(&mut self) -> Result<(), OperatorError> {
        let (chain, mut ctx) = ctx!(self);
        chain.open(&mut ctx)
    }

    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        self.parts.interrupt();
        {
            let (chain, mut ctx) = ctx!(self);
            chain.prepare_snapshot_pre_barrier(barrier.id, &mut ctx)?;
        }
        self.parts.output.inner.broadcast_barrier(barrier)?;
        self.chain.snapshot(barrier.id, into)?;
        self.parts.publish();
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.chain.notify_checkpoint_complete(id)
    }

    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), OperatorError> {
        self.chain.notify_checkpoint_aborted(id)
    }

    fn dispatch_timer(&mut self, timer: Timer) -> Result<(), OperatorError> {
        self.parts.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.dispatch_timer(timer, &mut ctx)
    }

    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
    ) -> Result<(), OperatorError> {
        self.parts.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.dispatch_event(operator, event, &mut ctx)
    }

    fn end_output(&mut self) -> Result<(), OperatorError> {
        self.parts.output.inner.end_of_input()
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.parts.interrupt();
        self.chain.close()
    }

    fn publish_metrics(&mut self) {
        self.parts.publish();
    }
}
