//! Pulumi YAML projects through the `keel` binary: a directory whose
//! `Pulumi.yaml` says `runtime: yaml` runs as written (config, variables,
//! resources with options, builtins, outputs), previews with unknown
//! outputs, keeps secrets out of the backend in plaintext, and refuses a
//! bad program with exit status 2 naming file, line and key before
//! anything is written.

mod common;

use std::path::Path;

use common::cli::*;
use serde_json::{json, Value};

/// Writes a project: `Pulumi.yaml` and, when given, `Main.yaml`, in the
/// directory `dir` under the test's directory; returns the directory.
fn project(k: &Keel, dir: &str, pulumi_yaml: &str, main_yaml: Option<&str>) -> String {
    let d = k.path().join(dir);
    std::fs::create_dir_all(&d).expect("project dir");
    std::fs::write(d.join("Pulumi.yaml"), pulumi_yaml).expect("Pulumi.yaml");
    if let Some(m) = main_yaml {
        std::fs::write(d.join("Main.yaml"), m).expect("Main.yaml");
    }
    d.display().to_string()
}

fn outputs(k: &Keel) -> Value {
    serde_json::from_str(&k.ok(&["stack", "output", "--json", "--show-secrets"]))
        .expect("outputs JSON")
}

const SHOP: &str = r#"
config:
  env:
    type: string
    default: dev
  replicas:
    type: int
    default: 2
variables:
  tags:
    team: web
    env: ${env}
  zones:
    fn::split: [",", "a,b,c"]
resources:
  bucket:
    type: aws:s3:Bucket
    properties:
      name: shop-${env}
      tags: ${tags}
      ports: [80, 443]
  site:
    type: aws:Website
    properties:
      bucket: ${bucket.id}
      firstPort: ${bucket.ports[0]}
      team: ${bucket.tags["team"]}
      zone:
        fn::select: [1, "${zones}"]
      policy:
        fn::toJSON: { b: "<x>", a: 1 }
      endpoint: ${bucket.websiteEndpoint}
    options:
      dependsOn: ["${bucket}"]
      customTimeouts: { create: 5m }
      protect: false
outputs:
  url: ${bucket.websiteEndpoint}
  siteType:
    fn::pulumiResourceType: ${site}
  siteName:
    fn::pulumiResourceName: ${site}
  summary: ${pulumi.project}/${pulumi.stack} x${replicas}
  joined:
    fn::join: ["-", "${zones}"]
  policy: ${site.policy}
  literal: "$${not} a reference"
  encoded:
    fn::toBase64: hi
"#;

#[test]
fn a_project_runs_as_written_and_a_second_up_changes_nothing() {
    let k = Keel::new();
    let dir = project(&k, "shop", "name: shop\nruntime: yaml\n", Some(SHOP));
    // A preview: outputs computed by the cloud are unknown until the update.
    let (out, _) = k.expect(0, &["preview", "--program", &dir]);
    assert!(out.contains("url: (unknown"), "{out}");
    assert!(
        !k.backend().join("stacks/dev/checkpoint.json").exists(),
        "a preview of a new stack writes no state"
    );

    k.ok(&["up", "--program", &dir, "--yes"]);
    let o = outputs(&k);
    assert_eq!(
        o["siteType"], "aws:index:Website",
        "`pkg:Name` is `pkg:index:Name`"
    );
    assert_eq!(o["siteName"], "site");
    assert_eq!(o["summary"], "shop/dev x2");
    assert_eq!(o["joined"], "a-b-c");
    assert_eq!(
        o["policy"], r#"{"a":1,"b":"\u003cx\u003e"}"#,
        "Go's JSON encoding"
    );
    assert_eq!(o["literal"], "${not} a reference");
    assert_eq!(o["encoded"], "aGk=");
    let url = o["url"].as_str().expect("url");
    assert!(url.ends_with(".website.sim.example"), "{url}");

    let state = k.export();
    let site = resource(&state, "site");
    assert_eq!(site["inputs"]["firstPort"], 80);
    assert_eq!(site["inputs"]["team"], "web");
    assert_eq!(site["inputs"]["zone"], "b");
    assert_eq!(site["inputs"]["endpoint"], url);
    let bucket_urn = resource(&state, "bucket")["urn"].clone();
    assert!(
        site["dependencies"]
            .as_array()
            .expect("deps")
            .contains(&bucket_urn),
        "{site}"
    );
    assert_eq!(site["propertyDependencies"]["bucket"], json!([bucket_urn]));
    assert_eq!(site["customTimeouts"]["create"], 300.0);

    let again = k.ok(&["up", "--program", &dir, "--yes", "--json"]);
    all_same(&again);
}

