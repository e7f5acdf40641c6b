//! The harness of tests that run the built `keel` binary in a temporary
//! directory (its backend is `./.keel` there).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A temporary working directory to run `keel` in.
pub struct Keel {
    pub dir: tempfile::TempDir,
    /// `KEEL_CONFIG_PASSPHRASE` for every run (none: every passphrase
    /// variable is removed).
    pub passphrase: Option<String>,
    /// More environment variables for every run.
    pub env: Vec<(String, String)>,
}

/// Bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The path of an example program.
pub fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/programs")
        .join(name)
        .display()
        .to_string()
}

impl Keel {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
            passphrase: None,
            env: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn backend(&self) -> PathBuf {
        self.path().join(".keel")
    }

    /// The command running `keel args` here (to spawn it).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_keel"));
        c.current_dir(self.path()).env_remove("KEEL_BACKEND");
        for var in ["KEEL_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE"] {
            c.env_remove(var).env_remove(format!("{var}_FILE"));
        }
        if let Some(p) = &self.passphrase {
            c.env("KEEL_CONFIG_PASSPHRASE", p);
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c.args(args);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run keel")
    }

    /// Runs and expects exit status `code`; returns (stdout, stderr).
    pub fn expect(&self, code: i32, args: &[&str]) -> (String, String) {
        let o = self.run(args);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(
            o.status.code(),
            Some(code),
            "keel {args:?}\nstdout:\n{out}\nstderr:\n{err}"
        );
        (out, err)
    }

    /// Runs and expects success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.expect(0, args).0
    }

    /// Writes a file in the directory; returns its path.
    pub fn write(&self, name: &str, content: &str) -> String {
        let p = self.path().join(name);
        std::fs::write(&p, content).expect("write file");
        p.display().to_string()
    }

    /// Every file under the backend, with its bytes.
    pub fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        files_under(&self.backend())
    }
}

/// Every file under `dir` (none when it does not exist), with its bytes.
pub fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.insert(p.clone(), std::fs::read(&p).expect("read"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

/// The `--json` events of a run: every line an object with `"event"`.
pub fn events(stdout: &str) -> Vec<Value> {
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    for e in &events {
        assert!(e.get("event").and_then(Value::as_str).is_some(), "{e}");
    }
    events
}

/// The summary (the last event of a `--json` run), checked for shape.
pub fn summary(stdout: &str) -> Value {
    let last = events(stdout).pop().expect("some events");
    assert_eq!(last["event"], "summary", "{last}");
    assert!(last["durationMs"].is_number(), "{last}");
    assert!(last["steps"].is_object(), "{last}");
    last
}

/// The step counts of a summary.
pub fn steps_of(summary: &Value) -> BTreeMap<String, u64> {
    summary["steps"]
        .as_object()
        .expect("steps")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().expect("count")))
        .collect()
}

/// The step counts of a `--json` run's summary.
pub fn summary_steps(stdout: &str) -> BTreeMap<String, u64> {
    steps_of(&summary(stdout))
}

/// A resource of an exported state by name (the last URN part).
pub fn resource<'a>(state: &'a Value, name: &str) -> &'a Value {
    state["deployment"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| {
            r["urn"]
                .as_str()
                .is_some_and(|u| u.ends_with(&format!("::{name}")))
        })
        .unwrap_or_else(|| panic!("no resource {name} in {state}"))
}

/// Step counts from `(kind, count)` pairs.
pub fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

pub fn migration_events(stdout: &str) -> Vec<Value> {
    events(stdout)
        .into_iter()
        .filter(|e| e["event"] == "migration")
        .collect()
}

/// Only `same` steps.
pub fn all_same(stdout: &str) {
    let steps = summary_steps(stdout);
    assert!(
        steps.keys().all(|k| k == "same"),
        "only same steps, got {steps:?}"
    );
}

impl Keel {
    /// The cloud's objects, sorted by ID.
    pub fn cloud(&self) -> Vec<Value> {
        let v: Value =
            serde_json::from_str(&self.ok(&["cloud", "list", "--json"])).expect("cloud JSON");
        let mut objects = v.as_array().expect("an array").clone();
        objects.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
        objects
    }

    /// The backend's simulated cloud, opened as a keel process opens it
    /// (for changes behind keel's back).
    pub fn sim_cloud(&self) -> std::sync::Arc<keel::provider::SimCloud> {
        let path = self.backend().join("cloud.json");
        let cloud = keel::provider::SimCloud::load(&path, Default::default()).expect("cloud");
        cloud.autosave_to(path);
        cloud
    }

    /// `keel stack export`, parsed.
    pub fn export(&self) -> Value {
        serde_json::from_str(&self.ok(&["stack", "export"])).expect("export JSON")
    }

    /// The stack's resources by URN (the state without its manifest, whose
    /// time every update refreshes, and without the order, which follows
    /// the order in which concurrent registrations arrive).
    pub fn resources(&self) -> BTreeMap<String, Value> {
        let v = self.export();
        v["deployment"]["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .map(|r| (r["urn"].as_str().unwrap_or_default().to_owned(), r.clone()))
            .collect()
    }

    /// Every resource's URN -> ID.
    pub fn urns(&self) -> BTreeMap<String, String> {
        let v = self.export();
        v["deployment"]["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .map(|r| {
                (
                    r["urn"].as_str().unwrap_or_default().to_owned(),
                    r["id"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }
}
