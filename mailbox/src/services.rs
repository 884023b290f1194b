//! The operator services of the mailbox model: processing-time timers and events, both turned
//! into mails at the target operator's [`Priority`].
//!
#![doc = include_str!("services.md")]

use std::convert::Infallible;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{EventSink, OperatorEvent};
use streamtask_core::sync::atomic::{AtomicBool, Ordering};
use streamtask_core::sync::{Arc, Mutex};
use streamtask_core::trace::Tracer;
use streamtask_core::{
    time::Clock, time::Period, time::Timer, time::TimerError, time::TimerHandle, time::TimerService,
};
use streamtask_runtime::{Rearm, TimerScheduler};

use crate::executor::Rejected;
use crate::letter::MailAction;
use crate::mail::Priority;
use crate::processor::ProcessorHandle;
use crate::shared::Core;

/// What timer and event mails do to the task state `S`: the part of the state the services
/// need. Implemented by this crate's task states (they call the chain's `dispatch_timer` /
/// `dispatch_event`) and by the bridge's.
pub trait OperatorMails<E> {
    /// A timer of the operator at `timer.operator` fired.
    ///
    /// # Errors
    ///
    /// An error ends the mailbox loop (the task fails).
    fn on_timer(&mut self, timer: Timer) -> Result<(), E>;

    /// `event` arrived for the operator at index `operator`.
    ///
    /// # Errors
    ///
    /// An error ends the mailbox loop (the task fails).
    fn on_event(&mut self, operator: usize, event: OperatorEvent) -> Result<(), E>;
}

/// What timer mails share with the service.
struct TimerShared {
    quiesced: AtomicBool,
    clock: Clock,
    metrics: Option<std::sync::Arc<TaskMetrics>>,
    tracer: Tracer,
}

enum TimerSlot {
    Idle,
    Running(TimerScheduler),
    Quiesced(Option<TimerScheduler>),
    ShutDown,
}

/// A task's processing-time service: one timer thread, started lazily, whose only job is to
/// enqueue a mail at the timer's operator priority.
///
#[doc = include_str!("services.md")]
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use streamtask_core::operator::OperatorEvent;
/// use streamtask_core::{time::Clock, time::ManualClock, time::Timer, time::TimerService};
/// use streamtask_mailbox::{
///     Immediate, MailboxTimerService, OperatorMails, Priority, ProcessorBuilder, TaskMailbox,
/// };
///
/// #[derive(Default)]
/// struct Fired(Vec<i64>);
/// impl OperatorMails<String> for Fired {
///     fn on_timer(&mut self, timer: Timer) -> Result<(), String> {
///         self.0.push(timer.timestamp);
///         Ok(())
///     }
///     fn on_event(&mut self, _: usize, _: OperatorEvent) -> Result<(), String> { Ok(()) }
/// }
///
/// let clock = ManualClock::new(0);
/// let builder = ProcessorBuilder::<Fired, String>::new(TaskMailbox::new());
/// let timers = MailboxTimerService::new("doc-timers", Clock::Manual(clock.clone()), &builder.handle());
/// let processor = builder.build(Immediate::new(Fired::default()));
///
/// timers.register_timer(Timer { operator: 0, timestamp: 5, tag: 0 }).unwrap();
/// clock.advance(6);
/// // The timer thread enqueued a mail at operator 0's priority; run it on this (the owner) thread.
/// let mut fired = Fired::default();
/// processor.mailbox_executor(Priority::operator(0)).yield_now(&mut fired).unwrap();
/// assert_eq!(fired.0, vec![5]);
/// timers.shutdown();
/// ```
pub struct MailboxTimerService<S, E> {
    thread_name: String,
    core: Arc<Core<S, E>>,
    shared: Arc<TimerShared>,
    slot: Mutex<TimerSlot>,
}

impl<S, E> MailboxTimerService<S, E> {
    /// A service whose (lazily started) timer thread is named `thread_name` and whose mails go
    /// to the processor behind `handle`. No metrics.
    pub fn new(thread_name: &str, clock: Clock, handle: &ProcessorHandle<S, E>) -> Self {
        MailboxTimerService::with_metrics(thread_name, clock, handle, None, Tracer::off())
    }

    /// As [`new`](Self::new), counting fired timers, their lateness (from the due time to the
    /// start of the callback) and the timer thread into `metrics`, and a span per timer.
    pub fn with_metrics(
        thread_name: &str,
        clock: Clock,
        handle: &ProcessorHandle<S, E>,
        metrics: Option<std::sync::Arc<TaskMetrics>>,
        tracer: Tracer,
    ) -> Self {
        MailboxTimerService {
            thread_name: thread_name.to_string(),
            core: Arc::clone(handle.core()),
            shared: Arc::new(TimerShared {
                quiesced: AtomicBool::new(false),
                clock,
                metrics,
                tracer,
            }),
            slot: Mutex::new(TimerSlot::Idle),
        }
    }

