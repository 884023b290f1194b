//! Source tasks: a [`SourceReader`] and the chain behind it, on the mailbox thread.

use std::fmt;
use std::time::Instant;

use streamtask_core::operator::{ChainOutput, Context, OperatorEvent};
use streamtask_core::task::TaskConfig;
use streamtask_core::{
    CheckpointBarrier, Operator, OperatorError, TaskFailure, TaskOutput, TaskSnapshot, Timer,
    Watermark,
};

use super::body::{Counted, Phase, TaskBody, TaskEnv, perform_checkpoint};
use super::{TaskHandle, spawn_task};
use crate::processor::Controller;
use crate::services::OperatorMails;
use crate::source::{InputStatus, ReaderOutput, SourceReader};

/// A source task: the reader is polled one step at a time as the default action; checkpoint
/// triggers run between two steps.
///
/// # Examples
///
/// A reader counting to five into a doubling map, with one checkpoint:
///
/// ```
/// use std::task::Waker;
/// use streamtask_core::operator::{Emitted, Map};
/// use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
/// use streamtask_core::{CheckpointBarrier, OperatorError, TaskSnapshot};
/// use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader, SourceTask};
///
/// struct Count { next: u64, end: u64 }
///
/// impl SourceReader<u64> for Count {
///     fn name(&self) -> &str { "count" }
///     fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
///         if self.next == self.end {
///             return Ok(InputStatus::EndOfInput);
///         }
///         out.collect(self.next)?;
///         self.next += 1;
///         Ok(InputStatus::MoreAvailable)
///     }
///     fn register_waker(&mut self, waker: &Waker) { waker.wake_by_ref() }
///     fn snapshot_state(&mut self, _id: u64) -> Result<Vec<u8>, OperatorError> {
///         Ok(self.next.to_le_bytes().to_vec())
///     }
/// }
///
/// let (reports, acks) = crossbeam::channel::unbounded();
/// let config = TaskConfig::new("count")
///     .with_responder(CheckpointResponder::new("count", reports));
/// let task = SourceTask::spawn(
///     config,
///     Count { next: 0, end: 5 },
///     Map::new("double", |x: u64| x * 2),
///     Vec::<Emitted<u64>>::new(),
/// );
/// task.trigger_checkpoint(CheckpointBarrier::new(1, 0)).unwrap();
/// assert!(task.join().is_finished());
/// match acks.recv().unwrap() {
///     TaskReport::Acknowledged { snapshot, .. } => {
///         assert!(snapshot.get(TaskSnapshot::SOURCE).is_some());
///     }
///     // The reader may have finished before the trigger ran.
///     TaskReport::Declined { .. } => {}
/// }
/// ```
#[derive(Debug)]
pub struct SourceTask;

impl SourceTask {
    /// Starts a source task reading `reader` into `chain`, whose output goes to `output`.
    /// `config.restore` restores the reader (from [`TaskSnapshot::SOURCE`]) and the chain.
    ///
    /// # Panics
    ///
    /// If the OS refuses to start a thread.
    pub fn spawn<R, O, W>(config: TaskConfig, reader: R, chain: O, output: W) -> TaskHandle
    where
        R: SourceReader<O::In> + 'static,
        O: Operator + 'static,
        W: TaskOutput<O::Out> + 'static,
    {
        spawn_task(config, true, move |env| SourceBody {
            reader,
            chain,
            output: Counted::new(output),
            env,
            idle: false,
        })
    }
}

struct SourceBody<R, O, W> {
    reader: R,
    chain: O,
    output: Counted<W>,
    env: TaskEnv,
    /// Whether the reader last marked the stream idle.
    idle: bool,
}

impl<R, O, W> SourceBody<R, O, W>
where
    R: SourceReader<O::In> + 'static,
    O: Operator + 'static,
    W: TaskOutput<O::Out> + 'static,
{
    fn fail(&self, error: OperatorError) -> TaskFailure {
        self.env.failure(error)
    }

    fn end_of_input(&mut self, controller: &mut Controller<'_>) -> Result<(), TaskFailure> {
        let services = &self.env.services;
        let mut ctx = Context::new(&mut self.output, services, 0);
        // Sources advance to the end of event time when they end (Flink's endData).
        let ended = self.chain.process_watermark(Watermark::MAX, &mut ctx);
        ended.map_err(|e| self.fail(e))?;
        self.env.phase = Phase::Draining;
        self.env.inputs_ended = 0;
        self.try_finish(controller)
    }

    /// Ends the chain's input one operator at a time, head to tail, waiting (suspended, mails
    /// running) until the chain accepts input before each one, so an operator's `end_input`
    /// runs only after everything upstream emitted its last output (an async operator drains
    /// first, as Flink's FLINK-13491 demands); then `finish`.
    fn try_finish(&mut self, controller: &mut Controller<'_>) -> Result<(), TaskFailure> {
        while self.env.inputs_ended < self.chain.chain_len() {
            if !self.chain.accepts_input() {
                self.env
                    .suspend_backpressured(controller, false, &self.output);
                return Ok(());
            }
            let operator = self.env.inputs_ended;
            self.env.inputs_ended += 1;
            let services = &self.env.services;
            self.chain
                .end_input_at(operator, &mut Context::new(&mut self.output, services, 0))
                .map_err(|e| self.fail(e))?;
        }
        if !self.chain.accepts_input() {
            self.env
                .suspend_backpressured(controller, false, &self.output);
            return Ok(());
        }
        let services = &self.env.services;
        let finished = (|| {
            self.chain
                .finish(&mut Context::new(&mut self.output, services, 0))?;
            self.output.end_of_input()
        })();
        finished.map_err(|e| self.fail(e))?;
        self.env.phase = Phase::Finished;
        self.publish_metrics();
        controller.all_actions_completed();
        Ok(())
    }

    /// After each mail: publish the records counted so far (mails may be read by whoever
    /// watches the metrics), and resume a default action parked on the chain if it now accepts
    /// input.
    fn after_mail(&mut self) {
        self.publish_metrics();
        let chain = &self.chain;
        self.env.end_mail(|| chain.accepts_input());
    }
}

