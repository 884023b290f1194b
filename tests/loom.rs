//! Loom models of the job layer's concurrency protocols, one `mod` per concept. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p streamtask --test loom`.
#![cfg(loom)]

/// The checkpoint coordinator's trigger/ack/timeout race (`checkpoint::CheckpointCoordinator`),
/// through its public API. The coordinator is a state machine that whoever drives it serializes
/// (the driver thread does); here each event runs under one lock from its own thread, reading
/// the shared manual clock inside the lock as the driver does, so loom tries every order of the
/// acknowledgements and the timeout poll.
mod coordinator {
    use std::time::Duration;

    use streamtask::checkpoint::{AbortReason, CoordinatorAction};
    use streamtask::{
        checkpoint::CheckpointConfig, checkpoint::CheckpointCoordinator,
        checkpoint::CheckpointStorage,
    };
    use streamtask_core::sync::{Arc, Mutex, thread};
    use streamtask_core::task::TaskReport;
    use streamtask_core::{state::TaskSnapshot, time::ManualClock};

    struct Driven {
        coordinator: Mutex<CheckpointCoordinator>,
        clock: ManualClock,
        // Every action the coordinator returned, in the order it returned them.
        actions: Mutex<Vec<CoordinatorAction>>,
        // The processing time each acknowledgement was received at.
        ack_times: Mutex<Vec<i64>>,
    }

    impl Driven {
        fn ack(&self, task: &str, checkpoint: u64) {
            let mut coordinator = self.coordinator.lock();
            let now = self.clock.now_millis();
            let report = TaskReport::Acknowledged {
                task: task.to_string(),
                checkpoint,
                snapshot: TaskSnapshot::new(),
            };
            let actions = coordinator.receive(report, now).unwrap();
            self.actions.lock().extend(actions);
            self.ack_times.lock().push(now);
        }

        fn poll(&self) {
            let mut coordinator = self.coordinator.lock();
            let now = self.clock.now_millis();
            let actions = coordinator.poll(now);
            self.actions.lock().extend(actions);
        }
    }

    /// The last acknowledgement racing the timeout: checkpoint 1 ends exactly once, completed
    /// (and stored) if both acknowledgements came before the deadline, otherwise aborted as
    /// expired (and not stored); an acknowledgement received at or after the deadline is
    /// ignored, never completes it.
    #[test]
    fn the_last_ack_racing_the_timeout_ends_the_checkpoint_once() {
        loom::model(|| {
            let clock = ManualClock::new(0);
            let config = CheckpointConfig::new(Duration::from_millis(10))
                .with_timeout(Duration::from_millis(10))
                .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES);
            let coordinator = CheckpointCoordinator::new(
                config,
                CheckpointStorage::in_memory(1).unwrap(),
                ["a", "b"],
                ["a"],
                0,
            )
            .unwrap();
            let driven = Arc::new(Driven {
                coordinator: Mutex::new(coordinator),
                clock: clock.clone(),
                actions: Mutex::new(Vec::new()),
                ack_times: Mutex::new(Vec::new()),
            });
            clock.set(10);
            driven.poll(); // triggers checkpoint 1; it expires at 20
            assert_eq!(driven.coordinator.lock().pending_ids(), vec![1]);

            let acker = {
                let driven = Arc::clone(&driven);
                thread::spawn(move || driven.ack("b", 1))
            };
            let timer = {
                let driven = Arc::clone(&driven);
                thread::spawn(move || {
                    driven.clock.set(20);
                    driven.poll();
                })
            };
            driven.ack("a", 1);
            acker.join().unwrap();
            timer.join().unwrap();

            let actions = driven.actions.lock();
            let ends: Vec<&CoordinatorAction> = actions
                .iter()
                .filter(|a| !matches!(a, CoordinatorAction::Trigger(_)))
                .collect();
            assert_eq!(ends.len(), 1, "checkpoint 1 ended once: {actions:?}");
            let stored = driven.coordinator.lock().latest_completed().unwrap();
            match ends[0] {
                CoordinatorAction::Complete { id: 1 } => {
                    assert_eq!(stored.map(|c| c.id), Some(1));
                    let times = driven.ack_times.lock();
                    assert!(
                        times.iter().all(|&t| t < 20),
                        "completed by an acknowledgement received after the deadline: {:?}",
                        *times
                    );
                }
                CoordinatorAction::Abort {
                    id: 1,
                    reason: AbortReason::Expired,
                } => assert!(stored.is_none(), "an expired checkpoint was stored"),
                other => panic!("unexpected end of checkpoint 1: {other:?}"),
            }
            // The poll at 20 also found checkpoint 2 due (one interval after 1), whichever way
            // checkpoint 1 ended: it triggers after the end of 1, never alongside it.
            assert_eq!(driven.coordinator.lock().pending_ids(), vec![2]);
        });
    }
}

