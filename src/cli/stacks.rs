//! `keel stack ls|select|init|rm|rename|output` (Pulumi's names and flags):
//! listing and selecting the backend's stacks, making, removing and
//! renaming them, and printing a stack's outputs.
//!
//! The commands that change a stack (`rm`, `rename`) validate their input,
//! ask for confirmation (`--yes` skips it; without a terminal on stdin
//! `--yes` is required), take the stack's lock, and keep what they replace:
//! the stack's directory is moved whole under the backend's `backups/`,
//! never deleted. `rename` verifies the renamed state before writing it.

use super::confirm::confirm;
use std::path::Path;

use super::commands::{check_stack, existing, secrets_first, with_passphrase};
use super::config::config_dir;
use super::display::{mask, out, show_value};
use super::CliError;
use crate::migrate::rewrite::{identity_in, rewrite, SuccessorMap};
use crate::model::property::Secret;
use crate::model::{Deployment, PropertyMap, PropertyValue, State, Urn};
use crate::persist::backend::write_base;
use crate::persist::fs::{atomic_write, IoCounters};
use crate::persist::store::Store;
use crate::persist::PersistError;

/// One row of `keel stack ls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackRow {
    /// The stack's name.
    pub name: String,
    /// Whether it is the selected stack.
    pub current: bool,
    /// When its last operation ended (its history's last record), else
    /// began (the state's manifest time), if any ran.
    pub last_update: Option<String>,
    /// Whether an operation holds it now.
    pub update_in_progress: bool,
    /// How many resources its state holds; `None` when it cannot be read.
    pub resource_count: Option<usize>,
}

/// The rows of `keel stack ls`; stacks whose state cannot be read are
/// listed with no count and a warning on stderr.
///
/// # Errors
/// [`CliError::Persist`] when the backend cannot be read.
pub fn rows(backend: &Path) -> Result<Vec<StackRow>, CliError> {
    let b = Store::new(backend);
    let selected = b.selected()?;
    let mut rows = Vec::new();
    for name in b.stacks()? {
        let (last_update, resource_count) = match b.load(&name) {
            Ok(l) => (
                Some(l.deployment.manifest.time.clone()).filter(|t| !t.is_empty()),
                Some(l.deployment.resources.len()),
            ),
            Err(e) => {
                eprintln!("warning: {e}");
                (None, None)
            }
        };
        let ended = b
            .history(&name)
            .ok()
            .and_then(|h| h.records.last().map(|r| r.end.clone()));
        let update_in_progress = b.holder(&name).ok().flatten().is_some();
        rows.push(StackRow {
            current: selected.as_deref() == Some(name.as_str()),
            update_in_progress,
            name,
            last_update: ended.or(last_update),
            resource_count,
        });
    }
    Ok(rows)
}

/// `keel stack ls [--json]`.
///
/// # Errors
/// [`CliError::Persist`] when the backend cannot be read.
pub fn ls(backend: &Path, json: bool) -> Result<(), CliError> {
    let rows = rows(backend)?;
    if json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "name": r.name,
                    "current": r.current,
                    "lastUpdate": r.last_update,
                    "updateInProgress": r.update_in_progress,
                    "resourceCount": r.resource_count,
                })
            })
            .collect();
        out(&serde_json::Value::Array(v).to_string());
        return Ok(());
    }
    if rows.is_empty() {
        out(&format!(
            "no stacks in the backend {} (`keel stack init NAME` makes one)",
            Store::new(backend).location().display()
        ));
        return Ok(());
    }
    let names: Vec<String> = rows
        .iter()
        .map(|r| format!("{}{}", r.name, if r.current { "*" } else { "" }))
        .collect();
    let width = names.iter().map(String::len).max().unwrap_or(0).max(4);
    out(&format!(
        "{:width$}  {:25}  RESOURCE COUNT",
        "NAME", "LAST UPDATE"
    ));
    for (r, name) in rows.iter().zip(&names) {
        out(&format!(
            "{name:width$}  {:25}  {}",
            if r.update_in_progress {
                "in progress"
            } else {
                r.last_update.as_deref().unwrap_or("n/a")
            },
            r.resource_count
                .map_or_else(|| "unreadable".to_owned(), |n| n.to_string())
        ));
    }
    Ok(())
}

