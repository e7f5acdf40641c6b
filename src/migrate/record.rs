//! The rewrites a deployment keeps after its migrations commit
//! (`migrations.md` §9).
//!
//! Per committed migration: its root, its `original -> final` successor map
//! and the identity of each successor. They are applied in commit order (so
//! `A -> B` then `B -> C` gives `C`) to the parent and aliases of later
//! registrations, to `ReadResource` and `RegisterResourceOutputs` events,
//! and to a registration's goal after its own migrations ran. A later
//! registration or read whose URN is a predecessor fails with
//! `predecessor-reused`.

use std::collections::BTreeMap;

use super::chain::ChainOutcome;
use super::rewrite::{self, Identity, SuccessorMap};
use super::rules::{MigrationError, Result};
use crate::model::{PropertyMap, PropertyValue, State, Urn};

/// One committed migration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Committed {
    /// The registration URN of the migration.
    pub root: Urn,
    /// `original -> final`, keyed by prior subtree URNs.
    pub successors: SuccessorMap,
    /// The identity of each successor.
    pub identities: BTreeMap<Urn, Identity>,
}

/// Every committed migration of a deployment, in commit order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rewrites {
    committed: Vec<Committed>,
}

impl Rewrites {
    /// No migration committed.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when no migration that maps a URN has been committed.
    pub fn is_empty(&self) -> bool {
        self.committed.iter().all(|c| c.successors.is_empty())
    }

    /// The committed migrations, in commit order.
    pub fn committed(&self) -> &[Committed] {
        &self.committed
    }

    /// Records the migration of `root` with `outcome` (§7 commit step 5).
    pub fn record(&mut self, root: Urn, outcome: &ChainOutcome) {
        self.committed.push(Committed {
            root,
            successors: outcome.original_to_final.clone(),
            identities: outcome.successor_identities(),
        });
    }

    /// `urn` after every committed rewrite, in commit order.
    pub fn map_urn(&self, urn: &Urn) -> Urn {
        let mut cur = urn.clone();
        for c in &self.committed {
            if let Some(next) = c.successors.get(&cur) {
                cur = next.clone();
            }
        }
        cur
    }

    /// Maps each URN of a list (parents, aliases, dependencies) and
    /// de-duplicates it keeping the first occurrence; `None` when nothing
    /// changes.
    pub fn map_list(&self, list: &[Urn]) -> Option<Vec<Urn>> {
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
    pub fn check_not_predecessor(&self, urn: &Urn) -> Result<()> {
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

    /// Rewrites the references of a state (§8) with every committed map in
    /// commit order; `None` when nothing changes.
    pub fn rewrite_state(&self, state: &State) -> Option<State> {
        let mut out: Option<State> = None;
        for c in &self.committed {
            let ids = |u: &Urn| c.identities.get(u).cloned();
            if let Some(s) = rewrite::rewrite(out.as_ref().unwrap_or(state), &c.successors, &ids) {
                out = Some(s);
            }
        }
        out
    }

    /// Rewrites the references inside a property map (resource references,
    /// output dependencies); `None` when nothing changes.
    pub fn rewrite_map(&self, m: &PropertyMap) -> Option<PropertyMap> {
        let mut out: Option<PropertyMap> = None;
        for c in &self.committed {
            let ids = |u: &Urn| c.identities.get(u).cloned();
            if let Some(n) = rewrite::rewrite_map(out.as_ref().unwrap_or(m), &c.successors, &ids) {
                out = Some(n);
            }
        }
        out
    }

    /// Rewrites the references inside one property value; `None` when
    /// nothing changes.
    pub fn rewrite_value(&self, v: &PropertyValue) -> Option<PropertyValue> {
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

    /// Rewrites a provider reference `<URN>::<ID>`; `None` when nothing
    /// changes.
    pub fn rewrite_provider(&self, reference: &str) -> Option<String> {
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
}
