//! ReaderSource: a new-style reader run as a legacy source function, in the legacy task and in
//! the bridge; checkpointed through the lock, woken by its waker, cancellable; and the round
//! trip through both adapters.

mod common;

use std::sync::{Arc, Mutex};
use std::task::Waker;

use common::{CountReader, SharedOutput, report, responder, values, values_before_barrier};
use streamtask_bridge::porting::PortingKit;
use streamtask_bridge::{HandoffReader, LegacySourceStreamTask, ReaderSource};
use streamtask_core::operator::{Emitted, Map};
use streamtask_core::task::{TaskConfig, TaskOutcome, TaskReport};
use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord};
use streamtask_legacy::{SourceContextConfig, SourceStreamTask};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// Counts with event-time timestamps (`n * 10`).
struct Stamped {
    inner: CountReader,
}

impl SourceReader<u64> for Stamped {
    fn name(&self) -> &str {
        "stamped"
    }
    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        self.inner.restore_state(state)
    }
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        if self.inner.next == self.inner.limit {
            return Ok(InputStatus::EndOfInput);
        }
        let n = self.inner.next;
        output.collect_with_timestamp(n, n as i64 * 10)?;
        self.inner.next += 1;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(&mut self, id: u64) -> Result<Vec<u8>, OperatorError> {
        self.inner.snapshot_state(id)
    }
}

#[test]
fn smoke() {
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("legacy"),
        ReaderSource::new(Stamped {
            inner: CountReader::faithful(100),
        }),
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .with_context(SourceContextConfig::event_time())
    .spawn();
    assert!(task.join().is_finished());
    let records: Vec<StreamRecord<u64>> = output
        .snapshot()
        .into_iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r),
            _ => None,
        })
        .collect();
    let expected: Vec<StreamRecord<u64>> = (0..100)
        .map(|n| StreamRecord::with_timestamp(n, n as i64 * 10))
        .collect();
    assert_eq!(records, expected);
}

#[test]
fn checkpoints_of_a_reader_source_restore_exactly_once_in_the_bridge() {
    let output = SharedOutput::new();
    let (responder, reports) = responder("bridged");
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("bridged").with_responder(responder),
        ReaderSource::new(CountReader::faithful(u64::MAX)),
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn()
    .unwrap();
    output.wait_for(|e| e.len() > 50);
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    let TaskReport::Acknowledged { snapshot, .. } = report(&reports) else {
        panic!("a running task acknowledges");
    };
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
    let committed = values_before_barrier(&output.snapshot(), 1);

    let restored = SharedOutput::new();
    let total = committed.len() as u64 + 25;
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("bridged").with_restore(Some(snapshot)),
        ReaderSource::new(CountReader::faithful(total)),
        Map::new("id", |n: u64| n),
        restored.clone(),
    )
    .spawn()
    .unwrap();
    assert!(task.join().is_finished());
    let all: Vec<u64> = committed
        .into_iter()
        .chain(values(&restored.snapshot()))
        .collect();
    assert_eq!(all, (0..total).collect::<Vec<_>>());
}

/// A reader fed by another thread: nothing until it sends, woken through the waker.
struct Fed {
    queue: Arc<Mutex<(Vec<u64>, Option<Waker>)>>,
}

impl SourceReader<u64> for Fed {
    fn name(&self) -> &str {
        "fed"
    }
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        let next = {
            let mut queue = self.queue.lock().unwrap();
            if queue.0.is_empty() {
                None
            } else {
                Some(queue.0.remove(0))
            }
        };
        match next {
            Some(value) => {
                output.collect(value)?;
                Ok(InputStatus::MoreAvailable)
            }
            None => Ok(InputStatus::NothingAvailable),
        }
    }
    fn register_waker(&mut self, waker: &Waker) {
        let mut queue = self.queue.lock().unwrap();
        if queue.0.is_empty() {
            queue.1 = Some(waker.clone());
        } else {
            waker.wake_by_ref();
        }
    }
    fn snapshot_state(&mut self, _id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(Vec::new())
    }
}

#[test]
fn a_waiting_reader_is_woken_by_its_waker_and_cancellable() {
    let queue: Arc<Mutex<(Vec<u64>, Option<Waker>)>> = Arc::default();
    let output = SharedOutput::new();
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("fed"),
        ReaderSource::new(Fed {
            queue: Arc::clone(&queue),
        }),
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn()
    .unwrap();
    for batch in [[1, 2], [3, 4], [5, 6]] {
        let waker = {
            let mut q = queue.lock().unwrap();
            q.0.extend(batch);
            q.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        output.wait_for(|e| values(e).ends_with(&batch));
    }
    assert_eq!(values(&output.snapshot()), vec![1, 2, 3, 4, 5, 6]);
    // The source thread sleeps waiting for the waker; cancellation reaches it there.
    task.cancel();
    assert!(matches!(task.join(), TaskOutcome::Cancelled));
}

#[test]
fn a_reader_run_as_a_legacy_source_is_a_faithful_port_of_itself() {
    // Legacy side: the reader inside ReaderSource; reader side: the reader itself.
    let report = PortingKit::new(
        || ReaderSource::new(CountReader::faithful(120)),
        || CountReader::faithful(120),
    )
    .checkpoint_every(15)
    .fail_after([20, 21, 100])
    .run()
    .unwrap();
    assert_eq!(report.records.len(), 120);
}

#[test]
fn a_reader_through_both_adapters_is_still_the_same_reader() {
    // Reader -> legacy source (ReaderSource) -> reader (HandoffReader), in a mailbox task.
    let output = SharedOutput::new();
    let task = streamtask_mailbox::SourceStreamTask::new(
        TaskConfig::new("round-trip"),
        HandoffReader::new(ReaderSource::new(CountReader::faithful(500)))
            .with_context(SourceContextConfig::event_time())
            .with_capacity(3),
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn();
    assert!(task.join().is_finished());
    assert_eq!(values(&output.snapshot()), (0..500).collect::<Vec<_>>());
    // And the kit agrees, across restores.
    PortingKit::new(
        || ReaderSource::new(CountReader::faithful(90)),
        || HandoffReader::new(ReaderSource::new(CountReader::faithful(90))).with_capacity(4),
    )
    .checkpoint_every(10)
    .fail_after([33, 64])
    .run()
    .unwrap();
}
