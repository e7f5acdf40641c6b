//! Property-level diffs of a step, for `--diff` and the `--json` events
//! (sans-IO).
//!
//! A step that changes a resource carries the top-level input keys that
//! changed (`diffs`) and those that force its replacement (`replaces`),
//! from the provider's diff when it gave one (its verdict: ignored keys
//! and normalization are the provider's), else from comparing the old and
//! new inputs. On request it also carries the changed leaves with their
//! old and new values (`detailedDiff`, paths in Pulumi's property-path
//! syntax: `a.b`, `a[0]`, `tags["Name"]`), every secret shown as
//! `[secret]` and a secret's inside never walked, so no plaintext secret
//! reaches an event.

use std::collections::BTreeSet;

use super::step::{lock, Step, StepKind};
use crate::model::property::{Archive, Asset};
use crate::model::property_path::PropertyPath;
use crate::model::{PropertyMap, PropertyValue};
use crate::provider::{DetailedKind, DiffResponse};

pub use crate::model::step::{ChangeKind, PropertyChange, StepDiff};

/// The diff of a step about to run; `None` for steps that change no
/// inputs (same, read, refresh, the delete half of a replace). `detailed`
/// adds the changed values.
pub fn step_diff(step: &Step, detailed: bool) -> Option<StepDiff> {
    let empty = PropertyMap::new();
    match step.kind {
        StepKind::Update | StepKind::CreateReplacement => {
            let new = step.new.as_ref()?;
            let (old, old_outputs) = step.old.as_ref().map_or_else(
                || (PropertyMap::new(), PropertyMap::new()),
                |o| {
                    let o = lock(o);
                    (o.inputs.clone(), o.outputs.clone())
                },
            );
            let mut d = diff_inputs(&old, &new.inputs, step.provider_diff.as_deref(), detailed);
            if let Some(answer) = step.provider_diff.as_deref() {
                if detailed && !answer.detailed.is_empty() {
                    d.detailed = provider_detailed(answer, &old, &old_outputs, &new.inputs);
                }
            }
            hide(&mut d, &new.rare.hide_diff);
            Some(d)
        }
        StepKind::Create | StepKind::Import if detailed => {
            let new = step.new.as_ref()?;
            Some(diff_inputs(&empty, &new.inputs, None, true))
        }
        StepKind::Delete if detailed => {
            let old = lock(step.old.as_ref()?).inputs.clone();
            Some(diff_inputs(&old, &empty, None, true))
        }
        _ => None,
    }
    .filter(|d| !d.is_empty())
}

/// Applies a resource's `hideDiffs` (Pulumi's display rule): the changes
/// under a hidden path give way to one `hidden` entry for that path, with
/// no values. A path that does not parse hides nothing (the planner
/// refused it before).
fn hide(d: &mut StepDiff, hidden: &[String]) {
    if hidden.is_empty() || d.detailed.is_empty() {
        return;
    }
    let paths: Vec<(&String, PropertyPath)> = hidden
        .iter()
        .filter_map(|h| PropertyPath::parse(h).ok().map(|p| (h, p)))
        .collect();
    let mut shown = Vec::with_capacity(d.detailed.len());
    let mut hid: Vec<PropertyChange> = Vec::new();
    for c in std::mem::take(&mut d.detailed) {
        let under = PropertyPath::parse(&c.path)
            .ok()
            .and_then(|p| paths.iter().find(|(_, h)| h.contains(&p)));
        match under {
            Some((text, _)) => match hid.iter_mut().find(|h| &h.path == *text) {
                Some(h) => h.replace |= c.replace,
                None => hid.push(PropertyChange {
                    path: (*text).clone(),
                    kind: ChangeKind::Update,
                    replace: c.replace,
                    old: None,
                    new: None,
                    hidden: true,
                }),
            },
            None => shown.push(c),
        }
    }
    hid.sort_by(|a, b| a.path.cmp(&b.path));
    hid.extend(shown);
    d.detailed = hid;
}

