//! Source tasks: a new-style reader on the mailbox thread; checkpoints between reader steps;
//! suspension on `NothingAvailable`; end of input; cancellation; the failure rules.

mod common;

use std::sync::Arc;

use common::{
    CountingReader, Feed, GUARD, Probe, SharedOutput, entries, feed, log, next_report, responder,
};
use streamtask_core::operator::{Emitted, Map, OperatorExt};
use streamtask_core::task::{DeclineReason, TaskConfig, TaskReport};
use streamtask_core::{
    CheckpointBarrier, StreamRecord, StreamStatus, Watermark, state::TaskSnapshot, task::TaskError,
    task::TaskOutcome,
};
use streamtask_mailbox::SourceStreamTask;

fn checkpoint(id: u64) -> CheckpointBarrier {
    CheckpointBarrier::new(id, 0)
}

#[test]
fn smoke() {
    let log = log();
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("smoke"),
        CountingReader::new(5, &log),
        Map::new("double", |x: u64| x * 2),
        output.clone(),
    )
    .spawn();
    assert_eq!(task.name(), "smoke");
    let metrics = Arc::clone(task.metrics());
    assert!(task.join().is_finished());
    assert_eq!(output.values(), vec![0, 2, 4, 6, 8]);
    let emitted = output.emitted();
    assert_eq!(
        &emitted[5..],
        &[Emitted::Watermark(Watermark::MAX), Emitted::EndOfInput],
        "a finished source advances to the end of event time, then ends its output"
    );
    assert_eq!(metrics.records_in.get(), 5);
    assert_eq!(metrics.records_out.get(), 5);
    assert_eq!(metrics.threads.get(), 1, "no timers, no timer thread");
    assert!(entries(&log).contains(&"reader close".to_string()));
}

#[test]
fn the_chain_opens_runs_and_closes_on_the_task_thread_in_lifecycle_order() {
    let log = log();
    let task = SourceStreamTask::new(
        TaskConfig::new("lifecycle"),
        CountingReader::new(2, &log),
        Probe::new("a", &log).then(Probe::new("b", &log)),
        SharedOutput::new(),
    )
    .spawn();
    assert!(task.join().is_finished());
    assert_eq!(
        entries(&log),
        vec![
            "a: init seen=0",
            "b: init seen=0",
            "b: open on lifecycle",
            "a: open on lifecycle",
            "a: end_input",
            "b: end_input",
            "a: finish",
            "b: finish",
            "a: close",
            "b: close",
            "reader close",
        ]
    );
}

#[test]
fn a_checkpoint_runs_between_two_reader_steps_and_is_consistent() {
    let log = log();
    let (responder, reports) = responder("cp");
    let (feeder, reader) = feed::<u64>(&log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("cp").with_responder(responder),
        reader,
        Probe::new("probe", &log),
        output.clone(),
    )
    .spawn();
    for v in 0..3 {
        feeder.send(Feed::Record(v));
    }
    output.wait_until(|e| e.len() == 3);
    task.trigger_checkpoint(checkpoint(1)).unwrap();
    match next_report(&reports) {
        TaskReport::Acknowledged {
            checkpoint,
            snapshot,
            task,
        } => {
            assert_eq!((checkpoint, task.as_str()), (1, "cp"));
            assert!(snapshot.get(TaskSnapshot::SOURCE).is_some());
            assert_eq!(
                snapshot
                    .get_value::<u64>(&TaskSnapshot::operator_key(0))
                    .unwrap(),
                Some(3),
                "the operator saw exactly the records emitted before the barrier"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    feeder.send(Feed::Record(3));
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    let emitted = output.emitted();
    assert_eq!(
        emitted[3],
        Emitted::Barrier(checkpoint(1)),
        "barrier after 3 records"
    );
    let reader_snapshots = entries(&log)
        .iter()
        .filter(|e| e.starts_with("feed snapshot"))
        .count();
    assert_eq!(reader_snapshots, 1);
}

#[test]
fn checkpoint_metrics_are_recorded() {
    let log = log();
    let (responder, reports) = responder("m");
    let (feeder, reader) = feed::<u64>(&log);
    let task = SourceStreamTask::new(
        TaskConfig::new("m").with_responder(responder),
        reader,
        Probe::new("p", &log),
        SharedOutput::new(),
    )
    .spawn();
    for id in 1..=3 {
        task.trigger_checkpoint(checkpoint(id)).unwrap();
        assert!(matches!(
            next_report(&reports),
            TaskReport::Acknowledged { .. }
        ));
    }
    feeder.send(Feed::End);
    let metrics = Arc::clone(task.metrics());
    assert!(task.join().is_finished());
    assert_eq!(metrics.checkpoints.get(), 3);
    assert_eq!(metrics.checkpoint_delay.count(), 3);
    assert_eq!(metrics.checkpoint_duration.count(), 3);
    assert!(metrics.mails.get() >= 3);
}

#[test]
fn a_restored_task_resumes_from_the_snapshot() {
    let log1 = log();
    let (responder1, reports) = responder("r");
    let (feeder, reader) = feed::<u64>(&log1);
    let first_output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("r").with_responder(responder1),
        reader,
        Probe::new("p", &log1),
        first_output.clone(),
    )
    .spawn();
    feeder.send(Feed::Record(1));
    feeder.send(Feed::Record(2));
    first_output.wait_until(|e| e.len() == 2);
    task.trigger_checkpoint(checkpoint(7)).unwrap();
    let snapshot = match next_report(&reports) {
        TaskReport::Acknowledged { snapshot, .. } => snapshot,
        other => panic!("unexpected {other:?}"),
    };
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));

    // The counting reader restores its position from the SOURCE entry; the probe its count.
    let mut counted = TaskSnapshot::new();
    counted.put_value(TaskSnapshot::SOURCE, &3u64).unwrap();
    counted.put(
        TaskSnapshot::operator_key(0),
        snapshot
            .get(&TaskSnapshot::operator_key(0))
            .unwrap()
            .to_vec(),
    );
    let log2 = log();
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("r").with_restore(Some(counted)),
        CountingReader::new(5, &log2),
        Probe::new("p", &log2),
        output.clone(),
    )
    .spawn();
    assert!(task.join().is_finished());
    assert_eq!(output.values(), vec![3, 4]);
    assert!(entries(&log2).contains(&"p: init seen=2".to_string()));
}

