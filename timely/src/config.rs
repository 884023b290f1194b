//! How a timely run is set up: workers, processes, checkpoints.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How [`run`](crate::run) runs a [`TimelyJob`](crate::TimelyJob).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask_timely::TimelyConfig;
///
/// let config = TimelyConfig::new("/tmp/checkpoints")
///     .workers(2)
///     .checkpoint_interval(Duration::from_millis(20));
/// assert_eq!(config.total_workers(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct TimelyConfig {
    pub(crate) workers: usize,
    pub(crate) process: usize,
    pub(crate) addresses: Vec<String>,
    pub(crate) checkpoint_dir: PathBuf,
    pub(crate) interval: Duration,
    pub(crate) max_epoch_records: u64,
    pub(crate) crash_after: Option<(usize, u64)>,
    pub(crate) savepoint: Option<PathBuf>,
    pub(crate) stop_with_savepoint: Option<(u64, PathBuf)>,
}

impl TimelyConfig {
    /// One process with one worker, checkpoints in `checkpoint_dir` every 50 ms.
    pub fn new(checkpoint_dir: impl Into<PathBuf>) -> Self {
        TimelyConfig {
            workers: 1,
            process: 0,
            addresses: Vec::new(),
            checkpoint_dir: checkpoint_dir.into(),
            interval: Duration::from_millis(50),
            max_epoch_records: 10_000,
            crash_after: None,
            savepoint: None,
            stop_with_savepoint: None,
        }
    }

    /// Worker threads per process (at least 1).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Runs as process `process` of a cluster whose processes listen on `addresses`
    /// (`host:port`, one per process, the same list on every process).
    pub fn cluster(mut self, process: usize, addresses: Vec<String>) -> Self {
        self.process = process;
        self.addresses = addresses;
        self
    }

    /// How often the sources start a new epoch, that is, a checkpoint.
    pub fn checkpoint_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The most records a source worker reads in one epoch: it then starts the next one even
    /// before the interval passed. With the probe's lag of one epoch this bounds what is in
    /// flight.
    pub fn max_epoch_records(mut self, records: u64) -> Self {
        self.max_epoch_records = records.max(1);
        self
    }

    /// Stops the whole run (every worker of this process, at once, as a crash would) once
    /// source worker `worker` has read `records` records in this run; for tests.
    pub fn crash_after(mut self, worker: usize, records: u64) -> Self {
        self.crash_after = Some((worker, records));
        self
    }

    /// Restores the savepoint in directory `path` (the local executor's or a timely run's),
    /// rescaled to this run's workers, when the checkpoint directory holds no complete
    /// checkpoint; see the crate docs, "Savepoints".
    pub fn from_savepoint(mut self, path: impl Into<PathBuf>) -> Self {
        self.savepoint = Some(path.into());
        self
    }

    /// Stops the sources after epoch `epoch` (without ending their input) and, once
    /// checkpoint `epoch` completed and committed, writes it as a savepoint into `dir`
    /// ([`RunSummary::savepoint`](crate::RunSummary::savepoint)). An `epoch` the run starts
    /// after (a restore of a later checkpoint) stops it after its first epoch; a source whose
    /// input ends first ends as usual.
    pub fn stop_with_savepoint(mut self, epoch: u64, dir: impl Into<PathBuf>) -> Self {
        self.stop_with_savepoint = Some((epoch, dir.into()));
        self
    }

    /// Processes of the run.
    pub fn processes(&self) -> usize {
        self.addresses.len().max(1)
    }

    /// Workers over all processes.
    pub fn total_workers(&self) -> usize {
        self.workers * self.processes()
    }

    /// Where checkpoints are stored.
    pub fn checkpoint_dir(&self) -> &Path {
        &self.checkpoint_dir
    }
}
