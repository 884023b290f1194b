//! The timer scheduler thread both models build their timer services on ([`TimerScheduler`]):
//! it fires due timers in deadline order and runs periodic series by the rules of
//! [`streamtask_core::time`].
//!
//! # The scheduler's states
//!
//! | state | registering | due timers | moves to |
//! |---|---|---|---|
//! | `Alive` | scheduled | fire | `Quiesced`, `ShutDown` |
//! | `Quiesced` | a handle that never fires | dropped | `ShutDown` |
//! | `ShutDown` | [`TimerError::ShutDown`] | dropped | - |
//!
//! # When a periodic run completed
//!
//! The legacy model's callback runs on the timer thread, so it completes when `fire` returns
//! ([`TimerScheduler::spawn`]); the mailbox model's run is a mail, so it completes when the mail
//! ran and calls [`Rearm::done`] ([`TimerScheduler::spawn_deferred`]); a run whose mail never
//! runs (the task ended) ends the series.
//!
//! A failing run (an error from `fire`) stops the scheduler thread, so no later run of any timer
//! fires; the task fails (`on_error`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::task::Waker;
use std::time::Duration;

use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::{Arc, Condvar, Mutex, thread};
use streamtask_core::time::{Clock, Period, Timer, TimerError, TimerHandle, TimerService};

/// The lifecycle state of a [`TimerScheduler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SchedulerState {
    /// Timers are scheduled and fire.
    Alive = 0,
    /// Nothing fires any more; registrations get a handle that never fires.
    Quiesced = 1,
    /// Registration is an error.
    ShutDown = 2,
}

impl SchedulerState {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => SchedulerState::Alive,
            1 => SchedulerState::Quiesced,
            2 => SchedulerState::ShutDown,
            // Only `SchedulerState as u8` is ever stored.
            other => panic!("impossible SchedulerState byte {other}"),
        }
    }
}

/// One timer thread that calls `fire` for each due [`Timer`], in deadline order (registration
/// order among equal deadlines).
///
/// It knows nothing of locks or mailboxes: the legacy model's `fire` takes the checkpoint lock,
/// the mailbox model's enqueues a mail. `fire` returning an error stops the thread and hands the
/// error to `on_error` (the task fails).
///
/// The thread waits on a condition variable until the earliest deadline, an earlier
/// registration, a manual clock's move, or shutdown. Lost wakeups are impossible because every
/// change it waits for is made under the same mutex it checks under.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use streamtask_core::{time::Clock, time::ManualClock, time::Timer, time::TimerService};
/// use streamtask_runtime::TimerScheduler;
///
/// let clock = ManualClock::new(0);
/// let (tx, rx) = mpsc::channel();
/// let scheduler = TimerScheduler::spawn(
///     "doc-timers",
///     Clock::Manual(clock.clone()),
///     move |timer: Timer| -> Result<(), std::convert::Infallible> {
///         tx.send(timer.timestamp).unwrap();
///         Ok(())
///     },
///     |_err| {},
/// );
/// scheduler.register_timer(Timer { operator: 0, timestamp: 10, tag: 0 }).unwrap();
/// clock.advance(11);
/// assert_eq!(rx.recv().unwrap(), 10);
/// scheduler.shutdown();
/// ```
pub struct TimerScheduler {
    shared: Arc<SchedulerShared>,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
    clock: Clock,
}

struct SchedulerShared {
    state: AtomicU8,
    queue: Mutex<SchedulerQueue>,
    changed: Condvar,
}

#[derive(Default)]
struct SchedulerQueue {
    // Key (effective deadline, sequence): deadline order, registration order among equals.
    timers: BTreeMap<(i64, u64), Timer>,
    // The periodic series by sequence number (one per registration, kept across runs).
    periodic: HashMap<u64, PeriodicEntry>,
    next_seq: u64,
    // Bumped on every change the thread must react to; guards against lost wakeups from clock
    // moves that happen between the thread's check and its wait.
    epoch: u64,
}

// One periodic series.
struct PeriodicEntry {
    period: Period,
    // The deadline of the next run in `timers`; `None` while a fixed-delay run is in flight.
    armed: Option<i64>,
}

