//! Loom models of the runtime's concurrency protocols, one `mod` per concept. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p streamtask-runtime --test loom`.
//!
//! Keep every model small (two or three threads, a handful of operations) so the bounded
//! exploration finishes in seconds.
#![cfg(loom)]

/// Wakers that record a notice in loom-visible state.
mod support {
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use streamtask_core::sync::{Condvar, Mutex};

    /// A resume notice as the mailbox model delivers it: the wake enqueues under a lock and
    /// signals a condition variable; the suspended task waits on it.
    ///
    /// Deliberately not `thread::park`/`unpark`: in loom 0.7 an unpark that reaches a thread
    /// blocked in `join` or on a mutex (harmless with std) breaks loom's own bookkeeping, and a
    /// `swap` on a flag can read a stale value (tokio-rs/loom#254, #389).
    pub(crate) struct Notice {
        woken: Mutex<bool>,
        signal: Condvar,
    }

    impl Notice {
        pub(crate) fn new() -> (Arc<Notice>, Waker) {
            let notice = Arc::new(Notice {
                woken: Mutex::new(false),
                signal: Condvar::new(),
            });
            let waker = Waker::from(Arc::clone(&notice));
            (notice, waker)
        }

        pub(crate) fn was_woken(&self) -> bool {
            *self.woken.lock()
        }

        /// Waits until woken and consumes the notice; a lost notice leaves every thread
        /// blocked, which loom reports as a deadlock.
        pub(crate) fn suspend(&self) {
            let mut woken = self.woken.lock();
            while !*woken {
                self.signal.wait(&mut woken);
            }
            *woken = false;
        }
    }

    impl Wake for Notice {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            *self.woken.lock() = true;
            self.signal.notify_one();
        }
    }

    /// Delivers every event the operator's completions sent (what the task's mails would),
    /// in the order they were sent.
    pub(crate) fn deliver_events<F>(
        op: &mut streamtask_runtime::AsyncWaitOperator<F>,
        services: &streamtask_core::testing::HarnessServices,
        ctx: &mut streamtask_core::operator::Context<'_, u32>,
    ) where
        F: streamtask_core::function::AsyncFunction<In = u32, Out = u32>,
    {
        use streamtask_core::operator::Operator;
        while let Some((_, event)) = services.events.pop() {
            op.on_event(event, ctx).unwrap();
        }
    }

    /// The values of the records in `out`, sorted.
    pub(crate) fn sorted_record_values(
        out: &[streamtask_core::operator::Emitted<u32>],
    ) -> Vec<u32> {
        let mut values: Vec<u32> = out
            .iter()
            .filter_map(|e| match e {
                streamtask_core::operator::Emitted::Record(r) => Some(r.value),
                _ => None,
            })
            .collect();
        values.sort_unstable();
        values
    }
}

/// The bounded channel's availability notices and blocking calls (`channel::bounded`).
mod channel_notices {
    use streamtask_core::sync::thread;
    use streamtask_runtime::channel::{RecvError, TryRecvError, TrySendError, bounded};

    use super::support::Notice;

    /// A consumer that found nothing registers its waker and checks again; a concurrent send
    /// either is seen by the second check or wakes the waker.
    #[test]
    fn consumer_register_then_recheck_vs_send() {
        loom::model(|| {
            let (tx, rx) = bounded::<u8>(1).unwrap();
            let (notice, waker) = Notice::new();
            let producer = {
                let tx = tx.clone();
                thread::spawn(move || tx.try_send(1).unwrap())
            };
            let got = match rx.try_recv() {
                Ok(v) => Some(v),
                Err(TryRecvError::Empty) => {
                    rx.register_data_waker(&waker);
                    rx.try_recv().ok()
                }
                Err(TryRecvError::Disconnected) => unreachable!("a sender is alive"),
            };
            producer.join().unwrap();
            if got.is_none() {
                // The consumer would suspend here: the send must have told it.
                assert!(notice.was_woken(), "lost wakeup: data arrived, no notice");
                assert_eq!(rx.try_recv(), Ok(1));
            }
            drop(tx);
        });
    }