#[test]
fn stack_config_overrides_defaults_and_secrets_stay_encrypted() {
    let mut k = Keel::new();
    k.passphrase = Some("correct horse".into());
    let program = r#"name: vault
runtime: yaml
config:
  dbPassword:
    type: string
    secret: true
  size:
    type: int
    default: 1
resources:
  db:
    type: sim:Database
    properties:
      password: ${dbPassword}
      size: ${size}
      token:
        fn::secret: tok-${size}
outputs:
  pw: ${dbPassword}
  size: ${size}
  opened:
    fn::unsecret: ${db.token}
"#;
    let dir = project(&k, "vault", program, None);
    // The declared key has no default: exit 2 naming it, nothing written.
    let (_, err) = k.expect(2, &["up", "--program", &dir, "--yes"]);
    assert!(
        err.contains("Pulumi.yaml:4: key `config.dbPassword`"),
        "{err}"
    );
    assert!(
        err.contains("missing required configuration variable `dbPassword`"),
        "{err}"
    );
    assert!(!k.backend().join("stacks/dev/checkpoint.json").exists());

    k.ok(&[
        "config",
        "set",
        "--secret",
        "dbPassword",
        "hunter22",
        "--program",
        &dir,
    ]);
    k.ok(&["config", "set", "size", "3", "--program", &dir]);
    k.ok(&["up", "--program", &dir, "--yes"]);
    let shown = k.ok(&["stack", "output", "--json"]);
    let shown: Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(shown["pw"], "[secret]");
    assert_eq!(shown["size"], 3, "the stack's value, as the declared int");
    let o = outputs(&k);
    assert_eq!(o["pw"], "hunter22");
    assert_eq!(
        o["opened"], "tok-3",
        "`fn::unsecret` opens it, by the program's choice"
    );
    for (path, bytes) in k.files() {
        let t = text(&bytes);
        assert!(
            !t.contains("hunter22"),
            "plaintext secret in {}",
            path.display()
        );
    }
    let state = k.export();
    let db = resource(&state, "db");
    for key in ["password", "token"] {
        let v = &db["inputs"][key];
        assert_eq!(
            v["4dabf18193072939515e22adb298388d"], "1b47061264138c4ac30d75fd1eb44270",
            "{key}: {v}"
        );
        assert!(v.get("ciphertext").is_some(), "{key} is encrypted: {v}");
    }
}

#[test]
fn secrets_on_a_stack_that_cannot_encrypt_are_refused_before_anything_runs() {
    let k = Keel::new();
    let dir = project(
        &k,
        "p",
        "name: p\nruntime: yaml\nresources:\n  a:\n    type: sim:A\n    properties:\n      s:\n        fn::secret: x\n",
        None,
    );
    let (_, err) = k.expect(2, &["up", "--program", &dir, "--yes"]);
    assert!(err.contains("secrets provider"), "{err}");
    assert!(!k.backend().join("stacks/dev/checkpoint.json").exists());
    assert!(k.cloud().is_empty());
}

/// One bad program: `up` and `preview` exit 2 with every `expect`ed text,
/// and the backend's files are unchanged.
fn refused(k: &Keel, dir: &str, main: &str, expect: &[&str]) {
    std::fs::write(Path::new(dir).join("Main.yaml"), main).expect("Main.yaml");
    let before = k.files();
    for command in [&["up", "--yes"][..], &["preview"]] {
        let o = k.run(&[command, &["--program", dir]].concat());
        let err = text(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{command:?} of\n{main}\nstderr:\n{err}"
        );
        for e in expect {
            assert!(err.contains(e), "{command:?}: `{e}` not in:\n{err}");
        }
    }
    assert_eq!(before, k.files(), "a refused program changes nothing");
}

