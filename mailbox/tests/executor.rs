//! MailboxExecutor: ports of Flink's `MailboxExecutorImplTest` behaviours: execute and submit
//! from any thread, yield and try_yield on the mailbox thread only, is_idle.

use std::thread;
use std::time::Duration;

use streamtask_mailbox::{
    Controller, Immediate, LoopError, MailboxExecutor, MailboxProcessor, MailboxState, Priority,
    SubmitError, TakeError, TaskMailbox, YieldError,
};

type Processor = MailboxProcessor<Vec<u32>, String>;

fn processor() -> Processor {
    MailboxProcessor::new(TaskMailbox::new(), Immediate::new(Vec::new()))
}

fn push(n: u32) -> impl FnOnce(&mut Vec<u32>) -> Result<(), String> + Send + 'static {
    move |v| {
        v.push(n);
        Ok(())
    }
}

/// Runs the processor until `until` says the state is complete.
fn run_until(processor: &mut Processor, until: impl Fn(&Vec<u32>) -> bool) {
    let mut action = |v: &mut Vec<u32>, c: &mut Controller<'_>| -> Result<(), String> {
        if until(v) {
            c.all_actions_completed();
        } else {
            c.suspend_default_action().resume();
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut action).unwrap();
}

#[test]
fn smoke() {
    let mut processor = processor();
    let executor = processor.mailbox_executor(Priority::operator(0));
    assert_eq!(executor.priority(), Priority::operator(0));
    executor.execute("one", push(1)).unwrap();
    run_until(&mut processor, |v| v.len() == 1);
    assert_eq!(processor.action_executor().state(), &vec![1]);
}

#[test]
fn execute_from_other_threads_runs_every_action_once_in_per_thread_order() {
    let mut processor = processor();
    let executor = processor.main_executor();
    thread::scope(|s| {
        for t in 0..3u32 {
            let executor = executor.clone();
            s.spawn(move || {
                for i in 0..100 {
                    executor.execute("push", push(t * 1000 + i)).unwrap();
                }
            });
        }
    });
    run_until(&mut processor, |v| v.len() == 300);
    let got = processor.action_executor().state().clone();
    for t in 0..3 {
        let mine: Vec<u32> = got.iter().copied().filter(|n| n / 1000 == t).collect();
        assert_eq!(mine, (0..100).map(|i| t * 1000 + i).collect::<Vec<_>>());
    }
}

#[test]
fn submit_hands_back_the_result() {
    let mut processor = processor();
    let executor = processor.main_executor();
    let handle = thread::spawn(move || {
        executor
            .submit("sum", |v: &mut Vec<u32>| {
                v.push(5);
                Ok(v.iter().sum::<u32>())
            })
            .unwrap()
    })
    .join()
    .unwrap();
    assert!(!handle.is_done());
    let handle = handle.wait_timeout(Duration::from_millis(1)).unwrap_err();
    run_until(&mut processor, |v| !v.is_empty());
    assert!(handle.is_done());
    assert_eq!(handle.wait().unwrap(), 5);
}

