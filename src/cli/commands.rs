//! The commands: each validates its input completely (program files,
//! import files, flags not supported yet) before it takes the stack's lock,
//! so bad input changes nothing; operations then hold the lock until they
//! end and render their events through [`Display`].

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use super::args::{
    Cli, CloudCommand, Command, EngineArgs, FilterArgs, OpArgs, PreviewArgs, Providers, SimArgs,
    StackCommand, StateCommand, UpArgs,
};
use super::display::{out, show_value, Display, Style};
use super::history::{recorded, Recorder};
use super::program::ProgramFile;
use super::run::{CliProgram, FileProgram};
use super::serving::{self, Choice, Origin};
use super::show;
use super::CliError;
use crate::config::StackConfig;
use crate::engine::{Engine, EngineConfig, EngineError, Outcome};
use crate::events::{EngineEvent, EventSink};
use crate::grpc::plugin::discovery::DiscoveryEnv;
use crate::grpc::plugin::served::{PluginServed, DYNAMIC_PYTHON};
use crate::grpc::python::{PythonOptions, PythonProgram, PythonProject};
use crate::model::{CheckpointFile, Deployment, Urn};
use crate::persist::backend::{BackendError, OpenStack, PersistenceKind};
use crate::persist::fs::atomic_write;
use crate::persist::journal_file::JournalOptions;
use crate::persist::store::Store;
use crate::plan::generator::UpdateOptions;
use crate::plan::saved::SavedPlan;
use crate::provider::{ProviderRegistry, SimCloud, SimConfig};

pub mod adopt;

/// The simulated cloud's file in the backend directory.
pub const CLOUD_FILE: &str = "cloud.json";

/// Runs a parsed command line.
///
/// # Errors
/// [`CliError`]; its [`CliError::exit_code`] is the process's status.
pub fn run(mut cli: Cli) -> Result<(), CliError> {
    let backend = cli.backend_dir();
    // `--stack`, else the selected stack, else `dev`.
    let selected = Store::new(&backend).selected()?;
    cli.command.default_stack(selected);
    match cli.command {
        Command::Stack(StackCommand::Ls { json }) => super::stacks::ls(&backend, json),
        Command::Stack(StackCommand::Select { name }) => super::stacks::select(&backend, &name),
        Command::Stack(StackCommand::Init { name }) => super::stacks::init(&backend, &name),
        Command::Stack(StackCommand::Rm {
            name,
            force,
            preserve_config,
            program,
            yes,
        }) => {
            let config = (!preserve_config).then_some(program.as_path());
            super::stacks::rm(&backend, &name, force, config, yes)
        }
        Command::Stack(StackCommand::Rename {
            new,
            stack,
            program,
            yes,
        }) => super::stacks::rename(&backend, stack.name(), &new, &program, yes),
        Command::Stack(StackCommand::Output {
            name,
            stack,
            show_secrets,
            json,
        }) => super::stacks::output(&backend, stack.name(), name.as_deref(), show_secrets, json),
        Command::Stack(StackCommand::Graph {
            file,
            stack,
            json,
            ignore_parent_edges,
            ignore_dependency_edges,
            parent_edge_color,
            dependency_edge_color,
            short_node_name,
        }) => {
            let options = super::graph::GraphOptions {
                ignore_parent_edges,
                ignore_dependency_edges,
                parent_color: parent_edge_color,
                dependency_color: dependency_edge_color,
                short_node_name,
            };
            super::graph::graph(&backend, stack.name(), &file, json, &options)
        }
        Command::Stack(StackCommand::History { stack, json }) => {
            super::history::history(&backend, stack.name(), json)
        }
        Command::Up(a) => {
            let (stack, program) = (a.stack.name().to_owned(), a.program.clone());
            recorded(&backend, &stack, Op::Update.name(), Some(&program), |rec| {
                up(&backend, a, rec)
            })
        }
        Command::Preview(a) => preview(&backend, a),
        Command::Cancel(a) => super::cancel::cancel(&backend, a.stack.name(), a.yes),
        Command::Refresh(a) => recorded_operation(&backend, a, Op::Refresh),
        Command::Destroy(a) => recorded_operation(&backend, a, Op::Destroy),
        Command::Stack(StackCommand::Export {
            stack,
            file,
            show_secrets,
        }) => export(&backend, stack.name(), file.as_deref(), show_secrets),
        Command::Stack(StackCommand::Import { stack, file }) => {
            import(&backend, stack.name(), &file)
        }
        Command::State(StateCommand::Verify { stack, file }) => verify(&backend, stack, file),
        Command::State(StateCommand::Show { stack, json }) => {
            state_show(&backend, stack.name(), json)
        }
        Command::State(StateCommand::Delete(a)) => super::state_cmds::delete(&backend, a),
        Command::State(StateCommand::Protect(a)) => super::state_cmds::protect(
            &backend,
            a.stack.name(),
            super::surgery::Selection::Urns(a.urns),
            true,
            (a.yes, a.json),
        ),
        Command::State(StateCommand::Unprotect(a)) => super::state_cmds::protect(
            &backend,
            a.stack.name(),
            if a.all {
                super::surgery::Selection::All
            } else {
                super::surgery::Selection::Urns(a.urns)
            },
            false,
            (a.yes, a.json),
        ),
        Command::State(StateCommand::Rename(a)) => super::state_cmds::rename(&backend, a),
        Command::State(StateCommand::Move(a)) => super::state_cmds::move_resources(&backend, a),
        Command::State(StateCommand::Repair(a)) => super::state_cmds::repair(&backend, a),
        Command::State(StateCommand::Edit(a)) => super::state_cmds::edit(&backend, a),
        Command::Import(a) => adopt::import_resources(&backend, a),
        Command::Cloud(CloudCommand::List { json }) => cloud_list(&backend, json),
        Command::Cloud(CloudCommand::Add {
            ty,
            id,
            name,
            properties,
        }) => cloud_add(&backend, &ty, &id, name, &properties),
        Command::Config(c) => super::config::run(&backend, c),
    }
}

/// Refuses the flags of controls not built yet.
fn refuse(flags: &[(&str, bool)]) -> Result<(), CliError> {
    match flags.iter().find(|(_, used)| *used) {
        Some((flag, _)) => Err(CliError::Unsupported((*flag).to_owned())),
        None => Ok(()),
    }
}

fn refuse_filters(f: &FilterArgs, replace: &[String]) -> Result<(), CliError> {
    refuse(&[
        ("--target", !f.target.is_empty()),
        ("--exclude", !f.exclude.is_empty()),
        ("--target-dependents", f.target_dependents),
        ("--exclude-dependents", f.exclude_dependents),
        ("--replace", !replace.is_empty()),
    ])
}

/// The operator's controls from the flags (URNs checked before anything
/// runs).
fn update_options(f: &FilterArgs, replace: &[String]) -> Result<UpdateOptions, CliError> {
    fn urns(flag: &'static str, list: &[String]) -> Result<Vec<Urn>, CliError> {
        list.iter()
            .map(|u| {
                Urn::parse(u).map_err(|e| CliError::BadFlag {
                    flag,
                    message: e.to_string(),
                })
            })
            .collect()
    }
    // A value with a `*` is a glob, as Pulumi reads `--target`/`--exclude`.
    let globs = |list: &[String]| -> Vec<crate::plan::UrnGlob> {
        list.iter()
            .filter_map(|p| crate::plan::UrnGlob::parse(p))
            .collect()
    };
    // A value starting with `urn:` is a URN; any other is a program
    // file's declaration address (concrete, base or declaration).
    let literal = |list: &[String]| -> Vec<String> {
        list.iter()
            .filter(|p| !p.contains('*') && p.starts_with("urn:"))
            .cloned()
            .collect()
    };
    let addresses =
        |flag: &'static str, list: &[String]| -> Result<Vec<crate::model::Address>, CliError> {
            list.iter()
                .filter(|p| !p.contains('*') && !p.starts_with("urn:"))
                .map(|p| {
                    crate::model::Address::parse(p).map_err(|e| CliError::BadFlag {
                        flag,
                        message: format!("{e} (or give a URN, or a glob with `*`)"),
                    })
                })
                .collect()
        };
    Ok(UpdateOptions {
        targets: urns("--target", &literal(&f.target))?,
        target_globs: globs(&f.target),
        target_addresses: addresses("--target", &f.target)?,
        target_dependents: f.target_dependents,
        excludes: urns("--exclude", &literal(&f.exclude))?,
        exclude_globs: globs(&f.exclude),
        exclude_addresses: addresses("--exclude", &f.exclude)?,
        exclude_dependents: f.exclude_dependents,
        replaces: urns("--replace", replace)?,
        ..UpdateOptions::default()
    })
}

