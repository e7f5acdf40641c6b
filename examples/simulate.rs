//! The program simulator: runs a scenario, an ordered list of program
//! files (`cli.md` §2), one version after another through the real engine
//! on ONE simulated cloud and ONE stack state (a journal in a temporary
//! backend, as `keel up` keeps it), and prints a readable timeline.
//!
//! ```text
//! cargo run --release --example simulate -- [SCENARIO] [--latency-ms L] [--parallel P]
//!     [--max-steps N]
//! cargo run --release --example simulate -- --list
//! ```
//!
//! For each version the timeline shows the steps in completion order (kind
//! and URN, without the `urn:pulumi:STACK::PROJECT::` prefix), any
//! component migration (the registration, the successor map old -> new,
//! the URNs it added), the steps per kind, and the simulated cloud's
//! creates, updates and deletes so far. It ends with a verdict: how many
//! of the cloud objects the first version made were replaced (deleted,
//! whether or not something was created in their place).
//!
//! Scenarios are manifests in `examples/programs/scenarios/` (`NAME.yaml`):
//! a `description` and either `versions` (program files, relative to the
//! manifest) or `generate: {components, perComponent}` (a generated
//! program of buckets in components, written to a temporary directory:
//! v1 creates it, v2 renames one bucket with a `rename` migration), with
//! optional defaults `latencyMs` and `parallel` that the flags override.
//! Without an argument the simulator runs `rename`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use keel::cli::program::ProgramFile;
use keel::cli::run::FileProgram;
use keel::engine::{Engine, EngineConfig, EngineError};
use keel::events::{EngineEvent, EventSink, Summary};
use keel::model::Urn;
use keel::persist::backend::{Backend, PersistenceKind};
use keel::persist::journal_file::JournalOptions;
use keel::provider::{ProviderRegistry, SimCloud, SimConfig};
use keel::StepKind;
use serde::Deserialize;
use tokio::sync::mpsc;

/// The stack every scenario runs on.
const STACK: &str = "dev";

/// The scenario run when none is named.
pub(crate) const DEFAULT_SCENARIO: &str = "rename";

#[derive(Parser, Debug, Clone)]
#[command(about = "keel's program simulator: program versions through the real engine")]
struct Args {
    /// The scenario (see --list).
    #[arg(default_value = DEFAULT_SCENARIO)]
    scenario: String,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Simulated latency per cloud operation, in milliseconds (default: the
    /// scenario's, else 0).
    #[arg(long)]
    latency_ms: Option<f64>,
    /// Steps running at once (default: the scenario's, else the engine's).
    #[arg(long)]
    parallel: Option<usize>,
    /// Step lines shown per version; the rest are counted.
    #[arg(long, default_value_t = 40)]
    max_steps: usize,
}

/// The directory of the scenario manifests.
pub(crate) fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/programs/scenarios")
}

/// A scenario manifest (`NAME.yaml`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Manifest {
    description: String,
    #[serde(default)]
    versions: Vec<PathBuf>,
    generate: Option<Generate>,
    latency_ms: Option<f64>,
    parallel: Option<usize>,
}

/// The shape of a generated program.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Generate {
    /// Components.
    pub(crate) components: usize,
    /// Buckets per component.
    pub(crate) per_component: usize,
}

/// A scenario, ready to run.
#[derive(Debug)]
pub(crate) struct Scenario {
    /// Its name.
    pub(crate) name: String,
    /// What it shows.
    pub(crate) description: String,
    /// The program files, in order.
    pub(crate) versions: Vec<PathBuf>,
    /// Default latency per cloud operation (ms).
    pub(crate) latency_ms: f64,
    /// Default parallelism.
    pub(crate) parallel: Option<usize>,
    /// Holds generated program files while the scenario lives.
    _generated: Option<tempfile::TempDir>,
}

