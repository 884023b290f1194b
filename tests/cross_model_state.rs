//! State that crosses models with a ported source: a job whose legacy
//! `SourceFunction` was checkpointed under one model resumes under another with the port (a
//! `SourceReader` declaring `LegacyStateCompat`, run in a `PortedReader`), and back, exactly
//! once end to end, for every pair of deployments:
//!
//! | deployment | model | source |
//! |---|---|---|
//! | legacy source | legacy | `Count` in a legacy `SourceStreamTask` |
//! | legacy source | bridge | `Count` in a bridge `LegacySourceStreamTask` |
//! | port | mailbox | `PortedReader<CountReader>` in a mailbox `SourceStreamTask` |
//! | port | bridge | `PortedReader<CountReader>` in a mailbox `SourceStreamTask` |
//! | port | legacy | `PortedReader<CountReader>` through a `ReaderSource` in a legacy `SourceStreamTask` (which writes the reader's bytes verbatim) |
//!
//! The first run fails for good after a checkpoint committed (no restarts left: an unfinished
//! run, as a crash leaves one); the second, under the other deployment, resumes it with
//! `Restore::Latest` in the same directory. Both write through one exactly-once file sink, so
//! the committed output must equal the reference exactly. Bytes that are not the declared
//! legacy state are refused with a typed error naming the fix, never a silent fresh start.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use streamtask::fault::{FaultKind, FaultPlan};
use streamtask::prelude::*;
use streamtask::sink::read_committed;
use streamtask::{JobError, JobPhase, Restore};
use streamtask_bridge::{LegacyStateCompat, PortedReader};

const END: u64 = 3_000;
/// Where the first run fails for good (after it waited for a committed checkpoint).
const FAIL_AT: u64 = 2_200;
/// Hang guard for the wait for a committed checkpoint; never an assertion on time.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// The legacy source's checkpointed state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    next: u64,
}

/// What both sides share: the fault plan, the committed-checkpoint count, and where the source
/// started (0 on a fresh start).
#[derive(Clone)]
struct Probe {
    faults: Arc<FaultPlan>,
    committed: Arc<AtomicU64>,
    started_at: Arc<AtomicU64>,
    /// A port waiting for a commit.
    waker: Arc<Mutex<Option<Waker>>>,
}

impl Probe {
    fn new(faults: FaultPlan) -> Self {
        Probe {
            faults: Arc::new(faults),
            committed: Arc::new(AtomicU64::new(0)),
            started_at: Arc::new(AtomicU64::new(u64::MAX)),
            waker: Arc::new(Mutex::new(None)),
        }
    }

    /// A checkpoint committed (the job's phase callback).
    fn on_commit(&self) {
        self.committed.fetch_add(1, Ordering::AcqRel);
        if let Some(waker) = self.waker.lock().unwrap().take() {
            waker.wake();
        }
    }

    /// Before record `END / 2` of a run that will fail, outside the lock: wait (bounded) until
    /// a checkpoint triggered after this point committed, so the failure leaves a checkpoint
    /// past the start to resume. One checkpoint runs at a time (the default), so the second
    /// commit from here was triggered here or later.
    fn wait_for_a_checkpoint(&self, cancelled: impl Fn() -> bool) {
        if !self.faults.is_active() {
            return;
        }
        let target = self.committed.load(Ordering::Acquire) + 2;
        let deadline = Instant::now() + HANG_GUARD;
        while self.committed.load(Ordering::Acquire) < target && !cancelled() {
            assert!(
                Instant::now() < deadline,
                "hang guard: no checkpoint committed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// BEFORE: the legacy source. `0..END`, state and emit in one locked section.
struct Count {
    probe: Probe,
}

impl SourceFunction for Count {
    type Out = u64;
    type State = Position;

    fn name(&self) -> &str {
        "count"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, Position>) -> Result<(), OperatorError> {
        let start = ctx.lock().state().next;
        self.probe.started_at.store(start, Ordering::Release);
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = locked.state().next;
            if n == END {
                return Ok(());
            }
            if n == END / 2 {
                drop(locked);
                self.probe.wait_for_a_checkpoint(|| ctx.is_cancelled());
                locked = ctx.lock();
            }
            self.probe.faults.check(FaultKind::Source);
            locked.collect(n)?;
            locked.state_mut().next = n + 1;
        }
        Ok(())
    }
}

/// AFTER: the port, declaring that it reads (and writes) `Count`'s state.
struct CountReader {
    next: u64,
    probe: Probe,
    /// Declares the compatibility one way only (legacy -> port).
    one_way: bool,
    /// A run that will fail waits at `END / 2` until this many checkpoints committed (it never
    /// blocks the mailbox thread: it reports nothing available and the commit wakes it; under
    /// the legacy model, where checkpoint notices do not reach a reader, the same way).
    target: Option<u64>,
    passed: bool,
}

impl CountReader {
    fn new(probe: Probe) -> Self {
        CountReader {
            next: 0,
            probe,
            one_way: false,
            target: None,
            passed: false,
        }
    }

    fn waiting(&self) -> bool {
        self.next == END / 2 && self.probe.faults.is_active() && !self.passed
    }
}

impl SourceReader<u64> for CountReader {
    fn name(&self) -> &str {
        "count"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = streamtask_core::state::decode(bytes)
                .map_err(|e| OperatorError::state("count", e))?;
        }
        self.probe.started_at.store(self.next, Ordering::Release);
        Ok(())
    }

    fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
        if self.next == END {
            return Ok(InputStatus::EndOfInput);
        }
        if self.waiting() {
            // A run that will fail waits for a checkpoint here, so it leaves one to resume.
            let committed = &self.probe.committed;
            let target = *self
                .target
                .get_or_insert_with(|| committed.load(Ordering::Acquire) + 2);
            if committed.load(Ordering::Acquire) < target {
                return Ok(InputStatus::NothingAvailable);
            }
            self.passed = true;
        }
        self.probe.faults.check(FaultKind::Source);
        out.collect(self.next)?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        match self.target {
            Some(target) if self.waiting() => {
                // Register, then look again: a commit in between wakes at once.
                *self.probe.waker.lock().unwrap() = Some(waker.clone());
                if self.probe.committed.load(Ordering::Acquire) >= target {
                    waker.wake_by_ref();
                }
            }
            _ => waker.wake_by_ref(),
        }
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        streamtask_core::state::encode(&self.next).map_err(|e| OperatorError::state("count", e))
    }
}

impl LegacyStateCompat<u64> for CountReader {
    type LegacyState = Position;

