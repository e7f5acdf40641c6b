//! Reference rewriting (`migrations.md` §8).
//!
//! A successor map sends old URNs to new ones. Rewriting a state replaces
//! every reference to a mapped URN: `parent`, `deletedWith` and `viewOf`
//! are replaced; `dependencies`, each `propertyDependencies` list and
//! `replaceWith` are mapped and then de-duplicated keeping the first
//! occurrence; the URN part of `provider` is replaced (and its ID by the
//! successor's ID when that is known); inside `inputs`, `outputs` and
//! `replacementTrigger`, recursively through arrays, objects, plaintext
//! secrets and output values, output-value dependencies are mapped and
//! de-duplicated and resource references get the successor's URN, its
//! physical ID for a custom successor (none for a component) and no package
//! version. Plain strings are never references.
//!
//! Nothing is copied unless something changes: [`rewrite`] returns `None`
//! for a state it leaves alone, so the caller keeps the same object.

use std::collections::{BTreeMap, HashSet};

use crate::model::property::{OutputValue, ResourceReference, Secret};
use crate::model::urn::split_reference;
use crate::model::{PropertyMap, PropertyValue, State, Urn};

/// A successor map: old URN -> new URN.
pub(crate) type SuccessorMap = BTreeMap<Urn, Urn>;

/// What a rewrite needs to know about a successor: whether it is a custom
/// resource and its physical ID (empty for a component).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    /// True for a custom (provider-backed) resource.
    pub custom: bool,
    /// Its physical ID (empty for a component).
    pub id: String,
}

impl Identity {
    /// The identity of `state`.
    pub(crate) fn of(state: &State) -> Self {
        Self {
            custom: state.custom,
            id: state.id.clone(),
        }
    }
}

/// An identity lookup over `states`: the identity of the (first) state with
/// the URN asked for, if any.
pub(crate) fn identity_in(states: &[State]) -> impl Fn(&Urn) -> Option<Identity> + '_ {
    move |urn| states.iter().find(|s| &s.urn == urn).map(Identity::of)
}

/// Rewrites every reference of `state` with `map` (see the module docs).
/// `identity` gives a successor's identity, when known.
///
/// Returns `None` when nothing changes (the caller keeps the same object),
/// else the rewritten copy.
pub(crate) fn rewrite(
    state: &State,
    map: &SuccessorMap,
    identity: &dyn Fn(&Urn) -> Option<Identity>,
) -> Option<State> {
    rewrite_noting(state, map, identity, &mut Unmapped::default())
}

/// Texts a pass of [`rewrite_noting`] found unmapped: the last parent URN
/// and the last provider reference. Neighbours in a list mostly share
/// them, and comparing the text costs less than looking it up again.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Unmapped<'s> {
    parent: Option<&'s str>,
    provider: Option<&'s str>,
}

/// [`rewrite`], for one state of a pass over many with the same `map` and
/// `identity`: a parent or provider reference `unmapped` names is not
/// looked up again, and the ones found unmapped are noted there.
pub(crate) fn rewrite_noting<'s>(
    state: &'s State,
    map: &SuccessorMap,
    identity: &dyn Fn(&Urn) -> Option<Identity>,
    unmapped: &mut Unmapped<'s>,
) -> Option<State> {
    if map.is_empty() {
        return None;
    }
    let mut out: Option<State> = None;
    // The copy is made on the first change only.
    macro_rules! edit {
        () => {
            out.get_or_insert_with(|| state.clone())
        };
    }
    if unmapped.parent != Some(state.parent.as_str()) {
        match map.get(&state.parent) {
            Some(p) => edit!().parent = p.clone(),
            None => unmapped.parent = Some(state.parent.as_str()),
        }
    }
    if let Some(d) = map.get(&*state.rare.deleted_with) {
        edit!().rare.edit(|r| r.deleted_with = d.clone().into());
    }
    if let Some(v) = map.get(&*state.rare.view_of) {
        edit!().rare.edit(|r| r.view_of = v.clone().into());
    }
    if let Some(deps) = map_list(&state.dependencies, map) {
        edit!().dependencies = deps;
    }
    for (key, list) in &state.property_dependencies {
        if let Some(mapped) = list.as_ref().and_then(|l| map_list(l, map)) {
            edit!()
                .property_dependencies
                .insert(key.clone(), Some(mapped));
        }
    }
    if let Some(rw) = map_list(&state.rare.replace_with, map) {
        edit!().rare.edit(|r| r.replace_with = rw.into());
    }
    if unmapped.provider != Some(state.provider.as_str()) {
        match rewrite_provider(&state.provider, map, identity) {
            Some(p) => edit!().provider = p.into(),
            None => unmapped.provider = Some(state.provider.as_str()),
        }
    }
    if let Some(m) = rewrite_map(&state.inputs, map, identity) {
        edit!().inputs = m;
    }
    if let Some(m) = rewrite_map(&state.outputs, map, identity) {
        edit!().outputs = m;
    }
    if let Some(v) = rewrite_value(&state.rare.replacement_trigger, map, identity) {
        edit!().rare.edit(|r| r.replacement_trigger = v.into());
    }
    out
}

