//! Iterations (`DataStream::iterate` / `IterativeStream::close_with`) under every model: the
//! issue's loop (halve values until they fall below a bound, feeding the rest back) commits the
//! output of a reference computed without the runtime, also with checkpoints every 10 ms and
//! faults in the loop, in the head and downstream of it: the records circulating in the loop at
//! a checkpoint are in the head's snapshot (Carbone et al. 2015) and replayed on restore.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use streamtask::JobPhase;
use streamtask::checkpoint::CheckpointStorage;
use streamtask::demo::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;
use streamtask_core::runtime::{FEEDBACK_LOG, IterationError};

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
            let log: Vec<StreamRecord<(u64, u64)>> = head
                .get_value(FEEDBACK_LOG)
                .unwrap()
                .expect("a feedback log");
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
                .with_timeout(Duration::from_millis(500)),
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
        result.failures.iter().all(|f| f.contains("injected fault")),
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
            Model::Mailbox | Model::Bridge => "mailbox IterationHeadTask",
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