/// A stack name: a directory name and a URN part.
pub(super) fn check_stack(stack: &str) -> Result<(), CliError> {
    let ok = !stack.is_empty()
        && stack != "."
        && stack != ".."
        && stack
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(CliError::BadStackName(stack.to_owned()))
    }
}

/// The simulated cloud's configuration from the flags, with the program
/// file's `schemas`.
fn sim_config(a: &SimArgs, file: Option<&ProgramFile>) -> SimConfig {
    SimConfig {
        schemas: file.map(|f| f.schemas.clone()).unwrap_or_default(),
        latency: Duration::from_millis(a.sim_latency_ms),
        fail_rate: a.sim_fail_rate,
        fail: a.sim_fail.iter().cloned().collect(),
        seed: a.sim_seed,
        // The CLI never reads the call log: keep memory flat.
        record_calls: false,
        ..SimConfig::default()
    }
}

/// Loads the backend's simulated cloud; `autosave` persists every change.
/// The providers of an operation: the simulated cloud, and the built-in
/// `pulumi` package, whose stack references read the backend's stacks
/// (with the passphrase the operation uses).
/// Says, once per package, that a plugin (real) serves it: a diagnostic
/// of the operation (the simulated cloud, the default, says nothing).
#[derive(Debug, Clone)]
struct ServedBy {
    said: std::sync::Arc<std::sync::Mutex<BTreeSet<String>>>,
    events: EventSink,
    /// The operation's Engine server (a Python program's), given to the
    /// plugins it starts.
    engine: crate::grpc::construct::EngineAddress,
    /// The secrets its plugins were sent: masked in their errors, printed
    /// lines and logs.
    secrets: crate::grpc::engine_log::SharedSecrets,
}

impl ServedBy {
    fn new(events: &EventSink) -> Self {
        Self {
            said: std::sync::Arc::default(),
            events: events.clone(),
            engine: crate::grpc::construct::EngineAddress::new(),
            secrets: crate::grpc::engine_log::SharedSecrets::default(),
        }
    }

    fn plugin(&self, package: &str) {
        use crate::locks::MutexExt;
        if self.said.locked().insert(package.to_owned()) {
            self.events.send(crate::events::EngineEvent::Diagnostic {
                severity: "info".into(),
                urn: None,
                message: format!(
                    "package `{package}` is served by its plugin (real), not by the simulated cloud"
                ),
            });
        }
    }
}

/// For an operation that runs no SDK program (a program file, `refresh`,
/// `destroy`) but may start plugins: an Engine server whose address they
/// get, logging into the operation's events; kept until the operation
/// ends. A Python program's monitor serves one itself (`runs_sdk`).
///
/// # Errors
/// [`CliError::Runtime`] when the loopback socket cannot be opened.
async fn plugin_engine(
    served: &ServedBy,
    choice: &Choice,
    runs_sdk: bool,
) -> Result<Option<crate::grpc::engine_log::EngineLogServer>, CliError> {
    let plugins = choice.default == Providers::Plugins
        || choice.packages.values().any(|p| *p == Providers::Plugins);
    if runs_sdk || !plugins {
        return Ok(None);
    }
    let server = crate::grpc::engine_log::EngineLogServer::start(
        served.events.clone(),
        served.secrets.clone(),
    )
    .await
    .map_err(CliError::Runtime)?;
    served.engine.set(Some(server.address()));
    Ok(Some(server))
}

/// The explicit choice of serving: the flag, else the program's or the
/// stack's `keel:providers` setting (once the stack's config is applied).
fn explicit_serving(
    flag: Option<Providers>,
    source: Option<&ProgramSource>,
) -> Result<Option<(Providers, Origin)>, CliError> {
    if let Some(p) = flag {
        return Ok(Some((p, Origin::Flag)));
    }
    Ok(source
        .map(ProgramSource::providers_setting)
        .transpose()?
        .flatten()
        .map(|p| (p, Origin::Setting)))
}

/// The providers of an operation: package `pulumi` built in; Pulumi's
/// Python dynamic providers (package `pulumi-python`) served by the
/// dynamic-provider plugin run with the program's interpreter (in the
/// program's directory `dir`, when there is one), as Pulumi does; every
/// other package by the simulated cloud (`--providers sim`) or by its
/// discovered plugin (`--providers plugins`). `served` says which plugins
/// serve.
///
/// Before anything runs, the plugin of every package that must be real
/// and that the stack's state or the program file already names is
/// looked for ([`preflight`]): a missing one fails the operation once,
/// naming package, version and places, instead of at each resource.
///
/// # Errors
/// [`CliError::NoPlugin`].
/// The providers of an operation on a stack's `deployment` without a
/// program of its own (refresh, destroy, import): the engine log server
/// for plugins (kept alive by the caller for the operation) and the
/// registry.
///
/// # Errors
/// [`CliError::Runtime`] when the server cannot start; the registry's.
async fn stack_providers(
    backend: &Path,
    cloud: std::sync::Arc<SimCloud>,
    dir: Option<PathBuf>,
    choice: &Choice,
    served: &ServedBy,
    deployment: &Deployment,
) -> Result<
    (
        Option<crate::grpc::engine_log::EngineLogServer>,
        ProviderRegistry,
    ),
    CliError,
> {
    let server = plugin_engine(served, choice, false).await?;
    let registry = registry(
        backend,
        cloud,
        dir,
        choice,
        served,
        &named_packages(deployment, None),
        &declarations(deployment, Vec::new()),
    )?;
    Ok((server, registry))
}

fn registry(
    backend: &Path,
    cloud: std::sync::Arc<SimCloud>,
    dir: Option<PathBuf>,
    choice: &Choice,
    served: &ServedBy,
    named: &[(String, Option<String>)],
    declared: &[crate::provider::package::PackageDecl],
) -> Result<ProviderRegistry, CliError> {
    // An extension is not sent to plugins (yet): refused before anything
    // runs rather than served unparameterized.
    if let Some((d, e)) = declared
        .iter()
        .filter_map(|d| d.extension.as_ref().map(|e| (d, e)))
        .find(|(d, _)| choice.of(&d.name) == Providers::Plugins)
    {
        return Err(CliError::ExtensionPackage {
            base: d.name.clone(),
            name: e.name.clone(),
        });
    }
    // Packages a declaration makes parameterizations of a base plugin.
    let declared: BTreeMap<String, crate::provider::package::PackageDecl> = declared
        .iter()
        .filter(|d| d.parameterization.is_some())
        .map(|d| (d.namespace().to_owned(), d.clone()))
        .collect();
    let passphrase = crate::secrets::passphrase_from_env().ok().flatten();
    let python = PythonOptions::from_env(EventSink::default()).python;
    // Read (the project's `Pulumi.yaml` too) only when plugins are asked for.
    let any_plugin = choice.default == Providers::Plugins
        || choice.packages.values().any(|p| *p == Providers::Plugins);
    let env = if any_plugin {
        DiscoveryEnv::from_process(dir.as_deref())
    } else {
        DiscoveryEnv::default()
    };
    preflight(&env, choice, named, &declared)?;
    let served = served.clone();
    let choice = choice.clone();
    let factory = move |pkg: &str| -> std::sync::Arc<dyn crate::provider::Provider> {
        if pkg == DYNAMIC_PYTHON {
            served.plugin(pkg);
            std::sync::Arc::new(
                PluginServed::python_dynamic(&python, dir.as_deref())
                    .with_events(served.events.clone())
                    .with_engine(served.engine.clone())
                    .with_secrets(served.secrets.clone()),
            )
        } else if choice.of(pkg) == Providers::Plugins {
            served.plugin(pkg);
            let mut p = PluginServed::discovered(pkg, env.clone())
                .with_events(served.events.clone())
                .with_engine(served.engine.clone())
                .with_secrets(served.secrets.clone());
            if let Some(d) = declared.get(pkg) {
                p = p.with_declaration(d);
            }
            std::sync::Arc::new(p)
        } else {
            cloud.provider(pkg)
        }
    };
    Ok(
        ProviderRegistry::new(std::sync::Arc::new(factory)).with_stack_outputs(
            Store::new(backend)
                .with_passphrase(passphrase)
                .stack_outputs(),
        ),
    )
}

