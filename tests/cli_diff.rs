//! `--diff` on `keel preview` and `keel up`: property-level diffs shown as
//! `pulumi preview --diff` shows them (`~ key: old => new`, `+ key: value`,
//! `- key: value`, `(replace)` on a replace-causing key), secrets masked;
//! `--json` step events carry the changed and replace-causing keys (and
//! with `--diff` the masked values).

mod common;

use common::cli::*;
use serde_json::Value;

const V1: &str = r#"
name: shop
resources:
  site:
    type: aws:s3/bucket:Bucket
    properties:
      name: shop-site
      website: { index: index.html }
      tags: { env: dev }
      password: { "fn::secret": hunter2-old }
  db:
    type: aws:rds/instance:Instance
    properties: { engine: pg14, size: small }
    options: { replaceOnChanges: [engine] }
  logs:
    type: aws:s3/bucket:Bucket
    properties: { name: shop-logs }
"#;

const V2: &str = r#"
name: shop
resources:
  site:
    type: aws:s3/bucket:Bucket
    properties:
      name: shop-site
      website: { index: home.html }
      tags: { team: web }
      password: { "fn::secret": hunter2-new }
  db:
    type: aws:rds/instance:Instance
    properties: { engine: pg15, size: small }
    options: { replaceOnChanges: [engine] }
  cdn:
    type: aws:cloudfront:Distribution
    properties: { origin: "${site.websiteEndpoint}" }
"#;

fn keel() -> Keel {
    let mut k = Keel::new();
    k.passphrase = Some("diff passphrase".into());
    k
}

fn no_plaintext_secret(text: &str) {
    assert!(!text.contains("hunter2"), "a plaintext secret in:\n{text}");
}

/// The `step-started` event of resource `name`.
fn started<'a>(events: &'a [Value], name: &str) -> &'a Value {
    events
        .iter()
        .find(|e| {
            e["event"] == "step-started"
                && e["urn"]
                    .as_str()
                    .is_some_and(|u| u.ends_with(&format!("::{name}")))
        })
        .unwrap_or_else(|| panic!("no step of {name}"))
}

#[test]
fn preview_and_up_show_property_diffs_with_secrets_masked() {
    let k = keel();
    let v1 = k.write("v1.yaml", V1);
    let v2 = k.write("v2.yaml", V2);
    k.ok(&["up", "--yes", "--program", &v1]);

    let (out, err) = k.expect(0, &["preview", "--diff", "--program", &v2]);
    for line in [
        "    ~ website.index: \"index.html\" => \"home.html\"",
        "    - tags.env: \"dev\"",
        "    + tags.team: \"web\"",
        "    ~ password: \"[secret]\" => \"[secret]\"",
        "    ~ engine: \"pg14\" => \"pg15\" (replace)",
        "    - name: \"shop-logs\"",
    ] {
        assert!(out.lines().any(|l| l == line), "`{line}` in:\n{out}");
    }
    assert!(out.contains("    + origin: \"site-"), "{out}");
    // Unchanged keys are not listed.
    assert!(!out.contains("size"), "{out}");
    assert!(!out.contains("name: \"shop-site\""), "{out}");
    no_plaintext_secret(&out);
    no_plaintext_secret(&err);
    // The diff follows its step's line.
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("update") && l.contains("::site "))
        .expect("the update line");
    assert!(lines[at + 1].starts_with("    "), "{out}");

    // Without --diff: no value lines.
    let out = k.ok(&["preview", "--program", &v2]);
    assert!(!out.contains(" => "), "{out}");

    // --json: the keys, no values.
    let out = k.ok(&["preview", "--json", "--program", &v2]);
    let ev = events(&out);
    let site = started(&ev, "site");
    assert_eq!(site["kind"], "update");
    assert_eq!(
        site["diffs"],
        serde_json::json!(["password", "tags", "website"])
    );
    assert!(site.get("replaces").is_none() && site.get("detailedDiff").is_none());
    let db = started(&ev, "db");
    assert_eq!(db["kind"], "create-replacement");
    assert_eq!(db["diffs"], serde_json::json!(["engine"]));
    assert_eq!(db["replaces"], serde_json::json!(["engine"]));

    // up --diff --json: the values, masked.
    let out = k.ok(&["up", "--yes", "--diff", "--json", "--program", &v2]);
    no_plaintext_secret(&out);
    let ev = events(&out);
    let detailed = &started(&ev, "site")["detailedDiff"];
    let change = |path: &str| {
        detailed
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == path)
            .unwrap_or_else(|| panic!("{path} in {detailed}"))
            .clone()
    };
    assert_eq!(
        change("website.index"),
        serde_json::json!({"path": "website.index", "kind": "update", "old": "index.html", "new": "home.html"})
    );
    assert_eq!(change("password")["new"], "[secret]");
    assert_eq!(
        started(&ev, "db")["detailedDiff"][0],
        serde_json::json!({"path": "engine", "kind": "update", "replace": true, "old": "pg14", "new": "pg15"})
    );
    // A step with nothing changed carries no diff.
    let out = k.ok(&["preview", "--diff", "--json", "--program", &v2]);
    assert!(
        events(&out)
            .iter()
            .filter(|e| e["event"] == "step-started")
            .all(|e| e.get("diffs").is_none() && e.get("detailedDiff").is_none()),
        "{out}"
    );
}
