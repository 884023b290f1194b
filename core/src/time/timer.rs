//! Timers as an operator sees them: the [`Timer`], its [`TimerHandle`], the [`Period`] of a
//! periodic one, and the [`TimerService`] every model implements.

/// A processing-time timer: which operator of the chain it is for, when, and a tag the operator
/// chose to tell its timers apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timer {
    /// Index of the operator in its chain (0 = head).
    pub operator: usize,
    /// Processing time in milliseconds at which it fires (once the clock passed it).
    pub timestamp: i64,
    /// The operator's own tag.
    pub tag: u64,
}

/// Identifies a registered timer, to cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    deadline: i64,
    seq: u64,
}

impl TimerHandle {
    /// A handle that refers to no timer (what registering on a quiesced service gives).
    pub const NEVER: TimerHandle = TimerHandle {
        deadline: i64::MIN,
        seq: u64::MAX,
    };

    /// A handle for a service's own bookkeeping: `deadline` and a per-service unique `seq`.
    pub fn new(deadline: i64, seq: u64) -> Self {
        TimerHandle { deadline, seq }
    }

    /// The deadline the handle was registered with.
    pub fn deadline(self) -> i64 {
        self.deadline
    }

    /// The service's sequence number for the timer.
    pub fn seq(self) -> u64 {
        self.seq
    }
}

/// Registering a timer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    /// The timer service is shut down (the task is over).
    #[error("the timer service is shut down; register timers only while the task is running")]
    ShutDown,
    /// A periodic timer was given a period of zero or less.
    #[error("a periodic timer needs a period of at least 1 ms, got {0}; pass a positive period")]
    NonPositivePeriod(i64),
}

/// How a periodic timer repeats (see the [module doc](super#periodic-timers)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Period {
    /// The next run is due this many milliseconds after the previous one was due (Flink's
    /// `scheduleAtFixedRate`); late runs catch up.
    FixedRate(i64),
    /// The next run is due this many milliseconds after the previous one completed (Flink's
    /// `scheduleWithFixedDelay`).
    FixedDelay(i64),
}

impl Period {
    /// The period or delay in milliseconds.
    pub fn millis(self) -> i64 {
        match self {
            Period::FixedRate(p) | Period::FixedDelay(p) => p,
        }
    }

    /// Checks that the period is positive.
    ///
    /// # Errors
    ///
    /// [`TimerError::NonPositivePeriod`] for a period of zero or less (it would fire without end
    /// at one instant).
    pub fn validate(self) -> Result<Self, TimerError> {
        if self.millis() > 0 {
            Ok(self)
        } else {
            Err(TimerError::NonPositivePeriod(self.millis()))
        }
    }

    /// The timestamp of the run after one scheduled for `previous` that completed at
    /// `completed` (it fires once processing time passed it, as any timer). The one rule both
    /// models follow.
    pub fn next_timestamp(self, previous: i64, completed: i64) -> i64 {
        match self {
            Period::FixedRate(p) => previous.saturating_add(p),
            Period::FixedDelay(d) => completed.saturating_add(d),
        }
    }
}

/// What an operator uses to read processing time and register timers.
///
/// Each model implements it: the legacy model fires timers on its timer thread under the
/// checkpoint lock, the mailbox model turns each due timer into a mail at the operator's
/// priority, and test harnesses fire them by hand.
pub trait TimerService: Send + Sync {
    /// The current processing time in milliseconds.
    fn current_processing_time(&self) -> i64;

    /// Registers `timer`; it fires once processing time has passed `timer.timestamp`.
    ///
    /// # Errors
    ///
    /// [`TimerError::ShutDown`] once the service is shut down. A quiesced service accepts the
    /// registration and returns a handle that never fires.
    fn register_timer(&self, timer: Timer) -> Result<TimerHandle, TimerError>;

    /// Registers a periodic timer: the first run fires once processing time has passed
    /// `first.timestamp`, later ones as `period` says (see the [module doc](super#periodic-timers)).
    /// Each run is a `Timer` like `first` with the run's scheduled timestamp. The handle cancels
    /// the whole series.
    ///
    /// # Errors
    ///
    /// [`TimerError::NonPositivePeriod`] for a period below 1 ms; [`TimerError::ShutDown`] once
    /// the service is shut down (a quiesced one returns a handle that never fires).
    fn register_periodic(&self, first: Timer, period: Period) -> Result<TimerHandle, TimerError>;

    /// Cancels a timer, or every later run of a periodic one; cancelling one that fired or never
    /// existed does nothing.
    fn cancel_timer(&self, handle: TimerHandle);
}
