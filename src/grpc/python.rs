//! A Pulumi Python program directory as a [`Program`].
//!
//! The directory holds `__main__.py` (and, optionally, `Pulumi.yaml` naming
//! the project and `Pulumi.<stack>.yaml` with its config, see
//! [`crate::config`]). The config reaches the SDK as Pulumi's language host
//! passes it: `PULUMI_CONFIG` (decrypted values) and
//! `PULUMI_CONFIG_SECRET_KEYS` (the keys holding secure values, which
//! `pulumi.Config` then treats as secrets); the plaintexts of secure values
//! are masked as `[secret]` in the program's printed output. Running
//! it starts a [`MonitorServer`] for the operation, then the interpreter
//! (`KEEL_PYTHON`, else `python3`) with keel's runner script, which
//! configures the `pulumi` SDK to talk to that server and runs the program
//! in the stack. The program's stdout and stderr lines become diagnostics
//! on keel's display; a failure (non-zero exit) is the program's error,
//! carrying the end of its stderr (the traceback's tail). A program that
//! succeeded says so (`SignalAndWaitForShutdown`) and waits for the
//! operation's end, serving the hooks of the steps that run after it (the
//! deletes of what it no longer registers): its part ends there, and the
//! interpreter exits once the operation's steps all ran. The interpreter is
//! killed if the operation is dropped.

use crate::locks::MutexExt;
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::actors::{Context, Program, ProgramFuture};
use crate::events::{EngineEvent, EventSink};
use crate::source::ProgramError;

use super::monitor::{DeploymentInfo, Monitor, MonitorServer};

/// keel's runner script (see `src/grpc/runner.py`).
const RUNNER: &str = include_str!("runner.py");

/// How many stderr lines a failure carries.
const TAIL_LINES: usize = 12;

/// The runner's exit status when `pulumi` cannot be imported.
const EXIT_NO_SDK: i32 = 3;

/// A Python program directory that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    /// The directory has no `__main__.py`.
    #[error("{} has no __main__.py: a Python program directory needs one (or pass a YAML/JSON program file)", .0.display())]
    NoMain(PathBuf),
    /// `Pulumi.yaml` or `Pulumi.<stack>.yaml` is unreadable or invalid.
    #[error("{}: {message}", path.display())]
    ProjectFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The result of loading a program directory.
pub type Result<T> = std::result::Result<T, PythonError>;

/// A loaded Python program directory.
#[derive(Debug, Clone)]
pub struct PythonProject {
    /// The directory.
    pub dir: PathBuf,
    /// Its `__main__.py`.
    pub main: PathBuf,
    /// The project name: `name` in `Pulumi.yaml`, else the directory name.
    pub name: String,
    /// Config values (`project:key` -> value as the SDK receives it) from
    /// `Pulumi.<stack>.yaml`, secure values decrypted.
    pub config: BTreeMap<String, String>,
    /// The config keys holding secure values.
    pub secret_keys: Vec<String>,
    /// The plaintexts of the secure values, masked in the program's output.
    pub redact: Vec<String>,
}

impl PythonProject {
    /// Loads the directory `dir` for `stack`, with its plain config.
    ///
    /// # Errors
    /// [`PythonError`]: no `__main__.py`, or an invalid `Pulumi.yaml` /
    /// `Pulumi.<stack>.yaml` (including secure config values: those need
    /// the stack's secrets provider, see [`PythonProject::open`] and
    /// [`PythonProject::with_config`]).
    pub fn load(dir: &Path, stack: &str) -> Result<Self> {
        let project = Self::open(dir)?;
        let config = crate::config::StackConfig::load(dir, stack, &project.name)
            .and_then(|c| c.resolve(None))
            .map_err(|e| PythonError::ProjectFile {
                path: crate::config::stack_file(dir, stack),
                message: e.to_string(),
            })?;
        Ok(project.with_config(&config))
    }

    /// Loads the directory `dir` without config.
    ///
    /// # Errors
    /// [`PythonError`]: no `__main__.py`, or an invalid `Pulumi.yaml`.
    pub fn open(dir: &Path) -> Result<Self> {
        let main = dir.join("__main__.py");
        if !main.is_file() {
            return Err(PythonError::NoMain(dir.to_owned()));
        }
        // The interpreter runs in the directory: the path must not be
        // relative to ours.
        let main = std::fs::canonicalize(&main).unwrap_or(main);
        let dir_name = std::fs::canonicalize(dir)
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "project".into());
        let project_file = dir.join("Pulumi.yaml");
        let name = match read_yaml(&project_file)? {
            None => dir_name,
            Some(doc) => match doc.get("name") {
                Some(serde_norway::Value::String(n)) if !n.is_empty() => n.clone(),
                None => dir_name,
                Some(_) => {
                    return Err(PythonError::ProjectFile {
                        path: project_file,
                        message: "`name` must be a non-empty string".into(),
                    })
                }
            },
        };
        Ok(Self {
            dir: dir.to_owned(),
            main,
            name,
            config: BTreeMap::new(),
            secret_keys: Vec::new(),
            redact: Vec::new(),
        })
    }

    /// The project with the stack's config, resolved
    /// ([`crate::config::StackConfig::resolve`]).
    pub fn with_config(mut self, config: &[crate::config::Resolved]) -> Self {
        self.config = config
            .iter()
            .map(|r| (r.key.clone(), r.text.clone()))
            .collect();
        self.secret_keys = config
            .iter()
            .filter(|r| r.secret)
            .map(|r| r.key.clone())
            .collect();
        self.redact = crate::config::secret_texts(config);
        self
    }
}

