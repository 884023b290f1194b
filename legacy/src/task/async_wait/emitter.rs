//! The emitter thread (Flink 1.9's `Emitter`): applies completions and emits results while
//! holding the checkpoint lock, then wakes the task thread waiting for room.
//!
//! ```text
//! any thread:  ResultFuture::complete -> EmitterSink::deliver: push to the inbox's list
//!              (its own small lock); notify the emitter if the list was empty (the task
//!              thread notifies nobody: it applies its own completions before it waits)
//! emitter:     loop { wait until the list is not empty (or a stop); lock;
//!                     loop { take the whole list; stop if it was empty;
//!                            apply it, emit what is ready, admit held elements };
//!                     notify; unlock }
//! ```
//!
//! Emit and dequeue happen in one critical section, so a snapshot (under the same lock) sees an
//! element either still queued, or emitted before the barrier. One lock acquisition handles
//! every completion that arrived until then, those delivered while the emitter waited for the
//! lock included (Flink's emitter took the lock once per element): with a task thread that
//! keeps the lock busy, the emitter gets it when the task waits for room, and then applies the
//! whole queue's completions at once. The list is taken again under the same lock until it is
//! empty, so the completion of a held element that the emitter admitted, and that answered at
//! once, goes out in the same critical section. That loop ends: while the emitter holds the
//! lock nothing but its own admissions starts a call, so it takes at most one completion per
//! element in flight or held.
//!
//! # The wake-up protocol
//!
//! The inbox is a list behind its own mutex (never held while taking the checkpoint lock, and
//! taken inside it only for a swap) and a condition variable:
//!
//! | who | under the inbox's mutex | then |
//! |---|---|---|
//! | another thread's `deliver` | push; was the list empty, or `deferred`? then clear `deferred` | if so: `notify_one` |
//! | the task thread's `deliver` | push; was the list empty? then set `deferred` | nothing |
//! | the emitter, waiting | while (the list is empty or `deferred`) and no stop: wait (releases the mutex) | take the checkpoint lock |
//! | whoever applies (holding the checkpoint lock) | swap the list for an empty one, clear `deferred` | apply what it took |
//! | the guard's stop | set `stopping` | `notify_one` |
//!
//! Only the first completion after a take can find the emitter waiting for it: the emitter
//! waits only on an empty (or deferred) list, every take empties it, and a push onto a
//! non-empty list that is not deferred comes after a push that notified (or found the emitter
//! awake, so it checks the list again before it waits). The check and the wait happen under
//! the inbox's mutex, and the condition variable registers the waiter before it releases it,
//! so a notify after a push the emitter did not see wakes it. A run of completions from other
//! threads thus costs one notify (a futex wake only when the emitter sleeps), not one per
//! completion.
//!
//! # The task thread applies its own completions before it waits
//!
//! A completion made on the task thread (a function that answers inside its call, with inline
//! completions off) is made while the task thread holds the checkpoint lock, which it lets go
//! only between two input events. An emitter woken for it would wake on the other core and
//! take the lock between two of the task thread's events, a few completions at a time, with a
//! context switch each way; or, sharing the core, run only when the task thread waits for
//! room. Flink 1.9's emitter did the first. Here the task thread's pushes wake nobody: they set
//! `deferred` ("the list holds only the task thread's completions, and nobody was woken for
//! them"), and the emitter leaves such a list alone. The task thread applies the list itself
//! ([`TaskThreadWork`], through the runtime's `Parts::set_before_wait`) when it would otherwise
//! wait: holding the lock, when the head has no room for the next element or is draining at
//! end of input; and, taking the lock, before it parks for input while the list is deferred.
//! The emitter's work is done under the same lock either way, so a snapshot sees the same
//! state whoever applied the list. A completion from any other thread pushed behind deferred
//! ones clears `deferred` and wakes the emitter, so other threads' completions never wait for
//! the task thread. Nothing waits forever: the task thread either goes on with the next event (and
//! fills the head, which it then applies before it waits) or parks, and applies first.
//!
//! The thread starts once the chain is open, before the task reads input, so restored elements
//! beyond the capacity are admitted as it frees room (FLINK-7949). It stops after a stop, set
//! by the [`Emitter`] guard when the task's run ends, once it applied what had arrived; the guard
//! joins it before the task tears the chain down. A completion that arrives later is dropped (the
//! element is replayed from the last checkpoint on restore), as are those that arrive while the
//! task is no longer live.

use std::fmt;
use std::sync::Arc as StdArc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::OperatorError;
use streamtask_core::function::{AsyncFunction, Completion, CompletionSink};
use streamtask_core::operator::{Operator, TaskOutput};
use streamtask_core::sync::{Arc, Condvar, Mutex, spawn_named, thread};
use streamtask_runtime::TaskParts;

