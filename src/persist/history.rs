//! A stack's operation history: one [`HistoryRecord`] per operation that
//! took the stack's lock (`keel up`, `refresh`, `destroy`), whether it
//! succeeded, failed or was cancelled, kept by the backend.
//!
//! The file backend stores it per stack as JSON lines in
//! `stacks/<name>/history.jsonl`, oldest first, appended and fsynced one
//! whole line at a time. A torn last line (a crash mid-append) is ignored
//! on read with a warning, and closed by the next append so that its
//! record starts on a line of its own. The history lives in the stack's
//! directory, so it moves with it (`stack rm` keeps it under `backups/`;
//! `stack rename` copies it to the new stack).
//!
//! The methods are on [`Backend`], so another backend keeps the same
//! records its own way.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::backend::Backend;
use super::fs::{sync_dir, IoCounters};
use super::PersistError;

/// The history file in a stack's directory.
pub const HISTORY_FILE: &str = "history.jsonl";

/// One operation on a stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRecord {
    /// `update`, `refresh` or `destroy` (Pulumi's update kinds).
    pub kind: String,
    /// When it began (RFC 3339).
    pub start: String,
    /// When it ended (RFC 3339).
    pub end: String,
    /// `succeeded`, `failed` or `cancelled`.
    pub result: String,
    /// Why it failed (error texts hold no secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Steps completed per kind (`create`, `update`, `same`, ...), when the
    /// operation got as far as running steps.
    #[serde(default)]
    pub counts: BTreeMap<String, usize>,
    /// The program it ran.
    #[serde(default)]
    pub program: ProgramIdentity,
    /// Who ran it (`$USER`).
    pub user: String,
    /// The host it ran on.
    pub host: String,
    /// Its process ID.
    pub pid: u32,
    /// The keel version that ran it.
    pub keel_version: String,
}

/// Which program an operation ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgramIdentity {
    /// The `--program` path as given (none for a `refresh` or `destroy`
    /// without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The project name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Hex SHA-256 of the program file; for a program directory, of its
    /// listing (each top-level file's `name\tsize\n`, sorted by name), a
    /// cheap identity that changes when a file is added, removed or
    /// resized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A stack's history as read.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The records, oldest first.
    pub records: Vec<HistoryRecord>,
    /// Lines that were not records (a torn last line), for the user.
    pub warnings: Vec<String>,
}

impl Backend {
    /// The history file of a stack.
    pub fn history_path(&self, stack: &str) -> PathBuf {
        self.paths(stack).dir.join(HISTORY_FILE)
    }

    /// Appends `record` to the stack's history (one line, fsynced).
    ///
    /// # Errors
    /// [`PersistError::Io`] (the stack's directory must exist); the
    /// history then holds what it held.
    pub fn append_history(&self, stack: &str, record: &HistoryRecord) -> Result<(), PersistError> {
        let path = self.history_path(stack);
        let io = |source| PersistError::Io {
            path: path.clone(),
            source,
        };
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io)?;
        let mut line = Vec::new();
        // A torn last line is closed, so this record stays whole.
        if file.metadata().map_err(io)?.len() > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::End(-1)).map_err(io)?;
            file.read_exact(&mut last).map_err(io)?;
            if last[0] != b'\n' {
                line.push(b'\n');
            }
        }
        line.extend(serde_json::to_vec(record).unwrap_or_default());
        line.push(b'\n');
        file.write_all(&line).map_err(io)?;
        file.sync_data().map_err(io)?;
        if !existed {
            let dir = self.paths(stack).dir;
            sync_dir(&dir, &IoCounters::default())
                .map_err(|source| PersistError::Io { path: dir, source })?;
        }
        Ok(())
    }

    /// The stack's history, oldest first (none when it has no history
    /// file); a line that is not a record is skipped with a warning.
    ///
    /// # Errors
    /// [`PersistError::Io`] when the file exists but cannot be read.
    pub fn history(&self, stack: &str) -> Result<History, PersistError> {
        let path = self.history_path(stack);
        let text = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(History::default()),
            Err(source) => return Err(PersistError::Io { path, source }),
        };
        let mut history = History::default();
        let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
        let n = lines.len();
        for (i, line) in lines.into_iter().enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<HistoryRecord>(line) {
                Ok(r) => history.records.push(r),
                // The last piece has no newline after it: a torn append.
                Err(_) if i + 1 == n => history.warnings.push(format!(
                    "{}: the last record is torn (an interrupted write) and was ignored",
                    path.display()
                )),
                Err(e) => history.warnings.push(format!(
                    "{}: line {} is not a history record ({e}) and was ignored",
                    path.display(),
                    i + 1
                )),
            }
        }
        Ok(history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: &str) -> HistoryRecord {
        HistoryRecord {
            kind: kind.into(),
            start: "2026-01-01T00:00:00Z".into(),
            end: "2026-01-01T00:00:01Z".into(),
            result: "succeeded".into(),
            error: None,
            counts: BTreeMap::from([("create".to_owned(), 2)]),
            program: ProgramIdentity::default(),
            user: "u".into(),
            host: "h".into(),
            pid: 1,
            keel_version: "0".into(),
        }
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_closed_by_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let b = Backend::new(dir.path());
        std::fs::create_dir_all(b.paths("dev").dir).unwrap();
        assert!(b.history("dev").unwrap().records.is_empty());
        b.append_history("dev", &record("update")).unwrap();
        // A crash mid-append leaves half a line.
        let path = b.history_path("dev");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"kind\":\"upd").unwrap();
        let h = b.history("dev").unwrap();
        assert_eq!(h.records, vec![record("update")]);
        assert_eq!(h.warnings.len(), 1, "{:?}", h.warnings);
        assert!(h.warnings[0].contains("torn"), "{:?}", h.warnings);
        b.append_history("dev", &record("destroy")).unwrap();
        let h = b.history("dev").unwrap();
        assert_eq!(h.records, vec![record("update"), record("destroy")]);
        assert_eq!(h.warnings.len(), 1, "the torn line stays skipped");
        assert!(h.warnings[0].contains("line 2"), "{:?}", h.warnings);
    }

    #[test]
    fn a_missing_stack_directory_is_an_error_not_a_new_stack() {
        let dir = tempfile::tempdir().unwrap();
        let b = Backend::new(dir.path());
        assert!(b.append_history("gone", &record("update")).is_err());
        assert!(!b.paths("gone").dir.exists());
    }
}
