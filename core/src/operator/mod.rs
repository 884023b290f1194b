//! Operators: the lifecycle every model drives, the [`Output`] they emit to, chaining, and the
//! ready-made operators.
//!
//! An operator is written once against this module and runs unchanged under the legacy, mailbox
//! and bridge models. It never sees a lock, a mailbox or a thread: the runtime that drives it
//! guarantees that at most one of its methods runs at a time, and hands it a [`Context`] to emit
//! records, read processing time, register timers and obtain an [`EventSender`] through which
//! other threads reach it.
//!
//! # Lifecycle
//!
//! ```text
//! initialize_state(restored) -> open -> { process_element | process_watermark | process_status
//!     | on_processing_time | on_event | prepare_snapshot_pre_barrier + snapshot_state
//!     | notify_checkpoint_complete | notify_checkpoint_aborted }*
//!   -> end_input -> finish -> close
//! ```
//!
//! A cancelled or failed task skips `end_input` and `finish` and only calls `close`.
//!
//! # Chains
//!
//! [`Chain`] joins two operators so the first one's output is the second one's input, with no
//! channel between them; chains nest, so a task's whole chain is one value whose type spells the
//! pipeline. Every operator in a chain has an index (0 = head); timers and events carry the index
//! of the operator they are for, and the chain routes them. A chain opens tail to head (an
//! operator may emit from `open`, so whatever it emits to must be open) and ends input, finishes
//! and closes head to tail.
//!
//! # Examples
//!
//! ```
//! use streamtask_core::operator::{Filter, Map, OperatorExt};
//! use streamtask_core::testing::OperatorHarness;
//!
//! let chain = Map::new("double", |x: i32| x * 2).then(Filter::new("big", |x: &i32| *x > 4));
//! let mut harness = OperatorHarness::new(chain);
//! harness.open().unwrap();
//! for x in 1..=4 {
//!     harness.process(x).unwrap();
//! }
//! assert_eq!(harness.output_values(), vec![6, 8]);
//! ```

mod basic;
mod chain;
mod firing;
mod keyed;
mod keyed_backend;
mod keyed_co;
mod process;
mod side_output;
mod task_chain;
mod two_input;
mod watermark;

use std::any::Any;
use std::fmt;

use crate::element::{CheckpointBarrier, StreamRecord, StreamStatus, Watermark};
use crate::error::OperatorError;
use crate::state::TaskSnapshot;
// std `Arc` on purpose: trait objects need unsized coercion, which loom's `Arc` lacks, and
// nothing here is a synchronization protocol loom should model.
use crate::time::{Period, Timer, TimerError, TimerHandle, TimerService};
use std::sync::Arc;

pub use self::basic::{Filter, FlatMap, Map};
pub use self::chain::{Chain, ChainOutput, OperatorExt};
pub use self::firing::{TimerFiring, Uninterruptible};
pub use self::keyed::KeyedProcessOperator;
pub use self::keyed_backend::{EndOfInputContext, KeyedContext};
pub use self::keyed_co::KeyedCoProcessOperator;
pub use self::process::{MapWithContext, RecordContext};
pub use self::side_output::{OutputTag, SideOutputTypeError, SideOutputs};
pub use self::task_chain::TaskChain;
pub use self::two_input::{CoFlatMap, CoMap, TwoInputChain, TwoInputOperator};
pub use self::watermark::{TimestampsAndWatermarks, WatermarkStrategy};

/// Where an operator's results go: the next operator of its chain, or the task's output.
pub trait Output<T> {
    /// Emits a record.
    ///
    /// # Errors
    ///
    /// Whatever the downstream operator fails with, or [`OperatorError::OutputClosed`].
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError>;

    /// Emits a watermark.
    ///
    /// # Errors
    ///
    /// As [`collect`](Self::collect).
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError>;

    /// Emits a change of stream status.
    ///
    /// # Errors
    ///
    /// As [`collect`](Self::collect).
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError>;
}

