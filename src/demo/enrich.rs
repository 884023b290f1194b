//! The demo's enrichment: customer rows in an embedded SQLite database (bundled with rusqlite,
//! created by the demo), looked up through a bounded blocking pool as an async function.

use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use streamtask_core::async_io::{BlockingAsyncFunction, BlockingPool};
use streamtask_core::function::AsyncError;

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
    let tier = match tier.as_str() {
        "bronze" => "bronze",
        "silver" => "silver",
        "gold" => "gold",
        other => return Err(AsyncError::failed(format!("unknown tier {other:?}"))),
    };
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
        move || {
            let failed = |e| AsyncError::failed(format!("cannot open {}: {e}", db.display()));
            let conn = Connection::open_with_flags(
                &db,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(failed)?;
            // One read transaction for the connection's life, instead of one per lookup: each
            // of those locked and unlocked the file (two fcntl calls), took a WAL read mark and
            // stat'ed the file, and that was most of a lookup's cost (the profile in
            // CHANGELOG, issue 16). Nothing writes the table while the job runs, so the
            // snapshot the transaction reads is the table's only version.
            conn.execute_batch("BEGIN").map_err(failed)?;
            Ok(conn)
        },
        move |conn: &mut Connection, event: &TotalEvent| {
            // A panic here is caught by the pool and completes the call exceptionally.
            faults.check(FaultKind::AsyncCompletion);
            let customer = lookup(conn, event.customer())?;
            Ok(vec![event.to_line(&customer)])
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
