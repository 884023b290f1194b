//! Timestamps and watermarks assigned after the source (Flink's `WatermarkStrategy` and
//! `assignTimestampsAndWatermarks`).
//!
//! [`TimestampsAndWatermarks`] gives each record its event time (from the strategy's
//! timestamp assigner, or the timestamp the record already carries) and generates watermarks
//! from the largest timestamp seen, bounded out of order: `max - bound - 1`. It emits them
//! periodically on processing time (every auto-watermark interval, 200 ms by default, through
//! a processing-time timer), never per record, and only when the watermark advanced.
//!
//! # What happens to the upstream's watermarks
//!
//! As in Flink, the assigner replaces them: watermarks and stream status changes arriving from
//! upstream are dropped, except [`Watermark::MAX`] (the end of event time), which is forwarded
//! once. At end of input the operator emits [`Watermark::MAX`] itself if it has not yet, so
//! downstream event-time timers all fire.
//!
//! # Idleness
//!
//! With [`WatermarkStrategy::with_idleness`], a periodic tick that finds no record for at least
//! the idleness interval (of processing time) marks the stream idle ([`StreamStatus::Idle`]), so
//! downstream operators combining several inputs stop waiting for this one; the next record
//! marks it active again before it is emitted (Flink's `withIdleness`).
//!
//! The generator keeps no checkpointed state: after a restore it starts from no timestamp seen
//! again, and downstream operators keep the larger watermark they restored.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Context, Operator};
use crate::element::{StreamRecord, StreamStatus, Watermark};
use crate::error::OperatorError;
use crate::time::{Timer, TimerError};

type Assigner<T> = Arc<dyn Fn(&T, Option<i64>) -> i64 + Send + Sync>;

/// How event time is read from records and how watermarks follow it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask_core::operator::{TimestampsAndWatermarks, WatermarkStrategy};
/// use streamtask_core::testing::OperatorHarness;
/// use streamtask_core::operator::Emitted;
/// use streamtask_core::{StreamRecord, Watermark};
///
/// let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(5))
///     .with_timestamp_assigner(|event: &(u32, i64), _| event.1);
/// let mut h = OperatorHarness::new(TimestampsAndWatermarks::new("ts", strategy));
/// h.open().unwrap();
/// h.process((1, 100)).unwrap();
/// h.process((2, 98)).unwrap();
/// h.advance_processing_time(201).unwrap(); // the periodic tick (a timer fires once time passes it)
/// assert_eq!(
///     h.take_output(),
///     vec![
///         Emitted::Record(StreamRecord::with_timestamp((1, 100), 100)),
///         Emitted::Record(StreamRecord::with_timestamp((2, 98), 98)),
///         Emitted::Watermark(Watermark(94)),
///     ]
/// );
/// ```
pub struct WatermarkStrategy<T> {
    out_of_orderness: i64,
    assigner: Option<Assigner<T>>,
    idleness: Option<i64>,
    interval: i64,
}

impl<T> WatermarkStrategy<T> {
    /// Watermarks trailing the largest timestamp seen by `max` (Flink's
    /// `forBoundedOutOfOrderness`): a record up to `max` older than the largest is not late.
    pub fn for_bounded_out_of_orderness(max: Duration) -> Self {
        WatermarkStrategy {
            out_of_orderness: millis(max),
            assigner: None,
            idleness: None,
            interval: 200,
        }
    }

    /// Timestamps that never decrease (a bound of zero), as Flink's `forMonotonousTimestamps`.
    pub fn for_monotonous_timestamps() -> Self {
        Self::for_bounded_out_of_orderness(Duration::ZERO)
    }

    /// Reads each record's event time with `assigner(value, timestamp it carries)`. Without an
    /// assigner a record keeps the timestamp it carries (and one without any stays so, and does
    /// not advance the watermark).
    pub fn with_timestamp_assigner(
        mut self,
        assigner: impl Fn(&T, Option<i64>) -> i64 + Send + Sync + 'static,
    ) -> Self {
        self.assigner = Some(Arc::new(assigner));
        self
    }

