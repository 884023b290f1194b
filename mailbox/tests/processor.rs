//! MailboxProcessor: ports of Flink's `TaskMailboxProcessorTest` / `MailboxProcessorTest`
//! behaviours: the loop, suspension and resume, poison and suspend, failures, shutdown.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use streamtask_core::metrics::TaskMetrics;
use streamtask_core::trace::{TraceLog, Tracer};
use streamtask_mailbox::{
    Controller, Immediate, Letter, LoopError, MAILBOX_LATENCY_SAMPLE, Mail, MailboxProcessor,
    MailboxState, Priority, ProcessorBuilder, SubmitError, SuspendCause, Suspension, TakeError,
    TaskMailbox,
};

type Processor = MailboxProcessor<Vec<String>, String>;

fn processor() -> Processor {
    MailboxProcessor::new(TaskMailbox::new(), Immediate::new(Vec::new()))
}

fn push(text: &'static str) -> impl FnOnce(&mut Vec<String>) -> Result<(), String> + Send {
    move |v| {
        v.push(text.to_string());
        Ok(())
    }
}

fn state(processor: &Processor) -> Vec<String> {
    processor.action_executor().state().clone()
}

#[test]
fn smoke() {
    let mut processor = processor();
    processor
        .main_executor()
        .execute("first", push("mail"))
        .unwrap();
    let mut steps = 0;
    let mut action = |v: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        steps += 1;
        v.push(format!("step {steps}"));
        if steps == 3 {
            c.all_actions_completed();
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    assert_eq!(
        state(&processor),
        vec!["mail", "step 1", "step 2", "step 3"]
    );
    assert!(!processor.is_mailbox_loop_running());
}

#[test]
fn all_actions_completed_from_another_thread_ends_the_loop() {
    let mut processor = processor();
    let handle = processor.handle();
    let (first_step_tx, first_step_rx) = mpsc::channel();
    let ender = thread::spawn(move || {
        first_step_rx.recv().unwrap();
        handle.all_actions_completed();
    });
    let mut told = false;
    let mut action = |_: &mut Vec<String>, _: &mut Controller<'_>| -> Result<(), String> {
        if !told {
            told = true;
            first_step_tx.send(()).unwrap();
        }
        thread::yield_now();
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    ender.join().unwrap();
    assert!(!processor.is_mailbox_loop_running());
    // Running it again returns at once: the loop is over for good.
    let mut never = |_: &mut Vec<String>, _: &mut Controller<'_>| -> Result<(), String> {
        panic!("the default action ran after all actions completed")
    };
    processor.run_mailbox_loop(&mut never).unwrap();
}

#[test]
fn poison_after_close_is_a_silent_no_op() {
    // FLINK-14544: cancel() after the task ended by itself and closed its mailbox.
    let mut processor = processor();
    processor.prepare_close().unwrap();
    processor.handle().all_actions_completed();
    assert!(processor.mailbox().is_empty());
    processor.close().unwrap();
    processor.all_actions_completed();
    processor.handle().suspend();
    assert!(processor.is_mailbox_loop_running(), "no poison ever ran");
}

#[test]
fn mails_put_after_the_loop_ended_wait_for_drain() {
    let mut processor = processor();
    processor
        .main_executor()
        .execute("queued", push("queued"))
        .unwrap();
    let mut action = |v: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        v.push("step".into());
        c.all_actions_completed();
        Ok(())
    };
    // Run the queued mail first, then the step that ends the loop.
    processor.run_mailbox_loop(&mut action).unwrap();
    assert_eq!(state(&processor), vec!["queued", "step"]);
    processor
        .main_executor()
        .execute("late", push("late"))
        .unwrap();
    processor.run_mailbox_loop(&mut action).unwrap();
    assert_eq!(
        processor.mailbox().len(),
        1,
        "the late mail waits for drain"
    );
    processor.prepare_close().unwrap();
    processor.drain().unwrap();
    assert_eq!(state(&processor), vec!["queued", "step", "late"]);
}

