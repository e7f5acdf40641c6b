//! Persistence: the mutations the executor reports, the snapshot builder
//! that folds them into the current deployment (deterministic, no I/O), the
//! [`Persister`] trait and the in-memory implementation. The Persister
//! actor (`actors::persister`) is the single writer of state
//! (`architecture.md` §6).

pub mod backend;
pub mod checkpoint_file;
mod encode;
pub mod fs;
pub mod history;
pub mod journal;
pub mod journal_file;
pub mod migration;
#[cfg(feature = "postgres")]
pub mod pg;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::model::fasthash::FastMap;
use crate::model::snapshot::{OperationType, PendingOperation};
use crate::model::step::{lock, StateRef};
use crate::model::{Deployment, IntegrityError, PropertyMap, State};

/// Identifies one provider operation within an engine run.
pub type OpId = u64;

/// A change to the deployment.
#[derive(Debug, Clone)]
pub enum Change {
    /// `new` is written: it supersedes `old` (same, update, replacement of
    /// a pending one), or appears (create, read). With `mark_old_delete`,
    /// `old` stays, marked `delete` (the old half of a create-before-delete
    /// replace).
    Write {
        /// The prior state superseded, if any.
        old: Option<StateRef>,
        /// The state written.
        new: StateRef,
        /// Keep `old`, marked for deletion.
        mark_old_delete: bool,
    },
    /// `old` is written unchanged (a same step with nothing to change): the
    /// same state object moves to the written states; nothing is copied.
    Keep {
        /// The prior state kept.
        old: StateRef,
    },
    /// `old` leaves the deployment (delete).
    Remove {
        /// The state removed.
        old: StateRef,
    },
    /// `old` stays, marked `pendingReplacement` (deleted by a
    /// delete-before-replace, awaiting its replacement).
    MarkPendingReplacement {
        /// The state marked.
        old: StateRef,
    },
    /// `old` takes the refreshed fields, or leaves when the object is gone.
    Refresh {
        /// The state refreshed.
        old: StateRef,
        /// The refreshed state; `None`: the object no longer exists.
        new: Option<Box<State>>,
    },
    /// A state's outputs are set (`RegisterResourceOutputs`).
    Outputs {
        /// The state.
        state: StateRef,
        /// The outputs.
        outputs: PropertyMap,
    },
    /// Prior states take their schema-upgraded contents (`architecture.md`
    /// §8): one change for the whole batch, sent before anything else.
    Upgrade {
        /// Each prior state and what it becomes.
        states: Vec<(StateRef, Box<State>)>,
    },
}

/// One mutation reported to the persister.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// A provider operation is about to start (it starts only once this is
    /// durable).
    Begin {
        /// The operation.
        op: OpId,
        /// What it does.
        kind: OperationType,
        /// The resource as it is now (for a create: the goal). Shared:
        /// the builder keeps it as the pending operation and the journal
        /// entry borrows it, neither copies it.
        state: Arc<State>,
    },
    /// The operation finished with this change.
    End {
        /// The operation.
        op: OpId,
        /// Its effect.
        change: Change,
    },
    /// The operation failed; nothing changed.
    Failed {
        /// The operation.
        op: OpId,
    },
    /// A change with no provider call.
    Apply(Change),
    /// A component migration (applied to the builder once durable).
    Migration(Box<migration::MigrationMutation>),
}

/// When a journal persister compacts ([`SnapshotBuilder::compact_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compaction {
    /// Before an operation's first mutation ([`Persister::rebase`]).
    Start,
    /// In the middle of an operation: more writes follow, and the base
    /// records how many leading states this operation wrote (they stay
    /// ahead of later writes on replay).
    Mid,
    /// At the end of an operation: nothing follows, and the builder's
    /// states become the returned deployment.
    End,
}

/// Folds mutations into the current deployment: the new states in the
/// order they were written, then the prior states not yet superseded or
/// removed, in their prior order. Because a registration is planned only
/// after everything it depends on was written, this order keeps every
/// reference pointing earlier. After a compaction in the middle of an
/// operation ([`SnapshotBuilder::rebase`]), the states this operation wrote
/// so far lead the prior list (`olds[..split]`) and stay ahead of the
/// states written after it.
#[derive(Debug)]
pub struct SnapshotBuilder {
    base: Deployment,
    olds: Vec<StateRef>,
    old_pos: FastMap<usize, usize>,
    old_done: Vec<bool>,
    news: Vec<StateRef>,
    new_pos: FastMap<usize, usize>,
    new_done: Vec<bool>,
    pending: BTreeMap<OpId, (OperationType, Arc<State>)>,
    /// The leading prior states written by this operation (before news).
    split: usize,
    /// Resources a refresh found gone, with their parents: references to
    /// them are dropped from the others (children move to the parent).
    vanished: HashMap<crate::model::Urn, crate::model::Urn>,
    /// What served each package in this operation (recorded in the
    /// manifest of every snapshot: [`Deployment::record_serving`]).
    served: BTreeMap<String, String>,
}

