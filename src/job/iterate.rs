//! Iterations in the job API: [`DataStream::iterate`] and [`IterativeStream::close_with`], as
//! Flink's `DataStream#iterate` / `IterativeStream#closeWith`, with exactly-once loops.
//!
//! `iterate` ends the current vertex in forward channels into a new head vertex, whose input is
//! the kit's [`IterationInput`] (the regular channels plus the feedback edge) under every model:
//! the legacy model's input task (the thread polls with the deadline as timeout, records go
//! through the chain under the checkpoint lock), or the mailbox model's
//! [`IterationHeadStreamTask`](streamtask_mailbox::IterationHeadStreamTask) (the default action suspends;
//! feedback or the alarm resumes it). The bridge model runs the mailbox head: its rule keeps the
//! legacy form for sources only, and a head is a task with inputs.
//!
//! `close_with` ends the feedback stream's vertex in the tail (the kit's `FeedbackWriter` and
//! `FeedbackOutput`) and wires the feedback edge: tail subtask `i` to head subtask `i`, so the
//! feedback stream must have the head's parallelism (as Flink demands). The checkpoint
//! coordinator needs nothing special for the cycle: the head is not a source (it is never
//! triggered), the tail acknowledges like any task, and the head acknowledges once its barrier
//! came back with the feedback log (see `streamtask_runtime::IterationInput`).

use std::fmt;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::operator::{BoxOperator, TaskOutput};
use streamtask_runtime::channel::Partitioner;
use streamtask_runtime::{FeedbackOutput, FeedbackWriter, IterationError, IterationInput};

use super::builder::EdgeSpec;
use super::environment::StreamEnvironment;
use super::plan::{PlannedInput, PlannedTask};
use super::segment::{Segment, input_gate};
use super::spawn::{Spawner, Tail};
use super::stream::{DataStream, Head};
use super::wiring::{EdgeChannels, EdgePattern};
use crate::Model;

impl<T> DataStream<T>
where
    T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// Starts an iteration named `name` (Flink's `iterate(maxWaitTime)`): a new head vertex with
    /// this stream's parallelism reads this stream and, once [closed](IterativeStream::close_with),
    /// the feedback stream. Returns the iteration, to close with the feedback later, and the
    /// head's stream, to build the loop body on (Flink's `IterativeStream` is both; Rust's moves
    /// split it in two).
    ///
    /// The head ends when no feedback arrived for `max_wait` after its input ended, as Flink's
    /// does: choose `max_wait` longer than a record's longest trip around the loop. A record that
    /// comes back later fails the tail with a message saying to raise it (never lost silently).
    ///
    /// Exactly once, beyond Flink: the records in the loop at a checkpoint are in the head's
    /// snapshot (Carbone et al. 2015) and replayed on restore. Watermarks enter the loop but are
    /// not fed back.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Mailbox);
    /// let out = CollectHandle::new();
    /// let (iteration, head) = env
    ///     .from_iter("numbers", vec![3u64, 40, 100])
    ///     .iterate("halve", Duration::from_millis(500));
    /// let mut branches = head.map("half", |n: u64| n / 2).fan_out(&["again", "done"]);
    /// let done = branches.pop().unwrap();
    /// let again = branches.pop().unwrap();
    /// iteration.close_with(again.filter("big", |n: &u64| *n >= 10));
    /// done.filter("small", |n: &u64| *n < 10).collect_sink("collect", &out);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// let mut got = out.committed();
    /// got.sort();
    /// assert_eq!(got, [1, 5, 6]);
    /// ```
    pub fn iterate(self, name: &str, max_wait: Duration) -> (IterativeStream<T>, DataStream<T>) {
        let env = self.env.clone();
        let parallelism = self.parallelism;
        let (edge, input) = self.edge_into(
            name,
            EdgePattern::Forward,
            "forward",
            parallelism,
            Arc::new(|_| Partitioner::Forward),
        );
        env.claim_name(name);
        env.graph.borrow_mut().has_iteration = true;
        let feedback = {
            let mut graph = env.graph.borrow_mut();
            // The head's feedback log is part of the savepoint's shape (see `identity.rs`).
            graph.ids.feedback_logs.insert(name.to_string());
            graph.edges.push(EdgeSpec {
                pattern: EdgePattern::Forward,
                up: parallelism,
                down: parallelism,
                create: Box::new(|_, up, _, _| Ok(EdgeChannels::feedback::<T>(up))),
                from: name.to_string(),
                // Read by the head outside its gate.
                to: String::new(),
            });
            graph.edges.len() - 1
        };
        let plan = PlannedTask {
            name: name.to_string(),
            parallelism,
            runtime: match env.model() {
                Model::Legacy => "legacy OneInputStreamTask (iteration head)",
                Model::Mailbox | Model::Bridge => "mailbox IterationHeadStreamTask",
            },
            adapter: None,
            inputs: vec![
                input,
                PlannedInput {
                    from: format!("{name} (tail)"),
                    partitioning: "feedback",
                },
            ],
            chain: Vec::new(),
        };
        let head = DataStream {
            env: env.clone(),
            segment: Some(Box::new(HeadSegment::<T> {
                iteration: name.to_string(),
                edge,
                feedback,
                max_wait,
                _types: std::marker::PhantomData,
            })),
            vertex: name.to_string(),
            parallelism,
            head: Head::Input,
            is_source: false,
            bare_input: None,
            plan,
        };
        let iteration = IterativeStream {
            env,
            name: name.to_string(),
            parallelism,
            feedback,
            max_wait,
            closed: false,
            _types: std::marker::PhantomData,
        };
        (iteration, head)
    }
}

