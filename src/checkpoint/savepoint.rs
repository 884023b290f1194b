//! Savepoints: a completed checkpoint written as a self-contained directory a user owns.
//!
//! A checkpoint belongs to its checkpoint directory (retention deletes it, its manifest names
//! tasks of one job shape). A savepoint is taken on request, lives wherever the user says,
//! may be moved or copied, is never deleted by retention, and describes itself: its
//! `_metadata` records the format version, the job's max parallelism and, per vertex, its
//! parallelism and the operator id of every state entry, so a changed job can find its
//! operators' state (see `src/job/identity.rs`).
//!
//! # Layout
//!
//! ```text
//! <dir>/savepoint-<id>-<millis>/_metadata      header line (format, version, CRC32 of the
//!                                              rest), then JSON: shape and files
//! <dir>/savepoint-<id>-<millis>/task-0.state   one task's entries, as in a checkpoint
//! ```
//!
//! Written as a checkpoint is: into `.savepoint-...inprogress` next to it, each file fsynced,
//! the metadata last, renamed, the parent fsynced. Paths inside are relative, so the directory
//! restores from wherever it is moved.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::CompletedCheckpoint;
use super::directory::{sync_dir, write_durably};
use super::error::{Corruption, StorageError};
use super::format;

/// The savepoint format this version writes and reads.
pub const SAVEPOINT_FORMAT_VERSION: u32 = 1;

const METADATA: &str = "_metadata";
const HEADER: &str = "streamtask-savepoint";

/// One state entry of a vertex's tasks and the operator it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateEntry {
    /// The entry's key in each task's snapshot (`source`, `operator-<index>`).
    pub key: String,
    /// The operator's stable id (its uid, else its name).
    pub operator_id: String,
}

/// A vertex as a savepoint records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexShape {
    /// The vertex's name; its tasks are `<name>#<subtask>`.
    pub name: String,
    /// Its parallelism when the savepoint was taken.
    pub parallelism: usize,
    /// The state entries its tasks may hold.
    pub states: Vec<StateEntry>,
    /// What its source read, as the source declared it (`DataStream::source_identity`): a
    /// source's state is a position in that input, so a restore into a job whose source
    /// declares another identity is refused. `None`: not a source, or none declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_identity: Option<String>,
}

/// One state file of a savepoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileEntry {
    task: String,
    file: String,
    len: u64,
    crc: u32,
}

/// What a savepoint's `_metadata` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavepointMetadata {
    /// [`SAVEPOINT_FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// The id of the checkpoint the savepoint is.
    pub checkpoint_id: u64,
    /// When it was triggered (processing time, ms).
    pub timestamp: i64,
    /// The model the job ran under (informative: a savepoint restores under any model whose
    /// operators read the same state).
    pub model: String,
    /// The job's max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// The job's vertices.
    pub vertices: Vec<VertexShape>,
    files: Vec<FileEntry>,
}

/// A savepoint read back: its metadata and every task's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Savepoint {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its metadata.
    pub metadata: SavepointMetadata,
    /// The state, by the task names of the job that wrote it.
    pub checkpoint: CompletedCheckpoint,
}

impl Savepoint {
    /// Writes `checkpoint` as a new savepoint directory inside `parent` (created if missing)
    /// and returns its path.
    ///
    /// # Errors
    ///
    /// [`StorageError::Io`] if writing fails (nothing is left under the final name then).
    pub fn write(
        parent: &Path,
        checkpoint: &CompletedCheckpoint,
        model: &str,
        max_parallelism: u32,
        vertices: Vec<VertexShape>,
    ) -> Result<PathBuf, StorageError> {
        fs::create_dir_all(parent).map_err(StorageError::io(parent))?;
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let name = format!("savepoint-{:06}-{millis}", checkpoint.id);
        let final_dir = parent.join(&name);
        let temp = parent.join(format!(".{name}.inprogress-{}", std::process::id()));
        let written = write_into(&temp, checkpoint, model, max_parallelism, vertices)
            .and_then(|()| fs::rename(&temp, &final_dir).map_err(StorageError::io(&final_dir)))
            .and_then(|()| sync_dir(parent));
        if let Err(err) = written {
            let _ = fs::remove_dir_all(&temp);
            return Err(err);
        }
        Ok(final_dir)
    }