impl TimerScheduler {
    /// Starts the timer thread named `name`. A fixed-delay run completes when `fire` returns.
    pub fn spawn<E, F, H>(name: &str, clock: Clock, mut fire: F, on_error: H) -> Self
    where
        F: FnMut(Timer) -> Result<(), E> + Send + 'static,
        H: FnOnce(E) + Send + 'static,
        E: Send + 'static,
    {
        TimerScheduler::spawn_deferred(
            name,
            clock,
            move |timer, rearm: Option<Rearm>| {
                fire(timer)?;
                if let Some(rearm) = rearm {
                    rearm.done();
                }
                Ok(())
            },
            on_error,
        )
    }

    /// Starts the timer thread named `name` for a model whose runs complete later than `fire`
    /// returns (the mailbox model: `fire` enqueues a mail). `fire` gets a [`Rearm`] with each
    /// run of a fixed-delay timer; calling [`Rearm::done`] when the run completed schedules the
    /// next one, dropping it ends the series.
    pub fn spawn_deferred<E, F, H>(name: &str, clock: Clock, mut fire: F, on_error: H) -> Self
    where
        F: FnMut(Timer, Option<Rearm>) -> Result<(), E> + Send + 'static,
        H: FnOnce(E) + Send + 'static,
        E: Send + 'static,
    {
        let shared = Arc::new(SchedulerShared {
            state: AtomicU8::new(SchedulerState::Alive as u8),
            queue: Mutex::new(SchedulerQueue::default()),
            changed: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let thread_clock = clock.clone();
        let body = move || {
            streamtask_core::live::set_thread_role(streamtask_core::live::ThreadRole::Timer);
            let waker = Waker::from(std::sync::Arc::new(EpochWaker(Arc::clone(&thread_shared))));
            let _subscription = thread_clock.subscribe(waker);
            if let Err(e) = run_scheduler(&thread_shared, &thread_clock, &mut fire) {
                on_error(e);
            }
        };
        let handle = crate::sync::spawn_named(name, body);
        TimerScheduler {
            shared,
            thread: Mutex::new(Some(handle)),
            clock,
        }
    }

    /// The scheduler's state.
    pub fn state(&self) -> SchedulerState {
        SchedulerState::from_u8(self.shared.state.load(Ordering::Acquire))
    }

    /// Number of timers waiting to fire.
    pub fn pending(&self) -> usize {
        self.shared.queue.lock().timers.len()
    }

    /// Stops firing: due timers are dropped and new registrations return
    /// [`TimerHandle::NEVER`]. A `fire` already running finishes; callers that need "nothing
    /// runs after this returns" check the state inside their own critical section.
    pub fn quiesce(&self) {
        let mut queue = self.shared.queue.lock();
        let _ = self.shared.state.compare_exchange(
            SchedulerState::Alive as u8,
            SchedulerState::Quiesced as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        queue.timers.clear();
        queue.periodic.clear();
        queue.epoch += 1;
        self.shared.changed.notify_all();
    }

    /// Shuts the scheduler down without waiting for its thread: the thread ends at once unless
    /// a `fire` is running (then once it returns); [`shutdown`](Self::shutdown) joins it. For a
    /// task that gives up on a stuck thread and must not wait behind it. Idempotent.
    pub fn stop(&self) {
        let mut queue = self.shared.queue.lock();
        self.shared
            .state
            .store(SchedulerState::ShutDown as u8, Ordering::Release);
        queue.timers.clear();
        queue.periodic.clear();
        queue.epoch += 1;
        self.shared.changed.notify_all();
    }

    /// Shuts the scheduler down and joins its thread. Idempotent.
    ///
    /// # Panics
    ///
    /// Must not be called from inside `fire` (the thread cannot join itself); doing so panics.
    pub fn shutdown(&self) {
        self.stop();
        let handle = self.thread.lock().take();
        if let Some(handle) = handle {
            assert!(
                handle.thread().id() != thread::current().id(),
                "TimerScheduler::shutdown called from its own timer thread"
            );
            // A panicking `fire` has already been reported through the caller's own handling;
            // joining only makes sure the thread is gone.
            let _ = handle.join();
        }
    }
}

impl TimerScheduler {
    // Inserts a run due at `deadline` under the queue lock; wakes the thread if it is the
    // earliest, so it does not sleep past it.
    fn insert_locked(&self, queue: &mut SchedulerQueue, deadline: i64, seq: u64, timer: Timer) {
        insert_run(&self.shared, queue, deadline, seq, timer);
    }

    fn register(&self, timer: Timer, period: Option<Period>) -> Result<TimerHandle, TimerError> {
        let now = self.clock.now_millis();
        let mut queue = self.shared.queue.lock();
        match self.state() {
            SchedulerState::Alive => {}
            SchedulerState::Quiesced => return Ok(TimerHandle::NEVER),
            SchedulerState::ShutDown => return Err(TimerError::ShutDown),
        }
        // A timer in the past gets "now" as its deadline, so past timers fire in registration
        // order rather than timestamp order.
        let deadline = timer.timestamp.saturating_add(1).max(now);
        let seq = queue.next_seq;
        queue.next_seq += 1;
        if let Some(period) = period {
            queue.periodic.insert(
                seq,
                PeriodicEntry {
                    period,
                    armed: Some(deadline),
                },
            );
        }
        self.insert_locked(&mut queue, deadline, seq, timer);
        Ok(TimerHandle::new(deadline, seq))
    }
}

impl TimerService for TimerScheduler {
    fn current_processing_time(&self) -> i64 {
        self.clock.now_millis()
    }

    fn register_timer(&self, timer: Timer) -> Result<TimerHandle, TimerError> {
        self.register(timer, None)
    }

    fn register_periodic(&self, first: Timer, period: Period) -> Result<TimerHandle, TimerError> {
        self.register(first, Some(period.validate()?))
    }

    fn cancel_timer(&self, handle: TimerHandle) {
        if handle == TimerHandle::NEVER {
            return;
        }
        let mut queue = self.shared.queue.lock();
        // A periodic series is known by its sequence number; its next run (if armed) is removed
        // with it, and a run in flight finds no entry when it completes, so nothing follows.
        match queue.periodic.remove(&handle.seq()) {
            Some(PeriodicEntry {
                armed: Some(deadline),
                ..
            }) => {
                queue.timers.remove(&(deadline, handle.seq()));
            }
            Some(PeriodicEntry { armed: None, .. }) => {}
            None => {
                queue.timers.remove(&(handle.deadline(), handle.seq()));
            }
        }
    }
}

fn insert_run(
    shared: &SchedulerShared,
    queue: &mut SchedulerQueue,
    deadline: i64,
    seq: u64,
    timer: Timer,
) {
    let is_earliest = queue
        .timers
        .first_key_value()
        .is_none_or(|(&(d, _), _)| deadline < d);
    queue.timers.insert((deadline, seq), timer);
    if is_earliest {
        queue.epoch += 1;
        shared.changed.notify_all();
    }
}

/// The completion of one run of a fixed-delay timer, handed to a
/// [`spawn_deferred`](TimerScheduler::spawn_deferred) scheduler's `fire`: [`done`](Self::done)
/// schedules the next run `delay` after now; dropping it instead ends the series (the run never
/// happened, e.g. its mail was refused by a closed mailbox).
pub struct Rearm {
    shared: Arc<SchedulerShared>,
    clock: Clock,
    seq: u64,
    due: i64,
    timer: Timer,
    done: bool,
}

impl Rearm {
    /// The run completed: the next one is due `delay` after now, unless the series was
    /// cancelled, or the scheduler quiesced or shut down, meanwhile.
    pub fn done(mut self) {
        self.done = true;
        let completed = self.clock.now_millis();
        let mut queue = self.shared.queue.lock();
        if SchedulerState::from_u8(self.shared.state.load(Ordering::Acquire))
            != SchedulerState::Alive
        {
            return;
        }
        let Some(entry) = queue.periodic.get_mut(&self.seq) else {
            return; // cancelled while in flight
        };
        let timestamp = entry.period.next_timestamp(self.timer.timestamp, completed);
        let next = timestamp.saturating_add(1);
        entry.armed = Some(next);
        let timer = Timer {
            timestamp,
            ..self.timer
        };
        insert_run(&self.shared, &mut queue, next, self.seq, timer);
    }
}

impl Drop for Rearm {
    fn drop(&mut self) {
        if !self.done {
            // The run never completed: the series ends here (and stops counting as registered).
            self.shared.queue.lock().periodic.remove(&self.seq);
        }
    }
}

impl fmt::Debug for Rearm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rearm")
            .field("timer", &self.timer)
            .field("due", &self.due)
            .finish_non_exhaustive()
    }
}

impl Drop for TimerScheduler {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for TimerScheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerScheduler")
            .field("state", &self.state())
            .field("pending", &self.pending())
            .finish()
    }
}

