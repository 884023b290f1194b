//! [`LegacySourceStreamTask`]: a legacy [`SourceFunction`](streamtask_legacy::SourceFunction)
//! in the mailbox model, Flink 1.10's `SourceStreamTask` with its `LegacySourceFunctionThread`,
//! and the [`TaskHandle`] it returns. The threads, mails, protocol and lifecycle are written out
//! on [`LegacySourceStreamTask`]; `body` has what each mail does under the lock, `runtime` the
//! threads, `shared` the source-exit latch, `trigger` the triggers waiting for the lock; the lifecycle and the handle are the kit's
//! ([`streamtask_runtime`]).

mod body;
mod builder;
mod runtime;
mod shared;
mod trigger;

#[cfg(loom)]
pub use self::shared::SourceExit;
#[cfg(not(loom))]
pub(crate) use self::shared::SourceExit;
#[cfg(loom)]
pub use self::trigger::PendingTrigger;
#[cfg(loom)]
pub use self::trigger::PendingTriggers;

pub use self::builder::{ChainingError, LegacySourceStreamTask};
use streamtask_runtime::TaskHandle;
