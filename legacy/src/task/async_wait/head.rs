//! The async head as an operator of the chain a legacy task's lock owns: core's engine, fed by
//! the task thread, the emitter thread and the timer thread, each holding the lock. Private, so
//! nothing can chain it behind another operator; the operators that follow it are chained
//! behind it with core's `Chain`.

use std::fmt;
use std::sync::Arc as StdArc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::async_io::AsyncWaitEngine;
use streamtask_core::function::{AsyncFunction, Completion, CompletionSink};
use streamtask_core::operator::{Context, Operator};
use streamtask_core::{OperatorError, StreamRecord, Timer, Watermark};

/// The head operator (index 0).
///
/// Its [`accepts_input`](Operator::accepts_input) is what the legacy task waits for on the
/// lock's condition before an element enters: no element is held for room; once its input
/// ended, everything was emitted (so the operators behind it end their input only after its
/// last result reached them, FLINK-13491).
///
/// Completions reach it as typed calls from the emitter thread
/// ([`on_completions`](Self::on_completions)), not as erased events: the emitter knows the
/// task's concrete body type.
pub(super) struct AsyncHeadOperator<F: AsyncFunction> {
    engine: AsyncWaitEngine<F>,
    sink: StdArc<dyn CompletionSink<F::Out>>,
    draining: bool,
}

impl<F> AsyncHeadOperator<F>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
{
    pub(super) fn new(
        engine: AsyncWaitEngine<F>,
        sink: StdArc<dyn CompletionSink<F::Out>>,
    ) -> Self {
        AsyncHeadOperator {
            engine,
            sink,
            draining: false,
        }
    }

    /// Applies the completions the emitter took from its channel, in one critical section,
    /// then emits what is ready (admitting held elements as slots free up).
    pub(super) fn on_completions(
        &mut self,
        completions: Vec<Completion<F::Out>>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        for completion in completions {
            self.engine.on_completion(completion, ctx)?;
        }
        self.engine.emit_ready(ctx)
    }
}

impl<F> Operator for AsyncHeadOperator<F>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
{
    type In = F::In;
    type Out = F::Out;

    fn name(&self) -> &str {
        self.engine.name()
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        self.engine.restore(restored)
    }

    fn open(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        self.engine.open(StdArc::clone(&self.sink), ctx)
    }

    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<F::In>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.engine.process_element(record, ctx)
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.engine.process_watermark(watermark, ctx)
    }

    fn on_processing_time(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.engine.on_timer(timer, ctx)
    }

    /// The task's input ended: run due retries now and drain; `accepts_input` stays false
    /// until everything was emitted.
    fn end_input(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        self.draining = true;
        self.engine.end_input(ctx)
    }

    #[inline]
    fn accepts_input(&self) -> bool {
        if self.draining {
            self.engine.is_drained()
        } else {
            !self.engine.has_held()
        }
    }

    fn waits_for_own_events(&self) -> bool {
        true
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        self.engine.snapshot().map(Some)
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.engine.close()
    }
}

impl<F: AsyncFunction> fmt::Debug for AsyncHeadOperator<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncHeadOperator")
            .field("engine", &self.engine)
            .field("draining", &self.draining)
            .finish_non_exhaustive()
    }
}
