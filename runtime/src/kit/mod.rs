//! The task-runtime kit: what every task runs, written once for the three models.
//!
//! | piece | what it is |
//! |---|---|
//! | [`ChainBody`] | the operator chain with its counted output, services and tracing, and the operations every task runs on it: restore and open, records in, Flink's checkpoint order with its metrics and trace span, complete and abort notices, timers and events, end of input head to tail with a drain between operators, finish, close |
//! | [`TaskChain`](streamtask_core::operator::TaskChain) | what those operations need of a chain: any [`Operator`](streamtask_core::operator::Operator) (one input) or a [`TwoInputChain`](streamtask_core::operator::TwoInputChain) |
//! | [`TaskInput`], [`InputEvent`](crate::channel::InputEvent) | a task's input gate read the same way for one or two inputs; [`ChainBody::apply`] puts an event through the chain |
//! | [`IterationInput`], [`FeedbackWriter`], [`FeedbackOutput`] | an iteration's head input and tail, with the cyclic-graph snapshot (the feedback log) of Carbone et al. 2015 |
//! | [`Lifecycle`] | one task state machine ([`TaskState`](streamtask_core::task::TaskState)) with the first failure, the stop hook and the done latch |
//! | [`TaskHandle`] | one control surface, with one cancel/join contract, over a model's [`TaskControl`] |
//! | [`TaskParts`] | a task's identity, split from its [`TaskConfig`]: name, metrics, lifecycle, responder, grace |
//!
//! # What a model keeps
//!
//! Only what truly differs between the models:
//!
//! | | legacy | mailbox | bridge |
//! |---|---|---|---|
//! | who holds the [`ChainBody`] | the checkpoint lock | the mailbox thread | the checkpoint lock, inside the legacy source's cell |
//! | how triggers and notices reach it ([`TaskControl`]) | the async-calls thread, under the lock | mails | mails, run under the lock |
//! | how timers reach it | the timer thread, under the lock | mails | mails, under the lock |
//! | how the task waits while draining ([`Drain::Waiting`]) | on the lock's condition | suspended until a mail | - (no async operator behind a legacy source) |
//! | the stop hook | cancels the source's token, wakes lock waiters | a poison mail | cancels the source's token, a poison mail |
//! | how a suspended source waits ([`ChainBody::source_may_emit`]) | its next section waits on the lock's condition | its default action suspends until a mail | as legacy, on its own thread |
//!
//! # Checkpoint order
//!
//! [`ChainBody::checkpoint`], in Flink's order: prepare the chain before the barrier, send the
//! barrier downstream, snapshot the source's state, snapshot the chain, acknowledge (or decline
//! and fail the task with the cause), with the start delay, the duration and a trace span.
//!
//! # Stop with a savepoint (suspend, not end of input)
//!
//! A barrier whose kind [is synchronous](streamtask_core::CheckpointKind::is_synchronous) suspends the
//! body once acknowledged ([`ChainBody::is_suspended`]) and moves the task to
//! [`TaskState::Suspending`](streamtask_core::task::TaskState::Suspending). From then on [`ChainBody::source_may_emit`] is false: the one
//! check every model's source makes (a legacy source before each locked section, waiting on the
//! lock's condition; a mailbox reader before each poll, its task then only running mails), so
//! a source emits nothing after its barrier. The savepoint's completion notice
//! ([`ChainBody::notify_checkpoint`]) moves the task to [`TaskState::Suspended`](streamtask_core::task::TaskState::Suspended), whose stop
//! hook ends it without end of input; an abort resumes it. A task whose upstream already ended
//! this way waits for its own notice ([`ChainBody::input_closed`]).

mod body;
mod handle;
mod input;
mod iteration;
mod lifecycle;

use std::sync::Arc as StdArc;
use std::time::Duration;

use crate::sync::Arc;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::RunningOperator;
use streamtask_core::state::TaskSnapshot;
use streamtask_core::task::{CheckpointResponder, TaskConfig};
use streamtask_core::time::{Clock, InterruptibleTimers};
use streamtask_core::trace::Tracer;

pub use self::body::{
    Applied, BodyPhase, Burst, ChainBody, Counted, Drain, PUBLISH_EVERY, TaskEnv,
};
pub use self::handle::{TaskControl, TaskHandle, TriggerMode};
pub use self::input::{InputRecord, TaskInput};
pub use self::iteration::{
    FEEDBACK_LOG, FeedbackOutput, FeedbackReceiver, FeedbackSender, FeedbackWriter, IterationError,
    IterationInput, feedback_edge, feedback_log,
};
pub use self::lifecycle::Lifecycle;

/// A task's identity and shared state, split from its [`TaskConfig`]: what its handle, its body
/// and its threads all hold.
#[derive(Debug, Clone)]
pub struct TaskParts {
    /// The task's name; its threads are named after it.
    pub name: String,
    /// The task's metrics.
    pub metrics: StdArc<TaskMetrics>,
    /// The task's lifecycle.
    pub lifecycle: Arc<Lifecycle>,
    /// Where checkpoint acknowledgements and declines go.
    pub responder: CheckpointResponder,
    /// How long `join` waits for a stopping task.
    pub grace: Duration,
    /// Which operator of the chain runs now (a failure names it).
    pub running: StdArc<RunningOperator>,
}

/// What a model wires a task from: its [`TaskParts`] and the rest of its [`TaskConfig`].
#[derive(Debug)]
pub struct TaskSetup {
    /// Identity and shared state.
    pub parts: TaskParts,
    /// Where processing time comes from.
    pub clock: Clock,
    /// State to restore from; `None` for a fresh start.
    pub restore: Option<TaskSnapshot>,
    /// Spans of who ran what.
    pub tracer: Tracer,
    /// Whether due event-time timers fire in chunks with mails in between (a model that
    /// cannot interrupt a firing ignores it).
    pub interruptible_timers: InterruptibleTimers,
}

impl TaskSetup {
    /// Splits `config`, creating the task's lifecycle.
    pub fn new(config: TaskConfig) -> Self {
        let TaskConfig {
            name,
            clock,
            responder,
            restore,
            metrics,
            tracer,
            cancel_grace,
            interruptible_timers,
        } = config;
        TaskSetup {
            parts: TaskParts {
                lifecycle: Arc::new(Lifecycle::new(name.clone())),
                name,
                metrics,
                responder,
                grace: cancel_grace,
                running: StdArc::new(RunningOperator::new()),
            },
            clock,
            restore,
            tracer,
            interruptible_timers,
        }
    }
}
