//! Seeded fault injection for tests of jobs: panics at chosen points (a source, an operator, a
//! timer, an async completion, a snapshot), each fired once, so a job restarts and must still
//! commit exactly the output of a run without faults. The file source takes a [`FaultPlan`];
//! user functions call [`FaultPlan::check`] where they want a fault to be able to fire.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FaultKind {
    /// The source, while reading a record.
    Source,
    /// An operator, while processing a record.
    Operator,
    /// A processing-time timer callback.
    Timer,
    /// An async call, on the pool's worker (the completion turns exceptional).
    AsyncCompletion,
    /// An operator, while snapshotting its state.
    Snapshot,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 5] = [
        FaultKind::Source,
        FaultKind::Operator,
        FaultKind::Timer,
        FaultKind::AsyncCompletion,
        FaultKind::Snapshot,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FaultKind::Source => "source",
            FaultKind::Operator => "operator",
            FaultKind::Timer => "timer",
            FaultKind::AsyncCompletion => "async completion",
            FaultKind::Snapshot => "snapshot",
        })
    }
}

#[derive(Debug)]
struct Fault {
    kind: FaultKind,
    at: u64,
    fired: AtomicBool,
}

/// The faults of one run: which kind fails at which occurrence. Occurrences are counted across
/// restarts, and each fault fires once, so the restarted job gets past it.
#[derive(Debug, Default)]
pub struct FaultPlan {
    faults: Vec<Fault>,
    seen: [AtomicU64; 5],
}

impl FaultPlan {
    /// No faults; [`check`](Self::check) costs one branch.
    pub fn none() -> Self {
        FaultPlan::default()
    }

    /// `count` faults drawn from `seed`, for a job of about `records` records. Record-level
    /// faults fall in the first 90 % of the records; timer faults within the first 10 timer
    /// callbacks; snapshot faults at the first or second snapshot.
    pub fn seeded(seed: u64, count: u32, records: u64) -> Self {
        let mut rng = SplitMix64::new(seed ^ 0x5EED_FA17);
        let span = (records * 9 / 10).max(1);
        let faults = (0..count)
            .map(|_| {
                let kind = FaultKind::ALL[rng.below(FaultKind::ALL.len() as u64) as usize];
                let at = match kind {
                    FaultKind::Source | FaultKind::Operator | FaultKind::AsyncCompletion => {
                        1 + rng.below(span)
                    }
                    FaultKind::Timer => 1 + rng.below(10),
                    FaultKind::Snapshot => 1 + rng.below(2),
                };
                Fault {
                    kind,
                    at,
                    fired: AtomicBool::new(false),
                }
            })
            .collect();
        FaultPlan {
            faults,
            seen: Default::default(),
        }
    }

    /// Exactly these faults: each `(kind, occurrence)` fires once.
    pub fn at(faults: &[(FaultKind, u64)]) -> Self {
        FaultPlan {
            faults: faults
                .iter()
                .map(|&(kind, at)| Fault {
                    kind,
                    at,
                    fired: AtomicBool::new(false),
                })
                .collect(),
            seen: Default::default(),
        }
    }

    /// Whether any fault is planned.
    pub fn is_active(&self) -> bool {
        !self.faults.is_empty()
    }

    /// Counts one occurrence of `kind` and panics if a fault is planned for it.
    ///
    /// # Panics
    ///
    /// That is the point: with the message `injected fault: <kind> #<n>`.
    #[inline]
    pub fn check(&self, kind: FaultKind) {
        if self.faults.is_empty() {
            return;
        }
        self.check_slow(kind);
    }

    #[cold]
    fn check_slow(&self, kind: FaultKind) {
        let n = self.seen[kind.index()].fetch_add(1, Ordering::Relaxed) + 1;
        for fault in &self.faults {
            if fault.kind == kind && fault.at == n && !fault.fired.swap(true, Ordering::AcqRel) {
                panic!("{INJECTED}: {kind} #{n}");
            }
        }
    }

    /// The planned faults, as (kind, occurrence).
    pub fn planned(&self) -> Vec<(FaultKind, u64)> {
        self.faults.iter().map(|f| (f.kind, f.at)).collect()
    }

    /// How many planned faults fired.
    pub fn fired(&self) -> usize {
        self.faults
            .iter()
            .filter(|f| f.fired.load(Ordering::Acquire))
            .count()
    }
}

/// The prefix of an injected fault's panic message ([`FaultPlan::check`]).
const INJECTED: &str = "injected fault";

/// Whether a failure's `message` quotes an injected fault's panic: the
/// executor logs such failures below warnings, as a run that injects faults expects them.
pub(crate) fn is_injected(message: &str) -> bool {
    message.contains(INJECTED)
}

/// Installs a panic hook that reports an injected fault ([`FaultPlan::check`]'s panic) in one
/// `info` log line (thread named) instead of a panic message with a backtrace hint; every other
/// panic goes to the hook that was installed before. For the CLI and the examples, whose runs
/// inject faults on purpose.
pub fn quiet_injected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with(INJECTED) {
            let thread = std::thread::current();
            log::info!("{} on thread {}", message, thread.name().unwrap_or("?"));
        } else {
            default(info);
        }
    }));
}

/// SplitMix64: a tiny, fixed pseudo-random generator (the one fault plans draw from; seeded
/// data generators use it too, so a seed means the same on every machine).
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound > 0`).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_fires_once_at_its_occurrence() {
        let plan = FaultPlan {
            faults: vec![Fault {
                kind: FaultKind::Operator,
                at: 3,
                fired: AtomicBool::new(false),
            }],
            seen: Default::default(),
        };
        plan.check(FaultKind::Operator);
        plan.check(FaultKind::Source);
        plan.check(FaultKind::Operator);
        let panic = std::panic::catch_unwind(|| plan.check(FaultKind::Operator)).unwrap_err();
        assert_eq!(
            panic.downcast_ref::<String>().unwrap(),
            "injected fault: operator #3"
        );
        assert_eq!(plan.fired(), 1);
        for _ in 0..10 {
            plan.check(FaultKind::Operator);
        }
    }

    #[test]
    fn seeded_plans_are_reproducible() {
        let a = FaultPlan::seeded(7, 3, 1000).planned();
        let b = FaultPlan::seeded(7, 3, 1000).planned();
        assert_eq!(a, b);
        assert_eq!(a.len(), 3);
        assert!(!FaultPlan::none().is_active());
    }
}
