//! The iteration head of the mailbox model: a one-input task over an [`IterationInput`].
//!
//! Flink's `StreamIterationHead` blocks in `poll(timeout)` on its feedback queue, which a
//! mailbox thread must never do. Here the default action takes one event at a time from the
//! regular gate and the feedback edge without blocking, and suspends when neither has anything;
//! a feedback arrival (the edge's waker) or new input resumes it, and once the regular input
//! ended the input's alarm resumes it at the iteration's deadline (the mailbox loop has no timed
//! wait of its own). No busy loop: a suspended head runs only mails. The feedback log, the
//! held-back acknowledgement and the end by timeout are the kit's
//! ([`streamtask_runtime::IterationInput`]).

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::task::TaskConfig;
use streamtask_core::{operator::Operator, operator::TaskOutput};
use streamtask_runtime::{IterationInput, TaskInput, TriggerMode};

use super::input::GateInput;
use super::{TaskHandle, spawn_task};

/// The head of an iteration under the mailbox model (and the bridge's, whose tasks with inputs
/// are mailbox tasks). The default action takes one event at a time from the regular gate and
/// the feedback edge without blocking and suspends when neither has anything; a feedback
/// arrival or new input resumes it, and once the regular input ended the input's alarm resumes
/// it at the iteration's deadline. No busy loop, and no blocking `poll(timeout)` on the mailbox
/// thread.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask_runtime::channel::{InputGate, bounded};
/// use streamtask_core::operator::{Discard, Map};
/// use streamtask_runtime::{IterationInput, feedback_edge};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{StreamElement, StreamRecord};
/// use streamtask_mailbox::IterationHeadStreamTask;
///
/// let (tx, rx) = bounded(8).unwrap();
/// let (_tail, feedback) = feedback_edge::<u32>();
/// let mut config = TaskConfig::new("head");
/// let input = IterationInput::new(
///     "loop",
///     InputGate::new(vec![rx]).unwrap(),
///     feedback,
///     Duration::from_millis(10),
///     &mut config,
/// )
/// .unwrap();
/// let task = IterationHeadStreamTask::new(config, input, Map::new("inc", |x: u32| x + 1), Discard).spawn();
/// tx.send(StreamElement::Record(StreamRecord::new(1))).unwrap();
/// tx.send(StreamElement::EndOfInput).unwrap();
/// // No feedback for 10 ms after the input ended: the alarm resumes the head, which ends.
/// assert!(task.join().is_finished());
/// ```
#[derive(Debug)]
pub struct IterationHeadStreamTask<C: Operator, W> {
    config: TaskConfig,
    input: IterationInput<C::In>,
    chain: C,
    output: W,
}

impl<C, W> IterationHeadStreamTask<C, W>
where
    C: Operator + 'static,
    C::In: Clone + Serialize + DeserializeOwned + Send + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    /// The head reading `input` (built with `config`, whose responder it swapped) into `chain`,
    /// whose output goes to `output`.
    pub fn new(config: TaskConfig, input: IterationInput<C::In>, chain: C, output: W) -> Self {
        IterationHeadStreamTask {
            config,
            input,
            chain,
            output,
        }
    }

    /// Starts the task thread; the input gets its alarm here (counted in the task's threads
    /// once it starts).
    ///
    /// # Panics
    ///
    /// If the OS refuses to start a thread.
    pub fn spawn(self) -> TaskHandle {
        let metrics = std::sync::Arc::clone(&self.config.metrics);
        spawn_task(
            self.config,
            TriggerMode::Inputs,
            GateInput::new(self.input.with_metrics(metrics).with_alarm()),
            self.chain,
            self.output,
        )
    }
}
