//! The adapter: `Model` x `Kind` -> a started task behind one [`Task`] handle. This is the only
//! file that names a model crate's task types.
//!
//! | kind | legacy | mailbox | bridge (as the job layer builds it, `src/job/segment.rs`) |
//! |---|---|---|---|
//! | `Source` | `SourceStreamTask` (scripted `SourceFunction`) -> p0 -> p1 | `SourceStreamTask` (scripted `SourceReader`) -> p0 -> p1 | `LegacySourceStreamTask` (the same `SourceFunction`) -> p0 -> p1 |
//! | `OneInput` | `OneInputStreamTask`, 2 channels, p0 -> p1 | `OneInputStreamTask`, 2 channels, p0 -> p1 | the mailbox's |
//! | `TwoInput` | `TwoInputStreamTask`, co-map -> p1 | `TwoInputStreamTask`, co-map -> p1 | the mailbox's |
//! | `Async` | `AsyncWaitStreamTask`, 2 channels, async head -> p1 | `OneInputStreamTask`, 2 channels, `AsyncWaitOperator` -> p1 | the mailbox's |
//! | `IterationHead` | `IterationHeadStreamTask` (an `OneInputStreamTask` over the kit's `IterationInput`), 2 channels + a feedback edge, p0 -> p1 | `IterationHeadStreamTask`, the same | the mailbox's |
//! | `AsyncSource` | none: an async operator heads its task (FLINK-13063) | `SourceStreamTask` (reader) -> `AsyncWaitOperator` -> p1 | `SourceStreamTask` (`HandoffReader` over the `SourceFunction`) -> `AsyncWaitOperator` -> p1 |
//!
//! Only [`Handle`] and [`start`] name a model's types; everything below them is
//! model-agnostic test plumbing; every model returns the kit's one
//! [`TaskHandle`](streamtask_runtime::TaskHandle).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use crossbeam::channel::{Receiver, unbounded};
use streamtask_core::async_io::{AsyncConfig, OutputMode};
use streamtask_core::operator::{Chain, CoMap, TwoInputChain};
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::testing::{ManualAsyncFunction, ManualCalls};
use streamtask_core::{
    CheckpointBarrier, StreamElement, StreamRecord, state::TaskSnapshot, task::TaskOutcome,
    time::Clock, time::ManualClock,
};
use streamtask_runtime::channel::{InputGate, Sender, TwoInputGate, bounded};

use super::parts::{
    Cmd, Ev, Faults, GUARD, Latch, Log, Probe, Recorder, Script, ScriptedReader, ScriptedSource,
    TimerAct, threads_named,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Model {
    Legacy,
    Mailbox,
    Bridge,
}

pub(crate) const MODELS: [Model; 3] = [Model::Legacy, Model::Mailbox, Model::Bridge];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Source,
    OneInput,
    TwoInput,
    Async,
    /// A source task with an async operator chained behind its source.
    AsyncSource,
    /// An iteration's head: two input channels and a feedback edge (not in [`KINDS`]: only the
    /// iteration tests use it).
    IterationHead,
}

/// The four task kinds every model has.
pub(crate) const KINDS: [Kind; 4] = [Kind::Source, Kind::OneInput, Kind::TwoInput, Kind::Async];

/// Every model with every kind in `kinds`.
pub(crate) fn cases(kinds: &[Kind]) -> Vec<(Model, Kind)> {
    MODELS
        .iter()
        .flat_map(|&m| kinds.iter().map(move |&k| (m, k)))
        .collect()
}

