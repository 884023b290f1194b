//! The sample job (`streamtask_timely::sample`) on timely against the local mailbox executor:
//! `streamtask bench`'s `timely_sample_vs_local_mailbox` row (the demo job's row is
//! [`timely_demo`](super::timely_demo)).
//!
//! One round runs the same input three times, each from a clean directory, each committing
//! through the two-phase file sink with checkpoints every 50 ms (timely's epochs capped at
//! 100,000 records per source worker): the local executor (mailbox model,
//! parallelism 1), timely in this process on 1 worker, and timely as 2 worker processes
//! of this program (`streamtask timely-worker`, one worker each, on loopback ports). Records/s
//! are input records over wall time, process start-up included (for 2 processes that is
//! timely's connection set-up, whose listener polls for peers once a second); every run's
//! committed output is checked against the data, so a figure is never of a wrong run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use streamtask::sink::read_committed;
use streamtask::{JobConfig, Model};
use streamtask_timely::sample::{
    expected_output, local_job, read_round_robin, timely_job, write_input,
};
use streamtask_timely::{Cluster, TimelyConfig, run as run_timely};

/// The checkpoint interval of every run.
const INTERVAL: Duration = Duration::from_millis(50);

/// The most records a timely source worker reads in one epoch (its flow-control bound): high
/// enough that its checkpoints follow the 50 ms interval, as the local executor's do. At the
/// engine's default (10,000) a fast source ends an epoch every few milliseconds, and the run
/// measures a durable checkpoint per 10,000 records instead of the engine.
const EPOCH_RECORDS: u64 = 100_000;

/// Input files (each source worker reads some).
const FILES: usize = 4;

/// One round's records/s.
#[derive(Debug, Clone, Copy)]
pub struct TimelyRound {
    /// The local mailbox executor.
    pub local: f64,
    /// Timely, 1 process, 1 worker.
    pub one: f64,
    /// Timely, 2 processes, 1 worker each.
    pub two: f64,
}

/// The input of every round, written once.
#[derive(Debug)]
pub struct TimelyBench {
    dir: tempfile::TempDir,
    inputs: Vec<PathBuf>,
    expected: Vec<String>,
    records: usize,
}

impl TimelyBench {
    /// Writes `records` input records (rounded up to a multiple of the 4 input files).
    ///
    /// # Errors
    ///
    /// Writing the input failed.
    pub fn new(records: usize) -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let inputs = write_input(&dir.path().join("in"), FILES, records.div_ceil(FILES))?;
        let expected = expected_output(&read_round_robin(&inputs)?);
        Ok(TimelyBench {
            dir,
            inputs,
            expected,
            records: records.div_ceil(FILES) * FILES,
        })
    }

    /// One round: the three runs, in that order.
    ///
    /// # Errors
    ///
    /// A run failed or committed other output than the data says.
    pub fn round(&self) -> Result<TimelyRound, String> {
        let work = self.dir.path();
        let fresh = |sub: &str| -> Result<PathBuf, String> {
            let p = work.join(sub);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(|e| format!("clear {}: {e}", p.display()))?;
            }
            Ok(p)
        };
        let local = {
            let (out, chk) = (fresh("local-out")?, fresh("local-chk")?);
            let started = Instant::now();
            let job = local_job(Model::Mailbox, self.inputs.clone(), 1, &out)
                .map_err(|e| e.to_string())?;
            job.run(&JobConfig::new(&chk).with_checkpoints(Some(
                streamtask::checkpoint::CheckpointConfig::new(INTERVAL),
            )))
            .map_err(|e| format!("the local run: {e}"))?;
            self.rate(started, &out)?
        };
        let one = {
            let (out, chk) = (fresh("one-out")?, fresh("one-chk")?);
            let started = Instant::now();
            let config = TimelyConfig::new(chk)
                .checkpoint_interval(INTERVAL)
                .max_epoch_records(EPOCH_RECORDS);
            run_timely(timely_job(self.inputs.clone(), &out), &config)
                .map_err(|e| format!("the timely run: {e}"))?;
            self.rate(started, &out)?
        };
        let two = {
            let (out, chk) = (fresh("two-out")?, fresh("two-chk")?);
            let program = std::env::current_exe().map_err(|e| format!("find this program: {e}"))?;
            let owned = [
                "timely-worker".to_string(),
                "--inputs".into(),
                path(&work.join("in")),
                "--out".into(),
                path(&out),
                "--checkpoints".into(),
                path(&chk),
                "--interval-ms".into(),
                INTERVAL.as_millis().to_string(),
                "--max-epoch-records".into(),
                EPOCH_RECORDS.to_string(),
            ];
            let args: Vec<&str> = owned.iter().map(String::as_str).collect();
            let started = Instant::now();
            let mut cluster = Cluster::start(&program, &args, 2, work)
                .map_err(|e| format!("start the worker processes: {e}"))?;
            let statuses = cluster
                .wait()
                .map_err(|e| format!("wait for the worker processes: {e}"))?;
            if let Some(failed) = statuses.iter().find(|s| !s.success()) {
                return Err(format!("a timely worker process failed: {failed}"));
            }
            self.rate(started, &out)?
        };
        Ok(TimelyRound { local, one, two })
    }

    /// Records/s of a run that started at `started` and committed into `out`, once its output
    /// is checked.
    fn rate(&self, started: Instant, out: &Path) -> Result<f64, String> {
        let seconds = started.elapsed().as_secs_f64();
        let mut lines = read_committed(out).map_err(|e| format!("read the output: {e}"))?;
        lines.sort();
        if lines != self.expected {
            return Err(format!(
                "{} committed {} lines, the data says {}",
                out.display(),
                lines.len(),
                self.expected.len()
            ));
        }
        Ok(self.records as f64 / seconds.max(1e-9))
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}
