//! `streamtask inspect`: what a checkpoint or a savepoint holds, as a table and as JSON.
//!
//! Everything is read through the libraries' own loaders and decoders (the checkpoint and
//! savepoint loaders check every file's length and CRC32; the key-group, sink, async,
//! in-flight and channel-state readers belong to the modules that write those states), so
//! this module knows no format of its own: it only arranges what they return.
//!
//! A checkpoint's manifest names tasks (`<vertex>#<subtask>`) and their state entries, not
//! operator ids or the max parallelism: those come from a savepoint's metadata, and for a
//! checkpoint the max parallelism is read from its keyed state (operator ids stay unknown).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use streamtask::checkpoint::{
    CHECKPOINT_FORMAT_VERSION, CheckpointStorage, CompletedCheckpoint, Savepoint, StorageError,
};
use streamtask_core::keygroup::{ListState, StateKind, key_group_sizes, state_kind};
use streamtask_core::state::TaskSnapshot;
use streamtask_runtime::QueuedInput;
use streamtask_runtime::channel::ChannelState;

/// What `inspect` found at a path: the whole report, or the damage that stopped the reading.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// The checkpoint or savepoint directory read (for a checkpoint directory: its newest
    /// `chk-<id>`).
    pub path: PathBuf,
    /// `checkpoint` or `savepoint`.
    pub kind: Kind,
    /// The format version of its files (`None` when damage stopped the reading).
    pub format_version: Option<u32>,
    /// `ok` when every file matched its recorded length and CRC32 and decoded, else `failed`.
    pub crc: CrcStatus,
    /// The file and the check that failed, if one did.
    pub damage: Option<Damage>,
    /// For a damaged checkpoint: the newest older checkpoint beside it that passes every check
    /// (what a restart with `--fallback-to-older-checkpoint` restores); `None` if there is
    /// none, and for an intact checkpoint or a savepoint.
    pub older_intact: Option<u64>,
    /// The checkpoint's id (a savepoint is a checkpoint too).
    pub checkpoint_id: Option<u64>,
    /// When it was triggered (processing time, ms since the epoch).
    pub timestamp_ms: Option<i64>,
    /// The model of the job that wrote it (savepoints only).
    pub model: Option<String>,
    /// The job's max parallelism (number of key groups): a savepoint's metadata, or a
    /// checkpoint's keyed state; `None` if neither says.
    pub max_parallelism: Option<u32>,
    /// Whether a draining stop-with-savepoint took it (its tasks ended their input: a restore
    /// starts after end of input); `None` when damage stopped the reading.
    pub drained: Option<bool>,
    /// State files read (one per task).
    pub files: usize,
    /// Bytes of every state entry.
    pub total_bytes: u64,
    /// The job's vertices.
    pub vertices: Vec<Vertex>,
    /// Every state entry, summed over a vertex's subtasks.
    pub operators: Vec<OperatorState>,
    /// What each source task had read.
    pub sources: Vec<SourcePosition>,
    /// The inputs async operators had in flight.
    pub async_in_flight: Vec<AsyncInFlight>,
    /// The two-phase sinks' transactions awaiting their commit.
    pub pending_transactions: Vec<PendingTransaction>,
    /// The records unaligned barriers overtook, per task.
    pub channel_state: Vec<TaskChannelState>,
}

/// What was inspected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A `chk-<id>` directory of a checkpoint directory.
    Checkpoint,
    /// A savepoint directory (`_metadata` and its state files).
    Savepoint,
}

/// Whether the files passed their checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CrcStatus {
    /// Every file matched its length and CRC32, and decoded.
    Ok,
    /// A file did not (see [`Damage`]).
    Failed,
}

/// The file that failed a check, and which check.
#[derive(Debug, Clone, Serialize)]
pub struct Damage {
    /// The file.
    pub file: PathBuf,
    /// `checksum`, `length`, `truncated`, `missing`, `magic`, `version` or `content`.
    pub check: &'static str,
    /// The loader's message.
    pub message: String,
}

