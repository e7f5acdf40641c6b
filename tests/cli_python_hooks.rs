//! Transforms and resource hooks of real Pulumi Python programs on keel,
//! through the `keel` binary and the official SDK: keel advertises them,
//! serves their registration RPCs and calls the program back.
//!
//! - `transforms`: a resource's own transform, then its ancestors' (nearest
//!   first), then the stack's change its inputs and options (a protect flag
//!   and an additional secret output); an invoke transform redirects an
//!   invoke.
//! - `hooks-retry`: an error hook retries a failed create (a dynamic
//!   provider that fails twice) up to keel's attempt limit.
//! - `hooks-step1..3`: hooks bound by name run before and after create and
//!   update with Pulumi's arguments; a hook marked `on_dry_run` runs in a
//!   preview, the others do not; a raising hook fails its step with the
//!   Python message (or warns, with `ignore_errors`); the delete of a resource the program no longer
//!   registers runs after the program ended, with the hook its state names.
//! - `hooks-component`: a component's after hook runs once its outputs are
//!   registered, and sees them.

mod common;

use common::cli::*;
use common::python::{program, python};

/// A working directory whose runs use the test interpreter.
fn keel() -> Keel {
    let mut k = Keel::new();
    k.env.push(("KEEL_PYTHON".into(), python().into()));
    k.env
        .push(("KEEL_CONFIG_PASSPHRASE".into(), "hooks test".into()));
    k
}

const STACK: &str = "urn:pulumi:dev::transforms::pulumi:pulumi:Stack::transforms-dev";
const ALONE: &str = "urn:pulumi:dev::transforms::aws:s3/bucket:Bucket::alone";

#[test]
fn transforms_run_own_then_ancestors_then_the_stack_and_invoke_transforms_redirect_invokes() {
    let k = keel();
    let out = k.ok(&["up", "--yes", "--json", "--program", &program("transforms")]);
    assert_eq!(summary_steps(&out)["create"], 6, "{out}");
    let r = k.resources();
    let outputs = &r[STACK]["outputs"];
    assert_eq!(
        outputs["childTrail"], "[own][inner][site-1][site-2][stack]",
        "{outputs}"
    );
    assert_eq!(outputs["lookedUp"], ALONE, "{outputs}");
    let alone = &r[ALONE];
    assert_eq!(alone["inputs"]["size"], 10.0, "{alone}");
    assert_eq!(alone["inputs"]["trail"], "[stack]", "{alone}");
    assert_eq!(alone["protect"], true, "{alone}");
    assert_eq!(alone["additionalSecretOutputs"], serde_json::json!(["arn"]));
    assert!(
        alone["outputs"]["arn"].get("ciphertext").is_some(),
        "the secret output is encrypted: {alone}"
    );
}

/// The `info` diagnostics of a `--json` run.
fn infos(stdout: &str) -> Vec<String> {
    events(stdout)
        .into_iter()
        .filter(|e| e["event"] == "diagnostic" && e["severity"] == "info")
        .filter_map(|e| e["message"].as_str().map(str::to_owned))
        .collect()
}

fn said(infos: &[String], line: &str) -> bool {
    infos.iter().any(|m| m == line)
}

const BUCKET: &str = "urn:pulumi:dev::hooks::aws:s3/bucket:Bucket::b";

