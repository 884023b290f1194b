//! Where processing time comes from: the [`Clock`], system or manual.

use std::fmt;
use std::task::Waker;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use crate::sync::{Arc, Mutex};

/// Where processing time comes from.
///
/// A closed set, so an enum: the system clock for real runs, a [`ManualClock`] for deterministic
/// tests.
///
/// # Examples
///
/// ```
/// use streamtask_core::{time::Clock, time::ManualClock};
///
/// let manual = ManualClock::new(1_000);
/// let clock = Clock::Manual(manual.clone());
/// assert_eq!(clock.now_millis(), 1_000);
/// manual.advance(5);
/// assert_eq!(clock.now_millis(), 1_005);
/// assert!(Clock::System.now_millis() > 1_600_000_000_000);
/// ```
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// Wall-clock time in milliseconds since the Unix epoch.
    #[default]
    System,
    /// A clock that moves only when told to.
    Manual(ManualClock),
}

impl Clock {
    /// The current processing time in milliseconds.
    #[inline]
    pub fn now_millis(&self) -> i64 {
        match self {
            Clock::System => system_millis(),
            Clock::Manual(manual) => manual.now_millis(),
        }
    }

    /// Asks to be woken whenever a manual clock moves; the system clock never calls.
    ///
    /// Timer threads use this to re-check their deadlines when a test advances time. The
    /// subscription ends when the returned value is dropped.
    pub fn subscribe(&self, waker: Waker) -> ClockSubscription {
        match self {
            Clock::System => ClockSubscription { inner: None },
            Clock::Manual(manual) => manual.subscribe(waker),
        }
    }

    /// Whether this is a manual clock.
    pub fn is_manual(&self) -> bool {
        matches!(self, Clock::Manual(_))
    }
}

fn system_millis() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// A clock for tests: starts where it is told and moves only by [`advance`](Self::advance) or
/// [`set`](Self::set). Clones share the same time.
#[derive(Clone)]
pub struct ManualClock {
    shared: Arc<ManualShared>,
}

struct ManualShared {
    now: AtomicI64,
    next_subscriber: AtomicU64,
    subscribers: Mutex<Vec<(u64, Waker)>>,
}

impl ManualClock {
    /// A manual clock reading `start` milliseconds.
    pub fn new(start: i64) -> Self {
        ManualClock {
            shared: Arc::new(ManualShared {
                now: AtomicI64::new(start),
                next_subscriber: AtomicU64::new(0),
                subscribers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The current time in milliseconds.
    #[inline]
    pub fn now_millis(&self) -> i64 {
        // Acquire pairs with the Release in `set`: whoever sees the new time also sees what the
        // advancing thread did before moving it.
        self.shared.now.load(Ordering::Acquire)
    }

    /// Moves the clock forward by `millis` and wakes every subscriber.
    pub fn advance(&self, millis: i64) {
        let now = self.shared.now.fetch_add(millis, Ordering::AcqRel) + millis;
        self.wake_subscribers(now);
    }

    /// Sets the clock to `millis` and wakes every subscriber.
    ///
    /// # Panics
    ///
    /// Panics if `millis` is earlier than the current time: processing time never goes back.
    pub fn set(&self, millis: i64) {
        let before = self.shared.now.swap(millis, Ordering::AcqRel);
        assert!(
            millis >= before,
            "a manual clock cannot go back in time (from {before} to {millis})"
        );
        self.wake_subscribers(millis);
    }

    fn wake_subscribers(&self, _now: i64) {
        let wakers: Vec<Waker> = self
            .shared
            .subscribers
            .lock()
            .iter()
            .map(|(_, w)| w.clone())
            .collect();
        for waker in wakers {
            waker.wake();
        }
    }

    fn subscribe(&self, waker: Waker) -> ClockSubscription {
        let id = self.shared.next_subscriber.fetch_add(1, Ordering::Relaxed);
        self.shared.subscribers.lock().push((id, waker));
        ClockSubscription {
            inner: Some((Arc::clone(&self.shared), id)),
        }
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now_millis())
            .finish()
    }
}

/// Keeps a [`Clock::subscribe`] registration alive; dropping it unsubscribes.
pub struct ClockSubscription {
    inner: Option<(Arc<ManualShared>, u64)>,
}

impl Drop for ClockSubscription {
    fn drop(&mut self) {
        if let Some((shared, id)) = self.inner.take() {
            shared.subscribers.lock().retain(|(i, _)| *i != id);
        }
    }
}

impl fmt::Debug for ClockSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClockSubscription")
            .field("manual", &self.inner.is_some())
            .finish()
    }
}
