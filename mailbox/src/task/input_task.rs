//! Tasks with inputs: a gate (one input or two) and the chain behind it, on the mailbox thread;
//! one builder, [`InputStreamTask`], named for one input ([`OneInputStreamTask`]) and two
//! ([`TwoInputStreamTask`]) as in the legacy model.

use streamtask_core::operator::{Operator, TaskChain, TaskOutput, TwoInputChain, TwoInputOperator};
use streamtask_core::task::TaskConfig;
use streamtask_runtime::channel::{InputGate, TwoInputGate};
use streamtask_runtime::{InputRecord, TaskInput, TriggerMode};

use super::input::GateInput;
use super::{TaskHandle, spawn_task};

/// A task with one input: each default-action step takes one event from the gate without
/// blocking; aligned barriers are snapshotted right there.
///
/// # Examples
///
/// ```
/// use streamtask_runtime::channel::{InputGate, Partitioner, RecordWriter, bounded};
/// use streamtask_core::operator::{Emitted, Map};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{operator::Output, StreamRecord, operator::TaskOutput};
/// use streamtask_mailbox::OneInputStreamTask;
///
/// let (tx, rx) = bounded(16).unwrap();
/// let mut upstream = RecordWriter::new(vec![tx], Partitioner::Forward).unwrap();
/// let task = OneInputStreamTask::new(
///     TaskConfig::new("plus-one"),
///     InputGate::new(vec![rx]).unwrap(),
///     Map::new("plus-one", |x: u32| x + 1),
///     Vec::<Emitted<u32>>::new(),
/// )
/// .spawn();
/// for x in 0..3 {
///     upstream.collect(StreamRecord::new(x)).unwrap();
/// }
/// upstream.end_of_input().unwrap();
/// assert!(task.join().is_finished());
/// ```
pub type OneInputStreamTask<C, W> = InputStreamTask<InputGate<<C as Operator>::In>, C, W>;

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
/// use streamtask_mailbox::TwoInputStreamTask;
///
/// let (numbers, rx1) = bounded(8).unwrap();
/// let (words, rx2) = bounded(8).unwrap();
/// let chain = TwoInputChain::new(
///     CoMap::new("either", |n: u32| n.to_string(), |s: String| s),
///     Map::new("len", |s: String| s.len()),
/// );
/// let task = TwoInputStreamTask::new(
///     TaskConfig::new("join"),
///     TwoInputGate::new(vec![rx1], vec![rx2]).unwrap(),
///     chain,
///     Discard,
/// )
/// .spawn();
/// numbers.send(StreamElement::Record(StreamRecord::new(12))).unwrap();
/// words.send(StreamElement::Record(StreamRecord::new("abc".to_string()))).unwrap();
/// numbers.send(StreamElement::EndOfInput).unwrap();
/// words.send(StreamElement::EndOfInput).unwrap();
/// assert!(task.join().is_finished());
/// ```
pub type TwoInputStreamTask<H, T, W> = InputStreamTask<
    TwoInputGate<<H as TwoInputOperator>::In1, <H as TwoInputOperator>::In2>,
    TwoInputChain<H, T>,
    W,
>;

/// A task reading a gate `G` (an [`InputGate`] or a [`TwoInputGate`]) into a chain `C` whose
/// output goes to `W`: built with [`new`](Self::new), started with [`spawn`](Self::spawn).
/// Usually named through [`OneInputStreamTask`] or [`TwoInputStreamTask`].
#[derive(Debug)]
pub struct InputStreamTask<G, C, W> {
    config: TaskConfig,
    gate: G,
    chain: C,
    output: W,
}

impl<G, C, W> InputStreamTask<G, C, W>
where
    G: TaskInput,
    G::Record: InputRecord<C>,
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    /// A task reading `gate` into `chain`, whose output goes to `output`. `config.restore`
    /// restores the chain.
    pub fn new(config: TaskConfig, gate: G, chain: C, output: W) -> Self {
        InputStreamTask {
            config,
            gate,
            chain,
            output,
        }
    }

    /// Starts the task thread.
    ///
    /// # Panics
    ///
    /// If the OS refuses to start a thread.
    pub fn spawn(self) -> TaskHandle {
        spawn_task(
            self.config,
            TriggerMode::Inputs,
            GateInput::new(self.gate),
            self.chain,
            self.output,
        )
    }
}
