//! Many event-time timers per watermark, the same output under every model with interruptible
//! timers on and off: the mailbox model and the bridge's mailbox tasks fire in chunks with
//! checkpoints and notices running in between (chunks of one timer here, so every waiting
//! mail cuts a firing), the legacy model fires each watermark's timers in one go under its
//! lock. A task with a firing deferred takes no record, so what a timer reads of its key's
//! state is the same either way.
//!
//! The job: a reader (records `n` with timestamp `n`, a watermark every `WM_EVERY` records, so
//! each watermark makes `WM_EVERY` timers due) -> `key_by(n % KEYS)` -> a running total per
//! key with an event-time timer per record, which prints the key, the timer's time and the
//! total when it fires (a record taken between two chunks of a firing would change the totals
//! printed) -> a collecting sink. Checkpoints every few milliseconds put mails in the firings'
//! way. The adapter (`run`) runs the job on a thread of its own with a hang guard.

use std::sync::mpsc;
use std::task::Waker;
use std::thread;
use std::time::Duration;

use std::num::NonZeroUsize;
use streamtask::prelude::*;
use streamtask::{JobError, JobResult, sink::CollectHandle};

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];
const END: u64 = 30_000;
const WM_EVERY: u64 = 10_000;
const KEYS: u64 = 13;
/// Hang guard for a run; never an assertion on time.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// Records `0..END` with timestamp `n`, a watermark after every `WM_EVERY` records.
struct Numbers {
    next: u64,
}

impl SourceReader<u64> for Numbers {
    fn name(&self) -> &str {
        "numbers"
    }

    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next == END {
            return Ok(InputStatus::EndOfInput);
        }
        let n = self.next;
        out.collect_with_timestamp(n, i64::try_from(n).unwrap())?;
        self.next += 1;
        if self.next.is_multiple_of(WM_EVERY) {
            out.emit_watermark(Watermark(i64::try_from(n).unwrap()))?;
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        streamtask_core::state::encode(&self.next).map_err(|e| OperatorError::state("numbers", e))
    }
}

/// A running total per key; each record's timer prints `(key, time, total)`.
struct Totals;

impl KeyedProcessFunction for Totals {
    type Key = u64;
    type In = u64;
    type Out = (u64, i64, u64);
    type State = u64;

    fn process_element(
        &mut self,
        value: u64,
        ctx: &mut KeyedContext<'_, '_, u64, u64, (u64, i64, u64)>,
    ) -> Result<(), OperatorError> {
        *ctx.state() += value;
        ctx.register_event_timer(i64::try_from(value).unwrap());
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, u64, u64, (u64, i64, u64)>,
    ) -> Result<(), OperatorError> {
        let out = (*ctx.key(), timestamp, *ctx.state());
        ctx.collect(out)
    }
}

/// What the job prints, in sorted order: a timer at `t` fires at the first watermark at or
/// after `t`, when every record up to that watermark was counted.
fn expected() -> Vec<(u64, i64, u64)> {
    let mut out = Vec::new();
    let mut totals = [0u64; KEYS as usize];
    for batch in (0..END).step_by(usize::try_from(WM_EVERY).unwrap()) {
        let records = batch..batch + WM_EVERY;
        for n in records.clone() {
            totals[usize::try_from(n % KEYS).unwrap()] += n;
        }
        for n in records {
            let key = n % KEYS;
            out.push((
                key,
                i64::try_from(n).unwrap(),
                totals[usize::try_from(key).unwrap()],
            ));
        }
    }
    out.sort_unstable();
    out
}

/// The adapter: the job under `model` with `timers`, on a thread of its own, bounded by the
/// hang guard; returns the sorted output.
fn run(model: Model, timers: InterruptibleTimers) -> (Vec<(u64, i64, u64)>, JobResult) {
    let dir = tempfile::tempdir().unwrap();
    let config = JobConfig::new(dir.path())
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(1))
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::NONE)
        .with_interruptible_timers(timers);
    let out = CollectHandle::new();
    let sink = out.clone();
    let (done, result) = mpsc::channel::<Result<JobResult, JobError>>();
    let runner = thread::spawn(move || {
        let env = StreamEnvironment::new(model);
        env.add_reader("numbers", |_| Numbers { next: 0 })
            .key_by(|n: &u64| n % KEYS)
            .process("totals", 2, |_| Totals)
            .collect_sink("out", &sink);
        let _ = done.send(env.build().unwrap().run(&config));
    });
    let result = result
        .recv_timeout(HANG_GUARD)
        .unwrap_or_else(|_| panic!("{model:?}: the run did not return within the hang guard"));
    runner.join().unwrap();
    let result = result.unwrap_or_else(|e| panic!("{model:?} {timers:?}: {e}"));
    let mut received = out.received();
    received.sort_unstable();
    (received, result)
}

fn in_chunks_of_one() -> InterruptibleTimers {
    InterruptibleTimers::enabled().with_chunk(NonZeroUsize::new(1).unwrap())
}

#[test]
fn smoke() {
    let (output, result) = run(Model::Mailbox, InterruptibleTimers::default());
    assert_eq!(output, expected());
    assert_eq!(result.restarts, 0);
}

#[test]
fn many_timers_per_watermark_print_the_same_under_every_model_interruptible_or_not() {
    let expected = expected();
    for model in MODELS {
        for timers in [in_chunks_of_one(), InterruptibleTimers::disabled()] {
            let (output, _) = run(model, timers);
            assert!(
                output == expected,
                "{model:?} with {timers:?}: {} records, {} expected",
                output.len(),
                expected.len()
            );
        }
    }
}
