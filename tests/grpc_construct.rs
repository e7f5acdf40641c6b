//! Remote components, invokes and method calls through keel's resource
//! monitor, without an SDK: a Rust client plays the program and a Rust
//! provider plays the component package's plugin. Its `construct` does what
//! a plugin's SDK does: it connects to the monitor endpoint it was given and
//! registers the component and a child there, while the program's own
//! registration waits for it. The engine admits one registration in flight
//! at a time, so the waiting registration must not hold that slot. A
//! provider that must be configured first (as a plugin) is asked to check a
//! resource only once its default provider's registration finished.

mod common;
#[path = "common/monitor.rs"]
mod monitor;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use keel::engine::{EngineConfig, EngineError, Outcome};
use keel::grpc::pb;
use keel::model::{PropertyMap, PropertyValue, Urn};
use keel::persist::MemoryPersister;
use keel::provider::{
    CallRequest, CallResult, ConstructRequest, ConstructResult, DiffResponse, ObjectState,
    Provider, ProviderError, ProviderRegistry, ResourceRequest, SimCloud, SimConfig,
};
use keel::{Context, Deployment, Engine};
use monitor::Client;
use prost_types::value::Kind;

const ROOT: &str = "urn:pulumi:dev::proj::pulumi:pulumi:Stack::proj-dev";
const THING: &str = "urn:pulumi:dev::proj::comp:index:Thing::thing";
const BUCKET: &str = "urn:pulumi:dev::proj::comp:index:Thing$aws:s3/bucket:Bucket::thing-bucket";

fn string(s: &str) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn fields(pairs: &[(&str, &str)]) -> prost_types::Struct {
    prost_types::Struct {
        fields: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), string(v)))
            .collect(),
    }
}

fn field<'a>(s: &'a Option<prost_types::Struct>, key: &str) -> Option<&'a str> {
    match s.as_ref()?.fields.get(key)?.kind.as_ref()? {
        Kind::StringValue(v) => Some(v),
        _ => None,
    }
}

/// What the component package's provider was asked.
#[derive(Debug, Default)]
struct Seen {
    configured: usize,
    construct: Option<ConstructRequest>,
    call: Option<CallRequest>,
    invoked: Vec<String>,
}

/// The component package `comp`, as a plugin would serve it.
#[derive(Debug, Default)]
struct Comp {
    seen: Mutex<Seen>,
    /// Must be configured before use; configuring takes a while, and a
    /// check before it is refused.
    strict: bool,
}

fn refused(req: &ResourceRequest<'_>) -> ProviderError {
    ProviderError::Failed {
        operation: "create",
        urn: req.urn.clone(),
        message: "comp has no custom resources".into(),
    }
}

