#![doc = include_str!("engine.md")]

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::key_lanes::{KeyLanes, Waiting};
use super::queue::{ElementQueue, QueueOutput, QueuedInput};
use streamtask_core::OperatorError;
use streamtask_core::async_io::RetryPolicy;
use streamtask_core::async_io::{AsyncConfig, AsyncConfigError, AsyncKey, BatchConfig, OutputMode};
use streamtask_core::function::{
    AsyncFunction, AsyncOutcome, Completion, CompletionSink, ResultFuture,
};
use streamtask_core::keygroup::{KeyGroupedState, ListState, StateKind, state_kind};
use streamtask_core::operator::Context;
use streamtask_core::state::{decode, encode};
use streamtask_core::time::{Timer, TimerHandle};
use streamtask_core::{StreamRecord, Watermark};

/// Timer tags: the low bit says which timer; a retry timer carries its call's key above it. The
/// engine's one timeout timer carries no key (its tag is [`TIMEOUT_TIMER`]).
const TIMEOUT_TIMER: u64 = 0;
const RETRY_TIMER: u64 = 1;
/// Batched mode's max-wait timer of the open batch: low bit 0 like the timeout timer's, told
/// apart by its whole tag (a retry tag has the low bit set, the timeout timer's tag is 0).
const BATCH_TIMER: u64 = 2;
/// Batched mode's retry timer of a batch: the batch's id (from 1) above two bits `10`, so its
/// tag is never [`BATCH_TIMER`]'s, has the low bit 0 and is told apart from the timeout timer's
/// (0) by its second bit.
const BATCH_RETRY_TIMER: u64 = 2;

fn batch_retry_tag(batch: u64) -> u64 {
    (batch << 2) | BATCH_RETRY_TIMER
}

fn timer_tag(entry: u64, kind: u64) -> u64 {
    (entry << 1) | kind
}

/// See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Built; state may be restored.
    Created,
    /// Processing.
    Open,
    /// `end_input` ran: no new retries; draining.
    Ending,
    /// The function was closed.
    Closed,
}

/// A timer the engine set, by the processing time it was set for (to tell stale firings apart).
#[derive(Debug, Clone, Copy)]
struct SetTimer {
    at: i64,
    handle: TimerHandle,
}

/// The call of one admitted record whose outcome is not final yet.
struct Call<I, O> {
    /// The record's entry in the queue.
    entry: u64,
    input: I,
    timestamp: Option<i64>,
    /// The current attempt (1 for the first call).
    attempt: u32,
    /// The current attempt's future: a timeout's hook gets it, FLINK-22573 asks whether it
    /// completed, and once the call is final it goes to the engine's spare futures.
    future: Option<ResultFuture<O>>,
    /// When the call times out (its admission time plus the timeout, spanning all attempts);
    /// `None` without a timeout, and once the timeout fired.
    deadline: Option<i64>,
    /// Set while a retry is due (`RetryDue`).
    retry: Option<SetTimer>,
    /// The timeout fired (`LastAttempt`): the next outcome is final.
    last_attempt: bool,
    /// Key-ordered mode: the key's lane, whose next record starts once this call is final.
    lane: Option<u64>,
    /// Batched mode: the batch its current attempt was called in (0 until that batch closes).
    batch: u64,
}

/// The logic of an async wait operator, shared by every model's operator; the protocol is
/// described below.
///
/// Every method that may emit, set timers or start calls takes the operator's [`Context`]; the
/// engine emits each record's results with the record's timestamp and forwards watermarks in the
/// order the queue allows.
///
/// # Examples
///
/// A model-free walk-through: calls complete through a sink that only keeps the completions,
/// and the test hands them back, as a model's completion path would.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use streamtask_core::async_io::{AsyncConfig, OutputMode};
/// use streamtask_runtime::AsyncWaitEngine;
/// use streamtask_core::function::{AsyncFunction, Completion, CompletionSink, ResultFuture};
/// use streamtask_core::operator::{Context, Emitted};
/// use streamtask_core::testing::HarnessServices;
/// use streamtask_core::StreamRecord;
///
/// struct Double;
/// impl AsyncFunction for Double {
///     type In = u32;
///     type Out = u32;
///     fn invoke(&mut self, input: &u32, result: ResultFuture<u32>) {
///         result.complete(vec![input * 2]);
///     }
/// }
///
/// #[derive(Default)]
/// struct Keep(Mutex<Vec<Completion<u32>>>);
/// impl CompletionSink<u32> for Keep {
///     fn deliver(&self, c: Completion<u32>) {
///         self.0.lock().unwrap().push(c);
///     }
/// }
///
/// let services = HarnessServices::new("doc");
/// let mut out: Vec<Emitted<u32>> = Vec::new();
/// let mut ctx = Context::new(&mut out, &services.services, 0);
/// let config = AsyncConfig::new(OutputMode::Ordered, 2);
/// let mut engine = AsyncWaitEngine::new("double", Double, config).unwrap();
/// let sink = Arc::new(Keep::default());
/// engine.open(sink.clone(), &mut ctx).unwrap();
/// engine.process_element(StreamRecord::with_timestamp(1, 10), &mut ctx).unwrap();
/// engine.process_element(StreamRecord::with_timestamp(2, 20), &mut ctx).unwrap();
/// // Two in flight fill the queue: the engine takes no third until a slot frees (soft
/// // backpressure), and holds nothing.
/// assert!(!engine.accepts_input());
/// assert!(!engine.has_held());
/// for completion in sink.0.lock().unwrap().drain(..) {
///     engine.on_completion(completion, &mut ctx).unwrap();
/// }
/// engine.emit_ready(&mut ctx).unwrap();
/// assert!(engine.accepts_input());
/// assert_eq!(
///     out,
///     vec![
///         Emitted::Record(StreamRecord::with_timestamp(2, 10)),
///         Emitted::Record(StreamRecord::with_timestamp(4, 20)),
///     ]
/// );
/// ```
///
#[doc = include_str!("engine.md")]
pub struct AsyncWaitEngine<F: AsyncFunction> {
    name: String,
    function: F,
    timeout_ms: Option<i64>,
    retry: RetryPolicy<F::Out>,
    queue: ElementQueue<F::In, F::Out>,
    /// Admitted records whose outcome is not final, by key (the id their futures, completions
    /// and timers carry).
    calls: Calls<F::In, F::Out>,
    /// Elements waiting for room, oldest first.
    held: VecDeque<QueuedInput<F::In>>,
    /// Key-ordered mode's key (`None` in the other modes).
    key: Option<AsyncKey<F::In>>,
    /// Key-ordered mode: the keys with a call in flight, and the admitted records waiting
    /// behind them.
    lanes: KeyLanes<F::In>,
    sink: Option<Arc<dyn CompletionSink<F::Out>>>,
    /// Futures of calls that ended, renewed for new calls (see [`Spares`]).
    spares: Spares<F::Out>,
    /// The one timeout timer, set at (or before) the earliest deadline in flight while any
    /// call has one (see the module docs, *Timeouts*).
    timeout_timer: Option<SetTimer>,
    phase: Phase,
    /// Batched mode: the open batch and when it closes (`None`: each call is flushed as it
    /// starts).
    batching: Option<Batching>,
    /// The task's metrics (from the services at `open`), whose live state shows the queue's
    /// fill: one relaxed store per element in and per batch out.
    metrics: Option<std::sync::Arc<streamtask_core::metrics::TaskMetrics>>,
}

impl<F> AsyncWaitEngine<F>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
{
    /// An engine named `name` (the operator's name, used in errors) running `function` as
    /// `config` says.
    ///
    /// # Errors
    ///
    /// [`AsyncConfigError`] when `config` does not [validate](AsyncConfig::validate).
    pub fn new(
        name: impl Into<String>,
        function: F,
        config: AsyncConfig<F::Out>,
    ) -> Result<Self, AsyncConfigError> {
        Self::build(name, function, config, None)
    }

    /// An engine whose records have `key`: what [`OutputMode::KeyOrdered`] orders by, and
    /// what its snapshot is grouped by (key groups, so a rescale hands each in-flight record
    /// to the subtask owning its key). The other modes ignore the key.
    ///
    /// # Errors
    ///
    /// [`AsyncConfigError`] when `config` does not [validate](AsyncConfig::validate).
    pub fn keyed(
        name: impl Into<String>,
        function: F,
        config: AsyncConfig<F::Out>,
        key: AsyncKey<F::In>,
    ) -> Result<Self, AsyncConfigError> {
        Self::build(name, function, config, Some(key))
    }

