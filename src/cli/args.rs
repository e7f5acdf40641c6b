//! The command line's grammar (`cli.md` §1), declared with clap's derive
//! API. Parsing only: [`super::commands`] carries the commands out.
//!
//! Flags for controls keel does not have yet (filters on `refresh`) are
//! accepted by the parser so that scripts written for
//! the full interface get a clear answer: using one fails with exit status
//! 2 and "not supported yet", never silently.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::persist::backend::PersistenceKind;

/// The default backend directory.
pub const DEFAULT_BACKEND: &str = "./.keel";
/// The environment variable naming the backend directory.
pub const BACKEND_ENV: &str = "KEEL_BACKEND";
/// The default stack.
pub const DEFAULT_STACK: &str = "dev";

const EXAMPLES: &str = "\
Examples:
  keel up --program examples/programs/site-v1.yaml
  keel preview --program examples/programs/site-v2.yaml
  keel up --program site.yaml --stack prod --json > events.jsonl
  keel up --program site.yaml --sim-latency-ms 50 --parallel 8
  keel refresh --yes
  keel destroy --yes
  keel stack export --file dev.json
  keel stack import --stack dev --file dev.json
  keel state verify --file dev.json
  keel state show
  keel cloud list --json
  keel stack init prod && keel stack ls
  keel config set --secret dbPassword S3cr3t --program ./my-project

Backend: --backend DIR, else $KEEL_BACKEND, else ./.keel. It holds the stacks
(stacks/<name>/), their locks, and the simulated cloud (cloud.json).
A backend postgres://USER@HOST:PORT/DB keeps the stacks in PostgreSQL.
The stack of a command: --stack, else the one `keel stack select` chose,
else dev.

Exit status: 0 success, 1 the operation failed (the error and the resource
it concerns are printed), 2 bad usage or a bad input file (nothing was
changed).";

