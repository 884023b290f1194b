//! Small bounded sources for tests and small jobs: [`IterReader`], behind
//! [`StreamEnvironment::from_iter`](super::StreamEnvironment::from_iter) and
//! [`from_sequence`](super::StreamEnvironment::from_sequence).
//!
//! The reader is a new-style [`SourceReader`], so it runs on the mailbox thread under the
//! mailbox and bridge models, and through `streamtask_bridge::ReaderSource` under the legacy
//! model. Its checkpointed state is its position: how many items it has emitted. A restore
//! skips that many items of a fresh iterator, so the iterator must yield the same items in the
//! same order every time it is made.

use std::fmt;
use std::task::Waker;

use streamtask_core::OperatorError;
use streamtask_core::state::{decode, encode};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

/// A reader over the items of an iterator, one per poll, checkpointing its position.
pub(crate) struct IterReader<I> {
    name: String,
    items: I,
    /// Items emitted so far (the checkpointed position).
    position: u64,
}

impl<I> IterReader<I> {
    pub(crate) fn new(name: String, items: I) -> Self {
        IterReader {
            name,
            items,
            position: 0,
        }
    }
}

impl<I> SourceReader<I::Item> for IterReader<I>
where
    I: Iterator + Send,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        let Some(bytes) = state else {
            return Ok(());
        };
        let position: u64 =
            decode(bytes).map_err(|e| OperatorError::state(self.name.clone(), e))?;
        // Replaying the iterator up to the position: the items before it were emitted and
        // checkpointed downstream already.
        for _ in 0..position {
            if self.items.next().is_none() {
                break;
            }
        }
        self.position = position;
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, I::Item>,
    ) -> Result<InputStatus, OperatorError> {
        match self.items.next() {
            Some(item) => {
                self.position += 1;
                output.collect(item)?;
                Ok(InputStatus::MoreAvailable)
            }
            None => Ok(InputStatus::EndOfInput),
        }
    }

    fn register_waker(&mut self, waker: &Waker) {
        // Never NothingAvailable: an iterator always has an item or has ended.
        waker.wake_by_ref();
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.position).map_err(|e| OperatorError::state(self.name.clone(), e))
    }
}

impl<I> fmt::Debug for IterReader<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IterReader")
            .field("name", &self.name)
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}