    /// A producer that found the channel full registers and checks again; a concurrent receive
    /// either frees space for the second try or wakes the waker.
    #[test]
    fn producer_register_then_recheck_vs_recv() {
        loom::model(|| {
            let (tx, rx) = bounded::<u8>(1).unwrap();
            tx.try_send(0).unwrap();
            let (notice, waker) = Notice::new();
            // The consumer hands the receiver back so its drop is not what wakes the producer.
            let consumer = thread::spawn(move || {
                assert_eq!(rx.try_recv(), Ok(0));
                rx
            });
            let sent = match tx.try_send(1) {
                Ok(()) => true,
                Err(TrySendError::Full(v)) => {
                    tx.register_space_waker(&waker);
                    tx.try_send(v).is_ok()
                }
                Err(TrySendError::Disconnected(_)) => unreachable!("the receiver is alive"),
            };
            let rx = consumer.join().unwrap();
            if !sent {
                assert!(notice.was_woken(), "lost wakeup: space freed, no notice");
                tx.try_send(1).unwrap();
            }
            assert_eq!(rx.try_recv(), Ok(1));
        });
    }

    /// Two producers and a consumer that suspends (parks) whenever it finds nothing after
    /// registering: every element arrives and the consumer never sleeps through one.
    #[test]
    fn polling_consumer_vs_two_producers() {
        loom::model(|| {
            let (tx, rx) = bounded::<u8>(1).unwrap();
            let producers: Vec<_> = (1..=2u8)
                .map(|v| {
                    let tx = tx.clone();
                    thread::spawn(move || tx.send(v).unwrap())
                })
                .collect();
            drop(tx);
            let (notice, waker) = Notice::new();
            let mut sum = 0;
            loop {
                match rx.try_recv() {
                    Ok(v) => sum += v,
                    Err(TryRecvError::Disconnected) => break,
                    Err(TryRecvError::Empty) => {
                        rx.register_data_waker(&waker);
                        match rx.try_recv() {
                            Ok(v) => sum += v,
                            Err(TryRecvError::Disconnected) => break,
                            Err(TryRecvError::Empty) => notice.suspend(),
                        }
                    }
                }
            }
            for producer in producers {
                producer.join().unwrap();
            }
            assert_eq!(sum, 3);
        });
    }

    /// The last sender's drop wakes a receiver blocked in `recv`.
    #[test]
    fn disconnect_vs_blocked_recv() {
        loom::model(|| {
            let (tx, rx) = bounded::<u8>(1).unwrap();
            let consumer = thread::spawn(move || rx.recv());
            drop(tx);
            assert_eq!(consumer.join().unwrap(), Err(RecvError));
        });
    }

    /// The last sender's drop wakes a consumer that registered and found nothing.
    #[test]
    fn disconnect_vs_registered_consumer() {
        loom::model(|| {
            let (tx, rx) = bounded::<u8>(1).unwrap();
            let (notice, waker) = Notice::new();
            let dropper = thread::spawn(move || drop(tx));
            let disconnected = match rx.try_recv() {
                Err(TryRecvError::Empty) => {
                    rx.register_data_waker(&waker);
                    rx.try_recv() == Err(TryRecvError::Disconnected)
                }
                other => other == Err(TryRecvError::Disconnected),
            };
            dropper.join().unwrap();
            if !disconnected {
                assert!(notice.was_woken(), "lost wakeup: senders gone, no notice");
            }
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        });
    }

    /// A sender blocked on a full channel gets the slot a receive frees, in order.
    #[test]
    fn blocked_send_vs_recv() {
        loom::model(|| {
            let (tx, rx) = bounded::<u8>(1).unwrap();
            tx.send(1).unwrap();
            let producer = thread::spawn(move || tx.send(2).unwrap());
            assert_eq!(rx.recv(), Ok(1));
            assert_eq!(rx.recv(), Ok(2));
            producer.join().unwrap();
        });
    }

    /// Two senders blocked on a full channel: each receive frees one slot and tells one of
    /// them, and the second is still told after the first took its slot (a take keeps telling
    /// while a sender waits; the receiver takes without the senders' lock otherwise).
    #[test]
    fn two_blocked_senders_vs_recvs() {
        loom::model(|| {
            let (tx, rx) = bounded::<u8>(1).unwrap();
            tx.send(0).unwrap();
            let tx2 = tx.clone();
            let first = thread::spawn(move || tx.send(1).unwrap());
            let second = thread::spawn(move || tx2.send(2).unwrap());
            let mut got = vec![rx.recv().unwrap(), rx.recv().unwrap(), rx.recv().unwrap()];
            first.join().unwrap();
            second.join().unwrap();
            got.sort_unstable();
            assert_eq!(got, vec![0, 1, 2]);
        });
    }

