//! Mailbox put/take against a crossbeam unbounded channel: `P` producer threads put, the owner
//! thread takes, the same number of messages each.

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use streamtask_mailbox::{Mail, Priority, TaskMailbox};

/// How the owner takes its mails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumer {
    /// `take(Priority::MIN)` per mail (blocking when empty).
    Take,
    /// The processor's way: `create_batch`, then `try_take_from_batch` until empty; `take` when
    /// nothing is queued.
    Batch,
}

/// `mails` mails from `producers` threads through a [`TaskMailbox`]: the wall time.
///
/// # Panics
///
/// If the mailbox refuses a mail (it is never closed here).
pub fn mailbox_run(producers: u64, mails: u64, consumer: Consumer) -> Duration {
    let mailbox = TaskMailbox::new();
    let each = mails / producers;
    let start = Instant::now();
    thread::scope(|s| {
        for p in 0..producers {
            let mailbox = &mailbox;
            s.spawn(move || {
                for i in 0..each {
                    mailbox
                        .put(Mail::new(Priority::MIN, p * each + i))
                        .expect("open");
                }
            });
        }
        let mut sum = 0u64;
        let mut taken = 0;
        while taken < each * producers {
            if consumer == Consumer::Batch && mailbox.create_batch().expect("owner") {
                while let Some(mail) = mailbox.try_take_from_batch().expect("owner") {
                    sum = sum.wrapping_add(mail.into_body());
                    taken += 1;
                }
            } else {
                sum = sum.wrapping_add(mailbox.take(Priority::MIN).expect("open").into_body());
                taken += 1;
            }
        }
        black_box(sum);
    });
    start.elapsed()
}

/// The same through a crossbeam unbounded channel: the wall time.
///
/// # Panics
///
/// Never: the channel stays connected.
pub fn crossbeam_run(producers: u64, mails: u64) -> Duration {
    let (tx, rx) = crossbeam::channel::unbounded::<u64>();
    let each = mails / producers;
    let start = Instant::now();
    thread::scope(|s| {
        for p in 0..producers {
            let tx = tx.clone();
            s.spawn(move || {
                for i in 0..each {
                    tx.send(p * each + i).expect("connected");
                }
            });
        }
        let mut sum = 0u64;
        for _ in 0..each * producers {
            sum = sum.wrapping_add(rx.recv().expect("connected"));
        }
        black_box(sum);
    });
    start.elapsed()
}
