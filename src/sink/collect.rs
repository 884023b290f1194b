//! The in-memory collecting sink, with the two-phase semantics of the file sink, for tests.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::mem;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::SinkError;
use streamtask_core::OperatorError;
use streamtask_core::StreamRecord;
use streamtask_core::operator::{Context, Operator};
use streamtask_core::state;
use streamtask_core::sync::{Arc, Mutex};

/// A cloneable, `Send` view of what [`CollectSink`]s collected; it outlives the sinks, so it
/// sees the output of every attempt of a job.
///
/// It keeps two views:
///
/// - [`received`](Self::received): every record any of its sinks processed, in arrival order,
///   across attempts. After a failure and restore, replayed records appear again here: this is
///   the at-least-once view.
/// - [`committed`](Self::committed): the records of committed transactions only, in commit
///   order: the exactly-once view, which after any number of restores equals the output of a
///   run without failures (as a multiset; order across subtasks follows commit order).
///
/// # Examples
///
/// ```
/// use streamtask::sink::{CollectHandle, CollectSink};
/// use streamtask_core::testing::OperatorHarness;
///
/// let handle = CollectHandle::new();
/// let mut h = OperatorHarness::new(CollectSink::new("collect", &handle));
/// h.open().unwrap();
/// h.process('a').unwrap();
/// let checkpoint = h.snapshot(1).unwrap();
/// h.process('b').unwrap(); // lost with the crash below
/// drop(h); // crash before checkpoint 1's completion notice
///
/// // The next attempt restores checkpoint 1 (it completed) and recommits its transaction.
/// let mut h = OperatorHarness::restored(CollectSink::new("collect", &handle), &checkpoint);
/// h.open().unwrap();
/// h.process('b').unwrap(); // replayed by the source
/// h.end_input().unwrap();
/// assert_eq!(handle.commit_finished(), 1);
/// assert_eq!(handle.received(), vec!['a', 'b', 'b']);
/// assert_eq!(handle.committed(), vec!['a', 'b']);
/// ```
pub struct CollectHandle<T> {
    shared: Arc<Mutex<Shared<T>>>,
}

/// What all sinks of one handle share; it plays the part the output directory plays for the
/// file sink.
struct Shared<T> {
    received: Vec<T>,
    committed: Vec<T>,
    /// `(subtask, txn)` of every committed transaction, so commits are idempotent.
    committed_txns: BTreeSet<(usize, u64)>,
    /// Per subtask, what its `finish` pre-committed: `(txn, records)`.
    finals: BTreeMap<usize, Vec<(u64, Vec<T>)>>,
}

impl<T> Shared<T> {
    /// Commits a transaction unless it was committed already; returns whether it was new.
    fn commit(&mut self, subtask: usize, txn: u64, records: impl IntoIterator<Item = T>) -> bool {
        let new = self.committed_txns.insert((subtask, txn));
        if new {
            self.committed.extend(records);
        }
        new
    }

    fn next_txn_after_committed(&self, subtask: usize) -> u64 {
        self.committed_txns
            .range((subtask, 0)..=(subtask, u64::MAX))
            .next_back()
            .map_or(0, |&(_, txn)| txn + 1)
    }
}

impl<T> CollectHandle<T> {
    /// An empty handle.
    pub fn new() -> Self {
        CollectHandle {
            shared: Arc::new(Mutex::new(Shared {
                received: Vec::new(),
                committed: Vec::new(),
                committed_txns: BTreeSet::new(),
                finals: BTreeMap::new(),
            })),
        }
    }

    /// Every record received by any sink of this handle, in arrival order, including records
    /// of failed attempts.
    pub fn received(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.shared.lock().received.clone()
    }

    /// The records of committed transactions, in commit order.
    pub fn committed(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.shared.lock().committed.clone()
    }

