//! Real Pulumi Python programs on keel, through the `keel` binary and the
//! official SDK (`pulumi==3.272.0` from PyPI): the programs under
//! `tests/python/` talk to keel's resource monitor over gRPC.
//!
//! - `site-v1` -> `site-v2`: a component's child is renamed by a Python
//!   `state_migrations` callback; preview and up run no create or delete,
//!   the bucket keeps its ID and protect flag, the CDN's dependency follows
//!   the new URN, a third up is a no-op (the callback returns `None`).
//! - A raising callback fails with `callback-failed` and the Python message;
//!   a syntax error exits 1 with the traceback's tail; a missing `pulumi`
//!   package and a missing interpreter are clear errors; none changes state.
//! - Stacks exported by Pulumi (`../shared/fixtures/pulumi/`), imported, and
//!   a Python program matching each, preview as all-same steps.
//!
//! The interpreter is `KEEL_PYTHON` when set (`.ci/run` sets it to a
//! virtual environment it made); otherwise the test makes that virtual
//! environment itself under Cargo's target directory, once.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::cli::*;
use common::python::{program, python};
use serde_json::Value;

/// A fixture written by Pulumi.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/pulumi")
        .join(name)
}

/// A working directory whose runs use the test interpreter.
fn keel() -> Keel {
    let mut k = Keel::new();
    k.env.push(("KEEL_PYTHON".into(), python().into()));
    k
}

fn no_create_or_delete(stdout: &str) {
    for (kind, n) in summary_steps(stdout) {
        assert!(
            !kind.contains("create") && !kind.contains("delete") && !kind.contains("replace"),
            "{n} {kind} steps: {stdout}"
        );
    }
}

const BUCKET_V1: &str = "urn:pulumi:dev::site::keel:test:Site$aws:s3/bucket:Bucket::old-bucket";
const BUCKET_V2: &str = "urn:pulumi:dev::site::keel:test:Site$aws:s3/bucket:Bucket::bucket";
const CDN: &str = "urn:pulumi:dev::site::aws:cloudfront:Distribution::cdn";

