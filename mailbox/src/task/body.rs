//! The state the mailbox thread owns ([`MailboxBody`]): the kit's [`ChainBody`], the task's
//! input, and the suspensions of its default action; and what every mail does to it.

use std::fmt;
use std::time::Instant;

use streamtask_core::operator::OperatorEvent;
use streamtask_core::operator::TaskChain;
use streamtask_core::{
    CheckpointBarrier, operator::TaskOutput, state::TaskSnapshot, task::TaskError,
    task::TaskFailure, time::Timer,
};
use streamtask_runtime::{BodyPhase, ChainBody, Drain};

use super::input::{Input, Step};
use crate::processor::{Controller, SuspendCause, Suspension};
use crate::services::OperatorMails;

/// Input steps one default-action step runs at most while no mail waits (it returns earlier
/// when one does): bounds the time between the processor's own checks and between two
/// publications of a reader's record counts (its [`Burst`](streamtask_runtime::Burst)
/// adds them when the step ends).
const RECORDS_PER_STEP: u32 = 1024;

/// A mailbox task's state: its input, the kit's chain body, and the default action's
/// suspensions.
pub(crate) struct MailboxBody<I, C, W> {
    input: I,
    body: ChainBody<C, W>,
    /// A suspension waiting for the chain to accept input; every mail re-checks it.
    parked: Option<Suspension>,
    /// The suspension of a default action waiting for input, for mails that make input
    /// readable without new data arriving (an abort releasing channels held for alignment).
    idle: Option<Suspension>,
    /// The suspension of a source's default action after its stop-with-savepoint barrier,
    /// resumed by the savepoint's abort notice (its completion ends the task instead).
    stopping: Option<Suspension>,
    /// Whether the default action may be suspended (or over): set whenever this body suspends
    /// or ends it, cleared when a step runs. Conservative: a suspension a waker resumed still
    /// counts until the step runs. While it is set no step will publish the records a mail
    /// emits, so each mail publishes them (see [`after_mail`](Self::after_mail)).
    resting: bool,
    /// A draining savepoint's barrier whose drain waits for an operator's work in flight
    /// (`ChainBody::drain_for`): each step retries it before anything else, suspended until
    /// the chain accepts input.
    draining: Option<(CheckpointBarrier, Instant)>,
}

