//! The bench's `bridge_vs_legacy_trigger_p99` row on its own: checkpoint-trigger latency under
//! a hot legacy source, legacy task and bridge alternating, each run as `streamtask bench` runs
//! it (`streamtask_cli::bench::models::hot_triggers`: 2,000 triggers, one per millisecond). Prints
//! each run's p50/p99/max (scheduled time -> snapshot start), the trigger thread's own lateness
//! and the bridge's ratio over legacy, per round and pooled over rounds.
//!
//! ```sh
//! cargo run --release --example bridge_triggers -- 5   # rounds (default 3)
//! ```

use std::time::Duration;

use hdrhistogram::Histogram;
use streamtask_cli::bench::models::{Runner, TriggerRun, hot_triggers};
use streamtask_legacy::Fairness;

const TRIGGERS: u64 = 2_000;
const INTERVAL: Duration = Duration::from_millis(1);

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

fn line(label: &str, run: &TriggerRun) {
    println!(
        "  {label:<7} p50 {:>7.1} p99 {:>7.1} max {:>8.1} us | from call p99 {:>7.1} | \
         lateness p99 {:>6.1} | {:.1} M records/s",
        run.p50_us,
        run.p99_us,
        run.max_us,
        us(&run.from_call, 0.99),
        us(&run.lateness, 0.99),
        run.records_per_s / 1e6,
    );
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("rounds: a number"))
        .unwrap_or(3);
    let mut pooled: [Option<Histogram<u64>>; 2] = [None, None];
    let mut ratios = Vec::new();
    for round in 0..rounds {
        // As in the bench: legacy first, then the bridge.
        let legacy = hot_triggers(Runner::Legacy, Fairness::Eventual, TRIGGERS, INTERVAL);
        let bridge = hot_triggers(Runner::Bridge, Fairness::Eventual, TRIGGERS, INTERVAL);
        println!("round {}", round + 1);
        line("legacy", &legacy);
        line("bridge", &bridge);
        let ratio = bridge.p99_us / legacy.p99_us;
        println!("  bridge/legacy p99 {ratio:.3}x");
        ratios.push(ratio);
        for (pool, run) in pooled.iter_mut().zip([&legacy, &bridge]) {
            match pool {
                Some(h) => h.add(&run.latency).expect("same bounds"),
                None => *pool = Some(run.latency.clone()),
            }
        }
    }
    ratios.sort_by(f64::total_cmp);
    let [Some(legacy), Some(bridge)] = &pooled else {
        return;
    };
    println!(
        "pooled p99: legacy {:.1} us, bridge {:.1} us ({:.3}x); median of the rounds' ratios {:.3}x",
        us(legacy, 0.99),
        us(bridge, 0.99),
        us(bridge, 0.99) / us(legacy, 0.99),
        ratios[ratios.len() / 2],
    );
}
