//! Drives the reader side: polled on the calling thread, as a mailbox task would, pausing at the
//! first poll boundary at or after each stop.

use std::sync::Arc as StdArc;
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use streamtask_core::Watermark;
use streamtask_core::operator::Emitted;
use streamtask_core::sync::{Condvar, Mutex};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

use super::Plan;
use super::ledger::{Due, Ledger};
use super::report::{PortingError, Side};

/// Runs the reader side through `ledger`'s schedule (the whole plan, or a fork's).
pub(crate) fn run<T, R: SourceReader<T>>(
    make: &mut impl FnMut() -> R,
    plan: &Plan,
    mut ledger: Ledger<T, Vec<u8>>,
) -> Result<Ledger<T, Vec<u8>>, PortingError<T>> {
    let failed = |error| PortingError::Failed {
        side: Side::Reader,
        error,
    };
    let signal = StdArc::new(Signal::default());
    let waker = Waker::from(StdArc::clone(&signal));
    let mut emitted: Vec<Emitted<T>> = Vec::new();
    'attempts: loop {
        let mut reader = make();
        let restore = ledger.start_attempt().cloned();
        reader.restore_state(restore.as_deref()).map_err(failed)?;
        // A restored stream starts active, as in a task.
        let mut idle = false;
        loop {
            // Poll up to the next stop (or the end).
            let stop = ledger.next_stop();
            let mut ended = false;
            while ledger.position() < stop {
                let mut output = ReaderOutput::resume(&mut emitted, idle);
                let status = reader.poll_next(&mut output);
                idle = output.is_idle();
                for element in emitted.drain(..) {
                    ledger.emitted(element);
                }
                match status.map_err(failed)? {
                    InputStatus::MoreAvailable => {}
                    InputStatus::NothingAvailable => {
                        reader.register_waker(&waker);
                        if !signal.wait(plan.timeout) {
                            let _ = reader.close();
                            return Err(PortingError::Stalled {
                                side: Side::Reader,
                                records: ledger.position(),
                            });
                        }
                    }
                    InputStatus::EndOfInput => {
                        // The task advances to the end of event time when a reader ends, as
                        // the legacy source does when it returns.
                        ledger.emitted(Emitted::Watermark(Watermark::MAX));
                        ended = true;
                        break;
                    }
                }
            }
            // A poll boundary: the reader is between two polls.
            loop {
                match ledger.due() {
                    Due::Nothing if ended => {
                        reader.close().map_err(failed)?;
                        ledger.finish();
                        return Ok(ledger);
                    }
                    Due::Nothing => break,
                    Due::Limit => {
                        reader.close().map_err(failed)?;
                        ledger.finish();
                        return Ok(ledger);
                    }
                    Due::Checkpoint => {
                        let id = ledger.next_checkpoint_id();
                        let snapshot = reader.snapshot_state(id).map_err(failed)?;
                        ledger.checkpoint(snapshot);
                        reader.notify_checkpoint_complete(id).map_err(failed)?;
                    }
                    Due::Failure => {
                        let _ = reader.close();
                        ledger.fail();
                        continue 'attempts;
                    }
                }
            }
        }
    }
}

/// A flag the reader's waker sets; the driver sleeps on it.
#[derive(Default)]
struct Signal {
    set: Mutex<bool>,
    changed: Condvar,
}

impl Signal {
    /// Sleeps until woken (`true`) or `timeout` passed (`false`); clears the flag.
    fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut set = self.set.lock();
        while !*set {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            self.changed.wait_for(&mut set, deadline - now);
        }
        *set = false;
        true
    }
}

impl Wake for Signal {
    fn wake(self: StdArc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &StdArc<Self>) {
        let mut set = self.set.lock();
        *set = true;
        self.changed.notify_all();
    }
}
