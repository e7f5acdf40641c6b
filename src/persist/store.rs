//! The store seam: where the CLI's stacks live. A `--backend` that is a
//! `postgres://` (or `postgresql://`) URL is the PostgreSQL backend
//! ([`super::pg`], with the `postgres` feature); anything else is a
//! directory ([`Backend`]). Both keep the same bytes (base checkpoint,
//! journal records, history records) and share replay, recovery and
//! secrets; [`Store`] gives the commands one set of operations over both.

use std::path::{Path, PathBuf};

use super::backend::{Backend, BackendError, Loaded, OpenStack, StackPaths};
use super::fs::{Holder, StackLock};
use super::history::{History, HistoryRecord};
use super::PersistError;

/// A backend: a directory or a database.
#[derive(Debug, Clone)]
pub enum Store {
    /// A directory of stacks.
    File(Backend),
    /// A PostgreSQL database.
    #[cfg(feature = "postgres")]
    Pg(super::pg::PgBackend),
}

/// A stack lock taken by a command that is not an engine operation.
#[derive(Debug)]
pub enum StoreLock {
    /// A lock file (and the stack's files).
    File(StackLock, StackPaths),
    /// A database's lock.
    #[cfg(feature = "postgres")]
    Pg(super::pg::lock::PgLock),
}

