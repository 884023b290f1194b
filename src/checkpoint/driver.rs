//! [`CoordinatorDriver`]: runs a [`CheckpointCoordinator`] on its own thread.
//!
//! # The driver thread's wait (no lost wakeups)
//!
//! The thread sleeps until the coordinator's next deadline, a task report, a control message
//! (stop, task finished), or a move of a manual clock, whichever comes first:
//!
//! 1. Before its first clock read it subscribes to the clock ([`Clock::subscribe`]); each move
//!    of a [`ManualClock`](streamtask_core::time::ManualClock) puts a token into a one-slot `wake` channel (a
//!    full slot already means "look again").
//! 2. Each round it reads `now`, polls the coordinator, hands out the stalled checkpoints, and
//!    computes the next deadline (a trigger, an expiry or a stall report).
//! 3. It selects over reports, control and `wake`; with the system clock the select times out
//!    at the deadline, with a manual clock it does not time out (manual time only moves by a
//!    call that leaves a token).
//!
//! A clock move after the read in step 2 leaves a token that the select in step 3 sees, and a
//! report or control message sent at any time waits in its channel: nothing is missed between
//! looking and sleeping.

use std::fmt;
use std::task::{Wake, Waker};
use std::time::Duration;

use crossbeam::channel::{self, Receiver, Select, Sender, TrySendError};

use streamtask_core::catch_panic;
use streamtask_core::sync::{Arc, spawn_named, thread};
use streamtask_core::task::{CheckpointResponder, TaskReport};
use streamtask_core::time::Clock;

use super::{CheckpointCoordinator, CheckpointStats, CoordinatorAction, StalledCheckpoint};

/// Runs a [`CheckpointCoordinator`] on a thread of its own: triggers on time, takes the tasks'
/// reports from a channel, and hands every resulting [`CoordinatorAction`] to a callback (the
/// executor's, which calls the tasks).
///
/// Tasks report through a [`CheckpointResponder`] made by [`responder`](Self::responder) (or
/// from [`reports`](Self::reports)); the channel is unbounded, so a task never waits for the
/// coordinator. The callback runs on the driver thread, one action at a time, in order.
///
/// [`stop`](Self::stop) (or dropping the driver) ends the thread and joins it.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use streamtask::checkpoint::{
///     CheckpointConfig, CheckpointCoordinator, CheckpointStorage, CoordinatorAction,
///     CoordinatorDriver,
/// };
/// use streamtask_core::{time::Clock, time::ManualClock, state::TaskSnapshot};
///
/// let clock = ManualClock::new(0);
/// let storage = CheckpointStorage::in_memory(1).unwrap();
/// let config = CheckpointConfig::new(Duration::from_millis(100));
/// let coordinator =
///     CheckpointCoordinator::new(config, storage.clone(), ["source"], ["source"], 0).unwrap();
/// let (tx, actions) = mpsc::channel();
/// let driver = CoordinatorDriver::spawn(coordinator, Clock::Manual(clock.clone()), move |a| {
///     let _ = tx.send(a.clone());
/// });
/// let responder = driver.responder("source");
///
/// clock.advance(100);
/// let CoordinatorAction::Trigger(barrier) = actions.recv().unwrap() else { panic!() };
/// responder.acknowledge(barrier.id, TaskSnapshot::new());
/// assert!(matches!(actions.recv().unwrap(), CoordinatorAction::Complete { id: 1 }));
///
/// let coordinator = driver.stop().unwrap();
/// assert_eq!(coordinator.last_id(), 1);
/// assert_eq!(storage.completed_ids().unwrap(), vec![1]);
/// ```
pub struct CoordinatorDriver {
    reports: Sender<TaskReport>,
    control: Sender<Control>,
    stats: Arc<CheckpointStats>,
    thread: Option<thread::JoinHandle<Result<CheckpointCoordinator, String>>>,
}

