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

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::urn::{STACK_TYPE, UNKNOWN_ID};
use crate::model::{
    PropertyMap, PropertyPath, PropertyPathError, PropertyValue, ProviderRef, State, TypeToken,
    Urn, UrnError,
};
use crate::provider::{DiffKind, DiffResponse};
use crate::source::goal::{Alias, AliasParent, Goal, ReadGoal};

use super::dependents::{DependentReplacements, DependentWalk};
use super::providers::{config_of, DefaultProviderRequest, VersionError};
use super::step::{lock, Chain, StateRef, Step, StepKind};
use super::{diffs, graph};

/// Why planning refused a registration or the deletes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
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
    /// Protected resources would be deleted.
    #[error("{} protected resource(s) would be deleted: {}; remove `protect` from them first (update the program with protect: false), then retry", .urns.len(), .urns.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    ProtectedDelete {
        /// The protected resources.
        urns: Vec<Urn>,
    },
}

/// The result type of planning.
pub type Result<T, E = PlanError> = std::result::Result<T, E>;

/// A registration after URN derivation and prior lookup, waiting for the
/// provider's check and diff.
#[derive(Debug, Clone)]
pub struct Prepared {
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
}

/// What a change of a resource's provider reference means (Pulumi's
/// `providerChanged`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ProviderChange {
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
pub struct ConfigDiff {
    /// The provider instance to ask (the new configuration's).
    pub provider: ProviderRef,
    /// The old configuration.
    pub old_inputs: PropertyMap,
    /// The old provider state's outputs.
    pub old_outputs: PropertyMap,
    /// The new configuration.
    pub new_inputs: PropertyMap,
}

impl Prepared {
    /// What the chain waits for: every resource the new state refers to,
    /// and its provider.
    fn waits_for(&self) -> Vec<Urn> {
        let mut out: Vec<Urn> = self.new.references().map(|(_, u)| u.clone()).collect();
        if let Some(r) = &self.provider {
            out.push(r.urn().clone());
        }
        out
    }
}

/// The operator's controls for one update or preview (`cli.md` §1): the one
/// value the step generator (and the migration checks) consult.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateOptions {
    /// `--target`: only these resources change (plus providers and the stack).
    pub targets: Vec<Urn>,
    /// `--target-dependents`: also what depends on a target.
    pub target_dependents: bool,
    /// `--exclude`: these resources do not change.
    pub excludes: Vec<Urn>,
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
}

impl UpdateOptions {
    /// True when the update is restricted to part of the stack.
    pub fn is_targeted(&self) -> bool {
        !self.targets.is_empty()
            || !self.excludes.is_empty()
            || !self.replaces.is_empty()
            || !self.target_snippets.is_empty()
    }
}

/// Operation-wide planning options.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
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
}

/// The planner's state for one operation.
#[derive(Debug)]
pub struct Planner {
    opts: PlanOptions,
    olds: Vec<StateRef>,
    /// Live (not pending-delete) prior states by URN.
    live: HashMap<Urn, usize>,
    /// Prior states already claimed (index -> claimer).
    claimed: HashMap<usize, Urn>,
    /// Prior states a step has superseded or scheduled (no end-of-program delete).
    handled: Vec<bool>,
    /// Prior states a create-before-delete replace left to delete at the end.
    replaced: HashSet<usize>,
    /// Prior states a delete-before-replace chain deletes as dependents
    /// (old index -> the replaced resource's URN), so that one registered
    /// after that chain was planned, but maybe before it ran, is created
    /// anew once the chain has deleted it.
    dbr_dependents: HashMap<usize, Urn>,
    /// URNs registered (or read) in this operation.
    registered: HashSet<Urn>,
    /// Default provider reference per request (package, version, download
    /// URL), once planned.
    default_providers: HashMap<String, ProviderRef>,
    /// Inputs of the provider resources registered in this operation.
    provider_inputs: HashMap<Urn, PropertyMap>,
    /// Provider resources replaced in this operation (their resources are
    /// replaced too).
    replaced_providers: HashSet<Urn>,
    /// The stack resource's URN, once registered.
    root: Option<Urn>,
    id_seq: u64,
    /// Registered resources inside the targets (for `--target-dependents`).
    targeted: HashSet<Urn>,
    /// Registered resources excluded (for `--exclude-dependents`).
    excluded: HashSet<Urn>,
    /// Untargeted new resources whose create was skipped.
    skipped: HashSet<Urn>,
    /// Prior URNs claimed through an alias.
    alias_claims: HashSet<Urn>,
    /// Registered resources found through an alias: the prior URN they were
    /// found under (Pulumi's step generator `aliases`). An alias naming one
    /// of them as its parent means that prior URN.
    matched: HashMap<Urn, Urn>,
    /// Registered resources' alias URNs (the matched prior URN first, then
    /// their own and inherited ones), which their children multiply into
    /// their own URNs. Only resources that have some are kept.
    alias_sets: HashMap<Urn, Vec<Urn>>,
    /// The plan being recorded (`preview --save-plan`).
    recording: Option<super::saved::SavedPlan>,
}

impl Planner {
    /// A planner over the prior resource list.
    pub fn new(opts: PlanOptions, olds: Vec<StateRef>) -> Self {
        let mut live = HashMap::with_capacity(olds.len());
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
            claimed: HashMap::new(),
            handled,
            replaced: HashSet::new(),
            dbr_dependents: HashMap::new(),
            registered: HashSet::new(),
            default_providers: HashMap::new(),
            provider_inputs: HashMap::new(),
            replaced_providers: HashSet::new(),
            root: None,
            id_seq: 0,
            targeted: HashSet::new(),
            excluded: HashSet::new(),
            skipped: HashSet::new(),
            alias_claims: HashSet::new(),
            matched: HashMap::new(),
            alias_sets: HashMap::new(),
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
    pub fn take_saved_plan(&mut self) -> Option<super::saved::SavedPlan> {
        self.recording.take()
    }

    fn applied_plan(&self) -> Option<&super::saved::SavedPlan> {
        self.opts
            .update
            .plan
            .as_deref()
            .filter(|_| self.opts.update.apply_plan)
    }

    /// The stack's name.
    pub fn stack(&self) -> &str {
        &self.opts.stack
    }

    /// The project's name.
    pub fn project(&self) -> &str {
        &self.opts.project
    }

    /// The operator's controls.
    pub fn options(&self) -> &UpdateOptions {
        &self.opts.update
    }

    /// Whether a resource is inside the operation's scope (`--target`,
    /// `--exclude`); providers and the stack resource always are. Records
    /// the answer for its dependents.
    fn in_scope<'a>(
        &mut self,
        urn: &Urn,
        ty: &TypeToken,
        refs: impl Iterator<Item = &'a Urn>,
    ) -> bool {
        if ty.is_provider() || ty.is_stack() {
            return true;
        }
        let o = &self.opts.update;
        if !o.targets.is_empty() {
            let refs: Vec<&Urn> = refs.collect();
            let hit = o.targets.contains(urn)
                || (o.target_dependents && refs.iter().any(|d| self.targeted.contains(*d)));
            if hit {
                self.targeted.insert(urn.clone());
            }
            return hit;
        }
        if !o.excludes.is_empty() {
            let refs: Vec<&Urn> = refs.collect();
            let out = o.excludes.contains(urn)
                || (o.exclude_dependents && refs.iter().any(|d| self.excluded.contains(*d)));
            if out {
                self.excluded.insert(urn.clone());
            }
            return !out;
        }
        true
    }

