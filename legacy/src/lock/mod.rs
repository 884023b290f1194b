//! The checkpoint lock: a mutex that owns what it guards, with a fairness setting, a condition
//! to wait on, and a histogram of how long each acquirer waited.
//!
//! In Flink's lock model (<= 1.9) every thread of a task that touches operator state takes one
//! monitor, `StreamTask#getCheckpointLock()`: the source thread around each emit, the input task
//! thread around each record, the timer thread around each timer, the "async calls" thread
//! around each checkpoint. Here the lock *owns* that state (the source's checkpointed state and
//! the operator chain), so nothing can touch it without holding the lock.
//!
//! # Protocol
//!
//! | who | takes the lock | for |
//! |---|---|---|
//! | source thread | per emit, or a section held by a [`SourceGuard`](crate::SourceGuard) | emitting, updating source state |
//! | input task thread | per record (one acquisition) | pushing the record through the chain |
//! | timer thread | per timer | `on_processing_time`, checking the timer service's status inside |
//! | async-calls thread | per checkpoint, notice, or event | snapshot + barrier broadcast, commits, events |
//!
//! A thread that must wait for something another lock holder produces (a source waiting for
//! room in a handoff buffer, an async head waiting for a free queue slot) waits on the lock's
//! condition with [`CheckpointGuard::wait_until`], which releases the lock while it waits; every
//! holder that may have produced such a change calls [`CheckpointLock::notify_all`]. The
//! lost-wakeup argument is written out in the `condition` module.
//!
//! # Fairness
//!
//! | [`Fairness`] | mutex | on release |
//! |---|---|---|
//! | `Unfair` | std's futex mutex ([`BargingMutex`]) | the releasing thread may take it straight back, forever (a Java monitor) |
//! | `Eventual` | parking_lot | barging, but about every 0.5 ms the lock is handed to a waiter |
//! | `Fair` | parking_lot | always handed to the longest waiter (`unlock_fair`) |
//!
//! # Lock states
//!
//! | state | meaning | moves to |
//! |---|---|---|
//! | free | no guard exists | held (by `lock`/`try_lock`) |
//! | held | one [`CheckpointGuard`] exists | free (guard dropped; fair hand-off if `Fair`), waiting |
//! | waiting | the guard's owner blocks in `wait_until` with the lock released | held (re-acquired after a notification) |
//!
//! With [`CheckpointLock::with_metrics`], the task's live state
//! ([`TaskLive`](streamtask_core::live::TaskLive)) names the holder and the threads blocked taking
//! the lock by their [`ThreadRole`](streamtask_core::live::ThreadRole): each acquisition stores its
//! thread's role (a relaxed store), each release clears the held bit before the unlock, and an
//! acquisition that blocks marks its role waiting around the block. A stalled checkpoint's report
//! reads it ("held by the source thread; waiting: the async-calls thread").
//!
//! # Bounded hand-over
//!
//! Whatever the fairness, a thread may ask the source to let go: [`CheckpointLock::request_handover`]
//! raises a count (one atomic word) before it blocks on the mutex, and a source context that
//! starts a section ([`SourceContext::lock`](crate::SourceContext::lock), so every emit) while
//! the count is raised waits on the lock's condition, with the lock released, until the
//! requester has the lock and lowered it. So the requester gets the lock after at most the
//! section in flight when it asked: within one emit. A section is never cut: its atomicity is
//! what a checkpoint relies on. The bridge's mailbox thread asks for every mail; the legacy
//! model's checkpoint trigger asks when [`CheckpointLock::with_bounded_handover`] is on.
//!
//! What keeps the hand-over within one emit in time too, not only in sections:
//!
//! | step | who | why |
//! |---|---|---|
//! | look for the lock (spin, then yield) for up to 100 us before parking on the mutex | requester | the source lets go within one section; a parked requester would add its own wake-up (tens of microseconds, more on a busy machine) to every hand-over |
//! | let go fairly (`unlock_fair`), whatever the fairness setting | source | a requester that did park gets the lock handed to it, with no window for a barging thread |
//! | wait on the condition until the count is down | source | it cannot take the lock back before the requester had it |
//!
//! Without a request nothing of this runs: the default lock (the legacy baseline) is unchanged.
//!
//! # Errands
//!
//! A lock may carry one errand ([`CheckpointLock::with_errand`]): work that any holder may do,
//! which another thread asks for with [`CheckpointLock::post_errand`] (the bridge's checkpoint
//! trigger). A source context that starts a section while an errand is posted runs it first,
//! on the source thread, holding the lock, before the section: so a hot source serves the
//! errand within one section, and nobody has to be woken for it. The errand's flag is a bit of
//! the hand-over word, so the context's check stays one atomic load.
//!
//! | step | who | why |
//! |---|---|---|
//! | post: set the bit (`SeqCst`), after putting what the errand does where it finds it | poster | a context that sees the bit finds the work; one that does not sees it at its next section |
//! | see the bit with the section's hand-over load; let go of the lock, take it again, clear the bit, run the errand | source context | the bit is cleared under the lock before the errand runs: a post after the clear is seen at the next section, never lost |
//! | a context waiting for a hand-over to be served stops waiting when the bit is set (the poster wakes it: the bit changes outside the lock), runs the errand, then waits again | source context, poster | a requester kept off its core does not hold the errand up; the one exception to "the source cannot take the lock back before the requester had it": once per errand |
//!
//! An errand must be idempotent over what it finds: a post may be served by a holder that found
//! the work already done (the bridge's mailbox thread does the same work as a mail, whichever
//! comes first), and a context blocked outside the lock serves nothing, so a poster that needs
//! the work done also asks another way.
//!
//! The lock is not reentrant: a thread holding a guard that calls [`CheckpointLock::lock`] again
//! deadlocks. Code running under the lock that needs "the lock" (an operator sending itself an
//! event) enqueues instead (see the `task` module).

