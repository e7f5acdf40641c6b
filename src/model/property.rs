//! Property values and their JSON encodings (`checkpoint.md` §2).
//!
//! Special values are JSON objects carrying the signature key
//! [`SIG_KEY`] whose value says what they are: secrets, resource
//! references, output values, assets and archives. Computed (unknown) values
//! are the placeholder string [`UNKNOWN_VALUE`]. Decoding is one pass over
//! the JSON with no intermediate `serde_json::Value`; encoding is its exact
//! inverse, so a value read from a file is written back unchanged.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::urn::Urn;

/// The key that marks a special value.
pub const SIG_KEY: &str = "4dabf18193072939515e22adb298388d";
/// Signature of a secret.
pub const SIG_SECRET: &str = "1b47061264138c4ac30d75fd1eb44270";
/// Signature of a resource reference.
pub const SIG_RESOURCE_REFERENCE: &str = "5cf8f73096256a8f31e491e813e4eb8e";
/// Signature of an output value.
pub const SIG_OUTPUT_VALUE: &str = "d0e6a833031e9bbcd3f4e8bde6ca49a4";
/// Signature of an asset.
pub const SIG_ASSET: &str = "c44067f5952c0a294b673a41bacd8c17";
/// Signature of an archive.
pub const SIG_ARCHIVE: &str = "0def7320c3a5731c473e5ecbe6d01bc7";
/// Signature of a byte string (read and kept as an [`PropertyValue::Other`]).
pub const SIG_BYTES: &str = "803fd3297a5875dc03ca845dda5d2a98";
/// The string that stands for a computed (unknown) value.
pub const UNKNOWN_VALUE: &str = "04da6b54-80e4-46f7-96ec-b56ff0331ba9";

pub use super::property_map::PropertyMap;

/// The deepest nesting keel accepts in a property value. Arrays, objects
/// and signed values (secrets, outputs, references, assets; an archive's
/// `assets` one more) each count one level, as in their JSON encoding; a
/// resource's own property map counts none. It is checked wherever values
/// enter keel (program files, migration callbacks' answers, gRPC
/// registrations, `stack import`). A checkpoint or journal entry nests a
/// value under a dozen levels of file, resource and entry wrappers at
/// most, and the reader (serde_json) refuses 128 levels, so every value
/// keel accepts it can read back.
pub const MAX_DEPTH: usize = 64;

/// A value nested deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{path}` is nested more than {MAX_DEPTH} levels deep (each array, object and secret is a \
     level), more than keel can store: flatten the value or encode it as a string"
)]
pub struct TooDeep {
    /// Where the limit is passed: the property's key, then `.key` or `[i]`
    /// per level.
    pub path: String,
}

/// Fails on the first property of `map` nested deeper than [`MAX_DEPTH`].
///
/// # Errors
/// [`TooDeep`] naming the property and the path into it.
pub fn check_depth(map: &PropertyMap) -> Result<(), TooDeep> {
    map.iter().try_for_each(|(k, v)| v.check_depth(k))
}

/// Fails when the JSON value `v` (named `key`) nests deeper than
/// [`MAX_DEPTH`] (for input not yet decoded into [`PropertyValue`]s).
///
/// # Errors
/// [`TooDeep`] naming the path.
pub fn check_json_depth(key: &str, v: &serde_json::Value) -> Result<(), TooDeep> {
    fn exceeds(v: &serde_json::Value, budget: usize, path: &mut String) -> bool {
        use serde_json::Value;
        match v {
            Value::Array(_) | Value::Object(_) if budget == 0 => true,
            Value::Array(a) => a
                .iter()
                .enumerate()
                .any(|(i, v)| nested(path, &format!("[{i}]"), |p| exceeds(v, budget - 1, p))),
            Value::Object(m) => m
                .iter()
                .any(|(k, v)| nested(path, &format!(".{k}"), |p| exceeds(v, budget - 1, p))),
            _ => false,
        }
    }
    let mut path = key.to_owned();
    if exceeds(v, MAX_DEPTH, &mut path) {
        Err(TooDeep { path })
    } else {
        Ok(())
    }
}

/// Runs `f` with `seg` appended to `path`, which keeps it when `f` is true.
fn nested(path: &mut String, seg: &str, f: impl FnOnce(&mut String) -> bool) -> bool {
    let len = path.len();
    path.push_str(seg);
    if f(path) {
        return true;
    }
    path.truncate(len);
    false
}

