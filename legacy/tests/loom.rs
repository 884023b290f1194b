//! Loom models of the checkpoint lock's condition protocol and of cancellation. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p streamtask-legacy --test loom`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;

use streamtask_core::operator::Emitted;
use streamtask_legacy::{CancellationToken, CheckpointLock, Fairness, SourceCell, SourceContext};

/// The cell of the source-context models: the state, and the emitted values in a vector.
type TestCell<S> = SourceCell<S, Vec<Emitted<u32>>>;

/// A source's cell for the context models: state `state`, processing time on a manual clock,
/// emitted values kept in a vector.
fn source_cell<S>(state: S) -> TestCell<S> {
    use streamtask_core::testing::ManualTimerService;
    use streamtask_core::time::ManualClock;
    use streamtask_legacy::{Emission, SourceContextConfig};

    let timers = std::sync::Arc::new(ManualTimerService::new(ManualClock::new(0)));
    SourceCell::new(
        state,
        Emission::new(SourceContextConfig::processing_time(), timers),
        Vec::new(),
    )
}

/// A source thread that runs two sections through its context, each counting its start and
/// its end in the state around one emit (so a holder in between sees `started == ended`).
fn two_sections(
    lock: &Arc<CheckpointLock<TestCell<(u32, u32)>>>,
    cancel: &CancellationToken,
) -> thread::JoinHandle<()> {
    let (lock, cancel) = (Arc::clone(lock), cancel.clone());
    thread::spawn(move || {
        let mut ctx = SourceContext::new(&*lock, &cancel);
        for n in 0..2 {
            let mut locked = ctx.lock();
            locked.state_mut().0 += 1;
            locked.collect(n).expect("a vector output");
            locked.state_mut().1 += 1;
        }
    })
}

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
    use streamtask_core::{time::Clock, time::ManualClock, time::Timer, time::TimerService};
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

/// The async wait task's emitter thread (`task/async_wait/emitter.rs`) and its async-calls
/// thread (`task/runtime.rs`), the threads that ship: started through `model_check` on a real
/// body (the kit's `ChainBody` over a real `AsyncWaitOperator`, a `Vec` output that records
/// the barrier) behind a real checkpoint lock, the completions travelling through the sink and
/// inbox the task gives its head. The model's own thread is the task thread, taking the lock
/// per record and waiting on the lock's condition for room as `Parts::lock_with_room` does.
mod async_wait {
    use streamtask_core::async_io::{AsyncConfig, OutputMode};
    use streamtask_core::function::{AsyncFunction, ResultFuture};
    use streamtask_core::operator::{Chain, Emitted};
    use streamtask_core::state::decode;
    use streamtask_core::sync::{Arc, Mutex};
    use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
    use streamtask_core::testing::HarnessServices;
    use streamtask_core::trace::Tracer;
    use streamtask_core::{CheckpointBarrier, StreamRecord, state::TaskSnapshot};
    use streamtask_legacy::model_check::{
        AsyncBody, AsyncCallsThread, EmitterInbox, EmitterThread, emitter_channel,
    };
    use streamtask_legacy::{CheckpointLock, Fairness, NoChain};
    use streamtask_runtime::{AsyncWaitOperator, QueuedInput};
    use streamtask_runtime::{ChainBody, Drain, TaskEnv, TaskParts, TaskSetup};

    /// Completes every call at once, on the calling thread (the task thread, under the lock),
    /// with its input: the completion reaches the emitter through its inbox. With `parked`, it
    /// parks the future of each call for an input from `park_from` on there instead, for
    /// another thread to complete.
    #[derive(Default)]
    struct Echo {
        parked: Option<Parked>,
        park_from: u32,
    }

    /// The calls an [`Echo`] left to the test, in call order.
    type Parked = Arc<Mutex<Vec<(u32, ResultFuture<u32>)>>>;

