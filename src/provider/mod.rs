//! Providers: the async trait the engine calls for every physical
//! operation, the registry that resolves provider references, and the
//! simulated cloud (`architecture.md` §4).

pub mod builtins;
pub mod package;
pub mod registry;
pub mod remote;
pub mod schema;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "sim")]
mod sim_db;
#[cfg(feature = "sim")]
mod sim_file;
#[cfg(feature = "sim")]
mod sim_functions;
#[cfg(feature = "sim")]
mod sim_timer;

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;

use crate::model::{PropertyMap, TypeToken, Urn};

/// A type or function token with its module's `/suffix` dropped
/// (`aws:s3/bucket:Bucket` is `aws:s3:Bucket`): how Pulumi YAML programs
/// and the simulated cloud's lookups may write it.
#[cfg(any(feature = "sim", feature = "grpc"))]
pub(crate) fn without_module_suffix(token: &str) -> String {
    let mut it = token.splitn(3, ':');
    match (it.next(), it.next(), it.next()) {
        (Some(pkg), Some(module), Some(name)) => {
            let module = module.split('/').next().unwrap_or(module);
            format!("{pkg}:{module}:{name}")
        }
        _ => token.to_owned(),
    }
}

pub use registry::ProviderRegistry;
pub use remote::{CallRequest, CallResult, ConstructRequest, ConstructResult, RemoteContext};
pub use schema::{SchemaInfo, SchemaState, SchemaUpgradeError};
#[cfg(feature = "sim")]
pub use sim::{SchemaDef, SimCloud, SimConfig, SimProvider};

/// A provider's failure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// The operation failed in the cloud.
    #[error("{operation} of {urn} failed: {message}")]
    Failed {
        /// `create`, `update`, `delete`, `read`, `check`, `diff`.
        operation: &'static str,
        /// The resource.
        urn: Urn,
        /// The provider's message.
        message: String,
    },
    /// The inputs are invalid.
    #[error("invalid inputs for {urn}: {}", .failures.join("; "))]
    CheckFailed {
        /// The resource.
        urn: Urn,
        /// One message per invalid input.
        failures: Vec<String>,
    },
    /// The provider cannot tell which objects a URN was created as.
    #[error("the provider of {urn} cannot look objects up by URN")]
    CannotLookUp {
        /// The resource.
        urn: Urn,
    },
    /// The object does not exist.
    #[error("{urn} (id `{id}`) does not exist in the cloud")]
    NotFound {
        /// The resource.
        urn: Urn,
        /// The ID looked up.
        id: String,
    },
    /// A persisted state could not be migrated to the type's current
    /// schema version (`architecture.md` §8).
    #[error("cannot migrate {urn} (type {ty}) from schema version {old_version}: {message}")]
    Migrate {
        /// The resource.
        urn: Urn,
        /// Its type.
        ty: TypeToken,
        /// The schema version its state was written with.
        old_version: u64,
        /// Why.
        message: String,
    },
    /// The object was made (or changed) but failed to initialise: it
    /// exists, and its state is recorded with these reasons as its
    /// `initErrors` while the step fails (Pulumi's
    /// `ErrorResourceInitFailed`). The next update of the resource is an
    /// update even when its inputs are unchanged, so that the provider can
    /// finish it.
    #[error("{operation} of {urn} failed: {message}")]
    InitFailed {
        /// `create`, `update` or `read`.
        operation: &'static str,
        /// The resource.
        urn: Urn,
        /// The object as it now exists.
        object: Box<ObjectState>,
        /// Why it failed to initialise.
        reasons: Vec<String>,
        /// The provider's message.
        message: String,
    },
    /// A function, remote component or method call failed (no resource
    /// state is involved).
    #[error("{operation} of `{target}` failed: {message}")]
    Call {
        /// `invoke`, `construct` or `call`.
        operation: &'static str,
        /// The function or method token, or the component (`type::name`).
        target: String,
        /// The provider's message.
        message: String,
    },
    /// The provider does not serve this kind of request.
    #[error("{operation} of `{target}`: the provider serving package `{package}` does not support {operation}")]
    Unsupported {
        /// `invoke`, `construct` or `call`.
        operation: &'static str,
        /// The function or method token, or the component (`type::name`).
        target: String,
        /// The provider's package.
        package: String,
    },
}

