//! Which prior dependents a delete-before-replace must replace too
//! (Pulumi's `calculateDependentReplacements`), as a sans-IO walk.
//!
//! Deleting a resource first would leave whatever depends on it pointing
//! at nothing, but only some dependents actually need to go. The walk
//! visits the replaced resource's transitive prior dependents (through
//! dependencies, property dependencies, `deletedWith`, `replaceWith` and
//! the provider reference) in prior order, which is dependency order, and
//! builds the set of resources to replace, starting with the root:
//!
//! - components and external resources are never replaced;
//! - a resource whose provider, `deletedWith` or a `replaceWith` entry is
//!   in the set is replaced;
//! - otherwise only inputs whose property dependencies name a member of
//!   the set can change: with none (a `dependsOn`-only link) it stays;
//!   else those inputs become unknown, its `ignoreChanges` put back, and
//!   its provider is asked to diff against them ([`DependentWalk::next_request`]
//!   hands out that request, [`DependentWalk::answer`] takes the answer);
//!   with `replaceOnChanges` applied, a replace puts it in the set.
//!
//! The planner builds the walk ([`super::generator::Planner::dependents_walk`]);
//! the StepGenerator actor drives it, making the provider calls in a
//! continuation, and hands the result to
//! [`super::generator::Planner::decide_with`].

use std::collections::HashSet;

use crate::model::urn::split_reference;
use crate::model::{PropertyPath, PropertyValue, ProviderRef, State, Urn};
use crate::provider::{DiffKind, DiffResponse};

use super::diffs;

/// A diff the walk needs from a dependent's provider.
#[derive(Debug, Clone)]
pub(crate) struct DependentDiff {
    /// The dependent's prior state.
    pub old: State,
    /// Its inputs with those that depend on replaced resources unknown.
    pub inputs: crate::model::PropertyMap,
    /// The provider to ask: the dependent's own for a custom resource;
    /// for a provider resource, its own reference (compare configurations).
    pub provider: ProviderRef,
}

/// The walk over a replaced resource's prior dependents.
#[derive(Debug, Clone)]
pub(crate) struct DependentWalk {
    /// Candidates in prior order: (prior index, state).
    candidates: Vec<(usize, State)>,
    next: usize,
    replace: HashSet<Urn>,
    chosen: Vec<(usize, Urn)>,
    pending: Option<(usize, DependentDiff)>,
}

impl DependentWalk {
    /// A walk for `root` over `candidates`, its transitive prior
    /// dependents in prior order.
    pub(crate) fn new(root: Urn, candidates: Vec<(usize, State)>) -> Self {
        Self {
            candidates,
            next: 0,
            replace: HashSet::from([root]),
            chosen: Vec::new(),
            pending: None,
        }
    }

    /// The next provider diff the walk needs, or `None` once it is done.
    /// Each request must be answered before asking again.
    pub(crate) fn next_request(&mut self) -> Option<&DependentDiff> {
        while self.pending.is_none() && self.next < self.candidates.len() {
            let (index, s) = &self.candidates[self.next];
            self.next += 1;
            match self.needs(s) {
                Need::No => {}
                Need::Yes => {
                    self.replace.insert(s.urn.clone());
                    self.chosen.push((*index, s.urn.clone()));
                }
                Need::Diff(d) => self.pending = Some((*index, *d)),
            }
        }
        self.pending.as_ref().map(|(_, d)| d)
    }

    /// The answer to the request [`DependentWalk::next_request`] handed out (the
    /// provider's diff, before `replaceOnChanges`).
    pub(crate) fn answer(&mut self, diff: &DiffResponse) {
        let Some((index, d)) = self.pending.take() else {
            return;
        };
        let paths = parsed(&d.old.rare.replace_on_changes);
        let diff = diffs::apply_replace_on_changes(diff.clone(), &paths, &d.old.inputs, &d.inputs);
        if diff.kind == DiffKind::Replace {
            self.replace.insert(d.old.urn.clone());
            self.chosen.push((index, d.old.urn));
        }
    }

    /// Finishes a walk whose requests were not answered by a provider:
    /// every dependent that would need a diff is taken as replaced (the
    /// conservative choice, for callers that cannot ask).
    pub(crate) fn assume_replace(mut self) -> DependentReplacements {
        let replace = DiffResponse {
            kind: DiffKind::Replace,
            changed_keys: Default::default(),
            replace_keys: Default::default(),
            delete_before_replace: false,
            detailed: Vec::new(),
        };
        while self.next_request().is_some() {
            self.answer(&replace);
        }
        self.finish()
    }

    /// The result, once [`DependentWalk::next_request`] returned `None`.
    pub(crate) fn finish(self) -> DependentReplacements {
        DependentReplacements {
            replaced: self.chosen,
        }
    }

    fn needs(&self, s: &State) -> Need {
        if !s.custom || s.external {
            return Need::No;
        }
        if provider_urn(&s.provider).is_some_and(|p| self.replace.contains(p)) {
            return Need::Yes;
        }
        if (!s.rare.deleted_with.as_str().is_empty()
            && self.replace.contains(&*s.rare.deleted_with))
            || s.rare.replace_with.iter().any(|u| self.replace.contains(u))
        {
            return Need::Yes;
        }
        let mut inputs = s.inputs.clone();
        let mut affected = false;
        for (key, deps) in &s.property_dependencies {
            let hit = deps.iter().flatten().any(|d| self.replace.contains(d));
            // Only an input the dependent has can change.
            if let Some(v) = inputs.get_mut(key).filter(|_| hit) {
                *v = PropertyValue::Computed;
                affected = true;
            }
        }
        if !affected {
            return Need::No;
        }
        // What the dependent ignores keeps its old value when it registers
        // again, so it cannot force a replace.
        for path in parsed(&s.rare.ignore_changes) {
            path.reset(&s.inputs, &mut inputs);
        }
        let provider = if s.ty.is_provider() {
            ProviderRef::new(s.urn.clone(), s.id.clone())
        } else {
            ProviderRef::parse(&s.provider)
        };
        match provider {
            Ok(provider) => Need::Diff(Box::new(DependentDiff {
                old: s.clone(),
                inputs,
                provider,
            })),
            // A state with no usable provider reference cannot be asked:
            // replace it, as the safe choice.
            Err(_) => Need::Yes,
        }
    }
}

enum Need {
    No,
    Yes,
    Diff(Box<DependentDiff>),
}

/// The prior dependents a delete-before-replace replaces: (prior index,
/// URN), in prior order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DependentReplacements {
    /// The dependents to replace.
    pub replaced: Vec<(usize, Urn)>,
}

/// The paths of a prior state's options that parse (a prior state keel
/// did not write may hold paths keel refuses in a program).
fn parsed(paths: &[String]) -> Vec<PropertyPath> {
    paths
        .iter()
        .filter_map(|p| PropertyPath::parse(p).ok())
        .collect()
}

/// The URN part of a provider reference.
fn provider_urn(reference: &str) -> Option<&str> {
    if reference.is_empty() {
        return None;
    }
    Some(split_reference(reference).map_or(reference, |(u, _)| u))
}
