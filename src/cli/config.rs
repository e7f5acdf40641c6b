//! `keel config set|get|rm|ls` and the stack config of operations: the
//! stack's `Pulumi.<stack>.yaml` ([`crate::config`]) next to the program,
//! read and written as `pulumi config` does.
//!
//! Secure values use the stack's passphrase secrets provider: the file's
//! `encryptionsalt` when it has one, else the stack's own salt (recorded
//! in the file at the first `set --secret`), else a fresh salt, which a
//! new stack then takes (`Backend::with_new_stack_salt`), so the stack's
//! state and its config share one key. No command writes, prints or
//! reports a secret's plaintext unless asked (`get`, `ls --show-secrets`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::args::{ConfigCommand, ConfigTarget};
use super::display::{clean, out};
use super::CliError;
use crate::config::{ConfigKey, Resolved, StackConfig};
use crate::secrets::{
    passphrase_from_env, Crypter, PassphraseManager, SecretsError, SecretsManager, PASSPHRASE_TYPE,
};

/// The directory holding a program's config file: the program directory
/// itself, or a program file's directory.
pub fn config_dir(program: &Path) -> PathBuf {
    if program.is_dir() {
        return program.to_owned();
    }
    match program.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// The project a program belongs to, read lightly (for the namespace of
/// bare config keys): a directory's `Pulumi.yaml` `name`, else the
/// directory's name; a program file's `name`, else its file stem.
pub fn project_name(program: &Path) -> String {
    fn name_in(path: &Path) -> Option<String> {
        // Bounded: the program file's own load reports a file too large
        // (or endless, like /dev/zero).
        let limit = super::program::MAX_PROGRAM_FILE;
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(limit + 1).read_to_end(&mut bytes))
            .ok()?;
        if bytes.len() as u64 > limit {
            return None;
        }
        let text = String::from_utf8(bytes).ok()?;
        let doc: serde_norway::Value = serde_norway::from_str(&text).ok()?;
        doc.get("name")?
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
    }
    if program.is_dir() {
        name_in(&program.join("Pulumi.yaml")).unwrap_or_else(|| {
            std::fs::canonicalize(program)
                .ok()
                .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "project".into())
        })
    } else {
        name_in(program).unwrap_or_else(|| {
            program
                .file_stem()
                .map_or_else(|| "project".into(), |s| s.to_string_lossy().into_owned())
        })
    }
}

fn secrets_err(stack: &str) -> impl Fn(SecretsError) -> CliError + '_ {
    move |source| CliError::Secrets {
        stack: stack.to_owned(),
        source,
    }
}

/// The salt state in a passphrase provider's state.
fn manager_salt(m: &dyn SecretsManager) -> Option<String> {
    (m.provider_type() == PASSPHRASE_TYPE)
        .then(|| m.state_json().get("salt")?.as_str().map(str::to_owned))
        .flatten()
}

/// The stack config of an operation, resolved: secure values decrypted
/// with the stack's key when the file's salt is the stack's (or the file
/// has none), else with the file's salt.
///
/// # Errors
/// [`CliError::Secrets`] (no or wrong passphrase) and
/// [`CliError::Config`] (a value that does not decrypt, no salt and no
/// passphrase provider), before anything runs.
pub fn resolve_for_operation(
    cfg: &StackConfig,
    crypter: &Crypter,
    stack: &str,
) -> Result<Vec<Resolved>, CliError> {
    if !cfg.has_secure() {
        return Ok(cfg.resolve(None)?);
    }
    let stack_manager = crypter
        .manager()
        .filter(|m| m.provider_type() == PASSPHRASE_TYPE);
    let manager: Arc<dyn SecretsManager> = match (cfg.encryption_salt(), stack_manager) {
        (Some(salt), Some(m)) if manager_salt(m.as_ref()).as_deref() == Some(salt) => m.clone(),
        (Some(salt), _) => {
            let p = passphrase_from_env()
                .map_err(secrets_err(stack))?
                .ok_or(SecretsError::NoPassphrase)
                .map_err(secrets_err(stack))?;
            Arc::new(PassphraseManager::from_salt_state(&p, salt).map_err(secrets_err(stack))?)
        }
        (None, Some(m)) => m.clone(),
        (None, None) => {
            return Err(match passphrase_from_env().map_err(secrets_err(stack))? {
                None => secrets_err(stack)(SecretsError::NoPassphrase),
                Some(_) => crate::config::ConfigError::NoSecrets {
                    path: cfg.path().to_owned(),
                    message: "it holds secure values but no `encryptionsalt`, and the stack has no passphrase secrets provider to decrypt them".into(),
                }
                .into(),
            })
        }
    };
    Ok(cfg.resolve(Some(manager.as_ref()))?)
}