#[test]
fn bad_programs_exit_2_with_file_line_and_key_before_anything_runs() {
    let k = Keel::new();
    let dir = project(
        &k,
        "bad",
        "name: bad\nruntime: yaml\n",
        Some("resources:\n  a:\n    type: sim:A\n"),
    );
    k.ok(&["up", "--program", &dir, "--yes"]);
    let main = format!("{dir}/Main.yaml");
    let at = |line: usize, key: &str| format!("{main}:{line}: key `{key}`");
    refused(
        &k,
        &dir,
        "resources:\n  a:\n    type: sim:A\n    properties:\n      list: [one]\n  b:\n    type: sim:B\n    properties:\n      x: ${a.list[1]}\n",
        &[&at(9, "resources.b.properties.x"), "list index 1 out-of-bounds for list of length 1"],
    );
    refused(
        &k,
        &dir,
        "resources:\n  a:\n    type: sim:A\n    properties:\n      v: ${ghost.id}\n",
        &[&at(5, "resources.a.properties.v"), "`ghost` not found"],
    );
    refused(
        &k,
        &dir,
        "resources:\n  a:\n    type: sim:A\n    properties:\n      v: ${b.id}\n  b:\n    type: sim:A\n    properties:\n      v: ${a.id}\n",
        &["circular dependency", "a -> b -> a"],
    );
    refused(
        &k,
        &dir,
        "resources:\n  a:\n    type: sim:A\n    options:\n      protected: true\n      envVarMappings: {A: 1}\n",
        &[
            &at(5, "resources.a.options.protected"),
            "unknown resource option `protected`",
            &at(6, "resources.a.options.envVarMappings.A"),
            "names an environment variable: a string",
        ],
    );
    refused(
        &k,
        &dir,
        "outputs:\n  o:\n    fn::join: [\",\"]\n",
        &[&at(3, "outputs.o.fn::join"), "takes a list of two values"],
    );
    refused(
        &k,
        &dir,
        "resources:\n  a:\n    type: sim:A\n  a:\n    type: sim:B\n",
        &[&format!("{main}:4"), "duplicate key (first at line 2)"],
    );
    refused(
        &k,
        &dir,
        "resources:\n  a:\n    properties: {}\n",
        &[&at(2, "resources.a"), "`type` is missing"],
    );
    refused(
        &k,
        &dir,
        "variables:\n  a: 1\nresources:\n  a:\n    type: sim:A\n",
        &["cannot have the same name as variable `a`"],
    );
    refused(
        &k,
        &dir,
        "resources:\n  a:\n    type: sim:A\n    properties:\n      v: ${a.list[1}\n",
        &[
            &at(5, "resources.a.properties.v"),
            "missing closing bracket",
        ],
    );
    // A property that neither the inputs nor the type's `schemas:` entry
    // provide cannot exist on the simulated cloud.
    refused(
        &k,
        &dir,
        "schemas:\n  sim:index:A:\n    outputs:\n      arnish: \"x-{id}\"\nresources:\n  a:\n    type: sim:A\n  b:\n    type: sim:B\n    properties:\n      v: ${a.nothing}\n",
        &[&at(11, "resources.b.properties.v"), "has no property `nothing`"],
    );
}

