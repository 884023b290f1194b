//! [`AsyncWaitOperator`]: the one async I/O operator of every model, over the
//! [`AsyncWaitEngine`].

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::AsyncWaitEngine;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Mutex, thread};
use streamtask_core::async_io::{AsyncConfig, AsyncConfigError, AsyncKey};
use streamtask_core::function::{AsyncFunction, Completion, CompletionSink};
use streamtask_core::operator::{Context, EventSender, Operator, OperatorEvent};
use streamtask_core::{OperatorError, StreamRecord, Watermark, time::Timer};

/// Async I/O (Flink's `AsyncWaitOperator`), the same operator in every model; only the way its
/// completions come back differs.
///
/// The output timestamp is the input's; results leave in input order
/// ([`OutputMode::Ordered`](streamtask_core::async_io::OutputMode::Ordered)) or as they complete, never across a
/// watermark (`Unordered`), or in input order per key with keys independent (`KeyOrdered`, built
/// with [`keyed`](Self::keyed)). Each batch of completions emits every element that became ready
/// (Flink emits one per mail and enqueues another mail for the rest).
///
/// | what | how |
/// |---|---|
/// | a completion (default) | [`ResultFuture`](streamtask_core::function::ResultFuture) on any thread -> a list the operator shares with its sink, and an event for this operator only when the list was empty (a mail at its priority in the mailbox model, the async-calls thread under the lock in the lock model) -> `on_event` applies the whole list and emits what became ready: a burst of completions costs one event |
/// | a completion made on the task thread outside the operator's calls' catching (a function answering inside `invoke` with inline completions off) | an event of its own carrying it (a mail at its priority): nothing else runs on that thread meanwhile, so there is no burst to coalesce, and the list's lock is skipped |
/// | a completion ([`with_completion_sink`](Self::with_completion_sink)) | to the sink (the legacy model's emitter thread), which hands batches back typed through [`on_completions`](Self::on_completions) |
/// | a completion made during the operator's own call (a function that answers at once; [`with_inline_completions`](Self::with_inline_completions), on by default) | caught by the list and applied as soon as the call returns, on the thread that made it: no event, no emitter hand-off |
/// | a timeout, a retry | a timer of this operator -> `on_processing_time` |
/// | a full queue | soft backpressure (FLINK-39835): [`accepts_input`](Operator::accepts_input) is `false` from the moment the queue is full, so the task takes no further element until a completion frees a slot (it still reads a barrier, and the snapshot holds exactly the calls in flight); an element that arrives anyway (restored beyond the capacity, FLINK-7949, or one of several an operator before this one emits for one input) is **held**, in order, in a list that is part of the snapshot, and admitted as completions free slots |
/// | end of input | `end_input` runs due retries at once; `accepts_input()` stays `false` until everything was emitted, so the task's drain runs the completions before the next operator's `end_input` (FLINK-13491) |
/// | an exceptional completion | fails the task with [`OperatorError::Async`], naming the input |
///
/// Flink's operator, when full, waited inside `processElement` (the lock's `wait()` in 1.9, the
/// mailbox's `yield()` from 1.10 to 2.0). Here it cannot: a yield runs mails, and the mails that
/// free slots are this operator's own, which need `&mut self` while `process_element` already
/// holds it; Rust rejects the re-entrance, and rightly (Flink's own yield re-enters the
/// operator). So it says it accepts no more once its queue is full, and the task does the
/// waiting before it takes the next element, as Flink 2.x's operator does (an availability
/// provider, FLINK-39835).
///
/// Why completions are erased events by default: an operator cannot name its task's type (the
/// model's body around the chain), so nothing on another thread can call it typed; its
/// completions travel as [`OperatorEvent`]s to its own index and are downcast back here, one
/// type-id comparison per completion. A runtime that does know the concrete type (the legacy
/// emitter) routes them typed instead.
pub struct AsyncWaitOperator<F: AsyncFunction> {
    engine: AsyncWaitEngine<F>,
    /// Where completions go when not back as events; taken at `open`.
    sink: Option<Arc<dyn CompletionSink<F::Out>>>,
    /// Where the calls' futures deliver (set at `open`): the completions caught during the
    /// operator's own calls, and those waiting for this operator's event.
    route: Option<Arc<CompletionRoute<F::Out>>>,
    /// Whether completions made during the operator's own calls are applied when the call
    /// returns (see [`with_inline_completions`](Self::with_inline_completions)).
    inline: bool,
    /// The buffer the route's list is swapped into (the two take turns, so a burst of
    /// completions allocates nothing).
    arrived: Vec<Completion<F::Out>>,
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
    /// [`AsyncConfigError`] for a capacity of 0, a zero timeout, retries without a timeout, or
    /// key-ordered mode (which needs a key: use [`keyed`](Self::keyed)).
    pub fn new(
        name: impl Into<String>,
        function: F,
        config: AsyncConfig<F::Out>,
    ) -> Result<Self, AsyncConfigError> {
        Ok(AsyncWaitOperator {
            engine: AsyncWaitEngine::new(name, function, config)?,
            sink: None,
            route: None,
            inline: true,
            arrived: Vec::new(),
        })
    }

