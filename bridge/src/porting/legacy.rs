//! Drives the legacy side: the function on its own thread through `run_source`, paused at
//! quiet points by a backend that reports no capacity once the next stop is reached.
//!
//! The driver holds the checkpoint lock whenever it looks at the source, so the source is then
//! between two locked sections: its state and its records agree. A source that reached the stop
//! waits in `SourceContext::lock` (before its next section) until the driver moves the stop on.

use std::sync::Arc as StdArc;
use std::time::Duration;

use streamtask_core::operator::{Emitted, Output};
use streamtask_core::sync::{Arc, thread};
use streamtask_core::testing::ManualTimerService;
use streamtask_core::{
    OperatorError, StreamRecord, StreamStatus, Watermark, catch_panic, state::TaskSnapshot,
    time::ManualClock,
};
use streamtask_legacy::{
    CONTEXT_TIMER_OPERATOR, CancellationToken, CheckpointGuard, CheckpointLock, Emission, Fairness,
    SourceCell, SourceContextConfig, SourceEnd, SourceFunction, SourceOutput, restore_source_state,
    run_source,
};

use super::ledger::{Due, Ledger};
use super::report::{PortingError, Side};
use super::{ClockPlan, Plan};

/// The legacy side's backend: keeps what the source emits, pauses the source at the stop.
struct Recorder<T> {
    records: Vec<Emitted<T>>,
    position: u64,
    stop_at: u64,
    done: Option<Result<SourceEnd, OperatorError>>,
}

impl<T> Output<T> for Recorder<T> {
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.records.push(Emitted::Record(record));
        self.position += 1;
        Ok(())
    }

    // Every element is compared: watermarks and status changes too.
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.records.push(Emitted::Watermark(watermark));
        Ok(())
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.records.push(Emitted::Status(status));
        Ok(())
    }
}

impl<T: Send> SourceOutput<T> for Recorder<T> {
    fn end_input(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }

    fn has_capacity(&self) -> bool {
        self.position < self.stop_at
    }
}

type Lock<F> =
    CheckpointLock<SourceCell<<F as SourceFunction>::State, Recorder<<F as SourceFunction>::Out>>>;

/// One running instance of the legacy function.
struct Attempt<F: SourceFunction> {
    lock: Arc<Lock<F>>,
    cancel: CancellationToken,
    thread: Option<thread::JoinHandle<()>>,
    timers: StdArc<ManualTimerService>,
    clock: ManualClock,
}

impl<F: SourceFunction> Attempt<F> {
    fn start(
        mut function: F,
        state: F::State,
        position: u64,
        context: SourceContextConfig,
        clock: &ClockPlan,
    ) -> Self {
        let clock = ManualClock::new(clock.start_millis);
        let timers = StdArc::new(ManualTimerService::new(clock.clone()));
        let recorder = Recorder {
            records: Vec::new(),
            position,
            stop_at: position, // paused until the driver sets the first stop
            done: None,
        };
        let emission = Emission::new(context, timers.clone());
        let lock = Arc::new(CheckpointLock::new(
            SourceCell::new(state, emission, recorder),
            Fairness::Fair,
        ));
        let cancel = CancellationToken::new();
        let thread = {
            let (lock, cancel) = (Arc::clone(&lock), cancel.clone());
            streamtask_core::sync::spawn_named("porting-kit-legacy-source", move || {
                let result = match catch_panic(|| run_source(&mut function, &lock, &cancel)) {
                    Ok(result) => result,
                    Err(panic) => Err(OperatorError::user(
                        function.name().to_string(),
                        format!("panicked: {panic}"),
                    )),
                };
                drop(function);
                let mut cell = lock.lock();
                cell.output_mut().done = Some(result);
                // Changed under the lock: the driver waits on the condition for it.
                cell.notify_all();
            })
        };
        Attempt {
            lock,
            cancel,
            thread: Some(thread),
            timers,
            clock,
        }
    }

    /// Cancels the function (a no-op if it ended) and joins its thread within `timeout`;
    /// returns how the function ended, or `None` if it ignored cancellation (its thread is then
    /// left behind).
    fn stop(mut self, timeout: Duration) -> Option<Result<SourceEnd, OperatorError>> {
        self.cancel.cancel();
        let done = {
            let mut cell = self.lock.lock();
            cell.wait_until_for(timeout, |c| c.output().done.is_some());
            cell.output_mut().done.take()
        };
        match self.thread.take() {
            Some(thread) if done.is_some() => {
                let _ = thread.join();
            }
            // Ignores cancellation: the kit reports it as stalled.
            _ => {}
        }
        done
    }
}

