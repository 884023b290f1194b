//! The [`LegacySourceStreamTask`] builder and the chaining rule it checks.

use std::fmt;

use streamtask_core::operator::Operator;
use streamtask_core::operator::TaskOutput;
use streamtask_core::task::TaskConfig;
use streamtask_legacy::{
    Fairness, SourceContextConfig, SourceFunction, SourceStreamTask, SourceTaskParts,
};

use super::TaskHandle;
use super::runtime::{self, Options};

/// A legacy [`SourceFunction`], unchanged, in the mailbox model: the function runs on a thread
/// of its own, and the task thread runs a mailbox loop that only takes mails, each under the
/// checkpoint lock (Flink 1.10's `SourceStreamTask`).
///
/// A builder: [`new`](Self::new) takes what is required, `with_*` the rest, and
/// [`spawn`](Self::spawn) checks the chaining rule and starts the task.
///
/// # Threads
///
/// | thread | name | runs | under the checkpoint lock |
/// |---|---|---|---|
/// | task (mailbox) | `<task>` | restore + open; the mailbox loop, which only takes mails; finish; teardown | open, every action mail, finish, close |
/// | source | `<task>-legacy-source` | `run_source`: the function's `run`, and for a finite source `Watermark::MAX` + `end_input`; checkpoint triggers waiting when a section starts | every locked section of the source, and so every record through the chain; the triggers it runs |
/// | timers | `<task>-timers` (started by the first registration) | only enqueues timer mails | never |
///
/// The lock owns the source's state and context together with the operator chain and the
/// task's output, so everything behind the source runs either on the source thread inside one
/// of its locked sections, or on the mailbox thread inside a mail: never both at once.
///
/// # Mails
///
/// | mail | priority | under the lock | does |
/// |---|---|---|---|
/// | checkpoint trigger | `URGENT`: overtakes a batch already built | only if a trigger still waits (it takes the lock itself, not through the executor) | every trigger still waiting (see below): prepare, broadcast the barrier, snapshot source state + chain, acknowledge |
/// | timer of operator `i` | `operator(i)` | yes | the chain's `dispatch_timer`; context timers go to the source's context |
/// | event for operator `i` | `operator(i)` | yes | the chain's `dispatch_event` |
/// | checkpoint complete / aborted | `MAX` | yes | the chain's notices (never to a closed chain, FLINK-16383) |
/// | poison (source ended, cancel), resume, failure report | `MAX`, first | **no** | end the loop |
///
/// Control mails never take the lock ([`CheckpointLockExecutor`](crate::CheckpointLockExecutor)
/// only runs action mails), so the loop can always be told to end. No mail is enqueued
/// periodically: every mail takes the lock the source wants, so internal periodic mails would
/// slow the source down (FLINK-23560).
///
/// # Checkpoint triggers: whoever holds the lock first
///
/// A trigger is queued, then asked for twice: the lock's errand
/// ([`CheckpointLock::post_errand`](streamtask_legacy::CheckpointLock::post_errand)) has the
/// source thread run it before its next locked section, and a trigger mail has the mailbox
/// thread run it. Both run every trigger still queued, oldest first, holding the lock, and take
/// each out of the queue under its mutex, so each trigger runs once, in order, between two
/// sections (the same point a mail runs at); whoever comes second finds nothing. The mail
/// looks at the queue before it takes the lock (it runs without the action executor,
/// [`ProcessorHandle::execute_unlocked`](streamtask_mailbox::ProcessorHandle::execute_unlocked)),
/// so a mail that comes second does not make the source let go of the lock for nothing; and
/// the mailbox thread parks at once when it finds no mail (no spin on a core the source or the
/// triggering thread needs). A hot source
/// starts a section every emit, so it runs the trigger within one emit and no thread has to be
/// woken for it (a parked mailbox thread's wake-up was most of the trigger's latency); a
/// source that emits no section soon (blocked outside the lock, waiting for room, sleeping)
/// leaves it to the mail. Triggers no one took when the task ends decline. A checkpoint that
/// fails on the source thread fails the task as it would in a mail. Unlike a mail, a trigger
/// may so run before mails queued earlier (timers, notices), as a legacy trigger thread racing
/// for the lock does.
///
/// # Protocol
///
/// ```text
/// task thread                                  source thread
/// -----------                                  -------------
/// lock { restore, open }; Initializing->Running
/// spawn source thread ----------------------->  run_source(function, lock, token)
/// loop: take mail (blocks while none)            loop { [triggers queued: lock { run them }]
///                                                     lock { state, emit -> chain } }
///       action mail: lock { run it }             (a mail waits for the lock until the
///       control mail: no lock                     current section ends, and vice versa)
///                                              finite: lock { MAX watermark, end_input }
///                                              ended: put poison first   | failed: put failure report first
///                                              exit latch: ended
/// loop ends (poison, failure, or cancel's poison)
/// wait for the exit latch (<= grace once stopping), join
/// source finished (Finishing): lock { drain + finish chain, end output, quiesce timers }
/// quiesce timers, quiesce mailbox, drain (if finishing), lock { close chain },
/// shut timers down, close mailbox; report the outcome
/// ```
///
/// # Lifecycle
///
/// The kit's [`TaskState`](streamtask_core::task::TaskState) machine, as every model's task:
/// `Running` while the source runs and mails run, `Finishing` from the moment the source ended
/// the chain's input, and the one cancel/join contract of
/// [`TaskHandle`](streamtask_runtime::TaskHandle). A failure while `Cancelling` is
/// ignored, as are a cancelled source's errors (FLINK-15811).
///
/// # Cancellation
///
/// [`TaskHandle::cancel`] marks the task `Cancelling`, cancels the source's
/// [`CancellationToken`](streamtask_legacy::CancellationToken) and puts a poison mail first. The
/// token is what interruption was in Flink (FLINK-15076): its flag, its sleeps, its hooks
/// (closing a socket the source blocks on) and the lock's condition all notice it, so a source
/// that blocks while *holding* the lock is reached too; the mailbox thread, which may itself be
/// waiting for that lock to run a mail, gets it once the source returns and then sees the poison.
/// A source that ignores cancellation is waited for three quarters of the grace, counted from
/// the stop (see [`TaskConfig::with_cancel_grace`]); then the task reports
/// [`TaskError::CancellationIgnored`](streamtask_core::task::TaskError::CancellationIgnored) instead of
/// hanging, leaving that one thread behind, which closes the chain itself if it ever returns;
/// the rest of the grace is for the task thread's teardown, so
/// [`TaskHandle::join`](streamtask_runtime::TaskHandle::join) returns within the grace, as
/// in every model.
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
/// use streamtask_core::{CheckpointBarrier, OperatorError, state::TaskSnapshot};
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
    /// The same builder as the legacy model's task: one place for what both take.
    task: SourceStreamTask<F, C, W>,
}

