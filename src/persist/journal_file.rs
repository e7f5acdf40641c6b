//! The journal persister (the default): appends one framed record per
//! mutation to `journal.log` on a writer thread that group-commits — every
//! record queued while the previous fsync ran shares the next one (a batch
//! also closes at a configurable size, or after an optional time bound) —
//! and acknowledges each mutation once its record is durable. Compaction
//! writes the current deployment as the new base checkpoint and starts an
//! empty journal, at the end of every operation and whenever the journal
//! passes a size bound.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::backend::{write_base_with, StackPaths};
use super::fs::IoCounters;
use super::journal::{encode_keeps, encode_with, Entry, EntryState, RecordRoom, Ref};
use super::{Ack, Change, Compaction, Mutation, PersistError, Persister, Result, SnapshotBuilder};
use crate::model::Deployment;
use crate::secrets::Crypter;

/// Tuning of the journal.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// The most records one fsync covers.
    pub batch_max: usize,
    /// How long a batch waits for more records (zero: only those already
    /// queued).
    pub batch_time: Duration,
    /// Compact when the journal passes this many bytes.
    pub compact_bytes: u64,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            batch_max: 4096,
            batch_time: Duration::ZERO,
            compact_bytes: 256 << 20,
        }
    }
}

enum WriterMsg {
    Append(Vec<u8>, Ack),
    /// Replies once everything before it is durable.
    Flush(Sender<std::result::Result<(), WriteFailure>>),
    /// Continue in another file (after a compaction).
    Swap(File),
}

/// The journal persister.
pub struct JournalPersister {
    paths: StackPaths,
    seq: u64,
    tx: Option<Sender<WriterMsg>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<IoCounters>,
    journal_bytes: u64,
    options: JournalOptions,
    saves: u64,
    fail_at: Option<u64>,
    fail_migrations: bool,
    broken: Option<String>,
    crypter: Arc<Crypter>,
    /// `keep` records not yet handed to the writer, each a sequence
    /// number and the base state kept: they are encoded and go out ahead
    /// of the next other record (so everything after them is durable
    /// after them), or are dropped by the compaction or the unchanged end
    /// that makes them moot (a no-op encodes none).
    deferred: Vec<(u64, Ref)>,
    /// A record other than a `keep` was written since the base was.
    dirty: bool,
    /// The base on disk was written in the middle of this operation (it
    /// records a split the end must clear).
    compacted_mid: bool,
    /// The journal outgrew `compact_bytes`: [`Persister::upkeep`]
    /// compacts it before the next mutation.
    compact_due: bool,
    /// The room the next record's buffer is given.
    room: RecordRoom,
}

impl std::fmt::Debug for JournalPersister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalPersister")
            .field("journal", &self.paths.journal)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

/// The writer's failed write, kept (every later append fails with it
/// until a compaction swaps the file): the OS error's kind and text, since
/// [`std::io::Error`] cannot be cloned for each waiting append.
#[derive(Debug, Clone)]
struct WriteFailure {
    kind: std::io::ErrorKind,
    message: String,
}

