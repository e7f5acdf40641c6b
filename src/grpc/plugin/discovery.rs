//! Finding a package's resource-provider plugin, as Pulumi does
//! (`../shared/spec/providers.md` §1).
//!
//! The provider of package `P` is the executable `pulumi-resource-P`. keel
//! looks, in Pulumi's order (`workspace/plugins.go`
//! `getPluginInfoAndPath`):
//!
//! 1. the project's `Pulumi.yaml` `plugins: providers:` entries (`name`,
//!    `path` relative to the project, optional `version`); a path is the
//!    executable itself, or a directory holding `pulumi-resource-P`, or a
//!    directory with a `PulumiPlugin.yaml` whose `runtime` (`python`,
//!    `nodejs`) keel starts the directory with;
//! 2. `PATH` (unless `PULUMI_IGNORE_AMBIENT_PLUGINS` is set; the version is
//!    not checked there, as in Pulumi);
//! 3. the plugin cache `$PULUMI_HOME/plugins` (default `~/.pulumi/plugins`):
//!    `resource-P-v<version>/pulumi-resource-P`, the asked version exactly,
//!    or with none asked the highest installed (releases before
//!    prereleases).
//!
//! Everything the search depends on is an input ([`DiscoveryEnv`]: the
//! environment variables, the project directory and its plugin entries);
//! [`DiscoveryEnv::from_process`] reads them from the running process. The
//! search itself only looks at the file system. Its result is a
//! [`PluginLaunch`]: what to run, where, and where it was found; a failure
//! ([`DiscoveryError`]) names the package, the version and every place
//! looked.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use semver::Version;
use serde_norway::Value as Yaml;

/// The project file's name.
pub const PROJECT_FILE: &str = "Pulumi.yaml";
/// A source plugin's description file.
pub const PLUGIN_FILE: &str = "PulumiPlugin.yaml";

/// The executable of package `name`'s resource provider.
pub fn executable_name(name: &str) -> String {
    format!("pulumi-resource-{name}")
}

/// One `plugins: providers:` entry of a project's `Pulumi.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectPlugin {
    /// The package.
    pub name: String,
    /// The path as written (relative paths are against the project).
    pub path: PathBuf,
    /// The version it declares, if any.
    pub version: Option<String>,
}

/// Why a project file's plugin entries could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectFileError {
    /// The file.
    pub path: PathBuf,
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for ProjectFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read {}: {}", self.path.display(), self.message)
    }
}

/// The `plugins: providers:` entries of a `Pulumi.yaml` text (sans-IO).
///
/// # Errors
/// The text as a message: not YAML, or an entry without a string `name`
/// and `path`.
pub fn parse_project_plugins(text: &str) -> Result<Vec<ProjectPlugin>, String> {
    let doc: Yaml = serde_norway::from_str(text).map_err(|e| e.to_string())?;
    let Some(plugins) = doc.get("plugins") else {
        return Ok(Vec::new());
    };
    if plugins.is_null() {
        return Ok(Vec::new());
    }
    if !plugins.is_mapping() {
        return Err("`plugins` must be a mapping".into());
    }
    let providers = match plugins.get("providers") {
        None | Some(Yaml::Null) => return Ok(Vec::new()),
        Some(Yaml::Sequence(s)) => s,
        Some(_) => return Err("`plugins.providers` must be a list".into()),
    };
    let mut out = Vec::with_capacity(providers.len());
    for (i, entry) in providers.iter().enumerate() {
        let text = |key: &str| -> Result<Option<String>, String> {
            match entry.get(key) {
                None | Some(Yaml::Null) => Ok(None),
                Some(Yaml::String(s)) => Ok(Some(s.clone())),
                // `version: 1.2` would be a YAML number.
                Some(Yaml::Number(n)) if key == "version" => Ok(Some(n.to_string())),
                Some(_) => Err(format!("`plugins.providers[{i}].{key}` must be a string")),
            }
        };
        if !entry.is_mapping() {
            return Err(format!("`plugins.providers[{i}]` must be a mapping"));
        }
        let name = text("name")?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("`plugins.providers[{i}]` has no `name`"))?;
        let path = text("path")?
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("`plugins.providers[{i}]` (`{name}`) has no `path`"))?;
        out.push(ProjectPlugin {
            name,
            path: PathBuf::from(path),
            version: text("version")?.filter(|v| !v.is_empty()),
        });
    }
    Ok(out)
}

/// Reads the plugin entries of `<project_dir>/Pulumi.yaml` (none when the
/// file does not exist).
///
/// # Errors
/// [`ProjectFileError`]: the file cannot be read or its entries are
/// invalid.
pub fn read_project_plugins(project_dir: &Path) -> Result<Vec<ProjectPlugin>, ProjectFileError> {
    let path = project_dir.join(PROJECT_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(ProjectFileError {
                path,
                message: e.to_string(),
            })
        }
    };
    parse_project_plugins(&text).map_err(|message| ProjectFileError { path, message })
}