/// keel: a deployment engine for infrastructure as code, with state in
/// Pulumi's checkpoint format and a simulated cloud.
#[derive(Debug, Parser)]
#[command(name = "keel", version, after_help = EXAMPLES)]
pub struct Cli {
    /// Directory holding stacks, locks and the simulated cloud [default:
    /// $KEEL_BACKEND, else ./.keel].
    #[arg(long, global = true, value_name = "DIR")]
    pub backend: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The backend directory: `--backend`, else `$KEEL_BACKEND`, else
    /// `./.keel`.
    pub fn backend_dir(&self) -> PathBuf {
        match &self.backend {
            Some(dir) => dir.clone(),
            None => match std::env::var_os(BACKEND_ENV) {
                Some(dir) if !dir.is_empty() => PathBuf::from(dir),
                _ => PathBuf::from(DEFAULT_BACKEND),
            },
        }
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a program and reconcile the stack (and the cloud) with it.
    #[command(after_help = "Examples:
  keel up --program examples/programs/site-v1.yaml
  keel up --program site.yaml --stack prod --persistence checkpoint
  keel up --program site.yaml --json | jq -c 'select(.event == \"summary\")'
  keel up --program site.yaml --sim-fail cdn --continue-on-error

keel never prompts: --yes is accepted so that scripts stay portable.")]
    Up(UpArgs),
    /// Show what `up` would do, changing nothing.
    #[command(after_help = "Examples:
  keel preview --program examples/programs/site-v2.yaml
  keel preview --program examples/programs/site-v2.yaml --diff
  keel preview --program site.yaml --json")]
    Preview(PreviewArgs),
    /// Reconcile the stack's state with the cloud (drift, deleted objects).
    #[command(after_help = "Examples:
  keel refresh --yes
  keel refresh --stack prod --json

keel never prompts: --yes is accepted so that scripts stay portable.")]
    Refresh(OpArgs),
    /// Delete every resource of the stack.
    #[command(after_help = "Examples:
  keel destroy --yes
  keel destroy --stack prod --continue-on-error

keel never prompts: --yes is accepted so that scripts stay portable.
Protected resources block a destroy before anything is deleted.")]
    Destroy(OpArgs),
    /// Manage stacks: list, select, init, rm, rename, outputs, export and
    /// import (deployment v3 JSON).
    #[command(subcommand)]
    Stack(StackCommand),
    /// Ask the operation running on the stack to stop gracefully.
    #[command(after_help = "Examples:
  keel cancel --yes
  keel cancel --stack prod

The process holding the stack's lock (`keel up`, `refresh`, `destroy`)
stops as on a first Ctrl-C: no new step starts, the steps in flight finish
and are saved, the lock is released; it ends failed (exit 1), saying who
cancelled it. keel cancel does not wait for that. Exit 1 when no operation
is running. Asks for confirmation unless --yes; without a terminal --yes is
required.")]
    Cancel(CancelArgs),
    /// Inspect a stack's state.
    #[command(subcommand)]
    State(StateCommand),
    /// Adopt existing cloud objects into the stack (read, never created).
    #[command(after_help = "Examples:
  keel import aws:s3/bucket:Bucket logs site-logs-1a2b3c
  keel import aws:s3/bucket:Bucket logs ID --parent 'urn:pulumi:dev::site::site:web:Site::site' --yes
  keel import --file resources.json --yes

The file is Pulumi's import file: {\"resources\": [{\"type\", \"name\", \"id\",
\"parent\", \"provider\", \"version\", \"logicalName\", \"component\"}],
\"nameTable\": {\"name\": \"URN\"}}. Imported resources are protected unless
--protect=false. An ID the stack already manages is refused (exit 2); an ID
the cloud does not have fails (exit 1) and changes nothing.")]
    Import(super::commands::adopt::ImportArgs),
    /// Inspect the simulated cloud.
    #[command(subcommand)]
    Cloud(CloudCommand),
    /// Read and write the stack's config (`Pulumi.<stack>.yaml` next to
    /// the program), as `pulumi config` does.
    #[command(subcommand)]
    Config(ConfigCommand),
}

/// Which config file: the program's directory and the stack.
#[derive(Debug, Clone, Args)]
pub struct ConfigTarget {
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// The program (a directory, or a program file whose directory holds
    /// the config file); it names the project of bare keys.
    #[arg(long, value_name = "PATH", default_value = ".")]
    pub program: PathBuf,
}

/// `keel config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Set a value (read from stdin when VALUE is omitted).
    #[command(after_help = "Examples:
  keel config set env prod
  keel config set aws:region eu-west-1
  keel config set --secret dbPassword S3cr3t
  keel config set --path 'db.hosts[0]' db-1.internal
  keel config set --secret --path db.password S3cr3t --program ./my-project --stack prod

A key without `namespace:` belongs to the project. --secret encrypts the
value with the stack's passphrase (KEEL_CONFIG_PASSPHRASE) and stores
`secure: <ciphertext>`; the file's `encryptionsalt` is written when it has
none (the stack's own salt when the stack exists).")]
    Set {
        /// The key (`name` or `namespace:name`; with --path, a path).
        key: String,
        /// The value.
        value: Option<String>,
        /// Encrypt the value.
        #[arg(long)]
        secret: bool,
        /// The key's name is a property path (`a.b`, `a[0]`, `a["b.c"]`).
        #[arg(long)]
        path: bool,
        /// Which config file.
        #[command(flatten)]
        target: ConfigTarget,
    },
    /// Print a value (secrets decrypted).
    #[command(after_help = "Examples:
  keel config get env
  keel config get --path 'db.hosts[0]'
  keel config get dbPassword --json")]
    Get {
        /// The key.
        key: String,
        /// The key's name is a property path.
        #[arg(long)]
        path: bool,
        /// Print `{\"value\", \"secret\"}` as JSON.
        #[arg(long)]
        json: bool,
        /// Which config file.
        #[command(flatten)]
        target: ConfigTarget,
    },
    /// Remove a value.
    #[command(after_help = "Examples:
  keel config rm env
  keel config rm --path 'db.hosts[0]'")]
    Rm {
        /// The key.
        key: String,
        /// The key's name is a property path.
        #[arg(long)]
        path: bool,
        /// Which config file.
        #[command(flatten)]
        target: ConfigTarget,
    },
    /// List the values; secrets show as `[secret]`.
    #[command(after_help = "Examples:
  keel config ls
  keel config ls --show-secrets --json")]
    Ls {
        /// Show secrets decrypted.
        #[arg(long)]
        show_secrets: bool,
        /// Print `{key: {\"value\", \"secret\"}}` as JSON.
        #[arg(long)]
        json: bool,
        /// Which config file.
        #[command(flatten)]
        target: ConfigTarget,
    },
}

/// `--stack NAME`.
#[derive(Debug, Clone, Args)]
pub struct StackArg {
    /// The stack [default: the selected stack (`keel stack select`), else
    /// dev].
    #[arg(long, value_name = "NAME")]
    pub stack: Option<String>,
}

impl StackArg {
    /// The stack named: `--stack`, else (once [`Command::default_stack`]
    /// filled it in) the selected stack, else `dev`.
    pub fn name(&self) -> &str {
        self.stack.as_deref().unwrap_or(DEFAULT_STACK)
    }
}

impl Command {
    /// Fills in the stack of a command given no `--stack` with `selected`
    /// (the backend's selected stack), so that the precedence is `--stack`
    /// > selected > `dev`.
    pub fn default_stack(&mut self, selected: Option<String>) {
        let arg = match self {
            Self::Up(a) => &mut a.stack,
            Self::Preview(a) => &mut a.stack,
            Self::Refresh(a) | Self::Destroy(a) => &mut a.stack,
            Self::Stack(
                StackCommand::Export { stack, .. }
                | StackCommand::Import { stack, .. }
                | StackCommand::Rename { stack, .. }
                | StackCommand::Output { stack, .. }
                | StackCommand::History { stack, .. }
                | StackCommand::Graph { stack, .. },
            )
            | Self::State(StateCommand::Show { stack, .. })
            | Self::Cancel(CancelArgs { stack, .. }) => stack,
            Self::State(StateCommand::Delete(a)) => &mut a.stack,
            Self::State(StateCommand::Protect(a)) => &mut a.stack,
            Self::State(StateCommand::Unprotect(a)) => &mut a.stack,
            Self::State(StateCommand::Rename(a)) => &mut a.stack,
            Self::State(StateCommand::Repair(a)) => &mut a.stack,
            Self::State(StateCommand::Edit(a)) => &mut a.stack,
            Self::Import(a) => &mut a.stack,
            Self::State(StateCommand::Verify { stack, file }) => {
                if stack.is_none() && file.is_none() {
                    *stack = selected;
                }
                return;
            }
            Self::Config(
                ConfigCommand::Set { target, .. }
                | ConfigCommand::Get { target, .. }
                | ConfigCommand::Rm { target, .. }
                | ConfigCommand::Ls { target, .. },
            ) => &mut target.stack,
            Self::Stack(
                StackCommand::Ls { .. }
                | StackCommand::Select { .. }
                | StackCommand::Init { .. }
                | StackCommand::Rm { .. },
            )
            | Self::State(StateCommand::Move(_))
            | Self::Cloud(_) => return,
        };
        if arg.stack.is_none() {
            arg.stack = selected;
        }
    }
}

/// `keel cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Proceed without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// How operation events are shown.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Print one JSON engine event per line on stdout (the last one is the
    /// summary) instead of the progress display.
    #[arg(long)]
    pub json: bool,
    /// Also show debug diagnostics (a program's `log.debug` messages).
    #[arg(long)]
    pub debug: bool,
    /// More output: debug diagnostics are shown from `-v` on.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

impl OutputArgs {
    /// Whether debug diagnostics are shown (`--debug` or `-v`).
    pub fn show_debug(&self) -> bool {
        self.debug || self.verbose > 0
    }
}

/// The persistence strategy flag's values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Persistence {
    /// Append-only journal with group commit.
    #[default]
    Journal,
    /// Atomic rewrite of the whole checkpoint per change.
    Checkpoint,
}

