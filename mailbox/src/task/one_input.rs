//! One-input tasks: an [`InputGate`] and the chain behind it, on the mailbox thread.

use std::fmt;
use std::time::Instant;

use streamtask_core::channel::{GateEvent, InputGate};
use streamtask_core::operator::{Context, OperatorEvent};
use streamtask_core::task::{DeclineReason, TaskConfig};
use streamtask_core::{CheckpointBarrier, Operator, OperatorError, TaskFailure, TaskOutput, Timer};

use super::body::{Counted, Phase, TaskBody, TaskEnv, perform_checkpoint};
use super::{TaskHandle, spawn_task};
use crate::processor::Controller;
use crate::services::OperatorMails;

/// A task with one input: each default-action step takes one event from the gate without
/// blocking; aligned barriers are snapshotted right there.
///
/// # Examples
///
/// ```
/// use streamtask_core::channel::{InputGate, Partitioner, RecordWriter, bounded};
/// use streamtask_core::operator::{Emitted, Map};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{Output, StreamRecord, TaskOutput};
/// use streamtask_mailbox::OneInputTask;
///
/// let (tx, rx) = bounded(16).unwrap();
/// let mut upstream = RecordWriter::new(vec![tx], Partitioner::Forward).unwrap();
/// let task = OneInputTask::spawn(
///     TaskConfig::new("plus-one"),
///     InputGate::new(vec![rx]).unwrap(),
///     Map::new("plus-one", |x: u32| x + 1),
///     Vec::<Emitted<u32>>::new(),
/// );
/// for x in 0..3 {
///     upstream.collect(StreamRecord::new(x)).unwrap();
/// }
/// upstream.end_of_input().unwrap();
/// assert!(task.join().is_finished());
/// ```
#[derive(Debug)]
pub struct OneInputTask;

impl OneInputTask {
    /// Starts a task reading `input` into `chain`, whose output goes to `output`.
    /// `config.restore` restores the chain.
    ///
    /// # Panics
    ///
    /// If the OS refuses to start a thread.
    pub fn spawn<O, W>(
        config: TaskConfig,
        input: InputGate<O::In>,
        chain: O,
        output: W,
    ) -> TaskHandle
    where
        O: Operator + 'static,
        O::In: Send + 'static,
        W: TaskOutput<O::Out> + 'static,
    {
        spawn_task(config, false, move |env| OneInputBody {
            input,
            chain,
            output: Counted::new(output),
            env,
        })
    }
}

struct OneInputBody<I, O, W> {
    input: InputGate<I>,
    chain: O,
    output: Counted<W>,
    env: TaskEnv,
}

impl<O, W> OneInputBody<O::In, O, W>
where
    O: Operator + 'static,
    O::In: Send + 'static,
    W: TaskOutput<O::Out> + 'static,
{
    fn fail(&self, error: OperatorError) -> TaskFailure {
        self.env.failure(error)
    }

    fn ctx(&mut self) -> (&mut O, Context<'_, O::Out>) {
        (
            &mut self.chain,
            Context::new(&mut self.output, &self.env.services, 0),
        )
    }

    fn end_of_input(&mut self, controller: &mut Controller<'_>) -> Result<(), TaskFailure> {
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
            let (chain, mut ctx) = self.ctx();
            chain
                .end_input_at(operator, &mut ctx)
                .map_err(|e| self.fail(e))?;
        }
        if !self.chain.accepts_input() {
            self.env
                .suspend_backpressured(controller, false, &self.output);
            return Ok(());
        }
        let finished = (|| {
            let (chain, mut ctx) = self.ctx();
            chain.finish(&mut ctx)?;
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

impl<O, W> TaskBody for OneInputBody<O::In, O, W>
where
    O: Operator + 'static,
    O::In: Send + 'static,
    W: TaskOutput<O::Out> + 'static,
{
    fn open(&mut self) -> Result<(), TaskFailure> {
        let restore = self.env.restore.take();
        let opened = (|| {
            self.chain.restore_chain(restore.as_ref(), 0)?;
            let (chain, mut ctx) = self.ctx();
            chain.open(&mut ctx)
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
        let event = self
            .input
            .poll_next()
            .map_err(|closed| self.env.failure(closed))?;
        let processed = match event {
            GateEvent::Record(record) => {
                if self.env.count_in(1) {
                    self.publish_metrics();
                }
                let (chain, mut ctx) = self.ctx();
                chain.process_element(record, &mut ctx)
            }
            GateEvent::Watermark(watermark) => {
                let (chain, mut ctx) = self.ctx();
                chain.process_watermark(watermark, &mut ctx)
            }
            GateEvent::Status(status) => {
                let (chain, mut ctx) = self.ctx();
                chain.process_status(status, &mut ctx)
            }
            GateEvent::Checkpoint(barrier) => {
                self.env.run.interrupt(&self.env.tracer);
                self.publish_metrics();
                return perform_checkpoint(
                    &mut self.chain,
                    &mut self.output,
                    &mut self.env,
                    barrier,
                    Instant::now(),
                    |_| Ok(None),
                );
            }
            GateEvent::CheckpointAborted { id } => {
                self.env.responder.decline(id, DeclineReason::Superseded);
                Ok(())
            }
            GateEvent::Nothing => {
                self.publish_metrics();
                let input = &self.input;
                self.env
                    .suspend_idle(controller, |waker| input.register_waker(waker));
                Ok(())
            }
            GateEvent::EndOfInput => return self.end_of_input(controller),
        };
        processed.map_err(|e| self.fail(e))
    }

    fn trigger_checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        _triggered: Instant,
    ) -> Result<(), TaskFailure> {
        // Never enqueued (the handle refuses triggers for tasks with inputs); decline anyway.
        self.env.decline_not_running(barrier.id);
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), TaskFailure> {
        self.env.begin_mail();
        self.chain
            .notify_checkpoint_complete(id)
            .map_err(|e| self.fail(e))?;
        self.after_mail();
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), TaskFailure> {
        self.env.begin_mail();
        // Release the channels held back for its alignment, if it is being aligned; what
        // they hold was already there, so no data waker will wake the default action.
        if self.input.abort_checkpoint(id).is_some() {
            self.env.resume_idle();
        }
        self.chain
            .notify_checkpoint_aborted(id)
            .map_err(|e| self.fail(e))?;
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
    }
}

impl<O, W> OperatorMails<TaskFailure> for OneInputBody<O::In, O, W>
where
    O: Operator + 'static,
    O::In: Send + 'static,
    W: TaskOutput<O::Out> + 'static,
{
    fn on_timer(&mut self, timer: Timer) -> Result<(), TaskFailure> {
        self.env.begin_mail();
        let (chain, mut ctx) = self.ctx();
        chain
            .dispatch_timer(timer, &mut ctx)
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
        let (chain, mut ctx) = self.ctx();
        chain
            .dispatch_event(operator, event, &mut ctx)
            .map_err(|e| self.fail(e))?;
        self.after_mail();
        Ok(())
    }
}

impl<I, O, W> fmt::Debug for OneInputBody<I, O, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OneInputBody")
            .field("task", &self.env.name)
            .field("phase", &self.env.phase)
            .finish_non_exhaustive()
    }
}
