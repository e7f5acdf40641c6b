//! Program files through the `keel` binary: every kind of bad file is
//! refused with exit status 2, a message naming the file, the resource and
//! the key, and state files left byte-identical; and the features of good
//! files (config, embedded references, secrets, JSON files, options).

mod common;

use common::cli::*;

use serde_json::Value;

impl Keel {
    fn state(&self) -> Value {
        serde_json::from_str(&self.ok(&["stack", "export"])).expect("export JSON")
    }
}

const GOOD: &str = "name: site\nresources:\n  b: { type: \"aws:s3/bucket:Bucket\" }\n";

/// One bad file: `up` (and `preview`) exit 2 with every `expect`ed text
/// on stderr, and the backend's files do not change.
fn check(k: &Keel, name: &str, content: &str, expect: &[&str]) {
    let path = k.write(name, content);
    let before = k.files();
    assert!(!before.is_empty(), "the stack has state to protect");
    for command in ["up", "preview"] {
        let o = k.run(&[command, "--program", &path]);
        let err = text(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{command} {name}: expected exit 2\nstdout:\n{}\nstderr:\n{err}",
            text(&o.stdout)
        );
        assert!(
            err.contains(name),
            "{command} {name}: the file is named: {err}"
        );
        for e in expect {
            assert!(err.contains(e), "{command} {name}: `{e}` not in:\n{err}");
        }
        assert!(o.stdout.is_empty(), "{command} {name}: nothing ran");
        assert_eq!(k.files(), before, "{command} {name}: state untouched");
    }
}

#[test]
fn bad_program_files_exit_2_naming_file_resource_and_key() {
    let k = Keel::new();
    k.ok(&["up", "--program", &k.write("good.yaml", GOOD)]);

    check(
        &k,
        "unknown-key.yaml",
        "name: p\nresources:\n  b:\n    type: a:b:C\n    propertiez: { x: 1 }\n",
        &["resource `b`", "key `propertiez`", "unknown key"],
    );
    check(
        &k,
        "unknown-option.yaml",
        "name: p\nresources:\n  b:\n    type: a:b:C\n    options: { protected: true }\n",
        &["resource `b`", "key `options.protected`", "unknown key"],
    );
    check(
        &k,
        "unknown-top-key.yaml",
        "name: p\nresource: {}\n",
        &["key `resource`", "unknown key"],
    );
    check(
        &k,
        "unknown-reference.yaml",
        "name: p\nresources:\n  b:\n    type: a:b:C\n    properties: { v: \"x-${nope.arn}\" }\n",
        &[
            "resource `b`",
            "key `properties.v`",
            "unknown resource `nope`",
        ],
    );
    check(
        &k,
        "unknown-depends-on.yaml",
        "name: p\nresources:\n  b:\n    type: a:b:C\n    options: { dependsOn: [ghost] }\n",
        &[
            "resource `b`",
            "key `options.dependsOn[0]`",
            "unknown resource `ghost`",
        ],
    );
    check(
        &k,
        "unknown-config.yaml",
        "name: p\nresources:\n  b:\n    type: a:b:C\n    properties: { v: \"${config.region}\" }\n",
        &["resource `b`", "key `properties.v`", "config key `region`"],
    );
    check(
        &k,
        "cycle.yaml",
        "name: p\nresources:\n  a: { type: \"a:b:C\", properties: { v: \"${b.out}\" } }\n  b: { type: \"a:b:C\", options: { parent: a } }\n",
        &["resource `b`", "key `options.parent`", "reference cycle: a -> b -> a"],
    );
    check(
        &k,
        "bad-type.yaml",
        "name: p\nresources:\n  b: { type: \"aws:Bucket\" }\n",
        &[
            "resource `b`",
            "key `type`",
            "`aws:Bucket` is not a type token",
        ],
    );
    check(
        &k,
        "invalid.yaml",
        "name: p\nresources:\n  b: { type: [unclosed\n",
        &["invalid YAML", "line"],
    );
    check(
        &k,
        "invalid.json",
        "{\"name\": \"p\", \"resources\": {",
        &["invalid JSON", "line"],
    );
    check(
        &k,
        "wrong-type.yaml",
        "name: p\nresources:\n  b:\n    type: a:b:C\n    options: { protect: \"yes\" }\n",
        &[
            "resource `b`",
            "key `options.protect`",
            "expected true or false, found a string",
        ],
    );
    check(
        &k,
        "component-id.yaml",
        "name: p\nresources:\n  c: { type: \"a:b:C\", component: true }\n  b: { type: \"a:b:D\", properties: { v: \"${c.id}\" } }\n",
        &["resource `b`", "key `properties.v`", "`c` is a component, which has no ID"],
    );
    check(
        &k,
        "migrations.yaml",
        "name: p\nresources:\n  c:\n    type: a:b:C\n    component: true\n    options:\n      stateMigrations:\n        - rename: { from: old }\n        - command: []\n",
        &[
            "resource `c`",
            "key `options.stateMigrations[0].rename`",
            "needs `from` and `to`",
            "key `options.stateMigrations[1].command`",
            "needs a non-empty argv list",
        ],
    );
    check(
        &k,
        "bad-secret.yaml",
        "name: p\nresources:\n  b:\n    type: a:b:C\n    properties: { v: { \"fn::secret\": x, other: 1 } }\n",
        &["resource `b`", "key `properties.v`", "`fn::secret` must be the only key"],
    );
    check(
        &k,
        "no-name.yaml",
        "resources: {}\n",
        &["key `name`", "missing"],
    );
}

