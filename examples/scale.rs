//! The scale harness (`performance.md` §1): builds a synthetic program of N
//! resources on the simulated cloud, runs it through the real engine and
//! prints one line of JSON as its last line.
//!
//! ```text
//! cargo run --release --example scale -- --resources N --shape SHAPE
//!     [--latency-ms L] [--parallel P] [--persistence journal|checkpoint|memory]
//!     [--operation up|noop|migrate|load|cloud] [--migrate-subtree K] [--seed S]
//!     [--window W]
//! ```
//! Shapes: `flat`, `components` (customs in components of 10), `chain`,
//! `dag` (each depends on up to 3 earlier ones, seeded), `wide-consumers`.
//! Persistence is real (a fresh temporary backend, fsync on); `memory`
//! skips the disk for comparison. `migrate` runs a second update in which a
//! component of `--migrate-subtree K` resources (added after the N) renames
//! a child through a migration callback; with latency, that update also
//! changes every other resource so steps are in flight when it arrives.
//! `cloud` (not in `performance.md`) runs no engine: every custom's create
//! is called straight on the simulated cloud, `--parallel` at a time, to
//! measure the floor the cloud and the machine leave any engine (P3's).

use std::collections::BTreeMap;
use std::process::ExitCode;

/// The `keel` binary's allocator (src/bin/keel.rs): the harness measures
/// the engine as the command runs it.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::future::{BoxFuture, FutureExt, Shared};
use keel::engine::{Engine, EngineConfig};
use keel::model::{CheckpointFile, Deployment, PropertyMap, PropertyValue, TypeToken, Urn};
use keel::persist::backend::{Backend, PersistenceKind};
use keel::persist::journal_file::JournalOptions;
use keel::persist::{MemoryPersister, Persister};
use keel::provider::{
    Provider, ProviderRegistry, ResourceRequest, SimCloud, SimConfig, SimProvider,
};
use keel::source::goal::{Goal, ResourceOptions};
use keel::source::migration::{
    MigrationCallback, StateMigrationArgs, StateMigrationResult, StateMigrations,
};
use keel::{Context, ProgramError};

#[derive(Parser, Debug, Clone)]
#[command(about = "keel's scale harness: one synthetic program through the real engine")]
struct Args {
    /// Number of custom resources.
    #[arg(long, default_value_t = 1000)]
    resources: usize,
    /// flat | components | chain | dag | wide-consumers.
    #[arg(long, default_value = "flat")]
    shape: String,
    /// Simulated latency per provider operation, in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    latency_ms: f64,
    /// Chains running at once (default 4 x cores).
    #[arg(long)]
    parallel: Option<usize>,
    /// journal | checkpoint | memory.
    #[arg(long, default_value = "journal")]
    persistence: String,
    /// up | noop | migrate | load | cloud (the simulated cloud alone).
    #[arg(long, default_value = "up")]
    operation: String,
    /// Size of the migrated subtree (migrate only).
    #[arg(long, default_value_t = 10)]
    migrate_subtree: usize,
    /// Seed for the dag shape.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The ceiling of the operations begun ahead of their calls
    /// (`EngineConfig::pending_window`; 0: the engine's default).
    #[arg(long, default_value_t = 0)]
    window: usize,
}

/// One synthetic resource: name, parent index, dependency indexes.
#[derive(Debug, Clone)]
struct Spec {
    name: String,
    ty: &'static str,
    custom: bool,
    parent: Option<usize>,
    deps: Vec<usize>,
    /// The root of the subtree the `migrate` operation renames a child of.
    migrate_root: bool,
}

fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

