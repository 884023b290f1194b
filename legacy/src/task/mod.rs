//! Legacy tasks: [`SourceStreamTask`], [`OneInputStreamTask`], [`TwoInputStreamTask`], and the
//! [`TaskHandle`] every one of them returns.
//!
//! # Threads
//!
//! | thread | name | does | under the lock |
//! |---|---|---|---|
//! | task | `<task>` | restore + open; the source's `run` or `while running && process_input()`; end of input; teardown | open, per emit / per record, finish, close |
//! | timer | `<task>-timer` | processing-time timers ([`SystemProcessingTimeService`](crate::SystemProcessingTimeService)) | per timer |
//! | async calls | `<task>-async-calls` | checkpoint triggers (source tasks), completion and abort notices, operator events | per call |
//!
//! Operator events (an [`EventSender`](streamtask_core::operator::EventSender) used from a
//! foreign thread) are queued to the async-calls thread, which delivers each under the lock and
//! then notifies the lock's condition. Queueing is deliberate: the lock is not reentrant, and an
//! operator may send an event while its own task thread holds the lock.
//!
//! Barrier-triggered checkpoints of input tasks run on the task thread, when the gate reports
//! the barrier aligned, as Flink's `getNextNonBlocked` did.
//!
//! # Lifecycle, cancel and join
//!
//! The kit's: one [`TaskState`] machine and one cancel/join contract for every model (see
//! [`TaskHandle`]). What this model adds: the stop hook cancels the source's
//! [`CancellationToken`](crate::CancellationToken) (its flag, its hooks closing sockets, its
//! sleeps, the lock's condition and the task thread's gate wait all notice), so a source that
//! blocks while holding the lock is reached too.
//!
//! Teardown, on every path: under the lock, quiesce the timers and close the chain; then shut
//! the timer thread down and stop the async-calls thread, joining both; then the task thread
//! reports the terminal state and ends. [`TaskHandle::join`] joins the task thread.

mod async_wait;
mod body;
mod input_task;
mod iteration;
#[cfg(loom)]
pub mod model_check;
mod runtime;
mod source_task;

pub use self::async_wait::{AsyncChainError, AsyncHead, AsyncWaitStreamTask, NoChain};
pub use self::input_task::{InputStreamTask, OneInputStreamTask, TwoInputStreamTask};
pub use self::iteration::IterationHeadStreamTask;
pub use self::source_task::{SourceStreamTask, SourceTaskParts};