/// The split hand-off between a split source's enumerator and a reader
/// (`source::SourceCoordinator`): the reader, on its task thread, asks for a split and finds
/// none, then registers its waker; the enumerator, on the executor's thread, discovers the
/// split and assigns it to the waiting reader. In every order the reader either got the split
/// in its poll or its waker is woken: no lost wake-up, and the split is read once.
mod split_handoff {
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use streamtask::source::{
        Boundedness, EnumeratorContext, Source, SourceCoordinator, SourceError, SourceSplit,
        SplitEnumerator, SplitOutput, SplitReader,
    };
    use streamtask_core::OperatorError;
    use streamtask_core::operator::Emitted;
    use streamtask_core::sync::atomic::{AtomicBool, Ordering};
    use streamtask_core::sync::thread;
    use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

    #[derive(Debug, Clone)]
    struct Only;

    impl SourceSplit for Only {
        fn split_id(&self) -> String {
            "only".to_string()
        }
        fn encode(&self) -> Result<Vec<u8>, SourceError> {
            Ok(Vec::new())
        }
        fn decode(_bytes: &[u8]) -> Result<Self, SourceError> {
            Ok(Only)
        }
    }

    struct OneSplit;

    struct Enumerator {
        discovered: bool,
        awaiting: Option<usize>,
    }

    impl SplitEnumerator for Enumerator {
        type Split = Only;
        fn handle_split_request(
            &mut self,
            subtask: usize,
            context: &mut EnumeratorContext<'_, Only>,
        ) -> Result<(), SourceError> {
            if self.discovered {
                context.assign_split(subtask, Only)
            } else {
                self.awaiting = Some(subtask);
                Ok(())
            }
        }
        fn add_splits_back(&mut self, _splits: Vec<Only>, _subtask: usize) {}
        fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
            Ok(Vec::new())
        }
        fn discover(
            &mut self,
            context: &mut EnumeratorContext<'_, Only>,
        ) -> Result<(), SourceError> {
            self.discovered = true;
            match self.awaiting.take() {
                Some(subtask) => context.assign_split(subtask, Only),
                None => Ok(()),
            }
        }
    }

    struct Reader(Option<Only>);

    impl SplitReader<u64> for Reader {
        type Split = Only;
        fn add_splits(&mut self, splits: Vec<Only>) {
            self.0 = splits.into_iter().next();
        }
        fn poll_next(
            &mut self,
            output: &mut SplitOutput<'_, '_, u64>,
        ) -> Result<InputStatus, OperatorError> {
            if let Some(split) = self.0.take() {
                output.collect(1)?;
                output.finish_split(split.split_id());
            }
            Ok(InputStatus::MoreAvailable)
        }
        fn snapshot_splits(&mut self, _checkpoint_id: u64) -> Result<Vec<Only>, OperatorError> {
            Ok(self.0.iter().cloned().collect())
        }
    }

    impl Source for OneSplit {
        type Output = u64;
        type Split = Only;
        type Enumerator = Enumerator;
        type Reader = Reader;
        fn boundedness(&self) -> Boundedness {
            Boundedness::ContinuousUnbounded
        }
        fn create_enumerator(&self, _parallelism: usize) -> Result<Enumerator, SourceError> {
            Ok(Enumerator {
                discovered: false,
                awaiting: None,
            })
        }
        fn restore_enumerator(&self, p: usize, _state: &[u8]) -> Result<Enumerator, SourceError> {
            self.create_enumerator(p)
        }
        fn create_reader(&self, _subtask: usize, _parallelism: usize) -> Reader {
            Reader(None)
        }
    }

    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn records(out: &[Emitted<u64>]) -> usize {
        out.iter()
            .filter(|e| matches!(e, Emitted::Record(_)))
            .count()
    }

    #[test]
    fn a_split_assigned_while_the_reader_registers_its_waker_is_never_lost() {
        loom::model(|| {
            let coordinator = Arc::new(SourceCoordinator::new("one", OneSplit, 1).unwrap());
            coordinator.start_attempt(None, &[]).unwrap();
            let mut reader = coordinator.reader(0);
            reader.restore_state(None).unwrap();
            let discovering = Arc::clone(&coordinator);
            let enumerator = thread::spawn(move || discovering.discover());
            let flag = Arc::new(Flag(AtomicBool::new(false)));
            let mut out = Vec::new();
            let status = reader.poll_next(&mut ReaderOutput::new(&mut out)).unwrap();
            if status == InputStatus::NothingAvailable {
                reader.register_waker(&Waker::from(Arc::clone(&flag)));
            }
            enumerator.join().unwrap();
            if records(&out) == 0 {
                assert!(
                    flag.0.load(Ordering::SeqCst),
                    "the reader's wake-up was lost"
                );
                reader.poll_next(&mut ReaderOutput::new(&mut out)).unwrap();
            }
            assert_eq!(records(&out), 1, "the split is read once");
        });
    }
}

