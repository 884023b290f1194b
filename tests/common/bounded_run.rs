//! The cross-model suites' adapter: builds a job under one model on a thread of its own (the
//! environment is not `Send`), runs it, and waits at most a hang guard. A run that hangs is
//! cancelled, joined (bounded) and reported as a test failure, so it never hangs the suite.

use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

use streamtask::prelude::*;
use streamtask::{JobError, JobResult};

/// Runs the job `build` makes under `model` with `config`, waiting at most `guard`.
pub(crate) fn run_bounded(
    model: Model,
    config: JobConfig,
    guard: Duration,
    build: impl FnOnce(&StreamEnvironment) + Send + 'static,
) -> Result<JobResult, JobError> {
    let cancel = Arc::clone(&config.cancel);
    let (done, result) = mpsc::channel();
    let runner = thread::spawn(move || {
        let env = StreamEnvironment::new(model);
        build(&env);
        let _ = done.send(env.build().and_then(|job| job.run(&config)));
    });
    match result.recv_timeout(guard) {
        Ok(result) => {
            runner.join().unwrap();
            result
        }
        Err(_) => {
            cancel.store(true, Ordering::Release);
            if result.recv_timeout(guard).is_ok() {
                runner.join().unwrap();
            }
            panic!("{model:?}: the run did not return within the hang guard");
        }
    }
}
