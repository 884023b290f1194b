//! [`ChainBody`]: the operator chain of a task with its counted output, services and tracing,
//! and the operations every task runs on it.
//!
//! Records are counted in plain fields (the body is only touched by its owner: the thread
//! holding the checkpoint lock, or the mailbox thread) and published to [`TaskMetrics`] every
//! [`PUBLISH_EVERY`] records, at every checkpoint and at the end: no atomic read-modify-write
//! per record. Records a mail emits (a timer, an async completion) are counted the same way,
//! and published after the mail when a count is due or the model's default action is
//! suspended ([`ChainBody::publish_after_mail`]). A hot loop that emits many records in a row (a mailbox reader's polls between
//! two mailbox checks) goes through a [`Burst`], which counts in locals and adds to the body's
//! counts when it ends, so the counters stay in registers instead of being loaded and stored
//! around every call into the chain.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Instant;

use crate::channel::InputClosed;
use streamtask_core::metrics::TaskMetrics;
use streamtask_core::operator::{
    Context, Operator, OperatorEvent, TaskServices, TwoInputChain, TwoInputOperator,
};
use streamtask_core::task::{DeclineReason, TaskError};
use streamtask_core::trace::{RecordRun, Tracer};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, Watermark, catch_panic,
    operator::Output, operator::TaskOutput, state::TaskSnapshot, time::Timer,
};

use super::TaskParts;
use super::lifecycle::Lifecycle;
use streamtask_core::operator::TaskChain;
use streamtask_core::task::TaskState;

/// Records counted locally before they are added to the task's metrics.
pub const PUBLISH_EVERY: u64 = 1 << 10;

/// Where a [`ChainBody`] is, and what each phase lets through:
///
/// | phase | records | triggers | timers, events | notices | moves to |
/// |---|---|---|---|---|---|
/// | `Opening` | - | declined | dropped | dropped | `Running` ([`restore_and_open`](ChainBody::restore_and_open)) |
/// | `Running` | processed | snapshot | delivered | delivered | `Draining` ([`begin_end_of_input`](ChainBody::begin_end_of_input)) |
/// | `Draining` | - | declined | delivered | delivered | `Finished` ([`end_input_step`](ChainBody::end_input_step) ran `finish` and ended the output) |
/// | `Finished` | - | declined | dropped (the chain finished: nothing may emit after end of output) | delivered (the last checkpoint commits) | `Closed` |
/// | `Closed` | - | declined | dropped | dropped (a closed operator is never called, FLINK-16383) | - |
///
/// Any phase moves to `Closed` on [`close`](ChainBody::close), which every exit path runs.
///
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum BodyPhase {
    /// Not yet restored and opened.
    Opening,
    /// Processing input.
    Running,
    /// Input ended: ending the chain's input operator by operator, then finishing.
    Draining,
    /// `finish` ran and end of input went downstream.
    Finished,
    /// The chain is closed.
    Closed,
}

/// Where a body is with a stop-with-savepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suspension {
    /// No stop-with-savepoint barrier went through (or its savepoint was aborted).
    None,
    /// The barrier of stop-with-savepoint `id` went through; its savepoint is pending.
    Pending(u64),
    /// The savepoint completed: the task is ending.
    Done,
}

/// What [`ChainBody::end_input_step`] left to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Drain {
    /// The chain does not accept input yet (an operator drains in-flight work): wait until it
    /// does (on the lock's condition, or suspended until a mail), then step again.
    Waiting,
    /// Every operator's input ended, the chain finished and end of input went downstream.
    Finished,
}

/// What [`ChainBody::apply`] left to the model: the one step result every model reads.
///
/// The mailbox model's input loop adds two outcomes of its own around it (the output is
/// unavailable, or a pending stop-with-savepoint suspends the input); they come from the
/// mailbox task's scheduling, not from the chain, so they stay out of this type and the legacy
/// and bridge models never match on cases they cannot meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Applied {
    /// The event went through the chain (or was handled: a superseded checkpoint declined).
    Done,
    /// Every channel delivered this barrier: snapshot now ([`ChainBody::checkpoint`]).
    Barrier(CheckpointBarrier),
    /// Nothing to read now: wait for the input's waker.
    Nothing,
    /// Every input ended: once [`ChainBody::may_end_input`] holds (a pending
    /// stop-with-savepoint holds the end back until its notice), [`ChainBody::begin_end_of_input`],
    /// then drain.
    EndOfInput,
}

/// A task output that counts the records going through it in a plain field.
#[derive(Debug)]
pub struct Counted<W> {
    inner: W,
    records: u64,
}

impl<W> Counted<W> {
    fn new(inner: W) -> Self {
        Counted { inner, records: 0 }
    }

    /// The wrapped output.
    pub fn inner(&self) -> &W {
        &self.inner
    }
}

