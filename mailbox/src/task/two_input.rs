//! Two-input tasks: a [`TwoInputGate`] and a [`TwoInputChain`], on the mailbox thread.

use streamtask_core::operator::{TwoInputChain, TwoInputOperator};
use streamtask_core::task::TaskConfig;
use streamtask_core::{operator::Operator, operator::TaskOutput};
use streamtask_runtime::TriggerMode;
use streamtask_runtime::channel::TwoInputGate;

use super::input::GateInput;
use super::{TaskHandle, spawn_task};

/// A task with two inputs: each default-action step takes one event from the gate (round robin
/// over both inputs' channels); barriers are aligned over both inputs.
///
/// # Examples
///
/// ```
/// use streamtask_runtime::channel::{TwoInputGate, bounded};
/// use streamtask_core::operator::{CoMap, Discard, Map, TwoInputChain};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{StreamElement, StreamRecord};
/// use streamtask_mailbox::TwoInputTask;
///
/// let (numbers, rx1) = bounded(8).unwrap();
/// let (words, rx2) = bounded(8).unwrap();
/// let chain = TwoInputChain::new(
///     CoMap::new("either", |n: u32| n.to_string(), |s: String| s),
///     Map::new("len", |s: String| s.len()),
/// );
/// let task = TwoInputTask::spawn(
///     TaskConfig::new("join"),
///     TwoInputGate::new(vec![rx1], vec![rx2]).unwrap(),
///     chain,
///     Discard,
/// );
/// numbers.send(StreamElement::Record(StreamRecord::new(12))).unwrap();
/// words.send(StreamElement::Record(StreamRecord::new("abc".to_string()))).unwrap();
/// numbers.send(StreamElement::EndOfInput).unwrap();
/// words.send(StreamElement::EndOfInput).unwrap();
/// assert!(task.join().is_finished());
/// ```
#[derive(Debug)]
pub struct TwoInputTask;

impl TwoInputTask {
    /// Starts a task reading `inputs` into `chain`, whose output goes to `output`.
    /// `config.restore` restores the chain.
    ///
    /// # Panics
    ///
    /// If the OS refuses to start a thread.
    pub fn spawn<H, T, W>(
        config: TaskConfig,
        inputs: TwoInputGate<H::In1, H::In2>,
        chain: TwoInputChain<H, T>,
        output: W,
    ) -> TaskHandle
    where
        H: TwoInputOperator + 'static,
        H::In1: Send + 'static,
        H::In2: Send + 'static,
        T: Operator<In = H::Out> + 'static,
        W: TaskOutput<T::Out> + 'static,
    {
        spawn_task(
            config,
            TriggerMode::Inputs,
            GateInput::new(inputs),
            chain,
            output,
        )
    }
}
