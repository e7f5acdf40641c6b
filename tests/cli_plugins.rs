//! A real provider plugin nobody on keel wrote the server of: keel's
//! `localfile` provider (`tests/python/plugins/localfile`, real local files)
//! runs in the Pulumi Python SDK's provider server
//! (`pulumi.provider.experimental`), found through the project's
//! `Pulumi.yaml` `plugins.providers`, for a program file with
//! `keel:providers: plugins`.
//!
//! - up, update (the provider's detailed diff in `--diff`), destroy: the
//!   file follows the state;
//! - SIGKILL in the middle of a create (the file written, the answer not
//!   given): the state keeps the create pending, a new `up` refuses to make
//!   the file twice, `refresh --import-pending-creates` adopts it, and the
//!   file and the state agree;
//! - SIGKILL in the middle of a delete: the next destroy finds the file
//!   still there and deletes it;
//! - a plugin that crashes in a create: the error names the resource and
//!   the plugin, the state is as before, the next `up` goes on;
//! - Ctrl-C (SIGINT) in the middle of a create: keel tells the plugin
//!   (`Cancel`), the create in flight finishes and is saved, nothing new
//!   starts, the plugin stops, and the next `up` goes on.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cli::*;
use common::python::python;
use serde_json::Value;

/// A project whose program file has one file resource at `data/note.txt`.
struct Files {
    k: Keel,
    program: String,
    note: PathBuf,
}

impl Files {
    fn new(content: &str) -> Self {
        let mut k = Keel::new();
        // The plugin directory's runtime is Python: keel runs it with this.
        k.env
            .push(("PULUMI_PYTHON_CMD".into(), python().to_owned()));
        let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/plugins/localfile");
        k.write(
            "Pulumi.yaml",
            &format!(
                "name: files\nruntime: yaml\nplugins:\n  providers:\n    - name: localfile\n      path: {}\n",
                plugin.display()
            ),
        );
        std::fs::create_dir(k.path().join("data")).expect("data dir");
        let note = k.path().join("data/note.txt");
        let program = k.write("files.yaml", &program(&note, content));
        Self { k, program, note }
    }

    fn set_content(&self, content: &str) {
        std::fs::write(&self.program, program(&self.note, content)).expect("program");
    }

    /// Adds a file resource `name` at `data/<name>.txt` to the program;
    /// returns its path.
    fn add(&self, name: &str, content: &str) -> PathBuf {
        let path = self.k.path().join(format!("data/{name}.txt"));
        let mut text = std::fs::read_to_string(&self.program).expect("program");
        text.push_str(&format!(
            "  {name}:\n    type: localfile:index:File\n    properties: {{ path: \"{}\", content: \"{content}\" }}\n",
            path.display()
        ));
        std::fs::write(&self.program, &text).expect("program");
        path
    }

    fn urn(&self) -> String {
        "urn:pulumi:dev::files::localfile:index:File::note".into()
    }

    fn read_note(&self) -> Option<String> {
        std::fs::read_to_string(&self.note).ok()
    }

