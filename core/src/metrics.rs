//! Counters and latency histograms, and the set every task keeps ([`TaskMetrics`]).
//!
//! Counters are single atomics (relaxed: they are statistics, not synchronization). Latency
//! histograms are [hdrhistogram]s in microseconds, 3 significant digits, behind a mutex; they are
//! recorded per checkpoint, per mail, per timer or per lock acquisition, never on a path that
//! would not otherwise synchronize.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use streamtask_core::metrics::TaskMetrics;
//!
//! let m = TaskMetrics::new("map-1");
//! m.records_in.add(3);
//! m.checkpoint_delay.record(Duration::from_micros(250));
//! let s = m.summary();
//! assert_eq!(s.records_in, 3);
//! assert_eq!(s.checkpoint_delay_us.count, 1);
//! assert!(s.checkpoint_delay_us.p50 >= 249 && s.checkpoint_delay_us.p50 <= 251);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicU64, Ordering};

/// A monotonically growing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero.
    pub fn new() -> Self {
        Counter::default()
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        // Relaxed: a statistic read after the fact, ordered by whatever joins the threads.
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Largest value a histogram tracks: one hour in microseconds. Larger values are clamped.
const MAX_MICROS: u64 = 3_600_000_000;

/// A latency distribution in microseconds.
pub struct LatencyHistogram {
    inner: Mutex<Histogram<u64>>,
}

impl LatencyHistogram {
    /// An empty histogram (1 us to 1 h, 3 significant digits).
    pub fn new() -> Self {
        LatencyHistogram {
            inner: Mutex::new(
                Histogram::new_with_bounds(1, MAX_MICROS, 3)
                    .expect("static histogram bounds are valid"),
            ),
        }
    }

    /// Records one latency.
    #[inline]
    pub fn record(&self, latency: Duration) {
        self.record_micros(u64::try_from(latency.as_micros()).unwrap_or(MAX_MICROS));
    }

    /// Records one latency given in microseconds (clamped to 1 us ..= 1 h).
    pub fn record_micros(&self, micros: u64) {
        self.inner
            .lock()
            .saturating_record(micros.clamp(1, MAX_MICROS));
    }

    /// Adds every value of `other` to this histogram.
    pub fn merge(&self, other: &LatencyHistogram) {
        let other = other.inner.lock().clone();
        // Both have the same bounds, so adding cannot fail.
        let _ = self.inner.lock().add(other);
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.inner.lock().len()
    }

    /// Percentiles and extremes of what was recorded.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary::of(&self.inner.lock())
    }

    /// A copy of the underlying histogram.
    pub fn to_histogram(&self) -> Histogram<u64> {
        self.inner.lock().clone()
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

impl fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("summary", &self.summary())
            .finish()
    }
}

/// A latency histogram that also remembers when each value was recorded (the newest
/// [`TimedHistogram::MAX_SAMPLES`]), so a run can plot each checkpoint's delay over time.
/// Meant for rare events (one per checkpoint), not per record.
#[derive(Debug, Default)]
pub struct TimedHistogram {
    histogram: LatencyHistogram,
    samples: Mutex<std::collections::VecDeque<(std::time::Instant, u64)>>,
}

impl TimedHistogram {
    /// Samples kept for plotting; older ones are dropped (the histogram keeps counting them).
    pub const MAX_SAMPLES: usize = 100_000;

    /// An empty histogram.
    pub fn new() -> Self {
        TimedHistogram::default()
    }

    /// Records one latency, now.
    pub fn record(&self, latency: Duration) {
        self.record_micros(u64::try_from(latency.as_micros()).unwrap_or(MAX_MICROS));
    }

    /// Records one latency in microseconds, now.
    pub fn record_micros(&self, micros: u64) {
        self.histogram.record_micros(micros);
        let mut samples = self.samples.lock();
        if samples.len() == Self::MAX_SAMPLES {
            samples.pop_front();
        }
        samples.push_back((std::time::Instant::now(), micros));
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.histogram.count()
    }

    /// Percentiles and extremes.
    pub fn summary(&self) -> LatencySummary {
        self.histogram.summary()
    }

    /// The histogram part.
    pub fn histogram(&self) -> &LatencyHistogram {
        &self.histogram
    }

    /// The newest value recorded, in microseconds; `None` before the first.
    pub fn last_micros(&self) -> Option<u64> {
        self.samples.lock().back().map(|&(_, micros)| micros)
    }

    /// The kept samples: when, and how many microseconds.
    pub fn samples(&self) -> Vec<(std::time::Instant, u64)> {
        self.samples.lock().iter().copied().collect()
    }
}

/// Percentiles of a latency histogram, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Number of values.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest value.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

