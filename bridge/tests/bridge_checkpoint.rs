//! Checkpoint consistency in the bridge: the trigger mail runs under the checkpoint lock, so a
//! source that updates its state and emits in one locked section is never snapshotted in the
//! middle of it (Flink's `SourceStreamTaskTest#testCheckpointing`), under every fairness.

mod common;

use common::{SharedOutput, report, responder, values_before_barrier};
use serde::{Deserialize, Serialize};
use streamtask_bridge::LegacySourceStreamTask;
use streamtask_core::operator::{Emitted, Map};
use streamtask_core::task::{DeclineReason, TaskConfig, TaskReport};
use streamtask_core::{CheckpointBarrier, OperatorError, state::TaskSnapshot};
use streamtask_legacy::{Fairness, SourceContext, SourceFunction};

/// Two half-updates of the state around two emits, all in one section: a snapshot taken
/// mid-section would see `started != done`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Progress {
    started: u64,
    done: u64,
}

struct Pairs {
    sections: Option<u64>,
}

impl SourceFunction for Pairs {
    type Out = u64;
    type State = Progress;
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, Progress>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = locked.state().done;
            if Some(n) == self.sections {
                return Ok(());
            }
            locked.state_mut().started += 1;
            locked.collect(2 * n)?;
            locked.collect(2 * n + 1)?;
            locked.state_mut().done += 1;
        }
        Ok(())
    }
}

fn frequent_triggers(fairness: Fairness) {
    let output = SharedOutput::new();
    let (responder, reports) = responder("pairs");
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("pairs").with_responder(responder),
        Pairs { sections: None },
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .with_fairness(fairness)
    .spawn()
    .unwrap();
    output.wait_for(|e| !e.is_empty());
    const TRIGGERS: u64 = 200;
    for id in 1..=TRIGGERS {
        task.trigger_checkpoint(CheckpointBarrier::new(id, 0))
            .unwrap();
    }
    let mut acknowledged = Vec::new();
    for _ in 0..TRIGGERS {
        match report(&reports) {
            TaskReport::Acknowledged {
                checkpoint,
                snapshot,
                ..
            } => acknowledged.push((checkpoint, snapshot)),
            TaskReport::Declined { reason, .. } => panic!("a running task declined: {reason}"),
        }
    }
    task.cancel();
    task.join();
    let emitted = output.snapshot();
    let mut last = 0;
    for (id, snapshot) in acknowledged {
        let progress: Progress = snapshot.get_value(TaskSnapshot::SOURCE).unwrap().unwrap();
        assert_eq!(
            progress.started, progress.done,
            "checkpoint {id} saw half a section"
        );
        let before = values_before_barrier(&emitted, id);
        assert_eq!(before, (0..2 * progress.done).collect::<Vec<_>>());
        assert!(
            progress.done >= last,
            "checkpoints are taken in trigger order"
        );
        last = progress.done;
    }
    // Barriers went downstream in trigger order, each exactly once.
    let barriers: Vec<u64> = emitted
        .iter()
        .filter_map(|e| match e {
            Emitted::Barrier(b) => Some(b.id),
            _ => None,
        })
        .collect();
    assert_eq!(barriers, (1..=TRIGGERS).collect::<Vec<_>>());
}

#[test]
fn smoke() {
    frequent_triggers(Fairness::Fair);
}

#[test]
fn frequent_triggers_never_see_half_a_section_with_an_eventually_fair_lock() {
    frequent_triggers(Fairness::Eventual);
}

#[test]
fn frequent_triggers_never_see_half_a_section_with_an_unfair_lock() {
    frequent_triggers(Fairness::Unfair);
}

#[test]
fn triggers_after_the_source_finished_are_declined() {
    let output = SharedOutput::new();
    let (responder, reports) = responder("finished");
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("finished").with_responder(responder),
        Pairs { sections: Some(10) },
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn()
    .unwrap();
    output.wait_for(|e| e.contains(&Emitted::EndOfInput));
    task.trigger_checkpoint(CheckpointBarrier::new(1, 0))
        .unwrap();
    assert!(task.join().is_finished());
    assert!(matches!(
        report(&reports),
        TaskReport::Declined {
            reason: DeclineReason::NotRunning,
            ..
        }
    ));
}
