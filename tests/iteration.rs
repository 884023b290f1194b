//! Iterations (`DataStream::iterate` / `IterativeStream::close_with`) under every model: the
//! halving loop (halve values until they fall below a bound, feeding the rest back) commits the
//! output of a reference computed without the runtime, also with checkpoints every 10 ms and
//! faults in the loop, in the head and downstream of it: the records circulating in the loop at
//! a checkpoint are in the head's snapshot (Carbone et al. 2015) and replayed on restore.
//!
//! Savepoints: a run stopped with a savepoint while every record is in the loop, restored from
//! it (under the same model, across a pair of models, with another parallelism), commits
//! exactly the reference output: the heads' feedback logs are part of the savepoint's shape.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;
use std::time::Duration;

use streamtask::checkpoint::{CheckpointStorage, Savepoint};
use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;
use streamtask::{JobPhase, SavepointHandle};
use streamtask_core::state::{decode, encode};
use streamtask_runtime::{IterationError, feedback_log};

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];
const RECORDS: u64 = 1_500;
const BOUND: u64 = 10;
/// Longer than any trip around the loop on a loaded machine: a record that came back later
/// would fail the tail (never be lost), and the test would say so.
const MAX_WAIT: Duration = Duration::from_millis(1_000);

/// The input: `(id, value)` with values up to 2^17, about 14 trips around the loop each.
fn value(id: u64) -> u64 {
    (id * 7_919) % 131_072 + 1
}

/// The reference, without the runtime: halve until below the bound.
fn reference() -> Vec<(u64, u64)> {
    (0..RECORDS)
        .map(|id| {
            let mut v = value(id) / 2;
            while v >= BOUND {
                v /= 2;
            }
            (id, v)
        })
        .collect()
}

/// A checkpointed legacy source of `(id, value(id))`; halfway it waits (outside the lock,
/// bounded) until two checkpoints committed, so the faults, which only count once a checkpoint
/// committed, restore a real checkpoint with records in the loop.
struct Numbers {
    committed: Arc<AtomicU64>,
}

impl SourceFunction for Numbers {
    type Out = (u64, u64);
    type State = u64;

