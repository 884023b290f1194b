//! The porting kit: proves that a new-style [`SourceReader`] is a faithful port of a legacy
//! [`SourceFunction`], state included, in the user's own test suite.
//!
//! [`PortingKit::run`] runs both on the same input with the same checkpoint schedule, counted in
//! records and driven by a [`ManualClock`](streamtask_core::time::ManualClock) (no wall-clock time
//! anywhere, so a run is deterministic), fails and restores each side from its *own* snapshots
//! where failures are scheduled, and compares every element each committed, in order: records
//! with their timestamps, watermarks, and idle/active status changes (the end of event time
//! included). Then it proves the snapshots: at *every* checkpoint of the run it restores the
//! legacy source from its own snapshot of that checkpoint, runs it to the end, and requires
//! each restore below to emit exactly the same elements:
//!
//! | restore ([`RestoreCheck`]) | when |
//! |---|---|
//! | the reader from its own snapshot | always |
//! | the reader from the legacy source's snapshot | [`PortingKit::ported`]: the port declares [`LegacyStateCompat`] and runs in a [`PortedReader`], as in a job |
//! | the legacy source from the reader's snapshot | `ported`, and the port declares the compatibility both ways (`to_legacy_state` returns the state) |
//!
//! So a port whose snapshot is one record off is caught even where no failure is scheduled,
//! and a port whose declared legacy state does not read what the legacy source writes is
//! caught as [`PortingError::IncompatibleState`]. On the first difference the kit returns a
//! [`Divergence`] naming the element (its index and both sides' elements) and the checkpoint it
//! follows.
//!
//! The legacy side is public as a model for ports of another shape:
//! [`PortingKit::run_legacy`] and [`PortingKit::run_legacy_from`] run only the legacy source on
//! the kit's plan, and [`describe_element`] names elements as every report does (the
//! `streamtask` crate's split-source kit, `streamtask::source::porting`, is built on them).
//!
//! # How each side runs
//!
//! | | legacy source | reader |
//! |---|---|---|
//! | thread | its own, through `run_source`, as in every legacy task | the calling thread, polled as a mailbox task polls |
//! | quiet point (where checkpoints and failures happen) | between two locked sections: the kit's backend reports no capacity once the next stop is reached, so the source waits before its next section | between two `poll_next` calls |
//! | snapshot | the source state, under the lock (`TaskSnapshot::SOURCE`) | `snapshot_state`, then `notify_checkpoint_complete` |
//! | restore | a new instance from the factory, state from its latest snapshot | a new instance, `restore_state` with its latest snapshot (a [`PortedReader`] reads either side's form) |
//! | processing time | a manual clock: `start` ms, `step` ms more after every checkpoint; context timers fire then | - |
//!
//! A checkpoint or failure scheduled "after N records" happens at each side's first quiet point
//! at or after N records. If one locked section of the legacy source emits several records and
//! one poll of the reader emits one, the two stop at different places: the kit reports that as a
//! [`Divergence::Checkpoint`] (the committed output at that checkpoint differs), and the fix is
//! either a port that emits per poll what the source emits per section, or a schedule both can
//! stop at.
//!
//! Stream status is compared as each side emits it: a source marked idle emits
//! [`StreamStatus::Idle`](streamtask_core::StreamStatus::Idle) once, and its next record or
//! watermark emits `Active` first; a restored side starts active, as a restored task does. A
//! reader that ends gets the end of event time (`Watermark::MAX`) from the kit, as from its
//! task; the legacy source emits it itself.
//!
//! # Examples
//!
//! A counting source, and a port that checkpoints its position:
//!
//! ```
//! use std::task::Waker;
//! use streamtask_bridge::LegacyStateCompat;
//! use streamtask_bridge::porting::{PortingKit, RestoreCheck};
//! use streamtask_core::OperatorError;
//! use streamtask_core::state::{decode, encode};
//! use streamtask_legacy::{SourceContext, SourceFunction};
//! use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};
//!
//! struct Count;
//!
//! impl SourceFunction for Count {
//!     type Out = u64;
//!     type State = u64;
//!     fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
//!         while !ctx.is_cancelled() {
//!             let mut locked = ctx.lock();
//!             let n = *locked.state();
//!             if n == 50 {
//!                 return Ok(());
//!             }
//!             locked.collect(n)?;
//!             *locked.state_mut() = n + 1;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! struct CountReader { next: u64 }
//!
//! impl SourceReader<u64> for CountReader {
//!     fn name(&self) -> &str { "count" }
//!     fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
//!         if let Some(bytes) = state {
//!             self.next = decode(bytes).map_err(|e| OperatorError::state("count", e))?;
//!         }
//!         Ok(())
//!     }
//!     fn poll_next(&mut self, out: &mut ReaderOutput<'_, u64>) -> Result<InputStatus, OperatorError> {
//!         if self.next == 50 {
//!             return Ok(InputStatus::EndOfInput);
//!         }
//!         out.collect(self.next)?;
//!         self.next += 1;
//!         Ok(InputStatus::MoreAvailable)
//!     }
//!     fn register_waker(&mut self, waker: &Waker) { waker.wake_by_ref() }
//!     fn snapshot_state(&mut self, _id: u64) -> Result<Vec<u8>, OperatorError> {
//!         encode(&self.next).map_err(|e| OperatorError::state("count", e))
//!     }
//! }
//!
//! let report = PortingKit::new(|| Count, || CountReader { next: 0 })
//!     .checkpoint_every(10)
//!     .fail_after([15, 32])
//!     .run()
//!     .unwrap();
//! assert_eq!(report.records.len(), 50);
//! assert_eq!(report.restores[0].from_checkpoint, Some(1));
//!
//! // Declared state compatibility: checkpoints then move between the two, both ways.
//! impl LegacyStateCompat<u64> for CountReader {
//!     type LegacyState = u64; // Count's State
//!     fn restore_legacy_state(&mut self, next: u64) -> Result<(), OperatorError> {
//!         self.next = next;
//!         Ok(())
//!     }
//!     fn to_legacy_state(&self) -> Option<u64> {
//!         Some(self.next)
//!     }
//! }
//!
//! let report = PortingKit::ported(|| Count, || CountReader { next: 0 })
//!     .checkpoint_every(10)
//!     .run()
//!     .unwrap();
//! assert!(report.restores_checked.contains(&(1, RestoreCheck::ReaderFromLegacy)));
//! assert!(report.restores_checked.contains(&(5, RestoreCheck::LegacyFromReader)));
//! ```