use super::Body;
use crate::lock::CheckpointLock;
use crate::task::runtime::{BeforeWait, run_locked};

/// The smallest buffer the emitter leaves for the futures to push into.
const MIN_BUFFER: usize = 16;

/// The largest buffer it leaves (a bigger batch grows it on the pushing thread).
const MAX_BUFFER: usize = 1024;

/// What the sink and the emitter thread share.
struct Shared<O> {
    state: Mutex<InboxState<O>>,
    /// Notified when the list turns non-empty, and on stop.
    arrived: Condvar,
}

/// The inbox's state, behind its mutex.
struct InboxState<O> {
    /// Delivered and not yet taken, oldest first.
    completions: Vec<Completion<O>>,
    /// Set by the guard: the emitter ends once it applied what had arrived.
    stopping: bool,
    /// Set when the emitter ended: later deliveries are dropped.
    closed: bool,
    /// The list holds only the task thread's completions, and nobody woke the emitter for them
    /// (see the module's protocol): the emitter leaves them to the task thread.
    deferred: bool,
    /// The task thread (the thread that started the emitter): its deliveries are deferred.
    owner: Option<thread::Thread>,
}

impl<O> Shared<O> {
    /// Waits until a completion arrived or a stop was asked for (see the module's protocol);
    /// whether a stop was. First leaves `spare` (empty) for the futures to push into, if the
    /// list has no buffer of that size: the buffer is allocated and freed on the emitter
    /// thread, so the task thread's pushes do not grow it.
    fn wait_for_work(&self, spare: &mut Option<Vec<Completion<O>>>) -> bool {
        let mut state = self.state.lock();
        if state.completions.is_empty()
            && let Some(buffer) = spare.take_if(|b| b.capacity() > state.completions.capacity())
        {
            state.completions = buffer;
        }
        while (state.completions.is_empty() || state.deferred) && !state.stopping {
            self.arrived.wait(&mut state);
        }
        state.stopping
    }

    /// Takes every completion delivered so far, leaving the list empty.
    fn take(&self) -> Vec<Completion<O>> {
        let mut state = self.state.lock();
        state.deferred = false;
        std::mem::take(&mut state.completions)
    }

    /// Whether the list holds completions of the task thread that woke nobody.
    fn deferred(&self) -> bool {
        self.state.lock().deferred
    }

    /// Drops what was delivered (not applied: the task is stopping, or the emitter ends), and
    /// whatever comes later if `close`.
    fn discard(&self, close: bool) {
        let dropped = {
            let mut state = self.state.lock();
            state.closed |= close;
            state.deferred = false;
            std::mem::take(&mut state.completions)
        };
        // Dropped outside the mutex: a completion's results run user code (`Drop`).
        drop(dropped);
    }
}

/// Where the async head's futures deliver: the emitter's inbox.
struct EmitterSink<O>(Arc<Shared<O>>);

impl<O: Send + 'static> CompletionSink<O> for EmitterSink<O> {
    #[inline]
    fn deliver(&self, completion: Completion<O>) {
        let mut state = self.0.state.lock();
        if state.closed {
            // The emitter is gone (the task ended): dropped, outside the mutex.
            drop(state);
            drop(completion);
            return;
        }
        state.completions.push(completion);
        let first = state.completions.len() == 1;
        if !first && !state.deferred {
            // Only the first completion after a take can find the emitter waiting (module doc).
            return;
        }
        if state.owner.as_ref().is_some_and(thread::is_current) {
            // The task thread's own: it applies them itself before it waits (module doc).
            state.deferred |= first;
            return;
        }
        state.deferred = false;
        drop(state);
        self.0.arrived.notify_one();
    }
}

/// The emitter's inbox, between the head's sink (created first: the head's operator needs it)
/// and the thread that starts once the chain is open.
pub(crate) struct Inbox<O> {
    shared: Arc<Shared<O>>,
}

/// The sink the async head's futures deliver to, and the inbox an [`Emitter`] reads it from.
pub(crate) fn channel<O: Send + 'static>() -> (StdArc<dyn CompletionSink<O>>, Inbox<O>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(InboxState {
            completions: Vec::new(),
            stopping: false,
            closed: false,
            deferred: false,
            owner: None,
        }),
        arrived: Condvar::new(),
    });
    let sink: StdArc<dyn CompletionSink<O>> = StdArc::new(EmitterSink(Arc::clone(&shared)));
    (sink, Inbox { shared })
}

