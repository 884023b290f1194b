//! The porting kit: a faithful port passes; wrong ports are caught with the first differing
//! record and the checkpoint.

mod common;

use std::task::Waker;

use common::Count;
use streamtask_bridge::porting::{Divergence, PortingError, PortingKit};
use streamtask_core::state::{decode, encode};
use streamtask_core::{OperatorError, StreamRecord};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// The port of [`Count`]: `next` is the position; `snapshot_offset` and `skip_after_restore`
/// are the deliberate bugs.
struct CountReader {
    next: u64,
    limit: u64,
    snapshot_offset: i64,
    skip_after_restore: bool,
}

impl CountReader {
    fn faithful(limit: u64) -> Self {
        CountReader {
            next: 0,
            limit,
            snapshot_offset: 0,
            skip_after_restore: false,
        }
    }
}

impl SourceReader<u64> for CountReader {
    fn name(&self) -> &str {
        "count"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.next = decode(bytes).map_err(|e| OperatorError::state("count", e))?;
            if self.skip_after_restore {
                self.next += 1;
            }
        }
        Ok(())
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
        let position = self.next.saturating_add_signed(self.snapshot_offset);
        encode(&position).map_err(|e| OperatorError::state("count", e))
    }
}

#[test]
fn smoke() {
    let report = PortingKit::new(|| Count::to(100), || CountReader::faithful(100))
        .checkpoint_every(10)
        .fail_after([15, 47])
        .with_timeout(std::time::Duration::from_secs(1))
        .run()
        .map_err(|e| e.to_string())
        .unwrap();
    let values: Vec<u64> = report.records.iter().map(|r| r.value).collect();
    assert_eq!(values, (0..100).collect::<Vec<_>>());
    assert_eq!(report.restores.len(), 2);
    assert_eq!(report.restores[0].from_checkpoint, Some(1));
    assert_eq!(report.restores[0].resumed_at, 10);
}
