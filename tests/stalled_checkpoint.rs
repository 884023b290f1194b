//! The stalled-checkpoint report, the same under every model: a user function blocks, the
//! checkpoint whose barrier it holds back stays pending past the threshold, and the report names
//! the blocked task and operator, and the input on which a downstream task still awaits the
//! barrier while it arrived on the other.
//!
//! Nothing is timed: the function blocks until the report released it (a hang guard only
//! bounds the wait, so a missing report fails the test instead of hanging it), and the
//! threshold is a setting made small.
//!
//! The main job (`first_stall`):
//!
//! ```text
//! numbers (infinite until released) -> "sparse" (every 64th) -> custom partition: 0 to
//!   stuck#0, the rest to stuck#1 -> "block" (blocks on 0) -> global -> merge#0 (2 channels:
//!   from stuck#0, stuck#1) -> collect
//! ```
//!
//! The source sends few records, so its output never fills: a legacy source blocked in a full
//! send holds the checkpoint lock, and its trigger (and the barrier) would wait for it.
//!
//! | test | what blocks | what the report must name |
//! |---|---|---|
//! | `every_model_reports_the_blocked_operator_and_the_awaited_input` | a map on one subtask | the task in its user function; downstream, the barrier arrived from the other subtask and awaited from it; the legacy task's lock held by its task thread |
//! | `a_task_behind_a_blocked_one_shows_its_full_output_or_its_suspension` | a map behind a task with small channels | the task before it blocked in a full send (legacy) or suspended by backpressure (mailbox, bridge) |
//! | `a_source_stuck_under_the_checkpoint_lock_is_named_with_the_thread_holding_it` | a legacy source function inside its locked section | who holds the lock (task, source or handoff thread) and, in the lock model, the trigger's thread waiting for it |

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use streamtask::prelude::*;
use streamtask::{StallReport, TaskStall, sink::CollectHandle};
use streamtask_core::OperatorError;
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

/// The numbers 0, 1, 2, ... until `release` is released.
fn numbers(release: &Arc<Release>) -> impl Iterator<Item = u64> + Clone + Send + Sync + use<> {
    let release = Arc::clone(release);
    (0u64..).take_while(move |_| !release.flag.load(Ordering::Acquire))
}

/// A user function that blocks on the value 0 until `release` is released.
fn block_on_zero(release: &Arc<Release>) -> impl Fn(u64) -> u64 + Clone + Send + Sync + use<> {
    let release = Arc::clone(release);
    move |n| {
        if n == 0 {
            release.wait();
        }
        n
    }
}