/// The state behind `r`: moved out when `r` is its last handle, copied
/// otherwise.
fn take_state(r: StateRef) -> State {
    match Arc::try_unwrap(r) {
        Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
        Err(r) => lock(&r).clone(),
    }
}

fn key(s: &StateRef) -> usize {
    Arc::as_ptr(s) as usize
}

impl SnapshotBuilder {
    /// A builder over `base` (its resources become the prior states, shared
    /// as `olds`).
    pub fn new(mut base: Deployment, olds: Vec<StateRef>) -> Self {
        base.resources.clear();
        let old_pos = olds.iter().enumerate().map(|(i, s)| (key(s), i)).collect();
        let old_done = vec![false; olds.len()];
        Self {
            base,
            olds,
            old_pos,
            old_done,
            news: Vec::new(),
            new_pos: FastMap::default(),
            new_done: Vec::new(),
            pending: BTreeMap::new(),
            split: 0,
            vanished: HashMap::new(),
            served: BTreeMap::new(),
        }
    }

    /// Marks the first `split` prior states as written by the operation in
    /// flight (replay after a mid-operation compaction).
    pub fn with_split(mut self, split: usize) -> Self {
        self.split = split.min(self.olds.len());
        self
    }

    /// How many leading prior states this operation wrote.
    pub fn split(&self) -> usize {
        self.split
    }

    /// Shares a deployment's resources as state references.
    pub fn share_resources(d: &mut Deployment) -> Vec<StateRef> {
        std::mem::take(&mut d.resources)
            .into_iter()
            .map(crate::model::step::share)
            .collect()
    }

    fn retire(&mut self, s: &StateRef) {
        // A kept prior state is in both lists: its written position counts.
        let k = key(s);
        if let Some(&i) = self.new_pos.get(&k) {
            self.new_done[i] = true;
        } else if let Some(&i) = self.old_pos.get(&k) {
            self.old_done[i] = true;
        }
    }

    fn apply_change(&mut self, c: &Change) {
        match c {
            Change::Write {
                old,
                new,
                mark_old_delete,
            } => {
                if let Some(old) = old {
                    if *mark_old_delete {
                        lock(old).delete = true;
                    } else {
                        self.retire(old);
                    }
                }
                self.new_pos.insert(key(new), self.news.len());
                self.news.push(new.clone());
                self.new_done.push(false);
            }
            Change::Keep { old } => {
                self.retire(old);
                self.new_pos.insert(key(old), self.news.len());
                self.news.push(old.clone());
                self.new_done.push(false);
            }
            Change::Remove { old } => self.retire(old),
            Change::MarkPendingReplacement { old } => {
                let mut s = lock(old);
                s.pending_replacement = true;
                s.delete = false;
            }
            Change::Refresh { old, new } => match new {
                Some(n) => *lock(old) = (**n).clone(),
                None => {
                    let s = lock(old);
                    self.vanished.insert(s.urn.clone(), s.parent.clone());
                    drop(s);
                    self.retire(old);
                }
            },
            Change::Outputs { state, outputs } => lock(state).outputs = outputs.clone(),
            Change::Upgrade { states } => {
                for (s, new) in states {
                    *lock(s) = (**new).clone();
                }
            }
        }
    }

    /// Applies one mutation.
    pub fn apply(&mut self, m: &Mutation) {
        match m {
            Mutation::Begin { op, kind, state } => {
                self.pending.insert(*op, (*kind, state.clone()));
            }
            Mutation::End { op, change } => {
                self.pending.remove(op);
                self.apply_change(change);
            }
            Mutation::Failed { op } => {
                self.pending.remove(op);
            }
            Mutation::Apply(change) => self.apply_change(change),
            Mutation::Migration(m) => self.apply_migration(m),
        }
    }

    /// The kind of the operation `op`, begun and not ended.
    pub fn pending_kind(&self, op: OpId) -> Option<OperationType> {
        self.pending.get(&op).map(|(ty, _)| *ty)
    }

