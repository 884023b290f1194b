//! The orders file source, twice: the legacy `SourceFunction` (run by the legacy and bridge
//! models) and its port to a new-style `SourceReader` (run by the mailbox model). Both read one
//! CSV line per order, checkpoint the byte offset of the next line together with the watermark
//! policy's state, and emit the same records and watermarks, so every model commits the same
//! output.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::task::Waker;

use serde::{Deserialize, Serialize};
use streamtask::{NonRecoverable, SavepointHandle};
use streamtask_core::state::{decode, encode};
use streamtask_core::{OperatorError, Watermark};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

use super::data::{Order, WatermarkPolicy};
use streamtask::fault::{FaultKind, FaultPlan};

/// What both versions checkpoint: where the next line starts, and the watermark policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePosition {
    /// Byte offset of the next line to read.
    pub offset: u64,
    /// The watermark policy's progress.
    pub watermarks: WatermarkPolicy,
}

/// Where a source stops for a savepoint: after reading `records` orders (counted from where
/// this source instance started: the beginning, or the restored position), it asks the job to
/// stop with a savepoint and waits to be stopped, so the savepoint holds exactly that position
/// (what `streamtask run --stop-with-savepoint-after-records N` uses).
#[derive(Debug, Clone)]
pub struct StopAt {
    /// Orders to read before stopping.
    pub records: u64,
    /// The job's savepoint handle.
    pub handle: SavepointHandle,
}

fn io_error(path: &std::path::Path, e: std::io::Error) -> OperatorError {
    let message = format!("cannot read {}: {e}", path.display());
    // A missing or unreadable file stays so across a restart.
    if matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
    ) {
        OperatorError::user("orders", NonRecoverable::new(message))
    } else {
        OperatorError::user("orders", message)
    }
}

/// A line that is not an order is in the file every attempt reads again: no restart fixes it.
fn parse(line: &str) -> Result<Order, OperatorError> {
    Order::parse(line).map_err(|e| OperatorError::user("orders", NonRecoverable::new(e)))
}

/// The legacy orders source: loops over the file on the task thread; each record's emit and
/// the offset update happen in one locked section, so a checkpoint never sees one without the
/// other.
#[derive(Debug)]
pub struct OrdersFileSource {
    path: PathBuf,
    faults: Arc<FaultPlan>,
    stop_at: Option<StopAt>,
}

impl OrdersFileSource {
    /// A source over the orders file at `path`.
    pub fn new(path: impl Into<PathBuf>, faults: Arc<FaultPlan>) -> Self {
        OrdersFileSource {
            path: path.into(),
            faults,
            stop_at: None,
        }
    }

    /// Stops for a savepoint as `stop_at` says.
    pub fn with_stop_at(mut self, stop_at: Option<StopAt>) -> Self {
        self.stop_at = stop_at;
        self
    }
}

impl SourceFunction for OrdersFileSource {
    type Out = Order;
    type State = FilePosition;

    fn name(&self) -> &str {
        "orders"
    }

    fn run(
        &mut self,
        ctx: &mut SourceContext<'_, Order, FilePosition>,
    ) -> Result<(), OperatorError> {
        let start = ctx.lock().state().offset;
        let mut file = File::open(&self.path).map_err(|e| io_error(&self.path, e))?;
        file.seek(SeekFrom::Start(start))
            .map_err(|e| io_error(&self.path, e))?;
        let mut reader = BufReader::new(file);
        let mut line = String::new();
        let mut read_here = 0;
        while !ctx.is_cancelled() {
            if let Some(stop) = self.stop_at.as_ref().filter(|s| s.records == read_here) {
                stop.handle.stop_with_savepoint();
                // Hold still (outside the lock, so the savepoint's barrier goes out) until the
                // job stops around us.
                while ctx.sleep(std::time::Duration::from_secs(1)).is_ok() {}
                return Ok(());
            }
            read_here += 1;
            line.clear();
            // Read outside the lock: I/O must not hold up checkpoints and timers.
            let read = reader
                .read_line(&mut line)
                .map_err(|e| io_error(&self.path, e))?;
            if read == 0 {
                return Ok(());
            }
            let order = parse(&line)?;
            self.faults.check(FaultKind::Source);
            let mut locked = ctx.lock();
            locked.collect_with_timestamp(order, order.timestamp)?;
            let position = locked.state_mut();
            position.offset += read as u64;
            let watermark = position.watermarks.after(&order);
            if let Some(w) = watermark {
                locked.emit_watermark(Watermark(w))?;
            }
        }
        Ok(())
    }
}

