//! Preparing the transaction (`migrations.md` §6) and the journal layout
//! with its replay (§10).
//!
//! [`prepare`] rewrites every retained prior state with `original -> final`
//! (a state that does not change stays the same object: no copy), builds
//! the candidate list (the prior list without the subtree, the whole result
//! inserted at the position of the last prior subtree member), sorts it
//! with the deterministic topological sort of §6.3 ([`sort`]) and verifies
//! the integrity of the sorted list ([`verify`]) — in time proportional to
//! the migration when [`Shortcut`] can decide, else over the whole list. The [`Prepared`] result
//! says, slot by slot, where each state of the new prior list comes from,
//! so that a committer can keep the `Arc` of every retained state
//! ([`Prepared::into_transaction`]), and carries the journal entry's
//! `layout`, `states` and `baseStatePatches`; [`apply_layout`] is the
//! replay, the exact inverse.

#[cfg(test)]
use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::chain::ChainOutcome;
use super::incremental::Shortcut;
use super::rewrite::Unmapped;
use super::rules::{MigrationError, Result};
use super::subtree::Subtree;
use crate::model::fasthash::FastMap;
#[cfg(test)]
use crate::model::fasthash::FastSet;
use crate::model::state::Reference;
use crate::model::urn::split_reference;
use crate::model::{ProviderRef, State, Urn};
#[cfg(test)]
use crate::sync::shim::{Arc, Mutex};
#[cfg(test)]
use crate::sync::{Slot as CommitSlot, Transaction};

/// Where one state of the prepared prior list comes from.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Slot {
    /// A retained prior state, by its index in the prior (base) list, with
    /// its prepared copy when its references changed (`None`: the same
    /// object, unchanged).
    Base {
        /// Its index in the prior list.
        index: usize,
        /// The rewritten copy, when something changed.
        patched: Option<Box<State>>,
    },
    /// A state of the migration's result, by its index in
    /// [`Prepared::states`].
    Result {
        /// Its index in [`Prepared::states`].
        index: usize,
    },
}

/// One item of a journal `state-migration` entry's layout: `{"baseIndex":
/// i}` or `{"stateIndex": j}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum LayoutItem {
    /// A retained base state, by its index in the base snapshot.
    Base(usize),
    /// A result state, by its index in the entry's `states`.
    State(usize),
}

impl Serialize for LayoutItem {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        match self {
            Self::Base(i) => m.serialize_entry("baseIndex", i)?,
            Self::State(j) => m.serialize_entry("stateIndex", j)?,
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for LayoutItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LayoutItem;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("{\"baseIndex\": i} or {\"stateIndex\": j}")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<LayoutItem, A::Error> {
                let mut item = None;
                while let Some(key) = map.next_key::<String>()? {
                    let value: usize = map.next_value()?;
                    let next = match key.as_str() {
                        "baseIndex" => LayoutItem::Base(value),
                        "stateIndex" => LayoutItem::State(value),
                        other => {
                            return Err(de::Error::unknown_field(
                                other,
                                &["baseIndex", "stateIndex"],
                            ))
                        }
                    };
                    if item.replace(next).is_some() {
                        return Err(de::Error::custom("a layout item has exactly one key"));
                    }
                }
                item.ok_or_else(|| de::Error::custom("an empty layout item"))
            }
        }
        d.deserialize_map(V)
    }
}

/// A prepared migration transaction (§6): the new prior list, slot by
/// slot, and the journal entry's parts (§10).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Prepared {
    /// The sorted, verified prior list: where each state comes from.
    pub order: Vec<Slot>,
    /// The result states in their prepared (sorted) order: the journal
    /// entry's `states`.
    pub states: Vec<State>,
    /// The journal entry's `layout` (one item per slot of `order`).
    pub layout: Vec<LayoutItem>,
    /// Base indices of the retained states whose references changed
    /// (ascending): the journal entry's `baseStatePatches` indices.
    pub base_patches: Vec<usize>,
}

