//! A call into the chain that fails or panics leaves the chain's (and a source's) state half
//! way through a record: a reader advanced past it, an operator did not emit it. A checkpoint
//! trigger that takes the task's state before the task has failed (in the legacy model it wins
//! the checkpoint lock the moment the panic released it) must be declined, or the restore would
//! skip the record.

use streamtask_core::operator::{Context, Emitted, Operator, Output};
use streamtask_core::task::{CheckpointResponder, DeclineReason, TaskConfig, TaskReport};
use streamtask_core::testing::HarnessServices;
use streamtask_core::trace::Tracer;
use streamtask_core::{CheckpointBarrier, OperatorError, StreamRecord, catch_panic};
use streamtask_runtime::{ChainBody, TaskEnv, TaskSetup};

/// Panics on one value, fails on another, passes the rest.
struct Fragile;

impl Operator for Fragile {
    type In = u32;
    type Out = u32;

    fn name(&self) -> &str {
        "fragile"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u32>,
        ctx: &mut Context<'_, u32>,
    ) -> Result<(), OperatorError> {
        match record.value {
            13 => panic!("thirteen"),
            7 => Err(OperatorError::user("fragile", "seven")),
            _ => ctx.collect(record),
        }
    }
}

fn body() -> (
    ChainBody<Fragile, Vec<Emitted<u32>>>,
    crossbeam::channel::Receiver<TaskReport>,
) {
    let (to_coordinator, reports) = crossbeam::channel::unbounded();
    let setup = TaskSetup::new(
        TaskConfig::new("fragile")
            .with_responder(CheckpointResponder::new("fragile", to_coordinator)),
    );
    let env = TaskEnv::new(
        setup.parts.clone(),
        HarnessServices::new("fragile").services,
        Tracer::off(),
    );
    let mut body = ChainBody::new(Fragile, Vec::new(), env);
    body.restore_and_open(None).unwrap();
    assert!(setup.parts.lifecycle.start());
    (body, reports)
}

fn checkpoint(body: &mut ChainBody<Fragile, Vec<Emitted<u32>>>, id: u64) {
    body.checkpoint(
        CheckpointBarrier::new(id, 0),
        std::time::Instant::now(),
        |_, _| Ok(()),
    )
    .unwrap();
}

#[test]
fn a_checkpoint_after_a_panic_in_the_chain_is_declined() {
    let (mut body, reports) = body();
    body.process(StreamRecord::new(1)).unwrap();
    checkpoint(&mut body, 1);
    assert!(matches!(
        reports.try_recv().unwrap(),
        TaskReport::Acknowledged { checkpoint: 1, .. }
    ));
    assert!(catch_panic(|| body.process(StreamRecord::new(13))).is_err());
    checkpoint(&mut body, 2);
    match reports.try_recv().unwrap() {
        TaskReport::Declined {
            checkpoint: 2,
            reason: DeclineReason::TaskFailure(_),
            ..
        } => {}
        other => panic!("expected a decline as a failing task, got {other:?}"),
    }
}

#[test]
fn a_checkpoint_after_an_error_in_the_chain_is_declined() {
    let (mut body, reports) = body();
    assert!(body.process(StreamRecord::new(7)).is_err());
    checkpoint(&mut body, 1);
    assert!(matches!(
        reports.try_recv().unwrap(),
        TaskReport::Declined {
            checkpoint: 1,
            reason: DeclineReason::TaskFailure(_),
            ..
        }
    ));
}

#[test]
fn a_checkpoint_after_a_panic_in_a_burst_is_declined() {
    let (mut body, reports) = body();
    {
        let mut burst = body.burst();
        burst.collect(StreamRecord::new(1)).unwrap();
        burst.collect(StreamRecord::new(2)).unwrap();
    }
    checkpoint(&mut body, 1);
    assert!(matches!(
        reports.try_recv().unwrap(),
        TaskReport::Acknowledged { checkpoint: 1, .. }
    ));
    assert!(
        catch_panic(|| {
            let mut burst = body.burst();
            burst.collect(StreamRecord::new(1)).unwrap();
            burst.collect(StreamRecord::new(13))
        })
        .is_err()
    );
    checkpoint(&mut body, 2);
    assert!(matches!(
        reports.try_recv().unwrap(),
        TaskReport::Declined {
            checkpoint: 2,
            reason: DeclineReason::TaskFailure(_),
            ..
        }
    ));
}

#[test]
fn a_checkpoint_after_an_error_in_a_burst_is_declined() {
    let (mut body, reports) = body();
    {
        let mut burst = body.burst();
        assert!(burst.collect(StreamRecord::new(7)).is_err());
        // A later record of the same burst does not make the failed one whole.
        burst.collect(StreamRecord::new(8)).unwrap();
    }
    checkpoint(&mut body, 1);
    assert!(matches!(
        reports.try_recv().unwrap(),
        TaskReport::Declined {
            checkpoint: 1,
            reason: DeclineReason::TaskFailure(_),
            ..
        }
    ));
}
