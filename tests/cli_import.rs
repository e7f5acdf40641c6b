//! `keel import` (one resource, and Pulumi's import file) and the program
//! file's `import` option, end to end: objects are adopted through the
//! provider's read and never created; the stack's other resources and
//! outputs are left alone; an ID the stack manages, an ID the cloud does
//! not have, a locked stack and bad files change nothing.

mod common;

use common::cli::*;
use serde_json::{json, Value};

/// The example site deployed; returns the harness and (URN, ID) by name.
fn site() -> (Keel, std::collections::BTreeMap<String, (String, String)>) {
    let k = Keel::new();
    k.ok(&["up", "--program", &example("site-v1.yaml")]);
    let ids = k
        .urns()
        .into_iter()
        .map(|(u, id)| {
            (
                u.rsplit("::").next().unwrap_or_default().to_owned(),
                (u, id),
            )
        })
        .collect();
    (k, ids)
}

fn without(
    mut m: std::collections::BTreeMap<String, Value>,
    urn: &str,
) -> std::collections::BTreeMap<String, Value> {
    m.remove(urn);
    for r in m.values_mut() {
        if let Some(o) = r.as_object_mut() {
            o.remove("modified");
        }
    }
    m
}

#[test]
fn import_adopts_an_object_by_reading_it() {
    let (k, ids) = site();
    let (cdn, cdn_id) = ids["cdn"].clone();
    k.ok(&["state", "delete", &cdn, "--yes"]);
    let before = without(k.resources(), &cdn);
    let cloud = k.cloud();

    let out = k.ok(&[
        "import",
        "aws:cloudfront:Distribution",
        "cdn",
        &cdn_id,
        "--yes",
    ]);
    assert!(out.contains("import") && out.contains(&cdn), "{out}");
    assert_eq!(
        k.cloud(),
        cloud,
        "nothing was created or changed in the cloud"
    );
    let after = k.resources();
    let r = &after[&cdn];
    assert_eq!(r["id"], Value::from(cdn_id.clone()));
    assert_eq!(r["protect"], Value::Bool(true), "protected by default");
    assert_eq!(r["inputs"]["priceClass"], Value::from("PriceClass_100"));
    assert!(r["outputs"]["domainName"].is_string(), "{r}");
    assert_eq!(
        without(after, &cdn),
        before,
        "the other resources are untouched"
    );
    k.ok(&["state", "verify"]);
    // The program now finds it in the state.
    let (out, _) = k.expect(
        0,
        &["preview", "--program", &example("site-v1.yaml"), "--json"],
    );
    all_same(&out);
    // The stack's outputs survived the import.
    let stack = k
        .resources()
        .into_values()
        .find(|r| r["type"] == "pulumi:pulumi:Stack")
        .unwrap();
    assert!(stack["outputs"]["url"].is_string(), "{stack}");

    // Pulumi's `name=URN` forms of --parent and --provider.
    let (logs, logs_id) = ids["logs"].clone();
    k.ok(&[
        "state",
        "delete",
        &logs,
        "--force",
        "--target-dependents",
        "--yes",
    ]);
    let provider = k
        .urns()
        .into_keys()
        .find(|u| u.contains("pulumi:providers:aws"))
        .unwrap();
    k.ok(&[
        "import",
        "aws:s3/bucket:Bucket",
        "logs",
        &logs_id,
        "--parent",
        &format!("site={}", ids["site"].0),
        "--provider",
        &format!("aws={provider}"),
        "--protect=false",
        "--yes",
    ]);
    let r = &k.resources()[&logs];
    assert!(
        r["provider"].as_str().unwrap().starts_with(&provider),
        "{r}"
    );
    assert!(r.get("protect").is_none_or(|p| p == false), "{r}");
    k.ok(&["state", "verify"]);

    // Both imports are in the stack's history, newest first, with their
    // step counts.
    let history: Value = serde_json::from_str(&k.ok(&["stack", "history", "--json"])).unwrap();
    let kinds: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["import", "import", "update"], "{history}");
    assert_eq!(history[0]["result"], "succeeded", "{history}");
    assert_eq!(history[0]["counts"]["import"], 1, "{history}");
}

