//! A bounded thread pool that turns a blocking client into an async one.
//!
//! [`BlockingPool`] runs jobs on a fixed number of named worker threads fed by a bounded queue;
//! submitting to a full queue blocks the submitter (backpressure instead of unbounded memory).
//! [`BlockingAsyncFunction`] wraps a blocking call (a database lookup, say) as an
//! [`AsyncFunction`]: each call runs on a worker, with a per-call resource (a connection) checked
//! out of a small cache so workers never share one, and completes the [`ResultFuture`] there;
//! [`BatchedBlockingAsyncFunction`] hands the calls waiting for a worker to one job as a batch.
//! Dropping the pool (or [`BlockingPool::shutdown`]) finishes queued jobs and joins every worker.

use std::fmt;
use std::sync::Arc;

use crate::sync::channel::{Receiver, Sender};

use crate::error::catch_panic;
use crate::function::{AsyncError, AsyncFunction, ResultFuture};
use crate::sync::{Mutex, spawn_named, thread};

type Job = Box<dyn FnOnce() + Send>;

/// A pool was configured wrongly, or is shut down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// No worker threads.
    #[error("a blocking pool needs at least one worker thread")]
    ZeroThreads,
    /// No queue room.
    #[error("a blocking pool needs a queue capacity of at least 1")]
    ZeroCapacity,
    /// The pool is shut down; the job was not run.
    #[error("the blocking pool is shut down; submit jobs only while the operator runs")]
    ShutDown,
}

/// A fixed set of worker threads behind a bounded job queue.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use streamtask_core::async_io::BlockingPool;
///
/// let pool = BlockingPool::new("doc-pool", 2, 8).unwrap();
/// let (tx, rx) = mpsc::channel();
/// for i in 0..4 {
///     let tx = tx.clone();
///     pool.execute(move || tx.send(i * i).unwrap()).unwrap();
/// }
/// pool.shutdown();
/// let mut got: Vec<i32> = rx.try_iter().collect();
/// got.sort();
/// assert_eq!(got, vec![0, 1, 4, 9]);
/// ```
pub struct BlockingPool {
    name: String,
    threads: usize,
    sender: Mutex<Option<Sender<Job>>>,
    workers: Mutex<Vec<thread::JoinHandle<()>>>,
}

impl BlockingPool {
    /// Starts `threads` workers named `<name>-<i>` behind a queue of `queue_capacity` jobs.
    ///
    /// # Errors
    ///
    /// [`PoolError::ZeroThreads`] or [`PoolError::ZeroCapacity`].
    pub fn new(
        name: &str,
        threads: usize,
        queue_capacity: usize,
    ) -> Result<Arc<BlockingPool>, PoolError> {
        if threads == 0 {
            return Err(PoolError::ZeroThreads);
        }
        if queue_capacity == 0 {
            return Err(PoolError::ZeroCapacity);
        }
        let (tx, rx) = crate::sync::channel::bounded::<Job>(queue_capacity);
        let workers = (0..threads)
            .map(|i| {
                let rx: Receiver<Job> = rx.clone();
                spawn_named(format!("{name}-{i}"), move || {
                    while let Ok(job) = rx.recv() {
                        // A panicking job must not take the worker down with it.
                        if let Err(message) = catch_panic(job) {
                            log::error!("blocking pool job panicked: {message}");
                        }
                    }
                })
            })
            .collect();
        Ok(Arc::new(BlockingPool {
            name: name.to_string(),
            threads,
            sender: Mutex::new(Some(tx)),
            workers: Mutex::new(workers),
        }))
    }

    /// Runs `job` on a worker, blocking while the queue is full.
    ///
    /// # Errors
    ///
    /// [`PoolError::ShutDown`] after [`shutdown`](Self::shutdown).
    pub fn execute(&self, job: impl FnOnce() + Send + 'static) -> Result<(), PoolError> {
        // Clone the sender so a blocking send does not hold the pool's mutex.
        let sender = self.sender.lock().clone().ok_or(PoolError::ShutDown)?;
        sender.send(Box::new(job)).map_err(|_| PoolError::ShutDown)
    }