/// An [`Output`] impl that forwards every call to `**self` (for `&mut O` and `Box<W>`).
macro_rules! forward_output {
    () => {
        #[inline]
        fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
            (**self).collect(record)
        }
        fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
            (**self).emit_watermark(watermark)
        }
        fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
            (**self).emit_status(status)
        }
    };
}

/// A borrowed output is an output (as `std::io::Write` is for `&mut W`): a wrapper such as the
/// task kit's record counter can count into an output it does not own.
impl<T, O: Output<T> + ?Sized> Output<T> for &mut O {
    forward_output!();
}

/// The end of a task's chain: an [`Output`] that can also broadcast what is not a record.
///
/// Channel writers (`channel::RecordWriter`) implement it between tasks; [`Discard`] ends a chain
/// whose last operator is a sink; a `Vec<Emitted<T>>` keeps everything for tests.
pub trait TaskOutput<T>: Output<T> + Send {
    /// Sends a checkpoint barrier to every downstream channel.
    ///
    /// # Errors
    ///
    /// [`OperatorError::OutputClosed`] if downstream is gone.
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError>;

    /// Tells every downstream channel that nothing follows.
    ///
    /// # Errors
    ///
    /// [`OperatorError::OutputClosed`] if downstream is gone.
    fn end_of_input(&mut self) -> Result<(), OperatorError>;

    /// Whether a record can be emitted now without blocking (soft backpressure: the mailbox
    /// model stops feeding input while this is false). Outputs that never block return `true`.
    fn is_available(&self) -> bool {
        true
    }

    /// Asks to be woken through `waker` once [`is_available`](Self::is_available) may have
    /// become true. Outputs that never block may wake at once.
    ///
    /// A task calls it after `is_available` returned `false` and then suspends: an
    /// implementation must wake `waker` at once when it has room by the time of this call
    /// (room may free in between), or the task sleeps with nobody to wake it. A wrapper over
    /// several outputs registers on each full one and wakes at once when none is full.
    fn register_availability_waker(&self, waker: &std::task::Waker) {
        waker.wake_by_ref();
    }
}

/// A payload another thread sends to an operator (an async result, a client's callback).
pub type OperatorEvent = Box<dyn Any + Send>;

/// How a model delivers events to the operators of a task.
///
/// The mailbox model enqueues a mail at the operator's priority; the legacy model takes the
/// checkpoint lock and calls the operator, as a foreign thread did in Flink before 1.10.
pub trait EventSink: Send + Sync {
    /// Delivers `event` to the operator at index `operator` of the task's chain, now or later.
    ///
    /// # Errors
    ///
    /// Gives the event back when the task no longer accepts events (it finished, failed or was
    /// cancelled).
    fn send_event(&self, operator: usize, event: OperatorEvent) -> Result<(), OperatorEvent>;
}

/// An [`EventSink`] that refuses every event; for runtimes and tests without foreign threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn send_event(&self, _operator: usize, event: OperatorEvent) -> Result<(), OperatorEvent> {
        Err(event)
    }
}

/// An event could not be delivered; the event is handed back.
pub struct EventRejected(pub OperatorEvent);

impl EventRejected {
    /// The event that was not delivered.
    pub fn into_inner(self) -> OperatorEvent {
        self.0
    }
}

impl fmt::Debug for EventRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventRejected(..)")
    }
}

impl fmt::Display for EventRejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the task no longer accepts events (it finished, failed or was cancelled)")
    }
}

impl std::error::Error for EventRejected {}

/// A cloneable, `Send` handle through which any thread sends events to one operator; the
/// operator receives them in [`Operator::on_event`], on whatever thread the model runs it.
#[derive(Clone)]
pub struct EventSender {
    sink: Arc<dyn EventSink>,
    operator: usize,
}

impl EventSender {
    /// A sender to the operator at index `operator` through `sink`.
    pub fn new(sink: Arc<dyn EventSink>, operator: usize) -> Self {
        EventSender { sink, operator }
    }