/// A vertex: its tasks are `<name>#<subtask>`.
#[derive(Debug, Clone, Serialize)]
pub struct Vertex {
    /// The vertex's name.
    pub name: String,
    /// Its subtasks.
    pub parallelism: usize,
    /// `(state entry key, operator id)` of its state entries; the id is `None` in a checkpoint.
    pub operators: Vec<(String, Option<String>)>,
}

/// One state entry of a vertex, over its subtasks.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorState {
    /// The vertex.
    pub vertex: String,
    /// The entry's key in each task's snapshot (`source`, `operator-<i>`, `channel-state`).
    pub key: String,
    /// The operator's id (savepoints only).
    pub operator_id: Option<String>,
    /// `keyed`, `list`, `union`, `subtask` (tied to its subtask), `source`, `source-in-flight`
    /// or `channel-state`.
    pub kind: &'static str,
    /// Bytes over every subtask.
    pub bytes: u64,
    /// Bytes per subtask that holds the entry.
    pub subtasks: Vec<SubtaskBytes>,
    /// Keyed state only: the bytes of every non-empty key group.
    pub key_groups: Vec<KeyGroupBytes>,
}

/// The bytes of one subtask's entry.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SubtaskBytes {
    /// The subtask.
    pub subtask: usize,
    /// Its bytes.
    pub bytes: u64,
}

/// The bytes of one key group of a keyed state.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct KeyGroupBytes {
    /// The key group.
    pub key_group: u32,
    /// The subtask whose snapshot holds it.
    pub subtask: usize,
    /// Its encoded states and timers.
    pub bytes: u64,
}

/// A source task's position.
#[derive(Debug, Clone, Serialize)]
pub struct SourcePosition {
    /// The task.
    pub task: String,
    /// The source's state as it wrote it (offsets, splits): JSON, or `null` if not JSON.
    pub position: serde_json::Value,
    /// Elements a handoff reader had taken from the source but not yet passed on.
    pub in_flight_elements: usize,
}

/// One async operator's inputs in flight in one task.
#[derive(Debug, Clone, Serialize)]
pub struct AsyncInFlight {
    /// The task.
    pub task: String,
    /// The entry's key.
    pub key: String,
    /// The operator's id (savepoints only).
    pub operator_id: Option<String>,
    /// Inputs (records and watermarks) it had queued or held, to be re-submitted on restore.
    pub elements: usize,
}

/// A transaction a two-phase sink commits when its checkpoint completes.
#[derive(Debug, Clone, Serialize)]
pub struct PendingTransaction {
    /// The task that stored it.
    pub task: String,
    /// The sink's id (savepoints only).
    pub operator_id: Option<String>,
    /// The sink subtask that wrote the transaction.
    pub subtask: usize,
    /// The transaction's number.
    pub txn: u64,
    /// The checkpoint whose completion commits it.
    pub checkpoint: u64,
}

/// One task's channel state.
#[derive(Debug, Clone, Serialize)]
pub struct TaskChannelState {
    /// The task.
    pub task: String,
    /// Input channels that hold elements.
    pub channels: usize,
    /// Elements over those channels.
    pub elements: usize,
    /// Their encoded bytes.
    pub bytes: usize,
}

/// Why `inspect` could not report at all.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The path is no checkpoint or savepoint.
    #[error(
        "{} is neither a checkpoint nor a savepoint; give a `chk-<id>` directory, a checkpoint \
         directory (its newest checkpoint is read) or a savepoint directory",
        .0.display()
    )]
    NotFound(PathBuf),
    /// Reading failed for another reason than the content.
    #[error(transparent)]
    Storage(StorageError),
}

