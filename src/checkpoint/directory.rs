//! The directory backend of [`CheckpointStorage`](super::CheckpointStorage).
//!
//! # Writing a checkpoint
//!
//! 1. Create `chk-<id>.inprogress-<nonce>/` next to the completed checkpoints.
//! 2. Write one state file per task into it, fsync each.
//! 3. Write `_manifest` (every file with its length and CRC32, itself checksummed), fsync it,
//!    and fsync the temporary directory so its entries are durable.
//! 4. Rename the temporary directory to `chk-<id>` and fsync the parent directory: from here on
//!    the checkpoint is completed and survives a crash.
//! 5. Apply retention: rename each too-old checkpoint to `chk-<id>.discard-<nonce>` (it stops
//!    being completed at once) and delete it.
//!
//! A crash before step 4 leaves a temporary directory, during step 5 a discard directory; both
//! are removed when the storage is next opened, as are `chk-<id>` directories without a manifest
//! or with a partly written one (which this protocol does not produce, but a copy or a filesystem
//! that reorders writes can).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use streamtask_core::state::TaskSnapshot;
use streamtask_core::sync::Mutex;

use super::CompletedCheckpoint;
use super::error::{Corruption, StorageError};
use super::format::{self, FormatError, Manifest, ManifestEntry};

/// Name of the manifest inside a checkpoint directory.
const MANIFEST: &str = "_manifest";
/// Prefix of every directory the storage owns.
const PREFIX: &str = "chk-";
/// Digits of a zero-padded id (`u64::MAX` has 20).
const ID_DIGITS: usize = 20;
/// Marks a checkpoint being written.
const IN_PROGRESS: &str = ".inprogress-";
/// Marks a checkpoint being deleted.
const DISCARD: &str = ".discard-";

/// Checkpoints in a directory.
#[derive(Debug)]
pub(super) struct DirectoryStorage {
    root: PathBuf,
    retained: usize,
    /// Serializes writers among clones, and numbers their temporary directories.
    writes: Mutex<u64>,
}

/// What a name in the root directory is.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    /// `chk-<id>`: a completed checkpoint, if it has an intact manifest.
    Checkpoint(u64),
    /// `chk-<id>.inprogress-*` or `chk-<id>.discard-*`: a write or delete that did not finish.
    Leftover,
    /// Anything else: not ours, left alone.
    Foreign,
}

fn classify(name: &str) -> Entry {
    let Some(rest) = name.strip_prefix(PREFIX) else {
        return Entry::Foreign;
    };
    let digits = rest
        .get(..ID_DIGITS)
        .filter(|d| d.bytes().all(|b| b.is_ascii_digit()));
    let (Some(digits), Some(tail)) = (digits, rest.get(ID_DIGITS..)) else {
        return Entry::Foreign;
    };
    match digits.parse() {
        Ok(id) if tail.is_empty() => Entry::Checkpoint(id),
        Ok(_) if tail.starts_with(IN_PROGRESS) || tail.starts_with(DISCARD) => Entry::Leftover,
        _ => Entry::Foreign,
    }
}

/// The id of a completed checkpoint's directory name `chk-<id>`; `None` for any other name.
pub(super) fn checkpoint_id_of(name: &str) -> Option<u64> {
    match classify(name) {
        Entry::Checkpoint(id) => Some(id),
        _ => None,
    }
}

fn dir_name(id: u64) -> String {
    format!("{PREFIX}{id:0width$}", width = ID_DIGITS)
}

impl DirectoryStorage {
    /// Opens (creating) `root` and removes leftovers of interrupted writes.
    pub(super) fn open(root: PathBuf, retained: usize) -> Result<Self, StorageError> {
        fs::create_dir_all(&root).map_err(StorageError::io(&root))?;
        let storage = DirectoryStorage {
            root,
            retained,
            writes: Mutex::new(0),
        };
        storage.remove_leftovers()?;
        Ok(storage)
    }

    /// A storage over `root` that only reads: no directory is created, nothing is cleaned.
    pub(super) fn read_only(root: PathBuf) -> Self {
        DirectoryStorage {
            root,
            retained: usize::MAX,
            writes: Mutex::new(0),
        }
    }

    /// The directory of checkpoint `id` (whether or not it exists).
    pub(super) fn checkpoint_dir(&self, id: u64) -> PathBuf {
        self.root.join(dir_name(id))
    }

    /// Removes every checkpoint and leftover this storage owns; returns the removed ids.
    pub(super) fn discard_all(&self) -> Result<Vec<u64>, StorageError> {
        let _writes = self.writes.lock();
        let mut ids = Vec::new();
        for (name, entry) in self.entries()? {
            match entry {
                Entry::Checkpoint(id) => ids.push(id),
                Entry::Leftover => {}
                Entry::Foreign => continue,
            }
            remove_path(&self.root.join(name))?;
        }
        sync_dir(&self.root)?;
        ids.sort_unstable();
        Ok(ids)
    }

    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    pub(super) fn retained(&self) -> usize {
        self.retained
    }

