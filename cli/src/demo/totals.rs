//! The demo's keyed running totals: per customer, a running total after every order and a total
//! per closed event-time window, plus a processing-time housekeeping timer whose firing shows
//! up in the timer-lateness metric without changing the output.

use serde::{Deserialize, Serialize};
use streamtask_core::OperatorError;
use streamtask_core::function::{KeyedProcessFunction, TimeDomain};
use streamtask_core::operator::KeyedContext;

use std::sync::Arc;

use super::data::{Order, TotalEvent};
use streamtask::fault::{FaultKind, FaultPlan};

/// Processing-time delay of the housekeeping timer after a customer's order.
pub const HOUSEKEEPING_DELAY_MS: i64 = 20;

/// Per-customer state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomerTotals {
    /// All orders so far, in cents.
    pub total_cents: i64,
    /// Open windows: (window end, total in cents).
    pub windows: Vec<(i64, i64)>,
    /// Whether a housekeeping timer is pending.
    pub housekeeping_pending: bool,
    /// Housekeeping timers fired (not part of the output).
    pub housekeeping_runs: u64,
}

/// The keyed function.
#[derive(Debug, Clone, Default)]
pub struct RunningTotals {
    faults: Arc<FaultPlan>,
}

impl RunningTotals {
    /// The function, failing where `faults` says.
    pub fn new(faults: Arc<FaultPlan>) -> Self {
        RunningTotals { faults }
    }
}

type Ctx<'a, 'b> = KeyedContext<'a, 'b, u32, CustomerTotals, TotalEvent>;

impl KeyedProcessFunction for RunningTotals {
    type Key = u32;
    type In = Order;
    type Out = TotalEvent;
    type State = CustomerTotals;

    fn process_element(
        &mut self,
        order: Order,
        ctx: &mut Ctx<'_, '_>,
    ) -> Result<(), OperatorError> {
        self.faults.check(FaultKind::Operator);
        let window_end = order.window_end();
        let state = ctx.state();
        state.total_cents += order.amount_cents;
        // The window's timer is registered once, when the window opens: a window in the state
        // has one pending (its firing removes the window), so registering it again per order
        // would be a timer-set lookup per record for nothing.
        let opened = match state.windows.iter_mut().find(|(end, _)| *end == window_end) {
            Some((_, total)) => {
                *total += order.amount_cents;
                false
            }
            None => {
                state.windows.push((window_end, order.amount_cents));
                true
            }
        };
        let total_cents = state.total_cents;
        let start_housekeeping = !state.housekeeping_pending;
        state.housekeeping_pending = true;
        if opened {
            ctx.register_event_timer(window_end);
        }
        if start_housekeeping {
            // The clock is read only when the timer is set, not for every order.
            let housekeeping_at = ctx.processing_time() + HOUSEKEEPING_DELAY_MS;
            ctx.register_processing_timer(housekeeping_at);
        }
        ctx.collect(TotalEvent::Running {
            order: order.id,
            customer: order.customer,
            total_cents,
        })
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut Ctx<'_, '_>,
    ) -> Result<(), OperatorError> {
        let customer = *ctx.key();
        match domain {
            TimeDomain::EventTime => {
                let state = ctx.state();
                let Some(i) = state.windows.iter().position(|(end, _)| *end == timestamp) else {
                    return Ok(());
                };
                let (window_end, total_cents) = state.windows.swap_remove(i);
                ctx.collect(TotalEvent::Window {
                    customer,
                    window_end,
                    total_cents,
                })
            }
            TimeDomain::ProcessingTime => {
                self.faults.check(FaultKind::Timer);
                let state = ctx.state();
                state.housekeeping_pending = false;
                state.housekeeping_runs += 1;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::data::{DemoData, expected_output};
    use streamtask_core::Watermark;
    use streamtask_core::operator::KeyedProcessOperator;
    use streamtask_core::testing::OperatorHarness;

    #[test]
    fn totals_over_the_harness_match_the_reference() {
        let data = DemoData {
            orders: 2_000,
            customers: 13,
            seed: 5,
        };
        let op =
            KeyedProcessOperator::new("totals", |o: &Order| o.customer, RunningTotals::default());
        let mut h = OperatorHarness::new(op);
        h.open().unwrap();
        let mut lines = Vec::new();
        let mut policy = crate::demo::data::WatermarkPolicy::default();
        for order in data.orders() {
            h.process_with_timestamp(order, order.timestamp).unwrap();
            if let Some(w) = policy.after(&order) {
                h.process_watermark(Watermark(w)).unwrap();
            }
            h.advance_processing_time(1).unwrap();
            lines.extend(h.output_values().iter().map(ToString::to_string));
        }
        h.process_watermark(Watermark::MAX).unwrap();
        lines.extend(h.output_values().iter().map(ToString::to_string));
        lines.sort_unstable();
        assert_eq!(lines, expected_output(&data));
    }
}