impl Prepared {
    #[cfg(test)]
    /// The state in slot `slot`, given the prior (base) list.
    pub(crate) fn state_at<'a, S: std::borrow::Borrow<State>>(
        &'a self,
        base: &'a [S],
        slot: usize,
    ) -> &'a State {
        match &self.order[slot] {
            Slot::Base {
                patched: Some(p), ..
            } => p,
            Slot::Base { index, .. } => base[*index].borrow(),
            Slot::Result { index } => &self.states[*index],
        }
    }

    #[cfg(test)]
    /// The URNs of the prepared prior list, in order.
    pub(crate) fn urns<'a, S: std::borrow::Borrow<State>>(&'a self, base: &'a [S]) -> Vec<&'a Urn> {
        (0..self.order.len())
            .map(|i| &self.state_at(base, i).urn)
            .collect()
    }

    #[cfg(test)]
    /// The prepared prior list as owned states (what full-checkpoint
    /// persistence writes).
    pub(crate) fn prior_list<S: std::borrow::Borrow<State>>(&self, base: &[S]) -> Vec<State> {
        (0..self.order.len())
            .map(|i| self.state_at(base, i).clone())
            .collect()
    }

    #[cfg(test)]
    /// The retained rewrites: each patched base index and its prepared copy,
    /// in ascending index order (the journal's `baseStatePatches`).
    pub(crate) fn base_patch_states(&self) -> Vec<(usize, &State)> {
        let mut out: Vec<(usize, &State)> = self
            .order
            .iter()
            .filter_map(|s| match s {
                Slot::Base {
                    index,
                    patched: Some(p),
                } => Some((*index, &**p)),
                _ => None,
            })
            .collect();
        out.sort_by_key(|(i, _)| *i);
        out
    }

    #[cfg(test)]
    /// The commit transaction (§7) over the live prior list `live` (the
    /// list the prior indices refer to): a retained state keeps its `Arc`
    /// (with its prepared copy when its references changed), a result state
    /// gets a new one. `current_rewrites` is left empty for the caller.
    ///
    /// # Panics
    /// When a base index is out of bounds of `live`.
    pub(crate) fn into_transaction(self, live: &[Arc<Mutex<State>>]) -> Transaction<State> {
        let mut states: Vec<Option<State>> = self.states.into_iter().map(Some).collect();
        let list = self
            .order
            .into_iter()
            .map(|slot| match slot {
                Slot::Base {
                    index,
                    patched: Some(prepared),
                } => CommitSlot::Retained {
                    live: live[index].clone(),
                    prepared,
                },
                Slot::Base {
                    index,
                    patched: None,
                } => CommitSlot::Fresh(live[index].clone()),
                Slot::Result { index } => CommitSlot::Fresh(Arc::new(Mutex::new(
                    states[index].take().unwrap_or_default(),
                ))),
            })
            .collect();
        Transaction {
            current_rewrites: Vec::new(),
            list,
        }
    }
}

/// Copies the fields a commit publishes (§7 step 2: `parent`,
/// `dependencies`, `propertyDependencies`, `deletedWith`, `replaceWith`,
/// `viewOf`, `provider`, `inputs`, `outputs`, `replacementTrigger`) from a
/// prepared copy into a live state. (For an implementation of
/// [`crate::sync::CommitFields`] on [`State`].)
pub(crate) fn copy_commit_fields(from: &State, into: &mut State) {
    into.parent.clone_from(&from.parent);
    into.dependencies.clone_from(&from.dependencies);
    into.property_dependencies
        .clone_from(&from.property_dependencies);
    into.rare.edit(|r| {
        r.deleted_with.clone_from(&from.rare.deleted_with);
        r.replace_with.clone_from(&from.rare.replace_with);
        r.view_of.clone_from(&from.rare.view_of);
        r.replacement_trigger
            .clone_from(&from.rare.replacement_trigger);
    });
    into.provider.clone_from(&from.provider);
    into.inputs.clone_from(&from.inputs);
    into.outputs.clone_from(&from.outputs);
}

/// A member of the candidate list.
#[derive(Clone, Copy)]
enum Candidate {
    Base(usize),
    Result(usize),
}

/// Prepares the transaction of a changing migration (§6 steps 1–4) over
/// the prior list `prior`, its `subtree` and the chain's `outcome` (which
/// passed [`validate`](super::check::validate); every subtree member,
/// including one pending deletion — which `pending-delete` refuses
/// beforehand — leaves the list). Step 5 (`news`/`reads`) is
/// [`ChainOutcome::rewrite_outside`] on each such state.
///
/// # Errors
/// `invalid-snapshot` when the candidate list has a cycle or the sorted
/// list fails integrity (`checkpoint.md` §4).
pub(crate) fn prepare(
    registration: &Urn,
    prior: &[&State],
    subtree: &Subtree,
    outcome: &ChainOutcome,
) -> Result<Prepared> {
    let Scanned {
        mut patched,
        candidates,
        shortcut,
    } = scan(prior, subtree, outcome);
    let order = match shortcut.and_then(|sc| sc.sort(prior, subtree, &patched)) {
        Some(order) => {
            debug_assert_eq!(
                Ok(&order),
                full_order(prior, outcome, &patched, &candidates).as_ref(),
                "the incremental sort agrees with the full sort"
            );
            order
        }
        None => full_order(prior, outcome, &patched, &candidates)
            .map_err(|e| MigrationError::invalid_snapshot(registration, e))?,
    };
    let mut prepared = Prepared {
        order: Vec::with_capacity(order.len()),
        states: Vec::with_capacity(outcome.result.len()),
        layout: Vec::with_capacity(order.len()),
        base_patches: patched.keys().copied().collect(),
    };
    for &c in &order {
        match candidates[c] {
            Candidate::Base(index) => {
                let p = patched.remove(&index).map(Box::new);
                prepared.order.push(Slot::Base { index, patched: p });
                prepared.layout.push(LayoutItem::Base(index));
            }
            Candidate::Result(r) => {
                let j = prepared.states.len();
                prepared.states.push(outcome.result[r].clone());
                prepared.order.push(Slot::Result { index: j });
                prepared.layout.push(LayoutItem::State(j));
            }
        }
    }
    prepared.base_patches.sort_unstable();
    Ok(prepared)
}

/// Steps 1 and 2 of [`prepare`]: the retained rewrites, the candidate
/// list, and the incremental sort fed with every retained state.
struct Scanned<'a> {
    /// Rewritten copies of the retained states whose references changed,
    /// by prior index (sparse: most states do not change).
    patched: FastMap<usize, State>,
    /// The candidate list: the retained states in prior order, the result
    /// inserted where the subtree's last member stood.
    candidates: Vec<Candidate>,
    /// The incremental sort, unless it declined already.
    shortcut: Option<Shortcut<'a>>,
}

