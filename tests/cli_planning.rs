//! Planning as Pulumi plans it, through the `keel` binary and program
//! files (issue 16, items 1 to 3):
//!
//! - default providers named by the plugin `version` and configured from
//!   the package's config (`aws:region`); a new version moves resources to
//!   a new default provider without replacing them, a region change
//!   replaces them (the simulated cloud's `diff_config`);
//! - a delete-before-replace replaces only the dependents that must go;
//! - `ignoreChanges` / `replaceOnChanges` with nested property paths, and
//!   bad paths refused before anything runs.

mod common;

use std::collections::BTreeMap;

use common::cli::*;
use serde_json::Value;

/// Step kind -> URNs, from `--json` events.
fn steps_by_kind(stdout: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events(stdout) {
        if e["event"] == "step-finished" {
            let kind = e["kind"].as_str().unwrap_or_default().to_owned();
            let urn = e["urn"].as_str().unwrap_or_default().to_owned();
            out.entry(kind).or_default().push(urn);
        }
    }
    out
}

fn ids(k: &Keel) -> BTreeMap<String, String> {
    k.urns()
        .into_iter()
        .map(|(urn, id)| (urn.rsplit("::").next().unwrap_or_default().to_owned(), id))
        .collect()
}

fn no_replace_create_or_delete(stdout: &str, allowed: &[&str]) {
    for (kind, urns) in steps_by_kind(stdout) {
        for urn in urns {
            let name = urn.rsplit("::").next().unwrap_or_default();
            assert!(
                !(kind.contains("create") || kind.contains("delete") || kind.contains("replace"))
                    || allowed.contains(&name),
                "{kind} {urn}:\n{stdout}"
            );
        }
    }
}

fn program(region: &str, version: &str) -> String {
    format!(
        "name: prov
config:
  aws:region: {region}
resources:
  a: {{ type: aws:s3/bucket:Bucket, properties: {{ name: a }}, options: {{ version: {version} }} }}
  b: {{ type: aws:s3/bucket:Bucket, properties: {{ name: b }} }}
"
    )
}

#[test]
fn provider_versions_move_resources_and_configuration_replaces_them() {
    let k = Keel::new();
    let v1 = k.write("v1.yaml", &program("us-east-1", "6.0.0"));
    k.ok(&["up", "--program", &v1]);
    let state = k.resources();
    let p = &state["urn:pulumi:dev::prov::pulumi:providers:aws::default_6_0_0"];
    assert_eq!(
        p["inputs"],
        serde_json::json!({"__internal": {}, "region": "us-east-1", "version": "6.0.0"})
    );
    let d = &state["urn:pulumi:dev::prov::pulumi:providers:aws::default"];
    assert_eq!(d["inputs"], serde_json::json!({"region": "us-east-1"}));
    let a = &state["urn:pulumi:dev::prov::aws:s3/bucket:Bucket::a"];
    assert!(a["provider"]
        .as_str()
        .unwrap()
        .contains("::default_6_0_0::"));
    let before = ids(&k);

    // A new version: a new default provider, the old one goes, the bucket
    // moves to it (same object).
    let v2 = k.write("v2.yaml", &program("us-east-1", "6.1.0"));
    let out = k.ok(&["preview", "--json", "--program", &v2]);
    no_replace_create_or_delete(&out, &["default_6_1_0", "default_6_0_0"]);
    let steps = steps_by_kind(&out);
    assert_eq!(steps["create"].len(), 1, "{out}");
    assert_eq!(steps["delete"].len(), 1, "{out}");
    let out = k.ok(&["up", "--json", "--program", &v2]);
    no_replace_create_or_delete(&out, &["default_6_1_0", "default_6_0_0"]);
    let after = ids(&k);
    assert_eq!((&after["a"], &after["b"]), (&before["a"], &before["b"]));
    assert!(!after.contains_key("default_6_0_0"));
    let cloud_ids: Vec<Value> = k.cloud().iter().map(|o| o["id"].clone()).collect();
    assert_eq!(cloud_ids.len(), 2);

    // Another region: both default providers are replaced, and the buckets
    // with them.
    let v3 = k.write("v3.yaml", &program("eu-west-1", "6.1.0"));
    let out = k.ok(&["up", "--json", "--program", &v3]);
    let steps = steps_by_kind(&out);
    let mut replaced: Vec<&str> = steps["create-replacement"]
        .iter()
        .map(|u| u.rsplit("::").next().unwrap_or_default())
        .collect();
    replaced.sort_unstable();
    assert_eq!(replaced, ["a", "b", "default", "default_6_1_0"], "{out}");
    let now = ids(&k);
    assert_ne!(now["a"], after["a"]);
    assert_eq!(k.cloud().len(), 2);

    // A version that is not a semantic version is refused before anything
    // runs.
    let bad = k.write("bad.yaml", &program("eu-west-1", "v6"));
    let files = k.files();
    let (_, err) = k.expect(2, &["up", "--program", &bad]);
    assert!(
        err.contains("options.version") && err.contains("`v6`"),
        "{err}"
    );
    assert_eq!(k.files(), files);
}

