//! Regressions the lifecycle fuzzer (`tests/lifecycle_fuzz.rs`) found, each
//! reduced to the few commands that showed it, through the `keel` binary.

mod common;

use common::cli::*;

/// Runs `then` once per persister, on a fresh stack deployed from program
/// `v1` with `v2` written beside it. `then` gets the stack and an `up` of
/// `v2` with that persister: `up(code, extra)` runs it with the extra
/// arguments and expects exit status `code`.
fn from_v1_to_v2(v1: &str, v2: &str, then: impl Fn(&Keel, &dyn Fn(i32, &[&str]))) {
    for persistence in ["journal", "checkpoint"] {
        let k = Keel::new();
        let v1 = k.write("v1.yaml", v1);
        k.ok(&["up", "--program", &v1, "--persistence", persistence]);
        let v2 = k.write("v2.yaml", v2);
        let up = |code: i32, extra: &[&str]| {
            let mut args = vec!["up", "--program", &v2, "--persistence", persistence];
            args.extend_from_slice(extra);
            k.expect(code, &args);
        };
        then(&k, &up);
    }
}

/// A targeted update writes an untargeted resource's `same` state while
/// the resource it depends on, gone from the program but kept (it is not
/// targeted), stays among the prior states: the snapshot must still list
/// the dependency first, or the stack can never be loaded again.
#[test]
fn targeted_up_keeps_dependencies_before_dependents() {
    // `base` leaves the program and `user` stops referring to it; only
    // `other` is targeted, so `base` stays and `user` keeps its state.
    from_v1_to_v2(
        "name: fz\nresources:\n  \
         base: { type: 'fz:store:Box', properties: { size: 1 } }\n  \
         user: { type: 'fz:net:Link', properties: { from: '${base.id}' } }\n  \
         other: { type: 'fz:store:Box', properties: { size: 1 } }\n",
        "name: fz\nresources:\n  \
         user: { type: 'fz:net:Link', properties: { from: none } }\n  \
         other: { type: 'fz:store:Box', properties: { size: 2 } }\n",
        |k, up| {
            up(0, &["--target", "urn:pulumi:dev::fz::fz:store:Box::other"]);
            k.ok(&["state", "verify"]);
            let urns: Vec<String> = k.resources().into_keys().collect();
            assert!(urns.iter().any(|u| u.ends_with("::base")), "{urns:?}");
            // And the next untargeted update converges.
            up(0, &[]);
            k.ok(&["state", "verify"]);
        },
    );
}

/// With `--continue-on-error`, a resource whose delete failed keeps its
/// parent and its dependencies: deleting them anyway left a child naming a
/// missing parent, and the stack never loaded again.
#[test]
fn a_failed_delete_keeps_what_it_refers_to_under_continue_on_error() {
    from_v1_to_v2(
        "name: fz\nresources:\n  \
         group: { type: 'fz:app:Group', component: true }\n  \
         base: { type: 'fz:store:Box', properties: { size: 1 } }\n  \
         child:\n    type: 'fz:net:Link'\n    properties: { from: '${base.id}' }\n    \
         options: { parent: group }\n  \
         other: { type: 'fz:store:Box', properties: { size: 1 } }\n",
        "name: fz\nresources:\n  other: { type: 'fz:store:Box', properties: { size: 1 } }\n",
        |k, up| {
            up(1, &["--sim-fail", "child", "--continue-on-error"]);
            k.ok(&["state", "verify"]);
            let urns: Vec<String> = k.resources().into_keys().collect();
            for kept in ["::group", "::base", "::child"] {
                assert!(urns.iter().any(|u| u.ends_with(kept)), "{kept} in {urns:?}");
            }
            // Once the provider lets it go, everything goes.
            up(0, &[]);
            k.ok(&["state", "verify"]);
            assert_eq!(k.cloud().len(), 1);
        },
    );
}

/// An untargeted resource whose program now refers to a resource whose
/// create was skipped (outside the targets, no prior state) keeps its prior
/// references: taking the program's left it naming a resource in no state.
#[test]
fn a_kept_state_never_refers_to_a_skipped_create() {
    // `a` is renamed without an alias (a new resource), `b` follows it;
    // only `x` is targeted, so `a2` is not created and `b` is kept.
    from_v1_to_v2(
        "name: fz\nresources:\n  \
         a: { type: 'fz:store:Box', properties: { size: 1 } }\n  \
         b: { type: 'fz:net:Link', properties: { from: '${a.id}' } }\n  \
         x: { type: 'fz:store:Box', properties: { size: 1 } }\n",
        "name: fz\nresources:\n  \
         a2: { type: 'fz:store:Box', properties: { size: 1 } }\n  \
         b: { type: 'fz:net:Link', properties: { from: '${a2.id}' } }\n  \
         x: { type: 'fz:store:Box', properties: { size: 2 } }\n",
        |k, up| {
            up(0, &["--target", "urn:pulumi:dev::fz::fz:store:Box::x"]);
            k.ok(&["state", "verify"]);
            up(0, &[]);
            k.ok(&["state", "verify"]);
            assert_eq!(k.cloud().len(), 3);
        },
    );
}
