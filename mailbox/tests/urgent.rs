//! Urgent mails ([`Priority::URGENT`], Flink 2.1's urgent mails, FLINK-35051): taken before the
//! rest of a batch already built and visible to every take, within the fairness rule that keeps
//! a stream of them from starving the other mails (FLINK-39898).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;

use streamtask_mailbox::{
    Controller, Immediate, Mail, MailboxExecutor, MailboxProcessor, MailboxState, Priority,
    ProcessorBuilder, TaskMailbox,
};

type Log = Vec<String>;

fn urgent(body: &'static str) -> Mail<&'static str> {
    Mail::new(Priority::URGENT, body)
}

fn plain(body: &'static str) -> Mail<&'static str> {
    Mail::new(Priority::MIN, body)
}

/// Takes the batch's mails until it is exhausted.
fn run_batch(mailbox: &TaskMailbox<&'static str>) -> Vec<&'static str> {
    std::iter::from_fn(|| mailbox.try_take_from_batch().unwrap())
        .map(Mail::into_body)
        .collect()
}

fn push(text: &'static str) -> impl FnOnce(&mut Log) -> Result<(), String> + Send {
    move |log| {
        log.push(text.to_string());
        Ok(())
    }
}

/// Ends the loop at its first default-action step.
fn end(_: &mut Log, c: &mut Controller<'_>) -> Result<(), String> {
    c.all_actions_completed();
    Ok(())
}

#[test]
fn smoke() {
    let mailbox = TaskMailbox::new();
    mailbox.put(plain("plain")).unwrap();
    mailbox.put(urgent("urgent")).unwrap();
    assert!(mailbox.has_mail().unwrap());
    assert_eq!(mailbox.len(), 2);
    assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), "urgent");
    assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), "plain");
    assert!(!mailbox.has_mail().unwrap());
}

#[test]
fn urgent_is_above_every_other_priority() {
    assert!(Priority::MAX < Priority::URGENT);
    assert!(Priority::operator(usize::MAX) < Priority::URGENT);
    assert!(Priority::URGENT.is_urgent());
    assert!(!Priority::MAX.is_urgent());
}

#[test]
fn an_urgent_mail_put_during_a_batch_runs_before_the_batchs_remaining_mails() {
    let mailbox = TaskMailbox::new();
    for body in ["a", "b", "c"] {
        mailbox.put(plain(body)).unwrap();
    }
    assert!(mailbox.create_batch().unwrap());
    assert_eq!(
        mailbox.try_take_from_batch().unwrap().unwrap().into_body(),
        "a"
    );
    // From another thread, as a checkpoint trigger comes.
    thread::scope(|s| {
        s.spawn(|| mailbox.put(urgent("u")).unwrap());
    });
    assert_eq!(run_batch(&mailbox), vec!["u", "b", "c"]);
    assert!(!mailbox.has_mail().unwrap());
}

/// The same through the processor: a mail of the batch has another thread put an urgent mail;
/// it runs next, before the batch's other mails.
#[test]
fn the_processor_runs_an_urgent_mail_before_the_rest_of_its_batch() {
    let builder = ProcessorBuilder::<Log, String>::new(TaskMailbox::new());
    let urgent = builder.mailbox_executor(Priority::URGENT);
    let main = builder.mailbox_executor(Priority::MIN);
    let mut processor = builder.build(Immediate::new(Vec::new()));
    main.execute("a", move |log: &mut Log| {
        log.push("a".to_string());
        thread::spawn(move || urgent.execute("urgent", push("urgent")).unwrap())
            .join()
            .unwrap();
        Ok(())
    })
    .unwrap();
    main.execute("b", push("b")).unwrap();
    main.execute("c", push("c")).unwrap();
    processor.run_mailbox_loop(&mut end).unwrap();
    assert_eq!(
        processor.action_executor().state(),
        &vec!["a", "urgent", "b", "c"]
    );
}

