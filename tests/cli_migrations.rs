//! State migrations in program files, through the `keel` binary: the
//! example programs (`examples/programs/{rename,fold,retype,split}-v1/v2`)
//! migrate without replacing anything (the cloud's objects after v2 are the
//! ones v1 made), a preview shows the migration and persists nothing, a
//! third run is a no-op; a failing, garbage-printing or slow command fails
//! the update with `callback-failed`, the end of its stderr (its secrets
//! redacted) and the state unchanged, and leaves no process behind;
//! malformed `stateMigrations` are refused with exit status 2.

mod common;

use common::cli::*;

use serde_json::Value;

/// v1 up; v2 preview (shows the migration, persists nothing); v2 up (the
/// same cloud objects, only `same` steps, the new URNs in state); v2 again
/// (no migration). Returns the migration event of the update.
fn walkthrough(name: &str, new_urns: &[&str], gone: &[&str]) -> Value {
    let k = Keel::new();
    let (v1, v2) = (
        example(&format!("{name}-v1.yaml")),
        example(&format!("{name}-v2.yaml")),
    );
    k.ok(&["up", "--yes", "--program", &v1]);
    let cloud = k.cloud();
    assert!(!cloud.is_empty());
    let ids: Vec<String> = k.urns().into_values().filter(|i| !i.is_empty()).collect();

    let files = k.files();
    let out = k.ok(&["preview", "--json", "--program", &v2]);
    let previewed = migration_events(&out);
    assert_eq!(previewed.len(), 1, "{name}: {out}");
    all_same(&out);
    assert!(k.files() == files, "{name}: the preview persisted nothing");

    let out = k.ok(&["up", "--yes", "--json", "--program", &v2]);
    let migrated = migration_events(&out);
    assert_eq!(
        migrated, previewed,
        "{name}: the preview showed this migration"
    );
    all_same(&out);
    assert_eq!(
        k.cloud(),
        cloud,
        "{name}: nothing created, deleted or changed"
    );
    let urns = k.urns();
    for u in new_urns {
        assert!(urns.contains_key(*u), "{name}: {u} not in {urns:#?}");
    }
    for g in gone {
        assert!(!urns.contains_key(*g), "{name}: {g} still in state");
    }
    let mut after: Vec<String> = urns.into_values().filter(|i| !i.is_empty()).collect();
    let mut before = ids;
    after.sort();
    after.dedup();
    before.sort();
    assert_eq!(after, before, "{name}: the same physical IDs");
    k.ok(&["state", "verify"]);

    let state = k.resources();
    let out = k.ok(&["up", "--yes", "--json", "--program", &v2]);
    assert!(
        migration_events(&out).is_empty(),
        "{name}: idempotent: {out}"
    );
    all_same(&out);
    assert_eq!(k.resources(), state);
    migrated.into_iter().next().unwrap_or_default()
}

const SITE: &str = "urn:pulumi:dev::shop::shop:web:Site";

#[test]
fn rename_example_renames_a_child() {
    let m = walkthrough(
        "rename",
        &[
            &format!("{SITE}$aws:s3/bucket:Bucket::assets"),
            &format!("{SITE}$aws:s3/bucket:Bucket$aws:s3/bucketPolicy:BucketPolicy::media-policy"),
        ],
        &[&format!("{SITE}$aws:s3/bucket:Bucket::media")],
    );
    assert_eq!(
        m["successors"],
        serde_json::json!({
            format!("{SITE}$aws:s3/bucket:Bucket::media"): format!("{SITE}$aws:s3/bucket:Bucket::assets")
        })
    );
}

#[test]
fn fold_example_moves_two_children_under_a_sub_component() {
    let app = "urn:pulumi:dev::shop::shop:app:App";
    let m = walkthrough(
        "fold",
        &[
            &format!("{app}$shop:app:DataTier$aws:rds/instance:Instance::db"),
            &format!("{app}$shop:app:DataTier$aws:elasticache/cluster:Cluster::cache"),
        ],
        &[
            &format!("{app}$aws:rds/instance:Instance::db"),
            &format!("{app}$aws:elasticache/cluster:Cluster::cache"),
        ],
    );
    assert_eq!(m["successors"].as_object().map(|s| s.len()), Some(2));
}

