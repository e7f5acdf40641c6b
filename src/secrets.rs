//! Secrets encrypted at rest, in the format of Pulumi's passphrase secrets
//! provider, so stacks move between Pulumi and keel in both directions.
//!
//! - The provider's state is `{"salt": "v1:<base64 salt>:<check>"}` where the
//!   salt is 8 bytes and `<check>` is the encryption of the string `pulumi`,
//!   used to tell a wrong passphrase before anything runs.
//! - The key is PBKDF2-HMAC-SHA256 of the passphrase with that salt,
//!   1,000,000 rounds, 32 bytes; it is derived once per operation.
//! - A value encrypts with AES-256-GCM and a random 12-byte nonce to
//!   `v1:<base64 nonce>:<base64 ciphertext and tag>`. A secret's
//!   `ciphertext` is the encryption of the JSON text of its value.
//!
//! [`Crypter`] applies a [`SecretsManager`] to whole deployments: it turns
//! every plaintext secret into a ciphertext before a write and back after a
//! read, remembering the pairs it has seen so that an unchanged secret keeps
//! its ciphertext (no churn in the state file).

use crate::locks::MutexExt;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::Aes256Gcm;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

use crate::model::property::{PlaintextSecret, PropertyValue, Secret, SIG_KEY, SIG_SECRET};
use crate::model::snapshot::SecretsProviders;
use crate::model::{Deployment, State};

/// The provider type of the passphrase provider.
pub const PASSPHRASE_TYPE: &str = "passphrase";
/// PBKDF2 rounds of the passphrase provider.
pub const PBKDF2_ROUNDS: u32 = 1_000_000;
/// The plaintext whose encryption follows the salt in the provider state.
const CHECK_VALUE: &str = "pulumi";
/// The environment variables a passphrase is read from, in order; each may
/// also be given as a file with the `_FILE` suffix.
pub const PASSPHRASE_VARS: [&str; 2] = ["KEEL_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE"];

/// Why secrets could not be encrypted or decrypted.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// The passphrase does not decrypt the provider's check value.
    #[error("incorrect passphrase: it does not decrypt this stack's secrets")]
    WrongPassphrase,
    /// The stack holds secrets but no passphrase was given.
    #[error("this stack holds secrets: set KEEL_CONFIG_PASSPHRASE (or KEEL_CONFIG_PASSPHRASE_FILE) to its passphrase")]
    NoPassphrase,
    /// A secret config value is to be encrypted or decrypted, but no
    /// passphrase was given.
    #[error("secret config values are encrypted with the stack's passphrase: set KEEL_CONFIG_PASSPHRASE (or KEEL_CONFIG_PASSPHRASE_FILE) to it (a new stack's, to any passphrase: it becomes the stack's)")]
    NoConfigPassphrase,
    /// Secrets must be written but the stack has no secrets provider.
    #[error("secrets must be stored (the program's or a provider's outputs) but the stack has no secrets provider: set KEEL_CONFIG_PASSPHRASE (or KEEL_CONFIG_PASSPHRASE_FILE) to encrypt them")]
    NoProvider,
    /// A file to import holds plaintext secrets but no passphrase was given.
    #[error("the file holds plaintext secrets: set KEEL_CONFIG_PASSPHRASE (or KEEL_CONFIG_PASSPHRASE_FILE) so they are encrypted at rest")]
    PlaintextImport,
    /// A state to import or write holds plaintext secrets beside secrets
    /// encrypted by a provider keel cannot use, so its secrets cannot all
    /// be encrypted with one key.
    #[error("the state holds plaintext secrets and secrets encrypted by the `{0}` secrets provider, which keel cannot decrypt (only `passphrase`), so they cannot be encrypted with one key: give every secret in plaintext (`pulumi stack export --show-secrets`) or none")]
    MixedImport(String),
    /// Decryption is needed but the provider is not one keel implements.
    #[error("this stack's secrets are encrypted by the `{0}` secrets provider, which keel cannot decrypt (only `passphrase`)")]
    Unsupported(String),
    /// A ciphertext is not of the form `v1:<nonce>:<ciphertext>`.
    #[error("malformed ciphertext: {0}")]
    Malformed(String),
    /// The provider state is not of the passphrase provider's form.
    #[error("malformed passphrase provider state: {0}")]
    BadState(String),
    /// A ciphertext does not decrypt with the key (tampered or foreign).
    #[error("a secret does not decrypt with this stack's key (tampered or from another stack)")]
    Decrypt,
    /// AES-GCM refused to encrypt (a value too long for one message).
    #[error("a secret could not be encrypted")]
    Encrypt,
    /// A decrypted secret is not JSON.
    #[error("a decrypted secret is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// The operating system gave no randomness.
    #[error("no randomness for a nonce or salt: {0}")]
    Random(String),
    /// A passphrase file could not be read.
    #[error("cannot read the passphrase file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Encrypts and decrypts strings in batches.
