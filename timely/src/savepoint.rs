//! Savepoints between the local executor and a timely run, both ways, rescaled by key group.
//!
//! A timely run's checkpoint already is a local executor's checkpoint of the same job: the
//! same task snapshots, entry keys and state encodings. What a savepoint adds is its shape:
//! per vertex, its parallelism and the operator id of every entry, so a restore finds each
//! operator's state wherever it sits and moves it to the new parallelism. The two sides use the
//! local executor's savepoint format ([`Savepoint`]) and its restore
//! ([`rescale_savepoint`](streamtask::rescale_savepoint)): there is one rescale.
//!
//! # The mapping
//!
//! | timely | local executor (`sample::local_job`) | operator ids |
//! |---|---|---|
//! | worker `w` of `n` (over all processes) | subtask `w` of every vertex at parallelism `n` | - |
//! | task `<source name>#<w>`: `source` | source vertex `<source name>`, a [`SplitReader`]: `source` | the source's name |
//! | the source's chain: `operator-<i>` | the source vertex's chained operators: `operator-<i>` | each operator's name |
//! | task `<keyed name>#<w>`: `operator-0` | the keyed vertex `<keyed name>`: `operator-0` | the keyed operator's name |
//! | the sink: `operator-<last>`, named `<keyed name> sink` | `two_phase_file_sink("<keyed name> sink", ..)` | `<keyed name> sink` |
//!
//! [`savepoint_shape`] writes this shape; the operator ids are the operators' names (a timely
//! job has no `uid`s), so the local job must give its operators the same names and no uids.
//!
//! | state | how it moves to another worker count / parallelism |
//! |---|---|
//! | the source's position: [`ListState`](streamtask_core::keygroup::ListState) of [`SplitOffset`](crate::SplitOffset) | concatenated, split evenly: each split read on from its offset by one reader |
//! | the keyed operator's state and event-time timers | by key group, to the worker whose range holds it (max parallelism 128) |
//! | the sink's transactions (union state) | to every worker, which commits the ones the savepoint pre-committed |
//! | the source chain's state | same parallelism only, unless list, union or keyed state |
//!
//! # Taking one
//!
//! [`TimelyConfig::stop_with_savepoint`] stops the sources after epoch `k` (no end of input:
//! no final watermark, no end of the operators' input, as the local executor's stop without
//! drain), lets checkpoint `k` complete and commit, and writes it as a savepoint
//! ([`RunSummary::savepoint`](crate::RunSummary)).
//!
//! # Restoring one
//!
//! [`TimelyConfig::from_savepoint`] restores a savepoint (the local executor's or a timely
//! run's) at the run's worker count when the checkpoint directory holds no complete
//! checkpoint; once the run completed one, a restart restores that instead (a crash after the
//! restore neither replays the savepoint's output nor loses what followed it). A savepoint of
//! another job or of other input is refused with a typed error naming the fix.

use std::path::{Path, PathBuf};

use streamtask::JobError;
use streamtask::checkpoint::{
    CheckpointStorage, CompletedCheckpoint, Savepoint, StateEntry, VertexShape,
};
use streamtask_core::keygroup::DEFAULT_MAX_PARALLELISM;
use streamtask_core::state::TaskSnapshot;

use crate::{TimelyConfig, TimelyError, TimelyJob};

/// The vertices of `job` run on `workers` workers (over all processes), as a savepoint
/// records them (see the [module docs](self) for the mapping).
///
/// # Examples
///
/// ```
/// use streamtask_timely::sample::timely_job;
/// use streamtask_timely::savepoint_shape;
///
/// let shape = savepoint_shape(&timely_job(Vec::new(), "/tmp/out".as_ref()), 2);
/// assert_eq!(shape[0].name, "lines");
/// assert_eq!(shape[1].parallelism, 2);
/// let ids: Vec<&str> = shape[1].states.iter().map(|s| s.operator_id.as_str()).collect();
/// assert_eq!(ids, ["totals", "totals sink"]);
/// ```
pub fn savepoint_shape<A: 'static, B>(job: &TimelyJob<A, B>, workers: usize) -> Vec<VertexShape> {
    let operators = |names: Vec<String>| {
        names
            .into_iter()
            .enumerate()
            .map(|(i, operator_id)| StateEntry {
                key: TaskSnapshot::operator_key(i),
                operator_id,
            })
    };
    let source = &job.source_name;
    let mut source_states = vec![
        StateEntry {
            key: TaskSnapshot::SOURCE.to_string(),
            operator_id: source.clone(),
        },
        StateEntry {
            key: TaskSnapshot::SOURCE_IN_FLIGHT.to_string(),
            operator_id: format!("{source}/in-flight"),
        },
    ];
    source_states.extend(operators((job.chain)(0).chain_names()));
    vec![
        VertexShape {
            name: source.clone(),
            parallelism: workers,
            states: source_states,
            source_identity: job.source.identity(),
        },
        VertexShape {
            name: job.keyed_name.clone(),
            parallelism: workers,
            states: operators((job.keyed)(0).chain_names()).collect(),
            source_identity: None,
        },
    ]
}

/// What a run restores: the latest complete checkpoint in its directory, else the savepoint
/// it was given, rescaled to its workers.
pub(crate) fn restore_point<A: 'static, B>(
    storage: &CheckpointStorage,
    job: &TimelyJob<A, B>,
    config: &TimelyConfig,
) -> Result<Option<CompletedCheckpoint>, TimelyError> {
    if let Some(latest) = storage.latest()? {
        return Ok(Some(latest));
    }
    let Some(path) = &config.savepoint else {
        return Ok(None);
    };
    let savepoint = Savepoint::load(path)?;
    let shape = savepoint_shape(job, config.total_workers());
    let checkpoint =
        streamtask::rescale_savepoint(&savepoint, &shape, DEFAULT_MAX_PARALLELISM, false)
            .map_err(|e| refused(path, e))?;
    log::info!(
        "restoring savepoint {} (checkpoint {}, {} model, {} vertices) on {} workers",
        path.display(),
        savepoint.metadata.checkpoint_id,
        savepoint.metadata.model,
        savepoint.metadata.vertices.len(),
        config.total_workers()
    );
    Ok(Some(checkpoint))
}

/// The restore's refusal, with the fix for a timely run.
fn refused(path: &Path, error: JobError) -> TimelyError {
    match error {
        JobError::NonRestoredState { operators, .. } => TimelyError::SavepointOfOtherJob {
            path: path.to_path_buf(),
            operators,
        },
        JobError::SourceMismatch { savepoint, job, .. } => TimelyError::SavepointOfOtherInput {
            path: path.to_path_buf(),
            savepoint,
            job,
        },
        source => TimelyError::Savepoint {
            path: path.to_path_buf(),
            source: Box::new(source),
        },
    }
}

/// Writes checkpoint `id` of a finished run as a savepoint in `dir`; returns its path.
pub(crate) fn write<A: 'static, B>(
    storage: &CheckpointStorage,
    id: u64,
    job: &TimelyJob<A, B>,
    config: &TimelyConfig,
    dir: &Path,
) -> Result<PathBuf, TimelyError> {
    let checkpoint = storage.load(id)?;
    let path = Savepoint::write(
        dir,
        &checkpoint,
        "timely",
        DEFAULT_MAX_PARALLELISM,
        savepoint_shape(job, config.total_workers()),
    )?;
    log::info!("savepoint {id} written to {}", path.display());
    Ok(path)
}
