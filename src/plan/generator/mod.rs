//! The planner: deterministic step generation with no I/O.
//!
//! The StepGenerator actor calls [`Planner::prepare`] when a registration
//! arrives (URN derivation, prior-state lookup through aliases, provider
//! resolution, `ignoreChanges`), asks the provider to check and diff
//! outside the planner (and, when the resource moved to another provider,
//! the new provider to compare configurations), then calls
//! [`Planner::decide`] with the answer to get the chain of steps. A
//! delete-before-replace first needs the dependents that must go
//! ([`Planner::dependents_walk`], driven by the actor, then
//! [`Planner::decide_with`]). At the end of the program,
//! [`Planner::deletes`] yields the deletes as antichains in reverse
//! dependency order.
//!
//! This file holds the planner's types and state; its methods live by
//! concern in the submodules: `resolve` (URNs, aliases, prior lookup,
//! resync), `provider_refs` (default providers, provider IDs, provider
//! changes), `decide` (prepare, decide, replaces, reads), `finish` (the
//! deletes and refreshes at the end) and `targets` (`--target` /
//! `--exclude` scope).

use std::collections::{BTreeMap, HashSet};

use crate::model::fasthash::{FastMap, FastSet};
use crate::model::urn::split_reference;

use crate::model::{
    PropertyMap, PropertyPath, PropertyPathError, PropertyValue, ProviderRef, SharedIds, State,
    Urn, UrnError,
};

use super::providers::VersionError;
use super::step::{lock, StateRef};

mod decide;
mod finish;
mod provider_refs;
mod resolve;
mod targets;
pub use targets::UrnGlob;

