//! Which files are new (the monitoring source): documented on the [`files`](crate::files) module, since this module is private.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use streamtask_core::{OperatorError, time::Clock, time::Period, time::Timer, time::TimerService};
use streamtask_legacy::{SourceContext, SourceFunction};
use streamtask_runtime::{Rearm, TimerScheduler};

use super::split::FileSplit;
use crate::fault::{FaultKind, FaultPlan};

/// What the monitoring source checkpoints: how far its modification-time rule got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonitorState {
    /// The largest modification time (ns since the epoch) among the files forwarded.
    pub max_modified: i128,
    /// The forwarded files whose modification time is `max_modified`.
    pub at_max: BTreeSet<PathBuf>,
    /// How many files were forwarded in all.
    pub files: u64,
}

impl Default for MonitorState {
    fn default() -> Self {
        MonitorState {
            max_modified: i128::MIN,
            at_max: BTreeSet::new(),
            files: 0,
        }
    }
}

impl MonitorState {
    /// Whether a file modified at `modified` is new by the rule.
    pub fn is_new(&self, path: &Path, modified: i128) -> bool {
        modified > self.max_modified
            || (modified == self.max_modified && !self.at_max.contains(path))
    }

    /// Records that a file was forwarded.
    pub fn forwarded(&mut self, path: PathBuf, modified: i128) {
        if modified > self.max_modified {
            self.max_modified = modified;
            self.at_max.clear();
        }
        if modified == self.max_modified {
            self.at_max.insert(path);
        }
        self.files += 1;
    }
}

/// A listed file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Listed {
    pub(crate) modified: i128,
    pub(crate) path: PathBuf,
    pub(crate) len: u64,
}

/// The files of `dir` (not its subdirectories, nor names starting with `.` or `_`), oldest
/// first: the one listing both the monitoring source and the continuous FLIP-27 enumerator
/// use.
pub(crate) fn list_dir(dir: &Path) -> std::io::Result<Vec<Listed>> {
    let mut listed = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let hidden = name
            .to_str()
            .is_none_or(|n| n.starts_with('.') || n.starts_with('_'));
        // The file may be gone between the listing and this: skip it.
        let Ok(meta) = entry.metadata() else { continue };
        if hidden || !meta.is_file() {
            continue;
        }
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        listed.push(Listed {
            modified,
            path: entry.path(),
            len: meta.len(),
        });
    }
    listed.sort();
    Ok(listed)
}

/// The monitoring source: a legacy [`SourceFunction`] of [`FileSplit`]s (so it runs under every
/// model: on the task thread, on its own thread in the bridge, through a handoff in the mailbox
/// model).
pub struct FileMonitor {
    name: String,
    dir: PathBuf,
    interval: Duration,
    split_bytes: u64,
    stop_after_files: Option<u64>,
    faults: Arc<FaultPlan>,
}

impl FileMonitor {
    /// A source named `name` watching `dir` every `interval`, cutting files into splits of at
    /// most `split_bytes`; it ends once `stop_after_files` files were forwarded (never, for
    /// `None`). `faults` are checked (as [`FaultKind::Source`]) before each file is forwarded.
    pub fn new(
        name: String,
        dir: PathBuf,
        interval: Duration,
        split_bytes: u64,
        stop_after_files: Option<u64>,
        faults: Arc<FaultPlan>,
    ) -> Self {
        FileMonitor {
            name,
            dir,
            interval,
            split_bytes,
            stop_after_files,
            faults,
        }
    }

    fn done(&self, state: &MonitorState) -> bool {
        self.stop_after_files.is_some_and(|n| state.files >= n)
    }

    fn list(&self) -> Result<Vec<Listed>, OperatorError> {
        list_dir(&self.dir).map_err(|e| OperatorError::user(&self.name, e))
    }
}

enum Tick {
    Listing(Option<Rearm>),
    Cancelled,
}

impl SourceFunction for FileMonitor {
    type Out = FileSplit;
    type State = MonitorState;

    fn name(&self) -> &str {
        &self.name
    }

    fn run(
        &mut self,
        ctx: &mut SourceContext<'_, FileSplit, MonitorState>,
    ) -> Result<(), OperatorError> {
        let (ticks, tick_rx) = crossbeam::channel::unbounded::<Tick>();
        let cancel_ticks = ticks.clone();
        let _hook = ctx.on_cancel(move || {
            let _ = cancel_ticks.send(Tick::Cancelled);
        });
        // The listing timer: the runtime's scheduler, fixed delay, re-armed when a listing is done.
        let timers = TimerScheduler::spawn_deferred(
            &format!("{}-listing", self.name),
            Clock::System,
            move |_timer: Timer, rearm: Option<Rearm>| -> Result<(), std::convert::Infallible> {
                // Refused only once the source returned: the series ends with the dropped rearm.
                let _ = ticks.send(Tick::Listing(rearm));
                Ok(())
            },
            |never| match never {},
        );
        let interval = i64::try_from(self.interval.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        let first = Timer {
            operator: 0,
            timestamp: timers.current_processing_time() - 1,
            tag: 0,
        };
        timers.register_periodic(first, Period::FixedDelay(interval))?;
        let mut state = ctx.lock().state().clone();
        while !ctx.is_cancelled() && !self.done(&state) {
            let rearm = match tick_rx.recv() {
                Ok(Tick::Listing(rearm)) => rearm,
                Ok(Tick::Cancelled) | Err(_) => break,
            };
            for file in self.list()? {
                if !state.is_new(&file.path, file.modified) || self.done(&state) {
                    continue;
                }
                self.faults.check(FaultKind::Source);
                let splits = FileSplit::of_file(
                    file.path.clone(),
                    file.modified,
                    file.len,
                    self.split_bytes,
                );
                // The file's splits and the state that says it was forwarded, in one section.
                let mut locked = ctx.lock();
                for split in splits {
                    locked.collect(split)?;
                }
                locked.state_mut().forwarded(file.path, file.modified);
                state = locked.state().clone();
            }
            if let Some(rearm) = rearm {
                rearm.done();
            }
        }
        timers.shutdown();
        Ok(())
    }
}

impl fmt::Debug for FileMonitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileMonitor")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_modification_time_rule_takes_newer_files_and_unseen_ones_at_the_maximum() {
        let mut state = MonitorState::default();
        let (a, b, c) = (PathBuf::from("a"), PathBuf::from("b"), PathBuf::from("c"));
        assert!(state.is_new(&a, 10));
        state.forwarded(a.clone(), 10);
        assert!(!state.is_new(&a, 10), "seen");
        assert!(
            state.is_new(&b, 10),
            "same time, another name: new (Flink would skip it)"
        );
        state.forwarded(b.clone(), 10);
        assert!(
            !state.is_new(&c, 9),
            "older than the maximum: never read (Flink's limit)"
        );
        assert!(
            state.is_new(&a, 11),
            "appended to (newer time): read again, all of it"
        );
        state.forwarded(a.clone(), 11);
        assert_eq!(state.at_max, BTreeSet::from([a]));
        assert_eq!(state.files, 3);
    }
}