    /// The receiver's drop wakes a sender blocked on a full channel and hands its value back.
    #[test]
    fn receiver_drop_vs_blocked_send() {
        loom::model(|| {
            let (tx, rx) = bounded::<u8>(1).unwrap();
            tx.send(1).unwrap();
            let producer = thread::spawn(move || tx.send(2));
            drop(rx);
            assert_eq!(producer.join().unwrap().unwrap_err().into_inner(), 2);
        });
    }
}

/// The input gate's blocking read: the thread-unpark waker and park (`channel::InputGate`).
mod input_gate {
    use streamtask_core::sync::thread;
    use streamtask_core::{StreamElement, StreamRecord};
    use streamtask_runtime::channel::{InputEvent, InputGate, bounded};

    /// `next_blocking` parks until a producer on either channel sends; the send's notice
    /// unparks it. (The parking reader runs on a spawned thread that joins nothing: a late
    /// unpark is harmless with std but trips loom when it hits a thread blocked in `join`.)
    #[test]
    fn next_blocking_vs_send() {
        loom::model(|| {
            let (tx0, rx0) = bounded::<StreamElement<u8>>(1).unwrap();
            let (tx1, rx1) = bounded::<StreamElement<u8>>(1).unwrap();
            let reader = thread::spawn(move || {
                let mut gate = InputGate::new(vec![rx0, rx1]).unwrap();
                let event = gate.next_blocking().unwrap();
                (event, gate)
            });
            tx1.send(StreamElement::Record(StreamRecord::new(7)))
                .unwrap();
            let (event, gate) = reader.join().unwrap();
            assert_eq!(event, InputEvent::Record(StreamRecord::new(7)));
            drop((tx0, tx1, gate));
        });
    }
}

/// The kit's task lifecycle: the state machine, the stop hook, the first failure and the done
/// latch, raced as the threads of a task and its handle race them.
mod lifecycle {
    use std::time::Duration;

    use streamtask_core::sync::atomic::{AtomicUsize, Ordering};
    use streamtask_core::sync::{Arc, thread};
    use streamtask_core::task::TaskError;
    use streamtask_core::task::TaskState;
    use streamtask_runtime::Lifecycle;

    /// A lifecycle whose stop hook counts its runs.
    fn counted() -> (Arc<Lifecycle>, Arc<AtomicUsize>) {
        let lifecycle = Arc::new(Lifecycle::new("t"));
        let stops = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&stops);
        lifecycle.set_stop_hook(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        (lifecycle, stops)
    }

    /// A cancel from the handle races the task thread starting and finishing: the task ends in
    /// exactly one terminal state, and the stop hook ran iff it was cancelled.
    #[test]
    fn cancel_racing_start_and_finish_ends_in_one_terminal_state() {
        loom::model(|| {
            let (lifecycle, stops) = counted();
            let task = {
                let lifecycle = Arc::clone(&lifecycle);
                thread::spawn(move || {
                    if lifecycle.start() {
                        lifecycle.begin_finishing();
                    }
                    lifecycle.complete()
                })
            };
            let cancelled = lifecycle.request_cancel();
            let terminal = task.join().unwrap();
            assert!(terminal.is_terminal());
            assert_eq!(lifecycle.state(), terminal);
            assert!(lifecycle.is_done());
            assert_eq!(cancelled, terminal == TaskState::Cancelled);
            assert_eq!(stops.load(Ordering::SeqCst), usize::from(cancelled));
        });
    }

    /// A failure on one thread races a cancel on another: exactly one of them stops the task,
    /// the stop hook runs once, and the outcome is the one that won.
    #[test]
    fn a_failure_racing_a_cancel_stops_the_task_once() {
        loom::model(|| {
            let (lifecycle, stops) = counted();
            lifecycle.start();
            let failing = {
                let lifecycle = Arc::clone(&lifecycle);
                thread::spawn(move || lifecycle.fail("timer", TaskError::Panic("boom".into())))
            };
            let cancelled = lifecycle.request_cancel();
            let failed = failing.join().unwrap();
            assert!(cancelled != failed, "exactly one stops the task");
            assert_eq!(stops.load(Ordering::SeqCst), 1);
            let terminal = lifecycle.complete();
            let outcome = lifecycle.outcome();
            if failed {
                assert_eq!(terminal, TaskState::Failed);
                assert!(outcome.failure().is_some());
            } else {
                assert_eq!(terminal, TaskState::Cancelled);
                assert!(outcome.failure().is_none());
            }
        });
    }

