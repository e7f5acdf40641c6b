//! A stack's lock in PostgreSQL: a session advisory lock, keyed by a hash
//! of the stack's name, on a connection of its own, held for the
//! operation's lifetime, plus a `keel_locks` row naming the holder (host,
//! pid, command, start). A second operation's `pg_try_advisory_lock`
//! fails at once and reads the row. The server releases the advisory lock
//! when the connection dies, so a crashed holder's lock is free; its row
//! stays until the next holder overwrites it (a row whose advisory lock
//! is free is stale).
//!
//! The connection also carries the operation's writes (compactions and
//! the journal's group commits): a holder that lost its connection, and so
//! its lock, cannot write any more.

use std::sync::Arc;

use tokio::sync::Mutex;

use super::conn::{Db, DbError};
use super::{held, persist_err, read_stack};
use crate::persist::backend::BackendError;
use crate::persist::fs::Holder;
use crate::persist::PersistError;

/// The advisory lock key of a stack (computed by the server).
const KEY: &str = "hashtextextended('keel-stack:' || $1, 21)";

/// A held stack lock; dropping it removes the holder row and releases the
/// advisory lock (closing its connection).
pub struct PgLock {
    pub(crate) db: Arc<Db>,
    pub(crate) client: Arc<Mutex<tokio_postgres::Client>>,
    pub(crate) stack: String,
    holder: Holder,
}

impl std::fmt::Debug for PgLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLock")
            .field("stack", &self.stack)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl PgLock {
    /// Takes `stack`'s lock for `holder` at once (never waits), creating
    /// the stack.
    ///
    /// # Errors
    /// [`BackendError::Locked`] naming the holder; [`BackendError::Persist`]
    /// when the database cannot be reached.
    pub fn acquire(db: Arc<Db>, stack: &str, holder: &Holder) -> Result<Self, BackendError> {
        let persist = |e: DbError| BackendError::Persist {
            stack: stack.to_owned(),
            source: persist_err(format!("{} (locking stack `{stack}`)", db.label), e),
        };
        let client = db.dedicated().map_err(persist)?;
        let client = Arc::new(Mutex::new(client));
        let (c, name, h) = (client.clone(), stack.to_owned(), holder.clone());
        let got = db
            .call(move |_| async move {
                let c = c.lock().await;
                let got: bool = c
                    .query_one(&format!("SELECT pg_try_advisory_lock({KEY})"), &[&name])
                    .await?
                    .get(0);
                if !got {
                    return Ok(Err(read_holder(&c, &name).await?));
                }
                c.execute(
                    "INSERT INTO keel_stacks (name) VALUES ($1) ON CONFLICT DO NOTHING",
                    &[&name],
                )
                .await?;
                c.execute(
                    "INSERT INTO keel_locks (stack, host, pid, command, started) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (stack) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, command = EXCLUDED.command, started = EXCLUDED.started",
                    &[&name, &h.host, &i64::from(h.pid), &h.command, &h.started],
                )
                .await?;
                Ok(Ok(()))
            })
            .map_err(persist)?;
        if let Err(holder) = got {
            return Err(BackendError::Locked(held(holder)));
        }
        Ok(Self {
            db,
            client,
            stack: stack.to_owned(),
            holder: holder.clone(),
        })
    }

    /// The connection holding the lock.
    pub(crate) fn client(&self) -> Arc<Mutex<tokio_postgres::Client>> {
        self.client.clone()
    }

    fn err(&self, what: &str, e: DbError) -> PersistError {
        persist_err(
            format!("{}/stacks/{} ({what})", self.db.label, self.stack),
            e,
        )
    }

    /// The stack's base, journal and first journal sequence number, read
    /// under the lock.
    ///
    /// # Errors
    /// [`PersistError::Database`].
    pub fn read(&self) -> Result<super::StoredRows, PersistError> {
        let (c, name) = (self.client(), self.stack.clone());
        self.db
            .call(move |_| async move {
                let c = c.lock().await;
                read_stack(&*c, &name).await
            })
            .map_err(|e| self.err("reading the stack", e))
    }

    /// One transaction: `base` becomes the stack's base (the one it
    /// replaces its backup), the journal's rows are replaced by `fresh`
    /// (sequence number, framed record).
    ///
    /// # Errors
    /// [`PersistError::Database`]; the previous state then stands.
    pub fn compact(&self, base: Vec<u8>, fresh: Vec<(i64, Vec<u8>)>) -> Result<(), PersistError> {
        let (c, name) = (self.client(), self.stack.clone());
        self.db
            .call(move |_| async move {
                let mut c = c.lock().await;
                compact(&mut c, &name, base, fresh).await
            })
            .map_err(|e| self.err("writing the base checkpoint", e))
    }
}

