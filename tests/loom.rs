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
