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

/// The async emitter thread's protocol (`task/async_wait/emitter.rs`), step for step, on the
/// real checkpoint lock and its condition: completions arrive on an unbounded FIFO inbox from
/// any thread; the emitter takes one, drains the rest up to a stop message, applies the batch
/// under the lock only while the chain is open, notifies the lock's waiters, and unlocks; the
/// task thread waits for a free queue slot on the lock's condition; teardown closes the chain
/// under the lock, then the emitter guard sends stop and joins.
///
/// The emitter's loop is bound to the task runtime (being rewritten into the kit), so this is a
/// replica of its steps rather than a call into it; the inbox stands in for crossbeam's
/// unbounded channel (not loom-visible) with the same FIFO semantics.
mod async_emitter {
    use std::collections::VecDeque;

    use streamtask_core::sync::{Arc, Condvar, Mutex, thread};
    use streamtask_legacy::{CheckpointLock, Fairness};

    enum Msg {
        Completion(u32),
        Stop,
    }

    /// The inbox: FIFO, unbounded, blocking `recv`, non-blocking `try_recv`.
    #[derive(Default)]
    struct Inbox {
        queue: Mutex<VecDeque<Msg>>,
        ready: Condvar,
    }

    impl Inbox {
        fn send(&self, msg: Msg) {
            self.queue.lock().push_back(msg);
            self.ready.notify_one();
        }
        fn recv(&self) -> Msg {
            let mut queue = self.queue.lock();
            loop {
                if let Some(msg) = queue.pop_front() {
                    return msg;
                }
                self.ready.wait(&mut queue);
            }
        }
        fn try_recv(&self) -> Option<Msg> {
            self.queue.lock().pop_front()
        }
    }

    /// What the checkpoint lock guards: the async head's queue and the chain's output.
    #[derive(Default)]
    struct Head {
        in_flight: usize,
        emitted: Vec<u32>,
        chain_closed: bool,
    }

    const CAPACITY: usize = 1;

    /// The emitter thread's loop, as in `Emitter::start`.
    fn emitter(inbox: &Inbox, lock: &CheckpointLock<Head>) {
        loop {
            let mut batch = match inbox.recv() {
                Msg::Completion(c) => vec![c],
                Msg::Stop => return,
            };
            let mut stopping = false;
            while let Some(msg) = inbox.try_recv() {
                match msg {
                    Msg::Completion(c) => batch.push(c),
                    Msg::Stop => {
                        stopping = true;
                        break;
                    }
                }
            }
            // `run_locked`: apply only while the chain is open, then notify the waiters.
            let mut head = lock.lock();
            if !head.chain_closed {
                for c in batch {
                    head.in_flight -= 1;
                    head.emitted.push(c);
                }
                head.notify_all();
            }
            drop(head);
            if stopping {
                return;
            }
        }
    }

    /// The task thread waits for a slot the emitter frees (no lost wakeup: loom reports a
    /// deadlock otherwise), and a completion racing the teardown is either emitted before the
    /// chain closed or dropped; the emitter is always joined.
    #[test]
    fn a_freed_slot_wakes_the_task_and_a_completion_racing_teardown_is_emitted_or_dropped() {
        loom::model(|| {
            let lock = Arc::new(CheckpointLock::new(Head::default(), Fairness::Eventual));
            let inbox = Arc::new(Inbox::default());
            let emitter_thread = {
                let (inbox, lock) = (Arc::clone(&inbox), Arc::clone(&lock));
                thread::spawn(move || emitter(&inbox, &lock))
            };
            // The async client completes each element from its own thread.
            let to_client = Arc::new(Inbox::default());
            let client = {
                let (requests, inbox) = (Arc::clone(&to_client), Arc::clone(&inbox));
                thread::spawn(move || {
                    for _ in 0..2 {
                        let Msg::Completion(element) = requests.recv() else {
                            return;
                        };
                        inbox.send(Msg::Completion(element));
                    }
                })
            };
            // The task thread admits two elements into a queue of capacity 1.
            for element in 1..=2 {
                let mut head = lock.lock();
                head.wait_until(|h| h.in_flight < CAPACITY);
                head.in_flight += 1;
                drop(head);
                to_client.send(Msg::Completion(element));
            }
            // Teardown (cancelled before element 2 completed, perhaps): close the chain under
            // the lock, then stop and join the emitter, as the `Emitter` guard's drop does.
            let emitted_before_close = {
                let mut head = lock.lock();
                head.chain_closed = true;
                head.emitted.clone()
            };
            inbox.send(Msg::Stop);
            emitter_thread.join().unwrap();
            client.join().unwrap();

            let head = lock.lock();
            assert!(
                head.emitted == [1] || head.emitted == [1, 2],
                "element 1 was emitted before 2 was admitted: {:?}",
                head.emitted
            );
            assert_eq!(
                head.emitted, emitted_before_close,
                "emitted after the chain closed"
            );
            assert_eq!(head.in_flight, 2 - head.emitted.len());
        });
    }
}
