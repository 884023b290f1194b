//! The job API's shapes, each written once and run under every model with checkpoints and
//! injected faults: the committed output must equal the output of a run without faults
//! (exactly once), and the plan must name the task runtime and source adapter each model uses.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask::JobPhase;
use streamtask::demo::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;

const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

/// A checkpointed legacy source: `0..end`, state and emit in one locked section; it checks
/// for an injected source fault before every record. Before record `end / 2` it waits a little,
/// outside the lock, for a checkpoint to be committed, so the faults after it usually restore a
/// real position rather than start over (the assertions do not depend on it).
struct Count {
    end: u64,
    faults: Arc<FaultPlan>,
    committed: Arc<AtomicU64>,
}

impl SourceFunction for Count {
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "count"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == self.end {
                return Ok(());
            }
            if n == self.end / 2 && self.committed.load(Ordering::Acquire) == 0 {
                // Give a checkpoint a chance (outside the lock) before the second half, so the
                // faults after it usually restore a real position; bounded, never a hang.
                drop(locked);
                for _ in 0..50 {
                    if self.committed.load(Ordering::Acquire) > 0 || ctx.is_cancelled() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                self.committed.fetch_max(1, Ordering::AcqRel);
                continue;
            }
            self.faults.check(FaultKind::Source);
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// Checkpoints every 10 ms (counted into `committed`) that expire after 250 ms (under load a
/// checkpoint triggered while the tasks start may never complete; expiring it lets the next
/// one run), up to 10 restarts 1 ms apart, small
/// channels (barriers wait behind little data), and a fair checkpoint lock: the legacy model's
/// default eventual fairness lets a hot source starve the checkpoint trigger for a whole short
/// run.
fn config(dir: &std::path::Path, committed: &Arc<AtomicU64>) -> JobConfig {
    let committed = Arc::clone(committed);
    JobConfig::new(dir)
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointCommitting { .. } = phase {
                committed.fetch_add(1, Ordering::AcqRel);
            }
        }))
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(Duration::from_millis(250)),
        ))
        .with_restart(RestartStrategy::fixed_delay(10, Duration::from_millis(1)))
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair)
}

/// What a shape builds its job with.
struct Shape<'a, T> {
    env: &'a StreamEnvironment,
    faults: Arc<FaultPlan>,
    out: &'a CollectHandle<T>,
    /// Checkpoints committed so far in this run.
    committed: Arc<AtomicU64>,
}

