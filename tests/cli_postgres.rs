//! The `keel` binary on the PostgreSQL backend (`--backend postgres://...`,
//! here through `KEEL_BACKEND`): the core commands, the lock between
//! processes, several stacks at once, a holder killed mid-update, the
//! server restarted mid-update, and moving stacks between backends.
//!
//! Each test has a database of its own (tests/common/pg.rs): in the server
//! `KEEL_TEST_POSTGRES` names (`.ci/run` starts one), else in a private
//! cluster; a test is skipped, saying so, only without server binaries.

mod common;

use common::cli::*;
use common::pg::Pg;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Child, Stdio};

/// A keel working directory whose backend is `pg`'s database (the
/// simulated cloud is in the database too).
fn keel_on(pg: &Pg) -> Keel {
    let mut k = Keel::new();
    k.env.push(("KEEL_BACKEND".into(), pg.url.clone()));
    k
}

/// `stack ls --json`, by name.
fn stacks(k: &Keel) -> std::collections::BTreeMap<String, Value> {
    let v: Value = serde_json::from_str(&k.ok(&["stack", "ls", "--json"])).expect("JSON");
    v.as_array()
        .expect("array")
        .iter()
        .map(|r| (r["name"].as_str().unwrap().to_owned(), r.clone()))
        .collect()
}

