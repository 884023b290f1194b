#![doc = include_str!("async_wait.md")]

pub(crate) mod emitter;

use std::fmt;
use std::sync::Arc as StdArc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use streamtask_core::async_io::{AsyncConfig, AsyncConfigError, AsyncKey};
use streamtask_core::function::AsyncFunction;
use streamtask_core::operator::{Chain, Map, Operator, TaskOutput};
use streamtask_core::task::TaskConfig;
use streamtask_runtime::AsyncWaitOperator;
use streamtask_runtime::channel::InputGate;
use streamtask_runtime::{ChainBody, TaskHandle, TriggerMode};

use self::emitter::Emitter;
use super::runtime::{self, process_input};
use crate::lock::Fairness;

/// The async operator of a legacy [`AsyncWaitStreamTask`]: an async function, its
/// configuration and its name. It is deliberately not an
/// [`Operator`](streamtask_core::operator::Operator): in this model it can only head a task (see the
/// [`AsyncWaitStreamTask`]'s documentation, FLINK-13063).
///
/// # Examples
///
/// See [`AsyncWaitStreamTask`].
pub struct AsyncHead<F: AsyncFunction> {
    operator: AsyncWaitOperator<F>,
}

impl<F> AsyncHead<F>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
{
    /// An async operator named `name` running `function` as `config` says.
    ///
    /// # Errors
    ///
    /// [`AsyncConfigError`] for a capacity of 0, a zero timeout, retries without a timeout, or
    /// key-ordered mode (which needs a key: use [`keyed`](Self::keyed)).
    pub fn new(
        name: impl Into<String>,
        function: F,
        config: AsyncConfig<F::Out>,
    ) -> Result<Self, AsyncConfigError> {
        Ok(AsyncHead {
            operator: AsyncWaitOperator::new(name, function, config)?,
        })
    }

    /// An async operator whose records have `key` (see [`AsyncWaitOperator::keyed`]):
    /// key-ordered mode needs one.
    ///
    /// # Errors
    ///
    /// [`AsyncConfigError`] for a capacity of 0, a zero timeout, or retries without a timeout.
    pub fn keyed(
        name: impl Into<String>,
        function: F,
        config: AsyncConfig<F::Out>,
        key: AsyncKey<F::In>,
    ) -> Result<Self, AsyncConfigError> {
        Ok(AsyncHead {
            operator: AsyncWaitOperator::keyed(name, function, config, key)?,
        })
    }

    /// Whether a completion made during the head's own call (a function that answers at once,
    /// on the task thread) is applied when the call returns, under the lock the call holds,
    /// instead of going to the emitter thread. On by default; see
    /// [`AsyncWaitOperator::with_inline_completions`]. Completions made on other threads always
    /// go to the emitter.
    pub fn with_inline_completions(mut self, inline: bool) -> Self {
        self.operator = self.operator.with_inline_completions(inline);
        self
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        self.operator.name()
    }
}

impl<F: AsyncFunction> fmt::Debug for AsyncHead<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncHead")
            .field("operator", &self.operator)
            .finish()
    }
}

/// The chain behind an async head that has none: results go straight to the task's output.
pub type NoChain<T> = Map<T, T, fn(T) -> T>;

/// The operators meant to follow an async head cannot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsyncChainError {
    /// An operator behind the head waits for its own events (another async operator).
    #[error(
        "the chain behind the async head ({chain}) has an operator that waits for its own \
         events; in the legacy model an async operator always heads its own task \
         (FLINK-13063): start a new task for it"
    )]
    WaitsForOwnEvents {
        /// The names of the chain's operators.
        chain: String,
    },
}

