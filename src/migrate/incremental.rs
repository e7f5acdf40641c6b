//! The transaction's sort and integrity check in time proportional to the
//! migration, not to the stack (`migrations.md` §6.3, §6.4).
//!
//! [`prepare`](super::transaction::prepare) sorts the candidate list — the
//! prior list without the subtree, the result inserted where the subtree's
//! last member stood — with the depth-first post-order of §6.3 and checks
//! the integrity of the sorted list. Over 100,000 states that means hashing
//! every URN and resolving every edge for a migration of ten states.
//!
//! The prior list is valid (it was verified when loaded, and every commit
//! before this one was verified): every edge target precedes its source and
//! resolves. A valid list without pending deletions is its own post-order
//! (at a state's turn everything before it is done). So in the candidate
//! list only a few states can move or break a rule:
//! - the result states (placed at the insertion point `ins`);
//! - the retained states inside the subtree's span (prior index between
//!   its first and last member) that refer to a member: their target is now
//!   a result after them (*dirty*);
//! - retained states whose references were rewritten (their new targets
//!   are results; after the span the results precede them).
//!
//! [`Shortcut`] decides exactly those and emits everything else in place.
//! Whenever the shortcut's premises do not hold — a pending deletion
//! anywhere, a result URN that a retained state also has, a member removed
//! without a successor, a rewritten reference to a URN the result does not
//! hold, a result that refers forward to a retained state not yet emitted,
//! a cycle, a result breaking a rule of §4 — it declines, and the full sort
//! decides (with its error text). Debug builds check every answer against
//! the full sort.

use super::chain::ChainOutcome;
use super::subtree::Subtree;
use crate::model::fasthash::{FastMap, FastSet};
use crate::model::urn::split_reference;
use crate::model::State;

/// What the scan of the retained states found about one URN of interest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interest {
    /// A result state's URN: a retained state with it collides.
    Result,
    /// A retained URN a result refers to: its prior index, once seen.
    Needed(Option<usize>),
}

/// The incremental sort of one prepared transaction (see the module docs).
/// Built before the scan of the retained states, fed each of them
/// ([`Shortcut::note`]), then asked for the order ([`Shortcut::sort`]).
pub(crate) struct Shortcut<'a> {
    result: &'a [State],
    /// Result URN -> result index.
    results: FastMap<&'a str, usize>,
    /// The subtree members' URNs.
    members: FastSet<&'a str>,
    /// Result URNs and the retained URNs the results refer to.
    interest: FastMap<&'a str, Interest>,
    /// Set when a premise fails during the scan.
    declined: bool,
}

/// A visit mark of a result state.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    New,
    Open,
    Done,
}