#[test]
fn an_urgent_mail_is_visible_to_a_yield_at_an_operator_priority() {
    let builder = ProcessorBuilder::<Log, String>::new(TaskMailbox::new());
    let urgent = builder.mailbox_executor(Priority::URGENT);
    let operator = builder.mailbox_executor(Priority::operator(3));
    let mut processor = builder.build(Immediate::new(Vec::new()));
    // A task-level mail, which the yield must not see, queued before the urgent one.
    processor
        .main_executor()
        .execute("task-level", push("task-level"))
        .unwrap();
    urgent.execute("urgent", push("urgent")).unwrap();
    let mut log = Vec::new();
    assert!(operator.try_yield(&mut log).unwrap());
    assert_eq!(log, vec!["urgent"]);
    assert!(!operator.try_yield(&mut log).unwrap());

    // A blocking yield is woken by an urgent mail from another thread.
    let putter = thread::spawn(move || urgent.execute("late", push("late")).unwrap());
    operator.yield_now(&mut log).unwrap();
    putter.join().unwrap();
    assert_eq!(log, vec!["urgent", "late"]);
    processor.run_mailbox_loop(&mut end).unwrap();
    assert_eq!(processor.action_executor().state(), &vec!["task-level"]);
}

#[test]
fn an_urgent_mail_goes_before_a_mail_already_in_the_batch_for_a_take() {
    let mailbox = TaskMailbox::new();
    mailbox.put(Mail::new(Priority::MAX, "control")).unwrap();
    assert!(mailbox.create_batch().unwrap());
    mailbox.put(urgent("u")).unwrap();
    assert_eq!(
        mailbox.take(Priority::operator(0)).unwrap().into_body(),
        "u"
    );
    assert_eq!(
        mailbox.take(Priority::operator(0)).unwrap().into_body(),
        "control"
    );
}

#[test]
fn urgent_mails_keep_their_order_and_those_queued_together_run_back_to_back() {
    let mailbox = TaskMailbox::new();
    for body in ["a", "b"] {
        mailbox.put(plain(body)).unwrap();
    }
    assert!(mailbox.create_batch().unwrap());
    assert_eq!(
        mailbox.try_take_from_batch().unwrap().unwrap().into_body(),
        "a"
    );
    for body in ["u1", "u2", "u3"] {
        mailbox.put(urgent(body)).unwrap();
    }
    // A `put_first` urgent mail goes ahead of the other urgent mails.
    mailbox.put_first(urgent("u0")).unwrap();
    assert_eq!(run_batch(&mailbox), vec!["u0", "u1", "u2", "u3", "b"]);
}

/// The fairness rule inside a batch: after an urgent round, the batch's next mail runs before
/// the next round; once the batch is exhausted, urgent mails wait for the next batch.
#[test]
fn an_urgent_round_lets_one_batch_mail_run_before_the_next_round() {
    let mailbox = TaskMailbox::new();
    for body in ["a", "b", "c"] {
        mailbox.put(plain(body)).unwrap();
    }
    assert!(mailbox.create_batch().unwrap());
    let next = || mailbox.try_take_from_batch().unwrap().map(Mail::into_body);
    mailbox.put(urgent("u1")).unwrap();
    assert_eq!(next(), Some("u1"));
    mailbox.put(urgent("u2")).unwrap();
    assert_eq!(next(), Some("a"), "a round waits for one batch mail");
    assert_eq!(next(), Some("u2"));
    assert_eq!(next(), Some("b"));
    assert_eq!(next(), Some("c"));
    mailbox.put(urgent("u3")).unwrap();
    assert_eq!(next(), None, "an exhausted batch is not prolonged");
    mailbox.put(plain("d")).unwrap();
    assert!(mailbox.create_batch().unwrap());
    assert_eq!(run_batch(&mailbox), vec!["u3", "d"]);
}

