//! Per-record cost, as ratios in one run: a bare loop, the same loop taking the checkpoint lock
//! per record (each fairness), and a source task emitting through a trivial map chain.
//!
//! `cargo bench -p streamtask-legacy --bench per_record`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use streamtask_core::OperatorError;
use streamtask_core::operator::{Discard, Map};
use streamtask_core::task::TaskConfig;
use streamtask_legacy::{
    CheckpointLock, Fairness, SourceContext, SourceFunction, SourceStreamTask,
};

/// Emits `0..limit`, one `collect` (one lock acquisition) per record.
struct Count {
    limit: u64,
}

impl SourceFunction for Count {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        for n in 0..self.limit {
            ctx.collect(n)?;
        }
        Ok(())
    }
}

fn per_record(c: &mut Criterion) {
    let mut group = c.benchmark_group("per_record");
    group.throughput(Throughput::Elements(1));
    group.bench_function("bare_loop", |b| {
        let mut acc = 0u64;
        b.iter(|| {
            acc = acc.wrapping_add(black_box(3));
            black_box(acc)
        });
    });
    for fairness in [Fairness::Unfair, Fairness::Eventual, Fairness::Fair] {
        let lock = CheckpointLock::new(0u64, fairness);
        group.bench_function(format!("lock_per_record/{fairness:?}"), |b| {
            b.iter(|| {
                let mut acc = lock.lock();
                *acc = acc.wrapping_add(black_box(3));
                black_box(*acc)
            });
        });
    }
    for fairness in [Fairness::Unfair, Fairness::Eventual, Fairness::Fair] {
        group.bench_function(format!("source_task_map_chain/{fairness:?}"), |b| {
            b.iter_custom(|iters| {
                let task = SourceStreamTask::new(
                    TaskConfig::new("bench"),
                    Count { limit: iters },
                    Map::new("inc", |n: u64| n.wrapping_add(1)),
                    Discard,
                )
                .with_fairness(fairness)
                .spawn();
                let start = Instant::now();
                let outcome = task.join();
                let elapsed = start.elapsed();
                assert!(outcome.is_finished());
                elapsed
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = per_record
}
criterion_main!(benches);
