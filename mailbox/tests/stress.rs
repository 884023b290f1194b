//! Many producers against one mailbox thread: no mail lost, none run twice, per-producer FIFO
//! kept for `put`; suspensions resumed by storms of wakers still make progress.

use std::collections::HashSet;
use std::thread;

use streamtask_mailbox::{
    Controller, Immediate, Mail, MailboxProcessor, Priority, Suspension, TaskMailbox,
};

const PRODUCERS: u64 = 4;
const EACH: u64 = 5_000;

#[test]
fn smoke() {
    let mailbox = TaskMailbox::new();
    thread::scope(|s| {
        s.spawn(|| mailbox.put(Mail::new(Priority::MIN, 1u64)).unwrap());
    });
    assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 1);
}

#[test]
fn every_mail_of_every_producer_is_taken_exactly_once() {
    let mailbox = TaskMailbox::new();
    let mut seen = HashSet::new();
    thread::scope(|s| {
        for p in 0..PRODUCERS {
            let mailbox = &mailbox;
            s.spawn(move || {
                for i in 0..EACH {
                    let mail = Mail::new(Priority::operator((i % 3) as usize), p * EACH + i);
                    if i % 7 == 0 {
                        mailbox.put_first(mail).unwrap();
                    } else {
                        mailbox.put(mail).unwrap();
                    }
                }
            });
        }
        let mut taken = 0;
        let mut round = 0u64;
        while taken < PRODUCERS * EACH {
            round += 1;
            // Rotate through every way the owner takes mail.
            let got: Vec<Mail<u64>> = match round % 4 {
                0 => vec![mailbox.take(Priority::MIN).unwrap()],
                1 => mailbox
                    .try_take(Priority::MIN)
                    .unwrap()
                    .into_iter()
                    .collect(),
                2 => {
                    mailbox.create_batch().unwrap();
                    std::iter::from_fn(|| mailbox.try_take_from_batch().unwrap()).collect()
                }
                _ => mailbox
                    .try_take(Priority::operator(1))
                    .unwrap()
                    .into_iter()
                    .collect(),
            };
            for mail in got {
                assert!(seen.insert(mail.into_body()), "a mail was taken twice");
                taken += 1;
            }
        }
    });
    assert_eq!(seen.len() as u64, PRODUCERS * EACH);
    assert!(mailbox.is_empty());
}

#[test]
fn a_loop_under_many_producers_runs_every_action_once_in_per_producer_order() {
    let mut processor: MailboxProcessor<Vec<u64>, String> =
        MailboxProcessor::new(TaskMailbox::new(), Immediate::new(Vec::new()));
    thread::scope(|s| {
        for p in 0..PRODUCERS {
            let executor = processor.mailbox_executor(Priority::operator(p as usize));
            s.spawn(move || {
                for i in 0..EACH {
                    let id = p * EACH + i;
                    executor
                        .execute("stress", move |v: &mut Vec<u64>| {
                            v.push(id);
                            Ok(())
                        })
                        .unwrap();
                }
            });
        }
        let mut steps = 0u64;
        let mut action = |v: &mut Vec<u64>, c: &mut Controller<'_>| -> Result<(), String> {
            steps += 1;
            if v.len() as u64 == PRODUCERS * EACH {
                c.all_actions_completed();
            } else if steps.is_multiple_of(64) {
                // Suspend now and then; resume from this very thread (a batch-head mail).
                c.suspend_default_action().resume();
            }
            Ok(())
        };
        processor.run_mailbox_loop(&mut action).unwrap();
    });
    let ran = processor.action_executor().state();
    assert_eq!(ran.len() as u64, PRODUCERS * EACH);
    let unique: HashSet<&u64> = ran.iter().collect();
    assert_eq!(unique.len(), ran.len(), "no action ran twice");
    for p in 0..PRODUCERS {
        let mine: Vec<u64> = ran.iter().copied().filter(|id| id / EACH == p).collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "producer {p} out of order"
        );
    }
}

#[test]
fn storms_of_resumes_never_lose_a_suspension() {
    let mut processor: MailboxProcessor<u64, String> =
        MailboxProcessor::new(TaskMailbox::new(), Immediate::new(0));
    let (tx, rx) = crossbeam::channel::unbounded::<Suspension>();
    const ROUNDS: u64 = 2_000;
    thread::scope(|s| {
        for _ in 0..3 {
            let rx = rx.clone();
            s.spawn(move || {
                for suspension in rx {
                    // Several resumes of the same suspension, some through its waker.
                    suspension.resume();
                    suspension.waker().wake();
                }
            });
        }
        drop(rx);
        let mut action = |n: &mut u64, c: &mut Controller<'_>| -> Result<(), String> {
            *n += 1;
            if *n == ROUNDS {
                c.all_actions_completed();
            } else {
                // Every step suspends; only another thread's resume lets the next one run.
                for _ in 0..2 {
                    tx.send(c.suspend_default_action()).unwrap();
                }
            }
            Ok(())
        };
        processor.run_mailbox_loop(&mut action).unwrap();
        drop(tx);
    });
    assert_eq!(*processor.action_executor().state(), ROUNDS);
}

#[test]
fn submits_from_many_threads_all_complete() {
    let mut processor: MailboxProcessor<u64, String> =
        MailboxProcessor::new(TaskMailbox::new(), Immediate::new(0));
    let executor = processor.main_executor();
    let results = thread::scope(|s| {
        let waiters: Vec<_> = (0..PRODUCERS)
            .map(|_| {
                let executor = executor.clone();
                s.spawn(move || {
                    let handles: Vec<_> = (0..500)
                        .map(|_| {
                            executor
                                .submit("add", |n: &mut u64| {
                                    *n += 1;
                                    Ok(*n)
                                })
                                .unwrap()
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.wait().unwrap())
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        let mut action = |n: &mut u64, c: &mut Controller<'_>| -> Result<(), String> {
            if *n == PRODUCERS * 500 {
                c.all_actions_completed();
            } else {
                c.suspend_default_action().resume();
            }
            Ok(())
        };
        processor.run_mailbox_loop(&mut action).unwrap();
        waiters
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect::<Vec<u64>>()
    });
    let unique: HashSet<u64> = results.iter().copied().collect();
    assert_eq!(unique.len() as u64, PRODUCERS * 500);
    assert_eq!(*processor.action_executor().state(), PRODUCERS * 500);
}