mod ledger;
mod legacy;
mod reader;
mod report;

use std::fmt;
use std::time::Duration;

use streamtask_core::operator::Emitted;
use streamtask_core::{OperatorError, state::TaskSnapshot};
use streamtask_legacy::{SourceContextConfig, SourceFunction, restore_source_state};
use streamtask_mailbox::SourceReader;

use self::ledger::{Ledger, Schedule};
use crate::compat::{LegacyStateCompat, PortedReader, is_legacy_form};

pub use self::report::{
    CheckpointSummary, Divergence, PortingError, PortingReport, RestoreCheck, RestoreSummary, Side,
    describe_element,
};

/// How long a side may make no progress before the kit gives up on it, unless set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Processing time on the legacy side.
#[derive(Debug, Clone, Copy)]
struct ClockPlan {
    start_millis: i64,
    step_millis: i64,
}

/// Everything both sides follow.
#[derive(Debug, Clone)]
struct Plan {
    schedule: Schedule,
    context: SourceContextConfig,
    clock: ClockPlan,
    timeout: Duration,
}

/// Runs a legacy source and its port side by side and compares them. See the
/// [module docs](self).
///
/// A builder: [`new`](Self::new) takes the two factories (each call makes a fresh instance over
/// the same input), `checkpoint_*`, `fail_after`, `stop_after` and `with_*` set the plan, and
/// [`run`](Self::run) runs it.
pub struct PortingKit<L, R> {
    legacy: L,
    reader: R,
    plan: Plan,
    zero_interval: bool,
    /// The reader is a [`PortedReader`]: restores cross between the sides.
    compat: bool,
}