#[test]
fn program_features_config_references_secrets_and_options() {
    let k = Keel::new();
    // The same structure in JSON.
    let program = serde_json::json!({
        "name": "shop",
        "config": { "env": "prod", "token": { "fn::secret": "s3cr3t" } },
        "resources": {
            "web": { "type": "shop:web:Site", "component": true },
            "logs": {
                "type": "aws:s3/bucket:Bucket",
                "properties": { "name": "logs-${config.env}" },
                "options": { "parent": "web", "retainOnDelete": true }
            },
            "bucket": {
                "type": "aws:s3/bucket:Bucket",
                "properties": {
                    "name": "shop-${config.env}",
                    "website": { "index": "index.html" },
                    "password": { "fn::secret": "hunter2" },
                    "token": "${config.token}",
                    "logTarget": "${logs.id}",
                    "owner": "${web.urn}"
                },
                "options": {
                    "parent": "web",
                    "protect": true,
                    "dependsOn": ["logs"],
                    "ignoreChanges": ["tags"],
                    "replaceOnChanges": ["name"],
                    "additionalSecretOutputs": ["arn"],
                    "customTimeouts": { "create": "5m" },
                    "deletedWith": "web"
                }
            },
            "cdn": {
                "type": "aws:cloudfront:Distribution",
                "properties": {
                    "origin": "https://${bucket.websiteEndpoint}/${bucket.website.index}",
                    "escaped": "$${not.a.reference}"
                }
            }
        },
        "outputs": { "url": "${cdn.domainName}", "secret": "${bucket.password}" }
    });
    let path = k.write(
        "shop.json",
        &serde_json::to_string_pretty(&program).unwrap(),
    );
    // Secrets need a provider: without a passphrase, nothing runs.
    let (_, err) = k.expect(2, &["up", "--program", &path]);
    assert!(err.contains("KEEL_CONFIG_PASSPHRASE"), "{err}");
    let mut k = k;
    k.passphrase = Some("correct horse".into());
    let out = k.ok(&["up", "--program", &path]);
    assert!(
        out.contains("secret: [secret]"),
        "secrets are masked: {out}"
    );
    // Encrypted at rest: no byte of the backend holds a plaintext secret.
    let stacks = k.files();
    let stacks = stacks
        .iter()
        .filter(|(f, _)| f.to_string_lossy().contains("stacks"));
    let mut checked = 0;
    for (file, bytes) in stacks {
        checked += 1;
        let t = text(bytes);
        assert!(
            !t.contains("hunter2") && !t.contains("s3cr3t"),
            "{}: {t}",
            file.display()
        );
    }
    assert!(checked >= 2, "the checkpoint and the journal were checked");
    let stored = k.state();
    assert_eq!(
        stored["deployment"]["secrets_providers"]["type"],
        "passphrase"
    );
    let exported = stored.to_string();
    assert!(
        !exported.contains("hunter2") && exported.contains("\"ciphertext\":\"v1:"),
        "{exported}"
    );
    let state: Value =
        serde_json::from_str(&k.ok(&["stack", "export", "--show-secrets"])).expect("export JSON");
    let find = |name: &str| {
        state["deployment"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["urn"].as_str().unwrap().ends_with(&format!("::{name}")))
            .cloned()
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let (web, logs, bucket, cdn) = (find("web"), find("logs"), find("bucket"), find("cdn"));
    let sig = "4dabf18193072939515e22adb298388d";
    assert_eq!(bucket["inputs"]["name"], "shop-prod");
    assert_eq!(
        bucket["inputs"]["password"][sig],
        "1b47061264138c4ac30d75fd1eb44270"
    );
    assert_eq!(bucket["inputs"]["password"]["plaintext"], "\"hunter2\"");
    assert_eq!(bucket["inputs"]["token"]["plaintext"], "\"s3cr3t\"");
    assert_eq!(bucket["inputs"]["logTarget"], logs["id"]);
    assert_eq!(bucket["inputs"]["owner"], web["urn"]);
    assert_eq!(bucket["parent"], web["urn"]);
    assert_eq!(bucket["protect"], true);
    assert_eq!(bucket["deletedWith"], web["urn"]);
    assert_eq!(bucket["ignoreChanges"], serde_json::json!(["tags"]));
    assert_eq!(bucket["replaceOnChanges"], serde_json::json!(["name"]));
    assert_eq!(
        bucket["additionalSecretOutputs"],
        serde_json::json!(["arn"])
    );
    assert_eq!(bucket["customTimeouts"]["create"], 300);
    let deps = bucket["dependencies"].as_array().unwrap();
    assert!(
        deps.contains(&logs["urn"]) && deps.contains(&web["urn"]),
        "{deps:?}"
    );
    assert_eq!(
        bucket["propertyDependencies"]["logTarget"],
        serde_json::json!([logs["urn"]])
    );
    assert_eq!(logs["retainOnDelete"], true);
    let endpoint = bucket["outputs"]["websiteEndpoint"].as_str().unwrap();
    assert_eq!(
        cdn["inputs"]["origin"],
        format!("https://{endpoint}/index.html")
    );
    assert_eq!(cdn["inputs"]["escaped"], "${not.a.reference}");
    assert_eq!(
        cdn["propertyDependencies"]["origin"],
        serde_json::json!([bucket["urn"]])
    );
    let stack = find("shop-dev");
    assert_eq!(stack["outputs"]["url"], cdn["outputs"]["domainName"]);
    assert_eq!(stack["outputs"]["secret"]["plaintext"], "\"hunter2\"");

    // state show masks secrets too.
    let tree = k.ok(&["state", "show", "--json"]);
    assert!(!tree.contains("hunter2"), "{tree}");

    // Protect holds: destroy refuses, exit 1, naming the resource.
    let o = k.run(&["destroy", "--yes"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("bucket"), "{err}");
}

/// A mapping `depth` levels deep: `{"a": {"a": ... 1}}`.
fn nested(depth: usize) -> Value {
    (0..depth).fold(Value::from(1), |v, _| serde_json::json!({ "a": v }))
}

/// A one-resource JSON program whose property `v` is `value`.
fn with_value(value: Value) -> String {
    serde_json::json!({
        "name": "site",
        "resources": { "b": { "type": "aws:s3/bucket:Bucket", "properties": { "v": value } } }
    })
    .to_string()
}

#[test]
fn duplicate_keys_at_any_level_exit_2_naming_both_lines() {
    let k = Keel::new();
    k.ok(&["up", "--program", &k.write("good.yaml", GOOD)]);
    // (file, content, mapping, key, first line, second line)
    let table = [
        (
            "dup-resource.yaml",
            "name: site\nresources:\n  b: { type: \"aws:s3/bucket:Bucket\" }\n  c: { type: \"a:b:C\" }\n  b: { type: \"a:b:D\" }\n",
            "`resources`",
            "b",
            3,
            5,
        ),
        (
            "dup-property.yaml",
            "name: site\nresources:\n  b:\n    type: a:b:C\n    properties:\n      x: 1\n      x: 2\n",
            "`resources.b.properties`",
            "x",
            6,
            7,
        ),
        (
            "dup-option.yaml",
            "name: site\nresources:\n  b:\n    type: a:b:C\n    options:\n      protect: true\n      dependsOn: []\n      protect: false\n",
            "`resources.b.options`",
            "protect",
            6,
            8,
        ),
        (
            "dup-output.yaml",
            "name: site\nresources: {}\noutputs:\n  url: a\n  url: b\n",
            "`outputs`",
            "url",
            4,
            5,
        ),
        (
            "dup-top.yaml",
            "name: site\nresources: {}\nname: other\n",
            "the top-level mapping",
            "name",
            1,
            3,
        ),
        (
            "dup-resource.json",
            "{\"name\": \"site\", \"resources\": {\n  \"b\": {\"type\": \"aws:s3/bucket:Bucket\"},\n  \"b\": {\"type\": \"a:b:D\"}\n}}\n",
            "`resources`",
            "b",
            2,
            3,
        ),
        (
            "dup-nested.json",
            "{\"name\": \"site\", \"resources\": {\"b\": {\"type\": \"a:b:C\",\n  \"properties\": {\"list\": [{\"k\": 1,\n  \"k\": 2}]}}}}\n",
            "`resources.b.properties.list[0]`",
            "k",
            2,
            3,
        ),
    ];
    for (name, content, mapping, key, first, second) in table {
        let dup = format!("duplicate key `{key}` in {mapping}");
        let second = format!("line {second}:");
        let first = format!("first at line {first}");
        check(&k, name, content, &[&dup, &second, &first]);
    }
}

#[test]
fn values_nested_deeper_than_keel_stores_exit_2() {
    let k = Keel::new();
    k.ok(&["up", "--program", &k.write("good.yaml", GOOD)]);
    // 123 levels: the readers of program files accept it, a checkpoint
    // holding it could not be read back.
    for (name, depth) in [("deep-123.json", 123), ("deep-65.json", 65)] {
        check(
            &k,
            name,
            &with_value(nested(depth)),
            &[
                "resource `b`",
                "key `properties.v`",
                "more than 64 levels deep",
            ],
        );
    }
    let config =
        serde_json::json!({ "name": "site", "config": { "c": nested(65) }, "resources": {} });
    check(
        &k,
        "deep-config.json",
        &config.to_string(),
        &["key `config.c`", "more than 64 levels deep"],
    );
}

#[test]
fn the_deepest_accepted_value_round_trips_through_up_and_load() {
    let k = Keel::new();
    let deepest = nested(64);
    let program = k.write("deep.json", &with_value(deepest.clone()));
    k.ok(&["up", "--program", &program]);
    // The stack loads: export, verify, a second update with nothing to do.
    let state = k.export();
    let b = resource(&state, "b");
    assert_eq!(b["inputs"]["v"], deepest);
    assert_eq!(b["outputs"]["v"], deepest);
    k.ok(&["state", "verify"]);
    all_same(&k.ok(&["up", "--json", "--program", &program]));
    // The exported file imports again.
    let file = k.write("deep-export.json", &state.to_string());
    k.ok(&["stack", "import", "--file", &file]);
    assert_eq!(resource(&k.export(), "b")["inputs"]["v"], deepest);
}

#[test]
fn a_reference_nesting_a_deep_output_too_deep_fails_its_resource() {
    let k = Keel::new();
    // `a.v` is 60 levels deep; `b.w` puts it 5 levels further down.
    let program = serde_json::json!({
        "name": "site",
        "resources": {
            "a": { "type": "aws:s3/bucket:Bucket", "properties": { "v": nested(60) } },
            "b": {
                "type": "aws:s3/bucket:Bucket",
                "properties": { "w": { "x": { "y": { "z": { "q": { "r": "${a.v}" } } } } } }
            }
        }
    });
    let file = k.write("ref.json", &program.to_string());
    let (_, err) = k.expect(1, &["up", "--program", &file]);
    assert!(err.contains("key `properties.w`"), "{err}");
    assert!(err.contains("more than 64 levels deep"), "{err}");
    let state = k.export();
    resource(&state, "a");
    assert!(
        !state.to_string().contains("::b\""),
        "b was not registered: {state}"
    );
    k.ok(&["state", "verify"]);
}