mod condition;

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use streamtask_core::live::thread_role;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::sync::atomic::{AtomicUsize, Ordering};
use streamtask_core::sync::{BargingMutex, BargingMutexGuard, Mutex, MutexGuard, unlock_fair};
use streamtask_core::trace::Tracer;

use self::condition::Condition;
pub(crate) use self::condition::deadline_after;

/// How the checkpoint lock treats threads that wait for it.
///
/// The setting exists to show (and measure) the starvation of checkpoint triggers and timers
/// behind a source that re-takes the lock in a tight loop (see the crate's benches).
///
/// # Examples
///
/// ```
/// use streamtask_legacy::{CheckpointLock, Fairness};
///
/// let lock = CheckpointLock::new(0u64, Fairness::Fair);
/// *lock.lock() += 1;
/// assert_eq!(*lock.lock(), 1);
/// assert_eq!(lock.fairness(), Fairness::Fair);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fairness {
    /// No fairness at all (std's futex mutex): a hot thread can keep the lock indefinitely,
    /// as with Java's `synchronized`.
    Unfair,
    /// parking_lot's default: barging, with a forced hand-off about every 0.5 ms.
    #[default]
    Eventual,
    /// Every release hands the lock to the longest waiter.
    Fair,
}

impl Fairness {
    /// The setting's name, as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Fairness::Unfair => "unfair",
            Fairness::Eventual => "eventual",
            Fairness::Fair => "fair",
        }
    }
}

/// How many times a hand-over requester spins looking for the lock before it yields between
/// looks; none under loom (a spin is only more interleavings there).
const HANDOVER_SPINS: u32 = if cfg!(loom) { 0 } else { 128 };

/// How many looks at most a hand-over requester takes before it blocks on the mutex (none
/// under loom), and for how long at most it yields between them: the source lets go within one
/// section, so only a section this long (or a source thread kept off its core this long) makes
/// the requester park.
const HANDOVER_SPIN_LIMIT: u32 = if cfg!(loom) { 0 } else { 1 << 16 };

/// See [`HANDOVER_SPIN_LIMIT`].
const HANDOVER_SPIN_FOR: Duration = Duration::from_micros(100);

/// The hand-over word's top bit: an errand is posted (see the module's `# Errands`); the bits
/// below count the threads that asked for a hand-over.
const ERRAND: usize = 1 << (usize::BITS - 1);

/// What a source context does before its section (see [`CheckpointGuard::before_section`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    /// Start it.
    Start,
    /// An errand is posted: let go of the lock and run it ([`CheckpointLock::run_errand`])
    /// first.
    Errand,
}

/// A lock's errand (see [`CheckpointLock::with_errand`]).
type Errand<T> = Box<dyn Fn(&mut T) + Send + Sync>;

