//! The simulated cloud's file: an append-only log of changes that several
//! keel processes share (two stacks of one backend may run at once).
//!
//! The file is JSON lines: a header line `{"keelSimCloud":1}`, then one
//! [`Record`] per change (an object put, an object deleted, a facet removed
//! from its host, a generation counter). Every change is made under an exclusive OS lock on a separate
//! lock file (`<file>.lock`, never replaced): the writer first catches up
//! on the records other processes appended since its last offset, decides
//! against that state, appends its record with one `write`, and unlocks. A
//! change costs one record, whatever the number of objects.
//!
//! When the log holds many more records than there are live objects, the
//! writer compacts it: it writes the live state to a temporary file, syncs
//! it, renames it over the log and syncs the directory. Other processes see
//! that the file they hold was replaced (device and inode changed) and read
//! the new one from the start.
//!
//! A torn last line (a writer killed in the middle of its `write`) is not a
//! change: readers ignore it and the next writer cuts it off before it
//! appends. A damaged line followed by others is refused with its offset.
//!
//! A whole-JSON file (`{"objects": [...], "generations": {...}}`, written
//! by earlier keel versions) is read as it is and rewritten as a log by the
//! first change.
//!
//! Plaintext secrets never reach the file: records holding one are
//! encrypted with the stack's [`Crypter`] first (a change that would have
//! to write a plaintext secret without one is refused).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::sim::SimObject;
use crate::model::{PropertyMap, PropertyValue};
use crate::secrets::{Crypter, SecretsError};

/// The version in the header line.
const FORMAT_VERSION: u64 = 1;

/// Compaction happens once the log holds more than twice the live records
/// plus this many.
const COMPACT_SLACK: u64 = 1024;

/// Why the simulated cloud's file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CloudFileError {
    /// An I/O error.
    #[error("cannot {action} the simulated cloud's file {}: {source}", .path.display())]
    Io {
        /// What keel was doing (`read`, `lock`, `append to`, `rewrite`).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file holds something that is not a simulated cloud.
    #[error("the simulated cloud's file {} is damaged at byte {offset}: {message}; restore it from a copy, or remove it to start with an empty cloud", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong.
        message: String,
    },
    /// The shared log (a database) could not be read or written.
    #[error("cannot {action} the simulated cloud in {place}: {message}")]
    Shared {
        /// Where the log is.
        place: String,
        /// What keel was doing (`read`, `append to`).
        action: &'static str,
        /// Why.
        message: String,
    },
    /// A record of the shared log is not a change record.
    #[error("the simulated cloud in {place} is damaged at record {position}: it is not a change record; remove that record (or the log) to go on")]
    SharedCorrupt {
        /// Where the log is.
        place: String,
        /// The record's position.
        position: i64,
    },
    /// An object's secrets could not be encrypted before being written.
    #[error("the simulated cloud cannot write object {id} ({ty}) without its secrets in plaintext: {source}")]
    Secrets {
        /// The object's type.
        ty: String,
        /// The object's ID.
        id: String,
        /// Why.
        source: SecretsError,
    },
}

/// One line of the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum Record {
    /// The first line: the format version.
    KeelSimCloud(u64),
    /// An object created or changed (whole).
    Put {
        /// The object.
        object: SimObject,
        /// The generation counter of the object's URN after a create.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_generation: Option<u64>,
    },
    /// An object deleted (and whatever record of a facet removed under
    /// this key).
    Delete {
        /// Its type.
        #[serde(rename = "type")]
        ty: String,
        /// Its ID.
        id: String,
    },
    /// A facet deleted from its host (`sim.rs`, "Facets"): its object, if
    /// it had one, is gone, and the host no longer carries the facet.
    FacetRemoved {
        /// The facet's type.
        #[serde(rename = "type")]
        ty: String,
        /// Its ID (the host's).
        id: String,
    },
    /// A URN's generation counter (written by compaction).
    Generation {
        /// The URN.
        urn: String,
        /// How many IDs were issued for it.
        next: u64,
    },
}

/// An object's identity: (ID, type), so that objects list by ID.
pub(super) type Key = (String, String);

/// The key of an object.
pub(super) fn key(id: &str, ty: &str) -> Key {
    (id.to_owned(), ty.to_owned())
}

/// The cloud's contents.
#[derive(Debug, Default)]
pub(super) struct CloudState {
    /// Objects by (ID, type).
    pub(super) objects: BTreeMap<Key, SimObject>,
    /// Per-URN generation counters (how many IDs were issued per URN).
    pub(super) generations: BTreeMap<String, u64>,
    /// Facets deleted from their host, by (ID, type): the host no longer
    /// carries them (until one is created again).
    pub(super) removed_facets: BTreeSet<Key>,
}