    /// Stops accepting jobs, lets the workers finish the queued ones, and joins them.
    /// Idempotent.
    ///
    /// # Panics
    ///
    /// If called from one of the pool's own workers (it cannot join itself).
    pub fn shutdown(&self) {
        drop(self.sender.lock().take());
        let workers = std::mem::take(&mut *self.workers.lock());
        for worker in workers {
            assert!(
                worker.thread().id() != thread::current().id(),
                "BlockingPool::shutdown called from the pool's own worker"
            );
            let _ = worker.join();
        }
    }

    /// The number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for BlockingPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for BlockingPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingPool")
            .field("name", &self.name)
            .field("threads", &self.threads)
            .field("open", &self.sender.lock().is_some())
            .finish()
    }
}

type Init<S> = dyn Fn() -> Result<S, AsyncError> + Send + Sync;
type Call<S, I, O> = dyn Fn(&mut S, &I) -> Result<Vec<O>, AsyncError> + Send + Sync;

/// An [`AsyncFunction`] that runs a blocking call on a [`BlockingPool`].
///
/// Each call checks a resource `S` (a database connection, a client) out of a cache, creating
/// one with `init` when none is free, and returns it afterwards; so there are never more
/// resources than workers and no two calls share one. A call that returns an error or panics
/// completes the future exceptionally.
///
/// # Examples
///
/// ```
/// use std::sync::mpsc;
/// use std::sync::Arc;
/// use streamtask_core::async_io::{BlockingAsyncFunction, BlockingPool};
/// use streamtask_core::function::{AsyncFunction, AsyncOutcome, Completion, CompletionSink, ResultFuture};
///
/// struct Channel(std::sync::Mutex<mpsc::Sender<Completion<String>>>);
/// impl CompletionSink<String> for Channel {
///     fn deliver(&self, c: Completion<String>) {
///         self.0.lock().unwrap().send(c).unwrap();
///     }
/// }
///
/// let pool = BlockingPool::new("lookup", 2, 16).unwrap();
/// let mut lookup = BlockingAsyncFunction::new(
///     pool.clone(),
///     || Ok(vec!["zero", "one", "two"]), // the "connection"
///     |table: &mut Vec<&'static str>, key: &usize| Ok(vec![table[*key].to_string()]),
/// );
/// let (tx, rx) = mpsc::channel();
/// let sink = Arc::new(Channel(std::sync::Mutex::new(tx)));
/// lookup.invoke(&2, ResultFuture::new(0, 1, sink));
/// let c = rx.recv().unwrap();
/// assert_eq!(c.outcome, AsyncOutcome::Results(vec!["two".to_string()]));
/// pool.shutdown();
/// ```
pub struct BlockingAsyncFunction<S, I, O> {
    pool: Arc<BlockingPool>,
    resources: Arc<Resources<S>>,
    call: Arc<Call<S, I, O>>,
}

/// The resources (`S`: connections, clients) of a blocking function's calls: each call checks
/// one out, made by `init` when none is free, and gives it back; so there are never more than
/// workers, and no two calls share one.
struct Resources<S> {
    init: Box<Init<S>>,
    cache: Mutex<Vec<S>>,
}

impl<S> Resources<S> {
    fn new(init: impl Fn() -> Result<S, AsyncError> + Send + Sync + 'static) -> Self {
        Resources {
            init: Box::new(init),
            cache: Mutex::new(Vec::new()),
        }
    }

    /// A free resource, or a new one.
    fn check_out(&self) -> Result<S, AsyncError> {
        let free = self.cache.lock().pop();
        free.map_or_else(|| (self.init)(), Ok)
    }

    /// Gives `resource` back for the next call.
    fn give_back(&self, resource: S) {
        self.cache.lock().push(resource);
    }

    fn cached(&self) -> usize {
        self.cache.lock().len()
    }
}

impl<S, I, O> BlockingAsyncFunction<S, I, O>
where
    S: Send + 'static,
{
    /// Runs `call` on `pool`, with resources made by `init`.
    pub fn new(
        pool: Arc<BlockingPool>,
        init: impl Fn() -> Result<S, AsyncError> + Send + Sync + 'static,
        call: impl Fn(&mut S, &I) -> Result<Vec<O>, AsyncError> + Send + Sync + 'static,
    ) -> Self {
        BlockingAsyncFunction {
            pool,
            resources: Arc::new(Resources::new(init)),
            call: Arc::new(call),
        }
    }
}