fn read_yaml(path: &Path) -> Result<Option<serde_norway::Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(PythonError::ProjectFile {
                path: path.to_owned(),
                message: e.to_string(),
            })
        }
    };
    serde_norway::from_str(&text)
        .map(Some)
        .map_err(|e| PythonError::ProjectFile {
            path: path.to_owned(),
            message: e.to_string(),
        })
}

/// How to run a Python program.
#[derive(Debug, Clone)]
pub struct PythonOptions {
    /// The interpreter (`KEEL_PYTHON`, else `python3`).
    pub python: std::ffi::OsString,
    /// Where diagnostics go.
    pub events: EventSink,
    /// The SDK's registration parallelism.
    pub parallel: i32,
    /// Whether the stack can encrypt secrets (else a registration with a
    /// secret is refused).
    pub can_store_secrets: bool,
    /// Told the address of the program's `pulumirpc.Engine` server while
    /// it runs (for the plugins the operation starts meanwhile).
    pub engine: Option<super::construct::EngineAddress>,
    /// The secrets the operation's plugins were sent, masked in the logs
    /// that server receives.
    pub secrets: super::engine_log::SharedSecrets,
}

impl PythonOptions {
    /// The interpreter from the environment, reporting to `events`.
    pub fn from_env(events: EventSink) -> Self {
        Self {
            python: std::env::var_os("KEEL_PYTHON").unwrap_or_else(|| "python3".into()),
            events,
            parallel: 16,
            can_store_secrets: true,
            engine: None,
            secrets: super::engine_log::SharedSecrets::default(),
        }
    }
}

/// A Python program directory, run through the resource-monitor protocol.
#[derive(Debug, Clone)]
pub struct PythonProgram {
    project: Arc<PythonProject>,
    options: PythonOptions,
}

impl PythonProgram {
    /// A program for `project`.
    pub fn new(project: PythonProject, options: PythonOptions) -> Self {
        Self {
            project: Arc::new(project),
            options,
        }
    }
}

impl Program for PythonProgram {
    fn registers_root(&self) -> bool {
        true
    }

    fn run(&self, ctx: Context) -> ProgramFuture {
        let project = self.project.clone();
        let options = self.options.clone();
        Box::pin(async move {
            run(&project, &options, ctx)
                .await
                .map_err(ProgramError::from)
        })
    }
}

/// Sends each line of `r` to the display (and keeps the last ones), with
/// the `redact` texts (config secrets) masked.
async fn forward(
    r: impl AsyncRead + Unpin,
    events: EventSink,
    tail: Option<Arc<Mutex<VecDeque<String>>>>,
    redact: Arc<Vec<String>>,
) {
    let mut lines = BufReader::new(r).lines();
    while let Ok(Some(mut line)) = lines.next_line().await {
        for s in redact.iter() {
            if line.contains(s.as_str()) {
                line = line.replace(s.as_str(), "[secret]");
            }
        }
        if let Some(t) = &tail {
            let mut t = t.locked();
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(line.clone());
        }
        events.send(EngineEvent::Diagnostic {
            severity: "info".into(),
            urn: None,
            message: line,
        });
    }
}