    /// Sends `event` to the operator.
    ///
    /// # Errors
    ///
    /// [`EventRejected`] with the event when the task no longer accepts events.
    pub fn send<E: Any + Send>(&self, event: E) -> Result<(), EventRejected> {
        self.sink
            .send_event(self.operator, Box::new(event))
            .map_err(EventRejected)
    }

    /// The index of the operator this sender reaches.
    pub fn operator(&self) -> usize {
        self.operator
    }
}

impl fmt::Debug for EventSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSender")
            .field("operator", &self.operator)
            .finish()
    }
}

/// Which operator of a task's chain runs user code now, readable from other threads: a failure
/// or a thread stuck in user code is reported with the operator's name, not only the task's.
///
/// The chain's thread writes the index as a call enters an operator ([`ChainOutput`]) and
/// writes the caller's back when the call returns `Ok`; a call that fails or panics leaves the
/// index of the innermost operator it reached, and a call that never returns leaves the
/// operator it is stuck in. One relaxed store each way: the index is read only after the
/// task failed or was given up on, when nothing orders it with the operator's work anyway.
#[derive(Debug)]
pub struct RunningOperator {
    index: crate::sync::atomic::AtomicUsize,
    names: crate::sync::Mutex<Vec<String>>,
}

impl RunningOperator {
    const NONE: usize = usize::MAX;

    /// No operator runs yet; names unknown.
    pub fn new() -> Self {
        RunningOperator {
            index: crate::sync::atomic::AtomicUsize::new(Self::NONE),
            names: crate::sync::Mutex::new(Vec::new()),
        }
    }

    /// The operator at chain index `index` runs now.
    #[inline]
    pub fn enter(&self, index: usize) {
        self.index
            .store(index, crate::sync::atomic::Ordering::Relaxed);
    }

    /// No operator runs now (the task's own code does: its source, its teardown).
    #[inline]
    pub fn leave(&self) {
        self.enter(Self::NONE);
    }

    /// Sets the chain's operator names, head first (once the chain is built).
    pub fn set_names(&self, names: Vec<String>) {
        *self.names.lock() = names;
    }

    /// The name of the operator that ran last (see the type's docs), if one did.
    pub fn name(&self) -> Option<String> {
        let index = self.index.load(crate::sync::atomic::Ordering::Relaxed);
        self.names.lock().get(index).cloned()
    }
}

impl Default for RunningOperator {
    fn default() -> Self {
        RunningOperator::new()
    }
}

/// What a model's runtime offers the operators of one task: timers, event delivery, and how a
/// long firing of event-time timers may be interrupted.
#[derive(Clone)]
pub struct TaskServices {
    name: Arc<str>,
    timers: Arc<dyn TimerService>,
    events: Arc<dyn EventSink>,
    firing: Arc<dyn TimerFiring>,
    running: Arc<RunningOperator>,
    metrics: Option<Arc<crate::metrics::TaskMetrics>>,
}

impl TaskServices {
    /// Services of the task `name`; its firings of event-time timers are [`Uninterruptible`]
    /// unless [`with_firing`](Self::with_firing) says otherwise.
    pub fn new(name: &str, timers: Arc<dyn TimerService>, events: Arc<dyn EventSink>) -> Self {
        TaskServices {
            name: Arc::from(name),
            timers,
            events,
            firing: Arc::new(Uninterruptible),
            running: Arc::new(RunningOperator::new()),
            metrics: None,
        }
    }

    /// Gives operators the task's metrics, whose live state an operator with a queue shows
    /// its fill in (the async operator).
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::TaskMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The task's metrics, if the runtime gave them.
    pub fn metrics(&self) -> Option<&Arc<crate::metrics::TaskMetrics>> {
        self.metrics.as_ref()
    }

    /// Lets operators interrupt long firings of event-time timers through `firing`.
    pub fn with_firing(mut self, firing: Arc<dyn TimerFiring>) -> Self {
        self.firing = firing;
        self
    }

    /// How a long firing of event-time timers may be interrupted.
    pub fn firing(&self) -> &Arc<dyn TimerFiring> {
        &self.firing
    }

