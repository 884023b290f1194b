//! Loom models of the mailbox's cross-thread protocols. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p streamtask-mailbox --test loom`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use streamtask_mailbox::{
    Controller, Immediate, Mail, MailboxProcessor, MailboxState, Priority, TakeError, TaskMailbox,
};

fn mail(n: u32) -> Mail<u32> {
    Mail::new(Priority::MIN, n)
}

#[test]
fn smoke() {
    loom::model(|| {
        let mailbox = TaskMailbox::new();
        mailbox.put(mail(1)).unwrap();
        assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 1);
    });
}

/// Two producers put while the owner blocks in `take`: both mails arrive, none twice.
#[test]
fn concurrent_puts_against_take() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        let producers: Vec<_> = (0..2)
            .map(|n| {
                let mailbox = Arc::clone(&mailbox);
                thread::spawn(move || {
                    if n == 0 {
                        mailbox.put(mail(n)).unwrap();
                    } else {
                        mailbox.put_first(mail(n)).unwrap();
                    }
                })
            })
            .collect();
        let mut got = vec![
            mailbox.take(Priority::MIN).unwrap().into_body(),
            mailbox.take(Priority::MIN).unwrap().into_body(),
        ];
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        for p in producers {
            p.join().unwrap();
        }
    });
}

/// A put racing `close`: the mail is either among the mails close returned or handed back to
/// the producer; never lost, never both.
#[test]
fn put_against_close_loses_nothing() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || {
                mailbox
                    .put(mail(7))
                    .err()
                    .map(|e| e.into_inner().into_body())
            })
        };
        let dropped: Vec<u32> = mailbox
            .close()
            .unwrap()
            .into_iter()
            .map(Mail::into_body)
            .collect();
        let refused = producer.join().unwrap();
        match refused {
            Some(n) => {
                assert_eq!(n, 7);
                assert!(dropped.is_empty());
            }
            None => assert_eq!(dropped, vec![7]),
        }
        assert_eq!(mailbox.state(), MailboxState::Closed);
        assert_eq!(mailbox.take(Priority::MIN).unwrap_err(), TakeError::Closed);
    });
}

/// A put racing `quiesce`: accepted mails can still be taken, refused ones come back.
#[test]
fn put_against_quiesce_loses_nothing() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || mailbox.put_first(mail(3)).is_ok())
        };
        mailbox.quiesce().unwrap();
        let accepted = producer.join().unwrap();
        let taken = mailbox
            .try_take(Priority::MIN)
            .unwrap()
            .map(Mail::into_body);
        assert_eq!(taken, accepted.then_some(3));
        assert_eq!(
            mailbox.take(Priority::MIN).unwrap_err(),
            TakeError::Exhausted
        );
    });
}

/// A mail arriving while the owner decides to park: the owner's fast-path check, then the
/// blocking take, must see it (no lost wakeup).
#[test]
fn a_mail_arriving_as_the_owner_parks_wakes_it() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || mailbox.put(mail(5)).unwrap())
        };
        // The processor's path: check the flag (one load), then create a batch or block.
        let found = if mailbox.has_mail().unwrap() && mailbox.create_batch().unwrap() {
            mailbox.try_take_from_batch().unwrap()
        } else {
            None
        };
        let found = match found {
            Some(m) => m,
            None => mailbox.take(Priority::MIN).unwrap(),
        };
        assert_eq!(found.into_body(), 5);
        producer.join().unwrap();
    });
}

/// A put racing the owner's batch path (`create_batch`, then `try_take_from_batch` until the
/// batch is empty): the mail is in this batch or stays queued for the next, and while it is
/// queued `has_mail` says so (the queue lock's copy of the `NEW_MAIL` flag stays exact).
#[test]
fn a_put_racing_create_batch_is_in_this_batch_or_flagged_for_the_next() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        mailbox.put(mail(0)).unwrap();
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || mailbox.put(mail(1)).unwrap())
        };
        let run_batch = |got: &mut Vec<u32>| {
            if mailbox.create_batch().unwrap() {
                while let Some(m) = mailbox.try_take_from_batch().unwrap() {
                    got.push(m.into_body());
                }
            }
        };
        let mut got = Vec::new();
        run_batch(&mut got);
        producer.join().unwrap();
        if got.len() < 2 {
            assert!(mailbox.has_mail().unwrap(), "a queued mail is flagged");
            run_batch(&mut got);
        }
        assert_eq!(got, vec![0, 1]);
        assert!(!mailbox.has_mail().unwrap(), "nothing is left flagged");
    });
}

