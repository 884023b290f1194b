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
use streamtask_core::operator::{Context, Operator, OperatorEvent};
use streamtask_core::{OperatorError, StreamRecord, Timer, Watermark};

/// What reaches the head as an event, under the lock.
pub(super) enum HeadEvent<O> {
    /// The completions the emitter thread took from its channel, applied in one critical
    /// section.
    Completions(Vec<Completion<O>>),
    /// The task's input ended: run due retries now and drain. Sent by the task thread before it
    /// waits for the drain; the chain's own `end_input` (the head's does nothing more) and
    /// `finish` follow once the head accepts input again, so the operators behind it see every
    /// result before their `end_input` (FLINK-13491).
    Drain,
}

/// The head operator (index 0).
///
/// Its [`accepts_input`](Operator::accepts_input) is what the legacy task waits for on the
/// lock's condition after an element entered: no element is held for room; once draining,
/// everything was emitted.
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

    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let Ok(event) = event.downcast::<HeadEvent<F::Out>>() else {
            return Err(OperatorError::UnexpectedEvent {
                operator: self.engine.name().to_string(),
            });
        };
        match *event {
            HeadEvent::Completions(completions) => {
                for completion in completions {
                    self.engine.on_completion(completion, ctx)?;
                }
                self.engine.emit_ready(ctx)
            }
            HeadEvent::Drain => {
                self.draining = true;
                self.engine.end_input(ctx)
            }
        }
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
