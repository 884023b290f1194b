//! Processing-time timers in the mailbox model: the timer thread only enqueues mails at the
//! operator's priority; callbacks run on the task thread; quiesce and shutdown (FLINK-23558).

mod common;

use std::sync::Arc;

use common::{Feed, Probe, SharedOutput, entries, feed, log, wait_for};
use streamtask_core::operator::{Emitted, OperatorEvent, OperatorExt};
use streamtask_core::task::TaskConfig;
use streamtask_core::{
    StreamRecord, task::TaskError, task::TaskOutcome, time::Clock, time::ManualClock, time::Timer,
    time::TimerError, time::TimerHandle, time::TimerService,
};
use streamtask_mailbox::{
    Controller, Immediate, MailboxTimerService, OperatorMails, Priority, ProcessorBuilder,
    SourceStreamTask, TaskMailbox,
};

fn timer(operator: usize, timestamp: i64, tag: u64) -> Timer {
    Timer {
        operator,
        timestamp,
        tag,
    }
}

#[test]
fn smoke() {
    let log = log();
    let clock = ManualClock::new(0);
    let (feeder, reader) = feed::<u64>(&log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("timed").with_clock(Clock::Manual(clock.clone())),
        reader,
        Probe::new("p", &log).with_timers(&[10]),
        output.clone(),
    )
    .spawn();
    feeder.wait_until_idle(); // opened: the timer is registered
    clock.set(10);
    feeder.send(Feed::Record(1));
    output.wait_until(|e| e.len() == 1);
    clock.set(11); // a timer at 10 fires once time passed 10
    output.wait_until(|e| e.len() == 2);
    feeder.send(Feed::End);
    let metrics = Arc::clone(task.metrics());
    assert!(task.join().is_finished());
    assert_eq!(output.values(), vec![1, 1000]);
    assert!(entries(&log).contains(&"p: timer 0 at 10 on timed".to_string()));
    assert_eq!(metrics.timers_fired.get(), 1);
    assert_eq!(metrics.timer_lateness.count(), 1);
    assert_eq!(metrics.threads.get(), 2, "task thread and timer thread");
}

#[test]
fn each_timer_reaches_the_operator_that_registered_it() {
    let log = log();
    let clock = ManualClock::new(0);
    let (feeder, reader) = feed::<u64>(&log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("chain").with_clock(Clock::Manual(clock.clone())),
        reader,
        Probe::new("head", &log)
            .with_timers(&[5])
            .then(Probe::new("tail", &log).with_timers(&[7])),
        output.clone(),
    )
    .spawn();
    feeder.wait_until_idle();
    clock.set(100);
    output.wait_until(|e| e.len() == 2);
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    // Both are tag 0 of their operator; the head's output flows through the tail.
    assert_eq!(output.values(), vec![1000, 1000]);
    let entries = entries(&log);
    let head = entries
        .iter()
        .position(|e| e == "head: timer 0 at 5 on chain");
    let tail = entries
        .iter()
        .position(|e| e == "tail: timer 0 at 7 on chain");
    assert!(head.unwrap() < tail.unwrap(), "deadline order: {entries:?}");
}

/// The state of a bare processor: the timers it saw.
#[derive(Default)]
struct Fired(Vec<Timer>);

impl OperatorMails<String> for Fired {
    fn on_timer(&mut self, timer: Timer) -> Result<(), String> {
        self.0.push(timer);
        Ok(())
    }
    fn on_event(&mut self, _operator: usize, _event: OperatorEvent) -> Result<(), String> {
        Err("no events here".into())
    }
}

#[test]
fn timer_mails_carry_the_priority_of_their_operator() {
    let clock = ManualClock::new(0);
    let builder = ProcessorBuilder::<Fired, String>::new(TaskMailbox::new());
    let timers = MailboxTimerService::new(
        "prio-timers",
        Clock::Manual(clock.clone()),
        &builder.handle(),
    );
    let processor = builder.build(Immediate::new(Fired::default()));
    timers.register_timer(timer(0, 1, 0)).unwrap();
    timers.register_timer(timer(2, 1, 2)).unwrap();
    assert!(timers.has_thread());
    clock.set(2);
    wait_for("both timer mails queued", || processor.mailbox().len() == 2);

    // Operator 1 yields: it sees operator 2's timer (downstream), not operator 0's.
    let own = processor.mailbox_executor(Priority::operator(1));
    let mut state = Fired::default();
    while own.try_yield(&mut state).unwrap() {}
    assert_eq!(state.0, vec![timer(2, 1, 2)]);
    assert_eq!(processor.mailbox().len(), 1);
    timers.shutdown();
}

