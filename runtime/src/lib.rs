//! The task-runtime kit: what a model crate builds tasks from; not what a user's operator is
//! written against (that is `streamtask-core`).
//!
//! Every model (`streamtask-legacy`, `streamtask-mailbox`, `streamtask-bridge`) runs its tasks on
//! these pieces, written once: the body that puts input through an operator chain and takes
//! checkpoints in Flink's order, one task lifecycle and one task handle, the channels and input
//! gates between tasks, the async engine with its tokio runtime, and the timer thread. A model
//! keeps only what truly differs: who holds the body (the checkpoint lock or the mailbox
//! thread) and how triggers, timers and notices reach it.
//!
//! # Contents
//!
//! | part | what | Flink |
//! |---|---|---|
//! | [`ChainBody`], [`TaskEnv`], [`Burst`], [`Drain`], [`Applied`] | the operator chain of a task with its counted output and the operations every task runs on it: open, records in, checkpoint, notices, timers, end of input, close | `StreamTask`, `OperatorChain` |
//! | [`TaskInput`], [`channel::InputEvent`] | a task's input gate read the same way for one or two inputs; the gate yields the event the chain takes | `StreamOneInputProcessor`, `StreamTwoInputProcessor` |
//! | [`IterationInput`], [`FeedbackWriter`], [`feedback_edge`] | an iteration's head input and tail, with the feedback log | `StreamIterationHead`, `StreamIterationTail` |
//! | [`Lifecycle`], [`TaskParts`], [`TaskSetup`] | one task state machine with the first failure, the stop hook and the done latch; a task's identity split from its config | `Task`'s `ExecutionState` |
//! | [`TaskHandle`], [`TaskControl`] | one control surface, with one cancel/join contract, over a model's way to reach its task | `Task` (`cancelExecution`), `TaskExecutor` |
//! | [`channel`] | bounded channels with availability notices, input gates, barrier aligner, watermark valve, record writer | `ResultPartition`, `InputGate`, `CheckpointBarrierAligner`, `StatusWatermarkValve`, `RecordWriter` |
//! | [`AsyncWaitEngine`], [`AsyncWaitOperator`], [`ElementQueue`] | the async engine every model's async operator runs on, and its element queues | `AsyncWaitOperator`, `StreamElementQueue` |
//! | [`FutureAsyncFunction`], [`TokioRuntime`] | an async function written as a future, on an owned tokio runtime | - |
//! | [`TimerScheduler`], [`Rearm`] | the timer thread both models build their timer services on | `SystemProcessingTimeService` |
//!
//! `channel` is a namespace (its `Sender`, `Receiver` and error names read as the channel's);
//! every other name is at the crate root. Protocols are written out where they live: the task
//! order and what a model keeps in [`ChainBody`]'s module (`kit`), the lost-wakeup argument of
//! the channels in [`channel`], the engine's in [`AsyncWaitEngine`], the scheduler's states in
//! [`TimerScheduler`]. Locks, atomics and threads come from core's facade
//! ([`streamtask_core::sync`]), so a `--cfg loom` build model-checks this crate too.
//!
//! # Examples
//!
//! An upstream task writes through a [`RecordWriter`](channel::RecordWriter), a downstream task
//! reads through an [`InputGate`](channel::InputGate):
//!
//! ```
//! use streamtask_core::{operator::Output, StreamRecord, operator::TaskOutput};
//! use streamtask_runtime::channel::{InputEvent, InputGate, Partitioner, RecordWriter, bounded};
//!
//! let (tx, rx) = bounded(16).unwrap();
//! let mut writer = RecordWriter::new(vec![tx], Partitioner::Forward).unwrap();
//! writer.collect(StreamRecord::new(7)).unwrap();
//! writer.end_of_input().unwrap();
//!
//! let mut gate = InputGate::new(vec![rx]).unwrap();
//! assert_eq!(gate.poll_next().unwrap(), InputEvent::Record(StreamRecord::new(7)));
//! ```

#![forbid(unsafe_code)]
#![deny(unreachable_pub)]

mod async_io;
pub mod channel;
mod kit;
mod scheduler;

// The workspace's one sync facade is core's: `crate::sync` in this crate's modules is it, so a
// `--cfg loom` build swaps the same primitives here as there.
use streamtask_core::sync;

pub use crate::async_io::{
    AsyncWaitEngine, AsyncWaitOperator, ElementQueue, QueueFull, QueueOutput, QueuedInput,
};
#[cfg(not(loom))]
pub use crate::async_io::{FutureAsyncFunction, FutureCallError, TokioRuntime, TokioRuntimeError};
pub use crate::kit::{
    Applied, BodyPhase, Burst, ChainBody, Counted, Drain, FEEDBACK_LOG, FeedbackOutput,
    FeedbackReceiver, FeedbackSender, FeedbackWriter, InputRecord, IterationError, IterationInput,
    Lifecycle, PUBLISH_EVERY, TaskControl, TaskEnv, TaskHandle, TaskInput, TaskParts, TaskSetup,
    TriggerMode, feedback_edge, feedback_log,
};
pub use crate::scheduler::{Rearm, SchedulerState, TimerScheduler};