    /// Marks the stream idle after `timeout` of processing time without records.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(millis(timeout).max(1));
        self
    }

    /// How often watermarks are emitted, on processing time (200 ms by default, Flink's
    /// `autoWatermarkInterval`).
    pub fn with_auto_watermark_interval(mut self, interval: Duration) -> Self {
        self.interval = millis(interval).max(1);
        self
    }

    /// The event time of `value`, which carries `timestamp`: the assigner's, or without one
    /// the timestamp carried.
    #[inline]
    pub fn extract_timestamp(&self, value: &T, timestamp: Option<i64>) -> Option<i64> {
        match &self.assigner {
            Some(assign) => Some(assign(value, timestamp)),
            None => timestamp,
        }
    }

    /// The out-of-orderness bound in milliseconds.
    pub fn out_of_orderness_millis(&self) -> i64 {
        self.out_of_orderness
    }

    /// The idleness timeout in milliseconds, if any.
    pub fn idleness_millis(&self) -> Option<i64> {
        self.idleness
    }

    /// The auto-watermark interval in milliseconds.
    pub fn interval_millis(&self) -> i64 {
        self.interval
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            out_of_orderness: self.out_of_orderness,
            assigner: self.assigner.clone(),
            idleness: self.idleness,
            interval: self.interval,
        }
    }
}

impl<T> fmt::Debug for WatermarkStrategy<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatermarkStrategy")
            .field("out_of_orderness_ms", &self.out_of_orderness)
            .field("assigner", &self.assigner.is_some())
            .field("idleness_ms", &self.idleness)
            .field("interval_ms", &self.interval)
            .finish()
    }
}

/// Assigns timestamps and generates watermarks by a [`WatermarkStrategy`]; see the module doc.
pub struct TimestampsAndWatermarks<T> {
    name: String,
    strategy: WatermarkStrategy<T>,
    max_timestamp: Option<i64>,
    emitted: Watermark,
    records_since_tick: bool,
    last_activity: i64,
    idle: bool,
    ended: bool,
}

impl<T> TimestampsAndWatermarks<T> {
    /// An operator named `name` following `strategy`.
    pub fn new(name: impl Into<String>, strategy: WatermarkStrategy<T>) -> Self {
        TimestampsAndWatermarks {
            name: name.into(),
            strategy,
            max_timestamp: None,
            emitted: Watermark::MIN,
            records_since_tick: false,
            last_activity: 0,
            idle: false,
            ended: false,
        }
    }

    /// The last watermark emitted.
    pub fn current_watermark(&self) -> Watermark {
        self.emitted
    }

    /// Whether the stream is marked idle.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    fn schedule_tick(&self, ctx: &Context<'_, T>) -> Result<(), OperatorError> {
        match ctx.register_timer(ctx.processing_time() + self.strategy.interval, 0) {
            // The task is ending: no more periodic watermarks (the final one is MAX).
            Err(TimerError::ShutDown) => Ok(()),
            other => other.map(|_| ()).map_err(OperatorError::from),
        }
    }

    fn emit_final(&mut self, ctx: &mut Context<'_, T>) -> Result<(), OperatorError> {
        self.ended = true;
        if self.emitted.is_max() {
            return Ok(());
        }
        if self.idle {
            self.idle = false;
            ctx.emit_status(StreamStatus::Active)?;
        }
        self.emitted = Watermark::MAX;
        ctx.emit_watermark(Watermark::MAX)
    }
}

impl<T: Send> Operator for TimestampsAndWatermarks<T> {
    type In = T;
    type Out = T;

    fn name(&self) -> &str {
        &self.name
    }

    fn open(&mut self, ctx: &mut Context<'_, T>) -> Result<(), OperatorError> {
        self.last_activity = ctx.processing_time();
        self.schedule_tick(ctx)
    }

    fn process_element(
        &mut self,
        record: StreamRecord<T>,
        ctx: &mut Context<'_, T>,
    ) -> Result<(), OperatorError> {
        let timestamp = self
            .strategy
            .extract_timestamp(&record.value, record.timestamp);
        if let Some(ts) = timestamp {
            self.max_timestamp = Some(self.max_timestamp.map_or(ts, |m| m.max(ts)));
        }
        self.records_since_tick = true;
        if self.idle {
            self.idle = false;
            ctx.emit_status(StreamStatus::Active)?;
        }
        ctx.collect(StreamRecord {
            value: record.value,
            timestamp,
        })
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        ctx: &mut Context<'_, T>,
    ) -> Result<(), OperatorError> {
        // The strategy's watermarks replace the upstream's; only the end of event time passes.
        if watermark.is_max() {
            self.emit_final(ctx)?;
        }
        Ok(())
    }

    fn process_status(
        &mut self,
        _status: StreamStatus,
        _ctx: &mut Context<'_, T>,
    ) -> Result<(), OperatorError> {
        // The strategy decides idleness from its own input.
        Ok(())
    }

