//! The engine: a job's operators as timely operators, epochs as checkpoints.
//!
//! # The dataflow, per worker
//!
//! ```text
//! source (+ chain) --Msg, exchange by key group--> keyed chain + sink --Msg::Snapshot, to worker 0--> checkpoints --> probe
//! ```
//!
//! Timestamps are epochs (`u64`); epoch `k` is checkpoint `k`. A source holds a capability at
//! its epoch and starts the next one every checkpoint interval (or after
//! `max_epoch_records`), after sending its snapshot for `k` at `k`. The keyed operator stashes
//! its input by epoch and handles epoch `k` only once its input frontier passed `k`: every
//! record of `k` has arrived and none of `k + 1` has been applied (an aligned checkpoint with
//! no barrier messages). It then snapshots its chain, which pre-commits the sink's transaction,
//! and sends the snapshot, with the sources' snapshots it received, to worker 0. Worker 0's
//! checkpoint operator stores checkpoint `k` once its frontier passed `k` (every task's snapshot
//! arrived), and holds its capability at `k` until then, so every worker's probe passes `k`
//! only after the store: each worker then tells its sink that `k` completed, which commits.
//!
//! The keyed operator feeds its epoch into the chain only while the chain accepts input (an
//! async operator with a full queue does not); the rest waits for the chain's completions,
//! which activate the operator (`Host::wake_with`). Each activation first polls the chain's
//! timers and events (`Host::poll`). After the end of input the last epoch's snapshot waits
//! until the chain emitted everything.
//!
//! Watermarks travel in the data: a source sends its watermark to every worker, the keyed
//! operator takes the minimum over the source workers, as a task takes the minimum over its
//! input channels.
//!
//! Flow control: a source reads on only while the probe has passed its epoch minus two, so at
//! most two epochs (each at most `max_epoch_records` per source worker) are in flight.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use streamtask::checkpoint::{CheckpointStorage, CompletedCheckpoint};
use streamtask_core::keygroup::{DEFAULT_MAX_PARALLELISM, operator_index_for_key_group};
use streamtask_core::operator::Emitted;
use streamtask_core::state::TaskSnapshot;
use streamtask_core::{OperatorError, StreamRecord, Watermark};
use timely::dataflow::ProbeHandle;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::Probe;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::generic::operator::source;

use crate::host::Host;
use crate::split::{BATCH, SplitCursor};
use crate::{TimelyConfig, TimelyError, TimelyJob};

/// How often the keyed operator polls its chain's processing-time timers while some are
/// pending (the timer service tells no deadline, so the host looks again at this pace).
const TIMER_POLL: Duration = Duration::from_millis(1);

/// What flows between the operators.
#[derive(Clone, Serialize, Deserialize)]
enum Msg<B> {
    /// A record and its event time.
    Record(B, Option<i64>),
    /// Source worker `from`'s watermark, for worker `to`.
    Watermark { from: u32, to: u32, wm: i64 },
    /// A task's snapshot for the message's epoch.
    Snapshot {
        task: String,
        entries: Vec<(String, Vec<u8>)>,
    },
}

