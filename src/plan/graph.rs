//! Dependency graph helpers over states: who refers to whom, and the order
//! deletes run in (antichains in reverse dependency order).

use std::collections::HashMap;

use crate::model::{State, Urn};

/// The URNs a state depends on for ordering: parent, dependencies,
/// property dependencies, `deletedWith`, `replaceWith` and the provider.
pub(crate) fn edges(s: &State) -> impl Iterator<Item = Urn> + '_ {
    let provider = s.provider_ref().ok().flatten().map(|p| p.urn().clone());
    s.references().map(|(_, u)| u.clone()).chain(provider)
}

/// Groups `states` into antichains for deletion: every state comes in an
/// earlier group than everything it depends on, so each group can run in
/// parallel and the groups run in order. Within a group, states keep their
/// input order (deterministic).
pub(crate) fn delete_antichains(states: &[&State]) -> Vec<Vec<usize>> {
    // Index by URN; a URN may have a live and a pending-delete copy, both
    // deleted here: an edge to that URN orders against every copy.
    let mut by_urn: HashMap<&Urn, Vec<usize>> = HashMap::with_capacity(states.len());
    for (i, s) in states.iter().enumerate() {
        by_urn.entry(&s.urn).or_default().push(i);
    }
    // dependents_left[i]: how many states in the set depend on i.
    let mut dependents_left = vec![0usize; states.len()];
    let mut deps_of: Vec<Vec<usize>> = vec![Vec::new(); states.len()];
    for (i, s) in states.iter().enumerate() {
        let mut targets: Vec<usize> = edges(s)
            .filter_map(|u| by_urn.get(&u))
            .flatten()
            .copied()
            .filter(|&j| j != i)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        for &j in &targets {
            dependents_left[j] += 1;
        }
        deps_of[i] = targets;
    }
    let mut groups = Vec::new();
    let mut ready: Vec<usize> = (0..states.len())
        .filter(|&i| dependents_left[i] == 0)
        .collect();
    let mut placed = 0;
    while !ready.is_empty() {
        placed += ready.len();
        let mut next = Vec::new();
        for &i in &ready {
            for &j in &deps_of[i] {
                dependents_left[j] -= 1;
                if dependents_left[j] == 0 {
                    next.push(j);
                }
            }
        }
        next.sort_unstable();
        groups.push(std::mem::replace(&mut ready, next));
    }
    if placed < states.len() {
        // A cycle (impossible in a verified snapshot): delete the rest last,
        // in reverse list order, one at a time.
        let mut rest: Vec<usize> = (0..states.len())
            .filter(|&i| dependents_left[i] > 0)
            .collect();
        rest.reverse();
        groups.extend(rest.into_iter().map(|i| vec![i]));
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TypeToken;

    fn s(name: &str, deps: &[&State]) -> State {
        let ty = TypeToken::parse("a:b:C").unwrap();
        let urn = Urn::new("d", "p", None, &ty, name).unwrap();
        let mut st = State::new(urn, ty, true);
        st.dependencies = deps.iter().map(|d| d.urn.clone()).collect();
        st
    }

    #[test]
    fn dependents_come_first() {
        let a = s("a", &[]);
        let b = s("b", &[&a]);
        let c = s("c", &[&a]);
        let d = s("d", &[&b, &c]);
        let e = s("e", &[]);
        let groups = delete_antichains(&[&a, &b, &c, &d, &e]);
        assert_eq!(groups, vec![vec![3, 4], vec![1, 2], vec![0]]);
    }
}
