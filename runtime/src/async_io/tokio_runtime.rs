//! [`TokioRuntime`]: a tokio runtime owned by a job or a task, whose threads are joined when it
//! shuts down.
//!
//! A thin owner around a multi-thread [`tokio::runtime::Runtime`]: it is built with named
//! worker threads and every driver (timers, sockets), hands out [`Handle`]s to spawn on, and
//! [`shutdown`](TokioRuntime::shutdown) drops the runtime, which cancels the tasks at their next
//! `.await` and joins every worker and blocking thread before it returns. Dropping the last
//! `Arc` does the same.

use std::fmt;
use std::sync::Arc;

use tokio::runtime::{Builder, Handle, Runtime};

use crate::sync::Mutex;

/// A tokio runtime could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TokioRuntimeError {
    /// No worker threads.
    #[error("a tokio runtime needs at least one worker thread")]
    ZeroThreads,
    /// The operating system refused the runtime's threads or drivers.
    #[error(
        "could not build the tokio runtime (threads or I/O driver): {0}; check the process's thread and file limits"
    )]
    Build(#[source] std::io::Error),
}

/// A multi-thread tokio runtime with a name and a fixed number of worker threads, owned by
/// whoever created it (a job, a task, an example) and shut down with it.
///
/// The futures of a [`FutureAsyncFunction`](super::FutureAsyncFunction) run here. Calls
/// do not block the task thread: `invoke` spawns the call and returns.
///
/// # Examples
///
/// ```
/// use streamtask_runtime::TokioRuntime;
///
/// let runtime = TokioRuntime::new("doc-io", 2).unwrap();
/// let task = runtime.handle().spawn(async { 6 * 7 });
/// assert_eq!(runtime.handle().block_on(task).unwrap(), 42);
/// runtime.shutdown(); // joins the two workers
/// assert!(runtime.is_shut_down());
/// ```
pub struct TokioRuntime {
    name: String,
    threads: usize,
    handle: Handle,
    /// `None` once shut down.
    runtime: Mutex<Option<Runtime>>,
}

impl TokioRuntime {
    /// Starts a runtime with `threads` worker threads named `<name>-<i>`, timers and I/O enabled.
    ///
    /// # Errors
    ///
    /// [`TokioRuntimeError::ZeroThreads`], or [`TokioRuntimeError::Build`] when the OS refuses.
    pub fn new(name: &str, threads: usize) -> Result<Arc<TokioRuntime>, TokioRuntimeError> {
        if threads == 0 {
            return Err(TokioRuntimeError::ZeroThreads);
        }
        let counter = Arc::new(crate::sync::atomic::AtomicUsize::new(0));
        let prefix = name.to_string();
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name_fn(move || {
                // Relaxed: only distinct numbers are needed, no ordering with other memory.
                let i = counter.fetch_add(1, crate::sync::atomic::Ordering::Relaxed);
                format!("{prefix}-{i}")
            })
            .enable_all()
            .build()
            .map_err(TokioRuntimeError::Build)?;
        Ok(Arc::new(TokioRuntime {
            name: name.to_string(),
            threads,
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
        }))
    }

    /// A handle to spawn on. Spawning after [`shutdown`](Self::shutdown) gives a task that never
    /// runs (its `JoinHandle` reports it cancelled).
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Cancels the runtime's tasks at their next `.await` and joins every thread of the runtime.
    /// Idempotent.
    ///
    /// # Panics
    ///
    /// If called from inside an async context (a task of any tokio runtime), where tokio cannot
    /// block: shut the runtime down from the thread that owns it.
    pub fn shutdown(&self) {
        let runtime = self.runtime.lock().take();
        if let Some(runtime) = runtime {
            assert!(
                Handle::try_current().is_err(),
                "TokioRuntime::shutdown called from inside an async task; call it from the \
                 thread that owns the runtime"
            );
            // Dropping a runtime shuts its scheduler down and joins its blocking pool, which
            // holds the worker threads too: no thread of it outlives this call.
            drop(runtime);
        }
    }

    /// Whether [`shutdown`](Self::shutdown) ran.
    pub fn is_shut_down(&self) -> bool {
        self.runtime.lock().is_none()
    }

    /// The number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The runtime's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TokioRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.lock().take() {
            if Handle::try_current().is_ok() {
                // The last owner let go inside an async task, where tokio cannot block: the
                // threads stop on their own but are not joined. Owners should call shutdown.
                log::warn!(
                    "tokio runtime {} dropped inside an async task; its threads are not joined \
                     (call TokioRuntime::shutdown from the owning thread)",
                    self.name
                );
                runtime.shutdown_background();
            } else {
                drop(runtime);
            }
        }
    }
}

impl fmt::Debug for TokioRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokioRuntime")
            .field("name", &self.name)
            .field("threads", &self.threads)
            .field("open", &!self.is_shut_down())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_threads_is_a_typed_error() {
        assert!(matches!(
            TokioRuntime::new("t", 0),
            Err(TokioRuntimeError::ZeroThreads)
        ));
    }

    #[test]
    fn shutdown_joins_the_workers_and_is_idempotent() {
        let runtime = TokioRuntime::new("join-me", 2).unwrap();
        // A worker thread holds a clone of `alive` while the runtime runs; once the workers
        // are joined every clone they held is gone.
        let alive = Arc::new(());
        let held = Arc::clone(&alive);
        let (tx, rx) = std::sync::mpsc::channel();
        runtime.handle().spawn(async move {
            let _held = held;
            tx.send(()).unwrap();
            std::future::pending::<()>().await;
        });
        rx.recv().unwrap();
        assert_eq!(Arc::strong_count(&alive), 2);
        runtime.shutdown();
        runtime.shutdown();
        assert_eq!(Arc::strong_count(&alive), 1, "the pending task was dropped");
        assert!(runtime.is_shut_down());
    }
}
