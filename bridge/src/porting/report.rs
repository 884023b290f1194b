//! What the porting kit reports: the agreed output, or where the two sides part.

use std::fmt;

use streamtask_core::operator::Emitted;
use streamtask_core::{OperatorError, StreamRecord, StreamStatus};

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
#[non_exhaustive]
pub struct PortingReport<T> {
    /// The committed records (records up to the last checkpoint, then the rest of the run).
    pub records: Vec<StreamRecord<T>>,
    /// Every committed element in order: records, watermarks and status changes.
    pub elements: Vec<Emitted<T>>,
    /// Every checkpoint taken, in order.
    pub checkpoints: Vec<CheckpointSummary>,
    /// Every injected failure and its restore, in order.
    pub restores: Vec<RestoreSummary>,
    /// The restores the kit checked at the checkpoints (besides the scheduled failures), each
    /// run to the end and compared with the legacy source restored from the same checkpoint.
    pub restores_checked: Vec<(u64, RestoreCheck)>,
}

/// A restore the kit tries at every checkpoint: which side restores from whose snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RestoreCheck {
    /// The reader from its own snapshot (always).
    ReaderFromReader,
    /// The reader from the legacy source's snapshot (a port with a declared
    /// [`LegacyStateCompat`](crate::LegacyStateCompat), [`PortingKit::ported`](super::PortingKit::ported)).
    ReaderFromLegacy,
    /// The legacy source from the reader's snapshot (the compatibility declared both ways:
    /// `to_legacy_state` returns the state).
    LegacyFromReader,
}

impl fmt::Display for RestoreCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RestoreCheck::ReaderFromReader => "the reader restored from its own snapshot",
            RestoreCheck::ReaderFromLegacy => {
                "the reader restored from the legacy source's snapshot"
            }
            RestoreCheck::LegacyFromReader => {
                "the legacy source restored from the reader's snapshot"
            }
        })
    }
}

impl RestoreCheck {
    /// What to look at when this restore diverges.
    fn fix(self) -> &'static str {
        match self {
            RestoreCheck::ReaderFromReader => {
                "make snapshot_state return the position the reader has emitted up to, and \
                 restore_state continue from exactly there"
            }
            RestoreCheck::ReaderFromLegacy => {
                "make restore_legacy_state continue where the legacy source with that state \
                 continues"
            }
            RestoreCheck::LegacyFromReader => {
                "make to_legacy_state return the state the legacy source has after emitting \
                 what the reader has emitted"
            }
        }
    }
}

/// Where the port parts from the legacy source.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Divergence<T> {
    /// The committed streams (records with timestamps, watermarks, status changes) differ
    /// first at element `index` (`None` on a side that committed fewer elements).
    Element {
        /// Position of the first differing element in the committed stream.
        index: u64,
        /// What the legacy source committed there.
        legacy: Option<Emitted<T>>,
        /// What the reader committed there.
        reader: Option<Emitted<T>>,
        /// The checkpoint the element follows on the legacy side (`None`: before the first).
        after_checkpoint: Option<u64>,
        /// The checkpoint the legacy source had last restored from before emitting it.
        legacy_restored_from: Option<u64>,
        /// The checkpoint the reader had last restored from before emitting it.
        reader_restored_from: Option<u64>,
    },
    /// The same elements were committed, but checkpoint `checkpoint` was taken after different
    /// numbers of records (`None`: that side took fewer checkpoints).
    Checkpoint {
        /// The checkpoint.
        checkpoint: u64,
        /// Records the legacy source had committed at it.
        legacy_records: Option<u64>,
        /// Records the reader had committed at it.
        reader_records: Option<u64>,
    },
    /// Restored from checkpoint `checkpoint` as `restore` says, the stream that follows
    /// differs from what the legacy source restored from its own snapshot of that checkpoint
    /// emits, first at element `index` after the restore.
    Restore {
        /// The checkpoint restored from.
        checkpoint: u64,
        /// Records committed at that checkpoint: where the restore resumed.
        records: u64,
        /// Who restored from whose snapshot.
        restore: RestoreCheck,
        /// Position of the first differing element after the restore (0: the first one).
        index: u64,
        /// What the legacy source restored from its own snapshot emitted there.
        expected: Option<Emitted<T>>,
        /// What the restored side emitted there.
        got: Option<Emitted<T>>,
    },
}

