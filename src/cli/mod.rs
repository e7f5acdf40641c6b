//! The `keel` command line (`cli.md`): commands, program files, the
//! progress display.
//!
//! - [`args`]: the grammar (clap derive);
//! - [`program`]: program files (YAML or JSON), decoded and validated
//!   before anything runs; [`template`]: their `${...}` interpolation;
//!   [`run`]: a validated file as a [`crate::actors::Program`];
//! - [`display`]: the progress display, plain lines and JSON events;
//!   [`show`]: `state show` and `cloud list`;
//! - [`commands`]: the commands themselves; [`stacks`]: `keel stack
//!   ls|select|init|rm|rename|output`; [`history`]: each operation's
//!   record and `keel stack history`; [`graph`]: `keel stack graph`;
//!   [`cancel`]: `keel cancel` and the running operation's watch for it;
//!   [`commands::adopt`]: `keel import`; [`state_cmds`]: `keel state delete|protect|unprotect|rename|
//!   move|repair|edit`, over the sans-IO [`surgery`].
//!
//! Exit status ([`CliError::exit_code`]): 0 success, 1 the operation
//! failed, 2 bad usage or bad input (nothing was changed).

pub mod args;
pub mod cancel;
pub mod commands;
pub mod config;
mod confirm;
mod decode;
pub mod display;
pub mod graph;
pub mod history;
pub mod import;
pub mod program;
pub mod pyaml;
pub mod run;
pub mod serving;
pub mod show;
pub mod stacks;
pub mod state_cmds;
pub mod surgery;
pub mod template;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::engine::EngineError;
use crate::events::Summary;
use crate::model::CheckpointError;
use crate::persist::backend::BackendError;
use crate::persist::PersistError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag for a control keel does not have yet.
    #[error("{0} is not supported yet")]
    Unsupported(String),
    /// A flag's value is invalid.
    #[error("{flag}: {message}")]
    BadFlag {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// An explicit choice of serving contradicts the state's record.
    #[error("package `{package}` of stack `{stack}` is recorded as served by {recorded}, but this operation asks for {asked}; refusing, since that side does not hold these objects: serve it as recorded (`--providers {keep}`), or first destroy its resources as they were deployed")]
    ServingConflict {
        /// The stack.
        stack: String,
        /// The package.
        package: String,
        /// What the state records.
        recorded: &'static str,
        /// What was asked, and by what.
        asked: String,
        /// The flag value that keeps the record.
        keep: &'static str,
    },
    /// A package that must be served by its plugin has none.
    #[error("{source}; install it (`pulumi plugin install resource <package>`), name it in the project's `plugins.providers`, or serve the package by the simulated cloud (`--providers sim`) if nothing real is deployed")]
    NoPlugin {
        /// Where keel looked.
        source: Box<crate::grpc::plugin::discovery::DiscoveryError>,
    },
    /// A package declared as an extension parameterization, to be served
    /// by its plugin.
    #[error("the project declares package `{base}` with an extension parameterization (`extension: {name}`), which keel does not send plugins yet; declare a replacement (`parameterization:`) or serve the package by the simulated cloud (`--providers sim`); nothing was run")]
    ExtensionPackage {
        /// The base plugin.
        base: String,
        /// The extension's name.
        name: String,
    },
    /// `cloud add` of an object the simulated cloud already has.
    #[error(
        "the simulated cloud already has an object of type {ty} with ID `{id}`; nothing was added"
    )]
    CloudObjectExists {
        /// Its type.
        ty: String,
        /// Its ID.
        id: String,
    },
    /// A stack name that cannot name a directory and a URN part.
    #[error("invalid stack name `{0}`: use letters, digits, `-`, `_` and `.`")]
    BadStackName(String),
    /// The stack does not exist.
    #[error("no stack `{stack}` in the backend {}", .backend.display())]
    NoStack {
        /// The stack.
        stack: String,
        /// The backend directory.
        backend: PathBuf,
    },
    /// `stack init` or `stack rename` of a name that is taken.
    #[error("stack `{stack}` already exists in the backend {}", .backend.display())]
    StackExists {
        /// The stack.
        stack: String,
        /// The backend directory.
        backend: PathBuf,
    },
    /// `stack rename` onto a name whose config file exists.
    #[error("the config file {} already exists: renaming the stack would replace it; move it away first (nothing was changed)", .path.display())]
    ConfigFileExists {
        /// The file.
        path: PathBuf,
    },
    /// `stack rm` of a stack that has resources, without `--force`.
    #[error("stack `{stack}` still has {count} resources; `keel destroy --stack {stack}` deletes them first, or `--force` removes the stack anyway (their cloud objects are then no longer tracked)")]
    StackHasResources {
        /// The stack.
        stack: String,
        /// How many resources it holds.
        count: usize,
    },
    /// `stack output NAME` of an output the stack does not have.
    #[error("stack `{stack}` has no output `{name}` (it has: {})", if .known.is_empty() { "none".to_owned() } else { .known.join(", ") })]
    NoSuchOutput {
        /// The stack.
        stack: String,
        /// The output asked for.
        name: String,
        /// The outputs it has.
        known: Vec<String>,
    },
    /// A command that changes state was run without a terminal to confirm
    /// on, and without `--yes`.
    #[error(
        "{what} changes state and stdin is not a terminal to confirm on: pass --yes to proceed"
    )]
    NeedsYes {
        /// The command.
        what: String,
    },
    /// `keel cancel` of a stack whose lock nobody holds.
    #[error("no operation is running on stack `{stack}` (its lock is free): nothing to cancel")]
    NotRunning {
        /// The stack.
        stack: String,
    },
    /// The user declined the confirmation.
    #[error("{what}: declined; nothing was changed")]
    Declined {
        /// The command.
        what: String,
    },
    /// A state edit was refused (`keel state ...`); nothing was changed.
    #[error("stack `{stack}`: {source}")]
    Edit {
        /// The stack.
        stack: String,
        /// Why.
        source: surgery::EditError,
    },
    /// An import file (`keel import --file`) that cannot be used.
    #[error("{}: {message}", .path.display())]
    ImportFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `keel import` of an object or URN the stack already manages.
    #[error("stack `{stack}` already manages {urn} (id `{id}`): nothing to import; `keel state delete` it first to import it anew")]
    AlreadyManaged {
        /// The stack.
        stack: String,
        /// The resource managing it.
        urn: String,
        /// Its ID.
        id: String,
    },
    /// The program file is unreadable or invalid.
    #[error(transparent)]
    Program(#[from] program::ProgramFileError),
    /// The Python program directory cannot be used.
    #[error(transparent)]
    Python(#[from] crate::grpc::python::PythonError),
    /// The Pulumi YAML program is unreadable or invalid.
    #[error(transparent)]
    PulumiYaml(#[from] pyaml::PyamlError),
    /// An input file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    ReadInput {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file to import is not a valid checkpoint.
    #[error("{}: {source}", .path.display())]
    BadCheckpoint {
        /// The file.
        path: PathBuf,
        /// Why.
        source: CheckpointError,
    },
    /// A file to import holds another stack's resources.
    #[error("{}: its resources belong to stack `{found}`, not `{stack}`", .path.display())]
    StackMismatch {
        /// The file.
        path: PathBuf,
        /// The stack its URNs name.
        found: String,
        /// The stack imported into.
        stack: String,
    },
    /// A verified file to import holds what keel must not import.
    #[error("{}: {source}", .path.display())]
    Import {
        /// The file.
        path: PathBuf,
        /// Why.
        source: import::ImportError,
    },
    /// `stack export --file` names a file of the backend.
    #[error(
        "{}: refusing to export into the backend directory {} (it would replace keel's own files); choose a path outside it",
        .path.display(),
        .backend.display()
    )]
    ExportIntoBackend {
        /// The file.
        path: PathBuf,
        /// The backend directory.
        backend: PathBuf,
    },
    /// The program belongs to another project than the stack's resources.
    #[error("stack `{stack}` holds resources of project `{stack_project}`, but {} is project `{program_project}`: running it here would delete them all; use another stack for it (`--stack NAME`), or run the program of `{stack_project}`", .program.display())]
    ProjectMismatch {
        /// The stack.
        stack: String,
        /// The project of its resources.
        stack_project: String,
        /// The program.
        program: PathBuf,
        /// The program's project.
        program_project: String,
    },
    /// A `--target`, `--exclude` or `--replace` names no resource.
    #[error("{flag} {urn}: no resource of stack `{stack}` or of the program has this URN; `keel state show` lists the stack's resources (URNs include parent types: `stack export` shows them)")]
    NoSuchResource {
        /// The flag.
        flag: &'static str,
        /// The URN given.
        urn: String,
        /// The stack.
        stack: String,
    },
    /// A `--target` or `--exclude` address names no declaration of the
    /// program file and no entry of the stack.
    #[error("{flag} {address}: names no declaration or expansion of the program file (keys are checked where `forEach` or `count` is a literal or config) and no entry of stack `{stack}`; an address is a keel program file's declaration names joined by `/`, with keys (`group[\"east\"]/server[\"a\"]`, `group/server`); otherwise give a URN or a glob")]
    NoSuchAddress {
        /// The flag.
        flag: &'static str,
        /// The address given.
        address: String,
        /// The stack.
        stack: String,
    },
    /// An integrity check failed.
    #[error("integrity check failed for {what}: {message}")]
    Verify {
        /// The stack or file checked.
        what: String,
        /// The error.
        message: String,
    },
    /// The stack could not be opened (locked, unreadable).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The stack's secrets cannot be used: no or wrong passphrase, a
    /// provider keel does not implement, or no provider for new secrets.
    #[error("stack `{stack}`: {source}")]
    Secrets {
        /// The stack.
        stack: String,
        /// Why.
        source: crate::secrets::SecretsError,
    },
    /// A stack config file or key that cannot be used.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// `keel config get` of a key that is not set.
    #[error("config `{key}` is not set in {}", .path.display())]
    ConfigNotSet {
        /// The key.
        key: String,
        /// The stack's config file.
        path: PathBuf,
    },
    /// The simulated cloud's file could not be loaded.
    #[error("cannot load the simulated cloud {}: {source}", .path.display())]
    Cloud {
        /// The file.
        path: PathBuf,
        /// Why.
        source: crate::provider::sim::CloudFileError,
    },
    /// State could not be written.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// An output could not be written.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The async runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The operation ran and failed.
    #[error("the {operation} failed:{}", failure_lines(.summary))]
    Failed {
        /// `update`, `preview`, `refresh` or `destroy`.
        operation: &'static str,
        /// Its summary (failures and errors).
        summary: Box<Summary>,
    },
    /// The engine failed internally.
    #[error(transparent)]
    Engine(Box<EngineError>),
}