fn run_scheduler<E>(
    shared: &Arc<SchedulerShared>,
    clock: &Clock,
    fire: &mut impl FnMut(Timer, Option<Rearm>) -> Result<(), E>,
) -> Result<(), E> {
    let mut queue = shared.queue.lock();
    loop {
        match SchedulerState::from_u8(shared.state.load(Ordering::Acquire)) {
            SchedulerState::ShutDown => return Ok(()),
            SchedulerState::Quiesced => {
                shared.changed.wait(&mut queue);
                continue;
            }
            SchedulerState::Alive => {}
        }
        let now = clock.now_millis();
        let due = match queue.timers.first_key_value() {
            Some((&(deadline, seq), _)) if deadline <= now => Some((deadline, seq)),
            _ => None,
        };
        if let Some((deadline, seq)) = due {
            let timer = queue
                .timers
                .remove(&(deadline, seq))
                .expect("due timer is present");
            let rearm = match queue.periodic.get_mut(&seq) {
                None => None,
                Some(entry) => match entry.period {
                    // Fixed rate: the next run is armed before this one fires, so a slow run
                    // is followed by the ones that fell due meanwhile (catch up).
                    Period::FixedRate(_) => {
                        let timestamp = entry.period.next_timestamp(deadline - 1, now);
                        let next = timestamp.saturating_add(1);
                        entry.armed = Some(next);
                        let next_timer = Timer { timestamp, ..timer };
                        insert_run(shared, &mut queue, next, seq, next_timer);
                        None
                    }
                    // Fixed delay: armed when the run completes.
                    Period::FixedDelay(_) => {
                        entry.armed = None;
                        Some(Rearm {
                            shared: Arc::clone(shared),
                            clock: clock.clone(),
                            seq,
                            due: deadline,
                            timer,
                            done: false,
                        })
                    }
                },
            };
            // Fire outside the queue lock: `fire` may register new timers.
            let result = crate::sync::unlocked(&mut queue, false, || fire(timer, rearm));
            result?;
            continue;
        }
        let epoch = queue.epoch;
        match (queue.timers.first_key_value(), clock) {
            (Some((&(deadline, _), _)), Clock::System) => {
                let wait = Duration::from_millis(u64::try_from(deadline - now).unwrap_or(0));
                shared.changed.wait_for(&mut queue, wait);
            }
            _ => {
                // Nothing scheduled, or a manual clock (which wakes us by bumping the epoch).
                while queue.epoch == epoch {
                    shared.changed.wait(&mut queue);
                }
            }
        }
    }
}