/// How the kit's reports name an element (`"p1:3" @ 17`, `watermark 20`, `an idle mark`,
/// `nothing` for a missing one): shared by every porting report, so they read alike.
pub fn describe_element<T: fmt::Debug>(element: Option<&Emitted<T>>) -> String {
    match element {
        Some(Emitted::Record(r)) => match r.timestamp {
            Some(ts) => format!("{:?} @ {ts}", r.value),
            None => format!("{:?}", r.value),
        },
        Some(Emitted::Watermark(w)) if w.is_max() => "the end of event time".to_string(),
        Some(Emitted::Watermark(w)) => format!("watermark {}", w.timestamp()),
        Some(Emitted::Status(StreamStatus::Idle)) => "an idle mark".to_string(),
        Some(Emitted::Status(StreamStatus::Active)) => "an active mark".to_string(),
        Some(Emitted::Barrier(b)) => format!("barrier {}", b.id),
        Some(Emitted::EndOfInput) => "the end of input".to_string(),
        None => "nothing".to_string(),
    }
}

/// What to fix when these two elements differ.
fn element_fix<T>(a: &Option<Emitted<T>>, b: &Option<Emitted<T>>) -> &'static str {
    let is = |f: fn(&Emitted<T>) -> bool| a.as_ref().is_some_and(f) || b.as_ref().is_some_and(f);
    if is(|e| matches!(e, Emitted::Status(_))) {
        "mark the reader idle (ReaderOutput::mark_idle) where the legacy source marks itself \
         idle"
    } else if is(|e| matches!(e, Emitted::Watermark(_))) {
        "emit the watermarks the legacy source emits (ReaderOutput::emit_watermark), in the \
         same place among the records"
    } else {
        "compare what the reader's snapshot_state and restore_state keep with the state the \
         legacy source updates in the locked section that emits this record, and the timestamps \
         both give it"
    }
}

impl<T: fmt::Debug> fmt::Display for Divergence<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Divergence::Element {
                index,
                legacy,
                reader,
                after_checkpoint,
                legacy_restored_from,
                reader_restored_from,
            } => {
                write!(f, "the port diverges at element {index}")?;
                match after_checkpoint {
                    Some(id) => write!(f, " (after checkpoint {id})")?,
                    None => write!(f, " (before the first checkpoint)")?,
                }
                write!(
                    f,
                    ": the legacy source committed {}, the reader {}",
                    describe_element(legacy.as_ref()),
                    describe_element(reader.as_ref())
                )?;
                for (side, from) in [
                    ("legacy source", legacy_restored_from),
                    ("reader", reader_restored_from),
                ] {
                    if let Some(from) = from {
                        write!(f, "; the {side} had restored from checkpoint {from}")?;
                    }
                }
                write!(f, "; {}", element_fix(legacy, reader))
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
            Divergence::Restore {
                checkpoint,
                records,
                restore,
                index,
                expected,
                got,
            } => write!(
                f,
                "after checkpoint {checkpoint} (at record {records}), {restore} diverges at \
                 element {index} after the restore: the legacy source restored from its own \
                 snapshot emits {}, the restored side {}; {}",
                describe_element(expected.as_ref()),
                describe_element(got.as_ref()),
                restore.fix()
            ),
        }
    }
}

/// The kit could not confirm the port.
#[derive(Debug)]
#[non_exhaustive]
pub enum PortingError<T> {
    /// The two sides committed different output or checkpointed at different places.
    Diverged(Box<Divergence<T>>),
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
    /// A side could not read the other side's snapshot of checkpoint `checkpoint` (a port
    /// whose declared `LegacyState` is not what the legacy source writes, or the other way).
    IncompatibleState {
        /// The checkpoint whose snapshot was restored.
        checkpoint: u64,
        /// Who restored from whose snapshot.
        restore: RestoreCheck,
        /// What the restore failed with.
        error: OperatorError,
    },
    /// `checkpoint_every(0)`.
    ZeroInterval,
}

impl<T> PortingError<T> {
    /// The sides diverged as `divergence` says.
    pub fn diverged(divergence: Divergence<T>) -> Self {
        PortingError::Diverged(Box::new(divergence))
    }

    /// The divergence, if the sides diverged.
    pub fn divergence(&self) -> Option<&Divergence<T>> {
        match self {
            PortingError::Diverged(d) => Some(d.as_ref()),
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
            PortingError::IncompatibleState {
                checkpoint,
                restore,
                error,
            } => write!(
                f,
                "{restore} failed at checkpoint {checkpoint}: {error}; the state bytes of the \
                 legacy source and its port are not compatible: declare as the port's \
                 LegacyState the legacy source's State type (and make to_legacy_state return \
                 that type's value)"
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
            PortingError::Failed { error, .. } | PortingError::IncompatibleState { error, .. } => {
                Some(error)
            }
            _ => None,
        }
    }
}