    fn name(&self) -> &str {
        "numbers"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, (u64, u64), u64>) -> Result<(), OperatorError> {
        let mut waited = false;
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == RECORDS {
                return Ok(());
            }
            if n == RECORDS / 2 && !waited {
                drop(locked);
                waited = true;
                // Bounded: never a hang (the assertions do not depend on it).
                for _ in 0..2_000 {
                    if self.committed.load(Ordering::Acquire) >= 2 || ctx.is_cancelled() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                continue;
            }
            locked.collect((n, value(n)))?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// Where a fault fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// In the head task's chain (the halving).
    Head,
    /// Inside the loop, in the task that feeds records back (behind a key_by).
    Loop,
    /// Downstream of the loop, before the sink.
    Downstream,
}

/// A fault check that counts only once a checkpoint committed, at `place`.
#[derive(Clone)]
struct Faults {
    plan: Arc<FaultPlan>,
    place: Option<Place>,
    committed: Arc<AtomicU64>,
}

impl Faults {
    fn check(&self, here: Place) {
        if self.place == Some(here) && self.committed.load(Ordering::Acquire) >= 1 {
            self.plan.check(FaultKind::Operator);
        }
    }
}

/// Builds the loop: numbers -> spread (2) -> iterate(head: halve) -> fan out: "again" (>= bound,
/// key_by, requeue, back to the head) and "done" (< bound, sink).
fn build(env: &StreamEnvironment, out: &CollectHandle<(u64, u64)>, faults: &Faults) {
    let committed = Arc::clone(&faults.committed);
    let (iteration, head) = env
        .add_source("numbers", move |_| Numbers {
            committed: Arc::clone(&committed),
        })
        .rebalance("spread", 2)
        .iterate("halve loop", MAX_WAIT);
    let (in_head, in_loop, downstream) = (faults.clone(), faults.clone(), faults.clone());
    let mut branches = head
        .map("halve", move |(id, v): (u64, u64)| {
            in_head.check(Place::Head);
            (id, v / 2)
        })
        .fan_out(&["again", "done"]);
    let done = branches.pop().unwrap();
    let again = branches.pop().unwrap();
    let feedback = again
        .filter("big", |&(_, v): &(u64, u64)| v >= BOUND)
        .key_by(|&(id, _): &(u64, u64)| id % 5)
        .map_with_parallelism("requeue", 2, move |record: (u64, u64)| {
            in_loop.check(Place::Loop);
            record
        });
    iteration.close_with(feedback);
    done.filter("small", |&(_, v): &(u64, u64)| v < BOUND)
        .map("out", move |record: (u64, u64)| {
            downstream.check(Place::Downstream);
            record
        })
        .collect_sink("collect", out);
}

/// What one run left.
struct Ran {
    /// The committed output, sorted.
    output: Vec<(u64, u64)>,
    restarts: u32,
    /// The records in the feedback logs of the heads' snapshots in the retained checkpoints.
    logged: usize,
}

/// The records logged by the heads in the checkpoints retained in `dir`.
fn logged_records(dir: &std::path::Path) -> usize {
    let storage = CheckpointStorage::directory(dir.join("checkpoints"), 3).unwrap();
    let mut logged = 0;
    for id in storage.completed_ids().unwrap() {
        let checkpoint = storage.load(id).unwrap();
        for subtask in 0..2 {
            let head = checkpoint
                .task(&format!("halve loop#{subtask}"))
                .expect("the head acknowledges every completed checkpoint");
            let log: Vec<StreamRecord<(u64, u64)>> = feedback_log(head).unwrap();
            logged += log.len();
        }
    }
    logged
}

/// Runs the loop under `model` with a fault at `at` occurrences of `place` (or none).
fn run(model: Model, fault: Option<(Place, u64)>) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let plan = Arc::new(match fault {
        Some((_, at)) => FaultPlan::at(&[(FaultKind::Operator, at)]),
        None => FaultPlan::none(),
    });
    let committed = Arc::new(AtomicU64::new(0));
    let faults = Faults {
        plan: Arc::clone(&plan),
        place: fault.map(|(place, _)| place),
        committed: Arc::clone(&committed),
    };
    let env = StreamEnvironment::new(model);
    let out = CollectHandle::new();
    build(&env, &out, &faults);
    let job = env.build().unwrap_or_else(|e| panic!("{model}: {e}"));
    let counter = Arc::clone(&committed);
    let config = JobConfig::new(dir.path())
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointCommitting { .. } = phase {
                counter.fetch_add(1, Ordering::AcqRel);
            }
        }))
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(Duration::from_millis(500))
                // An expiry under load is no failure of what this tests.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::fixed_delay(5, Duration::from_millis(1)))
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair);
    let result = job.run(&config).unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(
        plan.fired(),
        plan.planned().len(),
        "{model}: the planned fault did not fire (no checkpoint committed?)"
    );
    assert!(
        result.failures.iter().all(|f| f.is_injected()),
        "{model}: a failure that was not injected: {:?}",
        result.failures
    );
    let mut output = out.committed();
    output.sort();
    Ran {
        output,
        restarts: result.restarts,
        logged: logged_records(dir.path()),
    }
}

fn exactly_once_with_a_fault_at(place: Place, at: u64) {
    let expected = reference();
    for model in MODELS {
        let ran = run(model, Some((place, at)));
        assert_eq!(ran.restarts, 1, "{model}: one fault, one restart");
        assert_eq!(
            ran.output.len(),
            expected.len(),
            "{model}: records lost or doubled"
        );
        assert_eq!(
            ran.output, expected,
            "{model}: output with a fault in the {place:?}"
        );
    }
}

#[test]
fn smoke() {
    let expected = reference();
    let mut logged = 0;
    for model in MODELS {
        let ran = run(model, None);
        assert_eq!(ran.restarts, 0, "{model}");
        assert_eq!(ran.output, expected, "{model}: output of the loop");
        logged += ran.logged;
    }
    // Records circulate for the whole run: the heads' logs in the checkpoints hold some (a
    // scheduling property summed over three runs, not a timing).
    assert!(logged > 0, "no feedback record in any retained checkpoint");
}

#[test]
fn a_fault_inside_the_loop_loses_nothing_under_every_model() {
    exactly_once_with_a_fault_at(Place::Loop, 2_000);
}

#[test]
fn a_fault_in_the_head_loses_nothing_under_every_model() {
    exactly_once_with_a_fault_at(Place::Head, 3_000);
}

#[test]
fn a_fault_downstream_of_the_loop_loses_nothing_under_every_model() {
    exactly_once_with_a_fault_at(Place::Downstream, 400);
}

