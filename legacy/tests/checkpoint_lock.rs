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
