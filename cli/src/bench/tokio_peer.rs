//! The pattern a user would otherwise pick (Arroyo's): a tokio `current_thread` loop that
//! `select!`s, biased towards control, between a control channel and the same counting source,
//! per record or per batch of records. Same work per record as the tasks (`x * 31` summed, the
//! tasks into [`Sum`](super::hot_path::Sum)), same trigger schedule; a trigger's "snapshot" is
//! copying the source's position.
//!
//! The loop runs `unconstrained`: tokio's cooperative budget would otherwise make the control
//! channel look empty after 128 polls in a loop that never yields, and triggers would wait for
//! ever.

use std::hint::black_box;
use std::time::{Duration, Instant};

use super::models::{TriggerRun, nanos, new_histogram};

/// Runs the `select!` loop, `batch` records per select, while another thread sends `triggers`
/// triggers on absolute deadlines every `interval`; latency from each trigger's scheduled time
/// (and from its call) to the loop handling it, timed as `models::hot_triggers` times the
/// tasks': same trigger thread ([`clock::sleep_until`](super::clock::sleep_until), the clock
/// read right before the call), same count of triggers, every one recorded.
///
/// # Panics
///
/// If the runtime cannot be built (the OS refuses its resources).
pub fn select_loop(batch: usize, triggers: u64, interval: Duration) -> TriggerRun {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
    // Each request carries its scheduled time and its call time (the trigger thread's clock read
    // right before the send), as the tasks' triggers are timed in `models::hot_triggers`.
    let (control, mut requests) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant, Instant)>();
    let begin = Instant::now() + Duration::from_millis(20);
    let trigger_thread = std::thread::spawn(move || {
        super::clock::precise_timers();
        let mut calls = new_histogram();
        let mut lateness = new_histogram();
        for k in 0..triggers {
            let at = begin + interval * k as u32;
            super::clock::sleep_until(at);
            let called = Instant::now();
            if control.send((k, at, called)).is_err() {
                break;
            }
            calls.saturating_record(nanos(called.elapsed()));
            lateness.saturating_record(nanos(called.saturating_duration_since(at)));
        }
        (calls, lateness)
    });
    let (latency, from_call, records, sum, snapshots) =
        runtime.block_on(tokio::task::unconstrained(async {
        let mut latency = new_histogram();
        let mut from_call = new_histogram();
        let mut next = 0u64;
        let mut sum = 0u64;
        let mut snapshots = 0u64;
        let mut counted_from = None;
        loop {
            tokio::select! {
                biased;
                request = requests.recv() => match request {
                    Some((_, at, called)) => {
                        let now = Instant::now();
                        latency.saturating_record(nanos(now.saturating_duration_since(at)));
                        from_call.saturating_record(nanos(now.saturating_duration_since(called)));
                        // The snapshot: the source's position.
                        snapshots = snapshots.wrapping_add(black_box(next));
                        counted_from.get_or_insert(next);
                    }
                    None => break,
                },
                () = std::future::ready(()) => {
                    for _ in 0..batch {
                        // `black_box`: one record at a time, as a source produces them (the
                        // compiler would sum the batch in closed form otherwise).
                        sum = sum.wrapping_add(black_box(next).wrapping_mul(31));
                        next += 1;
                    }
                }
            }
        }
        (latency, from_call, next - counted_from.unwrap_or(0), sum, snapshots)
    }));
    let elapsed = begin.elapsed().as_secs_f64();
    black_box((sum, snapshots));
    let (calls, lateness) = trigger_thread.join().expect("the trigger thread");
    TriggerRun {
        p50_us: latency.value_at_quantile(0.5) as f64 / 1e3,
        p99_us: latency.value_at_quantile(0.99) as f64 / 1e3,
        p999_us: latency.value_at_quantile(0.999) as f64 / 1e3,
        max_us: latency.max() as f64 / 1e3,
        call_p50_us: calls.value_at_quantile(0.5) as f64 / 1e3,
        records_per_s: records as f64 / elapsed,
        acked: latency.len(),
        latency,
        from_call,
        lateness,
    }
}