impl ProviderError {
    /// The same error with every text of `r` in the provider's words (its
    /// messages, invalid-input failures and init reasons, which the state
    /// keeps as `initErrors`) replaced by `[secret]`: a provider's error
    /// may quote the secrets it was sent.
    #[must_use]
    pub fn redacted(mut self, r: &crate::source::migration::Redactor) -> Self {
        match &mut self {
            Self::Failed { message, .. }
            | Self::Migrate { message, .. }
            | Self::Call { message, .. } => *message = r.redact(message),
            Self::CheckFailed { failures, .. } => {
                failures.iter_mut().for_each(|f| *f = r.redact(f));
            }
            Self::InitFailed {
                reasons, message, ..
            } => {
                *message = r.redact(message);
                reasons.iter_mut().for_each(|f| *f = r.redact(f));
            }
            Self::CannotLookUp { .. } | Self::NotFound { .. } | Self::Unsupported { .. } => {}
        }
        self
    }
}

/// The result type of provider calls.
pub type Result<T, E = ProviderError> = std::result::Result<T, E>;

/// What a diff found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffKind {
    /// No change.
    Same,
    /// An in-place update.
    Update,
    /// The object must be replaced.
    Replace,
}

/// The answer to a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffResponse {
    /// What kind of change.
    pub kind: DiffKind,
    /// The input keys that changed.
    pub changed_keys: BTreeSet<String>,
    /// The keys that force a replace.
    pub replace_keys: BTreeSet<String>,
    /// The provider requires delete-before-replace for this resource.
    pub delete_before_replace: bool,
    /// The provider's own property-level diff (Pulumi's detailed diff),
    /// shown by `--diff` instead of keel's comparison of the inputs; empty
    /// when the provider gave none.
    pub detailed: Vec<DetailedDiff>,
}

/// One property change as the provider reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetailedDiff {
    /// The property path (`tags.env`, `rules[0]`, `labels["a.b"]`).
    pub path: String,
    /// Added, deleted or updated.
    pub kind: DetailedKind,
    /// The change forces a replacement.
    pub replace: bool,
    /// Compared with the old inputs (else with the old outputs).
    pub input_diff: bool,
}

/// What happened to a property.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailedKind {
    /// It is new.
    Add,
    /// It is gone.
    Delete,
    /// It changed.
    Update,
}

/// A request about one resource.
#[derive(Debug, Clone)]
pub struct ResourceRequest<'a> {
    /// The resource's URN.
    pub urn: &'a Urn,
    /// Its type.
    pub ty: &'a TypeToken,
    /// The prior state's type, when it differs from `ty` (the resource was
    /// re-typed through a type alias): an update may find the object under
    /// it.
    pub old_ty: Option<&'a TypeToken>,
    /// Its physical ID (empty for a create).
    pub id: &'a str,
    /// The inputs to apply (new inputs for create/update; current for delete/read).
    pub inputs: &'a PropertyMap,
    /// The prior inputs (update, diff, check).
    pub old_inputs: Option<&'a PropertyMap>,
    /// The prior outputs (update, delete, read, diff).
    pub old_outputs: Option<&'a PropertyMap>,
    /// Input keys whose changes are ignored (diff).
    pub ignore_changes: &'a [String],
    /// Input keys whose changes force a replace (diff).
    pub replace_on_changes: &'a [String],
    /// The operation's timeout (`customTimeouts`), if set.
    pub timeout: Option<Duration>,
    /// A preview: compute the answer, change nothing.
    pub preview: bool,
}

impl<'a> ResourceRequest<'a> {
    /// A request about `urn` with nothing prior, no options, not a preview.
    pub fn new(urn: &'a Urn, ty: &'a TypeToken, id: &'a str, inputs: &'a PropertyMap) -> Self {
        Self {
            urn,
            ty,
            old_ty: None,
            id,
            inputs,
            old_inputs: None,
            old_outputs: None,
            ignore_changes: &[],
            replace_on_changes: &[],
            timeout: None,
            preview: false,
        }
    }
}

/// The top-level keys whose values differ between `old` and `new` (present
/// in one only, or different), except those `skip` names.
pub fn changed_keys(old: &PropertyMap, new: &PropertyMap, skip: &[&str]) -> BTreeSet<String> {
    old.keys()
        .chain(new.keys())
        .filter(|k| !skip.contains(&k.as_str()) && old.get(*k) != new.get(*k))
        .cloned()
        .collect()
}

/// A request to compare two configurations of a provider (Pulumi's
/// `DiffConfig`). The engine drops the `__internal` key (the plugin's
/// version and download URL, which keel records as Pulumi does) before
/// asking.
#[derive(Debug, Clone)]
pub struct DiffConfigRequest<'a> {
    /// The provider resource's URN (of the new configuration).
    pub urn: &'a Urn,
    /// The old configuration (the prior provider state's inputs).
    pub old_inputs: &'a PropertyMap,
    /// The prior provider state's outputs.
    pub old_outputs: &'a PropertyMap,
    /// The new configuration.
    pub new_inputs: &'a PropertyMap,
    /// A preview: values may be unknown.
    pub preview: bool,
}