    /// Whether the savepoint was taken by a draining stop-with-savepoint (its tasks hold
    /// [`TaskSnapshot::FINISHED`](streamtask_core::state::TaskSnapshot::FINISHED)): the job
    /// ended its input before it, and a restore of it starts after end of input (its sources
    /// read nothing, so the restored job ends at once with no new output).
    pub fn is_drained(&self) -> bool {
        self.checkpoint.tasks.values().any(|t| {
            t.get(streamtask_core::state::TaskSnapshot::FINISHED)
                .is_some()
        })
    }

    /// Reads the savepoint in directory `path`, every file checked against its length and
    /// checksum.
    ///
    /// # Errors
    ///
    /// [`StorageError::NotASavepoint`] if `path` holds no `_metadata`,
    /// [`StorageError::SavepointIsAFile`] if it is a file;
    /// [`StorageError::Corrupted`] or [`StorageError::Truncated`] for a damaged file,
    /// [`StorageError::MissingFile`] for a missing one, [`StorageError::Io`] if reading fails.
    pub fn load(path: &Path) -> Result<Savepoint, StorageError> {
        // Reading `<file>/_metadata` would fail with "not a directory", which names no fix.
        if fs::metadata(path).is_ok_and(|m| !m.is_dir()) {
            return Err(StorageError::SavepointIsAFile {
                path: path.to_path_buf(),
            });
        }
        let meta_path = path.join(METADATA);
        let bytes = match fs::read(&meta_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StorageError::NotASavepoint {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(StorageError::io(&meta_path)(e)),
        };
        let metadata = decode_metadata(&meta_path, &bytes)?;
        let mut tasks = BTreeMap::new();
        for entry in &metadata.files {
            let plain = !entry.file.is_empty()
                && !entry.file.starts_with('.')
                && !entry.file.contains(['/', '\\']);
            if !plain {
                return Err(corrupted(&meta_path, Corruption::InvalidFileName));
            }
            let file = path.join(&entry.file);
            let data = match fs::read(&file) {
                Ok(data) => data,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(StorageError::MissingFile { path: file });
                }
                Err(e) => return Err(StorageError::io(&file)(e)),
            };
            let actual = data.len() as u64;
            if actual < entry.len {
                return Err(StorageError::Truncated {
                    path: file,
                    expected: entry.len,
                    actual,
                });
            }
            if actual > entry.len {
                return Err(corrupted(
                    &file,
                    Corruption::LengthMismatch {
                        expected: entry.len,
                        actual,
                    },
                ));
            }
            let crc = crc32fast::hash(&data);
            if crc != entry.crc {
                return Err(corrupted(
                    &file,
                    Corruption::ChecksumMismatch {
                        expected: entry.crc,
                        actual: crc,
                    },
                ));
            }
            let snapshot = format::decode_snapshot(&data).map_err(|e| match e {
                format::FormatError::Truncated { needed, len } => StorageError::Truncated {
                    path: file.clone(),
                    expected: needed,
                    actual: len,
                },
                format::FormatError::Corrupted(reason) => corrupted(&file, reason),
            })?;
            if tasks.insert(entry.task.clone(), snapshot).is_some() {
                return Err(corrupted(&meta_path, Corruption::DuplicateName));
            }
        }
        let checkpoint = CompletedCheckpoint {
            id: metadata.checkpoint_id,
            timestamp: metadata.timestamp,
            tasks,
        };
        Ok(Savepoint {
            path: path.to_path_buf(),
            metadata,
            checkpoint,
        })
    }
}

fn corrupted(path: &Path, reason: Corruption) -> StorageError {
    StorageError::Corrupted {
        path: path.to_path_buf(),
        reason,
    }
}