/// The orders source ported to a new-style reader: the same file, offsets and watermarks, but
/// polled one record at a time on the mailbox thread, with no lock at all.
#[derive(Debug)]
pub struct OrdersFileReader {
    path: PathBuf,
    faults: Arc<FaultPlan>,
    position: FilePosition,
    reader: Option<BufReader<File>>,
    line: String,
    stop_at: Option<StopAt>,
    read_here: u64,
    paused: bool,
}

impl OrdersFileReader {
    /// A reader over the orders file at `path`.
    pub fn new(path: impl Into<PathBuf>, faults: Arc<FaultPlan>) -> Self {
        OrdersFileReader {
            path: path.into(),
            faults,
            position: FilePosition::default(),
            reader: None,
            line: String::new(),
            stop_at: None,
            read_here: 0,
            paused: false,
        }
    }

    /// Stops for a savepoint as `stop_at` says.
    pub fn with_stop_at(mut self, stop_at: Option<StopAt>) -> Self {
        self.stop_at = stop_at;
        self
    }

    fn open(&mut self) -> Result<&mut BufReader<File>, OperatorError> {
        if self.reader.is_none() {
            let mut file = File::open(&self.path).map_err(|e| io_error(&self.path, e))?;
            file.seek(SeekFrom::Start(self.position.offset))
                .map_err(|e| io_error(&self.path, e))?;
            self.reader = Some(BufReader::new(file));
        }
        Ok(self.reader.as_mut().expect("just opened"))
    }
}

impl SourceReader<Order> for OrdersFileReader {
    fn name(&self) -> &str {
        "orders"
    }

    fn restore_state(&mut self, state: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = state {
            self.position = decode(bytes).map_err(|e| OperatorError::state("orders", e))?;
        }
        Ok(())
    }

    fn poll_next(
        &mut self,
        output: &mut ReaderOutput<'_, Order>,
    ) -> Result<InputStatus, OperatorError> {
        if let Some(stop) = self
            .stop_at
            .as_ref()
            .filter(|s| s.records == self.read_here)
        {
            if !self.paused {
                self.paused = true;
                stop.handle.stop_with_savepoint();
            }
            // Never woken again (see `register_waker`): the job stops around us.
            return Ok(InputStatus::NothingAvailable);
        }
        self.read_here += 1;
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        let read = self
            .open()?
            .read_line(&mut line)
            .map_err(|e| io_error(&self.path, e))?;
        if read == 0 {
            self.line = line;
            return Ok(InputStatus::EndOfInput);
        }
        let order = parse(&line)?;
        self.line = line;
        self.faults.check(FaultKind::Source);
        output.collect_with_timestamp(order, order.timestamp)?;
        self.position.offset += read as u64;
        if let Some(w) = self.position.watermarks.after(&order) {
            output.emit_watermark(Watermark(w))?;
        }
        Ok(InputStatus::MoreAvailable)
    }

    fn register_waker(&mut self, waker: &Waker) {
        // A file always has data or its end: never wait (unless stopped for a savepoint).
        if !self.paused {
            waker.wake_by_ref();
        }
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, OperatorError> {
        encode(&self.position).map_err(|e| OperatorError::state("orders", e))
    }
}

/// The declared state compatibility: the port keeps the legacy source's `FilePosition`, so a
/// checkpoint of `OrdersFileSource` (legacy, bridge) resumes the reader (mailbox) and back.
impl streamtask_bridge::LegacyStateCompat<Order> for OrdersFileReader {
    type LegacyState = FilePosition;

    fn restore_legacy_state(&mut self, position: FilePosition) -> Result<(), OperatorError> {
        self.position = position;
        Ok(())
    }

    fn to_legacy_state(&self) -> Option<FilePosition> {
        Some(self.position)
    }
}