    impl AsyncFunction for Echo {
        type In = u32;
        type Out = u32;
        fn invoke(&mut self, input: &u32, result: ResultFuture<u32>) {
            match &self.parked {
                Some(parked) if *input >= self.park_from => parked.lock().push((*input, result)),
                _ => {
                    result.complete(vec![*input]);
                }
            }
        }
    }

    type Body = AsyncBody<Echo, NoChain<u32>, Vec<Emitted<u32>>>;

    /// A running async wait task's state: its parts, its lock, and what its responder got.
    struct Task {
        parts: TaskParts,
        lock: Arc<CheckpointLock<Body>>,
        reports: crossbeam::channel::Receiver<TaskReport>,
    }

    /// An open, running task whose head admits `capacity` elements, and the emitter's inbox.
    fn running_task(capacity: usize) -> (Task, EmitterInbox<u32>) {
        running_task_with(capacity, Echo::default())
    }

    /// [`running_task`] whose calls for inputs from `park_from` on are left to the test: their
    /// futures wait in the list returned, in call order.
    fn running_task_parking(
        capacity: usize,
        park_from: u32,
    ) -> (
        Task,
        EmitterInbox<u32>,
        Arc<Mutex<Vec<(u32, ResultFuture<u32>)>>>,
    ) {
        let parked = Arc::new(Mutex::new(Vec::new()));
        let function = Echo {
            parked: Some(Arc::clone(&parked)),
            park_from,
        };
        let (task, inbox) = running_task_with(capacity, function);
        (task, inbox, parked)
    }

    /// [`running_task`] running `function`.
    fn running_task_with(capacity: usize, function: Echo) -> (Task, EmitterInbox<u32>) {
        let (to_coordinator, reports) = crossbeam::channel::unbounded();
        let setup = TaskSetup::new(
            TaskConfig::new("async")
                .with_responder(CheckpointResponder::new("async", to_coordinator)),
        );
        let (sink, inbox) = emitter_channel();
        let head = AsyncWaitOperator::new(
            "async",
            function,
            AsyncConfig::new(OutputMode::Ordered, capacity),
        )
        .unwrap()
        .with_completion_sink(sink)
        // Echo answers inside the call; modelled here is the emitter path every completion
        // from another thread takes, so the completions must not be applied inline.
        .with_inline_completions(false);
        let tail: NoChain<u32> = streamtask_core::operator::Map::new(
            "results",
            std::convert::identity as fn(u32) -> u32,
        );
        let env = TaskEnv::new(
            setup.parts.clone(),
            HarnessServices::new("async").services,
            Tracer::off(),
        );
        let mut body: Body = ChainBody::new(Chain::new(head, tail), Vec::new(), env);
        body.restore_and_open(None).unwrap();
        assert!(setup.parts.lifecycle.start());
        let lock = Arc::new(CheckpointLock::new(body, Fairness::Eventual));
        let task = Task {
            parts: setup.parts,
            lock,
            reports,
        };
        (task, inbox)
    }

    impl Task {
        /// The task thread's step for one record, as `Parts::lock_with_room` runs it: take the
        /// lock; if the head has no room, apply the completions waiting for the emitter (the
        /// task thread's own among them) and, if it still has none, wait (releasing the lock)
        /// until it has; put the record through the chain.
        fn process(&self, emitter: &EmitterThread<u32>, value: u32) {
            let mut body = self.lock.lock();
            if !body.accepts_input()
                && !(emitter.work_before_wait(&mut body) && body.accepts_input())
            {
                body.wait_until(|b| b.accepts_input());
            }
            body.process(StreamRecord::new(value)).unwrap();
        }

        /// The records the task emitted so far.
        fn records_out(body: &Body) -> usize {
            body.output()
                .iter()
                .filter(|e| matches!(e, Emitted::Record(_)))
                .count()
        }