/// The owner's own `put` skips the queue's lock while the queue is empty (its mail joins the
/// head, which is older than the queue). A producer's put that happened before the owner's
/// (the owner saw the producer's flag) must still run first; a racing one may run either way.
/// Either way both arrive and nothing is left flagged.
#[test]
fn an_owner_put_after_a_producer_put_it_saw_runs_after_it() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        let put = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let producer = {
            let (mailbox, put) = (Arc::clone(&mailbox), Arc::clone(&put));
            thread::spawn(move || {
                mailbox.put(mail(1)).unwrap();
                put.store(true, loom::sync::atomic::Ordering::Release);
            })
        };
        let saw = put.load(loom::sync::atomic::Ordering::Acquire);
        mailbox.put(mail(2)).unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            if mailbox.create_batch().unwrap() {
                while let Some(m) = mailbox.try_take_from_batch().unwrap() {
                    got.push(m.into_body());
                }
            } else {
                got.push(mailbox.take(Priority::MIN).unwrap().into_body());
            }
        }
        producer.join().unwrap();
        if saw {
            assert_eq!(got, vec![1, 2], "the owner's put came after the producer's");
        } else {
            got.sort_unstable();
            assert_eq!(got, vec![1, 2]);
        }
        assert!(!mailbox.has_mail().unwrap(), "nothing is left flagged");
    });
}

/// An off-thread `put_first` racing the owner's own `put` (into the head, without the queue's
/// lock): the `put_first` runs first whichever went first, as it would over a queued mail.
#[test]
fn an_off_thread_put_first_overtakes_the_owners_own_put() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || mailbox.put_first(mail(1)).unwrap())
        };
        mailbox.put(mail(2)).unwrap();
        producer.join().unwrap();
        let mut got = Vec::new();
        assert!(mailbox.create_batch().unwrap());
        while let Some(m) = mailbox.try_take_from_batch().unwrap() {
            got.push(m.into_body());
        }
        assert_eq!(got, vec![1, 2]);
        assert!(!mailbox.has_mail().unwrap(), "nothing is left flagged");
    });
}

/// Two producers put while the owner takes with `take` and empties the queue between them:
/// the flag the queue lock keeps a copy of is raised again by the next put, so the owner's
/// one-load check never misses a queued mail.
#[test]
fn the_queue_flag_is_raised_again_after_the_queue_ran_empty() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        let producers: Vec<_> = (0..2)
            .map(|n| {
                let mailbox = Arc::clone(&mailbox);
                thread::spawn(move || mailbox.put(mail(n)).unwrap())
            })
            .collect();
        let mut got = vec![mailbox.take(Priority::MIN).unwrap().into_body()];
        for p in producers {
            p.join().unwrap();
        }
        assert!(mailbox.has_mail().unwrap(), "the second mail is flagged");
        got.push(
            mailbox
                .try_take(Priority::MIN)
                .unwrap()
                .unwrap()
                .into_body(),
        );
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        assert!(!mailbox.has_mail().unwrap());
    });
}

/// A `take` moves every queued mail to the owner's copy of the queue's head at once; an
/// off-thread `put_first` racing it must still come before all of them (it goes to the head's
/// front, not the queue's), and FIFO holds for the rest.
#[test]
fn an_off_thread_put_first_overtakes_the_queue_head_the_owner_holds() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        mailbox.put(mail(0)).unwrap();
        mailbox.put(mail(1)).unwrap();
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || mailbox.put_first(mail(2)).unwrap())
        };
        let mut got = vec![mailbox.take(Priority::MIN).unwrap().into_body()];
        producer.join().unwrap();
        while let Some(m) = mailbox.try_take(Priority::MIN).unwrap() {
            got.push(m.into_body());
        }
        assert!(got == [2, 0, 1] || got == [0, 2, 1], "{got:?}");
        assert!(!mailbox.has_mail().unwrap(), "nothing is left flagged");
    });
}