fn snapshot_msg<B>(task: String, snapshot: &TaskSnapshot) -> Msg<B> {
    let entries = snapshot
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect();
    Msg::Snapshot { task, entries }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunSummary {
    /// The checkpoint the run restored, if any.
    pub restored_from: Option<u64>,
    /// The last checkpoint this process saw complete.
    pub last_checkpoint: Option<u64>,
    /// Records the sources of this process read.
    pub records_read: u64,
    /// The savepoint written ([`TimelyConfig::stop_with_savepoint`]; process 0 writes it).
    pub savepoint: Option<std::path::PathBuf>,
}

/// What the workers of one process share.
struct Shared {
    storage: CheckpointStorage,
    restored: Option<CompletedCheckpoint>,
    stop: AtomicBool,
    error: std::sync::Mutex<Option<TimelyError>>,
    records_read: AtomicU64,
    last_checkpoint: AtomicU64,
}

impl Shared {
    /// Records the first failure and stops every worker of this process.
    fn fail(&self, error: TimelyError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(error);
        // Release pairs with the workers' Acquire loads: they see the error once stopped.
        self.stop.store(true, Ordering::Release);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// Runs `job` on timely workers as `config` says, restoring the latest checkpoint in its
/// checkpoint directory if there is one; returns once every worker of this process finished
/// and the last checkpoint was committed.
///
/// In a cluster every process calls this with the same job and its own
/// [`cluster`](TimelyConfig::cluster) index; process 0 stores the checkpoints, so the checkpoint
/// and sink directories must be shared by all processes (one machine, or a shared file system).
///
/// # Errors
///
/// [`TimelyError`]: the workers could not start, an operator failed, the storage failed, or
/// the injected fault stopped the run. Every one leaves the last complete checkpoint to the
/// next run.
pub fn run<A, B>(job: TimelyJob<A, B>, config: &TimelyConfig) -> Result<RunSummary, TimelyError>
where
    A: 'static,
    B: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    let storage = CheckpointStorage::directory(&config.checkpoint_dir, 3)?;
    let restored = crate::savepoint::restore_point(&storage, &job, config)?;
    match &restored {
        Some(chk) => {
            let taken = chk.tasks.len() / 2;
            if taken != config.total_workers() {
                return Err(TimelyError::WorkerCount {
                    taken,
                    now: config.total_workers(),
                });
            }
        }
        // A fresh start: no checkpoint lists any transaction, so every file is a leftover.
        None if config.process == 0 => {
            streamtask::sink::discard_output(&job.sink_dir)?;
        }
        None => {}
    }
    let restored_from = restored.as_ref().map(|c| c.id);
    let shared = Arc::new(Shared {
        storage,
        restored,
        stop: AtomicBool::new(false),
        error: std::sync::Mutex::new(None),
        records_read: AtomicU64::new(0),
        last_checkpoint: AtomicU64::new(restored_from.unwrap_or(0)),
    });
    let communication = if config.addresses.is_empty() {
        timely::CommunicationConfig::Process(config.workers)
    } else {
        timely::CommunicationConfig::Cluster {
            threads: config.workers,
            process: config.process,
            addresses: config.addresses.clone(),
            report: false,
            zerocopy: false,
        }
    };
    let timely_config = timely::Config {
        communication,
        worker: timely::WorkerConfig::default(),
    };
    let job = Arc::new(job);
    let savepoint_job = Arc::clone(&job);
    let settings = config.clone();
    let worker_shared = Arc::clone(&shared);
    let guards = timely::execute(timely_config, move |worker| {
        if let Err(e) = run_worker(worker, &job, &settings, &worker_shared) {
            worker_shared.fail(e);
        }
        // A stopped run leaves its dataflow unfinished: drop it, or timely steps it forever.
        for dataflow in worker.installed_dataflows() {
            worker.drop_dataflow(dataflow);
        }
    })
    .map_err(TimelyError::Start)?;
    for result in guards.join() {
        if let Err(message) = result {
            shared.fail(TimelyError::Panicked(message));
        }
    }
    let error = shared
        .error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some(error) = error {
        return Err(error);
    }
    let last = shared.last_checkpoint.load(Ordering::Acquire);
    let savepoint = match &config.stop_with_savepoint {
        Some((_, dir)) if config.process == 0 && last > 0 => Some(crate::savepoint::write(
            &shared.storage,
            last,
            &savepoint_job,
            config,
            dir,
        )?),
        _ => None,
    };
    Ok(RunSummary {
        restored_from,
        last_checkpoint: (last > 0).then_some(last),
        records_read: shared.records_read.load(Ordering::Acquire),
        savepoint,
    })
}

fn op_err(worker: usize) -> impl Fn(OperatorError) -> TimelyError {
    move |source| TimelyError::Operator { worker, source }
}

/// Builds the dataflow on one worker and steps it to the end.
fn run_worker<A, B>(
    worker: &mut timely::worker::Worker,
    job: &Arc<TimelyJob<A, B>>,
    config: &TimelyConfig,
    shared: &Arc<Shared>,
) -> Result<(), TimelyError>
where
    A: 'static,
    B: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    let me = worker.index();
    let peers = worker.peers();
    let restored_id = shared.restored.as_ref().map_or(0, |c| c.id);
    let first_epoch = restored_id + 1;
    let restored_task = |task: &str| -> Option<TaskSnapshot> {
        shared.restored.as_ref().and_then(|c| c.task(task).cloned())
    };
    let source_task = format!("{}#{me}", job.source_name);
    let keyed_task = format!("{}#{me}", job.keyed_name);

    // The chains, restored as the local executor restores a task's chain.
    let mut chain = Host::open(
        (job.chain)(me),
        &source_task,
        restored_task(&source_task).as_ref(),
    )
    .map_err(op_err(me))?;
    let keyed = Rc::new(RefCell::new(
        Host::open(
            (job.keyed)(me),
            &keyed_task,
            restored_task(&keyed_task).as_ref(),
        )
        .map_err(op_err(me))?,
    ));
    let mut cursor = SplitCursor::new(
        Arc::clone(&job.source),
        &source_task,
        job.out_of_orderness,
        (me, peers),
        restored_task(&source_task)
            .as_ref()
            .and_then(|s| s.get(TaskSnapshot::SOURCE)),
    )
    .map_err(op_err(me))?;
    let keyed_last = Rc::new(Cell::new(restored_id));
    let probe = ProbeHandle::new();

    worker.dataflow::<u64, _, _>(|scope| {
        // ---- the source and its chain ----
        let src_shared = Arc::clone(shared);
        let src_probe = probe.clone();
        let interval = config.interval;
        let max_epoch_records = config.max_epoch_records;
        let crash_after = config.crash_after;
        let stop_after = config.stop_with_savepoint.as_ref().map(|(epoch, _)| *epoch);
        let activator_scope = scope;
        let src_task = source_task.clone();
        let stream = source(scope, &source_task, move |cap, info| {
            let activator = activator_scope.activator_for(info.address.clone());
            let mut cap = Some(cap);
            if let Some(c) = cap.as_mut() {
                c.downgrade(&first_epoch);
            }
            let mut epoch_records = 0u64;
            let mut epoch_started = Instant::now();
            let mut read_this_run = 0u64;
            move |output| {
                let Some(c) = cap.as_mut() else { return };
                if src_shared.stopped() {
                    return;
                }
                let epoch = *c.time();
                // Flow control: read on only while checkpoint `epoch - 2` is complete.
                if epoch >= first_epoch + 2 && src_probe.less_than(&(epoch - 1)) {
                    activator.activate_after(Duration::from_millis(1));
                    return;
                }
                let mut out = Vec::new();
                let mut exhausted = false;
                let step = (|| -> Result<(), OperatorError> {
                    // The source runs on every activation: its chain's timers need no wake-up.
                    chain.poll()?;
                    let mut read = 0;
                    let budget =
                        BATCH.min(max_epoch_records.saturating_sub(epoch_records) as usize);
                    while read < budget {
                        let Some((value, ts)) = cursor.next()? else {
                            exhausted = true;
                            break;
                        };
                        read += 1;
                        chain.record(StreamRecord::with_timestamp(value, ts))?;
                    }
                    epoch_records += read as u64;
                    read_this_run += read as u64;
                    src_shared
                        .records_read
                        .fetch_add(read as u64, Ordering::Relaxed);
                    if let Some(wm) = cursor.watermark() {
                        chain.watermark(wm)?;
                    }
                    if exhausted {
                        chain.watermark(Watermark::MAX)?;
                        chain.end_input()?;
                    }
                    drain(&mut chain, me, peers, &mut out);
                    Ok(())
                })();
                if let Err(e) = step {
                    return src_shared.fail(op_err(me)(e));
                }
                if let Some((w, n)) = crash_after
                    && w == me
                    && read_this_run >= n
                {
                    return src_shared.fail(TimelyError::Crashed);
                }
                let end_epoch = exhausted
                    || epoch_records >= max_epoch_records
                    || epoch_started.elapsed() >= interval;
                if end_epoch {
                    match chain.snapshot(epoch).and_then(|mut s| {
                        s.put(TaskSnapshot::SOURCE, cursor.snapshot()?);
                        Ok(s)
                    }) {
                        Ok(s) => out.push(snapshot_msg(src_task.clone(), &s)),
                        Err(e) => return src_shared.fail(op_err(me)(e)),
                    }
                }
                {
                    let mut session = output.session(c);
                    session.give_iterator(out.into_iter());
                }
                if exhausted {
                    cap = None;
                    return;
                }
                // Stop with a savepoint: no epoch after it, and no end of input.
                if end_epoch && stop_after.is_some_and(|k| epoch >= k) {
                    cap = None;
                    return;
                }
                if end_epoch {
                    c.downgrade(&(epoch + 1));
                    epoch_records = 0;
                    epoch_started = Instant::now();
                }
                activator.activate();
            }
        });

        // ---- the keyed chain and the sink ----
        let route_group = Arc::clone(&job.key_group);
        let route = move |m: &Msg<B>| -> u64 {
            match m {
                Msg::Record(b, _) => owner(route_group(b), peers),
                Msg::Watermark { to, .. } => u64::from(*to),
                Msg::Snapshot { .. } => 0,
            }
        };
        let keyed_op = Rc::clone(&keyed);
        let keyed_shared = Arc::clone(shared);
        let last = Rc::clone(&keyed_last);
        let keyed_task_name = keyed_task.clone();
        let keyed_scope = scope;
        let snapshots = stream
            .unary_frontier::<timely::container::CapacityContainerBuilder<Vec<Msg<B>>>, _, _, _>(
                Exchange::new(route),
                &keyed_task,
                move |cap, info| {
                    let mut cap = Some(cap);
                    if let Some(c) = cap.as_mut() {
                        c.downgrade(&first_epoch);
                    }
                    // The chain's async completions arrive on other threads: they activate
                    // this operator; its processing-time timers are polled on a timer.
                    let waker = keyed_scope
                        .worker()
                        .sync_activator_for(info.address.to_vec());
                    keyed_op.borrow().wake_with(move || {
                        // Fails only once the worker is gone, when nothing is left to wake.
                        let _ = waker.activate();
                    });
                    let timer_activator = keyed_scope.activator_for(info.address.clone());
                    let mut stash: BTreeMap<u64, Vec<Msg<B>>> = BTreeMap::new();
                    // The epoch being applied and its messages not applied yet: a chain that
                    // takes no input (a full async queue) stops it until completions free room.
                    let mut applying: Option<(u64, std::collections::VecDeque<Msg<B>>)> = None;
                    let mut upstream = vec![i64::MIN; peers];
                    let mut current = i64::MIN;
                    let mut ended = false;
                    let mut max_seen = restored_id;
                    move |(input, frontier), output| {
                        // `for_each`, not `for_each_stamp`: the latter sorts containers by
                        // stamp unstably, and a source's watermark must stay behind its records.
                        input.for_each(|time, data| {
                            let epoch = *time.least().expect("an epoch stamp is one time");
                            max_seen = max_seen.max(epoch);
                            stash.entry(epoch).or_default().append(data);
                        });
                        let Some(c) = cap.as_mut() else { return };
                        if keyed_shared.stopped() {
                            return;
                        }
                        // Epochs below the frontier are complete; with no frontier left, every
                        // epoch up to the last any source reached.
                        let limit = match frontier.frontier().iter().next() {
                            Some(&f) => f,
                            None => max_seen + 1,
                        };
                        let mut out = Vec::new();
                        let mut op = keyed_op.borrow_mut();
                        let step = (|| -> Result<(), OperatorError> {
                            op.poll()?;
                            loop {
                                if applying.is_none() {
                                    if last.get() + 1 >= limit {
                                        break;
                                    }
                                    let epoch = last.get() + 1;
                                    let msgs = stash.remove(&epoch).unwrap_or_default();
                                    applying = Some((epoch, msgs.into()));
                                }
                                let (epoch, msgs) = applying.as_mut().expect("set above");
                                while op.accepts_input() {
                                    let Some(msg) = msgs.pop_front() else { break };
                                    match msg {
                                        Msg::Record(value, timestamp) => {
                                            op.record(StreamRecord { value, timestamp })?
                                        }
                                        Msg::Watermark { from, wm, .. } => {
                                            let slot = &mut upstream[from as usize];
                                            *slot = (*slot).max(wm);
                                            let min =
                                                upstream.iter().copied().min().unwrap_or(i64::MIN);
                                            if min > current {
                                                current = min;
                                                op.watermark(Watermark(min))?;
                                            }
                                        }
                                        snapshot @ Msg::Snapshot { .. } => out.push(snapshot),
                                    }
                                }
                                if !msgs.is_empty() {
                                    break;
                                }
                                if current == i64::MAX && !ended {
                                    ended = true;
                                    op.end_input()?;
                                }
                                // After the end of input the last epoch waits until the chain
                                // emitted everything (its async calls completed), so its
                                // checkpoint commits all; other epochs snapshot the calls in
                                // flight with the chain's state, as the local executor does.
                                if ended && !op.accepts_input() {
                                    break;
                                }
                                // The chain ends in the sink: nothing it emits leaves the worker.
                                op.take_output();
                                let epoch = *epoch;
                                let s = op.snapshot(epoch)?;
                                out.push(snapshot_msg(keyed_task_name.clone(), &s));
                                last.set(epoch);
                                applying = None;
                            }
                            Ok(())
                        })();
                        if let Err(e) = step {
                            return keyed_shared.fail(op_err(me)(e));
                        }
                        // Timers set during this activation count too (an async batch's
                        // max wait): nothing else may wake the operator for them.
                        if op.timers_pending() {
                            timer_activator.activate_after(TIMER_POLL);
                        }
                        if !out.is_empty() {
                            output.session(c).give_iterator(out.into_iter());
                        }
                        if frontier.is_empty() && applying.is_none() && last.get() + 1 >= limit {
                            cap = None;
                        } else if *c.time() < last.get() + 1 {
                            c.downgrade(&(last.get() + 1));
                        }
                    }
                },
            );

        // ---- the checkpoints, stored by worker 0 ----
        let ck_shared = Arc::clone(shared);
        let expected = 2 * peers;
        snapshots
            .unary_frontier::<timely::container::CapacityContainerBuilder<Vec<()>>, _, _, _>(
                Exchange::new(|_: &Msg<B>| 0u64),
                "checkpoints",
                move |cap, _info| {
                    let mut cap = Some(cap);
                    if let Some(c) = cap.as_mut() {
                        c.downgrade(&first_epoch);
                    }
                    let mut stash: BTreeMap<u64, Vec<Msg<B>>> = BTreeMap::new();
                    // Each task's latest snapshot: a source that finished early is carried
                    // into the later checkpoints with its final state.
                    let mut latest: BTreeMap<String, TaskSnapshot> = ck_shared
                        .restored
                        .as_ref()
                        .map(|c| c.tasks.clone())
                        .unwrap_or_default();
                    let mut next = first_epoch;
                    let mut max_seen = restored_id;
                    move |(input, frontier), _output| {
                        // `for_each`, not `for_each_stamp`: the latter sorts containers by
                        // stamp unstably, and a source's watermark must stay behind its records.
                        input.for_each(|time, data| {
                            let epoch = *time.least().expect("an epoch stamp is one time");
                            max_seen = max_seen.max(epoch);
                            stash.entry(epoch).or_default().append(data);
                        });
                        let Some(c) = cap.as_mut() else { return };
                        if ck_shared.stopped() {
                            return;
                        }
                        let limit = match frontier.frontier().iter().next() {
                            Some(&f) => f,
                            None => max_seen + 1,
                        };
                        while me == 0 && next < limit {
                            for msg in stash.remove(&next).unwrap_or_default() {
                                if let Msg::Snapshot { task, entries } = msg {
                                    let mut s = TaskSnapshot::new();
                                    for (k, v) in entries {
                                        s.put(k, v);
                                    }
                                    latest.insert(task, s);
                                }
                            }
                            if latest.len() != expected {
                                return ck_shared.fail(TimelyError::IncompleteCheckpoint {
                                    epoch: next,
                                    got: latest.len(),
                                    expected,
                                });
                            }
                            let checkpoint = CompletedCheckpoint {
                                id: next,
                                timestamp: now_millis(),
                                tasks: latest.clone(),
                            };
                            if let Err(e) = ck_shared.storage.store(&checkpoint) {
                                return ck_shared.fail(e.into());
                            }
                            next += 1;
                        }
                        if me != 0 {
                            next = limit;
                        }
                        if frontier.is_empty() {
                            cap = None;
                        } else if *c.time() < next {
                            c.downgrade(&next);
                        }
                    }
                },
            )
            .probe_with(&probe);
    });

    // Step until every checkpoint is stored; each one the probe passed is complete, and the
    // sink commits what it pre-committed for it.
    let mut notified = restored_id;
    loop {
        if shared.stopped() {
            return Ok(());
        }
        let more = worker.step_or_park(Some(Duration::from_millis(1)));
        let done = probe.done();
        let mut complete = notified;
        while complete < keyed_last.get() && (done || !probe.less_equal(&(complete + 1))) {
            complete += 1;
        }
        if complete > notified {
            notified = complete;
            keyed.borrow_mut().complete(complete).map_err(op_err(me))?;
            shared.last_checkpoint.fetch_max(complete, Ordering::AcqRel);
        }
        if done && !more {
            break;
        }
    }
    keyed.borrow_mut().close().map_err(op_err(me))?;
    Ok(())
}

/// The worker that owns key group `group`, as the local executor assigns it.
fn owner(group: u32, peers: usize) -> u64 {
    u64::from(operator_index_for_key_group(
        DEFAULT_MAX_PARALLELISM,
        peers as u32,
        group,
    ))
}

/// Moves what the source's chain emitted into `out`: records to their key group's worker,
/// watermarks to every worker.
fn drain<A, B>(chain: &mut Host<A, B>, me: usize, peers: usize, out: &mut Vec<Msg<B>>) {
    for emitted in chain.take_output() {
        match emitted {
            Emitted::Record(r) => out.push(Msg::Record(r.value, r.timestamp)),
            Emitted::Watermark(w) => {
                for to in 0..peers {
                    out.push(Msg::Watermark {
                        from: me as u32,
                        to: to as u32,
                        wm: w.0,
                    });
                }
            }
            _ => {}
        }
    }
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
