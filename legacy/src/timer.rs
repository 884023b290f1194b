#![doc = include_str!("timer.md")]

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use streamtask_core::metrics::TaskMetrics;
use streamtask_core::sync::atomic::{AtomicU8, Ordering};
use streamtask_core::sync::{Arc, Mutex};
use streamtask_core::task::{TaskConfig, TaskError};
use streamtask_core::trace::Tracer;
use streamtask_core::{
    OperatorError, catch_panic, time::Clock, time::Period, time::Timer, time::TimerError,
    time::TimerHandle, time::TimerService,
};
use streamtask_runtime::TimerScheduler;

use crate::lock::{CheckpointGuard, CheckpointLock, LockId};

/// The status of a [`SystemProcessingTimeService`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TimerStatus {
    /// Timers are scheduled and fire under the lock.
    Alive = 0,
    /// Nothing fires any more; registrations get a handle that never fires.
    Quiesced = 1,
    /// Registration is an error; the thread is gone.
    ShutDown = 2,
}

impl TimerStatus {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => TimerStatus::Alive,
            1 => TimerStatus::Quiesced,
            2 => TimerStatus::ShutDown,
            // Only `TimerStatus as u8` is ever stored.
            other => panic!("impossible TimerStatus byte {other}"),
        }
    }
}

type Fire = Box<dyn FnMut(Timer) -> Result<(), TaskError> + Send>;

/// One timer thread firing each timer under the checkpoint lock; the protocol is described
/// below.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::sync::mpsc;
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{time::Clock, time::ManualClock, time::Timer, time::TimerService};
/// use streamtask_legacy::{CheckpointLock, Fairness, SystemProcessingTimeService};
///
/// let clock = ManualClock::new(0);
/// let config = TaskConfig::new("doc").with_clock(Clock::Manual(clock.clone()));
/// let lock = Arc::new(CheckpointLock::new(Vec::<i64>::new(), Fairness::Eventual));
/// let (tx, rx) = mpsc::channel();
/// let timers = SystemProcessingTimeService::spawn(&config, |_error| {});
/// timers.bind(Arc::clone(&lock), move |fired: &mut Vec<i64>, timer: Timer| {
///     fired.push(timer.timestamp); // runs holding the checkpoint lock
///     tx.send(()).unwrap();
///     Ok(())
/// });
/// timers.register_timer(Timer { operator: 0, timestamp: 10, tag: 0 }).unwrap();
/// clock.advance(11);
/// rx.recv().unwrap();
/// timers.quiesce(&lock.lock());
/// timers.shutdown();
/// assert_eq!(*lock.lock(), vec![10]);
/// ```
///
#[doc = include_str!("timer.md")]
pub struct SystemProcessingTimeService {
    scheduler: TimerScheduler,
    status: Arc<AtomicU8>,
    target: Arc<Mutex<Option<Fire>>>,
    // The lock the bound target fires under (the fire closure keeps it alive), so `quiesce` can
    // check that its proof is a guard of that lock; `None` until bound and after shutdown.
    bound_lock: Mutex<Option<LockId>>,
    clock: Clock,
    metrics: std::sync::Arc<TaskMetrics>,
    tracer: Tracer,
}

