//! State surgery on a [`Deployment`], sans-IO: `keel state delete`,
//! `protect`/`unprotect`, `rename`, `repair` and `move` compute their new
//! state here; [`super::state_cmds`] locks, verifies and writes it.
//!
//! Each function either changes the deployment and says what it did, or
//! fails with an [`EditError`] naming the resource and leaves the
//! deployment as it was (the CLI then writes nothing). References follow a
//! renamed or moved resource through `migrate::rewrite`, so
//! `parent`, `dependencies`, `propertyDependencies`, `deletedWith`,
//! `replaceWith`, provider references and resource references inside
//! properties all stay consistent.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::migrate::rewrite::{identity_in, rewrite, SuccessorMap};
use crate::model::rare::Rare;
use crate::model::urn::STACK_TYPE;
use crate::model::{Deployment, State, TypeToken, Urn};

/// Why a state edit was refused (nothing was changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// No resource of the stack has this URN.
    #[error("no resource of stack `{stack}` has the URN {urn}; `keel state show` lists them")]
    NoSuchResource {
        /// The stack.
        stack: String,
        /// The URN given.
        urn: String,
    },
    /// A protected resource would be deleted.
    #[error("{urn} is protected: it can't be deleted from the state; `keel state unprotect` it first, or pass --force")]
    Protected {
        /// The resource.
        urn: String,
    },
    /// Other resources refer to the one to delete.
    #[error("{urn} can't be deleted safely: {} depend on it ({}); delete them first, or pass --target-dependents", .dependents.len(), .dependents.join(", "))]
    HasDependents {
        /// The resource.
        urn: String,
        /// The resources referring to it (children, dependents, users of a provider).
        dependents: Vec<String>,
    },
    /// The new name is not a valid resource name.
    #[error("`{name}` is not a valid resource name: {reason}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The new URN is already a resource's.
    #[error("{urn} already exists in stack `{stack}`; choose another name")]
    Exists {
        /// The URN taken.
        urn: String,
        /// The stack.
        stack: String,
    },
    /// `state move` names a provider.
    #[error("{urn} is a provider: providers are not moved themselves, they are copied along with the resources that use them")]
    MoveProvider {
        /// The provider.
        urn: String,
    },
    /// `state move` from a stack onto itself.
    #[error("--source and --dest are both `{0}`: choose two different stacks")]
    SameStack(String),
    /// A provider of the same URN but another configuration is in the destination.
    #[error("provider {urn} already exists in stack `{stack}` with other inputs; rename one of them first (`keel state rename`)")]
    ProviderConflict {
        /// The provider's URN in the destination.
        urn: String,
        /// The destination stack.
        stack: String,
    },
    /// `state repair` met a cycle or a broken provider reference.
    #[error("the state cannot be repaired automatically: {0}; export it (`keel stack export`), fix it by hand and import it (`keel stack import`)")]
    Unrepairable(String),
}

/// Resources matching `urn` (live and pending-delete copies), or
/// [`EditError::NoSuchResource`].
fn locate(d: &Deployment, stack: &str, urn: &str) -> Result<Urn, EditError> {
    d.resources
        .iter()
        .find(|r| r.urn.as_str() == urn)
        .map(|r| r.urn.clone())
        .ok_or_else(|| EditError::NoSuchResource {
            stack: stack.to_owned(),
            urn: urn.to_owned(),
        })
}

/// Every URN `s` refers to: parent, dependencies, property dependencies,
/// `deletedWith`, `replaceWith` and its provider.
fn refs(s: &State) -> Vec<Urn> {
    crate::plan::graph::edges(s).collect()
}

