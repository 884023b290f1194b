//! Map-like functions that see time: [`MapWithContext`] hands the function a
//! [`RecordContext`] with the record's timestamp, the operator's current watermark and the
//! processing time (Flink's rich functions and `ProcessFunction.Context`).

use std::fmt;
use std::marker::PhantomData;

use super::{Context, Operator, TaskServices};
use crate::element::{StreamRecord, Watermark};
use crate::error::OperatorError;

/// What a context-aware map function sees besides the value.
#[derive(Clone, Copy)]
pub struct RecordContext<'a> {
    timestamp: Option<i64>,
    watermark: Watermark,
    services: &'a TaskServices,
}

impl RecordContext<'_> {
    /// The record's event timestamp, if it carries one.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The last watermark this operator received ([`Watermark::MIN`] before the first).
    pub fn current_watermark(&self) -> Watermark {
        self.watermark
    }

    /// The current processing time in milliseconds (read when asked).
    pub fn processing_time(&self) -> i64 {
        self.services.timers().current_processing_time()
    }

    /// The name of the task running the function.
    pub fn task_name(&self) -> &str {
        self.services.task_name()
    }
}

impl fmt::Debug for RecordContext<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordContext")
            .field("timestamp", &self.timestamp)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

/// Applies `f(value, &RecordContext)` to every record; the output keeps the input's timestamp.
///
/// # Examples
///
/// ```
/// use streamtask_core::operator::{MapWithContext, RecordContext};
/// use streamtask_core::testing::OperatorHarness;
/// use streamtask_core::Watermark;
///
/// let op = MapWithContext::new("stamp", |n: u32, ctx: &RecordContext<'_>| {
///     (n, ctx.timestamp(), ctx.current_watermark())
/// });
/// let mut h = OperatorHarness::new(op);
/// h.open().unwrap();
/// h.process_watermark(Watermark(3)).unwrap();
/// h.process_with_timestamp(1, 5).unwrap();
/// assert_eq!(h.output_values(), vec![(1, Some(5), Watermark(3))]);
/// ```
pub struct MapWithContext<I, O, F> {
    name: String,
    f: F,
    watermark: Watermark,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O, F> MapWithContext<I, O, F>
where
    F: FnMut(I, &RecordContext<'_>) -> O + Send,
{
    /// A context-aware map named `name`.
    pub fn new(name: impl Into<String>, f: F) -> Self {
        MapWithContext {
            name: name.into(),
            f,
            watermark: Watermark::MIN,
            _types: PhantomData,
        }
    }
}

impl<I, O, F> Operator for MapWithContext<I, O, F>
where
    F: FnMut(I, &RecordContext<'_>) -> O + Send,
{
    type In = I;
    type Out = O;

    fn name(&self) -> &str {
        &self.name
    }

    #[inline]
    fn process_element(
        &mut self,
        record: StreamRecord<I>,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        let rctx = RecordContext {
            timestamp: record.timestamp,
            watermark: self.watermark,
            services: ctx.services(),
        };
        let value = (self.f)(record.value, &rctx);
        ctx.collect(StreamRecord {
            value,
            timestamp: record.timestamp,
        })
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, O>,
    ) -> Result<(), OperatorError> {
        self.watermark = self.watermark.max(watermark);
        ctx.emit_watermark(watermark)
    }
}

impl<I, O, F> fmt::Debug for MapWithContext<I, O, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapWithContext")
            .field("name", &self.name)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}
