//! `CheckpointCoordinator` and `CoordinatorDriver`: when checkpoints are triggered, completed and
//! aborted, all on a manual clock.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use streamtask::checkpoint::{
    AbortReason, CheckpointConfig, CheckpointCoordinator, CheckpointStats, CheckpointStorage,
    CompletedCheckpoint, ConfigError, CoordinatorAction, CoordinatorDriver, CoordinatorError,
    DriverError,
};
use streamtask_core::task::{DeclineReason, TaskReport};
use streamtask_core::{state::TaskSnapshot, time::Clock, time::ManualClock};

/// Generous upper bound on waits for another thread: a hang guard, never a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(30);

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn storage() -> CheckpointStorage {
    CheckpointStorage::in_memory(3).unwrap()
}

/// A coordinator of the tasks "source" (triggered) and "sink", created at time 0, tolerating
/// any number of failed checkpoints (the tests of failures in a row build their own).
fn coordinator(config: CheckpointConfig, storage: &CheckpointStorage) -> CheckpointCoordinator {
    let config = config.with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES);
    strict(config, storage)
}

/// As [`coordinator`], with `config`'s tolerance as it is.
fn strict(config: CheckpointConfig, storage: &CheckpointStorage) -> CheckpointCoordinator {
    CheckpointCoordinator::new(config, storage.clone(), ["source", "sink"], ["source"], 0).unwrap()
}

fn snapshot_of(task: &str, checkpoint: u64) -> TaskSnapshot {
    let mut s = TaskSnapshot::new();
    s.put(task, checkpoint.to_le_bytes().to_vec());
    s
}

fn ack(task: &str, checkpoint: u64) -> TaskReport {
    TaskReport::Acknowledged {
        task: task.to_string(),
        checkpoint,
        snapshot: snapshot_of(task, checkpoint),
    }
}

fn decline(task: &str, checkpoint: u64) -> TaskReport {
    TaskReport::Declined {
        task: task.to_string(),
        checkpoint,
        reason: DeclineReason::Superseded,
    }
}

/// The ids of the `Trigger` actions.
fn triggered(actions: &[CoordinatorAction]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            CoordinatorAction::Trigger(b) => Some(b.id),
            _ => None,
        })
        .collect()
}

/// A short, comparable description of actions: `T1` trigger, `C1` complete, `A1` abort.
fn describe(actions: &[CoordinatorAction]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            CoordinatorAction::Trigger(b) => format!("T{}", b.id),
            CoordinatorAction::Complete { id } => format!("C{id}"),
            CoordinatorAction::Abort { id, .. } => format!("A{id}"),
            CoordinatorAction::FailJob(f) => format!("F{}", f.id),
        })
        .collect()
}

/// Acknowledges `checkpoint` from both tasks at `now`; returns the actions of the last ack.
fn ack_all(c: &mut CheckpointCoordinator, checkpoint: u64, now: i64) -> Vec<CoordinatorAction> {
    assert!(
        c.receive(ack("source", checkpoint), now)
            .unwrap()
            .is_empty()
    );
    c.receive(ack("sink", checkpoint), now).unwrap()
}

#[test]
fn smoke() {
    let storage = storage();
    let mut c = coordinator(CheckpointConfig::new(ms(100)), &storage);
    assert_eq!(describe(&c.poll(100)), ["T1"]);
    assert_eq!(describe(&ack_all(&mut c, 1, 150)), ["C1"]);
    assert_eq!(storage.completed_ids().unwrap(), vec![1]);
}

#[test]
fn triggers_once_per_interval() {
    let config = CheckpointConfig::new(ms(100)).with_max_concurrent(10);
    let mut c = coordinator(config, &storage());
    assert_eq!(c.next_deadline(), Some(100));
    assert!(c.poll(0).is_empty());
    assert!(c.poll(99).is_empty());
    let actions = c.poll(100);
    let [CoordinatorAction::Trigger(barrier)] = &actions[..] else {
        panic!("{actions:?}")
    };
    assert_eq!((barrier.id, barrier.timestamp), (1, 100));
    assert!(c.poll(100).is_empty());
    assert!(c.poll(199).is_empty());
    assert_eq!(c.next_deadline(), Some(200));
    assert_eq!(triggered(&c.poll(200)), vec![2]);
    // A late poll triggers once, and the next interval counts from then.
    assert_eq!(triggered(&c.poll(1_000)), vec![3]);
    assert!(c.poll(1_099).is_empty());
    assert_eq!(triggered(&c.poll(1_100)), vec![4]);
    assert_eq!(c.pending_ids(), vec![1, 2, 3, 4]);
}