/// The resources that refer to any of `set`, transitively (children,
/// dependents, resources using a provider of the set), in state order,
/// excluding the set itself.
pub fn dependents(d: &Deployment, set: &BTreeSet<Urn>) -> Vec<Urn> {
    let mut closed: HashSet<Urn> = set.iter().cloned().collect();
    let mut out = Vec::new();
    loop {
        let mut grew = false;
        for s in &d.resources {
            if !closed.contains(&s.urn) && refs(s).iter().any(|u| closed.contains(u)) {
                closed.insert(s.urn.clone());
                out.push(s.urn.clone());
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let order: HashMap<&Urn, usize> = d
        .resources
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.urn, i))
        .collect();
    out.sort_by_key(|u| order.get(u).copied().unwrap_or(usize::MAX));
    out.dedup();
    out
}

/// `state delete`: removes the resource `urn` (every copy with that URN)
/// from `d`. Refuses a protected resource unless `force`, and one others
/// refer to unless `target_dependents` (which deletes them too, refusing
/// protected ones unless `force`). Returns the URNs deleted, in state
/// order.
///
/// # Errors
/// [`EditError::NoSuchResource`], [`EditError::Protected`],
/// [`EditError::HasDependents`].
pub fn delete(
    d: &mut Deployment,
    stack: &str,
    urn: &str,
    force: bool,
    target_dependents: bool,
) -> Result<Vec<Urn>, EditError> {
    let urn = locate(d, stack, urn)?;
    let mut set: BTreeSet<Urn> = BTreeSet::from([urn.clone()]);
    let deps = dependents(d, &set);
    if !deps.is_empty() && !target_dependents {
        return Err(EditError::HasDependents {
            urn: urn.to_string(),
            dependents: deps.iter().map(ToString::to_string).collect(),
        });
    }
    set.extend(deps);
    if !force {
        if let Some(p) = d
            .resources
            .iter()
            .find(|r| r.protect && set.contains(&r.urn))
        {
            return Err(EditError::Protected {
                urn: p.urn.to_string(),
            });
        }
    }
    let deleted: Vec<Urn> = d
        .resources
        .iter()
        .filter(|r| set.contains(&r.urn))
        .map(|r| r.urn.clone())
        .collect();
    d.resources.retain(|r| !set.contains(&r.urn));
    let mut seen = HashSet::new();
    Ok(deleted
        .into_iter()
        .filter(|u| seen.insert(u.clone()))
        .collect())
}

/// `state delete --all`: removes every resource from `d`, refusing when
/// one is protected unless `force`. Returns the URNs deleted.
///
/// # Errors
/// [`EditError::Protected`].
pub fn delete_all(d: &mut Deployment, force: bool) -> Result<Vec<Urn>, EditError> {
    if !force {
        if let Some(p) = d.resources.iter().find(|r| r.protect) {
            return Err(EditError::Protected {
                urn: p.urn.to_string(),
            });
        }
    }
    let mut seen = HashSet::new();
    let gone = std::mem::take(&mut d.resources)
        .into_iter()
        .map(|r| r.urn)
        .filter(|u| seen.insert(u.clone()))
        .collect();
    Ok(gone)
}

/// Which resources `protect`/`unprotect` touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every live resource.
    All,
    /// These URNs.
    Urns(Vec<String>),
}

/// `state protect` / `state unprotect`: sets the `protect` flag of the
/// selected live resources. Returns the URNs whose flag changed.
///
/// # Errors
/// [`EditError::NoSuchResource`] for a URN of no live resource (nothing is
/// changed then).
pub fn set_protect(
    d: &mut Deployment,
    stack: &str,
    which: &Selection,
    protect: bool,
) -> Result<Vec<Urn>, EditError> {
    let chosen: Option<HashSet<&str>> = match which {
        Selection::All => None,
        Selection::Urns(urns) => {
            for u in urns {
                if !d.resources.iter().any(|r| !r.delete && r.urn.as_str() == u) {
                    return Err(EditError::NoSuchResource {
                        stack: stack.to_owned(),
                        urn: u.clone(),
                    });
                }
            }
            Some(urns.iter().map(String::as_str).collect())
        }
    };
    let mut changed = Vec::new();
    for r in &mut d.resources {
        let hit = !r.delete && chosen.as_ref().is_none_or(|c| c.contains(r.urn.as_str()));
        if hit && r.protect != protect {
            r.protect = protect;
            changed.push(r.urn.clone());
        }
    }
    Ok(changed)
}

/// `state rename`: gives the resource `urn` the name `new_name` (its URN's
/// last part) and makes every reference follow. Children keep their URNs
/// (a URN names its parent's type, not its name), as in Pulumi. Returns
/// the new URN.
///
/// # Errors
/// [`EditError::NoSuchResource`], [`EditError::BadName`],
/// [`EditError::Exists`].
pub fn rename(
    d: &mut Deployment,
    stack: &str,
    urn: &str,
    new_name: &str,
) -> Result<Urn, EditError> {
    let old = locate(d, stack, urn)?;
    let bad = |reason: String| EditError::BadName {
        name: new_name.to_owned(),
        reason,
    };
    if new_name.is_empty() {
        return Err(bad("it is empty".into()));
    }
    if new_name.contains("::") {
        return Err(bad("it contains `::`".into()));
    }
    let new = old.with_name(new_name).map_err(|e| bad(e.to_string()))?;
    if new == old {
        return Ok(new);
    }
    if d.resources.iter().any(|r| r.urn == new) {
        return Err(EditError::Exists {
            urn: new.to_string(),
            stack: stack.to_owned(),
        });
    }
    let map: SuccessorMap = [(old.clone(), new.clone())].into();
    for r in &mut d.resources {
        if r.urn == old {
            r.urn = new.clone();
        }
    }
    rewrite_all(d, &map);
    Ok(new)
}

/// Rewrites every reference of every resource and pending operation of
/// `d` with `map`.
fn rewrite_all(d: &mut Deployment, map: &SuccessorMap) {
    let snapshot = d.resources.clone();
    let identity = identity_in(&snapshot);
    for r in &mut d.resources {
        if let Some(n) = rewrite(r, map, &identity) {
            *r = n;
        }
    }
    for p in &mut d.pending_operations {
        if let Some(u) = map.get(&p.resource.urn) {
            p.resource.urn = u.clone();
        }
        if let Some(n) = rewrite(&p.resource, map, &identity) {
            p.resource = n;
        }
    }
}

