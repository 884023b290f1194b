//! What a job needs, in one import: `use streamtask::prelude::*;`.
//!
//! | concept | items | lives in |
//! |---|---|---|
//! | building and running a job | [`StreamEnvironment`], [`DataStream`], [`KeyedStream`], [`JobGraph`], [`JobConfig`], [`RestartStrategy`], [`Restore`], [`Model`], [`JobError`] | this crate |
//! | the printable plan | [`JobPlan`], [`PlannedTask`], [`SourceAdapter`] | this crate |
//! | checkpoints | [`CheckpointConfig`] | this crate |
//! | sinks | [`CollectHandle`], [`TwoPhaseCommitFileSink`] | this crate |
//! | legacy sources | [`SourceFunction`], [`SourceContext`], [`SourceContextConfig`] | `streamtask-legacy` |
//! | new-style sources | [`SourceReader`], [`ReaderOutput`], [`InputStatus`] | `streamtask-mailbox` |
//! | records, time, errors | [`StreamRecord`], [`Watermark`], [`OperatorError`], [`Clock`], [`InterruptibleTimers`] | `streamtask-core` |
//! | operators and functions | [`Operator`], [`Context`], [`KeyedProcessFunction`], [`KeyedContext`], [`CoProcessFunction`], [`EndOfInputContext`], [`AsyncFunction`], [`ResultFuture`], [`AsyncConfig`], [`TimeDomain`] | `streamtask-core` |
//! | side outputs | [`OutputTag`] (read with [`DataStream::side_output`]) | `streamtask-core` |
//! | event time after the source, time in map-like functions | [`WatermarkStrategy`], [`RecordContext`] | `streamtask-core` |
//! | two keyed inputs | [`KeyedConnectedStreams`] | this crate |
//! | partitioning | [`Partitioner`] | `streamtask-core` |

pub use crate::checkpoint::CheckpointConfig;
pub use crate::job::{
    ConnectedStreams, DataStream, IterativeStream, JobConfig, JobError, JobGraph, JobPlan,
    KeyedConnectedStreams, KeyedStream, PlannedTask, RestartStrategy, Restore, SavepointHandle,
    SourceAdapter, StopWithSavepoint, StreamEnvironment,
};
pub use crate::model::Model;
pub use crate::sink::{CollectHandle, TwoPhaseCommitFileSink};
pub use streamtask_core::async_io::AsyncConfig;
pub use streamtask_core::function::{
    AsyncFunction, CoProcessFunction, KeyedProcessFunction, ResultFuture, TimeDomain,
};
pub use streamtask_core::operator::{
    Context, EndOfInputContext, KeyedContext, Operator, OutputTag, RecordContext, WatermarkStrategy,
};
pub use streamtask_core::time::{Clock, InterruptibleTimers};
pub use streamtask_core::{OperatorError, StreamRecord, Watermark};
pub use streamtask_legacy::{SourceContext, SourceContextConfig, SourceFunction};
pub use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};
pub use streamtask_runtime::channel::Partitioner;