#[test]
fn the_plan_shows_the_head_and_the_feedback_edge() {
    for model in MODELS {
        let env = StreamEnvironment::new(model);
        let out = CollectHandle::new();
        let faults = Faults {
            plan: Arc::new(FaultPlan::none()),
            place: None,
            committed: Arc::new(AtomicU64::new(0)),
        };
        build(&env, &out, &faults);
        let plan = env.build().unwrap().plan();
        let head = plan.task("halve loop").unwrap();
        let expected = match model {
            Model::Legacy => "legacy OneInputStreamTask (iteration head)",
            Model::Mailbox | Model::Bridge => "mailbox IterationHeadStreamTask",
        };
        assert_eq!(head.runtime, expected, "{model}");
        assert!(
            head.inputs.iter().any(|i| i.partitioning == "feedback"),
            "{model}: {head:?}"
        );
        let requeue = plan.task("requeue").unwrap();
        assert_eq!(
            requeue.chain.last().map(String::as_str),
            Some("halve loop feedback")
        );
    }
}

#[test]
fn an_iteration_never_closed_is_a_build_error() {
    let env = StreamEnvironment::new(Model::Mailbox);
    let out = CollectHandle::new();
    let (iteration, head) = env
        .from_iter("numbers", vec![1u64, 2])
        .iterate("loop", MAX_WAIT);
    head.collect_sink("collect", &out);
    drop(iteration);
    let error = env.build().unwrap_err();
    assert!(
        matches!(
            error,
            JobError::Iteration(IterationError::NotClosed { ref iteration }) if iteration == "loop"
        ),
        "{error}"
    );
    assert!(error.to_string().contains("close_with"), "{error}");
}

#[test]
fn a_feedback_stream_of_another_parallelism_is_a_build_error() {
    let env = StreamEnvironment::new(Model::Legacy);
    let out = CollectHandle::new();
    let (iteration, head) = env
        .from_iter("numbers", vec![1u64, 2])
        .iterate("loop", MAX_WAIT);
    let mut branches = head.fan_out(&["again", "done"]);
    let done = branches.pop().unwrap();
    let again = branches.pop().unwrap();
    iteration.close_with(again.rebalance("wider", 3));
    done.collect_sink("collect", &out);
    let error = env.build().unwrap_err();
    assert!(
        matches!(
            error,
            JobError::Iteration(IterationError::Parallelism {
                head: 1,
                feedback: 3,
                ..
            })
        ),
        "{error}"
    );
}

/// Records of the savepoint tests (each circulates until the savepoint).
const HELD: u64 = 300;

/// A reader of `(id, value(id))` for `id` in `0..HELD`; at the end it pulls `stop` (if given)
/// and waits for the job to stop around it, else its input ends.
struct Held {
    next: u64,
    stop: Option<SavepointHandle>,
    pulled: bool,
}

impl SourceReader<(u64, u64)> for Held {
    fn name(&self) -> &str {
        "numbers"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = decode(bytes).map_err(|e| OperatorError::state("numbers", e))?;
        }
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, (u64, u64)>,
    ) -> Result<InputStatus, OperatorError> {
        if self.next < HELD {
            output.collect((self.next, value(self.next)))?;
            self.next += 1;
            return Ok(InputStatus::MoreAvailable);
        }
        match &self.stop {
            Some(stop) => {
                if !self.pulled {
                    self.pulled = true;
                    stop.stop_with_savepoint();
                }
                Ok(InputStatus::NothingAvailable)
            }
            None => Ok(InputStatus::EndOfInput),
        }
    }

    fn register_waker(&mut self, waker: &Waker) {
        if !self.pulled {
            waker.wake_by_ref();
        }
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.next).map_err(|e| OperatorError::state("numbers", e))
    }
}

/// The held loop's reference output, as the sink writes it.
fn held_reference() -> Vec<String> {
    let mut out: Vec<String> = reference()
        .into_iter()
        .take(HELD as usize)
        .map(|(id, v)| format!("{id},{v}"))
        .collect();
    out.sort_unstable();
    out
}