/// Which [`CheckpointLock`] a guard belongs to: the address of the lock's shared part, which
/// every guard of the lock borrows. Meaningful only while that lock is alive (whoever compares
/// ids keeps the lock alive meanwhile); no pointer is ever dereferenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockId(usize);

impl LockId {
    fn of(shared: &LockShared) -> Self {
        LockId(std::ptr::from_ref(shared).addr())
    }
}

/// The mutex, by fairness.
enum LockMutex<T> {
    Barging(BargingMutex<T>),
    Parking(Mutex<T>),
}

/// What a guard needs besides the mutex: fairness, condition, metrics.
struct LockShared {
    fairness: Fairness,
    /// Threads that asked the source to let go and do not hold the lock yet, and (the
    /// [`ERRAND`] bit) whether an errand is posted.
    handover: AtomicUsize,
    /// Whether the legacy checkpoint trigger asks for the lock this way.
    handover_triggers: bool,
    condition: Condition,
    metrics: Option<StdArc<TaskMetrics>>,
    tracer: Tracer,
}

impl LockShared {
    /// The calling thread took the lock: the task's live state names it the holder (a relaxed
    /// store on the line the mutex's acquisition just brought in anyway).
    #[inline]
    fn taken(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.live.lock_taken(thread_role());
        }
    }

    /// The holder lets go of the lock.
    #[inline]
    fn released(&self) {
        if let Some(metrics) = &self.metrics {
            metrics.live.lock_released();
        }
    }
}

/// The checkpoint lock: a mutex around a task's state, with a [`Fairness`] setting, a condition
/// to wait on (see [`CheckpointGuard::wait_until`]), and the time every acquirer waited recorded
/// into [`TaskMetrics::lock_wait`].
///
/// The uncontended path is one `try_lock`; the clock is read only when the lock was taken.
///
/// # Examples
///
/// A producer waits, with the lock released, until a consumer made room:
///
/// ```
/// use std::sync::Arc;
/// use std::thread;
/// use streamtask_legacy::{CheckpointLock, Fairness};
///
/// let lock = Arc::new(CheckpointLock::new(vec![1, 2, 3], Fairness::Eventual));
/// let consumer = {
///     let lock = Arc::clone(&lock);
///     thread::spawn(move || {
///         lock.lock().clear();
///         lock.notify_all();
///     })
/// };
/// let mut queue = lock.lock();
/// queue.wait_until(|q| q.len() < 3);
/// queue.push(4);
/// drop(queue);
/// consumer.join().unwrap();
/// assert_eq!(*lock.lock(), vec![4]);
/// ```
pub struct CheckpointLock<T> {
    shared: LockShared,
    errand: Option<Errand<T>>,
    mutex: LockMutex<T>,
}

impl<T> CheckpointLock<T> {
    /// A lock owning `value`.
    pub fn new(value: T, fairness: Fairness) -> Self {
        let mutex = match fairness {
            Fairness::Unfair => LockMutex::Barging(BargingMutex::new(value)),
            Fairness::Eventual | Fairness::Fair => LockMutex::Parking(Mutex::new(value)),
        };
        CheckpointLock {
            shared: LockShared {
                fairness,
                handover: AtomicUsize::new(0),
                handover_triggers: false,
                condition: Condition::default(),
                metrics: None,
                tracer: Tracer::off(),
            },
            errand: None,
            mutex,
        }
    }

    /// Records every acquirer's wait into `metrics.lock_wait`, and who holds the lock and who
    /// waits for it into `metrics.live` (each thread named by its
    /// [`ThreadRole`](streamtask_core::live::ThreadRole)).
    pub fn with_metrics(mut self, metrics: StdArc<TaskMetrics>) -> Self {
        *metrics.checkpoint_lock.lock() = Some(self.shared.fairness.name());
        metrics.live.set_has_lock();
        self.shared.metrics = Some(metrics);
        self
    }

    /// Records a `lock-wait` span for every acquisition that waited.
    pub fn with_tracer(mut self, tracer: Tracer) -> Self {
        self.shared.tracer = tracer;
        self
    }

    /// The fairness setting.
    pub fn fairness(&self) -> Fairness {
        self.shared.fairness
    }

    /// Whether checkpoint triggers take the lock through a [bounded
    /// hand-over](Self::request_handover) (off unless set; the legacy task's option).
    pub fn with_bounded_handover(mut self, on: bool) -> Self {
        self.shared.handover_triggers = on;
        self
    }

