//! A pass-through operator that injects the operator-level faults the keyed function cannot:
//! a failure while snapshotting state.

use std::sync::Arc;

use streamtask_core::operator::{Context, Operator};
use streamtask_core::{OperatorError, StreamRecord};

use streamtask::fault::{FaultKind, FaultPlan};

/// Forwards every record; fails a snapshot where the fault plan says.
#[derive(Debug)]
pub struct SnapshotFaults<T> {
    faults: Arc<FaultPlan>,
    _types: std::marker::PhantomData<fn(T)>,
}

impl<T> SnapshotFaults<T> {
    /// The operator, failing where `faults` says.
    pub fn new(faults: Arc<FaultPlan>) -> Self {
        SnapshotFaults {
            faults,
            _types: std::marker::PhantomData,
        }
    }
}

impl<T: Send> Operator for SnapshotFaults<T> {
    type In = T;
    type Out = T;

    fn name(&self) -> &str {
        "snapshot-faults"
    }

    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<T>,
        ctx: &mut Context<'_, T>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }

    fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Option<Vec<u8>>, OperatorError> {
        self.faults.check(FaultKind::Snapshot);
        Ok(None)
    }
}