/// Everything a search depends on besides the file system.
#[derive(Debug, Clone)]
pub struct DiscoveryEnv {
    /// The project directory: project plugin paths resolve against it and
    /// plugins run in it.
    pub project_dir: Option<PathBuf>,
    /// The project's plugin entries, or why they could not be read (then
    /// every search fails with [`DiscoveryError::ProjectFile`], naming
    /// the package).
    pub project_plugins: Result<Vec<ProjectPlugin>, ProjectFileError>,
    /// `PULUMI_HOME`.
    pub pulumi_home: Option<PathBuf>,
    /// `HOME` (the plugin cache defaults to `$HOME/.pulumi/plugins`).
    pub home: Option<PathBuf>,
    /// `PATH`.
    pub path: Option<OsString>,
    /// `PULUMI_IGNORE_AMBIENT_PLUGINS` is truthy: `PATH` is not searched.
    pub ignore_ambient: bool,
    /// `PULUMI_PYTHON_CMD`: the interpreter of a `runtime: python` plugin
    /// without a virtual environment (default `python3`).
    pub python_cmd: Option<OsString>,
}

impl Default for DiscoveryEnv {
    /// No project, no environment: nothing is found.
    fn default() -> Self {
        Self {
            project_dir: None,
            project_plugins: Ok(Vec::new()),
            pulumi_home: None,
            home: None,
            path: None,
            ignore_ambient: false,
            python_cmd: None,
        }
    }
}

impl DiscoveryEnv {
    /// The running process's environment, with the project in
    /// `project_dir` (its `Pulumi.yaml` read now).
    pub fn from_process(project_dir: Option<&Path>) -> Self {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        Self {
            project_dir: project_dir.map(Path::to_owned),
            project_plugins: project_dir.map_or(Ok(Vec::new()), read_project_plugins),
            pulumi_home: var("PULUMI_HOME").map(PathBuf::from),
            home: var("HOME").map(PathBuf::from),
            path: var("PATH"),
            ignore_ambient: var("PULUMI_IGNORE_AMBIENT_PLUGINS")
                .is_some_and(|v| truthy(&v.to_string_lossy())),
            python_cmd: var("PULUMI_PYTHON_CMD"),
        }
    }

    /// The plugin cache: `$PULUMI_HOME/plugins`, else `$HOME/.pulumi/plugins`.
    pub fn plugin_cache(&self) -> Option<PathBuf> {
        self.pulumi_home
            .clone()
            .or_else(|| self.home.as_ref().map(|h| h.join(".pulumi")))
            .map(|h| h.join("plugins"))
    }
}

/// Pulumi's `cmdutil.IsTruthy`.
fn truthy(v: &str) -> bool {
    matches!(v, "1" | "true" | "TRUE" | "True")
}

/// Where a plugin was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// A project `plugins: providers:` entry (its path, resolved).
    Project(PathBuf),
    /// A directory on `PATH`.
    Path(PathBuf),
    /// The plugin cache (the `resource-P-v<version>` directory).
    Cache(PathBuf),
}

impl fmt::Display for PluginSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Project(p) => write!(f, "the project's plugin entry {}", p.display()),
            Self::Path(p) => write!(f, "PATH ({})", p.display()),
            Self::Cache(p) => write!(f, "the plugin cache ({})", p.display()),
        }
    }
}

/// How a plugin is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// An executable `pulumi-resource-P`.
    Executable,
    /// A `PulumiPlugin.yaml` directory with `runtime: python`.
    Python,
    /// A `PulumiPlugin.yaml` directory with `runtime: nodejs`.
    Nodejs,
}

/// What to start for a package's provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginLaunch {
    /// The package.
    pub package: String,
    /// The version asked for, if any.
    pub version: Option<Version>,
    /// The version the plugin cache's directory name says, if found there.
    pub found_version: Option<Version>,
    /// The program to run.
    pub program: PathBuf,
    /// Its arguments (the engine address is appended at start).
    pub args: Vec<OsString>,
    /// Its working directory (the project's; `None`: keel's own).
    pub dir: Option<PathBuf>,
    /// Environment variables set on top of keel's own.
    pub env: Vec<(OsString, OsString)>,
    /// Where it was found.
    pub source: PluginSource,
    /// How it runs.
    pub kind: PluginKind,
}

impl PluginLaunch {
    /// The plugin as a person names it: `pulumi-resource-aws v6.1.0 (the
    /// plugin cache (...))`.
    pub fn describe(&self) -> String {
        let v = self
            .found_version
            .as_ref()
            .or(self.version.as_ref())
            .map(|v| format!(" v{v}"))
            .unwrap_or_default();
        format!("{}{v} from {}", executable_name(&self.package), self.source)
    }
}

/// One place a search looked, and what it saw there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Looked {
    /// The place.
    pub place: String,
    /// Why it did not serve.
    pub why: String,
}

impl fmt::Display for Looked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.place, self.why)
    }
}

