//! The three source-context flavours (Flink's `StreamSourceContexts`): what `collect`,
//! `emit_watermark` and `mark_as_temporarily_idle` do under each [`TimeCharacteristic`], and
//! idleness detection.
//!
//! | flavour | record timestamps | user watermarks | automatic watermarks | idleness |
//! |---|---|---|---|---|
//! | `ProcessingTime` | none | ignored | none | `mark_as_temporarily_idle` ignored |
//! | `IngestionTime` | processing time at `collect` | only `Watermark::MAX` | aligned to the interval, on a timer and on `collect` | yes |
//! | `EventTime` | the user's | all | none | yes |
//!
//! Everything here runs under the checkpoint lock: the source's emits, and the context's own
//! timers (automatic watermarks, idleness checks), which fire under the lock like every timer
//! and are routed here because they name [`CONTEXT_TIMER_OPERATOR`].
//!
//! Idleness (when a timeout is set): every emit marks the stream active and either clears the
//! pending check's "fail" flag or schedules a check `timeout` from now; a check that finds its
//! flag still set marks the stream idle. Under ingestion time the watermark timer also marks the
//! stream idle when no record came for longer than the timeout.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use streamtask_core::{
    OperatorError, StreamRecord, StreamStatus, Watermark, time::Timer, time::TimerHandle,
    time::TimerService,
};

use super::SourceOutput;

/// The chain index that source-context timers carry; a task's timer dispatch routes timers with
/// this index to [`SourceCell::on_context_timer`](super::SourceCell::on_context_timer).
pub const CONTEXT_TIMER_OPERATOR: usize = usize::MAX;

const KIND_WATERMARK: u64 = 0;
const KIND_IDLE_CHECK: u64 = 1;

/// How a source's records get their timestamps and watermarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimeCharacteristic {
    /// No timestamps; watermarks and idleness marks are ignored (Flink's default).
    #[default]
    ProcessingTime,
    /// Timestamps are the processing time at `collect`; watermarks are automatic.
    IngestionTime,
    /// Timestamps and watermarks are the source's own.
    EventTime,
}

/// A source-context setting is out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ContextConfigError {
    /// The watermark interval is shorter than a millisecond.
    #[error("the watermark interval must be at least 1 ms; use a longer interval")]
    WatermarkInterval,
    /// The idle timeout is shorter than a millisecond.
    #[error("the idle timeout must be at least 1 ms; use a longer timeout or none")]
    IdleTimeout,
}

/// The source context's flavour, watermark interval and idle timeout.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use streamtask_legacy::{SourceContextConfig, TimeCharacteristic};
///
/// let config = SourceContextConfig::ingestion_time(Duration::from_millis(200))
///     .unwrap()
///     .with_idle_timeout(Duration::from_secs(5))
///     .unwrap();
/// assert_eq!(config.time(), TimeCharacteristic::IngestionTime);
/// assert_eq!(config.idle_timeout_ms(), Some(5_000));
/// assert!(SourceContextConfig::ingestion_time(Duration::ZERO).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceContextConfig {
    time: TimeCharacteristic,
    watermark_interval_ms: i64,
    idle_timeout_ms: Option<i64>,
}

impl SourceContextConfig {
    /// No timestamps, no watermarks.
    pub fn processing_time() -> Self {
        SourceContextConfig {
            time: TimeCharacteristic::ProcessingTime,
            watermark_interval_ms: 200,
            idle_timeout_ms: None,
        }
    }

    /// The source's own timestamps and watermarks.
    pub fn event_time() -> Self {
        SourceContextConfig {
            time: TimeCharacteristic::EventTime,
            ..SourceContextConfig::processing_time()
        }
    }

    /// Processing-time timestamps and automatic watermarks every `watermark_interval`, aligned
    /// to multiples of it.
    ///
    /// # Errors
    ///
    /// [`ContextConfigError::WatermarkInterval`] if the interval is under 1 ms.
    pub fn ingestion_time(watermark_interval: Duration) -> Result<Self, ContextConfigError> {
        let ms = millis(watermark_interval).ok_or(ContextConfigError::WatermarkInterval)?;
        Ok(SourceContextConfig {
            time: TimeCharacteristic::IngestionTime,
            watermark_interval_ms: ms,
            idle_timeout_ms: None,
        })
    }

    /// Marks the stream idle after `timeout` without emits (ignored under processing time).
    ///
    /// # Errors
    ///
    /// [`ContextConfigError::IdleTimeout`] if the timeout is under 1 ms.
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Result<Self, ContextConfigError> {
        self.idle_timeout_ms = Some(millis(timeout).ok_or(ContextConfigError::IdleTimeout)?);
        Ok(self)
    }

    /// The flavour.
    pub fn time(&self) -> TimeCharacteristic {
        self.time
    }

