//! The bridge task: a legacy source on its own thread, the mailbox thread taking mails, each
//! under the checkpoint lock; end of input, restore, timers, events and notices.

mod common;

use std::sync::Arc;

use common::{
    Count, Probe, ProbeLog, SharedOutput, logged, report, responder, values, values_before_barrier,
    wait_until,
};
use streamtask_bridge::{HandoffReader, LegacySourceStreamTask, ReaderSource};
use streamtask_core::operator::{Context, Emitted, Map};
use streamtask_core::state::{decode, encode};
use streamtask_core::task::{TaskConfig, TaskReport};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, Watermark, operator::Operator,
    state::TaskSnapshot, time::Clock, time::ManualClock,
};
use streamtask_runtime::TaskHandle;

#[test]
fn smoke() {
    let output = SharedOutput::new();
    let (responder, _reports) = responder("count");
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("count").with_responder(responder),
        Count::to(1000),
        Map::new("double", |n: u64| n * 2),
        output.clone(),
    )
    .spawn()
    .unwrap();
    assert_eq!(task.name(), "count");
    assert!(task.join().is_finished());
    let emitted = output.snapshot();
    assert_eq!(
        values(&emitted),
        (0..1000).map(|n| n * 2).collect::<Vec<_>>()
    );
    // A finite source ends with the end of event time, then end of input (as in Flink).
    assert_eq!(
        &emitted[emitted.len() - 2..],
        &[Emitted::Watermark(Watermark::MAX), Emitted::EndOfInput]
    );
}

#[test]
fn public_types_are_send_and_sync_where_they_should_be() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<TaskHandle>();
    sync::<TaskHandle>();
    send::<HandoffReader<Count>>();
    send::<ReaderSource<HandoffReader<Count>, u64>>();
    send::<streamtask_bridge::ChainingError>();
    sync::<streamtask_bridge::ChainingError>();
}

/// Counts the records it saw; its count is its checkpointed state.
struct Tally {
    seen: u64,
}

impl Operator for Tally {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "tally"
    }
    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = restored {
            self.seen = decode(bytes).map_err(|e| OperatorError::state("tally", e))?;
        }
        Ok(())
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.seen += 1;
        ctx.collect(record)
    }
    fn snapshot_state(&mut self, _id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        encode(&self.seen)
            .map(Some)
            .map_err(|e| OperatorError::state("tally", e))
    }
    fn finish(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        // The tally itself, last: 10_000_000 + how many records this chain saw in total.
        ctx.collect(StreamRecord::new(10_000_000 + self.seen))
    }
}

#[test]
fn restores_the_source_state_and_the_chain_from_a_snapshot() {
    // First run: count forever, checkpoint once, cancel.
    let output = SharedOutput::new();
    let (responder, reports) = responder("count");
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("count").with_responder(responder),
        Count::forever(),
        Tally { seen: 0 },
        output.clone(),
    )
    .spawn()
    .unwrap();
    output.wait_for(|e| e.len() >= 100);
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    let TaskReport::Acknowledged { snapshot, .. } = report(&reports) else {
        panic!("the running task acknowledges");
    };
    task.cancel();
    assert!(matches!(
        task.join(),
        streamtask_core::task::TaskOutcome::Cancelled
    ));
    let next: u64 = snapshot.get_value(TaskSnapshot::SOURCE).unwrap().unwrap();
    let before = values_before_barrier(&output.snapshot(), 1);
    assert_eq!(before, (0..next).collect::<Vec<_>>());
    let tallied: u64 = snapshot
        .get_value(&TaskSnapshot::operator_key(0))
        .unwrap()
        .unwrap();
    assert_eq!(tallied, next);

    // Second run, restored: it continues exactly where the checkpoint was.
    let restored_output = SharedOutput::new();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("count").with_restore(Some(snapshot)),
        Count::to(next + 50),
        Tally { seen: 0 },
        restored_output.clone(),
    )
    .spawn()
    .unwrap();
    assert!(task.join().is_finished());
    let mut expected: Vec<u64> = (next..next + 50).collect();
    expected.push(10_000_000 + next + 50);
    assert_eq!(values(&restored_output.snapshot()), expected);
}

/// Emits `first` records, then waits (outside the lock) until cancelled.
struct FirstThenWait {
    first: u64,
}

impl streamtask_legacy::SourceFunction for FirstThenWait {
    type Out = u64;
    type State = ();
    fn run(
        &mut self,
        ctx: &mut streamtask_legacy::SourceContext<'_, u64, ()>,
    ) -> Result<(), OperatorError> {
        for n in 0..self.first {
            ctx.collect(n)?;
        }
        ctx.cancellation().wait();
        Ok(())
    }
}

#[test]
fn timers_and_events_of_the_chain_run_as_mails_on_the_task_thread() {
    let log: ProbeLog = Arc::default();
    let mut probe = Probe::new(&log);
    probe.timer_at = Some(10);
    let sender = Arc::clone(&probe.sender);
    let clock = ManualClock::new(0);
    let output = SharedOutput::new();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("timed").with_clock(Clock::Manual(clock.clone())),
        FirstThenWait { first: 3 },
        probe,
        output.clone(),
    )
    .spawn()
    .unwrap();
    output.wait_for(|e| values(e).len() == 3);
    clock.advance(11);
    output.wait_for(|e| values(e).contains(&1_000_007));
    let event_sender = sender.lock().unwrap().clone().expect("opened");
    event_sender.send(42u64).unwrap();
    output.wait_for(|e| values(e).contains(&42));
    task.cancel();
    assert!(matches!(
        task.join(),
        streamtask_core::task::TaskOutcome::Cancelled
    ));
    // Both ran on the task (mailbox) thread, not on the timer thread or the sender's.
    assert_eq!(
        logged(&log, "timer"),
        vec![("timer 7".into(), "timed".into())]
    );
    assert_eq!(
        logged(&log, "event"),
        vec![("event 42".into(), "timed".into())]
    );
    // After a cancel the chain is closed, never finished.
    assert!(logged(&log, "finish").is_empty());
    assert_eq!(logged(&log, "close").len(), 1);
}