/// Why planning refused a registration or the deletes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A create of a resource whose earlier create was interrupted and may
    /// have made its object.
    #[error("{urn} has an interrupted create whose object may exist (the provider cannot look it up): creating it again could make a second one; resolve it first with `keel refresh --import-pending-creates {urn} ID` (the object exists) or `keel refresh --clear-pending-creates` (it does not)")]
    PendingCreate {
        /// The resource.
        urn: Urn,
    },
    /// `envVarMappings` on a resource that is not a provider resource.
    #[error("{urn} sets envVarMappings, which only a provider resource (`pulumi:providers:<package>`) can have: move it to the provider resource")]
    EnvVarMappingsNotProvider {
        /// The resource.
        urn: Urn,
    },
    /// An update's `replacementTrigger` holds an unknown value.
    #[error("the replacementTrigger of {urn} contains unknown values: an update must know it to decide whether to replace the resource; make the trigger depend only on values known before the update")]
    UnknownReplacementTrigger {
        /// The resource.
        urn: Urn,
    },
    /// Two registrations derived the same URN.
    #[error("duplicate resource URN {urn}: a resource with this URN was already registered in this program; give one of them another name")]
    DuplicateUrn {
        /// The URN.
        urn: Urn,
    },
    /// An alias names prior state another registration already took.
    #[error("resource {urn} has alias {alias}, but that prior state was already claimed by {claimed_by}; remove the alias from one of them")]
    AliasAlreadyClaimed {
        /// The registering resource.
        urn: Urn,
        /// The alias.
        alias: Urn,
        /// Who claimed it first.
        claimed_by: Urn,
    },
    /// A URN could not be built from the registration.
    #[error("resource `{name}` of type `{ty}`: {source}")]
    BadUrn {
        /// The resource's name.
        name: String,
        /// Its type.
        ty: String,
        /// Why.
        source: UrnError,
    },
    /// A parent or dependency was never registered.
    #[error("resource {urn} refers to {target} as its {what}, but no resource with that URN was registered before it")]
    UnknownReference {
        /// The registering resource.
        urn: Urn,
        /// The missing resource.
        target: Urn,
        /// `parent`, `dependency`, `deletedWith` or `provider`.
        what: &'static str,
    },
    /// A provider reference is malformed.
    #[error("resource {urn}: {source}")]
    BadProvider {
        /// The resource.
        urn: Urn,
        /// Why.
        source: UrnError,
    },
    /// A protected resource would be replaced.
    #[error("resource {urn} is protected and cannot be replaced (its change requires a replace); remove `protect` first, or undo the change")]
    ProtectedReplace {
        /// The resource.
        urn: Urn,
    },
    /// A targeted resource depends on an untargeted one that does not exist.
    #[error("resource {urn} is targeted, but it depends on {dependency}, which is not targeted and has no prior state (its create was skipped); add `--target {dependency}` too, or `--target-dependents` on it")]
    UntargetedDependency {
        /// The targeted resource.
        urn: Urn,
        /// The untargeted dependency.
        dependency: Urn,
    },
    /// A read (or action) refers to a resource whose create a targeted
    /// operation skipped: its state would refer to nothing.
    #[error("resource {urn} is read, but it refers to {dependency}, which is not targeted and has no prior state (its create was skipped); add `--target {dependency}` to the operation")]
    ReadOfSkipped {
        /// The read resource.
        urn: Urn,
        /// The skipped resource it refers to.
        dependency: Urn,
    },
    /// The program deviates from the saved plan being applied.
    #[error("resource {urn} deviates from the plan: {difference}; run `keel preview --save-plan` again, or change the program back")]
    PlanDeviation {
        /// The resource.
        urn: Urn,
        /// How it deviates.
        difference: String,
    },
    /// A `--target` / `--exclude` operation would delete resources that
    /// others it leaves alone still refer to.
    #[error("{} cannot be deleted: it is still referred to by {}, which this operation leaves as they are; add `--target-dependents` (or `--target` each of them), or stop excluding them", .urn, .dependents.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    DependentsLeftBehind {
        /// The resource that would be deleted.
        urn: Urn,
        /// The resources outside the operation that refer to it.
        dependents: Vec<Urn>,
    },
    /// A delete-before-replace would delete a dependent outside the targets.
    #[error("resource {urn} is replaced delete-before-replace, which deletes its dependent {dependent} first, but {dependent} is outside this operation; add `--target-dependents` (or `--target {dependent}`)")]
    DependentReplaceOutOfScope {
        /// The replaced resource.
        urn: Urn,
        /// The dependent outside the operation.
        dependent: Urn,
    },
    /// An `ignoreChanges` or `replaceOnChanges` entry is not a property path.
    #[error("resource {urn}: `{option}` entry `{path}` is not a property path: {source}")]
    BadPropertyPath {
        /// The resource.
        urn: Urn,
        /// `ignoreChanges` or `replaceOnChanges`.
        option: &'static str,
        /// The entry.
        path: String,
        /// Why.
        source: PropertyPathError,
    },
    /// The plugin version a registration asks for is not a version.
    #[error(
        "resource {urn}: the provider version {source}; give a version such as `6.0.0`, or none"
    )]
    BadVersion {
        /// The resource.
        urn: Urn,
        /// Why.
        source: VersionError,
    },
    /// A package declaration's version is not a version.
    #[error(
        "the declaration of package `{package}`: the version {source}; fix the package declaration (`sdks/<name>.yaml`)"
    )]
    BadDeclaredVersion {
        /// The package.
        package: String,
        /// Why.
        source: VersionError,
    },
    /// Protected resources would be deleted.
    #[error("{} protected resource(s) would be deleted: {}; remove `protect` from them first (update the program with protect: false), then retry", .urns.len(), .urns.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    ProtectedDelete {
        /// The protected resources.
        urns: Vec<Urn>,
    },
}

/// The result type of planning.
pub(crate) type Result<T, E = PlanError> = std::result::Result<T, E>;

