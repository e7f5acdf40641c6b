//! The journal persister of the PostgreSQL backend: the file journal's
//! [`super::super::journal_file::JournalPersister`] with rows for appends.
//! A writer task on the database's thread group-commits: every record
//! queued while the previous transaction ran goes into the next one (up to
//! `batch_max`), one `keel_journal` row per record framed exactly as in
//! `journal.log`, and each mutation is acknowledged once its transaction
//! committed. Compaction (at the end of the operation, or when the journal
//! passes its size bound) is one transaction too, queued behind the
//! appends. All of it goes through the connection holding the stack's
//! advisory lock. After a failed transaction every later write fails (a
//! gap in the journal would not replay), and the operation ends with the
//! error; the stack keeps its last committed state.

use std::sync::Arc;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::conn::DbError;
use super::lock::{compact, insert_records, PgLock};
use crate::model::Deployment;
use crate::persist::backend::{base_bytes, StackPaths};
use crate::persist::fs::IoCounters;
use crate::persist::journal::{encode_with, Entry, EntryState, RecordRoom};
use crate::persist::journal_file::JournalOptions;
use crate::persist::{Ack, Compaction, Mutation, PersistError, Persister, Result, SnapshotBuilder};
use crate::secrets::Crypter;

type Reply = std::sync::mpsc::SyncSender<std::result::Result<(), DbError>>;

enum Msg {
    Append(i64, Vec<u8>, Ack),
    Compact(Vec<u8>, Vec<(i64, Vec<u8>)>, Reply),
}

/// The PostgreSQL journal persister.
pub struct PgJournalPersister {
    paths: StackPaths,
    seq: u64,
    tx: UnboundedSender<Msg>,
    counters: Arc<IoCounters>,
    journal_bytes: u64,
    options: JournalOptions,
    broken: Option<String>,
    crypter: Arc<Crypter>,
    /// The journal outgrew `compact_bytes`: [`Persister::upkeep`]
    /// compacts it before the next mutation.
    compact_due: bool,
    /// The room the next record's buffer is given.
    room: RecordRoom,
}

impl std::fmt::Debug for PgJournalPersister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgJournalPersister")
            .field("stack", &self.paths.dir)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

fn err(paths: &StackPaths, message: impl std::fmt::Display) -> PersistError {
    PersistError::Database {
        place: format!("{} (writing the journal)", paths.dir.display()),
        message: message.to_string(),
    }
}

async fn writer(
    client: Arc<tokio::sync::Mutex<tokio_postgres::Client>>,
    stack: String,
    mut rx: UnboundedReceiver<Msg>,
    counters: Arc<IoCounters>,
    batch_max: usize,
    paths: StackPaths,
) {
    let mut failed: Option<DbError> = None;
    let mut pending: Option<Msg> = None;
    loop {
        let first = match pending.take() {
            Some(m) => m,
            None => match rx.recv().await {
                Some(m) => m,
                None => return,
            },
        };
        let mut batch: Vec<(i64, Vec<u8>, Ack)> = Vec::new();
        match first {
            Msg::Append(s, b, a) => batch.push((s, b, a)),
            other => pending = Some(other),
        }
        while pending.is_none() && !batch.is_empty() && batch.len() < batch_max {
            match rx.try_recv() {
                Ok(Msg::Append(s, b, a)) => batch.push((s, b, a)),
                Ok(other) => pending = Some(other),
                Err(_) => break,
            }
        }
        if !batch.is_empty() {
            let result = match &failed {
                Some(f) => Err(f.clone()),
                None => {
                    let records: Vec<(i64, Vec<u8>)> =
                        batch.iter().map(|(s, b, _)| (*s, b.clone())).collect();
                    let bytes: usize = records.iter().map(|(_, b)| b.len()).sum();
                    let mut c = client.lock().await;
                    let r = async {
                        let tx = c.transaction().await?;
                        insert_records(&tx, &stack, records).await?;
                        tx.commit().await?;
                        Ok::<(), DbError>(())
                    }
                    .await;
                    match r {
                        Ok(()) => {
                            counters.wrote(bytes);
                            counters.synced();
                            Ok(())
                        }
                        Err(e) => {
                            failed = Some(e.clone());
                            Err(e)
                        }
                    }
                }
            };
            for (_, _, ack) in batch {
                ack(result.clone().map_err(|e| err(&paths, e)));
            }
            continue;
        }
        if let Some(Msg::Compact(base, fresh, reply)) = pending.take() {
            let r = match &failed {
                Some(f) => Err(f.clone()),
                None => {
                    let bytes = base.len() + fresh.iter().map(|(_, b)| b.len()).sum::<usize>();
                    let mut c = client.lock().await;
                    let r = compact(&mut c, &stack, base, fresh).await;
                    if r.is_ok() {
                        counters.wrote(bytes);
                        counters.synced();
                    }
                    r
                }
            };
            let _ = reply.send(r);
        }
    }
}

