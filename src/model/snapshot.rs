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

/// The fewest bytes of JSON one state takes in a file, for the capacity a
/// decode reserves (a compact state with a short URN and type; keel's
/// states are 300-600 bytes, Pulumi's indented ones about 270). A guess too
/// high only costs the `Vec` its growth.
const MIN_STATE_BYTES: usize = 160;

/// How many states `len` bytes of JSON can hold, at most about.
pub(crate) fn states_room(len: usize) -> usize {
    len / MIN_STATE_BYTES
}

std::thread_local! {
    /// The capacity the next `resources` array decoded on this thread
    /// reserves (see [`with_states_hint`]).
    static STATES_HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Runs `f`, a decode of `len` bytes holding one deployment, with the
/// `resources` array reserving what that many bytes can hold: growing a
/// `Vec` of 20,000 states by doubling copies them about twice over into
/// fresh pages (4 ms of a 45 ms load, measured). The reservation is
/// virtual memory, given back by `shrink_to_fit` after the array.
pub(crate) fn with_states_hint<T>(len: usize, f: impl FnOnce() -> T) -> T {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            STATES_HINT.with(|h| h.set(self.0));
        }
    }
    let _restore = Restore(STATES_HINT.with(|h| h.replace(states_room(len))));
    f()
}

/// An empty `Vec` of states with room for `room`, and room for `urns`
/// URNs in this thread's interning table. The reservations are tried: a
/// system that refuses that much address space (strict overcommit) gets
/// the unreserved, growing `Vec`, not an aborted process.
pub(crate) fn reserved_states(room: usize, urns: usize) -> Vec<State> {
    let mut out = Vec::new();
    if out.try_reserve_exact(room).is_ok() {
        super::urn::reserve_interned_urns(urns);
    }
    out
}

/// Reads `resources` (`null` is `None`) into a `Vec` reserved by
/// [`with_states_hint`].
struct StatesSeed;

impl<'de> serde::de::DeserializeSeed<'de> for StatesSeed {
    type Value = Option<Vec<State>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct Seq;
        impl<'de> serde::de::Visitor<'de> for Seq {
            type Value = Option<Vec<State>>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of resource states")
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<Self::Value, D::Error> {
                d.deserialize_seq(self)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                // Taken: one deployment per hint (a nested one reserves nothing).
                let hint = STATES_HINT.with(std::cell::Cell::take);
                let room = hint.max(seq.size_hint().unwrap_or(0));
                let mut out = reserved_states(room, room);
                while let Some(state) = seq.next_element::<State>()? {
                    out.push(state);
                }
                out.shrink_to_fit();
                Ok(Some(out))
            }
        }
        d.deserialize_option(Seq)
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
        "resources" => resources: Vec<State> [seed StatesSeed],
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

/// The key keel adds to its manifest `plugins` entries: what served the
/// package (`simulated`, `plugin`, `builtin`, `embedded`). Pulumi reads
/// the entries' `name`, `path`, `type` and `version` and ignores it.
pub const SERVED_BY: &str = "servedBy";

/// The package of a provider resource type (`pulumi:providers:<pkg>`).
fn provider_package(ty: &str) -> Option<&str> {
    ty.strip_prefix("pulumi:providers:")
        .filter(|p| !p.is_empty())
}

impl Deployment {
    /// Writes `keelCategory` and `keelComposite` on every entry (pending
    /// operations' too), as `stack export` carries them: Pulumi ignores
    /// both keys, and keel checks them on import.
    pub fn stamp_categories(&mut self) {
        let stamp = |s: &mut State| {
            s.keel_category = Some(s.category());
            s.keel_composite = Some(s.composite());
        };
        self.resources.iter_mut().for_each(stamp);
        for p in &mut self.pending_operations {
            stamp(&mut p.resource);
        }
    }

    /// The root stack resource (`pulumi:pulumi:Stack`, not pending
    /// deletion), whose outputs are the stack's outputs.
    pub fn stack_resource(&self) -> Option<&State> {
        self.resources.iter().find(|r| r.ty.is_stack() && !r.delete)
    }

    /// What served each package with a provider resource here, as the
    /// manifest records it: keel's `plugins` entries carry [`SERVED_BY`];
    /// a deployment Pulumi wrote (a manifest version not keel's) was
    /// served by plugins, every package but the built-in `pulumi`.
    /// Packages with no record are absent.
    pub fn recorded_serving(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for entry in &self.manifest.plugins {
            let name = entry.get("name").and_then(serde_json::Value::as_str);
            let served = entry.get(SERVED_BY).and_then(serde_json::Value::as_str);
            if let (Some(name), Some(served)) = (name, served) {
                out.insert(name.to_owned(), served.to_owned());
            }
        }
        let by_pulumi =
            !self.manifest.version.is_empty() && !self.manifest.version.starts_with("keel-");
        if by_pulumi {
            for s in &self.resources {
                if let Some(pkg) = provider_package(s.ty.as_str()).filter(|p| *p != "pulumi") {
                    out.entry(pkg.to_owned())
                        .or_insert_with(|| "plugin".to_owned());
                }
            }
        }
        out
    }

    /// Rewrites the manifest's `plugins`: one entry per package with a
    /// provider resource here (its `version` input when it has one),
    /// served as `served` says, else as recorded; a package with neither
    /// gets no entry.
    pub fn record_serving(&mut self, served: &BTreeMap<String, String>) {
        let recorded = self.recorded_serving();
        let mut entries: BTreeMap<&str, (String, &str)> = BTreeMap::new();
        for s in &self.resources {
            let Some(pkg) = provider_package(s.ty.as_str()) else {
                continue;
            };
            let Some(how) = served.get(pkg).or_else(|| recorded.get(pkg)) else {
                continue;
            };
            let version = match s.inputs.get("version") {
                Some(super::PropertyValue::String(v)) => v.clone(),
                _ => String::new(),
            };
            let e = entries.entry(pkg).or_insert_with(|| (String::new(), how));
            if e.0.is_empty() {
                e.0 = version;
            }
        }
        self.manifest.plugins = entries
            .into_iter()
            .map(|(name, (version, how))| {
                serde_json::json!({
                    "name": name,
                    "path": "",
                    "type": "resource",
                    "version": version,
                    SERVED_BY: how,
                })
            })
            .collect();
    }

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
