//! Iterations: the feedback edge, the head's input ([`IterationInput`]) and the tail
//! ([`FeedbackWriter`] + [`FeedbackOutput`]), with the cyclic-graph snapshot of Carbone et al.,
//! "Lightweight Asynchronous Snapshots for Distributed Dataflows" (2015), written once for every
//! model.
//!
//! # Shape
//!
//! ```text
//!  upstream ──► [ head: IterationInput ─► chain ] ──► ... loop body ... ──► [ ... ─► FeedbackWriter ]
//!                        ▲                                                         │ tail
//!                        └──────────────── feedback edge (unbounded) ◄─────────────┘
//! ```
//!
//! The head is an ordinary one-input task of its model whose input is an [`IterationInput`]:
//! the aligned gate of its regular input plus the feedback edge's [`FeedbackReceiver`]. The tail
//! is the last operator of the feedback stream's task: records go into the feedback edge, and the
//! task's barriers and end of input follow them through its [`FeedbackOutput`]. The feedback edge
//! is unbounded: a bounded edge in a cycle deadlocks once the head blocks on a full loop body
//! while the tail blocks on a full feedback edge. (Flink's is a one-element `ArrayBlockingQueue`
//! that the tail offers into with the wait time as timeout, ignoring a refusal: the record is
//! dropped.)
//!
//! # Checkpoints (Carbone et al. 2015, section 4.2)
//!
//! Barriers on the regular input are aligned as in any task; the feedback edge takes no part in
//! alignment. When they align, the head runs the model's ordinary checkpoint (prepare, forward
//! the barrier into the loop, snapshot the chain) but its acknowledgement is held back: from that
//! moment the head logs every record that arrives on the feedback edge (and still processes it),
//! until the same barrier comes back through the tail. Then it acknowledges the chain's snapshot
//! together with the log ([`FEEDBACK_LOG`]). The log is exactly what was in flight on the
//! back edge at the cut: records the tail emitted before it took the barrier, which the head had
//! not yet processed when it snapshotted. Restore replays the log into the chain before anything
//! else, so the records circulating in the loop survive a failure (Flink's iterations lose them).
//!
//! Several checkpoints may be pending at once: each logs from its own barrier on. Barriers come
//! back in order (one tail subtask feeds one head subtask, FIFO), so a returning barrier also
//! ends any older pending entry (one the coordinator aborted). An aborted checkpoint's log is
//! dropped.
//!
//! The hold-back works on the acknowledgement, not inside the models: the head task's
//! responder ([`IterationInput::new`] swaps it) reports into a local channel that this input
//! drains on every poll, on the task's own thread right after the checkpoint ran, and forwards
//! declines at once and acknowledgements when their barrier returned.
//!
//! # Ending (as Flink's `StreamIterationHead`)
//!
//! A loop has no natural end: the head cannot tell "nothing is in the loop" from "a record is
//! slow". So, as Flink, the head ends by a timeout: once its regular input ended, it ends when
//! no feedback arrived for `max_wait` (or at once when the tail ended). It then closes the
//! feedback edge; a record that reaches a closed edge is not dropped silently: the tail fails
//! with [`IterationError::HeadEnded`] (raise `max_wait`), and the job restarts from its last
//! checkpoint. Before its input ended the head waits without a timeout.
//!
//! | model | how the head waits for feedback or input |
//! |---|---|
//! | legacy | the task thread parks outside the checkpoint lock, with a timeout of the deadline once the input ended ([`TaskInput::wake_at`]); each record goes through the chain under the lock |
//! | mailbox, bridge | the default action suspends; a feedback arrival (the edge's waker) or the deadline ([`IterationInput::with_alarm`]) resumes it |

use std::collections::VecDeque;
use std::fmt;
use std::task::Waker;
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver as ReportReceiver, unbounded as report_channel};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::channel::{InputClosed, InputGate};
use crate::sync::{Arc, Condvar, Mutex, spawn_named, thread};
use streamtask_core::keygroup::ListState;
use streamtask_core::operator::{Context, Operator};
use streamtask_core::state::StateError;
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::{
    CheckpointBarrier, OperatorError, StreamRecord, StreamStatus, Watermark, operator::Output,
    operator::TaskOutput, state::TaskSnapshot,
};

