//! Partial failures (Pulumi's `ErrorResourceInitFailed`): a create that
//! made an object which then failed to initialise fails the step, but the
//! object is recorded with its `initErrors` (never forgotten, never made
//! twice); the next update updates it even with unchanged inputs, and a
//! successful update clears the errors.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use keel::engine::{Engine, EngineConfig, EngineError};
use keel::model::{Deployment, PropertyMap, PropertyValue, TypeToken};
use keel::persist::MemoryPersister;
use keel::provider::{
    DiffResponse, ObjectState, Provider, ProviderError, ProviderRegistry, ResourceRequest,
    SimCloud, SimConfig, SimProvider,
};
use keel::source::goal::Goal;
use keel::{Context, ProgramError, StepKind};

/// The simulated cloud's provider, whose creates make the object and then
/// report it unhealthy while `unhealthy` is set.
struct Flaky {
    inner: SimProvider,
    unhealthy: Arc<AtomicBool>,
    updates: Arc<AtomicUsize>,
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
        let urn = req.urn.clone();
        let made = self.inner.create(req).await?;
        if self.unhealthy.load(Ordering::SeqCst) {
            return Err(ProviderError::InitFailed {
                operation: "create",
                urn,
                object: Box::new(made),
                reasons: vec!["the instance is not healthy yet".into()],
                message: "the instance was made but is not healthy".into(),
            });
        }
        Ok(made)
    }
    async fn read(&self, req: ResourceRequest<'_>) -> keel::provider::Result<Option<ObjectState>> {
        self.inner.read(req).await
    }
    async fn update(&self, req: ResourceRequest<'_>) -> keel::provider::Result<ObjectState> {
        self.updates.fetch_add(1, Ordering::SeqCst);
        self.inner.update(req).await
    }
    async fn delete(&self, req: ResourceRequest<'_>) -> keel::provider::Result<()> {
        self.inner.delete(req).await
    }
}

async fn server(ctx: Context) -> Result<(), ProgramError> {
    let mut inputs = PropertyMap::new();
    inputs.insert("size".into(), PropertyValue::String("small".into()));
    ctx.register(Goal::custom(
        TypeToken::parse("aws:ec2/instance:Instance")?,
        "web",
        inputs,
    ))
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_failed_to_initialise_is_kept_then_updated() {
    let cloud = SimCloud::new(SimConfig::default());
    let unhealthy = Arc::new(AtomicBool::new(true));
    let updates = Arc::new(AtomicUsize::new(0));
    let (c, u, n) = (cloud.clone(), unhealthy.clone(), updates.clone());
    let registry = ProviderRegistry::new(Arc::new(move |pkg: &str| {
        Arc::new(Flaky {
            inner: SimProvider::new(c.clone(), pkg),
            unhealthy: u.clone(),
            updates: n.clone(),
        }) as Arc<dyn Provider>
    }));
    let engine = Engine::new(
        EngineConfig {
            project: "proj".into(),
            ..EngineConfig::default()
        },
        registry,
    );
    let web = |d: &Deployment| {
        d.resources
            .iter()
            .find(|s| s.urn.name() == "web")
            .cloned()
            .unwrap_or_else(|| panic!("`web` in {:?}", d.resources))
    };

    // The create fails, but the object it made is in the state.
    let r = engine
        .update(
            Deployment::default(),
            server,
            Box::new(MemoryPersister::new()),
        )
        .await;
    let Err(EngineError::Failed(outcome)) = r else {
        panic!("the update fails: {r:?}");
    };
    assert!(
        outcome
            .summary
            .failures
            .iter()
            .any(|f| f.message.contains("not healthy")),
        "{:?}",
        outcome.summary
    );
    let first = web(&outcome.snapshot);
    assert!(!first.id.is_empty(), "{first:?}");
    assert_eq!(
        *first.rare.init_errors,
        vec!["the instance is not healthy yet"]
    );
    assert_eq!(cloud.counters().creates, 1);

    // Unchanged inputs: still an update, which clears the errors.
    unhealthy.store(false, Ordering::SeqCst);
    let outcome = engine
        .update(outcome.snapshot, server, Box::new(MemoryPersister::new()))
        .await
        .expect("the second update");
    assert_eq!(
        outcome.summary.count(StepKind::Update),
        1,
        "{:?}",
        outcome.summary
    );
    assert_eq!(updates.load(Ordering::SeqCst), 1);
    let second = web(&outcome.snapshot);
    assert_eq!(second.id, first.id, "the same object");
    assert!(second.rare.init_errors.is_empty(), "{second:?}");
    assert_eq!(cloud.counters().creates, 1, "never made twice");

    // Healthy now: nothing to do.
    let outcome = engine
        .update(outcome.snapshot, server, Box::new(MemoryPersister::new()))
        .await
        .expect("the third update");
    assert_eq!(
        outcome.summary.count(StepKind::Same),
        3,
        "{:?}",
        outcome.summary
    );
    assert_eq!(outcome.summary.count(StepKind::Update), 0);
}
