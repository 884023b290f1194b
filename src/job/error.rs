//! Why a job could not be built or run.

use streamtask_core::async_io::AsyncConfigError;
use streamtask_core::channel::{ChannelError, GateError, WriterError};
use crate::checkpoint::{ConfigError, CoordinatorError, StorageError};
use crate::sink::SinkError;

use crate::Model;

/// A job could not be built or did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A legacy `SourceFunction` under the mailbox model.
    #[error(
        "source {source_name:?} is a legacy SourceFunction, which the mailbox model cannot run on \
         its task thread; run the job with Model::Bridge, or wrap the function in \
         streamtask_bridge::HandoffReader and add it with add_reader"
    )]
    LegacySourceUnderMailbox {
        /// The source's name.
        source_name: String,
    },
    /// A new-style `SourceReader` under the legacy model.
    #[error(
        "source {source_name:?} is a new-style SourceReader, which the legacy model cannot drive; \
         run the job with Model::Mailbox or Model::Bridge, or wrap the reader in \
         streamtask_bridge::ReaderSource and add it with add_source"
    )]
    ReaderUnderLegacy {
        /// The source's name.
        source_name: String,
    },
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
}