/// The owner holds a low-priority mail in its copy of the queue's head and blocks in a
/// high-priority `take`; an off-thread `put_first` of a high-priority mail goes to that head,
/// not the queue, and must still wake it (the blocking take checks the head under the queue
/// lock the put notifies under).
#[test]
fn a_put_first_into_the_head_wakes_a_blocked_take() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        mailbox.put(mail(0)).unwrap();
        mailbox.put(mail(1)).unwrap();
        // Takes 0 and moves 1 to the head.
        assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 0);
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || mailbox.put_first(Mail::new(Priority::MAX, 9)).unwrap())
        };
        assert_eq!(mailbox.take(Priority::MAX).unwrap().into_body(), 9);
        producer.join().unwrap();
        assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 1);
        assert!(!mailbox.has_mail().unwrap());
    });
}

fn urgent(n: u32) -> Mail<u32> {
    Mail::new(Priority::URGENT, n)
}

/// An urgent mail put while the owner runs a built batch: it runs before the batch's remainder
/// (once the put happened before the owner's next take, at the latest right after it), exactly
/// once, and nothing is left flagged.
#[test]
fn an_urgent_mail_put_during_a_batch_jumps_its_rest() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        mailbox.put(mail(1)).unwrap();
        mailbox.put(mail(2)).unwrap();
        assert!(mailbox.create_batch().unwrap());
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || mailbox.put(urgent(9)).unwrap())
        };
        let next = || mailbox.try_take_from_batch().unwrap().map(Mail::into_body);
        // Racing the put: the batch's first mail, or the urgent one if its put came first.
        let mut got = vec![next().unwrap()];
        producer.join().unwrap();
        while let Some(body) = next() {
            got.push(body);
        }
        assert!(got == [1, 9, 2] || got == [9, 1, 2], "{got:?}");
        assert!(!mailbox.has_mail().unwrap(), "nothing is left flagged");
    });
}

/// The owner blocks in a take at an operator's priority with nothing visible; an urgent mail
/// from another thread wakes it (the blocking take checks the urgent mails under the queue
/// lock the put notifies under).
#[test]
fn an_urgent_mail_wakes_a_blocked_take() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        // Not visible at operator 0's priority.
        mailbox.put(mail(0)).unwrap();
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || mailbox.put(urgent(9)).unwrap())
        };
        assert_eq!(mailbox.take(Priority::operator(0)).unwrap().into_body(), 9);
        producer.join().unwrap();
        assert_eq!(mailbox.take(Priority::MIN).unwrap().into_body(), 0);
        assert!(!mailbox.has_mail().unwrap(), "nothing is left flagged");
    });
}

/// An urgent mail racing the owner's whole batch path (run the batch to its end, then the next
/// batch if `has_mail` says so): it runs exactly once, in this batch or flagged for the next,
/// and the batch keeps its order.
#[test]
fn an_urgent_mail_racing_the_batch_runs_once() {
    loom::model(|| {
        let mailbox = Arc::new(TaskMailbox::new());
        mailbox.put(mail(1)).unwrap();
        mailbox.put(mail(2)).unwrap();
        let producer = {
            let mailbox = Arc::clone(&mailbox);
            thread::spawn(move || mailbox.put(urgent(9)).unwrap())
        };
        let run_batch = |got: &mut Vec<u32>| {
            if mailbox.create_batch().unwrap() {
                while let Some(m) = mailbox.try_take_from_batch().unwrap() {
                    got.push(m.into_body());
                }
            }
        };
        let mut got = Vec::new();
        run_batch(&mut got);
        producer.join().unwrap();
        if got.len() < 3 {
            assert!(
                mailbox.has_mail().unwrap(),
                "a waiting urgent mail is flagged"
            );
            run_batch(&mut got);
        }
        assert_eq!(got.iter().filter(|&&n| n == 9).count(), 1, "{got:?}");
        got.retain(|&n| n != 9);
        assert_eq!(got, vec![1, 2]);
        assert!(!mailbox.has_mail().unwrap(), "nothing is left flagged");
    });
}

