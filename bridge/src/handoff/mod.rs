//! [`HandoffReader`]: a legacy [`SourceFunction`] as a new-style [`SourceReader`], through a
//! bounded handoff that is part of the checkpoint. No Flink version offers this.
//!
//! The protocol and its trade-off are written out on [`HandoffReader`]; `buffer` holds the
//! handoff itself (the backend the source emits into) and the snapshot format.

mod buffer;
mod in_flight;

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc as StdArc;
use std::task::Waker;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::state::{decode, encode};
use streamtask_core::sync::{Arc, Mutex, thread};
use streamtask_core::task::DEFAULT_CANCEL_GRACE;
use streamtask_core::task::TaskError;
use streamtask_core::trace::Tracer;
use streamtask_core::{
    OperatorError, catch_panic, state::TaskSnapshot, time::Clock, time::Timer, time::TimerError,
    time::TimerHandle, time::TimerService,
};
use streamtask_legacy::{
    CancellationToken, CheckpointLock, Emission, Fairness, SourceCell, SourceContextConfig,
    SourceEnd, SourceFunction, TimeCharacteristic, run_source,
};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};
use streamtask_runtime::TimerScheduler;

use self::buffer::{
    Chunk, Handoff, HandoffEnd, HandoffItem, Pending, Published, Restored, SnapshotRef,
    default_chunk, spin_then_yield,
};
use self::in_flight::{InFlight, InFlightRef};
pub use self::in_flight::{InFlightReplay, source_in_flight};
use crate::task::SourceExit;

/// Elements the handoff holds before the source waits for room, unless set.
pub const DEFAULT_HANDOFF_CAPACITY: usize = 1024;

/// How long the reader spins looking for a published chunk before it yields between looks
/// (see `buffer::spin_then_yield`), and how long it yields before it takes the checkpoint lock
/// for the part of one the source holds: with the spin, the bound on how long an element waits
/// in a chunk that does not fill.
const READER_SPIN: Duration = Duration::from_micros(20);
const READER_WAIT: Duration = Duration::from_micros(30);

type HandoffCell<F> = SourceCell<<F as SourceFunction>::State, Handoff<<F as SourceFunction>::Out>>;
type HandoffLock<F> = CheckpointLock<HandoffCell<F>>;

/// Where the reader's source is.
///
/// | phase | moves to | by |
/// |---|---|---|
/// | `Idle` (the function waits for the first poll) | `Running`, `Closed` | first `poll_next`; `close` |
/// | `Running` (the function runs on its thread) | `Closed` | `close` |
/// | `FinishedOnRestore` (the snapshot says the function had finished: it is not run again) | `Closed` | `close` |
/// | `Closed` | - | - |
enum Phase<F> {
    Idle(F),
    Running(SourceThread),
    FinishedOnRestore,
    Closed,
}

struct SourceThread {
    thread: thread::JoinHandle<()>,
    cancel: CancellationToken,
    exit: Arc<SourceExit>,
}

/// What the mailbox thread last learned about the source's end.
enum Seen {
    Open,
    Finished,
    Failed(OperatorError),
    /// The failure was returned from `poll_next` already.
    Reported,
}

