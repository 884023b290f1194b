//! Jobs: the DataStream-like builder, the local executor, and how a model's tasks are started.

mod builder;
mod channel_state;
mod connect;
mod environment;
mod error;
mod executor;
mod files;
mod from_source;
mod identity;
mod iterate;
mod keyed;
mod keyed_connect;
mod lock;
mod non_recoverable;
mod plan;
mod restore;
mod runtime;
mod savepoint;
mod segment;
mod sequence;
mod side_channels;
mod side_output;
mod sources;
mod spawn;
mod stall;
mod stream;
mod time;
mod wiring;

pub use self::connect::ConnectedStreams;
pub use self::environment::{JobGraph, StreamEnvironment};
pub use self::error::{AttemptFailure, JobError, SavepointDirProblem, TaskFailed};
pub use self::executor::{
    JobConfig, JobMetrics, JobPhase, JobResult, PhaseCallback, ProgressCallback, RestartStrategy,
    TaskResult,
};
pub use self::files::ContinuousFiles;
pub use self::iterate::IterativeStream;
pub use self::keyed::KeyedStream;
pub use self::keyed_connect::KeyedConnectedStreams;
pub use self::lock::{DirLock, LockError};
pub use self::non_recoverable::NonRecoverable;
pub use self::plan::{JobPlan, PlannedInput, PlannedTask, SourceAdapter};
pub use self::restore::Restore;
pub(crate) use self::runtime::RunningTask;
pub use self::savepoint::{SavepointHandle, StopWithSavepoint, rescale_savepoint};
pub use self::stall::{InputChannel, StallCallback, StallReport, TaskStall};
pub use self::stream::DataStream;
