//! [`AsyncWaitOperator`]: async I/O in the mailbox model (Flink 1.10+'s `AsyncWaitOperator`).
//!
//! The logic (queue, timeouts, retries, snapshot) is core's
//! [`AsyncWaitEngine`](streamtask_core::async_io::AsyncWaitEngine), shared with the legacy
//! model; this operator adds the mailbox's way of reaching it:
//!
//! | what | how |
//! |---|---|
//! | a completion | [`ResultFuture`](streamtask_core::function::ResultFuture) on any thread -> an event mail at the operator's priority -> `on_event` applies it and emits every element that became ready |
//! | a timeout, a retry | a timer mail at the operator's priority -> `on_processing_time` |
//! | a full queue | `accepts_input() == false`: the task suspends its default action (soft backpressure); checkpoint triggers and every other mail keep running, and each mail re-checks |
//! | end of input | `end_input` runs due retries at once; `accepts_input()` stays `false` until everything was emitted, so the task's drain step runs the completion mails before `finish` |
//! | an exceptional completion | the completion mail fails the task with [`OperatorError::Async`](streamtask_core::OperatorError::Async), naming the input |
//!
//! Everything runs on the task thread; no lock exists here.
//!
//! # Elements beyond the capacity
//!
//! Flink's operator, when full, yields to the mailbox from inside `processElement` until a
//! completion frees a slot. Here the operator cannot do that: a yield runs mails, and the mails
//! that free slots are this operator's own, which need `&mut self` while `process_element`
//! already holds it; Rust rejects the re-entrance, and rightly (Flink's own yield re-enters the
//! operator). So an element that finds the queue full is **held**, in order, in a list that is
//! part of the snapshot, and admitted as completions free slots, while `accepts_input` stops
//! the task from feeding more. The task checks `accepts_input` before each input, so records
//! from the input are never held; what can be held are several records emitted by an upstream
//! operator of the same chain for one input record (a `flat_map`), and restored elements beyond
//! the capacity (FLINK-7949).
//!
//! # Examples
//!
//! ```
//! use streamtask_core::async_io::{AsyncConfig, OutputMode};
//! use streamtask_core::channel::{InputGate, bounded};
//! use streamtask_core::function::{AsyncFunction, ResultFuture};
//! use streamtask_core::operator::Emitted;
//! use streamtask_core::task::TaskConfig;
//! use streamtask_core::{StreamElement, StreamRecord};
//! use streamtask_mailbox::{AsyncWaitOperator, OneInputTask};
//!
//! /// Completes with the input squared (a real client would complete from its I/O thread).
//! struct Square;
//! impl AsyncFunction for Square {
//!     type In = u64;
//!     type Out = u64;
//!     fn invoke(&mut self, input: &u64, result: ResultFuture<u64>) {
//!         result.complete(vec![input * input]);
//!     }
//! }
//!
//! let op = AsyncWaitOperator::new("square", Square, AsyncConfig::new(OutputMode::Ordered, 2)).unwrap();
//! let (tx, rx) = bounded(8).unwrap();
//! let task = OneInputTask::spawn(
//!     TaskConfig::new("square"),
//!     InputGate::new(vec![rx]).unwrap(),
//!     op,
//!     Vec::<Emitted<u64>>::new(),
//! );
//! for x in 1..=4 {
//!     tx.send(StreamElement::Record(StreamRecord::new(x))).unwrap();
//! }
//! tx.send(StreamElement::EndOfInput).unwrap();
//! assert!(task.join().is_finished());
//! ```

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::async_io::{AsyncConfig, AsyncConfigError, AsyncWaitEngine};
use streamtask_core::function::{AsyncFunction, Completion, CompletionSink};
use streamtask_core::operator::{Context, EventSender, Operator, OperatorEvent};
use streamtask_core::{OperatorError, StreamRecord, Timer, Watermark};

/// Async I/O for the mailbox model; see the [module docs](self).
///
/// The output timestamp is the input's; results leave in input order
/// ([`OutputMode::Ordered`](streamtask_core::async_io::OutputMode::Ordered)) or as they
/// complete, never across a watermark (`Unordered`). Each completion mail emits every element
/// that became ready (Flink emits one per mail and enqueues another mail for the rest).
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