// Wakes the scheduler thread when a manual clock moves.
//
// A strong reference is no cycle that outlives the thread: the clock holds this waker only
// through the thread's `ClockSubscription`, which the thread drops when it ends, so the
// scheduler's shared state is freed with the thread either way. (Not a `Weak`: loom's `Arc`
// has none, and manual clocks must drive the scheduler under loom too.)
struct EpochWaker(Arc<SchedulerShared>);

impl std::task::Wake for EpochWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        let mut queue = self.0.queue.lock();
        queue.epoch += 1;
        self.0.changed.notify_all();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use streamtask_core::time::ManualClock;

    fn collecting(clock: &ManualClock) -> (TimerScheduler, mpsc::Receiver<Timer>) {
        let (tx, rx) = mpsc::channel();
        let scheduler = TimerScheduler::spawn(
            "test-timers",
            Clock::Manual(clock.clone()),
            move |t| -> Result<(), ()> {
                let _ = tx.send(t);
                Ok(())
            },
            |_| {},
        );
        (scheduler, rx)
    }

    fn timer(timestamp: i64, tag: u64) -> Timer {
        Timer {
            operator: 0,
            timestamp,
            tag,
        }
    }

    #[test]
    fn fires_only_once_time_has_passed_the_timestamp() {
        let clock = ManualClock::new(0);
        let (scheduler, rx) = collecting(&clock);
        scheduler.register_timer(timer(10, 1)).unwrap();
        clock.set(10);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        clock.set(11);
        assert_eq!(rx.recv().unwrap().tag, 1);
        scheduler.shutdown();
    }

    #[test]
    fn past_timers_fire_in_registration_order() {
        let clock = ManualClock::new(100);
        let (scheduler, rx) = collecting(&clock);
        for (ts, tag) in [(50, 1), (10, 2), (99, 3), (0, 4)] {
            scheduler.register_timer(timer(ts, tag)).unwrap();
        }
        let tags: Vec<u64> = (0..4).map(|_| rx.recv().unwrap().tag).collect();
        assert_eq!(tags, vec![1, 2, 3, 4]);
        scheduler.shutdown();
    }

    #[test]
    fn future_timers_fire_in_deadline_order() {
        let clock = ManualClock::new(0);
        let (scheduler, rx) = collecting(&clock);
        for (ts, tag) in [(30, 3), (10, 1), (20, 2), (20, 22)] {
            scheduler.register_timer(timer(ts, tag)).unwrap();
        }
        clock.set(100);
        let tags: Vec<u64> = (0..4).map(|_| rx.recv().unwrap().tag).collect();
        assert_eq!(tags, vec![1, 2, 22, 3]);
        scheduler.shutdown();
    }

    #[test]
    fn cancelled_timers_do_not_fire() {
        let clock = ManualClock::new(0);
        let (scheduler, rx) = collecting(&clock);
        let a = scheduler.register_timer(timer(5, 1)).unwrap();
        scheduler.register_timer(timer(6, 2)).unwrap();
        scheduler.cancel_timer(a);
        scheduler.cancel_timer(TimerHandle::NEVER);
        clock.set(10);
        assert_eq!(rx.recv().unwrap().tag, 2);
        assert!(rx.recv_timeout(Duration::from_millis(30)).is_err());
        scheduler.shutdown();
    }

    #[test]
    fn quiesced_scheduler_fires_nothing_and_hands_out_never_handles() {
        let clock = ManualClock::new(0);
        let (scheduler, rx) = collecting(&clock);
        scheduler.register_timer(timer(5, 1)).unwrap();
        scheduler.quiesce();
        assert_eq!(scheduler.state(), SchedulerState::Quiesced);
        assert_eq!(
            scheduler.register_timer(timer(1, 2)).unwrap(),
            TimerHandle::NEVER
        );
        clock.set(100);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        scheduler.shutdown();
    }

    #[test]
    fn registration_after_shutdown_is_an_error() {
        let clock = ManualClock::new(0);
        let (scheduler, _rx) = collecting(&clock);
        scheduler.shutdown();
        scheduler.shutdown();
        assert_eq!(
            scheduler.register_timer(timer(1, 1)),
            Err(TimerError::ShutDown)
        );
    }

    #[test]
    fn an_error_from_fire_stops_the_thread_and_is_reported() {
        let clock = ManualClock::new(0);
        let (tx, rx) = mpsc::channel();
        let scheduler = TimerScheduler::spawn(
            "failing",
            Clock::Manual(clock.clone()),
            |t: Timer| if t.tag == 2 { Err(t.tag) } else { Ok(()) },
            move |e| tx.send(e).unwrap(),
        );
        scheduler.register_timer(timer(1, 1)).unwrap();
        scheduler.register_timer(timer(2, 2)).unwrap();
        clock.set(5);
        assert_eq!(rx.recv().unwrap(), 2);
        scheduler.shutdown();
    }

    #[test]
    fn system_clock_timers_fire() {
        let (tx, rx) = mpsc::channel();
        let scheduler = TimerScheduler::spawn(
            "system",
            Clock::System,
            move |t: Timer| -> Result<(), ()> {
                let _ = tx.send(t.tag);
                Ok(())
            },
            |_| {},
        );
        let now = scheduler.current_processing_time();
        scheduler.register_timer(timer(now + 5, 7)).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), 7);
        scheduler.shutdown();
    }

    #[test]
    fn fire_may_register_more_timers() {
        let clock = ManualClock::new(0);
        let (tx, rx) = mpsc::channel();
        let slot: std::sync::Arc<Mutex<Option<std::sync::Weak<TimerScheduler>>>> =
            std::sync::Arc::new(Mutex::new(None));
        let slot2 = std::sync::Arc::clone(&slot);
        let scheduler = std::sync::Arc::new(TimerScheduler::spawn(
            "chained",
            Clock::Manual(clock.clone()),
            move |t: Timer| -> Result<(), ()> {
                let _ = tx.send(t.tag);
                if t.tag < 3
                    && let Some(s) = slot2.lock().as_ref().and_then(|w| w.upgrade())
                {
                    s.register_timer(timer(t.timestamp, t.tag + 1)).unwrap();
                }
                Ok(())
            },
            |_| {},
        ));
        *slot.lock() = Some(std::sync::Arc::downgrade(&scheduler));
        scheduler.register_timer(timer(0, 1)).unwrap();
        clock.set(1);
        let tags: Vec<u64> = (0..3).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(tags, vec![1, 2, 3]);
        scheduler.shutdown();
    }

    fn stamps(rx: &mpsc::Receiver<Timer>, n: usize) -> Vec<i64> {
        (0..n).map(|_| rx.recv().unwrap().timestamp).collect()
    }

    // A one-shot sentinel due after everything the test expects: once it fired, every run due
    // before it has fired too (one thread, deadline order), so "nothing else" needs no timing.
    const SENTINEL: u64 = 999;

    fn until_sentinel(rx: &mpsc::Receiver<Timer>) -> Vec<i64> {
        let mut seen = Vec::new();
        loop {
            let t = rx.recv().unwrap();
            if t.tag == SENTINEL {
                return seen;
            }
            seen.push(t.timestamp);
        }
    }

    #[test]
    fn fixed_rate_runs_catch_up_on_the_due_times() {
        let clock = ManualClock::new(0);
        let (scheduler, rx) = collecting(&clock);
        scheduler
            .register_periodic(timer(10, 1), Period::FixedRate(10))
            .unwrap();
        clock.set(11);
        assert_eq!(stamps(&rx, 1), vec![10]);
        // Four periods pass at once: the runs due meanwhile fire back to back, on their times.
        clock.set(51);
        scheduler.register_timer(timer(50, SENTINEL)).unwrap();
        assert_eq!(until_sentinel(&rx), vec![20, 30, 40, 50]);
        scheduler.shutdown();
    }

    #[test]
    fn fixed_delay_runs_count_from_the_end_of_the_previous_run() {
        let clock = ManualClock::new(0);
        let (scheduler, rx) = collecting(&clock);
        scheduler
            .register_periodic(timer(10, 1), Period::FixedDelay(10))
            .unwrap();
        // Far past several periods: one run, and the next is due 10 after it completed.
        clock.set(45);
        assert_eq!(stamps(&rx, 1), vec![10]);
        // The run is re-armed once `fire` returned, reading the clock then: wait for that
        // before moving the clock on (no timing, only the re-armed run appearing).
        while scheduler.pending() == 0 {
            std::thread::yield_now();
        }
        clock.set(56);
        scheduler.register_timer(timer(60, SENTINEL)).unwrap();
        clock.set(61);
        assert_eq!(until_sentinel(&rx), vec![55]);
        scheduler.shutdown();
    }

    #[test]
    fn cancelling_a_periodic_handle_ends_the_series() {
        let clock = ManualClock::new(0);
        let (scheduler, rx) = collecting(&clock);
        let handle = scheduler
            .register_periodic(timer(0, 1), Period::FixedRate(5))
            .unwrap();
        clock.set(1);
        assert_eq!(stamps(&rx, 1), vec![0]);
        scheduler.cancel_timer(handle);
        assert_eq!(scheduler.pending(), 0);
        clock.set(100);
        scheduler.register_timer(timer(99, SENTINEL)).unwrap();
        assert_eq!(until_sentinel(&rx), Vec::<i64>::new());
        scheduler.shutdown();
    }

    #[test]
    fn a_deferred_run_rearms_only_when_done_and_a_cancel_in_flight_wins() {
        let clock = ManualClock::new(0);
        let (tx, rx) = mpsc::channel::<(Timer, Option<Rearm>)>();
        let scheduler = TimerScheduler::spawn_deferred(
            "deferred",
            Clock::Manual(clock.clone()),
            move |t, rearm| -> Result<(), ()> {
                let _ = tx.send((t, rearm));
                Ok(())
            },
            |_| {},
        );
        let handle = scheduler
            .register_periodic(timer(0, 1), Period::FixedDelay(10))
            .unwrap();
        clock.set(1);
        let (first, rearm) = rx.recv().unwrap();
        assert_eq!(first.timestamp, 0);
        // Not re-armed while the run is in flight, however much time passes.
        clock.set(30);
        assert_eq!(scheduler.pending(), 0);
        rearm.expect("a fixed-delay run carries its rearm").done();
        assert_eq!(scheduler.pending(), 1);
        clock.set(41);
        let (second, rearm) = rx.recv().unwrap();
        assert_eq!(second.timestamp, 40, "10 after the run completed at 30");
        scheduler.cancel_timer(handle);
        rearm.unwrap().done();
        assert_eq!(scheduler.pending(), 0, "a cancel in flight is final");
        scheduler.shutdown();
    }

    #[test]
    fn a_dropped_rearm_ends_the_series() {
        let clock = ManualClock::new(0);
        let (tx, rx) = mpsc::channel::<Option<Rearm>>();
        let scheduler = TimerScheduler::spawn_deferred(
            "dropped",
            Clock::Manual(clock.clone()),
            move |_t, rearm| -> Result<(), ()> {
                let _ = tx.send(rearm);
                Ok(())
            },
            |_| {},
        );
        scheduler
            .register_periodic(timer(0, 1), Period::FixedDelay(1))
            .unwrap();
        clock.set(1);
        drop(rx.recv().unwrap());
        clock.set(100);
        assert_eq!(scheduler.pending(), 0);
        assert!(scheduler.shared.queue.lock().periodic.is_empty());
        scheduler.shutdown();
    }

    #[test]
    fn a_failing_periodic_run_stops_every_later_run() {
        let clock = ManualClock::new(0);
        let (tx, rx) = mpsc::channel();
        let (err_tx, err_rx) = mpsc::channel();
        let scheduler = TimerScheduler::spawn(
            "failing-periodic",
            Clock::Manual(clock.clone()),
            move |t: Timer| {
                let _ = tx.send(t.timestamp);
                if t.timestamp == 10 {
                    Err("boom")
                } else {
                    Ok(())
                }
            },
            move |e| err_tx.send(e).unwrap(),
        );
        scheduler
            .register_periodic(timer(0, 1), Period::FixedRate(10))
            .unwrap();
        clock.set(100);
        assert_eq!(err_rx.recv().unwrap(), "boom");
        // The thread is gone: the runs due at 20..=90 never fired.
        scheduler.shutdown();
        assert_eq!(rx.iter().collect::<Vec<_>>(), vec![0, 10]);
    }

    #[test]
    fn quiesce_ends_periodic_series_and_bad_periods_are_refused() {
        let clock = ManualClock::new(0);
        let (scheduler, rx) = collecting(&clock);
        assert_eq!(
            scheduler.register_periodic(timer(0, 1), Period::FixedRate(0)),
            Err(TimerError::NonPositivePeriod(0))
        );
        scheduler
            .register_periodic(timer(5, 1), Period::FixedDelay(5))
            .unwrap();
        scheduler.quiesce();
        assert_eq!(
            scheduler.register_periodic(timer(5, 2), Period::FixedRate(5)),
            Ok(TimerHandle::NEVER)
        );
        clock.set(100);
        scheduler.shutdown();
        assert!(rx.try_recv().is_err());
    }
}