impl LatencySummary {
    /// The summary of `histogram` (all zeros when empty).
    pub fn of(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: histogram.len(),
            p50: histogram.value_at_quantile(0.50),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
            max: histogram.max(),
            mean: histogram.mean(),
        }
    }
}

impl fmt::Display for LatencySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n={} p50={}us p99={}us p99.9={}us max={}us",
            self.count, self.p50, self.p99, self.p999, self.max
        )
    }
}

/// What every task measures, whatever its model. Shared (`Arc`) between the task's threads and
/// whoever reads it.
#[derive(Debug, Default)]
pub struct TaskMetrics {
    /// The task's name.
    pub name: String,
    /// Records that entered the chain.
    pub records_in: Counter,
    /// Records that left the chain into the task's output.
    pub records_out: Counter,
    /// Checkpoints this task snapshotted.
    pub checkpoints: Counter,
    /// From the trigger call (or the last barrier's arrival) to the start of the snapshot.
    pub checkpoint_delay: TimedHistogram,
    /// Duration of the synchronous part of a snapshot.
    pub checkpoint_duration: LatencyHistogram,
    /// From the first to the last barrier of a checkpoint on a multi-input task.
    pub alignment: LatencyHistogram,
    /// Checkpoints this task took unaligned (from the start, or after its aligned timeout).
    pub unaligned_checkpoints: Counter,
    /// Elements stored as channel state (records and watermarks a barrier overtook), over all
    /// checkpoints.
    pub channel_state_records: Counter,
    /// Encoded bytes of that channel state.
    pub channel_state_bytes: Counter,
    /// Mailbox model: from a mail's enqueue to the start of its run, sampled (one mail in
    /// `streamtask_mailbox::MAILBOX_LATENCY_SAMPLE` per putting thread; checkpoint triggers
    /// that came without a mail always, see [`count_trigger_as_mail`](Self::count_trigger_as_mail)).
    pub mailbox_latency: LatencyHistogram,
    /// Mails run.
    pub mails: Counter,
    /// Legacy model and bridge: time each acquirer waited for the checkpoint lock.
    pub lock_wait: LatencyHistogram,
    /// From a timer's due time to the start of its callback.
    pub timer_lateness: LatencyHistogram,
    /// Timers fired.
    pub timers_fired: Counter,
    /// Batched async I/O: records per batch called, a distribution of counts (recorded with
    /// [`LatencyHistogram::record_micros`], one unit per record).
    pub async_batch_size: LatencyHistogram,
    /// Batched async I/O: from a batch's first record joining to the batch's call, at the
    /// processing time's millisecond resolution.
    pub async_batch_wait: LatencyHistogram,
    /// Microseconds the task waited for input.
    pub idle_micros: Counter,
    /// Microseconds the task waited for output space or a full operator.
    pub backpressured_micros: Counter,
    /// Threads the task started (task thread included).
    pub threads: Counter,
    /// The checkpoint lock the task's state lives under and its fairness (`"unfair"`,
    /// `"eventual"`, `"fair"`), set by the lock-model runtimes; `None` in the mailbox model.
    pub checkpoint_lock: crate::sync::Mutex<Option<&'static str>>,
    /// What the task is doing right now (not part of the [`summary`](Self::summary)): read by
    /// the job's stalled-checkpoint report.
    pub live: crate::live::TaskLive,
    /// A split source's reader: the splits it holds now, by split id, with their metrics.
    pub splits: Mutex<BTreeMap<String, Arc<SplitMetrics>>>,
    /// A reader of a source with watermark alignment: its watermark less its group's minimum
    /// at the last publication, in milliseconds (`None` before both are known).
    pub watermark_alignment_drift: Mutex<Option<i64>>,
}

/// What a split source's reader measures for one split it holds (Flink 2.1's split metrics),
/// kept in [`TaskMetrics::splits`] while the reader holds the split.
#[derive(Debug, Default)]
pub struct SplitMetrics {
    /// Milliseconds the split was paused by watermark alignment.
    pub paused_millis: Counter,
    /// Milliseconds the split was idle (marked idle by its reader or by its idleness timeout)
    /// and not paused.
    pub idle_millis: Counter,
}

/// A point-in-time copy of one split's [`SplitMetrics`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitMetricsSummary {
    /// The split's id.
    pub split: String,
    /// [`SplitMetrics::paused_millis`].
    pub paused_millis: u64,
    /// [`SplitMetrics::idle_millis`].
    pub idle_millis: u64,
}

impl TaskMetrics {
    /// Empty metrics of the task `name`.
    pub fn new(name: impl Into<String>) -> Self {
        TaskMetrics {
            name: name.into(),
            ..TaskMetrics::default()
        }
    }

