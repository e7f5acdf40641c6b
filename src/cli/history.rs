//! The operation history from the CLI side: [`recorded`] runs `keel up`,
//! `refresh` or `destroy` with a [`Recorder`] that appends the operation's
//! [`HistoryRecord`] to the stack's history once it ended, whatever its
//! result (succeeded, failed, cancelled: a plan that fails is recorded),
//! when it ran: it took the stack's lock and the engine started (a check
//! refusing it before then, such as bad input, another project's program
//! or a missing plugin, changes nothing, history included); and
//! `keel stack history [--json]`, newest first as Pulumi lists it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use super::display::out;
use super::CliError;
use crate::engine::{Cancel, EngineError, Outcome};
use crate::locks::MutexExt;
use crate::persist::fs::Holder;
use crate::persist::history::{HistoryRecord, ProgramIdentity};
use crate::persist::store::Store;

/// What an operation records while it runs.
#[derive(Debug, Default)]
struct Seen {
    /// It took the stack's lock.
    locked: bool,
    /// Steps completed per kind.
    counts: std::collections::BTreeMap<String, usize>,
    /// The watch for `keel cancel`, from the lock on.
    watch: Option<super::cancel::Watch>,
}

/// One operation's history record in the making.
#[derive(Debug)]
pub struct Recorder {
    backend: PathBuf,
    stack: String,
    kind: &'static str,
    program: Option<PathBuf>,
    start: SystemTime,
    cancel: Cancel,
    seen: Mutex<Seen>,
}

impl Recorder {
    /// The operation `kind` (`update`, `refresh`, `destroy`) of `stack`,
    /// running `program`, begins now.
    pub fn new(backend: &Path, stack: &str, kind: &'static str, program: Option<&Path>) -> Self {
        Self {
            backend: backend.to_owned(),
            stack: stack.to_owned(),
            kind,
            program: program.map(Path::to_owned),
            start: SystemTime::now(),
            cancel: Cancel::default(),
            seen: Mutex::default(),
        }
    }

    /// The operation's cancellation (the engine's, Ctrl-C's): a cancelled
    /// operation is recorded `cancelled`.
    pub fn cancel(&self) -> Cancel {
        self.cancel.clone()
    }

    /// The operation took the stack's lock: it will be recorded, and
    /// `keel cancel` can stop it from now until it ends.
    pub fn opened(&self) {
        let mut seen = self.seen.locked();
        seen.locked = true;
        if seen.watch.is_none() {
            seen.watch = Some(super::cancel::watch(
                &self.backend,
                &self.stack,
                self.cancel.clone(),
            ));
        }
    }

    /// The engine's result: its step counts are recorded.
    pub fn outcome(&self, result: &Result<Outcome, EngineError>) {
        let summary = match result {
            Ok(o) => &o.summary,
            Err(EngineError::Failed(o)) => &o.summary,
            Err(_) => return,
        };
        self.seen.locked().counts = summary
            .steps
            .iter()
            .filter_map(|(k, n)| match serde_json::to_value(k) {
                Ok(serde_json::Value::String(k)) => Some((k, *n)),
                _ => None,
            })
            .collect();
    }