#[test]
fn the_minimum_pause_counts_from_the_end_of_the_last_checkpoint() {
    let config = CheckpointConfig::new(ms(100)).with_min_pause(ms(80));
    let mut c = coordinator(config, &storage());
    assert_eq!(triggered(&c.poll(100)), vec![1]);
    assert_eq!(describe(&ack_all(&mut c, 1, 190)), ["C1"]);
    // The interval alone would allow 200; the pause asks for 190 + 80.
    assert_eq!(c.next_deadline(), Some(270));
    assert!(c.poll(200).is_empty());
    assert!(c.poll(269).is_empty());
    assert_eq!(triggered(&c.poll(270)), vec![2]);
    // An abort ends a checkpoint too.
    assert_eq!(
        describe(&c.receive(decline("sink", 2), 300).unwrap()),
        ["A2"]
    );
    assert!(c.poll(370).is_empty());
    assert_eq!(triggered(&c.poll(380)), vec![3]);
}

#[test]
fn no_more_than_max_concurrent_checkpoints_are_pending() {
    let config = CheckpointConfig::new(ms(100)).with_max_concurrent(2);
    let mut c = coordinator(config, &storage());
    assert_eq!(triggered(&c.poll(100)), vec![1]);
    assert_eq!(triggered(&c.poll(200)), vec![2]);
    assert!(c.poll(300).is_empty());
    assert!(c.poll(450).is_empty());
    assert_eq!(c.pending_ids(), vec![1, 2]);
    // The next deadline is the first timeout, not a trigger.
    assert_eq!(c.next_deadline(), Some(100 + 600_000));
    // A slot frees: the overdue trigger happens at the next poll.
    assert_eq!(describe(&ack_all(&mut c, 1, 460)), ["C1"]);
    assert_eq!(c.next_deadline(), Some(460));
    assert_eq!(triggered(&c.poll(460)), vec![3]);
}

#[test]
fn a_checkpoint_pending_past_its_timeout_is_aborted() {
    let config = CheckpointConfig::new(ms(100)).with_timeout(ms(250));
    let mut c = coordinator(config, &storage());
    assert_eq!(triggered(&c.poll(100)), vec![1]);
    assert!(c.receive(ack("source", 1), 120).unwrap().is_empty());
    assert_eq!(c.next_deadline(), Some(350));
    assert!(c.poll(349).is_empty());
    let actions = c.poll(350);
    // The abort comes first, then the trigger its end made possible.
    assert_eq!(describe(&actions), ["A1", "T2"]);
    assert!(matches!(
        actions[0],
        CoordinatorAction::Abort {
            id: 1,
            reason: AbortReason::Expired
        }
    ));
    // The missing acknowledgement arrives late: ignored.
    assert!(c.receive(ack("sink", 1), 360).unwrap().is_empty());
    assert_eq!(c.pending_ids(), vec![2]);
}

#[test]
fn an_ack_arriving_after_the_deadline_finds_the_checkpoint_expired() {
    let config = CheckpointConfig::new(ms(100)).with_timeout(ms(100));
    let storage = storage();
    let mut c = coordinator(config, &storage);
    c.poll(100);
    c.receive(ack("source", 1), 150).unwrap();
    let actions = c.receive(ack("sink", 1), 200).unwrap();
    assert_eq!(describe(&actions), ["A1"]);
    assert!(storage.completed_ids().unwrap().is_empty());
}

