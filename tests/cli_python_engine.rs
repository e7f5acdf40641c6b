//! What the engine does for real Pulumi Python programs, through the
//! `keel` binary and the official SDK (`pulumi==3.272.0`), as Pulumi's
//! engine does it:
//!
//! - children inherit their parent's aliases (Pulumi's alias scenarios:
//!   a renamed component, a re-typed one, nested re-typed parents, a
//!   component and its child renamed together, all at once): the second
//!   version plans only `same` steps;
//! - `log.debug` messages are diagnostics, shown with `--debug` or `-v`.
//!
//! The interpreter is `KEEL_PYTHON` when set, else a virtual environment
//! made once under Cargo's target directory (`common::python`).

mod common;

use common::cli::*;
use common::python::{inline_program, keel, program};

/// Runs `up` of `aliases-step1` then preview and `up` of `aliases-step2`
/// for `scenarios` (all when empty): the second version plans and runs only
/// `same` steps, and the cloud keeps its objects. Returns the directory.
fn aliases(scenarios: &str) -> Keel {
    let mut k = keel();
    if !scenarios.is_empty() {
        k.env
            .push(("KEEL_ALIAS_SCENARIOS".into(), scenarios.into()));
    }
    let out = k.ok(&[
        "up",
        "--yes",
        "--json",
        "--program",
        &program("aliases-step1"),
    ]);
    let created = summary_steps(&out)["create"];
    let cloud = k.cloud();
    let before = k.files();
    let out = k.ok(&["preview", "--json", "--program", &program("aliases-step2")]);
    all_same(&out);
    assert_eq!(summary_steps(&out)["same"], created, "{scenarios}: {out}");
    assert!(k.files() == before, "the preview persisted nothing");
    let out = k.ok(&[
        "up",
        "--yes",
        "--json",
        "--program",
        &program("aliases-step2"),
    ]);
    all_same(&out);
    assert_eq!(summary_steps(&out)["same"], created, "{scenarios}: {out}");
    assert_eq!(
        k.cloud(),
        cloud,
        "{scenarios}: the cloud's objects are kept"
    );
    // The aliases did their work: a third run finds everything under its
    // new URN.
    let out = k.ok(&[
        "up",
        "--yes",
        "--json",
        "--program",
        &program("aliases-step2"),
    ]);
    all_same(&out);
    k
}

#[test]
fn a_renamed_component_keeps_its_children_including_name_prefixed_ones() {
    let urns = aliases("rename_component").urns();
    for renamed in [
        "urn:pulumi:dev::aliases::keel:test:Shop$keel:test:Part::store-db",
        "urn:pulumi:dev::aliases::keel:test:Shop$aws:s3/bucket:Bucket::store-logs",
    ] {
        assert!(urns.contains_key(renamed), "{renamed} in {urns:?}");
    }
    assert!(
        !urns
            .keys()
            .any(|u| u.ends_with("::shop-db") || u.ends_with("::shop")),
        "{urns:?}"
    );
}

#[test]
fn a_retyped_component_keeps_its_children() {
    aliases("retype_component");
}

#[test]
fn nested_retyped_parents_keep_their_descendants() {
    aliases("retype_parents");
}

#[test]
fn a_component_and_its_child_renamed_together_keep_the_child() {
    aliases("rename_component_and_child");
}

#[test]
fn all_alias_scenarios_in_one_program() {
    aliases("");
}

