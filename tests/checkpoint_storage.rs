//! `CheckpointStorage`: what is stored comes back, retention, leftovers of interrupted writes,
//! damaged files as typed errors, and restore from the newest intact checkpoint.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use streamtask::checkpoint::{CheckpointStorage, CompletedCheckpoint, Corruption, StorageError};
use streamtask_core::state::TaskSnapshot;

/// A checkpoint `id` of two tasks whose state depends on `id`.
fn checkpoint(id: u64) -> CompletedCheckpoint {
    let mut source = TaskSnapshot::new();
    source.put_value(TaskSnapshot::SOURCE, &(id * 10)).unwrap();
    let mut sink = TaskSnapshot::new();
    sink.put(TaskSnapshot::operator_key(0), vec![id as u8; 64]);
    sink.put(TaskSnapshot::operator_key(1), Vec::new());
    CompletedCheckpoint {
        id,
        timestamp: 1_000 + id as i64,
        tasks: BTreeMap::from([("source".to_string(), source), ("sink".to_string(), sink)]),
    }
}

/// The directory of checkpoint `id`, as the documented layout names it.
fn checkpoint_dir(root: &Path, id: u64) -> PathBuf {
    root.join(format!("chk-{id:020}"))
}

/// The state file of the first task (in name order: "sink") of checkpoint `id`.
fn first_task_file(root: &Path, id: u64) -> PathBuf {
    checkpoint_dir(root, id).join("task-0.state")
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x5a;
    fs::write(path, bytes).unwrap();
}

fn truncate(path: &Path, keep: u64) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(keep).unwrap();
    file.sync_all().unwrap();
}

/// Both kinds of storage, for the behaviour they share.
fn each_storage(retained: usize, check: impl Fn(&str, CheckpointStorage)) {
    check("memory", CheckpointStorage::in_memory(retained).unwrap());
    let dir = tempfile::tempdir().unwrap();
    check(
        "directory",
        CheckpointStorage::directory(dir.path(), retained).unwrap(),
    );
}

#[test]
fn smoke() {
    each_storage(1, |kind, storage| {
        storage.store(&checkpoint(1)).unwrap();
        assert_eq!(storage.load(1).unwrap(), checkpoint(1), "{kind}");
        assert_eq!(storage.latest().unwrap(), Some(checkpoint(1)), "{kind}");
    });
}

#[test]
fn a_stored_checkpoint_loads_back_unchanged_also_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let mut odd = checkpoint(7);
    let mut unicode = TaskSnapshot::new();
    unicode.put("ключ/../with slash", (0..=255).collect());
    odd.tasks.insert("задача 1/2".to_string(), unicode);
    odd.tasks.insert("empty".to_string(), TaskSnapshot::new());
    odd.timestamp = -5;
    {
        let storage = CheckpointStorage::directory(dir.path(), 3).unwrap();
        storage.store(&odd).unwrap();
        assert_eq!(storage.load(7).unwrap(), odd);
    }
    let reopened = CheckpointStorage::directory(dir.path(), 3).unwrap();
    assert_eq!(reopened.completed_ids().unwrap(), vec![7]);
    assert_eq!(reopened.load(7).unwrap(), odd);
    assert_eq!(reopened.path(), Some(dir.path()));
    assert_eq!(reopened.retained(), 3);
}

#[test]
fn a_checkpoint_without_tasks_round_trips() {
    each_storage(1, |kind, storage| {
        let empty = CompletedCheckpoint {
            id: 1,
            timestamp: 0,
            tasks: BTreeMap::new(),
        };
        storage.store(&empty).unwrap();
        assert_eq!(storage.load(1).unwrap(), empty, "{kind}");
    });
}

#[test]
fn retention_keeps_the_newest_n() {
    each_storage(3, |kind, storage| {
        for id in 1..=6 {
            storage.store(&checkpoint(id)).unwrap();
        }
        assert_eq!(storage.completed_ids().unwrap(), vec![4, 5, 6], "{kind}");
        assert!(matches!(
            storage.load(3),
            Err(StorageError::UnknownCheckpoint { id: 3 })
        ));
        assert_eq!(storage.load(4).unwrap(), checkpoint(4), "{kind}");
    });
}

