//! The file backend: a directory of stacks (default `./.keel`). A stack
//! lives in `stacks/<name>/`: the base checkpoint `checkpoint.json` (the
//! stack export form, plus the journal watermark `keelJournalSeq`), its
//! backup `checkpoint.json.bak`, the journal `journal.log`, `lock`, and
//! the operation history `history.jsonl` ([`super::history`]).
//!
//! Opening a stack for an operation takes the lock (held until the
//! operation ends; the kernel releases it if the holder dies), replays the
//! journal onto the base (cutting a torn tail with a warning, refusing
//! corruption with its offset), and, when the journal held entries,
//! compacts them into a new base so the operation starts from a clean
//! journal. Operations begun and never ended become `pending_operations`.
//!
//! The backend also records its selected stack (`selected-stack`, written
//! by `keel stack select`), and keeps removed or renamed stacks' directories
//! under `backups/` (moved there whole, never deleted).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint_file::CheckpointPersister;
use super::fs::{self, atomic_write, atomic_write_with, Holder, IoCounters, LockError, StackLock};
use super::journal::{self, JournalError};
use super::journal_file::{JournalOptions, JournalPersister};
use super::{PersistError, Persister, SnapshotBuilder};
use crate::model::checkpoint::CheckpointError;
use crate::model::property::refusing_plaintexts;
use crate::model::{CheckpointFile, Deployment};
use crate::secrets::{Crypter, SecretsError, PASSPHRASE_TYPE};

/// The key of the base checkpoint holding the journal watermark.
pub const WATERMARK_KEY: &str = "keelJournalSeq";
/// The key of the base checkpoint holding how many leading resources the
/// operation in flight wrote (non-zero only after a mid-operation
/// compaction; replay keeps later writes after them).
pub const SPLIT_KEY: &str = "keelJournalSplit";

/// The key of the base checkpoint holding keel's state format.
pub const FORMAT_KEY: &str = "keelFormat";
/// The state format this keel writes and reads: 2 adds entry categories
/// (`keelCategory`, actions) and declaration addresses (`keelAddress`) to
/// the format keel wrote before it numbered its formats (1: a base with
/// `keelJournalSeq` and no `keelFormat`).
pub const STATE_FORMAT: u64 = 2;

/// The file of the backend naming its selected stack.
pub const SELECTED_FILE: &str = "selected-stack";
/// The directory of the backend keeping removed stacks' directories.
pub const BACKUPS_DIR: &str = "backups";

/// Which persister an operation uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PersistenceKind {
    /// Append-only journal with group commit (default).
    #[default]
    Journal,
    /// Atomic rewrite of the whole checkpoint per mutation.
    Checkpoint,
}

impl std::str::FromStr for PersistenceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "journal" => Ok(Self::Journal),
            "checkpoint" => Ok(Self::Checkpoint),
            other => Err(format!(
                "unknown persistence `{other}` (journal or checkpoint)"
            )),
        }
    }
}

/// Why a stack could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Another operation holds the stack.
    #[error(transparent)]
    Locked(#[from] LockError),
    /// The base checkpoint is unreadable or invalid (or the state the
    /// journal replays onto it is).
    #[error("stack `{stack}`: {}: {source}", .path.display())]
    Checkpoint {
        /// The stack.
        stack: String,
        /// The file read.
        path: PathBuf,
        /// Why (boxed: the error stays small).
        source: Box<CheckpointError>,
    },
    /// The journal is corrupt or does not replay.
    #[error("stack `{stack}`: {}: {source}", .path.display())]
    Journal {
        /// The stack.
        stack: String,
        /// The journal.
        path: PathBuf,
        /// Why.
        source: JournalError,
    },
    /// The base checkpoint was written by a keel with an older state
    /// format: it is refused, never converted silently.
    #[error("stack `{stack}`: {} was written by an older keel (state format {found}; this keel reads format {STATE_FORMAT}). keel does not convert state silently, and nothing was changed. To adopt the stack as it is, import its checkpoint (verified first): `keel stack import --stack {stack} --file {}`; an operation the older keel left unfinished must be finished with it first. Or recreate the stack", .path.display(), .path.display())]
    OlderFormat {
        /// The stack.
        stack: String,
        /// The base checkpoint.
        path: PathBuf,
        /// The format found.
        found: u64,
    },
    /// The base checkpoint has a newer state format than this keel.
    #[error("stack `{stack}`: {} has state format {found}, newer than this keel reads ({STATE_FORMAT}): use a newer keel. Nothing was changed", .path.display())]
    NewerFormat {
        /// The stack.
        stack: String,
        /// The base checkpoint.
        path: PathBuf,
        /// The format found.
        found: u64,
    },
    /// The base checkpoint is gone while the files that follow it are
    /// there: keel never removes it, so the stack is not empty.
    #[error("stack `{stack}`: the base checkpoint {} is missing, but {} {} there. keel never removes it, so it was deleted or moved, and reading the stack as empty would create every resource again. Nothing was changed. Put the checkpoint back (`{}` holds the state before the last write, when present), or remove the stack directory {} if the stack is really gone", .base.display(), list(.found), if .found.len() == 1 { "is" } else { "are" }, fs::backup_path(.base).display(), .base.parent().unwrap_or(.base).display())]
    MissingBase {
        /// The stack.
        stack: String,
        /// The missing base checkpoint.
        base: PathBuf,
        /// The stack's files that are there (backup, journal).
        found: Vec<PathBuf>,
    },
    /// The stack's secrets cannot be decrypted (no or wrong passphrase,
    /// a provider keel does not implement).
    #[error("stack `{stack}`: {source}")]
    Secrets {
        /// The stack.
        stack: String,
        /// Why.
        source: SecretsError,
    },
    /// A file could not be read or written.
    #[error("stack `{stack}`: {source}")]
    Persist {
        /// The stack.
        stack: String,
        /// Why.
        source: PersistError,
    },
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" and ")
}

