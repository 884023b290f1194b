//! TaskMailbox: ports of Flink's `TaskMailboxImplTest` behaviours, and the Rust additions (typed
//! errors that hand the mail back, `Exhausted` instead of blocking forever).

use std::sync::mpsc;
use std::thread;

use streamtask_mailbox::{
    Letter, Mail, MailboxExecutor, MailboxProcessor, MailboxState, Priority, ProcessorHandle,
    PutError, SubmitHandle, Suspension, TakeError, TaskMailbox, WrongThread,
};
use streamtask_runtime::TaskHandle;

fn mail(n: u32) -> Mail<u32> {
    Mail::new(Priority::MIN, n)
}

fn take_all(mailbox: &TaskMailbox<u32>) -> Vec<u32> {
    let mut taken = Vec::new();
    while let Some(m) = mailbox.try_take(Priority::MIN).unwrap() {
        taken.push(m.into_body());
    }
    taken
}

#[test]
fn smoke() {
    let mailbox = TaskMailbox::new();
    assert_eq!(mailbox.state(), MailboxState::Open);
    assert!(!mailbox.has_mail().unwrap());
    mailbox.put(mail(1)).unwrap();
    assert!(mailbox.has_mail().unwrap());
    assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 1);
    assert!(!mailbox.has_mail().unwrap());
    assert!(mailbox.try_take(Priority::MIN).unwrap().is_none());
}

#[test]
fn puts_are_taken_in_fifo_order() {
    let mailbox = TaskMailbox::new();
    for n in 0..5 {
        mailbox.put(mail(n)).unwrap();
    }
    assert_eq!(mailbox.len(), 5);
    assert_eq!(take_all(&mailbox), vec![0, 1, 2, 3, 4]);
    assert!(mailbox.is_empty());
}

#[test]
fn put_first_from_the_owner_goes_ahead_of_everything() {
    // Flink's testPutAsHead.
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.put_first(mail(2)).unwrap();
    mailbox.put(mail(3)).unwrap();
    mailbox.put_first(mail(4)).unwrap();
    assert_eq!(take_all(&mailbox), vec![4, 2, 1, 3]);
}

#[test]
fn put_first_on_the_owner_goes_to_the_head_of_the_open_batch() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.put(mail(2)).unwrap();
    assert!(mailbox.create_batch().unwrap());
    mailbox.put(mail(3)).unwrap(); // queued, behind the batch
    mailbox.put_first(mail(0)).unwrap(); // batch head
    let batch: Vec<u32> = std::iter::from_fn(|| mailbox.try_take_from_batch().unwrap())
        .map(Mail::into_body)
        .collect();
    assert_eq!(batch, vec![0, 1, 2]);
    assert_eq!(take_all(&mailbox), vec![3]);
}

#[test]
fn put_first_from_another_thread_goes_to_the_head_of_the_queue() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    assert!(mailbox.create_batch().unwrap()); // 1 is in the batch now
    mailbox.put(mail(2)).unwrap();
    thread::scope(|s| {
        s.spawn(|| mailbox.put_first(mail(3)).unwrap());
    });
    // The batch comes first; the foreign put_first heads the queue.
    assert_eq!(take_all(&mailbox), vec![1, 3, 2]);
}

#[test]
fn take_blocks_until_another_thread_puts() {
    let mailbox = TaskMailbox::new();
    let (started_tx, started_rx) = mpsc::channel();
    thread::scope(|s| {
        let mailbox = &mailbox;
        s.spawn(move || {
            started_rx.recv().unwrap();
            mailbox.put(mail(42)).unwrap();
        });
        started_tx.send(()).unwrap();
        assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 42);
    });
}

