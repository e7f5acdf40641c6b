//! `keel state delete|protect|unprotect|rename|move|repair|edit` end to
//! end, as a new user runs them: on the example site's stack, with the
//! error paths (unknown URN, protected resource, dependents, locked stack,
//! a bad edited file, no `--yes` without a terminal) changing nothing.

mod common;

use common::cli::*;
use serde_json::Value;

/// A stack `dev` holding the example site; returns the harness and the
/// URNs by resource name.
fn site() -> (Keel, std::collections::BTreeMap<String, String>) {
    let k = Keel::new();
    k.ok(&["up", "--program", &example("site-v1.yaml")]);
    let urns = k
        .urns()
        .into_keys()
        .map(|u| (u.rsplit("::").next().unwrap_or_default().to_owned(), u))
        .collect();
    (k, urns)
}

fn names(k: &Keel, stack: &str) -> Vec<String> {
    let v: Value =
        serde_json::from_str(&k.ok(&["stack", "export", "--stack", stack])).expect("export JSON");
    v["deployment"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| {
            r["urn"]
                .as_str()
                .unwrap_or_default()
                .rsplit("::")
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

fn backup(k: &Keel, stack: &str) -> std::path::PathBuf {
    k.backend()
        .join("stacks")
        .join(stack)
        .join("checkpoint.json.bak")
}

#[test]
fn delete_refuses_unknown_dependents_and_unconfirmed_then_deletes() {
    let (k, urns) = site();
    let before = k.files();
    let (_, err) = k.expect(
        2,
        &[
            "state",
            "delete",
            "urn:pulumi:dev::site::a:b:C::nope",
            "--yes",
        ],
    );
    assert!(err.contains("no resource of stack `dev`"), "{err}");
    let (_, err) = k.expect(2, &["state", "delete", &urns["assets"], "--yes"]);
    assert!(
        err.contains("depend on it") && err.contains("--target-dependents"),
        "{err}"
    );
    assert!(
        err.contains(&urns["policy"]) && err.contains(&urns["cdn"]),
        "{err}"
    );
    // No terminal to confirm on, and no --yes.
    let (_, err) = k.expect(2, &["state", "delete", &urns["cdn"]]);
    assert!(err.contains("--yes"), "{err}");
    k.expect(
        2,
        &["state", "delete", &urns["cdn"], "--stack", "nope", "--yes"],
    );
    assert!(k.files() == before, "refused edits write nothing");

    let out = k.ok(&[
        "state",
        "delete",
        &urns["assets"],
        "--target-dependents",
        "--yes",
    ]);
    assert_eq!(out.lines().count(), 3, "{out}");
    let left = names(&k, "dev");
    for gone in ["assets", "policy", "cdn"] {
        assert!(!left.contains(&gone.to_owned()), "{left:?}");
    }
    assert!(left.contains(&"logs".to_owned()), "{left:?}");
    k.ok(&["state", "verify"]);
    assert_eq!(k.cloud().len(), 4, "the cloud's objects are left alone");
    let bak: Value = serde_json::from_slice(&std::fs::read(backup(&k, "dev")).unwrap()).unwrap();
    assert_eq!(
        bak["deployment"]["resources"].as_array().unwrap().len(),
        7,
        "the backup holds the state replaced"
    );
}

#[test]
fn protect_blocks_delete_until_forced_or_unprotected() {
    let (k, urns) = site();
    k.expect(
        2,
        &[
            "state",
            "protect",
            "urn:pulumi:dev::site::a:b:C::nope",
            "--yes",
        ],
    );
    let out = k.ok(&[
        "state",
        "protect",
        &urns["cdn"],
        &urns["logs"],
        "--yes",
        "--json",
    ]);
    let j: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["protected"].as_array().unwrap().len(), 2, "{out}");
    assert_eq!(k.resources()[&urns["cdn"]]["protect"], Value::Bool(true));
    let before = k.files();
    let (_, err) = k.expect(2, &["state", "delete", &urns["cdn"], "--yes"]);
    assert!(
        err.contains("is protected") && err.contains("--force"),
        "{err}"
    );
    assert!(k.files() == before);

    k.ok(&["state", "delete", &urns["cdn"], "--force", "--yes"]);
    let (_, err) = k.expect(2, &["state", "delete", "--all", "--yes"]);
    assert!(
        err.contains(&urns["logs"]) && err.contains("--force"),
        "{err}"
    );
    k.ok(&["state", "unprotect", "--all", "--yes"]);
    assert_eq!(
        k.resources()[&urns["logs"]].get("protect"),
        Some(&Value::Bool(false))
    );
    let out = k.ok(&["state", "unprotect", &urns["logs"], "--yes"]);
    assert!(out.contains("nothing to change"), "{out}");
    k.ok(&["state", "verify"]);
    let out = k.ok(&["state", "delete", "--all", "--yes"]);
    assert_eq!(out.lines().count(), 6, "{out}");
    assert!(k.resources().is_empty());
    assert_eq!(k.cloud().len(), 4, "the cloud's objects are left alone");
}

#[test]
fn rename_makes_references_follow() {
    let (k, urns) = site();
    let (_, err) = k.expect(2, &["state", "rename", &urns["assets"], "logs", "--yes"]);
    assert!(err.contains("already exists"), "{err}");
    let out = k.ok(&[
        "state",
        "rename",
        &urns["assets"],
        "static",
        "--yes",
        "--json",
    ]);
    let new = urns["assets"].replace("::assets", "::static");
    let j: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j["to"], Value::from(new.clone()), "{out}");
    let r = k.resources();
    assert!(!r.contains_key(&urns["assets"]));
    let cdn = &r[&urns["cdn"]];
    assert!(cdn["dependencies"]
        .as_array()
        .unwrap()
        .contains(&Value::from(new.clone())));
    assert_eq!(
        cdn["propertyDependencies"]["origin"],
        Value::from(vec![new.clone()])
    );
    assert_eq!(
        r[&urns["policy"]]["parent"],
        Value::from(urns["site"].clone())
    );
    k.ok(&["state", "verify"]);
}

#[test]
fn a_locked_stack_is_refused_at_once() {
    let (k, urns) = site();
    let held = keel::persist::backend::Backend::new(k.backend())
        .open("dev", "cli test holding the lock")
        .expect("open the stack");
    let before = k.files();
    for args in [
        vec!["state", "delete", urns["cdn"].as_str(), "--yes"],
        vec!["state", "protect", urns["cdn"].as_str(), "--yes"],
        vec!["state", "rename", urns["cdn"].as_str(), "x", "--yes"],
        vec!["state", "repair", "--yes"],
        vec![
            "state",
            "move",
            "--source",
            "dev",
            "--dest",
            "prod",
            urns["cdn"].as_str(),
            "--yes",
        ],
    ] {
        let (_, err) = k.expect(1, &args);
        assert!(
            err.contains("locked by another operation"),
            "{args:?}: {err}"
        );
    }
    assert!(k.files() == before, "nothing changed");
    drop(held);
}

#[test]
fn repair_reorders_and_prunes_with_a_dry_run_first() {
    let (k, urns) = site();
    let out = k.ok(&["state", "repair", "--yes"]);
    assert!(out.contains("already valid"), "{out}");
    // Damage the base checkpoint as a bad hand edit would: the CDN first,
    // a dependency on a resource that is gone.
    let base = k.backend().join("stacks/dev/checkpoint.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&base).unwrap()).unwrap();
    let list = v["deployment"]["resources"].as_array_mut().unwrap();
    let i = list
        .iter()
        .position(|r| r["urn"] == urns["cdn"].as_str())
        .unwrap();
    let mut cdn = list.remove(i);
    cdn["dependencies"]
        .as_array_mut()
        .unwrap()
        .push(Value::from("urn:pulumi:dev::site::a:b:C::gone"));
    list.insert(1, cdn);
    std::fs::write(&base, serde_json::to_vec(&v).unwrap()).unwrap();
    k.expect(1, &["state", "verify"]);

    let before = k.files();
    let out = k.ok(&["state", "repair", "--dry-run", "--json"]);
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["dryRun"], Value::Bool(true));
    assert_eq!(report["pruned"].as_array().unwrap().len(), 1, "{report}");
    assert!(
        !report["reordered"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert!(k.files() == before, "a dry run writes nothing");
    k.expect(2, &["state", "repair"]);
    assert!(k.files() == before);

    let out = k.ok(&["state", "repair", "--yes"]);
    assert!(out.contains("state repaired"), "{out}");
    k.ok(&["state", "verify"]);
    assert_eq!(k.resources().len(), 7);
    // The program's next run finds everything as it was.
    let (out, _) = k.expect(
        0,
        &["preview", "--program", &example("site-v1.yaml"), "--json"],
    );
    all_same(&out);
}

#[test]
fn edit_writes_a_verified_edit_and_refuses_bad_ones() {
    let (k, urns) = site();
    let before = k.files();
    let with_editor = |editor: &str, args: &[&str]| {
        let o = k
            .command(args)
            .env("EDITOR", editor)
            .env_remove("VISUAL")
            .output()
            .unwrap();
        (o.status.code(), text(&o.stdout), text(&o.stderr))
    };
    // Not JSON any more: nothing written.
    let (code, _, err) = with_editor("sed -i 1d", &["state", "edit", "--yes"]);
    assert_eq!(code, Some(2), "{err}");
    // Another stack's URNs.
    let (code, _, err) = with_editor(
        "sed -i s/urn:pulumi:dev::/urn:pulumi:other::/",
        &["state", "edit", "--yes"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("stack `other`"), "{err}");
    // The component renamed behind its children's back: the integrity
    // check refuses it.
    let (code, _, err) = with_editor(
        "sed -i 0,/::site\"/s//::gone\"/",
        &["state", "edit", "--yes"],
    );
    assert_eq!(code, Some(2), "{err}");
    // The editor fails.
    let (code, _, _) = with_editor("false", &["state", "edit", "--yes"]);
    assert_eq!(code, Some(2));
    assert!(k.files() == before, "refused edits write nothing");

    let (code, out, err) = with_editor(
        "sed -i s/PriceClass_100/PriceClass_All/",
        &["state", "edit", "--yes"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("~ {}", urns["cdn"])), "{out}");
    assert_eq!(
        k.resources()[&urns["cdn"]]["inputs"]["priceClass"],
        Value::from("PriceClass_All")
    );
    let (code, out, _) = with_editor("true", &["state", "edit"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("no changes"), "{out}");
}

#[test]
fn move_takes_children_copies_the_provider_and_drops_cut_references() {
    let (k, urns) = site();
    let (_, err) = k.expect(
        2,
        &[
            "state",
            "move",
            "--source",
            "dev",
            "--dest",
            "dev",
            &urns["site"],
            "--yes",
        ],
    );
    assert!(err.contains("both `dev`"), "{err}");
    k.expect(
        2,
        &[
            "state",
            "move",
            "--source",
            "nope",
            "--dest",
            "prod",
            &urns["site"],
            "--yes",
        ],
    );
    let provider = k
        .urns()
        .into_keys()
        .find(|u| u.contains("pulumi:providers:"))
        .unwrap();
    let (_, err) = k.expect(
        2,
        &[
            "state", "move", "--source", "dev", "--dest", "prod", &provider, "--yes",
        ],
    );
    assert!(err.contains("is a provider"), "{err}");

    let out = k.ok(&[
        "state",
        "move",
        "--source",
        "dev",
        "--dest",
        "prod",
        &urns["site"],
        "--yes",
        "--json",
    ]);
    let report: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(report["moved"].as_array().unwrap().len(), 4, "{report}");
    assert_eq!(report["providersCopied"].as_array().unwrap().len(), 1);
    assert!(!report["brokenInSource"].as_array().unwrap().is_empty());
    let dev = names(&k, "dev");
    assert_eq!(dev.len(), 3, "{dev:?}");
    assert!(dev.contains(&"cdn".to_owned()));
    let prod = names(&k, "prod");
    assert_eq!(prod.len(), 6, "{prod:?}");
    k.ok(&["state", "verify", "--stack", "dev"]);
    k.ok(&["state", "verify", "--stack", "prod"]);
    let v: Value = serde_json::from_str(&k.ok(&["stack", "export", "--stack", "prod"])).unwrap();
    for r in v["deployment"]["resources"].as_array().unwrap() {
        assert!(r["urn"]
            .as_str()
            .unwrap()
            .starts_with("urn:pulumi:prod::site::"));
    }
    // The CDN follows: the provider copied before is used as it is.
    let out = k.ok(&[
        "state",
        "move",
        "--source",
        "dev",
        "--dest",
        "prod",
        &urns["cdn"],
        "--yes",
    ]);
    assert!(
        out.contains("moved") && !out.contains("copied provider"),
        "{out}"
    );
    assert_eq!(names(&k, "prod").len(), 7);
    k.ok(&["state", "verify", "--stack", "prod"]);
}

#[test]
fn secrets_stay_encrypted_through_edits_and_moves() {
    let mut k = Keel::new();
    k.passphrase = Some("s3cure".into());
    let program = k.write(
        "vault.yaml",
        "name: vault\nresources:\n  db:\n    type: \"aws:rds:Instance\"\n    properties: { password: { \"fn::secret\": \"pa55-w0rd-xyz\" }, size: 1 }\n  other:\n    type: \"aws:s3/bucket:Bucket\"\n    properties: { name: o }\n",
    );
    k.ok(&["up", "--program", &program]);
    let db = k.urns().into_keys().find(|u| u.ends_with("::db")).unwrap();
    let other = db.replace("aws:rds:Instance::db", "aws:s3/bucket:Bucket::other");
    let plain = |k: &Keel| {
        let mut all = String::new();
        for (_, bytes) in k.files() {
            all.push_str(&String::from_utf8_lossy(&bytes));
        }
        all.contains("pa55-w0rd-xyz")
    };
    // Surgery needs no passphrase and writes no plaintext.
    k.passphrase = None;
    k.ok(&["state", "rename", &other, "renamed", "--yes"]);
    let o = k
        .command(&["state", "edit", "--yes"])
        .env("EDITOR", "sed -i s/\"size\":\\s*1/\"size\":2/")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        k.resources()[&db]["inputs"]["size"] == 2,
        "the edit was written"
    );
    assert!(!plain(&k));
    k.ok(&[
        "state", "move", "--source", "dev", "--dest", "prod", &db, "--yes",
    ]);
    assert!(!plain(&k));
    k.passphrase = Some("s3cure".into());
    // The moved secret decrypts in its new stack with the same passphrase.
    let shown = k.ok(&["stack", "export", "--stack", "prod", "--show-secrets"]);
    assert!(shown.contains("pa55-w0rd-xyz"), "{shown}");
    k.ok(&["state", "verify", "--stack", "prod"]);
}

#[test]
fn an_edit_adding_a_plaintext_secret_is_encrypted_or_refused() {
    let (mut k, urns) = site();
    let mut state = k.export();
    for r in state["deployment"]["resources"].as_array_mut().unwrap() {
        if r["urn"] == urns["cdn"].as_str() {
            r["inputs"]["priceClass"] = serde_json::json!({
                "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
                "plaintext": "\"Top-Secret-Class\"",
            });
        }
    }
    let edited = k.write("edited.json", &state.to_string());
    let editor = format!("cp {edited}");
    let before = k.files();
    let o = k
        .command(&["state", "edit", "--yes"])
        .env("EDITOR", &editor)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("plaintext secrets"),
        "{}",
        text(&o.stderr)
    );
    assert!(k.files() == before, "nothing written");

    k.passphrase = Some("s3cure".into());
    let o = k
        .command(&["state", "edit", "--yes"])
        .env("EDITOR", &editor)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    for (path, bytes) in k.files() {
        assert!(
            !String::from_utf8_lossy(&bytes).contains("Top-Secret-Class"),
            "plaintext in {}",
            path.display()
        );
    }
    let shown = k.ok(&["stack", "export", "--show-secrets"]);
    assert!(shown.contains("Top-Secret-Class"));
    k.ok(&["state", "verify"]);
}
