//! Failures a restart cannot fix fail the job at once, whatever restarts remain; other
//! failures use the restart strategy as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Waker;
use std::time::Duration;

use streamtask::prelude::*;
use streamtask::{JobError, JobResult, NonRecoverable};

/// Emits 0.. and fails at 50, with a failure marked non-recoverable or not; counts how many
/// readers (attempts) were made.
struct FailsAt50 {
    next: u64,
    non_recoverable: bool,
}

impl SourceReader<u64> for FailsAt50 {
    fn name(&self) -> &str {
        "numbers"
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        if self.next == 50 {
            let cause = "record 50 is malformed";
            return Err(if self.non_recoverable {
                OperatorError::user("numbers", NonRecoverable::new(cause))
            } else {
                OperatorError::user("numbers", cause)
            });
        }
        output.collect(self.next)?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(self.next.to_le_bytes().to_vec())
    }
}

fn run(model: Model, non_recoverable: bool) -> (Result<JobResult, JobError>, u32) {
    let dir = tempfile::tempdir().unwrap();
    let attempts = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&attempts);
    let env = StreamEnvironment::new(model);
    let out = CollectHandle::new();
    env.add_reader("numbers", move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        FailsAt50 {
            next: 0,
            non_recoverable,
        }
    })
    .collect_sink("out", &out);
    let config = JobConfig::new(dir.path())
        .with_restart(RestartStrategy::fixed_delay(4, Duration::from_millis(1)));
    let result = env.build().unwrap().run(&config);
    (result, attempts.load(Ordering::SeqCst))
}

#[test]
fn smoke() {
    let (result, attempts) = run(Model::Mailbox, false);
    assert!(
        matches!(result, Err(JobError::Failed { attempts: 5, .. })),
        "{result:?}"
    );
    assert_eq!(
        attempts, 5,
        "a failure a restart may fix uses every restart"
    );
}

#[test]
fn a_non_recoverable_failure_fails_the_job_at_once_under_every_model() {
    for model in Model::ALL {
        let (result, attempts) = run(model, true);
        match result {
            Err(JobError::NonRecoverable { attempts: 1, last }) => {
                assert!(
                    last.to_string().contains("record 50 is malformed"),
                    "{model}: {last}"
                );
            }
            other => panic!("{model}: expected a non-recoverable failure, got {other:?}"),
        }
        assert_eq!(attempts, 1, "{model}: no restart");
    }
}
