//! The bench's zero-latency async rows on their own, one model and mode at a time, so
//! `perf stat` and `perf record` see only that job: `records` records through a task of the
//! model whose async operator (capacity 100) completes every call at once, on the task thread,
//! completed as `how` says (`routed`: inline completions off, the model's route; `inline`;
//! `remote`). Prints ns/record of each run and the median.
//!
//! ```sh
//! cargo run --release --example async_routed -- legacy ordered routed 1000000 5
//! perf stat -e task-clock,context-switches target/release/examples/async_routed legacy unordered
//! ```

use std::time::Duration;

use streamtask::Model;
use streamtask::bench::async_io::{ZeroLatency, median, zero_latency};
use streamtask_core::async_io::OutputMode;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let model: Model = arg(0, "legacy").parse().expect("model: legacy or mailbox");
    let mode = match arg(1, "ordered").as_str() {
        "ordered" => OutputMode::Ordered,
        "unordered" => OutputMode::Unordered,
        other => panic!("mode: ordered or unordered, not {other}"),
    };
    let how = match arg(2, "routed").as_str() {
        "routed" => ZeroLatency::Routed,
        "inline" => ZeroLatency::Inline,
        "remote" => ZeroLatency::Remote,
        other => panic!("how: routed, inline or remote, not {other}"),
    };
    let records: u64 = arg(3, "1000000").parse().expect("records: a number");
    let runs: usize = arg(4, "3").parse().expect("runs: a number");
    let ns = |d: Duration| d.as_nanos() as f64 / records as f64;
    let times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = zero_latency(model, mode, 100, how, records);
            println!("  {:.0} ns/record", ns(t));
            t
        })
        .collect();
    println!(
        "{model} {} {}: median {:.0} ns/record",
        arg(1, "ordered"),
        how.key(),
        ns(median(times))
    );
}