/// The places, as one clause.
struct Places<'a>(&'a [Looked]);

impl fmt::Display for Places<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, l) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{l}")?;
        }
        Ok(())
    }
}

/// The places looked before, as a suffix (nothing when none).
struct Before<'a>(&'a [Looked]);

impl fmt::Display for Before<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        write!(f, " (looked before in {})", Places(self.0))
    }
}

/// ` v1.2.3`, or nothing.
struct V<'a>(&'a Option<Version>);

impl fmt::Display for V<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, " v{v}"),
            None => Ok(()),
        }
    }
}

/// Why no plugin could be launched for a package.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// Nothing anywhere.
    #[error("no plugin for package `{package}`{}: looked in {}", V(.version), Places(.looked))]
    NotFound {
        /// The package.
        package: String,
        /// The version asked for.
        version: Option<Version>,
        /// Every place looked.
        looked: Vec<Looked>,
    },
    /// The asked version is not a version.
    #[error("the plugin for package `{package}`: `{version}` is not a semantic version")]
    BadVersion {
        /// The package.
        package: String,
        /// What was asked.
        version: String,
    },
    /// Package `pulumi` is the engine's own.
    #[error("package `pulumi` is served by keel itself, not by a plugin")]
    BuiltIn,
    /// The project file could not be read.
    #[error("no plugin for package `{package}`{}: {error} (the project's plugin entries come first; nothing else was looked at)", V(.version))]
    ProjectFile {
        /// The package.
        package: String,
        /// The version asked for.
        version: Option<Version>,
        /// The file's problem.
        error: ProjectFileError,
    },
    /// A project entry, a cache directory or a `PulumiPlugin.yaml` that
    /// claims the package cannot be used.
    #[error("the plugin for package `{package}`{} from {at}: {message}{}", V(.version), Before(.looked))]
    Unusable {
        /// The package.
        package: String,
        /// The version asked for.
        version: Option<Version>,
        /// Where it was.
        at: PluginSource,
        /// What is wrong.
        message: String,
        /// The places looked until then.
        looked: Vec<Looked>,
    },
    /// A `PulumiPlugin.yaml` names a runtime keel cannot start.
    #[error("the plugin for package `{package}`{} in {}: {PLUGIN_FILE} names runtime `{runtime}`; keel starts `python` and `nodejs` plugins{}", V(.version), .dir.display(), Before(.looked))]
    UnknownRuntime {
        /// The package.
        package: String,
        /// The version asked for.
        version: Option<Version>,
        /// The plugin's directory.
        dir: PathBuf,
        /// The runtime named.
        runtime: String,
        /// The places looked until then.
        looked: Vec<Looked>,
    },
}

/// Finds the provider plugin of `package`, at `version` if given (a
/// semantic version, `v` prefix allowed; an empty one, as the Python SDK
/// sends for "any", is none), as the module docs say.
///
/// # Errors
/// [`DiscoveryError`] (boxed: it is large), naming the package, the
/// version and the places looked.
pub fn find(
    env: &DiscoveryEnv,
    package: &str,
    version: Option<&str>,
) -> Result<PluginLaunch, Box<DiscoveryError>> {
    if package == "pulumi" {
        return Err(Box::new(DiscoveryError::BuiltIn));
    }
    let version = version
        .filter(|v| !v.trim().is_empty())
        .map(|v| {
            let t = v.trim();
            Version::parse(t.strip_prefix('v').unwrap_or(t)).map_err(|_| {
                Box::new(DiscoveryError::BadVersion {
                    package: package.to_owned(),
                    version: v.to_owned(),
                })
            })
        })
        .transpose()?;
    let search = Search {
        env,
        package,
        version: &version,
        exe: executable_name(package),
    };
    let mut looked = Vec::new();
    if let Some(found) = search.project(&mut looked)? {
        return Ok(found);
    }
    if let Some(found) = search.path(&mut looked) {
        return Ok(found);
    }
    if let Some(found) = search.cache(&mut looked)? {
        return Ok(found);
    }
    Err(Box::new(DiscoveryError::NotFound {
        package: package.to_owned(),
        version,
        looked,
    }))
}

struct Search<'a> {
    env: &'a DiscoveryEnv,
    package: &'a str,
    version: &'a Option<Version>,
    exe: String,
}