/// The default action suspends; another thread resumes it while the loop is about to block.
/// The loop must see the resume and run the default action again.
#[test]
fn resume_racing_the_suspension() {
    loom::model(|| {
        let mut processor: MailboxProcessor<u32, ()> =
            MailboxProcessor::new(TaskMailbox::new(), Immediate::new(0));
        let (tx, rx) = loom::sync::mpsc::channel();
        let resumer = thread::spawn(move || {
            let suspension: streamtask_mailbox::Suspension = rx.recv().unwrap();
            suspension.resume();
        });
        let mut action = |steps: &mut u32, c: &mut Controller<'_>| -> Result<(), ()> {
            *steps += 1;
            if *steps == 1 {
                tx.send(c.suspend_default_action()).unwrap();
            } else {
                c.all_actions_completed();
            }
            Ok(())
        };
        processor.run_mailbox_loop(&mut action).unwrap();
        resumer.join().unwrap();
        assert_eq!(*processor.action_executor().state(), 2);
    });
}

/// A stale resume racing a newer suspension cannot resume it; the newer one's own resume does.
///
/// The resumer raises `second_resumed` just before the newer suspension's own resume, and the
/// step after the newer suspension checks it: if the stale resume woke the loop, some schedule
/// runs that step before the flag is raised. (The step count alone is 3 either way.)
#[test]
fn a_stale_resume_racing_a_newer_suspension() {
    use loom::sync::atomic::{AtomicBool, Ordering};

    loom::model(|| {
        let mut processor: MailboxProcessor<u32, ()> =
            MailboxProcessor::new(TaskMailbox::new(), Immediate::new(0));
        let (tx, rx) = loom::sync::mpsc::channel();
        let second_resumed = Arc::new(AtomicBool::new(false));
        let resumer = {
            let second_resumed = Arc::clone(&second_resumed);
            thread::spawn(move || {
                let first: streamtask_mailbox::Suspension = rx.recv().unwrap();
                first.resume();
                let second: streamtask_mailbox::Suspension = rx.recv().unwrap();
                first.resume(); // stale: must not count
                // SeqCst: the resume mail below is put after this store, and the loop reads the
                // flag after taking that mail (the mailbox's lock orders them too).
                second_resumed.store(true, Ordering::SeqCst);
                second.resume();
            })
        };
        let mut action = |steps: &mut u32, c: &mut Controller<'_>| -> Result<(), ()> {
            *steps += 1;
            if *steps <= 2 {
                tx.send(c.suspend_default_action()).unwrap();
            } else {
                assert!(
                    second_resumed.load(Ordering::SeqCst),
                    "the stale resume resumed the newer suspension"
                );
                c.all_actions_completed();
            }
            Ok(())
        };
        processor.run_mailbox_loop(&mut action).unwrap();
        resumer.join().unwrap();
        assert_eq!(*processor.action_executor().state(), 3);
    });
}

/// `all_actions_completed` from another thread racing the owner's shutdown: either the poison
/// ran or was dropped, or it was never put; nothing panics and close sees every mail.
#[test]
fn a_poison_racing_close_is_harmless() {
    loom::model(|| {
        let mut processor: MailboxProcessor<u32, ()> =
            MailboxProcessor::new(TaskMailbox::new(), Immediate::new(0));
        let handle = processor.handle();
        let canceller = thread::spawn(move || handle.all_actions_completed());
        processor.prepare_close().unwrap();
        let dropped = processor.close().unwrap();
        canceller.join().unwrap();
        assert!(dropped <= 1);
        assert_eq!(processor.mailbox().state(), MailboxState::Closed);
    });
}

/// `MailboxTimerService`: the timer thread turning a due timer into a mail, racing `quiesce`
/// and `close` on the mailbox thread.
mod timer_mails {
    use streamtask_core::operator::OperatorEvent;
    use streamtask_core::{time::Clock, time::ManualClock, time::Timer, time::TimerService};
    use streamtask_mailbox::{
        Immediate, MailboxState, MailboxTimerService, OperatorMails, Priority, ProcessorBuilder,
        TaskMailbox,
    };

    #[derive(Default)]
    struct Fired(u32);