/// `keel stack select NAME`: records NAME as the backend's default stack.
///
/// # Errors
/// [`CliError::BadStackName`], [`CliError::NoStack`], [`CliError::Persist`].
pub fn select(backend: &Path, name: &str) -> Result<(), CliError> {
    existing(backend, name)?;
    Store::new(backend).select(Some(name))?;
    eprintln!("selected stack `{name}`");
    Ok(())
}

/// `keel stack init NAME`: makes an empty stack and selects it.
///
/// # Errors
/// [`CliError::BadStackName`], [`CliError::StackExists`],
/// [`CliError::Persist`].
pub fn init(backend: &Path, name: &str) -> Result<(), CliError> {
    check_stack(name)?;
    let b = Store::new(backend);
    if !b.init_stack(name, "keel stack init")? {
        return Err(CliError::StackExists {
            stack: name.to_owned(),
            backend: b.location(),
        });
    }
    b.select(Some(name))?;
    eprintln!("created stack `{name}` (selected)");
    Ok(())
}

/// `keel stack rm NAME [--force] [--preserve-config] [--yes]`: moves the
/// stack's directory under `backups/` and, with `config` (the program
/// whose directory holds it), the stack's config file into it; clears the
/// selection if it was selected.
///
/// # Errors
/// [`CliError::NoStack`], [`CliError::StackHasResources`] (without
/// `force`), [`CliError::Backend`] for a locked or unreadable stack,
/// [`CliError::NeedsYes`], [`CliError::Declined`], [`CliError::Persist`].
pub fn rm(
    backend: &Path,
    name: &str,
    force: bool,
    config: Option<&Path>,
    yes: bool,
) -> Result<(), CliError> {
    let b = existing(backend, name)?;
    // With --force an unreadable stack can be removed too (its count is
    // then unknown); without, its error is the answer.
    let count = |b: &Store| -> Result<Option<usize>, CliError> {
        match b.load(name) {
            Ok(l) => Ok(Some(l.deployment.resources.len())),
            Err(e) if force => {
                eprintln!("warning: {e}");
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    };
    let refuse = |n: Option<usize>| match n {
        Some(count) if count > 0 && !force => Err(CliError::StackHasResources {
            stack: name.to_owned(),
            count,
        }),
        _ => Ok(()),
    };
    let n = count(&b)?;
    refuse(n)?;
    let shown = n.map_or_else(
        || "unreadable state".to_owned(),
        |n| format!("{n} resources"),
    );
    confirm(
        "keel stack rm",
        &format!("Remove stack `{name}` ({shown})?"),
        yes,
    )?;
    let lock = b.lock(name, "keel stack rm")?;
    // Read again under the lock: an operation may have ended meanwhile.
    let n = count(&b)?;
    refuse(n)?;
    let kept = b.move_to_backups(name)?;
    drop(lock);
    if let Some(program) = config {
        let file = crate::config::stack_file(&config_dir(program), name);
        if file.is_file() {
            keep_config_file(&b, &kept, &file)?;
        }
    }
    if b.selected()?.as_deref() == Some(name) {
        b.select(None)?;
    }
    let shown = n.map_or_else(
        || "unreadable state".to_owned(),
        |n| format!("{n} resources"),
    );
    eprintln!(
        "removed stack `{name}` ({shown}); its files are kept in {}",
        kept.display()
    );
    Ok(())
}

/// Moves `from` to `to` (which must not exist: a hard link, then the old
/// name removed), durably.
fn move_file(from: &Path, to: &Path) -> Result<(), PersistError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| PersistError::Io { path, source }
    };
    std::fs::hard_link(from, to).map_err(io(to))?;
    std::fs::remove_file(from).map_err(io(from))?;
    let counters = IoCounters::default();
    for f in [to, from] {
        let dir = match f.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        crate::persist::fs::sync_dir(dir, &counters).map_err(io(dir))?;
    }
    Ok(())
}

/// `urn` with its stack part replaced by `new`, if it names `old` (and the
/// root stack resource's name too).
fn renamed(urn: &Urn, old: &str, new: &str) -> Option<Urn> {
    if urn.is_empty() || urn.stack() != old {
        return None;
    }
    // The root stack resource is named `<project>-<stack>`: it follows the
    // stack's name (as Pulumi renames it), so the next update finds it.
    if urn.qualified_type() == "pulumi:pulumi:Stack" {
        let p = urn.project();
        return Urn::parse(&format!(
            "urn:pulumi:{new}::{p}::pulumi:pulumi:Stack::{p}-{new}"
        ))
        .ok();
    }
    let rest = urn
        .as_str()
        .strip_prefix("urn:pulumi:")?
        .strip_prefix(old)?;
    Urn::parse(&format!("urn:pulumi:{new}{rest}")).ok()
}