#[test]
fn retention_leaves_nothing_behind_in_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 2).unwrap();
    for id in 1..=5 {
        storage.store(&checkpoint(id)).unwrap();
    }
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "chk-00000000000000000004".to_string(),
            "chk-00000000000000000005".to_string()
        ]
    );
}

#[test]
fn zero_retention_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    for result in [
        CheckpointStorage::in_memory(0),
        CheckpointStorage::directory(dir.path(), 0),
    ] {
        let err = result.unwrap_err();
        assert!(matches!(err, StorageError::ZeroRetention));
        assert!(err.to_string().contains("retain at least 1"), "{err}");
    }
}

#[test]
fn an_unknown_id_is_a_typed_error_naming_the_fix() {
    each_storage(2, |kind, storage| {
        storage.store(&checkpoint(1)).unwrap();
        let err = storage.load(42).unwrap_err();
        assert!(
            matches!(err, StorageError::UnknownCheckpoint { id: 42 }),
            "{kind}: {err:?}"
        );
        assert!(err.to_string().contains("completed_ids"), "{err}");
    });
}

#[test]
fn storing_an_id_twice_is_a_typed_error_and_keeps_the_first() {
    each_storage(2, |kind, storage| {
        storage.store(&checkpoint(1)).unwrap();
        let mut other = checkpoint(1);
        other.timestamp = 99;
        let err = storage.store(&other).unwrap_err();
        assert!(
            matches!(err, StorageError::DuplicateCheckpoint { id: 1 }),
            "{kind}: {err:?}"
        );
        assert_eq!(storage.load(1).unwrap(), checkpoint(1), "{kind}");
    });
}

#[test]
fn an_empty_storage_has_no_latest() {
    each_storage(1, |kind, storage| {
        assert_eq!(storage.latest().unwrap(), None, "{kind}");
        assert!(storage.completed_ids().unwrap().is_empty(), "{kind}");
    });
}

#[test]
fn clones_share_one_storage() {
    each_storage(2, |kind, storage| {
        let writer = storage.clone();
        writer.store(&checkpoint(1)).unwrap();
        assert_eq!(storage.completed_ids().unwrap(), vec![1], "{kind}");
    });
}

#[test]
fn leftovers_of_an_interrupted_write_are_removed_on_open_but_damaged_checkpoints_stay() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    {
        let storage = CheckpointStorage::directory(root, 5).unwrap();
        storage.store(&checkpoint(1)).unwrap();
        storage.store(&checkpoint(4)).unwrap();
    }
    // A crash while writing checkpoint 2: its temporary directory, half written.
    let temp = root.join("chk-00000000000000000002.inprogress-123-1");
    fs::create_dir(&temp).unwrap();
    fs::write(temp.join("task-0.state"), b"STKS\x01").unwrap();
    // A crash while deleting an old checkpoint.
    fs::create_dir(root.join("chk-00000000000000000000.discard-123-1")).unwrap();
    // A checkpoint directory without a manifest. A `chk-<id>` name appears by one rename after
    // the manifest was fsynced, so this is damage, not an interrupted write; removing it
    // silently would fall back to an older checkpoint and duplicate committed output.
    let no_manifest = checkpoint_dir(root, 3);
    fs::create_dir(&no_manifest).unwrap();
    fs::write(no_manifest.join("task-0.state"), b"STKS").unwrap();
    // A checkpoint whose manifest was cut short: damage too.
    let partial = checkpoint_dir(root, 4).join("_manifest");
    let len = fs::metadata(&partial).unwrap().len();
    truncate(&partial, len / 2);
    // Something that is not the storage's: left alone.
    fs::write(root.join("README"), b"not a checkpoint").unwrap();

    let storage = CheckpointStorage::directory(root, 5).unwrap();
    assert_eq!(storage.completed_ids().unwrap(), vec![1, 3, 4]);
    // The strict restore names the damaged newest checkpoint; only the explicit fall back
    // skips it.
    let err = storage.newest().unwrap_err();
    assert!(matches!(err, StorageError::Truncated { .. }), "{err}");
    assert!(
        err.to_string().contains("chk-00000000000000000004"),
        "{err}"
    );
    assert!(matches!(
        storage.load(3),
        Err(StorageError::MissingFile { .. })
    ));
    assert_eq!(storage.latest().unwrap(), Some(checkpoint(1)));
    let mut names: Vec<String> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "README".to_string(),
            "chk-00000000000000000001".to_string(),
            "chk-00000000000000000003".to_string(),
            "chk-00000000000000000004".to_string(),
        ]
    );
    // The id of the leftover is free again.
    storage.store(&checkpoint(2)).unwrap();
    assert_eq!(storage.completed_ids().unwrap(), vec![1, 2, 3, 4]);
}

