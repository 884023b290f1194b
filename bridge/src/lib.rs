//! streamtask-bridge (being written).
#![forbid(unsafe_code)]

mod executor;
mod handoff;
pub mod porting;
mod reader_source;
mod task;

pub use crate::executor::CheckpointLockExecutor;
pub use crate::handoff::{DEFAULT_HANDOFF_CAPACITY, HandoffReader};
pub use crate::reader_source::{ReaderSource, ReaderSourceState};
pub use crate::task::{ChainingError, LegacySourceStreamTask, TaskHandle};
