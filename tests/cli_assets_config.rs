//! Assets and config like Pulumi's, through the `keel` binary and the
//! official Python SDK (`pulumi==3.272.0`):
//!
//! - `tests/python/static-site`: a `FileAsset`, a `FileArchive` of a
//!   directory and a `StringAsset` are stored with their content hashes;
//!   editing `www/index.html` updates the two objects that hold it and
//!   nothing else.
//! - `Pulumi.<stack>.yaml` config with `secure:` values (top level and
//!   nested in objects and lists) reaches a Python program decrypted and
//!   secret; `keel config set|get|rm|ls` reads and writes that file as
//!   `pulumi config` does, never writing a plaintext secret.
//!
//! The interpreter is `KEEL_PYTHON` when set; otherwise a virtual
//! environment made once under Cargo's target directory (as
//! `tests/cli_python.rs` does).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::cli::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

const PULUMI: &str = "pulumi==3.272.0";

fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        if let Some(p) = std::env::var_os("KEEL_PYTHON") {
            return p.to_string_lossy().into_owned();
        }
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pulumi-3.272.0-venv");
        let bin = venv.join("bin/python");
        let imports = |p: &Path| {
            Command::new(p)
                .args(["-c", "import pulumi"])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !imports(&bin) {
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("python3 is needed for the Python tests (or set KEEL_PYTHON)");
            assert!(made.success());
            let installed = Command::new(&bin)
                .args(["-m", "pip", "install", "--quiet", PULUMI])
                .status()
                .expect("pip");
            assert!(installed.success(), "pip install {PULUMI}");
        }
        bin.display().to_string()
    })
}

fn keel() -> Keel {
    let mut k = Keel::new();
    k.env.push(("KEEL_PYTHON".into(), python().into()));
    k
}

/// Copies `tests/python/<name>` into the working directory (the test
/// edits it) and returns the copy's path.
fn copy_program(k: &Keel, name: &str) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_name() == "__pycache__" {
                continue;
            }
            let target = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &target);
            } else {
                std::fs::copy(e.path(), target).unwrap();
            }
        }
    }
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name);
    let to = k.path().join(name);
    copy(&from, &to);
    to
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The `source` input of a resource named `name`.
fn source(k: &Keel, name: &str) -> Value {
    let urn = format!("urn:pulumi:dev::static-site::aws:s3/bucketObject:BucketObject::{name}");
    k.resources()[&urn]["inputs"]["source"].clone()
}

const ASSET_SIG: &str = "c44067f5952c0a294b673a41bacd8c17";
const ARCHIVE_SIG: &str = "0def7320c3a5731c473e5ecbe6d01bc7";
const SIG: &str = "4dabf18193072939515e22adb298388d";