use super::input::TaskInput;
use crate::channel::InputEvent;

/// The key of the feedback log in the head's [`TaskSnapshot`]: a [`ListState`] of the
/// records in the loop at the checkpoint (read it with [`feedback_log`]).
pub const FEEDBACK_LOG: &str = "iteration/feedback-log";

/// The feedback log stored in a head's `snapshot` (empty if it has none).
///
/// The log is a [`ListState`]: any head subtask can replay any record of the loop (the loop
/// body repartitions what the head emits), so a savepoint restored with another parallelism
/// concatenates the old subtasks' logs and splits them evenly over the new ones.
///
/// # Errors
///
/// [`StateError::Decode`] if the entry is not a list of records of `T`.
pub fn feedback_log<T: DeserializeOwned>(
    snapshot: &TaskSnapshot,
) -> Result<Vec<StreamRecord<T>>, StateError> {
    match snapshot.get(FEEDBACK_LOG) {
        Some(bytes) => Ok(ListState::decode(bytes)?.items),
        None => Ok(Vec::new()),
    }
}

/// What an iteration refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IterationError {
    /// A record reached the feedback edge after the head had ended.
    #[error(
        "a record came back on the feedback edge of iteration {iteration:?} after its head ended \
         (no feedback for {max_wait:?} after its input ended); raise the iteration's max_wait"
    )]
    HeadEnded {
        /// The iteration.
        iteration: String,
        /// Its wait timeout.
        max_wait: Duration,
    },
    /// The head's feedback log in a snapshot could not be decoded.
    #[error("the feedback log of iteration {iteration:?} in the restored snapshot: {source}")]
    Restore {
        /// The iteration.
        iteration: String,
        /// The decoding error.
        #[source]
        source: StateError,
    },
    /// `close_with` was never called.
    #[error("iteration {iteration:?} was never closed; call close_with(feedback) on it")]
    NotClosed {
        /// The iteration.
        iteration: String,
    },
    /// The feedback stream's parallelism differs from the head's.
    #[error(
        "the feedback stream of iteration {iteration:?} has parallelism {feedback}, its head \
         {head}; give the feedback stream the head's parallelism"
    )]
    Parallelism {
        /// The iteration.
        iteration: String,
        /// The head's parallelism.
        head: usize,
        /// The feedback stream's.
        feedback: usize,
    },
}

/// One element on the feedback edge.
enum Feedback<T> {
    Record(StreamRecord<T>),
    Barrier(CheckpointBarrier),
    End,
}

struct Queue<T> {
    items: VecDeque<Feedback<T>>,
    waker: Option<Waker>,
    /// Nothing may be sent any more: why.
    closed: Option<Closed>,
}

/// Why a feedback edge refuses what the tail sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// The head ended by its wait timeout: a record now would be lost (the tail fails with
    /// [`IterationError::HeadEnded`]).
    Ended,
    /// The head stopped (cancelled or failed): the attempt is being torn down (the tail fails
    /// as any task whose downstream is gone, a consequence).
    Gone,
}

type Shared<T> = Arc<Mutex<Queue<T>>>;

/// Makes one feedback edge (one tail subtask to one head subtask): unbounded, FIFO.
pub fn feedback_edge<T>() -> (FeedbackSender<T>, FeedbackReceiver<T>) {
    let shared = Arc::new(Mutex::new(Queue {
        items: VecDeque::new(),
        waker: None,
        closed: None,
    }));
    (
        FeedbackSender {
            shared: Arc::clone(&shared),
        },
        FeedbackReceiver { shared },
    )
}

/// The tail's end of a feedback edge.
pub struct FeedbackSender<T> {
    shared: Shared<T>,
}

impl<T> FeedbackSender<T> {
    /// Queues `item` and wakes the head; gives it back if the head ended.
    fn send(&self, item: Feedback<T>) -> Result<(), Closed> {
        let waker = {
            let mut queue = self.shared.lock();
            if let Some(closed) = queue.closed {
                return Err(closed);
            }
            queue.items.push_back(item);
            queue.waker.take()
        };
        // Woken outside the lock: the woken thread takes it next.
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }
}