/// The running emitter thread; dropping it stops and joins the thread.
pub(crate) struct Emitter<O> {
    shared: Arc<Shared<O>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl<O: Send + 'static> Emitter<O> {
    /// Starts the emitter of the task `task` names, whose body `lock` guards (on the task
    /// thread, whose own completions wake nobody: see [`TaskThreadWork`]): completions from
    /// `inbox` go to the chain's head (index 0) in batches, every batch of one lock acquisition
    /// as a typed call (the emitter knows the body's type, so nothing is erased and downcast).
    pub(crate) fn start<F, C, W>(
        task: &TaskParts,
        lock: &Arc<CheckpointLock<Body<F, C, W>>>,
        inbox: Inbox<O>,
    ) -> Self
    where
        F: AsyncFunction<Out = O>,
        F::In: Serialize + DeserializeOwned,
        C: Operator<In = O> + 'static,
        W: TaskOutput<C::Out> + 'static,
    {
        let Inbox { shared } = inbox;
        // Called on the task thread: its own completions wake nobody (module doc).
        shared.state.lock().owner = Some(thread::current());
        let task = task.clone();
        let lock = Arc::clone(lock);
        let name = format!("{}-async-emitter", task.name);
        task.metrics.threads.inc();
        let inbox = Arc::clone(&shared);
        let thread = spawn_named(name.clone(), move || {
            streamtask_core::live::set_thread_role(streamtask_core::live::ThreadRole::Emitter);
            run(&task, &lock, &name, &inbox);
        });
        Emitter {
            shared,
            thread: Some(thread),
        }
    }
}

/// The emitter thread's loop: wait for a completion (or a stop), take the lock, apply every
/// completion delivered until the list stays empty (while the task is live; a failure fails the
/// task; the lock's waiters are notified afterwards), and end after a stop.
fn run<F, C, W>(
    task: &TaskParts,
    lock: &CheckpointLock<Body<F, C, W>>,
    name: &str,
    inbox: &Shared<F::Out>,
) where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    let mut spare = None;
    // The largest batch so far: the size of the buffer left for the next one.
    let mut largest = MIN_BUFFER;
    loop {
        let stopping = inbox.wait_for_work(&mut spare);
        run_locked(task, lock, name, |body: &mut Body<F, C, W>| {
            largest = largest.max(apply_delivered(inbox, body)?);
            Ok(())
        });
        if stopping {
            inbox.discard(true);
            return;
        }
        if !task.lifecycle.state().is_live() {
            // Not applied: the elements are replayed from the last checkpoint on restore.
            inbox.discard(false);
        }
        // Allocated outside both locks, for the next batch (see `wait_for_work`).
        spare
            .get_or_insert_with(|| Vec::with_capacity(largest.min(MAX_BUFFER).next_power_of_two()));
    }
}

impl<O> Emitter<O> {
    /// The emitter's work, for the task thread to do before it waits (see the module's
    /// protocol).
    pub(crate) fn task_thread_work(&self) -> TaskThreadWork<O> {
        TaskThreadWork(Arc::clone(&self.shared))
    }
}

/// The emitter's work done on the task thread, under the lock it holds, before it waits: for
/// room in the head, for the head to drain, or (taking the lock) for input. See the module's
/// protocol.
pub(crate) struct TaskThreadWork<O>(Arc<Shared<O>>);

impl<F, C, W> BeforeWait<Body<F, C, W>> for TaskThreadWork<F::Out>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    fn work(&self, body: &mut Body<F, C, W>) -> Result<bool, OperatorError> {
        apply_delivered(&self.0, body).map(|largest| largest > 0)
    }

    fn waits_for_task_thread(&self) -> bool {
        self.0.deferred()
    }
}

/// Under the lock: applies every completion delivered so far to the chain's head, taking the
/// list again until it stays empty (what arrived while the caller waited for the lock comes
/// too, and so does the answer of a held element admitted meanwhile that answered at once);
/// the largest batch taken, 0 if the list was empty.
fn apply_delivered<F, C, W>(
    inbox: &Shared<F::Out>,
    body: &mut Body<F, C, W>,
) -> Result<usize, OperatorError>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    let mut largest = 0;
    loop {
        let batch = inbox.take();
        if batch.is_empty() {
            return Ok(largest);
        }
        largest = largest.max(batch.len());
        let applied = body.with_chain(|chain, ctx| {
            chain.with_head(ctx, |head, ctx| head.on_completions(batch, ctx))
        });
        applied.unwrap_or(Ok(()))?;
    }
}

impl<O> Drop for Emitter<O> {
    fn drop(&mut self) {
        // Never called holding the lock (the task's run returned), so the thread can finish a
        // batch that waits for it.
        self.shared.state.lock().stopping = true;
        self.shared.arrived.notify_one();
        if let Some(thread) = self.thread.take() {
            // Failures went through the lifecycle; joining only reaps the thread.
            let _ = thread.join();
        }
    }
}

impl<O> fmt::Debug for Emitter<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Emitter")
            .field("running", &self.thread.is_some())
            .finish()
    }
}
