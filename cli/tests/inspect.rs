//! `streamtask inspect`: savepoints of every model, checkpoint directories, damaged files.

mod common;

use std::path::{Path, PathBuf};

use common::{code, run_args_sized, stderr, stdout, streamtask};
use serde_json::Value;
use streamtask::checkpoint::Savepoint;

/// Orders of each run: enough for a few checkpoints, a second or less in a debug build.
const ORDERS: u64 = 4_000;

/// Stops a `model` run halfway with a savepoint under `dir`; returns the savepoint's path.
fn savepoint_of(model: &str, dir: &Path) -> PathBuf {
    let savepoints = dir.join("savepoints");
    let out = streamtask(&run_args_sized(
        model,
        &dir.join("work"),
        ORDERS,
        &[
            "--stop-with-savepoint",
            savepoints.to_str().unwrap(),
            "--stop-with-savepoint-after-records",
            &(ORDERS / 2).to_string(),
        ],
    ));
    assert_eq!(code(&out), 0, "{model}: {}", stderr(&out));
    let printed = stdout(&out);
    let path = printed
        .lines()
        .find_map(|l| l.strip_prefix("savepoint: "))
        .unwrap_or_else(|| panic!("{model} printed no savepoint: {printed}"));
    PathBuf::from(path)
}

/// Runs `inspect PATH --json FILE`; returns the exit code, stdout and the JSON.
fn inspect(path: &Path, dir: &Path) -> (i32, String, Value) {
    let json = dir.join("inspect.json");
    let out = streamtask(&[
        "inspect".to_string(),
        path.to_str().unwrap().to_string(),
        "--json".to_string(),
        json.to_str().unwrap().to_string(),
    ]);
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", stderr(&out)));
    (
        code(&out),
        stdout(&out),
        serde_json::from_str(&text).unwrap(),
    )
}

/// Runs the mailbox model in `work` until a run completed a checkpoint; returns the checkpoint
/// directory.
fn checkpoints_of_a_run(work: &Path) -> PathBuf {
    checkpoints_of_a_run_keeping(work, 1)
}

/// Runs the mailbox model in `work` until a run left at least `at_least` checkpoints; returns
/// the checkpoint directory. A short run on a loaded machine may end before its first
/// checkpoints complete, so each further try reads four times the orders, in a fresh work
/// directory.
fn checkpoints_of_a_run_keeping(work: &Path, at_least: usize) -> PathBuf {
    let mut orders = ORDERS;
    for attempt in 0..4 {
        let work = work.join(format!("try-{attempt}"));
        let out = streamtask(&run_args_sized("mailbox", &work, orders, &[]));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let checkpoints = work.join("mailbox").join("checkpoints");
        if checkpoint_dirs(&checkpoints).len() >= at_least {
            return checkpoints;
        }
        orders *= 4;
    }
    panic!("no run of up to {orders} orders left {at_least} checkpoint(s)");
}

/// The `chk-<id>` directories in `checkpoints`, oldest first (ids are zero-padded).
fn checkpoint_dirs(checkpoints: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(checkpoints)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("chk-"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// The operator state of `id` (a savepoint names its operators).
fn by_id<'a>(json: &'a Value, id: &str) -> &'a Value {
    json["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["operator_id"] == id)
        .unwrap_or_else(|| panic!("no operator {id} in {json:#}"))
}

fn operator<'a>(json: &'a Value, vertex: &str, key: &str) -> &'a Value {
    json["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["vertex"] == vertex && o["key"] == key)
        .unwrap_or_else(|| panic!("no {vertex}/{key} in {json:#}"))
}

#[test]
fn smoke() {
    let dir = tempfile::tempdir().unwrap();
    let savepoint = savepoint_of("mailbox", dir.path());
    let (code, table, json) = inspect(&savepoint, dir.path());
    assert_eq!(code, 0, "{table}");
    assert_eq!(json["kind"], "savepoint");
    assert_eq!(json["crc"], "ok");
    for row in [
        "format",
        "CRC",
        "max parallelism",
        "vertices",
        "state per operator",
        "source positions",
        "async elements in flight",
        "pending transactions",
        "channel state",
    ] {
        assert!(table.contains(row), "no {row} row: {table}");
    }
}