    fn remove_leftovers(&self) -> Result<(), StorageError> {
        let mut removed = false;
        for (name, entry) in self.entries()? {
            let path = self.root.join(&name);
            // Only names of unfinished writes and deletes are leftovers. A `chk-<id>`
            // directory appears by one rename after its manifest was fsynced, so one without
            // an intact manifest is damage, not an interrupted write: it stays, and `load`
            // reports it (never a silent fall back to an older checkpoint).
            let leftover = entry == Entry::Leftover;
            if leftover {
                log::info!(
                    "removing {}, left over by an interrupted write",
                    path.display()
                );
                remove_path(&path)?;
                removed = true;
            }
        }
        if removed {
            sync_dir(&self.root)?;
        }
        Ok(())
    }

    /// The names in the root directory with what they are.
    fn entries(&self) -> Result<Vec<(String, Entry)>, StorageError> {
        let mut out = Vec::new();
        let read = fs::read_dir(&self.root).map_err(StorageError::io(&self.root))?;
        for item in read {
            let item = item.map_err(StorageError::io(&self.root))?;
            let Ok(name) = item.file_name().into_string() else {
                continue;
            };
            let entry = classify(&name);
            out.push((name, entry));
        }
        Ok(out)
    }

    pub(super) fn completed_ids(&self) -> Result<Vec<u64>, StorageError> {
        let mut ids: Vec<u64> = self
            .entries()?
            .into_iter()
            .filter_map(|(name, entry)| match entry {
                Entry::Checkpoint(id) if self.root.join(name).is_dir() => Some(id),
                _ => None,
            })
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    pub(super) fn store(&self, checkpoint: &CompletedCheckpoint) -> Result<(), StorageError> {
        let mut writes = self.writes.lock();
        let final_dir = self.root.join(dir_name(checkpoint.id));
        if final_dir.exists() {
            return Err(StorageError::DuplicateCheckpoint { id: checkpoint.id });
        }
        *writes += 1;
        let temp = self.root.join(format!(
            "{}{IN_PROGRESS}{}-{}",
            dir_name(checkpoint.id),
            std::process::id(),
            *writes
        ));
        let written = write_checkpoint(&temp, checkpoint)
            .and_then(|()| fs::rename(&temp, &final_dir).map_err(StorageError::io(&final_dir)))
            .and_then(|()| sync_dir(&self.root));
        if let Err(err) = written {
            // Best effort: whatever is left is a leftover the next open removes anyway.
            if let Err(e) = fs::remove_dir_all(&temp)
                && e.kind() != io::ErrorKind::NotFound
            {
                log::warn!("cannot remove {}: {e}", temp.display());
            }
            return Err(err);
        }
        self.apply_retention(*writes);
        Ok(())
    }

    /// Deletes the checkpoints older than the `retained` newest. Failures are logged: the new
    /// checkpoint is durable whatever happens here.
    fn apply_retention(&self, nonce: u64) {
        let ids = match self.completed_ids() {
            Ok(ids) => ids,
            Err(err) => {
                log::warn!("cannot apply checkpoint retention: {err}");
                return;
            }
        };
        let excess = ids.len().saturating_sub(self.retained);
        for id in &ids[..excess] {
            let path = self.root.join(dir_name(*id));
            let discard = self.root.join(format!(
                "{}{DISCARD}{}-{nonce}",
                dir_name(*id),
                std::process::id()
            ));
            // Renaming first makes the removal atomic: a crash midway leaves a discard directory,
            // never a completed checkpoint with files missing.
            let removed = fs::rename(&path, &discard)
                .map_err(StorageError::io(&path))
                .and_then(|()| remove_path(&discard));
            match removed {
                Ok(()) => log::debug!("checkpoint {id} removed by retention"),
                Err(err) => log::warn!("cannot remove checkpoint {id}: {err}"),
            }
        }
        if excess > 0
            && let Err(err) = sync_dir(&self.root)
        {
            log::warn!("{err}");
        }
    }

    pub(super) fn load(&self, id: u64) -> Result<CompletedCheckpoint, StorageError> {
        let dir = self.root.join(dir_name(id));
        let manifest_path = dir.join(MANIFEST);
        let manifest_bytes = match fs::read(&manifest_path) {
            Ok(bytes) => bytes,
            // The directory exists but its manifest is gone: damage (see `remove_leftovers`).
            Err(e) if e.kind() == io::ErrorKind::NotFound && dir.is_dir() => {
                return Err(StorageError::MissingFile {
                    path: manifest_path,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StorageError::UnknownCheckpoint { id });
            }
            Err(e) => return Err(StorageError::io(manifest_path)(e)),
        };
        let manifest = format::decode_manifest(&manifest_bytes)
            .map_err(|e| format_error(&manifest_path, e))?;
        if manifest.id != id {
            return Err(StorageError::Corrupted {
                path: manifest_path,
                reason: Corruption::WrongCheckpoint {
                    expected: id,
                    found: manifest.id,
                },
            });
        }
        let mut tasks = std::collections::BTreeMap::new();
        for entry in &manifest.files {
            let snapshot = read_state_file(&dir, &manifest_path, entry)?;
            if tasks.insert(entry.task.clone(), snapshot).is_some() {
                return Err(StorageError::Corrupted {
                    path: manifest_path,
                    reason: Corruption::DuplicateName,
                });
            }
        }
        Ok(CompletedCheckpoint {
            id,
            timestamp: manifest.timestamp,
            tasks,
        })
    }
}

/// Writes every file of `checkpoint` into the new directory `dir`, durably.
fn write_checkpoint(dir: &Path, checkpoint: &CompletedCheckpoint) -> Result<(), StorageError> {
    fs::create_dir(dir).map_err(StorageError::io(dir))?;
    let mut files = Vec::with_capacity(checkpoint.tasks.len());
    for (index, (task, snapshot)) in checkpoint.tasks.iter().enumerate() {
        // Files are named by index: task names are arbitrary text, file names are not.
        let file = format!("task-{index}.state");
        let bytes = format::encode_snapshot(snapshot);
        write_durably(&dir.join(&file), &bytes)?;
        files.push(ManifestEntry {
            task: task.clone(),
            file,
            len: bytes.len() as u64,
            crc: crc32fast::hash(&bytes),
        });
    }
    let manifest = Manifest {
        id: checkpoint.id,
        timestamp: checkpoint.timestamp,
        files,
    };
    write_durably(&dir.join(MANIFEST), &format::encode_manifest(&manifest))?;
    sync_dir(dir)
}

pub(super) fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let mut file = File::create_new(path).map_err(StorageError::io(path))?;
    file.write_all(bytes).map_err(StorageError::io(path))?;
    file.sync_all().map_err(StorageError::io(path))
}

/// Reads and checks one state file against its manifest entry.
fn read_state_file(
    dir: &Path,
    manifest_path: &Path,
    entry: &ManifestEntry,
) -> Result<TaskSnapshot, StorageError> {
    let plain = !entry.file.is_empty()
        && entry.file != "."
        && entry.file != ".."
        && !entry.file.contains(['/', '\\']);
    if !plain {
        return Err(StorageError::Corrupted {
            path: manifest_path.to_path_buf(),
            reason: Corruption::InvalidFileName,
        });
    }
    let path = dir.join(&entry.file);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(StorageError::MissingFile { path });
        }
        Err(e) => return Err(StorageError::io(path)(e)),
    };
    let actual = bytes.len() as u64;
    if actual < entry.len {
        return Err(StorageError::Truncated {
            path,
            expected: entry.len,
            actual,
        });
    }
    if actual > entry.len {
        return Err(StorageError::Corrupted {
            path,
            reason: Corruption::LengthMismatch {
                expected: entry.len,
                actual,
            },
        });
    }
    let crc = crc32fast::hash(&bytes);
    if crc != entry.crc {
        return Err(StorageError::Corrupted {
            path,
            reason: Corruption::ChecksumMismatch {
                expected: entry.crc,
                actual: crc,
            },
        });
    }
    format::decode_snapshot(&bytes).map_err(|e| format_error(&path, e))
}

