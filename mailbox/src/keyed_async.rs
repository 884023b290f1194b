#![doc = include_str!("keyed_async.md")]

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, Waker};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use streamtask_core::keygroup::{
    DEFAULT_MAX_PARALLELISM, KeyGroupedState, StableKey, split_by_key_group,
};
use streamtask_core::operator::{Context, OperatorEvent};
use streamtask_core::sync::atomic::{AtomicU64, Ordering};
use streamtask_core::sync::{Arc, Mutex};
use streamtask_core::time::TimerService;
use streamtask_core::{
    OperatorError, StreamRecord, StreamStatus, Watermark, operator::Operator, time::Timer,
};

use crate::async_operator::{AsyncContext, AsyncOperatorError, Emitted, SLEEP_TAG, Sleeps};
use crate::call_waker::{CallWaker, WakeEvent, WakeQueue};

/// The in-flight cap of a [`KeyedAsyncOperatorDriver`] unless set: at most this many records
/// (running, or waiting behind a running record of their key) at once.
///
/// Flink's `AsyncExecutionController` defaults to 6,000. Here every record in flight is part of
/// every checkpoint (its input is snapshotted and run again on restore, see the module doc),
/// so the cap also bounds the checkpoint; 1,000 calls of 1 ms in flight already allow
/// 1,000,000 records/s, more than one task thread completes, so a larger default would only
/// grow checkpoints. Raise it for slower calls (Little's law: cap = rate x latency).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1_000;

/// An operator on a keyed stream whose element handler is an `async fn`, with many records in
/// flight at once on the mailbox thread and one at a time per key (the Rust form of Flink 2.x's
/// async state processing, FLIP-425). Run it in a task as a [`KeyedAsyncOperatorDriver`].
///
/// Each call gets its key, the key's state (`None` if the key has none; set it to `None` to
/// clear it) and its own [`AsyncContext`]. A call of a key starts only after the previous call
/// of that key completed, so it sees that call's state. What a call emits leaves when it
/// completes. The futures need not be `Send`; the operator is shared by the calls in flight
/// (hence `&self` and `Sync`), its per-key state is not.
///
/// Timers registered with [`AsyncContext::register_timer`] have no handler here (the task fails
/// with [`AsyncOperatorError::NoTimerHandler`]); await [`AsyncContext::sleep_until`] instead.
///
/// # Examples
///
/// ```
/// use streamtask_core::{OperatorError, StreamRecord};
/// use streamtask_mailbox::{AsyncContext, KeyedAsyncOperator};
///
/// /// Per user: waits 1 ms of processing time (a lookup), then emits the user's running count.
/// struct CountClicks;
///
/// impl KeyedAsyncOperator for CountClicks {
///     type Key = u32;
///     type In = (u32, String);
///     type Out = (u32, u64);
///     type State = u64;
///     fn name(&self) -> &str {
///         "count-clicks"
///     }
///     async fn process_element(
///         &self,
///         user: &u32,
///         count: &mut Option<u64>,
///         record: StreamRecord<(u32, String)>,
///         cx: &mut AsyncContext<(u32, u64)>,
///     ) -> Result<(), OperatorError> {
///         let now = cx.processing_time();
///         cx.sleep_until(now + 1).await?;
///         let n = count.get_or_insert(0);
///         *n += 1;
///         cx.collect(record.map(|_| (*user, *n)));
///         Ok(())
///     }
/// }
/// ```
pub trait KeyedAsyncOperator: Send + Sync + 'static {
    /// The key (what the stream is keyed by).
    type Key: StableKey + Ord + Clone + Serialize + DeserializeOwned + Send + 'static;
    /// The input (snapshotted while in flight).
    type In: Clone + Serialize + DeserializeOwned + Send + 'static;
    /// The output.
    type Out: Send + 'static;
    /// One key's state.
    type State: Clone + Serialize + DeserializeOwned + Send + 'static;

    /// The operator's name (for errors and metrics).
    fn name(&self) -> &str;

    /// Handles one record of `key`, whose state is `state`; may `.await` anything.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_element(
        &self,
        key: &Self::Key,
        state: &mut Option<Self::State>,
        record: StreamRecord<Self::In>,
        cx: &mut AsyncContext<Self::Out>,
    ) -> impl Future<Output = Result<(), OperatorError>>;
}

