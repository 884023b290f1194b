//! Loom models of the bridge's hand-over between the source thread and the mailbox thread. Run
//! with `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p
//! streamtask-bridge --test loom`.
#![cfg(loom)]

use std::task::{Wake, Waker};

use loom::sync::Arc;
use loom::thread;

use streamtask_bridge::{CheckpointLockExecutor, HandoffReader};
use streamtask_core::operator::Emitted;
use streamtask_core::sync::{Condvar, Mutex};
use streamtask_core::testing::ManualTimerService;
use streamtask_core::{OperatorError, time::ManualClock};
use streamtask_legacy::{
    CancellationToken, CheckpointLock, Emission, Fairness, SourceCell, SourceContext,
    SourceContextConfig, SourceEnd, SourceFunction, run_source,
};
use streamtask_mailbox::{
    Controller, InputStatus, MailboxProcessor, ReaderOutput, SourceReader, TaskMailbox,
};

/// The default action of a bridge task: suspend for good, only mails run.
fn mails_only<S>(_: &mut S, controller: &mut Controller<'_>) -> Result<(), String> {
    controller.suspend_default_action();
    Ok(())
}

#[test]
fn smoke() {
    loom::model(|| {
        let lock = Arc::new(CheckpointLock::new(0u32, Fairness::Eventual));
        let mut processor = MailboxProcessor::new(
            TaskMailbox::new(),
            CheckpointLockExecutor::new(Arc::clone(&lock)),
        );
        processor
            .main_executor()
            .execute("add", |n: &mut u32| {
                *n += 1;
                Ok(())
            })
            .unwrap();
        let handle = processor.handle();
        let source = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                *lock.lock() += 10;
                handle.all_actions_completed();
            })
        };
        processor.run_mailbox_loop(&mut mails_only).unwrap();
        // The poison goes first: a mail behind it runs when the task drains (finish path).
        processor.prepare_close().unwrap();
        processor.drain().unwrap();
        source.join().unwrap();
        assert_eq!(*lock.lock(), 11);
    });
}

/// Two half-updates around an emit, in one locked section.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct Progress {
    started: u32,
    done: u32,
}

struct TwoSections;

impl SourceFunction for TwoSections {
    type Out = u32;
    type State = Progress;
    fn run(&mut self, ctx: &mut SourceContext<'_, u32, Progress>) -> Result<(), OperatorError> {
        for n in 0..2 {
            let mut locked = ctx.lock();
            locked.state_mut().started += 1;
            locked.collect(n)?;
            locked.state_mut().done += 1;
        }
        Ok(())
    }
}

type Cell = SourceCell<Progress, Vec<Emitted<u32>>>;

fn cell() -> Cell {
    let timers = std::sync::Arc::new(ManualTimerService::new(ManualClock::new(0)));
    SourceCell::new(
        Progress::default(),
        Emission::new(SourceContextConfig::processing_time(), timers),
        Vec::new(),
    )
}

/// The source thread emits under the lock while the mailbox thread runs a checkpoint mail
/// under it: the mail sees whole sections only, and the state agrees with the records.
#[test]
fn a_checkpoint_mail_never_sees_half_a_section() {
    loom::model(|| {
        let lock = Arc::new(CheckpointLock::new(cell(), Fairness::Eventual));
        let mut processor = MailboxProcessor::new(
            TaskMailbox::new(),
            CheckpointLockExecutor::new(Arc::clone(&lock)),
        );
        processor
            .main_executor()
            .execute("checkpoint", |cell: &mut Cell| {
                let progress = *cell.state();
                assert_eq!(progress.started, progress.done, "half a section");
                let records = cell
                    .output()
                    .iter()
                    .filter(|e| matches!(e, Emitted::Record(_)))
                    .count();
                assert_eq!(records as u32, progress.done);
                Ok(())
            })
            .unwrap();
        let handle = processor.handle();
        let source = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                let ended = run_source(&mut TwoSections, &lock, &CancellationToken::new());
                assert_eq!(ended.unwrap(), SourceEnd::Finished);
                handle.all_actions_completed();
            })
        };
        processor.run_mailbox_loop(&mut mails_only).unwrap();
        processor.prepare_close().unwrap();
        processor.drain().unwrap();
        source.join().unwrap();
    });
}