/// The deployment `d` of stack `old` as stack `new`: every URN's stack part
/// replaced, and every reference (parent, dependencies, property
/// dependencies, provider, deletedWith, replaceWith, viewOf, resource
/// references and output dependencies in properties, aliases) following.
pub fn rename_deployment(d: &Deployment, old: &str, new: &str) -> Deployment {
    let states = d
        .resources
        .iter()
        .chain(d.pending_operations.iter().map(|p| &p.resource));
    let mut map = SuccessorMap::new();
    for s in states {
        for u in std::iter::once(&s.urn).chain(&s.rare.aliases) {
            if let Some(n) = renamed(u, old, new) {
                map.insert(u.clone(), n);
            }
        }
    }
    let identity = identity_in(&d.resources);
    let one = |s: &State| -> State {
        let mut s = rewrite(s, &map, &identity).unwrap_or_else(|| s.clone());
        if let Some(n) = map.get(&s.urn) {
            s.urn = n.clone();
        }
        for a in s.rare.get_mut().into_iter().flat_map(|r| &mut r.aliases) {
            if let Some(n) = map.get(a) {
                *a = n.clone();
            }
        }
        s
    };
    let mut out = d.clone();
    out.resources = d.resources.iter().map(one).collect();
    for p in &mut out.pending_operations {
        p.resource = one(&p.resource);
    }
    out
}

/// After a rename, the current stack stays current under its new name:
/// the selection moves when it named `old` (a database's rename moved it
/// already), or when nothing is selected and `old` was the default stack.
fn follow_selection(b: &Store, old: &str, new: &str) -> Result<(), CliError> {
    let selected = b.selected()?;
    let was_current = match selected.as_deref() {
        Some(s) => s == old,
        None => old == super::args::DEFAULT_STACK,
    };
    if was_current {
        b.select(Some(new))?;
    }
    Ok(())
}

/// Moves a removed stack's configuration file into its backup `kept`: a
/// file beside the stack's files, or, on a database backend, the backup's
/// row (the file is removed once its bytes are in).
fn keep_config_file(b: &Store, kept: &Path, file: &Path) -> Result<(), CliError> {
    match b {
        Store::File(_) => {
            let to = kept.join(file.file_name().unwrap_or_default());
            move_file(file, &to)?;
            eprintln!(
                "moved its config file {} to {}",
                file.display(),
                to.display()
            );
        }
        Store::Pg(pg) => {
            let bytes = std::fs::read(file).map_err(|source| CliError::ReadInput {
                path: file.to_owned(),
                source,
            })?;
            pg.keep_config(kept, bytes)?;
            std::fs::remove_file(file).map_err(|source| CliError::Write {
                path: file.to_owned(),
                source,
            })?;
            eprintln!(
                "moved its config file {} into the backup {}",
                file.display(),
                kept.display()
            );
        }
    }
    Ok(())
}

