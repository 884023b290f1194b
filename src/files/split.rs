//! What the monitoring source hands the readers (a [`FileSplit`]: a file and a byte range),
//! how far a reader got in one ([`SplitProgress`]), the reader's checkpointed state
//! ([`ReaderSnapshot`], one type for every model), and the [`LineCursor`] both reader forms read
//! lines with.
//!
//! # Which lines a split holds
//!
//! A line belongs to the split its first byte falls in, as Flink's delimited input formats do:
//! a split `[start, end)` that does not begin the file skips the partial line it starts inside
//! (up to and including the first `\n` at or after `start - 1`), then reads every line that
//! *starts* before `end`, to that line's end even past `end`. So splits of one file never
//! share or lose a line, wherever the byte boundaries fall.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A byte range of one file, to be read into lines.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileSplit {
    /// The file.
    pub path: PathBuf,
    /// Its modification time when it was listed (nanoseconds since the Unix epoch).
    pub modified: i128,
    /// The first byte of the range.
    pub start: u64,
    /// One past the last byte of the range (a line starting before it is read to its end).
    pub end: u64,
}

impl FileSplit {
    /// The splits of a file of `len` bytes, each at most `split_bytes` long (at least one byte);
    /// none for an empty file.
    pub fn of_file(path: PathBuf, modified: i128, len: u64, split_bytes: u64) -> Vec<FileSplit> {
        let step = split_bytes.max(1);
        (0..len.div_ceil(step))
            .map(|i| FileSplit {
                path: path.clone(),
                modified,
                start: i * step,
                end: ((i + 1) * step).min(len),
            })
            .collect()
    }
}

/// How far a reader is in a split: `position` is where the next line starts, `None` before
/// the split's first line was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitProgress {
    /// The split being read.
    pub split: FileSplit,
    /// The byte offset of the next line, once known.
    pub position: Option<u64>,
}

impl SplitProgress {
    /// A split not read yet.
    pub fn fresh(split: FileSplit) -> Self {
        SplitProgress {
            split,
            position: None,
        }
    }
}

/// A split reader's checkpointed state, the same under every model: the split being read with
/// its offset, and the splits received but not started, in order. A restore continues the
/// current split mid-way, at the offset, then reads the pending ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderSnapshot {
    /// The split being read and the offset of its next line.
    pub current: Option<SplitProgress>,
    /// Splits received and not started, in the order they arrived.
    pub pending: VecDeque<FileSplit>,
}

impl ReaderSnapshot {
    /// Whether a split is being read or waits.
    pub fn has_work(&self) -> bool {
        self.current.is_some() || !self.pending.is_empty()
    }

    /// Every split in reading order: the current one (as far as it got) first.
    pub fn in_order(&self) -> Vec<SplitProgress> {
        self.current
            .iter()
            .cloned()
            .chain(self.pending.iter().cloned().map(SplitProgress::fresh))
            .collect()
    }
}

/// Reads the lines of one split, from a [`SplitProgress`] on, and says after each line where
/// the next one starts.
#[derive(Debug)]
pub struct LineCursor {
    reader: BufReader<File>,
    end: u64,
    position: u64,
    buf: Vec<u8>,
}

impl LineCursor {
    /// Opens the split's file at the progress: at its offset, or (for a fresh split) at the
    /// first line that starts in the split.
    ///
    /// # Errors
    ///
    /// The I/O error opening or seeking the file.
    pub fn open(progress: &SplitProgress) -> io::Result<Self> {
        let split = &progress.split;
        let file = File::open(&split.path)?;
        let mut reader = BufReader::new(file);
        let position = match progress.position {
            Some(position) => {
                reader.seek(SeekFrom::Start(position))?;
                position
            }
            None if split.start == 0 => 0,
            None => {
                // Skip the line the split starts inside: it belongs to the previous split.
                reader.seek(SeekFrom::Start(split.start - 1))?;
                let mut skipped = Vec::new();
                let n = reader.read_until(b'\n', &mut skipped)?;
                split.start - 1 + n as u64
            }
        };
        Ok(LineCursor {
            reader,
            end: split.end,
            position,
            buf: Vec::new(),
        })
    }

    /// The next line (without its `\n`) and the offset after it; `None` at the split's end.
    ///
    /// # Errors
    ///
    /// The I/O error reading, or [`io::ErrorKind::InvalidData`] for a line that is not UTF-8.
    pub fn next_line(&mut self) -> io::Result<Option<(String, u64)>> {
        if self.position >= self.end {
            return Ok(None);
        }
        self.buf.clear();
        let n = self.reader.read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            // The file is shorter than when it was listed; nothing more to read.
            return Ok(None);
        }
        self.position += n as u64;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        }
        let line = String::from_utf8(std::mem::take(&mut self.buf))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(Some((line, self.position)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(path: &std::path::Path, len: u64, split_bytes: u64) -> Vec<String> {
        let mut out = Vec::new();
        for split in FileSplit::of_file(path.to_path_buf(), 0, len, split_bytes) {
            let mut cursor = LineCursor::open(&SplitProgress::fresh(split)).unwrap();
            while let Some((line, _)) = cursor.next_line().unwrap() {
                out.push(line);
            }
        }
        out
    }

    #[test]
    fn splits_of_any_size_read_every_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        let text = "alpha\nb\n\ngamma delta\nlast-without-newline";
        std::fs::write(&path, text).unwrap();
        let expected: Vec<String> = text.split('\n').map(str::to_string).collect();
        for split_bytes in 1..=(text.len() as u64 + 1) {
            assert_eq!(
                lines_of(&path, text.len() as u64, split_bytes),
                expected,
                "split size {split_bytes}"
            );
        }
    }

    #[test]
    fn a_cursor_continues_at_a_recorded_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap();
        let split = FileSplit::of_file(path, 0, 14, 100).remove(0);
        let mut cursor = LineCursor::open(&SplitProgress::fresh(split.clone())).unwrap();
        let (first, after) = cursor.next_line().unwrap().unwrap();
        assert_eq!(first, "one");
        let resumed = SplitProgress {
            split,
            position: Some(after),
        };
        let mut cursor = LineCursor::open(&resumed).unwrap();
        assert_eq!(cursor.next_line().unwrap().unwrap().0, "two");
        assert_eq!(cursor.next_line().unwrap().unwrap().0, "three");
        assert!(cursor.next_line().unwrap().is_none());
    }
}