impl<T> Clone for FeedbackSender<T> {
    fn clone(&self) -> Self {
        FeedbackSender {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> fmt::Debug for FeedbackSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedbackSender").finish_non_exhaustive()
    }
}

/// The head's end of a feedback edge. Dropping it closes the edge.
pub struct FeedbackReceiver<T> {
    shared: Shared<T>,
}

impl<T> FeedbackReceiver<T> {
    fn try_recv(&self) -> Option<Feedback<T>> {
        self.shared.lock().items.pop_front()
    }

    /// Lost-wakeup free with [`try_recv`](Self::try_recv): the caller polls again after
    /// registering, and a send after the registration wakes it.
    fn register_waker(&self, waker: &Waker) {
        let mut queue = self.shared.lock();
        if queue.items.is_empty() {
            queue.waker = Some(waker.clone());
        } else {
            drop(queue);
            waker.wake_by_ref();
        }
    }

    /// Closes the edge if nothing is queued; returns whether it did.
    fn close_if_empty(&self) -> bool {
        let mut queue = self.shared.lock();
        if queue.items.is_empty() {
            queue.closed = Some(Closed::Ended);
        }
        queue.closed.is_some()
    }
}

impl<T> Drop for FeedbackReceiver<T> {
    fn drop(&mut self) {
        let mut queue = self.shared.lock();
        queue.closed.get_or_insert(Closed::Gone);
        if !queue.items.is_empty() {
            log::debug!(
                "feedback edge closed with {} element(s) queued (the head stopped)",
                queue.items.len()
            );
        }
    }
}

impl<T> fmt::Debug for FeedbackReceiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedbackReceiver").finish_non_exhaustive()
    }
}

/// A checkpoint the head took but has not acknowledged: its barrier is still in the loop.
struct Pending<T> {
    id: u64,
    /// The chain's snapshot, once the checkpoint ran.
    snapshot: Option<TaskSnapshot>,
    /// The records that came back since the head forwarded the barrier.
    log: Vec<StreamRecord<T>>,
}

/// The head's input: its regular input gate and the feedback edge, with the feedback log of
/// every pending checkpoint, the replay of a restored log, and the wait timeout.
///
/// The head is an ordinary one-input task of its model reading this input. Feedback is read
/// before the gate (it drains the loop before more input enters it).
///
/// # Checkpoints (Carbone et al. 2015)
///
/// Barriers of the regular input are aligned as in any task; the feedback edge takes no part.
/// When they align, the model runs its ordinary checkpoint (prepare, forward the barrier into
/// the loop, snapshot the chain), but the acknowledgement is held back: [`new`](Self::new)
/// swaps the task's responder for one this input drains on every poll. From the barrier on,
/// every record that comes back on the feedback edge is logged (and still processed) until the
/// same barrier returns through the tail; then the chain's snapshot is acknowledged with the
/// log under [`FEEDBACK_LOG`]. The log is exactly what was on the back edge at the cut, so a
/// restore that replays it first (this input does, from `config.restore`) loses nothing.
/// Declines pass at once; an aborted checkpoint's log is dropped.
///
/// # Ending
///
/// As Flink's `StreamIterationHead`: once the regular input ended, the head ends when no
/// feedback arrived for `max_wait` (at once when the tail ended), closing the feedback edge; a
/// record sent later fails the tail with [`IterationError::HeadEnded`]. Models whose wait has
/// a timeout poll again at [`TaskInput::wake_at`]; the others get an alarm
/// ([`with_alarm`](Self::with_alarm)).
pub struct IterationInput<T> {
    iteration: String,
    /// The head task's name (its alarm thread is named after it).
    task: String,
    gate: InputGate<T>,
    feedback: FeedbackReceiver<T>,
    max_wait: Duration,
    replay: VecDeque<StreamRecord<T>>,
    pending: VecDeque<Pending<T>>,
    /// What the head task's own checkpoints report (its responder points here).
    reports: ReportReceiver<TaskReport>,
    /// The coordinator's responder, which the held-back reports go to.
    responder: CheckpointResponder,
    input_ended: bool,
    tail_ended: bool,
    /// Once the input ended: the head ends if no feedback arrives before this.
    deadline: Option<Instant>,
    alarm: Option<Alarm>,
    /// Where the alarm thread is counted.
    metrics: Option<std::sync::Arc<streamtask_core::metrics::TaskMetrics>>,
    ended: bool,
}