    /// The automatic watermark interval in milliseconds (used under ingestion time).
    pub fn watermark_interval_ms(&self) -> i64 {
        self.watermark_interval_ms
    }

    /// The idle timeout in milliseconds, if idleness detection is on.
    pub fn idle_timeout_ms(&self) -> Option<i64> {
        self.idle_timeout_ms
    }
}

impl Default for SourceContextConfig {
    fn default() -> Self {
        SourceContextConfig::processing_time()
    }
}

fn millis(d: Duration) -> Option<i64> {
    let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    (ms >= 1).then_some(ms)
}

/// A context timer the emission expects, so stale or cancelled ones are ignored when they fire.
#[derive(Debug, Clone, Copy)]
struct Pending {
    handle: TimerHandle,
    seq: u64,
}

/// The context's bookkeeping, kept under the checkpoint lock next to the source's state: stream
/// status, pending idleness check, automatic watermark progress.
pub struct Emission {
    config: SourceContextConfig,
    timers: Arc<dyn TimerService>,
    status: StreamStatus,
    started: bool,
    next_seq: u64,
    // Idleness detection (Flink's `nextCheck` / `failOnNextCheck`).
    idle_check: Option<Pending>,
    fail_on_next_check: bool,
    // Ingestion time (Flink's `nextWatermarkTimer` / `nextWatermarkTime` / `lastRecordTime`).
    watermark_timer: Option<Pending>,
    next_watermark_time: i64,
    last_record_time: Option<i64>,
}

