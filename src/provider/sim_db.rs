//! The simulated cloud kept in a shared log outside the file system (the
//! PostgreSQL backend's `keel_sim_cloud_log` table), so that keel processes
//! on several machines see one cloud.
//!
//! The log is the file's records (`sim_file.rs`), one per position, in
//! order. Where the file serializes writers with an OS lock held while the
//! change is decided, a [`CloudLog`] offers a conditional append instead:
//! the records go in only if the log still ends where this process last
//! read it. A writer catches up, decides, and tries to append; when
//! another process appended first it catches up and decides again. A
//! change is still one record, and a reader never sees half of one.
//!
//! Plaintext secrets are encrypted exactly as for the file before a record
//! leaves the process.

use std::path::Path;
use std::sync::Arc;

use super::sim_file::{CloudFile, CloudFileError, CloudFileStats, CloudState, Record};
use crate::secrets::Crypter;

/// How many times a change is decided again after losing the race to
/// append before it gives up (each loss means another writer progressed).
const MAX_ATTEMPTS: usize = 10_000;

/// A log of the simulated cloud's change records shared between processes
/// (implemented by the PostgreSQL backend). Positions are positive and
/// increase along the log; `0` is before the first record.
///
/// Methods block: the simulated cloud calls them off the async workers.
pub trait CloudLog: Send + Sync + std::fmt::Debug {
    /// Where the log is, for messages (never a password).
    fn label(&self) -> String;

    /// The records after position `after`, in order, with their positions.
    ///
    /// # Errors
    /// A message saying why the log could not be read.
    fn read_after(&self, after: i64) -> Result<Vec<(i64, String)>, String>;

    /// Appends `lines`, in order and all or none, only if the log's last
    /// position is still `last`: `Ok(Some(p))` with the position of the
    /// last line appended, `Ok(None)` when the log has moved on (nothing is
    /// appended).
    ///
    /// # Errors
    /// A message saying why the log could not be written (nothing is
    /// appended).
    fn append_if(&self, last: i64, lines: Vec<String>) -> Result<Option<i64>, String>;
}

/// A shared log as one process uses it.
#[derive(Debug)]
pub(super) struct DbLog {
    log: Arc<dyn CloudLog>,
    /// The position of the last record applied to the state.
    last: i64,
    /// Whether changes are written (a preview or `cloud list` only reads).
    pub(super) writable: bool,
    stats: CloudFileStats,
}

impl DbLog {
    /// `log`, not read yet.
    pub(super) fn new(log: Arc<dyn CloudLog>, writable: bool) -> Self {
        Self {
            log,
            last: 0,
            writable,
            stats: CloudFileStats::default(),
        }
    }

    /// The work counters.
    pub(super) fn stats(&self) -> CloudFileStats {
        self.stats
    }

    fn failed(&self, action: &'static str, message: String) -> CloudFileError {
        CloudFileError::Shared {
            place: self.log.label(),
            action,
            message,
        }
    }

    /// Brings `state` up to date with the log. Blocking.
    pub(super) fn catch_up(&mut self, state: &mut CloudState) -> Result<(), CloudFileError> {
        let rows = self
            .log
            .read_after(self.last)
            .map_err(|m| self.failed("read", m))?;
        // Decode everything first: a damaged record changes nothing.
        let mut records = Vec::with_capacity(rows.len());
        for (position, line) in &rows {
            let record: Record = match serde_json::from_str(line) {
                Ok(Record::KeelSimCloud(_)) | Err(_) => {
                    return Err(CloudFileError::SharedCorrupt {
                        place: self.log.label(),
                        position: *position,
                    })
                }
                Ok(r) => r,
            };
            records.push(record);
        }
        for r in records {
            state.apply(r);
        }
        if let Some((p, _)) = rows.last() {
            self.last = *p;
        }
        Ok(())
    }