#[test]
fn editing_a_file_behind_a_file_asset_updates_what_holds_it() {
    let k = keel();
    let dir = copy_program(&k, "static-site");
    let program = dir.display().to_string();
    let out = k.ok(&["up", "--yes", "--json", "--program", &program]);
    assert_eq!(summary_steps(&out)["create"], 5, "{out}");

    // Stored as Pulumi stores them: the signature, the hash, the source.
    let index = source(&k, "index");
    let html = std::fs::read(dir.join("www/index.html")).unwrap();
    assert_eq!(
        index,
        serde_json::json!({SIG: ASSET_SIG, "hash": sha256(&html), "path": "www/index.html"})
    );
    assert_eq!(
        source(&k, "banner"),
        serde_json::json!({SIG: ASSET_SIG, "hash": sha256(b"hello"), "text": "hello"})
    );
    let bundle = source(&k, "bundle");
    assert_eq!(bundle[SIG], ARCHIVE_SIG);
    assert_eq!(bundle["path"], "www");
    let bundle_hash = bundle["hash"].as_str().expect("an archive hash").to_owned();
    assert_eq!(bundle_hash.len(), 64);

    // Unchanged files: nothing to do.
    let out = k.ok(&["preview", "--json", "--program", &program]);
    all_same(&out);

    // The edit: the file asset and the archive holding it change.
    std::fs::write(dir.join("www/index.html"), "<h1>v2</h1>\n").unwrap();
    let out = k.ok(&["preview", "--json", "--program", &program]);
    let mut updated: Vec<String> = events(&out)
        .into_iter()
        .filter(|e| e["event"] == "step-finished" && e["kind"] == "update")
        .map(|e| {
            e["urn"]
                .as_str()
                .unwrap()
                .rsplit("::")
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    updated.sort();
    assert_eq!(
        updated,
        ["bundle", "index"].map(String::from).to_vec(),
        "{out}"
    );
    let out = k.ok(&["up", "--yes", "--json", "--program", &program]);
    assert_eq!(summary_steps(&out)["update"], 2, "{out}");
    assert_eq!(
        source(&k, "index")["hash"].as_str(),
        Some(sha256(b"<h1>v2</h1>\n").as_str())
    );
    assert_ne!(
        source(&k, "bundle")["hash"].as_str(),
        Some(bundle_hash.as_str())
    );
    all_same(&k.ok(&["preview", "--json", "--program", &program]));
}

#[test]
fn a_file_asset_that_cannot_be_read_fails_naming_the_file() {
    let k = keel();
    let dir = copy_program(&k, "static-site");
    let program = dir.display().to_string();
    std::fs::remove_file(dir.join("www/index.html")).unwrap();
    let (out, err) = k.expect(1, &["up", "--yes", "--program", &program]);
    let all = format!("{out}{err}");
    assert!(all.contains("index.html"), "{all}");
    assert!(all.contains("cannot read"), "{all}");
}

const PASSPHRASE: &str = "correct horse battery staple";
const SECRETS: [&str; 3] = ["hunter2-top", "s3cret-nested", "h2-secret-host"];

fn no_plaintext(what: &str, text: &str) {
    for s in SECRETS {
        assert!(!text.contains(s), "plaintext `{s}` in {what}:\n{text}");
    }
}

/// Every file of the backend, as text.
fn backend_text(k: &Keel) -> String {
    k.files()
        .values()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn secure_config_reaches_a_python_program_decrypted_and_secret() {
    let mut k = keel();
    let dir = copy_program(&k, "secure-config");
    let program = dir.display().to_string();
    let p = ["--program", program.as_str()];
    // Without a passphrase, a secret is refused, saying what to set; the
    // file is not touched.
    let (_, err) = k.expect(
        2,
        &[
            &["config", "set", "--secret", "password", "hunter2-top"][..],
            &p,
        ]
        .concat(),
    );
    assert!(
        err.contains("secret config values are encrypted with the stack's passphrase")
            && err.contains("KEEL_CONFIG_PASSPHRASE"),
        "{err}"
    );
    assert!(!dir.join("Pulumi.dev.yaml").exists(), "nothing was written");
    k.passphrase = Some(PASSPHRASE.into());
    let set = |args: &[&str]| k.ok(&[&["config", "set"], args, &p].concat());
    set(&["env", "prod"]);
    set(&["--secret", "password", "hunter2-top"]);
    set(&["--path", "db.user", "admin"]);
    set(&["--path", "db.port", "5432"]);
    set(&["--secret", "--path", "db.password", "s3cret-nested"]);
    set(&["--path", "db.hosts[0]", "h1"]);
    set(&["--secret", "--path", "db.hosts[1]", "h2-secret-host"]);

    // The file: Pulumi's shape, namespaced keys, ciphertexts only.
    let file = std::fs::read_to_string(dir.join("Pulumi.dev.yaml")).unwrap();
    no_plaintext("Pulumi.dev.yaml", &file);
    let doc: Value = serde_norway::from_str(&file).unwrap();
    let salt = doc["encryptionsalt"]
        .as_str()
        .expect("encryptionsalt")
        .to_owned();
    let config = &doc["config"];
    assert_eq!(config["secure-config:env"], "prod");
    assert!(config["secure-config:password"]["secure"]
        .as_str()
        .unwrap()
        .starts_with("v1:"));
    assert_eq!(config["secure-config:db"]["user"], "admin");
    assert_eq!(config["secure-config:db"]["port"], 5432);
    assert_eq!(config["secure-config:db"]["hosts"][0], "h1");
    assert!(config["secure-config:db"]["hosts"][1]["secure"].is_string());
    assert!(config["secure-config:db"]["password"]["secure"].is_string());

    // get decrypts; ls masks unless asked.
    let get = |args: &[&str]| k.ok(&[&["config", "get"], args, &p].concat());
    assert_eq!(get(&["password"]).trim_end(), "hunter2-top");
    assert_eq!(get(&["--path", "db.password"]).trim_end(), "s3cret-nested");
    assert_eq!(get(&["--path", "db.hosts[0]"]).trim_end(), "h1");
    let json: Value = serde_json::from_str(&get(&["--json", "password"])).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"value": "hunter2-top", "secret": true})
    );
    let ls = k.ok(&[&["config", "ls"][..], &p].concat());
    no_plaintext("config ls", &ls);
    assert!(
        ls.lines()
            .any(|l| l.split_whitespace().eq(["password", "[secret]"])),
        "{ls}"
    );
    assert!(
        ls.lines().any(|l| l.split_whitespace().eq(["env", "prod"])),
        "{ls}"
    );
    let shown = k.ok(&[&["config", "ls", "--show-secrets"][..], &p].concat());
    assert!(
        shown.contains("hunter2-top") && shown.contains("s3cret-nested"),
        "{shown}"
    );
    let (_, err) = k.expect(1, &[&["config", "get", "nope"][..], &p].concat());
    assert!(err.contains("secure-config:nope"), "{err}");

    // The program gets every value decrypted and as a secret.
    let out = k.ok(&["up", "--yes", "--json", "--program", &program]);
    no_plaintext("the events", &out);
    assert!(
        out.contains("env is prod; the password is [secret]"),
        "the program's output, masked: {out}"
    );
    no_plaintext("the backend", &backend_text(&k));
    let export = k.ok(&["stack", "export"]);
    no_plaintext("stack export", &export);
    // The stack took the config file's salt: one key for both.
    let d: Value = serde_json::from_str(&export).unwrap();
    assert_eq!(
        d["deployment"]["secrets_providers"]["state"]["salt"],
        salt.as_str()
    );
    let urn = "urn:pulumi:dev::secure-config::aws:rds/instance:Instance::db";
    let stored = &k.resources()[urn]["inputs"];
    const SECRET_SIG: &str = "1b47061264138c4ac30d75fd1eb44270";
    assert_eq!(stored["password"][SIG], SECRET_SIG);
    assert_eq!(stored["settings"][SIG], SECRET_SIG);
    let shown: Value = serde_json::from_str(&k.ok(&["stack", "export", "--show-secrets"])).unwrap();
    let inputs = &shown["deployment"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["urn"] == urn)
        .unwrap()["inputs"];
    let plaintext = |v: &Value| -> Value {
        serde_json::from_str(v["plaintext"].as_str().expect("a plaintext secret")).unwrap()
    };
    assert_eq!(plaintext(&inputs["password"]), "hunter2-top");
    // Nested secure values arrive decrypted, never as ciphertext.
    assert_eq!(
        plaintext(&inputs["settings"]),
        serde_json::json!({"user": "admin", "port": 5432, "password": "s3cret-nested", "hosts": ["h1", "h2-secret-host"]})
    );
    assert_eq!(inputs["env"], "prod");

    // rm, with and without a path.
    k.ok(&[&["config", "rm", "--path", "db.hosts[1]"][..], &p].concat());
    k.ok(&[&["config", "rm", "env"][..], &p].concat());
    let doc: Value =
        serde_norway::from_str(&std::fs::read_to_string(dir.join("Pulumi.dev.yaml")).unwrap())
            .unwrap();
    assert_eq!(
        doc["config"]["secure-config:db"]["hosts"],
        serde_json::json!(["h1"])
    );
    assert!(doc["config"].get("secure-config:env").is_none());
}