    /// Whether checkpoint triggers ask the source to let go (see
    /// [`with_bounded_handover`](Self::with_bounded_handover)).
    pub fn bounded_handover(&self) -> bool {
        self.shared.handover_triggers
    }

    /// Asks a source to let go of the lock at its next section: from now until the returned
    /// request takes the lock (or is dropped), a source context starting a section waits, with
    /// the lock released. Take the lock with [`HandoverRequest::lock`].
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask_legacy::{CheckpointLock, Fairness};
    ///
    /// let lock = CheckpointLock::new(0u32, Fairness::Unfair);
    /// let request = lock.request_handover();
    /// assert!(lock.handover_requested());
    /// *request.lock() += 1;
    /// assert!(!lock.handover_requested());
    /// ```
    #[inline]
    pub fn request_handover(&self) -> HandoverRequest<'_, T> {
        // SeqCst: a source's check in `before_section` is ordered with this raise (the
        // mutex orders nothing here: the source may hold it, or take it after).
        self.shared.handover.fetch_add(1, Ordering::SeqCst);
        HandoverRequest {
            lock: self,
            live: true,
        }
    }

    /// Whether some thread asked the source to let go and does not have the lock yet (or an
    /// errand is posted, which the source serves at its next section too).
    pub fn handover_requested(&self) -> bool {
        self.shared.handover.load(Ordering::SeqCst) != 0
    }

    /// Gives the lock an errand: what a source context runs, holding the lock, before its next
    /// section once [`post_errand`](Self::post_errand) was called (see the module's
    /// `# Errands`). Without one, posting does nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use streamtask_core::testing::ManualTimerService;
    /// use streamtask_core::operator::Emitted;
    /// use streamtask_core::time::ManualClock;
    /// use streamtask_legacy::{
    ///     CancellationToken, CheckpointLock, Emission, Fairness, SourceCell, SourceContext,
    ///     SourceContextConfig,
    /// };
    ///
    /// let timers = Arc::new(ManualTimerService::new(ManualClock::new(0)));
    /// let cell = SourceCell::new(0u32, Emission::new(SourceContextConfig::event_time(), timers), Vec::<Emitted<u32>>::new());
    /// let errands = Arc::new(AtomicU32::new(0));
    /// let seen = Arc::clone(&errands);
    /// // The errand reads the source's state between two sections.
    /// let lock = CheckpointLock::new(cell, Fairness::Eventual)
    ///     .with_errand(move |cell: &mut SourceCell<u32, Vec<Emitted<u32>>>| {
    ///         seen.store(*cell.state(), Ordering::SeqCst);
    ///     });
    /// let token = CancellationToken::new();
    /// let mut ctx = SourceContext::new(&lock, &token);
    /// *ctx.lock().state_mut() = 7;
    /// lock.post_errand();
    /// ctx.collect(1).unwrap(); // the errand runs before this section
    /// assert_eq!(errands.load(Ordering::SeqCst), 7);
    /// ```
    pub fn with_errand(mut self, errand: impl Fn(&mut T) + Send + Sync + 'static) -> Self {
        self.errand = Some(Box::new(errand));
        self
    }

    /// Asks the source to run the lock's errand before its next section (see the module's
    /// `# Errands`); does nothing if the lock has none. Put what the errand needs where it
    /// finds it first. One atomic operation and a wake of the lock's condition (an
    /// uncontended mutex when nobody waits); from any thread.
    #[inline]
    pub fn post_errand(&self) {
        if self.errand.is_some() {
            // SeqCst, as the hand-over count: ordered with the context's check of the word.
            self.shared.handover.fetch_or(ERRAND, Ordering::SeqCst);
            // A source waiting for a hand-over to be served stops waiting for an errand (see
            // `yield_slow`); the bit is changed outside the lock, so wake it unconditionally
            // (the `condition` module's protocol for such flags: the epoch's mutex orders it).
            self.shared.condition.wake_all();
        }
    }

    /// Takes the lock and runs the errand if one is posted (clearing the post first, under the
    /// lock, so a post made while it runs is served at the next section). A source context
    /// calls it, not holding the lock, when [`CheckpointGuard::before_section`] said so.
    #[cold]
    pub(crate) fn run_errand(&self) {
        let mut guard = self.lock();
        // Clear the bit under the lock, then run: a post before the clear is served by this run,
        // one after it is seen at the next section, never lost; of two holders racing here only the
        // one that cleared the bit runs the errand.
        if self.shared.handover.fetch_and(!ERRAND, Ordering::SeqCst) & ERRAND != 0 {
            if let Some(errand) = &self.errand {
                errand(&mut guard);
            }
            // The errand may have changed what a waiter on the condition checks.
            guard.notify_all();
        }
    }

    /// The lock as a checkpoint trigger takes it: through a hand-over if
    /// [`bounded_handover`](Self::bounded_handover) is on, plainly otherwise.
    #[inline]
    pub(crate) fn lock_for_trigger(&self) -> CheckpointGuard<'_, T> {
        if self.shared.handover_triggers {
            self.request_handover().lock()
        } else {
            self.lock()
        }
    }

    /// This lock's identity, to check that a guard given as proof is one of this lock's.
    pub(crate) fn id(&self) -> LockId {
        LockId::of(&self.shared)
    }

    /// Takes the lock, blocking until it is free.
    #[inline]
    pub fn lock(&self) -> CheckpointGuard<'_, T> {
        self.lock_as(|m| m, |m| m)
    }

    /// Takes the lock if it is free right now.
    pub fn try_lock(&self) -> Option<CheckpointGuard<'_, T>> {
        let (mutex, guard) = match &self.mutex {
            LockMutex::Barging(m) => (MutexRef::Barging(m), GuardKind::Barging(m.try_lock()?)),
            LockMutex::Parking(m) => (MutexRef::Parking(m), GuardKind::Parking(m.try_lock()?)),
        };
        self.shared.taken();
        Some(CheckpointGuard {
            shared: &self.shared,
            mutex,
            guard: Some(guard),
        })
    }

    /// Takes the lock, looking for it for at most [`HANDOVER_SPIN_FOR`] (spinning, then
    /// yielding) before blocking: a hand-over requester's wait, which the source ends within
    /// one section. Records the whole wait as [`lock`](Self::lock) does.
    #[cold]
    fn lock_spinning(&self) -> CheckpointGuard<'_, T> {
        let mutex = match &self.mutex {
            LockMutex::Barging(m) => MutexRef::Barging(m),
            LockMutex::Parking(m) => MutexRef::Parking(m),
        };
        let start = Instant::now();
        let mut spins = 0u32;
        // The requester's side of the bounded hand-over: look for the lock (spin, then yield)
        // before parking on the mutex. The source lets go within one section, and a parked
        // requester would add its own wake-up to every hand-over.
        let guard = loop {
            // Looked long enough: park on the mutex (the source lets go fairly, so the lock is
            // handed to this thread).
            if spins >= HANDOVER_SPIN_LIMIT {
                break mutex.acquire_slow(&self.shared, start);
            }
            // Spin hints first: the section in flight is usually short.
            if spins < HANDOVER_SPINS {
                std::hint::spin_loop();
            } else if start.elapsed() < HANDOVER_SPIN_FOR {
                // Yield rather than spin: on a busy machine the source may be waiting for
                // this very core to run the section that ends in letting go.
                streamtask_core::sync::thread::yield_now();
            } else {
                spins = HANDOVER_SPIN_LIMIT;
                continue;
            }
            spins += 1;
            // Try again: the source may have let go meanwhile.
            if let Some(guard) = mutex.try_acquire() {
                if let Some(metrics) = &self.shared.metrics {
                    metrics.lock_wait.record(start.elapsed());
                }
                break guard;
            }
        };
        self.shared.taken();
        CheckpointGuard {
            shared: &self.shared,
            mutex,
            guard: Some(guard),
        }
    }

    /// Wakes every thread waiting in [`CheckpointGuard::wait_until`]. Call it after changing,
    /// under the lock, something a waiter checks; from any thread, with or without the lock.
    /// One atomic load when nobody waits.
    #[inline]
    pub fn notify_all(&self) {
        self.shared.condition.notify_all();
    }

    /// Wakes every thread waiting in [`CheckpointGuard::wait_until`], unconditionally. Call it
    /// after changing a flag that a waiter checks but that is not changed under the lock (a
    /// cancellation flag), from any thread, never while relying on the lock for ordering.
    pub fn wake_all(&self) {
        self.shared.condition.wake_all();
    }

    /// Consumes the lock and returns what it guarded.
    pub fn into_inner(self) -> T {
        match self.mutex {
            LockMutex::Barging(m) => m.into_inner(),
            LockMutex::Parking(m) => m.into_inner(),
        }
    }

    /// Takes the lock and views the data as `U` (a trait object, say), given how to view each
    /// mutex flavour as one holding `U`; at the call sites both closures are `|m| m` and the
    /// compiler inserts the unsizing coercion.
    #[inline]
    pub(crate) fn lock_as<'a, U: ?Sized>(
        &'a self,
        barging: impl FnOnce(&'a BargingMutex<T>) -> &'a BargingMutex<U>,
        parking: impl FnOnce(&'a Mutex<T>) -> &'a Mutex<U>,
    ) -> CheckpointGuard<'a, U> {
        let mutex = match &self.mutex {
            LockMutex::Barging(m) => MutexRef::Barging(barging(m)),
            LockMutex::Parking(m) => MutexRef::Parking(parking(m)),
        };
        let guard = mutex.acquire(&self.shared);
        self.shared.taken();
        CheckpointGuard {
            shared: &self.shared,
            mutex,
            guard: Some(guard),
        }
    }
}

