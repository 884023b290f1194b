//! streamtask-timely: run a streamtask job on timely-dataflow workers, in one process or across
//! processes, exactly once through a crash.
//!
//! A [`TimelyJob`] is a documented subset of the job shapes the local executor runs: a
//! [`SplitSource`], a chain of `streamtask_core` operators behind it, a `key_by` (an exchange by
//! key group: the local executor's assignment, max parallelism 128), a keyed chain (a
//! `KeyedProcessOperator` with keyed state, event-time and processing-time timers, and whatever
//! follows it, an async operator included) and the job library's
//! [`TwoPhaseCommitFileSink`](streamtask::sink::TwoPhaseCommitFileSink).
//! [`run`] runs it on `W` worker threads per process and `P` processes
//! ([`TimelyConfig::cluster`]); worker `w` is subtask `w` of every vertex. The same job for the
//! local executor commits the same lines ([`sample`] has one, used by the tests; the
//! `streamtask` CLI's demo job runs on timely this way, `streamtask run --engine timely`).
//!
//! A hosted chain sees the local executor's services: a processing-time clock reading the wall
//! clock, whose due timers fire when the hosting operator is activated (the keyed operator
//! activates itself every millisecond while timers are pending), and events from other threads
//! (an async operator's completions), queued and delivered on the worker's thread, each one
//! activating the keyed operator through timely's `SyncActivator`. A keyed chain that takes no
//! input (an async operator with a full queue) holds the rest of its epoch until completions
//! free room. The calls in flight when an epoch's input is done are in that epoch's snapshot,
//! as in the local executor's, and are called again on restore: the async operator already
//! snapshots its inputs in flight, and draining them instead would hold every epoch's end (and
//! the next epoch's input) for the slowest call. The last epoch waits for every call, so its
//! checkpoint commits everything.
//!
//! Checkpoints are epochs: the timestamp of every record is its source's epoch, the source
//! starts a new one every checkpoint interval, and an operator snapshots its chain for epoch
//! `k` once its input frontier passed `k`. Snapshots use the local executor's encoding and its
//! [`CheckpointStorage`](streamtask::checkpoint::CheckpointStorage) (atomic writes, a CRC
//! manifest), stored by worker 0; the sinks commit when every worker's probe passed `k`. A run
//! restores the latest complete checkpoint in its directory. The protocol is described in the
//! engine's module doc (`run.rs`).
//!
//! # Savepoints
//!
//! Savepoints move a job between the local executor and a timely run, both ways, rescaled by
//! key group.
//!
//! A timely run's checkpoint already is a local executor's checkpoint of the same job: the
//! same task snapshots, entry keys and state encodings. What a savepoint adds is its shape:
//! per vertex, its parallelism and the operator id of every entry, so a restore finds each
//! operator's state wherever it sits and moves it to the new parallelism. The two sides use the
//! local executor's savepoint format ([`Savepoint`](streamtask::checkpoint::Savepoint)) and
//! its restore ([`rescale_savepoint`](streamtask::rescale_savepoint)): there is one rescale.
//!
//! ## The mapping
//!
//! | timely | local executor (`sample::local_job`) | operator ids |
//! |---|---|---|
//! | worker `w` of `n` (over all processes) | subtask `w` of every vertex at parallelism `n` | - |
//! | task `<source name>#<w>`: `source` | source vertex `<source name>`, a [`SplitReader`]: `source` | the source's name |
//! | the source's chain: `operator-<i>` | the source vertex's chained operators: `operator-<i>` | each operator's name |
//! | task `<keyed name>#<w>`: `operator-0` | the keyed vertex `<keyed name>`: `operator-0` | the keyed operator's name |
//! | the sink: `operator-<last>`, named `<keyed name> sink` | `two_phase_file_sink("<keyed name> sink", ..)` | `<keyed name> sink` |
//!
//! [`savepoint_shape`] writes this shape; the operator ids are the operators' names (a timely
//! job has no `uid`s), so the local job must give its operators the same names and no uids.
//!
//! | state | how it moves to another worker count / parallelism |
//! |---|---|
//! | the source's position: [`ListState`](streamtask_core::keygroup::ListState) of [`SplitOffset`] | concatenated, split evenly: each split read on from its offset by one reader |
//! | the keyed operator's state and event-time timers | by key group, to the worker whose range holds it (max parallelism 128) |
//! | the sink's transactions (union state) | to every worker, which commits the ones the savepoint pre-committed |
//! | the source chain's state | same parallelism only, unless list, union or keyed state |
//!
//! ## Taking one
//!
//! [`TimelyConfig::stop_with_savepoint`] stops the sources after epoch `k` (no end of input:
//! no final watermark, no end of the operators' input, as the local executor's stop without
//! drain), lets checkpoint `k` complete and commit, and writes it as a savepoint
//! ([`RunSummary::savepoint`]).
//!
//! ## Restoring one
//!
//! [`TimelyConfig::from_savepoint`] restores a savepoint (the local executor's or a timely
//! run's) at the run's worker count when the checkpoint directory holds no complete
//! checkpoint; once the run completed one, a restart restores that instead (a crash after the
//! restore neither replays the savepoint's output nor loses what followed it). A savepoint of
//! another job or of other input is refused with a typed error naming the fix.
//!
//! # Limits
//!
//! - **No fault tolerance inside timely**: a lost process stops the others (timely's
//!   connections fail); every process is started again and restores the last complete epoch.
//! - **No runtime rescale**: a checkpoint restores at its number of workers; a job changes its
//!   worker count, or moves to and from the local executor, through a savepoint
//!   ([`TimelyConfig::from_savepoint`], [`TimelyConfig::stop_with_savepoint`]; see
//!   "Savepoints" above).
//! - **No unaligned checkpoints**: the frontier is the alignment, so a checkpoint waits for every
//!   record of its epoch.
//! - **No flow control in timely**: a source reads on only while the probe shows checkpoint
//!   `epoch - 2` complete, and an epoch holds at most
//!   [`max_epoch_records`](TimelyConfig::max_epoch_records) per source worker, so at most two
//!   epochs are in flight.
//! - Only the shape above: no legacy `SourceFunction` (a source is a [`SplitSource`]), no side
//!   outputs, one keyed stage. An async operator belongs in the keyed chain: the source's chain
//!   is not woken by completions and does not wait for them at its end. The source chain's
//!   processing-time timers fire only while it reads (it is activated for each batch).
//! - Processing-time timers fire up to about a millisecond late (the timer service is polled,
//!   it has no deadline to wake at).
//! - Watermarks travel in the data (each source worker's bounded out-of-orderness watermark,
//!   the minimum over its splits not yet read to the end, and the minimum over the source
//!   workers at the keyed stage), not in the timestamps.
//! - Checkpoint and sink directories must be shared by every process (one machine here).
//!
//! # Examples
//!
//! ```
//! use streamtask_timely::sample::{timely_job, write_input};
//! use streamtask_timely::{TimelyConfig, run};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let inputs = write_input(&dir.path().join("in"), 2, 50).unwrap();
//! let out = dir.path().join("out");
//! let config = TimelyConfig::new(dir.path().join("checkpoints")).workers(2);
//! let summary = run(timely_job(inputs, &out), &config).unwrap();
//! assert_eq!(summary.records_read, 100);
//! let committed = streamtask::sink::read_committed(&out).unwrap();
//! assert!(committed.iter().any(|line| line.starts_with("win,")));
//! ```

#![forbid(unsafe_code)]

mod cluster;
mod config;
mod error;
mod host;
mod job;
mod run;
pub mod sample;
mod savepoint;
mod split;

pub use crate::cluster::{Cluster, completed_checkpoints, read_hostfile};
pub use crate::config::TimelyConfig;
pub use crate::error::TimelyError;
pub use crate::job::{LineFiles, SplitRecords, SplitSource, TimelyJob};
pub use crate::run::{RunSummary, run};
pub use crate::savepoint::savepoint_shape;
pub use crate::split::{SplitOffset, SplitReader};
