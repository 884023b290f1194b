//! The bench's zero-latency async rows on their own, one model and mode at a time, so
//! `perf stat` and `perf record` see only that job: `records` records through a task of the
//! model whose async operator (capacity 100) completes every call at once, on the task thread,
//! completed as `how` says (`routed`: inline completions off, the model's route; `inline`;
//! `remote`). Prints ns/record of each run and the median. With `littles` instead of a route, the
//! bench's Little's-law row instead (capacity 100, calls completed 1 ms after they were made):
//! the fraction of Little's bound each run reached, and the median. With `map`, the bench's
//! baseline row: the same job with a map instead of the async operator (the mode is ignored).
//!
//! ```sh
//! cargo run --release --example async_routed -- legacy ordered routed 1000000 5
//! cargo run --release --example async_routed -- legacy unordered littles 50000 5
//! cargo run --release --example async_routed -- mailbox ordered map 1000000 5
//! perf stat -e task-clock,context-switches target/release/examples/async_routed legacy unordered
//! ```

use std::time::Duration;

use streamtask::Model;
use streamtask_cli::bench::async_io::{
    Chain, Immediate, ZeroLatency, littles_law, median, run, zero_latency,
};
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
    let records: u64 = arg(3, "1000000").parse().expect("records: a number");
    let runs: usize = arg(4, "3").parse().expect("runs: a number");
    if arg(2, "routed") == "littles" {
        let mut fractions: Vec<f64> = (0..runs)
            .map(|_| {
                let law = littles_law(model, mode, 100, Duration::from_millis(1), records);
                println!("  {:.3} of Little's bound", law.of_bound);
                law.of_bound
            })
            .collect();
        fractions.sort_by(f64::total_cmp);
        println!(
            "{model} {} littles: median {:.3} of Little's bound",
            arg(1, "ordered"),
            fractions[fractions.len() / 2]
        );
        return;
    }
    let how = match arg(2, "routed").as_str() {
        "routed" => Some(ZeroLatency::Routed),
        "inline" => Some(ZeroLatency::Inline),
        "remote" => Some(ZeroLatency::Remote),
        "map" => None,
        other => panic!("how: routed, inline, remote, littles or map, not {other}"),
    };
    let ns = |d: Duration| d.as_nanos() as f64 / records as f64;
    let times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = match how {
                Some(how) => zero_latency(model, mode, 100, how, records),
                None => run(model, Chain::Map, Immediate, records),
            };
            println!("  {:.0} ns/record", ns(t));
            t
        })
        .collect();
    println!(
        "{model} {} {}: median {:.0} ns/record",
        arg(1, "ordered"),
        how.map_or("map", ZeroLatency::key),
        ns(median(times))
    );
}
