//! The stalled-checkpoint report, the same under every model: a user function blocks, the
//! checkpoint whose barrier it holds back stays pending past the threshold, and the report names
//! the blocked task and operator, and the input on which a downstream task still awaits the
//! barrier while it arrived on the other.
//!
//! Nothing is timed: the function blocks until the report released it (a hang guard only
//! bounds the wait, so a missing report fails the test instead of hanging it), and the
//! threshold is a setting made small.
//!
//! The job:
//!
//! ```text
//! numbers (infinite until released) -> "sparse" (every 64th) -> custom partition: 0 to
//!   stuck#0, the rest to stuck#1 -> "block" (blocks on 0) -> global -> merge#0 (2 channels:
//!   from stuck#0, stuck#1) -> collect
//! ```
//!
//! The source sends few records, so its output never fills: a legacy source blocked in a full
//! send holds the checkpoint lock, and its trigger (and the barrier) would wait for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use streamtask::prelude::*;
use streamtask::{CollectHandle, StallReport, TaskStall};
use streamtask_core::live::{Activity, BarrierState, ThreadRole};

#[path = "common/bounded_run.rs"]
mod bounded_run;

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];
/// Bounds every wait; never an assertion on time.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Released once the test has its report: the blocked function returns and the source ends.
#[derive(Default)]
struct Release {
    released: Mutex<bool>,
    changed: Condvar,
    /// Read by the source's iterator: it ends once released.
    flag: AtomicBool,
}

impl Release {
    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.flag.store(true, Ordering::Release);
        self.changed.notify_all();
    }

    /// Blocks until released (or the hang guard passed).
    fn wait(&self) {
        let released = self.released.lock().unwrap();
        let _ = self
            .changed
            .wait_timeout_while(released, HANG_GUARD, |r| !*r)
            .unwrap();
    }
}

/// Runs the job under `model` and returns the first report in which `stuck#0` is blocked in its
/// user function and the barrier reached `merge#0` from `stuck#1` (the function blocks on the
/// source's first record, so every checkpoint from then on stalls on it, and is reported again
/// every threshold); the function is released when that report arrives.
fn first_stall(model: Model) -> StallReport {
    let release = Arc::new(Release::default());
    let seen: Arc<Mutex<Option<StallReport>>> = Arc::default();
    let on_stall = {
        let (release, seen) = (Arc::clone(&release), Arc::clone(&seen));
        Arc::new(move |report: &StallReport| {
            let blocked =
                task(report, "stuck#0").is_some_and(|t| t.operator.as_deref() == Some("block"));
            let aligning = task(report, "merge#0")
                .is_some_and(|t| t.inputs.iter().any(|c| c.barrier == BarrierState::Arrived));
            let mut first = seen.lock().unwrap();
            if blocked && aligning && first.is_none() {
                *first = Some(report.clone());
                release.release();
            }
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let config = JobConfig::new(dir.path())
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_stall_report_after(Duration::from_millis(100)),
        ))
        .with_stall_reports(on_stall);
    let out = CollectHandle::new();
    let sink = out.clone();
    let job_release = Arc::clone(&release);
    let result = bounded_run::run_bounded(model, config, HANG_GUARD, move |env| {
        let source_release = Arc::clone(&job_release);
        let numbers = (0u64..).take_while(move |_| !source_release.flag.load(Ordering::Acquire));
        let blocker = Arc::clone(&job_release);
        env.from_iter("numbers", numbers)
            .filter("sparse", |n: &u64| n.is_multiple_of(64))
            .partition_custom("stuck", 2, |n: &u64, _| usize::from(*n != 0))
            .map("block", move |n: u64| {
                if n == 0 {
                    blocker.wait();
                }
                n
            })
            .global("merge")
            .collect_sink("collect", &sink);
    });
    result.unwrap_or_else(|e| panic!("{model:?}: the job failed: {e}"));
    assert!(
        out.committed().contains(&0),
        "{model:?}: the blocked record went through once released"
    );
    let report = seen.lock().unwrap().take();
    report.unwrap_or_else(|| {
        panic!("{model:?}: no stall report named stuck#0 blocked with merge#0 aligning")
    })
}

fn task<'a>(report: &'a StallReport, name: &str) -> Option<&'a TaskStall> {
    report.tasks.iter().find(|t| t.task == name)
}

