//! Real or simulated, never by accident (issue 18, item 7), through the
//! `keel` binary: what served each package is chosen explicitly (the
//! `--providers` flag, the `keel:providers` setting of the stack or the
//! program), else as the stack's state records it, else simulated; it is
//! shown in the summary and recorded in the state; switching a recorded
//! package is refused; a missing plugin fails before anything runs.

mod common;

use common::cli::*;
use serde_json::Value;

const PROGRAM: &str = r#"
name: shop
resources:
  bucket: { type: "aws:s3/bucket:Bucket", properties: { name: assets } }
  suffix: { type: "random:index:RandomId", properties: { byteLength: 4 } }
"#;

/// The manifest's record: package -> `servedBy` (none: no list).
fn recorded(k: &Keel) -> Vec<(String, String)> {
    let state = k.export();
    let plugins = &state["deployment"]["manifest"]["plugins"];
    plugins
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().expect("name").to_owned(),
                e["servedBy"].as_str().expect("servedBy").to_owned(),
            )
        })
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
fn a_simulated_deployment_says_so_in_the_summary_and_the_state() {
    let k = Keel::new();
    let program = k.write("shop.yaml", PROGRAM);
    let out = k.ok(&["up", "--yes", "--program", &program]);
    assert!(
        out.contains("packages: aws (simulated: nothing real), random (simulated: nothing real)"),
        "{out}"
    );
    assert_eq!(
        recorded(&k),
        pairs(&[("aws", "simulated"), ("random", "simulated")])
    );
    let out = k.ok(&["up", "--yes", "--json", "--program", &program]);
    let served = &summary(&out)["served"];
    assert_eq!(served["aws"], "simulated", "{out}");
    assert_eq!(served["random"], "simulated", "{out}");
    // Destroyed, nothing is left to record.
    k.ok(&["destroy", "--yes"]);
    assert_eq!(recorded(&k), Vec::new());
}

#[test]
fn switching_a_recorded_package_is_refused_and_changes_nothing() {
    let k = Keel::new();
    let program = k.write("shop.yaml", PROGRAM);
    k.ok(&["up", "--yes", "--program", &program]);
    let before = k.files();

    let (_, err) = k.expect(
        2,
        &[
            "up",
            "--yes",
            "--program",
            &program,
            "--providers",
            "plugins",
        ],
    );
    assert!(
        err.contains("package `aws` of stack `dev` is recorded as served by the simulated cloud"),
        "{err}"
    );
    assert!(err.contains("--providers sim"), "{err}");
    assert!(k.files() == before, "the refused update wrote nothing");

    // The stack's setting is as explicit as the flag.
    k.write("Pulumi.dev.yaml", "config:\n  keel:providers: plugins\n");
    let (_, err) = k.expect(2, &["up", "--yes", "--program", &program]);
    assert!(err.contains("keel:providers: plugins"), "{err}");
    for op in ["refresh", "destroy"] {
        let (_, err) = k.expect(2, &[op, "--yes", "--providers", "plugins"]);
        assert!(err.contains("package `aws`"), "{op}: {err}");
    }
    assert!(k.files() == before, "nothing refused wrote anything");

    // A preview changes nothing: it warns, and previews the plugins (here
    // missing: the preview fails naming the package and where keel looked).
    let (out, err) = k.expect(1, &["preview", "--program", &program]);
    assert!(
        err.contains("this preview uses its plugin (real objects)"),
        "{out}\n{err}"
    );
    assert!(err.contains("no plugin for package `aws`"), "{err}");
    assert!(k.files() == before, "the preview wrote nothing");
}

#[test]
fn a_bad_setting_is_refused_naming_the_key() {
    let k = Keel::new();
    let program = k.write("shop.yaml", PROGRAM);
    k.write("Pulumi.dev.yaml", "config:\n  keel:providers: real\n");
    let (_, err) = k.expect(2, &["up", "--yes", "--program", &program]);
    assert!(
        err.contains("keel:providers") && err.contains("`real`"),
        "{err}"
    );
    assert!(!k.backend().join("stacks/dev/checkpoint.json").exists());
}

#[test]
fn a_missing_plugin_fails_once_before_anything_runs() {
    let k = Keel::new();
    // The program's own setting asks for plugins.
    let program = k.write(
        "shop.yaml",
        &format!("config:\n  keel:providers: plugins\n{PROGRAM}"),
    );
    let (out, err) = k.expect(1, &["up", "--yes", "--program", &program]);
    assert!(err.contains("no plugin for package `aws`"), "{err}");
    assert!(
        err.contains("PATH") && err.contains("plugin cache"),
        "{err}"
    );
    assert_eq!(err.matches("no plugin for package").count(), 1, "{err}");
    assert!(!out.contains("create"), "nothing ran: {out}");
    let files: Vec<_> = k.files().into_keys().collect();
    assert!(
        files.iter().all(|p| p.ends_with("lock")),
        "no journal or checkpoint: {files:?}"
    );
}

#[test]
fn a_stack_pulumi_deployed_is_served_by_plugins_only() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/pulumi/aws-ts-lambda-efs__stack.json");
    let k = Keel::new();
    k.ok(&[
        "stack",
        "import",
        "--stack",
        "dev",
        "--file",
        fixture.to_str().expect("path"),
    ]);
    let before = k.files();
    // Pulumi's deployments are real: the simulated cloud is refused.
    let (_, err) = k.expect(2, &["refresh", "--yes", "--providers", "sim"]);
    assert!(
        err.contains(
            "package `aws` of stack `dev` is recorded as served by its plugin (real objects)"
        ),
        "{err}"
    );
    // By default keel looks for the version the state names, once.
    let (_, err) = k.expect(1, &["destroy", "--yes"]);
    assert!(err.contains("no plugin for package `aws` v2.7.0"), "{err}");
    assert_eq!(err.matches("no plugin for package").count(), 1, "{err}");
    assert!(k.files() == before, "nothing was written");
    let state: Value = k.export();
    assert_eq!(
        state["deployment"]["resources"].as_array().map(Vec::len),
        Some(76)
    );
}