/// Runs the legacy side through `ledger`'s schedule (the whole plan, or a fork's).
pub(crate) fn run<F: SourceFunction>(
    make: &mut impl FnMut() -> F,
    plan: &Plan,
    mut ledger: Ledger<F::Out, TaskSnapshot>,
) -> Result<Ledger<F::Out, TaskSnapshot>, PortingError<F::Out>> {
    let failed = |error| PortingError::Failed {
        side: Side::Legacy,
        error,
    };
    'attempts: loop {
        let restore = ledger.start_attempt();
        let state = restore_source_state::<F::State>(restore)
            .map_err(|e| failed(OperatorError::state("porting kit", e)))?;
        let attempt = Attempt::start(make(), state, ledger.position(), plan.context, &plan.clock);
        loop {
            let mut cell = attempt.lock.lock();
            let stop = ledger.next_stop();
            cell.output_mut().stop_at = stop;
            // Changed under the lock: a source waiting for room wakes.
            cell.notify_all();
            let quiet = wait_quiet(&mut cell, stop, plan.timeout);
            // Holding the lock: the source is between two sections.
            for record in cell.output_mut().records.drain(..) {
                ledger.emitted(record);
            }
            if !quiet {
                drop(cell);
                drop(attempt.stop(plan.timeout));
                return Err(PortingError::Stalled {
                    side: Side::Legacy,
                    records: ledger.position(),
                });
            }
            if cell.output().done.is_some() {
                drop(cell);
                match attempt.stop(plan.timeout) {
                    Some(done) => done.map_err(failed)?,
                    None => unreachable!("the function had ended"),
                };
                ledger.finish();
                return Ok(ledger);
            }
            loop {
                match ledger.due() {
                    Due::Nothing => break,
                    Due::Limit => {
                        drop(cell);
                        stop_or_stalled(attempt, plan, &ledger)?;
                        ledger.finish();
                        return Ok(ledger);
                    }
                    Due::Checkpoint => {
                        let mut snapshot = TaskSnapshot::new();
                        cell.snapshot_state(&mut snapshot)
                            .map_err(|e| failed(OperatorError::state("porting kit", e)))?;
                        ledger.checkpoint(snapshot);
                        // Time moves on between checkpoints; due context timers fire under the
                        // lock, as a timer thread would fire them.
                        attempt.clock.advance(plan.clock.step_millis);
                        while let Some(timer) = attempt.timers.pop_due() {
                            if timer.operator == CONTEXT_TIMER_OPERATOR {
                                cell.on_context_timer::<F::Out>(timer).map_err(failed)?;
                            }
                        }
                        for record in cell.output_mut().records.drain(..) {
                            ledger.emitted(record);
                        }
                    }
                    Due::Failure => {
                        drop(cell);
                        stop_or_stalled(attempt, plan, &ledger)?;
                        ledger.fail();
                        continue 'attempts;
                    }
                }
            }
        }
    }
}

/// Waits (the lock released meanwhile) until the source reached `stop` or ended; `false` if it
/// made no progress for `timeout`.
fn wait_quiet<T, S>(
    cell: &mut CheckpointGuard<'_, SourceCell<S, Recorder<T>>>,
    stop: u64,
    timeout: Duration,
) -> bool {
    let arrived = |c: &mut SourceCell<S, Recorder<T>>| {
        c.output().position >= stop || c.output().done.is_some()
    };
    loop {
        let seen = cell.output().position;
        let woken = cell.wait_until_for(timeout, |c| arrived(c) || c.output().position != seen);
        if arrived(cell) {
            return true;
        }
        if !woken {
            return false;
        }
    }
}

fn stop_or_stalled<F: SourceFunction>(
    attempt: Attempt<F>,
    plan: &Plan,
    ledger: &Ledger<F::Out, TaskSnapshot>,
) -> Result<(), PortingError<F::Out>> {
    // Errors after cancellation are not the source's failures.
    match attempt.stop(plan.timeout) {
        Some(_) => Ok(()),
        None => Err(PortingError::Stalled {
            side: Side::Legacy,
            records: ledger.position(),
        }),
    }
}
