//! The bridge task: a legacy source on its own thread, mails under the checkpoint lock.

mod common;

use common::{Count, SharedOutput, responder, values};
use streamtask_bridge::LegacySourceStreamTask;
use streamtask_core::Watermark;
use streamtask_core::operator::{Emitted, Map};
use streamtask_core::task::TaskConfig;

#[test]
fn smoke() {
    let output = SharedOutput::new();
    let (responder, _reports) = responder("count");
    let task = LegacySourceStreamTask::new(
        TaskConfig::new("count").with_responder(responder),
        Count::to(1000),
        Map::new("double", |n: u64| n * 2),
        output.clone(),
    )
    .spawn()
    .unwrap();
    assert!(task.join().is_finished());
    let emitted = output.snapshot();
    assert_eq!(
        values(&emitted),
        (0..1000).map(|n| n * 2).collect::<Vec<_>>()
    );
    assert_eq!(
        &emitted[emitted.len() - 2..],
        &[Emitted::Watermark(Watermark::MAX), Emitted::EndOfInput]
    );
}
