//! Two-input tasks: a [`TwoInputGate`] and a [`TwoInputChain`], on the mailbox thread.

use std::fmt;
use std::time::Instant;

use streamtask_core::channel::{TwoInputEvent, TwoInputGate};
use streamtask_core::operator::{Context, OperatorEvent, TwoInputChain, TwoInputOperator};
use streamtask_core::task::{DeclineReason, TaskConfig};
use streamtask_core::{
    CheckpointBarrier, Operator, OperatorError, TaskFailure, TaskOutput, TaskSnapshot, Timer,
};

use super::body::{Counted, Phase, TaskBody, TaskEnv, finish_checkpoint};
use super::{TaskHandle, spawn_task};
use crate::processor::Controller;
use crate::services::OperatorMails;

/// A task with two inputs: each default-action step takes one event from the gate (round robin
/// over both inputs' channels); barriers are aligned over both inputs.
///
/// # Examples
///
/// ```
/// use streamtask_core::channel::{TwoInputGate, bounded};
/// use streamtask_core::operator::{CoMap, Discard, Map, TwoInputChain};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{StreamElement, StreamRecord};
/// use streamtask_mailbox::TwoInputTask;
///
/// let (numbers, rx1) = bounded(8).unwrap();
/// let (words, rx2) = bounded(8).unwrap();
/// let chain = TwoInputChain::new(
///     CoMap::new("either", |n: u32| n.to_string(), |s: String| s),
///     Map::new("len", |s: String| s.len()),
/// );
/// let task = TwoInputTask::spawn(
///     TaskConfig::new("join"),
///     TwoInputGate::new(vec![rx1], vec![rx2]).unwrap(),
///     chain,
///     Discard,
/// );
/// numbers.send(StreamElement::Record(StreamRecord::new(12))).unwrap();
/// words.send(StreamElement::Record(StreamRecord::new("abc".to_string()))).unwrap();
/// numbers.send(StreamElement::EndOfInput).unwrap();
/// words.send(StreamElement::EndOfInput).unwrap();
/// assert!(task.join().is_finished());
/// ```
#[derive(Debug)]
pub struct TwoInputTask;

impl TwoInputTask {
    /// Starts a task reading `inputs` into `chain`, whose output goes to `output`.
    /// `config.restore` restores the chain.
    ///
    /// # Panics
    ///
    /// If the OS refuses to start a thread.
    pub fn spawn<H, T, W>(
        config: TaskConfig,
        inputs: TwoInputGate<H::In1, H::In2>,
        chain: TwoInputChain<H, T>,
        output: W,
    ) -> TaskHandle
    where
        H: TwoInputOperator + 'static,
        H::In1: Send + 'static,
        H::In2: Send + 'static,
        T: Operator<In = H::Out> + 'static,
        W: TaskOutput<T::Out> + 'static,
    {
        spawn_task(config, false, move |env| TwoInputBody {
            input: inputs,
            chain,
            output: Counted::new(output),
            env,
        })
    }
}

struct TwoInputBody<A, B, H, T, W> {
    input: TwoInputGate<A, B>,
    chain: TwoInputChain<H, T>,
    output: Counted<W>,
    env: TaskEnv,
}

