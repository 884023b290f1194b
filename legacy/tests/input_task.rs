//! `OneInputStreamTask` and `TwoInputStreamTask`: records under the lock, barrier alignment
//! with consistent snapshots, end of input, operator events, the async head.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{HANG_GUARD, SharedOutput, responder, values, wait_running};
use streamtask_core::operator::{
    Context, Emitted, Map, Operator, OperatorEvent, TwoInputChain, TwoInputOperator,
};
use streamtask_core::state::{decode, encode};
use streamtask_core::task::{DeclineReason, TaskConfig, TaskOutcome, TaskReport, TriggerError};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamElement, StreamRecord, Watermark, state::TaskSnapshot,
};
use streamtask_legacy::{OneInputStreamTask, TwoInputStreamTask};
use streamtask_runtime::channel::{InputGate, Sender, TwoInputGate, bounded};

fn record<T>(value: T) -> StreamElement<T> {
    StreamElement::Record(StreamRecord::new(value))
}

fn barrier<T>(id: u64) -> StreamElement<T> {
    StreamElement::Barrier(CheckpointBarrier::new(id, 0))
}

/// Counts records (checkpointed) and passes them on.
#[derive(Default)]
struct Counting {
    count: u64,
}

impl Operator for Counting {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "counting"
    }
    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = restored {
            self.count = decode(bytes).map_err(|e| OperatorError::state("counting", e))?;
        }
        Ok(())
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.count += 1;
        ctx.collect(record)
    }
    fn snapshot_state(&mut self, _id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        Ok(Some(
            encode(&self.count).map_err(|e| OperatorError::state("counting", e))?,
        ))
    }
}

