//! Pre-callback checks (`migrations.md` §3 step 4), context restrictions
//! (§5.4) and the final checks on a chain's result: providers (§5.1),
//! identity (§5.2) and structure (§5.3).
//!
//! Stages run in the order of §3 and the first failing stage stops. Within
//! one table the rows are tried in table order, each over the whole result
//! in result order, and the first row that applies is reported; rows that a
//! row suppresses are not tried for that resource. [`validate`] runs the
//! stages after the chain: a no-op skips all of them; otherwise context,
//! providers, identity, structure.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::chain::{normalized_eq, unparsed_text, ChainOutcome};
use super::rewrite::{identity_in, rewrite_provider};
use super::rules::{MigrationError, Result, Rule};
use super::subtree::Subtree;
use crate::model::fasthash::FastSet;
use crate::model::snapshot::Snippet;
use crate::model::state::Reference;
use crate::model::urn::STACK_TYPE;
use crate::model::{ProviderRef, State, Urn};

/// The options of the operation that matter to migrations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OperationOptions {
    /// The update has `--target`, `--exclude`, `--replace` or
    /// `--target-snippet` (any of those lists is non-empty).
    pub targeted: bool,
    /// A preview generates a saved plan (`--save-plan`).
    pub generate_plan: bool,
    /// An update applies a saved plan (`--plan`).
    pub apply_plan: bool,
    /// The operation is a preview (else an update).
    pub preview: bool,
}

/// Everything the checks need to know about the registration and the
/// deployment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Context<'a> {
    /// The registration URN.
    pub registration: &'a Urn,
    /// The whole prior list.
    pub prior: &'a [&'a State],
    /// The prior subtree (indices into `prior`; its root is the prior root).
    pub subtree: &'a Subtree,
    /// URNs claimed through an alias by earlier registrations of this
    /// deployment.
    pub claimed: &'a HashSet<Urn>,
    /// URNs registered earlier in this deployment.
    pub registered: &'a HashSet<Urn>,
    /// The deployment's extensions (checkpoint JSON, `null` when none).
    pub extensions: &'a Value,
    /// The persisted snippets.
    pub snippets: &'a [Snippet],
    /// Whether the prior snapshot has pending operations.
    pub pending_operations: bool,
    /// The operation's options.
    pub options: OperationOptions,
}

impl<'a> Context<'a> {
    /// The prior root.
    pub(crate) fn prior_root(&self) -> &'a State {
        self.prior[self.subtree.root()]
    }

    /// The live subtree members (the chain's original input), root first.
    fn members(&self) -> impl Iterator<Item = &'a State> + '_ {
        self.subtree.members.iter().map(|&i| self.prior[i])
    }

    /// Every subtree member: the live ones, then those pending deletion.
    fn all_members(&self) -> impl Iterator<Item = &'a State> + '_ {
        self.subtree
            .members
            .iter()
            .chain(&self.subtree.pending_delete)
            .map(|&i| self.prior[i])
    }

    /// The retained prior states: every prior state outside the subtree.
    fn retained(&self) -> impl Iterator<Item = &'a State> + '_ {
        self.prior
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.subtree.contains(*i))
            .map(|(_, s)| *s)
    }

    fn fail(&self, rule: Rule, what: String, hint: &str) -> MigrationError {
        MigrationError::new(
            rule,
            format!("the migration of {}: {what}; {hint}", self.registration),
        )
    }
}

/// The pre-callback checks (§3 step 4), which block even a callback that
/// would change nothing: `view`, `claimed-by-alias`, `already-registered`.
///
/// # Errors
/// The first failing rule.
pub(crate) fn pre_callback(ctx: &Context<'_>) -> Result<()> {
    let member_urns: FastSet<&str> = ctx.all_members().map(|s| s.urn.as_str()).collect();
    for m in ctx.all_members() {
        if !m.rare.view_of.is_empty() {
            return Err(ctx.fail(
                Rule::View,
                format!("subtree member {} is a view of {}", m.urn, m.rare.view_of),
                "migrations cannot involve resource views; remove the callbacks",
            ));
        }
    }
    for s in ctx.prior {
        if !s.rare.view_of.is_empty() && member_urns.contains(s.rare.view_of.as_str()) {
            return Err(ctx.fail(
                Rule::View,
                format!("{} is a view of subtree member {}", s.urn, s.rare.view_of),
                "migrations cannot involve resource views; remove the callbacks",
            ));
        }
    }
    if ctx.claimed.contains(ctx.registration) {
        return Err(ctx.fail(
            Rule::ClaimedByAlias,
            format!(
                "{} was already claimed as an alias by an earlier registration",
                ctx.registration
            ),
            "a resource claimed through an alias cannot be migrated in the same deployment",
        ));
    }
    for m in ctx.all_members() {
        if ctx.claimed.contains(&m.urn) {
            return Err(ctx.fail(
                Rule::ClaimedByAlias,
                format!(
                    "subtree member {} was already claimed as an alias by an earlier registration",
                    m.urn
                ),
                "register the migrating component before resources that alias its members",
            ));
        }
    }
    for m in ctx.all_members() {
        if &m.urn != ctx.registration && ctx.registered.contains(&m.urn) {
            return Err(ctx.fail(
                Rule::AlreadyRegistered,
                format!(
                    "subtree member {} was already registered in this deployment",
                    m.urn
                ),
                "register the migrating component before its children",
            ));
        }
    }
    Ok(())
}

