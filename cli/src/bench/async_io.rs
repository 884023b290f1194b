//! Async I/O measurements: a task of either model fed by a producer thread, and the async
//! functions it runs (immediate completion, and a timer-driven completer standing in for a
//! remote service). `streamtask bench` and the `async_*` benches share them.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use streamtask::Model;
use streamtask_core::async_io::{AsyncConfig, AsyncKey, OutputMode};
use streamtask_core::function::{AsyncFunction, ResultFuture};
use streamtask_core::operator::{Discard, Map};
use streamtask_core::task::TaskConfig;
use streamtask_core::{StreamElement, StreamRecord};
use streamtask_runtime::channel::{InputGate, bounded};

/// What a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chain {
    /// The async operator (capacity, mode).
    Async(usize, OutputMode),
    /// The async operator in key-ordered mode (capacity, number of keys): record `x`'s key is
    /// a hash of `x` modulo the number of keys, so keys follow one another at random.
    KeyOrdered(usize, u64),
    /// A map instead: the task's per-record cost without async I/O, the baseline.
    Map,
}

/// Runs `records` records through a task of `model` running `chain` (with `function` when it is
/// async, inline completions on: the operator's default); returns the wall time from spawning
/// the task to its end.
///
/// # Panics
///
/// If the task does not finish, or does not emit one record per input.
pub fn run<F>(model: Model, chain: Chain, function: F, records: u64) -> Duration
where
    F: AsyncFunction<In = u64, Out = u64>,
{
    run_with(model, chain, function, true, records)
}

/// [`run`] with the async operator's inline completions on or off
/// ([`AsyncWaitOperator::with_inline_completions`](streamtask_runtime::AsyncWaitOperator::with_inline_completions)):
/// off, a completion made inside `invoke` takes the model's route (a completion mail, or the
/// emitter thread) like one from another thread.
///
/// # Panics
///
/// If the task does not finish, or does not emit one record per input.
pub fn run_with<F>(model: Model, chain: Chain, function: F, inline: bool, records: u64) -> Duration
where
    F: AsyncFunction<In = u64, Out = u64>,
{
    let config = TaskConfig::new(format!("bench-{model}"));
    let metrics = Arc::clone(&config.metrics);
    let (tx, rx) = bounded(4096).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let started = Instant::now();
    let producer = std::thread::spawn(move || {
        for x in 0..records {
            tx.send(StreamElement::Record(StreamRecord::new(x)))
                .unwrap();
        }
        tx.send(StreamElement::EndOfInput).unwrap();
    });
    let outcome = match (model, chain) {
        (Model::Legacy, Chain::KeyOrdered(capacity, keys)) => {
            let head = streamtask_legacy::AsyncHead::keyed(
                "async",
                function,
                AsyncConfig::new(OutputMode::KeyOrdered, capacity),
                random_key(keys),
            )
            .unwrap()
            .with_inline_completions(inline);
            streamtask_legacy::AsyncWaitStreamTask::new(config, gate, head, Discard)
                .spawn()
                .join()
        }
        (_, Chain::KeyOrdered(capacity, keys)) => {
            let op = streamtask_runtime::AsyncWaitOperator::keyed(
                "async",
                function,
                AsyncConfig::new(OutputMode::KeyOrdered, capacity),
                random_key(keys),
            )
            .unwrap()
            .with_inline_completions(inline);
            streamtask_mailbox::OneInputStreamTask::new(config, gate, op, Discard)
                .spawn()
                .join()
        }
        (Model::Legacy, Chain::Async(capacity, mode)) => {
            let head = streamtask_legacy::AsyncHead::new(
                "async",
                function,
                AsyncConfig::new(mode, capacity),
            )
            .unwrap()
            .with_inline_completions(inline);
            streamtask_legacy::AsyncWaitStreamTask::new(config, gate, head, Discard)
                .spawn()
                .join()
        }
        (Model::Legacy, Chain::Map) => streamtask_legacy::OneInputStreamTask::new(
            config,
            gate,
            Map::new("double", |x: u64| x * 2),
            Discard,
        )
        .spawn()
        .join(),
        (_, Chain::Async(capacity, mode)) => {
            let op = streamtask_runtime::AsyncWaitOperator::new(
                "async",
                function,
                AsyncConfig::new(mode, capacity),
            )
            .unwrap()
            .with_inline_completions(inline);
            streamtask_mailbox::OneInputStreamTask::new(config, gate, op, Discard)
                .spawn()
                .join()
        }
        (_, Chain::Map) => streamtask_mailbox::OneInputStreamTask::new(
            config,
            gate,
            Map::new("double", |x: u64| x * 2),
            Discard,
        )
        .spawn()
        .join(),
    };
    let elapsed = started.elapsed();
    producer.join().unwrap();
    assert!(outcome.is_finished(), "{model} {chain:?}: {outcome}");
    assert_eq!(metrics.records_out.get(), records, "{model} {chain:?}");
    elapsed
}

