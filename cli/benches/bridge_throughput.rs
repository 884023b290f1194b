//! Source throughput of one legacy source (a counting `SourceFunction`, one locked section per
//! record) behind the same chain (a map into a discarding output), under: the legacy
//! `SourceStreamTask`, the bridge `LegacySourceStreamTask`, and the `HandoffReader` in a mailbox
//! `SourceStreamTask`; plus the source's native port in a `SourceStreamTask` as a reference. Ratios are
//! against the legacy task, measured in the same run, interleaved, median of the repetitions.
//! The harness is `streamtask_cli::bench::models` (what `streamtask bench` runs).
//!
//! `cargo bench --bench bridge_throughput` (run by `cargo test --all-targets` it does a tiny
//! smoke run).

use std::time::Duration;

use streamtask_cli::bench::benching;
use streamtask_cli::bench::models::{Runner, throughput};

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn main() {
    let bench = benching();
    let (records, reps) = if bench { (5_000_000, 5) } else { (10_000, 1) };
    let capacities: &[usize] = if bench { &[64, 1024] } else { &[64] };
    let mut runners = vec![Runner::Legacy, Runner::Bridge];
    runners.extend(capacities.iter().map(|&c| Runner::Handoff(c)));
    runners.push(Runner::Native);
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); runners.len()];
    for _ in 0..reps {
        for (i, &runner) in runners.iter().enumerate() {
            times[i].push(throughput(runner, records));
        }
    }
    let medians: Vec<Duration> = times.into_iter().map(median).collect();
    let baseline = medians[0].as_secs_f64();
    println!("{records} records per run, median of {reps}, interleaved");
    for (runner, time) in runners.iter().zip(&medians) {
        println!(
            "{:<45} {:>12.0} records/s  {:>6.1} ns/record  x{:.2} of legacy",
            runner.label(),
            records as f64 / time.as_secs_f64(),
            time.as_secs_f64() * 1e9 / records as f64,
            baseline / time.as_secs_f64(),
        );
    }
}