    fn build(
        name: impl Into<String>,
        function: F,
        config: AsyncConfig<F::Out>,
        key: Option<AsyncKey<F::In>>,
    ) -> Result<Self, AsyncConfigError> {
        config.validate()?;
        let key = match config.mode {
            OutputMode::KeyOrdered => Some(key.ok_or(AsyncConfigError::KeyOrderedWithoutKey)?),
            OutputMode::Ordered | OutputMode::Unordered => None,
        };
        Ok(AsyncWaitEngine {
            name: name.into(),
            function,
            timeout_ms: config.timeout_millis(),
            queue: ElementQueue::new(config.mode, config.capacity),
            retry: config.retry,
            calls: Calls::new(),
            held: VecDeque::new(),
            key,
            lanes: KeyLanes::new(),
            sink: None,
            spares: Spares::new(config.capacity),
            timeout_timer: None,
            phase: Phase::Created,
            batching: config.batch.map(Batching::new),
            metrics: None,
        })
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The queue (for inspection: its length, mode, capacity).
    pub fn queue(&self) -> &ElementQueue<F::In, F::Out> {
        &self.queue
    }

    /// Elements waiting for room.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Restores the elements a [`snapshot`](Self::snapshot) saved; they are held until
    /// [`open`](Self::open) admits them (as many as fit) and emission frees room for the rest.
    ///
    /// Takes the [`ListState`] a snapshot writes (after a rescale: this subtask's even share of
    /// every old subtask's elements, each re-submitted here once) and, from snapshots written
    /// before the in-flight inputs were list state, the bare list of elements.
    ///
    /// # Errors
    ///
    /// [`OperatorError::State`] when the bytes do not decode.
    pub fn restore(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = restored {
            let elements: Vec<QueuedInput<F::In>> = match state_kind(bytes) {
                StateKind::List => ListState::decode(bytes).map(|s| s.items),
                // Key-ordered: each key group's records in input order, then the latest
                // watermark in flight (later than where it was: a watermark may be late, never
                // early).
                StateKind::KeyGrouped => KeyGroupedState::<Vec<QueuedInput<F::In>>>::decode(bytes)
                    .map(|s| {
                        let watermark = s.watermark;
                        let mut items: Vec<_> =
                            s.into_groups().into_iter().flat_map(|(_, g)| g).collect();
                        if watermark > i64::MIN {
                            items.push(QueuedInput::Watermark(Watermark(watermark)));
                        }
                        items
                    }),
                StateKind::Union | StateKind::Subtask => decode(bytes),
            }
            .map_err(|e| OperatorError::state(self.name.clone(), e))?;
            self.held.extend(elements);
        }
        Ok(())
    }

    /// Opens the function, keeps `sink` for the calls' futures, and admits held (restored)
    /// elements as far as the capacity allows, emitting what is ready (a restored watermark at
    /// the head leaves at once).
    ///
    /// # Errors
    ///
    /// What the function's `open` fails with, or what emitting or setting a timer fails with.
    pub fn open(
        &mut self,
        sink: Arc<dyn CompletionSink<F::Out>>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.function.open()?;
        self.sink = Some(sink);
        self.phase = Phase::Open;
        self.metrics = ctx.services().metrics().cloned();
        if let Some(metrics) = &self.metrics {
            metrics.live.set_async_capacity(self.queue.capacity());
        }
        self.emit_ready(ctx)
    }

    /// Shows the queue's fill in the task's live state.
    #[inline]
    fn publish_fill(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.live.set_async_in_flight(self.queue.len());
        }
    }

    /// Admits a record (starting its call), or holds it when the queue is full or others are
    /// held. The caller decides whether records may arrive ([`accepts_input`](Self::accepts_input)):
    /// a task takes none while it is `false`, so only records it cannot refuse are held (those
    /// an operator before this one in a chain emits for one input).
    ///
    /// # Errors
    ///
    /// What setting the timeout timer fails with.
    pub fn process_element(
        &mut self,
        record: StreamRecord<F::In>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.admit_or_hold(QueuedInput::Record(record), ctx)
    }

