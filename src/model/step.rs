//! What the engine says of steps, as data: their kinds, the property
//! diffs step events carry, and the shared handle on a state that the
//! generator, the executor, the persister and the migration commit pass
//! around.

use std::fmt;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::model::fasthash::FastDashMap;

use super::{State, Urn};
use crate::locks::MutexExt;

/// A state shared between the generator, the executor and the persister.
/// Identity is by `Arc` pointer.
pub type StateRef = Arc<Mutex<State>>;

/// Locks a state, ignoring poisoning (a panicked holder is reported by the
/// supervisor; the data itself is plain).
pub fn lock(s: &StateRef) -> std::sync::MutexGuard<'_, State> {
    s.locked()
}

/// A fresh shared state.
pub fn share(s: State) -> StateRef {
    Arc::new(Mutex::new(s))
}

/// The kinds of step (Pulumi's step types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepKind {
    /// Unchanged: no provider call.
    Same,
    /// A new resource.
    Create,
    /// An in-place update.
    Update,
    /// The create half of a replace.
    CreateReplacement,
    /// The delete half of a replace.
    DeleteReplaced,
    /// A resource no longer in the program.
    Delete,
    /// An external resource read from the cloud.
    Read,
    /// State reconciled with the cloud.
    Refresh,
    /// An existing object adopted (`import`): read, never created.
    Import,
    /// A resource already deleted by a delete-before-replace, dropped from
    /// state because the program no longer has it.
    RemovePendingReplace,
}

impl StepKind {
    /// The stable name (`same`, `create`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Same => "same",
            Self::Create => "create",
            Self::Update => "update",
            Self::CreateReplacement => "create-replacement",
            Self::DeleteReplaced => "delete-replaced",
            Self::Delete => "delete",
            Self::Read => "read",
            Self::Refresh => "refresh",
            Self::Import => "import",
            Self::RemovePendingReplace => "remove-pending-replace",
        }
    }

    /// True for steps that change the cloud.
    pub fn is_mutation(self) -> bool {
        !matches!(self, Self::Same | Self::Read | Self::Refresh | Self::Import)
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a step changes, as events carry it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StepDiff {
    /// Top-level input keys that changed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diffs: Vec<String>,
    /// Top-level input keys whose change forces a replace.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<String>,
    /// The changed values (asked for with `--diff`).
    #[serde(rename = "detailedDiff", skip_serializing_if = "Vec::is_empty")]
    pub detailed: Vec<PropertyChange>,
}

impl StepDiff {
    /// True when it says nothing.
    pub fn is_empty(&self) -> bool {
        self.diffs.is_empty() && self.replaces.is_empty() && self.detailed.is_empty()
    }
}

/// How a property changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    /// New.
    Add,
    /// Gone.
    Delete,
    /// Another value.
    Update,
}

/// One changed property (a leaf of the diff).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PropertyChange {
    /// The property path (`a.b[0]`).
    pub path: String,
    /// How it changed.
    pub kind: ChangeKind,
    /// It is under a key whose change forces a replace.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
    /// The old value, secrets masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<serde_json::Value>,
    /// The new value, secrets masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<serde_json::Value>,
    /// A path the resource's `hideDiffs` names, under which something
    /// changed: its changes are not shown (no values).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

/// The states this operation wrote (or read), by URN: the executor
/// inserts, the migration coordinator reads them after quiescing (its §6.5
/// patches), when no chain can be writing.
#[derive(Debug, Default)]
pub struct Written(pub(crate) FastDashMap<Urn, StateRef>);

impl Written {
    /// The patches `patch` makes to the written states (each read under
    /// its lock), in URN order (deterministic: the order of a journal's
    /// `newStatePatches`). Only the states patched are sorted: a migration
    /// late in a large operation patches few of many.
    pub fn patches(
        &self,
        mut patch: impl FnMut(&State) -> Option<State>,
    ) -> Vec<(StateRef, State)> {
        // The handles first, the locks after: no state lock is taken
        // while a shard of the map is held.
        let handles: Vec<(Urn, StateRef)> = self
            .0
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        let mut v: Vec<(Urn, StateRef, State)> = handles
            .into_iter()
            .filter_map(|(urn, h)| {
                let p = patch(&lock(&h))?;
                Some((urn, h, p))
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.into_iter().map(|(_, s, p)| (s, p)).collect()
    }
}

impl Written {
    /// Forgets every state: at the end of an operation, so that the
    /// persister holds the only handles and can move the states into the
    /// outcome rather than copy them.
    pub fn clear(&self) {
        self.0.clear();
    }

    /// The state of `urn` written (or read) so far in this operation.
    pub fn get(&self, urn: &Urn) -> Option<State> {
        self.0.get(urn).map(|s| lock(s.value()).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TypeToken;

    #[test]
    fn patches_come_in_urn_order_and_only_for_the_states_patched() {
        let written = Written::default();
        let ty = TypeToken::parse("a:b:C").expect("type");
        let mut handles = Vec::new();
        for name in ["m", "z", "a", "q"] {
            let urn = Urn::parse(&format!("urn:pulumi:d::p::a:b:C::{name}")).expect("urn");
            let h = share(State::new(urn.clone(), ty.clone(), true));
            written.0.insert(urn, h.clone());
            handles.push((name, h));
        }
        // Every state but `q` is patched: its ID becomes its name.
        let patches = written.patches(|s| {
            (s.urn.name() != "q").then(|| {
                let mut p = s.clone();
                p.id = s.urn.name().into();
                p
            })
        });
        let names: Vec<String> = patches.iter().map(|(_, p)| p.id.to_string()).collect();
        assert_eq!(names, ["a", "m", "z"]);
        for (h, p) in &patches {
            let (_, want) = handles
                .iter()
                .find(|(n, _)| *n == p.id.as_str())
                .expect("a patched state");
            assert!(Arc::ptr_eq(h, want), "the patch carries its own handle");
        }
    }
}