#[test]
fn quiesced_timers_fire_nothing_and_queued_timer_mails_do_nothing() {
    let clock = ManualClock::new(0);
    let builder = ProcessorBuilder::<Fired, String>::new(TaskMailbox::new());
    let timers = MailboxTimerService::new(
        "quiesce-timers",
        Clock::Manual(clock.clone()),
        &builder.handle(),
    );
    let mut processor = builder.build(Immediate::new(Fired::default()));
    timers.register_timer(timer(0, 1, 1)).unwrap();
    clock.set(2);
    wait_for("the timer mail queued", || processor.mailbox().len() == 1);

    timers.quiesce();
    assert!(timers.is_quiesced());
    assert_eq!(
        timers.register_timer(timer(0, 50, 2)).unwrap(),
        TimerHandle::NEVER
    );
    let mut idle = |_: &mut Fired, c: &mut Controller<'_>| -> Result<(), String> {
        c.all_actions_completed();
        Ok(())
    };
    processor.run_mailbox_loop(&mut idle).unwrap();
    assert!(
        processor.action_executor().state().0.is_empty(),
        "the queued timer mail ran as a no-op"
    );
    timers.shutdown();
    timers.shutdown(); // idempotent
    assert_eq!(
        timers.register_timer(timer(0, 60, 3)),
        Err(TimerError::ShutDown)
    );
}

#[test]
fn a_timer_that_fires_into_a_quiesced_mailbox_is_ignored() {
    // FLINK-23558: the mailbox quiesced right before the timer thread submits its mail.
    let clock = ManualClock::new(0);
    let builder = ProcessorBuilder::<Fired, String>::new(TaskMailbox::new());
    let handle = builder.handle();
    let timers = MailboxTimerService::new("late-timers", Clock::Manual(clock.clone()), &handle);
    let mut processor = builder.build(Immediate::new(Fired::default()));
    timers.register_timer(timer(0, 1, 1)).unwrap();
    processor.prepare_close().unwrap();
    assert_eq!(timers.pending(), 1);
    clock.set(10);
    // Once the timer left the queue its mail is submitted; the join below waits for that.
    wait_for("the timer fired", || timers.pending() == 0);
    // The mail was refused by the quiesced mailbox and ignored: nothing failed, nothing queued.
    timers.shutdown();
    processor.drain().unwrap();
    assert!(processor.action_executor().state().0.is_empty());
    assert_eq!(processor.close().unwrap(), 0);
}

#[test]
fn cancelled_timers_do_not_fire() {
    let clock = ManualClock::new(0);
    let builder = ProcessorBuilder::<Fired, String>::new(TaskMailbox::new());
    let timers = MailboxTimerService::new(
        "cancel-timers",
        Clock::Manual(clock.clone()),
        &builder.handle(),
    );
    let processor = builder.build(Immediate::new(Fired::default()));
    let cancelled = timers.register_timer(timer(0, 1, 1)).unwrap();
    timers.register_timer(timer(0, 2, 2)).unwrap();
    timers.cancel_timer(cancelled);
    assert_eq!(timers.current_processing_time(), 0);
    clock.set(5);
    wait_for("the kept timer queued", || processor.mailbox().len() == 1);
    let mut state = Fired::default();
    processor.main_executor().yield_now(&mut state).unwrap();
    assert_eq!(state.0, vec![timer(0, 2, 2)]);
    timers.shutdown();
}

#[test]
fn system_clock_timers_fire_on_the_task_thread() {
    let log = log();
    let (feeder, reader) = feed::<u64>(&log);
    let output = SharedOutput::new();
    let soon = Clock::System.now_millis() + 2;
    let task = SourceStreamTask::new(
        TaskConfig::new("wall"),
        reader,
        Probe::new("p", &log).with_timers(&[soon]),
        output.clone(),
    )
    .spawn();
    output.wait_until(|e| e.contains(&Emitted::Record(StreamRecord::new(1000))));
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    assert!(entries(&log).iter().any(|e| e.ends_with("on wall")));
}

#[test]
fn a_panicking_timer_callback_fails_the_task_with_its_message() {
    let log = log();
    let clock = ManualClock::new(0);
    let (_feeder, reader) = feed::<u64>(&log);
    let mut probe = Probe::new("p", &log).with_timers(&[1]);
    probe.panic_on_timer = true;
    let task = SourceStreamTask::new(
        TaskConfig::new("timer-panics").with_clock(Clock::Manual(clock.clone())),
        reader,
        probe,
        SharedOutput::new(),
    )
    .spawn();
    clock.set(5);
    match task.join() {
        TaskOutcome::Failed(failure) => {
            assert!(
                matches!(&failure.error, TaskError::Panic(m) if m == "timer callback exploded")
            );
            assert_eq!(failure.thread, "timer-panics");
        }
        other => panic!("unexpected {other}"),
    }
}
