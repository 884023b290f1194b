//! Test harnesses that drive an operator (or chain) by hand, with a manual clock: the model-free
//! way to test operator logic, as Flink's operator test harnesses do.
//!
//! The harness plays the runtime: it calls the lifecycle methods, keeps what the chain emits,
//! fires timers when told to move processing time, and queues events that operators send
//! themselves until [`OperatorHarness::process_events`] delivers them. A long firing of
//! event-time timers is interrupted only when the test says so ([`ManualFiring`]); its
//! continuation is queued as an event, too.

mod manual_async;
mod send_sync;

pub use self::manual_async::{MANUAL_CALL_GUARD, ManualAsyncFunction, ManualCall, ManualCalls};
pub use self::send_sync::{assert_send, assert_send_sync, assert_sync};

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use crate::element::{StreamRecord, StreamStatus, Watermark};
use crate::error::OperatorError;
use crate::operator::{
    Context, Emitted, EventSink, Operator, OperatorEvent, TaskServices, TimerFiring, TwoInputChain,
    TwoInputOperator,
};
use crate::state::TaskSnapshot;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::time::{
    InterruptibleTimers, ManualClock, Period, Timer, TimerError, TimerHandle, TimerService,
};
use std::num::NonZeroUsize;
use std::sync::Arc;

/// A [`TimerService`] whose timers fire only when the test says so.
#[derive(Debug)]
pub struct ManualTimerService {
    clock: ManualClock,
    timers: Mutex<ManualTimers>,
}

#[derive(Debug, Default)]
struct ManualTimers {
    queue: BTreeMap<(i64, u64), Timer>,
    // Periodic series by sequence number: the period and the deadline of the next run.
    periodic: BTreeMap<u64, (Period, i64)>,
    next_seq: u64,
    shut_down: bool,
}

impl ManualTimerService {
    /// A service reading `clock`.
    pub fn new(clock: ManualClock) -> Self {
        ManualTimerService {
            clock,
            timers: Mutex::new(ManualTimers::default()),
        }
    }

    /// Removes and returns the earliest timer due at the clock's current time. A periodic
    /// timer's next run is scheduled as it is popped (the harness's runs complete at once, so a
    /// fixed delay counts from now).
    pub fn pop_due(&self) -> Option<Timer> {
        let now = self.clock.now_millis();
        let mut timers = self.timers.lock();
        let key = *timers.queue.first_key_value()?.0;
        if key.0 > now {
            return None;
        }
        let timer = timers.queue.remove(&key)?;
        if let Some((period, armed)) = timers.periodic.get_mut(&key.1) {
            let timestamp = period.next_timestamp(key.0 - 1, now);
            let next = timestamp.saturating_add(1);
            *armed = next;
            timers
                .queue
                .insert((next, key.1), Timer { timestamp, ..timer });
        }
        Some(timer)
    }

    /// Number of registered timers.
    pub fn pending(&self) -> usize {
        self.timers.lock().queue.len()
    }

    /// Number of timers registered so far (pending, fired or cancelled; a periodic one once).
    pub fn registered(&self) -> u64 {
        self.timers.lock().next_seq
    }

    /// Makes further registrations fail with [`TimerError::ShutDown`].
    pub fn shut_down(&self) {
        let mut timers = self.timers.lock();
        timers.shut_down = true;
        timers.queue.clear();
        timers.periodic.clear();
    }
}

impl TimerService for ManualTimerService {
    fn current_processing_time(&self) -> i64 {
        self.clock.now_millis()
    }

    fn register_timer(&self, timer: Timer) -> Result<TimerHandle, TimerError> {
        let now = self.clock.now_millis();
        let mut timers = self.timers.lock();
        if timers.shut_down {
            return Err(TimerError::ShutDown);
        }
        let deadline = timer.timestamp.saturating_add(1).max(now);
        let seq = timers.next_seq;
        timers.next_seq += 1;
        timers.queue.insert((deadline, seq), timer);
        Ok(TimerHandle::new(deadline, seq))
    }

    fn register_periodic(&self, first: Timer, period: Period) -> Result<TimerHandle, TimerError> {
        let period = period.validate()?;
        let handle = self.register_timer(first)?;
        self.timers
            .lock()
            .periodic
            .insert(handle.seq(), (period, handle.deadline()));
        Ok(handle)
    }