    /// Reports the running operator into `running` (shared with the task's handle).
    pub fn with_running(mut self, running: Arc<RunningOperator>) -> Self {
        self.running = running;
        self
    }

    /// Which operator of the chain runs now.
    #[inline]
    pub fn running(&self) -> &RunningOperator {
        &self.running
    }

    /// The task's name.
    pub fn task_name(&self) -> &str {
        &self.name
    }

    /// The task's timer service.
    pub fn timers(&self) -> &Arc<dyn TimerService> {
        &self.timers
    }

    /// The task's event sink.
    pub fn events(&self) -> &Arc<dyn EventSink> {
        &self.events
    }
}

impl fmt::Debug for TaskServices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskServices")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What an operator gets in every call that may emit: its output, its index in the chain, and
/// the task's services.
pub struct Context<'a, O> {
    output: &'a mut dyn Output<O>,
    services: &'a TaskServices,
    operator: usize,
}

impl<'a, O> Context<'a, O> {
    /// A context for the operator at index `operator`, emitting to `output`.
    pub fn new(output: &'a mut dyn Output<O>, services: &'a TaskServices, operator: usize) -> Self {
        Context {
            output,
            services,
            operator,
        }
    }

    /// Emits a record.
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    #[inline]
    pub fn collect(&mut self, record: StreamRecord<O>) -> Result<(), OperatorError> {
        self.output.collect(record)
    }

    /// Emits a watermark.
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    #[inline]
    pub fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.output.emit_watermark(watermark)
    }

    /// Emits a stream status change.
    ///
    /// # Errors
    ///
    /// Whatever downstream fails with.
    #[inline]
    pub fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.output.emit_status(status)
    }

    /// The output itself.
    pub fn output(&mut self) -> &mut dyn Output<O> {
        &mut *self.output
    }

    /// The current processing time in milliseconds.
    pub fn processing_time(&self) -> i64 {
        self.services.timers.current_processing_time()
    }

    /// Registers a processing-time timer for this operator; `tag` comes back in the [`Timer`]
    /// given to [`Operator::on_processing_time`].
    ///
    /// # Errors
    ///
    /// [`TimerError::ShutDown`] once the task is over.
    pub fn register_timer(&self, timestamp: i64, tag: u64) -> Result<TimerHandle, TimerError> {
        self.services.timers.register_timer(Timer {
            operator: self.operator,
            timestamp,
            tag,
        })
    }

    /// Registers a periodic processing-time timer for this operator: the first run once
    /// processing time has passed `first`, then as `period` says; every run reaches
    /// [`Operator::on_processing_time`] with `tag` and the run's scheduled timestamp.
    /// [`cancel_timer`](Self::cancel_timer) with the handle ends the series.
    ///
    /// # Errors
    ///
    /// [`TimerError::NonPositivePeriod`] for a period below 1 ms, [`TimerError::ShutDown`] once
    /// the task is over.
    pub fn register_periodic(
        &self,
        first: i64,
        period: Period,
        tag: u64,
    ) -> Result<TimerHandle, TimerError> {
        self.services.timers.register_periodic(
            Timer {
                operator: self.operator,
                timestamp: first,
                tag,
            },
            period,
        )
    }

    /// Cancels a timer registered earlier (every later run, for a periodic one).
    pub fn cancel_timer(&self, handle: TimerHandle) {
        self.services.timers.cancel_timer(handle);
    }

    /// A handle through which any thread can send events to this operator.
    pub fn event_sender(&self) -> EventSender {
        EventSender::new(Arc::clone(&self.services.events), self.operator)
    }

    /// This operator's index in its chain (0 = head).
    pub fn operator_index(&self) -> usize {
        self.operator
    }

    /// The name of the task running this operator.
    pub fn task_name(&self) -> &str {
        self.services.task_name()
    }

    /// The task's services.
    pub fn services(&self) -> &'a TaskServices {
        self.services
    }

    /// Splits the context into its parts, for operators that drive other operators.
    pub fn into_parts(self) -> (&'a mut dyn Output<O>, &'a TaskServices, usize) {
        (self.output, self.services, self.operator)
    }

    /// A shorter-lived context over the same parts.
    pub fn reborrow(&mut self) -> Context<'_, O> {
        Context {
            output: &mut *self.output,
            services: self.services,
            operator: self.operator,
        }
    }
}