/// What the driver's owner tells its thread.
#[derive(Debug)]
enum Control {
    /// A task finished: stop checkpointing.
    TaskFinished(String),
    /// Trigger a savepoint now.
    TriggerSavepoint,
    /// End the thread.
    Stop,
}

/// The driver thread ended abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DriverError {
    /// The action callback panicked; the thread ended and the coordinator is lost.
    #[error("the checkpoint action callback panicked: {0}; return errors from it, do not panic")]
    CallbackPanicked(String),
}

impl CoordinatorDriver {
    /// Starts a thread that runs `coordinator` against `clock` and hands each action to
    /// `on_action`.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread.
    pub fn spawn(
        coordinator: CheckpointCoordinator,
        clock: Clock,
        on_action: impl FnMut(&CoordinatorAction) + Send + 'static,
    ) -> Self {
        Self::spawn_with_stalls(coordinator, clock, on_action, |_| {})
    }

    /// As [`spawn`](Self::spawn), and hands each stalled checkpoint (see
    /// [`CheckpointCoordinator::stalled`]) to `on_stall`, on the driver thread, when it falls
    /// due: the thread wakes for it as for a trigger.
    ///
    /// # Panics
    ///
    /// If the operating system refuses to start a thread.
    pub fn spawn_with_stalls(
        coordinator: CheckpointCoordinator,
        clock: Clock,
        on_action: impl FnMut(&CoordinatorAction) + Send + 'static,
        on_stall: impl FnMut(&StalledCheckpoint) + Send + 'static,
    ) -> Self {
        let (reports, reports_rx) = channel::unbounded();
        let (control, control_rx) = channel::unbounded();
        let stats = coordinator.stats();
        let channels = Channels {
            reports: reports_rx,
            control: control_rx,
        };
        let thread = spawn_named("checkpoint-coordinator", move || {
            catch_panic(move || run(coordinator, &clock, &channels, on_action, on_stall))
        });
        CoordinatorDriver {
            reports,
            control,
            stats,
            thread: Some(thread),
        }
    }

    /// A responder for `task` that reports to this driver's coordinator.
    pub fn responder(&self, task: impl Into<String>) -> CheckpointResponder {
        CheckpointResponder::new(task, self.reports.clone())
    }

    /// The channel tasks report to (what [`CheckpointResponder::new`] takes).
    pub fn reports(&self) -> Sender<TaskReport> {
        self.reports.clone()
    }

    /// Tells the coordinator that `task` finished (see
    /// [`CheckpointCoordinator::task_finished`]); the resulting aborts go to the callback.
    pub fn task_finished(&self, task: impl Into<String>) {
        // The thread outlives every send: it ends only on `Stop`, which only `stop` sends.
        let _ = self.control.send(Control::TaskFinished(task.into()));
    }

    /// Triggers a savepoint (see [`CheckpointCoordinator::trigger_savepoint`]); its trigger
    /// goes to the callback.
    pub fn trigger_savepoint(&self) {
        let _ = self.control.send(Control::TriggerSavepoint);
    }

    /// The coordinator's statistics (completed, aborted, durations), live.
    pub fn stats(&self) -> Arc<CheckpointStats> {
        Arc::clone(&self.stats)
    }

    /// Stops the thread after the action it is carrying out, joins it, and returns the
    /// coordinator (pending checkpoints stay pending in it).
    ///
    /// # Errors
    ///
    /// [`DriverError::CallbackPanicked`] if the callback panicked, which ended the thread.
    ///
    /// # Panics
    ///
    /// If called from the action callback (the thread cannot join itself).
    pub fn stop(mut self) -> Result<CheckpointCoordinator, DriverError> {
        self.shut_down()
            .expect("a driver is shut down only once")
            .map_err(DriverError::CallbackPanicked)
    }

