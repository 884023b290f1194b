//! The same source under two models: a job whose source is a user `SourceReader`
//! runs it natively under the mailbox and bridge models and through a `ReaderSource` under the
//! legacy model; a job whose source is a user `SourceFunction` runs it natively under the
//! legacy and bridge models and through a `HandoffReader` under the mailbox model. The adapters
//! write exactly the bytes the native task of the other model writes (and the handoff's
//! elements in flight beside them), so a checkpoint or savepoint taken under any model
//! restores under any other, exactly once.
//!
//! Every job: the source (records `(n % KEYS, n)` with timestamp `n`, a watermark every
//! `WM_EVERY` records) -> `key_by` -> running totals with an event-time timer per record (so a
//! lost, late or doubled watermark changes the totals the timers print) -> the two-phase file
//! sink. The reference is computed, and an uninterrupted run of each model commits it.
//!
//! | test | first run | second run |
//! |---|---|---|
//! | checkpoints | fails for good after a checkpoint committed past the middle | `Restore::Latest` under another model |
//! | savepoints | stops with a savepoint in the middle | `Restore::Savepoint` under another model |

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use streamtask::checkpoint::Savepoint;
use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;
use streamtask::sink::read_committed;
use streamtask::{JobError, JobPhase, JobResult, Restore, SavepointHandle};
use streamtask_bridge::{HandoffReader, InFlightReplay};
use streamtask_core::operator::{Emitted, Map, Output, TaskOutput};
use streamtask_core::state::{decode, encode};
use streamtask_core::task::TaskConfig;
use streamtask_core::{CheckpointBarrier, StreamStatus, state::TaskSnapshot};
use streamtask_legacy::SourceStreamTask;

const END: u64 = 2_000;
const HALF: u64 = END / 2;
/// Where a run that crashes fails for good (after a checkpoint committed past `HALF`).
const FAIL_AT: u64 = 1_600;
const KEYS: u64 = 7;
const WM_EVERY: u64 = 50;
/// A record's timer fires this far after its timestamp (in event time).
const TIMER_AFTER: i64 = 25;
/// Hang guard for the wait for a committed checkpoint; never an assertion on time.
const HANG_GUARD: Duration = Duration::from_secs(30);
const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

/// The function's checkpointed state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    next: u64,
}

/// How the first run stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Runs to the end.
    Never,
    /// Asks for a savepoint at `HALF` and waits there until the job stops around it.
    Savepoint,
    /// Waits at `HALF` for a checkpoint triggered from there to commit, then fails for good
    /// at `FAIL_AT`.
    Crash,
}

/// What the source shares with the job's callbacks.
#[derive(Clone)]
struct Probe {
    stop: Stop,
    faults: Arc<FaultPlan>,
    committed: Arc<AtomicU64>,
    waker: Arc<Mutex<Option<Waker>>>,
    savepoint: SavepointHandle,
    started_at: Arc<AtomicU64>,
    /// Set: the keyed operator takes no record until a checkpoint was triggered after the
    /// savepoint was asked for (the savepoint), so the source's records back up in front of it.
    hold: Option<Arc<AtomicBool>>,
    /// The keyed operator's parallelism.
    totals: usize,
}

impl Probe {
    fn new(stop: Stop) -> Self {
        let faults = match stop {
            Stop::Crash => FaultPlan::at(&[(FaultKind::Source, FAIL_AT)]),
            Stop::Never | Stop::Savepoint => FaultPlan::none(),
        };
        Probe {
            stop,
            faults: Arc::new(faults),
            committed: Arc::new(AtomicU64::new(0)),
            waker: Arc::new(Mutex::new(None)),
            savepoint: SavepointHandle::new(),
            started_at: Arc::new(AtomicU64::new(u64::MAX)),
            hold: None,
            totals: 2,
        }
    }

    /// The keyed operator runs with `parallelism` subtasks.
    fn with_totals(mut self, parallelism: usize) -> Self {
        self.totals = parallelism;
        self
    }