impl<'a> Shortcut<'a> {
    /// A shortcut for `outcome` over the prior list `prior` and its
    /// `subtree`; `None` when a premise fails already (a result state
    /// pending deletion or twice in the result, a member pending deletion,
    /// a member removed without a successor, a successor not in the result).
    pub(crate) fn new(
        prior: &[&'a State],
        subtree: &Subtree,
        outcome: &'a ChainOutcome,
    ) -> Option<Self> {
        if !subtree.pending_delete.is_empty() {
            return None;
        }
        let result = outcome.result.as_slice();
        let mut results: FastMap<&'a str, usize> = FastMap::default();
        for (j, r) in result.iter().enumerate() {
            if r.delete || results.insert(r.urn.as_str(), j).is_some() {
                return None;
            }
        }
        let members: FastSet<&'a str> = subtree
            .all_sorted()
            .iter()
            .map(|&i| prior[i].urn.as_str())
            .collect();
        // A member that neither stays nor has a successor leaves its
        // referrers dangling; a successor outside the result likewise.
        for m in &members {
            if !results.contains_key(m) && !outcome.original_to_final.contains_key(*m) {
                return None;
            }
        }
        if outcome
            .original_to_final
            .values()
            .any(|f| !results.contains_key(f.as_str()))
        {
            return None;
        }
        let mut interest: FastMap<&'a str, Interest> =
            results.keys().map(|u| (*u, Interest::Result)).collect();
        for r in result {
            for u in targets(r) {
                if !results.contains_key(u) && !members.contains(u) {
                    interest.entry(u).or_insert(Interest::Needed(None));
                }
            }
        }
        Some(Self {
            result,
            results,
            members,
            interest,
            declined: false,
        })
    }

    /// Notes the retained prior state at index `i` (every one, in order).
    pub(crate) fn note(&mut self, i: usize, s: &State) {
        if s.delete {
            self.declined = true;
            return;
        }
        if let Some(x) = self.interest.get_mut(s.urn.as_str()) {
            match x {
                Interest::Result => self.declined = true,
                Interest::Needed(at) => *at = Some(i),
            }
        }
    }

    /// The sorted order of the candidate list as positions in it (the
    /// retained states in prior order with the result inserted before the
    /// first retained index after the subtree's last member), or `None`
    /// when the full sort must decide. `patched` gives the rewritten copy
    /// of each retained state whose references changed, by prior index.
    pub(crate) fn sort(
        self,
        prior: &[&State],
        subtree: &Subtree,
        patched: &FastMap<usize, State>,
    ) -> Option<Vec<usize>> {
        if self.declined {
            return None;
        }
        let sorted = subtree.all_sorted();
        let (first, last) = (*sorted.first()?, *sorted.last()?);
        let k = self.result.len();
        // Candidate positions: a retained prior index `i` moves down by the
        // members before it and, past the subtree, up by the result.
        let ins = last + 1 - sorted.len();
        let position = |i: usize| {
            let before = sorted.partition_point(|&m| m < i);
            i - before + if i > last { k } else { 0 }
        };
        // Every rewritten state outside the span: its new targets are
        // results (which precede it) or unchanged (which precede it in the
        // prior); a provider target must still be a provider with its ID.
        for (&i, p) in patched {
            if i > last && self.result_targets(p).is_none() {
                return None;
            }
        }
        let mut mark = vec![Mark::New; k];
        let mut out = Vec::with_capacity(prior.len() - sorted.len() + k);
        let mut emit_results = |from: &[usize], cur: usize, out: &mut Vec<usize>| {
            for &j in from {
                self.visit(j, cur, prior, &position, &mut mark, ins, out)?;
            }
            Some(())
        };
        // One pass in prior order; `removed` counts the members passed.
        let mut removed = 0;
        for (i, s) in prior.iter().enumerate() {
            if i == last {
                let all: Vec<usize> = (0..k).collect();
                emit_results(&all, ins, &mut out)?;
            }
            if sorted.get(removed) == Some(&i) {
                removed += 1;
                continue;
            }
            let cur = i - removed + if i > last { k } else { 0 };
            if i > first && i < last {
                let s = patched.get(&i).unwrap_or(s);
                if patched.contains_key(&i) || self.refers_to_members(s) {
                    let targets = self.result_targets(s)?;
                    emit_results(&targets, cur, &mut out)?;
                }
            }
            out.push(cur);
        }
        Some(out)
    }

    /// Whether `s` has an edge to a subtree member's URN.
    fn refers_to_members(&self, s: &State) -> bool {
        targets(s).any(|u| self.members.contains(u))
    }

    /// The result indices a retained state's edges reach, ascending and
    /// distinct; `None` when an edge reaches a member that is not in the
    /// result, or a provider edge reaches a result that is not that
    /// provider with that ID. Other targets are retained states that
    /// precede it (the prior list is valid).
    fn result_targets(&self, s: &State) -> Option<Vec<usize>> {
        let mut out = Vec::new();
        if !s.provider.is_empty() {
            let (urn, id) = split_reference(&s.provider)?;
            if let Some(&j) = self.results.get(urn) {
                let p = &self.result[j];
                if !(p.ty.is_provider() && p.id == id) {
                    return None;
                }
                out.push(j);
            } else if self.members.contains(urn) {
                return None;
            }
        }
        for (_, u) in s.references() {
            if let Some(&j) = self.results.get(u.as_str()) {
                out.push(j);
            } else if self.members.contains(u.as_str()) {
                return None;
            }
        }
        out.sort_unstable();
        out.dedup();
        Some(out)
    }

    /// Visits result `j` depth-first (targets in ascending position),
    /// emitting it after its targets, while the state at candidate position
    /// `cur` has its turn: a retained target must be before `cur` (done),
    /// else the shortcut declines. `None`: decline.
    #[allow(clippy::too_many_arguments)]
    fn visit(
        &self,
        j: usize,
        cur: usize,
        prior: &[&State],
        position: &dyn Fn(usize) -> usize,
        mark: &mut [Mark],
        ins: usize,
        out: &mut Vec<usize>,
    ) -> Option<()> {
        if mark[j] == Mark::Done {
            return Some(());
        }
        mark[j] = Mark::Open;
        let mut stack: Vec<(usize, Vec<usize>, usize)> =
            vec![(j, self.targets_of_result(j, cur, prior, position)?, 0)];
        while let Some((v, targets, next)) = stack.last_mut() {
            if let Some(&t) = targets.get(*next) {
                *next += 1;
                match mark[t] {
                    Mark::New => {
                        mark[t] = Mark::Open;
                        let ts = self.targets_of_result(t, cur, prior, position)?;
                        stack.push((t, ts, 0));
                    }
                    Mark::Open => return None,
                    Mark::Done => {}
                }
            } else {
                mark[*v] = Mark::Done;
                out.push(ins + *v);
                stack.pop();
            }
        }
        Some(())
    }

    /// The result indices result `j`'s edges reach, ascending and
    /// distinct, after checking the rules of §4 that concern it alone and
    /// that each retained target exists, is done (before `cur`), and for a
    /// provider edge is that provider with that ID. `None`: decline.
    fn targets_of_result(
        &self,
        j: usize,
        cur: usize,
        prior: &[&State],
        position: &dyn Fn(usize) -> usize,
    ) -> Option<Vec<usize>> {
        let r = &self.result[j];
        if r.urn.is_empty() || r.ty.is_empty() || (!r.custom && !r.id.is_empty()) {
            return None;
        }
        let retained = |u: &str| match self.interest.get(u) {
            Some(Interest::Needed(Some(i))) if position(*i) < cur => Some(*i),
            _ => None,
        };
        let mut out = Vec::new();
        if !r.provider.is_empty() {
            let (urn, id) = split_reference(&r.provider)?;
            let is = |p: &State| p.ty.is_provider() && p.id == id;
            match self.results.get(urn) {
                Some(&t) if is(&self.result[t]) => out.push(t),
                Some(_) => return None,
                None => {
                    if !is(prior[retained(urn)?]) {
                        return None;
                    }
                }
            }
        }
        for (_, u) in r.references() {
            match self.results.get(u.as_str()) {
                Some(&t) => out.push(t),
                None => {
                    retained(u.as_str())?;
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        Some(out)
    }
}

/// The URNs `s`'s edges reach: its provider's URN part and its references.
fn targets(s: &State) -> impl Iterator<Item = &str> {
    let provider = (!s.provider.is_empty())
        .then(|| split_reference(&s.provider).map(|(u, _)| u))
        .flatten();
    provider
        .into_iter()
        .chain(s.references().map(|(_, u)| u.as_str()))
}

/// Property tests: over random valid prior lists (components, interleaved
/// consumers, pending deletions) and random migration outcomes (renames,
/// members dropped, new states, added dependencies forward and backward,
/// URN collisions), whenever the shortcut answers, its order is the full
/// sort's; whenever the full sort refuses, the shortcut declines.
#[cfg(test)]
mod props {
    use proptest::prelude::*;
    use proptest::sample::Index;
    use proptest::strategy::ValueTree;
    use serde_json::json;

    use super::super::rewrite::{identity_in, rewrite, SuccessorMap};
    use super::super::transaction::both_orders;
    use super::*;
    use crate::model::Urn;

    const PROV: &str = "urn:pulumi:dev::app::pulumi:providers:pkgA::default";

    fn urn(name: &str) -> Urn {
        Urn::parse(&format!("urn:pulumi:dev::app::a:b:T::{name}")).unwrap()
    }

    /// One prior resource (`1..`): its references go to earlier ones.
    #[derive(Clone, Debug)]
    struct Spec {
        component: bool,
        parent: Option<Index>,
        deps: Vec<Index>,
        delete: bool,
        /// A pending-deletion copy of an earlier resource (its URN).
        copy_of: Option<Index>,
    }

    fn spec() -> impl Strategy<Value = Spec> {
        (
            proptest::bool::weighted(0.3),
            proptest::option::weighted(0.7, any::<Index>()),
            proptest::collection::vec(any::<Index>(), 0..3),
            proptest::bool::weighted(0.04),
            proptest::option::weighted(0.06, any::<Index>()),
        )
            .prop_map(|(component, parent, deps, delete, copy_of)| Spec {
                component,
                parent,
                deps,
                delete,
                copy_of,
            })
    }

    fn prior(specs: &[Spec]) -> Vec<State> {
        let mut out: Vec<State> = vec![serde_json::from_value(json!({"urn": PROV,
            "custom": true, "id": "pid", "type": "pulumi:providers:pkgA"}))
        .unwrap()];
        for (k, sp) in specs.iter().enumerate() {
            let i = k + 1;
            let earlier = |x: &Index| (i > 1).then(|| urn(&format!("r{}", 1 + x.index(i - 1))));
            let mut v = json!({"urn": urn(&format!("r{i}")).as_str(), "type": "a:b:T",
                "custom": !sp.component, "delete": sp.delete});
            if !sp.component {
                v["id"] = json!(format!("id{i}"));
                v["provider"] = json!(format!("{PROV}::pid"));
            }
            if let Some(p) = sp.parent.as_ref().and_then(earlier) {
                v["parent"] = json!(p.as_str());
            }
            let deps: Vec<String> = sp
                .deps
                .iter()
                .filter_map(earlier)
                .map(|u| u.as_str().to_owned())
                .collect();
            v["dependencies"] = json!(deps);
            if let Some(of) = sp.copy_of.as_ref().and_then(earlier) {
                v["urn"] = json!(of.as_str());
                v["delete"] = json!(true);
            }
            out.push(serde_json::from_value(v).unwrap());
        }
        out
    }

    /// What the migration does to the subtree.
    #[derive(Clone, Debug)]
    struct Change {
        root: Index,
        rename: Vec<bool>,
        drop: Option<Index>,
        dep: Option<(Index, Index)>,
        add: bool,
        collide: Option<(Index, Index)>,
        reverse: bool,
    }

    fn change() -> impl Strategy<Value = Change> {
        (
            any::<Index>(),
            proptest::collection::vec(any::<bool>(), 1..6),
            proptest::option::weighted(0.15, any::<Index>()),
            proptest::option::weighted(0.4, (any::<Index>(), any::<Index>())),
            proptest::bool::weighted(0.3),
            proptest::option::weighted(0.1, (any::<Index>(), any::<Index>())),
            proptest::bool::weighted(0.2),
        )
            .prop_map(|(root, rename, drop, dep, add, collide, reverse)| Change {
                root,
                rename,
                drop,
                dep,
                add,
                collide,
                reverse,
            })
    }

    fn outcome(prior: &[&State], subtree: &Subtree, c: &Change) -> ChainOutcome {
        let members = &subtree.members;
        let mut map = SuccessorMap::new();
        for (n, &m) in members.iter().enumerate() {
            if c.rename[n % c.rename.len()] {
                map.insert(
                    prior[m].urn.clone(),
                    urn(&format!("{}-new", prior[m].urn.name())),
                );
            }
        }
        if let Some((a, b)) = &c.collide {
            let m = members[a.index(members.len())];
            let target = b.index(prior.len());
            if !subtree.contains(target) {
                map.insert(prior[m].urn.clone(), prior[target].urn.clone());
            }
        }
        let mut result: Vec<State> = members.iter().map(|&m| prior[m].clone()).collect();
        if let Some(d) = &c.drop {
            if result.len() > 1 {
                let gone = 1 + d.index(result.len() - 1);
                result.remove(gone);
            }
        }
        for r in &mut result {
            if let Some(to) = map.get(&r.urn) {
                r.urn = to.clone();
            }
        }
        let snapshot = result.clone();
        let ids = identity_in(&snapshot);
        for r in &mut result {
            if let Some(n) = rewrite(r, &map, &ids) {
                *r = n;
            }
        }
        // Keep only successors that are in the result (as a chain does).
        map.retain(|_, to| result.iter().any(|r| &r.urn == to));
        if let Some((a, b)) = &c.dep {
            let at = a.index(result.len());
            let target = prior[1 + b.index(prior.len() - 1)].urn.clone();
            result[at].dependencies.push(target);
        }
        if c.add {
            let mut extra = result[0].clone();
            extra.urn = urn("extra");
            extra.parent = result[0].urn.clone();
            extra.custom = true;
            extra.id = "extra-id".into();
            extra.provider = format!("{PROV}::pid").into();
            result.push(extra);
        }
        if c.reverse {
            result.reverse();
        }
        ChainOutcome {
            noop: false,
            result,
            original_to_final: map.clone(),
            all_to_final: map,
            added: Vec::new(),
        }
    }

    /// A provider member mapped to a component: its users outside the
    /// span are rewritten to a provider reference that resolves to no
    /// provider. The full sort refuses; the shortcut must not answer.
    #[test]
    fn a_provider_edge_rewritten_to_a_non_provider_is_declined() {
        let root = urn("root");
        let p_urn = "urn:pulumi:dev::app::pulumi:providers:pkgB::p";
        let states: Vec<State> = [
            json!({"urn": PROV, "custom": true, "id": "pid", "type": "pulumi:providers:pkgA"}),
            json!({"urn": root.as_str(), "custom": false, "type": "a:b:T"}),
            json!({"urn": p_urn, "custom": true, "id": "p1", "type": "pulumi:providers:pkgB",
                   "parent": root.as_str()}),
            json!({"urn": urn("user").as_str(), "custom": true, "id": "u1", "type": "a:b:T",
                   "provider": format!("{p_urn}::p1")}),
        ]
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
        let refs: Vec<&State> = states.iter().collect();
        let subtree = Subtree::collect(&refs, 1);
        let mut comp = states[2].clone();
        comp.urn = urn("was-provider");
        comp.ty = crate::model::TypeToken::parse("a:b:T").unwrap();
        comp.custom = false;
        comp.id = String::new();
        let map: SuccessorMap = [(states[2].urn.clone(), comp.urn.clone())].into();
        let o = ChainOutcome {
            noop: false,
            result: vec![states[1].clone(), comp],
            original_to_final: map.clone(),
            all_to_final: map,
            added: Vec::new(),
        };
        let (fast, full) = both_orders(&refs, &subtree, &o);
        assert!(full.is_err(), "{full:?}");
        assert_eq!(fast, None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_shortcut_answers_as_the_full_sort(
            specs in proptest::collection::vec(spec(), 1..14),
            c in change(),
        ) {
            let states = prior(&specs);
            let refs: Vec<&State> = states.iter().collect();
            // A valid prior list, as the coordinator's is.
            prop_assume!(super::super::transaction::verify(&refs).is_ok());
            let root = 1 + c.root.index(refs.len() - 1);
            prop_assume!(!refs[root].delete);
            let subtree = Subtree::collect(&refs, root);
            let o = outcome(&refs, &subtree, &c);
            let (fast, full) = both_orders(&refs, &subtree, &o);
            match (fast, full) {
                (Some(f), Ok(full)) => prop_assert_eq!(f, full),
                (Some(f), Err(e)) => prop_assert!(false, "the shortcut answered {f:?}; the full sort refused: {e}"),
                (None, _) => {}
            }
        }
    }

    #[test]
    fn the_shortcut_answers_most_random_migrations() {
        // Not a timing: the share of cases the shortcut decides itself, so
        // that the property above is not vacuous.
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut answered, mut total) = (0, 0);
        for _ in 0..400 {
            let specs = proptest::collection::vec(spec(), 1..14)
                .new_tree(&mut runner)
                .unwrap()
                .current();
            let c = change().new_tree(&mut runner).unwrap().current();
            let states = prior(&specs);
            let refs: Vec<&State> = states.iter().collect();
            let root = 1 + c.root.index(refs.len() - 1);
            if super::super::transaction::verify(&refs).is_err() || refs[root].delete {
                continue;
            }
            let subtree = Subtree::collect(&refs, root);
            let o = outcome(&refs, &subtree, &c);
            total += 1;
            if both_orders(&refs, &subtree, &o).0.is_some() {
                answered += 1;
            }
        }
        assert!(total > 200 && answered * 3 > total, "{answered} of {total}");
    }
}
