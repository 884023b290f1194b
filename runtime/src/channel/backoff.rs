//! A bounded spin-then-yield backoff for the blocking calls (`Sender::send`, `Receiver::recv`,
//! `InputGate::next_blocking`).

use crate::sync::thread;

/// Spins, then yields, before a blocking call sleeps: a sleep and its wake cost microseconds
/// (two context switches), while the other side usually sends or frees space within
/// nanoseconds. Bounded, so a genuinely idle caller still sleeps. The caller re-checks its
/// condition after every round and only then sleeps, with its usual wait protocol.
pub(super) struct Backoff {
    step: u32,
}

impl Backoff {
    /// Up to this step, spin `2^step` times.
    const SPIN_LIMIT: u32 = 6;
    /// Up to this step, yield the thread; then give up and wait.
    const YIELD_LIMIT: u32 = 10;

    pub(super) fn new() -> Self {
        Backoff { step: 0 }
    }

    /// Whether backing off is over and the caller should wait. Under loom after one round
    /// (a yield): enough for the model to explore the unlocked window, no more interleavings.
    pub(super) fn is_exhausted(&self) -> bool {
        if cfg!(loom) {
            self.step > 0
        } else {
            self.step > Self::YIELD_LIMIT
        }
    }

    /// Backs off once; call it with the lock released, then check the state again.
    pub(super) fn snooze(&mut self) {
        if cfg!(loom) {
            thread::yield_now();
        } else if self.step <= Self::SPIN_LIMIT {
            for _ in 0..1u32 << self.step {
                std::hint::spin_loop();
            }
        } else {
            thread::yield_now();
        }
        self.step += 1;
    }
}