#[test]
fn secure_config_without_the_passphrase_changes_nothing() {
    let mut k = keel();
    k.passphrase = Some(PASSPHRASE.into());
    let dir = copy_program(&k, "secure-config");
    let program = dir.display().to_string();
    let p = ["--program", program.as_str()];
    k.ok(&[&["config", "set", "env", "prod"][..], &p].concat());
    k.ok(&[
        &["config", "set", "--secret", "password", "hunter2-top"][..],
        &p,
    ]
    .concat());
    k.ok(&[&["config", "set", "--path", "db.user", "admin"][..], &p].concat());
    // Without a passphrase, or with a wrong one: exit 2 before anything
    // runs, and no plaintext anywhere.
    for pass in [None, Some("wrong")] {
        k.passphrase = pass.map(String::from);
        let (out, err) = k.expect(2, &["up", "--yes", "--program", &program]);
        no_plaintext("the output", &format!("{out}{err}"));
        assert!(err.contains("passphrase"), "{err}");
        assert!(k.files().is_empty() || !k.backend().join("stacks/dev/checkpoint.json").exists());
        let (_, err) = k.expect(2, &[&["config", "get", "password"][..], &p].concat());
        assert!(err.contains("passphrase"), "{err}");
    }
    // Without the passphrase, `ls` still lists (masked).
    k.passphrase = None;
    let ls = k.ok(&[&["config", "ls"][..], &p].concat());
    assert!(ls.contains("[secret]"), "{ls}");
}