    /// Stops firing: registrations get a handle that never fires, due timers are dropped, and
    /// timer mails already queued do nothing when they run. Idempotent.
    pub fn quiesce(&self) {
        // Release pairs with the Acquire loads of the timer thread and of queued timer mails.
        self.shared.quiesced.store(true, Ordering::Release);
        let mut slot = self.slot.lock();
        let next = match std::mem::replace(&mut *slot, TimerSlot::ShutDown) {
            TimerSlot::Idle => TimerSlot::Quiesced(None),
            TimerSlot::Running(scheduler) => {
                scheduler.quiesce();
                TimerSlot::Quiesced(Some(scheduler))
            }
            quiesced @ TimerSlot::Quiesced(_) => quiesced,
            TimerSlot::ShutDown => TimerSlot::ShutDown,
        };
        *slot = next;
    }

    /// Quiesces, then shuts the timer thread down and joins it. Idempotent. Call it from any
    /// thread but the timer thread (whose only code is ours, so that cannot happen by accident).
    pub fn shutdown(&self) {
        self.shared.quiesced.store(true, Ordering::Release);
        let scheduler = match std::mem::replace(&mut *self.slot.lock(), TimerSlot::ShutDown) {
            TimerSlot::Running(scheduler) | TimerSlot::Quiesced(Some(scheduler)) => Some(scheduler),
            TimerSlot::Idle | TimerSlot::Quiesced(None) | TimerSlot::ShutDown => None,
        };
        // Joined outside the slot lock; `fire` never takes it, but registrations may wait on it.
        if let Some(scheduler) = scheduler {
            scheduler.shutdown();
        }
    }

    /// Whether [`quiesce`](Self::quiesce) or [`shutdown`](Self::shutdown) was called.
    pub fn is_quiesced(&self) -> bool {
        self.shared.quiesced.load(Ordering::Acquire)
    }

    /// Number of timers registered and not yet fired (or dropped).
    pub fn pending(&self) -> usize {
        match &*self.slot.lock() {
            TimerSlot::Running(scheduler) | TimerSlot::Quiesced(Some(scheduler)) => {
                scheduler.pending()
            }
            TimerSlot::Idle | TimerSlot::Quiesced(None) | TimerSlot::ShutDown => 0,
        }
    }

    /// Whether the timer thread was started.
    pub fn has_thread(&self) -> bool {
        matches!(
            *self.slot.lock(),
            TimerSlot::Running(_) | TimerSlot::Quiesced(Some(_))
        )
    }
}

impl<S: OperatorMails<E> + 'static, E: Send + 'static> MailboxTimerService<S, E> {
    fn start(&self) -> TimerScheduler {
        let core = Arc::clone(&self.core);
        let shared = Arc::clone(&self.shared);
        if let Some(metrics) = &self.shared.metrics {
            metrics.threads.inc();
        }
        // Deferred: a fixed-delay run completes when its mail ran, not when it was enqueued.
        TimerScheduler::spawn_deferred(
            &self.thread_name,
            self.shared.clock.clone(),
            move |timer: Timer, rearm: Option<Rearm>| -> Result<(), Infallible> {
                if shared.quiesced.load(Ordering::Acquire) {
                    return Ok(());
                }
                let mail = TimerMail {
                    timer,
                    rearm,
                    shared: Arc::clone(&shared),
                };
                // Refused once the mailbox is quiesced or closed: the task is ending and the
                // timer is dropped, as Flink does after FLINK-23558 (a periodic series ends with
                // it: the refused mail drops its `Rearm`).
                let _ = core.enqueue(Priority::operator(timer.operator), "timer", mail);
                Ok(())
            },
            |never: Infallible| match never {},
        )
    }
}

impl<S: OperatorMails<E> + 'static, E: Send + 'static> TimerService for MailboxTimerService<S, E> {
    fn current_processing_time(&self) -> i64 {
        self.shared.clock.now_millis()
    }

    fn register_timer(&self, timer: Timer) -> Result<TimerHandle, TimerError> {
        let mut slot = self.slot.lock();
        if matches!(*slot, TimerSlot::Idle) {
            *slot = TimerSlot::Running(self.start());
        }
        match &*slot {
            TimerSlot::Running(scheduler) => scheduler.register_timer(timer),
            TimerSlot::Quiesced(_) => Ok(TimerHandle::NEVER),
            TimerSlot::ShutDown => Err(TimerError::ShutDown),
            TimerSlot::Idle => unreachable!("an idle slot was started above"),
        }
    }

