//! One task lifecycle for every model: the state machine, the first failure, the stop hook and
//! the done latch that `join` waits on (tabled on [`TaskState`] and [`Lifecycle`]).

use std::fmt;
use std::time::{Duration, Instant};

use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::{Arc, Condvar, Mutex};
use streamtask_core::task::{TaskError, TaskFailure, TaskOutcome, TaskState};

/// What wakes a model's threads when the task starts stopping.
type StopHook = Box<dyn Fn() + Send + Sync>;

/// What `wait_done` waits on.
#[derive(Debug, Default)]
struct Latch {
    done: bool,
    /// When the task began stopping; the grace period counts from here.
    stopped_at: Option<Instant>,
}

/// The lifecycle of one task, shared by its threads and its handle: the [`TaskState`] machine,
/// the first failure, the stop hook, and the done latch.
///
/// # The done latch
///
/// The task thread calls [`Lifecycle::complete`] last, after every other thread of the task was
/// joined; it makes the state terminal and wakes everyone in [`Lifecycle::wait_done`]. A waiter
/// waits as long as the task is live, and at most the grace period counted from the stop once it
/// is stopping: the lost-wakeup rule is the usual one (the state and the latch change under the
/// latch's mutex, and every waiter re-checks both after each wake-up).
pub struct Lifecycle {
    name: String,
    state: AtomicU8,
    failure: Mutex<Option<TaskFailure>>,
    stop_hook: Mutex<Option<Arc<StopHook>>>,
    latch: Mutex<Latch>,
    latch_changed: Condvar,
}

impl Lifecycle {
    /// The lifecycle of task `name`, `Initializing`.
    pub fn new(name: impl Into<String>) -> Self {
        Lifecycle {
            name: name.into(),
            state: AtomicU8::new(TaskState::Initializing as u8),
            failure: Mutex::new(None),
            stop_hook: Mutex::new(None),
            latch: Mutex::new(Latch::default()),
            latch_changed: Condvar::new(),
        }
    }

    /// The task's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets what wakes the task's threads when it starts stopping (cancelled or failed). Set it
    /// while wiring the task, before any of its threads can stop it; a task already stopping
    /// runs it at once.
    pub fn set_stop_hook(&self, hook: impl Fn() + Send + Sync + 'static) {
        let hook: Arc<StopHook> = Arc::new(Box::new(hook));
        *self.stop_hook.lock() = Some(Arc::clone(&hook));
        if self.state().is_stopping() {
            hook();
        }
    }

