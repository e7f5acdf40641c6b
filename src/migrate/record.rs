//! The rewrites a deployment keeps after its migrations commit
//! (`migrations.md` §9).
//!
//! Per committed migration: its root, its `original -> final` successor map
//! and the identity of each successor. They are applied in commit order (so
//! `A -> B` then `B -> C` gives `C`) to the parent and aliases of later
//! registrations, to `ReadResource` and `RegisterResourceOutputs` events,
//! and to a registration's goal after its own migrations ran. A later
//! registration or read whose URN is a predecessor fails with
//! `predecessor-reused`. [`Rewrites::normalize_goal`],
//! [`Rewrites::normalize_read`] and [`Rewrites::normalize_outputs`] are
//! what the step generator applies to each program event.

use std::collections::BTreeMap;

use super::chain::ChainOutcome;
use super::rewrite::{self, Identity, SuccessorMap};
use super::rules::{MigrationError, Result};
use crate::model::{PropertyMap, Urn};
#[cfg(test)]
use crate::model::{PropertyValue, State};
use crate::source::goal::{Alias, AliasParent, Goal, ReadGoal};

/// One committed migration.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Committed {
    /// The registration URN of the migration.
    pub root: Urn,
    /// `original -> final`, keyed by prior subtree URNs.
    pub successors: SuccessorMap,
    /// The identity of each successor.
    pub identities: BTreeMap<Urn, Identity>,
}

/// Every committed migration of a deployment, in commit order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Rewrites {
    committed: Vec<Committed>,
}

impl Rewrites {
    /// No migration committed.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// True when no migration that maps a URN has been committed.
    pub(crate) fn is_empty(&self) -> bool {
        self.committed.iter().all(|c| c.successors.is_empty())
    }

    /// Records the migration of `root` with `outcome` (§7 commit step 5).
    pub(crate) fn record(&mut self, root: Urn, outcome: &ChainOutcome) {
        self.committed.push(Committed {
            root,
            successors: outcome.original_to_final.clone(),
            identities: outcome.successor_identities(),
        });
    }

    /// `urn` after every committed rewrite, in commit order.
    pub(crate) fn map_urn(&self, urn: &Urn) -> Urn {
        let mut cur = urn.clone();
        for c in &self.committed {
            if let Some(next) = c.successors.get(&cur) {
                cur = next.clone();
            }
        }
        cur
    }

    #[cfg(test)]
    /// Maps each URN of a list (parents, aliases, dependencies) and
    /// de-duplicates it keeping the first occurrence; `None` when nothing
    /// changes.
    pub(crate) fn map_list(&self, list: &[Urn]) -> Option<Vec<Urn>> {
        let mut out: Option<Vec<Urn>> = None;
        for c in &self.committed {
            if let Some(mapped) = rewrite::map_list(out.as_deref().unwrap_or(list), &c.successors) {
                out = Some(mapped);
            }
        }
        out
    }

    /// `predecessor-reused` when `urn` (of a registration or a read) was
    /// mapped away by a committed migration.
    ///
    /// # Errors
    /// `predecessor-reused`, naming the migration root and the final
    /// successor.
    pub(crate) fn check_not_predecessor(&self, urn: &Urn) -> Result<()> {
        for c in &self.committed {
            if c.successors.contains_key(urn) {
                return Err(MigrationError::predecessor_reused(
                    urn,
                    &c.root,
                    &self.map_urn(urn),
                ));
            }
        }
        Ok(())
    }

    /// Rewrites the references inside a property map (resource references,
    /// output dependencies); `None` when nothing changes.
    pub(crate) fn rewrite_map(&self, m: &PropertyMap) -> Option<PropertyMap> {
        let mut out: Option<PropertyMap> = None;
        for c in &self.committed {
            let ids = |u: &Urn| c.identities.get(u).cloned();
            if let Some(n) = rewrite::rewrite_map(out.as_ref().unwrap_or(m), &c.successors, &ids) {
                out = Some(n);
            }
        }
        out
    }