impl<I, C, W> MailboxBody<I, C, W>
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
    I: Input<C, W>,
{
    pub(crate) fn new(input: I, body: ChainBody<C, W>) -> Self {
        MailboxBody {
            input,
            body,
            parked: None,
            idle: None,
            stopping: None,
            // Mails may run before the first step.
            resting: true,
            draining: None,
        }
    }

    fn fail(&self, error: impl Into<TaskError>) -> TaskFailure {
        TaskFailure::new(self.body.name(), error)
    }

    /// Restores the input and the chain, then opens the chain.
    pub(crate) fn open(&mut self, restore: Option<&TaskSnapshot>) -> Result<(), TaskFailure> {
        let opened = self
            .input
            .restore(restore)
            .and_then(|()| self.body.restore_and_open(restore));
        opened.map_err(|e| self.fail(e))
    }

    /// One step of the default action.
    #[inline]
    pub(crate) fn step(&mut self, controller: &mut Controller<'_>) -> Result<(), TaskFailure> {
        self.resting = false;
        match self.body.phase() {
            BodyPhase::Running => {}
            BodyPhase::Draining => return self.drain(controller),
            _ => {
                self.resting = true;
                controller.all_actions_completed();
                return Ok(());
            }
        }
        if let Some((barrier, requested)) = self.draining.take() {
            return self.checkpoint(barrier, requested).map(|()| {
                if self.draining.is_some() {
                    self.suspend_backpressured(controller);
                }
            });
        }
        if self.input.has_priority() {
            self.priority_input()?;
        }
        if !self.body.output_available() {
            self.suspend_backpressured(controller);
            return Ok(());
        }
        // Many records per step while no mail waits: the loop's state stays in registers, and
        // the mailbox flag (one load) and the output's room are checked between records, so a
        // mail waits for at most the record in flight.
        let step = self
            .input
            .steps(&mut self.body, RECORDS_PER_STEP, controller.mail_hint())
            .map_err(|e| self.fail(e))?;
        match step {
            Step::More => Ok(()),
            Step::Backpressured => {
                self.suspend_backpressured(controller);
                Ok(())
            }
            Step::Nothing => {
                self.suspend_idle(controller);
                Ok(())
            }
            Step::Suspended => {
                // Flink's synchronous savepoint: only mails run now, until the savepoint's
                // notice ends the task (the lifecycle's stop hook, a poison mail) or resumes it.
                self.body.interrupt();
                self.body.publish_metrics();
                self.resting = true;
                self.stopping = Some(controller.suspend_default_action_for(SuspendCause::Idle));
                Ok(())
            }
            Step::Barrier(barrier) => self.checkpoint(barrier, Instant::now()),
            Step::EndOfInput => {
                self.body.begin_end_of_input();
                self.drain(controller)
            }
        }
    }

    /// Ends the chain's input as far as it goes now; suspended (mails running) while an
    /// operator drains, so operators behind an async one end after its last result.
    fn drain(&mut self, controller: &mut Controller<'_>) -> Result<(), TaskFailure> {
        match self.body.end_input_step().map_err(|e| self.fail(e))? {
            Drain::Waiting => self.suspend_backpressured(controller),
            Drain::Finished => {
                self.resting = true;
                controller.all_actions_completed();
            }
        }
        Ok(())
    }

    /// A checkpoint: triggered (source tasks, `requested` at the trigger call) or aligned
    /// (tasks with inputs, `requested` now).
    pub(crate) fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        requested: Instant,
    ) -> Result<(), TaskFailure> {
        if self.body.drain_for(barrier).map_err(|e| self.fail(e))? == Drain::Waiting {
            // The next step retries it; one runs even if the default action waits for input.
            self.draining = Some((barrier, requested));
            if let Some(suspension) = self.idle.take() {
                suspension.resume();
            }
            self.after_mail();
            return Ok(());
        }
        let input = &mut self.input;
        let taken = self.body.checkpoint(barrier, requested, |id, into| {
            input.snapshot_state(id, into)
        });
        taken.map_err(|e| self.fail(e))?;
        self.after_mail();
        Ok(())
    }

    /// Takes the unaligned checkpoints waiting at the input, ahead of the records queued
    /// before their barriers and whether or not the output has room: the urgent mail the
    /// input's priority waker puts, and each step before it reads.
    pub(crate) fn priority_input(&mut self) -> Result<(), TaskFailure> {
        while let Some(step) = self
            .input
            .priority_step(&mut self.body)
            .map_err(|e| self.fail(e))?
        {
            if let Step::Barrier(barrier) = step {
                self.checkpoint(barrier, Instant::now())?;
            }
        }
        self.after_mail();
        Ok(())
    }

    /// A checkpoint trigger from the task's slot: counted as a mail (with its latency from the
    /// trigger call), as one that came as a mail is, then taken.
    pub(crate) fn slot_checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        requested: Instant,
    ) -> Result<(), TaskFailure> {
        self.body.metrics().count_trigger_as_mail(requested);
        self.checkpoint(barrier, requested)
    }

    /// A checkpoint-complete or -aborted notice: the chain, then the input (a reader commits;
    /// a gate releases the channels held for an aborted checkpoint's alignment).
    pub(crate) fn notify(&mut self, id: u64, completed: bool) -> Result<(), TaskFailure> {
        let released = self
            .body
            .notify_checkpoint(id, completed)
            .and_then(|()| self.input.notify_checkpoint(id, completed))
            .map_err(|e| self.fail(e))?;
        if released {
            // What they hold was already there: no data waker will wake the default action.
            if let Some(suspension) = self.idle.take() {
                suspension.resume();
            }
        }
        if !self.body.is_suspended() {
            // The stop-with-savepoint was aborted: the source reads on. (Completed, the body
            // stays suspended and the stop hook's poison mail ends the loop.)
            if let Some(suspension) = self.stopping.take() {
                suspension.resume();
            }
        }
        self.after_mail();
        Ok(())
    }

    /// Whether the chain finished (end of input fully processed).
    pub(crate) fn is_finished(&self) -> bool {
        self.body.phase() == BodyPhase::Finished
    }

    /// Closes the chain and the input, logging errors.
    pub(crate) fn close(&mut self) {
        self.body.close();
        self.input.close(self.body.name());
    }

    /// After each mail: publish the records counted so far if the default action may be
    /// suspended (no step would publish what the mail emitted: async completions arriving
    /// while the task waits for input, say) or a count is due; while steps run, their own
    /// publication (every [`PUBLISH_EVERY`](streamtask_runtime::PUBLISH_EVERY) records,
    /// and on suspending) takes the mail's records along. Then resume a default action parked
    /// on the chain if it now accepts input.
    fn after_mail(&mut self) {
        self.body.publish_after_mail(self.resting);
        if self.parked.is_some()
            && self.body.accepts_input()
            && let Some(suspension) = self.parked.take()
        {
            suspension.resume();
        }
    }

    /// Suspends the default action until input may be available.
    fn suspend_idle(&mut self, controller: &mut Controller<'_>) {
        self.body.interrupt();
        self.body.publish_metrics();
        self.resting = true;
        let suspension = controller.suspend_default_action_for(SuspendCause::Idle);
        self.input.register_waker(&suspension.waker());
        self.idle = Some(suspension);
    }

    /// Suspends the default action until the chain accepts input and the output has room.
    fn suspend_backpressured(&mut self, controller: &mut Controller<'_>) {
        self.body.interrupt();
        self.body.publish_metrics();
        self.resting = true;
        let suspension = controller.suspend_default_action_for(SuspendCause::Backpressure);
        let mut waiting = false;
        if !self.body.accepts_input() {
            // Only mails (of this thread) change what the chain accepts; each re-checks.
            self.parked = Some(suspension.clone());
            waiting = true;
        }
        if !self.body.output_available() {
            // Wakes at once if room freed since the check.
            self.body.register_output_waker(&suspension.waker());
            waiting = true;
        }
        if !waiting {
            // Both recovered between the caller's check and now (or a held element waits for
            // nothing but the next step).
            suspension.resume();
        }
    }
}

impl<I, C, W> OperatorMails<TaskFailure> for MailboxBody<I, C, W>
where
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
    I: Input<C, W>,
{
    fn on_timer(&mut self, timer: Timer) -> Result<(), TaskFailure> {
        self.body.dispatch_timer(timer).map_err(|e| self.fail(e))?;
        self.after_mail();
        Ok(())
    }

    fn on_event(&mut self, operator: usize, event: OperatorEvent) -> Result<(), TaskFailure> {
        self.body
            .dispatch_event(operator, event)
            .map_err(|e| self.fail(e))?;
        self.after_mail();
        Ok(())
    }
}

impl<I, C, W> fmt::Debug for MailboxBody<I, C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailboxBody")
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}
