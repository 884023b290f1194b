//! The job API's shapes, each written once and run under every model with checkpoints and
//! injected faults: the committed output must equal the output of a run without faults
//! (exactly once), and the plan must name the task runtime and source adapter each model uses.

#[path = "common/job_shapes.rs"]
mod shapes;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;

use shapes::{Count, MODELS, Shape, every_shape, every_shape_expected, run};

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
fn tasks_count_the_records_they_send_downstream_and_take_in_under_every_model() {
    for model in MODELS {
        let env = StreamEnvironment::new(model);
        let out = CollectHandle::new();
        env.from_sequence("numbers", 0..300)
            .key_by(|n: &u64| n % 7)
            .map_with_parallelism("keep", 3, |n: u64| n)
            .collect_sink("collect", &out);
        let work = tempfile::tempdir().unwrap();
        let result = env
            .build()
            .unwrap()
            .run(&JobConfig::new(work.path()))
            .unwrap();
        assert_eq!(out.committed().len(), 300, "{model}");
        let sum = |vertex: &str, pick: fn(&streamtask_core::metrics::MetricsSummary) -> u64| {
            result
                .tasks
                .iter()
                .filter(|t| t.name.starts_with(&format!("{vertex}#")))
                .map(|t| pick(&t.metrics))
                .sum::<u64>()
        };
        assert_eq!(
            sum("numbers", |m| m.records_out),
            300,
            "{model}: source out"
        );
        assert_eq!(sum("keep", |m| m.records_in), 300, "{model}: keyed in");
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
                .filter("not thirds", |n: &u64| !n.is_multiple_of(3))
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
    assert_eq!(legacy.runtime, "mailbox SourceStreamTask");
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
    assert_eq!(second.runtime, "mailbox OneInputStreamTask");
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
        (Model::Mailbox, "mailbox TwoInputStreamTask"),
        (Model::Bridge, "mailbox TwoInputStreamTask"),
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
                    if n.is_multiple_of(2) {
                        out.push(n);
                    }
                },
            )
            .collect_sink("collect", s.out);
    });
}

// ---- keyed connect with a CoProcessFunction, side outputs, event time after the source,
// ---- timestamps in a map, the end-of-input hook (the job is in `common/job_shapes.rs`) ----

#[test]
fn every_shape_in_one_job_is_exactly_once_under_every_model() {
    exactly_once_everywhere(
        &every_shape_expected(),
        &[
            (FaultKind::Source, 400),
            (FaultKind::Operator, 700),
            (FaultKind::Timer, 30),
        ],
        every_shape,
    );
}

#[test]
fn the_plan_shows_the_watermark_assigner_the_keyed_join_and_the_side_output() {
    for model in MODELS {
        let env = StreamEnvironment::new(model);
        let out = CollectHandle::new();
        every_shape(&Shape {
            env: &env,
            faults: Arc::new(FaultPlan::none()),
            out: &out,
            committed: Arc::new(AtomicU64::new(1)),
        });
        let plan = env.build().unwrap().plan();
        assert_eq!(
            plan.task("count").unwrap().chain,
            ["count", "timestamps/watermarks", "stamp"],
            "{model}"
        );
        let join = plan.task("join").unwrap();
        assert_eq!(join.parallelism, 2);
        assert_eq!(
            join.inputs
                .iter()
                .map(|i| (i.from.as_str(), i.partitioning))
                .collect::<Vec<_>>(),
            [("joined", "hash"), ("spread", "hash")]
        );
        let sevens = plan.task("sevens").unwrap();
        assert_eq!(sevens.inputs[0].from, "join");
        assert_eq!(sevens.inputs[0].partitioning, "side output");
        assert_eq!(sevens.chain, ["seven"]);
    }
}

/// Counts per key; odd values go to the side output `odd` (another type); a processing-time
/// timer an hour ahead per key never fires; the end-of-input hook flushes the counts.
struct Split {
    faults: Arc<FaultPlan>,
}

impl KeyedProcessFunction for Split {
    type Key = u64;
    type In = u64;
    type Out = u64;
    type State = u64;