/// Reads the checkpoint or savepoint at `path` (a `chk-<id>` directory, a checkpoint directory
/// whose newest checkpoint is read, or a savepoint directory). A damaged one is an
/// [`Inspection`] with [`CrcStatus::Failed`] and its [`Damage`].
///
/// # Errors
///
/// [`InspectError::NotFound`] if `path` holds neither; [`InspectError::Storage`] if it cannot
/// be read (permissions, i/o).
pub fn inspect(path: &Path) -> Result<Inspection, InspectError> {
    if path.join("_metadata").is_file() {
        return match Savepoint::load(path) {
            Ok(savepoint) => Ok(of_savepoint(&savepoint)),
            Err(e) => damaged(path, Kind::Savepoint, e),
        };
    }
    let checkpoint = if is_checkpoint_name(path) {
        path.to_path_buf()
    } else {
        newest_checkpoint_in(path).ok_or_else(|| InspectError::NotFound(path.to_path_buf()))?
    };
    match CheckpointStorage::load_path(&checkpoint) {
        Ok(loaded) => Ok(of_checkpoint(&checkpoint, &loaded)),
        Err(StorageError::NotACheckpoint { .. }) => Err(InspectError::NotFound(checkpoint)),
        Err(e) => {
            let mut inspection = damaged(&checkpoint, Kind::Checkpoint, e)?;
            inspection.older_intact = older_intact(&checkpoint);
            Ok(inspection)
        }
    }
}

/// The newest checkpoint older than the one at `damaged` in the same directory that loads
/// with every check passed. Read only: nothing in the directory is cleaned or changed.
fn older_intact(damaged: &Path) -> Option<u64> {
    let id = CheckpointStorage::id_of_path(damaged)?;
    checkpoints_in(damaged.parent()?)
        .into_iter()
        .rev()
        .filter_map(|path| Some((CheckpointStorage::id_of_path(&path)?, path)))
        .filter(|(other, _)| *other < id)
        .find(|(_, path)| CheckpointStorage::load_path(path).is_ok())
        .map(|(id, _)| id)
}

fn is_checkpoint_name(path: &Path) -> bool {
    path.is_dir()
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("chk-") && !n.contains('.'))
}

/// The newest `chk-<id>` in a checkpoint directory.
fn newest_checkpoint_in(dir: &Path) -> Option<PathBuf> {
    checkpoints_in(dir).pop()
}

/// The `chk-<id>` directories in `dir`, oldest first (ids are zero-padded, so names sort by
/// id); none if `dir` cannot be read.
fn checkpoints_in(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| is_checkpoint_name(p))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn damaged(path: &Path, kind: Kind, error: StorageError) -> Result<Inspection, InspectError> {
    let (file, check) = match &error {
        StorageError::Truncated { path, .. } => (path.clone(), "truncated"),
        StorageError::MissingFile { path } => (path.clone(), "missing"),
        StorageError::Corrupted { path, reason } => {
            let check = match reason {
                streamtask::checkpoint::Corruption::ChecksumMismatch { .. } => "checksum",
                streamtask::checkpoint::Corruption::LengthMismatch { .. } => "length",
                streamtask::checkpoint::Corruption::BadMagic => "magic",
                streamtask::checkpoint::Corruption::UnsupportedVersion(_) => "version",
                _ => "content",
            };
            (path.clone(), check)
        }
        _ => return Err(InspectError::Storage(error)),
    };
    Ok(Inspection {
        path: path.to_path_buf(),
        kind,
        format_version: None,
        crc: CrcStatus::Failed,
        damage: Some(Damage {
            file,
            check,
            message: error.to_string(),
        }),
        older_intact: None,
        // A checkpoint's directory names its id; a savepoint's id is in the metadata.
        checkpoint_id: match kind {
            Kind::Checkpoint => CheckpointStorage::id_of_path(path),
            Kind::Savepoint => None,
        },
        timestamp_ms: None,
        model: None,
        max_parallelism: None,
        drained: None,
        files: 0,
        total_bytes: 0,
        vertices: Vec::new(),
        operators: Vec::new(),
        sources: Vec::new(),
        async_in_flight: Vec::new(),
        pending_transactions: Vec::new(),
        channel_state: Vec::new(),
    })
}

fn of_savepoint(savepoint: &Savepoint) -> Inspection {
    let meta = &savepoint.metadata;
    let vertices: Vec<Vertex> = meta
        .vertices
        .iter()
        .map(|v| Vertex {
            name: v.name.clone(),
            parallelism: v.parallelism,
            operators: v
                .states
                .iter()
                .map(|s| (s.key.clone(), Some(s.operator_id.clone())))
                .collect(),
        })
        .collect();
    let mut inspection = read_states(
        &savepoint.path,
        Kind::Savepoint,
        &savepoint.checkpoint,
        vertices,
    );
    inspection.format_version = Some(meta.format_version);
    inspection.model = Some(meta.model.clone());
    inspection.max_parallelism = Some(meta.max_parallelism);
    inspection
}

