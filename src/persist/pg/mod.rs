//! The PostgreSQL backend (`--backend postgres://USER@HOST:PORT/DB`): the
//! file backend's stacks in a database, for teams.
//!
//! It keeps exactly the file backend's bytes: a stack's base checkpoint
//! (the export form with the journal watermark, secrets encrypted by the
//! same [`Crypter`]) in `keel_checkpoints` (with the base it replaced as
//! `backup`), and its journal as one row per record in `keel_journal`,
//! each row the record framed as in `journal.log`. Loading concatenates
//! the rows in order and replays them with the file backend's code
//! ([`StoredStack::assemble`]): replay and pending-operation recovery are
//! the same. A group commit is one transaction, a compaction another
//! (replace the base, delete the journal's rows, insert the begin records
//! of operations in flight).
//!
//! An operation's lock is a session advisory lock on a connection of its
//! own (see [`lock`]), held until the operation ends; the server releases
//! it when the connection dies (the holder crashed), and every journal
//! write and compaction of the operation goes through that connection, so
//! a writer that lost its lock cannot write. `keel_locks` names the holder.

#[cfg(feature = "sim")]
mod cloud;
pub mod conn;
pub mod journal;
pub mod lock;

use std::path::PathBuf;
use std::sync::Arc;

use self::conn::{Db, DbError};
use self::lock::PgLock;
use super::backend::{
    base_bytes, BackendError, Loaded, OpenStack, StackPaths, StoredBase, StoredStack,
};
use super::fs::{Holder, IoCounters, LockError};
use super::history::{History, HistoryRecord};
use super::PersistError;
use crate::model::Deployment;
use crate::secrets::Crypter;

/// The name of the setting holding the selected stack.
const SELECTED: &str = "selected-stack";

/// A PostgreSQL backend.
#[derive(Debug, Clone)]
pub struct PgBackend {
    url: String,
    passphrase: Option<String>,
    new_stack_salt: Option<String>,
}

/// A database error as a persistence error (labelled with the database
/// and what was being done).
pub(crate) fn persist_err(place: impl Into<String>, e: DbError) -> PersistError {
    PersistError::Database {
        place: place.into(),
        message: e.0,
    }
}

