//! The kit's drain, which every model shares: a draining savepoint's barrier first advances
//! event time to its end, ends every operator's input and runs every operator's `finish`,
//! head to tail, so what that emits goes out before the barrier; the snapshot carries
//! `TaskSnapshot::FINISHED`, and a body restored from it gets nothing more, never runs
//! `finish` again and ends only its output.

use std::sync::{Arc, Mutex};

use streamtask_core::operator::{Chain, Context, Emitted, Operator};
use streamtask_core::state::TaskSnapshot;
use streamtask_core::task::{CheckpointResponder, TaskConfig, TaskReport};
use streamtask_core::testing::HarnessServices;
use streamtask_core::trace::Tracer;
use streamtask_core::{CheckpointBarrier, CheckpointKind, OperatorError, StreamRecord, Watermark};
use streamtask_runtime::{ChainBody, Drain, TaskEnv, TaskSetup};

/// Passes records; emits `1000` for each watermark (`1999` for the last), `9999` at its end
/// of input and `7000 + id` at `finish`; logs its `end_input` and `finish` calls.
struct Recorder {
    id: u32,
    calls: Calls,
}

/// The `end_input` and `finish` calls of a chain's operators, in order.
type Calls = Arc<Mutex<Vec<String>>>;

impl Recorder {
    fn log(&self, call: &str) {
        self.calls
            .lock()
            .unwrap()
            .push(format!("{call} {}", self.id));
    }
}

impl Operator for Recorder {
    type In = u32;
    type Out = u32;

    fn name(&self) -> &str {
        "recorder"
    }

    fn process_element(
        &mut self,
        record: StreamRecord<u32>,
        ctx: &mut Context<'_, u32>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, u32>,
    ) -> Result<(), OperatorError> {
        let seen = if watermark.is_max() { 1999 } else { 1000 };
        ctx.collect(StreamRecord::new(seen))?;
        ctx.emit_watermark(watermark)
    }

    fn end_input(&mut self, ctx: &mut Context<'_, u32>) -> Result<(), OperatorError> {
        self.log("end_input");
        ctx.collect(StreamRecord::new(9999))
    }

    fn finish(&mut self, ctx: &mut Context<'_, u32>) -> Result<(), OperatorError> {
        self.log("finish");
        ctx.collect(StreamRecord::new(7000 + self.id))
    }
}

/// A task of two recorders: operator 1 heads, operator 2 is the tail.
type Body = ChainBody<Chain<Recorder, Recorder>, Vec<Emitted<u32>>>;

fn body(restore: Option<&TaskSnapshot>) -> (Body, crossbeam::channel::Receiver<TaskReport>, Calls) {
    let (to_coordinator, reports) = crossbeam::channel::unbounded();
    let setup = TaskSetup::new(
        TaskConfig::new("recorder")
            .with_responder(CheckpointResponder::new("recorder", to_coordinator)),
    );
    let env = TaskEnv::new(
        setup.parts.clone(),
        HarnessServices::new("recorder").services,
        Tracer::off(),
    );
    let calls = Calls::default();
    let recorder = |id| Recorder {
        id,
        calls: Arc::clone(&calls),
    };
    let mut body = ChainBody::new(Chain::new(recorder(1), recorder(2)), Vec::new(), env);
    body.restore_and_open(restore).unwrap();
    assert!(setup.parts.lifecycle.start());
    (body, reports, calls)
}

fn records(output: &[Emitted<u32>]) -> Vec<u32> {
    output
        .iter()
        .filter_map(|e| match e {
            Emitted::Record(r) => Some(r.value),
            _ => None,
        })
        .collect()
}

fn draining(id: u64) -> CheckpointBarrier {
    let mut barrier = CheckpointBarrier::new(id, 0);
    barrier.kind = CheckpointKind::DrainingSavepoint;
    barrier
}

#[test]
fn smoke() {
    let (mut body, reports, calls) = body(None);
    body.process(StreamRecord::new(1)).unwrap();
    body.checkpoint(draining(1), std::time::Instant::now(), |_, _| Ok(()))
        .unwrap();
    let out = body.output();
    // The drain's output, then the barrier: nothing after it. The head's emissions pass
    // through the tail; the tail's follow its own call.
    assert_eq!(records(out), [1, 1999, 1999, 9999, 9999, 7001, 7002]);
    assert!(matches!(out.last(), Some(Emitted::Barrier(b)) if b.id == 1));
    assert!(
        out.iter()
            .any(|e| matches!(e, Emitted::Watermark(w) if w.is_max()))
    );
    assert_eq!(
        *calls.lock().unwrap(),
        ["end_input 1", "end_input 2", "finish 1", "finish 2"],
        "every input ends, then finish runs head to tail"
    );
    assert!(body.is_drained());
    let TaskReport::Acknowledged { snapshot, .. } = reports.try_recv().unwrap() else {
        panic!("acknowledged");
    };
    assert!(snapshot.get(TaskSnapshot::FINISHED).is_some());
}

#[test]
fn a_plain_savepoint_does_not_drain() {
    let (mut body, reports, calls) = body(None);
    let mut barrier = CheckpointBarrier::new(1, 0);
    barrier.kind = CheckpointKind::Savepoint;
    assert_eq!(body.drain_for(barrier).unwrap(), Drain::Finished);
    body.checkpoint(barrier, std::time::Instant::now(), |_, _| Ok(()))
        .unwrap();
    assert_eq!(records(body.output()), Vec::<u32>::new());
    assert_eq!(
        *calls.lock().unwrap(),
        Vec::<String>::new(),
        "no end of input, no finish"
    );
    assert!(!body.is_drained());
    let TaskReport::Acknowledged { snapshot, .. } = reports.try_recv().unwrap() else {
        panic!("acknowledged");
    };
    assert!(snapshot.get(TaskSnapshot::FINISHED).is_none());
}

#[test]
fn a_body_restored_after_a_drain_gets_nothing_and_ends_only_its_output() {
    let (mut first, reports, _) = body(None);
    first
        .checkpoint(draining(1), std::time::Instant::now(), |_, _| Ok(()))
        .unwrap();
    let TaskReport::Acknowledged { snapshot, .. } = reports.try_recv().unwrap() else {
        panic!("acknowledged");
    };

    let (mut restored, reports, calls) = body(Some(&snapshot));
    assert!(restored.is_drained());
    restored.process_watermark(Watermark::MAX).unwrap();
    restored.begin_end_of_input();
    assert_eq!(restored.end_input_step().unwrap(), Drain::Finished);
    let out = restored.output();
    assert_eq!(
        records(out),
        Vec::<u32>::new(),
        "no watermark, no end of input"
    );
    assert!(matches!(out.as_slice(), [Emitted::EndOfInput]));
    assert_eq!(
        *calls.lock().unwrap(),
        Vec::<String>::new(),
        "finish ran at the drain: never again"
    );
    // A checkpoint it takes carries the marker on.
    drop(reports);
    let (mut again, reports, _) = body(Some(&snapshot));
    again
        .checkpoint(
            CheckpointBarrier::new(2, 0),
            std::time::Instant::now(),
            |_, _| Ok(()),
        )
        .unwrap();
    let TaskReport::Acknowledged { snapshot, .. } = reports.try_recv().unwrap() else {
        panic!("acknowledged");
    };
    assert!(snapshot.get(TaskSnapshot::FINISHED).is_some());
}
