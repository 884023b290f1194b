//! The trigger rows of `streamtask bench` on their own: the mailbox `SourceStreamTask`
//! against the tokio `select!` loop batching 1024 records, the `trigger_checkpoint` call's
//! median, and the bridge against the legacy task under a hot source, under the lock's
//! `Eventual` and `Unfair` fairness. Each runner's samples pooled over the rounds, the runners'
//! order alternating by round, as the bench does.
//!
//! ```sh
//! cargo run --release --example trigger_rows -- 5 all   # rounds, then: all | tokio | bridge
//! ```

use std::time::Duration;

use streamtask_cli::bench::Pooled;
use streamtask_cli::bench::models::{Runner, TriggerRun, hot_triggers};
use streamtask_cli::bench::tokio_peer::select_loop;
use streamtask_legacy::Fairness;

const TRIGGERS: u64 = 2_000;
const INTERVAL: Duration = Duration::from_millis(1);

/// One runner's samples over the rounds (the bench's [`Pooled`]) and its call medians.
struct Pool {
    label: &'static str,
    pooled: Pooled,
    calls: Vec<f64>,
}

impl Pool {
    fn new(label: &'static str) -> Self {
        Pool {
            label,
            pooled: Pooled::default(),
            calls: Vec::new(),
        }
    }
    fn add(&mut self, run: &TriggerRun) {
        self.pooled.add(run);
        self.calls.push(run.call_p50_us);
    }
    fn print(&self) {
        let mut calls = self.calls.clone();
        calls.sort_by(f64::total_cmp);
        let s = self.pooled.summary();
        println!(
            "  {:<16} n {:>6} p50 {:>6.1} p99 {:>7.1} p99.9 {:>8.1} us | from call p50 {:>5.1} p99 {:>6.1} | late p99 {:>6.1} | call p50 median {:.3} us {:?}",
            self.label,
            s.samples,
            s.p50_us,
            s.p99_us,
            s.p999_us,
            s.from_call_p50_us,
            s.from_call_p99_us,
            s.lateness_p99_us,
            calls[calls.len() / 2],
            calls
                .iter()
                .map(|c| (c * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>(),
        );
    }
    fn p99(&self) -> f64 {
        self.pooled.summary().p99_us
    }
    fn p99_call(&self) -> f64 {
        self.pooled.summary().from_call_p99_us
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args
        .next()
        .map(|s| s.parse().expect("rounds: a number"))
        .unwrap_or(3);
    let what = args.next().unwrap_or_else(|| "all".into());
    // One runner alone (for `perf`): mailbox | tokio1024 | legacy | bridge-one | legacy-unfair |
    // bridge-unfair.
    let single = match what.as_str() {
        "mailbox" => Some((Some(Runner::Native), Fairness::Eventual)),
        "tokio1024" => Some((None, Fairness::Eventual)),
        "legacy" => Some((Some(Runner::Legacy), Fairness::Eventual)),
        "bridge-one" => Some((Some(Runner::Bridge), Fairness::Eventual)),
        "legacy-unfair" => Some((Some(Runner::Legacy), Fairness::Unfair)),
        "bridge-unfair" => Some((Some(Runner::Bridge), Fairness::Unfair)),
        _ => None,
    };
    if let Some((runner, fairness)) = single {
        let mut pool = Pool::new("single");
        for _ in 0..rounds {
            pool.add(&match runner {
                Some(runner) => hot_triggers(runner, fairness, TRIGGERS, INTERVAL),
                None => select_loop(1024, TRIGGERS, INTERVAL),
            });
        }
        pool.print();
        return;
    }
    let tokio = what == "all" || what == "tokio";
    let bridge = what == "all" || what == "bridge";
    let unfair = what == "all" || what == "unfair" || what == "bridge";
    let mut mailbox = Pool::new("mailbox");
    let mut batched = Pool::new("tokio batched");
    let mut hot = [
        Pool::new("legacy eventual"),
        Pool::new("bridge eventual"),
        Pool::new("legacy unfair"),
        Pool::new("bridge unfair"),
    ];
    for round in 0..rounds {
        if tokio {
            if round % 2 == 0 {
                mailbox.add(&hot_triggers(
                    Runner::Native,
                    Fairness::Eventual,
                    TRIGGERS,
                    INTERVAL,
                ));
                batched.add(&select_loop(1024, TRIGGERS, INTERVAL));
            } else {
                batched.add(&select_loop(1024, TRIGGERS, INTERVAL));
                mailbox.add(&hot_triggers(
                    Runner::Native,
                    Fairness::Eventual,
                    TRIGGERS,
                    INTERVAL,
                ));
            }
        }
        if bridge {
            let mut order = vec![
                (0, Runner::Legacy, Fairness::Eventual),
                (1, Runner::Bridge, Fairness::Eventual),
            ];
            if unfair {
                order.push((2, Runner::Legacy, Fairness::Unfair));
                order.push((3, Runner::Bridge, Fairness::Unfair));
            }
            if round % 2 == 1 {
                order.reverse();
            }
            for (i, runner, fairness) in order {
                hot[i].add(&hot_triggers(runner, fairness, TRIGGERS, INTERVAL));
            }
        }
        eprintln!("round {} done", round + 1);
    }
    if tokio {
        mailbox.print();
        batched.print();
        println!(
            "  vs_tokio_batched_p99 {:.2}x (from call {:.2}x)",
            mailbox.p99() / batched.p99(),
            mailbox.p99_call() / batched.p99_call()
        );
    }
    if bridge {
        for pool in &hot {
            if !pool.calls.is_empty() {
                pool.print();
            }
        }
        println!(
            "  bridge_vs_legacy eventual {:.3}x (from call {:.3}x)",
            hot[1].p99() / hot[0].p99(),
            hot[1].p99_call() / hot[0].p99_call()
        );
        if unfair {
            println!(
                "  bridge_vs_legacy unfair {:.3}x (from call {:.3}x)",
                hot[3].p99() / hot[2].p99(),
                hot[3].p99_call() / hot[2].p99_call()
            );
        }
    }
}
