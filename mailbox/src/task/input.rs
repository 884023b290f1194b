//! What differs between the mailbox task kinds: where one input step comes from (a reader, a
//! gate, a two-input gate). Everything else is the task's [`MailboxBody`](super::body).

use std::task::Waker;

use streamtask_core::operator::Operator;
use streamtask_core::operator::TaskChain;
use streamtask_core::{
    CheckpointBarrier, OperatorError, Watermark, operator::TaskOutput, state::TaskSnapshot,
    task::TaskError,
};
use streamtask_runtime::channel::InputEvent;
use streamtask_runtime::{Applied, ChainBody, InputRecord, TaskInput};

use crate::mailbox::MailHint;
use crate::source::{InputStatus, ReaderOutput, SourceReader};

/// What one input step did.
#[derive(Debug)]
pub(crate) enum Step {
    /// Something went through the chain; step again.
    More,
    /// The chain does not accept input (or holds an element it cannot take yet): wait until it
    /// does.
    Backpressured,
    /// Nothing to read: wait for the input's waker.
    Nothing,
    /// Every channel delivered this barrier: snapshot now.
    Barrier(CheckpointBarrier),
    /// Input ended.
    EndOfInput,
    /// A stop-with-savepoint is pending and the task reads nothing more: a source after its
    /// barrier, or a task whose upstream already ended with the savepoint. The savepoint's
    /// completion ends the task; its abort (a notice) resumes a source.
    Suspended,
}

/// The input side of a mailbox task.
pub(crate) trait Input<C: TaskChain, W: TaskOutput<C::Out>>: Send + 'static {
    /// Restores the input's own state (a reader's position).
    fn restore(&mut self, _snapshot: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        Ok(())
    }
    /// One step without blocking: whatever comes goes through `body`.
    fn step(&mut self, body: &mut ChainBody<C, W>) -> Result<Step, TaskError>;
    /// Up to `budget` (at least 1) steps while each one goes through (`Step::More`), no mail
    /// waits (`mail`, one load after every step: a mail waits for at most the step in flight)
    /// and the output has room; returns the last step. The default loops over
    /// [`step`](Self::step); an input may run its own loop with its state in locals.
    #[inline]
    fn steps(
        &mut self,
        body: &mut ChainBody<C, W>,
        budget: u32,
        mail: MailHint<'_>,
    ) -> Result<Step, TaskError> {
        let mut left = budget;
        loop {
            let step = self.step(body)?;
            left -= 1;
            if !matches!(step, Step::More) || left == 0 || mail.is_set() || !body.output_available()
            {
                return Ok(step);
            }
        }
    }
    /// Asks to be woken once input may be available.
    fn register_waker(&mut self, waker: &Waker);
    /// Wakes `waker` whenever an unaligned barrier may be taken early (see
    /// [`TaskInput::set_priority_waker`](streamtask_runtime::TaskInput::set_priority_waker)).
    fn set_priority_waker(&mut self, _waker: Waker) {}
    /// Whether [`priority_step`](Self::priority_step) may find something: one load.
    #[inline]
    fn has_priority(&self) -> bool {
        false
    }
    /// Takes what unaligned checkpoints produce, without reading records: returns the barrier
    /// of one to snapshot now (`Step::Barrier`), or `None` once there is nothing.
    fn priority_step(&mut self, _body: &mut ChainBody<C, W>) -> Result<Option<Step>, TaskError> {
        Ok(None)
    }
    /// The input's state for checkpoint `id` (a reader's position).
    fn snapshot_state(&mut self, _id: u64, _into: &mut TaskSnapshot) -> Result<(), OperatorError> {
        Ok(())
    }
    /// A checkpoint notice. Returns whether it released channels held back for alignment (their
    /// data was already there: no data waker will announce it).
    fn notify_checkpoint(&mut self, _id: u64, _completed: bool) -> Result<bool, OperatorError> {
        Ok(false)
    }
    /// Releases the input's resources (logging, not failing).
    fn close(&mut self, _task: &str) {}
}