    /// A joiner waiting on the done latch while the task thread completes is always woken (no
    /// lost wake-up, whether it started waiting before or after the stop).
    #[test]
    fn the_done_latch_wakes_a_joiner_that_waits_across_the_stop() {
        loom::model(|| {
            let (lifecycle, _) = counted();
            lifecycle.start();
            let joiner = {
                let lifecycle = Arc::clone(&lifecycle);
                // Under loom a timed wait is untimed: the latch must wake it.
                thread::spawn(move || lifecycle.wait_done(Duration::from_secs(3600)))
            };
            lifecycle.request_cancel();
            lifecycle.complete();
            assert!(joiner.join().unwrap());
        });
    }
}

/// The timer scheduler thread (`TimerScheduler`) driven by a manual clock: its wait,
/// quiesce and shutdown rules.
mod timer_scheduler {
    use std::convert::Infallible;

    use streamtask_core::sync::atomic::{AtomicUsize, Ordering};
    use streamtask_core::sync::{Arc, Condvar, Mutex, thread};
    use streamtask_core::{
        time::Clock, time::ManualClock, time::Period, time::Timer, time::TimerHandle,
        time::TimerService,
    };
    use streamtask_runtime::{Rearm, TimerScheduler};

    fn timer(timestamp: i64, tag: u64) -> Timer {
        Timer {
            operator: 0,
            timestamp,
            tag,
        }
    }

    /// The tags a scheduler fired, in order, with a condition to wait for them.
    #[derive(Default)]
    struct Fired {
        tags: Mutex<Vec<u64>>,
        changed: Condvar,
    }

    impl Fired {
        fn wait_for(&self, count: usize) -> Vec<u64> {
            let mut tags = self.tags.lock();
            while tags.len() < count {
                self.changed.wait(&mut tags);
            }
            tags.clone()
        }
    }

    fn spawn(clock: &ManualClock, fired: &Arc<Fired>) -> TimerScheduler {
        let fired = Arc::clone(fired);
        TimerScheduler::spawn(
            "loom-timers",
            Clock::Manual(clock.clone()),
            move |t: Timer| -> Result<(), Infallible> {
                fired.tags.lock().push(t.tag);
                fired.changed.notify_all();
                Ok(())
            },
            |never: Infallible| match never {},
        )
    }

    /// A clock move racing the scheduler's "nothing due yet, wait" step is never lost: the
    /// thread fires the timer (a lost epoch bump would leave every thread blocked, which loom
    /// reports as a deadlock).
    #[test]
    fn a_clock_move_racing_the_scheduler_wait_wakes_it() {
        loom::model(|| {
            let clock = ManualClock::new(0);
            let fired = Arc::new(Fired::default());
            let scheduler = spawn(&clock, &fired);
            scheduler.register_timer(timer(5, 1)).unwrap();
            let mover = {
                let clock = clock.clone();
                thread::spawn(move || clock.set(6))
            };
            assert_eq!(fired.wait_for(1), vec![1]);
            mover.join().unwrap();
            scheduler.shutdown();
        });
    }

    /// A registration racing `quiesce`: a registration that got `TimerHandle::NEVER` never
    /// fires, and nothing fires twice.
    #[test]
    fn a_registration_racing_quiesce_gets_never_or_may_fire_before_it() {
        loom::model(|| {
            let clock = ManualClock::new(10);
            let fired = Arc::new(Fired::default());
            let scheduler = Arc::new(spawn(&clock, &fired));
            let registrar = {
                let scheduler = Arc::clone(&scheduler);
                // A timer in the past: due at once.
                thread::spawn(move || scheduler.register_timer(timer(0, 7)).unwrap())
            };
            scheduler.quiesce();
            let handle = registrar.join().unwrap();
            scheduler.shutdown();
            let tags = fired.tags.lock().clone();
            if handle == TimerHandle::NEVER {
                assert!(tags.is_empty(), "a NEVER handle fired: {tags:?}");
            }
            assert!(tags.len() <= 1, "fired twice: {tags:?}");
        });
    }

