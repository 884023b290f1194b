//! The demo job's data: orders generated into a file, the watermark policy every version of the
//! orders source follows, and the reference output the committed sink output must equal.
//!
//! Everything here is deterministic: the same [`DemoData`] gives the same file, byte for byte,
//! and the same expected output, on every run and machine. The generator is SplitMix64, fixed
//! here rather than taken from a crate whose stream may change between versions, because the
//! demo's digests are compared across runs.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use streamtask::fault::SplitMix64;

/// Removes a temporary file when dropped, unless disarmed (it was renamed into place).
struct RemoveOnDrop(Option<std::path::PathBuf>);

impl RemoveOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = fs::remove_file(path);
        }
    }
}

/// Event time of the first order (2023-11-14T22:13:20Z), in milliseconds.
pub const EPOCH_MS: i64 = 1_700_000_000_000;
/// Orders are at most this late relative to the latest one before them.
pub const MAX_OUT_OF_ORDER_MS: i64 = 400;
/// Event-time spacing of consecutive orders.
pub const ORDER_SPACING_MS: i64 = 10;
/// Length of the tumbling windows the totals close.
pub const WINDOW_MS: i64 = 1_000;
/// A source emits a watermark after this many orders.
pub const WATERMARK_EVERY: u64 = 64;

/// One order as the demo file stores it (one CSV line: `id,customer,amount_cents,timestamp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Order {
    /// Position in the file, from 0.
    pub id: u64,
    /// Customer id, from 1.
    pub customer: u32,
    /// Amount in cents.
    pub amount_cents: i64,
    /// Event time in milliseconds.
    pub timestamp: i64,
}

/// A line of the orders file is not an order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line:?} is not an order (want `id,customer,amount_cents,timestamp`)")]
pub struct ParseOrderError {
    /// The offending line.
    pub line: String,
}

impl Order {
    /// The CSV line (without newline).
    pub fn to_line(&self) -> String {
        format!(
            "{},{},{},{}",
            self.id, self.customer, self.amount_cents, self.timestamp
        )
    }

    /// Parses a CSV line.
    ///
    /// # Errors
    ///
    /// [`ParseOrderError`] if the line does not have four numeric fields.
    pub fn parse(line: &str) -> Result<Order, ParseOrderError> {
        let err = || ParseOrderError {
            line: line.to_string(),
        };
        let mut fields = line.trim_end().split(',');
        let mut next = || fields.next().ok_or_else(err);
        let order = Order {
            id: next()?.parse().map_err(|_| err())?,
            customer: next()?.parse().map_err(|_| err())?,
            amount_cents: next()?.parse().map_err(|_| err())?,
            timestamp: next()?.parse().map_err(|_| err())?,
        };
        if fields.next().is_some() {
            return Err(err());
        }
        Ok(order)
    }

    /// The end (inclusive) of the tumbling window this order falls in.
    pub fn window_end(&self) -> i64 {
        self.timestamp - self.timestamp.rem_euclid(WINDOW_MS) + WINDOW_MS - 1
    }
}

/// What data the demo generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemoData {
    /// Number of orders.
    pub orders: u64,
    /// Number of distinct customers.
    pub customers: u32,
    /// Seed of the generator.
    pub seed: u64,
}

impl Default for DemoData {
    fn default() -> Self {
        DemoData {
            orders: 200_000,
            customers: 500,
            seed: 42,
        }
    }
}

