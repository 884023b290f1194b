//! The demo's enrichment: customer rows in an embedded SQLite database (bundled with rusqlite,
//! created by the demo), looked up through a bounded blocking pool as an async function.
//!
//! Two versions:
//!
//! - [`enrichment`]: one pool job and one query per event (a [`BlockingAsyncFunction`]);
//! - [`batched_enrichment`], what the demo job runs: a batch function
//!   ([`EnrichBatches`]) for the async operator's batched mode, each batch looked up in one
//!   pool job and one query (`WHERE id IN (...)`). Every event still reads its customer from
//!   the database; nothing is cached between batches. [`throttled_enrichment`] is the same with
//!   a slow database (the backpressure scenario).
//!
//! The batching is the async operator's (`async_wait_batched`: a batch closes at its size or
//! its max wait); this module only says how a batch is looked up. A batch costs one job, one
//! worker wake-up, one query and one completion burst instead of one of each per event:
//! unbatched, the per-event pool overhead (a boxed job, a channel hand-over that wakes a
//! worker, the connection cache's lock twice) costs about as much CPU as the query itself.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use streamtask_core::async_io::{
    AsyncBatchFunction, BatchResultFuture, BlockingAsyncFunction, BlockingPool,
};
use streamtask_core::function::AsyncError;

use super::data::{Customer, TotalEvent};
use streamtask::fault::{FaultKind, FaultPlan};

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
    // One read transaction for the connection's life, not one per lookup: each of those locks
    // and unlocks the file (two fcntl calls), takes a WAL read mark and stats the file, which
    // is most of a lookup's cost (see PERF-NOTES.md). Nothing writes
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

/// The enrichment as a batch function ([`EnrichBatches`], run by the async operator in batched
/// mode): each batch reads its distinct customers in one query ([`lookup_many`]) through a
/// read-only connection to the database at `db`. Each event's answer is what [`enrichment`]'s
/// would be: its line, or a failure for an unknown customer or a database error (a batch's
/// database error fails every event of the batch; the job's retry policy sees each), and an
/// injected fault fails its own event only, as it would fail one pool job.
pub fn batched_enrichment(
    pool: Arc<BlockingPool>,
    db: &Path,
    faults: Arc<FaultPlan>,
) -> EnrichBatches {
    throttled_enrichment(pool, db, faults, Duration::ZERO)
}

/// [`batched_enrichment`] with a slow database: each batch's worker also sleeps `per_event`
/// for every event of the batch, so a worker answers at most one event per `per_event` (the
/// backpressure scenario's slow stage). The answers are [`batched_enrichment`]'s: the sleep
/// only delays them, and the ordered async operator emits them in input order whenever they
/// come.
pub fn throttled_enrichment(
    pool: Arc<BlockingPool>,
    db: &Path,
    faults: Arc<FaultPlan>,
    per_event: Duration,
) -> EnrichBatches {
    EnrichBatches {
        pool,
        shared: Arc::new(EnrichShared {
            db: db.to_path_buf(),
            faults,
            per_event,
            connections: Mutex::new(Vec::new()),
        }),
    }
}

/// The demo's enrichment as an [`AsyncBatchFunction`]: the async operator forms the batches
/// (by size and max wait, see `enrich_config`), and each batch is one job on the blocking pool
/// that looks its customers up in one query.
pub struct EnrichBatches {
    pool: Arc<BlockingPool>,
    shared: Arc<EnrichShared>,
}

/// What a batch's pool job needs.
struct EnrichShared {
    db: PathBuf,
    faults: Arc<FaultPlan>,
    per_event: Duration,
    /// Idle read connections (one per worker at most is ever checked out).
    connections: Mutex<Vec<Connection>>,
}

impl std::fmt::Debug for EnrichBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrichBatches")
            .field("pool", &self.pool)
            .field("db", &self.shared.db)
            .finish()
    }
}

impl AsyncBatchFunction for EnrichBatches {
    type In = TotalEvent;
    type Out = String;

    fn invoke_batch(&mut self, events: &[TotalEvent], result: BatchResultFuture<String>) {
        let shared = Arc::clone(&self.shared);
        let events = events.to_vec();
        let answer = result.clone();
        let job = move || {
            // A panicking batch may have left its connection broken: it is dropped with the
            // job, and the batch fails.
            match streamtask_core::catch_panic(|| shared.answer(&events)) {
                Ok(outcomes) => answer.complete_each(outcomes),
                Err(panic) => answer.complete_exceptionally(AsyncError::failed(format!(
                    "blocking call panicked: {panic}"
                ))),
            }
        };
        if let Err(e) = self.pool.execute(job) {
            result.complete_exceptionally(AsyncError::failed(e));
        }
    }
}

impl EnrichShared {
    /// Each event's answer, in the events' order.
    fn answer(&self, events: &[TotalEvent]) -> Vec<Result<Vec<String>, AsyncError>> {
        let mut conn = match self
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
        {
            Some(conn) => conn,
            None => match open_reader(&self.db) {
                Ok(conn) => conn,
                Err(e) => return events.iter().map(|_| Err(e.clone())).collect(),
            },
        };
        if !self.per_event.is_zero() {
            // One sleep per batch, not per event: a batch under load holds tens of events, so
            // the sleep is long enough for the timer's slack not to dominate it.
            let events = u32::try_from(events.len()).unwrap_or(u32::MAX);
            std::thread::sleep(self.per_event.saturating_mul(events));
        }
        let mut ids: Vec<u32> = events.iter().map(TotalEvent::customer).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut found = Vec::with_capacity(ids.len());
        let looked_up = lookup_many(&mut conn, &ids, &mut found);
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn);
        found.sort_unstable_by_key(|c| c.id);
        events
            .iter()
            .map(|event| {
                streamtask_core::catch_panic(|| self.faults.check(FaultKind::AsyncCompletion))
                    .map_err(|panic| {
                        AsyncError::failed(format!("blocking call panicked: {panic}"))
                    })?;
                looked_up.clone()?;
                let id = event.customer();
                match found.binary_search_by_key(&id, |c| c.id) {
                    Ok(i) => Ok(vec![event.to_line(&found[i])]),
                    Err(_) => Err(AsyncError::failed(format!(
                        "customer {id} is not in the database"
                    ))),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batched_lookups_answer_every_call_as_single_lookups_would() {
        use streamtask_core::function::{AsyncOutcome, ResultFuture};
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("customers.db");
        create_customer_db(&db, 100).unwrap();
        let pool = BlockingPool::new("batch-test", 2, 64).unwrap();
        let mut f = batched_enrichment(Arc::clone(&pool), &db, Arc::new(FaultPlan::none()));
        let (sink, completions) = streamtask_core::testing::completion_channel();
        // More distinct customers than one query takes, repeats, and one unknown customer.
        let customers: Vec<u32> = (1..=100).chain([7, 7, 100, 101]).collect();
        let events: Vec<TotalEvent> = customers
            .iter()
            .enumerate()
            .map(|(entry, &customer)| TotalEvent::Running {
                order: entry as u64,
                customer,
                total_cents: 5,
            })
            .collect();
        let futures = (0..events.len())
            .map(|entry| ResultFuture::new(entry as u64, 1, sink.clone()))
            .collect();
        f.invoke_batch(&events, BatchResultFuture::new(futures));
        let mut answers: Vec<_> = (0..customers.len())
            .map(|_| completions.recv().unwrap())
            .collect();
        answers.sort_by_key(|c| c.entry);
        for ((c, &customer), event) in answers.iter().zip(&customers).zip(&events) {
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