/// A registration after URN derivation and prior lookup, waiting for the
/// provider's check and diff.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    /// The derived URN.
    pub urn: Urn,
    /// The prior state found (own URN or alias).
    pub old: Option<StateRef>,
    /// The desired state (ID and outputs filled by the executor), its
    /// inputs with `ignoreChanges` applied.
    pub new: State,
    /// The resolved provider, for custom non-provider resources.
    pub provider: Option<ProviderRef>,
    /// The package's default provider, when this registration is the
    /// first to ask for it: decided like a registration of its own, before
    /// this one (its chain must be submitted first).
    pub default_provider: Option<Box<Prepared>>,
    /// For a custom resource with prior state: what its provider
    /// reference's change means.
    pub provider_change: ProviderChange,
    /// For a provider resource with prior state whose configuration
    /// changed: the comparison its provider decides update or replace by.
    pub config_diff: Option<ConfigDiff>,
    /// The registration's inputs before `ignoreChanges` put old values
    /// back, when that changed them: a replacement is created from them
    /// (the actor checks them too), as Pulumi does.
    pub replacement_inputs: Option<PropertyMap>,
    /// `ignoreChanges` paths that could not be reset completely (they go
    /// through an element added or removed since): a diagnostic.
    pub ignore_warnings: Vec<String>,
    /// The `replaceOnChanges` paths.
    replace_paths: Vec<PropertyPath>,
    /// The default provider's request key, when the resource uses one.
    default_key: Option<String>,
    /// The prior state's position in the prior list.
    old_index: Option<usize>,
    /// Inside `--target` / outside `--exclude`.
    in_scope: bool,
    /// The registration's hooks, when it has any.
    hooks: Option<std::sync::Arc<crate::source::hooks::ResourceHooks>>,
    /// What the chain waits for: every resource the new state refers to,
    /// then its provider (collected once, when the scope is checked).
    waits_for: Vec<Urn>,
}

/// What a change of a resource's provider reference means (Pulumi's
/// `providerChanged`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) enum ProviderChange {
    /// The same provider resource (or one renamed through an alias). If it
    /// is replaced in this operation, so is the resource.
    #[default]
    Unchanged,
    /// A replace, whatever the provider says (the resource had no provider,
    /// or its prior provider is unknown).
    Replace,
    /// Another provider resource: the new provider compares the old
    /// provider's configuration with the new one; a replace there replaces
    /// the resource.
    Config(ConfigDiff),
}

/// Two configurations of a provider to compare (`Provider::diff_config`),
/// without `__internal`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConfigDiff {
    /// The provider instance to ask (the new configuration's).
    pub provider: ProviderRef,
    /// The old configuration.
    pub old_inputs: PropertyMap,
    /// The old provider state's outputs.
    pub old_outputs: PropertyMap,
    /// The new configuration.
    pub new_inputs: PropertyMap,
}

/// The operator's controls for one update or preview (`cli.md` §1): the one
/// value the step generator (and the migration checks) consult.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateOptions {
    /// `--target`: only these resources change (plus providers and the stack).
    pub targets: Vec<Urn>,
    /// `--target-dependents`: also what depends on a target.
    pub target_dependents: bool,
    /// `--target` globs (Pulumi's `*` and `**`): the resources they match
    /// are targets too.
    pub target_globs: Vec<UrnGlob>,
    /// `--exclude`: these resources do not change.
    pub excludes: Vec<Urn>,
    /// `--exclude` globs.
    pub exclude_globs: Vec<UrnGlob>,
    /// `--target` declaration addresses (concrete, base or declaration):
    /// the entries they name ([`crate::model::Address::matches`]) are
    /// targets too.
    pub target_addresses: Vec<crate::model::Address>,
    /// `--exclude` declaration addresses.
    pub exclude_addresses: Vec<crate::model::Address>,
    /// `--exclude-dependents`: nor what depends on them.
    pub exclude_dependents: bool,
    /// `--replace`: force these resources to be replaced.
    pub replaces: Vec<Urn>,
    /// `--target-snippet`: snippet-scoped targeting (restricts migrations).
    pub target_snippets: Vec<String>,
    /// `preview --save-plan`: the preview generates a saved plan.
    pub generate_plan: bool,
    /// `up --plan`: the update applies a saved plan.
    pub apply_plan: bool,
    /// The saved plan to follow (with `apply_plan`).
    pub plan: Option<std::sync::Arc<super::saved::SavedPlan>>,
    /// `refresh --clear-pending-creates`: interrupted creates whose
    /// objects cannot be looked up are dropped (else they stay pending).
    pub clear_pending_creates: bool,
    /// `refresh --import-pending-creates URN ID`: interrupted creates whose
    /// objects the operator found, by URN: each is read by its ID and
    /// adopted.
    pub import_pending_creates: Vec<(Urn, String)>,
}