impl<T> IterationInput<T>
where
    T: Clone + Serialize + DeserializeOwned + Send + 'static,
{
    /// The input of the head of `iteration`: `gate` (its regular input) and `feedback`; the
    /// head ends once no feedback arrived for `max_wait` after its input ended.
    ///
    /// Swaps `config`'s responder for one this input holds back (the task must be built with
    /// the returned `config`), and takes the feedback log to replay out of `config.restore`.
    ///
    /// # Errors
    ///
    /// [`IterationError::Restore`] if the restored log cannot be decoded.
    pub fn new(
        iteration: impl Into<String>,
        gate: InputGate<T>,
        feedback: FeedbackReceiver<T>,
        max_wait: Duration,
        config: &mut TaskConfig,
    ) -> Result<Self, IterationError> {
        let iteration = iteration.into();
        let replay: Vec<StreamRecord<T>> = match &config.restore {
            Some(snapshot) => feedback_log(snapshot).map_err(|source| IterationError::Restore {
                iteration: iteration.clone(),
                source,
            })?,
            None => Vec::new(),
        };
        let (tx, reports) = report_channel();
        let local = CheckpointResponder::new(config.name.clone(), tx);
        let responder = std::mem::replace(&mut config.responder, local);
        Ok(IterationInput {
            iteration,
            task: config.name.clone(),
            gate,
            feedback,
            max_wait,
            replay: replay.into(),
            pending: VecDeque::new(),
            reports,
            responder,
            input_ended: false,
            tail_ended: false,
            deadline: None,
            alarm: None,
            metrics: None,
            ended: false,
        })
    }

    /// Wakes the waiting head at its deadline from a helper thread (started once the input
    /// ended, joined when the input is dropped): for models whose wait has no timeout (the
    /// mailbox's suspended default action).
    pub fn with_alarm(mut self) -> Self {
        self.alarm = Some(Alarm::new(format!("{}-alarm", self.task)));
        self
    }

    /// Records still to be replayed from a restored log.
    pub fn replay_len(&self) -> usize {
        self.replay.len()
    }

    /// Checkpoints taken whose barrier has not come back yet.
    pub fn pending_checkpoints(&self) -> usize {
        self.pending.len()
    }

    /// Holds back the head's acknowledgements until their barrier returned; passes declines on.
    fn forward_reports(&mut self) {
        while let Ok(report) = self.reports.try_recv() {
            match report {
                TaskReport::Acknowledged {
                    checkpoint,
                    snapshot,
                    ..
                } => match self.pending.iter_mut().find(|p| p.id == checkpoint) {
                    Some(pending) => pending.snapshot = Some(snapshot),
                    // Not one of the head's barriers (nothing else checkpoints it): pass on.
                    None => self.responder.acknowledge(checkpoint, snapshot),
                },
                TaskReport::Declined {
                    checkpoint, reason, ..
                } => {
                    self.pending.retain(|p| p.id != checkpoint);
                    self.responder.decline(checkpoint, reason);
                }
            }
        }
    }

    /// Barrier `id` came back through the tail: acknowledge its checkpoint with the log.
    fn barrier_returned(&mut self, id: u64) {
        // FIFO: an older entry still pending lost its barrier (aborted); it cannot complete.
        while self.pending.front().is_some_and(|p| p.id < id) {
            self.pending.pop_front();
        }
        if self.pending.front().is_some_and(|p| p.id == id) {
            let pending = self.pending.pop_front().expect("checked");
            let Some(mut snapshot) = pending.snapshot else {
                return; // the checkpoint failed in the head: its decline went on already
            };
            match ListState::new(pending.log).encode() {
                Ok(bytes) => {
                    snapshot.put(FEEDBACK_LOG, bytes);
                    self.responder.acknowledge(id, snapshot);
                }
                Err(e) => self.responder.decline(
                    id,
                    streamtask_core::task::DeclineReason::Failed(format!(
                        "the feedback log of iteration {:?}: {e}",
                        self.iteration
                    )),
                ),
            }
        }
    }

    fn log(&mut self, record: &StreamRecord<T>) {
        for pending in &mut self.pending {
            pending.log.push(record.clone());
        }
    }

    fn reset_deadline(&mut self) {
        if self.input_ended {
            self.deadline = Some(Instant::now() + self.max_wait);
        }
    }
}