impl<L> PortingKit<L, ()> {
    /// A kit comparing the legacy sources `legacy()` makes with their port, run as a job runs a
    /// port with a declared state compatibility: each `port()` in a [`PortedReader`]. Besides
    /// what [`new`](PortingKit::new) checks, at every checkpoint the port restores from the
    /// legacy source's snapshot and, where the port declares the compatibility both ways
    /// ([`LegacyStateCompat::to_legacy_state`] returns the state), the legacy source restores
    /// from the port's snapshot; each continues to the end and must emit what the legacy
    /// source restored from its own snapshot emits.
    pub fn ported<F, P, PF>(
        legacy: L,
        mut port: PF,
    ) -> PortingKit<L, impl FnMut() -> PortedReader<P>>
    where
        L: FnMut() -> F,
        F: SourceFunction,
        P: LegacyStateCompat<F::Out>,
        PF: FnMut() -> P,
    {
        PortingKit {
            compat: true,
            ..PortingKit::new(legacy, move || PortedReader::new(port()))
        }
    }
}

impl<L, R> PortingKit<L, R> {
    /// A kit comparing the sources `legacy()` makes with the readers `reader()` makes; no
    /// checkpoints or failures yet, an event-time context (the legacy source's timestamps and
    /// watermarks pass through, as a reader's do), a manual clock at 0 moving 1000 ms per
    /// checkpoint, and [`DEFAULT_TIMEOUT`].
    pub fn new(legacy: L, reader: R) -> Self {
        PortingKit {
            legacy,
            reader,
            plan: Plan {
                schedule: Schedule::default(),
                context: SourceContextConfig::event_time(),
                clock: ClockPlan {
                    start_millis: 0,
                    step_millis: 1000,
                },
                timeout: DEFAULT_TIMEOUT,
            },
            zero_interval: false,
            compat: false,
        }
    }

    /// Checkpoints after every `records` records (at the first quiet point at or after each
    /// multiple).
    pub fn checkpoint_every(mut self, records: u64) -> Self {
        if records == 0 {
            self.zero_interval = true;
        } else {
            self.plan.schedule.every = Some(records);
        }
        self
    }

    /// Checkpoints after each of these record counts (besides any `checkpoint_every`).
    pub fn checkpoint_at(mut self, records: impl IntoIterator<Item = u64>) -> Self {
        self.plan.schedule.at.extend(records);
        self.plan.schedule.at.sort_unstable();
        self.plan.schedule.at.dedup();
        self
    }

    /// Fails each side once after each of these record counts: what it emitted since its latest
    /// checkpoint is dropped, and a new instance restores from that checkpoint's snapshot (or
    /// starts afresh before the first checkpoint).
    pub fn fail_after(mut self, records: impl IntoIterator<Item = u64>) -> Self {
        self.plan.schedule.failures.extend(records);
        self
    }

    /// Ends the run after `records` records (for sources that never end on their own); the
    /// committed output is cut there.
    pub fn stop_after(mut self, records: u64) -> Self {
        self.plan.schedule.limit = Some(records);
        self
    }

    /// The legacy source's context flavour (event time unless set).
    pub fn with_context(mut self, context: SourceContextConfig) -> Self {
        self.plan.context = context;
        self
    }

    /// The legacy side's manual clock: starts at `start_millis`, moves `step_millis` after every
    /// checkpoint.
    pub fn with_clock(mut self, start_millis: i64, step_millis: i64) -> Self {
        self.plan.clock = ClockPlan {
            start_millis,
            step_millis,
        };
        self
    }

    /// How long a side may make no progress (emit, end, or return once cancelled) before the
    /// kit reports it as stalled: a hang guard, not a timing check.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.plan.timeout = timeout;
        self
    }
}

/// What the legacy source committed in a kit's run ([`PortingKit::run_legacy`]): the model a
/// port of another shape (a split source, compared by the `streamtask` crate's
/// `source::SplitPortingKit`) is held to.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LegacyRun<T, S> {
    /// Every committed element in order: records, watermarks and status changes.
    pub elements: Vec<Emitted<T>>,
    /// Every checkpoint taken, in order.
    pub checkpoints: Vec<CheckpointSummary>,
    /// The source's state at each checkpoint, in the order of `checkpoints`.
    pub states: Vec<S>,
}

