//! The kit's schedule (when to checkpoint, fail, stop) and each side's ledger of what it
//! committed; shared by both drivers, so both sides follow one rule.
//!
//! Positions count records from the start of the input (watermarks and status changes ride
//! along, but only records move the schedule). A side runs until it reaches the next *stop*
//! (the next checkpoint, failure or limit), then pauses at its next quiet point (between two
//! locked sections, or between two polls): at or after the stop, never inside a section.
//! There the due events run, in this order: the limit ends the run; a due checkpoint commits
//! what was emitted and snapshots; a due failure drops what was emitted since the last
//! checkpoint and restores a new instance from it.
//!
//! A *fork* is a ledger that starts from one checkpoint's snapshot at that checkpoint's
//! position, with no checkpoints or failures of its own: what a restore from that checkpoint
//! emits until the end (or the limit).

use std::collections::VecDeque;

use streamtask_core::operator::Emitted;

use super::report::{CheckpointSummary, RestoreSummary};

/// When checkpoints, failures and the end fall, in records.
#[derive(Debug, Clone, Default)]
pub(crate) struct Schedule {
    pub(crate) every: Option<u64>,
    pub(crate) at: Vec<u64>,
    pub(crate) failures: Vec<u64>,
    pub(crate) limit: Option<u64>,
}

impl Schedule {
    /// The first scheduled checkpoint position strictly after `last`.
    fn next_checkpoint(&self, last: u64) -> Option<u64> {
        let periodic = self
            .every
            .map(|n| (last / n).saturating_add(1).saturating_mul(n));
        let listed = self.at.iter().copied().find(|&p| p > last);
        match (periodic, listed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The schedule of a fork: only the limit.
    pub(crate) fn fork(&self) -> Schedule {
        Schedule {
            limit: self.limit,
            ..Schedule::default()
        }
    }
}

/// What happens at a quiet point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// Nothing: run on to [`Ledger::next_stop`].
    Nothing,
    /// The limit: stop the side, the run is over.
    Limit,
    /// Take a checkpoint (then look again).
    Checkpoint,
    /// Fail the side and restore it from the latest checkpoint.
    Failure,
}

/// One side's run: committed elements, pending ones, checkpoints (with their snapshots) and
/// restores.
pub(crate) struct Ledger<T, S> {
    schedule: Schedule,
    failures: VecDeque<u64>,
    /// Records before this ledger's start (a fork's checkpoint position; 0 otherwise).
    base: u64,
    pub(crate) committed: Vec<Emitted<T>>,
    committed_records: u64,
    pending: Vec<Emitted<T>>,
    pending_records: u64,
    pub(crate) checkpoints: Vec<CheckpointSummary>,
    /// The snapshot of each checkpoint, in the order of `checkpoints`.
    pub(crate) snapshots: Vec<S>,
    /// Committed elements at each checkpoint, in the order of `checkpoints`.
    marks: Vec<usize>,
    /// A fork's starting snapshot (and the checkpoint it is of).
    initial: Option<(u64, S)>,
    pub(crate) restores: Vec<RestoreSummary>,
    /// (first committed element of an attempt, the checkpoint it restored from)
    segments: Vec<(usize, Option<u64>)>,
    last_checkpoint_at: u64,
}

impl<T, S> Ledger<T, S> {
    pub(crate) fn new(schedule: &Schedule) -> Self {
        let mut failures: Vec<u64> = schedule.failures.clone();
        failures.sort_unstable();
        failures.dedup();
        Ledger {
            schedule: schedule.clone(),
            failures: failures.into(),
            base: 0,
            committed: Vec::new(),
            committed_records: 0,
            pending: Vec::new(),
            pending_records: 0,
            checkpoints: Vec::new(),
            snapshots: Vec::new(),
            marks: Vec::new(),
            initial: None,
            restores: Vec::new(),
            segments: Vec::new(),
            last_checkpoint_at: 0,
        }
    }

    /// A fork: restored from `snapshot` of checkpoint `checkpoint` taken after `records`
    /// records, running to the end or `schedule`'s limit.
    pub(crate) fn fork(schedule: &Schedule, checkpoint: u64, records: u64, snapshot: S) -> Self {
        Ledger {
            base: records,
            last_checkpoint_at: records,
            initial: Some((checkpoint, snapshot)),
            ..Ledger::new(&schedule.fork())
        }
    }

