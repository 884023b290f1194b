//! `SystemProcessingTimeService` (ports of Flink's `SystemProcessingTimeServiceTest` and
//! `StreamTaskTimerTest` behaviours): timers fire under the lock, quiesce and shutdown, errors.

mod common;

use std::sync::Arc;
use std::sync::mpsc;

use common::{HANG_GUARD, SharedOutput, wait_running};
use streamtask_core::operator::{Context, Operator};
use streamtask_core::task::{TaskConfig, TaskError};
use streamtask_core::{
    OperatorError, StreamRecord, time::Clock, time::ManualClock, time::Timer, time::TimerError,
    time::TimerHandle, time::TimerService,
};
use streamtask_legacy::{
    CheckpointLock, Fairness, SourceContext, SourceFunction, SourceStreamTask,
    SystemProcessingTimeService, TimerStatus,
};

fn timer(timestamp: i64, tag: u64) -> Timer {
    Timer {
        operator: 0,
        timestamp,
        tag,
    }
}

fn service(clock: &ManualClock) -> (SystemProcessingTimeService, mpsc::Receiver<TaskError>) {
    let (errors, error_rx) = mpsc::channel();
    let config = TaskConfig::new("timers").with_clock(Clock::Manual(clock.clone()));
    let service = SystemProcessingTimeService::spawn(&config, move |e| errors.send(e).unwrap());
    (service, error_rx)
}

#[test]
fn smoke() {
    let clock = ManualClock::new(0);
    let (timers, _errors) = service(&clock);
    let lock = Arc::new(CheckpointLock::new(Vec::new(), Fairness::Eventual));
    let (tx, rx) = mpsc::channel();
    timers.bind(Arc::clone(&lock), move |fired: &mut Vec<u64>, t: Timer| {
        fired.push(t.tag);
        tx.send(()).unwrap();
        Ok(())
    });
    timers.register_timer(timer(5, 1)).unwrap();
    clock.set(6);
    rx.recv_timeout(HANG_GUARD).unwrap();
    timers.shutdown();
    assert_eq!(*lock.lock(), vec![1]);
}

#[test]
fn timers_run_holding_the_checkpoint_lock() {
    let clock = ManualClock::new(0);
    let (timers, _errors) = service(&clock);
    let lock = Arc::new(CheckpointLock::new((), Fairness::Eventual));
    let (inside_tx, inside) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    timers.bind(Arc::clone(&lock), move |_: &mut (), _t| {
        inside_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        Ok(())
    });
    timers.register_timer(timer(0, 0)).unwrap();
    clock.set(1);
    inside.recv_timeout(HANG_GUARD).unwrap();
    assert!(lock.try_lock().is_none(), "the timer thread holds the lock");
    go.send(()).unwrap();
    timers.shutdown();
    assert!(lock.try_lock().is_some());
}

#[test]
fn timers_in_the_past_fire_at_once_in_registration_order() {
    let clock = ManualClock::new(100);
    let (timers, _errors) = service(&clock);
    let lock = Arc::new(CheckpointLock::new(Vec::new(), Fairness::Eventual));
    let (tx, rx) = mpsc::channel();
    timers.bind(Arc::clone(&lock), move |fired: &mut Vec<u64>, t: Timer| {
        fired.push(t.tag);
        tx.send(()).unwrap();
        Ok(())
    });
    for (ts, tag) in [(50, 1), (10, 2), (99, 3), (0, 4)] {
        timers.register_timer(timer(ts, tag)).unwrap();
    }
    for _ in 0..4 {
        rx.recv_timeout(HANG_GUARD).unwrap();
    }
    timers.shutdown();
    assert_eq!(*lock.lock(), vec![1, 2, 3, 4]);
}

