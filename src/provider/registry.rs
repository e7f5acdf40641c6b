//! The provider registry: resolves provider references to provider
//! instances. Each provider resource (`pulumi:providers:<pkg>`, default or
//! explicit) gets its instance from a factory per package; instances are
//! cached per reference, so every resource of one provider resource shares
//! one instance.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::locks::MutexExt;
use crate::model::fasthash::FastMap;

use crate::model::ProviderRef;

use super::{Provider, Serving};

/// Makes a provider instance for a package.
pub type ProviderFactory = Arc<dyn Fn(&str) -> Arc<dyn Provider> + Send + Sync>;

/// Resolves provider references to instances.
#[derive(Clone)]
pub struct ProviderRegistry {
    factory: ProviderFactory,
    instances: Arc<Mutex<FastMap<String, Arc<dyn Provider>>>>,
    /// What served each package an instance was made for (kept across
    /// [`ProviderRegistry::shutdown`]).
    served: Arc<Mutex<BTreeMap<String, Serving>>>,
}

impl fmt::Debug for ProviderRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderRegistry").finish_non_exhaustive()
    }
}

impl ProviderRegistry {
    /// A registry whose providers come from `factory`.
    pub fn new(factory: ProviderFactory) -> Self {
        Self {
            factory,
            instances: Arc::default(),
            served: Arc::default(),
        }
    }

    /// A registry that serves every package from the simulated cloud.
    #[cfg(feature = "sim")]
    pub fn simulated(cloud: Arc<super::SimCloud>) -> Self {
        Self::new(Arc::new(move |pkg: &str| cloud.provider(pkg)))
    }

    /// The same registry with package `pulumi` served by the built-in
    /// provider ([`super::builtins::BuiltinProvider`]), whose stack
    /// references read other stacks' outputs from `stacks`.
    pub fn with_stack_outputs(self, stacks: Arc<dyn super::builtins::StackOutputs>) -> Self {
        let inner = self.factory;
        let builtin: Arc<dyn Provider> =
            Arc::new(super::builtins::BuiltinProvider::new(Some(stacks)));
        Self::new(Arc::new(move |pkg: &str| {
            if pkg == "pulumi" {
                builtin.clone()
            } else {
                inner(pkg)
            }
        }))
    }

    /// The instance for a provider reference (made on first use).
    pub fn get(&self, reference: &ProviderRef) -> Arc<dyn Provider> {
        // The map key ignores the ID: during a preview a new provider's ID
        // is unknown, and one provider URN has one instance per operation.
        let key = reference.urn().as_str();
        let mut map = self.instances.locked();
        if let Some(p) = map.get(key) {
            return p.clone();
        }
        let p = (self.factory)(reference.package());
        map.insert(key.to_owned(), p.clone());
        drop(map);
        self.served
            .locked()
            .insert(reference.package().to_owned(), p.serving());
        p
    }

    /// What served each package this registry made a provider for, so far
    /// in the operation.
    pub fn served(&self) -> BTreeMap<String, Serving> {
        self.served.locked().clone()
    }

    /// Tells every instance made so far that the operation is being
    /// cancelled ([`Provider::cancel`]), each once.
    pub async fn cancel(&self) {
        let made: Vec<Arc<dyn Provider>> = self.instances.locked().values().cloned().collect();
        for p in distinct(made) {
            p.cancel().await;
        }
    }

    /// Ends the operation's providers: [`Provider::shutdown`] on every
    /// instance made so far (each once, even when shared by several
    /// references), which are forgotten: a later [`ProviderRegistry::get`]
    /// makes new ones.
    pub async fn shutdown(&self) {
        let made: Vec<Arc<dyn Provider>> =
            self.instances.locked().drain().map(|(_, p)| p).collect();
        for p in distinct(made) {
            p.shutdown().await;
        }
    }
}

/// The instances without repeats (one instance may serve several
/// references).
fn distinct(made: Vec<Arc<dyn Provider>>) -> Vec<Arc<dyn Provider>> {
    let mut out: Vec<Arc<dyn Provider>> = Vec::new();
    for p in made {
        if !out.iter().any(|d| Arc::ptr_eq(d, &p)) {
            out.push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PropertyMap;
    use crate::provider::{DiffResponse, ObjectState, ProviderError, ResourceRequest, Result};
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its shutdowns; every other call fails.
    struct Counting(Arc<AtomicUsize>);

    fn refused(req: &ResourceRequest<'_>) -> ProviderError {
        ProviderError::Failed {
            operation: "create",
            urn: req.urn.clone(),
            message: "not in this test".into(),
        }
    }

    #[async_trait]
    impl Provider for Counting {
        fn package(&self) -> &str {
            "counting"
        }
        async fn configure(&self, _: &PropertyMap) -> Result<()> {
            Ok(())
        }
        async fn check(&self, req: ResourceRequest<'_>) -> Result<PropertyMap> {
            Err(refused(&req))
        }
        async fn diff(&self, req: ResourceRequest<'_>) -> Result<DiffResponse> {
            Err(refused(&req))
        }
        async fn create(&self, req: ResourceRequest<'_>) -> Result<ObjectState> {
            Err(refused(&req))
        }
        async fn read(&self, req: ResourceRequest<'_>) -> Result<Option<ObjectState>> {
            Err(refused(&req))
        }
        async fn update(&self, req: ResourceRequest<'_>) -> Result<ObjectState> {
            Err(refused(&req))
        }
        async fn delete(&self, req: ResourceRequest<'_>) -> Result<()> {
            Err(refused(&req))
        }
        async fn shutdown(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn reference(name: &str) -> ProviderRef {
        let urn = crate::model::Urn::parse(&format!(
            "urn:pulumi:dev::p::pulumi:providers:counting::{name}"
        ))
        .expect("urn");
        ProviderRef::new(urn, "id").expect("reference")
    }

    #[tokio::test]
    async fn shutdown_ends_every_instance_made_once_and_forgets_them() {
        let made = Arc::new(AtomicUsize::new(0));
        let stopped = Arc::new(AtomicUsize::new(0));
        let (m, s) = (made.clone(), stopped.clone());
        let registry = ProviderRegistry::new(Arc::new(move |_: &str| {
            m.fetch_add(1, Ordering::SeqCst);
            Arc::new(Counting(s.clone())) as Arc<dyn Provider>
        }));
        registry.get(&reference("a"));
        registry.get(&reference("a"));
        registry.get(&reference("b"));
        assert_eq!(made.load(Ordering::SeqCst), 2);
        registry.shutdown().await;
        assert_eq!(stopped.load(Ordering::SeqCst), 2);
        // Forgotten: a second shutdown ends nothing; a new get makes anew.
        registry.shutdown().await;
        assert_eq!(stopped.load(Ordering::SeqCst), 2);
        registry.get(&reference("a"));
        assert_eq!(made.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_shared_instance_is_shut_down_once() {
        let stopped = Arc::new(AtomicUsize::new(0));
        let shared: Arc<dyn Provider> = Arc::new(Counting(stopped.clone()));
        let registry = ProviderRegistry::new(Arc::new(move |_: &str| shared.clone()));
        registry.get(&reference("a"));
        registry.get(&reference("b"));
        registry.shutdown().await;
        assert_eq!(stopped.load(Ordering::SeqCst), 1);
    }
}