/// A running call: not `Send`, so it stays on the thread that made it.
type ParkedCall = Pin<Box<dyn Future<Output = ()>>>;

thread_local! {
    /// Calls in flight of this thread's keyed async operators, by (driver, call).
    static PARKED: RefCell<HashMap<(u64, u64), ParkedCall>> = RefCell::new(HashMap::new());
}

/// Driver ids for [`PARKED`], unique in the process.
static NEXT_DRIVER: AtomicU64 = AtomicU64::new(0);

/// What a completed call leaves: the key's new state, what it emitted, its result.
type Done<A> = (
    Option<<A as KeyedAsyncOperator>::State>,
    Vec<Emitted<<A as KeyedAsyncOperator>::Out>>,
    Result<(), OperatorError>,
);

/// A record the operator holds, with the epoch it arrived in.
struct Admitted<I> {
    epoch: u64,
    record: StreamRecord<I>,
}

/// A key with a call running, and the records of the key waiting behind it.
struct Busy<I> {
    call: u64,
    waiting: VecDeque<Admitted<I>>,
}

struct Running<K, I> {
    key: K,
    admitted: Admitted<I>,
    waker: std::sync::Arc<CallWaker>,
}

/// A watermark or status held until every record before it completed.
enum Held {
    Watermark(Watermark),
    Status(StreamStatus),
}

/// The records that arrived between two held elements.
#[derive(Default)]
struct Epoch {
    /// Its records not yet completed.
    pending: usize,
    /// What closed it (`None` for the open epoch, the last).
    closed_by: Option<Held>,
}

/// What one key group holds in a snapshot: its keys' states and, per key in arrival order, the
/// inputs of its records in flight (running first, then waiting).
#[derive(Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize, S: Serialize, I: Serialize",
    deserialize = "K: DeserializeOwned, S: DeserializeOwned, I: DeserializeOwned"
))]
struct GroupEntries<K, S, I> {
    states: Vec<(K, S)>,
    in_flight: Vec<StreamRecord<I>>,
}

enum Entry<K, S, I> {
    State(K, S),
    InFlight(K, StreamRecord<I>),
}