impl<T, W: Output<T>> Output<T> for Counted<W> {
    #[inline]
    fn collect(&mut self, record: StreamRecord<T>) -> Result<(), OperatorError> {
        self.records += 1;
        self.inner.collect(record)
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.inner.emit_watermark(watermark)
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.inner.emit_status(status)
    }
}

/// What every task keeps besides its input, chain and output.
pub struct TaskEnv {
    parts: TaskParts,
    services: TaskServices,
    tracer: Tracer,
    run: RecordRun,
    records_in: u64,
}

impl TaskEnv {
    /// The environment of the task `parts` names, with its `services` and `tracer`.
    pub fn new(parts: TaskParts, services: TaskServices, tracer: Tracer) -> Self {
        // The chain reports its running operator where the task's handle reads it.
        let services = services
            .with_running(StdArc::clone(&parts.running))
            .with_metrics(StdArc::clone(&parts.metrics));
        TaskEnv {
            parts,
            services,
            tracer,
            run: RecordRun::new(),
            records_in: 0,
        }
    }
}

impl fmt::Debug for TaskEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskEnv")
            .field("task", &self.parts.name)
            .finish_non_exhaustive()
    }
}

/// A task's operator chain, its counted output and its environment, with the operations every
/// task runs on them (see [`BodyPhase`] for the phases). Owned by whoever owns the
/// task's state: the checkpoint lock, or the mailbox thread.
pub struct ChainBody<C, W> {
    chain: C,
    output: Counted<W>,
    env: TaskEnv,
    phase: BodyPhase,
    /// While draining: how many operators (head first) had their input ended.
    inputs_ended: usize,
    /// Whether a stop-with-savepoint barrier went through (see
    /// [`is_suspended`](Self::is_suspended)).
    suspended: Suspension,
    /// The newest checkpoint whose barrier this body took (or declined).
    newest_barrier: u64,
    /// Checkpoints aborted before their barrier reached this body (Flink's "aborted before
    /// triggered"): a stop-with-savepoint barrier among them must not suspend the task, as
    /// no notice would ever end or resume it.
    aborted_ahead: Vec<u64>,
    /// The unaligned checkpoint whose barrier the input just handed over: its snapshot waits
    /// for the channel state.
    unaligned_barrier: Option<u64>,
    /// The snapshot of an unaligned checkpoint, waiting for its channel state.
    awaiting_channel_state: Option<(u64, TaskSnapshot)>,
    /// A call into the chain did not return `Ok`: it failed, or it is still on the stack of
    /// a panic. The chain's and the source's state may be half way through a record (a reader
    /// advanced past it, an operator did not emit it), so no checkpoint may be taken from
    /// them: a trigger that wins the race against the task's failure is declined.
    broken: bool,
    /// The chain's input ended with a draining stop-with-savepoint: at this task's barrier,
    /// or in the run the restored snapshot was taken from (it holds
    /// [`TaskSnapshot::FINISHED`]). See [`is_drained`](ChainBody::is_drained).
    drained: bool,
    /// A draining savepoint's drain in progress: how many operators' input ended (event time
    /// reached its end). See [`drain_for`](ChainBody::drain_for).
    drain_progress: Option<usize>,
}

/// The counting, which needs nothing of the chain or the output (a [`Burst`] drops into it).
impl<C, W> ChainBody<C, W> {
    /// Adds `records` to the records counted in (their trace runs were counted already), and
    /// publishes every [`PUBLISH_EVERY`] records.
    #[inline]
    fn add_in(&mut self, records: u64) {
        self.env.records_in += records;
        if self.env.records_in >= PUBLISH_EVERY {
            self.publish_metrics();
        }
    }

    /// After something that ran outside a run of input steps (a mail: a timer, an event, an
    /// async completion): publishes the locally counted records if a count reached
    /// [`PUBLISH_EVERY`], or all of them when `idle` says no input step will run to publish them
    /// (the model's default action is suspended, or may be). A mail that emits while input
    /// steps run leaves its records to the steps' next publication, as the steps' own records
    /// are left: the counts lag by fewer than [`PUBLISH_EVERY`] records, and never past the
    /// next suspension, checkpoint or end.
    #[inline]
    pub fn publish_after_mail(&mut self, idle: bool) {
        if idle || self.env.records_in >= PUBLISH_EVERY || self.output.records >= PUBLISH_EVERY {
            self.publish_metrics();
        }
    }

    /// Adds the locally counted records to the task's metrics.
    pub fn publish_metrics(&mut self) {
        let metrics = &self.env.parts.metrics;
        let records_in = std::mem::take(&mut self.env.records_in);
        if records_in > 0 {
            metrics.records_in.add(records_in);
        }
        let records_out = std::mem::take(&mut self.output.records);
        if records_out > 0 {
            metrics.records_out.add(records_out);
        }
    }
}

