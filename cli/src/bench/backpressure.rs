//! The backpressure rows of `streamtask bench`: the demo job under
//! [`Scenario::Backpressure`], each model with aligned checkpoints and the mailbox and bridge
//! models with unaligned ones too, and each completed checkpoint's end-to-end duration
//! (trigger to completion at the coordinator, [`EndToEnd`](crate::demo::checkpoints::EndToEnd)).
//!
//! The runs share one work directory and one generated data set; each starts over
//! ([`Restore::DiscardState`]) and must commit the reference output, or the bench panics: a
//! checkpoint duration of a wrong run means nothing.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use hdrhistogram::Histogram;
use streamtask::{JobConfig, Model, Restore};
use streamtask_core::Alignment;

use crate::demo::data::DemoData;
use crate::demo::job::{DemoJob, Scenario};

/// One run of the backpressure rows: a model and how its checkpoints are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runner {
    /// The model.
    pub model: Model,
    /// Its checkpoints' alignment.
    pub alignment: Alignment,
}

/// Every runner, in the order of a round (the next round runs them backwards).
pub const RUNNERS: [Runner; 5] = [
    Runner {
        model: Model::Legacy,
        alignment: Alignment::Aligned,
    },
    Runner {
        model: Model::Mailbox,
        alignment: Alignment::Aligned,
    },
    Runner {
        model: Model::Mailbox,
        alignment: Alignment::Unaligned,
    },
    Runner {
        model: Model::Bridge,
        alignment: Alignment::Aligned,
    },
    Runner {
        model: Model::Bridge,
        alignment: Alignment::Unaligned,
    },
];

/// The demo job of the backpressure rows, in a work directory of its own (removed on drop).
#[derive(Debug)]
pub struct BackpressureJob {
    job: DemoJob,
}

impl BackpressureJob {
    /// Generates `orders` orders in a fresh temporary work directory, checkpointing every
    /// `interval`.
    ///
    /// # Panics
    ///
    /// If the data cannot be generated.
    pub fn new(orders: u64, interval: Duration) -> Self {
        let work_dir: PathBuf = std::env::temp_dir().join(format!(
            "streamtask-bench-backpressure-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&work_dir);
        let data = DemoData {
            orders,
            customers: 500,
            seed: 42,
        };
        let mut job = DemoJob::new(data, work_dir);
        job.scenario = Scenario::Backpressure;
        job.checkpoint_interval = interval;
        job.restarts = 0;
        job.prepare_with(&AtomicBool::new(false), || {})
            .expect("the bench's demo data is generated");
        BackpressureJob { job }
    }

    /// Runs `runner` once and returns its checkpoints' end-to-end durations, in microseconds.
    ///
    /// # Panics
    ///
    /// If the run fails or its committed output is not the reference.
    pub fn run(&self, runner: Runner) -> Vec<u64> {
        let mut job = self.job.clone();
        job.checkpoint_alignment = runner.alignment;
        let config = JobConfig::new(&job.work_dir).with_restore(Restore::DiscardState);
        let run = job
            .run(runner.model, config)
            .unwrap_or_else(|e| panic!("{}: the backpressure run failed: {e}", runner.model));
        assert!(
            run.exactly_once,
            "{}: the backpressure run's output differs from the reference",
            runner.model
        );
        run.end_to_end
            .series
            .iter()
            .map(|c| c.duration_us)
            .collect()
    }
}

impl Drop for BackpressureJob {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.job.work_dir);
    }
}

/// Every round's end-to-end durations of one runner, pooled (microseconds).
#[derive(Debug)]
pub struct PooledDurations(Histogram<u64>);

impl Default for PooledDurations {
    fn default() -> Self {
        PooledDurations(
            Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
        )
    }
}

impl PooledDurations {
    /// Adds one run's durations.
    pub fn add(&mut self, durations: &[u64]) {
        for &us in durations {
            self.0.saturating_record(us.max(1));
        }
    }

    /// Checkpoints pooled.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The pooled p99, in microseconds; `NaN` if no checkpoint completed.
    pub fn p99_us(&self) -> f64 {
        if self.0.is_empty() {
            f64::NAN
        } else {
            self.0.value_at_quantile(0.99) as f64
        }
    }
}