/// Looks for the plugin of each `named` package (with the version asked
/// for, if any) that `choice` serves by plugin.
///
/// # Errors
/// [`CliError::NoPlugin`] for the first one missing.
fn preflight(
    env: &DiscoveryEnv,
    choice: &Choice,
    named: &[(String, Option<String>)],
    declared: &BTreeMap<String, crate::provider::package::PackageDecl>,
) -> Result<(), CliError> {
    for (package, version) in named {
        if package == "pulumi" || package == DYNAMIC_PYTHON {
            continue;
        }
        if choice.of(package) == Providers::Plugins {
            // A parameterized package is served by its base plugin.
            let (plugin, version) = match declared.get(package) {
                Some(d) => (d.name.as_str(), d.version.as_deref()),
                None => (package.as_str(), version.as_deref()),
            };
            crate::grpc::plugin::discovery::find(env, plugin, version)
                .map_err(|source| CliError::NoPlugin { source })?;
        }
    }
    Ok(())
}

/// The packages a stack's state and a program file name: each provider
/// resource's package with its `version` input, and each program-file
/// resource's package.
fn named_packages(prior: &Deployment, file: Option<&ProgramFile>) -> Vec<(String, Option<String>)> {
    let mut out: BTreeMap<String, Option<String>> = BTreeMap::new();
    for s in &prior.resources {
        if let Some(pkg) = s.ty.as_str().strip_prefix("pulumi:providers:") {
            let version = match s.inputs.get("version") {
                Some(crate::model::PropertyValue::String(v)) => Some(v.clone()),
                _ => None,
            };
            let e = out.entry(pkg.to_owned()).or_default();
            if e.is_none() {
                *e = version;
            }
        }
    }
    for r in file.into_iter().flat_map(|f| f.resources.values()) {
        if !r.component {
            out.entry(r.ty.package().to_owned()).or_default();
        }
    }
    out.into_iter().collect()
}

/// The package declarations an operation serves packages by: the
/// program's (`program`), then, for each parameterized package the
/// program does not declare, the one its provider resources in `prior`
/// record (Pulumi's `__internal.parameterization`), so that `destroy`
/// and `refresh` without the program start the same parameterized plugin.
fn declarations(
    prior: &Deployment,
    mut program: Vec<crate::provider::package::PackageDecl>,
) -> Vec<crate::provider::package::PackageDecl> {
    for s in &prior.resources {
        let Some(pkg) = s.ty.as_str().strip_prefix("pulumi:providers:") else {
            continue;
        };
        if program.iter().any(|d| d.namespace() == pkg) {
            continue;
        }
        if let Some(d) = crate::plan::providers::declaration_in(pkg, &s.inputs) {
            program.push(d);
        }
    }
    program
}

/// Opens the simulated cloud: the backend directory's `cloud.json`, or,
/// with a database backend, the log in that database (shared by every
/// machine using it). `autosave` makes changes persist.
fn load_cloud(
    backend: &Path,
    config: SimConfig,
    autosave: bool,
) -> Result<std::sync::Arc<SimCloud>, CliError> {
    if crate::persist::store::is_database(backend) {
        let url = backend.to_string_lossy();
        let db = crate::persist::pg::PgBackend::new(url.as_ref());
        let log = db.cloud_log()?;
        let label = db.label();
        return SimCloud::open_log(log, config, autosave).map_err(|source| CliError::Cloud {
            path: PathBuf::from(label),
            source,
        });
    }
    let path = backend.join(CLOUD_FILE);
    let cloud = SimCloud::load(&path, config).map_err(|source| CliError::Cloud {
        path: path.clone(),
        source,
    })?;
    if autosave {
        std::fs::create_dir_all(backend).map_err(|source| CliError::Write {
            path: backend.to_owned(),
            source,
        })?;
        cloud.autosave_to(path);
    }
    Ok(cloud)
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)
}

fn engine_config(
    stack: &str,
    project: &str,
    parallel: Option<u32>,
    continue_on_error: bool,
) -> EngineConfig {
    let mut c = EngineConfig {
        stack: stack.to_owned(),
        project: project.to_owned(),
        continue_on_error,
        ..EngineConfig::default()
    };
    if let Some(p) = parallel {
        c.parallel = p as usize;
    }
    c
}

/// Runs an operation while rendering its events; returns its result once
/// every event it sent was shown.
async fn drive<F>(
    op: F,
    mut rx: mpsc::UnboundedReceiver<EngineEvent>,
    display: &mut Display,
    cancel: &crate::engine::Cancel,
) -> F::Output
where
    F: Future,
{
    // Ctrl-C once: a graceful stop (no new step; the steps in flight
    // finish and are saved; providers are told). Twice: the operation is
    // dropped at once (its steps in flight stay pending in the state, and
    // its plugins are killed) and keel exits 130.
    let mut op = Box::pin(op);
    let mut interrupts = 0u8;
    // One listener at a time, kept across events: a Ctrl-C that arrives
    // while an event is rendered is seen at the next turn, not lost.
    type Listener = std::pin::Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>>;
    let listen = || -> Listener { Box::pin(tokio::signal::ctrl_c()) };
    let mut ctrl_c = listen();
    loop {
        tokio::select! {
            Some(e) = rx.recv() => display.event(&e),
            heard = &mut ctrl_c => {
                if heard.is_err() {
                    // No signal handling here: Ctrl-C keeps its default.
                    ctrl_c = Box::pin(std::future::pending());
                    continue;
                }
                ctrl_c = listen();
                interrupts += 1;
                if interrupts == 1 {
                    cancel.cancel();
                    display.diagnostic(
                        "warning",
                        "cancelling: no new step starts, the steps in flight finish and are saved (press Ctrl-C again to stop at once)",
                    );
                } else {
                    display.diagnostic(
                        "warning",
                        "stopping at once: the steps in flight stay pending in the state; the next operation resolves them",
                    );
                    drop(op);
                    std::process::exit(130);
                }
            }
            result = &mut op => {
                while let Ok(e) = rx.try_recv() {
                    display.event(&e);
                }
                return result;
            }
        }
    }
}

/// A command's `--program`: a program file, or a directory holding a
/// Pulumi Python program.
#[derive(Debug)]
enum ProgramSource {
    File(ProgramFile),
    Python(PythonProject),
    Yaml(super::pyaml::PyamlProgram),
}