    /// The prior states.
    pub fn olds(&self) -> &[StateRef] {
        &self.olds
    }

    /// The live prior state of `urn` (as migrations left it), if any.
    pub fn prior_state(&self, urn: &Urn) -> Option<State> {
        self.live.get(urn).map(|&i| lock(&self.olds[i]).clone())
    }

    /// The stack resource's URN, once registered.
    pub fn root(&self) -> Option<&Urn> {
        self.root.as_ref()
    }

    /// Derives a URN for a resource with this parent.
    ///
    /// # Errors
    /// [`PlanError::BadUrn`] when the parts do not make a URN.
    pub fn urn_for(&self, ty: &TypeToken, name: &str, parent: Option<&Urn>) -> Result<Urn> {
        Urn::derive(&self.opts.stack, &self.opts.project, parent, ty, name).map_err(|source| {
            PlanError::BadUrn {
                name: name.into(),
                ty: ty.to_string(),
                source,
            }
        })
    }

    fn alias_urn(&self, goal: &Goal, parent: Option<&Urn>, alias: &Alias) -> Result<Urn> {
        match alias {
            Alias::Urn(u) => Ok(u.clone()),
            Alias::Spec(spec) => {
                let name = spec.name.as_deref().unwrap_or(&goal.name);
                let ty = spec.ty.as_ref().unwrap_or(&goal.ty);
                let parent = match &spec.parent {
                    None => parent,
                    Some(AliasParent::NoParent) => None,
                    // A parent found through an alias had its prior URN
                    // then, and so had this resource's parent.
                    Some(AliasParent::Urn(u)) => Some(self.matched.get(u).unwrap_or(u)),
                };
                Urn::new(
                    spec.stack.as_deref().unwrap_or(&self.opts.stack),
                    spec.project.as_deref().unwrap_or(&self.opts.project),
                    parent.map(Urn::qualified_type),
                    ty,
                    name,
                )
                .map_err(|source| PlanError::BadUrn {
                    name: name.into(),
                    ty: ty.to_string(),
                    source,
                })
            }
        }
    }

    fn check_registered(&self, urn: &Urn, target: &Urn, what: &'static str) -> Result<()> {
        if self.registered.contains(target) {
            Ok(())
        } else {
            Err(PlanError::UnknownReference {
                urn: urn.clone(),
                target: target.clone(),
                what,
            })
        }
    }

    /// The URN a child would have had under its parent's prior URN
    /// `parent_alias`: the same type and name, except that a name starting
    /// with the parent's (new) name starts with the prior one instead
    /// (`newapp-fn` under `newapp`, once `app`, was `app-fn`). `None` when
    /// the parts make no URN.
    fn inherited_alias(
        &self,
        ty: &TypeToken,
        name: &str,
        parent_name: &str,
        parent_alias: &Urn,
    ) -> Option<Urn> {
        let name = match name.strip_prefix(parent_name) {
            Some(rest) if !parent_name.is_empty() => format!("{}{rest}", parent_alias.name()),
            _ => name.to_owned(),
        };
        Urn::new(
            &self.opts.stack,
            &self.opts.project,
            Some(parent_alias.qualified_type()),
            ty,
            &name,
        )
        .ok()
    }

    /// Every URN a registration may have had before, in the order they
    /// are tried, each marked whether the program named it (`true`) or it
    /// is inherited from the parent (`false`). Pulumi's `generateAliases`:
    /// the goal's own aliases, then, for each URN its parent may have had
    /// (the one it was found under first), the goal's URN under it and
    /// each own alias under it.
    fn generate_aliases(&self, goal: &Goal, parent: Option<&Urn>) -> Result<Vec<(Urn, bool)>> {
        let mut out: Vec<(Urn, bool)> = Vec::with_capacity(goal.options.aliases.len());
        for a in &goal.options.aliases {
            let u = self.alias_urn(goal, parent, a)?;
            if !out.iter().any(|(o, _)| *o == u) {
                out.push((u, true));
            }
        }
        let Some(parent) = parent else {
            return Ok(out);
        };
        let Some(parent_aliases) = self.alias_sets.get(parent) else {
            return Ok(out);
        };
        let own: Vec<(TypeToken, String)> = out
            .iter()
            .filter_map(|(u, _)| {
                TypeToken::parse(u.type_str())
                    .ok()
                    .map(|t| (t, u.name().to_owned()))
            })
            .collect();
        let mut seen: HashSet<Urn> = out.iter().map(|(u, _)| u.clone()).collect();
        let parent_name = parent.name();
        for pa in parent_aliases {
            let inherited =
                std::iter::once(self.inherited_alias(&goal.ty, &goal.name, parent_name, pa)).chain(
                    own.iter()
                        .map(|(ty, name)| self.inherited_alias(ty, name, parent_name, pa)),
                );
            for u in inherited.flatten() {
                if seen.insert(u.clone()) {
                    out.push((u, false));
                }
            }
        }
        Ok(out)
    }