    fn cancel_timer(&self, handle: TimerHandle) {
        let mut timers = self.timers.lock();
        let deadline = match timers.periodic.remove(&handle.seq()) {
            Some((_, armed)) => armed,
            None => handle.deadline(),
        };
        timers.queue.remove(&(deadline, handle.seq()));
    }
}

/// An [`EventSink`] that queues events until the test delivers them.
#[derive(Default)]
pub struct QueuedEvents {
    queue: Mutex<VecDeque<(usize, OperatorEvent)>>,
    closed: crate::sync::atomic::AtomicBool,
}

impl QueuedEvents {
    /// Takes the oldest queued event.
    pub fn pop(&self) -> Option<(usize, OperatorEvent)> {
        self.queue.lock().pop_front()
    }

    /// Number of queued events.
    pub fn len(&self) -> usize {
        self.queue.lock().len()
    }

    /// Whether no event is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Refuses further events (as a finished task would).
    pub fn close(&self) {
        self.closed
            .store(true, crate::sync::atomic::Ordering::Release);
    }
}

impl EventSink for QueuedEvents {
    fn send_event(&self, operator: usize, event: OperatorEvent) -> Result<(), OperatorEvent> {
        if self.closed.load(crate::sync::atomic::Ordering::Acquire) {
            return Err(event);
        }
        self.queue.lock().push_back((operator, event));
        Ok(())
    }
}

impl fmt::Debug for QueuedEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuedEvents")
            .field("queued", &self.len())
            .finish()
    }
}

/// A [`TimerFiring`] for harnesses: a firing is interrupted after each chunk only while the
/// test has it [`set_interrupting`](Self::set_interrupting), and its continuation is queued
/// with the harness's events (deliver it with
/// [`OperatorHarness::process_events`]).
#[derive(Debug)]
pub struct ManualFiring {
    chunk: AtomicUsize,
    interrupting: AtomicBool,
    events: Arc<QueuedEvents>,
}

impl ManualFiring {
    /// Chunks of [`InterruptibleTimers::DEFAULT_CHUNK`], not interrupting; continuations go to
    /// `events`.
    pub fn new(events: Arc<QueuedEvents>) -> Self {
        ManualFiring {
            chunk: AtomicUsize::new(InterruptibleTimers::DEFAULT_CHUNK),
            interrupting: AtomicBool::new(false),
            events,
        }
    }

    /// Sets the timers per chunk.
    pub fn set_chunk(&self, chunk: NonZeroUsize) {
        self.chunk.store(chunk.get(), Ordering::Relaxed);
    }

    /// Whether every chunk's check finds a mail waiting (so the firing is cut after it).
    pub fn set_interrupting(&self, interrupting: bool) {
        self.interrupting.store(interrupting, Ordering::Relaxed);
    }
}

impl TimerFiring for ManualFiring {
    fn chunk(&self) -> Option<NonZeroUsize> {
        NonZeroUsize::new(self.chunk.load(Ordering::Relaxed))
    }

    fn should_interrupt(&self) -> bool {
        self.interrupting.load(Ordering::Relaxed)
    }

    fn defer(&self, operator: usize, continuation: OperatorEvent) -> Result<(), OperatorEvent> {
        self.events.send_event(operator, continuation)
    }
}

/// The runtime parts a harness shares: clock, timers, events, firing.
#[derive(Debug, Clone)]
pub struct HarnessServices {
    /// The manual clock.
    pub clock: ManualClock,
    /// Its timer service.
    pub timers: Arc<ManualTimerService>,
    /// Queued events.
    pub events: Arc<QueuedEvents>,
    /// How long firings of event-time timers are interrupted (never, unless the test says).
    pub firing: Arc<ManualFiring>,
    /// What operators see.
    pub services: TaskServices,
}

impl HarnessServices {
    /// Fresh services with the clock at 0.
    pub fn new(task_name: &str) -> Self {
        let clock = ManualClock::new(0);
        let timers = Arc::new(ManualTimerService::new(clock.clone()));
        let events = Arc::new(QueuedEvents::default());
        let firing = Arc::new(ManualFiring::new(Arc::clone(&events)));
        let services = TaskServices::new(task_name, timers.clone(), events.clone())
            .with_firing(firing.clone());
        HarnessServices {
            clock,
            timers,
            events,
            firing,
            services,
        }
    }
}