impl<T> fmt::Debug for CheckpointLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointLock")
            .field("fairness", &self.shared.fairness)
            .finish_non_exhaustive()
    }
}

/// The mutex a guard came from, so it can re-take it after a wait.
enum MutexRef<'a, T: ?Sized> {
    Barging(&'a BargingMutex<T>),
    Parking(&'a Mutex<T>),
}

impl<T: ?Sized> Clone for MutexRef<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for MutexRef<'_, T> {}

enum GuardKind<'a, T: ?Sized> {
    Barging(BargingMutexGuard<'a, T>),
    Parking(MutexGuard<'a, T>),
}

impl<'a, T: ?Sized> MutexRef<'a, T> {
    /// Takes the mutex: `try_lock` first, so the uncontended path reads no clock; otherwise
    /// blocks and records how long it waited.
    #[inline]
    fn acquire(self, shared: &LockShared) -> GuardKind<'a, T> {
        // Uncontended: no clock read. Only a wait is timed (the lock-wait histogram and trace).
        match self.try_acquire() {
            Some(guard) => guard,
            None => self.acquire_slow(shared, Instant::now()),
        }
    }

    /// Takes the mutex if it is free right now.
    #[inline]
    fn try_acquire(self) -> Option<GuardKind<'a, T>> {
        match self {
            MutexRef::Barging(m) => m.try_lock().map(GuardKind::Barging),
            MutexRef::Parking(m) => m.try_lock().map(GuardKind::Parking),
        }
    }

    /// Blocks on the mutex; records the wait since `start`.
    #[cold]
    fn acquire_slow(self, shared: &LockShared, start: Instant) -> GuardKind<'a, T> {
        // Shown while it blocks: a stalled checkpoint's report names who waits for the lock.
        let waiting = shared
            .metrics
            .as_ref()
            .map(|m| m.live.lock_waiting(thread_role()));
        let guard = match self {
            MutexRef::Barging(m) => GuardKind::Barging(m.lock()),
            MutexRef::Parking(m) => GuardKind::Parking(m.lock()),
        };
        drop(waiting);
        if let Some(metrics) = &shared.metrics {
            metrics.lock_wait.record(start.elapsed());
        }
        shared
            .tracer
            .complete("lock-wait", || "checkpoint lock".to_string(), start);
        guard
    }
}

