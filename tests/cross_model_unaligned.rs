//! Unaligned checkpoints, the same under every model: a barrier overtakes the backlog queued in
//! front of a slow task, the records it overtook are stored as channel state, and a restore
//! puts them back in front of the channels so the committed output is exactly once. Each test
//! runs one job per model through the same thin adapter (`run_bounded`, with a hang guard).
//! Nothing is timed: the guards only bound waits.
//!
//! | test | what it shows |
//! |---|---|
//! | `an_unaligned_checkpoint_stores_the_backlog_it_overtook` | under backpressure the checkpoints are taken unaligned with channel state, and the output is exactly once |
//! | `a_restore_replays_the_channel_state_exactly_once` | a run that fails for good right after a checkpoint with channel state was stored resumes from it; every record it held in its channels is committed once |
//! | `an_aligned_timeout_switches_to_unaligned` | aligned checkpoints with a short aligned timeout end up unaligned under backpressure |
//! | `savepoints_stay_aligned` | a stop-with-savepoint of a job with unaligned checkpoints stores no channel state |
//! | `a_record_type_without_an_encoding_is_refused_with_the_fix` | a job whose input type has no encoding refuses to start, naming the type and the fix |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use streamtask::checkpoint::{CheckpointStorage, Savepoint};
use streamtask::prelude::*;
use streamtask::sink::read_committed;
use streamtask::{JobError, JobPhase, JobResult, Restore, StopWithSavepoint};
use streamtask_core::{Alignment, state::TaskSnapshot};
use streamtask_runtime::channel::ChannelState;

#[path = "common/bounded_run.rs"]
mod bounded_run;
const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];
/// Hang guard for a run; never an assertion on time.
const HANG_GUARD: Duration = Duration::from_secs(90);
const END: u64 = 4_000;

/// The suite's adapter with its hang guard (`common/bounded_run.rs`).
fn run_bounded(
    model: Model,
    config: JobConfig,
    build: impl FnOnce(&StreamEnvironment) + Send + 'static,
) -> Result<JobResult, JobError> {
    bounded_run::run_bounded(model, config, HANG_GUARD, build)
}

/// Slower than the source: the channels in front of it stay full. Fails on its next record
/// once `fail` is raised, and says so in `failed`.
#[derive(Clone)]
struct Slow {
    fail: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
}

impl Slow {
    fn new() -> Self {
        Slow {
            fail: Arc::new(AtomicBool::new(false)),
            failed: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Operator for Slow {
    type In = u64;
    type Out = u64;

    fn name(&self) -> &str {
        "slow"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        if self.fail.load(Ordering::Acquire) {
            self.failed.store(true, Ordering::Release);
            return Err(OperatorError::user("slow", "failing on purpose"));
        }
        thread::sleep(Duration::from_micros(40));
        ctx.collect(record)
    }
}

/// numbers -> (rebalance) slow x2 -> exactly-once file sink.
fn slow_job(env: &StreamEnvironment, slow: Slow, out: std::path::PathBuf) {
    env.from_sequence("numbers", 0..END)
        .rebalance("slow", 2)
        .operator(move |_| slow.clone())
        .two_phase_file_sink("sink", out, |n: &u64| n.to_string());
}

fn config(dir: &std::path::Path, alignment: Alignment) -> JobConfig {
    let checkpoints = CheckpointConfig::new(Duration::from_millis(15));
    let checkpoints = match alignment {
        Alignment::Aligned => checkpoints,
        Alignment::Unaligned => checkpoints.with_unaligned(),
        Alignment::AlignedTimeout(t) => checkpoints.with_aligned_timeout(t),
    };
    JobConfig::new(dir)
        .with_checkpoints(Some(checkpoints))
        .with_channel_capacity(32)
}

fn exactly_once(out: &std::path::Path, model: Model) {
    let mut got: Vec<u64> = read_committed(out)
        .unwrap()
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    got.sort_unstable();
    let want: Vec<u64> = (0..END).collect();
    assert_eq!(got.len(), want.len(), "{model:?}: records committed");
    assert_eq!(got, want, "{model:?}: committed output");
}

fn channel_state_of(result: &JobResult) -> (u64, u64) {
    result.tasks.iter().fold((0, 0), |(u, r), t| {
        (
            u + t.metrics.unaligned_checkpoints,
            r + t.metrics.channel_state_records,
        )
    })
}

#[test]
fn an_unaligned_checkpoint_stores_the_backlog_it_overtook() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let result = run_bounded(model, config(dir.path(), Alignment::Unaligned), {
            let out = out.clone();
            move |env| slow_job(env, Slow::new(), out)
        })
        .unwrap();
        let (unaligned, records) = channel_state_of(&result);
        assert!(
            result.checkpoints_completed > 0,
            "{model:?}: no checkpoint completed"
        );
        assert!(unaligned > 0, "{model:?}: no checkpoint was unaligned");
        assert!(
            records > 0,
            "{model:?}: no channel state under backpressure"
        );
        exactly_once(&out, model);
    }
}

#[test]
fn a_restore_replays_the_channel_state_exactly_once() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let slow = Slow::new();
        let storage_dir = dir.path().join("checkpoints");
        // Once a stored checkpoint holds channel state, the slow task fails for good while the
        // coordinator waits: that checkpoint stays the latest.
        let with_state = Arc::new(AtomicU64::new(0));
        let phases = {
            let (slow, storage_dir, with_state) =
                (slow.clone(), storage_dir.clone(), Arc::clone(&with_state));
            Arc::new(move |phase: JobPhase| {
                let JobPhase::CheckpointCommitting { id } = phase else {
                    return;
                };
                if with_state.load(Ordering::Acquire) != 0 {
                    return;
                }
                let path = storage_dir.join(format!("chk-{id:020}"));
                let stored = CheckpointStorage::load_path(&path).unwrap();
                let elements: usize = stored
                    .tasks
                    .values()
                    .filter_map(|s| s.get(TaskSnapshot::CHANNEL_STATE))
                    .map(|bytes| ChannelState::decode(bytes).unwrap().elements())
                    .sum();
                if elements == 0 {
                    return;
                }
                with_state.store(id, Ordering::Release);
                slow.fail.store(true, Ordering::Release);
                let deadline = Instant::now() + Duration::from_secs(20);
                while !slow.failed.load(Ordering::Acquire) && Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(1));
                }
            })
        };
        let first = config(dir.path(), Alignment::Unaligned)
            .with_restart(RestartStrategy::NONE)
            .with_phases(phases);
        let failed = run_bounded(model, first, {
            let (out, slow) = (out.clone(), slow.clone());
            move |env| slow_job(env, slow, out)
        });
        assert!(failed.is_err(), "{model:?}: the first run should fail");
        let id = with_state.load(Ordering::Acquire);
        assert_ne!(id, 0, "{model:?}: no checkpoint held channel state");

        let second = config(dir.path(), Alignment::Unaligned).with_restore(Restore::Latest);
        let result = run_bounded(model, second, {
            let out = out.clone();
            move |env| slow_job(env, Slow::new(), out)
        })
        .unwrap();
        assert_eq!(
            result.restored_from,
            Some(id),
            "{model:?}: resumed the checkpoint with channel state"
        );
        exactly_once(&out, model);
    }
}