/// Drives a one-input operator or chain by hand.
///
/// See the [`operator`](crate::operator) module for an example.
pub struct OperatorHarness<Op: Operator> {
    op: Op,
    output: Vec<Emitted<Op::Out>>,
    parts: HarnessServices,
    restored: Option<TaskSnapshot>,
}

impl<Op: Operator> OperatorHarness<Op> {
    /// A harness around `op`, starting fresh.
    pub fn new(op: Op) -> Self {
        OperatorHarness {
            op,
            output: Vec::new(),
            parts: HarnessServices::new("harness"),
            restored: None,
        }
    }

    /// A harness around `op` that restores from `snapshot` on [`open`](Self::open).
    pub fn restored(op: Op, snapshot: &TaskSnapshot) -> Self {
        let mut h = OperatorHarness::new(op);
        h.restored = Some(snapshot.clone());
        h
    }

    fn ctx_call<R>(
        &mut self,
        f: impl FnOnce(&mut Op, &mut Context<'_, Op::Out>) -> Result<R, OperatorError>,
    ) -> Result<R, OperatorError> {
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        f(&mut self.op, &mut ctx)
    }

    /// Restores (if built with [`restored`](Self::restored)) and opens the chain.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn open(&mut self) -> Result<(), OperatorError> {
        let restored = self.restored.take();
        self.op.restore_chain(restored.as_ref(), 0)?;
        self.ctx_call(|op, ctx| op.open(ctx))
    }