    /// Makes a change: catches up, lets `plan` decide against the state,
    /// and appends its records if no other process appended meanwhile
    /// (else decides again). The records are applied once appended.
    /// Blocking.
    pub(super) fn change<R>(
        &mut self,
        state: &mut CloudState,
        crypter: Option<&Crypter>,
        plan: &mut impl FnMut(&CloudState) -> (R, Vec<Record>),
    ) -> Result<R, CloudFileError> {
        let label = self.log.label();
        for _ in 0..MAX_ATTEMPTS {
            self.catch_up(state)?;
            let (r, records) = plan(state);
            if records.is_empty() {
                return Ok(r);
            }
            let mut lines = Vec::with_capacity(records.len());
            let mut bytes = 0u64;
            for rec in &records {
                let mut buf = Vec::new();
                CloudFile::encode(Path::new(&label), rec, crypter, &mut buf)?;
                buf.pop(); // the newline
                bytes += buf.len() as u64;
                lines.push(
                    String::from_utf8(buf)
                        .map_err(|e| self.failed("encode a record for", e.to_string()))?,
                );
            }
            match self
                .log
                .append_if(self.last, lines)
                .map_err(|m| self.failed("append to", m))?
            {
                Some(last) => {
                    let n = records.len() as u64;
                    for rec in records {
                        state.apply(rec);
                    }
                    self.last = last;
                    self.stats.appended_records += n;
                    self.stats.appended_bytes += bytes;
                    return Ok(r);
                }
                None => continue,
            }
        }
        Err(self.failed(
            "append to",
            format!("other writers appended first {MAX_ATTEMPTS} times in a row; try again"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::MutexExt;
    use std::sync::Mutex;

    /// A log in memory, shared by the `DbLog`s of one test.
    #[derive(Debug, Default)]
    struct MemLog(Mutex<Vec<String>>);

    impl CloudLog for MemLog {
        fn label(&self) -> String {
            "memory".into()
        }
        fn read_after(&self, after: i64) -> Result<Vec<(i64, String)>, String> {
            let rows = self.0.locked();
            Ok(rows
                .iter()
                .enumerate()
                .skip(after as usize)
                .map(|(i, l)| (i as i64 + 1, l.clone()))
                .collect())
        }
        fn append_if(&self, last: i64, lines: Vec<String>) -> Result<Option<i64>, String> {
            let mut rows = self.0.locked();
            if rows.len() as i64 != last {
                return Ok(None);
            }
            rows.extend(lines);
            Ok(Some(rows.len() as i64))
        }
    }

    fn generation(urn: &str, next: u64) -> Record {
        Record::Generation {
            urn: urn.into(),
            next,
        }
    }

    #[test]
    fn a_writer_that_lost_the_race_decides_again_on_the_new_state() {
        let log: Arc<dyn CloudLog> = Arc::new(MemLog::default());
        let (mut a, mut b) = (DbLog::new(log.clone(), true), DbLog::new(log.clone(), true));
        let (mut sa, mut sb) = (CloudState::default(), CloudState::default());
        a.change(&mut sa, None, &mut |_| ((), vec![generation("u", 1)]))
            .unwrap();
        // b's first decision is made before a appends again: its append
        // loses, and it decides again on the state with a's record.
        let mut first = true;
        let mut seen = Vec::new();
        b.change(&mut sb, None, &mut |s| {
            if std::mem::take(&mut first) {
                a.change(&mut sa, None, &mut |_| ((), vec![generation("u", 5)]))
                    .unwrap();
            }
            let g = s.generations.get("u").copied().unwrap_or(0);
            seen.push(g);
            ((), vec![generation("u", g + 1)])
        })
        .unwrap();
        assert_eq!(seen, vec![1, 5]);
        a.catch_up(&mut sa).unwrap();
        assert_eq!(sa.generations["u"], 6);
        assert_eq!(log.read_after(0).unwrap().len(), 3);
        assert_eq!(b.stats().appended_records, 1);
    }

    #[test]
    fn a_damaged_record_is_refused_and_changes_nothing() {
        let mem = Arc::new(MemLog::default());
        mem.0
            .locked()
            .push("{\"generation\":{\"urn\":\"u\",\"next\":3}}".into());
        mem.0.locked().push("not json".into());
        let mut reader = DbLog::new(mem, false);
        let mut state = CloudState::default();
        let e = reader.catch_up(&mut state).unwrap_err();
        assert!(e.to_string().contains("record 2"), "{e}");
        assert!(state.generations.is_empty());
    }
}
