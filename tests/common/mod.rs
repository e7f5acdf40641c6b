//! Shared helpers for engine tests: a harness holding a simulated cloud,
//! an engine and the stack's current state, and a declarative program.

#![allow(dead_code, unreachable_pub, missing_docs)]

// The `keel` binary exists only with the `cli` feature.
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "cli")]
pub mod pg;
#[cfg(feature = "cli")]
pub mod python;

use std::collections::BTreeMap;
use std::sync::Arc;

use keel::engine::{Engine, EngineConfig, EngineError, Outcome};
use keel::model::integrity::verify;
use keel::model::{Deployment, PropertyMap, PropertyValue, TypeToken, Urn};
use keel::persist::MemoryPersister;
use keel::provider::{ProviderRegistry, SimCloud, SimConfig};
use keel::source::goal::{Alias, AliasParent, AliasSpec, Goal, ResourceOptions};
use keel::{Context, ProgramError};

pub const BUCKET: &str = "aws:s3/bucket:Bucket";
pub const COMP: &str = "my:app:Component";

pub fn ty(s: &str) -> TypeToken {
    TypeToken::parse(s).unwrap()
}

pub fn props(pairs: &[(&str, &str)]) -> PropertyMap {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), PropertyValue::from(*v)))
        .collect()
}

/// One resource of a declarative program.
#[derive(Clone, Debug)]
pub struct Res {
    pub name: String,
    pub ty: String,
    pub custom: bool,
    pub inputs: PropertyMap,
    pub parent: Option<String>,
    pub deps: Vec<String>,
    /// Property dependencies: (input key, resource name).
    pub pdeps: Vec<(String, String)>,
    pub opts: ResourceOptions,
    pub alias_names: Vec<AliasSpec>,
}

pub fn bucket(name: &str, inputs: &[(&str, &str)]) -> Res {
    Res {
        name: name.into(),
        ty: BUCKET.into(),
        custom: true,
        inputs: props(inputs),
        parent: None,
        deps: vec![],
        pdeps: vec![],
        opts: ResourceOptions::default(),
        alias_names: vec![],
    }
}

pub fn component(name: &str) -> Res {
    Res {
        name: name.into(),
        ty: COMP.into(),
        custom: false,
        inputs: PropertyMap::new(),
        parent: None,
        deps: vec![],
        pdeps: vec![],
        opts: ResourceOptions::default(),
        alias_names: vec![],
    }
}

impl Res {
    pub fn parent(mut self, p: &str) -> Self {
        self.parent = Some(p.into());
        self
    }
    pub fn dep(mut self, d: &str) -> Self {
        self.deps.push(d.into());
        self
    }
    /// Input `key` comes from resource `d` (a property dependency, which
    /// is a dependency too).
    pub fn pdep(mut self, key: &str, d: &str) -> Self {
        self.pdeps.push((key.into(), d.into()));
        self
    }
    pub fn ty(mut self, t: &str) -> Self {
        self.ty = t.into();
        self
    }
    pub fn with(mut self, f: impl FnOnce(&mut ResourceOptions)) -> Self {
        f(&mut self.opts);
        self
    }
    pub fn alias(mut self, spec: AliasSpec) -> Self {
        self.alias_names.push(spec);
        self
    }
}

pub fn alias_name(name: &str) -> AliasSpec {
    AliasSpec {
        name: Some(name.into()),
        ..AliasSpec::default()
    }
}

pub fn alias_no_parent() -> AliasSpec {
    AliasSpec {
        parent: Some(AliasParent::NoParent),
        ..AliasSpec::default()
    }
}

/// A program registering `resources`: each waits only for its parent and
/// dependencies, so independent resources register concurrently.
pub fn program(
    resources: Vec<Res>,
) -> impl Fn(Context) -> futures::future::BoxFuture<'static, Result<(), ProgramError>>
       + Send
       + Sync
       + 'static {
    let resources = Arc::new(resources);
    move |ctx: Context| {
        let resources = resources.clone();
        Box::pin(async move {
            // One shared future per resource, resolving to its URN.
            type Shared =
                futures::future::Shared<futures::future::BoxFuture<'static, Result<Urn, String>>>;
            let mut futs: BTreeMap<String, Shared> = BTreeMap::new();
            for r in resources.iter() {
                use futures::FutureExt;
                let parent = r.parent.as_ref().map(|p| futs[p].clone());
                let deps: Vec<Shared> = r.deps.iter().map(|d| futs[d].clone()).collect();
                let pdeps: Vec<(String, Shared)> = r
                    .pdeps
                    .iter()
                    .map(|(k, d)| (k.clone(), futs[d].clone()))
                    .collect();
                let ctx = ctx.clone();
                let key = r.name.clone();
                let r = r.clone();
                let fut: futures::future::BoxFuture<'static, Result<Urn, String>> =
                    Box::pin(async move {
                        let mut opts = r.opts.clone();
                        if let Some(p) = parent {
                            opts.parent = Some(p.await?);
                        }
                        for d in deps {
                            opts.depends_on.push(d.await?);
                        }
                        for (k, d) in pdeps {
                            let d = d.await?;
                            opts.property_dependencies.entry(k).or_default().push(d);
                        }
                        for a in &r.alias_names {
                            opts.aliases.push(Alias::Spec(a.clone()));
                        }
                        let goal = Goal {
                            ty: ty(&r.ty),
                            name: r.name.clone(),
                            custom: r.custom,
                            inputs: r.inputs.clone(),
                            options: opts,
                        };
                        ctx.register(goal)
                            .await
                            .map(|reg| reg.urn)
                            .map_err(|e| e.to_string())
                    });
                futs.insert(key, fut.shared());
            }
            let results = futures::future::join_all(futs.into_values()).await;
            for r in results {
                r?;
            }
            Ok(())
        })
    }
}