fn build(args: &Args) -> Result<Vec<Spec>, String> {
    let n = args.resources;
    let custom = |i: usize, deps: Vec<usize>, parent: Option<usize>| Spec {
        name: format!("r{i}"),
        ty: "sim:index:Thing",
        custom: true,
        parent,
        deps,
        migrate_root: false,
    };
    let mut out = Vec::with_capacity(n + n / 10 + 1);
    match args.shape.as_str() {
        "flat" => out.extend((0..n).map(|i| custom(i, vec![], None))),
        "chain" => {
            out.extend((0..n).map(|i| custom(i, if i == 0 { vec![] } else { vec![i - 1] }, None)))
        }
        "dag" => {
            let mut rng = args.seed.max(1);
            for i in 0..n {
                let mut deps: Vec<usize> = (0..xorshift(&mut rng) % 4)
                    .filter(|_| i > 0)
                    .map(|_| (xorshift(&mut rng) % i as u64) as usize)
                    .collect();
                deps.sort_unstable();
                deps.dedup();
                out.push(custom(i, deps, None));
            }
        }
        "components" | "wide-consumers" => {
            let groups = n.div_ceil(10);
            for g in 0..groups {
                let comp = out.len();
                out.push(Spec {
                    name: format!("c{g}"),
                    ty: "sim:index:Group",
                    custom: false,
                    parent: None,
                    deps: vec![],
                    migrate_root: false,
                });
                for k in 0..10.min(n - g * 10) {
                    out.push(custom(g * 10 + k, vec![], Some(comp)));
                }
            }
            if args.shape == "wide-consumers" {
                // Every customer outside the first component depends on one of its members.
                let first: Vec<usize> = (1..=10.min(n)).collect();
                for (j, s) in out.iter_mut().enumerate().skip(11) {
                    if s.custom {
                        s.deps.push(first[j % first.len()]);
                    }
                }
            }
        }
        other => {
            return Err(format!(
                "unknown shape `{other}` (flat, components, chain, dag, wide-consumers)"
            ))
        }
    }
    if args.operation == "migrate" {
        // The migrated component comes last, so with latency the other
        // resources' steps are in flight when its registration arrives.
        let k = args.migrate_subtree.max(1);
        let root = out.len();
        out.push(Spec {
            name: "migrated".into(),
            ty: "sim:index:Group",
            custom: false,
            parent: None,
            deps: vec![],
            migrate_root: true,
        });
        out.extend((0..k).map(|i| Spec {
            name: format!("m{i}"),
            ty: "sim:index:Thing",
            custom: true,
            parent: Some(root),
            deps: vec![],
            migrate_root: false,
        }));
    }
    Ok(out)
}

type UrnFuture = Shared<BoxFuture<'static, Result<Urn, String>>>;

/// A callback renaming the migrated component's child `m0` to
/// `m0-renamed` (no change once renamed).
fn rename_m0() -> MigrationCallback {
    MigrationCallback::sync(|args: StateMigrationArgs| {
        let mut states = args.old_state;
        let Some(i) = states
            .iter()
            .position(|s| s["urn"].as_str().is_some_and(|u| u.ends_with("::m0")))
        else {
            return Ok(None);
        };
        let old = states[i]["urn"].as_str().unwrap_or_default().to_owned();
        let new = format!("{old}-renamed");
        states[i]["urn"] = serde_json::Value::String(new.clone());
        Ok(Some(StateMigrationResult {
            new_state: serde_json::Value::Array(states),
            successors: [(old, new)].into_iter().collect(),
        }))
    })
}

