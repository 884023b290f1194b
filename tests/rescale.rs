//! Rescaling through savepoints: a job with keyed running totals is stopped with a savepoint,
//! restored with another parallelism (2 -> 3 -> 1), and commits exactly the reference output,
//! every key's total carried across both rescales. Under every model, and across models.
//!
//! The source pauses at a given position and pulls the savepoint handle itself, so the
//! savepoint is taken at exactly that position (no timing decides where the job stops).

#[path = "common/counting.rs"]
mod counting;

use std::path::PathBuf;

use counting::{Numbers, RECORDS, RunningTotal, committed, reference, run};
use streamtask::prelude::*;
use streamtask::{JobError, SavepointHandle};
use streamtask_core::async_io::OutputMode;

/// 2 -> 3 -> 1 through two savepoints, the models of the three runs given.
fn rescale(models: [Model; 3]) {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let first = run(models[0], work, 2, Some(RECORDS / 3), Restore::Fresh).unwrap();
    let first_savepoint: PathBuf = first
        .savepoint
        .expect("the first run stops with a savepoint");
    // Only what the savepoint covers is committed: the first third.
    assert_eq!(committed(work).len() as u64, RECORDS / 3);

    let second = run(
        models[1],
        work,
        3,
        Some(2 * RECORDS / 3),
        Restore::Savepoint(first_savepoint),
    )
    .unwrap();
    let second_savepoint = second
        .savepoint
        .expect("the second run stops with a savepoint");
    assert_eq!(committed(work).len() as u64, 2 * RECORDS / 3);

    let third = run(
        models[2],
        work,
        1,
        None,
        Restore::Savepoint(second_savepoint),
    )
    .unwrap();
    assert!(third.savepoint.is_none(), "the last run runs to its end");
    assert_eq!(committed(work), reference());
}

#[test]
fn smoke() {
    rescale([Model::Mailbox; 3]);
}

#[test]
fn rescale_under_the_legacy_model() {
    rescale([Model::Legacy; 3]);
}

#[test]
fn rescale_under_the_bridge_model() {
    rescale([Model::Bridge; 3]);
}

/// The reader runs natively under the mailbox and bridge models and through a `ReaderSource`
/// under the legacy model; each writes the reader's own bytes, so its state moves between
/// every pair of models as is.
#[test]
fn rescale_across_models() {
    rescale([Model::Mailbox, Model::Bridge, Model::Mailbox]);
}

#[test]
fn rescale_across_models_through_the_legacy_model() {
    rescale([Model::Legacy, Model::Mailbox, Model::Legacy]);
}

#[test]
fn parallelism_above_max_parallelism_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new(Model::Mailbox);
    env.set_max_parallelism(2);
    env.from_iter("numbers", vec![(1u64, 1u64)])
        .key_by(|(k, _): &(u64, u64)| *k)
        .process("totals", 3, |_| RunningTotal)
        .two_phase_file_sink("sink", dir.path().join("out"), |s: &String| s.clone());
    let err = env.build().unwrap_err();
    assert!(matches!(err, JobError::MaxParallelism { .. }), "{err}");
    assert!(err.to_string().contains("max parallelism 2"), "{err}");
}