/// `up` of site-v1: six creates, the stack's outputs from Python exports,
/// the program's output and SDK logs as diagnostics.
fn site_v1(k: &Keel) {
    let out = k.ok(&["up", "--yes", "--json", "--program", &program("site-v1")]);
    assert_eq!(summary_steps(&out), counts(&[("create", 6)]), "{out}");
    let diagnostics: Vec<(String, String)> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "diagnostic")
        .map(|e| {
            (
                e["severity"].as_str().unwrap_or_default().to_owned(),
                e["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for expected in [
        ("info", "deploying the site"),
        ("warning", "the site has no TLS certificate yet"),
    ] {
        assert!(
            diagnostics
                .iter()
                .any(|(s, m)| (s.as_str(), m.as_str()) == expected),
            "{expected:?} in {diagnostics:?}"
        );
    }
    let r = k.resources();
    assert_eq!(r[BUCKET_V1]["protect"], true);
    let stack = &r["urn:pulumi:dev::site::pulumi:pulumi:Stack::site-dev"];
    let arn = stack["outputs"]["bucketArn"].as_str().expect("bucketArn");
    assert!(
        arn.starts_with("arn:sim:aws:s3/bucket:Bucket:old-bucket-"),
        "{arn}"
    );
    assert_eq!(r[CDN]["dependencies"], serde_json::json!([BUCKET_V1]));
}

#[test]
fn a_python_state_migration_renames_a_child_without_replacing_it() {
    let k = keel();
    site_v1(&k);
    let cloud = k.cloud();
    let id = k.resources()[BUCKET_V1]["id"].clone();

    // Preview: the migration runs in memory; nothing is created, deleted
    // or persisted.
    let files = k.files();
    let out = k.ok(&["preview", "--json", "--program", &program("site-v2")]);
    let previewed = migration_events(&out);
    assert_eq!(previewed.len(), 1, "{out}");
    assert_eq!(previewed[0]["successors"][BUCKET_V1], BUCKET_V2, "{out}");
    all_same(&out);
    assert!(k.files() == files, "the preview persisted nothing");

    // Up: the same migration, committed; only same steps.
    let out = k.ok(&["up", "--yes", "--json", "--program", &program("site-v2")]);
    assert_eq!(migration_events(&out), previewed, "{out}");
    no_create_or_delete(&out);
    all_same(&out);
    let r = k.resources();
    assert!(!r.contains_key(BUCKET_V1), "the old URN is gone: {r:?}");
    assert_eq!(r[BUCKET_V2]["id"], id, "the bucket keeps its ID");
    assert_eq!(r[BUCKET_V2]["protect"], true, "and its protect flag");
    assert_eq!(
        r[CDN]["dependencies"],
        serde_json::json!([BUCKET_V2]),
        "references follow the rename"
    );
    assert!(
        !k.export().to_string().contains(BUCKET_V1),
        "no reference to the old URN is left"
    );
    assert_eq!(k.cloud(), cloud, "the cloud's objects are the ones v1 made");

    // Again: the callback answers None; nothing to do.
    let out = k.ok(&["up", "--yes", "--json", "--program", &program("site-v2")]);
    assert!(migration_events(&out).is_empty(), "{out}");
    all_same(&out);
    assert_eq!(k.cloud(), cloud);
}

/// A copy of `site-v2` with a line of its migration replaced.
fn site_v2_variant(k: &Keel, name: &str, from: &str, to: &str) -> String {
    let source = std::fs::read_to_string(Path::new(&program("site-v2")).join("__main__.py"))
        .expect("site-v2");
    assert!(source.contains(from), "site-v2 has `{from}`");
    let dir = k.path().join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("__main__.py"), source.replace(from, to)).expect("write");
    std::fs::copy(
        Path::new(&program("site-v2")).join("Pulumi.yaml"),
        dir.join("Pulumi.yaml"),
    )
    .expect("copy");
    dir.display().to_string()
}

/// Runs `up` of `dir`, expecting failure (exit 1) and no change to the
/// state or the cloud; returns stderr.
fn fails_unchanged(k: &Keel, dir: &str) -> String {
    let (resources, cloud) = (k.resources(), k.cloud());
    let (_, err) = k.expect(1, &["up", "--yes", "--program", dir]);
    assert_eq!(k.resources(), resources, "the state is unchanged");
    assert_eq!(k.cloud(), cloud, "the cloud is unchanged");
    err
}

/// A failing variant of site-v2 and what its error must say.
struct Failing {
    name: &'static str,
    from: &'static str,
    to: &'static str,
    says: &'static [&'static str],
}

#[test]
fn a_raising_callback_or_a_syntax_error_fails_and_changes_nothing() {
    let cases = [
        // The callback raises: `callback-failed` with the Python message,
        // naming the component.
        Failing {
            name: "raises",
            from: "    if not successors:\n",
            to: "    raise ValueError(\"the bucket policy is unknown\")\n    if not successors:\n",
            says: &[
                "[callback-failed]",
                "the bucket policy is unknown",
                "site::keel:test:Site::site",
            ],
        },
        // The program does not parse: exit 1 with the traceback's tail.
        Failing {
            name: "broken",
            from: "def rename_bucket(args",
            to: "def rename_bucket((args",
            says: &["SyntaxError", "broken/__main__.py\", line"],
        },
    ];
    for case in &cases {
        let k = keel();
        site_v1(&k);
        let dir = site_v2_variant(&k, case.name, case.from, case.to);
        let err = fails_unchanged(&k, &dir);
        for expected in case.says {
            assert!(
                err.contains(expected),
                "{}: `{expected}` in {err}",
                case.name
            );
        }
    }
}

#[test]
fn a_missing_sdk_or_interpreter_is_a_clear_error() {
    let k = keel();
    site_v1(&k);
    // The same interpreter without site-packages cannot import `pulumi`.
    let wrapper = k.path().join("python-without-site");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec '{}' -S \"$@\"\n", python()),
    )
    .expect("write");
    let made_executable = Command::new("chmod")
        .arg("+x")
        .arg(&wrapper)
        .status()
        .expect("chmod");
    assert!(made_executable.success());
    let mut no_sdk = keel();
    no_sdk.dir = k.dir;
    no_sdk.env = vec![("KEEL_PYTHON".into(), wrapper.display().to_string())];
    let err = fails_unchanged(&no_sdk, &program("site-v1"));
    assert!(err.contains("`pulumi` cannot be imported"), "{err}");
    assert!(err.contains("pip install pulumi"), "says what to do: {err}");

    no_sdk.env = vec![("KEEL_PYTHON".into(), "/nonexistent/python".into())];
    let err = fails_unchanged(&no_sdk, &program("site-v1"));
    assert!(
        err.contains("could not start the Python interpreter"),
        "{err}"
    );
}