    /// Operations begun and not ended, as the deployment records them
    /// (each a copy of its state).
    pub fn pending(&self) -> impl Iterator<Item = PendingOperation> + '_ {
        self.pending.values().map(|(ty, state)| PendingOperation {
            resource: (**state).clone(),
            ty: *ty,
            ..Default::default()
        })
    }

    /// The current deployment.
    pub fn snapshot(&self) -> Deployment {
        let mut d = self.snapshot_committed();
        d.pending_operations.extend(self.pending());
        d
    }

    /// The deployment without this run's in-flight operations (they are
    /// re-recorded in the fresh journal after a compaction).
    pub fn snapshot_committed(&self) -> Deployment {
        self.committed_in_order().0
    }

    /// [`SnapshotBuilder::snapshot_committed`], and the live states in its
    /// order, for [`SnapshotBuilder::rebase_to`] (a compaction orders and
    /// copies the states once).
    pub fn committed_in_order(&self) -> (Deployment, Vec<StateRef>) {
        let (refs, states) = self.ordered_live();
        (self.deployment_of(states), refs)
    }

    /// The base deployment holding `states`, with this operation's
    /// serving recorded in its manifest.
    fn deployment_of(&self, states: Vec<State>) -> Deployment {
        let mut d = self.base.clone();
        d.resources = states;
        d.record_serving(&self.served);
        d
    }

    /// Leaves the builder holding no state (its handles dropped, so the
    /// states can be moved out of them).
    fn spend(&mut self) {
        self.olds.clear();
        self.old_pos.clear();
        self.old_done.clear();
        self.news.clear();
        self.new_pos.clear();
        self.new_done.clear();
        self.split = 0;
    }

    /// The end of an operation: the committed deployment (as
    /// [`SnapshotBuilder::committed_in_order`] gives it), its states moved
    /// out of the builder rather than copied. A state is copied only while
    /// something else still holds its handle (the engine releases the
    /// generator's and the executor's before it finishes). The builder is
    /// left spent: it holds no state until [`SnapshotBuilder::restore`]
    /// gives them back (a finish that failed after this call).
    pub fn take_committed(&mut self) -> Deployment {
        let refs: Vec<StateRef> = self.live().cloned().collect();
        self.spend();
        let states: Vec<State> = refs.into_iter().map(take_state).collect();
        let (_, states) = self.snapshot_form(vec![(); states.len()], states);
        self.deployment_of(states)
    }

    /// A compaction: `write` persists the committed deployment as the new
    /// base (given the number of leading states this operation wrote, for
    /// [`Compaction::Mid`], and the builder, for its in-flight
    /// operations), then the builder is rebased onto it. At
    /// [`Compaction::End`] the states are moved out instead of copied
    /// ([`SnapshotBuilder::take_committed`]) and the builder is spent,
    /// unless `write` fails: then they are given back. Returns the
    /// deployment with the in-flight operations.
    ///
    /// # Errors
    /// What `write` returns; the builder is then as it was.
    pub fn compact_with(
        &mut self,
        when: Compaction,
        write: impl FnOnce(&Deployment, usize, &SnapshotBuilder) -> Result<()>,
    ) -> Result<Deployment> {
        let mut committed = if when == Compaction::End {
            let committed = self.take_committed();
            if let Err(e) = write(&committed, 0, self) {
                self.restore(committed);
                return Err(e);
            }
            committed
        } else {
            let (committed, live) = self.committed_in_order();
            let split = if when == Compaction::Mid {
                self.written_live()
            } else {
                0
            };
            write(&committed, split, self)?;
            self.rebase_to(live);
            committed
        };
        committed.pending_operations.extend(self.pending());
        Ok(committed)
    }

    /// Gives a spent builder ([`SnapshotBuilder::take_committed`]) its
    /// states back, as the prior list: its snapshot is then `d`'s
    /// resources with the pending operations it still holds.
    pub fn restore(&mut self, d: Deployment) {
        let live = d
            .resources
            .into_iter()
            .map(crate::model::step::share)
            .collect();
        self.rebase_to(live);
    }

    /// The current deployment when nothing but `keep`s was applied since
    /// the prior states were set (by [`SnapshotBuilder::new`] or a
    /// rebase): the prior states in their prior order, unchanged, and the
    /// same manifest plugins. `None` when anything else happened (a
    /// write, a removal, a pending operation, a refresh, a serving that
    /// changes the manifest); the builder is then untouched. Otherwise
    /// the states are moved out of the builder, as
    /// [`SnapshotBuilder::take_committed`] does (copied only where another
    /// handle is held), and the builder is spent.
    pub fn take_unchanged(&mut self) -> Option<Deployment> {
        let kept_only = self.pending.is_empty()
            && self.vanished.is_empty()
            && self.split == 0
            && self.new_done.iter().all(|d| !*d)
            && self.news.len() == self.old_done.iter().filter(|d| **d).count()
            && self.news.iter().all(|s| self.old_pos.contains_key(&key(s)));
        if !kept_only {
            return None;
        }
        // The manifest's plugins come from the provider states alone, so
        // they are checked on copies of those before anything is taken.
        let mut d = self.base.clone();
        d.resources = self
            .olds
            .iter()
            .filter_map(|s| {
                let s = lock(s);
                s.ty.is_provider().then(|| s.clone())
            })
            .collect();
        d.record_serving(&self.served);
        if d.manifest.plugins != self.base.manifest.plugins {
            return None;
        }
        let olds = std::mem::take(&mut self.olds);
        self.spend();
        d.resources = olds.into_iter().map(take_state).collect();
        Some(d)
    }

    /// Records what served each package in this operation (`package` ->
    /// [`crate::provider::Serving`] name), for the manifests of the
    /// snapshots written from now on.
    pub fn set_served(&mut self, served: BTreeMap<String, String>) {
        self.served.extend(served);
    }

    /// The live states in snapshot order, and their snapshot form
    /// (references renamed and vanished ones dropped): write order, with
    /// any state a reference needs moved up to just before its first
    /// referrer ([`references_first`]).
    fn ordered_live(&self) -> (Vec<StateRef>, Vec<State>) {
        let refs: Vec<StateRef> = self.live().cloned().collect();
        let states = refs.iter().map(|s| lock(s).clone()).collect();
        self.snapshot_form(refs, states)
    }

    /// `states` (live, in write order) in their snapshot form: references
    /// renamed, vanished ones dropped, and any state a reference needs
    /// moved up to just before its first referrer ([`references_first`]).
    /// `companions` (one per state: its handle, or nothing) are reordered
    /// with them.
    fn snapshot_form<T>(&self, companions: Vec<T>, mut states: Vec<State>) -> (Vec<T>, Vec<State>) {
        normalize_aliases(&mut states);
        drop_vanished(&mut states, &self.vanished);
        match references_first(&states) {
            None => (companions, states),
            Some(order) => {
                let mut taken: Vec<Option<(T, State)>> =
                    companions.into_iter().zip(states).map(Some).collect();
                order.into_iter().filter_map(|i| taken[i].take()).unzip()
            }
        }
    }

    fn live(&self) -> impl Iterator<Item = &StateRef> {
        let (olds, old_done) = (&self.olds, &self.old_done);
        let split = self.split;
        olds[..split]
            .iter()
            .zip(&old_done[..split])
            .chain(self.news.iter().zip(&self.new_done))
            .chain(olds[split..].iter().zip(&old_done[split..]))
            .filter(|(_, done)| !**done)
            .map(|(s, _)| s)
    }

    /// How many live states this operation wrote (the split a rebase sets).
    pub fn written_live(&self) -> usize {
        let lead = self.old_done[..self.split].iter().filter(|d| !**d).count();
        lead + self.new_done.iter().filter(|d| !**d).count()
    }

    /// Makes the current deployment the base (after a compaction wrote it):
    /// the live states, same `Arc`s, become the prior list in order.
    pub fn rebase(&mut self) {
        let live: Vec<StateRef> = self.ordered_live().0;
        self.rebase_to(live);
    }

    /// [`SnapshotBuilder::rebase`] onto `live`, the order
    /// [`SnapshotBuilder::committed_in_order`] gave with nothing applied
    /// since.
    pub fn rebase_to(&mut self, live: Vec<StateRef>) {
        let split = self.written_live();
        self.split = split;
        self.old_pos = live.iter().enumerate().map(|(i, s)| (key(s), i)).collect();
        self.old_done = vec![false; live.len()];
        self.olds = live;
        self.news.clear();
        self.new_pos.clear();
        self.new_done.clear();
    }

    /// In-flight operations as `(op, kind, state)`, for re-recording.
    pub fn in_flight(&self) -> impl Iterator<Item = (OpId, OperationType, &State)> {
        self.pending
            .iter()
            .map(|(op, (ty, state))| (*op, *ty, &**state))
    }

    /// The number of resources the current deployment holds.
    pub fn len(&self) -> usize {
        self.new_done
            .iter()
            .chain(&self.old_done)
            .filter(|d| !**d)
            .count()
    }

    /// True when the current deployment holds no resources.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Points references at renamed resources' new URNs: a state written with
