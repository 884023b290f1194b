//! The model-independent parts of async I/O: the element queues, retry policies, the operator
//! configuration, the blocking pool, and the futures-based async function on an owned tokio
//! runtime.
//!
//! Both models' async operators (the legacy one with its emitter thread, the mailbox one with
//! completion mails) wrap these; neither re-implements them. The user-facing
//! [`AsyncFunction`](crate::function::AsyncFunction) and
//! [`ResultFuture`](crate::function::ResultFuture) live in [`function`](crate::function).

mod config;
mod engine;
#[cfg(not(loom))]
mod future_fn;
mod operator;
mod pool;
mod queue;
mod retry;
#[cfg(not(loom))]
mod tokio_runtime;

pub use self::config::{AsyncConfig, AsyncConfigError};
pub use self::engine::AsyncWaitEngine;
#[cfg(not(loom))]
pub use self::future_fn::{FutureAsyncFunction, FutureCallError};
pub use self::operator::AsyncWaitOperator;
pub use self::pool::{
    BatchQueue, BatchedBlockingAsyncFunction, BlockingAsyncFunction, BlockingPool, PoolError,
};
pub use self::queue::{ElementQueue, OutputMode, QueueFull, QueueOutput, QueuedInput};
pub use self::retry::{Backoff, RetryConfigError, RetryPolicy};
#[cfg(not(loom))]
pub use self::tokio_runtime::{TokioRuntime, TokioRuntimeError};
