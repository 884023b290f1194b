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
//!   "scenario": "normal" | "backpressure",
//!   "checkpoint_alignment": "aligned" | "unaligned" | "aligned_timeout", // what was asked
//!   "aligned_timeout_ms": u64 | null,
//!   "models": [{
//!     "model": "legacy" | "mailbox" | "bridge",
//!     "output_digest": "hex16",     // SHA-256 (first 16 hex digits) of the sorted committed lines
//!     "output_lines": u64,
//!     "exactly_once": bool,         // committed lines == reference lines, as multisets
//!     "per_key_order": bool | null, // each customer's lines in its events' order (checked with
//!                                   // ordered and key-ordered enrichment; null when unordered)
//!     "records_per_sec": f64,       // source records / wall time of the run
//!     "elapsed_ms": u64,
//!     "checkpoint_delay_us": {"count","p50","p99","p999","max","mean"},
//!     "checkpoint_alignment": "aligned" | "unaligned" | "aligned_timeout", // what this model ran
//!     "aligned_timeout_ms": u64 | null,
//!     "checkpoint_end_to_end_us": {...}, // trigger -> completed at the coordinator
//!     "alignment_p99_us": u64, "alignment_max_us": u64, // first -> last barrier, slowest task
//!     "unaligned_checkpoints": u64,
//!     "channel_state_records": u64, "channel_state_bytes": u64, // totals
//!     "channel_state_records_per_checkpoint": f64, "channel_state_bytes_per_checkpoint": f64,
//!     "timer_lateness_us": {...}, "lock_wait_us": {...}, "mailbox_latency_us": {...},
//!     "checkpoints_completed": u64, "checkpoints_aborted": u64,
//!     "restarts": u32, "faults_fired": u32, "threads": u64,
//!     "throughput_series": [[seconds, records_per_sec], ...],
//!     "checkpoint_series": [[seconds, delay_us], ...],
//!     "checkpoint_end_to_end_series": [[id, seconds, duration_us], ...],
//!     "stalled_checkpoints": [{      // each checkpoint pending past --stall-report-ms
//!       "checkpoint", "savepoint", "model", "pending_ms", "threshold_ms", "report",
//!       "acknowledged": [task, ...],
//!       "tasks": [{"task", "runtime", "state", "activity", "mail", "operator",
//!                  "output_blocked", "inputs": [{"channel", "upstream", "barrier"}],
//!                  "lock": {"present", "holder", "last_holder", "waiting"} | null,
//!                  "async_queue": {"in_flight", "capacity"} | null}]
//!     }, ...]
//!   }]
//! }
//! ```

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};
use streamtask::StallReport;
use streamtask_core::Alignment;
use streamtask_core::metrics::LatencySummary;

/// One model's run of the demo job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelReport {
    /// `legacy`, `mailbox` or `bridge`.
    pub model: String,
    /// Digest of the committed output.
    pub output_digest: String,
    /// Committed output lines.
    pub output_lines: u64,
    /// Committed output equals the reference output.
    pub exactly_once: bool,
    /// Each customer's committed lines kept its events' order; `None` when not checked
    /// (unordered enrichment).
    #[serde(default)]
    pub per_key_order: Option<bool>,
    /// Source records per second of wall time.
    pub records_per_sec: f64,
    /// Wall time of the run.
    pub elapsed_ms: u64,
    /// From trigger call to snapshot start, over the source tasks.
    pub checkpoint_delay_us: LatencySummary,
    /// How this model's checkpoints were aligned: `aligned`, `unaligned` or `aligned_timeout`.
    #[serde(default = "aligned")]
    pub checkpoint_alignment: String,
    /// With `aligned_timeout`: after how long a barrier stops waiting and overtakes.
    #[serde(default)]
    pub aligned_timeout_ms: Option<u64>,
    /// Each completed checkpoint from its trigger to its completion at the coordinator.
    #[serde(default)]
    pub checkpoint_end_to_end_us: LatencySummary,
    /// From a task's first to its last barrier of a checkpoint: the slowest task's p99 (final
    /// attempt; tasks with one input align nothing and record zero).
    #[serde(default)]
    pub alignment_p99_us: u64,
    /// The same, the longest.
    #[serde(default)]
    pub alignment_max_us: u64,
    /// Checkpoints a task took unaligned: the most of any task (final attempt).
    #[serde(default)]
    pub unaligned_checkpoints: u64,
    /// Elements stored as channel state, summed over the tasks and checkpoints (final attempt).
    #[serde(default)]
    pub channel_state_records: u64,
    /// Their encoded bytes.
    #[serde(default)]
    pub channel_state_bytes: u64,
    /// `channel_state_records` over the checkpoints completed.
    #[serde(default)]
    pub channel_state_records_per_checkpoint: f64,
    /// `channel_state_bytes` over the checkpoints completed.
    #[serde(default)]
    pub channel_state_bytes_per_checkpoint: f64,
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
    /// Each completed checkpoint's end-to-end duration: (id, seconds since start of its
    /// trigger, microseconds).
    #[serde(default)]
    pub checkpoint_end_to_end_series: Vec<(u64, f64, u64)>,
    /// Every stalled-checkpoint report of the run (the first
    /// [`MAX_STALL_REPORTS`](crate::demo::job::MAX_STALL_REPORTS)), as the library's
    /// [`StallReport`] serializes.
    #[serde(default)]
    pub stalled_checkpoints: Vec<StallReport>,
}

