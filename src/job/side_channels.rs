//! The side channels of one operator's task: [`SideRegistry`] collects, while the job is
//! built, how to install a writer per side output; at spawn it installs them and wraps the task's
//! output so barriers and end of input reach every side channel too.

use std::fmt;
use std::task::Waker;

use streamtask_core::operator::{SideOutputs, TaskOutput};
use streamtask_core::sync::Mutex;
use streamtask_core::{OperatorError, StreamRecord, StreamStatus, Watermark, operator::Output};

use super::JobError;
use super::spawn::SpawnCtx;

/// Installs one side output's writer for a task: fills its entry of the operator's
/// [`SideOutputs`] and returns the channel output that barriers and end of input go to.
pub(crate) type Install = Box<
    dyn Fn(&SpawnCtx<'_>, &mut SideOutputs) -> Result<Box<dyn TaskOutput<()>>, JobError>
        + Send
        + Sync,
>;

/// The side outputs read from one operator, filled while the job is built.
#[derive(Default)]
pub(crate) struct SideRegistry {
    entries: Mutex<Vec<Install>>,
}

impl SideRegistry {
    /// Adds how to install one side output's writer.
    pub(crate) fn add(&self, install: Install) {
        self.entries.lock().push(install);
    }

    /// Installs a writer per side output into a fresh [`SideOutputs`] for subtask
    /// `ctx.subtask`, and wraps `output` so barriers and end of input reach the side channels.
    pub(crate) fn attach(
        &self,
        ctx: &SpawnCtx<'_>,
        output: Box<dyn TaskOutput<()>>,
    ) -> Result<(SideOutputs, Box<dyn TaskOutput<()>>), JobError> {
        let mut side = SideOutputs::new();
        let mut channels = Vec::new();
        for install in self.entries.lock().iter() {
            channels.push(install(ctx, &mut side)?);
        }
        if channels.is_empty() {
            return Ok((side, output));
        }
        Ok((
            side,
            Box::new(WithSideChannels {
                main: output,
                side: channels,
            }),
        ))
    }
}

impl fmt::Debug for SideRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SideRegistry")
            .field("side_outputs", &self.entries.lock().len())
            .finish()
    }
}

/// A task's output that also broadcasts barriers and end of input into side channels.
struct WithSideChannels {
    main: Box<dyn TaskOutput<()>>,
    side: Vec<Box<dyn TaskOutput<()>>>,
}

impl Output<()> for WithSideChannels {
    fn collect(&mut self, record: StreamRecord<()>) -> Result<(), OperatorError> {
        self.main.collect(record)
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.main.emit_watermark(watermark)
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.main.emit_status(status)
    }
}

impl TaskOutput<()> for WithSideChannels {
    fn broadcast_barrier(
        &mut self,
        barrier: streamtask_core::CheckpointBarrier,
    ) -> Result<(), OperatorError> {
        self.main.broadcast_barrier(barrier)?;
        self.side
            .iter_mut()
            .try_for_each(|s| s.broadcast_barrier(barrier))
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        self.main.end_of_input()?;
        self.side.iter_mut().try_for_each(|s| s.end_of_input())
    }
    fn is_available(&self) -> bool {
        self.main.is_available() && self.side.iter().all(|s| s.is_available())
    }
    /// Registers on every output that is full now, and wakes at once when none is: room that
    /// freed between the caller's [`is_available`](TaskOutput::is_available) and this call
    /// must not leave a suspended task without a notice. (Skipping the outputs that have room
    /// and waking nobody lost that notice: a split task slept with its input full.)
    fn register_availability_waker(&self, waker: &Waker) {
        let mut registered = false;
        let full = std::iter::once(&self.main)
            .chain(&self.side)
            .filter(|output| !output.is_available());
        for output in full {
            // Each wakes at once itself if its room freed since `is_available`.
            output.register_availability_waker(waker);
            registered = true;
        }
        if !registered {
            waker.wake_by_ref();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::task::Wake;

    use streamtask_core::CheckpointBarrier;

    use super::*;

    /// An output that is full for its first `full_checks` availability checks, then has room.
    struct FreesAfter {
        checks: AtomicUsize,
        full_checks: usize,
    }

    impl FreesAfter {
        fn boxed(full_checks: usize) -> Box<dyn TaskOutput<()>> {
            Box::new(FreesAfter {
                checks: AtomicUsize::new(0),
                full_checks,
            })
        }
    }

    impl Output<()> for FreesAfter {
        fn collect(&mut self, _record: StreamRecord<()>) -> Result<(), OperatorError> {
            Ok(())
        }
        fn emit_watermark(&mut self, _watermark: Watermark) -> Result<(), OperatorError> {
            Ok(())
        }
        fn emit_status(&mut self, _status: StreamStatus) -> Result<(), OperatorError> {
            Ok(())
        }
    }

    impl TaskOutput<()> for FreesAfter {
        fn broadcast_barrier(&mut self, _barrier: CheckpointBarrier) -> Result<(), OperatorError> {
            Ok(())
        }
        fn end_of_input(&mut self) -> Result<(), OperatorError> {
            Ok(())
        }
        fn is_available(&self) -> bool {
            self.checks.fetch_add(1, Ordering::SeqCst) >= self.full_checks
        }
        fn register_availability_waker(&self, waker: &Waker) {
            // As a channel writer does: wakes at once when there is room.
            if self.is_available() {
                waker.wake_by_ref();
            }
        }
    }

    #[derive(Default)]
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn woken_after_suspending(output: &WithSideChannels) -> bool {
        let flag = Arc::new(Flag::default());
        // The task's check found the output full; it suspends and registers.
        assert!(!output.is_available());
        output.register_availability_waker(&Waker::from(Arc::clone(&flag)));
        flag.0.load(Ordering::SeqCst)
    }

    #[test]
    fn room_freed_between_the_check_and_the_registration_wakes_the_task() {
        // The main output was full at the task's check and has room by the registration.
        let output = WithSideChannels {
            main: FreesAfter::boxed(1),
            side: vec![FreesAfter::boxed(0)],
        };
        assert!(woken_after_suspending(&output));
        // The same for a side output.
        let output = WithSideChannels {
            main: FreesAfter::boxed(0),
            side: vec![FreesAfter::boxed(0), FreesAfter::boxed(1)],
        };
        assert!(woken_after_suspending(&output));
    }

    #[test]
    fn an_output_still_full_at_the_registration_holds_the_notice() {
        let output = WithSideChannels {
            main: FreesAfter::boxed(0),
            side: vec![FreesAfter::boxed(usize::MAX)],
        };
        assert!(!woken_after_suspending(&output));
    }
}