impl DemoData {
    /// The orders, in file order.
    pub fn orders(&self) -> impl Iterator<Item = Order> + '_ {
        let mut rng = SplitMix64::new(self.seed);
        (0..self.orders).map(move |id| {
            let customer = 1 + rng.below(u64::from(self.customers.max(1))) as u32;
            let amount_cents = 100 + rng.below(99_900) as i64;
            let jitter = rng.below(MAX_OUT_OF_ORDER_MS as u64) as i64;
            let timestamp = EPOCH_MS + id as i64 * ORDER_SPACING_MS - jitter;
            Order {
                id,
                customer,
                amount_cents,
                timestamp,
            }
        })
    }

    /// The identity of the orders file these parameters generate (the generator is
    /// deterministic: equal parameters, equal file), which the orders source declares so a
    /// savepoint is restored only into a job over the same file.
    pub fn identity(&self) -> String {
        format!(
            "orders.csv of {} orders, {} customers, seed {}",
            self.orders, self.customers, self.seed
        )
    }

    /// Writes the orders file at `path` atomically (temporary file, fsync, rename).
    ///
    /// # Errors
    ///
    /// Any I/O error.
    pub fn write_orders_file(&self, path: &Path) -> io::Result<()> {
        self.write_orders_file_with(path, &AtomicBool::new(false), || {})
    }

    /// Bytes per order line, estimated from the first orders (for a free-space check before
    /// writing).
    pub fn estimated_bytes_per_order(&self) -> u64 {
        const SAMPLE: u64 = 1_000;
        let sample = self.orders.clamp(1, SAMPLE);
        let bytes: u64 = DemoData {
            orders: sample,
            ..*self
        }
        .orders()
        .map(|o| o.to_line().len() as u64 + 1)
        .sum();
        // Ids grow longer than the sample's; round up generously.
        bytes.div_ceil(sample) + self.orders.to_string().len() as u64
    }

    /// Bytes of the committed output a run writes (the [`expected_output`] lines, each with
    /// its line break), estimated from the first orders: measured exactly on a sample, scaled
    /// to every order, plus the digits the order ids and running totals gain after the sample.
    pub fn estimated_output_bytes(&self) -> u64 {
        const SAMPLE: u64 = 10_000;
        let sample = self.orders.clamp(1, SAMPLE);
        let bytes: u64 = expected_output(&DemoData {
            orders: sample,
            ..*self
        })
        .iter()
        .map(|l| l.len() as u64 + 1)
        .sum();
        // Totals grow with the orders per customer, as ids grow with the orders.
        let longer = 2 * (self.orders.to_string().len() - sample.to_string().len()) as u64;
        (bytes.div_ceil(sample) + longer).saturating_mul(self.orders)
    }

    /// [`write_orders_file`](Self::write_orders_file), stopping with
    /// [`io::ErrorKind::Interrupted`] soon after `cancel` is set, and calling `midway` once
    /// when half the orders are written. The temporary file is removed on every error.
    ///
    /// # Errors
    ///
    /// Any I/O error, or `Interrupted` when cancelled.
    pub fn write_orders_file_with(
        &self,
        path: &Path,
        cancel: &AtomicBool,
        mut midway: impl FnMut(),
    ) -> io::Result<()> {
        let tmp = path.with_extension("tmp");
        let guard = RemoveOnDrop(Some(tmp.clone()));
        {
            let mut out = BufWriter::new(File::create(&tmp)?);
            let half = self.orders / 2;
            for order in self.orders() {
                if order.id % 4096 == 0 && cancel.load(Ordering::Relaxed) {
                    return Err(io::Error::new(
                        io::ErrorKind::Interrupted,
                        "data generation was interrupted",
                    ));
                }
                if order.id == half {
                    out.flush()?;
                    midway();
                }
                writeln!(out, "{}", order.to_line())?;
            }
            out.into_inner()?.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        guard.disarm();
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

/// The watermark rule every orders source follows: after every [`WATERMARK_EVERY`]-th order,
/// the latest timestamp seen minus the out-of-order bound. It depends only on the orders read,
/// so a source restored at an offset emits the same watermarks as one that never failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkPolicy {
    /// Orders read so far.
    pub count: u64,
    /// Largest timestamp seen so far.
    pub max_timestamp: i64,
}

impl WatermarkPolicy {
    /// Accounts for `order`; returns the watermark to emit after it, if any.
    pub fn after(&mut self, order: &Order) -> Option<i64> {
        self.count += 1;
        self.max_timestamp = self.max_timestamp.max(order.timestamp);
        self.count
            .is_multiple_of(WATERMARK_EVERY)
            .then(|| self.max_timestamp - MAX_OUT_OF_ORDER_MS - 1)
    }
}

/// A customer's row in the enrichment database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Customer {
    /// Id.
    pub id: u32,
    /// Display name.
    pub name: String,
    /// Loyalty tier.
    pub tier: &'static str,
}