#[test]
fn import_refuses_managed_ids_and_fails_on_unknown_ones() {
    let (k, ids) = site();
    let (_, logs_id) = ids["logs"].clone();
    let before = k.files();
    // Already managed (under another name too).
    let (_, err) = k.expect(
        2,
        &["import", "aws:s3/bucket:Bucket", "again", &logs_id, "--yes"],
    );
    assert!(
        err.contains("already manages") && err.contains(&logs_id),
        "{err}"
    );
    k.expect(
        2,
        &[
            "import",
            "aws:s3/bucket:Bucket",
            "logs",
            "other-id",
            "--parent",
            &ids["site"].0,
            "--yes",
        ],
    );
    // No --yes without a terminal.
    k.expect(2, &["import", "aws:s3/bucket:Bucket", "x", "bucket-nope"]);
    // Unknown parent and provider.
    let (_, err) = k.expect(
        2,
        &[
            "import",
            "aws:s3/bucket:Bucket",
            "x",
            "bucket-nope",
            "--parent",
            "urn:pulumi:dev::site::a:b:C::nope",
            "--yes",
        ],
    );
    assert!(err.contains("--parent"), "{err}");
    k.expect(
        2,
        &[
            "import",
            "aws:s3/bucket:Bucket",
            "x",
            "bucket-nope",
            "--provider",
            "urn:pulumi:dev::site::pulumi:providers:aws::nope",
            "--yes",
        ],
    );
    k.expect(
        2,
        &[
            "import",
            "aws:s3/bucket:Bucket",
            "x",
            "bucket-nope",
            "--stack",
            "empty",
            "--yes",
        ],
    );
    assert!(k.files() == before, "refused imports change nothing");
    let resources = k.resources();

    // The cloud has no such object: the import fails, naming it.
    let (_, err) = k.expect(
        1,
        &[
            "import",
            "aws:s3/bucket:Bucket",
            "ghost",
            "bucket-nope",
            "--yes",
        ],
    );
    assert!(
        err.contains("bucket-nope") && err.contains("Bucket::ghost"),
        "{err}"
    );
    assert_eq!(k.resources().len(), resources.len(), "nothing was added");
    assert!(!k.urns().keys().any(|u| u.ends_with("::ghost")));
}

#[test]
fn import_waits_for_no_lock_and_refuses_bad_files() {
    let (k, ids) = site();
    let held = keel::persist::backend::Backend::new(k.backend())
        .open("dev", "cli test holding the lock")
        .expect("open the stack");
    let before = k.files();
    let (_, err) = k.expect(
        1,
        &[
            "import",
            "aws:s3/bucket:Bucket",
            "x",
            &ids["logs"].1,
            "--yes",
        ],
    );
    assert!(err.contains("locked by another operation"), "{err}");
    assert!(k.files() == before, "a locked stack is not touched");
    drop(held);
    let before = k.files();

    let bad = [
        ("not-json.json", "{".to_owned()),
        ("unknown-key.json", json!({"resources": [{"type": "a:b:C", "name": "n", "id": "i", "bogus": 1}]}).to_string()),
        ("no-id.json", json!({"resources": [{"type": "aws:s3/bucket:Bucket", "name": "n"}]}).to_string()),
        ("no-parent.json", json!({"resources": [{"type": "aws:s3/bucket:Bucket", "name": "n", "id": "i", "parent": "p"}]}).to_string()),
        ("empty.json", json!({"resources": []}).to_string()),
    ];
    for (name, content) in bad {
        let path = k.write(name, &content);
        let (_, err) = k.expect(2, &["import", "--file", &path, "--yes"]);
        assert!(err.contains(name), "{name}: {err}");
    }
    k.expect(2, &["import", "--file", "missing.json", "--yes"]);
    assert!(k.files() == before, "bad files change nothing");
}

