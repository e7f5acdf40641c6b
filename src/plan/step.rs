//! Steps: the unit of work the executor runs, one provider operation (or
//! none) on one resource.

use crate::model::{State, Urn};

pub(crate) use crate::model::step::{lock, StateRef, StepKind};

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

    /// The category and composite flag of the entry the step acts on (its
    /// new state, else its prior one), for the step's events.
    pub fn entry_kind(&self) -> (crate::model::state::Category, bool) {
        match (&self.new, &self.old) {
            (Some(n), _) => (n.category(), n.composite()),
            (None, Some(o)) => {
                let o = crate::model::step::lock(o);
                (o.category(), o.composite())
            }
            (None, None) => (crate::model::state::Category::Resource, false),
        }
    }
}

/// Steps that run one after the other, for one registration (or one delete).
#[derive(Debug, Clone, Default)]
pub(crate) struct Chain {
    /// The steps in order.
    pub steps: Vec<Step>,
    /// URNs whose steps in this operation must finish before this chain
    /// starts (parent, dependencies, provider).
    pub waits_for: Vec<Urn>,
}
