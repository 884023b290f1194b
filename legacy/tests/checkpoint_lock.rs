//! The checkpoint lock: exclusive access under every fairness, the condition that releases the
//! lock while waiting, and lock-wait metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use streamtask_core::metrics::TaskMetrics;
use streamtask_legacy::{CheckpointLock, Fairness};

const ALL: [Fairness; 3] = [Fairness::Unfair, Fairness::Eventual, Fairness::Fair];

#[test]
fn smoke() {
    for fairness in ALL {
        let lock = CheckpointLock::new(1u32, fairness);
        *lock.lock() += 1;
        assert_eq!(*lock.lock(), 2);
        assert_eq!(lock.fairness(), fairness);
        assert_eq!(lock.into_inner(), 2);
    }
}

#[test]
fn every_fairness_gives_exclusive_access() {
    for fairness in ALL {
        let lock = Arc::new(CheckpointLock::new((0u64, 0u64), fairness));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = Arc::clone(&lock);
                thread::spawn(move || {
                    for _ in 0..2_000 {
                        let mut pair = lock.lock();
                        // Two writes that a concurrent holder would tear apart.
                        pair.0 += 1;
                        pair.1 = pair.0;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), (8_000, 8_000), "{fairness:?}");
    }
}

#[test]
fn try_lock_fails_while_held_and_succeeds_after() {
    for fairness in ALL {
        let lock = CheckpointLock::new((), fairness);
        let held = lock.lock();
        assert!(lock.try_lock().is_none());
        drop(held);
        assert!(lock.try_lock().is_some());
    }
}

#[test]
fn wait_until_releases_the_lock_and_wakes_on_notify() {
    for fairness in ALL {
        let lock = Arc::new(CheckpointLock::new(Vec::<u32>::new(), fairness));
        let producer = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                for n in 0..3 {
                    // Can only take the lock because the waiter released it.
                    lock.lock().push(n);
                    lock.notify_all();
                }
            })
        };
        let mut items = lock.lock();
        items.wait_until(|items| items.len() == 3);
        assert_eq!(*items, vec![0, 1, 2], "{fairness:?}");
        drop(items);
        producer.join().unwrap();
    }
}

#[test]
fn wait_until_returns_at_once_when_the_condition_holds() {
    let lock = CheckpointLock::new(5, Fairness::Eventual);
    let mut guard = lock.lock();
    guard.wait_until(|n| *n == 5);
    assert_eq!(*guard, 5);
}

#[test]
fn a_bounded_wait_gives_up_and_keeps_the_lock() {
    for fairness in ALL {
        let lock = CheckpointLock::new(0, fairness);
        let mut guard = lock.lock();
        assert!(!guard.wait_until_for(Duration::from_millis(5), |n| *n == 1));
        *guard = 1; // still held
        assert!(guard.wait_until_for(Duration::from_millis(5), |n| *n == 1));
    }
}

/// A bounded wait that is notified before its deadline returns `true` (also with a timeout so
/// long that the deadline saturates). The notifier changes the value only once the waiter is
/// asleep in the wait (the kernel says so), so the wait is really woken, not skipped.
#[test]
fn a_bounded_wait_woken_before_its_deadline_returns_true() {
    for timeout in [Duration::from_secs(30), Duration::MAX] {
        let lock = Arc::new(CheckpointLock::new(false, Fairness::Eventual));
        let returned = Arc::new(AtomicBool::new(false));
        let waiter_tid = own_tid();
        let notifier = {
            let (lock, returned) = (Arc::clone(&lock), Arc::clone(&returned));
            thread::spawn(move || {
                // Stop looking if the wait returned without sleeping (the bug this catches).
                while !is_sleeping(&waiter_tid) && !returned.load(Ordering::SeqCst) {
                    thread::yield_now();
                }
                *lock.lock() = true;
                lock.notify_all();
            })
        };
        let mut guard = lock.lock();
        let woken = guard.wait_until_for(timeout, |ready| *ready);
        returned.store(true, Ordering::SeqCst);
        drop(guard);
        notifier.join().unwrap();
        assert!(woken, "a wait of {timeout:?} gave up before its deadline");
    }
}

#[test]
fn guards_report_the_fairness_and_debug_names_it() {
    for fairness in ALL {
        let lock = CheckpointLock::new((), fairness);
        let guard = lock.lock();
        assert_eq!(guard.fairness(), fairness);
        let expected = format!("fairness: {fairness:?}");
        let (of_guard, of_lock) = (format!("{guard:?}"), format!("{lock:?}"));
        assert!(
            of_guard.contains("CheckpointGuard") && of_guard.contains(&expected),
            "{of_guard}"
        );
        assert!(
            of_lock.contains("CheckpointLock") && of_lock.contains(&expected),
            "{of_lock}"
        );
    }
}