/// Runs the job `build` makes under `model` (channels of `capacity` elements) until a stall
/// report `wanted` accepts arrives (the checkpoint stays stalled while the function blocks, and
/// is reported again every threshold), then releases the function and returns that report.
fn stall_until(
    model: Model,
    capacity: usize,
    build: impl FnOnce(&StreamEnvironment, &Arc<Release>, &CollectHandle<u64>) + Send + 'static,
    wanted: impl Fn(&StallReport) -> bool + Send + Sync + 'static,
) -> StallReport {
    let release = Arc::new(Release::default());
    let seen: Arc<Mutex<Option<StallReport>>> = Arc::default();
    let on_stall = {
        let (release, seen) = (Arc::clone(&release), Arc::clone(&seen));
        Arc::new(move |report: &StallReport| {
            let mut first = seen.lock().unwrap();
            if first.is_none() && wanted(report) {
                *first = Some(report.clone());
                release.release();
            }
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let config = JobConfig::new(dir.path())
        .with_channel_capacity(capacity)
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_stall_report_after(Duration::from_millis(100))
                // Later checkpoints are triggered while the first stays pending: whichever
                // barrier was sent after the channels filled is held where the test looks.
                .with_max_concurrent(100),
        ))
        .with_stall_reports(on_stall);
    let out = CollectHandle::new();
    let sink = out.clone();
    let job_release = Arc::clone(&release);
    let result = bounded_run::run_bounded(model, config, HANG_GUARD, move |env| {
        build(env, &job_release, &sink);
    });
    result.unwrap_or_else(|e| panic!("{model:?}: the job failed: {e}"));
    assert!(
        out.committed().contains(&0),
        "{model:?}: the blocked record went through once released"
    );
    let report = seen.lock().unwrap().take();
    report.unwrap_or_else(|| panic!("{model:?}: no stall report showed what the test waits for"))
}

/// The first report in which `stuck#0` is blocked in its user function and the barrier
/// reached `merge#0` from `stuck#1`.
fn first_stall(model: Model) -> StallReport {
    let build = |env: &StreamEnvironment, release: &Arc<Release>, sink: &CollectHandle<u64>| {
        env.from_iter("numbers", numbers(release))
            .filter("sparse", |n: &u64| n.is_multiple_of(64))
            .partition_custom("stuck", 2, |n: &u64, _| usize::from(*n != 0))
            .map("block", block_on_zero(release))
            .global("merge")
            .collect_sink("collect", sink);
    };
    stall_until(model, 1024, build, |report| {
        let blocked =
            task(report, "stuck#0").is_some_and(|t| t.operator.as_deref() == Some("block"));
        let aligning = task(report, "merge#0")
            .is_some_and(|t| t.inputs.iter().any(|c| c.barrier == BarrierState::Arrived));
        blocked && aligning
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

#[test]
fn a_task_behind_a_blocked_one_shows_its_full_output_or_its_suspension() {
    for model in MODELS {
        // numbers -> pass (its own task) -> hold (blocks on 0) -> collect; channels of 4, so
        // `pass` soon waits in a full send to `hold`.
        let build = |env: &StreamEnvironment, release: &Arc<Release>, sink: &CollectHandle<u64>| {
            env.from_iter("numbers", numbers(release))
                .rebalance("pass", 1)
                .map("pass", |n: u64| n)
                .rebalance("hold", 1)
                .map("hold", block_on_zero(release))
                .collect_sink("collect", sink);
        };
        // The lock model blocks in the full send; the mailbox model never sends into a full
        // channel: it suspends its input until the channel has room (soft backpressure).
        let held_back = move |t: &TaskStall| match model {
            Model::Legacy => t.output_blocked,
            Model::Mailbox | Model::Bridge => t.activity == Activity::Backpressured,
        };
        let report = stall_until(model, 4, build, move |report| {
            task(report, "pass#0").is_some_and(held_back)
                && task(report, "hold#0").is_some_and(|t| t.operator.as_deref() == Some("hold"))
        });
        let block = report.to_string();
        println!("{block}");
        let pass = task(&report, "pass#0").expect("pass#0 is missing");
        assert!(held_back(pass), "{model:?}: {block}");
        let shown = match model {
            Model::Legacy => "output: blocked on a full channel",
            Model::Mailbox | Model::Bridge => {
                "thread: suspended: the output or the chain takes no input"
            }
        };
        assert!(block.contains(shown), "{model:?}: {block}");
        let hold = task(&report, "hold#0").expect("hold#0 is missing");
        assert_eq!(hold.activity, Activity::Processing, "{model:?}: {block}");
        assert_eq!(
            hold.inputs[0].upstream.as_deref(),
            Some("pass#0"),
            "{block}"
        );
        assert_eq!(hold.inputs[0].barrier, BarrierState::Awaited, "{block}");
        if model == Model::Legacy {
            // The lock model sends under the checkpoint lock: the blocked task's thread holds it.
            let lock = pass.lock.as_ref().expect("a legacy task has a lock");
            assert_eq!(lock.holder, Some(ThreadRole::Task), "{block}");
        }
    }
}

/// A legacy source that emits a few records, then blocks in user code holding the checkpoint
/// lock (a section that never ends) until released.
struct HoldsTheLock {
    release: Arc<Release>,
}

impl SourceFunction for HoldsTheLock {
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "holds the lock"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        for n in 0..16 {
            let mut locked = ctx.lock();
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        let locked = ctx.lock();
        self.release.wait();
        drop(locked);
        Ok(())
    }
}

#[test]
fn a_source_stuck_under_the_checkpoint_lock_is_named_with_the_thread_holding_it() {
    for model in MODELS {
        // Where the function runs: on the legacy task thread, on the bridge's source thread,
        // on the mailbox model's handoff thread (a source thread too).
        let holder = match model {
            Model::Legacy => ThreadRole::Task,
            Model::Mailbox | Model::Bridge => ThreadRole::Source,
        };
        let build = |env: &StreamEnvironment, release: &Arc<Release>, sink: &CollectHandle<u64>| {
            let release = Arc::clone(release);
            env.add_source("lines", move |_| HoldsTheLock {
                release: Arc::clone(&release),
            })
            .map("pass", |n: u64| n)
            .collect_sink("collect", sink);
        };
        let report = stall_until(model, 1024, build, move |report| {
            task(report, "lines#0")
                .and_then(|t| t.lock.as_ref())
                .is_some_and(|lock| lock.holder == Some(holder))
        });
        let block = report.to_string();
        println!("{block}");
        let lines = task(&report, "lines#0").expect("lines#0 is missing");
        let lock = lines.lock.as_ref().expect("the source has a lock");
        assert_eq!(lock.holder, Some(holder), "{model:?}: {block}");
        assert!(
            block.contains(&format!("checkpoint lock: held by {holder}")),
            "{model:?}: {block}"
        );
        if model == Model::Legacy {
            // The trigger's thread waits for the lock the source holds.
            assert!(
                lock.waiting.contains(&ThreadRole::AsyncCalls),
                "{model:?}: {block}"
            );
        }
    }
}
