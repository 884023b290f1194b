//! Compare the three models on a small job: the same pipeline, built once per model, with the
//! same committed output and each model's own cost.
//!
//! ```sh
//! cargo run --release --example compare_models
//! ```

use std::task::Waker;
use std::time::Instant;

use streamtask::sink::CollectHandle;
use streamtask::{JobConfig, Model, StreamEnvironment};
use streamtask_core::function::{KeyedProcessFunction, TimeDomain};
use streamtask_core::operator::KeyedContext;
use streamtask_core::state::{decode, encode};
use streamtask_core::{OperatorError, Watermark};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

const RECORDS: u64 = 200_000;

/// The legacy source: emits 0..RECORDS with event time = the number, a watermark every 100.
struct Numbers;

impl SourceFunction for Numbers {
    type Out = u64;
    type State = u64; // the next number: what a restore continues from

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            // "update my state + emit" in one locked section, as the checkpoint lock demands.
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == RECORDS {
                return Ok(());
            }
            locked.collect_with_timestamp(n, n as i64)?;
            if n % 100 == 99 {
                locked.emit_watermark(Watermark(n as i64))?;
            }
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// The same source ported to a new-style reader: no lock, one record per poll.
struct NumbersReader {
    next: u64,
}

impl SourceReader<u64> for NumbersReader {
    fn name(&self) -> &str {
        "numbers"
    }

    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next == RECORDS {
            return Ok(InputStatus::EndOfInput);
        }
        let n = self.next;
        out.collect_with_timestamp(n, n as i64)?;
        if n % 100 == 99 {
            out.emit_watermark(Watermark(n as i64))?;
        }
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.next).map_err(|e| OperatorError::state("numbers", e))
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = decode(bytes).map_err(|e| OperatorError::state("numbers", e))?;
        }
        Ok(())
    }
}

/// Sums per key (n % 10) and reports each key's sum when event time passes the end.
struct SumPerKey;

impl KeyedProcessFunction for SumPerKey {
    type Key = u64;
    type In = u64;
    type Out = (u64, u64);
    type State = u64;

    fn process_element(
        &mut self,
        n: u64,
        ctx: &mut KeyedContext<'_, '_, u64, u64, (u64, u64)>,
    ) -> Result<(), OperatorError> {
        *ctx.state() += n;
        ctx.register_event_timer(RECORDS as i64);
        Ok(())
    }

    fn on_timer(
        &mut self,
        _timestamp: i64,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, u64, u64, (u64, u64)>,
    ) -> Result<(), OperatorError> {
        let key = *ctx.key();
        let sum = *ctx.state();
        ctx.collect((key, sum))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A fresh directory per run: nothing of an earlier run is restored (or refused).
    let dir = tempfile::tempdir()?;
    let mut all_sums = Vec::new();
    for model in Model::ALL {
        let env = StreamEnvironment::new(model);
        // The legacy and bridge models run the SourceFunction; the mailbox model its port.
        let numbers = match model {
            Model::Legacy | Model::Bridge => env.add_source("numbers", |_| Numbers),
            Model::Mailbox => env.add_reader("numbers", |_| NumbersReader { next: 0 }),
        };
        let out = CollectHandle::new();
        numbers
            .key_by(|n: &u64| n % 10)
            .process("sum", 2, |_| SumPerKey)
            .collect_sink("collect", &out);
        let job = env.build()?;
        let started = Instant::now();
        let result = job.run(&JobConfig::new(dir.path().join(model.name())))?;
        let mut sums = out.committed();
        sums.sort();
        // What is printed is asserted: ten keys, every record summed once.
        assert_eq!(sums.len(), 10, "{model}: one sum per key");
        assert_eq!(
            sums.iter().map(|(_, s)| *s).sum::<u64>(),
            (0..RECORDS).sum::<u64>(),
            "{model}: every record counted once"
        );
        assert_eq!(result.restarts, 0, "{model}: no restarts");
        all_sums.push(sums.clone());
        println!(
            "{model:>8}: {:>7.0} records/s, {} checkpoints, lock wait p99 {} µs, mailbox latency p99 {} µs, sums {:?}",
            RECORDS as f64 / started.elapsed().as_secs_f64(),
            result.checkpoints_completed,
            result.metrics.lock_wait.summary().p99,
            result.metrics.mailbox_latency.summary().p99,
            &sums[..3],
        );
    }
    assert!(
        all_sums.windows(2).all(|w| w[0] == w[1]),
        "every model sums the same"
    );
    Ok(())
}
