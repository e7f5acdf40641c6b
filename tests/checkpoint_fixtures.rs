//! Real Pulumi checkpoint files (`../shared/fixtures/pulumi/`, read in
//! place): every valid file parses, verifies, is written back and re-read
//! with an identical JSON value; every invalid or old file is refused with
//! the typed error its README names; malformed input gives typed errors.

use std::path::{Path, PathBuf};

use keel::model::checkpoint::CheckpointError;
use keel::model::{CheckpointFile, IntegrityError};

fn fixtures() -> PathBuf {
    std::env::var_os("KEEL_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/fixtures/pulumi"))
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

/// What a file is expected to do.
enum Expect {
    /// Parse, verify, write, re-read: the same JSON value.
    RoundTrip,
    /// Be refused with an error matching the predicate; `what` describes it.
    Refused(&'static str, fn(&CheckpointError) -> bool),
}

/// The one helper every case goes through.
fn check(name: &str, bytes: &[u8], expect: Expect) {
    let result = CheckpointFile::from_slice_verified(bytes);
    match expect {
        Expect::RoundTrip => {
            let file = result.unwrap_or_else(|e| panic!("{name}: refused: {e}"));
            let original: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            let written = file.to_vec_pretty();
            let again = CheckpointFile::from_slice_verified(&written)
                .unwrap_or_else(|e| panic!("{name}: re-read refused: {e}"));
            let rewritten: serde_json::Value = serde_json::from_slice(&written).unwrap();
            assert!(
                rewritten == original,
                "{name}: written JSON differs from the original\n{}",
                first_difference(&original, &rewritten, "$")
            );
            assert_eq!(
                again.to_vec_pretty(),
                written,
                "{name}: second write differs"
            );
            // A load keeps maps as text and writes them without a decode
            // (copied or transcoded): the bytes their decoded entries give.
            let compact = file.to_vec();
            look_at_every_map(&file);
            assert!(
                file.to_vec_pretty() == written,
                "{name}: indented writes differ once decoded"
            );
            assert!(
                file.to_vec() == compact,
                "{name}: compact writes differ once decoded"
            );
            let compacted = CheckpointFile::from_slice(&compact).unwrap();
            assert!(
                compacted.to_vec() == compact,
                "{name}: a compact file is not written back as read"
            );
            let from_entries = serde_json::to_vec(&compacted).unwrap();
            assert!(
                from_entries == compact,
                "{name}: a copied text differs from its entries' bytes"
            );
            // A base checkpoint is encoded from the borrowed deployment:
            // byte for byte what an owned export of it encodes.
            let deployment = file
                .deployment
                .as_ref()
                .or_else(|| file.checkpoint.as_ref().and_then(|c| c.latest.as_ref()));
            if let Some(d) = deployment {
                let mut extra = std::collections::BTreeMap::new();
                extra.insert("keelFormat".to_owned(), serde_json::json!(2));
                extra.insert("keelJournalSeq".to_owned(), serde_json::json!(41));
                let mut owned = CheckpointFile::export(d.clone());
                owned.extra = extra.clone();
                assert_eq!(
                    String::from_utf8(CheckpointFile::export_to_vec(d, &extra)).unwrap(),
                    String::from_utf8(owned.to_vec()).unwrap(),
                    "{name}: the borrowed export differs from the owned one"
                );
            }
        }
        Expect::Refused(what, matches) => match result {
            Ok(_) => panic!("{name}: accepted, expected refusal: {what}"),
            Err(e) => assert!(matches(&e), "{name}: expected {what}, got {e:?} ({e})"),
        },
    }
}

/// Describes the first place two JSON values differ (for failure messages).
/// Looks at (so decodes) every state's maps in `file`.
fn look_at_every_map(file: &CheckpointFile) {
    let deployments = [
        file.deployment.as_ref(),
        file.checkpoint.as_ref().and_then(|c| c.latest.as_ref()),
    ];
    for d in deployments.into_iter().flatten() {
        for s in &d.resources {
            std::hint::black_box(s.inputs.len() + s.outputs.len());
        }
    }
}

fn first_difference(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> String {
    use serde_json::Value::{Array, Object};
    match (a, b) {
        (Object(x), Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) if p == q => {}
                    (Some(p), Some(q)) => return first_difference(p, q, &format!("{path}.{k}")),
                    (p, q) => return format!("{path}.{k}: {p:?} vs {q:?}"),
                }
            }
            String::new()
        }
        (Array(x), Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find(|(_, (p, q))| p != q)
            .map(|(i, (p, q))| first_difference(p, q, &format!("{path}[{i}]")))
            .unwrap_or_default(),
        _ => format!("{path}: {a} vs {b}"),
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn valid_fixtures_round_trip_exactly() {
    for path in files_in(&fixtures()) {
        let name = name_of(&path);
        if name == "README.md" {
            continue;
        }
        check(&name, &read(&path), Expect::RoundTrip);
    }
}

#[test]
fn invalid_fixtures_fail_with_the_rule_their_readme_names() {
    fn parent_after_child(e: &CheckpointError) -> bool {
        matches!(
            e,
            CheckpointError::Integrity(IntegrityError::ParentAfterChild { .. })
        )
    }
    let expected: &[(&str, Expect)] = &[
        (
            "pkg__resource__stack__testdata__checkpoint-v4-unsupported-feature.json",
            Expect::Refused("the unsupported feature, by name", |e| {
                matches!(e, CheckpointError::UnsupportedFeatures { features } if features == &["unsupported-feature"])
                    && e.to_string().contains("unsupported-feature")
            }),
        ),
        (
            "tests__integration__aliases__rename_component__step1__stack.json",
            Expect::Refused(
                "a missing parent (comp3)",
                |e| matches!(e, CheckpointError::Integrity(IntegrityError::MissingParent { parent, .. }) if parent.ends_with("::comp3")),
            ),
        ),
        (
            "pkg__resource__stack__testdata__checkpoint-v3.json",
            Expect::Refused("a parent after its child", parent_after_child),
        ),
        (
            "pkg__resource__stack__testdata__checkpoint-secrets.json",
            Expect::Refused("a parent after its child", parent_after_child),
        ),
        (
            "pkg__resource__stack__testdata__checkpoint-v4.json",
            Expect::Refused("a parent after its child", parent_after_child),
        ),
    ];
    let dir = fixtures().join("invalid");
    let files = files_in(&dir);
    for path in &files {
        let name = name_of(path);
        let (_, expect) = expected
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("invalid/{name} has no expectation in this test"));
        let expect = match expect {
            Expect::RoundTrip => Expect::RoundTrip,
            Expect::Refused(w, f) => Expect::Refused(w, *f),
        };
        check(&name, &read(path), expect);
    }
    assert_eq!(
        files.len(),
        expected.len(),
        "every expectation has its file"
    );
}

#[test]
fn old_versions_are_refused_naming_the_version() {
    for path in files_in(&fixtures().join("old-versions")) {
        let bytes = read(&path);
        let head: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let name = name_of(&path);
        match head.get("version").and_then(|v| v.as_u64()) {
            None => check(
                &name,
                &bytes,
                Expect::Refused("no version (2017 format)", |e| {
                    matches!(e, CheckpointError::NoVersion)
                        && e.to_string().contains("no `version`")
                }),
            ),
            Some(1) => check(
                &name,
                &bytes,
                Expect::Refused("version 1", |e| {
                    matches!(e, CheckpointError::OldVersion { found: 1 })
                        && e.to_string().contains("version 1")
                }),
            ),
            Some(2) => check(
                &name,
                &bytes,
                Expect::Refused("version 2", |e| {
                    matches!(e, CheckpointError::OldVersion { found: 2 })
                        && e.to_string().contains("version 2")
                }),
            ),
            Some(v) => panic!("{name}: unexpected version {v} in old-versions/"),
        }
    }
}

#[test]
fn malformed_files_give_typed_errors() {
    let good = read(
        &fixtures()
            .join("provider__testdata__recorded__TestProviderUpgrade__index_randompassword__4.16.0__stack.json"),
    );
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        ("empty", vec![], Expect::Refused("empty", |e| matches!(e, CheckpointError::Empty))),
        ("blank", b"  \n".to_vec(), Expect::Refused("empty", |e| matches!(e, CheckpointError::Empty))),
        (
            "truncated",
            good[..good.len() / 2].to_vec(),
            Expect::Refused("truncated", |e| matches!(e, CheckpointError::Truncated { .. })),
        ),
        (
            "not json",
            b"version: 3\ndeployment: {}".to_vec(),
            Expect::Refused("syntax", |e| matches!(e, CheckpointError::Syntax { .. })),
        ),
        (
            "trailing garbage",
            [&good[..], b"}garbage"].concat(),
            Expect::Refused("syntax", |e| matches!(e, CheckpointError::Syntax { .. })),
        ),
        (
            "array",
            b"[]".to_vec(),
            Expect::Refused("shape", |e| matches!(e, CheckpointError::Shape { .. })),
        ),
        (
            "string version",
            br#"{"version": "3", "deployment": {}}"#.to_vec(),
            Expect::Refused("shape", |e| matches!(e, CheckpointError::Shape { .. })),
        ),
        (
            "resources not a list",
            br#"{"version": 3, "deployment": {"manifest": {"time": "", "magic": "", "version": ""}, "resources": {}}}"#.to_vec(),
            Expect::Refused("shape", |e| matches!(e, CheckpointError::Shape { .. })),
        ),
        (
            "custom not a bool",
            br#"{"version": 3, "deployment": {"resources": [{"urn": "urn:pulumi:d::p::a:b:C::n", "type": "a:b:C", "custom": "yes"}]}}"#.to_vec(),
            Expect::Refused("shape", |e| matches!(e, CheckpointError::Shape { .. })),
        ),
        (
            "bad urn",
            br#"{"version": 3, "deployment": {"resources": [{"urn": "urn:nope", "type": "a:b:C"}]}}"#.to_vec(),
            Expect::Refused("shape", |e| matches!(e, CheckpointError::Shape { .. })),
        ),
        (
            "newer version",
            br#"{"version": 9, "deployment": {}}"#.to_vec(),
            Expect::Refused("newer", |e| matches!(e, CheckpointError::NewerVersion { found: 9 })),
        ),
        (
            "no body",
            br#"{"version": 3}"#.to_vec(),
            Expect::Refused("no deployment", |e| matches!(e, CheckpointError::NoDeployment)),
        ),
        (
            "missing urn",
            br#"{"version": 3, "deployment": {"manifest": {"time": "", "magic": "", "version": ""}, "resources": [{"type": "a:b:C", "custom": true}]}}"#.to_vec(),
            Expect::Refused("missing urn", |e| {
                matches!(e, CheckpointError::Integrity(IntegrityError::MissingUrn { index: 0 }))
            }),
        ),
        (
            "bad magic",
            br#"{"version": 3, "deployment": {"manifest": {"time": "", "magic": "x", "version": "v3.0.0"}}}"#.to_vec(),
            Expect::Refused("bad magic", |e| {
                matches!(e, CheckpointError::Integrity(IntegrityError::BadMagic { .. }))
            }),
        ),
    ];
    for (name, bytes, expect) in cases {
        check(name, &bytes, expect);
    }
    // Every prefix of a real file is refused with a typed error, never a panic.
    for len in (0..good.len()).step_by(97) {
        assert!(
            CheckpointFile::from_slice(&good[..len]).is_err(),
            "prefix {len}"
        );
    }
}

#[test]
fn empty_stacks_in_both_forms() {
    for (name, bytes) in [
        ("checkpoint without latest", &br#"{"version": 3, "checkpoint": {"stack": "dev"}}"#[..]),
        (
            "latest without resources",
            br#"{"version": 3, "checkpoint": {"stack": "dev", "config": null, "latest": {"manifest": {"time": "t", "magic": "", "version": ""}}}}"#,
        ),
        ("deployment without resources", br#"{"version": 3, "deployment": {"manifest": {"time": "t", "magic": "", "version": ""}}}"#),
    ] {
        check(name, bytes, Expect::RoundTrip);
        let file = CheckpointFile::from_slice(bytes).unwrap();
        assert!(file.into_deployment().resources.is_empty(), "{name}");
    }
}
