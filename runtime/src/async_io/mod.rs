//! The async engine: the element queues, the engine every model's async operator runs on, the
//! async wait operator, and the futures-based async function on an owned tokio runtime.
//!
//! Both models' async operators (the legacy one with its emitter thread, the mailbox one with
//! completion mails) wrap these; neither re-implements them. What a user configures and writes
//! ([`AsyncConfig`](streamtask_core::async_io::AsyncConfig), retry policies, the blocking pool,
//! [`AsyncFunction`](streamtask_core::function::AsyncFunction)) is core's.

mod engine;
#[cfg(not(loom))]
mod future_fn;
mod key_lanes;
mod operator;
mod queue;
#[cfg(not(loom))]
mod tokio_runtime;

pub use self::engine::AsyncWaitEngine;
#[cfg(not(loom))]
pub use self::future_fn::{FutureAsyncFunction, FutureCallError};
pub use self::operator::AsyncWaitOperator;
pub use self::queue::{ElementQueue, QueueFull, QueueOutput, QueuedInput};
#[cfg(not(loom))]
pub use self::tokio_runtime::{TokioRuntime, TokioRuntimeError};