/// What `state repair` changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Resources moved in the order: (URN, old position, new position).
    pub reordered: Vec<(String, usize, usize)>,
    /// References dropped because they name no resource: (resource, kind,
    /// missing URN).
    pub pruned: Vec<(String, String, String)>,
    /// Pending operations dropped as duplicates: (URN, operation).
    pub duplicate_pending: Vec<(String, String)>,
    /// URNs rewritten because a parent was dropped (the parent type leaves
    /// the URN, of the orphan and of its descendants): (old, new).
    pub renamed: Vec<(String, String)>,
}

impl RepairReport {
    /// True when nothing was changed.
    pub fn is_empty(&self) -> bool {
        self.reordered.is_empty()
            && self.pruned.is_empty()
            && self.duplicate_pending.is_empty()
            && self.renamed.is_empty()
    }

    /// One line per change, for the user.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (u, from, to) in &self.reordered {
            out.push(format!("move {u} from position {from} to {to}"));
        }
        for (u, kind, missing) in &self.pruned {
            out.push(format!("drop {u}'s {kind} {missing} (no such resource)"));
        }
        for (u, op) in &self.duplicate_pending {
            out.push(format!("drop a duplicate pending {op} of {u}"));
        }
        for (old, new) in &self.renamed {
            out.push(format!("rename {old} to {new} (its parent chain changed)"));
        }
        out
    }

    /// The report as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "reordered": self.reordered.iter().map(|(u, f, t)| serde_json::json!({"urn": u, "from": f, "to": t})).collect::<Vec<_>>(),
            "pruned": self.pruned.iter().map(|(u, k, m)| serde_json::json!({"urn": u, "kind": k, "missing": m})).collect::<Vec<_>>(),
            "duplicatePending": self.duplicate_pending.iter().map(|(u, o)| serde_json::json!({"urn": u, "type": o})).collect::<Vec<_>>(),
            "renamed": self.renamed.iter().map(|(o, n)| serde_json::json!({"from": o, "to": n})).collect::<Vec<_>>(),
        })
    }
}