impl Emission {
    /// The bookkeeping of a context configured by `config`, reading time from and registering
    /// its timers with `timers`.
    pub fn new(config: SourceContextConfig, timers: Arc<dyn TimerService>) -> Self {
        Emission {
            config,
            timers,
            status: StreamStatus::Active,
            started: false,
            next_seq: 0,
            idle_check: None,
            fail_on_next_check: false,
            watermark_timer: None,
            next_watermark_time: 0,
            last_record_time: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SourceContextConfig {
        &self.config
    }

    /// The stream status last emitted (active until the first idle mark).
    pub fn status(&self) -> StreamStatus {
        self.status
    }

    /// The current processing time.
    pub fn processing_time(&self) -> i64 {
        self.timers.current_processing_time()
    }

    /// Starts the context's timers (the first idleness check, the watermark timer), as Flink's
    /// context constructors do. Idempotent.
    pub(crate) fn start(&mut self) -> Result<(), OperatorError> {
        if self.started || self.config.time == TimeCharacteristic::ProcessingTime {
            self.started = true;
            return Ok(());
        }
        self.started = true;
        self.schedule_idle_check()?;
        if self.config.time == TimeCharacteristic::IngestionTime {
            let now = self.timers.current_processing_time();
            self.schedule_watermark(now.saturating_add(self.config.watermark_interval_ms))?;
        }
        Ok(())
    }

    /// Cancels the context's pending timers (Flink's `close()`).
    pub(crate) fn close(&mut self) {
        if let Some(p) = self.idle_check.take() {
            self.timers.cancel_timer(p.handle);
        }
        if let Some(p) = self.watermark_timer.take() {
            self.timers.cancel_timer(p.handle);
        }
    }

    pub(crate) fn collect<T, O: SourceOutput<T> + ?Sized>(
        &mut self,
        out: &mut O,
        value: T,
        timestamp: Option<i64>,
    ) -> Result<(), OperatorError> {
        match self.config.time {
            TimeCharacteristic::ProcessingTime => out.collect(StreamRecord::new(value)),
            TimeCharacteristic::EventTime => {
                self.on_activity(out)?;
                out.collect(StreamRecord { value, timestamp })
            }
            TimeCharacteristic::IngestionTime => {
                self.on_activity(out)?;
                let now = self.timers.current_processing_time();
                self.last_record_time = Some(now);
                out.collect(StreamRecord::with_timestamp(value, now))?;
                // Emit the aligned watermark now rather than waiting for the timer, which would
                // have to contend for the lock (as Flink does).
                if now > self.next_watermark_time {
                    let watermark = self.aligned(now);
                    self.next_watermark_time =
                        watermark.saturating_add(self.config.watermark_interval_ms);
                    out.emit_watermark(Watermark(watermark))?;
                }
                Ok(())
            }
        }
    }

    pub(crate) fn emit_watermark<T, O: SourceOutput<T> + ?Sized>(
        &mut self,
        out: &mut O,
        watermark: Watermark,
    ) -> Result<(), OperatorError> {
        match self.config.time {
            TimeCharacteristic::ProcessingTime => Ok(()),
            TimeCharacteristic::EventTime => {
                self.on_activity(out)?;
                out.emit_watermark(watermark)
            }
            TimeCharacteristic::IngestionTime => {
                // Only the end of event time gets through (a source finishing early, say).
                if !watermark.is_max() || self.next_watermark_time == i64::MAX {
                    return Ok(());
                }
                self.on_activity(out)?;
                self.next_watermark_time = i64::MAX;
                out.emit_watermark(watermark)?;
                // No automatic watermark can follow MAX.
                if let Some(p) = self.watermark_timer.take() {
                    self.timers.cancel_timer(p.handle);
                }
                Ok(())
            }
        }
    }

    pub(crate) fn mark_idle<T, O: SourceOutput<T> + ?Sized>(
        &mut self,
        out: &mut O,
    ) -> Result<(), OperatorError> {
        if self.config.time == TimeCharacteristic::ProcessingTime {
            return Ok(());
        }
        self.set_status(out, StreamStatus::Idle)
    }

    /// A context timer fired (under the lock).
    pub(crate) fn on_timer<T, O: SourceOutput<T> + ?Sized>(
        &mut self,
        out: &mut O,
        timer: Timer,
    ) -> Result<(), OperatorError> {
        let (kind, seq) = (timer.tag & 1, timer.tag >> 1);
        match kind {
            KIND_IDLE_CHECK => {
                if self.idle_check.is_none_or(|p| p.seq != seq) {
                    return Ok(()); // cancelled or superseded
                }
                self.idle_check = None;
                if self.fail_on_next_check {
                    self.set_status(out, StreamStatus::Idle)
                } else {
                    self.schedule_idle_check()
                }
            }
            _ => {
                if self.watermark_timer.is_none_or(|p| p.seq != seq) {
                    return Ok(());
                }
                self.watermark_timer = None;
                let now = self.timers.current_processing_time();
                if self.status == StreamStatus::Active {
                    let idle_for = self.last_record_time.map(|t| now.saturating_sub(t));
                    match (self.config.idle_timeout_ms, idle_for) {
                        // Piggy-back idleness detection on the watermark interval. A source
                        // that never emitted is left to the idleness check (as in Flink).
                        (Some(timeout), Some(idle_for)) if idle_for > timeout => {
                            self.set_status(out, StreamStatus::Idle)?;
                            if let Some(p) = self.idle_check.take() {
                                self.timers.cancel_timer(p.handle);
                            }
                        }
                        _ if now > self.next_watermark_time => {
                            // Aligned, so watermarks do not creep across machines.
                            let watermark = self.aligned(now);
                            out.emit_watermark(Watermark(watermark))?;
                            self.next_watermark_time =
                                watermark.saturating_add(self.config.watermark_interval_ms);
                        }
                        _ => {}
                    }
                }
                self.schedule_watermark(now.saturating_add(self.config.watermark_interval_ms))
            }
        }
    }

    fn aligned(&self, now: i64) -> i64 {
        now - now.rem_euclid(self.config.watermark_interval_ms)
    }

    fn on_activity<T, O: SourceOutput<T> + ?Sized>(
        &mut self,
        out: &mut O,
    ) -> Result<(), OperatorError> {
        self.set_status(out, StreamStatus::Active)?;
        if self.config.idle_timeout_ms.is_some() {
            if self.idle_check.is_some() {
                self.fail_on_next_check = false;
            } else {
                self.schedule_idle_check()?;
            }
        }
        Ok(())
    }

    fn set_status<T, O: SourceOutput<T> + ?Sized>(
        &mut self,
        out: &mut O,
        status: StreamStatus,
    ) -> Result<(), OperatorError> {
        if self.status != status {
            self.status = status;
            out.emit_status(status)?;
        }
        Ok(())
    }

    fn schedule_idle_check(&mut self) -> Result<(), OperatorError> {
        let Some(timeout) = self.config.idle_timeout_ms else {
            return Ok(());
        };
        self.fail_on_next_check = true;
        let at = self
            .timers
            .current_processing_time()
            .saturating_add(timeout);
        self.idle_check = Some(self.register(at, KIND_IDLE_CHECK)?);
        Ok(())
    }

    fn schedule_watermark(&mut self, at: i64) -> Result<(), OperatorError> {
        self.watermark_timer = Some(self.register(at, KIND_WATERMARK)?);
        Ok(())
    }

    fn register(&mut self, at: i64, kind: u64) -> Result<Pending, OperatorError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let handle = self.timers.register_timer(Timer {
            operator: CONTEXT_TIMER_OPERATOR,
            timestamp: at,
            tag: (seq << 1) | kind,
        })?;
        Ok(Pending { handle, seq })
    }
}

impl fmt::Debug for Emission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Emission")
            .field("config", &self.config)
            .field("status", &self.status)
            .field("next_watermark_time", &self.next_watermark_time)
            .finish_non_exhaustive()
    }
}
