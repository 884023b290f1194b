//! Why a job could not be built or run.

use crate::checkpoint::{ConfigError, CoordinatorError, StorageError};
use crate::sink::SinkError;
use streamtask_core::async_io::AsyncConfigError;
use streamtask_runtime::channel::{ChannelError, GateError, WriterError};

use crate::Model;

/// A job could not be built or did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A parallelism of zero.
    #[error("{vertex:?} has parallelism 0; give every operator at least 1")]
    ZeroParallelism {
        /// The vertex.
        vertex: String,
    },
    /// Two vertices with the same name.
    #[error(
        "two parts of the job are named {0:?}; give every source, process and sink its own name"
    )]
    DuplicateName(String),
    /// A union of streams built in different environments.
    #[error(
        "the union {vertex:?} joins a stream of another StreamEnvironment; build every stream of \
         a job in one environment"
    )]
    UnionAcrossJobs {
        /// The union's vertex.
        vertex: String,
    },
    /// `side_output` on a stream that does not end in a function with side outputs.
    #[error(
        "side output {tag:?} is read from {stream:?}, which offers none; call side_output right \
         after a keyed process or a keyed connected process"
    )]
    NoSideOutputs {
        /// The operator the stream ends in.
        stream: String,
        /// The tag asked for.
        tag: String,
    },
    /// The job has no sink.
    #[error("the job has no sink; end every stream in a sink")]
    NoSink,
    /// A channel capacity of zero.
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// An input gate could not be built.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// A record writer could not be built.
    #[error(transparent)]
    Writer(#[from] WriterError),
    /// The checkpoint configuration is invalid.
    #[error(transparent)]
    CheckpointConfig(#[from] ConfigError),
    /// Checkpoint storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The coordinator refused its configuration.
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
    /// An async operator is configured wrongly.
    #[error(transparent)]
    Async(#[from] AsyncConfigError),
    /// Committing the sink output after the job finished failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// An operator that waits for its own events was chained behind a legacy source (bridge).
    #[error(transparent)]
    Chaining(#[from] streamtask_bridge::ChainingError),
    /// An iteration is built or restored wrongly.
    #[error(transparent)]
    Iteration(#[from] streamtask_runtime::IterationError),
    /// A zero restart delay or other bad executor setting.
    #[error("{0}")]
    Config(String),
    /// The model cannot run this part of the job.
    #[error("{what} cannot run under the {model} model: {fix}")]
    Unsupported {
        /// What.
        what: String,
        /// The model.
        model: Model,
        /// What to do instead.
        fix: &'static str,
    },
    /// Every attempt failed.
    #[error("the job failed {attempts} time(s) and has no restarts left; last failure: {last}")]
    Failed {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's first failure.
        last: String,
    },
    /// A start with no earlier run in the checkpoint directory found committed output in a
    /// sink's directory: output no run of this checkpoint directory accounts for (another
    /// work directory's, or one whose checkpoints were deleted). Counted with this run's, it
    /// would make the output wrong; deleted, it would be lost without the user saying so.
    #[error(
        "{} holds {files} committed output file(s) that no run in {} accounts for; move them away, \
         or delete them explicitly (--discard-state, Restore::DiscardState)",
        sink_dir.display(),
        checkpoint_dir.display()
    )]
    UnownedOutput {
        /// The sink's output directory.
        sink_dir: std::path::PathBuf,
        /// How many committed files it holds.
        files: usize,
        /// The checkpoint directory that has no run.
        checkpoint_dir: std::path::PathBuf,
    },
    /// A fresh start found an unfinished earlier run's state in the checkpoint directory.
    #[error(
        "{} holds the state of an earlier run that did not finish (latest checkpoint: {}); \
         resume it (--resume, Restore::Latest) or discard it explicitly (--discard-state, \
         Restore::DiscardState)",
        dir.display(),
        latest.map_or_else(|| "none".to_string(), |id| id.to_string())
    )]
    UnfinishedRun {
        /// The checkpoint directory.
        dir: std::path::PathBuf,
        /// Its newest completed checkpoint, if any.
        latest: Option<u64>,
    },
    /// A resume found a run that finished: its output is complete.
    #[error(
        "the run in {} finished, so there is nothing to resume; run without --resume \
         (Restore::Fresh) to start over",
        dir.display()
    )]
    NothingToResume {
        /// The checkpoint directory.
        dir: std::path::PathBuf,
    },
    /// The newest checkpoint cannot be restored, and falling back was not asked for.
    #[error(
        "newest checkpoint {id} ({}) is damaged: {source}. Nothing was committed. \
         Repair or remove it, or fall back to an older checkpoint explicitly \
         (--fallback-to-older-checkpoint, JobConfig::with_fallback_to_older), which rewinds \
         the sink output committed after that checkpoint",
        path.display()
    )]
    DamagedCheckpoint {
        /// The checkpoint's id.
        id: u64,
        /// Its directory.
        path: std::path::PathBuf,
        /// What is wrong with it.
        #[source]
        source: StorageError,
    },
    /// A checkpoint does not fit the job: other vertices or another parallelism.
    #[error(
        "checkpoint {id} was taken by a job of another shape (tasks missing from it: {missing:?}; \
         tasks only in it: {unexpected:?}); restore it into the job it was taken with, same \
         vertices and parallelism (to change the job or its parallelism, stop it with a savepoint \
         and restore that), or start fresh"
    )]
    ShapeMismatch {
        /// The checkpoint's id.
        id: u64,
        /// Tasks of the job the checkpoint has no state for.
        missing: Vec<String>,
        /// Tasks in the checkpoint the job does not have.
        unexpected: Vec<String>,
    },
    /// The work directory's disk has too little free space for what the job would write.
    #[error(
        "{} has {} MiB free, but the job needs about {} MiB; free space, choose another \
         --work-dir, or lower --records",
        path.display(),
        available / (1 << 20),
        needed.div_ceil(1 << 20)
    )]
    NotEnoughSpace {
        /// The directory.
        path: std::path::PathBuf,
        /// Bytes needed, estimated.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// The job was cancelled.
    #[error("the job was cancelled")]
    Cancelled,
    /// I/O on the work directory failed.
    #[error("work directory {path}: {source}")]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The job's parallelism does not fit its max parallelism (number of key groups).
    #[error("{vertex}: {source}")]
    MaxParallelism {
        /// The vertex.
        vertex: String,
        /// What does not fit.
        #[source]
        source: streamtask_core::keygroup::KeyGroupError,
    },
    /// Two operators have one id, so a savepoint could not tell their states apart.
    #[error(
        "two operators have the id {id:?} (an operator's id is its name unless .uid(..) sets \
         one); give one of them its own .uid(..)"
    )]
    DuplicateOperatorId {
        /// The id.
        id: String,
    },
    /// A savepoint holds state for operators the job lacks.
    #[error(
        "savepoint {} holds state for operators this job does not have: {operators:?}; \
         restore it into the job it was taken from, give the operators their old .uid(..), or \
         drop that state explicitly (--allow-non-restored-state, \
         JobConfig::with_allow_non_restored_state)",
        path.display()
    )]
    NonRestoredState {
        /// The savepoint.
        path: std::path::PathBuf,
        /// The operator ids without an operator in the job.
        operators: Vec<String>,
    },
    /// The job's max parallelism differs from the savepoint's.
    #[error(
        "savepoint {} was taken with max parallelism {savepoint}, the job has {job}; keep the \
         max parallelism (StreamEnvironment::set_max_parallelism({savepoint})): keys would \
         change key groups otherwise",
        path.display()
    )]
    MaxParallelismChanged {
        /// The savepoint.
        path: std::path::PathBuf,
        /// The savepoint's max parallelism.
        savepoint: u32,
        /// The job's.
        job: u32,
    },
    /// An operator's state cannot move to the new parallelism.
    #[error(
        "operator {operator:?}: its state from {from} subtask(s) cannot be spread over {to}: \
         {reason}"
    )]
    Rescale {
        /// The operator id.
        operator: String,
        /// Old parallelism.
        from: usize,
        /// New parallelism.
        to: usize,
        /// Why.
        reason: String,
    },
}