/// True when `location` names a database rather than a directory.
pub fn is_database(location: &Path) -> bool {
    location
        .to_str()
        .is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

impl Store {
    /// The backend `location` names (a database is connected on first
    /// use).
    pub fn new(location: &Path) -> Self {
        #[cfg(feature = "postgres")]
        if let Some(url) = location.to_str().filter(|_| is_database(location)) {
            return Self::Pg(super::pg::PgBackend::new(url));
        }
        Self::File(Backend::new(location))
    }

    /// See [`Backend::with_passphrase`].
    pub fn with_passphrase(self, passphrase: Option<String>) -> Self {
        match self {
            Self::File(b) => Self::File(b.with_passphrase(passphrase)),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => Self::Pg(b.with_passphrase(passphrase)),
        }
    }

    /// See [`Backend::with_new_stack_salt`].
    pub fn with_new_stack_salt(self, salt: Option<String>) -> Self {
        match self {
            Self::File(b) => Self::File(b.with_new_stack_salt(salt)),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => Self::Pg(b.with_new_stack_salt(salt)),
        }
    }

    /// The file backend, when this is one.
    pub fn file(&self) -> Option<&Backend> {
        match self {
            Self::File(b) => Some(b),
            #[cfg(feature = "postgres")]
            Self::Pg(_) => None,
        }
    }

    /// Where the stacks are, for messages (a database without password).
    pub fn location(&self) -> PathBuf {
        match self {
            Self::File(b) => b.root().to_owned(),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => PathBuf::from(b.label()),
        }
    }

    /// Names of a stack's state (files, or labels of rows), for messages.
    pub fn paths(&self, stack: &str) -> StackPaths {
        match self {
            Self::File(b) => b.paths(stack),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.paths(stack),
        }
    }

    /// The stacks, sorted.
    ///
    /// # Errors
    /// [`PersistError`] when the backend cannot be read.
    pub fn stacks(&self) -> Result<Vec<String>, PersistError> {
        match self {
            Self::File(b) => b.stacks(),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.stacks(),
        }
    }

    /// True when the stack exists.
    ///
    /// # Errors
    /// [`PersistError`] when the backend cannot be read.
    pub fn exists(&self, stack: &str) -> Result<bool, PersistError> {
        match self {
            Self::File(b) => Ok(b.paths(stack).dir.is_dir()),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.exists(stack),
        }
    }

    /// The selected stack.
    ///
    /// # Errors
    /// [`PersistError`] when the backend cannot be read.
    pub fn selected(&self) -> Result<Option<String>, PersistError> {
        match self {
            Self::File(b) => b.selected(),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.selected(),
        }
    }

    /// Records (or clears) the selected stack.
    ///
    /// # Errors
    /// [`PersistError`]; the previous selection then stands.
    pub fn select(&self, stack: Option<&str>) -> Result<(), PersistError> {
        match self {
            Self::File(b) => b.select(stack),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.select(stack),
        }
    }

    /// Reads a stack without locking it.
    ///
    /// # Errors
    /// [`BackendError`].
    pub fn load(&self, stack: &str) -> Result<Loaded, BackendError> {
        match self {
            Self::File(b) => b.load(stack),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.load(stack),
        }
    }

    /// Opens a stack for an operation.
    ///
    /// # Errors
    /// [`BackendError`]; `Locked` at once when another operation holds it.
    pub fn open(&self, stack: &str, command: &str) -> Result<OpenStack, BackendError> {
        match self {
            Self::File(b) => b.open(stack, command),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.open(stack, command),
        }
    }

    /// Takes a stack's lock (creating the stack's place) without reading it.
    ///
    /// # Errors
    /// [`BackendError::Locked`] naming the holder; others when the backend
    /// cannot be written.
    pub fn lock(&self, stack: &str, command: &str) -> Result<StoreLock, BackendError> {
        match self {
            Self::File(b) => {
                let paths = b.paths(stack);
                std::fs::create_dir_all(&paths.dir).map_err(|source| BackendError::Persist {
                    stack: stack.to_owned(),
                    source: PersistError::Io {
                        path: paths.dir.clone(),
                        source,
                    },
                })?;
                let lock = StackLock::acquire(&paths.lock, &Holder::me(command))?;
                Ok(StoreLock::File(lock, paths))
            }
            #[cfg(feature = "postgres")]
            Self::Pg(b) => Ok(StoreLock::Pg(b.lock(stack, command)?)),
        }
    }

    /// Moves a stack to the backend's backups; returns where it went.
    ///
    /// # Errors
    /// [`PersistError`]; the stack is then where it was.
    pub fn move_to_backups(&self, stack: &str) -> Result<PathBuf, PersistError> {
        match self {
            Self::File(b) => b.move_to_backups(stack),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.move_to_backups(stack),
        }
    }

    /// Appends a record to the stack's history.
    ///
    /// # Errors
    /// [`PersistError`].
    pub fn append_history(&self, stack: &str, record: &HistoryRecord) -> Result<(), PersistError> {
        match self {
            Self::File(b) => b.append_history(stack, record),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.append_history(stack, record),
        }
    }

    /// The stack's history.
    ///
    /// # Errors
    /// [`PersistError`].
    pub fn history(&self, stack: &str) -> Result<History, PersistError> {
        match self {
            Self::File(b) => b.history(stack),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.history(stack),
        }
    }

    /// The stack outputs reader of stack references.
    pub fn stack_outputs(&self) -> std::sync::Arc<dyn crate::provider::builtins::StackOutputs> {
        match self {
            Self::File(b) => std::sync::Arc::new(b.clone()),
            #[cfg(feature = "postgres")]
            Self::Pg(b) => std::sync::Arc::new(b.clone()),
        }
    }
}

impl StoreLock {
    /// True when the stack's journal holds records.
    ///
    /// # Errors
    /// [`PersistError`] when the journal cannot be read.
    pub fn has_journal(&self) -> Result<bool, PersistError> {
        match self {
            Self::File(_, paths) => {
                Ok(std::fs::metadata(&paths.journal).is_ok_and(|m| m.len() > 0))
            }
            #[cfg(feature = "postgres")]
            Self::Pg(lock) => Ok(!lock.read()?.1.is_empty()),
        }
    }

    /// Writes `d` as the stack's state under this lock: a new base with
    /// the watermark `seq`, secrets encrypted by `crypter`, the replaced
    /// base kept as the backup; the journal emptied.
    ///
    /// # Errors
    /// [`PersistError`]; the previous state then stands.
    pub fn write_state(
        &self,
        d: &crate::model::Deployment,
        seq: u64,
        crypter: &crate::secrets::Crypter,
    ) -> Result<(), PersistError> {
        match self {
            Self::File(_, paths) => {
                let counters = super::fs::IoCounters::default();
                super::backend::write_base_with(&paths.base, d, seq, 0, &counters, crypter)?;
                if paths.journal.exists() {
                    super::fs::atomic_write(&paths.journal, &[], false, &counters).map_err(
                        |source| PersistError::Io {
                            path: paths.journal.clone(),
                            source,
                        },
                    )?;
                }
                Ok(())
            }
            #[cfg(feature = "postgres")]
            Self::Pg(lock) => {
                lock.compact(super::backend::base_bytes(d, seq, 0, crypter)?, Vec::new())
            }
        }
    }
}

impl Store {
    /// Makes a new empty stack (an empty base) under its lock; false when
    /// it already exists.
    ///
    /// # Errors
    /// [`BackendError`].
    pub fn init_stack(&self, stack: &str, command: &str) -> Result<bool, BackendError> {
        let persist = |source| BackendError::Persist {
            stack: stack.to_owned(),
            source,
        };
        match self {
            Self::File(b) => {
                let paths = b.paths(stack);
                let io = |path: &Path| {
                    let path = path.to_owned();
                    move |source| PersistError::Io { path, source }
                };
                let root = b.root().join("stacks");
                std::fs::create_dir_all(&root)
                    .map_err(io(&root))
                    .map_err(persist)?;
                // `create_dir` (not `_all`) is the atomic existence check.
                match std::fs::create_dir(&paths.dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
                    Err(e) => return Err(persist(io(&paths.dir)(e))),
                }
            }
            #[cfg(feature = "postgres")]
            Self::Pg(b) => {
                if !b.create(stack).map_err(persist)? {
                    return Ok(false);
                }
            }
        }
        let lock = self.lock(stack, command)?;
        lock.write_state(
            &crate::model::Deployment::default(),
            0,
            &crate::secrets::Crypter::default(),
        )
        .map_err(persist)?;
        Ok(true)
    }

    /// The holder of the stack's lock when an operation holds it.
    ///
    /// # Errors
    /// [`BackendError`] when the lock cannot be probed.
    pub fn holder(&self, stack: &str) -> Result<Option<Holder>, BackendError> {
        match self {
            Self::File(b) => {
                let path = b.paths(stack).lock;
                let text = match std::fs::read_to_string(&path) {
                    Ok(t) => t,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(source) => {
                        return Err(BackendError::Persist {
                            stack: stack.to_owned(),
                            source: PersistError::Io { path, source },
                        })
                    }
                };
                // An empty file has no holder (a holder writes itself there
                // as soon as it has the lock, and clears it when it lets go);
                // content is probed: a crashed holder's is stale.
                if text.trim().is_empty() {
                    return Ok(None);
                }
                match StackLock::acquire(&path, &Holder::me("keel (checking the lock)")) {
                    Ok(_free) => Ok(None),
                    Err(super::fs::LockError::Held(h)) => Ok(Some(h)),
                    Err(super::fs::LockError::HeldUnknown(_)) => {
                        Ok(serde_json::from_str(&text).ok())
                    }
                    Err(e) => Err(BackendError::Locked(e)),
                }
            }
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.holder(stack).map_err(|source| BackendError::Persist {
                stack: stack.to_owned(),
                source,
            }),
        }
    }
}

/// The file of a stack's cancel request (file backend).
pub const CANCEL_FILE: &str = "cancel-request";

impl Store {
    /// The stack's cancel request (`keel cancel`), if any.
    ///
    /// # Errors
    /// [`PersistError`] when it cannot be read.
    pub fn cancel_request(&self, stack: &str) -> Result<Option<Vec<u8>>, PersistError> {
        match self {
            Self::File(b) => {
                let path = b.paths(stack).dir.join(CANCEL_FILE);
                match std::fs::read(&path) {
                    Ok(bytes) => Ok(Some(bytes)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(source) => Err(PersistError::Io { path, source }),
                }
            }
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.cancel_request(stack),
        }
    }

    /// Writes (`Some`, atomically) or removes the stack's cancel request.
    ///
    /// # Errors
    /// [`PersistError`] when it cannot be written.
    pub fn set_cancel_request(
        &self,
        stack: &str,
        request: Option<&[u8]>,
    ) -> Result<(), PersistError> {
        match self {
            Self::File(b) => {
                let path = b.paths(stack).dir.join(CANCEL_FILE);
                let r = match request {
                    Some(bytes) => super::fs::atomic_write(
                        &path,
                        bytes,
                        false,
                        &super::fs::IoCounters::default(),
                    ),
                    None => match std::fs::remove_file(&path) {
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                        other => other,
                    },
                };
                r.map_err(|source| PersistError::Io { path, source })
            }
            #[cfg(feature = "postgres")]
            Self::Pg(b) => b.set_cancel_request(stack, request),
        }
    }
}