    fn process_element(
        &mut self,
        n: u64,
        ctx: &mut KeyedContext<'_, '_, u64, u64, u64>,
    ) -> Result<(), OperatorError> {
        self.faults.check(FaultKind::Operator);
        if *ctx.state() == 0 {
            let at = ctx.processing_time() + 3_600_000;
            ctx.register_processing_timer(at);
        }
        *ctx.state() += 1;
        if n % 2 == 1 {
            ctx.output(&OutputTag::<String>::new("odd"), format!("odd {n}"))
        } else {
            ctx.collect(n)
        }
    }

    fn on_timer(
        &mut self,
        _timestamp: i64,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, u64, u64, u64>,
    ) -> Result<(), OperatorError> {
        // Never due: a run that fired it would commit this marker.
        ctx.collect(u64::MAX)
    }

    fn end_input(
        &mut self,
        ctx: &mut EndOfInputContext<'_, '_, u64, u64, u64>,
    ) -> Result<(), OperatorError> {
        assert!(
            ctx.current_watermark().is_max(),
            "the final watermark came first"
        );
        for (_, key) in ctx.pending_processing_timers() {
            ctx.collect(1_000_000 + key)?;
        }
        for (key, count) in ctx.take_states() {
            ctx.output(
                &OutputTag::<String>::new("odd"),
                format!("end {key} {count}"),
            )?;
        }
        Ok(())
    }
}

#[test]
fn side_outputs_and_the_end_of_input_hook_are_exactly_once() {
    // Main: the even values, then a line per key whose processing-time timer is still pending
    // at end of input (every key's: none fired). Side: odd values and the per-key counts from
    // the end-of-input hook, in a task of their own.
    let mut expected: Vec<String> = (0..2_000)
        .filter(|n| n % 2 == 0)
        .map(|n| format!("even {n}"))
        .collect();
    expected.extend(
        (0..2_000)
            .filter(|n| n % 2 == 1)
            .map(|n| format!("odd {n}")),
    );
    expected.extend((0..5).map(|k| format!("end {k} 400")));
    expected.extend((0..5).map(|k| format!("pending {k}")));
    exactly_once_everywhere(
        &expected,
        &[(FaultKind::Operator, 600), (FaultKind::Operator, 1_700)],
        |s| {
            let faults = Arc::clone(&s.faults);
            let main = s
                .env
                .from_sequence("numbers", 0..2_000)
                .key_by(|n: &u64| n % 5)
                .process("split", 2, move |_| Split {
                    faults: Arc::clone(&faults),
                });
            let odd = main
                .side_output(&OutputTag::<String>::new("odd"))
                .map("as is", |line: String| line);
            // The main output stays chained behind the process function.
            let main = main.map("even", |n: u64| match n {
                n if n >= 1_000_000 => format!("pending {}", n - 1_000_000),
                n => format!("even {n}"),
            });
            main.union("both", [odd]).collect_sink("collect", s.out);
        },
    );
}

#[test]
fn side_output_of_a_stream_without_one_is_a_build_error() {
    let env = StreamEnvironment::new(Model::Mailbox);
    let out = CollectHandle::new();
    let side_out = CollectHandle::new();
    let stream = env.from_sequence("numbers", 0..3).map("id", |n: u64| n);
    stream
        .side_output(&OutputTag::<u64>::new("none"))
        .collect_sink("side", &side_out);
    stream.collect_sink("collect", &out);
    let err = env.build().unwrap_err();
    assert!(
        matches!(err, JobError::NoSideOutputs { ref tag, .. } if tag == "none"),
        "{err}"
    );
}

#[test]
fn a_file_sink_formatter_sees_the_record_timestamp_under_every_model() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("out");
        let env = StreamEnvironment::new(model);
        env.from_iter("events", vec![(1u32, 500i64), (2, 480), (3, 900)])
            .assign_timestamps_and_watermarks(
                WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(100))
                    .with_timestamp_assigner(|e: &(u32, i64), _| e.1),
            )
            .two_phase_file_sink_with_context("files", &out_dir, |e: &(u32, i64), ctx| {
                format!("{} at {:?}", e.0, ctx.timestamp())
            });
        env.build()
            .unwrap()
            .run(&JobConfig::new(dir.path().join("state")))
            .unwrap();
        let mut lines = streamtask::sink::read_committed(&out_dir).unwrap();
        lines.sort();
        assert_eq!(
            lines,
            ["1 at Some(500)", "2 at Some(480)", "3 at Some(900)"],
            "{model}"
        );
    }
}