/// Runs `test` for every case, each to its end, and then fails listing the cases that failed
/// (so one run shows every model and kind that fails, not only the first).
pub(crate) fn each(cases: Vec<(Model, Kind)>, test: impl Fn(Model, Kind)) {
    let mut failed = Vec::new();
    for (model, kind) in cases {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| test(model, kind))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
                .unwrap_or_default();
            failed.push(format!("{model:?}/{kind:?}: {message}"));
        }
    }
    assert!(
        failed.is_empty(),
        "{} case(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// Longer than [`GUARD`], so a `cancel` or `join` that waits for the grace shows up as
/// blocked, not merely slow.
pub(crate) const LONG_GRACE: Duration = Duration::from_secs(600);

/// What a test asks of its task.
#[derive(Clone)]
pub(crate) struct Spec {
    /// Two characters unique to the test; the task's name (and so its threads' names) is this
    /// plus a model and a kind letter. Upper case, so it never matches a test thread's name.
    pub(crate) id: &'static str,
    /// Faults of the tail operator `p1`.
    pub(crate) faults: Faults,
    /// The async queue's capacity.
    pub(crate) capacity: usize,
    /// How long a stopping task may take before `join` reports `CancellationIgnored`.
    pub(crate) grace: Duration,
    /// State to restore the task from.
    pub(crate) restore: Option<TaskSnapshot>,
    /// An iteration head's wait timeout.
    pub(crate) max_wait: Duration,
}

impl Spec {
    pub(crate) fn new(id: &'static str) -> Self {
        assert_eq!(id.len(), 2, "a test id has two characters");
        Spec {
            id,
            faults: Faults::default(),
            capacity: 4,
            grace: LONG_GRACE,
            restore: None,
            max_wait: LONG_GRACE,
        }
    }

    /// The task restores `snapshot`.
    pub(crate) fn restored(mut self, snapshot: TaskSnapshot) -> Self {
        self.restore = Some(snapshot);
        self
    }
}

/// Every model's task is the kit's one handle.
type Handle = streamtask_runtime::TaskHandle;

/// A started task of one model and kind, with its scripted inputs and its log.
pub(crate) struct Task {
    pub(crate) model: Model,
    pub(crate) kind: Kind,
    /// The task's name, the prefix of its threads' names.
    pub(crate) name: String,
    pub(crate) log: Log,
    pub(crate) script: Script,
    inputs: Vec<Sender<StreamElement<u64>>>,
    pub(crate) calls: ManualCalls<u64, u64>,
    pub(crate) clock: ManualClock,
    reports: Receiver<TaskReport>,
    /// The tail's end of an iteration head's feedback edge.
    feedback: Option<streamtask_runtime::FeedbackSender<u64>>,
    /// Opened when the task is dropped, so a failing test never leaves user code blocked.
    latches: Vec<Latch>,
    handle: Option<Handle>,
}

/// Starts `kind` under `model`; `None` where the model has no such task.
pub(crate) fn start(model: Model, kind: Kind, spec: &Spec) -> Option<Task> {
    let model_letter = match model {
        Model::Legacy => 'L',
        Model::Mailbox => 'M',
        Model::Bridge => 'B',
    };
    let kind_letter = match kind {
        Kind::Source => 'S',
        Kind::OneInput => 'O',
        Kind::TwoInput => 'T',
        Kind::Async => 'A',
        Kind::AsyncSource => 'Q',
        Kind::IterationHead => 'I',
    };
    let name = format!("{}{model_letter}{kind_letter}", spec.id);
    assert!(
        threads_named(&name).is_empty(),
        "{name}: threads of an earlier task with this name are still running"
    );
    let log = Log::default();
    let script = Script::default();
    let clock = ManualClock::new(0);
    let (reports_tx, reports) = unbounded();
    let mut config = TaskConfig::new(name.clone())
        .with_clock(Clock::Manual(clock.clone()))
        .with_responder(CheckpointResponder::new(name.clone(), reports_tx))
        .with_cancel_grace(spec.grace)
        .with_restore(spec.restore.clone());
    let mut feedback = None;
    let output = Recorder(log.clone());
    let p0 = Probe::new("p0", &log, Faults::default());
    let p1 = Probe::new("p1", &log, spec.faults.clone());
    let function = ManualAsyncFunction::new();
    let calls = function.calls();
    let async_config = AsyncConfig::new(OutputMode::Ordered, spec.capacity);
    let source = ScriptedSource {
        script: script.clone(),
        log: log.clone(),
    };
    let reader = ScriptedReader {
        script: script.clone(),
        log: log.clone(),
        emitted: 0,
        hot: false,
    };
    let mut inputs = Vec::new();
    let mut channel = || {
        let (tx, rx) = bounded(64).unwrap();
        inputs.push(tx);
        rx
    };
    let handle = match (model, kind) {
        (Model::Legacy, Kind::Source) => {
            streamtask_legacy::SourceStreamTask::new(config, source, Chain::new(p0, p1), output)
                .spawn()
        }
        (Model::Mailbox, Kind::Source) => {
            streamtask_mailbox::SourceStreamTask::new(config, reader, Chain::new(p0, p1), output)
                .spawn()
        }
        (Model::Bridge, Kind::Source) => streamtask_bridge::LegacySourceStreamTask::new(
            config,
            source,
            Chain::new(p0, p1),
            output,
        )
        .spawn()
        .expect("a chain without async operators"),
        (Model::Legacy, Kind::OneInput) => {
            let gate = InputGate::new(vec![channel(), channel()]).unwrap();
            streamtask_legacy::OneInputStreamTask::new(config, gate, Chain::new(p0, p1), output)
                .spawn()
        }
        (Model::Mailbox | Model::Bridge, Kind::OneInput) => {
            let gate = InputGate::new(vec![channel(), channel()]).unwrap();
            streamtask_mailbox::OneInputStreamTask::new(config, gate, Chain::new(p0, p1), output)
                .spawn()
        }
        (Model::Legacy, Kind::TwoInput) => {
            let gate = TwoInputGate::new(vec![channel()], vec![channel()]).unwrap();
            streamtask_legacy::TwoInputStreamTask::new(
                config,
                gate,
                TwoInputChain::new(co_map(), p1),
                output,
            )
            .spawn()
        }
        (Model::Mailbox | Model::Bridge, Kind::TwoInput) => {
            let gate = TwoInputGate::new(vec![channel()], vec![channel()]).unwrap();
            streamtask_mailbox::TwoInputStreamTask::new(
                config,
                gate,
                TwoInputChain::new(co_map(), p1),
                output,
            )
            .spawn()
        }
        (Model::Legacy, Kind::Async) => {
            let gate = InputGate::new(vec![channel(), channel()]).unwrap();
            let head = streamtask_legacy::AsyncHead::new("async", function, async_config).unwrap();
            streamtask_legacy::AsyncWaitStreamTask::chained(config, gate, head, p1, output)
                .unwrap()
                .spawn()
        }
        (Model::Mailbox | Model::Bridge, Kind::Async) => {
            let gate = InputGate::new(vec![channel(), channel()]).unwrap();
            let op = streamtask_runtime::AsyncWaitOperator::new("async", function, async_config)
                .unwrap();
            streamtask_mailbox::OneInputStreamTask::new(config, gate, Chain::new(op, p1), output)
                .spawn()
        }
        (model, Kind::IterationHead) => {
            let gate = InputGate::new(vec![channel(), channel()]).unwrap();
            let (tail, edge) = streamtask_runtime::feedback_edge();
            feedback = Some(tail);
            let input = streamtask_runtime::IterationInput::new(
                "loop",
                gate,
                edge,
                spec.max_wait,
                &mut config,
            )
            .unwrap();
            let chain = Chain::new(p0, p1);
            match model {
                Model::Legacy => {
                    streamtask_legacy::IterationHeadStreamTask::new(config, input, chain, output)
                        .spawn()
                }
                Model::Mailbox | Model::Bridge => {
                    streamtask_mailbox::IterationHeadStreamTask::new(config, input, chain, output)
                        .spawn()
                }
            }
        }
        (Model::Legacy, Kind::AsyncSource) => return None,
        (Model::Mailbox, Kind::AsyncSource) => {
            let op = streamtask_runtime::AsyncWaitOperator::new("async", function, async_config)
                .unwrap();
            streamtask_mailbox::SourceStreamTask::new(config, reader, Chain::new(op, p1), output)
                .spawn()
        }
        (Model::Bridge, Kind::AsyncSource) => {
            let op = streamtask_runtime::AsyncWaitOperator::new("async", function, async_config)
                .unwrap();
            let handoff = streamtask_bridge::HandoffReader::new(source)
                .with_clock(Clock::Manual(clock.clone()))
                .with_cancel_grace(spec.grace);
            streamtask_mailbox::SourceStreamTask::new(config, handoff, Chain::new(op, p1), output)
                .spawn()
        }
    };
    let mut latches = Vec::new();
    let faults = &spec.faults;
    latches.extend(faults.stuck_on.as_ref().map(|(_, l)| l.clone()));
    latches.extend(faults.block_snapshot.clone());
    if let TimerAct::Block(latch) = &faults.timer {
        latches.push(latch.clone());
    }
    Some(Task {
        model,
        kind,
        name,
        log,
        script,
        inputs,
        calls,
        clock,
        reports,
        feedback,
        latches,
        handle: Some(handle),
    })
}

type Identity = fn(u64) -> u64;

fn co_map() -> CoMap<u64, u64, u64, Identity, Identity> {
    CoMap::new("co-map", (|x| x) as Identity, (|x| x) as Identity)
}

/// How a guarded wait on a task ended.
pub(crate) enum Waited<T> {
    /// It returned within the hang guard (for `cancel_while_blocked`: while the task's user
    /// code was still blocked).
    Returned(T),
    /// It was still blocked after the hang guard; the test opened its latches to end it.
    Blocked(T),
}

impl Task {
    fn handle(&self) -> &Handle {
        self.handle.as_ref().expect("the task is not joined yet")
    }

    pub(crate) fn is_source(&self) -> bool {
        matches!(self.kind, Kind::Source | Kind::AsyncSource)
    }

    /// Opens `latch` when the task is dropped (a latch the test blocks user code on).
    pub(crate) fn hold(&mut self, latch: &Latch) {
        self.latches.push(latch.clone());
    }

    /// The source emits `value`, or `value` arrives on the first input channel.
    pub(crate) fn record(&self, value: u64) {
        if self.is_source() {
            self.script.push(Cmd::Emit(value));
        } else {
            self.send(0, StreamElement::Record(StreamRecord::new(value)));
        }
    }

    /// `element` arrives on input channel `channel` (an input task's).
    pub(crate) fn send(&self, channel: usize, element: StreamElement<u64>) {
        assert!(!self.is_source(), "a source task has no input channels");
        self.inputs[channel]
            .send(element)
            .unwrap_or_else(|_| panic!("channel {channel} of {} is closed", self.name));
    }

    /// The number of input channels (0 for a source task).
    pub(crate) fn channels(&self) -> usize {
        self.inputs.len()
    }

    /// A clone of input channel `channel`'s sender.
    pub(crate) fn sender(&self, channel: usize) -> Sender<StreamElement<u64>> {
        self.inputs[channel].clone()
    }

    /// Starts checkpoint `id`: a trigger on a source task, a barrier on every channel of an
    /// input task.
    pub(crate) fn checkpoint(&self, id: u64) {
        let barrier = CheckpointBarrier::new(id, 0);
        if self.is_source() {
            self.handle()
                .trigger_checkpoint(barrier)
                .expect("a source task");
        } else {
            for channel in 0..self.inputs.len() {
                self.send(channel, StreamElement::Barrier(barrier));
            }
        }
    }

    /// Starts stop-with-savepoint `id`: a barrier of the synchronous kind, triggered on a source
    /// task, or on every channel of an input task.
    pub(crate) fn stop_with_savepoint(&self, id: u64) {
        let mut barrier = CheckpointBarrier::new(id, 0);
        barrier.kind = streamtask_core::CheckpointKind::Savepoint;
        if self.is_source() {
            self.handle()
                .trigger_checkpoint(barrier)
                .expect("a source task");
        } else {
            for channel in 0..self.inputs.len() {
                self.send(channel, StreamElement::Barrier(barrier));
            }
        }
    }

    /// The source ends, or every input channel ends (and an iteration head's tail).
    pub(crate) fn end(&self) {
        if self.is_source() {
            self.script.push(Cmd::End);
        } else {
            for channel in 0..self.inputs.len() {
                self.send(channel, StreamElement::EndOfInput);
            }
        }
        if let Some(sender) = self.feedback.clone() {
            let mut tail = streamtask_runtime::FeedbackOutput::new(sender);
            streamtask_core::operator::TaskOutput::end_of_input(&mut tail).expect("the tail ends");
        }
    }

    /// `value` comes back on an iteration head's feedback edge (through the kit's tail).
    pub(crate) fn feed_back(&self, value: u64) {
        let sender = self.feedback.clone().expect("an iteration head");
        let mut tail = streamtask_core::testing::OperatorHarness::new(
            streamtask_runtime::FeedbackWriter::new("loop", LONG_GRACE, sender),
        );
        tail.process(value).expect("the head takes feedback");
    }

    /// Barrier `id` comes back on an iteration head's feedback edge.
    pub(crate) fn return_barrier(&self, id: u64) {
        let sender = self.feedback.clone().expect("an iteration head");
        let mut tail = streamtask_runtime::FeedbackOutput::new(sender);
        streamtask_core::operator::TaskOutput::broadcast_barrier(
            &mut tail,
            CheckpointBarrier::new(id, 0),
        )
        .expect("the tail sends barriers");
    }

    /// A report, if one is there now.
    pub(crate) fn try_report(&self) -> Option<TaskReport> {
        self.reports.try_recv().ok()
    }

    /// The next checkpoint report (hang guard only).
    pub(crate) fn report(&self) -> TaskReport {
        self.reports.recv_timeout(GUARD).unwrap_or_else(|_| {
            panic!(
                "{}: no checkpoint report; log {:?}",
                self.name,
                self.log.all()
            )
        })
    }

    /// The next report, which must acknowledge `id`; its snapshot.
    pub(crate) fn ack(&self, id: u64) -> TaskSnapshot {
        match self.report() {
            TaskReport::Acknowledged {
                checkpoint,
                snapshot,
                ..
            } if checkpoint == id => snapshot,
            other => panic!("expected the ack of checkpoint {id}, got {other:?}"),
        }
    }

    pub(crate) fn notify_complete(&self, id: u64) {
        self.handle().notify_checkpoint_complete(id);
    }

    pub(crate) fn notify_aborted(&self, id: u64) {
        self.handle().notify_checkpoint_aborted(id);
    }

    /// Waits until `n` async calls were made; their inputs, in call order.
    pub(crate) fn invoked(&self, n: usize) -> Vec<u64> {
        self.calls
            .wait_for_invocations(n)
            .into_iter()
            .map(|c| c.input)
            .collect()
    }

    /// Completes the async call for `input` with `values`.
    pub(crate) fn complete_call(&self, input: u64, values: Vec<u64>) {
        assert!(
            self.calls.complete(&input, values),
            "call {input} completed twice"
        );
    }

    /// Cancels the task while its user code is blocked on `blocked`, which is opened only
    /// after `cancel` returned (or, if `cancel` is still blocked after the hang guard, then).
    pub(crate) fn cancel_while_blocked(&self, blocked: &Latch) -> Waited<()> {
        let handle = self.handle();
        std::thread::scope(|s| {
            let (returned_tx, returned) = crossbeam::channel::bounded(1);
            s.spawn(move || {
                handle.cancel();
                let _ = returned_tx.send(());
            });
            let waited = match returned.recv_timeout(GUARD) {
                Ok(()) => Waited::Returned(()),
                Err(_) => Waited::Blocked(()),
            };
            blocked.open();
            waited
        })
    }

    /// Joins the task (hang guard only: a `join` still blocked after it fails the test), then
    /// checks that none of its threads is left.
    pub(crate) fn join(self) -> (TaskOutcome, Vec<Ev>) {
        let (waited, mut t) = self.join_guarded();
        let outcome = match waited {
            Waited::Returned(outcome) => outcome,
            Waited::Blocked(outcome) => panic!(
                "{}: join() did not return (it did once the test unblocked the task: {outcome})",
                t.name
            ),
        };
        t.inputs.clear();
        let (name, model, kind, log) = (t.name.clone(), t.model, t.kind, t.log.clone());
        drop(t);
        // A joined thread can still be listed for a moment (the kernel wakes the joiner before
        // it removes the thread from the group): wait for the listing, hang-guarded.
        let left = threads_left_after_join(&name);
        assert!(
            left.is_empty(),
            "{name} ({model:?}/{kind:?}): threads left after join: {left:?} (outcome {outcome})"
        );
        (outcome, log.all())
    }

    /// Joins the task with a hang guard: if `join` is still blocked after it, opens the
    /// task's latches so it can end. Does not check threads (see [`threads_named`]).
    pub(crate) fn join_guarded(mut self) -> (Waited<TaskOutcome>, Task) {
        let handle = self.handle.take().expect("joined once");
        let latches = self.latches.clone();
        let waited = std::thread::scope(|s| {
            let (joined_tx, joined) = crossbeam::channel::bounded(1);
            s.spawn(move || {
                let _ = joined_tx.send(handle.join());
            });
            match joined.recv_timeout(GUARD) {
                Ok(outcome) => Waited::Returned(outcome),
                Err(_) => {
                    latches.iter().for_each(Latch::open);
                    Waited::Blocked(joined.recv().expect("join returns once unblocked"))
                }
            }
        });
        (waited, self)
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // A failing test: unblock user code first, so the handle's own drop (cancel + join)
        // does not wait for the grace.
        self.latches.iter().for_each(Latch::open);
        self.script.cancel();
        self.inputs.clear();
        if let Some(handle) = self.handle.take() {
            handle.cancel();
            drop(handle.join());
        }
    }
}

/// The threads named `name*` still listed once the hang guard ran out (none, normally at once).
fn threads_left_after_join(name: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + GUARD;
    loop {
        let left = threads_named(name);
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ---- the bounded hand-over: a hot legacy source under the checkpoint lock ----------------------

use std::sync::Arc;

use streamtask_core::operator::Discard;
use streamtask_legacy::Fairness;
use streamtask_legacy::testing::{HandoverProbe, HotSource, SnapshotProbe};

/// The cases whose source task keeps a legacy source's state in a checkpoint lock that a
/// checkpoint trigger asks for by hand-over: legacy's `SourceStreamTask` with
/// `with_bounded_handover(true)`, and the bridge's `LegacySourceStreamTask` (always, every
/// mail). The mailbox model has no checkpoint lock, so no case.
pub(crate) const HANDOVER_CASES: [(Model, Kind); 2] =
    [(Model::Legacy, Kind::Source), (Model::Bridge, Kind::Source)];

/// A source task of a [`HANDOVER_CASES`] model: `HotSource` -> `SnapshotProbe` over one
/// `HandoverProbe` (`streamtask_legacy::testing`), into a discarding output.
pub(crate) struct HotSourceTask {
    name: String,
    handle: Handle,
    reports: Receiver<TaskReport>,
}

/// Starts the hand-over case of `model` with a checkpoint lock of `fairness`, named `<id>`,
/// the model's letter and `S`; `None` for the mailbox model.
pub(crate) fn start_hot_source(
    model: Model,
    id: &'static str,
    fairness: Fairness,
    probe: &Arc<HandoverProbe>,
) -> Option<HotSourceTask> {
    let letter = match model {
        Model::Legacy => 'L',
        Model::Bridge => 'B',
        Model::Mailbox => return None,
    };
    let name = format!("{id}{letter}S");
    let (reports_tx, reports) = unbounded();
    let config =
        TaskConfig::new(name.clone()).with_responder(CheckpointResponder::new(&name, reports_tx));
    let (source, chain) = (
        HotSource(Arc::clone(probe)),
        SnapshotProbe(Arc::clone(probe)),
    );
    let handle = match model {
        Model::Legacy => streamtask_legacy::SourceStreamTask::new(config, source, chain, Discard)
            .with_fairness(fairness)
            .with_bounded_handover(true)
            .spawn(),
        _ => streamtask_bridge::LegacySourceStreamTask::new(config, source, chain, Discard)
            .with_fairness(fairness)
            .spawn()
            .expect("a chain without async operators"),
    };
    Some(HotSourceTask {
        name,
        handle,
        reports,
    })
}

impl HotSourceTask {
    /// Triggers checkpoint `id` and waits (hang guard only) for its acknowledgement.
    pub(crate) fn checkpoint_acked(&self, id: u64) {
        self.handle
            .trigger_checkpoint(CheckpointBarrier::new(id, 0))
            .expect("a running source task");
        match self.reports.recv_timeout(GUARD) {
            Ok(TaskReport::Acknowledged { checkpoint, .. }) if checkpoint == id => {}
            other => panic!("{}: checkpoint {id}: {other:?}", self.name),
        }
    }

    /// Cancels and joins the task, then checks that none of its threads is left.
    pub(crate) fn cancel_and_join(self) -> TaskOutcome {
        self.handle.cancel();
        let outcome = self.handle.join();
        let left = threads_left_after_join(&self.name);
        assert!(left.is_empty(), "{}: threads left: {left:?}", self.name);
        outcome
    }
}

// ---- the continuous-file-reading split reader ---------------------------------------------------

use streamtask::files::{FileSplit, ReadMode, SplitReader};
use streamtask_core::operator::Emitted;
use streamtask_core::{
    OperatorError, StreamStatus, Watermark, operator::Output, operator::TaskOutput,
};

/// The split reader's form under `model`, as the job layer picks it (`src/job/files.rs`): its
/// own reader thread whose lines are emitted under the checkpoint lock (legacy), or
/// self-enqueued read mails of `chunk` lines (mailbox, bridge).
fn read_mode(model: Model) -> ReadMode {
    match model {
        Model::Legacy => ReadMode::Thread,
        Model::Mailbox | Model::Bridge => ReadMode::Mails { chunk: 3 },
    }
}

/// A task output that sends every line, barrier and end of input to the test.
struct LineOutput(crossbeam::channel::Sender<Emitted<String>>);

impl Output<String> for LineOutput {
    fn collect(&mut self, record: StreamRecord<String>) -> Result<(), OperatorError> {
        let _ = self.0.send(Emitted::Record(record));
        Ok(())
    }
    fn emit_watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        let _ = self.0.send(Emitted::Watermark(watermark));
        Ok(())
    }
    fn emit_status(&mut self, status: StreamStatus) -> Result<(), OperatorError> {
        let _ = self.0.send(Emitted::Status(status));
        Ok(())
    }
}

impl TaskOutput<String> for LineOutput {
    fn broadcast_barrier(&mut self, barrier: CheckpointBarrier) -> Result<(), OperatorError> {
        let _ = self.0.send(Emitted::Barrier(barrier));
        Ok(())
    }
    fn end_of_input(&mut self) -> Result<(), OperatorError> {
        let _ = self.0.send(Emitted::EndOfInput);
        Ok(())
    }
}

/// A one-input task of `model` whose chain is the file reading's [`SplitReader`] in the
/// model's form: the legacy `OneInputStreamTask`, or the mailbox's `OneInputStreamTask` (which the
/// bridge runs the reader in too), one input channel of splits. Named `<id>`, the model's
/// letter and `R`.
pub(crate) struct SplitReaderTask {
    name: String,
    splits: Option<Sender<StreamElement<FileSplit>>>,
    out: Receiver<Emitted<String>>,
    reports: Receiver<TaskReport>,
    handle: Option<Handle>,
}

/// Starts the split reader's task under `model`, restored from `restore` if given.
pub(crate) fn start_split_reader(
    model: Model,
    id: &'static str,
    restore: Option<TaskSnapshot>,
) -> SplitReaderTask {
    let letter = match model {
        Model::Legacy => 'L',
        Model::Mailbox => 'M',
        Model::Bridge => 'B',
    };
    let name = format!("{id}{letter}R");
    assert!(
        threads_named(&name).is_empty(),
        "{name}: threads of an earlier task with this name are still running"
    );
    let (reports_tx, reports) = unbounded();
    let config = TaskConfig::new(name.clone())
        .with_responder(CheckpointResponder::new(name.clone(), reports_tx))
        .with_restore(restore);
    let (splits, rx) = bounded(64).unwrap();
    let gate = InputGate::new(vec![rx]).unwrap();
    let (out_tx, out) = unbounded();
    let reader = SplitReader::new(
        format!("{name}-split-reader"),
        read_mode(model),
        Arc::new(streamtask::fault::FaultPlan::none()),
    );
    let output = LineOutput(out_tx);
    let handle = match model {
        Model::Legacy => {
            streamtask_legacy::OneInputStreamTask::new(config, gate, reader, output).spawn()
        }
        Model::Mailbox | Model::Bridge => {
            streamtask_mailbox::OneInputStreamTask::new(config, gate, reader, output).spawn()
        }
    };
    SplitReaderTask {
        name,
        splits: Some(splits),
        out,
        reports,
        handle: Some(handle),
    }
}

impl SplitReaderTask {
    /// `element` arrives on the task's one input channel.
    pub(crate) fn send(&self, element: StreamElement<FileSplit>) {
        self.splits
            .as_ref()
            .expect("the input is open")
            .send(element)
            .unwrap_or_else(|_| panic!("the input of {} is closed", self.name));
    }

    /// Triggers checkpoint `id` on a source task.
    pub(crate) fn trigger(&self, id: u64) {
        self.handle
            .as_ref()
            .expect("not joined")
            .trigger_checkpoint(CheckpointBarrier::new(id, 0))
            .expect("a source task");
    }

    /// What the task emitted within `wait`, if anything (for a wait that does something else
    /// while nothing comes; never an assertion's timing).
    pub(crate) fn out_within(&self, wait: Duration) -> Option<Emitted<String>> {
        self.out.recv_timeout(wait).ok()
    }

    /// The next thing the task emitted (hang guard only).
    pub(crate) fn next_out(&mut self) -> Emitted<String> {
        match self.out.recv_timeout(GUARD) {
            Ok(emitted) => emitted,
            Err(crossbeam::channel::RecvTimeoutError::Disconnected) => {
                let outcome = self.handle.take().map(Handle::join);
                panic!("{}: the task ended early: {outcome:?}", self.name)
            }
            Err(_) => panic!("{}: nothing more was emitted", self.name),
        }
    }

    /// The next report, which must acknowledge `id`; its snapshot (hang guard only).
    pub(crate) fn ack(&self, id: u64) -> TaskSnapshot {
        match self.reports.recv_timeout(GUARD) {
            Ok(TaskReport::Acknowledged {
                checkpoint,
                snapshot,
                ..
            }) if checkpoint == id => snapshot,
            other => panic!(
                "{}: expected the ack of checkpoint {id}, got {other:?}",
                self.name
            ),
        }
    }

    /// Ends the input, joins the task, then checks that none of its threads (the reader
    /// thread included) is left; the outcome and everything emitted that was not yet taken.
    pub(crate) fn end_and_join(mut self) -> (TaskOutcome, Vec<Emitted<String>>) {
        if self.splits.is_some() {
            self.send(StreamElement::EndOfInput);
        }
        self.splits.take();
        let outcome = self.handle.take().expect("joined once").join();
        let rest = self.out.try_iter().collect();
        let left = threads_left_after_join(&self.name);
        assert!(left.is_empty(), "{}: threads left: {left:?}", self.name);
        (outcome, rest)
    }
}

impl Drop for SplitReaderTask {
    fn drop(&mut self) {
        self.splits.take();
        if let Some(handle) = self.handle.take() {
            handle.cancel();
            drop(handle.join());
        }
    }
}

// ---- the FLIP-27 file source reader -------------------------------------------------------------

use streamtask::files::FileSource;
use streamtask::source::{Source, SourceCoordinator};

/// Passes lines through; at line `at` (counted from 1) it says so and waits until the test
/// lets it go on, so the test knows the source is mid-split, inside one poll.
struct HoldAt {
    at: usize,
    seen: usize,
    reached: crossbeam::channel::Sender<()>,
    go_on: Receiver<()>,
}

impl streamtask_core::operator::Operator for HoldAt {
    type In = String;
    type Out = String;

    fn name(&self) -> &str {
        "hold-at"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<String>,
        ctx: &mut streamtask_core::operator::Context<'_, String>,
    ) -> Result<(), OperatorError> {
        self.seen += 1;
        if self.seen == self.at {
            let _ = self.reached.send(());
            // Disconnected when the test is dropped: go on.
            let _ = self.go_on.recv();
        }
        ctx.collect(record)
    }
}

/// [`start_split_source_reader`] for a file source.
pub(crate) fn start_file_source_reader(
    model: Model,
    id: &'static str,
    enumerator: &Arc<SourceCoordinator<FileSource>>,
    restore: Option<TaskSnapshot>,
    hold_at: usize,
) -> (SplitReaderTask, Held) {
    start_split_source_reader(model, id, enumerator, 0, restore, hold_at)
}

/// A source task of `model` whose source is reader `subtask` of the split source `enumerator`
/// drives, run as the job layer runs a `SourceReader` (`src/job/segment.rs`):
/// polled under the checkpoint lock through the bridge's `ReaderSource` in a legacy
/// `SourceStreamTask` with an event-time context, which passes the reader's idleness on (legacy), on the task thread of the mailbox's `SourceStreamTask` (mailbox,
/// bridge); its chain passes lines through, holding line `hold_at` until [`Held::go_on`]
/// (0: never). Named `<id>`, the model's letter and `F`; it has
/// no input ([`SplitReaderTask::end_and_join`] waits for the source to end).
pub(crate) fn start_split_source_reader<S: Source<Output = String>>(
    model: Model,
    id: &'static str,
    enumerator: &Arc<SourceCoordinator<S>>,
    subtask: usize,
    restore: Option<TaskSnapshot>,
    hold_at: usize,
) -> (SplitReaderTask, Held) {
    let letter = match model {
        Model::Legacy => 'L',
        Model::Mailbox => 'M',
        Model::Bridge => 'B',
    };
    let name = format!("{id}{letter}F");
    assert!(
        threads_named(&name).is_empty(),
        "{name}: threads of an earlier task with this name are still running"
    );
    let (reports_tx, reports) = unbounded();
    let config = TaskConfig::new(name.clone())
        .with_responder(CheckpointResponder::new(name.clone(), reports_tx))
        .with_restore(restore);
    let (out_tx, out) = unbounded();
    let reader = enumerator.reader(subtask);
    let (reached_tx, reached) = crossbeam::channel::bounded(1);
    let (go_on, go_on_rx) = crossbeam::channel::bounded(1);
    let chain = HoldAt {
        at: hold_at,
        seen: 0,
        reached: reached_tx,
        go_on: go_on_rx,
    };
    let output = LineOutput(out_tx);
    let handle = match model {
        // The trigger asks for the lock by hand-over: it waits for the poll in flight only.
        Model::Legacy => streamtask_legacy::SourceStreamTask::new(
            config,
            streamtask_bridge::ReaderSource::new(reader),
            chain,
            output,
        )
        .with_context(streamtask_legacy::SourceContextConfig::event_time())
        .with_bounded_handover(true)
        .spawn(),
        Model::Mailbox | Model::Bridge => {
            streamtask_mailbox::SourceStreamTask::new(config, reader, chain, output).spawn()
        }
    };
    let task = SplitReaderTask {
        name,
        splits: None,
        out,
        reports,
        handle: Some(handle),
    };
    (task, Held { reached, go_on })
}

/// The test's side of [`HoldAt`].
pub(crate) struct Held {
    reached: Receiver<()>,
    go_on: crossbeam::channel::Sender<()>,
}

impl Held {
    /// Waits (hang guard only) until the chain holds its line.
    pub(crate) fn wait_reached(&self) {
        self.reached
            .recv_timeout(GUARD)
            .expect("the chain reached the line it holds");
    }

    /// Lets the chain go on.
    pub(crate) fn go_on(&self) {
        let _ = self.go_on.send(());
    }
}
