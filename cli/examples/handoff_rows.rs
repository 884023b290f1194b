//! The bench's handoff rows alone: the counting source through a `HandoffReader` of capacity 64
//! and 1024 against the same source in a legacy task, interleaved, for `perf`. Prints each
//! round's ratio (legacy time over handoff time: the handoff's records/s over legacy's) and the
//! medians.
//!
//! ```sh
//! cargo run --release --example handoff_rows -- 2000000 5   # records, rounds
//! ```

use streamtask_cli::bench::models::{Runner, throughput};

fn main() {
    let mut args = std::env::args().skip(1);
    let records: u64 = args
        .next()
        .map(|s| s.parse().expect("records: a number"))
        .unwrap_or(2_000_000);
    let rounds: usize = args
        .next()
        .map(|s| s.parse().expect("rounds: a number"))
        .unwrap_or(5);
    let mut ratios = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let legacy = throughput(Runner::Legacy, records).as_secs_f64();
        for (i, capacity) in [64, 1024].into_iter().enumerate() {
            let handoff = throughput(Runner::Handoff(capacity), records).as_secs_f64();
            ratios[i].push(legacy / handoff);
            println!(
                "round {round}: capacity {capacity}: {:.2}x (legacy {:.1} ns/record, handoff {:.1})",
                legacy / handoff,
                legacy * 1e9 / records as f64,
                handoff * 1e9 / records as f64
            );
        }
    }
    for (i, capacity) in [64, 1024].into_iter().enumerate() {
        ratios[i].sort_by(f64::total_cmp);
        println!("capacity {capacity}: median {:.2}x", ratios[i][rounds / 2]);
    }
}