    /// The keyed operator holds every record until the savepoint was triggered.
    fn holding_until_the_savepoint(mut self) -> Self {
        self.hold = Some(Arc::new(AtomicBool::new(false)));
        self
    }

    /// A checkpoint was triggered (the job's phase callback): in a held run that is the
    /// savepoint's trigger (see `run`), and the keyed operator goes on.
    fn on_trigger(&self) {
        if let Some(hold) = &self.hold
            && self.savepoint.is_requested()
        {
            hold.store(true, Ordering::Release);
        }
    }

    /// A checkpoint committed (the job's phase callback).
    fn on_commit(&self) {
        self.committed.fetch_add(1, Ordering::AcqRel);
        if let Some(waker) = self.waker.lock().unwrap().take() {
            waker.wake();
        }
    }

    /// The commit count a crashing run waits for at `HALF`: one checkpoint runs at a time, so
    /// the second commit from now was triggered now or later.
    fn target(&self) -> u64 {
        self.committed.load(Ordering::Acquire) + 2
    }

    fn reached(&self, target: u64) -> bool {
        self.committed.load(Ordering::Acquire) >= target
    }
}

/// The element at position `n`: the record, and the watermark that follows it, if any.
fn element(n: u64) -> ((u64, u64), i64, Option<i64>) {
    let wm = (n + 1).is_multiple_of(WM_EVERY).then_some(n as i64);
    ((n % KEYS, n), n as i64, wm)
}

/// The user's new-style source.
struct Ticks {
    next: u64,
    probe: Probe,
    /// Past the pause at `HALF`.
    passed: bool,
    /// The commit count a crashing run waits for.
    target: Option<u64>,
}

impl SourceReader<(u64, u64)> for Ticks {
    fn name(&self) -> &str {
        "ticks"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = decode(bytes).map_err(|e| OperatorError::state("ticks", e))?;
        }
        self.probe.started_at.store(self.next, Ordering::Release);
        Ok(())
    }

    fn poll_next(
        &mut self,
        out: &mut ReaderOutput<'_, (u64, u64)>,
    ) -> Result<InputStatus, OperatorError> {
        if self.next == END {
            return Ok(InputStatus::EndOfInput);
        }
        if self.next == HALF && !self.passed {
            match self.probe.stop {
                Stop::Never => self.passed = true,
                Stop::Savepoint => {
                    self.probe.savepoint.stop_with_savepoint();
                    return Ok(InputStatus::NothingAvailable);
                }
                Stop::Crash => {
                    let target = *self.target.get_or_insert_with(|| self.probe.target());
                    if !self.probe.reached(target) {
                        return Ok(InputStatus::NothingAvailable);
                    }
                    self.passed = true;
                }
            }
        }
        self.probe.faults.check(FaultKind::Source);
        let (value, ts, wm) = element(self.next);
        out.collect_with_timestamp(value, ts)?;
        if let Some(wm) = wm {
            out.emit_watermark(Watermark(wm))?;
        }
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        let waiting = self.next == HALF && !self.passed;
        match (waiting, self.probe.stop, self.target) {
            // Never woken: the job stops around the savepoint.
            (true, Stop::Savepoint, _) => {}
            (true, Stop::Crash, Some(target)) => {
                // Register, then look again: a commit in between wakes at once.
                *self.probe.waker.lock().unwrap() = Some(waker.clone());
                if self.probe.reached(target) {
                    waker.wake_by_ref();
                }
            }
            _ => waker.wake_by_ref(),
        }
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.next).map_err(|e| OperatorError::state("ticks", e))
    }
}

/// The user's legacy source: the same elements, state and emit in one locked section.
struct TickFunction {
    probe: Probe,
}

impl SourceFunction for TickFunction {
    type Out = (u64, u64);
    type State = Position;

    fn name(&self) -> &str {
        "ticks"
    }

