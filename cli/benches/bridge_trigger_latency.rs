//! Checkpoint-trigger latency under a source that emits as fast as it can, for the legacy
//! `SourceStreamTask` (per lock fairness, with and without the bounded hand-over), the bridge
//! `LegacySourceStreamTask` (per lock fairness) and the `HandoffReader` in a mailbox
//! `SourceStreamTask`, in one run: triggers on absolute deadlines every millisecond (a slow snapshot
//! does not delay the next trigger: no coordinated omission), latency from each trigger's
//! *scheduled* time to the start of its snapshot (the chain's `prepare_snapshot_pre_barrier`,
//! which every model runs first), and the source's throughput meanwhile. The harness is
//! `streamtask_cli::bench::models::hot_triggers` (what `streamtask bench` runs).
//!
//! `cargo bench --bench bridge_trigger_latency` (run by `cargo test --all-targets` it does a
//! tiny smoke run).

use std::time::Duration;

use streamtask_cli::bench::benching;
use streamtask_cli::bench::models::{Runner, hot_triggers};
use streamtask_legacy::Fairness;

fn main() {
    let bench = benching();
    let triggers = if bench { 2_000 } else { 20 };
    let interval = Duration::from_millis(1);
    let configs: &[(Runner, Fairness)] = if bench {
        &[
            (Runner::Legacy, Fairness::Eventual),
            (Runner::LegacyBoundedHandover, Fairness::Eventual),
            (Runner::Bridge, Fairness::Eventual),
            (Runner::Handoff(1024), Fairness::Eventual),
            (Runner::Legacy, Fairness::Unfair),
            (Runner::LegacyBoundedHandover, Fairness::Unfair),
            (Runner::Bridge, Fairness::Unfair),
            (Runner::Bridge, Fairness::Fair),
        ]
    } else {
        &[
            (Runner::Legacy, Fairness::Eventual),
            (Runner::LegacyBoundedHandover, Fairness::Eventual),
            (Runner::Bridge, Fairness::Eventual),
            (Runner::Handoff(1024), Fairness::Eventual),
        ]
    };
    for &(runner, fairness) in configs {
        let run = hot_triggers(runner, fairness, triggers, interval);
        println!(
            "{:<32} triggers={triggers} acked={} | scheduled->snapshot (us): p50={:.0} p99={:.0} \
             p99.9={:.0} max={:.0} | call p50: {:.2} us | records/s: {:.0}",
            format!("{} {fairness:?}", runner.label()),
            run.acked,
            run.p50_us,
            run.p99_us,
            run.p999_us,
            run.max_us,
            run.call_p50_us,
            run.records_per_s,
        );
    }
}