#[test]
fn layouts_main_subdirectory_pulumi_yaml_file_and_runtime_object() {
    let k = Keel::new();
    // `main:` names the program directory; `pulumi.cwd` is it and
    // `pulumi.rootDirectory` the project's.
    let dir = project(
        &k,
        "withmain",
        "name: withmain\nruntime:\n  name: yaml\nmain: src\n",
        None,
    );
    std::fs::create_dir_all(Path::new(&dir).join("src")).expect("src");
    std::fs::write(Path::new(&dir).join("src/notes.txt"), "from src\n").expect("notes");
    std::fs::write(
        Path::new(&dir).join("src/Main.yaml"),
        "outputs:\n  notes:\n    fn::readFile: notes.txt\n  cwd: ${pulumi.cwd}\n  root: ${pulumi.rootDirectory}\n",
    )
    .expect("Main.yaml");
    k.ok(&["up", "--program", &dir, "--yes", "--stack", "a"]);
    let o: Value =
        serde_json::from_str(&k.ok(&["stack", "output", "--json", "--stack", "a"])).expect("JSON");
    assert_eq!(o["notes"], "from src\n");
    assert!(
        o["cwd"].as_str().expect("cwd").ends_with("withmain/src"),
        "{o}"
    );
    assert!(
        o["root"].as_str().expect("root").ends_with("withmain"),
        "{o}"
    );

    // The program in `Pulumi.yaml` itself, named as the file.
    let one = project(
        &k,
        "single",
        "name: single\nruntime: yaml\nresources:\n  r:\n    type: sim:R\n    properties: { v: 1 }\noutputs:\n  v: ${r.v}\n",
        None,
    );
    k.ok(&[
        "up",
        "--program",
        &format!("{one}/Pulumi.yaml"),
        "--yes",
        "--stack",
        "b",
    ]);
    let o: Value =
        serde_json::from_str(&k.ok(&["stack", "output", "--json", "--stack", "b"])).expect("JSON");
    assert_eq!(o["v"], 1);
}

#[test]
fn options_providers_get_and_keel_extensions() {
    let k = Keel::new();
    let program = r#"name: opts
runtime: yaml
schemas:
  sim:index:Disk:
    outputs:
      serial: "SN-{id}"
resources:
  prov:
    type: pulumi:providers:sim
    defaultProvider: true
  group:
    type: opts:index:Group
    component: true
    options:
      stateMigrations:
        - rename: { from: old, to: disk }
  disk:
    type: sim:Disk
    properties:
      size: 10
    options:
      parent: ${group}
      protect: true
      ignoreChanges: [size]
  copy:
    type: sim:Disk
    get:
      id: ${disk.id}
outputs:
  serial: ${disk.serial}
  copiedSize: ${copy.size}
"#;
    let dir = project(&k, "opts", program, None);
    k.ok(&["up", "--program", &dir, "--yes"]);
    let state = k.export();
    let disk = resource(&state, "disk");
    assert_eq!(disk["protect"], true);
    assert!(
        disk["urn"]
            .as_str()
            .expect("urn")
            .contains("opts:index:Group$sim:index:Disk::disk"),
        "{disk}"
    );
    let prov = resource(&state, "prov");
    let provider = format!(
        "{}::{}",
        prov["urn"].as_str().expect("urn"),
        prov["id"].as_str().expect("id")
    );
    assert_eq!(
        disk["provider"],
        provider.as_str(),
        "the default provider serves the package"
    );
    let copy = resource(&state, "copy");
    assert_eq!(copy["external"], true, "`get` reads the existing object");
    let o = outputs(&k);
    assert_eq!(o["copiedSize"], 10);
    assert!(
        o["serial"].as_str().expect("serial").starts_with("SN-"),
        "{o}"
    );
    // The protected disk refuses a destroy.
    let (_, err) = k.expect(1, &["destroy", "--yes"]);
    assert!(err.contains("protect"), "{err}");
}

/// `replacementTrigger`, `replaceWith` and `hideDiffs` as Pulumi YAML
/// writes them.
fn rotating(trigger: &str, tag: &str) -> String {
    format!(
        r#"
resources:
  key:
    type: aws:kms:Key
    properties:
      description: signing
    options:
      replacementTrigger: {trigger}
  app:
    type: aws:s3:Bucket
    properties:
      name: app
      tags:
        owner: {tag}
      note: kept
    options:
      replaceWith: ["${{key}}"]
      hideDiffs: [tags]
  other:
    type: aws:s3:Bucket
    properties:
      name: other
"#
    )
}

