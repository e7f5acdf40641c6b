//! Component state migrations end to end, through the real engine and the
//! simulated cloud (not vectors): the rename, fold and split walk-throughs
//! with zero creates and deletes, a migration while other steps are in
//! flight, nested components, idempotency, a failure after the migration was
//! persisted, preview, and persistence (replay, malformed entries).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use keel::engine::{Engine, EngineConfig, EngineError, Outcome};
use keel::events::{EngineEvent, EventSink};
use keel::model::{Deployment, State};
use keel::persist::backend::{Backend, PersistenceKind};
use keel::persist::journal_file::JournalOptions;
use keel::persist::{Ack, Mutation, PersistError, Persister, SnapshotBuilder};
use keel::provider::{ProviderRegistry, SimCloud, SimConfig};
use keel::source::migration::{
    MigrationCallback, StateMigrationArgs, StateMigrationResult, StateMigrations,
};
use serde_json::{json, Value};

const LEAF: &str = "aws:s3/bucket:Bucket";

/// A callback that renames a descendant named `from` to `to` (no change
/// once it is gone: idempotent), rewriting parents that point at it.
fn rename(from: &'static str, to: &'static str) -> MigrationCallback {
    MigrationCallback::sync(move |args: StateMigrationArgs| {
        let mut states = args.old_state.clone();
        let Some(old) = states
            .iter()
            .find(|s| name_of(s) == from)
            .map(|s| s["urn"].as_str().unwrap().to_owned())
        else {
            return Ok(None);
        };
        let new = format!("{}::{to}", old.rsplit_once("::").unwrap().0);
        for s in &mut states {
            if s["urn"] == old.as_str() {
                s["urn"] = json!(new);
            }
            if s["parent"] == old.as_str() {
                s["parent"] = json!(new);
            }
        }
        Ok(Some(StateMigrationResult {
            new_state: Value::Array(states),
            successors: [(old, new)].into_iter().collect(),
        }))
    })
}

fn name_of(s: &Value) -> &str {
    s["urn"]
        .as_str()
        .and_then(|u| u.rsplit("::").next())
        .unwrap_or("")
}

fn migrating(r: Res, callbacks: Vec<MigrationCallback>) -> Res {
    r.with(move |o| o.state_migrations = StateMigrations::new(callbacks))
}

fn creates_deletes(h: &Harness) -> (u64, u64) {
    let c = h.cloud.counters();
    (c.creates, c.deletes)
}

fn committed(o: &Outcome) -> usize {
    o.migrations.iter().filter(|m| m.committed).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_walkthrough_replaces_nothing() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        component("app"),
        bucket("old", &[("k", "v")])
            .parent("app")
            .with(|o| o.protect = true),
    ])
    .await
    .unwrap();
    let id = h.state_of("old").id.clone();
    let before = creates_deletes(&h);
    let v2 = vec![
        migrating(component("app"), vec![rename("old", "new")]),
        bucket("new", &[("k", "v")])
            .parent("app")
            .with(|o| o.protect = true),
    ];
    let o = h.up(v2.clone()).await.unwrap();
    assert_eq!(committed(&o), 1, "{:?}", o.migrations);
    assert_eq!(
        creates_deletes(&h),
        before,
        "no physical resource was created or deleted"
    );
    let s = h.state_of("new");
    assert_eq!((s.id.as_str(), s.protect), (id.as_str(), true));
    assert!(!h.names().contains(&"old".to_owned()));
    // The same callbacks again: a no-op (idempotent), nothing committed.
    let o = h.up(v2).await.unwrap();
    assert_eq!(committed(&o), 0);
    assert_eq!(o.migrations[0].callbacks_called, 1);
    assert_eq!(creates_deletes(&h), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_an_interrupted_run_left_pending_do_not_block_the_next_migration() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        component("app"),
        bucket("old", &[("k", "v")]).parent("app"),
    ])
    .await
    .unwrap();
    // A run killed during a create left it pending (its object never made).
    h.state.pending_operations = vec![pending_create_like(&h, "old", "lost")];
    // Recovery resolves it first: the migration sees no pending operation.
    let o = h
        .up(vec![
            migrating(component("app"), vec![rename("old", "new")]),
            bucket("new", &[("k", "v")]).parent("app"),
        ])
        .await
        .unwrap_or_else(|e| panic!("the first update after the crash failed: {e}"));
    assert_eq!(committed(&o), 1, "{:?}", o.migrations);
    assert!(h.state.pending_operations.is_empty());
    assert_eq!(h.cloud.objects().len(), 1);
}

