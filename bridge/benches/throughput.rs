//! Source throughput of one legacy source (a counting `SourceFunction`, one locked section per
//! record) behind the same chain (a map into a discarding output), under: the legacy
//! `SourceStreamTask`, the bridge `LegacySourceStreamTask`, and the `HandoffReader` in a mailbox
//! `SourceTask`; plus the source's native port in a `SourceTask` as a reference. Ratios are
//! against the legacy task, measured in the same run, interleaved, median of the repetitions.
//!
//! `cargo bench -p streamtask-bridge --bench throughput` (run by `cargo test --all-targets` it
//! does a tiny smoke run).

mod common;

use std::time::{Duration, Instant};

use common::{Count, CountReader, Model, Stamp};
use streamtask_bridge::{HandoffReader, LegacySourceStreamTask};
use streamtask_core::operator::Discard;
use streamtask_core::task::TaskConfig;
use streamtask_legacy::SourceStreamTask;
use streamtask_mailbox::SourceTask;

fn run(model: Model, records: u64, capacity: usize) -> Duration {
    let source = Count {
        limit: Some(records),
    };
    let config = TaskConfig::new(model.label());
    let start = Instant::now();
    let outcome = match model {
        Model::Legacy => SourceStreamTask::new(config, source, Stamp::new(), Discard)
            .spawn()
            .join(),
        Model::Bridge => LegacySourceStreamTask::new(config, source, Stamp::new(), Discard)
            .spawn()
            .expect("a plain chain")
            .join(),
        Model::Handoff => SourceTask::spawn(
            config,
            HandoffReader::new(source).with_capacity(capacity),
            Stamp::new(),
            Discard,
        )
        .join(),
        Model::Native => SourceTask::spawn(
            config,
            CountReader {
                next: 0,
                limit: records,
            },
            Stamp::new(),
            Discard,
        )
        .join(),
    };
    let elapsed = start.elapsed();
    assert!(outcome.is_finished(), "{}: {outcome}", model.label());
    elapsed
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (records, reps) = if bench { (5_000_000, 5) } else { (10_000, 1) };
    let capacities: &[usize] = if bench { &[64, 1024] } else { &[64] };
    let mut configs: Vec<(Model, usize)> = vec![(Model::Legacy, 0), (Model::Bridge, 0)];
    configs.extend(capacities.iter().map(|&c| (Model::Handoff, c)));
    configs.push((Model::Native, 0));
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); configs.len()];
    for _ in 0..reps {
        for (i, &(model, capacity)) in configs.iter().enumerate() {
            times[i].push(run(model, records, capacity));
        }
    }
    let medians: Vec<Duration> = times.into_iter().map(median).collect();
    let baseline = medians[0].as_secs_f64();
    println!("{records} records per run, median of {reps}, interleaved");
    for ((model, capacity), time) in configs.iter().zip(&medians) {
        let label = match model {
            Model::Handoff => format!("{} (capacity {capacity})", model.label()),
            _ => model.label().to_string(),
        };
        println!(
            "{label:<45} {:>12.0} records/s  {:>6.1} ns/record  x{:.2} of legacy",
            records as f64 / time.as_secs_f64(),
            time.as_secs_f64() * 1e9 / records as f64,
            baseline / time.as_secs_f64(),
        );
    }
}