    /// A checkpoint trigger that reached the task without a mail (the mailbox model's trigger
    /// slot, the bridge's lock errand): counted as a mail, with its latency from the trigger
    /// call `requested`, as one that came as a mail is, so every model counts a trigger alike.
    pub fn count_trigger_as_mail(&self, requested: Instant) {
        self.mails.inc();
        self.mailbox_latency.record(requested.elapsed());
    }

    /// A serializable snapshot of every metric.
    pub fn summary(&self) -> MetricsSummary {
        MetricsSummary {
            name: self.name.clone(),
            records_in: self.records_in.get(),
            records_out: self.records_out.get(),
            checkpoints: self.checkpoints.get(),
            checkpoint_delay_us: self.checkpoint_delay.summary(),
            checkpoint_duration_us: self.checkpoint_duration.summary(),
            alignment_us: self.alignment.summary(),
            unaligned_checkpoints: self.unaligned_checkpoints.get(),
            channel_state_records: self.channel_state_records.get(),
            channel_state_bytes: self.channel_state_bytes.get(),
            mailbox_latency_us: self.mailbox_latency.summary(),
            mails: self.mails.get(),
            lock_wait_us: self.lock_wait.summary(),
            timer_lateness_us: self.timer_lateness.summary(),
            timers_fired: self.timers_fired.get(),
            async_batch_size: self.async_batch_size.summary(),
            async_batch_wait_us: self.async_batch_wait.summary(),
            idle_micros: self.idle_micros.get(),
            backpressured_micros: self.backpressured_micros.get(),
            threads: self.threads.get(),
            checkpoint_lock: self.checkpoint_lock.lock().map(str::to_string),
            splits: self
                .splits
                .lock()
                .iter()
                .map(|(split, m)| SplitMetricsSummary {
                    split: split.clone(),
                    paused_millis: m.paused_millis.get(),
                    idle_millis: m.idle_millis.get(),
                })
                .collect(),
            watermark_alignment_drift: *self.watermark_alignment_drift.lock(),
        }
    }
}

/// A point-in-time copy of [`TaskMetrics`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)] // Each field mirrors the `TaskMetrics` field of the same name.
pub struct MetricsSummary {
    pub name: String,
    pub records_in: u64,
    pub records_out: u64,
    pub checkpoints: u64,
    pub checkpoint_delay_us: LatencySummary,
    pub checkpoint_duration_us: LatencySummary,
    pub alignment_us: LatencySummary,
    #[serde(default)]
    pub unaligned_checkpoints: u64,
    #[serde(default)]
    pub channel_state_records: u64,
    #[serde(default)]
    pub channel_state_bytes: u64,
    pub mailbox_latency_us: LatencySummary,
    pub mails: u64,
    pub lock_wait_us: LatencySummary,
    pub timer_lateness_us: LatencySummary,
    pub timers_fired: u64,
    #[serde(default)]
    pub async_batch_size: LatencySummary,
    #[serde(default)]
    pub async_batch_wait_us: LatencySummary,
    pub idle_micros: u64,
    pub backpressured_micros: u64,
    pub threads: u64,
    pub checkpoint_lock: Option<String>,
    #[serde(default)]
    pub splits: Vec<SplitMetricsSummary>,
    #[serde(default)]
    pub watermark_alignment_drift: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_histograms_summarize_to_zero() {
        assert_eq!(LatencyHistogram::new().summary(), LatencySummary::default());
    }

    #[test]
    fn percentiles_follow_the_distribution() {
        let h = LatencyHistogram::new();
        for us in 1..=1000 {
            h.record_micros(us);
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        assert!((499..=501).contains(&s.p50), "{s}");
        assert!((989..=991).contains(&s.p99), "{s}");
        assert_eq!(s.max, 1000);
    }

    #[test]
    fn out_of_range_values_are_clamped_not_lost() {
        let h = LatencyHistogram::new();
        h.record_micros(0);
        h.record(Duration::from_secs(10_000));
        assert_eq!(h.count(), 2);
        assert!(h.summary().max >= MAX_MICROS - MAX_MICROS / 1000);
    }

    #[test]
    fn merge_adds_counts() {
        let a = LatencyHistogram::new();
        let b = LatencyHistogram::new();
        a.record_micros(10);
        b.record_micros(20);
        a.merge(&b);
        assert_eq!(a.count(), 2);
    }

    #[test]
    fn a_timed_histogram_knows_its_newest_value() {
        let h = TimedHistogram::new();
        assert_eq!(h.last_micros(), None);
        h.record_micros(30);
        h.record_micros(20);
        assert_eq!(h.last_micros(), Some(20));
    }

    #[test]
    fn counters_count() {
        let c = Counter::new();
        c.inc();
        c.add(4);
        assert_eq!(c.get(), 5);
    }
}
