//! Stack config files, as Pulumi keeps them: `Pulumi.<stack>.yaml` next to
//! the program, with a `config:` mapping of `namespace:key` to values.
//!
//! - A key without a namespace belongs to the project (`env` is
//!   `<project>:env`); `ns:config:key`, Pulumi's old form, is `ns:key`.
//! - A value is a string, a scalar, a list or a mapping; `{secure:
//!   <ciphertext>}` is a secret, encrypted with the stack's secrets
//!   provider (the passphrase provider: AES-256-GCM under the key derived
//!   from the passphrase and `encryptionsalt`, the ciphertext of the
//!   value's text). Secure values may sit at the top level or anywhere in
//!   lists and mappings; `secure` as the only key of a mapping is reserved.
//! - Paths (`--path`) use Pulumi's property-path syntax: `a.b`, `a[0]`,
//!   `a["b.c"]`; the first segment is the key. Setting a path creates the
//!   lists and mappings it needs (an index may be one past the end to
//!   append), turns `true`/`false` and integers into typed values, and
//!   refuses to index into a value of the other kind.
//!
//! [`StackConfig::resolve`] decrypts every secure value in one batch and
//! gives each key as the SDKs receive it (`PULUMI_CONFIG`: strings as
//! they are, other values as JSON) and as a property value (secure values
//! as secrets); a key holding a secure value anywhere is secret as a
//! whole. Editing keeps the file's other keys and its key order (new keys
//! go last); comments are not kept (Pulumi rewrites the file too).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_norway::{Mapping, Value as Yaml};

use crate::model::property::Secret;
use crate::model::PropertyValue;
use crate::secrets::{SecretsError, SecretsManager};

/// The key of a secure value's mapping.
pub const SECURE: &str = "secure";

/// The largest config file keel reads (16 MiB).
pub const MAX_FILE: u64 = 16 << 20;

/// Why a stack config file or a config key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read or written.
    #[error("{}: {message}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// The file is not YAML of the expected shape.
    #[error("{}: {message}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A key or path that cannot be parsed or applied.
    #[error("config key `{key}`: {message}")]
    Key {
        /// The key as given.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// Secure values need the stack's secrets provider.
    #[error("{}: {message}", .path.display())]
    NoSecrets {
        /// The file.
        path: PathBuf,
        /// What is missing.
        message: String,
    },
    /// Encrypting or decrypting failed.
    #[error("{}: {source}", .path.display())]
    Secrets {
        /// The file.
        path: PathBuf,
        /// Why.
        source: SecretsError,
    },
}

/// The result of config operations.
pub type Result<T> = std::result::Result<T, ConfigError>;

/// A config key: namespace and name (the name may be a path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigKey {
    /// The namespace (a project or a package).
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl ConfigKey {
    /// Parses `ns:name` (or `ns:config:name`), or a bare name of
    /// `project`.
    ///
    /// # Errors
    /// [`ConfigError::Key`] for an empty key, namespace or name.
    pub fn parse(text: &str, project: &str) -> Result<Self> {
        let bad = |message: &str| ConfigError::Key {
            key: text.to_owned(),
            message: message.to_owned(),
        };
        let (namespace, name) = match text.split_once(':') {
            None => (project, text),
            Some((ns, rest)) => (ns, rest.strip_prefix("config:").unwrap_or(rest)),
        };
        if namespace.is_empty() {
            return Err(bad("the namespace before `:` is empty"));
        }
        if name.is_empty() {
            return Err(bad("the name is empty"));
        }
        Ok(Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }

    /// `namespace:name`.
    pub fn full(&self) -> String {
        format!("{}:{}", self.namespace, self.name)
    }
}

/// One segment of a property path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A mapping key.
    Key(String),
    /// A list index.
    Index(usize),
}

