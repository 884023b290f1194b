//! [`AsyncOperator`]: an operator written with `async fn`s, polled by the mailbox thread, and
//! [`AsyncOperatorDriver`], the [`Operator`] that drives it (the Rust form of Flink's
//! `MailboxExecutor.yield()`).
//!
//! # How a call runs
//!
//! An element, a watermark or a timer of the operator becomes one *call*: the driver moves the
//! operator into a future (`op.process_element(record, &mut cx).await`, then the operator comes
//! back), polls it once, and if it is pending parks it in a thread-local slot of the mailbox
//! thread. The future is never sent anywhere, so it needs no `Send` bound; the driver itself
//! stays `Send` because it holds only the slot's key. One call runs at a time (the handlers
//! take `&mut self`; a keyed operator with many calls in flight, one per key, is a
//! [`KeyedAsyncOperator`](crate::KeyedAsyncOperator)):
//!
//! | state | `accepts_input()` | what runs meanwhile |
//! |---|---|---|
//! | idle | `true` | - |
//! | a call pending | `false` (the task suspends its input; every mail re-checks) | the mails the operator's priority allows: its own wake and timer mails, the mails of the operators after it, checkpoint triggers, notices |
//!
//! # The waker-to-mail protocol
//!
//! The future's [`Waker`] enqueues a wake mail for this operator (an [`OperatorEvent`], so a
//! mail at the operator's priority in the mailbox model). A flag `queued` keeps one wake mail
//! in the mailbox at a time:
//!
//! 1. `wake`: if `queued` was `false`, set it and enqueue a wake mail (from any thread);
//! 2. the wake mail: clear `queued` *before* polling, then poll.
//!
//! A wake during the poll (or after it returned pending) finds `queued` clear and enqueues a
//! new mail, so no wake is lost; a wake while a mail is queued is absorbed by that mail, which
//! polls anyway. A wake after the call finished finds no parked future (ignored); a wake after
//! the task ended is refused by the mailbox and dropped.
//!
//! `cx.sleep_until(t).await` registers a processing-time timer of the operator; its timer mail
//! polls, and the sleep ends once the clock reached `t`. `cx.yield_now().await` enqueues a wake mail and returns
//! pending once: every mail queued before it runs first, and the operator goes on. That is
//! Flink's `yield()` loop without re-entering the operator (it is inside its own future).
//!
//! # Checkpoints while a call is pending
//!
//! The barrier is not held back: the task reads it (its input is suspended for records only)
//! and the checkpoint completes at once. Its snapshot holds the operator's state as it was
//! *before* the pending call (taken when the call started) and the call's input, then any
//! inputs queued behind it (timers); on restore the inputs are run again, in order. What the
//! call emitted is held until the call completes (so it is never both in a checkpoint's
//! prefix and re-emitted by the replay): output stays exactly-once. The price is one
//! `snapshot_state` per call; keep an async operator's own state small.
//!
//! # Other models
//!
//! A future that is not `Send` may be polled only on the thread that made it. The mailbox model
//! (and the bridge's tasks with inputs, which run as mailbox tasks) polls every call on the
//! task thread. The bridge does not chain it behind a legacy source (it waits for its own
//! events, like async I/O), and says so naming `start_new_chain`. The checkpoint-lock model delivers events and timers on other threads (the
//! async-calls and timer threads): there the first wake or timer of a pending call fails the
//! task with [`AsyncOperatorError::ForeignThread`], which names the fix.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, Wake, Waker};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use streamtask_core::operator::{Context, EventSender, OperatorEvent};
use streamtask_core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use streamtask_core::sync::{Arc, Mutex};
use streamtask_core::time::TimerService;
use streamtask_core::{OperatorError, StreamRecord, Watermark, operator::Operator, time::Timer};

use crate::call_waker::WakeEvent;