/// An interrupted create of `name`, shaped like `like` (no ID yet).
fn pending_create_like(
    h: &Harness,
    like: &str,
    name: &str,
) -> keel::model::snapshot::PendingOperation {
    let mut lost = h.state_of(like).clone();
    let urn = h
        .urn(like)
        .as_str()
        .replace(&format!("::{like}"), &format!("::{name}"));
    lost.urn = keel::model::Urn::parse(&urn).unwrap();
    lost.id = String::new();
    let mut p = keel::model::snapshot::PendingOperation::default();
    p.resource = lost;
    p.ty = keel::model::snapshot::OperationType::Creating;
    p
}

/// A provider that cannot look objects up by URN (as a Pulumi plugin
/// cannot) leaves an interrupted create unresolved: it stays pending
/// through updates and refreshes (its object may exist; clearing it would
/// orphan it), keeps restricting migrations, and only `refresh
/// --clear-pending-creates` clears it, as in Pulumi.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_the_provider_cannot_look_up_stays_pending_until_cleared() {
    let mut h = Harness::new(SimConfig {
        lookup: false,
        ..SimConfig::default()
    });
    h.up(vec![
        component("app"),
        bucket("old", &[("k", "v")]).parent("app"),
    ])
    .await
    .unwrap();
    h.state.pending_operations = vec![pending_create_like(&h, "old", "lost")];
    let program = || {
        vec![
            migrating(component("app"), vec![rename("old", "new")]),
            bucket("new", &[("k", "v")]).parent("app"),
        ]
    };
    let o = failed(h.up(program()).await);
    assert_eq!(
        o.summary.rules,
        vec![keel::migrate::Rule::PendingOperations]
    );
    assert_eq!(
        h.state.pending_operations.len(),
        1,
        "kept through the update"
    );
    h.refresh().await.unwrap();
    assert_eq!(h.state.pending_operations.len(), 1, "kept by a refresh");
    h.refresh_with(keel::UpdateOptions {
        clear_pending_creates: true,
        ..keel::UpdateOptions::default()
    })
    .await
    .unwrap();
    assert!(
        h.state.pending_operations.is_empty(),
        "--clear-pending-creates clears it"
    );
    let o = h.up(program()).await.unwrap();
    assert_eq!(committed(&o), 1, "{:?}", o.migrations);
}