/// Maps a list of URNs and de-duplicates it keeping the first occurrence;
/// `None` when no entry is mapped (the list is left exactly as it is).
pub(crate) fn map_list(list: &[Urn], map: &SuccessorMap) -> Option<Vec<Urn>> {
    if !list.iter().any(|u| map.contains_key(u)) {
        return None;
    }
    let mut seen = HashSet::with_capacity(list.len());
    Some(
        list.iter()
            .map(|u| map.get(u).unwrap_or(u))
            .filter(|u| seen.insert(*u))
            .cloned()
            .collect(),
    )
}

/// Rewrites a provider reference `<URN>::<ID>`: the URN part is mapped, and
/// the ID becomes the successor's physical ID when the URN changed and the
/// successor is a known custom resource. `None` when nothing changes
/// (including an empty or malformed reference).
pub(crate) fn rewrite_provider(
    reference: &str,
    map: &SuccessorMap,
    identity: &dyn Fn(&Urn) -> Option<Identity>,
) -> Option<String> {
    let (urn, id) = split_reference(reference)?;
    let new = map.get(urn)?;
    let new_id = match identity(new) {
        Some(Identity { custom: true, id }) if !id.is_empty() => id,
        _ => id.to_owned(),
    };
    Some(format!("{new}::{new_id}"))
}

/// Rewrites the values of a property map; `None` when nothing changes.
pub(crate) fn rewrite_map(
    m: &PropertyMap,
    map: &SuccessorMap,
    identity: &dyn Fn(&Urn) -> Option<Identity>,
) -> Option<PropertyMap> {
    // Only signed values (references, outputs, secrets) change.
    if !m.may_hold_signed() {
        return None;
    }
    let mut out: Option<PropertyMap> = None;
    for (k, v) in m {
        if let Some(nv) = rewrite_value(v, map, identity) {
            out.get_or_insert_with(|| m.clone()).insert(k.clone(), nv);
        }
    }
    out
}

