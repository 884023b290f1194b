//! The split reader in each model: documented on the [`files`](crate::files) module, since this module is private.

use std::fmt;
use std::sync::Arc;

use crossbeam::channel::{Receiver, Sender, bounded, unbounded};
use streamtask_core::operator::{EventSender, OperatorEvent};
use streamtask_core::state::{decode, encode};
use streamtask_core::sync::{spawn_named, thread::JoinHandle};
use streamtask_core::{OperatorError, StreamRecord, operator::Context, operator::Operator};

use super::split::{FileSplit, LineCursor, ReaderSnapshot, SplitProgress};
use crate::fault::{FaultKind, FaultPlan};

/// Lines the reader thread may have read and not yet seen emitted.
pub const READ_AHEAD: usize = 64;

/// Who reads the splits (see the [module doc](crate::files)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// An own reader thread; lines are emitted under the checkpoint lock (Flink 1.9).
    Thread,
    /// Self-enqueued mails of at most `chunk` lines each (Flink 1.11+).
    Mails {
        /// Lines per mail (at least 1).
        chunk: usize,
    },
}

/// The mail form's "read a chunk" event.
#[derive(Debug)]
pub(crate) struct ReadMail;

/// What the reader thread sends its operator.
#[derive(Debug)]
pub(crate) enum ThreadEvent {
    /// A line of the current split and the offset after it.
    Line(String, u64),
    /// The current split has been read to its end.
    SplitDone,
    /// Reading failed.
    Failed(String),
}

struct ReaderThread {
    splits: Option<Sender<SplitProgress>>,
    credits: Option<Receiver<()>>,
    handle: Option<JoinHandle<()>>,
}

impl ReaderThread {
    fn spawn(name: &str, events: EventSender) -> Self {
        let (split_tx, split_rx) = unbounded::<SplitProgress>();
        let (credit_tx, credit_rx) = bounded::<()>(READ_AHEAD);
        let handle = spawn_named(format!("{name}-reader"), move || {
            // Ends when the operator drops its channel ends (close) or the task refuses events.
            while let Ok(progress) = split_rx.recv() {
                let mut cursor = match LineCursor::open(&progress) {
                    Ok(cursor) => cursor,
                    Err(e) => {
                        let _ = events.send(ThreadEvent::Failed(e.to_string()));
                        return;
                    }
                };
                loop {
                    let event = match cursor.next_line() {
                        Ok(Some((line, after))) => ThreadEvent::Line(line, after),
                        Ok(None) => break,
                        Err(e) => ThreadEvent::Failed(e.to_string()),
                    };
                    let failed = matches!(event, ThreadEvent::Failed(_));
                    // A credit per line in flight: blocks while READ_AHEAD lines wait.
                    if credit_tx.send(()).is_err() || events.send(event).is_err() || failed {
                        return;
                    }
                }
                if events.send(ThreadEvent::SplitDone).is_err() {
                    return;
                }
            }
        });
        ReaderThread {
            splits: Some(split_tx),
            credits: Some(credit_rx),
            handle: Some(handle),
        }
    }