/// The diff of `old` and `new` inputs, with the provider's answer when it
/// gave one.
pub fn diff_inputs(
    old: &PropertyMap,
    new: &PropertyMap,
    provider: Option<&DiffResponse>,
    detailed: bool,
) -> StepDiff {
    let keys: BTreeSet<&String> = match provider {
        Some(d) => d.changed_keys.iter().chain(&d.replace_keys).collect(),
        None => old
            .keys()
            .chain(new.keys())
            .filter(|k| old.get(*k) != new.get(*k))
            .collect(),
    };
    let replaces: BTreeSet<&String> =
        provider.map_or_else(BTreeSet::new, |d| d.replace_keys.iter().collect());
    let mut out = StepDiff {
        diffs: keys.iter().map(|k| (*k).clone()).collect(),
        replaces: replaces.iter().map(|k| (*k).clone()).collect(),
        detailed: Vec::new(),
    };
    if detailed {
        for k in keys {
            let replace = replaces.contains(k);
            let before = out.detailed.len();
            changes(
                &mut out.detailed,
                &key_path("", k),
                old.get(k),
                new.get(k),
                replace,
            );
            if out.detailed.len() == before {
                // The provider sees a change the values do not show (its
                // normalization): the key with both values.
                out.detailed.push(PropertyChange {
                    path: key_path("", k),
                    kind: ChangeKind::Update,
                    replace,
                    old: old.get(k).map(render),
                    new: new.get(k).map(render),
                    hidden: false,
                });
            }
        }
    }
    out
}

/// The provider's own detailed diff, with the values at its paths: the
/// old value from the old inputs (or, for a change the provider found
/// against the object, the old outputs) and the new from the new inputs.
pub fn provider_detailed(
    answer: &DiffResponse,
    old_inputs: &PropertyMap,
    old_outputs: &PropertyMap,
    new: &PropertyMap,
) -> Vec<PropertyChange> {
    answer
        .detailed
        .iter()
        .map(|d| {
            let olds = if d.input_diff {
                old_inputs
            } else {
                old_outputs
            };
            let (old, new) = (at_path(olds, &d.path), at_path(new, &d.path));
            PropertyChange {
                path: d.path.clone(),
                kind: match d.kind {
                    DetailedKind::Add => ChangeKind::Add,
                    DetailedKind::Delete => ChangeKind::Delete,
                    DetailedKind::Update => ChangeKind::Update,
                },
                replace: d.replace,
                old: match d.kind {
                    DetailedKind::Add => None,
                    _ => old.map(render),
                },
                new: match d.kind {
                    DetailedKind::Delete => None,
                    _ => new.map(render),
                },
                hidden: false,
            }
        })
        .collect()
}

/// The segments of a property path: `a.b[0]["c.d"]` -> `a`, `b`, `0`,
/// `c.d` (`None` for a path that does not parse).
fn path_segments(path: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = path.chars().peekable();
    let mut name = String::new();
    while let Some(c) = chars.next() {
        match c {
            // After `]` the name is empty: `a[0].b`.
            '.' if name.is_empty() && out.is_empty() => return None,
            '.' => {
                if !name.is_empty() {
                    out.push(std::mem::take(&mut name));
                }
            }
            '[' => {
                if !name.is_empty() {
                    out.push(std::mem::take(&mut name));
                }
                if chars.peek() == Some(&'"') {
                    chars.next();
                    let mut key = String::new();
                    loop {
                        match chars.next()? {
                            '\\' => key.push(chars.next()?),
                            '"' => break,
                            c => key.push(c),
                        }
                    }
                    out.push(key);
                } else {
                    let mut index = String::new();
                    while let Some(&c) = chars.peek() {
                        if c == ']' {
                            break;
                        }
                        index.push(c);
                        chars.next();
                    }
                    out.push(index);
                }
                if chars.next()? != ']' {
                    return None;
                }
            }
            c => name.push(c),
        }
    }
    if !name.is_empty() {
        out.push(name);
    }
    Some(out)
}