/// Rewrites one property value; `None` when nothing changes.
pub(crate) fn rewrite_value(
    v: &PropertyValue,
    map: &SuccessorMap,
    identity: &dyn Fn(&Urn) -> Option<Identity>,
) -> Option<PropertyValue> {
    match v {
        PropertyValue::Array(items) => {
            let mut out: Option<Vec<PropertyValue>> = None;
            for (i, item) in items.iter().enumerate() {
                if let Some(n) = rewrite_value(item, map, identity) {
                    out.get_or_insert_with(|| items.clone())[i] = n;
                }
            }
            out.map(PropertyValue::Array)
        }
        PropertyValue::Object(m) => rewrite_map(m, map, identity).map(PropertyValue::Object),
        PropertyValue::Secret(Secret::Plaintext(p)) => {
            let n = rewrite_value(p.value(), map, identity)?;
            let mut p = p.clone();
            p.set_value(n);
            Some(PropertyValue::Secret(Secret::Plaintext(p)))
        }
        PropertyValue::Output(o) => {
            let value = o
                .value
                .as_deref()
                .and_then(|v| rewrite_value(v, map, identity));
            let deps = o.dependencies.as_deref().and_then(|d| map_list(d, map));
            if value.is_none() && deps.is_none() {
                return None;
            }
            Some(PropertyValue::Output(Box::new(OutputValue {
                value: match value {
                    Some(v) => Some(Box::new(v)),
                    None => o.value.clone(),
                },
                secret: o.secret,
                dependencies: deps.or_else(|| o.dependencies.clone()),
            })))
        }
        PropertyValue::ResourceReference(r) => {
            let new = map.get(&r.urn)?;
            let id = match identity(new) {
                Some(Identity { custom: true, id }) => Some(id),
                Some(Identity { custom: false, .. }) => None,
                None => r.id.clone(),
            };
            Some(PropertyValue::ResourceReference(Box::new(
                ResourceReference {
                    urn: new.clone(),
                    id,
                    package_version: None,
                },
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn urn(name: &str) -> Urn {
        Urn::parse(&format!("urn:pulumi:s::p::a:b:C::{name}")).unwrap()
    }

    fn state(j: serde_json::Value) -> State {
        serde_json::from_value(j).unwrap()
    }

    fn ids(custom: bool) -> impl Fn(&Urn) -> Option<Identity> {
        move |u: &Urn| {
            (u.name() == "new").then(|| Identity {
                custom,
                id: if custom {
                    "id-new".into()
                } else {
                    String::new()
                },
            })
        }
    }

    #[test]
    fn untouched_states_are_not_copied() {
        let s = state(json!({
            "urn": urn("x").as_str(), "custom": true, "type": "a:b:C", "id": "1",
            "parent": urn("p").as_str(), "dependencies": [urn("d").as_str()],
            "inputs": {"s": urn("old").as_str()}
        }));
        let map: SuccessorMap = [(urn("old"), urn("new"))].into();
        // A plain string holding a mapped URN is not a reference.
        assert!(rewrite(&s, &map, &ids(true)).is_none());
        assert!(rewrite(&s, &SuccessorMap::new(), &ids(true)).is_none());
    }

    #[test]
    fn every_reference_field_is_rewritten() {
        let old = urn("old").to_string();
        let old2 = urn("old2").to_string();
        let sig = crate::model::property::SIG_KEY;
        let s = state(json!({
            "urn": urn("x").as_str(), "custom": true, "type": "a:b:C", "id": "1",
            "parent": old, "deletedWith": old, "viewOf": old,
            "dependencies": [old, urn("keep").as_str(), old2],
            "propertyDependencies": {"a": [old2, old], "b": null, "c": [urn("keep").as_str()]},
            "replaceWith": [old, old2],
            "provider": "urn:pulumi:s::p::pulumi:providers:a::prov::pid",
            "inputs": {
                "ref": {sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": old, "id": "old-id", "packageVersion": "1.0.0"},
                "list": [{sig: "d0e6a833031e9bbcd3f4e8bde6ca49a4", "value": 1, "dependencies": [old, old2]}],
                "secret": {sig: "1b47061264138c4ac30d75fd1eb44270",
                           "plaintext": serde_json::to_string(&json!({sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": old})).unwrap()}
            },
            "replacementTrigger": {sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": old}
        }));
        let map: SuccessorMap = [(urn("old"), urn("new")), (urn("old2"), urn("new"))].into();
        let out = rewrite(&s, &map, &ids(true)).unwrap();
        let j = serde_json::to_value(&out).unwrap();
        let new = urn("new").to_string();
        assert_eq!(j["parent"], json!(new));
        assert_eq!(j["deletedWith"], json!(new));
        assert_eq!(j["viewOf"], json!(new));
        assert_eq!(j["dependencies"], json!([new, urn("keep").as_str()]));
        assert_eq!(
            j["propertyDependencies"],
            json!({"a": [new], "b": null, "c": [urn("keep").as_str()]})
        );
        assert_eq!(j["replaceWith"], json!([new]));
        assert_eq!(
            j["provider"],
            json!("urn:pulumi:s::p::pulumi:providers:a::prov::pid")
        );
        assert_eq!(
            j["inputs"]["ref"],
            json!({sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": new, "id": "id-new"})
        );
        assert_eq!(j["inputs"]["list"][0]["dependencies"], json!([new]));
        let pt: serde_json::Value =
            serde_json::from_str(j["inputs"]["secret"]["plaintext"].as_str().unwrap()).unwrap();
        assert_eq!(
            pt,
            json!({sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": new, "id": "id-new"})
        );
        assert_eq!(j["replacementTrigger"]["urn"], json!(new));
    }

    #[test]
    fn component_successor_references_have_no_id() {
        let sig = crate::model::property::SIG_KEY;
        let s = state(json!({
            "urn": urn("x").as_str(), "custom": false, "type": "a:b:C",
            "outputs": {"r": {sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": urn("old").as_str(), "id": "x"}}
        }));
        let map: SuccessorMap = [(urn("old"), urn("new"))].into();
        let j = serde_json::to_value(rewrite(&s, &map, &ids(false)).unwrap()).unwrap();
        assert_eq!(
            j["outputs"]["r"],
            json!({sig: "5cf8f73096256a8f31e491e813e4eb8e", "urn": urn("new").as_str()})
        );
    }

    #[test]
    fn provider_ids_follow_known_successors() {
        let p = "urn:pulumi:s::p::pulumi:providers:a::old::id-old";
        let map: SuccessorMap = [(
            Urn::parse("urn:pulumi:s::p::pulumi:providers:a::old").unwrap(),
            Urn::parse("urn:pulumi:s::p::pulumi:providers:a::new").unwrap(),
        )]
        .into();
        let known = |_: &Urn| {
            Some(Identity {
                custom: true,
                id: "id-new".into(),
            })
        };
        assert_eq!(
            rewrite_provider(p, &map, &known).unwrap(),
            "urn:pulumi:s::p::pulumi:providers:a::new::id-new"
        );
        assert_eq!(
            rewrite_provider(p, &map, &|_| None).unwrap(),
            "urn:pulumi:s::p::pulumi:providers:a::new::id-old"
        );
        assert!(rewrite_provider("", &map, &known).is_none());
    }

    /// A pass with one `Unmapped` over states whose parents and provider
    /// references alternate between mapped and unmapped rewrites exactly
    /// the states `rewrite` alone rewrites, as `rewrite` does.
    #[test]
    fn a_pass_noting_unmapped_texts_rewrites_as_rewrite_does() {
        let old_p = "urn:pulumi:s::p::pulumi:providers:a::old";
        let other_p = "urn:pulumi:s::p::pulumi:providers:a::other";
        let map: SuccessorMap = [
            (urn("old"), urn("new")),
            (Urn::parse(old_p).unwrap(), urn("new")),
        ]
        .into();
        let mk = |parent: &str, provider: &str| {
            state(json!({
                "urn": urn("x").as_str(), "custom": true, "type": "a:b:C", "id": "1",
                "parent": urn(parent).as_str(), "provider": format!("{provider}::1")
            }))
        };
        let states = [
            mk("p", other_p),
            mk("p", other_p),
            mk("old", other_p),
            mk("old", other_p),
            mk("p", old_p),
            mk("p", old_p),
            mk("old", old_p),
            mk("p", other_p),
        ];
        let mut unmapped = Unmapped::default();
        for (i, s) in states.iter().enumerate() {
            let alone = rewrite(s, &map, &ids(true));
            let noting = rewrite_noting(s, &map, &ids(true), &mut unmapped);
            assert_eq!(
                noting.as_ref().map(|n| serde_json::to_value(n).unwrap()),
                alone.as_ref().map(|n| serde_json::to_value(n).unwrap()),
                "state {i}"
            );
            assert_eq!(noting.is_some(), matches!(i, 2..=6), "state {i}");
        }
    }
}
