//! The demo job on timely against the local mailbox executor: `streamtask bench`'s
//! `timely_vs_local_mailbox` row.
//!
//! The data (orders file and customer database) is generated once; one round runs the demo job
//! three times on it, each from a clean directory, each checkpointing at the same interval and
//! committing through the two-phase file sink: the local executor under
//! [`Model::Mailbox`], timely in this process on 1 worker
//! ([`DemoJob::timely_job`], [`DemoJob::timely_config`]), and timely as 2 worker processes of
//! this program started as `run --engine timely` starts them
//! ([`DemoJob::timely_worker_args`]: `streamtask timely-demo-worker`, one worker each, on
//! loopback ports). Records/s are orders over wall time, from the run's start to the end of its
//! last commit (for 2 processes that includes their start-up and timely's connection set-up,
//! whose listener polls for peers once a second); reading and checking the output is not
//! timed. The local run must commit the data's reference output and each timely run the same
//! digest, so a figure is never of a wrong run.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use streamtask::sink::read_committed;
use streamtask::{JobConfig, Model};
use streamtask_timely::Cluster;

use super::timely::TimelyRound;
use crate::demo::data::DemoData;
use crate::demo::digest;
use crate::demo::job::DemoJob;

/// The checkpoint interval of every run (the demo's default).
const INTERVAL: Duration = Duration::from_millis(50);

/// The demo job's data, written once, and the runs of a round.
#[derive(Debug)]
pub struct DemoTimelyBench {
    job: DemoJob,
    _dir: tempfile::TempDir,
}

impl DemoTimelyBench {
    /// Generates `orders` orders (500 customers) and their customer database in a fresh
    /// temporary work directory, removed on drop.
    ///
    /// # Errors
    ///
    /// Generating the data failed.
    pub fn new(orders: u64) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("create the work directory: {e}"))?;
        let data = DemoData {
            orders,
            customers: 500,
            seed: 42,
        };
        let mut job = DemoJob::new(data, dir.path());
        job.checkpoint_interval = INTERVAL;
        // A failure is a wrong figure, not something to recover from.
        job.restarts = 0;
        job.prepare_with(&AtomicBool::new(false), || {})
            .map_err(|e| format!("generate the demo data: {e}"))?;
        Ok(DemoTimelyBench { job, _dir: dir })
    }

    /// One round: the local mailbox run, timely on 1 process, timely on 2 processes, in that
    /// order.
    ///
    /// # Errors
    ///
    /// A run failed, the local run did not commit the reference output, or a timely run
    /// committed another digest than the local run.
    pub fn round(&self) -> Result<TimelyRound, String> {
        let job = &self.job;
        let orders = job.data.orders as f64;
        let clear = |dir: &Path| -> Result<(), String> {
            if dir.exists() {
                std::fs::remove_dir_all(dir)
                    .map_err(|e| format!("clear {}: {e}", dir.display()))?;
            }
            Ok(())
        };

        clear(&job.model_dir(Model::Mailbox))?;
        let started = Instant::now();
        let mut ended = None;
        let run = job
            .run_with(Model::Mailbox, JobConfig::new(&job.work_dir), || {
                ended = Some(Instant::now());
            })
            .map_err(|e| format!("the local mailbox run: {e}"))?;
        let seconds = ended.map_or_else(|| started.elapsed(), |e| e - started);
        if !run.exactly_once {
            return Err(format!(
                "the local mailbox run committed {} lines, not the reference (digest {})",
                run.committed.len(),
                run.digest
            ));
        }
        let local = orders / seconds.as_secs_f64().max(1e-9);

        clear(&job.timely_dir())?;
        let started = Instant::now();
        streamtask_timely::run(
            job.timely_job().map_err(|e| e.to_string())?,
            &job.timely_config(1),
        )
        .map_err(|e| format!("the timely run on 1 process: {e}"))?;
        let one = orders / started.elapsed().as_secs_f64().max(1e-9);
        self.check("1 process", &run.digest)?;

        clear(&job.timely_dir())?;
        std::fs::create_dir_all(job.timely_dir())
            .map_err(|e| format!("create the timely directory: {e}"))?;
        let program = std::env::current_exe().map_err(|e| format!("find this program: {e}"))?;
        let owned = job.timely_worker_args(1);
        let args: Vec<&str> = owned.iter().map(String::as_str).collect();
        let started = Instant::now();
        let mut cluster = Cluster::start(&program, &args, 2, &job.timely_dir())
            .map_err(|e| format!("start the worker processes: {e}"))?;
        let statuses = cluster
            .wait()
            .map_err(|e| format!("wait for the worker processes: {e}"))?;
        let two = orders / started.elapsed().as_secs_f64().max(1e-9);
        if let Some((i, status)) = statuses.iter().enumerate().find(|(_, s)| !s.success()) {
            return Err(format!("timely worker process {i} failed: {status}"));
        }
        self.check("2 processes", &run.digest)?;

        Ok(TimelyRound { local, one, two })
    }

    /// Checks that the timely run on `what` committed the output whose digest is `expected`.
    fn check(&self, what: &str, expected: &str) -> Result<(), String> {
        let mut lines = read_committed(self.job.timely_output_dir())
            .map_err(|e| format!("read the output of the timely run on {what}: {e}"))?;
        lines.sort_unstable();
        let got = digest(&lines);
        if got != expected {
            return Err(format!(
                "the timely run on {what} committed {} lines, digest {got}; the local run's is {expected}",
                lines.len()
            ));
        }
        Ok(())
    }
}