/// The value at a property path (none when absent or a secret is in the
/// way: a secret's inside is never read).
fn at_path<'a>(map: &'a PropertyMap, path: &str) -> Option<&'a PropertyValue> {
    let segments = path_segments(path)?;
    let (first, rest) = segments.split_first()?;
    let mut v = map.get(first)?;
    for seg in rest {
        v = match v {
            PropertyValue::Object(m) => m.get(seg)?,
            PropertyValue::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(v)
}

/// Appends the leaves where `old` and `new` differ under `path`.
fn changes(
    out: &mut Vec<PropertyChange>,
    path: &str,
    old: Option<&PropertyValue>,
    new: Option<&PropertyValue>,
    replace: bool,
) {
    let change = |kind| PropertyChange {
        path: path.to_owned(),
        kind,
        replace,
        old: old.map(render),
        new: new.map(render),
        hidden: false,
    };
    match (old, new) {
        (None, None) => {}
        (Some(o), Some(n)) if o == n => {}
        (None, Some(_)) => out.push(change(ChangeKind::Add)),
        (Some(_), None) => out.push(change(ChangeKind::Delete)),
        (Some(PropertyValue::Object(o)), Some(PropertyValue::Object(n))) => {
            let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
            for k in keys {
                changes(out, &key_path(path, k), o.get(k), n.get(k), replace);
            }
        }
        (Some(PropertyValue::Array(o)), Some(PropertyValue::Array(n))) => {
            for i in 0..o.len().max(n.len()) {
                changes(out, &format!("{path}[{i}]"), o.get(i), n.get(i), replace);
            }
        }
        _ => out.push(change(ChangeKind::Update)),
    }
}

/// `key` appended to `path`: `.key` for a name, `["key"]` otherwise (and
/// bare at the top level).
pub fn key_path(path: &str, key: &str) -> String {
    let plain = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    match (plain, path.is_empty()) {
        (true, true) => key.to_owned(),
        (true, false) => format!("{path}.{key}"),
        (false, _) => format!("{path}[{}]", serde_json::Value::String(key.to_owned())),
    }
}

/// A value for people and events: secrets `[secret]`, unknowns
/// `[unknown]`, assets and archives by kind, hash prefix and source.
pub fn render(v: &PropertyValue) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        PropertyValue::Secret(_) => J::String("[secret]".into()),
        PropertyValue::Computed => J::String("[unknown]".into()),
        PropertyValue::Output(o) if o.secret == Some(true) => J::String("[secret]".into()),
        PropertyValue::Output(o) => o
            .value
            .as_deref()
            .map_or_else(|| J::String("[unknown]".into()), render),
        PropertyValue::Array(a) => J::Array(a.iter().map(render).collect()),
        PropertyValue::Object(m) => {
            J::Object(m.iter().map(|(k, v)| (k.clone(), render(v))).collect())
        }
        PropertyValue::Asset(a) => J::String(asset_text(a)),
        PropertyValue::Archive(a) => J::String(archive_text(a)),
        PropertyValue::ResourceReference(r) => J::String(format!("resource({})", r.urn)),
        other => other.to_json(),
    }
}

fn short(hash: Option<&String>) -> String {
    hash.map_or_else(|| "unhashed".to_owned(), |h| h.chars().take(8).collect())
}

fn asset_text(a: &Asset) -> String {
    let h = short(a.hash.as_ref());
    if let Some(p) = &a.path {
        format!("asset(file:{h}) {p}")
    } else if let Some(u) = &a.uri {
        format!("asset(uri:{h}) {u}")
    } else {
        format!("asset(text:{h})")
    }
}

