//! A source task's default action processes many records per step while no mail waits, and a
//! mail still waits for at most the record in flight: a checkpoint triggered while record `K`
//! is being read snapshots the reader right after record `K`, not after the rest of a batch.

use std::sync::{Arc, Mutex};
use std::task::Waker;

use crossbeam::channel::{Receiver, Sender, bounded, unbounded};
use streamtask_core::operator::{Context, Discard, Map, Operator, OperatorEvent};
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord, state::TaskSnapshot};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader, SourceStreamTask};

/// Counts to `end`; while reading record `pause_at` it tells the test and waits for its go.
struct Pausing {
    next: u64,
    end: u64,
    pause_at: u64,
    reached: Sender<()>,
    go: Receiver<()>,
}

impl SourceReader<u64> for Pausing {
    fn name(&self) -> &str {
        "pausing"
    }
    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next == self.end {
            return Ok(InputStatus::EndOfInput);
        }
        out.collect(self.next)?;
        if self.next == self.pause_at {
            self.reached.send(()).expect("the test waits");
            self.go.recv().expect("the test says go");
        }
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(self.next.to_le_bytes().to_vec())
    }
}

#[test]
fn a_trigger_waits_for_at_most_the_record_in_flight() {
    // Pause points inside a step's batch: the first record, one in the middle, one past the
    // first batch.
    for pause_at in [0, 1, 500, 5_000] {
        let (reached_tx, reached) = bounded(1);
        let (go, go_rx) = bounded(1);
        let (reports, acks) = unbounded();
        let task = SourceStreamTask::new(
            TaskConfig::new("step-bound")
                .with_responder(CheckpointResponder::new("step-bound", reports)),
            Pausing {
                next: 0,
                end: 10_000,
                pause_at,
                reached: reached_tx,
                go: go_rx,
            },
            Map::new("double", |x: u64| x * 2),
            Discard,
        )
        .spawn();
        reached.recv().expect("the reader reaches the pause");
        // Queued while the reader is inside record `pause_at`.
        task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
            .expect("a source task");
        go.send(()).expect("the reader waits");
        assert!(task.join().is_finished());
        match acks.recv().expect("a report") {
            TaskReport::Acknowledged { snapshot, .. } => {
                let bytes = snapshot
                    .get(TaskSnapshot::SOURCE)
                    .expect("the reader's state");
                let position = u64::from_le_bytes(bytes.try_into().expect("eight bytes"));
                assert_eq!(
                    position,
                    pause_at + 1,
                    "the trigger ran right after the record in flight"
                );
            }
            TaskReport::Declined { reason, .. } => panic!("declined: {reason:?}"),
        }
    }
}

/// Emits forever (`hot`), or never has anything (idle: the task thread blocks for mail).
struct Endless {
    next: u64,
    hot: bool,
}

impl SourceReader<u64> for Endless {
    fn name(&self) -> &str {
        "endless"
    }
    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if !self.hot {
            return Ok(InputStatus::NothingAvailable);
        }
        out.collect(self.next)?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, _waker: &Waker) {
        // Idle for good: only mails (and the trigger slot's doorbell) wake the task.
    }
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(self.next.to_le_bytes().to_vec())
    }
}

/// Triggers made back to back from one thread take the slot or, while it is taken, go as
/// mails; either way each is snapshotted once, in the order made, and none is lost: whether the
/// task thread is busy with records or blocked waiting for mail.
#[test]
fn back_to_back_triggers_are_snapshotted_in_order_hot_or_idle() {
    for hot in [true, false] {
        let (reports, acks) = unbounded();
        let task = SourceStreamTask::new(
            TaskConfig::new("in-order")
                .with_responder(CheckpointResponder::new("in-order", reports)),
            Endless { next: 0, hot },
            Map::new("double", |x: u64| x * 2),
            Discard,
        )
        .spawn();
        // Wait until the task runs (a trigger before that is declined as not running).
        while task.state() != streamtask_core::task::TaskState::Running {
            std::thread::yield_now();
        }
        const TRIGGERS: u64 = 300;
        for id in 1..=TRIGGERS {
            task.trigger_checkpoint(CheckpointBarrier::new(id, 0))
                .expect("a source task");
        }
        let mut seen = Vec::new();
        for _ in 1..=TRIGGERS {
            match acks.recv().expect("a report per trigger") {
                TaskReport::Acknowledged { checkpoint, .. } => seen.push(checkpoint),
                TaskReport::Declined {
                    checkpoint, reason, ..
                } => {
                    panic!("hot={hot}: checkpoint {checkpoint} declined: {reason:?}")
                }
            }
        }
        assert_eq!(seen, (1..=TRIGGERS).collect::<Vec<_>>(), "hot={hot}");
        task.cancel();
        task.join();
        assert!(acks.try_recv().is_err(), "one report per trigger");
    }
}

/// Counts to `end`, one record per poll.
struct CountTo {
    next: u64,
    end: u64,
}

impl SourceReader<u64> for CountTo {
    fn name(&self) -> &str {
        "count-to"
    }
    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next == self.end {
            return Ok(InputStatus::EndOfInput);
        }
        out.collect(self.next)?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(self.next.to_le_bytes().to_vec())
    }
}

/// What [`SelfMail`] saw, in order: `Some(record)` per record, `None` when its event mail ran.
type Seen = Arc<Mutex<Vec<Option<u64>>>>;

/// While processing record `mail_at` it sends itself an event: a mail put from inside the
/// chain, on the task thread, while the reader's loop is in the middle of its records.
struct SelfMail {
    mail_at: u64,
    seen: Seen,
}

impl Operator for SelfMail {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "self-mail"
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.seen.lock().unwrap().push(Some(record.value));
        if record.value == self.mail_at {
            let refused = ctx.services().events().send_event(0, Box::new(()));
            assert!(refused.is_ok(), "the running task takes events");
        }
        ctx.collect(record)
    }
    fn on_event(
        &mut self,
        _event: OperatorEvent,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.seen.lock().unwrap().push(None);
        Ok(())
    }
}

/// A mail put by the chain itself while it processes record `K` runs before record `K + 1`
/// enters the chain, wherever `K` falls in a step's run of records (first, middle, last of a
/// run, past the first run): the reader's loop looks at the mailbox flag after every record,
/// not once per run. Single-threaded and deterministic: nothing races the flag.
#[test]
fn a_mail_put_by_the_chain_runs_before_the_next_record() {
    for mail_at in [0, 1, 500, 1_023, 1_024, 5_000] {
        let seen = Seen::default();
        let task = SourceStreamTask::new(
            TaskConfig::new("self-mail"),
            CountTo {
                next: 0,
                end: 10_000,
            },
            SelfMail {
                mail_at,
                seen: Arc::clone(&seen),
            },
            Discard,
        )
        .spawn();
        let outcome = task.join();
        assert!(outcome.is_finished(), "{outcome}");
        let seen = seen.lock().unwrap();
        let mail = seen
            .iter()
            .position(Option::is_none)
            .expect("the event mail ran");
        assert_eq!(
            seen[mail - 1],
            Some(mail_at),
            "the record during which the mail was put"
        );
        assert_eq!(
            seen.get(mail + 1),
            Some(&Some(mail_at + 1)),
            "the mail ran before the next record"
        );
        assert_eq!(seen.len(), 10_001, "every record, and the mail once");
    }
}