/// `keel stack rename NEW [--stack OLD] [--program PATH] [--yes]`: the
/// stack's config file in the program's directory is renamed too.
///
/// # Errors
/// [`CliError::BadStackName`], [`CliError::NoStack`],
/// [`CliError::StackExists`], [`CliError::ConfigFileExists`],
/// [`CliError::Verify`] when the renamed state
/// fails integrity (nothing is written), [`CliError::Backend`] for a locked
/// or unreadable stack, [`CliError::NeedsYes`], [`CliError::Declined`],
/// [`CliError::Persist`].
pub fn rename(
    backend: &Path,
    old: &str,
    new: &str,
    program: &Path,
    yes: bool,
) -> Result<(), CliError> {
    check_stack(new)?;
    let b = existing(backend, old)?;
    let b = match &b {
        Store::File(f) => f,
        Store::Pg(pg) => return rename_in_database(&b, pg, old, new, program, yes),
    };
    let taken = || CliError::StackExists {
        stack: new.to_owned(),
        backend: backend.to_owned(),
    };
    if b.paths(new).dir.exists() {
        return Err(taken());
    }
    let dir = config_dir(program);
    let (old_config, new_config) = (
        crate::config::stack_file(&dir, old),
        crate::config::stack_file(&dir, new),
    );
    let old_config = old_config.is_file().then_some(old_config);
    if old_config.is_some() && new_config.exists() {
        return Err(CliError::ConfigFileExists { path: new_config });
    }
    confirm(
        "keel stack rename",
        &format!("Rename stack `{old}` to `{new}` (its resources' URNs change)?"),
        yes,
    )?;
    let old_lock = b.lock(old, "keel stack rename")?;
    // Loaded without a passphrase: secrets stay encrypted as stored, under
    // the same secrets provider, so nothing is decrypted or re-encrypted.
    let loaded = b.load(old)?;
    let d = rename_deployment(&loaded.deployment, old, new);
    crate::model::integrity::verify(&d).map_err(|e| CliError::Verify {
        what: format!("stack `{old}` renamed to `{new}`"),
        message: e.to_string(),
    })?;
    let paths = b.paths(new);
    match std::fs::create_dir(&paths.dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(taken()),
        Err(source) => {
            return Err(PersistError::Io {
                path: paths.dir.clone(),
                source,
            }
            .into())
        }
    }
    let new_lock = b.lock(new, "keel stack rename")?;
    let write_new = || -> Result<(), PersistError> {
        write_base(&paths.base, &d, 0, 0, &IoCounters::default())?;
        // The history goes with the stack (the old copy stays in the
        // backups).
        let (from, to) = (b.history_path(old), b.history_path(new));
        if from.is_file() {
            let bytes = std::fs::read(&from).map_err(|source| PersistError::Io {
                path: from.clone(),
                source,
            })?;
            atomic_write(&to, &bytes, false, &IoCounters::default())
                .map_err(|source| PersistError::Io { path: to, source })?;
        }
        Ok(())
    };
    if let Err(e) = write_new() {
        // A half-written new stack is not left behind; the old one stands.
        drop(new_lock);
        let _ = std::fs::remove_dir_all(&paths.dir);
        return Err(e.into());
    }
    // The new stack is complete: the old one goes to the backups (a crash
    // before this leaves both, never neither).
    let kept = b.move_to_backups(old)?;
    drop(old_lock);
    if let Some(from) = &old_config {
        move_file(from, &new_config)?;
        eprintln!(
            "renamed its config file {} to {}",
            from.display(),
            new_config.display()
        );
    }
    follow_selection(&Store::File(b.clone()), old, new)?;
    eprintln!(
        "renamed stack `{old}` to `{new}` ({} resources); the old files are kept in {}",
        d.resources.len(),
        kept.display()
    );
    Ok(())
}

/// `stack rename` on a database backend: one transaction writes the
/// renamed state (verified) to the new stack, moves the history to it and
/// the old stack to the backups, and moves the selection, so a failure
/// leaves everything as it was.
fn rename_in_database(
    b: &Store,
    pg: &crate::persist::pg::PgBackend,
    old: &str,
    new: &str,
    program: &Path,
    yes: bool,
) -> Result<(), CliError> {
    let taken = || CliError::StackExists {
        stack: new.to_owned(),
        backend: b.location(),
    };
    if b.exists(new)? {
        return Err(taken());
    }
    let dir = config_dir(program);
    let (old_config, new_config) = (
        crate::config::stack_file(&dir, old),
        crate::config::stack_file(&dir, new),
    );
    let old_config = old_config.is_file().then_some(old_config);
    if old_config.is_some() && new_config.exists() {
        return Err(CliError::ConfigFileExists { path: new_config });
    }
    confirm(
        "keel stack rename",
        &format!("Rename stack `{old}` to `{new}` (its resources' URNs change)?"),
        yes,
    )?;
    let old_lock = b.lock(old, "keel stack rename")?;
    let loaded = b.load(old)?;
    let d = rename_deployment(&loaded.deployment, old, new);
    crate::model::integrity::verify(&d).map_err(|e| CliError::Verify {
        what: format!("stack `{old}` renamed to `{new}`"),
        message: e.to_string(),
    })?;
    // Secrets stay encrypted as stored (loaded without a passphrase).
    let base = crate::persist::backend::base_bytes(&d, 0, 0, &crate::secrets::Crypter::default())?;
    let new_lock = b.lock(new, "keel stack rename")?;
    let renamed = pg.rename(old, new, base);
    drop(new_lock);
    let renamed = renamed.and_then(|kept| match kept {
        Some(kept) => Ok(Some(kept)),
        // Not renamed: the empty row `new`'s lock made goes again.
        None => pg.remove_if_empty(new).map(|()| None),
    });
    let Some(kept) = renamed? else {
        return Err(taken());
    };
    drop(old_lock);
    if let Some(from) = &old_config {
        move_file(from, &new_config)?;
        eprintln!(
            "renamed its config file {} to {}",
            from.display(),
            new_config.display()
        );
    }
    follow_selection(b, old, new)?;
    eprintln!(
        "renamed stack `{old}` to `{new}` ({} resources); the old state is kept in {}",
        d.resources.len(),
        kept.display()
    );
    Ok(())
}