fn archive_text(a: &Archive) -> String {
    let h = short(a.hash.as_ref());
    if let Some(p) = &a.path {
        format!("archive(file:{h}) {p}")
    } else if let Some(u) = &a.uri {
        format!("archive(uri:{h}) {u}")
    } else {
        let n = a.assets.as_ref().map_or(0, PropertyMap::len);
        format!("archive(assets:{h}) {n} members")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::property::Secret;
    use serde_json::json;

    fn map(j: serde_json::Value) -> PropertyMap {
        match PropertyValue::from_json(&j).unwrap() {
            PropertyValue::Object(m) => m,
            other => panic!("{other:?}"),
        }
    }

    fn paths(d: &StepDiff) -> Vec<(String, ChangeKind, bool)> {
        d.detailed
            .iter()
            .map(|c| (c.path.clone(), c.kind, c.replace))
            .collect()
    }

    #[test]
    fn leaves_are_found_with_pulumi_paths() {
        let old =
            map(json!({"a": 1, "tags": {"Name": "x", "my key": 1}, "list": [1, 2], "gone": true}));
        let new = map(
            json!({"a": 2, "tags": {"Name": "y", "my key": 1, "New": 0}, "list": [1], "added": "s"}),
        );
        let d = diff_inputs(&old, &new, None, true);
        assert_eq!(d.diffs, ["a", "added", "gone", "list", "tags"]);
        assert!(d.replaces.is_empty());
        use ChangeKind::*;
        assert_eq!(
            paths(&d),
            [
                ("a".into(), Update, false),
                ("added".into(), Add, false),
                ("gone".into(), Delete, false),
                ("list[1]".into(), Delete, false),
                ("tags.Name".into(), Update, false),
                ("tags.New".into(), Add, false),
            ]
        );
        assert_eq!(d.detailed[0].old, Some(json!(1)));
        assert_eq!(d.detailed[0].new, Some(json!(2)));
        assert_eq!(key_path("tags", "my key"), "tags[\"my key\"]");
        // Without details: the keys only.
        let d = diff_inputs(&old, &new, None, false);
        assert!(d.detailed.is_empty() && d.diffs.len() == 5);
    }

    #[test]
    fn hidden_paths_show_that_something_changed_and_nothing_else() {
        let old = map(json!({"a": 1, "tags": {"Name": "x", "Team": "t"}, "secretish": "s1"}));
        let new = map(json!({"a": 2, "tags": {"Name": "y", "Team": "u"}, "secretish": "s2"}));
        let mut d = diff_inputs(&old, &new, None, true);
        hide(
            &mut d,
            &["tags".into(), "secretish".into(), "untouched".into()],
        );
        let shown: Vec<(String, bool, Option<serde_json::Value>)> = d
            .detailed
            .iter()
            .map(|c| (c.path.clone(), c.hidden, c.new.clone()))
            .collect();
        assert_eq!(
            shown,
            [
                ("secretish".into(), true, None),
                ("tags".into(), true, None),
                ("a".into(), false, Some(json!(2))),
            ]
        );
        // The keys that changed are still said (they decide the step).
        assert_eq!(d.diffs, ["a", "secretish", "tags"]);
    }

    #[test]
    fn the_providers_verdict_decides_the_keys_and_marks_replaces() {
        let old = map(json!({"region": "a", "index": "i", "ignored": 1}));
        let new = map(json!({"region": "b", "index": "j", "ignored": 2}));
        let answer = DiffResponse {
            kind: crate::provider::DiffKind::Replace,
            changed_keys: ["region".to_owned(), "index".to_owned()].into(),
            replace_keys: ["region".to_owned()].into(),
            delete_before_replace: false,
            detailed: Vec::new(),
        };
        let d = diff_inputs(&old, &new, Some(&answer), true);
        assert_eq!(d.diffs, ["index", "region"]);
        assert_eq!(d.replaces, ["region"]);
        assert_eq!(
            paths(&d),
            [
                ("index".into(), ChangeKind::Update, false),
                ("region".into(), ChangeKind::Update, true)
            ]
        );
    }

    #[test]
    fn the_providers_detailed_diff_is_shown_at_its_paths() {
        use crate::provider::{DetailedDiff, DiffKind};
        let old = map(json!({"tags": {"a.b": "x"}, "rules": [{"port": 80}], "pw": "p"}));
        let outputs = map(json!({"arn": "arn:old"}));
        let mut new = map(json!({"tags": {"a.b": "y"}, "rules": [{"port": 443}]}));
        new.insert(
            "pw".into(),
            PropertyValue::Secret(Secret::plaintext(PropertyValue::from("hunter2"))),
        );
        let entry = |path: &str, kind, replace, input_diff| DetailedDiff {
            path: path.into(),
            kind,
            replace,
            input_diff,
        };
        let answer = DiffResponse {
            kind: DiffKind::Replace,
            changed_keys: ["tags", "rules", "pw"].map(String::from).into(),
            replace_keys: ["rules"].map(String::from).into(),
            delete_before_replace: false,
            detailed: vec![
                entry(r#"tags["a.b"]"#, DetailedKind::Update, false, true),
                entry("rules[0].port", DetailedKind::Update, true, true),
                entry("pw", DetailedKind::Update, false, true),
                entry("arn", DetailedKind::Delete, false, false),
            ],
        };
        let got = provider_detailed(&answer, &old, &outputs, &new);
        let shown: Vec<_> = got
            .iter()
            .map(|c| {
                (
                    c.path.as_str(),
                    c.kind,
                    c.replace,
                    c.old.clone(),
                    c.new.clone(),
                )
            })
            .collect();
        use ChangeKind::*;
        assert_eq!(
            shown,
            vec![
                (
                    r#"tags["a.b"]"#,
                    Update,
                    false,
                    Some(json!("x")),
                    Some(json!("y"))
                ),
                (
                    "rules[0].port",
                    Update,
                    true,
                    Some(json!(80)),
                    Some(json!(443))
                ),
                (
                    "pw",
                    Update,
                    false,
                    Some(json!("p")),
                    Some(json!("[secret]"))
                ),
                ("arn", Delete, false, Some(json!("arn:old")), None),
            ]
        );
        assert_eq!(
            path_segments(r#"a.b[0]["c\"d"]"#).unwrap(),
            ["a", "b", "0", "c\"d"]
        );
        assert_eq!(path_segments("a[0"), None);
    }

    #[test]
    fn secrets_are_masked_and_never_walked() {
        let secret = |s: &str| PropertyValue::Secret(Secret::plaintext(PropertyValue::from(s)));
        let old = PropertyMap::from([
            ("pw".to_owned(), secret("hunter2")),
            (
                "obj".to_owned(),
                PropertyValue::Secret(Secret::plaintext(PropertyValue::Object(map(
                    json!({"k": "inner-old"}),
                )))),
            ),
        ]);
        let new = PropertyMap::from([
            ("pw".to_owned(), secret("hunter3")),
            (
                "obj".to_owned(),
                PropertyValue::Secret(Secret::plaintext(PropertyValue::Object(map(
                    json!({"k": "inner-new"}),
                )))),
            ),
        ]);
        let d = diff_inputs(&old, &new, None, true);
        let text = serde_json::to_string(&d).unwrap();
        for plain in ["hunter2", "hunter3", "inner-old", "inner-new", "\"k\""] {
            assert!(!text.contains(plain), "{plain} in {text}");
        }
        assert_eq!(paths(&d).len(), 2, "{text}");
        assert!(text.contains("[secret]"));
    }

    #[test]
    fn assets_show_their_hashes() {
        let asset = |h: &str| {
            PropertyValue::Asset(Box::new(Asset {
                hash: Some(h.into()),
                path: Some("www/index.html".into()),
                ..Asset::default()
            }))
        };
        let old = PropertyMap::from([("source".to_owned(), asset("aaaaaaaaaaaa"))]);
        let new = PropertyMap::from([("source".to_owned(), asset("bbbbbbbbbbbb"))]);
        let d = diff_inputs(&old, &new, None, true);
        assert_eq!(
            d.detailed[0].old,
            Some(json!("asset(file:aaaaaaaa) www/index.html"))
        );
        assert_eq!(
            d.detailed[0].new,
            Some(json!("asset(file:bbbbbbbb) www/index.html"))
        );
    }
}
