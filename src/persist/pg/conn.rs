//! The connection side of the PostgreSQL backend: one thread per database
//! URL and process, running a current-thread tokio runtime with a
//! `deadpool-postgres` pool. Every database call of keel is a job sent to
//! that thread; the caller (a CLI command, the persister actor) waits for
//! its reply on a std channel, so no runtime thread of the engine does the
//! database's I/O and the backend works from sync and async callers alike.
//!
//! The schema is created and migrated on the first connection of a process
//! ([`migrate`]): versions in `keel_schema`, each applied once, all in one
//! transaction under a transaction-level advisory lock (so concurrent
//! first runs wait for each other; a second run finds nothing to do).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

/// The advisory lock key serializing schema migrations.
const MIGRATION_LOCK: i64 = 0x6b65_656c_0021;

/// A failed database call: its message (the server's or the client's).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct DbError(pub String);

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        // The server's message names what went wrong; the client's own
        // `Display` ("db error") does not.
        match e.as_db_error() {
            Some(db) => Self(format!("{}: {}", db.severity(), db.message())),
            None => {
                // "error connecting to server", then why.
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    text.push_str(": ");
                    text.push_str(&c.to_string());
                    cause = c.source();
                }
                Self(text)
            }
        }
    }
}

impl From<deadpool_postgres::PoolError> for DbError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => Self(other.to_string()),
        }
    }
}

type Job = Box<dyn FnOnce(Pool) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// One database: its pool's thread.
#[derive(Debug)]
pub struct Db {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    config: tokio_postgres::Config,
    /// The URL without its password, for messages.
    pub label: String,
}

/// The databases this process uses, by URL.
fn registry() -> &'static Mutex<HashMap<String, Arc<Db>>> {
    static DBS: OnceLock<Mutex<HashMap<String, Arc<Db>>>> = OnceLock::new();
    DBS.get_or_init(Mutex::default)
}

/// `postgres://user@host:port/db` without a password.
fn label(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(s) => s.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .unwrap_or_default();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

impl Db {
    /// The database at `url` (one per URL and process; its schema migrated
    /// on first use).
    ///
    /// # Errors
    /// [`DbError`] for a malformed URL, an unreachable server or a failed
    /// migration.
    pub fn get(url: &str) -> Result<Arc<Self>, DbError> {
        let mut dbs = registry().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(db) = dbs.get(url) {
            return Ok(db.clone());
        }
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| DbError(format!("`{url}` is not a PostgreSQL URL: {e}")))?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Verified,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(4)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| DbError(e.to_string()))?;
        let (jobs, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        std::thread::Builder::new()
            .name("keel-postgres".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    while let Some(job) = rx.recv().await {
                        tokio::spawn(job(pool.clone()));
                    }
                });
            })
            .map_err(|e| DbError(e.to_string()))?;
        let db = Arc::new(Self {
            jobs,
            label: label(&config),
            config,
        });
        db.call(|pool| async move { migrate(&pool).await })?;
        dbs.insert(url.to_owned(), db.clone());
        Ok(db)
    }

    /// Runs `f` with the pool on the database's thread and waits for it.
    ///
    /// # Errors
    /// `f`'s; [`DbError`] when the thread is gone.
    pub fn call<T, F, Fut>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(Pool) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, DbError>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.spawn(move |pool| async move {
            let _ = tx.send(f(pool).await);
        })?;
        rx.recv()
            .map_err(|_| DbError("the database thread stopped".into()))?
    }

    /// Starts `f` on the database's thread without waiting.
    ///
    /// # Errors
    /// [`DbError`] when the thread is gone.
    pub fn spawn<F, Fut>(&self, f: F) -> Result<(), DbError>
    where
        F: FnOnce(Pool) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.jobs
            .send(Box::new(move |pool| Box::pin(f(pool))))
            .map_err(|_| DbError("the database thread stopped".into()))
    }

    /// A new connection of its own (not pooled): for a session advisory
    /// lock, which lives as long as the connection. Its connection task
    /// runs on the database's thread; it ends when the client is dropped.
    ///
    /// # Errors
    /// [`DbError`] when the server cannot be reached.
    pub fn dedicated(&self) -> Result<tokio_postgres::Client, DbError> {
        let config = self.config.clone();
        self.call(move |_| async move {
            let (client, conn) = config.connect(NoTls).await?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(client)
        })
    }
}

/// The schema, version by version (never edited once released: a change
/// is a new version).
const MIGRATIONS: &[&str] = &[
    // 1: stacks, their base checkpoints and journals, history, locks,
    // cancel requests, removed stacks, the simulated cloud, settings.
    r"
CREATE TABLE keel_stacks (
    name text PRIMARY KEY,
    created timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE keel_settings (
    key text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE keel_checkpoints (
    stack text PRIMARY KEY REFERENCES keel_stacks (name) ON DELETE CASCADE,
    base bytea NOT NULL,
    backup bytea
);
CREATE TABLE keel_journal (
    stack text NOT NULL REFERENCES keel_stacks (name) ON DELETE CASCADE,
    seq bigint NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (stack, seq)
);
CREATE TABLE keel_history (
    id bigserial PRIMARY KEY,
    stack text NOT NULL REFERENCES keel_stacks (name) ON DELETE CASCADE,
    line text NOT NULL
);
CREATE INDEX keel_history_stack ON keel_history (stack, id);
CREATE TABLE keel_locks (
    stack text PRIMARY KEY,
    host text NOT NULL,
    pid bigint NOT NULL,
    command text NOT NULL,
    started text NOT NULL
);
CREATE TABLE keel_cancel_requests (
    stack text PRIMARY KEY,
    request text NOT NULL
);
CREATE TABLE keel_backups (
    name text PRIMARY KEY,
    stack text NOT NULL,
    moved timestamptz NOT NULL DEFAULT now(),
    base bytea,
    journal bytea NOT NULL,
    history text NOT NULL
);
CREATE TABLE keel_sim_cloud (
    id int PRIMARY KEY,
    body bytea NOT NULL
);
",
    // 2: the simulated cloud as a log of change records (the file's, one
    // per row), appended to under `keel_sim_cloud_log`'s advisory lock;
    // the whole-body table of version 1 was never written.
    r"
DROP TABLE IF EXISTS keel_sim_cloud;
CREATE TABLE keel_sim_cloud_log (
    seq bigserial PRIMARY KEY,
    record text NOT NULL
);
",
    // 3: a removed stack's configuration file is kept with its backup.
    r"
ALTER TABLE keel_backups ADD COLUMN config bytea;
",
];

/// Creates or migrates the schema: every version not yet applied, in one
/// transaction under [`MIGRATION_LOCK`].
async fn migrate(pool: &Pool) -> Result<(), DbError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS keel_schema (version int NOT NULL)")
        .await?;
    let row = tx
        .query_one("SELECT coalesce(max(version), 0) FROM keel_schema", &[])
        .await?;
    let have: i32 = row.get(0);
    let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
    if have > known {
        return Err(DbError(format!(
            "the database's keel schema is version {have}, newer than this keel knows ({known}); use a newer keel"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(have as usize) {
        tx.batch_execute(sql).await?;
        let v = i32::try_from(i + 1).unwrap_or(i32::MAX);
        tx.execute("INSERT INTO keel_schema (version) VALUES ($1)", &[&v])
            .await?;
    }
    tx.commit().await?;
    Ok(())
}