#[test]
fn nothing_available_suspends_until_the_reader_wakes_the_task() {
    let log = log();
    let (feeder, reader) = feed::<u64>(&log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("idle"),
        reader,
        Map::new("id", |x: u64| x),
        output.clone(),
    )
    .spawn();
    feeder.wait_until_idle();
    assert!(output.emitted().is_empty());
    feeder.send(Feed::Record(1));
    output.wait_until(|e| e.len() == 1);
    feeder.wait_until_idle();
    feeder.send(Feed::Record(2));
    feeder.send(Feed::End);
    let metrics = Arc::clone(task.metrics());
    assert!(task.join().is_finished());
    assert_eq!(output.values(), vec![1, 2]);
    // Each suspension costs a resume mail, not a busy loop.
    assert!(metrics.mails.get() >= 2);
}

#[test]
fn timestamps_watermarks_and_idleness_reach_the_output() {
    let log = log();
    let (feeder, reader) = feed::<u64>(&log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("time"),
        reader,
        Map::new("id", |x: u64| x),
        output.clone(),
    )
    .spawn();
    feeder.send(Feed::Timestamped(1, 100));
    feeder.send(Feed::Watermark(100));
    feeder.send(Feed::Idle);
    feeder.send(Feed::Idle);
    feeder.send(Feed::Record(2));
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    assert_eq!(
        output.emitted(),
        vec![
            Emitted::Record(StreamRecord::with_timestamp(1, 100)),
            Emitted::Watermark(Watermark(100)),
            Emitted::Status(StreamStatus::Idle),
            Emitted::Status(StreamStatus::Active),
            Emitted::Record(StreamRecord::new(2)),
            Emitted::Watermark(Watermark::MAX),
            Emitted::EndOfInput,
        ]
    );
}

#[test]
fn a_trigger_after_the_task_finished_is_declined_as_not_running() {
    let log = log();
    let (responder, reports) = responder("done");
    let (feeder, reader) = feed::<u64>(&log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("done").with_responder(responder),
        reader,
        Map::new("id", |x: u64| x),
        output.clone(),
    )
    .spawn();
    feeder.send(Feed::End);
    output.wait_until(|e| e.contains(&Emitted::EndOfInput));
    // The task may still be draining or already closed: either way it declines.
    task.trigger_checkpoint(checkpoint(9)).unwrap();
    match next_report(&reports) {
        TaskReport::Declined {
            checkpoint, reason, ..
        } => assert_eq!((checkpoint, reason), (9, DeclineReason::NotRunning)),
        other => panic!("unexpected {other:?}"),
    }
    assert!(task.join().is_finished());
}