    /// Admits (or holds) a watermark, then emits what is ready: a watermark with nothing
    /// before it leaves at once.
    ///
    /// # Errors
    ///
    /// What emitting fails with.
    pub fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.admit_or_hold(QueuedInput::Watermark(watermark), ctx)?;
        self.emit_ready(ctx)
    }

    /// Applies a completion: schedules a retry if the policy asks for one (and retries are
    /// still allowed), otherwise makes the outcome final. Completions of entries or attempts
    /// that are no longer current are ignored. Emits nothing: call
    /// [`emit_ready`](Self::emit_ready) after a batch of completions.
    ///
    /// # Errors
    ///
    /// [`OperatorError::Async`] naming the input when the final outcome is an error (the entry
    /// is completed empty, so the queue moves on while the task fails); what setting a retry
    /// timer fails with.
    pub fn on_completion(
        &mut self,
        completion: Completion<F::Out>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let Completion {
            entry: key,
            attempt,
            outcome,
        } = completion;
        let Some(call) = self.calls.get_mut(key) else {
            return Ok(()); // already final
        };
        if call.attempt != attempt || call.retry.is_some() {
            return Ok(()); // an attempt that is no longer current
        }
        if !call.last_attempt
            && self.phase == Phase::Open
            && let Some(delay) = self.retry.next_delay(attempt, &outcome)
        {
            let at = ctx.processing_time().saturating_add(millis_ceil(delay));
            // Batched mode: the records of one batch call that the policy retries are retried
            // as one batch, at the time the first of them asked for (one timer per batch).
            if let Some(batching) = self.batching.as_mut()
                && call.batch != 0
            {
                call.retry = Some(batching.retry(call.batch, attempt, key, at, ctx)?);
                return Ok(());
            }
            let handle = ctx.register_timer(at, timer_tag(key, RETRY_TIMER))?;
            call.retry = Some(SetTimer { at, handle });
            return Ok(());
        }
        let Some(mut call) = self.calls.remove(key) else {
            unreachable!("looked up above");
        };
        self.spares.keep(call.future.take());
        // Key-ordered: the key's next record (if one waits) starts now that this call is final,
        // so the key's calls, and so its results, follow input order.
        if let Some(lane) = call.lane
            && let Some(next) = self.lanes.leave(lane)
            && self.sink.is_some()
        {
            self.start_call(next, Some(lane), ctx)?;
        }
        // The timeout timer stays (it serves every call); only the last call of a finishing
        // operator takes it down, so no timer outlives the input.
        if self.phase != Phase::Open && self.calls.len() == 0 {
            self.cancel_timeout_timer(ctx);
        }
        match outcome {
            AsyncOutcome::Results(values) => {
                self.queue.complete(call.entry, values);
                Ok(())
            }
            AsyncOutcome::Failed(error) => {
                self.queue.complete(call.entry, Vec::new());
                Err(OperatorError::Async {
                    operator: self.name.clone(),
                    input: describe(&call.input, call.timestamp),
                    source: error,
                })
            }
        }
    }

    /// Emits every element that may leave (each record's results with its timestamp, then
    /// watermarks where the mode allows), admitting held elements as slots free up. Emitting all
    /// that is ready in one call (Flink emits one per mail) saves a mail per element.
    ///
    /// # Errors
    ///
    /// What downstream fails with, or setting a timeout timer for an admitted element.
    pub fn emit_ready(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        loop {
            while let Some(output) = self.queue.pop_completed() {
                match output {
                    QueueOutput::Results { values, timestamp } => {
                        for value in values {
                            ctx.collect(StreamRecord { value, timestamp })?;
                        }
                    }
                    QueueOutput::Watermark(watermark) => ctx.emit_watermark(watermark)?,
                }
            }
            // Room freed: admit held elements; an admitted watermark may be ready at once.
            if !self.admit_held(ctx)? {
                self.publish_fill();
                return Ok(());
            }
        }
    }

    /// A timer this engine set fired: the timeout timer (every call whose deadline passed times
    /// out: the function's `timeout` hook decides, unless the call already completed; then the
    /// timer is set again for the earliest deadline left) or a due retry. Stale timers do
    /// nothing.
    ///
    /// # Errors
    ///
    /// What setting the timeout timer again fails with.
    pub fn on_timer(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        if timer.tag == BATCH_TIMER {
            // Only the open batch's own timer closes it (a batch closed by its size left a
            // timer that may still fire).
            if self
                .batching
                .as_ref()
                .and_then(|b| b.timer)
                .is_some_and(|t| t.at == timer.timestamp)
            {
                self.close_batch(ctx)?;
            }
            return Ok(());
        }
        if timer.tag & 3 == BATCH_RETRY_TIMER {
            let retry = self.batching.as_mut().and_then(|batching| {
                let at = batching.retries.iter().position(|r| {
                    batch_retry_tag(r.batch) == timer.tag && r.timer.at == timer.timestamp
                })?;
                Some(batching.retries.swap_remove(at))
            });
            return match retry {
                Some(retry) => self.call_batch_retry(retry, ctx),
                None => Ok(()), // stale: the retry ran at the end of input, or timed out
            };
        }
        if timer.tag & 1 == TIMEOUT_TIMER {
            return self.on_timeout_timer(timer, ctx);
        }
        let key = timer.tag >> 1;
        let Some(call) = self.calls.get_mut(key) else {
            return Ok(()); // final already (its retry timer fired late)
        };
        let Some(sink) = self.sink.as_ref() else {
            return Ok(());
        };
        // Only the call's current retry timer starts the retry: after a timeout (due at the same
        // instant, say) took the retry over, the hook's future is the last attempt, and a retry
        // started now would make its answer stale and lose the result (FLINK-40456).
        if call.retry.is_none_or(|t| t.at != timer.timestamp) {
            return Ok(());
        }
        call.retry = None;
        start_attempt(&mut self.function, &mut self.spares, key, call, sink);
        self.started(key, ctx)
    }

    /// The timeout timer fired: times out every call whose deadline passed, in deadline (then
    /// arrival) order, and sets the timer for the earliest deadline left.
    fn on_timeout_timer(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        if self.timeout_timer.is_none_or(|t| t.at != timer.timestamp) {
            return Ok(()); // stale: cancelled or replaced
        }
        self.timeout_timer = None;
        let Some(sink) = self.sink.as_ref() else {
            return Ok(());
        };
        // A timer set for `at` fires once processing time passed `at`: a deadline is due when
        // this timer's own is (or is later), or when the clock passed it, as its own timer
        // would have fired by now.
        let now = ctx.processing_time();
        let due = |deadline: i64| deadline <= timer.timestamp || deadline < now;
        let mut expired: Vec<(i64, u64, u64)> = self
            .calls
            .iter()
            .filter_map(|(key, call)| {
                let deadline = call.deadline?;
                due(deadline).then_some((deadline, call.entry, key))
            })
            .collect();
        expired.sort_unstable();
        let timed_out = !expired.is_empty();
        for (_, _, key) in expired {
            let Some(call) = self.calls.get_mut(key) else {
                unreachable!("listed above");
            };
            call.deadline = None;
            call.last_attempt = true;
            if call.retry.is_none() && call.future.as_ref().is_some_and(ResultFuture::is_done) {
                // FLINK-22573: the attempt completed; its completion is on its way and, since
                // the timeout passed, will be final.
                continue;
            }
            if let Some(retry) = call.retry.take() {
                // FLINK-30477: the timeout drops a pending retry; the hook gets a fresh
                // attempt's future. A batch's retry timer goes once none of its records is
                // left to retry.
                let unused = self
                    .batching
                    .as_mut()
                    .is_none_or(|batching| batching.leave_retry(key));
                if unused {
                    ctx.cancel_timer(retry.handle);
                }
                call.attempt += 1;
                let future = self.spares.future(key, call.attempt, sink);
                self.spares.keep(call.future.replace(future));
            }
            let Some(future) = call.future.clone() else {
                unreachable!("a call in flight keeps its attempt's future");
            };
            self.function.timeout(&call.input, future);
        }
        // The hooks run now: a batched function kept them back (and the open batch closes
        // with them).
        if timed_out {
            match self.batching {
                Some(_) => self.close_batch(ctx)?,
                None => self.function.flush(),
            }
        }
        let earliest = self
            .calls
            .iter()
            .filter_map(|(_, call)| call.deadline)
            .min();
        if let Some(at) = earliest {
            set_timeout_timer(&mut self.timeout_timer, at, ctx)?;
        }
        Ok(())
    }

    /// End of input: pending retries run once, now, and from here on every outcome is final.
    /// The model then waits until [`is_drained`](Self::is_drained) before finishing.
    ///
    /// # Errors
    ///
    /// None today; the signature leaves room for timer errors.
    pub fn end_input(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        if self.phase != Phase::Open {
            return Ok(());
        }
        self.phase = Phase::Ending;
        if self.sink.is_none() {
            return Ok(());
        }
        // Batched mode: each batch's pending retry is called now, as a batch of its own, in
        // the order the batches were called.
        if let Some(batching) = self.batching.as_mut() {
            let mut retries = std::mem::take(&mut batching.retries);
            retries.sort_unstable_by_key(|r| r.batch);
            for retry in retries {
                ctx.cancel_timer(retry.timer.handle);
                self.call_batch_retry(retry, ctx)?;
            }
        }
        let Some(sink) = self.sink.as_ref() else {
            return Ok(());
        };
        // In entry order, as the records arrived.
        let mut due: Vec<(u64, u64)> = self
            .calls
            .iter()
            .filter(|(_, call)| call.retry.is_some())
            .map(|(key, call)| (call.entry, key))
            .collect();
        due.sort_unstable();
        for (_, key) in due {
            let Some(call) = self.calls.get_mut(key) else {
                unreachable!("listed above");
            };
            if let Some(retry) = call.retry.take() {
                ctx.cancel_timer(retry.handle);
                start_attempt(&mut self.function, &mut self.spares, key, call, sink);
                match self.batching.as_mut() {
                    Some(batching) => batching.members.push(key),
                    None => self.function.flush(),
                }
            }
        }
        // No batch waits for more records once the input ended.
        if self.batching.is_some() {
            self.close_batch(ctx)?;
        }
        if self.calls.len() == 0 {
            self.cancel_timeout_timer(ctx);
        }
        Ok(())
    }

    /// Whether the operator takes another element: open, nothing held, and room in the queue
    /// (soft backpressure: a full queue makes the operator unavailable before the task takes
    /// the next element, so it never holds more than the capacity); after `end_input`, whether
    /// everything was emitted (so a model's drain step can wait for this one condition).
    #[inline]
    pub fn accepts_input(&self) -> bool {
        match self.phase {
            // Unavailable while full, not once an element had to be held: a snapshot then holds
            // exactly the calls in flight, and the task leaves the next element in its input.
            Phase::Open => self.held.is_empty() && !self.queue.is_full(),
            Phase::Ending => self.is_drained(),
            Phase::Created | Phase::Closed => false,
        }
    }

    /// Whether no element is queued or held.
    pub fn is_drained(&self) -> bool {
        self.queue.is_empty() && self.held.is_empty()
    }

    /// Whether elements wait for room.
    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// The inputs of every element not yet emitted, in order (queued, then held), encoded as a
    /// [`ListState`]: an in-flight input belongs to no subtask in particular, so a rescale
    /// splits the inputs evenly over the new subtasks and each is re-submitted once, where it
    /// lands (Flink's async operator keeps them as list state too). Union state would re-submit
    /// every input on every new subtask, a duplicate per extra subtask.
    ///
    /// # Errors
    ///
    /// [`OperatorError::State`] when an input cannot be encoded.
    ///
    /// In key-ordered mode the inputs are keyed state instead ([`KeyGroupedState`]): each key
    /// group's records in input order (a key's records stay in its key group, so their order
    /// survives any rescale, and each lands on the subtask owning its key), with the latest
    /// watermark in flight as the snapshot's watermark.
    pub fn snapshot(&self) -> Result<Vec<u8>, OperatorError> {
        let elements = self.queue.values().into_iter().chain(&self.held);
        let encoded = match &self.key {
            None => ListState::new(elements.collect()).encode(),
            Some(key) => {
                let mut watermark = i64::MIN;
                let mut groups: std::collections::BTreeMap<u32, Vec<&QueuedInput<F::In>>> =
                    std::collections::BTreeMap::new();
                // A key's records are listed in input order (the queue lists a segment's
                // completed records before its calls in flight, and a key's later record
                // starts only once its earlier one is final).
                for element in elements {
                    match element {
                        QueuedInput::Record(r) => groups
                            .entry(key.place(&r.value).key_group)
                            .or_default()
                            .push(element),
                        QueuedInput::Watermark(w) => watermark = watermark.max(w.0),
                    }
                }
                KeyGroupedState::new(key.max_parallelism(), watermark, groups).encode()
            }
        };
        encoded.map_err(|e| OperatorError::state(self.name.clone(), e))
    }

    /// Closes the function (once; later calls do nothing).
    ///
    /// # Errors
    ///
    /// What the function's `close` fails with.
    pub fn close(&mut self) -> Result<(), OperatorError> {
        if self.phase == Phase::Closed {
            return Ok(());
        }
        let opened = self.phase != Phase::Created;
        self.phase = Phase::Closed;
        self.sink = None;
        self.spares.futures.clear();
        if let Some(batching) = self.batching.as_mut() {
            batching.members.clear();
            batching.timer = None;
            batching.retries.clear();
        }
        if opened {
            self.function.close()
        } else {
            Ok(())
        }
    }

    fn admit_or_hold(
        &mut self,
        input: QueuedInput<F::In>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        if self.held.is_empty() && !self.queue.is_full() && self.sink.is_some() {
            self.admit(input, ctx)
        } else {
            self.held.push_back(input);
            Ok(())
        }
    }

    /// Admits held elements while there is room; returns whether it admitted any.
    fn admit_held(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<bool, OperatorError> {
        let mut admitted = false;
        while !self.queue.is_full() && self.sink.is_some() {
            let Some(input) = self.held.pop_front() else {
                break;
            };
            self.admit(input, ctx)?;
            admitted = true;
        }
        Ok(admitted)
    }

    /// Batched mode: the call `key` just started (its function call kept back) joins the open
    /// batch, which closes when full, when the input ended, or else by its max-wait timer
    /// (set as its first call joins). Otherwise the call is flushed at once.
    fn started(&mut self, key: u64, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        let Some(batching) = self.batching.as_mut() else {
            self.function.flush();
            return Ok(());
        };
        batching.members.push(key);
        if batching.members.len() == 1 {
            batching.opened_at = ctx.processing_time();
        }
        if self.phase != Phase::Open
            || batching.members.len() >= batching.config.size
            || batching.config.max_wait.is_zero()
        {
            return self.close_batch(ctx);
        }
        if batching.timer.is_none() {
            let at = batching
                .opened_at
                .saturating_add(batching.config.max_wait_millis());
            let handle = ctx.register_timer(at, BATCH_TIMER)?;
            batching.timer = Some(SetTimer { at, handle });
        }
        Ok(())
    }

    /// Batched mode: calls the open batch (and the timeouts kept back) through the function's
    /// `flush`. The batch's calls get their deadline now: the timeout runs from the batch's
    /// call, one deadline for the batch (a retried call keeps the one it has: the timeout spans
    /// all attempts).
    fn close_batch(&mut self, ctx: &mut Context<'_, F::Out>) -> Result<(), OperatorError> {
        let Some(batching) = self.batching.as_mut() else {
            unreachable!("only batched mode has batches");
        };
        if let Some(timer) = batching.timer.take() {
            ctx.cancel_timer(timer.handle);
        }
        let now = ctx.processing_time();
        if !batching.members.is_empty() {
            if let Some(metrics) = &self.metrics {
                metrics
                    .async_batch_size
                    .record_micros(batching.members.len() as u64);
                let waited_ms = u64::try_from(now.saturating_sub(batching.opened_at)).unwrap_or(0);
                metrics
                    .async_batch_wait
                    .record_micros(waited_ms.saturating_mul(1000));
            }
            let id = batching.next_id;
            batching.next_id += 1;
            let deadline = self.timeout_ms.map(|ms| now.saturating_add(ms));
            let mut first = false;
            for &key in &batching.members {
                let Some(call) = self.calls.get_mut(key) else {
                    continue;
                };
                call.batch = id;
                if deadline.is_some()
                    && call.deadline.is_none()
                    && !call.last_attempt
                    && call.attempt == 1
                {
                    call.deadline = deadline;
                    first = true;
                }
            }
            if let Some(at) = deadline
                && first
                && self.timeout_timer.is_none_or(|t| at < t.at)
            {
                if let Some(stale) = self.timeout_timer.take() {
                    ctx.cancel_timer(stale.handle);
                }
                set_timeout_timer(&mut self.timeout_timer, at, ctx)?;
            }
            batching.members.clear();
        }
        self.function.flush();
        Ok(())
    }

    /// Batched mode: `retry` is due (its timer fired, or the input ended): its records that
    /// still wait for it (a timeout takes a record's retry over) start their next attempt and
    /// are called as one batch, in the order they arrived. The open batch is called first, as
    /// it is, so the retried batch is the failed batch's records and no others, and neither
    /// grows past the batch size.
    fn call_batch_retry(
        &mut self,
        retry: BatchRetry,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let mut due: Vec<(u64, u64)> = Vec::with_capacity(retry.members.len());
        for &key in &retry.members {
            if let Some(call) = self.calls.get_mut(key)
                && call.attempt == retry.attempt
                && call.retry.is_some_and(|t| t.at == retry.timer.at)
            {
                due.push((call.entry, key));
            }
        }
        if due.is_empty() {
            return Ok(());
        }
        due.sort_unstable();
        self.close_batch(ctx)?;
        let Some(sink) = self.sink.as_ref() else {
            return Ok(());
        };
        let Some(batching) = self.batching.as_mut() else {
            unreachable!("only batched mode has batch retries");
        };
        batching.opened_at = ctx.processing_time();
        for (_, key) in due {
            let Some(call) = self.calls.get_mut(key) else {
                unreachable!("listed above");
            };
            call.retry = None;
            start_attempt(&mut self.function, &mut self.spares, key, call, sink);
            batching.members.push(key);
        }
        self.close_batch(ctx)
    }

    /// Takes the timeout timer down (no call in flight needs it).
    fn cancel_timeout_timer(&mut self, ctx: &mut Context<'_, F::Out>) {
        if let Some(timer) = self.timeout_timer.take() {
            ctx.cancel_timer(timer.handle);
        }
    }

    /// Puts `input` into the queue (which has room) and, for a record, starts its call.
    fn admit(
        &mut self,
        input: QueuedInput<F::In>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        if self.sink.is_none() {
            unreachable!("elements are admitted only once the engine is open");
        }
        let (value, timestamp) = match &input {
            QueuedInput::Record(r) => (r.value.clone(), r.timestamp),
            QueuedInput::Watermark(_) => {
                if self.queue.try_put(input).is_err() {
                    unreachable!("admit is called only with room in the queue");
                }
                self.publish_fill();
                return Ok(());
            }
        };
        let Ok(entry) = self.queue.try_put(input) else {
            unreachable!("admit is called only with room in the queue");
        };
        self.publish_fill();
        let record = Waiting {
            entry,
            input: value,
            timestamp,
        };
        match &self.key {
            None => self.start_call(record, None, ctx),
            Some(key) => {
                // Key-ordered: the call starts only if no call of its key is in flight;
                // otherwise the record waits in the key's lane (in the queue all the same: it
                // counts against the capacity and is in the snapshot).
                let lane = key.place(&record.input).lane;
                match self.lanes.enter(lane, record) {
                    Some(record) => self.start_call(record, Some(lane), ctx),
                    None => Ok(()),
                }
            }
        }
    }

    /// Starts the first attempt of the call of `record` (admitted to the queue), whose timeout
    /// runs from now.
    fn start_call(
        &mut self,
        record: Waiting<F::In>,
        lane: Option<u64>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let Some(sink) = self.sink.as_ref() else {
            unreachable!("calls start only once the engine is open");
        };
        // The key the call gets (its future and retry timers carry it).
        let key = self.calls.next_key();
        // Batched mode: the deadline is set when the call's batch closes.
        let deadline = match self.timeout_ms.filter(|_| self.batching.is_none()) {
            Some(ms) => {
                let at = ctx.processing_time().saturating_add(ms);
                // Deadlines grow with the clock, so a timer already set is at or before this
                // one (a clock that stepped back gets an earlier timer).
                if self.timeout_timer.is_none_or(|t| at < t.at) {
                    if let Some(stale) = self.timeout_timer.take() {
                        ctx.cancel_timer(stale.handle);
                    }
                    set_timeout_timer(&mut self.timeout_timer, at, ctx)?;
                }
                Some(at)
            }
            None => None,
        };
        let future = self.spares.future(key, 1, sink);
        let call = self.calls.insert(Call {
            entry: record.entry,
            input: record.input,
            timestamp: record.timestamp,
            attempt: 1,
            future: Some(future.clone()),
            deadline,
            retry: None,
            last_attempt: false,
            lane,
            batch: 0,
        });
        self.function.invoke(&call.input, future);
        self.started(key, ctx)
    }
}