fn write_into(
    dir: &Path,
    checkpoint: &CompletedCheckpoint,
    model: &str,
    max_parallelism: u32,
    vertices: Vec<VertexShape>,
) -> Result<(), StorageError> {
    if dir.exists() {
        // A leftover of an interrupted write by this process id: never ours to keep.
        fs::remove_dir_all(dir).map_err(StorageError::io(dir))?;
    }
    fs::create_dir(dir).map_err(StorageError::io(dir))?;
    let mut files = Vec::with_capacity(checkpoint.tasks.len());
    for (index, (task, snapshot)) in checkpoint.tasks.iter().enumerate() {
        let file = format!("task-{index}.state");
        let bytes = format::encode_snapshot(snapshot);
        write_durably(&dir.join(&file), &bytes)?;
        files.push(FileEntry {
            task: task.clone(),
            file,
            len: bytes.len() as u64,
            crc: crc32fast::hash(&bytes),
        });
    }
    let metadata = SavepointMetadata {
        format_version: SAVEPOINT_FORMAT_VERSION,
        checkpoint_id: checkpoint.id,
        timestamp: checkpoint.timestamp,
        model: model.to_string(),
        max_parallelism,
        vertices,
        files,
    };
    let body = serde_json::to_vec_pretty(&metadata).map_err(|e| StorageError::Io {
        path: dir.join(METADATA),
        source: std::io::Error::other(e),
    })?;
    let mut bytes = format!(
        "{HEADER} {SAVEPOINT_FORMAT_VERSION} {:08x}\n",
        crc32fast::hash(&body)
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    write_durably(&dir.join(METADATA), &bytes)?;
    sync_dir(dir)
}

fn decode_metadata(path: &Path, bytes: &[u8]) -> Result<SavepointMetadata, StorageError> {
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| corrupted(path, Corruption::BadMagic))?;
    let header = std::str::from_utf8(&bytes[..newline])
        .map_err(|_| corrupted(path, Corruption::InvalidText))?;
    let body = &bytes[newline + 1..];
    let mut parts = header.split(' ');
    if parts.next() != Some(HEADER) {
        return Err(corrupted(path, Corruption::BadMagic));
    }
    let version: u32 = parts
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| corrupted(path, Corruption::BadMagic))?;
    if version != SAVEPOINT_FORMAT_VERSION {
        return Err(corrupted(
            path,
            Corruption::UnsupportedVersion(u16::try_from(version).unwrap_or(u16::MAX)),
        ));
    }
    let expected = parts
        .next()
        .and_then(|c| u32::from_str_radix(c, 16).ok())
        .ok_or_else(|| corrupted(path, Corruption::BadMagic))?;
    let actual = crc32fast::hash(body);
    if actual != expected {
        return Err(corrupted(
            path,
            Corruption::ChecksumMismatch { expected, actual },
        ));
    }
    let metadata: SavepointMetadata =
        serde_json::from_slice(body).map_err(|_| corrupted(path, Corruption::Inconsistent))?;
    if metadata.format_version != version {
        return Err(corrupted(path, Corruption::Inconsistent));
    }
    Ok(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamtask_core::state::TaskSnapshot;

    fn sample() -> CompletedCheckpoint {
        let mut snap = TaskSnapshot::new();
        snap.put_value(TaskSnapshot::SOURCE, &7u64).unwrap();
        CompletedCheckpoint {
            id: 4,
            timestamp: 99,
            tasks: BTreeMap::from([("orders#0".to_string(), snap)]),
        }
    }

    fn shape() -> Vec<VertexShape> {
        vec![VertexShape {
            name: "orders".into(),
            parallelism: 1,
            states: vec![StateEntry {
                key: "source".into(),
                operator_id: "orders".into(),
            }],
            source_identity: None,
        }]
    }

    #[test]
    fn a_savepoint_restores_after_being_moved() {
        let dir = tempfile::tempdir().unwrap();
        let path = Savepoint::write(dir.path(), &sample(), "legacy", 128, shape()).unwrap();
        let moved = dir.path().join("elsewhere");
        fs::rename(&path, &moved).unwrap();
        let back = Savepoint::load(&moved).unwrap();
        assert_eq!(back.checkpoint, sample());
        assert_eq!(back.metadata.vertices, shape());
        assert_eq!(back.metadata.max_parallelism, 128);
        assert_eq!(back.metadata.format_version, SAVEPOINT_FORMAT_VERSION);
    }

    #[test]
    fn a_damaged_savepoint_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = Savepoint::write(dir.path(), &sample(), "legacy", 128, shape()).unwrap();
        let state = path.join("task-0.state");
        let mut bytes = fs::read(&state).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&state, bytes).unwrap();
        assert!(matches!(
            Savepoint::load(&path),
            Err(StorageError::Corrupted {
                reason: Corruption::ChecksumMismatch { .. },
                ..
            })
        ));
        let meta = path.join(METADATA);
        let mut bytes = fs::read(&meta).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 0x01;
        fs::write(&meta, bytes).unwrap();
        assert!(matches!(
            Savepoint::load(&path),
            Err(StorageError::Corrupted { .. })
        ));
        assert!(matches!(
            Savepoint::load(dir.path()),
            Err(StorageError::NotASavepoint { .. })
        ));
    }
}