impl Customer {
    /// The row the demo database holds for customer `id`.
    pub fn of(id: u32) -> Customer {
        const TIERS: [&str; 3] = ["bronze", "silver", "gold"];
        Customer {
            id,
            name: format!("customer-{id:05}"),
            tier: TIERS[(id % 3) as usize],
        }
    }
}

/// What the keyed totals emit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TotalEvent {
    /// The customer's running total after an order.
    Running {
        /// The order.
        order: u64,
        /// The customer.
        customer: u32,
        /// Total of all the customer's orders so far, in cents.
        total_cents: i64,
    },
    /// The total of a closed event-time window.
    Window {
        /// The customer.
        customer: u32,
        /// Window end (inclusive).
        window_end: i64,
        /// Total of the customer's orders in the window, in cents.
        total_cents: i64,
    },
}

impl TotalEvent {
    /// The customer the event is about.
    pub fn customer(&self) -> u32 {
        match self {
            TotalEvent::Running { customer, .. } | TotalEvent::Window { customer, .. } => *customer,
        }
    }

    /// The committed output line for this event enriched with `customer`.
    pub fn to_line(&self, customer: &Customer) -> String {
        match self {
            TotalEvent::Running {
                order, total_cents, ..
            } => format!(
                "running order={order} customer={} name={} tier={} total={total_cents}",
                customer.id, customer.name, customer.tier
            ),
            TotalEvent::Window {
                window_end,
                total_cents,
                ..
            } => format!(
                "window end={window_end} customer={} name={} tier={} total={total_cents}",
                customer.id, customer.name, customer.tier
            ),
        }
    }
}

impl fmt::Display for TotalEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_line(&Customer::of(self.customer())))
    }
}

/// The committed output a correct run must produce, sorted: computed directly from the data,
/// with no streaming runtime involved.
pub fn expected_output(data: &DemoData) -> Vec<String> {
    let mut totals: BTreeMap<u32, i64> = BTreeMap::new();
    let mut windows: BTreeMap<(u32, i64), i64> = BTreeMap::new();
    let mut lines = Vec::with_capacity(data.orders as usize * 2);
    for order in data.orders() {
        let total = totals.entry(order.customer).or_default();
        *total += order.amount_cents;
        *windows
            .entry((order.customer, order.window_end()))
            .or_default() += order.amount_cents;
        let event = TotalEvent::Running {
            order: order.id,
            customer: order.customer,
            total_cents: *total,
        };
        lines.push(event.to_string());
    }
    for ((customer, window_end), total_cents) in windows {
        let event = TotalEvent::Window {
            customer,
            window_end,
            total_cents,
        };
        lines.push(event.to_string());
    }
    lines.sort_unstable();
    lines
}

