//! `SourceStreamTask`: the source runs on the task thread, the chain behind it, every emit
//! under the checkpoint lock.

use std::fmt;
use std::sync::Arc as StdArc;
use streamtask_core::live::Activity;

use streamtask_core::operator::{Operator, TaskOutput};
use streamtask_core::task::TaskConfig;
use streamtask_core::time::TimerService;
use streamtask_runtime::{ChainBody, TaskHandle, TriggerMode};

use super::runtime;
use crate::lock::Fairness;
use crate::source::{
    Emission, SourceCell, SourceContextConfig, SourceEnd, SourceFunction, run_source,
};

/// A task whose input is a legacy [`SourceFunction`]: the source runs on the task thread and
/// each of its emits pushes the record through the chain behind it, under the checkpoint lock
/// (Flink 1.8's `SourceStreamTask`). Checkpoints are triggered from outside
/// ([`TaskHandle::trigger_checkpoint`]) and run on the task's async-calls thread, competing for
/// the lock with the source.
///
/// A builder: [`new`](Self::new) takes what is required, `with_*` the rest, [`spawn`](Self::spawn)
/// starts the task.
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use streamtask_core::operator::{Emitted, Map};
/// use streamtask_core::task::TaskConfig;
/// use streamtask_core::{OperatorError, StreamRecord, Watermark};
/// use streamtask_legacy::{SourceContext, SourceFunction, SourceStreamTask};
///
/// struct Numbers;
///
/// impl SourceFunction for Numbers {
///     type Out = u32;
///     type State = ();
///     fn run(&mut self, ctx: &mut SourceContext<'_, u32, ()>) -> Result<(), OperatorError> {
///         for n in 1..=3 {
///             ctx.collect(n)?;
///         }
///         Ok(())
///     }
/// }
///
/// let task = SourceStreamTask::new(
///     TaskConfig::new("numbers"),
///     Numbers,
///     Map::new("times ten", |n: u32| n * 10),
///     Vec::<Emitted<u32>>::new(),
/// )
/// .spawn();
/// assert!(task.join().is_finished());
/// ```
///
/// (The output above is dropped with the task; tests use a shared collecting output.)
pub struct SourceStreamTask<F, C, O> {
    config: TaskConfig,
    source: F,
    chain: C,
    output: O,
    context: SourceContextConfig,
    fairness: Fairness,
    bounded_handover: bool,
}

impl<F, C, O> SourceStreamTask<F, C, O>
where
    F: SourceFunction,
    C: Operator<In = F::Out> + 'static,
    O: TaskOutput<C::Out> + 'static,
{
    /// A task running `source` with `chain` behind it, emitting into `output`; processing-time
    /// context, [`Fairness::Eventual`], the config's cancel grace.
    pub fn new(config: TaskConfig, source: F, chain: C, output: O) -> Self {
        SourceStreamTask {
            config,
            source,
            chain,
            output,
            context: SourceContextConfig::default(),
            fairness: Fairness::default(),
            bounded_handover: false,
        }
    }

    /// The source context's flavour, watermark interval and idle timeout.
    pub fn with_context(mut self, context: SourceContextConfig) -> Self {
        self.context = context;
        self
    }

    /// The checkpoint lock's fairness.
    pub fn with_fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// Whether a checkpoint trigger asks the source to let go of the lock at its next section
    /// (off unless set, as in Flink 1.9): with it on, a trigger waits for at most the source's
    /// section in flight, whatever the fairness (see
    /// [`CheckpointLock::request_handover`](crate::CheckpointLock::request_handover)). The
    /// bridge's `LegacySourceStreamTask` always hands over this way, for every mail.
    pub fn with_bounded_handover(mut self, on: bool) -> Self {
        self.bounded_handover = on;
        self
    }

    /// What was built, taken apart: for another model's runtime that runs the same legacy
    /// source its own way (the bridge's `LegacySourceStreamTask` builds on this builder).
    pub fn into_parts(self) -> SourceTaskParts<F, C, O> {
        let SourceStreamTask {
            config,
            source,
            chain,
            output,
            context,
            fairness,
            bounded_handover: _,
        } = self;
        SourceTaskParts {
            config,
            source,
            chain,
            output,
            context,
            fairness,
        }
    }

    /// Starts the task's threads.
    pub fn spawn(self) -> TaskHandle {
        let bounded_handover = self.bounded_handover;
        let SourceTaskParts {
            config,
            mut source,
            chain,
            output,
            context,
            fairness,
        } = self.into_parts();
        let source_name = source.name().to_string();
        runtime::spawn(
            config,
            TriggerMode::Source,
            fairness,
            bounded_handover,
            move |env, services| {
                let timers: StdArc<dyn TimerService> = StdArc::clone(services.timers());
                let body = ChainBody::new(chain, output, env);
                SourceCell::new(F::State::default(), Emission::new(context, timers), body)
                    .with_name(source_name)
            },
            move |parts| {
                parts.task.metrics.live.enter(Activity::Source);
                match run_source(&mut source, &parts.lock, &parts.cancel)? {
                    SourceEnd::Finished => parts.finish(),
                    SourceEnd::Cancelled => Ok(()),
                }
            },
        )
    }
}

/// A [`SourceStreamTask`] builder's parts ([`SourceStreamTask::into_parts`]).
#[derive(Debug)]
pub struct SourceTaskParts<F, C, O> {
    /// The task's config.
    pub config: TaskConfig,
    /// The legacy source.
    pub source: F,
    /// The chain behind it.
    pub chain: C,
    /// The task's output.
    pub output: O,
    /// The source context's flavour.
    pub context: SourceContextConfig,
    /// The checkpoint lock's fairness.
    pub fairness: Fairness,
}

impl<F, C, O> fmt::Debug for SourceStreamTask<F, C, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceStreamTask")
            .field("name", &self.config.name)
            .field("context", &self.context)
            .field("fairness", &self.fairness)
            .finish_non_exhaustive()
    }
}