    #[cfg(test)]
    /// Rewrites the references inside one property value; `None` when
    /// nothing changes.
    pub(crate) fn rewrite_value(&self, v: &PropertyValue) -> Option<PropertyValue> {
        let mut out: Option<PropertyValue> = None;
        for c in &self.committed {
            let ids = |u: &Urn| c.identities.get(u).cloned();
            if let Some(n) = rewrite::rewrite_value(out.as_ref().unwrap_or(v), &c.successors, &ids)
            {
                out = Some(n);
            }
        }
        out
    }

    /// Points a registration at successors (§9): its parent, dependencies,
    /// property dependencies, `deletedWith`, alias parents and URN aliases,
    /// provider, and the resource references and output dependencies
    /// inside its inputs (their IDs become the successors').
    pub(crate) fn normalize_goal(&self, goal: &mut Goal) {
        if self.is_empty() {
            return;
        }
        let o = &mut goal.options;
        let map = |u: &Urn| self.map_urn(u);
        o.parent = o.parent.as_ref().map(map);
        o.depends_on = o.depends_on.iter().map(map).collect();
        for list in o.property_dependencies.values_mut() {
            *list = list.iter().map(map).collect();
        }
        o.deleted_with = o.deleted_with.as_ref().map(map);
        for a in &mut o.aliases {
            match a {
                Alias::Urn(u) => *u = map(u),
                Alias::Spec(spec) => {
                    if let Some(AliasParent::Urn(p)) = &mut spec.parent {
                        *p = map(p);
                    }
                }
            }
        }
        if let Some(p) = o.provider.as_ref().and_then(|p| self.rewrite_provider(p)) {
            o.provider = Some(p);
        }
        if let Some(inputs) = self.rewrite_map(&goal.inputs) {
            goal.inputs = inputs;
        }
    }

    /// Points a `ReadResource` at successors (§9): its parent,
    /// dependencies, provider, and the references inside its inputs.
    pub(crate) fn normalize_read(&self, goal: &mut ReadGoal) {
        if self.is_empty() {
            return;
        }
        goal.parent = goal.parent.as_ref().map(|p| self.map_urn(p));
        goal.depends_on = goal.depends_on.iter().map(|d| self.map_urn(d)).collect();
        if let Some(p) = goal
            .provider
            .as_ref()
            .and_then(|p| self.rewrite_provider(p))
        {
            goal.provider = Some(p);
        }
        if let Some(inputs) = self.rewrite_map(&goal.inputs) {
            goal.inputs = inputs;
        }
    }

    /// Points a `RegisterResourceOutputs` at successors (§9): its URN
    /// (returned) and the references inside the outputs.
    pub(crate) fn normalize_outputs(&self, urn: &Urn, outputs: &mut PropertyMap) -> Urn {
        if self.is_empty() {
            return urn.clone();
        }
        if let Some(m) = self.rewrite_map(outputs) {
            *outputs = m;
        }
        self.map_urn(urn)
    }

