//! Migrating an operator that took the checkpoint lock from its own thread.
//!
//! A client library calls back on its own thread (here: a "ticker" standing in for a
//! subscription). Before the mailbox, the operator's callback took the task's checkpoint lock
//! and emitted right there. After, the callback only *sends an event*; the operator emits in
//! `on_event`, on whatever thread the model runs it: under the checkpoint lock in the legacy
//! model, as a mail at the operator's priority in the mailbox model. The operator is written
//! once and runs unchanged under every model.
//!
//! ```sh
//! cargo run --example migrate_operator
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use streamtask::sink::CollectHandle;
use streamtask::{JobConfig, Model, StreamEnvironment};
use streamtask_core::operator::{Context, Operator, OperatorEvent};
use streamtask_core::{OperatorError, StreamRecord};
use streamtask_legacy::{CheckpointLock, Fairness, SourceContext, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// BEFORE: the callback thread shares the task's state through the checkpoint lock. Every
/// access, the task's and the callback's, must remember to lock; forgetting it is a data race
/// the compiler of the original (Java) code could not see. In Rust the lock owns the state, so
/// forgetting is impossible, but the shape stays: two threads contend for one lock.
fn before() -> Vec<u64> {
    #[derive(Default)]
    struct Buffered {
        pending: Vec<u64>,
        emitted: Vec<u64>,
    }
    let lock = Arc::new(CheckpointLock::new(Buffered::default(), Fairness::Eventual));
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let lock = Arc::clone(&lock);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                thread::sleep(Duration::from_millis(1));
                // synchronized (getCheckpointLock()) { flush(); }
                let mut state = lock.lock();
                let pending = std::mem::take(&mut state.pending);
                state.emitted.extend(pending);
            }
        })
    };
    for n in 0..1_000 {
        lock.lock().pending.push(n); // the task thread, one lock per record
    }
    thread::sleep(Duration::from_millis(5));
    stop.store(true, Ordering::Release);
    flusher.join().expect("flusher thread");
    let mut state = lock.lock();
    let pending = std::mem::take(&mut state.pending);
    state.emitted.extend(pending);
    std::mem::take(&mut state.emitted)
}

/// AFTER: buffers records and emits them when its callback thread says so. The callback
/// thread holds only an `EventSender`.
struct BatchOnTick {
    buffer: Vec<u64>,
    stop: Arc<AtomicBool>,
    ticker: Option<thread::JoinHandle<()>>,
}

/// The event the callback thread sends.
struct Tick;

impl Operator for BatchOnTick {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        "batch-on-tick"
    }

    fn open(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        let events = ctx.event_sender();
        let stop = Arc::clone(&self.stop);
        self.ticker = Some(thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                thread::sleep(Duration::from_millis(1));
                // mailboxExecutor.execute(this::flush): a refused event means the task ended.
                if events.send(Tick).is_err() {
                    break;
                }
            }
        }));
        Ok(())
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.buffer.push(record.value);
        Ok(())
    }

    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        if event.downcast::<Tick>().is_err() {
            return Err(OperatorError::UnexpectedEvent {
                operator: self.name().to_string(),
            });
        }
        for n in self.buffer.drain(..) {
            ctx.collect(StreamRecord::new(n))?;
        }
        Ok(())
    }

    fn end_input(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        for n in self.buffer.drain(..) {
            ctx.collect(StreamRecord::new(n))?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        self.stop.store(true, Ordering::Release);
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        streamtask_core::state::encode(&self.buffer)
            .map(Some)
            .map_err(|e| OperatorError::state("batch-on-tick", e))
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = restored {
            self.buffer = streamtask_core::state::decode(bytes)
                .map_err(|e| OperatorError::state("batch-on-tick", e))?;
        }
        Ok(())
    }
}

struct Count(u64);

/// The same counting source as a new-style reader, for the mailbox model.
struct CountReader {
    next: u64,
    end: u64,
}

impl SourceReader<u64> for CountReader {
    fn name(&self) -> &str {
        "count"
    }

    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next == self.end {
            return Ok(InputStatus::EndOfInput);
        }
        out.collect(self.next)?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &std::task::Waker) {
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        streamtask_core::state::encode(&self.next).map_err(|e| OperatorError::state("count", e))
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = streamtask_core::state::decode(bytes)
                .map_err(|e| OperatorError::state("count", e))?;
        }
        Ok(())
    }
}

impl SourceFunction for Count {
    type Out = u64;
    type State = u64;

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == self.0 {
                return Ok(());
            }
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut old = before();
    old.sort_unstable();
    println!(
        "before: {} records emitted by the task thread and the lock-taking flusher",
        old.len()
    );

    // A fresh directory per run: nothing of an earlier run is restored (or refused).
    let dir = tempfile::tempdir()?;
    for model in Model::ALL {
        let env = StreamEnvironment::new(model);
        let out = CollectHandle::new();
        let source = match model {
            Model::Legacy | Model::Bridge => env.add_source("count", |_| Count(1_000)),
            Model::Mailbox => env.add_reader("count", |_| CountReader {
                next: 0,
                end: 1_000,
            }),
        };
        source
            .start_new_chain("batching")
            .operator(|_| BatchOnTick {
                buffer: Vec::new(),
                stop: Arc::new(AtomicBool::new(false)),
                ticker: None,
            })
            .collect_sink("collect", &out);
        // A failed run fails the example (CI runs it): what is printed is what held.
        env.build()?
            .run(&JobConfig::new(dir.path().join(model.name())))?;
        let mut got = out.committed();
        got.sort_unstable();
        assert_eq!(got, old, "{model}: same records as before");
        println!(
            "after ({model}): the same {} records, emitted in on_event",
            got.len()
        );
    }
    Ok(())
}
