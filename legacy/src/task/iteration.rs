//! The iteration head of the lock model: Flink 1.9's `StreamIterationHead` with a regular input.
//!
//! Flink's head loops `poll(timeout)` on the feedback queue and emits each record under the
//! checkpoint lock. Here the head is the lock model's input task reading an
//! [`IterationInput`]: the task thread polls the feedback edge and the regular gate outside the
//! lock, parks while neither has anything (with a timeout of the iteration's deadline once the
//! regular input ended), and takes the lock once per record to push it through the chain.
//! Barrier alignment, the feedback log and the held-back acknowledgement are the kit's
//! ([`streamtask_runtime::IterationInput`]).

use streamtask_core::operator::Operator;
use streamtask_runtime::IterationInput;

use super::input_task::InputStreamTask;

/// The head of an iteration under the lock model: an [`InputStreamTask`] over an
/// [`IterationInput`]. Flink's head loops `poll(timeout)` on its feedback queue and emits under
/// the checkpoint lock; this one polls the feedback edge and the regular gate outside the lock,
/// parks while neither has anything (with the iteration's deadline as timeout once the regular
/// input ended), and takes the lock once per record to push it through the chain.
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
/// use streamtask_legacy::IterationHeadStreamTask;
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
/// let task = IterationHeadStreamTask::new(config, input, Map::new("inc", |x: u32| x + 1), Discard)
///     .spawn();
/// tx.send(StreamElement::Record(StreamRecord::new(1))).unwrap();
/// tx.send(StreamElement::EndOfInput).unwrap();
/// // No feedback for 10 ms after the input ended: the head ends.
/// assert!(task.join().is_finished());
/// ```
pub type IterationHeadStreamTask<C, O> = InputStreamTask<IterationInput<<C as Operator>::In>, C, O>;
