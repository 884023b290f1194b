//! The printable plan of a built job, as Flink's `getExecutionPlan`: its tasks, what runs each
//! under the job's model (and which source adapter, if any), their chains and how their inputs
//! are partitioned.

use std::fmt;

use crate::Model;

/// The plan of a built job: [`JobGraph::plan`](crate::JobGraph::plan).
///
/// Its `Display` lists the tasks in the order they were built (sources first), each with its
/// parallelism, the task runtime the model uses for it, the source adapter the job API picked
/// (if any), its inputs with their partitioning, and the operators chained in it.
///
/// # Examples
///
/// ```
/// use streamtask::prelude::*;
///
/// let env = StreamEnvironment::new(Model::Legacy);
/// let out = CollectHandle::new();
/// env.from_sequence("numbers", 0..10)
///     .map("double", |n: u64| n * 2)
///     .collect_sink("collect", &out);
/// let plan = env.build().unwrap().plan();
/// assert_eq!(plan.tasks().len(), 1);
/// assert_eq!(plan.tasks()[0].adapter, Some(SourceAdapter::ReaderSource));
/// println!("{plan}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    pub(crate) model: Model,
    pub(crate) tasks: Vec<PlannedTask>,
}

impl JobPlan {
    /// The model the plan is for.
    pub fn model(&self) -> Model {
        self.model
    }

    /// The tasks, in the order they were built.
    pub fn tasks(&self) -> &[PlannedTask] {
        &self.tasks
    }

    /// The task named `name`, if any.
    pub fn task(&self, name: &str) -> Option<&PlannedTask> {
        self.tasks.iter().find(|t| t.name == name)
    }
}

/// One task vertex of a [`JobPlan`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlannedTask {
    /// The vertex's name (its tasks are `<name>#<subtask>`).
    pub name: String,
    /// How many subtasks.
    pub parallelism: usize,
    /// The task runtime that runs it, e.g. `mailbox OneInputStreamTask`.
    pub runtime: &'static str,
    /// The adapter the job API put between the source and the model, if any.
    pub adapter: Option<SourceAdapter>,
    /// Its inputs, each from an upstream vertex with a partitioning.
    pub inputs: Vec<PlannedInput>,
    /// The operators chained in the task, head first (the source's name first in a source task).
    pub chain: Vec<String>,
}

/// One input of a [`PlannedTask`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlannedInput {
    /// The upstream vertex.
    pub from: String,
    /// How records are spread over this task's subtasks, e.g. `forward` or `hash`.
    pub partitioning: &'static str,
}

/// How a source written for one model runs under another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceAdapter {
    /// A legacy `SourceFunction` under the mailbox model, through
    /// `streamtask_bridge::HandoffReader` (the function on its own thread, records handed to
    /// the task thread through a checkpointed handoff).
    HandoffReader,
    /// A new-style `SourceReader` under the legacy model, through
    /// `streamtask_bridge::ReaderSource` (polled under the checkpoint lock).
    ReaderSource,
}

impl fmt::Display for SourceAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SourceAdapter::HandoffReader => "HandoffReader (legacy SourceFunction on its thread)",
            SourceAdapter::ReaderSource => "ReaderSource (SourceReader polled under the lock)",
        })
    }
}

impl fmt::Display for JobPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plan under the {} model: {} task vertices",
            self.model,
            self.tasks.len()
        )?;
        for (i, task) in self.tasks.iter().enumerate() {
            writeln!(
                f,
                "{}. {:?} x{}: {}",
                i + 1,
                task.name,
                task.parallelism,
                task.runtime
            )?;
            if let Some(adapter) = task.adapter {
                writeln!(f, "   adapter: {adapter}")?;
            }
            for input in &task.inputs {
                writeln!(f, "   input: {:?} by {}", input.from, input.partitioning)?;
            }
            if task.chain.is_empty() {
                writeln!(
                    f,
                    "   chain: (none: records pass straight to the next task)"
                )?;
            } else {
                writeln!(f, "   chain: {}", task.chain.join(" -> "))?;
            }
        }
        Ok(())
    }
}