#[test]
fn all_acknowledgements_store_the_checkpoint_then_complete_it() {
    let storage = storage();
    let mut c = coordinator(CheckpointConfig::new(ms(100)), &storage);
    c.poll(100);
    assert!(c.receive(ack("sink", 1), 110).unwrap().is_empty());
    // A repeated acknowledgement changes nothing.
    assert!(c.receive(ack("sink", 1), 115).unwrap().is_empty());
    assert!(storage.completed_ids().unwrap().is_empty());
    assert_eq!(describe(&c.receive(ack("source", 1), 130).unwrap()), ["C1"]);
    let stored = storage.load(1).unwrap();
    assert_eq!(
        stored,
        CompletedCheckpoint {
            id: 1,
            timestamp: 100,
            tasks: BTreeMap::from([
                ("sink".to_string(), snapshot_of("sink", 1)),
                ("source".to_string(), snapshot_of("source", 1)),
            ]),
        }
    );
    assert!(c.pending_ids().is_empty());
    let stats = c.stats().summary();
    assert_eq!((stats.triggered, stats.completed, stats.aborted), (1, 1, 0));
    // 30 ms on the manual clock, recorded in microseconds (3 significant digits).
    assert_eq!(stats.duration_us.count, 1);
    assert!(
        (29_970..=30_030).contains(&stats.duration_us.max),
        "{stats:?}"
    );
}

#[test]
fn the_series_keeps_the_latest_completed_checkpoints_end_to_end_durations_up_to_its_bound() {
    let mut c = coordinator(CheckpointConfig::new(ms(10)), &storage());
    // Checkpoint 1 is declined: only completed checkpoints are in the series.
    c.poll(10);
    c.receive(decline("sink", 1), 12).unwrap();
    let mut now = 20;
    let completed = CheckpointStats::SERIES_CAPACITY as u64 + 2;
    for id in 2..2 + completed {
        assert_eq!(triggered(&c.poll(now)), vec![id]);
        // Checkpoint `id` takes `id % 7` ms from its trigger to its last acknowledgement.
        ack_all(&mut c, id, now + (id % 7) as i64);
        now += 10;
    }
    let stats = c.stats().summary();
    assert_eq!(stats.completed, completed);
    assert_eq!(stats.duration_us.count, completed);
    assert_eq!(stats.series.len(), CheckpointStats::SERIES_CAPACITY);
    // The oldest two made room; the rest are in completion order with their trigger times.
    let first = stats.series[0];
    assert_eq!(
        (first.id, first.triggered_at, first.duration_ms),
        (4, 40, 4)
    );
    let last = *stats.series.last().unwrap();
    assert_eq!(last.id, 1 + completed);
    assert_eq!(last.duration_ms, (1 + completed) % 7);
    assert!(stats.series.windows(2).all(|w| w[0].id + 1 == w[1].id));
}

#[test]
fn a_decline_aborts_the_checkpoint() {
    let storage = storage();
    let mut c = coordinator(CheckpointConfig::new(ms(100)), &storage);
    c.poll(100);
    assert!(c.receive(ack("source", 1), 110).unwrap().is_empty());
    let actions = c.receive(decline("sink", 1), 120).unwrap();
    match &actions[..] {
        [
            CoordinatorAction::Abort {
                id: 1,
                reason:
                    AbortReason::Declined {
                        task,
                        reason: DeclineReason::Superseded,
                    },
            },
        ] => assert_eq!(task, "sink"),
        other => panic!("{other:?}"),
    }
    assert!(storage.completed_ids().unwrap().is_empty());
    assert_eq!(c.stats().summary().aborted, 1);
}

#[test]
fn reports_after_an_abort_are_ignored() {
    let storage = storage();
    let mut c = coordinator(CheckpointConfig::new(ms(100)), &storage);
    c.poll(100);
    c.receive(decline("source", 1), 110).unwrap();
    assert!(c.receive(ack("sink", 1), 120).unwrap().is_empty());
    assert!(c.receive(ack("source", 1), 130).unwrap().is_empty());
    assert!(c.receive(decline("sink", 1), 140).unwrap().is_empty());
    assert!(storage.completed_ids().unwrap().is_empty());
    assert_eq!(c.stats().summary().aborted, 1);
}

#[test]
fn a_newer_completed_checkpoint_subsumes_older_pending_ones() {
    let storage = storage();
    let config = CheckpointConfig::new(ms(100)).with_max_concurrent(3);
    let mut c = coordinator(config, &storage);
    c.poll(100);
    c.poll(200);
    c.poll(300);
    let actions = ack_all(&mut c, 2, 310);
    assert_eq!(describe(&actions), ["A1", "C2"]);
    assert!(matches!(
        actions[0],
        CoordinatorAction::Abort {
            id: 1,
            reason: AbortReason::Subsumed { by: 2 }
        }
    ));
    assert_eq!(c.pending_ids(), vec![3]);
    assert!(ack_all(&mut c, 1, 320).is_empty());
    assert_eq!(storage.completed_ids().unwrap(), vec![2]);
}