/// A source task's input: a [`SourceReader`], polled only while the chain accepts input.
pub(crate) struct ReaderInput<R> {
    pub(crate) reader: R,
    /// Whether the reader last marked the stream idle.
    idle: bool,
}

impl<R> ReaderInput<R> {
    pub(crate) fn new(reader: R) -> Self {
        ReaderInput {
            reader,
            idle: false,
        }
    }
}

impl<R, C, W> Input<C, W> for ReaderInput<R>
where
    C: Operator + 'static,
    R: SourceReader<C::In> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    fn restore(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        self.reader.restore_task_state(snapshot)
    }

    #[inline]
    fn step(&mut self, body: &mut ChainBody<C, W>) -> Result<Step, TaskError> {
        if let Some(held) = held_back(body) {
            return Ok(held);
        }
        if body.is_drained() {
            // Restored after end of input: the reader is not polled, its input ends now.
            return after_poll(InputStatus::EndOfInput, body);
        }
        let mut out = ReaderOutput::resume(body, self.idle);
        let polled = self.reader.poll_next(&mut out);
        self.idle = out.is_idle();
        after_poll(polled?, body)
    }

    /// The reader's own loop: the checks of [`step`](Input::step) that only a mail can change
    /// (a pending stop-with-savepoint) once, the others (the mailbox flag, the chain's and the
    /// output's room) after every poll; the records go into a [`Burst`](streamtask_runtime::Burst), so the counts and the
    /// stream status stay in locals until the loop ends.
    #[inline]
    fn steps(
        &mut self,
        body: &mut ChainBody<C, W>,
        budget: u32,
        mail: MailHint<'_>,
    ) -> Result<Step, TaskError> {
        if let Some(held) = held_back(body) {
            return Ok(held);
        }
        if body.is_drained() {
            // Restored after end of input: the reader is not polled, its input ends now.
            return after_poll(InputStatus::EndOfInput, body);
        }
        let mut burst = body.burst();
        let mut idle = self.idle;
        let mut left = budget;
        let polled = loop {
            let mut out = ReaderOutput::resume(&mut burst, idle);
            let polled = self.reader.poll_next(&mut out);
            idle = out.is_idle();
            left -= 1;
            if !matches!(polled, Ok(InputStatus::MoreAvailable))
                || left == 0
                || mail.is_set()
                || !burst.output_available()
                || !burst.accepts_input()
            {
                // Still `MoreAvailable` when the chain is full: the next step finds it so and
                // suspends, as `step` does.
                break polled;
            }
        };
        self.idle = idle;
        drop(burst);
        after_poll(polled?, body)
    }

    fn register_waker(&mut self, waker: &Waker) {
        self.reader.register_waker(waker);
    }

    fn snapshot_state(&mut self, id: u64, into: &mut TaskSnapshot) -> Result<(), OperatorError> {
        self.reader.snapshot_task_state(id, into)
    }

    fn notify_checkpoint(&mut self, id: u64, completed: bool) -> Result<bool, OperatorError> {
        if completed {
            self.reader.notify_checkpoint_complete(id)?;
        } else {
            self.reader.notify_checkpoint_aborted(id)?;
        }
        Ok(false)
    }

    fn close(&mut self, task: &str) {
        if let Err(e) = self.reader.close() {
            log::warn!("{task}: closing the reader failed: {e}");
        }
    }
}

/// A source that may not emit now (a stop-with-savepoint is pending): the step it makes
/// instead of polling.
#[inline]
fn held_back<C, W>(body: &ChainBody<C, W>) -> Option<Step>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    if body.source_may_emit() {
        None
    } else if body.is_suspended() {
        Some(Step::Suspended)
    } else {
        Some(Step::Backpressured)
    }
}

