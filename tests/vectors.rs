//! Migration conformance vectors (`../shared/spec/vectors.md`): every
//! `*.json` in `$KEEL_VECTORS` (default `../shared/vectors`) runs through
//! the real engine — step generator, migration coordinator, persister on a
//! file backend — and each failing vector is reported by name. The runner
//! is written for the format, not for these files.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use keel::engine::{Engine, EngineConfig, EngineError, Outcome};
use keel::events::{EngineEvent, EventSink};
use keel::model::{Deployment, PropertyMap, State, TypeToken, Urn};
use keel::persist::backend::{write_base_with, Backend};
use keel::persist::checkpoint_file::CheckpointPersister;
use keel::persist::fs::IoCounters;
use keel::persist::journal_file::{JournalOptions, JournalPersister};
use keel::persist::{Ack, Mutation, Persister, SnapshotBuilder};
use keel::provider::{ProviderRegistry, SimCloud, SimConfig};
use keel::secrets::Crypter;
use keel::source::goal::{Alias, Goal, ReadGoal, ResourceOptions};
use keel::source::migration::{MigrationCallback, StateMigrationResult, StateMigrations};
use keel::UpdateOptions;
use keel::{Context, ProgramError};
use serde_json::{json, Value};

/// The shared vectors (`$KEEL_VECTORS`, default `../shared/vectors`) and
/// keel's own, in `tests/vectors/` (same format, for rules and persistence
/// modes the shared set does not exercise).
fn vector_dirs() -> [PathBuf; 2] {
    [
        std::env::var_os("KEEL_VECTORS")
            .map_or_else(|| PathBuf::from("../shared/vectors"), PathBuf::from),
        PathBuf::from("tests/vectors"),
    ]
}

/// What the persister wrapper saw of migrations.
#[derive(Debug, Default)]
struct Seen {
    migrations: usize,
    layout: Option<Value>,
    base_patches: Vec<usize>,
}

/// Wraps a persister: records migration writes (for `noop` and `journal`
/// expectations) and can declare that migrations are not supported.
struct Observed {
    inner: Box<dyn Persister>,
    supported: bool,
    seen: Arc<Mutex<Seen>>,
}

impl Persister for Observed {
    fn persist(&mut self, m: &Mutation, current: &mut SnapshotBuilder, ack: Ack) {
        let Mutation::Migration(mm) = m else {
            return self.inner.persist(m, current, ack);
        };
        if let Ok(record) = current.migration_record(mm) {
            let mut seen = self.seen.lock().unwrap();
            seen.layout = Some(serde_json::to_value(&record.layout).unwrap());
            seen.base_patches = record.base_state_patches.iter().map(|p| p.index).collect();
        }
        // Only a durable state-migration write counts as persisted.
        let seen = self.seen.clone();
        let counted: Ack = Box::new(move |r| {
            if r.is_ok() {
                seen.lock().unwrap().migrations += 1;
            }
            ack(r)
        });
        self.inner.persist(m, current, counted);
    }

    fn rebase(&mut self, current: &mut SnapshotBuilder) -> keel::persist::Result<()> {
        self.inner.rebase(current)
    }

    fn finish(&mut self, current: &mut SnapshotBuilder) -> keel::persist::Result<Deployment> {
        self.inner.finish(current)
    }

    fn supports_migrations(&self) -> bool {
        self.supported
    }
}

/// One registration of the program: a URN and how to register it.
#[derive(Debug, Clone)]
struct Entry {
    urn: Urn,
    read: bool,
    goal: Goal,
    id: String,
}

fn obj<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

fn urn(s: &str) -> Urn {
    Urn::parse(s).unwrap_or_else(|e| panic!("bad URN in vector: {e}"))
}