impl<T> TaskInput for IterationInput<T>
where
    T: Clone + Serialize + DeserializeOwned + Send + 'static,
{
    type Record = StreamRecord<T>;

    fn poll_event(&mut self) -> Result<InputEvent<StreamRecord<T>>, InputClosed> {
        if self.ended {
            return Ok(InputEvent::EndOfInput);
        }
        self.forward_reports();
        if let Some(record) = self.replay.pop_front() {
            self.log(&record);
            return Ok(InputEvent::Record(record));
        }
        // Feedback first: it drains the loop before more input enters it.
        while let Some(item) = self.feedback.try_recv() {
            match item {
                Feedback::Record(record) => {
                    self.log(&record);
                    self.reset_deadline();
                    return Ok(InputEvent::Record(record));
                }
                Feedback::Barrier(barrier) => self.barrier_returned(barrier.id),
                Feedback::End => self.tail_ended = true,
            }
        }
        if !self.input_ended {
            match self.gate.poll_event()? {
                InputEvent::Barrier(barrier) => {
                    // The model snapshots before it polls again: what comes back from now on
                    // is after the cut.
                    self.pending.push_back(Pending {
                        id: barrier.id,
                        snapshot: None,
                        log: Vec::new(),
                    });
                    return Ok(InputEvent::Barrier(barrier));
                }
                InputEvent::EndOfInput => {
                    self.input_ended = true;
                    self.reset_deadline();
                }
                event => return Ok(event),
            }
        }
        let due = self.tail_ended || self.deadline.is_some_and(|d| Instant::now() >= d);
        if due && self.feedback.close_if_empty() {
            self.ended = true;
            self.alarm = None;
            return Ok(InputEvent::EndOfInput);
        }
        Ok(InputEvent::Nothing)
    }

    fn register_waker(&self, waker: &Waker) {
        if !self.input_ended {
            self.gate.register_waker(waker);
        }
        self.feedback.register_waker(waker);
        if let (Some(alarm), Some(deadline)) = (&self.alarm, self.deadline) {
            alarm.arm(deadline, waker, self.metrics.as_deref());
        }
    }

    fn abort_checkpoint(&mut self, id: u64) -> bool {
        self.pending.retain(|p| p.id != id);
        !self.input_ended && self.gate.abort_checkpoint(id).is_some()
    }

    fn with_metrics(
        mut self,
        metrics: std::sync::Arc<streamtask_core::metrics::TaskMetrics>,
    ) -> Self {
        self.gate = self.gate.with_metrics(std::sync::Arc::clone(&metrics));
        self.metrics = Some(metrics);
        self
    }

    fn wake_at(&self) -> Option<Instant> {
        self.deadline
    }

    fn close(&mut self) {
        // Stops and joins the alarm thread before the task reports that it ended.
        self.alarm = None;
    }
}

impl<T> fmt::Debug for IterationInput<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IterationInput")
            .field("iteration", &self.iteration)
            .field("pending", &self.pending.len())
            .field("replay", &self.replay.len())
            .field("input_ended", &self.input_ended)
            .finish_non_exhaustive()
    }
}

struct AlarmState {
    armed: Option<(Instant, Waker)>,
    stop: bool,
}

type AlarmShared = Arc<(Mutex<AlarmState>, Condvar)>;

