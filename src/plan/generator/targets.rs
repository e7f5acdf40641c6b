//! The operation's scope (`--target`, `--exclude` and their `-dependents`
//! forms): which registrations change and which prior states may be
//! deleted.

use std::collections::HashSet;

use crate::model::{TypeToken, Urn};

use super::Planner;
use crate::plan::graph;
use crate::plan::step::lock;

impl Planner {
    /// Whether a resource is inside the operation's scope (`--target`,
    /// `--exclude`); providers and the stack resource always are. Records
    /// the answer for its dependents.
    pub(super) fn in_scope<'a>(
        &mut self,
        urn: &Urn,
        ty: &TypeToken,
        refs: impl Iterator<Item = &'a Urn>,
    ) -> bool {
        if ty.is_provider() || ty.is_stack() {
            return true;
        }
        let o = &self.opts.update;
        if !o.targets.is_empty() {
            let refs: Vec<&Urn> = refs.collect();
            let hit = o.targets.contains(urn)
                || (o.target_dependents && refs.iter().any(|d| self.targeted.contains(*d)));
            if hit {
                self.targeted.insert(urn.clone());
            }
            return hit;
        }
        if !o.excludes.is_empty() {
            let refs: Vec<&Urn> = refs.collect();
            let out = o.excludes.contains(urn)
                || (o.exclude_dependents && refs.iter().any(|d| self.excluded.contains(*d)));
            if out {
                self.excluded.insert(urn.clone());
            }
            return !out;
        }
        true
    }

    /// Which prior states the operation may delete (`--target`,
    /// `--exclude`). `--target-dependents` and `--exclude-dependents` close
    /// the set transitively over every reference a state has: parent,
    /// dependencies, property dependencies, `deletedWith`, `replaceWith`
    /// and its provider.
    pub(super) fn delete_scope(&self) -> DeleteScope {
        let o = &self.opts.update;
        let close = |mut set: HashSet<Urn>, transitive: bool| {
            let mut grew = transitive;
            while grew {
                let before = set.len();
                for s in &self.olds {
                    let s = lock(s);
                    if !set.contains(&s.urn) && graph::edges(&s).any(|d| set.contains(&d)) {
                        set.insert(s.urn.clone());
                    }
                }
                grew = set.len() > before;
            }
            set
        };
        if !o.targets.is_empty() {
            let seed = o.targets.iter().chain(&self.targeted).cloned().collect();
            return DeleteScope::Only(close(seed, o.target_dependents));
        }
        if !o.excludes.is_empty() {
            let seed = o.excludes.iter().chain(&self.excluded).cloned().collect();
            return DeleteScope::AllBut(close(seed, o.exclude_dependents));
        }
        DeleteScope::All
    }
}

/// The prior states an operation may delete.
#[derive(Debug)]
pub(super) enum DeleteScope {
    /// Every one (no filter).
    All,
    /// Only these (`--target`).
    Only(HashSet<Urn>),
    /// All but these (`--exclude`).
    AllBut(HashSet<Urn>),
}

impl DeleteScope {
    pub(super) fn contains(&self, urn: &Urn) -> bool {
        match self {
            Self::All => true,
            Self::Only(set) => set.contains(urn),
            Self::AllBut(set) => !set.contains(urn),
        }
    }
}
