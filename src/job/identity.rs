//! Which state belongs to which operator, independent of how the job is cut into tasks: the
//! operator ids (Flink's `uid()`), and the job's max parallelism (the number of key groups).
//!
//! A checkpoint stores state by task (`<vertex>#<subtask>`) and, inside a task, by position
//! (`source`, `operator-<index>`): enough to restart the same job. A savepoint must outlive
//! changes to the job (a new parallelism, a new operator, another model), so it also records,
//! for every vertex, which operator id each entry belongs to ([`VertexShape`]). A restore then
//! finds an operator's state by its id, wherever it sits in the new job.
//!
//! An operator's id is its name unless `.uid(..)` set one. Ids must be unique within the job
//! once state moves through a savepoint; names of chained operators need not be otherwise.
//!
//! An iteration head (see `iterate.rs`) has one more entry: its feedback log
//! (`streamtask_runtime::FEEDBACK_LOG`), the records that were in the loop at the cut,
//! with the id `<iteration>/feedback-log` (or the uid given right after `iterate`). Without it
//! a restore from a savepoint would drop the records in the loop. The log is list state: on a
//! rescale the old heads' logs are concatenated and split evenly over the new heads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use streamtask_core::keygroup::check_parallelism;
use streamtask_core::state::TaskSnapshot;
use streamtask_runtime::FEEDBACK_LOG;

use super::JobError;
use super::environment::{JobGraph, StreamEnvironment};
use super::stream::DataStream;
use crate::checkpoint::{CompletedCheckpoint, StateEntry, VertexShape};

impl StreamEnvironment {
    /// Sets the job's max parallelism: the number of key groups keyed state is cut into, and
    /// so the largest parallelism any keyed operator of the job can ever be restored with
    /// (default 128, at most 32768). Set it before the first `key_by`; it cannot change across
    /// a restore from a savepoint (Flink refuses that too).
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// env.set_max_parallelism(16);
    /// assert_eq!(env.max_parallelism(), 16);
    /// ```
    pub fn set_max_parallelism(&self, max_parallelism: u32) {
        let mut g = self.graph.borrow_mut();
        if let Err(e) = check_parallelism(max_parallelism, 1) {
            g.errors.push(JobError::MaxParallelism {
                vertex: "(job)".to_string(),
                source: e,
            });
        }
        g.ids.max_parallelism = max_parallelism;
    }

    /// The job's max parallelism (see [`set_max_parallelism`](Self::set_max_parallelism)).
    pub fn max_parallelism(&self) -> u32 {
        self.graph.borrow().ids.max_parallelism
    }

    /// The max parallelism, after recording an error if `parallelism` subtasks of `vertex`
    /// cannot share its key groups.
    pub(crate) fn checked_max_parallelism(&self, vertex: &str, parallelism: usize) -> u32 {
        let mut g = self.graph.borrow_mut();
        let max = g.ids.max_parallelism;
        let p = u32::try_from(parallelism).unwrap_or(u32::MAX);
        if let Err(e) = check_parallelism(max, p) {
            g.errors.push(JobError::MaxParallelism {
                vertex: vertex.to_string(),
                source: e,
            });
        }
        max
    }
}

impl<T: Send + 'static> DataStream<T> {
    /// Gives the operator just added (or the source, right after `add_source`, or the head's
    /// feedback log, on the head's stream right after [`iterate`](Self::iterate)) the stable id
    /// `uid`, as Flink's `uid()`: its state in a savepoint is found by this id, so the operator
    /// may be renamed, moved to another chain or task, or the job changed around it, and still
    /// restore its state. Without a uid the operator's name is its id.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Legacy);
    /// let out = CollectHandle::new();
    /// env.from_iter("numbers", vec![1u64, 2, 3])
    ///     .uid("numbers-v1")
    ///     .map("double", |n: u64| n * 2)
    ///     .uid("double-v1")
    ///     .collect_sink("out", &out);
    /// assert!(env.build().is_ok());
    /// ```
    pub fn uid(self, uid: &str) -> DataStream<T> {
        // A source task's plan names the source first; operator indices count after it.
        let offset = usize::from(self.is_source);
        let is_head = self
            .env
            .graph
            .borrow()
            .ids
            .feedback_logs
            .contains(&self.vertex);
        let index =
            match self.plan.chain.len().checked_sub(offset) {
                // Right after the source, or right after `iterate` (the head's feedback log).
                Some(0) if self.is_source || is_head => None,
                None | Some(0) => {
                    self.env.graph.borrow_mut().errors.push(JobError::Config(format!(
                    "uid({uid:?}) follows no operator of {:?}; call it right after the source, \
                     the iteration or the operator it names",
                    self.vertex
                )));
                    return self;
                }
                Some(n) => Some(n - 1),
            };
        self.env
            .graph
            .borrow_mut()
            .ids
            .uids
            .insert((self.vertex.clone(), index), uid.to_string());
        self
    }
}