fn program(
    specs: Arc<Vec<Spec>>,
    pass: u32,
    change_others: bool,
) -> impl Fn(Context) -> BoxFuture<'static, Result<(), ProgramError>> + Send + Sync + 'static {
    move |ctx: Context| {
        let specs = specs.clone();
        async move {
            let mut futs: Vec<UrnFuture> = Vec::with_capacity(specs.len());
            for s in specs.iter() {
                let parent = s.parent.map(|p| futs[p].clone());
                let deps: Vec<UrnFuture> = s.deps.iter().map(|&d| futs[d].clone()).collect();
                let ctx = ctx.clone();
                let (mut name, ty, custom) = (s.name.clone(), s.ty, s.custom);
                let migrating = s.migrate_root && pass == 2;
                let in_migrated = s.parent.is_some_and(|p| specs[p].migrate_root);
                if in_migrated && pass == 2 && name == "m0" {
                    name = "m0-renamed".into();
                }
                let rev = if change_others && !in_migrated && !s.migrate_root {
                    pass
                } else {
                    1
                };
                let fut: BoxFuture<'static, Result<Urn, String>> = async move {
                    let mut options = ResourceOptions::default();
                    if migrating {
                        options.state_migrations = StateMigrations::new(vec![rename_m0()]);
                    }
                    if let Some(p) = parent {
                        options.parent = Some(p.await?);
                    }
                    for d in deps {
                        options.depends_on.push(d.await?);
                    }
                    // Built whole, as a program's decoded inputs are (one
                    // allocation of the exact size; inserting one by one
                    // would leave room for four).
                    let inputs: PropertyMap =
                        if custom {
                            let base = name.strip_suffix("-renamed").unwrap_or(&name).to_owned();
                            std::iter::once(("name".to_owned(), PropertyValue::String(base)))
                                .chain((rev > 1).then(|| {
                                    ("rev".to_owned(), PropertyValue::from(i64::from(rev)))
                                }))
                                .collect()
                        } else {
                            PropertyMap::new()
                        };
                    let goal = Goal {
                        ty: TypeToken::parse(ty).map_err(|e| e.to_string())?,
                        name,
                        custom,
                        inputs,
                        options,
                    };
                    ctx.register(goal)
                        .await
                        .map(|r| r.urn)
                        .map_err(|e| e.to_string())
                }
                .boxed();
                let shared = fut.shared();
                // Start every registration now; dependents wait on the shared future.
                tokio::spawn(shared.clone());
                futs.push(shared);
            }
            for f in futs {
                f.await?;
            }
            Ok(())
        }
        .boxed()
    }
}

/// Counts the bytes written to it.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn critical_path_ms(specs: &[Spec], latency: f64) -> f64 {
    let mut depth = vec![0.0f64; specs.len()];
    for (i, s) in specs.iter().enumerate() {
        let own = if s.custom { latency } else { 0.0 };
        let before = s
            .deps
            .iter()
            .chain(s.parent.iter())
            .map(|&d| depth[d])
            .fold(0.0, f64::max);
        depth[i] = before + own;
    }
    depth.into_iter().fold(0.0, f64::max)
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