    /// An operator named `name` running `function` as `config` says, whose records have `key`
    /// ([`OutputMode::KeyOrdered`](streamtask_core::async_io::OutputMode::KeyOrdered) needs
    /// one: a key's results leave in input order, its calls run one at a time, and the
    /// in-flight records are snapshotted by key group).
    ///
    /// # Errors
    ///
    /// [`AsyncConfigError`] for a capacity of 0, a zero timeout, or retries without a timeout.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask_core::async_io::{AsyncConfig, AsyncKey, OutputMode};
    /// use streamtask_core::function::{AsyncFunction, ResultFuture};
    /// use streamtask_runtime::AsyncWaitOperator;
    ///
    /// /// Looks up an order's status (a real client would answer from its I/O thread).
    /// struct Status;
    /// impl AsyncFunction for Status {
    ///     type In = (u32, u64); // (customer, order)
    ///     type Out = String;
    ///     fn invoke(&mut self, input: &(u32, u64), result: ResultFuture<String>) {
    ///         result.complete(vec![format!("order {} shipped", input.1)]);
    ///     }
    /// }
    ///
    /// let config = AsyncConfig::new(OutputMode::KeyOrdered, 100);
    /// let key = AsyncKey::new(128, |order: &(u32, u64)| order.0);
    /// let op = AsyncWaitOperator::keyed("status", Status, config.clone(), key).unwrap();
    /// assert_eq!(op.engine().queue().mode(), OutputMode::KeyOrdered);
    /// // Without a key, key-ordered mode is refused.
    /// assert!(AsyncWaitOperator::new("status", Status, config).is_err());
    /// ```
    pub fn keyed(
        name: impl Into<String>,
        function: F,
        config: AsyncConfig<F::Out>,
        key: AsyncKey<F::In>,
    ) -> Result<Self, AsyncConfigError> {
        Ok(AsyncWaitOperator {
            engine: AsyncWaitEngine::keyed(name, function, config, key)?,
            sink: None,
            route: None,
            inline: true,
            arrived: Vec::new(),
        })
    }

