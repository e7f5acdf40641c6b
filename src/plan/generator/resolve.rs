//! Resolving a registration's identity: its URN, its parent, the aliases
//! it may have had (its own and those inherited from its parent), the
//! prior state it claims, and adopting a new prior list after a migration.

use std::collections::{HashMap, HashSet};

use crate::model::{TypeToken, Urn};
use crate::source::goal::{Alias, AliasParent, Goal};

use super::{PlanError, Planner, Result};
use crate::model::fasthash::{FastMap, FastSet};
use crate::plan::step::{lock, StateRef};

impl Planner {
    /// Derives a URN for a resource with this parent.
    ///
    /// # Errors
    /// [`PlanError::BadUrn`] when the parts do not make a URN.
    pub(crate) fn urn_for(&self, ty: &TypeToken, name: &str, parent: Option<&Urn>) -> Result<Urn> {
        Urn::derive(&self.opts.stack, &self.opts.project, parent, ty, name).map_err(|source| {
            PlanError::BadUrn {
                name: name.into(),
                ty: ty.to_string(),
                source,
            }
        })
    }

    fn alias_urn(&self, goal: &Goal, parent: Option<&Urn>, alias: &Alias) -> Result<Urn> {
        match alias {
            Alias::Urn(u) => Ok(u.clone()),
            Alias::Spec(spec) => {
                let name = spec.name.as_deref().unwrap_or(&goal.name);
                let ty = spec.ty.as_ref().unwrap_or(&goal.ty);
                let parent = match &spec.parent {
                    None => parent,
                    Some(AliasParent::NoParent) => None,
                    // A parent found through an alias had its prior URN
                    // then, and so had this resource's parent.
                    Some(AliasParent::Urn(u)) => Some(self.matched.get(u).unwrap_or(u)),
                };
                Urn::new(
                    spec.stack.as_deref().unwrap_or(&self.opts.stack),
                    spec.project.as_deref().unwrap_or(&self.opts.project),
                    parent.map(Urn::qualified_type),
                    ty,
                    name,
                )
                .map_err(|source| PlanError::BadUrn {
                    name: name.into(),
                    ty: ty.to_string(),
                    source,
                })
            }
        }
    }

    pub(super) fn check_registered(
        &self,
        urn: &Urn,
        target: &Urn,
        what: &'static str,
    ) -> Result<()> {
        if self.registered.contains(target) {
            Ok(())
        } else {
            Err(PlanError::UnknownReference {
                urn: urn.clone(),
                target: target.clone(),
                what,
            })
        }
    }

    /// The URN a child would have had under its parent's prior URN
    /// `parent_alias`: the same type and name, except that a name starting
    /// with the parent's (new) name starts with the prior one instead
    /// (`newapp-fn` under `newapp`, once `app`, was `app-fn`). `None` when
    /// the parts make no URN.
    fn inherited_alias(
        &self,
        ty: &TypeToken,
        name: &str,
        parent_name: &str,
        parent_alias: &Urn,
    ) -> Option<Urn> {
        let name = match name.strip_prefix(parent_name) {
            Some(rest) if !parent_name.is_empty() => format!("{}{rest}", parent_alias.name()),
            _ => name.to_owned(),
        };
        Urn::new(
            &self.opts.stack,
            &self.opts.project,
            Some(parent_alias.qualified_type()),
            ty,
            &name,
        )
        .ok()
    }