impl CloudState {
    /// Applies one record.
    pub(super) fn apply(&mut self, record: Record) {
        match record {
            Record::KeelSimCloud(_) => {}
            Record::Put {
                object,
                next_generation,
            } => {
                if let Some(n) = next_generation {
                    self.raise_generation(&object.urn, n);
                }
                let k = key(&object.id, &object.ty);
                self.removed_facets.remove(&k);
                self.objects.insert(k, object);
            }
            Record::Delete { ty, id } => {
                let k = (id, ty);
                self.objects.remove(&k);
                self.removed_facets.remove(&k);
            }
            Record::FacetRemoved { ty, id } => {
                let k = (id, ty);
                self.objects.remove(&k);
                self.removed_facets.insert(k);
            }
            Record::Generation { urn, next } => self.raise_generation(&urn, next),
        }
    }

    fn raise_generation(&mut self, urn: &str, n: u64) {
        let g = self.generations.entry(urn.to_owned()).or_insert(0);
        *g = (*g).max(n);
    }
}

/// The whole-JSON form of earlier keel versions.
#[derive(Deserialize)]
struct LegacyCloud {
    #[serde(default)]
    objects: Vec<SimObject>,
    #[serde(default)]
    generations: BTreeMap<String, u64>,
}

/// A held lock on the lock file; dropping it unlocks.
pub(super) struct FileLock(Option<File>);

impl Drop for FileLock {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            let _ = f.unlock();
        }
    }
}

/// The log as this process has read it.
#[derive(Debug)]
struct OpenLog {
    file: File,
    /// (device, inode) of the file opened.
    ident: (u64, u64),
    /// The end of the last complete record applied.
    offset: u64,
    /// The file is in the whole-JSON form (rewritten by the first change).
    legacy: bool,
    /// Bytes after the offset that are no complete record (a torn write).
    torn: bool,
}

/// Counters of the file's work (tests use them to check that a change
/// costs one record).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CloudFileStats {
    /// Bytes appended as change records.
    pub appended_bytes: u64,
    /// Change records appended.
    pub appended_records: u64,
    /// Whole rewrites (compactions and migrations of whole-JSON files).
    pub rewrites: u64,
}

/// The simulated cloud's file, as one process uses it.
#[derive(Debug)]
pub(super) struct CloudFile {
    path: PathBuf,
    lock_path: PathBuf,
    /// Whether changes are written (a preview or `cloud list` only reads).
    pub(super) writable: bool,
    open: Option<OpenLog>,
    /// The lock file, once opened (each lock takes a duplicate of it).
    lock_file: Option<File>,
    /// Records in the log (header excluded).
    records: u64,
    stats: CloudFileStats,
}

fn ident(meta: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    }
    #[cfg(not(unix))]
    {
        // No inode: a shorter file than what was read means a rewrite.
        let _ = meta;
        (0, 0)
    }
}

/// Whether `map` holds a plaintext secret.
fn has_plaintext(map: &PropertyMap) -> bool {
    fn value(v: &PropertyValue) -> bool {
        match v {
            PropertyValue::Secret(crate::model::property::Secret::Plaintext(_)) => true,
            PropertyValue::Array(a) => a.iter().any(value),
            PropertyValue::Object(m) => m.values().any(value),
            PropertyValue::Output(o) => o.value.as_deref().is_some_and(value),
            _ => false,
        }
    }
    map.values().any(value)
}

impl CloudFile {
    /// The file at `path` (not opened yet).
    pub(super) fn new(path: PathBuf, writable: bool) -> Self {
        let mut lock_path = path.clone().into_os_string();
        lock_path.push(".lock");
        Self {
            path,
            lock_path: lock_path.into(),
            writable,
            open: None,
            lock_file: None,
            records: 0,
            stats: CloudFileStats::default(),
        }
    }

    /// The file's path.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The work counters.
    pub(super) fn stats(&self) -> CloudFileStats {
        self.stats
    }