    impl OperatorMails<()> for Fired {
        fn on_timer(&mut self, _timer: Timer) -> Result<(), ()> {
            self.0 += 1;
            Ok(())
        }
        fn on_event(&mut self, _: usize, _: OperatorEvent) -> Result<(), ()> {
            Ok(())
        }
    }

    fn due_now() -> Timer {
        // In the past: due at once, so the timer thread races what the test does next.
        Timer {
            operator: 0,
            timestamp: 0,
            tag: 1,
        }
    }

    /// A timer mail enqueued before `quiesce` and run after it does nothing, and the timer
    /// thread enqueues nothing that runs after it: no timer callback runs after `quiesce`.
    #[test]
    fn a_timer_mail_racing_quiesce_does_nothing_after_it() {
        loom::model(|| {
            let builder = ProcessorBuilder::<Fired, ()>::new(TaskMailbox::new());
            let clock = ManualClock::new(10);
            let timers =
                MailboxTimerService::new("loom-timers", Clock::Manual(clock), &builder.handle());
            let processor = builder.build(Immediate::new(Fired::default()));
            let executor = processor.mailbox_executor(Priority::operator(0));
            timers.register_timer(due_now()).unwrap();
            timers.quiesce();
            timers.shutdown(); // joins the timer thread: every mail it enqueues is queued now
            let mut fired = Fired::default();
            while executor.try_yield(&mut fired).unwrap() {}
            assert_eq!(fired.0, 0, "a timer ran after quiesce");
        });
    }

    /// A timer mail racing `close`: the mail is refused (and dropped) or among the mails close
    /// dropped; it never runs, nothing panics, and the timer thread is joined.
    #[test]
    fn a_timer_mail_racing_close_is_refused_or_dropped() {
        loom::model(|| {
            let builder = ProcessorBuilder::<Fired, ()>::new(TaskMailbox::new());
            let clock = ManualClock::new(10);
            let timers =
                MailboxTimerService::new("loom-timers", Clock::Manual(clock), &builder.handle());
            let mut processor = builder.build(Immediate::new(Fired::default()));
            timers.register_timer(due_now()).unwrap();
            processor.prepare_close().unwrap();
            let dropped = processor.close().unwrap();
            timers.shutdown();
            assert!(dropped <= 1);
            assert_eq!(processor.mailbox().state(), MailboxState::Closed);
            assert_eq!(processor.action_executor().state().0, 0);
        });
    }
}

/// The submit handle's completion slot (`executor::SubmitHandle`): a result set by the mailbox
/// thread reaches a waiter on another thread, and a dropped mail cancels it.
mod submit_slot {
    use loom::thread;
    use streamtask_mailbox::{Immediate, MailboxProcessor, Priority, SubmitError, TaskMailbox};

    /// A waiter that blocks before the mail runs, or checks after: either way it gets the
    /// result (a completion between its check and its wait would be a lost wakeup, which loom
    /// reports as a deadlock).
    #[test]
    fn a_result_set_while_the_submitter_waits_reaches_it() {
        loom::model(|| {
            let processor: MailboxProcessor<u32, ()> =
                MailboxProcessor::new(TaskMailbox::new(), Immediate::new(0));
            let handle = processor
                .mailbox_executor(Priority::MIN)
                .submit("double", |n: &mut u32| {
                    *n += 21;
                    Ok(*n * 2)
                })
                .unwrap();
            let waiter = thread::spawn(move || handle.wait());
            let mut state = 0u32;
            processor
                .mailbox_executor(Priority::MIN)
                .yield_now(&mut state)
                .unwrap();
            assert_eq!(waiter.join().unwrap().unwrap(), 42);
        });
    }

    /// A submit racing the mailbox's close: it is rejected, or accepted and then either run
    /// or cancelled when close drops it; the waiter never hangs.
    #[test]
    fn a_submit_racing_close_is_rejected_run_or_cancelled() {
        loom::model(|| {
            let mut processor: MailboxProcessor<u32, ()> =
                MailboxProcessor::new(TaskMailbox::new(), Immediate::new(0));
            let executor = processor.mailbox_executor(Priority::MIN);
            let submitter =
                thread::spawn(move || match executor.submit("one", |_: &mut u32| Ok(1)) {
                    Ok(handle) => Some(handle.wait()),
                    Err(_rejected) => None,
                });
            processor.prepare_close().unwrap();
            let dropped = processor.close().unwrap();
            match submitter.join().unwrap() {
                // Accepted: close dropped it without running it (nothing runs mails here).
                Some(result) => {
                    assert!(matches!(result, Err(SubmitError::Cancelled)));
                    assert_eq!(dropped, 1);
                }
                None => assert_eq!(dropped, 0),
            }
        });
    }
}