/// The files of one stack.
#[derive(Debug, Clone)]
pub struct StackPaths {
    /// The stack's directory.
    pub dir: PathBuf,
    /// The base checkpoint.
    pub base: PathBuf,
    /// The journal.
    pub journal: PathBuf,
    /// The lock file.
    pub lock: PathBuf,
}

impl StackPaths {
    fn new(dir: PathBuf) -> Self {
        Self {
            base: dir.join("checkpoint.json"),
            journal: dir.join("journal.log"),
            lock: dir.join("lock"),
            dir,
        }
    }
}

/// Stack references read the outputs of the backend's other stacks:
/// `name`, or a fully qualified `<organization>/<project>/<name>` (only the
/// stack's name counts: keel's stacks are not scoped by project).
impl crate::provider::builtins::StackOutputs for Backend {
    fn stack_outputs(&self, stack: &str) -> Result<crate::model::PropertyMap, String> {
        let name = stack.rsplit('/').next().unwrap_or(stack);
        let valid = !name.is_empty()
            && name != "."
            && name != ".."
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(format!(
                "`{stack}` is not a stack name (letters, digits, `-`, `_` and `.`, optionally after `<organization>/<project>/`)"
            ));
        }
        if !self.paths(name).base.is_file() {
            return Err(format!(
                "the stack `{name}` does not exist in the backend {}",
                self.root.display()
            ));
        }
        let loaded = self.load(name).map_err(|e| e.to_string())?;
        let outputs = loaded
            .deployment
            .stack_resource()
            .map(|r| r.outputs.clone())
            .unwrap_or_default();
        if outputs.values().any(holds_ciphertext) {
            return Err(format!(
                "the outputs of stack `{name}` hold secrets this process cannot decrypt; set KEEL_CONFIG_PASSPHRASE to its passphrase"
            ));
        }
        Ok(outputs)
    }
}

/// True when a value holds a secret still encrypted.
pub(crate) fn holds_ciphertext(v: &crate::model::PropertyValue) -> bool {
    use crate::model::property::Secret;
    use crate::model::PropertyValue as V;
    match v {
        V::Secret(Secret::Ciphertext(_)) => true,
        V::Secret(Secret::Plaintext(p)) => holds_ciphertext(p.value()),
        V::Array(a) => a.iter().any(holds_ciphertext),
        V::Object(m) => m.values().any(holds_ciphertext),
        V::Output(o) => o.value.as_deref().is_some_and(holds_ciphertext),
        _ => false,
    }
}

/// Writes `d` as the stack's base checkpoint (atomically, keeping a
/// backup), recording that it includes the journal up to `seq`.
///
/// # Errors
/// [`PersistError::Io`]; the previous base is then intact.
/// [`PersistError::Secrets`] when `d` holds a plaintext secret (this
/// writer has no secrets manager: see [`write_base_with`]).
pub fn write_base(
    path: &Path,
    d: &Deployment,
    seq: u64,
    split: usize,
    counters: &IoCounters,
) -> Result<(), PersistError> {
    write_base_with(path, d, seq, split, counters, &Crypter::default())
}

/// [`write_base`] encrypting every plaintext secret with `crypter` first
/// (ciphertexts are written as held; no plaintext secret is ever written).
///
/// # Errors
/// [`PersistError::Io`]; [`PersistError::Secrets`] when a secret cannot be
/// encrypted, or `crypter` has no manager for one (nothing is written
/// then).
pub fn write_base_with(
    path: &Path,
    d: &Deployment,
    seq: u64,
    split: usize,
    counters: &IoCounters,
    crypter: &Crypter,
) -> Result<(), PersistError> {
    let io = |source| PersistError::Io {
        path: path.to_owned(),
        source,
    };
    if crypter.changes(d) {
        let bytes = base_bytes(d, seq, split, crypter)?;
        return atomic_write(path, &bytes, true, counters).map_err(io);
    }
    // Streamed from the borrowed states: the same bytes as `base_bytes`,
    // without holding the whole encoding in memory. A plaintext secret
    // fails the encode before any of it is written, and the temporary file
    // goes.
    let extra = base_extra(seq, split);
    let mut refused = false;
    atomic_write_with(path, true, counters, |w| {
        refusing_plaintexts(|| super::encode::export_to_writer(d, &extra, w)).unwrap_or_else(|r| {
            refused = true;
            Err(std::io::Error::other(r))
        })
    })
    .map_err(|e| match refused {
        true => PersistError::Secrets(crypter.missing()),
        false => io(e),
    })
}