/// Batched mode's open batch: the calls started since the last one closed.
struct Batching {
    config: BatchConfig,
    /// The open batch's calls (their keys), in the order they started.
    members: Vec<u64>,
    /// Processing time the open batch's first call joined.
    opened_at: i64,
    /// The open batch's max-wait timer.
    timer: Option<SetTimer>,
    /// The id the next batch to close gets (ids start at 1; a call's 0 means "not called in a
    /// batch yet").
    next_id: u64,
    /// Retries due, one per batch whose records the retry policy retried.
    retries: Vec<BatchRetry>,
}

/// The records of one batch call that the retry policy retried: they are called again
/// together, as a batch of their own, when the batch's retry timer fires.
struct BatchRetry {
    /// The batch they were called in.
    batch: u64,
    /// The attempt that failed (one attempt number for a whole batch).
    attempt: u32,
    timer: SetTimer,
    /// Their calls (keys), in the order their outcomes were applied.
    members: Vec<u64>,
}

impl Batching {
    fn new(config: BatchConfig) -> Self {
        Batching {
            config,
            members: Vec::with_capacity(config.size.min(1024)),
            opened_at: 0,
            timer: None,
            next_id: 1,
            retries: Vec::new(),
        }
    }

    /// The call `key` of batch `batch` failed its attempt `attempt` and the policy retries it,
    /// due at `at`: it joins its batch's retry, set up (with its one timer) by the first of the
    /// batch's records to fail. Returns the retry's timer.
    fn retry<O>(
        &mut self,
        batch: u64,
        attempt: u32,
        key: u64,
        at: i64,
        ctx: &mut Context<'_, O>,
    ) -> Result<SetTimer, OperatorError> {
        if let Some(retry) = self
            .retries
            .iter_mut()
            .find(|r| r.batch == batch && r.attempt == attempt)
        {
            retry.members.push(key);
            return Ok(retry.timer);
        }
        let handle = ctx.register_timer(at, batch_retry_tag(batch))?;
        let timer = SetTimer { at, handle };
        self.retries.push(BatchRetry {
            batch,
            attempt,
            timer,
            members: vec![key],
        });
        Ok(timer)
    }

    /// The call `key` leaves the retry it waits in (its timeout took the retry over); returns
    /// whether that retry's timer is unused now (no record of its batch left to retry, or the
    /// call's retry was not a batch's).
    fn leave_retry(&mut self, key: u64) -> bool {
        let Some(at) = self.retries.iter().position(|r| r.members.contains(&key)) else {
            return true;
        };
        let retry = &mut self.retries[at];
        retry.members.retain(|&member| member != key);
        if retry.members.is_empty() {
            self.retries.swap_remove(at);
            return true;
        }
        false
    }
}

/// The calls in flight, in slots that are reused as calls become final (no hashing, and no
/// allocation once the slots for the queue's capacity exist).
///
/// A call's *key* (the id its [`ResultFuture`]s, completions and timers carry) is its slot in
/// the low 32 bits and the slot's generation above them; freeing a slot moves its generation
/// on, so a completion or a timer of a call that is final (whose slot another call may hold
/// now) finds no call under its key and is ignored, as one for an absent key was in a map.
/// Generations have 31 bits, so a key shifted left by one (a timer tag) loses nothing.
struct Calls<I, O> {
    /// Every slot holds a call or is in `free`.
    slots: Vec<Slot<I, O>>,
    /// Free slots, the last freed on top (its lines are the warmest).
    free: Vec<u32>,
}

struct Slot<I, O> {
    generation: u32,
    call: Option<Call<I, O>>,
}

const GENERATION_MASK: u32 = (1 << 31) - 1;

impl<I, O> Calls<I, O> {
    fn new() -> Self {
        Calls {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn key(slot: u32, generation: u32) -> u64 {
        (u64::from(generation) << 32) | u64::from(slot)
    }

    /// The key [`insert`](Self::insert) gives the next call.
    #[inline]
    fn next_key(&self) -> u64 {
        match self.free.last() {
            Some(&slot) => Calls::<I, O>::key(slot, self.slots[slot as usize].generation),
            None => Calls::<I, O>::key(self.slot_count(), 0),
        }
    }

    fn slot_count(&self) -> u32 {
        u32::try_from(self.slots.len()).expect("fewer than 2^32 calls in flight")
    }

    /// Stores `call` under [`next_key`](Self::next_key). Always inlined (a new slot is made
    /// out of line): a call is over 100 bytes, and out of line it would be built on the
    /// caller's stack, copied to this one's and then to its slot, the largest part of this
    /// call's time in a profile (`#[inline]` alone leaves it out of line).
    #[inline(always)]
    fn insert(&mut self, call: Call<I, O>) -> &mut Call<I, O> {
        let index = match self.free.pop() {
            Some(slot) => slot as usize,
            None => self.new_slot(),
        };
        self.slots[index].call.insert(call)
    }

    /// Makes an empty slot (the first calls only: slots are reused); returns its index.
    #[cold]
    fn new_slot(&mut self) -> usize {
        self.slots.push(Slot {
            generation: 0,
            call: None,
        });
        self.slots.len() - 1
    }

    #[inline]
    fn slot_of(&self, key: u64) -> Option<usize> {
        let index = usize::try_from(key & u64::from(u32::MAX)).ok()?;
        let generation = u32::try_from(key >> 32).ok()?;
        let slot = self.slots.get(index)?;
        (slot.generation == generation && slot.call.is_some()).then_some(index)
    }

    #[inline]
    fn get_mut(&mut self, key: u64) -> Option<&mut Call<I, O>> {
        let index = self.slot_of(key)?;
        self.slots[index].call.as_mut()
    }

    #[inline]
    fn remove(&mut self, key: u64) -> Option<Call<I, O>> {
        let index = self.slot_of(key)?;
        let slot = &mut self.slots[index];
        slot.generation = slot.generation.wrapping_add(1) & GENERATION_MASK;
        self.free
            .push(u32::try_from(index).expect("slot indices fit in 32 bits"));
        slot.call.take()
    }

    fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// The calls with their keys, in slot order.
    fn iter(&self) -> impl Iterator<Item = (u64, &Call<I, O>)> {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            let call = slot.call.as_ref()?;
            let index = u32::try_from(index).expect("slot indices fit in 32 bits");
            Some((Calls::<I, O>::key(index, slot.generation), call))
        })
    }
}

