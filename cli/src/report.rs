//! What `streamtask compare` and `streamtask run` print and write: the side-by-side table, the
//! JSON document, and the SVG plot.
//!
//! # JSON schema
//!
//! ```text
//! {
//!   "identical": bool,              // every model committed the same output (same digest)
//!   "expected_digest": "hex16",     // digest of the reference output computed without a runtime
//!   "records": u64, "checkpoint_interval_ms": u64, "faults": u32,
//!   "models": [{
//!     "model": "legacy" | "mailbox" | "bridge",
//!     "output_digest": "hex16",     // SHA-256 (first 16 hex digits) of the sorted committed lines
//!     "output_lines": u64,
//!     "exactly_once": bool,         // committed lines == reference lines, as multisets
//!     "records_per_sec": f64,       // source records / wall time of the run
//!     "elapsed_ms": u64,
//!     "checkpoint_delay_us": {"count","p50","p99","p999","max","mean"},
//!     "timer_lateness_us": {...}, "lock_wait_us": {...}, "mailbox_latency_us": {...},
//!     "checkpoints_completed": u64, "checkpoints_aborted": u64,
//!     "restarts": u32, "faults_fired": u32, "threads": u64,
//!     "throughput_series": [[seconds, records_per_sec], ...],
//!     "checkpoint_series": [[seconds, delay_us], ...]
//!   }]
//! }
//! ```

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};
use streamtask_core::metrics::LatencySummary;

/// One model's run of the demo job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelReport {
    /// `legacy`, `mailbox` or `bridge`.
    pub model: String,
    /// Digest of the committed output.
    pub output_digest: String,
    /// Committed output lines.
    pub output_lines: u64,
    /// Committed output equals the reference output.
    pub exactly_once: bool,
    /// Source records per second of wall time.
    pub records_per_sec: f64,
    /// Wall time of the run.
    pub elapsed_ms: u64,
    /// From trigger call to snapshot start, over the source tasks.
    pub checkpoint_delay_us: LatencySummary,
    /// From a timer's due time to its callback.
    pub timer_lateness_us: LatencySummary,
    /// Time acquirers waited for a checkpoint lock (legacy and bridge).
    pub lock_wait_us: LatencySummary,
    /// From a mail's enqueue to its run (mailbox and bridge).
    pub mailbox_latency_us: LatencySummary,
    /// Time the tasks waited for input, summed over the tasks, in milliseconds.
    pub idle_ms: u64,
    /// Time the tasks were backpressured (a full output, a chain that took no input), summed
    /// over the tasks, in milliseconds.
    pub backpressured_ms: u64,
    /// Checkpoints completed.
    pub checkpoints_completed: u64,
    /// Checkpoints aborted (declined or timed out).
    pub checkpoints_aborted: u64,
    /// Restarts after injected or real failures.
    pub restarts: u32,
    /// Injected faults that fired (a planned fault fires only if the run reaches its point).
    #[serde(default)]
    pub faults_fired: u32,
    /// Threads the job's tasks started.
    pub threads: u64,
    /// Throughput over time: (seconds since start, records per second).
    pub throughput_series: Vec<(f64, f64)>,
    /// Checkpoint start delays over time: (seconds since start, microseconds).
    pub checkpoint_series: Vec<(f64, u64)>,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareReport {
    /// Every model committed output with the same digest.
    pub identical: bool,
    /// Digest of the reference output.
    pub expected_digest: String,
    /// Records the source read.
    pub records: u64,
    /// Checkpoint interval.
    pub checkpoint_interval_ms: u64,
    /// Faults planned per model run (how many fired is per model: `faults_fired`).
    pub faults: u32,
    /// One entry per model, in the order they ran.
    pub models: Vec<ModelReport>,
}

impl CompareReport {
    /// Builds the report; `identical` is derived from the models' digests.
    pub fn new(
        expected_digest: String,
        records: u64,
        checkpoint_interval_ms: u64,
        faults: u32,
        models: Vec<ModelReport>,
    ) -> Self {
        let identical = models
            .windows(2)
            .all(|w| w[0].output_digest == w[1].output_digest);
        CompareReport {
            identical,
            expected_digest,
            records,
            checkpoint_interval_ms,
            faults,
            models,
        }
    }