fn scan<'a>(prior: &[&'a State], subtree: &Subtree, outcome: &'a ChainOutcome) -> Scanned<'a> {
    // 1. Retained rewrites, and what the shortcut needs to know.
    let mut patched: FastMap<usize, State> = FastMap::default();
    let mut unmapped = Unmapped::default();
    let mut shortcut = Shortcut::new(prior, subtree, outcome);
    for (i, s) in prior.iter().enumerate() {
        if !subtree.contains(i) {
            if let Some(p) = outcome.rewrite_outside_noting(s, &mut unmapped) {
                patched.insert(i, p);
            }
            if let Some(sc) = &mut shortcut {
                sc.note(i, s);
            }
        }
    }
    // 2. The candidate list.
    let last = subtree
        .all_sorted()
        .last()
        .copied()
        .unwrap_or(subtree.root());
    let mut candidates: Vec<Candidate> = Vec::with_capacity(prior.len() + outcome.result.len());
    for i in 0..prior.len() {
        if i == last {
            candidates.extend((0..outcome.result.len()).map(Candidate::Result));
        }
        if !subtree.contains(i) {
            candidates.push(Candidate::Base(i));
        }
    }
    Scanned {
        patched,
        candidates,
        shortcut,
    }
}

/// Steps 3 and 4 over the whole candidate list: [`sort_verified`].
///
/// # Errors
/// A description of a cycle or of a broken integrity rule.
fn full_order(
    prior: &[&State],
    outcome: &ChainOutcome,
    patched: &FastMap<usize, State>,
    candidates: &[Candidate],
) -> std::result::Result<Vec<usize>, String> {
    let list: Vec<&State> = candidates
        .iter()
        .map(|c| match *c {
            Candidate::Base(i) => patched.get(&i).unwrap_or(prior[i]),
            Candidate::Result(r) => &outcome.result[r],
        })
        .collect();
    let order = sort_verified(&list)?;
    debug_assert!(verify(&order.iter().map(|&i| list[i]).collect::<Vec<_>>()).is_ok());
    Ok(order)
}

/// Both orders of a transaction, for tests: the incremental sort's (`None`:
/// it declined) and the full sort's.
#[cfg(test)]
pub(crate) fn both_orders(
    prior: &[&State],
    subtree: &Subtree,
    outcome: &ChainOutcome,
) -> (Option<Vec<usize>>, std::result::Result<Vec<usize>, String>) {
    let Scanned {
        patched,
        candidates,
        shortcut,
    } = scan(prior, subtree, outcome);
    let fast = shortcut.and_then(|sc| sc.sort(prior, subtree, &patched));
    (fast, full_order(prior, outcome, &patched, &candidates))
}

#[cfg(test)]
/// The deterministic topological sort of §6.3 over `list` (the candidate
/// list): depth-first post-order in list order; a state's edges are its
/// provider, parent, dependencies, property dependencies, `deletedWith` and
/// `replaceWith`; its unvisited targets are visited in ascending list
/// position. Where a URN has a pending-delete copy and a live one, an edge
/// from a pending-delete state goes to the pending-delete copy (the nearest
/// one before it, else the first) and any other edge to the live one; a
/// provider edge goes to a copy with the referenced ID when there is one.
/// Targets that are not in the list are ignored (integrity reports them).
/// An already sorted list comes out unchanged.
///
/// Returns the sorted positions.
///
/// # Errors
/// A description of a cycle.
pub(crate) fn sort(list: &[&State]) -> std::result::Result<Vec<usize>, String> {
    let graph = Graph::build(list);
    graph.sort(list)
}

/// [`sort`], then the integrity rules of `checkpoint.md` §4 on the sorted
/// list (the same rules as [`verify`], decided from the sort's graph: every
/// resolved edge target precedes its source once sorted, so no second pass
/// over the list is needed).
///
/// # Errors
/// A description of a cycle or of a broken integrity rule.
pub(crate) fn sort_verified(list: &[&State]) -> std::result::Result<Vec<usize>, String> {
    let graph = Graph::build(list);
    if let Some(problem) = graph.problem {
        return Err(problem);
    }
    graph.sort(list)
}

/// The reference graph of a candidate list.
struct Graph {
    /// `edges[starts[v]..starts[v + 1]]`: state `v`'s targets, resolved,
    /// ascending and de-duplicated.
    starts: Vec<usize>,
    edges: Vec<usize>,
    /// The first integrity problem found (in list order), if any.
    problem: Option<String>,
}

