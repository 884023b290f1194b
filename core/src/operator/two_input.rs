//! Operators with two inputs, and chains headed by one.
//!
//! The task combines the watermarks of both inputs (the minimum, idle inputs excluded) and calls
//! [`TwoInputOperator::process_watermark`] with the combined one, so operators never track
//! per-input watermarks themselves.

use std::fmt;
use std::marker::PhantomData;

use super::{ChainOutput, Context, Operator, OperatorEvent};
use crate::element::{StreamRecord, StreamStatus, Watermark};
use crate::error::OperatorError;
use crate::state::TaskSnapshot;
use crate::time::Timer;

/// A two-input operator: the head of a two-input task's chain.
pub trait TwoInputOperator: Send {
    /// What the first input carries.
    type In1;
    /// What the second input carries.
    type In2;
    /// What it emits.
    type Out;

    /// A short name.
    fn name(&self) -> &str;

    /// Restores state; `None` on a fresh start.
    ///
    /// # Errors
    ///
    /// Typically [`OperatorError::State`].
    fn initialize_state(&mut self, restored: Option<&[u8]>) -> Result<(), OperatorError> {
        let _ = restored;
        Ok(())
    }

    /// Prepares for processing.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn open(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
        let _ = ctx;
        Ok(())
    }

    /// A record of the first input.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_element1(
        &mut self,
        record: StreamRecord<Self::In1>,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;

    /// A record of the second input.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_element2(
        &mut self,
        record: StreamRecord<Self::In2>,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError>;

    /// The combined watermark of both inputs advanced; the default forwards it.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        ctx.emit_watermark(watermark)
    }

    /// The combined status changed; the default forwards it.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        ctx.emit_status(status)
    }

    /// A timer of this operator fired.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn on_processing_time(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = (timer, ctx);
        Ok(())
    }

    /// Snapshots state.
    ///
    /// # Errors
    ///
    /// Any failure fails the checkpoint and the task.
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        let _ = checkpoint_id;
        Ok(None)
    }

    /// Checkpoint completed.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        let _ = checkpoint_id;
        Ok(())
    }

    /// Input `input` (1 or 2) ended.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn end_input(
        &mut self,
        input: u8,
        ctx: &mut Context<'_, Self::Out>,
    ) -> Result<(), OperatorError> {
        let _ = (input, ctx);
        Ok(())
    }

    /// Both inputs ended.
    ///
    /// # Errors
    ///
    /// Any failure fails the task.
    fn finish(&mut self, ctx: &mut Context<'_, Self::Out>) -> Result<(), OperatorError> {
        let _ = ctx;
        Ok(())
    }

    /// Releases resources.
    ///
    /// # Errors
    ///
    /// Reported only.
    fn close(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// Two functions, one per input, mapping both into one output type.
///
/// # Examples
///
/// ```
/// use streamtask_core::operator::{CoMap, TwoInputChain, Map};
/// use streamtask_core::testing::TwoInputHarness;
///
/// let head = CoMap::new("either", |n: u32| n.to_string(), |s: String| s);
/// let mut h = TwoInputHarness::new(TwoInputChain::new(head, Map::new("len", |s: String| s.len())));
/// h.open().unwrap();
/// h.process1(12345).unwrap();
/// h.process2("ab".to_string()).unwrap();
/// assert_eq!(h.output_values(), vec![5, 2]);
/// ```
pub struct CoMap<I1, I2, O, F1, F2> {
    name: String,
    f1: F1,
    f2: F2,
    _types: PhantomData<fn(I1, I2) -> O>,
}

impl<I1, I2, O, F1, F2> CoMap<I1, I2, O, F1, F2>
where
    F1: FnMut(I1) -> O + Send,
    F2: FnMut(I2) -> O + Send,
{
    /// A co-map named `name`.
    pub fn new(name: impl Into<String>, f1: F1, f2: F2) -> Self {
        CoMap {
            name: name.into(),
            f1,
            f2,
            _types: PhantomData,
        }
    }
}

impl<I1, I2, O, F1, F2> TwoInputOperator for CoMap<I1, I2, O, F1, F2>
where
    F1: FnMut(I1) -> O + Send,
    F2: FnMut(I2) -> O + Send,
{
    type In1 = I1;
    type In2 = I2;
    type Out = O;

    fn name(&self) -> &str {
        &self.name
    }

    fn process_element1(
        &mut self,
        record: StreamRecord<I1>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record.map(&mut self.f1))
    }

    fn process_element2(
        &mut self,
        record: StreamRecord<I2>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record.map(&mut self.f2))
    }
}