impl From<Persistence> for PersistenceKind {
    fn from(p: Persistence) -> Self {
        match p {
            Persistence::Journal => Self::Journal,
            Persistence::Checkpoint => Self::Checkpoint,
        }
    }
}

/// Engine knobs shared by the operations.
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// Steps running at once [default: 4 x cores; 1 = serial].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub parallel: Option<u32>,
    /// Keep going after a step fails, skipping only what depends on it.
    #[arg(long)]
    pub continue_on_error: bool,
    /// Proceed without asking (keel never prompts; accepted for scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// How state is persisted during an operation.
#[derive(Debug, Clone, Args)]
pub struct PersistArgs {
    /// How state is written during the operation.
    #[arg(long, value_enum, default_value_t = Persistence::Journal)]
    pub persistence: Persistence,
}

/// The simulated cloud's knobs (`cli.md` §4).
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Latency of each simulated cloud operation, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub sim_latency_ms: u64,
    /// Probability (0..1) that a simulated create, update or delete fails.
    #[arg(long, value_name = "F", default_value_t = 0.0, value_parser = parse_rate)]
    pub sim_fail_rate: f64,
    /// Make operations on this resource (URN or name) fail; repeatable.
    #[arg(long, value_name = "URN-or-name")]
    pub sim_fail: Vec<String>,
    /// Seed of the simulated cloud's failure draws.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub sim_seed: u64,
    /// Who serves the packages: `sim`, the simulated cloud; `plugins`, each
    /// package's Pulumi plugin (`pulumi-resource-<pkg>`, found as Pulumi
    /// finds it; a missing one is an error). Without it: the config key
    /// `keel:providers`, else what the stack's state records per package,
    /// else `sim`. Switching a recorded package is refused. Package
    /// `pulumi` is keel's own and Python dynamic providers always run in
    /// their plugin.
    #[arg(long, value_enum)]
    pub providers: Option<Providers>,
}