    /// Commits what the sinks' `finish` pre-committed (their last records and any transaction
    /// still waiting for a completion notice); returns how many transactions it committed.
    ///
    /// Call it once the whole job has finished successfully, as the executor calls the file
    /// sink's [`commit_finished`](super::commit_finished). Idempotent.
    pub fn commit_finished(&self) -> usize {
        let mut shared = self.shared.lock();
        let finals = mem::take(&mut shared.finals);
        let mut committed = 0;
        for (subtask, txns) in finals {
            for (txn, records) in txns {
                if shared.commit(subtask, txn, records) {
                    committed += 1;
                }
            }
        }
        committed
    }
}

impl<T> Default for CollectHandle<T> {
    fn default() -> Self {
        CollectHandle::new()
    }
}

impl<T> Clone for CollectHandle<T> {
    fn clone(&self) -> Self {
        CollectHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> fmt::Debug for CollectHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.shared.lock();
        f.debug_struct("CollectHandle")
            .field("received", &shared.received.len())
            .field("committed", &shared.committed.len())
            .field("finals", &shared.finals.len())
            .finish()
    }
}

/// An in-memory sink that collects records into a [`CollectHandle`], with the transaction
/// semantics of [`TwoPhaseCommitFileSink`](super::TwoPhaseCommitFileSink), so exactly-once
/// tests can run without files.
///
/// - Every record goes to the handle's received view at once, and into the open transaction.
/// - `snapshot_state(c)` pre-commits the open transaction (if it has records) as pending for
///   `c`; the state holds the pending transactions *with their records* (so `T` must be serde),
///   plus the transaction counter.
/// - `notify_checkpoint_complete(c)` commits the pending transactions with a checkpoint `<= c`;
///   an aborted checkpoint's transaction stays pending for the next completed one.
/// - A restore commits the transactions of its state unless the handle committed them already,
///   and drops what the crashed attempt pre-committed at `finish`; the crashed instance's open
///   and pending transactions vanish with it.
/// - `finish` pre-commits the last records; [`CollectHandle::commit_finished`] commits them.
///   One snapshot after `finish` (a draining savepoint's) takes them as pending for the
///   savepoint, whose completion commits them (see the [module doc](super), "Drain").
///
/// Several subtasks may share one handle; give each its index with
/// [`with_subtask`](Self::with_subtask). See [`CollectHandle`] for an example.
pub struct CollectSink<T> {
    name: String,
    subtask: usize,
    handle: CollectHandle<T>,
    /// Records of the open transaction.
    open: Vec<T>,
    /// Pre-committed transactions awaiting their checkpoint's completion, in order.
    pending: Vec<PendingTxn<T>>,
    next_txn: u64,
    /// The last records `finish` pre-committed, with their transaction, until a draining
    /// savepoint's snapshot takes them.
    finished: Option<(u64, Vec<T>)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct PendingTxn<T> {
    txn: u64,
    checkpoint: u64,
    records: Vec<T>,
}

#[derive(Serialize)]
struct StateRef<'a, T> {
    subtask: usize,
    next_txn: u64,
    pending: &'a [PendingTxn<T>],
}

#[derive(Deserialize)]
struct State<T> {
    subtask: usize,
    next_txn: u64,
    pending: Vec<PendingTxn<T>>,
}

impl<T> CollectSink<T> {
    /// A sink named `name` (subtask 0) collecting into `handle`.
    pub fn new(name: impl Into<String>, handle: &CollectHandle<T>) -> Self {
        CollectSink {
            name: name.into(),
            subtask: 0,
            handle: handle.clone(),
            open: Vec::new(),
            pending: Vec::new(),
            next_txn: 0,
            finished: None,
        }
    }

    /// The same sink for parallel subtask `subtask`.
    pub fn with_subtask(mut self, subtask: usize) -> Self {
        self.subtask = subtask;
        self
    }

    /// The handle it collects into.
    pub fn handle(&self) -> &CollectHandle<T> {
        &self.handle
    }
}

