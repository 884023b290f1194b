//! The bench's trigger clock: waking a trigger thread at its deadline, precisely, the same way
//! for every runner.
//!
//! A trigger-latency measurement counts from each trigger's *scheduled* time, so the triggering
//! thread's own lateness (waking from `std::thread::sleep`) is in every figure, and on a two-core
//! machine with one core spinning (the hot source) it is most of them: the timer's slack (50 us
//! by default), the wake-up of an idle core, and a wake-up placed on the spinning core that waits
//! for its time slice. That floor is the same for every model, so it made every ratio look closer
//! to 1 than the models are.
//!
//! [`sleep_until`] takes that floor out, alike for every runner (the mailbox and legacy tasks,
//! the bridge, the tokio `select!` peer):
//!
//! 1. [`precise_timers`] sets the calling thread's timer slack to 1 ns (Linux; through
//!    `/proc/thread-self/timerslack_ns`, the per-thread form of `prctl(PR_SET_TIMERSLACK)` that
//!    safe code can reach; elsewhere, or if the file is refused, nothing changes);
//! 2. the thread sleeps until [`SPIN_MARGIN`] before the deadline;
//! 3. then yields (`std::thread::yield_now`) until the deadline: it stays runnable on its core,
//!    so a thread the models wake (a mailbox thread, an async-calls thread) still gets the core
//!    when it needs it, and the trigger leaves within microseconds of its deadline.
//!
//! The cost is the trigger thread's CPU for at most [`SPIN_MARGIN`] per trigger.

use std::time::{Duration, Instant};

/// How long before its deadline a trigger thread stops sleeping and yields instead: about the
/// wake-up lateness of a sleeping thread on this kind of machine (two cores, one spinning).
pub const SPIN_MARGIN: Duration = Duration::from_micros(300);

/// Sets the calling thread's timer slack to 1 ns, so its sleeps end as close to their deadlines
/// as the kernel can manage. Returns whether it did (Linux only; a refused write leaves the
/// default slack and is not an error: the yield phase of [`sleep_until`] still holds).
pub fn precise_timers() -> bool {
    #[cfg(target_os = "linux")]
    {
        std::fs::write("/proc/thread-self/timerslack_ns", b"1").is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Returns at `deadline` (at once if it passed): sleeps until [`SPIN_MARGIN`] before it, then
/// yields until it. Call [`precise_timers`] once on the thread first.
pub fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        let Some(left) = deadline.checked_duration_since(now) else {
            return;
        };
        if left.is_zero() {
            return;
        }
        if left > SPIN_MARGIN {
            std::thread::sleep(left - SPIN_MARGIN);
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_until_never_returns_early() {
        precise_timers();
        let start = Instant::now();
        for k in 1..=5u32 {
            let deadline = start + Duration::from_micros(400) * k;
            sleep_until(deadline);
            assert!(Instant::now() >= deadline);
        }
        // A deadline in the past returns at once.
        sleep_until(start);
    }
}
