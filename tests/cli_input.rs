//! Bad input at the `keel` command's boundary, through the binary: bare
//! relative file names, exports onto the backend's own files, imports keel
//! must not take (shared IDs, values nested too deep), oversized program
//! files, and terminal control characters in names and values.

mod common;

use std::path::Path;

use common::cli::*;

use serde_json::{json, Value};

const TWO: &str = "name: site\nresources:\n  b1: { type: \"aws:s3/bucket:Bucket\" }\n  b2: { type: \"aws:s3/bucket:Bucket\" }\n";

#[test]
fn bare_relative_file_names_work_for_export_save_plan_and_plan() {
    let k = Keel::new();
    k.write("site.yaml", TWO);
    k.ok(&["up", "--program", "site.yaml"]);
    // The README's walk-through, in the working directory.
    k.ok(&["stack", "export", "--file", "dev.json"]);
    let exported: Value =
        serde_json::from_slice(&std::fs::read(k.path().join("dev.json")).expect("dev.json"))
            .expect("JSON");
    assert_eq!(exported, k.export());
    k.ok(&["state", "verify", "--file", "dev.json"]);
    k.ok(&[
        "preview",
        "--program",
        "site.yaml",
        "--save-plan",
        "plan.json",
    ]);
    assert!(k.path().join("plan.json").is_file());
    k.ok(&["up", "--program", "site.yaml", "--plan", "plan.json"]);
}

#[test]
fn export_onto_the_backends_own_files_is_refused() {
    let k = Keel::new();
    k.write("site.yaml", TWO);
    k.ok(&["up", "--program", "site.yaml"]);
    let before = k.files();
    let checkpoint = k.backend().join("stacks/dev/checkpoint.json");
    assert!(before.contains_key(&checkpoint), "{:?}", before.keys());
    let relative = Path::new(".keel/stacks/dev/checkpoint.json");
    let new_file = k.backend().join("stacks/dev/copy.json");
    for target in [checkpoint.as_path(), relative, new_file.as_path()] {
        let t = target.display().to_string();
        let (_, err) = k.expect(2, &["stack", "export", "--file", &t]);
        assert!(err.contains("backend directory"), "{t}: {err}");
        assert_eq!(k.files(), before, "{t}: nothing written");
    }
}

/// The state exported, changed by `edit`, written to `name`; importing it
/// exits 2 with every `expect`ed text on stderr and changes nothing.
fn refused_import(k: &Keel, name: &str, edit: impl FnOnce(&mut Value), expect: &[&str]) {
    let mut state = k.export();
    edit(&mut state);
    let file = k.write(name, &state.to_string());
    let before = k.files();
    let (_, err) = k.expect(2, &["stack", "import", "--file", &file]);
    for e in expect {
        assert!(err.contains(e), "{name}: `{e}` not in:\n{err}");
    }
    assert_eq!(k.files(), before, "{name}: nothing written");
}

/// The position of a resource of an exported state by name.
fn index(state: &Value, name: &str) -> usize {
    state["deployment"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .position(|r| {
            r["urn"]
                .as_str()
                .is_some_and(|u| u.ends_with(&format!("::{name}")))
        })
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn import_refuses_shared_ids_and_values_nested_too_deep() {
    let k = Keel::new();
    k.write("site.yaml", TWO);
    k.ok(&["up", "--program", "site.yaml"]);
    let state = k.export();
    let (b1, b2) = (resource(&state, "b1"), resource(&state, "b2"));
    let (urn1, urn2) = (b1["urn"].as_str().unwrap(), b2["urn"].as_str().unwrap());
    let id1 = b1["id"].clone();
    refused_import(
        &k,
        "shared-id.json",
        |s| {
            let i = index(s, "b2");
            s["deployment"]["resources"][i]["id"] = id1.clone();
        },
        &[urn1, urn2, id1.as_str().unwrap(), "same type and provider"],
    );
    // The same ID on a resource marked for deletion is an old half, not a
    // second claim: accepted.
    let mut old_half = k.export();
    let i = index(&old_half, "b2");
    old_half["deployment"]["resources"][i]["id"] = id1.clone();
    old_half["deployment"]["resources"][i]["delete"] = json!(true);
    let file = k.write("old-half.json", &old_half.to_string());
    k.ok(&["stack", "import", "--file", &file]);

    k.ok(&[
        "stack",
        "import",
        "--file",
        &k.write("back.json", &state.to_string()),
    ]);
    let deep = (0..100).fold(json!(1), |v, _| json!([v]));
    refused_import(
        &k,
        "deep.json",
        |s| {
            let i = index(s, "b1");
            s["deployment"]["resources"][i]["outputs"]["deep"] = deep;
        },
        &[urn1, "outputs", "`deep[0][0]", "more than 64 levels deep"],
    );
}

#[test]
fn oversized_and_endless_program_files_exit_2() {
    let k = Keel::new();
    let big = k.path().join("big.yaml");
    let f = std::fs::File::create(&big).expect("create");
    f.set_len((64 << 20) + 1).expect("a sparse file");
    for program in [big.display().to_string(), "/dev/zero".to_owned()] {
        let (out, err) = k.expect(2, &["up", "--program", &program]);
        assert!(err.contains("larger than 64 MiB"), "{program}: {err}");
        assert!(err.contains(&program), "{program}: {err}");
        assert!(out.is_empty());
    }
    assert!(k.files().is_empty(), "no stack was made");
}

#[test]
fn control_characters_are_escaped_in_human_output() {
    let k = Keel::new();
    let program = json!({
        "name": "site",
        "resources": {
            // A name may not hold `[` (addresses use it): the terminal
            // reset `ESC c` instead of a CSI sequence.
            "evil\u{1b}c\u{7}": {
                "type": "aws:s3/bucket:Bucket",
                "properties": { "title": "red\u{1b}[31m\u{7}" }
            }
        },
        "outputs": { "title\u{1b}[1m": "x\u{1b}]0;owned\u{7}" }
    });
    let file = k.write("evil.json", &program.to_string());
    let runs: [&[&str]; 6] = [
        &["up", "--program", &file],
        &["up", "--json", "--program", &file],
        &["state", "show"],
        &["state", "show", "--json"],
        &["cloud", "list"],
        &["cloud", "list", "--json"],
    ];
    for args in runs {
        let o = k.run(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        for (what, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
            assert!(
                !bytes.contains(&0x1b) && !bytes.contains(&0x07),
                "{args:?}: a raw control character on {what}:\n{}",
                text(bytes)
            );
        }
    }
    // Escaped, not dropped.
    let shown = k.ok(&["state", "show"]);
    assert!(shown.contains("evil\\u{1b}c\\u{7}"), "{shown}");
    let out = k.ok(&["up", "--program", &file]);
    assert!(out.contains("x\\u{1b}]0;owned\\u{7}"), "{out}");
}