#[test]
fn concurrent_puts_are_all_taken_exactly_once() {
    // Flink's testConcurrentPutTakeBlocking / NonBlocking.
    const PRODUCERS: u32 = 4;
    const EACH: u32 = 500;
    let mailbox = TaskMailbox::new();
    let mut taken = Vec::new();
    thread::scope(|s| {
        for p in 0..PRODUCERS {
            let mailbox = &mailbox;
            s.spawn(move || {
                for i in 0..EACH {
                    let n = p * EACH + i;
                    if i % 3 == 0 {
                        mailbox.put_first(mail(n)).unwrap();
                    } else {
                        mailbox.put(mail(n)).unwrap();
                    }
                }
            });
        }
        for i in 0..PRODUCERS * EACH {
            let m = if i % 2 == 0 {
                mailbox.take(Priority::MIN).unwrap()
            } else {
                loop {
                    if let Some(m) = mailbox.try_take(Priority::MIN).unwrap() {
                        break m;
                    }
                    thread::yield_now();
                }
            };
            taken.push(m.into_body());
        }
    });
    taken.sort_unstable();
    assert_eq!(taken, (0..PRODUCERS * EACH).collect::<Vec<_>>());
    assert!(mailbox.is_empty());
}

#[test]
fn puts_from_one_producer_keep_their_order() {
    let mailbox = TaskMailbox::new();
    thread::scope(|s| {
        s.spawn(|| {
            for n in 0..1000 {
                mailbox.put(mail(n)).unwrap();
            }
        });
        let mut last = None;
        for _ in 0..1000 {
            let n = mailbox.take(Priority::MIN).unwrap().into_body();
            assert!(last.is_none_or(|l| l < n), "{n} after {last:?}");
            last = Some(n);
        }
    });
}

#[test]
fn quiesce_refuses_puts_and_hands_the_mail_back_but_allows_takes() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.quiesce().unwrap();
    assert_eq!(mailbox.state(), MailboxState::Quiesced);
    assert!(!mailbox.state().is_accepting_mails());

    let refused = mailbox.put(mail(2)).unwrap_err();
    assert_eq!(refused.state(), MailboxState::Quiesced);
    assert_eq!(refused.into_inner().into_body(), 2);
    let refused = mailbox.put_first(mail(3)).unwrap_err();
    assert_eq!(refused.into_inner().into_body(), 3);
    thread::scope(|s| {
        s.spawn(|| {
            let refused = mailbox.put_first(mail(4)).unwrap_err();
            assert_eq!(refused.into_inner().into_body(), 4);
        });
    });

    assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 1);
    mailbox.quiesce().unwrap(); // idempotent
    assert_eq!(mailbox.state(), MailboxState::Quiesced);
}

#[test]
fn take_on_a_quiesced_mailbox_without_visible_mail_is_exhausted_not_a_hang() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.quiesce().unwrap();
    assert_eq!(
        mailbox.take(Priority::operator(0)).unwrap_err(),
        TakeError::Exhausted
    );
    assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 1);
    assert_eq!(
        mailbox.take(Priority::MIN).unwrap_err(),
        TakeError::Exhausted
    );
}

#[test]
fn close_returns_the_dropped_mails_batch_first_and_refuses_everything() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.put(mail(2)).unwrap();
    mailbox.create_batch().unwrap();
    mailbox.put(mail(3)).unwrap();
    mailbox.put_first(mail(0)).unwrap();

    let dropped: Vec<u32> = mailbox
        .close()
        .unwrap()
        .into_iter()
        .map(Mail::into_body)
        .collect();
    assert_eq!(dropped, vec![0, 1, 2, 3]);
    assert_eq!(mailbox.state(), MailboxState::Closed);
    assert!(
        mailbox.close().unwrap().is_empty(),
        "a second close drops nothing"
    );

    assert_eq!(
        mailbox.put(mail(9)).unwrap_err().state(),
        MailboxState::Closed
    );
    assert_eq!(mailbox.take(Priority::MIN).unwrap_err(), TakeError::Closed);
    assert_eq!(
        mailbox.try_take(Priority::MIN).unwrap_err(),
        TakeError::Closed
    );
    assert_eq!(
        mailbox.try_take_from_batch().unwrap_err(),
        TakeError::Closed
    );
    mailbox.quiesce().unwrap();
    assert_eq!(mailbox.state(), MailboxState::Closed, "no way back");
}