/// A raised request for the lock (see [`CheckpointLock::request_handover`]); dropping it
/// unlocked lowers the request again.
#[must_use = "the request is lowered when dropped; take the lock with `lock`"]
pub struct HandoverRequest<'a, T> {
    lock: &'a CheckpointLock<T>,
    live: bool,
}

impl<'a, T> HandoverRequest<'a, T> {
    /// Takes the lock (a source lets go at its next section), then lowers the request and
    /// wakes the sources waiting for that.
    ///
    /// The source lets go within one section, so the requester looks for the lock briefly
    /// (spinning, then yielding, for at most 100 us) before it parks on the
    /// mutex: a parked requester would add its own wake-up to every hand-over.
    #[inline]
    pub fn lock(mut self) -> CheckpointGuard<'a, T> {
        // Try, then look for the lock; meanwhile the count stays raised, so every section the
        // source starts lets go first.
        let guard = match self.lock.try_lock() {
            Some(guard) => guard,
            None => self.lock.lock_spinning(),
        };
        self.live = false;
        // Lowered under the lock and notified: the condition's fast-path protocol.
        self.lock.shared.handover.fetch_sub(1, Ordering::SeqCst);
        guard.notify_all();
        guard
    }
}

impl<T> Drop for HandoverRequest<'_, T> {
    fn drop(&mut self) {
        if self.live {
            self.lock.shared.handover.fetch_sub(1, Ordering::SeqCst);
            // Not under the lock: wake unconditionally.
            self.lock.wake_all();
        }
    }
}