impl<O> fmt::Debug for Context<'_, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("operator", &self.operator)
            .field("task", &self.services.task_name())
            .finish_non_exhaustive()
    }
}

/// A one-input stream operator.
///
/// Only [`name`](Self::name) and [`process_element`](Self::process_element) are required. The
/// methods under "chain plumbing" are implemented by [`Chain`]; a single operator keeps their
/// defaults.
pub trait Operator: Send {
    /// What it consumes.
    type In;
    /// What it emits.
    type Out;

    /// A short name for errors, metrics and traces.
    fn name(&self) -> &str;

    /// Restores state written by [`snapshot_state`](Self::snapshot_state); `None` on a fresh
    /// start. Called once, before [`open`](Self::open).
    ///
    /// # Errors
    ///
    /// Typically [`OperatorError::State`] when the bytes do not decode.
    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        let _ = restored;
        Ok(())
    }

    /// Prepares for processing; may register timers and emit.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn open(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
        let _ = ctx;
        Ok(())
    }

    /// Processes one record.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_element(
        &mut self,
        record: StreamRecord<Self::In>,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;

    /// Processes a watermark; the default forwards it.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        ctx.emit_watermark(watermark)
    }

    /// Processes a stream status change; the default forwards it.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        ctx.emit_status(status)
    }

    /// A processing-time timer this operator registered has fired.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn on_processing_time(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = (timer, ctx);
        Ok(())
    }

    /// An event sent through this operator's [`EventSender`] arrived.
    ///
    /// # Errors
    ///
    /// The default refuses with [`OperatorError::UnexpectedEvent`].
    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = (event, ctx);
        Err(OperatorError::UnexpectedEvent {
            operator: self.name().to_string(),
        })
    }

    /// Whether it can take another record now. An operator that returns `false` (a full async
    /// queue) makes the task stop feeding input until one of its events or timers frees room:
    /// soft backpressure, so checkpoints and timers keep flowing meanwhile.
    fn accepts_input(&self) -> bool {
        true
    }

    /// Whether the operator needs its own events or timers delivered to make progress (an async
    /// operator waiting for completions; Flink calls these "yielding" operators). The bridge
    /// model refuses to chain such an operator behind a legacy source, whose records arrive on
    /// the source's thread rather than the mailbox thread (FLINK-16219).
    fn waits_for_own_events(&self) -> bool {
        false
    }

    /// Called before the checkpoint barrier is forwarded; may emit (flush buffers).
    ///
    /// # Errors
    ///
    /// Any failure fails the checkpoint and the task.
    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = (checkpoint_id, ctx);
        Ok(())
    }

    /// Snapshots the operator's state for checkpoint `checkpoint_id`; `None` if it keeps none.
    ///
    /// # Errors
    ///
    /// Any failure fails the checkpoint and the task.
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        let _ = checkpoint_id;
        Ok(None)
    }

    /// Checkpoint `checkpoint_id` completed on every task (sinks commit here).
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        let _ = checkpoint_id;
        Ok(())
    }

    /// Checkpoint `checkpoint_id` was aborted.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        let _ = checkpoint_id;
        Ok(())
    }

    /// All input has been processed (not called on cancel). May emit; an async operator waits
    /// here for its in-flight elements.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn end_input(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
        let _ = ctx;
        Ok(())
    }

    /// Called after `end_input` of the whole chain upstream of it; the last chance to emit.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn finish(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
        let _ = ctx;
        Ok(())
    }

    /// Releases resources; called on every exit path, also after a failure.
    ///
    /// # Errors
    ///
    /// Reported, but the task's outcome is decided by what happened before.
    fn close(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }

    // ---- chain plumbing: `Chain` implements these; a single operator keeps the defaults ----

    /// Number of operators in this (sub)chain.
    fn chain_len(&self) -> usize {
        1
    }

    /// Delivers `timer` to the operator it names; `ctx.operator_index()` is this (sub)chain's
    /// first index.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    fn dispatch_timer(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        self.on_processing_time(timer, ctx)
    }

    /// Delivers `event` to the operator at index `operator`.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = operator;
        self.on_event(event, ctx)
    }

    /// Ends the input of only the operator at index `operator` (`ctx.operator_index()` is this
    /// (sub)chain's first index). A runtime that can run mails between two operators' ends calls
    /// it for every index, head to tail, letting each operator drain (an async operator waits
    /// for its in-flight calls) before the next one's input ends; [`end_input`](Self::end_input)
    /// on a chain ends them all in one go.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    fn end_input_at(
        &mut self,
        operator: usize,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = operator;
        self.end_input(ctx)
    }

    /// Restores every operator of the (sub)chain starting at index `base` from `snapshot`.
    ///
    /// # Errors
    ///
    /// Whatever an operator's `initialize_state` fails with.
    fn restore_chain(
        &mut self,
        snapshot: Option<&TaskSnapshot>,
        base: usize,
    ) -> Result<(), OperatorError> {
        let bytes = snapshot.and_then(|s| s.get(&TaskSnapshot::operator_key(base)));
        self.initialize_state(bytes)
    }

    /// Snapshots every operator of the (sub)chain starting at index `base` into `into`.
    ///
    /// # Errors
    ///
    /// Whatever an operator's `snapshot_state` fails with.
    fn snapshot_chain(
        &mut self,
        checkpoint_id: u64,
        base: usize,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        if let Some(bytes) = self.snapshot_state(checkpoint_id)? {
            into.put(TaskSnapshot::operator_key(base), bytes);
        }
        Ok(())
    }

    /// Names of the operators of the (sub)chain, head first.
    fn chain_names(&self) -> Vec<String> {
        vec![self.name().to_string()]
    }
}

