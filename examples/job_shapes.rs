//! One job written once, run under the legacy, mailbox and bridge models with checkpoints and
//! injected faults: a legacy `SourceFunction` and a `from_sequence` source (each model picks
//! its adapter), connect with a co-map, a fan-out, a union, key_by, rebalance, rescale, broadcast, shuffle, a custom partitioner
//! and global. The committed output must be identical under the three models and equal to the
//! output of a run without faults; the example asserts it and prints each model's plan.
//!
//! Run with `cargo run --example job_shapes`.

use std::sync::Arc;
use std::time::Duration;

use streamtask::demo::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;

/// A checkpointed legacy source of `0..end`: state and emit in one locked section.
struct Count {
    end: u64,
    faults: Arc<FaultPlan>,
}

impl SourceFunction for Count {
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "count"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == self.end {
                return Ok(());
            }
            self.faults.check(FaultKind::Source);
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// The job, written once for every model.
fn build(model: Model, faults: &Arc<FaultPlan>, out: &CollectHandle<u64>) -> JobGraph {
    let env = StreamEnvironment::new(model);
    let source_faults = Arc::clone(faults);
    let counted = env.add_source("count", move |_| Count {
        end: 3_000,
        faults: Arc::clone(&source_faults),
    });
    let mut branches = env
        .from_sequence("sequence", 100_000..101_000)
        .fan_out(&["as is", "shifted"]);
    let shifted = branches
        .pop()
        .expect("two branches")
        .map("plus 100000", |n: u64| n + 100_000);
    let sequence = branches.pop().expect("two branches");
    let words: Vec<String> = (300_000..300_500).map(|n: u64| n.to_string()).collect();
    let (first, second) = (Arc::clone(faults), Arc::clone(faults));
    counted
        .connect(env.from_iter("words", words))
        .map(
            "numbers and words",
            |n: u64| n,
            |w: String| w.parse::<u64>().expect("the words are numbers"),
        )
        .union("all", [sequence, shifted])
        .map("fault", move |n: u64| {
            first.check(FaultKind::Operator);
            n
        })
        .rebalance("spread", 3)
        .rescale("rescaled", 2)
        .broadcast("copies", 2)
        .filter("halves", |n: &u64| n % 2 == 0)
        .shuffle_random("shuffled", 3)
        .partition_custom("custom", 2, |n: &u64, parallelism| {
            (*n as usize) % parallelism
        })
        .key_by(|n: &u64| n % 5)
        .map_with_parallelism("plus one", 2, move |n: u64| {
            second.check(FaultKind::Operator);
            n + 1
        })
        .global("global")
        .collect_sink("collect", out);
    env.build().expect("the job is valid under every model")
}

fn run(model: Model, faults: FaultPlan) -> (Vec<u64>, u32) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let faults = Arc::new(faults);
    let out = CollectHandle::new();
    let job = build(model, &faults, &out);
    let config = JobConfig::new(dir.path())
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(Duration::from_millis(250)),
        ))
        .with_restart(RestartStrategy::fixed_delay(10, Duration::from_millis(1)))
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair);
    let result = job.run(&config).unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(faults.fired(), faults.planned().len(), "{model}: faults");
    let mut got = out.committed();
    got.sort_unstable();
    (got, result.restarts)
}

fn main() {
    // The injected faults panic on purpose: keep their messages out of the output.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        if !message.starts_with("injected fault") {
            default_hook(info);
        }
    }));

    let mut expected: Vec<u64> = (0..3_000)
        .chain(100_000..101_000)
        .chain(200_000..201_000)
        .chain(300_000..300_500)
        .collect();
    expected.retain(|n| n % 2 == 0);
    let mut expected: Vec<u64> = expected.iter().flat_map(|&n| [n + 1, n + 1]).collect();
    expected.sort_unstable();

    let mut outputs = Vec::new();
    for model in [Model::Legacy, Model::Mailbox, Model::Bridge] {
        println!(
            "{}",
            build(model, &Arc::new(FaultPlan::none()), &CollectHandle::new()).plan()
        );
        let faults = FaultPlan::at(&[
            (FaultKind::Source, 1_000),
            (FaultKind::Operator, 2_500),
            (FaultKind::Operator, 6_000),
        ]);
        let (got, restarts) = run(model, faults);
        assert_eq!(
            got, expected,
            "{model}: committed output is not exactly once"
        );
        println!(
            "{model}: {} records committed exactly once after {restarts} restarts\n",
            got.len()
        );
        outputs.push(got);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]));
    println!("identical exactly-once output under the legacy, mailbox and bridge models");
}