#[test]
fn a_checkpoint_directory_without_its_manifest_is_damage_not_absence() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    storage.store(&checkpoint(1)).unwrap();
    fs::create_dir(checkpoint_dir(dir.path(), 2)).unwrap();
    assert_eq!(storage.completed_ids().unwrap(), vec![1, 2]);
    assert!(matches!(
        storage.load(2),
        Err(StorageError::MissingFile { .. })
    ));
    assert!(matches!(
        storage.newest(),
        Err(StorageError::MissingFile { .. })
    ));
    assert_eq!(storage.latest().unwrap().unwrap().id, 1);
}

#[test]
fn load_path_reads_a_checkpoint_directory_and_discard_all_empties_the_storage() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    storage.store(&checkpoint(1)).unwrap();
    storage.store(&checkpoint(2)).unwrap();
    let path = storage.checkpoint_path(2).unwrap();
    assert_eq!(CheckpointStorage::load_path(&path).unwrap(), checkpoint(2));
    assert!(matches!(
        CheckpointStorage::load_path(dir.path()),
        Err(StorageError::NotACheckpoint { .. })
    ));
    assert_eq!(storage.discard_all().unwrap(), vec![1, 2]);
    assert!(storage.completed_ids().unwrap().is_empty());
    assert!(matches!(
        CheckpointStorage::load_path(&path),
        Err(StorageError::NotACheckpoint { .. })
    ));
}

#[test]
fn a_flipped_byte_is_a_corrupted_error_and_latest_skips_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    storage.store(&checkpoint(1)).unwrap();
    storage.store(&checkpoint(2)).unwrap();
    let file = first_task_file(dir.path(), 2);
    flip_byte(&file, 20);

    let err = storage.load(2).unwrap_err();
    match &err {
        StorageError::Corrupted {
            path,
            reason: Corruption::ChecksumMismatch { expected, actual },
        } => {
            assert_eq!(path, &file);
            assert_ne!(expected, actual);
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
    assert!(err.is_damage());
    assert!(err.to_string().contains("only an older one"), "{err}");
    assert_eq!(storage.latest().unwrap(), Some(checkpoint(1)));
    // Damaged, not interrupted: reopening keeps it, so it can be inspected.
    let reopened = CheckpointStorage::directory(dir.path(), 5).unwrap();
    assert_eq!(reopened.completed_ids().unwrap(), vec![1, 2]);
}

#[test]
fn a_flipped_byte_in_the_manifest_is_a_corrupted_error() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    storage.store(&checkpoint(1)).unwrap();
    storage.store(&checkpoint(2)).unwrap();
    let manifest = checkpoint_dir(dir.path(), 2).join("_manifest");
    // Past the header (magic, version, body length): inside the body.
    flip_byte(&manifest, 20);
    assert!(matches!(
        storage.load(2),
        Err(StorageError::Corrupted {
            reason: Corruption::ChecksumMismatch { .. },
            ..
        })
    ));
    assert_eq!(storage.latest().unwrap().unwrap().id, 1);
}

#[test]
fn a_file_that_is_not_ours_is_bad_magic() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    storage.store(&checkpoint(1)).unwrap();
    let manifest = checkpoint_dir(dir.path(), 1).join("_manifest");
    flip_byte(&manifest, 0);
    assert!(matches!(
        storage.load(1),
        Err(StorageError::Corrupted {
            reason: Corruption::BadMagic,
            ..
        })
    ));
}