/// Parses a property path (`a.b[0]["c.d"]`), Pulumi's syntax.
///
/// # Errors
/// A message for an empty segment, an unclosed bracket or quote, or an
/// index that is not a non-negative integer.
pub fn parse_path(path: &str) -> std::result::Result<Vec<Segment>, String> {
    let b = path.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    if b.first() == Some(&b'.') || b.is_empty() {
        return Err("a path starts with a name".into());
    }
    while i < b.len() {
        match b[i] {
            b'.' => {
                if matches!(b.get(i + 1), None | Some(b'.' | b'[')) {
                    return Err(format!("`.` at {i} is not followed by a name"));
                }
                i += 1;
            }
            b'[' if b.get(i + 1) == Some(&b'"') => {
                let mut key = String::new();
                let mut j = i + 2;
                loop {
                    match b.get(j) {
                        None => return Err("a quoted key has no closing quote".into()),
                        Some(b'"') => break,
                        Some(b'\\') if b.get(j + 1) == Some(&b'"') => {
                            key.push('"');
                            j += 2;
                        }
                        Some(_) => {
                            let c = path[j..].chars().next().unwrap_or('\u{fffd}');
                            key.push(c);
                            j += c.len_utf8();
                        }
                    }
                }
                if b.get(j + 1) != Some(&b']') {
                    return Err("a quoted key has no closing `]`".into());
                }
                out.push(Segment::Key(key));
                i = j + 2;
            }
            b'[' => {
                let close = path[i..].find(']').ok_or("an index has no closing `]`")?;
                let inner = &path[i + 1..i + close];
                let index = inner
                    .parse::<usize>()
                    .map_err(|_| format!("`[{inner}]` is not a list index"))?;
                out.push(Segment::Index(index));
                i += close + 1;
            }
            _ => {
                let end = path[i..].find(['.', '[']).map_or(path.len(), |e| i + e);
                out.push(Segment::Key(path[i..end].to_owned()));
                i = end;
            }
        }
    }
    Ok(out)
}

/// Decodes the YAML of a config value as JSON, secure values masked (for
/// `keel config get` of a sub-value).
pub fn value_json(
    v: &Yaml,
    plain: &BTreeMap<&str, String>,
) -> std::result::Result<serde_json::Value, String> {
    to_json(v, plain)
}

/// The ciphertexts in a config value, each once.
pub fn value_ciphertexts(v: &Yaml) -> Vec<&str> {
    let mut out = Vec::new();
    ciphertexts(v, &mut out);
    out
}

/// One resolved config value.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// `namespace:name`.
    pub key: String,
    /// As the SDKs receive it: a string as it is, other values as JSON,
    /// secure values decrypted.
    pub text: String,
    /// As a property value: secure values as secrets.
    pub value: PropertyValue,
    /// Whether it holds a secure value (anywhere).
    pub secret: bool,
}

/// A stack's config file.
#[derive(Debug, Clone)]
pub struct StackConfig {
    path: PathBuf,
    project: String,
    doc: Mapping,
}

/// The path of `stack`'s config file in `dir`.
pub fn stack_file(dir: &Path, stack: &str) -> PathBuf {
    dir.join(format!("Pulumi.{stack}.yaml"))
}

fn is_secure(v: &Yaml) -> Option<&str> {
    match v {
        Yaml::Mapping(m) if m.len() == 1 => match m.get(SECURE) {
            Some(Yaml::String(c)) => Some(c),
            _ => None,
        },
        Yaml::Tagged(t) => is_secure(&t.value),
        _ => None,
    }
}

fn contains_secure(v: &Yaml) -> bool {
    is_secure(v).is_some()
        || match v {
            Yaml::Mapping(m) => m.values().any(contains_secure),
            Yaml::Sequence(s) => s.iter().any(contains_secure),
            _ => false,
        }
}

fn ciphertexts<'a>(v: &'a Yaml, out: &mut Vec<&'a str>) {
    if let Some(c) = is_secure(v) {
        if !out.contains(&c) {
            out.push(c);
        }
        return;
    }
    match v {
        Yaml::Mapping(m) => m.values().for_each(|v| ciphertexts(v, out)),
        Yaml::Sequence(s) => s.iter().for_each(|v| ciphertexts(v, out)),
        _ => {}
    }
}

