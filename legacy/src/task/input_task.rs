//! Tasks with inputs: `while running && process_input()`, one lock acquisition per event; one
//! builder for one input ([`OneInputStreamTask`]) and two ([`TwoInputStreamTask`]).

use std::fmt;
use std::sync::Arc as StdArc;

use streamtask_core::operator::TaskChain;
use streamtask_core::operator::{Operator, TaskOutput, TwoInputChain, TwoInputOperator};
use streamtask_core::task::TaskConfig;
use streamtask_runtime::channel::{InputGate, TwoInputGate};
use streamtask_runtime::{ChainBody, InputRecord, TaskHandle, TaskInput, TriggerMode};

use super::runtime::{self, process_input};
use crate::lock::Fairness;

/// A task reading one [`InputGate`] into a chain (Flink 1.9's `OneInputStreamTask`): the task
/// thread blocks on the gate outside the lock, then takes the lock once per record (and per
/// watermark or status change) to push it through the chain. Barriers are aligned by the gate;
/// the aligned checkpoint runs on the task thread.
///
/// # The async head
///
/// Before a record (or watermark) enters the chain the task checks `chain.accepts_input()`
/// under the lock; if the head refuses (an async operator with a full queue), the task thread
/// waits on the lock's condition, releasing the lock, until a completion (delivered as an event
/// or timer, under the lock, which notifies the condition) frees room or the task is cancelled.
/// This is Flink 1.9's `checkpointingLock.wait()` in `AsyncWaitOperator`, lifted out of the
/// operator. A barrier is never held back that way: it is read and snapshotted at once.
///
/// # Examples
///
/// ```
/// use streamtask_runtime::channel::{InputGate, bounded};
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
pub type OneInputStreamTask<C, O> = InputStreamTask<InputGate<<C as Operator>::In>, C, O>;

/// A task reading a [`TwoInputGate`] into a [`TwoInputChain`] (Flink 1.9's
/// `TwoInputStreamTask`): one aligner covers the channels of both inputs, so a checkpoint's
/// snapshot is consistent with both; `end_input(1)` / `end_input(2)` as each input ends, then
/// the chain finishes.
///
/// # Examples
///
/// ```
/// use streamtask_runtime::channel::{TwoInputGate, bounded};
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
pub type TwoInputStreamTask<H, T, O> = InputStreamTask<
    TwoInputGate<<H as TwoInputOperator>::In1, <H as TwoInputOperator>::In2>,
    TwoInputChain<H, T>,
    O,
>;

/// A legacy task reading an input gate `G` into a chain `C` (see [`OneInputStreamTask`] and
/// [`TwoInputStreamTask`]). A builder: [`new`](Self::new) takes what is required, `with_*` the
/// rest, [`spawn`](Self::spawn) starts the task. The cancel grace is the config's
/// ([`TaskConfig::with_cancel_grace`]).
pub struct InputStreamTask<G, C, O> {
    config: TaskConfig,
    gate: G,
    chain: C,
    output: O,
    fairness: Fairness,
}

impl<G, C, O> InputStreamTask<G, C, O>
where
    G: TaskInput,
    G::Record: InputRecord<C>,
    C: TaskChain + 'static,
    O: TaskOutput<C::Out> + 'static,
{
    /// A task reading `gate` into `chain`, emitting into `output`; [`Fairness::Eventual`].
    pub fn new(config: TaskConfig, gate: G, chain: C, output: O) -> Self {
        InputStreamTask {
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

    /// Starts the task's threads.
    pub fn spawn(self) -> TaskHandle {
        let InputStreamTask {
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
            false,
            move |env, _| ChainBody::new(chain, output, env),
            move |parts| process_input(parts, gate),
        )
    }
}

impl<G, C, O> fmt::Debug for InputStreamTask<G, C, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputStreamTask")
            .field("name", &self.config.name)
            .field("fairness", &self.fairness)
            .finish_non_exhaustive()
    }
}