pub trait SecretsManager: Send + Sync + std::fmt::Debug {
    /// The provider's type (`passphrase`, ...).
    fn provider_type(&self) -> &str;

    /// The provider's state, as written in `secrets_providers.state`.
    fn state_json(&self) -> serde_json::Value;

    /// Encrypts each string.
    ///
    /// # Errors
    /// [`SecretsError`] when a value cannot be encrypted.
    fn encrypt(&self, plaintexts: &[&str]) -> Result<Vec<String>, SecretsError>;

    /// Decrypts each ciphertext.
    ///
    /// # Errors
    /// [`SecretsError`] for a malformed or foreign ciphertext.
    fn decrypt(&self, ciphertexts: &[&str]) -> Result<Vec<String>, SecretsError>;
}

thread_local! {
    static DERIVATIONS: Cell<u64> = const { Cell::new(0) };
}

/// How many keys this thread has derived (to check that an operation
/// derives its key once).
pub fn key_derivations() -> u64 {
    DERIVATIONS.with(Cell::get)
}

fn derive_key(passphrase: &str, salt: &[u8]) -> Aes256Gcm {
    DERIVATIONS.with(|c| c.set(c.get() + 1));
    let mut key = [0u8; 32];
    keel_kdf::pbkdf2_sha256(passphrase.as_bytes(), salt, PBKDF2_ROUNDS, &mut key);
    let cipher = Aes256Gcm::new_from_slice(&key).expect("a 32-byte key");
    key.fill(0);
    cipher
}

fn random(buf: &mut [u8]) -> Result<(), SecretsError> {
    getrandom::fill(buf).map_err(|e| SecretsError::Random(e.to_string()))
}

fn seal(cipher: &Aes256Gcm, plaintext: &str) -> Result<String, SecretsError> {
    let mut nonce = [0u8; 12];
    random(&mut nonce)?;
    let sealed = cipher
        .encrypt(&nonce.into(), plaintext.as_bytes())
        .map_err(|_| SecretsError::Encrypt)?;
    Ok(format!("v1:{}:{}", B64.encode(nonce), B64.encode(sealed)))
}

fn open(cipher: &Aes256Gcm, ciphertext: &str) -> Result<String, SecretsError> {
    let malformed = || SecretsError::Malformed(ciphertext.chars().take(40).collect());
    let mut parts = ciphertext.split(':');
    let (Some("v1"), Some(nonce), Some(sealed), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    let nonce: [u8; 12] = B64
        .decode(nonce)
        .ok()
        .and_then(|n| n.try_into().ok())
        .ok_or_else(malformed)?;
    let sealed = B64.decode(sealed).map_err(|_| malformed())?;
    let plain = cipher
        .decrypt(&nonce.into(), sealed.as_slice())
        .map_err(|_| SecretsError::Decrypt)?;
    String::from_utf8(plain).map_err(|_| SecretsError::Decrypt)
}

/// Pulumi's passphrase secrets provider.
pub struct PassphraseManager {
    cipher: Aes256Gcm,
    salt_state: String,
}

impl std::fmt::Debug for PassphraseManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassphraseManager")
            .field("salt_state", &self.salt_state)
            .finish_non_exhaustive()
    }
}

