//! The handoff reader keeps the wrapped source's time characteristic: what a `SourceFunction`
//! emits (timestamps, watermarks, idle marks) reaches the chain unchanged without any
//! `with_context`, and a context set explicitly still decides.

mod common;

use common::SharedOutput;
use streamtask_bridge::HandoffReader;
use streamtask_core::operator::{Emitted, Map};
use streamtask_core::task::TaskConfig;
use streamtask_core::{OperatorError, StreamRecord, StreamStatus, Watermark};
use streamtask_legacy::{SourceContext, SourceContextConfig, SourceFunction};
use streamtask_mailbox::SourceStreamTask;

/// An event-time source: three timestamped records, a watermark after each, then idle.
struct Clicks;

impl SourceFunction for Clicks {
    type Out = u64;
    type State = u64;

    fn run(&mut self, ctx: &mut SourceContext<'_, u64, u64>) -> Result<(), OperatorError> {
        while !ctx.is_cancelled() {
            let mut locked = ctx.lock();
            let n = *locked.state();
            if n == 3 {
                locked.mark_as_temporarily_idle()?;
                return Ok(());
            }
            locked.collect_with_timestamp(n, 100 + n as i64)?;
            locked.emit_watermark(Watermark(100 + n as i64))?;
            *locked.state_mut() = n + 1;
        }
        Ok(())
    }
}

fn run(reader: HandoffReader<Clicks>) -> Vec<Emitted<u64>> {
    let output = SharedOutput::new();
    let task = SourceStreamTask::new(
        TaskConfig::new("clicks"),
        reader,
        Map::new("id", |n: u64| n),
        output.clone(),
    )
    .spawn();
    assert!(task.join().is_finished());
    output.snapshot()
}

#[test]
fn smoke() {
    let emitted = run(HandoffReader::new(Clicks).with_capacity(2));
    assert_eq!(emitted.last(), Some(&Emitted::EndOfInput));
}

#[test]
fn a_handoff_reader_keeps_the_sources_timestamps_watermarks_and_idle_marks_by_default() {
    // Before: the default was a processing-time context, which dropped all three.
    let emitted = run(HandoffReader::new(Clicks));
    let mut expected = Vec::new();
    for n in 0..3u64 {
        expected.push(Emitted::Record(StreamRecord::with_timestamp(
            n,
            100 + n as i64,
        )));
        expected.push(Emitted::Watermark(Watermark(100 + n as i64)));
    }
    expected.push(Emitted::Status(StreamStatus::Idle));
    // The end: the task's end of event time, then the end of input.
    expected.push(Emitted::Watermark(Watermark::MAX));
    expected.push(Emitted::EndOfInput);
    assert_eq!(emitted, expected);
}

#[test]
fn an_explicit_processing_time_context_still_drops_them() {
    let emitted =
        run(HandoffReader::new(Clicks).with_context(SourceContextConfig::processing_time()));
    let records: Vec<Emitted<u64>> = (0..3)
        .map(|n| Emitted::Record(StreamRecord::new(n)))
        .collect();
    let mut expected = records;
    expected.push(Emitted::Watermark(Watermark::MAX));
    expected.push(Emitted::EndOfInput);
    assert_eq!(emitted, expected);
}