/// Whether every customer's committed lines (`lines` in committed order: the sink's files in
/// name order, each subtask's transactions in order) keep the order its events had at the
/// enrichment's input: its running totals by ascending order id, its window totals by
/// ascending window end (the totals emit each kind per customer in that order). Ordered and
/// key-ordered enrichment must keep it; unordered may not. A line of neither kind breaks it.
pub fn per_key_order_held(lines: &[String]) -> bool {
    // Per customer: the last order id and the last window end seen.
    let mut last: BTreeMap<(u64, bool), i64> = BTreeMap::new();
    lines.iter().all(|line| {
        let mut fields = line.split(' ');
        let (Some(kind), Some(position), Some(customer)) =
            (fields.next(), fields.next(), fields.next())
        else {
            return false;
        };
        let number = |field: &str, name: &str| -> Option<i64> {
            field.strip_prefix(name)?.strip_prefix('=')?.parse().ok()
        };
        let (window, position) = match kind {
            "running" => (false, number(position, "order")),
            "window" => (true, number(position, "end")),
            _ => return false,
        };
        let (Some(position), Some(customer)) = (position, number(customer, "customer")) else {
            return false;
        };
        let key = (customer as u64, window);
        let in_order = last.get(&key).is_none_or(|&before| before < position);
        last.insert(key, position);
        in_order
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_key_order_is_each_customers_order_ids_and_window_ends_ascending() {
        let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let held = lines(&[
            "running order=1 customer=7 name=a tier=gold total=5",
            "running order=2 customer=8 name=b tier=gold total=5",
            "window end=100 customer=7 name=a tier=gold total=5",
            "running order=3 customer=7 name=a tier=gold total=9",
            "window end=200 customer=7 name=a tier=gold total=4",
        ]);
        assert!(per_key_order_held(&held));
        // Customer 7's orders 3 before 1: another customer's lines in between do not hide it.
        let swapped = lines(&[
            "running order=3 customer=7 name=a tier=gold total=9",
            "running order=2 customer=8 name=b tier=gold total=5",
            "running order=1 customer=7 name=a tier=gold total=5",
        ]);
        assert!(!per_key_order_held(&swapped));
        let windows = lines(&[
            "window end=200 customer=7 name=a tier=gold total=4",
            "window end=100 customer=7 name=a tier=gold total=5",
        ]);
        assert!(!per_key_order_held(&windows));
        assert!(!per_key_order_held(&lines(&["garbage"])));
        // The reference output, sorted as text, is not in order ("order=10" before "order=2").
        let data = DemoData {
            orders: 200,
            customers: 3,
            seed: 1,
        };
        assert!(!per_key_order_held(&expected_output(&data)));
    }

    #[test]
    fn orders_round_trip_through_lines() {
        for order in DemoData::default().orders().take(100) {
            assert_eq!(Order::parse(&order.to_line()).unwrap(), order);
        }
        assert!(Order::parse("1,2,3").is_err());
        assert!(Order::parse("1,2,3,4,5").is_err());
        assert!(Order::parse("a,2,3,4").is_err());
    }

    #[test]
    fn generation_is_deterministic() {
        let d = DemoData {
            orders: 1000,
            customers: 7,
            seed: 9,
        };
        let a: Vec<Order> = d.orders().collect();
        let b: Vec<Order> = d.orders().collect();
        assert_eq!(a, b);
        assert!(a.iter().all(|o| (1..=7).contains(&o.customer)));
    }

    #[test]
    fn no_order_is_late_for_the_watermarks_before_it() {
        let d = DemoData {
            orders: 20_000,
            customers: 10,
            seed: 3,
        };
        let mut policy = WatermarkPolicy::default();
        let mut watermark = i64::MIN;
        for order in d.orders() {
            assert!(order.timestamp > watermark, "order {} is late", order.id);
            if let Some(w) = policy.after(&order) {
                watermark = watermark.max(w);
            }
        }
    }

    #[test]
    fn expected_output_has_one_running_line_per_order_and_one_line_per_window() {
        let d = DemoData {
            orders: 500,
            customers: 3,
            seed: 1,
        };
        let lines = expected_output(&d);
        let running = lines.iter().filter(|l| l.starts_with("running")).count();
        assert_eq!(running, 500);
        let windows: std::collections::BTreeSet<(u32, i64)> =
            d.orders().map(|o| (o.customer, o.window_end())).collect();
        assert_eq!(lines.len(), 500 + windows.len());
    }

    #[test]
    fn window_ends_are_inclusive_and_aligned() {
        let o = Order {
            id: 0,
            customer: 1,
            amount_cents: 1,
            timestamp: 2_500,
        };
        assert_eq!(o.window_end(), 2_999);
    }
}
