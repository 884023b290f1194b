//! Mailbox throughput: P producer threads put, the owner thread takes, against a crossbeam
//! unbounded channel with the same producers, in one run.
//!
//! `cargo bench -p streamtask-mailbox --bench throughput`
//!
//! | benchmark | consumer |
//! |---|---|
//! | `mailbox_take/P` | `take(Priority::MIN)` per mail (blocks when empty) |
//! | `mailbox_batch/P` | the processor's way: `create_batch` then `try_take_from_batch` until empty, `take` when nothing is queued |
//! | `crossbeam_unbounded/P` | `recv` per message |

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use streamtask_mailbox::{Mail, Priority, TaskMailbox};

const MAILS: u64 = 100_000;

fn mailbox_run(producers: u64, batched: bool) -> Duration {
    let mailbox = TaskMailbox::new();
    let each = MAILS / producers;
    let start = Instant::now();
    thread::scope(|s| {
        for p in 0..producers {
            let mailbox = &mailbox;
            s.spawn(move || {
                for i in 0..each {
                    mailbox
                        .put(Mail::new(Priority::MIN, p * each + i))
                        .expect("open");
                }
            });
        }
        let mut sum = 0u64;
        let mut taken = 0;
        while taken < each * producers {
            if batched && mailbox.create_batch().expect("owner") {
                while let Some(mail) = mailbox.try_take_from_batch().expect("owner") {
                    sum = sum.wrapping_add(mail.into_body());
                    taken += 1;
                }
            } else {
                sum = sum.wrapping_add(mailbox.take(Priority::MIN).expect("open").into_body());
                taken += 1;
            }
        }
        black_box(sum);
    });
    start.elapsed()
}

fn crossbeam_run(producers: u64) -> Duration {
    let (tx, rx) = crossbeam::channel::unbounded::<u64>();
    let each = MAILS / producers;
    let start = Instant::now();
    thread::scope(|s| {
        for p in 0..producers {
            let tx = tx.clone();
            s.spawn(move || {
                for i in 0..each {
                    tx.send(p * each + i).expect("connected");
                }
            });
        }
        let mut sum = 0u64;
        for _ in 0..each * producers {
            sum = sum.wrapping_add(rx.recv().expect("connected"));
        }
        black_box(sum);
    });
    start.elapsed()
}

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
            |b, &p| b.iter_custom(|iters| (0..iters).map(|_| mailbox_run(p, false)).sum()),
        );
        group.bench_with_input(
            BenchmarkId::new("mailbox_batch", producers),
            &producers,
            |b, &p| b.iter_custom(|iters| (0..iters).map(|_| mailbox_run(p, true)).sum()),
        );
        group.bench_with_input(
            BenchmarkId::new("crossbeam_unbounded", producers),
            &producers,
            |b, &p| b.iter_custom(|iters| (0..iters).map(|_| crossbeam_run(p)).sum()),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