    /// Completions go to `sink` instead of back to the operator as events; the sink's owner
    /// hands them back with [`on_completions`](Self::on_completions) (the legacy model's
    /// emitter thread, under the checkpoint lock).
    pub fn with_completion_sink(mut self, sink: Arc<dyn CompletionSink<F::Out>>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Whether a completion made *during* one of the operator's own calls (a function that
    /// answers at once, on the thread running the operator: a cache hit, a zero-latency
    /// stub) is applied as soon as that call returns, on the same thread, instead of
    /// travelling back as an event mail or through the completion sink (the emitter thread).
    /// On by default: such a completion then costs no mail and no thread hand-off. Off, every
    /// completion takes the model's route, as Flink's do (a mail even from the mailbox
    /// thread). Completions made on other threads always take the route.
    pub fn with_inline_completions(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
    }

    /// The shared engine (for inspection).
    pub fn engine(&self) -> &AsyncWaitEngine<F> {
        &self.engine
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        self.engine.name()
    }

    /// Applies a batch of completions (typed, from a completion sink's owner), then emits every
    /// element that became ready, admitting held elements as slots free up.
    ///
    /// # Errors
    ///
    /// [`OperatorError::Async`] for an exceptional completion; what downstream fails with.
    pub fn on_completions(
        &mut self,
        completions: Vec<Completion<F::Out>>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        // Admitting held elements into the freed slots starts calls: they may answer at once.
        self.catching(ctx, |engine, _, ctx| {
            for completion in completions {
                engine.on_completion(completion, ctx)?;
            }
            engine.emit_ready(ctx)
        })
    }

    /// Runs `call` on the engine; with inline completions on, the completions delivered
    /// meanwhile are caught and applied when it returns (then what they freed is emitted,
    /// which may admit held elements and catch more), until none was caught. See
    /// [`CompletionRoute`] for the protocol.
    #[inline]
    fn catching(
        &mut self,
        ctx: &mut Context<'_, F::Out>,
        call: impl FnOnce(
            &mut AsyncWaitEngine<F>,
            &mut Vec<Completion<F::Out>>,
            &mut Context<'_, F::Out>,
        ) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        let route = self.route.as_deref().filter(|_| self.inline);
        catching(route, &mut self.engine, &mut self.arrived, ctx, call)
    }
}

/// [`AsyncWaitOperator::catching`] over the operator's fields, so a caller can hold its
/// route while the engine runs (the completion event takes the route's list without cloning
/// the route's `Arc`). `route` is `None` when nothing is caught (inline completions off, or
/// not open).
#[inline]
fn catching<F>(
    route: Option<&CompletionRoute<F::Out>>,
    engine: &mut AsyncWaitEngine<F>,
    arrived: &mut Vec<Completion<F::Out>>,
    ctx: &mut Context<'_, F::Out>,
    call: impl FnOnce(
        &mut AsyncWaitEngine<F>,
        &mut Vec<Completion<F::Out>>,
        &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError>,
) -> Result<(), OperatorError>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
{
    let Some(route) = route else {
        return call(engine, arrived, ctx);
    };
    route.begin_catching();
    let mut result = call(engine, arrived, ctx);
    loop {
        let caught = route.end_catching(arrived);
        if !caught || result.is_err() {
            // On an error the task fails; what was caught is replayed from the last
            // checkpoint, as every other in-flight element is.
            arrived.clear();
            return result;
        }
        if !engine.has_held() {
            // Applying starts no call (only admitting a held element does), so nothing can
            // answer inline meanwhile: no catching, and no second take of the list (a
            // completion from another thread meanwhile takes the route).
            return apply(engine, arrived, ctx);
        }
        route.begin_catching();
        result = apply(engine, arrived, ctx);
    }
}

/// Applies `arrived` (emptied) to `engine`, the first error ending it, then emits what is
/// ready.
fn apply<F>(
    engine: &mut AsyncWaitEngine<F>,
    arrived: &mut Vec<Completion<F::Out>>,
    ctx: &mut Context<'_, F::Out>,
) -> Result<(), OperatorError>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
{
    let mut failed = None;
    for completion in arrived.drain(..) {
        if failed.is_none() {
            failed = engine.on_completion(completion, ctx).err();
        }
    }
    match failed {
        Some(error) => Err(error),
        None => engine.emit_ready(ctx),
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
        let forward = match self.sink.take() {
            Some(sink) => Forward::Sink(sink),
            None => Forward::Events(ctx.event_sender()),
        };
        let route = Arc::new(CompletionRoute::new(forward));
        self.route = Some(Arc::clone(&route));
        // Restored elements are admitted here: their calls may answer at once.
        self.catching(ctx, |engine, _, ctx| engine.open(route, ctx))
    }

    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<F::In>,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.catching(ctx, |engine, _, ctx| engine.process_element(record, ctx))
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        self.catching(ctx, |engine, _, ctx| {
            engine.process_watermark(watermark, ctx)
        })
    }

    fn on_processing_time(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        // A due retry starts an attempt.
        self.catching(ctx, |engine, _, ctx| engine.on_timer(timer, ctx))
    }

    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, F::Out>,
    ) -> Result<(), OperatorError> {
        let event = match event.downcast::<OwnCompletion<F::Out>>() {
            Ok(own) => {
                // A completion the task thread made outside a catching call, in its own event.
                return self.catching(ctx, |engine, _, ctx| {
                    engine.on_completion(own.0, ctx)?;
                    engine.emit_ready(ctx)
                });
            }
            Err(event) => event,
        };
        match (event.downcast::<CompletionsReady>(), self.route.as_deref()) {
            (Ok(_), Some(route)) => catching(
                self.inline.then_some(route),
                &mut self.engine,
                &mut self.arrived,
                ctx,
                |engine, arrived, ctx| {
                    // Every completion delivered since the event was sent, and any after it
                    // that found the list non-empty (their event is this one).
                    route.take_into(arrived);
                    apply(engine, arrived, ctx)
                },
            ),
            _ => Err(OperatorError::UnexpectedEvent {
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
        // Due retries start at once.
        self.catching(ctx, |engine, _, ctx| engine.end_input(ctx))
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

/// Where the operator's futures deliver: completions caught during the operator's own calls,
/// and otherwise the model's route: back as events (mails at its priority, in the mailbox
/// model), one event per burst, or on to a completion sink (the legacy model's emitter).
///
/// **Events.** A completion joins a list, and only the one that finds the list empty sends
/// the event, which applies the whole list. A completer that finishes many calls at once (a
/// timer wheel, a pool catching up) so costs one mail, one clock read and one mailbox lock
/// for all of them, not one each. Under the list's lock: `deliver` pushes and sends the event
/// if the list was empty; the event takes the whole list. A completion pushed after the take
/// finds the list empty and sends a new event, so none waits without one; an event that finds
/// the list empty (its completions went with an earlier one) applies nothing. An event refused
/// by a task that ended leaves its completions in the list, dropped with the operator (the
/// task is over; FLINK-24846).
///
/// **Caught.** While the operator runs one of its own calls (`catching`), `catching` is set;
/// a completion that finds it set, *read under the list's lock*, joins the list and sends
/// nothing; when the call returns, the operator clears the flag and takes the list under the
/// lock, and applies what it took. Nothing waits without an event or a taker: a deliver that
/// reads the flag set holds the lock before the operator's take (the take comes after the
/// clear, and a lock taken after the take sees the clear), so the take finds it; one that
/// reads it clear takes the model's route. Completions from other threads during a call may
/// be caught too, which is as correct. The flag is relaxed: the lock orders it. Applying what
/// was caught catches again only while elements are held: admitting one starts a call that may
/// answer at once; with none held, applying starts no call, so the operator applies with the
/// flag clear and takes the list no second time (a completion from another thread meanwhile
/// takes the route, as outside any call).
///
/// **The task thread's own.** A completion made on the thread that opened the operator (the
/// task thread: a function that answers inside `invoke` with inline completions off) while no
/// call catches travels in an event of its own, [`OwnCompletion`], not through the list: the
/// list's lock is then taken by nobody for it (two lock round trips fewer per completion), and
/// a burst on that thread cannot happen (each call returns before the next starts). The
/// `catching` flag is read without the lock there: only that thread writes it. Completions are
/// independent of each other, so one applied ahead of completions waiting in the list changes
/// nothing but the order an unordered queue emits them in, which is completion order anyway.
struct CompletionRoute<O> {
    forward: Forward<O>,
    catching: AtomicBool,
    pending: Mutex<Vec<Completion<O>>>,
    /// The thread that opened the operator (see **The task thread's own**).
    owner: thread::Thread,
}

/// Where a completion goes when it is not caught.
enum Forward<O> {
    /// Back to the operator as an event.
    Events(EventSender),
    /// To a sink, whose owner hands it back typed.
    Sink(Arc<dyn CompletionSink<O>>),
}

/// The event a [`CompletionRoute`] sends: completions wait in its list.
struct CompletionsReady;

/// The event a [`CompletionRoute`] sends for a completion made on the task thread outside a
/// catching call: the completion itself.
struct OwnCompletion<O>(Completion<O>);

impl<O> CompletionRoute<O> {
    fn new(forward: Forward<O>) -> Self {
        CompletionRoute {
            forward,
            catching: AtomicBool::new(false),
            pending: Mutex::new(Vec::new()),
            owner: thread::current(),
        }
    }

    /// Swaps the completions delivered so far (oldest first) into `arrived`, which must be
    /// empty; the list keeps `arrived`'s buffer.
    fn take_into(&self, arrived: &mut Vec<Completion<O>>) {
        debug_assert!(arrived.is_empty());
        std::mem::swap(&mut *self.pending.lock(), arrived);
    }

    #[inline]
    fn begin_catching(&self) {
        self.catching.store(true, Ordering::Relaxed);
    }

    /// Stops catching and swaps what is in the list into `arrived` (empty); whether anything
    /// was.
    #[inline]
    fn end_catching(&self, arrived: &mut Vec<Completion<O>>) -> bool {
        self.catching.store(false, Ordering::Relaxed);
        self.take_into(arrived);
        !arrived.is_empty()
    }
}

impl<O: Send + 'static> CompletionSink<O> for CompletionRoute<O> {
    fn deliver(&self, completion: Completion<O>) {
        if let Forward::Events(events) = &self.forward {
            // Relaxed and unlocked: on the owner thread, the flag is this thread's own write.
            if thread::is_current(&self.owner) && !self.catching.load(Ordering::Relaxed) {
                if events.send(OwnCompletion(completion)).is_err() {
                    log::debug!(
                        "a completion for operator {} arrived after its task ended; dropped",
                        events.operator()
                    );
                }
                return;
            }
        }
        let mut pending = self.pending.lock();
        if self.catching.load(Ordering::Relaxed) {
            pending.push(completion);
            return;
        }
        match &self.forward {
            Forward::Events(events) => {
                pending.push(completion);
                let first = pending.len() == 1;
                // Sent outside the list's lock: the event's mail takes the mailbox's lock,
                // and the owner takes the list's lock while running mails.
                drop(pending);
                if first && events.send(CompletionsReady).is_err() {
                    log::debug!(
                        "a completion for operator {} arrived after its task ended; dropped",
                        events.operator()
                    );
                }
            }
            Forward::Sink(sink) => {
                drop(pending);
                sink.deliver(completion);
            }
        }
    }
}