impl Graph {
    fn build(list: &[&State]) -> Self {
        #[derive(Default)]
        struct Copies {
            live: Option<usize>,
            deleted: Vec<usize>,
        }
        let mut problem: Option<String> = None;
        let mut note = |p: String| {
            problem.get_or_insert(p);
        };
        let mut by_urn: FastMap<&str, Copies> = FastMap::default();
        by_urn.reserve(list.len());
        for (i, s) in list.iter().enumerate() {
            let c = by_urn.entry(s.urn.as_str()).or_default();
            if s.delete {
                c.deleted.push(i);
            } else if c.live.is_none() {
                c.live = Some(i);
            } else {
                note(format!(
                    "more than one resource with URN {} is not marked for deletion",
                    s.urn
                ));
            }
        }
        // The copy an edge from `from` to URN `target` goes to; with `id`, a
        // provider copy with that ID.
        let resolve = |target: &str, from: usize, id: Option<&str>| -> Option<usize> {
            let c = by_urn.get(target)?;
            let ok = |i: &usize| id.is_none_or(|id| list[*i].ty.is_provider() && list[*i].id == id);
            if list[from].delete {
                let before = c.deleted.iter().rev().find(|&&d| d < from && ok(&d));
                if let Some(d) = before.or_else(|| c.deleted.iter().find(|d| ok(d))) {
                    return Some(*d);
                }
            }
            c.live
                .filter(ok)
                .or_else(|| c.deleted.iter().copied().find(ok))
        };
        let mut starts: Vec<usize> = Vec::with_capacity(list.len() + 1);
        let mut edges: Vec<usize> = Vec::with_capacity(list.len() * 2);
        // The last provider reference and the last other target resolved
        // from a state not pending deletion (whose edges do not depend on
        // where it stands): neighbours mostly share their provider and
        // parent, and comparing the text costs less than hashing it and
        // probing a table of every URN.
        let mut last_provider: Option<(&str, Option<usize>)> = None;
        let mut last_target: Option<(&str, Option<usize>)> = None;
        for (v, s) in list.iter().enumerate() {
            let from = edges.len();
            starts.push(from);
            if s.urn.is_empty() {
                note(format!("resource #{v} has no URN"));
            } else if s.ty.is_empty() {
                note(format!("resource {} has no type", s.urn));
            } else if !s.custom && !s.id.is_empty() {
                note(format!(
                    "component resource {} has an ID (`{}`)",
                    s.urn, s.id
                ));
            }
            if !s.provider.is_empty() {
                let found = match last_provider {
                    Some((text, found)) if !s.delete && text == s.provider => found,
                    _ => {
                        let found = split_reference(&s.provider)
                            .and_then(|(u, id)| resolve(u, v, Some(id)));
                        if !s.delete {
                            last_provider = Some((&s.provider, found));
                        }
                        found
                    }
                };
                match found {
                    Some(t) => edges.push(t),
                    None => note(match ProviderRef::parse(&s.provider) {
                        Err(e) => {
                            format!("resource {} has an invalid provider reference: {e}", s.urn)
                        }
                        Ok(_) => format!(
                            "resource {}'s provider {} is not in the list",
                            s.urn, s.provider
                        ),
                    }),
                }
            }
            for (kind, target) in s.references() {
                let found = match last_target {
                    Some((text, found)) if !s.delete && text == target.as_str() => found,
                    _ => {
                        let found = resolve(target.as_str(), v, None);
                        if !s.delete {
                            last_target = Some((target.as_str(), found));
                        }
                        found
                    }
                };
                match found {
                    Some(t) => edges.push(t),
                    None => note(format!(
                        "resource {}'s {kind} {target} is not in the list",
                        s.urn
                    )),
                }
            }
            edges[from..].sort_unstable();
            let mut w = from;
            for r in from..edges.len() {
                if r == from || edges[r] != edges[w - 1] {
                    edges[w] = edges[r];
                    w += 1;
                }
            }
            edges.truncate(w);
        }
        starts.push(edges.len());
        Self {
            starts,
            edges,
            problem,
        }
    }

    fn targets(&self, v: usize) -> &[usize] {
        &self.edges[self.starts[v]..self.starts[v + 1]]
    }

    /// Depth-first post-order in list order (iterative).
    fn sort(&self, list: &[&State]) -> std::result::Result<Vec<usize>, String> {
        const NEW: u8 = 0;
        const OPEN: u8 = 1;
        const DONE: u8 = 2;
        let mut mark = vec![NEW; list.len()];
        let mut out = Vec::with_capacity(list.len());
        // (state, index of its next target)
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for start in 0..list.len() {
            if mark[start] != NEW {
                continue;
            }
            mark[start] = OPEN;
            stack.push((start, 0));
            while let Some((v, k)) = stack.last_mut() {
                let v = *v;
                if let Some(&t) = self.targets(v).get(*k) {
                    *k += 1;
                    match mark[t] {
                        NEW => {
                            mark[t] = OPEN;
                            stack.push((t, 0));
                        }
                        OPEN => {
                            let mut cycle: Vec<&str> = stack
                                .iter()
                                .skip_while(|(x, _)| *x != t)
                                .map(|(x, _)| list[*x].urn.as_str())
                                .collect();
                            cycle.push(list[t].urn.as_str());
                            return Err(format!(
                                "its resources refer to each other in a cycle: {}",
                                cycle.join(" -> ")
                            ));
                        }
                        _ => {}
                    }
                } else {
                    mark[v] = DONE;
                    out.push(v);
                    stack.pop();
                }
            }
        }
        Ok(out)
    }
}