#[test]
fn retype_example_rewrites_every_urn_below_the_component() {
    let v2 = "urn:pulumi:dev::shop::shop:web:SiteV2";
    let m = walkthrough(
        "retype",
        &[
            &format!("{v2}::site"),
            &format!("{v2}$aws:s3/bucket:Bucket::bucket"),
            &format!("{v2}$aws:s3/bucket:Bucket$aws:s3/bucketPolicy:BucketPolicy::policy"),
            &format!("{v2}$aws:cloudfront:Distribution::cdn"),
        ],
        &[&format!("{SITE}::site")],
    );
    assert_eq!(m["successors"].as_object().map(|s| s.len()), Some(4));
}

#[test]
fn split_example_runs_an_external_command() {
    let settings = format!(
        "{SITE}$aws:s3/bucketWebsiteConfiguration:BucketWebsiteConfiguration::assets-website"
    );
    let m = walkthrough("split", &[&settings], &[]);
    assert_eq!(m["added"], serde_json::json!([settings]));
}

#[test]
fn split_example_drops_the_aliases_an_earlier_rename_left() {
    let k = Keel::new();
    let v1 = std::fs::read_to_string(example("split-v1.yaml")).expect("read example");
    let v0 = v1
        .replace("  assets:\n", "  old-assets:\n")
        .replace("${assets.", "${old-assets.");
    assert_ne!(v0, v1, "the example changed");
    k.ok(&["up", "--yes", "--program", &k.write("v0.yaml", &v0)]);
    let renamed = v1.replace(
        "    options:\n      parent: site\n",
        "    options:\n      parent: site\n      aliases: [{ name: old-assets }]\n",
    );
    assert_ne!(renamed, v1, "the example changed");
    k.ok(&["up", "--yes", "--program", &k.write("v1.yaml", &renamed)]);
    let bucket = resource(&k.export(), "assets").clone();
    assert!(
        bucket["aliases"].as_array().is_some_and(|a| !a.is_empty()),
        "the state records the rename's alias: {bucket}"
    );

    // The split passes the bucket through: without its aliases.
    let out = k.ok(&[
        "up",
        "--yes",
        "--json",
        "--program",
        &example("split-v2.yaml"),
    ]);
    assert_eq!(migration_events(&out).len(), 1, "{out}");
    all_same(&out);
    assert_eq!(resource(&k.export(), "assets-website")["id"], bucket["id"]);
}

/// A stack at rename-v1, and a v2 program in the temp dir whose component
/// runs `argv` (JSON) as its migration, with `extra` options.
fn failing_setup(argv: &str, extra: &str) -> (Keel, String) {
    let k = Keel::new();
    k.ok(&["up", "--yes", "--program", &example("rename-v1.yaml")]);
    let v2 = std::fs::read_to_string(example("rename-v2.yaml")).expect("read example");
    let v2 = v2.replace(
        "      stateMigrations:\n        - rename: { from: media, to: assets }\n",
        &format!("{extra}      stateMigrations:\n        - command: {argv}\n"),
    );
    assert!(v2.contains("command:"), "the example changed: {v2}");
    let path = k.write("v2.yaml", &v2);
    (k, path)
}

