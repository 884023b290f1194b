//! Channels between the job's tasks, made fresh for every attempt.
//!
//! A task's chain ends in the runtime's [`RecordWriter`](streamtask_runtime::channel::RecordWriter)
//! over the senders of its outgoing edge (forward, by key, broadcast over a fan-out's
//! branches), and the task's output is that writer's
//! [`control`](streamtask_runtime::channel::RecordWriter::control) side, for barriers, end of
//! input and availability.

use std::any::Any;
use std::fmt;

use streamtask_core::StreamElement;
use streamtask_core::sync::Mutex;
use streamtask_runtime::channel::{Receiver, Sender, bounded};

use super::JobError;

/// How an edge connects upstream subtasks to downstream subtasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EdgePattern {
    /// Subtask `i` feeds subtask `i` only (equal parallelism).
    Forward,
    /// Every upstream subtask feeds every downstream subtask (hash, round robin, broadcast,
    /// custom partitioning).
    AllToAll,
    /// Each upstream subtask feeds a local group of downstream subtasks, or a group of
    /// upstream subtasks feeds one downstream subtask (Flink's rescale): with `up <= down`,
    /// downstream `j` reads upstream `j * up / down`; with `up > down`, upstream `i` writes
    /// downstream `i * down / up`.
    Pointwise,
}

/// The channels of one edge for one attempt: each side's ends, type-erased until the typed
/// spawner of each side takes them.
pub(crate) struct EdgeChannels {
    senders: Vec<Option<Box<dyn Any + Send>>>,
    receivers: Vec<Option<Box<dyn Any + Send>>>,
    /// Releases each bounded channel on its receiver's behalf (see [`Wiring::releases`]).
    releases: Vec<ChannelRelease>,
}

/// Releases one channel of an attempt: its senders fail, also one blocked on it.
pub(crate) type ChannelRelease = Box<dyn Fn() + Send + Sync>;

impl EdgeChannels {
    /// Channels for an edge carrying `T` from `up` to `down` subtasks.
    pub(crate) fn create<T: Send + 'static>(
        pattern: EdgePattern,
        up: usize,
        down: usize,
        capacity: usize,
    ) -> Result<EdgeChannels, JobError> {
        let mut senders: Vec<Vec<Sender<StreamElement<T>>>> = (0..up).map(|_| Vec::new()).collect();
        let mut receivers: Vec<Vec<Receiver<StreamElement<T>>>> =
            (0..down).map(|_| Vec::new()).collect();
        match pattern {
            EdgePattern::Forward => {
                for i in 0..up.min(down) {
                    let (tx, rx) = bounded(capacity)?;
                    senders[i].push(tx);
                    receivers[i].push(rx);
                }
            }
            EdgePattern::Pointwise => {
                for (i, sender_set) in senders.iter_mut().enumerate() {
                    for (j, receiver_set) in receivers.iter_mut().enumerate() {
                        let linked = if up <= down {
                            j * up / down == i
                        } else {
                            i * down / up == j
                        };
                        if linked {
                            let (tx, rx) = bounded(capacity)?;
                            sender_set.push(tx);
                            receiver_set.push(rx);
                        }
                    }
                }
            }
            EdgePattern::AllToAll => {
                // Channel (i, j): upstream i's j-th sender is downstream j's i-th receiver, so a
                // hash partitioner's channel index is the downstream subtask.
                for sender_set in senders.iter_mut() {
                    for receiver_set in receivers.iter_mut() {
                        let (tx, rx) = bounded(capacity)?;
                        sender_set.push(tx);
                        receiver_set.push(rx);
                    }
                }
            }
        }
        let releases = receivers
            .iter()
            .flatten()
            .map(|rx| {
                let release = rx.release_handle();
                Box::new(move || release.release()) as ChannelRelease
            })
            .collect();
        Ok(EdgeChannels {
            releases,
            senders: senders
                .into_iter()
                .map(|s| Some(Box::new(s) as Box<dyn Any + Send>))
                .collect(),
            receivers: receivers
                .into_iter()
                .map(|r| Some(Box::new(r) as Box<dyn Any + Send>))
                .collect(),
        })
    }
}

