//! The chaining rule (FLINK-16219): an operator that waits for its own events cannot be chained
//! behind a legacy source in the bridge; the error names both fixes.

mod common;

use common::{Count, SharedOutput, values};
use streamtask_bridge::{ChainingError, HandoffReader, LegacySourceStreamTask};
use streamtask_core::operator::{Context, Map, OperatorExt};
use streamtask_core::task::TaskConfig;
use streamtask_core::{OperatorError, StreamRecord, operator::Operator};
use streamtask_mailbox::SourceStreamTask;

/// Stands for an async operator: it waits for its own completions.
struct WaitsForItself;

impl Operator for WaitsForItself {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "enrich"
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }
    fn waits_for_own_events(&self) -> bool {
        true
    }
}

#[test]
fn smoke() {
    let error = LegacySourceStreamTask::new(
        TaskConfig::new("orders"),
        Count::to(10),
        WaitsForItself,
        SharedOutput::new(),
    )
    .spawn()
    .unwrap_err();
    assert_eq!(
        error,
        ChainingError::WaitsForOwnEvents {
            task: "orders".into(),
            chain: vec!["enrich".into()],
        }
    );
}

#[test]
fn the_message_names_both_fixes() {
    let error = LegacySourceStreamTask::new(
        TaskConfig::new("orders"),
        Count::to(10),
        WaitsForItself,
        SharedOutput::new(),
    )
    .spawn()
    .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("start_new_chain"), "{message}");
    assert!(message.contains("HandoffReader"), "{message}");
    assert!(message.contains("\"orders\""), "{message}");
}

#[test]
fn an_operator_deep_in_the_chain_is_found_too() {
    let chain = Map::new("parse", |n: u64| n)
        .then(WaitsForItself)
        .then(Map::new("format", |n: u64| n));
    let error = LegacySourceStreamTask::new(
        TaskConfig::new("orders"),
        Count::to(10),
        chain,
        SharedOutput::new(),
    )
    .spawn()
    .unwrap_err();
    let ChainingError::WaitsForOwnEvents { chain, .. } = error else {
        unreachable!("one variant");
    };
    assert_eq!(chain, vec!["parse", "enrich", "format"]);
}

#[test]
fn the_handoff_reader_is_the_fix_that_keeps_the_chain() {
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("orders"),
        HandoffReader::new(Count::to(10)),
        WaitsForItself,
        output.clone(),
    )
    .spawn();
    assert!(task.join().is_finished());
    assert_eq!(values(&output.snapshot()), (0..10).collect::<Vec<_>>());
}
