//! The stalled-checkpoint report: a checkpoint pending for longer than
//! [`CheckpointConfig::stall_report_after`](crate::checkpoint::CheckpointConfig::stall_report_after) and,
//! for every task that has not acknowledged it, where the barrier is on each of its input
//! channels and what the task's threads are doing ([`StallReport`]).
//!
//! The coordinator's thread builds it (see [`StallProbe`]) from what each task shows in its
//! live state ([`TaskLive`](streamtask_core::live::TaskLive)), which the task's threads keep up to
//! date without locks; reading it stops nothing.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use streamtask_core::live::{Activity, AsyncQueueFill, BarrierState, LockView};
use streamtask_core::sync::Mutex;

use super::RunningTask;
use crate::checkpoint::StalledCheckpoint;

/// Called with each [`StallReport`] on the checkpoint coordinator's thread (see
/// [`JobConfig::with_stall_reports`](crate::JobConfig::with_stall_reports)); the coordinator
/// waits while it runs, so hand the report off rather than block.
pub type StallCallback = Arc<dyn Fn(&StallReport) + Send + Sync>;

/// A checkpoint pending for longer than its configuration's
/// [`stall_report_after`](crate::checkpoint::CheckpointConfig::stall_report_after), with one
/// [`TaskStall`] for every task that has not acknowledged it.
///
/// `Display` renders it as one block of lines (what the CLI logs); `Serialize` as one object
/// (what the CLI's `--json` lists under `stalled_checkpoints`), which `Deserialize` reads back.
///
/// # Examples
///
/// ```
/// use streamtask::{InputChannel, StallReport, TaskStall};
/// use streamtask_core::live::{Activity, BarrierState};
///
/// let mut stuck = TaskStall::new("stuck#0", "mailbox OneInputStreamTask");
/// stuck.activity = Activity::Processing;
/// stuck.operator = Some("stuck".into());
/// stuck.inputs.push(InputChannel {
///     channel: 0,
///     upstream: Some("numbers#0".into()),
///     barrier: BarrierState::Awaited,
/// });
/// let report = StallReport {
///     checkpoint: 3,
///     savepoint: false,
///     model: "mailbox".into(),
///     pending_ms: 1200,
///     threshold_ms: 1000,
///     report: 1,
///     acknowledged: vec!["numbers#0".into()],
///     tasks: vec![stuck],
/// };
/// let block = report.to_string();
/// assert!(block.starts_with("checkpoint 3 stalled"));
/// assert!(block.contains("in operator \"stuck\""));
/// assert!(block.contains("awaited on channel 0 (from numbers#0)"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StallReport {
    /// The checkpoint.
    pub checkpoint: u64,
    /// Whether it is a stop-with-savepoint's savepoint.
    pub savepoint: bool,
    /// The model the job runs under (`legacy`, `mailbox`, `bridge`).
    pub model: String,
    /// How long it has been pending, milliseconds.
    pub pending_ms: u64,
    /// The threshold it passed, milliseconds.
    pub threshold_ms: u64,
    /// Which report of this checkpoint: 1 at one threshold, 2 a threshold later, ...
    pub report: u32,
    /// The tasks that acknowledged it, in name order.
    pub acknowledged: Vec<String>,
    /// Every task that did not, in name order.
    pub tasks: Vec<TaskStall>,
}

