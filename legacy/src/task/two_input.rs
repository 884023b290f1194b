//! `TwoInputStreamTask`: two inputs through one gate (one aligner over both), one lock
//! acquisition per record.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Duration;

use streamtask_core::channel::TwoInputGate;
use streamtask_core::operator::{Operator, TaskOutput, TwoInputChain, TwoInputOperator};
use streamtask_core::runtime::{ChainBody, TaskHandle, TriggerMode};
use streamtask_core::task::TaskConfig;

use super::runtime::{self, process_input};
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
    /// the config's cancel grace.
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
        }
    }

    /// The checkpoint lock's fairness.
    pub fn with_fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// How long `join` waits for a stopping task (the same as
    /// [`TaskConfig::with_cancel_grace`]).
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.config.cancel_grace = grace;
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
        } = self;
        let gate = gate.with_metrics(StdArc::clone(&config.metrics));
        runtime::spawn(
            config,
            TriggerMode::Inputs,
            fairness,
            move |env, _| ChainBody::new(chain, output, env),
            move |parts| process_input(parts, gate),
        )
    }
}

impl<H: TwoInputOperator, T: Operator<In = H::Out>, O> fmt::Debug for TwoInputStreamTask<H, T, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoInputStreamTask")
            .field("name", &self.config.name)
            .field("fairness", &self.fairness)
            .finish_non_exhaustive()
    }
}
