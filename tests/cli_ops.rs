//! The `keel` binary end to end, in temporary directories: the operations
//! on the example programs, `--json` events, export/import, state verify,
//! the stack lock, failures, and flags not supported yet.

mod common;

use common::cli::*;
use std::process::Command;

use serde_json::Value;

#[test]
fn lifecycle_up_preview_update_refresh_destroy() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    let v2 = example("site-v2.yaml");

    // Plain output (not a terminal): one line per finished step, a summary
    // table and the outputs.
    let out = k.ok(&["up", "--program", &v1]);
    let step_lines = out.lines().filter(|l| l.starts_with("create ")).count();
    assert_eq!(step_lines, 7, "{out}");
    assert!(out.contains("update succeeded"), "{out}");
    assert!(
        out.contains("Outputs:") && out.contains("url: https://cdn-"),
        "{out}"
    );
    assert_eq!(k.cloud().len(), 4);
    let state = k.export();
    let cdn = resource(&state, "cdn");
    let assets = resource(&state, "assets");
    assert_eq!(
        cdn["inputs"]["origin"], assets["outputs"]["websiteEndpoint"],
        "the reference resolved to the bucket's output"
    );
    assert!(cdn["dependencies"]
        .as_array()
        .unwrap()
        .contains(&assets["urn"]));
    assert_eq!(
        cdn["propertyDependencies"]["origin"],
        Value::Array(vec![assets["urn"].clone()])
    );

    let tree = k.ok(&["state", "show"]);
    assert!(tree.contains("├─ site:web:Site  site"), "{tree}");
    assert!(
        tree.contains("│  ├─ aws:s3/bucket:Bucket  assets"),
        "{tree}"
    );

    // Preview v2: one update, one renamed child (same), nothing written.
    let before = k.files();
    let (out, _) = k.expect(0, &["preview", "--program", &v2, "--json"]);
    assert_eq!(summary_steps(&out), counts(&[("same", 6), ("update", 1)]));
    assert_eq!(k.files(), before, "a preview changes nothing");

    // Up v2 with --json.
    let logs_id = resource(&k.export(), "logs")["id"].clone();
    let (out, _) = k.expect(0, &["up", "--program", &v2, "--json"]);
    let s = summary(&out);
    assert_eq!(s["result"], "succeeded");
    assert_eq!(steps_of(&s), counts(&[("same", 6), ("update", 1)]));
    let state = k.export();
    assert_eq!(
        resource(&state, "access-logs")["id"],
        logs_id,
        "the alias kept the object"
    );
    assert_eq!(
        resource(&state, "cdn")["inputs"]["priceClass"],
        "PriceClass_All"
    );
    assert_eq!(k.cloud().len(), 4);

    // Refresh: every custom resource read back.
    let (out, _) = k.expect(0, &["refresh", "--yes", "--json"]);
    assert_eq!(summary_steps(&out), counts(&[("refresh", 4)]));

    // Destroy: everything deleted, the cloud empty.
    let out = k.ok(&["destroy", "--yes"]);
    assert!(out.contains("destroy succeeded"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["delete", "7"]),
        "{out}"
    );
    assert!(k.cloud().is_empty());
    assert!(k.ok(&["state", "show"]).contains("has no resources"));

    // Refresh and destroy never make a stack.
    let (_, err) = k.expect(2, &["destroy", "--stack", "nope"]);
    assert!(err.contains("no stack `nope`"), "{err}");
    k.expect(2, &["refresh", "--stack", "nope"]);
    assert!(!k.backend().join("stacks/nope").exists());
}

/// Renaming `logs` (v1) to `access-logs` (v2) with an alias while `cdn`
/// depends on it: every intermediate state must keep `cdn`'s dependency
/// valid, so the update works with checkpoint persistence and a failed
/// `cdn` update leaves a stack that still loads.
#[test]
fn alias_rename_keeps_dependents_valid() {
    let k = Keel::new();
    let (v1, v2) = (example("site-v1.yaml"), example("site-v2.yaml"));
    k.ok(&["up", "--program", &v1]);
    k.ok(&["up", "--program", &v2, "--persistence", "checkpoint"]);
    k.ok(&["state", "verify"]);

    let k = Keel::new();
    k.ok(&["up", "--program", &v1]);
    k.expect(1, &["up", "--program", &v2, "--sim-fail", "cdn"]);
    k.ok(&["state", "verify"]);
}