fn key_text(k: &Yaml) -> Option<String> {
    match k {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

impl StackConfig {
    /// Reads `dir/Pulumi.<stack>.yaml` of `project` (a missing file is an
    /// empty config).
    ///
    /// # Errors
    /// [`ConfigError::Io`] when it cannot be read; [`ConfigError::Invalid`]
    /// when it is not a YAML mapping with a mapping `config` whose keys are
    /// valid.
    pub fn load(dir: &Path, stack: &str, project: &str) -> Result<Self> {
        use std::io::Read;
        let path = stack_file(dir, stack);
        let mut bytes = Vec::new();
        match std::fs::File::open(&path).and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut bytes))
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ConfigError::Io {
                    path,
                    message: e.to_string(),
                })
            }
        }
        if bytes.len() as u64 > MAX_FILE {
            return Err(ConfigError::Invalid {
                path,
                message: format!("larger than {} MiB", MAX_FILE >> 20),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| ConfigError::Invalid {
            path: path.clone(),
            message: "not UTF-8 text".into(),
        })?;
        Self::parse(path, project, &text)
    }

    /// Decodes a config file's text (`path` names it in errors).
    ///
    /// # Errors
    /// As [`StackConfig::load`].
    pub fn parse(path: PathBuf, project: &str, text: &str) -> Result<Self> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.clone(),
            message,
        };
        let doc = if text.trim().is_empty() {
            Mapping::new()
        } else {
            match serde_norway::from_str::<Yaml>(text).map_err(|e| invalid(e.to_string()))? {
                Yaml::Mapping(m) => m,
                Yaml::Null => Mapping::new(),
                _ => return Err(invalid("the file must be a mapping".into())),
            }
        };
        let me = Self {
            path: path.clone(),
            project: project.to_owned(),
            doc,
        };
        match me.doc.get("config") {
            None | Some(Yaml::Null) | Some(Yaml::Mapping(_)) => {}
            Some(_) => return Err(invalid("`config` must be a mapping".into())),
        }
        for (k, _) in me.entries() {
            let k =
                key_text(k).ok_or_else(|| invalid(format!("config key {k:?} must be a string")))?;
            ConfigKey::parse(&k, project).map_err(|e| invalid(e.to_string()))?;
        }
        if let Some(salt) = me.doc.get("encryptionsalt") {
            if !matches!(salt, Yaml::String(_)) {
                return Err(invalid("`encryptionsalt` must be a string".into()));
            }
        }
        Ok(me)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The project whose bare keys these are.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The passphrase provider's salt state (`encryptionsalt`), if any.
    pub fn encryption_salt(&self) -> Option<&str> {
        match self.doc.get("encryptionsalt") {
            Some(Yaml::String(s)) if !s.is_empty() => Some(s),
            _ => None,
        }
    }

    /// Records the salt state the file's secure values are encrypted with.
    pub fn set_encryption_salt(&mut self, salt: &str) {
        if self.encryption_salt() == Some(salt) {
            return;
        }
        // Pulumi writes the salt before `config`.
        let mut doc = Mapping::new();
        doc.insert("encryptionsalt".into(), Yaml::String(salt.to_owned()));
        for (k, v) in std::mem::take(&mut self.doc) {
            if k.as_str() != Some("encryptionsalt") {
                doc.insert(k, v);
            }
        }
        self.doc = doc;
    }

    fn entries(&self) -> impl Iterator<Item = (&Yaml, &Yaml)> {
        self.doc
            .get("config")
            .and_then(Yaml::as_mapping)
            .into_iter()
            .flat_map(|m| m.iter())
    }

    fn normalize(&self, k: &Yaml) -> Option<String> {
        let k = key_text(k)?;
        ConfigKey::parse(&k, &self.project).ok().map(|k| k.full())
    }

    /// The full keys (`namespace:name`) in file order.
    pub fn keys(&self) -> Vec<String> {
        self.entries()
            .filter_map(|(k, _)| self.normalize(k))
            .collect()
    }

    /// Whether any value is secure.
    pub fn has_secure(&self) -> bool {
        self.entries().any(|(_, v)| contains_secure(v))
    }

    fn find(&self, full: &str) -> Option<(&Yaml, &Yaml)> {
        self.entries()
            .find(|(k, _)| self.normalize(k).as_deref() == Some(full))
    }

    /// The key of `key`'s entry and its path below it (`--path`: the
    /// name's first segment is the key).
    fn split(key: &ConfigKey, path: bool) -> Result<(ConfigKey, Vec<Segment>)> {
        if !path {
            return Ok((key.clone(), Vec::new()));
        }
        let bad = |message: String| ConfigError::Key {
            key: key.full(),
            message,
        };
        let mut segs = parse_path(&key.name).map_err(bad)?;
        let Segment::Key(first) = segs.remove(0) else {
            return Err(bad("a path starts with a name".into()));
        };
        if first.is_empty() {
            return Err(bad("the name is empty".into()));
        }
        Ok((
            ConfigKey {
                namespace: key.namespace.clone(),
                name: first,
            },
            segs,
        ))
    }

    /// The raw value at `key` (with `path`, below it); `None` when unset.
    ///
    /// # Errors
    /// [`ConfigError::Key`] for a malformed path.
    pub fn get(&self, key: &ConfigKey, path: bool) -> Result<Option<Yaml>> {
        let (top, segs) = Self::split(key, path)?;
        let Some((_, mut v)) = self.find(&top.full()) else {
            return Ok(None);
        };
        for seg in &segs {
            if is_secure(v).is_some() {
                return Ok(None);
            }
            let next = match (seg, v) {
                (Segment::Key(k), Yaml::Mapping(m)) => m.get(k.as_str()),
                (Segment::Index(i), Yaml::Sequence(s)) => s.get(*i),
                _ => None,
            };
            match next {
                Some(n) => v = n,
                None => return Ok(None),
            }
        }
        Ok(Some(v.clone()))
    }

    /// Sets `key` (with `path`, a value below it) to `value`: a string, or
    /// a secure value's ciphertext when `secure`. With `path`, a plain
    /// `true`/`false` or integer is stored typed, as Pulumi does.
    ///
    /// # Errors
    /// [`ConfigError::Key`]: a malformed path, an index past the end, a
    /// path through a value of the other kind, or a mapping left with
    /// `secure` as its only key.
    pub fn set(&mut self, key: &ConfigKey, path: bool, value: &str, secure: bool) -> Result<()> {
        let (top, segs) = Self::split(key, path)?;
        let leaf = if secure {
            let mut m = Mapping::new();
            m.insert(SECURE.into(), Yaml::String(value.to_owned()));
            Yaml::Mapping(m)
        } else if path {
            typed(value)
        } else {
            Yaml::String(value.to_owned())
        };
        let full = top.full();
        let bad = |message: String| ConfigError::Key {
            key: key.full(),
            message,
        };
        let existing = self.find(&full).map(|(k, v)| (k.clone(), v.clone()));
        let new_top = if segs.is_empty() {
            leaf
        } else {
            // A scalar or secure value at the top is replaced by the
            // structure the path needs.
            let root = match existing.as_ref().map(|(_, v)| v) {
                Some(v @ (Yaml::Mapping(_) | Yaml::Sequence(_))) if is_secure(v).is_none() => {
                    v.clone()
                }
                _ => Yaml::Null,
            };
            set_in(root, &segs, leaf).map_err(bad)?
        };
        if !matches!(self.doc.get("config"), Some(Yaml::Mapping(_))) {
            self.doc
                .insert("config".into(), Yaml::Mapping(Mapping::new()));
        }
        if let Some(Yaml::Mapping(m)) = self.doc.get_mut("config") {
            let k = existing.map_or(Yaml::String(full), |(k, _)| k);
            m.insert(k, new_top);
        }
        Ok(())
    }

    /// Removes `key` (with `path`, the value below it). Removing what is
    /// not there does nothing.
    ///
    /// # Errors
    /// [`ConfigError::Key`] for a malformed path or a mapping left with
    /// `secure` as its only key.
    pub fn remove(&mut self, key: &ConfigKey, path: bool) -> Result<()> {
        let (top, segs) = Self::split(key, path)?;
        let full = top.full();
        let Some((k, v)) = self.find(&full).map(|(k, v)| (k.clone(), v.clone())) else {
            return Ok(());
        };
        let Some(Yaml::Mapping(m)) = self.doc.get_mut("config") else {
            return Ok(());
        };
        if segs.is_empty() {
            m.shift_remove(&k);
            return Ok(());
        }
        let mut root = v;
        remove_in(&mut root, &segs).map_err(|message| ConfigError::Key {
            key: key.full(),
            message,
        })?;
        m.insert(k, root);
        Ok(())
    }

    /// Every key's value with secure values decrypted by `manager`, in
    /// file order.
    ///
    /// # Errors
    /// [`ConfigError::NoSecrets`] when there are secure values and no
    /// manager; [`ConfigError::Secrets`] when one does not decrypt.
    pub fn resolve(&self, manager: Option<&dyn SecretsManager>) -> Result<Vec<Resolved>> {
        let mut cts = Vec::new();
        for (_, v) in self.entries() {
            ciphertexts(v, &mut cts);
        }
        let mut plain: BTreeMap<&str, String> = BTreeMap::new();
        if !cts.is_empty() {
            let Some(m) = manager else {
                return Err(ConfigError::NoSecrets {
                    path: self.path.clone(),
                    message: "it holds secure values: set KEEL_CONFIG_PASSPHRASE (or KEEL_CONFIG_PASSPHRASE_FILE) to the stack's passphrase".into(),
                });
            };
            let opened = m.decrypt(&cts).map_err(|source| ConfigError::Secrets {
                path: self.path.clone(),
                source,
            })?;
            plain = cts.into_iter().zip(opened).collect();
        }
        self.resolve_with(&plain)
    }

    /// Every key's value with each secure value shown as `[secret]`
    /// (nothing decrypted: for listings without `--show-secrets`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a mapping key that is not a string.
    pub fn resolve_masked(&self) -> Result<Vec<Resolved>> {
        let mut cts = Vec::new();
        for (_, v) in self.entries() {
            ciphertexts(v, &mut cts);
        }
        let plain = cts
            .into_iter()
            .map(|c| (c, "[secret]".to_owned()))
            .collect();
        self.resolve_with(&plain)
    }

    fn resolve_with(&self, plain: &BTreeMap<&str, String>) -> Result<Vec<Resolved>> {
        let mut out = Vec::new();
        for (k, v) in self.entries() {
            let Some(key) = self.normalize(k) else {
                continue;
            };
            let invalid = |message: String| ConfigError::Invalid {
                path: self.path.clone(),
                message: format!("config `{key}`: {message}"),
            };
            let json = to_json(v, plain).map_err(invalid)?;
            let value = to_property(v, plain).map_err(invalid)?;
            let text = match &json {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            out.push(Resolved {
                key,
                text,
                value,
                secret: contains_secure(v),
            });
        }
        Ok(out)
    }

    /// The file's text.
    pub fn to_text(&self) -> String {
        if self.doc.is_empty() {
            return String::new();
        }
        serde_norway::to_string(&Yaml::Mapping(self.doc.clone())).unwrap_or_default()
    }

    /// Writes the file atomically.
    ///
    /// # Errors
    /// [`ConfigError::Io`].
    pub fn save(&self) -> Result<()> {
        let path = match self.path.parent() {
            Some(d) if d.as_os_str().is_empty() => Path::new(".").join(&self.path),
            _ => self.path.clone(),
        };
        crate::persist::fs::atomic_write(
            &path,
            self.to_text().as_bytes(),
            false,
            &crate::persist::fs::IoCounters::default(),
        )
        .map_err(|e| ConfigError::Io {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }
}

/// A `--path` value as Pulumi stores it: `true`/`false` as booleans,
/// integers (no leading zero but `0` itself) as numbers, else a string.
fn typed(value: &str) -> Yaml {
    match value {
        "true" => return Yaml::Bool(true),
        "false" => return Yaml::Bool(false),
        _ => {}
    }
    let digits = value.trim_start_matches(['+', '-']);
    let leading_zero = value.len() > 1 && value.starts_with('0');
    if !leading_zero && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(n) = value.parse::<i64>() {
            return Yaml::Number(n.into());
        }
    }
    Yaml::String(value.to_owned())
}

fn reserved(m: &Mapping) -> bool {
    m.len() == 1 && m.contains_key(SECURE)
}

/// `root` with `leaf` set at `segs` (creating what is missing).
fn set_in(root: Yaml, segs: &[Segment], leaf: Yaml) -> std::result::Result<Yaml, String> {
    let Some((seg, rest)) = segs.split_first() else {
        return Ok(leaf);
    };
    match (seg, root) {
        (Segment::Key(_), Yaml::Null) => set_in(Yaml::Mapping(Mapping::new()), segs, leaf),
        (Segment::Index(_), Yaml::Null) => set_in(Yaml::Sequence(Vec::new()), segs, leaf),
        (Segment::Key(k), Yaml::Mapping(mut m))
            if is_secure(&Yaml::Mapping(m.clone())).is_none() =>
        {
            let child = m.get(k.as_str()).cloned().unwrap_or(Yaml::Null);
            let child = match (&child, rest.first()) {
                // The leaf replaces whatever is there.
                (_, None) => leaf,
                (c, Some(_)) if is_container(c) || c.is_null() => set_in(child, rest, leaf)?,
                (_, Some(next)) => return Err(mismatch(next)),
            };
            m.insert(Yaml::String(k.clone()), child);
            if reserved(&m) {
                return Err("`secure` is reserved as the only key of a mapping (it marks an encrypted value)".into());
            }
            Ok(Yaml::Mapping(m))
        }
        (Segment::Index(i), Yaml::Sequence(mut s)) => {
            if *i > s.len() {
                return Err(format!(
                    "index {i} is past the end of a list of {} (use {} to append)",
                    s.len(),
                    s.len()
                ));
            }
            let child = s.get(*i).cloned().unwrap_or(Yaml::Null);
            let child = match (&child, rest.first()) {
                (_, None) => leaf,
                (c, Some(_)) if is_container(c) || c.is_null() => set_in(child, rest, leaf)?,
                (_, Some(next)) => return Err(mismatch(next)),
            };
            if *i == s.len() {
                s.push(child);
            } else {
                s[*i] = child;
            }
            Ok(Yaml::Sequence(s))
        }
        (seg, _) => Err(mismatch(seg)),
    }
}

fn is_container(v: &Yaml) -> bool {
    matches!(v, Yaml::Mapping(_) | Yaml::Sequence(_)) && is_secure(v).is_none()
}

fn mismatch(seg: &Segment) -> String {
    match seg {
        Segment::Index(i) => format!("a list was expected for index {i}"),
        Segment::Key(k) => format!("a mapping was expected for key {k:?}"),
    }
}

/// Removes the value at `segs` under `root` (nothing when absent).
fn remove_in(root: &mut Yaml, segs: &[Segment]) -> std::result::Result<(), String> {
    let Some((seg, rest)) = segs.split_first() else {
        return Ok(());
    };
    if is_secure(root).is_some() {
        return Ok(());
    }
    match (seg, root) {
        (Segment::Key(k), Yaml::Mapping(m)) => {
            if rest.is_empty() {
                m.shift_remove(k.as_str());
                if reserved(m) {
                    return Err("`secure` is reserved as the only key of a mapping (it marks an encrypted value)".into());
                }
            } else if let Some(child) = m.get_mut(k.as_str()) {
                remove_in(child, rest)?;
            }
        }
        (Segment::Index(i), Yaml::Sequence(s)) => {
            if rest.is_empty() {
                if *i < s.len() {
                    s.remove(*i);
                }
            } else if let Some(child) = s.get_mut(*i) {
                remove_in(child, rest)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A config value as JSON with its secure values' plaintexts.
fn to_json(
    v: &Yaml,
    plain: &BTreeMap<&str, String>,
) -> std::result::Result<serde_json::Value, String> {
    use serde_json::Value as J;
    if let Some(c) = is_secure(v) {
        return Ok(J::String(plain.get(c).cloned().unwrap_or_default()));
    }
    Ok(match v {
        Yaml::Null => J::Null,
        Yaml::Bool(b) => J::Bool(*b),
        Yaml::Number(n) => serde_json::to_value(n).map_err(|e| e.to_string())?,
        Yaml::String(s) => J::String(s.clone()),
        Yaml::Sequence(s) => J::Array(
            s.iter()
                .map(|v| to_json(v, plain))
                .collect::<std::result::Result<_, _>>()?,
        ),
        Yaml::Mapping(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                let k = key_text(k).ok_or_else(|| format!("key {k:?} must be a string"))?;
                out.insert(k, to_json(v, plain)?);
            }
            J::Object(out)
        }
        Yaml::Tagged(t) => to_json(&t.value, plain)?,
    })
}

/// A config value as a property value, secure values as secrets.
fn to_property(
    v: &Yaml,
    plain: &BTreeMap<&str, String>,
) -> std::result::Result<PropertyValue, String> {
    if let Some(c) = is_secure(v) {
        let text = plain.get(c).cloned().unwrap_or_default();
        return Ok(PropertyValue::Secret(Secret::plaintext(
            PropertyValue::String(text),
        )));
    }
    Ok(match v {
        Yaml::Sequence(s) => PropertyValue::Array(
            s.iter()
                .map(|v| to_property(v, plain))
                .collect::<std::result::Result<_, _>>()?,
        ),
        Yaml::Mapping(m) => {
            let mut out = crate::model::PropertyMap::new();
            for (k, v) in m {
                let k = key_text(k).ok_or_else(|| format!("key {k:?} must be a string"))?;
                out.insert(k, to_property(v, plain)?);
            }
            PropertyValue::Object(out)
        }
        Yaml::Tagged(t) => to_property(&t.value, plain)?,
        other => PropertyValue::from_json(&to_json(other, plain)?).map_err(|e| e.to_string())?,
    })
}

/// The plaintexts of the secure values among `resolved` (to keep them out
/// of a program's printed output).
pub fn secret_texts(resolved: &[Resolved]) -> Vec<String> {
    fn walk(v: &PropertyValue, out: &mut Vec<String>) {
        match v {
            PropertyValue::Secret(Secret::Plaintext(p)) => {
                if let Some(s) = p.value().as_str() {
                    if !s.is_empty() && !out.iter().any(|o| o == s) {
                        out.push(s.to_owned());
                    }
                }
            }
            PropertyValue::Array(a) => a.iter().for_each(|v| walk(v, out)),
            PropertyValue::Object(m) => m.values().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for r in resolved {
        walk(&r.value, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::PassphraseManager;

    const KNOWN: &str = "v1:fozI5u6B030=:v1:F+6ZduKKd8G0/V7L:PGMFeIzwobWRKmEAzUdaQHqC5mMRIQ==";

    fn key(s: &str) -> ConfigKey {
        ConfigKey::parse(s, "shop").unwrap()
    }

    #[test]
    fn keys_take_the_project_namespace() {
        assert_eq!(key("env").full(), "shop:env");
        assert_eq!(key("aws:region").full(), "aws:region");
        assert_eq!(key("aws:config:region").full(), "aws:region");
        assert!(ConfigKey::parse(":x", "shop").is_err());
        assert!(ConfigKey::parse("ns:", "shop").is_err());
        assert!(ConfigKey::parse("", "shop").is_err());
    }

    #[test]
    fn paths_parse_like_pulumis() {
        use Segment::{Index as I, Key as K};
        let k = |s: &str| K(s.to_owned());
        let check = |p: &str, want: Vec<Segment>| assert_eq!(parse_path(p), Ok(want), "{p}");
        check("a", vec![k("a")]);
        check("a.b", vec![k("a"), k("b")]);
        check("a[0]", vec![k("a"), I(0)]);
        check("a[0].b[12]", vec![k("a"), I(0), k("b"), I(12)]);
        check("tags[\"Name\"]", vec![k("tags"), k("Name")]);
        check("a[\"b.c\"].d", vec![k("a"), k("b.c"), k("d")]);
        check("a[\"q\\\"x\"]", vec![k("a"), k("q\"x")]);
        check("[\"x.y\"]", vec![k("x.y")]);
        for bad in [
            "", ".a", "a..b", "a.", "a[", "a[x]", "a[-1]", "a[\"b", "a[\"b\"", "a.[0]",
        ] {
            assert!(parse_path(bad).is_err(), "{bad:?} should not parse");
        }
    }

    fn config(text: &str) -> StackConfig {
        StackConfig::parse(PathBuf::from("Pulumi.dev.yaml"), "shop", text).unwrap()
    }

    #[test]
    fn set_get_and_remove_with_paths() {
        let mut c = config("config:\n  shop:name: old\n  aws:region: eu-west-1\n");
        c.set(&key("names[0]"), true, "a", false).unwrap();
        c.set(&key("names[1]"), true, "b", false).unwrap();
        c.set(&key("db.port"), true, "5432", false).unwrap();
        c.set(&key("db.tls"), true, "true", false).unwrap();
        c.set(&key("db.zip"), true, "007", false).unwrap();
        c.set(&key("db.password"), true, "v1:ct", true).unwrap();
        // Without --path a value is a string, whatever it looks like.
        c.set(&key("n"), false, "3", false).unwrap();
        // A scalar at the top is replaced by the structure a path needs.
        c.set(&key("name.first"), true, "x", false).unwrap();
        let text = c.to_text();
        let back: serde_json::Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(
            back["config"],
            serde_json::json!({
                "shop:name": {"first": "x"},
                "aws:region": "eu-west-1",
                "shop:names": ["a", "b"],
                "shop:db": {"port": 5432, "tls": true, "zip": "007", "password": {"secure": "v1:ct"}},
                "shop:n": "3",
            })
        );
        // File order is kept: existing keys first, new ones appended.
        assert_eq!(
            c.keys()[..3],
            ["shop:name", "aws:region", "shop:names"].map(String::from)
        );
        assert_eq!(
            c.get(&key("db.port"), true).unwrap(),
            Some(Yaml::Number(5432.into()))
        );
        assert_eq!(c.get(&key("names[1]"), true).unwrap(), Some("b".into()));
        assert_eq!(c.get(&key("names[5]"), true).unwrap(), None);
        // Errors name the problem and change nothing.
        let before = c.to_text();
        for (k, why) in [
            ("names[3]", "past the end"),
            ("names.x", "mapping was expected"),
            ("db[0]", "list was expected"),
            ("db.port.x", "mapping was expected"),
        ] {
            let e = c.set(&key(k), true, "v", false).unwrap_err();
            assert!(e.to_string().contains(why), "{k}: {e}");
        }
        let e = c.set(&key("obj.secure"), true, "x", false).unwrap_err();
        assert!(e.to_string().contains("reserved"), "{e}");
        assert_eq!(c.to_text(), before);
        c.remove(&key("names[0]"), true).unwrap();
        c.remove(&key("db.zip"), true).unwrap();
        c.remove(&key("aws:region"), false).unwrap();
        c.remove(&key("missing.x"), true).unwrap();
        let back: serde_json::Value = serde_norway::from_str(&c.to_text()).unwrap();
        assert_eq!(back["config"]["shop:names"], serde_json::json!(["b"]));
        assert!(back["config"]["shop:db"].get("zip").is_none());
        assert!(back["config"].get("aws:region").is_none());
    }

    #[test]
    fn resolve_decrypts_nested_secure_values_into_secrets() {
        let m = PassphraseManager::from_salt_state("password", KNOWN).unwrap();
        let ct = |s: &str| m.encrypt(&[s]).unwrap().remove(0);
        let text = format!(
            "encryptionsalt: {KNOWN}\nconfig:\n  env: prod\n  n: 3\n  pw:\n    secure: {}\n  db:\n    user: admin\n    hosts: [a, {{secure: {}}}]\n    password:\n      secure: {}\n",
            ct("hunter2"),
            ct("b-host"),
            ct("s3cret"),
        );
        let c = config(&text);
        assert_eq!(c.encryption_salt(), Some(KNOWN));
        assert!(c.has_secure());
        // No manager: refused, naming the file.
        let e = c.resolve(None).unwrap_err();
        assert!(e.to_string().contains("KEEL_CONFIG_PASSPHRASE"), "{e}");
        let r = c.resolve(Some(&m)).unwrap();
        let by: BTreeMap<&str, &Resolved> = r.iter().map(|r| (r.key.as_str(), r)).collect();
        assert_eq!(by["shop:env"].text, "prod");
        assert!(!by["shop:env"].secret);
        assert_eq!(by["shop:n"].text, "3");
        assert_eq!(by["shop:pw"].text, "hunter2");
        assert!(by["shop:pw"].secret);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&by["shop:db"].text).unwrap(),
            serde_json::json!({"user": "admin", "hosts": ["a", "b-host"], "password": "s3cret"})
        );
        assert!(by["shop:db"].secret);
        // The property view keeps each secure value a secret, and no
        // ciphertext remains anywhere.
        let db = by["shop:db"].value.to_json().to_string();
        assert!(!db.contains("v1:"), "{db}");
        assert!(matches!(by["shop:pw"].value, PropertyValue::Secret(_)));
        assert_eq!(
            secret_texts(&r),
            ["hunter2", "b-host", "s3cret"].map(String::from)
        );
        // A wrong key is an error, not ciphertext passed on.
        let other = PassphraseManager::new("other").unwrap();
        assert!(c.resolve(Some(&other)).is_err());
    }

    #[test]
    fn bad_files_are_refused_with_the_file() {
        for bad in [
            "[1, 2]",
            "config: [1]",
            "config:\n  \":x\": 1\n",
            "encryptionsalt: [1]\n",
        ] {
            let e = StackConfig::parse(PathBuf::from("Pulumi.dev.yaml"), "shop", bad).unwrap_err();
            assert!(e.to_string().starts_with("Pulumi.dev.yaml: "), "{bad}: {e}");
        }
        let mut c = config("");
        assert!(c.keys().is_empty() && c.to_text().is_empty());
        c.set_encryption_salt(KNOWN);
        c.set(&key("x"), false, "1", false).unwrap();
        assert!(
            c.to_text().starts_with("encryptionsalt: "),
            "{}",
            c.to_text()
        );
    }
}