/// The top-level keys keel adds to a base checkpoint.
fn base_extra(seq: u64, split: usize) -> BTreeMap<String, serde_json::Value> {
    let mut extra = BTreeMap::new();
    extra.insert(FORMAT_KEY.to_owned(), STATE_FORMAT.into());
    extra.insert(WATERMARK_KEY.to_owned(), seq.into());
    if split > 0 {
        extra.insert(SPLIT_KEY.to_owned(), split.into());
    }
    extra
}

/// The bytes of a base checkpoint: `d` with its plaintext secrets
/// encrypted by `crypter`, the journal watermark `seq` and the `split`
/// (every backend stores exactly these bytes).
///
/// # Errors
/// [`PersistError::Secrets`] when a secret cannot be encrypted, or
/// `crypter` has no manager for one.
pub fn base_bytes(
    d: &Deployment,
    seq: u64,
    split: usize,
    crypter: &Crypter,
) -> Result<Vec<u8>, PersistError> {
    let extra = base_extra(seq, split);
    // Encoded from the borrowed states unless encryption changes them: a
    // copy of every state per compaction otherwise.
    let export = |d: &Deployment| {
        refusing_plaintexts(|| CheckpointFile::export_to_vec(d, &extra))
            .map_err(|_| PersistError::Secrets(crypter.missing()))
    };
    if crypter.changes(d) {
        let mut d = d.clone();
        crypter.encrypt_deployment(&mut d)?;
        return export(&d);
    }
    export(d)
}

/// Refuses a base checkpoint keel wrote in another state format. A base
/// with neither `keelFormat` nor `keelJournalSeq` was not written by keel
/// (a Pulumi checkpoint put in place): it is read as Pulumi's format.
fn check_format(
    stack: &str,
    path: &Path,
    extra: &BTreeMap<String, serde_json::Value>,
) -> Result<(), BackendError> {
    let found = match (extra.get(FORMAT_KEY), extra.contains_key(WATERMARK_KEY)) {
        (Some(v), _) => v.as_u64().unwrap_or(0),
        (None, true) => 1,
        (None, false) => return Ok(()),
    };
    let (stack, path) = (stack.to_owned(), path.to_owned());
    match found.cmp(&STATE_FORMAT) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => Err(BackendError::OlderFormat { stack, path, found }),
        std::cmp::Ordering::Greater => Err(BackendError::NewerFormat { stack, path, found }),
    }
}

/// A stack's state as read from disk.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The deployment: base plus replayed journal (with pending operations).
    pub deployment: Deployment,
    /// The last sequence number included.
    pub seq: u64,
    /// How many journal entries were replayed.
    pub replayed: usize,
    /// Warnings for the user (a torn tail cut off).
    pub warnings: Vec<String>,
    /// The stack's secrets, for this operation (its key derived once).
    pub crypter: Arc<Crypter>,
    /// The journal's valid length (a torn tail is cut here).
    valid_len: u64,
    journal_len: u64,
}

impl Loaded {
    /// Refuses a passphrase stack holding secrets when no passphrase was
    /// given (an operation would see ciphertexts where values belong).
    ///
    /// # Errors
    /// [`SecretsError::NoPassphrase`].
    pub fn check_secrets(&self) -> Result<(), SecretsError> {
        if self.crypter.manager().is_none()
            && self.deployment.secrets_providers.ty == PASSPHRASE_TYPE
            && Crypter::has_ciphertext(&self.deployment)
        {
            return Err(SecretsError::NoPassphrase);
        }
        Ok(())
    }
}

/// A stack's stored bytes, as any backend keeps them: the base checkpoint
/// (none for a new stack) and the journal's records, framed as in the
/// journal file, in order.
#[derive(Debug)]
pub struct StoredStack<'a> {
    /// The stack.
    pub stack: &'a str,
    /// The base checkpoint.
    pub base: Option<StoredBase>,
    /// The journal's records.
    pub journal: Vec<u8>,
    /// Where the base is, for errors.
    pub base_label: &'a Path,
    /// Where the journal is, for errors.
    pub journal_label: &'a Path,
}

/// A base checkpoint as a backend holds it.
#[derive(Debug)]
pub enum StoredBase {
    /// Its bytes (a database row).
    Bytes(Vec<u8>),
    /// The open file (a large one is decoded through small windows, never
    /// read whole into memory).
    File(fs::OpenFile),
}