impl PgBackend {
    /// The backend at `url` (connected on first use).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            passphrase: None,
            new_stack_salt: None,
        }
    }

    /// See [`super::backend::Backend::with_passphrase`].
    pub fn with_passphrase(mut self, passphrase: Option<String>) -> Self {
        self.passphrase = passphrase;
        self
    }

    /// See [`super::backend::Backend::with_new_stack_salt`].
    pub fn with_new_stack_salt(mut self, salt: Option<String>) -> Self {
        self.new_stack_salt = salt;
        self
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database (its schema migrated).
    ///
    /// # Errors
    /// [`PersistError::Database`] naming the URL.
    pub fn db(&self) -> Result<Arc<Db>, PersistError> {
        Db::get(&self.url).map_err(|e| persist_err(self.url.clone(), e))
    }

    /// Labels of a stack's rows, for messages (never a file).
    pub fn paths(&self, stack: &str) -> StackPaths {
        let dir = PathBuf::from(format!("{}/stacks/{stack}", self.label()));
        StackPaths {
            base: dir.join("checkpoint"),
            journal: dir.join("journal"),
            lock: dir.join("lock"),
            dir,
        }
    }

    /// The URL without a password.
    pub fn label(&self) -> String {
        Db::get(&self.url).map_or_else(|_| self.url.clone(), |db| db.label.clone())
    }

    fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T, PersistError>
    where
        T: Send + 'static,
        F: FnOnce(deadpool_postgres::Pool) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, DbError>> + Send + 'static,
    {
        let db = self.db()?;
        db.call(f)
            .map_err(|e| persist_err(format!("{} ({what})", db.label), e))
    }

    /// The stacks, sorted.
    ///
    /// # Errors
    /// [`PersistError::Database`] when the database cannot be read.
    pub fn stacks(&self) -> Result<Vec<String>, PersistError> {
        self.call("listing stacks", |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query("SELECT name FROM keel_stacks ORDER BY name", &[])
                .await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    /// True when the stack exists.
    ///
    /// # Errors
    /// [`PersistError::Database`] when the database cannot be read.
    pub fn exists(&self, stack: &str) -> Result<bool, PersistError> {
        let stack = stack.to_owned();
        self.call("reading a stack", |pool| async move {
            let c = pool.get().await?;
            let row = c
                .query_opt("SELECT 1 FROM keel_stacks WHERE name = $1", &[&stack])
                .await?;
            Ok(row.is_some())
        })
    }

    /// Creates an empty stack (no base): false when it already exists.
    ///
    /// # Errors
    /// [`PersistError::Database`] when the database cannot be written.
    pub fn create(&self, stack: &str) -> Result<bool, PersistError> {
        let stack = stack.to_owned();
        self.call("creating a stack", |pool| async move {
            let c = pool.get().await?;
            let n = c
                .execute(
                    "INSERT INTO keel_stacks (name) VALUES ($1) ON CONFLICT DO NOTHING",
                    &[&stack],
                )
                .await?;
            Ok(n == 1)
        })
    }

    /// The selected stack.
    ///
    /// # Errors
    /// [`PersistError::Database`] when the database cannot be read.
    pub fn selected(&self) -> Result<Option<String>, PersistError> {
        self.call("reading the selected stack", |pool| async move {
            let c = pool.get().await?;
            let row = c
                .query_opt(
                    "SELECT value FROM keel_settings WHERE key = $1",
                    &[&SELECTED],
                )
                .await?;
            Ok(row.map(|r| r.get::<_, String>(0)).filter(|s| !s.is_empty()))
        })
    }

    /// Records the selected stack, or clears it.
    ///
    /// # Errors
    /// [`PersistError::Database`]; the previous selection then stands.
    pub fn select(&self, stack: Option<&str>) -> Result<(), PersistError> {
        let stack = stack.map(str::to_owned);
        self.call("selecting a stack", |pool| async move {
            let c = pool.get().await?;
            match stack {
                Some(s) => c
                    .execute(
                        "INSERT INTO keel_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        &[&SELECTED, &s],
                    )
                    .await?,
                None => {
                    c.execute("DELETE FROM keel_settings WHERE key = $1", &[&SELECTED])
                        .await?
                }
            };
            Ok(())
        })
    }

    /// Reads a stack without locking it (a missing stack is empty).
    ///
    /// # Errors
    /// [`BackendError`] for an unreachable database, an invalid base or a
    /// corrupt journal.
    pub fn load(&self, stack: &str) -> Result<Loaded, BackendError> {
        let (base, journal, first_seq) =
            self.rows(stack).map_err(|source| BackendError::Persist {
                stack: stack.to_owned(),
                source,
            })?;
        self.assemble(stack, base, journal, first_seq)
    }

    fn assemble(
        &self,
        stack: &str,
        base: Option<Vec<u8>>,
        journal: Vec<u8>,
        first_seq: Option<i64>,
    ) -> Result<Loaded, BackendError> {
        let paths = self.paths(stack);
        let base_missing = base.is_none();
        StoredStack {
            stack,
            base: base.map(StoredBase::Bytes),
            journal,
            base_label: &paths.base,
            journal_label: &paths.journal,
        }
        .assemble(
            self.passphrase.as_deref(),
            self.new_stack_salt.as_deref(),
            |_| {
                // A first operation journals onto no base from seq 1.
                if base_missing && first_seq.is_some_and(|s| s != 1) {
                    Err(BackendError::MissingBase {
                        stack: stack.to_owned(),
                        base: paths.base.clone(),
                        found: vec![paths.journal.clone()],
                    })
                } else {
                    Ok(())
                }
            },
        )
    }

    /// Takes a stack's lock for `command` (creating the stack).
    ///
    /// # Errors
    /// [`BackendError::Locked`] naming the holder; [`BackendError::Persist`].
    pub fn lock(&self, stack: &str, command: &str) -> Result<PgLock, BackendError> {
        let db = self.db().map_err(|source| BackendError::Persist {
            stack: stack.to_owned(),
            source,
        })?;
        PgLock::acquire(db, stack, &Holder::me(command))
    }

    /// Opens a stack for an operation: lock, read, and fold the journal
    /// into the base (one transaction).
    ///
    /// # Errors
    /// As [`super::backend::Backend::open`].
    pub fn open(&self, stack: &str, command: &str) -> Result<OpenStack, BackendError> {
        let persist = |source| BackendError::Persist {
            stack: stack.to_owned(),
            source,
        };
        let lock = self.lock(stack, command)?;
        let (base, journal, first_seq) = lock.read().map_err(persist)?;
        let has_journal = !journal.is_empty();
        let mut loaded = self.assemble(stack, base, journal, first_seq)?;
        loaded
            .check_secrets()
            .map_err(|source| BackendError::Secrets {
                stack: stack.to_owned(),
                source,
            })?;
        let counters = Arc::new(IoCounters::default());
        let new_provider = match loaded.crypter.manager() {
            Some(m) if loaded.deployment.secrets_providers.ty.is_empty() => {
                loaded.deployment.secrets_providers.ty = m.provider_type().to_owned();
                loaded.deployment.secrets_providers.state = m.state_json();
                true
            }
            _ => false,
        };
        if loaded.replayed > 0 || has_journal || new_provider {
            let bytes =
                base_bytes(&loaded.deployment, loaded.seq, 0, &loaded.crypter).map_err(persist)?;
            counters.wrote(bytes.len());
            counters.synced();
            lock.compact(bytes, Vec::new()).map_err(persist)?;
        }
        Ok(OpenStack::pg(
            stack,
            self.paths(stack),
            loaded,
            counters,
            lock,
        ))
    }

    /// Writes `d` as the stack's state (a new base, an empty journal) under
    /// `lock`; the replaced base is kept as the backup.
    ///
    /// # Errors
    /// [`PersistError`].
    pub fn write_base(
        &self,
        lock: &PgLock,
        d: &Deployment,
        seq: u64,
        crypter: &Crypter,
    ) -> Result<(), PersistError> {
        let bytes = base_bytes(d, seq, 0, crypter)?;
        lock.compact(bytes, Vec::new())
    }

    /// Moves a stack (base, journal, history) to `keel_backups` as
    /// `<stack>.<unix seconds>[.<n>]`, in one transaction, and returns a
    /// label of where it went.
    ///
    /// # Errors
    /// [`PersistError::Database`]; the stack is then where it was.
    pub fn move_to_backups(&self, stack: &str) -> Result<PathBuf, PersistError> {
        let name = stack.to_owned();
        let label = self.label();
        let to = self.call("moving a stack to the backups", move |pool| async move {
            let mut c = pool.get().await?;
            let tx = c.transaction().await?;
            let to = backup_stack(&tx, &name, None).await?;
            tx.commit().await?;
            Ok(to)
        })?;
        Ok(PathBuf::from(format!("{label}/backups/{to}")))
    }

    /// Renames stack `old` to `new` in one transaction: `new` gets `base`
    /// (the renamed state, as [`base_bytes`] encodes it) and the history,
    /// `old` moves to the backups (as [`Self::move_to_backups`]), and the
    /// selection follows. `Ok(None)` when `new` has a state (nothing
    /// changes). The caller holds both stacks' locks.
    ///
    /// # Errors
    /// [`PersistError::Database`]; nothing has changed then.
    pub fn rename(
        &self,
        old: &str,
        new: &str,
        base: Vec<u8>,
    ) -> Result<Option<PathBuf>, PersistError> {
        let (old, new) = (old.to_owned(), new.to_owned());
        let label = self.label();
        let to = self.call("renaming a stack", move |pool| async move {
            let mut c = pool.get().await?;
            let tx = c.transaction().await?;
            // `new`'s row may exist already, made by its lock (which the
            // caller holds); a stack with state is taken.
            tx.execute(
                "INSERT INTO keel_stacks (name) VALUES ($1) ON CONFLICT DO NOTHING",
                &[&new],
            )
            .await?;
            let taken = tx
                .query_opt(
                    "SELECT 1 FROM keel_checkpoints WHERE stack = $1 \
                     UNION ALL SELECT 1 FROM keel_journal WHERE stack = $1 LIMIT 1",
                    &[&new],
                )
                .await?
                .is_some();
            if taken {
                return Ok(None);
            }
            tx.execute(
                "INSERT INTO keel_checkpoints (stack, base) VALUES ($1, $2)",
                &[&new, &base],
            )
            .await?;
            let to = backup_stack(&tx, &old, Some(&new)).await?;
            tx.execute(
                "UPDATE keel_settings SET value = $2 WHERE key = $3 AND value = $1",
                &[&old, &new, &SELECTED],
            )
            .await?;
            tx.commit().await?;
            Ok(Some(to))
        })?;
        Ok(to.map(|to| PathBuf::from(format!("{label}/backups/{to}"))))
    }

    /// Keeps a stack configuration file's bytes with the backup `kept`
    /// (a label [`Self::move_to_backups`] returned).
    ///
    /// # Errors
    /// [`PersistError::Database`]; nothing is kept then.
    pub fn keep_config(&self, kept: &std::path::Path, config: Vec<u8>) -> Result<(), PersistError> {
        let name = kept
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.call(
            "keeping a config file with the backup",
            move |pool| async move {
                let c = pool.get().await?;
                let n = c
                    .execute(
                        "UPDATE keel_backups SET config = $2 WHERE name = $1",
                        &[&name, &config],
                    )
                    .await?;
                if n == 1 {
                    Ok(())
                } else {
                    Err(DbError(format!("no backup named `{name}`")))
                }
            },
        )
    }

    /// Removes a stack that has no base (made by a command that then
    /// failed before writing it); a stack with a base stays.
    ///
    /// # Errors
    /// [`PersistError::Database`].
    pub fn remove_if_empty(&self, stack: &str) -> Result<(), PersistError> {
        let name = stack.to_owned();
        self.call("removing an empty stack", move |pool| async move {
            let c = pool.get().await?;
            c.execute(
                "DELETE FROM keel_stacks WHERE name = $1 \
                 AND NOT EXISTS (SELECT 1 FROM keel_checkpoints WHERE stack = $1) \
                 AND NOT EXISTS (SELECT 1 FROM keel_journal WHERE stack = $1)",
                &[&name],
            )
            .await?;
            Ok(())
        })
    }

    /// A stack's rows as stored (no replay, no verification), read in one
    /// snapshot: what `state repair` reads an invalid base from.
    ///
    /// # Errors
    /// [`PersistError::Database`].
    pub fn rows(&self, stack: &str) -> Result<StoredRows, PersistError> {
        let name = stack.to_owned();
        self.call("reading a stack", |pool| async move {
            let mut c = pool.get().await?;
            let tx = c
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await?;
            let r = read_stack(&*tx, &name).await?;
            tx.commit().await?;
            Ok(r)
        })
    }

    /// Appends a record to the stack's history.
    ///
    /// # Errors
    /// [`PersistError::Database`] (the stack must exist).
    pub fn append_history(&self, stack: &str, record: &HistoryRecord) -> Result<(), PersistError> {
        let name = stack.to_owned();
        let line = serde_json::to_string(record).unwrap_or_default();
        self.call("writing the history", |pool| async move {
            let c = pool.get().await?;
            c.execute(
                "INSERT INTO keel_history (stack, line) VALUES ($1, $2)",
                &[&name, &line],
            )
            .await?;
            Ok(())
        })
    }

    /// The stack's history, oldest first.
    ///
    /// # Errors
    /// [`PersistError::Database`] when the database cannot be read.
    pub fn history(&self, stack: &str) -> Result<History, PersistError> {
        let name = stack.to_owned();
        let lines: Vec<String> = self.call("reading the history", |pool| async move {
            let c = pool.get().await?;
            let rows = c
                .query(
                    "SELECT line FROM keel_history WHERE stack = $1 ORDER BY id",
                    &[&name],
                )
                .await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })?;
        let mut history = History::default();
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str::<HistoryRecord>(line) {
                Ok(r) => history.records.push(r),
                Err(e) => history.warnings.push(format!(
                    "{}: record {} is not a history record ({e}) and was ignored",
                    self.paths(stack).dir.display(),
                    i + 1
                )),
            }
        }
        Ok(history)
    }

    /// The holder of the stack's lock, if an operation holds it.
    ///
    /// # Errors
    /// [`PersistError::Database`] when the database cannot be read.
    pub fn holder(&self, stack: &str) -> Result<Option<Holder>, PersistError> {
        let db = self.db()?;
        lock::holder(&db, stack).map_err(|e| persist_err(db.label.clone(), e))
    }

    /// The stack's cancel request, if any.
    ///
    /// # Errors
    /// [`PersistError::Database`] when the database cannot be read.
    pub fn cancel_request(&self, stack: &str) -> Result<Option<Vec<u8>>, PersistError> {
        let name = stack.to_owned();
        self.call("reading a cancel request", |pool| async move {
            let c = pool.get().await?;
            let row = c
                .query_opt(
                    "SELECT request FROM keel_cancel_requests WHERE stack = $1",
                    &[&name],
                )
                .await?;
            Ok(row.map(|r| r.get::<_, String>(0).into_bytes()))
        })
    }

    /// Sets (`Some`) or removes the stack's cancel request.
    ///
    /// # Errors
    /// [`PersistError::Database`] when the database cannot be written.
    pub fn set_cancel_request(
        &self,
        stack: &str,
        request: Option<&[u8]>,
    ) -> Result<(), PersistError> {
        let name = stack.to_owned();
        let request = request.map(|r| String::from_utf8_lossy(r).into_owned());
        self.call("writing a cancel request", |pool| async move {
            let c = pool.get().await?;
            match request {
                Some(r) => c
                    .execute(
                        "INSERT INTO keel_cancel_requests (stack, request) VALUES ($1, $2) ON CONFLICT (stack) DO UPDATE SET request = EXCLUDED.request",
                        &[&name, &r],
                    )
                    .await?,
                None => {
                    c.execute("DELETE FROM keel_cancel_requests WHERE stack = $1", &[&name])
                        .await?
                }
            };
            Ok(())
        })
    }

    /// The simulated cloud's shared log in this database
    /// (`keel_sim_cloud_log`), for [`crate::provider::SimCloud::open_log`].
    ///
    /// # Errors
    /// [`PersistError::Database`] when the database cannot be reached.
    #[cfg(feature = "sim")]
    pub fn cloud_log(&self) -> Result<Arc<dyn crate::provider::sim::CloudLog>, PersistError> {
        Ok(Arc::new(cloud::PgCloudLog::new(self.db()?)))
    }
}

/// Moves stack `name` (base, journal, history) into `keel_backups` within
/// `tx` and returns the backup's name, `<stack>.<unix seconds>[.<n>]`. With
/// `history_to`, the stack's history rows move to that stack (the backup
/// keeps a copy).
async fn backup_stack(
    tx: &tokio_postgres::Transaction<'_>,
    name: &str,
    history_to: Option<&str>,
) -> Result<String, DbError> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (base, journal, _) = read_stack(tx, name).await?;
    let rows = tx
        .query(
            "SELECT line FROM keel_history WHERE stack = $1 ORDER BY id",
            &[&name],
        )
        .await?;
    let history: String = rows
        .iter()
        .map(|r| format!("{}\n", r.get::<_, String>(0)))
        .collect();
    let mut to = format!("{name}.{secs}");
    let mut n = 1;
    while tx
        .query_opt("SELECT 1 FROM keel_backups WHERE name = $1", &[&to])
        .await?
        .is_some()
    {
        to = format!("{name}.{secs}.{n}");
        n += 1;
    }
    tx.execute(
        "INSERT INTO keel_backups (name, stack, base, journal, history) VALUES ($1, $2, $3, $4, $5)",
        &[&to, &name, &base, &journal, &history],
    )
    .await?;
    if let Some(new) = history_to {
        tx.execute(
            "UPDATE keel_history SET stack = $2 WHERE stack = $1",
            &[&name, &new],
        )
        .await?;
    }
    tx.execute("DELETE FROM keel_stacks WHERE name = $1", &[&name])
        .await?;
    Ok(to)
}