/// Builds the job `shape` describes under `model`, runs it with `faults`, and returns the
/// committed output (sorted) and the restarts.
fn run<T, B>(model: Model, faults: FaultPlan, shape: B) -> (Vec<T>, u32, JobPlan)
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + Ord + 'static,
    B: Fn(&Shape<'_, T>),
{
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(faults);
    let env = StreamEnvironment::new(model);
    let out = CollectHandle::new();
    let committed = Arc::new(AtomicU64::new(0));
    shape(&Shape {
        env: &env,
        faults: Arc::clone(&faults),
        out: &out,
        committed: Arc::clone(&committed),
    });
    let job = env.build().unwrap_or_else(|e| panic!("{model}: {e}"));
    let plan = job.plan();
    let result = job
        .run(&config(dir.path(), &committed))
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    assert_eq!(
        faults.fired(),
        faults.planned().len(),
        "{model}: not every planned fault fired"
    );
    assert!(
        result.failures.iter().all(|f| f.contains("injected fault")),
        "{model}: a failure that was not injected: {:?}",
        result.failures
    );
    let mut got = out.committed();
    got.sort();
    (got, result.restarts, plan)
}

/// Runs `shape` under every model without and with `faults`; every run must commit `expected`.
fn exactly_once_everywhere<T, B>(expected: &[T], faults: &[(FaultKind, u64)], shape: B)
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + Ord + std::fmt::Debug + 'static,
    B: Fn(&Shape<'_, T>),
{
    let mut expected = expected.to_vec();
    expected.sort();
    for model in MODELS {
        let (clean, restarts, _) = run(model, FaultPlan::none(), &shape);
        assert_eq!(restarts, 0, "{model}: restarted without faults");
        assert_eq!(clean, expected, "{model}: output without faults");
        let (faulty, restarts, _) = run(model, FaultPlan::at(faults), &shape);
        assert!(restarts >= 1, "{model}: the faults did not restart the job");
        assert_eq!(
            faulty, expected,
            "{model}: output with faults is not exactly once"
        );
    }
}

#[test]
fn smoke() {
    for model in MODELS {
        let (got, restarts, _) = run(model, FaultPlan::none(), |s| {
            s.env
                .from_sequence("numbers", 0..10)
                .map("double", |n: u64| n * 2)
                .collect_sink("collect", s.out);
        });
        assert_eq!(restarts, 0);
        assert_eq!(got, (0..10).map(|n| n * 2).collect::<Vec<u64>>(), "{model}");
    }
}

#[test]
fn a_legacy_source_runs_unchanged_under_every_model_exactly_once() {
    let expected: Vec<u64> = (0..2_000).map(|n| n * 3 + 1).collect();
    exactly_once_everywhere(
        &expected,
        &[(FaultKind::Source, 500), (FaultKind::Operator, 1_400)],
        |s| {
            let op_faults = Arc::clone(&s.faults);
            let (faults, committed) = (Arc::clone(&s.faults), Arc::clone(&s.committed));
            s.env
                .add_source("count", move |_| Count {
                    end: 2_000,
                    faults: Arc::clone(&faults),
                    committed: Arc::clone(&committed),
                })
                .map("times three", move |n: u64| {
                    op_faults.check(FaultKind::Operator);
                    n * 3
                })
                .key_by(|n: &u64| n % 7)
                .map_with_parallelism("plus one", 2, |n: u64| n + 1)
                .collect_sink("collect", s.out);
        },
    );
}

#[test]
fn from_sequence_is_checkpointed_under_every_model() {
    let expected: Vec<u64> = (0..3_000).filter(|n| n % 3 != 0).collect();
    exactly_once_everywhere(
        &expected,
        &[(FaultKind::Operator, 700), (FaultKind::Operator, 2_100)],
        |s| {
            let faults = Arc::clone(&s.faults);
            s.env
                .from_sequence("sequence", 0..3_000)
                .map("fault", move |n: u64| {
                    faults.check(FaultKind::Operator);
                    n
                })
                .filter("not thirds", |n: &u64| n % 3 != 0)
                .start_new_chain("second task")
                .collect_sink("collect", s.out);
        },
    );
}

#[test]
fn from_iter_is_checkpointed_under_every_model() {
    let words: Vec<String> = (0..1_000).map(|n| format!("w{n:04}")).collect();
    let expected: Vec<String> = words.iter().map(|w| w.to_uppercase()).collect();
    exactly_once_everywhere(&expected, &[(FaultKind::Operator, 333)], move |s| {
        let faults = Arc::clone(&s.faults);
        s.env
            .from_iter("words", words.clone())
            .map("upper", move |w: String| {
                faults.check(FaultKind::Operator);
                w.to_uppercase()
            })
            .collect_sink("collect", s.out);
    });
}

#[test]
fn the_plan_names_the_adapter_each_model_uses() {
    let adapters = |model: Model| {
        let env = StreamEnvironment::new(model);
        let out = CollectHandle::new();
        let legacy = CollectHandle::new();
        env.from_sequence("reader", 0..3)
            .collect_sink("collect", &out);
        env.add_source("legacy", |_| Count {
            end: 3,
            faults: Arc::new(FaultPlan::none()),
            committed: Arc::new(AtomicU64::new(1)),
        })
        .collect_sink("collect legacy", &legacy);
        let plan = env.build().unwrap().plan();
        (
            plan.task("reader").unwrap().clone(),
            plan.task("legacy").unwrap().clone(),
            plan.to_string(),
        )
    };
    let (reader, legacy, text) = adapters(Model::Legacy);
    assert_eq!(reader.adapter, Some(SourceAdapter::ReaderSource));
    assert_eq!(reader.runtime, "legacy SourceStreamTask");
    assert_eq!(legacy.adapter, None);
    assert!(text.contains("ReaderSource"), "{text}");

    let (reader, legacy, text) = adapters(Model::Mailbox);
    assert_eq!(reader.adapter, None);
    assert_eq!(legacy.adapter, Some(SourceAdapter::HandoffReader));
    assert_eq!(legacy.runtime, "mailbox SourceTask");
    assert!(text.contains("HandoffReader"), "{text}");

    let (reader, legacy, _) = adapters(Model::Bridge);
    assert_eq!(reader.adapter, None);
    assert_eq!(legacy.adapter, None);
    assert_eq!(legacy.runtime, "bridge LegacySourceStreamTask");
    assert_eq!(legacy.chain, ["legacy", "collect legacy"]);
}

#[test]
fn the_plan_lists_chains_and_partitioning() {
    let env = StreamEnvironment::new(Model::Mailbox);
    let out = CollectHandle::new();
    env.from_sequence("numbers", 0..10)
        .map("square", |n: u64| n * n)
        .key_by(|n: &u64| n % 4)
        .map_with_parallelism("plus one", 2, |n: u64| n + 1)
        .collect_sink("collect", &out);
    let plan = env.build().unwrap().plan();
    assert_eq!(plan.tasks().len(), 2);
    assert_eq!(plan.tasks()[0].chain, ["numbers", "square"]);
    let second = &plan.tasks()[1];
    assert_eq!(second.name, "plus one");
    assert_eq!(second.parallelism, 2);
    assert_eq!(second.runtime, "mailbox OneInputTask");
    assert_eq!(second.inputs[0].from, "numbers");
    assert_eq!(second.inputs[0].partitioning, "hash");
    assert_eq!(second.chain, ["plus one", "collect"]);
}

#[test]
fn union_merges_inputs_of_any_parallelism_exactly_once() {
    let mut expected: Vec<u64> = (0..1_000).collect();
    expected.extend(10_000..10_500);
    expected.extend(20_000..20_500);
    exactly_once_everywhere(
        &expected,
        &[(FaultKind::Operator, 400), (FaultKind::Source, 800)],
        |s| {
            let (faults, committed) = (Arc::clone(&s.faults), Arc::clone(&s.committed));
            let legacy = s.env.add_source("count", move |_| Count {
                end: 1_000,
                faults: Arc::clone(&faults),
                committed: Arc::clone(&committed),
            });
            let reader = s.env.from_sequence("reader", 10_000..10_500);
            let spread = s
                .env
                .from_sequence("third", 20_000..20_500)
                .rebalance("third spread", 2);
            let faults = Arc::clone(&s.faults);
            legacy
                .union("all", [reader, spread])
                .map("fault", move |n: u64| {
                    faults.check(FaultKind::Operator);
                    n
                })
                .collect_sink("collect", s.out);
        },
    );
}

#[test]
fn every_partitioner_keeps_every_record_exactly_once() {
    let expected: Vec<u64> = (0..4_000).collect();
    exactly_once_everywhere(
        &expected,
        &[(FaultKind::Operator, 1_000), (FaultKind::Operator, 5_500)],
        |s| {
            let (first, second) = (Arc::clone(&s.faults), Arc::clone(&s.faults));
            s.env
                .from_sequence("numbers", 0..4_000)
                .rebalance("rebalanced", 3)
                .map("fault", move |n: u64| {
                    first.check(FaultKind::Operator);
                    n
                })
                .rescale("rescaled", 2)
                .shuffle_random("shuffled", 3)
                .partition_custom("custom", 2, |n: &u64, parallelism| {
                    (*n as usize) % parallelism
                })
                .map("fault again", move |n: u64| {
                    second.check(FaultKind::Operator);
                    n
                })
                .global("global")
                .collect_sink("collect", s.out);
        },
    );
}

#[test]
fn broadcast_copies_every_record_to_every_subtask_exactly_once() {
    let expected: Vec<u64> = (0..1_000).flat_map(|n| [n, n, n]).collect();
    exactly_once_everywhere(&expected, &[(FaultKind::Operator, 1_200)], |s| {
        let faults = Arc::clone(&s.faults);
        s.env
            .from_sequence("numbers", 0..1_000)
            .broadcast("copies", 3)
            .map("fault", move |n: u64| {
                faults.check(FaultKind::Operator);
                n
            })
            .rescale("wide", 6)
            .collect_sink("collect", s.out);
    });
}

#[test]
fn the_plan_names_every_partitioning() {
    let env = StreamEnvironment::new(Model::Legacy);
    let out = CollectHandle::new();
    let other = env.from_sequence("other", 0..1);
    env.from_sequence("numbers", 0..1)
        .union("both", [other.rebalance("spread", 2)])
        .rescale("rescaled", 2)
        .shuffle_random("shuffled", 2)
        .broadcast("copies", 2)
        .partition_custom("custom", 2, |_: &u64, _| 0)
        .global("global")
        .collect_sink("collect", &out);
    let plan = env.build().unwrap().plan();
    let input = |task: &str| {
        plan.task(task)
            .unwrap()
            .inputs
            .iter()
            .map(|i| (i.from.as_str(), i.partitioning))
            .collect::<Vec<_>>()
    };
    assert_eq!(input("spread"), [("other", "rebalance")]);
    assert_eq!(
        input("both"),
        [("numbers", "forward"), ("spread", "rebalance")]
    );
    assert_eq!(input("rescaled"), [("both", "rescale")]);
    assert_eq!(input("shuffled"), [("rescaled", "shuffle")]);
    assert_eq!(input("copies"), [("shuffled", "broadcast")]);
    assert_eq!(input("custom"), [("copies", "custom")]);
    assert_eq!(input("global"), [("custom", "global")]);
    assert_eq!(plan.task("global").unwrap().parallelism, 1);
    assert_eq!(plan.task("global").unwrap().chain, ["collect"]);
}

#[test]
fn fan_out_feeds_several_pipelines_from_one_stream_exactly_once() {
    let expected: Vec<u64> = (0..3_000).collect();
    exactly_once_everywhere(
        &expected,
        &[(FaultKind::Source, 300), (FaultKind::Operator, 1_000)],
        |s| {
            let (faults, committed) = (Arc::clone(&s.faults), Arc::clone(&s.committed));
            let mut branches = s
                .env
                .add_source("count", move |_| Count {
                    end: 1_500,
                    faults: Arc::clone(&faults),
                    committed: Arc::clone(&committed),
                })
                .fan_out(&["evens", "odds"]);
            let odds = branches.pop().unwrap().map("2n+1", |n: u64| 2 * n + 1);
            let faults = Arc::clone(&s.faults);
            let evens = branches.pop().unwrap().map("2n", move |n: u64| {
                faults.check(FaultKind::Operator);
                2 * n
            });
            evens.union("joined", [odds]).collect_sink("collect", s.out);
        },
    );
}

#[test]
fn connect_with_a_co_map_aligns_both_inputs_exactly_once() {
    let mut expected: Vec<u64> = (0..1_500).map(|n| 2 * n).collect();
    expected.extend((0..500).map(|n| 2 * n + 1));
    exactly_once_everywhere(
        &expected,
        &[(FaultKind::Source, 200), (FaultKind::Operator, 900)],
        |s| {
            let (faults, committed) = (Arc::clone(&s.faults), Arc::clone(&s.committed));
            let numbers = s.env.add_source("count", move |_| Count {
                end: 1_500,
                faults: Arc::clone(&faults),
                committed: Arc::clone(&committed),
            });
            let words = s
                .env
                .from_iter(
                    "words",
                    (0..500).map(|n| format!("w{n}")).collect::<Vec<_>>(),
                )
                .rebalance("spread words", 2);
            let faults = Arc::clone(&s.faults);
            numbers
                .connect(words)
                .map(
                    "either",
                    move |n: u64| {
                        faults.check(FaultKind::Operator);
                        2 * n
                    },
                    |w: String| 2 * w[1..].parse::<u64>().unwrap() + 1,
                )
                .collect_sink("collect", s.out);
        },
    );
}

#[test]
fn the_plan_shows_a_two_input_task() {
    for (model, runtime) in [
        (Model::Legacy, "legacy TwoInputStreamTask"),
        (Model::Mailbox, "mailbox TwoInputTask"),
        (Model::Bridge, "mailbox TwoInputTask"),
    ] {
        let env = StreamEnvironment::new(model);
        let out = CollectHandle::new();
        env.from_sequence("a", 0..1)
            .connect(env.from_iter("b", vec![1i64]))
            .map("co", |n: u64| n as i64, |n: i64| n)
            .collect_sink("collect", &out);
        let plan = env.build().unwrap().plan();
        let co = plan.task("co").unwrap();
        assert_eq!(co.runtime, runtime);
        assert_eq!(co.chain, ["co", "collect"]);
        assert_eq!(co.inputs.len(), 2);
    }
}

#[test]
fn connect_with_a_co_flat_map_is_exactly_once() {
    let mut expected: Vec<u64> = (0..1_000).flat_map(|n| [n, n]).collect();
    expected.extend((0..300).map(|n| 10_000 + n).filter(|n| n % 2 == 0));
    exactly_once_everywhere(&expected, &[(FaultKind::Operator, 700)], |s| {
        let faults = Arc::clone(&s.faults);
        s.env
            .from_sequence("twice", 0..1_000)
            .connect(s.env.from_sequence("evens", 10_000..10_300))
            .flat_map(
                "both",
                move |n: u64, out: &mut Vec<u64>| {
                    faults.check(FaultKind::Operator);
                    out.extend([n, n]);
                },
                |n: u64, out: &mut Vec<u64>| {
                    if n % 2 == 0 {
                        out.push(n);
                    }
                },
            )
            .collect_sink("collect", s.out);
    });
}