/// A helper thread that wakes one waker at a deadline; started on the first `arm`, stopped and
/// joined on drop.
struct Alarm {
    name: String,
    shared: AlarmShared,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
}

impl Alarm {
    fn new(name: String) -> Self {
        Alarm {
            name,
            shared: Arc::new((
                Mutex::new(AlarmState {
                    armed: None,
                    stop: false,
                }),
                Condvar::new(),
            )),
            thread: Mutex::new(None),
        }
    }

    fn arm(
        &self,
        at: Instant,
        waker: &Waker,
        metrics: Option<&streamtask_core::metrics::TaskMetrics>,
    ) {
        {
            let mut thread = self.thread.lock();
            if thread.is_none() {
                let shared = Arc::clone(&self.shared);
                *thread = Some(spawn_named(self.name.clone(), move || run_alarm(&shared)));
                if let Some(metrics) = metrics {
                    metrics.threads.inc();
                }
            }
        }
        let (state, changed) = &*self.shared;
        state.lock().armed = Some((at, waker.clone()));
        changed.notify_all();
    }
}

fn run_alarm(shared: &AlarmShared) {
    let (state, changed) = &**shared;
    let mut guard = state.lock();
    loop {
        if guard.stop {
            return;
        }
        match &guard.armed {
            None => changed.wait(&mut guard),
            Some((at, _)) => {
                let now = Instant::now();
                if now >= *at {
                    let (_, waker) = guard.armed.take().expect("checked");
                    drop(guard);
                    waker.wake();
                    guard = state.lock();
                } else {
                    let wait = *at - now;
                    changed.wait_for(&mut guard, wait);
                }
            }
        }
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        let (state, changed) = &*self.shared;
        state.lock().stop = true;
        changed.notify_all();
        if let Some(handle) = self.thread.lock().take() {
            let _ = handle.join();
        }
    }
}

/// The tail's operator: the last of the feedback stream's chain; every record goes back to the
/// head (watermarks and status changes do not: they would circle forever).
pub struct FeedbackWriter<T> {
    name: String,
    iteration: String,
    max_wait: Duration,
    sender: FeedbackSender<T>,
}

impl<T> FeedbackWriter<T> {
    /// The tail of `iteration` (whose head waits `max_wait`), sending into `sender`.
    pub fn new(
        iteration: impl Into<String>,
        max_wait: Duration,
        sender: FeedbackSender<T>,
    ) -> Self {
        let iteration = iteration.into();
        FeedbackWriter {
            name: format!("{iteration} feedback"),
            iteration,
            max_wait,
            sender,
        }
    }
}

impl<T: Send> Operator for FeedbackWriter<T> {
    type In = T;
    type Out = ();

    fn name(&self) -> &str {
        &self.name
    }

    fn process_element(
        &mut self,
        record: StreamRecord<T>,
        _ctx: &mut Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        self.sender
            .send(Feedback::Record(record))
            .map_err(|closed| match closed {
                Closed::Ended => OperatorError::User {
                    operator: self.name.clone(),
                    source: Box::new(IterationError::HeadEnded {
                        iteration: self.iteration.clone(),
                        max_wait: self.max_wait,
                    }),
                },
                Closed::Gone => OperatorError::OutputClosed,
            })
    }

    fn process_watermark(
        &mut self,
        _watermark: Watermark,
        _ctx: &mut Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        Ok(())
    }

    fn process_status(
        &mut self,
        _status: StreamStatus,
        _ctx: &mut Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl<T> fmt::Debug for FeedbackWriter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedbackWriter")
            .field("iteration", &self.iteration)
            .finish_non_exhaustive()
    }
}

/// The tail task's output: its barriers go back to the head behind the records it sent (the
/// head's checkpoint completes when its barrier returns); its end of input tells the head the
/// tail ended.
pub struct FeedbackOutput<T> {
    sender: FeedbackSender<T>,
}

impl<T> FeedbackOutput<T> {
    /// The output into `sender`.
    pub fn new(sender: FeedbackSender<T>) -> Self {
        FeedbackOutput { sender }
    }
}