impl UpdateOptions {
    /// True when the update is restricted to part of the stack.
    pub fn is_targeted(&self) -> bool {
        self.has_targets()
            || self.has_excludes()
            || !self.replaces.is_empty()
            || !self.target_snippets.is_empty()
    }

    /// True when `--target` named something (a URN, glob or address).
    pub fn has_targets(&self) -> bool {
        !self.targets.is_empty()
            || !self.target_globs.is_empty()
            || !self.target_addresses.is_empty()
    }

    /// True when `--exclude` named something (a URN, glob or address).
    pub fn has_excludes(&self) -> bool {
        !self.excludes.is_empty()
            || !self.exclude_globs.is_empty()
            || !self.exclude_addresses.is_empty()
    }
}

/// Operation-wide planning options.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlanOptions {
    /// The stack's name.
    pub stack: String,
    /// The project's name.
    pub project: String,
    /// A preview: IDs of new providers are unknown.
    pub preview: bool,
    /// The operator's controls.
    pub update: UpdateOptions,
    /// Configuration of providers' packages (`<package>:<key>` -> value):
    /// default providers take their package's keys as inputs.
    pub package_config: BTreeMap<String, PropertyValue>,
    /// The program's package declarations: a default provider of a
    /// package one declares a replacement parameterization of a base
    /// plugin is named and recorded as such.
    pub packages: Vec<crate::provider::package::PackageDecl>,
    /// Where the IDs of new provider resources come from (the system's by
    /// default; [`SharedIds::counting`] in tests, for stable IDs).
    pub ids: SharedIds,
    /// URNs whose interrupted create is still pending (its object may
    /// exist): the program registering one is refused a create until the
    /// operator resolves it, so that no object is made twice.
    pub pending_creates: HashSet<Urn>,
}

/// The planner's state for one operation.
#[derive(Debug)]
pub(crate) struct Planner {
    opts: PlanOptions,
    olds: Vec<StateRef>,
    /// Live (not pending-delete) prior states by URN.
    live: FastMap<Urn, usize>,
    /// Prior states already claimed (index -> claimer).
    claimed: FastMap<usize, Urn>,
    /// Prior states a step has superseded or scheduled (no end-of-program delete).
    handled: Vec<bool>,
    /// Prior states a create-before-delete replace left to delete at the end.
    replaced: FastSet<usize>,
    /// Prior states a delete-before-replace chain deletes as dependents
    /// (old index -> the replaced resource's URN), so that one registered
    /// after that chain was planned, but maybe before it ran, is created
    /// anew once the chain has deleted it.
    dbr_dependents: FastMap<usize, Urn>,
    /// URNs registered (or read) in this operation.
    registered: FastSet<Urn>,
    /// Default provider reference per request (package, version, download
    /// URL), once planned.
    default_providers: FastMap<String, ProviderRef>,
    /// Inputs of the provider resources registered in this operation.
    provider_inputs: FastMap<Urn, PropertyMap>,
    /// Provider resources replaced in this operation (their resources are
    /// replaced too).
    replaced_providers: FastSet<Urn>,
    /// Resources decided as replaced in this operation: those naming one
    /// in `replaceWith` or `deletedWith` are replaced too.
    replacing: FastSet<Urn>,
    /// Registrations prepared whose decision has not been made yet.
    undecided: FastSet<Urn>,
    /// The stack resource's URN, once registered.
    root: Option<Urn>,
    /// Registered resources inside the targets (for `--target-dependents`).
    targeted: FastSet<Urn>,
    /// Registered resources excluded (for `--exclude-dependents`).
    excluded: FastSet<Urn>,
    /// Untargeted new resources whose create was skipped.
    skipped: FastSet<Urn>,
    /// Prior URNs claimed through an alias.
    alias_claims: FastSet<Urn>,
    /// Registered resources found through an alias: the prior URN they were
    /// found under (Pulumi's step generator `aliases`). An alias naming one
    /// of them as its parent means that prior URN.
    matched: FastMap<Urn, Urn>,
    /// Registered resources' alias URNs (the matched prior URN first, then
    /// their own and inherited ones), which their children multiply into
    /// their own URNs. Only resources that have some are kept.
    alias_sets: FastMap<Urn, Vec<Urn>>,
    /// The plan being recorded (`preview --save-plan`).
    recording: Option<super::saved::SavedPlan>,
}