#[test]
fn an_error_inside_a_submitted_mail_goes_to_the_handle_not_the_loop() {
    let mut processor = processor();
    let executor = processor.main_executor();
    let failing = executor
        .submit("fails", |_: &mut Vec<u32>| -> Result<u32, String> {
            Err("bad input".into())
        })
        .unwrap();
    executor.execute("after", push(1)).unwrap();
    run_until(&mut processor, |v| v.len() == 1);
    match failing.wait_timeout(Duration::from_secs(10)) {
        Ok(Err(SubmitError::Failed(message))) => assert_eq!(message, "bad input"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn an_error_inside_an_executed_mail_ends_the_loop() {
    let mut processor = processor();
    processor
        .main_executor()
        .execute("fails", |_: &mut Vec<u32>| Err("fatal".to_string()))
        .unwrap();
    let mut action = |_: &mut Vec<u32>, _: &mut Controller<'_>| -> Result<(), String> { Ok(()) };
    assert!(matches!(
        processor.run_mailbox_loop(&mut action),
        Err(LoopError::Failed(m)) if m == "fatal"
    ));
}

#[test]
fn refused_actions_are_handed_back() {
    let processor = processor();
    let executor = processor.main_executor();
    processor.prepare_close().unwrap();
    let rejected = executor.execute("late", push(7)).unwrap_err();
    assert_eq!(rejected.state(), MailboxState::Quiesced);
    assert!(rejected.to_string().contains("quiesced"));
    let mut state = Vec::new();
    (rejected.into_inner())(&mut state).unwrap();
    assert_eq!(state, vec![7], "the very closure came back");
    let rejected = executor
        .submit("late", |_: &mut Vec<u32>| Ok(3u32))
        .unwrap_err();
    assert_eq!((rejected.into_inner())(&mut state).unwrap(), 3);
}

#[test]
fn pending_submits_are_cancelled_when_the_processor_closes() {
    let mut processor = processor();
    let handle = processor
        .main_executor()
        .submit("dropped", |_: &mut Vec<u32>| Ok(()))
        .unwrap();
    let waiter = thread::spawn(move || handle.wait());
    processor.close().unwrap();
    assert!(matches!(
        waiter.join().unwrap(),
        Err(SubmitError::Cancelled)
    ));
}

#[test]
fn yield_now_runs_the_next_visible_mail_and_blocks_for_one() {
    let processor = processor();
    let executor = processor.mailbox_executor(Priority::operator(1));
    let producer = executor.clone();
    let mut state = Vec::new();
    thread::scope(|s| {
        s.spawn(move || producer.execute("later", push(9)).unwrap());
        executor.yield_now(&mut state).unwrap();
    });
    assert_eq!(state, vec![9]);
    assert!(!executor.try_yield(&mut state).unwrap(), "nothing left");
}

#[test]
fn try_yield_runs_one_mail_at_a_time() {
    let processor = processor();
    let executor = processor.mailbox_executor(Priority::operator(0));
    executor.execute("a", push(1)).unwrap();
    executor.execute("b", push(2)).unwrap();
    let mut state = Vec::new();
    assert!(executor.try_yield(&mut state).unwrap());
    assert_eq!(state, vec![1]);
    assert!(executor.try_yield(&mut state).unwrap());
    assert!(!executor.try_yield(&mut state).unwrap());
    assert_eq!(state, vec![1, 2]);
}

#[test]
fn yields_are_mailbox_thread_only() {
    let processor = processor();
    let executor = processor.mailbox_executor(Priority::MIN);
    thread::spawn(move || {
        let mut state = Vec::new();
        assert!(matches!(
            executor.try_yield(&mut state),
            Err(YieldError::Mailbox(TakeError::WrongThread))
        ));
        assert!(matches!(
            executor.yield_now(&mut state),
            Err(YieldError::Mailbox(TakeError::WrongThread))
        ));
    })
    .join()
    .unwrap();
}

#[test]
fn a_yield_runs_control_mails_too() {
    let mut processor = processor();
    let executor = processor.mailbox_executor(Priority::operator(3));
    let mut state = Vec::new();

    // A failure report is visible to every yield and comes out as its error.
    processor
        .handle()
        .report_failure("reported".into())
        .unwrap();
    assert!(matches!(
        executor.yield_now(&mut state),
        Err(YieldError::Failed(m)) if m == "reported"
    ));

    // A poison taken by a yield still ends the loop.
    processor.handle().all_actions_completed();
    executor.yield_now(&mut state).unwrap();
    assert!(!processor.is_mailbox_loop_running());
    let mut never = |_: &mut Vec<u32>, _: &mut Controller<'_>| -> Result<(), String> {
        panic!("the loop is over")
    };
    processor.run_mailbox_loop(&mut never).unwrap();
}

#[test]
fn is_idle_means_suspended_without_mail_and_open() {
    let mut processor = processor();
    let executor: MailboxExecutor<Vec<u32>, String> = processor.main_executor();
    assert!(!executor.is_idle(), "the default action is available");
    let mut action = |_: &mut Vec<u32>, c: &mut Controller<'_>| -> Result<(), String> {
        c.suspend_default_action();
        Ok(())
    };
    processor.run_mailbox_step(&mut action).unwrap(); // suspends, leaves a signal mail
    assert!(!executor.is_idle(), "a mail is waiting");
    processor.run_mailbox_step(&mut action).unwrap();
    assert!(executor.is_idle());
    processor.prepare_close().unwrap();
    assert!(
        !executor.is_idle(),
        "a closing mailbox is not idle (FLINK-19109)"
    );
}
