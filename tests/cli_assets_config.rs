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