/// The checks after the chain (§3 steps 6–8): nothing for a no-op, else
/// context restrictions, providers, identity and structure, in that order.
///
/// # Errors
/// The first failing rule of the first failing stage.
pub(crate) fn validate(ctx: &Context<'_>, outcome: &ChainOutcome) -> Result<()> {
    if outcome.noop {
        return Ok(());
    }
    context_restrictions(ctx, outcome)?;
    providers(ctx, outcome)?;
    identity(ctx, outcome)?;
    structure(ctx, outcome)
}

/// Context restrictions (§5.4), for a chain that changes state.
///
/// # Errors
/// `restricted-targeted`, `restricted-plan`, `pending-operations`,
/// `snippet-reference` or `pending-delete`, in that order.
pub(crate) fn context_restrictions(ctx: &Context<'_>, outcome: &ChainOutcome) -> Result<()> {
    let o = ctx.options;
    if o.targeted {
        return Err(ctx.fail(
            Rule::RestrictedTargeted,
            "the migration changes state in an update with --target, --exclude, --replace \
             or --target-snippet"
                .into(),
            "run a full update (without those options) to apply the migration",
        ));
    }
    if (o.preview && o.generate_plan) || (!o.preview && o.apply_plan) {
        return Err(ctx.fail(
            Rule::RestrictedPlan,
            "the migration changes state while a saved plan is generated or applied".into(),
            "run the update without --save-plan/--plan to apply the migration first",
        ));
    }
    if ctx.pending_operations {
        return Err(ctx.fail(
            Rule::PendingOperations,
            "the prior snapshot has pending operations from an interrupted update".into(),
            "resolve them first (refresh, or clear the pending operations)",
        ));
    }
    for snippet in ctx.snippets {
        for (name, urn) in &snippet.references {
            if let Some(to) = outcome.original_to_final.get(urn) {
                return Err(ctx.fail(
                    Rule::SnippetReference,
                    format!(
                        "snippet {} references {urn} (as `{name}`), which the migration maps to {to}",
                        snippet.uuid
                    ),
                    "update the snippet's references before migrating",
                ));
            }
        }
    }
    if let Some(&i) = ctx.subtree.pending_delete.first() {
        return Err(ctx.fail(
            Rule::PendingDelete,
            format!(
                "subtree member {} is pending deletion from an earlier update",
                ctx.prior[i].urn
            ),
            "finish the pending deletions (run an update without the migration) first",
        ));
    }
    Ok(())
}

/// Provider checks (§5.1).
///
/// # Errors
/// `provider-state-changed` or `provider-state-introduced`.
pub(crate) fn providers(ctx: &Context<'_>, outcome: &ChainOutcome) -> Result<()> {
    let by_urn: HashMap<&Urn, &State> = outcome.result.iter().map(|s| (&s.urn, s)).collect();
    let hint = "return provider states exactly as they were: a migration cannot change the \
                live provider registry";
    let mut subtree_providers: HashSet<&Urn> = HashSet::new();
    for o in ctx.members().filter(|s| s.ty.is_provider()) {
        subtree_providers.insert(&o.urn);
        match by_urn.get(&o.urn) {
            None => {
                let what = match outcome.original_to_final.get(&o.urn) {
                    Some(to) => format!("provider {} is renamed to {to}", o.urn),
                    None => format!("provider {} is missing from the result", o.urn),
                };
                return Err(ctx.fail(Rule::ProviderStateChanged, what, hint));
            }
            Some(r) if !normalized_eq(r, o) => {
                return Err(ctx.fail(
                    Rule::ProviderStateChanged,
                    format!("provider {} is changed by the migration", o.urn),
                    hint,
                ));
            }
            Some(_) => {}
        }
    }
    for s in ctx.retained().filter(|s| s.ty.is_provider()) {
        if outcome.rewrite_outside(s).is_some() {
            return Err(ctx.fail(
                Rule::ProviderStateChanged,
                format!(
                    "provider {} refers to a migrated resource and would be rewritten",
                    s.urn
                ),
                hint,
            ));
        }
    }
    for r in &outcome.result {
        if r.ty.is_provider() && !subtree_providers.contains(&r.urn) {
            return Err(ctx.fail(
                Rule::ProviderStateIntroduced,
                format!(
                    "the result holds provider {} that the subtree did not have",
                    r.urn
                ),
                "a migration cannot create providers; remove it from the result",
            ));
        }
    }
    Ok(())
}