/// The `--providers` flag's values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Providers {
    /// The simulated cloud.
    #[default]
    Sim,
    /// Real provider plugins.
    Plugins,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let f: f64 = s
        .parse()
        .map_err(|e| format!("`{s}` is not a number: {e}"))?;
    if (0.0..=1.0).contains(&f) {
        Ok(f)
    } else {
        Err(format!("`{s}` is not a probability between 0 and 1"))
    }
}

/// Resource filters (`--target`, `--exclude`): non-targeted resources keep
/// their prior state; providers and the stack are always included.
#[derive(Debug, Clone, Args)]
pub struct FilterArgs {
    /// Operate on this resource only (repeatable; a URN, a glob as
    /// Pulumi's: `**` any text, `*` any text without `:`, or a program
    /// file's declaration address: `server["a"]`, `group["east"]/server`,
    /// `group/server`).
    #[arg(long, value_name = "URN|ADDRESS")]
    pub target: Vec<String>,
    /// Leave this resource out (repeatable; a URN, a glob or an address).
    #[arg(long, value_name = "URN|ADDRESS")]
    pub exclude: Vec<String>,
    /// Include the dependents of targets.
    #[arg(long)]
    pub target_dependents: bool,
    /// Also leave out the dependents of excluded resources.
    #[arg(long)]
    pub exclude_dependents: bool,
}

/// What `up` and `preview` change: filters, forced replaces, a refresh
/// first.
#[derive(Debug, Clone, Args)]
pub struct ChangeArgs {
    /// Filters.
    #[command(flatten)]
    pub filters: FilterArgs,
    /// Replace this resource (repeatable).
    #[arg(long, value_name = "URN")]
    pub replace: Vec<String>,
    /// Reconcile the state with the cloud first (in memory), then plan
    /// against it.
    #[arg(long)]
    pub refresh: bool,
}

/// `keel up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// The program: a file (YAML or JSON), or a project directory (a
    /// Pulumi YAML project, or a Pulumi Python program's `__main__.py`, run
    /// with `KEEL_PYTHON` or `python3`) [default: the current directory].
    #[arg(
        long,
        value_name = "FILE",
        default_value = ".",
        hide_default_value = true
    )]
    pub program: PathBuf,
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Engine knobs.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Persistence.
    #[command(flatten)]
    pub persist: PersistArgs,
    /// Filters, replaces and refresh.
    #[command(flatten)]
    pub change: ChangeArgs,
    /// Execute only what a plan saved by `keel preview --save-plan` allows.
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Show each step's property diff (`~ key: old => new`, secrets masked);
    /// with --json the step events carry it as `detailedDiff`.
    #[arg(long)]
    pub diff: bool,
    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
    /// The simulated cloud.
    #[command(flatten)]
    pub sim: SimArgs,
}