async fn run(
    project: &PythonProject,
    options: &PythonOptions,
    ctx: Context,
) -> std::result::Result<(), String> {
    // keel has no organizations; the SDK requires a name.
    let organization = "organization".to_owned();
    let info = DeploymentInfo {
        organization: organization.clone(),
        config: project.config.clone(),
        config_secret_keys: project.secret_keys.clone(),
        parallel: options.parallel,
        can_store_secrets: options.can_store_secrets,
    };
    let preview = ctx.is_preview();
    let (stack, name) = (ctx.stack().to_owned(), ctx.project().to_owned());
    let monitor = Monitor::new(ctx, info, options.events.clone(), options.secrets.clone());
    let server = MonitorServer::start(monitor.clone())
        .await
        .map_err(|e| format!("could not start the resource monitor: {e}"))?;
    let address = server.address().to_string();
    if let Some(engine) = &options.engine {
        engine.set(Some(address.clone()));
    }
    let config = serde_json::to_string(&project.config).unwrap_or_else(|_| "{}".into());
    let secret_keys = serde_json::to_string(&project.secret_keys).unwrap_or_else(|_| "[]".into());
    let mut child = tokio::process::Command::new(&options.python)
        .arg("-c")
        .arg(RUNNER)
        .current_dir(&project.dir)
        .env("KEEL_PROGRAM", &project.main)
        .env("KEEL_PROJECT", &name)
        .env("KEEL_STACK", &stack)
        .env("KEEL_MONITOR", &address)
        .env("KEEL_ENGINE", &address)
        .env("KEEL_PREVIEW", if preview { "1" } else { "0" })
        .env("KEEL_PARALLEL", options.parallel.to_string())
        .env("KEEL_ORGANIZATION", &organization)
        .env("PULUMI_CONFIG", config)
        .env("PULUMI_CONFIG_SECRET_KEYS", secret_keys)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            format!(
                "could not start the Python interpreter `{}`: {e}; install Python 3 or set KEEL_PYTHON",
                options.python.to_string_lossy()
            )
        })?;
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let redact = Arc::new(project.redact.clone());
    let out = child
        .stdout
        .take()
        .map(|o| tokio::spawn(forward(o, options.events.clone(), None, redact.clone())));
    let err = child.stderr.take().map(|e| {
        tokio::spawn(forward(
            e,
            options.events.clone(),
            Some(tail.clone()),
            redact.clone(),
        ))
    });
    let status = tokio::select! {
        status = child.wait() => status,
        () = monitor.signaled() => {
            // The SDK is done and waits for the operation's end, serving
            // hooks meanwhile: the program's part is over. The interpreter
            // and the server are let go once it exits.
            tokio::spawn(async move {
                let _ = child.wait().await;
                for t in [out, err].into_iter().flatten() {
                    let _ = t.await;
                }
                let _ = server.stop().await;
            });
            return monitor
                .commit_stack_outputs(false)
                .await
                .map_err(|e| format!("the stack's outputs: {e}"));
        }
    };
    for t in [out, err].into_iter().flatten() {
        let _ = t.await;
    }
    let served = server.stop().await;
    if let Some(engine) = &options.engine {
        engine.set(None);
    }
    let status = status.map_err(|e| format!("waiting for the Python program failed: {e}"))?;
    let tail: Vec<String> = tail.locked().iter().cloned().collect();
    match status.code() {
        Some(0) => {
            served.map_err(|e| format!("the resource monitor failed: {e}"))?;
            monitor
                .commit_stack_outputs(false)
                .await
                .map_err(|e| format!("the stack's outputs: {e}"))
        }
        Some(EXIT_NO_SDK) => Err(format!(
            "{}; install it with `{} -m pip install pulumi` or set KEEL_PYTHON to an interpreter that has it",
            tail.last().map_or("the `pulumi` package cannot be imported", String::as_str),
            options.python.to_string_lossy()
        )),
        code => {
            // The outputs registered before the program failed are kept;
            // the program's error is what the operation reports.
            if let Err(e) = monitor.commit_stack_outputs(true).await {
                tracing::debug!("the stack's outputs after the program failed: {e}");
            }
            Err(format!(
            "the Python program {} ({}):\n{}",
            match code {
                Some(c) => format!("exited with status {c}"),
                None => "was killed by a signal".into(),
            },
            project.main.display(),
            tail.join("\n")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(d.path().join(name), text).unwrap();
        }
        d
    }

    #[test]
    fn project_name_and_config_come_from_the_project_files() {
        let d = dir_with(&[
            ("__main__.py", ""),
            ("Pulumi.yaml", "name: shop\nruntime: python\n"),
            (
                "Pulumi.dev.yaml",
                "config:\n  env: prod\n  aws:region: eu-west-1\n  n: 3\n",
            ),
        ]);
        let p = PythonProject::load(d.path(), "dev").unwrap();
        assert_eq!(p.name, "shop");
        assert_eq!(p.config.get("shop:env").map(String::as_str), Some("prod"));
        assert_eq!(
            p.config.get("aws:region").map(String::as_str),
            Some("eu-west-1")
        );
        assert_eq!(p.config.get("shop:n").map(String::as_str), Some("3"));
        // Another stack has no config file.
        assert!(PythonProject::load(d.path(), "prod")
            .unwrap()
            .config
            .is_empty());
    }

    #[test]
    fn bad_directories_are_refused_with_the_file() {
        let d = dir_with(&[("Pulumi.yaml", "name: x\n")]);
        assert!(matches!(
            PythonProject::load(d.path(), "dev"),
            Err(PythonError::NoMain(_))
        ));
        let d = dir_with(&[("__main__.py", ""), ("Pulumi.yaml", "name: [1\n")]);
        let e = PythonProject::load(d.path(), "dev").unwrap_err();
        assert!(e.to_string().contains("Pulumi.yaml"), "{e}");
        let d = dir_with(&[
            ("__main__.py", ""),
            ("Pulumi.dev.yaml", "config:\n  pw:\n    secure: AAAA\n"),
        ]);
        let e = PythonProject::load(d.path(), "dev").unwrap_err();
        assert!(e.to_string().contains("secure values"), "{e}");
    }
}