/// One task that has not acknowledged a stalled checkpoint: where the barrier is on its inputs
/// and what its threads are doing (see [`StallReport`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TaskStall {
    /// `<vertex>#<subtask>`.
    pub task: String,
    /// The task runtime that runs it (`legacy OneInputStreamTask`, `mailbox SourceStreamTask`, ...).
    pub runtime: String,
    /// Where the task is in its lifecycle (`Running`, `Finishing`, ...); `ended` once its
    /// threads ended.
    pub state: String,
    /// What its main thread is doing.
    pub activity: Activity,
    /// The mail it runs, while [`activity`](Self::activity) is [`Activity::Mail`].
    pub mail: Option<String>,
    /// The operator of its chain that runs user code now (or ran it last), as the task's
    /// [`RunningOperator`](streamtask_core::operator::RunningOperator) says.
    pub operator: Option<String>,
    /// Whether a send of the task blocks on a full output channel now.
    pub output_blocked: bool,
    /// Its input channels, in its gate's order (empty for a source: the coordinator triggers
    /// it directly).
    pub inputs: Vec<InputChannel>,
    /// Its checkpoint lock (legacy and bridge models, and a handoff reader's): who holds it
    /// and who waits.
    pub lock: Option<LockView>,
    /// Its async operator's queue (a keyed async-fn operator's records held against its
    /// in-flight cap).
    pub async_queue: Option<AsyncQueueFill>,
}

impl TaskStall {
    /// A task `task` run by `runtime` about which nothing is known yet: starting, no inputs.
    pub fn new(task: impl Into<String>, runtime: impl Into<String>) -> Self {
        TaskStall {
            task: task.into(),
            runtime: runtime.into(),
            state: "Running".into(),
            activity: Activity::Starting,
            mail: None,
            operator: None,
            output_blocked: false,
            inputs: Vec::new(),
            lock: None,
            async_queue: None,
        }
    }

    /// The input channels on which the checkpoint's barrier has not arrived.
    pub fn awaited(&self) -> impl Iterator<Item = &InputChannel> {
        self.inputs
            .iter()
            .filter(|c| c.barrier == BarrierState::Awaited)
    }
}

/// One input channel of a [`TaskStall`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputChannel {
    /// The channel's index in the task's gate (input 1's channels first in a two-input task).
    pub channel: usize,
    /// The upstream task writing into it, where the job knows it.
    pub upstream: Option<String>,
    /// Where the checkpoint's barrier is on it.
    pub barrier: BarrierState,
}

impl fmt::Display for StallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.savepoint {
            "savepoint"
        } else {
            "checkpoint"
        };
        let total = self.acknowledged.len() + self.tasks.len();
        write!(
            f,
            "{what} {} stalled: pending {} ms (reported after {} ms{}), {} of {total} tasks \
             acknowledged, {} model",
            self.checkpoint,
            self.pending_ms,
            self.threshold_ms,
            if self.report > 1 {
                format!(", report {}", self.report)
            } else {
                String::new()
            },
            self.acknowledged.len(),
            self.model,
        )?;
        for task in &self.tasks {
            write!(f, "\n{task}")?;
        }
        Ok(())
    }
}

impl fmt::Display for TaskStall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "  task {} ({}, {})", self.task, self.runtime, self.state)?;
        write!(f, "\n    thread: {}", self.activity)?;
        if let Some(mail) = &self.mail {
            write!(f, " \"{mail}\"")?;
        }
        if let Some(operator) = &self.operator {
            // The operator is in a call only while the thread runs the chain: an input step or a
            // mail (a source function's own code is not the chain's).
            let running = matches!(self.activity, Activity::Processing | Activity::Mail);
            if running || self.output_blocked {
                write!(f, ", in operator \"{operator}\"")?;
            } else {
                write!(f, " (operator \"{operator}\" ran last)")?;
            }
        }
        if self.output_blocked {
            f.write_str("\n    output: blocked on a full channel (downstream does not keep up)")?;
        }
        if self.inputs.is_empty() {
            f.write_str("\n    inputs: none (a source: the coordinator triggers it)")?;
        } else {
            let mut parts = Vec::new();
            for (state, word) in [
                (BarrierState::Awaited, "awaited"),
                (BarrierState::Arrived, "arrived"),
                (BarrierState::Ended, "ended"),
            ] {
                let channels: Vec<String> = self
                    .inputs
                    .iter()
                    .filter(|c| c.barrier == state)
                    .map(|c| match &c.upstream {
                        Some(upstream) => format!("{} (from {upstream})", c.channel),
                        None => c.channel.to_string(),
                    })
                    .collect();
                if !channels.is_empty() {
                    let noun = if state == BarrierState::Ended {
                        "input ended"
                    } else {
                        "barrier"
                    };
                    let plural = if channels.len() > 1 { "s" } else { "" };
                    parts.push(format!(
                        "{noun} {word} on channel{plural} {}",
                        channels.join(", ")
                    ));
                }
            }
            write!(f, "\n    inputs: {}", parts.join("; "))?;
        }
        if let Some(lock) = &self.lock {
            f.write_str("\n    checkpoint lock: ")?;
            match (lock.holder, lock.last_holder) {
                (Some(holder), _) => write!(f, "held by {holder}")?,
                (None, Some(last)) => write!(f, "free (last held by {last})")?,
                (None, None) => f.write_str("free")?,
            }
            if !lock.waiting.is_empty() {
                let waiting: Vec<&str> = lock.waiting.iter().map(|r| r.describe()).collect();
                write!(f, "; waiting: {}", waiting.join(", "))?;
            }
        }
        if let Some(queue) = &self.async_queue {
            write!(
                f,
                "\n    async queue: {} of {} in flight{}",
                queue.in_flight,
                queue.capacity,
                if queue.in_flight >= queue.capacity {
                    " (full: the task takes no input until a result comes back)"
                } else {
                    ""
                }
            )?;
        }
        Ok(())
    }
}

