//! Reading a [`SplitSource`]: one cursor over a worker's splits, used by the timely source
//! operator and by [`SplitReader`], the same source as a local executor's reader, so both
//! engines read, stamp, watermark and checkpoint it alike.
//!
//! # State
//!
//! A reader's position is [`ListState`] of [`SplitOffset`]s (a split and the records of it
//! read), every split it was given, read to the end or not. A fresh reader `w` of `n` gets the
//! splits `s` with `s % n == w`; a restored one gets the splits in its state. The local
//! executor's savepoint restore moves list state to another parallelism (concatenated, split
//! evenly), so a position taken at `n` readers restores at any other count with every split
//! read on from its offset by exactly one reader.

use std::fmt;
use std::sync::Arc;
use std::task::Waker;

use serde::{Deserialize, Serialize};
use streamtask::prelude::{InputStatus, ReaderOutput, SourceReader};
use streamtask_core::keygroup::ListState;
use streamtask_core::{OperatorError, Watermark};

use crate::{SplitRecords, SplitSource};

/// How many records a reader reads between two looks at its watermark.
pub(crate) const BATCH: usize = 1024;

/// One split of a [`SplitSource`] and how many of its records were read: an item of a
/// reader's [`ListState`] under `TaskSnapshot::SOURCE`, every split it was given, read to the
/// end or not. A fresh reader `w` of `n` gets the splits `s` with `s % n == w`; a restored one
/// the splits in its state. List state moves to another parallelism concatenated and split
/// evenly, so each split is read on from its offset by exactly one reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitOffset {
    /// The split's index.
    pub split: usize,
    /// Records of it read.
    pub offset: u64,
}

/// A worker's splits, read round robin, a record of each in turn.
pub(crate) struct SplitCursor<A> {
    source: Arc<dyn SplitSource<Out = A>>,
    name: String,
    positions: Vec<SplitOffset>,
    /// Per position: the largest event time read from it, and whether it was read to the end.
    split_max: Vec<(i64, bool)>,
    /// Open readers, by index into `positions`; opened on the first read.
    readers: Vec<(usize, SplitRecords<A>)>,
    opened: bool,
    next_reader: usize,
    out_of_orderness: i64,
    last_wm: i64,
}