#[test]
fn debug_logs_are_diagnostics_shown_with_debug_or_verbose() {
    let k = keel();
    let dir = inline_program(
        &k,
        "logs",
        "import pulumi\n\
         pulumi.log.debug('looking closely')\n\
         pulumi.log.info('said out loud')\n",
    );
    let debug_lines = |out: &str| -> Vec<String> {
        events(out)
            .into_iter()
            .filter(|e| e["event"] == "diagnostic" && e["severity"] == "debug")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let out = k.ok(&["up", "--yes", "--json", "--program", &dir]);
    assert!(debug_lines(&out).is_empty(), "hidden by default: {out}");
    assert!(out.contains("said out loud"), "{out}");
    for flag in ["--debug", "-v"] {
        let out = k.ok(&["up", "--yes", "--json", flag, "--program", &dir]);
        // The SDK's own debug messages come along, as with Pulumi.
        assert!(
            debug_lines(&out).iter().any(|m| m == "looking closely"),
            "{flag}: {out}"
        );
        // The plain display shows it too.
        let (_, err) = k.expect(0, &["preview", flag, "--program", &dir]);
        assert!(err.contains("debug: looking closely"), "{flag}: {err}");
    }
    let (_, err) = k.expect(0, &["preview", "--program", &dir]);
    assert!(!err.contains("looking closely"), "{err}");
}

/// The stack's current files (checkpoint, journal), without the
/// simulated cloud, whose objects hold what the provider made in the clear,
/// and without the backup of the checkpoint before the last one.
fn stack_files(k: &Keel) -> String {
    k.files()
        .into_iter()
        .filter(|(p, _)| {
            p.components().any(|c| c.as_os_str() == "stacks")
                && p.extension().is_none_or(|e| e != "bak")
        })
        .map(|(_, b)| text(&b))
        .collect()
}

#[test]
fn additional_secret_outputs_are_secrets_in_state_and_in_the_program() {
    let mut k = keel();
    k.passphrase = Some("correct horse".into());
    let dir = inline_program(
        &k,
        "vault",
        "import os\n\
         import pulumi\n\
         secret = os.environ.get('ARN_SECRET') == '1'\n\
         b = pulumi.CustomResource('aws:s3/bucket:Bucket', 'b',\n\
         \x20   {'name': os.environ.get('BUCKET_NAME', 'vault'), 'arn': None},\n\
         \x20   pulumi.ResourceOptions(additional_secret_outputs=['arn'] if secret else []))\n\
         pulumi.export('arn', b.arn)\n",
    );
    let bucket = "urn:pulumi:dev::vault::aws:s3/bucket:Bucket::b";
    let stack = "urn:pulumi:dev::vault::pulumi:pulumi:Stack::vault-dev";
    // Without the option the ARN is a plain output.
    let out = k.ok(&["up", "--yes", "--program", &dir]);
    let arn = k.resources()[bucket]["outputs"]["arn"]
        .as_str()
        .expect("a plain arn")
        .to_owned();
    assert!(out.contains(&arn), "{out}");
    assert!(stack_files(&k).contains(&arn));

    // With it, each way the outputs are set: a same step (the option
    // alone changed), an update, a refresh.
    k.env.push(("ARN_SECRET".into(), "1".into()));
    let steps: [(&[&str], Option<&str>); 3] = [
        (&["up", "--yes", "--program", &dir], None),
        (&["up", "--yes", "--program", &dir], Some("vault-2")),
        (&["refresh", "--yes"], None),
    ];
    for (args, name) in steps {
        if let Some(n) = name {
            k.env.push(("BUCKET_NAME".into(), n.into()));
        }
        let mut args: Vec<&str> = args.to_vec();
        args.push("--json");
        let out = k.ok(&args);
        assert!(
            !out.contains(&arn),
            "{args:?}: no plaintext in events: {out}"
        );
        let r = k.resources();
        let sig = keel::model::property::SIG_KEY;
        for (urn, what) in [(bucket, "the bucket's"), (stack, "the stack's")] {
            let v = &r[urn]["outputs"]["arn"];
            assert_eq!(
                v[sig],
                keel::model::property::SIG_SECRET,
                "{args:?}: {what} arn is a secret: {v}"
            );
            assert!(v["ciphertext"].is_string(), "{args:?}: encrypted: {v}");
        }
        assert!(
            !stack_files(&k).contains(&arn),
            "{args:?}: no plaintext arn at rest"
        );
    }
    // The program got it as a secret: its export is masked.
    let out = k.ok(&["up", "--yes", "--program", &dir]);
    assert!(out.contains("arn: [secret]"), "{out}");
    let shown = k.ok(&["stack", "export", "--show-secrets"]);
    assert!(shown.contains(&arn), "{shown}");
}

/// The stack's outputs as `stack export` shows them.
fn stack_outputs(k: &Keel, project: &str) -> serde_json::Value {
    k.resources()[&format!("urn:pulumi:dev::{project}::pulumi:pulumi:Stack::{project}-dev")]
        ["outputs"]
        .clone()
}

#[test]
fn stack_outputs_registered_before_a_failure_are_saved() {
    let mut k = keel();
    // Pulumi's `stack_outputs_program_error` and `_resource_error`
    // programs, in one: STEP picks the version.
    let dir = inline_program(
        &k,
        "outs",
        "import os\n\
         import pulumi\n\
         step = os.environ.get('STEP', 'first')\n\
         if step == 'first':\n\
         \x20   pulumi.export('xyz', 'ABC')\n\
         \x20   pulumi.export('foo', 42)\n\
         elif step == 'raises':\n\
         \x20   pulumi.export('xyz', 'DEF')\n\
         \x20   raise Exception('the program broke')\n\
         elif step == 'export-of-failed':\n\
         \x20   pulumi.export('xyz', 'GHI')\n\
         \x20   doomed = pulumi.CustomResource('aws:s3/bucket:Bucket', 'doomed', {'name': 'd', 'arn': None})\n\
         \x20   pulumi.export('foo', doomed.arn)\n\
         else:\n\
         \x20   pulumi.export('xyz', 'JKL')\n\
         \x20   pulumi.CustomResource('aws:s3/bucket:Bucket', 'doomed', {'name': 'd'})\n\
         \x20   pulumi.export('foo', 1)\n",
    );
    k.ok(&["up", "--yes", "--program", &dir]);
    assert_eq!(
        stack_outputs(&k, "outs"),
        serde_json::json!({"xyz": "ABC", "foo": 42})
    );
    let cases = [
        // The program raised after updating `xyz`: `xyz` is saved, `foo`
        // (never reached) keeps its value.
        ("raises", serde_json::json!({"xyz": "DEF", "foo": 42})),
        // An export waits on a failed resource: the SDK never registers
        // the outputs, which stay as they were.
        (
            "export-of-failed",
            serde_json::json!({"xyz": "DEF", "foo": 42}),
        ),
        // A resource failed, the outputs were all registered: both saved.
        (
            "resource-fails",
            serde_json::json!({"xyz": "JKL", "foo": 1}),
        ),
    ];
    for (step, expected) in cases {
        k.env.retain(|(key, _)| key != "STEP");
        k.env.push(("STEP".into(), step.into()));
        k.expect(
            1,
            &["up", "--yes", "--program", &dir, "--sim-fail", "doomed"],
        );
        assert_eq!(stack_outputs(&k, "outs"), expected, "{step}");
    }
    // A success replaces them: an output the program no longer exports is
    // gone.
    k.env.retain(|(key, _)| key != "STEP");
    k.env.push(("STEP".into(), "first".into()));
    let dir2 = inline_program(&k, "outs2", "import pulumi\npulumi.export('xyz', 'MNO')\n");
    std::fs::copy(
        std::path::Path::new(&dir2).join("__main__.py"),
        std::path::Path::new(&dir).join("__main__.py"),
    )
    .expect("copy");
    k.ok(&["up", "--yes", "--program", &dir]);
    assert_eq!(stack_outputs(&k, "outs"), serde_json::json!({"xyz": "MNO"}));
}

#[test]
fn stack_references_read_another_stacks_outputs_and_keep_secrets_secret() {
    let mut k = keel();
    k.passphrase = Some("correct horse".into());
    let net = inline_program(
        &k,
        "net",
        "import pulumi\n\
         pulumi.export('vpcId', 'vpc-0abc')\n\
         pulumi.export('dbPassword', pulumi.Output.secret('hunter2-db'))\n",
    );
    k.ok(&["up", "--yes", "--stack", "network", "--program", &net]);
    let app = inline_program(
        &k,
        "app",
        "import os\n\
         import pulumi\n\
         net = pulumi.StackReference(os.environ.get('NET_STACK', 'organization/net/network'))\n\
         pulumi.export('vpc', net.get_output('vpcId'))\n\
         pulumi.export('pw', net.get_output('dbPassword'))\n\
         pulumi.export('pwLength', net.get_output('dbPassword').apply(len))\n",
    );
    let out = k.ok(&["up", "--yes", "--stack", "app", "--program", &app]);
    assert!(
        out.contains("vpc: \"vpc-0abc\"") || out.contains("vpc: vpc-0abc"),
        "{out}"
    );
    assert!(
        out.contains("pw: [secret]"),
        "the secret stays secret: {out}"
    );
    assert!(
        out.contains("pwLength: [secret]"),
        "and what is made of it: {out}"
    );
    let export: serde_json::Value =
        serde_json::from_str(&k.ok(&["stack", "export", "--stack", "app"])).expect("export");
    let resources = export["deployment"]["resources"]
        .as_array()
        .expect("resources");
    let reference = resources
        .iter()
        .find(|r| r["type"] == "pulumi:pulumi:StackReference")
        .expect("the stack reference is in the state");
    assert_eq!(reference["id"], "organization/net/network");
    assert_eq!(reference["external"], true);
    assert_eq!(
        reference["outputs"]["secretOutputNames"],
        serde_json::json!(["dbPassword"])
    );
    assert!(
        reference["outputs"]["outputs"]["dbPassword"]["ciphertext"].is_string(),
        "encrypted at rest: {reference}"
    );
    assert!(
        reference["provider"]
            .as_str()
            .is_some_and(|p| p.contains("::pulumi:providers:pulumi::")),
        "{reference}"
    );
    assert!(
        !stack_files(&k).contains("hunter2-db"),
        "no plaintext at rest"
    );
    let shown = k.ok(&["stack", "export", "--stack", "app", "--show-secrets"]);
    assert!(shown.contains("hunter2-db"), "{shown}");
    // Again: the reference is read again, nothing else changes.
    let out = k.ok(&["up", "--yes", "--json", "--stack", "app", "--program", &app]);
    assert!(
        summary_steps(&out)
            .keys()
            .all(|k| k == "same" || k == "read"),
        "{out}"
    );
    // A stack that does not exist is an error naming it.
    k.env.push(("NET_STACK".into(), "nowhere".into()));
    let (_, err) = k.expect(1, &["up", "--yes", "--stack", "app", "--program", &app]);
    assert!(err.contains("the stack `nowhere` does not exist"), "{err}");
}

#[test]
fn get_resource_rehydrates_a_resource_from_its_urn() {
    let k = keel();
    let dir = inline_program(
        &k,
        "hydrate",
        "import os\n\
         import pulumi\n\
         b = pulumi.CustomResource('aws:s3/bucket:Bucket', 'b', {'name': 'kept', 'arn': None})\n\
         pulumi.export('arn', b.arn)\n\
         if os.environ.get('HYDRATE') == '1':\n\
         \x20   again = pulumi.CustomResource('aws:s3/bucket:Bucket', 'b', {'arn': None},\n\
         \x20       pulumi.ResourceOptions(urn='urn:pulumi:dev::hydrate::aws:s3/bucket:Bucket::b'))\n\
         \x20   pulumi.export('again', again.arn)\n\
         \x20   pulumi.export('againId', again.id)\n",
    );
    k.ok(&["up", "--yes", "--program", &dir]);
    let r = k.resources();
    let bucket = &r["urn:pulumi:dev::hydrate::aws:s3/bucket:Bucket::b"];
    let mut k = k;
    k.env.push(("HYDRATE".into(), "1".into()));
    k.ok(&["up", "--yes", "--program", &dir]);
    let outputs = stack_outputs(&k, "hydrate");
    assert_eq!(outputs["again"], bucket["outputs"]["arn"], "{outputs}");
    assert_eq!(outputs["againId"], bucket["id"], "{outputs}");
    // A URN nobody has is an error naming it.
    let bad = inline_program(
        &k,
        "hydrate-bad",
        "import pulumi\n\
         x = pulumi.CustomResource('aws:s3/bucket:Bucket', 'x', {'arn': None},\n\
         \x20   pulumi.ResourceOptions(urn='urn:pulumi:dev::hydrate-bad::aws:s3/bucket:Bucket::ghost'))\n\
         pulumi.export('x', x.arn)\n",
    );
    let (_, err) = k.expect(1, &["up", "--yes", "--stack", "other", "--program", &bad]);
    assert!(
        err.contains("no resource urn:pulumi:dev::hydrate-bad::aws:s3/bucket:Bucket::ghost"),
        "{err}"
    );
}
