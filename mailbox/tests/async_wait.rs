//! The mailbox model's async operator, where it differs from the legacy one: checkpoints keep
//! flowing while its queue is full (soft backpressure), and it can sit in the middle of a chain,
//! holding what an upstream operator emits beyond its capacity. The behaviours both models
//! share are the root package's suite (`tests/async_io.rs`).

mod common;

use std::time::Duration;

use streamtask_core::async_io::{AsyncConfig, OutputMode};
use streamtask_core::operator::{FlatMap, Map, OperatorExt};
use streamtask_core::state::decode;
use streamtask_core::task::{TaskConfig, TaskReport};
use streamtask_core::testing::ManualAsyncFunction;
use streamtask_core::{
    CheckpointBarrier, StreamRecord, state::TaskSnapshot, time::Clock, time::ManualClock,
};
use streamtask_mailbox::SourceStreamTask;
use streamtask_runtime::AsyncWaitOperator;
use streamtask_runtime::QueuedInput;

use common::{CountingReader, SharedOutput, log, next_report, responder};

fn async_op(
    capacity: usize,
    function: ManualAsyncFunction<u64, u64>,
) -> AsyncWaitOperator<ManualAsyncFunction<u64, u64>> {
    AsyncWaitOperator::new(
        "async",
        function,
        AsyncConfig::new(OutputMode::Ordered, capacity),
    )
    .unwrap()
}

#[test]
fn smoke() {
    let function = ManualAsyncFunction::new();
    let calls = function.calls();
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("async"),
        CountingReader::new(3, &log()),
        async_op(2, function),
        output.clone(),
    )
    .spawn();
    for x in 0..3 {
        calls.wait_for_invocations(x + 1);
        assert!(calls.complete(&(x as u64), vec![x as u64 * 10]));
    }
    assert!(task.join().is_finished());
    assert_eq!(output.values(), vec![0, 10, 20]);
}

#[test]
fn checkpoints_complete_while_the_queue_is_full() {
    // Flink yields on a full queue and runs no checkpoint meanwhile (FLINK-39835); here the task
    // stops reading and the trigger mail runs.
    let function = ManualAsyncFunction::new();
    let calls = function.calls();
    let (responder, reports) = responder("async");
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("async").with_responder(responder),
        CountingReader::new(10, &log()),
        async_op(2, function),
        output.clone(),
    )
    .spawn();
    // Two records fill the queue; the reader is not polled again until a slot frees.
    calls.wait_for_invocations(2);
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    let TaskReport::Acknowledged { snapshot, .. } = next_report(&reports) else {
        panic!("the checkpoint was declined");
    };
    let position: u64 = snapshot.get_value(TaskSnapshot::SOURCE).unwrap().unwrap();
    let in_flight: Vec<QueuedInput<u64>> =
        decode::<streamtask_core::keygroup::ListState<QueuedInput<u64>>>(
            snapshot.get(&TaskSnapshot::operator_key(0)).unwrap(),
        )
        .unwrap()
        .items;
    // The reader stops at the full queue: after two records, or after a third that the
    // operator holds for room (the trigger mail may run between those two steps).
    assert!((2..=3).contains(&position), "position {position}");
    assert_eq!(
        in_flight,
        (0..position)
            .map(|x| QueuedInput::Record(StreamRecord::new(x)))
            .collect::<Vec<_>>(),
        "exactly what the reader emitted and the operator did not yet emit"
    );
    assert_eq!(calls.invocation_count(), 2);
    for x in 0..10u64 {
        calls.wait_for_invocations(x as usize + 1);
        assert!(calls.complete(&x, vec![x]));
    }
    assert!(task.join().is_finished());
    assert_eq!(output.values(), (0..10).collect::<Vec<u64>>());
}

#[test]
fn an_async_operator_in_the_middle_of_a_chain_holds_what_a_flat_map_emits_beyond_its_capacity() {
    // Three results per record into a queue of two: the third is held (part of snapshots),
    // admitted when a completion mail frees a slot. Timers and completions reach the operator at
    // its chain index (1) and its results go on through the map behind it.
    let clock = ManualClock::new(0);
    let function = ManualAsyncFunction::new().with_timeout_fallback(|x: &u64| vec![x + 5000]);
    let calls = function.calls();
    let operator = AsyncWaitOperator::new(
        "async",
        function,
        AsyncConfig::new(OutputMode::Ordered, 2).with_timeout(Duration::from_millis(10)),
    )
    .unwrap();
    let chain = FlatMap::new("fan-out", |x: u64, out: &mut Vec<u64>| {
        out.extend([x, x + 100, x + 200]);
    })
    .then(operator)
    .then(Map::new("scale", |x: u64| x * 10));
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("chain").with_clock(Clock::Manual(clock.clone())),
        CountingReader::new(2, &log()),
        chain,
        output.clone(),
    )
    .spawn();
    let inputs = |n: usize| -> Vec<u64> {
        calls
            .wait_for_invocations(n)
            .into_iter()
            .map(|c| c.input)
            .collect()
    };
    assert_eq!(inputs(2), vec![0, 100]);
    assert!(calls.complete(&0, vec![0]));
    assert_eq!(
        inputs(3),
        vec![0, 100, 200],
        "the held third result was admitted"
    );
    assert!(calls.complete(&100, vec![100]));
    assert!(calls.complete(&200, vec![200]));
    assert_eq!(inputs(5), vec![0, 100, 200, 1, 101]);
    assert!(calls.complete(&1, vec![1]));
    assert_eq!(inputs(6), vec![0, 100, 200, 1, 101, 201]);
    assert!(calls.complete(&101, vec![101]));
    // Record 201 times out: the timer mail reaches the operator at index 1.
    clock.advance(11);
    assert!(task.join().is_finished());
    assert_eq!(
        output.values(),
        vec![0, 1000, 2000, 10, 1010, 52010],
        "in input order, through the map"
    );
    assert_eq!(calls.timeouts().len(), 1);
}