    fn run(
        &mut self,
        ctx: &mut SourceContext<'_, (u64, u64), Position>,
    ) -> Result<(), OperatorError> {
        let start = ctx.lock().state().next;
        self.probe.started_at.store(start, Ordering::Release);
        let mut passed = self.probe.stop == Stop::Never;
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = locked.state().next;
            if n == END {
                return Ok(());
            }
            if n == HALF && !passed {
                drop(locked);
                self.pause(ctx);
                passed = true;
                continue;
            }
            self.probe.faults.check(FaultKind::Source);
            let (value, ts, wm) = element(n);
            locked.collect_with_timestamp(value, ts)?;
            if let Some(wm) = wm {
                locked.emit_watermark(Watermark(wm))?;
            }
            locked.state_mut().next = n + 1;
        }
        Ok(())
    }
}

impl TickFunction {
    /// At `HALF`, outside the lock: ask for the savepoint and wait to be stopped, or wait for
    /// a checkpoint triggered from here to commit.
    fn pause(&self, ctx: &SourceContext<'_, (u64, u64), Position>) {
        let deadline = Instant::now() + HANG_GUARD;
        let target = self.probe.target();
        if self.probe.stop == Stop::Savepoint {
            self.probe.savepoint.stop_with_savepoint();
        }
        loop {
            let done = match self.probe.stop {
                Stop::Savepoint => ctx.is_cancelled(),
                _ => self.probe.reached(target) || ctx.is_cancelled(),
            };
            if done {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "hang guard: the source waited too long"
            );
            let _ = ctx.sleep(Duration::from_millis(1));
        }
    }
}

/// Running totals per key, printing each record with its timestamp, and each record's
/// event-time timer with the key's total when the watermark passed it. Held, it takes its
/// first record only once the flag is set.
struct Totals {
    hold: Option<Arc<AtomicBool>>,
}