#[test]
fn replacement_trigger_replace_with_and_hide_diffs() {
    let k = Keel::new();
    let dir = project(&k, "rot", "name: rot\nruntime: yaml\n", None);
    let main = Path::new(&dir).join("Main.yaml");
    std::fs::write(&main, rotating("\"2026-11\"", "a")).unwrap();
    k.ok(&["up", "--program", &dir, "--yes"]);
    let first = k.export();
    assert_eq!(resource(&first, "key")["replacementTrigger"], "2026-11");
    assert_eq!(resource(&first, "app")["hideDiff"], json!(["tags"]));
    let key_urn = resource(&first, "key")["urn"].clone();
    assert_eq!(resource(&first, "app")["replaceWith"], json!([key_urn]));

    // The same trigger: nothing to do.
    all_same(&k.ok(&["up", "--program", &dir, "--yes", "--json"]));

    // A hidden change: the update shows that `tags` changed, not how.
    std::fs::write(&main, rotating("\"2026-11\"", "b")).unwrap();
    let (out, _) = k.expect(0, &["preview", "--program", &dir, "--diff"]);
    assert!(out.contains("~ tags (hidden)"), "{out}");
    assert!(!out.contains("owner"), "{out}");
    k.ok(&["up", "--program", &dir, "--yes"]);

    // A new trigger replaces the key, and the app with it; `other` stays.
    std::fs::write(&main, rotating("\"2026-12\"", "b")).unwrap();
    let out = k.ok(&["up", "--program", &dir, "--yes", "--json"]);
    let steps = summary_steps(&out);
    assert_eq!(steps["create-replacement"], 2, "{out}");
    let second = k.export();
    for name in ["key", "app"] {
        assert_ne!(
            resource(&second, name)["id"],
            resource(&first, name)["id"],
            "{name} was replaced"
        );
    }
    assert_eq!(
        resource(&second, "other")["id"],
        resource(&first, "other")["id"]
    );
    assert_eq!(resource(&second, "key")["replacementTrigger"], "2026-12");
}

/// A Pulumi YAML example project of the README (`examples/pulumi-yaml/`).
fn pulumi_yaml_example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/pulumi-yaml")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn the_readme_examples_are_pulumi_yaml_and_match_keels_program_files() {
    let k = Keel::new();
    k.ok(&["up", "--program", &pulumi_yaml_example("site-v1"), "--yes"]);
    // keel's own program file of the same program: the same resources.
    all_same(&k.ok(&[
        "up",
        "--program",
        &example("site-v1.yaml"),
        "--yes",
        "--json",
    ]));
    let ids = k.urns();
    let out = k.ok(&[
        "up",
        "--program",
        &pulumi_yaml_example("site-v2"),
        "--yes",
        "--json",
    ]);
    assert_eq!(
        summary_steps(&out),
        [("same".to_owned(), 6), ("update".to_owned(), 1)].into(),
        "{out}"
    );
    all_same(&k.ok(&[
        "up",
        "--program",
        &example("site-v2.yaml"),
        "--yes",
        "--json",
    ]));
    let renamed = k.urns();
    let logs = |m: &std::collections::BTreeMap<String, String>, name: &str| {
        m.iter()
            .find(|(u, _)| u.ends_with(&format!("::{name}")))
            .map(|(_, id)| id.clone())
            .expect(name)
    };
    assert_eq!(
        logs(&ids, "logs"),
        logs(&renamed, "access-logs"),
        "renamed, not replaced"
    );

    // The migration example: v2's `rename` migration keeps every object.
    let k = Keel::new();
    k.ok(&[
        "up",
        "--program",
        &pulumi_yaml_example("rename-v1"),
        "--yes",
    ]);
    let before: std::collections::BTreeSet<String> = k.urns().into_values().collect();
    all_same(&k.ok(&[
        "up",
        "--program",
        &pulumi_yaml_example("rename-v2"),
        "--yes",
        "--json",
    ]));
    let after: std::collections::BTreeSet<String> = k.urns().into_values().collect();
    assert_eq!(before, after, "the same objects");
    assert!(k.urns().keys().any(|u| u.ends_with("::assets")));
}

/// A program calling functions of every kind the simulated cloud answers:
/// a data source over objects it holds, one over things outside it, a
/// function returning a single value, and a parameterized package's.
const FUNCTIONS: &str = r#"
variables:
  logs:
    fn::invoke:
      function: aws:s3:getBucket
      arguments:
        bucket: legacy-logs
  ami:
    fn::invoke:
      function: aws:ec2/getAmi:getAmi
      arguments:
        owners: ["137112412989"]
        mostRecent: true
      return: id
resources:
  server:
    type: aws:ec2:Instance
    properties:
      ami: ${ami}
      logBucket: ${logs.arn}