        /// The values the task emitted, split at its one barrier (everything, if none).
        fn emitted(&self) -> (Vec<u32>, Option<CheckpointBarrier>, Vec<u32>) {
            let body = self.lock.lock();
            let (mut before, mut barrier, mut after) = (Vec::new(), None, Vec::new());
            for element in body.output() {
                match element {
                    Emitted::Record(r) if barrier.is_none() => before.push(r.value),
                    Emitted::Record(r) => after.push(r.value),
                    Emitted::Barrier(b) => {
                        assert!(barrier.replace(*b).is_none(), "a second barrier");
                    }
                    Emitted::EndOfInput => {}
                    other => panic!("unexpected output {other:?}"),
                }
            }
            (before, barrier, after)
        }
    }

    /// The inputs an acknowledged snapshot holds for the async head.
    fn in_flight(snapshot: &TaskSnapshot) -> Vec<u32> {
        let state: Vec<QueuedInput<u32>> =
            decode::<streamtask_core::keygroup::ListState<QueuedInput<u32>>>(
                snapshot
                    .get(&TaskSnapshot::operator_key(0))
                    .expect("the head's state"),
            )
            .unwrap()
            .items;
        state
            .into_iter()
            .map(|input| match input {
                QueuedInput::Record(r) => r.value,
                other => panic!("unexpected queued input {other:?}"),
            })
            .collect()
    }

    /// The task thread's end of input, as `Parts::finish` runs it: under the lock, end the
    /// chain's input step by step; while the head drains, apply the completions waiting for
    /// the emitter, or, if there were none, wait on the lock's condition (releasing it).
    fn finish(task: &Task, emitter: &EmitterThread<u32>) {
        let mut body = task.lock.lock();
        body.begin_end_of_input();
        while matches!(body.end_input_step().unwrap(), Drain::Waiting) {
            if !emitter.work_before_wait(&mut body) {
                body.wait_until(|b| b.accepts_input());
            }
        }
    }

    /// Record 1's completion, made on the task thread, waits in the inbox without waking the
    /// emitter; record 2 finds the head's one slot taken, so the task thread applies it itself
    /// before it would wait for room (if it did not, a deadlock loom reports), which frees the
    /// slot; 2 is admitted and answered on the task thread, and end of input applies that
    /// answer the same way. The emitter, never woken, takes no part; the stop sent once the
    /// run is over reaches it waiting and ends it; nothing was left unemitted.
    #[test]
    fn the_task_threads_own_completions_are_applied_by_it_when_the_queue_is_full() {
        loom::model(|| {
            let (task, inbox) = running_task(1);
            let emitter = EmitterThread::start(&task.parts, &task.lock, inbox);
            task.process(&emitter, 1);
            task.process(&emitter, 2); // no room: applies record 1's answer first
            finish(&task, &emitter); // applies record 2's answer itself
            drop(emitter); // stop, join
            assert_eq!(task.emitted(), (vec![1, 2], None, vec![]));
        });
    }

    /// The emitter's wake-up (`emitter.rs`, "The wake-up protocol"): two threads other than the
    /// task's complete the two calls in flight while the emitter waits for, takes and applies
    /// the list (the second completion may find it empty again, or not), and the task thread
    /// waits on the lock's condition until both were emitted. A completion pushed onto an empty
    /// list that the emitter does not see, and is not woken for, is a deadlock loom reports.
    #[test]
    fn completions_from_other_threads_each_reach_a_waiting_emitter() {
        loom::model(|| {
            let (task, inbox, parked) = running_task_parking(2, 0);
            let emitter = EmitterThread::start(&task.parts, &task.lock, inbox);
            task.process(&emitter, 1);
            task.process(&emitter, 2);
            let completers: Vec<_> = std::mem::take(&mut *parked.lock())
                .into_iter()
                .map(|(input, future)| {
                    loom::thread::spawn(move || assert!(future.complete(vec![input])))
                })
                .collect();
            finish(&task, &emitter); // waits until the emitter emitted both
            for completer in completers {
                completer.join().unwrap();
            }
            drop(emitter); // stop, join
            assert_eq!(task.emitted(), (vec![1, 2], None, vec![]));
        });
    }