    /// Processes a record without timestamp.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process(&mut self, value: Op::In) -> Result<(), OperatorError> {
        self.process_record(StreamRecord::new(value))
    }

    /// Processes a record with a timestamp.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process_with_timestamp(
        &mut self,
        value: Op::In,
        timestamp: i64,
    ) -> Result<(), OperatorError> {
        self.process_record(StreamRecord::with_timestamp(value, timestamp))
    }

    /// Processes a record.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process_record(&mut self, record: StreamRecord<Op::In>) -> Result<(), OperatorError> {
        self.ctx_call(|op, ctx| op.process_element(record, ctx))
    }

    /// Processes a watermark.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.ctx_call(|op, ctx| op.process_watermark(watermark, ctx))
    }

    /// Processes a status change.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.ctx_call(|op, ctx| op.process_status(status, ctx))
    }

    /// Moves processing time forward by `millis` and fires every timer that became due, in
    /// order.
    ///
    /// # Errors
    ///
    /// Whatever a timer callback fails with.
    pub fn advance_processing_time(&mut self, millis: i64) -> Result<(), OperatorError> {
        self.parts.clock.advance(millis);
        self.fire_due_timers()
    }

    /// Fires every timer due at the current time.
    ///
    /// # Errors
    ///
    /// Whatever a timer callback fails with.
    pub fn fire_due_timers(&mut self) -> Result<(), OperatorError> {
        while let Some(timer) = self.parts.timers.pop_due() {
            self.ctx_call(|op, ctx| op.dispatch_timer(timer, ctx))?;
        }
        Ok(())
    }

    /// Delivers `event` to the operator at index `operator`, as the model would.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    pub fn send_event<E: std::any::Any + Send>(
        &mut self,
        operator: usize,
        event: E,
    ) -> Result<(), OperatorError> {
        self.ctx_call(|op, ctx| op.dispatch_event(operator, Box::new(event), ctx))
    }

    /// Delivers every event operators sent through their [`EventSender`](crate::operator::EventSender)s;
    /// returns how many.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn process_events(&mut self) -> Result<usize, OperatorError> {
        let mut n = 0;
        while let Some((operator, event)) = self.parts.events.pop() {
            self.ctx_call(|op, ctx| op.dispatch_event(operator, event, ctx))?;
            n += 1;
        }
        Ok(n)
    }

    /// Takes a snapshot as a task would at a barrier: `prepare_snapshot_pre_barrier`, then
    /// `snapshot_state` of every operator.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskSnapshot, OperatorError> {
        self.ctx_call(|op, ctx| op.prepare_snapshot_pre_barrier(checkpoint_id, ctx))?;
        let mut snapshot = TaskSnapshot::new();
        self.op.snapshot_chain(checkpoint_id, 0, &mut snapshot)?;
        Ok(snapshot)
    }

    /// Tells every operator that checkpoint `checkpoint_id` completed.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.op.notify_checkpoint_complete(checkpoint_id)
    }

    /// Tells every operator that checkpoint `checkpoint_id` was aborted.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.op.notify_checkpoint_aborted(checkpoint_id)
    }

    /// Ends the input: `end_input`, then `finish`, head to tail.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn end_input(&mut self) -> Result<(), OperatorError> {
        self.ctx_call(|op, ctx| op.end_input(ctx))?;
        self.ctx_call(|op, ctx| op.finish(ctx))
    }

    /// Closes the chain and shuts the timer service down.
    ///
    /// # Errors
    ///
    /// Whatever an operator's `close` fails with.
    pub fn close(&mut self) -> Result<(), OperatorError> {
        self.parts.timers.shut_down();
        self.parts.events.close();
        self.op.close()
    }

    /// Everything emitted so far, without removing it.
    pub fn output(&self) -> &[Emitted<Op::Out>] {
        &self.output
    }

    /// Removes and returns everything emitted so far.
    pub fn take_output(&mut self) -> Vec<Emitted<Op::Out>> {
        std::mem::take(&mut self.output)
    }

    /// The records emitted so far, removing everything emitted.
    pub fn output_records(&mut self) -> Vec<StreamRecord<Op::Out>> {
        self.take_output()
            .into_iter()
            .filter_map(|e| match e {
                Emitted::Record(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// The values of the records emitted so far, removing everything emitted.
    pub fn output_values(&mut self) -> Vec<Op::Out> {
        self.output_records().into_iter().map(|r| r.value).collect()
    }

    /// Number of registered timers.
    pub fn pending_timers(&self) -> usize {
        self.parts.timers.pending()
    }

    /// Number of events operators sent that are not yet delivered.
    pub fn pending_events(&self) -> usize {
        self.parts.events.len()
    }

    /// The manual clock.
    pub fn clock(&self) -> &ManualClock {
        &self.parts.clock
    }

    /// The operator under test.
    pub fn operator(&self) -> &Op {
        &self.op
    }

    /// The operator under test, mutably.
    pub fn operator_mut(&mut self) -> &mut Op {
        &mut self.op
    }

    /// Number of operators in the chain.
    pub fn chain_len(&self) -> usize {
        self.op.chain_len()
    }

    /// The services the operators see.
    pub fn services(&self) -> &HarnessServices {
        &self.parts
    }
}

impl<Op: Operator> fmt::Debug for OperatorHarness<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorHarness")
            .field("chain", &self.op.chain_names())
            .field("emitted", &self.output.len())
            .finish()
    }
}

/// Drives a [`TwoInputChain`] by hand.
pub struct TwoInputHarness<H: TwoInputOperator, T: Operator<In = H::Out>> {
    chain: TwoInputChain<H, T>,
    output: Vec<Emitted<T::Out>>,
    parts: HarnessServices,
}

impl<H: TwoInputOperator, T: Operator<In = H::Out>> TwoInputHarness<H, T> {
    /// A harness around `chain`.
    pub fn new(chain: TwoInputChain<H, T>) -> Self {
        TwoInputHarness {
            chain,
            output: Vec::new(),
            parts: HarnessServices::new("two-input-harness"),
        }
    }

    /// Restores from `snapshot` (if any) and opens.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn open(&mut self) -> Result<(), OperatorError> {
        self.chain.restore(None)?;
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        self.chain.open(&mut ctx)
    }

    /// A record on input 1.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process1(&mut self, value: H::In1) -> Result<(), OperatorError> {
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        self.chain
            .process_element1(StreamRecord::new(value), &mut ctx)
    }

    /// A record on input 2.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process2(&mut self, value: H::In2) -> Result<(), OperatorError> {
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        self.chain
            .process_element2(StreamRecord::new(value), &mut ctx)
    }

    /// Restores from `snapshot` and opens (instead of [`open`](Self::open)).
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn restore(&mut self, snapshot: &TaskSnapshot) -> Result<(), OperatorError> {
        self.chain.restore(Some(snapshot))?;
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        self.chain.open(&mut ctx)
    }

    /// A record with a timestamp on input 1.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process1_with_timestamp(
        &mut self,
        value: H::In1,
        timestamp: i64,
    ) -> Result<(), OperatorError> {
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        self.chain
            .process_element1(StreamRecord::with_timestamp(value, timestamp), &mut ctx)
    }

    /// A record with a timestamp on input 2.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process2_with_timestamp(
        &mut self,
        value: H::In2,
        timestamp: i64,
    ) -> Result<(), OperatorError> {
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        self.chain
            .process_element2(StreamRecord::with_timestamp(value, timestamp), &mut ctx)
    }

    /// The combined watermark of both inputs advanced.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        self.chain.process_watermark(watermark, &mut ctx)
    }

    /// Moves processing time forward by `millis` and fires every timer that became due.
    ///
    /// # Errors
    ///
    /// Whatever a timer callback fails with.
    pub fn advance_processing_time(&mut self, millis: i64) -> Result<(), OperatorError> {
        self.parts.clock.advance(millis);
        while let Some(timer) = self.parts.timers.pop_due() {
            let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
            self.chain.dispatch_timer(timer, &mut ctx)?;
        }
        Ok(())
    }

    /// Ends input 1, then input 2, then the chain, as a task does at end of input.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn end_both(&mut self) -> Result<(), OperatorError> {
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        self.chain.end_input(1, &mut ctx)?;
        self.chain.end_input(2, &mut ctx)?;
        self.chain.end_of_both(&mut ctx)
    }

    /// Everything emitted so far, removing it.
    pub fn take_output(&mut self) -> Vec<Emitted<T::Out>> {
        std::mem::take(&mut self.output)
    }

    /// The values emitted so far, removing them.
    pub fn output_values(&mut self) -> Vec<T::Out> {
        std::mem::take(&mut self.output)
            .into_iter()
            .filter_map(|e| match e {
                Emitted::Record(r) => Some(r.value),
                _ => None,
            })
            .collect()
    }

    /// Snapshot of head and tail.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn snapshot(&mut self, checkpoint_id: u64) -> Result<TaskSnapshot, OperatorError> {
        let mut s = TaskSnapshot::new();
        self.chain.snapshot(checkpoint_id, &mut s)?;
        Ok(s)
    }
}

