//! The deployment (snapshot): manifest, secrets provider, resources in
//! dependency order, pending operations, metadata, snippets and extensions
//! (`checkpoint.md` §3).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::keys::{json_object, JsonEmpty};
use super::state::State;
use super::urn::Urn;

json_object! {
    /// Who wrote the snapshot and when.
    pub struct Manifest {
        /// When the snapshot was written (RFC 3339, kept as written).
        "time" => time: String [always],
        /// The hex SHA-256 of `version` (empty when the version is empty).
        "magic" => magic: String [always],
        /// The version of the tool that wrote it.
        "version" => version: String [always],
        /// Plugins used (kept verbatim).
        "plugins" => plugins: Vec<serde_json::Value>,
    }
}

impl Manifest {
    /// The magic cookie for a version string: its hex SHA-256, or empty for
    /// an empty version.
    pub fn magic_for(version: &str) -> String {
        if version.is_empty() {
            return String::new();
        }
        hex::encode(Sha256::digest(version.as_bytes()))
    }

    /// A manifest for a snapshot keel writes now.
    pub fn keel(time: String) -> Self {
        let version = format!("keel-{}", env!("CARGO_PKG_VERSION"));
        Self {
            time,
            magic: Self::magic_for(&version),
            version,
            ..Self::default()
        }
    }
}

json_object! {
    /// The secrets provider of a stack: its type and its opaque state.
    pub struct SecretsProviders {
        /// `passphrase`, `service`, `awskms`, `b64`, ...
        "type" => ty: String [always],
        /// Provider-specific state (e.g. the passphrase salt), kept verbatim.
        "state" => state: serde_json::Value,
    }
}

/// What an interrupted operation was doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationType {
    /// A create.
    #[default]
    Creating,
    /// An update.
    Updating,
    /// A delete.
    Deleting,
    /// A read.
    Reading,
    /// An import.
    Importing,
}

impl JsonEmpty for OperationType {
    fn json_empty(&self) -> bool {
        false
    }
}

json_object! {
    /// An operation that began and never finished (`pending_operations`).
    pub struct PendingOperation {
        /// The resource as it was when the operation began.
        "resource" => resource: State [always],
        /// What the operation was.
        "type" => ty: OperationType [always],
    }
}

json_object! {
    /// A code snippet resources can be generated from.
    pub struct Snippet {
        /// Its identity (required, unique).
        "uuid" => uuid: String,
        /// Its name.
        "name" => name: String,
        /// Its kind.
        "type" => ty: String,
        /// Its code.
        "code" => code: String,
        /// Its descriptor (kept verbatim).
        "descriptor" => descriptor: serde_json::Value,
        /// The resources it references, by name.
        "references" => references: BTreeMap<String, Urn>,
    }
}

json_object! {
    /// A deployment: the whole persisted state of a stack.
    pub struct Deployment {
        /// Who wrote it.
        "manifest" => manifest: Manifest [always],
        /// The secrets provider.
        "secrets_providers" => secrets_providers: SecretsProviders,
        /// The resources, each after everything it refers to.
        "resources" => resources: Vec<State>,
        /// Operations that began and never finished.
        "pending_operations" => pending_operations: Vec<PendingOperation>,
        /// Snapshot metadata (kept verbatim).
        "metadata" => metadata: serde_json::Value,
        /// Code snippets.
        "snippets" => snippets: Vec<Snippet>,
        /// Extensions (kept verbatim).
        "extensions" => extensions: serde_json::Value,
    }
}

impl Deployment {
    /// A new empty deployment written by keel at `time`.
    pub fn new(time: String) -> Self {
        Self {
            manifest: Manifest::keel(time),
            ..Self::default()
        }
    }

    /// The resource with `urn` that is not marked for deletion.
    pub fn find(&self, urn: &Urn) -> Option<&State> {
        self.resources.iter().find(|s| &s.urn == urn && !s.delete)
    }
}
