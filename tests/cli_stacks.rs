//! `keel stack ls|select|init|rm|rename|output` end to end, as a new user
//! runs them: the selected stack as the default of every command, removal
//! and renaming (confirmation, lock, backups, integrity), outputs, and the
//! errors (unknown stack, taken name, locked stack, bad names).

mod common;

use common::cli::*;
use serde_json::Value;

fn ls_json(k: &Keel) -> Vec<Value> {
    let v: Value = serde_json::from_str(&k.ok(&["stack", "ls", "--json"])).expect("ls JSON");
    v.as_array().expect("an array").clone()
}

fn names(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["name"].as_str().expect("name").to_owned())
        .collect()
}

fn backups(k: &Keel) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(k.backend().join("backups"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn init_ls_select_and_the_default_stack() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    let out = k.ok(&["stack", "ls"]);
    assert!(out.contains("no stacks"), "{out}");
    assert!(ls_json(&k).is_empty());

    // init makes an empty stack and selects it.
    let (_, err) = k.expect(0, &["stack", "init", "prod"]);
    assert!(err.contains("created stack `prod`"), "{err}");
    let rows = ls_json(&k);
    assert_eq!(names(&rows), ["prod"]);
    assert_eq!(rows[0]["current"], true);
    assert_eq!(rows[0]["resourceCount"], 0);
    assert_eq!(rows[0]["updateInProgress"], false);
    assert!(rows[0]["lastUpdate"].is_null(), "{rows:?}");
    k.ok(&["state", "verify", "--stack", "prod"]);

    // Commands without --stack run on the selected stack.
    k.ok(&["up", "--program", &v1]);
    assert!(!k.backend().join("stacks/dev").exists(), "dev untouched");
    let rows = ls_json(&k);
    assert_eq!(rows[0]["resourceCount"], 7);
    assert!(rows[0]["lastUpdate"].is_string(), "{rows:?}");
    let state: Value = serde_json::from_str(&k.ok(&["stack", "export"])).unwrap();
    let urn = state["deployment"]["resources"][0]["urn"].as_str().unwrap();
    assert!(urn.starts_with("urn:pulumi:prod::site::"), "{urn}");

    // --stack beats the selection; select switches it.
    k.ok(&["up", "--program", &v1, "--stack", "dev"]);
    let out = k.ok(&["stack", "ls"]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{out}");
    assert!(
        lines[1].starts_with("dev ") && lines[1].ends_with(" 7"),
        "{out}"
    );
    assert!(lines[2].starts_with("prod*"), "{out}");
    k.ok(&["stack", "select", "dev"]);
    let rows = ls_json(&k);
    assert_eq!(rows[0]["current"], true);
    assert_eq!(rows[1]["current"], false);

    // Errors: an unknown stack, a taken name, a bad name; nothing changes.
    let before = k.files();
    let (_, err) = k.expect(2, &["stack", "select", "nope"]);
    assert!(err.contains("nope"), "{err}");
    let (_, err) = k.expect(2, &["stack", "init", "prod"]);
    assert!(err.contains("stack `prod` already exists"), "{err}");
    k.expect(2, &["stack", "init", "../evil"]);
    k.expect(2, &["stack", "select", "a/b"]);
    assert_eq!(k.files(), before, "bad input changes nothing");
}

#[test]
fn rm_refuses_resources_without_force_and_keeps_a_backup() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    k.ok(&["up", "--program", &v1]);
    k.ok(&["stack", "init", "empty"]);
    let before = k.files();

    // Without a terminal, --yes is required.
    let (_, err) = k.expect(2, &["stack", "rm", "empty"]);
    assert!(err.contains("--yes"), "{err}");
    // A stack with resources needs --force.
    let (_, err) = k.expect(2, &["stack", "rm", "dev", "--yes"]);
    assert!(
        err.contains("still has 7 resources") && err.contains("--force"),
        "{err}"
    );
    k.expect(2, &["stack", "rm", "nope", "--yes"]);
    assert_eq!(k.files(), before, "refusals change nothing");

    // A locked stack is refused (exit 1) and left as it was.
    let held = keel::persist::backend::Backend::new(k.backend())
        .lock("empty", "cli test holding the lock")
        .expect("lock");
    let (_, err) = k.expect(1, &["stack", "rm", "empty", "--yes"]);
    assert!(
        err.contains("locked") && err.contains("cli test holding the lock"),
        "{err}"
    );
    assert!(k.backend().join("stacks/empty/checkpoint.json").exists());
    drop(held);

    // Removal: the selection is cleared, the directory kept under backups/.
    k.ok(&["stack", "rm", "empty", "--yes"]);
    assert_eq!(names(&ls_json(&k)), ["dev"]);
    assert!(ls_json(&k).iter().all(|r| r["current"] == false));
    let kept = backups(&k);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].starts_with("empty."), "{kept:?}");
    assert!(k
        .backend()
        .join("backups")
        .join(&kept[0])
        .join("checkpoint.json")
        .is_file());

    // --force removes a stack with resources (its cloud objects stay).
    let (_, err) = k.expect(0, &["stack", "rm", "dev", "--force", "--yes"]);
    assert!(err.contains("7 resources"), "{err}");
    assert!(ls_json(&k).is_empty());
    assert_eq!(k.cloud().len(), 4, "the cloud objects are not deleted");
    assert_eq!(backups(&k).len(), 2);
}