/// Identity checks on managed resources (§5.2).
///
/// # Errors
/// The first failing row of the §5.2 table.
pub(crate) fn identity(ctx: &Context<'_>, outcome: &ChainOutcome) -> Result<()> {
    let result = &outcome.result;
    let map = &outcome.original_to_final;
    let pos: HashMap<&Urn, usize> = result
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.urn, i))
        .collect();
    let ids = identity_in(result);
    let provider_of = |o: &State| {
        rewrite_provider(&o.provider, map, &ids).unwrap_or_else(|| o.provider.to_string())
    };
    // Originals (provider states are exempt) grouped by target.
    let originals: Vec<&State> = ctx.members().filter(|s| !s.ty.is_provider()).collect();
    let mut preds: Vec<Vec<&State>> = vec![Vec::new(); result.len()];
    for o in &originals {
        let target = pos
            .get(&o.urn)
            .or_else(|| map.get(&o.urn).and_then(|f| pos.get(f)));
        if let Some(&t) = target {
            preds[t].push(o);
        }
    }
    let custom_preds = |t: usize| preds[t].iter().copied().filter(|o| o.custom);
    let exempt = |t: usize| result[t].ty.is_provider();
    let additional = |t: usize| !exempt(t) && result[t].custom && custom_preds(t).next().is_none();
    // identity-to-component suppresses the other rows for its target.
    let to_component =
        |t: usize| !exempt(t) && !result[t].custom && custom_preds(t).next().is_some();
    let successor = |t: usize| !exempt(t) && result[t].custom && !additional(t);

    let hint_identity = "a migration must keep a managed resource's physical identity: \
                         map it to a successor with the same id, provider and extension";
    for (t, r) in result.iter().enumerate() {
        if to_component(t) {
            let p = custom_preds(t)
                .next()
                .map(|p| p.urn.to_string())
                .unwrap_or_default();
            return Err(ctx.fail(
                Rule::IdentityToComponent,
                format!("custom resource {p} maps to component {}", r.urn),
                hint_identity,
            ));
        }
    }
    type Row<'s> = (Rule, &'s str, fn(&State, &State, &str) -> bool);
    let rows: [Row<'_>; 5] = [
        (Rule::PhysicalIdChanged, "id", |p, r, _| p.id != r.id),
        (Rule::ProviderChanged, "provider", |_, r, p_provider| {
            p_provider != r.provider
        }),
        (Rule::ExtensionChanged, "extensionRef", |p, r, _| {
            p.rare.extension_ref != r.rare.extension_ref
        }),
        (Rule::OwnershipChanged, "external", |p, r, _| {
            p.external != r.external
        }),
        (
            Rule::LifecycleChanged,
            "pendingReplacement or taint",
            |p, r, _| p.pending_replacement != r.pending_replacement || p.taint != r.taint,
        ),
    ];
    for (rule, field, differs) in rows {
        for (t, r) in result.iter().enumerate() {
            if !successor(t) {
                continue;
            }
            for p in custom_preds(t) {
                if differs(p, r, &provider_of(p)) {
                    return Err(ctx.fail(
                        rule,
                        format!("{} (from {}) has another {field}", r.urn, p.urn),
                        hint_identity,
                    ));
                }
            }
        }
    }
    for (t, r) in result.iter().enumerate() {
        if exempt(t) || additional(t) || to_component(t) {
            continue;
        }
        let pr = custom_preds(t).any(|p| p.pending_replacement);
        let taint = custom_preds(t).any(|p| p.taint);
        if (r.pending_replacement && !pr) || (r.taint && !taint) {
            return Err(ctx.fail(
                Rule::LifecycleForged,
                format!(
                    "{} sets pendingReplacement or taint that none of its custom predecessors had",
                    r.urn
                ),
                "a migration cannot change provider lifecycle state: clear those flags",
            ));
        }
    }
    for (t, r) in result.iter().enumerate() {
        if exempt(t) || additional(t) || to_component(t) {
            continue;
        }
        let protect = preds[t].iter().any(|p| p.protect);
        let retain = preds[t].iter().any(|p| p.retain_on_delete);
        if r.protect != protect || r.retain_on_delete != retain {
            return Err(ctx.fail(
                Rule::ProtectionChanged,
                format!(
                    "{} has protect={}, retainOnDelete={} but its predecessors give \
                     protect={protect}, retainOnDelete={retain}",
                    r.urn, r.protect, r.retain_on_delete
                ),
                "set protect and retainOnDelete to the OR over all predecessors",
            ));
        }
    }
    let matches = |r: &State| -> Vec<&State> {
        originals
            .iter()
            .copied()
            .filter(|o| {
                o.custom
                    && !o.id.is_empty()
                    && o.id == r.id
                    && provider_of(o) == r.provider
                    && o.rare.extension_ref == r.rare.extension_ref
            })
            .collect()
    };
    for (t, r) in result.iter().enumerate() {
        if additional(t) && matches(r).is_empty() {
            return Err(ctx.fail(
                Rule::UnmatchedCustom,
                format!(
                    "{} is a new custom resource with no predecessor and no prior custom \
                     resource of the subtree with id `{}`, its provider and extension",
                    r.urn, r.id
                ),
                "a migration cannot import: map a prior resource to it, or create it normally",
            ));
        }
    }
    for (t, r) in result.iter().enumerate() {
        if !additional(t) {
            continue;
        }
        let ms = matches(r);
        let flags = |s: &State| (s.external, s.pending_replacement, s.taint);
        let first = flags(ms[0]);
        let disagree = ms.iter().any(|m| flags(m) != first);
        let differs = flags(r) != first;
        let protect = ms.iter().any(|m| m.protect);
        let retain = ms.iter().any(|m| m.retain_on_delete);
        if disagree || differs || r.protect != protect || r.retain_on_delete != retain {
            return Err(ctx.fail(
                Rule::SplitFlagsConflict,
                format!(
                    "split resource {} disagrees with the prior resources it matches ({})",
                    r.urn,
                    ms.iter()
                        .map(|m| m.urn.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "give it the external, pendingReplacement and taint of its matches, and \
                 protect/retainOnDelete as the OR over them",
            ));
        }
    }
    // One physical object, one owner: a split yields resources of other
    // types, never a second owner of the same object.
    let mut owners: HashMap<(&str, &str, &str), &Urn> = HashMap::new();
    for r in result.iter().filter(|r| r.custom && !r.ty.is_provider()) {
        if r.id.is_empty() {
            continue;
        }
        if let Some(first) =
            owners.insert((r.ty.as_str(), r.id.as_str(), r.provider.as_str()), &r.urn)
        {
            return Err(ctx.fail(
                Rule::IdentityDuplicated,
                format!(
                    "{first} and {} are both custom resources of type {} with id `{}` and \
                     the same provider: one physical object would have two owners, and \
                     deleting either would destroy the other's object",
                    r.urn, r.ty, r.id
                ),
                "return each physical object once: map the copy to the original as its \
                 successor, or give a split-off resource its own type",
            ));
        }
    }
    Ok(())
}

/// Structure checks (§5.3).
///
/// # Errors
/// The first failing row of the §5.3 table.
pub(crate) fn structure(ctx: &Context<'_>, outcome: &ChainOutcome) -> Result<()> {
    let result = &outcome.result;
    let reg = ctx.registration;
    let prior_root = ctx.prior_root();
    let pos: HashMap<&Urn, usize> = result
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.urn, i))
        .collect();
    let has_reg = pos.get(reg).copied();
    let has_prior = pos.get(&prior_root.urn).copied();
    let root_i = match (has_reg, has_prior) {
        (None, None) => {
            return Err(ctx.fail(
                Rule::RootMissing,
                format!(
                    "the result holds neither {reg} nor the prior root {}",
                    prior_root.urn
                ),
                "return the component itself at the top of the result",
            ))
        }
        (Some(_), Some(_)) if reg != &prior_root.urn => {
            return Err(ctx.fail(
                Rule::RootAmbiguous,
                format!(
                    "the result holds both {reg} and the prior root {}",
                    prior_root.urn
                ),
                "return the root once: map the prior root to the registration URN",
            ))
        }
        (Some(i), _) | (None, Some(i)) => i,
    };
    let root = &result[root_i];
    if root.parent != prior_root.parent {
        return Err(ctx.fail(
            Rule::RootParentChanged,
            format!(
                "the root {} has parent `{}` but the prior root's is `{}`",
                root.urn, root.parent, prior_root.parent
            ),
            "keep the root's parent",
        ));
    }
    for r in result {
        if r.urn.stack() != reg.stack() || r.urn.project() != reg.project() {
            return Err(ctx.fail(
                Rule::ForeignStack,
                format!("{} belongs to another stack or project", r.urn),
                "keep every URN in the registration's stack and project",
            ));
        }
    }
    let parent_index = |t: usize| pos.get(&result[t].parent).copied();
    for (t, r) in result.iter().enumerate() {
        let mut path = vec![t];
        let mut cur = t;
        while let Some(p) = parent_index(cur) {
            if let Some(at) = path.iter().position(|&x| x == p) {
                let lp: Vec<&str> = path[at..].iter().map(|&x| result[x].urn.as_str()).collect();
                return Err(ctx.fail(
                    Rule::ParentCycle,
                    format!("the parents of {} form a loop: {}", r.urn, lp.join(" -> ")),
                    "parents must form a tree under the root",
                ));
            }
            path.push(p);
            cur = p;
        }
    }
    for (t, r) in result.iter().enumerate() {
        if t == root_i {
            continue;
        }
        let mut cur = t;
        let reaches = loop {
            let p = &result[cur].parent;
            if p == &root.urn {
                break true;
            }
            match pos.get(p) {
                Some(&i) => cur = i,
                None => break false,
            }
        };
        if !reaches {
            return Err(ctx.fail(
                Rule::NotDescendant,
                format!(
                    "{} does not descend from the root {} through parents in the result",
                    r.urn, root.urn
                ),
                "parent every returned resource under the root",
            ));
        }
    }
    for r in result {
        let own = r.urn.type_str();
        let expected = if r.parent.is_empty() || r.parent.qualified_type() == STACK_TYPE {
            own.to_owned()
        } else {
            format!("{}${own}", r.parent.qualified_type())
        };
        if r.urn.qualified_type() != expected {
            return Err(ctx.fail(
                Rule::QualifiedTypeMismatch,
                format!(
                    "{} has qualified type `{}` but its parent gives `{expected}`",
                    r.urn,
                    r.urn.qualified_type()
                ),
                "derive each URN from its parent's type chain",
            ));
        }
    }
    let flag_rows: [FlagRow<'_>; 6] = [
        (
            Rule::ResultClaimed,
            "was claimed as an alias earlier in this deployment",
            "return URNs no earlier registration claimed",
            &|r| &r.urn != reg && ctx.claimed.contains(&r.urn),
        ),
        (
            Rule::ResultRegistered,
            "was registered earlier in this deployment",
            "register the migrating component before the resources it returns",
            &|r| &r.urn != reg && ctx.registered.contains(&r.urn),
        ),
        (
            Rule::ResultPendingDelete,
            "is marked delete",
            "do not return resources pending deletion",
            &|r| r.delete,
        ),
        (
            Rule::ResultView,
            "is a view",
            "do not return resource views",
            &|r| !r.rare.view_of.is_empty(),
        ),
        (
            Rule::CustomWithoutId,
            "is a custom resource with an empty id",
            "give every custom resource its physical ID",
            &|r| r.custom && r.id.is_empty(),
        ),
        (
            Rule::UnknownExtension,
            "has an extensionRef that names no extension of the deployment",
            "refer only to the deployment's extensions",
            &|r| {
                !r.rare.extension_ref.is_null()
                    && !extension_known(ctx.extensions, &r.rare.extension_ref)
            },
        ),
    ];
    for (rule, what, hint, applies) in flag_rows {
        if let Some(r) = result.iter().find(|r| applies(r)) {
            return Err(ctx.fail(rule, format!("returned resource {} {what}", r.urn), hint));
        }
    }
    for r in result {
        if !r.provider.is_empty() {
            if let Err(e) = ProviderRef::parse(&r.provider) {
                return Err(ctx.fail(
                    Rule::InvalidProviderRef,
                    format!("{} has an invalid provider reference: {e}", r.urn),
                    "write provider references as <provider URN>::<ID>",
                ));
            }
        }
    }
    // What must resolve in retained prior state (one pass over it).
    let in_result_provider =
        |p: &ProviderRef| result.iter().any(|s| &s.urn == p.urn() && s.id == p.id());
    let mut want_urns: FastSet<&str> = FastSet::default();
    let mut want_providers: FastSet<(&str, &str)> = FastSet::default();
    let provider_refs: Vec<(&State, ProviderRef)> = result
        .iter()
        .filter_map(|r| Some((r, ProviderRef::parse(&r.provider).ok()?)))
        .collect();
    for (_, p) in &provider_refs {
        if !in_result_provider(p) {
            if let Some((u, id)) = p_parts(p) {
                want_providers.insert((u, id));
            }
        }
    }
    for r in result {
        for (kind, target) in r.references() {
            if kind != Reference::Parent && !pos.contains_key(target) && !target.is_empty() {
                want_urns.insert(target.as_str());
            }
        }
    }
    let mut found_urns: FastSet<&str> = FastSet::default();
    let mut found_providers: FastSet<(&str, &str)> = FastSet::default();
    if !want_urns.is_empty() || !want_providers.is_empty() {
        for s in ctx.retained() {
            if let Some(u) = want_urns.get(s.urn.as_str()) {
                found_urns.insert(u);
            }
            if let Some(p) = want_providers.get(&(s.urn.as_str(), s.id.as_str())) {
                found_providers.insert(*p);
            }
            // What a result refers to outside itself is mostly the stack and
            // a provider, near the top of the list: once everything wanted
            // is found, the rest of the list has nothing to add.
            if found_urns.len() == want_urns.len() && found_providers.len() == want_providers.len()
            {
                break;
            }
        }
    }
    for (r, p) in &provider_refs {
        if in_result_provider(p) {
            continue;
        }
        if !p_parts(p).is_some_and(|k| found_providers.contains(&k)) {
            return Err(ctx.fail(
                Rule::UnknownProvider,
                format!("{} refers to provider {p}, which is neither in the result nor in the rest of the stack", r.urn),
                "refer to an existing provider (URN and ID)",
            ));
        }
    }
    for r in result {
        for (kind, target) in r.references() {
            if kind == Reference::Parent {
                continue;
            }
            let problem = if target.is_empty() {
                Some("an empty reference".to_owned())
            } else if let Some(text) = unparsed_text(target) {
                Some(format!("`{text}`, which is not a URN"))
            } else if !pos.contains_key(target) && !found_urns.contains(target.as_str()) {
                Some(format!(
                    "{target}, which is neither in the result nor retained in the stack"
                ))
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(ctx.fail(
                    Rule::DanglingReference,
                    format!("{}'s {kind} is {problem}", r.urn),
                    "refer to resources of the result or of the rest of the stack (map \
                     references to removed resources to their successors)",
                ));
            }
        }
    }
    Ok(())
}