    /// `shutdown` racing a firing timer joins the thread: a `fire` that started has finished
    /// when `shutdown` returns, and none starts afterwards.
    #[test]
    fn shutdown_racing_a_firing_timer_waits_for_it() {
        loom::model(|| {
            let clock = ManualClock::new(10);
            let entered = Arc::new(AtomicUsize::new(0));
            let exited = Arc::new(AtomicUsize::new(0));
            let scheduler = {
                let (entered, exited) = (Arc::clone(&entered), Arc::clone(&exited));
                TimerScheduler::spawn(
                    "loom-timers",
                    Clock::Manual(clock.clone()),
                    move |_t: Timer| -> Result<(), Infallible> {
                        // SeqCst: the test reads both counters after the join; any order would
                        // do, the join orders them.
                        entered.fetch_add(1, Ordering::SeqCst);
                        exited.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    },
                    |never: Infallible| match never {},
                )
            };
            scheduler.register_timer(timer(0, 1)).unwrap();
            scheduler.shutdown();
            let started = entered.load(Ordering::SeqCst);
            assert_eq!(
                started,
                exited.load(Ordering::SeqCst),
                "a fire still running"
            );
            assert!(started <= 1);
            // Nothing fires after shutdown, even when the clock moves on.
            clock.set(100);
            assert_eq!(entered.load(Ordering::SeqCst), started);
        });
    }

    /// A fixed-delay run completing on another thread (the mailbox thread's `Rearm::done`)
    /// racing a cancel of the series: whichever wins, no run is left armed and none fires
    /// after the cancel returned.
    #[test]
    fn a_fixed_delay_rearm_racing_cancel_leaves_no_run() {
        loom::model(|| {
            let clock = ManualClock::new(10);
            let slot: Arc<(Mutex<Vec<Rearm>>, Condvar)> = Arc::new(Default::default());
            let fired = Arc::new(AtomicUsize::new(0));
            let scheduler = {
                let (slot, fired) = (Arc::clone(&slot), Arc::clone(&fired));
                TimerScheduler::spawn_deferred(
                    "loom-timers",
                    Clock::Manual(clock.clone()),
                    move |_t: Timer, rearm: Option<Rearm>| -> Result<(), Infallible> {
                        // SeqCst: read after the join, which orders it anyway.
                        fired.fetch_add(1, Ordering::SeqCst);
                        slot.0.lock().extend(rearm);
                        slot.1.notify_all();
                        Ok(())
                    },
                    |never: Infallible| match never {},
                )
            };
            let handle = scheduler
                .register_periodic(timer(0, 1), Period::FixedDelay(1))
                .unwrap();
            let rearm = {
                let mut rearms = slot.0.lock();
                while rearms.is_empty() {
                    slot.1.wait(&mut rearms);
                }
                rearms.pop().unwrap()
            };
            let completer = thread::spawn(move || rearm.done());
            scheduler.cancel_timer(handle);
            completer.join().unwrap();
            assert_eq!(scheduler.pending(), 0, "a run is armed after the cancel");
            clock.set(100);
            scheduler.shutdown();
            assert_eq!(fired.load(Ordering::SeqCst), 1);
        });
    }
}

/// The async operator's completion route (`CompletionRoute` in `async_io/operator.rs`): a
/// completion from another thread that races the operator's own call, which catches the
/// completions made meanwhile, is applied exactly once, either taken when the call returns or
/// by the event it sent; none is left in the list without an event.
mod completion_route {
    use std::sync::Arc;

    use loom::thread;
    use streamtask_core::StreamRecord;
    use streamtask_core::async_io::{AsyncConfig, OutputMode};
    use streamtask_core::function::{AsyncFunction, ResultFuture};
    use streamtask_core::operator::{Context, Emitted, Operator};
    use streamtask_core::sync::Mutex;
    use streamtask_core::testing::HarnessServices;
    use streamtask_runtime::AsyncWaitOperator;

    use crate::support::{deliver_events, sorted_record_values};

    /// Record 1's call is left to the test (its future parked in a slot); every other record
    /// answers at once, inside `invoke`.
    struct FirstLater(Arc<Mutex<Option<ResultFuture<u32>>>>);

    impl AsyncFunction for FirstLater {
        type In = u32;
        type Out = u32;
        fn invoke(&mut self, input: &u32, result: ResultFuture<u32>) {
            if *input == 1 {
                *self.0.lock() = Some(result);
            } else {
                result.complete(vec![*input * 10]);
            }
        }
    }

    #[test]
    fn a_completion_from_another_thread_racing_a_catching_call_is_applied_once() {
        racing_completions_are_each_applied_once(true);
    }

    /// Inline completions off: record 2's completion, made on the task thread outside any
    /// catching call, travels in an event of its own (not through the list) while record 1's,
    /// from another thread, goes through the list; each is applied once.
    #[test]
    fn the_task_threads_own_completion_racing_one_through_the_list_is_applied_once() {
        racing_completions_are_each_applied_once(false);
    }

