//! Who ran what, on which thread: spans recorded as a Chrome trace (viewable in Perfetto or
//! `chrome://tracing`).
//!
//! A [`Tracer`] is either off (the default: every call is one branch on an `Option`) or records
//! into a shared [`TraceLog`]. Runtimes record a span per checkpoint, timer, mail and lock wait,
//! and one span per run of consecutive records ([`RecordRun`]), so a trace shows which thread
//! processed records and what interrupted it without a clock read per record.
//!
//! # Examples
//!
//! ```
//! use streamtask_core::trace::{TraceLog, Tracer};
//!
//! let log = TraceLog::new();
//! let tracer = Tracer::to(&log);
//! {
//!     let _span = tracer.span("checkpoint", || "checkpoint 1".to_string());
//! }
//! let json = log.to_chrome_json();
//! assert!(json.contains("\"cat\":\"checkpoint\""));
//! assert_eq!(log.len(), 1);
//! ```

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::sync::Mutex;

/// The shared buffer a trace is recorded into.
pub struct TraceLog {
    start: Instant,
    inner: Mutex<TraceInner>,
}

#[derive(Default)]
struct TraceInner {
    events: Vec<TraceEvent>,
    threads: HashMap<std::thread::ThreadId, (u64, String)>,
}

/// One complete span ("X" event in the Chrome trace format).
#[derive(Debug, Clone, Serialize)]
pub struct TraceEvent {
    /// What ran.
    pub name: String,
    /// Its kind: `record`, `mail`, `timer`, `checkpoint`, `lock-wait`, ...
    pub cat: &'static str,
    /// Phase; always `"X"` (complete event).
    pub ph: &'static str,
    /// Start, in microseconds since the log was created.
    pub ts: u64,
    /// Duration in microseconds.
    pub dur: u64,
    /// Process id (always 1).
    pub pid: u64,
    /// Thread number within the log.
    pub tid: u64,
}

#[derive(Serialize)]
struct ThreadName<'a> {
    name: &'static str,
    ph: &'static str,
    pid: u64,
    tid: u64,
    args: ThreadNameArgs<'a>,
}

#[derive(Serialize)]
struct ThreadNameArgs<'a> {
    name: &'a str,
}

impl TraceLog {
    /// An empty log; its creation is time zero.
    pub fn new() -> Arc<TraceLog> {
        Arc::new(TraceLog {
            start: Instant::now(),
            inner: Mutex::new(TraceInner::default()),
        })
    }

    fn record(&self, cat: &'static str, name: String, start: Instant, end: Instant) {
        let ts = start.saturating_duration_since(self.start).as_micros() as u64;
        let dur = end.saturating_duration_since(start).as_micros() as u64;
        let (id, thread_name) = crate::sync::os_thread();
        let mut inner = self.inner.lock();
        let next = inner.threads.len() as u64 + 1;
        let tid = inner
            .threads
            .entry(id)
            .or_insert_with(|| (next, thread_name.unwrap_or_else(|| "unnamed".to_string())))
            .0;
        inner.events.push(TraceEvent {
            name,
            cat,
            ph: "X",
            ts,
            dur,
            pid: 1,
            tid,
        });
    }

    /// Number of spans recorded.
    pub fn len(&self) -> usize {
        self.inner.lock().events.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the spans recorded so far.
    pub fn events(&self) -> Vec<TraceEvent> {
        self.inner.lock().events.clone()
    }

    /// Names of the threads that recorded spans, by thread number.
    pub fn threads(&self) -> Vec<(u64, String)> {
        let mut threads: Vec<(u64, String)> = self.inner.lock().threads.values().cloned().collect();
        threads.sort();
        threads
    }

    /// The trace in Chrome's JSON trace-event format (an array of events, thread names first).
    pub fn to_chrome_json(&self) -> String {
        let inner = self.inner.lock();
        let mut parts: Vec<String> = Vec::with_capacity(inner.threads.len() + inner.events.len());
        for (tid, name) in inner.threads.values() {
            let meta = ThreadName {
                name: "thread_name",
                ph: "M",
                pid: 1,
                tid: *tid,
                args: ThreadNameArgs { name },
            };
            parts.push(serde_json::to_string(&meta).expect("trace metadata serializes"));
        }
        for event in &inner.events {
            parts.push(serde_json::to_string(event).expect("trace events serialize"));
        }
        format!("[\n{}\n]\n", parts.join(",\n"))
    }

    /// Several logs in one Chrome trace, each as its own process named by its label (one per
    /// model of a comparison, say).
    pub fn to_chrome_json_multi(logs: &[(&str, &TraceLog)]) -> String {
        let mut parts: Vec<String> = Vec::new();
        for (pid, (label, log)) in logs.iter().enumerate() {
            let pid = pid as u64 + 1;
            parts.push(
                serde_json::json!({
                    "name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"name": label}
                })
                .to_string(),
            );
            let inner = log.inner.lock();
            for (tid, name) in inner.threads.values() {
                let meta = ThreadName {
                    name: "thread_name",
                    ph: "M",
                    pid,
                    tid: *tid,
                    args: ThreadNameArgs { name },
                };
                parts.push(serde_json::to_string(&meta).expect("trace metadata serializes"));
            }
            for event in &inner.events {
                let mut event = event.clone();
                event.pid = pid;
                parts.push(serde_json::to_string(&event).expect("trace events serialize"));
            }
        }
        format!("[\n{}\n]\n", parts.join(",\n"))
    }

    /// Writes [`to_chrome_json`](Self::to_chrome_json) to `path`.
    ///
    /// # Errors
    ///
    /// Any I/O error writing the file.
    pub fn write_chrome_json(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.to_chrome_json())
    }
}