/// The integrity rules of `checkpoint.md` §4 over a resource list (the
/// rules of [`crate::model::integrity::verify_resources`], over borrowed
/// states so the prepared list need not be cloned).
///
/// # Errors
/// A description of the first broken rule.
pub(crate) fn verify(list: &[&State]) -> std::result::Result<(), String> {
    let mut seen: FastMap<&str, bool> = FastMap::default();
    seen.reserve(list.len());
    let mut providers: FastMap<&str, Vec<&str>> = FastMap::default();
    for (index, s) in list.iter().enumerate() {
        if s.urn.is_empty() {
            return Err(format!("resource #{index} has no URN"));
        }
        let urn = s.urn.as_str();
        if s.ty.is_empty() {
            return Err(format!("resource {urn} has no type"));
        }
        if !s.custom && !s.id.is_empty() {
            return Err(format!("component resource {urn} has an ID (`{}`)", s.id));
        }
        if !s.provider.is_empty() {
            let known = split_reference(&s.provider)
                .is_some_and(|(u, id)| providers.get(u).is_some_and(|ids| ids.contains(&id)));
            if !known {
                return Err(match ProviderRef::parse(&s.provider) {
                    Err(e) => format!("resource {urn} has an invalid provider reference: {e}"),
                    Ok(_) => format!(
                        "resource {urn}'s provider {} is not a provider listed before it",
                        s.provider
                    ),
                });
            }
        }
        for (kind, target) in s.references() {
            if !seen.contains_key(target.as_str()) {
                let what = if kind == Reference::Parent {
                    "parent".to_owned()
                } else {
                    kind.to_string()
                };
                return Err(format!(
                    "resource {urn}'s {what} {target} is not a resource listed before it"
                ));
            }
        }
        let live = seen.entry(urn).or_insert(false);
        if !s.delete {
            if *live {
                return Err(format!(
                    "more than one resource with URN {urn} is not marked for deletion"
                ));
            }
            *live = true;
        }
        if s.ty.is_provider() {
            providers.entry(urn).or_default().push(&s.id);
        }
    }
    Ok(())
}

