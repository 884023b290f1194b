//! The async operator's own cost per record, at zero latency: every call completes inside
//! `invoke`, so what is measured is the hand-off of each result (a completion mail in the
//! mailbox model; the emitter thread taking the checkpoint lock in the legacy model) plus the
//! queue. 1 000 000 records, capacity 100, ordered and unordered, legacy against mailbox in one
//! run, with each model's plain map task as the baseline. Medians of three runs.
//!
//! ```sh
//! cargo bench --bench async_overhead
//! ```

use std::time::Duration;

use streamtask::Model;
use streamtask::bench::async_io::{Chain, Immediate, median, rate, run};
use streamtask::bench::benching;
use streamtask_core::async_io::OutputMode;

const CAPACITY: usize = 100;

fn main() {
    let (records, repeats): (u64, usize) = if benching() { (1_000_000, 3) } else { (500, 1) };
    println!(
        "async I/O overhead at zero latency, capacity {CAPACITY}, {records} records, \
         median of {repeats}"
    );
    println!(
        "{:<26} {:>12} {:>12} {:>12} {:>16}",
        "chain", "legacy r/s", "mailbox r/s", "ns/rec L|M", "legacy/mailbox"
    );
    let chains = [
        ("map (baseline)", Chain::Map),
        ("async ordered", Chain::Async(CAPACITY, OutputMode::Ordered)),
        (
            "async unordered",
            Chain::Async(CAPACITY, OutputMode::Unordered),
        ),
    ];
    for (label, chain) in chains {
        let time = |model: Model| -> Duration {
            median(
                (0..repeats)
                    .map(|_| run(model, chain, Immediate, records))
                    .collect(),
            )
        };
        let legacy = time(Model::Legacy);
        let mailbox = time(Model::Mailbox);
        let ns = |d: Duration| d.as_nanos() as f64 / records as f64;
        println!(
            "{:<26} {:>12.0} {:>12.0} {:>5.0} | {:<5.0} {:>16.2}",
            label,
            rate(records, legacy),
            rate(records, mailbox),
            ns(legacy),
            ns(mailbox),
            legacy.as_secs_f64() / mailbox.as_secs_f64()
        );
    }
}