/// A property value as plain JSON for `stack output --json`: secrets
/// masked (`"[secret]"`) unless `show`, known output values unwrapped,
/// unknowns `null`.
pub fn plain_json(v: &PropertyValue, show: bool) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        PropertyValue::Secret(Secret::Plaintext(p)) if show => plain_json(p.value(), show),
        PropertyValue::Secret(_) => J::String("[secret]".into()),
        PropertyValue::Array(a) => J::Array(a.iter().map(|x| plain_json(x, show)).collect()),
        PropertyValue::Object(m) => J::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), plain_json(x, show)))
                .collect(),
        ),
        PropertyValue::Output(o) => {
            let inner = o.value.as_deref().map_or(J::Null, |x| plain_json(x, show));
            if o.secret == Some(true) && !show {
                J::String("[secret]".into())
            } else {
                inner
            }
        }
        PropertyValue::Computed => J::Null,
        other => other.to_json(),
    }
}

/// A value as `stack output` prints it: strings as they are, the rest as
/// JSON; secrets masked unless `show`.
fn plain_text(v: &PropertyValue, show: bool) -> String {
    if show {
        match plain_json(v, true) {
            serde_json::Value::String(s) => super::display::clean(&s).into_owned(),
            other => other.to_string(),
        }
    } else {
        show_value(&mask(v))
    }
}

/// `keel stack output [NAME] [--show-secrets] [--json]`.
///
/// # Errors
/// [`CliError::NoStack`], [`CliError::NoSuchOutput`], [`CliError::Secrets`]
/// when `--show-secrets` has no (or a wrong) passphrase.
pub fn output(
    backend: &Path,
    stack: &str,
    name: Option<&str>,
    show_secrets: bool,
    json: bool,
) -> Result<(), CliError> {
    let b = existing(backend, stack)?;
    let b = if show_secrets {
        with_passphrase(backend, stack)?
    } else {
        b
    };
    let loaded = b.load(stack).map_err(secrets_first)?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let outputs: PropertyMap = loaded
        .deployment
        .stack_resource()
        .map(|r| r.outputs.clone())
        .unwrap_or_default();
    if show_secrets
        && outputs
            .values()
            .any(crate::persist::backend::holds_ciphertext)
    {
        return Err(CliError::Secrets {
            stack: stack.to_owned(),
            source: crate::secrets::SecretsError::NoPassphrase,
        });
    }
    match name {
        Some(n) => {
            let v = outputs.get(n).ok_or_else(|| CliError::NoSuchOutput {
                stack: stack.to_owned(),
                name: n.to_owned(),
                known: outputs.keys().cloned().collect(),
            })?;
            if json {
                out(&plain_json(v, show_secrets).to_string());
            } else {
                out(&plain_text(v, show_secrets));
            }
        }
        None if json => {
            let m: serde_json::Map<String, serde_json::Value> = outputs
                .iter()
                .map(|(k, v)| (k.clone(), plain_json(v, show_secrets)))
                .collect();
            out(&serde_json::Value::Object(m).to_string());
        }
        None => {
            out(&format!("Current stack outputs ({}):", outputs.len()));
            if outputs.is_empty() {
                out("    No output values currently in this stack");
            } else {
                let width = outputs.keys().map(String::len).max().unwrap_or(0).max(6);
                out(&format!("    {:width$}  VALUE", "OUTPUT"));
                for (k, v) in &outputs {
                    out(&format!(
                        "    {:width$}  {}",
                        super::display::clean(k),
                        plain_text(v, show_secrets)
                    ));
                }
            }
        }
    }
    Ok(())
}