impl StoredBase {
    /// The checkpoint, decoded and verified; `path` names it in errors.
    ///
    /// # Errors
    /// [`CheckpointError`] for an unreadable or invalid checkpoint.
    pub fn decode(&self, path: &Path) -> Result<CheckpointFile, CheckpointError> {
        match self {
            Self::Bytes(bytes) => CheckpointFile::from_slice_verified(bytes),
            Self::File(file) => {
                // A file that changed while it was read is read again whole.
                if let Some(decoded) = CheckpointFile::from_windows(file) {
                    if file.unchanged() {
                        decoded.verify()?;
                        return Ok(decoded);
                    }
                }
                let bytes = file.read_all().map_err(|source| CheckpointError::Io {
                    path: path.to_owned(),
                    source,
                })?;
                CheckpointFile::from_slice_verified(&bytes)
            }
        }
    }
}

impl StoredStack<'_> {
    /// Replays the journal onto the base, verifies the result and derives
    /// the stack's secrets (`passphrase`; a stack without a provider takes
    /// `new_stack_salt`). `missing_base` refuses a journal without its base.
    ///
    /// # Errors
    /// [`BackendError`] for an invalid base, a corrupt journal, secrets.
    pub fn assemble(
        self,
        passphrase: Option<&str>,
        new_stack_salt: Option<&str>,
        missing_base: impl FnOnce(&journal::Decoded) -> Result<(), BackendError>,
    ) -> Result<Loaded, BackendError> {
        let stack = self.stack;
        let (mut base, seq, split) = match &self.base {
            Some(base) => {
                let file =
                    base.decode(self.base_label)
                        .map_err(|source| BackendError::Checkpoint {
                            stack: stack.to_owned(),
                            path: self.base_label.to_owned(),
                            source: Box::new(source),
                        })?;
                check_format(stack, self.base_label, &file.extra)?;
                let seq = file
                    .extra
                    .get(WATERMARK_KEY)
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0);
                let split = file
                    .extra
                    .get(SPLIT_KEY)
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0);
                (file.into_deployment(), seq, split as usize)
            }
            None => (Deployment::default(), 0, 0),
        };
        let journal = &self.journal;
        let journal_err = |source| BackendError::Journal {
            stack: stack.to_owned(),
            path: self.journal_label.to_owned(),
            source,
        };
        let decoded = journal::decode(journal).map_err(journal_err)?;
        missing_base(&decoded)?;
        let mut warnings = Vec::new();
        if let Some(t) = &decoded.torn {
            warnings.push(format!("the journal of stack `{stack}` ended in a torn write: {t}; every whole record was kept"));
        }
        let replayed = decoded
            .records
            .iter()
            .filter(|r| r.entry.seq() > seq)
            .count();
        // Nothing to replay: the base, verified on read, is the state.
        let deployment = if replayed == 0 {
            base
        } else {
            let olds = SnapshotBuilder::share_resources(&mut base);
            let mut builder = SnapshotBuilder::new(base, olds).with_split(split);
            journal::replay(&mut builder, &decoded.records, seq).map_err(journal_err)?;
            let deployment = builder.snapshot();
            crate::model::integrity::verify(&deployment).map_err(|e| BackendError::Journal {
                stack: stack.to_owned(),
                path: self.journal_label.to_owned(),
                source: JournalError::Integrity(e.to_string()),
            })?;
            deployment
        };
        let last = decoded
            .records
            .last()
            .map_or(seq, |r| r.entry.seq().max(seq));
        let secrets = |source| BackendError::Secrets {
            stack: stack.to_owned(),
            source,
        };
        let mut deployment = deployment;
        let crypter = if passphrase.is_none() && deployment.secrets_providers.ty.is_empty() {
            Crypter::default()
        } else if let (true, Some(p), Some(salt)) = (
            deployment.secrets_providers.ty.is_empty(),
            passphrase,
            new_stack_salt,
        ) {
            Crypter::new(Arc::new(
                crate::secrets::PassphraseManager::from_salt_state(p, salt).map_err(secrets)?,
            ))
        } else {
            Crypter::for_stack(&deployment.secrets_providers, passphrase).map_err(secrets)?
        };
        if crypter.manager().is_some() {
            crypter
                .decrypt_deployment(&mut deployment)
                .map_err(secrets)?;
        }
        if !deployment.pending_operations.is_empty() {
            let urns: Vec<String> = deployment
                .pending_operations
                .iter()
                .map(|p| format!("{:?} {}", p.ty, p.resource.urn))
                .collect();
            warnings.push(format!(
                "stack `{stack}`: an interrupted operation left {}: the next `keel up` or `keel refresh` resolves them (adopting objects that were created, removing resources whose delete went through, clearing the rest)",
                crate::events::summarize("pending operation", &urns)
            ));
        }
        Ok(Loaded {
            deployment,
            seq: last,
            replayed,
            warnings,
            crypter: Arc::new(crypter),
            valid_len: decoded.valid_len,
            journal_len: journal.len() as u64,
        })
    }
}