    /// The task thread's own completion (record 1) waits in the inbox for the task thread to
    /// wait; another thread's completion (record 2) pushed behind it must still wake the
    /// emitter, which then applies both, while the task thread waits on the lock's condition
    /// for the two results without doing the work itself. An other thread's push that left
    /// the emitter asleep because the list was not empty is a deadlock loom reports.
    #[test]
    fn an_other_threads_completion_behind_the_task_threads_own_wakes_the_emitter() {
        loom::model(|| {
            let (task, inbox, parked) = running_task_parking(2, 2);
            let emitter = EmitterThread::start(&task.parts, &task.lock, inbox);
            task.process(&emitter, 1); // answered on the task thread: deferred
            task.process(&emitter, 2); // parked
            let (input, future) = parked.lock().pop().expect("record 2's call");
            let completer = loom::thread::spawn(move || assert!(future.complete(vec![input])));
            task.lock.lock().wait_until(|b| Task::records_out(b) == 2);
            completer.join().unwrap();
            drop(emitter); // stop, join
            assert_eq!(task.emitted(), (vec![1, 2], None, vec![]));
        });
    }

    /// A checkpoint trigger reaches the async-calls thread while the emitter applies the
    /// completions of both in-flight inputs (one batch or two): whichever wins the lock, the
    /// barrier is acknowledged once, with exactly the inputs not emitted before it, each of
    /// them emitted after it, and nothing emitted twice.
    #[test]
    fn a_checkpoint_trigger_racing_the_emitter_acks_exactly_the_inputs_in_flight() {
        loom::model(|| {
            let (task, inbox) = running_task(2);
            let emitter = EmitterThread::start(&task.parts, &task.lock, inbox);
            let calls = AsyncCallsThread::start(&task.parts, &task.lock);
            task.process(&emitter, 1);
            task.process(&emitter, 2);
            let barrier = CheckpointBarrier::new(1, 0);
            calls.trigger(barrier);
            drop(calls); // stop (behind the trigger), join
            drop(emitter); // stop (behind both completions), join

            let reports: Vec<TaskReport> = task.reports.try_iter().collect();
            let [
                TaskReport::Acknowledged {
                    checkpoint: 1,
                    snapshot,
                    ..
                },
            ] = &reports[..]
            else {
                panic!("not one acknowledgement of checkpoint 1: {reports:?}");
            };
            let (before, seen, after) = task.emitted();
            assert_eq!(seen, Some(barrier));
            assert_eq!(
                in_flight(snapshot),
                after,
                "the snapshot holds exactly what was emitted after the barrier (before: {before:?})"
            );
            let mut all = before;
            all.extend(after);
            assert_eq!(all, [1, 2], "each result once, in order");
        });
    }
}

/// The bounded hand-over: a requester (`request_handover().lock()`) racing a source that runs
/// two sections through its context. Whatever the interleaving and the mutex flavour, the
/// requester sees whole sections only, the source that let go for it (fairly, whatever the
/// fairness setting) is woken, and both finish: no lost wakeup, no deadlock.
#[test]
fn a_handover_request_is_served_and_the_source_that_let_go_is_woken() {
    for fairness in [Fairness::Unfair, Fairness::Eventual, Fairness::Fair] {
        loom::model(move || {
            let cell = source_cell((0u32, 0u32));
            let lock = Arc::new(CheckpointLock::new(cell, fairness));
            let cancel = CancellationToken::new();
            let source = two_sections(&lock, &cancel);
            let cell = lock.request_handover().lock();
            let (started, done) = *cell.state();
            assert_eq!(started, done, "the requester saw half a section");
            assert_eq!(cell.output().len() as u32, done);
            assert!(!lock.handover_requested());
            drop(cell);
            source.join().unwrap();
            assert_eq!(*lock.lock().state(), (2, 2));
        });
    }
}