    fn register_periodic(&self, first: Timer, period: Period) -> Result<TimerHandle, TimerError> {
        let period = period.validate()?;
        let mut slot = self.slot.lock();
        if matches!(*slot, TimerSlot::Idle) {
            *slot = TimerSlot::Running(self.start());
        }
        match &*slot {
            TimerSlot::Running(scheduler) => scheduler.register_periodic(first, period),
            TimerSlot::Quiesced(_) => Ok(TimerHandle::NEVER),
            TimerSlot::ShutDown => Err(TimerError::ShutDown),
            TimerSlot::Idle => unreachable!("an idle slot was started above"),
        }
    }

    fn cancel_timer(&self, handle: TimerHandle) {
        if let TimerSlot::Running(scheduler) = &*self.slot.lock() {
            scheduler.cancel_timer(handle);
        }
    }
}

impl<S, E> fmt::Debug for MailboxTimerService<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailboxTimerService")
            .field("thread", &self.thread_name)
            .field("quiesced", &self.is_quiesced())
            .finish_non_exhaustive()
    }
}

/// A due timer on its way to the mailbox thread; a fixed-delay run carries the [`Rearm`] that
/// schedules its next run once this one ran.
struct TimerMail {
    timer: Timer,
    rearm: Option<Rearm>,
    shared: Arc<TimerShared>,
}

impl<S: OperatorMails<E>, E> MailAction<S, E> for TimerMail {
    fn run(self: Box<Self>, state: &mut S) -> Result<(), E> {
        let TimerMail {
            timer,
            rearm,
            shared,
        } = *self;
        // Queued before the quiesce, run after it: do nothing (Flink 1.11+, FLINK-14231).
        if shared.quiesced.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(metrics) = &shared.metrics {
            metrics.timers_fired.inc();
            metrics
                .timer_lateness
                .record_micros(lateness_micros(&shared.clock, timer.timestamp));
        }
        let _span = shared.tracer.span("timer", || {
            format!("timer {} of operator {}", timer.tag, timer.operator)
        });
        match state.on_timer(timer) {
            Ok(()) => {
                if let Some(rearm) = rearm {
                    rearm.done();
                }
                Ok(())
            }
            Err(e) => {
                // The task fails with this error; no timer runs after it, not even mails already
                // queued (a fixed-rate series keeps enqueuing until the thread is shut down).
                shared.quiesced.store(true, Ordering::Release);
                Err(e)
            }
        }
    }
}

/// Microseconds from a timer's due time (`timestamp + 1` ms) to now: precise on the system
/// clock, in whole milliseconds on a manual one.
fn lateness_micros(clock: &Clock, timestamp: i64) -> u64 {
    let due_micros = i128::from(timestamp.saturating_add(1)) * 1000;
    let now_micros = match clock {
        Clock::System => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i128::try_from(d.as_micros()).unwrap_or(i128::MAX))
            .unwrap_or(0),
        Clock::Manual(manual) => i128::from(manual.now_millis()) * 1000,
    };
    u64::try_from((now_micros - due_micros).max(0)).unwrap_or(u64::MAX)
}

/// A task's [`EventSink`]: each event becomes a mail at the target operator's priority, run by
/// [`OperatorMails::on_event`] on the mailbox thread; see [`MailboxTimerService`] for both
/// services.
pub struct MailboxEvents<S, E> {
    core: Arc<Core<S, E>>,
}

impl<S, E> MailboxEvents<S, E> {
    /// Events into the processor behind `handle`.
    pub fn new(handle: &ProcessorHandle<S, E>) -> Self {
        MailboxEvents {
            core: Arc::clone(handle.core()),
        }
    }
}

impl<S: OperatorMails<E> + 'static, E: Send + 'static> EventSink for MailboxEvents<S, E> {
    fn send_event(&self, operator: usize, event: OperatorEvent) -> Result<(), OperatorEvent> {
        let priority = Priority::operator(operator);
        if priority.operator_index() == Some(operator) {
            // The event's box goes in the letter as it is (an async completion per record
            // made this the task thread's most frequent mail).
            return self
                .core
                .enqueue_event(priority, event, S::on_event)
                .map_err(Rejected::into_inner);
        }
        // An index no priority names exactly: an action boxed around the event carries it.
        self.core
            .enqueue(priority, "operator event", EventMail { operator, event })
            .map_err(|rejected| rejected.into_inner().event)
    }
}

impl<S, E> fmt::Debug for MailboxEvents<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailboxEvents")
            .field("mailbox", &self.core.mailbox)
            .finish()
    }
}

struct EventMail {
    operator: usize,
    event: OperatorEvent,
}

impl<S: OperatorMails<E>, E> MailAction<S, E> for EventMail {
    fn run(self: Box<Self>, state: &mut S) -> Result<(), E> {
        let EventMail { operator, event } = *self;
        state.on_event(operator, event)
    }
}
