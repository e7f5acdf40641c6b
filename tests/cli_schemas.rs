//! Schema-versioned resources through the `keel` binary (`architecture.md`
//! §8): a program file declares the simulated cloud's schema versions under
//! `schemas:`; bumping a type's version with a key rename upgrades the
//! stack's states in place (no create, no delete; the example programs
//! `examples/programs/schema-v1.yaml` and `schema-v2.yaml`), and a bad
//! `schemas:` section is refused with exit 2 naming the file and the key.

mod common;

use common::cli::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

impl Keel {
    fn write_file(&self, name: &str, body: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, body).expect("write program");
        p
    }

    /// Object ID by name, from `keel cloud list --json`.
    fn cloud_ids(&self) -> BTreeMap<String, String> {
        let out = self.ok(&["cloud", "list", "--json"]);
        let Value::Array(objects) = serde_json::from_str(&out).expect("cloud list JSON") else {
            panic!("expected an array: {out}");
        };
        objects
            .iter()
            .map(|o| {
                (
                    o["name"].as_str().expect("name").to_owned(),
                    o["id"].as_str().expect("id").to_owned(),
                )
            })
            .collect()
    }
}

#[test]
fn a_schema_bump_with_a_rename_upgrades_in_place() {
    let k = Keel::new();
    let (v1, v2) = (example("schema-v1.yaml"), example("schema-v2.yaml"));
    let (v1, v2) = (v1.as_str(), v2.as_str());

    let out = k.ok(&["up", "--program", v1, "--json"]);
    // The stack, the default provider and three resources.
    assert_eq!(summary_steps(&out).get("create"), Some(&5), "{out}");
    let ids = k.cloud_ids();
    assert_eq!(ids.len(), 3);
    let state = k.export();
    assert_eq!(resource(&state, "assets")["schemaVersion"], 1);
    assert!(
        resource(&state, "queue").get("schemaVersion").is_none(),
        "an unversioned type has no schemaVersion"
    );

    let out = k.ok(&["up", "--program", v2, "--json"]);
    let steps = summary_steps(&out);
    assert_eq!(steps.get("create"), None, "{out}");
    assert_eq!(steps.get("delete"), None, "{out}");
    assert_eq!(steps.get("update"), None, "{out}");
    assert_eq!(k.cloud_ids(), ids, "the same objects");

    let state = k.export();
    for (name, value) in [("assets", "shop-assets"), ("logs", "shop-logs")] {
        let r = resource(&state, name);
        assert_eq!(r["schemaVersion"], 2, "{r}");
        assert_eq!(r["inputs"]["bucket"], value, "{r}");
        assert_eq!(r["outputs"]["bucket"], value, "{r}");
        assert!(r["inputs"].get("bucketName").is_none(), "{r}");
        assert!(r["outputs"].get("bucketName").is_none(), "{r}");
    }
    assert!(resource(&state, "queue").get("schemaVersion").is_none());

    // Converged: a refresh reads the objects in the current shape, and the
    // next up changes nothing.
    k.ok(&["refresh", "--yes", "--program", v2]);
    let out = k.ok(&["up", "--program", v2, "--json"]);
    let steps = summary_steps(&out);
    assert_eq!(steps.keys().collect::<Vec<_>>(), ["same"], "{out}");

    // Going back to version 1 is a downgrade: refused, nothing changed.
    let before = k.export();
    let (_, err) = k.expect(1, &["up", "--program", v1]);
    assert!(err.contains("schema version 2"), "{err}");
    assert!(err.contains("version 1"), "{err}");
    assert!(err.contains("::assets") || err.contains("::logs"), "{err}");
    assert_eq!(k.export(), before);
    assert_eq!(k.cloud_ids(), ids);
}

#[test]
fn a_bad_schemas_section_exits_2_naming_the_file_and_key() {
    let k = Keel::new();
    let bad = k.write_file(
        "bad.yaml",
        r#"
name: shop
schemas:
  aws:s3/bucket:Bucket:
    version: two
    renamez: {a: b}
resources: {}
"#,
    );
    let (_, err) = k.expect(2, &["up", "--program", bad.to_str().unwrap()]);
    assert!(err.contains("bad.yaml"), "{err}");
    assert!(
        err.contains("schemas.aws:s3/bucket:Bucket.renamez"),
        "{err}"
    );
    assert!(
        err.contains("schemas.aws:s3/bucket:Bucket.version"),
        "{err}"
    );
    assert!(!k.path().join(".keel").join("stacks").exists());
}

/// Outputs only a real provider computes, given to the simulated cloud per
/// type (issue 18, item 8): unknown in a preview, computed from the
/// object's ID and inputs in an update, flowing to the resources and
/// outputs that read them.
#[test]
fn schemas_give_the_simulated_cloud_computed_outputs() {
    let k = Keel::new();
    let program = k.write_file(
        "web.yaml",
        r#"
name: web
schemas:
  aws:ec2/instance:Instance:
    outputs:
      publicIp: "203.0.113.{inputs.slot}"
      arn: "arn:aws:ec2:us-east-1:123456789012:instance/{id}"
resources:
  web: { type: "aws:ec2/instance:Instance", properties: { slot: 7 } }
  dns:
    type: "aws:route53/record:Record"
    properties: { target: "${web.publicIp}" }
outputs:
  ip: ${web.publicIp}
"#,
    );
    let p = program.to_str().unwrap();
    let out = k.ok(&["preview", "--program", p]);
    assert!(out.contains("ip: (unknown until the update)"), "{out}");
    let out = k.ok(&["up", "--yes", "--program", p]);
    assert!(out.contains("ip: 203.0.113.7"), "{out}");
    let state = k.export();
    let web = resource(&state, "web");
    let id = web["id"].as_str().expect("id");
    assert_eq!(web["outputs"]["publicIp"], "203.0.113.7", "{web}");
    assert_eq!(
        web["outputs"]["arn"],
        format!("arn:aws:ec2:us-east-1:123456789012:instance/{id}"),
        "{web}"
    );
    assert_eq!(resource(&state, "dns")["inputs"]["target"], "203.0.113.7");
    all_same(&k.ok(&["up", "--yes", "--json", "--program", p]));

    // A template that is not text is refused before anything runs.
    let bad = k.write_file(
        "bad.yaml",
        "name: web\nschemas:\n  aws:ec2/instance:Instance:\n    outputs: {publicIp: [1]}\nresources: {}\n",
    );
    let (_, err) = k.expect(2, &["up", "--program", bad.to_str().unwrap()]);
    assert!(
        err.contains("schemas.aws:ec2/instance:Instance.outputs.publicIp"),
        "{err}"
    );
}