fn of_checkpoint(path: &Path, checkpoint: &CompletedCheckpoint) -> Inspection {
    // The manifest names tasks only: vertices and their entries come from the task names.
    let mut by_vertex: BTreeMap<&str, (usize, Vec<String>)> = BTreeMap::new();
    for (task, snapshot) in &checkpoint.tasks {
        let (vertex, _) = split_task(task);
        let entry = by_vertex.entry(vertex).or_default();
        entry.0 += 1;
        for (key, _) in snapshot.iter() {
            if !entry.1.iter().any(|k| k == key) {
                entry.1.push(key.to_string());
            }
        }
    }
    let vertices = by_vertex
        .into_iter()
        .map(|(name, (parallelism, mut keys))| {
            keys.sort();
            Vertex {
                name: name.to_string(),
                parallelism,
                operators: keys.into_iter().map(|k| (k, None)).collect(),
            }
        })
        .collect();
    let mut inspection = read_states(path, Kind::Checkpoint, checkpoint, vertices);
    inspection.format_version = Some(u32::from(CHECKPOINT_FORMAT_VERSION));
    inspection
}

/// `(vertex, subtask)` of a task name `<vertex>#<subtask>`.
fn split_task(task: &str) -> (&str, usize) {
    match task.rsplit_once('#') {
        Some((vertex, subtask)) => (vertex, subtask.parse().unwrap_or(0)),
        None => (task, 0),
    }
}

fn read_states(
    path: &Path,
    kind: Kind,
    checkpoint: &CompletedCheckpoint,
    vertices: Vec<Vertex>,
) -> Inspection {
    let operator_id = |vertex: &str, key: &str| -> Option<String> {
        vertices
            .iter()
            .find(|v| v.name == vertex)
            .and_then(|v| v.operators.iter().find(|(k, _)| k == key))
            .and_then(|(_, id)| id.clone())
    };
    let mut operators: BTreeMap<(String, String), OperatorState> = BTreeMap::new();
    let mut inspection = Inspection {
        path: path.to_path_buf(),
        kind,
        format_version: None,
        crc: CrcStatus::Ok,
        damage: None,
        older_intact: None,
        checkpoint_id: Some(checkpoint.id),
        timestamp_ms: Some(checkpoint.timestamp),
        model: None,
        max_parallelism: None,
        drained: Some(
            checkpoint
                .tasks
                .values()
                .any(|t| t.get(TaskSnapshot::FINISHED).is_some()),
        ),
        files: checkpoint.tasks.len(),
        total_bytes: 0,
        vertices: Vec::new(),
        operators: Vec::new(),
        sources: Vec::new(),
        async_in_flight: Vec::new(),
        pending_transactions: Vec::new(),
        channel_state: Vec::new(),
    };
    for (task, snapshot) in &checkpoint.tasks {
        let (vertex, subtask) = split_task(task);
        read_source(task, snapshot, &mut inspection);
        for (key, bytes) in snapshot.iter() {
            let id = operator_id(vertex, key);
            let len = bytes.len() as u64;
            inspection.total_bytes += len;
            let state = operators
                .entry((vertex.to_string(), key.to_string()))
                .or_insert_with(|| OperatorState {
                    vertex: vertex.to_string(),
                    key: key.to_string(),
                    operator_id: id.clone(),
                    kind: entry_kind(key, bytes),
                    bytes: 0,
                    subtasks: Vec::new(),
                    key_groups: Vec::new(),
                });
            state.bytes += len;
            state.subtasks.push(SubtaskBytes {
                subtask,
                bytes: len,
            });
            if key == TaskSnapshot::CHANNEL_STATE {
                if let Ok(channels) = ChannelState::decode(bytes) {
                    inspection.channel_state.push(TaskChannelState {
                        task: task.clone(),
                        channels: channels.channel_indices().count(),
                        elements: channels.elements(),
                        bytes: channels.bytes(),
                    });
                }
                continue;
            }
            if let Ok(Some(sizes)) = key_group_sizes(bytes) {
                inspection
                    .max_parallelism
                    .get_or_insert(sizes.max_parallelism);
                state
                    .key_groups
                    .extend(
                        sizes
                            .groups
                            .iter()
                            .map(|&(key_group, bytes)| KeyGroupBytes {
                                key_group,
                                subtask,
                                bytes: bytes as u64,
                            }),
                    );
            } else if let Some(pending) = streamtask::sink::pending_transactions(bytes) {
                inspection
                    .pending_transactions
                    .extend(pending.into_iter().map(|p| PendingTransaction {
                        task: task.clone(),
                        operator_id: id.clone(),
                        subtask: p.subtask,
                        txn: p.txn,
                        checkpoint: p.checkpoint,
                    }));
            } else if state_kind(bytes) == StateKind::List
                && let Ok(list) = ListState::<QueuedInput<serde_json::Value>>::decode(bytes)
            {
                // An async operator snapshots the inputs it has in flight as list state.
                inspection.async_in_flight.push(AsyncInFlight {
                    task: task.clone(),
                    key: key.to_string(),
                    operator_id: id.clone(),
                    elements: list.items.len(),
                });
            }
        }
    }
    let mut operators: Vec<OperatorState> = operators.into_values().collect();
    // In the job's order (a savepoint lists its vertices from the sources on).
    operators.sort_by_key(|o| vertices.iter().position(|v| v.name == o.vertex));
    inspection.vertices = vertices;
    inspection.operators = operators;
    inspection
}