/// Sets an engine's timeout timer (`timer`, none set) for `at`.
fn set_timeout_timer<O>(
    timer: &mut Option<SetTimer>,
    at: i64,
    ctx: &mut Context<'_, O>,
) -> Result<(), OperatorError> {
    let handle = ctx.register_timer(at, TIMEOUT_TIMER)?;
    *timer = Some(SetTimer { at, handle });
    Ok(())
}

/// Starts the next attempt of `call`.
fn start_attempt<F: AsyncFunction>(
    function: &mut F,
    spares: &mut Spares<F::Out>,
    key: u64,
    call: &mut Call<F::In, F::Out>,
    sink: &Arc<dyn CompletionSink<F::Out>>,
) {
    call.attempt += 1;
    let future = spares.future(key, call.attempt, sink);
    spares.keep(call.future.replace(future.clone()));
    function.invoke(&call.input, future);
}

/// The futures of calls that ended, kept to be renewed for new calls: a call then costs no
/// allocation and no reference count on the sink. A future is renewed only when nobody else
/// holds it any more ([`ResultFuture::renew`]); one a function still holds (a client thread
/// that completed it and has not dropped it yet) is dropped instead, and a new one made.
struct Spares<O> {
    futures: Vec<ResultFuture<O>>,
    /// At most this many are kept (the queue's capacity: as many as calls can be in flight).
    limit: usize,
}

impl<O> Spares<O> {
    fn new(limit: usize) -> Self {
        Spares {
            futures: Vec::new(),
            limit,
        }
    }

    /// A future for `key`'s attempt `attempt`, delivering to `sink`: a renewed spare if one is
    /// free, else a new one.
    #[inline]
    fn future(
        &mut self,
        key: u64,
        attempt: u32,
        sink: &Arc<dyn CompletionSink<O>>,
    ) -> ResultFuture<O> {
        while let Some(mut future) = self.futures.pop() {
            if future.renew(key, attempt) {
                return future;
            }
        }
        ResultFuture::new(key, attempt, Arc::clone(sink))
    }

    /// Keeps the future of a call that ended (or of an attempt that was replaced).
    #[inline]
    fn keep(&mut self, future: Option<ResultFuture<O>>) {
        if let Some(future) = future.filter(|_| self.futures.len() < self.limit) {
            self.futures.push(future);
        }
    }
}

/// `input` as JSON (with its timestamp), for error messages.
fn describe<I: Serialize>(input: &I, timestamp: Option<i64>) -> String {
    let value = encode(input)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| "<not encodable>".to_string());
    match timestamp {
        Some(ts) => format!("{value} (timestamp {ts})"),
        None => value,
    }
}

/// Whole milliseconds, rounded up.
fn millis_ceil(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
}