impl<I1, I2, O, F1, F2> fmt::Debug for CoMap<I1, I2, O, F1, F2> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoMap").field("name", &self.name).finish()
    }
}

/// A two-input operator turning each value of either input into zero or more outputs (Flink's
/// `CoFlatMapFunction`); outputs keep their input's timestamp.
///
/// # Examples
///
/// ```
/// use streamtask_core::operator::{CoFlatMap, Map, TwoInputChain};
/// use streamtask_core::testing::TwoInputHarness;
///
/// let head = CoFlatMap::new(
///     "both",
///     |n: u32, out: &mut Vec<u32>| out.extend([n, n]),
///     |s: String, out: &mut Vec<u32>| out.push(s.len() as u32),
/// );
/// let mut h = TwoInputHarness::new(TwoInputChain::new(head, Map::new("id", |n: u32| n)));
/// h.open().unwrap();
/// h.process1(7).unwrap();
/// h.process2("ab".to_string()).unwrap();
/// assert_eq!(h.output_values(), vec![7, 7, 2]);
/// ```
pub struct CoFlatMap<I1, I2, O, F1, F2> {
    name: String,
    f1: F1,
    f2: F2,
    buffer: Vec<O>,
    _types: PhantomData<fn(I1, I2)>,
}

impl<I1, I2, O, F1, F2> CoFlatMap<I1, I2, O, F1, F2>
where
    F1: FnMut(I1, &mut Vec<O>) + Send,
    F2: FnMut(I2, &mut Vec<O>) + Send,
{
    /// A co-flat-map named `name`.
    pub fn new(name: impl Into<String>, f1: F1, f2: F2) -> Self {
        CoFlatMap {
            name: name.into(),
            f1,
            f2,
            buffer: Vec::new(),
            _types: PhantomData,
        }
    }

    fn emit(
        buffer: &mut Vec<O>,
        timestamp: Option<i64>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        for value in buffer.drain(..) {
            ctx.collect(StreamRecord { value, timestamp })?;
        }
        Ok(())
    }
}

impl<I1, I2, O, F1, F2> TwoInputOperator for CoFlatMap<I1, I2, O, F1, F2>
where
    O: Send,
    F1: FnMut(I1, &mut Vec<O>) + Send,
    F2: FnMut(I2, &mut Vec<O>) + Send,
{
    type In1 = I1;
    type In2 = I2;
    type Out = O;

    fn name(&self) -> &str {
        &self.name
    }

    fn process_element1(
        &mut self,
        record: StreamRecord<I1>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        (self.f1)(record.value, &mut self.buffer);
        Self::emit(&mut self.buffer, record.timestamp, ctx)
    }

    fn process_element2(
        &mut self,
        record: StreamRecord<I2>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        (self.f2)(record.value, &mut self.buffer);
        Self::emit(&mut self.buffer, record.timestamp, ctx)
    }
}

impl<I1, I2, O, F1, F2> fmt::Debug for CoFlatMap<I1, I2, O, F1, F2> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoFlatMap")
            .field("name", &self.name)
            .finish()
    }
}

/// A two-input head (index 0) followed by a one-input chain (indices 1..).
pub struct TwoInputChain<H, T> {
    head: H,
    tail: T,
}