#[test]
fn a_savepoint_of_every_model_shows_its_job_and_state() {
    for model in ["legacy", "mailbox", "bridge"] {
        let dir = tempfile::tempdir().unwrap();
        let savepoint = savepoint_of(model, dir.path());
        let (code, table, json) = inspect(&savepoint, dir.path());
        assert_eq!(code, 0, "{model}: {table}");
        let loaded = Savepoint::load(&savepoint).unwrap();

        assert_eq!(json["kind"], "savepoint", "{model}");
        assert_eq!(json["crc"], "ok", "{model}");
        assert!(json["damage"].is_null(), "{model}");
        assert_eq!(json["format_version"], 1, "{model}");
        assert_eq!(json["model"], model);
        assert_eq!(json["max_parallelism"], 128, "{model}");
        assert_eq!(json["checkpoint_id"], loaded.metadata.checkpoint_id);
        assert_eq!(json["files"], loaded.checkpoint.tasks.len());

        // The vertices and operator ids are the savepoint's metadata.
        let vertices = json["vertices"].as_array().unwrap();
        let shape: Vec<(String, u64)> = vertices
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().unwrap().to_string(),
                    v["parallelism"].as_u64().unwrap(),
                )
            })
            .collect();
        let expected: Vec<(String, u64)> = loaded
            .metadata
            .vertices
            .iter()
            .map(|v| (v.name.clone(), v.parallelism as u64))
            .collect();
        assert_eq!(shape, expected, "{model}");
        // Chaining differs by model (the legacy model starts the enrichment's own task), the
        // operator ids do not.
        for id in ["orders", "totals", "enrich", "sink"] {
            by_id(&json, id);
        }

        // Sizes: every entry's bytes, per subtask and in total.
        let mut total = 0;
        for (task, snapshot) in &loaded.checkpoint.tasks {
            let (vertex, subtask) = task.rsplit_once('#').unwrap();
            for (key, bytes) in snapshot.iter() {
                total += bytes.len() as u64;
                let subtasks = operator(&json, vertex, key)["subtasks"].as_array().unwrap();
                let entry = subtasks
                    .iter()
                    .find(|s| s["subtask"].as_u64().unwrap().to_string() == subtask)
                    .unwrap_or_else(|| panic!("{model}: no {task} {key}"));
                assert_eq!(entry["bytes"], bytes.len(), "{model}: {task} {key}");
            }
        }
        assert_eq!(json["total_bytes"], total, "{model}");

        // Keyed state per key group: within 0..max parallelism, each no larger than its entry.
        let totals = by_id(&json, "totals");
        assert_eq!(totals["kind"], "keyed", "{model}");
        let groups = totals["key_groups"].as_array().unwrap();
        assert!(!groups.is_empty(), "{model}: no key group");
        for g in groups {
            assert!(g["key_group"].as_u64().unwrap() < 128, "{model}: {g}");
            assert!(g["bytes"].as_u64().unwrap() > 0, "{model}: {g}");
        }
        let group_bytes: u64 = groups.iter().map(|g| g["bytes"].as_u64().unwrap()).sum();
        assert!(group_bytes < totals["bytes"].as_u64().unwrap(), "{model}");

        // The source position is the source's own state, as stored.
        let source = &json["sources"][0];
        assert_eq!(source["task"], "orders#0", "{model}");
        let stored: Value = serde_json::from_slice(
            loaded.checkpoint.tasks["orders#0"]
                .get(streamtask_core::state::TaskSnapshot::SOURCE)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(source["position"], stored, "{model}");
        assert!(
            source["position"]["offset"].as_u64().unwrap() > 0,
            "{model}"
        );

        // The async enrichment's inputs in flight: one entry per subtask.
        let in_flight = json["async_in_flight"].as_array().unwrap();
        assert_eq!(in_flight.len(), 2, "{model}: {in_flight:?}");
        assert!(
            in_flight.iter().all(|a| a["operator_id"] == "enrich"),
            "{model}"
        );

        // The two-phase sink's pending transactions, each for a checkpoint up to this one.
        let pending = json["pending_transactions"].as_array().unwrap();
        assert!(!pending.is_empty(), "{model}: no pending transaction");
        for p in pending {
            assert_eq!(p["operator_id"], "sink", "{model}");
            assert!(
                p["checkpoint"].as_u64() <= json["checkpoint_id"].as_u64(),
                "{model}"
            );
        }
        assert!(
            json["channel_state"].as_array().unwrap().is_empty(),
            "{model}"
        );
    }
}

#[test]
fn a_checkpoint_directory_shows_its_newest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = checkpoints_of_a_run(&dir.path().join("work"));
    let (code, table, json) = inspect(&checkpoints, dir.path());
    assert_eq!(code, 0, "{table}");
    assert_eq!(json["kind"], "checkpoint");
    assert_eq!(json["crc"], "ok");
    assert_eq!(json["format_version"], 1);
    // A checkpoint's manifest names tasks, not operators: the ids are unknown, the max
    // parallelism is the keyed state's.
    assert!(json["model"].is_null());
    assert_eq!(json["max_parallelism"], 128);
    assert!(operator(&json, "totals", "operator-0")["operator_id"].is_null());
    let newest = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("chk-"))
        .max()
        .unwrap();
    assert_eq!(json["path"], checkpoints.join(&newest).to_str().unwrap());
    // The `chk-<id>` directory itself reads the same.
    let (_, _, again) = inspect(&checkpoints.join(&newest), dir.path());
    assert_eq!(again, json);
}