/// The scenarios: name and description, by name.
pub(crate) fn list() -> Result<Vec<(String, String)>, String> {
    let dir = scenarios_dir();
    let entries =
        std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        if path.extension().is_some_and(|e| e == "yaml") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                let m = read_manifest(&path)?;
                out.push((stem.to_owned(), m.description));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn read_manifest(path: &Path) -> Result<Manifest, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_norway::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Loads the scenario `name` (generating its program files if needed).
pub(crate) fn load(name: &str) -> Result<Scenario, String> {
    let path = scenarios_dir().join(format!("{name}.yaml"));
    if !path.is_file() {
        let names: Vec<String> = list()?.into_iter().map(|(n, _)| n).collect();
        return Err(format!(
            "unknown scenario `{name}` (scenarios: {})",
            names.join(", ")
        ));
    }
    let m = read_manifest(&path)?;
    let dir = scenarios_dir();
    let mut scenario = match (m.generate, m.versions.is_empty()) {
        (Some(g), true) => generated(name, &m.description, g)?,
        (None, false) => Scenario {
            name: name.to_owned(),
            description: m.description,
            versions: m.versions.iter().map(|v| dir.join(v)).collect(),
            latency_ms: 0.0,
            parallel: None,
            _generated: None,
        },
        _ => {
            return Err(format!(
                "{}: a scenario has either `versions` or `generate`",
                path.display()
            ))
        }
    };
    scenario.latency_ms = m.latency_ms.unwrap_or(0.0);
    scenario.parallel = m.parallel;
    Ok(scenario)
}

/// The two versions of a generated program: `components` components
/// (`c0`, `c1`, ...) of `per_component` buckets each (`c0-b0`, ...); v2
/// renames `c0-b0` to `c0-b0-renamed` with a `rename` migration on `c0`.
pub(crate) fn generate_versions(g: Generate) -> [String; 2] {
    let mut versions = [String::new(), String::new()];
    for (v, text) in versions.iter_mut().enumerate() {
        let v2 = v == 1;
        text.push_str("name: large\nresources:\n");
        for c in 0..g.components {
            let _ = writeln!(
                text,
                "  c{c}:\n    type: large:index:Group\n    component: true"
            );
            if v2 && c == 0 && g.per_component > 0 {
                text.push_str(
                    "    options:\n      stateMigrations:\n        \
                     - rename: { from: c0-b0, to: c0-b0-renamed }\n",
                );
            }
            for b in 0..g.per_component {
                let name = format!("c{c}-b{b}");
                let key = if v2 && c == 0 && b == 0 {
                    format!("{name}-renamed")
                } else {
                    name.clone()
                };
                let _ = writeln!(
                    text,
                    "  {key}:\n    type: aws:s3/bucket:Bucket\n    \
                     properties: {{ name: {name} }}\n    options: {{ parent: c{c} }}"
                );
            }
        }
    }
    versions
}

/// A scenario of the two versions of [`generate_versions`], written to a
/// temporary directory that lives as long as the scenario.
pub(crate) fn generated(name: &str, description: &str, g: Generate) -> Result<Scenario, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    let mut versions = Vec::new();
    for (i, text) in generate_versions(g).iter().enumerate() {
        let path = dir.path().join(format!("{name}-v{}.yaml", i + 1));
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        versions.push(path);
    }
    Ok(Scenario {
        name: name.to_owned(),
        description: description.to_owned(),
        versions,
        latency_ms: 0.0,
        parallel: None,
        _generated: Some(dir),
    })
}

/// One line of a version's timeline, in the order the engine reported it.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    /// A step finished.
    Step {
        /// Its kind.
        kind: StepKind,
        /// The resource.
        urn: Urn,
        /// Its error, if it failed.
        error: Option<String>,
    },
    /// A component migration was committed.
    Migration {
        /// The registration that carried it.
        urn: Urn,
        /// Old URN -> new URN.
        successors: BTreeMap<Urn, Urn>,
        /// URNs it added.
        added: Vec<Urn>,
    },
    /// A diagnostic.
    Diagnostic {
        /// `info`, `warning` or `error`.
        severity: String,
        /// The message.
        message: String,
    },
}

