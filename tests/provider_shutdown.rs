//! The engine ends its providers when an operation ends: every instance
//! the operation made gets `Provider::shutdown` once, after a successful
//! update and after a failed one (a plugin process must never outlive the
//! operation that started it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use keel::engine::{Engine, EngineConfig};
use keel::model::{Deployment, PropertyMap, TypeToken};
use keel::persist::MemoryPersister;
use keel::provider::{
    DiffResponse, ObjectState, Provider, ProviderRegistry, ResourceRequest, SimCloud, SimConfig,
    SimProvider,
};
use keel::source::goal::Goal;
use keel::{Context, ProgramError};

/// The simulated cloud's provider, counting its shutdowns.
struct Counted {
    inner: SimProvider,
    stopped: Arc<AtomicUsize>,
}

#[async_trait]
impl Provider for Counted {
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
    async fn shutdown(&self) {
        self.stopped.fetch_add(1, Ordering::SeqCst);
    }
}

fn engine(stopped: &Arc<AtomicUsize>) -> Engine {
    let cloud = SimCloud::new(SimConfig::default());
    let s = stopped.clone();
    let registry = ProviderRegistry::new(Arc::new(move |pkg: &str| {
        Arc::new(Counted {
            inner: SimProvider::new(cloud.clone(), pkg),
            stopped: s.clone(),
        }) as Arc<dyn Provider>
    }));
    Engine::new(
        EngineConfig {
            project: "proj".into(),
            ..EngineConfig::default()
        },
        registry,
    )
}

async fn two_packages(ctx: Context, fail: bool) -> Result<(), ProgramError> {
    for (ty, name) in [("aws:s3/bucket:Bucket", "b"), ("gcp:storage:Bucket", "g")] {
        ctx.register(Goal::custom(
            TypeToken::parse(ty)?,
            name,
            Default::default(),
        ))
        .await?;
    }
    if fail {
        return Err("the program fails after its registrations".into());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_provider_of_an_operation_is_shut_down_when_it_ends() {
    let stopped = Arc::new(AtomicUsize::new(0));
    let engine = engine(&stopped);
    let outcome = engine
        .update(
            Deployment::default(),
            |ctx: Context| two_packages(ctx, false),
            Box::new(MemoryPersister::new()),
        )
        .await
        .expect("update");
    // Two default providers (aws, gcp): each ended once.
    assert_eq!(stopped.load(Ordering::SeqCst), 2);
    // A failing operation ends its providers too.
    let r = engine
        .update(
            outcome.snapshot,
            |ctx: Context| two_packages(ctx, true),
            Box::new(MemoryPersister::new()),
        )
        .await;
    assert!(r.is_err(), "{r:?}");
    assert_eq!(stopped.load(Ordering::SeqCst), 4);
}