/// One property value.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum PropertyValue {
    /// JSON `null`.
    #[default]
    Null,
    /// A boolean.
    Bool(bool),
    /// A number, kept exactly as read (integer or float).
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<PropertyValue>),
    /// A plain object.
    Object(PropertyMap),
    /// An asset.
    Asset(Box<Asset>),
    /// An archive.
    Archive(Box<Archive>),
    /// A secret, encrypted or not.
    Secret(Secret),
    /// A value not known until the resource is created (preview only).
    Computed,
    /// An output value: known or unknown, maybe secret, with dependencies.
    Output(Box<OutputValue>),
    /// A reference to another resource.
    ResourceReference(Box<ResourceReference>),
    /// A signed value keel does not interpret (byte strings, signatures
    /// from newer engines): kept verbatim and written back.
    Other {
        /// The signature.
        sig: String,
        /// The other fields (boxed: a rare variant, kept out of every
        /// value's size).
        fields: Box<PropertyMap>,
    },
}

// Every map entry and array element is one `PropertyValue`, and a map's
// tree node holds eleven whether used or not: the rare variants are boxed
// so a value stays this small (it was 104 bytes; BENCHMARKS.md, issue 20).
const _: () = assert!(std::mem::size_of::<PropertyValue>() <= 40);

impl PropertyValue {
    /// True for `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }

    /// The string, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The object, if this is a plain object.
    pub fn as_object(&self) -> Option<&PropertyMap> {
        match self {
            Self::Object(m) => Some(m),
            _ => None,
        }
    }

    /// True when this value or any value inside it is computed (unknown).
    pub fn contains_unknowns(&self) -> bool {
        match self {
            Self::Computed => true,
            Self::Output(o) => o.value.as_deref().is_none_or(Self::contains_unknowns),
            Self::Array(a) => a.iter().any(Self::contains_unknowns),
            Self::Object(m) => m.values().any(Self::contains_unknowns),
            Self::Secret(Secret::Plaintext(p)) => p.value.contains_unknowns(),
            _ => false,
        }
    }

    /// True when this value is or holds a secret (which must be encrypted
    /// at rest).
    pub fn contains_secrets(&self) -> bool {
        match self {
            Self::Secret(_) => true,
            Self::Output(o) => {
                o.secret == Some(true) || o.value.as_deref().is_some_and(Self::contains_secrets)
            }
            Self::Array(a) => a.iter().any(Self::contains_secrets),
            Self::Object(m) => m.values().any(Self::contains_secrets),
            _ => false,
        }
    }

    /// Fails when this value (the property `key`) nests deeper than
    /// [`MAX_DEPTH`].
    ///
    /// # Errors
    /// [`TooDeep`] naming the path.
    pub fn check_depth(&self, key: &str) -> Result<(), TooDeep> {
        let mut path = key.to_owned();
        if self.exceeds(MAX_DEPTH, &mut path) {
            Err(TooDeep { path })
        } else {
            Ok(())
        }
    }

    /// True when this value needs more than `budget` levels.
    fn exceeds(&self, budget: usize, path: &mut String) -> bool {
        let members = |m: &PropertyMap, budget: usize, path: &mut String| {
            m.iter()
                .any(|(k, v)| nested(path, &format!(".{k}"), |p| v.exceeds(budget, p)))
        };
        match self {
            Self::Null | Self::Bool(_) | Self::Number(_) | Self::String(_) | Self::Computed => {
                false
            }
            _ if budget == 0 => true,
            Self::Array(a) => a
                .iter()
                .enumerate()
                .any(|(i, v)| nested(path, &format!("[{i}]"), |p| v.exceeds(budget - 1, p))),
            Self::Object(m) => members(m, budget - 1, path),
            Self::Asset(_) | Self::ResourceReference(_) | Self::Secret(Secret::Ciphertext(_)) => {
                false
            }
            Self::Secret(Secret::Plaintext(p)) => p.value.exceeds(budget - 1, path),
            Self::Output(o) => o
                .value
                .as_ref()
                .is_some_and(|v| v.exceeds(budget - 1, path)),
            Self::Archive(a) => match &a.assets {
                None => false,
                Some(_) if budget < 2 => true,
                Some(m) => members(m, budget - 2, path),
            },
            Self::Other { fields, .. } => members(fields, budget - 1, path),
        }
    }

