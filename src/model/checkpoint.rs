//! Checkpoint files: the two wrappers around a deployment, the format
//! version check, and decoding with typed errors (`checkpoint.md` §3).
//!
//! - stack export form: `{"version": 3, "deployment": {...}}`;
//! - backend form: `{"version": 3, "checkpoint": {"stack", "config",
//!   "latest": {...}}}` (no `latest`, or a `latest` without `resources`, is
//!   an empty stack).
//!
//! Version 3 is read and written; version 4 is version 3 plus a `features`
//! list, read when every feature is one keel supports. Older formats (no
//! `version`, 1, 2) and unknown newer ones are refused with an error naming
//! the version found. A file keel reads decodes in one pass (its version
//! and features checked as they are read, each URN and type token
//! validated once and shared: `urn::with_interning`; property maps kept
//! as their text until first looked at: `property_map::with_lazy_maps`;
//! a large file on two threads, see `split`); anything else is decoded
//! again version first (one scan that skips the body), for the error that
//! names the version or the problem.

use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::integrity::{self, IntegrityError};
use super::keys::json_object;
use super::property_map::with_lazy_maps;
use super::snapshot::Deployment;

mod split;

pub(crate) use split::sentinel;
pub use split::ReadAt;

/// The format version keel writes.
pub const CURRENT_VERSION: u64 = 3;
/// The newest format version keel reads.
pub const NEWEST_VERSION: u64 = 4;
/// The version-4 features keel supports (the fields it models).
pub const SUPPORTED_FEATURES: &[&str] = &["refreshBeforeUpdate", "views", "hooks", "taint"];

/// Why a checkpoint file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file could not be read or written.
    #[error("cannot access checkpoint file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is empty.
    #[error(
        "the checkpoint is empty (0 bytes): restore it from the backup or re-import the stack"
    )]
    Empty,
    /// The JSON ends early (a truncated file).
    #[error("the checkpoint is truncated at line {line}, column {column}: restore it from the backup or re-import the stack")]
    Truncated {
        /// Line where the input ended.
        line: usize,
        /// Column where the input ended.
        column: usize,
    },
    /// The file is not JSON.
    #[error("the checkpoint is not valid JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// Line of the error.
        line: usize,
        /// Column of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// The JSON has the wrong shape (a field of the wrong type, a malformed
    /// URN, a malformed special value).
    #[error("the checkpoint has an invalid value at line {line}, column {column}: {message}")]
    Shape {
        /// Line of the error.
        line: usize,
        /// Column of the error.
        column: usize,
        /// What was wrong.
        message: String,
    },
    /// A file with no `version`: the 2017 format.
    #[error("the checkpoint has no `version` field (the 2017 format, version 0), which keel does not read: export it again with a current Pulumi (`pulumi stack export`) and import that")]
    NoVersion,
    /// An older format version.
    #[error("the checkpoint has format version {found}, which keel does not read (it reads 3 and 4): export it again with a current Pulumi (`pulumi stack export`) and import that, or recreate the stack")]
    OldVersion {
        /// The version found.
        found: u64,
    },
    /// A newer format version than keel knows.
    #[error("the checkpoint has format version {found}, newer than keel understands (at most {NEWEST_VERSION}): upgrade keel")]
    NewerVersion {
        /// The version found.
        found: u64,
    },
    /// A version-4 file needs features keel does not support.
    #[error("this stack's deployment needs support for the following features: {}: upgrade keel", .features.join(", "))]
    UnsupportedFeatures {
        /// The unsupported features, as named in the file.
        features: Vec<String>,
    },
    /// The file has neither a `deployment` nor a `checkpoint`.
    #[error("the checkpoint has neither a `deployment` nor a `checkpoint` object")]
    NoDeployment,
    /// The deployment breaks an integrity rule.
    #[error(transparent)]
    Integrity(#[from] IntegrityError),
}

/// The result type of checkpoint decoding.
pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

impl CheckpointError {
    fn from_json(e: serde_json::Error) -> Self {
        use serde_json::error::Category;
        let (line, column) = (e.line(), e.column());
        match e.classify() {
            Category::Eof => Self::Truncated { line, column },
            Category::Syntax | Category::Io => Self::Syntax {
                line,
                column,
                message: e.to_string(),
            },
            Category::Data => Self::Shape {
                line,
                column,
                message: e.to_string(),
            },
        }
    }
}

json_object! {
    /// The backend form's body: the stack's name, its config and its latest
    /// deployment.
    pub struct CheckpointBody {
        /// The stack's name.
        "stack" => stack: String [always],
        /// The stack's config (kept verbatim).
        "config" => config: serde_json::Value,
        /// The latest deployment (absent: an empty stack).
        "latest" => latest: Option<Deployment>,
    }
}

