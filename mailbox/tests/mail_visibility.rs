//! What the owner sees waiting after mixed batch and queue traffic: `has_mail`, `try_take`,
//! `create_batch` and `len` agree with the mails actually held, whichever container they are in
//! and whatever priority a take skipped. Written against the public API only (the mailbox's
//! fast paths and flags may change); each test pins a behaviour of `mailbox.rs` that a
//! mutation (cargo-mutants) of its fast paths would otherwise change unnoticed.

use streamtask_mailbox::{Mail, MailboxState, Priority, TaskMailbox};

fn mail(n: u32) -> Mail<u32> {
    Mail::new(Priority::MIN, n)
}

fn body(taken: Option<Mail<u32>>) -> Option<u32> {
    taken.map(Mail::into_body)
}

#[test]
fn a_mail_queued_behind_the_batch_is_still_seen_once_the_batch_is_used_up() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    assert!(mailbox.create_batch().unwrap());
    mailbox.put(mail(2)).unwrap(); // queued while the batch runs
    assert_eq!(body(mailbox.try_take_from_batch().unwrap()), Some(1));
    assert!(mailbox.has_mail().unwrap(), "2 is still queued");
    assert_eq!(body(mailbox.try_take(Priority::MIN).unwrap()), Some(2));
    assert!(!mailbox.has_mail().unwrap());
}

#[test]
fn nothing_is_reported_waiting_once_the_batch_and_the_queue_are_used_up() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.put(mail(2)).unwrap();
    assert!(mailbox.create_batch().unwrap());
    assert_eq!(body(mailbox.try_take_from_batch().unwrap()), Some(1));
    assert_eq!(body(mailbox.try_take_from_batch().unwrap()), Some(2));
    assert_eq!(body(mailbox.try_take_from_batch().unwrap()), None);
    assert!(!mailbox.has_mail().unwrap());
    assert!(!mailbox.create_batch().unwrap(), "an empty batch");
    assert!(mailbox.is_empty());
    assert_eq!(body(mailbox.try_take(Priority::MIN).unwrap()), None);
}

#[test]
fn taking_one_queued_mail_leaves_the_rest_of_the_queue_visible() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.put(mail(2)).unwrap();
    assert_eq!(body(mailbox.try_take(Priority::MIN).unwrap()), Some(1));
    assert!(mailbox.has_mail().unwrap());
    assert_eq!(body(mailbox.try_take(Priority::MIN).unwrap()), Some(2));
    assert!(!mailbox.has_mail().unwrap());
}

#[test]
fn a_take_that_skips_invisible_queued_mail_leaves_it_for_a_lower_take() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap(); // task level: invisible to operator 0
    assert_eq!(body(mailbox.try_take(Priority::operator(0)).unwrap()), None);
    assert!(mailbox.has_mail().unwrap());
    assert_eq!(body(mailbox.try_take(Priority::MIN).unwrap()), Some(1));
}

#[test]
fn emptying_the_queue_keeps_the_mail_left_in_the_batch_visible() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap(); // task level, into the batch
    assert!(mailbox.create_batch().unwrap());
    mailbox.put(Mail::new(Priority::operator(0), 2)).unwrap(); // queued
    // Operator 0's take skips the batch's task-level mail and empties the queue.
    assert_eq!(
        body(mailbox.try_take(Priority::operator(0)).unwrap()),
        Some(2)
    );
    assert!(mailbox.has_mail().unwrap(), "1 is still in the batch");
    assert_eq!(body(mailbox.try_take(Priority::MIN).unwrap()), Some(1));
    assert!(!mailbox.has_mail().unwrap());
}

#[test]
fn a_blocking_take_finds_batch_mail_when_the_queue_is_empty() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    assert!(mailbox.create_batch().unwrap());
    // Nothing queued: a take that ignored the batch would block for good.
    assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 1);
    mailbox.quiesce().unwrap();
    assert!(
        mailbox.take(Priority::MIN).is_err(),
        "exhausted, not a hang"
    );
}

#[test]
fn len_counts_the_batch_and_the_queue() {
    let mailbox = TaskMailbox::new();
    for n in 1..=3 {
        mailbox.put(mail(n)).unwrap();
    }
    assert!(mailbox.create_batch().unwrap());
    assert_eq!(body(mailbox.try_take_from_batch().unwrap()), Some(1));
    mailbox.put(mail(4)).unwrap();
    assert_eq!(mailbox.len(), 3, "2 in the batch, 1 queued");
    assert!(!mailbox.is_empty());
}

#[test]
fn an_exclusive_view_counts_the_queued_mails_and_shows_the_state() {
    let mailbox = TaskMailbox::new();
    mailbox.put(mail(1)).unwrap();
    mailbox.put(mail(2)).unwrap();
    let (queued, debug) =
        mailbox.run_exclusively(|exclusive| (exclusive.queued(), format!("{exclusive:?}")));
    assert_eq!(queued, 2);
    assert!(debug.contains("queued: 2"), "{debug}");
    assert!(debug.contains("Open"), "{debug}");
}

#[test]
fn the_debug_view_of_a_mailbox_shows_its_state() {
    let mailbox = TaskMailbox::<u32>::new();
    assert!(format!("{mailbox:?}").contains("Open"));
    mailbox.quiesce().unwrap();
    assert!(format!("{mailbox:?}").contains("Quiesced"));
    assert_eq!(mailbox.state(), MailboxState::Quiesced);
}