impl PassphraseManager {
    /// A provider with a fresh random salt (for a new stack).
    ///
    /// # Errors
    /// [`SecretsError::Random`].
    pub fn new(passphrase: &str) -> Result<Self, SecretsError> {
        let mut salt = [0u8; 8];
        random(&mut salt)?;
        let cipher = derive_key(passphrase, &salt);
        let check = seal(&cipher, CHECK_VALUE)?;
        Ok(Self {
            cipher,
            salt_state: format!("v1:{}:{check}", B64.encode(salt)),
        })
    }

    /// The provider of a stack whose salt state is `salt_state`, checking
    /// the passphrase against the state's check value.
    ///
    /// # Errors
    /// [`SecretsError::WrongPassphrase`]; [`SecretsError::BadState`].
    pub fn from_salt_state(passphrase: &str, salt_state: &str) -> Result<Self, SecretsError> {
        let bad = |why: &str| SecretsError::BadState(why.to_owned());
        let rest = salt_state
            .strip_prefix("v1:")
            .ok_or_else(|| bad("no `v1:` prefix"))?;
        let (salt, check) = rest.split_once(':').ok_or_else(|| bad("no check value"))?;
        let salt = B64
            .decode(salt)
            .map_err(|_| bad("the salt is not base64"))?;
        let cipher = derive_key(passphrase, &salt);
        match open(&cipher, check) {
            Ok(v) if v == CHECK_VALUE => {}
            Ok(_) | Err(SecretsError::Decrypt) => return Err(SecretsError::WrongPassphrase),
            Err(_) => return Err(bad("the check value is malformed")),
        }
        Ok(Self {
            cipher,
            salt_state: salt_state.to_owned(),
        })
    }

    /// The provider described by a stack's `secrets_providers`.
    ///
    /// # Errors
    /// [`SecretsError::Unsupported`] for another provider type; as
    /// [`Self::from_salt_state`].
    pub fn from_providers(
        passphrase: &str,
        providers: &SecretsProviders,
    ) -> Result<Self, SecretsError> {
        if providers.ty != PASSPHRASE_TYPE {
            return Err(SecretsError::Unsupported(providers.ty.clone()));
        }
        let salt = providers
            .state
            .get("salt")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| SecretsError::BadState("no `salt`".into()))?;
        Self::from_salt_state(passphrase, salt)
    }

    /// The salt state (`v1:<salt>:<check>`).
    pub fn salt_state(&self) -> &str {
        &self.salt_state
    }

    /// The `secrets_providers` entry naming this provider.
    pub fn providers(&self) -> SecretsProviders {
        SecretsProviders {
            ty: PASSPHRASE_TYPE.into(),
            state: self.state_json(),
            ..SecretsProviders::default()
        }
    }
}

impl SecretsManager for PassphraseManager {
    fn provider_type(&self) -> &str {
        PASSPHRASE_TYPE
    }

    fn state_json(&self) -> serde_json::Value {
        serde_json::json!({ "salt": self.salt_state })
    }

    fn encrypt(&self, plaintexts: &[&str]) -> Result<Vec<String>, SecretsError> {
        plaintexts.iter().map(|p| seal(&self.cipher, p)).collect()
    }

    fn decrypt(&self, ciphertexts: &[&str]) -> Result<Vec<String>, SecretsError> {
        ciphertexts.iter().map(|c| open(&self.cipher, c)).collect()
    }
}

/// The passphrase from the environment: `KEEL_CONFIG_PASSPHRASE`,
/// `KEEL_CONFIG_PASSPHRASE_FILE`, `PULUMI_CONFIG_PASSPHRASE`,
/// `PULUMI_CONFIG_PASSPHRASE_FILE`, the first one set. A file's trailing
/// newline is dropped.
///
/// # Errors
/// [`SecretsError::File`] for an unreadable passphrase file.
pub fn passphrase_from_env() -> Result<Option<String>, SecretsError> {
    for var in PASSPHRASE_VARS {
        if let Ok(p) = std::env::var(var) {
            return Ok(Some(p));
        }
        if let Ok(path) = std::env::var(format!("{var}_FILE")) {
            let text = std::fs::read_to_string(&path)
                .map_err(|source| SecretsError::File { path, source })?;
            return Ok(Some(text.trim_end_matches(['\n', '\r']).to_owned()));
        }
    }
    Ok(None)
}