/// The source task's checkpoint-trigger slot (`src/trigger_slot.rs`): the trigger call's fast path
/// racing the mailbox thread, which may answer the doorbell and then ends (quiesce, take what
/// is left). Every trigger is run or declined exactly once: never lost, never twice.
mod trigger_slot {
    use loom::sync::Arc;
    use loom::thread;

    use streamtask_mailbox::TaskMailbox;
    use streamtask_mailbox::trigger_slot_model::{Outcome, Slot};

    /// A trigger racing the task's end: the owner runs it (answers the bell before quiescing),
    /// declines it (left in the slot after quiescing), or the triggering thread takes it back
    /// (it saw the mailbox quiesced); exactly one of the three. Fails without the triggering
    /// thread's fence (its publication is a release store, not a read-modify-write).
    #[test]
    fn a_trigger_racing_the_end_is_run_or_declined_once() {
        loom::model(|| {
            let mailbox = Arc::new(TaskMailbox::<u32>::new());
            let slot = Slot::of(&*mailbox);
            let trigger = {
                let mailbox = Arc::clone(&mailbox);
                thread::spawn(move || Slot::of(&*mailbox).trigger(1))
            };
            let ran = usize::from(slot.take() == Some(1));
            mailbox.quiesce().unwrap();
            let declined_here = usize::from(slot.take_left() == Some(1));
            let outcome = trigger.join().unwrap();
            assert_ne!(outcome, Outcome::Refused, "the slot was empty");
            let taken_back = usize::from(outcome == Outcome::TakenBack(1));
            assert_eq!(ran + declined_here + taken_back, 1, "{outcome:?}");
        });
    }

    /// Two triggering threads: one gets the slot, the other (refused) counts its mail in the
    /// claim's word; while that mail is counted no trigger takes the slot (none overtakes it),
    /// and once it is done and the slot taken, the slot is free again. Fails if the slot is
    /// published with a relaxed store, or its claim is freed before the trigger is taken.
    #[test]
    fn a_refused_trigger_goes_as_a_mail_and_holds_the_slot_off_until_done() {
        loom::model(|| {
            let mailbox = Arc::new(TaskMailbox::<u32>::new());
            let slot = Slot::of(&*mailbox);
            let triggers: Vec<_> = [1, 2]
                .into_iter()
                .map(|id| {
                    let mailbox = Arc::clone(&mailbox);
                    thread::spawn(move || {
                        let slot = Slot::of(&*mailbox);
                        let outcome = slot.trigger(id);
                        if outcome == Outcome::Refused {
                            slot.mail_queued();
                        }
                        (id, outcome)
                    })
                })
                .collect();
            let slotted_now = slot.take();
            let outcomes: Vec<_> = triggers.into_iter().map(|t| t.join().unwrap()).collect();
            let refused: Vec<u64> = outcomes
                .iter()
                .filter(|(_, o)| *o == Outcome::Refused)
                .map(|(id, _)| *id)
                .collect();
            let slotted: Vec<u64> = outcomes
                .iter()
                .filter(|(_, o)| *o == Outcome::Slotted)
                .map(|(id, _)| *id)
                .collect();
            assert_eq!(slotted.len() + refused.len(), 2, "{outcomes:?}");
            assert!(!slotted.is_empty(), "the first offer finds the slot empty");
            // Every slotted trigger is taken exactly once (a second one can be slotted only
            // after the first was taken).
            let mut taken: Vec<u64> = slotted_now.into_iter().collect();
            taken.extend(slot.take());
            assert_eq!(slot.take(), None);
            taken.sort_unstable();
            let mut slotted = slotted;
            slotted.sort_unstable();
            assert_eq!(taken, slotted, "{outcomes:?}");
            if !refused.is_empty() {
                // The refused trigger's mail is queued: a new trigger may not take the slot.
                assert_eq!(slot.trigger(3), Outcome::Refused);
                slot.mail_done();
            }
            // Mails done, slot empty: the next trigger takes it.
            assert_eq!(slot.trigger(4), Outcome::Slotted);
            assert_eq!(slot.take(), Some(4));
        });
    }
}

