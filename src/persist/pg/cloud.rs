//! The simulated cloud in the database: `keel_sim_cloud_log`, one change
//! record (the file's line) per row, in `seq` order, so that keel
//! processes on every machine using the database see one cloud.
//!
//! An append is one transaction: it takes the transaction-level advisory
//! lock [`SIM_CLOUD_LOCK`], checks that the log still ends where the
//! writer last read it, inserts the records and commits. Writers are
//! serialized by the lock, so `seq` grows in commit order and a reader
//! that remembers the last `seq` it applied misses nothing.

use std::sync::Arc;

use super::conn::{Db, DbError};
use crate::provider::sim::CloudLog;

/// The advisory lock key serializing appends to the simulated cloud.
const SIM_CLOUD_LOCK: i64 = 0x6b65_656c_0022;

/// The simulated cloud's log in a database.
#[derive(Debug)]
pub(super) struct PgCloudLog {
    db: Arc<Db>,
}

impl PgCloudLog {
    pub(super) fn new(db: Arc<Db>) -> Self {
        Self { db }
    }
}

impl CloudLog for PgCloudLog {
    fn label(&self) -> String {
        format!("{} (table keel_sim_cloud_log)", self.db.label)
    }

    fn read_after(&self, after: i64) -> Result<Vec<(i64, String)>, String> {
        self.db
            .call(move |pool| async move {
                let c = pool.get().await?;
                let rows = c
                    .query(
                        "SELECT seq, record FROM keel_sim_cloud_log WHERE seq > $1 ORDER BY seq",
                        &[&after],
                    )
                    .await?;
                Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
            })
            .map_err(|e| e.0)
    }

    fn append_if(&self, last: i64, lines: Vec<String>) -> Result<Option<i64>, String> {
        self.db
            .call(move |pool| async move {
                let mut c = pool.get().await?;
                let tx = c.transaction().await?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SIM_CLOUD_LOCK])
                    .await?;
                let end: i64 = tx
                    .query_one("SELECT coalesce(max(seq), 0) FROM keel_sim_cloud_log", &[])
                    .await?
                    .get(0);
                if end != last {
                    // Dropping the transaction rolls it back.
                    return Ok(None);
                }
                let mut end = last;
                for line in &lines {
                    end = tx
                        .query_one(
                            "INSERT INTO keel_sim_cloud_log (record) VALUES ($1) RETURNING seq",
                            &[line],
                        )
                        .await?
                        .get(0);
                }
                tx.commit().await?;
                Ok::<_, DbError>(Some(end))
            })
            .map_err(|e| e.0)
    }
}
