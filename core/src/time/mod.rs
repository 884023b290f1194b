//! Processing time: the [`Clock`] (system or manual) and timers as an operator registers them
//! ([`TimerService`]). The timer thread the models build their services on is the runtime's
//! (`streamtask_runtime::TimerScheduler`).
//!
//! Processing time is milliseconds as an `i64`. A timer registered for time `t` fires once the
//! clock has passed `t` (at `t + 1` or later), which matches watermark semantics: a timer at `t`
//! sees everything up to and including `t`. A timer registered for a time already passed fires at
//! once; several such timers fire in registration order.
//!
//! | part | what |
//! |---|---|
//! | [`Clock`], [`ManualClock`], [`ClockSubscription`] | where processing time comes from |
//! | [`Timer`], [`TimerHandle`], [`Period`], [`TimerError`] | a timer, its handle, how a periodic one repeats |
//! | [`TimerService`] | what an operator registers timers with; each model implements it |
//! | [`InterruptibleTimers`] | whether a task fires many due event-time timers in chunks, mails running in between |
//!
//! # Periodic timers
//!
//! Flink's `scheduleAtFixedRate` / `scheduleWithFixedDelay`, one rule for every model:
//! [`TimerService::register_periodic`] takes the first [`Timer`] and a [`Period`]; each run hands
//! the operator a `Timer` with the same operator and tag and the run's scheduled `timestamp`.
//! The handle stays the same for every run, so [`TimerService::cancel_timer`] with it ends the
//! series whether or not a run is in flight.
//!
//! | period | the next run is due | after a stall (the callback or the task was busy) |
//! |---|---|---|
//! | [`Period::FixedRate`]`(p)` | `p` after the previous run was *due* | runs that fell due meanwhile fire back to back, in order (catch up) |
//! | [`Period::FixedDelay`]`(d)` | `d` after the previous run *completed* | one run, then `d` after it |
//!
//! "Completed" is the model's to say: the legacy model's callback runs on the timer thread, so
//! it completes when the callback returns; the mailbox model's run is a mail, so it completes
//! when the mail ran; a run whose mail never runs (the task ended) ends the series. A fixed-rate
//! series never waits for a completion (as Flink's mailbox model, each due run is handed over at
//! once).
//!
//! A failing run stops every later run of every timer of the task; the task fails. This is
//! stricter than Flink 1.9, whose repeated trigger task kept running until the failed task was
//! cancelled.

mod clock;
mod interruptible;
mod timer;

pub use self::clock::{Clock, ClockSubscription, ManualClock};
pub use self::interruptible::InterruptibleTimers;
pub use self::timer::{Period, Timer, TimerError, TimerHandle, TimerService};