    fn io(&self, action: &'static str) -> impl FnOnce(std::io::Error) -> CloudFileError + '_ {
        move |source| CloudFileError::Io {
            action,
            path: self.path.clone(),
            source,
        }
    }

    fn corrupt(&self, offset: u64, message: impl Into<String>) -> CloudFileError {
        CloudFileError::Corrupt {
            path: self.path.clone(),
            offset,
            message: message.into(),
        }
    }

    /// Takes the lock: exclusive for a change, shared for a read. A reader
    /// of a backend with no lock file yet (nothing was written with one)
    /// creates nothing and takes no lock. Blocking.
    pub(super) fn lock(&mut self, exclusive: bool) -> Result<FileLock, CloudFileError> {
        if self.lock_file.is_none() {
            let mut options = OpenOptions::new();
            options.read(true);
            if exclusive {
                options.write(true).create(true).truncate(false);
            }
            match options.open(&self.lock_path) {
                Ok(f) => self.lock_file = Some(f),
                Err(e) if !exclusive && e.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(FileLock(None))
                }
                Err(e) => return Err(self.io("lock")(e)),
            }
        }
        let file = match self.lock_file.as_ref().map(File::try_clone) {
            Some(Ok(f)) => f,
            Some(Err(e)) => return Err(self.io("lock")(e)),
            None => unreachable!("opened above"),
        };
        let locked = if exclusive {
            file.lock()
        } else {
            file.lock_shared()
        };
        locked.map_err(self.io("lock"))?;
        Ok(FileLock(Some(file)))
    }

    /// Brings `state` up to date with the file (the lock held): reads what
    /// other processes appended, or the whole file when it was replaced.
    /// Blocking.
    pub(super) fn catch_up(&mut self, state: &mut CloudState) -> Result<(), CloudFileError> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.open.take().is_some() {
                    // The file was removed: the cloud is empty now.
                    *state = CloudState::default();
                    self.records = 0;
                }
                return Ok(());
            }
            Err(e) => return Err(self.io("read")(e)),
        };
        let id = ident(&meta);
        let same = self
            .open
            .as_ref()
            .is_some_and(|o| o.ident == id && meta.len() >= o.offset);
        if !same {
            let file = match OpenOptions::new().read(true).append(true).open(&self.path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    File::open(&self.path).map_err(self.io("read"))?
                }
                Err(e) => return Err(self.io("read")(e)),
            };
            *state = CloudState::default();
            self.records = 0;
            self.open = Some(OpenLog {
                file,
                ident: id,
                offset: 0,
                legacy: false,
                torn: false,
            });
        }
        self.read_new(state)
    }

    /// Reads and applies the complete records after the offset.
    fn read_new(&mut self, state: &mut CloudState) -> Result<(), CloudFileError> {
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if open.legacy {
            return Ok(());
        }
        let start = open.offset;
        let mut buf = Vec::new();
        let read = open
            .file
            .seek(SeekFrom::Start(start))
            .and_then(|_| open.file.read_to_end(&mut buf));
        if let Err(e) = read {
            return Err(self.io("read")(e));
        }
        if buf.is_empty() {
            return Ok(());
        }
        if start == 0 && !buf.starts_with(b"{\"keelSimCloud\"") {
            return self.read_legacy(&buf, state);
        }
        let mut pos = 0usize;
        let mut applied = 0u64;
        while let Some(n) = buf[pos..].iter().position(|b| *b == b'\n') {
            let line = &buf[pos..pos + n];
            let at = start + pos as u64;
            pos += n + 1;
            if line.is_empty() {
                continue;
            }
            let record: Record = serde_json::from_slice(line)
                .map_err(|e| self.corrupt(at, format!("not a change record ({e})")))?;
            match record {
                Record::KeelSimCloud(v) if at == 0 => {
                    if v != FORMAT_VERSION {
                        return Err(self.corrupt(
                            0,
                            format!("format version {v} (this keel reads {FORMAT_VERSION}); use a keel that writes it"),
                        ));
                    }
                }
                _ if at == 0 => return Err(self.corrupt(0, "no header line")),
                Record::KeelSimCloud(_) => return Err(self.corrupt(at, "a header in the middle")),
                other => {
                    state.apply(other);
                    applied += 1;
                }
            }
        }
        // What follows the last newline is a torn write of a killed
        // process: not a change (the next writer cuts it off).
        self.records += applied;
        if let Some(open) = self.open.as_mut() {
            open.offset = start + pos as u64;
            open.torn = pos < buf.len();
        }
        Ok(())
    }

    /// Reads a whole-JSON file of earlier versions.
    fn read_legacy(&mut self, buf: &[u8], state: &mut CloudState) -> Result<(), CloudFileError> {
        let legacy: LegacyCloud = serde_json::from_slice(buf)
            .map_err(|e| self.corrupt(0, format!("not a simulated cloud ({e})")))?;
        for o in legacy.objects {
            state.objects.insert(key(&o.id, &o.ty), o);
        }
        state.generations = legacy.generations;
        if let Some(open) = self.open.as_mut() {
            open.offset = buf.len() as u64;
            open.legacy = true;
        }
        Ok(())
    }

    /// One record of the file at `path` as a line, its plaintext secrets
    /// encrypted.
    pub(super) fn encode(
        path: &Path,
        record: &Record,
        crypter: Option<&Crypter>,
        out: &mut Vec<u8>,
    ) -> Result<(), CloudFileError> {
        let failed = |e: serde_json::Error| CloudFileError::Io {
            action: "encode a record for",
            path: path.to_owned(),
            source: std::io::Error::other(e),
        };
        match record {
            Record::Put { object, .. }
                if has_plaintext(&object.inputs) || has_plaintext(&object.outputs) =>
            {
                let mut v = serde_json::to_value(record).map_err(failed)?;
                let none = Crypter::default();
                crypter
                    .unwrap_or(&none)
                    .encrypt_json(&mut v)
                    .map_err(|source| CloudFileError::Secrets {
                        ty: object.ty.clone(),
                        id: object.id.clone(),
                        source,
                    })?;
                serde_json::to_writer(&mut *out, &v).map_err(failed)?;
            }
            _ => serde_json::to_writer(&mut *out, record).map_err(failed)?,
        }
        out.push(b'\n');
        Ok(())
    }

    /// Appends `records` (the exclusive lock held, caught up) and applies
    /// them to `state` once written; compacts when the log has grown well
    /// past the live state. Nothing changes when encoding or writing fails.
    /// Blocking.
    pub(super) fn append(
        &mut self,
        state: &mut CloudState,
        records: Vec<Record>,
        crypter: Option<&Crypter>,
    ) -> Result<(), CloudFileError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for r in &records {
            Self::encode(&self.path, r, crypter, &mut buf)?;
        }
        let fresh = self.open.as_ref().is_none_or(|o| o.legacy);
        if fresh {
            // No file yet, or one of the whole-JSON form: write the state
            // as a log first.
            self.rewrite(state, crypter)?;
        }
        let Some(open) = self.open.as_mut() else {
            unreachable!("rewrite opens the log")
        };
        let end = open.offset;
        let written = if open.torn {
            open.file.set_len(end)
        } else {
            Ok(())
        }
        .and_then(|()| open.file.write_all(&buf));
        if let Err(e) = written {
            // Cut off whatever part was written: no half change.
            let _ = open.file.set_len(end);
            return Err(self.io("append to")(e));
        }
        open.offset = end + buf.len() as u64;
        open.torn = false;
        let n = records.len() as u64;
        self.records += n;
        self.stats.appended_bytes += buf.len() as u64;
        self.stats.appended_records += n;
        for r in records {
            state.apply(r);
        }
        let live =
            (state.objects.len() + state.generations.len() + state.removed_facets.len()) as u64;
        if self.records > 2 * live + COMPACT_SLACK {
            self.rewrite(state, crypter)?;
        }
        Ok(())
    }

    /// Replaces the file with the live state (header, generation counters,
    /// objects, removed facets): temporary file, sync, rename, sync of the directory.
    /// Blocking.
    pub(super) fn rewrite(
        &mut self,
        state: &CloudState,
        crypter: Option<&Crypter>,
    ) -> Result<(), CloudFileError> {
        let (file, records) = write_snapshot(&self.path, state, crypter)?;
        let meta = file.metadata().map_err(self.io("rewrite"))?;
        drop(file);
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(self.io("rewrite"))?;
        self.open = Some(OpenLog {
            file,
            ident: ident(&meta),
            offset: meta.len(),
            legacy: false,
            torn: false,
        });
        self.records = records;
        self.stats.rewrites += 1;
        Ok(())
    }
}