#[test]
fn quiesced_mailboxes_close_too() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(5)).unwrap();
    mailbox.quiesce().unwrap();
    let dropped = mailbox.close().unwrap();
    assert_eq!(dropped.len(), 1);
    assert_eq!(mailbox.state(), MailboxState::Closed);
}

#[test]
fn owner_only_calls_from_another_thread_are_typed_errors() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    thread::scope(|s| {
        s.spawn(|| {
            assert!(!mailbox.is_owner_thread());
            assert_eq!(mailbox.has_mail(), Err(WrongThread));
            assert_eq!(
                mailbox.take(Priority::MIN).unwrap_err(),
                TakeError::WrongThread
            );
            assert_eq!(
                mailbox.try_take(Priority::MIN).unwrap_err(),
                TakeError::WrongThread
            );
            assert_eq!(mailbox.create_batch(), Err(WrongThread));
            assert_eq!(
                mailbox.try_take_from_batch().unwrap_err(),
                TakeError::WrongThread
            );
            assert_eq!(mailbox.quiesce(), Err(WrongThread));
            assert!(mailbox.close().is_err());
            // Any thread may put, read the state, count and drain.
            mailbox.put(mail(2)).unwrap();
            assert_eq!(mailbox.state(), MailboxState::Open);
            assert_eq!(mailbox.len(), 2);
        });
    });
    assert!(mailbox.is_owner_thread());
    assert_eq!(take_all(&mailbox), vec![1, 2]);
}

#[test]
fn a_mailbox_can_be_bound_to_another_thread() {
    let (tx, rx) = mpsc::channel::<std::sync::Arc<TaskMailbox<u32>>>();
    let owner = thread::spawn(move || {
        let mailbox = rx.recv().unwrap();
        mailbox.take(Priority::MIN).unwrap().into_body()
    });
    let mailbox = std::sync::Arc::new(TaskMailbox::with_owner(owner.thread().clone()));
    assert!(!mailbox.is_owner_thread());
    assert_eq!(mailbox.owner().id(), owner.thread().id());
    mailbox.put(mail(7)).unwrap();
    tx.send(mailbox).unwrap();
    assert_eq!(owner.join().unwrap(), 7);
}

#[test]
fn a_batch_holds_what_was_queued_and_never_grows_while_it_runs() {
    let mailbox = TaskMailbox::new();
    assert!(
        !mailbox.create_batch().unwrap(),
        "the default batch is empty"
    );
    mailbox.put(mail(1)).unwrap();
    mailbox.put(mail(2)).unwrap();
    assert!(mailbox.create_batch().unwrap());
    mailbox.put(mail(3)).unwrap();
    assert_eq!(
        mailbox.try_take_from_batch().unwrap().unwrap().into_body(),
        1
    );
    assert_eq!(
        mailbox.try_take_from_batch().unwrap().unwrap().into_body(),
        2
    );
    assert!(
        mailbox.try_take_from_batch().unwrap().is_none(),
        "a batch never falls back to the queue"
    );
    assert!(mailbox.has_mail().unwrap(), "3 is still queued");
    assert!(mailbox.create_batch().unwrap());
    assert_eq!(
        mailbox.try_take_from_batch().unwrap().unwrap().into_body(),
        3
    );
}

#[test]
fn unconsumed_batch_mails_stay_ahead_of_newer_ones() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.put(mail(2)).unwrap();
    mailbox.create_batch().unwrap();
    assert_eq!(
        mailbox.try_take_from_batch().unwrap().unwrap().into_body(),
        1
    );
    mailbox.put(mail(3)).unwrap();
    assert!(mailbox.create_batch().unwrap());
    let batch: Vec<u32> = std::iter::from_fn(|| mailbox.try_take_from_batch().unwrap())
        .map(Mail::into_body)
        .collect();
    assert_eq!(batch, vec![2, 3]);
}

