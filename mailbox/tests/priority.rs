//! Priorities are visibility, not order: a take at priority `p` sees only mails with priority
//! `>= p`, FIFO among them; the others keep their places (Flink's `takeOrNull`, FLINK-13248).

use streamtask_mailbox::{
    Controller, Immediate, Mail, MailboxProcessor, Priority, TaskMailbox, YieldError,
};

fn bodies(mails: impl IntoIterator<Item = Mail<&'static str>>) -> Vec<&'static str> {
    mails.into_iter().map(Mail::into_body).collect()
}

#[test]
fn smoke() {
    let mailbox = TaskMailbox::new();
    mailbox.put(Mail::new(Priority::MIN, "task")).unwrap();
    mailbox
        .put(Mail::new(Priority::operator(0), "op0"))
        .unwrap();
    assert_eq!(
        mailbox.take(Priority::operator(0)).unwrap().into_body(),
        "op0"
    );
    assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), "task");
}

#[test]
fn a_take_sees_only_mails_at_or_above_its_priority_in_fifo_order() {
    let mailbox = TaskMailbox::new();
    for (priority, body) in [
        (Priority::MIN, "checkpoint"),
        (Priority::operator(2), "op2-a"),
        (Priority::operator(0), "op0"),
        (Priority::MAX, "control"),
        (Priority::operator(1), "op1"),
        (Priority::operator(2), "op2-b"),
    ] {
        mailbox.put(Mail::new(priority, body)).unwrap();
    }
    let at_op1: Vec<&str> = std::iter::from_fn(|| mailbox.try_take(Priority::operator(1)).unwrap())
        .map(Mail::into_body)
        .collect();
    assert_eq!(at_op1, vec!["op2-a", "control", "op1", "op2-b"]);
    // The skipped mails kept their places.
    assert_eq!(bodies(mailbox.drain()), vec!["checkpoint", "op0"]);
}

#[test]
fn max_priority_mails_are_visible_to_every_take() {
    let mailbox = TaskMailbox::new();
    mailbox.put(Mail::new(Priority::MAX, "poison")).unwrap();
    assert_eq!(mailbox.take(Priority::MAX).unwrap().into_body(), "poison");
    mailbox.put(Mail::new(Priority::MAX, "notice")).unwrap();
    assert_eq!(
        mailbox
            .take(Priority::operator(usize::MAX))
            .unwrap()
            .into_body(),
        "notice"
    );
}

#[test]
fn min_priority_mails_are_invisible_to_operator_takes() {
    let mailbox = TaskMailbox::new();
    mailbox.put(Mail::new(Priority::MIN, "checkpoint")).unwrap();
    assert!(mailbox.try_take(Priority::operator(0)).unwrap().is_none());
    assert_eq!(mailbox.len(), 1);
}

#[test]
fn takes_honour_the_priority_inside_an_open_batch() {
    // Flink hotfix cc309c5f58: take/tryTake ignored the priority inside the batch.
    let mailbox = TaskMailbox::new();
    mailbox.put(Mail::new(Priority::MIN, "checkpoint")).unwrap();
    mailbox
        .put(Mail::new(Priority::operator(3), "op3"))
        .unwrap();
    assert!(mailbox.create_batch().unwrap());
    mailbox
        .put(Mail::new(Priority::operator(3), "op3-queued"))
        .unwrap();
    assert_eq!(
        mailbox
            .try_take(Priority::operator(3))
            .unwrap()
            .unwrap()
            .into_body(),
        "op3"
    );
    assert_eq!(
        mailbox.take(Priority::operator(3)).unwrap().into_body(),
        "op3-queued"
    );
    // The batch's own take ignores priority.
    assert_eq!(
        mailbox.try_take_from_batch().unwrap().unwrap().into_body(),
        "checkpoint"
    );
}

#[test]
fn operator_priorities_follow_the_chain_index() {
    assert!(Priority::MIN < Priority::operator(0));
    assert!(Priority::operator(0) < Priority::operator(1));
    assert!(Priority::operator(usize::MAX) < Priority::MAX);
    assert!(Priority::MAX < Priority::URGENT);
    assert_eq!(Priority::MIN.get(), -1);
    assert_eq!(Priority::URGENT.get(), i32::MAX);
    assert_eq!(Priority::MAX.get(), i32::MAX - 1);
    assert_eq!(Priority::operator(usize::MAX).get(), i32::MAX - 2);
}

/// Flink's `testOperatorYieldExecutesSelectedTimers`: a yield at an operator's priority runs its
/// own mails, those of downstream operators and MAX mails, never upstream or task-level ones.
#[test]
fn a_yield_runs_own_and_downstream_mails_only() {
    let mut processor = MailboxProcessor::<Vec<&'static str>, String, _>::new(
        TaskMailbox::new(),
        Immediate::new(Vec::new()),
    );
    let task = processor.main_executor();
    let op0 = processor.mailbox_executor(Priority::operator(0));
    let op1 = processor.mailbox_executor(Priority::operator(1));
    let op2 = processor.mailbox_executor(Priority::operator(2));
    let notices = processor.mailbox_executor(Priority::MAX);
    let log = |name: &'static str| {
        move |v: &mut Vec<&'static str>| -> Result<(), String> {
            v.push(name);
            Ok(())
        }
    };
    task.execute("task", log("checkpoint")).unwrap();
    op0.execute("op0", log("op0 timer")).unwrap();
    op2.execute("op2", log("op2 timer")).unwrap();
    notices.execute("notice", log("complete")).unwrap();
    op1.execute("op1", log("op1 event")).unwrap();

    let mut state = Vec::new();
    while op1.try_yield(&mut state).unwrap() {}
    assert_eq!(state, vec!["op2 timer", "complete", "op1 event"]);
    assert_eq!(processor.mailbox().len(), 2, "upstream and task mails wait");

    let mut done = |_: &mut Vec<&'static str>, c: &mut Controller<'_>| {
        c.all_actions_completed();
        Ok(())
    };
    // The main loop's batch runs the rest, in FIFO order.
    assert!(processor.run_mailbox_step(&mut done).unwrap());
    assert!(processor.run_mailbox_step(&mut done).unwrap());
    assert_eq!(
        processor.action_executor().state(),
        &vec!["checkpoint", "op0 timer"]
    );
}

#[test]
fn a_blocking_yield_skips_invisible_mails_until_a_visible_one_arrives() {
    let processor = MailboxProcessor::<Vec<u32>, String, _>::new(
        TaskMailbox::new(),
        Immediate::new(Vec::new()),
    );
    let upstream = processor.mailbox_executor(Priority::operator(0));
    let own = processor.mailbox_executor(Priority::operator(1));
    upstream
        .execute("upstream", |v: &mut Vec<u32>| {
            v.push(0);
            Ok(())
        })
        .unwrap();
    let producer = own.clone();
    let mut state = Vec::new();
    std::thread::scope(|s| {
        s.spawn(move || {
            producer
                .execute("own", |v: &mut Vec<u32>| {
                    v.push(1);
                    Ok(())
                })
                .unwrap();
        });
        own.yield_now(&mut state).unwrap();
    });
    assert_eq!(state, vec![1]);
    processor.mailbox().quiesce().unwrap();
    assert!(matches!(
        own.yield_now(&mut state),
        Err(YieldError::Mailbox(
            streamtask_mailbox::TakeError::Exhausted
        ))
    ));
}