#[test]
fn after_quiesce_nothing_fires_even_a_timer_already_waiting_for_the_lock() {
    let clock = ManualClock::new(0);
    let (timers, _errors) = service(&clock);
    let lock = Arc::new(CheckpointLock::new(0u32, Fairness::Eventual));
    timers.bind(Arc::clone(&lock), |fired: &mut u32, _t| {
        *fired += 1;
        Ok(())
    });
    timers.register_timer(timer(5, 1)).unwrap();
    {
        let held = lock.lock();
        clock.set(10);
        // The scheduler takes a due timer off its queue and then, with nothing in between that
        // could stop it, calls the target, which blocks on the lock we hold. So once the queue
        // is empty the timer is past every check but the status check inside the lock: this
        // is the path the test is named for, every run (not only when the thread is quick).
        let waited = std::time::Instant::now();
        while timers.pending() > 0 {
            assert!(
                waited.elapsed() < HANG_GUARD,
                "the timer thread never took the due timer"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        timers.quiesce(&held);
        assert_eq!(timers.status(), TimerStatus::Quiesced);
        assert_eq!(timers.register_timer(timer(20, 2)), Ok(TimerHandle::NEVER));
    }
    clock.set(100);
    timers.shutdown(); // joins the timer thread: whatever it was going to do is done
    assert_eq!(*lock.lock(), 0);
}

#[test]
#[should_panic(expected = "needs a guard of the checkpoint lock the service was bound to")]
fn quiesce_with_a_guard_of_another_lock_panics() {
    let clock = ManualClock::new(0);
    let (timers, _errors) = service(&clock);
    let bound = Arc::new(CheckpointLock::new(0u32, Fairness::Eventual));
    timers.bind(Arc::clone(&bound), |_: &mut u32, _t| Ok(()));
    let other = CheckpointLock::new((), Fairness::Eventual);
    // A guard of another lock proves nothing about the bound one: a timer could be running.
    timers.quiesce(&other.lock());
}

#[test]
fn quiesce_with_a_guard_of_the_bound_lock_is_accepted() {
    let clock = ManualClock::new(0);
    let (timers, _errors) = service(&clock);
    let bound = Arc::new(CheckpointLock::new(0u32, Fairness::Fair));
    timers.bind(Arc::clone(&bound), |_: &mut u32, _t| Ok(()));
    timers.quiesce(&bound.lock());
    assert_eq!(timers.status(), TimerStatus::Quiesced);
    timers.shutdown();
}

#[test]
fn registration_after_shutdown_is_an_error() {
    let clock = ManualClock::new(0);
    let (timers, _errors) = service(&clock);
    timers.shutdown();
    timers.shutdown();
    assert_eq!(timers.status(), TimerStatus::ShutDown);
    assert_eq!(
        timers.register_timer(timer(1, 1)),
        Err(TimerError::ShutDown)
    );
}

#[test]
fn an_error_or_panic_in_a_timer_is_reported() {
    for panics in [false, true] {
        let clock = ManualClock::new(0);
        let (timers, errors) = service(&clock);
        let lock = Arc::new(CheckpointLock::new((), Fairness::Eventual));
        timers.bind(Arc::clone(&lock), move |_: &mut (), _t| {
            if panics {
                panic!("timer exploded");
            }
            Err(OperatorError::user("op", "timer failed"))
        });
        timers.register_timer(timer(0, 0)).unwrap();
        clock.set(1);
        let error = errors.recv_timeout(HANG_GUARD).unwrap();
        if panics {
            assert!(matches!(error, TaskError::Panic(ref m) if m == "timer exploded"));
        } else {
            assert!(error.to_string().contains("timer failed"), "{error}");
        }
        timers.shutdown();
        assert!(
            lock.try_lock().is_some(),
            "the lock is released after a panic"
        );
    }
}

#[test]
fn fired_timers_and_their_lateness_are_recorded() {
    let clock = ManualClock::new(0);
    let config = TaskConfig::new("late").with_clock(Clock::Manual(clock.clone()));
    let metrics = Arc::clone(&config.metrics);
    let timers = SystemProcessingTimeService::spawn(&config, |_| {});
    let lock = Arc::new(CheckpointLock::new((), Fairness::Eventual));
    let (tx, rx) = mpsc::channel();
    timers.bind(Arc::clone(&lock), move |_: &mut (), _t| {
        tx.send(()).unwrap();
        Ok(())
    });
    timers.register_timer(timer(9, 0)).unwrap();
    clock.set(15); // due at 10, fires at 15: 5 ms late
    rx.recv_timeout(HANG_GUARD).unwrap();
    timers.shutdown();
    assert_eq!(metrics.timers_fired.get(), 1);
    assert_eq!(metrics.timer_lateness.summary().max / 1000, 5);
}

/// Fails in its timer.
struct FailingTimer;

impl Operator for FailingTimer {
    type In = u64;
    type Out = u64;
    fn name(&self) -> &str {
        "failing-timer"
    }
    fn open(&mut self, ctx: &mut Context<'_, u64>) -> Result<(), OperatorError> {
        ctx.register_timer(10, 0)?;
        Ok(())
    }
    fn process_element(
        &mut self,
        record: StreamRecord<u64>,
        ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        ctx.collect(record)
    }
    fn on_processing_time(
        &mut self,
        _t: Timer,
        _ctx: &mut Context<'_, u64>,
    ) -> Result<(), OperatorError> {
        Err(OperatorError::user("failing-timer", "boom in a timer"))
    }
}

struct Waits;

impl SourceFunction for Waits {
    type Out = u64;
    type State = ();
    fn run(&mut self, ctx: &mut SourceContext<'_, u64, ()>) -> Result<(), OperatorError> {
        ctx.cancellation().wait();
        Ok(())
    }
}

#[test]
fn a_failure_in_the_timer_thread_fails_the_task_and_stops_the_source() {
    let clock = ManualClock::new(0);
    let config = TaskConfig::new("t").with_clock(Clock::Manual(clock.clone()));
    let task = SourceStreamTask::new(config, Waits, FailingTimer, SharedOutput::new()).spawn();
    wait_running(&task);
    clock.set(11);
    let outcome = task.join();
    let failure = outcome.failure().expect("failed");
    assert_eq!(failure.thread, "t-timer");
    assert!(failure.to_string().contains("boom in a timer"), "{failure}");
}