/// The lock's errand: a poster (work queued, then `post_errand`) racing a source that runs two
/// sections, then a holder that takes the lock plainly (the bridge's mailbox thread) and a last
/// section. Whatever the interleaving, the errand runs only between two sections (it sees whole
/// sections), the work is done exactly once (by the errand or by the holder, whichever comes
/// first: the post is never lost), and a post is served at most once.
#[test]
fn a_posted_errand_is_run_once_between_sections_and_never_lost() {
    use loom::sync::atomic::AtomicU32;
    type Cell = TestCell<(u32, u32)>;

    loom::model(|| {
        let cell = source_cell((0u32, 0u32));
        // The work: one unit queued; whoever takes it (under the lock) does it.
        let work = Arc::new(AtomicU32::new(0));
        let done = Arc::new(AtomicU32::new(0));
        let runs = Arc::new(AtomicU32::new(0));
        let take = {
            let (work, done) = (Arc::clone(&work), Arc::clone(&done));
            move |cell: &Cell| {
                let (started, ended) = *cell.state();
                assert_eq!(started, ended, "the work ran inside a section");
                if work.swap(0, Ordering::SeqCst) == 1 {
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }
        };
        let errand = {
            let (take, runs) = (take.clone(), Arc::clone(&runs));
            move |cell: &mut Cell| {
                runs.fetch_add(1, Ordering::SeqCst);
                take(cell);
            }
        };
        let lock = Arc::new(CheckpointLock::new(cell, Fairness::Eventual).with_errand(errand));
        let cancel = CancellationToken::new();
        let source = two_sections(&lock, &cancel);
        work.store(1, Ordering::SeqCst);
        lock.post_errand();
        source.join().unwrap();
        // A mail: the holder that does the work if the source did not.
        take(&lock.lock());
        assert_eq!(done.load(Ordering::SeqCst), 1, "the work done exactly once");
        // The post is served by the next section at the latest, once.
        let mut ctx = SourceContext::new(&*lock, &cancel);
        ctx.collect(2).expect("a vector output");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "one post, one errand");
        assert!(!lock.handover_requested());
    });
}

/// An errand posted while the source waits for a hand-over it let go for: the source stops
/// waiting, runs the errand, and waits again. The requester here takes the lock only once the
/// errand ran (a requester kept off its core), so a source that kept waiting for it, or that
/// was not woken by the post, would deadlock; whatever the interleaving, the errand runs once
/// and the requester is served.
#[test]
fn an_errand_posted_while_the_source_waits_for_a_handover_is_run_and_the_requester_served() {
    use loom::sync::atomic::AtomicU32;
    type Cell = TestCell<u32>;

    loom::model(|| {
        let cell = source_cell(0u32);
        let runs = Arc::new(AtomicU32::new(0));
        let ran = Arc::new(loom::sync::Notify::new());
        let errand = {
            let (runs, ran) = (Arc::clone(&runs), Arc::clone(&ran));
            move |_: &mut Cell| {
                runs.fetch_add(1, Ordering::SeqCst);
                ran.notify();
            }
        };
        let lock = Arc::new(CheckpointLock::new(cell, Fairness::Eventual).with_errand(errand));
        let cancel = CancellationToken::new();
        let requester = {
            let (lock, ran) = (Arc::clone(&lock), Arc::clone(&ran));
            thread::spawn(move || {
                let request = lock.request_handover();
                ran.wait();
                drop(request.lock());
            })
        };
        let source = {
            let (lock, cancel) = (Arc::clone(&lock), cancel.clone());
            thread::spawn(move || {
                let mut ctx = SourceContext::new(&*lock, &cancel);
                ctx.collect(0).expect("a vector output");
            })
        };
        lock.post_errand();
        source.join().unwrap();
        // A last section serves the post if the source's did not.
        let mut ctx = SourceContext::new(&*lock, &cancel);
        ctx.collect(1).expect("a vector output");
        requester.join().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1, "one post, one errand");
        assert!(!lock.handover_requested());
    });
}