    /// Runs `keel args` with the provider told to hang in `op`, waits for
    /// it to get there, and kills keel (SIGKILL) and then the plugin.
    fn kill_during(&self, op: &str, args: &[&str]) {
        let hang = PathBuf::from(format!("{}.hang", self.note.display()));
        let _ = std::fs::remove_file(&hang);
        let mut child = self
            .k
            .command(args)
            .env("LOCALFILE_HANG", op)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn keel");
        let deadline = Instant::now() + Duration::from_secs(120);
        let pid = loop {
            if let Ok(pid) = std::fs::read_to_string(&hang) {
                if !pid.is_empty() {
                    break pid;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the provider never reached its {op}"
            );
            if let Ok(Some(status)) = child.try_wait() {
                panic!("keel ended before the provider reached its {op}: {status}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        child.kill().expect("SIGKILL keel");
        let _ = child.wait();
        // The plugin keel started outlives a SIGKILL of keel: end it too.
        let _ = std::process::Command::new("kill")
            .args(["-9", pid.trim()])
            .status();
        std::fs::remove_file(&hang).expect("remove the hang marker");
    }
}

/// Waits for `<file>.hang` to name the plugin's process ID.
fn hang_pid(file: &Path) -> String {
    let hang = PathBuf::from(format!("{}.hang", file.display()));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(pid) = std::fs::read_to_string(&hang) {
            if !pid.is_empty() {
                return pid.trim().to_owned();
            }
        }
        assert!(Instant::now() < deadline, "the provider never hung");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn alive(pid: &str) -> bool {
    std::process::Command::new("kill")
        .args(["-0", pid])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn program(note: &Path, content: &str) -> String {
    format!(
        "name: files\nconfig:\n  keel:providers: plugins\nresources:\n  note:\n    type: localfile:index:File\n    properties: {{ path: \"{}\", content: \"{content}\" }}\n",
        note.display()
    )
}

fn pending(state: &Value) -> Vec<(String, String)> {
    state["deployment"]["pending_operations"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|op| {
            (
                op["type"].as_str().unwrap_or_default().to_owned(),
                op["resource"]["urn"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[test]
fn real_files_follow_the_state_through_up_update_and_destroy() {
    let f = Files::new("hello");
    let out = f.k.ok(&["up", "--yes", "--program", &f.program]);
    assert!(out.contains("packages: localfile (plugin: real)"), "{out}");
    assert_eq!(f.read_note().as_deref(), Some("hello"));
    let state = f.k.export();
    let note = resource(&state, "note");
    assert_eq!(note["id"], f.note.display().to_string(), "{note}");

    f.set_content("world");
    // The provider's own detailed diff, with the values at its paths.
    let out = f.k.ok(&["preview", "--diff", "--program", &f.program]);
    assert!(out.contains(r#"~ content: "hello" => "world""#), "{out}");
    assert_eq!(
        f.read_note().as_deref(),
        Some("hello"),
        "a preview writes nothing"
    );
    f.k.ok(&["up", "--yes", "--program", &f.program]);
    assert_eq!(f.read_note().as_deref(), Some("world"));
    all_same(&f.k.ok(&["up", "--yes", "--json", "--program", &f.program]));

    // From the project directory, without the program: the plugin is found
    // through its `Pulumi.yaml`, and what the state records.
    f.k.ok(&["destroy", "--yes"]);
    assert_eq!(f.read_note(), None, "the file is gone");
    assert!(f.k.resources().is_empty());
}

#[test]
fn a_create_killed_midway_is_kept_pending_then_imported() {
    let f = Files::new("hello");
    f.kill_during("create", &["up", "--yes", "--program", &f.program]);
    // The file was made; the state says a create of it may have finished.
    assert_eq!(f.read_note().as_deref(), Some("hello"));
    f.k.ok(&["state", "verify"]);
    let state = f.k.export();
    assert_eq!(
        pending(&state),
        [("creating".to_owned(), f.urn())],
        "{state}"
    );

    // Creating it again could make a second object: refused, nothing made.
    std::fs::write(&f.note, "touched by hand").expect("write");
    let (_, err) = f.k.expect(1, &["up", "--yes", "--program", &f.program]);
    assert!(err.contains("--import-pending-creates"), "{err}");
    assert_eq!(f.read_note().as_deref(), Some("touched by hand"));
    assert_eq!(pending(&f.k.export()).len(), 1);

    // The operator says which object the create made: it is adopted.
    let id = f.note.display().to_string();
    let urn = f.urn();
    f.k.ok(&["refresh", "--yes", "--import-pending-creates", &urn, &id]);
    let state = f.k.export();
    assert!(pending(&state).is_empty(), "{state}");
    let note = resource(&state, "note");
    assert_eq!(note["id"], id, "{note}");
    assert_eq!(note["outputs"]["content"], "touched by hand", "{note}");

    // The program's content is written back by an update, not a create.
    let out = f.k.ok(&["up", "--yes", "--json", "--program", &f.program]);
    assert_eq!(summary_steps(&out).get("create"), None, "{out}");
    assert_eq!(f.read_note().as_deref(), Some("hello"));
    f.k.ok(&["destroy", "--yes"]);
    assert_eq!(f.read_note(), None);
}

#[test]
fn a_delete_killed_midway_is_finished_by_the_next_destroy() {
    let f = Files::new("hello");
    f.k.ok(&["up", "--yes", "--program", &f.program]);
    f.kill_during("delete", &["destroy", "--yes"]);
    assert_eq!(f.read_note().as_deref(), Some("hello"), "not deleted yet");
    f.k.ok(&["state", "verify"]);
    let state = f.k.export();
    assert_eq!(
        pending(&state),
        [("deleting".to_owned(), f.urn())],
        "{state}"
    );

    let (_, err) = f.k.expect(0, &["destroy", "--yes"]);
    assert!(
        err.contains("interrupted"),
        "the recovery is reported: {err}"
    );
    assert_eq!(f.read_note(), None, "the file is gone");
    let state = f.k.export();
    assert!(pending(&state).is_empty(), "{state}");
    assert!(f.k.resources().is_empty());
}

#[test]
fn ctrl_c_cancels_gracefully_the_step_in_flight_is_saved() {
    let f = Files::new("hello");
    // A second file that waits for the first: it must not start.
    let later = f.add("later", "${note.content}");
    let mark = f.k.path().join("cancelled");
    let child =
        f.k.command(&["up", "--yes", "--program", &f.program])
            .env("LOCALFILE_HANG", "create")
            .env("LOCALFILE_CANCEL_MARK", &mark)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn keel");
    let plugin = hang_pid(&f.note);
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let out = child.wait_with_output().expect("keel ends");
    let err = text_of(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cancelling"), "{err}");
    assert!(err.contains("cancelled by the operator"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&mark).ok().as_deref(),
        Some("cancel received"),
        "the plugin was sent Cancel"
    );
    // The create in flight finished (the plugin was told) and is saved.
    assert_eq!(f.read_note().as_deref(), Some("hello"));
    let state = f.k.export();
    assert!(pending(&state).is_empty(), "{state}");
    assert_eq!(resource(&state, "note")["id"], f.note.display().to_string());
    assert!(!later.exists(), "nothing started after the Ctrl-C");
    assert!(!alive(&plugin), "the plugin stopped with the operation");
    let _ = std::fs::remove_file(format!("{}.hang", f.note.display()));

    let out = f.k.ok(&["up", "--yes", "--json", "--program", &f.program]);
    assert_eq!(summary_steps(&out).get("create"), Some(&1), "{out}");
    assert_eq!(
        std::fs::read_to_string(&later).ok().as_deref(),
        Some("hello")
    );
}

fn text_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_plugin_that_crashes_mid_create_fails_clearly_and_loses_nothing() {
    let f = Files::new("hello");
    f.k.ok(&["up", "--yes", "--program", &f.program]);
    let other = f.add("other", "x");
    let before = f.k.resources();
    let out =
        f.k.command(&["up", "--yes", "--program", &f.program])
            .env("LOCALFILE_CRASH", "create")
            .output()
            .expect("keel");
    let err = text_of(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The error names the resource and the plugin.
    assert!(err.contains("localfile:index:File::other"), "{err}");
    assert!(err.contains("pulumi-resource-localfile"), "{err}");
    assert!(!other.exists());
    // Nothing was lost: the first file and its state are as they were.
    f.k.ok(&["state", "verify"]);
    assert_eq!(f.k.resources(), before);
    assert_eq!(f.read_note().as_deref(), Some("hello"));
    // The next operation, with a healthy plugin, goes on.
    f.k.ok(&["up", "--yes", "--program", &f.program]);
    assert_eq!(std::fs::read_to_string(&other).ok().as_deref(), Some("x"));
}

/// A Pulumi YAML project `files` (program in `Main.yaml`) whose `localfile`
/// plugin is this repository's, run with the Pulumi SDK's Python.
fn yaml_project() -> Keel {
    let mut k = Keel::new();
    k.env
        .push(("PULUMI_PYTHON_CMD".into(), python().to_owned()));
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/plugins/localfile");
    k.write(
        "Pulumi.yaml",
        &format!(
            "name: files\nruntime: yaml\nplugins:\n  providers:\n    - name: localfile\n      path: {}\n",
            plugin.display()
        ),
    );
    k
}

#[test]
fn env_var_mappings_rename_the_variables_a_providers_plugin_sees() {
    let k = yaml_project();
    let note = k.path().join("note.txt");
    // A Pulumi YAML project whose explicit provider maps KEEL_TEST_CRASH_AT
    // to the plugin's LOCALFILE_CRASH.
    k.write(
        "Main.yaml",
        &format!(
            r#"resources:
  local:
    type: pulumi:providers:localfile
    options:
      envVarMappings:
        KEEL_TEST_CRASH_AT: LOCALFILE_CRASH
  note:
    type: localfile:index:File
    properties:
      path: {}
      content: hello
    options:
      provider: ${{local}}
"#,
            note.display()
        ),
    );
    k.write("Pulumi.dev.yaml", "config:\n  keel:providers: plugins\n");
    let dir = k.path().display().to_string();
    // The plugin sees LOCALFILE_CRASH=create: its create crashes.
    let out = k
        .command(&["up", "--yes", "--program", &dir])
        .env("KEEL_TEST_CRASH_AT", "create")
        .output()
        .expect("keel");
    let err = text_of(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("localfile:index:File::note"), "{err}");
    assert!(!note.exists());
    // Without the variable, nothing is mapped: the create succeeds, and the
    // mapping is recorded where Pulumi keeps it.
    k.ok(&["up", "--yes", "--program", &dir]);
    assert_eq!(
        std::fs::read_to_string(&note).ok().as_deref(),
        Some("hello")
    );
    let state = k.export();
    let provider = resource(&state, "local");
    assert_eq!(
        provider["inputs"]["__internal"]["envVarMappings"]["KEEL_TEST_CRASH_AT"], "LOCALFILE_CRASH",
        "{provider}"
    );
}

/// A Pulumi YAML program writes tokens as the language allows
/// (`localfile:notes:Note`, `localfile:notes:readNote`); keel resolves them
/// against the plugin's schema (`localfile:notes/note:Note`), as Pulumi YAML
/// does, and unwraps a function whose schema returns a single value.
#[test]
fn yaml_tokens_resolve_against_the_plugins_schema() {
    let k = yaml_project();
    let note = k.path().join("n.txt");
    k.write(
        "Main.yaml",
        &format!(
            "resources:
  note:
    type: localfile:notes:Note
    properties: {{ path: \"{}\", content: hello }}
outputs:
  text:
    fn::invoke:
      function: localfile:notes:readNote
      arguments: {{ path: \"${{note.path}}\" }}
",
            note.display()
        ),
    );
    let dir = k.path().display().to_string();
    k.ok(&["up", "--yes", "--providers", "plugins", "--program", &dir]);
    assert_eq!(
        std::fs::read_to_string(&note).ok().as_deref(),
        Some("hello")
    );
    let out = k.ok(&["stack", "output", "text"]);
    assert_eq!(out.trim(), "hello");
    // The next update finds the same resource: nothing changes.
    same_again(
        &k,
        &dir,
        "urn:pulumi:dev::files::localfile:notes/note:Note::note",
    );
    k.ok(&[
        "destroy",
        "--yes",
        "--providers",
        "plugins",
        "--program",
        &dir,
    ]);
    assert!(!note.exists());
}

/// A package declaration (`sdks/notes.yaml`) makes package `notes` a
/// parameterization of the `localfile` plugin: keel starts `localfile`,
/// sends it `Parameterize` with the declared value, and its resources and
/// schema are then the package's.
#[test]
fn a_parameterized_package_is_served_by_its_base_plugin() {
    let k = yaml_project();
    let note = k.path().join("p.txt");
    // The value: the text the parameterized plugin puts before contents.
    let value = "note: ";
    let encoded = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(value)
    };
    std::fs::create_dir(k.path().join("sdks")).expect("sdks");
    k.write(
        "sdks/notes.yaml",
        &format!(
            "packageDeclarationVersion: 1\nname: localfile\nversion: 0.1.0\nparameterization:\n  name: notes\n  version: 1.0.0\n  value: {encoded}\n"
        ),
    );
    k.write(
        "Main.yaml",
        &format!(
            "resources:\n  memo:\n    type: notes:index:File\n    properties: {{ path: \"{}\", content: hello }}\n",
            note.display()
        ),
    );
    let dir = k.path().display().to_string();
    k.ok(&["up", "--yes", "--providers", "plugins", "--program", &dir]);
    assert_eq!(
        std::fs::read_to_string(&note).ok().as_deref(),
        Some("note: hello"),
        "the plugin was parameterized with the declared value"
    );
    same_again(&k, &dir, "urn:pulumi:dev::files::notes:index:File::memo");
    // The default provider is named and recorded as Pulumi records a
    // parameterized one: the package's version in its name and `version`,
    // the base plugin and the value in `__internal`.
    let resources = k.resources();
    let provider = &resources["urn:pulumi:dev::files::pulumi:providers:notes::default_1_0_0"];
    assert_eq!(
        provider["inputs"],
        serde_json::json!({
            "version": "1.0.0",
            "__internal": {"name": "localfile", "version": "0.1.0", "parameterization": encoded},
        }),
        "{provider:#}"
    );
    assert!(
        resources["urn:pulumi:dev::files::notes:index:File::memo"]["provider"]
            .as_str()
            .is_some_and(|p| p.contains("pulumi:providers:notes::default_1_0_0::")),
        "{resources:#?}"
    );
    // Without the declaration (and without the program), `destroy` serves
    // the package from what the state records: the same base plugin, given
    // the same parameter, deletes the file.
    std::fs::remove_dir_all(k.path().join("sdks")).expect("remove sdks");
    k.ok(&["destroy", "--yes", "--providers", "plugins"]);
    assert!(!note.exists(), "the parameterized plugin deleted the file");
    assert!(k.resources().is_empty());
}

/// An extension parameterization is not sent to plugins: a project that
/// declares one and serves its base by plugin is refused before anything
/// runs, rather than served by the unparameterized base.
#[test]
fn an_extension_declaration_is_refused_before_anything_runs() {
    let k = yaml_project();
    let note = k.path().join("e.txt");
    std::fs::create_dir(k.path().join("sdks")).expect("sdks");
    k.write(
        "sdks/ext.yaml",
        "packageDeclarationVersion: 1\nname: localfile\nversion: 0.1.0\nextension:\n  name: extras\n  version: 1.0.0\n  value: eA==\n",
    );
    k.write(
        "Main.yaml",
        &format!(
            "resources:\n  memo:\n    type: localfile:index:File\n    properties: {{ path: \"{}\", content: hello }}\n",
            note.display()
        ),
    );
    let dir = k.path().display().to_string();
    let (_, err) = k.expect(
        2,
        &["up", "--yes", "--providers", "plugins", "--program", &dir],
    );
    assert!(
        err.contains("extension parameterization") && err.contains("`localfile`"),
        "{err}"
    );
    assert!(!note.exists(), "nothing ran");
    let exported = k.export();
    assert!(
        exported["deployment"]["resources"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "nothing was recorded: {exported:#}"
    );
}

/// The stack has `urn`, and another `up` of the project in `dir` with
/// plugins changes nothing.
fn same_again(k: &Keel, dir: &str, urn: &str) {
    let urns: Vec<String> = k.resources().into_keys().collect();
    assert!(urns.iter().any(|u| u == urn), "{urn}: {urns:#?}");
    let again = k.ok(&[
        "up",
        "--yes",
        "--providers",
        "plugins",
        "--program",
        dir,
        "--json",
    ]);
    all_same(&again);
}