/// A legacy [`SourceFunction`] run as a new-style [`SourceReader`]: the function runs on a
/// thread of its own and emits, under a lock it shares with nobody but this reader, into a
/// bounded handoff; the reader polls the handoff on the mailbox thread. A checkpoint holds the
/// source's state and the handoff's contents together; a restore replays the handoff first.
///
/// Its records must be serializable: records in flight are part of the checkpoint.
///
/// # Where things live
///
/// | part | owner | lock |
/// |---|---|---|
/// | the function | the source thread (`<source>-handoff`) | - |
/// | the source's state, the context's bookkeeping, the **chunk being filled**, the source's end, the reader's waker | the checkpoint lock ([`SourceCell`]) | this reader's own, not the task's |
/// | the **published chunks** (with the chunk being filled, at most the capacity) | shared by both threads | a small mutex of their own, held to move one chunk |
/// | the chunk taken, not yet emitted | the reader (mailbox thread) | - |
///
/// The chain behind the reader belongs to the mailbox thread alone, as in any mailbox source
/// task, so operators that wait for their own events (async I/O) may chain behind it. The price
/// is a queue hop per chunk, and a checkpoint that holds the records in flight.
///
/// # The protocol
///
/// The two threads meet once per chunk (half the capacity, at most 256, unless set with
/// [`with_chunk`](Self::with_chunk)), not once per record:
///
/// ```text
/// source thread (run_source)                    mailbox thread (poll_next / snapshot_state)
/// --------------------------                    -------------------------------------------
/// ctx.lock():                                   batch empty? take the published chunks
///   no room (chunk + published >= capacity)?      (chunks mutex; no checkpoint lock); if the
///   look again a while, then wait on the          source may wait for that room: wake it
///   lock's condition (lock released) BEFORE       (wake_all)
///   the section starts                          none published? wait up to 50 us for one
/// section: update state, emit -> chunk            (spin, then yield), then take the lock
///   publish the chunk (chunks mutex) when it      (hand-over request: within one section) and
///   is full, at the capacity, on a watermark      take every published chunk, then the chunk
///   or status, at the end, or at once while       being filled; notify_all; note the end
///   the reader's waker is registered (then      nothing at all? NothingAvailable, then
///   wake it)                                      register_waker: lock { ready ? wake now
/// unlock (notify_all)                                                : keep the waker }
/// finite: lock { MAX dropped; publish;          emit one element of the batch per poll (the
///   end_input: Finished; wake }                   task's step polls many while no mail waits)
/// failed: lock { Failed(error); wake }          snapshot_state: lock { take the published
///                                                 chunks into the batch; state + batch +
///                                                 chunk being filled + finished }
/// ```
///
/// - **Consistency (exactly once).** A section of the source is atomic with respect to the
///   mailbox thread: the context waits for room only *before* a section starts (never
///   mid-section), and the source publishes only inside a section, under the lock. So while the
///   mailbox thread holds the lock, every element the source emitted since the state it sees is
///   in exactly one of: passed downstream, the reader's batch, the published chunks (in order),
///   the chunk being filled; and nothing moves between the last three but by the mailbox thread
///   itself (taking) or by the source under the lock it cannot have. A snapshot, taken under the
///   lock, therefore holds a source state and exactly the elements emitted before it and not yet
///   passed downstream, in order (batch, published, filling). Restoring replays those elements
///   first, then restarts the function from the state: exactly once. The handoff may overrun
///   its capacity by what one section emits.
/// - **No unbounded wait.** An element that does not fill a chunk is taken by the reader once
///   it ran out of published ones and waited its 50 us (it takes the lock then); a waiting
///   reader (waker registered) has each element published and is woken. Watermarks and status
///   changes are published at once; the end's `Watermark::MAX` stays in the chunk being filled
///   until `end_input`, in the same section, drops it (the task emits its own).
/// - **No lost wakeup (reader).** The reader registers its waker under the lock after checking
///   the chunk being filled, the published count and the end under that same lock; the source
///   adds elements under the lock and takes (and wakes) the waker when it does. The wake happens
///   inside the source's section; the woken mailbox thread needs the lock to read the chunk
///   being filled, so it sees the section only once it has ended. No busy loop: a reader with
///   nothing to emit sleeps until woken (after its bounded wait).
/// - **No lost wakeup (source).** A full source raises a flag, then reads the taken total again
///   (the count of elements taken, which only a taker writes; the source keeps its own copy and
///   reads the shared one only when its copy shows no room, so its copy never shows more room
///   than there is and the capacity holds), before it waits on the lock's condition; the reader
///   raises the taken total, then swaps the flag and, if it was raised, wakes the condition
///   unconditionally (the count changed outside the lock). Either the source's second look sees
///   the room, or the reader sees the flag: the condition's epoch protocol does the rest. Taking
///   under the lock (slow path, snapshot) notifies as any lock holder does.
/// - **Close.** [`close`](SourceReader::close) cancels the source's token (which wakes a source
///   waiting for room, sleeping, or blocked in a hook-closable call) and joins its thread within
///   the grace period; a source that ignores cancellation is left behind and reported as
///   ignoring it, rather than hanging the task.
///
/// # Checkpoints
///
/// In a task ([`snapshot_task_state`](SourceReader::snapshot_task_state)) the reader writes,
/// under one lock, the function's state under `TaskSnapshot::SOURCE` exactly as the legacy
/// `SourceStreamTask` and the bridge write it (`encode(&State)`), and the elements in flight
/// (its batch, then the handoff) with whether the function had finished under
/// `TaskSnapshot::SOURCE_IN_FLIGHT`, only when there are any. So its checkpoints restore under
/// the legacy and bridge models (the job API runs the function in an
/// [`InFlightReplay`](crate::InFlightReplay) there), and theirs here. Called on its own,
/// [`snapshot_state`](SourceReader::snapshot_state) returns both in one self-contained envelope
/// (`{"state", "pending", "finished"}`, the format of earlier versions' checkpoints);
/// [`restore_state`](SourceReader::restore_state) reads the envelope and the legacy form.
///
/// # Context timers
///
/// Under ingestion time or with an idle timeout the source's context needs timers; this reader
/// then runs a timer thread of its own (`<source>-handoff-timers`) that fires them under the
/// lock, as the legacy model's timer thread does. Processing time comes from the reader's
/// [`Clock`] (set it to the task's with [`with_clock`](Self::with_clock)).
///
/// # Examples
///
/// A legacy counting source in a mailbox [`SourceStreamTask`](streamtask_mailbox::SourceStreamTask):
///
/// ```
/// use streamtask_bridge::HandoffReader;
/// use streamtask_core::operator::{Emitted, Map};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::OperatorError;
/// use streamtask_legacy::{SourceContext, SourceFunction};
/// use streamtask_mailbox::SourceStreamTask;
///
/// struct Count(u64);
///
/// impl SourceFunction for Count {
///     type Out = u64;
///     type State = u64;
///     fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
///         while !ctx.is_cancelled() {
///             let mut locked = ctx.lock();
///             let n = *locked.state();
///             if n == self.0 {
///                 return Ok(());
///             }
///             locked.collect(n)?;
///             *locked.state_mut() = n + 1;
///         }
///         Ok(())
///     }
/// }
///
/// let reader = HandoffReader::new(Count(100)).with_capacity(16);
/// let task = SourceStreamTask::new(
///     TaskConfig::new("count"),
///     reader,
///     Map::new("square", |n: u64| n * n),
///     Vec::<Emitted<u64>>::new(),
/// ).spawn();
/// assert!(task.join().is_finished());
/// ```
pub struct HandoffReader<F: SourceFunction> {
    name: String,
    capacity: usize,
    chunk: Option<usize>,
    context: SourceContextConfig,
    clock: Clock,
    grace: Duration,
    metrics: Option<StdArc<TaskMetrics>>,
    tracer: Tracer,
    phase: Phase<F>,
    lock: Option<Arc<HandoffLock<F>>>,
    /// The handoff's published chunks, reached without the checkpoint lock.
    published: Option<Arc<Published<F::Out>>>,
    timers: Option<StdArc<TimerScheduler>>,
    /// Elements taken from the handoff, not yet emitted (restored ones first).
    batch: Chunk<F::Out>,
    seen: Seen,
}

