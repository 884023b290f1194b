//! Soft backpressure: an operator that accepts no input (a full async queue) or an output with
//! no room suspends the default action; a completion mail or the output's waker resumes it; and
//! checkpoints keep flowing meanwhile (what Flink needed FLINK-39835 for).

mod common;

use std::thread;

use common::{
    AsyncLike, CountingReader, Request, SharedOutput, entries, log, next_report, responder,
    wait_for,
};
use streamtask_core::operator::Emitted;
use streamtask_core::task::{TaskConfig, TaskReport};
use streamtask_core::{CheckpointBarrier, state::TaskSnapshot};
use streamtask_mailbox::SourceStreamTask;

/// Completes every request as it comes, from its own thread (an async client).
fn complete_everything(requests: crossbeam::channel::Receiver<Request>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for request in requests {
            request.complete();
        }
    })
}

#[test]
fn smoke() {
    let log = log();
    let (operator, requests) = AsyncLike::new(2, &log);
    let client = complete_everything(requests);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("async"),
        CountingReader::new(20, &log),
        operator,
        output.clone(),
    )
    .spawn();
    assert!(task.join().is_finished());
    client.join().unwrap();
    let mut values = output.values();
    values.sort_unstable();
    assert_eq!(values, (0..20).map(|v| v * 10).collect::<Vec<_>>());
}

#[test]
fn an_operator_that_accepts_no_input_gets_none_until_its_completion_mail() {
    // AsyncLike asserts it is never fed while full, so a violation fails the task.
    let log = log();
    let (operator, requests) = AsyncLike::new(2, &log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("one-at-a-time"),
        CountingReader::new(6, &log),
        operator,
        output.clone(),
    )
    .spawn();
    for expected in 0..6u64 {
        let request = requests.recv_timeout(common::GUARD).unwrap();
        assert_eq!(request.value, expected);
        request.complete();
    }
    assert!(task.join().is_finished());
    assert_eq!(output.values().len(), 6);
}

#[test]
fn checkpoints_keep_flowing_while_the_chain_accepts_no_input() {
    let log = log();
    let (responder, reports) = responder("blocked");
    let (operator, requests) = AsyncLike::new(2, &log);
    let task = SourceStreamTask::new(
        TaskConfig::new("blocked").with_responder(responder),
        CountingReader::new(5, &log),
        operator,
        SharedOutput::new(),
    )
    .spawn();
    // Two requests in flight, none completed: the operator is full, the reader stopped.
    let held: Vec<Request> = (0..2)
        .map(|_| requests.recv_timeout(common::GUARD).unwrap())
        .collect();
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    match next_report(&reports) {
        TaskReport::Acknowledged { snapshot, .. } => {
            assert_eq!(
                snapshot.get_value::<u64>(TaskSnapshot::SOURCE).unwrap(),
                Some(2),
                "the reader stopped after two records"
            );
            assert_eq!(
                snapshot
                    .get_value::<Vec<u64>>(&TaskSnapshot::operator_key(0))
                    .unwrap(),
                Some(vec![0, 1]),
                "both requests are in flight in the snapshot"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    for request in held {
        request.complete();
    }
    let client = complete_everything(requests);
    assert!(task.join().is_finished());
    client.join().unwrap();
}

#[test]
fn end_of_input_waits_for_in_flight_work_before_finish() {
    let log = log();
    let (operator, requests) = AsyncLike::new(10, &log);
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("drain"),
        CountingReader::new(3, &log),
        operator,
        output.clone(),
    )
    .spawn();
    wait_for("end_input with work in flight", || {
        entries(&log).contains(&"async end_input with 3 in flight".to_string())
    });
    assert!(!output.emitted().contains(&Emitted::EndOfInput));
    let client = complete_everything(requests);
    assert!(task.join().is_finished());
    client.join().unwrap();
    assert!(entries(&log).contains(&"async finish with 0 in flight".to_string()));
    let emitted = output.emitted();
    assert_eq!(emitted.last(), Some(&Emitted::EndOfInput));
    assert_eq!(
        output.values().len(),
        3,
        "every completion came before the end"
    );
}

#[test]
fn an_output_without_room_suspends_the_task_until_its_waker_fires() {
    let log = log();
    let output = SharedOutput::new();
    output.set_available(false);
    let task = SourceStreamTask::new(
        TaskConfig::new("full-output"),
        CountingReader::new(3, &log),
        streamtask_core::operator::Map::new("id", |x: u64| x),
        output.clone(),
    )
    .spawn();
    output.wait_for_waker();
    assert!(
        output.emitted().is_empty(),
        "no input is pulled while the output is full"
    );
    output.set_available(true);
    assert!(task.join().is_finished());
    assert_eq!(output.values(), vec![0, 1, 2]);
}

#[test]
fn cancel_reaches_a_backpressured_task() {
    let log = log();
    let (operator, requests) = AsyncLike::new(1, &log);
    let task = SourceStreamTask::new(
        TaskConfig::new("stuck"),
        CountingReader::new(100, &log),
        operator,
        SharedOutput::new(),
    )
    .spawn();
    let _held = requests.recv_timeout(common::GUARD).unwrap();
    task.cancel();
    assert!(matches!(
        task.join(),
        streamtask_core::task::TaskOutcome::Cancelled
    ));
}
