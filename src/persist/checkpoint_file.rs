//! The full-checkpoint persister: every mutation rewrites the whole
//! snapshot atomically (temp, fsync, rename, fsync of the directory; the
//! previous file kept as `.bak`). Simple and O(N) per step — Pulumi's
//! default, kept for comparison and for users who want one file.

use std::sync::Arc;

use super::backend::{write_base_with, StackPaths};
use super::fs::IoCounters;
use super::{Ack, Change, Mutation, PersistError, Persister, Result, SnapshotBuilder};
use crate::model::Deployment;
use crate::secrets::Crypter;

/// The full-checkpoint persister.
#[derive(Debug)]
pub struct CheckpointPersister {
    paths: StackPaths,
    seq: u64,
    counters: Arc<IoCounters>,
    saves: u64,
    fail_at: Option<u64>,
    broken: Option<String>,
    crypter: Arc<Crypter>,
    /// Something other than a `keep` was saved in this operation.
    dirty: bool,
}

impl CheckpointPersister {
    /// A persister rewriting the stack's base checkpoint. `seq` is the
    /// journal watermark the base carries (kept unchanged).
    pub fn new(paths: StackPaths, seq: u64, counters: Arc<IoCounters>) -> Self {
        Self {
            paths,
            seq,
            counters,
            saves: 0,
            fail_at: None,
            broken: None,
            crypter: Arc::default(),
            dirty: false,
        }
    }

    /// Encrypts secrets with `crypter` before every write.
    pub fn with_crypter(mut self, crypter: Arc<Crypter>) -> Self {
        self.crypter = crypter;
        self
    }

    /// Fails the `n`th save (1-based) and every save after it (tests).
    pub fn fail_at(mut self, n: u64) -> Self {
        self.fail_at = Some(n);
        self
    }

    /// Counts a save; fails it when it is the injected failure or one
    /// after it.
    fn count_save(&mut self) -> Result<()> {
        self.saves += 1;
        if self.fail_at == Some(self.saves) {
            self.broken = Some(format!("injected failure of save #{}", self.saves));
        }
        match &self.broken {
            Some(b) => Err(PersistError::Io {
                path: self.paths.base.clone(),
                source: std::io::Error::other(b.clone()),
            }),
            None => Ok(()),
        }
    }

    fn save(&mut self, d: &Deployment) -> Result<()> {
        self.count_save()?;
        // An integrity failure refuses the save; the previous file stays.
        crate::model::integrity::verify(d)?;
        write_base_with(
            &self.paths.base,
            d,
            self.seq,
            0,
            &self.counters,
            &self.crypter,
        )
    }
}

impl Persister for CheckpointPersister {
    fn persist(&mut self, m: &Mutation, current: &mut SnapshotBuilder, ack: Ack) {
        if matches!(m, Mutation::Apply(Change::Keep { .. })) {
            // A kept state is unchanged: the file already holds it, and
            // the next save writes the whole snapshot anyway.
            return ack(self.count_save());
        }
        self.dirty = true;
        let snapshot = match m {
            // Written as it will be once committed (it is applied after).
            Mutation::Migration(mm) => current.snapshot_after(mm),
            _ => current.snapshot(),
        };
        ack(self.save(&snapshot));
    }

    fn finish(&mut self, current: &mut SnapshotBuilder) -> Result<Deployment> {
        // Nothing but `keep`s: the file already is the result.
        if !self.dirty && self.broken.is_none() {
            if let Some(d) = current.take_unchanged() {
                return Ok(d);
            }
        }
        let snapshot = current.snapshot();
        self.save(&snapshot)?;
        Ok(snapshot)
    }

    fn io(&self) -> (u64, u64) {
        (self.counters.bytes(), self.counters.fsyncs())
    }
}