#[test]
fn a_trigger_that_never_runs_is_declined_as_not_running() {
    let log = log();
    let (responder, reports) = responder("fails-first");
    let (_feeder, reader) = feed::<u64>(&log);
    let (head, senders) = common::Exposing::new(&log);
    let task = SourceStreamTask::new(
        TaskConfig::new("fails-first").with_responder(responder),
        reader,
        head,
        SharedOutput::new(),
    )
    .spawn();
    let (sender, _) = senders.recv().unwrap();
    // The event fails the task; the trigger behind it never runs, whichever way it is dropped.
    sender.send(u64::MAX).unwrap();
    task.trigger_checkpoint(checkpoint(4)).unwrap();
    match next_report(&reports) {
        TaskReport::Declined {
            checkpoint, reason, ..
        } => assert_eq!((checkpoint, reason), (4, DeclineReason::NotRunning)),
        other => panic!("unexpected {other:?}"),
    }
    assert!(task.join().failure().is_some());
}

#[test]
fn checkpoint_notices_reach_the_chain_and_the_reader() {
    let log = log();
    let (responder, reports) = responder("n");
    let (feeder, reader) = feed::<u64>(&log);
    let task = SourceStreamTask::new(
        TaskConfig::new("n").with_responder(responder),
        reader,
        Probe::new("p", &log),
        SharedOutput::new(),
    )
    .spawn();
    task.trigger_checkpoint(checkpoint(1)).unwrap();
    next_report(&reports);
    task.notify_checkpoint_complete(1);
    task.notify_checkpoint_aborted(2);
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    let entries = entries(&log);
    assert!(entries.contains(&"p: complete 1".to_string()));
    assert!(entries.contains(&"p: aborted 2".to_string()));
    // Notices after the end are ignored, not errors.
    let task = SourceStreamTask::new(
        TaskConfig::new("late"),
        CountingReader::new(0, &log),
        Probe::new("q", &log),
        SharedOutput::new(),
    )
    .spawn();
    while !task.is_done() {
        std::thread::yield_now();
    }
    task.notify_checkpoint_complete(5);
    assert!(task.join().is_finished());
}

#[test]
fn complete_notices_for_the_reader_arrive_after_its_checkpoint() {
    let log = log();
    let (responder, reports) = responder("c");
    let task = SourceStreamTask::new(
        TaskConfig::new("c").with_responder(responder),
        CountingReader::new(u64::MAX, &log),
        Map::new("id", |x: u64| x),
        streamtask_core::operator::Discard,
    )
    .spawn();
    task.trigger_checkpoint(checkpoint(1)).unwrap();
    next_report(&reports);
    task.notify_checkpoint_complete(1);
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
    let entries = entries(&log);
    let snapshot = entries
        .iter()
        .position(|e| e.starts_with("reader snapshot 1"));
    let complete = entries.iter().position(|e| e == "reader complete 1");
    assert!(snapshot.is_some());
    // The notice may have been dropped by the cancel; if it ran, it ran after the snapshot.
    if let Some(complete) = complete {
        assert!(snapshot.unwrap() < complete);
    }
}

#[test]
fn cancel_stops_an_idle_task_and_joins_everything() {
    let log = log();
    let (_feeder, reader) = feed::<u64>(&log);
    let task = SourceStreamTask::new(
        TaskConfig::new("cancel-idle"),
        reader,
        Probe::new("p", &log).with_timers(&[i64::MAX - 1]),
        SharedOutput::new(),
    )
    .spawn();
    task.cancel();
    task.cancel(); // idempotent
    let metrics = Arc::clone(task.metrics());
    let outcome = task.join();
    assert!(matches!(outcome, TaskOutcome::Cancelled), "{outcome}");
    assert_eq!(
        metrics.threads.get(),
        2,
        "the timer thread ran and was joined"
    );
    let entries = entries(&log);
    assert!(entries.contains(&"p: close".to_string()));
    assert!(
        !entries.contains(&"p: finish".to_string()),
        "a cancelled chain is not finished"
    );
}

#[test]
fn cancel_stops_a_busy_task() {
    let log = log();
    let task = SourceStreamTask::new(
        TaskConfig::new("cancel-busy"),
        CountingReader::new(u64::MAX, &log),
        Map::new("id", |x: u64| x),
        streamtask_core::operator::Discard,
    )
    .spawn();
    // Let it run until it published some records; the outcome does not depend on how long.
    let deadline = std::time::Instant::now() + GUARD;
    while task.metrics().records_in.get() == 0 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
}