impl ProgramSource {
    /// Loads and validates `path` (a directory is a Python program), with
    /// its stack's config file (`Pulumi.<stack>.yaml` in the program's
    /// directory; decrypted later, with the stack's key:
    /// [`ProgramSource::apply_config`]).
    fn load(path: &Path, stack: &str) -> Result<(Self, StackConfig), CliError> {
        let dir = super::config::config_dir(path);
        if let Some(layout) = super::pyaml::layout(path)? {
            let project = layout
                .project
                .clone()
                .unwrap_or_else(|| super::config::project_name(path));
            let config = StackConfig::load(&dir, stack, &project)?;
            let keys = config.keys().into_iter().collect();
            // A compiler is given the stack's config (`PULUMI_CONFIG`) as far
            // as it resolves now (secure values need the stack's key, which
            // `apply_config` has: it compiles again when that differs).
            let early = match &layout.compiler {
                None => Vec::new(),
                Some(_) if config.has_secure() => super::config::resolve_for_operation(
                    &config,
                    &crate::secrets::Crypter::default(),
                    stack,
                )
                .unwrap_or_default(),
                Some(_) => config.resolve(None).unwrap_or_default(),
            };
            let p = super::pyaml::load(&layout, stack, &keys, &early)?;
            return Ok((Self::Yaml(p), config));
        }
        if path.is_dir() {
            let p = PythonProject::open(path)?;
            let config = StackConfig::load(&dir, stack, &p.name)?;
            Ok((Self::Python(p), config))
        } else {
            let config = StackConfig::load(&dir, stack, &super::config::project_name(path))?;
            let keys = config.keys().into_iter().collect();
            let f = ProgramFile::load_with_config(path, &keys)?;
            // The light read of the name must agree with the file's.
            let config = if f.name == config.project() {
                config
            } else {
                StackConfig::load(&dir, stack, &f.name)?
            };
            Ok((Self::File(f), config))
        }
    }

    /// Gives the program its stack config, resolved.
    fn apply_config(&mut self, config: &[crate::config::Resolved]) -> Result<(), CliError> {
        match self {
            Self::File(f) => f.apply_stack_config(config),
            Self::Yaml(y) => {
                if let Some(made) = y.recompiled(config)? {
                    *y = made;
                }
                y.apply_config(config)?;
            }
            Self::Python(p) => {
                let with = p.clone().with_config(config);
                *p = with;
            }
        }
        Ok(())
    }

    /// The simulated cloud's configuration, with the program's `schemas`.
    fn sim_config(&self, a: &SimArgs) -> SimConfig {
        let mut c = sim_config(a, self.file());
        if let Self::Yaml(y) = self {
            c.schemas = y.schemas.clone();
            c.packages = y
                .packages
                .iter()
                .map(|d| (d.namespace().to_owned(), d.clone()))
                .collect();
        }
        c
    }

    /// The program's directory: where relative asset paths resolve (and
    /// where `Pulumi.<stack>.yaml` is).
    fn dir(&self) -> PathBuf {
        match self {
            Self::File(f) => match f.path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
                _ => PathBuf::from("."),
            },
            Self::Python(p) => p.dir.clone(),
            Self::Yaml(y) => y.dir.clone(),
        }
    }

    /// The package declarations of a Pulumi YAML project (`sdks/*.yaml`).
    fn packages(&self) -> Vec<crate::provider::package::PackageDecl> {
        match self {
            Self::Yaml(y) => y.packages.clone(),
            Self::File(_) | Self::Python(_) => Vec::new(),
        }
    }

    /// The program file, if this is one.
    fn file(&self) -> Option<&ProgramFile> {
        match self {
            Self::File(f) => Some(f),
            Self::Python(_) | Self::Yaml(_) => None,
        }
    }

    /// True for a program run by a Pulumi SDK, whose resource monitor
    /// serves the Engine service plugins log to (a Python program); a
    /// program file or a Pulumi YAML project runs in keel and needs
    /// [`plugin_engine`].
    fn runs_sdk(&self) -> bool {
        matches!(self, Self::Python(_))
    }

    /// The project name.
    fn name(&self) -> &str {
        match self {
            Self::File(f) => &f.name,
            Self::Python(p) => &p.name,
            Self::Yaml(y) => &y.name,
        }
    }

    /// The configuration of providers' packages: config keys of another
    /// namespace than the project's (`aws:region`), which default
    /// providers take as inputs (values as strings, as Pulumi passes
    /// config).
    fn package_config(&self) -> BTreeMap<String, crate::model::PropertyValue> {
        use crate::model::PropertyValue;
        let project = format!("{}:", self.name());
        // `keel:` keys are keel's own settings, not a package's.
        let foreign =
            |k: &str| k.contains(':') && !k.starts_with(&project) && !k.starts_with("keel:");
        match self {
            Self::File(f) => f
                .config
                .iter()
                .filter(|(k, _)| foreign(k))
                .map(|(k, v)| {
                    let v = match v {
                        PropertyValue::String(_) | PropertyValue::Secret(_) => v.clone(),
                        other => PropertyValue::String(other.to_json().to_string()),
                    };
                    (k.clone(), v)
                })
                .collect(),
            Self::Yaml(y) => y
                .stack_values()
                .into_iter()
                .filter(|(k, _)| foreign(k))
                .collect(),
            Self::Python(p) => p
                .config
                .iter()
                .filter(|(k, _)| foreign(k))
                .map(|(k, v)| (k.clone(), PropertyValue::String(v.clone())))
                .collect(),
        }
    }

    /// The program's (or, once applied, the stack's) `keel:providers`
    /// setting.
    ///
    /// # Errors
    /// A value other than `sim` or `plugins`.
    fn providers_setting(&self) -> Result<Option<Providers>, CliError> {
        let value = match self {
            Self::File(f) => match f.config.get(super::serving::SETTING) {
                Some(crate::model::PropertyValue::String(v)) => Some(v.clone()),
                Some(other) => Some(other.to_json().to_string()),
                None => None,
            },
            Self::Python(p) => p.config.get(super::serving::SETTING).cloned(),
            Self::Yaml(y) => y.stack_values().get(super::serving::SETTING).map(|v| {
                v.as_str()
                    .map_or_else(|| v.to_json().to_string(), str::to_owned)
            }),
        };
        value
            .as_deref()
            .map(super::serving::parse_setting)
            .transpose()
    }

    /// Refuses, before anything runs, a program file that creates secrets
    /// on a stack that cannot encrypt them (a Python program's secrets are
    /// only known as it runs).
    fn check_secrets(&self, stack: &str, open: &OpenStack) -> Result<(), CliError> {
        match self {
            Self::File(f) => check_secrets(f, stack, open),
            Self::Yaml(y) => {
                refuse_plaintext(y.creates_secrets(), stack, &open.crypter, &open.deployment)
            }
            Self::Python(_) => Ok(()),
        }
    }

    /// The program to run; a Python program reports its output to `events`
    /// and, unless the stack `can_store_secrets`, is refused secrets as it
    /// registers them.
    fn into_program(
        self,
        events: &EventSink,
        parallel: Option<u32>,
        can_store_secrets: bool,
        served: &ServedBy,
    ) -> CliProgram {
        match self {
            Self::File(f) => CliProgram::File(FileProgram::new(f)),
            Self::Yaml(y) => {
                for w in &y.warnings {
                    events.send(crate::events::EngineEvent::Diagnostic {
                        severity: "warning".into(),
                        urn: None,
                        message: w.clone(),
                    });
                }
                CliProgram::Yaml(super::pyaml::eval::YamlProgram::new(y, can_store_secrets))
            }
            Self::Python(p) => {
                let mut options = PythonOptions::from_env(events.clone());
                options.can_store_secrets = can_store_secrets;
                options.engine = Some(served.engine.clone());
                options.secrets = served.secrets.clone();
                if let Some(n) = parallel {
                    options.parallel = i32::try_from(n).unwrap_or(i32::MAX);
                }
                CliProgram::Python(PythonProgram::new(p, options))
            }
        }
    }
}

/// Which stateful operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Update,
    Preview,
    Refresh,
    Destroy,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Update => "update",
            Self::Preview => "preview",
            Self::Refresh => "refresh",
            Self::Destroy => "destroy",
        }
    }

    fn command(self) -> &'static str {
        match self {
            Self::Update => "keel up",
            Self::Preview => "keel preview",
            Self::Refresh => "keel refresh",
            Self::Destroy => "keel destroy",
        }
    }
}