#[test]
fn an_error_from_a_mail_ends_the_loop_with_that_error() {
    // Flink's testSubmittingRunnableWithException.
    let mut processor = processor();
    let executor = processor.main_executor();
    executor
        .execute("fails", |_: &mut Vec<String>| Err("expected".to_string()))
        .unwrap();
    executor.execute("after", push("after")).unwrap();
    let mut action = |_: &mut Vec<String>, _: &mut Controller<'_>| -> Result<(), String> {
        panic!("the default action must not run before the batch")
    };
    match processor.run_mailbox_loop(&mut action) {
        Err(LoopError::Failed(message)) => assert_eq!(message, "expected"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(processor.mailbox().len(), 1, "the mails after it stay");
}

#[test]
fn an_error_from_the_default_action_ends_the_loop() {
    let mut processor = processor();
    let mut action = |_: &mut Vec<String>, _: &mut Controller<'_>| Err("broken input".to_string());
    let err = processor.run_mailbox_loop(&mut action).unwrap_err();
    assert_eq!(err.to_string(), "broken input");
}

#[test]
fn a_failure_reported_from_another_thread_fails_the_loop() {
    let mut processor = processor();
    let handle = processor.handle();
    let mut action = |_: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        let handle = handle.clone();
        thread::spawn(move || handle.report_failure("timer thread died".into()).unwrap())
            .join()
            .unwrap();
        c.suspend_default_action();
        Ok(())
    };
    match processor.run_mailbox_loop(&mut action) {
        Err(LoopError::Failed(message)) => assert_eq!(message, "timer thread died"),
        other => panic!("unexpected {other:?}"),
    }
    processor.prepare_close().unwrap();
    assert_eq!(
        processor.handle().report_failure("too late".into()),
        Err("too late".to_string()),
        "a refused report is handed back"
    );
}

#[test]
fn a_suspended_default_action_is_resumed_from_another_thread() {
    let mut processor = processor();
    let (suspended_tx, suspended_rx) = mpsc::channel::<Suspension>();
    let resumer = thread::spawn(move || {
        let suspension = suspended_rx.recv().unwrap();
        suspension.resume();
        suspension.resume(); // idempotent
    });
    let mut steps = 0;
    let mut action = |v: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        steps += 1;
        v.push(format!("step {steps}"));
        match steps {
            1 => suspended_tx.send(c.suspend_default_action()).unwrap(),
            _ => c.all_actions_completed(),
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    resumer.join().unwrap();
    assert_eq!(state(&processor), vec!["step 1", "step 2"]);
}

#[test]
fn mails_keep_running_while_the_default_action_is_suspended() {
    let mut processor = processor();
    let executor = processor.main_executor();
    let mut suspension = None;
    let mut steps = 0;
    let (tx, rx) = mpsc::channel::<Suspension>();
    let worker = thread::spawn(move || {
        let suspension = rx.recv().unwrap();
        executor.execute("while suspended", push("mail")).unwrap();
        executor
            .execute("resume", move |_: &mut Vec<String>| {
                suspension.resume();
                Ok(())
            })
            .unwrap();
    });
    let mut action = |v: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        steps += 1;
        v.push(format!("step {steps}"));
        if steps == 1 {
            let s = c.suspend_default_action();
            suspension = Some(s.clone());
            tx.send(s).unwrap();
        } else {
            c.all_actions_completed();
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    worker.join().unwrap();
    assert_eq!(state(&processor), vec!["step 1", "mail", "step 2"]);
    assert!(suspension.is_some());
}

#[test]
fn a_stale_suspension_cannot_resume_a_newer_one() {
    let mut processor = processor();
    let suspensions = std::cell::RefCell::new(Vec::<Suspension>::new());
    let mut action = |v: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        v.push("step".into());
        suspensions.borrow_mut().push(c.suspend_default_action());
        Ok(())
    };
    // Step 1 suspends (first suspension); the signal mail makes the loop notice.
    assert!(processor.run_mailbox_step(&mut action).unwrap());
    assert!(!processor.is_default_action_available());
    assert!(
        processor.run_mailbox_step(&mut action).unwrap(),
        "the signal mail"
    );
    let first = suspensions.borrow()[0].clone();
    // Resumed, step 2 runs and suspends again (second suspension).
    first.resume();
    while suspensions.borrow().len() < 2 {
        assert!(processor.run_mailbox_step(&mut action).unwrap());
    }
    // The old suspension resumes nothing now.
    first.resume();
    while processor.run_mailbox_step(&mut action).unwrap() {}
    assert!(!processor.is_default_action_available());
    assert_eq!(state(&processor).len(), 2);
    // The current one does.
    let second = suspensions.borrow()[1].clone();
    second.resume();
    assert!(processor.run_mailbox_step(&mut action).unwrap());
    assert!(processor.is_default_action_available());
}

#[test]
fn suspending_twice_returns_the_same_suspension() {
    let mut processor = processor();
    let mut both = None;
    let mut action = |_: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        let a = c.suspend_default_action();
        let b = c.suspend_default_action_for(SuspendCause::Idle);
        both = Some((a, b));
        Ok(())
    };
    processor.run_mailbox_step(&mut action).unwrap();
    let (a, b) = both.unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

#[test]
fn resuming_after_close_is_harmless() {
    let mut processor = processor();
    let mut suspension = None;
    let mut action = |_: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        suspension = Some(c.suspend_default_action());
        Ok(())
    };
    processor.run_mailbox_step(&mut action).unwrap();
    processor.close().unwrap();
    let suspension = suspension.unwrap();
    thread::spawn(move || {
        suspension.resume();
        suspension.waker().wake();
    })
    .join()
    .unwrap();
}

