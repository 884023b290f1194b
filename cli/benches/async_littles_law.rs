//! Async I/O throughput against Little's law: with capacity `C` in flight and a latency `W` per
//! request, at most `C / W` records per second get through. Capacity 100 and a simulated
//! latency of 1 ms (one timer-driven completer thread) bound it at 100 000 records/s; the bench
//! reports what each model achieves, ordered and unordered, as a fraction of that bound; then
//! key-ordered with 1, 10 and 1,000 keys (one call per key in flight, so with fewer keys than
//! the capacity the bound is `keys / W`).
//!
//! ```sh
//! cargo bench --bench async_littles_law
//! ```

use std::time::Duration;

use streamtask::Model;
use streamtask_cli::bench::async_io::{Chain, Completer, key_ordered_littles_law, rate, run};
use streamtask_cli::bench::benching;
use streamtask_core::async_io::OutputMode;

const CAPACITY: usize = 100;
const LATENCY: Duration = Duration::from_millis(1);

fn main() {
    let records: u64 = if benching() { 200_000 } else { 300 };
    let bound = CAPACITY as f64 / LATENCY.as_secs_f64();
    println!(
        "async I/O, capacity {CAPACITY}, latency {LATENCY:?} (timer-driven completer), \
         {records} records; Little's-law bound {bound:.0} records/s"
    );
    println!(
        "{:<8} {:<10} {:>12} {:>15} {:>13} {:>19}",
        "model", "mode", "records/s", "achieved/bound", "mean latency", "achieved/(C/mean)"
    );
    for mode in [OutputMode::Ordered, OutputMode::Unordered] {
        for model in [Model::Legacy, Model::Mailbox] {
            let completer = Completer::start(LATENCY);
            let elapsed = run(
                model,
                Chain::Async(CAPACITY, mode),
                completer.function(),
                records,
            );
            // The latency calls actually had: the configured one plus the timer's lateness.
            let mean = completer.mean_latency();
            drop(completer); // joins its thread
            let achieved = rate(records, elapsed);
            let effective_bound = CAPACITY as f64 / mean.as_secs_f64();
            println!(
                "{:<8} {:<10} {:>12.0} {:>15.3} {:>13.2?} {:>19.3}",
                model.to_string(),
                format!("{mode:?}"),
                achieved,
                achieved / bound,
                mean,
                achieved / effective_bound
            );
        }
    }
    for keys in [1u64, 10, 1_000] {
        // One call per key in flight: few keys are slow, so they get fewer records.
        let records = records.min(keys * if benching() { 1_000 } else { 30 });
        for model in [Model::Legacy, Model::Mailbox] {
            let law = key_ordered_littles_law(model, keys, CAPACITY, LATENCY, records);
            println!(
                "{:<8} {:<10} {:>12.0} {:>15.3} {:>13.2?} {:>19.3}",
                model.to_string(),
                format!("key-ord {keys}"),
                law.achieved,
                law.of_bound,
                law.mean_latency,
                law.of_effective_bound
            );
        }
    }
}