impl WriteFailure {
    fn of(e: &std::io::Error) -> Self {
        Self {
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    fn to_persist(&self, path: &std::path::Path) -> PersistError {
        PersistError::Io {
            path: path.to_owned(),
            source: std::io::Error::new(self.kind, self.message.clone()),
        }
    }
}

fn io_err(path: &std::path::Path, message: impl Into<String>) -> PersistError {
    PersistError::Io {
        path: path.to_owned(),
        source: std::io::Error::other(message.into()),
    }
}

fn open_append(path: &std::path::Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

fn writer_loop(
    mut file: File,
    path: PathBuf,
    rx: Receiver<WriterMsg>,
    counters: Arc<IoCounters>,
    options: JournalOptions,
) {
    let mut failed: Option<WriteFailure> = None;
    let mut pending: Option<WriterMsg> = None;
    loop {
        let first = match pending.take() {
            Some(m) => m,
            None => match rx.recv() {
                Ok(m) => m,
                Err(_) => return,
            },
        };
        let mut batch: Vec<(Vec<u8>, Ack)> = Vec::new();
        let mut control = None;
        match first {
            WriterMsg::Append(b, a) => batch.push((b, a)),
            other => control = Some(other),
        }
        let deadline = Instant::now() + options.batch_time;
        while control.is_none() && batch.len() < options.batch_max {
            let next = match rx.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Disconnected) => None,
                Err(TryRecvError::Empty) => {
                    let now = Instant::now();
                    if now >= deadline {
                        None
                    } else {
                        rx.recv_timeout(deadline - now).ok()
                    }
                }
            };
            match next {
                Some(WriterMsg::Append(b, a)) => batch.push((b, a)),
                Some(other) => control = Some(other),
                None => break,
            }
        }
        if !batch.is_empty() {
            let result = match &failed {
                Some(f) => Err(f.clone()),
                None => {
                    let mut bytes = Vec::with_capacity(batch.iter().map(|(b, _)| b.len()).sum());
                    for (b, _) in &batch {
                        bytes.extend_from_slice(b);
                    }
                    let r = file.write_all(&bytes).and_then(|()| file.sync_data());
                    match r {
                        Ok(()) => {
                            counters.wrote(bytes.len());
                            counters.synced();
                            Ok(())
                        }
                        Err(e) => {
                            let f = WriteFailure::of(&e);
                            failed = Some(f.clone());
                            Err(f)
                        }
                    }
                }
            };
            for (_, ack) in batch {
                ack(result.clone().map_err(|f| f.to_persist(&path)));
            }
        }
        match control {
            Some(WriterMsg::Flush(reply)) => {
                let _ = reply.send(failed.clone().map_or(Ok(()), Err));
            }
            Some(WriterMsg::Swap(f)) => {
                file = f;
                failed = None;
            }
            Some(m @ WriterMsg::Append(..)) => pending = Some(m),
            None => {}
        }
    }
}

impl JournalPersister {
    /// A journal persister appending to the stack's journal after `seq`
    /// (the last sequence number its base or journal holds).
    ///
    /// # Errors
    /// [`PersistError::Io`] when the journal cannot be opened.
    pub fn open(
        paths: StackPaths,
        seq: u64,
        options: JournalOptions,
        counters: Arc<IoCounters>,
    ) -> Result<Self> {
        let file = open_append(&paths.journal).map_err(|source| PersistError::Io {
            path: paths.journal.clone(),
            source,
        })?;
        let journal_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        let (tx, rx) = mpsc::channel();
        let (c, p, o) = (counters.clone(), paths.journal.clone(), options.clone());
        let thread = std::thread::Builder::new()
            .name("keel-journal".into())
            .spawn(move || writer_loop(file, p, rx, c, o))
            .map_err(|source| PersistError::Io {
                path: paths.journal.clone(),
                source,
            })?;
        Ok(Self {
            paths,
            seq,
            tx: Some(tx),
            thread: Some(thread),
            counters,
            journal_bytes,
            options,
            saves: 0,
            fail_at: None,
            fail_migrations: false,
            broken: None,
            crypter: Arc::default(),
            deferred: Vec::new(),
            dirty: false,
            compacted_mid: false,
            compact_due: false,
            room: RecordRoom::default(),
        })
    }

    /// Encrypts secrets with `crypter` in every entry and base written.
    pub fn with_crypter(mut self, crypter: Arc<Crypter>) -> Self {
        self.crypter = crypter;
        self
    }

    /// Fails the `n`th save (1-based) and every save after it, as a failing
    /// disk would (tests).
    pub fn fail_at(mut self, n: u64) -> Self {
        self.fail_at = Some(n);
        self
    }

    /// Fails every write of a `state-migration` entry, and only those
    /// (tests: the `failing` persistence of the conformance vectors).
    pub fn fail_migrations(mut self) -> Self {
        self.fail_migrations = true;
        self
    }

    fn send(&self, m: WriterMsg) -> Result<()> {
        match &self.tx {
            Some(tx) => tx
                .send(m)
                .map_err(|_| io_err(&self.paths.journal, "the journal writer stopped")),
            None => Err(io_err(&self.paths.journal, "the journal is closed")),
        }
    }

    fn flush(&self) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        self.send(WriterMsg::Flush(tx))?;
        rx.recv()
            .map_err(|_| io_err(&self.paths.journal, "the journal writer stopped"))?
            .map_err(|f| f.to_persist(&self.paths.journal))
    }

    /// Writes the current deployment as the new base and starts a fresh
    /// journal holding only the operations still in flight
    /// ([`SnapshotBuilder::compact_with`] says what `when` changes).
    fn compact(&mut self, current: &mut SnapshotBuilder, when: Compaction) -> Result<Deployment> {
        // The base written here holds every deferred `keep`.
        self.deferred.clear();
        self.flush()?;
        current.compact_with(when, |committed, split, current| {
            self.write_compaction(committed, split, current, when == Compaction::Mid)
        })
    }