/// `state repair`: sorts the resources so each comes after everything it
/// refers to (stably: an already ordered state keeps its order), drops
/// references to resources that are not in the state (a missing parent
/// is cleared), and drops duplicate pending operations (same resource and
/// operation). Provider references are not pruned: a resource whose
/// provider is gone cannot be repaired automatically.
///
/// # Errors
/// [`EditError::Unrepairable`] for a dependency cycle.
pub fn repair(d: &mut Deployment) -> Result<RepairReport, EditError> {
    let mut report = RepairReport::default();
    // Prune first, so missing resources do not count as edges.
    let present: HashSet<Urn> = d.resources.iter().map(|r| r.urn.clone()).collect();
    for r in &mut d.resources {
        let urn = r.urn.to_string();
        let drop = |kind: &str, u: &Urn, report: &mut RepairReport| {
            report
                .pruned
                .push((urn.clone(), kind.to_owned(), u.to_string()));
        };
        if !r.parent.is_empty() && !present.contains(&r.parent) {
            drop("parent", &r.parent, &mut report);
            r.parent = Urn::default();
        }
        let missing: Vec<Urn> = r
            .dependencies
            .iter()
            .filter(|u| !present.contains(*u))
            .cloned()
            .collect();
        for u in &missing {
            drop("dependency", u, &mut report);
        }
        if !missing.is_empty() {
            r.dependencies.retain(|u| present.contains(u));
        }
        let mut prop_changes = Vec::new();
        for (k, list) in &r.property_dependencies {
            if let Some(list) = list {
                if list.iter().any(|u| !present.contains(u)) {
                    for u in list.iter().filter(|u| !present.contains(*u)) {
                        drop(&format!("property dependency `{k}`"), u, &mut report);
                    }
                    let kept: Vec<Urn> = list
                        .iter()
                        .filter(|u| present.contains(*u))
                        .cloned()
                        .collect();
                    prop_changes.push((k.clone(), kept));
                }
            }
        }
        for (k, kept) in prop_changes {
            r.property_dependencies.insert(k, Some(kept));
        }
        if !r.rare.deleted_with.is_empty() && !present.contains(&*r.rare.deleted_with) {
            drop("deletedWith", &r.rare.deleted_with, &mut report);
            r.rare.edit(|rare| rare.deleted_with = Rare::default());
        }
        let missing: Vec<Urn> = r
            .rare
            .replace_with
            .iter()
            .filter(|u| !present.contains(*u))
            .cloned()
            .collect();
        for u in &missing {
            drop("replaceWith", u, &mut report);
        }
        if !missing.is_empty() {
            r.rare.edit(|rare| {
                if let Some(list) = rare.replace_with.get_mut() {
                    list.retain(|u| present.contains(u));
                }
            });
        }
    }
    // A stable topological sort: of the resources whose references are
    // all placed, the earliest in the old order goes next.
    let n = d.resources.len();
    let mut by_urn: HashMap<Urn, Vec<usize>> = HashMap::new();
    for (i, r) in d.resources.iter().enumerate() {
        by_urn.entry(r.urn.clone()).or_default().push(i);
    }
    let mut waiting = vec![0usize; n];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, r) in d.resources.iter().enumerate() {
        let mut targets: BTreeSet<usize> = BTreeSet::new();
        for u in refs(r) {
            for &j in by_urn.get(&u).into_iter().flatten() {
                if j != i {
                    targets.insert(j);
                }
            }
        }
        waiting[i] = targets.len();
        for j in targets {
            users[j].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &u in &users[i] {
            waiting[u] -= 1;
            if waiting[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() < n {
        let stuck: Vec<String> = (0..n)
            .filter(|i| waiting[*i] > 0)
            .map(|i| d.resources[i].urn.to_string())
            .collect();
        return Err(EditError::Unrepairable(format!(
            "a dependency cycle among {}",
            stuck.join(", ")
        )));
    }
    for (to, &from) in order.iter().enumerate() {
        if to != from {
            report
                .reordered
                .push((d.resources[from].urn.to_string(), from, to));
        }
    }
    if !report.reordered.is_empty() {
        let mut old: Vec<Option<State>> = std::mem::take(&mut d.resources)
            .into_iter()
            .map(Some)
            .collect();
        d.resources = order.iter().filter_map(|&i| old[i].take()).collect();
    }
    // A resource whose parent was dropped loses the parent's type from its
    // URN, and its descendants follow (as Pulumi's prune does); references
    // to the old URNs follow too.
    let orphans: HashSet<String> = report
        .pruned
        .iter()
        .filter(|(_, kind, _)| kind == "parent")
        .map(|(u, _, _)| u.clone())
        .collect();
    if !orphans.is_empty() {
        let mut map = SuccessorMap::new();
        for r in &d.resources {
            let parent_q = if orphans.contains(r.urn.as_str()) {
                None
            } else if let Some(p) = map.get(&r.parent) {
                Some(p.qualified_type().to_owned())
            } else {
                continue;
            };
            let Ok(ty) = TypeToken::parse(r.urn.type_str()) else {
                continue;
            };
            let Ok(new) = Urn::new(
                r.urn.stack(),
                r.urn.project(),
                parent_q.as_deref(),
                &ty,
                r.urn.name(),
            ) else {
                continue;
            };
            if new != r.urn {
                map.insert(r.urn.clone(), new);
            }
        }
        for r in &mut d.resources {
            if let Some(n) = map.get(&r.urn) {
                report.renamed.push((r.urn.to_string(), n.to_string()));
                r.urn = n.clone();
            }
        }
        rewrite_all(d, &map);
    }
    // Duplicate pending operations: the same resource and operation.
    let mut seen = HashSet::new();
    let mut kept = Vec::with_capacity(d.pending_operations.len());
    for p in std::mem::take(&mut d.pending_operations) {
        let op = format!("{:?}", p.ty).to_lowercase();
        if seen.insert((p.resource.urn.clone(), op.clone())) {
            kept.push(p);
        } else {
            report
                .duplicate_pending
                .push((p.resource.urn.to_string(), op));
        }
    }
    d.pending_operations = kept;
    Ok(report)
}

/// A reference `state move` cut: a resource staying behind referred to a
/// moved one, or a moved one to one staying behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenReference {
    /// The resource whose reference was dropped (its URN before the move).
    pub urn: String,
    /// The kind of reference.
    pub kind: String,
    /// The URN it referred to.
    pub target: String,
}

/// What `state move` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// The resources moved (URNs in the source), in state order.
    pub moved: Vec<String>,
    /// Providers copied into the destination (URNs there).
    pub providers_copied: Vec<String>,
    /// References of resources left in the source to moved ones (dropped).
    pub broken_in_source: Vec<BrokenReference>,
    /// References of moved resources to ones left in the source (dropped).
    pub broken_in_dest: Vec<BrokenReference>,
}

/// Drops the references of `s` to any of `set` (parents excepted),
/// recording each.
fn break_refs(s: &mut State, set: &HashSet<Urn>, out: &mut Vec<BrokenReference>) {
    let urn = s.urn.to_string();
    let mut note = |kind: String, t: &Urn| {
        out.push(BrokenReference {
            urn: urn.clone(),
            kind,
            target: t.to_string(),
        });
    };
    for u in s.dependencies.iter().filter(|u| set.contains(*u)) {
        note("dependency".into(), u);
    }
    s.dependencies.retain(|u| !set.contains(u));
    for (k, list) in s.property_dependencies.iter_mut() {
        if let Some(list) = list {
            for u in list.iter().filter(|u| set.contains(*u)) {
                note(format!("property dependency `{k}`"), u);
            }
            list.retain(|u| !set.contains(u));
        }
    }
    if set.contains(&*s.rare.deleted_with) {
        note("deletedWith".into(), &s.rare.deleted_with);
        s.rare.edit(|r| r.deleted_with = Rare::default());
    }
    for u in s.rare.replace_with.iter().filter(|u| set.contains(*u)) {
        note("replaceWith".into(), u);
    }
    if let Some(list) = s.rare.get_mut().and_then(|r| r.replace_with.get_mut()) {
        list.retain(|u| !set.contains(u));
    }
}

/// `urn` in another stack and project.
fn restack(urn: &Urn, stack: &str, project: &str) -> Urn {
    if urn.is_empty() {
        return urn.clone();
    }
    let text = format!(
        "urn:pulumi:{stack}::{project}::{}::{}",
        urn.qualified_type(),
        urn.name()
    );
    Urn::parse(&text).unwrap_or_else(|_| urn.clone())
}

/// The project of a deployment's resources, if it has any.
fn project_of(d: &Deployment) -> Option<String> {
    d.resources.first().map(|r| r.urn.project().to_owned())
}

/// `state move`: moves the resources `urns` (with their descendants, and
/// with `include_parents` their ancestors) from `src` (stack `src_stack`)
/// to `dst` (stack `dst_stack`), as `pulumi state move` does: the
/// source's stack resource is never moved; providers the moved resources
/// use are copied (not moved) unless the destination already has them;
/// moved resources whose parent stays behind are parented to the
/// destination's stack resource (made if it has none); references between
/// moved resources and resources staying behind are dropped and reported.
/// URNs not in the source are reported and skipped (as `warnings`).
///
/// # Errors
/// [`EditError::SameStack`], [`EditError::NoSuchResource`] when none of
/// `urns` is in the source, [`EditError::MoveProvider`],
/// [`EditError::Exists`] when a moved URN is already in the destination,
/// [`EditError::ProviderConflict`].
pub fn move_resources(
    src: &mut Deployment,
    src_stack: &str,
    dst: &mut Deployment,
    dst_stack: &str,
    urns: &[String],
    include_parents: bool,
    warnings: &mut Vec<String>,
) -> Result<MoveReport, EditError> {
    if src_stack == dst_stack {
        return Err(EditError::SameStack(src_stack.to_owned()));
    }
    let root = |d: &Deployment| {
        d.resources
            .iter()
            .find(|r| r.ty.is_stack() && r.parent.is_empty() && !r.delete)
            .map(|r| r.urn.clone())
    };
    let src_root = root(src);
    let mut chosen: HashSet<Urn> = HashSet::new();
    for u in urns {
        let hits: Vec<&State> = src
            .resources
            .iter()
            .filter(|r| r.urn.as_str() == u)
            .collect();
        if hits.is_empty() {
            warnings.push(format!(
                "{u}: no such resource in stack `{src_stack}`; skipped"
            ));
            continue;
        }
        if hits.iter().any(|r| r.ty.is_provider()) {
            return Err(EditError::MoveProvider { urn: u.clone() });
        }
        chosen.insert(hits[0].urn.clone());
    }
    if chosen.is_empty() {
        return Err(EditError::NoSuchResource {
            stack: src_stack.to_owned(),
            urn: urns.join(", "),
        });
    }
    if include_parents {
        let parents: HashMap<Urn, Urn> = src
            .resources
            .iter()
            .filter(|r| !r.parent.is_empty())
            .map(|r| (r.urn.clone(), r.parent.clone()))
            .collect();
        let mut more = Vec::new();
        for u in &chosen {
            let mut cur = parents.get(u);
            // The stack resource is never moved (nor its other children).
            while let Some(p) = cur.filter(|p| Some(*p) != src_root.as_ref()) {
                more.push(p.clone());
                cur = parents.get(p);
            }
        }
        chosen.extend(more);
    }
    // Descendants always move with their parents.
    loop {
        let before = chosen.len();
        for r in &src.resources {
            if !r.parent.is_empty() && chosen.contains(&r.parent) {
                chosen.insert(r.urn.clone());
            }
        }
        if chosen.len() == before {
            break;
        }
    }
    if let Some(r) = &src_root {
        chosen.remove(r);
    }
    if chosen.is_empty() {
        return Err(EditError::NoSuchResource {
            stack: src_stack.to_owned(),
            urn: urns.join(", "),
        });
    }
    let project = project_of(dst)
        .or_else(|| project_of(src))
        .unwrap_or_default();
    // Split the source.
    let (moving, mut staying): (Vec<State>, Vec<State>) = src
        .resources
        .clone()
        .into_iter()
        .partition(|r| chosen.contains(&r.urn));
    let moved_set: HashSet<Urn> = moving.iter().map(|r| r.urn.clone()).collect();
    let staying_set: HashSet<Urn> = staying.iter().map(|r| r.urn.clone()).collect();
    let mut report = MoveReport {
        moved: moving.iter().map(|r| r.urn.to_string()).collect(),
        ..MoveReport::default()
    };
    for r in &mut staying {
        break_refs(r, &moved_set, &mut report.broken_in_source);
    }
    // Providers the moved resources use (they stay in the source).
    let used: BTreeSet<String> = moving
        .iter()
        .filter(|r| !r.provider.is_empty())
        .map(|r| r.provider.to_string())
        .collect();
    let providers: Vec<State> = staying
        .iter()
        .filter(|r| r.ty.is_provider() && used.contains(&format!("{}::{}", r.urn, r.id)))
        .cloned()
        .collect();
    // The destination's stack resource.
    let mut new_dst = dst.clone();
    let dst_root = match root(&new_dst) {
        Some(u) => u,
        None => {
            let ty = TypeToken::parse(STACK_TYPE).map_err(|e| EditError::BadName {
                name: STACK_TYPE.into(),
                reason: e.to_string(),
            })?;
            let urn = Urn::parse(&format!(
                "urn:pulumi:{dst_stack}::{project}::{STACK_TYPE}::{project}-{dst_stack}"
            ))
            .map_err(|e| EditError::BadName {
                name: dst_stack.to_owned(),
                reason: e.to_string(),
            })?;
            new_dst
                .resources
                .insert(0, State::new(urn.clone(), ty, false));
            urn
        }
    };
    let mut map = SuccessorMap::new();
    for r in moving.iter().chain(&providers) {
        map.insert(r.urn.clone(), restack(&r.urn, dst_stack, &project));
    }
    if let Some(r) = &src_root {
        map.insert(r.clone(), dst_root.clone());
    }
    // Provider references are rewritten as `<URN>::<ID>` strings.
    let mut provider_refs: BTreeMap<String, String> = BTreeMap::new();
    let mut to_add: Vec<State> = Vec::new();
    for p in &providers {
        let mut c = p.clone();
        if !moved_set.contains(&c.parent) {
            c.parent = src_root.clone().unwrap_or_default();
        }
        let new_urn = map.get(&c.urn).cloned().unwrap_or_else(|| c.urn.clone());
        if let Some(existing) = new_dst.resources.iter().find(|r| r.urn == new_urn) {
            if existing.id == c.id {
                continue;
            }
            if existing.inputs == c.inputs {
                provider_refs.insert(
                    format!("{}::{}", p.urn, p.id),
                    format!("{}::{}", existing.urn, existing.id),
                );
                continue;
            }
            return Err(EditError::ProviderConflict {
                urn: new_urn.to_string(),
                stack: dst_stack.to_owned(),
            });
        }
        c.dependencies.clear();
        c.property_dependencies.clear();
        c.rare.edit(|r| {
            r.deleted_with = Rare::default();
            r.replace_with = Rare::default();
        });
        to_add.push(c);
    }
    let mut moved_states = Vec::with_capacity(moving.len());
    for r in moving {
        let mut c = r;
        if !moved_set.contains(&c.parent) {
            c.parent = src_root.clone().unwrap_or_default();
        }
        break_refs(&mut c, &staying_set, &mut report.broken_in_dest);
        if let Some(n) = provider_refs.get(c.provider.as_str()) {
            c.provider = n.into();
        }
        moved_states.push(c);
    }
    let before = new_dst.resources.len();
    new_dst.resources.extend(to_add);
    new_dst.resources.extend(moved_states);
    let added: Vec<State> = new_dst.resources.split_off(before);
    // IDs do not change in a move: references keep theirs.
    let taken: HashSet<Urn> = new_dst.resources.iter().map(|r| r.urn.clone()).collect();
    for r in added {
        let mut r = rewrite(&r, &map, &|_| None).unwrap_or(r);
        let old = r.urn.clone();
        r.urn = map.get(&old).cloned().unwrap_or(old);
        if taken.contains(&r.urn) {
            return Err(EditError::Exists {
                urn: r.urn.to_string(),
                stack: dst_stack.to_owned(),
            });
        }
        if r.ty.is_provider() {
            report.providers_copied.push(r.urn.to_string());
        }
        new_dst.resources.push(r);
    }
    src.resources = staying;
    *dst = new_dst;
    Ok(report)
}

/// `state edit`'s summary: URNs added, removed and changed from `old` to
/// `new`.
pub fn diff_summary(old: &Deployment, new: &Deployment) -> (Vec<String>, Vec<String>, Vec<String>) {
    let index = |d: &Deployment| -> BTreeMap<String, serde_json::Value> {
        d.resources
            .iter()
            .map(|r| {
                (
                    format!("{}{}", r.urn, if r.delete { " (delete)" } else { "" }),
                    serde_json::to_value(r).unwrap_or_default(),
                )
            })
            .collect()
    };
    let (a, b) = (index(old), index(new));
    let added = b.keys().filter(|k| !a.contains_key(*k)).cloned().collect();
    let removed = a.keys().filter(|k| !b.contains_key(*k)).cloned().collect();
    let changed = a
        .iter()
        .filter(|(k, v)| b.get(*k).is_some_and(|w| w != *v))
        .map(|(k, _)| k.clone())
        .collect();
    (added, removed, changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const P: &str = "urn:pulumi:dev::proj::pulumi:providers:sim::default";

    fn u(name: &str) -> String {
        format!("urn:pulumi:dev::proj::sim:index:Bucket::{name}")
    }

    fn stack() -> serde_json::Value {
        json!({"urn": "urn:pulumi:dev::proj::pulumi:pulumi:Stack::proj-dev", "custom": false, "type": "pulumi:pulumi:Stack"})
    }

    fn res(name: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut v = json!({
            "urn": u(name), "custom": true, "type": "sim:index:Bucket", "id": format!("id-{name}"),
            "parent": "urn:pulumi:dev::proj::pulumi:pulumi:Stack::proj-dev",
            "provider": format!("{P}::p1"),
        });
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    }

    fn deployment(resources: Vec<serde_json::Value>) -> Deployment {
        let d = raw(resources);
        crate::model::integrity::verify(&d).unwrap();
        d
    }

    fn raw(resources: Vec<serde_json::Value>) -> Deployment {
        let mut all = vec![
            stack(),
            json!({"urn": P, "custom": true, "type": "pulumi:providers:sim", "id": "p1",
                   "parent": "urn:pulumi:dev::proj::pulumi:pulumi:Stack::proj-dev"}),
        ];
        all.extend(resources);
        let d: Deployment = serde_json::from_value(json!({
            "manifest": {"time": "", "magic": "", "version": ""},
            "resources": all,
        }))
        .unwrap();
        d
    }

    fn urns(d: &Deployment) -> Vec<String> {
        d.resources
            .iter()
            .map(|r| r.urn.name().to_owned())
            .collect()
    }

    #[test]
    fn delete_refuses_dependents_and_protected() {
        let base = deployment(vec![
            res("a", json!({})),
            res("b", json!({"dependencies": [u("a")]})),
            res("p", json!({"protect": true})),
        ]);
        let mut d = base.clone();
        let e = delete(&mut d, "dev", &u("a"), false, false).unwrap_err();
        assert!(
            matches!(e, EditError::HasDependents { ref dependents, .. } if dependents == &[u("b")])
        );
        assert_eq!(d, base);
        let e = delete(&mut d, "dev", &u("p"), false, false).unwrap_err();
        assert_eq!(e, EditError::Protected { urn: u("p") });
        let e = delete(&mut d, "dev", &u("zz"), false, false).unwrap_err();
        assert!(matches!(e, EditError::NoSuchResource { .. }));
        assert_eq!(d, base);

        let gone = delete(&mut d, "dev", &u("a"), false, true).unwrap();
        assert_eq!(gone.len(), 2);
        assert_eq!(urns(&d), ["proj-dev", "default", "p"]);
        crate::model::integrity::verify(&d).unwrap();
        let gone = delete(&mut d, "dev", &u("p"), true, false).unwrap();
        assert_eq!(gone.len(), 1);

        let mut d = base.clone();
        assert!(matches!(
            delete_all(&mut d, false),
            Err(EditError::Protected { .. })
        ));
        assert_eq!(d, base);
        assert_eq!(delete_all(&mut d, true).unwrap().len(), 5);
        assert!(d.resources.is_empty());
    }

    #[test]
    fn deleting_a_provider_needs_its_users_gone() {
        let mut d = deployment(vec![res("a", json!({}))]);
        let e = delete(&mut d, "dev", P, false, false).unwrap_err();
        assert!(matches!(e, EditError::HasDependents { .. }));
        delete(&mut d, "dev", P, false, true).unwrap();
        assert_eq!(urns(&d), ["proj-dev"]);
    }

    #[test]
    fn protect_and_unprotect() {
        let mut d = deployment(vec![
            res("a", json!({})),
            res("b", json!({"protect": true})),
        ]);
        let e = set_protect(&mut d, "dev", &Selection::Urns(vec![u("x")]), true).unwrap_err();
        assert!(matches!(e, EditError::NoSuchResource { .. }));
        let c = set_protect(&mut d, "dev", &Selection::Urns(vec![u("a")]), true).unwrap();
        assert_eq!(c.len(), 1);
        let c = set_protect(&mut d, "dev", &Selection::All, false).unwrap();
        assert_eq!(c.len(), 2);
        assert!(d.resources.iter().all(|r| !r.protect));
    }

    #[test]
    fn rename_rewrites_references() {
        let mut d = deployment(vec![
            res("a", json!({})),
            res(
                "b",
                json!({"dependencies": [u("a")], "propertyDependencies": {"x": [u("a")]}, "deletedWith": u("a")}),
            ),
        ]);
        let new = rename(&mut d, "dev", &u("a"), "c").unwrap();
        assert_eq!(new.as_str(), u("c"));
        let b = &d.resources[3];
        assert_eq!(b.dependencies[0].as_str(), u("c"));
        assert_eq!(b.rare.deleted_with.as_str(), u("c"));
        crate::model::integrity::verify(&d).unwrap();
        assert!(matches!(
            rename(&mut d, "dev", &u("c"), "b").unwrap_err(),
            EditError::Exists { .. }
        ));
        assert!(matches!(
            rename(&mut d, "dev", &u("c"), "").unwrap_err(),
            EditError::BadName { .. }
        ));
        // A provider's users follow its new URN.
        rename(&mut d, "dev", P, "renamed").unwrap();
        assert!(d.resources[2].provider.ends_with("::renamed::p1"));
        crate::model::integrity::verify(&d).unwrap();
    }

    #[test]
    fn repair_sorts_prunes_and_dedupes() {
        let mut d = raw(vec![
            res("a", json!({})),
            res(
                "b",
                json!({"dependencies": [u("a"), u("gone")], "deletedWith": u("gone")}),
            ),
        ]);
        d.resources.swap(2, 3);
        let p = d.resources[2].clone();
        d.pending_operations = serde_json::from_value(json!([
            {"resource": p, "type": "creating"}, {"resource": p, "type": "creating"}
        ]))
        .unwrap();
        assert!(crate::model::integrity::verify(&d).is_err());
        let report = repair(&mut d).unwrap();
        crate::model::integrity::verify(&d).unwrap();
        assert_eq!(urns(&d), ["proj-dev", "default", "a", "b"]);
        assert_eq!(report.pruned.len(), 2);
        assert_eq!(report.reordered.len(), 2);
        assert_eq!(report.duplicate_pending.len(), 1);
        assert_eq!(d.pending_operations.len(), 1);
        // Repairing a valid state changes nothing.
        assert!(repair(&mut d).unwrap().is_empty());
    }

    #[test]
    fn repair_drops_a_missing_parent_from_the_urns() {
        let comp = "urn:pulumi:dev::proj::my:c:C::gone";
        let child = "urn:pulumi:dev::proj::my:c:C$sim:index:Bucket::kid";
        let grandchild = "urn:pulumi:dev::proj::my:c:C$sim:index:Bucket$sim:index:Bucket::gk";
        let mut d = raw(vec![
            json!({"urn": child, "custom": true, "type": "sim:index:Bucket", "id": "1", "parent": comp, "provider": format!("{P}::p1")}),
            json!({"urn": grandchild, "custom": true, "type": "sim:index:Bucket", "id": "2", "parent": child, "provider": format!("{P}::p1")}),
            res("user", json!({"dependencies": [grandchild]})),
        ]);
        let report = repair(&mut d).unwrap();
        crate::model::integrity::verify(&d).unwrap();
        assert_eq!(report.renamed.len(), 2, "{report:?}");
        assert_eq!(
            d.resources[2].urn.as_str(),
            "urn:pulumi:dev::proj::sim:index:Bucket::kid"
        );
        assert_eq!(
            d.resources[3].urn.as_str(),
            "urn:pulumi:dev::proj::sim:index:Bucket$sim:index:Bucket::gk"
        );
        assert_eq!(d.resources[4].dependencies[0], d.resources[3].urn);
    }

    #[test]
    fn repair_refuses_cycles() {
        let mut d = deployment(vec![res("a", json!({})), res("b", json!({}))]);
        d.resources[2].dependencies = vec![Urn::parse(&u("b")).unwrap()];
        d.resources[3].dependencies = vec![Urn::parse(&u("a")).unwrap()];
        let before = d.clone();
        assert!(matches!(repair(&mut d), Err(EditError::Unrepairable(_))));
        let _ = before;
    }

    #[test]
    fn move_with_parents_takes_the_ancestors() {
        let kid = "urn:pulumi:dev::proj::sim:index:Bucket$sim:index:Bucket::kid";
        let mut src = deployment(vec![
            res("a", json!({})),
            json!({"urn": kid, "custom": true, "type": "sim:index:Bucket", "id": "k",
                   "parent": u("a"), "provider": format!("{P}::p1")}),
        ]);
        let mut dst = Deployment::default();
        let mut w = Vec::new();
        let alone = move_resources(
            &mut src.clone(),
            "dev",
            &mut Deployment::default(),
            "prod",
            &[kid.to_owned()],
            false,
            &mut w,
        )
        .unwrap();
        assert_eq!(alone.moved, [kid]);
        let both = move_resources(
            &mut src,
            "dev",
            &mut dst,
            "prod",
            &[kid.to_owned()],
            true,
            &mut w,
        )
        .unwrap();
        assert_eq!(both.moved, [u("a"), kid.to_owned()]);
        assert_eq!(urns(&src), ["proj-dev", "default"]);
        crate::model::integrity::verify(&dst).unwrap();
    }

    #[test]
    fn move_copies_providers_and_breaks_references() {
        let mut src = deployment(vec![
            res("a", json!({})),
            res("child", json!({"parent": u("a")})),
            res("b", json!({"dependencies": [u("a")]})),
        ]);
        let mut dst = Deployment::default();
        let mut warnings = Vec::new();
        let report = move_resources(
            &mut src,
            "dev",
            &mut dst,
            "prod",
            &[u("a"), u("nope")],
            false,
            &mut warnings,
        )
        .unwrap();
        assert_eq!(warnings.len(), 1);
        assert_eq!(report.moved, [u("a"), u("child")]);
        assert_eq!(report.broken_in_source.len(), 1);
        assert_eq!(urns(&src), ["proj-dev", "default", "b"]);
        assert_eq!(urns(&dst), ["proj-prod", "default", "a", "child"]);
        assert!(dst.resources.iter().all(|r| r.urn.stack() == "prod"));
        assert_eq!(
            dst.resources[3].parent.as_str(),
            "urn:pulumi:prod::proj::sim:index:Bucket::a"
        );
        assert!(dst.resources[2].provider.starts_with("urn:pulumi:prod::"));
        crate::model::integrity::verify(&src).unwrap();
        crate::model::integrity::verify(&dst).unwrap();
        // Moving again: the URN is taken.
        let mut src2 = deployment(vec![res("a", json!({}))]);
        let e = move_resources(
            &mut src2,
            "dev",
            &mut dst,
            "prod",
            &[u("a")],
            false,
            &mut warnings,
        )
        .unwrap_err();
        assert!(matches!(e, EditError::Exists { .. }));
        let e = move_resources(
            &mut src2,
            "dev",
            &mut dst,
            "prod",
            &[P.to_owned()],
            false,
            &mut warnings,
        )
        .unwrap_err();
        assert!(matches!(e, EditError::MoveProvider { .. }));
    }
}