/// The halving loop with `parallelism` heads, into an exactly-once file sink in `work/output`.
/// Unless `release`, the loop holds every record: nothing is halved and nothing leaves, so at
/// a savepoint every record is in the loop (in the heads' feedback logs). A released loop
/// halves as the reference does.
fn build_held(
    model: Model,
    work: &Path,
    parallelism: usize,
    release: bool,
    stop: Option<SavepointHandle>,
) -> JobGraph {
    let env = StreamEnvironment::new(model);
    let (iteration, head) = env
        .add_reader("numbers", move |_| Held {
            next: 0,
            stop: stop.clone(),
            pulled: false,
        })
        .rebalance("spread", parallelism)
        .iterate("halve loop", MAX_WAIT);
    let mut branches = head
        .map(
            "halve",
            move |(id, v): (u64, u64)| {
                if release { (id, v / 2) } else { (id, v) }
            },
        )
        .fan_out(&["again", "done"]);
    let done = branches.pop().unwrap();
    let again = branches.pop().unwrap();
    let feedback = again
        .filter("big", move |&(_, v): &(u64, u64)| !release || v >= BOUND)
        .key_by(|&(id, _): &(u64, u64)| id % 5)
        .map_with_parallelism("requeue", parallelism, |record: (u64, u64)| record);
    iteration.close_with(feedback);
    done.filter("small", move |&(_, v): &(u64, u64)| release && v < BOUND)
        .map("format", |(id, v): (u64, u64)| format!("{id},{v}"))
        .two_phase_file_sink("sink", work.join("output"), |s: &String| s.clone());
    env.build().unwrap_or_else(|e| panic!("{model}: {e}"))
}

fn held_config(work: &Path, restore: Restore) -> JobConfig {
    JobConfig::new(work)
        .with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(20))))
        .with_restore(restore)
}

/// The committed output in `work/output`, sorted.
fn committed(work: &Path) -> Vec<String> {
    let mut lines = streamtask::sink::read_committed(work.join("output")).unwrap();
    lines.sort_unstable();
    lines
}

/// Stops the held loop (`from` heads, under `models[0]`) with a savepoint, checks that the
/// savepoint holds every record in its heads' feedback logs, restores it (`to` heads, under
/// `models[1]`) and checks the output.
fn stop_in_the_loop_and_restore(models: [Model; 2], from: usize, to: usize) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let handle = SavepointHandle::new();
    let first = build_held(models[0], work, from, false, Some(handle.clone()));
    let result = first
        .run(&held_config(work, Restore::Fresh).with_stop_with_savepoint(
            StopWithSavepoint::new(work.join("savepoints")).with_handle(handle),
        ))
        .unwrap_or_else(|e| panic!("{models:?}: {e}"));
    let path: PathBuf = result.savepoint.expect("stopped with a savepoint");
    assert!(
        committed(work).is_empty(),
        "{models:?}: nothing leaves a held loop"
    );

    // Every record is in the loop at the cut, so the heads' logs hold each exactly once.
    let savepoint = Savepoint::load(&path).unwrap();
    let mut logged: Vec<u64> = (0..from)
        .flat_map(|i| {
            let head = savepoint
                .checkpoint
                .task(&format!("halve loop#{i}"))
                .expect("the head's snapshot is in the savepoint");
            feedback_log::<(u64, u64)>(head)
                .unwrap()
                .into_iter()
                .map(|r| r.value.0)
        })
        .collect();
    logged.sort_unstable();
    assert_eq!(
        logged,
        (0..HELD).collect::<Vec<_>>(),
        "{models:?}: the savepoint's feedback logs hold every record in the loop once"
    );

    let second = build_held(models[1], work, to, true, None);
    let result = second
        .run(&held_config(work, Restore::Savepoint(path.clone())))
        .unwrap_or_else(|e| panic!("{models:?}: {e}"));
    assert!(
        result.savepoint.is_none(),
        "the restored run runs to its end"
    );
    assert_eq!(
        committed(work),
        held_reference(),
        "{models:?} ({from} -> {to} heads): the records in the loop at the savepoint"
    );
    let ids: Vec<&str> = savepoint
        .metadata
        .vertices
        .iter()
        .flat_map(|v| v.states.iter().map(|s| s.operator_id.as_str()))
        .collect();
    assert!(
        ids.contains(&"halve loop/feedback-log"),
        "the feedback log is in the savepoint's shape: {ids:?}"
    );
}

#[test]
fn a_savepoint_with_records_in_the_loop_restores_them_under_every_model() {
    for model in MODELS {
        stop_in_the_loop_and_restore([model, model], 2, 2);
    }
}

/// The reader runs natively under the mailbox and bridge models, so its state moves between
/// them as is (see `tests/rescale.rs`).
#[test]
fn a_savepoint_with_records_in_the_loop_restores_them_across_models() {
    stop_in_the_loop_and_restore([Model::Mailbox, Model::Bridge], 2, 2);
}

/// The feedback log is list state: the old heads' logs are split over the new heads.
#[test]
fn a_savepoint_with_records_in_the_loop_restores_them_with_another_parallelism() {
    stop_in_the_loop_and_restore([Model::Mailbox, Model::Mailbox], 2, 3);
    stop_in_the_loop_and_restore([Model::Legacy, Model::Legacy], 2, 1);
}