#[test]
fn a_failed_store_aborts_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("checkpoints");
    let storage = CheckpointStorage::directory(&root, 1).unwrap();
    let mut c = coordinator(CheckpointConfig::new(ms(100)), &storage);
    std::fs::remove_dir(&root).unwrap();
    c.poll(100);
    let actions = ack_all(&mut c, 1, 110);
    match &actions[..] {
        [
            CoordinatorAction::Abort {
                id: 1,
                reason: AbortReason::StorageFailed(err),
            },
        ] => assert!(!err.is_damage()),
        other => panic!("{other:?}"),
    }
    assert!(c.pending_ids().is_empty());
}

#[test]
fn ids_increase_and_continue_after_the_stored_ones() {
    let storage = storage();
    let mut first = coordinator(CheckpointConfig::new(ms(100)), &storage);
    let mut ids = Vec::new();
    for round in 1..=4 {
        let now = round * 100;
        ids.extend(triggered(&first.poll(now)));
        ack_all(&mut first, *ids.last().unwrap(), now + 1);
    }
    assert_eq!(ids, vec![1, 2, 3, 4]);
    // Checkpoint 5 is triggered but never completes before the "failure".
    assert_eq!(triggered(&first.poll(500)), vec![5]);

    // A restarted job: a new coordinator over the same storage.
    let mut second = CheckpointCoordinator::new(
        CheckpointConfig::new(ms(100)),
        storage.clone(),
        ["source", "sink"],
        ["source"],
        1_000,
    )
    .unwrap();
    assert_eq!(second.last_id(), 4);
    assert_eq!(triggered(&second.poll(1_100)), vec![5]);

    // Told about the previous coordinator's ids, it skips them too.
    let mut third = CheckpointCoordinator::new(
        CheckpointConfig::new(ms(100)),
        storage,
        ["source", "sink"],
        ["source"],
        2_000,
    )
    .unwrap()
    .with_ids_after(first.last_id());
    assert_eq!(triggered(&third.poll(2_100)), vec![6]);
}

#[test]
fn latest_completed_is_what_a_restore_starts_from() {
    let storage = storage();
    let mut c = coordinator(CheckpointConfig::new(ms(100)), &storage);
    assert_eq!(c.latest_completed().unwrap(), None);
    c.poll(100);
    ack_all(&mut c, 1, 110);
    c.poll(210);
    ack_all(&mut c, 2, 220);
    c.poll(320);
    c.receive(ack("source", 3), 330).unwrap();
    let latest = c.latest_completed().unwrap().unwrap();
    assert_eq!(latest.id, 2);
    assert_eq!(latest.task("sink"), Some(&snapshot_of("sink", 2)));
}

#[test]
fn latest_completed_skips_a_damaged_newest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::directory(dir.path(), 3).unwrap();
    let mut c = coordinator(CheckpointConfig::new(ms(100)), &storage);
    c.poll(100);
    ack_all(&mut c, 1, 110);
    c.poll(210);
    ack_all(&mut c, 2, 220);
    let newest = dir
        .path()
        .join(format!("chk-{:020}", 2))
        .join("task-0.state");
    let mut bytes = std::fs::read(&newest).unwrap();
    bytes[12] ^= 1;
    std::fs::write(&newest, bytes).unwrap();
    assert_eq!(c.latest_completed().unwrap().unwrap().id, 1);
}

#[test]
fn a_finished_task_stops_triggering_and_aborts_pending_checkpoints() {
    let storage = storage();
    let config = CheckpointConfig::new(ms(100)).with_max_concurrent(2);
    let mut c = coordinator(config, &storage);
    c.poll(100);
    c.poll(200);
    c.receive(ack("source", 1), 210).unwrap();
    let actions = c.task_finished("source", 250).unwrap();
    assert_eq!(describe(&actions), ["A1", "A2"]);
    assert!(actions.iter().all(|a| matches!(
        a,
        CoordinatorAction::Abort { reason: AbortReason::TaskFinished { task }, .. } if task == "source"
    )));
    assert!(c.is_stopped());
    assert_eq!(c.next_deadline(), None);
    assert!(c.poll(10_000_000).is_empty());
    // Late reports and repeated notices change nothing.
    assert!(c.receive(ack("sink", 1), 260).unwrap().is_empty());
    assert!(c.task_finished("sink", 270).unwrap().is_empty());
    assert!(storage.completed_ids().unwrap().is_empty());
}