/// Applies a secrets manager to whole deployments for one operation,
/// remembering every (ciphertext, plaintext JSON) pair it has seen so that
/// an unchanged secret is written back with its ciphertext.
///
/// Without a manager (no provider, or one keel cannot decrypt) ciphertexts
/// pass through untouched and writing a plaintext secret is an error.
///
/// Equal plaintexts share one ciphertext within a stack (the cache is keyed
/// by the value's JSON text), as they would after a re-read anyway.
#[derive(Debug, Default)]
pub struct Crypter {
    manager: Option<Arc<dyn SecretsManager>>,
    unsupported: Option<String>,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    by_ciphertext: HashMap<String, String>,
    by_plaintext: HashMap<String, String>,
}

impl Cache {
    fn insert(&mut self, ciphertext: String, plaintext: String) {
        self.by_plaintext
            .insert(plaintext.clone(), ciphertext.clone());
        self.by_ciphertext.insert(ciphertext, plaintext);
    }
}

impl Crypter {
    /// A crypter using `manager`.
    pub fn new(manager: Arc<dyn SecretsManager>) -> Self {
        Self {
            manager: Some(manager),
            ..Self::default()
        }
    }

    /// A crypter for a stack whose provider keel cannot use (`service`,
    /// `awskms`, ...): ciphertexts pass through, decryption names it.
    pub fn unsupported(provider: impl Into<String>) -> Self {
        Self {
            unsupported: Some(provider.into()),
            ..Self::default()
        }
    }

    /// The crypter for a stack with `providers` and maybe a passphrase:
    /// derives the key once. A stack with no provider gets the passphrase
    /// provider (fresh salt) when a passphrase is given.
    ///
    /// # Errors
    /// [`SecretsError::WrongPassphrase`] and malformed state.
    pub fn for_stack(
        providers: &SecretsProviders,
        passphrase: Option<&str>,
    ) -> Result<Self, SecretsError> {
        match (providers.ty.as_str(), passphrase) {
            ("", None) => Ok(Self::default()),
            ("", Some(p)) => Ok(Self::new(Arc::new(PassphraseManager::new(p)?))),
            (PASSPHRASE_TYPE, Some(p)) => Ok(Self::new(Arc::new(
                PassphraseManager::from_providers(p, providers)?,
            ))),
            (PASSPHRASE_TYPE, None) => Ok(Self {
                unsupported: Some(PASSPHRASE_TYPE.into()),
                ..Self::default()
            }),
            (other, _) => Ok(Self::unsupported(other)),
        }
    }

    /// The manager, if any.
    pub fn manager(&self) -> Option<&Arc<dyn SecretsManager>> {
        self.manager.as_ref()
    }

    /// Why a plaintext secret cannot be encrypted by this crypter.
    pub(crate) fn missing(&self) -> SecretsError {
        match self.unsupported.as_deref() {
            Some(PASSPHRASE_TYPE) => SecretsError::NoPassphrase,
            Some(other) => SecretsError::Unsupported(other.to_owned()),
            None => SecretsError::NoProvider,
        }
    }

    /// Whether [`Crypter::encrypt_deployment`] would change (or refuse)
    /// `d`: it has a manager, and `d` names no secrets provider yet or holds
    /// a plaintext secret. Otherwise `d` can be written as it is (without a
    /// manager a plaintext secret is refused by the storage encoders as
    /// they meet it, not looked for first).
    pub fn changes(&self, d: &Deployment) -> bool {
        self.manager.is_some() && (d.secrets_providers.ty.is_empty() || Self::has_plaintext(d))
    }