/// `refresh --import-pending-creates URN ID`: the operator names the object
/// an interrupted create made; it is read by that ID and adopted, so the
/// object is owned by exactly one state. A wrong ID keeps the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_create_is_imported_by_the_id_the_operator_gives() {
    let mut h = Harness::new(SimConfig {
        lookup: false,
        ..SimConfig::default()
    });
    h.up(vec![bucket("made", &[("k", "v")])]).await.unwrap();
    // As if the create of `made` was interrupted after the object was made.
    let id = h.state_of("made").id.clone();
    let urn = h.urn("made").clone();
    let mut op = pending_create_like(&h, "made", "made");
    op.resource.id = String::new();
    h.state.resources.retain(|r| r.urn != urn);
    h.state.pending_operations = vec![op];
    // Creating it again could make a second object: refused until resolved.
    let r = h.up(vec![bucket("made", &[("k", "v")])]).await;
    let Err(keel::EngineError::Failed(o)) = r else {
        panic!("the update is refused: {r:?}");
    };
    let text = format!("{:?}", o.summary);
    assert!(text.contains("--import-pending-creates"), "{text}");
    assert_eq!(h.cloud.objects().len(), 1, "nothing made twice");
    assert_eq!(h.state.pending_operations.len(), 1);
    let import = |id: &str| keel::UpdateOptions {
        import_pending_creates: vec![(urn.clone(), id.to_owned())],
        ..keel::UpdateOptions::default()
    };
    h.refresh_with(import("no-such-id")).await.unwrap();
    assert_eq!(h.state.pending_operations.len(), 1, "a wrong ID keeps it");
    h.refresh_with(import(&id)).await.unwrap();
    assert!(h.state.pending_operations.is_empty());
    assert_eq!(h.state_of("made").id, id, "adopted");
    assert_eq!(h.cloud.objects().len(), 1);
    // The next update knows it: nothing is created again.
    let o = h.up(vec![bucket("made", &[("k", "v")])]).await.unwrap();
    assert_eq!(
        o.summary.count(keel::StepKind::Create),
        0,
        "{:?}",
        o.summary
    );
    assert_eq!(h.cloud.objects().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fold_walkthrough_maps_two_children_onto_one() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        component("app"),
        bucket("a", &[("k", "v")]).parent("app"),
        component("grp").parent("app"),
    ])
    .await
    .unwrap();
    let id = h.state_of("a").id.clone();
    let before = creates_deletes(&h);
    let fold = MigrationCallback::sync(|args: StateMigrationArgs| {
        let (mut root, mut a) = (None, None);
        let mut grp = None;
        for s in &args.old_state {
            match name_of(s) {
                "app" => root = Some(s.clone()),
                "a" => a = Some(s.clone()),
                "grp" => grp = Some(s.clone()),
                _ => {}
            }
        }
        let (Some(root), Some(mut a), Some(grp)) = (root, a, grp) else {
            return Ok(None);
        };
        let old_a = a["urn"].as_str().unwrap().to_owned();
        let c = format!("{}::c", old_a.rsplit_once("::").unwrap().0);
        a["urn"] = json!(c);
        Ok(Some(StateMigrationResult {
            new_state: json!([root, a]),
            successors: [
                (old_a, c.clone()),
                (grp["urn"].as_str().unwrap().to_owned(), c),
            ]
            .into_iter()
            .collect(),
        }))
    });
    let o = h
        .up(vec![
            migrating(component("app"), vec![fold]),
            bucket("c", &[("k", "v")]).parent("app"),
        ])
        .await
        .unwrap();
    assert_eq!(committed(&o), 1, "{:?}", o.summary);
    assert_eq!(o.migrations[0].successors.len(), 2);
    assert_eq!(creates_deletes(&h), before);
    assert_eq!(h.state_of("c").id, id);
    assert!(!h.names().iter().any(|n| n == "a" || n == "grp"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_walkthrough_extracts_settings_with_the_same_physical_id() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        component("app"),
        bucket("site", &[("name", "s"), ("index", "index.html")]).parent("app"),
    ])
    .await
    .unwrap();
    let id = h.state_of("site").id.clone();
    let before = creates_deletes(&h);
    let split = MigrationCallback::sync(|args: StateMigrationArgs| {
        let mut states = args.old_state.clone();
        if states.iter().any(|s| name_of(s) == "settings") {
            return Ok(None);
        }
        let site = states
            .iter_mut()
            .find(|s| name_of(s) == "site")
            .ok_or("no site")?;
        let index = site["inputs"]["index"].clone();
        site["inputs"].as_object_mut().unwrap().remove("index");
        site["outputs"].as_object_mut().unwrap().remove("index");
        let mut settings = site.clone();
        let site_urn = site["urn"].as_str().unwrap().to_owned();
        let prefix = site_urn.rsplit_once("$").unwrap().0.to_owned();
        settings["urn"] = json!(format!(
            "{prefix}$aws:s3/bucketWebsite:BucketWebsite::settings"
        ));
        settings["type"] = json!("aws:s3/bucketWebsite:BucketWebsite");
        settings["inputs"] = json!({"index": index});
        settings["outputs"] = json!({"index": index});
        states.push(settings);
        Ok(Some(StateMigrationResult {
            new_state: Value::Array(states),
            successors: Default::default(),
        }))
    });
    let o = h
        .up(vec![
            migrating(component("app"), vec![split]),
            bucket("site", &[("name", "s")]).parent("app"),
            bucket("settings", &[("index", "index.html")])
                .ty("aws:s3/bucketWebsite:BucketWebsite")
                .parent("app"),
        ])
        .await
        .unwrap();
    assert_eq!(committed(&o), 1, "{:?}", o.summary);
    assert_eq!(creates_deletes(&h), before, "the split created nothing");
    assert_eq!(h.state_of("settings").id, id);
    assert_eq!(h.state_of("site").id, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_waits_for_steps_in_flight_and_work_resumes_after() {
    let mut h = Harness::new(SimConfig {
        latency: Duration::from_millis(60),
        ..SimConfig::default()
    });
    let xs = |v: &str| -> Vec<Res> {
        (0..6)
            .map(|i| bucket(&format!("x{i}"), &[("v", v)]))
            .collect()
    };
    let mut v1 = vec![component("app"), bucket("old", &[]).parent("app")];
    v1.extend(xs("1"));
    h.up(v1).await.unwrap();

    // The callback records what it sees of the cloud: nothing in flight,
    // and every update submitted before the migration already done.
    let seen_in_flight = Arc::new(AtomicU64::new(u64::MAX));
    let seen_updates = Arc::new(AtomicU64::new(0));
    let (cloud, f, u) = (
        h.cloud.clone(),
        seen_in_flight.clone(),
        seen_updates.clone(),
    );
    let observe = MigrationCallback::sync(move |_| {
        let c = cloud.counters();
        f.store(c.in_flight, Ordering::SeqCst);
        u.store(c.updates, Ordering::SeqCst);
        Ok(None)
    });
    // The x updates register first (independent), then the migrating
    // component, then a resource created after the migration.
    let mut v2 = xs("2");
    v2.push(migrating(component("app"), vec![observe, rename("old", "new")]).dep("x5"));
    v2.push(bucket("new", &[]).parent("app"));
    v2.push(bucket("after", &[]).dep("new"));
    let o = h.up(v2).await.unwrap();
    assert_eq!(committed(&o), 1);
    assert_eq!(
        seen_in_flight.load(Ordering::SeqCst),
        0,
        "no step ran during the callbacks"
    );
    assert_eq!(
        seen_updates.load(Ordering::SeqCst),
        6,
        "the quiesce waited for the updates in flight"
    );
    assert!(
        h.names().contains(&"after".to_owned()),
        "steps resumed after the migration"
    );
    assert_eq!(h.cloud.counters().creates, 8, "7 in v1, `after` in v2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_components_migrate_outer_then_inner() {
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        component("outer"),
        component("inner").parent("outer"),
        bucket("leaf", &[]).parent("inner"),
    ])
    .await
    .unwrap();
    let id = h.state_of("leaf").id.clone();
    let before = creates_deletes(&h);
    let o = h
        .up(vec![
            migrating(component("outer"), vec![rename("inner", "inner2")]),
            migrating(
                component("inner2").parent("outer"),
                vec![rename("leaf", "leaf2")],
            ),
            bucket("leaf2", &[]).parent("inner2"),
        ])
        .await
        .unwrap();
    assert_eq!(committed(&o), 2, "{:?}", o.migrations);
    assert_eq!(creates_deletes(&h), before);
    assert_eq!(h.state_of("leaf2").id, id);
    assert_eq!(h.state_of("leaf2").parent, h.urn("inner2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_reports_the_migration_and_persists_nothing() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut h = Harness::with(SimConfig::default(), |c| c.events = EventSink::new(tx));
    h.up(vec![component("app"), bucket("old", &[]).parent("app")])
        .await
        .unwrap();
    while rx.try_recv().is_ok() {}
    let state = h.state.clone();
    let o = h
        .preview(vec![
            migrating(component("app"), vec![rename("old", "new")]),
            bucket("new", &[]).parent("app"),
        ])
        .await
        .unwrap();
    assert_eq!(committed(&o), 1, "committed in memory");
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    let migration = events.iter().find_map(|e| match e {
        EngineEvent::Migration { successors, .. } => Some(successors.clone()),
        _ => None,
    });
    assert_eq!(
        migration.map(|m| m.len()),
        Some(1),
        "the preview emits the migration event"
    );
    assert_eq!(h.state, state, "nothing persisted");
    assert_eq!(
        o.summary.count(keel::StepKind::Create),
        0,
        "the preview plans no create"
    );
}

/// A persister that fails every save after the first migration was
/// persisted: the process "dies" right after the migration is durable.
struct DiesAfterMigration {
    inner: Box<dyn Persister>,
    migrated: bool,
}

impl Persister for DiesAfterMigration {
    fn persist(&mut self, m: &Mutation, current: &mut SnapshotBuilder, ack: Ack) {
        if self.migrated {
            return ack(Err(PersistError::Injected(0)));
        }
        self.migrated = matches!(m, Mutation::Migration(_));
        self.inner.persist(m, current, ack);
    }

    fn finish(&mut self, current: &mut SnapshotBuilder) -> keel::persist::Result<Deployment> {
        if self.migrated {
            return Err(PersistError::Injected(0));
        }
        self.inner.finish(current)
    }
}

/// An engine on `cloud` that reports each committed migration's prior list.
fn reporting_engine(cloud: &Arc<SimCloud>) -> Engine {
    Engine::new(
        EngineConfig {
            project: "proj".into(),
            report_migration_states: true,
            ..EngineConfig::default()
        },
        ProviderRegistry::simulated(cloud.clone()),
    )
}

/// One update of `resources` on stack `dev` of `backend`, journaled.
async fn journal_update(
    engine: &Engine,
    backend: &Backend,
    resources: Vec<Res>,
) -> Result<Outcome, EngineError> {
    let open = backend.open("dev", "test").unwrap();
    let p = open
        .persister(PersistenceKind::Journal, JournalOptions::default())
        .unwrap();
    engine
        .update(open.deployment.clone(), program(resources), p)
        .await
}

fn by_urn(states: &[State]) -> std::collections::BTreeMap<String, Value> {
    states
        .iter()
        .map(|s| (s.urn.to_string(), serde_json::to_value(s).unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persisted_migration_replays_exactly_and_survives_a_later_failure() {
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud = SimCloud::new(SimConfig::default());
        let engine = reporting_engine(&cloud);
        let v1 = vec![
            component("app"),
            bucket("old", &[]).parent("app"),
            bucket("consumer", &[]).dep("old"),
        ];
        let open = backend.open("dev", "test").unwrap();
        let p = open.persister(kind, JournalOptions::default()).unwrap();
        engine
            .update(open.deployment.clone(), program(v1), p)
            .await
            .unwrap();
        drop(open);

        // v2 migrates, then dies: the migration stays persisted.
        let v2 = vec![
            migrating(component("app"), vec![rename("old", "new")]),
            bucket("new", &[]).parent("app"),
            bucket("consumer", &[]).dep("new"),
        ];
        let open = backend.open("dev", "test").unwrap();
        let p = Box::new(DiesAfterMigration {
            inner: open.persister(kind, JournalOptions::default()).unwrap(),
            migrated: false,
        });
        let failed = match engine
            .update(open.deployment.clone(), program(v2.clone()), p)
            .await
        {
            Err(EngineError::Failed(o)) => o,
            other => panic!("{kind:?}: expected a failure, got {other:?}"),
        };
        drop(open);
        let prepared = failed.migrations[0]
            .prior_states
            .clone()
            .expect("the committed prior list");
        let replayed = backend.load("dev").unwrap().deployment;
        assert_eq!(
            by_urn(&replayed.resources),
            by_urn(&prepared),
            "{kind:?}: replay reproduces the prepared prior list"
        );
        let consumer = replayed
            .resources
            .iter()
            .find(|s| s.urn.name() == "consumer")
            .unwrap();
        assert!(
            consumer.dependencies[0].as_str().ends_with("::new"),
            "{kind:?}: references follow"
        );

        // The next update converges (the migration is a no-op now).
        let open = backend.open("dev", "test").unwrap();
        let p = open.persister(kind, JournalOptions::default()).unwrap();
        let o = engine
            .update(open.deployment.clone(), program(v2), p)
            .await
            .unwrap();
        assert_eq!(committed(&o), 0, "{kind:?}");
        assert_eq!(cloud.counters().creates, 2, "{kind:?}: nothing re-created");
        assert_eq!(cloud.counters().deletes, 0, "{kind:?}");
    }
}

#[test]
fn a_malformed_state_migration_entry_is_refused_and_changes_nothing() {
    use keel::persist::journal::{encode, Entry};
    use keel::persist::migration::{LayoutItem, MigrationRecord};
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let paths = backend.paths("dev");
    std::fs::create_dir_all(&paths.dir).unwrap();
    let mut base = Deployment::default();
    for name in ["a", "b"] {
        let ty = ty(LEAF);
        let mut s = State::new(
            keel::model::Urn::derive("dev", "proj", None, &ty, name).unwrap(),
            ty,
            true,
        );
        s.id = format!("{name}-id");
        base.resources.push(s);
    }
    keel::persist::backend::write_base(&paths.base, &base, 0, 0, &Default::default()).unwrap();
    for bad in [
        vec![LayoutItem::Base(0), LayoutItem::Base(7)],
        vec![LayoutItem::Base(0), LayoutItem::Base(0)],
        vec![LayoutItem::State(3)],
    ] {
        let entry = Entry::StateMigration {
            seq: 1,
            op: 0,
            record: Box::new(MigrationRecord {
                layout: bad.clone(),
                states: vec![],
                base_state_patches: vec![],
                new_state_patches: vec![],
            }),
        };
        std::fs::write(&paths.journal, encode(&entry)).unwrap();
        let e = backend.load("dev").unwrap_err().to_string();
        assert!(
            e.contains("cannot be replayed") && e.contains("offset 0"),
            "{bad:?}: {e}"
        );
        // Replaying onto a builder directly leaves it unchanged.
        let mut d = base.clone();
        let olds = SnapshotBuilder::share_resources(&mut d);
        let mut builder = SnapshotBuilder::new(d, olds);
        let before = serde_json::to_value(builder.snapshot().resources).unwrap();
        let Entry::StateMigration { record, .. } = &entry else {
            unreachable!()
        };
        assert!(builder.replay_migration(record).is_err());
        assert_eq!(
            serde_json::to_value(builder.snapshot().resources).unwrap(),
            before
        );
    }
}

/// After a migration commits, what the program still says with the
/// predecessor's URN follows the successor (`migrations.md` §9): resource
/// references and output dependencies inside a later registration's
/// inputs, and inside `RegisterResourceOutputs` values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_values_naming_a_predecessor_follow_the_successor() {
    use keel::model::property::{OutputValue, ResourceReference};
    use keel::model::PropertyValue;
    use keel::source::goal::Goal;
    use keel::{Context, ProgramError};

    let mut h = Harness::new(SimConfig::default());
    h.up(vec![
        component("app"),
        bucket("old", &[("k", "v")]).parent("app"),
    ])
    .await
    .unwrap();
    let old = h.urn("old");
    let old_id = h.state_of("old").id.clone();
    let reference = PropertyValue::ResourceReference(Box::new(ResourceReference {
        urn: old.clone(),
        id: Some(old_id.clone()),
        package_version: None,
    }));
    let output = PropertyValue::Output(Box::new(OutputValue {
        value: Some(Box::new(PropertyValue::from("v"))),
        secret: None,
        dependencies: Some(vec![old.clone()]),
    }));
    let program = move |ctx: Context| {
        let (reference, output) = (reference.clone(), output.clone());
        async move {
            let mut app = Goal::component(ty(COMP), "app");
            app.options.state_migrations = StateMigrations::new(vec![rename("old", "new")]);
            let app = ctx.register(app).await?;
            let mut child = Goal::custom(ty(LEAF), "new", props(&[("k", "v")]));
            child.options.parent = Some(app.urn.clone());
            ctx.register(child).await?;
            let inputs = [
                ("bucket".to_owned(), reference.clone()),
                ("nested".to_owned(), PropertyValue::Array(vec![output])),
            ]
            .into();
            ctx.register(Goal::custom(ty(LEAF), "consumer", inputs))
                .await?;
            ctx.register_outputs(&app.urn, [("child".to_owned(), reference)].into())
                .await?;
            Ok::<(), ProgramError>(())
        }
    };
    let o = h
        .engine
        .update(
            h.state.clone(),
            program,
            Box::new(keel::persist::MemoryPersister::new()),
        )
        .await
        .unwrap();
    assert_eq!(committed(&o), 1);
    h.state = o.snapshot;
    let new = h.urn("new");
    assert_eq!(h.state_of("new").id, old_id, "the rename kept the object");
    let consumer = h.state_of("consumer");
    let successor = PropertyValue::ResourceReference(Box::new(ResourceReference {
        urn: new.clone(),
        id: Some(old_id.clone()),
        package_version: None,
    }));
    assert_eq!(consumer.inputs["bucket"], successor);
    let PropertyValue::Array(nested) = &consumer.inputs["nested"] else {
        panic!("{:?}", consumer.inputs)
    };
    let PropertyValue::Output(out) = &nested[0] else {
        panic!("{nested:?}")
    };
    assert_eq!(out.dependencies, Some(vec![new.clone()]));
    assert_eq!(h.state_of("app").outputs["child"], successor);
    let text = serde_json::to_string(&h.state.resources).unwrap();
    assert!(!text.contains(old.as_str()), "no value names {old}: {text}");
}

/// A state written by a chain that was still running when the migration
/// registered (it finished during the drain) gets the migration's rewrites
/// like any other state this deployment wrote (`migrations.md` §6.5):
/// the states to patch are read once the pipeline is quiesced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_written_during_the_drain_follows_the_rename() {
    use keel::model::property::ResourceReference;
    use keel::model::PropertyValue;
    use keel::source::goal::Goal;
    use keel::{Context, ProgramError};

    let mut h = Harness::new(SimConfig {
        latency: Duration::from_millis(800),
        ..SimConfig::default()
    });
    h.up(vec![
        component("app"),
        bucket("old", &[("k", "v")]).parent("app"),
    ])
    .await
    .unwrap();
    let old = h.urn("old");
    let old_id = h.state_of("old").id.clone();
    let reference = PropertyValue::ResourceReference(Box::new(ResourceReference {
        urn: old,
        id: Some(old_id.clone()),
        package_version: None,
    }));
    let cloud = h.cloud.clone();
    let program = move |ctx: Context| {
        let (reference, cloud) = (reference.clone(), cloud.clone());
        async move {
            // The consumer names `old` and its create is in flight...
            let inputs = [("bucket".to_owned(), reference)].into();
            let consumer = Goal::custom(ty(LEAF), "consumer", inputs);
            let c = ctx.clone();
            let consumer = tokio::spawn(async move { c.register(consumer).await });
            let waiting = std::time::Instant::now();
            while cloud.counters().in_flight == 0 {
                assert!(
                    waiting.elapsed() < Duration::from_secs(60),
                    "the consumer's create never started"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // ...when the migration that renames `old` registers.
            let mut app = Goal::component(ty(COMP), "app");
            app.options.state_migrations = StateMigrations::new(vec![rename("old", "new")]);
            let app = ctx.register(app).await?;
            let mut child = Goal::custom(ty(LEAF), "new", props(&[("k", "v")]));
            child.options.parent = Some(app.urn.clone());
            ctx.register(child).await?;
            consumer.await.expect("the consumer's task")?;
            Ok::<(), ProgramError>(())
        }
    };
    let o = h
        .engine
        .update(
            h.state.clone(),
            program,
            Box::new(keel::persist::MemoryPersister::new()),
        )
        .await
        .unwrap();
    assert_eq!(committed(&o), 1);
    h.state = o.snapshot;
    let successor = PropertyValue::ResourceReference(Box::new(ResourceReference {
        urn: h.urn("new"),
        id: Some(old_id),
        package_version: None,
    }));
    assert_eq!(
        h.state_of("consumer").inputs["bucket"],
        successor,
        "the consumer, written during the drain, names the successor"
    );
}

/// The coordinator reads the prior states in place, every one locked for
/// its synchronous steps, while the journal persister still holds the
/// `keep`s of the unchanged registrations before it (encoded, each under
/// its state's lock, only when the migration's entry goes out) and other
/// registrations arrive behind it. The update finishes (a deadlock fails
/// the timeout instead of hanging), and the journal replays to the
/// committed list with every unchanged state and the renamed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_behind_many_unchanged_registrations_reads_them_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let cloud = SimCloud::new(SimConfig::default());
    let engine = reporting_engine(&cloud);
    let others = |from: usize, to: usize| (from..to).map(|i| bucket(&format!("b{i}"), &[]));
    let program_of = |app: Res, child: &str| -> Vec<Res> {
        let mut v: Vec<Res> = others(0, 300).collect();
        v.push(app);
        v.push(bucket(child, &[]).parent("app"));
        v.extend(others(300, 400));
        v
    };
    journal_update(&engine, &backend, program_of(component("app"), "old"))
        .await
        .unwrap();

    let v2 = program_of(
        migrating(component("app"), vec![rename("old", "new")]),
        "new",
    );
    let outcome = tokio::time::timeout(
        Duration::from_secs(120),
        journal_update(&engine, &backend, v2),
    )
    .await
    .expect("the update finishes")
    .unwrap();
    assert_eq!(committed(&outcome), 1);
    let prepared = outcome.migrations[0]
        .prior_states
        .clone()
        .expect("the committed prior list");
    assert_eq!(
        prepared.len(),
        404,
        "400 buckets, the component, the child, the stack and the provider"
    );
    assert!(prepared.iter().any(|s| s.urn.name() == "new"));
    assert!(!prepared.iter().any(|s| s.urn.name() == "old"));
    let replayed = backend.load("dev").unwrap().deployment;
    assert_eq!(replayed.resources.len(), 404);
    assert!(replayed.resources.iter().any(|s| s.urn.name() == "new"));
    assert_eq!(cloud.counters().creates, 401, "nothing re-created");
    assert_eq!(cloud.counters().deletes, 0);
}