impl Totals {
    fn wait_for_release(&mut self) {
        let Some(hold) = self.hold.take() else {
            return;
        };
        let deadline = Instant::now() + HANG_GUARD;
        while !hold.load(Ordering::Acquire) {
            assert!(
                Instant::now() < deadline,
                "hang guard: the savepoint was never triggered"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl KeyedProcessFunction for Totals {
    type Key = u64;
    type In = (u64, u64);
    type Out = String;
    type State = u64;

    fn process_element(
        &mut self,
        (key, n): (u64, u64),
        ctx: &mut KeyedContext<'_, '_, u64, u64, String>,
    ) -> Result<(), OperatorError> {
        self.wait_for_release();
        *ctx.state() += n;
        let total = *ctx.state();
        let ts = ctx
            .timestamp()
            .expect("the source's timestamps reach the keyed stage");
        ctx.register_event_timer(ts + TIMER_AFTER);
        ctx.collect(format!("record,{key},{n},{ts},{total}"))
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        _domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, u64, u64, String>,
    ) -> Result<(), OperatorError> {
        let key = *ctx.key();
        let total = *ctx.state();
        ctx.collect(format!("timer,{key},{timestamp},{total}"))
    }
}

/// What an uninterrupted run commits, sorted: every record as it is processed, every timer at
/// the first watermark at or past it (the end of input's for the last ones).
fn reference() -> Vec<String> {
    let mut totals = [0u64; KEYS as usize];
    let mut timers: Vec<(i64, u64)> = Vec::new();
    let mut out = Vec::new();
    let fire = |wm: i64, timers: &mut Vec<(i64, u64)>, totals: &[u64], out: &mut Vec<_>| {
        timers.retain(|&(t, key)| {
            if t <= wm {
                out.push(format!("timer,{key},{t},{}", totals[key as usize]));
                false
            } else {
                true
            }
        });
    };
    for n in 0..END {
        let ((key, value), ts, wm) = element(n);
        totals[key as usize] += value;
        out.push(format!(
            "record,{key},{value},{ts},{}",
            totals[key as usize]
        ));
        timers.push((ts + TIMER_AFTER, key));
        if let Some(wm) = wm {
            fire(wm, &mut timers, &totals, &mut out);
        }
    }
    fire(i64::MAX, &mut timers, &totals, &mut out);
    out.sort_unstable();
    out
}

fn committed(dir: &Path) -> Vec<String> {
    let mut lines = read_committed(dir.join("out")).unwrap();
    lines.sort_unstable();
    lines
}

/// Which user source the job is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Reader,
    Function,
    /// The function in a `HandoffReader` the user builds, added with `add_reader`.
    HandoffReader,
}

/// Builds and runs the job under `model` in `dir`.
fn run(
    dir: &Path,
    source: Source,
    model: Model,
    probe: &Probe,
    restore: Restore,
) -> Result<JobResult, JobError> {
    let env = StreamEnvironment::new(model);
    let p = probe.clone();
    let stream = match source {
        Source::Reader => env.add_reader("ticks", move |_| Ticks {
            next: 0,
            probe: p.clone(),
            passed: false,
            target: None,
        }),
        Source::Function => env.add_source("ticks", move |_| TickFunction { probe: p.clone() }),
        Source::HandoffReader => env.add_reader("ticks", move |_| {
            // Room for every record up to the pause: the function never waits for the chain.
            HandoffReader::new(TickFunction { probe: p.clone() }).with_capacity(2 * HALF as usize)
        }),
    };
    let hold = probe.hold.clone();
    stream
        .key_by(|(k, _): &(u64, u64)| *k)
        .process("totals", probe.totals, move |_| Totals {
            hold: hold.clone(),
        })
        .two_phase_file_sink("out", dir.join("out"), |s: &String| s.clone());
    let on_commit = probe.clone();
    // A held run triggers no periodic checkpoint (the first is due after the interval): its
    // only trigger is the savepoint's, which releases the keyed operator.
    let interval = match probe.hold {
        Some(_) => Duration::from_secs(600),
        None => Duration::from_millis(5),
    };
    let config = JobConfig::new(dir)
        .with_phases(Arc::new(move |phase| match phase {
            JobPhase::CheckpointCommitting { .. } => on_commit.on_commit(),
            JobPhase::CheckpointTriggered { .. } => on_commit.on_trigger(),
            _ => {}
        }))
        .with_checkpoints(Some(
            CheckpointConfig::new(interval)
                .with_timeout(interval.max(Duration::from_secs(2)))
                // An expiry under load is no failure of what this tests.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::NONE)
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair)
        .with_restore(restore)
        .with_stop_with_savepoint(
            StopWithSavepoint::new(dir.join("savepoints")).with_handle(probe.savepoint.clone()),
        );
    env.build().unwrap().run(&config)
}

/// A savepoint of `source` taken under `model` at `HALF`, in `dir`.
fn savepoint_under(dir: &Path, source: Source, model: Model) -> PathBuf {
    let first = Probe::new(Stop::Savepoint);
    let result = run(dir, source, model, &first, Restore::Fresh)
        .unwrap_or_else(|e| panic!("{source:?} under {model:?}: {e}"));
    result
        .savepoint
        .unwrap_or_else(|| panic!("{source:?} under {model:?}: stopped with a savepoint"))
}

/// The bytes a savepoint holds for the source's task.
fn source_entry(path: &Path, key: &str) -> Option<Vec<u8>> {
    let savepoint = Savepoint::load(path).unwrap();
    savepoint
        .checkpoint
        .task("ticks#0")
        .and_then(|t| t.get(key))
        .map(<[u8]>::to_vec)
}

#[test]
fn smoke() {
    for source in [Source::Reader, Source::Function] {
        for model in MODELS {
            let dir = tempfile::tempdir().unwrap();
            run(
                dir.path(),
                source,
                model,
                &Probe::new(Stop::Never),
                Restore::Fresh,
            )
            .unwrap_or_else(|e| panic!("{source:?} under {model:?}: {e}"));
            assert_eq!(
                committed(dir.path()),
                reference(),
                "{source:?} under {model:?}"
            );
        }
    }
}

/// Today's failure, pinned: a reader's savepoint under the legacy model held the
/// `ReaderSource`'s own envelope (a JSON array of the reader's bytes), and a function's under
/// the mailbox model the `HandoffReader`'s (`{"state", "pending", "finished"}`), so the other
/// model's native task could not decode them. Now `source` holds the source's own bytes under
/// every model.
#[test]
fn the_source_entry_is_the_sources_own_bytes_under_every_model() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let path = savepoint_under(dir.path(), Source::Reader, model);
        let bytes = source_entry(&path, TaskSnapshot::SOURCE).expect("a source entry");
        assert_eq!(
            decode::<u64>(&bytes).unwrap_or_else(|e| panic!("reader under {model:?}: {e}")),
            HALF,
            "reader under {model:?}"
        );
        assert_eq!(source_entry(&path, TaskSnapshot::SOURCE_IN_FLIGHT), None);

        let dir = tempfile::tempdir().unwrap();
        let path = savepoint_under(dir.path(), Source::Function, model);
        let bytes = source_entry(&path, TaskSnapshot::SOURCE).expect("a source entry");
        let position: Position =
            decode(&bytes).unwrap_or_else(|e| panic!("function under {model:?}: {e} in {bytes:?}"));
        assert_eq!(position.next, HALF, "function under {model:?}");
    }
}

#[test]
fn a_checkpoint_of_either_source_restores_under_every_other_model_exactly_once() {
    for source in [Source::Reader, Source::Function] {
        for from in MODELS {
            for to in MODELS {
                if from == to {
                    continue;
                }
                let dir = tempfile::tempdir().unwrap();
                let first = Probe::new(Stop::Crash);
                let err = run(dir.path(), source, from, &first, Restore::Fresh).unwrap_err();
                assert!(
                    matches!(&err, JobError::Failed { last, .. } if last.to_string().contains("injected fault")),
                    "{source:?} {from:?}: {err}"
                );
                let second = Probe::new(Stop::Never);
                run(dir.path(), source, to, &second, Restore::Latest)
                    .unwrap_or_else(|e| panic!("{source:?} {from:?} -> {to:?}: {e}"));
                let started_at = second.started_at.load(Ordering::Acquire);
                assert!(
                    (HALF..END).contains(&started_at),
                    "{source:?} {from:?} -> {to:?}: resumed from the checkpoint (at {started_at})"
                );
                assert_eq!(
                    committed(dir.path()),
                    reference(),
                    "{source:?} {from:?} -> {to:?}: not exactly once"
                );
            }
        }
    }
}

#[test]
fn a_savepoint_of_either_source_restores_under_every_other_model_exactly_once() {
    for source in [Source::Reader, Source::Function] {
        for from in MODELS {
            for to in MODELS {
                if from == to {
                    continue;
                }
                let dir = tempfile::tempdir().unwrap();
                let path = savepoint_under(dir.path(), source, from);
                let second = Probe::new(Stop::Never);
                let result = run(dir.path(), source, to, &second, Restore::Savepoint(path))
                    .unwrap_or_else(|e| panic!("{source:?} {from:?} -> {to:?}: {e}"));
                assert!(result.savepoint.is_none(), "the second run ran to its end");
                assert_eq!(
                    second.started_at.load(Ordering::Acquire),
                    HALF,
                    "{source:?} {from:?} -> {to:?}: resumed at the savepoint"
                );
                assert_eq!(
                    committed(dir.path()),
                    reference(),
                    "{source:?} {from:?} -> {to:?}: not exactly once"
                );
            }
        }
    }
}

/// A `HandoffReader` the user builds and adds with `add_reader` keeps the records still in
/// its handoff at a stop-with-savepoint, as the one `add_source` builds does: the savepoint
/// holds them beside the function's position and the restored job replays them, exactly once.
/// The keyed operator takes no record until the savepoint was triggered, so hundreds of
/// records are in the handoff at its barrier; restored under the other model, the keyed
/// operator is rescaled 2 -> 4. (The job's savepoint shape declared the entry only for
/// `add_source`, so a restore dropped it without a word.)
#[test]
fn a_handoff_reader_added_as_a_reader_replays_its_records_in_flight_from_a_savepoint() {
    for from in [Model::Mailbox, Model::Bridge] {
        for to in [Model::Mailbox, Model::Bridge] {
            let dir = tempfile::tempdir().unwrap();
            let first = Probe::new(Stop::Savepoint).holding_until_the_savepoint();
            let path = run(
                dir.path(),
                Source::HandoffReader,
                from,
                &first,
                Restore::Fresh,
            )
            .unwrap_or_else(|e| panic!("{from:?}: {e}"))
            .savepoint
            .unwrap_or_else(|| panic!("{from:?}: stopped with a savepoint"));
            assert!(
                source_entry(&path, TaskSnapshot::SOURCE_IN_FLIGHT).is_some(),
                "{from:?}: records in flight at the savepoint's barrier"
            );
            // Rescaled where the models differ: the records in flight belong to the source, and
            // reach the keyed subtasks that own their keys now.
            let second = Probe::new(Stop::Never).with_totals(if from == to { 2 } else { 4 });
            run(
                dir.path(),
                Source::HandoffReader,
                to,
                &second,
                Restore::Savepoint(path),
            )
            .unwrap_or_else(|e| panic!("{from:?} -> {to:?}: {e}"));
            assert_eq!(
                second.started_at.load(Ordering::Acquire),
                HALF,
                "{from:?} -> {to:?}: the function resumed at its position"
            );
            let (committed, reference) = (committed(dir.path()), reference());
            let missing: Vec<&String> = reference
                .iter()
                .filter(|l| !committed.contains(l))
                .collect();
            assert_eq!(
                (missing.len(), committed.len()),
                (0, reference.len()),
                "{from:?} -> {to:?}: the records in flight are replayed, exactly once; missing \
                 (first 5): {:?}",
                &missing[..missing.len().min(5)]
            );
        }
    }
}

/// A savepoint whose shape names no operator for a reader's elements in flight (as savepoints
/// of jobs built with `add_reader` were written) still has them restored with the source:
/// they belong to the source's id.
#[test]
fn a_savepoint_whose_shape_leaves_out_the_records_in_flight_still_replays_them() {
    let dir = tempfile::tempdir().unwrap();
    let first = Probe::new(Stop::Savepoint).holding_until_the_savepoint();
    let path = run(
        dir.path(),
        Source::HandoffReader,
        Model::Mailbox,
        &first,
        Restore::Fresh,
    )
    .unwrap()
    .savepoint
    .expect("stopped with a savepoint");
    assert!(source_entry(&path, TaskSnapshot::SOURCE_IN_FLIGHT).is_some());
    // The same savepoint, written again without the entry in its shape.
    let savepoint = Savepoint::load(&path).unwrap();
    let mut vertices = savepoint.metadata.vertices.clone();
    for v in &mut vertices {
        v.states.retain(|s| s.key != TaskSnapshot::SOURCE_IN_FLIGHT);
    }
    let older = Savepoint::write(
        &dir.path().join("older"),
        &savepoint.checkpoint,
        &savepoint.metadata.model,
        savepoint.metadata.max_parallelism,
        vertices,
    )
    .unwrap();
    let second = Probe::new(Stop::Never);
    run(
        dir.path(),
        Source::HandoffReader,
        Model::Mailbox,
        &second,
        Restore::Savepoint(older),
    )
    .unwrap();
    let (committed, reference) = (committed(dir.path()), reference());
    assert_eq!(
        committed.len(),
        reference.len(),
        "every record once, the ones in flight included"
    );
    assert_eq!(committed, reference);
}

/// A legacy counter that emits `0..end` with timestamps, as fast as the handoff takes them.
struct Burst {
    end: u64,
}

impl SourceFunction for Burst {
    type Out = u64;
    type State = u64;

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == self.end {
                return Ok(());
            }
            locked.collect_with_timestamp(n, n as i64)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// A shared collecting output for a hand-driven task.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<Vec<Emitted<u64>>>>);

impl Output<u64> for Collected {
    fn collect(&mut self, record: StreamRecord<u64>) -> Result<(), OperatorError> {
        self.0.lock().unwrap().push(Emitted::Record(record));
        Ok(())
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.0.lock().unwrap().push(Emitted::Watermark(watermark));
        Ok(())
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        self.0.lock().unwrap().push(Emitted::Status(status));
        Ok(())
    }
}

impl TaskOutput<u64> for Collected {
    fn broadcast_barrier(&mut self, _barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// The elements in flight of a mailbox checkpoint are replayed by the legacy task, exactly
/// once: the handoff held records the function's state already counted, the `source` entry is
/// the function's state alone, and the legacy task (through `InFlightReplay`, as the job API
/// runs it) emits the records in flight and then continues from the state.
#[test]
fn elements_in_flight_in_a_mailbox_checkpoint_are_replayed_by_the_legacy_task() {
    const CAPACITY: usize = 8;
    let mut reader = HandoffReader::new(Burst { end: 100 }).with_capacity(CAPACITY);
    reader.restore_task_state(None).unwrap();
    let mut emitted = Vec::new();
    // The first poll starts the function; poll until it filled the handoff behind a batch.
    let seen_full = AtomicBool::new(false);
    while !seen_full.load(Ordering::Relaxed) {
        let mut out = ReaderOutput::new(&mut emitted);
        reader.poll_next(&mut out).unwrap();
        if reader.pending() >= CAPACITY {
            seen_full.store(true, Ordering::Relaxed);
        }
        assert!(
            emitted.len() < 100,
            "the handoff never held {CAPACITY} elements"
        );
    }
    let mut snapshot = TaskSnapshot::new();
    reader.snapshot_task_state(1, &mut snapshot).unwrap();
    reader.close().unwrap();
    let done = emitted.len() as u64;
    let state: u64 = snapshot.get_value(TaskSnapshot::SOURCE).unwrap().unwrap();
    assert!(
        state > done,
        "the function ran ahead of the chain: state {state}, emitted {done}"
    );
    assert!(snapshot.get(TaskSnapshot::SOURCE_IN_FLIGHT).is_some());

    // The legacy task refuses the snapshot as it is (the elements would be lost) ...
    let refused = Collected::default();
    let handle = SourceStreamTask::new(
        TaskConfig::new("burst").with_restore(Some(snapshot.clone())),
        Burst { end: 100 },
        Map::new("id", |n: u64| n),
        refused.clone(),
    )
    .spawn();
    let outcome = handle.join();
    assert!(!outcome.is_finished(), "refused: {outcome:?}");
    assert!(
        format!("{outcome:?}").contains("InFlightReplay"),
        "{outcome:?}"
    );

    // ... and replays them through `InFlightReplay`, then continues from the state.
    let in_flight = snapshot.remove(TaskSnapshot::SOURCE_IN_FLIGHT);
    let out = Collected::default();
    let handle = SourceStreamTask::new(
        TaskConfig::new("burst").with_restore(Some(snapshot)),
        InFlightReplay::new(Burst { end: 100 }, in_flight),
        Map::new("id", |n: u64| n),
        out.clone(),
    )
    .with_context(SourceContextConfig::event_time())
    .spawn();
    assert!(handle.join().is_finished());
    let replayed: Vec<(u64, Option<i64>)> = out
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some((r.value, r.timestamp)),
            _ => None,
        })
        .collect();
    let expected: Vec<(u64, Option<i64>)> = (done..100).map(|n| (n, Some(n as i64))).collect();
    assert_eq!(
        replayed, expected,
        "every record after the barrier, once, in order"
    );
}