    fn racing_completions_are_each_applied_once(inline: bool) {
        loom::model(move || {
            let slot = Arc::new(Mutex::new(None));
            let services = HarnessServices::new("route");
            let mut out: Vec<Emitted<u32>> = Vec::new();
            let mut op = AsyncWaitOperator::new(
                "async",
                FirstLater(Arc::clone(&slot)),
                AsyncConfig::new(OutputMode::Unordered, 4),
            )
            .unwrap()
            .with_inline_completions(inline);
            let mut ctx = Context::new(&mut out, &services.services, 0);
            op.open(&mut ctx).unwrap();
            op.process_element(StreamRecord::new(1), &mut ctx).unwrap();
            let future = slot.lock().take().expect("record 1's call is pending");
            let completer = thread::spawn(move || {
                assert!(future.complete(vec![10]));
            });
            // Record 2 answers inside its call while record 1's completion may arrive.
            op.process_element(StreamRecord::new(2), &mut ctx).unwrap();
            completer.join().unwrap();
            // Whatever was not caught sent an event; deliver every one.
            deliver_events(&mut op, &services, &mut ctx);
            drop(ctx);
            assert_eq!(
                sorted_record_values(&out),
                vec![10, 20],
                "each result exactly once"
            );
        });
    }
}

/// The renewal of a final call's future for a new call (`ResultFuture::renew`, through the
/// engine's spares): only once no other handle of it is left. A function's thread that still
/// holds a clone and completes it late (a second completion, after the call was final) must
/// find it done, never the renewed future of a later call, whose result that would become.
mod future_renewal {
    use std::sync::Arc;

    use loom::thread;
    use streamtask_core::StreamRecord;
    use streamtask_core::async_io::{AsyncConfig, OutputMode};
    use streamtask_core::function::{AsyncFunction, ResultFuture};
    use streamtask_core::operator::{Context, Emitted, Operator};
    use streamtask_core::sync::Mutex;
    use streamtask_core::testing::HarnessServices;
    use streamtask_runtime::AsyncWaitOperator;

    use crate::support::{deliver_events, sorted_record_values};

    /// Leaves every call to the test: the futures wait in a list, in call order.
    struct Later(Arc<Mutex<Vec<ResultFuture<u32>>>>);

    impl AsyncFunction for Later {
        type In = u32;
        type Out = u32;
        fn invoke(&mut self, _input: &u32, result: ResultFuture<u32>) {
            self.0.lock().push(result);
        }
    }

    #[test]
    fn a_late_completion_through_a_clone_never_completes_a_later_call() {
        loom::model(|| {
            let calls = Arc::new(Mutex::new(Vec::new()));
            let services = HarnessServices::new("renewal");
            let mut out: Vec<Emitted<u32>> = Vec::new();
            let mut op = AsyncWaitOperator::new(
                "async",
                Later(Arc::clone(&calls)),
                AsyncConfig::new(OutputMode::Unordered, 2),
            )
            .unwrap();
            let mut ctx = Context::new(&mut out, &services.services, 0);
            op.open(&mut ctx).unwrap();
            op.process_element(StreamRecord::new(1), &mut ctx).unwrap();
            let first = calls.lock().pop().expect("record 1's call");
            let clone = first.clone();
            assert!(first.complete(vec![10]));
            drop(first);
            // The clone's holder completes again, late, and lets go of it, while the task makes
            // record 1's call final and starts record 2's.
            let late = thread::spawn(move || {
                assert!(
                    !clone.complete(vec![99]),
                    "record 1's call completed already"
                );
            });
            deliver_events(&mut op, &services, &mut ctx);
            op.process_element(StreamRecord::new(2), &mut ctx).unwrap();
            late.join().unwrap();
            let second = calls.lock().pop().expect("record 2's call");
            assert!(
                second.complete(vec![20]),
                "nobody else completed record 2's call"
            );
            drop(second);
            deliver_events(&mut op, &services, &mut ctx);
            drop(ctx);
            assert_eq!(sorted_record_values(&out), vec![10, 20]);
        });
    }
}

/// The priority lane: a barrier sent ahead of the queued records while the producer keeps
/// writing, and the bell that tells a reader that does not read.
mod priority_lane {
    use streamtask_core::sync::thread;
    use streamtask_runtime::channel::{PriorityBell, TryRecvError, bounded};

    use super::support::Notice;

    const BARRIER: u8 = 100;

    /// What the consumer saw: records taken in order, the barrier, and what the barrier
    /// overtook (stored, still delivered after it).
    #[derive(Default)]
    struct Seen {
        before: Vec<u8>,
        barrier: bool,
        overtaken: Vec<u8>,
        after: Vec<u8>,
    }