/// A legacy input task whose chain starts with an [`AsyncHead`]; its threads, waits and end
/// of input are described below.
///
/// The output timestamp is the input's; results leave in input order
/// ([`OutputMode::Ordered`](streamtask_core::async_io::OutputMode::Ordered)), as they
/// complete, never across a watermark (`Unordered`), or in input order per key
/// (`KeyOrdered`, a head built with [`AsyncHead::keyed`]).
///
/// # Examples
///
/// ```
/// use streamtask_core::async_io::{AsyncConfig, OutputMode};
/// use streamtask_runtime::channel::{InputGate, bounded};
/// use streamtask_core::function::{AsyncFunction, ResultFuture};
/// use streamtask_core::operator::{Emitted, Map};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{StreamElement, StreamRecord};
/// use streamtask_legacy::{AsyncHead, AsyncWaitStreamTask};
///
/// /// Completes with the input squared (a real client would complete from its I/O thread).
/// struct Square;
/// impl AsyncFunction for Square {
///     type In = u64;
///     type Out = u64;
///     fn invoke(&mut self, input: &u64, result: ResultFuture<u64>) {
///         result.complete(vec![input * input]);
///     }
/// }
///
/// let head = AsyncHead::new("square", Square, AsyncConfig::new(OutputMode::Ordered, 2)).unwrap();
/// let (tx, rx) = bounded(8).unwrap();
/// let task = AsyncWaitStreamTask::chained(
///     TaskConfig::new("square"),
///     InputGate::new(vec![rx]).unwrap(),
///     head,
///     Map::new("plus-one", |x: u64| x + 1),
///     Vec::<Emitted<u64>>::new(),
/// )
/// .unwrap()
/// .spawn();
/// for x in 1..=4 {
///     tx.send(StreamElement::Record(StreamRecord::new(x))).unwrap();
/// }
/// tx.send(StreamElement::EndOfInput).unwrap();
/// let metrics = task.metrics().clone();
/// assert!(task.join().is_finished());
/// assert_eq!(metrics.records_out.get(), 4);
/// ```
///
#[doc = include_str!("async_wait.md")]
pub struct AsyncWaitStreamTask<F: AsyncFunction, C, O> {
    config: TaskConfig,
    gate: InputGate<F::In>,
    head: AsyncHead<F>,
    chain: C,
    output: O,
    fairness: Fairness,
}

impl<F, O> AsyncWaitStreamTask<F, NoChain<F::Out>, O>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
    O: TaskOutput<F::Out> + 'static,
{
    /// A task reading `gate` into `head`, whose results go straight to `output`;
    /// [`Fairness::Eventual`], the config's cancel grace.
    pub fn new(config: TaskConfig, gate: InputGate<F::In>, head: AsyncHead<F>, output: O) -> Self {
        AsyncWaitStreamTask {
            config,
            gate,
            head,
            chain: Map::new(
                "async-results",
                std::convert::identity as fn(F::Out) -> F::Out,
            ),
            output,
            fairness: Fairness::default(),
        }
    }
}

impl<F, C, O> AsyncWaitStreamTask<F, C, O>
where
    F: AsyncFunction,
    F::In: Serialize + DeserializeOwned,
    C: Operator<In = F::Out> + 'static,
    O: TaskOutput<C::Out> + 'static,
{
    /// A task reading `gate` into `head`, whose results go through `chain` into `output`;
    /// [`Fairness::Eventual`], the config's cancel grace.
    ///
    /// # Errors
    ///
    /// [`AsyncChainError::WaitsForOwnEvents`] when an operator of `chain` waits for its own
    /// events (it must head a task of its own).
    pub fn chained(
        config: TaskConfig,
        gate: InputGate<F::In>,
        head: AsyncHead<F>,
        chain: C,
        output: O,
    ) -> Result<Self, AsyncChainError> {
        if chain.waits_for_own_events() {
            return Err(AsyncChainError::WaitsForOwnEvents {
                chain: chain.chain_names().join(" -> "),
            });
        }
        Ok(AsyncWaitStreamTask {
            config,
            gate,
            head,
            chain,
            output,
            fairness: Fairness::default(),
        })
    }

    /// The checkpoint lock's fairness.
    pub fn with_fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// Starts the task's threads (task, timer, async calls, and, once the chain is open, the
    /// emitter).
    ///
    /// # Panics
    ///
    /// If the OS refuses to start a thread.
    pub fn spawn(self) -> TaskHandle {
        let AsyncWaitStreamTask {
            config,
            gate,
            head,
            chain,
            output,
            fairness,
        } = self;
        let gate = gate.with_metrics(StdArc::clone(&config.metrics));
        let (sink, inbox) = emitter::channel();
        let chain = Chain::new(head.operator.with_completion_sink(sink), chain);
        runtime::spawn(
            config,
            TriggerMode::Inputs,
            fairness,
            false,
            move |env, _| ChainBody::new(chain, output, env),
            move |parts| {
                // The emitter runs from the open chain to the end of the run (it is stopped and
                // joined when the guard drops, on every path), so restored elements beyond the
                // capacity are admitted as it frees room (FLINK-7949).
                let emitter = Emitter::start(&parts.task, &parts.lock, inbox);
                // The task thread applies completions itself before it waits (`emitter.rs`).
                parts.set_before_wait(emitter.task_thread_work());
                process_input(parts, gate)
            },
        )
    }
}

