//! The mailbox `trigger_checkpoint` call alone: a hot `SourceStreamTask` (the bench's counting reader)
//! and a thread that triggers it, timing each call as `streamtask bench` does (`Instant::now`
//! before, `elapsed` after). Prints the calls' p50 and p90 in nanoseconds.
//!
//! Two ways of waiting for each deadline:
//!
//! - `spin` (the default): every 20 us, by spinning (no sleep, so neither the triggering thread's
//!   caches nor its core change between calls). What is left of the call's cost is mostly its
//!   cache-line traffic with the task thread.
//! - `sleep`: every 1 ms, with the bench's precise timers ([`clock::sleep_until`]), as the bench's
//!   trigger row (`models::hot_triggers`) waits: the call starts on a thread that slept and
//!   yielded, so what it touches may have left its caches. Between two calls the thread also
//!   times an empty call (the clock read pair alone: the floor of every figure) and the task's
//!   lifecycle read (`TaskHandle::state`), one probe per deadline in turn, so all three see the
//!   same machine.
//!
//! ```sh
//! cargo run --release --example trigger_call -- 20000          # triggers, spinning
//! cargo run --release --example trigger_call -- 3000 sleep     # triggers, 1 ms apart
//! ```

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use streamtask_cli::bench::clock;
use streamtask_cli::bench::hot_path::Sum;
use streamtask_cli::bench::models::new_histogram;
use streamtask_cli::bench::sources::{CountReader, Stamp};
use streamtask_core::CheckpointBarrier;
use streamtask_core::task::TaskConfig;
use streamtask_mailbox::SourceStreamTask;

fn nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn print(what: &str, h: &Histogram<u64>) {
    println!(
        "{what}: p50 {} ns p90 {} ns ({} calls)",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.len()
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let triggers: u64 = args
        .next()
        .map(|s| s.parse().expect("triggers: a number"))
        .unwrap_or(20_000);
    let sleep = match args.next().as_deref() {
        None | Some("spin") => false,
        Some("sleep") => true,
        Some(other) => panic!("spin or sleep, not {other}"),
    };
    let task = SourceStreamTask::new(
        TaskConfig::new("call").with_cancel_grace(Duration::from_secs(60)),
        CountReader {
            next: 0,
            limit: u64::MAX,
        },
        Stamp::new(),
        Sum::default(),
    )
    .spawn();
    while task.metrics().records_in.get() == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    let mut calls = new_histogram();
    let mut empty = new_histogram();
    let mut state = new_histogram();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let interval = if sleep {
                clock::precise_timers();
                Duration::from_millis(1)
            } else {
                Duration::from_micros(20)
            };
            let mut next = Instant::now();
            let mut k = 0;
            let mut probe = 0u64;
            while k < triggers {
                next += interval;
                if sleep {
                    clock::sleep_until(next);
                } else {
                    while Instant::now() < next {
                        std::hint::spin_loop();
                    }
                }
                probe += 1;
                let called = Instant::now();
                match probe % 3 {
                    // Only with `sleep`: the probes take deadlines of their own.
                    1 if sleep => empty.saturating_record(nanos(called)),
                    2 if sleep => {
                        std::hint::black_box(task.state());
                        state.saturating_record(nanos(called));
                    }
                    _ => {
                        k += 1;
                        task.trigger_checkpoint(CheckpointBarrier::new(k, 0))
                            .expect("a source task");
                        calls.saturating_record(nanos(called));
                    }
                }
            }
        });
    });
    task.cancel();
    let _ = task.join();
    print("trigger call", &calls);
    if sleep {
        print("empty call (clock reads)", &empty);
        print("lifecycle read", &state);
    }
}
