//! The end of an operation: the deletes of what the program no longer
//! registers (refusing protected ones and dangling references first) and
//! the steps of a refresh.

use std::collections::HashSet;

use crate::model::{State, Urn};

use super::{PlanError, Planner, Result};
use crate::plan::graph;
use crate::plan::step::{lock, Step, StepKind};

impl Planner {
    /// The deletes at the end of the program: prior resources no
    /// registration claimed, and the old halves of create-before-delete
    /// replaces, as antichains in reverse dependency order.
    ///
    /// # Errors
    /// [`PlanError::ProtectedDelete`] naming every protected resource that
    /// would be deleted (nothing is deleted then).
    pub(crate) fn deletes(&mut self) -> Result<Vec<Vec<Step>>> {
        let mut picked: Vec<(usize, StepKind)> = Vec::new();
        let scope = self.delete_scope();
        for (i, s) in self.olds.iter().enumerate() {
            let s = lock(s);
            if s.delete || self.replaced.contains(&i) {
                picked.push((i, StepKind::DeleteReplaced));
            } else if !self.handled[i] && scope.contains(&s.urn) {
                let kind = if s.pending_replacement {
                    StepKind::RemovePendingReplace
                } else {
                    StepKind::Delete
                };
                picked.push((i, kind));
            }
        }
        let states: Vec<State> = picked
            .iter()
            .map(|(i, _)| lock(&self.olds[*i]).clone())
            .collect();
        let protected: Vec<Urn> = states
            .iter()
            .zip(&picked)
            .filter(|(s, (_, k))| s.protect && *k == StepKind::Delete)
            .map(|(s, _)| s.urn.clone())
            .collect();
        if !protected.is_empty() {
            return Err(PlanError::ProtectedDelete { urns: protected });
        }
        self.check_left_behind(&picked)?;
        for (s, (_, kind)) in states.iter().zip(&picked) {
            if *kind != StepKind::Delete {
                continue;
            }
            if let Some(plan) = self.applied_plan() {
                if !plan.deletes.contains(&s.urn) {
                    return Err(PlanError::PlanDeviation {
                        urn: s.urn.clone(),
                        difference: "the program no longer has it, but the plan does not delete it"
                            .into(),
                    });
                }
            }
            if let Some(rec) = self.recording.as_mut() {
                rec.deletes.insert(s.urn.clone());
            }
        }
        let deleted: HashSet<&Urn> = states.iter().map(|s| &s.urn).collect();
        let refs: Vec<&State> = states.iter().collect();
        let groups = graph::delete_antichains(&refs);
        Ok(groups
            .into_iter()
            .map(|g| {
                g.into_iter()
                    .map(|k| {
                        let (i, kind) = picked[k];
                        let s = &states[k];
                        let mut step =
                            Step::new(kind, s.urn.clone(), Some(self.olds[i].clone()), None);
                        step.skip_provider = kind == StepKind::RemovePendingReplace
                            || s.retain_on_delete
                            || s.external
                            || !s.custom
                            || s.ty.is_provider()
                            || (!s.rare.deleted_with.is_empty()
                                && deleted.contains(&*s.rare.deleted_with));
                        step
                    })
                    .collect()
            })
            .collect())
    }

    /// Refuses deletes that would leave a dangling reference: a state the
    /// operation keeps as it was (outside `--target`, or excluded) that
    /// refers to a resource deleted now. Checked before any delete runs, so
    /// the stack always stays loadable.
    fn check_left_behind(&self, picked: &[(usize, StepKind)]) -> Result<()> {
        let gone: HashSet<Urn> = picked
            .iter()
            .filter(|(_, k)| matches!(k, StepKind::Delete | StepKind::RemovePendingReplace))
            .map(|(i, _)| lock(&self.olds[*i]).urn.clone())
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        let picked: HashSet<usize> = picked.iter().map(|(i, _)| *i).collect();
        // Registrations kept outside the targets refer only to registered
        // resources (`keep_references`): the unclaimed prior states the
        // operation leaves alone are what may still refer to a delete.
        let kept = (0..self.olds.len()).filter(|i| !self.handled[*i] && !picked.contains(i));
        let mut left: Vec<(Urn, Vec<Urn>)> = Vec::new();
        for i in kept {
            let s = lock(&self.olds[i]);
            if s.delete {
                continue;
            }
            for d in graph::edges(&s).filter(|d| gone.contains(d)) {
                match left.iter_mut().find(|(u, _)| *u == d) {
                    Some((_, deps)) if deps.contains(&s.urn) => {}
                    Some((_, deps)) => deps.push(s.urn.clone()),
                    None => left.push((d, vec![s.urn.clone()])),
                }
            }
        }
        match left.into_iter().next() {
            Some((urn, dependents)) => Err(PlanError::DependentsLeftBehind { urn, dependents }),
            None => Ok(()),
        }
    }

    /// Refresh steps: one per prior custom resource (not providers). Data
    /// sources and actions have no refresh lifecycle (unobin's model): an
    /// observation is re-read by the operations that declare it, and a
    /// completed action's record stays as it ran.
    pub(crate) fn refreshes(&mut self) -> Vec<Step> {
        self.olds
            .iter()
            .filter_map(|s| {
                let st = lock(s);
                (st.custom
                    && st.category().has_lifecycle()
                    && !st.ty.is_provider()
                    && !st.pending_replacement)
                    .then(|| Step::new(StepKind::Refresh, st.urn.clone(), Some(s.clone()), None))
            })
            .collect()
    }
}