// ---- the keyed async operator's call wakers ---------------------------------------------------

mod call_wakers {
    use loom::sync::Arc;
    use loom::sync::Mutex;
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::thread;

    use streamtask_core::operator::{EventSender, EventSink, OperatorEvent};
    use streamtask_mailbox::call_waker_model::Queue;

    /// The operator's mailbox: counts the wake mails enqueued.
    #[derive(Default)]
    struct Mails(Mutex<usize>);

    impl EventSink for Mails {
        fn send_event(&self, _operator: usize, _event: OperatorEvent) -> Result<(), OperatorEvent> {
            *self.0.lock().unwrap() += 1;
            Ok(())
        }
    }

    /// Runs one queued wake mail, if any: takes the woken ids and "polls" each call (a call
    /// completes once its flag is up). Returns whether a mail ran.
    fn run_mail(
        mails: &Mails,
        queue: &Queue,
        calls: &[(streamtask_mailbox::call_waker_model::Call, Arc<AtomicBool>)],
        done: &mut [bool],
    ) -> bool {
        {
            let mut queued = mails.0.lock().unwrap();
            if *queued == 0 {
                return false;
            }
            *queued -= 1;
        }
        for id in queue.take() {
            let (call, ready) = &calls[id as usize];
            call.begin_poll();
            if ready.load(Ordering::Acquire) {
                done[id as usize] = true;
            }
        }
        true
    }

    /// Two calls in flight, each completed and woken by its own thread while the mailbox thread
    /// runs wake mails: once the wakers are done and the mails drained, both calls were polled
    /// after their completion (no wake lost), with at most one mail per wake.
    #[test]
    fn wakes_of_many_calls_racing_the_wake_mail_lose_none() {
        loom::model(|| {
            let mails = std::sync::Arc::new(Mails::default());
            let sink: std::sync::Arc<dyn EventSink> = mails.clone();
            let queue = Queue::new(EventSender::new(sink, 0));
            let calls: Vec<_> = (0..2)
                .map(|id| (queue.call(id), Arc::new(AtomicBool::new(false))))
                .collect();
            let mut done = [false; 2];
            let wakers: Vec<_> = calls
                .iter()
                .map(|(call, ready)| {
                    let (call, ready) = (call.clone(), Arc::clone(ready));
                    thread::spawn(move || {
                        ready.store(true, Ordering::Release);
                        call.wake();
                    })
                })
                .collect();
            // The mailbox thread runs whatever mail is queued meanwhile.
            run_mail(&mails, &queue, &calls, &mut done);
            for w in wakers {
                w.join().unwrap();
            }
            while run_mail(&mails, &queue, &calls, &mut done) {}
            assert_eq!(done, [true, true], "a wake was lost");
        });
    }

    /// One call woken twice (by two threads) while a poll clears its flag: the second wake is
    /// either absorbed by a poll that sees its completion or enqueues a new mail.
    #[test]
    fn a_wake_during_the_poll_lists_the_call_again() {
        loom::model(|| {
            let mails = std::sync::Arc::new(Mails::default());
            let sink: std::sync::Arc<dyn EventSink> = mails.clone();
            let queue = Queue::new(EventSender::new(sink, 0));
            let calls = vec![(queue.call(0), Arc::new(AtomicBool::new(false)))];
            let mut done = [false];
            // A first wake, already listed (the call is waiting for its poll).
            calls[0].0.wake();
            let waker = {
                let (call, ready) = (calls[0].0.clone(), Arc::clone(&calls[0].1));
                thread::spawn(move || {
                    ready.store(true, Ordering::Release);
                    call.wake();
                })
            };
            run_mail(&mails, &queue, &calls, &mut done);
            waker.join().unwrap();
            while run_mail(&mails, &queue, &calls, &mut done) {}
            assert_eq!(done, [true], "the second wake was lost");
        });
    }
}