/// The fairness rule for takes: after an urgent mail, a non-urgent mail visible to the take
/// goes before the next urgent one; with none visible, the urgent one does not wait.
#[test]
fn a_take_after_an_urgent_mail_prefers_a_visible_non_urgent_mail() {
    let mailbox = TaskMailbox::new();
    mailbox
        .put(Mail::new(Priority::operator(1), "timer"))
        .unwrap();
    mailbox.put(urgent("u1")).unwrap();
    let take = |p| mailbox.take(p).unwrap().into_body();
    assert_eq!(take(Priority::operator(1)), "u1");
    mailbox.put(urgent("u2")).unwrap();
    assert_eq!(take(Priority::operator(1)), "timer");
    assert_eq!(take(Priority::operator(1)), "u2");
    mailbox.put(plain("task-level")).unwrap();
    mailbox.put(urgent("u3")).unwrap();
    // The task-level mail is not visible at operator 1: the urgent one goes.
    assert_eq!(take(Priority::operator(1)), "u3");
    assert_eq!(take(Priority::MIN), "task-level");
}

#[test]
fn urgent_mails_are_counted_drained_and_refused_like_any_mail() {
    let mailbox = TaskMailbox::new();
    mailbox.put(plain("a")).unwrap();
    assert!(mailbox.create_batch().unwrap());
    mailbox.put(plain("b")).unwrap();
    mailbox.put(urgent("u")).unwrap();
    assert_eq!(mailbox.len(), 3);
    let drained: Vec<_> = mailbox.drain().into_iter().map(Mail::into_body).collect();
    assert_eq!(drained, vec!["u", "a", "b"]);
    assert!(!mailbox.has_mail().unwrap());

    mailbox.quiesce().unwrap();
    let refused = mailbox.put(urgent("late")).unwrap_err();
    assert_eq!(refused.state(), MailboxState::Quiesced);
    assert_eq!(refused.into_inner().into_body(), "late");
}

/// Each urgent mail of a chain puts the next one; how many ran when the timer mail ran.
struct Chain {
    ran: u32,
    timer_after: Option<u32>,
    steps: u32,
}

/// Urgent mails in a chain: each puts the next until `CHAIN` ran.
const CHAIN: u32 = 1_000;

