//! The checkpoint-lock threading model: Flink's `StreamTask` as it was up to 1.9, in Rust.
//!
//! Every thread of a task that touches operator state takes one lock, the **checkpoint lock**:
//! the source thread around each emit, the input task thread around each record, the timer
//! thread around each timer, the "async calls" thread around each checkpoint. Here the lock
//! *owns* what it guards (the source's checkpointed state and the operator chain), so a snapshot
//! taken under it is consistent by construction.
//!
//! # Contents
//!
//! | item | what |
//! |---|---|
//! | [`CheckpointLock`], [`CheckpointGuard`], [`Fairness`] | the lock: a fairness setting, a condition to wait on, lock-wait metrics |
//! | [`SourceFunction`], [`SourceContext`], [`SourceGuard`] | legacy sources and what they emit through |
//! | [`SourceContextConfig`], [`TimeCharacteristic`], [`Emission`] | the three context flavours and idleness detection |
//! | [`SourceOutput`], [`SourceCell`], [`run_source`] | the backend a context emits into, what the lock owns for a source, the source driver |
//! | [`CancellationToken`], [`CancelHook`] | cancellation that reaches a source blocked in a wait or I/O |
//! | [`SystemProcessingTimeService`] | the timer thread; every timer fires under the lock |
//! | [`SourceStreamTask`], [`OneInputStreamTask`], [`TwoInputStreamTask`] ([`InputStreamTask`]), [`SourceTaskParts`] | the tasks (builders ending in `spawn`) |
//! | [`TaskHandle`](streamtask_runtime::TaskHandle), [`TaskState`](streamtask_core::task::TaskState) | the kit's one handle and lifecycle (`streamtask_runtime`), as every model's tasks return them |
//! | [`AsyncWaitStreamTask`], [`AsyncHead`], [`NoChain`], [`AsyncChainError`] | async I/O: an input task headed by an async operator, with its emitter thread (always the head: FLINK-13063) |
//! | [`testing`] | test support: the bounded hand-over's section probe, hot source and snapshot probe (this crate's and the bridge's tests) |
//!
//! The lock's protocol is in the `lock` module's docs (on [`CheckpointLock`]). What every task
//! does (the checkpoint order, end of input with drains, close, the lifecycle on [`TaskState`](streamtask_core::task::TaskState)
//! and the cancel/join contract on [`TaskHandle`](streamtask_runtime::TaskHandle)) is the kit's, `streamtask_runtime`;
//! this crate supplies who holds the state (the checkpoint lock, around the kit's `ChainBody`)
//! and how calls reach it:
//!
//! | thread | runs, under the lock |
//! |---|---|
//! | task | restore + open; the source's `run` or one gate event at a time; end of input; teardown |
//! | timer (`<task>-timer`) | every processing-time timer |
//! | async calls (`<task>-async-calls`) | checkpoint triggers (source tasks), notices, operator events |
//! | emitter (`<task>-async-emitter`, async tasks) | completions, as typed calls to the async operator |
//!
//! Event-time timers fire where the watermark is processed (a gate event on the task thread, a
//! source's emit on the source thread), inside that one locked section: a watermark that makes
//! many timers due holds the lock until the last one fired, and nothing else (a trigger, a
//! notice, a processing-time timer) gets the lock in between. Such a firing cannot be
//! interrupted here, so this model ignores
//! [`InterruptibleTimers`](streamtask_core::time::InterruptibleTimers); the mailbox model fires
//! in chunks and runs waiting mails between them.
//!
//! # Name families
//!
//! `lock` / `try_lock`; `wait_until` / `wait_until_for` (a bounded wait); builders are
//! `Task::new(required..)` then `with_x(..)` then `spawn()`.
//!
//! # Examples
//!
//! A counting source whose state and emits share one locked section, checkpointed while it
//! runs; the snapshot's count always matches the records emitted before its barrier:
//!
//! ```
//! use std::sync::mpsc;
//! use streamtask_core::operator::{Discard, Map};
//! use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
//! use streamtask_core::{CheckpointBarrier, OperatorError, state::TaskSnapshot};
//! use streamtask_legacy::{Fairness, SourceContext, SourceFunction, SourceStreamTask};
//!
//! struct Counter {
//!     limit: u64,
//! }
//!
//! impl SourceFunction for Counter {
//!     type Out = u64;
//!     type State = u64;
//!
//!     fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
//!         while !ctx.is_cancelled() {
//!             let mut locked = ctx.lock(); // synchronized (ctx.getCheckpointLock())
//!             let n = *locked.state();
//!             if n == self.limit {
//!                 return Ok(());
//!             }
//!             locked.collect(n)?;
//!             *locked.state_mut() = n + 1;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let (reports, acks) = crossbeam::channel::unbounded();
//! let config = TaskConfig::new("counter")
//!     .with_responder(CheckpointResponder::new("counter", reports));
//! let task = SourceStreamTask::new(config, Counter { limit: 100_000 }, Map::new("id", |n: u64| n), Discard)
//!     .with_fairness(Fairness::Fair)
//!     .spawn();
//! task.trigger_checkpoint(CheckpointBarrier::new(1, 0)).unwrap();
//! assert!(task.join().is_finished());
//! match acks.recv().unwrap() {
//!     TaskReport::Acknowledged { snapshot, .. } => {
//!         let count: u64 = snapshot.get_value(TaskSnapshot::SOURCE).unwrap().unwrap();
//!         assert!(count <= 100_000);
//!     }
//!     // The source may have finished before the trigger ran.
//!     TaskReport::Declined { .. } => {}
//! }
//! ```

#![forbid(unsafe_code)]

mod cancel;
mod lock;
mod source;
mod task;
#[cfg(not(loom))]
pub mod testing;
mod timer;

pub use crate::cancel::{CancelHook, CancellationToken, Cancelled};
pub use crate::lock::{CheckpointGuard, CheckpointLock, Fairness, HandoverRequest};
pub use crate::source::{
    CONTEXT_TIMER_OPERATOR, ContextConfigError, Emission, SourceCell, SourceContext,
    SourceContextConfig, SourceEnd, SourceFunction, SourceGuard, SourceOutput, TimeCharacteristic,
    restore_source_state, run_source,
};
pub use crate::task::{
    AsyncChainError, AsyncHead, AsyncWaitStreamTask, InputStreamTask, IterationHeadStreamTask,
    NoChain, OneInputStreamTask, SourceStreamTask, SourceTaskParts, TwoInputStreamTask,
};
pub use crate::timer::{SystemProcessingTimeService, TimerStatus};

/// The runtime's helper threads for the loom models (`tests/loom.rs`); only under `cfg(loom)`.
#[cfg(loom)]
#[doc(hidden)]
pub use crate::task::model_check;
