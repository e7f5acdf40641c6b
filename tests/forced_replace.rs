//! Replaces forced by resource options through the whole engine:
//! `replaceWith` follows a resource replaced in the same update even when
//! that resource's diff answers after the dependent registered (the
//! dependent's decision waits for it), `deletedWith` likewise, and
//! `replacementTrigger` replaces when its value changes and is recorded in
//! the state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use keel::engine::{Engine, EngineConfig};
use keel::model::{Deployment, PropertyMap, PropertyValue, State, TypeToken, Urn};
use keel::persist::MemoryPersister;
use keel::provider::{
    DiffResponse, ObjectState, Provider, ProviderRegistry, ResourceRequest, SimCloud, SimConfig,
    SimProvider,
};
use keel::source::goal::Goal;
use keel::{Context, ProgramError, StepKind};
use tokio::sync::Notify;

/// The simulated cloud's provider, whose diff of `db` answers only once
/// a `tick` registered after the others is created: the generator has
/// decided (or parked) `app`, `logs` and `key` by then, since it handles
/// registrations in order and their diffs answer at once.
struct LateDb {
    inner: SimProvider,
    ticks: Arc<Ticks>,
}

/// Ticks created so far, and their signal.
#[derive(Default)]
struct Ticks {
    created: AtomicU64,
    signal: Notify,
}

#[async_trait]
impl Provider for LateDb {
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
        if req.urn.name() == "db" {
            // The next tick created from now on (none is stored ahead).
            let seen = self.ticks.created.load(Ordering::SeqCst);
            loop {
                let signal = self.ticks.signal.notified();
                if self.ticks.created.load(Ordering::SeqCst) > seen {
                    break;
                }
                signal.await;
            }
        }
        self.inner.diff(req).await
    }
    async fn create(&self, req: ResourceRequest<'_>) -> keel::provider::Result<ObjectState> {
        if req.urn.name().starts_with("tick") {
            self.ticks.created.fetch_add(1, Ordering::SeqCst);
            self.ticks.signal.notify_waiters();
        }
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
}

/// What one update registers.
#[derive(Clone)]
struct Program {
    zone: &'static str,
    trigger: PropertyValue,
    /// The tick's name (a new one per update, so that it is created).
    tick: &'static str,
}

fn urn(name: &str) -> Urn {
    Urn::parse(&format!("urn:pulumi:dev::proj::test:index:Res::{name}")).unwrap()
}

fn goal(name: &str, zone: &str) -> Goal {
    let mut inputs = PropertyMap::new();
    inputs.insert("zone".into(), PropertyValue::String(zone.into()));
    Goal::custom(TypeToken::parse("test:index:Res").unwrap(), name, inputs)
}

async fn run(p: Program, ctx: Context) -> Result<(), ProgramError> {
    let db = goal("db", p.zone);
    let mut app = goal("app", "a");
    app.options.replace_with = vec![urn("db")];
    let mut logs = goal("logs", "a");
    logs.options.deleted_with = Some(urn("db"));
    let mut key = goal("key", "a");
    key.options.replacement_trigger = p.trigger.clone();
    // `db` is registered first and not awaited: the others register while
    // its diff is outstanding.
    let tick = goal(p.tick, "a");
    let (a, b, c, d, e) = tokio::join!(
        ctx.register(db),
        ctx.register(app),
        ctx.register(logs),
        ctx.register(key),
        ctx.register(tick),
    );
    a?;
    b?;
    c?;
    d?;
    e?;
    Ok(())
}

fn by_name<'a>(d: &'a Deployment, name: &str) -> &'a State {
    d.resources
        .iter()
        .find(|s| s.urn.name() == name)
        .unwrap_or_else(|| panic!("`{name}` in {:?}", d.resources))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_force_replaces_even_when_the_resource_followed_decides_late() {
    let cloud = SimCloud::new(SimConfig {
        replace_on_change: ["zone".to_owned()].into(),
        ..SimConfig::default()
    });
    let ticks = Arc::new(Ticks::default());
    let (c, n) = (cloud.clone(), ticks.clone());
    let registry = ProviderRegistry::new(Arc::new(move |pkg: &str| {
        Arc::new(LateDb {
            inner: SimProvider::new(c.clone(), pkg),
            ticks: n.clone(),
        }) as Arc<dyn Provider>
    }));
    let engine = Engine::new(
        EngineConfig {
            project: "proj".into(),
            ..EngineConfig::default()
        },
        registry,
    );
    // One update of `p` on `prior`, which must succeed.
    let update = |prior: Deployment, p: Program, what: &'static str| {
        let program = move |ctx: Context| run(p.clone(), ctx);
        let update = engine.update(prior, program, Box::new(MemoryPersister::new()));
        async move { update.await.expect(what) }
    };
    let v1 = Program {
        zone: "x",
        trigger: PropertyValue::String("2026-11".into()),
        tick: "tick-1",
    };
    // The first update creates (no diff is asked).
    let first = update(Deployment::default(), v1.clone(), "the first update").await;
    let s = &first.snapshot;
    assert_eq!(by_name(s, "app").rare.replace_with, vec![urn("db")].into());
    assert_eq!(
        by_name(s, "key").rare.replacement_trigger,
        PropertyValue::String("2026-11".into()).into(),
        "the trigger is recorded"
    );

    // Same zone, same trigger: nothing is replaced.
    let unchanged = Program {
        tick: "tick-2",
        ..v1.clone()
    };
    let same = update(first.snapshot.clone(), unchanged, "the unchanged update").await;
    assert_eq!(
        same.summary.count(StepKind::CreateReplacement),
        0,
        "{:?}",
        same.summary
    );

    // db moves zone: it is replaced, and app (replaceWith) and logs
    // (deletedWith) with it, though their decisions were ready first; the
    // new trigger replaces key.
    let v2 = Program {
        zone: "y",
        trigger: PropertyValue::String("2026-12".into()),
        tick: "tick-3",
    };
    let second = update(same.snapshot.clone(), v2, "the second update").await;
    let s = &second.snapshot;
    for name in ["db", "app", "logs", "key"] {
        assert_ne!(
            by_name(s, name).id,
            by_name(&same.snapshot, name).id,
            "{name} was replaced: {:?}",
            second.summary
        );
    }
    assert_eq!(second.summary.count(StepKind::CreateReplacement), 4);
    assert_eq!(
        by_name(s, "key").rare.replacement_trigger,
        PropertyValue::String("2026-12".into()).into()
    );
    // Every old half was deleted but logs': its delete is skipped because
    // it is deleted with db (whose deletion takes it along in a real
    // cloud; the simulated cloud keeps it).
    let mut left: Vec<String> = cloud.objects().into_iter().map(|o| o.id).collect();
    left.sort();
    let mut want: Vec<String> = ["db", "app", "logs", "key", "tick-3"]
        .iter()
        .map(|n| by_name(s, n).id.clone())
        .chain([by_name(&same.snapshot, "logs").id.clone()])
        .collect();
    want.sort();
    assert_eq!(left, want);
}
