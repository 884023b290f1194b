//! `OneInputStreamTask`: `while running && process_input()`, one lock acquisition per record.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use streamtask_core::channel::{GateEvent, InputGate};
use streamtask_core::operator::{Operator, TaskOutput};
use streamtask_core::task::{DeclineReason, TaskConfig, TaskError};

use super::body::{BodyParts, ChainBody};
use super::runtime::{self, DEFAULT_CANCEL_GRACE, GateReader, Parts, RuntimeOptions};
use super::{TaskHandle, TaskKind};
use crate::lock::Fairness;

/// A task reading one [`InputGate`] into a chain (Flink 1.9's `OneInputStreamTask`): the task
/// thread blocks on the gate outside the lock, then takes the lock once per record (and per
/// watermark or status change) to push it through the chain. Barriers are aligned by the gate;
/// the aligned checkpoint runs on the task thread.
///
/// # The async head
///
/// Before a record enters the chain the task checks `chain.accepts_input()` under the lock; if
/// the head refuses (an async operator with a full queue), the task thread waits on the lock's
/// condition, releasing the lock, until a completion (delivered as an event or timer, under the
/// lock, which notifies the condition) frees room or the task is cancelled. This is Flink 1.9's
/// `checkpointingLock.wait()` in `AsyncWaitOperator`, lifted out of the operator.
///
/// # Examples
///
/// ```
/// use streamtask_core::channel::{InputGate, bounded};
/// use streamtask_core::operator::{Discard, Map};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{StreamElement, StreamRecord};
/// use streamtask_legacy::OneInputStreamTask;
///
/// let (tx, rx) = bounded(8).unwrap();
/// let gate = InputGate::new(vec![rx]).unwrap();
/// let task = OneInputStreamTask::new(TaskConfig::new("map"), gate, Map::new("inc", |x: u32| x + 1), Discard)
///     .spawn();
/// tx.send(StreamElement::Record(StreamRecord::new(1))).unwrap();
/// tx.send(StreamElement::EndOfInput).unwrap();
/// let metrics = task.metrics().clone();
/// assert!(task.join().is_finished());
/// assert_eq!(metrics.records_in.get(), 1);
/// ```
pub struct OneInputStreamTask<C: Operator, O> {
    config: TaskConfig,
    gate: InputGate<C::In>,
    chain: C,
    output: O,
    fairness: Fairness,
    cancel_grace: Duration,
}

impl<C, O> OneInputStreamTask<C, O>
where
    C: Operator + 'static,
    C::In: Send + 'static,
    O: TaskOutput<C::Out> + 'static,
{
    /// A task reading `gate` into `chain`, emitting into `output`; [`Fairness::Eventual`],
    /// [`DEFAULT_CANCEL_GRACE`].
    pub fn new(config: TaskConfig, gate: InputGate<C::In>, chain: C, output: O) -> Self {
        OneInputStreamTask {
            config,
            gate,
            chain,
            output,
            fairness: Fairness::default(),
            cancel_grace: DEFAULT_CANCEL_GRACE,
        }
    }

    /// The checkpoint lock's fairness.
    pub fn with_fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// How long `cancel`/`join` wait for a stopping task.
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Starts the task's threads.
    pub fn spawn(self) -> TaskHandle {
        let OneInputStreamTask {
            config,
            gate,
            chain,
            output,
            fairness,
            cancel_grace,
        } = self;
        let metrics = StdArc::clone(&config.metrics);
        let tracer = config.tracer.clone();
        let gate = gate.with_metrics(StdArc::clone(&metrics));
        runtime::spawn(
            config,
            TaskKind::OneInput,
            RuntimeOptions {
                fairness,
                cancel_grace,
            },
            move |services| {
                ChainBody::new(chain, BodyParts::new(output, services, metrics, tracer))
            },
            move |parts| process_input(parts, gate),
        )
    }
}

/// `while running && process_input()`.
fn process_input<C, O>(
    parts: &Parts<ChainBody<C, O>>,
    mut gate: InputGate<C::In>,
) -> Result<(), TaskError>
where
    C: Operator + 'static,
    O: TaskOutput<C::Out> + 'static,
{
    let cancel = &parts.shared.cancel;
    let reader = GateReader::new(cancel);
    while let Some(event) = reader.next(&mut gate)? {
        match event {
            GateEvent::Record(record) => {
                let mut body = parts.lock.lock();
                if !body.accepts_input() {
                    body.wait_until(|b| b.accepts_input() || cancel.is_cancelled());
                    if !body.accepts_input() {
                        return Ok(()); // cancelled while waiting
                    }
                }
                body.process(record)?;
            }
            GateEvent::Watermark(watermark) => parts.lock.lock().process_watermark(watermark)?,
            GateEvent::Status(status) => parts.lock.lock().process_status(status)?,
            GateEvent::Checkpoint(barrier) => parts.checkpoint(barrier, Instant::now()),
            GateEvent::CheckpointAborted { id } => {
                parts
                    .shared
                    .responder
                    .decline(id, DeclineReason::Superseded);
            }
            GateEvent::EndOfInput => {
                return parts.finish_with(|body| body.end_input_and_finish());
            }
            GateEvent::Nothing => {}
        }
    }
    Ok(()) // cancelled
}

impl<C: Operator, O> fmt::Debug for OneInputStreamTask<C, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OneInputStreamTask")
            .field("name", &self.config.name)
            .field("fairness", &self.fairness)
            .finish_non_exhaustive()
    }
}