/// What one version did.
#[derive(Debug, Clone)]
pub(crate) struct VersionReport {
    /// The program file.
    pub(crate) file: PathBuf,
    /// The URN prefix (`urn:pulumi:STACK::PROJECT::`), left out when shown.
    pub(crate) prefix: String,
    /// The timeline.
    pub(crate) entries: Vec<Entry>,
    /// The engine's summary.
    pub(crate) summary: Summary,
    /// Cloud creates, updates and deletes during this version.
    pub(crate) creates: u64,
    /// See `creates`.
    pub(crate) updates: u64,
    /// See `creates`.
    pub(crate) deletes: u64,
    /// Cloud creates, updates and deletes since the scenario started.
    pub(crate) total: (u64, u64, u64),
    /// The most cloud operations in progress at once.
    pub(crate) max_in_flight: u64,
    /// Objects in the cloud afterwards.
    pub(crate) objects: usize,
    /// Wall time of the update.
    pub(crate) wall: Duration,
}

impl VersionReport {
    /// The committed migrations.
    pub(crate) fn migrations(&self) -> impl Iterator<Item = (&Urn, &BTreeMap<Urn, Urn>, &[Urn])> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Migration {
                urn,
                successors,
                added,
            } => Some((urn, successors, added.as_slice())),
            _ => None,
        })
    }
}

/// What a whole scenario did.
#[derive(Debug, Clone)]
pub(crate) struct RunReport {
    /// Each version's report (up to the first failure).
    pub(crate) versions: Vec<VersionReport>,
    /// Cloud objects after the first version.
    pub(crate) first_objects: usize,
    /// Of those, how many are gone at the end (replaced or deleted).
    pub(crate) replaced: usize,
    /// The first failure, if a version failed (the scenario stopped there).
    pub(crate) failure: Option<String>,
    /// The parallelism used.
    pub(crate) parallel: usize,
    /// The latency used (ms).
    pub(crate) latency_ms: f64,
}

/// Overrides of a scenario's defaults.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunOptions {
    /// Latency per cloud operation (ms).
    pub(crate) latency_ms: Option<f64>,
    /// Parallelism.
    pub(crate) parallel: Option<usize>,
}