    /// Where the task is.
    pub fn state(&self) -> TaskState {
        // Acquire: pairs with the AcqRel of every transition, so who sees a state sees what the
        // transition's thread did before it.
        TaskState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// `Initializing -> Running` once the chain is open; false if the task was stopped meanwhile.
    pub fn start(&self) -> bool {
        self.transition(TaskState::Initializing, TaskState::Running)
    }

    /// `Running -> Finishing` at end of input; false if the task was stopped meanwhile.
    pub fn begin_finishing(&self) -> bool {
        self.transition(TaskState::Running, TaskState::Finishing)
    }

    /// `Running -> Suspending` at a stop-with-savepoint barrier; false if the task was not
    /// running.
    pub fn suspend(&self) -> bool {
        self.transition(TaskState::Running, TaskState::Suspending)
    }

    /// `Suspending -> Running`: the stop-with-savepoint's savepoint was aborted, the task goes on.
    /// False if it was not suspending (stopped meanwhile).
    pub fn resume(&self) -> bool {
        self.transition(TaskState::Suspending, TaskState::Running)
    }

    /// `Suspending -> Suspended`: the savepoint completed. The stop hook runs (the task's threads
    /// end, as on a cancel, but the task ends `Finished`). False if it was not suspending.
    pub fn savepoint_completed(&self) -> bool {
        if self.transition(TaskState::Suspending, TaskState::Suspended) {
            log::debug!("task {}: savepoint complete, suspended", self.name);
            self.stopped();
            true
        } else {
            false
        }
    }

    fn transition(&self, from: TaskState, to: TaskState) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Moves a live state to `to`; returns the state it left, if it was live.
    fn stop_as(&self, to: TaskState) -> Option<TaskState> {
        let mut current = self.state();
        while current.is_live() {
            match self.state.compare_exchange(
                current as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(current),
                Err(actual) => current = TaskState::from_u8(actual),
            }
        }
        None
    }

    /// `cancel()`: a live task becomes `Cancelling` and its stop hook runs. Idempotent; does
    /// nothing once the task is stopping or ended. Returns whether this call cancelled it.
    pub fn request_cancel(&self) -> bool {
        if self.stop_as(TaskState::Cancelling).is_some() {
            self.stopped();
            true
        } else {
            false
        }
    }

    /// The first failure of any of the task's threads: a live task becomes `Failing`, keeps
    /// this failure and runs its stop hook. A failure of a task that is already stopping is only
    /// logged. Returns whether this failure is the task's.
    pub fn fail(&self, thread: impl Into<String>, error: impl Into<TaskError>) -> bool {
        self.record_failure(TaskFailure::new(thread, error))
    }

    /// [`fail`](Self::fail) with a failure already built.
    pub fn record_failure(&self, failure: TaskFailure) -> bool {
        let mut slot = self.failure.lock();
        if slot.is_none() && self.stop_as(TaskState::Failing).is_some() {
            log::debug!("task {} failed: {failure}", self.name);
            *slot = Some(failure);
            drop(slot);
            self.stopped();
            true
        } else {
            log::debug!(
                "task {}: failure while stopping ignored: {failure}",
                self.name
            );
            false
        }
    }

    /// A thread of the task ignored cancellation for the grace period and is left behind: the
    /// task ends `Failed` with [`TaskError::CancellationIgnored`] (unless it already failed).
    pub fn left_behind(&self, grace: Duration) {
        let mut slot = self.failure.lock();
        if slot.is_none() {
            *slot = Some(TaskFailure::new(
                self.name.clone(),
                TaskError::CancellationIgnored {
                    grace_ms: duration_ms(grace),
                },
            ));
        }
        // Whatever it was stopping as, it now ends failed; a CAS loop, so a concurrent
        // transition is never overwritten blindly.
        let mut current = self.state();
        while current != TaskState::Failing && !current.is_terminal() {
            match self.state.compare_exchange(
                current as u8,
                TaskState::Failing as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => current = TaskState::from_u8(actual),
            }
        }
    }

    /// Records the start of the stop, wakes joiners (their grace starts now) and runs the hook.
    fn stopped(&self) {
        {
            let mut latch = self.latch.lock();
            latch.stopped_at.get_or_insert_with(Instant::now);
            self.latch_changed.notify_all();
        }
        let hook = self.stop_hook.lock().clone();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// The task thread is about to end, every other thread of the task joined: the state becomes
    /// terminal and joiners wake. Returns the terminal state.
    pub fn complete(&self) -> TaskState {
        let mut current = self.state();
        let terminal = loop {
            let terminal = match current {
                TaskState::Finishing | TaskState::Finished | TaskState::Suspended => {
                    TaskState::Finished
                }
                TaskState::Cancelling | TaskState::Cancelled => TaskState::Cancelled,
                TaskState::Failing | TaskState::Failed => TaskState::Failed,
                state @ (TaskState::Initializing | TaskState::Running | TaskState::Suspending) => {
                    self.fail(self.name.clone(), TaskError::Ended { state });
                    current = self.state();
                    continue;
                }
            };
            // A compare-exchange, not a store: a cancel or failure that lands between the read
            // and the write (Finishing -> Cancelling) decides the outcome instead of being
            // overwritten (the loom model `cancel_racing_start_and_finish...` found this).
            // Release: whoever sees the terminal state sees the teardown before it.
            match self.state.compare_exchange(
                current as u8,
                terminal as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break terminal,
                Err(actual) => current = TaskState::from_u8(actual),
            }
        };
        let mut latch = self.latch.lock();
        latch.done = true;
        self.latch_changed.notify_all();
        terminal
    }

    /// Waits until the task ended: as long as it takes while the task is live, and at most
    /// `grace` after the stop began once it is stopping. Returns whether the task ended.
    pub fn wait_done(&self, grace: Duration) -> bool {
        let mut latch = self.latch.lock();
        loop {
            if latch.done {
                return true;
            }
            match latch.stopped_at {
                None => self.latch_changed.wait(&mut latch),
                Some(stopped_at) => {
                    let deadline = stopped_at.checked_add(grace);
                    let now = Instant::now();
                    match deadline {
                        Some(deadline) if now >= deadline => return false,
                        Some(deadline) => {
                            self.latch_changed.wait_for(&mut latch, deadline - now);
                        }
                        None => self.latch_changed.wait(&mut latch),
                    }
                }
            }
        }
    }

    /// When the task began stopping (cancelled or failed), if it did: the cancel grace counts
    /// from here.
    pub fn stopped_at(&self) -> Option<Instant> {
        self.latch.lock().stopped_at
    }

    /// Whether the task ended (every thread it started joined).
    pub fn is_done(&self) -> bool {
        self.latch.lock().done
    }

    /// How the task ended; call once it is done. Takes the recorded failure.
    pub fn outcome(&self) -> TaskOutcome {
        match self.state() {
            TaskState::Finished => TaskOutcome::Finished,
            TaskState::Cancelled => TaskOutcome::Cancelled,
            state => match self.failure.lock().take() {
                Some(failure) => TaskOutcome::Failed(failure),
                None => TaskOutcome::Failed(TaskFailure::new(
                    self.name.clone(),
                    TaskError::Ended { state },
                )),
            },
        }
    }
}

impl fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lifecycle")
            .field("name", &self.name)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

/// `duration` in whole milliseconds, saturating.
pub(crate) fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
