//! One operator chain hosted on a timely worker: the worker's thread makes every call, one at
//! a time, as a mailbox task thread does.
//!
//! The chain sees a real processing-time clock: [`Host::poll`] moves it to the wall clock's
//! time (milliseconds since the Unix epoch, as the local executor's system clock reads) and
//! fires the processing-time timers that became due, then delivers the events other threads
//! sent the chain's operators (an async operator's completions). An event also calls the
//! host's waker ([`Host::wake_with`]), so the timely operator hosting the chain is activated to
//! poll it.

use std::sync::{Arc, OnceLock};

use streamtask_core::operator::TaskServices;
use streamtask_core::operator::{BoxOperator, Context, Emitted, EventSink, OperatorEvent};
use streamtask_core::state::TaskSnapshot;
use streamtask_core::testing::{ManualTimerService, QueuedEvents};
use streamtask_core::time::ManualClock;
use streamtask_core::{OperatorError, StreamRecord, Watermark};

/// What wakes the timely operator hosting a chain.
type Waker = Box<dyn Fn() + Send + Sync>;

/// The chain's events: queued for the worker's thread, which the waker then activates.
#[derive(Default)]
struct WakingEvents {
    queue: QueuedEvents,
    waker: OnceLock<Waker>,
}

impl EventSink for WakingEvents {
    fn send_event(&self, operator: usize, event: OperatorEvent) -> Result<(), OperatorEvent> {
        self.queue.send_event(operator, event)?;
        if let Some(wake) = self.waker.get() {
            wake();
        }
        Ok(())
    }
}

/// A chain, its output buffer and the services its operators see.
pub(crate) struct Host<I, O> {
    op: BoxOperator<I, O>,
    output: Vec<Emitted<O>>,
    clock: ManualClock,
    timers: Arc<ManualTimerService>,
    events: Arc<WakingEvents>,
    services: TaskServices,
}

/// The wall clock in milliseconds since the Unix epoch.
fn wall_clock() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl<I, O> Host<I, O> {
    /// Restores `op` from `snapshot` (a fresh start without one) and opens it, its clock at the
    /// wall clock's time.
    pub(crate) fn open(
        mut op: BoxOperator<I, O>,
        task: &str,
        snapshot: Option<&TaskSnapshot>,
    ) -> Result<Self, OperatorError> {
        op.restore_chain(snapshot, 0)?;
        let clock = ManualClock::new(wall_clock());
        let timers = Arc::new(ManualTimerService::new(clock.clone()));
        let events = Arc::new(WakingEvents::default());
        let services = TaskServices::new(task, timers.clone(), events.clone());
        let mut host = Host {
            op,
            output: Vec::new(),
            clock,
            timers,
            events,
            services,
        };
        host.call(|op, ctx| op.open(ctx))?;
        Ok(host)
    }

    fn call(
        &mut self,
        f: impl FnOnce(&mut BoxOperator<I, O>, &mut Context<'_, O>) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        let mut ctx = Context::new(&mut self.output, &self.services, 0);
        f(&mut self.op, &mut ctx)
    }

    /// Calls `wake` whenever another thread sends the chain an event (the first call wins: a
    /// chain has one host operator).
    pub(crate) fn wake_with(&self, wake: impl Fn() + Send + Sync + 'static) {
        let _ = self.events.waker.set(Box::new(wake));
    }

    /// Moves the clock to the wall clock's time, fires the processing-time timers due by then
    /// and delivers the queued events, in that order.
    pub(crate) fn poll(&mut self) -> Result<(), OperatorError> {
        let now = wall_clock();
        // Processing time never goes back, even when the wall clock does.
        if now > self.clock.now_millis() {
            self.clock.set(now);
        }
        while let Some(timer) = self.timers.pop_due() {
            self.call(|op, ctx| op.dispatch_timer(timer, ctx))?;
        }
        while let Some((operator, event)) = self.events.queue.pop() {
            self.call(|op, ctx| op.dispatch_event(operator, event, ctx))?;
        }
        Ok(())
    }

    /// Whether processing-time timers are pending: the host operator then activates itself
    /// again shortly, as nothing else wakes it for them.
    pub(crate) fn timers_pending(&self) -> bool {
        self.timers.pending() > 0
    }

    /// Whether the chain takes another input now (an async operator with a full queue does
    /// not until completions free a slot; after the end of input, until it emitted all).
    pub(crate) fn accepts_input(&self) -> bool {
        self.op.accepts_input()
    }

    pub(crate) fn record(&mut self, record: StreamRecord<I>) -> Result<(), OperatorError> {
        self.call(|op, ctx| op.process_element(record, ctx))
    }

    pub(crate) fn watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.call(|op, ctx| op.process_watermark(watermark, ctx))
    }

    /// The input ended. `finish` is not called: the last records are committed by the last
    /// epoch's checkpoint like every other, so no transaction is left for after the run.
    pub(crate) fn end_input(&mut self) -> Result<(), OperatorError> {
        self.call(|op, ctx| op.end_input(ctx))
    }

    /// The chain's snapshot for checkpoint `id`, as the local executor takes a task's.
    pub(crate) fn snapshot(&mut self, id: u64) -> Result<TaskSnapshot, OperatorError> {
        self.call(|op, ctx| op.prepare_snapshot_pre_barrier(id, ctx))?;
        let mut snapshot = TaskSnapshot::new();
        self.op.snapshot_chain(id, 0, &mut snapshot)?;
        Ok(snapshot)
    }

    pub(crate) fn complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.op.notify_checkpoint_complete(id)
    }

    pub(crate) fn take_output(&mut self) -> Vec<Emitted<O>> {
        std::mem::take(&mut self.output)
    }

    pub(crate) fn close(&mut self) -> Result<(), OperatorError> {
        self.timers.shut_down();
        self.events.queue.close();
        self.op.close()
    }
}