/// `aliases` (found through an alias this operation) replaces those URNs in
/// the parent, dependencies, property dependencies, `deletedWith`,
/// `replaceWith` and provider of every other state (Pulumi's
/// `NormalizeURNReferences`). Costs nothing when nothing was renamed.
pub fn normalize_aliases(resources: &mut [State]) {
    use std::collections::HashSet;
    if resources
        .iter()
        .all(|s| s.delete || s.rare.aliases.is_empty())
    {
        return;
    }
    let live: HashSet<&crate::model::Urn> = resources
        .iter()
        .filter(|s| !s.delete)
        .map(|s| &s.urn)
        .collect();
    let renamed: HashMap<crate::model::Urn, crate::model::Urn> = resources
        .iter()
        .filter(|s| !s.delete)
        .flat_map(|s| {
            s.rare
                .aliases
                .iter()
                .filter(|a| !live.contains(a))
                .map(move |a| (a.clone(), s.urn.clone()))
        })
        .collect();
    if renamed.is_empty() {
        return;
    }
    let map = |u: &mut crate::model::Urn| {
        if let Some(n) = renamed.get(u) {
            *u = n.clone();
        }
    };
    for s in resources.iter_mut() {
        if !s.parent.is_empty() {
            map(&mut s.parent);
        }
        s.dependencies.iter_mut().for_each(map);
        for list in s.property_dependencies.values_mut().flatten() {
            list.iter_mut().for_each(map);
        }
        if let Some(r) = s.rare.get_mut() {
            if !r.deleted_with.is_empty() {
                map(&mut r.deleted_with);
            }
            (&mut r.replace_with).into_iter().for_each(map);
        }
        if let Ok(Some(r)) = s.provider_ref() {
            if let Some(n) = renamed.get(r.urn()) {
                s.provider = format!("{n}::{}", r.id()).into();
            }
        }
    }
}