impl<F> HandoffReader<F>
where
    F: SourceFunction,
    F::Out: Serialize + DeserializeOwned,
{
    /// A reader running `function`: a handoff of [`DEFAULT_HANDOFF_CAPACITY`] elements, the
    /// context that keeps the function's own time characteristic
    /// ([`SourceContextConfig::event_time`]: its timestamps, watermarks and idle marks reach the
    /// chain as it emitted them, as in the job API and the porting kit), the system clock, and
    /// `DEFAULT_CANCEL_GRACE` to stop.
    ///
    /// A reader never drops what the source emits unless told to: set
    /// [`with_context`](Self::with_context) to `SourceContextConfig::processing_time()` to drop
    /// timestamps and watermarks, or to an ingestion-time context for automatic ones.
    pub fn new(function: F) -> Self {
        HandoffReader {
            name: function.name().to_string(),
            capacity: DEFAULT_HANDOFF_CAPACITY,
            chunk: None,
            context: SourceContextConfig::event_time(),
            clock: Clock::System,
            grace: DEFAULT_CANCEL_GRACE,
            metrics: None,
            tracer: Tracer::off(),
            phase: Phase::Idle(function),
            lock: None,
            published: None,
            timers: None,
            batch: VecDeque::new(),
            seen: Seen::Open,
        }
    }

    /// Elements (records, watermarks, status changes) the handoff holds before the source waits
    /// for room (the chunk being filled and the published ones; the chunk the reader took is
    /// apart); at least 1. The checkpoint holds up to this many records in flight (plus the
    /// reader's chunk and what one locked section emits past it).
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// Elements the source publishes to the reader at once (a chunk), at least 1 and at most
    /// the capacity; half the capacity (at most 256) unless set. The source thread and
    /// the mailbox thread meet once per chunk rather than once per record. A chunk that does
    /// not fill is taken by the reader at most 50 us after it ran out of others (and each
    /// element is published at once while the reader sleeps), so a large chunk costs at most
    /// that much latency; a small one costs throughput.
    pub fn with_chunk(mut self, chunk: usize) -> Self {
        self.chunk = Some(chunk.max(1));
        self
    }

    /// The source context's flavour, watermark interval and idle timeout (event time, the
    /// function's own timestamps and watermarks, unless set).
    pub fn with_context(mut self, context: SourceContextConfig) -> Self {
        self.context = context;
        self
    }

    /// Where the source's processing time comes from (the task's clock, typically).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// How long [`close`](SourceReader::close) waits for a cancelled source to return before
    /// reporting that it ignored cancellation.
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Records how long the source and the mailbox thread wait for the handoff's lock into
    /// `metrics.lock_wait` (the task's metrics, typically).
    pub fn with_metrics(mut self, metrics: StdArc<TaskMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Records a `lock-wait` span for every wait for the handoff's lock.
    pub fn with_tracer(mut self, tracer: Tracer) -> Self {
        self.tracer = tracer;
        self
    }

    /// Elements handed off by the source and not yet emitted downstream (what a checkpoint
    /// taken now would hold besides the source's state).
    pub fn pending(&self) -> usize {
        let in_handoff = self.lock.as_ref().map_or(0, |lock| {
            let cell = lock.lock();
            cell.output().items.len() + cell.output().published.len()
        });
        self.batch.len() + in_handoff
    }

    /// The lock, created at first use (the builder settings are final by then).
    fn lock(&mut self) -> &Arc<HandoffLock<F>> {
        if self.lock.is_none() {
            let (lock, timers) = self.create_lock();
            self.published = Some(Arc::clone(&lock.lock().output().published));
            self.lock = Some(lock);
            self.timers = timers;
        }
        self.lock.as_ref().expect("created above")
    }

    fn create_lock(&self) -> (Arc<HandoffLock<F>>, Option<StdArc<TimerScheduler>>) {
        let needs_timers = self.context.time() == TimeCharacteristic::IngestionTime
            || self.context.idle_timeout_ms().is_some();
        if !needs_timers {
            let timers: StdArc<dyn TimerService> = StdArc::new(ClockOnly(self.clock.clone()));
            let lock = Arc::new(self.new_lock(timers));
            return (lock, None);
        }
        // The timer thread fires under the lock, which holds the emission, which holds the
        // timers: the slot breaks the knot, and shutting the scheduler down ends its thread
        // (and with it the closure holding the lock).
        let slot: Arc<Mutex<Option<Arc<HandoffLock<F>>>>> = Arc::new(Mutex::new(None));
        let fire_slot = Arc::clone(&slot);
        let error_slot = Arc::clone(&slot);
        let scheduler = StdArc::new(TimerScheduler::spawn(
            &format!("{}-handoff-timers", self.name),
            self.clock.clone(),
            move |timer: Timer| -> Result<(), OperatorError> {
                let lock = fire_slot.lock().clone();
                match lock {
                    Some(lock) => lock.lock().on_context_timer::<F::Out>(timer),
                    None => Ok(()),
                }
            },
            move |error: OperatorError| {
                let lock = error_slot.lock().clone();
                if let Some(lock) = lock {
                    let mut cell = lock.lock();
                    let handoff = cell.output_mut();
                    if matches!(handoff.end, HandoffEnd::Open) {
                        handoff.end = HandoffEnd::Failed(Some(error));
                    }
                    handoff.wake();
                }
            },
        ));
        let timers: StdArc<dyn TimerService> = scheduler.clone();
        let lock = Arc::new(self.new_lock(timers));
        *slot.lock() = Some(Arc::clone(&lock));
        (lock, Some(scheduler))
    }

    fn new_lock(&self, timers: StdArc<dyn TimerService>) -> HandoffLock<F> {
        let cell = SourceCell::new(
            F::State::default(),
            Emission::new(self.context, timers),
            Handoff::new(
                self.capacity,
                self.chunk.unwrap_or_else(|| default_chunk(self.capacity)),
            ),
        );
        let lock = CheckpointLock::new(cell, Fairness::Eventual).with_tracer(self.tracer.clone());
        match &self.metrics {
            Some(metrics) => lock.with_metrics(StdArc::clone(metrics)),
            None => lock,
        }
    }

    /// Starts the function on its thread, if it waits for the first poll.
    fn start(&mut self) {
        if !matches!(self.phase, Phase::Idle(_)) {
            return;
        }
        let lock = Arc::clone(self.lock());
        let Phase::Idle(function) = std::mem::replace(&mut self.phase, Phase::Closed) else {
            unreachable!("checked above");
        };
        let cancel = CancellationToken::new();
        let exit = Arc::new(SourceExit::new());
        let timers = self.timers.clone();
        let thread = {
            let (cancel, exit) = (cancel.clone(), Arc::clone(&exit));
            streamtask_core::sync::spawn_named(format!("{}-handoff", self.name), move || {
                streamtask_core::live::set_thread_role(streamtask_core::live::ThreadRole::Source);
                run_handoff_source(function, &lock, &cancel);
                if !exit.source_ended() {
                    // `close` gave up on this thread: shut the context's timers down here.
                    if let Some(timers) = timers {
                        timers.shutdown();
                    }
                }
            })
        };
        self.phase = Phase::Running(SourceThread {
            thread,
            cancel,
            exit,
        });
    }

    /// Fills the (empty) batch: the oldest published chunk if there is one (without the
    /// checkpoint lock); otherwise, after asking the source to publish at its next element and
    /// looking again briefly, everything the handoff holds, under the lock. Notes the source's
    /// end.
    fn refill(&mut self) {
        if matches!(self.phase, Phase::FinishedOnRestore) {
            self.seen = Seen::Finished;
            return;
        }
        self.start();
        let _ = self.lock();
        // Borrowed, not cloned: the lock's reference count shares a cache line with its
        // mutex, which the source takes per record (a clone per refill cost it a miss).
        let lock = self.lock.as_deref().expect("created above");
        let published = self.published.as_deref().expect("created with the lock");
        let batch = &mut self.batch;
        if take_published::<F>(lock, published, batch) {
            return;
        }
        // Nothing published: a running source fills a chunk within a chunk's worth of records;
        // wait that long for it (spinning, then yielding to the source's thread) before taking
        // the lock for a part of one.
        spin_then_yield(|| published.any(), READER_SPIN, READER_WAIT);
        if take_published::<F>(lock, published, batch) {
            return;
        }
        // Still nothing: take the lock (within one section of the source) and whatever it has.
        let mut cell = lock.request_handover().lock();
        let _ = published.take_all_into(batch); // notified below, under the lock
        let handoff = cell.output_mut();
        handoff.steal_into(batch);
        // Room was freed under the lock: wake a source waiting for it.
        cell.notify_all();
        if matches!(self.seen, Seen::Reported) {
            return;
        }
        match &mut cell.output_mut().end {
            HandoffEnd::Open | HandoffEnd::Stopped => {}
            HandoffEnd::Finished => self.seen = Seen::Finished,
            HandoffEnd::Failed(error) => {
                if let Some(error) = error.take() {
                    self.seen = Seen::Failed(error);
                }
            }
        }
    }

    fn stop(&mut self) -> Result<(), OperatorError> {
        let stopped = match std::mem::replace(&mut self.phase, Phase::Closed) {
            Phase::Running(source) => {
                source.cancel.cancel();
                if source.exit.wait_ended(self.grace) {
                    // Its failures went through the handoff; joining only reaps it.
                    let _ = source.thread.join();
                    true
                } else {
                    false // dropping the handle detaches the thread; it cleans up itself
                }
            }
            Phase::Idle(_) | Phase::FinishedOnRestore | Phase::Closed => true,
        };
        if !stopped {
            log::warn!(
                "{}: the source ignored cancellation for {:?}; its thread is left behind",
                self.name,
                self.grace
            );
            return Err(OperatorError::user(
                self.name.clone(),
                TaskError::CancellationIgnored {
                    grace_ms: u64::try_from(self.grace.as_millis()).unwrap_or(u64::MAX),
                },
            ));
        }
        if let Some(timers) = self.timers.take() {
            timers.shutdown();
        }
        Ok(())
    }
}

/// Takes every published chunk into the (empty) `batch`, waking the source if it may be waiting
/// for the room. Returns whether it took any.
#[inline]
fn take_published<F: SourceFunction>(
    lock: &HandoffLock<F>,
    published: &Published<F::Out>,
    batch: &mut Chunk<F::Out>,
) -> bool {
    match published.take_all_into(batch) {
        None => false,
        Some(source_waits) => {
            if source_waits {
                // Changed outside the lock: wake unconditionally.
                lock.wake_all();
            }
            true
        }
    }
}

/// The source thread's body: the function through `run_source`, then its end into the handoff.
fn run_handoff_source<F: SourceFunction>(
    mut function: F,
    lock: &Arc<HandoffLock<F>>,
    cancel: &CancellationToken,
) {
    let result = catch_panic(|| run_source(&mut function, lock, cancel));
    let name = function.name().to_string();
    drop(function);
    let mut cell = lock.lock();
    let handoff = cell.output_mut();
    match result {
        // `end_input` already marked it finished.
        Ok(Ok(SourceEnd::Finished)) => {}
        Ok(Ok(SourceEnd::Cancelled)) => handoff.end = HandoffEnd::Stopped,
        Ok(Err(error)) => handoff.end = HandoffEnd::Failed(Some(error)),
        Err(panic) => {
            handoff.end = HandoffEnd::Failed(Some(OperatorError::user(
                name,
                format!("panicked: {panic}"),
            )));
        }
    }
    handoff.wake();
}

impl<F> SourceReader<F::Out> for HandoffReader<F>
where
    F: SourceFunction,
    F::Out: Serialize + DeserializeOwned,
{
    fn name(&self) -> &str {
        &self.name
    }

    /// Reads either the legacy form (`encode(&F::State)`, what every model writes under
    /// `source` for this function) or this reader's self-contained envelope (what
    /// [`snapshot_state`](SourceReader::snapshot_state) returns, and what checkpoints of
    /// earlier versions hold under `source`).
    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        let lock = Arc::clone(self.lock());
        let Some(bytes) = state else {
            return Ok(());
        };
        // The envelope first: it needs exactly its three fields, which a legacy state is
        // unlikely to have, while a legacy state type with defaults could decode from anything.
        let restored = match decode::<Restored<F::State, F::Out>>(bytes) {
            Ok(restored) => restored,
            Err(_) => Restored {
                state: decode(bytes).map_err(|e| OperatorError::state(self.name.clone(), e))?,
                pending: VecDeque::new(),
                finished: false,
            },
        };
        *lock.lock().state_mut() = restored.state;
        // Replayed before anything the restarted function emits.
        self.batch = restored.pending;
        if restored.finished {
            self.phase = Phase::FinishedOnRestore;
        }
        Ok(())
    }

    /// The function's state under `source`, exactly as the legacy and bridge models write it,
    /// and the elements in flight (if any, or if the function had finished) under
    /// `source-in-flight`, taken together under the lock (see `in_flight.rs`).
    fn snapshot_task_state(
        &mut self,
        _checkpoint_id: u64,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        let finished_on_restore = matches!(self.phase, Phase::FinishedOnRestore);
        let lock = Arc::clone(self.lock());
        let cell = lock.lock();
        collect_published(&cell, &mut self.batch);
        let handoff = cell.output();
        let failed = |e| OperatorError::state(self.name.clone(), e);
        into.put(TaskSnapshot::SOURCE, encode(cell.state()).map_err(failed)?);
        let finished = finished_on_restore || matches!(handoff.end, HandoffEnd::Finished);
        if finished || !self.batch.is_empty() || !handoff.items.is_empty() {
            let in_flight = InFlightRef {
                pending: Pending(&self.batch, &handoff.items),
                finished,
            };
            into.put(
                TaskSnapshot::SOURCE_IN_FLIGHT,
                encode(&in_flight).map_err(failed)?,
            );
        }
        Ok(())
    }

    fn restore_task_state(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        self.restore_state(snapshot.and_then(|s| s.get(TaskSnapshot::SOURCE)))?;
        let Some(bytes) = snapshot.and_then(|s| s.get(TaskSnapshot::SOURCE_IN_FLIGHT)) else {
            return Ok(());
        };
        let in_flight = InFlight::<F::Out>::decode(bytes)
            .map_err(|e| OperatorError::state(self.name.clone(), e))?;
        self.batch.extend(in_flight.pending);
        if in_flight.finished {
            self.phase = Phase::FinishedOnRestore;
        }
        Ok(())
    }

    #[inline]
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, F::Out>,
    ) -> Result<InputStatus, OperatorError> {
        if self.batch.is_empty() {
            self.refill();
        }
        match self.batch.pop_front() {
            Some(HandoffItem::Record(record)) => output.collect_record(record)?,
            Some(HandoffItem::Watermark(watermark)) => output.emit_watermark(watermark)?,
            // Activity is implied by the next record or watermark.
            Some(HandoffItem::Status(status)) => {
                if status == streamtask_core::StreamStatus::Idle {
                    output.mark_idle()?;
                }
            }
            None => {
                return match std::mem::replace(&mut self.seen, Seen::Reported) {
                    Seen::Open => {
                        self.seen = Seen::Open;
                        Ok(InputStatus::NothingAvailable)
                    }
                    Seen::Finished => {
                        self.seen = Seen::Finished;
                        Ok(InputStatus::EndOfInput)
                    }
                    Seen::Failed(error) => Err(error),
                    Seen::Reported => Err(OperatorError::user(
                        self.name.clone(),
                        "the source failed earlier; the task must not poll it again",
                    )),
                };
            }
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        if !self.batch.is_empty() || !matches!(self.seen, Seen::Open) {
            waker.wake_by_ref();
            return;
        }
        match self.phase {
            Phase::Running(_) => {
                let lock = Arc::clone(self.lock());
                lock.request_handover().lock().output_mut().register(waker);
            }
            // Nothing will ever arrive: let the task poll and see that.
            Phase::Idle(_) | Phase::FinishedOnRestore | Phase::Closed => waker.wake_by_ref(),
        }
    }

    /// The state and the elements in flight in one self-contained envelope (see the type's
    /// `# Checkpoints`; a task writes them apart instead).
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        let finished_on_restore = matches!(self.phase, Phase::FinishedOnRestore);
        let lock = Arc::clone(self.lock());
        let cell = lock.lock();
        collect_published(&cell, &mut self.batch);
        let handoff = cell.output();
        let snapshot = SnapshotRef {
            state: cell.state(),
            pending: Pending(&self.batch, &handoff.items),
            finished: finished_on_restore || matches!(handoff.end, HandoffEnd::Finished),
        };
        encode(&snapshot).map_err(|e| OperatorError::state(self.name.clone(), e))
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.stop()
    }
}