outputs:
  logsId: ${logs.id}
  logsArn: ${logs.arn}
  ami: ${ami}
  count:
    fn::invoke:
      function: scalar-returns:invokeSecret
      arguments:
        value: four
  greeting:
    fn::invoke:
      function: hello:doGreet
      arguments:
        input: "well, "
      return: output
"#;

const GREET_PACKAGE: &str = "packageDeclarationVersion: 1
name: parameterized
version: 1.2.3
parameterization:
  name: hello
  version: 0.1.0
  value: R3JlZXQ=
";

#[test]
fn functions_answer_from_the_simulated_cloud() {
    let mut k = Keel::new();
    k.passphrase = Some("functions".into());
    std::fs::write(k.path().join("Pulumi.yaml"), "name: fns\nruntime: yaml\n")
        .expect("Pulumi.yaml");
    std::fs::write(k.path().join("Main.yaml"), FUNCTIONS).expect("Main.yaml");
    std::fs::create_dir_all(k.path().join("sdks")).expect("sdks");
    std::fs::write(k.path().join("sdks/hello.yaml"), GREET_PACKAGE).expect("package");

    // Made outside keel, the bucket is found by its properties.
    k.ok(&[
        "cloud",
        "add",
        "aws:s3:Bucket",
        "b-legacy",
        "--property",
        "bucket=legacy-logs",
        "--property",
        "arn=arn:aws:s3:::legacy-logs",
    ]);
    // `up` with no --program runs the project in the current directory.
    k.ok(&["up", "--yes"]);
    let o = outputs(&k);
    assert_eq!(o["logsId"], "b-legacy");
    assert_eq!(o["logsArn"], "arn:aws:s3:::legacy-logs");
    let ami = o["ami"].as_str().expect("ami").to_owned();
    assert!(
        ami.starts_with("ami-"),
        "a synthesised observation's id: {ami}"
    );
    assert_eq!(o["count"], 4, "a single-value function is unwrapped");
    assert_eq!(o["greeting"], "well, Greet", "the package's parameter");
    let hidden: Value =
        serde_json::from_str(&k.ok(&["stack", "output", "--json"])).expect("outputs");
    assert_eq!(
        hidden["count"], "[secret]",
        "the function's answer is secret"
    );
    let server = resource(&k.export(), "server").clone();
    assert_eq!(server["inputs"]["ami"], ami.as_str());
    assert_eq!(server["inputs"]["logBucket"], "arn:aws:s3:::legacy-logs");

    // The same answers on the next run: nothing changes.
    all_same(&k.ok(&["up", "--yes", "--json"]));

    // Once the cloud holds buckets, a lookup that matches none fails, as a
    // real data source does, and nothing changes.
    std::fs::write(
        k.path().join("Main.yaml"),
        FUNCTIONS.replace("bucket: legacy-logs", "bucket: other-logs"),
    )
    .expect("Main.yaml");
    let before = k.export();
    let (_, err) = k.expect(1, &["up", "--yes"]);
    assert!(
        err.contains("no object of type aws:s3:Bucket matches"),
        "{err}"
    );
    assert_eq!(
        before["deployment"]["resources"],
        k.export()["deployment"]["resources"]
    );
}

#[test]
fn an_invalid_package_declaration_is_refused_before_anything_runs() {
    // A declaration, and what the refusal says of it.
    let check = |declaration: String, says: &str| {
        let k = Keel::new();
        std::fs::write(
            k.path().join("Pulumi.yaml"),
            "name: fns\nruntime: yaml\nresources:\n  a:\n    type: sim:A\n",
        )
        .expect("Pulumi.yaml");
        std::fs::create_dir_all(k.path().join("sdks")).expect("sdks");
        std::fs::write(k.path().join("sdks/bad.yaml"), &declaration).expect("package");
        // Other YAML files are not declarations and are left alone.
        std::fs::write(k.path().join("sdks/notes.yaml"), "just: notes\n").expect("notes");
        let before = k.files();
        let (_, err) = k.expect(2, &["up", "--yes"]);
        assert!(
            err.contains("sdks/bad.yaml: invalid package declaration"),
            "{err}"
        );
        assert!(err.contains(says), "{declaration}: {err}");
        assert_eq!(before, k.files(), "nothing was written");
    };
    check(
        GREET_PACKAGE.replace("R3JlZXQ=", "not base64!"),
        "not base64",
    );
    // A replacement's versions name its default provider: semantic
    // versions, checked before the resources of other packages are made.
    check(
        GREET_PACKAGE.replace("0.1.0", "latest"),
        "`latest` is not a semantic version",
    );
    check(
        GREET_PACKAGE.replace("1.2.3", "v1"),
        "`v1` is not a semantic version",
    );
}