#[test]
fn rename_rewrites_urns_and_references() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    k.ok(&["up", "--program", &v1]);
    let ids_before: Vec<String> = k.urns().into_values().collect();

    // Confirmation, then errors that change nothing.
    let before = k.files();
    k.expect(2, &["stack", "rename", "prod"]);
    k.ok(&["stack", "init", "taken"]);
    let (_, err) = k.expect(2, &["stack", "rename", "taken", "--stack", "dev", "--yes"]);
    assert!(err.contains("stack `taken` already exists"), "{err}");
    k.ok(&["stack", "rm", "taken", "--yes"]);
    k.expect(2, &["stack", "rename", "x", "--stack", "nope", "--yes"]);
    k.expect(
        2,
        &["stack", "rename", "bad/name", "--stack", "dev", "--yes"],
    );
    let held = keel::persist::backend::Backend::new(k.backend())
        .lock("dev", "cli test holding the lock")
        .expect("lock");
    let (_, err) = k.expect(1, &["stack", "rename", "prod", "--stack", "dev", "--yes"]);
    assert!(err.contains("locked"), "{err}");
    drop(held);
    let mut after = k.files();
    after.retain(|p, _| !p.to_string_lossy().contains("backups"));
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "refused renames leave the stacks as they were"
    );

    k.ok(&["stack", "select", "dev"]);
    let (_, err) = k.expect(0, &["stack", "rename", "prod", "--yes"]);
    assert!(err.contains("renamed stack `dev` to `prod`"), "{err}");
    assert_eq!(names(&ls_json(&k)), ["prod"]);
    assert_eq!(ls_json(&k)[0]["current"], true, "the selection follows");
    k.ok(&["state", "verify"]);
    let state = k.export();
    let text = state["deployment"].to_string();
    assert!(!text.contains("urn:pulumi:dev::"), "{text}");
    let cdn = resource(&state, "cdn");
    assert!(cdn["urn"]
        .as_str()
        .unwrap()
        .starts_with("urn:pulumi:prod::"));
    assert!(cdn["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d.as_str().unwrap().starts_with("urn:pulumi:prod::")));
    let ids_after: Vec<String> = k.urns().into_values().collect();
    let (mut a, mut b) = (ids_before, ids_after);
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same cloud objects");
    // The renamed stack is managed as before: nothing to change.
    let (out, _) = k.expect(0, &["up", "--program", &v1, "--json"]);
    all_same(&out);
    assert!(backups(&k).iter().any(|b| b.starts_with("dev.")));
}

#[test]
fn output_prints_values_and_masks_secrets() {
    let mut k = Keel::new();
    k.passphrase = Some("correct horse".into());
    let program = k.write(
        "vault.yaml",
        "name: vault\nresources:\n  db:\n    type: \"aws:rds:Instance\"\n    properties: { password: { \"fn::secret\": \"pa55-w0rd-xyz\" }, size: 3 }\noutputs:\n  pw: ${db.password}\n  size: ${db.size}\n  name: hello\n",
    );
    k.ok(&["up", "--program", &program]);

    let out = k.ok(&["stack", "output"]);
    assert!(out.contains("Current stack outputs (3)"), "{out}");
    assert!(out.contains("[secret]"), "{out}");
    assert!(!out.contains("pa55-w0rd-xyz"), "{out}");
    assert_eq!(k.ok(&["stack", "output", "name"]).trim(), "hello");
    assert_eq!(k.ok(&["stack", "output", "size", "--json"]).trim(), "3");
    let v: Value = serde_json::from_str(&k.ok(&["stack", "output", "--json"])).unwrap();
    assert_eq!(v["pw"], "[secret]");
    assert_eq!(v["name"], "hello");
    let v: Value =
        serde_json::from_str(&k.ok(&["stack", "output", "--json", "--show-secrets"])).unwrap();
    assert_eq!(v["pw"], "pa55-w0rd-xyz");
    assert_eq!(
        k.ok(&["stack", "output", "pw", "--show-secrets"]).trim(),
        "pa55-w0rd-xyz"
    );

    // Errors: an unknown output, an unknown stack, no passphrase.
    let (_, err) = k.expect(2, &["stack", "output", "nope"]);
    assert!(
        err.contains("no output `nope`") && err.contains("size"),
        "{err}"
    );
    k.expect(2, &["stack", "output", "--stack", "nope"]);
    k.passphrase = None;
    assert!(k.ok(&["stack", "output"]).contains("[secret]"));
    let (_, err) = k.expect(2, &["stack", "output", "--show-secrets"]);
    assert!(err.contains("passphrase"), "{err}");
}

fn history(k: &Keel, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["stack", "history", "--json"];
    args.extend(extra);
    let v: Value = serde_json::from_str(&k.ok(&args)).expect("history JSON");
    v.as_array().expect("an array").clone()
}

fn kinds(h: &[Value]) -> Vec<String> {
    h.iter()
        .map(|r| {
            format!(
                "{} {}",
                r["kind"].as_str().unwrap(),
                r["result"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn every_operation_that_took_the_lock_is_recorded() {
    use sha2::Digest;
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    let (_, err) = k.expect(1, &["up", "--program", &v1, "--sim-fail", "cdn"]);
    assert!(err.contains("cdn"), "{err}");
    k.ok(&["up", "--program", &v1]);
    let h = history(&k, &[]);
    assert_eq!(kinds(&h), ["update succeeded", "update failed"]);
    let r = &h[0];
    assert_eq!(r["version"], 2);
    assert_eq!(r["counts"]["create"], 1, "{r}");
    assert_eq!(r["counts"]["same"], 6, "{r}");
    assert_eq!(r["program"]["path"], v1.as_str());
    assert_eq!(r["program"]["project"], "site");
    let sha = hex::encode(sha2::Sha256::digest(std::fs::read(&v1).unwrap()));
    assert_eq!(r["program"]["sha256"], sha.as_str());
    assert_eq!(r["keelVersion"], env!("CARGO_PKG_VERSION"));
    assert!(r["pid"].as_u64().is_some() && r["host"].is_string() && r["user"].is_string());
    assert!(r["start"].as_str().unwrap() <= r["end"].as_str().unwrap());
    assert!(r.get("error").is_none(), "{r}");
    let failed = &h[1];
    assert!(
        failed["error"].as_str().unwrap().contains("cdn"),
        "{failed}"
    );
    assert_eq!(failed["counts"]["create"], 6, "{failed}");

    // Bad input changes nothing, history included: refused before the lock
    // (a missing program, a bad URN) or once the stack was read (another
    // project's program). A preview is not recorded (as Pulumi).
    k.expect(2, &["up", "--program", "nope.yaml"]);
    k.expect(2, &["up", "--program", &v1, "--target", "not-a-urn"]);
    let other = k.write(
        "other.yaml",
        "name: other\nresources:\n  b:\n    type: aws:s3/bucket:Bucket\n    properties: { name: x }\n",
    );
    let before = k.files();
    let (_, err) = k.expect(2, &["up", "--program", &other]);
    assert!(err.contains("other"), "{err}");
    k.ok(&["preview", "--program", &v1]);
    assert_eq!(k.files(), before);

    k.ok(&["refresh"]);
    k.ok(&["destroy", "--yes"]);
    let h = history(&k, &[]);
    assert_eq!(
        kinds(&h),
        [
            "destroy succeeded",
            "refresh succeeded",
            "update succeeded",
            "update failed"
        ],
        "newest first"
    );
    let versions: Vec<u64> = h.iter().map(|r| r["version"].as_u64().unwrap()).collect();
    assert_eq!(versions, [4, 3, 2, 1]);
    assert_eq!(h[0]["counts"]["delete"], 7, "{}", h[0]);
    assert!(h[0]["program"].get("path").is_none(), "{}", h[0]);

    let text = k.ok(&["stack", "history"]);
    assert!(text.starts_with("Version 4: destroy succeeded"), "{text}");
    assert!(text.contains("Version 2: update succeeded"), "{text}");
    assert!(text.contains("same 6"), "{text}");

    // A plan that fails once the lock is taken is recorded: a destroy
    // blocked by a protected resource.
    let guarded = k.write(
        "guarded.yaml",
        "name: site\nresources:\n  b:\n    type: aws:s3/bucket:Bucket\n    properties: { name: x }\n    options: { protect: true }\n",
    );
    k.ok(&["up", "--program", &guarded, "--stack", "guarded"]);
    let (_, err) = k.expect(1, &["destroy", "--stack", "guarded", "--yes"]);
    assert!(err.contains("protect"), "{err}");
    let h = history(&k, &["--stack", "guarded"]);
    assert_eq!(kinds(&h), ["destroy failed", "update succeeded"]);
    assert!(
        h[0]["error"].as_str().unwrap().contains("protect"),
        "{}",
        h[0]
    );

    // A torn last line (a crash mid-append) is skipped with a warning; the
    // next record still starts on its own line.
    let file = k.backend().join("stacks/dev/history.jsonl");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend_from_slice(b"{\"kind\":\"upd");
    std::fs::write(&file, &bytes).unwrap();
    let (out, err) = k.expect(0, &["stack", "history", "--json"]);
    assert!(err.contains("torn"), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        4
    );
    k.ok(&["up", "--program", &v1]);
    assert_eq!(kinds(&history(&k, &[]))[0], "update succeeded");
    assert_eq!(history(&k, &[]).len(), 5);

    // The history moves with a renamed stack; errors name the stack.
    k.ok(&["stack", "rename", "prod", "--yes"]);
    assert_eq!(history(&k, &["--stack", "prod"]).len(), 5);
    let (_, err) = k.expect(2, &["stack", "history", "--stack", "dev"]);
    assert!(err.contains("dev"), "{err}");
}

#[test]
fn graph_writes_dot_and_json_deterministically() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    k.ok(&["up", "--program", &v1]);
    let urn = |name: &str| {
        resource(&k.export(), name)["urn"]
            .as_str()
            .unwrap()
            .to_owned()
    };

    let (_, err) = k.expect(0, &["stack", "graph", "g.dot"]);
    assert!(err.contains("7 resources"), "{err}");
    let dot = std::fs::read_to_string(k.path().join("g.dot")).unwrap();
    assert!(
        dot.starts_with("strict digraph {\n") && dot.ends_with("}\n"),
        "{dot}"
    );
    let nodes = dot.lines().filter(|l| l.contains("[label=")).count();
    assert_eq!(nodes, 7, "{dot}");
    assert!(dot.contains("cdn\\naws:cloudfront:Distribution"), "{dot}");
    assert!(dot.contains("[color=\"#AA6639\", style=dashed]"), "{dot}");
    assert!(dot.contains("[color=\"#246C60\"]"), "{dot}");
    // The same state gives the same file.
    k.ok(&["stack", "graph", "g2.dot"]);
    assert_eq!(
        std::fs::read_to_string(k.path().join("g2.dot")).unwrap(),
        dot
    );

    let g: Value = serde_json::from_str(&k.ok(&["stack", "graph", "-", "--json"])).unwrap();
    assert_eq!(g["nodes"].as_array().unwrap().len(), 7);
    let edges = g["edges"].as_array().unwrap();
    let has = |from: &str, to: &str, kind: &str| {
        edges.iter().any(|e| {
            e["from"] == urn(from).as_str() && e["to"] == urn(to).as_str() && e["kind"] == kind
        })
    };
    assert!(has("cdn", "policy", "dependency"), "{g}");
    assert!(has("cdn", "assets", "dependency"), "{g}");
    assert!(has("assets", "site", "parent"), "{g}");
    assert!(!has("assets", "site", "dependency"), "{g}");

    let out = k.ok(&[
        "stack",
        "graph",
        "-",
        "--ignore-parent-edges",
        "--short-node-name",
    ]);
    assert!(
        !out.contains("dashed") && out.contains("label=\"cdn\""),
        "{out}"
    );
    let out = k.ok(&[
        "stack",
        "graph",
        "-",
        "--ignore-dependency-edges",
        "--parent-edge-color",
        "red",
    ]);
    assert!(
        !out.contains("#246C60") && out.contains("color=\"red\""),
        "{out}"
    );

    // Errors: an unknown stack, a file inside the backend, an unwritable
    // path; the backend is left as it was.
    let before = k.files();
    k.expect(2, &["stack", "graph", "g.dot", "--stack", "nope"]);
    let (_, err) = k.expect(2, &["stack", "graph", ".keel/g.dot"]);
    assert!(err.contains(".keel"), "{err}");
    k.expect(1, &["stack", "graph", "no/such/dir/g.dot"]);
    assert_eq!(k.files(), before);
}

/// The lock file's holder, once an operation holds the stack.
fn holder_command(k: &Keel) -> Option<String> {
    let text = std::fs::read_to_string(k.backend().join("stacks/dev/lock")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v["command"].as_str().map(str::to_owned)
}

/// Starts `keel ARGS` (slow: one step at a time, 1.5 s each) and returns
/// once it holds the stack's lock as `command`.
fn spawn_holding(k: &Keel, args: &[&str], command: &str) -> std::process::Child {
    let mut all = args.to_vec();
    all.extend(["--parallel", "1", "--sim-latency-ms", "1500"]);
    let child = k
        .command(&all)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command}: {e}"));
    let mut tries = 0;
    while holder_command(k).as_deref() != Some(command) {
        tries += 1;
        assert!(tries < 6000, "{command} never took the lock");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child
}

#[test]
fn cancel_stops_a_running_up_gracefully() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    let (_, err) = k.expect(2, &["cancel", "--yes"]);
    assert!(err.contains("dev"), "{err}");
    k.ok(&["stack", "init", "dev"]);
    let (_, err) = k.expect(1, &["cancel", "--yes"]);
    assert!(
        err.contains("no operation is running on stack `dev`"),
        "{err}"
    );

    // A holder: without a terminal --yes is required; then the request is
    // written for it.
    let held = keel::persist::backend::Backend::new(k.backend())
        .lock("dev", "cli test holding the lock")
        .expect("lock");
    let request = k.backend().join("stacks/dev/cancel-request");
    let (_, err) = k.expect(2, &["cancel"]);
    assert!(err.contains("--yes"), "{err}");
    assert!(!request.exists());
    let (_, err) = k.expect(0, &["cancel", "--yes"]);
    assert!(err.contains("cli test holding the lock"), "{err}");
    assert!(request.exists());
    drop(held);

    // The request was for that holder: the next operation removes it as it
    // takes the lock, and runs.
    k.ok(&["refresh"]);
    assert!(!request.exists());
    assert_eq!(kinds(&history(&k, &[])), ["refresh succeeded"]);

    // A slow up (one step at a time, 1.5 s each): `keel cancel` once it
    // holds the lock stops it.
    let up = spawn_holding(&k, &["up", "--program", &v1], "keel up");
    assert_eq!(ls_json(&k)[0]["updateInProgress"], true);
    let (_, err) = k.expect(0, &["cancel", "--yes"]);
    assert!(err.contains("`keel up`"), "{err}");
    let out = up.wait_with_output().expect("keel up ends");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("cancelled by `keel cancel`"), "{stderr}");
    assert!(stderr.contains("cancelled by the operator"), "{stderr}");

    // What was done is saved and matches the cloud; the lock is free and
    // the request gone; the history says cancelled.
    k.ok(&["state", "verify"]);
    let state = k.export();
    let mut state_ids: Vec<String> = state["deployment"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["custom"] == true && !r["type"].as_str().unwrap().starts_with("pulumi:providers:")
        })
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    state_ids.sort();
    let cloud_ids: Vec<String> = k
        .cloud()
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(state_ids, cloud_ids);
    assert!(!request.exists());
    drop(
        keel::persist::backend::Backend::new(k.backend())
            .lock("dev", "cli test")
            .expect("the lock was released"),
    );
    let h = history(&k, &[]);
    assert_eq!(kinds(&h), ["update cancelled", "refresh succeeded"]);
    assert!(
        h[0]["error"].as_str().unwrap().contains("cancelled"),
        "{}",
        h[0]
    );

    assert_eq!(ls_json(&k)[0]["updateInProgress"], false);

    // The next up finishes the job.
    k.ok(&["up", "--program", &v1]);
    assert_eq!(k.cloud().len(), 4);
    let (_, err) = k.expect(1, &["cancel", "--yes"]);
    assert!(err.contains("no operation is running"), "{err}");

    // A destroy is cancelled the same way.
    let destroy = spawn_holding(&k, &["destroy", "--yes"], "keel destroy");
    k.ok(&["cancel", "--yes"]);
    let out = destroy.wait_with_output().expect("keel destroy ends");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cancelled by `keel cancel`"), "{stderr}");
    k.ok(&["state", "verify"]);
    assert_eq!(kinds(&history(&k, &[]))[0], "destroy cancelled");
    k.ok(&["destroy", "--yes"]);
    assert!(k.cloud().is_empty());
}

#[test]
fn a_ctrl_c_is_recorded_as_cancelled() {
    let k = Keel::new();
    let v1 = example("site-v1.yaml");
    let mut up = k
        .command(&[
            "up",
            "--program",
            &v1,
            "--parallel",
            "1",
            "--sim-latency-ms",
            "1500",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn keel up");
    // Once a step was shown, the operation renders its events (and
    // handles Ctrl-C).
    let stdout = up.stdout.take().expect("stdout");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    loop {
        let line = lines.next().expect("keel up shows a step").expect("a line");
        if line.starts_with("create ") {
            break;
        }
    }
    let status = std::process::Command::new("kill")
        .args(["-s", "INT", &up.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = up.wait_with_output().expect("keel up ends");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    k.ok(&["state", "verify"]);
    let h = history(&k, &[]);
    assert_eq!(kinds(&h), ["update cancelled"]);
}

#[test]
fn rename_and_rm_carry_the_stack_config_file() {
    let k = Keel::new();
    let src = std::fs::read_to_string(example("site-v1.yaml")).unwrap();
    let prog = k.write("site.yaml", &src);
    k.ok(&["config", "set", "env", "qa", "--program", &prog]);
    assert!(k.path().join("Pulumi.dev.yaml").is_file());
    k.ok(&["up", "--program", &prog]);

    // A config file of the new name refuses the rename.
    k.write("Pulumi.prod.yaml", "config: {}\n");
    let before = k.files();
    let (_, err) = k.expect(2, &["stack", "rename", "prod", "--program", &prog, "--yes"]);
    assert!(err.contains("Pulumi.prod.yaml"), "{err}");
    assert_eq!(k.files(), before);
    assert!(k.path().join("Pulumi.dev.yaml").is_file());
    std::fs::remove_file(k.path().join("Pulumi.prod.yaml")).unwrap();

    // The config file follows the stack: the next up changes nothing.
    k.ok(&["stack", "rename", "prod", "--program", &prog, "--yes"]);
    assert!(!k.path().join("Pulumi.dev.yaml").exists());
    assert!(k.path().join("Pulumi.prod.yaml").is_file());
    let (out, _) = k.expect(0, &["up", "--program", &prog, "--stack", "prod", "--json"]);
    all_same(&out);

    // rm moves the config file into the backups, unless --preserve-config.
    k.ok(&["stack", "init", "tmp"]);
    k.ok(&[
        "config",
        "set",
        "env",
        "x",
        "--program",
        &prog,
        "--stack",
        "tmp",
    ]);
    k.ok(&[
        "stack",
        "rm",
        "tmp",
        "--program",
        &prog,
        "--preserve-config",
        "--yes",
    ]);
    assert!(k.path().join("Pulumi.tmp.yaml").is_file());
    k.ok(&["stack", "init", "tmp"]);
    k.ok(&["stack", "rm", "tmp", "--program", &prog, "--yes"]);
    assert!(!k.path().join("Pulumi.tmp.yaml").exists());
    assert!(backups(&k).iter().any(|b| k
        .backend()
        .join("backups")
        .join(b)
        .join("Pulumi.tmp.yaml")
        .is_file()));
}
