//! What a timely run fails with.

use streamtask::checkpoint::StorageError;
use streamtask_core::OperatorError;

/// Why a timely run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TimelyError {
    /// Timely could not start its workers (a port in use, a peer unreachable).
    #[error(
        "start the timely workers: {0} (check the hostfile's addresses and that its ports are free)"
    )]
    Start(String),
    /// An operator failed on a worker.
    #[error(
        "worker {worker}: {source} (fix the operator; the next run restores the last complete checkpoint)"
    )]
    Operator {
        /// The worker's index.
        worker: usize,
        /// The operator's error.
        #[source]
        source: OperatorError,
    },
    /// The checkpoint storage failed.
    #[error("checkpoint storage: {0} (check the checkpoint directory)")]
    Storage(#[from] StorageError),
    /// A checkpoint lacked a task's snapshot: every worker must run the same job.
    #[error(
        "checkpoint {epoch} has {got} task snapshots, expected {expected}: run the same job on every process"
    )]
    IncompleteCheckpoint {
        /// The epoch.
        epoch: u64,
        /// Snapshots received.
        got: usize,
        /// Snapshots expected.
        expected: usize,
    },
    /// The restored checkpoint was taken with another number of workers.
    #[error(
        "the checkpoint was taken with {taken} workers, this run has {now}: run with {taken} workers (rescale through a savepoint)"
    )]
    WorkerCount {
        /// Workers of the checkpoint.
        taken: usize,
        /// Workers now.
        now: usize,
    },
    /// Preparing the sink directory failed.
    #[error("sink directory: {0} (check the output directory)")]
    Sink(#[from] streamtask::sink::SinkError),
    /// The savepoint holds state for operators this job lacks.
    #[error(
        "savepoint {} holds state for operators this job does not have: {operators:?}; restore it into the job it was taken from (the same source, operator and keyed names), or start without it",
        path.display()
    )]
    SavepointOfOtherJob {
        /// The savepoint.
        path: std::path::PathBuf,
        /// The operator ids without an operator in the job.
        operators: Vec<String>,
    },
    /// The savepoint's source read other input than this job's source reads.
    #[error(
        "savepoint {} was taken while the source read {savepoint}, but this job's source reads {job}; restore it into a job reading the same input, or start without it",
        path.display()
    )]
    SavepointOfOtherInput {
        /// The savepoint.
        path: std::path::PathBuf,
        /// What its source read.
        savepoint: String,
        /// What this job's source reads.
        job: String,
    },
    /// The savepoint cannot restore into this run for another reason (named by the source).
    #[error("restore savepoint {}: {source}", path.display())]
    Savepoint {
        /// The savepoint.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: Box<streamtask::JobError>,
    },
    /// The injected fault stopped the run (tests only).
    #[error(
        "the injected fault stopped the run: run again to restore the last complete checkpoint"
    )]
    Crashed,
    /// A worker thread panicked.
    #[error(
        "a timely worker panicked: {0} (see its message; the next run restores the last complete checkpoint)"
    )]
    Panicked(String),
}
