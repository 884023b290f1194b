//! The async head as the operator chain a legacy task's lock owns: core's engine, then the
//! operators chained behind it. Private, so nothing can chain it behind another operator.

use std::fmt;
use std::sync::Arc as StdArc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::async_io::AsyncWaitEngine;
use streamtask_core::function::{AsyncFunction, Completion, CompletionSink};
use streamtask_core::operator::{ChainOutput, Context, Operator, OperatorEvent};
use streamtask_core::{OperatorError, StreamRecord, StreamStatus, TaskSnapshot, Timer, Watermark};

/// The completions the emitter thread hands to the head in one lock acquisition.
pub(super) type CompletionBatch<O> = Vec<Completion<O>>;

/// Runs `$body` with the engine and a context (index `base`) whose output feeds the rest.
macro_rules! with_engine {
    ($self:ident, $ctx:ident, |$engine:ident, $ectx:ident| $body:expr) => {{
        let base = $ctx.operator_index();
        let (out, services, _) = $ctx.reborrow().into_parts();
        let mut chain_out = ChainOutput::new(&mut $self.rest, out, services, base + 1);
        let mut $ectx = Context::new(&mut chain_out, services, base);
        let $engine = &mut $self.engine;
        $body
    }};
}

/// Runs `$body` with the rest of the chain and its context (index `base + 1`).
macro_rules! with_rest {
    ($self:ident, $ctx:ident, |$rest:ident, $rctx:ident| $body:expr) => {{
        let base = $ctx.operator_index();
        let (out, services, _) = $ctx.reborrow().into_parts();
        let mut $rctx = Context::new(out, services, base + 1);
        let $rest = &mut $self.rest;
        $body
    }};
}

/// The head operator (index 0) and the chain behind it (index 1 on).
///
/// Its [`accepts_input`](Operator::accepts_input) is what the legacy task waits for on the
/// lock's condition, after an element entered: no element is held for room (and, after
/// `end_input`, everything was emitted). `end_input` only starts the drain; `finish` ends the
/// rest of the chain (`end_input`, then `finish`) once the task saw the drain complete, so the
/// operators behind the head get their `end_input` after the last result (FLINK-13491).
pub(super) struct AsyncHeadOperator<F: AsyncFunction, C> {
    engine: AsyncWaitEngine<F>,
    rest: C,
    sink: StdArc<dyn CompletionSink<F::Out>>,
    ending: bool,
}

impl<F, C> AsyncHeadOperator<F, C>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
    C: Operator<In = F::Out>,
{
    pub(super) fn new(
        engine: AsyncWaitEngine<F>,
        rest: C,
        sink: StdArc<dyn CompletionSink<F::Out>>,
    ) -> Self {
        AsyncHeadOperator {
            engine,
            rest,
            sink,
            ending: false,
        }
    }
}

impl<F, C> Operator for AsyncHeadOperator<F, C>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
    C: Operator<In = F::Out>,
{
    type In = F::In;
    type Out = C::Out;

    fn name(&self) -> &str {
        self.engine.name()
    }

    fn open(&mut self, ctx: &mut Context<'_, C::Out>) -> Result<(), OperatorError> {
        // Tail first: the head emits restored watermarks from `open`.
        with_rest!(self, ctx, |rest, rctx| rest.open(&mut rctx))?;
        let sink = StdArc::clone(&self.sink);
        with_engine!(self, ctx, |engine, ectx| engine.open(sink, &mut ectx))
    }

    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<F::In>,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        with_engine!(self, ctx, |engine, ectx| engine
            .process_element(record, &mut ectx))
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        with_engine!(self, ctx, |engine, ectx| engine
            .process_watermark(watermark, &mut ectx))
    }

    fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        // Not queued (as in Flink 1.9, where the task, not the operator, kept the status).
        with_rest!(self, ctx, |rest, rctx| rest
            .process_status(status, &mut rctx))
    }

    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        let Ok(batch) = event.downcast::<CompletionBatch<F::Out>>() else {
            return Err(OperatorError::UnexpectedEvent {
                operator: self.engine.name().to_string(),
            });
        };
        with_engine!(self, ctx, |engine, ectx| {
            for completion in *batch {
                engine.on_completion(completion, &mut ectx)?;
            }
            engine.emit_ready(&mut ectx)
        })
    }

    #[inline]
    fn accepts_input(&self) -> bool {
        if self.ending {
            self.engine.is_drained()
        } else {
            !self.engine.has_held()
        }
    }

    fn waits_for_own_events(&self) -> bool {
        true
    }

    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        with_rest!(self, ctx, |rest, rctx| rest
            .prepare_snapshot_pre_barrier(checkpoint_id, &mut rctx))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.rest.notify_checkpoint_complete(checkpoint_id)
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.rest.notify_checkpoint_aborted(checkpoint_id)
    }

    fn end_input(&mut self, ctx: &mut Context<'_, C::Out>) -> Result<(), OperatorError> {
        self.ending = true;
        with_engine!(self, ctx, |engine, ectx| engine.end_input(&mut ectx))
    }

    fn finish(&mut self, ctx: &mut Context<'_, C::Out>) -> Result<(), OperatorError> {
        with_rest!(self, ctx, |rest, rctx| {
            rest.end_input(&mut rctx)?;
            rest.finish(&mut rctx)
        })
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        // Close both even if the function's close fails; report the first error.
        let head = self.engine.close();
        let rest = self.rest.close();
        head.and(rest)
    }

    fn chain_len(&self) -> usize {
        1 + self.rest.chain_len()
    }

    fn dispatch_timer(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        if timer.operator == ctx.operator_index() {
            with_engine!(self, ctx, |engine, ectx| engine.on_timer(timer, &mut ectx))
        } else {
            with_rest!(self, ctx, |rest, rctx| rest
                .dispatch_timer(timer, &mut rctx))
        }
    }

    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
        ctx: &mut Context<'_, C::Out>,
    ) -> Result<(), OperatorError> {
        if operator == ctx.operator_index() {
            self.on_event(event, ctx)
        } else {
            with_rest!(self, ctx, |rest, rctx| rest
                .dispatch_event(operator, event, &mut rctx))
        }
    }

    fn restore_chain(
        &mut self,
        snapshot: Option<&TaskSnapshot>,
        base: usize,
    ) -> Result<(), OperatorError> {
        let bytes = snapshot.and_then(|s| s.get(&TaskSnapshot::operator_key(base)));
        self.engine.restore(bytes)?;
        self.rest.restore_chain(snapshot, base + 1)
    }

    fn snapshot_chain(
        &mut self,
        checkpoint_id: u64,
        base: usize,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        into.put(TaskSnapshot::operator_key(base), self.engine.snapshot()?);
        self.rest.snapshot_chain(checkpoint_id, base + 1, into)
    }

    fn chain_names(&self) -> Vec<String> {
        let mut names = vec![self.engine.name().to_string()];
        names.extend(self.rest.chain_names());
        names
    }
}

impl<F: AsyncFunction, C> fmt::Debug for AsyncHeadOperator<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncHeadOperator")
            .field("engine", &self.engine)
            .field("ending", &self.ending)
            .finish_non_exhaustive()
    }
}
