//! Metrics a monitoring system can scrape: the [`MetricsRegistry`] a job's tasks register into
//! while it runs, rendered as OpenMetrics text with Flink's metric names.
//!
//! # Why a registry of our own
//!
//! The tasks already keep everything in [`TaskMetrics`](streamtask_core::metrics::TaskMetrics)
//! (atomic counters and hdrhistograms, shared by `Arc`). The `metrics` facade would copy each
//! value into a global recorder on the hot path, or need a second, polled bridge into it, and
//! its exporter crate brings an HTTP server and a runtime into every job that depends on this
//! library; `prometheus-client` would add a second set of atomics beside the ones the tasks
//! keep. This registry instead holds the tasks' own `Arc`s and reads them only when someone
//! renders: nothing is added to a task's path, and the job library gains no dependency. The
//! exposition format is a few line rules (see `exposition.rs`), which a hand-written renderer
//! keeps in one small, tested file. Serving the text (HTTP, a file) is the application's part;
//! the `streamtask` command does both.
//!
//! # Per-second rates
//!
//! The `*_per_second` gauges are computed at render time over a sliding window: from the
//! newest sample the registry kept that is at least [`RATE_WINDOW`] old (or, for a task
//! younger than that, from its start) to now. Renders keep a sample at most every
//! [`RATE_WINDOW`]/10, so a scraper every 15 s sees the rate since its previous scrape, and
//! two readers a few milliseconds apart (an endpoint and a file) do not see noise.

mod exposition;
mod registry;

pub use self::exposition::OPENMETRICS_CONTENT_TYPE;
pub(crate) use self::registry::{AttemptScope, JobScope};
pub use self::registry::{MetricsRegistry, RATE_WINDOW};