#[test]
fn a_type_alias_keeps_the_object_and_retypes_it() {
    let k = Keel::new();
    let dir = project(
        &k,
        "retype",
        "name: retype\nruntime: yaml\n",
        Some("resources:\n  box:\n    type: old:Box\n    properties:\n      size: 1\n"),
    );
    k.ok(&["up", "--program", &dir, "--yes"]);
    let before = k.cloud();
    assert_eq!(before.len(), 1, "{before:?}");
    let id = before[0]["id"].clone();
    std::fs::write(
        Path::new(&dir).join("Main.yaml"),
        "resources:\n  box:\n    type: new:Box\n    properties:\n      size: 2\n    options:\n      aliases:\n        - type: old:index:Box\n",
    )
    .expect("Main.yaml");
    let out = k.ok(&["up", "--program", &dir, "--yes", "--json"]);
    // The box is updated; the create and delete are its packages' default
    // providers (`new` replaces `old`).
    assert_eq!(
        summary_steps(&out),
        counts(&[("create", 1), ("delete", 1), ("update", 1), ("same", 1)]),
        "{out}"
    );
    let after = k.cloud();
    assert_eq!(after.len(), 1, "one object, not two: {after:?}");
    assert_eq!(after[0]["id"], id, "the same object");
    assert_eq!(after[0]["type"], "new:index:Box", "re-typed");
    assert_eq!(resource(&k.export(), "box")["id"], id);
}

#[test]
fn cloud_add_makes_an_object_to_import() {
    let k = Keel::new();
    let (_, err) = k.expect(2, &["cloud", "add", "not-a-type", "x"]);
    assert!(err.contains("is not a type token"), "{err}");
    let (_, err) = k.expect(2, &["cloud", "add", "a:b:C", "x", "--property", "novalue"]);
    assert!(err.contains("expected KEY=VALUE"), "{err}");
    assert!(
        !k.backend().join("cloud.json").exists(),
        "bad input writes nothing"
    );

    k.ok(&[
        "cloud",
        "add",
        "simple:index:Resource",
        "pre-1",
        "--property",
        "value=true",
    ]);
    let files = k.files();
    let (_, err) = k.expect(2, &["cloud", "add", "simple:index:Resource", "pre-1"]);
    assert!(err.contains("already has an object"), "{err}");
    assert_eq!(files, k.files(), "a refused add changes nothing");
    let objects = k.cloud();
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0]["properties"]["value"], true, "{objects:?}");

    let dir = project(
        &k,
        "imp",
        "name: imp\nruntime: yaml\n",
        Some("resources:\n  it:\n    type: simple:Resource\n    properties:\n      value: true\n    options:\n      import: pre-1\n"),
    );
    let out = k.ok(&["up", "--program", &dir, "--yes", "--json"]);
    assert_eq!(summary_steps(&out).get("import"), Some(&1), "{out}");
    assert_eq!(resource(&k.export(), "it")["id"], "pre-1");
    assert_eq!(k.cloud().len(), 1, "imported, not created");
}