impl<S, I, O> AsyncFunction for BlockingAsyncFunction<S, I, O>
where
    S: Send + 'static,
    I: Clone + Send + 'static,
    O: Send + 'static,
{
    type In = I;
    type Out = O;

    fn invoke(&mut self, input: &I, result: ResultFuture<O>) {
        let input = input.clone();
        let resources = Arc::clone(&self.resources);
        let call = Arc::clone(&self.call);
        let on_worker = result.clone();
        let job = move || {
            let mut resource = match resources.check_out() {
                Ok(r) => r,
                Err(e) => {
                    on_worker.complete_exceptionally(e);
                    return;
                }
            };
            match catch_panic(|| call(&mut resource, &input)) {
                Ok(Ok(values)) => {
                    resources.give_back(resource);
                    on_worker.complete(values);
                }
                Ok(Err(e)) => {
                    resources.give_back(resource);
                    on_worker.complete_exceptionally(e);
                }
                // A panicking call may have left the resource broken: drop it.
                Err(panic) => {
                    on_worker.complete_exceptionally(AsyncError::failed(format!(
                        "blocking call panicked: {panic}"
                    )));
                }
            }
        };
        if self.pool.execute(job).is_err() {
            result.complete_exceptionally(AsyncError::failed(PoolError::ShutDown));
        }
    }
}

impl<S, I, O> fmt::Debug for BlockingAsyncFunction<S, I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingAsyncFunction")
            .field("pool", &self.pool)
            .field("cached_resources", &self.resources.cached())
            .finish()
    }
}

/// What a batched blocking call answers: one outcome per input, in the inputs' order.
type BatchCall<S, I, O> = dyn Fn(&mut S, &[I]) -> Vec<Result<Vec<O>, AsyncError>> + Send + Sync;

/// [`BlockingAsyncFunction`] for calls that are cheaper together (one `WHERE id IN (...)` query
/// instead of one query per key): the calls waiting for a worker are handed to `call` as one
/// batch, on one worker, with one resource.
///
/// The calls queue in a [`BatchQueue`]; the call that makes it non-empty submits one job to
/// the pool, and that job takes every call queued when it starts. So under load the batches
/// grow by themselves (calls queue while the workers are busy), and a batch costs one job, one
/// worker wake-up and one completion burst instead of one of each per call; with an idle pool
/// a batch is one call, and nothing waits for a batch to fill.
///
/// `call` answers each input of the batch: an error fails that input's call only. A `call`
/// that panics, or a resource that cannot be made, fails every call of the batch (the resource
/// is then dropped, as [`BlockingAsyncFunction`] drops it); one that answers fewer inputs than
/// it got fails the calls left unanswered.
///
/// # Examples
///
/// ```
/// use streamtask_core::async_io::{BatchedBlockingAsyncFunction, BlockingPool};
/// use streamtask_core::function::{AsyncFunction, AsyncOutcome, ResultFuture};
/// use streamtask_core::testing::completion_channel;
///
/// let pool = BlockingPool::new("lookup", 2, 16).unwrap();
/// let mut lookup = BatchedBlockingAsyncFunction::new(
///     pool.clone(),
///     || Ok(vec!["zero", "one", "two"]), // the "connection"
///     |table: &mut Vec<&'static str>, keys: &[usize]| {
///         keys.iter().map(|&k| Ok(vec![table[k].to_string()])).collect()
///     },
/// );
/// let (sink, completions) = completion_channel();
/// lookup.invoke(&2, ResultFuture::new(0, 1, sink.clone()));
/// lookup.invoke(&1, ResultFuture::new(1, 1, sink));
/// let mut answers: Vec<_> = (0..2).map(|_| completions.recv().unwrap()).collect();
/// answers.sort_by_key(|c| c.entry);
/// assert_eq!(answers[0].outcome, AsyncOutcome::Results(vec!["two".to_string()]));
/// assert_eq!(answers[1].outcome, AsyncOutcome::Results(vec!["one".to_string()]));
/// pool.shutdown();
/// ```
pub struct BatchedBlockingAsyncFunction<S, I, O> {
    pool: Arc<BlockingPool>,
    shared: Arc<Batches<S, I, O>>,
}

/// What the calls and the batch jobs of a [`BatchedBlockingAsyncFunction`] share.
struct Batches<S, I, O> {
    resources: Resources<S>,
    call: Box<BatchCall<S, I, O>>,
    queue: BatchQueue<(I, ResultFuture<O>)>,
}