/// A structure row that is a per-resource predicate: rule, what, hint, test.
type FlagRow<'a> = (Rule, &'a str, &'a str, &'a dyn Fn(&State) -> bool);

fn p_parts(p: &ProviderRef) -> Option<(&str, &str)> {
    Some((p.urn().as_str(), p.id()))
}

/// Whether `reference` (an `extensionRef`) names an extension of the
/// deployment's `extensions`.
///
/// The checkpoint format keeps both verbatim, so names are read leniently:
/// an extension is named by its key (when `extensions` is an object), or by
/// itself (a string) or its `name`/`id`/`uuid` field (an object); a
/// reference names what it is (a string) or its `name`/`id`/`uuid` field.
pub(crate) fn extension_known(extensions: &Value, reference: &Value) -> bool {
    fn names(v: &Value) -> Vec<&str> {
        match v {
            Value::String(s) => vec![s.as_str()],
            Value::Object(o) => ["name", "id", "uuid"]
                .iter()
                .filter_map(|k| o.get(*k).and_then(Value::as_str))
                .collect(),
            _ => Vec::new(),
        }
    }
    let wanted = names(reference);
    if wanted.is_empty() {
        return false;
    }
    let mut known: Vec<&str> = Vec::new();
    match extensions {
        Value::Object(o) => {
            for (k, v) in o {
                known.push(k);
                known.extend(names(v));
            }
        }
        Value::Array(a) => a.iter().for_each(|v| known.extend(names(v))),
        _ => {}
    }
    wanted.iter().any(|w| known.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::chain::{CallbackOutput, Chain};
    use serde_json::json;

    const STACK: &str = "urn:pulumi:s::p::pulumi:pulumi:Stack::p-s";
    const PROV: &str = "urn:pulumi:s::p::pulumi:providers:a::default";

    fn u(rest: &str) -> String {
        format!("urn:pulumi:s::p::{rest}")
    }

    fn st(j: Value) -> State {
        serde_json::from_value(j).unwrap()
    }

    fn prior() -> Vec<State> {
        vec![
            st(json!({"urn": STACK, "custom": false, "type": "pulumi:pulumi:Stack"})),
            st(json!({"urn": PROV, "custom": true, "id": "pid", "type": "pulumi:providers:a"})),
            st(json!({"urn": u("m:m:C::c"), "custom": false, "type": "m:m:C", "parent": STACK})),
            st(
                json!({"urn": u("m:m:C$a:b:T::a"), "custom": true, "id": "ia", "type": "a:b:T",
                      "parent": u("m:m:C::c"), "provider": format!("{PROV}::pid"), "protect": true}),
            ),
            st(
                json!({"urn": u("m:m:C$a:b:T::b"), "custom": true, "id": "ib", "type": "a:b:T",
                      "parent": u("m:m:C::c"), "provider": format!("{PROV}::pid"), "taint": true}),
            ),
        ]
    }

    struct Env {
        prior: Vec<State>,
        subtree: Subtree,
        claimed: HashSet<Urn>,
        registered: HashSet<Urn>,
        ext: Value,
        reg: Urn,
        options: OperationOptions,
    }

    impl Env {
        fn new() -> Self {
            let prior = prior();
            let subtree = Subtree::collect(&prior.iter().collect::<Vec<_>>(), 2);
            Self {
                prior,
                subtree,
                claimed: HashSet::new(),
                registered: HashSet::new(),
                ext: Value::Null,
                reg: Urn::parse(&u("m:m:C::c")).unwrap(),
                options: OperationOptions::default(),
            }
        }

        fn with_ctx<T>(&self, f: impl FnOnce(&Context<'_>) -> T) -> T {
            let prior: Vec<&State> = self.prior.iter().collect();
            f(&Context {
                registration: &self.reg,
                prior: &prior,
                subtree: &self.subtree,
                claimed: &self.claimed,
                registered: &self.registered,
                extensions: &self.ext,
                snippets: &[],
                pending_operations: false,
                options: self.options,
            })
        }

        /// Runs one callback returning `result` (after `edit` of the
        /// input) and `succ`, then validates.
        fn run(
            &self,
            edit: impl FnOnce(&mut Vec<Value>),
            succ: &[(&str, &str)],
        ) -> Result<ChainOutcome> {
            let mut chain = Chain::new(
                self.reg.clone(),
                self.subtree.states(&self.prior.iter().collect::<Vec<_>>()),
            );
            let mut state = chain.input_json()["oldState"].as_array().unwrap().clone();
            edit(&mut state);
            chain.apply(
                1,
                1,
                CallbackOutput::Changed {
                    new_state: Value::Array(state),
                    successors: succ.iter().map(|(k, v)| (u(k), u(v))).collect(),
                },
            )?;
            let o = chain.finish()?;
            self.with_ctx(|c| validate(c, &o))?;
            Ok(o)
        }
    }

    fn rule(r: Result<ChainOutcome>) -> Rule {
        r.unwrap_err().rule
    }

    fn rename(s: &mut [Value], i: usize, name: &str) {
        s[i]["urn"] = json!(u(&format!("m:m:C$a:b:T::{name}")));
    }

    #[test]
    fn a_rename_passes() {
        let env = Env::new();
        let o = env
            .run(
                |s| rename(s, 1, "x"),
                &[("m:m:C$a:b:T::a", "m:m:C$a:b:T::x")],
            )
            .unwrap();
        assert!(!o.noop);
    }

    #[test]
    fn pre_callback_rules() {
        let mut env = Env::new();
        env.with_ctx(pre_callback).unwrap();
        env.registered.insert(env.reg.clone());
        env.with_ctx(pre_callback).unwrap();
        env.registered
            .insert(Urn::parse(&u("m:m:C$a:b:T::a")).unwrap());
        assert_eq!(
            env.with_ctx(pre_callback).unwrap_err().rule,
            Rule::AlreadyRegistered
        );
        env.claimed
            .insert(Urn::parse(&u("m:m:C$a:b:T::b")).unwrap());
        assert_eq!(
            env.with_ctx(pre_callback).unwrap_err().rule,
            Rule::ClaimedByAlias
        );
        env.prior[0]
            .rare
            .edit(|r| r.view_of = Urn::parse(&u("m:m:C$a:b:T::b")).unwrap().into());
        assert_eq!(env.with_ctx(pre_callback).unwrap_err().rule, Rule::View);
    }

    #[test]
    fn context_rules_only_for_changes() {
        let mut env = Env::new();
        env.options.targeted = true;
        assert_eq!(
            rule(env.run(
                |s| rename(s, 1, "x"),
                &[("m:m:C$a:b:T::a", "m:m:C$a:b:T::x")]
            )),
            Rule::RestrictedTargeted
        );
        assert!(env.run(|_| {}, &[]).unwrap().noop);
        env.options = OperationOptions {
            apply_plan: true,
            ..Default::default()
        };
        assert_eq!(
            rule(env.run(
                |s| rename(s, 1, "x"),
                &[("m:m:C$a:b:T::a", "m:m:C$a:b:T::x")]
            )),
            Rule::RestrictedPlan
        );
    }

    #[test]
    fn identity_rows() {
        let env = Env::new();
        let m = &[("m:m:C$a:b:T::a", "m:m:C$a:b:T::x")];
        assert_eq!(
            rule(env.run(
                |s| {
                    rename(s, 1, "x");
                    s[1]["id"] = json!("other");
                },
                m
            )),
            Rule::PhysicalIdChanged
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    rename(s, 1, "x");
                    s[1]["external"] = json!(true);
                },
                m
            )),
            Rule::OwnershipChanged
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    rename(s, 1, "x");
                    s[1]["taint"] = json!(true);
                },
                m
            )),
            Rule::LifecycleChanged
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    rename(s, 1, "x");
                    s[1]["protect"] = json!(false);
                },
                m
            )),
            Rule::ProtectionChanged
        );
        assert_eq!(
            rule(env.run(|s| s[0]["taint"] = json!(true), &[])),
            Rule::LifecycleForged
        );
        // A custom resource folded into a new component.
        assert_eq!(
            rule(env.run(
                |s| {
                    rename(s, 1, "x");
                    s[1]["urn"] = json!(u("m:m:C$m:m:G::g"));
                    s[1]["type"] = json!("m:m:G");
                    s[1]["custom"] = json!(false);
                    s[1].as_object_mut().unwrap().remove("id");
                },
                &[("m:m:C$a:b:T::a", "m:m:C$m:m:G::g")]
            )),
            Rule::IdentityToComponent
        );
        // Splits: an extra resource of another type matching `b` must copy
        // its flags.
        let split = |taint: bool| {
            move |s: &mut Vec<Value>| {
                let mut extra = s[2].clone();
                extra["urn"] = json!(u("m:m:C$a:b:V::b2"));
                extra["type"] = json!("a:b:V");
                extra["taint"] = json!(taint);
                s.push(extra);
            }
        };
        env.run(split(true), &[]).unwrap();
        assert_eq!(rule(env.run(split(false), &[])), Rule::SplitFlagsConflict);
        // A copy of the same type is a second owner of `b`'s object.
        assert_eq!(
            rule(env.run(
                |s| {
                    let mut copy = s[2].clone();
                    copy["urn"] = json!(u("m:m:C$a:b:T::b2"));
                    s.push(copy);
                },
                &[]
            )),
            Rule::IdentityDuplicated
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    let mut extra = s[2].clone();
                    extra["urn"] = json!(u("m:m:C$a:b:T::n"));
                    extra["id"] = json!("fresh");
                    s.push(extra);
                },
                &[]
            )),
            Rule::UnmatchedCustom
        );
    }

    #[test]
    fn structure_rows() {
        let env = Env::new();
        assert_eq!(
            rule(env.run(
                |s| {
                    s[0]["parent"] = json!(PROV);
                },
                &[]
            )),
            Rule::RootParentChanged
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    s[1]["parent"] = json!(s[2]["urn"].clone());
                    s[2]["parent"] = json!(s[1]["urn"].clone());
                },
                &[]
            )),
            Rule::ParentCycle
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    s[1]["parent"] = json!(STACK);
                },
                &[]
            )),
            Rule::NotDescendant
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    s[1]["dependencies"] = json!([u("a:b:T::gone")]);
                },
                &[]
            )),
            Rule::DanglingReference
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    s[1]["dependencies"] = json!(["garbage"]);
                },
                &[]
            )),
            Rule::DanglingReference
        );
        env.run(
            |s| {
                s[1]["dependencies"] = json!([PROV]);
            },
            &[],
        )
        .unwrap();
        assert_eq!(
            rule(env.run(
                |s| {
                    s[0]["provider"] = json!("nonsense");
                },
                &[]
            )),
            Rule::InvalidProviderRef
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    s[1]["provider"] = json!(format!("{PROV}::other"));
                },
                &[]
            )),
            Rule::ProviderChanged
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    s[1]["extensionRef"] = json!("ext");
                },
                &[]
            )),
            Rule::ExtensionChanged
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    s[0]["extensionRef"] = json!("ext");
                },
                &[]
            )),
            Rule::UnknownExtension
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    s[0]["delete"] = json!(true);
                },
                &[]
            )),
            Rule::ResultPendingDelete
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    s.remove(0);
                },
                &[]
            )),
            Rule::Unaccounted
        );
    }

    #[test]
    fn providers_must_not_change() {
        let mut prior = prior();
        // A provider inside the subtree.
        prior.insert(
            3,
            st(
                json!({"urn": u("m:m:C$pulumi:providers:a::inner"), "custom": true, "id": "x",
                      "type": "pulumi:providers:a", "parent": u("m:m:C::c")}),
            ),
        );
        let mut env = Env::new();
        env.prior = prior;
        env.subtree = Subtree::collect(&env.prior.iter().collect::<Vec<_>>(), 2);
        assert_eq!(
            rule(env.run(
                |s| {
                    s[1]["inputs"] = json!({"k": "v"});
                },
                &[]
            )),
            Rule::ProviderStateChanged
        );
        assert_eq!(
            rule(env.run(
                |s| {
                    let mut p = s[1].clone();
                    p["urn"] = json!(u("m:m:C$pulumi:providers:a::new"));
                    s.push(p);
                },
                &[]
            )),
            Rule::ProviderStateIntroduced
        );
    }

    #[test]
    fn extension_names() {
        assert!(extension_known(&json!({"ext": {}}), &json!("ext")));
        assert!(extension_known(
            &json!([{"name": "ext"}]),
            &json!({"name": "ext"})
        ));
        assert!(!extension_known(&Value::Null, &json!("ext")));
        assert!(!extension_known(&json!({"ext": {}}), &json!(3)));
    }
}