fn aligned() -> String {
    "aligned".to_string()
}

/// An alignment as the report's `checkpoint_alignment` and `aligned_timeout_ms` keys name it.
pub fn alignment_keys(alignment: Alignment) -> (String, Option<u64>) {
    match alignment {
        Alignment::Aligned => (aligned(), None),
        Alignment::Unaligned => ("unaligned".to_string(), None),
        Alignment::AlignedTimeout(timeout) => (
            "aligned_timeout".to_string(),
            Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
        ),
    }
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
    /// The load: `normal` or `backpressure`.
    #[serde(default = "normal")]
    pub scenario: String,
    /// The alignment asked for (each model's own is in its entry: the legacy model's is
    /// always `aligned`).
    #[serde(default = "aligned")]
    pub checkpoint_alignment: String,
    /// With `aligned_timeout`: the timeout asked for.
    #[serde(default)]
    pub aligned_timeout_ms: Option<u64>,
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
            scenario: normal(),
            checkpoint_alignment: aligned(),
            aligned_timeout_ms: None,
            models,
        }
    }

    /// The same report, for a run under `scenario` (`normal` or `backpressure`) that asked for
    /// checkpoints aligned as `alignment` says.
    pub fn with_setup(mut self, scenario: &str, alignment: Alignment) -> Self {
        self.scenario = scenario.to_string();
        (self.checkpoint_alignment, self.aligned_timeout_ms) = alignment_keys(alignment);
        self
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
            (
                "per-key order",
                self.col(|m| match m.per_key_order {
                    Some(true) => "held".to_string(),
                    Some(false) => "BROKEN".to_string(),
                    None => "- (unordered)".to_string(),
                }),
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
                "checkpoint alignment",
                self.col(|m| {
                    let text = alignment_text(&m.checkpoint_alignment, m.aligned_timeout_ms);
                    if self.legacy_limited(m) {
                        format!("{text} (*)")
                    } else {
                        text
                    }
                }),
            ),
            (
                "checkpoint end-to-end p50",
                self.col(|m| {
                    us(
                        m.checkpoint_end_to_end_us.p50,
                        m.checkpoint_end_to_end_us.count,
                    )
                }),
            ),
            (
                "checkpoint end-to-end p99",
                self.col(|m| {
                    us(
                        m.checkpoint_end_to_end_us.p99,
                        m.checkpoint_end_to_end_us.count,
                    )
                }),
            ),
            (
                "checkpoint end-to-end max",
                self.col(|m| {
                    us(
                        m.checkpoint_end_to_end_us.max,
                        m.checkpoint_end_to_end_us.count,
                    )
                }),
            ),
            (
                "alignment time p99 (slowest task)",
                self.col(|m| us(m.alignment_p99_us, m.checkpoints_completed)),
            ),
            (
                "alignment time max",
                self.col(|m| us(m.alignment_max_us, m.checkpoints_completed)),
            ),
            (
                "unaligned checkpoints",
                self.col(|m| m.unaligned_checkpoints.to_string()),
            ),
            (
                "channel state per checkpoint",
                self.col(|m| {
                    format!(
                        "{:.1} rec, {}",
                        m.channel_state_records_per_checkpoint,
                        bytes(m.channel_state_bytes_per_checkpoint)
                    )
                }),
            ),
            (
                "channel state total",
                self.col(|m| {
                    format!(
                        "{} rec, {}",
                        m.channel_state_records,
                        bytes(m.channel_state_bytes as f64)
                    )
                }),
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
            "\n{} records, {} scenario, checkpoint every {} ms ({}), {} fault(s) planned{} (see \
             faults fired); reference digest {}",
            self.records,
            self.scenario,
            self.checkpoint_interval_ms,
            alignment_text(&self.checkpoint_alignment, self.aligned_timeout_ms),
            self.faults,
            if single { "" } else { " per model" },
            self.expected_digest
        );
        if self.models.iter().any(|m| self.legacy_limited(m)) {
            let _ = writeln!(
                out,
                "(*) legacy: its barriers overtake the queued records too, but a source's trigger \
                 waits for the checkpoint lock, which the source thread holds while it emits (also \
                 while blocked in a full send), and a task blocked in a full send takes a barrier \
                 only after that send"
            );
        }
        let exactly_once = self.models.iter().all(|m| m.exactly_once);
        let verdict = match (single, self.identical && exactly_once) {
            (true, true) => "committed output equals the reference, exactly-once held",
            (true, false) => "MISMATCH: committed output differs from the reference",
            (false, true) => "identical committed output across models, exactly-once held",
            (false, false) => "MISMATCH: see the rows marked NO / FALSE",
        };
        let order = match self
            .models
            .iter()
            .map(|m| m.per_key_order)
            .collect::<Vec<_>>()
        {
            checked if checked.contains(&Some(false)) => {
                "; MISMATCH: a customer's lines left out of order (see per-key order)"
            }
            checked if checked.iter().all(|c| *c == Some(true)) => ", per-key order held",
            _ => "",
        };
        let verdict = format!("{verdict}{order}");
        let _ = writeln!(out, "{verdict}");
        out
    }

    fn col(&self, f: impl Fn(&ModelReport) -> String) -> Vec<String> {
        self.models.iter().map(f).collect()
    }

    /// Whether `m` ran aligned checkpoints though the run asked for others (the legacy model).
    /// Whether `m` is the legacy model running checkpoints that are not aligned: the lock
    /// model's limits apply (see the note below the table).
    fn legacy_limited(&self, m: &ModelReport) -> bool {
        m.model == "legacy" && m.checkpoint_alignment != "aligned"
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

fn normal() -> String {
    "normal".to_string()
}

/// `aligned`, `unaligned`, or `aligned, unaligned after 10 ms`.
fn alignment_text(alignment: &str, timeout_ms: Option<u64>) -> String {
    match timeout_ms {
        Some(ms) => format!("aligned, unaligned after {ms} ms"),
        None => alignment.to_string(),
    }
}

/// Bytes in B, KiB or MiB, one decimal from KiB on.
fn bytes(value: f64) -> String {
    if value >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", value / (1024.0 * 1024.0))
    } else if value >= 1024.0 {
        format!("{:.1} KiB", value / 1024.0)
    } else {
        format!("{value:.0} B")
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
            checkpoint_alignment: "aligned".into(),
            checkpoint_end_to_end_us: LatencySummary {
                count: 3,
                p50: 700,
                p99: 1500,
                p999: 1500,
                max: 1500,
                mean: 800.0,
            },
            checkpoint_end_to_end_series: vec![(1, 0.05, 700), (2, 0.1, 1500)],
            ..ModelReport::default()
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
            assert!(m["checkpoint_end_to_end_us"][key].is_u64(), "{key}");
        }
        for key in [
            "alignment_p99_us",
            "alignment_max_us",
            "unaligned_checkpoints",
            "channel_state_records",
            "channel_state_bytes",
        ] {
            assert!(m[key].is_u64(), "{key}");
        }
        for key in [
            "channel_state_records_per_checkpoint",
            "channel_state_bytes_per_checkpoint",
        ] {
            assert!(m[key].is_f64(), "{key}");
        }
        assert_eq!(m["checkpoint_alignment"], "aligned");
        assert_eq!(
            m["checkpoint_end_to_end_series"][1],
            serde_json::json!([2, 0.1, 1500])
        );
        assert_eq!(v["scenario"], "normal");
    }

    #[test]
    fn the_legacy_model_running_unaligned_carries_the_lock_models_note() {
        let mut legacy = model("legacy", "x");
        legacy.checkpoint_alignment = "unaligned".into();
        let mut mailbox = model("mailbox", "x");
        mailbox.checkpoint_alignment = "unaligned".into();
        let r = CompareReport::new("d".into(), 1, 1, 0, vec![legacy, mailbox])
            .with_setup("backpressure", Alignment::Unaligned);
        let t = r.table();
        assert!(t.contains("unaligned (*)"), "{t}");
        assert!(t.contains("checkpoint lock"), "{t}");
        assert!(t.contains("backpressure scenario"), "{t}");
        let aligned = CompareReport::new("d".into(), 1, 1, 0, vec![model("legacy", "x")]);
        assert!(!aligned.table().contains("(*)"));
    }
}
