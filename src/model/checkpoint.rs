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
//! the version found. Decoding checks the version first (one scan that
//! skips the body), then decodes the body once.

use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::integrity::{self, IntegrityError};
use super::keys::json_object;
use super::snapshot::Deployment;

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

impl CheckpointFile {
    /// A stack export file (`{"version": 3, "deployment": ...}`).
    pub fn export(deployment: Deployment) -> Self {
        Self {
            version: CURRENT_VERSION,
            deployment: Some(deployment),
            ..Self::default()
        }
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
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(CheckpointError::Empty);
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
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Encodes the file as compact JSON.
    pub fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}