#[test]
fn smoke() {
    let report = first_stall(Model::Mailbox);
    let stuck = task(&report, "stuck#0").expect("the blocked task is missing");
    assert_eq!(stuck.activity, Activity::Processing, "{report}");
    assert_eq!(stuck.operator.as_deref(), Some("block"), "{report}");
}

#[test]
fn every_model_reports_the_blocked_operator_and_the_awaited_input() {
    for model in MODELS {
        let report = first_stall(model);
        let block = report.to_string();
        // Shown with `--nocapture`: what a user reads.
        println!("{block}");
        assert_eq!(report.model, model.name(), "{block}");
        // The source may still be missing under the lock model: its trigger waits for the
        // checkpoint lock its loop holds, and the report may come just as it got it.

        // The blocked task: in its user function, its barrier still queued behind the record.
        let stuck = task(&report, "stuck#0").expect("stuck#0 is missing");
        assert_eq!(stuck.activity, Activity::Processing, "{model:?}: {block}");
        assert_eq!(
            stuck.operator.as_deref(),
            Some("block"),
            "{model:?}: {block}"
        );
        assert_eq!(stuck.inputs.len(), 1, "{model:?}: {block}");
        assert_eq!(stuck.inputs[0].upstream.as_deref(), Some("numbers#0"));
        assert_eq!(stuck.inputs[0].barrier, BarrierState::Awaited, "{block}");
        assert!(
            block.contains("in operator \"block\""),
            "{model:?}: the block names the operator: {block}"
        );

        // Downstream of it: the barrier arrived from the other subtask and is awaited from it.
        let merge = task(&report, "merge#0").expect("merge#0 is missing");
        let by_upstream = |upstream: &str| {
            merge
                .inputs
                .iter()
                .find(|c| c.upstream.as_deref() == Some(upstream))
                .unwrap_or_else(|| panic!("{model:?}: no channel from {upstream}: {block}"))
                .barrier
        };
        assert_eq!(by_upstream("stuck#0"), BarrierState::Awaited, "{block}");
        assert_eq!(by_upstream("stuck#1"), BarrierState::Arrived, "{block}");
        assert!(
            block.contains("barrier awaited on channel 0 (from stuck#0)"),
            "{model:?}: {block}"
        );

        match model {
            // The lock model's task thread holds the checkpoint lock through the call.
            Model::Legacy => {
                let lock = stuck.lock.as_ref().expect("a legacy task has a lock");
                assert_eq!(lock.holder, Some(ThreadRole::Task), "{block}");
            }
            Model::Mailbox | Model::Bridge => {
                assert!(stuck.lock.is_none(), "{model:?}: no lock: {block}");
            }
        }
    }
}

#[test]
fn no_report_is_made_when_the_reports_are_off() {
    let dir = tempfile::tempdir().unwrap();
    let reports = Arc::new(Mutex::new(0u32));
    let count = Arc::clone(&reports);
    let config = JobConfig::new(dir.path())
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10)).without_stall_reports(),
        ))
        .with_stall_reports(Arc::new(move |_: &StallReport| {
            *count.lock().unwrap() += 1;
        }));
    let out = CollectHandle::new();
    let sink = out.clone();
    bounded_run::run_bounded(Model::Mailbox, config, HANG_GUARD, move |env| {
        env.from_sequence("numbers", 0..2_000)
            .map("plus one", |n: u64| n + 1)
            .collect_sink("collect", &sink);
    })
    .unwrap();
    assert_eq!(out.committed().len(), 2_000);
    assert_eq!(*reports.lock().unwrap(), 0);
}