    /// Records emitted so far in this attempt's timeline (committed + pending).
    pub(crate) fn position(&self) -> u64 {
        self.base + self.committed_records + self.pending_records
    }

    /// A new instance starts (fresh or restored): returns the snapshot to restore from.
    pub(crate) fn start_attempt(&mut self) -> Option<&S> {
        let latest = match (self.checkpoints.last(), self.snapshots.last()) {
            (Some(c), Some(s)) => Some((c.id, s)),
            _ => self.initial.as_ref().map(|(id, s)| (*id, s)),
        };
        self.segments
            .push((self.committed.len(), latest.map(|(id, _)| id)));
        latest.map(|(_, s)| s)
    }

    /// The source emitted `element` (a record, a watermark or a status change).
    pub(crate) fn emitted(&mut self, element: Emitted<T>) {
        if matches!(element, Emitted::Record(_)) {
            self.pending_records += 1;
        }
        self.pending.push(element);
    }

    /// Where the side should pause next.
    pub(crate) fn next_stop(&self) -> u64 {
        [
            self.schedule.next_checkpoint(self.last_checkpoint_at),
            self.failures.front().copied(),
            self.schedule.limit,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(u64::MAX)
    }

    /// What is due at the current quiet point.
    pub(crate) fn due(&self) -> Due {
        let position = self.position();
        if self.schedule.limit.is_some_and(|limit| position >= limit) {
            Due::Limit
        } else if self
            .schedule
            .next_checkpoint(self.last_checkpoint_at)
            .is_some_and(|at| position >= at)
        {
            Due::Checkpoint
        } else if self.failures.front().is_some_and(|&at| position >= at) {
            Due::Failure
        } else {
            Due::Nothing
        }
    }

    /// The id the next checkpoint gets.
    pub(crate) fn next_checkpoint_id(&self) -> u64 {
        self.checkpoints.last().map_or(1, |c| c.id + 1)
    }

    fn commit_pending(&mut self) {
        self.committed.append(&mut self.pending);
        self.committed_records += self.pending_records;
        self.pending_records = 0;
    }

    /// A checkpoint was taken with `snapshot`: what was emitted is committed.
    pub(crate) fn checkpoint(&mut self, snapshot: S) -> u64 {
        let id = self.next_checkpoint_id();
        self.commit_pending();
        self.last_checkpoint_at = self.position();
        self.checkpoints.push(CheckpointSummary {
            id,
            records: self.position(),
        });
        self.snapshots.push(snapshot);
        self.marks.push(self.committed.len());
        id
    }

    /// The side fails: what it emitted since the last checkpoint is dropped.
    pub(crate) fn fail(&mut self) {
        let failed_at = self.position();
        self.failures.pop_front();
        self.pending.clear();
        self.pending_records = 0;
        self.restores.push(RestoreSummary {
            failed_at,
            from_checkpoint: self.checkpoints.last().map(|c| c.id),
            resumed_at: self.position(),
        });
    }

    /// The run ended (the input, or the limit): what was emitted is committed, up to the limit
    /// (the elements after the limit's last record are cut).
    pub(crate) fn finish(&mut self) {
        self.commit_pending();
        let Some(limit) = self.schedule.limit else {
            return;
        };
        if self.position() <= limit {
            return;
        }
        let mut records = self.base;
        let cut = self.committed.iter().position(|e| {
            if matches!(e, Emitted::Record(_)) {
                records += 1;
            }
            records > limit
        });
        if let Some(cut) = cut {
            self.committed.truncate(cut);
        }
        self.committed_records = limit - self.base;
    }

    /// The checkpoint the attempt that committed element `index` had restored from.
    pub(crate) fn restored_from(&self, index: usize) -> Option<u64> {
        self.segments
            .iter()
            .rev()
            .find(|(start, _)| *start <= index)
            .and_then(|(_, from)| *from)
    }

    /// The last checkpoint taken before committed element `index` was emitted (`None`: before
    /// the first one).
    pub(crate) fn follows(&self, index: usize) -> Option<u64> {
        self.marks
            .iter()
            .zip(&self.checkpoints)
            .rev()
            .find(|(mark, _)| **mark <= index)
            .map(|(_, c)| c.id)
    }
}
