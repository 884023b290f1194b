//! The [`LegacySourceStreamTask`] builder and the chaining rule it checks.

use std::fmt;
use std::time::Duration;

use streamtask_core::Operator;
use streamtask_core::operator::TaskOutput;
use streamtask_core::task::TaskConfig;
use streamtask_legacy::{DEFAULT_CANCEL_GRACE, Fairness, SourceContextConfig, SourceFunction};

use super::TaskHandle;
use super::runtime::{self, Options};

/// A legacy [`SourceFunction`], unchanged, in the mailbox model: the function runs on a thread
/// of its own, and the task thread runs a mailbox loop that only takes mails, each under the
/// checkpoint lock (Flink 1.10's `SourceStreamTask`). See the [`task` module](self) for the
/// threads, mails and protocol.
///
/// A builder: [`new`](Self::new) takes what is required, `with_*` the rest, and
/// [`spawn`](Self::spawn) checks the chaining rule and starts the task.
///
/// # Examples
///
/// A counting source whose state and emits share one locked section, checkpointed while it
/// runs; the snapshot's count always matches the records emitted before its barrier:
///
/// ```
/// use streamtask_bridge::LegacySourceStreamTask;
/// use streamtask_core::operator::{Discard, Map};
/// use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
/// use streamtask_core::{CheckpointBarrier, OperatorError, TaskSnapshot};
/// use streamtask_legacy::{SourceContext, SourceFunction};
///
/// struct Counter(u64);
///
/// impl SourceFunction for Counter {
///     type Out = u64;
///     type State = u64; // the next number
///
///     fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
///         while !ctx.is_cancelled() {
///             let mut locked = ctx.lock();
///             let n = *locked.state();
///             if n == self.0 {
///                 return Ok(());
///             }
///             locked.collect(n)?;
///             *locked.state_mut() = n + 1;
///         }
///         Ok(())
///     }
/// }
///
/// let (reports, acks) = crossbeam::channel::unbounded();
/// let config = TaskConfig::new("counter")
///     .with_responder(CheckpointResponder::new("counter", reports));
/// let task = LegacySourceStreamTask::new(config, Counter(10_000), Map::new("id", |n: u64| n), Discard)
///     .spawn()
///     .unwrap();
/// task.trigger_checkpoint(CheckpointBarrier::new(1, 0)).unwrap();
/// assert!(task.join().is_finished());
/// match acks.recv().unwrap() {
///     TaskReport::Acknowledged { snapshot, .. } => {
///         let next: u64 = snapshot.get_value(TaskSnapshot::SOURCE).unwrap().unwrap();
///         assert!(next <= 10_000);
///     }
///     // The source may have finished before the trigger ran.
///     TaskReport::Declined { .. } => {}
/// }
/// ```
pub struct LegacySourceStreamTask<F, C, W> {
    config: TaskConfig,
    source: F,
    chain: C,
    output: W,
    context: SourceContextConfig,
    fairness: Fairness,
    cancel_grace: Duration,
}

impl<F, C, W> LegacySourceStreamTask<F, C, W>
where
    F: SourceFunction,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    /// A task running `source` with `chain` behind it, emitting into `output`; processing-time
    /// context, [`Fairness::Eventual`], [`DEFAULT_CANCEL_GRACE`]. `config.restore` restores the
    /// source's state (from `TaskSnapshot::SOURCE`) and the chain.
    pub fn new(config: TaskConfig, source: F, chain: C, output: W) -> Self {
        LegacySourceStreamTask {
            config,
            source,
            chain,
            output,
            context: SourceContextConfig::default(),
            fairness: Fairness::default(),
            cancel_grace: DEFAULT_CANCEL_GRACE,
        }
    }

    /// The checkpoint lock's fairness: how the mailbox thread fares against a source that
    /// re-takes the lock in a tight loop.
    pub fn with_fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// The source context's flavour, watermark interval and idle timeout.
    pub fn with_context(mut self, context: SourceContextConfig) -> Self {
        self.context = context;
        self
    }

    /// How long the task waits for a cancelled (or failing) source before reporting that it
    /// ignored cancellation.
    pub fn with_cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Checks the chaining rule and starts the task thread (which starts the source thread once
    /// the chain is open).
    ///
    /// # Errors
    ///
    /// [`ChainingError::WaitsForOwnEvents`] if an operator of the chain waits for its own
    /// events (an async operator): its records would arrive on the source's thread, which can
    /// never run that operator's mails (FLINK-16219).
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread.
    pub fn spawn(self) -> Result<TaskHandle, ChainingError> {
        if self.chain.waits_for_own_events() {
            return Err(ChainingError::WaitsForOwnEvents {
                task: self.config.name.clone(),
                chain: self.chain.chain_names(),
            });
        }
        let LegacySourceStreamTask {
            config,
            source,
            chain,
            output,
            context,
            fairness,
            cancel_grace,
        } = self;
        Ok(runtime::spawn(
            config,
            source,
            chain,
            output,
            Options {
                context,
                fairness,
                cancel_grace,
            },
        ))
    }
}

impl<F, C, W> fmt::Debug for LegacySourceStreamTask<F, C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LegacySourceStreamTask")
            .field("name", &self.config.name)
            .field("context", &self.context)
            .field("fairness", &self.fairness)
            .field("cancel_grace", &self.cancel_grace)
            .finish_non_exhaustive()
    }
}

/// A chain that cannot run behind a legacy source in the bridge.
///
/// # Examples
///
/// ```
/// use streamtask_bridge::ChainingError;
///
/// let error = ChainingError::WaitsForOwnEvents {
///     task: "orders".to_string(),
///     chain: vec!["enrich".to_string()],
/// };
/// let message = error.to_string();
/// assert!(message.contains("start_new_chain"));
/// assert!(message.contains("HandoffReader"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainingError {
    /// An operator of the chain waits for its own events or timers (an async operator; Flink's
    /// "yielding" operators). Behind a legacy source its records arrive on the source's thread
    /// inside a locked section, where that operator's completions (mails of the mailbox thread)
    /// can never run (FLINK-16219).
    #[error(
        "task {task:?}: the chain {chain:?} behind the legacy source has an operator that waits \
         for its own events (an async operator), which cannot run on the source's thread; start \
         a new chain before that operator (DataStream::start_new_chain in the job API), or wrap \
         the source in streamtask_bridge::HandoffReader and run it as a reader"
    )]
    WaitsForOwnEvents {
        /// The task's name.
        task: String,
        /// The chain's operators, head first.
        chain: Vec<String>,
    },
}