#[test]
fn a_truncated_file_is_a_truncated_error_and_latest_skips_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    storage.store(&checkpoint(1)).unwrap();
    storage.store(&checkpoint(2)).unwrap();
    let file = first_task_file(dir.path(), 2);
    let full = fs::metadata(&file).unwrap().len();
    truncate(&file, full - 10);

    let err = storage.load(2).unwrap_err();
    match &err {
        StorageError::Truncated {
            path,
            expected,
            actual,
        } => {
            assert_eq!(path, &file);
            assert_eq!((*expected, *actual), (full, full - 10));
        }
        other => panic!("expected a truncated file, got {other:?}"),
    }
    assert!(err.to_string().contains("truncated"), "{err}");
    assert_eq!(storage.latest().unwrap(), Some(checkpoint(1)));
}

#[test]
fn a_file_longer_than_recorded_is_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    storage.store(&checkpoint(1)).unwrap();
    let file = first_task_file(dir.path(), 1);
    let mut bytes = fs::read(&file).unwrap();
    bytes.push(0);
    fs::write(&file, bytes).unwrap();
    assert!(matches!(
        storage.load(1),
        Err(StorageError::Corrupted {
            reason: Corruption::LengthMismatch { .. },
            ..
        })
    ));
}

#[test]
fn a_missing_file_is_a_typed_error_and_latest_skips_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    storage.store(&checkpoint(1)).unwrap();
    storage.store(&checkpoint(2)).unwrap();
    let file = first_task_file(dir.path(), 2);
    fs::remove_file(&file).unwrap();
    let err = storage.load(2).unwrap_err();
    assert!(
        matches!(&err, StorageError::MissingFile { path } if path == &file),
        "{err:?}"
    );
    assert_eq!(storage.latest().unwrap().unwrap().id, 1);
}

#[test]
fn restore_chooses_the_newest_intact_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    for id in 1..=4 {
        storage.store(&checkpoint(id)).unwrap();
    }
    assert_eq!(storage.latest().unwrap().unwrap().id, 4);
    flip_byte(&first_task_file(dir.path(), 4), 30);
    let third = first_task_file(dir.path(), 3);
    truncate(&third, 3);
    fs::remove_file(checkpoint_dir(dir.path(), 2).join("task-1.state")).unwrap();
    assert_eq!(storage.latest().unwrap(), Some(checkpoint(1)));
    // Damage everything: nothing to restore from, which is not an error.
    flip_byte(&first_task_file(dir.path(), 1), 12);
    assert_eq!(storage.latest().unwrap(), None);
}

#[test]
fn a_manifest_copied_into_another_checkpoint_is_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 5).unwrap();
    storage.store(&checkpoint(1)).unwrap();
    storage.store(&checkpoint(2)).unwrap();
    fs::copy(
        checkpoint_dir(dir.path(), 1).join("_manifest"),
        checkpoint_dir(dir.path(), 2).join("_manifest"),
    )
    .unwrap();
    assert!(matches!(
        storage.load(2),
        Err(StorageError::Corrupted {
            reason: Corruption::WrongCheckpoint {
                expected: 2,
                found: 1
            },
            ..
        })
    ));
}

#[test]
fn a_failed_write_is_an_io_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("checkpoints");
    let storage = CheckpointStorage::directory(&root, 5).unwrap();
    fs::remove_dir(&root).unwrap();
    let err = storage.store(&checkpoint(1)).unwrap_err();
    match &err {
        StorageError::Io { path, .. } => assert!(path.starts_with(&root), "{path:?}"),
        other => panic!("expected an i/o error, got {other:?}"),
    }
    assert!(!err.is_damage());
}

#[test]
fn storage_is_send_sync_and_errors_are_errors() {
    fn send_sync<T: Send + Sync>() {}
    fn error<T: std::error::Error + Send + Sync + 'static>() {}
    send_sync::<CheckpointStorage>();
    send_sync::<CompletedCheckpoint>();
    error::<StorageError>();
}