json_object! {
    /// A checkpoint file in either form.
    pub struct CheckpointFile {
        /// The format version.
        "version" => version: u64 [always],
        /// Version-4 features.
        "features" => features: Vec<String>,
        /// The stack export form's deployment.
        "deployment" => deployment: Option<Deployment>,
        /// The backend form's body.
        "checkpoint" => checkpoint: Option<CheckpointBody>,
    }
}

/// The head of a file, read first to check the version without decoding
/// the body.
#[derive(Deserialize)]
struct Head {
    version: Option<serde_json::Value>,
    #[serde(default)]
    features: Option<Vec<String>>,
    #[serde(default)]
    deployment: Option<IgnoredAny>,
    #[serde(default)]
    checkpoint: Option<IgnoredAny>,
}

/// The whole file in one pass, for the common case: the head keys once
/// each, the version one keel reads, its features supported and a body
/// present. Anything else ([`Fast::Fallback`]) is decoded again by
/// [`CheckpointFile::from_slice`]'s careful path, whose version check runs
/// ahead of the body and names the problem; what this pass accepts, that
/// path decodes to the same value.
enum Fast {
    Read(Box<CheckpointFile>),
    Fallback,
}

impl<'de> Deserialize<'de> for Fast {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Fast;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a checkpoint file")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fast, A::Error> {
                // The order of `CheckpointFile`'s keys (its `KeySet` bits).
                const HEAD: [&str; 4] = ["version", "features", "deployment", "checkpoint"];
                let mut out = CheckpointFile::default();
                let mut seen = [false; 4];
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let Some(i) = HEAD.iter().position(|k| *k == key) else {
                        let v: serde_json::Value = map.next_value()?;
                        out.extra.insert(key.into_owned(), v);
                        continue;
                    };
                    if std::mem::replace(&mut seen[i], true) {
                        // A repeated key: the careful path refuses it.
                        return Ok(Fast::Fallback);
                    }
                    let null = match i {
                        0 => match map.next_value::<Option<serde_json::Value>>()? {
                            Some(v) => match v.as_u64() {
                                Some(n) => {
                                    out.version = n;
                                    false
                                }
                                None => return Ok(Fast::Fallback),
                            },
                            None => return Ok(Fast::Fallback),
                        },
                        1 => match map.next_value::<Option<Vec<String>>>()? {
                            Some(v) => {
                                out.features = v;
                                false
                            }
                            None => true,
                        },
                        2 => {
                            out.deployment = map.next_value()?;
                            out.deployment.is_none()
                        }
                        _ => {
                            out.checkpoint = map.next_value()?;
                            out.checkpoint.is_none()
                        }
                    };
                    out.keys.mark(i, null);
                }
                let readable = matches!(out.version, 3 | 4)
                    && out
                        .features
                        .iter()
                        .all(|f| SUPPORTED_FEATURES.contains(&f.as_str()))
                    && (out.deployment.is_some() || out.checkpoint.is_some());
                Ok(if readable {
                    Fast::Read(Box::new(out))
                } else {
                    Fast::Fallback
                })
            }
        }
        d.deserialize_map(V)
    }
}

impl CheckpointFile {
    /// A stack export file (`{"version": 3, "deployment": ...}`).
    pub fn export(deployment: Deployment) -> Self {
        Self {
            version: CURRENT_VERSION,
            deployment: Some(deployment),
            ..Self::default()
        }
    }

    /// Encodes, as compact JSON, the stack export file of a borrowed
    /// `deployment` with the top-level `extra` keys: the same bytes as
    /// [`CheckpointFile::export`] of a copy with `extra` inserted, then
    /// [`CheckpointFile::to_vec`], without copying the deployment (a base
    /// checkpoint written at the end of an operation holds every state).
    pub fn export_to_vec(
        deployment: &Deployment,
        extra: &std::collections::BTreeMap<String, serde_json::Value>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        // Writing to a `Vec` cannot fail.
        let _ = Self::export_to_writer(deployment, extra, &mut out);
        out
    }

    /// [`CheckpointFile::export_to_vec`] written to `w` as it is encoded
    /// (a base checkpoint is streamed to its file, not built in memory).
    ///
    /// # Errors
    /// What writing to `w` returns.
    pub fn export_to_writer(
        deployment: &Deployment,
        extra: &std::collections::BTreeMap<String, serde_json::Value>,
        w: impl std::io::Write,
    ) -> std::io::Result<()> {
        struct Export<'a> {
            deployment: &'a Deployment,
            extra: &'a std::collections::BTreeMap<String, serde_json::Value>,
        }
        impl serde::Serialize for Export<'_> {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                // The keys `export` leaves present, in the order its
                // `Serialize` writes them: `version`, `deployment`, then
                // the extra keys (sorted).
                let mut m = s.serialize_map(None)?;
                m.serialize_entry("version", &CURRENT_VERSION)?;
                m.serialize_entry("deployment", self.deployment)?;
                for (k, v) in self.extra {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
        super::property_map::with_raw_writes(|| {
            serde_json::to_writer(w, &Export { deployment, extra })
        })
        .map_err(std::io::Error::from)
    }

