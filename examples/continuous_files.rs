//! Continuous file reading under the three models: a directory is listed every 5 ms, files
//! are added while the job runs, three split readers read them into lines, and the job is
//! failed twice on purpose (once in the monitoring source, once in a reader). Every model must
//! commit every line exactly once, the same output.
//!
//! Run with `cargo run --example continuous_files`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use streamtask::fault::{FaultKind, FaultPlan, quiet_injected_panics};
use streamtask::prelude::*;
use streamtask::{ContinuousFiles, JobPhase};

const FILES: usize = 6;
const LINES: usize = 200;

/// Written under a hidden name, then renamed: the monitoring source never sees half a file.
fn write_file(dir: &Path, f: usize) {
    let text: String = (0..LINES).map(|l| format!("file {f} line {l}\n")).collect();
    let hidden = dir.join(format!(".f{f}.tmp"));
    std::fs::write(&hidden, text).unwrap();
    std::fs::rename(&hidden, dir.join(format!("f{f}.txt"))).unwrap();
}

fn run(model: Model) -> (Vec<String>, u32) {
    let input = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    write_file(input.path(), 0);
    let faults = Arc::new(FaultPlan::at(&[
        (FaultKind::Source, 3),
        (FaultKind::Operator, 500),
    ]));
    let env = StreamEnvironment::new(model);
    let out = CollectHandle::new();
    env.read_files(
        ContinuousFiles::new(input.path(), Duration::from_millis(5), 3)
            .with_split_bytes(2048)
            .stop_after_files(FILES as u64)
            .with_faults(faults),
    )
    .collect_sink("collect", &out);
    let committed = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&committed);
    let config = JobConfig::new(work.path())
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(Duration::from_millis(500)),
        ))
        .with_restart(RestartStrategy::fixed_delay(5, Duration::from_millis(1)))
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointCommitting { .. } = phase {
                seen.fetch_add(1, Ordering::AcqRel);
            }
        }));
    let job = env.build().unwrap();
    // Files appear while the job runs: one after each committed checkpoint (bounded wait).
    let dir = input.path().to_path_buf();
    let writer_seen = Arc::clone(&committed);
    let writer = std::thread::spawn(move || {
        for f in 1..FILES {
            let before = writer_seen.load(Ordering::Acquire);
            let start = Instant::now();
            while writer_seen.load(Ordering::Acquire) == before
                && start.elapsed() < Duration::from_secs(30)
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            write_file(&dir, f);
        }
    });
    let result = job.run(&config);
    writer.join().unwrap();
    let result = result.unwrap();
    let mut lines = out.committed();
    lines.sort();
    (lines, result.restarts)
}

fn main() {
    quiet_injected_panics();
    let mut expected: Vec<String> = (0..FILES)
        .flat_map(|f| (0..LINES).map(move |l| format!("file {f} line {l}")))
        .collect();
    expected.sort();
    for model in [Model::Legacy, Model::Mailbox, Model::Bridge] {
        let (lines, restarts) = run(model);
        assert!(
            restarts >= 1,
            "{model}: the injected faults restarted the job"
        );
        assert_eq!(lines, expected, "{model}: every line exactly once");
        println!(
            "{model:<8} {} lines from {FILES} files, exactly once through {restarts} restarts",
            lines.len()
        );
    }
}