#[test]
fn take_and_try_take_consume_the_batch_before_the_queue() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.create_batch().unwrap();
    mailbox.put(mail(2)).unwrap();
    assert_eq!(
        mailbox
            .try_take(Priority::MIN)
            .unwrap()
            .unwrap()
            .into_body(),
        1
    );
    assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 2);
}

#[test]
fn has_mail_sees_both_the_batch_and_the_queue() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    assert!(mailbox.has_mail().unwrap());
    mailbox.create_batch().unwrap();
    assert!(mailbox.has_mail().unwrap(), "the mail moved to the batch");
    mailbox.try_take_from_batch().unwrap();
    assert!(!mailbox.has_mail().unwrap());
}

#[test]
fn drain_empties_batch_then_queue_and_keeps_the_state() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.create_batch().unwrap();
    mailbox.put(mail(2)).unwrap();
    mailbox.put_first(mail(0)).unwrap();
    let drained: Vec<u32> = thread::scope(|s| {
        // Any thread may drain (Flink does not check either).
        s.spawn(|| mailbox.drain()).join().unwrap()
    })
    .into_iter()
    .map(Mail::into_body)
    .collect();
    assert_eq!(drained, vec![0, 1, 2]);
    assert!(!mailbox.has_mail().unwrap());
    assert_eq!(mailbox.state(), MailboxState::Open);
    mailbox.put(mail(3)).unwrap();
    assert_eq!(take_all(&mailbox), vec![3]);
}

#[test]
fn run_exclusively_makes_check_then_put_atomic() {
    let mailbox = TaskMailbox::new();
    let (started_tx, started_rx) = mpsc::channel();
    thread::scope(|s| {
        mailbox.run_exclusively(|exclusive| {
            s.spawn(|| {
                started_tx.send(()).unwrap();
                mailbox.put(mail(2)).unwrap(); // waits for the exclusive section
            });
            started_rx.recv().unwrap();
            assert_eq!(exclusive.state(), MailboxState::Open);
            assert_eq!(exclusive.queued(), 0, "no put completes during the section");
            exclusive.put(mail(1)).unwrap();
            assert_eq!(exclusive.queued(), 1);
        });
    });
    assert_eq!(take_all(&mailbox), vec![1, 2]);
}

#[test]
fn run_exclusively_put_first_on_the_owner_goes_to_the_batch() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.run_exclusively(|exclusive| exclusive.put_first(mail(0)).unwrap());
    assert_eq!(take_all(&mailbox), vec![0, 1]);
    mailbox.quiesce().unwrap();
    let refused = mailbox.run_exclusively(|exclusive| exclusive.put_first(mail(5)));
    assert_eq!(refused.unwrap_err().into_inner().into_body(), 5);
}

#[test]
fn errors_name_the_fix() {
    let mailbox = TaskMailbox::new();
    mailbox.quiesce().unwrap();
    let refused: PutError<u32> = mailbox.put(mail(1)).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "the mailbox is quiesced and accepts no mail; put mails only while the task runs"
    );
    assert!(format!("{refused:?}").contains("Quiesced"));
    assert!(
        WrongThread
            .to_string()
            .starts_with("called off the mailbox thread")
    );
    assert!(
        TakeError::Exhausted
            .to_string()
            .contains("drain it instead")
    );
}

#[test]
fn public_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<TaskMailbox<u32>>();
    send_sync::<MailboxExecutor<Vec<u8>, String>>();
    send_sync::<ProcessorHandle<Vec<u8>, String>>();
    send_sync::<Suspension>();
    send_sync::<SubmitHandle<u32, String>>();
    send_sync::<TaskHandle>();
    send::<Letter<Vec<u8>, String>>();
    send::<MailboxProcessor<Vec<u8>, String>>();
}
