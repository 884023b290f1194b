//! The legacy source every model-comparison measurement runs (a counter, one locked section per
//! record), its native port, and the map that notes when each snapshot starts.

use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Instant;

use streamtask_core::operator::{Context, Operator};
use streamtask_core::{OperatorError, StreamRecord};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// Counts from its state, one locked section per record (emit + state update), up to `limit`
/// (or until cancelled).
#[derive(Debug, Clone, Copy)]
pub struct Count {
    /// Where it stops; `None`: never.
    pub limit: Option<u64>,
}

impl SourceFunction for Count {
    type Out = u64;
    type State = u64;

    fn name(&self) -> &str {
        "count"
    }

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if Some(n) == self.limit {
                return Ok(());
            }
            locked.collect(n)?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

/// The native port of [`Count`]: the reference a port should reach.
#[derive(Debug, Clone, Copy)]
pub struct CountReader {
    /// The next value.
    pub next: u64,
    /// Where it ends (`u64::MAX`: practically never).
    pub limit: u64,
}

impl SourceReader<u64> for CountReader {
    fn name(&self) -> &str {
        "count"
    }
    #[inline]
    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, u64>,
    ) -> Result<InputStatus, OperatorError> {
        if self.next == self.limit {
            return Ok(InputStatus::EndOfInput);
        }
        output.collect(self.next)?;
        self.next += 1;
        Ok(InputStatus::MoreAvailable)
    }
    fn register_waker(&mut self, waker: &Waker) {
        waker.wake_by_ref();
    }
    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        Ok(self.next.to_le_bytes().to_vec())
    }
}

/// When each checkpoint's snapshot started, by checkpoint id.
pub type Starts = Arc<Mutex<Vec<(u64, Instant)>>>;

/// A map with a little work per record (`x * 31`) that notes when each checkpoint's snapshot
/// started (its `prepare_snapshot_pre_barrier` runs first in every model's snapshot).
#[derive(Debug, Default)]
pub struct Stamp {
    /// The snapshot starts noted so far.
    pub starts: Starts,
}

impl Stamp {
    /// A map with no starts noted.
    pub fn new() -> Self {
        Stamp::default()
    }
}

impl Operator for Stamp {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "stamp"
    }
    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record.map(|n| n.wrapping_mul(31)))
    }
    fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        self.starts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((checkpoint_id, Instant::now()));
        Ok(())
    }
}
