//! The end-to-end duration of each checkpoint of a demo run, measured from the job's checkpoint
//! phases ([`JobPhase`]): from the trigger (the coordinator's trigger calls to the sources
//! returned; they only enqueue) to the completion at the coordinator (every task acknowledged
//! and the checkpoint stored, before the completion notices commit the sinks).
//!
//! The phases come on the coordinator's thread, which waits while they are recorded: a record
//! is a clock read and a push under a lock only this recorder takes.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use streamtask::JobPhase;
use streamtask_core::metrics::{LatencyHistogram, LatencySummary};
use streamtask_core::sync::Mutex;

/// One completed checkpoint's end-to-end duration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CheckpointEndToEnd {
    /// The checkpoint.
    pub id: u64,
    /// When it was triggered, in seconds since the run started.
    pub triggered_secs: f64,
    /// From its trigger to its completion at the coordinator, in microseconds.
    pub duration_us: u64,
}

/// What a run's checkpoints took end to end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndToEnd {
    /// Every completed checkpoint's duration.
    pub summary: LatencySummary,
    /// The first [`EndToEndRecorder::SERIES_CAPACITY`] completed checkpoints, in completion
    /// order.
    pub series: Vec<CheckpointEndToEnd>,
}

/// Records each checkpoint's trigger and completion phases of one run (every attempt).
#[derive(Debug)]
pub struct EndToEndRecorder {
    start: Instant,
    durations: LatencyHistogram,
    state: Mutex<Recorded>,
}

#[derive(Debug, Default)]
struct Recorded {
    /// Checkpoints triggered and not completed yet. Completing one drops it and every older
    /// one (those were subsumed or aborted), so this holds at most the pending checkpoints.
    triggered: BTreeMap<u64, Instant>,
    series: Vec<CheckpointEndToEnd>,
}

impl EndToEndRecorder {
    /// Checkpoints the series keeps (the first ones of the run; the summary counts them all):
    /// a run that checkpoints every 50 ms fills it after about seven minutes.
    pub const SERIES_CAPACITY: usize = 8192;

    /// A recorder whose run starts now.
    pub fn new() -> Self {
        EndToEndRecorder {
            start: Instant::now(),
            durations: LatencyHistogram::new(),
            state: Mutex::new(Recorded::default()),
        }
    }

    /// Records `phase` as of now.
    pub fn on_phase(&self, phase: JobPhase) {
        let now = Instant::now();
        let mut state = self.state.lock();
        match phase {
            JobPhase::CheckpointTriggered { id } => {
                state.triggered.insert(id, now);
            }
            JobPhase::CheckpointCommitting { id } => {
                let Some(&triggered) = state.triggered.get(&id) else {
                    return;
                };
                state.triggered.retain(|&pending, _| pending > id);
                let duration_us =
                    u64::try_from(now.duration_since(triggered).as_micros()).unwrap_or(u64::MAX);
                self.durations.record_micros(duration_us);
                if state.series.len() < Self::SERIES_CAPACITY {
                    let triggered_secs = triggered.duration_since(self.start).as_secs_f64();
                    state.series.push(CheckpointEndToEnd {
                        id,
                        triggered_secs,
                        duration_us,
                    });
                }
            }
            _ => {}
        }
    }

    /// What was recorded so far.
    pub fn end_to_end(&self) -> EndToEnd {
        EndToEnd {
            summary: self.durations.summary(),
            series: self.state.lock().series.clone(),
        }
    }
}

impl Default for EndToEndRecorder {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_checkpoints_are_recorded_aborted_ones_are_not() {
        let recorder = EndToEndRecorder::new();
        recorder.on_phase(JobPhase::CheckpointTriggered { id: 1 });
        // Checkpoint 1 is aborted: 2 completes first.
        recorder.on_phase(JobPhase::CheckpointTriggered { id: 2 });
        recorder.on_phase(JobPhase::CheckpointCommitting { id: 2 });
        // A late notice of 1 (already dropped) records nothing.
        recorder.on_phase(JobPhase::CheckpointCommitting { id: 1 });
        recorder.on_phase(JobPhase::CheckpointTriggered { id: 3 });
        recorder.on_phase(JobPhase::CheckpointCommitting { id: 3 });
        let recorded = recorder.end_to_end();
        assert_eq!(recorded.summary.count, 2);
        let ids: Vec<u64> = recorded.series.iter().map(|c| c.id).collect();
        assert_eq!(ids, [2, 3]);
        assert!(recorded.series[0].triggered_secs <= recorded.series[1].triggered_secs);
        assert!(recorder.state.lock().triggered.is_empty());
    }
}