fn wait_for(output: &SharedOutput<u64>, len: usize) {
    let deadline = Instant::now() + HANG_GUARD;
    while output.len() < len {
        assert!(Instant::now() < deadline, "hang guard");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn smoke() {
    let (tx, rx) = bounded(16).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let output = SharedOutput::new();
    let task = OneInputStreamTask::new(
        TaskConfig::new("map"),
        gate,
        Map::new("inc", |x: u64| x + 1),
        output.clone(),
    )
    .spawn();
    tx.send(record(1)).unwrap();
    tx.send(StreamElement::Watermark(Watermark(5))).unwrap();
    tx.send(record(2)).unwrap();
    tx.send(StreamElement::EndOfInput).unwrap();
    let metrics = Arc::clone(task.metrics());
    assert!(task.join().is_finished());
    assert_eq!(
        output.take(),
        vec![
            Emitted::Record(StreamRecord::new(2)),
            Emitted::Watermark(Watermark(5)),
            Emitted::Record(StreamRecord::new(3)),
            // The gate's watermark valve ends event time when every channel ended.
            Emitted::Watermark(Watermark::MAX),
            Emitted::EndOfInput,
        ]
    );
    assert_eq!(
        (metrics.records_in.get(), metrics.records_out.get()),
        (2, 2)
    );
}

#[test]
fn input_tasks_are_not_triggered_from_outside() {
    let (_tx, rx) = bounded::<StreamElement<u64>>(4).unwrap();
    let task = OneInputStreamTask::new(
        TaskConfig::new("in"),
        InputGate::new(vec![rx]).unwrap(),
        Counting::default(),
        SharedOutput::new(),
    )
    .spawn();
    assert_eq!(
        task.trigger_checkpoint(CheckpointBarrier::new(1, 0)),
        Err(TriggerError::NotASource)
    );
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
}

#[test]
fn an_aligned_barrier_snapshots_exactly_the_records_before_it_on_every_channel() {
    let (tx0, rx0) = bounded(64).unwrap();
    let (tx1, rx1) = bounded(64).unwrap();
    let gate = InputGate::new(vec![rx0, rx1]).unwrap();
    let (responder, reports) = responder("align");
    let output = SharedOutput::new();
    let task = OneInputStreamTask::new(
        TaskConfig::new("align").with_responder(responder),
        gate,
        Counting::default(),
        output.clone(),
    )
    .spawn();
    // Channel 0: 3 before, barrier, 2 after; channel 1: 4 before, barrier, 1 after.
    for v in 0..3 {
        tx0.send(record(v)).unwrap();
    }
    tx0.send(barrier(1)).unwrap();
    for v in 100..102 {
        tx0.send(record(v)).unwrap(); // held back until channel 1's barrier
    }
    for v in 10..14 {
        tx1.send(record(v)).unwrap();
    }
    tx1.send(barrier(1)).unwrap();
    tx1.send(record(200)).unwrap();
    tx0.send(StreamElement::EndOfInput).unwrap();
    tx1.send(StreamElement::EndOfInput).unwrap();
    assert!(task.join().is_finished());
    match reports.recv_timeout(HANG_GUARD).unwrap() {
        TaskReport::Acknowledged { snapshot, .. } => {
            let count: u64 = snapshot
                .get_value(&TaskSnapshot::operator_key(0))
                .unwrap()
                .unwrap();
            assert_eq!(count, 7);
        }
        other => panic!("unexpected report {other:?}"),
    }
    let emitted = output.take();
    let at = emitted
        .iter()
        .position(|e| matches!(e, Emitted::Barrier(_)))
        .unwrap();
    let mut before = values(&emitted[..at]);
    before.sort_unstable();
    assert_eq!(before, vec![0, 1, 2, 10, 11, 12, 13]);
    let mut after = values(&emitted[at..]);
    after.sort_unstable();
    assert_eq!(after, vec![100, 101, 200]);
}

#[test]
fn a_superseded_checkpoint_is_declined_and_the_newer_one_acknowledged() {
    let (tx0, rx0) = bounded(16).unwrap();
    let (tx1, rx1) = bounded(16).unwrap();
    let (responder, reports) = responder("sup");
    let task = OneInputStreamTask::new(
        TaskConfig::new("sup").with_responder(responder),
        InputGate::new(vec![rx0, rx1]).unwrap(),
        Counting::default(),
        SharedOutput::new(),
    )
    .spawn();
    tx0.send(barrier(1)).unwrap();
    tx1.send(barrier(2)).unwrap();
    tx0.send(barrier(2)).unwrap();
    let first = reports.recv_timeout(HANG_GUARD).unwrap();
    assert!(matches!(
        first,
        TaskReport::Declined {
            checkpoint: 1,
            reason: DeclineReason::Superseded,
            ..
        }
    ));
    let second = reports.recv_timeout(HANG_GUARD).unwrap();
    assert!(matches!(
        second,
        TaskReport::Acknowledged { checkpoint: 2, .. }
    ));
    tx0.send(StreamElement::EndOfInput).unwrap();
    tx1.send(StreamElement::EndOfInput).unwrap();
    assert!(task.join().is_finished());
}

/// Counts each input's records; snapshots both counts; records `end_input` calls.
#[derive(Default)]
struct PerInput {
    counts: (u64, u64),
    ended: Vec<u8>,
    finished: Arc<AtomicBool>,
}

impl TwoInputOperator for PerInput {
    type In1 = u64;
    type In2 = String;
    type Out = String;
    fn name(&self) -> &str {
        "per-input"
    }
    fn process_element1(
        &mut self,
        r: StreamRecord<u64>,
        ctx: &mut Context<'_, String>,
    ) -> Result<(), OperatorError> {
        self.counts.0 += 1;
        ctx.collect(r.map(|v| v.to_string()))
    }
    fn process_element2(
        &mut self,
        r: StreamRecord<String>,
        ctx: &mut Context<'_, String>,
    ) -> Result<(), OperatorError> {
        self.counts.1 += 1;
        ctx.collect(r)
    }
    fn snapshot_state(&mut self, _id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        Ok(Some(encode(&self.counts).unwrap()))
    }
    fn end_input(
        &mut self,
        input: u8,
        _ctx: &mut Context<'_, String>,
    ) -> Result<(), OperatorError> {
        self.ended.push(input);
        Ok(())
    }
    fn finish(&mut self, ctx: &mut Context<'_, String>) -> Result<(), OperatorError> {
        assert_eq!(self.ended.len(), 2, "finish after both inputs ended");
        self.finished.store(true, Ordering::SeqCst);
        ctx.collect(StreamRecord::new("finished".to_string()))
    }
}

#[test]
fn two_input_alignment_snapshots_state_consistent_with_both_inputs() {
    let (numbers, rx1) = bounded::<StreamElement<u64>>(64).unwrap();
    let (words, rx2) = bounded::<StreamElement<String>>(64).unwrap();
    let gate = TwoInputGate::new(vec![rx1], vec![rx2]).unwrap();
    let (responder, reports) = responder("two");
    let head = PerInput::default();
    let finished = Arc::clone(&head.finished);
    let output = SharedOutput::new();
    let task = TwoInputStreamTask::new(
        TaskConfig::new("two").with_responder(responder),
        gate,
        TwoInputChain::new(head, Map::new("id", |s: String| s)),
        output.clone(),
    )
    .spawn();
    for n in 0..5 {
        numbers.send(record(n)).unwrap();
    }
    numbers.send(barrier(1)).unwrap();
    numbers.send(record(99)).unwrap(); // after the barrier: not in the snapshot
    for w in ["a", "b"] {
        words.send(record(w.to_string())).unwrap();
    }
    words.send(barrier(1)).unwrap();
    words.send(record("z".to_string())).unwrap();
    numbers.send(StreamElement::EndOfInput).unwrap();
    words.send(StreamElement::EndOfInput).unwrap();
    assert!(task.join().is_finished());
    match reports.recv_timeout(HANG_GUARD).unwrap() {
        TaskReport::Acknowledged { snapshot, .. } => {
            let counts: (u64, u64) = snapshot
                .get_value(&TaskSnapshot::operator_key(0))
                .unwrap()
                .unwrap();
            assert_eq!(counts, (5, 2));
        }
        other => panic!("unexpected report {other:?}"),
    }
    assert!(finished.load(Ordering::SeqCst));
    let emitted = output.take();
    assert_eq!(emitted.last(), Some(&Emitted::EndOfInput));
    assert!(values(&emitted).contains(&"finished".to_string()));
}

/// An async-like head: at most one element in flight; a helper thread completes it through an
/// event, which the task delivers under the lock.
struct OneInFlight {
    in_flight: bool,
    overlapped: Arc<AtomicBool>,
}

impl Operator for OneInFlight {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "one-in-flight"
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        if self.in_flight {
            self.overlapped.store(true, Ordering::SeqCst);
        }
        self.in_flight = true;
        let sender = ctx.event_sender();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(1));
            let _ = sender.send(record.value * 10);
        });
        Ok(())
    }
    fn accepts_input(&self) -> bool {
        !self.in_flight
    }
    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        let value = *event.downcast::<u64>().expect("a u64 result");
        self.in_flight = false;
        ctx.collect(StreamRecord::new(value))
    }
}

