//! `keel state delete|protect|unprotect|rename|move|repair|edit`: each
//! validates its input, takes the stack's lock (both stacks' for `move`,
//! in name order), computes the new state with [`super::surgery`],
//! verifies it (the integrity verifier and the checks of `stack import`),
//! asks for confirmation (`--yes`), and writes it as `stack import` does:
//! a new base checkpoint (atomically, the previous one kept as
//! `checkpoint.json.bak`) and an empty journal. A refused edit writes
//! nothing.

use std::path::{Path, PathBuf};

use clap::Args;

use super::args::StackArg;
use super::commands::existing;
use super::confirm::confirm;
use super::display::out;
use super::surgery::{self, EditError, Selection};
use super::CliError;
use crate::model::{CheckpointFile, Deployment};
use crate::persist::backend::{BackendError, Loaded, StackPaths};
use crate::persist::store::{Store, StoreLock};

/// `keel state delete`.
#[derive(Debug, Clone, Args)]
pub struct DeleteArgs {
    /// The resource's URN.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub urn: Option<String>,
    /// Delete every resource of the stack.
    #[arg(long)]
    pub all: bool,
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Delete a protected resource too.
    #[arg(long)]
    pub force: bool,
    /// Also delete the resources that depend on it (children, dependents,
    /// users of a provider).
    #[arg(long)]
    pub target_dependents: bool,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
    /// Proceed without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `keel state protect`.
#[derive(Debug, Clone, Args)]
pub struct ProtectArgs {
    /// The resources' URNs.
    #[arg(required = true)]
    pub urns: Vec<String>,
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
    /// Proceed without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `keel state unprotect`.
#[derive(Debug, Clone, Args)]
pub struct UnprotectArgs {
    /// The resources' URNs.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub urns: Vec<String>,
    /// Unprotect every resource of the stack.
    #[arg(long)]
    pub all: bool,
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
    /// Proceed without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `keel state rename`.
#[derive(Debug, Clone, Args)]
pub struct RenameArgs {
    /// The resource's URN.
    pub urn: String,
    /// Its new name (the URN's last part).
    pub new_name: String,
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Print what changed as JSON.
    #[arg(long)]
    pub json: bool,
    /// Proceed without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `keel state move`.
#[derive(Debug, Clone, Args)]
pub struct MoveArgs {
    /// The URNs of the resources to move (their children move with them).
    #[arg(required = true)]
    pub urns: Vec<String>,
    /// The stack to move them from.
    #[arg(long, value_name = "NAME")]
    pub source: String,
    /// The stack to move them to (made if it does not exist).
    #[arg(long, value_name = "NAME")]
    pub dest: String,
    /// Move the resources' parents too.
    #[arg(long)]
    pub include_parents: bool,
    /// Print the move's report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Proceed without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `keel state repair`.
#[derive(Debug, Clone, Args)]
pub struct RepairArgs {
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Print what would be repaired and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Proceed without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `keel state edit`.
#[derive(Debug, Clone, Args)]
pub struct EditArgs {
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Proceed without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// A stack locked for an edit, with its state as read.
struct Locked {
    stack: String,
    loaded: Read,
    lock: StoreLock,
}

/// A stack's state as read: the deployment, the journal watermark it
/// includes and how many journal entries were replayed onto the base.
struct Read {
    deployment: Deployment,
    seq: u64,
    replayed: usize,
}

impl From<Loaded> for Read {
    fn from(l: Loaded) -> Self {
        Self {
            deployment: l.deployment,
            seq: l.seq,
            replayed: l.replayed,
        }
    }
}

/// Locks `stack` for `command` and reads its state (secrets stay as
/// stored: no passphrase is needed, and none is written in plaintext).
fn lock(b: &Store, stack: &str, command: &str) -> Result<(StackPaths, StoreLock), CliError> {
    Ok((b.paths(stack), b.lock(stack, command)?))
}

fn open(b: &Store, stack: &str, command: &str) -> Result<Locked, CliError> {
    let (_, lock) = lock(b, stack, command)?;
    let loaded = b.load(stack)?.into();
    Ok(Locked {
        stack: stack.to_owned(),
        loaded,
        lock,
    })
}

/// Verifies `d` as `stack import` does (integrity, shared IDs, depth,
/// resources of this stack).
fn check(stack: &str, d: &Deployment) -> Result<(), CliError> {
    let fail = |message: String| CliError::Verify {
        what: format!("the new state of stack `{stack}`"),
        message,
    };
    crate::model::integrity::verify(d).map_err(|e| fail(e.to_string()))?;
    super::import::check(d).map_err(|e| fail(e.to_string()))?;
    if let Some(r) = d.resources.iter().find(|r| r.urn.stack() != stack) {
        return Err(fail(format!(
            "{} belongs to stack `{}`",
            r.urn,
            r.urn.stack()
        )));
    }
    Ok(())
}

impl Locked {
    /// Verifies `d` and writes it as the stack's state: the state as it
    /// was (base plus journal) is first folded into the base, so the
    /// backup `checkpoint.json.bak` holds exactly what is replaced; then
    /// the new base is written and the journal emptied.
    fn write(&self, d: &Deployment) -> Result<(), CliError> {
        check(&self.stack, d)?;
        // A plaintext secret (put there by `state edit`) is encrypted on the
        // way in, as `stack import` does, or refused without a passphrase;
        // a stack of another provider (`service`, ...) takes keel's
        // passphrase provider, or is refused if it keeps ciphertexts of its
        // own (see `Crypter::for_plaintext`). Refused before anything is
        // written.
        let (d, crypter) = if crate::secrets::Crypter::has_plaintext(d) {
            let secrets = |source| CliError::Secrets {
                stack: self.stack.clone(),
                source,
            };
            let passphrase = crate::secrets::passphrase_from_env()
                .map_err(secrets)?
                .ok_or_else(|| secrets(crate::secrets::SecretsError::PlaintextImport))?;
            let mut copy = d.clone();
            let crypter =
                crate::secrets::Crypter::for_plaintext(&mut copy, &passphrase).map_err(secrets)?;
            (std::borrow::Cow::Owned(copy), crypter)
        } else {
            (
                std::borrow::Cow::Borrowed(d),
                crate::secrets::Crypter::default(),
            )
        };
        if self.loaded.replayed > 0 || self.lock.has_journal()? {
            self.lock.write_state(
                &self.loaded.deployment,
                self.loaded.seq,
                &crate::secrets::Crypter::default(),
            )?;
        }
        self.lock.write_state(&d, self.loaded.seq, &crypter)?;
        Ok(())
    }
}

fn edit_err(stack: &str) -> impl Fn(EditError) -> CliError + '_ {
    move |source| CliError::Edit {
        stack: stack.to_owned(),
        source,
    }
}

/// `keel state delete URN`.
///
/// # Errors
/// [`CliError::NoStack`], [`CliError::Edit`] (unknown URN, protected,
/// dependents), [`CliError::Backend`] (locked), [`CliError::NeedsYes`],
/// [`CliError::Verify`], [`CliError::Persist`].
pub fn delete(backend: &Path, a: DeleteArgs) -> Result<(), CliError> {
    let stack = a.stack.name().to_owned();
    let b = existing(backend, &stack)?;
    let l = open(&b, &stack, "keel state delete")?;
    let mut d = l.loaded.deployment.clone();
    let gone = match &a.urn {
        Some(urn) => surgery::delete(&mut d, &stack, urn, a.force, a.target_dependents),
        None => surgery::delete_all(&mut d, a.force),
    }
    .map_err(edit_err(&stack))?;
    let list: Vec<String> = gone.iter().map(ToString::to_string).collect();
    confirm(
        "keel state delete",
        &format!(
            "Delete {} from the state of stack `{stack}` (their cloud objects are left as they are)?",
            list.join(", ")
        ),
        a.yes,
    )?;
    l.write(&d)?;
    if a.json {
        out(&serde_json::json!({"stack": stack, "deleted": list}).to_string());
    } else {
        for u in &list {
            out(&format!("deleted {u}"));
        }
    }
    Ok(())
}

/// `keel state protect URN...` / `keel state unprotect URN...|--all`.
///
/// # Errors
/// As [`delete`].
pub fn protect(
    backend: &Path,
    stack: &str,
    which: Selection,
    on: bool,
    (yes, json): (bool, bool),
) -> Result<(), CliError> {
    let command = if on {
        "keel state protect"
    } else {
        "keel state unprotect"
    };
    let b = existing(backend, stack)?;
    let l = open(&b, stack, command)?;
    let mut d = l.loaded.deployment.clone();
    let changed = surgery::set_protect(&mut d, stack, &which, on).map_err(edit_err(stack))?;
    let verb = if on { "protected" } else { "unprotected" };
    let report = |changed: &[crate::model::Urn]| {
        let list: Vec<String> = changed.iter().map(ToString::to_string).collect();
        out(&serde_json::json!({"stack": stack, verb: list}).to_string());
    };
    if changed.is_empty() {
        if json {
            report(&changed);
        } else {
            out(&format!("nothing to change: already {verb}"));
        }
        return Ok(());
    }
    confirm(
        command,
        &format!(
            "Mark {} resource(s) of stack `{stack}` {verb}?",
            changed.len()
        ),
        yes,
    )?;
    l.write(&d)?;
    if json {
        report(&changed);
    } else {
        for u in &changed {
            out(&format!("{verb} {u}"));
        }
    }
    Ok(())
}

/// `keel state rename URN NEW-NAME`.
///
/// # Errors
/// As [`delete`]; [`CliError::Edit`] for a bad or taken name.
pub fn rename(backend: &Path, a: RenameArgs) -> Result<(), CliError> {
    let stack = a.stack.name().to_owned();
    let b = existing(backend, &stack)?;
    let l = open(&b, &stack, "keel state rename")?;
    let mut d = l.loaded.deployment.clone();
    let new = surgery::rename(&mut d, &stack, &a.urn, &a.new_name).map_err(edit_err(&stack))?;
    if new.as_str() == a.urn {
        out("nothing to change: the resource already has this name");
        return Ok(());
    }
    confirm(
        "keel state rename",
        &format!("Rename {} to {new}?", a.urn),
        a.yes,
    )?;
    l.write(&d)?;
    if a.json {
        out(&serde_json::json!({"stack": stack, "from": a.urn, "to": new.as_str()}).to_string());
    } else {
        out(&format!("renamed {} to {new}", a.urn));
    }
    Ok(())
}

/// The state of a stack whose base checkpoint breaks an integrity rule,
/// read without verifying it (for `state repair`). A stack with journal
/// entries on top of such a base is refused.
/// The stack's base as stored, without verification, and its watermark:
/// what `state repair` starts from when the base fails integrity. Refused
/// when journal records sit on top of it (they cannot be replayed onto an
/// invalid base).
fn load_unverified(
    b: &Store,
    l_paths: &StackPaths,
    stack: &str,
) -> Result<(Deployment, u64), CliError> {
    let (bytes, journal) = match b {
        Store::File(_) => {
            let bytes = std::fs::read(&l_paths.base).map_err(|source| CliError::ReadInput {
                path: l_paths.base.clone(),
                source,
            })?;
            let journal = std::fs::metadata(&l_paths.journal).is_ok_and(|m| m.len() > 0);
            (bytes, journal)
        }
        Store::Pg(pg) => {
            let (base, journal, _) = pg.rows(stack)?;
            (base.unwrap_or_default(), !journal.is_empty())
        }
    };
    let file = CheckpointFile::from_slice(&bytes).map_err(|source| CliError::BadCheckpoint {
        path: l_paths.base.clone(),
        source,
    })?;
    let seq = file
        .extra
        .get(crate::persist::backend::WATERMARK_KEY)
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    if journal {
        return Err(CliError::Verify {
            what: format!("stack `{stack}`"),
            message: format!(
                "its base checkpoint is invalid and its journal {} holds entries on top of it: `keel state repair` cannot replay them; export and fix the state by hand",
                l_paths.journal.display()
            ),
        });
    }
    Ok((file.into_deployment(), seq))
}

/// `keel state repair [--dry-run]`.
///
/// # Errors
/// [`CliError::Edit`] for a state that cannot be repaired automatically;
/// as [`delete`].
pub fn repair(backend: &Path, a: RepairArgs) -> Result<(), CliError> {
    let stack = a.stack.name().to_owned();
    let b = existing(backend, &stack)?;
    let (paths, lock) = lock(&b, &stack, "keel state repair")?;
    let l = match b.load(&stack) {
        Ok(loaded) => Locked {
            stack: stack.clone(),
            loaded: loaded.into(),
            lock,
        },
        Err(BackendError::Checkpoint { source, .. })
            if matches!(*source, crate::model::CheckpointError::Integrity(_)) =>
        {
            // No journal on top (refused otherwise): nothing to fold; the
            // backup keeps the invalid base written over.
            let (deployment, seq) = load_unverified(&b, &paths, &stack)?;
            let loaded = Read {
                deployment,
                seq,
                replayed: 0,
            };
            Locked {
                stack: stack.clone(),
                loaded,
                lock,
            }
        }
        Err(e) => return Err(e.into()),
    };
    let mut d = l.loaded.deployment.clone();
    let report = surgery::repair(&mut d).map_err(edit_err(&stack))?;
    if a.json {
        let mut j = report.to_json();
        j["dryRun"] = a.dry_run.into();
        j["changed"] = (!report.is_empty()).into();
        out(&j.to_string());
    } else if report.is_empty() {
        out(&format!(
            "stack `{stack}`: the state is already valid; nothing to repair"
        ));
    } else {
        for line in report.lines() {
            out(&line);
        }
    }
    if report.is_empty() || a.dry_run {
        return Ok(());
    }
    confirm(
        "keel state repair",
        &format!("Write the repaired state of stack `{stack}`?"),
        a.yes,
    )?;
    l.write(&d)?;
    if !a.json {
        out(&format!("stack `{stack}`: state repaired"));
    }
    Ok(())
}

/// `keel state edit`: the state as JSON in `$EDITOR`; written back once it
/// verifies.
///
/// # Errors
/// [`CliError::BadFlag`] without `$EDITOR` or when the editor fails;
/// [`CliError::BadCheckpoint`], [`CliError::Import`],
/// [`CliError::StackMismatch`] for an edited file that cannot be the
/// stack's state (nothing is written); as [`delete`].
pub fn edit(backend: &Path, a: EditArgs) -> Result<(), CliError> {
    let stack = a.stack.name().to_owned();
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|e| !e.trim().is_empty())
        .or_else(|| std::env::var("EDITOR").ok())
        .filter(|e| !e.trim().is_empty())
        .ok_or_else(|| CliError::BadFlag {
            flag: "$EDITOR",
            message: "set EDITOR (or VISUAL) to the editor to run".into(),
        })?;
    let b = existing(backend, &stack)?;
    let l = open(&b, &stack, "keel state edit")?;
    let mut bytes = CheckpointFile::export(l.loaded.deployment.clone()).to_vec_pretty();
    bytes.push(b'\n');
    let tmp = tempfile::Builder::new()
        .prefix(&format!("keel-state-{stack}-"))
        .suffix(".json")
        .tempfile()
        .map_err(|source| CliError::Write {
            path: std::env::temp_dir(),
            source,
        })?;
    let path: PathBuf = tmp.path().to_owned();
    std::fs::write(&path, &bytes).map_err(|source| CliError::Write {
        path: path.clone(),
        source,
    })?;
    let mut words = editor.split_whitespace();
    let program = words.next().unwrap_or_default();
    let status = std::process::Command::new(program)
        .args(words)
        .arg(&path)
        .status()
        .map_err(|e| CliError::BadFlag {
            flag: "$EDITOR",
            message: format!("cannot run `{editor}`: {e}"),
        })?;
    if !status.success() {
        return Err(CliError::BadFlag {
            flag: "$EDITOR",
            message: format!("`{editor}` failed ({status}); nothing was changed"),
        });
    }
    let edited = std::fs::read(&path).map_err(|source| CliError::ReadInput {
        path: path.clone(),
        source,
    })?;
    let d = super::commands::checked_state(&path, &edited, &stack)?;
    let (added, removed, changed) = surgery::diff_summary(&l.loaded.deployment, &d);
    if added.is_empty() && removed.is_empty() && changed.is_empty() && d == l.loaded.deployment {
        out(&format!("stack `{stack}`: no changes"));
        return Ok(());
    }
    for (sign, list) in [("+", &added), ("-", &removed), ("~", &changed)] {
        for u in list {
            out(&format!("{sign} {u}"));
        }
    }
    confirm(
        "keel state edit",
        &format!("Write the edited state of stack `{stack}`?"),
        a.yes,
    )?;
    l.write(&d)?;
    out(&format!(
        "stack `{stack}`: state written ({} added, {} removed, {} changed)",
        added.len(),
        removed.len(),
        changed.len()
    ));
    Ok(())
}

/// `keel state move --source S --dest D URN...`.
///
/// # Errors
/// [`CliError::NoStack`] for a missing source; [`CliError::Edit`];
/// [`CliError::Unsupported`] for moving secrets between stacks whose
/// secrets providers differ; as [`delete`].
pub fn move_resources(backend: &Path, a: MoveArgs) -> Result<(), CliError> {
    super::commands::check_stack(&a.dest)?;
    let b = existing(backend, &a.source)?;
    let new_dest = !b.exists(&a.dest)?;
    let result = move_locked(&b, &a);
    if result.is_err() && new_dest {
        // A destination made for this move (by its lock) and never
        // written: gone again. One that was written stays (the source's
        // write failed after it: tracked twice, never lost).
        match &b {
            Store::File(f) => {
                let paths = f.paths(&a.dest);
                if !paths.base.exists() && !paths.journal.exists() {
                    let _ = std::fs::remove_dir_all(&paths.dir);
                }
            }
            Store::Pg(pg) => {
                if let Err(e) = pg.remove_if_empty(&a.dest) {
                    eprintln!("warning: the empty stack `{}` stays: {e}", a.dest);
                }
            }
        }
    }
    result
}

fn move_locked(b: &Store, a: &MoveArgs) -> Result<(), CliError> {
    if a.source == a.dest {
        return Err(edit_err(&a.source)(EditError::SameStack(a.source.clone())));
    }
    // Both locks, in name order (two moves in opposite directions cannot
    // each hold one and wait for the other; keel never waits anyway).
    let (first, second) = if a.source < a.dest {
        (&a.source, &a.dest)
    } else {
        (&a.dest, &a.source)
    };
    let l1 = open(b, first, "keel state move")?;
    let l2 = open(b, second, "keel state move")?;
    let (src_l, dst_l) = if first == &a.source {
        (&l1, &l2)
    } else {
        (&l2, &l1)
    };
    let mut src = src_l.loaded.deployment.clone();
    let mut dst = dst_l.loaded.deployment.clone();
    let mut warnings = Vec::new();
    let report = surgery::move_resources(
        &mut src,
        &a.source,
        &mut dst,
        &a.dest,
        &a.urns,
        a.include_parents,
        &mut warnings,
    )
    .map_err(edit_err(&a.source))?;
    // Ciphertexts are only readable under the provider that made them.
    let moved_secrets = dst
        .resources
        .iter()
        .filter(|r| r.urn.stack() == a.dest)
        .any(|r| {
            let one = Deployment {
                resources: vec![r.clone()],
                ..Deployment::default()
            };
            crate::secrets::Crypter::has_ciphertext(&one)
        });
    if moved_secrets {
        if dst.secrets_providers.ty.is_empty() {
            dst.secrets_providers = src.secrets_providers.clone();
        } else if dst.secrets_providers != src.secrets_providers {
            return Err(CliError::Unsupported(format!(
                "moving encrypted secrets from stack `{}` to stack `{}`, whose secrets providers differ,",
                a.source, a.dest
            )));
        }
    }
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let show_broken = |title: &str, list: &[surgery::BrokenReference]| {
        if !list.is_empty() {
            eprintln!("{title}");
            for r in list {
                eprintln!("  - {}'s {} {} (dropped)", r.urn, r.kind, r.target);
            }
        }
    };
    show_broken(
        &format!(
            "resources staying in `{}` referred to moved resources:",
            a.source
        ),
        &report.broken_in_source,
    );
    show_broken(
        &format!(
            "moved resources referred to resources staying in `{}`:",
            a.source
        ),
        &report.broken_in_dest,
    );
    confirm(
        "keel state move",
        &format!(
            "Move {} resource(s) from stack `{}` to stack `{}`?",
            report.moved.len(),
            a.source,
            a.dest
        ),
        a.yes,
    )?;
    check(&a.dest, &dst)?;
    check(&a.source, &src)?;
    // The destination first: if the source's write fails, the resources
    // are tracked twice rather than lost.
    dst_l.write(&dst)?;
    src_l.write(&src)?;
    if a.json {
        out(&serde_json::json!({
            "source": a.source,
            "dest": a.dest,
            "moved": report.moved,
            "providersCopied": report.providers_copied,
            "brokenInSource": report.broken_in_source.iter().map(|r| serde_json::json!({"urn": r.urn, "kind": r.kind, "target": r.target})).collect::<Vec<_>>(),
            "brokenInDest": report.broken_in_dest.iter().map(|r| serde_json::json!({"urn": r.urn, "kind": r.kind, "target": r.target})).collect::<Vec<_>>(),
        })
        .to_string());
    } else {
        for u in &report.moved {
            out(&format!("moved {u}"));
        }
        for u in &report.providers_copied {
            out(&format!("copied provider {u}"));
        }
    }
    Ok(())
}