impl<R, O, W> TaskBody for SourceBody<R, O, W>
where
    R: SourceReader<O::In> + 'static,
    O: Operator + 'static,
    W: TaskOutput<O::Out> + 'static,
{
    fn open(&mut self) -> Result<(), TaskFailure> {
        let restore = self.env.restore.take();
        let opened = (|| {
            self.reader
                .restore_state(restore.as_ref().and_then(|s| s.get(TaskSnapshot::SOURCE)))?;
            self.chain.restore_chain(restore.as_ref(), 0)?;
            self.chain
                .open(&mut Context::new(&mut self.output, &self.env.services, 0))
        })();
        opened.map_err(|e| self.fail(e))
    }

    #[inline]
    fn step(&mut self, controller: &mut Controller<'_>) -> Result<(), TaskFailure> {
        match self.env.phase {
            Phase::Running => {}
            Phase::Draining => return self.try_finish(controller),
            Phase::Finished => {
                controller.all_actions_completed();
                return Ok(());
            }
        }
        let chain_accepts = self.chain.accepts_input();
        if !chain_accepts || !self.output.is_available() {
            self.publish_metrics();
            self.env
                .suspend_backpressured(controller, chain_accepts, &self.output);
            return Ok(());
        }
        let mut chain_out =
            ChainOutput::new(&mut self.chain, &mut self.output, &self.env.services, 0);
        let mut out = ReaderOutput::resume(&mut chain_out, self.idle);
        let polled = self.reader.poll_next(&mut out);
        self.idle = out.is_idle();
        let records = out.records();
        if self.env.count_in(records) {
            self.publish_metrics();
        }
        match polled.map_err(|e| self.fail(e))? {
            InputStatus::MoreAvailable => Ok(()),
            InputStatus::NothingAvailable => {
                self.publish_metrics();
                let reader = &mut self.reader;
                self.env
                    .suspend_idle(controller, |waker| reader.register_waker(waker));
                Ok(())
            }
            InputStatus::EndOfInput => self.end_of_input(controller),
        }
    }

    fn trigger_checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        triggered: Instant,
    ) -> Result<(), TaskFailure> {
        self.env.begin_mail();
        if self.env.phase != Phase::Running {
            self.env.decline_not_running(barrier.id);
            return Ok(());
        }
        self.publish_metrics();
        let reader = &mut self.reader;
        perform_checkpoint(
            &mut self.chain,
            &mut self.output,
            &mut self.env,
            barrier,
            triggered,
            |id| reader.snapshot_state(id).map(Some),
        )?;
        self.after_mail();
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), TaskFailure> {
        self.env.begin_mail();
        let notified = (|| {
            self.chain.notify_checkpoint_complete(id)?;
            self.reader.notify_checkpoint_complete(id)
        })();
        notified.map_err(|e| self.fail(e))?;
        self.after_mail();
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), TaskFailure> {
        self.env.begin_mail();
        let notified = (|| {
            self.chain.notify_checkpoint_aborted(id)?;
            self.reader.notify_checkpoint_aborted(id)
        })();
        notified.map_err(|e| self.fail(e))?;
        self.after_mail();
        Ok(())
    }

    fn is_finished(&self) -> bool {
        self.env.phase == Phase::Finished
    }

    fn publish_metrics(&mut self) {
        self.env.publish(&mut self.output.records);
    }

    fn close(&mut self) {
        if let Err(e) = self.chain.close() {
            log::warn!("{}: closing the chain failed: {e}", self.env.name);
        }
        if let Err(e) = self.reader.close() {
            log::warn!("{}: closing the reader failed: {e}", self.env.name);
        }
    }
}

impl<R, O, W> OperatorMails<TaskFailure> for SourceBody<R, O, W>
where
    R: SourceReader<O::In> + 'static,
    O: Operator + 'static,
    W: TaskOutput<O::Out> + 'static,
{
    fn on_timer(&mut self, timer: Timer) -> Result<(), TaskFailure> {
        self.env.begin_mail();
        self.chain
            .dispatch_timer(
                timer,
                &mut Context::new(&mut self.output, &self.env.services, 0),
            )
            .map_err(|e| self.fail(e))?;
        self.after_mail();
        Ok(())
    }

    fn on_event(&mut self, operator: usize, event: OperatorEvent) -> Result<(), TaskFailure> {
        self.env.begin_mail();
        if self.env.phase == Phase::Finished {
            log::debug!(
                "{}: event for operator {operator} after finish dropped",
                self.env.name
            );
            return Ok(());
        }
        self.chain
            .dispatch_event(
                operator,
                event,
                &mut Context::new(&mut self.output, &self.env.services, 0),
            )
            .map_err(|e| self.fail(e))?;
        self.after_mail();
        Ok(())
    }
}

impl<R, O, W> fmt::Debug for SourceBody<R, O, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceBody")
            .field("task", &self.env.name)
            .field("phase", &self.env.phase)
            .finish_non_exhaustive()
    }
}