    impl Seen {
        /// One step of a reader that takes the barrier early whenever it is there.
        fn step(&mut self, rx: &mut streamtask_runtime::channel::Receiver<u8>) -> bool {
            if !self.barrier {
                let mut overtaken = Vec::new();
                if let Some(b) = rx.take_priority(|_| true, |v| overtaken.push(*v)) {
                    assert_eq!(b, BARRIER);
                    self.barrier = true;
                    self.overtaken = overtaken;
                    return true;
                }
            }
            match rx.try_recv() {
                Ok(BARRIER) => {
                    // In order: everything before it was taken.
                    self.barrier = true;
                    true
                }
                Ok(v) if self.barrier => {
                    self.after.push(v);
                    true
                }
                Ok(v) => {
                    self.before.push(v);
                    true
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => false,
            }
        }
    }

    /// Records 1 and 2, the barrier, record 3, while the reader reads: the records the reader
    /// took before the barrier plus those the barrier overtook are exactly 1 and 2, and 3 is
    /// never taken before the barrier.
    #[test]
    fn a_barrier_overtakes_queued_records_while_the_producer_writes() {
        loom::model(|| {
            let (tx, mut rx) = bounded::<u8>(4).unwrap();
            let producer = thread::spawn(move || {
                tx.send(1).unwrap();
                tx.send(2).unwrap();
                tx.send_priority(BARRIER).unwrap();
                tx.send(3).unwrap();
            });
            let mut seen = Seen::default();
            seen.step(&mut rx);
            seen.step(&mut rx);
            producer.join().unwrap();
            while seen.step(&mut rx) {}
            assert!(seen.barrier, "the barrier was lost");
            let mut cut = seen.before.clone();
            cut.extend(&seen.overtaken);
            assert_eq!(cut, [1, 2], "the cut of the checkpoint");
            assert!(
                !seen.before.contains(&3),
                "a record after the barrier came before it"
            );
            // Everything is delivered once: the overtaken records after the barrier too.
            let mut all = seen.before.clone();
            all.extend(&seen.after);
            assert_eq!(all, [1, 2, 3]);
        });
    }

    /// A reader that never takes early (a gate without a codec: aligned) gets the barrier in
    /// order, after exactly the records sent before it, however the producer's writes fall
    /// between its reads.
    #[test]
    fn an_in_order_reader_gets_the_barrier_after_exactly_the_records_before_it() {
        loom::model(|| {
            let (tx, rx) = bounded::<u8>(4).unwrap();
            let producer = thread::spawn(move || {
                tx.send(1).unwrap();
                tx.send_priority(BARRIER).unwrap();
                tx.send(2).unwrap();
            });
            let mut got = Vec::new();
            for _ in 0..2 {
                if let Ok(v) = rx.try_recv() {
                    got.push(v);
                }
            }
            producer.join().unwrap();
            while let Ok(v) = rx.try_recv() {
                got.push(v);
            }
            assert_eq!(got, [1, BARRIER, 2]);
        });
    }

    /// A reader that does not read (its output is full) sets its waker, looks at the bell,
    /// and suspends: a priority send racing it either is seen or wakes it.
    #[test]
    fn the_bell_wakes_a_reader_that_does_not_read() {
        loom::model(|| {
            let (tx, mut rx) = bounded::<u8>(1).unwrap();
            let bell = PriorityBell::new();
            rx.set_priority_bell(bell.clone());
            let (notice, waker) = Notice::new();
            bell.set_waker(waker);
            let producer = thread::spawn(move || {
                tx.send_priority(BARRIER).unwrap();
                tx
            });
            if !bell.take() {
                notice.suspend();
                assert!(bell.take(), "woken without the bell rung");
            }
            assert_eq!(rx.take_priority(|_| true, |_| {}), Some(BARRIER));
            drop(producer.join().unwrap());
        });
    }
}

/// FLINK-40456 under the legacy model's threads: a retry and the timeout of one call fall due
/// at the same instant, and both timers were already taken from the scheduler (a timer thread
/// hands a due timer on, then waits for the checkpoint lock) when the firings run, one on each
/// thread, under the lock, in either order. The engine's call slot decides: whichever comes
/// first, the record's result is emitted exactly once, the timeout hook's.
mod async_retry_at_the_timeout {
    use std::time::Duration;