/// Completes every call at once, on the task thread (zero latency): what remains is the
/// operator's own cost per record (a completion mail, or a hand-off to the emitter thread).
#[derive(Debug, Clone, Copy)]
pub struct Immediate;

impl AsyncFunction for Immediate {
    type In = u64;
    type Out = u64;
    fn invoke(&mut self, input: &u64, result: ResultFuture<u64>) {
        result.complete(vec![input * 2]);
    }
}

struct Pending {
    called: Instant,
    due: Instant,
    /// What completing the call does (completes a `ResultFuture`, wakes an awaiting call).
    complete: Box<dyn FnOnce() + Send>,
}

struct CompleterState {
    // Due times only grow (constant latency, one caller), so a FIFO is a deadline queue.
    queue: VecDeque<Pending>,
    stopped: bool,
    /// Completed calls, and the sum of their actual latencies (call to completion).
    completed: u64,
    total_latency: Duration,
}

/// One thread completing every call `latency` after it was made: a simulated remote service
/// with a timer wheel, not a sleeping thread per request.
///
/// It stands in for a service that answers in exactly `latency`, so it is made precise: its
/// thread asks for 1 ns of timer slack (Linux's default of 50 us would make every timed wait
/// up to 50 us late) and completes every call that is due in one pass.
/// [`mean_latency`](Self::mean_latency) says how close it came. It does not spin before a
/// deadline: calls fall due every few microseconds, so a spin of even 20 us kept the thread
/// busy most of the time (a third of the CPU samples of a run), taking the core the task and
/// producer threads need on a two-core machine.
pub struct Completer {
    latency: Duration,
    shared: Arc<(Mutex<CompleterState>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Completer {
    /// Starts the completer thread.
    pub fn start(latency: Duration) -> Completer {
        let shared = Arc::new((
            Mutex::new(CompleterState {
                queue: VecDeque::new(),
                stopped: false,
                completed: 0,
                total_latency: Duration::ZERO,
            }),
            Condvar::new(),
        ));
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("completer".into())
            .spawn(move || {
                precise_timers();
                complete_due(&thread_shared);
            })
            .unwrap();
        Completer {
            latency,
            shared,
            thread: Some(thread),
        }
    }

    /// The mean time from a call to its completion so far: the latency the operator saw
    /// (the configured one plus the completer's lateness).
    pub fn mean_latency(&self) -> Duration {
        let state = self.shared.0.lock().unwrap();
        state
            .total_latency
            .checked_div(u32::try_from(state.completed.max(1)).unwrap_or(u32::MAX))
            .unwrap_or_default()
    }

    /// An async function whose calls this completer completes (also a handle that completes
    /// anything after the latency: [`Delayed::after_latency`]).
    pub fn function(&self) -> Delayed {
        Delayed {
            latency: self.latency,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// Asks the kernel for 1 ns of timer slack on the calling thread, so its timed waits end when
/// asked (the default slack, 50 us, lets them end up to that much later). Elsewhere, or if the
/// kernel refuses, the waits keep the default slack.
fn precise_timers() {
    #[cfg(target_os = "linux")]
    if let Err(error) = nix::sys::prctl::set_timerslack(1) {
        log::debug!("the completer keeps the default timer slack: {error}");
    }
}

fn complete_due(shared: &(Mutex<CompleterState>, Condvar)) {
    let (lock, changed) = shared;
    let mut state = lock.lock().unwrap();
    let mut due = Vec::new();
    loop {
        let now = Instant::now();
        while state.queue.front().is_some_and(|p| p.due <= now) {
            due.extend(state.queue.pop_front());
        }
        if !due.is_empty() {
            drop(state);
            let n = due.len() as u64;
            let mut latency = Duration::ZERO;
            for p in due.drain(..) {
                (p.complete)();
                // After the completion was delivered: what the operator waited.
                latency += p.called.elapsed();
            }
            state = lock.lock().unwrap();
            state.completed += n;
            state.total_latency += latency;
            continue;
        }
        if state.stopped {
            return;
        }
        let Some(next) = state.queue.front().map(|p| p.due) else {
            state = changed.wait(state).unwrap();
            continue;
        };
        state = changed.wait_timeout(state, next - now).unwrap().0;
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        self.shared.0.lock().unwrap().stopped = true;
        self.shared.1.notify_all();
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

/// Hands every call to a [`Completer`].
#[derive(Clone)]
pub struct Delayed {
    latency: Duration,
    shared: Arc<(Mutex<CompleterState>, Condvar)>,
}

impl AsyncFunction for Delayed {
    type In = u64;
    type Out = u64;
    fn invoke(&mut self, input: &u64, result: ResultFuture<u64>) {
        let value = *input;
        self.after_latency(move || {
            result.complete(vec![value * 2]);
        });
    }
}

impl Delayed {
    /// Runs `complete` on the completer's thread once the latency has passed: what a remote
    /// service's reply does (an async operator's call awaits a oneshot `complete` sends on).
    pub fn after_latency(&self, complete: impl FnOnce() + Send + 'static) {
        let called = Instant::now();
        let pending = Pending {
            called,
            due: called + self.latency,
            complete: Box::new(complete),
        };
        let (lock, changed) = &*self.shared;
        let mut state = lock.lock().unwrap();
        let was_empty = state.queue.is_empty();
        state.queue.push_back(pending);
        drop(state);
        if was_empty {
            // Only an empty queue leaves the completer waiting without a deadline.
            changed.notify_one();
        }
    }
}

/// The median of `runs`.
pub fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

/// Records per second.
pub fn rate(records: u64, elapsed: Duration) -> f64 {
    records as f64 / elapsed.as_secs_f64()
}

impl std::fmt::Debug for Completer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completer")
            .field("latency", &self.latency)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Delayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delayed")
            .field("latency", &self.latency)
            .finish_non_exhaustive()
    }
}

/// One run against Little's law: `records` records through an async operator of `capacity`
/// whose calls a [`Completer`] completes after `latency`.
#[derive(Debug, Clone, Copy)]
pub struct LittlesLaw {
    /// Records per second achieved.
    pub achieved: f64,
    /// `achieved / (capacity / latency)`: the fraction of the bound reached.
    pub of_bound: f64,
    /// The mean latency the calls actually had (the configured one plus the timer's lateness).
    pub mean_latency: Duration,
    /// `achieved / (capacity / mean_latency)`: the fraction of the bound at the latency seen.
    pub of_effective_bound: f64,
}

/// Runs `records` records through `model`'s async operator (`capacity`, `mode`) with every call
/// taking `latency`, and compares the rate with Little's bound `capacity / latency`.
pub fn littles_law(
    model: Model,
    mode: OutputMode,
    capacity: usize,
    latency: Duration,
    records: u64,
) -> LittlesLaw {
    measure(
        model,
        Chain::Async(capacity, mode),
        capacity,
        latency,
        records,
    )
}

/// Key-ordered async I/O over `keys` keys at `capacity` and a constant `latency`: records/s
/// achieved over Little's bound (`capacity / latency`). At most one call per key is in flight,
/// so with fewer keys than the capacity the bound is `keys / latency` instead: the figure is
/// then at most `keys / capacity`.
///
/// # Panics
///
/// If the task fails or loses records.
pub fn key_ordered_littles_law(
    model: Model,
    keys: u64,
    capacity: usize,
    latency: Duration,
    records: u64,
) -> LittlesLaw {
    measure(
        model,
        Chain::KeyOrdered(capacity, keys),
        capacity,
        latency,
        records,
    )
}

/// Runs `records` records through `chain` (whose capacity is `capacity`) with every call
/// taking `latency`, and compares the rate with Little's bound `capacity / latency`.
fn measure(
    model: Model,
    chain: Chain,
    capacity: usize,
    latency: Duration,
    records: u64,
) -> LittlesLaw {
    let completer = Completer::start(latency);
    let elapsed = run(model, chain, completer.function(), records);
    let mean_latency = completer.mean_latency();
    drop(completer); // joins its thread
    let achieved = rate(records, elapsed);
    let bound = capacity as f64 / latency.as_secs_f64();
    let effective = capacity as f64 / mean_latency.as_secs_f64().max(f64::MIN_POSITIVE);
    LittlesLaw {
        achieved,
        of_bound: achieved / bound,
        mean_latency,
        of_effective_bound: achieved / effective,
    }
}

/// Record `x`'s key among `keys`: a hash (splitmix64's finalizer), so consecutive records'
/// keys are uncorrelated, as a real keyed stream's are.
fn random_key(keys: u64) -> AsyncKey<u64> {
    AsyncKey::new(128, move |x: &u64| {
        let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % keys.max(1)
    })
}

/// How a zero-latency call completes and how its completion comes back: the three rows of
/// the zero-latency measurement (`streamtask bench`'s `async_zero_latency`, the
/// `async_overhead` bench).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroLatency {
    /// [`Immediate`], inline completions off: each completion, made on the task thread, takes
    /// the model's route (a completion mail, or the emitter thread under the lock), as one
    /// from a client's thread does. The operator's own cost per record, completion path
    /// included: the row the bench's zero-latency target applies to.
    Routed,
    /// A [`Completer`] with zero delay: every call is completed at once by another thread, as
    /// a fast remote service's client thread would. Mostly the completer's own hand-off: a
    /// call that finds it asleep wakes it, and the woken thread preempts the task thread.
    Remote,
    /// [`Immediate`], inline completions on (the default): each completion is applied when
    /// `invoke` returns, on the task thread. No mail, no emitter: the engine's own cost only.
    Inline,
}

impl ZeroLatency {
    /// Every variant, in the order the bench reports them.
    pub const ALL: [ZeroLatency; 3] = [
        ZeroLatency::Routed,
        ZeroLatency::Remote,
        ZeroLatency::Inline,
    ];

    /// The variant's key in the bench's JSON report.
    pub fn key(self) -> &'static str {
        match self {
            ZeroLatency::Inline => "inline",
            ZeroLatency::Routed => "routed",
            ZeroLatency::Remote => "remote",
        }
    }
}

/// Runs `records` records through `model`'s async operator (`capacity`, `mode`) at zero
/// latency, completed as `how` says; returns the wall time of the whole job.
///
/// # Panics
///
/// As [`run`].
pub fn zero_latency(
    model: Model,
    mode: OutputMode,
    capacity: usize,
    how: ZeroLatency,
    records: u64,
) -> Duration {
    let chain = Chain::Async(capacity, mode);
    match how {
        ZeroLatency::Inline => run_with(model, chain, Immediate, true, records),
        ZeroLatency::Routed => run_with(model, chain, Immediate, false, records),
        ZeroLatency::Remote => {
            let completer = Completer::start(Duration::ZERO);
            let elapsed = run(model, chain, completer.function(), records);
            drop(completer); // joins its thread
            elapsed
        }
    }
}
