//! The built-in demo job `streamtask compare` runs: generated orders, keyed running totals with
//! timers, async enrichment from SQLite (or, futures-based, from a tokio TCP customer service),
//! and an exactly-once file sink.

pub mod checkpoints;
#[cfg(not(loom))]
pub mod customer_service;
pub mod data;
pub mod enrich;
pub mod job;
pub mod on_timely;
pub mod probe;
pub mod source;
pub mod totals;

use sha2::{Digest, Sha256};

/// A short digest of output lines, independent of their order: SHA-256 of the sorted lines,
/// first 16 hex digits.
pub fn digest(lines: &[String]) -> String {
    let mut sorted: Vec<&String> = lines.iter().collect();
    sorted.sort_unstable();
    let mut hasher = Sha256::new();
    for line in sorted {
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    hex[..16].to_string()
}