/// An iteration waiting for its feedback stream; made by [`DataStream::iterate`]. Dropping it
/// without [`close_with`](Self::close_with) makes the job's build fail.
#[must_use = "an iteration must be closed with its feedback stream"]
pub struct IterativeStream<T> {
    env: StreamEnvironment,
    name: String,
    parallelism: usize,
    feedback: usize,
    max_wait: Duration,
    closed: bool,
    _types: std::marker::PhantomData<fn() -> T>,
}

impl<T> IterativeStream<T>
where
    T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// The iteration's name (its head vertex).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Closes the loop (Flink's `closeWith`): every record of `feedback` goes back to the head;
    /// the feedback stream ends here (its vertex's chain ends in the tail). `feedback` must be of
    /// the same job and have the head's parallelism; otherwise the job's build fails with
    /// [`IterationError::Parallelism`] or [`JobError::UnionAcrossJobs`](super::JobError).
    pub fn close_with(mut self, mut feedback: DataStream<T>) {
        self.closed = true;
        if !Rc::ptr_eq(&self.env.graph, &feedback.env.graph) {
            self.env.fail(super::JobError::UnionAcrossJobs {
                vertex: self.name.clone(),
            });
        }
        if feedback.parallelism != self.parallelism {
            self.env.fail(
                IterationError::Parallelism {
                    iteration: self.name.clone(),
                    head: self.parallelism,
                    feedback: feedback.parallelism,
                }
                .into(),
            );
        }
        let edge = self.feedback;
        let iteration = self.name.clone();
        let max_wait = self.max_wait;
        feedback.plan.chain.push(format!("{} feedback", self.name));
        let tail: Tail<T> = Arc::new(move |ctx| {
            let sender = ctx.wiring.take_feedback_sender::<T>(edge, ctx.subtask);
            let op: BoxOperator<T, ()> = Box::new(FeedbackWriter::new(
                iteration.clone(),
                max_wait,
                sender.clone(),
            ));
            Ok((
                op,
                Box::new(FeedbackOutput::new(sender)) as Box<dyn TaskOutput<()>>,
            ))
        });
        feedback.finish_vertex(tail);
    }
}

impl<T> Drop for IterativeStream<T> {
    fn drop(&mut self) {
        if !self.closed
            && let Ok(mut g) = self.env.graph.try_borrow_mut()
        {
            g.errors.push(
                IterationError::NotClosed {
                    iteration: self.name.clone(),
                }
                .into(),
            );
        }
    }
}

impl<T> fmt::Debug for IterativeStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IterativeStream")
            .field("name", &self.name)
            .field("parallelism", &self.parallelism)
            .field("max_wait", &self.max_wait)
            .finish_non_exhaustive()
    }
}

/// The head vertex's segment: the regular input edge and the feedback edge into an
/// [`IterationInput`], under the model's head task.
struct HeadSegment<T> {
    iteration: String,
    edge: usize,
    feedback: usize,
    max_wait: Duration,
    _types: std::marker::PhantomData<fn() -> T>,
}

impl<T> Segment<T> for HeadSegment<T>
where
    T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    fn finish(self: Box<Self>, tail: Tail<T>) -> Spawner {
        let HeadSegment {
            iteration,
            edge,
            feedback,
            max_wait,
            ..
        } = *self;
        Box::new(move |ctx, mut config| {
            let (chain, output) = tail(ctx)?;
            let gate = input_gate::<T>(ctx, &[edge], &config)?;
            let receiver = ctx
                .wiring
                .take_feedback_receiver::<T>(feedback, ctx.subtask);
            let input =
                IterationInput::new(iteration.clone(), gate, receiver, max_wait, &mut config)?;
            Ok(match ctx.model {
                Model::Legacy => {
                    streamtask_legacy::IterationHeadStreamTask::new(config, input, chain, output)
                        .with_fairness(ctx.fairness)
                        .spawn()
                }
                Model::Mailbox | Model::Bridge => {
                    streamtask_mailbox::IterationHeadStreamTask::new(config, input, chain, output)
                        .spawn()
                }
            })
        })
    }
}
