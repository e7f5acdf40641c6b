//! Steps: the unit of work the executor runs, one provider operation (or
//! none) on one resource.

use std::fmt;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::model::{State, Urn};

/// A state shared between the generator, the executor and the persister.
/// Identity is by `Arc` pointer.
pub type StateRef = Arc<Mutex<State>>;

/// Locks a state, ignoring poisoning (a panicked holder is reported by the
/// supervisor; the data itself is plain).
pub fn lock(s: &StateRef) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// One step.
#[derive(Debug, Clone)]
pub struct Step {
    /// What to do.
    pub kind: StepKind,
    /// The resource's URN.
    pub urn: Urn,
    /// The prior state the step acts on (same, update, replace, delete,
    /// refresh).
    pub old: Option<StateRef>,
    /// The state to write (same, create, update, create-replacement, read):
    /// the goal's fields; the executor fills in ID and outputs.
    pub new: Option<State>,
    /// For deletes: skip the provider call (retainOnDelete, external,
    /// deletedWith a resource deleted in the same operation, or already
    /// deleted by a delete-before-replace).
    pub skip_provider: bool,
    /// For a delete-replaced of a delete-before-replace: keep the state,
    /// marked `pendingReplacement`, instead of removing it.
    pub keep_pending: bool,
    /// A create skipped because the resource is outside `--target` (or in
    /// `--exclude`): the registration learns its goal, nothing is written.
    pub skipped: bool,
    /// The registration's hooks (none for deletes planned at the end).
    pub hooks: Option<std::sync::Arc<crate::source::hooks::ResourceHooks>>,
    /// The provider's diff this step was decided on (an update or replace
    /// of a custom resource), for the step's events.
    pub provider_diff: Option<std::sync::Arc<crate::provider::DiffResponse>>,
}

impl Step {
    /// A step on a resource.
    pub fn new(kind: StepKind, urn: Urn, old: Option<StateRef>, new: Option<State>) -> Self {
        Self {
            kind,
            urn,
            old,
            new,
            skip_provider: false,
            keep_pending: false,
            skipped: false,
            hooks: None,
            provider_diff: None,
        }
    }
}

/// Steps that run one after the other, for one registration (or one delete).
#[derive(Debug, Clone, Default)]
pub struct Chain {
    /// The steps in order.
    pub steps: Vec<Step>,
    /// URNs whose steps in this operation must finish before this chain
    /// starts (parent, dependencies, provider).
    pub waits_for: Vec<Urn>,
}