#[test]
fn a_directory_without_main_is_bad_usage() {
    let k = keel();
    std::fs::create_dir_all(k.path().join("empty")).expect("dir");
    let (_, err) = k.expect(2, &["up", "--yes", "--program", "empty"]);
    assert!(err.contains("has no __main__.py"), "{err}");
    assert!(!k.backend().join("stacks").exists(), "no stack was made");
}

#[test]
fn refresh_and_destroy_take_the_program_directory_for_its_project() {
    let k = keel();
    let dir = program("rename-component");
    k.ok(&["up", "--yes", "--stack", "s", "--program", &dir]);
    let out = k.ok(&[
        "refresh",
        "--yes",
        "--json",
        "--stack",
        "s",
        "--program",
        &dir,
    ]);
    all_same(&out);
    let out = k.ok(&[
        "destroy",
        "--yes",
        "--json",
        "--stack",
        "s",
        "--program",
        &dir,
    ]);
    assert_eq!(summary_steps(&out), counts(&[("delete", 4)]), "{out}");
}

/// One Pulumi fixture: imported into `stack`, the program previews as all
/// same steps. `edit` adapts the file before import (`None`: as Pulumi
/// wrote it).
struct FixtureCase {
    file: &'static str,
    stack: &'static str,
    program: &'static str,
    passphrase: Option<&'static str>,
    edit: Option<fn(&mut Value)>,
}