/// A stack opened for an operation: locked, replayed and compacted.
#[derive(Debug)]
pub struct OpenStack {
    /// The stack's name.
    pub name: String,
    /// Its files.
    pub paths: StackPaths,
    /// The deployment to start from.
    pub deployment: Deployment,
    /// Warnings for the user (torn tail, pending operations).
    pub warnings: Vec<String>,
    /// The stack's secrets, for this operation.
    pub crypter: Arc<Crypter>,
    seq: u64,
    counters: Arc<IoCounters>,
    held: Held,
}

/// The lock an open stack holds: a lock file, or a database's lock.
#[derive(Debug)]
enum Held {
    File(StackLock),
    #[cfg(feature = "postgres")]
    Pg(super::pg::lock::PgLock),
}

impl OpenStack {
    /// A persister for this operation.
    ///
    /// # Errors
    /// [`PersistError::Io`] when the journal cannot be opened.
    pub fn persister(
        &self,
        kind: PersistenceKind,
        options: JournalOptions,
    ) -> Result<Box<dyn Persister>, PersistError> {
        #[cfg(feature = "postgres")]
        if let Held::Pg(lock) = &self.held {
            // Checkpoint persistence on the database: a compaction (a new
            // base) after every mutation.
            let options = match kind {
                PersistenceKind::Journal => options,
                PersistenceKind::Checkpoint => JournalOptions {
                    compact_bytes: 0,
                    ..options
                },
            };
            return Ok(Box::new(
                super::pg::journal::PgJournalPersister::open(
                    lock,
                    self.paths.clone(),
                    self.seq,
                    options,
                    self.counters.clone(),
                )?
                .with_crypter(self.crypter.clone()),
            ));
        }
        Ok(match kind {
            PersistenceKind::Journal => Box::new(
                JournalPersister::open(
                    self.paths.clone(),
                    self.seq,
                    options,
                    self.counters.clone(),
                )?
                .with_crypter(self.crypter.clone()),
            ),
            PersistenceKind::Checkpoint => Box::new(
                CheckpointPersister::new(self.paths.clone(), self.seq, self.counters.clone())
                    .with_crypter(self.crypter.clone()),
            ),
        })
    }

    /// The lock file held for this operation (none on a database).
    pub fn lock(&self) -> Option<&StackLock> {
        match &self.held {
            Held::File(l) => Some(l),
            #[cfg(feature = "postgres")]
            Held::Pg(_) => None,
        }
    }

    /// Replaces the stack's state with `d` (a new base with the open
    /// watermark, its secrets encrypted by `crypter`; the replaced base
    /// kept as the backup) and empties the journal.
    ///
    /// # Errors
    /// [`PersistError`]; the previous state then stands.
    pub fn replace_base(&self, d: &Deployment, crypter: &Crypter) -> Result<(), PersistError> {
        match &self.held {
            Held::File(_) => {
                write_base_with(&self.paths.base, d, self.seq, 0, &self.counters, crypter)?;
                atomic_write(&self.paths.journal, &[], false, &self.counters).map_err(|source| {
                    PersistError::Io {
                        path: self.paths.journal.clone(),
                        source,
                    }
                })
            }
            #[cfg(feature = "postgres")]
            Held::Pg(lock) => lock.compact(base_bytes(d, self.seq, 0, crypter)?, Vec::new()),
        }
    }

    /// A stack opened on a database under `lock`.
    #[cfg(feature = "postgres")]
    pub(crate) fn pg(
        stack: &str,
        paths: StackPaths,
        loaded: Loaded,
        counters: Arc<IoCounters>,
        lock: super::pg::lock::PgLock,
    ) -> Self {
        Self {
            name: stack.to_owned(),
            paths,
            deployment: loaded.deployment,
            warnings: loaded.warnings,
            crypter: loaded.crypter,
            seq: loaded.seq,
            counters,
            held: Held::Pg(lock),
        }
    }

    /// I/O counters shared with the persisters made here.
    pub fn counters(&self) -> &Arc<IoCounters> {
        &self.counters
    }