/// The manager for `keel config` on `cfg`: the file's salt, else the
/// stack's (recorded in the file when `record`), else a fresh one (also
/// recorded).
fn command_manager(
    backend: &Path,
    stack: &str,
    cfg: &mut StackConfig,
    record: bool,
) -> Result<Arc<dyn SecretsManager>, CliError> {
    let p = passphrase_from_env()
        .map_err(secrets_err(stack))?
        .ok_or(SecretsError::NoConfigPassphrase)
        .map_err(secrets_err(stack))?;
    if let Some(salt) = cfg.encryption_salt() {
        return Ok(Arc::new(
            PassphraseManager::from_salt_state(&p, salt).map_err(secrets_err(stack))?,
        ));
    }
    // The stack's own provider, read without decrypting anything.
    let store = crate::persist::store::Store::new(backend);
    let providers = if store.exists(stack)? {
        store.load(stack)?.deployment.secrets_providers
    } else {
        crate::model::snapshot::SecretsProviders::default()
    };
    let m = match providers.ty.as_str() {
        "" => PassphraseManager::new(&p).map_err(secrets_err(stack))?,
        PASSPHRASE_TYPE => {
            PassphraseManager::from_providers(&p, &providers).map_err(secrets_err(stack))?
        }
        other => {
            return Err(secrets_err(stack)(SecretsError::Unsupported(
                other.to_owned(),
            )))
        }
    };
    if record {
        cfg.set_encryption_salt(m.salt_state());
    }
    Ok(Arc::new(m))
}

/// Opens the config file of `target`.
fn open(target: &ConfigTarget) -> Result<StackConfig, CliError> {
    let stack = target.stack.name();
    super::commands::check_stack(stack)?;
    let project = project_name(&target.program);
    Ok(StackConfig::load(
        &config_dir(&target.program),
        stack,
        &project,
    )?)
}

/// A key as `ls` shows it: the project's own keys bare.
fn shown_key(cfg: &StackConfig, key: &str) -> String {
    let own = format!("{}:", cfg.project());
    key.strip_prefix(&own).unwrap_or(key).to_owned()
}

/// Runs a `keel config` command.
///
/// # Errors
/// [`CliError`]: a bad key, path or file (exit 2), a missing or wrong
/// passphrase (exit 2), a key not set (`get`, exit 1).
pub fn run(backend: &Path, cmd: ConfigCommand) -> Result<(), CliError> {
    match cmd {
        ConfigCommand::Set {
            key,
            value,
            secret,
            path,
            target,
        } => {
            let mut cfg = open(&target)?;
            let k = ConfigKey::parse(&key, cfg.project())?;
            let value = match value {
                Some(v) => v,
                None => {
                    let mut v = String::new();
                    std::io::stdin().read_to_string(&mut v).map_err(|source| {
                        CliError::ReadInput {
                            path: PathBuf::from("(stdin)"),
                            source,
                        }
                    })?;
                    v.trim_end_matches(['\n', '\r']).to_owned()
                }
            };
            let stored = if secret {
                let m = command_manager(backend, target.stack.name(), &mut cfg, true)?;
                m.encrypt(&[&value])
                    .map_err(secrets_err(target.stack.name()))?
                    .remove(0)
            } else {
                value
            };
            cfg.set(&k, path, &stored, secret)?;
            cfg.save()?;
            Ok(())
        }
        ConfigCommand::Get {
            key,
            path,
            json,
            target,
        } => {
            let mut cfg = open(&target)?;
            let k = ConfigKey::parse(&key, cfg.project())?;
            let Some(v) = cfg.get(&k, path)? else {
                return Err(CliError::ConfigNotSet {
                    key: k.full(),
                    path: cfg.path().to_owned(),
                });
            };
            let cts = crate::config::value_ciphertexts(&v);
            let mut plain = std::collections::BTreeMap::new();
            if !cts.is_empty() {
                let m = command_manager(backend, target.stack.name(), &mut cfg, false)?;
                let opened = m.decrypt(&cts).map_err(secrets_err(target.stack.name()))?;
                plain = cts.into_iter().zip(opened).collect();
            }
            let secret = !plain.is_empty();
            let value = crate::config::value_json(&v, &plain).map_err(|message| {
                crate::config::ConfigError::Invalid {
                    path: cfg.path().to_owned(),
                    message,
                }
            })?;
            if json {
                out(&serde_json::json!({ "value": value, "secret": secret }).to_string());
            } else {
                match value {
                    serde_json::Value::String(s) => out(&clean(&s)),
                    serde_json::Value::Null => out(""),
                    other => out(&other.to_string()),
                }
            }
            Ok(())
        }
        ConfigCommand::Rm { key, path, target } => {
            let mut cfg = open(&target)?;
            let k = ConfigKey::parse(&key, cfg.project())?;
            cfg.remove(&k, path)?;
            cfg.save()?;
            Ok(())
        }
        ConfigCommand::Ls {
            show_secrets,
            json,
            target,
        } => {
            let mut cfg = open(&target)?;
            let resolved = if show_secrets && cfg.has_secure() {
                let m = command_manager(backend, target.stack.name(), &mut cfg, false)?;
                cfg.resolve(Some(m.as_ref()))?
            } else {
                cfg.resolve_masked()?
            };
            let mut rows: Vec<(String, &Resolved)> = resolved
                .iter()
                .map(|r| (shown_key(&cfg, &r.key), r))
                .collect();
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            let masked = |r: &Resolved| r.secret && !show_secrets;
            if json {
                let mut o = serde_json::Map::new();
                for (_, r) in &rows {
                    let mut e = serde_json::json!({ "secret": r.secret });
                    if !masked(r) {
                        e["value"] = serde_json::Value::String(r.text.clone());
                    }
                    o.insert(r.key.clone(), e);
                }
                out(&serde_json::Value::Object(o).to_string());
            } else {
                let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(3).max(3);
                out(&format!("{:<width$}  VALUE", "KEY"));
                for (k, r) in &rows {
                    let v = if masked(r) {
                        "[secret]"
                    } else {
                        r.text.as_str()
                    };
                    out(&format!("{:<width$}  {}", clean(k), clean(v)));
                }
            }
            Ok(())
        }
    }
}
