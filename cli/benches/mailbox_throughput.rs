//! Mailbox throughput: P producer threads put, the owner thread takes, against a crossbeam
//! unbounded channel with the same producers, in one run. The harness is
//! `streamtask_cli::bench::put_take` (what `streamtask bench` runs).
//!
//! `cargo bench --bench mailbox_throughput`
//!
//! | benchmark | consumer |
//! |---|---|
//! | `mailbox_take/P` | `take(Priority::MIN)` per mail (blocks when empty) |
//! | `mailbox_batch/P` | the processor's way: `create_batch` then `try_take_from_batch` until empty, `take` when nothing is queued |
//! | `crossbeam_unbounded/P` | `recv` per message |

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use streamtask_cli::bench::put_take::{Consumer, crossbeam_run, mailbox_run};

const MAILS: u64 = 100_000;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("throughput");
    group
        .throughput(Throughput::Elements(MAILS))
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for producers in [1u64, 2, 4] {
        group.bench_with_input(
            BenchmarkId::new("mailbox_take", producers),
            &producers,
            |b, &p| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| mailbox_run(p, MAILS, Consumer::Take))
                        .sum()
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("mailbox_batch", producers),
            &producers,
            |b, &p| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| mailbox_run(p, MAILS, Consumer::Batch))
                        .sum()
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("crossbeam_unbounded", producers),
            &producers,
            |b, &p| b.iter_custom(|iters| (0..iters).map(|_| crossbeam_run(p, MAILS)).sum()),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
