//! The provider registry: resolves provider references to provider
//! instances. Each provider resource (`pulumi:providers:<pkg>`, default or
//! explicit) gets its instance from a factory per package; instances are
//! cached per reference, so every resource of one provider resource shares
//! one instance.

use crate::locks::MutexExt;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::model::ProviderRef;

use super::Provider;

/// Makes a provider instance for a package.
pub type ProviderFactory = Arc<dyn Fn(&str) -> Arc<dyn Provider> + Send + Sync>;

/// Resolves provider references to instances.
#[derive(Clone)]
pub struct ProviderRegistry {
    factory: ProviderFactory,
    instances: Arc<Mutex<HashMap<String, Arc<dyn Provider>>>>,
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
            instances: Arc::new(Mutex::new(HashMap::new())),
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
        p
    }

    /// Ends the operation's providers: [`Provider::shutdown`] on every
    /// instance made so far (each once, even when shared by several
    /// references), which are forgotten: a later [`ProviderRegistry::get`]
    /// makes new ones.
    pub async fn shutdown(&self) {
        let made: Vec<Arc<dyn Provider>> =
            self.instances.locked().drain().map(|(_, p)| p).collect();
        let mut done: Vec<Arc<dyn Provider>> = Vec::new();
        for p in made {
            if done.iter().any(|d| Arc::ptr_eq(d, &p)) {
                continue;
            }
            p.shutdown().await;
            done.push(p);
        }
    }
}
