//! One-input tasks: an [`InputGate`] and the chain behind it, on the mailbox thread.

use streamtask_core::task::TaskConfig;
use streamtask_core::{operator::Operator, operator::TaskOutput};
use streamtask_runtime::TriggerMode;
use streamtask_runtime::channel::InputGate;

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
/// use streamtask_mailbox::OneInputTask;
///
/// let (tx, rx) = bounded(16).unwrap();
/// let mut upstream = RecordWriter::new(vec![tx], Partitioner::Forward).unwrap();
/// let task = OneInputTask::spawn(
///     TaskConfig::new("plus-one"),
///     InputGate::new(vec![rx]).unwrap(),
///     Map::new("plus-one", |x: u32| x + 1),
///     Vec::<Emitted<u32>>::new(),
/// );
/// for x in 0..3 {
///     upstream.collect(StreamRecord::new(x)).unwrap();
/// }
/// upstream.end_of_input().unwrap();
/// assert!(task.join().is_finished());
/// ```
#[derive(Debug)]
pub struct OneInputTask;

impl OneInputTask {
    /// Starts a task reading `input` into `chain`, whose output goes to `output`.
    /// `config.restore` restores the chain.
    ///
    /// # Panics
    ///
    /// If the OS refuses to start a thread.
    pub fn spawn<O, W>(
        config: TaskConfig,
        input: InputGate<O::In>,
        chain: O,
        output: W,
    ) -> TaskHandle
    where
        O: Operator + 'static,
        O::In: Send + 'static,
        W: TaskOutput<O::Out> + 'static,
    {
        spawn_task(
            config,
            TriggerMode::Inputs,
            GateInput::new(input),
            chain,
            output,
        )
    }
}