impl PgJournalPersister {
    /// A journal persister for the stack `lock` holds, after `seq`.
    ///
    /// # Errors
    /// [`PersistError::Database`] when the writer cannot start.
    pub fn open(
        lock: &PgLock,
        paths: StackPaths,
        seq: u64,
        options: JournalOptions,
        counters: Arc<IoCounters>,
    ) -> Result<Self> {
        let (tx, rx) = unbounded_channel();
        let (client, stack, c, p) = (
            lock.client(),
            lock.stack.clone(),
            counters.clone(),
            paths.clone(),
        );
        let batch_max = options.batch_max.max(1);
        lock.db
            .spawn(move |_| writer(client, stack, rx, c, batch_max, p))
            .map_err(|e| err(&paths, e))?;
        Ok(Self {
            paths,
            seq,
            tx,
            counters,
            journal_bytes: 0,
            options,
            broken: None,
            compact_due: false,
            crypter: Arc::default(),
            room: RecordRoom::default(),
        })
    }

    /// Encrypts secrets with `crypter` in every entry and base written.
    pub fn with_crypter(mut self, crypter: Arc<Crypter>) -> Self {
        self.crypter = crypter;
        self
    }

    /// Writes the current deployment as the new base and a fresh journal
    /// holding only the operations still in flight
    /// ([`SnapshotBuilder::compact_with`] says what `when` changes).
    fn compact(&mut self, current: &mut SnapshotBuilder, when: Compaction) -> Result<Deployment> {
        current.compact_with(when, |committed, split, current| {
            self.write_compaction(committed, split, current)
        })
    }

    fn write_compaction(
        &mut self,
        committed: &Deployment,
        split: usize,
        current: &SnapshotBuilder,
    ) -> Result<()> {
        crate::model::integrity::verify(committed)?;
        let base = base_bytes(committed, self.seq, split, &self.crypter)?;
        let mut fresh = Vec::new();
        let mut seq = self.seq;
        let mut fresh_bytes = 0u64;
        for (op, ty, state) in current.in_flight() {
            seq += 1;
            let bytes = encode_with(
                &Entry::Begin {
                    seq,
                    op,
                    ty,
                    state: EntryState::Borrowed(state),
                },
                &self.crypter,
            )?;
            fresh_bytes += bytes.len() as u64;
            fresh.push((i64::try_from(seq).unwrap_or(i64::MAX), bytes));
        }
        let (reply, rx) = std::sync::mpsc::sync_channel(1);
        self.tx
            .send(Msg::Compact(base, fresh, reply))
            .map_err(|_| err(&self.paths, "the journal writer stopped"))?;
        rx.recv()
            .map_err(|_| err(&self.paths, "the journal writer stopped"))?
            .map_err(|e| err(&self.paths, e))?;
        self.seq = seq;
        self.journal_bytes = fresh_bytes;
        Ok(())
    }
}

impl Persister for PgJournalPersister {
    fn persist(&mut self, m: &Mutation, current: &mut SnapshotBuilder, ack: Ack) {
        if let Some(b) = &self.broken {
            return ack(Err(err(&self.paths, b)));
        }
        let (crypter, room) = (&self.crypter, &mut self.room);
        let Some(encoded) = current.with_entry(self.seq + 1, m, |e| room.encode_with(e, crypter))
        else {
            return ack(Err(err(
                &self.paths,
                "a mutation names a state the journal does not know (a bug in keel)",
            )));
        };
        self.seq += 1;
        let bytes = match encoded {
            Ok(b) => b,
            Err(e) => return ack(Err(e.into())),
        };
        self.journal_bytes += bytes.len() as u64;
        let seq = i64::try_from(self.seq).unwrap_or(i64::MAX);
        if let Err(tokio::sync::mpsc::error::SendError(Msg::Append(_, _, ack))) =
            self.tx.send(Msg::Append(seq, bytes, ack))
        {
            self.broken = Some("the journal writer stopped".into());
            return ack(Err(err(&self.paths, "the journal writer stopped")));
        }
        // Compacting writes the whole base: blocking work, put off to
        // `upkeep`, which runs before the next mutation is applied.
        self.compact_due = self.journal_bytes > self.options.compact_bytes;
    }

    fn persist_may_block(&self) -> bool {
        // Records go to the writer task over an unbounded channel.
        false
    }

    fn upkeep_due(&self) -> bool {
        self.compact_due
    }

    fn upkeep(&mut self, current: &mut SnapshotBuilder) {
        if std::mem::take(&mut self.compact_due) && self.broken.is_none() {
            if let Err(e) = self.compact(current, Compaction::Mid) {
                self.broken = Some(match e {
                    PersistError::Database { message, .. } => message,
                    other => other.to_string(),
                });
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
            return Err(err(&self.paths, b));
        }
        self.compact(current, Compaction::End)
    }

    fn io(&self) -> (u64, u64) {
        (self.counters.bytes(), self.counters.fsyncs())
    }
}