/// Shows the end of an operation and turns its result into the command's.
fn conclude(
    op: Op,
    result: Result<Outcome, EngineError>,
    display: &mut Display,
) -> Result<(), CliError> {
    match result {
        Ok(outcome) => {
            display.finish(Some(&outcome.summary));
            if matches!(op, Op::Update | Op::Preview) && display.style() != Style::Json {
                print_outputs(&outcome.snapshot);
            }
            Ok(())
        }
        Err(EngineError::Failed(outcome)) => {
            display.finish(Some(&outcome.summary));
            Err(CliError::Failed {
                operation: op.name(),
                summary: Box::new(outcome.summary),
            })
        }
        Err(e) => {
            display.finish(None);
            Err(CliError::Engine(Box::new(e)))
        }
    }
}

/// Prints the stack resource's outputs.
fn print_outputs(d: &Deployment) {
    let Some(stack) = d.stack_resource() else {
        return;
    };
    if stack.outputs.is_empty() {
        return;
    }
    out("Outputs:");
    for (k, v) in &stack.outputs {
        out(&format!(
            "  {}: {}",
            super::display::clean(k),
            show_value(v)
        ));
    }
}

/// Resources done / total for the progress display: the URNs the program
/// registers plus those of the prior state.
fn total(file: Option<&ProgramFile>, stack: &str, prior: &Deployment) -> usize {
    let mut urns: BTreeSet<String> = file.map(|f| f.expected_urns(stack)).unwrap_or_default();
    urns.extend(prior.resources.iter().map(|r| r.urn.as_str().to_owned()));
    urns.len()
}

/// The backend at `backend`, with the passphrase from the environment.
pub(super) fn with_passphrase(backend: &Path, stack: &str) -> Result<Store, CliError> {
    let passphrase = crate::secrets::passphrase_from_env().map_err(|source| CliError::Secrets {
        stack: stack.to_owned(),
        source,
    })?;
    Ok(Store::new(backend).with_passphrase(passphrase))
}

/// Secrets errors become usage errors (exit 2), reported before anything runs.
pub(super) fn secrets_first(e: BackendError) -> CliError {
    match e {
        BackendError::Secrets { stack, source } => CliError::Secrets { stack, source },
        other => CliError::Backend(other),
    }
}

fn open_stack(backend: &Path, stack: &str, op: Op) -> Result<OpenStack, CliError> {
    with_passphrase(backend, stack)?
        .open(stack, op.command())
        .map_err(secrets_first)
}

/// Refuses, before anything runs, a program that creates secrets on a
/// stack that cannot encrypt them.
fn check_secrets(file: &ProgramFile, stack: &str, open: &OpenStack) -> Result<(), CliError> {
    refuse_plaintext(
        file.creates_secrets(),
        stack,
        &open.crypter,
        &open.deployment,
    )
}

/// Refuses a program file that creates secrets when `crypter` cannot
/// encrypt them.
fn refuse_plaintext(
    creates_secrets: bool,
    stack: &str,
    crypter: &crate::secrets::Crypter,
    d: &Deployment,
) -> Result<(), CliError> {
    if creates_secrets && crypter.manager().is_none() {
        return Err(CliError::Secrets {
            stack: stack.to_owned(),
            source: if d.secrets_providers.ty.is_empty() {
                crate::secrets::SecretsError::NoProvider
            } else {
                crate::secrets::SecretsError::Unsupported(d.secrets_providers.ty.clone())
            },
        });
    }
    Ok(())
}

/// The project a stack's resources belong to (its stack resource's, else
/// its first resource's); `None` for an empty stack.
fn stack_project(d: &Deployment) -> Option<&str> {
    d.resources
        .iter()
        .find(|r| r.ty.is_stack())
        .or_else(|| d.resources.first())
        .map(|r| r.urn.project())
        .filter(|p| !p.is_empty())
}