#[test]
fn reports_from_unknown_tasks_or_for_untriggered_ids_are_typed_errors() {
    let mut c = coordinator(CheckpointConfig::new(ms(100)), &storage());
    c.poll(100);
    let err = c.receive(ack("stranger", 1), 110).unwrap_err();
    assert!(matches!(&err, CoordinatorError::UnknownTask { task } if task == "stranger"));
    assert!(err.to_string().contains("list every task"), "{err}");
    let err = c.receive(ack("sink", 7), 110).unwrap_err();
    assert!(matches!(
        err,
        CoordinatorError::UnknownCheckpoint {
            checkpoint: 7,
            newest: 1,
            ..
        }
    ));
    assert!(matches!(
        c.task_finished("stranger", 120),
        Err(CoordinatorError::UnknownTask { .. })
    ));
    // The errors did not disturb the pending checkpoint.
    assert_eq!(c.pending_ids(), vec![1]);
}

#[test]
fn invalid_configurations_are_typed_errors_naming_the_fix() {
    let cases = [
        (
            CheckpointConfig::new(Duration::ZERO),
            ConfigError::ZeroInterval,
            "at least 1 ms",
        ),
        (
            CheckpointConfig::new(Duration::from_micros(500)),
            ConfigError::ZeroInterval,
            "at least 1 ms",
        ),
        (
            CheckpointConfig::new(ms(100)).with_max_concurrent(0),
            ConfigError::ZeroMaxConcurrent,
            "allow at least 1",
        ),
        (
            CheckpointConfig::new(ms(100)).with_timeout(ms(99)),
            ConfigError::TimeoutShorterThanInterval {
                timeout: ms(99),
                interval: ms(100),
            },
            "timeout of at least the interval",
        ),
    ];
    for (config, expected, fix) in cases {
        let err = config.validate().unwrap_err();
        assert_eq!(err, expected);
        assert!(err.to_string().contains(fix), "{err}");
        let err = CheckpointCoordinator::new(config, storage(), ["a"], ["a"], 0).unwrap_err();
        assert!(matches!(err, CoordinatorError::Config(e) if e == expected));
    }
    // The default timeout is never shorter than the interval.
    let long = CheckpointConfig::new(Duration::from_secs(3_600));
    assert_eq!(long.timeout, long.interval);
    assert!(long.validate().is_ok());
}

#[test]
fn task_lists_that_cannot_work_are_typed_errors() {
    let config = CheckpointConfig::new(ms(100));
    let no_tasks: [&str; 0] = [];
    assert!(matches!(
        CheckpointCoordinator::new(config, storage(), no_tasks, ["a"], 0),
        Err(CoordinatorError::NoTasks)
    ));
    assert!(matches!(
        CheckpointCoordinator::new(config, storage(), ["a"], no_tasks, 0),
        Err(CoordinatorError::NoTriggeredTasks)
    ));
    let err = CheckpointCoordinator::new(config, storage(), ["a"], ["b"], 0).unwrap_err();
    assert!(matches!(&err, CoordinatorError::UnknownTriggeredTask { task } if task == "b"));
    assert!(err.to_string().contains("among the tasks"), "{err}");
}

#[test]
fn coordinator_parts_are_send() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<CheckpointCoordinator>();
    send_sync::<CoordinatorAction>();
    send_sync::<CoordinatorDriver>();
    send_sync::<CoordinatorError>();
}

/// Receives the next action from the driver's callback, guarding against a hang.
fn next_action(actions: &mpsc::Receiver<CoordinatorAction>) -> CoordinatorAction {
    actions
        .recv_timeout(HANG_GUARD)
        .expect("the driver produced no action")
}

