//! The mailbox hot path: a trivial map per default-action step with an empty mailbox, against
//! the same steps in a bare loop, in one run (the ratio is the mailbox's per-record cost).
//!
//! `cargo bench --bench mailbox_hot_path`
//!
//! | benchmark | what runs per record |
//! |---|---|
//! | `bare_loop` | reader step -> map -> sink, in a `for` loop |
//! | `processor_loop` | the same step as the default action of a `MailboxProcessor` (one atomic load per step) |
//! | `source_task` | a whole `SourceStreamTask` (thread start and join amortized over the records) |

use std::hint::black_box;
use std::time::Duration;
use streamtask_cli::bench::hot_path::{Counter, Pipeline, triple};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use streamtask_core::OperatorError;
use streamtask_core::task::TaskConfig;
use streamtask_mailbox::{
    Controller, Immediate, InputStatus, MailboxProcessor, SourceStreamTask, TaskMailbox,
};

const RECORDS: u64 = 100_000;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_path");
    group
        .throughput(Throughput::Elements(RECORDS))
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));

    group.bench_function("bare_loop", |b| {
        b.iter_batched(
            || Pipeline::new(RECORDS),
            |mut pipeline| {
                while pipeline.step() == InputStatus::MoreAvailable {}
                black_box(pipeline.sink.0)
            },
            BatchSize::SmallInput,
        );
    });

    group.bench_function("processor_loop", |b| {
        b.iter_batched(
            || {
                MailboxProcessor::<Pipeline, OperatorError>::new(
                    TaskMailbox::new(),
                    Immediate::new(Pipeline::new(RECORDS)),
                )
            },
            |mut processor| {
                let mut step =
                    |p: &mut Pipeline, c: &mut Controller<'_>| -> Result<(), OperatorError> {
                        if p.step() == InputStatus::EndOfInput {
                            c.all_actions_completed();
                        }
                        Ok(())
                    };
                processor
                    .run_mailbox_loop(&mut step)
                    .expect("the bench loop never fails");
                black_box(processor.action_executor().state().sink.0)
            },
            BatchSize::SmallInput,
        );
    });

    group.throughput(Throughput::Elements(RECORDS * 10));
    group.bench_function("source_task", |b| {
        b.iter(|| {
            let task = SourceStreamTask::new(
                TaskConfig::new("bench"),
                Counter {
                    next: 0,
                    end: RECORDS * 10,
                },
                triple(),
                streamtask_core::operator::Discard,
            )
            .spawn();
            assert!(task.join().is_finished());
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