/// Watermark alignment's pause/wake hand-off (`SourceCoordinator`'s `align` against a paused
/// reader's `register_waker`): the coordinator publishes a bound that resumes the reader
/// while the reader, paused, checks the bound and stores its waker. Either the reader's check
/// sees the new bound (it reads at once) or the publication finds the waker stored (and wakes
/// it): never a reader paused with no wake-up coming.
mod alignment_handoff {
    use std::sync::Arc;
    use std::task::{Wake, Waker};
    use std::time::Duration;

    use streamtask::source::{
        Boundedness, EnumeratorContext, Source, SourceCoordinator, SourceError, SourceSplit,
        SplitEnumerator, SplitOutput, SplitReader, WatermarkAlignment,
    };
    use streamtask_core::operator::Emitted;
    use streamtask_core::sync::atomic::{AtomicBool, Ordering};
    use streamtask_core::sync::thread;
    use streamtask_core::{OperatorError, Watermark};
    use streamtask_mailbox::{InputStatus, ReaderOutput, SourceReader};

    /// A split whose records carry event times 0, 1000, 2000, ...
    #[derive(Debug, Clone)]
    struct Ticks(String);

    impl SourceSplit for Ticks {
        fn split_id(&self) -> String {
            self.0.clone()
        }
        fn encode(&self) -> Result<Vec<u8>, SourceError> {
            Ok(self.0.clone().into_bytes())
        }
        fn decode(bytes: &[u8]) -> Result<Self, SourceError> {
            Ok(Ticks(String::from_utf8_lossy(bytes).into_owned()))
        }
    }

    struct Enumerator;

    impl SplitEnumerator for Enumerator {
        type Split = Ticks;
        fn start(&mut self, context: &mut EnumeratorContext<'_, Ticks>) -> Result<(), SourceError> {
            context.assign_split(0, Ticks("a".into()))?;
            context.assign_split(1, Ticks("b".into()))
        }
        fn handle_split_request(
            &mut self,
            _subtask: usize,
            _context: &mut EnumeratorContext<'_, Ticks>,
        ) -> Result<(), SourceError> {
            Ok(())
        }
        fn add_splits_back(&mut self, _splits: Vec<Ticks>, _subtask: usize) {}
        fn snapshot_state(&mut self, _checkpoint_id: u64) -> Result<Vec<u8>, SourceError> {
            Ok(Vec::new())
        }
    }

