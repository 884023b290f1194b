//! One operator chain hosted on a timely worker: the worker's thread makes every call, one at
//! a time, as a mailbox task thread does.
//!
//! Processing-time timers are not driven (the clock stays at 0): the chains a timely run hosts
//! use event time only.

use streamtask_core::operator::{BoxOperator, Context, Emitted};
use streamtask_core::state::TaskSnapshot;
use streamtask_core::testing::HarnessServices;
use streamtask_core::{OperatorError, StreamRecord, Watermark};

/// A chain, its output buffer and the services its operators see.
pub(crate) struct Host<I, O> {
    op: BoxOperator<I, O>,
    output: Vec<Emitted<O>>,
    parts: HarnessServices,
}

impl<I, O> Host<I, O> {
    /// Restores `op` from `snapshot` (a fresh start without one) and opens it.
    pub(crate) fn open(
        mut op: BoxOperator<I, O>,
        task: &str,
        snapshot: Option<&TaskSnapshot>,
    ) -> Result<Self, OperatorError> {
        op.restore_chain(snapshot, 0)?;
        let mut host = Host {
            op,
            output: Vec::new(),
            parts: HarnessServices::new(task),
        };
        host.call(|op, ctx| op.open(ctx))?;
        Ok(host)
    }

    fn call(
        &mut self,
        f: impl FnOnce(&mut BoxOperator<I, O>, &mut Context<'_, O>) -> Result<(), OperatorError>,
    ) -> Result<(), OperatorError> {
        let mut ctx = Context::new(&mut self.output, &self.parts.services, 0);
        f(&mut self.op, &mut ctx)
    }

    pub(crate) fn record(&mut self, record: StreamRecord<I>) -> Result<(), OperatorError> {
        self.call(|op, ctx| op.process_element(record, ctx))
    }

    pub(crate) fn watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.call(|op, ctx| op.process_watermark(watermark, ctx))
    }

    /// The input ended. `finish` is not called: the last records are committed by the last
    /// epoch's checkpoint like every other, so no transaction is left for after the run.
    pub(crate) fn end_input(&mut self) -> Result<(), OperatorError> {
        self.call(|op, ctx| op.end_input(ctx))
    }

    /// The chain's snapshot for checkpoint `id`, as the local executor takes a task's.
    pub(crate) fn snapshot(&mut self, id: u64) -> Result<TaskSnapshot, OperatorError> {
        self.call(|op, ctx| op.prepare_snapshot_pre_barrier(id, ctx))?;
        let mut snapshot = TaskSnapshot::new();
        self.op.snapshot_chain(id, 0, &mut snapshot)?;
        Ok(snapshot)
    }

    pub(crate) fn complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.op.notify_checkpoint_complete(id)
    }

    pub(crate) fn take_output(&mut self) -> Vec<Emitted<O>> {
        std::mem::take(&mut self.output)
    }

    pub(crate) fn close(&mut self) -> Result<(), OperatorError> {
        self.parts.timers.shut_down();
        self.parts.events.close();
        self.op.close()
    }
}
