//! Schema-versioned resources end to end (`architecture.md` §8), through
//! the real engine and the simulated cloud: an upgrade v1 -> v3 in one
//! migrate call, stamping on write, downgrades refused, a failing migrate
//! that changes nothing (on disk and in memory), component migration
//! callbacks seeing upgraded state, refresh upgrading too, preview
//! persisting nothing, and the upgrade batch replayed from the journal.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::*;
use keel::engine::{Engine, EngineConfig, EngineError};
use keel::model::{Deployment, PropertyMap, PropertyValue, TypeToken, Urn};
use keel::persist::backend::{Backend, PersistenceKind};
use keel::persist::journal_file::JournalOptions;
use keel::persist::{Ack, Mutation, PersistError, Persister, SnapshotBuilder};
use keel::provider::{
    DiffResponse, ObjectState, Provider, ProviderError, ProviderRegistry, ResourceRequest,
    SchemaDef, SchemaInfo, SchemaState, SchemaUpgradeError, SimCloud, SimConfig, SimProvider,
};
use keel::source::migration::{MigrationCallback, StateMigrationArgs, StateMigrations};

fn schema(version: u64, renames: &[(&str, &str)]) -> SchemaDef {
    SchemaDef {
        version,
        renames: renames
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect(),
        ..SchemaDef::default()
    }
}

fn versioned(version: u64) -> SimConfig {
    SimConfig {
        schemas: [(BUCKET.to_owned(), schema(version, &[]))]
            .into_iter()
            .collect(),
        ..SimConfig::default()
    }
}