#[test]
fn json_events_are_engine_events_one_per_line() {
    let k = Keel::new();
    let (out, _) = k.expect(0, &["up", "--program", &example("site-v1.yaml"), "--json"]);
    let ev = events(&out);
    let s = summary(&out);
    assert_eq!(s["result"], "succeeded");
    assert_eq!(steps_of(&s), counts(&[("create", 7)]));
    let started = ev.iter().filter(|e| e["event"] == "step-started").count();
    let finished: Vec<&Value> = ev
        .iter()
        .filter(|e| e["event"] == "step-finished")
        .collect();
    assert_eq!((started, finished.len()), (7, 7));
    for e in &finished {
        assert_eq!(e["kind"], "create");
        assert!(e["urn"]
            .as_str()
            .unwrap()
            .starts_with("urn:pulumi:dev::site::"));
        assert!(e["durationMs"].is_number());
    }
    assert_eq!(
        ev.iter().filter(|e| e["event"] == "summary").count(),
        1,
        "exactly one summary, last"
    );
}

#[test]
fn export_import_round_trip() {
    let k = Keel::new();
    k.ok(&["up", "--program", &example("site-v1.yaml")]);
    let exported = k.ok(&["stack", "export"]);
    let file = k.path().join("dev.json");
    k.ok(&["stack", "export", "--file", file.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), exported);
    let v: Value = serde_json::from_str(&exported).unwrap();
    assert_eq!(v["version"], 3);
    assert!(
        v.get("keelJournalSeq").is_none(),
        "no backend watermark in an export"
    );
    assert_eq!(v["deployment"]["resources"].as_array().unwrap().len(), 7);

    // Replace the state with something else, then import the export back.
    k.ok(&["up", "--program", &example("site-v2.yaml")]);
    assert_ne!(k.ok(&["stack", "export"]), exported);
    let (_, err) = k.expect(0, &["stack", "import", "--file", file.to_str().unwrap()]);
    assert!(err.contains("imported 7 resources"), "{err}");
    assert_eq!(k.ok(&["stack", "export"]), exported);
    k.ok(&["state", "verify"]);

    // The imported state drives the next operation.
    let (out, _) = k.expect(
        0,
        &["preview", "--program", &example("site-v1.yaml"), "--json"],
    );
    assert_eq!(summary_steps(&out), counts(&[("same", 7)]));

    // Another stack's export is refused.
    let (_, err) = k.expect(
        2,
        &[
            "stack",
            "import",
            "--stack",
            "prod",
            "--file",
            file.to_str().unwrap(),
        ],
    );
    assert!(err.contains("belong to stack `dev`, not `prod`"), "{err}");
}