    /// Decodes a file, checking its format version and features first. The
    /// deployment is not verified: see [`CheckpointFile::verify`] or
    /// [`CheckpointFile::from_slice_verified`].
    ///
    /// # Errors
    /// A typed [`CheckpointError`] for empty, truncated, non-JSON and
    /// wrong-typed input and for unsupported versions and features; never
    /// panics.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        super::urn::with_interning(|| {
            super::snapshot::with_states_hint(bytes.len(), || Self::decode(bytes))
        })
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(CheckpointError::Empty);
        }
        // One pass for a file keel reads; anything else is read again
        // below, version first, for the error that names the problem.
        // Text validated as UTF-8 once is decoded without validating each
        // string again (serde_json's slice reader checks every string).
        // Property maps are kept as text here (`with_lazy_maps`), never
        // on the careful path below, whose errors name the problem.
        let fast = match std::str::from_utf8(bytes) {
            Ok(text) => {
                // A large file on two threads, when that provably gives
                // the same value (see `split`).
                if let Some(file) = split::decode(text) {
                    return Ok(file);
                }
                with_lazy_maps(|| serde_json::from_str::<Fast>(text))
            }
            Err(_) => with_lazy_maps(|| serde_json::from_slice::<Fast>(bytes)),
        };
        if let Ok(Fast::Read(file)) = fast {
            return Ok(*file);
        }
        let head: Head = serde_json::from_slice(bytes).map_err(CheckpointError::from_json)?;
        let version = match head.version {
            None => return Err(CheckpointError::NoVersion),
            Some(v) => v.as_u64().ok_or_else(|| CheckpointError::Shape {
                line: 1,
                column: 1,
                message: format!("`version` must be a non-negative integer, found {v}"),
            })?,
        };
        match version {
            0..=2 => return Err(CheckpointError::OldVersion { found: version }),
            3 | 4 => {}
            _ => return Err(CheckpointError::NewerVersion { found: version }),
        }
        let unsupported: Vec<String> = head
            .features
            .unwrap_or_default()
            .into_iter()
            .filter(|f| !SUPPORTED_FEATURES.contains(&f.as_str()))
            .collect();
        if !unsupported.is_empty() {
            return Err(CheckpointError::UnsupportedFeatures {
                features: unsupported,
            });
        }
        if head.deployment.is_none() && head.checkpoint.is_none() {
            return Err(CheckpointError::NoDeployment);
        }
        serde_json::from_slice(bytes).map_err(CheckpointError::from_json)
    }

    /// Decodes a large file that `src` reads, on two threads, each
    /// reading its part through a small window it reuses (the file is
    /// never held whole in memory). The deployment is not verified.
    ///
    /// `None` when the file is smaller than the split's threshold (1 MiB),
    /// cannot be read, or is not one the split can prove it decodes as
    /// [`CheckpointFile::from_slice`] would (see `split`'s module doc):
    /// the caller then reads it whole and decodes it with
    /// [`CheckpointFile::from_slice`], which also names any error.
    pub fn from_windows(src: &(impl ReadAt + ?Sized)) -> Option<Self> {
        split::decode_windows(src)
    }

    /// Decodes and verifies a file.
    ///
    /// # Errors
    /// As [`CheckpointFile::from_slice`], and
    /// [`CheckpointError::Integrity`] when the deployment breaks a rule.
    pub fn from_slice_verified(bytes: &[u8]) -> Result<Self> {
        let file = Self::from_slice(bytes)?;
        file.verify()?;
        Ok(file)
    }

    /// Reads and verifies a file from disk.
    ///
    /// # Errors
    /// [`CheckpointError::Io`] when it cannot be read, else as
    /// [`CheckpointFile::from_slice_verified`].
    pub fn read_verified(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|source| CheckpointError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_slice_verified(&bytes)
    }

    /// Checks the deployment's integrity.
    ///
    /// # Errors
    /// The first [`IntegrityError`] found.
    pub fn verify(&self) -> Result<(), IntegrityError> {
        match self.deployment_ref() {
            Some(d) => integrity::verify(d),
            None => Ok(()),
        }
    }

    /// The deployment, from either form (`None` for a backend checkpoint
    /// with no `latest`: an empty stack).
    pub fn deployment_ref(&self) -> Option<&Deployment> {
        self.deployment
            .as_ref()
            .or_else(|| self.checkpoint.as_ref().and_then(|c| c.latest.as_ref()))
    }

    /// The deployment, from either form, mutably.
    pub fn deployment_mut(&mut self) -> Option<&mut Deployment> {
        match (&mut self.deployment, &mut self.checkpoint) {
            (Some(d), _) => Some(d),
            (None, Some(c)) => c.latest.as_mut(),
            (None, None) => None,
        }
    }

    /// Takes the deployment out of either form (an empty one for a stack
    /// with none).
    pub fn into_deployment(self) -> Deployment {
        match (self.deployment, self.checkpoint) {
            (Some(d), _) => d,
            (
                None,
                Some(CheckpointBody {
                    latest: Some(d), ..
                }),
            ) => d,
            _ => Deployment::default(),
        }
    }

    /// Encodes the file as indented JSON.
    pub fn to_vec_pretty(&self) -> Vec<u8> {
        // Serializing these types into memory cannot fail: every map key is
        // a string and every number finite.
        super::property_map::with_indented_writes(|| serde_json::to_vec_pretty(self))
            .unwrap_or_default()
    }

    /// Encodes the file as compact JSON.
    pub fn to_vec(&self) -> Vec<u8> {
        super::property_map::with_raw_writes(|| serde_json::to_vec(self)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"{"manifest": {"time": "t", "magic": "", "version": ""}, "resources": [{"urn": "urn:pulumi:d::p::pulumi:pulumi:Stack::p-d", "type": "pulumi:pulumi:Stack", "custom": false}, {"urn": "urn:pulumi:d::p::a:b:C::n", "type": "a:b:C", "custom": false, "parent": "urn:pulumi:d::p::pulumi:pulumi:Stack::p-d", "extraKey": [1]}]}"#;

    /// The one-pass decode gives what the version-first decode gives,
    /// whatever the order of the head keys.
    #[test]
    fn one_pass_and_version_first_decodes_agree() {
        for text in [
            format!(r#"{{"version": 3, "deployment": {BODY}, "other": null}}"#),
            format!(r#"{{"deployment": {BODY}, "features": ["views"], "version": 4}}"#),
            format!(
                r#"{{"version": 3, "features": null, "checkpoint": {{"stack": "d", "latest": {BODY}}}}}"#
            ),
        ] {
            let fast = match serde_json::from_slice::<Fast>(text.as_bytes()) {
                Ok(Fast::Read(f)) => *f,
                _ => panic!("read in one pass: {text}"),
            };
            let careful: CheckpointFile = serde_json::from_slice(text.as_bytes()).unwrap();
            assert_eq!(fast, careful, "{text}");
            assert_eq!(fast.to_vec(), careful.to_vec());
            assert_eq!(
                CheckpointFile::from_slice(text.as_bytes()).unwrap(),
                careful
            );
        }
    }

    /// What the version check refuses, the one-pass decode leaves to it:
    /// the errors name the version, the features or the repeated key.
    #[test]
    fn files_the_version_check_refuses_are_refused_as_before() {
        let cases = [
            (
                format!(r#"{{"version": 2, "deployment": {BODY}}}"#),
                "version 2",
            ),
            (format!(r#"{{"deployment": {BODY}}}"#), "no `version`"),
            (
                format!(r#"{{"version": null, "deployment": {BODY}}}"#),
                "no `version`",
            ),
            (
                format!(r#"{{"version": 9, "deployment": {BODY}}}"#),
                "version 9",
            ),
            (
                format!(r#"{{"version": 4, "features": ["x"], "deployment": {BODY}}}"#),
                "features: x",
            ),
            (
                format!(r#"{{"version": 3, "version": 3, "deployment": {BODY}}}"#),
                "duplicate field `version`",
            ),
            (
                format!(r#"{{"version": 3, "deployment": {BODY}, "deployment": {BODY}}}"#),
                "duplicate field `deployment`",
            ),
            (r#"{"version": 3}"#.to_owned(), "neither"),
        ];
        for (text, says) in cases {
            assert!(
                !matches!(
                    serde_json::from_slice::<Fast>(text.as_bytes()),
                    Ok(Fast::Read(_))
                ),
                "{text}"
            );
            let e = CheckpointFile::from_slice(text.as_bytes()).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }

    /// A URN read many times in one file is validated and allocated once.
    #[test]
    fn a_file_shares_each_urn() {
        let text = format!(r#"{{"version": 3, "deployment": {BODY}}}"#);
        let file = CheckpointFile::from_slice(text.as_bytes()).unwrap();
        let d = file.deployment_ref().unwrap();
        assert!(d.resources[0].urn.shares_text(&d.resources[1].parent));
        // Another decode has its own table.
        let again = CheckpointFile::from_slice(text.as_bytes()).unwrap();
        let d2 = again.deployment_ref().unwrap();
        assert!(!d2.resources[0].urn.shares_text(&d.resources[0].urn));
    }
}
