//! [`TimerFiring`]: how an operator that fires many due event-time timers at one watermark
//! lets the task run mails in between, and [`Uninterruptible`], the service of a task that
//! cannot. The protocol is on [`TimerFiring`].

use super::OperatorEvent;
use std::num::NonZeroUsize;

/// What a task offers its operators to spread a long firing of event-time timers over several
/// mails.
///
/// # The protocol
///
/// A keyed operator fires the timers a watermark made due in time order, in chunks of
/// [`chunk`](TimerFiring::chunk) timers. After each chunk it asks
/// [`should_interrupt`](TimerFiring::should_interrupt); if a mail waits, it:
///
/// 1. forwards an *intermediate* watermark, one below the next due timer (every timer before
///    it fired, so downstream may move that far: its output watermark never freezes while a
///    long firing is interrupted again and again, FLINK-40101);
/// 2. [`defer`](TimerFiring::defer)s a continuation event to itself: a deferrable mail of the
///    lowest priority, which the task's loop runs after the mails waiting now and which no
///    yield runs (FLINK-35528);
/// 3. returns, and reports `accepts_input() == false` until the continuation finished the
///    firing and forwarded the watermark: the task takes no record meanwhile (a record could
///    change the state a due timer reads), and end of input waits for it, so no deferred
///    timer is left behind a finished chain (FLINK-39481).
///
/// A continuation that finds a mail waiting after its chunk defers the rest again. A
/// watermark that reaches the operator while a firing is deferred only raises the watermark
/// the continuation fires up to. A checkpoint taken in between holds the timers not fired yet;
/// the restored operator fires those due at its restored watermark when it opens, before any
/// record.
///
/// Where the task cannot take mails any more (it is ending), [`defer`](TimerFiring::defer)
/// hands the event back and the operator fires the rest at once.
pub trait TimerFiring: Send + Sync {
    /// Timers fired before the firing first asks [`should_interrupt`](Self::should_interrupt),
    /// and between two asks; `None`: never interrupt.
    fn chunk(&self) -> Option<NonZeroUsize>;

    /// Whether a mail waits that the firing should let run; called on the task thread.
    fn should_interrupt(&self) -> bool;

    /// Delivers `continuation` to the operator at chain index `operator` (its `on_event`) in a
    /// deferrable mail of the lowest priority.
    ///
    /// # Errors
    ///
    /// Gives `continuation` back when the task takes no mails (it is ending, or cannot
    /// interrupt at all); the caller then goes on at once.
    fn defer(&self, operator: usize, continuation: OperatorEvent) -> Result<(), OperatorEvent>;
}

/// The firing service of a task that fires every due timer in one go: the legacy model's (its
/// timer firing holds the checkpoint lock throughout), a legacy source's chain in the bridge,
/// test harnesses, and any task with interruptible timers disabled.
#[derive(Debug, Clone, Copy, Default)]
pub struct Uninterruptible;

impl TimerFiring for Uninterruptible {
    fn chunk(&self) -> Option<NonZeroUsize> {
        None
    }

    fn should_interrupt(&self) -> bool {
        false
    }

    fn defer(&self, _operator: usize, continuation: OperatorEvent) -> Result<(), OperatorEvent> {
        Err(continuation)
    }
}