/// An operator whose element, watermark and timer handlers are `async fn`s polled by the
/// mailbox thread. Run it in a task as an [`AsyncOperatorDriver`].
///
/// The futures need not be `Send`; the operator itself must be (it moves to the task thread).
/// What a handler emits through its [`AsyncContext`] leaves when the handler completes.
///
/// # Examples
///
/// ```
/// use streamtask_core::{OperatorError, StreamRecord};
/// use streamtask_mailbox::{AsyncContext, AsyncOperator};
///
/// /// Waits 10 ms of processing time per record, then emits it doubled.
/// struct SlowDouble;
///
/// impl AsyncOperator for SlowDouble {
///     type In = u64;
///     type Out = u64;
///     fn name(&self) -> &str {
///         "slow-double"
///     }
///     async fn process_element(
///         &mut self,
///         record: StreamRecord<u64>,
///         cx: &mut AsyncContext<u64>,
///     ) -> Result<(), OperatorError> {
///         let now = cx.processing_time();
///         cx.sleep_until(now + 10).await?;
///         cx.collect(record.map(|x| x * 2));
///         Ok(())
///     }
/// }
/// ```
pub trait AsyncOperator: Send + 'static {
    /// The input.
    type In: Send + 'static;
    /// The output.
    type Out: Send + 'static;

    /// The operator's name (for errors and metrics).
    fn name(&self) -> &str;

    /// Restores the operator's own state (`None` on a fresh start).
    ///
    /// # Errors
    ///
    /// A state that does not decode fails the task.
    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        let _ = restored;
        Ok(())
    }

    /// Handles one record; may `.await` anything (a completion, a sleep, a yield).
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_element(
        &mut self,
        record: StreamRecord<Self::In>,
        cx: &mut AsyncContext<Self::Out>,
    ) -> impl Future<Output = Result<(), OperatorError>>;

    /// Handles a watermark; the default forwards it.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        cx: &mut AsyncContext<Self::Out>,
    ) -> impl Future<Output = Result<(), OperatorError>> {
        cx.emit_watermark(watermark);
        std::future::ready(Ok(()))
    }

    /// A processing-time timer the operator registered with [`AsyncContext::register_timer`]
    /// fired; the default does nothing.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn on_timer(
        &mut self,
        timestamp: i64,
        tag: u64,
        cx: &mut AsyncContext<Self::Out>,
    ) -> impl Future<Output = Result<(), OperatorError>> {
        let _ = (timestamp, tag, cx);
        std::future::ready(Ok(()))
    }

    /// The operator's own state, taken before each call (see the module doc); `None` for none.
    ///
    /// # Errors
    ///
    /// A state that does not encode declines the checkpoint.
    fn snapshot_state(&mut self) -> Result<Option<Vec<u8>>, OperatorError> {
        Ok(None)
    }
}

/// Why an async operator cannot run where it was put.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsyncOperatorError {
    /// A pending call was to be polled on another thread than the one that made it (the
    /// checkpoint-lock model delivers wakes and timers on its own threads).
    #[error(
        "async operator {operator} was woken on another thread than its task thread; run it \
         under the mailbox model (or in a bridge task with inputs), or move the waiting into an \
         AsyncFunction behind an AsyncWaitOperator, which every model runs"
    )]
    ForeignThread {
        /// The operator's name.
        operator: String,
    },
    /// A keyed async operator's timer fired: it has no timer handler (its calls await
    /// [`AsyncContext::sleep_until`] instead).
    #[error(
        "keyed async operator {operator} registered a timer, which it has no handler for; \
         await AsyncContext::sleep_until inside the call instead"
    )]
    NoTimerHandler {
        /// The operator's name.
        operator: String,
    },
    /// Processing time could not be waited for: the task's timer service is shut down.
    #[error("async operator {operator} cannot sleep: the task's timers are shut down")]
    TimersShutDown {
        /// The operator's name.
        operator: String,
    },
}

/// Tags of the driver's own timers (sleeps) have this bit set; the operator's own timers may
/// not use it.
pub(crate) const SLEEP_TAG: u64 = 1 << 63;