/// `keel up` fails with exit status 1 and `callback-failed`, the state
/// stays as it was; returns stderr.
fn fails_with_callback_failed(k: &Keel, program: &str) -> String {
    let state = k.resources();
    let cloud = k.cloud();
    let (_, stderr) = k.expect(1, &["up", "--yes", "--program", program]);
    assert!(stderr.contains("callback-failed"), "{stderr}");
    assert_eq!(k.resources(), state, "the state is unchanged");
    assert_eq!(k.cloud(), cloud);
    let (stdout, _) = k.expect(1, &["up", "--yes", "--json", "--program", program]);
    let s = summary(&stdout);
    assert_eq!(s["result"], "failed");
    assert_eq!(s["rules"], serde_json::json!(["callback-failed"]));
    assert_eq!(k.resources(), state);
    // A preview fails the same way.
    let files = k.files();
    let (_, preview_err) = k.expect(1, &["preview", "--program", program]);
    assert!(preview_err.contains("callback-failed"), "{preview_err}");
    assert!(k.files() == files);
    stderr
}

#[test]
fn a_failing_command_fails_the_update_with_its_stderr() {
    // A relative script path: it resolves in the program file's directory.
    let (k, v2) = failing_setup(r#"["sh", "migrate.sh"]"#, "");
    k.write(
        "migrate.sh",
        "cat >/dev/null\necho 'reading the state'\necho 'cannot migrate: no bucket named media' >&2\nexit 1\n",
    );
    let stderr = fails_with_callback_failed(&k, &v2);
    assert!(stderr.contains("exit status 1"), "{stderr}");
    assert!(
        stderr.contains("cannot migrate: no bucket named media"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sh migrate.sh"),
        "names the command: {stderr}"
    );
}

#[test]
fn a_command_printing_garbage_fails_the_same_way() {
    let (k, v2) = failing_setup(
        r#"["sh", "-c", "cat >/dev/null; echo 'warning: guessing' >&2; echo 'this is not JSON'"]"#,
        "",
    );
    let stderr = fails_with_callback_failed(&k, &v2);
    assert!(stderr.contains("invalid JSON"), "{stderr}");
    assert!(stderr.contains("this is not JSON"), "{stderr}");
    assert!(stderr.contains("warning: guessing"), "{stderr}");
    assert!(stderr.contains("exit status 0"), "{stderr}");
}

#[test]
fn a_command_past_its_timeout_is_killed() {
    let (k, v2) = failing_setup(
        r#"["sh", "-c", "echo 'still thinking' >&2; exec sleep 60"]"#,
        "      stateMigrationTimeout: 1\n",
    );
    let state = k.resources();
    // The message proves the deadline fired (the command sleeps 60 s).
    let (_, stderr) = k.expect(1, &["up", "--yes", "--program", &v2]);
    assert!(stderr.contains("callback-failed"), "{stderr}");
    assert!(stderr.contains("did not answer within 1s"), "{stderr}");
    assert!(stderr.contains("still thinking"), "{stderr}");
    assert_eq!(k.resources(), state);
}

#[test]
fn a_command_that_changes_nothing_lets_the_update_run() {
    let (k, v2) = failing_setup(r#"["python3", "-c", "print('null')"]"#, "");
    let state = k.resources();
    // The program renames `media` but the migration changes nothing: the
    // update plans `assets` as new and `media` as gone.
    let out = k.ok(&["preview", "--json", "--program", &v2]);
    assert!(migration_events(&out).is_empty(), "{out}");
    let steps = summary(&out)["steps"].clone();
    assert_eq!(steps["create"], 1, "{steps}");
    assert_eq!(steps["delete"], 1, "{steps}");
    assert_eq!(k.resources(), state);
}

#[test]
fn malformed_state_migrations_exit_2_before_anything_runs() {
    let k = Keel::new();
    k.ok(&["up", "--yes", "--program", &example("rename-v1.yaml")]);
    let files = k.files();
    let p = k.write(
        "bad.yaml",
        r#"
name: shop
resources:
  site:
    type: shop:web:Site
    component: true
    options:
      stateMigrationTimeout: soon
      stateMigrations:
        - move: { under: tier }
        - retype: { from: "shop:web:Site", to: "not a type" }
        - command: []
        - rename: { from: media, to: assets, also: x }
"#,
    );
    for cmd in ["up", "preview"] {
        let mut args = vec![cmd, "--program", &p];
        if cmd == "up" {
            args.insert(1, "--yes");
        }
        let (_, stderr) = k.expect(2, &args);
        for want in [
            "resource `site`, key `options.stateMigrationTimeout`: expected a positive duration",
            "resource `site`, key `options.stateMigrations[0].move`: needs `resources` and `under`",
            "resource `site`, key `options.stateMigrations[1].retype.to`: `not a type` is not a type token",
            "resource `site`, key `options.stateMigrations[2].command`: needs a non-empty argv list",
            "resource `site`, key `options.stateMigrations[3].rename.also`: unknown key",
        ] {
            assert!(stderr.contains(want), "{want} not in {stderr}");
        }
        assert!(stderr.contains("bad.yaml"), "names the file: {stderr}");
        assert!(k.files() == files, "nothing ran");
    }
}

/// A v1 program: component `c` with a child `b` whose property `secret`
/// is a secret; v2 adds the `command` migration on `c`.
fn migration_program(command: &[&str]) -> String {
    let mut c = serde_json::json!({ "type": "shop:web:Site", "component": true });
    if !command.is_empty() {
        c["options"] = serde_json::json!({
            "stateMigrations": [ { "command": command } ],
            "stateMigrationTimeout": "60s"
        });
    }
    serde_json::json!({
        "name": "site",
        "resources": {
            "c": c,
            "b": {
                "type": "aws:s3/bucket:Bucket",
                "properties": { "secret": { "fn::secret": "hunter2-plaintext" } },
                "options": { "parent": "c" }
            }
        }
    })
    .to_string()
}

/// True while `pid` is a live process (a zombie is dead).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// A stack with a passphrase, deployed from the migration program's first
/// version (no callback).
fn deployed_with_a_passphrase() -> Keel {
    let mut k = Keel::new();
    k.passphrase = Some("pw".into());
    k.ok(&[
        "up",
        "--program",
        &k.write("v1.json", &migration_program(&[])),
    ]);
    k
}

#[test]
fn a_failing_callback_leaves_no_process_behind() {
    let k = deployed_with_a_passphrase();
    let pid_file = k.path().join("grandchild.pid");
    let script = format!("sleep 1000 & echo $! > '{}'; exit 1", pid_file.display());
    let v2 = k.write("v2.json", &migration_program(&["sh", "-c", &script]));
    let before = k.resources();
    let (_, err) = k.expect(1, &["up", "--program", &v2]);
    assert!(err.contains("callback-failed"), "{err}");
    assert!(k.resources() == before, "the state is unchanged");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("the grandchild's pid")
        .trim()
        .parse()
        .expect("a pid");
    // A killed process can take a moment to be reaped; one that nobody
    // killed sleeps on.
    let gone = (0..100).any(|_| {
        if alive(pid) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            false
        } else {
            true
        }
    });
    if !gone {
        // Our own leftover: end it, then fail.
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    assert!(gone, "the callback's child {pid} outlived keel");
}

#[test]
fn a_failing_callback_quotes_no_secret() {
    let k = deployed_with_a_passphrase();
    // Echoes its input (with the decrypted secret) to stderr and fails.
    let v2 = k.write(
        "v2.json",
        &migration_program(&["sh", "-c", "cat >&2; exit 1"]),
    );
    for json in [false, true] {
        let mut args = vec!["up", "--program", &v2];
        if json {
            args.push("--json");
        }
        let (out, err) = k.expect(1, &args);
        assert!(err.contains("callback-failed"), "{err}");
        for (what, s) in [("stdout", &out), ("stderr", &err)] {
            assert!(
                !s.contains("hunter2"),
                "--json {json}: the secret on {what}:\n{s}"
            );
        }
        // The input is quoted, its secret is not.
        assert!(err.contains("oldState"), "{err}");
        assert!(err.contains("[secret]"), "{err}");
        if json {
            let summary = summary(&out);
            assert_eq!(summary["result"], "failed", "{summary}");
        }
    }
}