impl<T> Operator for CollectSink<T>
where
    T: Clone + Send + Serialize + DeserializeOwned,
{
    type In = T;
    type Out = ();

    fn name(&self) -> &str {
        &self.name
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        let state = restored
            .map(state::decode::<State<T>>)
            .transpose()
            .map_err(|e| OperatorError::state(&self.name, e))?;
        let (next_txn, pending) = match state {
            Some(s) if s.subtask != self.subtask => {
                let error = SinkError::SubtaskMismatch {
                    expected: self.subtask,
                    found: s.subtask,
                };
                return Err(OperatorError::sink(self.name.clone(), error));
            }
            Some(s) => (s.next_txn, s.pending),
            None => (0, Vec::new()),
        };
        let mut shared = self.handle.shared.lock();
        // What the failed attempt pre-committed at `finish` is not in any state: abort it.
        shared.finals.remove(&self.subtask);
        for p in pending {
            shared.commit(self.subtask, p.txn, p.records);
        }
        self.next_txn = next_txn.max(shared.next_txn_after_committed(self.subtask));
        self.open.clear();
        self.pending.clear();
        self.finished = None;
        Ok(())
    }

    fn process_element(
        &mut self,
        record: StreamRecord<T>,
        _ctx: &mut Context<'_, ()>,
    ) -> Result<(), OperatorError> {
        self.handle
            .shared
            .lock()
            .received
            .push(record.value.clone());
        self.open.push(record.value);
        Ok(())
    }

    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        if let Some((txn, records)) = self.finished.take() {
            // A draining savepoint's snapshot after `finish`: its state covers every
            // transaction `finish` handed to `commit_finished`, so they go back to pending and
            // the savepoint's completion commits them.
            self.handle.shared.lock().finals.remove(&self.subtask);
            self.pending.push(PendingTxn {
                txn,
                checkpoint: checkpoint_id,
                records,
            });
        } else if !self.open.is_empty() {
            self.pending.push(PendingTxn {
                txn: self.next_txn,
                checkpoint: checkpoint_id,
                records: mem::take(&mut self.open),
            });
            self.next_txn += 1;
        }
        let state = StateRef {
            subtask: self.subtask,
            next_txn: self.next_txn,
            pending: &self.pending,
        };
        state::encode(&state)
            .map(Some)
            .map_err(|e| OperatorError::state(&self.name, e))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        let (due, keep): (Vec<_>, Vec<_>) = mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.checkpoint <= checkpoint_id);
        self.pending = keep;
        let mut shared = self.handle.shared.lock();
        for p in due {
            shared.commit(self.subtask, p.txn, p.records);
        }
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<(), OperatorError> {
        // Keep the pending transaction: the next completed checkpoint commits it.
        Ok(())
    }

    fn finish(&mut self, _ctx: &mut Context<'_, ()>) -> Result<(), OperatorError> {
        // Pre-commit the last records, and hand over the transactions still waiting for a
        // completion notice that may never come (the task is done): all are committed by
        // `commit_finished` once the job succeeded. A late notice may still commit the pending
        // ones first; commits are idempotent.
        let mut finals: Vec<(u64, Vec<T>)> = self
            .pending
            .iter()
            .map(|p| (p.txn, p.records.clone()))
            .collect();
        if !self.open.is_empty() {
            let records = mem::take(&mut self.open);
            finals.push((self.next_txn, records.clone()));
            self.finished = Some((self.next_txn, records));
            self.next_txn += 1;
        }
        if !finals.is_empty() {
            self.handle
                .shared
                .lock()
                .finals
                .insert(self.subtask, finals);
        }
        Ok(())
    }
}

impl<T> fmt::Debug for CollectSink<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollectSink")
            .field("name", &self.name)
            .field("subtask", &self.subtask)
            .field("open", &self.open.len())
            .field("pending", &self.pending.len())
            .field("next_txn", &self.next_txn)
            .finish()
    }
}