#[test]
fn a_flag_changed_outside_the_lock_wakes_a_waiter_that_notifies_after_it() {
    let lock = Arc::new(CheckpointLock::new((), Fairness::Eventual));
    let flag = Arc::new(AtomicBool::new(false));
    let setter = {
        let (lock, flag) = (Arc::clone(&lock), Arc::clone(&flag));
        thread::spawn(move || {
            flag.store(true, Ordering::SeqCst);
            lock.wake_all();
        })
    };
    let mut guard = lock.lock();
    guard.wait_until(|_| flag.load(Ordering::SeqCst));
    drop(guard);
    setter.join().unwrap();
}

#[test]
fn unlocked_lets_others_in_and_retakes_the_lock() {
    for fairness in ALL {
        let lock = Arc::new(CheckpointLock::new(0, fairness));
        let mut guard = lock.lock();
        let other = Arc::clone(&lock);
        guard.unlocked(|| thread::spawn(move || *other.lock() += 1).join().unwrap());
        assert_eq!(*guard, 1);
    }
}

#[test]
fn uncontended_acquisitions_record_no_wait() {
    let metrics = Arc::new(TaskMetrics::new("t"));
    let lock = CheckpointLock::new((), Fairness::Eventual).with_metrics(Arc::clone(&metrics));
    for _ in 0..100 {
        drop(lock.lock());
    }
    assert_eq!(metrics.lock_wait.count(), 0);
}

#[test]
fn an_acquirer_that_had_to_wait_is_recorded() {
    for fairness in ALL {
        let metrics = Arc::new(TaskMetrics::new("t"));
        let lock = Arc::new(CheckpointLock::new((), fairness).with_metrics(Arc::clone(&metrics)));
        // Retry until the other thread really blocked on the lock (a scheduling matter, not a
        // timing assertion); nearly always the first round.
        for _ in 0..1_000 {
            let held = lock.lock();
            let other = Arc::clone(&lock);
            let waiter = thread::spawn(move || drop(other.lock()));
            thread::sleep(Duration::from_millis(2));
            drop(held);
            waiter.join().unwrap();
            if metrics.lock_wait.count() > 0 {
                break;
            }
        }
        assert!(metrics.lock_wait.count() >= 1, "{fairness:?}");
    }
}

#[test]
fn the_lock_and_its_guards_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<CheckpointLock<Vec<u8>>>();
    send_sync::<streamtask_legacy::CancellationToken>();
}

/// Whether the kernel reports thread `tid` of this process asleep (state `S`: blocked).
fn is_sleeping(tid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return false;
    };
    let after_comm = &stat[stat.rfind(')').expect("stat has a comm") + 1..];
    after_comm.split_whitespace().next() == Some("S")
}

/// This thread's kernel id (Linux), from `/proc/thread-self`.
fn own_tid() -> String {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self is readable");
    link.file_name()
        .expect("/proc/thread-self ends in the tid")
        .to_string_lossy()
        .into_owned()
}

/// `Fair` hands the lock to the thread waiting for it on every release: in a fixed schedule
/// (a waiter blocked on the lock, then the holder releases and at once tries to take it back)
/// the holder never gets it back first, round after round. With `Eventual` the release leaves
/// the lock free and the holder's immediate `try_lock` barges in ahead of the waiter (which
/// still has to wake up), so a `Fair` that behaved like `Eventual` would count fewer hand-offs.
/// Nothing here is timed: the waiter is known to be blocked because the kernel says it sleeps.
#[test]
fn fair_hands_the_lock_to_the_waiter_on_every_release() {
    const ROUNDS: u32 = 200;
    let lock = Arc::new(CheckpointLock::new(0u32, Fairness::Fair));
    let mut handoffs = 0;
    for _ in 0..ROUNDS {
        let held = lock.lock();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let waiter = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                tid_tx.send(own_tid()).unwrap();
                let mut got = lock.lock(); // blocks: the holder has it
                *got += 1;
                // Keep it until the holder has tried to take it back, so the outcome of that
                // try depends only on who the release gave the lock to.
                release_rx.recv().unwrap();
            })
        };
        let tid = tid_rx.recv().unwrap();
        // The waiter's only blocking step after sending is taking the lock.
        while !is_sleeping(&tid) {
            thread::yield_now();
        }
        drop(held);
        match lock.try_lock() {
            None => handoffs += 1, // handed over: the waiter owns it
            Some(barged) => drop(barged),
        }
        release_tx.send(()).unwrap();
        waiter.join().unwrap();
    }
    assert_eq!(
        handoffs, ROUNDS,
        "every release handed the lock to the waiter"
    );
    assert_eq!(*lock.lock(), ROUNDS);
}