impl<T: Send + 'static> DataStream<T> {
    /// Declares what the source just added reads: an identity of its input (a file's size and
    /// checksum, the parameters it was generated with, a topic and partition set). A source's
    /// state is a position in that input, so a savepoint records the identity and a restore
    /// into a job whose source (found by operator id) declares another one is refused with
    /// [`JobError::SourceMismatch`] before anything runs. A source that declares none is not
    /// checked.
    ///
    /// # Examples
    ///
    /// ```
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let out = CollectHandle::new();
    /// env.from_sequence("numbers", 0..100)
    ///     .source_identity("numbers 0..100")
    ///     .collect_sink("out", &out);
    /// assert!(env.build().is_ok());
    /// ```
    pub fn source_identity(self, identity: impl Into<String>) -> DataStream<T> {
        // Only right after the source: the chain holds the source alone.
        if !self.is_source || self.plan.chain.len() != 1 {
            self.env.graph.borrow_mut().errors.push(JobError::Config(format!(
                "source_identity follows no source of {:?}; call it right after adding the source",
                self.vertex
            )));
            return self;
        }
        self.env
            .graph
            .borrow_mut()
            .ids
            .source_identities
            .insert(self.vertex.clone(), identity.into());
        self
    }
}

impl JobGraph {
    /// The job's max parallelism.
    pub fn max_parallelism(&self) -> u32 {
        self.ids.max_parallelism
    }

    /// Every vertex with the operator id of each state entry its tasks may write: the shape a
    /// savepoint records.
    ///
    /// # Errors
    ///
    /// [`JobError::DuplicateOperatorId`] if two operators have one id.
    pub(crate) fn shape(&self) -> Result<Vec<VertexShape>, JobError> {
        let mut seen = BTreeSet::new();
        let mut shapes = Vec::with_capacity(self.vertices.len());
        for v in &self.vertices {
            let mut states = Vec::new();
            if v.is_source {
                let id = self
                    .ids
                    .uids
                    .get(&(v.name.clone(), None))
                    .cloned()
                    .unwrap_or_else(|| v.name.clone());
                // Any source may hold elements in flight beside its position: a legacy
                // `SourceFunction` the job runs through a `HandoffReader`, and a reader the user
                // built (a `HandoffReader` given to `add_reader`, or any `SourceReader` that
                // overrides `snapshot_task_state`). Declared for every source, so a savepoint
                // carries them whichever way the source was added.
                let in_flight = format!("{id}/in-flight");
                states.push(StateEntry {
                    key: TaskSnapshot::SOURCE.to_string(),
                    operator_id: id,
                });
                states.push(StateEntry {
                    key: TaskSnapshot::SOURCE_IN_FLIGHT.to_string(),
                    operator_id: in_flight,
                });
            }
            if self.ids.feedback_logs.contains(&v.name) {
                let id = self
                    .ids
                    .uids
                    .get(&(v.name.clone(), None))
                    .cloned()
                    .unwrap_or_else(|| format!("{}/feedback-log", v.name));
                states.push(StateEntry {
                    key: FEEDBACK_LOG.to_string(),
                    operator_id: id,
                });
            }
            let operators = &v.plan.chain[usize::from(v.is_source).min(v.plan.chain.len())..];
            for (i, name) in operators.iter().enumerate() {
                let id = self
                    .ids
                    .uids
                    .get(&(v.name.clone(), Some(i)))
                    .cloned()
                    .unwrap_or_else(|| name.clone());
                states.push(StateEntry {
                    key: TaskSnapshot::operator_key(i),
                    operator_id: id,
                });
            }
            for s in &states {
                if !seen.insert(s.operator_id.clone()) {
                    return Err(JobError::DuplicateOperatorId {
                        id: s.operator_id.clone(),
                    });
                }
            }
            shapes.push(VertexShape {
                name: v.name.clone(),
                parallelism: v.parallelism,
                states,
                source_identity: self.ids.source_identities.get(&v.name).cloned(),
            });
        }
        Ok(shapes)
    }

    /// What each source task reads (`<vertex>#<subtask>` -> identity), for the sources that
    /// declared one: stamped into their snapshots of every checkpoint.
    pub(crate) fn source_identity_tasks(&self) -> BTreeMap<String, String> {
        self.vertices
            .iter()
            .filter(|v| v.is_source)
            .filter_map(|v| Some((v, self.ids.source_identities.get(&v.name)?)))
            .flat_map(|(v, identity)| {
                (0..v.parallelism).map(move |i| (format!("{}#{i}", v.name), identity.clone()))
            })
            .collect()
    }

    /// A checkpoint's source positions point into what its sources read then: every source
    /// task of this job that declares an identity must read what the checkpoint says its task
    /// read, where the checkpoint says (checkpoints written before identities were stamped
    /// say nothing and are not checked).
    pub(crate) fn check_checkpoint_identities(
        &self,
        checkpoint: &CompletedCheckpoint,
        path: &Path,
    ) -> Result<(), JobError> {
        for (task, job) in self.source_identity_tasks() {
            let Some(taken) = checkpoint
                .task(&task)
                .and_then(|t| t.get(TaskSnapshot::SOURCE_IDENTITY))
            else {
                continue;
            };
            let taken = String::from_utf8_lossy(taken);
            if taken != job {
                let vertex = task.rsplit_once('#').map_or(task.as_str(), |(v, _)| v);
                let operator = self
                    .ids
                    .uids
                    .get(&(vertex.to_string(), None))
                    .cloned()
                    .unwrap_or_else(|| vertex.to_string());
                return Err(JobError::SourceMismatch {
                    path: path.to_path_buf(),
                    operator,
                    savepoint: taken.into_owned(),
                    job,
                });
            }
        }
        Ok(())
    }
}