impl<H, T> TwoInputChain<H, T>
where
    H: TwoInputOperator,
    T: Operator<In = H::Out>,
{
    /// `tail` behind the two-input `head`.
    pub fn new(head: H, tail: T) -> Self {
        TwoInputChain { head, tail }
    }

    fn split<'c>(
        &'c mut self,
        ctx: &'c mut Context<'_, T::Out>,
    ) -> (
        &'c mut H,
        ChainOutput<'c, T>,
        &'c super::TaskServices,
        usize,
    ) {
        let base = ctx.operator_index();
        let (out, services, _) = ctx.reborrow().into_parts();
        let chain_out = ChainOutput::new(&mut self.tail, out, services, base + 1);
        (&mut self.head, chain_out, services, base)
    }

    /// Restores head and tail from `snapshot`.
    ///
    /// # Errors
    ///
    /// Whatever an operator's `initialize_state` fails with.
    pub fn restore(&mut self, snapshot: Option<&TaskSnapshot>) -> Result<(), OperatorError> {
        let bytes = snapshot.and_then(|s| s.get(&TaskSnapshot::operator_key(0)));
        self.head.initialize_state(bytes)?;
        self.tail.restore_chain(snapshot, 1)
    }

    /// Opens tail, then head.
    ///
    /// # Errors
    ///
    /// Whatever an operator's `open` fails with.
    pub fn open(&mut self, ctx: &mut Context<'_, T::Out>) -> Result<(), OperatorError> {
        let base = ctx.operator_index();
        {
            let (out, services, _) = ctx.reborrow().into_parts();
            self.tail.open(&mut Context::new(out, services, base + 1))?;
        }
        let (head, mut out, services, base) = self.split(ctx);
        head.open(&mut Context::new(&mut out, services, base))
    }

    /// A record of input 1.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process_element1(
        &mut self,
        record: StreamRecord<H::In1>,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        let (head, mut out, services, base) = self.split(ctx);
        head.process_element1(record, &mut Context::new(&mut out, services, base))
    }

    /// A record of input 2.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process_element2(
        &mut self,
        record: StreamRecord<H::In2>,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        let (head, mut out, services, base) = self.split(ctx);
        head.process_element2(record, &mut Context::new(&mut out, services, base))
    }

    /// The combined watermark advanced.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        let (head, mut out, services, base) = self.split(ctx);
        head.process_watermark(watermark, &mut Context::new(&mut out, services, base))
    }

    /// The combined status changed.
    ///
    /// # Errors
    ///
    /// Whatever the chain fails with.
    pub fn process_status(
        &mut self,
        status: StreamStatus,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        let (head, mut out, services, base) = self.split(ctx);
        head.process_status(status, &mut Context::new(&mut out, services, base))
    }

    /// Routes a timer to the operator it names.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    pub fn dispatch_timer(
        &mut self,
        timer: Timer,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        let base = ctx.operator_index();
        if timer.operator == base {
            let (head, mut out, services, base) = self.split(ctx);
            head.on_processing_time(timer, &mut Context::new(&mut out, services, base))
        } else {
            let (out, services, _) = ctx.reborrow().into_parts();
            self.tail
                .dispatch_timer(timer, &mut Context::new(out, services, base + 1))
        }
    }

    /// Routes an event to the tail operator it names (two-input heads take no events).
    ///
    /// # Errors
    ///
    /// [`OperatorError::UnexpectedEvent`] for the head; whatever the tail fails with.
    pub fn dispatch_event(
        &mut self,
        operator: usize,
        event: OperatorEvent,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        let base = ctx.operator_index();
        if operator == base {
            return Err(OperatorError::UnexpectedEvent {
                operator: self.head.name().to_string(),
            });
        }
        let (out, services, _) = ctx.reborrow().into_parts();
        self.tail
            .dispatch_event(operator, event, &mut Context::new(out, services, base + 1))
    }

    /// Whether the chain takes input now.
    pub fn accepts_input(&self) -> bool {
        self.tail.accepts_input()
    }

    /// Runs `prepare_snapshot_pre_barrier` on the tail (two-input heads have none).
    ///
    /// # Errors
    ///
    /// Whatever the tail fails with.
    pub fn prepare_snapshot_pre_barrier(
        &mut self,
        checkpoint_id: u64,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        let base = ctx.operator_index();
        let (out, services, _) = ctx.reborrow().into_parts();
        self.tail
            .prepare_snapshot_pre_barrier(checkpoint_id, &mut Context::new(out, services, base + 1))
    }

    /// Snapshots head (index 0) and tail (1..) into `into`.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn snapshot(
        &mut self,
        checkpoint_id: u64,
        into: &mut TaskSnapshot,
    ) -> Result<(), OperatorError> {
        if let Some(bytes) = self.head.snapshot_state(checkpoint_id)? {
            into.put(TaskSnapshot::operator_key(0), bytes);
        }
        self.tail.snapshot_chain(checkpoint_id, 1, into)
    }

    /// Checkpoint completed on every task.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.head.notify_checkpoint_complete(checkpoint_id)?;
        self.tail.notify_checkpoint_complete(checkpoint_id)
    }

    /// Checkpoint aborted.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), OperatorError> {
        self.tail.notify_checkpoint_aborted(checkpoint_id)
    }

    /// Input `input` ended; after both ended, call [`end_of_both`](Self::end_of_both).
    ///
    /// # Errors
    ///
    /// Whatever the head fails with.
    pub fn end_input(
        &mut self,
        input: u8,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        let (head, mut out, services, base) = self.split(ctx);
        head.end_input(input, &mut Context::new(&mut out, services, base))
    }

    /// Both inputs ended: finish the head, then end the tail's input and finish it, in one go.
    /// A runtime that can run mails in between calls [`end_input_at`](Self::end_input_at) for
    /// every index and then [`finish_tail`](Self::finish_tail) instead.
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn end_of_both(&mut self, ctx: &mut Context<'_, T::Out>) -> Result<(), OperatorError> {
        let base = ctx.operator_index();
        for operator in base..base + self.chain_len() {
            self.end_input_at(operator, ctx)?;
        }
        self.finish_tail(ctx)
    }

    /// After both inputs ended, one operator at a time, head to tail (`operator` counts from
    /// `ctx.operator_index()`, the head's index): the head's index finishes the head (its inputs
    /// ended one by one through [`end_input`](Self::end_input)); a tail operator's index ends
    /// that operator's input.
    ///
    /// # Errors
    ///
    /// Whatever the operator fails with.
    pub fn end_input_at(
        &mut self,
        operator: usize,
        ctx: &mut Context<'_, T::Out>,
    ) -> Result<(), OperatorError> {
        let base = ctx.operator_index();
        if operator == base {
            let (head, mut out, services, base) = self.split(ctx);
            return head.finish(&mut Context::new(&mut out, services, base));
        }
        let (out, services, _) = ctx.reborrow().into_parts();
        self.tail
            .end_input_at(operator, &mut Context::new(out, services, base + 1))
    }

    /// Finishes the tail, head to tail (the head finished at [`end_input_at`](Self::end_input_at)
    /// index 0).
    ///
    /// # Errors
    ///
    /// Whatever an operator fails with.
    pub fn finish_tail(&mut self, ctx: &mut Context<'_, T::Out>) -> Result<(), OperatorError> {
        let base = ctx.operator_index();
        let (out, services, _) = ctx.reborrow().into_parts();
        self.tail.finish(&mut Context::new(out, services, base + 1))
    }

    /// Closes head and tail.
    ///
    /// # Errors
    ///
    /// The first failure.
    pub fn close(&mut self) -> Result<(), OperatorError> {
        let head = self.head.close();
        let tail = self.tail.close();
        head.and(tail)
    }

    /// Number of operators (head included).
    pub fn chain_len(&self) -> usize {
        1 + self.tail.chain_len()
    }

    /// Names of the operators, head first.
    pub fn chain_names(&self) -> Vec<String> {
        let mut names = vec![self.head.name().to_string()];
        names.extend(self.tail.chain_names());
        names
    }
}

impl<H: fmt::Debug, T: fmt::Debug> fmt::Debug for TwoInputChain<H, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoInputChain")
            .field("head", &self.head)
            .field("tail", &self.tail)
            .finish()
    }
}
