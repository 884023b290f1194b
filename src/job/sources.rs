//! Small bounded sources for tests and small jobs: [`IterReader`], behind
//! [`StreamEnvironment::from_iter`](super::StreamEnvironment::from_iter) and
//! [`from_sequence`](super::StreamEnvironment::from_sequence).
//!
//! The reader is a new-style [`SourceReader`], so it runs on the mailbox thread under the
//! mailbox and bridge models, and through `streamtask_bridge::ReaderSource` under the legacy
//! model. Its checkpointed state is its position: how many items it has emitted. A restore
//! skips that many items of a fresh iterator, so the iterator must yield the same items in the
//! same order every time it is made. `from_iter` always has parallelism 1, so its position
//! never moves between subtasks: it restores into the one subtask that wrote it.
//!
//! [`SequenceReader`], behind `from_sequence` and
//! [`from_sequence_parallel`](super::StreamEnvironment::from_sequence_parallel), checkpoints the
//! ranges it has left as list state, so a savepoint of it restores at any parallelism (split
//! evenly, each number emitted once).

use std::fmt;
use std::task::Waker;

use streamtask_core::OperatorError;
use streamtask_core::keygroup::{ListState, StateKind, state_kind};
use streamtask_core::state::{decode, encode};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// A reader over the items of an iterator, one per poll, checkpointing its position.
pub(crate) struct IterReader<I> {
    name: String,
    items: I,
    /// Items emitted so far (the checkpointed position).
    position: u64,
}

impl<I> IterReader<I> {
    pub(crate) fn new(name: String, items: I) -> Self {
        IterReader {
            name,
            items,
            position: 0,
        }
    }
}

impl<I> SourceReader<I::Item> for IterReader<I>
where
    I: Iterator + Send,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        let Some(bytes) = state else {
            return Ok(());
        };
        let position: u64 =
            decode(bytes).map_err(|e| OperatorError::state(self.name.clone(), e))?;
        // Replaying the iterator up to the position: the items before it were emitted and
        // checkpointed downstream already.
        for _ in 0..position {
            if self.items.next().is_none() {
                break;
            }
        }
        self.position = position;
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, I::Item>,
    ) -> Result<InputStatus, OperatorError> {
        match self.items.next() {
            Some(item) => {
                self.position += 1;
                output.collect(item)?;
                Ok(InputStatus::MoreAvailable)
            }
            None => Ok(InputStatus::EndOfInput),
        }
    }

    fn register_waker(&mut self, waker: &Waker) {
        // Never NothingAvailable: an iterator always has an item or has ended.
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.position).map_err(|e| OperatorError::state(self.name.clone(), e))
    }
}

impl<I> fmt::Debug for IterReader<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IterReader")
            .field("name", &self.name)
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

/// A range of numbers a [`SequenceReader`] has yet to emit, `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SequenceSplit {
    start: u64,
    end: u64,
}

/// How many parts each range left is cut into in a snapshot (see
/// [`SequenceReader::snapshot_state`]).
const SNAPSHOT_PIECES: u64 = 8;

impl SequenceSplit {
    /// `self` in up to `n` contiguous, non-empty parts, in order.
    fn pieces(self, n: u64) -> impl Iterator<Item = SequenceSplit> {
        let len = self.end - self.start;
        let n = n.clamp(1, len.max(1));
        let (base, extra) = (len / n, len % n);
        (0..n).filter_map(move |i| {
            let start = self.start + i * base + i.min(extra);
            let end = start + base + u64::from(i < extra);
            (start < end).then_some(SequenceSplit { start, end })
        })
    }
}

/// A reader over its share of a range of numbers, checkpointing the ranges it has left as
/// [`ListState`]: a remaining range belongs to no subtask in particular, so a rescale splits
/// the ranges evenly over the new subtasks and each number is emitted once, by whichever
/// subtask got its range (union state would emit every range on every subtask). A fresh
/// subtask `i` of `p` starts with the `i`-th of `p` contiguous parts of the range.
///
/// A snapshot of the bare position [`IterReader`] wrote (an older `from_sequence`, always at
/// parallelism 1) still restores: it is the range from that position on.
pub(crate) struct SequenceReader {
    name: String,
    range: std::ops::Range<u64>,
    splits: std::collections::VecDeque<SequenceSplit>,
}

impl SequenceReader {
    /// Subtask `subtask` of `parallelism` over `range`.
    pub(crate) fn new(
        name: String,
        range: std::ops::Range<u64>,
        subtask: usize,
        parallelism: usize,
    ) -> Self {
        let len = range.end.saturating_sub(range.start);
        let p = parallelism.max(1) as u64;
        let i = subtask as u64;
        // Contiguous parts; the first `len % p` get one more.
        let (base, extra) = (len / p, len % p);
        let start = range.start + i * base + i.min(extra);
        let end = start + base + u64::from(i < extra);
        SequenceReader {
            name,
            range,
            splits: [SequenceSplit { start, end }]
                .into_iter()
                .filter(|s| s.start < s.end)
                .collect(),
        }
    }
}

impl SourceReader<u64> for SequenceReader {
    fn name(&self) -> &str {
        &self.name
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        let Some(bytes) = state else {
            return Ok(());
        };
        let splits: Vec<SequenceSplit> = if state_kind(bytes) == StateKind::List {
            ListState::decode(bytes)
                .map(|s| s.items)
                .map_err(|e| OperatorError::state(self.name.clone(), e))?
        } else {
            // The bare position of the single-subtask reader of earlier releases.
            let position: u64 =
                decode(bytes).map_err(|e| OperatorError::state(self.name.clone(), e))?;
            vec![SequenceSplit {
                start: self
                    .range
                    .start
                    .saturating_add(position)
                    .min(self.range.end),
                end: self.range.end,
            }]
        };
        self.splits = splits.into_iter().filter(|s| s.start < s.end).collect();
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        let Some(split) = self.splits.front_mut() else {
            return Ok(InputStatus::EndOfInput);
        };
        let n = split.start;
        split.start += 1;
        if split.start == split.end {
            self.splits.pop_front();
        }
        output.collect(n)?;
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        // Never NothingAvailable: a range always has a number or has ended.
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        // Each range left goes into the snapshot in up to `SNAPSHOT_PIECES` parts, so a
        // restore at a higher parallelism gives every new subtask some of it (two ranges split
        // over three subtasks would leave one with nothing, and a subtask that finishes at once
        // ends every later checkpoint of the run).
        let pieces: Vec<SequenceSplit> = self
            .splits
            .iter()
            .flat_map(|s| s.pieces(SNAPSHOT_PIECES))
            .collect();
        ListState::new(pieces)
            .encode()
            .map_err(|e| OperatorError::state(self.name.clone(), e))
    }
}

impl fmt::Debug for SequenceReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SequenceReader")
            .field("name", &self.name)
            .field("splits", &self.splits)
            .finish()
    }
}
