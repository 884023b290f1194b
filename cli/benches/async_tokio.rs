//! The futures-based async function on a tokio runtime against the blocking pool, at the same
//! operator capacity `C`, in both models (ordered output).
//!
//! - **1 ms client**: each call waits 1 ms — `tokio::time::sleep` in a future on a 2-worker
//!   runtime, `std::thread::sleep` on a pool of `C` threads (so neither is short of workers).
//!   Little's law bounds both at `C / 1 ms`.
//! - **0 ms client**: each call returns at once, so what is measured is the hand-off: a spawn on
//!   the runtime against a job on a 4-thread pool, then the completion's way back.
//!
//! Medians of three runs.
//!
//! ```sh
//! cargo bench --bench async_tokio
//! ```

use std::sync::Arc;
use std::time::Duration;

use streamtask::Model;
use streamtask_cli::bench::async_io::{Chain, median, rate, run};
use streamtask_cli::bench::benching;
use streamtask_core::async_io::{BlockingAsyncFunction, BlockingPool, OutputMode};
use streamtask_runtime::{FutureAsyncFunction, TokioRuntime};

#[derive(Debug, Clone, Copy)]
enum Client {
    Tokio,
    Pool,
}

fn time(
    model: Model,
    client: Client,
    capacity: usize,
    latency: Duration,
    records: u64,
) -> Duration {
    let chain = Chain::Async(capacity, OutputMode::Ordered);
    match client {
        Client::Tokio => {
            let runtime = TokioRuntime::new("bench-io", 2).unwrap();
            let function =
                FutureAsyncFunction::new(Arc::clone(&runtime), move |x: u64| async move {
                    if !latency.is_zero() {
                        tokio::time::sleep(latency).await;
                    }
                    Ok(vec![x * 2])
                });
            let elapsed = run(model, chain, function, records);
            runtime.shutdown();
            elapsed
        }
        Client::Pool => {
            let threads = if latency.is_zero() { 4 } else { capacity };
            let pool = BlockingPool::new("bench-pool", threads, capacity).unwrap();
            let function = BlockingAsyncFunction::new(
                Arc::clone(&pool),
                || Ok(()),
                move |_: &mut (), x: &u64| {
                    if !latency.is_zero() {
                        std::thread::sleep(latency);
                    }
                    Ok(vec![x * 2])
                },
            );
            let elapsed = run(model, chain, function, records);
            pool.shutdown();
            elapsed
        }
    }
}

fn main() {
    let bench = benching();
    let repeats = if bench { 3 } else { 1 };
    println!(
        "tokio FutureAsyncFunction vs BlockingPool, ordered, same capacity, median of {repeats}"
    );
    println!(
        "{:<8} {:>9} {:>8} {:>9} {:>14} {:>14} {:>11}",
        "model", "latency", "capacity", "records", "tokio r/s", "pool r/s", "tokio/pool"
    );
    let cases: [(Duration, usize, u64); 3] = [
        (
            Duration::from_millis(1),
            16,
            if bench { 16_000 } else { 100 },
        ),
        (
            Duration::from_millis(1),
            64,
            if bench { 40_000 } else { 100 },
        ),
        (Duration::ZERO, 64, if bench { 200_000 } else { 300 }),
    ];
    for (latency, capacity, records) in cases {
        for model in [Model::Legacy, Model::Mailbox] {
            let of = |client| {
                median(
                    (0..repeats)
                        .map(|_| time(model, client, capacity, latency, records))
                        .collect(),
                )
            };
            let tokio = rate(records, of(Client::Tokio));
            let pool = rate(records, of(Client::Pool));
            println!(
                "{:<8} {:>9} {:>8} {:>9} {:>14.0} {:>14.0} {:>11.2}",
                model.to_string(),
                format!("{latency:?}"),
                capacity,
                records,
                tokio,
                pool,
                tokio / pool
            );
        }
    }
}
