//! The prior root and the prior subtree of a registration (`migrations.md`
//! §1).
//!
//! The prior root is the live prior resource found for the registration:
//! its own URN first, then each alias in order. The prior subtree is the
//! root, then all of its transitive children (by `parent`) in snapshot
//! order; children marked `delete` are kept apart (they are not given to
//! callbacks, and a changing migration is refused while they exist:
//! `pending-delete`).

use crate::model::fasthash::FastSet;
use crate::model::{State, Urn};

/// Where the prior root of a registration was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RootMatch {
    /// Its index in the prior list.
    pub index: usize,
    /// The alias it was found through (the URN the registration claims),
    /// or `None` when found by the registration's own URN.
    pub via_alias: Option<Urn>,
}

/// Finds the prior root of a registration with URN `urn` and `aliases`:
/// the live (not `delete`) prior resource with the registration's URN,
/// else with each alias in order. `None`: no prior root, nothing runs.
pub(crate) fn find_root(prior: &[&State], urn: &Urn, aliases: &[Urn]) -> Option<RootMatch> {
    let live = |u: &Urn| prior.iter().position(|s| live_at(s, u));
    if let Some(index) = live(urn) {
        return Some(RootMatch {
            index,
            via_alias: None,
        });
    }
    aliases.iter().find_map(|a| {
        live(a).map(|index| RootMatch {
            index,
            via_alias: Some(a.clone()),
        })
    })
}

/// The prior subtree: indices into the prior list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Subtree {
    /// The live members: the root first, then its transitive children in
    /// snapshot order. These are what callbacks get.
    pub members: Vec<usize>,
    /// Transitive children marked `delete` (pending deletion), in snapshot
    /// order. Not given to callbacks.
    pub pending_delete: Vec<usize>,
    /// Every member index (live and pending), sorted, for lookups.
    sorted: Vec<usize>,
}

impl Subtree {
    /// A subtree from its parts (`members[0]` is the root).
    ///
    /// # Panics
    /// When `members` is empty.
    pub(crate) fn new(members: Vec<usize>, pending_delete: Vec<usize>) -> Self {
        assert!(!members.is_empty(), "a subtree has a root");
        let mut sorted: Vec<usize> = members.iter().chain(&pending_delete).copied().collect();
        sorted.sort_unstable();
        sorted.dedup();
        Self {
            members,
            pending_delete,
            sorted,
        }
    }

    /// Collects the subtree of the prior resource at `root` (one pass over
    /// the list: parents come before their children in a valid snapshot).
    ///
    /// # Panics
    /// When `root` is out of bounds.
    pub(crate) fn collect(prior: &[&State], root: usize) -> Self {
        let mut urns: FastSet<&str> = FastSet::default();
        urns.insert(prior[root].urn.as_str());
        let mut members = vec![root];
        let mut pending = Vec::new();
        for (i, s) in prior.iter().enumerate() {
            if i == root {
                continue;
            }
            let Some(parent) = s.parent() else { continue };
            if urns.contains(parent.as_str()) {
                if s.delete {
                    pending.push(i);
                } else {
                    members.push(i);
                }
                urns.insert(s.urn.as_str());
            }
        }
        Self::new(members, pending)
    }

    /// The root's index.
    pub(crate) fn root(&self) -> usize {
        self.members[0]
    }

    /// Whether prior index `i` is a member (live or pending deletion).
    pub(crate) fn contains(&self, i: usize) -> bool {
        self.sorted.binary_search(&i).is_ok()
    }

    /// Every member index (live and pending deletion), ascending.
    pub(crate) fn all_sorted(&self) -> &[usize] {
        &self.sorted
    }

    /// The live members' states, root first: the chain's original input.
    pub(crate) fn states(&self, prior: &[&State]) -> Vec<State> {
        self.members.iter().map(|&i| prior[i].clone()).collect()
    }
}

/// Whether [`find_root`] finds a root among `prior`, for states read one
/// at a time (each under its lock) rather than as a slice: the check that
/// comes before a migration copies nothing.
pub(crate) fn has_root<S: std::ops::Deref<Target = State>>(
    prior: impl IntoIterator<Item = S>,
    urn: &Urn,
    aliases: &[Urn],
) -> bool {
    prior
        .into_iter()
        .any(|s| std::iter::once(urn).chain(aliases).any(|u| live_at(&s, u)))
}

/// Whether `s` is a live (not `delete`) state at `u`: what a root is.
fn live_at(s: &State, u: &Urn) -> bool {
    &s.urn == u && !s.delete
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn st(name: &str, parent: Option<&str>, delete: bool) -> State {
        let mut j = json!({"urn": format!("urn:pulumi:s::p::a:b:C::{name}"), "custom": false, "type": "a:b:C"});
        if let Some(p) = parent {
            j["parent"] = json!(format!("urn:pulumi:s::p::a:b:C::{p}"));
        }
        if delete {
            j["delete"] = json!(true);
        }
        serde_json::from_value(j).unwrap()
    }

    /// `has_root` answers as `find_root` does, for the URN, an alias, a
    /// state pending deletion and no match.
    #[test]
    fn has_root_agrees_with_find_root() {
        let states = [st("live", None, false), st("gone", None, true)];
        let prior: Vec<&State> = states.iter().collect();
        let urn = |n: &str| Urn::parse(&format!("urn:pulumi:s::p::a:b:C::{n}")).unwrap();
        for (name, aliases) in [
            ("live", vec![]),
            ("gone", vec![]),
            ("new", vec![urn("gone"), urn("live")]),
            ("new", vec![urn("gone")]),
            ("new", vec![]),
        ] {
            let found = find_root(&prior, &urn(name), &aliases).is_some();
            assert_eq!(
                has_root(states.iter(), &urn(name), &aliases),
                found,
                "{name} {aliases:?}"
            );
        }
    }

    #[test]
    fn collects_transitive_children_in_order() {
        let states = [
            st("other", None, false),
            st("root", None, false),
            st("a", Some("root"), false),
            st("x", Some("other"), false),
            st("b", Some("a"), false),
            st("old", Some("a"), true),
        ];
        let t = Subtree::collect(&states.iter().collect::<Vec<_>>(), 1);
        assert_eq!(t.members, vec![1, 2, 4]);
        assert_eq!(t.pending_delete, vec![5]);
        assert!(t.contains(5) && t.contains(1) && !t.contains(3));
        assert_eq!(t.root(), 1);
    }

    #[test]
    fn finds_the_root_by_urn_then_aliases() {
        let states = [st("a", None, true), st("b", None, false)];
        let prior: Vec<&State> = states.iter().collect();
        let u = |n: &str| Urn::parse(&format!("urn:pulumi:s::p::a:b:C::{n}")).unwrap();
        assert_eq!(find_root(&prior, &u("a"), &[]), None);
        assert_eq!(
            find_root(&prior, &u("a"), &[u("x"), u("b")]),
            Some(RootMatch {
                index: 1,
                via_alias: Some(u("b"))
            })
        );
        assert_eq!(find_root(&prior, &u("b"), &[]).unwrap().via_alias, None);
    }
}