/// Builds a registration from a vector entry and the prior resources.
fn entry(v: &Value, prior: &[State], stack_urn: Option<&Urn>) -> Entry {
    let (target, read) = match (v.get("register").or_else(|| v.get("urn")), v.get("read")) {
        (Some(u), _) if u.is_string() => (urn(u.as_str().unwrap()), false),
        (_, Some(u)) => (urn(u.as_str().unwrap()), true),
        _ => panic!("an entry without a URN: {v}"),
    };
    let aliases: Vec<Urn> = v
        .get("aliases")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(urn).collect())
        .unwrap_or_default();
    // The resource the registration copies: its own, else its first alias's.
    let (source, via_alias) = match prior.iter().find(|s| s.urn == target) {
        Some(s) => (Some(s), false),
        None => (
            aliases
                .iter()
                .find_map(|a| prior.iter().find(|s| &s.urn == a)),
            true,
        ),
    };
    let ty = TypeToken::parse(target.type_str()).unwrap();
    let parent_of = |p: &Urn| -> Option<Urn> {
        // A parent from an alias's resource is kept only when it fits the
        // URN's type chain.
        let expected: Vec<&str> = target.parent_types().collect();
        let fits = expected.is_empty() && (p.type_str() == "pulumi:pulumi:Stack")
            || p.qualified_type() == expected.join("$");
        (!via_alias || fits).then(|| p.clone())
    };
    let mut options = ResourceOptions {
        aliases: aliases.iter().cloned().map(Alias::Urn).collect(),
        ..ResourceOptions::default()
    };
    let mut custom = false;
    let mut inputs = PropertyMap::new();
    let mut id = String::new();
    if let Some(s) = source {
        custom = s.custom;
        inputs = s.inputs.clone();
        id = s.id.clone();
        options.parent = s.parent().and_then(parent_of);
        options.depends_on = s.dependencies.clone();
        options.property_dependencies = s
            .property_dependencies
            .iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
            .collect();
        options.provider = (!s.provider.is_empty()).then(|| s.provider.to_string());
        options.protect = s.protect;
        options.retain_on_delete = s.retain_on_delete;
    }
    // Explicit fields win.
    if let Some(c) = obj(v, "custom").and_then(Value::as_bool) {
        custom = c;
    }
    if let Some(p) = obj(v, "parent").and_then(Value::as_str) {
        options.parent = Some(urn(p));
    }
    if let Some(p) = obj(v, "provider").and_then(Value::as_str) {
        options.provider = Some(p.to_owned());
    }
    if let Some(d) = obj(v, "dependencies").and_then(Value::as_array) {
        options.depends_on = d.iter().filter_map(Value::as_str).map(urn).collect();
    }
    if let Some(i) = obj(v, "inputs") {
        inputs = serde_json::from_value(i.clone()).unwrap();
    }
    if let Some(i) = obj(v, "id").and_then(Value::as_str) {
        id = i.to_owned();
    }
    // With no prior state and no parent, the parent is the stack resource.
    if source.is_none() && options.parent.is_none() && target.type_str() != "pulumi:pulumi:Stack" {
        options.parent = stack_urn.cloned();
    }
    if !custom {
        options.provider = None;
    }
    Entry {
        goal: Goal {
            ty,
            name: target.name().to_owned(),
            custom,
            inputs,
            options,
        },
        urn: target,
        read,
        id,
    }
}