fn check(case: &FixtureCase) {
    let mut k = keel();
    k.passphrase = case.passphrase.map(str::to_owned);
    let fixture_path = fixture(case.file);
    let bytes = std::fs::read(&fixture_path)
        .unwrap_or_else(|e| panic!("cannot read the fixture {}: {e}", fixture_path.display()));
    let mut file: Value = serde_json::from_slice(&bytes).expect("fixture JSON");
    if let Some(edit) = case.edit {
        edit(&mut file);
    }
    let path = k.write("import.json", &file.to_string());
    k.ok(&["stack", "import", "--stack", case.stack, "--file", &path]);
    let before = k.files();
    // Pulumi deployed these stacks with real plugins: keel previews them on
    // the simulated cloud only when told to, and says so.
    let (out, err) = k.expect(
        0,
        &[
            "preview",
            "--json",
            "--providers",
            "sim",
            "--stack",
            case.stack,
            "--program",
            &program(case.program),
        ],
    );
    let providers = file["deployment"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .any(|r| {
            r["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("pulumi:providers:"))
        });
    let said = format!("{out}{err}").contains(
        "is recorded as served by its plugin (real objects), but this preview uses the simulated cloud",
    );
    assert_eq!(
        said, providers,
        "{}: the preview says it simulates a real stack's packages: {out}{err}",
        case.file
    );
    all_same(&out);
    let imported = file["deployment"]["resources"]
        .as_array()
        .expect("resources")
        .len();
    let same = summary_steps(&out)["same"] as usize;
    assert_eq!(
        same, imported,
        "{}: every resource is a same step",
        case.file
    );
    assert!(
        k.files() == before,
        "{}: the preview persisted nothing",
        case.file
    );
}

#[test]
fn pulumi_stacks_imported_preview_all_same_with_their_python_programs() {
    let cases = [
        // Components renamed through aliases, exactly as Pulumi wrote it.
        FixtureCase {
            file: "tests__integration__aliases__rename_component__step1__stack2.json",
            stack: "asdsa",
            program: "rename-component",
            passphrase: None,
            edit: None,
        },
        // A custom resource with its default provider and secret outputs.
        // The fixture's passphrase is not published: its secrets provider
        // is dropped and keel encrypts the plaintext secrets with a new one.
        FixtureCase {
            file: "provider__testdata__recorded__TestProviderUpgrade__index_randompassword__4.16.0__stack.json",
            stack: "test",
            program: "random-password",
            passphrase: Some("correct horse"),
            edit: Some(|f| {
                f["deployment"]
                    .as_object_mut()
                    .expect("deployment")
                    .remove("secrets_providers");
            }),
        },
        // Versioned default providers (`default_4_18_0`, and a prerelease
        // with build metadata), the AWS one configured by `aws:region`: a
        // program asking for the same versions keeps every resource. The
        // Pulumi service encrypted the commands' scripts: they become the
        // plaintexts the program registers.
        FixtureCase {
            file: "examples__ec2__stack.json",
            stack: "test",
            program: "command-ec2",
            passphrase: Some("correct horse"),
            edit: Some(|f| {
                let deployment = f["deployment"].as_object_mut().expect("deployment");
                deployment.remove("secrets_providers");
                for r in deployment["resources"].as_array_mut().expect("resources") {
                    let name = r["urn"]
                        .as_str()
                        .and_then(|u| u.rsplit("::").next())
                        .unwrap_or_default()
                        .to_owned();
                    for part in ["inputs", "outputs"] {
                        if let Some(create) = r[part].get_mut("create") {
                            assert!(create.get("ciphertext").is_some(), "{name}: {create}");
                            let text = serde_json::to_string(&format!("{name} command"))
                                .expect("JSON");
                            *create = serde_json::json!({
                                "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
                                "plaintext": text,
                            });
                        }
                    }
                }
            }),
        },
    ];
    for case in &cases {
        check(case);
    }
}

#[test]
fn python_secrets_need_a_passphrase_and_never_reach_disk_in_plaintext() {
    let mut k = keel();
    let dir = k.path().join("secrets");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("__main__.py"),
        "import pulumi\n\
         b = pulumi.CustomResource('aws:s3/bucket:Bucket', 'b',\n\
         \x20   {'password': pulumi.Output.secret('hunter2')})\n\
         pulumi.export('pw', pulumi.Output.secret('exported-hunter2'))\n",
    )
    .expect("write");
    let dir = dir.display().to_string();
    let plaintext_on_disk = |k: &Keel| {
        k.files()
            .iter()
            .any(|(_, bytes)| text(bytes).contains("hunter2"))
    };

    let (_, err) = k.expect(1, &["up", "--yes", "--program", &dir]);
    assert!(
        err.contains("aws:s3/bucket:Bucket::b"),
        "names the resource: {err}"
    );
    assert!(
        err.contains("KEEL_CONFIG_PASSPHRASE"),
        "says what to do: {err}"
    );
    assert!(!plaintext_on_disk(&k), "no plaintext secret was written");

    k.passphrase = Some("correct horse".into());
    let out = k.ok(&["up", "--yes", "--program", &dir]);
    assert!(out.contains("pw: [secret]"), "{out}");
    assert!(!plaintext_on_disk(&k), "secrets are encrypted at rest");
    let shown = k.ok(&["stack", "export", "--show-secrets"]);
    assert!(shown.contains("exported-hunter2"), "{shown}");
}

/// A provider that prints the secret it was sent, logs it and fails
/// quoting it (`dynamic-leaky-error`): keel's
/// output, its `--json` events, the stack's history and every state file
/// show `[secret]` where the plaintext was.
#[test]
fn a_providers_words_never_carry_the_secrets_it_was_sent() {
    let mut k = keel();
    k.passphrase = Some("password".into());
    let dir = program("dynamic-leaky-error");
    let leaked = "hunter2-leaky-xyz";
    for json in [false, true] {
        let mut args = vec!["up", "--yes", "--program", &dir];
        if json {
            args.push("--json");
        }
        let (out, err) = k.expect(1, &args);
        let said = format!("{out}{err}");
        assert!(!said.contains(leaked), "{said}");
        assert!(
            said.contains("is too weak"),
            "the error is still told: {said}"
        );
        assert!(said.contains("password [secret] is too weak"), "{said}");
        // `pulumi.log` in a dynamic provider goes to its stderr (the SDK's
        // provider server has no engine connection): a printed line, masked.
        assert!(
            said.contains("logged the vault password [secret]"),
            "{said}"
        );
    }
    let history = k.ok(&["stack", "history", "--json"]);
    assert!(history.contains("[secret]"), "{history}");
    for (path, bytes) in k.files() {
        assert!(!text(&bytes).contains(leaked), "{}", path.display());
    }
}

/// Pulumi's `tests/integration/dynamic/python`, in keel's words: a dynamic
/// provider (`pulumi-python:dynamic:Resource`) is served by the
/// `python -m pulumi.dynamic` plugin, never by the simulated cloud. Its
/// `create()` writes a real file and answers a random token, which is in the
/// state and the same after a second `up`; `destroy` removes the file.
#[test]
fn a_dynamic_provider_writes_a_real_file_and_its_output_is_stable() {
    let mut k = keel();
    // The SDK sends the serialized provider (`__provider`) as a secret.
    k.passphrase = Some("password".into());
    let file = k.path().join("note.txt");
    k.env
        .push(("KEEL_TEST_FILE".into(), file.display().to_string()));
    let dir = program("dynamic-counter");
    let out = k.ok(&["up", "--yes", "--json", "--program", &dir]);
    assert_eq!(
        std::fs::read_to_string(&file).expect("the provider wrote the file"),
        "written by a dynamic provider",
        "{out}"
    );
    let token = |k: &Keel| {
        let state = k.export();
        let note = resource(&state, "note");
        assert_eq!(note["type"], "pulumi-python:dynamic:Resource", "{note}");
        note["outputs"]["token"]
            .as_str()
            .unwrap_or_else(|| panic!("a token in {note}"))
            .to_owned()
    };
    // The output says which packages were real.
    let said: Vec<String> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "diagnostic")
        .filter_map(|e| e["message"].as_str().map(str::to_owned))
        .collect();
    assert!(
        said.iter()
            .any(|m| m.contains("package `pulumi-python` is served by its plugin (real)")),
        "{said:?}"
    );
    // The plugin's stderr is the operation's diagnostic.
    let wrote = format!("[pulumi-resource-pulumi-python] writing {}", file.display());
    assert!(said.contains(&wrote), "{wrote} in {said:?}");
    let first = token(&k);
    assert_eq!(first.len(), 32, "{first}");
    // The summary and the state say the package was real.
    assert_eq!(summary(&out)["served"]["pulumi-python"], "plugin", "{out}");
    let plugins = &k.export()["deployment"]["manifest"]["plugins"];
    assert!(
        plugins.as_array().is_some_and(|p| p
            .iter()
            .any(|e| e["name"] == "pulumi-python" && e["servedBy"] == "plugin")),
        "{plugins}"
    );
    let out = k.ok(&["up", "--yes", "--json", "--program", &dir]);
    all_same(&out);
    assert_eq!(token(&k), first, "{out}");
    // Nothing of the simulated cloud served it.
    assert!(k.cloud().is_empty(), "{:?}", k.cloud());
    let out = k.ok(&["destroy", "--yes", "--json", "--program", &dir]);
    assert!(!file.exists(), "the provider deleted the file: {out}");
    assert!(k.resources().is_empty());
}