    /// Converts plain JSON into a property value, decoding signed objects.
    ///
    /// # Errors
    /// A JSON error when a signed object is malformed.
    pub fn from_json(v: &serde_json::Value) -> serde_json::Result<Self> {
        Self::deserialize(v)
    }

    /// Encodes this value as plain JSON (the checkpoint encoding).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Builds a value from a signed object's fields (the signature already
    /// removed), or reports why the object is malformed.
    fn from_signed(sig: String, mut fields: PropertyMap) -> Result<Self, String> {
        fn take_str(fields: &mut PropertyMap, key: &str) -> Result<Option<String>, String> {
            match fields.remove(key) {
                None => Ok(None),
                Some(PropertyValue::String(s)) => Ok(Some(s)),
                // The unknown placeholder decodes as Computed; in a
                // string-typed field it is still a string.
                Some(PropertyValue::Computed) => Ok(Some(UNKNOWN_VALUE.to_owned())),
                Some(other) => Err(format!("`{key}` must be a string, found {other:?}")),
            }
        }
        let check_empty = |fields: &PropertyMap, what: &str| match fields.keys().next() {
            Some(k) => Err(format!("unexpected key `{k}` in {what}")),
            None => Ok(()),
        };
        match sig.as_str() {
            SIG_SECRET => {
                let secret = if let Some(ct) = take_str(&mut fields, "ciphertext")? {
                    Secret::Ciphertext(ct)
                } else if let Some(pt) = take_str(&mut fields, "plaintext")? {
                    let value: PropertyValue = serde_json::from_str(&pt)
                        .map_err(|e| format!("a secret's plaintext is not JSON: {e}"))?;
                    Secret::Plaintext(PlaintextSecret {
                        value: Box::new(value),
                        encoded: Some(pt),
                    })
                } else {
                    return Err("a secret has neither `ciphertext` nor `plaintext`".into());
                };
                check_empty(&fields, "a secret")?;
                Ok(Self::Secret(secret))
            }
            SIG_RESOURCE_REFERENCE => {
                let urn =
                    take_str(&mut fields, "urn")?.ok_or("a resource reference has no `urn`")?;
                let urn = Urn::parse(&urn).map_err(|e| e.to_string())?;
                let id = take_str(&mut fields, "id")?;
                let package_version = take_str(&mut fields, "packageVersion")?;
                check_empty(&fields, "a resource reference")?;
                Ok(Self::ResourceReference(Box::new(ResourceReference {
                    urn,
                    id,
                    package_version,
                })))
            }
            SIG_OUTPUT_VALUE => {
                let value = fields.remove("value").map(Box::new);
                let secret = match fields.remove("secret") {
                    None => None,
                    Some(PropertyValue::Bool(b)) => Some(b),
                    Some(v) => {
                        return Err(format!("an output's `secret` must be a bool, found {v:?}"))
                    }
                };
                let dependencies = match fields.remove("dependencies") {
                    None => None,
                    Some(PropertyValue::Array(items)) => Some(
                        items
                            .into_iter()
                            .map(|d| match d {
                                PropertyValue::String(s) => {
                                    Urn::parse(&s).map_err(|e| e.to_string())
                                }
                                v => Err(format!(
                                    "an output's dependency must be a URN, found {v:?}"
                                )),
                            })
                            .collect::<Result<Vec<_>, _>>()?,
                    ),
                    Some(v) => {
                        return Err(format!(
                            "an output's `dependencies` must be a list, found {v:?}"
                        ))
                    }
                };
                check_empty(&fields, "an output value")?;
                Ok(Self::Output(Box::new(OutputValue {
                    value,
                    secret,
                    dependencies,
                })))
            }
            SIG_ASSET => {
                let asset = Asset {
                    hash: take_str(&mut fields, "hash")?,
                    text: take_str(&mut fields, "text")?,
                    path: take_str(&mut fields, "path")?,
                    uri: take_str(&mut fields, "uri")?,
                };
                check_empty(&fields, "an asset")?;
                Ok(Self::Asset(Box::new(asset)))
            }
            SIG_ARCHIVE => {
                let assets = match fields.remove("assets") {
                    None => None,
                    Some(PropertyValue::Object(m)) => Some(m),
                    Some(v) => {
                        return Err(format!(
                            "an archive's `assets` must be an object, found {v:?}"
                        ))
                    }
                };
                let archive = Archive {
                    hash: take_str(&mut fields, "hash")?,
                    assets,
                    path: take_str(&mut fields, "path")?,
                    uri: take_str(&mut fields, "uri")?,
                };
                check_empty(&fields, "an archive")?;
                Ok(Self::Archive(Box::new(archive)))
            }
            _ => Ok(Self::Other {
                sig,
                fields: Box::new(fields),
            }),
        }
    }
}