/// `keel preview`.
#[derive(Debug, Clone, Args)]
pub struct PreviewArgs {
    /// The program: a file (YAML or JSON), or a project directory (a
    /// Pulumi YAML project, or a Pulumi Python program's `__main__.py`, run
    /// with `KEEL_PYTHON` or `python3`) [default: the current directory].
    #[arg(
        long,
        value_name = "FILE",
        default_value = ".",
        hide_default_value = true
    )]
    pub program: PathBuf,
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Steps planned at once [default: 4 x cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub parallel: Option<u32>,
    /// Filters, replaces and refresh.
    #[command(flatten)]
    pub change: ChangeArgs,
    /// Save the planned steps and goals to a file, for `keel up --plan`.
    #[arg(long, value_name = "FILE")]
    pub save_plan: Option<PathBuf>,
    /// Show each step's property diff (`~ key: old => new`, secrets masked);
    /// with --json the step events carry it as `detailedDiff`.
    #[arg(long)]
    pub diff: bool,
    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
    /// The simulated cloud.
    #[command(flatten)]
    pub sim: SimArgs,
}

/// `keel refresh` and `keel destroy`.
#[derive(Debug, Clone, Args)]
pub struct OpArgs {
    /// The program file: only its project name is used (default: the
    /// project of the stack's resources).
    #[arg(long, value_name = "FILE")]
    pub program: Option<PathBuf>,
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Engine knobs.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Persistence.
    #[command(flatten)]
    pub persist: PersistArgs,
    /// Filters (`destroy` only; `refresh` refuses them).
    #[command(flatten)]
    pub filters: FilterArgs,
    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
    /// The simulated cloud.
    #[command(flatten)]
    pub sim: SimArgs,
    /// Interrupted creates (`refresh` only).
    #[command(flatten)]
    pub pending: PendingArgs,
}

/// What `keel refresh` does with interrupted creates whose objects the
/// provider cannot look up (kept pending by default, as Pulumi does).
#[derive(Debug, Clone, Default, Args)]
pub struct PendingArgs {
    /// Drop every such record (an object that was made is then no longer
    /// tracked: delete it by hand).
    #[arg(long)]
    pub clear_pending_creates: bool,
    /// `URN ID`: the create of URN made the object ID; it is read by that ID
    /// and adopted (repeatable).
    #[arg(long, num_args = 2, value_names = ["URN", "ID"], action = clap::ArgAction::Append)]
    pub import_pending_creates: Vec<String>,
}