impl<F: AsyncFunction, C, O> fmt::Debug for AsyncWaitStreamTask<F, C, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncWaitStreamTask")
            .field("name", &self.config.name)
            .field("head", &self.head)
            .field("fairness", &self.fairness)
            .finish_non_exhaustive()
    }
}

type Body<F, C, O> = ChainBody<Chain<AsyncWaitOperator<F>, C>, O>;

#[cfg(all(test, not(loom)))]
mod tests {
    //! What differs in the lock model: the task thread waits for room on the lock's condition
    //! before it takes the next element, so a barrier right behind a full queue is snapshotted
    //! at once, with exactly the calls in flight (FLINK-39835's soft backpressure), and the
    //! element behind it is taken as a completion frees a slot. The rest is the cross-model
    //! suite's (`tests/async_io.rs`).

    use streamtask_core::async_io::OutputMode;
    use streamtask_core::operator::{Emitted, OperatorExt};
    use streamtask_core::state::decode;
    use streamtask_core::task::{CheckpointResponder, TaskReport};
    use streamtask_core::testing::ManualAsyncFunction;
    use streamtask_core::{
        CheckpointBarrier, OperatorError, StreamElement, StreamRecord, state::TaskSnapshot,
    };
    use streamtask_runtime::QueuedInput;
    use streamtask_runtime::channel::bounded;

    use super::*;

    fn record(value: u32) -> StreamRecord<u32> {
        StreamRecord::with_timestamp(value, i64::from(value))
    }

    #[test]
    fn a_barrier_behind_a_full_queue_is_snapshotted_with_the_calls_in_flight_before_any_completion()
    {
        let function = ManualAsyncFunction::<u32, u32>::new();
        let calls = function.calls();
        let head =
            AsyncHead::new("async", function, AsyncConfig::new(OutputMode::Ordered, 2)).unwrap();
        let (reports, acks) = crossbeam::channel::unbounded();
        let (input, rx) = bounded(8).unwrap();
        let task = AsyncWaitStreamTask::new(
            TaskConfig::new("async").with_responder(CheckpointResponder::new("async", reports)),
            InputGate::new(vec![rx]).unwrap(),
            head,
            Vec::<Emitted<u32>>::new(),
        )
        .spawn();
        // Records 1 and 2 fill the queue; record 3, behind the barrier, waits for room.
        for x in 1..=2 {
            input.send(StreamElement::Record(record(x))).unwrap();
        }
        let barrier = CheckpointBarrier::new(1, 0);
        input.send(StreamElement::Barrier(barrier)).unwrap();
        input.send(StreamElement::Record(record(3))).unwrap();
        let snapshot = match acks.recv().unwrap() {
            TaskReport::Acknowledged { snapshot, .. } => snapshot,
            TaskReport::Declined { reason, .. } => panic!("declined: {reason}"),
        };
        assert_eq!(
            calls.invocation_count(),
            2,
            "nothing completed, nothing admitted"
        );
        let state: Vec<QueuedInput<u32>> =
            decode::<streamtask_core::keygroup::ListState<QueuedInput<u32>>>(
                snapshot
                    .get(&TaskSnapshot::operator_key(0))
                    .expect("the head's state"),
            )
            .unwrap()
            .items;
        let inputs = |xs: &[u32]| -> Vec<QueuedInput<u32>> {
            xs.iter().map(|&x| QueuedInput::Record(record(x))).collect()
        };
        assert_eq!(state, inputs(&[1, 2]), "exactly the calls in flight");
        // A completion frees a slot; the waiting element is taken.
        assert!(calls.complete(&1, vec![10]));
        assert_eq!(calls.wait_for_invocations(3)[2].input, 3);
        task.cancel();
        assert!(matches!(
            task.join(),
            streamtask_core::task::TaskOutcome::Cancelled
        ));

        // The snapshot restores: its calls run again, once each.
        let function = ManualAsyncFunction::<u32, u32>::new();
        let calls = function.calls();
        let head =
            AsyncHead::new("async", function, AsyncConfig::new(OutputMode::Ordered, 2)).unwrap();
        let (input, rx) = bounded(8).unwrap();
        let restored = AsyncWaitStreamTask::new(
            TaskConfig::new("restored").with_restore(Some(snapshot)),
            InputGate::new(vec![rx]).unwrap(),
            head,
            Vec::<Emitted<u32>>::new(),
        )
        .spawn();
        for x in 1..=2 {
            calls.wait_for_invocations(x as usize);
            assert!(calls.complete(&x, vec![x * 10]));
        }
        input.send(StreamElement::EndOfInput).unwrap();
        let metrics = StdArc::clone(restored.metrics());
        assert!(restored.join().is_finished());
        assert_eq!(metrics.records_out.get(), 2);
        assert_eq!(calls.invocation_count(), 2);
    }