    fn restore_legacy_state(&mut self, state: Position) -> Result<(), OperatorError> {
        self.next = state.next;
        self.probe.started_at.store(self.next, Ordering::Release);
        Ok(())
    }

    fn to_legacy_state(&self) -> Option<Position> {
        (!self.one_way).then_some(Position { next: self.next })
    }
}

/// Where and how the source runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deployment {
    /// The legacy `Count`, under the legacy or the bridge model.
    LegacySource(Model),
    /// The port in a `PortedReader`, under any model (through a `ReaderSource` under the
    /// legacy model).
    Port(Model),
}

const DEPLOYMENTS: [Deployment; 5] = [
    Deployment::LegacySource(Model::Legacy),
    Deployment::LegacySource(Model::Bridge),
    Deployment::Port(Model::Mailbox),
    Deployment::Port(Model::Bridge),
    Deployment::Port(Model::Legacy),
];

impl Deployment {
    fn model(self) -> Model {
        match self {
            Deployment::LegacySource(m) | Deployment::Port(m) => m,
        }
    }
}

/// The reference: what an uninterrupted run commits.
fn expected() -> Vec<String> {
    let mut lines: Vec<String> = (0..END).map(|n| (n * 3 + 1).to_string()).collect();
    lines.sort_unstable();
    lines
}

fn committed(dir: &Path) -> Vec<String> {
    let mut lines = read_committed(dir.join("out")).unwrap();
    lines.sort_unstable();
    lines
}

/// Runs the job with `deployment` in `dir`, restoring as `restore` says.
fn run(
    dir: &Path,
    deployment: Deployment,
    probe: &Probe,
    one_way: bool,
    restore: Restore,
) -> Result<(), JobError> {
    let env = StreamEnvironment::new(deployment.model());
    let source = match deployment {
        Deployment::LegacySource(_) => {
            let probe = probe.clone();
            env.add_source("count", move |_| Count {
                probe: probe.clone(),
            })
        }
        Deployment::Port(_) => {
            let probe = probe.clone();
            env.add_reader("count", move |_| {
                PortedReader::new(CountReader {
                    one_way,
                    ..CountReader::new(probe.clone())
                })
            })
        }
    };
    source
        .map("times three", |n: u64| n * 3)
        .key_by(|n: &u64| n % 5)
        .map_with_parallelism("plus one", 2, |n: u64| n + 1)
        .two_phase_file_sink("out", dir.join("out"), |n: &u64| n.to_string());
    let on_commit = probe.clone();
    let config = JobConfig::new(dir)
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointCommitting { .. } = phase {
                on_commit.on_commit();
            }
        }))
        .with_checkpoints(Some(
            CheckpointConfig::new(Duration::from_millis(5))
                .with_timeout(Duration::from_millis(500))
                // An expiry under load is no failure of what this tests.
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES),
        ))
        .with_restart(RestartStrategy::NONE)
        .with_channel_capacity(16)
        .with_fairness(streamtask_legacy::Fairness::Fair)
        .with_restore(restore);
    env.build().unwrap().run(&config).map(|_| ())
}