impl From<&str> for PropertyValue {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

impl From<String> for PropertyValue {
    fn from(s: String) -> Self {
        Self::String(s)
    }
}

impl From<bool> for PropertyValue {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}

impl From<i64> for PropertyValue {
    fn from(n: i64) -> Self {
        Self::Number(n.into())
    }
}

impl From<PropertyMap> for PropertyValue {
    fn from(m: PropertyMap) -> Self {
        Self::Object(m)
    }
}

/// A secret value.
#[derive(Debug, Clone, PartialEq)]
pub enum Secret {
    /// Encrypted by a secrets provider: the ciphertext is opaque here.
    Ciphertext(String),
    /// Decrypted: the value itself.
    Plaintext(PlaintextSecret),
}

impl Secret {
    /// A plaintext secret holding `value`.
    pub fn plaintext(value: PropertyValue) -> Self {
        Self::Plaintext(PlaintextSecret {
            value: Box::new(value),
            encoded: None,
        })
    }
}

/// A decrypted secret. It remembers the exact JSON text it was read from so
/// that an unchanged secret is written back byte for byte.
#[derive(Debug, Clone)]
pub struct PlaintextSecret {
    value: Box<PropertyValue>,
    encoded: Option<String>,
}

impl PlaintextSecret {
    /// A secret decoded from the exact JSON text of its value (as a secrets
    /// provider decrypts it); the text is kept so an unchanged secret
    /// encodes back to the same bytes.
    ///
    /// # Errors
    /// The text is not JSON.
    pub fn from_encoded(encoded: String) -> Result<Self, serde_json::Error> {
        let value: PropertyValue = serde_json::from_str(&encoded)?;
        Ok(Self {
            value: Box::new(value),
            encoded: Some(encoded),
        })
    }

    /// The secret's value.
    pub fn value(&self) -> &PropertyValue {
        &self.value
    }

    /// The value, to change in place (the next write encodes it afresh).
    pub fn value_mut(&mut self) -> &mut PropertyValue {
        self.encoded = None;
        &mut self.value
    }

    /// Replaces the value (the next write encodes it afresh).
    pub fn set_value(&mut self, value: PropertyValue) {
        *self.value = value;
        self.encoded = None;
    }

    /// The JSON text of the value, as it is written in the `plaintext` key.
    pub fn encoded(&self) -> String {
        match &self.encoded {
            Some(s) => s.clone(),
            None => serde_json::to_string(&*self.value).unwrap_or_else(|_| "null".into()),
        }
    }
}

impl PartialEq for PlaintextSecret {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

/// A reference to another resource.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceReference {
    /// The referenced resource's URN.
    pub urn: Urn,
    /// Its ID: absent for a component or when unknown.
    pub id: Option<String>,
    /// The version of the package that defines its type, when known.
    pub package_version: Option<String>,
}

/// An output value: a value that may be unknown, secret, and depend on
/// resources.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputValue {
    /// The value; `None` means unknown.
    pub value: Option<Box<PropertyValue>>,
    /// Whether the value is secret (`None`: the key was absent).
    pub secret: Option<bool>,
    /// The resources the value depends on (`None`: the key was absent).
    pub dependencies: Option<Vec<Urn>>,
}

/// An asset: a blob given by text, a path or a URI, with its hash.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asset {
    /// The SHA-256 of the contents, when computed.
    pub hash: Option<String>,
    /// Literal contents.
    pub text: Option<String>,
    /// A path on disk.
    pub path: Option<String>,
    /// A URI.
    pub uri: Option<String>,
}

/// An archive: a set of named assets and archives, or a path or URI.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Archive {
    /// The SHA-256 of the contents, when computed.
    pub hash: Option<String>,
    /// Named members (assets or archives).
    pub assets: Option<PropertyMap>,
    /// A path on disk.
    pub path: Option<String>,
    /// A URI.
    pub uri: Option<String>,
}