impl<T: Send> Output<()> for FeedbackOutput<T> {
    fn collect(&mut self, _record: StreamRecord<()>) -> Result<(), OperatorError> {
        // The chain ends in a FeedbackWriter, whose output type is (): nothing reaches here.
        Ok(())
    }
    fn emit_watermark(&mut self, _watermark: Watermark) -> Result<(), OperatorError> {
        Ok(())
    }
    fn emit_status(&mut self, _status: StreamStatus) -> Result<(), OperatorError> {
        Ok(())
    }
}

impl<T: Send> TaskOutput<()> for FeedbackOutput<T> {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        // A head that ended takes no checkpoint any more (no checkpoint completes once a task
        // finished): nothing waits for this barrier.
        let _ = self.sender.send(Feedback::Barrier(barrier));
        Ok(())
    }

    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        let _ = self.sender.send(Feedback::End);
        Ok(())
    }
}

impl<T> fmt::Debug for FeedbackOutput<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeedbackOutput").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::bounded;
    use streamtask_core::{StreamElement, state::TaskSnapshot};

    fn head(
        config: &mut TaskConfig,
    ) -> (
        crate::channel::Sender<StreamElement<u32>>,
        FeedbackSender<u32>,
        IterationInput<u32>,
        ReportReceiver<TaskReport>,
    ) {
        let (tx, rx) = bounded(16).unwrap();
        let gate = InputGate::new(vec![rx]).unwrap();
        let (feedback_tx, feedback_rx) = feedback_edge();
        let (reports_tx, reports) = report_channel();
        config.responder = CheckpointResponder::new("head", reports_tx);
        let input = IterationInput::new("loop", gate, feedback_rx, Duration::ZERO, config).unwrap();
        (tx, feedback_tx, input, reports)
    }

    fn record(event: InputEvent<StreamRecord<u32>>) -> u32 {
        match event {
            InputEvent::Record(r) => r.value,
            other => panic!("expected a record, got {other:?}"),
        }
    }

    /// The next event that is not a watermark (a gate's last channel ending may advance it).
    fn past_watermarks(input: &mut IterationInput<u32>) -> InputEvent<StreamRecord<u32>> {
        loop {
            match input.poll_event().unwrap() {
                InputEvent::Watermark(_) => {}
                event => return event,
            }
        }
    }

    #[test]
    fn smoke() {
        let mut config = TaskConfig::new("head");
        let (tx, feedback, mut input, _reports) = head(&mut config);
        tx.send(StreamElement::Record(StreamRecord::new(1)))
            .unwrap();
        feedback.send(Feedback::Record(StreamRecord::new(2))).ok();
        assert_eq!(record(input.poll_event().unwrap()), 2, "feedback first");
        assert_eq!(record(input.poll_event().unwrap()), 1);
        assert!(matches!(input.poll_event().unwrap(), InputEvent::Nothing));
    }

    #[test]
    fn the_ack_waits_for_the_barrier_and_carries_the_log() {
        let mut config = TaskConfig::new("head");
        let (tx, feedback, mut input, reports) = head(&mut config);
        let barrier = CheckpointBarrier::new(7, 0);
        tx.send(StreamElement::Barrier(barrier)).unwrap();
        assert!(matches!(
            input.poll_event().unwrap(),
            InputEvent::Barrier(b) if b.id == 7
        ));
        // The model's checkpoint acknowledges through the swapped responder.
        let mut chain_state = TaskSnapshot::new();
        chain_state.put("op-0", vec![1, 2, 3]);
        config.responder.acknowledge(7, chain_state);
        feedback.send(Feedback::Record(StreamRecord::new(5))).ok();
        assert_eq!(record(input.poll_event().unwrap()), 5);
        assert!(
            reports.try_recv().is_err(),
            "held back until the barrier returns"
        );
        feedback.send(Feedback::Barrier(barrier)).ok();
        feedback.send(Feedback::Record(StreamRecord::new(6))).ok();
        assert_eq!(record(input.poll_event().unwrap()), 6);
        match reports.try_recv().unwrap() {
            TaskReport::Acknowledged {
                checkpoint,
                snapshot,
                ..
            } => {
                assert_eq!(checkpoint, 7);
                assert_eq!(snapshot.get("op-0"), Some(&[1u8, 2, 3][..]));
                let log: Vec<StreamRecord<u32>> = feedback_log(&snapshot).unwrap();
                assert_eq!(
                    log,
                    vec![StreamRecord::new(5)],
                    "only what came back before the barrier"
                );
            }
            other => panic!("expected an ack, got {other:?}"),
        }
        assert_eq!(input.pending_checkpoints(), 0);
    }

    #[test]
    fn a_restored_log_is_replayed_first() {
        let mut snapshot = TaskSnapshot::new();
        snapshot.put(
            FEEDBACK_LOG,
            ListState::new(vec![StreamRecord::new(8u32), StreamRecord::new(9)])
                .encode()
                .unwrap(),
        );
        let mut config = TaskConfig::new("head").with_restore(Some(snapshot));
        let (tx, feedback, mut input, _reports) = head(&mut config);
        tx.send(StreamElement::Record(StreamRecord::new(1)))
            .unwrap();
        feedback.send(Feedback::Record(StreamRecord::new(2))).ok();
        assert_eq!(input.replay_len(), 2);
        let got: Vec<u32> = (0..4)
            .map(|_| record(input.poll_event().unwrap()))
            .collect();
        assert_eq!(got, [8, 9, 2, 1]);
    }

    #[test]
    fn an_aborted_checkpoint_drops_its_log_and_a_decline_passes_at_once() {
        let mut config = TaskConfig::new("head");
        let (tx, feedback, mut input, reports) = head(&mut config);
        tx.send(StreamElement::Barrier(CheckpointBarrier::new(1, 0)))
            .unwrap();
        let _ = input.poll_event().unwrap();
        assert_eq!(input.pending_checkpoints(), 1);
        input.abort_checkpoint(1);
        assert_eq!(input.pending_checkpoints(), 0);
        config
            .responder
            .decline(2, streamtask_core::task::DeclineReason::Superseded);
        feedback.send(Feedback::Record(StreamRecord::new(3))).ok();
        let _ = input.poll_event().unwrap();
        assert!(matches!(
            reports.try_recv().unwrap(),
            TaskReport::Declined { checkpoint: 2, .. }
        ));
    }

    #[test]
    fn the_head_ends_after_its_input_once_the_wait_passed_and_late_feedback_is_refused() {
        let mut config = TaskConfig::new("head");
        let (tx, feedback, mut input, _reports) = head(&mut config);
        tx.send(StreamElement::EndOfInput).unwrap();
        // max_wait is zero: due at once.
        assert!(matches!(
            past_watermarks(&mut input),
            InputEvent::EndOfInput
        ));
        let mut tail = streamtask_core::testing::OperatorHarness::new(FeedbackWriter::new(
            "loop",
            Duration::ZERO,
            feedback,
        ));
        let refused = tail.process(4);
        let message = refused.unwrap_err().to_string();
        assert!(
            message.contains("raise the iteration's max_wait"),
            "{message}"
        );
    }

    #[test]
    fn a_head_that_stopped_makes_the_tail_fail_as_a_consequence() {
        let mut config = TaskConfig::new("head");
        let (_tx, feedback, input, _reports) = head(&mut config);
        drop(input);
        let mut tail = streamtask_core::testing::OperatorHarness::new(FeedbackWriter::new(
            "loop",
            Duration::ZERO,
            feedback,
        ));
        assert!(tail.process(4).unwrap_err().is_output_closed());
    }

    #[test]
    fn the_head_does_not_end_while_feedback_is_queued() {
        let mut config = TaskConfig::new("head");
        let (tx, feedback, mut input, _reports) = head(&mut config);
        tx.send(StreamElement::EndOfInput).unwrap();
        feedback.send(Feedback::Record(StreamRecord::new(4))).ok();
        assert_eq!(record(past_watermarks(&mut input)), 4);
        assert!(matches!(
            past_watermarks(&mut input),
            InputEvent::EndOfInput
        ));
    }
}