    /// The record of the operation that ended with `result`.
    fn record(&self, result: &Result<(), CliError>) -> HistoryRecord {
        let rfc3339 = |t| humantime::format_rfc3339_millis(t).to_string();
        let outcome = match result {
            Ok(()) => "succeeded",
            Err(_) if self.cancel.is_cancelled() => "cancelled",
            Err(_) => "failed",
        };
        HistoryRecord {
            kind: self.kind.to_owned(),
            start: rfc3339(self.start),
            end: rfc3339(SystemTime::now()),
            result: outcome.to_owned(),
            error: result.as_ref().err().map(ToString::to_string),
            counts: self.seen.locked().counts.clone(),
            program: self.program.as_deref().map(identity).unwrap_or_default(),
            user: std::env::var("USER")
                .or_else(|_| std::env::var("USERNAME"))
                .unwrap_or_else(|_| "unknown".into()),
            host: Holder::me("").host,
            pid: std::process::id(),
            keel_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// Runs an operation with its [`Recorder`] and appends its record to the
/// stack's history when it ran (took the lock and started the engine). A history that cannot be written
/// is a warning: the operation's own result stands.
///
/// # Errors
/// The operation's.
pub fn recorded(
    backend: &Path,
    stack: &str,
    kind: &'static str,
    program: Option<&Path>,
    op: impl FnOnce(&Recorder) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let rec = Recorder::new(backend, stack, kind, program);
    let result = op(&rec);
    // The operation ended: no more cancel requests for it.
    drop(rec.seen.locked().watch.take());
    // Only what ran is recorded: a check refusing the operation before the
    // engine started (bad input, another project's program, a missing
    // plugin) changes nothing, history included.
    let ran = matches!(
        result,
        Ok(()) | Err(CliError::Failed { .. } | CliError::Engine(_))
    );
    if rec.seen.locked().locked && ran {
        let record = rec.record(&result);
        if let Err(e) = Store::new(&rec.backend).append_history(&rec.stack, &record) {
            eprintln!(
                "warning: the history of stack `{}` was not written: {e}",
                rec.stack
            );
        }
    }
    result
}

/// The identity of a program: its path, project and SHA-256 (of the file;
/// of a directory's listing).
fn identity(path: &Path) -> ProgramIdentity {
    let sha256 = if path.is_dir() {
        std::fs::read_dir(path).ok().map(|entries| {
            let mut files: Vec<(String, u64)> = entries
                .flatten()
                .filter_map(|e| {
                    let m = e.metadata().ok().filter(std::fs::Metadata::is_file)?;
                    Some((e.file_name().to_string_lossy().into_owned(), m.len()))
                })
                .collect();
            files.sort();
            let mut h = Sha256::new();
            for (name, size) in files {
                h.update(format!("{name}\t{size}\n").as_bytes());
            }
            hex::encode(h.finalize())
        })
    } else {
        std::fs::read(path)
            .ok()
            .map(|b| hex::encode(Sha256::digest(&b)))
    };
    ProgramIdentity {
        path: Some(path.display().to_string()),
        project: Some(super::config::project_name(path)),
        sha256,
    }
}

/// `keel stack history [--json] [--stack]`: newest first.
///
/// # Errors
/// [`CliError::BadStackName`], [`CliError::NoStack`], [`CliError::Persist`].
pub fn history(backend: &Path, stack: &str, json: bool) -> Result<(), CliError> {
    let b = super::commands::existing(backend, stack)?;
    let h = b.history(stack)?;
    for w in &h.warnings {
        eprintln!("warning: {w}");
    }
    // Versions count from 1, oldest first, as Pulumi numbers updates.
    let numbered: Vec<(usize, &HistoryRecord)> = h
        .records
        .iter()
        .enumerate()
        .map(|(i, r)| (i + 1, r))
        .rev()
        .collect();
    if json {
        let v: Vec<serde_json::Value> = numbered
            .iter()
            .map(|(n, r)| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                if let Some(m) = v.as_object_mut() {
                    m.insert("version".into(), (*n).into());
                }
                v
            })
            .collect();
        out(&serde_json::Value::Array(v).to_string());
        return Ok(());
    }
    if numbered.is_empty() {
        out(&format!("stack `{stack}` has no history yet"));
        return Ok(());
    }
    for (n, r) in numbered {
        let counts: Vec<String> = r.counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        out(&format!("Version {n}: {} {}", r.kind, r.result));
        out(&format!("    Start: {}  End: {}", r.start, r.end));
        if !counts.is_empty() {
            out(&format!("    Steps: {}", counts.join(", ")));
        }
        if let Some(e) = &r.error {
            let e = super::display::clean_text(e).replace('\n', "\n        ");
            out(&format!("    Error: {e}"));
        }
        if let Some(p) = &r.program.path {
            let sha = r.program.sha256.as_deref().unwrap_or("");
            out(&format!(
                "    Program: {} (project {}, sha256 {})",
                super::display::clean(p),
                r.program.project.as_deref().unwrap_or("?"),
                &sha[..sha.len().min(12)]
            ));
        }
        out(&format!(
            "    By: {}@{} (pid {}, keel {})",
            r.user, r.host, r.pid, r.keel_version
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_directory_is_identified_by_its_listing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("Pulumi.yaml"), "name: shop\n").unwrap();
        std::fs::write(dir.path().join("__main__.py"), "x = 1\n").unwrap();
        let one = identity(dir.path());
        assert_eq!(one.project.as_deref(), Some("shop"));
        assert_eq!(one.sha256.as_deref().map(str::len), Some(64));
        assert_eq!(
            identity(dir.path()),
            one,
            "the same listing, the same identity"
        );
        std::fs::write(dir.path().join("__main__.py"), "x = 12\n").unwrap();
        assert_ne!(identity(dir.path()).sha256, one.sha256, "a file resized");
        let file = dir.path().join("Pulumi.yaml");
        let f = identity(&file);
        assert_eq!(
            f.sha256.as_deref(),
            Some(hex::encode(Sha256::digest(b"name: shop\n")).as_str())
        );
    }
}