pub struct Harness {
    pub cloud: Arc<SimCloud>,
    pub engine: Engine,
    pub state: Deployment,
}

impl Harness {
    pub fn new(config: SimConfig) -> Self {
        Self::with(config, |_| {})
    }

    pub fn with(config: SimConfig, f: impl FnOnce(&mut EngineConfig)) -> Self {
        let cloud = SimCloud::new(config);
        let mut ec = EngineConfig {
            project: "proj".into(),
            ..EngineConfig::default()
        };
        f(&mut ec);
        let engine = Engine::new(ec, ProviderRegistry::simulated(cloud.clone()));
        Self {
            cloud,
            engine,
            state: Deployment::default(),
        }
    }

    fn keep(&mut self, r: Result<Outcome, EngineError>) -> Result<Outcome, EngineError> {
        match &r {
            Ok(o) => self.state = o.snapshot.clone(),
            Err(EngineError::Failed(o)) => self.state = o.snapshot.clone(),
            Err(_) => {}
        }
        if let Err(e) = verify(&self.state) {
            panic!("the state after the operation breaks integrity: {e}");
        }
        r
    }

    pub async fn up(&mut self, resources: Vec<Res>) -> Result<Outcome, EngineError> {
        let r = self
            .engine
            .update(
                self.state.clone(),
                program(resources),
                Box::new(MemoryPersister::new()),
            )
            .await;
        self.keep(r)
    }

    pub async fn preview(&mut self, resources: Vec<Res>) -> Result<Outcome, EngineError> {
        self.engine
            .preview(self.state.clone(), program(resources))
            .await
    }

    pub async fn refresh(&mut self) -> Result<Outcome, EngineError> {
        let r = self
            .engine
            .refresh(self.state.clone(), Box::new(MemoryPersister::new()))
            .await;
        self.keep(r)
    }

    /// A refresh with the operator's options (`--clear-pending-creates`,
    /// `--import-pending-creates`), on the same cloud.
    #[allow(dead_code)]
    pub async fn refresh_with(
        &mut self,
        update: keel::UpdateOptions,
    ) -> Result<Outcome, EngineError> {
        let engine = Engine::new(
            EngineConfig {
                project: "proj".into(),
                update,
                ..EngineConfig::default()
            },
            ProviderRegistry::simulated(self.cloud.clone()),
        );
        let r = engine
            .refresh(self.state.clone(), Box::new(MemoryPersister::new()))
            .await;
        self.keep(r)
    }

    pub async fn destroy(&mut self) -> Result<Outcome, EngineError> {
        let r = self
            .engine
            .destroy(self.state.clone(), Box::new(MemoryPersister::new()))
            .await;
        self.keep(r)
    }

    pub fn urn(&self, name: &str) -> Urn {
        self.state
            .resources
            .iter()
            .find(|s| s.urn.name() == name && !s.delete)
            .unwrap_or_else(|| panic!("no resource named {name}"))
            .urn
            .clone()
    }

    pub fn state_of(&self, name: &str) -> &keel::model::State {
        self.state
            .resources
            .iter()
            .find(|s| s.urn.name() == name && !s.delete)
            .unwrap_or_else(|| panic!("no resource named {name}"))
    }

    pub fn names(&self) -> Vec<String> {
        self.state
            .resources
            .iter()
            .map(|s| s.urn.name().to_owned())
            .collect()
    }
}

pub fn failed(r: Result<Outcome, EngineError>) -> Box<Outcome> {
    match r {
        Err(EngineError::Failed(o)) => o,
        Err(e) => panic!("expected a failed operation, got {e}"),
        Ok(o) => panic!("expected a failure, got success: {:?}", o.summary),
    }
}