/// `--providers plugins`: every package but keel's own is served by its
/// discovered plugin; one found nowhere fails the operation with an error
/// naming the package and the places looked, and nothing is simulated.
#[test]
fn with_providers_plugins_a_missing_plugin_is_an_error_naming_where_keel_looked() {
    let mut k = keel();
    let home = k.path().join("pulumi-home");
    std::fs::create_dir_all(home.join("plugins")).expect("plugin cache");
    k.env
        .push(("PULUMI_HOME".into(), home.display().to_string()));
    k.env
        .push(("PULUMI_IGNORE_AMBIENT_PLUGINS".into(), "1".into()));
    let dir = program("site-v1");
    let out = k.run(&["up", "--yes", "--providers", "plugins", "--program", &dir]);
    let text = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("no plugin for package `aws`"), "{text}");
    assert!(
        text.contains(&home.join("plugins").display().to_string()),
        "{text}"
    );
    assert!(k.cloud().is_empty(), "nothing simulated: {:?}", k.cloud());
    // The default is the simulated cloud, as before.
    k.ok(&["up", "--yes", "--program", &dir]);
    assert!(!k.cloud().is_empty());
}

/// Remote components (issue 18 items 4 and 5), in keel's words: the
/// program's `keelcomp:index:Greeter` is registered with `remote: true`, so
/// keel sends it to the `keelcomp` plugin's `Construct` (a keel-written
/// `pulumi.provider` plugin next to the program, found through
/// `Pulumi.yaml` `plugins.providers`); the plugin's own SDK registers the
/// component, a child component and a dynamic-provider note under it back
/// into keel's monitor. The method `Greeter/greet` goes to the plugin's
/// `Call`, and the function `keelcomp:index:shout` to its `Invoke`. A second
/// `up` is all `same` (the unchanged provider is configured again, so the
/// method still gets the component as a resource reference).
#[test]
fn a_remote_component_is_constructed_by_its_plugin_with_methods_and_functions() {
    let mut k = keel();
    // The dynamic note's serialized provider is a secret.
    k.passphrase = Some("password".into());
    k.env.push(("PULUMI_PYTHON_CMD".into(), python().into()));
    let dir = program("remote-component");
    let up = |k: &Keel, more: &[&str]| {
        let mut args = vec![
            "up",
            "--yes",
            "--json",
            "--providers",
            "plugins",
            "--program",
            &dir,
        ];
        args.extend_from_slice(more);
        k.ok(&args)
    };
    let out = up(&k, &["--debug"]);
    assert_eq!(summary_steps(&out), counts(&[("create", 6)]), "{out}");
    let check = |k: &Keel, out: &str| {
        let state = k.export();
        let stack = resource(&state, "remote-component-dev");
        let outputs = &stack["outputs"];
        assert_eq!(outputs["message"], "Hello, world", "{out}");
        assert_eq!(outputs["greeted"], "Hello, Alice!", "{out}");
        assert_eq!(outputs["shout"], "QUIET", "{out}");
        assert_eq!(outputs["noteId"], "note-Hello", "{out}");
        // The plugin registered the component and its children.
        let greeter = resource(&state, "hello");
        assert_eq!(greeter["type"], "keelcomp:index:Greeter", "{greeter}");
        assert_eq!(greeter["outputs"]["message"], "Hello, world", "{greeter}");
        let part = resource(&state, "hello-part");
        assert_eq!(part["parent"], greeter["urn"], "{part}");
        let note = resource(&state, "hello-note");
        assert_eq!(note["parent"], part["urn"], "{note}");
        assert_eq!(note["id"], "note-Hello", "{note}");
    };
    check(&k, &out);
    // An ordinary plugin's output is debug output (as under Pulumi): its
    // stderr line is shown with `--debug` only.
    let plugin_lines = |out: &str| -> Vec<(String, String)> {
        events(out)
            .into_iter()
            .filter(|e| e["event"] == "diagnostic")
            .map(|e| {
                let field = |k: &str| e[k].as_str().unwrap_or("").to_owned();
                (field("severity"), field("message"))
            })
            .filter(|(_, m)| m.starts_with("[pulumi-resource-keelcomp]"))
            .collect()
    };
    let said = plugin_lines(&out);
    assert!(
        said.iter().all(|(s, _)| s == "debug")
            && said
                .iter()
                .any(|(_, m)| m == "[pulumi-resource-keelcomp] constructing hello"),
        "{said:?}"
    );
    let out = up(&k, &[]);
    assert_eq!(plugin_lines(&out), [], "{out}");
    all_same(&out);
    check(&k, &out);
    assert!(k.cloud().is_empty(), "nothing simulated: {:?}", k.cloud());
}