impl Planner {
    /// A planner over the prior resource list.
    pub(crate) fn new(opts: PlanOptions, olds: Vec<StateRef>) -> Self {
        let mut live = FastMap::with_capacity_and_hasher(olds.len(), Default::default());
        for (i, s) in olds.iter().enumerate() {
            let s = lock(s);
            if !s.delete {
                live.insert(s.urn.clone(), i);
            }
        }
        let handled = vec![false; olds.len()];
        Self {
            opts,
            olds,
            live,
            claimed: FastMap::default(),
            handled,
            replaced: FastSet::default(),
            dbr_dependents: FastMap::default(),
            registered: FastSet::default(),
            default_providers: FastMap::default(),
            provider_inputs: FastMap::default(),
            replaced_providers: FastSet::default(),
            replacing: FastSet::default(),
            undecided: FastSet::default(),
            root: None,
            targeted: FastSet::default(),
            excluded: FastSet::default(),
            skipped: FastSet::default(),
            alias_claims: FastSet::default(),
            matched: FastMap::default(),
            alias_sets: FastMap::default(),
            recording: None,
        }
        .recording_if_asked()
    }

    fn recording_if_asked(mut self) -> Self {
        if self.opts.update.generate_plan {
            self.recording = Some(super::saved::SavedPlan::new());
        }
        self
    }

    /// The plan recorded by a preview with `generate_plan`.
    pub(crate) fn take_saved_plan(&mut self) -> Option<super::saved::SavedPlan> {
        self.recording.take()
    }

    pub(super) fn applied_plan(&self) -> Option<&super::saved::SavedPlan> {
        self.opts
            .update
            .plan
            .as_deref()
            .filter(|_| self.opts.update.apply_plan)
    }

    /// The stack's name.
    pub(crate) fn stack(&self) -> &str {
        &self.opts.stack
    }

    /// The project's name.
    pub(crate) fn project(&self) -> &str {
        &self.opts.project
    }

    /// The operator's controls.
    pub(crate) fn options(&self) -> &UpdateOptions {
        &self.opts.update
    }

    /// The live prior state of `urn` (as migrations left it), if any.
    pub(crate) fn prior_state(&self, urn: &Urn) -> Option<State> {
        self.live.get(urn).map(|&i| lock(&self.olds[i]).clone())
    }

    /// The stack resource's URN, once registered.
    pub(crate) fn root(&self) -> Option<&Urn> {
        self.root.as_ref()
    }

    /// URNs registered so far in this operation.
    pub(crate) fn registered(&self) -> &FastSet<Urn> {
        &self.registered
    }

    /// Prior URNs claimed through an alias so far in this operation.
    pub(crate) fn alias_claims(&self) -> &FastSet<Urn> {
        &self.alias_claims
    }
}

/// The URN part of a provider reference (`None` when there is none).
fn provider_urn(reference: &str) -> Option<&str> {
    if reference.is_empty() {
        return None;
    }
    Some(split_reference(reference).map_or(reference, |(u, _)| u))
}

#[cfg(test)]
mod datadriven;
#[cfg(test)]
mod tests;