fn read_source(task: &str, snapshot: &TaskSnapshot, inspection: &mut Inspection) {
    let Some(position) = snapshot.get(TaskSnapshot::SOURCE) else {
        return;
    };
    let in_flight_elements = snapshot
        .get(TaskSnapshot::SOURCE_IN_FLIGHT)
        .and_then(streamtask_bridge::source_in_flight)
        .map_or(0, |(elements, _)| elements);
    inspection.sources.push(SourcePosition {
        task: task.to_string(),
        position: serde_json::from_slice(position).unwrap_or(serde_json::Value::Null),
        in_flight_elements,
    });
}

fn entry_kind(key: &str, bytes: &[u8]) -> &'static str {
    match key {
        TaskSnapshot::SOURCE => "source",
        TaskSnapshot::SOURCE_IN_FLIGHT => "source-in-flight",
        TaskSnapshot::CHANNEL_STATE => "channel-state",
        _ => match state_kind(bytes) {
            StateKind::KeyGrouped => "keyed",
            StateKind::List => "list",
            StateKind::Union => "union",
            StateKind::Subtask => "subtask",
        },
    }
}

impl Inspection {
    /// The table `streamtask inspect` prints.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let kind = match self.kind {
            Kind::Checkpoint => "checkpoint",
            Kind::Savepoint => "savepoint",
        };
        let row = |out: &mut String, name: &str, value: &str| {
            let _ = writeln!(out, "{name:<20}{value}");
        };
        row(&mut out, kind, &self.path.display().to_string());
        let format = match (self.kind, self.format_version) {
            (_, None) => "unknown (not read)".to_string(),
            (Kind::Checkpoint, Some(v)) => format!("checkpoint format {v}"),
            (Kind::Savepoint, Some(v)) => format!("savepoint format {v}"),
        };
        row(&mut out, "format", &format);
        match &self.damage {
            None => row(
                &mut out,
                "CRC",
                &format!(
                    "ok ({} state file(s) and the {} match their lengths and CRC32)",
                    self.files,
                    match self.kind {
                        Kind::Checkpoint => "manifest",
                        Kind::Savepoint => "metadata",
                    }
                ),
            ),
            Some(damage) => {
                if let Some(id) = self.checkpoint_id {
                    row(&mut out, "checkpoint id", &id.to_string());
                }
                row(&mut out, "CRC", &format!("FAILED ({} check)", damage.check));
                row(&mut out, "damaged file", &damage.file.display().to_string());
                row(&mut out, "error", &damage.message);
                if self.kind == Kind::Checkpoint {
                    let older = match self.older_intact {
                        Some(id) => format!(
                            "checkpoint {id} (what a restart with --fallback-to-older-checkpoint restores)"
                        ),
                        None => "none in this directory".to_string(),
                    };
                    row(&mut out, "older intact", &older);
                }
                return out;
            }
        }
        let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
        row(
            &mut out,
            "checkpoint id",
            &or_dash(self.checkpoint_id.map(|i| i.to_string())),
        );
        row(
            &mut out,
            "triggered at (ms)",
            &or_dash(self.timestamp_ms.map(|t| t.to_string())),
        );
        row(&mut out, "model", &or_dash(self.model.clone()));
        row(
            &mut out,
            "max parallelism",
            &or_dash(self.max_parallelism.map(|m| m.to_string())),
        );
        row(
            &mut out,
            "drained",
            &or_dash(
                self.drained
                    .map(|d| if d { "yes" } else { "no" }.to_string()),
            ),
        );
        row(&mut out, "state bytes", &self.total_bytes.to_string());

        let _ = writeln!(out, "\nvertices");
        let _ = writeln!(
            out,
            "  {:<12}{:>12}  state entries (key: operator id)",
            "vertex", "parallelism"
        );
        for v in &self.vertices {
            let ops: Vec<String> = v
                .operators
                .iter()
                .map(|(key, id)| format!("{key}: {}", id.as_deref().unwrap_or("-")))
                .collect();
            let _ = writeln!(
                out,
                "  {:<12}{:>12}  {}",
                v.name,
                v.parallelism,
                ops.join(", ")
            );
        }

        let _ = writeln!(out, "\nstate per operator");
        let _ = writeln!(
            out,
            "  {:<12}{:<18}{:<18}{:<18}{:>10}  per subtask",
            "vertex", "entry", "operator id", "kind", "bytes"
        );
        for o in &self.operators {
            let per: Vec<String> = o
                .subtasks
                .iter()
                .map(|s| format!("#{} {}", s.subtask, s.bytes))
                .collect();
            let _ = writeln!(
                out,
                "  {:<12}{:<18}{:<18}{:<18}{:>10}  {}",
                o.vertex,
                o.key,
                o.operator_id.as_deref().unwrap_or("-"),
                o.kind,
                o.bytes,
                per.join(", ")
            );
        }

        for o in self.operators.iter().filter(|o| !o.key_groups.is_empty()) {
            let _ = writeln!(
                out,
                "\nkey groups of {}/{} ({}): {} non-empty, bytes each",
                o.vertex,
                o.key,
                o.operator_id.as_deref().unwrap_or("-"),
                o.key_groups.len()
            );
            for chunk in o.key_groups.chunks(8) {
                let cells: Vec<String> = chunk
                    .iter()
                    .map(|k| format!("{:>5}:{:>6}", k.key_group, k.bytes))
                    .collect();
                let _ = writeln!(out, " {}", cells.join(""));
            }
        }

        let _ = writeln!(out, "\nsource positions");
        if self.sources.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for s in &self.sources {
            let _ = writeln!(
                out,
                "  {:<12}{}  ({} element(s) in flight)",
                s.task, s.position, s.in_flight_elements
            );
        }

        let _ = writeln!(out, "\nasync elements in flight");
        if self.async_in_flight.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for a in &self.async_in_flight {
            let _ = writeln!(
                out,
                "  {:<12}{:<18}{:>8}",
                a.task,
                a.operator_id.as_deref().unwrap_or(&a.key),
                a.elements
            );
        }

        let _ = writeln!(out, "\ntwo-phase sink: pending transactions");
        if self.pending_transactions.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for p in &self.pending_transactions {
            let _ = writeln!(
                out,
                "  {:<12}{:<10} subtask {} txn {} commits with checkpoint {}",
                p.task,
                p.operator_id.as_deref().unwrap_or("-"),
                p.subtask,
                p.txn,
                p.checkpoint
            );
        }

        let _ = writeln!(out, "\nchannel state (unaligned checkpoints)");
        if self.channel_state.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for c in &self.channel_state {
            let _ = writeln!(
                out,
                "  {:<12}{} channel(s), {} element(s), {} bytes",
                c.task, c.channels, c.elements, c.bytes
            );
        }
        out
    }
}
