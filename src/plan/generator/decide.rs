//! Deciding a registration: [`Planner::prepare`] (its desired state, prior
//! state and provider), then [`Planner::decide`] (same, create, update or
//! replace, with the provider's diff and `replaceOnChanges`), the
//! delete-before-replace dependents, targets' kept states, and reads.

use std::collections::HashSet;

use crate::model::urn::STACK_TYPE;
use crate::model::{PropertyPath, ProviderRef, SharedStr, State, Urn};
use crate::provider::{DiffKind, DiffResponse};
use crate::source::goal::{Goal, ReadGoal};

use super::{provider_urn, PlanError, Planner, Prepared, ProviderChange, Result};
use crate::plan::dependents::{DependentReplacements, DependentWalk};
use crate::plan::providers::{config_of, DefaultProviderRequest};
use crate::plan::step::{lock, Chain, Step, StepKind};
use crate::plan::{diffs, graph};

impl Planner {
    /// Prepares a registration: derives its URN, finds its prior state,
    /// resolves its provider and builds its desired state.
    ///
    /// # Errors
    /// Duplicate URNs, alias conflicts, unknown parents or dependencies,
    /// malformed provider references.
    pub(crate) fn prepare(&mut self, goal: &Goal) -> Result<Box<Prepared>> {
        let parent = self.parent_of(goal);
        let urn = self.urn_for(&goal.ty, &goal.name, parent.as_ref())?;
        self.prepare_at(goal, parent, urn)
    }