impl fmt::Debug for TraceLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceLog")
            .field("events", &self.len())
            .finish()
    }
}

/// A handle runtimes record spans through; off unless built with [`Tracer::to`].
#[derive(Clone, Default)]
pub struct Tracer(Option<Arc<TraceLog>>);

impl Tracer {
    /// A tracer that records nothing.
    pub fn off() -> Self {
        Tracer(None)
    }

    /// A tracer recording into `log`.
    pub fn to(log: &Arc<TraceLog>) -> Self {
        Tracer(Some(Arc::clone(log)))
    }

    /// Whether spans are recorded.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Starts a span of kind `cat`; it ends when the guard drops. `name` is only called when
    /// tracing is on.
    #[inline]
    pub fn span(&self, cat: &'static str, name: impl FnOnce() -> String) -> Span {
        Span(
            self.0
                .as_ref()
                .map(|log| (Arc::clone(log), cat, name(), Instant::now())),
        )
    }

    /// Records a span that already happened.
    pub fn complete(&self, cat: &'static str, name: impl FnOnce() -> String, start: Instant) {
        if let Some(log) = &self.0 {
            log.record(cat, name(), start, Instant::now());
        }
    }
}

impl fmt::Debug for Tracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Tracer").field(&self.is_on()).finish()
    }
}

/// An open span; records itself when dropped.
#[must_use = "a span ends when dropped; bind it to a variable"]
pub struct Span(Option<(Arc<TraceLog>, &'static str, String, Instant)>);

impl Drop for Span {
    fn drop(&mut self) {
        if let Some((log, cat, name, start)) = self.0.take() {
            log.record(cat, name, start, Instant::now());
        }
    }
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Span")
            .field("open", &self.0.is_some())
            .finish()
    }
}

/// Tracks a run of consecutive records on one thread and records it as one `record` span when
/// something else interrupts it ([`RecordRun::interrupt`]) or every `RUN_LIMIT` records.
///
/// Costs one branch per record when tracing is off and one counter increment when on (the clock
/// is read only when a run starts or ends).
#[derive(Debug, Default)]
pub struct RecordRun {
    start: Option<Instant>,
    count: u32,
}

impl RecordRun {
    /// Records in one span at most, so long runs still show up while they last.
    pub const RUN_LIMIT: u32 = 4096;

    /// A run with nothing in it.
    pub fn new() -> Self {
        RecordRun::default()
    }

    /// Counts one record.
    #[inline]
    pub fn record(&mut self, tracer: &Tracer) {
        if !tracer.is_on() {
            return;
        }
        if self.start.is_none() {
            self.start = Some(Instant::now());
        }
        self.count += 1;
        if self.count >= Self::RUN_LIMIT {
            self.interrupt(tracer);
        }
    }

    /// Ends the current run (if any) and records it.
    pub fn interrupt(&mut self, tracer: &Tracer) {
        if let Some(start) = self.start.take() {
            let count = std::mem::take(&mut self.count);
            tracer.complete("record", || format!("{count} records"), start);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_tracer_records_nothing_and_never_builds_names() {
        let tracer = Tracer::off();
        let _s = tracer.span("mail", || unreachable!("name built while tracing is off"));
        let mut run = RecordRun::new();
        run.record(&tracer);
        run.interrupt(&tracer);
    }

    #[test]
    fn record_runs_become_one_span_per_run() {
        let log = TraceLog::new();
        let tracer = Tracer::to(&log);
        let mut run = RecordRun::new();
        for _ in 0..10 {
            run.record(&tracer);
        }
        run.interrupt(&tracer);
        run.interrupt(&tracer);
        for _ in 0..RecordRun::RUN_LIMIT {
            run.record(&tracer);
        }
        let events = log.events();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].name, "10 records");
        assert_eq!(events[1].name, format!("{} records", RecordRun::RUN_LIMIT));
    }

    #[test]
    fn several_logs_become_several_processes() {
        let a = TraceLog::new();
        let b = TraceLog::new();
        drop(Tracer::to(&a).span("mail", || "m".into()));
        drop(Tracer::to(&b).span("timer", || "t".into()));
        let json: serde_json::Value = serde_json::from_str(&TraceLog::to_chrome_json_multi(&[
            ("legacy", &a),
            ("mailbox", &b),
        ]))
        .unwrap();
        let arr = json.as_array().unwrap();
        assert!(
            arr.iter()
                .any(|e| e["args"]["name"] == "mailbox" && e["pid"] == 2)
        );
        assert!(arr.iter().any(|e| e["cat"] == "timer" && e["pid"] == 2));
        assert!(arr.iter().any(|e| e["cat"] == "mail" && e["pid"] == 1));
    }

    #[test]
    fn chrome_json_names_threads() {
        let log = TraceLog::new();
        let tracer = Tracer::to(&log);
        std::thread::Builder::new()
            .name("worker-7".into())
            .spawn(move || drop(tracer.span("timer", || "t".into())))
            .unwrap()
            .join()
            .unwrap();
        let json: serde_json::Value = serde_json::from_str(&log.to_chrome_json()).unwrap();
        let arr = json.as_array().unwrap();
        assert!(arr.iter().any(|e| e["args"]["name"] == "worker-7"));
        assert!(arr.iter().any(|e| e["ph"] == "X" && e["cat"] == "timer"));
        assert_eq!(log.threads()[0].1, "worker-7");
    }
}
