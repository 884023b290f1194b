//! The demo's enrichment: customer rows in an embedded SQLite database (bundled with rusqlite,
//! created by the demo), looked up through a bounded blocking pool as an async function.
//!
//! Two versions:
//!
//! - [`enrichment`]: one pool job and one query per event (a [`BlockingAsyncFunction`]);
//! - [`batched_enrichment`], what the demo job runs: the events waiting for a worker are looked
//!   up together, in one pool job and one query (`WHERE id IN (...)`) per batch. Every event
//!   still reads its customer from the database; nothing is cached between batches.
//!
//! # The batch protocol
//!
//! Calls queue their event and result in a list shared with the pool. The call that makes the
//! list non-empty submits one drain job; a drain job takes the whole list under its lock and
//! answers every call in it. So while the list is not empty a drain job is queued or running
//! that has not taken it yet, and every queued call is answered: a call that finds the list
//! non-empty joins the batch the pending job will take. Drain jobs of different batches run on
//! different workers at once, each with its own connection.
//!
//! Under load the batches grow by themselves (calls queue while the workers are busy), and a
//! batch costs one job, one worker wake-up, one query and one completion mail instead of one of
//! each per event: in the demo job's profile (issue 16) the per-event pool overhead (a boxed
//! job, a channel hand-over that woke a worker, the connection cache's lock twice) was about
//! as much CPU as the query itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use streamtask_core::async_io::{BlockingAsyncFunction, BlockingPool};
use streamtask_core::function::{AsyncError, AsyncFunction, ResultFuture};
use streamtask_core::sync::Mutex;

use super::data::{Customer, TotalEvent};
use super::fault::{FaultKind, FaultPlan};

/// Creates (or replaces) the customer database at `path` with customers `1..=customers`.
///
/// # Errors
///
/// Any SQLite error.
pub fn create_customer_db(path: &Path, customers: u32) -> rusqlite::Result<()> {
    if path.exists() {
        std::fs::remove_file(path).map_err(|e| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                Some(format!("cannot replace {}: {e}", path.display())),
            )
        })?;
    }
    let mut conn = Connection::open(path)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, tier TEXT NOT NULL);",
    )?;
    let tx = conn.transaction()?;
    {
        let mut insert =
            tx.prepare("INSERT INTO customers (id, name, tier) VALUES (?1, ?2, ?3)")?;
        for id in 1..=customers {
            let c = Customer::of(id);
            insert.execute(params![c.id, c.name, c.tier])?;
        }
    }
    tx.commit()
}

/// Looks one customer up.
///
/// # Errors
///
/// [`AsyncError::Failed`] for SQLite errors and unknown customers.
pub fn lookup(conn: &mut Connection, id: u32) -> Result<Customer, AsyncError> {
    let row = conn
        .prepare_cached("SELECT name, tier FROM customers WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row(params![id], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .optional()
        })
        .map_err(|e| AsyncError::failed(format!("customer lookup failed: {e}")))?;
    let (name, tier) =
        row.ok_or_else(|| AsyncError::failed(format!("customer {id} is not in the database")))?;
    let tier = tier_of(&tier)?;
    Ok(Customer { id, name, tier })
}

/// The enrichment as an async function: each event's customer is looked up on `pool` through a
/// read-only connection to the database at `db`, and the event becomes its output line.
pub fn enrichment(
    pool: Arc<BlockingPool>,
    db: &Path,
    faults: Arc<FaultPlan>,
) -> BlockingAsyncFunction<Connection, TotalEvent, String> {
    let db = db.to_path_buf();
    BlockingAsyncFunction::new(
        pool,
        move || open_reader(&db),
        move |conn: &mut Connection, event: &TotalEvent| {
            // A panic here is caught by the pool and completes the call exceptionally.
            faults.check(FaultKind::AsyncCompletion);
            let customer = lookup(conn, event.customer())?;
            Ok(vec![event.to_line(&customer)])
        },
    )
}

/// Opens a read-only connection to the customer database for lookups.
fn open_reader(db: &Path) -> Result<Connection, AsyncError> {
    let failed = |e| AsyncError::failed(format!("cannot open {}: {e}", db.display()));
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed)?;
    // One read transaction for the connection's life, instead of one per lookup: each of those
    // locked and unlocked the file (two fcntl calls), took a WAL read mark and stat'ed the file,
    // and that was most of a lookup's cost (the profile in CHANGELOG, issue 16). Nothing writes
    // the table while the job runs, so the snapshot the transaction reads is the table's only
    // version.
    conn.execute_batch("BEGIN").map_err(failed)?;
    Ok(conn)
}

/// Ids per `IN (...)` query at most; a batch with more distinct customers runs several.
const MAX_IDS_PER_QUERY: usize = 64;