#[test]
fn state_verify_good_and_corrupted() {
    let k = Keel::new();
    k.ok(&["up", "--program", &example("site-v1.yaml")]);
    assert!(k
        .ok(&["state", "verify"])
        .contains("stack `dev`: ok (7 resources"));
    let good = k.path().join("good.json");
    k.ok(&["stack", "export", "--file", good.to_str().unwrap()]);
    assert!(k
        .ok(&["state", "verify", "--file", good.to_str().unwrap()])
        .contains("ok"));

    // A child whose parent is missing.
    let mut v: Value = serde_json::from_slice(&std::fs::read(&good).unwrap()).unwrap();
    let child = v["deployment"]["resources"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["urn"].as_str().unwrap().ends_with("::assets"))
        .unwrap();
    child["parent"] = "urn:pulumi:dev::site::site:web:Site::gone".into();
    let orphan = k.path().join("orphan.json");
    std::fs::write(&orphan, serde_json::to_vec(&v).unwrap()).unwrap();
    let (_, err) = k.expect(1, &["state", "verify", "--file", orphan.to_str().unwrap()]);
    assert!(
        err.contains("integrity check failed") && err.contains("missing parent"),
        "{err}"
    );

    // A truncated file.
    let bytes = std::fs::read(&good).unwrap();
    let truncated = k.path().join("truncated.json");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let (_, err) = k.expect(
        1,
        &["state", "verify", "--file", truncated.to_str().unwrap()],
    );
    assert!(err.contains("truncated"), "{err}");

    // Importing a corrupted file is refused before anything changes.
    let before = k.files();
    let (_, err) = k.expect(2, &["stack", "import", "--file", orphan.to_str().unwrap()]);
    assert!(err.contains("missing parent"), "{err}");
    assert_eq!(k.files(), before);

    // A corrupted stack in the backend.
    let base = k.backend().join("stacks/dev/checkpoint.json");
    std::fs::write(&base, serde_json::to_vec(&v).unwrap()).unwrap();
    let (_, err) = k.expect(1, &["state", "verify"]);
    assert!(
        err.contains("stack `dev`") && err.contains("missing parent"),
        "{err}"
    );

    // A missing file is bad input.
    k.expect(2, &["state", "verify", "--file", "nope.json"]);
    k.expect(2, &["state", "verify", "--stack", "nope"]);
}

#[test]
fn second_up_fails_at_once_while_the_stack_is_locked() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    k.ok(&["up", "--program", &v1]);
    let held = keel::persist::backend::Backend::new(k.backend())
        .open("dev", "cli test holding the lock")
        .expect("open the stack");
    let before = k.files();
    // The lock stays held until the end of this test: a second operation
    // that waited for it would never return.
    let (_, err) = k.expect(1, &["up", "--program", &v1]);
    assert!(err.contains("locked by another operation"), "{err}");
    assert!(err.contains("cli test holding the lock"), "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    assert_eq!(k.files(), before, "nothing changed");
    drop(held);
    k.ok(&["up", "--program", &v1]);
}

#[test]
fn failed_step_exits_1_naming_the_resource() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    let (out, err) = k.expect(1, &["up", "--program", &v1, "--sim-fail", "assets"]);
    assert!(err.contains("the update failed"), "{err}");
    assert!(
        err.contains("create of urn:pulumi:dev::site::site:web:Site$aws:s3/bucket:Bucket::assets failed: injected failure (sim)"),
        "{err}"
    );
    assert!(out.contains("update failed"), "{out}");
    // What was created is in the state; the next run finishes the job.
    let state = k.export();
    resource(&state, "logs");
    let (out, _) = k.expect(0, &["up", "--program", &v1, "--json"]);
    let s = summary_steps(&out);
    assert_eq!(s.get("create"), Some(&3), "{s:?}");

    // --json still ends with the summary when the operation fails.
    let (out, _) = k.expect(1, &["destroy", "--json", "--sim-fail", "cdn"]);
    let s = summary(&out);
    assert_eq!(s["result"], "failed");
    assert_eq!(s["failures"][0]["kind"], "delete");
}

#[test]
fn flags_not_supported_yet_exit_2_and_change_nothing() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    let u = "urn:pulumi:dev::site::aws:cloudfront:Distribution::cdn";
    let cases: &[(&[&str], &str)] = &[
        (
            &["refresh", "--exclude", u],
            "--exclude is not supported yet",
        ),
        (
            &["up", "--program", &v1, "--target", "not-a-urn"],
            "--target not-a-urn: names no declaration",
        ),
        (
            &["up", "--program", &v1, "--target", "not[a-urn"],
            "--target: `not[a-urn` is not an address",
        ),
        (
            &["up", "--program", &v1, "--plan", "missing.json"],
            "missing.json",
        ),
    ];
    for (args, message) in cases {
        let (_, err) = k.expect(2, args);
        assert!(err.contains(message), "{args:?}: {err}");
    }
    assert!(!k.backend().exists(), "nothing was created");
    // Usage errors are status 2 too.
    k.expect(2, &["up"]);
    k.expect(2, &["frobnicate"]);
    k.expect(2, &["up", "--program", &v1, "--parallel", "0"]);
    k.expect(2, &["up", "--program", &v1, "--sim-fail-rate", "2"]);
    k.expect(2, &["up", "--program", &v1, "--stack", "a/b"]);
    assert!(!k.backend().exists());
    let (help, _) = k.expect(0, &["--help"]);
    assert!(help.contains("Examples:"), "{help}");
}