impl<T> fmt::Debug for HandoverRequest<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandoverRequest")
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

/// Proof of holding the [`CheckpointLock`]: derefs to the guarded data; releases the lock when
/// dropped (handing it to the longest waiter under [`Fairness::Fair`]).
///
/// `T` may be unsized: a source context holds a guard of the source's cell with its output
/// erased to a trait object.
pub struct CheckpointGuard<'a, T: ?Sized> {
    shared: &'a LockShared,
    mutex: MutexRef<'a, T>,
    // `None` only inside `wait_until`/`unlocked`, while the lock is released.
    guard: Option<GuardKind<'a, T>>,
}

impl<T: ?Sized> CheckpointGuard<'_, T> {
    /// Waits on the lock's condition until `done` returns `true`, releasing the lock while it
    /// waits. `done` runs under the lock; the waiting thread is woken by
    /// [`CheckpointLock::notify_all`]. Returns at once if `done` already holds.
    ///
    /// Whoever changes what `done` reads under the lock calls
    /// [`notify_all`](CheckpointLock::notify_all) afterwards; whoever changes a flag `done`
    /// reads outside the lock calls [`wake_all`](CheckpointLock::wake_all) afterwards (the
    /// lost-wakeup protocol is in the `condition` module).
    pub fn wait_until(&mut self, done: impl FnMut(&mut T) -> bool) {
        self.wait_until_deadline(None, done);
    }

    /// As [`wait_until`](Self::wait_until), giving up after `timeout`. Returns whether `done`
    /// holds.
    pub fn wait_until_for(&mut self, timeout: Duration, done: impl FnMut(&mut T) -> bool) -> bool {
        self.wait_until_deadline(Some(deadline_after(timeout)), done)
    }

    fn wait_until_deadline(
        &mut self,
        deadline: Option<Instant>,
        done: impl FnMut(&mut T) -> bool,
    ) -> bool {
        let fair = self.shared.fairness == Fairness::Fair;
        self.wait_until_as(deadline, fair, done)
    }

    /// [`wait_until_deadline`](Self::wait_until_deadline), letting go of the lock fairly if
    /// `fair`.
    fn wait_until_as(
        &mut self,
        deadline: Option<Instant>,
        fair: bool,
        mut done: impl FnMut(&mut T) -> bool,
    ) -> bool {
        // Try.
        if done(&mut **self) {
            return true;
        }
        loop {
            // Register interest, try again, then block (the `condition` module's protocol).
            let ticket = self.shared.condition.register();
            if done(&mut **self) {
                self.shared.condition.unregister();
                return true;
            }
            // Release the lock, so the thread that changes what `done` checks can take it. Fairly
            // when asked (a source letting go for a hand-over): the lock goes to the parked
            // requester, with no window for a barging thread.
            if fair {
                self.release_fair();
            } else {
                self.release();
            }
            // Block until the epoch moved past the ticket (a notification after the registration)
            // or the deadline.
            let notified = self.shared.condition.block(ticket, deadline);
            // Take the lock again before checking: `done` reads the guarded state.
            self.guard = Some(self.mutex.acquire(self.shared));
            self.shared.taken();
            // Timed out: one last check, under the lock, is the answer.
            if !notified {
                return done(&mut **self);
            }
        }
    }

    /// Releases the lock, runs `f`, and takes the lock again.
    pub fn unlocked<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.release();
        // Re-take the lock even if `f` panics, so the guard's invariant holds during unwinding.
        struct Relock<'g, 'a, T: ?Sized>(&'g mut CheckpointGuard<'a, T>);
        impl<T: ?Sized> Drop for Relock<'_, '_, T> {
            fn drop(&mut self) {
                self.0.guard = Some(self.0.mutex.acquire(self.0.shared));
                self.0.shared.taken();
            }
        }
        let _relock = Relock(self);
        f()
    }

    /// Wakes every waiter of this lock (see [`CheckpointLock::notify_all`]).
    #[inline]
    pub fn notify_all(&self) {
        self.shared.condition.notify_all();
    }

    /// The lock's fairness setting.
    pub fn fairness(&self) -> Fairness {
        self.shared.fairness
    }

    /// Lets go of the lock while some thread asked for it (see
    /// [`CheckpointLock::request_handover`]), then takes it back, and says whether an errand is
    /// posted (see the module's `# Errands`); one atomic load when neither. A source context
    /// calls it before each section starts.
    #[inline]
    pub(crate) fn before_section(&mut self) -> Section {
        let shared = self.shared;
        // The hot path: one load per section. `SeqCst`, pairing with the requester's raise and the
        // poster's set: a request made before this load is served now, one made after it waits for
        // at most this section.
        if shared.handover.load(Ordering::SeqCst) == 0 {
            return Section::Start;
        }
        self.before_section_slow(shared)
    }

    #[cold]
    fn before_section_slow(&mut self, shared: &LockShared) -> Section {
        // A hand-over is requested: let go and wait until it was served (or an errand was posted).
        if shared.handover.load(Ordering::SeqCst) & !ERRAND != 0 {
            self.yield_slow(shared);
        }
        // An errand is posted: the caller runs it, holding the lock, before its section.
        if shared.handover.load(Ordering::SeqCst) & ERRAND != 0 {
            Section::Errand
        } else {
            Section::Start
        }
    }

    /// Whether some thread asked for the lock and does not have it yet, or an errand is posted
    /// (either way the source should end its section: the next one lets go or runs the errand).
    #[inline]
    pub(crate) fn handover_requested(&self) -> bool {
        self.shared.handover.load(Ordering::SeqCst) != 0
    }

    /// Waits, with the lock released, until every hand-over asked for is served. The lock is
    /// let go fairly (whatever the fairness setting): a requester that gave up looking and
    /// parked gets it handed over directly, with no window for another thread to barge in.
    ///
    /// An errand posted meanwhile ends the wait too: the caller runs it (taking the lock back
    /// once, for the errand) and then waits again. So a requester that is slow to take the lock
    /// it asked for (its thread kept off a core) does not hold up an errand.
    #[cold]
    fn yield_slow(&mut self, shared: &LockShared) {
        // Wait on the condition, the lock released fairly (handed to the parked requester), until
        // the requests are served (the requester lowers the count under the lock and notifies) or
        // an errand is posted (the poster wakes every waiter).
        self.wait_until_as(None, true, |_| {
            let word = shared.handover.load(Ordering::SeqCst);
            word & !ERRAND == 0 || word & ERRAND != 0
        });
    }

    /// The identity of the lock this guard holds (see [`CheckpointLock::id`]).
    pub(crate) fn lock_id(&self) -> LockId {
        LockId::of(self.shared)
    }

    fn release(&mut self) {
        // Before the unlock: the next holder's `taken` comes after it, so it is the one left.
        self.shared.released();
        // `Fair` hands a parking lock to the longest waiter; otherwise a plain unlock, which a hot
        // thread may barge back into.
        match self.guard.take() {
            Some(GuardKind::Parking(g)) if self.shared.fairness == Fairness::Fair => unlock_fair(g),
            other => drop(other),
        }
    }

    /// Lets go of the lock handing it to the longest waiter (a parking mutex; the barging one
    /// has no hand-off), whatever the fairness setting.
    fn release_fair(&mut self) {
        self.shared.released();
        match self.guard.take() {
            Some(GuardKind::Parking(g)) => unlock_fair(g),
            other => drop(other),
        }
    }
}

impl<T: ?Sized> Deref for CheckpointGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        match &self.guard {
            Some(GuardKind::Barging(g)) => g,
            Some(GuardKind::Parking(g)) => g,
            None => unreachable!("a checkpoint guard is only released inside its own methods"),
        }
    }
}

impl<T: ?Sized> DerefMut for CheckpointGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        match &mut self.guard {
            Some(GuardKind::Barging(g)) => &mut *g,
            Some(GuardKind::Parking(g)) => &mut *g,
            None => unreachable!("a checkpoint guard is only released inside its own methods"),
        }
    }
}

impl<T: ?Sized> Drop for CheckpointGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.release();
    }
}

impl<T: ?Sized> fmt::Debug for CheckpointGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckpointGuard")
            .field("fairness", &self.shared.fairness)
            .finish_non_exhaustive()
    }
}
