//! The emitter thread (Flink 1.9's `Emitter`): applies completions and emits results while
//! holding the checkpoint lock, then wakes the task thread waiting for room.
//!
//! ```text
//! any thread:  ResultFuture::complete -> EmitterSink::deliver -> channel (no lock)
//! emitter:     loop { recv a completion; take every other one queued; lock;
//!                     apply them, emit what is ready, admit held elements; notify; unlock }
//! ```
//!
//! Emit and dequeue happen in one critical section, so a snapshot (under the same lock) sees an
//! element either still queued, or emitted before the barrier. One lock acquisition handles
//! every completion that arrived meanwhile (Flink's emitter took the lock once per element).
//!
//! The thread starts once the chain is open, before the task reads input, so restored elements
//! beyond the capacity are admitted as it frees room (FLINK-7949). It stops on a stop message,
//! sent by the [`Emitter`] guard when the task's run ends, and the guard joins it before the
//! task tears the chain down. A completion that arrives later is dropped with the channel (the
//! element is replayed from the last checkpoint on restore).

use std::fmt;
use std::sync::Arc as StdArc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::function::{AsyncFunction, Completion, CompletionSink};
use streamtask_core::operator::{Operator, TaskOutput};
use streamtask_core::runtime::TaskParts;
use streamtask_core::sync::channel::{Receiver, Sender};
use streamtask_core::sync::{Arc, spawn_named, thread};

use super::Body;
use crate::lock::CheckpointLock;
use crate::task::runtime::run_locked;

/// What the emitter thread receives.
pub(crate) enum EmitterMsg<O> {
    Completion(Completion<O>),
    Stop,
}

/// Where the async head's futures deliver: the emitter's channel.
struct EmitterSink<O>(Sender<EmitterMsg<O>>);

impl<O: Send + 'static> CompletionSink<O> for EmitterSink<O> {
    fn deliver(&self, completion: Completion<O>) {
        // Refused only once the emitter is gone (the task ended): dropped.
        let _ = self.0.send(EmitterMsg::Completion(completion));
    }
}

/// The emitter's inbox, between the head's sink (created first: the head's operator needs it)
/// and the thread that starts once the chain is open.
pub(crate) struct Inbox<O> {
    stop: Sender<EmitterMsg<O>>,
    messages: Receiver<EmitterMsg<O>>,
}

/// The sink the async head's futures deliver to, and the inbox an [`Emitter`] reads it from.
pub(crate) fn channel<O: Send + 'static>() -> (StdArc<dyn CompletionSink<O>>, Inbox<O>) {
    let (to_emitter, messages) = streamtask_core::sync::channel::unbounded();
    let sink: StdArc<dyn CompletionSink<O>> = StdArc::new(EmitterSink(to_emitter.clone()));
    (
        sink,
        Inbox {
            stop: to_emitter,
            messages,
        },
    )
}

/// The running emitter thread; dropping it stops and joins the thread.
pub(crate) struct Emitter<O> {
    stop: Sender<EmitterMsg<O>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl<O: Send + 'static> Emitter<O> {
    /// Starts the emitter of the task `task` names, whose body `lock` guards: completions from
    /// `inbox` go to the chain's head (index 0) as one batch per lock acquisition, as a typed
    /// call (the emitter knows the body's type, so nothing is erased and downcast).
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
        let Inbox { stop, messages } = inbox;
        let task = task.clone();
        let lock = Arc::clone(lock);
        let name = format!("{}-async-emitter", task.name);
        task.metrics.threads.inc();
        let thread = spawn_named(name.clone(), move || {
            run(&task, &lock, &name, &messages);
        });
        Emitter {
            stop,
            thread: Some(thread),
        }
    }
}

/// The emitter thread's loop: wait for a completion, take every other one queued up to a stop
/// message, apply the batch to the head under the lock (while the task is live; a failure fails
/// the task; the lock's waiters are notified afterwards), and end after a stop.
fn run<F, C, W>(
    task: &TaskParts,
    lock: &CheckpointLock<Body<F, C, W>>,
    name: &str,
    inbox: &Receiver<EmitterMsg<F::Out>>,
) where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
    C: Operator<In = F::Out> + 'static,
    W: TaskOutput<C::Out> + 'static,
{
    loop {
        let mut batch = match inbox.recv() {
            Ok(EmitterMsg::Completion(c)) => vec![c],
            Ok(EmitterMsg::Stop) | Err(_) => return,
        };
        let mut stopping = false;
        while let Ok(msg) = inbox.try_recv() {
            match msg {
                EmitterMsg::Completion(c) => batch.push(c),
                EmitterMsg::Stop => {
                    stopping = true;
                    break;
                }
            }
        }
        run_locked(task, lock, name, |body: &mut Body<F, C, W>| {
            let applied = body.with_chain(|chain, ctx| {
                chain.with_head(ctx, |head, ctx| head.on_completions(batch, ctx))
            });
            applied.unwrap_or(Ok(()))
        });
        if stopping {
            return;
        }
    }
}

impl<O> Drop for Emitter<O> {
    fn drop(&mut self) {
        // Never called holding the lock (the task's run returned), so the thread can finish a
        // batch that waits for it.
        let _ = self.stop.send(EmitterMsg::Stop);
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