    struct Reader {
        split: Option<Ticks>,
        next: i64,
    }

    impl SplitReader<i64> for Reader {
        type Split = Ticks;
        fn add_splits(&mut self, splits: Vec<Ticks>) {
            self.split = splits.into_iter().next();
        }
        fn poll_next(
            &mut self,
            output: &mut SplitOutput<'_, '_, i64>,
        ) -> Result<InputStatus, OperatorError> {
            let Some(split) = &self.split else {
                return Ok(InputStatus::NothingAvailable);
            };
            let id = split.split_id();
            output.collect_for(&id, self.next, self.next)?;
            output.emit_watermark_for(&id, Watermark(self.next))?;
            self.next += 1000;
            Ok(InputStatus::MoreAvailable)
        }
        fn register_waker(&mut self, _waker: &Waker) {}
        fn snapshot_splits(&mut self, _checkpoint_id: u64) -> Result<Vec<Ticks>, OperatorError> {
            Ok(self.split.iter().cloned().collect())
        }
    }

    struct Aligned;

    impl Source for Aligned {
        type Output = i64;
        type Split = Ticks;
        type Enumerator = Enumerator;
        type Reader = Reader;
        fn boundedness(&self) -> Boundedness {
            Boundedness::ContinuousUnbounded
        }
        fn create_enumerator(&self, _parallelism: usize) -> Result<Enumerator, SourceError> {
            Ok(Enumerator)
        }
        fn restore_enumerator(&self, _p: usize, _state: &[u8]) -> Result<Enumerator, SourceError> {
            Ok(Enumerator)
        }
        fn create_reader(&self, _subtask: usize, _parallelism: usize) -> Reader {
            Reader {
                split: None,
                next: 0,
            }
        }
        fn watermark_alignment(&self) -> Option<WatermarkAlignment> {
            Some(WatermarkAlignment::new(
                Duration::from_millis(10),
                Duration::ZERO,
            ))
        }
    }

    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn records(out: &[Emitted<i64>]) -> usize {
        out.iter()
            .filter(|e| matches!(e, Emitted::Record(_)))
            .count()
    }

    #[test]
    fn a_bound_published_while_a_paused_reader_registers_its_waker_is_never_lost() {
        loom::model(|| {
            let coordinator = Arc::new(SourceCoordinator::new("aligned", Aligned, 2).unwrap());
            coordinator.start_attempt(None, &[]).unwrap();
            let (mut fast, mut slow) = (coordinator.reader(0), coordinator.reader(1));
            fast.restore_state(None).unwrap();
            slow.restore_state(None).unwrap();
            // Both at watermark 0, above the first bound (no minimum taken yet): paused.
            let mut out = Vec::new();
            slow.poll_next(&mut ReaderOutput::new(&mut out)).unwrap();
            fast.poll_next(&mut ReaderOutput::new(&mut out)).unwrap();
            assert_eq!(fast.paused_splits().len(), 1);
            // The publication of 0 + 10 resumes the fast reader, racing its poll and waker.
            let publishing = Arc::clone(&coordinator);
            let publisher = thread::spawn(move || publishing.discover());
            let flag = Arc::new(Flag(AtomicBool::new(false)));
            let mut fast_out = Vec::new();
            let status = fast
                .poll_next(&mut ReaderOutput::new(&mut fast_out))
                .unwrap();
            if status == InputStatus::NothingAvailable {
                fast.register_waker(&Waker::from(Arc::clone(&flag)));
            }
            publisher.join().unwrap();
            if records(&fast_out) == 0 {
                assert!(
                    flag.0.load(Ordering::SeqCst),
                    "the paused reader's wake-up was lost"
                );
                fast.poll_next(&mut ReaderOutput::new(&mut fast_out))
                    .unwrap();
            }
            assert_eq!(records(&fast_out), 1, "resumed by the bound");
        });
    }
}
