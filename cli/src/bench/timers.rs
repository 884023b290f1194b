//! How long an urgent mail waits while a watermark fires many event-time timers, with
//! interruptible timers on and off.
//!
//! A mailbox source task reads `timers` records (each its own key, each registering an
//! event-time timer at its timestamp), then one watermark that makes every timer due, then
//! waits. While the firing runs, the bench thread triggers checkpoints one at a time (the next
//! once the previous one was acknowledged): a source task's trigger is an urgent mail (by the
//! trigger slot and the doorbell when the slot is free). The figure is the task's checkpoint
//! start delay (trigger call -> snapshot start) of those triggers. On, a trigger waits for at
//! most a chunk of timers; off, it waits for the rest of the firing, so a run has one sample
//! (the rounds give one each).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Waker;
use std::time::{Duration, Instant};

use streamtask_core::function::{KeyedProcessFunction, TimeDomain};
use streamtask_core::metrics::LatencyHistogram;
use streamtask_core::operator::{Discard, KeyedContext, KeyedProcessOperator};
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::time::InterruptibleTimers;
use streamtask_core::{CheckpointBarrier, OperatorError, Watermark};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader, SourceStreamTask};

/// A wait of the bench thread that means the task is stuck; never a measured figure.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// What the reader and the function share with the bench thread.
#[derive(Debug, Default)]
struct Progress {
    /// The first timer fired.
    firing: AtomicBool,
    /// Timers fired so far.
    fired: AtomicU64,
    /// The bench is done: the reader ends its input.
    end: AtomicBool,
    /// The reader's waker while it waits for `end`.
    waker: streamtask_core::sync::Mutex<Option<Waker>>,
}

/// `timers` records `0, 1, ...` with their value as timestamp, one watermark making them all
/// due, then nothing until the bench says end.
struct Load {
    next: u64,
    timers: u64,
    progress: Arc<Progress>,
}

impl SourceReader<u64> for Load {
    fn name(&self) -> &str {
        "timer load"
    }

    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next < self.timers {
            out.collect_with_timestamp(self.next, i64::try_from(self.next).unwrap_or(i64::MAX))?;
            self.next += 1;
            return Ok(InputStatus::MoreAvailable);
        }
        if self.next == self.timers {
            self.next += 1;
            out.emit_watermark(Watermark(i64::try_from(self.timers).unwrap_or(i64::MAX)))?;
            return Ok(InputStatus::MoreAvailable);
        }
        if self.progress.end.load(Ordering::Acquire) {
            Ok(InputStatus::EndOfInput)
        } else {
            Ok(InputStatus::NothingAvailable)
        }
    }

    fn register_waker(&mut self, waker: &Waker) {
        // Register, then look again: an end set before the registration is seen here, one set
        // after it finds the waker.
        *self.progress.waker.lock() = Some(waker.clone());
        if self.progress.end.load(Ordering::Acquire) {
            waker.wake_by_ref();
        }
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(self.next.to_le_bytes().to_vec())
    }
}

/// One event-time timer per record (its own key); a timer only counts itself.
struct Fire {
    progress: Arc<Progress>,
}

impl KeyedProcessFunction for Fire {
    type Key = u64;
    type In = u64;
    type Out = u64;
    type State = ();

    fn process_element(
        &mut self,
        value: u64,
        ctx: &mut KeyedContext<'_, '_, u64, (), u64>,
    ) -> Result<(), OperatorError> {
        ctx.register_event_timer(i64::try_from(value).unwrap_or(i64::MAX));
        Ok(())
    }

    fn on_timer(
        &mut self,
        _timestamp: i64,
        _domain: TimeDomain,
        _ctx: &mut KeyedContext<'_, '_, u64, (), u64>,
    ) -> Result<(), OperatorError> {
        self.progress.firing.store(true, Ordering::Release);
        self.progress.fired.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

/// One run: the start delays of the checkpoints triggered while the watermark fired `timers`
/// timers under `setting`, merged into `pool`; returns how many were triggered.
///
/// # Panics
///
/// If the task does not get on within the hang guard or does not finish.
pub fn urgent_mail_while_firing(
    timers: u64,
    setting: InterruptibleTimers,
    pool: &LatencyHistogram,
) -> u64 {
    let progress = Arc::new(Progress::default());
    let (reports_tx, reports) = crossbeam::channel::unbounded::<TaskReport>();
    let reader = Load {
        next: 0,
        timers,
        progress: Arc::clone(&progress),
    };
    let function = Fire {
        progress: Arc::clone(&progress),
    };
    let operator = KeyedProcessOperator::new("fire", |v: &u64| *v, function);
    let task = SourceStreamTask::new(
        TaskConfig::new("timer load")
            .with_responder(CheckpointResponder::new("timer load", reports_tx))
            .with_interruptible_timers(setting),
        reader,
        operator,
        Discard,
    )
    .spawn();
    let metrics = Arc::clone(task.metrics());

    // Wait for the firing to start (short sleeps: the task needs the core).
    let deadline = Instant::now() + HANG_GUARD;
    while !progress.firing.load(Ordering::Acquire) {
        assert!(Instant::now() < deadline, "the timers never started firing");
        std::thread::sleep(Duration::from_micros(50));
    }
    // One trigger at a time while timers are left to fire.
    let mut triggered = 0;
    while progress.fired.load(Ordering::Acquire) < timers {
        triggered += 1;
        task.trigger_checkpoint(CheckpointBarrier::new(triggered, 0))
            .expect("a source task takes triggers");
        reports
            .recv_timeout(HANG_GUARD)
            .expect("the trigger is answered within the hang guard");
    }

    progress.end.store(true, Ordering::Release);
    if let Some(waker) = progress.waker.lock().take() {
        waker.wake();
    }
    let outcome = task.join();
    assert!(outcome.is_finished(), "the timer load task: {outcome:?}");
    pool.merge(metrics.checkpoint_delay.histogram());
    triggered
}
