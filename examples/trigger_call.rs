//! The mailbox `trigger_checkpoint` call alone, with warm caches: a hot `SourceTask` (the
//! bench's counting reader) and a thread that triggers every 20 us, waiting for each deadline
//! by spinning (no sleep, so neither its caches nor its core change between calls). What is
//! left of the call's cost is mostly its cache-line traffic with the task thread. Prints the
//! calls' p50 and p90 in nanoseconds.
//!
//! ```sh
//! cargo run --release --example trigger_call -- 20000   # triggers
//! ```

use std::time::{Duration, Instant};

use streamtask::bench::hot_path::Sum;
use streamtask::bench::models::new_histogram;
use streamtask::bench::sources::{CountReader, Stamp};
use streamtask_core::CheckpointBarrier;
use streamtask_core::task::TaskConfig;
use streamtask_mailbox::SourceTask;

fn main() {
    let triggers: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("triggers: a number"))
        .unwrap_or(20_000);
    let task = SourceTask::spawn(
        TaskConfig::new("call").with_cancel_grace(Duration::from_secs(60)),
        CountReader {
            next: 0,
            limit: u64::MAX,
        },
        Stamp::new(),
        Sum::default(),
    );
    while task.metrics().records_in.get() == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    let mut calls = new_histogram();
    let mut next = Instant::now();
    for k in 0..triggers {
        next += Duration::from_micros(20);
        while Instant::now() < next {
            std::hint::spin_loop();
        }
        let called = Instant::now();
        task.trigger_checkpoint(CheckpointBarrier::new(k + 1, 0))
            .expect("a source task");
        calls.saturating_record(u64::try_from(called.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    task.cancel();
    let _ = task.join();
    println!(
        "trigger call: p50 {} ns p90 {} ns ({} calls)",
        calls.value_at_quantile(0.5),
        calls.value_at_quantile(0.9),
        calls.len()
    );
}