#[test]
fn changing_max_parallelism_across_a_restore_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let first = run(Model::Mailbox, work, 2, Some(10), Restore::Fresh).unwrap();
    let savepoint = first.savepoint.unwrap();

    let env = StreamEnvironment::new(Model::Mailbox);
    env.set_max_parallelism(64);
    env.add_reader("numbers", |_| Numbers::new(None, SavepointHandle::new()))
        .key_by(|(k, _): &(u64, u64)| *k)
        .process("totals", 2, |_| RunningTotal)
        .two_phase_file_sink("sink", work.join("output"), |s: &String| s.clone());
    let job = env.build().unwrap();
    let err = job
        .run(&JobConfig::new(work).with_restore(Restore::Savepoint(savepoint)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            JobError::MaxParallelismChanged {
                savepoint: 128,
                job: 64,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("set_max_parallelism(128)"),
        "{err}"
    );
}

// ---- a parallel source and async calls in flight at every savepoint --------------------------

mod in_flight {
    use std::collections::{HashMap, VecDeque};
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Duration;

    use streamtask::prelude::*;
    use streamtask::{JobResult, SavepointHandle};
    use streamtask_core::async_io::OutputMode;
    use streamtask_core::sync::Mutex;

    /// Numbers read by the parallel sequence source.
    pub(super) const NUMBERS: u64 = 30_000;
    /// Keys of the running counts.
    const KEYS: u64 = 41;
    /// Calls of every async subtask held in flight: a call completes only once `LAG` later
    /// calls of its subtask were made, so at every barrier each subtask has `LAG` calls in
    /// flight (they are in the savepoint, as list state, and re-submitted after the restore).
    const LAG: usize = 3;
    /// The async operator's capacity: above `LAG`, so the lag alone never fills the queue.
    const CAPACITY: usize = 8;
    /// How long the gate waits for a savepoint before it opens anyway: a hang guard only (a run
    /// whose source ended before its savepoint fails its `expect`, it does not hang).
    const GUARD: Duration = Duration::from_secs(120);

    /// One async subtask's calls in flight: input and result, oldest first.
    type Held = VecDeque<(u64, ResultFuture<u64>)>;

    /// The calls one run holds in flight, by async subtask, and when it asks for the savepoint.
    #[derive(Default)]
    struct Gate {
        open: AtomicBool,
        calls: AtomicU64,
        pull_at: Option<u64>,
        handle: SavepointHandle,
        held: Mutex<HashMap<usize, Held>>,
    }

    impl Gate {
        /// Holds `LAG` calls per subtask until opened; pulls `handle` at the `pull_at`-th call.
        fn holding(pull_at: u64, handle: SavepointHandle) -> Arc<Self> {
            Arc::new(Gate {
                pull_at: Some(pull_at),
                handle,
                ..Gate::default()
            })
        }

        /// Holds nothing.
        fn open() -> Arc<Self> {
            let gate = Gate::default();
            gate.open.store(true, Ordering::Release);
            Arc::new(gate)
        }

        /// Completes every held call (their results come after the savepoint's barrier, or
        /// after the job ended: either way they are not committed) and holds no more.
        fn release(&self) -> usize {
            self.open.store(true, Ordering::Release);
            let held: Vec<_> = self.held.lock().drain().flat_map(|(_, q)| q).collect();
            let n = held.len();
            for (value, result) in held {
                result.complete(vec![value]);
            }
            n
        }
    }

    /// Passes every number through, `LAG` calls late.
    struct Lagging {
        subtask: usize,
        gate: Arc<Gate>,
    }

    impl AsyncFunction for Lagging {
        type In = u64;
        type Out = u64;

        fn invoke(&mut self, input: &u64, result: ResultFuture<u64>) {
            let calls = self.gate.calls.fetch_add(1, Ordering::Relaxed) + 1;
            if self.gate.pull_at == Some(calls) {
                self.gate.handle.stop_with_savepoint();
            }
            if self.gate.handle.is_requested() && !self.gate.open.load(Ordering::Acquire) {
                // Slow the run down between the request and the barrier, so no source can
                // read to its end first (a throttle, not a timing anything is asserted on).
                std::thread::sleep(Duration::from_millis(1));
            }
            let due = {
                let mut held = self.gate.held.lock();
                if self.gate.open.load(Ordering::Acquire) {
                    vec![(*input, result)]
                } else {
                    let mine = held.entry(self.subtask).or_default();
                    mine.push_back((*input, result));
                    let over = mine.len().saturating_sub(LAG);
                    mine.drain(..over).collect()
                }
            };
            for (value, result) in due {
                result.complete(vec![value]);
            }
        }
    }

    /// How many numbers of each key were seen so far: `key,count` per number. The lines do
    /// not depend on the order the numbers arrive in, which a parallel source and an unordered
    /// async operator leave open. With `in_order`, it also fails the job when a number of a key
    /// arrives after a larger one of that key (the state keeps the largest seen, plus one).
    struct RunningCount {
        in_order: bool,
    }

    impl KeyedProcessFunction for RunningCount {
        type Key = u64;
        type In = u64;
        type Out = String;
        type State = (u64, u64);

        fn process_element(
            &mut self,
            value: u64,
            ctx: &mut KeyedContext<'_, '_, u64, (u64, u64), String>,
        ) -> Result<(), OperatorError> {
            let (count, next) = ctx.state();
            if self.in_order && value < *next {
                return Err(OperatorError::user(
                    "counts",
                    format!("key {} got {value} after {}", value % KEYS, *next - 1),
                ));
            }
            *count += 1;
            *next = value + 1;
            let count = *count;
            ctx.collect(format!("{},{count}", value % KEYS))
        }

        fn on_timer(
            &mut self,
            _timestamp: i64,
            _domain: TimeDomain,
            _ctx: &mut KeyedContext<'_, '_, u64, (u64, u64), String>,
        ) -> Result<(), OperatorError> {
            Ok(())
        }
    }

    /// What an uninterrupted run commits, sorted.
    fn reference() -> Vec<String> {
        let mut out: Vec<String> = (0..KEYS)
            .flat_map(|key| {
                let n = (0..NUMBERS).filter(|v| v % KEYS == key).count() as u64;
                (1..=n).map(move |count| format!("{key},{count}"))
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// The committed output, sorted.
    fn committed(work: &Path) -> Vec<String> {
        let mut lines = streamtask::sink::read_committed(work.join("output")).unwrap();
        lines.sort_unstable();
        lines
    }

    /// One run: `numbers` (parallel) -> `lookup` (async, `mode`) -> key_by -> `counts` ->
    /// `sink`; `numbers` and `lookup` at `sources`, `counts` and `sink` at `parallelism`.
    /// Key-ordered: `numbers` -> key_by -> `lookup` (at `parallelism`, keyed as the counts
    /// are) -> key_by -> `counts`, and the counts check that each key's numbers arrive in
    /// order (with one source, input order is ascending per key). With `pull_at`, the run holds calls in flight
    /// and stops with a savepoint once `pull_at` calls were made; the held calls are released
    /// only after the savepoint was written (or after the run, whichever the gate's thread
    /// sees first), so they are in flight at the barrier and the stop does not wait for them.
    fn run(
        model: Model,
        mode: OutputMode,
        work: &Path,
        (sources, parallelism): (usize, usize),
        pull_at: Option<u64>,
        restore: Restore,
    ) -> JobResult {
        let handle = SavepointHandle::new();
        let gate = match pull_at {
            Some(n) => Gate::holding(n, handle.clone()),
            None => Gate::open(),
        };
        let env = StreamEnvironment::new(model);
        let for_calls = Arc::clone(&gate);
        let lagging = move |subtask| Lagging {
            subtask,
            gate: Arc::clone(&for_calls),
        };
        let numbers = env.from_sequence_parallel("numbers", 0..NUMBERS, sources);
        let config = AsyncConfig::new(mode, CAPACITY);
        let in_order = mode == OutputMode::KeyOrdered;
        let looked_up = if in_order {
            numbers
                .key_by(|v: &u64| *v % KEYS)
                .async_wait("lookup", parallelism, config, lagging)
        } else {
            numbers.async_wait("lookup", config, lagging)
        };
        looked_up
            .key_by(|v: &u64| *v % KEYS)
            .process("counts", parallelism, move |_| RunningCount { in_order })
            .two_phase_file_sink("sink", work.join("output"), |s: &String| s.clone());
        let job = env.build().unwrap();
        let config = JobConfig::new(work)
            .with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(20))))
            .with_restore(restore)
            .with_stop_with_savepoint(
                StopWithSavepoint::new(work.join("savepoints")).with_handle(handle.clone()),
            );
        let opener = pull_at.map(|_| {
            let gate = Arc::clone(&gate);
            let handle = handle.clone();
            std::thread::spawn(move || {
                // Released only once the savepoint is durable: these calls were in flight
                // at its barrier.
                let written = handle.wait_written(GUARD);
                gate.release();
                written
            })
        });
        let result = job.run(&config).unwrap();
        if let Some(opener) = opener {
            let written = opener.join().unwrap();
            assert_eq!(
                result.savepoint, written,
                "the hook saw the savepoint the run reports"
            );
        }
        // What was still held when the run returned is released now: completions after the
        // job ended go nowhere.
        gate.release();
        result
    }

    /// 2 -> 3 -> 1 through two savepoints, each taken with async calls in flight: every vertex
    /// when `sources_rescale`, else only the keyed counts (and the sources stay at 2).
    pub(super) fn rescale(models: [Model; 3], mode: OutputMode, sources_rescale: bool) {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path();
        // Key-ordered: one source, so each key's input order is ascending (the counts check it).
        let sources = |p: usize| match mode {
            OutputMode::KeyOrdered => 1,
            _ if sources_rescale => p,
            _ => 2,
        };
        let at = |p: usize| (sources(p), p);
        let first = run(models[0], mode, work, at(2), Some(2_000), Restore::Fresh);
        let first_savepoint: PathBuf = first.savepoint.expect("the first run stops");
        let after_first = committed(work).len();
        assert!(after_first < NUMBERS as usize, "stopped before the end");

        let second = run(
            models[1],
            mode,
            work,
            at(3),
            Some(2_000),
            Restore::Savepoint(first_savepoint),
        );
        let second_savepoint = second.savepoint.expect("the second run stops");
        assert!(committed(work).len() >= after_first);

        let third = run(
            models[2],
            mode,
            work,
            at(1),
            None,
            Restore::Savepoint(second_savepoint),
        );
        assert!(third.savepoint.is_none(), "the last run runs to its end");
        assert_eq!(committed(work), reference());
    }
}

#[test]
fn rescale_with_ordered_async_calls_in_flight_under_the_mailbox_model() {
    in_flight::rescale([Model::Mailbox; 3], OutputMode::Ordered, true);
}

#[test]
fn rescale_with_unordered_async_calls_in_flight_under_the_mailbox_model() {
    in_flight::rescale([Model::Mailbox; 3], OutputMode::Unordered, true);
}

/// Key-ordered async I/O: the in-flight records are keyed state, so each lands (in its key's
/// order) on the subtask that owns its key at 2, then 3, then 1 subtasks; every key's numbers
/// reach the counts in order across both savepoints.
#[test]
fn rescale_with_key_ordered_async_calls_in_flight_under_the_mailbox_model() {
    in_flight::rescale([Model::Mailbox; 3], OutputMode::KeyOrdered, false);
}

#[test]
fn rescale_with_key_ordered_async_calls_in_flight_under_the_legacy_model() {
    in_flight::rescale([Model::Legacy; 3], OutputMode::KeyOrdered, false);
}

#[test]
fn rescale_with_key_ordered_async_calls_in_flight_under_the_bridge_model() {
    in_flight::rescale([Model::Bridge; 3], OutputMode::KeyOrdered, false);
}

#[test]
fn rescale_with_key_ordered_async_calls_in_flight_from_legacy_to_mailbox_to_bridge() {
    in_flight::rescale(
        [Model::Legacy, Model::Mailbox, Model::Bridge],
        OutputMode::KeyOrdered,
        false,
    );
}

#[test]
fn rescale_with_ordered_async_calls_in_flight_under_the_bridge_model() {
    in_flight::rescale([Model::Bridge; 3], OutputMode::Ordered, true);
}

#[test]
fn rescale_with_unordered_async_calls_in_flight_under_the_bridge_model() {
    in_flight::rescale([Model::Bridge; 3], OutputMode::Unordered, true);
}

#[test]
fn rescale_with_async_calls_in_flight_across_models() {
    in_flight::rescale(
        [Model::Mailbox, Model::Bridge, Model::Mailbox],
        OutputMode::Unordered,
        true,
    );
}

/// Under the legacy model the job API runs the sequence reader through a `ReaderSource`, which
/// writes the reader's own bytes (its list state of ranges), so the sources and the async calls
/// in flight rescale there too, as under the mailbox model.
#[test]
fn rescale_with_ordered_async_calls_in_flight_under_the_legacy_model() {
    in_flight::rescale([Model::Legacy; 3], OutputMode::Ordered, true);
}

#[test]
fn rescale_with_unordered_async_calls_in_flight_under_the_legacy_model() {
    in_flight::rescale([Model::Legacy; 3], OutputMode::Unordered, true);
}

#[test]
fn rescale_with_async_calls_in_flight_from_legacy_to_mailbox_to_bridge() {
    in_flight::rescale(
        [Model::Legacy, Model::Mailbox, Model::Bridge],
        OutputMode::Ordered,
        true,
    );
}