#[test]
fn a_damaged_checkpoint_names_its_file_and_check_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    // The mailbox model: the legacy one may complete no checkpoint in so short a run.
    let checkpoints = checkpoints_of_a_run(&dir.path().join("work"));
    let (_, _, intact) = inspect(&checkpoints, dir.path());
    let chk = PathBuf::from(intact["path"].as_str().unwrap());
    let file = chk.join("task-0.state");
    let mut bytes = std::fs::read(&file).unwrap();

    // One byte flipped: the checksum check fails.
    bytes[12] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let (code, table, json) = inspect(&chk, dir.path());
    assert_eq!(code, 3, "{table}");
    assert_eq!(json["crc"], "failed");
    assert_eq!(json["damage"]["check"], "checksum");
    assert_eq!(json["checkpoint_id"], intact["checkpoint_id"]);
    assert_eq!(json["damage"]["file"], file.to_str().unwrap());
    assert!(table.contains("FAILED (checksum check)"), "{table}");
    assert!(table.contains(file.to_str().unwrap()), "{table}");

    // Cut short: the length check fails.
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _, json) = inspect(&chk, dir.path());
    assert_eq!(code, 3);
    assert_eq!(json["damage"]["check"], "truncated");

    // Gone.
    std::fs::remove_file(&file).unwrap();
    let (code, _, json) = inspect(&chk, dir.path());
    assert_eq!(code, 3);
    assert_eq!(json["damage"]["check"], "missing");
}

#[test]
fn a_damaged_newest_checkpoint_names_the_newest_intact_one_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = checkpoints_of_a_run_keeping(&dir.path().join("work"), 2);
    let dirs = checkpoint_dirs(&checkpoints);
    let (newest, previous) = (&dirs[dirs.len() - 1], &dirs[dirs.len() - 2]);
    let (_, _, intact) = inspect(previous, dir.path());
    let flip = |chk: &Path| {
        let file = chk.join("task-0.state");
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[12] ^= 0xff;
        std::fs::write(&file, &bytes).unwrap();
    };

    flip(newest);
    let (code, table, json) = inspect(&checkpoints, dir.path());
    assert_eq!(code, 3, "{table}");
    assert_eq!(json["damage"]["check"], "checksum");
    assert_eq!(json["older_intact"], intact["checkpoint_id"], "{table}");
    assert!(
        table.contains(&format!(
            "checkpoint {} (what a restart with --fallback-to-older-checkpoint restores)",
            intact["checkpoint_id"]
        )),
        "{table}"
    );
    // Reading is all inspect does: the damaged checkpoint is still there.
    assert!(newest.is_dir());

    // Every older one damaged too: none to fall back to.
    for chk in &dirs[..dirs.len() - 1] {
        flip(chk);
    }
    let (code, table, json) = inspect(newest, dir.path());
    assert_eq!(code, 3, "{table}");
    assert!(json["older_intact"].is_null(), "{table}");
    assert!(table.contains("none in this directory"), "{table}");
}

#[test]
fn a_damaged_savepoint_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let savepoint = savepoint_of("bridge", dir.path());
    let metadata = savepoint.join("_metadata");
    let mut bytes = std::fs::read(&metadata).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0x01;
    std::fs::write(&metadata, bytes).unwrap();
    let (code, table, json) = inspect(&savepoint, dir.path());
    assert_eq!(code, 3, "{table}");
    assert_eq!(json["kind"], "savepoint");
    assert_eq!(json["damage"]["file"], metadata.to_str().unwrap());
}

#[test]
fn a_path_that_holds_neither_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = streamtask(&[
        "inspect".to_string(),
        dir.path().to_str().unwrap().to_string(),
    ]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("neither a checkpoint nor a savepoint"));
}

#[test]
fn channel_state_is_counted_per_task() {
    use std::collections::BTreeMap;
    use streamtask::checkpoint::{CheckpointStorage, CompletedCheckpoint};
    use streamtask_core::state::TaskSnapshot;
    use streamtask_runtime::channel::ChannelState;

    // A checkpoint as an unaligned barrier leaves it: two overtaken elements in channel 0,
    // one in channel 2.
    let mut channels = ChannelState::new();
    channels.push(0, b"one".to_vec());
    channels.push(0, b"two".to_vec());
    channels.push(2, b"three".to_vec());
    let mut snapshot = TaskSnapshot::new();
    snapshot.put(TaskSnapshot::CHANNEL_STATE, channels.encode());
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path().join("checkpoints"), 1).unwrap();
    storage
        .store(&CompletedCheckpoint {
            id: 7,
            timestamp: 1,
            tasks: BTreeMap::from([("totals#1".to_string(), snapshot)]),
        })
        .unwrap();
    let (code, table, json) = inspect(&dir.path().join("checkpoints"), dir.path());
    assert_eq!(code, 0, "{table}");
    assert_eq!(json["checkpoint_id"], 7);
    let state = &json["channel_state"][0];
    assert_eq!(state["task"], "totals#1");
    assert_eq!(state["channels"], 2);
    assert_eq!(state["elements"], 3);
    assert_eq!(state["bytes"], 11);
    assert_eq!(
        operator(&json, "totals", TaskSnapshot::CHANNEL_STATE)["kind"],
        "channel-state"
    );
    assert!(
        table.contains("2 channel(s), 3 element(s), 11 bytes"),
        "{table}"
    );
}