impl<A: 'static> SplitCursor<A> {
    /// Reader `worker` of `workers` (see [`SplitOffset`]), restored from `state` (the
    /// bytes under `TaskSnapshot::SOURCE`) if given.
    pub(crate) fn new(
        source: Arc<dyn SplitSource<Out = A>>,
        name: &str,
        out_of_orderness: i64,
        (worker, workers): (usize, usize),
        state: Option<&[u8]>,
    ) -> Result<Self, OperatorError> {
        let positions = match state {
            Some(bytes) => {
                let restored: ListState<SplitOffset> =
                    ListState::decode(bytes).map_err(|e| OperatorError::state(name, e))?;
                if let Some(bad) = restored.items.iter().find(|p| p.split >= source.splits()) {
                    return Err(OperatorError::user(
                        name.to_string(),
                        format!(
                            "the restored position names split {} of a source with {} splits: \
                             restore state taken from the same input",
                            bad.split,
                            source.splits()
                        ),
                    ));
                }
                restored.items
            }
            None => (0..source.splits())
                .filter(|s| s % workers.max(1) == worker)
                .map(|split| SplitOffset { split, offset: 0 })
                .collect(),
        };
        Ok(SplitCursor {
            source,
            name: name.to_string(),
            split_max: vec![(i64::MIN, false); positions.len()],
            positions,
            readers: Vec::new(),
            opened: false,
            next_reader: 0,
            out_of_orderness,
            last_wm: i64::MIN,
        })
    }

    /// The next record and its event time, `None` once every split was read.
    ///
    /// # Errors
    ///
    /// A split that cannot be opened.
    pub(crate) fn next(&mut self) -> Result<Option<(A, i64)>, OperatorError> {
        if !self.opened {
            self.opened = true;
            for (i, p) in self.positions.iter().enumerate() {
                self.readers.push((i, self.source.open(p.split, p.offset)?));
            }
        }
        while !self.readers.is_empty() {
            self.next_reader %= self.readers.len();
            let (position, reader) = &mut self.readers[self.next_reader];
            match reader.next() {
                Some((value, ts)) => {
                    self.positions[*position].offset += 1;
                    let max = &mut self.split_max[*position].0;
                    *max = (*max).max(ts);
                    self.next_reader += 1;
                    return Ok(Some((value, ts)));
                }
                None => {
                    self.split_max[*position].1 = true;
                    drop(self.readers.remove(self.next_reader));
                }
            }
        }
        Ok(None)
    }

    /// The bounded out-of-orderness watermark, if it advanced since the last call: per split
    /// as Flink's generator computes it (the largest event time read minus the bound minus
    /// 1), the smallest over the splits not read to the end (Flink's per-split watermarks).
    /// Per split, because a reader's splits need not be in step: a restore may give it splits
    /// read to different offsets, and one split far ahead must not make another's records
    /// late. None before every such split was read from.
    pub(crate) fn watermark(&mut self) -> Option<Watermark> {
        let slowest = self
            .split_max
            .iter()
            .filter(|(_, done)| !done)
            .map(|(max, _)| *max)
            .min()?;
        if slowest == i64::MIN {
            return None;
        }
        let wm = slowest
            .saturating_sub(self.out_of_orderness)
            .saturating_sub(1);
        (wm > self.last_wm).then(|| {
            self.last_wm = wm;
            Watermark(wm)
        })
    }

    /// The position: every split given and its offset, as [`ListState`].
    ///
    /// # Errors
    ///
    /// Encoding failed.
    pub(crate) fn snapshot(&self) -> Result<Vec<u8>, OperatorError> {
        ListState::new(self.positions.clone())
            .encode()
            .map_err(|e| OperatorError::state(self.name.clone(), e))
    }
}

/// A [`SplitSource`] as a local executor's reader (`StreamEnvironment::add_reader_parallel`),
/// reading, stamping and watermarking as the timely source does, with the same state
/// ([`SplitOffset`]s): so a job reads the same source on either engine and its savepoints
/// move between them.
///
/// # Examples
///
/// ```
/// use streamtask::prelude::*;
/// use streamtask_timely::{LineFiles, SplitReader};
///
/// let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("in.csv");
/// std::fs::write(&file, "a\nb\nc\n").unwrap();
/// let source = std::sync::Arc::new(LineFiles::new(vec![file], |_| 0));
/// let env = StreamEnvironment::new(Model::Mailbox);
/// let out = CollectHandle::new();
/// env.add_reader_parallel("lines", 1, move |subtask| {
///     SplitReader::new(source.clone(), "lines", 0, subtask, 1)
/// })
/// .collect_sink("collect", &out);
/// env.build().unwrap().run(&JobConfig::new(dir.path().join("work"))).unwrap();
/// assert_eq!(out.committed(), ["a", "b", "c"]);
/// ```
pub struct SplitReader<A> {
    cursor: SplitCursor<A>,
    source: Arc<dyn SplitSource<Out = A>>,
    subtask: (usize, usize),
    since_watermark: usize,
}

impl<A: 'static> SplitReader<A> {
    /// Subtask `subtask` of `parallelism` reading `source` (task name `name`), its watermark
    /// trailing the largest event time read by `out_of_orderness_ms`.
    pub fn new(
        source: Arc<dyn SplitSource<Out = A>>,
        name: &str,
        out_of_orderness_ms: i64,
        subtask: usize,
        parallelism: usize,
    ) -> Self {
        let cursor = SplitCursor::new(
            Arc::clone(&source),
            name,
            out_of_orderness_ms,
            (subtask, parallelism),
            None,
        )
        .expect("a fresh cursor decodes nothing");
        SplitReader {
            cursor,
            source,
            subtask: (subtask, parallelism),
            since_watermark: 0,
        }
    }
}