/// What an [`AsyncOperator`]'s or a [`KeyedAsyncOperator`](crate::KeyedAsyncOperator)'s
/// handlers see: emit, read and wait for processing time, yield. Each call has its own
/// context, so what it emits leaves with it.
pub struct AsyncContext<O> {
    /// What this call emitted; leaves when the call completes.
    emitted: Vec<Emitted<O>>,
    sleeps: Arc<Sleeps>,
    timers: std::sync::Arc<dyn TimerService>,
    operator: usize,
    name: String,
}

/// The sleeps of one driver's calls: distinct tags, and the waker of each pending sleep, so its
/// timer mail can wake the call that sleeps (all on the task thread, but the driver must stay
/// `Send`, so behind the facade's mutex).
pub(crate) struct Sleeps {
    next: AtomicU64,
    wakers: Mutex<HashMap<u64, Waker>>,
}

impl Sleeps {
    pub(crate) fn new() -> Self {
        Sleeps {
            next: AtomicU64::new(0),
            wakers: Mutex::new(HashMap::new()),
        }
    }

    /// The waker of the sleep whose timer (`tag`) fired, if it still waits.
    pub(crate) fn take(&self, tag: u64) -> Option<Waker> {
        self.wakers.lock().remove(&tag)
    }
}

/// An element a call emitted, held until the call completes.
pub(crate) enum Emitted<O> {
    Record(StreamRecord<O>),
    Watermark(Watermark),
}

impl<O> AsyncContext<O> {
    /// A context for one call of the operator at chain index `operator`.
    pub(crate) fn new(
        sleeps: Arc<Sleeps>,
        timers: std::sync::Arc<dyn TimerService>,
        operator: usize,
        name: String,
    ) -> Self {
        AsyncContext {
            emitted: Vec::new(),
            sleeps,
            timers,
            operator,
            name,
        }
    }

    /// What the call emitted, in order.
    pub(crate) fn into_emitted(self) -> Vec<Emitted<O>> {
        self.emitted
    }

    /// Emits `record` (when the call completes).
    pub fn collect(&mut self, record: StreamRecord<O>) {
        self.emitted.push(Emitted::Record(record));
    }

    /// Emits `watermark` (when the call completes).
    pub fn emit_watermark(&mut self, watermark: Watermark) {
        self.emitted.push(Emitted::Watermark(watermark));
    }

    /// The current processing time in milliseconds.
    pub fn processing_time(&self) -> i64 {
        self.timers.current_processing_time()
    }

    /// Registers a processing-time timer that calls [`AsyncOperator::on_timer`] with `tag`.
    ///
    /// # Errors
    ///
    /// [`AsyncOperatorError::TimersShutDown`] once the task is over.
    ///
    /// # Panics
    ///
    /// If `tag` has its top bit set (those tags are the driver's own).
    pub fn register_timer(&self, timestamp: i64, tag: u64) -> Result<(), OperatorError> {
        assert!(
            tag & SLEEP_TAG == 0,
            "timer tags with the top bit set are reserved"
        );
        self.register(timestamp, tag)
    }

