//! Persisting a committed component migration (`migrations.md` §10).
//!
//! The coordinator hands the persister the new prior list as state handles
//! (retained ones by their live `Arc`, result states fresh) plus the
//! prepared copies of retained and new states whose references changed.
//! The live handles are only changed by the commit, after persistence
//! succeeded; so the persister writes what the list *will* be, and the
//! snapshot builder re-orders its base only once the record is durable.
//!
//! The journal form is one `state-migration` entry: `layout` (the new base
//! order, `{"baseIndex": i}` or `{"stateIndex": j}`; omitted base indices
//! are removed), `states` (the result states, in prepared order),
//! `baseStatePatches` (`{"index", "state"}`) and `newStatePatches`
//! (`{"operationId", "state"}`, by the position of a state written earlier
//! in this journal). Replay validates the entry before touching anything.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::journal::ReplayError;
use super::{key, SnapshotBuilder};
use crate::model::fasthash::FastMap;
use crate::model::step::{lock, share, StateRef};
use crate::model::{Deployment, State};

/// One entry of a migration's new prior list.
#[derive(Debug, Clone)]
pub enum ListItem {
    /// A retained prior state, by its live handle.
    Retained(StateRef),
    /// A result state, as a fresh handle.
    Fresh(StateRef),
}

impl ListItem {
    /// The handle.
    pub fn state(&self) -> &StateRef {
        match self {
            Self::Retained(s) | Self::Fresh(s) => s,
        }
    }
}

/// A migration to persist.
#[derive(Debug, Clone)]
pub struct MigrationMutation {
    /// The new prior list, in order.
    pub list: Vec<ListItem>,
    /// Prepared copies of retained prior states whose references change.
    pub base_patches: Vec<(StateRef, State)>,
    /// Prepared copies of states written earlier in this operation whose
    /// references change.
    pub new_patches: Vec<(StateRef, State)>,
}

/// One item of a migration's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayoutItem {
    /// A base (prior) state, by its index.
    #[serde(rename = "baseIndex")]
    Base(usize),
    /// A result state, by its index in `states`.
    #[serde(rename = "stateIndex")]
    State(usize),
}

/// A patch of a base state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BasePatch {
    /// The base index.
    pub index: usize,
    /// The prepared state.
    pub state: Box<State>,
}

/// A patch of a state written earlier in this journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewPatch {
    /// The written state's position (the journal's `{"new": n}`).
    #[serde(rename = "operationId")]
    pub operation_id: usize,
    /// The prepared state.
    pub state: Box<State>,
}

/// The journal entry's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationRecord {
    /// The new base order.
    pub layout: Vec<LayoutItem>,
    /// The result states.
    pub states: Vec<State>,
    /// Retained base states whose references changed.
    #[serde(default)]
    pub base_state_patches: Vec<BasePatch>,
    /// States written earlier whose references changed.
    #[serde(default)]
    pub new_state_patches: Vec<NewPatch>,
}

