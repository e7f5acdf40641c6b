//! Transforms and resource hooks of real Pulumi Python programs on keel,
//! through the `keel` binary and the official SDK: keel advertises them,
//! serves their registration RPCs and calls the program back.
//!
//! - `transforms`: a resource's own transform, then its ancestors' (nearest
//!   first), then the stack's change its inputs and options (a protect flag
//!   and an additional secret output); an invoke transform redirects an
//!   invoke.
//! - `hooks`: hooks bound by name run before and after create, update and
//!   delete with Pulumi's arguments; a hook marked `on_dry_run` runs in a
//!   preview, the others do not; a raising hook fails its step with the
//!   Python message.

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