/// The URNs a state refers to: parent, dependencies, property
/// dependencies, `deletedWith`, `replaceWith` and provider.
pub(crate) fn referents(s: &State) -> impl Iterator<Item = crate::model::Urn> + '_ {
    let provider = s.provider_ref().ok().flatten().map(|p| p.urn().clone());
    std::iter::once(&s.parent)
        .chain(&s.dependencies)
        .chain(s.property_dependencies.values().flatten().flatten())
        .chain(std::iter::once(&*s.rare.deleted_with))
        .chain(&s.rare.replace_with)
        .cloned()
        .chain(provider)
        .filter(|u| !u.is_empty())
}

/// The positions of the states with one URN (almost always one), in
/// increasing order.
enum Slots {
    One(usize),
    Many(Vec<usize>),
}

impl Slots {
    fn push(&mut self, i: usize) {
        match self {
            Self::One(first) => *self = Self::Many(vec![*first, i]),
            Self::Many(all) => all.push(i),
        }
    }

    fn as_slice(&self) -> &[usize] {
        match self {
            Self::One(i) => std::slice::from_ref(i),
            Self::Many(all) => all,
        }
    }
}

/// URN -> positions, for [`references_first`].
type ByUrn<'a> = FastMap<&'a str, Slots>;

/// [`referents`] among `states` (`by_urn` indexes them), as the
/// positions of the states each names, in [`referents`]' order: a
/// provider reference counts when its URN part names a provider state
/// there. Each referent is looked up once, without a parse or a copy:
/// this runs for every state of every snapshot.
fn referent_slots<'a>(
    s: &'a State,
    by_urn: &'a ByUrn<'_>,
    states: &'a [State],
) -> impl Iterator<Item = &'a Slots> + 'a {
    let provider = crate::model::urn::rfind_separator(&s.provider)
        .and_then(|i| by_urn.get(&s.provider[..i]))
        .filter(|js| js.as_slice().iter().any(|&j| states[j].ty.is_provider()));
    std::iter::once(&s.parent)
        .chain(&s.dependencies)
        .chain(s.property_dependencies.values().flatten().flatten())
        .chain(std::iter::once(&*s.rare.deleted_with))
        .chain(&s.rare.replace_with)
        .filter_map(|u| by_urn.get(u.as_str()))
        .chain(provider)
}

/// A stable order in which every state comes after the states it refers to
/// (`checkpoint.md` §4), or `None` when `states` already is one.
///
/// Write order alone is not always such an order: a targeted update writes
/// an untargeted resource's `same` state while a resource it depends on,
/// gone from the program but kept because it was not targeted, stays among
/// the prior states after it. Each state keeps its place unless a referrer
/// comes first; then it moves up to just before its first referrer. Every
/// state of a URN (a live one and one pending deletion) moves together.
pub fn references_first(states: &[State]) -> Option<Vec<usize>> {
    let mut by_urn: ByUrn<'_> = FastMap::with_capacity_and_hasher(states.len(), Default::default());
    for (i, s) in states.iter().enumerate() {
        by_urn
            .entry(s.urn.as_str())
            .and_modify(|at| at.push(i))
            .or_insert(Slots::One(i));
    }
    // In order when each referent has a state before this one or is this
    // state's own URN: its first position is at most this one's (only the
    // state's own URN can be first here).
    let in_order = states
        .iter()
        .enumerate()
        .all(|(i, s)| referent_slots(s, &by_urn, states).all(|js| js.as_slice()[0] <= i));
    if in_order {
        return None;
    }
    // Depth first, without recursion (dependency chains can be long).
    const NEW: u8 = 0;
    const OPEN: u8 = 1;
    const DONE: u8 = 2;
    let mut mark = vec![NEW; states.len()];
    let mut order = Vec::with_capacity(states.len());
    for root in 0..states.len() {
        if mark[root] != NEW {
            continue;
        }
        let mut stack: Vec<(usize, Vec<usize>)> = Vec::new();
        let push = |i: usize, mark: &mut [u8], stack: &mut Vec<(usize, Vec<usize>)>| {
            mark[i] = OPEN;
            let mut next: Vec<usize> = referent_slots(&states[i], &by_urn, states)
                .flat_map(Slots::as_slice)
                .copied()
                .filter(|&j| j != i)
                .collect();
            next.reverse();
            stack.push((i, next));
        };
        push(root, &mut mark, &mut stack);
        while let Some((i, next)) = stack.last_mut() {
            match next.pop() {
                Some(j) if mark[j] == NEW => push(j, &mut mark, &mut stack),
                Some(_) => {}
                None => {
                    let i = *i;
                    stack.pop();
                    mark[i] = DONE;
                    order.push(i);
                }
            }
        }
    }
    Some(order)
}