    /// Finds the prior state for a registration: its own URN first, then
    /// each alias in order. An alias the program named that another
    /// registration already claimed is an error; an inherited one is
    /// passed over (it was never this resource's).
    fn find_old(&mut self, urn: &Urn, aliases: &[(Urn, bool)]) -> Result<Option<usize>> {
        if let Some(&i) = self.live.get(urn) {
            if !self.claimed.contains_key(&i) {
                return Ok(Some(i));
            }
        }
        for (alias_urn, explicit) in aliases {
            if let Some(&i) = self.live.get(alias_urn) {
                if let Some(by) = self.claimed.get(&i) {
                    if !explicit {
                        continue;
                    }
                    return Err(PlanError::AliasAlreadyClaimed {
                        urn: urn.clone(),
                        alias: alias_urn.clone(),
                        claimed_by: by.clone(),
                    });
                }
                self.alias_claims.insert(alias_urn.clone());
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// The parent a goal registers under: its own, or the stack resource
    /// (providers without an explicit parent stay top-level, as Pulumi's
    /// default providers are; their URN is the same either way).
    pub fn parent_of(&self, goal: &Goal) -> Option<Urn> {
        match (
            &goal.options.parent,
            goal.ty.is_stack() || goal.ty.is_provider(),
        ) {
            (Some(p), _) => Some(p.clone()),
            (None, false) => self.root.clone(),
            (None, true) => None,
        }
    }

    /// The URNs a goal may have had before, in order: its own aliases,
    /// then those inherited from its parent's.
    ///
    /// # Errors
    /// [`PlanError::BadUrn`] when an alias does not make a URN.
    pub fn alias_urns(&self, goal: &Goal) -> Result<Vec<Urn>> {
        let parent = self.parent_of(goal);
        Ok(self
            .generate_aliases(goal, parent.as_ref())?
            .into_iter()
            .map(|(u, _)| u)
            .collect())
    }

    /// URNs registered so far in this operation.
    pub fn registered(&self) -> &HashSet<Urn> {
        &self.registered
    }

    /// Prior URNs claimed through an alias so far in this operation.
    pub fn alias_claims(&self) -> &HashSet<Urn> {
        &self.alias_claims
    }

    /// Adopts a new prior list after a committed migration: retained states
    /// keep their handles (and so their claims and handled marks), result
    /// states are new and unclaimed, removed states are gone.
    pub fn resync(&mut self, olds: Vec<StateRef>) {
        let ptr = |s: &StateRef| std::sync::Arc::as_ptr(s) as usize;
        let old_index: HashMap<usize, usize> = self
            .olds
            .iter()
            .enumerate()
            .map(|(i, s)| (ptr(s), i))
            .collect();
        let mut handled = vec![false; olds.len()];
        let mut claimed = HashMap::new();
        let mut replaced = HashSet::new();
        let mut live = HashMap::with_capacity(olds.len());
        for (j, s) in olds.iter().enumerate() {
            if let Some(&i) = old_index.get(&ptr(s)) {
                handled[j] = self.handled[i];
                if let Some(by) = self.claimed.get(&i) {
                    claimed.insert(j, by.clone());
                }
                if self.replaced.contains(&i) {
                    replaced.insert(j);
                }
            }
            let st = lock(s);
            if !st.delete {
                live.insert(st.urn.clone(), j);
            }
        }
        self.olds = olds;
        self.handled = handled;
        self.claimed = claimed;
        self.replaced = replaced;
        self.live = live;
    }

    fn next_provider_id(&mut self, urn: &Urn) -> String {
        if self.opts.preview {
            return UNKNOWN_ID.to_owned();
        }
        self.id_seq += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let h = fnv1a(format!("{urn}#{nanos}#{}", self.id_seq).as_bytes());
        let l = fnv1a(format!("{h}").as_bytes());
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            h >> 32,
            (h >> 16) & 0xffff,
            h & 0xfff,
            l >> 52,
            l & 0xffff_ffff_ffff
        )
    }

    /// Plans the default provider a registration asks for (its package,
    /// plugin version and download URL), returning its reference and, the
    /// first time, its registration, to decide before the resource's.
    fn default_provider(
        &mut self,
        request: &DefaultProviderRequest,
    ) -> Result<(ProviderRef, Option<Prepared>)> {
        let key = request.key();
        if let Some(r) = self.default_providers.get(&key) {
            return Ok((r.clone(), None));
        }
        let name = request.name();
        let ty =
            TypeToken::provider_for(request.package()).map_err(|source| PlanError::BadUrn {
                name: name.clone(),
                ty: format!("pulumi:providers:{}", request.package()),
                source,
            })?;
        let urn = self.urn_for(&ty, &name, None)?;
        if self.registered.contains(&urn) {
            return Err(PlanError::DuplicateUrn { urn });
        }
        let old = self
            .live
            .get(&urn)
            .copied()
            .filter(|i| !self.claimed.contains_key(i));
        let mut new = State::new(urn.clone(), ty, true);
        new.inputs = request.inputs(&self.opts.package_config);
        let mut config_diff = None;
        match old {
            Some(i) => {
                self.claimed.insert(i, urn.clone());
                let o = lock(&self.olds[i]).clone();
                new.id = o.id.clone();
                new.created = o.created.clone();
                new.modified = o.modified.clone();
                new.extra.clone_from(&o.extra);
                if config_of(&o.inputs) != config_of(&new.inputs) {
                    config_diff = Some(self.own_config_diff(&o, &new.inputs)?);
                }
            }
            None => new.id = self.next_provider_id(&urn),
        }
        self.registered.insert(urn.clone());
        self.provider_inputs.insert(urn.clone(), new.inputs.clone());
        let reference = ProviderRef::new(urn.clone(), new.id.clone()).map_err(|source| {
            PlanError::BadProvider {
                urn: urn.clone(),
                source,
            }
        })?;
        self.default_providers.insert(key, reference.clone());
        let prepared = Prepared {
            urn,
            old: old.map(|i| self.olds[i].clone()),
            new,
            provider: None,
            default_provider: None,
            provider_change: ProviderChange::Unchanged,
            config_diff,
            replacement_inputs: None,
            ignore_warnings: Vec::new(),
            replace_paths: Vec::new(),
            default_key: None,
            old_index: old,
            in_scope: true,
            hooks: None,
        };
        Ok((reference, Some(prepared)))
    }

    /// The comparison a provider resource with prior state `old` and new
    /// inputs `inputs` is decided by.
    fn own_config_diff(&self, old: &State, inputs: &PropertyMap) -> Result<ConfigDiff> {
        let id = if old.id.is_empty() {
            UNKNOWN_ID
        } else {
            old.id.as_str()
        };
        let provider =
            ProviderRef::new(old.urn.clone(), id).map_err(|source| PlanError::BadProvider {
                urn: old.urn.clone(),
                source,
            })?;
        Ok(ConfigDiff {
            provider,
            old_inputs: config_of(&old.inputs),
            old_outputs: old.outputs.clone(),
            new_inputs: config_of(inputs),
        })
    }

    /// What the change of a resource's provider reference from `old` to
    /// `new` means (Pulumi's `providerChanged`).
    fn provider_change(&self, old: &str, new: &ProviderRef) -> ProviderChange {
        let Some(old_urn) = provider_urn(old) else {
            return ProviderChange::Replace;
        };
        if old_urn == new.urn().as_str()
            || self
                .matched
                .get(new.urn())
                .is_some_and(|from| from.as_str() == old_urn)
        {
            return ProviderChange::Unchanged;
        }
        let old_state = self.live.get(old_urn).map(|&i| {
            let s = lock(&self.olds[i]);
            (config_of(&s.inputs), s.outputs.clone())
        });
        match (old_state, self.provider_inputs.get(new.urn())) {
            (Some((old_inputs, old_outputs)), Some(inputs)) => ProviderChange::Config(ConfigDiff {
                provider: new.clone(),
                old_inputs,
                old_outputs,
                new_inputs: config_of(inputs),
            }),
            _ => ProviderChange::Replace,
        }
    }

    /// Prepares a registration: derives its URN, finds its prior state,
    /// resolves its provider and builds its desired state.
    ///
    /// # Errors
    /// Duplicate URNs, alias conflicts, unknown parents or dependencies,
    /// malformed provider references.
    pub fn prepare(&mut self, goal: &Goal) -> Result<Prepared> {
        let is_stack = goal.ty.as_str() == STACK_TYPE;
        let parent = self.parent_of(goal);
        let urn = self.urn_for(&goal.ty, &goal.name, parent.as_ref())?;
        if self.registered.contains(&urn) {
            return Err(PlanError::DuplicateUrn { urn });
        }
        if let Some(p) = &parent {
            self.check_registered(&urn, p, "parent")?;
        }
        for d in goal
            .options
            .depends_on
            .iter()
            .chain(goal.options.property_dependencies.values().flatten())
        {
            self.check_registered(&urn, d, "dependency")?;
        }
        if let Some(d) = &goal.options.deleted_with {
            self.check_registered(&urn, d, "deletedWith")?;
        }
        let paths = |option: &'static str, list: &[String]| {
            list.iter()
                .map(|p| {
                    PropertyPath::parse(p).map_err(|source| PlanError::BadPropertyPath {
                        urn: urn.clone(),
                        option,
                        path: p.clone(),
                        source,
                    })
                })
                .collect::<Result<Vec<_>>>()
        };
        let ignore_paths = paths("ignoreChanges", &goal.options.ignore_changes)?;
        let replace_paths = paths("replaceOnChanges", &goal.options.replace_on_changes)?;
        let request = if goal.custom && !goal.ty.is_provider() && goal.options.provider.is_none() {
            Some(
                DefaultProviderRequest::new(
                    goal.ty.package(),
                    goal.options.version.as_deref(),
                    goal.options.plugin_download_url.as_deref(),
                )
                .map_err(|source| PlanError::BadVersion {
                    urn: urn.clone(),
                    source,
                })?,
            )
        } else {
            None
        };
        let aliases = self.generate_aliases(goal, parent.as_ref())?;
        let old = self.find_old(&urn, &aliases)?;

        let mut new = State::new(urn.clone(), goal.ty.clone(), goal.custom);
        new.inputs = goal.inputs.clone();
        new.parent = parent.unwrap_or_default();
        let mut deps = goal.options.depends_on.clone();
        for d in goal.options.property_dependencies.values().flatten() {
            if !deps.contains(d) {
                deps.push(d.clone());
            }
        }
        new.dependencies = deps;
        new.property_dependencies = goal
            .options
            .property_dependencies
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        new.protect = goal.options.protect;
        new.retain_on_delete = goal.options.retain_on_delete;
        new.deleted_with = goal.options.deleted_with.clone().unwrap_or_default();
        new.custom_timeouts = goal.options.custom_timeouts.clone().unwrap_or_default();
        new.ignore_changes = goal.options.ignore_changes.clone();
        new.replace_on_changes = goal.options.replace_on_changes.clone();
        new.additional_secret_outputs = goal.options.additional_secret_outputs.clone();
        if let Some(id) = &goal.options.import {
            new.import_id = id.clone();
        }

        // `ignoreChanges`: the old values go back into the inputs before
        // the provider sees them (Pulumi's `processIgnoreChanges`).
        let mut replacement_inputs = None;
        let mut ignore_warnings = Vec::new();
        if let Some(i) = old.filter(|_| !ignore_paths.is_empty()) {
            let o = lock(&self.olds[i]);
            ignore_warnings = diffs::ignore_changes(&ignore_paths, &o.inputs, &mut new.inputs);
            if new.inputs != goal.inputs {
                replacement_inputs = Some(goal.inputs.clone());
            }
        }

        let mut provider = None;
        let mut default_provider = None;
        let mut default_key = None;
        if goal.custom && !goal.ty.is_provider() {
            // `request` is made exactly when no provider is given.
            let reference = if let Some(request) = &request {
                let (r, planned) = self.default_provider(request)?;
                default_provider = planned.map(Box::new);
                default_key = Some(request.key());
                r
            } else {
                let given = goal.options.provider.as_deref().unwrap_or_default();
                let r = ProviderRef::parse(given).map_err(|source| PlanError::BadProvider {
                    urn: urn.clone(),
                    source,
                })?;
                self.check_registered(&urn, r.urn(), "provider")?;
                r
            };
            new.provider = reference.to_string();
            provider = Some(reference);
        }

        if let Some(plan) = self.applied_plan() {
            // The goal is checked now, before the provider is asked anything.
            let planned = plan
                .resources
                .get(&urn)
                .map(|r| r.steps.clone())
                .unwrap_or_default();
            if let Some(difference) = plan.deviation(&new, &planned) {
                return Err(PlanError::PlanDeviation { urn, difference });
            }
        }
        let mut refs: Vec<Urn> = new.references().map(|(_, u)| u.clone()).collect();
        // A resource of a targeted provider is its dependent too.
        refs.extend(provider.as_ref().map(|r| r.urn().clone()));
        let in_scope = self.in_scope(&urn, &goal.ty, refs.iter());
        if in_scope {
            if let Some(d) = refs.iter().find(|d| self.skipped.contains(*d)) {
                return Err(PlanError::UntargetedDependency {
                    urn,
                    dependency: d.clone(),
                });
            }
        }
        let mut provider_change = ProviderChange::Unchanged;
        let mut config_diff = None;
        if let Some(i) = old {
            if let Some(reference) = &provider {
                let old_provider = lock(&self.olds[i]).provider.clone();
                provider_change = self.provider_change(&old_provider, reference);
            } else if goal.ty.is_provider() {
                let o = lock(&self.olds[i]).clone();
                if config_of(&o.inputs) != config_of(&new.inputs) {
                    config_diff = Some(self.own_config_diff(&o, &new.inputs)?);
                }
            }
        }
        if goal.ty.is_provider() {
            self.provider_inputs.insert(urn.clone(), new.inputs.clone());
        }
        if let Some(i) = old {
            self.claimed.insert(i, urn.clone());
            let o = lock(&self.olds[i]);
            if o.urn != urn {
                // Found through an alias: record it, so snapshots written
                // before the prior state's dependents re-register can point
                // their references at the new URN (as Pulumi does).
                new.aliases = vec![o.urn.clone()];
                self.matched.insert(urn.clone(), o.urn.clone());
            }
            new.created = o.created.clone();
            new.modified = o.modified.clone();
            new.import_id = o.import_id.clone();
            // What the program does not say is kept from the prior state.
            new.source_position.clone_from(&o.source_position);
            new.stack_trace.clone_from(&o.stack_trace);
            new.hide_diff.clone_from(&o.hide_diff);
            new.replace_with.clone_from(&o.replace_with);
            new.replacement_trigger.clone_from(&o.replacement_trigger);
            new.refresh_before_update = o.refresh_before_update;
            new.view_of.clone_from(&o.view_of);
            new.resource_hooks.clone_from(&o.resource_hooks);
            new.extension_ref.clone_from(&o.extension_ref);
            new.snippet_id.clone_from(&o.snippet_id);
            new.schema_version = o.schema_version;
            new.extra.clone_from(&o.extra);
        }
        // Children multiply these into their own URNs: the prior URN this
        // resource was found under first, then every other it may have had.
        let found_under = self.matched.get(&urn).cloned();
        if found_under.is_some() || !aliases.is_empty() {
            let mut set: Vec<Urn> = Vec::with_capacity(aliases.len() + 1);
            set.extend(found_under.clone());
            // `aliases` has no duplicates; only the prior URN may repeat.
            set.extend(
                aliases
                    .into_iter()
                    .map(|(u, _)| u)
                    .filter(|u| Some(u) != found_under.as_ref()),
            );
            self.alias_sets.insert(urn.clone(), set);
        }
        if is_stack {
            self.root = Some(urn.clone());
        }
        self.registered.insert(urn.clone());
        Ok(Prepared {
            urn,
            old: old.map(|i| self.olds[i].clone()),
            new,
            provider,
            default_provider,
            provider_change,
            config_diff,
            replacement_inputs,
            ignore_warnings,
            replace_paths,
            default_key,
            old_index: old,
            in_scope,
            hooks: (!goal.options.hooks.is_empty()).then(|| goal.options.hooks.clone()),
        })
    }

    /// Decides the steps of a prepared registration given the provider's
    /// diff (`None` for components and creates; for a provider resource,
    /// its `diff_config` answer). A delete-before-replace replaces every
    /// prior dependent that may need it (as [`DependentWalk::assume_replace`]);
    /// [`Planner::decide_with`] takes the walk's real answer.
    ///
    /// # Errors
    /// [`PlanError::ProtectedReplace`] when a protected resource (or a
    /// protected dependent of a delete-before-replace) would be replaced.
    pub fn decide(
        &mut self,
        p: Prepared,
        diff: Option<&DiffResponse>,
        dbr_option: Option<bool>,
    ) -> Result<Chain> {
        self.decide_with(p, diff, dbr_option, None)
    }

    /// As [`Planner::decide`], with the dependents a delete-before-replace
    /// must replace, from the walk [`Planner::dependents_walk`] gave.
    ///
    /// # Errors
    /// As [`Planner::decide`].
    pub fn decide_with(
        &mut self,
        p: Prepared,
        diff: Option<&DiffResponse>,
        dbr_option: Option<bool>,
        dependents: Option<DependentReplacements>,
    ) -> Result<Chain> {
        let (urn, hooks) = (p.urn.clone(), p.hooks.clone());
        // The verdict as the engine judged it travels with the steps it
        // decided, for their events (`--diff`, `--json`).
        let verdict = p
            .old
            .as_ref()
            .and_then(|o| Self::with_replace_on_changes(&p, &lock(o), diff))
            .map(std::sync::Arc::new);
        let mut chain = self.decide_steps(p, diff, dbr_option, dependents)?;
        if let Some(d) = verdict {
            for step in chain.steps.iter_mut().filter(|s| {
                s.urn == urn && matches!(s.kind, StepKind::Update | StepKind::CreateReplacement)
            }) {
                step.provider_diff = Some(d.clone());
            }
        }
        let kinds: Vec<StepKind> = chain
            .steps
            .iter()
            .filter(|s| s.urn == urn)
            .map(|s| s.kind)
            .collect();
        let goal = chain
            .steps
            .iter()
            .rev()
            .find(|s| s.urn == urn)
            .and_then(|s| s.new.as_ref());
        if let (Some(plan), Some(goal)) = (self.applied_plan(), goal) {
            if let Some(difference) = plan.deviation(goal, &kinds) {
                return Err(PlanError::PlanDeviation { urn, difference });
            }
        }
        if let (Some(rec), Some(goal)) = (self.recording.as_mut(), goal) {
            rec.record(goal, kinds);
        }
        if hooks.is_some() {
            for step in chain.steps.iter_mut().filter(|s| s.urn == urn) {
                step.hooks.clone_from(&hooks);
            }
        }
        Ok(chain)
    }

    /// The provider's diff with the engine's `replaceOnChanges` applied
    /// (Pulumi's `applyReplaceOnChanges`: the keys it matches are replace
    /// keys).
    fn with_replace_on_changes(
        p: &Prepared,
        old: &State,
        diff: Option<&DiffResponse>,
    ) -> Option<DiffResponse> {
        diff.map(|d| {
            if p.new.custom {
                diffs::apply_replace_on_changes(
                    d.clone(),
                    &p.replace_paths,
                    &old.inputs,
                    &p.new.inputs,
                )
            } else {
                d.clone()
            }
        })
    }

    /// The provider's diff with the engine's `replaceOnChanges` applied,
    /// and what it comes to: same, update or replace (a provider reference
    /// change, taint and `--replace` force a replace).
    fn judge(
        &self,
        p: &Prepared,
        old: &State,
        diff: Option<&DiffResponse>,
    ) -> (DiffKind, Option<DiffResponse>) {
        let new = &p.new;
        let diff = Self::with_replace_on_changes(p, old, diff);
        let provider_replaced = p.provider.as_ref().is_some_and(|r| {
            self.replaced_providers.contains(r.urn())
                && provider_urn(&old.provider) == Some(r.urn().as_str())
        });
        let kind = if !new.custom {
            if new.inputs == old.inputs {
                DiffKind::Same
            } else {
                DiffKind::Update
            }
        } else if new.ty.is_provider() {
            match &diff {
                Some(d) => d.kind,
                None if config_of(&new.inputs) == config_of(&old.inputs) => DiffKind::Same,
                None => DiffKind::Update,
            }
        } else if p.provider_change == ProviderChange::Replace
            || provider_replaced
            || old.taint
            || self.opts.update.replaces.contains(&p.urn)
        {
            DiffKind::Replace
        } else {
            diff.as_ref().map_or(DiffKind::Same, |d| d.kind)
        };
        (kind, diff)
    }

    /// When deciding `p` with this diff will replace it delete-before-
    /// replace: the walk over its prior dependents that finds which must be
    /// replaced first (the actor drives it, asking their providers).
    pub fn dependents_walk(
        &self,
        p: &Prepared,
        diff: Option<&DiffResponse>,
        dbr_option: Option<bool>,
    ) -> Option<DependentWalk> {
        let i = p.old_index.filter(|_| p.in_scope)?;
        let old = lock(&self.olds[i]).clone();
        if old.pending_replacement || self.dbr_dependents.contains_key(&i) || old.protect {
            return None;
        }
        let (kind, diff) = self.judge(p, &old, diff);
        let dbr = dbr_option.unwrap_or_else(|| diff.is_some_and(|d| d.delete_before_replace));
        (kind == DiffKind::Replace && dbr)
            .then(|| DependentWalk::new(old.urn.clone(), self.prior_dependents(i)))
    }

    fn decide_steps(
        &mut self,
        p: Prepared,
        diff: Option<&DiffResponse>,
        dbr_option: Option<bool>,
        dependents: Option<DependentReplacements>,
    ) -> Result<Chain> {
        let waits_for = p.waits_for();
        let (judged, judged_diff) = match &p.old {
            Some(o) => {
                let (k, d) = self.judge(&p, &lock(o), diff);
                (Some(k), d)
            }
            None => (None, None),
        };
        let Prepared {
            urn,
            old,
            mut new,
            old_index,
            in_scope,
            replacement_inputs,
            default_key,
            ..
        } = p;
        if let Some(key) = &default_key {
            // The default provider's reference as decided (a replaced one
            // has a new ID).
            if let Some(r) = self.default_providers.get(key) {
                new.provider = r.to_string();
            }
        }
        if !in_scope {
            // Outside the targets: keep the prior state (same step), or skip
            // the create of a resource that has none.
            let step = match old {
                Some(old_ref) => {
                    // The prior state is kept, under the registration's
                    // URN (a rename through an alias is recorded, so
                    // references to the old URN follow).
                    let mut kept = lock(&old_ref).clone();
                    if kept.urn != urn {
                        kept.aliases = vec![kept.urn.clone()];
                        kept.urn = urn.clone();
                    }
                    self.keep_references(&mut kept, &new)?;
                    if let Some(i) = old_index {
                        self.handled[i] = true;
                    }
                    Step::new(StepKind::Same, urn, Some(old_ref), Some(kept))
                }
                None => {
                    self.skipped.insert(urn.clone());
                    let mut s = Step::new(StepKind::Same, urn, None, Some(new));
                    s.skipped = true;
                    s
                }
            };
            return Ok(Chain {
                steps: vec![step],
                waits_for,
            });
        }
        let Some(old_ref) = old else {
            if new.ty.is_provider() && new.id.is_empty() {
                new.id = self.next_provider_id(&urn);
            }
            let kind = if new.custom && !new.import_id.is_empty() {
                new.id = new.import_id.clone();
                StepKind::Import
            } else {
                StepKind::Create
            };
            return Ok(Chain {
                steps: vec![Step::new(kind, urn, None, Some(new))],
                waits_for,
            });
        };
        if let Some(i) = old_index {
            self.handled[i] = true;
        }
        let old = lock(&old_ref).clone();
        let deleting = old_index.and_then(|i| self.dbr_dependents.get(&i)).cloned();
        if old.pending_replacement || deleting.is_some() {
            // Deleted by a delete-before-replace (earlier, or by a chain of
            // this operation, which it waits for): create it anew, from the
            // program's inputs.
            let mut waits_for = waits_for;
            waits_for.extend(deleting);
            if let Some(inputs) = replacement_inputs {
                new.inputs = inputs;
            }
            if new.ty.is_provider() {
                new.id = self.next_provider_id(&urn);
            }
            return Ok(Chain {
                steps: vec![Step::new(
                    StepKind::CreateReplacement,
                    urn,
                    Some(old_ref),
                    Some(new),
                )],
                waits_for,
            });
        }
        let kind = judged.unwrap_or(DiffKind::Same);
        new.id = old.id.clone();
        match kind {
            DiffKind::Same | DiffKind::Update => {
                new.outputs = old.outputs.clone();
                let step = if kind == DiffKind::Same {
                    StepKind::Same
                } else {
                    StepKind::Update
                };
                Ok(Chain {
                    steps: vec![Step::new(step, urn, Some(old_ref), Some(new))],
                    waits_for,
                })
            }
            DiffKind::Replace => {
                if old.protect {
                    return Err(PlanError::ProtectedReplace { urn });
                }
                // A replacement is created from the program's inputs
                // (`ignoreChanges` does not reach a new object), as Pulumi
                // does.
                if let Some(inputs) = replacement_inputs {
                    new.inputs = inputs;
                }
                new.id = String::new();
                if new.ty.is_provider() {
                    // A new provider resource: a new ID, which the
                    // resources it manages see as a provider change.
                    new.id = self.next_provider_id(&urn);
                    self.replaced_providers.insert(urn.clone());
                    let reference =
                        ProviderRef::new(urn.clone(), new.id.clone()).map_err(|source| {
                            PlanError::BadProvider {
                                urn: urn.clone(),
                                source,
                            }
                        })?;
                    for r in self.default_providers.values_mut() {
                        if r.urn() == &urn {
                            *r = reference.clone();
                        }
                    }
                }
                let dbr = dbr_option.unwrap_or_else(|| {
                    judged_diff
                        .as_ref()
                        .is_some_and(|d| d.delete_before_replace)
                });
                if !dbr {
                    if let Some(i) = old_index {
                        self.replaced.insert(i);
                    }
                    return Ok(Chain {
                        steps: vec![Step::new(
                            StepKind::CreateReplacement,
                            urn,
                            Some(old_ref),
                            Some(new),
                        )],
                        waits_for,
                    });
                }
                let dependents = match (dependents, old_index) {
                    (Some(d), _) => d,
                    (None, Some(i)) => {
                        DependentWalk::new(old.urn.clone(), self.prior_dependents(i))
                            .assume_replace()
                    }
                    (None, None) => DependentReplacements::default(),
                };
                let mut steps = Vec::new();
                let scope = self.delete_scope();
                for j in self.deletion_order(&dependents) {
                    let d = lock(&self.olds[j]).clone();
                    if d.protect {
                        return Err(PlanError::ProtectedReplace { urn: d.urn });
                    }
                    if !scope.contains(&d.urn) {
                        return Err(PlanError::DependentReplaceOutOfScope {
                            urn,
                            dependent: d.urn,
                        });
                    }
                    // The dependent stays in state, pending its replacement:
                    // its registration will create it anew.
                    let mut step = Step::new(
                        StepKind::DeleteReplaced,
                        d.urn.clone(),
                        Some(self.olds[j].clone()),
                        None,
                    );
                    step.keep_pending = true;
                    step.skip_provider =
                        d.retain_on_delete || d.external || !d.custom || d.ty.is_provider();
                    steps.push(step);
                    self.dbr_dependents.insert(j, urn.clone());
                }
                let mut del = Step::new(
                    StepKind::DeleteReplaced,
                    urn.clone(),
                    Some(old_ref.clone()),
                    None,
                );
                del.keep_pending = true;
                del.skip_provider = old.retain_on_delete || old.ty.is_provider();
                steps.push(del);
                steps.push(Step::new(
                    StepKind::CreateReplacement,
                    urn,
                    Some(old_ref),
                    Some(new),
                ));
                Ok(Chain { steps, waits_for })
            }
        }
    }

    /// A prior state kept outside the targets is written now, so it takes
    /// the registration's references (all registered before it), not its
    /// prior ones, which may name resources the program no longer has or
    /// registers later: the snapshot stays ordered and nothing it keeps
    /// refers to a resource deleted by this operation. Its provider stays
    /// (the object belongs to it) unless the registration names the same
    /// provider; a provider the program no longer registers is refused.
    fn keep_references(&self, kept: &mut State, new: &State) -> Result<()> {
        // A registration naming a resource whose create was skipped (outside
        // the targets, no prior state) cannot lend its references: that
        // resource is in no state. The prior references stay then, as
        // Pulumi's same step keeps them; what they name is kept too (a
        // targeted operation refuses deletes that would dangle).
        if !new.references().any(|(_, u)| self.skipped.contains(u)) {
            kept.parent.clone_from(&new.parent);
            kept.dependencies.clone_from(&new.dependencies);
            kept.property_dependencies
                .clone_from(&new.property_dependencies);
            kept.deleted_with.clone_from(&new.deleted_with);
            kept.replace_with.retain(|u| self.registered.contains(u));
        }
        match (provider_urn(&kept.provider), provider_urn(&new.provider)) {
            (Some(old), Some(now)) if old == now => kept.provider.clone_from(&new.provider),
            (Some(old), _) if !self.registered.iter().any(|u| u.as_str() == old) => {
                return Err(PlanError::DependentsLeftBehind {
                    urn: Urn::parse(old).map_err(|source| PlanError::BadProvider {
                        urn: kept.urn.clone(),
                        source,
                    })?,
                    dependents: vec![kept.urn.clone()],
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// The prior states that depend on the prior state at `root`,
    /// transitively, through dependencies, property dependencies,
    /// `deletedWith`, `replaceWith` and the provider reference (not the
    /// parent), in prior order (which is dependency order). States already
    /// handled by this operation, and old halves awaiting deletion, are
    /// neither dependents nor links (Pulumi's `DependingOn` over the prior
    /// graph, ignoring what registered since).
    fn prior_dependents(&self, root: usize) -> Vec<(usize, State)> {
        let mut reached: HashSet<Urn> = HashSet::from([lock(&self.olds[root]).urn.clone()]);
        let mut found = vec![false; self.olds.len()];
        // Prior order is dependency order, so one pass finds everything;
        // passes repeat until nothing is added, whatever the order.
        let mut grew = true;
        while grew {
            grew = false;
            for (j, s) in self.olds.iter().enumerate() {
                if j == root || found[j] || self.handled[j] {
                    continue;
                }
                let s = lock(s);
                if s.delete {
                    continue;
                }
                let depends = s.dependencies.iter().any(|d| reached.contains(d))
                    || s.property_dependencies
                        .values()
                        .flatten()
                        .flatten()
                        .any(|d| reached.contains(d))
                    || reached.contains(&s.deleted_with)
                    || s.replace_with.iter().any(|d| reached.contains(d))
                    || provider_urn(&s.provider).is_some_and(|p| reached.contains(p));
                if depends {
                    reached.insert(s.urn.clone());
                    found[j] = true;
                    grew = true;
                }
            }
        }
        found
            .iter()
            .enumerate()
            .filter(|(_, f)| **f)
            .map(|(j, _)| (j, lock(&self.olds[j]).clone()))
            .collect()
    }

    /// The dependents a delete-before-replace deletes, not handled since
    /// the walk, in deletion order (dependents first).
    fn deletion_order(&self, dependents: &DependentReplacements) -> Vec<usize> {
        let set: Vec<usize> = dependents
            .replaced
            .iter()
            .filter(|(j, urn)| {
                *j < self.olds.len() && !self.handled[*j] && lock(&self.olds[*j]).urn == *urn
            })
            .map(|(j, _)| *j)
            .collect();
        let states: Vec<State> = set.iter().map(|&j| lock(&self.olds[j]).clone()).collect();
        let refs: Vec<&State> = states.iter().collect();
        graph::delete_antichains(&refs)
            .into_iter()
            .flatten()
            .map(|k| set[k])
            .collect()
    }

    /// Plans a `ReadResource`: the external object is read, never created
    /// or deleted. Returns the default provider's registration when it is
    /// planned now (it must be decided and submitted first), and the read's
    /// chain.
    ///
    /// # Errors
    /// As [`Planner::prepare`].
    pub fn read(&mut self, goal: &ReadGoal) -> Result<(Option<Prepared>, Chain)> {
        let as_goal = Goal {
            ty: goal.ty.clone(),
            name: goal.name.clone(),
            custom: true,
            inputs: goal.inputs.clone(),
            options: crate::source::goal::ResourceOptions {
                parent: goal.parent.clone(),
                depends_on: goal.depends_on.clone(),
                provider: goal.provider.clone(),
                version: goal.version.clone(),
                plugin_download_url: goal.plugin_download_url.clone(),
                ..Default::default()
            },
        };
        let p = self.prepare(&as_goal)?;
        let waits_for = p.waits_for();
        if let Some(i) = p.old_index {
            self.handled[i] = true;
        }
        let mut new = p.new;
        new.id = goal.id.clone();
        new.external = true;
        new.additional_secret_outputs
            .clone_from(&goal.additional_secret_outputs);
        let steps = vec![Step::new(StepKind::Read, p.urn, p.old, Some(new))];
        Ok((p.default_provider.map(|b| *b), Chain { steps, waits_for }))
    }

    /// The deletes at the end of the program: prior resources no
    /// registration claimed, and the old halves of create-before-delete
    /// replaces, as antichains in reverse dependency order.
    ///
    /// # Errors
    /// [`PlanError::ProtectedDelete`] naming every protected resource that
    /// would be deleted (nothing is deleted then).
    pub fn deletes(&mut self) -> Result<Vec<Vec<Step>>> {
        let mut picked: Vec<(usize, StepKind)> = Vec::new();
        let scope = self.delete_scope();
        for (i, s) in self.olds.iter().enumerate() {
            let s = lock(s);
            if s.delete || self.replaced.contains(&i) {
                picked.push((i, StepKind::DeleteReplaced));
            } else if !self.handled[i] && scope.contains(&s.urn) {
                let kind = if s.pending_replacement {
                    StepKind::RemovePendingReplace
                } else {
                    StepKind::Delete
                };
                picked.push((i, kind));
            }
        }
        let states: Vec<State> = picked
            .iter()
            .map(|(i, _)| lock(&self.olds[*i]).clone())
            .collect();
        let protected: Vec<Urn> = states
            .iter()
            .zip(&picked)
            .filter(|(s, (_, k))| s.protect && *k == StepKind::Delete)
            .map(|(s, _)| s.urn.clone())
            .collect();
        if !protected.is_empty() {
            return Err(PlanError::ProtectedDelete { urns: protected });
        }
        self.check_left_behind(&picked)?;
        for (s, (_, kind)) in states.iter().zip(&picked) {
            if *kind != StepKind::Delete {
                continue;
            }
            if let Some(plan) = self.applied_plan() {
                if !plan.deletes.contains(&s.urn) {
                    return Err(PlanError::PlanDeviation {
                        urn: s.urn.clone(),
                        difference: "the program no longer has it, but the plan does not delete it"
                            .into(),
                    });
                }
            }
            if let Some(rec) = self.recording.as_mut() {
                rec.deletes.insert(s.urn.clone());
            }
        }
        let deleted: HashSet<&Urn> = states.iter().map(|s| &s.urn).collect();
        let refs: Vec<&State> = states.iter().collect();
        let groups = graph::delete_antichains(&refs);
        Ok(groups
            .into_iter()
            .map(|g| {
                g.into_iter()
                    .map(|k| {
                        let (i, kind) = picked[k];
                        let s = &states[k];
                        let mut step =
                            Step::new(kind, s.urn.clone(), Some(self.olds[i].clone()), None);
                        step.skip_provider = kind == StepKind::RemovePendingReplace
                            || s.retain_on_delete
                            || s.external
                            || !s.custom
                            || s.ty.is_provider()
                            || (!s.deleted_with.is_empty() && deleted.contains(&s.deleted_with));
                        step
                    })
                    .collect()
            })
            .collect())
    }

    /// Which prior states the operation may delete (`--target`,
    /// `--exclude`). `--target-dependents` and `--exclude-dependents` close
    /// the set transitively over every reference a state has: parent,
    /// dependencies, property dependencies, `deletedWith`, `replaceWith`
    /// and its provider.
    fn delete_scope(&self) -> DeleteScope {
        let o = &self.opts.update;
        let close = |mut set: HashSet<Urn>, transitive: bool| {
            let mut grew = transitive;
            while grew {
                let before = set.len();
                for s in &self.olds {
                    let s = lock(s);
                    if !set.contains(&s.urn) && graph::edges(&s).any(|d| set.contains(&d)) {
                        set.insert(s.urn.clone());
                    }
                }
                grew = set.len() > before;
            }
            set
        };
        if !o.targets.is_empty() {
            let seed = o.targets.iter().chain(&self.targeted).cloned().collect();
            return DeleteScope::Only(close(seed, o.target_dependents));
        }
        if !o.excludes.is_empty() {
            let seed = o.excludes.iter().chain(&self.excluded).cloned().collect();
            return DeleteScope::AllBut(close(seed, o.exclude_dependents));
        }
        DeleteScope::All
    }

    /// Refuses deletes that would leave a dangling reference: a state the
    /// operation keeps as it was (outside `--target`, or excluded) that
    /// refers to a resource deleted now. Checked before any delete runs, so
    /// the stack always stays loadable.
    fn check_left_behind(&self, picked: &[(usize, StepKind)]) -> Result<()> {
        let gone: HashSet<Urn> = picked
            .iter()
            .filter(|(_, k)| matches!(k, StepKind::Delete | StepKind::RemovePendingReplace))
            .map(|(i, _)| lock(&self.olds[*i]).urn.clone())
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        let picked: HashSet<usize> = picked.iter().map(|(i, _)| *i).collect();
        // Registrations kept outside the targets refer only to registered
        // resources (`keep_references`): the unclaimed prior states the
        // operation leaves alone are what may still refer to a delete.
        let kept = (0..self.olds.len()).filter(|i| !self.handled[*i] && !picked.contains(i));
        let mut left: Vec<(Urn, Vec<Urn>)> = Vec::new();
        for i in kept {
            let s = lock(&self.olds[i]);
            if s.delete {
                continue;
            }
            for d in graph::edges(&s).filter(|d| gone.contains(d)) {
                match left.iter_mut().find(|(u, _)| *u == d) {
                    Some((_, deps)) if deps.contains(&s.urn) => {}
                    Some((_, deps)) => deps.push(s.urn.clone()),
                    None => left.push((d, vec![s.urn.clone()])),
                }
            }
        }
        match left.into_iter().next() {
            Some((urn, dependents)) => Err(PlanError::DependentsLeftBehind { urn, dependents }),
            None => Ok(()),
        }
    }

    /// Refresh steps: one per prior custom resource (not providers).
    pub fn refreshes(&mut self) -> Vec<Step> {
        self.olds
            .iter()
            .filter_map(|s| {
                let st = lock(s);
                (st.custom && !st.ty.is_provider() && !st.pending_replacement)
                    .then(|| Step::new(StepKind::Refresh, st.urn.clone(), Some(s.clone()), None))
            })
            .collect()
    }
}

/// The prior states an operation may delete.
#[derive(Debug)]
enum DeleteScope {
    /// Every one (no filter).
    All,
    /// Only these (`--target`).
    Only(HashSet<Urn>),
    /// All but these (`--exclude`).
    AllBut(HashSet<Urn>),
}

impl DeleteScope {
    fn contains(&self, urn: &Urn) -> bool {
        match self {
            Self::All => true,
            Self::Only(set) => set.contains(urn),
            Self::AllBut(set) => !set.contains(urn),
        }
    }
}

/// The URN part of a provider reference (`None` when there is none).
fn provider_urn(reference: &str) -> Option<&str> {
    if reference.is_empty() {
        return None;
    }
    Some(reference.rsplit_once("::").map_or(reference, |(u, _)| u))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
#[path = "generator_tests.rs"]
mod tests;