thread_local! {
    /// Whether this thread's encodes write plaintext secrets
    /// ([`refusing_plaintexts`]).
    static PLAINTEXTS: std::cell::Cell<Plaintexts> =
        const { std::cell::Cell::new(Plaintexts::Written) };
}

/// What an encode does with a plaintext secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plaintexts {
    /// Writes it (memory, the wire, an explicit `--show-secrets` export).
    Written,
    /// Fails before writing any of it (storage).
    Refused,
    /// Failed so: one was met.
    Met,
}

/// An encode for storage met a plaintext secret and failed before writing
/// any of it: it must be encrypted first (or the stack given a secrets
/// provider).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a plaintext secret is never written to storage")]
pub(crate) struct PlaintextRefused;

/// Runs `f`, an encode for storage on this thread, with every plaintext
/// secret refused: its serialization fails (with a `serde` error) before
/// any of it is written, so whatever `f` wrote must be dropped. Scopes nest
/// (a refusal inside is a refusal of the outer one) and end with `f`, also
/// when it panics.
///
/// # Errors
/// [`PlaintextRefused`] when `f` met a plaintext secret (or
/// [`note_refused`] was called within).
pub(crate) fn refusing_plaintexts<T>(f: impl FnOnce() -> T) -> Result<T, PlaintextRefused> {
    /// Restores the outer scope's mode, passing a refusal on to it.
    struct Restore(Plaintexts);
    impl Drop for Restore {
        fn drop(&mut self) {
            PLAINTEXTS.with(|p| {
                let met = p.get() == Plaintexts::Met && self.0 != Plaintexts::Written;
                p.set(if met { Plaintexts::Met } else { self.0 });
            });
        }
    }
    let _restore = Restore(PLAINTEXTS.with(|p| p.replace(Plaintexts::Refused)));
    let out = f();
    match PLAINTEXTS.with(std::cell::Cell::get) {
        Plaintexts::Met => Err(PlaintextRefused),
        _ => Ok(out),
    }
}

/// Whether this thread's encodes refuse plaintext secrets (for an encode
/// that hands part of its work to another thread, which opens its own
/// [`refusing_plaintexts`] scope).
pub(crate) fn plaintexts_refused() -> bool {
    PLAINTEXTS.with(std::cell::Cell::get) != Plaintexts::Written
}

/// Records, in this thread's [`refusing_plaintexts`] scope, a refusal met
/// by another thread's part of its encode.
pub(crate) fn note_refused() {
    PLAINTEXTS.with(|p| {
        if p.get() != Plaintexts::Written {
            p.set(Plaintexts::Met);
        }
    });
}

