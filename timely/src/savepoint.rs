//! Savepoints between the local executor and a timely run: documented in the crate docs
//! ("Savepoints"), since this module is private.

use std::path::{Path, PathBuf};

use streamtask::JobError;
use streamtask::checkpoint::{
    CheckpointStorage, CompletedCheckpoint, Savepoint, StateEntry, VertexShape,
};
use streamtask_core::keygroup::DEFAULT_MAX_PARALLELISM;
use streamtask_core::state::TaskSnapshot;

use crate::{TimelyConfig, TimelyError, TimelyJob};

/// The vertices of `job` run on `workers` workers (over all processes), as a savepoint
/// records them (the mapping is in the crate docs, "Savepoints").
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