impl<H: TwoInputOperator, T: Operator<In = H::Out>> fmt::Debug for TwoInputHarness<H, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoInputHarness")
            .field("emitted", &self.output.len())
            .finish_non_exhaustive()
    }
}

/// A [`CompletionSink`](crate::function::CompletionSink) that forwards every completion into a
/// channel, for tests that drive an async function by hand and read what completed.
///
/// # Examples
///
/// ```
/// use streamtask_core::function::{AsyncOutcome, Completion, CompletionSink};
/// use streamtask_core::testing::completion_channel;
///
/// let (sink, completions) = completion_channel::<u32>();
/// sink.deliver(Completion { entry: 0, attempt: 0, outcome: AsyncOutcome::Results(vec![7]) });
/// assert_eq!(completions.recv().unwrap().outcome, AsyncOutcome::Results(vec![7]));
/// ```
pub fn completion_channel<O: Send + 'static>() -> (
    std::sync::Arc<CompletionChannel<O>>,
    crate::sync::channel::Receiver<crate::function::Completion<O>>,
) {
    let (tx, rx) = crate::sync::channel::unbounded();
    (std::sync::Arc::new(CompletionChannel(tx)), rx)
}

/// The sink [`completion_channel`] returns.
#[derive(Debug)]
pub struct CompletionChannel<O>(crate::sync::channel::Sender<crate::function::Completion<O>>);

impl<O: Send + 'static> crate::function::CompletionSink<O> for CompletionChannel<O> {
    fn deliver(&self, completion: crate::function::Completion<O>) {
        // A receiver that is gone: the test stopped listening.
        let _ = self.0.send(completion);
    }
}