/// The step a reader's last poll makes; at its end the source advances to the end of event
/// time (Flink's endData).
#[inline]
fn after_poll<C, W>(polled: InputStatus, body: &mut ChainBody<C, W>) -> Result<Step, TaskError>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    Ok(match polled {
        InputStatus::MoreAvailable => Step::More,
        InputStatus::NothingAvailable => Step::Nothing,
        InputStatus::EndOfInput => {
            body.process_watermark(Watermark::MAX)?;
            Step::EndOfInput
        }
    })
}

/// A task's input gate ([`InputGate`](streamtask_runtime::channel::InputGate) or
/// [`TwoInputGate`](streamtask_runtime::channel::TwoInputGate)), and the one watermark it read
/// but the chain could not take yet.
///
/// The gate is read even while the chain refuses input, so a barrier that comes next is
/// snapshotted at once (the chain's in-flight work is in its snapshot, as an async operator's
/// queue is). A record the chain cannot take yet goes back in front of its channel
/// ([`TaskInput::unread`]), so an unaligned barrier that overtakes it stores it as channel
/// state; a watermark waits, held here, until the chain takes it (it is in no snapshot and needs
/// none: watermarks are derived again from what follows).
pub(crate) struct GateInput<G: TaskInput> {
    gate: G,
    held: Option<InputEvent<G::Record>>,
}

impl<G: TaskInput> GateInput<G> {
    pub(crate) fn new(gate: G) -> Self {
        GateInput { gate, held: None }
    }
}

impl<G, C, W> Input<C, W> for GateInput<G>
where
    G: TaskInput,
    G::Record: InputRecord<C>,
    C: TaskChain + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    #[inline]
    fn step(&mut self, body: &mut ChainBody<C, W>) -> Result<Step, TaskError> {
        let event = match self.held.take() {
            Some(held) => held,
            None => match self.gate.poll_event() {
                Ok(event) => event,
                Err(closed) => {
                    // An upstream that ended with a stop-with-savepoint: this task's own
                    // notice ends it.
                    body.input_closed(closed)?;
                    return Ok(Step::Suspended);
                }
            },
        };
        if event.needs_room() && !body.accepts_input() {
            self.held = match event {
                InputEvent::Record(record) => {
                    self.gate.unread(record).err().map(InputEvent::Record)
                }
                other => Some(other),
            };
            return Ok(Step::Backpressured);
        }
        if matches!(event, InputEvent::EndOfInput) && !body.may_end_input() {
            // Held until the pending stop-with-savepoint's notice (see
            // `ChainBody::may_end_input`): an abort resumes the default action, which takes it
            // again; a completion ends the task without it.
            self.held = Some(event);
            return Ok(Step::Suspended);
        }
        Ok(match body.apply(event)? {
            Applied::Done => Step::More,
            Applied::Barrier(barrier) => Step::Barrier(barrier),
            Applied::Nothing => Step::Nothing,
            Applied::EndOfInput => Step::EndOfInput,
        })
    }

    fn register_waker(&mut self, waker: &Waker) {
        self.gate.register_waker(waker);
    }

    fn set_priority_waker(&mut self, waker: Waker) {
        self.gate.set_priority_waker(waker);
    }

    #[inline]
    fn has_priority(&self) -> bool {
        self.gate.has_priority()
    }

    fn priority_step(&mut self, body: &mut ChainBody<C, W>) -> Result<Option<Step>, TaskError> {
        while let Some(event) = self.gate.poll_priority() {
            if let Applied::Barrier(barrier) = body.apply(event)? {
                return Ok(Some(Step::Barrier(barrier)));
            }
        }
        Ok(None)
    }

    fn notify_checkpoint(&mut self, id: u64, completed: bool) -> Result<bool, OperatorError> {
        Ok(!completed && self.gate.abort_checkpoint(id))
    }

    fn close(&mut self, _task: &str) {
        self.gate.close();
    }
}