#[test]
fn an_async_head_makes_the_task_wait_on_the_lock_until_a_completion_frees_room() {
    let (tx, rx) = bounded(16).unwrap();
    let overlapped = Arc::new(AtomicBool::new(false));
    let output = SharedOutput::new();
    let task = OneInputStreamTask::new(
        TaskConfig::new("async"),
        InputGate::new(vec![rx]).unwrap(),
        OneInFlight {
            in_flight: false,
            overlapped: Arc::clone(&overlapped),
        },
        output.clone(),
    )
    .spawn();
    for v in 1..=5 {
        tx.send(record(v)).unwrap();
    }
    wait_for(&output, 5);
    tx.send(StreamElement::EndOfInput).unwrap();
    assert!(task.join().is_finished());
    assert!(
        !overlapped.load(Ordering::SeqCst),
        "a record entered a full head"
    );
    assert_eq!(values(&output.take()), vec![10, 20, 30, 40, 50]);
}

/// Sends itself an event from `process_element`, i.e. while its task thread holds the lock.
struct SelfMessaging;

impl Operator for SelfMessaging {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "self-messaging"
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.event_sender()
            .send(record.value + 1000)
            .expect("accepted while running");
        ctx.collect(record)
    }
    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(StreamRecord::new(*event.downcast::<u64>().unwrap()))
    }
}

#[test]
fn an_event_sent_under_the_lock_is_delivered_after_the_section_without_deadlock() {
    let (tx, rx) = bounded(4).unwrap();
    let output = SharedOutput::new();
    let task = OneInputStreamTask::new(
        TaskConfig::new("self"),
        InputGate::new(vec![rx]).unwrap(),
        SelfMessaging,
        output.clone(),
    )
    .spawn();
    wait_running(&task);
    tx.send(record(1)).unwrap();
    wait_for(&output, 2);
    tx.send(StreamElement::EndOfInput).unwrap();
    assert!(task.join().is_finished());
    assert_eq!(values(&output.take()), vec![1, 1001]);
}

#[test]
fn an_upstream_that_disappears_fails_the_task() {
    let (tx, rx) = bounded::<StreamElement<u64>>(4).unwrap();
    let task = OneInputStreamTask::new(
        TaskConfig::new("orphan"),
        InputGate::new(vec![rx]).unwrap(),
        Counting::default(),
        SharedOutput::new(),
    )
    .spawn();
    drop::<Sender<_>>(tx);
    let outcome = task.join();
    assert!(
        outcome
            .failure()
            .expect("failed")
            .to_string()
            .contains("channel 0")
    );
}

/// Fails on its first record: with an error, or with a panic.
struct FailsOnFirst {
    panics: bool,
}

impl Operator for FailsOnFirst {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "fails"
    }
    fn process_element(
        &mut self,
        _record: StreamRecord<u64>,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        if self.panics {
            panic!("injected fault");
        }
        Err(OperatorError::user("fails", "injected fault"))
    }
}

/// A chain that fails is the task's failure before its input channels close: an upstream that
/// sees the channel closed (and fails as a consequence) finds this task already failing, so the
/// executor's cancel cannot turn the cause into an ignored failure while cancelling.
#[test]
fn a_failing_chain_is_recorded_before_the_input_channels_close() {
    use streamtask_core::task::TaskState;
    for panics in [false, true] {
        let (tx, rx) = bounded(1).unwrap();
        let task = OneInputStreamTask::new(
            TaskConfig::new("fails"),
            InputGate::new(vec![rx]).unwrap(),
            FailsOnFirst { panics },
            SharedOutput::new(),
        )
        .spawn();
        let start = Instant::now();
        while tx.send(record(1)).is_ok() {
            assert!(
                start.elapsed() < HANG_GUARD,
                "the input channel never closed"
            );
        }
        // The channel is closed: the task's failure was recorded first.
        let state = task.state();
        assert!(
            matches!(state, TaskState::Failing | TaskState::Failed),
            "panics: {panics}: the input closed while the task was {state:?}"
        );
        assert!(matches!(task.join(), TaskOutcome::Failed(_)));
    }
}