/// The source blocks while holding the lock; the mailbox thread may be waiting for the lock to
/// run a mail; cancellation (from a third thread) reaches the source, which lets go; the mail
/// runs exactly once (in the loop, or when the mailbox drains behind the poison) and nothing
/// deadlocks (FLINK-15076, without thread interruption).
#[test]
fn cancel_reaches_a_source_that_blocks_holding_the_lock() {
    loom::model(|| {
        let lock = Arc::new(CheckpointLock::new(0u32, Fairness::Eventual));
        let token = CancellationToken::new();
        let mut processor = MailboxProcessor::new(
            TaskMailbox::new(),
            CheckpointLockExecutor::new(Arc::clone(&lock)),
        );
        processor
            .main_executor()
            .execute("needs the lock", |runs: &mut u32| {
                *runs += 1;
                Ok(())
            })
            .unwrap();
        let handle = processor.handle();
        let source = {
            let (lock, token) = (Arc::clone(&lock), token.clone());
            thread::spawn(move || {
                let held = lock.lock();
                token.wait(); // blocked, holding the lock
                drop(held);
                handle.all_actions_completed();
            })
        };
        let canceller = thread::spawn(move || token.cancel());
        processor.run_mailbox_loop(&mut mails_only).unwrap();
        processor.prepare_close().unwrap();
        processor.drain().unwrap();
        canceller.join().unwrap();
        source.join().unwrap();
        assert_eq!(
            *lock.lock(),
            1,
            "the mail ran once, after the source let go"
        );
    });
}

/// Emits one record and ends.
struct One;

impl SourceFunction for One {
    type Out = u32;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u32, ()>) -> Result<(), OperatorError> {
        ctx.collect(7)
    }
}

/// A waker that sets a flag the model sleeps on.
#[derive(Default)]
struct Flag {
    set: Mutex<bool>,
    changed: Condvar,
}

impl Flag {
    fn wait(&self) {
        let mut set = self.set.lock();
        // A lost wakeup would make this wait forever: loom reports the deadlock.
        while !*set {
            self.changed.wait(&mut set);
        }
        *set = false;
    }
}

impl Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        *self.set.lock() = true;
        self.changed.notify_all();
    }
}

/// The handoff's wake protocol: whenever the reader found nothing and registered its waker,
/// the source's next element (or its end) wakes it; the reader sees the record, then the end,
/// and `close` joins the source thread.
#[test]
fn the_handoff_reader_is_woken_for_what_it_did_not_see() {
    loom::model(|| {
        let mut reader = HandoffReader::new(One).with_capacity(1);
        let flag = std::sync::Arc::new(Flag::default());
        let waker = Waker::from(std::sync::Arc::clone(&flag));
        let mut emitted: Vec<Emitted<u32>> = Vec::new();
        loop {
            match reader
                .poll_next(&mut ReaderOutput::new(&mut emitted))
                .unwrap()
            {
                InputStatus::MoreAvailable => {}
                InputStatus::EndOfInput => break,
                InputStatus::NothingAvailable => {
                    reader.register_waker(&waker);
                    flag.wait();
                }
            }
        }
        reader.close().unwrap();
        let records: Vec<u32> = emitted
            .iter()
            .filter_map(|e| match e {
                Emitted::Record(r) => Some(r.value),
                _ => None,
            })
            .collect();
        assert_eq!(records, vec![7]);
    });
}

/// Emits `0..3`, one locked section per record (state = the next value).
struct Three;