#[test]
fn the_driver_triggers_on_the_clock_and_completes_with_acks_from_task_threads() {
    let clock = ManualClock::new(0);
    let storage = storage();
    let coordinator = coordinator(CheckpointConfig::new(ms(100)), &storage);
    let (action_tx, actions) = mpsc::channel();
    let (trigger_tx, triggers) = mpsc::channel();
    let driver = CoordinatorDriver::spawn(coordinator, Clock::Manual(clock.clone()), move |a| {
        // The executor's part: forward triggers to the source task, record everything.
        if let CoordinatorAction::Trigger(barrier) = a {
            let _ = trigger_tx.send(*barrier);
        }
        let _ = action_tx.send(a.clone());
    });

    // A fake job: one thread plays both tasks, acknowledging each barrier it is sent.
    let source = driver.responder("source");
    let sink = driver.responder("sink");
    let tasks = std::thread::spawn(move || {
        let mut acked = Vec::new();
        while let Ok(barrier) = triggers.recv() {
            source.acknowledge(barrier.id, snapshot_of("source", barrier.id));
            sink.acknowledge(barrier.id, snapshot_of("sink", barrier.id));
            acked.push(barrier.id);
        }
        acked
    });

    for id in 1..=3 {
        clock.advance(100);
        match next_action(&actions) {
            CoordinatorAction::Trigger(barrier) => assert_eq!(barrier.id, id),
            other => panic!("expected trigger {id}, got {other:?}"),
        }
        assert!(matches!(next_action(&actions), CoordinatorAction::Complete { id: c } if c == id));
    }
    let stats = driver.stats().summary();
    assert_eq!((stats.triggered, stats.completed), (3, 3));

    // A finished task stops checkpointing (control messages are handled in order, so the
    // coordinator handed back by `stop` has seen it).
    driver.task_finished("sink");
    let coordinator = driver.stop().unwrap();
    assert!(coordinator.is_stopped());
    assert_eq!(coordinator.last_id(), 3);
    assert!(
        actions.try_recv().is_err(),
        "no action after the last completion"
    );
    // Stopping dropped the callback, and with it the trigger channel: the task thread ends.
    assert_eq!(tasks.join().unwrap(), vec![1, 2, 3]);
    assert_eq!(storage.completed_ids().unwrap(), vec![1, 2, 3]);
    assert_eq!(storage.latest().unwrap().unwrap().id, 3);
}

#[test]
fn the_driver_delivers_aborts_and_counts_rejected_reports() {
    let clock = ManualClock::new(0);
    let config = CheckpointConfig::new(ms(100)).with_timeout(ms(100));
    let coordinator = coordinator(config, &storage());
    let (tx, actions) = mpsc::channel();
    let driver = CoordinatorDriver::spawn(coordinator, Clock::Manual(clock.clone()), move |a| {
        let _ = tx.send(a.clone());
    });
    clock.advance(100);
    assert!(matches!(
        next_action(&actions),
        CoordinatorAction::Trigger(_)
    ));
    // Nobody acknowledges: once the clock passes the timeout the checkpoint is aborted.
    clock.advance(100);
    assert!(matches!(
        next_action(&actions),
        CoordinatorAction::Abort {
            id: 1,
            reason: AbortReason::Expired
        }
    ));
    // The abort ended checkpoint 1, so the next one is due at once.
    assert!(matches!(next_action(&actions), CoordinatorAction::Trigger(b) if b.id == 2));
    // A report from a task the coordinator does not know is refused, not fatal.
    let reports = driver.reports();
    reports.send(ack("stranger", 1)).unwrap();
    driver
        .responder("sink")
        .decline(2, DeclineReason::NotRunning);
    assert!(matches!(
        next_action(&actions),
        CoordinatorAction::Abort {
            id: 2,
            reason: AbortReason::Declined { .. }
        }
    ));
    // The report from the stranger was handled before the decline that followed it.
    assert_eq!(driver.stats().summary().rejected_reports, 1);
    drop(driver);
}

#[test]
fn the_driver_runs_on_the_system_clock() {
    let storage = storage();
    let coordinator = CheckpointCoordinator::new(
        CheckpointConfig::new(ms(1)),
        storage.clone(),
        ["source"],
        ["source"],
        Clock::System.now_millis(),
    )
    .unwrap();
    let (tx, actions) = mpsc::channel();
    let driver = CoordinatorDriver::spawn(coordinator, Clock::System, move |a| {
        let _ = tx.send(a.clone());
    });
    let source = driver.responder("source");
    let CoordinatorAction::Trigger(barrier) = next_action(&actions) else {
        panic!("the first action is a trigger")
    };
    source.acknowledge(barrier.id, TaskSnapshot::new());
    loop {
        if let CoordinatorAction::Complete { id } = next_action(&actions) {
            assert_eq!(id, barrier.id);
            break;
        }
    }
    driver.stop().unwrap();
    assert!(storage.completed_ids().unwrap().contains(&barrier.id));
}