    /// Turns every plaintext secret of `d` into a ciphertext, and names the
    /// manager's provider in `d.secrets_providers` when it encrypted any.
    ///
    /// # Errors
    /// [`SecretsError::NoProvider`] / [`SecretsError::Unsupported`] when
    /// there are plaintext secrets and no manager.
    pub fn encrypt_deployment(&self, d: &mut Deployment) -> Result<(), SecretsError> {
        let any = Self::has_plaintext(d);
        let mut manager = self.manager.as_ref();
        if let Some(m) = manager {
            if d.secrets_providers.ty.is_empty() {
                d.secrets_providers.ty = m.provider_type().to_owned();
                d.secrets_providers.state = m.state_json();
            } else if d.secrets_providers.ty != m.provider_type()
                || d.secrets_providers.state != m.state_json()
            {
                // Another provider's (or salt's) state: never mix keys.
                manager = None;
            }
        }
        if !any {
            return Ok(());
        }
        let Some(m) = manager else {
            return Err(self.missing());
        };
        // Encrypt, in one batch, what the cache does not know.
        let mut todo: Vec<String> = Vec::new();
        {
            let cache = self.cache.locked();
            for_each_secret(d, &mut |s| {
                if let Secret::Plaintext(p) = s {
                    let text = p.encoded();
                    if !cache.by_plaintext.contains_key(&text) && !todo.contains(&text) {
                        todo.push(text);
                    }
                }
                Ok(())
            })?;
        }
        let refs: Vec<&str> = todo.iter().map(String::as_str).collect();
        let sealed = m.encrypt(&refs)?;
        let mut cache = self.cache.locked();
        for (p, c) in todo.into_iter().zip(sealed) {
            cache.insert(c, p);
        }
        for_each_secret(d, &mut |s| {
            if let Secret::Plaintext(p) = s {
                let c = cache.by_plaintext[&p.encoded()].clone();
                *s = Secret::Ciphertext(c);
            }
            Ok(())
        })
    }

    /// Turns every ciphertext of `d` into a plaintext secret.
    ///
    /// # Errors
    /// [`SecretsError::NoPassphrase`] / [`SecretsError::Unsupported`] when
    /// there are ciphertexts and no manager; decryption errors.
    pub fn decrypt_deployment(&self, d: &mut Deployment) -> Result<(), SecretsError> {
        self.decrypt_each(&mut |f| for_each_secret(d, f))
    }

    /// Turns every ciphertext in `values` into a plaintext secret (a saved
    /// plan's goals).
    ///
    /// # Errors
    /// As [`Self::decrypt_deployment`].
    pub fn decrypt_values(&self, values: &mut [&mut PropertyValue]) -> Result<(), SecretsError> {
        self.decrypt_each(&mut |f| values.iter_mut().try_for_each(|v| walk_value(v, f)))
    }

