//! The keyed async-fn operator against Little's law: every call awaits a reply 1 ms after it
//! (one timer-driven completer thread), so with `cap` records in flight at most `cap / 1 ms`
//! records per second get through. Reports, per in-flight cap, what the mailbox model achieves
//! as a fraction of that bound (the `async_fn_inflight_littles_law` row of `streamtask bench`).
//!
//! ```sh
//! cargo bench --bench async_fn_inflight
//! ```

use std::time::Duration;

use streamtask_cli::bench::async_fn::{CAPS, KEYS, littles_law};
use streamtask_cli::bench::benching;

const LATENCY: Duration = Duration::from_millis(1);

fn main() {
    // Records per unit of cap: about this many ms per cap at the bound.
    let per_cap: u64 = if benching() { 500 } else { 5 };
    println!(
        "keyed async-fn operator, latency {LATENCY:?} (timer-driven completer), {KEYS} keys, \
         {per_cap} records per unit of cap"
    );
    println!(
        "{:>6} {:>10} {:>12} {:>15} {:>13}",
        "cap", "records", "records/s", "achieved/bound", "mean latency"
    );
    for cap in CAPS {
        let records = cap as u64 * per_cap;
        let run = littles_law(cap, LATENCY, records);
        println!(
            "{cap:>6} {records:>10} {:>12.0} {:>15.3} {:>13.2?}",
            run.achieved, run.of_bound, run.mean_latency
        );
    }
}