#[test]
fn hooks_run_at_their_points_with_pulumis_arguments_and_a_raising_hook_fails_its_step() {
    let k = keel();
    let (v1, v2, v3) = (
        program("hooks-step1"),
        program("hooks-step2"),
        program("hooks-step3"),
    );

    // Preview: only the hook marked `on_dry_run` runs.
    let out = k.ok(&["preview", "--json", "--program", &v1]);
    let said_now = infos(&out);
    assert!(said(&said_now, "dry hook of b: preview=True"), "{out}");
    assert!(
        !said_now.iter().any(|m| m.starts_with("before_create")),
        "{out}"
    );

    // Up: before and after create, with the new inputs, then the outputs.
    let out = k.ok(&["up", "--yes", "--json", "--program", &v1]);
    let said_now = infos(&out);
    let arn = k.resources()[BUCKET]["outputs"]["arn"]
        .as_str()
        .expect("arn")
        .to_owned();
    for line in [
        "before_create b aws:s3/bucket:Bucket size=1.0 outputs=None".to_owned(),
        "dry hook of b: preview=False".to_owned(),
        format!("after_create b id=True arn={arn}"),
    ] {
        assert!(said(&said_now, &line), "{line} in {said_now:?}");
    }
    // A failing hook registered with `ignore_errors` is a warning.
    let warned = events(&out).into_iter().any(|e| {
        e["severity"] == "warning"
            && e["message"] == "AfterCreate hook `noisy` failed: the noisy hook says no"
    });
    assert!(warned, "{out}");

    // Update hooks see the old and new inputs (and, after, outputs); a
    // hook that raises fails its step with the Python message, and the
    // resource is not created.
    let out = k.expect(1, &["up", "--yes", "--json", "--program", &v2]).0;
    let said_now = infos(&out);
    for line in [
        "before_update b size 1.0 -> 2.0 new_outputs=None",
        "after_update b same arn=True",
    ] {
        assert!(said(&said_now, line), "{line} in {said_now:?}");
    }
    assert!(out.contains("no bucket named refused today"), "{out}");
    let r = k.resources();
    assert_eq!(r[BUCKET]["inputs"]["size"], 2.0);
    assert!(
        !r.keys().any(|u| u.ends_with("::refused")),
        "{:?}",
        r.keys()
    );

    assert_eq!(
        r[BUCKET]["resourceHooks"]["BeforeDelete"],
        serde_json::json!(["before_delete"]),
        "the state names its hooks as Pulumi's does"
    );

    // `b` is gone from the program: its delete, after the program's end,
    // calls the hook its state names (registered by this version).
    let out = k.ok(&["up", "--yes", "--json", "--program", &v3]);
    let said_now = infos(&out);
    let line = format!("before_delete b id=True size=2.0 new_inputs=None arn={arn}");
    assert!(said(&said_now, &line), "{line} in {said_now:?}");
    assert!(!k.resources().contains_key(BUCKET));
}

/// An error hook asked after a failed create retries it while it answers
/// true, up to keel's attempt limit.
#[test]
fn an_error_hook_retries_a_failed_create() {
    let mut k = keel();
    let count = k.path().join("count");
    k.env
        .push(("KEEL_TEST_FILE".into(), count.display().to_string()));
    k.env.push(("KEEL_TEST_FAILURES".into(), "2".into()));
    let dir = program("hooks-retry");
    let out = k.ok(&["up", "--yes", "--json", "--program", &dir]);
    // Each time with the failures so far, newest first, and a warning.
    let asked: Vec<String> = infos(&out)
        .into_iter()
        .filter(|m| m.starts_with("on_error"))
        .collect();
    assert_eq!(
        asked,
        [
            "on_error flaky create seen=1 last=attempt 1 (the object's state is unknown)",
            "on_error flaky create seen=2 last=attempt 2 (the object's state is unknown)"
        ],
        "{out}"
    );
    let limit = keel::source::hooks::MAX_ATTEMPTS;
    for n in 1..=2 {
        let warning = format!(
            "retrying create due to on-error hook request ({n}/{})",
            limit - 1
        );
        assert!(out.contains(&warning), "{warning} in {out}");
    }
    let stack = &k.resources()["urn:pulumi:dev::hooks-retry::pulumi:pulumi:Stack::hooks-retry-dev"];
    assert_eq!(stack["outputs"]["calls"], 3.0, "{stack}");

    // A create that keeps failing stops at the attempt limit with its error
    // (a new project directory: nothing created yet).
    let mut k = keel();
    let count = k.path().join("count");
    k.env
        .push(("KEEL_TEST_FILE".into(), count.display().to_string()));
    k.env.push(("KEEL_TEST_FAILURES".into(), "100".into()));
    let out = k.expect(1, &["up", "--yes", "--json", "--program", &dir]).0;
    assert!(
        out.contains(&format!("flaky create, attempt {limit}")),
        "{out}"
    );
    let calls = std::fs::read_to_string(&count).expect("the counter");
    assert_eq!(calls, limit.to_string());
}

/// A component's after hooks run once its outputs are registered, and see
/// them (Pulumi runs them at `RegisterResourceOutputs`); its before hooks
/// run as it is registered.
#[test]
fn a_components_after_hook_sees_the_outputs_it_registers() {
    let k = keel();
    let out = k.ok(&[
        "up",
        "--yes",
        "--json",
        "--program",
        &program("hooks-component"),
    ]);
    let said_now = infos(&out);
    let child = k
        .resources()
        .into_iter()
        .find(|(urn, _)| urn.ends_with("::site-bucket"))
        .map(|(_, s)| s["id"].as_str().expect("id").to_owned())
        .expect("the child");
    assert!(
        said(&said_now, "before_create site outputs=None"),
        "{said_now:?}"
    );
    let after = format!("after_create site child={child}");
    assert!(said(&said_now, &after), "{after} in {said_now:?}");
}
