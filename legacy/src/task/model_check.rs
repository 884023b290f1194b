//! The legacy runtime's helper threads, reachable from the loom models (`tests/loom.rs`) so that
//! loom checks the code that ships rather than a replica of it. Built only with `--cfg loom`.
//!
//! Each item starts the thread exactly as a running task does, on a body and a checkpoint lock
//! the model builds itself (the task thread's part is the model's own thread):
//!
//! - [`emitter_channel`] and [`EmitterThread`]: the async wait task's emitter (the sink its
//!   head's futures deliver to, the thread that applies their completions under the lock);
//! - [`AsyncCallsThread`]: the task's async-calls thread, and the trigger its handle sends it.

use std::fmt;
use std::sync::Arc as StdArc;
use std::time::Instant;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::CheckpointBarrier;
use streamtask_core::function::{AsyncFunction, CompletionSink};
use streamtask_core::operator::TaskChain;
use streamtask_core::operator::{Chain, Operator, TaskOutput};
use streamtask_core::sync::channel::{Sender, unbounded};
use streamtask_core::sync::{Arc, thread};
use streamtask_core::task::CheckpointResponder;
use streamtask_runtime::AsyncWaitOperator;
use streamtask_runtime::{ChainBody, TaskParts};

use super::async_wait::emitter::{self, Emitter, Inbox};
use super::runtime::BeforeWait;
use super::runtime::{AsyncCall, QueuedTrigger, spawn_async_calls};
use crate::lock::CheckpointLock;

/// What the checkpoint lock of an async wait task owns.
pub type AsyncBody<F, C, W> = ChainBody<Chain<AsyncWaitOperator<F>, C>, W>;

/// The sink an async head's futures deliver to (give it to the head's operator with
/// `with_completion_sink`), and the inbox the emitter reads it from.
pub fn emitter_channel<O: Send + 'static>() -> (StdArc<dyn CompletionSink<O>>, EmitterInbox<O>) {
    let (sink, inbox) = emitter::channel();
    (sink, EmitterInbox(inbox))
}

/// The emitter's inbox until its thread starts.
pub struct EmitterInbox<O>(Inbox<O>);

impl<O> fmt::Debug for EmitterInbox<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EmitterInbox { .. }")
    }
}

/// The running emitter thread (the task's own guard); dropping it sends the stop message and
/// joins the thread, as the end of the task's run does.
#[derive(Debug)]
pub struct EmitterThread<O> {
    emitter: Emitter<O>,
}

impl<O: Send + 'static> EmitterThread<O> {
    /// Starts the emitter of `task`, applying completions from `inbox` to the head of the body
    /// `lock` guards.
    pub fn start<F, C, W>(
        task: &TaskParts,
        lock: &Arc<CheckpointLock<AsyncBody<F, C, W>>>,
        inbox: EmitterInbox<O>,
    ) -> Self
    where
        F: AsyncFunction<Out = O>,
        F::In: Serialize + DeserializeOwned,
        C: Operator<In = O> + 'static,
        W: TaskOutput<C::Out> + 'static,
    {
        EmitterThread {
            emitter: Emitter::start(task, lock, inbox.0),
        }
    }

    /// What the task thread (the thread that started the emitter) does under the lock before
    /// it waits (for room, for a drain), as the task's runtime does: the emitter's work, the
    /// completions the task thread made itself included. Whether there was any.
    pub fn work_before_wait<F, C, W>(&self, body: &mut AsyncBody<F, C, W>) -> bool
    where
        F: AsyncFunction<Out = O>,
        F::In: Serialize + DeserializeOwned,
        C: Operator<In = O> + 'static,
        W: TaskOutput<C::Out> + 'static,
    {
        self.emitter
            .task_thread_work()
            .work(body)
            .expect("the chain applies the completions")
    }
}

/// A task's running async-calls thread; dropping it sends the stop message and joins it, as the
/// task's teardown does.
pub struct AsyncCallsThread {
    calls: Sender<AsyncCall>,
    /// Declines a trigger that never runs, as the handle's does.
    responder: StdArc<CheckpointResponder>,
    thread: Option<thread::JoinHandle<()>>,
}

impl AsyncCallsThread {
    /// Starts the async-calls thread of `task` on the body `lock` guards.
    pub fn start<C, W>(task: &TaskParts, lock: &Arc<CheckpointLock<ChainBody<C, W>>>) -> Self
    where
        C: TaskChain + 'static,
        W: TaskOutput<C::Out> + 'static,
    {
        let (calls, inbox) = unbounded();
        let thread = spawn_async_calls(task, lock, inbox);
        AsyncCallsThread {
            calls,
            responder: StdArc::new(task.responder.clone()),
            thread: Some(thread),
        }
    }

    /// Queues a checkpoint trigger, as the task's handle does for a source task.
    pub fn trigger(&self, barrier: CheckpointBarrier) {
        let trigger = QueuedTrigger::new(barrier, Instant::now(), StdArc::clone(&self.responder));
        self.calls
            .send(AsyncCall::Trigger(trigger))
            .unwrap_or_else(|_| unreachable!("the thread runs until this handle drops"));
    }
}

impl Drop for AsyncCallsThread {
    fn drop(&mut self) {
        let _ = self.calls.send(AsyncCall::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for AsyncCallsThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCallsThread")
            .field("running", &self.thread.is_some())
            .finish()
    }
}