/// Runs a [`KeyedAsyncOperator`] as an [`Operator`] in a task: many calls in flight, one per
/// key, at most [`max_in_flight`](Self::with_max_in_flight) records held (see the module doc).
///
/// # Examples
///
/// ```
/// # use streamtask_core::{OperatorError, StreamRecord};
/// # use streamtask_mailbox::{AsyncContext, KeyedAsyncOperator};
/// # struct Sum;
/// # impl KeyedAsyncOperator for Sum {
/// #     type Key = u64; type In = u64; type Out = u64; type State = u64;
/// #     fn name(&self) -> &str { "sum" }
/// #     async fn process_element(&self, _k: &u64, s: &mut Option<u64>, r: StreamRecord<u64>,
/// #         cx: &mut AsyncContext<u64>) -> Result<(), OperatorError> {
/// #         cx.yield_now().await;
/// #         let sum = s.get_or_insert(0); *sum += r.value; cx.collect(r.map(|_| *sum)); Ok(())
/// #     }
/// # }
/// use streamtask_core::operator::{Chain, Discard};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::StreamElement;
/// use streamtask_mailbox::{KeyedAsyncOperatorDriver, OneInputStreamTask};
/// use streamtask_runtime::channel::{InputGate, bounded};
///
/// let (tx, rx) = bounded(8).unwrap();
/// let gate = InputGate::new(vec![rx]).unwrap();
/// let sums = KeyedAsyncOperatorDriver::new(Sum, |x: &u64| x % 2).with_max_in_flight(100);
/// let task = OneInputStreamTask::new(TaskConfig::new("doc"), gate, sums, Discard).spawn();
/// for x in 1..=4 {
///     tx.send(StreamElement::Record(StreamRecord::new(x))).unwrap();
/// }
/// tx.send(StreamElement::EndOfInput).unwrap();
/// assert!(task.join().is_finished());
/// ```
pub struct KeyedAsyncOperatorDriver<A: KeyedAsyncOperator, KF> {
    name: String,
    operator: std::sync::Arc<A>,
    key_of: KF,
    max_in_flight: usize,
    max_parallelism: u32,
    /// This driver's part of [`PARKED`].
    driver: u64,
    /// The state of every key, as of its last completed call: a running call works on a copy,
    /// so a snapshot never sees a write of a call in flight.
    states: BTreeMap<A::Key, A::State>,
    /// Keys with a call running.
    busy: BTreeMap<A::Key, Busy<A::In>>,
    running: HashMap<u64, Running<A::Key, A::In>>,
    next_call: u64,
    /// Records held: running or waiting behind their key.
    admitted: usize,
    /// The epochs still open or holding an element, oldest first; the last is open.
    epochs: VecDeque<Epoch>,
    /// The id of `epochs[0]`.
    first_epoch: u64,
    /// The newest watermark that arrived (held or forwarded).
    watermark: Option<Watermark>,
    /// Restored inputs, admitted at `open`.
    restored: Vec<StreamRecord<A::In>>,
    /// Where a completed call leaves what it did.
    finished: Arc<Mutex<Option<Done<A>>>>,
    sleeps: Arc<Sleeps>,
    wakes: Option<Arc<WakeQueue>>,
    timers: Option<std::sync::Arc<dyn TimerService>>,
    /// The task's metrics, whose live state shows the records held against the cap (the
    /// stalled-checkpoint report reads it as the task's async queue).
    metrics: Option<std::sync::Arc<streamtask_core::metrics::TaskMetrics>>,
    index: usize,
    home: Option<std::thread::ThreadId>,
    /// `end_input` ran: `accepts_input` now says whether everything completed.
    ending: bool,
}