    #[test]
    fn operators_behind_the_head_see_every_result_before_their_end_input() {
        // FLINK-13491: the drain completes before the chain's `end_input`.
        struct Log(std::sync::Arc<std::sync::Mutex<Vec<String>>>);
        impl Operator for Log {
            type In = u32;
            type Out = u32;
            fn name(&self) -> &str {
                "log"
            }
            fn process_element(
                &mut self,
                record: StreamRecord<u32>,
                ctx: &mut streamtask_core::operator::Context<'_, u32>,
            ) -> Result<(), OperatorError> {
                self.0.lock().unwrap().push(record.value.to_string());
                ctx.collect(record)
            }
            fn end_input(
                &mut self,
                _ctx: &mut streamtask_core::operator::Context<'_, u32>,
            ) -> Result<(), OperatorError> {
                self.0.lock().unwrap().push("end_input".to_string());
                Ok(())
            }
        }
        let log = std::sync::Arc::default();
        let function = ManualAsyncFunction::<u32, u32>::new();
        let calls = function.calls();
        let head =
            AsyncHead::new("async", function, AsyncConfig::new(OutputMode::Ordered, 4)).unwrap();
        let (input, rx) = bounded(8).unwrap();
        let task = AsyncWaitStreamTask::chained(
            TaskConfig::new("async"),
            InputGate::new(vec![rx]).unwrap(),
            head,
            Log(std::sync::Arc::clone(&log)),
            Vec::<Emitted<u32>>::new(),
        )
        .unwrap()
        .spawn();
        input.send(StreamElement::Record(record(1))).unwrap();
        input.send(StreamElement::Record(record(2))).unwrap();
        input.send(StreamElement::EndOfInput).unwrap();
        calls.wait_for_invocations(2);
        assert!(calls.complete(&2, vec![2]));
        assert!(calls.complete(&1, vec![1]));
        assert!(task.join().is_finished());
        assert_eq!(*log.lock().unwrap(), vec!["1", "2", "end_input"]);
    }

    #[test]
    fn an_operator_waiting_for_its_own_events_cannot_follow_the_head() {
        // A chain's `waits_for_own_events` is what the async operator of another model reports.
        struct Yielding;
        impl Operator for Yielding {
            type In = u32;
            type Out = u32;
            fn name(&self) -> &str {
                "other-async"
            }
            fn process_element(
                &mut self,
                record: StreamRecord<u32>,
                ctx: &mut streamtask_core::operator::Context<'_, u32>,
            ) -> Result<(), streamtask_core::OperatorError> {
                ctx.collect(record)
            }
            fn waits_for_own_events(&self) -> bool {
                true
            }
        }
        let head = AsyncHead::new(
            "async",
            ManualAsyncFunction::<u32, u32>::new(),
            AsyncConfig::new(OutputMode::Ordered, 2),
        )
        .unwrap();
        let (_input, rx) = bounded::<StreamElement<u32>>(8).unwrap();
        let refused = AsyncWaitStreamTask::chained(
            TaskConfig::new("async"),
            InputGate::new(vec![rx]).unwrap(),
            head,
            Map::new("parse", |x: u32| x).then(Yielding),
            Vec::<Emitted<u32>>::new(),
        );
        let error = refused.expect_err("refused");
        assert_eq!(
            error,
            AsyncChainError::WaitsForOwnEvents {
                chain: "parse -> other-async".to_string()
            }
        );
        assert!(error.to_string().contains("start a new task"));
    }
}