    /// Waits until processing time reaches `timestamp` (a timer mail of this operator).
    ///
    /// # Errors
    ///
    /// [`AsyncOperatorError::TimersShutDown`] once the task is over.
    pub async fn sleep_until(&self, timestamp: i64) -> Result<(), OperatorError> {
        // Relaxed: a counter for distinct tags, on one thread.
        let tag = SLEEP_TAG | self.sleeps.next.fetch_add(1, Ordering::Relaxed);
        self.register(timestamp, tag)?;
        std::future::poll_fn(|cx| {
            // The clock, not the timer mail, decides: a stale timer (one restored from before
            // a failure, with a tag reused since) only causes a poll that finds it too early.
            if self.timers.current_processing_time() >= timestamp {
                self.sleeps.wakers.lock().remove(&tag);
                Poll::Ready(())
            } else {
                // The timer mail wakes this call (a driver with many calls must know which).
                self.sleeps.wakers.lock().insert(tag, cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        Ok(())
    }

    /// Lets every mail queued now at this operator's priority or above run, then goes on:
    /// Flink's `MailboxExecutor.yield()`, as an `.await`.
    pub async fn yield_now(&self) {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                Poll::Ready(())
            } else {
                yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await;
    }

    fn register(&self, timestamp: i64, tag: u64) -> Result<(), OperatorError> {
        self.timers
            .register_timer(Timer {
                operator: self.operator,
                timestamp,
                tag,
            })
            .map(|_| ())
            .map_err(|_| OperatorError::User {
                operator: self.name.clone(),
                source: Box::new(AsyncOperatorError::TimersShutDown {
                    operator: self.name.clone(),
                }),
            })
    }
}

impl<O> fmt::Debug for AsyncContext<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncContext")
            .field("operator", &self.name)
            .finish()
    }
}

/// A [`Waker`] that enqueues a wake mail for the operator (see the module doc's protocol).
struct WakeMail {
    events: EventSender,
    queued: AtomicBool,
}

impl Wake for WakeMail {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        // AcqRel: pairs with the wake mail's clearing store, so a wake after the clear enqueues
        // a new mail.
        if !self.queued.swap(true, Ordering::AcqRel) && self.events.send(WakeEvent).is_err() {
            log::debug!(
                "a wake for operator {} arrived after its task ended; dropped",
                self.events.operator()
            );
        }
    }
}

/// A pending call: not `Send`, so it stays on the thread that made it.
type ParkedCall = Pin<Box<dyn Future<Output = ()>>>;

thread_local! {
    /// Pending calls of this thread's async operators, by key.
    static PARKED: RefCell<HashMap<u64, ParkedCall>> = RefCell::new(HashMap::new());
}

/// Keys for [`PARKED`], unique in the process.
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

/// A call's input, kept for the snapshot until the call completes.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum CallInput<I> {
    Record(StreamRecord<I>),
    Watermark(Watermark),
    Timer { timestamp: i64, tag: u64 },
}

#[derive(Serialize, Deserialize)]
struct Snapshot<I> {
    state: Option<Vec<u8>>,
    calls: Vec<CallInput<I>>,
}

type Finished<A> = (
    Box<A>,
    Result<(), OperatorError>,
    Vec<Emitted<<A as AsyncOperator>::Out>>,
);

/// The running call's input, and the operator's state from before it (what a checkpoint takes).
type Running<I> = (CallInput<I>, Option<Vec<u8>>);

/// Runs an [`AsyncOperator`] as an [`Operator`] in a task (see the module doc).
///
/// # Examples
///
/// ```
/// # use streamtask_core::{OperatorError, StreamRecord};
/// # use streamtask_mailbox::{AsyncContext, AsyncOperator};
/// # struct Echo;
/// # impl AsyncOperator for Echo {
/// #     type In = u64; type Out = u64;
/// #     fn name(&self) -> &str { "echo" }
/// #     async fn process_element(&mut self, r: StreamRecord<u64>, cx: &mut AsyncContext<u64>)
/// #         -> Result<(), OperatorError> { cx.yield_now().await; cx.collect(r); Ok(()) }
/// # }
/// use streamtask_runtime::channel::{InputGate, bounded};
/// use streamtask_core::operator::Discard;
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::StreamElement;
/// use streamtask_mailbox::{AsyncOperatorDriver, OneInputStreamTask};
///
/// let (tx, rx) = bounded(8).unwrap();
/// let gate = InputGate::new(vec![rx]).unwrap();
/// let task = OneInputStreamTask::new(TaskConfig::new("doc"), gate, AsyncOperatorDriver::new(Echo), Discard).spawn();
/// tx.send(StreamElement::Record(StreamRecord::new(1))).unwrap();
/// tx.send(StreamElement::EndOfInput).unwrap();
/// assert!(task.join().is_finished());
/// ```
pub struct AsyncOperatorDriver<A: AsyncOperator> {
    name: String,
    /// The operator while no call is pending.
    idle: Option<Box<A>>,
    key: u64,
    /// Where a finished call leaves the operator and its result.
    finished: Arc<Mutex<Option<Finished<A>>>>,
    sleeps: Arc<Sleeps>,
    /// The wake mail's sender and flag, set at `open` (a std `Arc`: what `Waker::from` takes).
    wake: Option<std::sync::Arc<WakeMail>>,
    timers: Option<std::sync::Arc<dyn TimerService>>,
    operator: usize,
    /// The running call's input, and the operator's state from before it.
    running: Option<Running<A::In>>,
    /// Inputs waiting for the running call (timers, restored calls).
    backlog: VecDeque<CallInput<A::In>>,
    home: Option<std::thread::ThreadId>,
}