#[test]
fn a_panicking_callback_is_reported_by_stop() {
    let clock = ManualClock::new(0);
    let coordinator = coordinator(CheckpointConfig::new(ms(100)), &storage());
    let (tx, done) = mpsc::channel::<()>();
    let driver = CoordinatorDriver::spawn(coordinator, Clock::Manual(clock.clone()), move |_| {
        let _tx = &tx;
        panic!("executor bug");
    });
    clock.advance(100);
    // The callback's sender is dropped when the panic unwinds the thread.
    assert!(done.recv_timeout(HANG_GUARD).is_err());
    match driver.stop() {
        Err(DriverError::CallbackPanicked(message)) => assert_eq!(message, "executor bug"),
        other => panic!("{other:?}"),
    }
}

// ---- tolerable checkpoint failures -------------------------------------------------------

#[test]
fn the_tolerance_is_zero_by_default_as_flinks() {
    assert_eq!(CheckpointConfig::new(ms(100)).tolerable_failures, 0);
}

#[test]
fn one_failure_more_than_tolerated_fails_the_job_and_a_completion_resets_the_count() {
    let config = CheckpointConfig::new(ms(100))
        .with_timeout(ms(100))
        .with_tolerable_failures(1);
    let mut c = strict(config, &storage());
    // 1 expires: tolerated.
    assert_eq!(describe(&c.poll(100)), ["T1"]);
    assert_eq!(describe(&c.poll(200)), ["A1", "T2"]);
    // 2 completes: the count starts over.
    assert_eq!(describe(&ack_all(&mut c, 2, 250)), ["C2"]);
    // 3 expires (1 in a row), 4 is declined because its snapshot failed (2 in a row): fails.
    assert_eq!(describe(&c.poll(300)), ["T3"]);
    assert_eq!(describe(&c.poll(400)), ["A3", "T4"]);
    let failed = c
        .receive(
            TaskReport::Declined {
                task: "sink".to_string(),
                checkpoint: 4,
                reason: DeclineReason::Failed("snapshot failed".to_string()),
            },
            410,
        )
        .unwrap();
    assert_eq!(describe(&failed), ["A4", "F4"]);
    let CoordinatorAction::FailJob(failures) = &failed[1] else {
        panic!("{failed:?}")
    };
    assert_eq!((failures.failures, failures.tolerable), (2, 1));
    assert!(
        failures
            .to_string()
            .contains("--tolerable-failed-checkpoints")
    );
}

/// As Flink's `CheckpointFailureManager`: declines that say nothing about the job's health
/// (a task not running, a superseded or aborted alignment), subsumed checkpoints and finished
/// tasks are not counted.
#[test]
fn declines_of_tasks_not_running_are_not_counted() {
    let mut c = strict(CheckpointConfig::new(ms(100)), &storage());
    let mut now = 100;
    for reason in [
        DeclineReason::NotRunning,
        DeclineReason::Superseded,
        DeclineReason::AlignmentAborted,
        DeclineReason::TaskFailure("the downstream task is gone".to_string()),
    ] {
        let triggered = triggered(&c.poll(now));
        let id = *triggered.last().expect("a trigger");
        let actions = c
            .receive(
                TaskReport::Declined {
                    task: "sink".to_string(),
                    checkpoint: id,
                    reason,
                },
                now + 1,
            )
            .unwrap();
        assert_eq!(describe(&actions), [format!("A{id}")]);
        now += 100;
    }
}