/// Runs every version of `scenario` on one cloud and one stack, calling
/// `on_version` after each.
///
/// # Errors
/// A program file that cannot be loaded, a backend that cannot be opened,
/// or an internal engine error. A version that fails is not an error: the
/// report says so and stops there.
pub(crate) async fn run(
    scenario: &Scenario,
    options: RunOptions,
    mut on_version: impl FnMut(&VersionReport),
) -> Result<RunReport, String> {
    let latency_ms = options.latency_ms.unwrap_or(scenario.latency_ms).max(0.0);
    let cloud = SimCloud::new(SimConfig {
        latency: Duration::from_secs_f64(latency_ms / 1000.0),
        record_calls: false,
        ..SimConfig::default()
    });
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temporary backend: {e}"))?;
    let backend = Backend::new(dir.path());
    let mut parallel = 0;
    let mut versions = Vec::new();
    let mut first_ids: BTreeSet<String> = BTreeSet::new();
    let mut failure = None;
    for (i, path) in scenario.versions.iter().enumerate() {
        let file = ProgramFile::load(path).map_err(|e| e.to_string())?;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut config = EngineConfig {
            stack: STACK.into(),
            project: file.name.clone(),
            events: EventSink::new(tx),
            ..EngineConfig::default()
        };
        if let Some(p) = options.parallel.or(scenario.parallel) {
            config.parallel = p.max(1);
        }
        parallel = config.parallel;
        let prefix = format!("urn:pulumi:{STACK}::{}::", file.name);
        let engine = Engine::new(config, ProviderRegistry::simulated(cloud.clone()));
        let mut open = backend
            .open(STACK, "keel simulate")
            .map_err(|e| e.to_string())?;
        let persister = open
            .persister(PersistenceKind::Journal, JournalOptions::default())
            .map_err(|e| e.to_string())?;
        let prior = std::mem::take(&mut open.deployment);
        let before = cloud.counters();
        cloud.reset_max_in_flight();
        let started = Instant::now();
        let result = engine
            .update(prior, FileProgram::new(file), persister)
            .await;
        let wall = started.elapsed();
        // The stack stays locked until the update ended.
        drop(open);
        let summary = match result {
            Ok(outcome) => outcome.summary,
            Err(EngineError::Failed(outcome)) => {
                let s = outcome.summary;
                let mut why: Vec<String> = s
                    .failures
                    .iter()
                    .map(|f| format!("{} of {} failed: {}", f.kind, f.urn, f.message))
                    .collect();
                why.extend(s.errors.iter().cloned());
                failure = Some(format!(
                    "version {} ({}) failed: {}",
                    i + 1,
                    path.display(),
                    why.join("; ")
                ));
                s
            }
            Err(e) => return Err(e.to_string()),
        };
        let mut entries = Vec::new();
        while let Ok(event) = rx.try_recv() {
            match event {
                EngineEvent::StepFinished {
                    kind, urn, error, ..
                } => entries.push(Entry::Step { kind, urn, error }),
                EngineEvent::Migration {
                    urn,
                    added,
                    successors,
                } => entries.push(Entry::Migration {
                    urn,
                    successors,
                    added,
                }),
                EngineEvent::Diagnostic {
                    severity, message, ..
                } => entries.push(Entry::Diagnostic { severity, message }),
                EngineEvent::StepStarted { .. } | EngineEvent::Summary(_) => {}
            }
        }
        let after = cloud.counters();
        let objects = cloud.objects();
        if i == 0 {
            first_ids = objects.iter().map(|o| o.id.clone()).collect();
        }
        let report = VersionReport {
            file: path.clone(),
            prefix,
            entries,
            summary,
            creates: after.creates - before.creates,
            updates: after.updates - before.updates,
            deletes: after.deletes - before.deletes,
            total: (after.creates, after.updates, after.deletes),
            max_in_flight: after.max_in_flight,
            objects: objects.len(),
            wall,
        };
        on_version(&report);
        versions.push(report);
        if failure.is_some() {
            break;
        }
    }
    let now: BTreeSet<String> = cloud.objects().into_iter().map(|o| o.id).collect();
    Ok(RunReport {
        versions,
        first_objects: first_ids.len(),
        replaced: first_ids.difference(&now).count(),
        failure,
        parallel,
        latency_ms,
    })
}

fn short<'a>(prefix: &str, urn: &'a Urn) -> &'a str {
    urn.as_str().strip_prefix(prefix).unwrap_or(urn.as_str())
}

