//! What the porting kit reports: the agreed output, or where the two sides part.

use std::fmt;

use streamtask_core::{OperatorError, StreamRecord};

/// One of the two sources the kit compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The legacy `SourceFunction`.
    Legacy,
    /// Its port, the new-style `SourceReader`.
    Reader,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Legacy => "the legacy source",
            Side::Reader => "the reader",
        })
    }
}

/// A checkpoint both sides took: its id and how many records it committed (in total, from the
/// start of the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CheckpointSummary {
    /// The checkpoint's id (1, 2, ... in the order taken).
    pub id: u64,
    /// Records committed up to and including this checkpoint.
    pub records: u64,
}

/// A failure the kit injected and the restore that followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RestoreSummary {
    /// Records the side had emitted (committed or not) when it was failed.
    pub failed_at: u64,
    /// The checkpoint it restored from (`None`: no checkpoint yet, a fresh start).
    pub from_checkpoint: Option<u64>,
    /// Records committed at that checkpoint: where the restored side resumed.
    pub resumed_at: u64,
}

/// Both sides agreed: the committed output, the checkpoints and the restores.
#[derive(Debug, Clone, PartialEq)]
pub struct PortingReport<T> {
    /// The committed output (records up to the last checkpoint, then the rest of the run).
    pub records: Vec<StreamRecord<T>>,
    /// Every checkpoint taken, in order.
    pub checkpoints: Vec<CheckpointSummary>,
    /// Every injected failure and its restore, in order.
    pub restores: Vec<RestoreSummary>,
}

/// Where the port parts from the legacy source.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Divergence<T> {
    /// The committed outputs differ first at record `index` (`None` on a side that committed
    /// fewer records).
    Record {
        /// Position of the first differing record in the committed output.
        index: u64,
        /// What the legacy source committed there.
        legacy: Option<StreamRecord<T>>,
        /// What the reader committed there.
        reader: Option<StreamRecord<T>>,
        /// The checkpoint that committed the record on the legacy side (`None`: after the last
        /// checkpoint).
        checkpoint: Option<u64>,
        /// The checkpoint the legacy source had last restored from before emitting it.
        legacy_restored_from: Option<u64>,
        /// The checkpoint the reader had last restored from before emitting it.
        reader_restored_from: Option<u64>,
    },
    /// The same records were committed, but checkpoint `checkpoint` was taken after different
    /// numbers of records (`None`: that side took fewer checkpoints).
    Checkpoint {
        /// The checkpoint.
        checkpoint: u64,
        /// Records the legacy source had committed at it.
        legacy_records: Option<u64>,
        /// Records the reader had committed at it.
        reader_records: Option<u64>,
    },
}

fn record<T: fmt::Debug>(record: &Option<StreamRecord<T>>) -> String {
    match record {
        Some(r) => match r.timestamp {
            Some(ts) => format!("{:?} @ {ts}", r.value),
            None => format!("{:?}", r.value),
        },
        None => "nothing".to_string(),
    }
}

impl<T: fmt::Debug> fmt::Display for Divergence<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Divergence::Record {
                index,
                legacy,
                reader,
                checkpoint,
                legacy_restored_from,
                reader_restored_from,
            } => {
                write!(f, "the port diverges at record {index}")?;
                match checkpoint {
                    Some(id) => write!(f, " (committed by checkpoint {id})")?,
                    None => write!(f, " (after the last checkpoint)")?,
                }
                write!(
                    f,
                    ": the legacy source committed {}, the reader {}",
                    record(legacy),
                    record(reader)
                )?;
                for (side, from) in [
                    ("legacy source", legacy_restored_from),
                    ("reader", reader_restored_from),
                ] {
                    if let Some(from) = from {
                        write!(f, "; the {side} had restored from checkpoint {from}")?;
                    }
                }
                f.write_str(
                    "; compare what the reader's snapshot_state and restore_state keep with the \
                     state the legacy source updates in the locked section that emits this record",
                )
            }
            Divergence::Checkpoint {
                checkpoint,
                legacy_records,
                reader_records,
            } => {
                let count = |n: &Option<u64>| match n {
                    Some(n) => format!("{n} records"),
                    None => "never".to_string(),
                };
                write!(
                    f,
                    "checkpoint {checkpoint} was taken after {} on the legacy source but after {} \
                     on the reader; make one poll_next emit what one locked section of the legacy \
                     source emits, or schedule checkpoints at record counts both stop at",
                    count(legacy_records),
                    count(reader_records)
                )
            }
        }
    }
}

/// The kit could not confirm the port.
#[derive(Debug)]
#[non_exhaustive]
pub enum PortingError<T> {
    /// The two sides committed different output or checkpointed at different places.
    Diverged(Divergence<T>),
    /// A side failed (its function, reader, snapshot or restore returned an error).
    Failed {
        /// Which side.
        side: Side,
        /// What it failed with.
        error: OperatorError,
    },
    /// A side made no progress for the kit's timeout (a hang guard): it neither emitted, ended,
    /// nor (when cancelled) returned.
    Stalled {
        /// Which side.
        side: Side,
        /// Records it had emitted.
        records: u64,
    },
    /// `checkpoint_every(0)`.
    ZeroInterval,
}

impl<T> PortingError<T> {
    /// The divergence, if the sides diverged.
    pub fn divergence(&self) -> Option<&Divergence<T>> {
        match self {
            PortingError::Diverged(d) => Some(d),
            _ => None,
        }
    }
}

impl<T: fmt::Debug> fmt::Display for PortingError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortingError::Diverged(d) => fmt::Display::fmt(d, f),
            PortingError::Failed { side, error } => {
                write!(f, "{side} failed: {error}; fix that failure first")
            }
            PortingError::Stalled { side, records } => write!(
                f,
                "{side} made no progress after {records} records within the kit's timeout; make \
                 it emit, end, or return when cancelled (or raise the timeout)"
            ),
            PortingError::ZeroInterval => {
                f.write_str("checkpoint_every(0) checkpoints nothing; give at least 1 record")
            }
        }
    }
}

impl<T: fmt::Debug> std::error::Error for PortingError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PortingError::Failed { error, .. } => Some(error),
            _ => None,
        }
    }
}