#[test]
fn backend_from_flag_and_environment_and_persistence_kinds() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    let elsewhere = k.path().join("elsewhere");
    let o = Command::new(env!("CARGO_BIN_EXE_keel"))
        .current_dir(k.path())
        .env("KEEL_BACKEND", &elsewhere)
        .args([
            "up",
            "--program",
            &v1,
            "--stack",
            "prod",
            "--persistence",
            "checkpoint",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(elsewhere.join("stacks/prod/checkpoint.json").is_file());
    assert!(elsewhere.join("cloud.json").is_file());
    assert!(!k.backend().exists());
    let flag = elsewhere.display().to_string();
    let out = k.ok(&[
        "--backend",
        &flag,
        "state",
        "show",
        "--stack",
        "prod",
        "--json",
    ]);
    let tree: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(tree[0]["type"], "pulumi:pulumi:Stack");
    let site = tree[0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "site")
        .expect("site under the stack");
    assert_eq!(site["children"].as_array().unwrap().len(), 3);
    let objects = k.ok(&["cloud", "list", "--json", "--backend", &flag]);
    let objects: Value = serde_json::from_str(&objects).unwrap();
    for o in objects.as_array().unwrap() {
        for key in ["id", "type", "name", "properties"] {
            assert!(o.get(key).is_some(), "{o}");
        }
    }
    assert_eq!(objects.as_array().unwrap().len(), 4);
}

#[test]
fn targets_replace_and_saved_plans_through_the_cli() {
    let k = Keel::new();
    let (v1, v2) = (example("site-v1.yaml"), example("site-v2.yaml"));
    k.ok(&["up", "--program", &v1]);
    let before = k.cloud();
    let cdn = "urn:pulumi:dev::site::aws:cloudfront:Distribution::cdn";
    // A targeted update touching only `cdn`: the rename of `logs` in v2
    // is outside the targets, so the prior state is kept.
    let out = k.ok(&["up", "--program", &v2, "--target", cdn, "--json"]);
    let s = summary_steps(&out);
    assert_eq!(s.get("update"), Some(&1), "{s:?}");
    assert_eq!(k.cloud().len(), before.len());
    // A saved plan: the previewed program runs, a deviating one does not.
    let plan = k.path().join("plan.json");
    let plan = plan.to_str().unwrap();
    k.ok(&["preview", "--program", &v2, "--save-plan", plan]);
    let saved: Value = serde_json::from_slice(&std::fs::read(plan).unwrap()).unwrap();
    assert_eq!(saved["version"], 1);
    let (_, err) = k.expect(1, &["up", "--program", &v1, "--plan", plan]);
    assert!(err.contains("deviates from the plan"), "{err}");
    k.ok(&["up", "--program", &v2, "--plan", plan]);
    // --refresh first reconciles: an object deleted outside keel is
    // recreated by the update that follows.
    let assets = k
        .cloud()
        .iter()
        .find(|o| o["name"] == "assets")
        .map(|o| o["id"].clone())
        .unwrap();
    assert!(k.sim_cloud().remove_object(assets.as_str().unwrap()));
    let out = k.ok(&["up", "--program", &v2, "--refresh", "--json"]);
    assert_eq!(summary_steps(&out).get("create"), Some(&1), "{out}");
    // --replace forces a replace: a new ID for cdn.
    let id = |cloud: &[Value]| {
        cloud
            .iter()
            .find(|o| o["name"] == "cdn")
            .map(|o| o["id"].clone())
    };
    let old = id(&k.cloud());
    k.ok(&["up", "--program", &v2, "--replace", cdn]);
    assert_ne!(id(&k.cloud()), old);
}