impl Search<'_> {
    fn launch(&self, program: PathBuf, source: PluginSource, kind: PluginKind) -> PluginLaunch {
        PluginLaunch {
            package: self.package.to_owned(),
            version: self.version.clone(),
            found_version: None,
            program,
            args: Vec::new(),
            dir: self.env.project_dir.clone(),
            env: Vec::new(),
            source,
            kind,
        }
    }

    fn unusable(
        &self,
        source: PluginSource,
        message: String,
        looked: &[Looked],
    ) -> Box<DiscoveryError> {
        Box::new(DiscoveryError::Unusable {
            package: self.package.to_owned(),
            version: self.version.clone(),
            at: source,
            message,
            looked: looked.to_vec(),
        })
    }

    /// 1. The project's entries.
    fn project(
        &self,
        looked: &mut Vec<Looked>,
    ) -> Result<Option<PluginLaunch>, Box<DiscoveryError>> {
        let entries = match &self.env.project_plugins {
            Ok(e) => e,
            Err(error) => {
                return Err(Box::new(DiscoveryError::ProjectFile {
                    package: self.package.to_owned(),
                    version: self.version.clone(),
                    error: error.clone(),
                }))
            }
        };
        let place = match &self.env.project_dir {
            Some(d) => format!(
                "the `plugins.providers` of {}",
                d.join(PROJECT_FILE).display()
            ),
            None => "the project's `plugins.providers` (no project)".to_owned(),
        };
        let mut chosen: Option<&ProjectPlugin> = None;
        let mut skipped = Vec::new();
        for e in entries.iter().filter(|e| e.name == self.package) {
            let declared = match &e.version {
                None => None,
                Some(v) => match Version::parse(v.strip_prefix('v').unwrap_or(v)) {
                    Ok(v) => Some(v),
                    Err(_) => {
                        return Err(self.unusable(
                            PluginSource::Project(e.path.clone()),
                            format!("its `version: {v}` is not a semantic version"),
                            looked,
                        ))
                    }
                },
            };
            if let (Some(want), Some(have)) = (self.version, &declared) {
                if want != have {
                    skipped.push(format!("{} is v{have}", e.path.display()));
                    continue;
                }
            }
            if let Some(prev) = chosen {
                if declared.is_some() && prev.version.is_some() {
                    return Err(self.unusable(
                        PluginSource::Project(e.path.clone()),
                        format!(
                            "two entries name it with the same version ({} and {})",
                            prev.path.display(),
                            e.path.display()
                        ),
                        looked,
                    ));
                }
                continue;
            }
            chosen = Some(e);
        }
        let Some(entry) = chosen else {
            let why = if skipped.is_empty() {
                format!("no entry for `{}`", self.package)
            } else {
                format!("other versions: {}", skipped.join(", "))
            };
            looked.push(Looked { place, why });
            return Ok(None);
        };
        let path = match &self.env.project_dir {
            Some(d) => d.join(&entry.path),
            None => entry.path.clone(),
        };
        let source = PluginSource::Project(path.clone());
        if path.is_file() {
            return if is_executable(&path) {
                Ok(Some(self.launch(path, source, PluginKind::Executable)))
            } else {
                Err(self.unusable(source, "it is not executable".into(), looked))
            };
        }
        if !path.is_dir() {
            return Err(self.unusable(source, "it does not exist".into(), looked));
        }
        match self.in_dir(&path, source.clone(), looked)? {
            Some(l) => Ok(Some(l)),
            None => Err(self.unusable(
                source,
                format!(
                    "the directory holds neither `{}` nor {PLUGIN_FILE}",
                    self.exe
                ),
                looked,
            )),
        }
    }

    /// A plugin directory: its executable, else its `PulumiPlugin.yaml`.
    fn in_dir(
        &self,
        dir: &Path,
        source: PluginSource,
        looked: &[Looked],
    ) -> Result<Option<PluginLaunch>, Box<DiscoveryError>> {
        let exe = dir.join(&self.exe);
        if exe.is_file() {
            return if is_executable(&exe) {
                Ok(Some(self.launch(exe, source, PluginKind::Executable)))
            } else {
                Err(self.unusable(
                    source,
                    format!("`{}` is not executable", exe.display()),
                    looked,
                ))
            };
        }
        let file = dir.join(PLUGIN_FILE);
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(self.unusable(
                    source,
                    format!("cannot read {}: {e}", file.display()),
                    looked,
                ))
            }
        };
        let runtime = parse_plugin_runtime(&text).map_err(|m| {
            self.unusable(source.clone(), format!("{}: {m}", file.display()), looked)
        })?;
        // Absolute, since the plugin runs in the project's directory.
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
        match runtime.name.as_str() {
            "python" => {
                let python = self.python(&dir, runtime.virtualenv.as_deref());
                let mut l = self.launch(python, source, PluginKind::Python);
                l.args = vec!["-u".into(), dir.into_os_string()];
                Ok(Some(l))
            }
            "nodejs" => {
                let mut l = self.launch("node".into(), source, PluginKind::Nodejs);
                l.args = vec![dir.into_os_string()];
                Ok(Some(l))
            }
            other => Err(Box::new(DiscoveryError::UnknownRuntime {
                package: self.package.to_owned(),
                version: self.version.clone(),
                dir,
                runtime: other.to_owned(),
                looked: looked.to_vec(),
            })),
        }
    }

    /// A Python plugin's interpreter: its `virtualenv` option, else its
    /// `venv` or `.venv`, else `PULUMI_PYTHON_CMD` or `python3`.
    fn python(&self, dir: &Path, virtualenv: Option<&str>) -> PathBuf {
        let named = virtualenv.map(|v| dir.join(v));
        let candidates = named
            .into_iter()
            .chain([dir.join("venv"), dir.join(".venv")]);
        for venv in candidates {
            let bin = venv.join("bin").join("python");
            if bin.is_file() {
                return bin;
            }
        }
        self.env
            .python_cmd
            .clone()
            .map_or_else(|| PathBuf::from("python3"), PathBuf::from)
    }

    /// 2. `PATH`.
    fn path(&self, looked: &mut Vec<Looked>) -> Option<PluginLaunch> {
        if self.env.ignore_ambient {
            looked.push(Looked {
                place: "PATH".into(),
                why: "skipped: PULUMI_IGNORE_AMBIENT_PLUGINS is set".into(),
            });
            return None;
        }
        let Some(path) = &self.env.path else {
            looked.push(Looked {
                place: "PATH".into(),
                why: "not set".into(),
            });
            return None;
        };
        let dirs: Vec<PathBuf> = std::env::split_paths(path)
            .filter(|d| !d.as_os_str().is_empty())
            .collect();
        for d in &dirs {
            let exe = d.join(&self.exe);
            if exe.is_file() && is_executable(&exe) {
                return Some(self.launch(
                    exe,
                    PluginSource::Path(d.clone()),
                    PluginKind::Executable,
                ));
            }
        }
        let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        looked.push(Looked {
            place: format!("PATH ({})", shown.join(":")),
            why: format!("no executable `{}`", self.exe),
        });
        None
    }

    /// 3. The plugin cache.
    fn cache(&self, looked: &mut Vec<Looked>) -> Result<Option<PluginLaunch>, Box<DiscoveryError>> {
        let Some(cache) = self.env.plugin_cache() else {
            looked.push(Looked {
                place: "the plugin cache".into(),
                why: "neither PULUMI_HOME nor HOME is set".into(),
            });
            return Ok(None);
        };
        let place = format!("the plugin cache {}", cache.display());
        let entries = match std::fs::read_dir(&cache) {
            Ok(e) => e,
            Err(e) => {
                let why = if e.kind() == std::io::ErrorKind::NotFound {
                    "it does not exist".to_owned()
                } else {
                    format!("cannot be read: {e}")
                };
                looked.push(Looked { place, why });
                return Ok(None);
            }
        };
        let prefix = format!("resource-{}-v", self.package);
        let mut installed: Vec<(Version, PathBuf)> = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(v) = name.strip_prefix(&prefix) else {
                continue;
            };
            if is_temporary(name) || cache.join(format!("{name}.partial")).exists() {
                continue;
            }
            let dir = entry.path();
            if !dir.is_dir() {
                continue;
            }
            if let Ok(v) = Version::parse(v) {
                installed.push((v, dir));
            }
        }
        let pick = match self.version {
            Some(want) => installed
                .iter()
                .find(|(v, _)| v.cmp_precedence(want).is_eq()),
            None => installed
                .iter()
                .filter(|(v, _)| v.pre.is_empty())
                .max_by(|a, b| a.0.cmp_precedence(&b.0))
                .or_else(|| installed.iter().max_by(|a, b| a.0.cmp_precedence(&b.0))),
        };
        let Some((found, dir)) = pick else {
            let why = if installed.is_empty() {
                format!("no `{prefix}<version>` directory")
            } else {
                installed.sort_by(|a, b| a.0.cmp_precedence(&b.0));
                let have: Vec<String> = installed.iter().map(|(v, _)| format!("v{v}")).collect();
                format!("installed: {}", have.join(", "))
            };
            looked.push(Looked { place, why });
            return Ok(None);
        };
        let source = PluginSource::Cache(dir.clone());
        match self.in_dir(dir, source.clone(), looked)? {
            Some(mut l) => {
                l.found_version = Some(found.clone());
                Ok(Some(l))
            }
            None => Err(self.unusable(
                source,
                format!(
                    "the directory holds neither `{}` nor {PLUGIN_FILE}",
                    self.exe
                ),
                looked,
            )),
        }
    }
}

