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
