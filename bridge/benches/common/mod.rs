//! What both benches run: one legacy source (and its native port, as a reference), one chain.
#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Instant;

use streamtask_core::operator::{Context, Operator};
use streamtask_core::{OperatorError, StreamRecord};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// Counts from its state, one locked section per record (emit + state update), up to `limit`
/// (or forever).
#[derive(Debug, Clone, Copy)]
pub struct Count {
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
#[derive(Debug)]
pub struct CountReader {
    pub next: u64,
    pub limit: u64,
}

impl SourceReader<u64> for CountReader {
    fn name(&self) -> &str {
        "count"
    }
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

/// A map with a little work per record that notes when each checkpoint's snapshot started (its
/// `prepare_snapshot_pre_barrier` runs first in every model's snapshot).
pub struct Stamp {
    pub starts: Arc<Mutex<Vec<(u64, Instant)>>>,
}

impl Stamp {
    pub fn new() -> Self {
        Stamp {
            starts: Arc::new(Mutex::new(Vec::new())),
        }
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
            .unwrap()
            .push((checkpoint_id, Instant::now()));
        Ok(())
    }
}

/// The models the benches compare, in the order they print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// `streamtask_legacy::SourceStreamTask`: the source on the task thread.
    Legacy,
    /// `streamtask_bridge::LegacySourceStreamTask`: the source on its own thread, mails under
    /// the lock.
    Bridge,
    /// `streamtask_bridge::HandoffReader` in a `streamtask_mailbox::SourceTask`.
    Handoff,
    /// The native port in a `SourceTask` (reference only).
    Native,
}

impl Model {
    pub fn label(self) -> &'static str {
        match self {
            Model::Legacy => "legacy SourceStreamTask",
            Model::Bridge => "bridge LegacySourceStreamTask",
            Model::Handoff => "HandoffReader in SourceTask",
            Model::Native => "native reader in SourceTask",
        }
    }
}