impl<F, L, R> PortingKit<L, R>
where
    L: FnMut() -> F,
    F: SourceFunction,
{
    /// Runs only the legacy side through the kit's plan (schedule, failures, context, clock)
    /// and returns what it committed with its state at every checkpoint: the public model side
    /// of the kit, for comparing a port that is not a single `SourceReader`.
    ///
    /// # Errors
    ///
    /// [`PortingError::Failed`], [`PortingError::Stalled`] or [`PortingError::ZeroInterval`],
    /// as [`run`](Self::run).
    #[allow(clippy::type_complexity)] // one result type, spelled out: its parts are all public
    pub fn run_legacy(&mut self) -> Result<LegacyRun<F::Out, F::State>, PortingError<F::Out>> {
        if self.zero_interval {
            return Err(PortingError::ZeroInterval);
        }
        let ledger = legacy::run(
            &mut self.legacy,
            &self.plan,
            Ledger::new(&self.plan.schedule),
        )?;
        let states = ledger
            .snapshots
            .iter()
            .map(|s| {
                restore_source_state::<F::State>(Some(s)).map_err(|e| PortingError::Failed {
                    side: Side::Legacy,
                    error: OperatorError::state("porting kit", e),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(LegacyRun {
            elements: ledger.committed,
            checkpoints: ledger.checkpoints,
            states,
        })
    }

    /// Runs a new legacy source restored with `state` as of `checkpoint` (its position in
    /// records) to the end (or the kit's `stop_after` limit), without checkpoints or
    /// failures, and returns what it emits after the restore.
    ///
    /// # Errors
    ///
    /// [`PortingError::Failed`] (also when `state` does not encode) or
    /// [`PortingError::Stalled`].
    pub fn run_legacy_from(
        &mut self,
        checkpoint: CheckpointSummary,
        state: &F::State,
    ) -> Result<Vec<Emitted<F::Out>>, PortingError<F::Out>> {
        let mut snapshot = TaskSnapshot::new();
        snapshot
            .put_value(TaskSnapshot::SOURCE, state)
            .map_err(|e| PortingError::Failed {
                side: Side::Legacy,
                error: OperatorError::state("porting kit", e),
            })?;
        let fork = Ledger::fork(
            &self.plan.schedule,
            checkpoint.id,
            checkpoint.records,
            snapshot,
        );
        Ok(legacy::run(&mut self.legacy, &self.plan, fork)?.committed)
    }
}

impl<F, Rd, L, R> PortingKit<L, R>
where
    L: FnMut() -> F,
    R: FnMut() -> Rd,
    F: SourceFunction,
    F::Out: Clone + PartialEq + fmt::Debug,
    Rd: SourceReader<F::Out>,
{
    /// Runs the legacy side, then the reader side, and compares them; then, at every
    /// checkpoint, restores each side as [`RestoreCheck`] lists and compares what follows
    /// with the legacy source restored from its own snapshot of that checkpoint.
    ///
    /// # Errors
    ///
    /// [`PortingError::Diverged`] with the first difference; [`PortingError::IncompatibleState`]
    /// if a side cannot read the other's snapshot; [`PortingError::Failed`] if a side failed;
    /// [`PortingError::Stalled`] if one made no progress within the timeout;
    /// [`PortingError::ZeroInterval`] for `checkpoint_every(0)`.
    pub fn run(mut self) -> Result<PortingReport<F::Out>, PortingError<F::Out>> {
        if self.zero_interval {
            return Err(PortingError::ZeroInterval);
        }
        let schedule = &self.plan.schedule;
        let legacy = legacy::run(&mut self.legacy, &self.plan, Ledger::new(schedule))?;
        let reader = reader::run(&mut self.reader, &self.plan, Ledger::new(schedule))?;
        compare(&legacy, &reader)?;
        let mut checked = Vec::new();
        for (k, checkpoint) in legacy.checkpoints.iter().enumerate() {
            let (legacy_snapshot, reader_snapshot) = (&legacy.snapshots[k], &reader.snapshots[k]);
            let fork =
                |snapshot| Ledger::fork(schedule, checkpoint.id, checkpoint.records, snapshot);
            let expected =
                legacy::run(&mut self.legacy, &self.plan, fork(legacy_snapshot.clone()))?;
            let mut checks = Vec::new();
            if self.compat {
                checks.push(RestoreCheck::ReaderFromLegacy);
                if is_legacy_form(reader_snapshot) {
                    checks.push(RestoreCheck::LegacyFromReader);
                }
            }
            checks.push(RestoreCheck::ReaderFromReader);
            for check in checks {
                let incompatible = |error| PortingError::IncompatibleState {
                    checkpoint: checkpoint.id,
                    restore: check,
                    error,
                };
                let got = match check {
                    RestoreCheck::LegacyFromReader => {
                        let mut snapshot = TaskSnapshot::new();
                        snapshot.put(TaskSnapshot::SOURCE, reader_snapshot.clone());
                        restore_source_state::<F::State>(Some(&snapshot))
                            .map_err(|e| incompatible(OperatorError::state("porting kit", e)))?;
                        legacy::run(&mut self.legacy, &self.plan, fork(snapshot))?.committed
                    }
                    RestoreCheck::ReaderFromLegacy | RestoreCheck::ReaderFromReader => {
                        let bytes = match check {
                            RestoreCheck::ReaderFromLegacy => legacy_snapshot
                                .get(TaskSnapshot::SOURCE)
                                .unwrap_or_default()
                                .to_vec(),
                            _ => reader_snapshot.clone(),
                        };
                        // A restore the reader refuses is an incompatibility, not a failure.
                        let mut probe = (self.reader)();
                        let restored = probe.restore_state(Some(&bytes));
                        let _ = probe.close();
                        restored.map_err(incompatible)?;
                        let ledger =
                            Ledger::fork(schedule, checkpoint.id, checkpoint.records, bytes);
                        reader::run(&mut self.reader, &self.plan, ledger)?.committed
                    }
                };
                compare_restore(checkpoint, check, &expected.committed, &got)?;
                checked.push((checkpoint.id, check));
            }
        }
        Ok(PortingReport {
            records: legacy
                .committed
                .iter()
                .filter_map(|e| match e {
                    Emitted::Record(r) => Some(r.clone()),
                    _ => None,
                })
                .collect(),
            elements: legacy.committed,
            checkpoints: legacy.checkpoints,
            restores: legacy.restores,
            restores_checked: checked,
        })
    }
}

/// The first difference between the two sides' committed streams, then between their
/// checkpoints.
fn compare<T: Clone + PartialEq, A, B>(
    legacy: &Ledger<T, A>,
    reader: &Ledger<T, B>,
) -> Result<(), PortingError<T>> {
    if let Some(index) = first_difference(&legacy.committed, &reader.committed) {
        return Err(PortingError::diverged(Divergence::Element {
            index: index as u64,
            legacy: legacy.committed.get(index).cloned(),
            reader: reader.committed.get(index).cloned(),
            after_checkpoint: legacy.follows(index),
            legacy_restored_from: legacy.restored_from(index),
            reader_restored_from: reader.restored_from(index),
        }));
    }
    let checkpoints = legacy.checkpoints.len().max(reader.checkpoints.len());
    for k in 0..checkpoints {
        let (l, r) = (legacy.checkpoints.get(k), reader.checkpoints.get(k));
        if l != r {
            return Err(PortingError::diverged(Divergence::Checkpoint {
                checkpoint: k as u64 + 1,
                legacy_records: l.map(|c| c.records),
                reader_records: r.map(|c| c.records),
            }));
        }
    }
    Ok(())
}

/// What a restore from `checkpoint` emitted against what the legacy source restored from its
/// own snapshot emitted.
fn compare_restore<T: Clone + PartialEq>(
    checkpoint: &CheckpointSummary,
    restore: RestoreCheck,
    expected: &[Emitted<T>],
    got: &[Emitted<T>],
) -> Result<(), PortingError<T>> {
    match first_difference(expected, got) {
        None => Ok(()),
        Some(index) => Err(PortingError::diverged(Divergence::Restore {
            checkpoint: checkpoint.id,
            records: checkpoint.records,
            restore,
            index: index as u64,
            expected: expected.get(index).cloned(),
            got: got.get(index).cloned(),
        })),
    }
}

fn first_difference<T: PartialEq>(a: &[T], b: &[T]) -> Option<usize> {
    (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))
}

impl<L, R> fmt::Debug for PortingKit<L, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PortingKit")
            .field("schedule", &self.plan.schedule)
            .field("context", &self.plan.context)
            .field("timeout", &self.plan.timeout)
            .finish_non_exhaustive()
    }
}
