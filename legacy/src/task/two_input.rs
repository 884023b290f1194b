//! `TwoInputStreamTask`: two inputs through one gate (one aligner over both), one lock
//! acquisition per record.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use streamtask_core::channel::{TwoInputEvent, TwoInputGate};
use streamtask_core::operator::{Operator, TaskOutput, TwoInputChain, TwoInputOperator};
use streamtask_core::task::{DeclineReason, TaskConfig, TaskError};

use super::body::{BodyParts, TwoInputBody};
use super::runtime::{self, DEFAULT_CANCEL_GRACE, GateReader, Parts, RuntimeOptions};
use super::{TaskHandle, TaskKind};
use crate::lock::Fairness;

/// A task reading a [`TwoInputGate`] into a [`TwoInputChain`] (Flink 1.9's
/// `TwoInputStreamTask`): one aligner covers the channels of both inputs, so a checkpoint's
/// snapshot is consistent with both; `end_input(1)` / `end_input(2)` as each input ends, then
/// the chain finishes.
///
/// # Examples
///
/// ```
/// use streamtask_core::channel::{TwoInputGate, bounded};
/// use streamtask_core::operator::{CoMap, Discard, Map, TwoInputChain};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{StreamElement, StreamRecord};
/// use streamtask_legacy::TwoInputStreamTask;
///
/// let (numbers, rx1) = bounded(8).unwrap();
/// let (words, rx2) = bounded(8).unwrap();
/// let gate = TwoInputGate::new(vec![rx1], vec![rx2]).unwrap();
/// let chain = TwoInputChain::new(
///     CoMap::new("either", |n: u32| n.to_string(), |s: String| s),
///     Map::new("len", |s: String| s.len()),
/// );
/// let task = TwoInputStreamTask::new(TaskConfig::new("join"), gate, chain, Discard).spawn();
/// numbers.send(StreamElement::Record(StreamRecord::new(42))).unwrap();
/// words.send(StreamElement::Record(StreamRecord::new("abc".to_string()))).unwrap();
/// numbers.send(StreamElement::EndOfInput).unwrap();
/// words.send(StreamElement::EndOfInput).unwrap();
/// assert!(task.join().is_finished());
/// ```
pub struct TwoInputStreamTask<H: TwoInputOperator, T: Operator<In = H::Out>, O> {
    config: TaskConfig,
    gate: TwoInputGate<H::In1, H::In2>,
    chain: TwoInputChain<H, T>,
    output: O,
    fairness: Fairness,
    cancel_grace: Duration,
}

impl<H, T, O> TwoInputStreamTask<H, T, O>
where
    H: TwoInputOperator + 'static,
    H::In1: Send + 'static,
    H::In2: Send + 'static,
    T: Operator<In = H::Out> + 'static,
    O: TaskOutput<T::Out> + 'static,
{
    /// A task reading `gate` into `chain`, emitting into `output`; [`Fairness::Eventual`],
    /// [`DEFAULT_CANCEL_GRACE`].
    pub fn new(
        config: TaskConfig,
        gate: TwoInputGate<H::In1, H::In2>,
        chain: TwoInputChain<H, T>,
        output: O,
    ) -> Self {
        TwoInputStreamTask {
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
        let TwoInputStreamTask {
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
            TaskKind::TwoInput,
            RuntimeOptions {
                fairness,
                cancel_grace,
            },
            move |services| {
                TwoInputBody::new(chain, BodyParts::new(output, services, metrics, tracer))
            },
            move |parts| process_input(parts, gate),
        )
    }
}

fn process_input<H, T, O>(
    parts: &Parts<TwoInputBody<H, T, O>>,
    mut gate: TwoInputGate<H::In1, H::In2>,
) -> Result<(), TaskError>
where
    H: TwoInputOperator + 'static,
    T: Operator<In = H::Out> + 'static,
    O: TaskOutput<T::Out> + 'static,
{
    let cancel = &parts.shared.cancel;
    let reader = GateReader::new(cancel);
    while let Some(event) = reader.next(&mut gate)? {
        match event {
            TwoInputEvent::Record1(record) => {
                let mut body = parts.lock.lock();
                if !body.accepts_input() {
                    body.wait_until(|b| b.accepts_input() || cancel.is_cancelled());
                    if !body.accepts_input() {
                        return Ok(());
                    }
                }
                body.process1(record)?;
            }
            TwoInputEvent::Record2(record) => {
                let mut body = parts.lock.lock();
                if !body.accepts_input() {
                    body.wait_until(|b| b.accepts_input() || cancel.is_cancelled());
                    if !body.accepts_input() {
                        return Ok(());
                    }
                }
                body.process2(record)?;
            }
            TwoInputEvent::Watermark(watermark) => {
                parts.lock.lock().process_watermark(watermark)?;
            }
            TwoInputEvent::Status(status) => parts.lock.lock().process_status(status)?,
            TwoInputEvent::Checkpoint(barrier) => parts.checkpoint(barrier, Instant::now()),
            TwoInputEvent::CheckpointAborted { id } => {
                parts
                    .shared
                    .responder
                    .decline(id, DeclineReason::Superseded);
            }
            TwoInputEvent::EndOfInput1 => parts.lock.lock().end_input(1)?,
            TwoInputEvent::EndOfInput2 => parts.lock.lock().end_input(2)?,
            TwoInputEvent::EndOfInput => {
                return parts.finish_with(|body| body.end_of_both());
            }
            TwoInputEvent::Nothing => {}
        }
    }
    Ok(())
}

impl<H: TwoInputOperator, T: Operator<In = H::Out>, O> fmt::Debug for TwoInputStreamTask<H, T, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoInputStreamTask")
            .field("name", &self.config.name)
            .field("fairness", &self.fairness)
            .finish_non_exhaustive()
    }
}