/// Refuses a program of another project than the stack's resources: its
/// operation would delete them all (a stack belongs to one project, as in
/// Pulumi's backends).
fn check_project(
    stack: &str,
    source: &ProgramSource,
    program: &Path,
    d: &Deployment,
) -> Result<(), CliError> {
    match stack_project(d) {
        Some(project) if project != source.name() => Err(CliError::ProjectMismatch {
            stack: stack.to_owned(),
            stack_project: project.to_owned(),
            program: program.to_owned(),
            program_project: source.name().to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Refuses, before anything runs, `--target`, `--exclude` and `--replace`
/// URNs that name nothing: neither a resource of the stack nor one the
/// program file declares (`program_urns`). A Python program's resources
/// are only known as it runs (`None`): its URNs are not checked.
fn check_names(
    options: &UpdateOptions,
    program_urns: Option<&BTreeSet<String>>,
    file: Option<&ProgramFile>,
    stack: &str,
    prior: &Deployment,
) -> Result<(), CliError> {
    // An address names an expansion the program file may declare (keys
    // are checked where they are known before it runs: literal or config
    // `forEach`/`count`) or an entry of the stack.
    let addressed = |a: &crate::model::Address| {
        file.is_some_and(|f| f.may_address(a))
            || prior
                .resources
                .iter()
                .any(|r| crate::model::Address::parse(&r.keel_address).is_ok_and(|e| a.matches(&e)))
    };
    for (flag, list) in [
        ("--target", &options.target_addresses),
        ("--exclude", &options.exclude_addresses),
    ] {
        if let Some(a) = list.iter().find(|a| !addressed(a)) {
            return Err(CliError::NoSuchAddress {
                flag,
                address: a.to_string(),
                stack: stack.to_owned(),
            });
        }
    }
    let known = |u: &Urn| {
        prior.resources.iter().any(|r| r.urn == *u)
            || program_urns.is_none_or(|p| p.contains(u.as_str()))
    };
    let flags = [
        ("--target", &options.targets),
        ("--exclude", &options.excludes),
        ("--replace", &options.replaces),
    ];
    for (flag, urns) in flags {
        if let Some(u) = urns.iter().find(|u| !known(u)) {
            return Err(CliError::NoSuchResource {
                flag,
                urn: u.to_string(),
                stack: stack.to_owned(),
            });
        }
    }
    Ok(())
}

/// Warnings for `--sim-fail` values that match no URN or name of the stack
/// or the program file (`program_urns`; `None` for a Python program, whose
/// resources are only known as it runs: no warnings then).
fn sim_fail_warnings(
    sim: &SimArgs,
    program_urns: Option<&BTreeSet<String>>,
    prior: &Deployment,
) -> Vec<String> {
    let mut urns: BTreeSet<&str> = prior.resources.iter().map(|r| r.urn.as_str()).collect();
    match program_urns {
        Some(p) => urns.extend(p.iter().map(String::as_str)),
        // A Python program: its resources are unknown until it runs.
        None => return Vec::new(),
    }
    let names: BTreeSet<&str> = urns
        .iter()
        .filter_map(|u| u.rsplit_once("::").map(|(_, n)| n))
        .collect();
    sim.sim_fail
        .iter()
        .filter(|f| !urns.contains(f.as_str()) && !names.contains(f.as_str()))
        .map(|f| {
            format!("--sim-fail {f}: no resource of the stack or the program has this URN or name; it will inject no failure")
        })
        .collect()
}

fn up(backend: &Path, a: UpArgs, rec: &Recorder) -> Result<(), CliError> {
    let mut options = update_options(&a.change.filters, &a.change.replace)?;
    if let Some(path) = &a.plan {
        let bytes = std::fs::read(path).map_err(|source| CliError::ReadInput {
            path: path.clone(),
            source,
        })?;
        let mut plan = SavedPlan::from_slice(&bytes).map_err(|e| CliError::BadFlag {
            flag: "--plan",
            message: format!("{}: {e}", path.display()),
        })?;
        let secrets_err = |source| CliError::Secrets {
            stack: a.stack.name().to_owned(),
            source,
        };
        let passphrase = crate::secrets::passphrase_from_env().map_err(secrets_err)?;
        plan.decrypt(passphrase.as_deref()).map_err(secrets_err)?;
        options.apply_plan = true;
        options.plan = Some(std::sync::Arc::new(plan));
    }
    check_stack(a.stack.name())?;
    let (mut source, stack_config) = ProgramSource::load(&a.program, a.stack.name())?;
    let stack = a.stack.name().to_owned();
    if !Store::new(backend).exists(&stack)? {
        // A new stack: unknown names are refused before anything is made.
        let urns = source.file().map(|f| f.expected_urns(&stack));
        check_names(
            &options,
            urns.as_ref(),
            source.file(),
            &stack,
            &Deployment::default(),
        )?;
    }
    let rt = runtime()?;
    rt.block_on(async move {
        let cloud = load_cloud(backend, source.sim_config(&a.sim), true)?;
        let mut open = with_passphrase(backend, &stack)?
            .with_new_stack_salt(stack_config.encryption_salt().map(str::to_owned))
            .open(&stack, Op::Update.command())
            .map_err(secrets_first)?;
        rec.opened();
        let config = super::config::resolve_for_operation(&stack_config, &open.crypter, &stack)?;
        source.apply_config(&config)?;
        source.check_secrets(&stack, &open)?;
        check_project(&stack, &source, &a.program, &open.deployment)?;
        let program_urns = source.file().map(|f| f.expected_urns(&stack));
        check_names(
            &options,
            program_urns.as_ref(),
            source.file(),
            &stack,
            &open.deployment,
        )?;
        let mut sim_warnings = sim_fail_warnings(&a.sim, program_urns.as_ref(), &open.deployment);
        let choice = serving::choose(
            &stack,
            explicit_serving(a.sim.providers, Some(&source))?,
            &open.deployment.recorded_serving(),
            false,
        )?;
        sim_warnings.extend(choice.warnings.iter().cloned());
        cloud.set_secrets(open.crypter.clone());
        // Plugins are looked for before the stack's journal is touched.
        let (tx, rx) = mpsc::unbounded_channel();
        let events = EventSink::new(tx);
        let served = ServedBy::new(&events);
        let _plugin_engine = plugin_engine(&served, &choice, source.runs_sdk()).await?;
        let registry = registry(
            backend,
            cloud,
            Some(source.dir()),
            &choice,
            &served,
            &named_packages(&open.deployment, source.file()),
            &declarations(&open.deployment, source.packages()),
        )?;
        let persister = open.persister(a.persist.persistence.into(), JournalOptions::default())?;
        let mut display = Display::new(
            Style::choose(a.output.json),
            Op::Update.name(),
            total(source.file(), &stack, &open.deployment),
        )
        .show_debug(a.output.show_debug())
        .with_diffs(a.diff);
        for w in open.warnings.iter().chain(&sim_warnings) {
            display.diagnostic("warning", w);
        }
        let EngineArgs {
            parallel,
            continue_on_error,
            yes: _,
        } = a.engine;
        let mut config = engine_config(&stack, source.name(), parallel, continue_on_error);
        config.events = events;
        config.update = options;
        config.program_dir = Some(source.dir());
        config.detailed_diffs = a.diff;
        config.package_config = source.package_config();
        config.packages = source.packages();
        config.cancel = rec.cancel();
        let can_store_secrets = open.crypter.manager().is_some();
        let program = source.into_program(&config.events, parallel, can_store_secrets, &served);
        let cancel = config.cancel.clone();
        let engine = Engine::new(config, registry);
        let mut prior = std::mem::take(&mut open.deployment);
        if a.change.refresh {
            prior = refreshed(&engine, prior).await?;
        }
        let result = drive(
            engine.update(prior, program, persister),
            rx,
            &mut display,
            &cancel,
        )
        .await;
        rec.outcome(&result);
        // The lock is held until the operation ended.
        drop(open);
        conclude(Op::Update, result, &mut display)
    })
}

fn preview(backend: &Path, a: PreviewArgs) -> Result<(), CliError> {
    let mut options = update_options(&a.change.filters, &a.change.replace)?;
    options.generate_plan = a.save_plan.is_some();
    // A bare file name is in the current directory (whose entry is synced).
    let save_plan = a.save_plan.as_deref().map(|p| match p.parent() {
        Some(d) if d.as_os_str().is_empty() => Path::new(".").join(p),
        _ => p.to_owned(),
    });
    check_stack(a.stack.name())?;
    let (mut source, stack_config) = ProgramSource::load(&a.program, a.stack.name())?;
    let stack = a.stack.name().to_owned();
    let rt = runtime()?;
    rt.block_on(async move {
        // A preview changes nothing: no lock, no autosave.
        let cloud = load_cloud(backend, source.sim_config(&a.sim), false)?;
        let loaded = with_passphrase(backend, &stack)?
            .with_new_stack_salt(stack_config.encryption_salt().map(str::to_owned))
            .load(&stack)
            .map_err(secrets_first)?;
        loaded.check_secrets().map_err(|source| CliError::Secrets {
            stack: stack.clone(),
            source,
        })?;
        let config = super::config::resolve_for_operation(&stack_config, &loaded.crypter, &stack)?;
        source.apply_config(&config)?;
        check_project(&stack, &source, &a.program, &loaded.deployment)?;
        let program_urns = source.file().map(|f| f.expected_urns(&stack));
        check_names(
            &options,
            program_urns.as_ref(),
            source.file(),
            &stack,
            &loaded.deployment,
        )?;
        let mut sim_warnings = sim_fail_warnings(&a.sim, program_urns.as_ref(), &loaded.deployment);
        let choice = serving::choose(
            &stack,
            explicit_serving(a.sim.providers, Some(&source))?,
            &loaded.deployment.recorded_serving(),
            true,
        )?;
        sim_warnings.extend(choice.warnings.iter().cloned());
        // A saved plan is written with the stack's secrets encrypted: a
        // program file creating secrets on a stack that cannot encrypt
        // them is refused before it runs.
        if save_plan.is_some() {
            if let Some(f) = source.file() {
                refuse_plaintext(
                    f.creates_secrets(),
                    &stack,
                    &loaded.crypter,
                    &loaded.deployment,
                )?;
            }
            if let ProgramSource::Yaml(y) = &source {
                refuse_plaintext(
                    y.creates_secrets(),
                    &stack,
                    &loaded.crypter,
                    &loaded.deployment,
                )?;
            }
        }
        let crypter = loaded.crypter.clone();
        cloud.set_secrets(loaded.crypter.clone());
        let mut display = Display::new(
            Style::choose(a.output.json),
            Op::Preview.name(),
            total(source.file(), &stack, &loaded.deployment),
        )
        .show_debug(a.output.show_debug())
        .with_diffs(a.diff);
        for w in loaded.warnings.iter().chain(&sim_warnings) {
            display.diagnostic("warning", w);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let mut config = engine_config(&stack, source.name(), a.parallel, false);
        config.events = EventSink::new(tx);
        config.update = options;
        config.program_dir = Some(source.dir());
        config.detailed_diffs = a.diff;
        config.package_config = source.package_config();
        config.packages = source.packages();
        // A preview writes nothing: secrets need no provider yet.
        let dir = source.dir();
        let named = named_packages(&loaded.deployment, source.file());
        let declared = declarations(&loaded.deployment, source.packages());
        let served = ServedBy::new(&config.events);
        let _plugin_engine = plugin_engine(&served, &choice, source.runs_sdk()).await?;
        let program = source.into_program(&config.events, a.parallel, true, &served);
        let cancel = config.cancel.clone();
        let engine = Engine::new(
            config,
            registry(
                backend,
                cloud,
                Some(dir),
                &choice,
                &served,
                &named,
                &declared,
            )?,
        );
        let prior = if a.change.refresh {
            refreshed(&engine, loaded.deployment).await?
        } else {
            loaded.deployment
        };
        let result = drive(engine.preview(prior, program), rx, &mut display, &cancel).await;
        if let (Some(path), Ok(outcome)) = (&save_plan, &result) {
            if let Some(plan) = &outcome.plan {
                let bytes =
                    plan.to_vec_encrypted(&crypter)
                        .map_err(|source| CliError::Secrets {
                            stack: stack.clone(),
                            source,
                        })?;
                atomic_write(path, &bytes, false, &Default::default()).map_err(|source| {
                    CliError::Write {
                        path: path.clone(),
                        source,
                    }
                })?;
            }
        }
        conclude(Op::Preview, result, &mut display)
    })
}

/// The project of a stack's resources (refresh and destroy without a
/// program).
fn project_of(d: &Deployment) -> String {
    d.resources
        .first()
        .map(|r| r.urn.project().to_owned())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "project".into())
}

/// `refresh` or `destroy`, recorded in the stack's history.
fn recorded_operation(backend: &Path, a: OpArgs, op: Op) -> Result<(), CliError> {
    let (stack, program) = (a.stack.name().to_owned(), a.program.clone());
    recorded(backend, &stack, op.name(), program.as_deref(), |rec| {
        operation(backend, a, op, rec)
    })
}

fn operation(backend: &Path, a: OpArgs, op: Op, rec: &Recorder) -> Result<(), CliError> {
    // Destroy honours targets and excludes; refresh does not take them yet.
    let options = match op {
        Op::Destroy => {
            if a.pending.clear_pending_creates || !a.pending.import_pending_creates.is_empty() {
                return Err(CliError::BadFlag {
                    flag: "--clear-pending-creates/--import-pending-creates",
                    message: "only `keel refresh` resolves interrupted creates".into(),
                });
            }
            update_options(&a.filters, &[])?
        }
        _ => {
            refuse_filters(&a.filters, &[])?;
            let mut o = UpdateOptions {
                clear_pending_creates: a.pending.clear_pending_creates,
                ..UpdateOptions::default()
            };
            for pair in a.pending.import_pending_creates.chunks(2) {
                let [urn, id] = pair else {
                    return Err(CliError::BadFlag {
                        flag: "--import-pending-creates",
                        message: "each URN must be followed by an ID".into(),
                    });
                };
                let urn = Urn::parse(urn).map_err(|e| CliError::BadFlag {
                    flag: "--import-pending-creates",
                    message: format!("`{urn}` is not a URN: {e}"),
                })?;
                if id.is_empty() {
                    return Err(CliError::BadFlag {
                        flag: "--import-pending-creates",
                        message: format!("the ID of {urn} is empty"),
                    });
                }
                o.import_pending_creates.push((urn, id.clone()));
            }
            o
        }
    };
    let source = a
        .program
        .as_deref()
        .map(|p| ProgramSource::load(p, a.stack.name()).map(|(s, _)| s))
        .transpose()?;
    // Refresh and destroy work on an existing stack; they never make one.
    existing(backend, a.stack.name())?;
    let stack = a.stack.name().to_owned();
    let rt = runtime()?;
    rt.block_on(async move {
        let file = source.as_ref().and_then(ProgramSource::file);
        let cloud = load_cloud(backend, sim_config(&a.sim, file), true)?;
        let mut open = open_stack(backend, &stack, op)?;
        rec.opened();
        if let (Some(source), Some(path)) = (&source, &a.program) {
            check_project(&stack, source, path, &open.deployment)?;
        }
        // Only the stack's resources can be named: the program's are not run.
        let none = BTreeSet::new();
        check_names(&options, Some(&none), None, &stack, &open.deployment)?;
        let mut sim_warnings = sim_fail_warnings(&a.sim, Some(&none), &open.deployment);
        // The stack's config is not read here: the flag, else the record.
        let choice = serving::choose(
            &stack,
            explicit_serving(a.sim.providers, None)?,
            &open.deployment.recorded_serving(),
            false,
        )?;
        sim_warnings.extend(choice.warnings.iter().cloned());
        cloud.set_secrets(open.crypter.clone());
        let project = source
            .as_ref()
            .map_or_else(|| project_of(&open.deployment), |s| s.name().to_owned());
        let mut display = Display::new(
            Style::choose(a.output.json),
            op.name(),
            total(None, &stack, &open.deployment),
        )
        .show_debug(a.output.show_debug());
        for w in open.warnings.iter().chain(&sim_warnings) {
            display.diagnostic("warning", w);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let mut config = engine_config(
            &stack,
            &project,
            a.engine.parallel,
            a.engine.continue_on_error,
        );
        config.events = EventSink::new(tx);
        config.update = options;
        config.cancel = rec.cancel();
        // Without a program, the project is the current directory's (its
        // `Pulumi.yaml` names plugins), as Pulumi finds it.
        let dir = source.as_ref().map(ProgramSource::dir).or_else(|| {
            Path::new("Pulumi.yaml")
                .is_file()
                .then(|| PathBuf::from("."))
        });
        let served = ServedBy::new(&config.events);
        let (_plugin_engine, registry) =
            stack_providers(backend, cloud, dir, &choice, &served, &open.deployment).await?;
        // Plugins are looked for before the stack's journal is touched.
        let persister = open.persister(a.persist.persistence.into(), JournalOptions::default())?;
        let cancel = config.cancel.clone();
        let engine = Engine::new(config, registry);
        let prior = std::mem::take(&mut open.deployment);
        let result = match op {
            Op::Destroy => drive(engine.destroy(prior, persister), rx, &mut display, &cancel).await,
            _ => drive(engine.refresh(prior, persister), rx, &mut display, &cancel).await,
        };
        rec.outcome(&result);
        drop(open);
        conclude(op, result, &mut display)
    })
}

/// `--refresh`: the prior state reconciled with the cloud, in memory; the
/// operation that follows plans against it and persists the result.
async fn refreshed(engine: &Engine, prior: Deployment) -> Result<Deployment, CliError> {
    match engine
        .refresh(prior, Box::new(crate::persist::MemoryPersister::new()))
        .await
    {
        Ok(o) => Ok(o.snapshot),
        Err(EngineError::Failed(o)) => Err(CliError::Failed {
            operation: "refresh",
            summary: Box::new(o.summary),
        }),
        Err(e) => Err(CliError::Engine(Box::new(e))),
    }
}

/// Fails unless the stack exists in the backend.
pub(super) fn existing(backend: &Path, stack: &str) -> Result<Store, CliError> {
    check_stack(stack)?;
    let b = Store::new(backend);
    if b.exists(stack)? {
        Ok(b)
    } else {
        Err(CliError::NoStack {
            stack: stack.to_owned(),
            backend: b.location(),
        })
    }
}

fn export(
    backend: &Path,
    stack: &str,
    file: Option<&Path>,
    show_secrets: bool,
) -> Result<(), CliError> {
    let b = existing(backend, stack)?;
    if let Some(path) = file {
        refuse_backend_file(backend, path)?;
    }
    // Without --show-secrets the stored ciphertexts are exported as they
    // are, with no passphrase needed.
    let b = if show_secrets {
        with_passphrase(backend, stack)?
    } else {
        b
    };
    let loaded = b.load(stack).map_err(secrets_first)?;
    if show_secrets && crate::secrets::Crypter::has_ciphertext(&loaded.deployment) {
        return Err(CliError::Secrets {
            stack: stack.to_owned(),
            source: match loaded.deployment.secrets_providers.ty.as_str() {
                crate::secrets::PASSPHRASE_TYPE => crate::secrets::SecretsError::NoPassphrase,
                other => crate::secrets::SecretsError::Unsupported(other.to_owned()),
            },
        });
    }
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let mut deployment = loaded.deployment;
    deployment.stamp_categories();
    let mut bytes = CheckpointFile::export(deployment).to_vec_pretty();
    bytes.push(b'\n');
    match file {
        Some(path) => {
            let counters = crate::persist::fs::IoCounters::default();
            atomic_write(path, &bytes, false, &counters).map_err(|source| CliError::Write {
                path: path.to_owned(),
                source,
            })
        }
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(&bytes)
                .and_then(|()| stdout.flush())
                .map_err(|source| CliError::Write {
                    path: PathBuf::from("(stdout)"),
                    source,
                })
        }
    }
}

/// Refuses a file inside the backend directory (a stack's checkpoint or
/// journal, a lock, the simulated cloud): exporting onto it would replace
/// keel's own state behind its back.
pub(super) fn refuse_backend_file(backend: &Path, path: &Path) -> Result<(), CliError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A directory that does not exist cannot be inside the (existing)
    // backend; writing then fails with the OS error.
    let (Ok(dir), Ok(backend_dir)) = (dir.canonicalize(), backend.canonicalize()) else {
        return Ok(());
    };
    if dir.starts_with(&backend_dir) {
        return Err(CliError::ExportIntoBackend {
            path: path.to_owned(),
            backend: backend.to_owned(),
        });
    }
    Ok(())
}

/// The state in `bytes` (read from `path`) for `stack`: it must verify
/// (integrity), pass `stack import`'s checks (src/cli/import.rs) and hold
/// only `stack`'s URNs. Used by `stack import` and `state edit`.
///
/// # Errors
/// [`CliError::BadCheckpoint`], [`CliError::Import`],
/// [`CliError::StackMismatch`].
pub(super) fn checked_state(
    path: &Path,
    bytes: &[u8],
    stack: &str,
) -> Result<Deployment, CliError> {
    let checkpoint =
        CheckpointFile::from_slice_verified(bytes).map_err(|source| CliError::BadCheckpoint {
            path: path.to_owned(),
            source,
        })?;
    let deployment = checkpoint.into_deployment();
    super::import::check(&deployment).map_err(|source| CliError::Import {
        path: path.to_owned(),
        source,
    })?;
    if let Some(other) = deployment
        .resources
        .iter()
        .map(|r| r.urn.stack())
        .find(|s| *s != stack)
    {
        return Err(CliError::StackMismatch {
            path: path.to_owned(),
            found: other.to_owned(),
            stack: stack.to_owned(),
        });
    }
    Ok(deployment)
}

fn import(backend: &Path, stack: &str, file: &Path) -> Result<(), CliError> {
    check_stack(stack)?;
    let bytes = std::fs::read(file).map_err(|source| CliError::ReadInput {
        path: file.to_owned(),
        source,
    })?;
    let mut deployment = checked_state(file, &bytes, stack)?;
    // Plaintext secrets in the file are encrypted on the way in, which
    // needs a passphrase (refused before anything is written without one);
    // the ciphertexts of any provider are kept as they are.
    let secrets_err = |source| CliError::Secrets {
        stack: stack.to_owned(),
        source,
    };
    let passphrase = crate::secrets::passphrase_from_env().map_err(secrets_err)?;
    let plaintext = crate::secrets::Crypter::has_plaintext(&deployment);
    if plaintext && passphrase.is_none() {
        return Err(secrets_err(crate::secrets::SecretsError::PlaintextImport));
    }
    // A file exported with its secrets in plaintext may still name the
    // provider that encrypted them (`service`, ...): keel's passphrase
    // provider takes over, or the file is refused when it also holds that
    // provider's ciphertexts (see `Crypter::for_plaintext`).
    let crypter = match passphrase {
        Some(p) if plaintext => {
            crate::secrets::Crypter::for_plaintext(&mut deployment, &p).map_err(secrets_err)?
        }
        _ => crate::secrets::Crypter::default(),
    };
    // Verified: now take the lock (which also folds the journal into the
    // base) and replace the base, leaving an empty journal.
    // A stack an older keel wrote is not read (its format is refused):
    // the import replaces it whole under its lock, the journal emptied.
    let store = Store::new(backend);
    let open = match store.open(stack, "keel stack import") {
        Ok(open) => Some(open),
        Err(BackendError::OlderFormat { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    match open {
        Some(open) => open.replace_base(&deployment, &crypter)?,
        None => store
            .lock(stack, "keel stack import")?
            .write_state(&deployment, 0, &crypter)?,
    }
    eprintln!(
        "imported {} resources into stack `{stack}`",
        deployment.resources.len()
    );
    Ok(())
}

fn verify(backend: &Path, stack: Option<String>, file: Option<PathBuf>) -> Result<(), CliError> {
    match file {
        Some(path) => {
            let bytes = std::fs::read(&path).map_err(|source| CliError::ReadInput {
                path: path.clone(),
                source,
            })?;
            let checkpoint =
                CheckpointFile::from_slice_verified(&bytes).map_err(|e| CliError::Verify {
                    what: path.display().to_string(),
                    message: e.to_string(),
                })?;
            let n = checkpoint.deployment_ref().map_or(0, |d| d.resources.len());
            out(&format!("{}: ok ({n} resources)", path.display()));
            Ok(())
        }
        None => {
            let stack = stack.unwrap_or_else(|| super::args::DEFAULT_STACK.to_owned());
            let loaded = existing(backend, &stack)?
                .load(&stack)
                .map_err(|e| CliError::Verify {
                    what: format!("stack `{stack}`"),
                    message: e.to_string(),
                })?;
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            out(&format!(
                "stack `{stack}`: ok ({} resources, {} journal entries replayed)",
                loaded.deployment.resources.len(),
                loaded.replayed
            ));
            Ok(())
        }
    }
}

fn state_show(backend: &Path, stack: &str, json: bool) -> Result<(), CliError> {
    let loaded = existing(backend, stack)?.load(stack)?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    if json {
        out(&show::tree_json(&loaded.deployment).to_string());
    } else if loaded.deployment.resources.is_empty() {
        out(&format!("stack `{stack}` has no resources"));
    } else {
        for line in show::tree_lines(&loaded.deployment) {
            out(&line);
        }
    }
    Ok(())
}

fn cloud_add(
    backend: &Path,
    ty: &str,
    id: &str,
    name: Option<String>,
    properties: &[String],
) -> Result<(), CliError> {
    let ty = crate::model::TypeToken::parse(ty).map_err(|e| CliError::BadFlag {
        flag: "TYPE",
        message: format!("`{ty}` is not a type token: {e}"),
    })?;
    if id.is_empty() {
        return Err(CliError::BadFlag {
            flag: "ID",
            message: "the object's ID is empty".into(),
        });
    }
    let mut props = crate::model::PropertyMap::new();
    for p in properties {
        let Some((k, v)) = p.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(CliError::BadFlag {
                flag: "--property",
                message: format!("`{p}`: expected KEY=VALUE"),
            });
        };
        let value = serde_json::from_str::<serde_json::Value>(v)
            .ok()
            .and_then(|j| crate::model::PropertyValue::from_json(&j).ok())
            .unwrap_or_else(|| crate::model::PropertyValue::String(v.to_owned()));
        props.insert(k.to_owned(), value);
    }
    let cloud = load_cloud(backend, SimConfig::default(), true)?;
    let object = crate::provider::sim::SimObject {
        id: id.to_owned(),
        ty: ty.as_str().to_owned(),
        name: name.unwrap_or_else(|| id.to_owned()),
        urn: String::new(),
        inputs: props.clone(),
        outputs: props,
    };
    let added = cloud.add_object(object).map_err(|source| CliError::Cloud {
        path: backend.to_owned(),
        source,
    })?;
    if !added {
        return Err(CliError::CloudObjectExists {
            ty: ty.as_str().to_owned(),
            id: id.to_owned(),
        });
    }
    out(&format!("added {ty} `{id}` to the simulated cloud"));
    Ok(())
}

fn cloud_list(backend: &Path, json: bool) -> Result<(), CliError> {
    let cloud = load_cloud(backend, SimConfig::default(), false)?;
    let objects = cloud.objects();
    if json {
        out(&show::cloud_json(&objects).to_string());
    } else {
        for line in show::cloud_lines(&objects) {
            out(&line);
        }
    }
    Ok(())
}