/// A stack's rows: its base, its journal's records (concatenated, in
/// order) and the first record's sequence number.
pub type StoredRows = (Option<Vec<u8>>, Vec<u8>, Option<i64>);

/// A stack's rows, read.
pub(crate) async fn read_stack(
    c: &impl tokio_postgres::GenericClient,
    stack: &str,
) -> Result<StoredRows, DbError> {
    let base = c
        .query_opt(
            "SELECT base FROM keel_checkpoints WHERE stack = $1",
            &[&stack],
        )
        .await?
        .map(|r| r.get::<_, Vec<u8>>(0));
    let rows = c
        .query(
            "SELECT seq, record FROM keel_journal WHERE stack = $1 ORDER BY seq",
            &[&stack],
        )
        .await?;
    let first = rows.first().map(|r| r.get::<_, i64>(0));
    let mut journal = Vec::new();
    for r in &rows {
        journal.extend_from_slice(r.get::<_, &[u8]>(1));
    }
    Ok((base, journal, first))
}

/// A lock error for a held advisory lock (the holder's row, if any).
pub(crate) fn held(holder: Option<Holder>) -> LockError {
    match holder {
        Some(h) => LockError::Held(h),
        None => LockError::HeldUnknown(
            "an operation holds the stack's lock in the database but its holder row is missing"
                .into(),
        ),
    }
}

impl crate::provider::builtins::StackOutputs for PgBackend {
    fn stack_outputs(&self, stack: &str) -> Result<crate::model::PropertyMap, String> {
        let name = stack.rsplit('/').next().unwrap_or(stack);
        if !self.exists(name).map_err(|e| e.to_string())? {
            return Err(format!(
                "the stack `{name}` does not exist in the backend {}",
                self.label()
            ));
        }
        let loaded = self.load(name).map_err(|e| e.to_string())?;
        let outputs = loaded
            .deployment
            .stack_resource()
            .map(|r| r.outputs.clone())
            .unwrap_or_default();
        if outputs.values().any(super::backend::holds_ciphertext) {
            return Err(format!(
                "the outputs of stack `{name}` hold secrets this process cannot decrypt; set KEEL_CONFIG_PASSPHRASE to its passphrase"
            ));
        }
        Ok(outputs)
    }
}