impl<H, T, W> TwoInputBody<H::In1, H::In2, H, T, W>
where
    H: TwoInputOperator + 'static,
    H::In1: Send + 'static,
    H::In2: Send + 'static,
    T: Operator<In = H::Out> + 'static,
    W: TaskOutput<T::Out> + 'static,
{
    fn fail(&self, error: OperatorError) -> TaskFailure {
        self.env.failure(error)
    }

    fn ctx(&mut self) -> (&mut TwoInputChain<H, T>, Context<'_, T::Out>) {
        (
            &mut self.chain,
            Context::new(&mut self.output, &self.env.services, 0),
        )
    }

    fn checkpoint(&mut self, barrier: CheckpointBarrier) -> Result<(), TaskFailure> {
        self.env.run.interrupt(&self.env.tracer);
        self.publish_metrics();
        // Aligned just now (the last barrier arrived in this very poll): no start delay to speak
        // of, but recorded so every checkpoint appears in the histogram.
        let since = Instant::now();
        let started = Instant::now();
        self.env
            .metrics
            .checkpoint_delay
            .record(started.saturating_duration_since(since));
        let id = barrier.id;
        let _span = self
            .env
            .tracer
            .span("checkpoint", || format!("checkpoint {id}"));
        let taken = (|| -> Result<TaskSnapshot, OperatorError> {
            let (chain, mut ctx) = self.ctx();
            chain.prepare_snapshot_pre_barrier(id, &mut ctx)?;
            self.output.broadcast_barrier(barrier)?;
            let mut snapshot = TaskSnapshot::new();
            self.chain.snapshot(id, &mut snapshot)?;
            Ok(snapshot)
        })();
        finish_checkpoint(&mut self.env, id, started, taken)
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

impl<H, T, W> TaskBody for TwoInputBody<H::In1, H::In2, H, T, W>
where
    H: TwoInputOperator + 'static,
    H::In1: Send + 'static,
    H::In2: Send + 'static,
    T: Operator<In = H::Out> + 'static,
    W: TaskOutput<T::Out> + 'static,
{
    fn open(&mut self) -> Result<(), TaskFailure> {
        let restore = self.env.restore.take();
        let opened = (|| {
            self.chain.restore(restore.as_ref())?;
            let (chain, mut ctx) = self.ctx();
            chain.open(&mut ctx)
        })();
        opened.map_err(|e| self.fail(e))
    }

    #[inline]
    fn step(&mut self, controller: &mut Controller<'_>) -> Result<(), TaskFailure> {
        if self.env.phase != Phase::Running {
            controller.all_actions_completed();
            return Ok(());
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
            TwoInputEvent::Record1(record) => {
                if self.env.count_in(1) {
                    self.publish_metrics();
                }
                let (chain, mut ctx) = self.ctx();
                chain.process_element1(record, &mut ctx)
            }
            TwoInputEvent::Record2(record) => {
                if self.env.count_in(1) {
                    self.publish_metrics();
                }
                let (chain, mut ctx) = self.ctx();
                chain.process_element2(record, &mut ctx)
            }
            TwoInputEvent::Watermark(watermark) => {
                let (chain, mut ctx) = self.ctx();
                chain.process_watermark(watermark, &mut ctx)
            }
            TwoInputEvent::Status(status) => {
                let (chain, mut ctx) = self.ctx();
                chain.process_status(status, &mut ctx)
            }
            TwoInputEvent::Checkpoint(barrier) => return self.checkpoint(barrier),
            TwoInputEvent::CheckpointAborted { id } => {
                self.env.responder.decline(id, DeclineReason::Superseded);
                Ok(())
            }
            TwoInputEvent::EndOfInput1 => {
                let (chain, mut ctx) = self.ctx();
                chain.end_input(1, &mut ctx)
            }
            TwoInputEvent::EndOfInput2 => {
                let (chain, mut ctx) = self.ctx();
                chain.end_input(2, &mut ctx)
            }
            TwoInputEvent::Nothing => {
                self.publish_metrics();
                let input = &self.input;
                self.env
                    .suspend_idle(controller, |waker| input.register_waker(waker));
                Ok(())
            }
            TwoInputEvent::EndOfInput => {
                // TwoInputChain ends and finishes its tail in one call: no drain step.
                let finished = (|| {
                    let (chain, mut ctx) = self.ctx();
                    chain.end_of_both(&mut ctx)?;
                    self.output.end_of_input()
                })();
                finished.map_err(|e| self.fail(e))?;
                self.env.phase = Phase::Finished;
                self.publish_metrics();
                controller.all_actions_completed();
                Ok(())
            }
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

impl<H, T, W> OperatorMails<TaskFailure> for TwoInputBody<H::In1, H::In2, H, T, W>
where
    H: TwoInputOperator + 'static,
    H::In1: Send + 'static,
    H::In2: Send + 'static,
    T: Operator<In = H::Out> + 'static,
    W: TaskOutput<T::Out> + 'static,
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

impl<A, B, H, T, W> fmt::Debug for TwoInputBody<A, B, H, T, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoInputBody")
            .field("task", &self.env.name)
            .field("phase", &self.env.phase)
            .finish_non_exhaustive()
    }
}