#[test]
fn dropping_a_handle_cancels_the_task_and_waits_for_it() {
    let log = log();
    let (_feeder, reader) = feed::<u64>(&log);
    let task = SourceStreamTask::new(
        TaskConfig::new("dropped"),
        reader,
        Probe::new("p", &log),
        SharedOutput::new(),
    )
    .spawn();
    drop(task);
    // The drop returned only after the task thread closed the chain and ended.
    assert!(entries(&log).contains(&"p: close".to_string()));
}

#[test]
fn cancel_after_finish_keeps_the_task_finished() {
    let log = log();
    let task = SourceStreamTask::new(
        TaskConfig::new("finished"),
        CountingReader::new(3, &log),
        Map::new("id", |x: u64| x),
        SharedOutput::new(),
    )
    .spawn();
    let deadline = std::time::Instant::now() + GUARD;
    while !task.is_done() {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    task.cancel();
    assert!(task.join().is_finished());
}

#[test]
fn a_panicking_reader_fails_the_task_with_the_panic_message() {
    let log = log();
    let (feeder, reader) = feed::<u64>(&log);
    let task = SourceStreamTask::new(
        TaskConfig::new("panics"),
        reader,
        Probe::new("p", &log),
        SharedOutput::new(),
    )
    .spawn();
    feeder.send(Feed::Panic("reader exploded"));
    match task.join() {
        TaskOutcome::Failed(failure) => {
            assert_eq!(failure.thread, "panics");
            assert!(matches!(&failure.error, TaskError::Panic(m) if m == "reader exploded"));
        }
        other => panic!("unexpected {other}"),
    }
    assert!(
        entries(&log).contains(&"p: close".to_string()),
        "closed after the panic"
    );
}

#[test]
fn a_failing_reader_fails_the_task_with_its_error() {
    let log = log();
    let (feeder, reader) = feed::<u64>(&log);
    let task = SourceStreamTask::new(
        TaskConfig::new("fails"),
        reader,
        Map::new("id", |x: u64| x),
        SharedOutput::new(),
    )
    .spawn();
    feeder.send(Feed::Fail("connection reset"));
    let outcome = task.join();
    let failure = outcome.failure().expect("failed");
    assert!(
        failure.to_string().contains("connection reset"),
        "{failure}"
    );
}

#[test]
fn an_operator_error_fails_the_task() {
    let log = log();
    let task = SourceStreamTask::new(
        TaskConfig::new("op-fails"),
        CountingReader::new(10, &log),
        streamtask_core::operator::FlatMap::new("boom", |x: u64, out: &mut Vec<u64>| {
            if x == 3 {
                panic!("operator exploded at {x}");
            }
            out.push(x);
        }),
        SharedOutput::new(),
    )
    .spawn();
    match task.join() {
        TaskOutcome::Failed(failure) => {
            assert!(matches!(&failure.error, TaskError::Panic(m) if m == "operator exploded at 3"))
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn spans_show_records_mails_timers_and_checkpoints_on_the_task_thread() {
    use streamtask_core::trace::{TraceLog, Tracer};
    use streamtask_core::{time::Clock, time::ManualClock};
    use streamtask_mailbox::SourceReader;

    let log = log();
    let trace = TraceLog::new();
    let clock = ManualClock::new(0);
    let (responder, reports) = responder("traced");
    let (feeder, reader) = feed::<u64>(&log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("traced")
            .with_tracer(Tracer::to(&trace))
            .with_clock(Clock::Manual(clock.clone()))
            .with_responder(responder),
        // Readers are object safe: a boxed one is a reader too.
        Box::new(reader) as Box<dyn SourceReader<u64>>,
        Probe::new("p", &log).with_timers(&[5]),
        output.clone(),
    )
    .spawn();
    feeder.send(Feed::Record(1));
    feeder.send(Feed::Record(2));
    output.wait_until(|e| e.len() == 2);
    task.trigger_checkpoint(checkpoint(1)).unwrap();
    assert!(matches!(
        next_report(&reports),
        TaskReport::Acknowledged { .. }
    ));
    clock.set(10);
    output.wait_until(|e| e.len() == 4);
    feeder.send(Feed::End);
    assert!(task.join().is_finished());

    let spans = trace.events();
    for cat in ["record", "mail", "checkpoint", "timer"] {
        assert!(
            spans.iter().any(|s| s.cat == cat),
            "no {cat} span in {spans:?}"
        );
    }
    assert!(
        spans
            .iter()
            .any(|s| s.cat == "checkpoint" && s.name == "checkpoint 1")
    );
    assert!(trace.threads().iter().any(|(_, name)| name == "traced"));
}