impl<F: SourceFunction> Drop for HandoffReader<F> {
    fn drop(&mut self) {
        // Stop and join the source thread (bounded by the grace period) if `close` did not.
        if let Phase::Running(source) = std::mem::replace(&mut self.phase, Phase::Closed) {
            source.cancel.cancel();
            if source.exit.wait_ended(self.grace) {
                let _ = source.thread.join();
            } else {
                return; // the source thread shuts the timers down if it ever returns
            }
        }
        if let Some(timers) = self.timers.take() {
            timers.shutdown();
        }
    }
}

impl<F: SourceFunction> fmt::Debug for HandoffReader<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match self.phase {
            Phase::Idle(_) => "idle",
            Phase::Running(_) => "running",
            Phase::FinishedOnRestore => "finished on restore",
            Phase::Closed => "closed",
        };
        f.debug_struct("HandoffReader")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("phase", &phase)
            .field("batch", &self.batch.len())
            .finish_non_exhaustive()
    }
}

/// Processing time for a context that registers no timers (processing time, or event time
/// without an idle timeout).
struct ClockOnly(Clock);

impl TimerService for ClockOnly {
    fn current_processing_time(&self) -> i64 {
        self.0.now_millis()
    }

    fn register_timer(&self, _timer: Timer) -> Result<TimerHandle, TimerError> {
        // Unreachable with the flavours this service is used for; refuse rather than drop.
        Err(TimerError::ShutDown)
    }

    fn register_periodic(
        &self,
        _first: Timer,
        _period: streamtask_core::time::Period,
    ) -> Result<TimerHandle, TimerError> {
        // As `register_timer`: no flavour this service is used for registers timers.
        Err(TimerError::ShutDown)
    }

    fn cancel_timer(&self, _handle: TimerHandle) {}
}

/// Before a snapshot, under the checkpoint lock: the source publishes only under the lock, so
/// with it held the published chunks and the chunk being filled are, with the reader's batch,
/// everything handed over and not yet emitted. Taking the published ones into the batch (they
/// are emitted next anyway) puts them in the snapshot and frees room for a waiting source.
fn collect_published<S, T>(
    cell: &streamtask_legacy::CheckpointGuard<'_, SourceCell<S, Handoff<T>>>,
    batch: &mut Chunk<T>,
) {
    if cell.output().published.take_all_into(batch).is_some() {
        cell.notify_all();
    }
}