/// A context over the body's output for the chain's head (operator index 0), which is
/// reported as the running operator.
macro_rules! ctx {
    ($body:expr) => {{
        let body = &mut *$body;
        body.env.services.running().enter(0);
        (
            &mut body.chain,
            Context::new(&mut body.output, &body.env.services, 0),
        )
    }};
}

impl<C, W> ChainBody<C, W>
where
    C: TaskChain,
    W: TaskOutput<C::Out>,
{
    /// A body over `chain` emitting into `output`, `Opening`.
    pub fn new(chain: C, output: W, env: TaskEnv) -> Self {
        ChainBody {
            chain,
            output: Counted::new(output),
            env,
            phase: BodyPhase::Opening,
            inputs_ended: 0,
            suspended: Suspension::None,
            newest_barrier: 0,
            aborted_ahead: Vec::new(),
            unaligned_barrier: None,
            awaiting_channel_state: None,
            broken: false,
            drained: false,
            drain_progress: None,
        }
    }

    /// The task's name.
    pub fn name(&self) -> &str {
        &self.env.parts.name
    }

    /// Where the body is.
    pub fn phase(&self) -> BodyPhase {
        self.phase
    }

    /// The chain.
    pub fn chain(&self) -> &C {
        &self.chain
    }

    /// The task's output (behind the counter).
    pub fn output(&self) -> &W {
        &self.output.inner
    }

    /// The task's services (timers, events).
    pub fn services(&self) -> &TaskServices {
        &self.env.services
    }

    /// The task's lifecycle.
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.env.parts.lifecycle
    }

    /// The task's metrics.
    pub fn metrics(&self) -> &StdArc<TaskMetrics> {
        &self.env.parts.metrics
    }

    /// Declines checkpoint `id` for `reason` (a barrier superseded during alignment, say).
    pub fn decline(&self, id: u64, reason: DeclineReason) {
        self.env.parts.responder.decline(id, reason);
    }

    /// Records a failure of `thread` in the task's lifecycle (the first one wins); returns
    /// whether it is the task's.
    pub fn fail(&self, thread: &str, error: impl Into<TaskError>) -> bool {
        self.env.parts.lifecycle.fail(thread, error)
    }

    /// Restores the chain from `restore` and opens it (tail first): `Opening -> Running`.
    ///
    /// # Errors
    ///
    /// Whatever an operator's `initialize_state` or `open` fails with.
    pub fn restore_and_open(
        &mut self,
        restore: Option<&TaskSnapshot>,
    ) -> Result<(), OperatorError> {
        self.env
            .services
            .running()
            .set_names(self.chain.chain_names());
        self.chain.restore(restore)?;
        self.drained = restore.is_some_and(|s| s.get(TaskSnapshot::FINISHED).is_some());
        let (chain, mut ctx) = ctx!(self);
        chain.open(&mut ctx)?;
        self.phase = BodyPhase::Running;
        Ok(())
    }

    /// Counts `records` records in: plain integers, and one branch when tracing is off.
    #[inline]
    pub fn count_in(&mut self, records: u64) {
        if self.env.tracer.is_on() {
            for _ in 0..records {
                self.env.run.record(&self.env.tracer);
            }
        }
        self.add_in(records);
    }

    /// Something other than a record runs now: ends the current record-run span.
    pub fn interrupt(&mut self) {
        self.env.run.interrupt(&self.env.tracer);
    }

    /// A watermark through the chain.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn process_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        if self.drained {
            // Event time reached its end when the input was drained.
            return Ok(());
        }
        self.interrupt();
        self.broken = true;
        let (chain, mut ctx) = ctx!(self);
        let result = chain.process_watermark(watermark, &mut ctx);
        self.broken = result.is_err();
        result
    }

    /// A stream status change through the chain.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn process_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        let (chain, mut ctx) = ctx!(self);
        chain.process_status(status, &mut ctx)
    }

    /// Whether the chain takes a record now (an async head with a full queue does not).
    #[inline]
    pub fn accepts_input(&self) -> bool {
        self.chain.accepts_input()
    }

    /// Flink's `performCheckpoint`, in its order: prepare the chain (it may flush), send the
    /// barrier downstream, snapshot the source's state (`source`, which writes into the
    /// snapshot; a no-op for tasks with inputs), snapshot the chain, then acknowledge through
    /// the task's responder; with the start delay (from `requested`), the duration, the count
    /// and a trace span. A body or task that is not running declines with
    /// [`DeclineReason::NotRunning`].
    ///
    /// # Errors
    ///
    /// [`TaskError::Checkpoint`] when a step fails ([`TaskError::Panic`] when one panics); the
    /// checkpoint was declined with the cause ([`DeclineReason::TaskFailure`] when the output
    /// closed under the barrier, [`DeclineReason::Failed`] otherwise), and the task should fail
    /// with it.
    pub fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        requested: Instant,
        source: impl FnOnce(u64, &mut TaskSnapshot) -> Result<(), OperatorError>,
    ) -> Result<(), TaskError> {
        let id = barrier.id;
        let unaligned = self.unaligned_barrier.take() == Some(id);
        self.newest_barrier = self.newest_barrier.max(id);
        let aborted_ahead = self.aborted_ahead.contains(&id);
        if !self.aborted_ahead.is_empty() {
            self.aborted_ahead.retain(|&aborted| aborted > id);
        }
        let responder = &self.env.parts.responder;
        if self.phase != BodyPhase::Running
            || self.env.parts.lifecycle.state() != TaskState::Running
        {
            responder.decline(id, DeclineReason::NotRunning);
            return Ok(());
        }
        if self.broken {
            responder.decline(
                id,
                DeclineReason::TaskFailure(
                    "a call into the chain failed or panicked; the task is failing".into(),
                ),
            );
            return Ok(());
        }
        self.interrupt();
        let started = Instant::now();
        let span = self
            .env
            .tracer
            .span("checkpoint", || format!("checkpoint {id}"));
        let taken = catch_panic(|| -> Result<TaskSnapshot, OperatorError> {
            if self.drain_for(barrier)? == Drain::Waiting {
                return Err(OperatorError::user(
                    self.name().to_string(),
                    format!(
                        "draining savepoint {id}: an operator of the chain still has work in \
                         flight (async calls) and this task cannot wait for it at the barrier; \
                         stop without drain"
                    ),
                ));
            }
            {
                let (chain, mut ctx) = ctx!(self);
                chain.prepare_snapshot_pre_barrier(id, &mut ctx)?;
            }
            self.output.inner.broadcast_barrier(barrier)?;
            let mut snapshot = TaskSnapshot::new();
            source(id, &mut snapshot)?;
            self.chain.snapshot(id, &mut snapshot)?;
            if self.drained {
                snapshot.put(TaskSnapshot::FINISHED, Vec::new());
            }
            Ok(snapshot)
        });
        let finished = Instant::now();
        drop(span);
        // The checkpoint's metrics after its barrier went out and its state was taken, before
        // the acknowledgement: their locks, clock read and histogram lines (cold after a
        // stretch of records, and a growing sample buffer's reallocation now and then) must not
        // be on the barrier's way (PERF-NOTES.md, "Checkpoint start").
        let metrics = StdArc::clone(&self.env.parts.metrics);
        metrics
            .checkpoint_delay
            .record(started.saturating_duration_since(requested));
        metrics
            .checkpoint_duration
            .record(finished.saturating_duration_since(started));
        self.publish_metrics();
        let responder = &self.env.parts.responder;
        let failure = match taken {
            Ok(Ok(snapshot)) => {
                metrics.checkpoints.inc();
                if unaligned {
                    // Acknowledged with the records the barrier overtook, once every input's
                    // barrier arrived (`complete_channel_state`).
                    metrics.unaligned_checkpoints.inc();
                    self.awaiting_channel_state = Some((id, snapshot));
                    return Ok(());
                }
                if barrier.kind.is_synchronous()
                    && !aborted_ahead
                    && self.env.parts.lifecycle.suspend()
                {
                    // Before the acknowledgement: its notice can only come after it.
                    self.suspended = Suspension::Pending(id);
                }
                responder.acknowledge(id, snapshot);
                return Ok(());
            }
            Ok(Err(error)) => TaskError::Checkpoint {
                checkpoint: id,
                source: error,
            },
            Err(panic) => TaskError::Panic(panic),
        };
        // A barrier that found the output closed says only that a downstream task is gone:
        // the job is failing over already, and the checkpoint's failure is not its own.
        let reason = match &failure {
            TaskError::Checkpoint { source, .. } if source.is_output_closed() => {
                DeclineReason::TaskFailure(failure.to_string())
            }
            _ => DeclineReason::Failed(failure.to_string()),
        };
        responder.decline(id, reason);
        Err(failure)
    }

    /// Flink's drain before a draining savepoint's barrier, shared by every model: event time
    /// advances to its end ([`Watermark::MAX`] through the chain: windows and event-time
    /// timers fire), then every operator's input ends, head to tail, each once everything
    /// upstream of it emitted (an async operator's calls complete first), so what that produces
    /// goes downstream before the barrier; then `finish`, head to tail, as at end of input, so
    /// what an operator emits only there (a count, a batch's flush) goes out before the barrier
    /// too. The snapshot holds the state after `finish`: a sink takes that one snapshot after its
    /// `finish`, its last records pending for the savepoint, and commits them on the
    /// savepoint's completion notice, as for any savepoint. The task ends on that notice as
    /// after a stop without drain (its output gets no end of input). From then on the chain
    /// gets nothing more, and `finish` never runs again ([`is_drained`](Self::is_drained)).
    ///
    /// Returns [`Drain::Waiting`] while an operator still has work in flight: the model keeps
    /// the barrier, waits as it waits at end of input (the lock's condition, a suspended
    /// default action) and calls again; its source emits nothing meanwhile
    /// ([`source_may_emit`](Self::source_may_emit)). [`checkpoint`](Self::checkpoint) calls it
    /// too, and fails a drain that would have to wait there. [`Drain::Finished`] at once for
    /// any other barrier, or once drained.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn drain_for(&mut self, barrier: CheckpointBarrier) -> Result<Drain, OperatorError> {
        if !barrier.kind.drains() || self.drained || self.phase != BodyPhase::Running {
            return Ok(Drain::Finished);
        }
        self.interrupt();
        let mut ended = match self.drain_progress {
            Some(ended) => ended,
            None => {
                self.drain_progress = Some(0);
                let (chain, mut ctx) = ctx!(self);
                chain.process_watermark(Watermark::MAX, &mut ctx)?;
                0
            }
        };
        while ended < self.chain.chain_len() {
            if ended > 0 && !self.chain.accepts_input() {
                return Ok(Drain::Waiting);
            }
            self.drain_progress = Some(ended + 1);
            let (chain, mut ctx) = ctx!(self);
            chain.end_input_at(ended, &mut ctx)?;
            ended += 1;
        }
        if !self.chain.accepts_input() {
            return Ok(Drain::Waiting);
        }
        // Marked drained before `finish` runs: a failing `finish` fails the task, and nothing
        // may run it a second time.
        self.drain_progress = None;
        self.drained = true;
        {
            let (chain, mut ctx) = ctx!(self);
            chain.finish(&mut ctx)?;
        }
        log::info!(
            "{}: input drained for savepoint {} (end of event time, end of input, finish)",
            self.name(),
            barrier.id
        );
        Ok(Drain::Finished)
    }

    /// The channel state of unaligned checkpoint `id` is complete: acknowledges its snapshot
    /// with it (declines with the reason when it could not be stored). Nothing happens when
    /// the checkpoint was declined or aborted meanwhile.
    pub fn complete_channel_state(
        &mut self,
        id: u64,
        state: Result<crate::channel::ChannelState, String>,
    ) {
        let Some((_, mut snapshot)) = self.awaiting_channel_state.take_if(|(held, _)| *held == id)
        else {
            return;
        };
        let responder = &self.env.parts.responder;
        match state {
            Ok(state) => {
                if !state.is_empty() {
                    snapshot.put(TaskSnapshot::CHANNEL_STATE, state.encode());
                }
                responder.acknowledge(id, snapshot);
            }
            Err(reason) => responder.decline(id, DeclineReason::Failed(reason)),
        }
    }

    /// Forgets a snapshot waiting for the channel state of checkpoint `id` or an older one.
    fn drop_awaiting(&mut self, id: u64) {
        if self
            .awaiting_channel_state
            .as_ref()
            .is_some_and(|(held, _)| *held <= id)
        {
            self.awaiting_channel_state = None;
        }
    }

    /// A checkpoint-complete (`completed`) or -aborted notice for the chain; never delivered to
    /// a closed chain (FLINK-16383) or one that never opened.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn notify_checkpoint(&mut self, id: u64, completed: bool) -> Result<(), OperatorError> {
        if matches!(self.phase, BodyPhase::Opening | BodyPhase::Closed) {
            return Ok(());
        }
        self.interrupt();
        if completed {
            self.chain.notify_checkpoint_complete(id)?;
        } else {
            self.drop_awaiting(id);
            if id > self.newest_barrier && !self.aborted_ahead.contains(&id) {
                self.aborted_ahead.push(id);
            }
            self.chain.notify_checkpoint_aborted(id)?;
        }
        if self.suspended == Suspension::Pending(id) {
            let lifecycle = &self.env.parts.lifecycle;
            if completed {
                // The chain committed the savepoint: the task ends (the stop hook wakes its
                // threads), without end of input, and its source emits nothing more.
                self.suspended = Suspension::Done;
                lifecycle.savepoint_completed();
            } else if self.drained {
                // The chain's input ended at the barrier: it cannot take input again. The task
                // fails, and the job restarts from its latest checkpoint (Flink fails over too).
                return Err(OperatorError::user(
                    self.name().to_string(),
                    format!(
                        "draining stop-with-savepoint {id} was aborted after the task's input \
                         ended; the job restarts from its latest checkpoint (stop again to \
                         retry)"
                    ),
                ));
            } else {
                log::info!(
                    "{}: stop-with-savepoint {id} aborted; the task resumes",
                    self.name()
                );
                self.suspended = Suspension::None;
                lifecycle.resume();
            }
        }
        Ok(())
    }

    /// Whether the body took a stop-with-savepoint barrier whose savepoint was not aborted:
    /// the task's source emits nothing now, nor ever again once the savepoint completed (see
    /// [`source_may_emit`](Self::source_may_emit)); while it is pending, mails, timers and
    /// notices still run, as in Flink's synchronous-savepoint mailbox loop.
    #[inline]
    pub fn is_suspended(&self) -> bool {
        self.suspended != Suspension::None
    }

    /// An input channel closed without end of input. While a stop-with-savepoint is pending
    /// (see [`is_suspended`](Self::is_suspended)), that is an upstream task that already ended
    /// on the savepoint's completion notice, before this task's own notice ran (an upstream
    /// only ends this way once the savepoint completed): not a failure, the model stops reading
    /// and this task's notice ends it. Otherwise the error comes back, to fail the task with.
    ///
    /// # Errors
    ///
    /// `closed`, unless a stop-with-savepoint is pending.
    pub fn input_closed(&self, closed: InputClosed) -> Result<(), InputClosed> {
        if self.is_suspended() {
            log::debug!(
                "{}: input channel {} ended with the stop-with-savepoint",
                self.name(),
                closed.channel
            );
            Ok(())
        } else {
            Err(closed)
        }
    }

    /// Whether the task may end its input now: no stop-with-savepoint is pending. End of input
    /// is the task's last emission (the chain finishes and ends its output downstream), so it
    /// waits for the savepoint's notice as a source's next emission does: an end of input read
    /// while the savepoint is pending comes from an upstream whose savepoint was aborted (an
    /// upstream never sends one after a savepoint completed) whose notice has not reached this
    /// task yet. Completed, the task ends without end of input; aborted, it goes on and ends its
    /// input. Each model holds the end in its own wait (the lock's condition, a suspended default
    /// action) until this holds or the task stops; ending it earlier would finish the chain of a
    /// task still `Suspending`, which the lifecycle cannot move to `Finishing`.
    #[inline]
    pub fn may_end_input(&self) -> bool {
        self.suspended == Suspension::None
    }

    /// Whether the chain's input ended with a draining stop-with-savepoint, at this task's
    /// barrier or in the run its restored snapshot was taken from: the chain gets no records,
    /// watermarks, timers or events (they are dropped), `finish` ran at the drain and never runs
    /// again (end of input only ends the output), and every snapshot carries [`TaskSnapshot::FINISHED`]. A source restored so starts
    /// after end of input: each model ends it at once, before it reads anything (a legacy
    /// source's `run` is not called, a reader is not polled).
    #[inline]
    pub fn is_drained(&self) -> bool {
        self.drained
    }

    /// Whether the task's source may emit now: the chain accepts input and no stop-with-savepoint
    /// is pending. The one check every model's source makes before it emits (a legacy source
    /// before each locked section, a reader before each poll), so nothing a source reads after
    /// its stop-with-savepoint barrier is emitted: the savepoint holds the source's position at
    /// the barrier, and the restored job reads on from there.
    #[inline]
    pub fn source_may_emit(&self) -> bool {
        self.suspended == Suspension::None
            && self.drain_progress.is_none()
            && self.chain.accepts_input()
    }

    /// A timer for the chain; dropped unless the chain is open and not finished (nothing may
    /// emit after end of output).
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    pub fn dispatch_timer(&mut self, timer: Timer) -> Result<(), OperatorError> {
        if !matches!(self.phase, BodyPhase::Running | BodyPhase::Draining) || self.drained {
            log::debug!("{}: timer after the chain finished dropped", self.name());
            return Ok(());
        }
        self.interrupt();
        self.broken = true;
        let (chain, mut ctx) = ctx!(self);
        // The timer's operator runs, not the head.
        ctx.services().running().enter(timer.operator);
        let result = chain.dispatch_timer(timer, &mut ctx);
        self.broken = result.is_err();
        result
    }

    /// An event for operator `operator`; dropped unless the chain is open and not finished.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    pub fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
    ) -> Result<(), OperatorError> {
        if !matches!(self.phase, BodyPhase::Running | BodyPhase::Draining) || self.drained {
            log::debug!(
                "{}: event for operator {operator} after the chain finished dropped",
                self.name()
            );
            return Ok(());
        }
        self.interrupt();
        let (chain, mut ctx) = ctx!(self);
        ctx.services().running().enter(operator);
        chain.dispatch_event(operator, event, &mut ctx)
    }

    /// Input ended: `Running -> Draining`, and the task `Running -> Finishing` (triggers are
    /// declined from now on); [`end_input_step`](Self::end_input_step) does the rest. Does
    /// nothing in any other phase.
    pub fn begin_end_of_input(&mut self) {
        if self.phase == BodyPhase::Running {
            self.env.parts.lifecycle.begin_finishing();
            self.interrupt();
            self.phase = BodyPhase::Draining;
            self.inputs_ended = 0;
        }
    }

    /// End of input, as far as it can go now: ends the chain's input one operator at a time,
    /// head to tail, and before each but the head (and before `finish`) waits until the chain
    /// accepts input, so an operator's `end_input` runs only after everything upstream emitted
    /// its last output (an async operator drains first, FLINK-13491); then `finish` head to
    /// tail, and end of input downstream.
    ///
    /// # Errors
    ///
    /// Whatever an operator or the output fails with.
    pub fn end_input_step(&mut self) -> Result<Drain, OperatorError> {
        match self.phase {
            BodyPhase::Draining => {}
            BodyPhase::Finished => return Ok(Drain::Finished),
            phase => panic!("end_input_step in phase {phase:?}: call begin_end_of_input first"),
        }
        // A drained chain's input ended and its `finish` ran at the drain: only the output's
        // end is left.
        while !self.drained && self.inputs_ended < self.chain.chain_len() {
            // The head has nothing upstream to wait for: its input ends at once, even while it
            // is unavailable (an async head with a full queue runs its due retries now).
            if self.inputs_ended > 0 && !self.chain.accepts_input() {
                return Ok(Drain::Waiting);
            }
            let operator = self.inputs_ended;
            self.inputs_ended += 1;
            let (chain, mut ctx) = ctx!(self);
            chain.end_input_at(operator, &mut ctx)?;
        }
        if !self.drained {
            if !self.chain.accepts_input() {
                return Ok(Drain::Waiting);
            }
            let (chain, mut ctx) = ctx!(self);
            chain.finish(&mut ctx)?;
        }
        self.output.inner.end_of_input()?;
        self.phase = BodyPhase::Finished;
        self.publish_metrics();
        Ok(Drain::Finished)
    }

    /// Input `input` (of two) ended: the head's input ends.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub(crate) fn end_input_of(&mut self, input: u8) -> Result<(), OperatorError> {
        self.interrupt();
        let (chain, mut ctx) = ctx!(self);
        chain.end_input_of(input, &mut ctx)
    }

    /// The first barrier of unaligned checkpoint `id` arrived: its snapshot waits for the
    /// channel state.
    pub(crate) fn unaligned_barrier_arrived(&mut self, id: u64) {
        self.unaligned_barrier = Some(id);
    }

    /// A newer barrier superseded checkpoint `id` during alignment: declines it.
    pub(crate) fn superseded(&mut self, id: u64) {
        self.drop_awaiting(id);
        self.decline(id, DeclineReason::Superseded);
    }

    /// Runs `f` on the chain with a context over the task's output, while the chain is open
    /// and not finished: for a model that reaches its own operators with typed calls (the
    /// legacy async head's completions) rather than erased events. `None` otherwise.
    pub fn with_chain<R>(
        &mut self,
        f: impl FnOnce(&mut C, &mut Context<'_, C::Out>) -> R,
    ) -> Option<R> {
        if !matches!(self.phase, BodyPhase::Running | BodyPhase::Draining) || self.drained {
            return None;
        }
        self.interrupt();
        let (chain, mut ctx) = ctx!(self);
        Some(f(chain, &mut ctx))
    }

    /// Whether the output takes records now.
    #[inline]
    pub fn output_available(&self) -> bool {
        self.output.inner.is_available()
    }

    /// Asks the output to wake `waker` once it takes records again.
    pub fn register_output_waker(&self, waker: &std::task::Waker) {
        self.output.inner.register_availability_waker(waker);
    }

    /// Closes the chain once, on every exit path, logging (never returning) what it fails or
    /// panics with: the task's outcome was decided before. Publishes the last counts.
    pub fn close(&mut self) {
        if self.phase == BodyPhase::Closed {
            return;
        }
        self.interrupt();
        self.phase = BodyPhase::Closed;
        self.publish_metrics();
        let name = &self.env.parts.name;
        match catch_panic(|| self.chain.close()) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => log::warn!("{name}: closing the chain failed: {e}"),
            Err(panic) => log::warn!("{name}: closing the chain panicked: {panic}"),
        }
    }
}