/// Looks up the distinct customers `ids` (sorted, no duplicates) in as few queries as the
/// statement sizes allow, appending what the database holds to `found` (in no particular
/// order). A customer missing from the table is missing from `found`.
///
/// # Errors
///
/// [`AsyncError::Failed`] for SQLite errors and unknown tiers.
pub fn lookup_many(
    conn: &mut Connection,
    ids: &[u32],
    found: &mut Vec<Customer>,
) -> Result<(), AsyncError> {
    let failed = |e: rusqlite::Error| AsyncError::failed(format!("customer lookup failed: {e}"));
    for chunk in ids.chunks(MAX_IDS_PER_QUERY) {
        // One statement per power-of-two size (1, 2, 4, ... 64), padded by repeating the last
        // id (the IN list is a set), so the connection's statement cache holds seven, not one per
        // batch length.
        let size = chunk.len().next_power_of_two();
        let sql = in_query(size);
        let mut stmt = conn.prepare_cached(&sql).map_err(failed)?;
        let last = *chunk.last().expect("chunks are not empty");
        let params = (0..size).map(|i| chunk.get(i).copied().unwrap_or(last));
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params))
            .map_err(failed)?;
        while let Some(row) = rows.next().map_err(failed)? {
            let id: u32 = row.get(0).map_err(failed)?;
            let name: String = row.get(1).map_err(failed)?;
            let tier = row
                .get_ref(2)
                .map_err(failed)?
                .as_str()
                .map_err(|e| AsyncError::failed(format!("customer lookup failed: {e}")))?;
            found.push(Customer {
                id,
                name,
                tier: tier_of(tier)?,
            });
        }
    }
    Ok(())
}

fn in_query(size: usize) -> String {
    let mut sql = String::from("SELECT id, name, tier FROM customers WHERE id IN (");
    for i in 0..size {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push('?');
    }
    sql.push(')');
    sql
}

fn tier_of(tier: &str) -> Result<&'static str, AsyncError> {
    match tier {
        "bronze" => Ok("bronze"),
        "silver" => Ok("silver"),
        "gold" => Ok("gold"),
        other => Err(AsyncError::failed(format!("unknown tier {other:?}"))),
    }
}

/// The enrichment with the waiting events of each worker looked up in one query (see the
/// module doc's batch protocol); what the demo job runs.
///
/// Made by [`batched_enrichment`]. Each event's answer is what [`enrichment`]'s would be: its
/// line, or a failure for an unknown customer or a database error (a batch's database error
/// fails every event of the batch; the job's retry policy sees each).
pub struct BatchedEnrichment {
    pool: Arc<BlockingPool>,
    shared: Arc<BatchShared>,
}

/// What the calls and the drain jobs share.
struct BatchShared {
    db: PathBuf,
    faults: Arc<FaultPlan>,
    /// Calls waiting for a drain job.
    queue: BatchQueue<(TotalEvent, ResultFuture<String>)>,
    /// Connections not in use by a drain job.
    connections: Mutex<Vec<Connection>>,
}

/// The list of the module doc's batch protocol: items waiting for a drain job, and who
/// submits one.
///
/// # Examples
///
/// ```
/// use streamtask::demo::enrich::BatchQueue;
///
/// let queue = BatchQueue::new();
/// assert!(queue.push(1)); // the list was empty: submit a drain job
/// assert!(!queue.push(2)); // the pending job takes this one too
/// assert_eq!(queue.take_all(), vec![1, 2]); // the job's batch
/// assert!(queue.push(3)); // empty again: the next job
/// ```
#[derive(Debug, Default)]
pub struct BatchQueue<T> {
    items: Mutex<Vec<T>>,
}

impl<T> BatchQueue<T> {
    /// An empty list.
    pub fn new() -> Self {
        BatchQueue {
            items: Mutex::new(Vec::new()),
        }
    }

    /// Queues `item`; `true` if the list was empty, and so the caller must submit a drain job
    /// (every other item finds one pending that has not taken the list yet).
    pub fn push(&self, item: T) -> bool {
        let mut items = self.items.lock();
        items.push(item);
        items.len() == 1
    }

