//! Interruptible firing of event-time timers in the mailbox model: a watermark that makes many
//! timers due fires them in chunks, mails waiting run between two chunks, and the rest follows
//! in a deferrable continuation mail. One test per Flink bug of the feature:
//!
//! | test | Flink bug | what went wrong there |
//! |---|---|---|
//! | `flink_35528_a_yield_never_runs_a_deferrable_mail` | FLINK-35528 | a yield ran the continuation, which re-enqueued itself: the yield never ended |
//! | `flink_39481_a_firing_deferred_at_end_of_input_fires_before_the_end` | FLINK-39481 | end of input skipped the continuation: its timers were lost and end of input went out before the watermark |
//! | `flink_40101_an_interrupted_firing_forwards_its_progress` | FLINK-40101 | an interrupted firing forwarded no watermark until it was done: downstream froze |
//!
//! A firing is interrupted deterministically: the function's first timer waits until the test
//! has put a mail (a checkpoint notice, or a trigger), so the check after the first chunk finds
//! it.

mod common;

use std::num::NonZeroUsize;

use crossbeam::channel::{Receiver, Sender};
use streamtask_core::function::{KeyedProcessFunction, TimeDomain};
use streamtask_core::operator::{Emitted, KeyedContext, KeyedProcessOperator};
use streamtask_core::task::{TaskConfig, TaskReport};
use streamtask_core::time::InterruptibleTimers;
use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord, Watermark};
use streamtask_mailbox::{
    Controller, Immediate, MailboxProcessor, Priority, SourceStreamTask, TaskMailbox,
};
use streamtask_runtime::TaskHandle;

use common::{Feed, GUARD, SharedOutput, feed, log, next_report, responder};

/// Timers per test firing.
const TIMERS: u64 = 20;
/// Timers per chunk.
const CHUNK: usize = 4;

fn chunks_of(timers: usize) -> InterruptibleTimers {
    InterruptibleTimers::enabled().with_chunk(NonZeroUsize::new(timers).unwrap())
}

/// The first timer's handshake with the test: the timer says it runs, then waits until the
/// test put its mail.
struct Gate {
    firing: Sender<()>,
    mail_put: Receiver<()>,
}

impl Gate {
    /// The gate, and the test's ends: "a timer runs" and "the mail is put".
    fn new() -> (Gate, Receiver<()>, Sender<()>) {
        let (firing_tx, firing_rx) = crossbeam::channel::bounded(1);
        let (put_tx, put_rx) = crossbeam::channel::bounded(1);
        (
            Gate {
                firing: firing_tx,
                mail_put: put_rx,
            },
            firing_rx,
            put_tx,
        )
    }
}

/// Registers an event-time timer at each record's value (its own key) and emits the timer's
/// timestamp when it fires; a timer with a gate passes it first.
struct EchoTimers {
    /// Gates by timer timestamp, in time order.
    gates: Vec<(i64, Gate)>,
}

impl KeyedProcessFunction for EchoTimers {
    type Key = u64;
    type In = u64;
    type Out = u64;
    type State = ();

    fn process_element(
        &mut self,
        value: u64,
        ctx: &mut KeyedContext<'_, '_, u64, (), u64>,
    ) -> Result<(), OperatorError> {
        ctx.register_event_timer(i64::try_from(value).unwrap());
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, u64, (), u64>,
    ) -> Result<(), OperatorError> {
        assert_eq!(domain, TimeDomain::EventTime);
        if self.gates.first().is_some_and(|(at, _)| *at == timestamp) {
            let (_, gate) = self.gates.remove(0);
            gate.firing.send(()).unwrap();
            gate.mail_put
                .recv_timeout(GUARD)
                .expect("the test puts its mail within the guard time");
        }
        ctx.collect(u64::try_from(timestamp).unwrap())
    }
}

type Echo = KeyedProcessOperator<fn(&u64) -> u64, EchoTimers>;

fn echo(gates: Vec<(i64, Gate)>) -> Echo {
    KeyedProcessOperator::new(
        "echo",
        (|v: &u64| *v) as fn(&u64) -> u64,
        EchoTimers { gates },
    )
}

/// A source task over a fed reader with the echo operator, firing in chunks of `CHUNK`; the
/// first timer passes `gate`, if there is one.
fn spawn(
    config: TaskConfig,
    gate: Option<Gate>,
) -> (common::Feeder<u64>, SharedOutput<u64>, TaskHandle) {
    spawn_gated(config, gate.map(|gate| (1, gate)).into_iter().collect())
}

/// As [`spawn`], with gates at the given timers.
fn spawn_gated(
    config: TaskConfig,
    gates: Vec<(i64, Gate)>,
) -> (common::Feeder<u64>, SharedOutput<u64>, TaskHandle) {
    let log = log();
    let (feeder, reader) = feed::<u64>(&log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        config.with_interruptible_timers(chunks_of(CHUNK)),
        reader,
        echo(gates),
        output.clone(),
    )
    .spawn();
    (feeder, output, task)
}