macro_rules! forward_operator {
    () => {
        type In = O::In;
        type Out = O::Out;
        fn name(&self) -> &str {
            (**self).name()
        }
        fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
            (**self).initialize_state(restored)
        }
        fn open(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
            (**self).open(ctx)
        }
        fn process_element(
            &mut self,
            record: StreamRecord<Self::In>,
            ctx: &mut Context<'_, Self::Out>,
        ) -> Result<(), OperatorError> {
            (**self).process_element(record, ctx)
        }
        fn process_watermark(
            &mut self,
            watermark: Watermark,
            ctx: &mut Context<'_, Self::Out>,
        ) -> Result<(), OperatorError> {
            (**self).process_watermark(watermark, ctx)
        }
        fn process_status(
            &mut self,
            status: StreamStatus,
            ctx: &mut Context<'_, Self::Out>,
        ) -> Result<(), OperatorError> {
            (**self).process_status(status, ctx)
        }
        fn on_processing_time(
            &mut self,
            timer: Timer,
            ctx: &mut Context<'_, Self::Out>,
        ) -> Result<(), OperatorError> {
            (**self).on_processing_time(timer, ctx)
        }
        fn on_event(
            &mut self,
            event: OperatorEvent,
            ctx: &mut Context<'_, Self::Out>,
        ) -> Result<(), OperatorError> {
            (**self).on_event(event, ctx)
        }
        fn accepts_input(&self) -> bool {
            (**self).accepts_input()
        }
        fn waits_for_own_events(&self) -> bool {
            (**self).waits_for_own_events()
        }
        fn prepare_snapshot_pre_barrier(
            &mut self,
            checkpoint_id: u64,
            ctx: &mut Context<'_, Self::Out>,
        ) -> Result<(), OperatorError> {
            (**self).prepare_snapshot_pre_barrier(checkpoint_id, ctx)
        }
        fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
            (**self).snapshot_state(checkpoint_id)
        }
        fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
            (**self).notify_checkpoint_complete(checkpoint_id)
        }
        fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
            (**self).notify_checkpoint_aborted(checkpoint_id)
        }
        fn end_input(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
            (**self).end_input(ctx)
        }
        fn finish(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
            (**self).finish(ctx)
        }
        fn close(&mut self) -> Result<(), OperatorError> {
            (**self).close()
        }
        fn chain_len(&self) -> usize {
            (**self).chain_len()
        }
        fn dispatch_timer(
            &mut self,
            timer: Timer,
            ctx: &mut Context<'_, Self::Out>,
        ) -> Result<(), OperatorError> {
            (**self).dispatch_timer(timer, ctx)
        }
        fn dispatch_event(
            &mut self,
            operator: usize,
            event: OperatorEvent,
            ctx: &mut Context<'_, Self::Out>,
        ) -> Result<(), OperatorError> {
            (**self).dispatch_event(operator, event, ctx)
        }
        fn end_input_at(
            &mut self,
            operator: usize,
            ctx: &mut Context<'_, Self::Out>,
        ) -> Result<(), OperatorError> {
            (**self).end_input_at(operator, ctx)
        }
        fn restore_chain(
            &mut self,
            snapshot: Option<&TaskSnapshot>,
            base: usize,
        ) -> Result<(), OperatorError> {
            (**self).restore_chain(snapshot, base)
        }
        fn snapshot_chain(
            &mut self,
            checkpoint_id: u64,
            base: usize,
            into: &mut TaskSnapshot,
        ) -> Result<(), OperatorError> {
            (**self).snapshot_chain(checkpoint_id, base, into)
        }
        fn chain_names(&self) -> Vec<String> {
            (**self).chain_names()
        }
    };
}