/// Drops references to resources a refresh (or the recovery of an
/// interrupted delete) found gone, mapped to their parents: dependencies,
/// property dependencies, `deletedWith` and `replaceWith` lose them, and
/// their children move to their parent. A URN some state still has is
/// kept.
pub fn drop_vanished(
    resources: &mut [State],
    vanished: &HashMap<crate::model::Urn, crate::model::Urn>,
) {
    if vanished.is_empty() {
        return;
    }
    let live: std::collections::HashSet<crate::model::Urn> =
        resources.iter().map(|s| s.urn.clone()).collect();
    let gone = |u: &crate::model::Urn| vanished.contains_key(u) && !live.contains(u);
    for s in resources.iter_mut() {
        while gone(&s.parent) {
            s.parent = vanished[&s.parent].clone();
        }
        s.dependencies.retain(|d| !gone(d));
        for list in s.property_dependencies.values_mut().flatten() {
            list.retain(|d| !gone(d));
        }
        s.rare.edit(|r| {
            if gone(&r.deleted_with) {
                r.deleted_with = Default::default();
            }
            if let Some(list) = r.replace_with.get_mut() {
                list.retain(|d| !gone(d));
            }
        });
    }
}

/// Why persisting failed.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// A file could not be written.
    #[error("cannot write state to {path}: {source}; the last good state is intact")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The state to save breaks an integrity rule: the save was refused.
    #[error("refusing to save a state that breaks an integrity rule: {0}")]
    Integrity(#[from] IntegrityError),
    /// A failure injected by a test persister.
    #[error("injected failure of save #{0}")]
    Injected(u64),
    /// The persister actor is gone.
    #[error("the persister stopped: {0}")]
    Stopped(String),
    /// A database backend's call failed (`persist::pg`).
    #[error("PostgreSQL backend {place}: {message}; the last committed state is intact")]
    Database {
        /// The database (URL without password) and what was being done.
        place: String,
        /// The server's or the client's message.
        message: String,
    },
    /// Secrets could not be encrypted for writing.
    #[error("cannot encrypt the stack's secrets: {0}")]
    Secrets(#[from] crate::secrets::SecretsError),
    /// The end of a create could not be made durable: the object exists,
    /// maybe recorded only by its interrupted create, and this names it.
    #[error("{source}; {urn} was created as `{id}` and may be recorded only as an interrupted create: the next operation adopts it when its provider can look it up, otherwise `keel refresh --import-pending-creates {urn} {id}` does (creating it again would make a second one)")]
    CreateUnrecorded {
        /// The resource.
        urn: crate::model::Urn,
        /// The object's ID.
        id: String,
        /// Why the end was not written.
        source: Box<PersistError>,
    },
}

/// The result type of persistence.
pub type Result<T, E = PersistError> = std::result::Result<T, E>;

/// Called once a mutation is durable (or could not be made durable).
pub type Ack = Box<dyn FnOnce(Result<()>) + Send>;

/// A place state is persisted. Called only from the Persister actor, one
/// call at a time; a call that may block is run off the async workers
/// ([`Persister::persist_may_block`], [`Persister::upkeep`]).
pub trait Persister: Send + 'static {
    /// Makes one mutation durable; `current` already reflects it. `ack` is
    /// called once it is durable, possibly later and from another thread
    /// (group commit).
    fn persist(&mut self, m: &Mutation, current: &mut SnapshotBuilder, ack: Ack);

    /// Whether [`Persister::persist`] may wait on I/O itself. The
    /// persister actor runs a call that may on the runtime's blocking
    /// capacity (`block_in_place`, which hands the worker's other tasks to
    /// a second thread: a thread wake-up and two context switches per
    /// call) and one that cannot in place. A persister that hands its
    /// records to a writer thread of its own answers `false` and puts any
    /// blocking work off to [`Persister::upkeep`]. The default, `true`,
    /// suits a persister that writes in `persist`.
    fn persist_may_block(&self) -> bool {
        true
    }

    /// Whether blocking work `persist` put off (a journal's compaction) is
    /// waiting for [`Persister::upkeep`].
    fn upkeep_due(&self) -> bool {
        false
    }

    /// Does the blocking work `persist` put off, on the state `current`
    /// held when it was put off: the persister actor calls it, on the
    /// blocking capacity, before it applies the next mutation (and
    /// [`Persister::finish`] supersedes it). A failure is the persister's
    /// to report, on its next `persist` or `finish`.
    fn upkeep(&mut self, current: &mut SnapshotBuilder) {
        let _ = current;
    }

    /// The operation's prior state is not the persisted one (recovering
    /// interrupted operations added, removed or changed states): make it
    /// the persisted base before any mutation names a state by its
    /// position. The default does nothing, for persisters that write whole
    /// snapshots (the next one replaces the old) or nothing.
    ///
    /// # Errors
    /// [`PersistError`] when the base cannot be written; the old one is
    /// intact.
    fn rebase(&mut self, current: &mut SnapshotBuilder) -> Result<()> {
        let _ = current;
        Ok(())
    }

    /// The operation ended: wait for pending writes, make the current
    /// deployment the persisted state (compaction) and return it.
    ///
    /// # Errors
    /// [`PersistError`] when it could not be persisted; the last durable
    /// state is kept.
    fn finish(&mut self, current: &mut SnapshotBuilder) -> Result<Deployment>;

    /// Whether this persister can persist component state migrations.
    fn supports_migrations(&self) -> bool {
        true
    }

    /// Bytes written and fsyncs issued so far.
    fn io(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// Keeps nothing but counts (preview, tests). Can fail its Nth save.
#[derive(Debug, Default)]
pub struct MemoryPersister {
    saves: u64,
    fail_at: Option<u64>,
}

impl MemoryPersister {
    /// A persister that never fails.
    pub fn new() -> Self {
        Self::default()
    }

    /// A persister whose `n`th save (1-based) fails.
    pub fn failing_at(n: u64) -> Self {
        Self {
            saves: 0,
            fail_at: Some(n),
        }
    }
}

impl Persister for MemoryPersister {
    fn persist(&mut self, _m: &Mutation, _current: &mut SnapshotBuilder, ack: Ack) {
        self.saves += 1;
        if self.fail_at == Some(self.saves) {
            return ack(Err(PersistError::Injected(self.saves)));
        }
        ack(Ok(()));
    }

    fn finish(&mut self, current: &mut SnapshotBuilder) -> Result<Deployment> {
        let snapshot = current.snapshot();
        crate::model::integrity::verify(&snapshot)?;
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::step::share;
    use crate::model::Urn;

    fn state(name: &str) -> State {
        State {
            urn: Urn::parse(&format!(
                "urn:pulumi:dev::app::aws:s3/bucket:Bucket::{name}"
            ))
            .unwrap(),
            custom: true,
            id: format!("id-{name}"),
            ty: crate::model::TypeToken::parse("aws:s3/bucket:Bucket").unwrap(),
            ..State::default()
        }
    }

    /// The heap address of each state's ID: equal after a move, different
    /// after a copy.
    fn id_addresses(states: &[State]) -> Vec<usize> {
        states.iter().map(|s| s.id.as_ptr() as usize).collect()
    }

    #[test]
    fn the_final_compaction_moves_states_no_one_else_holds_and_copies_the_rest() {
        let olds: Vec<StateRef> = ["a", "b", "c"].map(|n| share(state(n))).to_vec();
        let before: Vec<usize> = olds.iter().map(|s| lock(s).id.as_ptr() as usize).collect();
        let held = olds[1].clone();
        let mut b = SnapshotBuilder::new(Deployment::default(), olds);
        let expected = b.snapshot_committed();

        let d = b.take_committed();
        assert_eq!(d.resources, expected.resources);
        let after = id_addresses(&d.resources);
        assert_eq!(after[0], before[0], "a: moved");
        assert_eq!(after[2], before[2], "c: moved");
        assert_ne!(after[1], before[1], "b: copied, another handle holds it");
        assert_eq!(
            *lock(&held),
            expected.resources[1],
            "the other handle is intact"
        );
        assert!(b.is_empty(), "the builder is spent");

        // A finish that failed after the states were taken gives them back.
        b.restore(d);
        assert_eq!(b.snapshot_committed().resources, expected.resources);
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn an_operation_of_keeps_alone_moves_the_prior_states_in_their_order() {
        let olds: Vec<StateRef> = ["a", "b"].map(|n| share(state(n))).to_vec();
        let before: Vec<usize> = olds.iter().map(|s| lock(s).id.as_ptr() as usize).collect();
        let mut b = SnapshotBuilder::new(Deployment::default(), olds.clone());
        // Kept in another order than the prior list's.
        for old in [&olds[1], &olds[0]] {
            b.apply(&Mutation::Apply(Change::Keep { old: old.clone() }));
        }
        let expected = b.snapshot_committed();
        drop(olds);
        let d = b.take_unchanged().expect("keeps alone");
        assert_eq!(id_addresses(&d.resources), before, "moved, in prior order");
        assert_eq!(d.resources.len(), expected.resources.len());
        assert!(b.is_empty(), "the builder is spent");

        // Anything else: `None`, and the builder untouched.
        let olds: Vec<StateRef> = ["a", "b"].map(|n| share(state(n))).to_vec();
        let mut b = SnapshotBuilder::new(Deployment::default(), olds.clone());
        b.apply(&Mutation::Apply(Change::Remove {
            old: olds[0].clone(),
        }));
        let expected = b.snapshot();
        assert!(b.take_unchanged().is_none());
        assert_eq!(b.snapshot(), expected);
    }

    #[test]
    fn a_failed_final_compaction_leaves_the_builder_as_it_was() {
        let olds: Vec<StateRef> = ["a", "b"].map(|n| share(state(n))).to_vec();
        let mut b = SnapshotBuilder::new(Deployment::default(), olds);
        let expected = b.snapshot();
        let r = b.compact_with(Compaction::End, |_, _, _| Err(PersistError::Injected(1)));
        assert!(matches!(r, Err(PersistError::Injected(1))), "{r:?}");
        assert_eq!(b.snapshot(), expected);
        let d = b
            .compact_with(Compaction::End, |d, split, _| {
                assert_eq!((d.resources.len(), split), (2, 0));
                Ok(())
            })
            .unwrap();
        assert_eq!(d, expected);
    }

    /// A state named `r{name}`: a provider (type `pulumi:providers:aws`)
    /// when `provider_ty`, with a parent, a provider reference and
    /// dependencies (in that order) naming the states `r{n}` of `refs`.
    fn referring(name: usize, provider_ty: bool, refs: &[usize]) -> State {
        let urn_of = |n: usize, provider: bool| {
            let ty = if provider {
                "pulumi:providers:aws"
            } else {
                "aws:s3/bucket:Bucket"
            };
            Urn::parse(&format!("urn:pulumi:dev::app::{ty}::r{n}")).unwrap()
        };
        let mut s = state("x");
        s.urn = urn_of(name, provider_ty);
        if provider_ty {
            s.ty = crate::model::TypeToken::parse("pulumi:providers:aws").unwrap();
        }
        let mut refs = refs.iter();
        if let Some(&p) = refs.next() {
            s.parent = urn_of(p, false);
        }
        if let Some(&p) = refs.next() {
            s.provider = format!("{}::id", urn_of(p, true)).into();
        }
        s.dependencies = refs.map(|&d| urn_of(d, false)).collect();
        s
    }

    /// Whether each state's [`referents`] that name a state of `states`
    /// name one before it or its own URN: what `references_first` answers
    /// `None` for, checked naively. (A provider reference here always
    /// names a provider's URN, so naming a state is naming a provider.)
    fn refers_back_only(states: &[State]) -> bool {
        states.iter().enumerate().all(|(i, s)| {
            referents(s)
                .filter(|r| states.iter().any(|t| t.urn == *r))
                .all(|r| r == s.urn || states[..i].iter().any(|t| t.urn == r))
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// `references_first` leaves an order alone exactly when every
        /// state refers back only, and otherwise gives a permutation
        /// that does (each state refers only to earlier ones or to URNs no
        /// state has, then two states swap places, so an order exists).
        #[test]
        fn references_first_reorders_exactly_the_states_that_refer_forward(
            specs in proptest::collection::vec(
                (proptest::bool::weighted(0.2), proptest::collection::vec(0usize..16, 0..4)),
                1..12,
            ),
            swap in (0usize..12, 0usize..12),
        ) {
            let mut states: Vec<State> = specs
                .iter()
                .enumerate()
                .map(|(i, (provider, refs))| {
                    let refs: Vec<usize> = refs
                        .iter()
                        .map(|&r| if i > 0 && r < 12 { r % i } else { r + 100 })
                        .collect();
                    referring(i, *provider, &refs)
                })
                .collect();
            let (a, b) = (swap.0 % states.len(), swap.1 % states.len());
            states.swap(a, b);
            match references_first(&states) {
                None => proptest::prop_assert!(refers_back_only(&states)),
                Some(order) => {
                    proptest::prop_assert!(!refers_back_only(&states));
                    let mut sorted = order.clone();
                    sorted.sort_unstable();
                    proptest::prop_assert_eq!(sorted, (0..states.len()).collect::<Vec<_>>());
                    let reordered: Vec<State> = order.iter().map(|&i| states[i].clone()).collect();
                    proptest::prop_assert!(refers_back_only(&reordered), "{order:?}");
                }
            }
        }
    }
}
