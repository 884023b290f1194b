//! Why a job could not be built or run.

use std::path::PathBuf;
use std::sync::Arc;

use crate::checkpoint::{
    CheckpointFailures, ConfigError, CoordinatorError, SavepointFailure, StorageError,
};
use crate::sink::SinkError;
use streamtask_core::async_io::AsyncConfigError;
use streamtask_core::task::TaskError;
use streamtask_core::task::TaskFailure;
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
    /// Unaligned checkpoints (or a restored channel state) need to encode the records that
    /// cross into a task, and their type has no encoding registered.
    #[error(
        "task {task:?} reads records of type {type_name} and the job's checkpoints are \
         unaligned (or the checkpoint it restores holds channel state), so those records must \
         be stored: register the type with `StreamEnvironment::register_channel_type::<{type_name}>()` \
         (it needs serde's Serialize and Deserialize), or keep checkpoints aligned"
    )]
    ChannelStateType {
        /// The task reading the records.
        task: String,
        /// The record type.
        type_name: &'static str,
    },
    /// A checkpoint's channel state could not be read back.
    #[error("task {task:?}: {source}")]
    ChannelState {
        /// The task restoring it.
        task: String,
        /// What was wrong.
        source: streamtask_runtime::channel::ChannelStateError,
    },
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
        /// Why the last attempt failed: a task (naming its operator), or too many checkpoint
        /// failures in a row.
        last: AttemptFailure,
    },
    /// An attempt failed in a way no restart can fix (see
    /// [`NonRecoverable`](crate::NonRecoverable)), so the job was not restarted.
    #[error(
        "the job failed in attempt {attempts} with an error a restart cannot fix, so it was not \
         restarted: {last}"
    )]
    NonRecoverable {
        /// Attempts made.
        attempts: u32,
        /// The failure, naming the task and operator where one ran user code.
        last: AttemptFailure,
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
    /// A savepoint to restore is damaged (a file truncated, corrupted or missing). Unlike a
    /// checkpoint directory, a savepoint has no older checkpoint to fall back to.
    #[error(
        "savepoint {} is damaged: {}. Nothing was restored or committed; restore another \
         savepoint, or take a new one from the job it came from",
        path.display(),
        damage(source)
    )]
    DamagedSavepoint {
        /// The savepoint's directory.
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
    /// The job was cancelled. Tasks that ignored the cancellation for their grace period are
    /// named: each left one thread behind, stuck in user code.
    #[error("the job was cancelled{}", ignored_cancellation(left_behind))]
    Cancelled {
        /// The tasks that ignored cancellation (each failed with
        /// [`TaskError::CancellationIgnored`]), with the operator each was stuck in.
        left_behind: Vec<TaskFailed>,
    },
    /// A stop-with-savepoint failed: its savepoint expired, was declined or could not be
    /// written. The tasks were cancelled; the latest checkpoint stays, so the run can be
    /// resumed.
    #[error(
        "stop-with-savepoint failed: {failure}; the job was stopped without a savepoint and \
         its latest checkpoint kept: resume it (--resume, Restore::Latest), or stop again with \
         a writable savepoint directory or a longer checkpoint timeout"
    )]
    SavepointFailed {
        /// Which savepoint, and why it was aborted.
        failure: SavepointFailure,
    },
    /// The stop-with-savepoint's directory cannot take a savepoint.
    #[error(
        "savepoint directory {}: {problem}; choose another --stop-with-savepoint directory",
        path.display()
    )]
    SavepointDirectory {
        /// The directory given.
        path: std::path::PathBuf,
        /// What is wrong with it.
        problem: SavepointDirProblem,
    },
    /// A directory the run writes (checkpoints, a sink's output) is held by another run.
    #[error(transparent)]
    Lock(#[from] super::LockError),
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
    /// A source reads other input than the source with its operator id read when the
    /// savepoint or checkpoint was taken (see `DataStream::source_identity`): its position
    /// would point into other data.
    #[error(
        "{} was taken while source {operator:?} read {savepoint}, but this job's source reads \
         {job}; restore it into a job that reads the same input (the demo: the same --records, \
         --customers and --seed), or start without it (the demo: --discard-state)",
        path.display()
    )]
    SourceMismatch {
        /// The savepoint or checkpoint.
        path: std::path::PathBuf,
        /// The source's operator id.
        operator: String,
        /// What the source read when the savepoint was taken.
        savepoint: String,
        /// What this job's source reads.
        job: String,
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

/// Why a directory cannot take savepoints ([`JobError::SavepointDirectory`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SavepointDirProblem {
    /// The path is a file.
    #[error("is a file, not a directory")]
    NotADirectory,
    /// A parent of the path is a file.
    #[error("is under {}, which is a file, not a directory", .0.display())]
    UnderAFile(PathBuf),
    /// The nearest existing directory refuses new files.
    #[error("cannot write into {}: {source}", dir.display())]
    NotWritable {
        /// The nearest existing directory on the path.
        dir: PathBuf,
        /// The error creating a file there.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The path could not be looked at.
    #[error("cannot be read: {0}")]
    Unreadable(#[source] Arc<std::io::Error>),
}

/// How a task of a job failed: which task, which operator of its chain, and why.
///
/// Displayed as `<task> (operator <name>): <cause>`, e.g. `stuck#0 (operator "spin"): the
/// source ignored cancellation ...`.
#[derive(Debug, Clone)]
pub struct TaskFailed {
    /// The task, `<vertex>#<subtask>`.
    pub task: String,
    /// The operator of the task's chain that ran user code when the task failed or was given
    /// up on, when one did (a failure of the task's source or runtime names none).
    pub operator: Option<String>,
    /// What went wrong; `None` when the task was cancelled by something other than the job.
    pub failure: Option<Arc<TaskFailure>>,
}

impl TaskFailed {
    /// The cause, if the task failed (rather than being cancelled from elsewhere).
    pub fn error(&self) -> Option<&TaskError> {
        self.failure.as_deref().map(|f| &f.error)
    }
}

impl std::fmt::Display for TaskFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.task)?;
        if let Some(operator) = &self.operator {
            write!(f, " (operator {operator:?})")?;
        }
        match &self.failure {
            Some(failure) => write!(f, ": {}", failure.error),
            None => f.write_str(" was cancelled"),
        }
    }
}