fn feed_records(feeder: &common::Feeder<u64>) {
    for n in 1..=TIMERS {
        feeder.send(Feed::Timestamped(n, i64::try_from(n).unwrap()));
    }
}

fn record(ts: u64) -> Emitted<u64> {
    Emitted::Record(StreamRecord::with_timestamp(ts, i64::try_from(ts).unwrap()))
}

fn records(range: std::ops::RangeInclusive<u64>) -> Vec<Emitted<u64>> {
    range.map(record).collect()
}

fn wm(ts: i64) -> Emitted<u64> {
    Emitted::Watermark(Watermark(ts))
}

#[test]
fn smoke() {
    let (feeder, output, task) = spawn(TaskConfig::new("timers"), None);
    feed_records(&feeder);
    feeder.send(Feed::Watermark(10));
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    let mut expected = records(1..=10);
    expected.push(wm(10));
    expected.extend(records(11..=TIMERS));
    expected.extend([wm(i64::MAX), Emitted::EndOfInput]);
    assert_eq!(output.emitted(), expected);
}

/// FLINK-40101: the firing cut after its first chunk forwards the watermark every fired timer
/// allows (one below the next due timer) before it lets the mail run, so downstream moves on
/// while the rest of the firing waits. Without it, the only watermark is the whole one.
#[test]
fn flink_40101_an_interrupted_firing_forwards_its_progress() {
    let (gate, firing, mail_put) = Gate::new();
    let (feeder, output, task) = spawn(TaskConfig::new("progress"), Some(gate));
    feed_records(&feeder);
    feeder.send(Feed::Watermark(i64::try_from(TIMERS).unwrap()));
    firing.recv_timeout(GUARD).expect("the firing starts");
    // A mail waits when the first chunk ends: the firing lets it run.
    task.notify_checkpoint_complete(1);
    mail_put.send(()).unwrap();
    let whole = wm(i64::try_from(TIMERS).unwrap());
    output.wait_until(|emitted| emitted.contains(&whole));
    feeder.send(Feed::End);
    assert!(task.join().is_finished());

    let chunk = CHUNK as u64;
    let mut expected = records(1..=chunk);
    expected.push(wm(i64::try_from(chunk).unwrap())); // every timer up to the chunk's fired
    expected.extend(records(chunk + 1..=TIMERS));
    expected.extend([whole, wm(i64::MAX), Emitted::EndOfInput]);
    assert_eq!(output.emitted(), expected);
}

/// FLINK-39481: the source's end makes every timer due (`Watermark::MAX`) and ends the input
/// right after; a mail cuts the firing after its first chunk, and another one cuts its
/// continuation, which runs while end of input waits. End of input waits for every deferred
/// continuation (the chain takes no input while a firing is deferred, and the waiting loop
/// runs deferrable mails), so every timer fires and the watermark goes out before end of
/// input. Without it the chain finished first and the continuation found nothing to fire
/// into.
#[test]
fn flink_39481_a_firing_deferred_at_end_of_input_fires_before_the_end() {
    let chunk = CHUNK as u64;
    let second_chunk = i64::try_from(chunk + 1).unwrap();
    let (first, first_firing, first_put) = Gate::new();
    let (second, second_firing, second_put) = Gate::new();
    let (feeder, output, task) = spawn_gated(
        TaskConfig::new("ending"),
        vec![(1, first), (second_chunk, second)],
    );
    feed_records(&feeder);
    feeder.send(Feed::End);
    for (firing, put, id) in [(first_firing, first_put, 1), (second_firing, second_put, 2)] {
        firing.recv_timeout(GUARD).expect("the chunk starts");
        task.notify_checkpoint_complete(id);
        put.send(()).unwrap();
    }
    // Bounded: a continuation the waiting loop does not run leaves the task waiting for good.
    output.wait_until(|emitted| emitted.last() == Some(&Emitted::EndOfInput));
    assert!(task.join().is_finished());

    let mut expected = records(1..=chunk);
    expected.push(wm(i64::try_from(chunk).unwrap()));
    expected.extend(records(chunk + 1..=2 * chunk));
    expected.push(wm(i64::try_from(2 * chunk).unwrap()));
    expected.extend(records(2 * chunk + 1..=TIMERS));
    expected.extend([wm(i64::MAX), Emitted::EndOfInput]);
    assert_eq!(output.emitted(), expected);
}