impl<S, I, O> BatchedBlockingAsyncFunction<S, I, O>
where
    S: Send + 'static,
{
    /// Runs `call` on `pool` over the calls waiting for a worker, with resources made by
    /// `init`.
    pub fn new(
        pool: Arc<BlockingPool>,
        init: impl Fn() -> Result<S, AsyncError> + Send + Sync + 'static,
        call: impl Fn(&mut S, &[I]) -> Vec<Result<Vec<O>, AsyncError>> + Send + Sync + 'static,
    ) -> Self {
        BatchedBlockingAsyncFunction {
            pool,
            shared: Arc::new(Batches {
                resources: Resources::new(init),
                call: Box::new(call),
                queue: BatchQueue::new(),
            }),
        }
    }
}

impl<S, I, O> BatchedBlockingAsyncFunction<S, I, O> {
    /// Calls waiting for a batch job to take them.
    pub fn queued(&self) -> usize {
        self.shared.queue.len()
    }
}

impl<S, I, O> AsyncFunction for BatchedBlockingAsyncFunction<S, I, O>
where
    S: Send + 'static,
    I: Clone + Send + 'static,
    O: Send + 'static,
{
    type In = I;
    type Out = O;

    fn invoke(&mut self, input: &I, result: ResultFuture<O>) {
        // Only the call that made the queue non-empty submits a job (see `BatchQueue`).
        if self.shared.queue.push((input.clone(), result)) {
            let shared = Arc::clone(&self.shared);
            if self.pool.execute(move || shared.run_batch()).is_err() {
                // The pool is shut down: what waits fails, as a job refused would.
                for (_, result) in self.shared.queue.take_all() {
                    result.complete_exceptionally(AsyncError::failed(PoolError::ShutDown));
                }
            }
        }
    }
}

impl<S, I, O> Batches<S, I, O> {
    /// A batch job: answers every call queued now.
    fn run_batch(&self) {
        let batch = self.queue.take_all();
        if batch.is_empty() {
            return;
        }
        let (inputs, futures): (Vec<I>, Vec<ResultFuture<O>>) = batch.into_iter().unzip();
        let fail_all = |error: AsyncError| {
            for future in &futures {
                future.complete_exceptionally(error.clone());
            }
        };
        let mut resource = match self.resources.check_out() {
            Ok(r) => r,
            Err(e) => return fail_all(e),
        };
        match catch_panic(|| (self.call)(&mut resource, &inputs)) {
            Ok(answers) => {
                self.resources.give_back(resource);
                let answered = answers.len();
                let mut answers = answers.into_iter();
                for future in &futures {
                    match answers.next() {
                        Some(Ok(values)) => future.complete(values),
                        Some(Err(e)) => future.complete_exceptionally(e),
                        None => future.complete_exceptionally(AsyncError::failed(format!(
                            "the batched call answered {answered} of {} inputs",
                            inputs.len()
                        ))),
                    };
                }
            }
            // A panicking call may have left the resource broken: drop it.
            Err(panic) => fail_all(AsyncError::failed(format!(
                "blocking call panicked: {panic}"
            ))),
        }
    }
}

impl<S, I, O> fmt::Debug for BatchedBlockingAsyncFunction<S, I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchedBlockingAsyncFunction")
            .field("pool", &self.pool)
            .field("queued", &self.queued())
            .field("cached_resources", &self.shared.resources.cached())
            .finish()
    }
}

/// A list of items waiting for a job, and who submits the job: [`push`](Self::push) tells the
/// caller that made the list non-empty to submit one, and a job [`take_all`](Self::take_all)s
/// it. So while the list is not empty a job is queued or running that has not taken it yet,
/// and every item is taken exactly once (a push onto a non-empty list joins the batch that job
/// will take). Modelled in core's `tests/loom.rs` (`batch_queue::every_queued_item_is_drained_once`).
///
/// # Examples
///
/// ```
/// use streamtask_core::async_io::BatchQueue;
///
/// let queue = BatchQueue::new();
/// assert!(queue.push(1)); // the list was empty: submit a job
/// assert!(!queue.push(2)); // the pending job takes this one too
/// assert_eq!(queue.take_all(), vec![1, 2]); // the job's batch
/// assert!(queue.push(3)); // empty again: the next job
/// ```
#[derive(Debug, Default)]
pub struct BatchQueue<T> {
    items: Mutex<Vec<T>>,
}

impl<T> BatchQueue<T> {
    /// An empty list.
    pub fn new() -> Self {
        BatchQueue {
            items: Mutex::new(Vec::new()),
        }
    }

