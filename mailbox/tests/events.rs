//! Operator events: any thread sends through an `EventSender`; the event becomes a mail at the
//! operator's priority and runs on the task thread.

mod common;

use common::{Exposing, Feed, Probe, SharedOutput, entries, feed, log};
use streamtask_core::operator::{EventSender, Map, OperatorExt};
use streamtask_core::task::TaskConfig;
use streamtask_core::{task::TaskError, task::TaskOutcome};
use streamtask_mailbox::SourceStreamTask;

#[test]
fn smoke() {
    let log = log();
    let (feeder, reader) = feed::<u64>(&log);
    let (head, senders) = Exposing::new(&log);
    let output = SharedOutput::new();
    let task =
        SourceStreamTask::new(TaskConfig::new("events"), reader, head, output.clone()).spawn();
    let (sender, _) = senders.recv().unwrap();
    std::thread::spawn(move || {
        for v in [5u64, 6] {
            sender.send(v).unwrap();
        }
    })
    .join()
    .unwrap();
    output.wait_until(|e| e.len() == 2);
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    assert_eq!(output.values(), vec![5, 6]);
    assert_eq!(
        entries(&log),
        vec![
            "event 5 for operator 0 on events",
            "event 6 for operator 0 on events"
        ]
    );
}

#[test]
fn an_event_reaches_the_operator_at_its_index_and_flows_downstream() {
    let log = log();
    let (feeder, reader) = feed::<u64>(&log);
    let (exposing, senders) = Exposing::new(&log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("indexed"),
        reader,
        exposing.then(Probe::new("tail", &log)),
        output.clone(),
    )
    .spawn();
    let (to_head, sink) = senders.recv().unwrap();
    assert_eq!(to_head.operator(), 0);
    EventSender::new(sink, 1).send(9u64).unwrap();
    to_head.send(8u64).unwrap();
    output.wait_until(|e| e.len() == 2);
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    // The tail's event is emitted by the tail; the head's passes through the tail.
    assert_eq!(output.values(), vec![9, 8]);
    let entries = entries(&log);
    assert!(entries.contains(&"tail: event 9".to_string()));
    assert!(entries.contains(&"event 8 for operator 0 on indexed".to_string()));
}

#[test]
fn events_sent_after_the_task_ended_are_handed_back() {
    let log = log();
    let (feeder, reader) = feed::<u64>(&log);
    let (head, senders) = Exposing::new(&log);
    let task =
        SourceStreamTask::new(TaskConfig::new("over"), reader, head, SharedOutput::new()).spawn();
    let (sender, _) = senders.recv().unwrap();
    feeder.send(Feed::End);
    assert!(task.join().is_finished());
    let refused = sender.send(3u64).unwrap_err();
    assert_eq!(*refused.into_inner().downcast::<u64>().unwrap(), 3);
}

#[test]
fn a_panicking_event_callback_fails_the_task_with_its_message() {
    let log = log();
    let (_feeder, reader) = feed::<u64>(&log);
    let (head, senders) = Exposing::new(&log);
    let task = SourceStreamTask::new(
        TaskConfig::new("event-panics"),
        reader,
        head,
        SharedOutput::new(),
    )
    .spawn();
    senders.recv().unwrap().0.send(u64::MAX).unwrap();
    match task.join() {
        TaskOutcome::Failed(failure) => {
            assert!(matches!(&failure.error, TaskError::Panic(m) if m == "event callback exploded"))
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn an_event_for_an_operator_that_handles_none_fails_the_task() {
    let log = log();
    let (_feeder, reader) = feed::<u64>(&log);
    let (exposing, senders) = Exposing::new(&log);
    let task = SourceStreamTask::new(
        TaskConfig::new("unexpected"),
        reader,
        exposing.then(Map::new("plain", |x: u64| x)),
        SharedOutput::new(),
    )
    .spawn();
    let (_, sink) = senders.recv().unwrap();
    EventSender::new(sink, 1).send(1u64).unwrap();
    let outcome = task.join();
    let failure = outcome.failure().expect("failed");
    assert!(
        failure
            .to_string()
            .contains("received an event it does not handle"),
        "{failure}"
    );
}
