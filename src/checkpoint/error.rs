//! What can go wrong storing or loading a checkpoint: the storage's error and the kinds of
//! damage a checkpoint file can have.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What is wrong with a corrupted checkpoint file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Corruption {
    /// The file's CRC32 differs from the one recorded for it.
    ChecksumMismatch {
        /// The recorded checksum.
        expected: u32,
        /// The checksum of the bytes read.
        actual: u32,
    },
    /// The file is longer than recorded.
    LengthMismatch {
        /// The recorded length.
        expected: u64,
        /// The file's length.
        actual: u64,
    },
    /// The file does not start with the format's magic number: it is not a streamtask file.
    BadMagic,
    /// The file was written by an unknown format version.
    UnsupportedVersion(u16),
    /// Bytes follow the last field.
    TrailingBytes,
    /// A name is not UTF-8.
    InvalidText,
    /// A name appears twice (two entries with one key, or two files for one task).
    DuplicateName,
    /// A file name in the manifest is not a plain name inside the checkpoint's directory.
    InvalidFileName,
    /// The manifest's checksum matches but its fields contradict each other.
    Inconsistent,
    /// The manifest belongs to another checkpoint than its directory's name says.
    WrongCheckpoint {
        /// The id in the directory's name.
        expected: u64,
        /// The id in the manifest.
        found: u64,
    },
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::ChecksumMismatch { expected, actual } => write!(
                f,
                "checksum mismatch (recorded {expected:#010x}, read {actual:#010x})"
            ),
            Corruption::LengthMismatch { expected, actual } => {
                write!(f, "length {actual} differs from the recorded {expected}")
            }
            Corruption::BadMagic => f.write_str("not a streamtask checkpoint file (bad magic)"),
            Corruption::UnsupportedVersion(v) => write!(f, "unsupported format version {v}"),
            Corruption::TrailingBytes => f.write_str("unexpected bytes after the last field"),
            Corruption::InvalidText => f.write_str("a name is not valid UTF-8"),
            Corruption::DuplicateName => f.write_str("a name appears twice"),
            Corruption::InvalidFileName => {
                f.write_str("a listed file name points outside the checkpoint directory")
            }
            Corruption::Inconsistent => f.write_str("the manifest's fields contradict each other"),
            Corruption::WrongCheckpoint { expected, found } => {
                write!(
                    f,
                    "manifest of checkpoint {found} in the directory of {expected}"
                )
            }
        }
    }
}

/// A storage operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// A storage was asked to retain no checkpoint.
    #[error(
        "retaining 0 checkpoints would delete each checkpoint as soon as it is written; retain at \
         least 1"
    )]
    ZeroRetention,
    /// No completed checkpoint has this id.
    #[error(
        "checkpoint {id} is not stored (never completed, or removed by retention); restore from \
         one of the ids completed_ids lists, or use latest"
    )]
    UnknownCheckpoint {
        /// The id asked for.
        id: u64,
    },
    /// A checkpoint with this id is already stored.
    #[error(
        "checkpoint {id} is already stored; give every checkpoint a new id, continuing after the \
         newest stored one"
    )]
    DuplicateCheckpoint {
        /// The id stored twice.
        id: u64,
    },
    /// A file is shorter than it should be (an interrupted or lost write).
    #[error(
        "{} is truncated ({actual} of {expected} bytes): that checkpoint cannot be restored, \
         only an older one",
        path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// The length the manifest or the framing requires.
        expected: u64,
        /// The file's length.
        actual: u64,
    },
    /// A file's content is wrong.
    #[error(
        "{} is corrupted ({reason}): that checkpoint cannot be restored, only an older one",
        path.display()
    )]
    Corrupted {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: Corruption,
    },
    /// A file the manifest lists does not exist.
    #[error(
        "{} is missing: that checkpoint cannot be restored, only an older one",
        path.display()
    )]
    MissingFile {
        /// The missing file.
        path: PathBuf,
    },
    /// A path given to restore from is not a checkpoint directory.
    #[error(
        "{} is not a completed checkpoint; give a `chk-<id>` directory of a checkpoint \
         directory (one that holds a `_manifest`)",
        path.display()
    )]
    NotACheckpoint {
        /// The path.
        path: PathBuf,
    },
    /// A path given to restore a savepoint from is not one.
    #[error(
        "{} is not a savepoint (it has no `_metadata`); give the directory `--stop-with-savepoint` \
         printed (`savepoint-<id>-<millis>`)",
        path.display()
    )]
    NotASavepoint {
        /// The path.
        path: PathBuf,
    },
    /// A path given to restore a savepoint from is a file: a savepoint is a directory.
    #[error(
        "{} is a file, not a savepoint directory; give the directory `--stop-with-savepoint` \
         printed (`savepoint-<id>-<millis>`), not a file in it",
        path.display()
    )]
    SavepointIsAFile {
        /// The path.
        path: PathBuf,
    },
    /// Reading or writing a path failed.
    #[error(
        "i/o error on {}: {source}; check that the checkpoint directory exists, is writable and \
         has free space",
        path.display()
    )]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

impl StorageError {
    /// Whether this error is about a damaged checkpoint (truncated, corrupted, missing a file)
    /// rather than the storage as a whole; [`CheckpointStorage::latest`](super::CheckpointStorage::latest) skips such checkpoints.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            StorageError::Truncated { .. }
                | StorageError::Corrupted { .. }
                | StorageError::MissingFile { .. }
        )
    }

    pub(super) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> StorageError {
        let path = path.into();
        move |source| StorageError::Io { path, source }
    }
}