fn failure_lines(s: &Summary) -> String {
    let mut text = String::new();
    for f in &s.failures {
        text.push_str(&format!(
            "\n  {} of {} failed: {}",
            f.kind.as_str(),
            f.urn,
            display::short_error(f.kind, &f.urn, &f.message)
        ));
    }
    for e in &s.errors {
        text.push_str(&format!("\n  {e}"));
    }
    text
}

impl CliError {
    /// The process's exit status: 2 for bad usage or input (nothing was
    /// changed), 1 for a failed operation.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Unsupported(_)
            | Self::BadFlag { .. }
            | Self::ServingConflict { .. }
            | Self::BadStackName(_)
            | Self::CloudObjectExists { .. }
            | Self::NoStack { .. }
            | Self::StackExists { .. }
            | Self::StackHasResources { .. }
            | Self::ConfigFileExists { .. }
            | Self::NoSuchOutput { .. }
            | Self::NeedsYes { .. }
            | Self::Declined { .. }
            | Self::Edit { .. }
            | Self::ImportFile { .. }
            | Self::AlreadyManaged { .. }
            | Self::Program(_)
            | Self::Python(_)
            | Self::PulumiYaml(_)
            | Self::ReadInput { .. }
            | Self::BadCheckpoint { .. }
            | Self::StackMismatch { .. }
            | Self::Import { .. }
            | Self::ExportIntoBackend { .. }
            | Self::ProjectMismatch { .. }
            | Self::NoSuchResource { .. }
            | Self::NoSuchAddress { .. }
            | Self::ExtensionPackage { .. }
            | Self::Secrets { .. }
            | Self::Config(_) => 2,
            Self::Verify { .. }
            | Self::Backend(_)
            | Self::Cloud { .. }
            | Self::Persist(_)
            | Self::Write { .. }
            | Self::Runtime(_)
            | Self::Failed { .. }
            | Self::NotRunning { .. }
            | Self::ConfigNotSet { .. }
            | Self::NoPlugin { .. }
            | Self::Engine(_) => 1,
        }
    }
}

/// Logs to stderr when `KEEL_LOG` names a level (`warn`, `info`, `debug`).
fn init_logging() {
    let Some(level) = std::env::var("KEEL_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing_subscriber::filter::LevelFilter>().ok())
    else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The `keel` program: parses the command line, runs the command, prints
/// any error on stderr and returns the exit status.
pub fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version print to stdout with status 0; usage errors
            // to stderr with status 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    init_logging();
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Errors quote names and output from outside keel.
            eprintln!("error: {}", display::clean_text(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}
