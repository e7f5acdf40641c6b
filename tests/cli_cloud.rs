//! The simulated cloud through the `keel` binary: two stacks of one
//! backend updating at once keep every object; objects are identified by
//! type and ID (removing one of two resources sharing an ID leaves the
//! other's object); a resource split off a bucket is a facet of it (a
//! refresh keeps it, an update writes it alone, removing it leaves the
//! bucket); secrets never reach the cloud's file or `cloud list` in
//! plaintext, and reading them back shows no drift.

mod common;

use std::process::Stdio;

use common::cli::*;

use serde_json::Value;

/// The cloud's objects' URNs.
fn urns(cloud: &[Value]) -> Vec<String> {
    let mut urns: Vec<String> = cloud
        .iter()
        .map(|o| o["urn"].as_str().expect("urn").to_owned())
        .collect();
    urns.sort();
    urns
}

#[test]
fn two_stacks_of_one_backend_updating_at_once_keep_all_their_objects() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    // Latency makes the two updates overlap.
    let spawn = |stack: &str| {
        k.command(&[
            "up",
            "--yes",
            "--stack",
            stack,
            "--program",
            &v1,
            "--sim-latency-ms",
            "200",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn keel")
    };
    let (a, b) = (spawn("a"), spawn("b"));
    for (stack, child) in [("a", a), ("b", b)] {
        let o = child.wait_with_output().expect("wait");
        assert!(
            o.status.success(),
            "stack {stack}: {}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
    let cloud = k.cloud();
    assert_eq!(cloud.len(), 8, "both stacks' objects: {cloud:#?}");
    let urns = urns(&cloud);
    let table = k.ok(&["cloud", "list"]);
    for stack in ["a", "b"] {
        let rows = table
            .lines()
            .filter(|l| l.split_whitespace().nth(2) == Some(stack))
            .count();
        assert_eq!(rows, 4, "stack {stack} in the table:\n{table}");
    }
    for stack in ["a", "b"] {
        let state: Value =
            serde_json::from_str(&k.ok(&["stack", "export", "--stack", stack])).expect("export");
        let custom: Vec<&Value> = state["deployment"]["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter(|r| {
                r["custom"] == true
                    && !r["type"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("pulumi:providers:")
            })
            .collect();
        assert_eq!(custom.len(), 4, "stack {stack}");
        for r in custom {
            let urn = r["urn"].as_str().expect("urn");
            assert!(
                urns.iter().any(|u| u == urn),
                "stack {stack}: {urn} lost from the cloud: {urns:#?}"
            );
            assert!(cloud
                .iter()
                .any(|o| o["id"] == r["id"] && o["type"] == r["type"]));
        }
    }
}

#[test]
fn removing_one_of_two_resources_sharing_an_id_keeps_the_others_object() {
    let k = Keel::new();
    k.ok(&["up", "--yes", "--program", &example("split-v1.yaml")]);
    k.ok(&["up", "--yes", "--program", &example("split-v2.yaml")]);
    let bucket = resource(&k.export(), "assets")["id"].clone();
    let settings = resource(&k.export(), "assets-website").clone();
    assert_eq!(settings["id"], bucket, "the split resources share the ID");
    let before = k.cloud();

    // v3: the settings resource is gone (and the migration with it).
    let v3 = k.write(
        "split-v3.yaml",
        "name: shop\n\
         resources:\n\
         \x20 site: { type: \"shop:web:Site\", component: true }\n\
         \x20 assets:\n\
         \x20   type: \"aws:s3/bucket:Bucket\"\n\
         \x20   properties: { name: shop-assets }\n\
         \x20   options: { parent: site }\n\
         \x20 cdn:\n\
         \x20   type: \"aws:cloudfront:Distribution\"\n\
         \x20   properties: { origin: \"${assets.websiteEndpoint}\" }\n",
    );
    let out = k.ok(&["up", "--yes", "--json", "--program", &v3]);
    assert_eq!(summary_steps(&out).get("delete"), Some(&1), "{out}");
    assert!(!k
        .urns()
        .contains_key(settings["urn"].as_str().expect("urn")));
    assert_eq!(k.cloud(), before, "the bucket's object is untouched");
    assert!(k
        .cloud()
        .iter()
        .any(|o| o["id"] == bucket && o["type"] == "aws:s3/bucket:Bucket"));
    // The bucket still reads back from the cloud.
    let out = k.ok(&["refresh", "--yes", "--json"]);
    assert_eq!(summary_steps(&out).get("refresh"), Some(&2), "{out}");
    assert_eq!(resource(&k.export(), "assets")["id"], bucket);
}

/// split-v2.yaml without its migration (applied already), the website
/// settings with this `index`, or without them.
fn split_v3(k: &Keel, name: &str, index: Option<&str>) -> String {
    let mut text = String::from(
        "name: shop\n\
         resources:\n\
         \x20 site: { type: \"shop:web:Site\", component: true }\n\
         \x20 assets:\n\
         \x20   type: \"aws:s3/bucket:Bucket\"\n\
         \x20   properties: { name: shop-assets }\n\
         \x20   options: { parent: site }\n\
         \x20 cdn:\n\
         \x20   type: \"aws:cloudfront:Distribution\"\n\
         \x20   properties: { origin: \"${assets.websiteEndpoint}\" }\n",
    );
    if let Some(index) = index {
        text.push_str(&format!(
            "\x20 assets-website:\n\
             \x20   type: \"{WEBSITE}\"\n\
             \x20   properties: {{ bucket: \"${{assets.id}}\", index: {index}, error: 404.html }}\n\
             \x20   options: {{ parent: site }}\n"
        ));
    }
    k.write(name, &text)
}

const WEBSITE: &str = "aws:s3/bucketWebsiteConfiguration:BucketWebsiteConfiguration";

/// The cloud object of `ty` with `id`, if any.
fn object_of(cloud: &[Value], ty: &str, id: &Value) -> Option<Value> {
    cloud
        .iter()
        .find(|o| o["type"] == ty && o["id"] == *id)
        .cloned()
}

#[test]
fn a_resource_split_off_a_bucket_is_a_facet_of_it() {
    let k = Keel::new();
    k.ok(&["up", "--yes", "--program", &example("split-v1.yaml")]);
    k.ok(&["up", "--yes", "--program", &example("split-v2.yaml")]);
    let bucket = resource(&k.export(), "assets")["id"].clone();
    let website = |k: &Keel| resource(&k.export(), "assets-website").clone();
    let urn = website(&k)["urn"].as_str().expect("urn").to_owned();
    let after_split = k.cloud();
    assert_eq!(
        object_of(&after_split, WEBSITE, &bucket),
        None,
        "the split made no object: the bucket carries the settings"
    );

    // A refresh keeps the website resource: its bucket carries it.
    let out = k.ok(&["refresh", "--yes", "--json"]);
    assert_eq!(summary_steps(&out).get("refresh"), Some(&3), "{out}");
    let w = website(&k);
    assert_eq!(w["id"], bucket);
    assert_eq!(w["inputs"]["index"], "index.html");
    assert_eq!(k.cloud(), after_split, "a refresh changes nothing");

    // An update of its settings succeeds and writes the facet's object.
    let out = k.ok(&[
        "up",
        "--yes",
        "--json",
        "--program",
        &split_v3(&k, "v3.yaml", Some("home.html")),
    ]);
    let steps = summary_steps(&out);
    assert!(steps.contains_key("update"), "{out}");
    assert!(
        steps.keys().all(|s| s == "same" || s == "update"),
        "{steps:?}"
    );
    let cloud = k.cloud();
    let facet = object_of(&cloud, WEBSITE, &bucket).expect("the facet's object");
    assert_eq!(facet["urn"], urn.as_str());
    assert_eq!(facet["properties"]["index"], "home.html");
    assert_eq!(website(&k)["id"], bucket);

    // ... and it changes the facet only.
    let bucket_object = object_of(&cloud, "aws:s3/bucket:Bucket", &bucket).expect("bucket");
    let out = k.ok(&[
        "up",
        "--yes",
        "--json",
        "--program",
        &split_v3(&k, "v4.yaml", Some("start.html")),
    ]);
    assert_eq!(summary_steps(&out).get("update"), Some(&1), "{out}");
    let cloud = k.cloud();
    assert_eq!(
        object_of(&cloud, WEBSITE, &bucket).expect("facet")["properties"]["index"],
        "start.html"
    );
    assert_eq!(
        object_of(&cloud, "aws:s3/bucket:Bucket", &bucket),
        Some(bucket_object.clone())
    );
    let out = k.ok(&["refresh", "--yes", "--json"]);
    assert_eq!(summary_steps(&out).get("refresh"), Some(&3), "{out}");
    assert_eq!(website(&k)["inputs"]["index"], "start.html");

    // Removing it deletes the facet and leaves the bucket.
    let out = k.ok(&[
        "up",
        "--yes",
        "--json",
        "--program",
        &split_v3(&k, "v5.yaml", None),
    ]);
    assert_eq!(summary_steps(&out).get("delete"), Some(&1), "{out}");
    let cloud = k.cloud();
    assert_eq!(object_of(&cloud, WEBSITE, &bucket), None);
    assert_eq!(
        object_of(&cloud, "aws:s3/bucket:Bucket", &bucket),
        Some(bucket_object)
    );
    assert_eq!(cloud.len(), 2, "the bucket and the CDN: {cloud:#?}");
    let out = k.ok(&["refresh", "--yes", "--json"]);
    assert_eq!(summary_steps(&out).get("refresh"), Some(&2), "{out}");
    assert!(!k.urns().contains_key(&urn));
    assert_eq!(resource(&k.export(), "assets")["id"], bucket);

    // Destroying the stack deletes the bucket and whatever it carries.
    k.ok(&["destroy", "--yes"]);
    assert!(k.cloud().is_empty());
}

#[test]
fn secrets_never_reach_the_cloud_in_plaintext_and_read_back_without_drift() {
    const PLAIN: &str = "s3kr1t-cloud-pw";
    let mut k = Keel::new();
    k.passphrase = Some("correct horse".into());
    let program = k.write(
        "vault.yaml",
        &format!(
            "name: vault\nresources:\n  db:\n    type: \"aws:rds:Instance\"\n    \
             properties: {{ engine: postgres, password: {{ \"fn::secret\": \"{PLAIN}\" }} }}\n"
        ),
    );
    k.ok(&["up", "--yes", "--program", &program]);
    let on_disk = |k: &Keel| {
        k.files()
            .into_iter()
            .filter(|(_, bytes)| text(bytes).contains(PLAIN))
            .map(|(path, _)| path)
            .collect::<Vec<_>>()
    };
    assert_eq!(on_disk(&k), Vec::<std::path::PathBuf>::new());
    let listed = k.ok(&["cloud", "list", "--json"]);
    assert!(!listed.contains(PLAIN), "{listed}");
    let cloud = k.cloud();
    assert_eq!(cloud.len(), 1);
    assert_eq!(cloud[0]["properties"]["password"], "[secret]");
    assert_eq!(cloud[0]["properties"]["engine"], "postgres");
    let shown = k.ok(&["cloud", "list"]);
    assert!(!shown.contains(PLAIN), "{shown}");

    // Refreshing reads the value back: no drift, state unchanged.
    let resources = k.resources();
    k.ok(&["refresh", "--yes"]);
    assert_eq!(k.resources(), resources);
    let out = k.ok(&["up", "--yes", "--json", "--program", &program]);
    all_same(&out);
    assert_eq!(on_disk(&k), Vec::<std::path::PathBuf>::new());
    let shown = k.ok(&["stack", "export", "--show-secrets"]);
    assert!(shown.contains(PLAIN), "the value stays recoverable");
}