impl Serialize for PropertyValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        fn opt<M: SerializeMap, T: Serialize + ?Sized>(
            m: &mut M,
            key: &str,
            v: Option<&T>,
        ) -> Result<(), M::Error> {
            match v {
                Some(v) => m.serialize_entry(key, v),
                None => Ok(()),
            }
        }
        match self {
            Self::Null => s.serialize_unit(),
            Self::Bool(b) => s.serialize_bool(*b),
            Self::Number(n) => n.serialize(s),
            Self::String(v) => s.serialize_str(v),
            Self::Computed => s.serialize_str(UNKNOWN_VALUE),
            Self::Array(a) => a.serialize(s),
            Self::Object(o) => o.serialize(s),
            Self::Secret(secret) => {
                if matches!(secret, Secret::Plaintext(_)) && plaintexts_refused() {
                    PLAINTEXTS.with(|p| p.set(Plaintexts::Met));
                    return Err(serde::ser::Error::custom(PlaintextRefused));
                }
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry(SIG_KEY, SIG_SECRET)?;
                match secret {
                    Secret::Ciphertext(c) => m.serialize_entry("ciphertext", c)?,
                    Secret::Plaintext(p) => m.serialize_entry("plaintext", &p.encoded())?,
                }
                m.end()
            }
            Self::ResourceReference(r) => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry(SIG_KEY, SIG_RESOURCE_REFERENCE)?;
                m.serialize_entry("urn", &r.urn)?;
                opt(&mut m, "id", r.id.as_ref())?;
                opt(&mut m, "packageVersion", r.package_version.as_ref())?;
                m.end()
            }
            Self::Output(o) => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry(SIG_KEY, SIG_OUTPUT_VALUE)?;
                opt(&mut m, "value", o.value.as_deref())?;
                opt(&mut m, "secret", o.secret.as_ref())?;
                opt(&mut m, "dependencies", o.dependencies.as_ref())?;
                m.end()
            }
            Self::Asset(a) => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry(SIG_KEY, SIG_ASSET)?;
                opt(&mut m, "hash", a.hash.as_ref())?;
                opt(&mut m, "text", a.text.as_ref())?;
                opt(&mut m, "path", a.path.as_ref())?;
                opt(&mut m, "uri", a.uri.as_ref())?;
                m.end()
            }
            Self::Archive(a) => {
                let mut m = s.serialize_map(None)?;
                m.serialize_entry(SIG_KEY, SIG_ARCHIVE)?;
                opt(&mut m, "hash", a.hash.as_ref())?;
                opt(&mut m, "assets", a.assets.as_ref())?;
                opt(&mut m, "path", a.path.as_ref())?;
                opt(&mut m, "uri", a.uri.as_ref())?;
                m.end()
            }
            Self::Other { sig, fields } => {
                let mut m = s.serialize_map(Some(fields.len() + 1))?;
                m.serialize_entry(SIG_KEY, sig)?;
                for (k, v) in fields.iter() {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for PropertyValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = PropertyValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a property value")
    }

    fn visit_unit<E>(self) -> Result<PropertyValue, E> {
        Ok(PropertyValue::Null)
    }

    fn visit_none<E>(self) -> Result<PropertyValue, E> {
        Ok(PropertyValue::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<PropertyValue, D::Error> {
        PropertyValue::deserialize(d)
    }

    fn visit_bool<E>(self, b: bool) -> Result<PropertyValue, E> {
        Ok(PropertyValue::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<PropertyValue, E> {
        Ok(PropertyValue::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<PropertyValue, E> {
        Ok(PropertyValue::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<PropertyValue, E> {
        serde_json::Number::from_f64(n)
            .map(PropertyValue::Number)
            .ok_or_else(|| E::custom("a number must be finite"))
    }

    fn visit_str<E>(self, s: &str) -> Result<PropertyValue, E> {
        Ok(if s == UNKNOWN_VALUE {
            PropertyValue::Computed
        } else {
            PropertyValue::String(s.to_owned())
        })
    }

    fn visit_string<E>(self, s: String) -> Result<PropertyValue, E> {
        Ok(if s == UNKNOWN_VALUE {
            PropertyValue::Computed
        } else {
            PropertyValue::String(s)
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PropertyValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(PropertyValue::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PropertyValue, A::Error> {
        // Collected, then sorted once (free when the keys arrive sorted, as
        // from anything keel or Pulumi wrote; no `n²` inserts otherwise).
        let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(1024));
        let mut sig = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == SIG_KEY {
                match map.next_value::<PropertyValue>()? {
                    PropertyValue::String(s) => sig = Some(s),
                    other => {
                        return Err(de::Error::custom(format!(
                            "the signature key must hold a string, found {other:?}"
                        )))
                    }
                }
            } else {
                pairs.push((key, map.next_value()?));
            }
        }
        let fields: PropertyMap = pairs.into_iter().collect();
        match sig {
            None => Ok(PropertyValue::Object(fields)),
            Some(sig) => PropertyValue::from_signed(sig, fields).map_err(de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Decodes `j`, checks the decoded shape with `is`, re-encodes and
    /// requires the same JSON back.
    fn check(j: serde_json::Value, is: impl Fn(&PropertyValue) -> bool) {
        let v = PropertyValue::from_json(&j).unwrap();
        assert!(is(&v), "unexpected decoding of {j}: {v:?}");
        assert_eq!(v.to_json(), j, "round trip of {j}");
    }

    /// `depth` levels of `wrap` around `1`.
    fn nest(
        depth: usize,
        wrap: impl Fn(serde_json::Value) -> serde_json::Value,
    ) -> serde_json::Value {
        (0..depth).fold(json!(1), |v, _| wrap(v))
    }

    #[test]
    fn storage_encodes_refuse_plaintext_secrets_and_only_them() {
        let plain = PropertyValue::Secret(Secret::plaintext(PropertyValue::from("hush")));
        let sealed = PropertyValue::Secret(Secret::Ciphertext("v1:abc".into()));
        let encode = |v: &PropertyValue| serde_json::to_vec(v);
        // Outside a scope everything is written (memory, the wire).
        assert!(encode(&plain).is_ok());
        // Inside, a plaintext secret fails its encode with none of it
        // written; a ciphertext does not, and nothing else is touched.
        let mut out = Vec::new();
        let refused = refusing_plaintexts(|| {
            assert!(serde_json::to_writer(&mut out, &sealed).is_ok());
            let err = serde_json::to_writer(&mut out, &plain).unwrap_err();
            assert!(
                err.to_string().contains("never written to storage"),
                "{err}"
            );
        });
        assert_eq!(refused, Err(PlaintextRefused));
        assert!(!String::from_utf8_lossy(&out).contains("hush"));
        assert_eq!(refusing_plaintexts(|| encode(&sealed).is_ok()), Ok(true));
        // A refusal inside a nested scope, or noted for another thread, is
        // the outer scope's; the scopes end with their call, also on panic.
        let outer = refusing_plaintexts(|| {
            assert!(refusing_plaintexts(|| encode(&plain)).is_err());
            assert!(plaintexts_refused());
        });
        assert_eq!(outer, Err(PlaintextRefused));
        assert_eq!(refusing_plaintexts(note_refused), Err(PlaintextRefused));
        note_refused();
        assert!(!plaintexts_refused());
        let panicked = std::panic::catch_unwind(|| refusing_plaintexts(|| panic!("mid-encode")));
        assert!(panicked.is_err());
        assert!(!plaintexts_refused());
        assert!(encode(&plain).is_ok());
    }

    #[test]
    fn depth_counts_every_level_of_the_encoding() {
        let sig = |v| json!({SIG_KEY: SIG_OUTPUT_VALUE, "value": v});
        let shapes: [&dyn Fn(serde_json::Value) -> serde_json::Value; 3] =
            [&|v| json!([v]), &|v| json!({"k": v}), &sig];
        for wrap in shapes {
            let at_limit = nest(MAX_DEPTH, wrap);
            let v = PropertyValue::from_json(&at_limit).unwrap();
            assert_eq!(v.check_depth("p"), Ok(()));
            assert_eq!(check_json_depth("p", &at_limit), Ok(()));
            let deeper = nest(MAX_DEPTH + 1, wrap);
            let v = PropertyValue::from_json(&deeper).unwrap();
            assert!(v.check_depth("p").is_err(), "{deeper}");
            assert!(check_json_depth("p", &deeper).is_err());
        }
        // The path leads to where the limit is passed.
        let deeper = nest(MAX_DEPTH + 1, |v| json!([v]));
        let e = check_json_depth("p", &deeper).unwrap_err();
        assert_eq!(e.path, format!("p{}", "[0]".repeat(MAX_DEPTH)));
        let v = PropertyValue::from_json(&deeper).unwrap();
        assert_eq!(v.check_depth("p").unwrap_err(), e);
        // A plaintext secret counts one level, an archive's assets two.
        let mut secret = PropertyValue::from_json(&nest(MAX_DEPTH, |v| json!([v]))).unwrap();
        assert_eq!(secret.check_depth("s"), Ok(()));
        secret = PropertyValue::Secret(Secret::plaintext(secret));
        assert!(secret.check_depth("s").is_err());
        let archive = PropertyValue::Archive(Box::new(Archive {
            assets: Some(PropertyMap::from([(
                "a".to_owned(),
                PropertyValue::from_json(&nest(MAX_DEPTH - 1, |v| json!([v]))).unwrap(),
            )])),
            ..Archive::default()
        }));
        assert!(archive.check_depth("z").is_err());
        let map = PropertyMap::from([
            ("ok".to_owned(), PropertyValue::from(1)),
            ("bad".to_owned(), v),
        ]);
        assert_eq!(
            check_depth(&map).unwrap_err().path,
            e.path.replacen('p', "bad", 1)
        );
    }

    #[test]
    fn primitives_round_trip() {
        check(json!(null), |v| v.is_null());
        check(json!(true), |v| matches!(v, PropertyValue::Bool(true)));
        check(json!(300), |v| matches!(v, PropertyValue::Number(_)));
        check(json!(-1.5), |v| matches!(v, PropertyValue::Number(_)));
        check(json!("s"), |v| v.as_str() == Some("s"));
        check(
            json!([1, "a", {"b": null}]),
            |v| matches!(v, PropertyValue::Array(a) if a.len() == 3),
        );
        check(json!({"a": {"b": [true]}}), |v| v.as_object().is_some());
        check(json!(UNKNOWN_VALUE), |v| {
            matches!(v, PropertyValue::Computed)
        });
    }

    #[test]
    fn secrets_round_trip() {
        check(
            json!({SIG_KEY: SIG_SECRET, "ciphertext": "v1:abc"}),
            |v| matches!(v, PropertyValue::Secret(Secret::Ciphertext(c)) if c == "v1:abc"),
        );
        // Plaintext holds the JSON encoding of the value; Go's escapes and
        // spacing are kept byte for byte.
        check(
            json!({SIG_KEY: SIG_SECRET, "plaintext": "\"a\\u003cb\""}),
            |v| matches!(v, PropertyValue::Secret(Secret::Plaintext(p)) if p.value().as_str() == Some("a<b")),
        );
        check(
            json!({SIG_KEY: SIG_SECRET, "plaintext": "{\"k\": [1, 2]}"}),
            |v| matches!(v, PropertyValue::Secret(Secret::Plaintext(p)) if p.value().as_object().is_some()),
        );
        let fresh = PropertyValue::Secret(Secret::plaintext("pw".into()));
        assert_eq!(
            fresh.to_json(),
            json!({SIG_KEY: SIG_SECRET, "plaintext": "\"pw\""})
        );
    }

    #[test]
    fn references_outputs_assets_archives_round_trip() {
        let urn = "urn:pulumi:dev::p::aws:s3/bucket:Bucket::b";
        check(
            json!({SIG_KEY: SIG_RESOURCE_REFERENCE, "urn": urn, "id": "b-1", "packageVersion": "6.0.0"}),
            |v| matches!(v, PropertyValue::ResourceReference(r) if r.id.as_deref() == Some("b-1")),
        );
        check(
            json!({SIG_KEY: SIG_RESOURCE_REFERENCE, "urn": urn}),
            |v| matches!(v, PropertyValue::ResourceReference(r) if r.id.is_none()),
        );
        check(
            json!({SIG_KEY: SIG_OUTPUT_VALUE, "value": 1, "secret": true, "dependencies": [urn]}),
            |v| matches!(v, PropertyValue::Output(o) if o.secret == Some(true)),
        );
        check(json!({SIG_KEY: SIG_OUTPUT_VALUE}), |v| {
            matches!(v, PropertyValue::Output(o) if o.value.is_none()) && v.contains_unknowns()
        });
        check(
            json!({SIG_KEY: SIG_ASSET, "hash": "h", "text": "hello"}),
            |v| matches!(v, PropertyValue::Asset(a) if a.text.as_deref() == Some("hello")),
        );
        check(
            json!({SIG_KEY: SIG_ARCHIVE, "hash": "h", "assets": {
                "index.js": {SIG_KEY: SIG_ASSET, "text": "x"},
                "node_modules": {SIG_KEY: SIG_ARCHIVE, "path": "./node_modules"}
            }}),
            |v| matches!(v, PropertyValue::Archive(a) if a.assets.as_ref().is_some_and(|m| m.len() == 2)),
        );
        check(json!({SIG_KEY: SIG_BYTES, "value": "AAEC"}), |v| {
            matches!(v, PropertyValue::Other { .. })
        });
    }

    #[test]
    fn malformed_signed_values_are_errors() {
        for bad in [
            json!({SIG_KEY: SIG_SECRET}),
            json!({SIG_KEY: SIG_SECRET, "plaintext": "{not json"}),
            json!({SIG_KEY: SIG_SECRET, "ciphertext": 3}),
            json!({SIG_KEY: SIG_RESOURCE_REFERENCE, "urn": "nope"}),
            json!({SIG_KEY: SIG_RESOURCE_REFERENCE}),
            json!({SIG_KEY: SIG_ASSET, "text": "x", "extra": 1}),
            json!({SIG_KEY: 7}),
        ] {
            assert!(
                PropertyValue::from_json(&bad).is_err(),
                "{bad} should not decode"
            );
        }
    }
}