impl<C, W> ChainBody<C, W>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    /// One record through a one-input chain.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    #[inline]
    pub fn process(&mut self, record: StreamRecord<C::In>) -> Result<(), OperatorError> {
        self.count_in(1);
        self.broken = true;
        let (chain, mut ctx) = ctx!(self);
        let result = chain.process_element(record, &mut ctx);
        self.broken = result.is_err();
        result
    }
}

impl<H, T, W> ChainBody<TwoInputChain<H, T>, W>
where
    H: TwoInputOperator,
    T: Operator<In = H::Out>,
    W: TaskOutput<T::Out>,
{
    /// One record of input 1.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    #[inline]
    pub fn process1(&mut self, record: StreamRecord<H::In1>) -> Result<(), OperatorError> {
        self.count_in(1);
        self.broken = true;
        let (chain, mut ctx) = ctx!(self);
        let result = chain.process_element1(record, &mut ctx);
        self.broken = result.is_err();
        result
    }

    /// One record of input 2.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    #[inline]
    pub fn process2(&mut self, record: StreamRecord<H::In2>) -> Result<(), OperatorError> {
        self.count_in(1);
        self.broken = true;
        let (chain, mut ctx) = ctx!(self);
        let result = chain.process_element2(record, &mut ctx);
        self.broken = result.is_err();
        result
    }
}