/// The tail of [`JobError::Cancelled`]'s message.
fn ignored_cancellation(left_behind: &[TaskFailed]) -> String {
    if left_behind.is_empty() {
        return String::new();
    }
    let names: Vec<String> = left_behind
        .iter()
        .map(|t| match &t.operator {
            Some(operator) => format!("{} (operator {operator:?})", t.task),
            None => t.task.clone(),
        })
        .collect();
    format!(
        "; {} ignored cancellation and left a thread behind, stuck in user code: make the \
         operator return (check for cancellation in long loops)",
        names.join(", ")
    )
}

/// Why an attempt of a job failed ([`JobError::Failed`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AttemptFailure {
    /// A task failed (the first failure that was not a consequence of another).
    Task(TaskFailed),
    /// More checkpoints failed in a row than the job tolerates
    /// ([`CheckpointConfig::tolerable_failures`](crate::checkpoint::CheckpointConfig::tolerable_failures)).
    Checkpoints(CheckpointFailures),
}

impl AttemptFailure {
    /// The failed task, if a task failed.
    pub fn task(&self) -> Option<&TaskFailed> {
        match self {
            AttemptFailure::Task(task) => Some(task),
            AttemptFailure::Checkpoints(_) => None,
        }
    }

    /// Whether it is a fault the run injected on purpose ([`FaultPlan`](crate::fault::FaultPlan)).
    pub fn is_injected(&self) -> bool {
        crate::fault::is_injected(&self.to_string())
    }
}

impl std::fmt::Display for AttemptFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptFailure::Task(task) => task.fmt(f),
            AttemptFailure::Checkpoints(failures) => failures.fmt(f),
        }
    }
}

/// What is wrong with a damaged file, without the advice a checkpoint's own message gives (to
/// fall back to an older checkpoint), which a savepoint cannot follow.
fn damage(source: &StorageError) -> String {
    match source {
        StorageError::Truncated {
            path,
            expected,
            actual,
        } => format!(
            "{} is truncated ({actual} of {expected} bytes)",
            path.display()
        ),
        StorageError::Corrupted { path, reason } => {
            format!("{} is corrupted ({reason})", path.display())
        }
        StorageError::MissingFile { path } => format!("{} is missing", path.display()),
        other => other.to_string(),
    }
}