    use streamtask_core::async_io::{AsyncConfig, OutputMode, RetryPolicy};
    use streamtask_core::function::{Completion, CompletionSink};
    use streamtask_core::operator::{Context, Emitted};
    use streamtask_core::sync::{Arc, Mutex, thread};
    use streamtask_core::testing::{HarnessServices, ManualAsyncFunction};
    use streamtask_core::{StreamRecord, time::Timer};
    use streamtask_runtime::AsyncWaitEngine;

    #[derive(Default)]
    struct Keep(Mutex<Vec<Completion<u32>>>);

    impl CompletionSink<u32> for Keep {
        fn deliver(&self, completion: Completion<u32>) {
            self.0.lock().push(completion);
        }
    }

    /// What the checkpoint lock guards: the engine and its output.
    struct Locked {
        engine: AsyncWaitEngine<ManualAsyncFunction<u32, u32>>,
        out: Vec<Emitted<u32>>,
    }

    fn fire(locked: &Mutex<Locked>, services: &HarnessServices, timer: Timer) {
        let mut guard = locked.lock();
        let Locked { engine, out } = &mut *guard;
        let mut ctx = Context::new(out, &services.services, 0);
        engine.on_timer(timer, &mut ctx).unwrap();
    }

    fn apply(locked: &Mutex<Locked>, services: &HarnessServices, sink: &Keep) {
        let delivered: Vec<_> = sink.0.lock().drain(..).collect();
        let mut guard = locked.lock();
        let Locked { engine, out } = &mut *guard;
        let mut ctx = Context::new(out, &services.services, 0);
        for completion in delivered {
            engine.on_completion(completion, &mut ctx).unwrap();
        }
        engine.emit_ready(&mut ctx).unwrap();
    }

    #[test]
    fn a_retry_and_the_timeout_fired_from_two_threads_emit_the_result_once() {
        loom::model(|| {
            let function = ManualAsyncFunction::new().with_deferred_timeout();
            let calls = function.calls();
            let retry = RetryPolicy::fixed_delay(3, Duration::from_millis(10))
                .unwrap()
                .retry_if_result(|values: &[u32]| values.is_empty());
            let config = AsyncConfig::new(OutputMode::Unordered, 2)
                .with_timeout(Duration::from_millis(10))
                .with_retry(retry);
            let services = Arc::new(HarnessServices::new("loom"));
            let sink = Arc::new(Keep::default());
            let mut engine = AsyncWaitEngine::new("async", function, config).unwrap();
            let mut out = Vec::new();
            {
                let mut ctx = Context::new(&mut out, &services.services, 0);
                let to_sink: std::sync::Arc<dyn CompletionSink<u32>> =
                    std::sync::Arc::new(Forward(Arc::clone(&sink)));
                engine.open(to_sink, &mut ctx).unwrap();
                engine
                    .process_element(StreamRecord::with_timestamp(1, 1), &mut ctx)
                    .unwrap();
            }
            let locked = Arc::new(Mutex::new(Locked { engine, out }));
            // The first attempt asks for a retry: due at 10, as the deadline is.
            assert!(calls.invocations()[0].result.complete(Vec::new()));
            apply(&locked, &services, &sink);
            services.clock.advance(11);
            let due: Vec<Timer> = std::iter::from_fn(|| services.timers.pop_due()).collect();
            assert_eq!(due.len(), 2, "the timeout and the retry");

            let (first, second) = (due[0], due[1]);
            let timer_thread = {
                let (locked, services) = (Arc::clone(&locked), Arc::clone(&services));
                thread::spawn(move || fire(&locked, &services, second))
            };
            fire(&locked, &services, first);
            timer_thread.join().unwrap();

            // The hook answers; an attempt the retry started, if it ran first, answers later.
            let timeouts = calls.timeouts();
            assert_eq!(timeouts.len(), 1);
            assert!(timeouts[0].result.complete(vec![1001]));
            let late = calls.invocations().len() > 1 && calls.complete(&1, vec![7]);
            assert!(!late, "the hook's answer is final");
            apply(&locked, &services, &sink);
            let guard = locked.lock();
            assert_eq!(
                guard.out,
                vec![Emitted::Record(StreamRecord::with_timestamp(1001, 1))]
            );
            assert!(guard.engine.is_drained());
        });
    }

    /// The engine takes a std `Arc` of a sink; this one forwards to the loom-visible list.
    struct Forward(Arc<Keep>);

    impl CompletionSink<u32> for Forward {
        fn deliver(&self, completion: Completion<u32>) {
            self.0.deliver(completion);
        }
    }
}