/// A function of a package the simulated cloud serves (the default) is
/// answered by it: a lookup among the objects it holds finds the match
/// (whichever way its type token is written), and a lookup of something
/// outside it gets a stable ID.
#[test]
fn an_invoke_to_a_simulated_package_is_answered_by_the_simulated_cloud() {
    let k = keel();
    let dir = program("invoke-simulated");
    k.ok(&[
        "cloud",
        "add",
        "aws:s3/bucket:Bucket",
        "b-1",
        "--property",
        "bucket=legacy",
        "--property",
        "arn=arn:legacy",
    ]);
    let up_outputs = || -> Value {
        k.ok(&["up", "--yes", "--program", &dir]);
        serde_json::from_str(&k.ok(&["stack", "output", "--json"])).expect("outputs")
    };
    let outputs = up_outputs();
    let ami = outputs["ami"].as_str().expect("an ami id").to_owned();
    assert!(ami.starts_with("ami-"), "{outputs}");
    assert_eq!(outputs["bucketArn"], "arn:legacy");
    all_same(&k.ok(&["up", "--yes", "--json", "--program", &dir]));

    k.ok(&[
        "cloud",
        "add",
        "aws:s3:Bucket",
        "b-0",
        "--property",
        "bucket=other",
    ]);
    let again = up_outputs();
    assert_eq!(again["ami"], ami.as_str(), "the same ID every run");
    assert_eq!(again["bucketArn"], "arn:legacy", "b-0 does not match");
}