    /// Every URN a registration may have had before, in the order they
    /// are tried, each marked whether the program named it (`true`) or it
    /// is inherited from the parent (`false`). Pulumi's `generateAliases`:
    /// the goal's own aliases, then, for each URN its parent may have had
    /// (the one it was found under first), the goal's URN under it and
    /// each own alias under it.
    pub(super) fn generate_aliases(
        &self,
        goal: &Goal,
        parent: Option<&Urn>,
    ) -> Result<Vec<(Urn, bool)>> {
        let mut out: Vec<(Urn, bool)> = Vec::with_capacity(goal.options.aliases.len());
        for a in &goal.options.aliases {
            let u = self.alias_urn(goal, parent, a)?;
            if !out.iter().any(|(o, _)| *o == u) {
                out.push((u, true));
            }
        }
        let Some(parent) = parent else {
            return Ok(out);
        };
        let Some(parent_aliases) = self.alias_sets.get(parent) else {
            return Ok(out);
        };
        let own: Vec<(TypeToken, String)> = out
            .iter()
            .filter_map(|(u, _)| {
                TypeToken::parse(u.type_str())
                    .ok()
                    .map(|t| (t, u.name().to_owned()))
            })
            .collect();
        let mut seen: HashSet<Urn> = out.iter().map(|(u, _)| u.clone()).collect();
        let parent_name = parent.name();
        for pa in parent_aliases {
            let inherited =
                std::iter::once(self.inherited_alias(&goal.ty, &goal.name, parent_name, pa)).chain(
                    own.iter()
                        .map(|(ty, name)| self.inherited_alias(ty, name, parent_name, pa)),
                );
            for u in inherited.flatten() {
                if seen.insert(u.clone()) {
                    out.push((u, false));
                }
            }
        }
        Ok(out)
    }

    /// Finds the prior state for a registration: its own URN first, then
    /// each alias in order. An alias the program named that another
    /// registration already claimed is an error; an inherited one is
    /// passed over (it was never this resource's).
    pub(super) fn find_old(&mut self, urn: &Urn, aliases: &[(Urn, bool)]) -> Result<Option<usize>> {
        if let Some(&i) = self.live.get(urn) {
            if !self.claimed.contains_key(&i) {
                return Ok(Some(i));
            }
        }
        for (alias_urn, explicit) in aliases {
            if let Some(&i) = self.live.get(alias_urn) {
                if let Some(by) = self.claimed.get(&i) {
                    if !explicit {
                        continue;
                    }
                    return Err(PlanError::AliasAlreadyClaimed {
                        urn: urn.clone(),
                        alias: alias_urn.clone(),
                        claimed_by: by.clone(),
                    });
                }
                self.alias_claims.insert(alias_urn.clone());
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// The parent a goal registers under: its own, or the stack resource
    /// (providers without an explicit parent stay top-level, as Pulumi's
    /// default providers are; their URN is the same either way).
    pub(crate) fn parent_of(&self, goal: &Goal) -> Option<Urn> {
        match (
            &goal.options.parent,
            goal.ty.is_stack() || goal.ty.is_provider(),
        ) {
            (Some(p), _) => Some(p.clone()),
            (None, false) => self.root.clone(),
            (None, true) => None,
        }
    }

    /// The URNs a goal may have had before, in order: its own aliases,
    /// then those inherited from its parent's.
    ///
    /// # Errors
    /// [`PlanError::BadUrn`] when an alias does not make a URN.
    pub(crate) fn alias_urns(&self, goal: &Goal) -> Result<Vec<Urn>> {
        let parent = self.parent_of(goal);
        Ok(self
            .generate_aliases(goal, parent.as_ref())?
            .into_iter()
            .map(|(u, _)| u)
            .collect())
    }

    /// Adopts a new prior list after a committed migration: retained states
    /// keep their handles (and so their claims and handled marks), result
    /// states are new and unclaimed, removed states are gone.
    pub(crate) fn resync(&mut self, olds: Vec<StateRef>) {
        let ptr = |s: &StateRef| std::sync::Arc::as_ptr(s) as usize;
        let old_index: HashMap<usize, usize> = self
            .olds
            .iter()
            .enumerate()
            .map(|(i, s)| (ptr(s), i))
            .collect();
        let mut handled = vec![false; olds.len()];
        let mut claimed = FastMap::default();
        let mut replaced = FastSet::default();
        let mut live = FastMap::with_capacity_and_hasher(olds.len(), Default::default());
        for (j, s) in olds.iter().enumerate() {
            if let Some(&i) = old_index.get(&ptr(s)) {
                handled[j] = self.handled[i];
                if let Some(by) = self.claimed.get(&i) {
                    claimed.insert(j, by.clone());
                }
                if self.replaced.contains(&i) {
                    replaced.insert(j);
                }
            }
            let st = lock(s);
            if !st.delete {
                live.insert(st.urn.clone(), j);
            }
        }
        self.olds = olds;
        self.handled = handled;
        self.claimed = claimed;
        self.replaced = replaced;
        self.live = live;
    }
}
