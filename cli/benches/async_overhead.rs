//! The async operator's cost per record at zero latency, whole job (producer thread, task,
//! operator, discard), in three forms (see [`ZeroLatency`]):
//!
//! - `routed`: every call completes inside `invoke`, on the task thread, with inline
//!   completions off, so the completion takes the model's route (a completion mail in the
//!   mailbox model; the emitter thread taking the checkpoint lock in the legacy model), as one
//!   from a client thread does. The bench's target (mailbox <= 250 ns/record, legacy <= 2x
//!   mailbox) applies to this row.
//! - `remote`: a completer thread answers every call at once, so each completion comes from
//!   another thread. A reference: most of its time is the completer's own wake-ups (a call
//!   that finds it asleep wakes it, and it preempts the task thread).
//! - `inline`: completed inside `invoke` with inline completions on (the default): applied
//!   when `invoke` returns; the engine's own cost, no hand-off. A reference.
//!
//! 1 000 000 records, capacity 100, ordered and unordered, legacy against mailbox in one run,
//! with each model's plain map task as the baseline. Medians of three runs.
//!
//! ```sh
//! cargo bench --bench async_overhead
//! cargo bench --bench async_overhead -- remote   # only the rows whose label has "remote"
//! ```

use std::time::Duration;

use streamtask::Model;
use streamtask_cli::bench::async_io::{
    Chain, Immediate, ZeroLatency, median, rate, run, zero_latency,
};
use streamtask_cli::bench::benching;
use streamtask_core::async_io::OutputMode;

const CAPACITY: usize = 100;

fn main() {
    let (records, repeats): (u64, usize) = if benching() { (1_000_000, 3) } else { (500, 1) };
    // Words after the bench's own flags pick rows by label; none runs every row.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |label: &str| filters.is_empty() || filters.iter().any(|f| label.contains(f));
    println!(
        "async I/O overhead at zero latency, capacity {CAPACITY}, {records} records, \
         median of {repeats}"
    );
    println!(
        "{:<26} {:>12} {:>12} {:>12} {:>16}",
        "chain", "legacy r/s", "mailbox r/s", "ns/rec L|M", "legacy/mailbox"
    );
    let ns = |d: Duration| d.as_nanos() as f64 / records as f64;
    let print = |label: &str, legacy: Duration, mailbox: Duration| {
        println!(
            "{:<26} {:>12.0} {:>12.0} {:>5.0} | {:<5.0} {:>16.2}",
            label,
            rate(records, legacy),
            rate(records, mailbox),
            ns(legacy),
            ns(mailbox),
            legacy.as_secs_f64() / mailbox.as_secs_f64()
        );
    };
    let map = |model: Model| -> Duration {
        median(
            (0..repeats)
                .map(|_| run(model, Chain::Map, Immediate, records))
                .collect(),
        )
    };
    if wanted("map (baseline)") {
        print("map (baseline)", map(Model::Legacy), map(Model::Mailbox));
    }
    for how in ZeroLatency::ALL {
        for (mode, mode_label) in [
            (OutputMode::Ordered, "ordered"),
            (OutputMode::Unordered, "unordered"),
        ] {
            let label = format!("async {mode_label} {}", how.key());
            if !wanted(&label) {
                continue;
            }
            // The models take turns, and which goes first alternates.
            let mut legacy = Vec::new();
            let mut mailbox = Vec::new();
            for repeat in 0..repeats {
                let mut models = [Model::Legacy, Model::Mailbox];
                if repeat % 2 == 1 {
                    models.reverse();
                }
                for model in models {
                    let time = zero_latency(model, mode, CAPACITY, how, records);
                    match model {
                        Model::Legacy => legacy.push(time),
                        _ => mailbox.push(time),
                    }
                }
            }
            print(&label, median(legacy), median(mailbox));
        }
    }
}