    /// Takes every queued item, oldest first: a drain job's batch.
    pub fn take_all(&self) -> Vec<T> {
        std::mem::take(&mut *self.items.lock())
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The enrichment as an async function that batches the lookups waiting for `pool`'s workers;
/// each batch reads its customers through a read-only connection to the database at `db`.
pub fn batched_enrichment(
    pool: Arc<BlockingPool>,
    db: &Path,
    faults: Arc<FaultPlan>,
) -> BatchedEnrichment {
    BatchedEnrichment {
        pool,
        shared: Arc::new(BatchShared {
            db: db.to_path_buf(),
            faults,
            queue: BatchQueue::new(),
            connections: Mutex::new(Vec::new()),
        }),
    }
}

impl AsyncFunction for BatchedEnrichment {
    type In = TotalEvent;
    type Out = String;

    fn invoke(&mut self, input: &TotalEvent, result: ResultFuture<String>) {
        // Only the call that made the list non-empty submits a job (the module doc's protocol).
        if self.shared.queue.push((input.clone(), result)) {
            let shared = Arc::clone(&self.shared);
            if let Err(e) = self.pool.execute(move || shared.drain()) {
                // The pool is shut down: answer what waits, as the pool would have.
                for (_, result) in self.shared.queue.take_all() {
                    result.complete_exceptionally(AsyncError::failed(e));
                }
            }
        }
    }
}

impl BatchShared {
    /// A drain job: answers every call queued now.
    fn drain(&self) {
        let batch = self.queue.take_all();
        if batch.is_empty() {
            return;
        }
        let checked_out = self.connections.lock().pop();
        let mut conn = match checked_out.map_or_else(|| open_reader(&self.db), Ok) {
            Ok(conn) => conn,
            Err(e) => {
                for (_, result) in batch {
                    result.complete_exceptionally(e.clone());
                }
                return;
            }
        };
        let mut ids: Vec<u32> = batch.iter().map(|(event, _)| event.customer()).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut found = Vec::with_capacity(ids.len());
        let looked_up = lookup_many(&mut conn, &ids, &mut found);
        found.sort_unstable_by_key(|c| c.id);
        for (event, result) in batch {
            // An injected fault hits one call, as it would hit one pool job: that call fails,
            // the rest of the batch is answered.
            if let Err(panic) =
                streamtask_core::catch_panic(|| self.faults.check(FaultKind::AsyncCompletion))
            {
                result.complete_exceptionally(AsyncError::failed(format!(
                    "blocking call panicked: {panic}"
                )));
                continue;
            }
            let id = event.customer();
            let answer = match &looked_up {
                Err(e) => Err(e.clone()),
                Ok(()) => match found.binary_search_by_key(&id, |c| c.id) {
                    Ok(i) => Ok(vec![event.to_line(&found[i])]),
                    Err(_) => Err(AsyncError::failed(format!(
                        "customer {id} is not in the database"
                    ))),
                },
            };
            match answer {
                Ok(lines) => result.complete(lines),
                Err(e) => result.complete_exceptionally(e),
            };
        }
        self.connections.lock().push(conn);
    }
}

impl std::fmt::Debug for BatchedEnrichment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchedEnrichment")
            .field("pool", &self.pool)
            .field("db", &self.shared.db)
            .field("queued", &self.shared.queue.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batched_lookups_answer_every_call_as_single_lookups_would() {
        use streamtask_core::function::AsyncOutcome;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("customers.db");
        create_customer_db(&db, 100).unwrap();
        let pool = BlockingPool::new("batch-test", 2, 64).unwrap();
        let mut f = batched_enrichment(Arc::clone(&pool), &db, Arc::new(FaultPlan::none()));
        let (sink, completions) = streamtask_core::testing::completion_channel();
        // More distinct customers than one query takes, repeats, and one unknown customer.
        let customers: Vec<u32> = (1..=100).chain([7, 7, 100, 101]).collect();
        for (entry, &customer) in customers.iter().enumerate() {
            let event = TotalEvent::Running {
                order: entry as u64,
                customer,
                total_cents: 5,
            };
            f.invoke(&event, ResultFuture::new(entry as u64, 1, sink.clone()));
        }
        let mut answers: Vec<_> = (0..customers.len())
            .map(|_| completions.recv().unwrap())
            .collect();
        answers.sort_by_key(|c| c.entry);
        for (c, &customer) in answers.iter().zip(&customers) {
            let event = TotalEvent::Running {
                order: c.entry,
                customer,
                total_cents: 5,
            };
            match customer {
                101 => assert!(matches!(
                    &c.outcome,
                    AsyncOutcome::Failed(AsyncError::Failed(m)) if m.contains("not in the database")
                )),
                _ => assert_eq!(
                    c.outcome,
                    AsyncOutcome::Results(vec![event.to_line(&Customer::of(customer))])
                ),
            }
        }
        assert!(f.shared.queue.is_empty());
        pool.shutdown();
    }

    #[test]
    fn lookups_return_what_the_generator_stored() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("customers.db");
        create_customer_db(&db, 10).unwrap();
        let mut conn = Connection::open(&db).unwrap();
        assert_eq!(lookup(&mut conn, 7).unwrap(), Customer::of(7));
        assert!(lookup(&mut conn, 11).is_err());
        // Re-creating replaces the database.
        drop(conn);
        create_customer_db(&db, 3).unwrap();
        let mut conn = Connection::open(&db).unwrap();
        assert!(lookup(&mut conn, 7).is_err());
    }
}