#[test]
fn an_aligned_timeout_switches_to_unaligned() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let alignment = Alignment::AlignedTimeout(Duration::from_millis(1));
        let result = run_bounded(model, config(dir.path(), alignment), {
            let out = out.clone();
            move |env| slow_job(env, Slow::new(), out)
        })
        .unwrap();
        let (unaligned, _) = channel_state_of(&result);
        assert!(unaligned > 0, "{model:?}: no checkpoint timed out");
        exactly_once(&out, model);
    }
}

#[test]
fn savepoints_stay_aligned() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let savepoints = dir.path().join("savepoints");
        let stop = StopWithSavepoint::new(&savepoints);
        let handle = stop.handle();
        let config = config(dir.path(), Alignment::Unaligned).with_stop_with_savepoint(stop);
        let slow = Slow::new();
        let result = run_bounded(model, config, {
            let out = out.clone();
            move |env| {
                env.from_sequence("numbers", 0..u64::MAX)
                    .map("ask", move |n: u64| {
                        if n == 2_000 {
                            handle.stop_with_savepoint();
                        }
                        n
                    })
                    .rebalance("slow", 2)
                    .operator(move |_| slow.clone())
                    .two_phase_file_sink("sink", out, |n: &u64| n.to_string());
            }
        })
        .unwrap();
        let path = result.savepoint.expect("stopped with a savepoint");
        let savepoint = Savepoint::load(&path).unwrap();
        assert!(
            savepoint
                .checkpoint
                .tasks
                .values()
                .all(|s| s.get(TaskSnapshot::CHANNEL_STATE).is_none()),
            "{model:?}: a savepoint holds channel state"
        );
    }
}

/// A record type the job API never asked serde of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Opaque(u64);

#[test]
fn a_record_type_without_an_encoding_is_refused_with_the_fix() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let err = run_bounded(
            model,
            config(dir.path(), Alignment::Unaligned),
            move |env| {
                env.from_sequence("numbers", 0..10)
                    .map("wrap", Opaque)
                    .rebalance("unwrap", 1)
                    .map("unwrap", |o: Opaque| o.0)
                    .two_phase_file_sink("sink", out, |n: &u64| n.to_string());
            },
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, JobError::ChannelStateType { .. }),
            "{model:?}: {message}"
        );
        assert!(
            message.contains("Opaque") && message.contains("register_channel_type"),
            "{model:?}: {message}"
        );
    }
}