/// Normalizes resources as `migrations.md` §4.3 does: decode, encode.
fn normalized(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|r| {
                    serde_json::from_value::<State>(r.clone())
                        .map_or_else(|_| r.clone(), |s| serde_json::to_value(s).unwrap())
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

struct Run {
    result: Result<Outcome, EngineError>,
    called: usize,
    input_mismatch: Vec<String>,
    events: usize,
    seen: Arc<Mutex<Seen>>,
    /// The persisted and live state just before the migrating registration
    /// (after `earlier`); `None` when the program never reached it.
    baseline: Option<Baseline>,
    /// The live prior list right after the migrating registration returned.
    live_after: Option<Value>,
    persisted_after: Value,
}

/// The state a rejected migration must leave as it was.
struct Baseline {
    persisted: Value,
    live: Value,
}

fn resources_json(d: &Deployment) -> Value {
    serde_json::to_value(&d.resources).unwrap()
}

async fn run(v: &Value) -> Run {
    let stack = v["stack"].as_str().unwrap_or("dev").to_owned();
    let project = v["project"].as_str().unwrap_or("app").to_owned();
    let mut prior: Deployment =
        serde_json::from_value(v["prior"].clone()).expect("prior deployment");
    prior.manifest = Default::default();
    let prior_states = prior.resources.clone();
    let stack_urn = prior_states
        .iter()
        .find(|s| s.ty.is_stack())
        .map(|s| s.urn.clone());

    // A file backend holding the prior state. A prior holding secrets gets
    // a passphrase, as keel stores no plaintext secret (its loads decrypt,
    // so what is compared is the vector's plaintext).
    let dir = tempfile::tempdir().unwrap();
    let passphrase = Crypter::has_plaintext(&prior).then(|| "vectors".to_owned());
    let backend = Backend::new(dir.path()).with_passphrase(passphrase.clone());
    let paths = backend.paths(&stack);
    std::fs::create_dir_all(&paths.dir).unwrap();
    let crypter = Crypter::for_stack(&prior.secrets_providers, passphrase.as_deref()).unwrap();
    write_base_with(&paths.base, &prior, 0, 0, &IoCounters::default(), &crypter)
        .expect("write the prior base");
    let open = backend.open(&stack, "vectors").expect("open the stack");
    let persistence = v["persistence"].as_str().unwrap_or("journal");
    let counters = open.counters().clone();
    let inner: Box<dyn Persister> = match persistence {
        "checkpoint" => Box::new(
            CheckpointPersister::new(open.paths.clone(), open.seq(), counters)
                .with_crypter(open.crypter.clone()),
        ),
        "failing" => Box::new(
            JournalPersister::open(
                open.paths.clone(),
                open.seq(),
                JournalOptions::default(),
                counters,
            )
            .unwrap()
            .with_crypter(open.crypter.clone())
            .fail_migrations(),
        ),
        _ => Box::new(
            JournalPersister::open(
                open.paths.clone(),
                open.seq(),
                JournalOptions::default(),
                counters,
            )
            .unwrap()
            .with_crypter(open.crypter.clone()),
        ),
    };
    let seen = Arc::new(Mutex::new(Seen::default()));
    let persister = Box::new(Observed {
        inner,
        supported: persistence != "unsupported",
        seen: seen.clone(),
    });

    // Options.
    let o = &v["options"];
    let urns = |k: &str| -> Vec<Urn> {
        o.get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(urn).collect())
            .unwrap_or_default()
    };
    let update = UpdateOptions {
        targets: urns("targets"),
        excludes: urns("excludes"),
        replaces: urns("replaces"),
        target_snippets: o
            .get("targetSnippets")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        generate_plan: o
            .get("generatePlan")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        apply_plan: o.get("applyPlan").and_then(Value::as_bool).unwrap_or(false),
        ..UpdateOptions::default()
    };

    // Canned callbacks.
    let called = Arc::new(AtomicUsize::new(0));
    let mismatches = Arc::new(Mutex::new(Vec::new()));
    let callbacks: Vec<MigrationCallback> = v["callbacks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, cb)| {
            let (called, mismatches) = (called.clone(), mismatches.clone());
            MigrationCallback::sync(move |args| {
                called.fetch_add(1, Ordering::SeqCst);
                if let Some(expect) = obj(&cb, "expectInput") {
                    let got = json!({"urn": args.urn, "oldState": normalized(&Value::Array(args.old_state.clone()))});
                    let want = json!({"urn": expect["urn"], "oldState": normalized(&expect["oldState"])});
                    if got != want {
                        mismatches
                            .lock()
                            .unwrap()
                            .push(format!("callback {} got input\n{got:#}\nexpected\n{want:#}", i + 1));
                    }
                }
                match cb.get("returns") {
                    None | Some(Value::Null) => Ok(None),
                    Some(r) if r.get("error").is_some() => {
                        Err(r["error"].as_str().unwrap_or("error").to_owned().into())
                    }
                    Some(r) => Ok(Some(StateMigrationResult {
                        new_state: r.get("newState").cloned().unwrap_or(Value::Null),
                        successors: r
                            .get("successors")
                            .and_then(|s| serde_json::from_value(s.clone()).ok())
                            .unwrap_or_default(),
                    })),
                }
            })
        })
        .collect();

    // The program (vectors.md "How the harness runs a vector").
    let mut plan: Vec<(Entry, bool)> = Vec::new();
    let stack_entry = stack_urn
        .as_ref()
        .map(|u| entry(&json!({"register": u}), &prior_states, None));
    for s in &prior_states {
        let top = s.parent().is_none_or(|p| Some(p) == stack_urn.as_ref());
        if s.ty.is_provider() && top {
            plan.push((
                entry(
                    &json!({"register": s.urn}),
                    &prior_states,
                    stack_urn.as_ref(),
                ),
                false,
            ));
        }
    }
    for e in v["earlier"].as_array().into_iter().flatten() {
        plan.push((entry(e, &prior_states, stack_urn.as_ref()), false));
    }
    let mut reg = entry(&v["register"], &prior_states, stack_urn.as_ref());
    reg.goal.options.state_migrations = StateMigrations::new(callbacks);
    plan.push((reg, true));
    for e in v["later"].as_array().into_iter().flatten() {
        plan.push((entry(e, &prior_states, stack_urn.as_ref()), false));
    }
    let operation = v["operation"].as_str().unwrap_or("update").to_owned();
    let final_pass = matches!(operation.as_str(), "update" | "preview");
    let plan = Arc::new(plan);
    let baseline: Arc<Mutex<Option<Baseline>>> = Arc::default();
    let live_after: Arc<Mutex<Option<Value>>> = Arc::default();
    let program = {
        let plan = plan.clone();
        let (baseline, live_after) = (baseline.clone(), live_after.clone());
        let (root, stack_name) = (dir.path().to_path_buf(), stack.clone());
        let passphrase = passphrase.clone();
        move |ctx: Context| {
            let plan = plan.clone();
            let passphrase = passphrase.clone();
            let (baseline, live_after) = (baseline.clone(), live_after.clone());
            let (root, stack_name) = (root.clone(), stack_name.clone());
            async move {
                let mut registered: HashSet<Urn> = HashSet::new();
                if let Some(stack) = ctx.prior_states().iter().find(|s| s.ty.is_stack()) {
                    registered.insert(stack.urn.clone());
                }
                for (e, migrating) in plan.iter() {
                    if *migrating {
                        // "No change from the migration" is judged against
                        // the state as it stands now, after `earlier`. A
                        // registration answers once its end record is
                        // queued, not once it is durable, so wait until no
                        // operation of `earlier` is still pending on disk.
                        let backend = Backend::new(&root).with_passphrase(passphrase.clone());
                        let stack = stack_name.clone();
                        let earlier: HashSet<Urn> = registered.clone();
                        let persisted = tokio::task::spawn_blocking(move || {
                            let deadline =
                                std::time::Instant::now() + std::time::Duration::from_secs(120);
                            loop {
                                let d = backend.load(&stack).expect("load mid-run").deployment;
                                let settled = !d
                                    .pending_operations
                                    .iter()
                                    .any(|p| earlier.contains(&p.resource.urn))
                                    && earlier
                                        .iter()
                                        .all(|u| d.resources.iter().any(|s| &s.urn == u));
                                if settled || std::time::Instant::now() > deadline {
                                    break resources_json(&d);
                                }
                                std::thread::sleep(std::time::Duration::from_millis(5));
                            }
                        })
                        .await
                        .expect("load task");
                        *baseline.lock().unwrap() = Some(Baseline {
                            persisted,
                            live: serde_json::to_value(ctx.prior_states()).unwrap(),
                        });
                        let result = ctx.register(e.goal.clone()).await;
                        *live_after.lock().unwrap() =
                            Some(serde_json::to_value(ctx.prior_states()).unwrap());
                        result?;
                        registered.insert(e.urn.clone());
                        continue;
                    }
                    if e.read {
                        ctx.read(ReadGoal {
                            ty: e.goal.ty.clone(),
                            name: e.goal.name.clone(),
                            id: e.id.clone(),
                            inputs: e.goal.inputs.clone(),
                            parent: e.goal.options.parent.clone(),
                            provider: e.goal.options.provider.clone(),
                            depends_on: e.goal.options.depends_on.clone(),
                            additional_secret_outputs: Vec::new(),
                            version: None,
                            plugin_download_url: None,
                            ..ReadGoal::default()
                        })
                        .await?;
                    } else {
                        ctx.register(e.goal.clone()).await?;
                    }
                    registered.insert(e.urn.clone());
                }
                if final_pass {
                    let committed = ctx.prior_states();
                    for s in committed
                        .iter()
                        .filter(|s| !s.delete && !registered.contains(&s.urn))
                    {
                        let e = entry(&json!({"register": s.urn}), &committed, Some(ctx.root()));
                        ctx.register(e.goal).await?;
                    }
                }
                Ok::<(), ProgramError>(())
            }
        }
    };
    drop(stack_entry);

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let config = EngineConfig {
        stack: stack.clone(),
        project,
        events: EventSink::new(tx),
        update,
        report_migration_states: true,
        ..EngineConfig::default()
    };
    let engine = Engine::new(
        config,
        // A provider that cannot look objects up by URN, as Pulumi's
        // plugins cannot: a vector's pending operations are ones recovery
        // cannot resolve, so they restrict migrations (`pending-operations`).
        ProviderRegistry::simulated(SimCloud::new(SimConfig {
            lookup: false,
            ..SimConfig::default()
        })),
    );
    let result = match operation.as_str() {
        "update" => {
            engine
                .update(open.deployment.clone(), program, persister)
                .await
        }
        "preview" => engine.preview(open.deployment.clone(), program).await,
        "refresh" => engine.refresh(open.deployment.clone(), persister).await,
        "destroy" => engine.destroy(open.deployment.clone(), persister).await,
        other => panic!("unknown operation {other}"),
    };
    drop(open);
    let mut events = 0;
    while let Ok(e) = rx.try_recv() {
        if matches!(e, EngineEvent::Migration { .. }) {
            events += 1;
        }
    }
    let persisted_after = resources_json(&backend.load(&stack).unwrap().deployment);
    let baseline = baseline.lock().unwrap().take();
    let live_after = live_after.lock().unwrap().take();
    let input_mismatch = mismatches.lock().unwrap().clone();
    Run {
        result,
        called: called.load(Ordering::SeqCst),
        input_mismatch,
        events,
        seen,
        baseline,
        live_after,
        persisted_after,
    }
}