/// Writes `state` as a log at `path` atomically and durably; returns the
/// new file and its record count. Blocking.
pub(super) fn write_snapshot(
    path: &Path,
    state: &CloudState,
    crypter: Option<&Crypter>,
) -> Result<(File, u64), CloudFileError> {
    let io = |source| CloudFileError::Io {
        action: "rewrite",
        path: path.to_owned(),
        source,
    };
    let mut buf = Vec::new();
    CloudFile::encode(path, &Record::KeelSimCloud(FORMAT_VERSION), None, &mut buf)?;
    let mut records = 0u64;
    for (urn, next) in &state.generations {
        let r = Record::Generation {
            urn: urn.clone(),
            next: *next,
        };
        CloudFile::encode(path, &r, crypter, &mut buf)?;
        records += 1;
    }
    for o in state.objects.values() {
        let r = Record::Put {
            object: o.clone(),
            next_generation: None,
        };
        CloudFile::encode(path, &r, crypter, &mut buf)?;
        records += 1;
    }
    for (id, ty) in &state.removed_facets {
        let r = Record::FacetRemoved {
            ty: ty.clone(),
            id: id.clone(),
        };
        CloudFile::encode(path, &r, crypter, &mut buf)?;
        records += 1;
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    tmp.write_all(&buf).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    let file = tmp.persist(path).map_err(|e| io(e.error))?;
    #[cfg(unix)]
    File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    Ok((file, records))
}
