//! What a user configures and writes async I/O with: the operator's configuration
//! ([`AsyncConfig`], [`OutputMode`], the key of key-ordered mode: [`AsyncKey`]), batched calls
//! ([`BatchConfig`], [`AsyncBatchFunction`]), retry policies, and the blocking pool that turns a
//! blocking client into an [`AsyncFunction`](crate::function::AsyncFunction).
//!
//! The user-facing [`AsyncFunction`](crate::function::AsyncFunction) and
//! [`ResultFuture`](crate::function::ResultFuture) live in [`function`](crate::function). The
//! engine that runs them (the element queues, the async wait operator, the futures-based async
//! function on an owned tokio runtime) is the runtime's (`streamtask-runtime`); both models'
//! async operators wrap it.

mod batch;
mod config;
mod key;
mod pool;
mod retry;

pub use self::batch::{AsyncBatchFunction, BatchConfig, BatchResultFuture, BatchedAsyncFunction};
pub use self::config::{AsyncConfig, AsyncConfigError, OutputMode};
pub use self::key::{AsyncKey, KeyPlace};
pub use self::pool::{
    BatchQueue, BatchedBlockingAsyncFunction, BlockingAsyncFunction, BlockingPool, PoolError,
};
pub use self::retry::{Backoff, RetryConfigError, RetryPolicy};