    /// Queues `item`; `true` if the list was empty, and so the caller must submit a job.
    pub fn push(&self, item: T) -> bool {
        let mut items = self.items.lock();
        items.push(item);
        items.len() == 1
    }

    /// Takes every queued item, oldest first: a job's batch.
    pub fn take_all(&self) -> Vec<T> {
        std::mem::take(&mut *self.items.lock())
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::function::{AsyncOutcome, Completion};

    use crate::testing::completion_channel as sink;

    /// Runs a batched function over `inputs` on a one-worker pool held busy until all are
    /// queued (so they form one batch), and returns each call's outcome in input order.
    fn batched_outcomes(
        inputs: &[u32],
        call: impl Fn(&mut (), &[u32]) -> Vec<Result<Vec<u32>, AsyncError>> + Send + Sync + 'static,
    ) -> Vec<AsyncOutcome<u32>> {
        let pool = BlockingPool::new("batched", 1, 8).unwrap();
        let (release, gate) = crate::sync::channel::bounded::<()>(0);
        pool.execute(move || {
            let _ = gate.recv();
        })
        .unwrap();
        let mut f = BatchedBlockingAsyncFunction::new(pool.clone(), || Ok(()), call);
        let (sink, completions) = sink();
        for (entry, input) in inputs.iter().enumerate() {
            f.invoke(input, ResultFuture::new(entry as u64, 1, sink.clone()));
        }
        release.send(()).unwrap();
        let mut got: Vec<Completion<u32>> =
            inputs.iter().map(|_| completions.recv().unwrap()).collect();
        got.sort_by_key(|c| c.entry);
        assert_eq!(f.queued(), 0);
        pool.shutdown();
        got.into_iter().map(|c| c.outcome).collect()
    }

    #[test]
    fn a_batch_answers_each_call_with_its_own_outcome_in_one_call() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&batches);
        let outcomes = batched_outcomes(&[1, 2, 3], move |_, inputs: &[u32]| {
            seen.lock().push(inputs.to_vec());
            inputs
                .iter()
                .map(|&x| match x {
                    2 => Err(AsyncError::failed("two")),
                    x => Ok(vec![x * 10]),
                })
                .collect()
        });
        assert_eq!(*batches.lock(), vec![vec![1, 2, 3]], "one batch");
        assert_eq!(outcomes[0], AsyncOutcome::Results(vec![10]));
        assert!(matches!(&outcomes[1], AsyncOutcome::Failed(AsyncError::Failed(m)) if m == "two"));
        assert_eq!(outcomes[2], AsyncOutcome::Results(vec![30]));
    }

    #[test]
    fn a_panicking_batch_fails_every_call_and_a_short_answer_fails_the_rest() {
        let panicked = batched_outcomes(&[1, 2], |_, _: &[u32]| panic!("broken"));
        for outcome in panicked {
            assert!(
                matches!(&outcome, AsyncOutcome::Failed(AsyncError::Failed(m)) if m.contains("panicked")),
                "{outcome:?}"
            );
        }
        let short = batched_outcomes(&[1, 2], |_, _: &[u32]| vec![Ok(vec![1])]);
        assert_eq!(short[0], AsyncOutcome::Results(vec![1]));
        assert!(
            matches!(&short[1], AsyncOutcome::Failed(AsyncError::Failed(m)) if m.contains("answered 1 of 2")),
            "{:?}",
            short[1]
        );
    }

    #[test]
    fn zero_threads_or_capacity_are_typed_errors() {
        assert_eq!(
            BlockingPool::new("p", 0, 1).unwrap_err(),
            PoolError::ZeroThreads
        );
        assert_eq!(
            BlockingPool::new("p", 1, 0).unwrap_err(),
            PoolError::ZeroCapacity
        );
    }

    #[test]
    fn execute_after_shutdown_is_refused() {
        let pool = BlockingPool::new("p", 1, 1).unwrap();
        pool.shutdown();
        pool.shutdown();
        assert_eq!(pool.execute(|| ()).unwrap_err(), PoolError::ShutDown);
    }

    #[test]
    fn errors_and_panics_complete_exceptionally_and_the_pool_survives() {
        let pool = BlockingPool::new("p", 1, 4).unwrap();
        let mut f = BlockingAsyncFunction::new(
            pool.clone(),
            || Ok(()),
            |_: &mut (), x: &u32| match x {
                0 => Err(AsyncError::failed("zero")),
                1 => panic!("one"),
                n => Ok(vec![*n]),
            },
        );
        let (s, rx) = sink();
        for (i, x) in [0u32, 1, 2].iter().enumerate() {
            f.invoke(x, ResultFuture::new(i as u64, 1, s.clone()));
        }
        let mut got: Vec<Completion<u32>> = (0..3).map(|_| rx.recv().unwrap()).collect();
        got.sort_by_key(|c| c.entry);
        assert_eq!(
            got[0].outcome,
            AsyncOutcome::Failed(AsyncError::failed("zero"))
        );
        assert!(
            matches!(&got[1].outcome, AsyncOutcome::Failed(AsyncError::Failed(m)) if m.contains("one"))
        );
        assert_eq!(got[2].outcome, AsyncOutcome::Results(vec![2]));
        pool.shutdown();
    }

    #[test]
    fn shutdown_runs_the_queued_jobs_first() {
        let pool = BlockingPool::new("p", 1, 8).unwrap();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        // The first job holds the only worker until the others are queued.
        pool.execute(move || gate_rx.recv().unwrap()).unwrap();
        for i in 0..5 {
            let tx = tx.clone();
            pool.execute(move || tx.send(i).unwrap()).unwrap();
        }
        gate_tx.send(()).unwrap();
        pool.shutdown();
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_full_queue_blocks_the_submitter_until_a_worker_takes_a_job() {
        let pool = BlockingPool::new("p", 1, 1).unwrap();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        pool.execute(move || {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
        })
        .unwrap();
        started_rx.recv().unwrap();
        // The worker is held: this one fills the queue.
        let first = tx.clone();
        pool.execute(move || first.send(1).unwrap()).unwrap();
        let submitter = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || pool.execute(move || tx.send(2).unwrap()))
        };
        // Whether or not the submitter blocked yet, nothing ran: the worker is held.
        assert!(rx.try_recv().is_err());
        gate_tx.send(()).unwrap();
        submitter.join().unwrap().unwrap();
        assert_eq!(rx.recv().unwrap(), 1);
        assert_eq!(rx.recv().unwrap(), 2);
        pool.shutdown();
    }

    /// Jobs submitted one at a time, each after the last ran (the pool idles in between: its
    /// workers search, then park), and in bursts from several threads: every job runs once. A
    /// lost wake leaves a job queued in an open pool, and the wait for it times out.
    #[test]
    fn every_job_runs_once_whether_the_workers_search_or_park() {
        let pool = BlockingPool::new("p", 3, 4).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..200u32 {
            let tx = tx.clone();
            pool.execute(move || tx.send(i).unwrap()).unwrap();
            let got = rx.recv_timeout(std::time::Duration::from_secs(10));
            assert_eq!(got, Ok(i), "job {i} did not run: a lost wake");
            if i % 16 == 0 {
                // Long enough for every worker to stop searching and park.
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        let submitters: Vec<_> = (0..3u32)
            .map(|t| {
                let (pool, tx) = (Arc::clone(&pool), tx.clone());
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        let tx = tx.clone();
                        pool.execute(move || tx.send(t * 1000 + i).unwrap())
                            .unwrap();
                    }
                })
            })
            .collect();
        for submitter in submitters {
            submitter.join().unwrap();
        }
        let mut got: Vec<u32> = (0..3000)
            .map(|_| rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap())
            .collect();
        got.sort_unstable();
        assert_eq!(got, (0..3000).collect::<Vec<_>>());
        pool.shutdown();
    }

    #[test]
    fn resources_are_reused_and_never_exceed_the_workers() {
        let created = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = created.clone();
        let pool = BlockingPool::new("p", 2, 64).unwrap();
        let mut f = BlockingAsyncFunction::new(
            pool.clone(),
            move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            },
            |_: &mut (), x: &u32| Ok(vec![*x]),
        );
        let (s, rx) = sink();
        for i in 0..50u32 {
            f.invoke(&i, ResultFuture::new(u64::from(i), 1, s.clone()));
        }
        for _ in 0..50 {
            rx.recv().unwrap();
        }
        pool.shutdown();
        let n = created.load(std::sync::atomic::Ordering::SeqCst);
        assert!((1..=2).contains(&n), "{n} resources for 2 workers");
    }
}