async fn run(args: Args) -> Result<serde_json::Value, String> {
    let kind: Option<PersistenceKind> = match args.persistence.as_str() {
        "memory" => None,
        other => Some(other.parse()?),
    };
    if !matches!(
        args.operation.as_str(),
        "up" | "noop" | "load" | "migrate" | "cloud"
    ) {
        return Err(format!(
            "unknown --operation {} (up, noop, migrate, load, cloud)",
            args.operation
        ));
    }
    let specs = Arc::new(build(&args)?);
    let latency = Duration::from_secs_f64(args.latency_ms / 1000.0);
    let cloud = SimCloud::new(SimConfig {
        latency,
        record_calls: false,
        ..SimConfig::default()
    });
    let mut config = EngineConfig {
        project: "scale".into(),
        ..EngineConfig::default()
    };
    if let Some(p) = args.parallel {
        config.parallel = p;
    }
    config.pending_window = args.window;
    let parallel = config.parallel;
    if args.operation == "cloud" {
        return cloud_only(&args, &specs, cloud, parallel).await;
    }
    let engine = Engine::new(config, ProviderRegistry::simulated(cloud));
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let backend = Backend::new(dir.path());
    let mut state = Deployment::default();
    let mut engine_ms = 0.0;
    // The last pass as a user runs it: the stack's load, then the update.
    let mut pass_ms = 0.0;
    let mut makespan_ms = 0.0;
    let (mut bytes_written, mut fsyncs) = (0, 0);
    let mut provider_call_ms = 0.0;
    let passes = if matches!(args.operation.as_str(), "noop" | "migrate") {
        2
    } else {
        1
    };
    let (mut migrate_ms, mut quiesce_ms) = (0.0, 0.0);
    // With latency, the second pass of `migrate` also updates every other
    // resource, so their steps are in flight when the migration arrives.
    let change_others = args.operation == "migrate" && args.latency_ms > 0.0;
    for pass in 1..=passes {
        let opened = Instant::now();
        let (prior, persister, open): (Deployment, Box<dyn Persister>, _) = match kind {
            None => (state, Box::new(MemoryPersister::new()), None),
            Some(kind) => {
                let mut open = backend.open("scale", "scale").map_err(|e| e.to_string())?;
                let p = open
                    .persister(kind, JournalOptions::default())
                    .map_err(|e| e.to_string())?;
                // Moved out, as `keel up` does (a copy of 100,000 states
                // costs ~35 ms).
                (std::mem::take(&mut open.deployment), p, Some(open))
            }
        };
        let started = Instant::now();
        let outcome = engine
            .update(
                prior,
                program(specs.clone(), pass, change_others),
                persister,
            )
            .await
            .map_err(|e| e.to_string())?;
        engine_ms = started.elapsed().as_secs_f64() * 1000.0;
        pass_ms = opened.elapsed().as_secs_f64() * 1000.0;
        makespan_ms = outcome.summary.duration_ms;
        provider_call_ms = outcome.provider_call_ms;
        // The last pass's I/O (noop: the second update's).
        bytes_written = outcome.bytes_written;
        fsyncs = outcome.fsyncs;
        if let Some(m) = outcome.migrations.iter().find(|m| m.committed) {
            migrate_ms = m.migrate_ms;
            quiesce_ms = m.quiesce_ms;
        }
        if args.operation == "migrate"
            && pass == 2
            && !outcome.migrations.iter().any(|m| m.committed)
        {
            return Err(format!(
                "the migration did not commit: {:?}",
                outcome.migrations
            ));
        }
        state = outcome.snapshot;
        drop(open);
    }
    // The checkpoint's size, counted as it is encoded: holding the bytes
    // (tens of MB at 100k) would add the harness's own peak to the
    // engine's peak RSS. They are kept only where `load` reads them back.
    let checkpoint_bytes = {
        let mut counter = Counter(0);
        CheckpointFile::export_to_writer(&state, &BTreeMap::new(), &mut counter)
            .map_err(|e| e.to_string())?;
        counter.0
    };
    let bytes = if args.operation == "load" && kind.is_none() {
        CheckpointFile::export(state).to_vec()
    } else {
        drop(state);
        Vec::new()
    };
    let mut load_ms = 0.0;
    if args.operation == "load" {
        // Read + verify + replay the persisted stack, as an operation does.
        let started = Instant::now();
        // What was loaded is dropped after the clock stops: a load hands
        // it to the operation, which keeps it.
        if kind.is_some() {
            let loaded = backend.load("scale").map_err(|e| e.to_string())?;
            load_ms = started.elapsed().as_secs_f64() * 1000.0;
            drop(loaded);
        } else {
            let file = CheckpointFile::from_slice_verified(&bytes).map_err(|e| e.to_string())?;
            load_ms = started.elapsed().as_secs_f64() * 1000.0;
            drop(file);
        }
    }
    let customs = specs.iter().filter(|s| s.custom).count() as f64;
    let critical = critical_path_ms(&specs, args.latency_ms);
    let lower_bound = critical.max(customs * args.latency_ms / parallel as f64);
    // `wall_ms`: the measured pass as a user runs it, the stack's load
    // included (a no-op's load of 100,000 states is 140-165 ms);
    // `engine_ms`: the update alone. Neither counts the harness's own
    // work (the program's specs, the checkpoint's size).
    let (engine_ms, wall_ms) = if args.operation == "load" {
        (load_ms, load_ms)
    } else {
        (engine_ms, pass_ms)
    };
    Ok(serde_json::json!({
        "resources": args.resources,
        "shape": args.shape,
        "operation": args.operation,
        "parallel": parallel,
        "wall_ms": wall_ms,
        "engine_ms": engine_ms,
        "makespan_ms": makespan_ms,
        "critical_path_ms": critical,
        "lower_bound_ms": lower_bound,
        "bytes_written": bytes_written,
        "fsyncs": fsyncs,
        "checkpoint_bytes": checkpoint_bytes,
        "peak_rss_kb": peak_rss_kb(),
        "migrate_ms": migrate_ms,
        "quiesce_ms": quiesce_ms,
        // Not in performance.md's line: the calls as they took (the
        // simulated latency plus the wait for a busy machine to poll them
        // again), summed, and that over `parallel`: the bound those calls
        // allowed, beside `lower_bound_ms`, the one the configured latency
        // allows.
        "provider_call_ms": provider_call_ms,
        "call_bound_ms": provider_call_ms / parallel as f64,
    }))
}

