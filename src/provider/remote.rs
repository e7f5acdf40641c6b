//! What a provider is asked beyond resource lifecycles: functions
//! (`Invoke`), remote components (`Construct`) and their methods (`Call`).
//!
//! Construct and Call run the provider's own program code, which registers
//! resources back into the operation through the resource monitor at
//! [`RemoteContext::monitor_endpoint`]; the requests therefore carry the
//! deployment's context as an SDK sees it. URNs and provider references
//! stay strings here: they come from one SDK's wire and go to another's
//! unchanged.

use std::collections::BTreeMap;

use crate::model::PropertyMap;

/// The deployment a Construct or Call runs in, as an SDK sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteContext {
    /// The project.
    pub project: String,
    /// The stack.
    pub stack: String,
    /// The organization.
    pub organization: String,
    /// Configuration, `namespace:key` -> value.
    pub config: BTreeMap<String, String>,
    /// The configuration keys whose values are secrets.
    pub config_secret_keys: Vec<String>,
    /// True during a preview.
    pub dry_run: bool,
    /// The SDK's registration parallelism.
    pub parallel: i32,
    /// The resource monitor the provider's SDK registers into (`host:port`).
    pub monitor_endpoint: String,
}

/// The custom timeouts of a component, as the SDK sent them (durations
/// such as `5m`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteTimeouts {
    /// Create.
    pub create: String,
    /// Update.
    pub update: String,
    /// Delete.
    pub delete: String,
}

/// A remote component's registration (`Construct`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConstructRequest {
    /// The deployment.
    pub context: RemoteContext,
    /// The component's type token.
    pub ty: String,
    /// Its name.
    pub name: String,
    /// Its parent's URN (empty: the stack).
    pub parent: String,
    /// Its inputs.
    pub inputs: PropertyMap,
    /// Per input, the URNs it depends on.
    pub input_dependencies: BTreeMap<String, Vec<String>>,
    /// Package -> provider reference (`urn::id`) for its children.
    pub providers: BTreeMap<String, String>,
    /// The URNs it depends on.
    pub dependencies: Vec<String>,
    /// `protect`, when set.
    pub protect: Option<bool>,
    /// Outputs to make secret.
    pub additional_secret_outputs: Vec<String>,
    /// Custom timeouts, when set.
    pub custom_timeouts: Option<RemoteTimeouts>,
    /// `deletedWith` (a URN, empty: none).
    pub deleted_with: String,
    /// `deleteBeforeReplace`, when set.
    pub delete_before_replace: Option<bool>,
    /// `ignoreChanges` paths.
    pub ignore_changes: Vec<String>,
    /// `replaceOnChanges` paths.
    pub replace_on_changes: Vec<String>,
    /// `retainOnDelete`, when set.
    pub retain_on_delete: Option<bool>,
    /// The program's resource hooks bound to the component, by name and
    /// point (`before_create`, ..., `on_error`): the provider registers
    /// the component with them, and the monitor runs the program's hooks
    /// of those names.
    pub hooks: Option<BTreeMap<&'static str, Vec<String>>>,
}

/// What a provider answered to `Construct`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConstructResult {
    /// The component's URN (registered by the provider).
    pub urn: String,
    /// Its outputs.
    pub state: PropertyMap,
    /// Per output, the URNs it depends on.
    pub state_dependencies: BTreeMap<String, Vec<String>>,
}

/// A component method's call (`Call`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallRequest {
    /// The deployment.
    pub context: RemoteContext,
    /// The method's token (`pkg:module:Type/method`).
    pub token: String,
    /// Its arguments (`__self__` is the component).
    pub args: PropertyMap,
    /// Per argument, the URNs it depends on.
    pub arg_dependencies: BTreeMap<String, Vec<String>>,
}

/// What a provider answered to `Call`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallResult {
    /// The returned values.
    pub ret: PropertyMap,
    /// Per returned value, the URNs it depends on.
    pub return_dependencies: BTreeMap<String, Vec<String>>,
    /// Arguments the provider refused (`property: reason`); empty on
    /// success.
    pub failures: Vec<String>,
}