/// Runs one vector and returns what failed.
fn check(name: &str, v: &Value) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(run(v));
    let mut fails = r.input_mismatch.clone();
    let expect = &v["expect"];
    let outcome = match &r.result {
        Ok(o) => Some(o.as_ref_outcome()),
        Err(EngineError::Failed(o)) => Some(o.as_ref()),
        Err(e) => {
            fails.push(format!("the engine failed internally: {e}"));
            None
        }
    };
    let Some(outcome) = outcome else { return fails };
    let report = outcome
        .migrations
        .iter()
        .find(|m| m.committed)
        .or(outcome.migrations.first());

    match obj(expect, "rule").and_then(Value::as_str) {
        Some(rule) => {
            if !outcome.summary.rules.iter().any(|r| r.as_str() == rule) {
                fails.push(format!(
                    "expected rule `{rule}`, got rules {:?} (errors {:?}, failures {:?})",
                    outcome.summary.rules, outcome.summary.errors, outcome.summary.failures
                ));
            }
            let from_registration = rule != "predecessor-reused";
            if from_registration {
                if r.events != 0 {
                    fails.push(format!("a rejected migration emitted {} events", r.events));
                }
                if r.seen.lock().unwrap().migrations != 0 {
                    fails.push("a rejected migration was persisted".into());
                }
                match &r.baseline {
                    None => {
                        fails.push("the program never reached the migrating registration".into())
                    }
                    Some(b) => {
                        if r.persisted_after != b.persisted {
                            fails.push(format!(
                                "the persisted state changed after a rejected migration:\n  before {}\n  after  {}",
                                b.persisted, r.persisted_after
                            ));
                        }
                        if r.live_after.as_ref() != Some(&b.live) {
                            fails.push(format!(
                                "the live prior state changed after a rejected migration:\n  before {}\n  after  {:?}",
                                b.live, r.live_after
                            ));
                        }
                    }
                }
            }
        }
        None => {
            if !outcome.summary.succeeded() {
                fails.push(format!(
                    "expected success, got {:?} {:?} {:?}",
                    outcome.summary.rules, outcome.summary.errors, outcome.summary.failures
                ));
            }
        }
    }
    if obj(expect, "noop").and_then(Value::as_bool) == Some(true) {
        if r.seen.lock().unwrap().migrations != 0 {
            fails.push("a no-op wrote a state-migration".into());
        }
        if r.events != 0 {
            fails.push("a no-op emitted a migration event".into());
        }
    }
    if let Some(want) = obj(expect, "callbacksCalled").and_then(Value::as_u64) {
        if r.called as u64 != want {
            fails.push(format!(
                "callbacksCalled: expected {want}, got {}",
                r.called
            ));
        }
    }
    if let Some(want) = obj(expect, "events").and_then(Value::as_u64) {
        if r.events as u64 != want {
            fails.push(format!("events: expected {want}, got {}", r.events));
        }
    }
    if let Some(want) = obj(expect, "prior") {
        let got: Vec<String> = report
            .map(|m| m.prior.iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        let want: Vec<String> = serde_json::from_value(want.clone()).unwrap();
        if got != want {
            fails.push(format!(
                "prior after commit:\n  got  {got:?}\n  want {want:?}"
            ));
        }
    }
    if let Some(want) = obj(expect, "successors") {
        let got: BTreeMap<String, String> = report
            .map(|m| {
                m.successors
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let want: BTreeMap<String, String> = serde_json::from_value(want.clone()).unwrap();
        if got != want {
            fails.push(format!("successors: got {got:?}, want {want:?}"));
        }
    }
    if let Some(want) = obj(expect, "resources").and_then(Value::as_object) {
        let states = report
            .and_then(|m| m.prior_states.clone())
            .unwrap_or_default();
        for (u, fields) in want {
            let found = states.iter().find(|s| s.urn.as_str() == u);
            let absent = fields.get("absent").and_then(Value::as_bool) == Some(true);
            match (found, absent) {
                (Some(_), true) => fails.push(format!("{u} should be absent")),
                (None, false) => fails.push(format!("{u} is missing")),
                (None, true) => {}
                (Some(s), false) => {
                    let got = serde_json::to_value(s).unwrap();
                    for (k, want) in fields.as_object().unwrap() {
                        let g = got.get(k).cloned().unwrap_or(Value::Null);
                        if &g != want {
                            fails.push(format!("{u}: `{k}` is {g}, want {want}"));
                        }
                    }
                }
            }
        }
    }
    if let Some(want) = obj(expect, "journal") {
        let seen = r.seen.lock().unwrap();
        if let Some(layout) = want.get("layout") {
            if seen.layout.as_ref() != Some(layout) {
                fails.push(format!(
                    "journal layout: got {:?}, want {layout}",
                    seen.layout
                ));
            }
        }
        if let Some(p) = want.get("baseStatePatches") {
            let p: Vec<usize> = serde_json::from_value(p.clone()).unwrap();
            if seen.base_patches != p {
                fails.push(format!(
                    "journal base patches: got {:?}, want {p:?}",
                    seen.base_patches
                ));
            }
        }
    }
    if !fails.is_empty() {
        fails.insert(0, format!("vector {name}:"));
    }
    fails
}

trait AsRefOutcome {
    fn as_ref_outcome(&self) -> &Outcome;
}

impl AsRefOutcome for Outcome {
    fn as_ref_outcome(&self) -> &Outcome {
        self
    }
}

#[test]
fn every_vector_passes_through_the_engine() {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in vector_dirs() {
        let mut here: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        assert!(!here.is_empty(), "no vectors in {}", dir.display());
        here.sort();
        files.extend(here);
    }
    let mut failures = Vec::new();
    for f in &files {
        let v: Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        let name = v["name"]
            .as_str()
            .map_or_else(|| f.display().to_string(), str::to_owned);
        failures.extend(check(&name, &v));
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed:\n{}",
        failures.iter().filter(|l| l.starts_with("vector ")).count(),
        files.len(),
        failures.join("\n")
    );
}