/// The answer to a create, update or read: the object's ID, inputs and
/// outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectState {
    /// The physical ID.
    pub id: String,
    /// The inputs as the cloud sees them.
    pub inputs: PropertyMap,
    /// The outputs.
    pub outputs: PropertyMap,
}

/// A resource provider. All calls are async; implementations must be
/// cheap to share (`Arc<dyn Provider>`).
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The package this provider serves.
    fn package(&self) -> &str;

    /// Configures the provider from its resource's inputs.
    ///
    /// # Errors
    /// [`ProviderError`] when the configuration is invalid.
    async fn configure(&self, inputs: &PropertyMap) -> Result<()>;

    /// Validates inputs, returning them normalized (defaults applied).
    ///
    /// # Errors
    /// [`ProviderError::CheckFailed`] listing invalid inputs.
    async fn check(&self, req: ResourceRequest<'_>) -> Result<PropertyMap>;

    /// Compares old and new inputs.
    ///
    /// # Errors
    /// [`ProviderError`] when the diff cannot be computed.
    async fn diff(&self, req: ResourceRequest<'_>) -> Result<DiffResponse>;

    /// Compares two configurations of this provider: whether a provider
    /// resource whose inputs changed can be updated in place or must be
    /// replaced, and whether a resource moved from one provider resource to
    /// another (a default provider of another version, an explicit one)
    /// must be replaced. The default, as for a
    /// Pulumi plugin that does not implement `DiffConfig`, never asks for a
    /// replace: an update when a key differs, else no change.
    ///
    /// # Errors
    /// [`ProviderError`] when the configurations cannot be compared.
    async fn diff_config(&self, req: DiffConfigRequest<'_>) -> Result<DiffResponse> {
        let changed_keys = changed_keys(req.old_inputs, req.new_inputs, &[]);
        Ok(DiffResponse {
            kind: if changed_keys.is_empty() {
                DiffKind::Same
            } else {
                DiffKind::Update
            },
            changed_keys,
            replace_keys: BTreeSet::new(),
            delete_before_replace: false,
            detailed: Vec::new(),
        })
    }

    /// Creates the object (in preview: computes the expected outputs).
    ///
    /// # Errors
    /// [`ProviderError::Failed`] when the cloud refuses.
    async fn create(&self, req: ResourceRequest<'_>) -> Result<ObjectState>;

    /// Reads the object; `None` when it no longer exists.
    ///
    /// # Errors
    /// [`ProviderError::Failed`] when the cloud cannot be asked.
    async fn read(&self, req: ResourceRequest<'_>) -> Result<Option<ObjectState>>;

    /// Updates the object in place.
    ///
    /// # Errors
    /// [`ProviderError::Failed`] when the cloud refuses.
    async fn update(&self, req: ResourceRequest<'_>) -> Result<ObjectState>;

    /// Deletes the object.
    ///
    /// # Errors
    /// [`ProviderError::Failed`] when the cloud refuses.
    async fn delete(&self, req: ResourceRequest<'_>) -> Result<()>;

    /// Finds the object a resource was created as, by its URN, when the
    /// provider can (used to adopt the result of a create interrupted before
    /// its ID was recorded). `Ok(None)` means the cloud holds no such
    /// object; a provider that cannot tell must say so, never `None`.
    ///
    /// # Errors
    /// [`ProviderError::CannotLookUp`] by default (Pulumi's provider
    /// protocol has no lookup by URN); [`ProviderError::Failed`] when the
    /// cloud cannot be asked.
    async fn find(&self, urn: &Urn, ty: &TypeToken) -> Result<Option<ObjectState>> {
        let _ = ty;
        Err(ProviderError::CannotLookUp { urn: urn.clone() })
    }

    /// Every object the cloud holds for a URN, when the provider can tell
    /// (a replacement shares its URN with the object it replaces: recovery
    /// of an interrupted create-replacement must see both). The default
    /// asks [`Provider::find`].
    ///
    /// # Errors
    /// [`ProviderError::Failed`] when the cloud cannot be asked.
    async fn find_all(&self, urn: &Urn, ty: &TypeToken) -> Result<Vec<ObjectState>> {
        Ok(self.find(urn, ty).await?.into_iter().collect())
    }

    /// The current persisted schema of a resource type, when the provider
    /// versions it (`architecture.md` §8). The default versions nothing:
    /// `None`.
    fn schema(&self, ty: &TypeToken) -> Option<SchemaInfo> {
        let _ = ty;
        None
    }

    /// Migrates a persisted state of `ty` written with schema version
    /// `old_version` straight to the current version, inputs and outputs
    /// together. Called only for types [`Provider::schema`] versions, with
    /// `old_version` below the current one. The default has no migration.
    ///
    /// # Errors
    /// [`ProviderError::Migrate`] when the state cannot be migrated.
    async fn migrate_state(
        &self,
        urn: &Urn,
        ty: &TypeToken,
        old_version: u64,
        state: SchemaState,
    ) -> Result<SchemaState> {
        let _ = state;
        Err(ProviderError::Migrate {
            urn: urn.clone(),
            ty: ty.clone(),
            old_version,
            message: "the provider has no migration for this type".into(),
        })
    }

    /// True when the provider must be configured before its resources'
    /// checks and diffs (a plugin): the engine then asks it only once its
    /// provider resource's registration finished. The default, for
    /// providers that need no configuration first (the simulated cloud),
    /// is false: they are asked at once.
    fn configure_before_use(&self) -> bool {
        false
    }

    /// Calls a provider function (`Invoke`, e.g. `aws:ec2/getAmi:getAmi`).
    ///
    /// # Errors
    /// [`ProviderError::Unsupported`] by default;
    /// [`ProviderError::Call`] when the function fails.
    async fn invoke(&self, token: &str, args: &PropertyMap, preview: bool) -> Result<PropertyMap> {
        let _ = (args, preview);
        Err(ProviderError::Unsupported {
            operation: "invoke",
            target: token.to_owned(),
            package: self.package().to_owned(),
        })
    }

    /// True when the function `token` returns a single value rather than
    /// an object (a schema function whose `outputs` is not an object type):
    /// the provider answers with an object of one property, and a language
    /// host that is not asked for a property unwraps it, as Pulumi's SDKs
    /// do. False by default; a plugin reads its schema (`GetSchema`) the
    /// first time it is asked.
    async fn returns_scalar(&self, token: &str) -> bool {
        let _ = token;
        false
    }

    /// The provider schema's spelling of a resource type or function token
    /// written without its module's `/suffix` (`aws:s3:Bucket` for
    /// `aws:s3/bucket:Bucket`), as Pulumi YAML resolves tokens against the
    /// schema; `None` when the schema has the token as it is, has no such
    /// token, or the provider has no schema (the default).
    async fn schema_token(&self, token: &str) -> Option<String> {
        let _ = token;
        None
    }

    /// Constructs a remote component (`Construct`): the provider registers
    /// it and its children through `req.context.monitor_endpoint`.
    ///
    /// # Errors
    /// [`ProviderError::Unsupported`] by default;
    /// [`ProviderError::Call`] when the construction fails.
    async fn construct(&self, req: ConstructRequest) -> Result<ConstructResult> {
        Err(ProviderError::Unsupported {
            operation: "construct",
            target: format!("{}::{}", req.ty, req.name),
            package: self.package().to_owned(),
        })
    }

    /// Calls a component's method (`Call`).
    ///
    /// # Errors
    /// [`ProviderError::Unsupported`] by default;
    /// [`ProviderError::Call`] when the call fails.
    async fn call(&self, req: CallRequest) -> Result<CallResult> {
        Err(ProviderError::Unsupported {
            operation: "call",
            target: req.token,
            package: self.package().to_owned(),
        })
    }

    /// Releases what the provider holds for the operation (a plugin
    /// process: stopped, killed after a grace period). The engine calls it
    /// on every instance the operation made, once the operation ends,
    /// successfully or not; no call follows it. The default does nothing.
    async fn shutdown(&self) {}

    /// Tells the provider the operation is being cancelled (Pulumi's
    /// `Cancel`): it should finish or abandon what it is doing promptly.
    /// The default does nothing.
    async fn cancel(&self) {}

    /// What serves this provider's objects ([`Serving`]): whether they are
    /// real or simulated. The default is [`Serving::Embedded`], a provider
    /// the embedding program wrote.
    fn serving(&self) -> Serving {
        Serving::Embedded
    }
}

/// What serves a package's objects. Recorded per package in the state (the
/// manifest's `plugins` entries, key `servedBy`) and shown in the summary,
/// so that nobody mistakes a simulated deployment for a real one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Serving {
    /// Keel's simulated cloud: nothing real exists.
    Simulated,
    /// The package's provider plugin: real objects.
    Plugin,
    /// Built into keel (package `pulumi`: stack references).
    Builtin,
    /// A provider the program embedding keel supplied.
    Embedded,
}

impl Serving {
    /// The name written in state and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Simulated => "simulated",
            Self::Plugin => "plugin",
            Self::Builtin => "builtin",
            Self::Embedded => "embedded",
        }
    }

    /// The serving a name stands for.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "simulated" => Self::Simulated,
            "plugin" => Self::Plugin,
            "builtin" => Self::Builtin,
            "embedded" => Self::Embedded,
            _ => return None,
        })
    }

    /// Whether the objects are real (a plugin's) rather than simulated.
    pub fn is_real(self) -> bool {
        matches!(self, Self::Plugin)
    }
}

impl std::fmt::Display for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