fn format_error(path: &Path, err: FormatError) -> StorageError {
    match err {
        FormatError::Truncated { needed, len } => StorageError::Truncated {
            path: path.to_path_buf(),
            expected: needed,
            actual: len,
        },
        FormatError::Corrupted(reason) => StorageError::Corrupted {
            path: path.to_path_buf(),
            reason,
        },
    }
}

fn remove_path(path: &Path) -> Result<(), StorageError> {
    let result = if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    match result {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StorageError::io(path)(e)),
        _ => Ok(()),
    }
}

/// Makes the entries of directory `dir` (creations, renames, removals) durable.
pub(super) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(StorageError::io(dir))
    }
    #[cfg(not(unix))]
    {
        // Other platforms cannot open a directory to sync it; their renames are durable once
        // the files they contain are.
        let _ = dir;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_id_and_classify_back() {
        assert_eq!(dir_name(7), "chk-00000000000000000007");
        assert!(dir_name(9) < dir_name(10));
        assert_eq!(classify(&dir_name(u64::MAX)), Entry::Checkpoint(u64::MAX));
        assert_eq!(
            classify("chk-00000000000000000007.inprogress-1-2"),
            Entry::Leftover
        );
        assert_eq!(
            classify("chk-00000000000000000007.discard-1-2"),
            Entry::Leftover
        );
        for foreign in [
            "chk-7",
            "notes.txt",
            "chk-0000000000000000000x",
            "chk-00000000000000000007.bak",
        ] {
            assert_eq!(classify(foreign), Entry::Foreign, "{foreign}");
        }
    }
}