    fn write_compaction(
        &mut self,
        committed: &Deployment,
        split: usize,
        current: &SnapshotBuilder,
        mid_operation: bool,
    ) -> Result<()> {
        crate::model::integrity::verify(committed)?;
        write_base_with(
            &self.paths.base,
            committed,
            self.seq,
            split,
            &self.counters,
            &self.crypter,
        )?;
        // The fresh journal: in-flight operations' begin entries, so their
        // ends still replay after this compaction.
        let mut bytes = Vec::new();
        let mut seq = self.seq;
        for (op, ty, state) in current.in_flight() {
            seq += 1;
            bytes.extend(encode_with(
                &Entry::Begin {
                    seq,
                    op,
                    ty,
                    state: EntryState::Borrowed(state),
                },
                &self.crypter,
            )?);
        }
        super::fs::atomic_write(&self.paths.journal, &bytes, false, &self.counters).map_err(
            |source| PersistError::Io {
                path: self.paths.journal.clone(),
                source,
            },
        )?;
        self.seq = seq;
        self.journal_bytes = bytes.len() as u64;
        self.dirty = !bytes.is_empty();
        self.compacted_mid = mid_operation;
        let file = open_append(&self.paths.journal).map_err(|source| PersistError::Io {
            path: self.paths.journal.clone(),
            source,
        })?;
        self.send(WriterMsg::Swap(file))
    }
}

impl Persister for JournalPersister {
    fn persist(&mut self, m: &Mutation, current: &mut SnapshotBuilder, ack: Ack) {
        self.saves += 1;
        if self.fail_at == Some(self.saves) {
            self.broken = Some(format!("injected failure of save #{}", self.saves));
        }
        if let Some(b) = &self.broken {
            return ack(Err(io_err(&self.paths.journal, b.clone())));
        }
        if self.fail_migrations && matches!(m, Mutation::Migration(_)) {
            return ack(Err(io_err(
                &self.paths.journal,
                "injected failure of the state-migration write",
            )));
        }
        if let Mutation::Apply(Change::Keep { old }) = m {
            // A kept state is unchanged: until something else is written,
            // the base already says all a `keep` record would (a crash
            // replays to the same states). It goes out ahead of the next
            // record, whose acknowledgement covers it.
            let Some(kept) = current.kept_from(old) else {
                return ack(Err(io_err(
                    &self.paths.journal,
                    "a kept state is not in the journal's base (a bug in keel)",
                )));
            };
            self.seq += 1;
            self.deferred.push((self.seq, kept));
            return ack(Ok(()));
        }
        let (crypter, room) = (&self.crypter, &mut self.room);
        let Some(encoded) = current.with_entry(self.seq + 1, m, |e| room.encode_with(e, crypter))
        else {
            return ack(Err(io_err(
                &self.paths.journal,
                "a mutation names a state the journal does not know (a bug in keel)",
            )));
        };
        self.seq += 1;
        let mut bytes = match encoded {
            Ok(b) => b,
            Err(e) => return ack(Err(e.into())),
        };
        if !self.deferred.is_empty() {
            let mut all = Vec::with_capacity(self.deferred.len() * 64 + bytes.len());
            encode_keeps(&self.deferred, &mut all);
            self.deferred.clear();
            all.extend_from_slice(&bytes);
            bytes = all;
        }
        self.dirty = true;
        self.journal_bytes += bytes.len() as u64;
        if let Err(e) = self.send(WriterMsg::Append(bytes, ack)) {
            self.broken = Some(e.to_string());
            return;
        }
        // Compacting writes the whole base: blocking work, put off to
        // `upkeep`, which runs before the next mutation is applied.
        self.compact_due = self.journal_bytes > self.options.compact_bytes;
    }

    fn persist_may_block(&self) -> bool {
        // Records go to the writer thread over an unbounded channel.
        false
    }

    fn upkeep_due(&self) -> bool {
        self.compact_due
    }

    fn upkeep(&mut self, current: &mut SnapshotBuilder) {
        if std::mem::take(&mut self.compact_due) && self.broken.is_none() {
            if let Err(e) = self.compact(current, Compaction::Mid) {
                self.broken = Some(e.to_string());
            }
        }
    }

    fn rebase(&mut self, current: &mut SnapshotBuilder) -> Result<()> {
        self.compact(current, Compaction::Start).map(|_| ())
    }

    fn finish(&mut self, current: &mut SnapshotBuilder) -> Result<Deployment> {
        // The end's compaction supersedes one still put off.
        self.compact_due = false;
        if let Some(b) = &self.broken {
            return Err(io_err(&self.paths.journal, b.clone()));
        }
        // Nothing but `keep` records since the base was written, and the
        // journal empty: the base already is the result. Nothing is
        // written; the deferred records are dropped.
        if !self.dirty && !self.compacted_mid && self.journal_bytes == 0 {
            if let Some(d) = current.take_unchanged() {
                self.deferred.clear();
                return Ok(d);
            }
        }
        self.compact(current, Compaction::End)
    }

    fn io(&self) -> (u64, u64) {
        (self.counters.bytes(), self.counters.fsyncs())
    }
}

impl Drop for JournalPersister {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