impl SnapshotBuilder {
    /// The journal record of a migration, relative to this builder's base.
    /// States this operation wrote before a mid-operation compaction lead
    /// the layout unchanged.
    ///
    /// # Errors
    /// [`ReplayError::PatchedState`] when the migration names a state this
    /// builder does not know (a bug).
    pub fn migration_record(&self, m: &MigrationMutation) -> Result<MigrationRecord, ReplayError> {
        let mut layout: Vec<LayoutItem> = (0..self.split).map(LayoutItem::Base).collect();
        let mut states = Vec::new();
        for item in &m.list {
            match item {
                ListItem::Fresh(s) => {
                    layout.push(LayoutItem::State(states.len()));
                    states.push(lock(s).clone());
                }
                ListItem::Retained(s) => {
                    // A retained state this builder already dropped (after a
                    // compaction) stays dropped.
                    if let Some(&i) = self.old_pos.get(&key(s)) {
                        if i >= self.split {
                            layout.push(LayoutItem::Base(i));
                        }
                    }
                }
            }
        }
        let base_state_patches = m
            .base_patches
            .iter()
            .map(|(live, state)| {
                self.old_pos
                    .get(&key(live))
                    .map(|&index| BasePatch {
                        index,
                        state: Box::new(state.clone()),
                    })
                    .ok_or_else(|| ReplayError::PatchedState {
                        urn: state.urn.to_string(),
                        place: "in the base",
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let new_state_patches = m
            .new_patches
            .iter()
            .map(|(live, state)| {
                self.new_pos
                    .get(&key(live))
                    .map(|&operation_id| NewPatch {
                        operation_id,
                        state: Box::new(state.clone()),
                    })
                    .ok_or_else(|| ReplayError::PatchedState {
                        urn: state.urn.to_string(),
                        place: "written in this operation",
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MigrationRecord {
            layout,
            states,
            base_state_patches,
            new_state_patches,
        })
    }

    /// The deployment as it will be once the migration is committed (for
    /// the full-checkpoint persister, which writes it whole).
    pub fn snapshot_after(&self, m: &MigrationMutation) -> Deployment {
        let patched: HashMap<usize, &State> = m
            .base_patches
            .iter()
            .chain(&m.new_patches)
            .map(|(s, p)| (key(s), p))
            .collect();
        let view = |s: &StateRef| {
            patched
                .get(&key(s))
                .map_or_else(|| lock(s).clone(), |p| (*p).clone())
        };
        let done: HashMap<usize, bool> = self
            .olds
            .iter()
            .zip(&self.old_done)
            .map(|(s, d)| (key(s), *d))
            .collect();
        let mut d = self.base.clone();
        let lead = self.olds[..self.split]
            .iter()
            .zip(&self.old_done[..self.split])
            .filter(|(_, done)| !**done)
            .map(|(s, _)| view(s));
        let news = self
            .news
            .iter()
            .zip(&self.new_done)
            .filter(|(_, done)| !**done)
            .map(|(s, _)| view(s));
        let lead_keys: std::collections::HashSet<usize> =
            self.olds[..self.split].iter().map(key).collect();
        let rest = m
            .list
            .iter()
            .filter(|item| match item {
                ListItem::Fresh(_) => true,
                ListItem::Retained(s) => {
                    !lead_keys.contains(&key(s)) && done.get(&key(s)).is_some_and(|d| !*d)
                }
            })
            .map(|item| view(item.state()));
        d.resources = lead.chain(news).chain(rest).collect();
        super::normalize_aliases(&mut d.resources);
        d.pending_operations.extend(self.pending());
        d
    }

    /// Re-orders the base once a migration is durable (the commit updates
    /// the live handles' fields; they are shared with this builder).
    pub fn apply_migration(&mut self, m: &MigrationMutation) {
        // The leading states written by this operation stay first; every
        // other prior state is taken in the list's order, keeping whether
        // it was written; a fresh state is not written yet. One lookup per
        // state in the index the builder keeps (no set or map of the whole
        // list is built).
        let split = self.split;
        let mut olds: Vec<StateRef> = Vec::with_capacity(split + m.list.len());
        let mut old_done: Vec<bool> = Vec::with_capacity(split + m.list.len());
        olds.extend_from_slice(&self.olds[..split]);
        old_done.extend_from_slice(&self.old_done[..split]);
        for item in &m.list {
            let s = item.state();
            match (item, self.old_pos.get(&key(s))) {
                (ListItem::Fresh(_), at) => {
                    olds.push(s.clone());
                    old_done.push(at.is_some_and(|&i| self.old_done[i]));
                }
                (ListItem::Retained(_), Some(&i)) if i >= split => {
                    olds.push(s.clone());
                    old_done.push(self.old_done[i]);
                }
                (ListItem::Retained(_), _) => {}
            }
        }
        let mut old_pos = FastMap::default();
        old_pos.reserve(olds.len());
        old_pos.extend(olds.iter().enumerate().map(|(i, s)| (key(s), i)));
        self.old_pos = old_pos;
        self.old_done = old_done;
        self.olds = olds;
    }

    /// Replays a `state-migration` entry. The entry is validated first: a
    /// malformed one changes nothing.
    ///
    /// # Errors
    /// [`ReplayError`] naming what is malformed.
    pub fn replay_migration(&mut self, r: &MigrationRecord) -> Result<(), ReplayError> {
        let mut seen_base = vec![false; self.olds.len()];
        let mut seen_state = vec![false; r.states.len()];
        for item in &r.layout {
            match *item {
                LayoutItem::Base(i) => {
                    if i >= self.olds.len() || std::mem::replace(&mut seen_base[i], true) {
                        return Err(ReplayError::BaseIndex {
                            index: i,
                            len: self.olds.len(),
                        });
                    }
                }
                LayoutItem::State(j) => {
                    if j >= r.states.len() || std::mem::replace(&mut seen_state[j], true) {
                        return Err(ReplayError::StateIndex {
                            index: j,
                            len: r.states.len(),
                        });
                    }
                }
            }
        }
        if let Some(j) = seen_state.iter().position(|s| !s) {
            return Err(ReplayError::StateNotLaidOut(j));
        }
        if let Some(p) = r
            .base_state_patches
            .iter()
            .find(|p| p.index >= self.olds.len() || !seen_base[p.index])
        {
            return Err(ReplayError::BasePatch(p.index));
        }
        if let Some(p) = r
            .new_state_patches
            .iter()
            .find(|p| p.operation_id >= self.news.len())
        {
            return Err(ReplayError::NewPatch(p.operation_id));
        }
        // Valid: apply.
        for p in &r.base_state_patches {
            *lock(&self.olds[p.index]) = (*p.state).clone();
        }
        for p in &r.new_state_patches {
            *lock(&self.news[p.operation_id]) = (*p.state).clone();
        }
        let list: Vec<StateRef> = r
            .layout
            .iter()
            .map(|item| match *item {
                LayoutItem::Base(i) => Arc::clone(&self.olds[i]),
                LayoutItem::State(j) => share(r.states[j].clone()),
            })
            .collect();
        let done: Vec<bool> = r
            .layout
            .iter()
            .map(|item| match *item {
                LayoutItem::Base(i) => self.old_done[i],
                LayoutItem::State(_) => false,
            })
            .collect();
        self.old_pos = list.iter().enumerate().map(|(i, s)| (key(s), i)).collect();
        self.olds = list;
        self.old_done = done;
        self.split = self.split.min(self.olds.len());
        Ok(())
    }
}