/// `keel stack ...`.
#[derive(Debug, Subcommand)]
pub enum StackCommand {
    /// List the backend's stacks: name, last update, resource count; the
    /// selected stack is marked `*`.
    #[command(after_help = "Examples:
  keel stack ls
  keel stack ls --json | jq -r '.[].name'")]
    Ls {
        /// Print `[{\"name\", \"current\", \"lastUpdate\",
        /// \"updateInProgress\", \"resourceCount\"}]`.
        #[arg(long)]
        json: bool,
    },
    /// Select the default stack of this backend (used when `--stack` is not
    /// given).
    #[command(after_help = "Examples:
  keel stack select prod
  keel up --program site.yaml        # runs on prod

The stack of a command: --stack, else the selected stack, else dev.")]
    Select {
        /// The stack (it must exist: `keel stack init NAME` makes one).
        name: String,
    },
    /// Create an empty stack and select it.
    #[command(after_help = "Examples:
  keel stack init prod

Refuses a stack that exists.")]
    Init {
        /// The new stack's name.
        name: String,
    },
    /// Remove a stack (its directory is kept under the backend's backups/).
    #[command(after_help = "Examples:
  keel stack rm staging --yes
  keel stack rm old --force --yes

A stack that still has resources is refused unless --force (their cloud
objects are then no longer tracked: `keel destroy` first to delete them).
The stack's config file (Pulumi.<name>.yaml in the --program directory) is
moved along into backups/ unless --preserve-config.
Asks for confirmation unless --yes; without a terminal --yes is required.")]
    Rm {
        /// The stack.
        name: String,
        /// Remove it even though it has resources.
        #[arg(long, short = 'f')]
        force: bool,
        /// Leave the stack's config file where it is.
        #[arg(long)]
        preserve_config: bool,
        /// The program whose directory holds the stack's config file.
        #[arg(long, value_name = "PATH", default_value = ".")]
        program: PathBuf,
        /// Proceed without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Rename a stack: its URNs (and every reference to them) take the new
    /// name.
    #[command(after_help = "Examples:
  keel stack rename prod --stack staging
  keel stack rename dev2 --yes

The renamed state is verified before it is written; the old stack's
directory is kept under the backend's backups/. Refuses a NEW that exists
(as a stack, or as a config file). The stack's config file
(Pulumi.<old>.yaml in the --program directory) is renamed too.
Asks for confirmation unless --yes; without a terminal --yes is required.")]
    Rename {
        /// The new name.
        new: String,
        /// The stack to rename.
        #[command(flatten)]
        stack: StackArg,
        /// The program whose directory holds the stack's config file.
        #[arg(long, value_name = "PATH", default_value = ".")]
        program: PathBuf,
        /// Proceed without asking.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Print the stack's outputs (all, or the one named).
    #[command(after_help = "Examples:
  keel stack output
  keel stack output url
  keel stack output --json --show-secrets

Secrets show as [secret] unless --show-secrets (which needs the stack's
passphrase: KEEL_CONFIG_PASSPHRASE or KEEL_CONFIG_PASSPHRASE_FILE).")]
    Output {
        /// Print only this output (a string prints as it is).
        name: Option<String>,
        /// The stack.
        #[command(flatten)]
        stack: StackArg,
        /// Show secrets in plaintext.
        #[arg(long)]
        show_secrets: bool,
        /// Print the outputs (or the one named) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the stack's operations (up, refresh, destroy), newest first.
    #[command(after_help = "Examples:
  keel stack history
  keel stack history --json | jq '.[0].result'

Every `keel up`, `refresh` and `destroy` that ran (took the stack's lock
and started; refused input is not) is recorded, whether it succeeded,
failed or was cancelled: kind, start, end,
result, error, step counts, the program (path, project, SHA-256), user,
host, pid and keel version.")]
    History {
        /// The stack.
        #[command(flatten)]
        stack: StackArg,
        /// Print the records as a JSON array (`version` counts from 1).
        #[arg(long)]
        json: bool,
    },
    /// Write the stack's resource graph (DOT for Graphviz, or JSON).
    #[command(after_help = "Examples:
  keel stack graph site.dot && dot -Tsvg site.dot > site.svg
  keel stack graph - --json | jq '.edges[] | select(.kind == \"parent\")'

One node per resource (label: name and type). Edges go from a resource to
its dependencies (solid) and to its parent (dashed), in their own colours.
FILE `-` writes to stdout. The same state always gives the same graph.")]
    Graph {
        /// The file to write (`-`: stdout).
        file: PathBuf,
        /// The stack.
        #[command(flatten)]
        stack: StackArg,
        /// Write JSON: `{\"nodes\": [{\"id\", \"urn\", \"type\", \"name\"}],
        /// \"edges\": [{\"from\", \"to\", \"kind\"}]}` (kind: parent or
        /// dependency).
        #[arg(long)]
        json: bool,
        /// Leave out the edges to parents.
        #[arg(long)]
        ignore_parent_edges: bool,
        /// Leave out the edges to dependencies.
        #[arg(long)]
        ignore_dependency_edges: bool,
        /// The colour of edges to parents.
        #[arg(long, value_name = "COLOR", default_value = super::graph::PARENT_COLOR)]
        parent_edge_color: String,
        /// The colour of edges to dependencies.
        #[arg(long, value_name = "COLOR", default_value = super::graph::DEPENDENCY_COLOR)]
        dependency_edge_color: String,
        /// Label nodes with the resource's name only.
        #[arg(long)]
        short_node_name: bool,
    },
    /// Print (or write) the stack's state as deployment v3 JSON.
    #[command(after_help = "Examples:
  keel stack export > dev.json
  keel stack export --stack prod --file prod.json

Secrets are exported encrypted, as stored; --show-secrets decrypts them
(set KEEL_CONFIG_PASSPHRASE or KEEL_CONFIG_PASSPHRASE_FILE for a stack of
the passphrase secrets provider).")]
    Export {
        /// The stack.
        #[command(flatten)]
        stack: StackArg,
        /// Write here instead of stdout.
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// Show secrets in plaintext (needs the stack's passphrase).
        #[arg(long)]
        show_secrets: bool,
    },
    /// Replace the stack's state with a file, verified first.
    #[command(after_help = "Examples:
  keel stack import --file dev.json
  keel stack import --stack prod --file prod.json

The file is decoded and its integrity verified before the stack is locked;
an invalid file, or one whose resources belong to another stack, changes
nothing (exit status 2). The stack's journal is emptied.")]
    Import {
        /// The stack.
        #[command(flatten)]
        stack: StackArg,
        /// The deployment file (stack export form or backend form).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
    },
}

/// `keel state ...`.
#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Check a stack's (or a file's) integrity; exit status 1 on failure.
    #[command(after_help = "Examples:
  keel state verify
  keel state verify --stack prod
  keel state verify --file dev.json")]
    Verify {
        /// The stack [default: the selected stack, else dev].
        #[arg(long, value_name = "NAME", conflicts_with = "file")]
        stack: Option<String>,
        /// A checkpoint file to verify instead of a stack.
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// Print the stack's resources as a tree (by parent).
    #[command(after_help = "Examples:
  keel state show
  keel state show --stack prod --json")]
    Show {
        /// The stack.
        #[command(flatten)]
        stack: StackArg,
        /// Print the tree as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a resource from the state (its cloud object is left alone).
    #[command(after_help = "Examples:
  keel state delete 'urn:pulumi:dev::site::sim:index:Bucket::logs' --yes
  keel state delete URN --target-dependents --force --yes

Refuses a protected resource without --force, and one other resources
depend on (children, dependents, users of a provider) without
--target-dependents.")]
    Delete(super::state_cmds::DeleteArgs),
    /// Mark resources protected (never deleted or replaced).
    Protect(super::state_cmds::ProtectArgs),
    /// Clear the protection of resources (or of all with --all).
    Unprotect(super::state_cmds::UnprotectArgs),
    /// Rename a resource in the state; references follow.
    #[command(after_help = "Examples:
  keel state rename 'urn:pulumi:dev::site::sim:index:Bucket::logs' archive --yes")]
    Rename(super::state_cmds::RenameArgs),
    /// Move resources (with their children) from one stack to another.
    #[command(after_help = "Examples:
  keel state move --source dev --dest prod 'urn:pulumi:dev::site::sim:index:Bucket::logs' --yes

Providers the resources use are copied; references between moved
resources and resources staying behind are dropped and listed.")]
    Move(super::state_cmds::MoveArgs),
    /// Repair an invalid state: order, dangling references, duplicate
    /// pending operations.
    #[command(after_help = "Examples:
  keel state repair --dry-run
  keel state repair --yes --json")]
    Repair(super::state_cmds::RepairArgs),
    /// Edit the state as JSON in $EDITOR; written only if it verifies.
    #[command(after_help = "Examples:
  EDITOR=vim keel state edit --stack prod

Secrets stay encrypted in the file. The edited state must pass the checks
of `keel stack import`; a summary of the changes is shown before writing.")]
    Edit(super::state_cmds::EditArgs),
}

/// `keel cloud ...`.
#[derive(Debug, Subcommand)]
pub enum CloudCommand {
    /// List the objects in the simulated cloud.
    #[command(after_help = "Examples:
  keel cloud list
  keel cloud list --json | jq '.[].id'")]
    List {
        /// Print `[{\"id\", \"type\", \"name\", \"properties\"}]`.
        #[arg(long)]
        json: bool,
    },
    /// Add an object made outside keel, for `import` options, `keel import`
    /// and `get` reads to find. No stack owns it until one imports it.
    #[command(after_help = "Examples:
  keel cloud add aws:s3/bucket:Bucket legacy-logs --property bucket=legacy-logs
  keel cloud add simple:index:Resource fakeID123 --property value=true

A property's value is read as JSON when it parses as JSON (true, 3,
[\"a\"], {\"k\": 1}), else as a string. The object's properties are both
its inputs and its outputs. An object of the same type and ID already in
the cloud is an error, and the cloud is left as it was.")]
    Add {
        /// The object's type token (`pkg:module:Type`).
        #[arg(value_name = "TYPE")]
        ty: String,
        /// Its physical ID.
        id: String,
        /// Its name in listings [default: the ID].
        #[arg(long)]
        name: Option<String>,
        /// A property, `KEY=VALUE` (repeatable).
        #[arg(long = "property", value_name = "KEY=VALUE")]
        properties: Vec<String>,
    },
}
