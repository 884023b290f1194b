#![doc = include_str!("async_wait.md")]

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::async_io::{AsyncConfig, AsyncConfigError, AsyncWaitEngine};
use streamtask_core::function::{AsyncFunction, Completion, CompletionSink};
use streamtask_core::operator::{Context, EventSender, Operator, OperatorEvent};
use streamtask_core::{OperatorError, StreamRecord, Timer, Watermark};

/// Async I/O for the mailbox model; the protocol is described below.
///
/// The output timestamp is the input's; results leave in input order
/// ([`OutputMode::Ordered`](streamtask_core::async_io::OutputMode::Ordered)) or as they
/// complete, never across a watermark (`Unordered`). Each completion mail emits every element
/// that became ready (Flink emits one per mail and enqueues another mail for the rest).
///
#[doc = include_str!("async_wait.md")]
pub struct AsyncWaitOperator<F: AsyncFunction> {
    engine: AsyncWaitEngine<F>,
}

impl<F> AsyncWaitOperator<F>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
{
    /// An operator named `name` running `function` as `config` says.
    ///
    /// # Errors
    ///
    /// [`AsyncConfigError`] for a capacity of 0, a zero timeout, or retries without a timeout.
    pub fn new(
        name: impl Into<String>,
        function: F,
        config: AsyncConfig<F::Out>,
    ) -> Result<Self, AsyncConfigError> {
        Ok(AsyncWaitOperator {
            engine: AsyncWaitEngine::new(name, function, config)?,
        })
    }

    /// The shared engine (for inspection).
    pub fn engine(&self) -> &AsyncWaitEngine<F> {
        &self.engine
    }
}

impl<F> Operator for AsyncWaitOperator<F>
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
        let sink: Arc<dyn CompletionSink<F::Out>> = Arc::new(MailSink(ctx.event_sender()));
        self.engine.open(sink, ctx)
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
        match event.downcast::<Completion<F::Out>>() {
            Ok(completion) => {
                self.engine.on_completion(*completion, ctx)?;
                self.engine.emit_ready(ctx)
            }
            Err(_) => Err(OperatorError::UnexpectedEvent {
                operator: self.engine.name().to_string(),
            }),
        }
    }

    #[inline]
    fn accepts_input(&self) -> bool {
        self.engine.accepts_input()
    }

    fn waits_for_own_events(&self) -> bool {
        true
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        self.engine.snapshot().map(Some)
    }

    fn end_input(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        self.engine.end_input(ctx)
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.engine.close()
    }
}

impl<F: AsyncFunction> fmt::Debug for AsyncWaitOperator<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncWaitOperator")
            .field("engine", &self.engine)
            .finish()
    }
}

/// Completions into the mailbox: each becomes an event mail at the operator's priority. A mail
/// refused by a closed mailbox is dropped (the task is over; FLINK-24846).
struct MailSink(EventSender);

impl<O: Send + 'static> CompletionSink<O> for MailSink {
    fn deliver(&self, completion: Completion<O>) {
        if self.0.send(completion).is_err() {
            log::debug!(
                "a completion for operator {} arrived after its task ended; dropped",
                self.0.operator()
            );
        }
    }
}
