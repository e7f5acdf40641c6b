//! The engine's own rules around a provider's diff, the same for every
//! provider: `ignoreChanges` before the provider is asked (Pulumi's
//! `processIgnoreChanges`) and `replaceOnChanges` after it answers
//! (Pulumi's `applyReplaceOnChanges`).

use crate::model::property_path::changed_paths;
use crate::model::{PropertyMap, PropertyPath};
use crate::provider::{DiffKind, DiffResponse};

/// Puts back, for every `ignoreChanges` path, the old value into the new
/// inputs (or removes it when the old inputs have none), so the provider
/// is sent, and the state keeps, the old value. Returns the paths that
/// could not be reset completely (they go through an element added or
/// removed since), for a diagnostic.
pub(crate) fn ignore_changes(
    paths: &[PropertyPath],
    old: &PropertyMap,
    new: &mut PropertyMap,
) -> Vec<String> {
    paths
        .iter()
        .filter(|p| !p.reset(old, new))
        .map(ToString::to_string)
        .collect()
}

/// Turns a diff into a replace when something it changed lies under a
/// `replaceOnChanges` path: the changed paths are the provider's changed
/// keys, followed down into `old` and `new` to the values that differ (a
/// provider that reports only top-level keys still lets `tags.Name`
/// match). A diff with no change is left alone.
pub(crate) fn apply_replace_on_changes(
    mut diff: DiffResponse,
    paths: &[PropertyPath],
    old: &PropertyMap,
    new: &PropertyMap,
) -> DiffResponse {
    if diff.kind == DiffKind::Same || paths.is_empty() {
        return diff;
    }
    let mut changed: Vec<(String, PropertyPath)> = diff
        .changed_keys
        .iter()
        .map(|k| (k.clone(), PropertyPath::key(k)))
        .collect();
    for k in &diff.changed_keys {
        for p in changed_paths(old, new, std::iter::once(k)) {
            changed.push((k.clone(), p));
        }
    }
    for (key, path) in changed {
        if paths.iter().any(|r| r.contains(&path)) {
            diff.replace_keys.insert(key);
            diff.kind = DiffKind::Replace;
        }
    }
    diff
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::model::PropertyValue;

    fn map(v: serde_json::Value) -> PropertyMap {
        match serde_json::from_value::<PropertyValue>(v).unwrap() {
            PropertyValue::Object(m) => m,
            other => panic!("{other:?}"),
        }
    }

    fn diff(kind: DiffKind, changed: &[&str]) -> DiffResponse {
        DiffResponse {
            kind,
            changed_keys: changed.iter().map(|s| (*s).to_owned()).collect(),
            replace_keys: BTreeSet::new(),
            delete_before_replace: false,
            detailed: Vec::new(),
        }
    }

    #[test]
    fn replace_on_changes_turns_matching_changes_into_replaces() {
        let check = |paths: &[&str], old, new, changed: &[&str], want: DiffKind, keys: &[&str]| {
            let paths: Vec<PropertyPath> = paths
                .iter()
                .map(|p| PropertyPath::parse(p).unwrap())
                .collect();
            let kind = if changed.is_empty() {
                DiffKind::Same
            } else {
                DiffKind::Update
            };
            let d = apply_replace_on_changes(diff(kind, changed), &paths, &map(old), &map(new));
            assert_eq!(d.kind, want, "{paths:?}");
            let keys: BTreeSet<String> = keys.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(d.replace_keys, keys, "{paths:?}");
        };
        use serde_json::json as j;
        use DiffKind::*;
        check(
            &["name"],
            j!({"name": "a"}),
            j!({"name": "b"}),
            &["name"],
            Replace,
            &["name"],
        );
        check(
            &["name"],
            j!({"size": 1}),
            j!({"size": 2}),
            &["size"],
            Update,
            &[],
        );
        check(
            &["*"],
            j!({"size": 1}),
            j!({"size": 2}),
            &["size"],
            Replace,
            &["size"],
        );
        check(
            &["name"],
            j!({"name": "a"}),
            j!({"name": "a"}),
            &[],
            Same,
            &[],
        );
        // Nested paths match the values that differ under a changed key.
        let old = j!({"tags": {"Name": "a", "env": "x"}});
        check(
            &["tags.Name"],
            old.clone(),
            j!({"tags": {"Name": "b", "env": "x"}}),
            &["tags"],
            Replace,
            &["tags"],
        );
        check(
            &["tags[\"Name\"]"],
            old.clone(),
            j!({"tags": {"Name": "a", "env": "y"}}),
            &["tags"],
            Update,
            &[],
        );
        check(
            &["tags.*"],
            old.clone(),
            j!({"tags": {"Name": "a", "env": "y"}}),
            &["tags"],
            Replace,
            &["tags"],
        );
        check(
            &["tags"],
            old,
            j!({"tags": {"Name": "a", "env": "y"}}),
            &["tags"],
            Replace,
            &["tags"],
        );
        check(
            &["ports[0]"],
            j!({"ports": [1, 2]}),
            j!({"ports": [1, 3]}),
            &["ports"],
            Update,
            &[],
        );
        check(
            &["ports[*]"],
            j!({"ports": [1, 2]}),
            j!({"ports": [1, 3]}),
            &["ports"],
            Replace,
            &["ports"],
        );
        check(
            &["rules[*].cidr"],
            j!({"rules": [{"cidr": "a", "p": 1}]}),
            j!({"rules": [{"cidr": "a", "p": 2}]}),
            &["rules"],
            Update,
            &[],
        );
        check(
            &["rules[*].cidr"],
            j!({"rules": [{"cidr": "a"}]}),
            j!({"rules": [{"cidr": "b"}]}),
            &["rules"],
            Replace,
            &["rules"],
        );
        // A key the provider reports as changed counts even when the
        // values look equal to the engine (the provider knows better).
        check(
            &["name"],
            j!({"name": "a"}),
            j!({"name": "a"}),
            &["name"],
            Replace,
            &["name"],
        );
        // A key containing a dot is one key, not a path.
        check(
            &["[\"a.b\"]"],
            j!({"a.b": 1}),
            j!({"a.b": 2}),
            &["a.b"],
            Replace,
            &["a.b"],
        );
        check(
            &["a.b"],
            j!({"a.b": 1}),
            j!({"a.b": 2}),
            &["a.b"],
            Update,
            &[],
        );
    }

    #[test]
    fn ignore_changes_reports_paths_it_cannot_reset() {
        let paths: Vec<PropertyPath> = ["tags.Name", "a[3]", "b"]
            .iter()
            .map(|p| PropertyPath::parse(p).unwrap())
            .collect();
        let old = map(serde_json::json!({"tags": {"Name": "x"}, "a": [1, 2, 3], "b": 1}));
        let mut new = map(serde_json::json!({"tags": {"Name": "y"}, "a": [1, 2, 3, 4], "b": 2}));
        let bad = ignore_changes(&paths, &old, &mut new);
        assert_eq!(bad, vec!["a[3]".to_owned()]);
        assert_eq!(
            new,
            map(serde_json::json!({"tags": {"Name": "x"}, "a": [1, 2, 3, 4], "b": 1}))
        );
    }
}