    /// The journal watermark of the base.
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// A backend directory.
#[derive(Debug, Clone)]
pub struct Backend {
    root: PathBuf,
    passphrase: Option<String>,
    new_stack_salt: Option<String>,
}

impl Backend {
    /// The backend at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            passphrase: None,
            new_stack_salt: None,
        }
    }

    /// The passphrase provider's salt state a stack without a secrets
    /// provider takes (the `encryptionsalt` of its `Pulumi.<stack>.yaml`,
    /// whose secure config values it encrypts), instead of a fresh salt.
    pub fn with_new_stack_salt(mut self, salt: Option<String>) -> Self {
        self.new_stack_salt = salt;
        self
    }

    /// The passphrase of the stacks' passphrase secrets provider (new
    /// stacks get that provider when one is set).
    pub fn with_passphrase(mut self, passphrase: Option<String>) -> Self {
        self.passphrase = passphrase;
        self
    }

    /// The backend's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The files of a stack.
    pub fn paths(&self, stack: &str) -> StackPaths {
        StackPaths::new(self.root.join("stacks").join(stack))
    }

    /// The backend's stacks (the directories under `stacks/`), sorted.
    ///
    /// # Errors
    /// [`PersistError::Io`] when the directory cannot be read (a missing
    /// one holds no stacks).
    pub fn stacks(&self) -> Result<Vec<String>, PersistError> {
        let dir = self.root.join("stacks");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(PersistError::Io { path: dir, source }),
        };
        let mut names = Vec::new();
        for e in entries {
            let e = e.map_err(|source| PersistError::Io {
                path: dir.clone(),
                source,
            })?;
            if e.path().is_dir() {
                if let Some(n) = e.file_name().to_str() {
                    names.push(n.to_owned());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// The selected stack (`keel stack select`), if any.
    ///
    /// # Errors
    /// [`PersistError::Io`] when the file exists but cannot be read.
    pub fn selected(&self) -> Result<Option<String>, PersistError> {
        let path = self.root.join(SELECTED_FILE);
        match std::fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s.trim().to_owned()).filter(|s| !s.is_empty())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(PersistError::Io { path, source }),
        }
    }

    /// Records `stack` as the selected stack (atomically), or clears the
    /// selection with `None`.
    ///
    /// # Errors
    /// [`PersistError::Io`]; the previous selection then stands.
    pub fn select(&self, stack: Option<&str>) -> Result<(), PersistError> {
        let path = self.root.join(SELECTED_FILE);
        let io = |source| PersistError::Io {
            path: path.clone(),
            source,
        };
        match stack {
            Some(name) => {
                std::fs::create_dir_all(&self.root).map_err(io)?;
                atomic_write(
                    &path,
                    format!("{name}\n").as_bytes(),
                    false,
                    &IoCounters::default(),
                )
                .map_err(io)
            }
            None => match std::fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io(e)),
            },
        }
    }

    /// Takes an existing stack's lock for `command` without reading or
    /// changing its state (the stack commands read it with [`Self::load`]
    /// while holding it).
    ///
    /// # Errors
    /// [`BackendError::Locked`] naming the holder.
    pub fn lock(&self, stack: &str, command: &str) -> Result<StackLock, BackendError> {
        Ok(StackLock::acquire(
            &self.paths(stack).lock,
            &Holder::me(command),
        )?)
    }

    /// Moves a stack's directory (whole: checkpoint, backup, journal) to
    /// `backups/<stack>.<unix seconds>[.<n>]` and returns where it went.
    /// The caller holds the stack's lock, which moves with it.
    ///
    /// # Errors
    /// [`PersistError::Io`]; the stack is then where it was.
    pub fn move_to_backups(&self, stack: &str) -> Result<PathBuf, PersistError> {
        let backups = self.root.join(BACKUPS_DIR);
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| PersistError::Io { path, source }
        };
        std::fs::create_dir_all(&backups).map_err(io(&backups))?;
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut to = backups.join(format!("{stack}.{secs}"));
        let mut n = 1;
        while to.exists() {
            to = backups.join(format!("{stack}.{secs}.{n}"));
            n += 1;
        }
        let from = self.paths(stack).dir;
        std::fs::rename(&from, &to).map_err(io(&from))?;
        let counters = IoCounters::default();
        fs::sync_dir(&backups, &counters).map_err(io(&backups))?;
        let stacks = self.root.join("stacks");
        fs::sync_dir(&stacks, &counters).map_err(io(&stacks))?;
        Ok(to)
    }

    /// Reads a stack without locking or changing it (for `state show`,
    /// `stack export`, `state verify`). A missing stack is empty.
    ///
    /// # Errors
    /// [`BackendError`] for an invalid base or a corrupt journal.
    pub fn load(&self, stack: &str) -> Result<Loaded, BackendError> {
        let paths = self.paths(stack);
        let persist = |source| BackendError::Persist {
            stack: stack.to_owned(),
            source,
        };
        let base = match fs::OpenFile::open(&paths.base) {
            Ok(file) => Some(StoredBase::File(file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(persist(PersistError::Io {
                    path: paths.base.clone(),
                    source,
                }))
            }
        };
        let journal = match std::fs::read(&paths.journal) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(persist(PersistError::Io {
                    path: paths.journal.clone(),
                    source,
                }))
            }
        };
        let base_missing = base.is_none();
        let journal_empty = journal.is_empty();
        let stored = StoredStack {
            stack,
            base,
            journal,
            base_label: &paths.base,
            journal_label: &paths.journal,
        };
        stored.assemble(
            self.passphrase.as_deref(),
            self.new_stack_salt.as_deref(),
            |decoded| {
                if !base_missing {
                    return Ok(());
                }
                // A stack's first operation journals onto an empty base from
                // seq 1; any other file there means the base was removed.
                let bak = fs::backup_path(&paths.base);
                let mut found: Vec<PathBuf> = Vec::new();
                if bak.exists() {
                    found.push(bak);
                }
                let follows_a_base = decoded.records.first().is_some_and(|r| r.entry.seq() != 1);
                if follows_a_base || (!found.is_empty() && !journal_empty) {
                    found.push(paths.journal.clone());
                }
                if found.is_empty() {
                    Ok(())
                } else {
                    Err(BackendError::MissingBase {
                        stack: stack.to_owned(),
                        base: paths.base.clone(),
                        found,
                    })
                }
            },
        )
    }

    /// Opens a stack for an operation running `command`: takes the lock,
    /// replays, cuts a torn tail and compacts the journal into the base.
    ///
    /// # Errors
    /// [`BackendError::Locked`] at once when another operation holds the
    /// stack; other variants for unreadable state (nothing is changed then).
    pub fn open(&self, stack: &str, command: &str) -> Result<OpenStack, BackendError> {
        let paths = self.paths(stack);
        let persist = |source| BackendError::Persist {
            stack: stack.to_owned(),
            source,
        };
        std::fs::create_dir_all(&paths.dir).map_err(|source| {
            persist(PersistError::Io {
                path: paths.dir.clone(),
                source,
            })
        })?;
        let lock = StackLock::acquire(&paths.lock, &Holder::me(command))?;
        let mut loaded = self.load(stack)?;
        loaded
            .check_secrets()
            .map_err(|source| BackendError::Secrets {
                stack: stack.to_owned(),
                source,
            })?;
        let counters = Arc::new(IoCounters::default());
        // A stack getting its secrets provider now (a new stack, a
        // passphrase set): record the provider's salt before any journal
        // entry is encrypted with it.
        let new_provider = match loaded.crypter.manager() {
            Some(m) if loaded.deployment.secrets_providers.ty.is_empty() => {
                loaded.deployment.secrets_providers.ty = m.provider_type().to_owned();
                loaded.deployment.secrets_providers.state = m.state_json();
                true
            }
            _ => false,
        };
        if loaded.replayed > 0 || loaded.journal_len > 0 || new_provider {
            // Fold the journal into a new base; a torn tail goes with it.
            let _ = loaded.valid_len;
            write_base_with(
                &paths.base,
                &loaded.deployment,
                loaded.seq,
                0,
                &counters,
                &loaded.crypter,
            )
            .map_err(persist)?;
            atomic_write(&paths.journal, &[], false, &counters).map_err(|source| {
                persist(PersistError::Io {
                    path: paths.journal.clone(),
                    source,
                })
            })?;
        }
        Ok(OpenStack {
            name: stack.to_owned(),
            paths,
            deployment: loaded.deployment,
            warnings: loaded.warnings,
            crypter: loaded.crypter,
            seq: loaded.seq,
            counters,
            held: Held::File(lock),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_base_is_byte_for_byte_the_encoded_one() {
        // A real Pulumi checkpoint (read in place, as the fixture tests do).
        let bytes = std::fs::read("../shared/fixtures/pulumi/aws-ts-lambda-efs__stack.json")
            .expect("the Pulumi fixtures in ../shared/fixtures");
        let d = CheckpointFile::from_slice(&bytes)
            .unwrap()
            .deployment
            .unwrap();
        assert!(d.resources.len() > 10);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev.json");
        let counters = IoCounters::default();
        write_base_with(&path, &d, 7, 3, &counters, &Crypter::default()).unwrap();
        let expected = base_bytes(&d, 7, 3, &Crypter::default()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert_eq!(counters.bytes(), expected.len() as u64);
    }

    #[test]
    fn no_base_holds_a_plaintext_secret() {
        use crate::model::property::{PropertyValue, Secret};
        use crate::model::{State, Urn};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev.json");
        let counters = IoCounters::default();
        // Small (encoded serially) and past `PARALLEL_FROM` (the odd chunks
        // encoded on a second thread).
        for (states, at) in [(1, 0), (5000, 0), (5000, 1500), (5000, 4999)] {
            let mut d = Deployment {
                resources: (0..states)
                    .map(|i| State {
                        urn: Urn::parse(&format!("urn:pulumi:dev::p::sim:index:Thing::t{i}"))
                            .unwrap(),
                        ..State::default()
                    })
                    .collect(),
                ..Deployment::default()
            };
            write_base(&path, &d, 1, 0, &counters).unwrap();
            let before = std::fs::read(&path).unwrap();
            let hidden = PropertyValue::from("hush-plain");
            let secret = PropertyValue::Secret(Secret::plaintext(hidden));
            d.resources[at].outputs.insert("pw".into(), secret);
            // No manager: refused, the base as it was, no file left over.
            for crypter in [Crypter::default(), Crypter::unsupported("awskms")] {
                let case = format!("{states} states, secret at {at}, {crypter:?}");
                assert!(
                    matches!(
                        write_base_with(&path, &d, 2, 0, &counters, &crypter),
                        Err(PersistError::Secrets(_))
                    ),
                    "{case}"
                );
                assert!(base_bytes(&d, 2, 0, &crypter).is_err(), "{case}");
                assert_eq!(std::fs::read(&path).unwrap(), before, "{case}");
                let names: Vec<_> = std::fs::read_dir(dir.path())
                    .unwrap()
                    .map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect();
                assert!(
                    names.iter().all(|n| n.starts_with("dev.json")),
                    "{case}: {names:?}"
                );
            }
        }
    }

    #[test]
    fn a_base_of_megabytes_loads_as_it_was_written() {
        // Past the sizes at which the base is read in halves and decoded on
        // two threads.
        use crate::model::{PropertyMap, PropertyValue, State, TypeToken, Urn};
        let ty = TypeToken::parse("sim:index:Thing").unwrap();
        let resources = (0..4_000)
            .map(|i| {
                let urn = Urn::parse(&format!("urn:pulumi:dev::p::sim:index:Thing::r{i}")).unwrap();
                let mut s = State::new(urn, ty.clone(), true);
                s.id = format!("r{i}-id");
                let mut outputs = PropertyMap::new();
                outputs.insert(
                    "arn".into(),
                    PropertyValue::String(format!("arn:sim:r{i}:{}", "x".repeat(i % 300))),
                );
                s.outputs = outputs;
                s
            })
            .collect();
        let d = Deployment {
            resources,
            ..Deployment::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let paths = backend.paths("dev");
        std::fs::create_dir_all(&paths.dir).unwrap();
        write_base_with(
            &paths.base,
            &d,
            0,
            0,
            &IoCounters::default(),
            &Crypter::default(),
        )
        .unwrap();
        let written = std::fs::read(&paths.base).unwrap();
        assert!(written.len() > 1 << 20, "{} bytes", written.len());
        let loaded = backend.load("dev").unwrap();
        assert_eq!(loaded.deployment.resources.len(), 4_000);
        let again = base_bytes(&loaded.deployment, 0, 0, &Crypter::default()).unwrap();
        assert!(again == written, "the loaded base encodes to other bytes");
        // Read through windows (a large base is never read whole).
        let file = fs::OpenFile::open(&paths.base).unwrap();
        assert!(CheckpointFile::from_windows(&file).is_some());
    }

    /// A base of a few megabytes, written, and its bytes.
    fn large_base(dir: &Path) -> (PathBuf, Vec<u8>) {
        use crate::model::{State, TypeToken, Urn};
        let ty = TypeToken::parse("sim:index:Thing").unwrap();
        let resources = (0..6_000)
            .map(|i| {
                let urn = Urn::parse(&format!("urn:pulumi:dev::p::sim:index:Thing::r{i}")).unwrap();
                let mut s = State::new(urn, ty.clone(), true);
                s.id = format!("r{i}-{}", "i".repeat(200));
                s
            })
            .collect();
        let d = Deployment {
            resources,
            ..Deployment::default()
        };
        let path = dir.join("checkpoint.json");
        write_base_with(&path, &d, 0, 0, &IoCounters::default(), &Crypter::default()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.len() > 1 << 20, "{} bytes", bytes.len());
        (path, bytes)
    }

    #[test]
    fn a_large_base_that_grows_while_it_is_read_is_read_again_whole() {
        // The windows read the length the file had when it was opened; a
        // file that no longer ends there is decoded from all its bytes
        // (here: no longer JSON).
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = large_base(dir.path());
        let base = StoredBase::File(fs::OpenFile::open(&path).unwrap());
        assert!(base.decode(&path).is_ok());
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"x")
            .unwrap();
        let err = base.decode(&path).unwrap_err();
        assert!(matches!(err, CheckpointError::Syntax { .. }), "{err}");
    }

    #[test]
    fn a_damaged_large_base_is_refused_as_its_bytes_are() {
        // The same error, naming the problem, from the open file as from
        // its bytes.
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = large_base(dir.path());
        let text = String::from_utf8(bytes).unwrap();
        let damaged = [
            text.replacen("Thing::r4000\"", "Thing r4000\"", 1),
            text.replacen("Thing::r10\"", "Thing r10\"", 1),
            text.replacen("},{", "}{", 1),
            text[..text.len() - 2].to_owned(),
            text.replacen("Thing::r5000\"", "Thing::r7\"", 1),
        ];
        for bad in damaged {
            std::fs::write(&path, &bad).unwrap();
            let file = StoredBase::File(fs::OpenFile::open(&path).unwrap())
                .decode(&path)
                .unwrap_err();
            let bytes = StoredBase::Bytes(bad.into_bytes())
                .decode(&path)
                .unwrap_err();
            assert_eq!(file.to_string(), bytes.to_string());
        }
    }
}