    /// Decrypts the secrets `each` visits (it is called twice: to collect,
    /// then to replace).
    fn decrypt_each(
        &self,
        each: &mut dyn FnMut(&mut Visit<'_>) -> Result<(), SecretsError>,
    ) -> Result<(), SecretsError> {
        let mut todo: Vec<String> = Vec::new();
        {
            let cache = self.cache.locked();
            each(&mut |s| {
                if let Secret::Ciphertext(c) = s {
                    if !cache.by_ciphertext.contains_key(c) && !todo.contains(c) {
                        todo.push(c.clone());
                    }
                }
                Ok(())
            })?;
        }
        if !todo.is_empty() {
            let Some(m) = &self.manager else {
                return Err(self.missing());
            };
            let refs: Vec<&str> = todo.iter().map(String::as_str).collect();
            let opened = m.decrypt(&refs)?;
            let mut cache = self.cache.locked();
            for (c, p) in todo.into_iter().zip(opened) {
                cache.insert(c, p);
            }
        }
        let cache = self.cache.locked();
        each(&mut |s| {
            if let Secret::Ciphertext(c) = s {
                let Some(text) = cache.by_ciphertext.get(c) else {
                    return Ok(());
                };
                let p =
                    PlaintextSecret::from_encoded(text.clone()).map_err(SecretsError::NotJson)?;
                *s = Secret::Plaintext(p);
            }
            Ok(())
        })
    }

    /// Encrypts every plaintext secret in a JSON document in the checkpoint
    /// encoding (a journal entry): objects signed as secrets with a
    /// `plaintext` key get a `ciphertext` instead.
    ///
    /// # Errors
    /// As [`Self::encrypt_deployment`].
    pub fn encrypt_json(&self, v: &mut serde_json::Value) -> Result<(), SecretsError> {
        fn collect<'a>(v: &'a mut serde_json::Value, out: &mut Vec<&'a mut serde_json::Value>) {
            let secret = v.get(SIG_KEY).and_then(serde_json::Value::as_str) == Some(SIG_SECRET)
                && v.get("plaintext").is_some_and(serde_json::Value::is_string);
            if secret {
                out.push(v);
                return;
            }
            match v {
                serde_json::Value::Object(m) => m.values_mut().for_each(|v| collect(v, out)),
                serde_json::Value::Array(a) => a.iter_mut().for_each(|v| collect(v, out)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        collect(v, &mut found);
        if found.is_empty() {
            return Ok(());
        }
        let Some(m) = &self.manager else {
            return Err(self.missing());
        };
        let text = |v: &serde_json::Value| v["plaintext"].as_str().unwrap_or_default().to_owned();
        let mut todo: Vec<String> = Vec::new();
        {
            let cache = self.cache.locked();
            for v in &found {
                let t = text(v);
                if !cache.by_plaintext.contains_key(&t) && !todo.contains(&t) {
                    todo.push(t);
                }
            }
        }
        let refs: Vec<&str> = todo.iter().map(String::as_str).collect();
        let sealed = m.encrypt(&refs)?;
        let mut cache = self.cache.locked();
        for (p, c) in todo.into_iter().zip(sealed) {
            cache.insert(c, p);
        }
        for v in found {
            let c = cache.by_plaintext[&text(v)].clone();
            if let Some(obj) = v.as_object_mut() {
                obj.remove("plaintext");
                obj.insert("ciphertext".into(), c.into());
            }
        }
        Ok(())
    }

    /// The crypter that encrypts the plaintext secrets of `d`, a state
    /// brought in from outside (`stack import`, `state edit`), with the
    /// passphrase provider: `d`'s own, or keel's taking over from a
    /// provider keel cannot encrypt with (`service`, `awskms`, ...; as
    /// Pulumi re-encrypts an import with the target stack's manager), whose
    /// name and state are then cleared from `d`.
    ///
    /// # Errors
    /// [`SecretsError::MixedImport`] when `d` also holds that provider's
    /// ciphertexts (one stack, one key; `d` is unchanged then); what
    /// [`Crypter::for_stack`] returns for a wrong passphrase.
    pub fn for_plaintext(d: &mut Deployment, passphrase: &str) -> Result<Self, SecretsError> {
        let ty = &d.secrets_providers.ty;
        if !ty.is_empty() && ty != PASSPHRASE_TYPE {
            if Self::has_ciphertext(d) {
                return Err(SecretsError::MixedImport(ty.clone()));
            }
            d.secrets_providers = SecretsProviders::default();
        }
        Self::for_stack(&d.secrets_providers, Some(passphrase))
    }

    /// Whether `d` holds any plaintext secret.
    pub fn has_plaintext(d: &Deployment) -> bool {
        any_secret(d, &|s| matches!(s, Secret::Plaintext(_)))
    }

    /// Whether `d` holds any encrypted secret.
    pub fn has_ciphertext(d: &Deployment) -> bool {
        any_secret(d, &|s| matches!(s, Secret::Ciphertext(_)))
    }
}

type Visit<'a> = dyn FnMut(&mut Secret) -> Result<(), SecretsError> + 'a;

/// Calls `f` on every secret of `d` (resources and pending operations).
fn for_each_secret(d: &mut Deployment, f: &mut Visit<'_>) -> Result<(), SecretsError> {
    for s in &mut d.resources {
        walk_state(s, f)?;
    }
    for p in &mut d.pending_operations {
        walk_state(&mut p.resource, f)?;
    }
    Ok(())
}

/// Whether any secret of `d` satisfies `pred`.
pub fn any_secret(d: &Deployment, pred: &dyn Fn(&Secret) -> bool) -> bool {
    fn value(v: &PropertyValue, pred: &dyn Fn(&Secret) -> bool) -> bool {
        match v {
            PropertyValue::Secret(s) => pred(s),
            PropertyValue::Array(a) => a.iter().any(|v| value(v, pred)),
            PropertyValue::Object(m) => m.values().any(|v| value(v, pred)),
            PropertyValue::Output(o) => o.value.as_deref().is_some_and(|v| value(v, pred)),
            _ => false,
        }
    }
    // Secrets are signed values: maps that hold none are not looked into.
    let map =
        |m: &crate::model::PropertyMap| m.may_hold_signed() && m.values().any(|v| value(v, pred));
    let state =
        |s: &State| map(&s.inputs) || map(&s.outputs) || value(&s.rare.replacement_trigger, pred);
    d.resources.iter().any(state) || d.pending_operations.iter().any(|p| state(&p.resource))
}

/// Calls `f` on every secret in `state`.
///
/// # Errors
/// Whatever `f` returns.
pub fn walk_state(state: &mut State, f: &mut Visit<'_>) -> Result<(), SecretsError> {
    walk_map(&mut state.inputs, f)?;
    walk_map(&mut state.outputs, f)?;
    match state
        .rare
        .get_mut()
        .and_then(|r| r.replacement_trigger.get_mut())
    {
        Some(v) => walk_value(v, f),
        None => Ok(()),
    }
}

/// Walks a map's values. A map with no secret is not taken mutably: it
/// may be shared with another state (copy-on-write), and a mutable look
/// would copy it.
fn walk_map(m: &mut crate::model::PropertyMap, f: &mut Visit<'_>) -> Result<(), SecretsError> {
    // Secrets are signed values: a map that holds none is not decoded.
    if !m.may_hold_signed() || !m.values().any(PropertyValue::contains_secrets) {
        return Ok(());
    }
    m.values_mut().try_for_each(|v| walk_value(v, f))
}

fn walk_value(v: &mut PropertyValue, f: &mut Visit<'_>) -> Result<(), SecretsError> {
    match v {
        PropertyValue::Secret(s) => f(s),
        PropertyValue::Array(a) => a.iter_mut().try_for_each(|v| walk_value(v, f)),
        PropertyValue::Object(m) => walk_map(m, f),
        PropertyValue::Output(o) => match &mut o.value {
            Some(v) => walk_value(v, f),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &str = "v1:fozI5u6B030=:v1:F+6ZduKKd8G0/V7L:PGMFeIzwobWRKmEAzUdaQHqC5mMRIQ==";

    #[test]
    fn known_state_verifies_and_wrong_passphrase_is_refused() {
        let m = PassphraseManager::from_salt_state("password", KNOWN).unwrap();
        assert_eq!(m.salt_state(), KNOWN);
        assert!(matches!(
            PassphraseManager::from_salt_state("wrong", KNOWN),
            Err(SecretsError::WrongPassphrase)
        ));
        // Values round-trip with the verified key; garbage is refused.
        let c = m.encrypt(&["\"s3cret\""]).unwrap();
        assert_eq!(m.decrypt(&[&c[0]]).unwrap(), ["\"s3cret\""]);
        assert!(matches!(
            m.decrypt(&["v1:nonsense"]),
            Err(SecretsError::Malformed(_))
        ));
    }

    #[test]
    fn independent_implementation_decrypts_keel_output() {
        use aes_gcm::aead::{Aead, KeyInit};
        let m = PassphraseManager::new("hunter2").unwrap();
        let ct = m.encrypt(&["{\"a\":1}"]).unwrap().remove(0);
        // Independent: parse the salt state, derive, decrypt directly.
        let parts: Vec<&str> = m.salt_state().split(':').collect();
        assert_eq!((parts.len(), parts[0], parts[2]), (5, "v1", "v1"));
        let salt = B64.decode(parts[1]).unwrap();
        assert_eq!(salt.len(), 8);
        let mut key = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<sha2::Sha256>(b"hunter2", &salt, 1_000_000, &mut key);
        let cipher = aes_gcm::Aes256Gcm::new_from_slice(&key).unwrap();
        let open = |s: &str| {
            let p: Vec<&str> = s.split(':').collect();
            assert_eq!(p[0], "v1");
            let nonce: [u8; 12] = B64.decode(p[1]).unwrap().try_into().unwrap();
            let body = B64.decode(p[2]).unwrap();
            String::from_utf8(cipher.decrypt(&nonce.into(), body.as_slice()).unwrap()).unwrap()
        };
        assert_eq!(open(&parts[2..].join(":")), "pulumi");
        assert_eq!(open(&ct), "{\"a\":1}");
    }

    fn deployment_with(secret: Secret) -> Deployment {
        let mut state = State::default();
        state
            .outputs
            .insert("password".into(), PropertyValue::Secret(secret));
        state.inputs.insert(
            "nested".into(),
            PropertyValue::Array(vec![PropertyValue::Secret(Secret::plaintext(
                PropertyValue::String("other-secret".into()),
            ))]),
        );
        Deployment {
            resources: vec![state],
            ..Deployment::default()
        }
    }

    #[test]
    fn crypter_has_no_churn_and_derives_once() {
        let before = key_derivations();
        let crypter = Crypter::for_stack(&SecretsProviders::default(), Some("pw")).unwrap();
        let mut d = deployment_with(Secret::plaintext(PropertyValue::String(
            "very-secret-value".into(),
        )));
        crypter.encrypt_deployment(&mut d).unwrap();
        assert_eq!(d.secrets_providers.ty, "passphrase");
        let bytes = serde_json::to_string(&d).unwrap();
        assert!(!bytes.contains("very-secret-value") && !bytes.contains("other-secret"));
        assert!(!Crypter::has_plaintext(&d));
        let first = d.clone();
        crypter.decrypt_deployment(&mut d).unwrap();
        assert!(Crypter::has_plaintext(&d) && !Crypter::has_ciphertext(&d));
        crypter.encrypt_deployment(&mut d).unwrap();
        assert_eq!(d, first, "unchanged secrets keep their ciphertexts");
        // A later operation opens the stack with the same passphrase.
        let again = Crypter::for_stack(&d.secrets_providers, Some("pw")).unwrap();
        again.decrypt_deployment(&mut d).unwrap();
        again.encrypt_deployment(&mut d).unwrap();
        assert_eq!(d, first);
        assert_eq!(
            key_derivations() - before,
            2,
            "one derivation per operation"
        );
        assert!(matches!(
            Crypter::for_stack(&d.secrets_providers, Some("nope")),
            Err(SecretsError::WrongPassphrase)
        ));
        let no_pass = Crypter::for_stack(&d.secrets_providers, None).unwrap();
        assert!(matches!(
            no_pass.decrypt_deployment(&mut d.clone()),
            Err(SecretsError::NoPassphrase)
        ));
    }

    #[test]
    fn other_providers_pass_through_and_are_named() {
        let providers = SecretsProviders {
            ty: "service".into(),
            ..SecretsProviders::default()
        };
        let crypter = Crypter::for_stack(&providers, Some("pw")).unwrap();
        let mut d = deployment_with(Secret::Ciphertext("AAABAOpaque".into()));
        d.resources[0].inputs.clear();
        d.secrets_providers = providers;
        let before = d.clone();
        crypter.encrypt_deployment(&mut d).unwrap();
        assert_eq!(d, before);
        let err = crypter.decrypt_deployment(&mut d).unwrap_err();
        assert!(err.to_string().contains("`service`"), "{err}");
        // Without any provider, a new plaintext secret cannot be written.
        let none = Crypter::default();
        let mut fresh = deployment_with(Secret::plaintext(PropertyValue::Null));
        let err = none.encrypt_deployment(&mut fresh).unwrap_err();
        assert!(err.to_string().contains("KEEL_CONFIG_PASSPHRASE"), "{err}");
    }
}