    /// [`Planner::prepare`] of a goal whose parent ([`Planner::parent_of`])
    /// and URN ([`Planner::urn_for`]) the caller already derived.
    ///
    /// # Errors
    /// As [`Planner::prepare`].
    pub(crate) fn prepare_at(
        &mut self,
        goal: &Goal,
        parent: Option<Urn>,
        urn: Urn,
    ) -> Result<Box<Prepared>> {
        let is_stack = goal.ty.as_str() == STACK_TYPE;
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
        for d in &goal.options.replace_with {
            self.check_registered(&urn, d, "replaceWith")?;
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
        paths("hideDiffs", &goal.options.hide_diffs)?;
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
        if old.is_some()
            && !self.opts.preview
            && goal.options.replacement_trigger.contains_unknowns()
        {
            return Err(PlanError::UnknownReplacementTrigger { urn });
        }

        let mut new = State::new(urn.clone(), goal.ty.clone(), goal.custom);
        new.inputs = goal.inputs.clone();
        if !goal.options.env_var_mappings.is_empty() {
            if !goal.ty.is_provider() {
                return Err(PlanError::EnvVarMappingsNotProvider { urn });
            }
            // Where Pulumi keeps them: the provider's `__internal` inputs,
            // which the plugin host reads when it starts the plugin.
            crate::plan::providers::set_env_var_mappings(
                &mut new.inputs,
                &goal.options.env_var_mappings,
            );
        }
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
        new.keel_address.clone_from(&goal.options.address);
        new.rare.edit(|r| {
            let o = &goal.options;
            r.deleted_with = o.deleted_with.clone().unwrap_or_default().into();
            r.custom_timeouts = o.custom_timeouts.clone().unwrap_or_default().into();
            r.ignore_changes = o.ignore_changes.clone().into();
            r.replace_on_changes = o.replace_on_changes.clone().into();
            r.additional_secret_outputs = o.additional_secret_outputs.clone().into();
            r.replace_with = o.replace_with.clone().into();
            r.replacement_trigger = o.replacement_trigger.clone().into();
            r.hide_diff = o.hide_diffs.clone().into();
            if let Some(id) = &o.import {
                r.import_id = id.clone().into();
            }
        });

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
                let (r, planned, key) = self.default_provider(request)?;
                default_provider = planned;
                default_key = Some(key);
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
            new.provider = SharedStr::recent(&reference.text());
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
        // What the chain waits for, and what scope follows: a resource of
        // a targeted provider is its dependent too.
        let mut refs: Vec<Urn> = new.references().map(|(_, u)| u.clone()).collect();
        refs.extend(provider.as_ref().map(|r| r.urn().clone()));
        let in_scope = self.in_scope(&urn, &goal.ty, &goal.options.address, refs.iter());
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
                new.rare.edit(|r| r.aliases = vec![o.urn.clone()].into());
                self.matched.insert(urn.clone(), o.urn.clone());
            }
            new.created = o.created.clone();
            new.modified = o.modified.clone();
            // What the program does not say is kept from the prior state.
            new.source_position.clone_from(&o.source_position);
            new.refresh_before_update = o.refresh_before_update;
            new.rare.edit(|r| {
                r.import_id.clone_from(&o.rare.import_id);
                r.stack_trace.clone_from(&o.rare.stack_trace);
                r.view_of.clone_from(&o.rare.view_of);
                r.resource_hooks.clone_from(&o.rare.resource_hooks);
                r.extension_ref.clone_from(&o.rare.extension_ref);
                r.snippet_id.clone_from(&o.rare.snippet_id);
            });
            new.schema_version = o.schema_version;
            new.extra.clone_from(&o.extra);
        }
        // Hooks hosted by name (a Pulumi program's) are recorded as Pulumi
        // records them (none: none), so a later delete finds them.
        if let Some(names) = goal.options.hooks.names() {
            new.rare.edit(|r| r.resource_hooks = names.into());
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
        self.undecided.insert(urn.clone());
        Ok(Box::new(Prepared {
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
            waits_for: refs,
        }))
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
    pub(crate) fn decide(
        &mut self,
        p: Box<Prepared>,
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
    pub(crate) fn decide_with(
        &mut self,
        p: Box<Prepared>,
        diff: Option<&DiffResponse>,
        dbr_option: Option<bool>,
        dependents: Option<DependentReplacements>,
    ) -> Result<Chain> {
        let (urn, hooks) = (p.urn.clone(), p.hooks.clone());
        // The verdict as the engine judged it travels with the steps it
        // decided, for their events (`--diff`, `--json`).
        self.undecided.remove(&urn);
        let judged = p.old.as_ref().map(|o| self.judge(&p, &lock(o), diff));
        // The verdict is kept only where a step shows it (a copy of the
        // diff per update or replacement, none per `same`).
        let verdict = judged.as_ref().and_then(|(_, d)| d.clone());
        let mut chain = self.decide_steps(p, judged, dbr_option, dependents)?;
        let shows_verdict = |s: &Step| {
            s.urn == urn && matches!(s.kind, StepKind::Update | StepKind::CreateReplacement)
        };
        if let Some(d) = verdict.filter(|_| chain.steps.iter().any(shows_verdict)) {
            let d = std::sync::Arc::new(d);
            for step in chain.steps.iter_mut().filter(|s| shows_verdict(s)) {
                step.provider_diff = Some(d.clone());
            }
        }
        if self.applied_plan().is_some() || self.recording.is_some() {
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
        } else if let Some(key) = self.forced_replace(new, old) {
            // Pulumi's diff answers these without asking the provider: a
            // replace blaming the option (no provider-required
            // delete-before-replace).
            return (
                DiffKind::Replace,
                Some(DiffResponse {
                    kind: DiffKind::Replace,
                    changed_keys: diff.map(|d| d.changed_keys).unwrap_or_default(),
                    replace_keys: [key.to_owned()].into(),
                    delete_before_replace: false,
                    detailed: Vec::new(),
                }),
            );
        } else {
            match diff.as_ref().map_or(DiffKind::Same, |d| d.kind) {
                // An object that failed to initialise is updated even with
                // unchanged inputs, so that its provider can finish it, as
                // Pulumi does.
                DiffKind::Same if !old.rare.init_errors.is_empty() => DiffKind::Update,
                kind => kind,
            }
        };
        (kind, diff)
    }

    /// The option that forces a custom resource's replace, if any, as
    /// Pulumi's diff rules it: `replacementTrigger` changed since the last
    /// operation (an unknown counts as changed; no value on either side
    /// never triggers), a resource in `replaceWith` replaced in this
    /// operation, or its `deletedWith` resource replaced.
    fn forced_replace(&self, new: &State, old: &State) -> Option<&'static str> {
        if trigger_changed(&new.rare.replacement_trigger, &old.rare.replacement_trigger) {
            return Some("replacementTrigger");
        }
        if new
            .rare
            .replace_with
            .iter()
            .any(|u| self.replacing.contains(u))
        {
            return Some("replaceWith");
        }
        (!new.rare.deleted_with.as_str().is_empty()
            && self.replacing.contains(&*new.rare.deleted_with))
        .then_some("deletedWith")
    }

    /// A resource `p` must wait for before it can be decided: one it names
    /// in `replaceWith` or `deletedWith` that registered but is not decided
    /// yet (whether it is replaced decides whether `p` is).
    pub(crate) fn awaits_decision(&self, p: &Prepared) -> Option<Urn> {
        if !p.new.custom || p.old.is_none() {
            return None;
        }
        p.new
            .rare
            .replace_with
            .iter()
            .chain(std::iter::once(&*p.new.rare.deleted_with))
            .find(|u| self.undecided.contains(*u))
            .cloned()
    }

    /// Records that `urn`'s registration ended without a decision (its
    /// provider failed): whoever waited for it is decided without it.
    pub(crate) fn decision_failed(&mut self, urn: &Urn) {
        self.undecided.remove(urn);
    }

    /// When deciding `p` with this diff will replace it delete-before-
    /// replace: the walk over its prior dependents that finds which must be
    /// replaced first (the actor drives it, asking their providers).
    pub(crate) fn dependents_walk(
        &self,
        p: &Prepared,
        diff: Option<&DiffResponse>,
        dbr_option: Option<bool>,
    ) -> Option<DependentWalk> {
        let i = p.old_index.filter(|_| p.in_scope)?;
        // Judged on the prior state in place (no copy: nothing here awaits,
        // and `judge` locks no state), released before the walk reads
        // the prior dependents.
        let urn = {
            let old = lock(&self.olds[i]);
            if old.pending_replacement || self.dbr_dependents.contains_key(&i) || old.protect {
                return None;
            }
            let (kind, diff) = self.judge(p, &old, diff);
            let dbr = dbr_option.unwrap_or_else(|| diff.is_some_and(|d| d.delete_before_replace));
            (kind == DiffKind::Replace && dbr).then(|| old.urn.clone())?
        };
        Some(DependentWalk::new(urn, self.prior_dependents(i)))
    }

    /// The steps of `p`, given what [`Self::judge`] said of it (`None`
    /// without a prior state).
    fn decide_steps(
        &mut self,
        p: Box<Prepared>,
        judged: Option<(DiffKind, Option<DiffResponse>)>,
        dbr_option: Option<bool>,
        dependents: Option<DependentReplacements>,
    ) -> Result<Chain> {
        let (judged, judged_diff) = match judged {
            Some((k, d)) => (Some(k), d),
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
            waits_for,
            ..
        } = *p;
        if let Some(key) = &default_key {
            // The default provider's reference as decided (a replaced one
            // has a new ID).
            if let Some(r) = self.default_providers.get(key) {
                if !r.is_text(&new.provider) {
                    new.provider = SharedStr::recent(&r.text());
                }
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
                        let was = kept.urn.clone();
                        kept.rare.edit(|r| r.aliases = vec![was].into());
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
            let kind = if new.custom && !new.rare.import_id.is_empty() {
                new.id = (*new.rare.import_id).clone();
                StepKind::Import
            } else {
                if new.custom && self.opts.pending_creates.contains(&urn) {
                    return Err(PlanError::PendingCreate { urn });
                }
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
        // No copy of the prior state unless it is replaced: a same or
        // update step takes only its ID and outputs.
        let pending_replacement = lock(&old_ref).pending_replacement;
        let deleting = old_index.and_then(|i| self.dbr_dependents.get(&i)).cloned();
        if pending_replacement || deleting.is_some() {
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
        new.id.clone_from(&lock(&old_ref).id);
        match kind {
            DiffKind::Same | DiffKind::Update => {
                new.outputs.clone_from(&lock(&old_ref).outputs);
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
                let old = lock(&old_ref).clone();
                if old.protect {
                    return Err(PlanError::ProtectedReplace { urn });
                }
                self.replacing.insert(urn.clone());
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
            kept.rare.edit(|r| {
                r.deleted_with.clone_from(&new.rare.deleted_with);
                r.replace_with.clone_from(&new.rare.replace_with);
            });
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
                    || reached.contains(&*s.rare.deleted_with)
                    || s.rare.replace_with.iter().any(|d| reached.contains(d))
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
    pub(crate) fn read(&mut self, goal: &ReadGoal) -> Result<(Option<Box<Prepared>>, Chain)> {
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
        let p = *self.prepare(&as_goal)?;
        // A read's state is written whether or not it is targeted: one that
        // refers to a skipped create would refer to nothing (a stack no
        // load accepts), so it is refused before anything is recorded.
        if let Some((_, d)) = p.new.references().find(|(_, d)| self.skipped.contains(*d)) {
            return Err(PlanError::ReadOfSkipped {
                urn: p.urn,
                dependency: d.clone(),
            });
        }
        let waits_for = p.waits_for;
        if let Some(i) = p.old_index {
            self.handled[i] = true;
        }
        let mut new = p.new;
        new.id = goal.id.clone();
        new.external = true;
        new.keel_address.clone_from(&goal.address);
        new.rare
            .edit(|r| r.additional_secret_outputs = goal.additional_secret_outputs.clone().into());
        let mut kind = StepKind::Read;
        if goal.action {
            new.mark_action();
            // An action runs again only when its inputs changed since the
            // last completed run (or it was something else before): else
            // the recorded run stands, with its outputs.
            if let Some(o) = &p.old {
                let o = lock(o);
                if o.category() == crate::model::state::Category::Action
                    && o.ty == new.ty
                    && o.inputs == new.inputs
                    && !o.taint
                {
                    new.id.clone_from(&o.id);
                    new.outputs = o.outputs.clone();
                    kind = StepKind::Same;
                }
            }
        }
        let steps = vec![Step::new(kind, p.urn, p.old, Some(new))];
        Ok((p.default_provider, Chain { steps, waits_for }))
    }
}

/// Whether a `replacementTrigger` changed (Pulumi's `shouldTriggerReplace`):
/// secrets and output wrappers do not count, an unknown anywhere always
/// counts as a change, and `null` on either side means "no trigger".
fn trigger_changed(new: &crate::model::PropertyValue, old: &crate::model::PropertyValue) -> bool {
    use crate::model::PropertyValue;
    fn plain(v: &PropertyValue) -> PropertyValue {
        match v {
            PropertyValue::Secret(crate::model::property::Secret::Plaintext(p)) => plain(p.value()),
            PropertyValue::Output(o) => match o.value.as_deref() {
                Some(inner) => plain(inner),
                None => PropertyValue::Computed,
            },
            PropertyValue::Array(a) => PropertyValue::Array(a.iter().map(plain).collect()),
            PropertyValue::Object(m) => {
                PropertyValue::Object(m.iter().map(|(k, x)| (k.clone(), plain(x))).collect())
            }
            other => other.clone(),
        }
    }
    let (new, old) = (plain(new), plain(old));
    if new.contains_unknowns() || old.contains_unknowns() {
        return true;
    }
    if new.is_null() || old.is_null() {
        return false;
    }
    new != old
}
