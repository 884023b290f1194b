//! `OneInputStreamTask`: `while running && process_input()`, one lock acquisition per record.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Duration;

use streamtask_core::channel::InputGate;
use streamtask_core::operator::{Operator, TaskOutput};
use streamtask_core::runtime::{ChainBody, TaskHandle, TriggerMode};
use streamtask_core::task::TaskConfig;

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
}

impl<C, O> OneInputStreamTask<C, O>
where
    C: Operator + 'static,
    C::In: Send + 'static,
    O: TaskOutput<C::Out> + 'static,
{
    /// A task reading `gate` into `chain`, emitting into `output`; [`Fairness::Eventual`],
    /// the config's cancel grace.
    pub fn new(config: TaskConfig, gate: InputGate<C::In>, chain: C, output: O) -> Self {
        OneInputStreamTask {
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
        let OneInputStreamTask {
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

impl<C: Operator, O> fmt::Debug for OneInputStreamTask<C, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OneInputStreamTask")
            .field("name", &self.config.name)
            .field("fairness", &self.fairness)
            .finish_non_exhaustive()
    }
}
