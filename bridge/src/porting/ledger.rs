//! The kit's schedule (when to checkpoint, fail, stop) and each side's ledger of what it
//! committed; shared by both drivers, so both sides follow one rule.
//!
//! Positions count records from the start of the input. A side runs until it reaches the next
//! *stop* (the next checkpoint, failure or limit), then pauses at its next quiet point (between
//! two locked sections, or between two polls): at or after the stop, never inside a section.
//! There the due events run, in this order: the limit ends the run; a due checkpoint commits
//! what was emitted and snapshots; a due failure drops what was emitted since the last
//! checkpoint and restores a new instance from it.

use std::collections::VecDeque;

use streamtask_core::StreamRecord;

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

/// One side's run: committed records, pending ones, checkpoints and restores.
pub(crate) struct Ledger<T, S> {
    schedule: Schedule,
    failures: VecDeque<u64>,
    pub(crate) committed: Vec<StreamRecord<T>>,
    pending: Vec<StreamRecord<T>>,
    pub(crate) checkpoints: Vec<CheckpointSummary>,
    latest: Option<(u64, S)>,
    pub(crate) restores: Vec<RestoreSummary>,
    /// (first committed index of an attempt, the checkpoint it restored from)
    pub(crate) segments: Vec<(u64, Option<u64>)>,
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
            committed: Vec::new(),
            pending: Vec::new(),
            checkpoints: Vec::new(),
            latest: None,
            restores: Vec::new(),
            segments: Vec::new(),
            last_checkpoint_at: 0,
        }
    }

    /// Records emitted so far in this attempt's timeline (committed + pending).
    pub(crate) fn position(&self) -> u64 {
        (self.committed.len() + self.pending.len()) as u64
    }

    /// A new instance starts (fresh or restored): returns the snapshot to restore from.
    pub(crate) fn start_attempt(&mut self) -> Option<&S> {
        let from = self.latest.as_ref().map(|(id, _)| *id);
        self.segments.push((self.committed.len() as u64, from));
        self.latest.as_ref().map(|(_, s)| s)
    }

    pub(crate) fn emitted(&mut self, record: StreamRecord<T>) {
        self.pending.push(record);
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

    /// A checkpoint was taken with `snapshot`: what was emitted is committed.
    pub(crate) fn checkpoint(&mut self, snapshot: S) -> u64 {
        let id = self.next_checkpoint_id();
        self.committed.append(&mut self.pending);
        self.last_checkpoint_at = self.position();
        self.checkpoints.push(CheckpointSummary {
            id,
            records: self.position(),
        });
        self.latest = Some((id, snapshot));
        id
    }

    /// The side fails: what it emitted since the last checkpoint is dropped.
    pub(crate) fn fail(&mut self) {
        let failed_at = self.position();
        self.failures.pop_front();
        self.pending.clear();
        self.restores.push(RestoreSummary {
            failed_at,
            from_checkpoint: self.latest.as_ref().map(|(id, _)| *id),
            resumed_at: self.committed.len() as u64,
        });
    }

    /// The run ended (the input, or the limit): what was emitted is committed, up to the limit.
    pub(crate) fn finish(&mut self) {
        self.committed.append(&mut self.pending);
        if let Some(limit) = self.schedule.limit {
            self.committed
                .truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        }
    }

    /// The checkpoint the attempt that committed record `index` had restored from.
    pub(crate) fn restored_from(&self, index: u64) -> Option<u64> {
        self.segments
            .iter()
            .rev()
            .find(|(start, _)| *start <= index)
            .and_then(|(_, from)| *from)
    }

    /// The checkpoint that committed record `index` (`None`: after the last one).
    pub(crate) fn committed_by(&self, index: u64) -> Option<u64> {
        self.checkpoints
            .iter()
            .find(|c| c.records > index)
            .map(|c| c.id)
    }
}