/// Checkpointed under `from`, failed for good at `FAIL_AT`, resumed under `to`.
fn cross(
    from: Deployment,
    to: Deployment,
    one_way: bool,
) -> (tempfile::TempDir, Result<(), JobError>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let first = Probe::new(FaultPlan::at(&[(FaultKind::Source, FAIL_AT)]));
    let err = run(dir.path(), from, &first, one_way, Restore::Fresh).unwrap_err();
    assert!(
        matches!(&err, JobError::Failed { last, .. } if last.to_string().contains("injected fault")),
        "{from:?}: {err}"
    );
    assert!(
        first.committed.load(Ordering::Acquire) > 0,
        "{from:?}: a checkpoint committed"
    );
    let second = Probe::new(FaultPlan::none());
    let result = run(dir.path(), to, &second, one_way, Restore::Latest);
    let started_at = second.started_at.load(Ordering::Acquire);
    (dir, result, started_at)
}

#[test]
fn smoke() {
    for deployment in DEPLOYMENTS {
        let dir = tempfile::tempdir().unwrap();
        let probe = Probe::new(FaultPlan::none());
        run(dir.path(), deployment, &probe, false, Restore::Fresh).unwrap();
        assert_eq!(committed(dir.path()), expected(), "{deployment:?}");
    }
}

#[test]
fn a_checkpoint_resumes_under_every_other_deployment_exactly_once() {
    for from in DEPLOYMENTS {
        for to in DEPLOYMENTS {
            if from == to {
                continue;
            }
            let (dir, result, started_at) = cross(from, to, false);
            result.unwrap_or_else(|e| panic!("{from:?} -> {to:?}: {e}"));
            assert!(
                started_at > 0 && started_at < END,
                "{from:?} -> {to:?}: the source resumed from the checkpoint (at {started_at})"
            );
            assert_eq!(
                committed(dir.path()),
                expected(),
                "{from:?} -> {to:?}: not exactly once"
            );
        }
    }
}

#[test]
fn declared_one_way_the_port_resumes_the_legacy_source_but_not_back() {
    let legacy = Deployment::LegacySource(Model::Legacy);
    let port = Deployment::Port(Model::Mailbox);
    let (dir, result, started_at) = cross(legacy, port, true);
    result.unwrap();
    assert!(started_at > 0);
    assert_eq!(committed(dir.path()), expected());

    // The port's own bytes (in their envelope) are no legacy state: the legacy source refuses
    // them instead of starting from 0.
    let (_dir, result, _) = cross(port, legacy, true);
    let err = result.unwrap_err();
    assert!(matches!(err, JobError::Failed { .. }), "{err}");
    assert!(err.to_string().contains("cannot decode state"), "{err}");
}

/// A legacy source with another state type (a growing string), named like `Count`.
struct Lines {
    probe: Probe,
}

impl SourceFunction for Lines {
    type Out = u64;
    type State = String;

    fn name(&self) -> &str {
        "count"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, String>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = locked.state().len() as u64;
            if n == END / 2 {
                drop(locked);
                self.probe.wait_for_a_checkpoint(|| ctx.is_cancelled());
                locked = ctx.lock();
            }
            self.probe.faults.check(FaultKind::Source);
            locked.collect(n)?;
            locked.state_mut().push('x');
        }
        Ok(())
    }
}

#[test]
fn state_of_another_source_is_refused_naming_the_fix_never_a_fresh_start() {
    let dir = tempfile::tempdir().unwrap();
    let first = Probe::new(FaultPlan::at(&[(FaultKind::Source, FAIL_AT)]));
    let env = StreamEnvironment::new(Model::Legacy);
    let probe = first.clone();
    env.add_source("count", move |_| Lines {
        probe: probe.clone(),
    })
    .map("times three", |n: u64| n * 3)
    .key_by(|n: &u64| n % 5)
    .map_with_parallelism("plus one", 2, |n: u64| n + 1)
    .two_phase_file_sink("out", dir.path().join("out"), |n: &u64| n.to_string());
    let counter = Arc::clone(&first.committed);
    let config = JobConfig::new(dir.path())
        .with_phases(Arc::new(move |phase| {
            if let JobPhase::CheckpointCommitting { .. } = phase {
                counter.fetch_add(1, Ordering::AcqRel);
            }
        }))
        .with_checkpoints(Some(CheckpointConfig::new(Duration::from_millis(5))))
        .with_restart(RestartStrategy::NONE)
        .with_fairness(streamtask_legacy::Fairness::Fair);
    let err = env.build().unwrap().run(&config).unwrap_err();
    assert!(err.to_string().contains("injected fault"), "{err}");

    let probe = Probe::new(FaultPlan::none());
    let err = run(
        dir.path(),
        Deployment::Port(Model::Mailbox),
        &probe,
        false,
        Restore::Latest,
    )
    .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("LegacyState"), "{message}");
    assert!(message.contains("Position"), "{message}");
    assert_eq!(
        probe.started_at.load(Ordering::Acquire),
        u64::MAX,
        "the port never started"
    );
}