impl<O: Operator + ?Sized> Operator for Box<O> {
    forward_operator!();
}

impl<T, W: Output<T> + ?Sized> Output<T> for Box<W> {
    forward_output!();
}

impl<T, W: TaskOutput<T> + ?Sized> TaskOutput<T> for Box<W> {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        (**self).broadcast_barrier(barrier)
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        (**self).end_of_input()
    }
    fn is_available(&self) -> bool {
        (**self).is_available()
    }
    fn register_availability_waker(&self, waker: &std::task::Waker) {
        (**self).register_availability_waker(waker);
    }
}

/// A type-erased operator, for chains whose shape is decided at run time (the job builder).
pub type BoxOperator<I, O> = Box<dyn Operator<In = I, Out = O>>;

/// An [`Output`] that drops everything; the end of a chain whose last operator is a sink.
#[derive(Debug, Clone, Copy, Default)]
pub struct Discard;

impl<T> TaskOutput<T> for Discard {
    fn broadcast_barrier(&mut self, _barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl<T> Output<T> for Discard {
    fn collect(&mut self, _record: StreamRecord<T>) -> Result<(), OperatorError> {
        Ok(())
    }
    fn emit_watermark(&mut self, _watermark: Watermark) -> Result<(), OperatorError> {
        Ok(())
    }
    fn emit_status(&mut self, _status: StreamStatus) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// An [`Output`] that keeps everything in a `Vec`, for tests and collecting sinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Emitted<T> {
    /// A record.
    Record(StreamRecord<T>),
    /// A watermark.
    Watermark(Watermark),
    /// A status change.
    Status(StreamStatus),
    /// A checkpoint barrier (when the `Vec` is a task's output).
    Barrier(CheckpointBarrier),
    /// End of input (when the `Vec` is a task's output).
    EndOfInput,
}

impl<T: Send> TaskOutput<T> for Vec<Emitted<T>> {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        self.push(Emitted::Barrier(barrier));
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.push(Emitted::EndOfInput);
        Ok(())
    }
}

impl<T> Output<T> for Vec<Emitted<T>> {
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.push(Emitted::Record(record));
        Ok(())
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.push(Emitted::Watermark(watermark));
        Ok(())
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.push(Emitted::Status(status));
        Ok(())
    }
}