impl<F: AsyncFunction> fmt::Debug for AsyncWaitEngine<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncWaitEngine")
            .field("name", &self.name)
            .field("phase", &self.phase)
            .field("queue", &self.queue)
            .field("in_flight", &self.calls.len())
            .field("held", &self.held.len())
            .field("waiting_for_key", &self.lanes.waiting())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The engine's own sequencing, driven by hand: which completion arrives before which timer
    //! is exactly what the tests say (the cross-model suite cannot force these interleavings).

    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use streamtask_core::async_io::OutputMode;
    use streamtask_core::function::AsyncError;
    use streamtask_core::operator::Emitted;
    use streamtask_core::testing::{HarnessServices, ManualAsyncFunction, ManualCalls};

    /// A sink that keeps completions until the test applies them.
    #[derive(Default)]
    struct Keep(Mutex<Vec<Completion<u32>>>);

    impl CompletionSink<u32> for Keep {
        fn deliver(&self, completion: Completion<u32>) {
            self.0.lock().unwrap().push(completion);
        }
    }

    struct Rig {
        engine: AsyncWaitEngine<ManualAsyncFunction<u32, u32>>,
        calls: ManualCalls<u32, u32>,
        sink: Arc<Keep>,
        services: HarnessServices,
        out: Vec<Emitted<u32>>,
    }

    impl Rig {
        fn new(config: AsyncConfig<u32>) -> Rig {
            Rig::with(ManualAsyncFunction::new(), config, None)
        }

        fn with(
            function: ManualAsyncFunction<u32, u32>,
            config: AsyncConfig<u32>,
            restored: Option<&[u8]>,
        ) -> Rig {
            let calls = function.calls();
            let engine = AsyncWaitEngine::new("rig", function, config).unwrap();
            Rig::around(engine, calls, restored)
        }

        /// A key-ordered rig: a record's key is its value's last digit.
        fn key_ordered(
            function: ManualAsyncFunction<u32, u32>,
            capacity: usize,
            restored: Option<&[u8]>,
        ) -> Rig {
            let config = AsyncConfig::new(OutputMode::KeyOrdered, capacity);
            let key = AsyncKey::new(128, |v: &u32| v % 10);
            let calls = function.calls();
            let engine = AsyncWaitEngine::keyed("rig", function, config, key).unwrap();
            Rig::around(engine, calls, restored)
        }

        fn around(
            mut engine: AsyncWaitEngine<ManualAsyncFunction<u32, u32>>,
            calls: ManualCalls<u32, u32>,
            restored: Option<&[u8]>,
        ) -> Rig {
            engine.restore(restored).unwrap();
            let mut rig = Rig {
                engine,
                calls,
                sink: Arc::new(Keep::default()),
                services: HarnessServices::new("rig"),
                out: Vec::new(),
            };
            let sink: Arc<dyn CompletionSink<u32>> = rig.sink.clone();
            let mut ctx = Context::new(&mut rig.out, &rig.services.services, 0);
            rig.engine.open(sink, &mut ctx).unwrap();
            rig
        }

        fn record(&mut self, value: u32) {
            let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
            let record = StreamRecord::with_timestamp(value, i64::from(value));
            self.engine.process_element(record, &mut ctx).unwrap();
        }

        fn watermark(&mut self, timestamp: i64) {
            let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
            let watermark = Watermark(timestamp);
            self.engine.process_watermark(watermark, &mut ctx).unwrap();
        }

        /// Applies every delivered completion, then emits; the first error, if any.
        fn apply(&mut self) -> Result<(), OperatorError> {
            let delivered: Vec<_> = self.sink.0.lock().unwrap().drain(..).collect();
            let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
            for completion in delivered {
                self.engine.on_completion(completion, &mut ctx)?;
            }
            self.engine.emit_ready(&mut ctx)
        }

        /// Moves the clock on and fires the timers due. A bounded number of firings: an engine
        /// that keeps setting its timer for a time already passed fails the test here instead
        /// of hanging it.
        fn advance(&mut self, millis: i64) {
            const MAX_FIRINGS: usize = 10_000;
            self.services.clock.advance(millis);
            let mut fired = 0;
            while let Some(timer) = self.services.timers.pop_due() {
                fired += 1;
                assert!(
                    fired <= MAX_FIRINGS,
                    "more than {MAX_FIRINGS} timers fired in one advance: a timer set again for a time that passed"
                );
                let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
                self.engine.on_timer(timer, &mut ctx).unwrap();
            }
        }

        /// Moves the clock on and takes every due timer *before* firing any, then fires them in
        /// the order `order` puts them: what a timer thread does that took both due timers
        /// and then waited for the lock while the first one's firing ran (so cancelling the
        /// second from the first comes too late).
        fn advance_taking_all(&mut self, millis: i64, order: impl FnOnce(&mut Vec<Timer>)) {
            self.services.clock.advance(millis);
            let mut due: Vec<Timer> =
                std::iter::from_fn(|| self.services.timers.pop_due()).collect();
            order(&mut due);
            for timer in due {
                let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
                self.engine.on_timer(timer, &mut ctx).unwrap();
            }
        }

        fn end_input(&mut self) {
            let mut ctx = Context::new(&mut self.out, &self.services.services, 0);
            self.engine.end_input(&mut ctx).unwrap();
        }

        /// What was emitted, as short strings: `v@ts` for records, `Wts` for watermarks.
        fn emitted(&self) -> Vec<String> {
            self.out
                .iter()
                .map(|e| match e {
                    Emitted::Record(r) => format!("{}@{}", r.value, r.timestamp.unwrap_or(-1)),
                    Emitted::Watermark(w) => format!("W{}", w.0),
                    other => format!("{other:?}"),
                })
                .collect()
        }

        fn snapshot(&self) -> Vec<QueuedInput<u32>> {
            streamtask_core::keygroup::ListState::decode(&self.engine.snapshot().unwrap())
                .unwrap()
                .items
        }
    }

    fn r(value: u32) -> QueuedInput<u32> {
        QueuedInput::Record(StreamRecord::with_timestamp(value, i64::from(value)))
    }

    #[test]
    fn the_queue_fill_shows_in_the_tasks_live_state() {
        use streamtask_core::live::AsyncQueueFill;
        let metrics = Arc::new(streamtask_core::metrics::TaskMetrics::new("rig"));
        let function = ManualAsyncFunction::new();
        let calls = function.calls();
        let config = AsyncConfig::new(OutputMode::Ordered, 4);
        let mut engine = AsyncWaitEngine::new("rig", function, config).unwrap();
        let services = HarnessServices::new("rig")
            .services
            .with_metrics(Arc::clone(&metrics));
        let sink = Arc::new(Keep::default());
        let mut out: Vec<Emitted<u32>> = Vec::new();
        let mut ctx = Context::new(&mut out, &services, 0);
        engine
            .open(Arc::clone(&sink) as Arc<dyn CompletionSink<u32>>, &mut ctx)
            .unwrap();
        let fill = |in_flight| {
            Some(AsyncQueueFill {
                in_flight,
                capacity: 4,
            })
        };
        assert_eq!(metrics.live.async_queue(), fill(0));
        for value in 1..=3 {
            engine
                .process_element(StreamRecord::new(value), &mut ctx)
                .unwrap();
        }
        assert_eq!(metrics.live.async_queue(), fill(3));
        // The head's result leaves the queue; the two behind it wait for theirs.
        assert!(calls.complete(&1, vec![10]));
        for completion in sink.0.lock().unwrap().drain(..) {
            engine.on_completion(completion, &mut ctx).unwrap();
        }
        engine.emit_ready(&mut ctx).unwrap();
        assert_eq!(metrics.live.async_queue(), fill(2));
    }

    fn w(timestamp: i64) -> QueuedInput<u32> {
        QueuedInput::Watermark(Watermark(timestamp))
    }

    fn retry_on_empty(retries: u32, delay_ms: u64) -> RetryPolicy<u32> {
        RetryPolicy::fixed_delay(retries, Duration::from_millis(delay_ms))
            .unwrap()
            .retry_if_result(|values| values.is_empty())
    }

    /// In-flight inputs are list state (so a rescale splits them); a snapshot of the bare list
    /// an older release wrote still restores.
    #[test]
    fn in_flight_inputs_are_list_state_and_the_old_bare_list_still_restores() {
        let mut rig = Rig::new(AsyncConfig::new(OutputMode::Ordered, 4));
        rig.record(1);
        rig.record(2);
        let bytes = rig.engine.snapshot().unwrap();
        assert_eq!(state_kind(&bytes), StateKind::List);

        let old = encode(&vec![r(5), w(5), r(6)]).unwrap();
        let restored = Rig::with(
            ManualAsyncFunction::new(),
            AsyncConfig::new(OutputMode::Ordered, 4),
            Some(&old),
        );
        assert_eq!(restored.snapshot(), vec![r(5), w(5), r(6)]);
        assert_eq!(
            restored.calls.invocation_count(),
            2,
            "both records re-submitted"
        );
    }

    /// Soft backpressure (FLINK-39835): the engine is unavailable from the moment its queue is
    /// full (watermarks count) until a slot frees, and holds nothing meanwhile: its snapshot is
    /// exactly the elements in the queue.
    #[test]
    fn a_full_queue_makes_the_engine_unavailable_until_a_slot_frees() {
        let mut rig = Rig::new(AsyncConfig::new(OutputMode::Ordered, 2));
        assert!(rig.engine.accepts_input());
        rig.record(1);
        assert!(rig.engine.accepts_input(), "one slot left");
        rig.watermark(1);
        assert!(!rig.engine.accepts_input(), "a watermark takes a slot too");
        assert!(!rig.engine.has_held());
        assert_eq!(rig.snapshot(), vec![r(1), w(1)]);
        rig.calls.complete(&1, vec![10]);
        rig.apply().unwrap();
        assert_eq!(rig.emitted(), vec!["10@1", "W1"]);
        assert!(rig.engine.accepts_input(), "emptied");
        rig.record(2);
        rig.record(3);
        assert!(!rig.engine.accepts_input());
        rig.calls.complete(&3, vec![30]);
        rig.apply().unwrap();
        assert!(
            !rig.engine.accepts_input(),
            "ordered: a completed record behind an incomplete one keeps its slot"
        );
        rig.calls.complete(&2, vec![20]);
        rig.apply().unwrap();
        assert!(rig.engine.accepts_input());
        assert_eq!(rig.calls.invocation_count(), 3);
    }

    /// Elements that arrive although the engine is unavailable (an operator before it in a
    /// chain that emits several records for one input) are held, in order, and snapshotted.
    #[test]
    fn elements_pushed_past_a_full_queue_are_held_in_order_and_snapshotted() {
        let mut rig = Rig::new(AsyncConfig::new(OutputMode::Ordered, 2));
        rig.record(1);
        rig.record(2);
        assert!(!rig.engine.accepts_input(), "full");
        rig.watermark(2);
        assert!(!rig.engine.accepts_input(), "one element held");
        rig.record(3);
        assert_eq!(rig.engine.held(), 2);
        assert_eq!(
            rig.calls.invocation_count(),
            2,
            "held records are not invoked"
        );
        assert_eq!(rig.snapshot(), vec![r(1), r(2), w(2), r(3)]);

        rig.calls.complete(&1, vec![10]);
        rig.apply().unwrap();
        // Record 1 left; the watermark took its slot (it waits for record 2).
        assert_eq!(rig.emitted(), vec!["10@1"]);
        assert_eq!(rig.snapshot(), vec![r(2), w(2), r(3)]);
        rig.calls.complete(&2, vec![20]);
        rig.apply().unwrap();
        // Record 2 and the watermark left, and record 3 was admitted into the freed slots.
        assert_eq!(rig.emitted(), vec!["10@1", "20@2", "W2"]);
        assert_eq!(rig.calls.invocation_count(), 3);
        assert!(rig.engine.accepts_input());
    }

    #[test]
    fn a_restore_beyond_the_capacity_admits_what_fits_and_holds_the_rest() {
        let mut first = Rig::new(AsyncConfig::new(OutputMode::Unordered, 10));
        for x in 1..=3 {
            first.record(x);
        }
        first.watermark(3);
        first.record(4);
        let snapshot = first.engine.snapshot().unwrap();

        let mut rig = Rig::with(
            ManualAsyncFunction::new(),
            AsyncConfig::new(OutputMode::Unordered, 2),
            Some(&snapshot),
        );
        assert_eq!(rig.calls.invocation_count(), 2);
        assert_eq!(rig.snapshot(), vec![r(1), r(2), r(3), w(3), r(4)]);
        for x in 1..=4 {
            rig.calls.wait_for_invocations(x as usize);
            rig.calls.complete(&x, vec![x]);
            rig.apply().unwrap();
        }
        assert_eq!(rig.emitted(), vec!["1@1", "2@2", "3@3", "W3", "4@4"]);
        assert!(rig.engine.is_drained());
    }

    #[test]
    fn a_timeout_finding_the_completion_on_its_way_does_nothing() {
        // FLINK-22573: completed, not yet applied, when the timer fires.
        let config =
            AsyncConfig::new(OutputMode::Ordered, 2).with_timeout(Duration::from_millis(10));
        let mut rig = Rig::new(config);
        rig.record(1);
        assert!(rig.calls.complete(&1, vec![10]));
        rig.advance(11);
        assert!(
            rig.calls.timeouts().is_empty(),
            "the timeout hook did not run"
        );
        rig.apply().unwrap();
        assert_eq!(rig.emitted(), vec!["10@1"]);
    }

    #[test]
    fn a_retryable_completion_on_its_way_at_the_timeout_is_final() {
        // The timeout spans all attempts: an attempt that completed before it is the last.
        let config = AsyncConfig::new(OutputMode::Ordered, 2)
            .with_timeout(Duration::from_millis(10))
            .with_retry(retry_on_empty(3, 1));
        let mut rig = Rig::new(config);
        rig.record(1);
        rig.calls.complete(&1, vec![]);
        rig.advance(11);
        rig.apply().unwrap();
        assert_eq!(rig.services.timers.pending(), 0, "no retry was scheduled");
        assert!(rig.engine.is_drained(), "the empty result was final");
        assert_eq!(rig.calls.invocation_count(), 1);
    }

    #[test]
    fn a_timeout_while_a_retry_is_due_cancels_it_and_hands_the_hook_a_new_attempt() {
        // FLINK-30477.
        let function = ManualAsyncFunction::new().with_timeout_fallback(|x: &u32| vec![x + 100]);
        let config = AsyncConfig::new(OutputMode::Ordered, 2)
            .with_timeout(Duration::from_millis(10))
            .with_retry(retry_on_empty(3, 50));
        let mut rig = Rig::with(function, config, None);
        rig.record(1);
        rig.calls.complete(&1, vec![]);
        rig.apply().unwrap();
        assert_eq!(
            rig.services.timers.pending(),
            2,
            "the timeout and the retry"
        );
        rig.advance(11);
        assert_eq!(
            rig.services.timers.pending(),
            0,
            "the retry timer was cancelled"
        );
        let timeouts = rig.calls.timeouts();
        assert_eq!((timeouts.len(), timeouts[0].attempt), (1, 2));
        rig.apply().unwrap();
        assert_eq!(rig.emitted(), vec!["101@1"]);
        rig.advance(100);
        assert_eq!(rig.calls.invocation_count(), 1, "the retry never ran");
    }

    /// A hundred calls admitted one millisecond apart: exactly those not completed time out,
    /// each once and in arrival order, through one timeout timer at a time, set once while
    /// calls are admitted.
    #[test]
    fn spread_calls_time_out_exactly_those_not_completed_each_once_through_one_timer() {
        let function = ManualAsyncFunction::new().with_timeout_fallback(|x: &u32| vec![x + 1000]);
        let config =
            AsyncConfig::new(OutputMode::Unordered, 100).with_timeout(Duration::from_millis(50));
        let mut rig = Rig::with(function, config, None);
        let completes = |x: u32| x.is_multiple_of(3) || x % 7 == 1;
        for x in 0..100 {
            rig.record(x);
            if x == 0 {
                assert_eq!(rig.services.timers.registered(), 1);
            }
            // Those that complete do so at once or, every other one, 40 ms later.
            if completes(x) && x % 2 == 0 {
                assert!(rig.calls.complete(&x, vec![x]));
            }
            if x >= 40 {
                let late = x - 40;
                if completes(late) && late % 2 == 1 {
                    assert!(rig.calls.complete(&late, vec![late]));
                }
            }
            rig.apply().unwrap();
            assert!(rig.services.timers.pending() <= 1, "one timer at a time");
            rig.advance(1);
            rig.apply().unwrap();
            assert!(rig.services.timers.pending() <= 1, "one timer at a time");
        }
        for late in 60..100 {
            if completes(late) && late % 2 == 1 {
                assert!(rig.calls.complete(&late, vec![late]));
            }
            rig.apply().unwrap();
            rig.advance(1);
            rig.apply().unwrap();
            assert!(rig.services.timers.pending() <= 1, "one timer at a time");
        }
        rig.advance(100);
        rig.apply().unwrap();
        let timed_out: Vec<u32> = rig.calls.timeouts().iter().map(|c| c.input).collect();
        let expected: Vec<u32> = (0..100).filter(|&x| !completes(x)).collect();
        assert_eq!(
            timed_out, expected,
            "each call not completed, once, in order"
        );
        let mut emitted: Vec<u32> = rig
            .out
            .iter()
            .map(|e| match e {
                Emitted::Record(r) => r.value,
                other => panic!("{other:?}"),
            })
            .collect();
        emitted.sort_unstable();
        let mut want: Vec<u32> = (0..100)
            .map(|x| if completes(x) { x } else { x + 1000 })
            .collect();
        want.sort_unstable();
        assert_eq!(emitted, want);
        assert!(rig.engine.is_drained());
        assert_eq!(rig.services.timers.pending(), 0, "no call left to time out");
    }

    /// Calls that complete well within the timeout leave the timer alone: about one is set
    /// per timeout period, none per call.
    #[test]
    fn completing_calls_register_and_cancel_no_timer_of_their_own() {
        let config =
            AsyncConfig::new(OutputMode::Ordered, 4).with_timeout(Duration::from_millis(50));
        let mut rig = Rig::new(config);
        for x in 0..1000 {
            rig.record(x);
            rig.calls.complete(&x, vec![x]);
            rig.apply().unwrap();
            rig.advance(1);
        }
        assert_eq!(rig.emitted().len(), 1000);
        assert!(rig.calls.timeouts().is_empty());
        // One timer per 50 ms of admissions (a firing finds no call due and sets the next).
        let registered = rig.services.timers.registered();
        assert!(registered <= 1000 / 50 + 1, "{registered} timers set");
        // Idle while open, the timer stays; at the end of input it goes.
        rig.end_input();
        assert_eq!(
            rig.services.timers.pending(),
            0,
            "no timer outlives the input"
        );
    }

    /// The last completion after the end of input takes the timeout timer down.
    #[test]
    fn the_last_completion_after_the_end_of_input_cancels_the_timeout_timer() {
        let function = ManualAsyncFunction::new().with_timeout_fallback(|x: &u32| vec![x + 100]);
        let config =
            AsyncConfig::new(OutputMode::Ordered, 4).with_timeout(Duration::from_millis(50));
        let mut rig = Rig::with(function, config, None);
        rig.record(1);
        rig.advance(10);
        rig.record(2);
        rig.end_input();
        assert_eq!(rig.services.timers.pending(), 1);
        rig.calls.complete(&1, vec![10]);
        rig.apply().unwrap();
        assert_eq!(rig.services.timers.pending(), 1, "record 2 still needs it");
        rig.advance(41);
        rig.apply().unwrap();
        assert!(rig.calls.timeouts().is_empty(), "record 1 completed");
        assert_eq!(rig.services.timers.pending(), 1, "set again for record 2");
        rig.advance(10);
        rig.apply().unwrap();
        assert_eq!(rig.calls.timeouts().len(), 1);
        assert_eq!(rig.emitted(), vec!["10@1", "102@2"]);
        assert_eq!(rig.services.timers.pending(), 0);
    }

    /// Restored elements are admitted with fresh deadlines, counted from the restore.
    #[test]
    fn restored_calls_get_fresh_deadlines() {
        let config =
            || AsyncConfig::new(OutputMode::Ordered, 4).with_timeout(Duration::from_millis(50));
        let mut first = Rig::new(config());
        first.record(1);
        first.record(2);
        let snapshot = first.engine.snapshot().unwrap();
        let function = ManualAsyncFunction::new().with_timeout_fallback(|x: &u32| vec![x + 100]);
        let mut rig = Rig::with(function, config(), Some(&snapshot));
        rig.advance(50);
        assert!(rig.calls.timeouts().is_empty());
        rig.advance(1);
        assert_eq!(rig.calls.timeouts().len(), 2);
        rig.apply().unwrap();
        assert_eq!(rig.emitted(), vec!["101@1", "102@2"]);
    }

    #[test]
    fn completions_of_stale_attempts_and_emitted_entries_are_ignored() {
        let config = AsyncConfig::new(OutputMode::Ordered, 2)
            .with_timeout(Duration::from_secs(60))
            .with_retry(retry_on_empty(3, 5));
        let mut rig = Rig::new(config);
        rig.record(1);
        rig.calls.complete(&1, vec![]);
        rig.apply().unwrap();
        rig.advance(6);
        assert_eq!(rig.calls.wait_for_invocations(2)[1].attempt, 2);
        let mut ctx = Context::new(&mut rig.out, &rig.services.services, 0);
        let stale = Completion {
            entry: 0,
            attempt: 1,
            outcome: AsyncOutcome::Results(vec![666]),
        };
        rig.engine.on_completion(stale, &mut ctx).unwrap();
        rig.calls.complete(&1, vec![11]);
        rig.apply().unwrap();
        let late = Completion {
            entry: 0,
            attempt: 2,
            outcome: AsyncOutcome::Results(vec![777]),
        };
        let mut ctx = Context::new(&mut rig.out, &rig.services.services, 0);
        rig.engine.on_completion(late, &mut ctx).unwrap();
        rig.engine.emit_ready(&mut ctx).unwrap();
        assert_eq!(rig.emitted(), vec!["11@1"]);
    }

    #[test]
    fn end_input_runs_due_retries_once_and_makes_every_outcome_final() {
        let config = AsyncConfig::new(OutputMode::Unordered, 4)
            .with_timeout(Duration::from_secs(60))
            .with_retry(retry_on_empty(5, 1000));
        let mut rig = Rig::new(config);
        rig.record(1);
        rig.record(2);
        rig.calls.complete(&1, vec![]);
        rig.apply().unwrap();
        assert!(rig.engine.accepts_input());
        rig.end_input();
        assert!(!rig.engine.accepts_input(), "draining");
        let calls = rig.calls.wait_for_invocations(3);
        assert_eq!((calls[2].input, calls[2].attempt), (1, 2));
        rig.calls.complete(&1, vec![]);
        rig.calls.complete(&2, vec![]);
        rig.apply().unwrap();
        assert!(rig.engine.accepts_input(), "drained");
        assert_eq!(rig.calls.invocation_count(), 3, "no retry after end_input");
        assert!(rig.emitted().is_empty());
    }

    /// A final call's future is renewed for a later call only once nobody else holds it: a
    /// function that keeps its futures (as this one does) never sees one change, and a
    /// completion through the old one is ignored.
    #[test]
    fn a_future_still_held_is_not_renewed_and_a_late_completion_through_it_is_ignored() {
        let mut rig = Rig::new(AsyncConfig::new(OutputMode::Ordered, 1));
        rig.record(1);
        rig.calls.complete(&1, vec![10]);
        rig.apply().unwrap();
        rig.record(2);
        let calls = rig.calls.invocations();
        let (first, second) = (&calls[0].result, &calls[1].result);
        assert!(first.is_done() && !second.is_done());
        assert_ne!(
            first.entry(),
            second.entry(),
            "a new key for the reused slot"
        );
        assert!(!first.complete(vec![666]), "the old future stays done");
        rig.calls.complete(&2, vec![20]);
        rig.apply().unwrap();
        assert_eq!(rig.emitted(), vec!["10@1", "20@2"]);
    }

    #[test]
    fn an_error_fails_naming_the_input_and_frees_its_slot() {
        let mut rig = Rig::new(AsyncConfig::new(OutputMode::Ordered, 1));
        rig.record(7);
        rig.calls.fail(&7, AsyncError::failed("no such customer"));
        let error = rig.apply().unwrap_err().to_string();
        assert_eq!(
            error,
            "rig: the async call for input 7 (timestamp 7) failed: async call failed: no such \
             customer"
        );
        let mut ctx = Context::new(&mut rig.out, &rig.services.services, 0);
        rig.engine.emit_ready(&mut ctx).unwrap();
        assert!(rig.engine.accepts_input());
    }

    #[test]
    fn the_function_is_opened_once_and_closed_once() {
        let mut rig = Rig::new(AsyncConfig::new(OutputMode::Ordered, 1));
        rig.engine.close().unwrap();
        rig.engine.close().unwrap();
        assert_eq!(rig.calls.opened_and_closed(), (1, 1));
        assert!(!rig.engine.accepts_input());
    }

    fn invoked(rig: &Rig) -> Vec<u32> {
        rig.calls
            .invocations()
            .into_iter()
            .map(|c| c.input)
            .collect()
    }

    #[test]
    fn key_ordered_runs_one_call_per_key_and_emits_each_key_in_input_order() {
        // Keys are last digits: 1, 11 and 21 share key 1.
        let mut rig = Rig::key_ordered(ManualAsyncFunction::new(), 8, None);
        rig.record(1);
        rig.record(11);
        rig.record(2);
        rig.watermark(5);
        rig.record(21);
        rig.record(3);
        assert_eq!(invoked(&rig), vec![1, 2, 3], "11 and 21 wait for 1");
        assert_eq!(
            rig.engine.queue().len(),
            6,
            "waiting records hold their slots"
        );
        rig.calls.complete(&2, vec![2]);
        rig.calls.complete(&3, vec![3]);
        rig.apply().unwrap();
        assert_eq!(
            rig.emitted(),
            vec!["2@2"],
            "no head-of-line blocking across keys"
        );
        rig.calls.complete(&1, vec![1]);
        rig.apply().unwrap();
        assert_eq!(
            invoked(&rig),
            vec![1, 2, 3, 11],
            "11 starts once 1 is final"
        );
        rig.calls.complete(&11, vec![11]);
        rig.apply().unwrap();
        assert_eq!(invoked(&rig), vec![1, 2, 3, 11, 21]);
        // W5 waited for every record before it (11 included); 3 of the next segment left
        // before 21 (another key).
        assert_eq!(rig.emitted(), vec!["2@2", "1@1", "11@11", "W5", "3@3"]);
        rig.calls.complete(&21, vec![21]);
        rig.apply().unwrap();
        assert_eq!(rig.emitted()[5..], ["21@21"]);
        assert!(rig.engine.is_drained());
    }

    #[test]
    fn key_ordered_mode_without_a_key_is_refused() {
        let config = AsyncConfig::new(OutputMode::KeyOrdered, 4);
        let refused = AsyncWaitEngine::new("rig", ManualAsyncFunction::<u32, u32>::new(), config);
        assert_eq!(refused.unwrap_err(), AsyncConfigError::KeyOrderedWithoutKey);
    }

    /// The snapshot is keyed state: every key group's records in input order (completed and
    /// waiting ones alike), the latest watermark in flight as the snapshot's; a restore calls
    /// each key's records again in that order, then forwards the watermark.
    #[test]
    fn key_ordered_in_flight_records_are_snapshotted_by_key_group_and_restored_in_order() {
        let mut rig = Rig::key_ordered(ManualAsyncFunction::new(), 8, None);
        for v in [1, 11, 2, 21, 12] {
            rig.record(v);
        }
        rig.watermark(30);
        rig.calls.complete(&2, vec![2]); // emitted: not in the snapshot
        rig.calls.complete(&1, vec![1]); // emitted too; 11 starts
        rig.apply().unwrap();
        assert_eq!(rig.emitted(), vec!["2@2", "1@1"]);
        let bytes = rig.engine.snapshot().unwrap();
        assert_eq!(state_kind(&bytes), StateKind::KeyGrouped);
        let state = KeyGroupedState::<Vec<QueuedInput<u32>>>::decode(&bytes).unwrap();
        assert_eq!(state.watermark, 30);
        let by_group: Vec<(u32, Vec<QueuedInput<u32>>)> = state.into_groups();
        let group_of = |v: u32| streamtask_core::keygroup::key_group_of(&(v % 10), 128);
        for (group, records) in &by_group {
            assert!(
                records
                    .iter()
                    .all(|r| matches!(r, QueuedInput::Record(x) if group_of(x.value) == *group)),
                "{records:?} in group {group}"
            );
        }
        let mut all: Vec<QueuedInput<u32>> = by_group.into_iter().flat_map(|(_, g)| g).collect();
        let key1: Vec<&QueuedInput<u32>> = all
            .iter()
            .filter(|r| matches!(r, QueuedInput::Record(x) if x.value % 10 == 1))
            .collect();
        assert_eq!(key1, vec![&r(11), &r(21)], "key 1 in input order");
        all.sort_by_key(|e| match e {
            QueuedInput::Record(x) => x.value,
            QueuedInput::Watermark(_) => u32::MAX,
        });
        assert_eq!(all, vec![r(11), r(12), r(21)]);

        let mut restored = Rig::key_ordered(ManualAsyncFunction::new(), 8, Some(&bytes));
        let first = invoked(&restored);
        assert_eq!(first.len(), 2, "one call per key: {first:?}");
        assert!(first.contains(&11) && first.contains(&12), "{first:?}");
        restored.calls.complete(&12, vec![12]);
        restored.calls.complete(&11, vec![11]);
        restored.apply().unwrap();
        restored.calls.complete(&21, vec![21]);
        restored.apply().unwrap();
        let out = restored.emitted();
        assert_eq!(out.last().map(String::as_str), Some("W30"), "{out:?}");
        let pos = |s: &str| out.iter().position(|e| e == s).unwrap();
        assert!(pos("11@11") < pos("21@21"), "{out:?}");
        assert_eq!(out.len(), 4);
    }

    /// FLINK-40456: a retry due at the very instant the call times out. Whichever of the two
    /// timers fires first (a timer thread may have taken both before either ran), the record's
    /// result is emitted exactly once: the timeout hook's, through the attempt it was handed.
    /// The hook answers later (an asynchronous fallback), so the retry timer's firing finds
    /// the call still pending; it must not start another attempt that nothing would ever end.
    #[test]
    fn a_retry_due_at_the_instant_of_the_timeout_emits_the_result_exactly_once() {
        for timeout_first in [true, false] {
            let function = ManualAsyncFunction::new().with_deferred_timeout();
            let config = AsyncConfig::new(OutputMode::Unordered, 4)
                .with_timeout(Duration::from_millis(10))
                .with_retry(retry_on_empty(3, 10));
            let mut rig = Rig::with(function, config, None);
            rig.record(1);
            rig.calls.complete(&1, vec![]); // the retry is due at 10, the deadline too (fire at 11)
            rig.apply().unwrap();
            rig.advance_taking_all(11, |due| {
                assert_eq!(
                    due.len(),
                    2,
                    "the timeout and the retry timers are due together"
                );
                // The timeout timer's tag is even, the retry timer's odd.
                due.sort_by_key(|t| (t.tag & 1 == TIMEOUT_TIMER) != timeout_first);
            });
            let timeouts = rig.calls.wait_for_timeouts(1);
            assert_eq!(timeouts.len(), 1, "timeout first: {timeout_first}");
            // The hook's fallback answers; if the retry ran, its attempt answers too, later.
            assert!(timeouts[0].result.complete(vec![1001]));
            let retried = rig.calls.invocation_count() > 1;
            let late_retry_won = retried && rig.calls.complete(&1, vec![7]);
            rig.apply().unwrap();
            rig.advance(1_000);
            rig.apply().unwrap();
            println!(
                "timeout first: {timeout_first}, invocations {}, retry answered after the \
                 hook and won: {late_retry_won}, emitted {:?}",
                rig.calls.invocation_count(),
                rig.emitted()
            );
            assert!(
                !late_retry_won,
                "the hook's answer was final (timeout first: {timeout_first})"
            );
            assert_eq!(
                rig.emitted(),
                vec!["1001@1"],
                "timeout first: {timeout_first}"
            );
            assert!(rig.engine.is_drained(), "timeout first: {timeout_first}");
            assert_eq!(
                rig.services.timers.pending(),
                0,
                "timeout first: {timeout_first}"
            );
        }
    }

    /// The batch id each call in flight was last called in, by input.
    fn batch_of(rig: &Rig, input: u32) -> u64 {
        rig.engine
            .calls
            .iter()
            .find(|(_, call)| call.input == input)
            .map(|(_, call)| call.batch)
            .unwrap_or_else(|| panic!("{input} is in flight"))
    }

    #[test]
    fn a_batch_retries_its_retried_records_as_one_batch_of_their_own_on_one_timer() {
        let config = AsyncConfig::new(OutputMode::Unordered, 8)
            .with_batch(BatchConfig::new(3, Duration::from_secs(3600)))
            .with_timeout(Duration::from_secs(7200))
            .with_retry(retry_on_empty(3, 10));
        let mut rig = Rig::new(config);
        for v in [1, 2, 3] {
            rig.record(v); // closes by its size
        }
        rig.record(4); // the open batch
        let first = batch_of(&rig, 1);
        assert_ne!(first, 0);
        assert_eq!(batch_of(&rig, 4), 0, "the open batch is not called yet");
        let before = rig.services.timers.registered();
        rig.calls.complete(&1, vec![]); // retried
        rig.calls.complete(&2, vec![20]); // final
        rig.calls.complete(&3, vec![]); // retried
        rig.apply().unwrap();
        assert_eq!(
            rig.services.timers.registered() - before,
            1,
            "one retry timer for the batch"
        );
        assert_eq!(rig.emitted(), vec!["20@2"]);
        rig.advance(11);
        let retried = batch_of(&rig, 1);
        assert_eq!(batch_of(&rig, 3), retried, "retried together");
        assert_ne!(retried, first);
        let open = batch_of(&rig, 4);
        assert_ne!(open, 0, "the open batch was called before the retry");
        assert_ne!(open, retried, "and not with it");
        assert_eq!(
            rig.calls
                .invocations()
                .iter()
                .map(|c| c.input)
                .collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 1, 3]
        );
        for v in [1, 3, 4] {
            assert!(rig.calls.complete(&v, vec![v * 10]));
        }
        rig.apply().unwrap();
        assert_eq!(rig.emitted(), vec!["20@2", "10@1", "30@3", "40@4"]);
        assert!(rig.engine.is_drained());
    }

    #[test]
    fn a_batch_retry_due_at_the_instant_of_its_timeout_gives_each_record_the_hooks_answer_once() {
        for timeout_first in [true, false] {
            let function = ManualAsyncFunction::new().with_deferred_timeout();
            let config = AsyncConfig::new(OutputMode::Ordered, 8)
                .with_batch(BatchConfig::new(2, Duration::from_secs(3600)))
                .with_timeout(Duration::from_millis(10))
                .with_retry(retry_on_empty(3, 10));
            let mut rig = Rig::with(function, config, None);
            rig.record(1);
            rig.record(2); // the batch closes by its size at 0: its deadline is 10
            rig.calls.complete(&1, vec![]);
            rig.calls.complete(&2, vec![]); // the batch's retry is due at 10 too
            rig.apply().unwrap();
            rig.advance_taking_all(11, |due| {
                assert_eq!(due.len(), 2, "the timeout and the batch's retry timers");
                due.sort_by_key(|t| (t.tag == TIMEOUT_TIMER) != timeout_first);
            });
            let timeouts = rig.calls.wait_for_timeouts(2);
            assert_eq!(timeouts.len(), 2, "timeout first: {timeout_first}");
            for hook in &timeouts {
                assert!(hook.result.complete(vec![hook.input + 1000]));
            }
            // If the retry ran first, its attempts answer after the hooks, and lose.
            for v in [1, 2] {
                assert!(
                    !rig.calls.complete(&v, vec![v * 10]),
                    "timeout first: {timeout_first}: the hook's answer was final"
                );
            }
            rig.apply().unwrap();
            rig.advance(1_000);
            rig.apply().unwrap();
            assert_eq!(
                rig.emitted(),
                vec!["1001@1", "1002@2"],
                "timeout first: {timeout_first}"
            );
            assert!(rig.engine.is_drained(), "timeout first: {timeout_first}");
            assert_eq!(
                rig.services.timers.pending(),
                0,
                "timeout first: {timeout_first}"
            );
        }
    }
}