/// [`PgLock::compact`] on the lock's connection.
pub(crate) async fn compact(
    c: &mut tokio_postgres::Client,
    stack: &str,
    base: Vec<u8>,
    fresh: Vec<(i64, Vec<u8>)>,
) -> Result<(), DbError> {
    let tx = c.transaction().await?;
    tx.execute(
        "INSERT INTO keel_checkpoints (stack, base) VALUES ($1, $2) \
         ON CONFLICT (stack) DO UPDATE SET backup = keel_checkpoints.base, base = EXCLUDED.base",
        &[&stack, &base],
    )
    .await?;
    tx.execute("DELETE FROM keel_journal WHERE stack = $1", &[&stack])
        .await?;
    insert_records(&tx, stack, fresh).await?;
    tx.commit().await?;
    Ok(())
}

/// Inserts journal records (one statement).
pub(crate) async fn insert_records(
    tx: &tokio_postgres::Transaction<'_>,
    stack: &str,
    records: Vec<(i64, Vec<u8>)>,
) -> Result<(), DbError> {
    if records.is_empty() {
        return Ok(());
    }
    let (seqs, bodies): (Vec<i64>, Vec<Vec<u8>>) = records.into_iter().unzip();
    tx.execute(
        "INSERT INTO keel_journal (stack, seq, record) SELECT $1, * FROM unnest($2::bigint[], $3::bytea[])",
        &[&stack, &seqs, &bodies],
    )
    .await?;
    Ok(())
}

async fn read_holder(c: &tokio_postgres::Client, stack: &str) -> Result<Option<Holder>, DbError> {
    let row = c
        .query_opt(
            "SELECT host, pid, command, started FROM keel_locks WHERE stack = $1",
            &[&stack],
        )
        .await?;
    Ok(row.map(|r| Holder {
        host: r.get(0),
        pid: u32::try_from(r.get::<_, i64>(1)).unwrap_or(0),
        command: r.get(2),
        started: r.get(3),
    }))
}

/// The holder of `stack`'s lock when an operation holds it: probes the
/// advisory lock on a pooled connection (releasing it at once when free).
///
/// # Errors
/// [`DbError`].
pub fn holder(db: &Db, stack: &str) -> Result<Option<Holder>, DbError> {
    let name = stack.to_owned();
    db.call(move |pool| async move {
        let c = pool.get().await?;
        let free: bool = c
            .query_one(&format!("SELECT pg_try_advisory_lock({KEY})"), &[&name])
            .await?
            .get(0);
        if free {
            c.execute(&format!("SELECT pg_advisory_unlock({KEY})"), &[&name])
                .await?;
            return Ok(None);
        }
        Ok(Some(read_holder(&c, &name).await?.unwrap_or(Holder {
            pid: 0,
            host: "unknown".into(),
            command: "unknown".into(),
            started: "unknown".into(),
        })))
    })
}

impl Drop for PgLock {
    fn drop(&mut self) {
        let client = self.client.clone();
        let (name, h) = (self.stack.clone(), self.holder.clone());
        // Best effort: a dead connection has released the lock already.
        let _ = self.db.call(move |_| async move {
            let c = client.lock().await;
            let _ = c
                .execute(
                    "DELETE FROM keel_locks WHERE stack = $1 AND host = $2 AND pid = $3",
                    &[&name, &h.host, &i64::from(h.pid)],
                )
                .await;
            let _ = c
                .execute(&format!("SELECT pg_advisory_unlock({KEY})"), &[&name])
                .await;
            Ok(())
        });
    }
}
