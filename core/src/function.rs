//! User functions: the logic users write once and every model runs.
//!
//! Simple transformations are closures ([`Map`](crate::operator::Map),
//! [`Filter`](crate::operator::Filter), [`FlatMap`](crate::operator::FlatMap)); logic with
//! per-key state and timers implements [`KeyedProcessFunction`].

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::OperatorError;
use crate::operator::KeyedContext;

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Fires when processing time passes the timestamp.
    ProcessingTime,
    /// Fires when a watermark reaches the timestamp.
    EventTime,
}

/// User logic of a keyed process operator.
///
/// # Examples
///
/// A running total per key that reports each key once its event-time window of 10 closes:
///
/// ```
/// use streamtask_core::OperatorError;
/// use streamtask_core::function::{KeyedProcessFunction, TimeDomain};
/// use streamtask_core::operator::{KeyedContext, KeyedProcessOperator};
/// use streamtask_core::testing::OperatorHarness;
/// use streamtask_core::Watermark;
///
/// struct Totals;
///
/// impl KeyedProcessFunction for Totals {
///     type Key = String;
///     type In = (String, u64);
///     type Out = (String, u64);
///     type State = u64;
///
///     fn process_element(
///         &mut self,
///         value: (String, u64),
///         ctx: &mut KeyedContext<'_, '_, String, u64, (String, u64)>,
///     ) -> Result<(), OperatorError> {
///         *ctx.state() += value.1;
///         let end = ctx.timestamp().unwrap_or(0) / 10 * 10 + 9;
///         ctx.register_event_timer(end);
///         Ok(())
///     }
///
///     fn on_timer(
///         &mut self,
///         _timestamp: i64,
///         _domain: TimeDomain,
///         ctx: &mut KeyedContext<'_, '_, String, u64, (String, u64)>,
///     ) -> Result<(), OperatorError> {
///         let total = *ctx.state();
///         let key = ctx.key().clone();
///         ctx.clear_state();
///         ctx.collect((key, total))
///     }
/// }
///
/// let op = KeyedProcessOperator::new("totals", |v: &(String, u64)| v.0.clone(), Totals);
/// let mut h = OperatorHarness::new(op);
/// h.open().unwrap();
/// h.process_with_timestamp(("a".to_string(), 2), 1).unwrap();
/// h.process_with_timestamp(("a".to_string(), 3), 5).unwrap();
/// h.process_watermark(Watermark(9)).unwrap();
/// assert_eq!(h.output_values(), vec![("a".to_string(), 5)]);
/// ```
pub trait KeyedProcessFunction: Send {
    /// The key records are grouped by.
    type Key: Ord + Clone + Serialize + DeserializeOwned + Send;
    /// What it consumes.
    type In;
    /// What it emits.
    type Out;
    /// The state kept per key; a new key starts with `State::default()`.
    type State: Default + Serialize + DeserializeOwned + Send;

    /// Processes one record of the context's key.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_element(
        &mut self,
        value: Self::In,
        ctx: &mut KeyedContext<'_, '_, Self::Key, Self::State, Self::Out>,
    ) -> Result<(), OperatorError>;

    /// A timer of the context's key fired at `timestamp`.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut KeyedContext<'_, '_, Self::Key, Self::State, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = (timestamp, domain, ctx);
        Ok(())
    }
}