    fn stop(&mut self) {
        self.splits.take();
        self.credits.take();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The split reader: [`FileSplit`]s in, lines out.
pub struct SplitReader {
    name: String,
    mode: ReadMode,
    state: ReaderSnapshot,
    faults: Arc<FaultPlan>,
    input_ended: bool,
    // Mail form: the sender to itself, whether a read mail is outstanding, the open cursor.
    events: Option<EventSender>,
    read_scheduled: bool,
    cursor: Option<LineCursor>,
    // Thread form.
    thread: Option<ReaderThread>,
}

impl SplitReader {
    /// A reader named `name` reading the way `mode` says; `faults` are checked (as
    /// [`FaultKind::Operator`]) before each line is emitted.
    pub fn new(name: String, mode: ReadMode, faults: Arc<FaultPlan>) -> Self {
        let mode = match mode {
            ReadMode::Mails { chunk } => ReadMode::Mails {
                chunk: chunk.max(1),
            },
            ReadMode::Thread => ReadMode::Thread,
        };
        SplitReader {
            name,
            mode,
            state: ReaderSnapshot::default(),
            faults,
            input_ended: false,
            events: None,
            read_scheduled: false,
            cursor: None,
            thread: None,
        }
    }

    /// The state a snapshot would hold now.
    pub fn state(&self) -> &ReaderSnapshot {
        &self.state
    }

    fn io_error(&self, e: impl Into<streamtask_core::BoxError>) -> OperatorError {
        OperatorError::user(&self.name, e)
    }

    /// One line of the current split: emitted, and the offset after it recorded, together
    /// (under the lock, or in one mail). The one place both forms emit.
    fn apply_line(
        &mut self,
        line: String,
        after: u64,
        ctx: &mut Context<'_, String>,
    ) -> Result<(), OperatorError> {
        if self.state.current.is_none() {
            self.state.current = self.state.pending.pop_front().map(SplitProgress::fresh);
        }
        let current = self
            .state
            .current
            .as_mut()
            .expect("a line arrives only for a split the operator queued");
        self.faults.check(FaultKind::Operator);
        ctx.collect(StreamRecord::new(line))?;
        current.position = Some(after);
        Ok(())
    }

    /// The current split is done (thread form: the first pending one, if it had no line).
    fn split_done(&mut self) {
        if self.state.current.take().is_none() {
            self.state.pending.pop_front();
        }
    }

    fn schedule_read(&mut self) {
        if self.read_scheduled || !self.state.has_work() {
            return;
        }
        if let Some(events) = &self.events {
            // Refused only when the task is ending; the state keeps the work for a restore.
            self.read_scheduled = events.send(ReadMail).is_ok();
        }
    }

    fn read_chunk(
        &mut self,
        chunk: usize,
        ctx: &mut Context<'_, String>,
    ) -> Result<(), OperatorError> {
        let mut read = 0;
        while read < chunk {
            if self.cursor.is_none() {
                if self.state.current.is_none() {
                    match self.state.pending.pop_front() {
                        Some(split) => self.state.current = Some(SplitProgress::fresh(split)),
                        None => break,
                    }
                }
                let progress = self.state.current.as_ref().expect("set above");
                self.cursor = Some(LineCursor::open(progress).map_err(|e| self.io_error(e))?);
            }
            let cursor = self.cursor.as_mut().expect("opened above");
            match cursor.next_line() {
                Ok(Some((line, after))) => {
                    self.apply_line(line, after, ctx)?;
                    read += 1;
                }
                Ok(None) => {
                    self.cursor = None;
                    self.split_done();
                }
                Err(e) => return Err(self.io_error(e)),
            }
        }
        Ok(())
    }
}

impl Operator for SplitReader {
    type In = FileSplit;
    type Out = String;

    fn name(&self) -> &str {
        &self.name
    }

    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        if let Some(bytes) = restored {
            self.state = decode(bytes).map_err(|e| OperatorError::state(&self.name, e))?;
        }
        Ok(())
    }

    fn open(&mut self, ctx: &mut Context<'_, String>) -> Result<(), OperatorError> {
        let events = ctx.event_sender();
        match self.mode {
            ReadMode::Thread => {
                let thread = ReaderThread::spawn(&self.name, events);
                // The restored work first, in reading order.
                for progress in self.state.in_order() {
                    if let Some(splits) = &thread.splits {
                        let _ = splits.send(progress);
                    }
                }
                self.thread = Some(thread);
            }
            ReadMode::Mails { .. } => {
                self.events = Some(events);
                self.schedule_read();
            }
        }
        Ok(())
    }

    fn process_element(
        &mut self,
        record: StreamRecord<FileSplit>,
        _ctx: &mut Context<'_, String>,
    ) -> Result<(), OperatorError> {
        let split = record.value;
        self.state.pending.push_back(split.clone());
        match self.mode {
            ReadMode::Thread => {
                if let Some(splits) = self.thread.as_ref().and_then(|t| t.splits.as_ref()) {
                    let _ = splits.send(SplitProgress::fresh(split));
                }
            }
            ReadMode::Mails { .. } => self.schedule_read(),
        }
        Ok(())
    }

    fn on_event(
        &mut self,
        event: OperatorEvent,
        ctx: &mut Context<'_, String>,
    ) -> Result<(), OperatorError> {
        let event = match event.downcast::<ReadMail>() {
            Ok(_) => {
                self.read_scheduled = false;
                if let ReadMode::Mails { chunk } = self.mode {
                    self.read_chunk(chunk, ctx)?;
                }
                self.schedule_read();
                return Ok(());
            }
            Err(other) => other,
        };
        match event.downcast::<ThreadEvent>() {
            Ok(event) => {
                if let Some(credits) = self.thread.as_ref().and_then(|t| t.credits.as_ref())
                    && matches!(*event, ThreadEvent::Line(..))
                {
                    let _ = credits.try_recv();
                }
                match *event {
                    ThreadEvent::Line(line, after) => self.apply_line(line, after, ctx),
                    ThreadEvent::SplitDone => {
                        self.split_done();
                        Ok(())
                    }
                    ThreadEvent::Failed(message) => Err(self.io_error(message)),
                }
            }
            Err(_) => Err(OperatorError::UnexpectedEvent {
                operator: self.name.clone(),
            }),
        }
    }

    fn accepts_input(&self) -> bool {
        // Draining at the end of input: nothing more, until every split was read.
        !(self.input_ended && self.state.has_work())
    }

    fn waits_for_own_events(&self) -> bool {
        true
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        encode(&self.state)
            .map(Some)
            .map_err(|e| OperatorError::state(&self.name, e))
    }

    fn end_input(&mut self, _ctx: &mut Context<'_, String>) -> Result<(), OperatorError> {
        self.input_ended = true;
        Ok(())
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        if let Some(mut thread) = self.thread.take() {
            thread.stop();
        }
        Ok(())
    }
}

impl Drop for SplitReader {
    fn drop(&mut self) {
        if let Some(mut thread) = self.thread.take() {
            thread.stop();
        }
    }
}

impl fmt::Debug for SplitReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SplitReader")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}
