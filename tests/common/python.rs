//! The Python side of tests that run Pulumi Python programs through the
//! `keel` binary: an interpreter that can `import pulumi` (`KEEL_PYTHON`,
//! else a virtual environment made once under the target directory) and
//! the program directories under `tests/python/`.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use super::cli::Keel;

/// The SDK version the tests run against.
pub const PULUMI: &str = "pulumi==3.272.0";

/// An interpreter that can `import pulumi`.
pub fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        if let Some(p) = std::env::var_os("KEEL_PYTHON") {
            let p = p.to_string_lossy().into_owned();
            assert!(
                imports_pulumi(Path::new(&p)),
                "KEEL_PYTHON={p} cannot `import pulumi`: install {PULUMI} into it"
            );
            return p;
        }
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pulumi-3.272.0-venv");
        let bin = venv.join("bin/python");
        if !imports_pulumi(&bin) {
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("python3 is needed for the Python tests (or set KEEL_PYTHON)");
            assert!(made.success(), "python3 -m venv {}", venv.display());
            let installed = Command::new(&bin)
                .args(["-m", "pip", "install", "--quiet", PULUMI])
                .status()
                .expect("pip");
            assert!(installed.success(), "pip install {PULUMI}");
            assert!(
                imports_pulumi(&bin),
                "{} still cannot import pulumi",
                bin.display()
            );
        }
        bin.display().to_string()
    })
}

fn imports_pulumi(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import pulumi"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A program directory under `tests/python/`.
pub fn program(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(name)
        .display()
        .to_string()
}

/// A working directory whose runs use the test interpreter.
pub fn keel() -> Keel {
    let mut k = Keel::new();
    k.env.push(("KEEL_PYTHON".into(), python().into()));
    k
}

/// Writes a one-file program `name/__main__.py` (project `name`) in the
/// working directory; returns its directory.
pub fn inline_program(k: &Keel, name: &str, source: &str) -> String {
    let dir = k.path().join(name);
    std::fs::create_dir_all(&dir).expect("program dir");
    std::fs::write(dir.join("__main__.py"), source).expect("__main__.py");
    dir.display().to_string()
}