#[test]
fn a_suspension_waker_resumes_the_default_action() {
    let mut processor = processor();
    let (tx, rx) = mpsc::channel::<std::task::Waker>();
    let waker_thread = thread::spawn(move || rx.recv().unwrap().wake());
    let mut steps = 0;
    let mut action = |_: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        steps += 1;
        if steps == 1 {
            tx.send(c.suspend_default_action().waker()).unwrap();
        } else {
            c.all_actions_completed();
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    waker_thread.join().unwrap();
    assert_eq!(steps, 2);
}

#[test]
fn suspend_makes_the_loop_return_and_it_can_run_again() {
    // FLINK-17012: suspend() from any thread; runMailboxLoop() resumes.
    let mut processor = processor();
    let handle = processor.handle();
    let mut steps = 0;
    let mut action = |v: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        steps += 1;
        v.push(format!("step {steps}"));
        match steps {
            1 => {
                let handle = handle.clone();
                thread::spawn(move || handle.suspend()).join().unwrap();
            }
            3 => c.all_actions_completed(),
            _ => {}
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    assert_eq!(state(&processor), vec!["step 1"]);
    assert!(processor.is_mailbox_loop_running());
    processor.run_mailbox_loop(&mut action).unwrap();
    assert_eq!(state(&processor), vec!["step 1", "step 2", "step 3"]);
    assert!(!processor.is_mailbox_loop_running());
}

#[test]
fn run_mailbox_step_runs_one_mail_else_one_default_action() {
    // FLINK-18906.
    let mut processor = processor();
    let executor = processor.main_executor();
    executor.execute("a", push("a")).unwrap();
    executor.execute("b", push("b")).unwrap();
    let mut action = |v: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        v.push("step".into());
        c.suspend_default_action();
        Ok(())
    };
    assert!(processor.run_mailbox_step(&mut action).unwrap());
    assert_eq!(state(&processor), vec!["a"]);
    assert!(processor.run_mailbox_step(&mut action).unwrap());
    assert!(processor.run_mailbox_step(&mut action).unwrap());
    assert_eq!(state(&processor), vec!["a", "b", "step"]);
    assert!(
        processor.run_mailbox_step(&mut action).unwrap(),
        "the signal mail"
    );
    assert!(
        !processor.run_mailbox_step(&mut action).unwrap(),
        "suspended, no mail"
    );
}

#[test]
fn a_mail_that_enqueues_a_mail_cannot_starve_the_default_action() {
    // Flink's testAvoidTaskStarvation: mails enqueued by a running batch wait for the next one.
    let mut processor = processor();
    let executor = processor.main_executor();
    fn reenqueue(
        executor: streamtask_mailbox::MailboxExecutor<Vec<String>, String>,
        left: u32,
    ) -> impl FnOnce(&mut Vec<String>) -> Result<(), String> + Send + 'static {
        move |v: &mut Vec<String>| {
            v.push(format!("mail {left}"));
            if left > 0 {
                let next = executor.clone();
                executor
                    .execute("again", reenqueue(next, left - 1))
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
    }
    executor
        .execute("start", reenqueue(executor.clone(), 2))
        .unwrap();
    let mut steps = 0;
    let mut action = |v: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        steps += 1;
        v.push(format!("step {steps}"));
        if steps == 3 {
            c.all_actions_completed();
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    assert_eq!(
        state(&processor),
        vec!["mail 2", "step 1", "mail 1", "step 2", "mail 0", "step 3"]
    );
}

#[test]
fn drain_runs_what_is_left_in_order_and_close_cancels_pending_submits() {
    let mut processor = processor();
    let executor = processor.main_executor();
    executor.execute("a", push("a")).unwrap();
    executor.execute("b", push("b")).unwrap();
    processor.prepare_close().unwrap();
    assert_eq!(processor.mailbox().state(), MailboxState::Quiesced);
    assert!(executor.execute("refused", push("refused")).is_err());
    processor.drain().unwrap();
    assert_eq!(state(&processor), vec!["a", "b"]);

    let mut processor = self::processor();
    let executor = processor.main_executor();
    let pending = executor
        .submit("never runs", |_: &mut Vec<String>| Ok(1))
        .unwrap();
    assert_eq!(processor.close().unwrap(), 1);
    assert!(matches!(pending.wait(), Err(SubmitError::Cancelled)));
    assert_eq!(processor.close().unwrap(), 0);
}

#[test]
fn the_loop_refuses_to_run_off_its_thread_or_when_closed() {
    let mut processor = processor();
    let mut action = |_: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        c.all_actions_completed();
        Ok(())
    };
    let mut processor = thread::spawn(move || {
        assert!(matches!(
            processor.run_mailbox_loop(&mut action),
            Err(LoopError::Mailbox(TakeError::WrongThread))
        ));
        assert!(processor.has_mail().is_err());
        processor
    })
    .join()
    .unwrap();
    processor.close().unwrap();
    let mut action = |_: &mut Vec<String>, _: &mut Controller<'_>| -> Result<(), String> { Ok(()) };
    assert!(matches!(
        processor.run_mailbox_loop(&mut action),
        Err(LoopError::Mailbox(TakeError::Closed))
    ));
}

#[test]
fn letters_put_straight_into_the_mailbox_run_too() {
    let mut processor = processor();
    processor
        .mailbox()
        .put(Mail::new(
            Priority::MIN,
            Letter::action("direct", push("direct")),
        ))
        .unwrap();
    let letter = Letter::<Vec<String>, String>::action("described", push("x"));
    assert_eq!(letter.description(), "described");
    assert!(!letter.is_control());
    let mut action = |_: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        c.all_actions_completed();
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    assert_eq!(state(&processor), vec!["direct"]);
}

#[test]
fn mails_are_counted_and_their_latency_and_spans_recorded() {
    let metrics = Arc::new(TaskMetrics::new("metered"));
    let log = TraceLog::new();
    let builder =
        ProcessorBuilder::with_metrics(TaskMailbox::new(), Arc::clone(&metrics), Tracer::to(&log));
    let executor = builder.mailbox_executor(Priority::MIN);
    let mut processor = builder.build(Immediate::new(Vec::<String>::new()));
    // The latency is sampled per putting thread (its first mail, then one in
    // MAILBOX_LATENCY_SAMPLE), so the mails come from a fresh thread: three samples.
    let mails = 2 * MAILBOX_LATENCY_SAMPLE + 1;
    thread::spawn(move || {
        for _ in 0..mails {
            executor.execute("counted", push("x")).unwrap();
        }
    })
    .join()
    .unwrap();
    let mut action = |_: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        c.all_actions_completed();
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    assert_eq!(
        metrics.mails.get(),
        u64::from(mails),
        "internal signal mails are not counted"
    );
    assert_eq!(metrics.mailbox_latency.count(), 3, "one mail in the sample");
    let spans = log.events();
    assert_eq!(
        spans.iter().filter(|e| e.name == "counted").count(),
        mails as usize
    );
    assert!(spans.iter().all(|e| e.cat == "mail"));
}

#[test]
fn blocked_time_while_suspended_goes_to_the_named_cause() {
    let metrics = Arc::new(TaskMetrics::new("idle"));
    let builder =
        ProcessorBuilder::with_metrics(TaskMailbox::new(), Arc::clone(&metrics), Tracer::off());
    let mut processor = builder.build(Immediate::new(Vec::<String>::new()));
    let (tx, rx) = mpsc::channel::<Suspension>();
    // The loop runs on this thread; the resumer resumes only once the kernel reports it asleep,
    // which on the suspended loop's path happens only inside the blocking take (so the wait
    // is recorded whatever the scheduling, and no timing is asserted).
    let loop_thread = own_tid();
    let resumer = thread::spawn(move || {
        let suspension = rx.recv().unwrap();
        while !is_sleeping(&loop_thread) {
            thread::sleep(Duration::from_millis(1));
        }
        suspension.resume();
    });
    let mut steps = 0;
    let mut action = |_: &mut Vec<String>, c: &mut Controller<'_>| -> Result<(), String> {
        steps += 1;
        if steps == 1 {
            tx.send(c.suspend_default_action_for(SuspendCause::Backpressure))
                .unwrap();
        } else {
            c.all_actions_completed();
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    resumer.join().unwrap();
    // The loop blocked while suspended for backpressure: that wait (its length is not
    // asserted) is backpressured time, and none of it is idle time.
    assert!(
        metrics.backpressured_micros.get() > 0,
        "the blocked time went to the named cause"
    );
    assert_eq!(metrics.idle_micros.get(), 0, "nothing was idle");
}

/// This thread's kernel id (Linux), from `/proc/thread-self`.
fn own_tid() -> String {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self is readable");
    link.file_name()
        .expect("/proc/thread-self ends in the tid")
        .to_string_lossy()
        .into_owned()
}

/// Whether the kernel reports thread `tid` of this process asleep (state `S`: blocked).
fn is_sleeping(tid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .expect("the loop thread is alive");
    let after_comm = &stat[stat.rfind(')').expect("stat has a comm") + 1..];
    after_comm.split_whitespace().next() == Some("S")
}

#[test]
fn the_processor_runs_actions_through_its_action_executor() {
    // The bridge's shape: the state lives behind a lock shared with another thread.
    struct Locked(Arc<Mutex<Vec<String>>>, usize);
    impl streamtask_mailbox::ActionExecutor<Vec<String>> for Locked {
        fn run<R>(&mut self, action: impl FnOnce(&mut Vec<String>) -> R) -> R {
            self.1 += 1;
            action(&mut self.0.lock().unwrap())
        }
    }
    let shared = Arc::new(Mutex::new(Vec::new()));
    let mut processor: MailboxProcessor<Vec<String>, String, Locked> =
        MailboxProcessor::new(TaskMailbox::new(), Locked(Arc::clone(&shared), 0));
    let handle = processor.handle();
    processor
        .main_executor()
        .execute("locked", push("under the lock"))
        .unwrap();
    let mut action = |v: &mut Vec<String>, _: &mut Controller<'_>| -> Result<(), String> {
        v.push("step".into());
        handle.all_actions_completed(); // a control mail: runs without the executor
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
    assert_eq!(*shared.lock().unwrap(), vec!["under the lock", "step"]);
    assert_eq!(
        processor.action_executor().1,
        2,
        "one mail and one step, not the poison"
    );
}