fn link(
    urgent: MailboxExecutor<Chain, String>,
) -> impl FnOnce(&mut Chain) -> Result<(), String> + Send + 'static {
    move |chain| {
        chain.ran += 1;
        if chain.ran < CHAIN {
            let next = urgent.clone();
            urgent
                .execute("urgent", link(next))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// FLINK-39898: urgent mails arriving back to back (each puts the next) while a processing-time
/// timer's mail is queued. Without the fairness rule the chain keeps the batch alive and the
/// timer mail (and the input) wait for the whole chain; with it the timer mail runs after at
/// most two urgent mails, and the default action runs between the chain's batches.
#[test]
fn a_stream_of_urgent_mails_does_not_starve_a_queued_timer_mail() {
    let builder = ProcessorBuilder::<Chain, String>::new(TaskMailbox::new());
    let urgent = builder.mailbox_executor(Priority::URGENT);
    // The timer service puts a due timer's mail at its operator's priority.
    let timers = builder.mailbox_executor(Priority::operator(0));
    let mut processor = builder.build(Immediate::new(Chain {
        ran: 0,
        timer_after: None,
        steps: 0,
    }));
    urgent.execute("urgent", link(urgent.clone())).unwrap();
    timers
        .execute("timer", |chain: &mut Chain| {
            chain.timer_after = Some(chain.ran);
            Ok(())
        })
        .unwrap();
    // Ends once the chain is over and the timer ran; bounded either way (the chain ends).
    let mut input = |chain: &mut Chain, c: &mut Controller<'_>| -> Result<(), String> {
        chain.steps += 1;
        if chain.ran >= CHAIN && chain.timer_after.is_some() {
            c.all_actions_completed();
        }
        Ok(())
    };
    processor.run_mailbox_loop(&mut input).unwrap();
    let chain = processor.action_executor().state();
    assert_eq!(chain.ran, CHAIN);
    let after = chain.timer_after.expect("the timer mail ran");
    assert!(
        after <= 2,
        "the timer mail ran after {after} urgent mails of a chain of {CHAIN}"
    );
    assert!(
        chain.steps >= CHAIN - 1,
        "the input ran {} times during a chain of {CHAIN} urgent mails",
        chain.steps
    );
}

/// The same with a producer thread that keeps putting urgent mails: the timer mail, put by the
/// first urgent mail, runs while the stream goes on (the producer stops when it did, or after
/// a bounded number of mails). The loop's default action is suspended, so the loop takes mail
/// after mail, as a backpressured task does.
#[test]
fn a_producer_of_urgent_mails_does_not_starve_a_timer_mail() {
    const LIMIT: u32 = 200_000;
    let builder = ProcessorBuilder::<Log, String>::new(TaskMailbox::new());
    let urgent = builder.mailbox_executor(Priority::URGENT);
    let timers = builder.mailbox_executor(Priority::operator(0));
    let handle = builder.handle();
    let mut processor = builder.build(Immediate::new(Vec::new()));
    let timer_ran = Arc::new(AtomicBool::new(false));
    let put = Arc::new(AtomicU32::new(0));
    let producer = {
        let (timer_ran, put) = (Arc::clone(&timer_ran), Arc::clone(&put));
        thread::spawn(move || {
            let mut first = Some((timers, Arc::clone(&timer_ran)));
            while !timer_ran.load(Ordering::Acquire) && put.load(Ordering::Relaxed) < LIMIT {
                let timer = first.take();
                let mail = move |log: &mut Log| {
                    if let Some((timers, ran)) = timer {
                        log.push("first urgent".to_string());
                        let timer = move |log: &mut Log| {
                            log.push("timer".to_string());
                            ran.store(true, Ordering::Release);
                            Ok(())
                        };
                        timers.execute("timer", timer).map_err(|e| e.to_string())?;
                    }
                    Ok(())
                };
                urgent.execute("urgent", mail).unwrap();
                put.fetch_add(1, Ordering::Relaxed);
            }
            handle.all_actions_completed();
        })
    };
    let mut input = |_: &mut Log, c: &mut Controller<'_>| -> Result<(), String> {
        c.suspend_default_action();
        Ok(())
    };
    processor.run_mailbox_loop(&mut input).unwrap();
    producer.join().unwrap();
    let log = processor.action_executor().state();
    assert_eq!(log.first().map(String::as_str), Some("first urgent"));
    assert!(log.iter().any(|entry| entry == "timer"));
    assert!(
        put.load(Ordering::Relaxed) < LIMIT,
        "the timer mail waited for all {LIMIT} urgent mails"
    );
}

/// A processor whose loop blocks (its default action suspended) takes an urgent mail from
/// another thread at once.
#[test]
fn a_suspended_loop_is_woken_by_an_urgent_mail() {
    let mut processor =
        MailboxProcessor::<Log, String>::new(TaskMailbox::new(), Immediate::new(Vec::new()));
    let urgent = processor.mailbox_executor(Priority::URGENT);
    let handle = processor.handle();
    let putter = thread::spawn(move || {
        urgent
            .execute("urgent", move |log: &mut Log| {
                log.push("urgent".to_string());
                handle.all_actions_completed();
                Ok(())
            })
            .unwrap();
    });
    let mut idle = |_: &mut Log, c: &mut Controller<'_>| -> Result<(), String> {
        c.suspend_default_action();
        Ok(())
    };
    processor.run_mailbox_loop(&mut idle).unwrap();
    putter.join().unwrap();
    assert_eq!(processor.action_executor().state(), &vec!["urgent"]);
}