    fn on_processing_time(
        &mut self,
        _timer: Timer,
        ctx: &mut Context<'_, T>,
    ) -> Result<(), OperatorError> {
        if self.ended {
            return Ok(());
        }
        let now = ctx.processing_time();
        if std::mem::take(&mut self.records_since_tick) {
            self.last_activity = now;
        }
        let idle_for = now - self.last_activity;
        if let Some(timeout) = self.strategy.idleness
            && !self.idle
            && idle_for >= timeout
        {
            self.idle = true;
            ctx.emit_status(StreamStatus::Idle)?;
        } else if !self.idle
            && let Some(max) = self.max_timestamp
        {
            let next = Watermark(max.saturating_sub(self.strategy.out_of_orderness + 1));
            if next > self.emitted {
                self.emitted = next;
                ctx.emit_watermark(next)?;
            }
        }
        self.schedule_tick(ctx)
    }

    fn end_input(&mut self, ctx: &mut Context<'_, T>) -> Result<(), OperatorError> {
        self.emit_final(ctx)
    }
}

impl<T> fmt::Debug for TimestampsAndWatermarks<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimestampsAndWatermarks")
            .field("name", &self.name)
            .field("strategy", &self.strategy)
            .field("emitted", &self.emitted)
            .field("idle", &self.idle)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::Emitted;
    use crate::testing::OperatorHarness;

    fn harness(idleness: Option<u64>) -> OperatorHarness<TimestampsAndWatermarks<i64>> {
        let mut strategy =
            WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(10))
                .with_timestamp_assigner(|v: &i64, _| *v)
                .with_auto_watermark_interval(Duration::from_millis(100));
        if let Some(ms) = idleness {
            strategy = strategy.with_idleness(Duration::from_millis(ms));
        }
        let mut h = OperatorHarness::new(TimestampsAndWatermarks::new("wm", strategy));
        h.open().unwrap();
        h
    }

    #[test]
    fn watermarks_are_periodic_and_only_advance() {
        let mut h = harness(None);
        h.process(50).unwrap();
        h.process(40).unwrap();
        // No watermark per record: only the tick emits one.
        assert_eq!(h.output().len(), 2);
        h.advance_processing_time(101).unwrap();
        assert_eq!(
            h.take_output().last(),
            Some(&Emitted::Watermark(Watermark(39)))
        );
        h.process(45).unwrap();
        h.advance_processing_time(101).unwrap();
        // The largest timestamp is still 50: no new watermark.
        assert_eq!(
            h.take_output(),
            vec![Emitted::Record(StreamRecord::with_timestamp(45, 45))]
        );
    }

    #[test]
    fn upstream_watermarks_are_replaced_but_the_end_of_event_time_passes_once() {
        let mut h = harness(None);
        h.process_watermark(Watermark(1_000)).unwrap();
        h.process_status(StreamStatus::Idle).unwrap();
        assert!(h.output().is_empty());
        h.process_watermark(Watermark::MAX).unwrap();
        h.end_input().unwrap();
        assert_eq!(h.take_output(), vec![Emitted::Watermark(Watermark::MAX)]);
    }

    #[test]
    fn end_of_input_emits_the_final_watermark() {
        let mut h = harness(None);
        h.process(7).unwrap();
        h.end_input().unwrap();
        assert_eq!(
            h.take_output(),
            vec![
                Emitted::Record(StreamRecord::with_timestamp(7, 7)),
                Emitted::Watermark(Watermark::MAX),
            ]
        );
        // Timers after the end do nothing.
        h.advance_processing_time(1_000).unwrap();
        assert!(h.output().is_empty());
    }

    #[test]
    fn a_stream_without_records_goes_idle_and_a_record_wakes_it() {
        let mut h = harness(Some(250));
        h.process(100).unwrap();
        h.advance_processing_time(101).unwrap(); // records seen: watermark 89
        h.advance_processing_time(101).unwrap(); // 100 ms quiet
        h.advance_processing_time(101).unwrap(); // 200 ms quiet
        assert!(!h.operator().is_idle());
        h.advance_processing_time(101).unwrap(); // 300 ms quiet: idle
        assert!(h.operator().is_idle());
        h.process(120).unwrap();
        assert_eq!(
            h.take_output(),
            vec![
                Emitted::Record(StreamRecord::with_timestamp(100, 100)),
                Emitted::Watermark(Watermark(89)),
                Emitted::Status(StreamStatus::Idle),
                Emitted::Status(StreamStatus::Active),
                Emitted::Record(StreamRecord::with_timestamp(120, 120)),
            ]
        );
        h.advance_processing_time(101).unwrap();
        assert_eq!(h.take_output(), vec![Emitted::Watermark(Watermark(109))]);
    }
}
