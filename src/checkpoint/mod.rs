//! Checkpoints: where completed ones are stored ([`CheckpointStorage`]) and who decides when one
//! starts, completes or is aborted ([`CheckpointCoordinator`], run on its own thread by a
//! [`CoordinatorDriver`]).
//!
//! # How a checkpoint runs
//!
//! 1. The coordinator's interval elapses: it hands out a [`CoordinatorAction::Trigger`] with a
//!    new [`CheckpointBarrier`](streamtask_core::CheckpointBarrier); the executor calls
//!    `trigger_checkpoint` on the source tasks, and the barrier flows through the channels.
//! 2. Every task snapshots its state when the barrier reaches it and reports a
//!    [`TaskReport`](streamtask_core::task::TaskReport) through its
//!    [`CheckpointResponder`](streamtask_core::task::CheckpointResponder): an acknowledgement carrying its
//!    [`TaskSnapshot`], or a decline.
//! 3. Once every task acknowledged, the coordinator stores a [`CompletedCheckpoint`] and hands
//!    out [`CoordinatorAction::Complete`]; the executor forwards `notify_checkpoint_complete` to
//!    every task (two-phase sinks commit). A decline, a timeout, a finished task or a newer
//!    completed checkpoint instead produce [`CoordinatorAction::Abort`], forwarded as
//!    `notify_checkpoint_aborted`.
//! 4. After a failure the executor restarts every task from
//!    [`CheckpointStorage::latest`]: the newest intact completed checkpoint.
//!
//! # A checkpoint's states
//!
//! | from | event | to | action |
//! |---|---|---|---|
//! | - | interval and minimum pause passed, fewer than max-concurrent pending | pending | `Trigger` |
//! | pending | acknowledgement, others missing | pending | - |
//! | pending | last acknowledgement, stored | completed | `Abort` (subsumed) for older pending ones, then `Complete` |
//! | pending | last acknowledgement, storing failed | aborted | `Abort` |
//! | pending | decline | aborted | `Abort` |
//! | pending | timeout | aborted | `Abort` |
//! | pending | a newer checkpoint completed | aborted | `Abort` |
//! | pending | a task finished | aborted | `Abort` |
//! | completed, aborted | any report | unchanged | none (logged) |
//!
//! A checkpoint pending for longer than [`CheckpointConfig::stall_report_after`] is also
//! handed out as a [`StalledCheckpoint`] ([`CheckpointCoordinator::stalled`]), and again every
//! such period while it stays pending; the driver gives it to its stall callback, and the job
//! completes it into a [`StallReport`](crate::StallReport). A report changes nothing: the
//! checkpoint stays pending until it completes, is aborted or expires.

mod coordinator;
mod directory;
mod driver;
mod error;
mod format;
mod savepoint;
mod storage;

use std::collections::BTreeMap;

use streamtask_core::state::TaskSnapshot;

pub use self::coordinator::{
    AbortReason, CheckpointConfig, CheckpointCoordinator, CheckpointFailures, CheckpointStats,
    CheckpointStatsSummary, CheckpointTiming, ConfigError, CoordinatorAction, CoordinatorError,
    SavepointFailure, SavepointWriter, StalledCheckpoint,
};
pub use self::driver::{CoordinatorDriver, DriverError};
pub use self::error::{Corruption, StorageError};
pub use self::savepoint::{
    SAVEPOINT_FORMAT_VERSION, Savepoint, SavepointMetadata, StateEntry, VertexShape,
};
pub use self::storage::CheckpointStorage;

/// The checkpoint directory format (state files and manifest) this version writes and reads:
/// a checkpoint that loads has this version.
pub const CHECKPOINT_FORMAT_VERSION: u16 = format::VERSION;

/// A checkpoint every task acknowledged: the state of the whole job at one barrier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedCheckpoint {
    /// The checkpoint's id.
    pub id: u64,
    /// Processing time at which the coordinator triggered it, in milliseconds.
    pub timestamp: i64,
    /// Each task's snapshot, by task name.
    pub tasks: BTreeMap<String, TaskSnapshot>,
}

impl CompletedCheckpoint {
    /// The snapshot of `task`, if it took part.
    pub fn task(&self, task: &str) -> Option<&TaskSnapshot> {
        self.tasks.get(task)
    }
}