impl SourceFunction for Three {
    type Out = u32;
    type State = u32;
    fn run(&mut self, ctx: &mut SourceContext<'_, u32, u32>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == 3 {
                return Ok(());
            }
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// The chunked transfer: with a capacity of 2 in chunks of 1 (and of 2) the source fills up and
/// waits for the room the reader frees by taking published chunks without the lock; the reader
/// sleeps when nothing is published. Whatever the interleaving, no wakeup is lost on either
/// side (loom reports a deadlock otherwise) and the records arrive once each, in order.
#[test]
fn chunks_reach_the_reader_once_in_order_and_a_full_source_is_woken() {
    for chunk in [1, 2] {
        loom::model(move || {
            let mut reader = HandoffReader::new(Three).with_capacity(2).with_chunk(chunk);
            let flag = std::sync::Arc::new(Flag::default());
            let waker = Waker::from(std::sync::Arc::clone(&flag));
            let mut emitted: Vec<Emitted<u32>> = Vec::new();
            loop {
                match reader
                    .poll_next(&mut ReaderOutput::new(&mut emitted))
                    .unwrap()
                {
                    InputStatus::MoreAvailable => {}
                    InputStatus::EndOfInput => break,
                    InputStatus::NothingAvailable => {
                        reader.register_waker(&waker);
                        flag.wait();
                    }
                }
            }
            reader.close().unwrap();
            let records: Vec<u32> = emitted
                .iter()
                .filter_map(|e| match e {
                    Emitted::Record(r) => Some(r.value),
                    _ => None,
                })
                .collect();
            assert_eq!(records, vec![0, 1, 2]);
        });
    }
}

/// The source-exit latch decides who closes the chain once the source thread stops: the task
/// thread (it saw the source end) or the source thread itself (the task thread gave up on it
/// after the grace). Raced here with a deadline that has already passed, so the give-up path is
/// live: exactly one side cleans up, whatever the interleaving.
#[test]
fn the_source_exit_latch_gives_the_clean_up_to_exactly_one_side() {
    use std::time::Instant;
    use streamtask_bridge::SourceExit;

    loom::model(|| {
        let exit = Arc::new(SourceExit::new());
        let source = {
            let exit = Arc::clone(&exit);
            // `true`: the task thread will clean up; `false`: abandoned, clean up here.
            thread::spawn(move || exit.source_ended())
        };
        let task_saw_the_end = exit.wait_ended_until(Instant::now());
        let task_cleans_up = source.join().unwrap();
        assert_eq!(
            task_saw_the_end, task_cleans_up,
            "exactly one of the two threads closes the chain"
        );
    });
}

/// A checkpoint trigger (queued, the lock's errand posted, then its fallback mail put) racing
/// a source that runs two sections, with the mailbox thread running the fallback mail: the
/// mail looks at the queue before it asks for the lock (`PendingTriggers::run_fallback`), and
/// asks for it only if the source's errand left the trigger. Whatever the interleaving, the
/// trigger runs exactly once (by the errand or by the mail, never both, never neither: the
/// source may end before it serves the errand), and only between two sections.
#[test]
fn a_trigger_runs_once_whoever_takes_it() {
    use loom::sync::atomic::{AtomicU32, Ordering};
    use streamtask_bridge::{PendingTrigger, PendingTriggers};
    use streamtask_core::CheckpointBarrier;
    use streamtask_core::task::CheckpointResponder;

    loom::model(|| {
        let pending = Arc::new(PendingTriggers::new(CheckpointResponder::discard("loom")));
        let runs = Arc::new(AtomicU32::new(0));
        let run = {
            let runs = Arc::clone(&runs);
            move |cell: &mut Cell, trigger: PendingTrigger| -> Result<(), String> {
                let progress = *cell.state();
                assert_eq!(progress.started, progress.done, "half a section");
                assert_eq!(trigger.id(), 1);
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        };
        let errand = {
            let (pending, run) = (Arc::clone(&pending), run.clone());
            move |cell: &mut Cell| pending.run_all(cell, &run).unwrap()
        };
        let lock = Arc::new(CheckpointLock::new(cell(), Fairness::Eventual).with_errand(errand));
        let source = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                let ended = run_source(&mut TwoSections, &lock, &CancellationToken::new());
                assert_eq!(ended.unwrap(), SourceEnd::Finished);
            })
        };
        // The trigger call: queued, the errand posted, then the mail put ...
        pending.push(PendingTrigger::new(
            CheckpointBarrier::new(1, 0),
            std::time::Instant::now(),
        ));
        lock.post_errand();
        // ... which the mailbox thread runs.
        let mailbox = {
            let (lock, pending) = (Arc::clone(&lock), Arc::clone(&pending));
            thread::spawn(move || {
                pending
                    .run_fallback(&lock, |cell| pending.run_all(cell, run))
                    .unwrap()
            })
        };
        mailbox.join().unwrap();
        source.join().unwrap();
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the trigger ran exactly once"
        );
        assert!(pending.is_empty());
    });
}