/// What the coordinator's thread needs to complete a [`StalledCheckpoint`] into a
/// [`StallReport`]: the attempt's running tasks and what the job knows of each.
pub(crate) struct StallProbe {
    pub(crate) model: &'static str,
    /// Per task, in the attempt's order (the order of `tasks`): its name, its runtime, and the
    /// upstream task of each of its gate's channels.
    pub(crate) tasks: Vec<(String, &'static str, Vec<String>)>,
    pub(crate) running: Arc<Mutex<Vec<Option<RunningTask>>>>,
}

impl StallProbe {
    /// The report of `stalled`, read from the tasks' live state now.
    pub(crate) fn report(&self, stalled: &StalledCheckpoint) -> StallReport {
        let running = self.running.lock();
        let tasks = stalled
            .missing
            .iter()
            .map(|name| {
                let index = self.tasks.iter().position(|(n, _, _)| n == name);
                let (runtime, upstream) = index.map_or(("unknown", &[][..]), |i| {
                    (self.tasks[i].1, &self.tasks[i].2[..])
                });
                let mut stall = TaskStall::new(name.clone(), runtime);
                match index.and_then(|i| running.get(i)).and_then(Option::as_ref) {
                    Some(task) => read_task(&mut stall, task, stalled.id, upstream),
                    None => {
                        stall.state = "ended".into();
                        stall.activity = Activity::Ended;
                    }
                }
                stall
            })
            .collect();
        StallReport {
            checkpoint: stalled.id,
            savepoint: stalled.savepoint,
            model: self.model.to_string(),
            pending_ms: stalled.pending_ms,
            threshold_ms: stalled.threshold_ms,
            report: stalled.report,
            acknowledged: stalled.acknowledged.clone(),
            tasks,
        }
    }
}

/// Fills `stall` from `task`'s live state for checkpoint `id`.
fn read_task(stall: &mut TaskStall, task: &RunningTask, id: u64, upstream: &[String]) {
    let live = &task.metrics().live;
    stall.state = format!("{:?}", task.state());
    stall.activity = live.activity();
    stall.mail = live.mail_name().map(str::to_string);
    stall.operator = task.running_operator().name();
    stall.output_blocked = live.output_blocked();
    let barriers = live.barriers(id);
    // The job's wiring names the upstream of each channel; a gate of another shape (one the
    // job did not wire) gets none rather than wrong ones.
    let named = barriers.len() == upstream.len();
    stall.inputs = barriers
        .into_iter()
        .enumerate()
        .map(|(channel, barrier)| InputChannel {
            channel,
            upstream: named.then(|| upstream[channel].clone()),
            barrier,
        })
        .collect();
    let lock = live.lock();
    stall.lock = lock.present.then_some(lock);
    stall.async_queue = live.async_queue();
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamtask_core::live::ThreadRole;

    fn sample() -> StallReport {
        let mut stuck = TaskStall::new("stuck#0", "legacy OneInputStreamTask");
        stuck.activity = Activity::Processing;
        stuck.operator = Some("stuck".into());
        stuck.inputs = vec![InputChannel {
            channel: 0,
            upstream: Some("numbers#0".into()),
            barrier: BarrierState::Awaited,
        }];
        stuck.lock = Some(LockView {
            present: true,
            holder: Some(ThreadRole::Task),
            last_holder: Some(ThreadRole::Task),
            waiting: vec![ThreadRole::AsyncCalls],
        });
        let mut merge = TaskStall::new("merge#0", "legacy OneInputStreamTask");
        merge.activity = Activity::Idle;
        merge.operator = Some("merge".into());
        merge.inputs = vec![
            InputChannel {
                channel: 0,
                upstream: Some("stuck#0".into()),
                barrier: BarrierState::Awaited,
            },
            InputChannel {
                channel: 1,
                upstream: Some("stuck#1".into()),
                barrier: BarrierState::Arrived,
            },
        ];
        merge.async_queue = Some(AsyncQueueFill {
            in_flight: 4,
            capacity: 4,
        });
        StallReport {
            checkpoint: 7,
            savepoint: false,
            model: "legacy".into(),
            pending_ms: 1500,
            threshold_ms: 1000,
            report: 2,
            acknowledged: vec!["numbers#0".into(), "stuck#1".into()],
            tasks: vec![stuck, merge],
        }
    }

    #[test]
    fn the_block_names_each_missing_task_its_inputs_and_its_thread() {
        let block = sample().to_string();
        let expected = "\
checkpoint 7 stalled: pending 1500 ms (reported after 1000 ms, report 2), 2 of 4 tasks acknowledged, legacy model
  task stuck#0 (legacy OneInputStreamTask, Running)
    thread: processing input, in operator \"stuck\"
    inputs: barrier awaited on channel 0 (from numbers#0)
    checkpoint lock: held by the task thread; waiting: the async-calls thread (checkpoint triggers, notices)
  task merge#0 (legacy OneInputStreamTask, Running)
    thread: waiting for input (operator \"merge\" ran last)
    inputs: barrier awaited on channel 0 (from stuck#0); barrier arrived on channel 1 (from stuck#1)
    async queue: 4 of 4 in flight (full: the task takes no input until a result comes back)";
        assert_eq!(block, expected);
    }

    #[test]
    fn a_source_a_mail_and_a_blocked_output_read_as_such() {
        let mut source = TaskStall::new("numbers#0", "mailbox SourceStreamTask");
        source.activity = Activity::Mail;
        source.mail = Some("checkpoint trigger".into());
        source.operator = Some("numbers".into());
        source.output_blocked = true;
        let block = source.to_string();
        assert!(
            block
                .contains("thread: running a mail \"checkpoint trigger\", in operator \"numbers\""),
            "{block}"
        );
        assert!(
            block.contains("output: blocked on a full channel"),
            "{block}"
        );
        assert!(block.contains("inputs: none (a source"), "{block}");
    }

    #[test]
    fn the_report_serializes_as_one_object() {
        let json = serde_json::to_value(sample()).unwrap();
        assert_eq!(json["checkpoint"], 7);
        assert_eq!(json["tasks"][0]["task"], "stuck#0");
        assert_eq!(json["tasks"][0]["activity"], "processing");
        assert_eq!(json["tasks"][0]["inputs"][0]["barrier"], "awaited");
        assert_eq!(json["tasks"][0]["lock"]["holder"], "task");
        assert_eq!(json["tasks"][1]["inputs"][1]["upstream"], "stuck#1");
        assert_eq!(json["tasks"][1]["async_queue"]["capacity"], 4);
    }
}