impl SystemProcessingTimeService {
    /// Starts the timer thread of the task `config` describes (named `<task>-timer`, reading
    /// `config.clock`, recording lateness into `config.metrics`). Timers fire once a target is
    /// [bound](Self::bind); `on_error` receives the first failure of a target, after which the
    /// thread stops.
    pub fn spawn(config: &TaskConfig, on_error: impl FnOnce(TaskError) + Send + 'static) -> Self {
        let target: Arc<Mutex<Option<Fire>>> = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&target);
        let scheduler = TimerScheduler::spawn(
            &format!("{}-timer", config.name),
            config.clock.clone(),
            move |timer: Timer| -> Result<(), TaskError> {
                match slot.lock().as_mut() {
                    Some(fire) => fire(timer),
                    None => {
                        log::debug!("timer {timer:?} fired before a target was bound; dropped");
                        Ok(())
                    }
                }
            },
            on_error,
        );
        SystemProcessingTimeService {
            scheduler,
            status: Arc::new(AtomicU8::new(TimerStatus::Alive as u8)),
            target,
            bound_lock: Mutex::new(None),
            clock: config.clock.clone(),
            metrics: std::sync::Arc::clone(&config.metrics),
            tracer: config.tracer.clone(),
        }
    }

    /// Makes every due timer run `target` on what `lock` guards, holding the lock, while the
    /// service is alive. Bind before anything registers a timer; a later bind replaces the
    /// target.
    pub fn bind<X: Send + 'static>(
        &self,
        lock: Arc<CheckpointLock<X>>,
        mut target: impl FnMut(&mut X, Timer) -> Result<(), OperatorError> + Send + 'static,
    ) {
        let lock_id = lock.id();
        let status = Arc::clone(&self.status);
        let clock = self.clock.clone();
        let metrics = std::sync::Arc::clone(&self.metrics);
        let tracer = self.tracer.clone();
        let fire: Fire = Box::new(move |timer: Timer| {
            let mut locked = lock.lock();
            // Inside the lock: after `quiesce` nothing fires, even a timer that was already
            // waiting for the lock.
            if TimerStatus::from_u8(status.load(Ordering::Acquire)) != TimerStatus::Alive {
                return Ok(());
            }
            metrics
                .timer_lateness
                .record_micros(lateness_micros(&clock, timer.timestamp));
            metrics.timers_fired.inc();
            let _span = tracer.span("timer", || {
                format!("timer op {} @{}", timer.operator, timer.timestamp)
            });
            let result = catch_panic(|| target(&mut locked, timer));
            // A timer may free room a waiter on the lock's condition needs (an async timeout).
            locked.notify_all();
            match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(TaskError::Operator(e)),
                Err(panic) => Err(TaskError::Panic(panic)),
            }
        });
        *self.target.lock() = Some(fire);
        *self.bound_lock.lock() = Some(lock_id);
    }

    /// The service's status.
    pub fn status(&self) -> TimerStatus {
        TimerStatus::from_u8(self.status.load(Ordering::Acquire))
    }

    /// Stops firing, for good: later registrations return a handle that never fires. `held` is
    /// the guard of the checkpoint lock this service fires under: holding it means no timer
    /// runs now, and every later one sees the new status inside the lock.
    ///
    /// # Panics
    ///
    /// If `held` is a guard of another lock than the one the service was
    /// [bound](Self::bind) to: it would prove nothing, and a timer could fire while this runs.
    pub fn quiesce<X: ?Sized>(&self, held: &CheckpointGuard<'_, X>) {
        if let Some(bound) = *self.bound_lock.lock() {
            assert!(
                held.lock_id() == bound,
                "SystemProcessingTimeService::quiesce needs a guard of the checkpoint lock the \
                 service was bound to; quiesce while holding that lock"
            );
        }
        let _ = self.status.compare_exchange(
            TimerStatus::Alive as u8,
            TimerStatus::Quiesced as u8,
            // Release: a fire that acquires the checkpoint lock after ours sees the new status
            // (the lock orders them; AcqRel keeps the CAS itself ordered too).
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.scheduler.quiesce();
    }

    /// Shuts the service down without waiting for its thread (see [`TimerScheduler::stop`]):
    /// for a task giving up on a thread that holds the checkpoint lock a timer may wait for.
    /// Idempotent; [`shutdown`](Self::shutdown) still joins.
    ///
    /// [`TimerScheduler::stop`]: streamtask_runtime::TimerScheduler::stop
    pub fn stop(&self) {
        self.status
            .store(TimerStatus::ShutDown as u8, Ordering::Release);
        self.scheduler.stop();
    }

    /// Shuts the service down and joins its thread. Idempotent.
    ///
    /// # Panics
    ///
    /// If called from the timer thread itself (from inside a timer). Do not call it while
    /// holding the checkpoint lock: the thread may be waiting for it.
    pub fn shutdown(&self) {
        self.status
            .store(TimerStatus::ShutDown as u8, Ordering::Release);
        self.scheduler.shutdown();
        // Drop the target, and with it the lock it holds (its id means nothing after that).
        self.target.lock().take();
        self.bound_lock.lock().take();
    }

    /// Number of timers waiting to fire.
    pub fn pending(&self) -> usize {
        self.scheduler.pending()
    }
}

impl TimerService for SystemProcessingTimeService {
    fn current_processing_time(&self) -> i64 {
        self.clock.now_millis()
    }

    fn register_timer(&self, timer: Timer) -> Result<TimerHandle, TimerError> {
        match self.status() {
            TimerStatus::Alive => self.scheduler.register_timer(timer),
            TimerStatus::Quiesced => Ok(TimerHandle::NEVER),
            TimerStatus::ShutDown => Err(TimerError::ShutDown),
        }
    }

    fn register_periodic(&self, first: Timer, period: Period) -> Result<TimerHandle, TimerError> {
        let period = period.validate()?;
        match self.status() {
            // Each run fires under the lock like any timer; a fixed delay counts from the end
            // of the run (the scheduler's `fire` returns once the target did).
            TimerStatus::Alive => self.scheduler.register_periodic(first, period),
            TimerStatus::Quiesced => Ok(TimerHandle::NEVER),
            TimerStatus::ShutDown => Err(TimerError::ShutDown),
        }
    }

    fn cancel_timer(&self, handle: TimerHandle) {
        self.scheduler.cancel_timer(handle);
    }
}

impl Drop for SystemProcessingTimeService {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for SystemProcessingTimeService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemProcessingTimeService")
            .field("status", &self.status())
            .field("pending", &self.pending())
            .finish()
    }
}

/// How late a timer for `timestamp` fires now: the time since it became due (`timestamp + 1`),
/// in microseconds (millisecond steps under a manual clock).
fn lateness_micros(clock: &Clock, timestamp: i64) -> u64 {
    let due_micros = i128::from(timestamp.saturating_add(1)) * 1000;
    let now_micros = match clock {
        Clock::System => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i128),
        Clock::Manual(manual) => i128::from(manual.now_millis()) * 1000,
    };
    u64::try_from((now_micros - due_micros).max(0)).unwrap_or(u64::MAX)
}