impl<A: AsyncOperator> AsyncOperatorDriver<A> {
    /// Drives `operator`.
    pub fn new(operator: A) -> Self {
        AsyncOperatorDriver {
            name: operator.name().to_string(),
            idle: Some(Box::new(operator)),
            // Relaxed: only uniqueness matters.
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            finished: Arc::new(Mutex::new(None)),
            sleeps: Arc::new(Sleeps::new()),
            wake: None,
            timers: None,
            operator: 0,
            running: None,
            backlog: VecDeque::new(),
            home: None,
        }
    }

    /// Whether a call is pending.
    pub fn is_pending(&self) -> bool {
        self.running.is_some()
    }

    fn user_error(&self, error: AsyncOperatorError) -> OperatorError {
        OperatorError::User {
            operator: self.name.clone(),
            source: Box::new(error),
        }
    }

    /// Starts `input` now if idle, else queues it.
    fn call(
        &mut self,
        input: CallInput<A::In>,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError>
    where
        A::In: Clone,
    {
        self.backlog.push_back(input);
        self.run_backlog(ctx)
    }

    /// Starts queued calls while the operator is idle.
    fn run_backlog(&mut self, ctx: &mut Context<'_, A::Out>) -> Result<(), OperatorError>
    where
        A::In: Clone,
    {
        while self.running.is_none() {
            let Some(input) = self.backlog.pop_front() else {
                return Ok(());
            };
            let mut op = self
                .idle
                .take()
                .expect("an idle operator has no pending call");
            let before = op.snapshot_state()?;
            let mut cx = AsyncContext::new(
                Arc::clone(&self.sleeps),
                std::sync::Arc::clone(self.timers.as_ref().expect("opened")),
                self.operator,
                self.name.clone(),
            );
            let finished = Arc::clone(&self.finished);
            let call = input.clone();
            let future = async move {
                let result = match call {
                    CallInput::Record(record) => op.process_element(record, &mut cx).await,
                    CallInput::Watermark(watermark) => {
                        op.process_watermark(watermark, &mut cx).await
                    }
                    CallInput::Timer { timestamp, tag } => {
                        op.on_timer(timestamp, tag, &mut cx).await
                    }
                };
                *finished.lock() = Some((op, result, cx.into_emitted()));
            };
            PARKED.with(|parked| parked.borrow_mut().insert(self.key, Box::pin(future)));
            self.running = Some((input, before));
            self.poll(ctx)?;
        }
        Ok(())
    }

    /// Polls the pending call once; on completion emits what it emitted and takes the operator
    /// back.
    fn poll(&mut self, ctx: &mut Context<'_, A::Out>) -> Result<(), OperatorError> {
        if self.running.is_none() {
            return Ok(()); // a wake or sleep for a call that already finished
        }
        if self.home != Some(std::thread::current().id()) {
            return Err(self.user_error(AsyncOperatorError::ForeignThread {
                operator: self.name.clone(),
            }));
        }
        // Out of the map while it runs, so a poll that wakes itself does not re-borrow it.
        let Some(mut future) = PARKED.with(|parked| parked.borrow_mut().remove(&self.key)) else {
            return Ok(());
        };
        let waker = match self.wake.clone() {
            Some(wake) => Waker::from(wake),
            None => Waker::noop().clone(),
        };
        let mut cx = std::task::Context::from_waker(&waker);
        match future.as_mut().poll(&mut cx) {
            Poll::Pending => {
                PARKED.with(|parked| parked.borrow_mut().insert(self.key, future));
                Ok(())
            }
            Poll::Ready(()) => {
                let (op, result, emitted) = self
                    .finished
                    .lock()
                    .take()
                    .expect("a finished call leaves the operator");
                self.idle = Some(op);
                self.running = None;
                for e in emitted {
                    match e {
                        Emitted::Record(r) => ctx.collect(r)?,
                        Emitted::Watermark(w) => ctx.emit_watermark(w)?,
                    }
                }
                result
            }
        }
    }
}

impl<A> Operator for AsyncOperatorDriver<A>
where
    A: AsyncOperator,
    A::In: Clone + Serialize + DeserializeOwned,
{
    type In = A::In;
    type Out = A::Out;

    fn name(&self) -> &str {
        &self.name
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        let Some(bytes) = restored else {
            return self
                .idle
                .as_mut()
                .expect("idle before open")
                .initialize_state(None);
        };
        let snapshot: Snapshot<A::In> =
            serde_json::from_slice(bytes).map_err(|e| OperatorError::User {
                operator: self.name.clone(),
                source: Box::new(e),
            })?;
        self.idle
            .as_mut()
            .expect("idle before open")
            .initialize_state(snapshot.state.as_deref())?;
        // Calls that were pending or queued at the checkpoint run again after open.
        self.backlog.extend(snapshot.calls);
        Ok(())
    }

    fn open(&mut self, ctx: &mut Context<'_, A::Out>) -> Result<(), OperatorError> {
        self.home = Some(std::thread::current().id());
        self.operator = ctx.operator_index();
        self.timers = Some(std::sync::Arc::clone(ctx.services().timers()));
        self.wake = Some(std::sync::Arc::new(WakeMail {
            events: ctx.event_sender(),
            queued: AtomicBool::new(false),
        }));
        self.run_backlog(ctx)
    }

    fn process_element(
        &mut self,
        record: StreamRecord<A::In>,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        self.call(CallInput::Record(record), ctx)
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        self.call(CallInput::Watermark(watermark), ctx)
    }

    fn on_processing_time(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        if timer.tag & SLEEP_TAG != 0 {
            // One call at a time: the sleeper is the pending call, polled right here.
            let _ = self.sleeps.take(timer.tag);
            self.poll(ctx)?;
            return self.run_backlog(ctx);
        }
        self.call(
            CallInput::Timer {
                timestamp: timer.timestamp,
                tag: timer.tag,
            },
            ctx,
        )
    }

    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        match event.downcast::<WakeEvent>() {
            Ok(_) => {
                if let Some(wake) = self.wake.as_ref() {
                    // Release: before the poll, so a wake from now on enqueues another mail.
                    wake.queued.store(false, Ordering::Release);
                }
                self.poll(ctx)?;
                self.run_backlog(ctx)
            }
            Err(_) => Err(OperatorError::UnexpectedEvent {
                operator: self.name.clone(),
            }),
        }
    }

    fn accepts_input(&self) -> bool {
        self.running.is_none() && self.backlog.is_empty()
    }

    fn waits_for_own_events(&self) -> bool {
        true
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        let (state, mut calls) = match &self.running {
            Some((input, before)) => (before.clone(), vec![input.clone()]),
            None => (
                self.idle.as_mut().expect("idle").snapshot_state()?,
                Vec::new(),
            ),
        };
        calls.extend(self.backlog.iter().cloned());
        serde_json::to_vec(&Snapshot { state, calls })
            .map(Some)
            .map_err(|e| OperatorError::User {
                operator: self.name.clone(),
                source: Box::new(e),
            })
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        // Drops a pending call on this thread (its future may not be Send).
        let _ = PARKED.try_with(|parked| parked.borrow_mut().remove(&self.key));
        Ok(())
    }
}

impl<A: AsyncOperator> Drop for AsyncOperatorDriver<A> {
    fn drop(&mut self) {
        // A task that failed before close: free the parked call if it is on this thread.
        let _ = PARKED.try_with(|parked| parked.borrow_mut().remove(&self.key));
    }
}

impl<A: AsyncOperator> fmt::Debug for AsyncOperatorDriver<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncOperatorDriver")
            .field("name", &self.name)
            .field("pending", &self.running.is_some())
            .field("backlog", &self.backlog.len())
            .finish()
    }
}