impl EdgeChannels {
    /// The feedback edges of an iteration with `parallelism` subtasks: tail subtask `i` feeds
    /// head subtask `i` through an unbounded [`feedback_edge`](streamtask_runtime::feedback_edge).
    pub(crate) fn feedback<T: Send + 'static>(parallelism: usize) -> EdgeChannels {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..parallelism)
            .map(|_| {
                let (tx, rx) = streamtask_runtime::feedback_edge::<T>();
                (
                    Some(Box::new(tx) as Box<dyn Any + Send>),
                    Some(Box::new(rx) as Box<dyn Any + Send>),
                )
            })
            .unzip();
        // Unbounded: a sender never blocks on one, so there is nothing to release.
        EdgeChannels {
            senders,
            receivers,
            releases: Vec::new(),
        }
    }
}

/// Every edge's channels for one attempt.
pub(crate) struct Wiring {
    edges: Vec<Mutex<EdgeChannels>>,
}

impl Wiring {
    pub(crate) fn new(edges: Vec<EdgeChannels>) -> Self {
        Wiring {
            edges: edges.into_iter().map(Mutex::new).collect(),
        }
    }

    /// Takes what releases every bounded channel of the attempt. The executor releases them
    /// all when it stops the attempt (cancelled or failed): a task blocked sending into a full
    /// channel then ends even when the task reading that channel is stuck in user code and
    /// never drops its end, so the stuck task's thread is the only one left behind.
    pub(crate) fn take_releases(&self) -> Vec<ChannelRelease> {
        self.edges
            .iter()
            .flat_map(|edge| std::mem::take(&mut edge.lock().releases))
            .collect()
    }

    /// Takes upstream subtask `subtask`'s senders of edge `edge`.
    ///
    /// # Panics
    ///
    /// If they were taken already or carry another type: the job builder wires each end once,
    /// with the edge's own type.
    pub(crate) fn take_senders<T: Send + 'static>(
        &self,
        edge: usize,
        subtask: usize,
    ) -> Vec<Sender<StreamElement<T>>> {
        let taken = self.edges[edge].lock().senders[subtask].take();
        *taken
            .expect("each sender set is taken once per attempt")
            .downcast::<Vec<Sender<StreamElement<T>>>>()
            .expect("edge types match their writers")
    }

    /// Takes downstream subtask `subtask`'s receivers of edge `edge`.
    ///
    /// # Panics
    ///
    /// As [`take_senders`](Self::take_senders).
    pub(crate) fn take_receivers<T: Send + 'static>(
        &self,
        edge: usize,
        subtask: usize,
    ) -> Vec<Receiver<StreamElement<T>>> {
        let taken = self.edges[edge].lock().receivers[subtask].take();
        *taken
            .expect("each receiver set is taken once per attempt")
            .downcast::<Vec<Receiver<StreamElement<T>>>>()
            .expect("edge types match their readers")
    }
}

impl Wiring {
    /// Takes tail subtask `subtask`'s end of feedback edge `edge`.
    ///
    /// # Panics
    ///
    /// As [`take_senders`](Self::take_senders).
    pub(crate) fn take_feedback_sender<T: Send + 'static>(
        &self,
        edge: usize,
        subtask: usize,
    ) -> streamtask_runtime::FeedbackSender<T> {
        let taken = self.edges[edge].lock().senders[subtask].take();
        *taken
            .expect("each feedback sender is taken once per attempt")
            .downcast()
            .expect("feedback edge types match their tails")
    }

    /// Takes head subtask `subtask`'s end of feedback edge `edge`.
    ///
    /// # Panics
    ///
    /// As [`take_senders`](Self::take_senders).
    pub(crate) fn take_feedback_receiver<T: Send + 'static>(
        &self,
        edge: usize,
        subtask: usize,
    ) -> streamtask_runtime::FeedbackReceiver<T> {
        let taken = self.edges[edge].lock().receivers[subtask].take();
        *taken
            .expect("each feedback receiver is taken once per attempt")
            .downcast()
            .expect("feedback edge types match their heads")
    }
}

impl fmt::Debug for Wiring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wiring")
            .field("edges", &self.edges.len())
            .finish()
    }
}