    /// Rewrites a provider reference `<URN>::<ID>`; `None` when nothing
    /// changes.
    pub(crate) fn rewrite_provider(&self, reference: &str) -> Option<String> {
        let mut out: Option<String> = None;
        for c in &self.committed {
            let ids = |u: &Urn| c.identities.get(u).cloned();
            if let Some(n) =
                rewrite::rewrite_provider(out.as_deref().unwrap_or(reference), &c.successors, &ids)
            {
                out = Some(n);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::rules::Rule;

    fn urn(n: &str) -> Urn {
        Urn::parse(&format!("urn:pulumi:s::p::a:b:C::{n}")).unwrap()
    }

    fn outcome(from: &str, to: &str) -> ChainOutcome {
        let result: Vec<State> = vec![serde_json::from_value(serde_json::json!({
            "urn": urn(to).as_str(), "custom": true, "id": format!("id-{to}"), "type": "a:b:C"
        }))
        .unwrap()];
        ChainOutcome {
            noop: false,
            result,
            original_to_final: [(urn(from), urn(to))].into(),
            all_to_final: [(urn(from), urn(to))].into(),
            added: vec![urn(to)],
        }
    }

    #[test]
    fn rewrites_apply_in_commit_order() {
        let mut r = Rewrites::new();
        assert!(r.is_empty());
        r.record(urn("root1"), &outcome("a", "b"));
        r.record(urn("root2"), &outcome("b", "c"));
        assert_eq!(r.map_urn(&urn("a")), urn("c"));
        assert_eq!(r.map_urn(&urn("x")), urn("x"));
        assert_eq!(
            r.map_list(&[urn("a"), urn("b"), urn("x")]).unwrap(),
            vec![urn("c"), urn("x")]
        );
        assert!(r.map_list(&[urn("x")]).is_none());
        let e = r.check_not_predecessor(&urn("a")).unwrap_err();
        assert_eq!(e.rule, Rule::PredecessorReused);
        assert!(e.message.contains("root1") && e.message.contains("::c"));
        r.check_not_predecessor(&urn("c")).unwrap();
        let sig = crate::model::property::SIG_KEY;
        let v = PropertyValue::from_json(&serde_json::json!({
            sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": urn("a").as_str()
        }))
        .unwrap();
        assert_eq!(
            r.rewrite_value(&v).unwrap().to_json(),
            serde_json::json!({sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": urn("c").as_str(), "id": "id-c"})
        );
    }

    /// Values naming the predecessor `a`: a reference (with its old ID),
    /// an output depending on it, nested in an object and a list.
    fn naming_a() -> PropertyMap {
        let sig = crate::model::property::SIG_KEY;
        let v = serde_json::json!({
            "ref": {sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": urn("a").as_str(), "id": "id-a"},
            "out": {sig: "d0e6a833031e9bbcd3f4e8bde6ca49a4", "value": "v",
                    "dependencies": [urn("a").as_str(), urn("x").as_str()]},
            "nested": {"list": [{sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": urn("a").as_str()}]},
            "plain": urn("a").as_str(),
        });
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), PropertyValue::from_json(v).unwrap()))
            .collect()
    }

    /// The same values naming the successor `b` (a plain string is not a
    /// reference and stays).
    fn naming_b() -> serde_json::Value {
        let sig = crate::model::property::SIG_KEY;
        serde_json::json!({
            "ref": {sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": urn("b").as_str(), "id": "id-b"},
            "out": {sig: "d0e6a833031e9bbcd3f4e8bde6ca49a4", "value": "v",
                    "dependencies": [urn("b").as_str(), urn("x").as_str()]},
            "nested": {"list": [{sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": urn("b").as_str(), "id": "id-b"}]},
            "plain": urn("a").as_str(),
        })
    }

    fn json(m: &PropertyMap) -> serde_json::Value {
        PropertyValue::Object(m.clone()).to_json()
    }

    #[test]
    fn program_events_are_pointed_at_successors_values_included() {
        let mut r = Rewrites::new();
        r.record(urn("root"), &outcome("a", "b"));
        let ty = crate::model::TypeToken::parse("a:b:C").unwrap();

        let mut goal = Goal::custom(ty.clone(), "later", naming_a());
        goal.options.parent = Some(urn("a"));
        goal.options.depends_on = vec![urn("a")];
        goal.options
            .property_dependencies
            .insert("ref".into(), vec![urn("a")]);
        r.normalize_goal(&mut goal);
        assert_eq!(json(&goal.inputs), naming_b());
        assert_eq!(goal.options.parent, Some(urn("b")));
        assert_eq!(goal.options.depends_on, vec![urn("b")]);
        assert_eq!(goal.options.property_dependencies["ref"], vec![urn("b")]);

        let mut read = ReadGoal {
            ty,
            name: "seen".into(),
            id: "i".into(),
            inputs: naming_a(),
            parent: Some(urn("a")),
            provider: None,
            depends_on: vec![urn("a")],
            additional_secret_outputs: Vec::new(),
            version: None,
            plugin_download_url: None,
            ..Default::default()
        };
        r.normalize_read(&mut read);
        assert_eq!(json(&read.inputs), naming_b());
        assert_eq!(
            (read.parent, read.depends_on),
            (Some(urn("b")), vec![urn("b")])
        );

        let mut outputs = naming_a();
        assert_eq!(r.normalize_outputs(&urn("a"), &mut outputs), urn("b"));
        assert_eq!(json(&outputs), naming_b());

        // No migration: nothing changes.
        let none = Rewrites::new();
        let mut outputs = naming_a();
        assert_eq!(none.normalize_outputs(&urn("a"), &mut outputs), urn("a"));
        assert_eq!(outputs, naming_a());
    }
}
