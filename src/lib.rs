//! streamtask: run stream-processing tasks under Apache Flink's checkpoint-lock and mailbox
//! threading models side by side, and the bridge between them.
//!
//! This crate is the job library: the job API ([`StreamEnvironment`], [`DataStream`]), the local
//! executor ([`JobGraph::run`]), the [`Model`] switch, checkpoints and savepoints, sources and
//! sinks. The models themselves live in `streamtask-legacy`, `streamtask-mailbox` and
//! `streamtask-bridge`, on top of `streamtask-core`. The `streamtask` command (the demo job,
//! `compare`, `run`, `soak`, `bench`, the report and the plot) is the application crate
//! `streamtask-cli`, so a job that depends on this library compiles none of its dependencies.
//!
//! Sources of your own: a split source ([`source::Source`], Flink's FLIP-27) runs under every
//! model through [`StreamEnvironment::from_source`]; the [`files`] module's `FileSource` is one.
//!
//! The job layer also owns what only jobs need: the checkpoint coordinator and checkpoint
//! storage ([`checkpoint`]) and the sinks ([`sink`]). No model crate uses them, so they live
//! here rather than in `streamtask-core`, which keeps what every model runs on (the task's side
//! of a checkpoint: barriers, snapshots, [`TaskReport`](streamtask_core::task::TaskReport)).
//!
//! A checkpoint that stays pending too long is reported as a [`StallReport`]: for every task
//! that has not acknowledged it, where its barrier is on each input channel and what its
//! threads are doing ([`CheckpointConfig::stall_report_after`](checkpoint::CheckpointConfig::stall_report_after),
//! [`JobConfig::with_stall_reports`]).

#![forbid(unsafe_code)]

pub mod checkpoint;
pub mod fault;
pub mod files;
mod job;
mod metrics;
mod model;
pub mod prelude;
pub mod sink;
pub mod source;

pub use crate::job::{
    AttemptFailure, ConnectedStreams, ContinuousFiles, DataStream, DirLock, InputChannel,
    IterativeStream, JobConfig, JobError, JobGraph, JobMetrics, JobPhase, JobPlan, JobResult,
    KeyedConnectedStreams, KeyedStream, LockError, NonRecoverable, PhaseCallback, PlannedInput,
    PlannedTask, ProgressCallback, RestartStrategy, Restore, SavepointDirProblem, SavepointHandle,
    SourceAdapter, StallCallback, StallReport, StopWithSavepoint, StreamEnvironment, TaskFailed,
    TaskResult, TaskStall, rescale_savepoint,
};
pub use crate::metrics::{MetricsRegistry, OPENMETRICS_CONTENT_TYPE, RATE_WINDOW};
pub use crate::model::{Model, UnknownModel};

/// The migration guide, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../MIGRATION.md")]
pub struct MigrationGuide;

/// The README's examples, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct Readme;