/// Answers every call inside `invoke`, on the task thread (a cache hit).
struct Answering;

impl streamtask_core::function::AsyncFunction for Answering {
    type In = u64;
    type Out = u64;
    fn invoke(&mut self, input: &u64, result: streamtask_core::function::ResultFuture<u64>) {
        result.complete(vec![input * 10]);
    }
}

/// Runs 20 records through an async operator of capacity 2 over `Answering`; the values
/// emitted and the mails the task ran.
fn answered_at_once(inline: bool, mode: OutputMode) -> (Vec<u64>, u64) {
    use streamtask_core::StreamElement;
    use streamtask_core::operator::Emitted;
    use streamtask_mailbox::OneInputStreamTask;
    use streamtask_runtime::channel::{InputGate, bounded};

    let op = AsyncWaitOperator::new("async", Answering, AsyncConfig::new(mode, 2))
        .unwrap()
        .with_inline_completions(inline);
    let (tx, rx) = bounded(32).unwrap();
    for x in 1..=20 {
        tx.send(StreamElement::Record(StreamRecord::new(x)))
            .unwrap();
    }
    tx.send(StreamElement::EndOfInput).unwrap();
    let config = TaskConfig::new("answering");
    let metrics = std::sync::Arc::clone(&config.metrics);
    let output = SharedOutput::new();
    let task = OneInputStreamTask::new(
        config,
        InputGate::new(vec![rx]).unwrap(),
        op,
        output.clone(),
    )
    .spawn();
    assert!(task.join().is_finished());
    let values = output
        .emitted()
        .into_iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r.value),
            _ => None,
        })
        .collect();
    (values, metrics.mails.get())
}

#[test]
fn completions_made_during_the_call_are_applied_inline_without_a_mail() {
    let expected: Vec<u64> = (1..=20).map(|x| x * 10).collect();
    for mode in [OutputMode::Ordered, OutputMode::Unordered] {
        let (values, mails) = answered_at_once(true, mode);
        assert_eq!(values, expected, "{mode:?}");
        assert_eq!(mails, 0, "{mode:?}: no completion travelled as a mail");
        // Off, every completion takes the model's route: a mail per burst, at least one.
        let (values, mails) = answered_at_once(false, mode);
        assert_eq!(values, expected, "{mode:?}");
        assert!(mails >= 1, "{mode:?}: the completions came back as mails");
    }
}

#[test]
fn completions_arriving_while_the_task_waits_for_input_are_published() {
    // A completion mail publishes what it emitted at once only while the default action is
    // suspended (between input steps the steps' own publication takes it along): here the
    // task waits for input, so the counts must move with each completion, before the end.
    use streamtask_core::StreamElement;
    use streamtask_mailbox::OneInputStreamTask;
    use streamtask_runtime::channel::{InputGate, bounded};

    let function = ManualAsyncFunction::new();
    let calls = function.calls();
    let (tx, rx) = bounded(8).unwrap();
    let config = TaskConfig::new("published");
    let metrics = std::sync::Arc::clone(&config.metrics);
    let output = SharedOutput::new();
    let task = OneInputStreamTask::new(
        config,
        InputGate::new(vec![rx]).unwrap(),
        async_op(4, function),
        output.clone(),
    )
    .spawn();
    for x in 0..3 {
        tx.send(StreamElement::Record(StreamRecord::new(x)))
            .unwrap();
    }
    calls.wait_for_invocations(3);
    for x in 0..3 {
        assert!(calls.complete(&x, vec![x * 10]));
        common::wait_for("the completion's record counted out", || {
            metrics.records_out.get() == x + 1
        });
    }
    assert_eq!(metrics.records_in.get(), 3);
    tx.send(StreamElement::EndOfInput).unwrap();
    assert!(task.join().is_finished());
    assert_eq!(output.values(), vec![0, 10, 20]);
    assert_eq!(metrics.records_out.get(), 3);
}