/// `--operation cloud`: no engine, no program, no persistence. Every
/// custom's create is called straight on the simulated cloud, `parallel` at
/// a time through a semaphore, dependencies ignored (P3's lower bound is the
/// provider time over `parallel`, not the critical path). `makespan_ms` over
/// `lower_bound_ms` is then the floor this cloud and this machine leave an
/// engine with nothing else to do.
async fn cloud_only(
    args: &Args,
    specs: &[Spec],
    cloud: Arc<SimCloud>,
    parallel: usize,
) -> Result<serde_json::Value, String> {
    let provider = Arc::new(SimProvider::new(cloud, "sim"));
    let permits = Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let mut calls = tokio::task::JoinSet::new();
    let started = Instant::now();
    for s in specs.iter().filter(|s| s.custom) {
        let ty = TypeToken::parse(s.ty).map_err(|e| e.to_string())?;
        let urn = Urn::new("scale", "scale", None, &ty, &s.name).map_err(|e| e.to_string())?;
        let inputs: PropertyMap =
            std::iter::once(("name".to_owned(), PropertyValue::String(s.name.clone()))).collect();
        let (provider, permits) = (Arc::clone(&provider), Arc::clone(&permits));
        calls.spawn(async move {
            let _permit = permits.acquire_owned().await.map_err(|e| e.to_string())?;
            let call = Instant::now();
            provider
                .create(ResourceRequest::new(&urn, &ty, "", &inputs))
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(call.elapsed())
        });
    }
    let mut provider_time = Duration::ZERO;
    while let Some(done) = calls.join_next().await {
        provider_time += done.map_err(|e| e.to_string())??;
    }
    let makespan_ms = started.elapsed().as_secs_f64() * 1000.0;
    let customs = specs.iter().filter(|s| s.custom).count() as f64;
    let provider_call_ms = provider_time.as_secs_f64() * 1000.0;
    Ok(serde_json::json!({
        "resources": args.resources,
        "shape": args.shape,
        "operation": args.operation,
        "parallel": parallel,
        "wall_ms": makespan_ms,
        "engine_ms": 0.0,
        "makespan_ms": makespan_ms,
        "critical_path_ms": 0.0,
        "lower_bound_ms": customs * args.latency_ms / parallel as f64,
        "bytes_written": 0,
        "fsyncs": 0,
        "checkpoint_bytes": 0,
        "peak_rss_kb": peak_rss_kb(),
        "migrate_ms": 0.0,
        "quiesce_ms": 0.0,
        "provider_call_ms": provider_call_ms,
        "call_bound_ms": provider_call_ms / parallel as f64,
    }))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(line) => {
            let mut counts = BTreeMap::new();
            counts.insert("line", line);
            println!("{}", counts["line"]);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
