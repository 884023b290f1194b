//! [`InterruptibleTimers`]: the setting that lets a task fire many due event-time timers in
//! chunks, with mails running in between.

use std::num::NonZeroUsize;

/// Whether a task fires the event-time timers a watermark made due in chunks, letting waiting
/// mails (a checkpoint trigger, a notice, an urgent mail) run between two chunks (Flink's
/// `execution.interruptible-timers.enabled`), and how many timers a chunk holds.
///
/// Only a task whose firing runs on its mailbox thread can stop between chunks: the mailbox
/// model's tasks and the bridge's mailbox tasks. The legacy model, and the bridge's legacy
/// source task (whose chain runs on the source thread), fire every due timer under the
/// checkpoint lock in one go whatever this says: the lock is held for the whole firing, so
/// nothing can run in between.
///
/// **Default: enabled, chunks of [`DEFAULT_CHUNK`](Self::DEFAULT_CHUNK).** While a firing is
/// spread out the task takes no record (a keyed function's state is per key, so a record taken
/// between two chunks could change what a due timer of its key sees), so the output is the
/// same as with it disabled; what it costs is one atomic load per chunk. Flink leaves the
/// setting off by default because its task keeps taking records between chunks, which changes
/// what a job emits.
///
/// # Examples
///
/// ```
/// use std::num::NonZeroUsize;
/// use streamtask_core::time::InterruptibleTimers;
///
/// let default = InterruptibleTimers::default();
/// assert!(default.is_enabled());
/// assert_eq!(default.chunk().get(), InterruptibleTimers::DEFAULT_CHUNK);
///
/// let small = InterruptibleTimers::enabled().with_chunk(NonZeroUsize::new(8).unwrap());
/// assert_eq!(small.chunk().get(), 8);
/// assert!(!InterruptibleTimers::disabled().is_enabled());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InterruptibleTimers {
    enabled: bool,
    chunk: NonZeroUsize,
}

impl InterruptibleTimers {
    /// Timers a chunk holds by default: a waiting mail waits for at most this many timers'
    /// callbacks, and a firing checks the mailbox once per chunk.
    pub const DEFAULT_CHUNK: usize = 64;

    /// Interruptible, with chunks of [`DEFAULT_CHUNK`](Self::DEFAULT_CHUNK) timers.
    pub const fn enabled() -> Self {
        InterruptibleTimers {
            enabled: true,
            chunk: match NonZeroUsize::new(Self::DEFAULT_CHUNK) {
                Some(chunk) => chunk,
                None => panic!("the default chunk is not zero"),
            },
        }
    }

    /// Not interruptible: every due timer fires in one go, as the legacy model always does.
    pub const fn disabled() -> Self {
        InterruptibleTimers {
            enabled: false,
            ..Self::enabled()
        }
    }

    /// The same setting with chunks of `chunk` timers.
    pub const fn with_chunk(mut self, chunk: NonZeroUsize) -> Self {
        self.chunk = chunk;
        self
    }

    /// Whether a firing may be interrupted.
    pub const fn is_enabled(self) -> bool {
        self.enabled
    }

    /// Timers fired before a firing first looks for waiting mails, and between two looks.
    pub const fn chunk(self) -> NonZeroUsize {
        self.chunk
    }
}

impl Default for InterruptibleTimers {
    fn default() -> Self {
        InterruptibleTimers::enabled()
    }
}