#[cfg(test)]
/// Replays a journal `state-migration` entry over the base list: walks
/// `layout`, taking each retained base state (or its patch from
/// `base_patches`) and each result state from `states`; base indices the
/// layout omits are removed. The inverse of [`prepare`]'s layout.
///
/// # Errors
/// A description of what is malformed (an index out of bounds, an index
/// used twice, a state not placed, a patch for a removed or unknown base
/// index, a patch given twice). Nothing is changed.
pub(crate) fn apply_layout(
    base: &[State],
    layout: &[LayoutItem],
    states: &[State],
    base_patches: &[(usize, State)],
) -> std::result::Result<Vec<State>, String> {
    let mut base_used: FastSet<usize> = FastSet::default();
    let mut state_used = vec![false; states.len()];
    for item in layout {
        match *item {
            LayoutItem::Base(i) => {
                if i >= base.len() {
                    return Err(format!(
                        "layout names base index {i} but the base has {} resources",
                        base.len()
                    ));
                }
                if !base_used.insert(i) {
                    return Err(format!("layout names base index {i} twice"));
                }
            }
            LayoutItem::State(j) => {
                let Some(used) = state_used.get_mut(j) else {
                    return Err(format!(
                        "layout names state index {j} but the entry has {} states",
                        states.len()
                    ));
                };
                if std::mem::replace(used, true) {
                    return Err(format!("layout names state index {j} twice"));
                }
            }
        }
    }
    if let Some(j) = state_used.iter().position(|u| !u) {
        return Err(format!("state {j} of the entry is not in the layout"));
    }
    let mut patches: HashMap<usize, &State> = HashMap::with_capacity(base_patches.len());
    for (i, s) in base_patches {
        if !base_used.contains(i) {
            return Err(format!(
                "a base patch names index {i}, which the layout does not keep"
            ));
        }
        if patches.insert(*i, s).is_some() {
            return Err(format!("two base patches name index {i}"));
        }
    }
    Ok(layout
        .iter()
        .map(|item| match *item {
            LayoutItem::Base(i) => patches.get(&i).copied().unwrap_or(&base[i]).clone(),
            LayoutItem::State(j) => states[j].clone(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::chain::{CallbackOutput, Chain};
    use crate::model::integrity::verify_resources;
    use serde_json::{json, Value};

    const PROV: &str = "urn:pulumi:dev::app::pulumi:providers:pkgA::default";

    fn u(rest: &str) -> String {
        format!("urn:pulumi:dev::app::{rest}")
    }

    fn st(j: Value) -> State {
        serde_json::from_value(j).unwrap()
    }

    /// The worked example of §6: [Provider, Root, OldChild, Consumer, Tail].
    fn example() -> (Vec<State>, Subtree, ChainOutcome) {
        let prov = format!("{PROV}::pid");
        let prior = vec![
            st(json!({"urn": PROV, "custom": true, "id": "pid", "type": "pulumi:providers:pkgA"})),
            st(json!({"urn": u("m:m:Root::root"), "custom": false, "type": "m:m:Root"})),
            st(
                json!({"urn": u("m:m:Root$a:b:T::old"), "custom": true, "id": "c", "type": "a:b:T",
                      "parent": u("m:m:Root::root"), "provider": prov}),
            ),
            st(
                json!({"urn": u("a:b:Consumer::consumer"), "custom": true, "id": "k", "type": "a:b:Consumer",
                      "dependencies": [u("m:m:Root$a:b:T::old")], "provider": prov}),
            ),
            st(
                json!({"urn": u("m:m:Root$a:b:U::tail"), "custom": true, "id": "t", "type": "a:b:U",
                      "parent": u("m:m:Root::root"), "dependencies": [u("a:b:Consumer::consumer")],
                      "provider": prov}),
            ),
        ];
        let refs: Vec<&State> = prior.iter().collect();
        let subtree = Subtree::collect(&refs, 1);
        let mut chain = Chain::new(
            Urn::parse(&u("m:m:Root::root")).unwrap(),
            subtree.states(&refs),
        );
        let mut s = chain.input_json()["oldState"].as_array().unwrap().clone();
        s[1]["urn"] = json!(u("m:m:Root$a:b:T::new"));
        chain
            .apply(
                1,
                1,
                CallbackOutput::Changed {
                    new_state: Value::Array(s),
                    successors: [(u("m:m:Root$a:b:T::old"), u("m:m:Root$a:b:T::new"))].into(),
                },
            )
            .unwrap();
        (prior, subtree, chain.finish().unwrap())
    }

    fn names(p: &Prepared, base: &[State]) -> Vec<String> {
        p.urns(base).iter().map(|u| u.name().to_owned()).collect()
    }

    #[test]
    fn the_worked_example() {
        let (prior, subtree, outcome) = example();
        let reg = Urn::parse(&u("m:m:Root::root")).unwrap();
        let p = prepare(&reg, &prior.iter().collect::<Vec<_>>(), &subtree, &outcome).unwrap();
        assert_eq!(
            names(&p, &prior),
            ["default", "root", "new", "consumer", "tail"]
        );
        assert_eq!(
            p.layout,
            [
                LayoutItem::Base(0),
                LayoutItem::State(0),
                LayoutItem::State(1),
                LayoutItem::Base(3),
                LayoutItem::State(2)
            ]
        );
        assert_eq!(p.base_patches, [3]);
        assert_eq!(
            serde_json::to_value(&p.layout).unwrap(),
            json!([{"baseIndex": 0}, {"stateIndex": 0}, {"stateIndex": 1}, {"baseIndex": 3}, {"stateIndex": 2}])
        );
        assert_eq!(
            p.state_at(&prior, 3).dependencies,
            vec![Urn::parse(&u("m:m:Root$a:b:T::new")).unwrap()]
        );
        // Unchanged retained states are not copied.
        assert!(matches!(
            p.order[0],
            Slot::Base {
                index: 0,
                patched: None
            }
        ));
        let list = p.prior_list(&prior);
        verify_resources(&list).unwrap();

        // Replay reproduces the prepared list.
        let patches: Vec<(usize, State)> = p
            .base_patch_states()
            .into_iter()
            .map(|(i, s)| (i, s.clone()))
            .collect();
        let json_layout: Vec<LayoutItem> =
            serde_json::from_value(serde_json::to_value(&p.layout).unwrap()).unwrap();
        assert_eq!(
            apply_layout(&prior, &json_layout, &p.states, &patches).unwrap(),
            list
        );

        // Commit slots keep the live Arcs.
        let live: Vec<Arc<Mutex<State>>> = prior
            .iter()
            .cloned()
            .map(|s| Arc::new(Mutex::new(s)))
            .collect();
        let tx = p.into_transaction(&live);
        assert_eq!(tx.list.len(), 5);
        assert!(matches!(&tx.list[0], CommitSlot::Fresh(a) if Arc::ptr_eq(a, &live[0])));
        assert!(
            matches!(&tx.list[3], CommitSlot::Retained { live: a, .. } if Arc::ptr_eq(a, &live[3]))
        );
    }

    #[test]
    fn malformed_layouts_are_refused() {
        let (prior, subtree, outcome) = example();
        let reg = Urn::parse(&u("m:m:Root::root")).unwrap();
        let p = prepare(&reg, &prior.iter().collect::<Vec<_>>(), &subtree, &outcome).unwrap();
        let patch = |i: usize| vec![(i, prior[i].clone())];
        let l = &p.layout;
        assert!(apply_layout(&prior, &[LayoutItem::Base(9)], &[], &[]).is_err());
        assert!(apply_layout(
            &prior,
            &[LayoutItem::Base(0), LayoutItem::Base(0)],
            &[],
            &[]
        )
        .is_err());
        assert!(apply_layout(&prior, &[LayoutItem::State(0)], &[], &[]).is_err());
        assert!(apply_layout(&prior, &l[..4], &p.states, &[]).is_err()); // state 2 not placed
        assert!(apply_layout(&prior, l, &p.states, &patch(2)).is_err()); // removed index
        let mut two = patch(3);
        two.extend(patch(3));
        assert!(apply_layout(&prior, l, &p.states, &two).is_err());
        for bad in [
            json!({}),
            json!({"baseIndex": 1, "stateIndex": 2}),
            json!({"base": 1}),
            json!({"baseIndex": -1}),
        ] {
            assert!(serde_json::from_value::<LayoutItem>(bad).is_err());
        }
    }

    #[test]
    fn sorted_lists_are_unchanged_and_cycles_fail() {
        let (prior, _, _) = example();
        let list: Vec<&State> = prior.iter().collect();
        assert_eq!(sort(&list).unwrap(), [0, 1, 2, 3, 4]);
        verify(&list).unwrap();
        let mut a = prior[3].clone();
        a.dependencies.push(prior[4].urn.clone());
        let cyc: Vec<&State> = vec![&prior[0], &prior[1], &prior[2], &a, &prior[4]];
        assert!(sort(&cyc).unwrap_err().contains("cycle"));
    }

    #[test]
    fn pending_delete_edges_go_to_pending_delete_copies() {
        let mk = |name: &str, deps: &[&str], delete: bool| {
            let deps: Vec<String> = deps.iter().map(|d| u(&format!("a:b:T::{d}"))).collect();
            st(
                json!({"urn": u(&format!("a:b:T::{name}")), "custom": true, "id": name, "type": "a:b:T",
                      "dependencies": deps, "delete": delete}),
            )
        };
        // [x(live), y(deleted, depends on x), x(deleted)]: y's edge goes to
        // the deleted copy of x, which comes after it.
        let list = [
            mk("x", &[], false),
            mk("y", &["x"], true),
            mk("x", &[], true),
        ];
        let refs: Vec<&State> = list.iter().collect();
        assert_eq!(sort(&refs).unwrap(), [0, 2, 1]);

        // [a(live, depends on t), b(deleted, depends on t), t(deleted),
        // t(live)]: the same target text resolves to the live copy for a
        // and to the deleted copy for b, though b follows a (an edge
        // resolved once is not reused for a state pending deletion).
        let list = [
            mk("a", &["t"], false),
            mk("b", &["t"], true),
            mk("t", &[], true),
            mk("t", &[], false),
        ];
        let refs: Vec<&State> = list.iter().collect();
        assert_eq!(sort(&refs).unwrap(), [3, 0, 2, 1]);

        // The same with one provider reference and two copies of the
        // provider (same URN and ID).
        let prov = u("pulumi:providers:pkgA::p");
        let uses = |name: &str, delete: bool| {
            st(
                json!({"urn": u(&format!("a:b:T::{name}")), "custom": true, "id": name, "type": "a:b:T",
                      "provider": format!("{prov}::1"), "delete": delete}),
            )
        };
        let provider = |delete: bool| {
            st(
                json!({"urn": prov, "custom": true, "id": "1", "type": "pulumi:providers:pkgA",
                      "delete": delete}),
            )
        };
        let list = [
            uses("a", false),
            uses("b", true),
            provider(true),
            provider(false),
        ];
        let refs: Vec<&State> = list.iter().collect();
        assert_eq!(sort(&refs).unwrap(), [3, 0, 2, 1]);
    }

    #[test]
    fn local_verify_agrees_with_the_model() {
        let (prior, _, _) = example();
        let mut wrong_id = prior[2].clone();
        wrong_id.provider = format!("{PROV}::other").into();
        let mut deleted_prov = prior[0].clone();
        deleted_prov.delete = true;
        deleted_prov.id = "old".into();
        let mut uses_old = prior[3].clone();
        uses_old.provider = format!("{PROV}::old").into();
        let mut component_id = prior[1].clone();
        component_id.id = "x".into();
        let mut self_parent = prior[1].clone();
        self_parent.parent = prior[1].urn.clone();
        let mut deleted_root = prior[1].clone();
        deleted_root.delete = true;
        let cases: Vec<Vec<State>> = vec![
            prior.clone(),
            vec![prior[1].clone(), prior[0].clone()],
            vec![prior[2].clone(), prior[1].clone()],
            vec![
                prior[4].clone(),
                prior[0].clone(),
                prior[1].clone(),
                prior[3].clone(),
                prior[2].clone(),
            ],
            vec![prior[0].clone(), prior[3].clone()],
            vec![prior[0].clone(), prior[0].clone()],
            vec![prior[0].clone(), prior[1].clone(), wrong_id],
            vec![
                deleted_prov.clone(),
                prior[0].clone(),
                prior[1].clone(),
                prior[2].clone(),
                uses_old,
            ],
            vec![component_id],
            vec![self_parent],
            vec![
                prior[1].clone(),
                deleted_root,
                prior[0].clone(),
                prior[2].clone(),
            ],
        ];
        for c in cases {
            let refs: Vec<&State> = c.iter().collect();
            assert_eq!(verify(&refs).is_ok(), verify_resources(&c).is_ok(), "{c:?}");
            let model = sort(&refs).is_ok_and(|order| {
                let sorted: Vec<State> = order.iter().map(|&i| c[i].clone()).collect();
                verify_resources(&sorted).is_ok()
            });
            assert_eq!(sort_verified(&refs).is_ok(), model, "{c:?}");
        }
    }
}

/// Property tests of [`sort`]: over any acyclic reference graph listed in
/// any order, the result is a permutation that puts every reference target
/// (provider, parent, dependencies, property dependencies, `deletedWith`)
/// before its source, passes [`verify`] and the model's integrity check,
/// is deterministic and leaves an already sorted list unchanged; a loop is
/// refused.
#[cfg(test)]
mod props {
    use proptest::prelude::*;
    use proptest::sample::Index;
    use serde_json::json;

    use super::*;
    use crate::model::integrity::verify_resources;

    const PROV: &str = "urn:pulumi:dev::app::pulumi:providers:pkgA::default";

    fn urn(i: usize) -> String {
        if i == 0 {
            PROV.to_owned()
        } else {
            format!("urn:pulumi:dev::app::a:b:T::r{i}")
        }
    }

    /// The references of resource `i` (`1..`), to resources before it.
    #[derive(Clone, Debug)]
    struct Refs {
        provider: bool,
        parent: Option<Index>,
        dependencies: Vec<Index>,
        property: Vec<Index>,
        deleted_with: Option<Index>,
    }

    fn refs() -> impl Strategy<Value = Refs> {
        (
            any::<bool>(),
            proptest::option::of(any::<Index>()),
            proptest::collection::vec(any::<Index>(), 0..3),
            proptest::collection::vec(any::<Index>(), 0..2),
            proptest::option::weighted(0.2, any::<Index>()),
        )
            .prop_map(
                |(provider, parent, dependencies, property, deleted_with)| Refs {
                    provider,
                    parent,
                    dependencies,
                    property,
                    deleted_with,
                },
            )
    }

    /// Resources in an order where every reference points earlier: a
    /// provider, then resources `1..n` referring to earlier non-provider
    /// resources (and to the provider by their `provider` field).
    fn states(refs: &[Refs]) -> Vec<State> {
        let mut out = vec![serde_json::from_value(json!({"urn": PROV, "custom": true,
            "id": "pid", "type": "pulumi:providers:pkgA"}))
        .unwrap()];
        for (k, r) in refs.iter().enumerate() {
            let i = k + 1;
            // An earlier resource other than the provider, if there is one.
            let earlier = |x: &Index| (i > 1).then(|| urn(1 + x.index(i - 1)));
            let mut v = json!({"urn": urn(i), "custom": true, "id": format!("id{i}"),
                "type": "a:b:T"});
            if r.provider {
                v["provider"] = json!(format!("{PROV}::pid"));
            }
            if let Some(p) = r.parent.as_ref().and_then(earlier) {
                v["parent"] = json!(p);
            }
            let deps: Vec<String> = r.dependencies.iter().filter_map(earlier).collect();
            if !deps.is_empty() {
                v["dependencies"] = json!(deps);
            }
            let prop: Vec<String> = r.property.iter().filter_map(earlier).collect();
            if !prop.is_empty() {
                v["propertyDependencies"] = json!({"x": prop});
            }
            if let Some(d) = r.deleted_with.as_ref().and_then(earlier) {
                v["deletedWith"] = json!(d);
            }
            out.push(serde_json::from_value::<State>(v).unwrap());
        }
        out
    }

    /// The URNs `s` refers to, its provider's included.
    fn targets(s: &State) -> Vec<String> {
        let provider = split_reference(&s.provider).map(|(u, _)| u.to_owned());
        provider
            .into_iter()
            .chain(s.references().map(|(_, u)| u.as_str().to_owned()))
            .collect()
    }

    /// Resources and a shuffle of their positions.
    fn graph() -> impl Strategy<Value = (Vec<Refs>, Vec<usize>)> {
        (1usize..12).prop_flat_map(|n| {
            (
                proptest::collection::vec(refs(), n - 1),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn the_sort_puts_every_target_before_its_source((refs, shuffle) in graph()) {
            let ordered = states(&refs);
            let list: Vec<&State> = shuffle.iter().map(|&i| &ordered[i]).collect();
            let order = sort(&list).unwrap();
            // A permutation of the input.
            let mut seen = order.clone();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..list.len()).collect::<Vec<_>>());
            // Every target before its source.
            let sorted: Vec<&State> = order.iter().map(|&i| list[i]).collect();
            for (p, s) in sorted.iter().enumerate() {
                for t in targets(s) {
                    let at = sorted.iter().position(|x| x.urn.as_str() == t);
                    prop_assert!(at.is_some_and(|a| a < p), "{} refers to {} after it", s.urn, t);
                }
            }
            verify(&sorted).unwrap();
            let owned: Vec<State> = sorted.iter().map(|s| (*s).clone()).collect();
            prop_assert!(verify_resources(&owned).is_ok());
            prop_assert_eq!(sort_verified(&list).unwrap(), order.clone());
            // Deterministic, and a sorted list comes out unchanged.
            prop_assert_eq!(sort(&list).unwrap(), order);
            prop_assert_eq!(sort(&sorted).unwrap(), (0..sorted.len()).collect::<Vec<_>>());
            let generated: Vec<&State> = ordered.iter().collect();
            prop_assert_eq!(sort(&generated).unwrap(), (0..ordered.len()).collect::<Vec<_>>());
        }

        #[test]
        fn a_loop_is_refused(
            (refs, shuffle) in graph(),
            from in any::<Index>(),
            to in any::<Index>(),
        ) {
            let mut ordered = states(&refs);
            prop_assume!(ordered.len() > 1);
            // Resource `a` (not the provider) comes to depend on `b` at or
            // after it, which `b` itself, or through a dependency on `a`,
            // refers back to.
            let a = 1 + from.index(ordered.len() - 1);
            let b = a + to.index(ordered.len() - a);
            let urn_a = ordered[a].urn.clone();
            let urn_b = ordered[b].urn.clone();
            ordered[a].dependencies.push(urn_b);
            if !ordered[b].dependencies.contains(&urn_a) {
                ordered[b].dependencies.push(urn_a);
            }
            let list: Vec<&State> = shuffle.iter().map(|&i| &ordered[i]).collect();
            let e = sort(&list).unwrap_err();
            prop_assert!(e.contains("cycle"), "{}", e);
        }
    }
}