/// FLINK-35528: a deferrable mail that re-enqueues itself while its work is not done (as an
/// interrupted firing's continuation does) is invisible to a yield, so code that yields until
/// no mail is left gets out; the loop runs it in its turn. Without it, the yield loop runs the
/// mail again and again and never ends by itself.
#[test]
fn flink_35528_a_yield_never_runs_a_deferrable_mail() {
    /// How often the continuation re-enqueues itself before its work is done.
    const ROUNDS: u32 = 3;
    /// A yield loop that would run past this never ends by itself.
    const RUNAWAY: u32 = 1_000;

    #[derive(Default)]
    struct State {
        continuation_runs: u32,
        /// A mail yields now: the continuation, run then, would find that mail waiting and
        /// defer itself again (as a firing does when a mail waits).
        yielding: bool,
        yields: u32,
        yield_loop_ended: bool,
    }
    type Exec = streamtask_mailbox::MailboxExecutor<State, String>;

    fn continuation(deferrable: Exec) -> impl FnOnce(&mut State) -> Result<(), String> + Send {
        move |state: &mut State| {
            state.continuation_runs += 1;
            if state.yielding || state.continuation_runs < ROUNDS {
                let again = deferrable.clone();
                deferrable
                    .execute("continuation", continuation(again))
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
    }

    let mut processor: MailboxProcessor<State, String> =
        MailboxProcessor::new(TaskMailbox::new(), Immediate::new(State::default()));
    let deferrable = processor.mailbox_executor(Priority::DEFERRABLE);
    let task_level = processor.mailbox_executor(Priority::MIN);
    deferrable
        .execute("continuation", continuation(deferrable.clone()))
        .unwrap();
    // A mail that yields until no mail is left, at every priority a yield may ask for.
    let yielding = task_level.clone();
    task_level
        .execute("yield until done", move |state: &mut State| {
            state.yielding = true;
            for executor in [&yielding, &deferrable] {
                while state.yields < RUNAWAY && executor.try_yield(state).unwrap() {
                    state.yields += 1;
                }
            }
            state.yielding = false;
            state.yield_loop_ended = state.yields < RUNAWAY;
            Ok(())
        })
        .unwrap();

    let mut step = |state: &mut State, controller: &mut Controller<'_>| -> Result<(), String> {
        if state.continuation_runs >= ROUNDS {
            controller.all_actions_completed();
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut step).unwrap();
    let state = processor.action_executor().state();
    assert!(state.yield_loop_ended, "the yield loop ran away");
    assert_eq!(state.yields, 0, "a yield ran the deferrable mail");
    assert_eq!(
        state.continuation_runs, ROUNDS,
        "the loop runs it to the end"
    );
}

/// The executor's `should_interrupt` is the one-load "a mail waits" check a long firing makes.
#[test]
fn should_interrupt_sees_a_waiting_mail_and_the_doorbell() {
    let mut processor: MailboxProcessor<u32, String> =
        MailboxProcessor::new(TaskMailbox::new(), Immediate::new(0));
    let executor = processor.mailbox_executor(Priority::MIN);
    assert!(!executor.should_interrupt());
    executor
        .execute("count", |n: &mut u32| {
            *n += 1;
            Ok(())
        })
        .unwrap();
    assert!(executor.should_interrupt());
    let mut done = |_: &mut u32, c: &mut Controller<'_>| -> Result<(), String> {
        c.all_actions_completed();
        Ok(())
    };
    processor.run_mailbox_loop(&mut done).unwrap();
    assert!(!executor.should_interrupt());
}

/// What the feature is for: a source's checkpoint trigger waiting while a firing runs goes
/// between two chunks instead of after the whole firing; its snapshot holds the timers not
/// fired yet, and a task restored from it fires them when it opens, before any record.
#[test]
fn a_checkpoint_between_two_chunks_keeps_the_timers_not_fired() {
    let (gate, firing, mail_put) = Gate::new();
    let (tx, reports) = responder("first");
    let (feeder, output, task) = spawn(TaskConfig::new("first").with_responder(tx), Some(gate));
    feed_records(&feeder);
    feeder.send(Feed::Watermark(i64::try_from(TIMERS).unwrap()));
    firing.recv_timeout(GUARD).expect("the firing starts");
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    mail_put.send(()).unwrap();
    let snapshot = match next_report(&reports) {
        TaskReport::Acknowledged { snapshot, .. } => snapshot,
        other => panic!("the checkpoint was declined: {other:?}"),
    };
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    let emitted = output.emitted();
    let barrier = emitted
        .iter()
        .position(|e| matches!(e, Emitted::Barrier(_)))
        .expect("the barrier went out");
    let fired_before: Vec<u64> = emitted[..barrier]
        .iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r.value),
            _ => None,
        })
        .collect();
    assert!(
        !fired_before.is_empty() && fired_before.len() < TIMERS as usize,
        "the checkpoint ran between two chunks, not before or after the firing: {fired_before:?}"
    );

    // Restored: the timers not fired before the barrier fire on open, then the watermark.
    let fired = fired_before.len() as u64;
    let restored_log = log();
    let (feeder, reader) = feed::<u64>(&restored_log);
    let output = SharedOutput::new();
    let restored = SourceStreamTask::new(
        TaskConfig::new("restored").with_restore(Some(snapshot)),
        reader,
        echo(Vec::new()),
        output.clone(),
    )
    .spawn();
    feeder.send(Feed::End);
    assert!(restored.join().is_finished());
    let emitted = output.emitted();
    let mut expected = records(fired + 1..=TIMERS);
    expected.push(wm(i64::try_from(TIMERS).unwrap()));
    assert_eq!(emitted[..expected.len()], expected[..]);
    assert_eq!(
        emitted[expected.len()..],
        [wm(i64::MAX), Emitted::EndOfInput]
    );
}