#[async_trait]
impl Provider for Comp {
    fn package(&self) -> &str {
        "comp"
    }
    fn configure_before_use(&self) -> bool {
        self.strict
    }
    async fn configure(&self, _inputs: &PropertyMap) -> keel::provider::Result<()> {
        if self.strict {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.seen.lock().unwrap().configured += 1;
        Ok(())
    }
    async fn check(&self, req: ResourceRequest<'_>) -> keel::provider::Result<PropertyMap> {
        if !self.strict {
            return Err(refused(&req));
        }
        if self.seen.lock().unwrap().configured == 0 {
            return Err(ProviderError::CheckFailed {
                urn: req.urn.clone(),
                failures: vec!["checked before Configure".into()],
            });
        }
        Ok(req.inputs.clone())
    }
    async fn diff(&self, req: ResourceRequest<'_>) -> keel::provider::Result<DiffResponse> {
        Err(refused(&req))
    }
    async fn create(&self, req: ResourceRequest<'_>) -> keel::provider::Result<ObjectState> {
        if !self.strict {
            return Err(refused(&req));
        }
        Ok(ObjectState {
            id: "w-1".into(),
            inputs: req.inputs.clone(),
            outputs: req.inputs.clone(),
        })
    }
    async fn read(&self, req: ResourceRequest<'_>) -> keel::provider::Result<Option<ObjectState>> {
        Err(refused(&req))
    }
    async fn update(&self, req: ResourceRequest<'_>) -> keel::provider::Result<ObjectState> {
        Err(refused(&req))
    }
    async fn delete(&self, req: ResourceRequest<'_>) -> keel::provider::Result<()> {
        Err(refused(&req))
    }

    async fn invoke(
        &self,
        token: &str,
        args: &PropertyMap,
        _preview: bool,
    ) -> keel::provider::Result<PropertyMap> {
        self.seen.lock().unwrap().invoked.push(token.to_owned());
        let mut out = args.clone();
        out.insert("via".into(), PropertyValue::String("comp".into()));
        Ok(out)
    }

    /// Registers the component and a bucket under it through the monitor
    /// it was given, as a plugin's SDK does.
    async fn construct(&self, req: ConstructRequest) -> keel::provider::Result<ConstructResult> {
        let fail = |message: String| ProviderError::Call {
            operation: "construct",
            target: req.name.clone(),
            message,
        };
        self.seen.lock().unwrap().construct = Some(req.clone());
        let mut monitor = Client::connect(format!("http://{}", req.context.monitor_endpoint))
            .await
            .map_err(|e| fail(e.to_string()))?;
        let component = monitor
            .register_resource(pb::RegisterResourceRequest {
                r#type: req.ty.clone(),
                name: req.name.clone(),
                parent: req.parent.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| fail(e.to_string()))?
            .into_inner();
        let bucket = monitor
            .register_resource(pb::RegisterResourceRequest {
                r#type: "aws:s3/bucket:Bucket".into(),
                name: format!("{}-bucket", req.name),
                parent: component.urn.clone(),
                custom: true,
                object: Some(fields(&[("acl", "private")])),
                ..Default::default()
            })
            .await
            .map_err(|e| fail(e.to_string()))?
            .into_inner();
        let mut state = PropertyMap::new();
        state.insert("bucketId".into(), PropertyValue::String(bucket.id));
        monitor
            .register_resource_outputs(pb::RegisterResourceOutputsRequest {
                urn: component.urn.clone(),
                outputs: Some(fields(&[("bucketId", "set")])),
            })
            .await
            .map_err(|e| fail(e.to_string()))?;
        Ok(ConstructResult {
            urn: component.urn,
            state,
            state_dependencies: BTreeMap::from([("bucketId".to_owned(), vec![bucket.urn])]),
        })
    }

    async fn call(&self, req: CallRequest) -> keel::provider::Result<CallResult> {
        self.seen.lock().unwrap().call = Some(req.clone());
        let mut ret = PropertyMap::new();
        ret.insert(
            "answer".into(),
            PropertyValue::String(format!("called {}", req.token)),
        );
        Ok(CallResult {
            ret,
            ..Default::default()
        })
    }
}

/// Runs the client script as an update's program with one registration in
/// flight at a time; `comp` is served by `comp`, every other package by
/// the simulated cloud.
async fn run(comp: Arc<Comp>) -> (Result<Outcome, EngineError>, Vec<String>) {
    let cloud = SimCloud::new(SimConfig::default());
    let served = comp.clone();
    let registry = ProviderRegistry::new(Arc::new(move |pkg: &str| -> Arc<dyn Provider> {
        if pkg == "comp" {
            served.clone()
        } else {
            cloud.provider(pkg)
        }
    }));
    let config = EngineConfig {
        project: "proj".into(),
        max_in_flight_registrations: 1,
        ..EngineConfig::default()
    };
    let engine = Engine::new(config, registry);
    let answers = Arc::new(Mutex::new(Vec::new()));
    let said = answers.clone();
    let program = move |ctx: Context| {
        let said = said.clone();
        async move {
            let (server, mut client) = monitor::serve(ctx).await?;
            let address = server.address().to_string();
            let thing = client
                .register_resource(pb::RegisterResourceRequest {
                    r#type: "comp:index:Thing".into(),
                    name: "thing".into(),
                    remote: true,
                    object: Some(fields(&[("size", "large")])),
                    accept_secrets: true,
                    accept_resources: true,
                    ..Default::default()
                })
                .await
                .expect("the remote component's registration")
                .into_inner();
            let deps = thing
                .property_dependencies
                .get("bucketId")
                .map(|d| d.urns.join(","))
                .unwrap_or_default();
            let invoked = client
                .invoke(pb::ResourceInvokeRequest {
                    tok: "comp:index:echo".into(),
                    args: Some(fields(&[("text", "hi")])),
                    ..Default::default()
                })
                .await
                .expect("the invoke")
                .into_inner();
            let called = client
                .call(pb::ResourceCallRequest {
                    tok: "comp:index:Thing/answer".into(),
                    args: Some(fields(&[("__self__", THING)])),
                    ..Default::default()
                })
                .await
                .expect("the call")
                .into_inner();
            said.lock().unwrap().extend([
                address,
                thing.urn,
                field(&thing.object, "bucketId").unwrap_or("").to_owned(),
                deps,
                field(&invoked.r#return, "via").unwrap_or("").to_owned(),
                field(&called.r#return, "answer").unwrap_or("").to_owned(),
            ]);
            server.stop().await?;
            Ok(())
        }
    };
    let update = engine.update(
        Deployment::default(),
        program,
        Box::new(MemoryPersister::new()),
    );
    // A deadlock would hang: fail instead.
    let r = tokio::time::timeout(Duration::from_secs(120), update)
        .await
        .expect("the update finished (no registration waits on a slot the construct holds)");
    let said = answers.lock().unwrap().clone();
    (r, said)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_component_is_built_by_its_provider_through_the_monitor() {
    let comp = Arc::new(Comp::default());
    let (r, said) = run(comp.clone()).await;
    let outcome = r.expect("the update succeeds");
    let [address, urn, bucket_id, deps, via, answer] = said.as_slice() else {
        panic!("the program's answers: {said:?}");
    };
    // The program's registration is answered with what the provider built.
    assert_eq!(urn, THING);
    assert!(!bucket_id.is_empty(), "the bucket's ID: {said:?}");
    assert_eq!(deps, BUCKET);
    // The invoke and the call went to the package's provider.
    assert_eq!(via, "comp");
    assert_eq!(answer, "called comp:index:Thing/answer");
    let seen = comp.seen.lock().unwrap();
    assert_eq!(seen.invoked, ["comp:index:echo"]);
    // The default provider was registered and configured first.
    assert_eq!(seen.configured, 1);
    let construct = seen.construct.as_ref().expect("construct was called");
    assert_eq!(construct.context.monitor_endpoint, *address);
    assert_eq!(construct.context.project, "proj");
    assert_eq!(construct.context.stack, "dev");
    assert_eq!(construct.context.organization, "org");
    assert_eq!(construct.parent, ROOT, "no parent given: the stack");
    assert_eq!(
        construct.inputs.get("size"),
        Some(&PropertyValue::String("large".into()))
    );
    let call = seen.call.as_ref().expect("call was called");
    assert_eq!(call.context.monitor_endpoint, *address);
    assert_eq!(
        call.args.get("__self__"),
        Some(&PropertyValue::String(THING.into()))
    );
    // The component and its child are in the state, the child under it.
    let states = &outcome.snapshot.resources;
    let find = |urn: &str| {
        states
            .iter()
            .find(|s| s.urn == Urn::parse(urn).unwrap())
            .unwrap_or_else(|| panic!("{urn} in {states:#?}"))
    };
    assert!(!find(THING).custom);
    assert_eq!(find(BUCKET).parent, Urn::parse(THING).unwrap());
    find("urn:pulumi:dev::proj::pulumi:providers:comp::default");
}

/// An invoke naming an explicit provider goes to that provider resource's
/// instance (no default provider is registered for it); a malformed
/// reference is an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invoke_with_an_explicit_provider_uses_it() {
    let made = Arc::new(Mutex::new(Vec::<Arc<Comp>>::new()));
    let record = made.clone();
    let registry = ProviderRegistry::new(Arc::new(move |_pkg: &str| -> Arc<dyn Provider> {
        let comp = Arc::new(Comp::default());
        record.lock().unwrap().push(comp.clone());
        comp
    }));
    let config = EngineConfig {
        project: "proj".into(),
        ..EngineConfig::default()
    };
    let engine = Engine::new(config, registry);
    let errors = Arc::new(Mutex::new(Vec::new()));
    let said = errors.clone();
    let program = move |ctx: Context| {
        let said = said.clone();
        async move {
            let (server, mut client) = monitor::serve(ctx).await?;
            let mine = client
                .register_resource(pb::RegisterResourceRequest {
                    r#type: "pulumi:providers:comp".into(),
                    name: "mine".into(),
                    custom: true,
                    ..Default::default()
                })
                .await
                .expect("the provider's registration")
                .into_inner();
            let invoke = |provider: String| pb::ResourceInvokeRequest {
                tok: "comp:index:echo".into(),
                args: Some(fields(&[("text", "hi")])),
                provider,
                ..Default::default()
            };
            client
                .invoke(invoke(format!("{}::{}", mine.urn, mine.id)))
                .await
                .expect("the invoke");
            let refused = client
                .invoke(invoke("garbage".into()))
                .await
                .expect_err("a malformed reference");
            said.lock().unwrap().push(refused.message().to_owned());
            server.stop().await?;
            Ok(())
        }
    };
    let outcome = engine
        .update(
            Deployment::default(),
            program,
            Box::new(MemoryPersister::new()),
        )
        .await
        .expect("the update succeeds");
    let errors = errors.lock().unwrap().clone();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("provider reference `garbage`"),
        "{errors:?}"
    );
    // One instance, the explicit provider's: configured, then invoked.
    let made = made.lock().unwrap();
    assert_eq!(made.len(), 1);
    let seen = made[0].seen.lock().unwrap();
    assert_eq!(seen.configured, 1);
    assert_eq!(seen.invoked, ["comp:index:echo"]);
    assert!(
        outcome
            .snapshot
            .resources
            .iter()
            .all(|s| !s.urn.as_str().ends_with("::default")),
        "no default provider: {:#?}",
        outcome.snapshot.resources
    );
}

/// A provider that must be configured before use is asked to check a
/// resource only once its (new, slowly configured) default provider's
/// registration finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_like_provider_is_configured_before_its_first_check() {
    let comp = Arc::new(Comp {
        strict: true,
        ..Comp::default()
    });
    let served = comp.clone();
    let registry = ProviderRegistry::new(Arc::new(move |_pkg: &str| -> Arc<dyn Provider> {
        served.clone()
    }));
    let config = EngineConfig {
        project: "proj".into(),
        ..EngineConfig::default()
    };
    let engine = Engine::new(config, registry);
    let program = |ctx: Context| async move {
        let ty = keel::TypeToken::parse("comp:index:Widget").expect("a type");
        ctx.register(keel::Goal::custom(ty, "widget", PropertyMap::new()))
            .await?;
        Ok(())
    };
    let outcome = engine
        .update(
            Deployment::default(),
            program,
            Box::new(MemoryPersister::new()),
        )
        .await
        .expect("the widget's check came after Configure");
    assert!(outcome
        .snapshot
        .resources
        .iter()
        .any(|s| s.urn.as_str().ends_with("::widget") && s.id == "w-1"));
}