impl<F, C, W> LegacySourceStreamTask<F, C, W>
where
    F: SourceFunction,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    /// A task running `source` with `chain` behind it, emitting into `output`; processing-time
    /// context, [`Fairness::Eventual`], the config's cancel grace. `config.restore` restores the
    /// source's state (from `TaskSnapshot::SOURCE`) and the chain.
    pub fn new(config: TaskConfig, source: F, chain: C, output: W) -> Self {
        LegacySourceStreamTask {
            task: SourceStreamTask::new(config, source, chain, output),
        }
    }

    /// The checkpoint lock's fairness: how the mailbox thread fares against a source that
    /// re-takes the lock in a tight loop.
    pub fn with_fairness(self, fairness: Fairness) -> Self {
        LegacySourceStreamTask {
            task: self.task.with_fairness(fairness),
        }
    }

    /// The source context's flavour, watermark interval and idle timeout.
    pub fn with_context(self, context: SourceContextConfig) -> Self {
        LegacySourceStreamTask {
            task: self.task.with_context(context),
        }
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
        let SourceTaskParts {
            config,
            source,
            chain,
            output,
            context,
            fairness,
        } = self.task.into_parts();
        if chain.waits_for_own_events() {
            return Err(ChainingError::WaitsForOwnEvents {
                task: config.name.clone(),
                chain: chain.chain_names(),
            });
        }
        Ok(runtime::spawn(
            config,
            source,
            chain,
            output,
            Options { context, fairness },
        ))
    }
}

impl<F, C, W> fmt::Debug for LegacySourceStreamTask<F, C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LegacySourceStreamTask")
            .field("task", &self.task)
            .finish()
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