#[test]
fn delete_before_replace_replaces_only_the_dependents_that_must_go() {
    let k = Keel::new();
    let prog = |name: &str| {
        format!(
            "name: dbr
resources:
  a:
    type: aws:s3/bucket:Bucket
    properties: {{ name: {name} }}
    options: {{ deleteBeforeReplace: true, replaceOnChanges: [name] }}
  # Takes a's endpoint; an endpoint change is an update.
  b: {{ type: aws:cloudfront:Distribution, properties: {{ origin: \"${{a.websiteEndpoint}}\" }} }}
  # Takes it too, and is replaced when it changes.
  c:
    type: aws:cloudfront:Distribution
    properties: {{ origin: \"${{a.websiteEndpoint}}\" }}
    options: {{ replaceOnChanges: [origin] }}
  # Only ordered after a.
  d: {{ type: aws:s3/bucket:Bucket, properties: {{ name: d }}, options: {{ dependsOn: [a] }} }}
"
        )
    };
    k.ok(&["up", "--program", &k.write("v1.yaml", &prog("a1"))]);
    let before = ids(&k);
    let out = k.ok(&[
        "up",
        "--json",
        "--program",
        &k.write("v2.yaml", &prog("a2")),
    ]);
    let steps = steps_by_kind(&out);
    let names = |kind: &str| {
        let mut v: Vec<String> = steps
            .get(kind)
            .into_iter()
            .flatten()
            .map(|u| u.rsplit("::").next().unwrap_or_default().to_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names("delete-replaced"), ["a", "c"], "{out}");
    assert_eq!(names("create-replacement"), ["a", "c"], "{out}");
    assert_eq!(names("update"), ["b"], "{out}");
    let after = ids(&k);
    assert_eq!((&after["b"], &after["d"]), (&before["b"], &before["d"]));
    assert_ne!(after["c"], before["c"]);
    assert_eq!(k.cloud().len(), 4);
    all_same(&k.ok(&[
        "preview",
        "--json",
        "--program",
        &k.write("v2.yaml", &prog("a2")),
    ]));
}

#[test]
fn ignore_and_replace_on_changes_take_nested_paths() {
    let k = Keel::new();
    let prog = |name: &str, env: &str, size: u32| {
        format!(
            "name: paths
resources:
  a:
    type: aws:s3/bucket:Bucket
    properties: {{ tags: {{ Name: {name}, env: {env} }}, size: {size} }}
    options: {{ ignoreChanges: [tags.Name], replaceOnChanges: ['tags[\"env\"]'] }}
"
        )
    };
    k.ok(&["up", "--program", &k.write("v1.yaml", &prog("n1", "e1", 1))]);
    let id = ids(&k)["a"].clone();
    let a = "urn:pulumi:dev::paths::aws:s3/bucket:Bucket::a";
    // The ignored tag changes: nothing to do.
    all_same(&k.ok(&[
        "up",
        "--json",
        "--program",
        &k.write("v2.yaml", &prog("n2", "e1", 1)),
    ]));
    // The size changes: an update, which keeps the old Name.
    let out = k.ok(&[
        "up",
        "--json",
        "--program",
        &k.write("v3.yaml", &prog("n2", "e1", 2)),
    ]);
    assert_eq!(steps_by_kind(&out)["update"], [a.to_owned()], "{out}");
    assert_eq!(
        k.resources()[a]["inputs"],
        serde_json::json!({"tags": {"Name": "n1", "env": "e1"}, "size": 2})
    );
    let object = k
        .cloud()
        .into_iter()
        .find(|o| o["id"] == id)
        .expect("object");
    assert_eq!(object["properties"]["tags"]["Name"], "n1", "{object}");
    // The env tag changes: a replace, created with the program's Name.
    let out = k.ok(&[
        "up",
        "--json",
        "--program",
        &k.write("v4.yaml", &prog("n2", "e2", 2)),
    ]);
    assert_eq!(
        steps_by_kind(&out)["create-replacement"],
        [a.to_owned()],
        "{out}"
    );
    assert_eq!(
        k.resources()[a]["inputs"],
        serde_json::json!({"tags": {"Name": "n2", "env": "e2"}, "size": 2})
    );
    // A bad path is refused before anything runs, naming the key.
    let files = k.files();
    let bad = k.write(
        "bad.yaml",
        "name: paths\nresources:\n  a:\n    type: aws:s3/bucket:Bucket\n    options: { ignoreChanges: [\"tags[\"] }\n",
    );
    let (_, err) = k.expect(2, &["up", "--program", &bad]);
    for needle in [
        "bad.yaml",
        "resource `a`",
        "options.ignoreChanges[0]",
        "not a property path",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert_eq!(k.files(), files);
}
