//! Loom models of core's concurrency protocols, one `mod` per concept. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release -p streamtask-core --test loom`.
//!
//! Keep every model small (two or three threads, a handful of operations) so the bounded
//! exploration finishes in seconds.
#![cfg(loom)]

/// The blocking pool (`async_io::BlockingPool`): a job submitted while its workers park is
/// not lost, and a shutdown racing a blocked submitter neither loses an accepted job nor leaves
/// a worker parked.
mod pool {
    use std::sync::Arc;

    use streamtask_core::async_io::{BlockingPool, PoolError};
    use streamtask_core::sync::{Condvar, Mutex, thread};

    /// Jobs that ran, and a condition variable to wait for a count of them.
    #[derive(Default)]
    struct Ran {
        count: Mutex<usize>,
        changed: Condvar,
    }

    impl Ran {
        fn job(self: &Arc<Self>) -> impl FnOnce() + Send + 'static {
            let ran = Arc::clone(self);
            move || {
                *ran.count.lock() += 1;
                ran.changed.notify_all();
            }
        }

        /// Waits until `n` jobs ran; a lost wake leaves the job queued and every thread blocked,
        /// which loom reports as a deadlock (the pool is still open: shutdown's wake-all cannot
        /// rescue it).
        fn wait_for(&self, n: usize) {
            let mut count = self.count.lock();
            while *count < n {
                self.changed.wait(&mut count);
            }
        }
    }

    /// One worker: a job submitted while the worker looks for one, parks, or is just woken
    /// runs without shutdown's help; so does the next one.
    #[test]
    fn a_job_submitted_as_the_worker_parks_is_not_lost() {
        loom::model(|| {
            let pool = BlockingPool::new("loom-pool", 1, 2).unwrap();
            let ran = Arc::new(Ran::default());
            pool.execute(ran.job()).unwrap();
            ran.wait_for(1);
            pool.execute(ran.job()).unwrap();
            ran.wait_for(2);
            pool.shutdown();
            assert_eq!(*ran.count.lock(), 2);
        });
    }

    /// Two workers, two submitters: both jobs run while the pool is open.
    #[test]
    fn two_submitters_two_workers_every_job_runs() {
        loom::model(|| {
            let pool = BlockingPool::new("loom-pool", 2, 2).unwrap();
            let ran = Arc::new(Ran::default());
            let other = {
                let (pool, ran) = (Arc::clone(&pool), Arc::clone(&ran));
                thread::spawn(move || pool.execute(ran.job()).unwrap())
            };
            pool.execute(ran.job()).unwrap();
            other.join().unwrap();
            ran.wait_for(2);
            pool.shutdown();
        });
    }

    /// A submitter blocked on a full queue gets room from the worker taking a job, or is
    /// refused by a shutdown that came first; an accepted job always runs, and the shutdown
    /// wakes the parked worker to end.
    #[test]
    fn a_submitter_waiting_for_room_vs_shutdown() {
        loom::model(|| {
            let pool = BlockingPool::new("loom-pool", 1, 1).unwrap();
            let ran = Arc::new(Ran::default());
            pool.execute(ran.job()).unwrap();
            let submitter = {
                let (pool, ran) = (Arc::clone(&pool), Arc::clone(&ran));
                thread::spawn(move || pool.execute(ran.job()))
            };
            pool.shutdown();
            let accepted = match submitter.join().unwrap() {
                Ok(()) => 2,
                Err(PoolError::ShutDown) => 1,
                Err(e) => panic!("{e}"),
            };
            assert_eq!(*ran.count.lock(), accepted, "an accepted job did not run");
        });
    }
}

/// The batched blocking function's protocol (`async_io::BatchQueue`): the call that makes the
/// list non-empty submits a drain job, a drain job takes the whole list. Two callers race the
/// drain jobs (a caller that must submit one runs it on a thread of its own, as a pool worker
/// would): every item is drained exactly once, and none is left behind once every submitted
/// job ran (a push that found the list non-empty joined a batch some job had yet to take).
mod batch_queue {
    use streamtask_core::async_io::BatchQueue;
    use streamtask_core::sync::{Arc, Mutex, thread};

    #[test]
    fn every_queued_item_is_drained_once() {
        loom::model(|| {
            let queue = Arc::new(BatchQueue::new());
            let drained = Arc::new(Mutex::new(Vec::new()));
            let callers: Vec<_> = [1u32, 2]
                .into_iter()
                .map(|item| {
                    let queue = Arc::clone(&queue);
                    let drained = Arc::clone(&drained);
                    thread::spawn(move || {
                        if queue.push(item) {
                            let job = thread::spawn(move || {
                                let batch = queue.take_all();
                                drained.lock().extend(batch);
                            });
                            job.join().unwrap();
                        }
                    })
                })
                .collect();
            callers.into_iter().for_each(|c| c.join().unwrap());
            assert!(
                queue.is_empty(),
                "an item was queued with no drain job to take it"
            );
            let mut drained = drained.lock().clone();
            drained.sort_unstable();
            assert_eq!(drained, vec![1, 2]);
        });
    }
}