#[test]
fn project_config_may_be_untyped_or_a_typed_array() {
    let k = Keel::new();
    let dir = project(
        &k,
        "cfg",
        "name: cfg\nruntime: yaml\nconfig:\n  inputs: {}\n  zones:\n    type: array\n    items:\n      type: string\n    default: [a, b]\n  count:\n    type: integer\n    default: 3\nresources:\n  r:\n    type: sim:R\n    properties: ${inputs}\noutputs:\n  second:\n    fn::select: [1, \"${zones}\"]\n  count: ${count}\n",
        None,
    );
    // Untyped config is required like any other without a default.
    let (_, err) = k.expect(2, &["up", "--program", &dir, "--yes"]);
    assert!(
        err.contains("missing required configuration variable `inputs`"),
        "{err}"
    );
    k.ok(&[
        "config",
        "set",
        "--program",
        &dir,
        "--path",
        "inputs.length",
        "12",
    ]);
    k.ok(&["up", "--program", &dir, "--yes"]);
    assert_eq!(resource(&k.export(), "r")["inputs"]["length"], 12);
    let o = outputs(&k);
    assert_eq!(o["second"], "b");
    assert_eq!(o["count"], 3);

    // `array` needs the type of its items.
    std::fs::write(
        Path::new(&dir).join("Pulumi.yaml"),
        "name: cfg\nruntime: yaml\nconfig:\n  zones:\n    type: array\n",
    )
    .expect("Pulumi.yaml");
    let (_, err) = k.expect(2, &["up", "--program", &dir, "--yes"]);
    assert!(err.contains("needs `items: {type: ...}`"), "{err}");
}

#[test]
fn a_compiler_writes_the_template() {
    let k = Keel::new();
    let dir = project(
        &k,
        "compiled",
        "name: compiled\nruntime:\n  name: yaml\n  options:\n    compiler: sh ./gen.sh --flavour 'two words'\n",
        None,
    );
    // The compiler sees its arguments, the stack and the stack's config
    // (`PULUMI_CONFIG`, as JSON), and prints the template.
    std::fs::write(
        Path::new(&dir).join("gen.sh"),
        "printf 'resources:\\n  made:\\n    type: sim:Made\\n    properties:\\n      arg: \"%s\"\\n      stack: %s\\n      config: %s\\n' \"$2\" \"$PULUMI_STACK\" \"$PULUMI_CONFIG\"\n",
    )
    .expect("gen.sh");
    k.ok(&["config", "set", "--program", &dir, "size", "3"]);
    k.ok(&["up", "--program", &dir, "--yes"]);
    let made = resource(&k.export(), "made").clone();
    assert_eq!(made["inputs"]["arg"], "two words");
    assert_eq!(made["inputs"]["stack"], "dev");
    assert_eq!(
        made["inputs"]["config"],
        serde_json::json!({"compiled:size": "3"})
    );

    // A secure value reaches the compiler decrypted, and never shows in
    // what keel prints of a failing one.
    let mut k = k;
    k.passphrase = Some("pw".into());
    k.ok(&[
        "config",
        "set",
        "--program",
        &dir,
        "--secret",
        "token",
        "hunter2-xyz",
    ]);
    std::fs::write(
        Path::new(&dir).join("gen.sh"),
        "echo \"$PULUMI_CONFIG\" >&2\nexit 4\n",
    )
    .expect("gen.sh");
    let (out, err) = k.expect(2, &["up", "--program", &dir, "--yes"]);
    assert!(err.contains(r#""compiled:token":"[secret]""#), "{err}");
    assert!(
        !err.contains("hunter2-xyz") && !out.contains("hunter2-xyz"),
        "{err}"
    );
    k.ok(&["config", "rm", "--program", &dir, "token"]);
    k.passphrase = None;

    // A failing compiler, or one not installed, is exit 2 before anything
    // runs, quoting what it said.
    std::fs::write(
        Path::new(&dir).join("gen.sh"),
        "echo 'no cue files' >&2\nexit 3\n",
    )
    .expect("gen.sh");
    let before = k.files();
    let (_, err) = k.expect(2, &["up", "--program", &dir, "--yes"]);
    assert!(err.contains("the compiler `sh ./gen.sh"), "{err}");
    assert!(err.contains("no cue files"), "{err}");
    std::fs::write(
        Path::new(&dir).join("Pulumi.yaml"),
        "name: compiled\nruntime:\n  name: yaml\n  options:\n    compiler: keel-no-such-compiler export\n",
    )
    .expect("Pulumi.yaml");
    let (_, err) = k.expect(2, &["up", "--program", &dir, "--yes"]);
    assert!(
        err.contains("`keel-no-such-compiler` is not installed"),
        "{err}"
    );
    assert_eq!(before, k.files(), "nothing was written");
}
