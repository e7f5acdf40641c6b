//! Source events: what a program asks of the engine. The fields mirror
//! Pulumi's resource-monitor requests (`RegisterResource`, `ReadResource`,
//! `RegisterResourceOutputs`) so a gRPC front end can feed the same actor.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::model::state::CustomTimeouts;
use crate::model::{PropertyMap, TypeToken, Urn};

/// A former identity of a resource, by which its prior state may be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alias {
    /// A whole former URN.
    Urn(Urn),
    /// A former identity described by the parts that changed; unset parts
    /// are the resource's current ones.
    Spec(AliasSpec),
}

/// The parts of a former identity (Pulumi's alias object).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AliasSpec {
    /// The former name.
    pub name: Option<String>,
    /// The former type.
    pub ty: Option<TypeToken>,
    /// The former parent: `None` keeps the current parent.
    pub parent: Option<AliasParent>,
    /// The former stack.
    pub stack: Option<String>,
    /// The former project.
    pub project: Option<String>,
}

/// The parent part of an [`AliasSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AliasParent {
    /// The resource had no parent (it was top level).
    NoParent,
    /// The resource had this parent.
    Urn(Urn),
}

/// The options of a registration (Pulumi's resource options).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceOptions {
    /// The parent (default: the stack resource).
    pub parent: Option<Urn>,
    /// Explicit dependencies (`dependsOn`).
    pub depends_on: Vec<Urn>,
    /// Dependencies per input property.
    pub property_dependencies: BTreeMap<String, Vec<Urn>>,
    /// An explicit provider reference `<URN>::<ID>`; default: the package's
    /// default provider.
    pub provider: Option<String>,
    /// The provider plugin's version (`version`): picks the default
    /// provider (`default_6_0_0`), as Pulumi does.
    pub version: Option<String>,
    /// The provider plugin's download URL (`pluginDownloadURL`): picks the
    /// default provider too.
    pub plugin_download_url: Option<String>,
    /// Never delete or replace.
    pub protect: bool,
    /// Leave the physical object when the resource is deleted.
    pub retain_on_delete: bool,
    /// Skip the delete when this resource is deleted in the same operation.
    pub deleted_with: Option<Urn>,
    /// Force (or forbid) delete-before-replace; default: the provider says.
    pub delete_before_replace: Option<bool>,
    /// Former identities.
    pub aliases: Vec<Alias>,
    /// Per-operation timeouts.
    pub custom_timeouts: Option<CustomTimeouts>,
    /// Input keys whose changes are ignored.
    pub ignore_changes: Vec<String>,
    /// Input keys whose changes force a replace.
    pub replace_on_changes: Vec<String>,
    /// Output keys to treat as secret.
    pub additional_secret_outputs: Vec<String>,
    /// Replace this resource whenever one of these (registered before it)
    /// is replaced in the same operation (`replaceWith`).
    pub replace_with: Vec<Urn>,
    /// Replace this resource when this value differs from the one recorded
    /// by the last operation (`replacementTrigger`); `Null`: no trigger.
    pub replacement_trigger: crate::model::PropertyValue,
    /// Property paths whose changes are not displayed (`hideDiffs`).
    pub hide_diffs: Vec<String>,
    /// A provider resource's environment variable remappings for its
    /// plugin (`envVarMappings`, `NEW -> OLD`): when `NEW` is set in keel's
    /// environment, the plugin sees `OLD` with its value.
    pub env_var_mappings: BTreeMap<String, String>,
    /// Adopt the existing object with this ID instead of creating one
    /// (`import`): it is read, compared with the inputs, never created.
    pub import: Option<String>,
    /// Hooks around the resource's provider operations.
    pub hooks: std::sync::Arc<super::hooks::ResourceHooks>,
    /// Component state migrations (`stateMigrations`): callbacks that
    /// reshape the prior subtree before the registration is planned.
    pub state_migrations: super::migration::StateMigrations,
    /// The concrete declaration address of a program file's entry
    /// (`group["east"]/server["a"]`, [`crate::model::Address`]); empty
    /// for programs that have none. Recorded as `keelAddress`.
    pub address: String,
}

/// A `RegisterResource` request: the desired state of one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    /// The type.
    pub ty: TypeToken,
    /// The name.
    pub name: String,
    /// Custom (provider-backed) or component.
    pub custom: bool,
    /// The inputs.
    pub inputs: PropertyMap,
    /// The options.
    pub options: ResourceOptions,
}

impl Goal {
    /// A custom resource with inputs and default options.
    pub fn custom(ty: TypeToken, name: impl Into<String>, inputs: PropertyMap) -> Self {
        Self {
            ty,
            name: name.into(),
            custom: true,
            inputs,
            options: ResourceOptions::default(),
        }
    }

    /// A component resource with default options.
    pub fn component(ty: TypeToken, name: impl Into<String>) -> Self {
        Self {
            ty,
            name: name.into(),
            custom: false,
            inputs: PropertyMap::new(),
            options: ResourceOptions::default(),
        }
    }

    /// The same goal with other options.
    pub fn with_options(mut self, options: ResourceOptions) -> Self {
        self.options = options;
        self
    }

    /// The timeout for an operation, from `customTimeouts`.
    pub fn timeout(&self, op: fn(&CustomTimeouts) -> f64) -> Option<Duration> {
        self.options
            .custom_timeouts
            .as_ref()
            .map(op)
            .filter(|s| *s > 0.0)
            .map(Duration::from_secs_f64)
    }
}

/// A `ReadResource` request: adopt an external object read from the cloud.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReadGoal {
    /// The type.
    pub ty: TypeToken,
    /// The name.
    pub name: String,
    /// The physical ID to read.
    pub id: String,
    /// Properties that help the provider find it.
    pub inputs: PropertyMap,
    /// The parent (default: the stack resource).
    pub parent: Option<Urn>,
    /// An explicit provider reference.
    pub provider: Option<String>,
    /// Explicit dependencies.
    pub depends_on: Vec<Urn>,
    /// Outputs to store and return as secrets.
    pub additional_secret_outputs: Vec<String>,
    /// The provider plugin's version (picks the default provider).
    pub version: Option<String>,
    /// The provider plugin's download URL (picks the default provider).
    pub plugin_download_url: Option<String>,
    /// The concrete declaration address (see [`ResourceOptions::address`]).
    pub address: String,
    /// An action rather than an observation: the type token names the
    /// provider function that runs it, `inputs` are its arguments, and it
    /// runs only when they differ from the last completed run's.
    pub action: bool,
}

/// What the engine answers to a registration once its steps completed.
#[derive(Debug, Clone, PartialEq)]
pub struct Registered {
    /// The resource's URN.
    pub urn: Urn,
    /// Its physical ID (empty for a component; unknown in preview).
    pub id: String,
    /// Its outputs.
    pub outputs: PropertyMap,
}