/// A download in progress: the name ends in `.tmp<digits>`.
fn is_temporary(name: &str) -> bool {
    name.rsplit_once(".tmp")
        .is_some_and(|(_, d)| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// A `PulumiPlugin.yaml`'s runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Runtime {
    name: String,
    virtualenv: Option<String>,
}

/// `runtime: python` or `runtime: {name: python, options: {virtualenv: venv}}`.
fn parse_plugin_runtime(text: &str) -> Result<Runtime, String> {
    let doc: Yaml = serde_norway::from_str(text).map_err(|e| e.to_string())?;
    match doc.get("runtime") {
        Some(Yaml::String(name)) => Ok(Runtime {
            name: name.clone(),
            virtualenv: None,
        }),
        Some(m @ Yaml::Mapping(_)) => {
            let Some(Yaml::String(name)) = m.get("name") else {
                return Err("`runtime.name` must be a string".into());
            };
            let virtualenv = match m.get("options").and_then(|o| o.get("virtualenv")) {
                None | Some(Yaml::Null) => None,
                Some(Yaml::String(v)) => Some(v.clone()),
                Some(_) => return Err("`runtime.options.virtualenv` must be a string".into()),
            };
            Ok(Runtime {
                name: name.clone(),
                virtualenv,
            })
        }
        None | Some(Yaml::Null) => Err("it names no `runtime`".into()),
        Some(_) => Err("`runtime` must be a string or a mapping".into()),
    }
}

#[cfg(unix)]
fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(p: &Path) -> bool {
    p.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temp tree: a project, a plugin cache and PATH directories.
    struct Tree {
        root: tempfile::TempDir,
    }

    impl Tree {
        fn new() -> Self {
            Self {
                root: tempfile::tempdir().unwrap(),
            }
        }

        fn p(&self, rel: &str) -> PathBuf {
            self.root.path().join(rel)
        }

        /// An executable shell script at `rel`.
        fn exe(&self, rel: &str) -> PathBuf {
            let p = self.p(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            p
        }

        fn file(&self, rel: &str, text: &str) -> PathBuf {
            let p = self.p(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
            p
        }

        /// The environment: project `proj`, PULUMI_HOME `home`, PATH `bin1:bin2`.
        fn env(&self) -> DiscoveryEnv {
            let project = self.p("proj");
            std::fs::create_dir_all(&project).unwrap();
            DiscoveryEnv {
                project_plugins: read_project_plugins(&project),
                project_dir: Some(project),
                pulumi_home: Some(self.p("home")),
                home: None,
                path: Some(std::env::join_paths([self.p("bin1"), self.p("bin2")]).unwrap()),
                ignore_ambient: false,
                python_cmd: None,
            }
        }
    }

    fn err(r: Result<PluginLaunch, Box<DiscoveryError>>) -> DiscoveryError {
        match r {
            Ok(l) => panic!("found {l:?}"),
            Err(e) => *e,
        }
    }

    #[test]
    fn the_project_comes_first_then_path_then_the_cache() {
        let t = Tree::new();
        t.exe("home/plugins/resource-aws-v6.1.0/pulumi-resource-aws");
        let path_exe = t.exe("bin2/pulumi-resource-aws");
        let proj_exe = t.exe("proj/plugins/aws/pulumi-resource-aws");
        t.file(
            "proj/Pulumi.yaml",
            "name: p\nruntime: python\nplugins:\n  providers:\n    - name: aws\n      path: plugins/aws\n",
        );
        let l = find(&t.env(), "aws", Some("6.1.0")).unwrap();
        assert_eq!(l.program, proj_exe);
        assert_eq!(l.source, PluginSource::Project(t.p("proj/plugins/aws")));
        assert_eq!(l.kind, PluginKind::Executable);
        assert_eq!(l.dir, Some(t.p("proj")), "it runs in the project");

        std::fs::remove_file(t.p("proj/Pulumi.yaml")).unwrap();
        let l = find(&t.env(), "aws", Some("6.1.0")).unwrap();
        assert_eq!(l.program, path_exe, "PATH before the cache, as in Pulumi");
        assert_eq!(l.source, PluginSource::Path(t.p("bin2")));

        let mut env = t.env();
        env.ignore_ambient = true;
        let l = find(&env, "aws", Some("6.1.0")).unwrap();
        assert_eq!(
            l.program,
            t.p("home/plugins/resource-aws-v6.1.0/pulumi-resource-aws")
        );
        assert_eq!(l.found_version, Some(Version::new(6, 1, 0)));
        assert!(l.describe().contains("v6.1.0"), "{}", l.describe());
    }

    #[test]
    fn a_project_path_may_be_the_executable_itself() {
        let t = Tree::new();
        let exe = t.exe("proj/bin/my-provider");
        t.file(
            "proj/Pulumi.yaml",
            "name: p\nplugins:\n  providers:\n  - name: aws\n    path: ./bin/my-provider\n    version: 1.0.0\n",
        );
        let l = find(&t.env(), "aws", None).unwrap();
        assert_eq!(l.program, t.p("proj/./bin/my-provider"));
        assert!(l.program.ends_with("my-provider") && exe.exists());
    }

    #[test]
    fn a_project_entry_of_another_version_is_skipped_and_said() {
        let t = Tree::new();
        t.exe("proj/aws5/pulumi-resource-aws");
        t.file(
            "proj/Pulumi.yaml",
            "name: p\nplugins:\n  providers:\n  - {name: aws, path: aws5, version: 5.0.0}\n",
        );
        let e = err(find(&t.env(), "aws", Some("6.1.0")));
        let text = e.to_string();
        assert!(
            text.starts_with("no plugin for package `aws` v6.1.0: looked in "),
            "{text}"
        );
        assert!(text.contains("aws5 is v5.0.0"), "{text}");
        // With no version asked, the entry serves.
        assert!(find(&t.env(), "aws", None).is_ok());
    }

    #[test]
    fn two_project_entries_with_the_same_version_are_an_error() {
        let t = Tree::new();
        t.exe("proj/a/pulumi-resource-aws");
        t.exe("proj/b/pulumi-resource-aws");
        t.file(
            "proj/Pulumi.yaml",
            "name: p\nplugins:\n  providers:\n  - {name: aws, path: a, version: 1.0.0}\n  - {name: aws, path: b, version: 1.0.0}\n",
        );
        let text = err(find(&t.env(), "aws", None)).to_string();
        assert!(text.contains("two entries name it"), "{text}");
    }

    #[test]
    fn a_broken_project_entry_is_an_error_not_a_fall_through() {
        let t = Tree::new();
        t.exe("bin1/pulumi-resource-aws");
        t.file(
            "proj/Pulumi.yaml",
            "name: p\nplugins:\n  providers:\n  - {name: aws, path: missing}\n",
        );
        let text = err(find(&t.env(), "aws", None)).to_string();
        assert!(text.contains("does not exist"), "{text}");
        assert!(text.contains("package `aws`"), "{text}");

        std::fs::create_dir_all(t.p("proj/missing")).unwrap();
        let text = err(find(&t.env(), "aws", None)).to_string();
        assert!(
            text.contains("holds neither `pulumi-resource-aws` nor PulumiPlugin.yaml"),
            "{text}"
        );
    }

    #[test]
    fn the_highest_installed_version_without_one_asked() {
        let t = Tree::new();
        for v in ["1.2.0", "1.10.0", "1.9.3", "2.0.0-beta.1"] {
            t.exe(&format!(
                "home/plugins/resource-aws-v{v}/pulumi-resource-aws"
            ));
        }
        // Half-installed and temporary directories do not count.
        t.exe("home/plugins/resource-aws-v3.0.0/pulumi-resource-aws");
        t.file("home/plugins/resource-aws-v3.0.0.partial", "");
        t.exe("home/plugins/resource-aws-v4.0.0.tmp123/pulumi-resource-aws");
        // Another package whose name starts the same.
        t.exe("home/plugins/resource-aws-native-v9.0.0/pulumi-resource-aws-native");
        let l = find(&t.env(), "aws", None).unwrap();
        assert_eq!(l.found_version, Some(Version::parse("1.10.0").unwrap()));
        assert_eq!(l.version, None);
        assert_eq!(find(&t.env(), "aws", Some("")).unwrap(), l, "empty: any");
        // A version asked is matched exactly.
        let l = find(&t.env(), "aws", Some("v1.9.3")).unwrap();
        assert_eq!(l.found_version, Some(Version::parse("1.9.3").unwrap()));
        let l = find(&t.env(), "aws", Some("2.0.0-beta.1")).unwrap();
        assert_eq!(
            l.source,
            PluginSource::Cache(t.p("home/plugins/resource-aws-v2.0.0-beta.1"))
        );
        let text = err(find(&t.env(), "aws", Some("1.9.4"))).to_string();
        assert!(
            text.contains("installed: v1.2.0, v1.9.3, v1.10.0, v2.0.0-beta.1"),
            "{text}"
        );
        // Only prereleases: the highest of them.
        let l = find(&t.env(), "aws-native", None).unwrap();
        assert_eq!(l.found_version, Some(Version::new(9, 0, 0)));
    }

    #[test]
    fn the_cache_defaults_to_home_dot_pulumi() {
        let t = Tree::new();
        let exe = t.exe("user/.pulumi/plugins/resource-random-v4.0.0/pulumi-resource-random");
        let mut env = t.env();
        env.pulumi_home = None;
        env.home = Some(t.p("user"));
        assert_eq!(find(&env, "random", None).unwrap().program, exe);
    }

    #[test]
    fn not_found_names_the_package_the_version_and_every_place() {
        let t = Tree::new();
        t.exe("home/plugins/resource-aws-v6.0.0/pulumi-resource-aws");
        let e = err(find(&t.env(), "aws", Some("6.1.0")));
        let DiscoveryError::NotFound { looked, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(looked.len(), 3, "{looked:?}");
        let text = e.to_string();
        for part in [
            "no plugin for package `aws` v6.1.0: looked in ",
            "Pulumi.yaml (no entry for `aws`)",
            &format!("PATH ({}:{})", t.p("bin1").display(), t.p("bin2").display()),
            "no executable `pulumi-resource-aws`",
            &format!("the plugin cache {}", t.p("home/plugins").display()),
            "installed: v6.0.0",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        let mut env = t.env();
        env.pulumi_home = Some(t.p("nowhere"));
        let text = err(find(&env, "aws", None)).to_string();
        assert!(text.starts_with("no plugin for package `aws`: "), "{text}");
        assert!(
            text.contains("nowhere/plugins (it does not exist)"),
            "{text}"
        );
    }

    #[test]
    fn a_non_executable_file_on_path_is_passed_over() {
        let t = Tree::new();
        t.file("bin1/pulumi-resource-aws", "not a program");
        let exe = t.exe("bin2/pulumi-resource-aws");
        assert_eq!(find(&t.env(), "aws", None).unwrap().program, exe);
    }

    #[test]
    fn plugin_yaml_runtimes() {
        let t = Tree::new();
        t.file("proj/py/PulumiPlugin.yaml", "runtime: python\n");
        t.file("proj/py/__main__.py", "");
        t.file(
            "proj/Pulumi.yaml",
            "name: p\nplugins:\n  providers:\n  - {name: py, path: py}\n  - {name: node, path: node}\n  - {name: go, path: go}\n  - {name: venv, path: venv-plugin}\n",
        );
        let l = find(&t.env(), "py", None).unwrap();
        let dir = std::fs::canonicalize(t.p("proj/py")).unwrap();
        assert_eq!(l.kind, PluginKind::Python);
        assert_eq!(l.program, PathBuf::from("python3"));
        assert_eq!(
            l.args,
            vec![OsString::from("-u"), dir.clone().into_os_string()]
        );
        let mut env = t.env();
        env.python_cmd = Some("/opt/python".into());
        assert_eq!(
            find(&env, "py", None).unwrap().program,
            PathBuf::from("/opt/python")
        );
        // Its own virtual environment wins.
        let venv_python = t.exe("proj/py/venv/bin/python");
        let l = find(&env, "py", None).unwrap();
        assert_eq!(
            l.program,
            std::fs::canonicalize(t.p("proj/py"))
                .unwrap()
                .join("venv/bin/python")
        );
        assert!(venv_python.exists());
        // A named one, in the mapping form.
        t.file(
            "proj/venv-plugin/PulumiPlugin.yaml",
            "runtime:\n  name: python\n  options:\n    virtualenv: .env3\n",
        );
        t.exe("proj/venv-plugin/.env3/bin/python");
        let l = find(&t.env(), "venv", None).unwrap();
        assert!(l.program.ends_with("venv-plugin/.env3/bin/python"), "{l:?}");

        t.file("proj/node/PulumiPlugin.yaml", "runtime: nodejs\n");
        let l = find(&t.env(), "node", None).unwrap();
        assert_eq!(l.kind, PluginKind::Nodejs);
        assert_eq!(l.program, PathBuf::from("node"));
        assert_eq!(
            l.args,
            vec![std::fs::canonicalize(t.p("proj/node"))
                .unwrap()
                .into_os_string()]
        );

        t.file("proj/go/PulumiPlugin.yaml", "runtime: go\n");
        let e = err(find(&t.env(), "go", Some("1.0.0")));
        assert!(matches!(e, DiscoveryError::UnknownRuntime { ref runtime, .. } if runtime == "go"));
        let text = e.to_string();
        assert!(text.contains("package `go` v1.0.0"), "{text}");
        assert!(text.contains("names runtime `go`"), "{text}");
    }

    #[test]
    fn an_unreadable_project_file_names_the_package_and_the_file() {
        let t = Tree::new();
        t.exe("bin1/pulumi-resource-aws");
        t.file(
            "proj/Pulumi.yaml",
            "name: p\nplugins:\n  providers: {name: aws}\n",
        );
        let e = err(find(&t.env(), "aws", Some("1.0.0")));
        let text = e.to_string();
        assert!(text.contains("package `aws` v1.0.0"), "{text}");
        assert!(text.contains("Pulumi.yaml"), "{text}");
        assert!(
            text.contains("`plugins.providers` must be a list"),
            "{text}"
        );

        t.file("proj/Pulumi.yaml", "name: [unclosed\n");
        assert!(matches!(
            err(find(&t.env(), "aws", None)),
            DiscoveryError::ProjectFile { .. }
        ));
    }

    #[test]
    fn entries_parse() {
        let got = parse_project_plugins(
            "name: p\nplugins:\n  providers:\n  - name: a\n    path: x\n    version: 1.2\n  - name: b\n    path: /abs\n",
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ProjectPlugin {
                    name: "a".into(),
                    path: "x".into(),
                    version: Some("1.2".into())
                },
                ProjectPlugin {
                    name: "b".into(),
                    path: "/abs".into(),
                    version: None
                },
            ]
        );
        assert_eq!(parse_project_plugins("name: p\n").unwrap(), vec![]);
        assert!(
            parse_project_plugins("plugins:\n  providers:\n  - {path: x}\n")
                .unwrap_err()
                .contains("has no `name`")
        );
    }

    #[test]
    fn bad_versions_and_the_builtin_package() {
        let t = Tree::new();
        assert!(matches!(
            err(find(&t.env(), "aws", Some("latest"))),
            DiscoveryError::BadVersion { .. }
        ));
        assert_eq!(err(find(&t.env(), "pulumi", None)), DiscoveryError::BuiltIn);
    }
}