#[test]
fn records_a_mail_emits_while_the_source_waits_are_counted_at_once() {
    // The source waits outside the lock after its three records and publishes nothing; the
    // event's mail emits a fourth and publishes the counts (the source's records with it).
    let log: ProbeLog = Arc::default();
    let probe = Probe::new(&log);
    let sender = Arc::clone(&probe.sender);
    let config = TaskConfig::new("counted");
    let metrics = Arc::clone(&config.metrics);
    let output = SharedOutput::new();
    let task =
        LegacySourceStreamTask::new(config, FirstThenWait { first: 3 }, probe, output.clone())
            .spawn()
            .unwrap();
    output.wait_for(|e| values(e).len() == 3);
    let event_sender = sender.lock().unwrap().clone().expect("opened");
    event_sender.send(42u64).unwrap();
    wait_until(|| metrics.records_out.get() == 4);
    assert_eq!(metrics.records_in.get(), 3);
    task.cancel();
    assert!(matches!(
        task.join(),
        streamtask_core::task::TaskOutcome::Cancelled
    ));
}

#[test]
fn checkpoint_notices_reach_the_chain_and_never_a_closed_one() {
    let log: ProbeLog = Arc::default();
    let output = SharedOutput::new();
    let (responder, reports) = responder("notices");
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("notices").with_responder(responder),
        Count::to(3_000),
        Probe::new(&log),
        output.clone(),
    )
    .spawn()
    .unwrap();
    // Triggers and notices race with the end of input and the close: a notice that reached the
    // closed probe would fail the task.
    let mut id = 0;
    while !task.is_done() && id < 10_000 {
        id += 1;
        task.trigger_checkpoint(CheckpointBarrier::new(id, 0))
            .unwrap();
        if id % 2 == 0 {
            task.notify_checkpoint_complete(id - 1);
        } else {
            task.notify_checkpoint_aborted(id - 1);
        }
    }
    assert!(task.join().is_finished());
    // Every trigger was answered: acknowledged while running, declined otherwise.
    let answered = reports.try_iter().count();
    assert_eq!(answered, id as usize);
    let entries: Vec<String> = log.lock().unwrap().iter().map(|(w, _)| w.clone()).collect();
    let close = entries.iter().position(|w| w == "close").unwrap();
    assert_eq!(close, entries.len() - 1, "nothing after close: {entries:?}");
}

#[test]
fn metrics_count_records_mails_threads_and_checkpoint_delays() {
    let (responder, reports) = responder("measured");
    let output = SharedOutput::new();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("measured").with_responder(responder),
        Count::forever(),
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn()
    .unwrap();
    output.wait_for(|e| !e.is_empty());
    for id in 1..=5 {
        task.trigger_checkpoint(CheckpointBarrier::new(id, 0))
            .unwrap();
        assert!(matches!(report(&reports), TaskReport::Acknowledged { .. }));
    }
    let metrics = Arc::clone(task.metrics());
    task.cancel();
    task.join();
    let summary = metrics.summary();
    assert_eq!(summary.checkpoints, 5);
    assert_eq!(summary.checkpoint_delay_us.count, 5);
    assert!(summary.mails >= 5);
    // Mailbox latency is sampled (one mail in MAILBOX_LATENCY_SAMPLE per putting thread, its
    // first included): the triggering thread's first mail is in the sample, and no more
    // samples than mails.
    let sampled = summary.mailbox_latency_us.count;
    assert!(
        sampled >= 1 && sampled <= summary.mails,
        "{sampled} samples of {} mails",
        summary.mails
    );
    assert!(summary.threads >= 2, "task and source threads: {summary:?}");
    let emitted = values(&output.snapshot()).len() as u64;
    assert_eq!(summary.records_in, emitted);
    assert_eq!(summary.records_out, emitted);
}

#[test]
fn a_restore_that_does_not_decode_fails_the_task() {
    let mut snapshot = TaskSnapshot::new();
    snapshot.put(TaskSnapshot::SOURCE, b"not json".to_vec());
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("bad-restore").with_restore(Some(snapshot)),
        Count::to(10),
        Map::new("id", |n: u64| n),
        SharedOutput::new(),
    )
    .spawn()
    .unwrap();
    let outcome = task.join();
    let failure = outcome.failure().expect("the restore fails the task");
    assert!(failure.to_string().contains("count"), "{failure}");
}

#[test]
fn dropping_a_handle_cancels_and_joins_the_task() {
    let log: ProbeLog = Arc::default();
    {
        let output = SharedOutput::new();
        let _task = LegacySourceStreamTask::new(
            TaskConfig::new("dropped"),
            Count::forever(),
            Probe::new(&log),
            output.clone(),
        )
        .spawn()
        .unwrap();
        output.wait_for(|e| !e.is_empty());
    }
    // The drop waited for the task: its chain is closed already.
    assert_eq!(logged(&log, "close").len(), 1);
}