#[test]
fn an_import_file_adopts_a_whole_subtree() {
    let (k, ids) = site();
    let cloud = k.cloud();
    k.ok(&[
        "state",
        "delete",
        &ids["site"].0,
        "--target-dependents",
        "--yes",
    ]);
    assert_eq!(
        k.resources().len(),
        2,
        "the stack and its provider are left"
    );
    let file = json!({
        "nameTable": {},
        "resources": [
            {"type": "site:web:Site", "name": "site", "component": true},
            {"type": "aws:s3/bucket:Bucket", "name": "assets", "id": ids["assets"].1, "parent": "site"},
            {"type": "aws:s3/bucket:Bucket", "name": "logs", "id": ids["logs"].1, "parent": "site"},
            {"type": "aws:s3/bucketPolicy:BucketPolicy", "name": "policy", "id": ids["policy"].1, "parent": "site"},
            {"type": "aws:cloudfront:Distribution", "name": "cdn", "id": ids["cdn"].1},
        ]
    });
    let path = k.write("import.json", &file.to_string());
    k.ok(&["import", "--file", &path, "--protect=false", "--yes"]);
    assert_eq!(k.cloud(), cloud, "nothing was created");
    let urns = k.urns();
    for (name, (urn, id)) in &ids {
        assert_eq!(urns.get(urn), Some(id), "{name}");
    }
    k.ok(&["state", "verify"]);
    // The program then finds the site as it left it (the stack's outputs
    // and the CDN's dependencies come back with the next update).
    let (out, _) = k.expect(
        0,
        &["preview", "--program", &example("site-v1.yaml"), "--json"],
    );
    let steps = summary_steps(&out);
    assert!(
        steps.keys().all(|s| s == "same" || s == "update"),
        "{steps:?}"
    );
    assert!(!steps.contains_key("create"), "{steps:?}");
}

#[test]
fn a_program_file_imports_with_the_import_option() {
    let (k, ids) = site();
    let assets = k.resources()[&ids["assets"].0].clone();
    let cloud = k.cloud();
    let program = |id: &str, name: &str| {
        format!(
            "name: adopter\nresources:\n  b:\n    type: aws:s3/bucket:Bucket\n    properties:\n      name: {name}\n      website: {{ index: index.html, error: 404.html }}\n    options:\n      import: {id}\n"
        )
    };
    let name = assets["inputs"]["name"].as_str().unwrap().to_owned();
    // Inputs that differ from the object: the import fails, nothing is made.
    let p = k.write("wrong.yaml", &program(&ids["assets"].1, "other-name"));
    let (_, err) = k.expect(1, &["up", "--program", &p, "--stack", "adopt"]);
    assert!(err.contains("differ"), "{err}");
    let p = k.write("ghost.yaml", &program("bucket-nope", &name));
    k.expect(1, &["up", "--program", &p, "--stack", "adopt"]);
    assert_eq!(k.cloud(), cloud);

    let p = k.write("adopt.yaml", &program(&ids["assets"].1, &name));
    let (out, _) = k.expect(0, &["up", "--program", &p, "--stack", "adopt", "--json"]);
    assert_eq!(summary_steps(&out).get("import"), Some(&1), "{out}");
    assert_eq!(k.cloud(), cloud, "adopted, not created");
    // Then it is managed like any other resource.
    let (out, _) = k.expect(
        0,
        &["preview", "--program", &p, "--stack", "adopt", "--json"],
    );
    all_same(&out);
    // A bad `import` value is refused before anything runs.
    let p = k.write("bad.yaml", "name: adopter\nresources:\n  c:\n    type: my:c:C\n    component: true\n    options:\n      import: x\n");
    let (_, err) = k.expect(2, &["up", "--program", &p, "--stack", "adopt"]);
    assert!(err.contains("options.import"), "{err}");
}

#[test]
fn import_reads_through_an_explicit_provider_under_a_parent() {
    let k = Keel::new();
    let program = k.write(
        "explicit.yaml",
        "name: ex\nresources:\n  group:\n    type: my:app:Group\n    component: true\n  east:\n    type: pulumi:providers:aws\n    properties: { region: us-east-1 }\n  b:\n    type: aws:s3/bucket:Bucket\n    properties: { name: bee }\n    options: { parent: group, provider: east }\n",
    );
    k.ok(&["up", "--program", &program]);
    let urns = k.urns();
    let find = |suffix: &str| urns.iter().find(|(u, _)| u.ends_with(suffix)).unwrap();
    let (b, b_id) = find("::b");
    let (east, east_id) = find("::east");
    let (group, _) = find("::group");
    let provider_before = k.resources()[b]["provider"].clone();
    k.ok(&["state", "delete", b, "--yes"]);
    let cloud = k.cloud();
    k.ok(&[
        "import",
        "aws:s3/bucket:Bucket",
        "b",
        b_id,
        "--parent",
        group,
        "--provider",
        east,
        "--yes",
    ]);
    assert_eq!(k.cloud(), cloud);
    let r = &k.resources()[b];
    assert_eq!(r["provider"], provider_before);
    assert_eq!(r["provider"], Value::from(format!("{east}::{east_id}")));
    k.ok(&["state", "verify"]);
    let (out, _) = k.expect(0, &["preview", "--program", &program, "--json"]);
    all_same(&out);
}
