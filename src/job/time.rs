//! Event time after the source and time seen by map-like functions:
//! [`DataStream::assign_timestamps_and_watermarks`] and [`DataStream::map_with_context`].

use std::sync::Arc;

use streamtask_core::operator::{
    MapWithContext, RecordContext, TimestampsAndWatermarks, WatermarkStrategy,
};

use super::stream::DataStream;

/// The plan's name for the operator `assign_timestamps_and_watermarks` chains.
const ASSIGNER: &str = "timestamps/watermarks";

impl<T: Send + 'static> DataStream<T> {
    /// Gives every record its event time and generates watermarks by `strategy` (Flink's
    /// `assignTimestampsAndWatermarks`), chained where the stream is (right after the source,
    /// typically); the plan names it `timestamps/watermarks`.
    ///
    /// The strategy's watermarks replace the upstream's: watermarks and idleness coming from
    /// upstream are dropped, except the end of event time ([`Watermark::MAX`]), which passes
    /// once; at end of input the operator emits [`Watermark::MAX`] itself if it has not yet.
    /// Watermarks are emitted on processing time, every auto-watermark interval (200 ms by
    /// default); with idleness, a stream without records for that long is marked idle. See
    /// [`TimestampsAndWatermarks`].
    ///
    /// [`Watermark::MAX`]: streamtask_core::Watermark::MAX
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use streamtask::prelude::*;
    ///
    /// let env = StreamEnvironment::new(Model::Bridge);
    /// let out = CollectHandle::new();
    /// env.from_iter("events", vec![(1u32, 1_000i64), (2, 990)])
    ///     .assign_timestamps_and_watermarks(
    ///         WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(20))
    ///             .with_timestamp_assigner(|e: &(u32, i64), _| e.1),
    ///     )
    ///     .map_with_context("stamp", |e: (u32, i64), ctx: &RecordContext<'_>| (e.0, ctx.timestamp()))
    ///     .collect_sink("collect", &out);
    /// let dir = tempfile::tempdir().unwrap();
    /// env.build().unwrap().run(&JobConfig::new(dir.path())).unwrap();
    /// assert_eq!(out.committed(), [(1, Some(1_000)), (2, Some(990))]);
    /// ```
    pub fn assign_timestamps_and_watermarks(self, strategy: WatermarkStrategy<T>) -> DataStream<T> {
        self.then(
            ASSIGNER,
            Arc::new(move |_| Box::new(TimestampsAndWatermarks::new(ASSIGNER, strategy.clone()))),
        )
    }

    /// Applies `f(value, &ctx)` to every value, where `ctx` gives the record's timestamp, the
    /// operator's current watermark and the processing time (Flink's rich map / process
    /// context); the output keeps the input's timestamp.
    pub fn map_with_context<U, F>(self, name: &str, f: F) -> DataStream<U>
    where
        U: Send + 'static,
        F: Fn(T, &RecordContext<'_>) -> U + Clone + Send + Sync + 'static,
    {
        let name_owned = name.to_string();
        self.then(
            name,
            Arc::new(move |_| Box::new(MapWithContext::new(name_owned.clone(), f.clone()))),
        )
    }

    /// Ends the stream in the exactly-once file sink, formatting each record with
    /// `formatter(value, &ctx)`, so a line can carry the record's timestamp or the current
    /// watermark: a [`map_with_context`](Self::map_with_context) named `<name> format` chained
    /// before [`two_phase_file_sink`](Self::two_phase_file_sink).
    pub fn two_phase_file_sink_with_context<F>(
        self,
        name: &str,
        dir: impl Into<std::path::PathBuf>,
        formatter: F,
    ) where
        F: Fn(&T, &RecordContext<'_>) -> String + Clone + Send + Sync + 'static,
    {
        self.map_with_context(
            &format!("{name} format"),
            move |value: T, ctx: &RecordContext<'_>| formatter(&value, ctx),
        )
        .two_phase_file_sink(name, dir, String::clone);
    }
}
