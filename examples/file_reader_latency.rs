//! Trigger-to-snapshot latency of the split reader while it reads one large split: the legacy
//! model's reader thread (lines emitted under the checkpoint lock) against the mailbox model's
//! self-enqueued read mails (1 line and 64 lines per mail).
//!
//! A job reads one file of `LINES` lines as a single split with parallelism 1, checkpointing
//! every 5 ms. For each checkpoint it records the time from the trigger (the coordinator's
//! `CheckpointTriggered` phase) to the moment the reader's task snapshots (a pass-through probe
//! chained behind the reader, whose `snapshot_state` runs in the same checkpoint step), in an
//! hdrhistogram (core's `LatencyHistogram`), and prints p50 / p99 / max per configuration.
//!
//! Run with `cargo run --release --example file_reader_latency [lines]`. A benchmark, not a
//! test: it asserts only that every line was read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use streamtask::files::ReadMode;
use streamtask::prelude::*;
use streamtask::{ContinuousFiles, JobPhase};
use streamtask_core::metrics::LatencyHistogram;
use streamtask_core::{OperatorError, StreamRecord, operator::Context, operator::Operator};

type Times = Arc<Mutex<HashMap<u64, Instant>>>;

/// The sink: counts lines, notes when its task snapshots each checkpoint.
struct SnapshotProbe {
    snapshots: Times,
    lines: Arc<AtomicUsize>,
}

impl Operator for SnapshotProbe {
    type In = String;
    type Out = ();

    fn name(&self) -> &str {
        "snapshot-probe"
    }

    fn process_element(
        &mut self,
        _record: StreamRecord<String>,
        _ctx: &mut Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        // Relaxed: read after the job (and so every task thread) ended.
        self.lines.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        self.snapshots
            .lock()
            .unwrap()
            .entry(checkpoint_id)
            .or_insert_with(Instant::now);
        Ok(None)
    }
}

struct Figures {
    histogram: LatencyHistogram,
    lines: usize,
    elapsed: Duration,
}

fn measure(model: Model, mode: ReadMode, input: &std::path::Path, lines: usize) -> Figures {
    let env = StreamEnvironment::new(model);
    let counted = Arc::new(AtomicUsize::new(0));
    let snapshots: Times = Arc::default();
    let triggers: Times = Arc::default();
    let probe_times = Arc::clone(&snapshots);
    env.read_files(
        ContinuousFiles::new(input, Duration::from_millis(1), 1)
            // The source keeps running (checkpoints are triggered on running sources only)
            // until an end file is added once the large split was read.
            .stop_after_files(2)
            .with_read_mode(mode),
    )
    .sink("probe", {
        let counted = Arc::clone(&counted);
        move |_| SnapshotProbe {
            snapshots: Arc::clone(&probe_times),
            lines: Arc::clone(&counted),
        }
    });
    let work = tempfile::tempdir().unwrap();
    let trigger_times = Arc::clone(&triggers);
    let config = JobConfig::new(work.path())
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(5)).with_timeout(Duration::from_secs(5)),
        ))
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointTriggered { id } = phase {
                trigger_times.lock().unwrap().insert(id, Instant::now());
            }
        }));
    let job = env.build().unwrap();
    let watcher = {
        let (counted, dir) = (Arc::clone(&counted), input.to_path_buf());
        std::thread::spawn(move || {
            while counted.load(Ordering::Relaxed) < lines {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::fs::write(dir.join("z-end.txt"), "end\n").unwrap();
        })
    };
    let started = Instant::now();
    let result = job.run(&config).unwrap();
    let elapsed = started.elapsed();
    watcher.join().unwrap();
    std::fs::remove_file(input.join("z-end.txt")).unwrap();
    assert_eq!(result.restarts, 0);
    let read = counted.load(Ordering::Relaxed);
    assert_eq!(read, lines + 1, "{model}: every line was read once");
    let histogram = LatencyHistogram::new();
    let triggers = triggers.lock().unwrap();
    for (id, snapshot) in snapshots.lock().unwrap().iter() {
        if let Some(trigger) = triggers.get(id) {
            let micros = snapshot.saturating_duration_since(*trigger).as_micros();
            histogram.record_micros(u64::try_from(micros).unwrap_or(u64::MAX));
        }
    }
    Figures {
        histogram,
        lines: read,
        elapsed,
    }
}

fn main() {
    let lines: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("the argument is a number of lines"))
        // A debug build (CI runs every example so) reads a tenth: the figures are for release.
        .unwrap_or(if cfg!(debug_assertions) {
            200_000
        } else {
            2_000_000
        });
    let input = tempfile::tempdir().unwrap();
    {
        use std::io::Write;
        let file = std::fs::File::create(input.path().join("large.txt")).unwrap();
        let mut file = std::io::BufWriter::new(file);
        for l in 0..lines {
            writeln!(file, "line {l:09} of the large split").unwrap();
        }
    }
    println!("one split of {lines} lines, checkpoints every 5 ms, trigger-to-snapshot in µs");
    println!(
        "{:<34} {:>6} {:>8} {:>8} {:>8} {:>10}",
        "reader", "ckpts", "p50", "p99", "max", "lines/s"
    );
    let cases = [
        (
            Model::Legacy,
            ReadMode::Thread,
            "legacy, reader thread + lock",
        ),
        (
            Model::Mailbox,
            ReadMode::Mails { chunk: 1 },
            "mailbox, 1 line per mail",
        ),
        (
            Model::Mailbox,
            ReadMode::Mails { chunk: 64 },
            "mailbox, 64 lines per mail",
        ),
        (
            Model::Bridge,
            ReadMode::Mails { chunk: 1 },
            "bridge, 1 line per mail",
        ),
    ];
    for (model, mode, label) in cases {
        let f = measure(model, mode, input.path(), lines);
        let h = f.histogram.summary();
        println!(
            "{:<34} {:>6} {:>8} {:>8} {:>8} {:>10.0}",
            label,
            h.count,
            h.p50,
            h.p99,
            h.max,
            f.lines as f64 / f.elapsed.as_secs_f64()
        );
    }
}