/// Starts a slow `keel up` (one step at a time) and returns once it has
/// shown its first finished cloud object (so it holds the lock and has
/// committed journal records).
fn slow_up(k: &Keel, program: &str, stack: &str) -> Child {
    let mut child = k
        .command(&[
            "up",
            "--program",
            program,
            "--stack",
            stack,
            "--parallel",
            "1",
            "--sim-latency-ms",
            "700",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn keel up");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    loop {
        let line = lines.next().expect("keel up shows a step").expect("a line");
        // A cloud object's step (not the stack's or a component's).
        if line.starts_with("create ") && line.contains("aws:s3/") {
            break;
        }
    }
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    child
}

/// Runs `keel up` of `program` for each (working directory, stack) at
/// once, as separate processes; each must succeed.
fn ups_at_once(runs: &[(&Keel, &str)], program: &str) {
    let children: Vec<Child> = runs
        .iter()
        .map(|(k, s)| {
            k.command(&["up", "--program", program, "--stack", s])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for ((_, s), c) in runs.iter().zip(children) {
        let o = c.wait_with_output().expect("keel up ends");
        assert!(o.status.success(), "{s}: {}", text(&o.stderr));
    }
}

/// The IDs of the stack's resources that name cloud objects, and the
/// cloud's object IDs: equal when nothing is orphaned or lost.
fn ids(k: &Keel, stack: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let v: Value =
        serde_json::from_str(&k.ok(&["stack", "export", "--stack", stack])).expect("export");
    let state: BTreeSet<String> = v["deployment"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter(|r| {
            let ty = r["type"].as_str().unwrap_or_default();
            !ty.starts_with("pulumi:") && r["custom"] != Value::Bool(false)
        })
        .filter_map(|r| {
            r["id"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        })
        .collect();
    let cloud = k
        .cloud()
        .iter()
        .filter_map(|o| o["id"].as_str().map(str::to_owned))
        .collect();
    (state, cloud)
}

#[test]
fn core_commands_on_postgres() {
    let Some(pg) = Pg::new("core") else { return };
    let k = keel_on(&pg);
    let (v1, v2) = (example("site-v1.yaml"), example("site-v2.yaml"));

    let (_, err) = k.expect(2, &["stack", "select", "nope"]);
    assert!(err.contains("nope"), "{err}");
    let out = k.ok(&["stack", "ls"]);
    assert!(
        out.contains("no stacks in the backend postgres://"),
        "{out}"
    );

    let out = k.ok(&["up", "--program", &v1]);
    assert!(out.contains("update succeeded"), "{out}");
    assert_eq!(k.cloud().len(), 4);
    let ls = stacks(&k);
    assert_eq!(ls["dev"]["resourceCount"], 7, "{ls:?}");
    assert_eq!(ls["dev"]["updateInProgress"], false);

    // A preview changes nothing in the database.
    let before = k.ok(&["stack", "export"]);
    let (out, _) = k.expect(0, &["preview", "--program", &v2, "--json"]);
    assert_eq!(summary_steps(&out), counts(&[("same", 6), ("update", 1)]));
    assert_eq!(k.ok(&["stack", "export"]), before);

    let (out, _) = k.expect(0, &["up", "--program", &v2, "--json"]);
    assert_eq!(summary_steps(&out)["update"], 1, "{out}");
    let (out, _) = k.expect(0, &["refresh", "--yes", "--json"]);
    assert!(out.contains("refresh"), "{out}");
    let out = k.ok(&["stack", "output", "url"]);
    assert!(out.starts_with("https://cdn-"), "{out}");
    let out = k.ok(&["state", "verify"]);
    assert!(out.contains("ok (7 resources"), "{out}");

    let h: Value = serde_json::from_str(&k.ok(&["stack", "history", "--json"])).expect("history");
    let kinds: Vec<String> = h
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r["kind"].as_str().unwrap(),
                r["result"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        kinds,
        ["refresh succeeded", "update succeeded", "update succeeded"]
    );

    // state delete: an unknown URN changes nothing; a leaf goes.
    let urns = k.urns();
    let (_, err) = k.expect(
        2,
        &[
            "state",
            "delete",
            "urn:pulumi:dev::site::x:y:Z::nope",
            "--yes",
        ],
    );
    assert!(err.contains("nope"), "{err}");
    let cdn = urns
        .keys()
        .find(|u| u.ends_with("::cdn"))
        .expect("cdn")
        .clone();
    let cdn_id = urns[&cdn].clone();
    k.ok(&["state", "delete", &cdn, "--yes"]);
    assert!(!k.urns().contains_key(&cdn));
    // ... and comes back by import (adopting the object).
    k.ok(&[
        "import",
        "aws:cloudfront:Distribution",
        "cdn",
        &cdn_id,
        "--yes",
    ]);
    assert_eq!(k.urns()[&cdn], cdn_id);
    k.ok(&["state", "unprotect", &cdn, "--yes"]);

    // More stacks: init, select, rename, rm.
    k.ok(&["stack", "init", "qa"]);
    let (_, err) = k.expect(2, &["stack", "init", "qa"]);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(stacks(&k)["qa"]["current"], true);
    k.ok(&["stack", "select", "dev"]);
    assert_eq!(stacks(&k)["dev"]["current"], true);
    k.ok(&["stack", "rename", "qa2", "--stack", "qa", "--yes"]);
    let (_, err) = k.expect(2, &["stack", "rename", "dev", "--stack", "qa2", "--yes"]);
    assert!(err.contains("already exists"), "{err}");
    let ls = stacks(&k);
    assert!(!ls.contains_key("qa") && ls.contains_key("qa2"), "{ls:?}");
    k.ok(&["stack", "rm", "qa2", "--yes"]);
    k.ok(&["stack", "init", "qa"]);
    let out = k.ok(&["stack", "rm", "qa", "--yes"]);
    assert!(out.is_empty());
    assert!(!stacks(&k).contains_key("qa"));
    let (_, err) = k.expect(2, &["stack", "rm", "dev", "--yes"]);
    assert!(err.contains("resources"), "{err}");

    let (out, _) = k.expect(0, &["destroy", "--yes", "--json"]);
    assert!(summary_steps(&out)["delete"] >= 7, "{out}");
    assert!(k.cloud().is_empty());
    assert_eq!(stacks(&k)["dev"]["resourceCount"], 0);
    k.ok(&["stack", "rm", "dev", "--yes"]);
    assert!(stacks(&k).is_empty());
}

#[test]
fn stack_surgery_on_postgres_is_transactional_and_keeps_config_files() {
    let Some(pg) = Pg::new("surgery") else { return };
    let k = keel_on(&pg);
    let dir = k.path().display().to_string();
    let v1 = example("site-v1.yaml");
    k.ok(&["up", "--program", &v1]);
    let urns = k.urns();
    let cdn = urns
        .keys()
        .find(|u| u.ends_with("::cdn"))
        .expect("cdn")
        .clone();

    // rename: state, history, selection and the config file move at once.
    k.write("Pulumi.dev.yaml", "config:\n  site:tier: gold\n");
    k.ok(&["stack", "rename", "prod", "--program", &dir, "--yes"]);
    assert!(!k.path().join("Pulumi.dev.yaml").exists());
    assert!(k.path().join("Pulumi.prod.yaml").is_file());
    let ls = stacks(&k);
    assert!(!ls.contains_key("dev"), "{ls:?}");
    assert_eq!(ls["prod"]["current"], true, "{ls:?}");
    assert_eq!(ls["prod"]["resourceCount"], 7, "{ls:?}");
    let h: Value = serde_json::from_str(&k.ok(&["stack", "history", "--json"])).expect("history");
    assert_eq!(h.as_array().unwrap().len(), 1, "the history moved: {h}");
    assert_eq!(
        pg.psql("SELECT count(*) FROM keel_history WHERE stack = 'dev'")
            .trim(),
        "0"
    );
    // A rename onto a stack with state changes nothing.
    k.ok(&["stack", "init", "qa"]);
    k.ok(&["stack", "select", "prod"]);
    let before = k.ok(&["stack", "export"]);
    let (_, err) = k.expect(2, &["stack", "rename", "qa", "--yes"]);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(k.ok(&["stack", "export"]), before);

    // A failed move into a new stack leaves no empty stack behind.
    let prod_cdn = cdn.replace(":dev::", ":prod::");
    let (_, err) = k.expect(
        2,
        &[
            "state",
            "move",
            "--source",
            "prod",
            "--dest",
            "fresh",
            "urn:pulumi:prod::site::x:y:Z::nope",
            "--yes",
        ],
    );
    assert!(err.contains("nope"), "{err}");
    assert!(!stacks(&k).contains_key("fresh"), "{:?}", stacks(&k));
    // ... and a successful one makes it.
    k.ok(&[
        "state", "move", "--source", "prod", "--dest", "fresh", &prod_cdn, "--yes",
    ]);
    let fresh = k.ok(&["stack", "export", "--stack", "fresh"]);
    assert!(
        fresh.contains("urn:pulumi:fresh::site::aws:cloudfront:Distribution::cdn"),
        "{fresh}"
    );

    // state repair of a base that fails integrity (a hand edit in the
    // database): a dependency on a resource that is gone.
    let raw =
        pg.psql("SELECT convert_from(base, 'UTF8') FROM keel_checkpoints WHERE stack = 'prod'");
    let mut v: Value = serde_json::from_str(raw.trim()).expect("the base is JSON");
    let last = v["deployment"]["resources"]
        .as_array_mut()
        .expect("the base's resources")
        .last_mut()
        .unwrap();
    last["dependencies"] = serde_json::json!(["urn:pulumi:prod::site::a:b:C::gone"]);
    let damaged = serde_json::to_string(&v).unwrap();
    pg.psql(&format!(
        "UPDATE keel_checkpoints SET base = convert_to($keel${damaged}$keel$, 'UTF8') WHERE stack = 'prod'"
    ));
    k.expect(1, &["state", "verify"]);
    let out = k.ok(&["state", "repair", "--dry-run", "--json"]);
    let report: Value = serde_json::from_str(out.trim()).expect("report");
    assert_eq!(report["pruned"].as_array().unwrap().len(), 1, "{report}");
    let out = k.ok(&["state", "repair", "--yes"]);
    assert!(out.contains("state repaired"), "{out}");
    let out = k.ok(&["state", "verify"]);
    assert!(out.contains("stack `prod`: ok"), "{out}");

    // rm keeps the config file's bytes with the backup, and removes it.
    k.ok(&["destroy", "--yes", "--stack", "fresh"]);
    k.write("Pulumi.fresh.yaml", "config:\n  site:tier: bronze\n");
    k.ok(&["stack", "rm", "fresh", "--program", &dir, "--yes"]);
    assert!(!k.path().join("Pulumi.fresh.yaml").exists());
    let kept =
        pg.psql("SELECT convert_from(config, 'UTF8') FROM keel_backups WHERE stack = 'fresh'");
    assert!(kept.contains("site:tier: bronze"), "{kept}");
    // --preserve-config leaves it where it is.
    k.write("Pulumi.qa.yaml", "config: {}\n");
    k.ok(&[
        "stack",
        "rm",
        "qa",
        "--program",
        &dir,
        "--preserve-config",
        "--yes",
    ]);
    assert!(k.path().join("Pulumi.qa.yaml").is_file());
}

#[test]
fn a_second_operation_is_refused_naming_the_holder() {
    let Some(pg) = Pg::new("lock") else { return };
    let k = keel_on(&pg);
    let v1 = example("site-v1.yaml");
    let up = slow_up(&k, &v1, "dev");
    assert_eq!(stacks(&k)["dev"]["updateInProgress"], true);
    let before = k.ok(&["stack", "export"]);
    let (_, err) = k.expect(1, &["destroy", "--yes"]);
    assert!(err.contains("locked by another operation"), "{err}");
    assert!(
        err.contains("`keel up`") && err.contains(&format!("pid {}", up.id())),
        "{err}"
    );
    let (_, err) = k.expect(
        1,
        &["state", "delete", "urn:pulumi:dev::site::x:y:Z::a", "--yes"],
    );
    assert!(err.contains("locked by another operation"), "{err}");
    assert_eq!(
        k.ok(&["stack", "export"]),
        before,
        "the refusals changed nothing"
    );
    // `keel cancel` reaches the holder through the database.
    k.ok(&["cancel", "--yes"]);
    let out = up.wait_with_output().expect("keel up ends");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cancelled by `keel cancel`"), "{err}");
    assert_eq!(stacks(&k)["dev"]["updateInProgress"], false);
    let h: Value = serde_json::from_str(&k.ok(&["stack", "history", "--json"])).expect("history");
    assert_eq!(h[0]["result"], "cancelled");
    k.ok(&["state", "verify"]);
    k.ok(&["destroy", "--yes"]);
}

#[test]
fn several_stacks_from_several_processes() {
    let Some(pg) = Pg::new("many") else { return };
    let k = keel_on(&pg);
    let v1 = example("site-v1.yaml");
    let names = ["a", "b", "c", "d"];
    ups_at_once(&names.map(|s| (&k, s)), &v1);
    let ls = stacks(&k);
    for s in names {
        assert_eq!(ls[s]["resourceCount"], 7, "{ls:?}");
        k.ok(&["state", "verify", "--stack", s]);
        let h: Value = serde_json::from_str(&k.ok(&["stack", "history", "--json", "--stack", s]))
            .expect("history");
        assert_eq!(h.as_array().unwrap().len(), 1);
    }
    assert_eq!(k.cloud().len(), 16);
}

#[test]
fn two_machines_share_the_simulated_cloud_through_the_database() {
    let Some(pg) = Pg::new("shared_cloud") else {
        return;
    };
    // Two working directories stand for two machines: nothing on disk is
    // shared between them, only the database.
    let (a, b) = (keel_on(&pg), keel_on(&pg));
    let v1 = example("site-v1.yaml");
    let out = a.ok(&["up", "--program", &v1]);
    assert!(out.contains("update succeeded"), "{out}");
    assert_eq!(b.cloud(), a.cloud(), "b sees a's objects");
    assert_eq!(b.cloud().len(), 4);
    for k in [&a, &b] {
        assert!(
            !k.path().join(".keel").join("cloud.json").exists(),
            "no cloud file is written beside a database backend"
        );
    }
    // b's update of the same stack finds every object a created.
    let (out, _) = b.expect(0, &["up", "--program", &v1, "--json"]);
    all_same(&out);
    let (state, cloud) = ids(&b, "dev");
    assert_eq!(state, cloud);
    // Both create objects at once, in stacks of their own: nothing is lost
    // between the two writers.
    ups_at_once(&[(&a, "a1"), (&b, "b1"), (&a, "a2"), (&b, "b2")], &v1);
    assert_eq!(a.cloud().len(), 20);
    let mut all = BTreeSet::new();
    for s in ["dev", "a1", "b1", "a2", "b2"] {
        let (state, _) = ids(&a, s);
        assert_eq!(state.len(), 4, "{s}");
        all.extend(state);
    }
    let cloud: BTreeSet<String> = b
        .cloud()
        .iter()
        .filter_map(|o| o["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(all, cloud, "every object is one stack's");
    // What b destroys is gone for a too.
    b.ok(&["destroy", "--yes", "--stack", "dev"]);
    assert_eq!(a.cloud().len(), 16);
    assert!(a
        .cloud()
        .iter()
        .all(|o| !state.contains(o["id"].as_str().unwrap())));
}

#[test]
fn a_holder_killed_mid_update_loses_nothing() {
    let Some(pg) = Pg::new("kill") else { return };
    let k = keel_on(&pg);
    let v1 = example("site-v1.yaml");
    let mut up = slow_up(&k, &v1, "dev");
    // A step's line is shown once its end record is queued, not yet
    // durable: kill only once a completed step is committed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while ids(&k, "dev").0.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no step committed in 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    up.kill().expect("SIGKILL");
    up.wait().expect("reaped");
    // The server released the dead holder's lock; its row is stale.
    assert_eq!(stacks(&k)["dev"]["updateInProgress"], false);
    let out = k.ok(&["state", "verify"]);
    assert!(out.contains("stack `dev`: ok"), "{out}");
    let (state, cloud) = ids(&k, "dev");
    assert!(!state.is_empty(), "the committed steps were kept");
    assert!(state.is_subset(&cloud), "{state:?} {cloud:?}");
    // The next update takes the stale lock over and converges: every
    // object is the stack's (adopted or created), none orphaned.
    let out = k.ok(&["up", "--program", &v1]);
    assert!(out.contains("update succeeded"), "{out}");
    let (state, cloud) = ids(&k, "dev");
    assert_eq!(state, cloud);
    assert_eq!(state.len(), 4);
    let (out, _) = k.expect(0, &["up", "--program", &v1, "--json"]);
    all_same(&out);
}

#[test]
fn a_database_restart_mid_update_fails_clearly_and_the_next_up_converges() {
    let Some(pg) = Pg::private("restart") else {
        return;
    };
    let k = keel_on(&pg);
    let v1 = example("site-v1.yaml");
    let up = slow_up(&k, &v1, "dev");
    pg.cluster.as_ref().expect("a private cluster").restart();
    let o = up.wait_with_output().expect("keel up ends");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("PostgreSQL"), "{err}");
    let out = k.ok(&["state", "verify"]);
    assert!(out.contains("stack `dev`: ok"), "{out}");
    let (state, cloud) = ids(&k, "dev");
    assert!(state.is_subset(&cloud), "{state:?} {cloud:?}");
    let out = k.ok(&["up", "--program", &v1]);
    assert!(out.contains("update succeeded"), "{out}");
    let (state, cloud) = ids(&k, "dev");
    assert_eq!(state, cloud);
    assert_eq!(state.len(), 4);
}

#[test]
fn export_and_import_move_stacks_between_backends() {
    let Some(pg) = Pg::new("export") else { return };
    let file = Keel::new();
    file.ok(&["up", "--program", &example("site-v1.yaml")]);
    let exported = file.ok(&["stack", "export"]);
    let path = file.write("dev.json", &exported);

    let db = keel_on(&pg);
    db.ok(&["stack", "import", "--file", &path]);
    assert_eq!(db.ok(&["stack", "export"]), exported);
    let again = db.write("from-db.json", &db.ok(&["stack", "export"]));

    let back = Keel::new();
    back.ok(&["stack", "import", "--file", &again]);
    assert_eq!(back.ok(&["stack", "export"]), exported);
}
