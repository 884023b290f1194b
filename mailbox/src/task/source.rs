//! Source tasks: a [`SourceReader`] and the chain behind it, on the mailbox thread.

use streamtask_core::task::TaskConfig;
use streamtask_core::{operator::Operator, operator::TaskOutput};
use streamtask_runtime::TriggerMode;

use super::input::ReaderInput;
use super::{TaskHandle, spawn_task};
use crate::source::SourceReader;

/// A source task: the reader is polled one step at a time as the default action; checkpoint
/// triggers run between two steps.
///
/// # Examples
///
/// A reader counting to five into a doubling map, with one checkpoint:
///
/// ```
/// use std::task::Waker;
/// use streamtask_core::operator::{Emitted, Map};
/// use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
/// use streamtask_core::{CheckpointBarrier, OperatorError, state::TaskSnapshot};
/// use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader, SourceStreamTask};
///
/// struct Count { next: u64, end: u64 }
///
/// impl SourceReader<u64> for Count {
///     fn name(&self) -> &str { "count" }
///     fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
///         if self.next == self.end {
///             return Ok(InputStatus::EndOfInput);
///         }
///         out.collect(self.next)?;
///         self.next += 1;
///         Ok(InputStatus::MoreAvailable)
///     }
///     fn register_waker(&mut self, waker: &Waker) { waker.wake_by_ref() }
///     fn snapshot_state(&mut self, _id: u64) -> Result<Vec<u8>, OperatorError> {
///         Ok(self.next.to_le_bytes().to_vec())
///     }
/// }
///
/// let (reports, acks) = crossbeam::channel::unbounded();
/// let config = TaskConfig::new("count")
///     .with_responder(CheckpointResponder::new("count", reports));
/// let task = SourceStreamTask::new(
///     config,
///     Count { next: 0, end: 5 },
///     Map::new("double", |x: u64| x * 2),
///     Vec::<Emitted<u64>>::new(),
/// )
/// .spawn();
/// task.trigger_checkpoint(CheckpointBarrier::new(1, 0)).unwrap();
/// assert!(task.join().is_finished());
/// match acks.recv().unwrap() {
///     TaskReport::Acknowledged { snapshot, .. } => {
///         assert!(snapshot.get(TaskSnapshot::SOURCE).is_some());
///     }
///     // The reader may have finished before the trigger ran.
///     TaskReport::Declined { .. } => {}
/// }
/// ```
#[derive(Debug)]
pub struct SourceStreamTask<R, C, W> {
    config: TaskConfig,
    reader: R,
    chain: C,
    output: W,
}

impl<R, C, W> SourceStreamTask<R, C, W>
where
    R: SourceReader<C::In> + 'static,
    C: Operator + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    /// A source task reading `reader` into `chain`, whose output goes to `output`.
    /// `config.restore` restores the reader (from [`TaskSnapshot::SOURCE`](streamtask_core::state::TaskSnapshot::SOURCE)) and the chain.
    pub fn new(config: TaskConfig, reader: R, chain: C, output: W) -> Self {
        SourceStreamTask {
            config,
            reader,
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
            TriggerMode::Source,
            ReaderInput::new(self.reader),
            self.chain,
            self.output,
        )
    }
}