impl<A, KF> KeyedAsyncOperatorDriver<A, KF>
where
    A: KeyedAsyncOperator,
    KF: Fn(&A::In) -> A::Key + Send + 'static,
{
    /// Drives `operator`, keying each record by `key_of`, with the default cap
    /// ([`DEFAULT_MAX_IN_FLIGHT`]) and max parallelism.
    pub fn new(operator: A, key_of: KF) -> Self {
        KeyedAsyncOperatorDriver {
            name: operator.name().to_string(),
            operator: std::sync::Arc::new(operator),
            key_of,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            // Relaxed: only uniqueness matters.
            driver: NEXT_DRIVER.fetch_add(1, Ordering::Relaxed),
            states: BTreeMap::new(),
            busy: BTreeMap::new(),
            running: HashMap::new(),
            next_call: 0,
            admitted: 0,
            epochs: VecDeque::from([Epoch::default()]),
            first_epoch: 0,
            watermark: None,
            restored: Vec::new(),
            finished: Arc::new(Mutex::new(None)),
            sleeps: Arc::new(Sleeps::new()),
            wakes: None,
            timers: None,
            metrics: None,
            index: 0,
            home: None,
            ending: false,
        }
    }

    /// At most `max_in_flight` records held at once (running, or waiting behind their key);
    /// the task takes no input while at the cap. `1` runs one call at a time.
    ///
    /// # Panics
    ///
    /// If `max_in_flight` is 0.
    pub fn with_max_in_flight(mut self, max_in_flight: usize) -> Self {
        assert!(max_in_flight > 0, "the in-flight cap must be at least 1");
        self.max_in_flight = max_in_flight;
        self
    }

    /// The job's max parallelism, which cuts the snapshot into key groups (the default is
    /// [`DEFAULT_MAX_PARALLELISM`]).
    pub fn with_max_parallelism(mut self, max_parallelism: u32) -> Self {
        self.max_parallelism = max_parallelism;
        self
    }

    /// Records held now: running, or waiting behind a running record of their key.
    pub fn in_flight(&self) -> usize {
        self.admitted
    }

    /// Shows the records held in the task's live state.
    #[inline]
    fn publish_fill(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.live.set_async_in_flight(self.admitted);
        }
    }

    fn user_error(&self, error: AsyncOperatorError) -> OperatorError {
        OperatorError::User {
            operator: self.name.clone(),
            source: Box::new(error),
        }
    }

    /// Takes `record` of `key` in: starts it, or queues it behind its key's running call.
    fn admit(
        &mut self,
        key: A::Key,
        record: StreamRecord<A::In>,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        let open = self.epochs.back_mut().expect("an open epoch");
        open.pending += 1;
        let admitted = Admitted {
            epoch: self.first_epoch + self.epochs.len() as u64 - 1,
            record,
        };
        self.admitted += 1;
        self.publish_fill();
        match self.busy.get_mut(&key) {
            // Per-key order: it starts once the call before it completed.
            Some(busy) => {
                busy.waiting.push_back(admitted);
                Ok(())
            }
            None => self.start(key, admitted, ctx),
        }
    }

    /// Starts `admitted` (its key has no call running) and polls it once; a call that
    /// completes at once starts the next record of its key, and so on.
    fn start(
        &mut self,
        key: A::Key,
        admitted: Admitted<A::In>,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        let mut next = Some((key, admitted));
        while let Some((key, admitted)) = next.take() {
            let id = self.next_call;
            self.next_call += 1;
            let wakes = Arc::clone(self.wakes.as_ref().expect("calls start after open"));
            let waker = std::sync::Arc::new(CallWaker::new(id, wakes));
            // The call works on a copy: the committed state stays what a snapshot takes.
            let state = self.states.get(&key).cloned();
            let mut cx = AsyncContext::new(
                Arc::clone(&self.sleeps),
                std::sync::Arc::clone(self.timers.as_ref().expect("opened")),
                self.index,
                self.name.clone(),
            );
            let operator = std::sync::Arc::clone(&self.operator);
            let finished = Arc::clone(&self.finished);
            let record = admitted.record.clone();
            let call_key = key.clone();
            let future = async move {
                let mut state = state;
                let result = operator
                    .process_element(&call_key, &mut state, record, &mut cx)
                    .await;
                *finished.lock() = Some((state, cx.into_emitted(), result));
            };
            PARKED.with(|parked| {
                parked
                    .borrow_mut()
                    .insert((self.driver, id), Box::pin(future))
            });
            match self.busy.get_mut(&key) {
                Some(busy) => busy.call = id,
                None => {
                    self.busy.insert(
                        key.clone(),
                        Busy {
                            call: id,
                            waiting: VecDeque::new(),
                        },
                    );
                }
            }
            self.running.insert(
                id,
                Running {
                    key,
                    admitted,
                    waker,
                },
            );
            next = self.poll(id, ctx)?;
        }
        Ok(())
    }

    /// Polls call `id` once (if it is still in flight); on completion applies it and returns
    /// the next record of its key, if one waits.
    #[allow(clippy::type_complexity)]
    fn poll(
        &mut self,
        id: u64,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<Option<(A::Key, Admitted<A::In>)>, OperatorError> {
        let Some(running) = self.running.get(&id) else {
            return Ok(None); // a wake for a call that already completed
        };
        if self.home != Some(std::thread::current().id()) {
            return Err(self.user_error(AsyncOperatorError::ForeignThread {
                operator: self.name.clone(),
            }));
        }
        // Out of the map while it runs, so a poll that wakes itself does not re-borrow it.
        let Some(mut future) = PARKED.with(|parked| parked.borrow_mut().remove(&(self.driver, id)))
        else {
            return Ok(None);
        };
        running.waker.begin_poll();
        let waker = Waker::from(std::sync::Arc::clone(&running.waker));
        match future
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
        {
            Poll::Pending => {
                PARKED.with(|parked| parked.borrow_mut().insert((self.driver, id), future));
                Ok(None)
            }
            Poll::Ready(()) => self.complete(id, ctx),
        }
    }

    /// Applies completed call `id`: its state, its output, its epoch; frees its key or hands
    /// back the key's next record.
    #[allow(clippy::type_complexity)]
    fn complete(
        &mut self,
        id: u64,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<Option<(A::Key, Admitted<A::In>)>, OperatorError> {
        let (state, emitted, result) = self
            .finished
            .lock()
            .take()
            .expect("a completed call leaves its result");
        let running = self.running.remove(&id).expect("a running call");
        result?;
        match state {
            Some(state) => self.states.insert(running.key.clone(), state),
            None => self.states.remove(&running.key),
        };
        for e in emitted {
            match e {
                Emitted::Record(r) => ctx.collect(r)?,
                Emitted::Watermark(w) => ctx.emit_watermark(w)?,
            }
        }
        self.admitted -= 1;
        self.publish_fill();
        let index = usize::try_from(running.admitted.epoch - self.first_epoch)
            .expect("an epoch in the window");
        self.epochs[index].pending -= 1;
        self.release_epochs(ctx)?;
        let busy = self.busy.get_mut(&running.key).expect("its key is busy");
        match busy.waiting.pop_front() {
            Some(next) => Ok(Some((running.key, next))),
            None => {
                self.busy.remove(&running.key);
                Ok(None)
            }
        }
    }

    /// Emits what closed each finished epoch, oldest first (epochs: a watermark leaves only
    /// after every record that arrived before it completed).
    fn release_epochs(&mut self, ctx: &mut Context<'_, A::Out>) -> Result<(), OperatorError> {
        while self.epochs.len() > 1 && self.epochs[0].pending == 0 {
            let epoch = self.epochs.pop_front().expect("a closed epoch");
            self.first_epoch += 1;
            match epoch.closed_by.expect("only the last epoch is open") {
                Held::Watermark(w) => ctx.emit_watermark(w)?,
                Held::Status(s) => ctx.emit_status(s)?,
            }
        }
        Ok(())
    }

    /// Closes the open epoch with `held`, which leaves once the epoch's records completed.
    fn close_epoch(
        &mut self,
        held: Held,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        self.epochs.back_mut().expect("an open epoch").closed_by = Some(held);
        self.epochs.push_back(Epoch::default());
        self.release_epochs(ctx)
    }

    /// The wake mail: polls every call woken since the last one.
    fn run_woken(&mut self, ctx: &mut Context<'_, A::Out>) -> Result<(), OperatorError> {
        let Some(wakes) = self.wakes.as_ref() else {
            return Ok(());
        };
        for id in wakes.take() {
            if let Some((key, next)) = self.poll(id, ctx)? {
                self.start(key, next, ctx)?;
            }
        }
        Ok(())
    }
}

impl<A, KF> Operator for KeyedAsyncOperatorDriver<A, KF>
where
    A: KeyedAsyncOperator,
    KF: Fn(&A::In) -> A::Key + Send + 'static,
{
    type In = A::In;
    type Out = A::Out;

    fn name(&self) -> &str {
        &self.name
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        let Some(bytes) = restored else {
            return Ok(());
        };
        let snapshot: KeyGroupedState<GroupEntries<A::Key, A::State, A::In>> =
            KeyGroupedState::decode(bytes).map_err(|e| OperatorError::state(&self.name, e))?;
        if snapshot.watermark > i64::MIN {
            self.watermark = Some(Watermark(snapshot.watermark));
        }
        for (_, group) in snapshot.into_groups() {
            self.states.extend(group.states);
            // Per key in arrival order; keys of different groups may interleave in any order.
            self.restored.extend(group.in_flight);
        }
        Ok(())
    }

    fn open(&mut self, ctx: &mut Context<'_, A::Out>) -> Result<(), OperatorError> {
        self.home = Some(std::thread::current().id());
        self.index = ctx.operator_index();
        self.timers = Some(std::sync::Arc::clone(ctx.services().timers()));
        self.wakes = Some(Arc::new(WakeQueue::new(ctx.event_sender())));
        self.metrics = ctx.services().metrics().cloned();
        if let Some(metrics) = &self.metrics {
            metrics.live.set_async_capacity(self.max_in_flight);
        }
        // The records in flight at the checkpoint run again, then the watermark that was held
        // behind them (or forwarded already: a watermark again is harmless) leaves after them.
        for record in std::mem::take(&mut self.restored) {
            let key = (self.key_of)(&record.value);
            self.admit(key, record, ctx)?;
        }
        if let Some(watermark) = self.watermark {
            self.close_epoch(Held::Watermark(watermark), ctx)?;
        }
        Ok(())
    }

    fn process_element(
        &mut self,
        record: StreamRecord<A::In>,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        let key = (self.key_of)(&record.value);
        self.admit(key, record, ctx)
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        self.watermark = self.watermark.max(Some(watermark));
        self.close_epoch(Held::Watermark(watermark), ctx)
    }

    fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        self.close_epoch(Held::Status(status), ctx)
    }

    fn on_processing_time(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        if timer.tag & SLEEP_TAG == 0 {
            return Err(self.user_error(AsyncOperatorError::NoTimerHandler {
                operator: self.name.clone(),
            }));
        }
        // Wake the sleeping call through its waker (this mail runs on the task thread, so the
        // call is polled right here, not in a later wake mail).
        if let Some(waker) = self.sleeps.take(timer.tag) {
            waker.wake();
        }
        self.run_woken(ctx)
    }

    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, A::Out>,
    ) -> Result<(), OperatorError> {
        match event.downcast::<WakeEvent>() {
            Ok(_) => self.run_woken(ctx),
            Err(_) => Err(OperatorError::UnexpectedEvent {
                operator: self.name.clone(),
            }),
        }
    }

    fn accepts_input(&self) -> bool {
        if self.ending {
            self.admitted == 0
        } else {
            self.admitted < self.max_in_flight
        }
    }

    fn waits_for_own_events(&self) -> bool {
        true
    }

    fn end_input(&mut self, _ctx: &mut Context<'_, A::Out>) -> Result<(), OperatorError> {
        // The task waits (running mails) until every record completed.
        self.ending = true;
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        // Snapshot, not drain: the committed states (no call in flight wrote to them) and the
        // inputs of every record held, per key in arrival order, which a restore runs again.
        let states = self
            .states
            .iter()
            .map(|(k, s)| Entry::State(k.clone(), s.clone()));
        let in_flight = self.busy.iter().flat_map(|(key, busy)| {
            let running = &self.running[&busy.call].admitted.record;
            std::iter::once(running)
                .chain(busy.waiting.iter().map(|a| &a.record))
                .map(|r| Entry::InFlight(key.clone(), r.clone()))
        });
        let groups = split_by_key_group(
            states.chain(in_flight),
            |e| match e {
                Entry::State(k, _) | Entry::InFlight(k, _) => k.clone(),
            },
            self.max_parallelism,
        )
        .into_iter()
        .map(|(group, entries)| {
            let mut g = GroupEntries {
                states: Vec::new(),
                in_flight: Vec::new(),
            };
            for e in entries {
                match e {
                    Entry::State(k, s) => g.states.push((k, s)),
                    Entry::InFlight(_, r) => g.in_flight.push(r),
                }
            }
            (group, g)
        });
        let watermark = self.watermark.map_or(i64::MIN, |w| w.0);
        KeyGroupedState::new(self.max_parallelism, watermark, groups)
            .encode()
            .map(Some)
            .map_err(|e| OperatorError::state(&self.name, e))
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        // Drops the calls in flight on this thread (their futures may not be Send).
        self.drop_parked();
        Ok(())
    }
}

impl<A: KeyedAsyncOperator, KF> KeyedAsyncOperatorDriver<A, KF> {
    fn drop_parked(&self) {
        let driver = self.driver;
        let _ = PARKED.try_with(|parked| parked.borrow_mut().retain(|(d, _), _| *d != driver));
    }
}

impl<A: KeyedAsyncOperator, KF> Drop for KeyedAsyncOperatorDriver<A, KF> {
    fn drop(&mut self) {
        // A task that failed before close: free the parked calls if they are on this thread.
        self.drop_parked();
    }
}

impl<A: KeyedAsyncOperator, KF> fmt::Debug for KeyedAsyncOperatorDriver<A, KF> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedAsyncOperatorDriver")
            .field("name", &self.name)
            .field("max_in_flight", &self.max_in_flight)
            .field("in_flight", &self.admitted)
            .field("running", &self.running.len())
            .finish_non_exhaustive()
    }
}