/// The steps per kind, e.g. `create 7, same 1`.
pub(crate) fn step_counts(summary: &Summary) -> String {
    if summary.steps.is_empty() {
        return "none".into();
    }
    summary
        .steps
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One version's part of the timeline.
pub(crate) fn render_version(n: usize, r: &VersionReport, max_steps: usize) -> String {
    let mut out = String::new();
    let name = r.file.file_name().map_or_else(
        || r.file.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    );
    let _ = writeln!(out, "== v{n}  {name}");
    let mut shown = 0;
    let mut hidden = 0;
    for e in &r.entries {
        match e {
            Entry::Step { kind, urn, error } => {
                if shown < max_steps {
                    shown += 1;
                    let _ = write!(out, "   {:<18} {}", kind.as_str(), short(&r.prefix, urn));
                    if let Some(err) = error {
                        let _ = write!(out, "  FAILED: {err}");
                    }
                    out.push('\n');
                } else {
                    hidden += 1;
                }
            }
            Entry::Migration {
                urn,
                successors,
                added,
            } => {
                let _ = writeln!(out, "   migration on {}", short(&r.prefix, urn));
                if successors.is_empty() {
                    let _ = writeln!(out, "     (no URN changed)");
                }
                for (old, new) in successors {
                    let _ = writeln!(
                        out,
                        "     {} -> {}",
                        short(&r.prefix, old),
                        short(&r.prefix, new)
                    );
                }
                // The engine counts a successor's new URN as added; show
                // only the URNs that are new resources of the state.
                let targets: BTreeSet<&Urn> = successors.values().collect();
                for a in added.iter().filter(|a| !targets.contains(a)) {
                    let _ = writeln!(out, "     added {}", short(&r.prefix, a));
                }
            }
            Entry::Diagnostic { severity, message } => {
                let _ = writeln!(out, "   {severity}: {message}");
            }
        }
    }
    if hidden > 0 {
        let _ = writeln!(out, "   ... and {hidden} more steps");
    }
    for rule in &r.summary.rules {
        let _ = writeln!(out, "   migration rejected: {rule}");
    }
    let _ = writeln!(
        out,
        "   steps: {}  ({} ms; max concurrent cloud operations: {})",
        step_counts(&r.summary),
        r.wall.as_millis(),
        r.max_in_flight
    );
    let (c, u, d) = r.total;
    let _ = writeln!(
        out,
        "   cloud so far: {c} creates, {u} updates, {d} deletes \
         (this version: {} / {} / {}); {} objects",
        r.creates, r.updates, r.deletes, r.objects
    );
    out
}

/// The last lines: totals after the first version and the verdict.
pub(crate) fn render_verdict(r: &RunReport) -> String {
    let mut out = String::new();
    let later = r.versions.iter().skip(1);
    let (c, u, d) = later.fold((0, 0, 0), |(c, u, d), v| {
        (c + v.creates, u + v.updates, d + v.deletes)
    });
    if let Some(f) = &r.failure {
        let _ = writeln!(out, "FAILED: {f}");
    }
    if r.versions.len() > 1 {
        let _ = writeln!(
            out,
            "after v1: {c} creates, {u} updates, {d} deletes in the cloud; \
             {} of {} objects kept their IDs",
            r.first_objects - r.replaced,
            r.first_objects
        );
    }
    let migrations: usize = r.versions.iter().map(|v| v.migrations().count()).sum();
    let _ = writeln!(out, "component migrations committed: {migrations}");
    let _ = writeln!(out, "verdict: physical resources replaced: {}", r.replaced);
    out
}

fn run_main(args: Args) -> Result<bool, String> {
    if args.list {
        for (name, description) in list()? {
            println!("{name:<16} {description}");
        }
        return Ok(true);
    }
    let scenario = load(&args.scenario)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let options = RunOptions {
        latency_ms: args.latency_ms,
        parallel: args.parallel,
    };
    println!("scenario {}: {}", scenario.name, scenario.description);
    let started = Instant::now();
    let mut n = 0;
    let report = rt.block_on(run(&scenario, options, |v| {
        n += 1;
        println!();
        print!("{}", render_version(n, v, args.max_steps));
    }))?;
    println!();
    println!(
        "one simulated cloud, one stack (journal); latency {} ms, parallel {}, wall {} ms",
        report.latency_ms,
        report.parallel,
        started.elapsed().as_millis()
    );
    if report.latency_ms > 0.0 {
        if let Some(v1) = report.versions.first() {
            let ops = v1.creates + v1.updates + v1.deletes;
            println!(
                "v1: {ops} cloud operations of {} ms took {} ms; one at a time they would take {} ms",
                report.latency_ms,
                v1.wall.as_millis(),
                (ops as f64 * report.latency_ms).round()
            );
        }
    }
    print!("{}", render_verdict(&report));
    Ok(report.failure.is_none())
}

fn main() -> ExitCode {
    match run_main(Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