fn s(v: &str) -> PropertyValue {
    PropertyValue::from(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_to_v3_in_one_call_with_inputs_and_outputs_together() {
    let mut h = Harness::new(versioned(1));
    h.up(vec![bucket("a", &[("size", "1")]), bucket("b", &[])])
        .await
        .unwrap();
    assert_eq!(h.state_of("a").schema_version, 1, "a create is stamped");
    let before_id = h.state_of("a").id.clone();

    h.cloud
        .set_schema(BUCKET, schema(3, &[("size", "capacity")]));
    let o = h
        .up(vec![bucket("a", &[("capacity", "1")]), bucket("b", &[])])
        .await
        .unwrap();
    let calls = h.cloud.schema_migrations();
    assert_eq!(calls.len(), 2, "one call per state: {calls:?}");
    for c in &calls {
        assert_eq!((c.old_version, c.new_version), (1, 3), "straight to v3");
    }
    let a = h.state_of("a");
    assert_eq!(a.schema_version, 3);
    assert_eq!(a.id, before_id, "the same object");
    assert_eq!(a.inputs.get("capacity"), Some(&s("1")));
    assert!(!a.inputs.contains_key("size"), "inputs renamed");
    assert_eq!(a.outputs.get("capacity"), Some(&s("1")), "outputs renamed");
    assert!(!a.outputs.contains_key("size"));
    let c = h.cloud.counters();
    assert_eq!((c.creates, c.updates, c.deletes), (2, 0, 0));
    assert_eq!(o.summary.count(keel::StepKind::Update), 0);

    // Upgraded once: the next run migrates nothing.
    h.up(vec![bucket("a", &[("capacity", "1")]), bucket("b", &[])])
        .await
        .unwrap();
    assert_eq!(h.cloud.schema_migrations().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_writes_are_stamped_with_the_current_version() {
    // Unversioned: nothing stamped (`schemaVersion` omitted).
    let mut h = Harness::new(SimConfig::default());
    h.up(vec![bucket("a", &[("v", "1")])]).await.unwrap();
    assert_eq!(h.state_of("a").schema_version, 0);
    let json = serde_json::to_value(h.state_of("a")).unwrap();
    assert!(json.get("schemaVersion").is_none(), "0 is omitted");

    // Versioned from v0: upgraded, then an update and a create are stamped.
    h.cloud.set_schema(BUCKET, schema(2, &[]));
    h.up(vec![bucket("a", &[("v", "2")]), bucket("n", &[])])
        .await
        .unwrap();
    assert_eq!(h.cloud.counters().updates, 1);
    assert_eq!(h.state_of("a").schema_version, 2);
    assert_eq!(h.state_of("n").schema_version, 2);
    let json = serde_json::to_value(h.state_of("a")).unwrap();
    assert_eq!(json["schemaVersion"], 2);

    // A refresh's read is stamped too.
    h.refresh().await.unwrap();
    assert_eq!(h.state_of("a").schema_version, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_is_refused_naming_everything() {
    let mut h = Harness::new(versioned(3));
    h.up(vec![bucket("a", &[])]).await.unwrap();
    let state = h.state.clone();
    h.cloud.set_schema(BUCKET, schema(2, &[]));
    for mode in ["up", "preview", "refresh"] {
        let r = match mode {
            "up" => h.up(vec![bucket("a", &[])]).await,
            "preview" => h.preview(vec![bucket("a", &[])]).await,
            _ => h.refresh().await,
        };
        let err = match r {
            Err(EngineError::Schema(e)) if matches!(*e, SchemaUpgradeError::Downgrade { .. }) => e,
            other => panic!("{mode}: expected a refused downgrade, got {other:?}"),
        };
        let msg = err.to_string();
        for part in [
            h.urn("a").as_str(),
            BUCKET,
            "version 3",
            "version 2",
            "pulumi:providers:aws",
        ] {
            assert!(msg.contains(part), "{mode}: `{part}` in {msg}");
        }
        assert_eq!(h.state, state, "{mode}: nothing changed");
    }
    assert!(h.cloud.schema_migrations().is_empty());
    // Destroy does not upgrade: it still works.
    h.destroy().await.unwrap();
    assert!(h.state.resources.is_empty());
}

/// A provider over the simulated cloud whose migration can be made to
/// fail, and which records the versions it was asked to migrate from.
struct Flaky {
    inner: SimProvider,
    fail: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<u64>>>,
}

#[async_trait]
impl Provider for Flaky {
    fn package(&self) -> &str {
        self.inner.package()
    }
    async fn configure(&self, inputs: &PropertyMap) -> keel::provider::Result<()> {
        self.inner.configure(inputs).await
    }
    async fn check(&self, req: ResourceRequest<'_>) -> keel::provider::Result<PropertyMap> {
        self.inner.check(req).await
    }
    async fn diff(&self, req: ResourceRequest<'_>) -> keel::provider::Result<DiffResponse> {
        self.inner.diff(req).await
    }
    async fn create(&self, req: ResourceRequest<'_>) -> keel::provider::Result<ObjectState> {
        self.inner.create(req).await
    }
    async fn read(&self, req: ResourceRequest<'_>) -> keel::provider::Result<Option<ObjectState>> {
        self.inner.read(req).await
    }
    async fn update(&self, req: ResourceRequest<'_>) -> keel::provider::Result<ObjectState> {
        self.inner.update(req).await
    }
    async fn delete(&self, req: ResourceRequest<'_>) -> keel::provider::Result<()> {
        self.inner.delete(req).await
    }
    fn schema(&self, ty: &TypeToken) -> Option<SchemaInfo> {
        self.inner.schema(ty)
    }
    async fn migrate_state(
        &self,
        urn: &Urn,
        ty: &TypeToken,
        old_version: u64,
        state: SchemaState,
    ) -> keel::provider::Result<SchemaState> {
        self.seen.lock().unwrap().push(old_version);
        if self.fail.load(Ordering::SeqCst) {
            return Err(ProviderError::Migrate {
                urn: urn.clone(),
                ty: ty.clone(),
                old_version,
                message: "the bucket's schema is unreadable".into(),
            });
        }
        self.inner.migrate_state(urn, ty, old_version, state).await
    }
}

struct Setup {
    cloud: Arc<SimCloud>,
    engine: Engine,
    fail: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<u64>>>,
}

fn flaky(config: SimConfig) -> Setup {
    let cloud = SimCloud::new(config);
    let fail = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (c, f, s) = (cloud.clone(), fail.clone(), seen.clone());
    let registry = ProviderRegistry::new(Arc::new(move |pkg: &str| {
        Arc::new(Flaky {
            inner: SimProvider::new(c.clone(), pkg),
            fail: f.clone(),
            seen: s.clone(),
        }) as Arc<dyn Provider>
    }));
    let engine = Engine::new(
        EngineConfig {
            project: "proj".into(),
            ..EngineConfig::default()
        },
        registry,
    );
    Setup {
        cloud,
        engine,
        fail,
        seen,
    }
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_migrate_changes_nothing_on_disk_or_in_memory() {
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let t = flaky(versioned(1));
        let v1 = vec![bucket("a", &[("size", "1")]), bucket("b", &[]).dep("a")];
        let open = backend.open("dev", "test").unwrap();
        let p = open.persister(kind, JournalOptions::default()).unwrap();
        t.engine
            .update(open.deployment.clone(), program(v1), p)
            .await
            .unwrap();
        drop(open);

        t.cloud
            .set_schema(BUCKET, schema(2, &[("size", "capacity")]));
        t.fail.store(true, Ordering::SeqCst);
        let v2 = vec![bucket("a", &[("capacity", "1")]), bucket("b", &[]).dep("a")];
        let open = backend.open("dev", "test").unwrap();
        let prior = open.deployment.clone();
        let on_disk = files(&open.paths.dir);
        let p = open.persister(kind, JournalOptions::default()).unwrap();
        let r = t.engine.update(prior.clone(), program(v2.clone()), p).await;
        let err = match r {
            Err(EngineError::Schema(e)) if matches!(*e, SchemaUpgradeError::Migrate { .. }) => e,
            other => panic!("{kind:?}: expected a failed migrate, got {other:?}"),
        };
        let msg = err.to_string();
        for part in [
            "::a",
            BUCKET,
            "from schema version 1 to 2",
            "pulumi:providers:aws",
            "unreadable",
        ] {
            assert!(msg.contains(part), "{kind:?}: `{part}` in {msg}");
        }
        assert_eq!(open.deployment, prior, "{kind:?}: in memory unchanged");
        let paths = open.paths.clone();
        drop(open);
        let mut after = files(&paths.dir);
        let mut before = on_disk.clone();
        // The lock file is the operation's own.
        for m in [&mut after, &mut before] {
            m.retain(|k, _| !k.contains("lock"));
        }
        assert_eq!(after, before, "{kind:?}: on disk unchanged");
        let loaded = backend.load("dev").unwrap().deployment;
        assert_eq!(loaded.resources, prior.resources, "{kind:?}");
        let c = t.cloud.counters();
        assert_eq!((c.creates, c.updates, c.deletes), (2, 0, 0), "{kind:?}");

        // Once the migrate works, the same update converges with no
        // physical change.
        t.fail.store(false, Ordering::SeqCst);
        let open = backend.open("dev", "test").unwrap();
        let p = open.persister(kind, JournalOptions::default()).unwrap();
        t.engine
            .update(open.deployment.clone(), program(v2), p)
            .await
            .unwrap();
        drop(open);
        let loaded = backend.load("dev").unwrap().deployment;
        for r in loaded.resources.iter().filter(|r| r.ty.as_str() == BUCKET) {
            assert_eq!(r.schema_version, 2, "{kind:?}");
        }
        let c = t.cloud.counters();
        assert_eq!((c.creates, c.updates, c.deletes), (2, 0, 0), "{kind:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrate_function_sees_the_old_version() {
    let t = flaky(versioned(1));
    let mut state = Deployment::default();
    let o = t
        .engine
        .update(
            state.clone(),
            program(vec![bucket("a", &[])]),
            Box::new(keel::persist::MemoryPersister::new()),
        )
        .await
        .unwrap();
    state = o.snapshot;
    t.cloud.set_schema(BUCKET, schema(3, &[]));
    t.engine
        .update(
            state,
            program(vec![bucket("a", &[])]),
            Box::new(keel::persist::MemoryPersister::new()),
        )
        .await
        .unwrap();
    assert_eq!(*t.seen.lock().unwrap(), vec![1], "one call, from v1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn component_migration_callbacks_see_upgraded_state() {
    let mut h = Harness::new(versioned(1));
    h.up(vec![
        component("app"),
        bucket("leaf", &[("size", "1")]).parent("app"),
    ])
    .await
    .unwrap();
    h.cloud
        .set_schema(BUCKET, schema(2, &[("size", "capacity")]));
    let seen: Arc<Mutex<Vec<serde_json::Value>>> = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let callback = MigrationCallback::sync(move |args: StateMigrationArgs| {
        record.lock().unwrap().extend(args.old_state.clone());
        Ok(None)
    });
    h.up(vec![
        component("app").with(move |o| o.state_migrations = StateMigrations::new(vec![callback])),
        bucket("leaf", &[("capacity", "1")]).parent("app"),
    ])
    .await
    .unwrap();
    let seen = seen.lock().unwrap().clone();
    let leaf = seen
        .iter()
        .find(|s| s["urn"].as_str().is_some_and(|u| u.ends_with("::leaf")))
        .expect("the callback saw the leaf");
    assert_eq!(leaf["schemaVersion"], 2, "{leaf}");
    assert_eq!(leaf["inputs"]["capacity"], "1", "{leaf}");
    assert!(leaf["inputs"].get("size").is_none(), "{leaf}");
    assert_eq!(leaf["outputs"]["capacity"], "1", "{leaf}");
    let c = h.cloud.counters();
    assert_eq!((c.creates, c.updates, c.deletes), (1, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_upgrades_too() {
    let mut h = Harness::new(versioned(1));
    h.up(vec![bucket("a", &[("size", "1")])]).await.unwrap();
    h.cloud
        .set_schema(BUCKET, schema(2, &[("size", "capacity")]));
    h.refresh().await.unwrap();
    assert_eq!(h.cloud.schema_migrations().len(), 1);
    let a = h.state_of("a");
    assert_eq!(a.schema_version, 2);
    assert_eq!(a.inputs.get("capacity"), Some(&s("1")));
    assert!(!a.inputs.contains_key("size"));
    assert_eq!(a.outputs.get("capacity"), Some(&s("1")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_upgrades_in_memory_and_persists_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::new(dir.path());
    let cloud = SimCloud::new(versioned(1));
    let engine = Engine::new(
        EngineConfig {
            project: "proj".into(),
            ..EngineConfig::default()
        },
        ProviderRegistry::simulated(cloud.clone()),
    );
    let open = backend.open("dev", "test").unwrap();
    let p = open
        .persister(PersistenceKind::Journal, JournalOptions::default())
        .unwrap();
    engine
        .update(
            open.deployment.clone(),
            program(vec![bucket("a", &[("size", "1")])]),
            p,
        )
        .await
        .unwrap();
    let paths = open.paths.clone();
    drop(open);
    let before = files(&paths.dir);
    let prior = backend.load("dev").unwrap().deployment;

    cloud.set_schema(BUCKET, schema(2, &[("size", "capacity")]));
    let o = engine
        .preview(
            prior.clone(),
            program(vec![bucket("a", &[("capacity", "1")])]),
        )
        .await
        .unwrap();
    assert_eq!(
        o.summary.count(keel::StepKind::Update),
        0,
        "the preview plans against the upgraded state"
    );
    let a = o
        .snapshot
        .resources
        .iter()
        .find(|r| r.urn.name() == "a")
        .unwrap();
    assert_eq!(a.schema_version, 2, "upgraded in memory");
    assert_eq!(files(&paths.dir), before, "nothing persisted");
    assert_eq!(backend.load("dev").unwrap().deployment, prior);
}

/// A persister that makes only the first mutation durable, then fails: the
/// process "dies" right after the upgrade batch was persisted.
struct DiesAfterFirst {
    inner: Box<dyn Persister>,
    saves: u64,
}

impl Persister for DiesAfterFirst {
    fn persist(&mut self, m: &Mutation, current: &mut SnapshotBuilder, ack: Ack) {
        self.saves += 1;
        if self.saves > 1 {
            return ack(Err(PersistError::Injected(self.saves)));
        }
        self.inner.persist(m, current, ack);
    }

    fn finish(&mut self, _current: &mut SnapshotBuilder) -> keel::persist::Result<Deployment> {
        Err(PersistError::Injected(0))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_batch_is_the_first_mutation_and_replays() {
    for kind in [PersistenceKind::Journal, PersistenceKind::Checkpoint] {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::new(dir.path());
        let cloud = SimCloud::new(versioned(1));
        let engine = Engine::new(
            EngineConfig {
                project: "proj".into(),
                ..EngineConfig::default()
            },
            ProviderRegistry::simulated(cloud.clone()),
        );
        let v1 = vec![
            bucket("a", &[("size", "1")]),
            bucket("b", &[("size", "2")]).dep("a"),
        ];
        let open = backend.open("dev", "test").unwrap();
        let p = open.persister(kind, JournalOptions::default()).unwrap();
        engine
            .update(open.deployment.clone(), program(v1), p)
            .await
            .unwrap();
        drop(open);

        cloud.set_schema(BUCKET, schema(2, &[("size", "capacity")]));
        let v2 = vec![
            bucket("a", &[("capacity", "1")]),
            bucket("b", &[("capacity", "3")]).dep("a"),
        ];
        let open = backend.open("dev", "test").unwrap();
        let p = Box::new(DiesAfterFirst {
            inner: open.persister(kind, JournalOptions::default()).unwrap(),
            saves: 0,
        });
        let r = engine.update(open.deployment.clone(), program(v2), p).await;
        assert!(r.is_err(), "{kind:?}: the run dies after the first save");
        drop(open);
        let replayed = backend.load("dev").unwrap().deployment;
        let buckets: Vec<_> = replayed
            .resources
            .iter()
            .filter(|r| r.ty.as_str() == BUCKET)
            .collect();
        assert_eq!(buckets.len(), 2, "{kind:?}");
        for r in buckets {
            assert_eq!(r.schema_version, 2, "{kind:?}: {}", r.urn);
            assert!(r.inputs.contains_key("capacity"), "{kind:?}: {}", r.urn);
            assert!(!r.inputs.contains_key("size"), "{kind:?}: {}", r.urn);
            assert!(r.outputs.contains_key("capacity"), "{kind:?}: {}", r.urn);
        }
        let b = replayed
            .resources
            .iter()
            .find(|r| r.urn.name() == "b")
            .unwrap();
        assert_eq!(
            b.inputs.get("capacity"),
            Some(&s("2")),
            "{kind:?}: the update of b never became durable"
        );
    }
}