    /// The side-by-side table.
    pub fn table(&self) -> String {
        let single = self.models.len() == 1;
        let mut rows: Vec<(&str, Vec<String>)> = vec![
            (
                "committed output digest",
                self.col(|m| m.output_digest.clone()),
            ),
            (
                // Dropped below for a single model: there are no other models to match.
                "matches the other models",
                self.col(|m| {
                    let same = self
                        .models
                        .iter()
                        .all(|o| o.output_digest == m.output_digest);
                    if same { "yes" } else { "NO" }.to_string()
                }),
            ),
            (
                "exactly-once",
                self.col(|m| if m.exactly_once { "true" } else { "FALSE" }.to_string()),
            ),
            ("committed lines", self.col(|m| m.output_lines.to_string())),
            (
                "records/s",
                self.col(|m| format!("{:.0}", m.records_per_sec)),
            ),
            (
                "checkpoints completed",
                self.col(|m| m.checkpoints_completed.to_string()),
            ),
            (
                "checkpoint start delay p50",
                self.col(|m| us(m.checkpoint_delay_us.p50, m.checkpoint_delay_us.count)),
            ),
            (
                "checkpoint start delay p99",
                self.col(|m| us(m.checkpoint_delay_us.p99, m.checkpoint_delay_us.count)),
            ),
            (
                "checkpoint start delay max",
                self.col(|m| us(m.checkpoint_delay_us.max, m.checkpoint_delay_us.count)),
            ),
            (
                "timer lateness p99",
                self.col(|m| us(m.timer_lateness_us.p99, m.timer_lateness_us.count)),
            ),
            (
                "lock wait p99",
                self.col(|m| us(m.lock_wait_us.p99, m.lock_wait_us.count)),
            ),
            (
                "mailbox latency p99",
                self.col(|m| us(m.mailbox_latency_us.p99, m.mailbox_latency_us.count)),
            ),
            (
                "idle time (all tasks)",
                self.col(|m| format!("{} ms", m.idle_ms)),
            ),
            (
                "backpressured time (all tasks)",
                self.col(|m| format!("{} ms", m.backpressured_ms)),
            ),
            ("restarts", self.col(|m| m.restarts.to_string())),
            ("faults fired", self.col(|m| m.faults_fired.to_string())),
            ("threads used", self.col(|m| m.threads.to_string())),
        ];
        if single {
            rows.retain(|(label, _)| *label != "matches the other models");
        }
        let header: Vec<String> = self.models.iter().map(|m| m.model.clone()).collect();
        rows.insert(0, ("", header));
        let label_width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        let col_width = rows
            .iter()
            .flat_map(|(_, cells)| cells.iter().map(String::len))
            .max()
            .unwrap_or(0)
            .max(8);
        let mut out = String::new();
        for (i, (label, cells)) in rows.iter().enumerate() {
            let _ = write!(out, "{label:<label_width$}");
            for cell in cells {
                let _ = write!(out, "  {cell:>col_width$}");
            }
            out.push('\n');
            if i == 0 {
                let width = label_width + cells.len() * (col_width + 2);
                out.push_str(&"-".repeat(width));
                out.push('\n');
            }
        }
        let _ = writeln!(
            out,
            "\n{} records, checkpoint every {} ms, {} fault(s) planned{} (see faults fired); \
             reference digest {}",
            self.records,
            self.checkpoint_interval_ms,
            self.faults,
            if single { "" } else { " per model" },
            self.expected_digest
        );
        let exactly_once = self.models.iter().all(|m| m.exactly_once);
        let verdict = match (single, self.identical && exactly_once) {
            (true, true) => "committed output equals the reference, exactly-once held",
            (true, false) => "MISMATCH: committed output differs from the reference",
            (false, true) => "identical committed output across models, exactly-once held",
            (false, false) => "MISMATCH: see the rows marked NO / FALSE",
        };
        let _ = writeln!(out, "{verdict}");
        out
    }

    fn col(&self, f: impl Fn(&ModelReport) -> String) -> Vec<String> {
        self.models.iter().map(f).collect()
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports serialize")
    }

    /// Writes the JSON to `path`.
    ///
    /// # Errors
    ///
    /// Any I/O error.
    pub fn write_json(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.to_json())
    }
}

fn us(value: u64, count: u64) -> String {
    if count == 0 {
        "-".to_string()
    } else if value >= 10_000 {
        format!("{:.1} ms", value as f64 / 1000.0)
    } else {
        format!("{value} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str, digest: &str) -> ModelReport {
        ModelReport {
            model: name.to_string(),
            output_digest: digest.to_string(),
            output_lines: 10,
            exactly_once: true,
            records_per_sec: 1234.5,
            elapsed_ms: 10,
            checkpoint_delay_us: LatencySummary {
                count: 3,
                p50: 5,
                p99: 20_000,
                p999: 20_000,
                max: 20_000,
                mean: 1.0,
            },
            timer_lateness_us: LatencySummary::default(),
            lock_wait_us: LatencySummary::default(),
            mailbox_latency_us: LatencySummary::default(),
            idle_ms: 0,
            backpressured_ms: 0,
            checkpoints_completed: 3,
            checkpoints_aborted: 0,
            restarts: 0,
            faults_fired: 0,
            threads: 4,
            throughput_series: vec![(0.1, 100.0)],
            checkpoint_series: vec![(0.1, 5)],
        }
    }

    #[test]
    fn identical_is_derived_from_digests() {
        let same = CompareReport::new("d".into(), 1, 1, 0, vec![model("a", "x"), model("b", "x")]);
        assert!(same.identical);
        let differ =
            CompareReport::new("d".into(), 1, 1, 0, vec![model("a", "x"), model("b", "y")]);
        assert!(!differ.identical);
        assert!(differ.table().contains("NO"));
    }

    #[test]
    fn table_shows_every_model_and_unit() {
        let r = CompareReport::new("d".into(), 1, 1, 0, vec![model("legacy", "x")]);
        let t = r.table();
        assert!(t.contains("legacy"));
        assert!(t.contains("20.0 ms"));
        assert!(t.contains("5 µs"));
        assert!(t.contains("exactly-once held"));
    }

    #[test]
    fn json_has_the_documented_keys() {
        let r = CompareReport::new("d".into(), 1, 1, 0, vec![model("mailbox", "x")]);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["identical"], true);
        let m = &v["models"][0];
        for key in ["model", "output_digest", "exactly_once", "records_per_sec"] {
            assert!(!m[key].is_null(), "{key}");
        }
        for key in ["p50", "p99", "max"] {
            assert!(m["checkpoint_delay_us"][key].is_u64(), "{key}");
        }
    }
}