impl<C, W> ChainBody<C, W>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    /// A run of records into this one-input body whose counts stay in locals until the run
    /// ends (see [`Burst`]).
    #[inline]
    pub fn burst(&mut self) -> Burst<'_, C, W> {
        let traced = self.env.tracer.is_on();
        // The burst is one call into the chain as far as a checkpoint can tell (none runs while
        // it holds the body): broken until it ends with every call `Ok` (see `Drop`).
        self.broken = true;
        Burst {
            body: self,
            records_in: 0,
            records_out: 0,
            traced,
            failed: false,
        }
    }
}

/// A run of records into a one-input [`ChainBody`] (what a hot loop emits into: a mailbox
/// reader's polls between two mailbox checks) that counts records in and out in its own fields
/// rather than the body's. Built on the loop's stack, the burst's fields stay in registers
/// across the records, where the body's, behind a pointer, would be loaded and stored around
/// every call into the chain. Dropping it adds its counts to the body's (publishing every
/// [`PUBLISH_EVERY`] records, as record-by-record counting does), also when the run ends with
/// an error or a panic: the metrics mean the same as without it. Trace record runs are
/// counted record by record, as [`ChainBody::process`] does (one branch on a local flag when
/// tracing is off). The body counts as broken (no checkpoint may be taken from it) while the
/// burst lives, and stays so when a call into the chain failed or panicked during the burst;
/// the flag is written once per burst, not around every record.
pub struct Burst<'a, C, W> {
    body: &'a mut ChainBody<C, W>,
    records_in: u64,
    records_out: u64,
    /// Whether tracing was on when the burst began (read once).
    traced: bool,
    /// A call into the chain through this burst returned an error.
    failed: bool,
}