    fn shut_down(&mut self) -> Option<Result<CheckpointCoordinator, String>> {
        let handle = self.thread.take()?;
        let _ = self.control.send(Control::Stop);
        assert!(
            handle.thread().id() != thread::current().id(),
            "CoordinatorDriver stopped from its own action callback; stop it from another thread"
        );
        // `run` is wrapped in `catch_panic`, so joining itself does not fail.
        Some(
            handle
                .join()
                .unwrap_or_else(|_| Err("the driver thread panicked".into())),
        )
    }
}

impl Drop for CoordinatorDriver {
    fn drop(&mut self) {
        if let Some(Err(message)) = self.shut_down() {
            log::error!("checkpoint coordinator thread failed: {message}");
        }
    }
}

impl fmt::Debug for CoordinatorDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoordinatorDriver")
            .field("running", &self.thread.is_some())
            .field("stats", &self.stats.summary())
            .finish()
    }
}

/// The receiving ends the driver thread selects over.
struct Channels {
    reports: Receiver<TaskReport>,
    control: Receiver<Control>,
}

/// Wakes the driver thread when a manual clock moves.
struct ClockWaker(Sender<()>);

impl Wake for ClockWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        match self.0.try_send(()) {
            // A full slot already tells the thread to look again; a gone thread needs nothing.
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }
}

fn run(
    mut coordinator: CheckpointCoordinator,
    clock: &Clock,
    channels: &Channels,
    mut on_action: impl FnMut(&CoordinatorAction),
    mut on_stall: impl FnMut(&StalledCheckpoint),
) -> CheckpointCoordinator {
    let (wake_tx, wake) = channel::bounded(1);
    // Step 1 of the protocol: subscribe before the first read of the clock.
    let _subscription = clock.subscribe(Waker::from(std::sync::Arc::new(ClockWaker(wake_tx))));
    let mut act = |actions: Vec<CoordinatorAction>| actions.iter().for_each(&mut on_action);
    loop {
        let now = clock.now_millis();
        act(coordinator.poll(now));
        // After the poll: a checkpoint that just expired is not reported as stalled.
        coordinator.stalled(now).iter().for_each(&mut on_stall);
        let deadline = match (coordinator.next_deadline(), coordinator.next_stall_report()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = match clock {
            Clock::System => deadline
                .map(|deadline| Duration::from_millis(u64::try_from(deadline - now).unwrap_or(0))),
            // Manual time moves only by calls that leave a token in `wake`.
            Clock::Manual(_) => None,
        };
        let mut select = Select::new();
        let control = select.recv(&channels.control);
        let reports = select.recv(&channels.reports);
        // Only a manual clock keeps the waker (and so the sender) alive: with the system clock
        // `wake` is disconnected, and selecting on it would never sleep.
        if clock.is_manual() {
            select.recv(&wake);
        }
        let operation = match timeout {
            Some(timeout) => match select.select_timeout(timeout) {
                Ok(operation) => operation,
                Err(_) => continue,
            },
            None => select.select(),
        };
        match operation.index() {
            i if i == control => match operation.recv(&channels.control) {
                Ok(Control::TaskFinished(task)) => {
                    match coordinator.task_finished(&task, clock.now_millis()) {
                        Ok(actions) => act(actions),
                        Err(err) => {
                            coordinator.stats().rejected_reports.inc();
                            log::error!("{err}");
                        }
                    }
                }
                Ok(Control::TriggerSavepoint) => {
                    act(coordinator.trigger_savepoint(clock.now_millis()));
                }
                // The driver is gone or stopping.
                Ok(Control::Stop) | Err(_) => return coordinator,
            },
            i if i == reports => {
                // The driver holds a sender for as long as this thread runs.
                let Ok(report) = operation.recv(&channels.reports) else {
                    return coordinator;
                };
                match coordinator.receive(report, clock.now_millis()) {
                    Ok(actions) => act(actions),
                    Err(err) => {
                        coordinator.stats().rejected_reports.inc();
                        log::error!("{err}");
                    }
                }
            }
            _ => {
                let _ = operation.recv(&wake);
            }
        }
    }
}
