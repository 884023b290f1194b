//! Loom models of the checkpoint lock's condition protocol and of cancellation. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p streamtask-legacy --test loom`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;

use streamtask_legacy::{CancellationToken, CheckpointLock, Fairness};

#[test]
fn smoke() {
    loom::model(|| {
        let lock = Arc::new(CheckpointLock::new(0u32, Fairness::Eventual));
        let other = Arc::clone(&lock);
        let t = thread::spawn(move || *other.lock() += 1);
        *lock.lock() += 1;
        t.join().unwrap();
        assert_eq!(*lock.lock(), 2);
    });
}

/// A change made under the lock, then notified, always wakes the waiter (both mutex flavours).
#[test]
fn a_change_under_the_lock_wakes_the_waiter() {
    for fairness in [Fairness::Unfair, Fairness::Eventual] {
        loom::model(move || {
            let lock = Arc::new(CheckpointLock::new(false, fairness));
            let other = Arc::clone(&lock);
            let setter = thread::spawn(move || {
                *other.lock() = true;
                other.notify_all();
            });
            let mut ready = lock.lock();
            ready.wait_until(|ready| *ready);
            drop(ready);
            setter.join().unwrap();
        });
    }
}

/// A SeqCst flag changed outside the lock, then notified, wakes the waiter (the cancellation
/// path: no lock on the notifier's side, so it wakes unconditionally).
#[test]
fn a_flag_changed_outside_the_lock_wakes_the_waiter() {
    loom::model(|| {
        let lock = Arc::new(CheckpointLock::new((), Fairness::Eventual));
        let flag = Arc::new(AtomicBool::new(false));
        let (l, f) = (Arc::clone(&lock), Arc::clone(&flag));
        let setter = thread::spawn(move || {
            f.store(true, Ordering::SeqCst);
            l.wake_all();
        });
        let mut guard = lock.lock();
        guard.wait_until(|_| flag.load(Ordering::SeqCst));
        drop(guard);
        setter.join().unwrap();
    });
}

/// Cancelling wakes a thread waiting for cancellation, whatever the interleaving.
#[test]
fn cancel_wakes_a_waiter() {
    loom::model(|| {
        let token = CancellationToken::new();
        let waiter = {
            let token = token.clone();
            thread::spawn(move || token.wait())
        };
        token.cancel();
        waiter.join().unwrap();
        assert!(token.is_cancelled());
    });
}

/// `SystemProcessingTimeService`: quiesce (holding the checkpoint lock) racing a due timer on
/// its way to the lock. Whatever the interleaving, nothing fires after `quiesce` returns: a
/// timer that was already waiting for the lock sees the new status inside it.
#[test]
fn quiesce_racing_a_timer_waiting_for_the_lock_fires_nothing_after_it() {
    use streamtask_core::task::TaskConfig;
    use streamtask_core::{Clock, ManualClock, Timer, TimerService};
    use streamtask_legacy::{SystemProcessingTimeService, TimerStatus};

    loom::model(|| {
        let clock = ManualClock::new(10);
        let config = TaskConfig::new("loom").with_clock(Clock::Manual(clock.clone()));
        let timers = SystemProcessingTimeService::spawn(&config, |_error| {});
        let lock = Arc::new(CheckpointLock::new(0u32, Fairness::Eventual));
        timers.bind(Arc::clone(&lock), |fired: &mut u32, _t: Timer| {
            *fired += 1;
            Ok(())
        });
        // In the past: due at once, so the timer thread races the quiesce below.
        timers
            .register_timer(Timer {
                operator: 0,
                timestamp: 0,
                tag: 1,
            })
            .unwrap();
        let at_quiesce = {
            let held = lock.lock();
            timers.quiesce(&held);
            *held
        };
        assert_eq!(timers.status(), TimerStatus::Quiesced);
        timers.shutdown(); // joins the timer thread
        assert!(at_quiesce <= 1);
        assert_eq!(*lock.lock(), at_quiesce, "a timer fired after quiesce");
    });
}