impl<C, W> Burst<'_, C, W>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    /// Whether the chain takes a record now (see [`ChainBody::accepts_input`]).
    #[inline]
    pub fn accepts_input(&self) -> bool {
        self.body.chain.accepts_input()
    }

    /// Whether the output takes records now (see [`ChainBody::output_available`]).
    #[inline]
    pub fn output_available(&self) -> bool {
        self.body.output.inner.is_available()
    }

    /// Records that went into the chain through this burst so far.
    pub fn records_in(&self) -> u64 {
        self.records_in
    }
}

impl<C, W> Output<C::In> for Burst<'_, C, W>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    #[inline]
    fn collect(&mut self, record: StreamRecord<C::In>) -> Result<(), OperatorError> {
        self.records_in += 1;
        let body = &mut *self.body;
        if self.traced {
            body.env.run.record(&body.env.tracer);
        }
        // The records out are counted into a local moved in and out of the context, so they
        // never go through memory while the chain runs; the body's broken flag is the burst's
        // (set when it began, settled when it ends), so nothing else is stored per record.
        let mut out = Counted::new(&mut body.output.inner);
        let result = body
            .chain
            .process_element(record, &mut Context::new(&mut out, &body.env.services, 0));
        self.records_out += out.records;
        self.failed |= result.is_err();
        result
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        let result = self.body.process_watermark(watermark);
        self.failed |= result.is_err();
        result
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.body.process_status(status)
    }
}

impl<C, W> Drop for Burst<'_, C, W> {
    fn drop(&mut self) {
        // Dropped by a panic's unwinding, the burst may have left a record half way through
        // the chain: the body stays broken, as after a failed call.
        self.body.broken = self.failed || std::thread::panicking();
        self.body.output.records += self.records_out;
        self.body.add_in(self.records_in);
    }
}

impl<C, W> fmt::Debug for Burst<'_, C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Burst")
            .field("records_in", &self.records_in)
            .field("records_out", &self.records_out)
            .finish_non_exhaustive()
    }
}

/// A one-input body is where a legacy source (or a reader) emits: each record goes through the
/// chain.
impl<C, W> Output<C::In> for ChainBody<C, W>
where
    C: Operator,
    W: TaskOutput<C::Out>,
{
    #[inline]
    fn collect(&mut self, record: StreamRecord<C::In>) -> Result<(), OperatorError> {
        self.process(record)
    }

    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.process_watermark(watermark)
    }

    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.process_status(status)
    }
}

impl<C, W> fmt::Debug for ChainBody<C, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainBody")
            .field("task", &self.env.parts.name)
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}
