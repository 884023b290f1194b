//! streamtask-legacy (in progress).
#![forbid(unsafe_code)]

mod cancel;
mod lock;
mod source;
mod task;
mod timer;

pub use crate::cancel::{CancelHook, Cancelled, CancellationToken};
pub use crate::lock::{CheckpointGuard, CheckpointLock, Fairness};
pub use crate::source::{
    CONTEXT_TIMER_OPERATOR, ContextConfigError, Emission, SourceCell, SourceContext,
    SourceContextConfig, SourceEnd, SourceFunction, SourceGuard, SourceOutput, TimeCharacteristic,
    restore_source_state, run_source,
};
pub use crate::task::{
    DEFAULT_CANCEL_GRACE, OneInputStreamTask, SourceStreamTask, TaskHandle, TaskState,
    TwoInputStreamTask,
};
pub use crate::timer::{SystemProcessingTimeService, TimerStatus};