/// Flink's `CheckpointFailureManager` does not count a checkpoint that failed because a task
/// failed (`TASK_FAILURE`): a task whose barrier finds its downstream task gone (the attempt is
/// being torn down) declines, and with no failure tolerated the coordinator still only aborts.
#[test]
fn a_decline_because_the_downstream_task_is_gone_is_not_counted() {
    use streamtask_core::operator::Map;
    use streamtask_core::task::{CheckpointResponder, TaskConfig};
    use streamtask_core::{CheckpointBarrier, StreamElement};
    use streamtask_runtime::channel::{InputGate, Partitioner, RecordWriter, bounded};

    let mut c = strict(CheckpointConfig::new(ms(100)), &storage());
    assert_eq!(describe(&c.poll(100)), ["T1"]);

    // The "sink" task's downstream channel has no receiver: its task is gone.
    let (reports, to_coordinator) = crossbeam::channel::unbounded();
    let (input, rx) = bounded::<StreamElement<u64>>(4).unwrap();
    let (downstream, gone) = bounded::<StreamElement<u64>>(4).unwrap();
    drop(gone);
    let output = RecordWriter::new(vec![downstream], Partitioner::global()).unwrap();
    let task = streamtask_mailbox::OneInputStreamTask::new(
        TaskConfig::new("sink").with_responder(CheckpointResponder::new("sink", reports)),
        InputGate::new(vec![rx]).unwrap(),
        Map::new("identity", |x: u64| x),
        output,
    )
    .spawn();
    input
        .send(StreamElement::Barrier(CheckpointBarrier::new(1, 100)))
        .unwrap();
    let report = to_coordinator.recv_timeout(HANG_GUARD).unwrap();
    assert!(
        matches!(report, TaskReport::Declined { checkpoint: 1, .. }),
        "{report:?}"
    );
    assert!(
        !task.join().is_finished(),
        "the task fails: its output is gone"
    );

    let actions = c.receive(report, 110).unwrap();
    assert_eq!(
        describe(&actions),
        ["A1"],
        "aborted, not counted: {actions:?}"
    );
}

#[test]
fn unlimited_tolerance_never_fails_the_job() {
    let config = CheckpointConfig::new(ms(100))
        .with_timeout(ms(100))
        .with_tolerable_failures(CheckpointConfig::UNLIMITED_FAILURES);
    let mut c = strict(config, &storage());
    let mut all = Vec::new();
    for now in (100..=2_000).step_by(100) {
        all.extend(describe(&c.poll(now)));
    }
    assert!(all.iter().all(|a| !a.starts_with('F')), "{all:?}");
}

#[test]
fn a_pending_checkpoint_is_reported_stalled_once_per_threshold_with_its_missing_tasks() {
    let storage = storage();
    let config = CheckpointConfig::new(ms(100)).with_stall_report_after(ms(250));
    let mut c = coordinator(config, &storage);
    assert_eq!(triggered(&c.poll(100)), vec![1]);
    assert_eq!(c.next_stall_report(), Some(350));
    assert!(c.stalled(349).is_empty());
    c.receive(ack("source", 1), 200).unwrap();

    let first = c.stalled(350);
    assert_eq!(first.len(), 1);
    let s = &first[0];
    assert_eq!(
        (s.id, s.report, s.pending_ms, s.threshold_ms),
        (1, 1, 250, 250)
    );
    assert_eq!(s.acknowledged, vec!["source".to_string()]);
    assert_eq!(s.missing, vec!["sink".to_string()]);
    assert!(!s.savepoint);

    // At most once per threshold, however often the driver looks (no catching up either).
    assert!(c.stalled(351).is_empty());
    assert_eq!(c.next_stall_report(), Some(600));
    let again = c.stalled(900);
    assert_eq!((again[0].report, again[0].pending_ms), (2, 800));
    assert_eq!(c.next_stall_report(), Some(1150));

    // Completed: nothing left to report.
    c.receive(ack("sink", 1), 950).unwrap();
    assert_eq!(c.next_stall_report(), None);
    assert!(c.stalled(2_000).is_empty());
}

#[test]
fn stall_reports_default_to_three_intervals_and_can_be_turned_off() {
    let config = CheckpointConfig::new(ms(500));
    assert_eq!(config.stall_report_after, Some(ms(1_500)));
    assert_eq!(
        CheckpointConfig::new(ms(10)).stall_report_after,
        Some(CheckpointConfig::MIN_DEFAULT_STALL_REPORT_AFTER)
    );
    let storage = storage();
    let mut c = coordinator(config.without_stall_reports(), &storage);
    assert_eq!(triggered(&c.poll(500)), vec![1]);
    assert_eq!(c.next_stall_report(), None);
    assert!(c.stalled(1_000_000).is_empty());
    assert!(matches!(
        CheckpointConfig::new(ms(10))
            .with_stall_report_after(Duration::ZERO)
            .validate(),
        Err(ConfigError::ZeroStallReportAfter)
    ));
}