impl<A> fmt::Debug for SplitReader<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SplitReader")
            .field("name", &self.cursor.name)
            .field("positions", &self.cursor.positions)
            .finish_non_exhaustive()
    }
}

impl<A: Send + 'static> SourceReader<A> for SplitReader<A> {
    fn name(&self) -> &str {
        &self.cursor.name
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        self.cursor = SplitCursor::new(
            Arc::clone(&self.source),
            &self.cursor.name,
            self.cursor.out_of_orderness,
            self.subtask,
            state,
        )?;
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, A>,
    ) -> Result<InputStatus, OperatorError> {
        match self.cursor.next()? {
            Some((value, ts)) => {
                output.collect_with_timestamp(value, ts)?;
                self.since_watermark += 1;
                if self.since_watermark >= BATCH {
                    self.since_watermark = 0;
                    if let Some(wm) = self.cursor.watermark() {
                        output.emit_watermark(wm)?;
                    }
                }
                Ok(InputStatus::MoreAvailable)
            }
            None => Ok(InputStatus::EndOfInput),
        }
    }

    fn register_waker(&mut self, waker: &Waker) {
        // Never NothingAvailable: a split always has a record or has ended.
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        self.cursor.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LineFiles;

    /// Two files of 10 lines, line `i` at event time `100 * i`.
    fn source(dir: &std::path::Path) -> Arc<dyn SplitSource<Out = String>> {
        let files = (0..2)
            .map(|f| {
                let path = dir.join(format!("{f}.txt"));
                let text: String = (0..10).map(|i| format!("{}\n", 100 * i)).collect();
                std::fs::write(&path, text).unwrap();
                path
            })
            .collect();
        Arc::new(LineFiles::new(files, |line| line.parse().unwrap()))
    }

    #[test]
    fn the_watermark_follows_the_split_furthest_behind() {
        let dir = tempfile::tempdir().unwrap();
        // Split 0 read to line 8, split 1 to line 2: as a restore may hand them to one reader.
        let state = ListState::new(vec![
            SplitOffset {
                split: 0,
                offset: 8,
            },
            SplitOffset {
                split: 1,
                offset: 2,
            },
        ])
        .encode()
        .unwrap();
        let mut cursor =
            SplitCursor::new(source(dir.path()), "t", 50, (0, 1), Some(&state)).unwrap();
        assert_eq!(cursor.next().unwrap().map(|r| r.1), Some(800));
        assert_eq!(cursor.watermark(), None, "split 1 not read from yet");
        assert_eq!(cursor.next().unwrap().map(|r| r.1), Some(200));
        assert_eq!(cursor.watermark(), Some(Watermark(200 - 50 - 1)));
        // Split 0 ends after line 9; from then on split 1 alone sets the watermark.
        let mut read = 2;
        while cursor.next().unwrap().is_some() {
            read += 1;
        }
        assert_eq!(read, 10, "lines 8-9 of split 0 and 2-9 of split 1");
        let decoded: ListState<SplitOffset> =
            ListState::decode(&cursor.snapshot().unwrap()).unwrap();
        assert_eq!(
            decoded.items,
            [
                SplitOffset {
                    split: 0,
                    offset: 10
                },
                SplitOffset {
                    split: 1,
                    offset: 10
                }
            ]
        );
    }

    #[test]
    fn a_position_naming_a_split_the_source_lacks_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = ListState::new(vec![SplitOffset {
            split: 5,
            offset: 0,
        }])
        .encode()
        .unwrap();
        let refused = SplitCursor::new(source(dir.path()), "t", 0, (0, 1), Some(&state));
        assert!(refused.is_err());
    }
}