#[test]
fn a_program_file_reads_the_stacks_config_and_its_secure_values() {
    let mut k = keel();
    k.passphrase = Some(PASSPHRASE.into());
    let program = k.write(
        "shop.yaml",
        "name: shop\nconfig: { env: dev }\nresources:\n  b:\n    type: aws:s3/bucket:Bucket\n    properties:\n      name: shop-${config.env}\n      region: ${config.aws:region}\n      password: ${config.password}\n      db: ${config.db}\n",
    );
    let p = ["--program", program.as_str()];
    // An unknown config key is refused before the stack's file defines it.
    let (_, err) = k.expect(2, &["preview", "--program", &program]);
    assert!(err.contains("config.aws:region"), "{err}");
    k.ok(&[&["config", "set", "env", "prod"][..], &p].concat());
    k.ok(&[&["config", "set", "aws:region", "eu-west-1"][..], &p].concat());
    k.ok(&[
        &["config", "set", "--secret", "password", "hunter2-top"][..],
        &p,
    ]
    .concat());
    k.ok(&[
        &[
            "config",
            "set",
            "--secret",
            "--path",
            "db.password",
            "s3cret-nested",
        ][..],
        &p,
    ]
    .concat());
    let file = std::fs::read_to_string(k.path().join("Pulumi.dev.yaml")).unwrap();
    no_plaintext("Pulumi.dev.yaml", &file);
    assert!(file.contains("shop:env: prod"), "{file}");
    let out = k.ok(&["up", "--yes", "--json", "--program", &program]);
    no_plaintext("the events", &out);
    no_plaintext("the backend", &backend_text(&k));
    let urn = "urn:pulumi:dev::shop::aws:s3/bucket:Bucket::b";
    let r = &k.resources()[urn];
    // The stack's value overrides the file's default.
    assert_eq!(r["inputs"]["name"], "shop-prod");
    assert_eq!(r["inputs"]["region"], "eu-west-1");
    assert_eq!(
        r["inputs"]["password"][SIG],
        "1b47061264138c4ac30d75fd1eb44270"
    );
    let shown = k.ok(&["stack", "export", "--show-secrets"]);
    assert!(
        shown.contains("hunter2-top") && shown.contains("s3cret-nested"),
        "{shown}"
    );
    assert!(!shown.contains("\"secure\""), "{shown}");
}
