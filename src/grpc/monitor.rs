//! The `ResourceMonitor` and `Engine` services, served on loopback for one
//! operation.
//!
//! Each request is converted ([`super::convert`]) and handed to the
//! operation's [`Context`], exactly as the embedded API and program files
//! do; the handler awaits the engine's answer and converts it back. The
//! handlers hold no lock across an `.await` (the only lock guards the root
//! URN string). Transforms run on the request before it is converted
//! ([`super::transforms`]); a registration's hook binding becomes its goal's
//! hooks ([`super::hooks`]). Features keel does not implement through this
//! front end (output values, byte strings, parameterized packages) are not
//! advertised, so the SDK refuses them itself with its own message; their
//! RPCs are answered `UNIMPLEMENTED`.

use crate::locks::MutexExt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use crate::actors::{Context, RegisterError};
use crate::events::EventSink;
use crate::model::Urn;

use super::callbacks::{CallbackClients, MAX_MESSAGE_BYTES};
use super::convert::{self, Accepts};
use super::hooks::HostedHooks;
use super::pb;
use super::pb::engine_server::{Engine as EngineService, EngineServer};
use super::pb::resource_monitor_server::{ResourceMonitor, ResourceMonitorServer};
use super::transforms::Transforms;

/// The features keel's monitor supports, as `GetDeploymentInfo` lists them.
pub const SUPPORTED_FEATURES: [pb::ResourceMonitorFeature; 9] = [
    pb::ResourceMonitorFeature::Secrets,
    pb::ResourceMonitorFeature::ResourceReferences,
    pb::ResourceMonitorFeature::AliasSpecs,
    pb::ResourceMonitorFeature::DeletedWith,
    pb::ResourceMonitorFeature::StateMigrations,
    pb::ResourceMonitorFeature::Transforms,
    pb::ResourceMonitorFeature::InvokeTransforms,
    pb::ResourceMonitorFeature::ResourceHooks,
    pb::ResourceMonitorFeature::ErrorHooks,
];

/// The same features by their legacy `SupportsFeature` names.
const SUPPORTED_FEATURE_IDS: [&str; 9] = [
    "secrets",
    "resourceReferences",
    "aliasSpecs",
    "deletedWith",
    "stateMigrations",
    "transforms",
    "invokeTransforms",
    "resourceHooks",
    "errorHooks",
];

/// What the monitor tells the SDK about the deployment.
#[derive(Debug, Clone)]
pub struct DeploymentInfo {
    /// The organization (keel has none; SDKs require a value).
    pub organization: String,
    /// Configuration, `project:key` -> value.
    pub config: std::collections::BTreeMap<String, String>,
    /// The config keys whose values are secrets.
    pub config_secret_keys: Vec<String>,
    /// The SDK's registration parallelism.
    pub parallel: i32,
    /// Whether the stack can encrypt secrets. When it cannot, a
    /// registration carrying a secret is refused (keel never writes a
    /// plaintext secret to disk), as program files are before they run.
    pub can_store_secrets: bool,
}

/// The state both services share.
#[derive(Debug)]
struct Shared {
    ctx: Context,
    info: DeploymentInfo,
    callbacks: CallbackClients,
    transforms: Transforms,
    hooks: HostedHooks,
    events: EventSink,
    root: Mutex<String>,
    /// The stack resource's outputs, held until the program ended.
    stack_outputs: Mutex<Option<(Urn, crate::model::PropertyMap)>>,
    /// The server's address, once it listens (sent to `Construct`/`Call`).
    address: std::sync::OnceLock<String>,
    /// Set when the SDK said the program is done (`SignalAndWaitForShutdown`).
    signaled: tokio::sync::watch::Sender<bool>,
    /// The secrets the operation's plugins were sent (they log through
    /// this server too): masked in every log line.
    secrets: super::engine_log::SharedSecrets,
}

/// The monitor: both services over one operation's [`Context`].
#[derive(Debug, Clone)]
pub struct Monitor {
    shared: Arc<Shared>,
}

impl Monitor {
    /// A monitor feeding `ctx`, reporting SDK logs to `events` (every text
    /// of `secrets` masked).
    pub fn new(
        ctx: Context,
        info: DeploymentInfo,
        events: EventSink,
        secrets: super::engine_log::SharedSecrets,
    ) -> Self {
        let callbacks = CallbackClients::default();
        let hooks = HostedHooks::new(callbacks.clone(), events.clone());
        let by_name = hooks.clone();
        ctx.set_hook_resolver(Arc::new(move |names| by_name.resolve(names)));
        Self {
            shared: Arc::new(Shared {
                ctx,
                info,
                hooks,
                callbacks,
                transforms: Transforms::default(),
                events,
                root: Mutex::new(String::new()),
                stack_outputs: Mutex::new(None),
                address: std::sync::OnceLock::new(),
                signaled: tokio::sync::watch::channel(false).0,
                secrets,
            }),
        }
    }

    /// Returns once the SDK said the program is done: it registers nothing
    /// more and waits, serving its hooks, until the operation ends.
    pub async fn signaled(&self) {
        let mut rx = self.shared.signaled.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Applies the stack's outputs the program registered, once it ended
    /// (an SDK registers them even when the program raised), as Pulumi's
    /// engine finalizes them: after a success they replace the prior
    /// outputs; after a failure (`failed`) they are set over the prior
    /// ones, since an output the program did not reach is not a deleted
    /// one. A program that registered none leaves them as they were.
    ///
    /// # Errors
    /// The engine refused them (the operation stopped).
    pub async fn commit_stack_outputs(&self, failed: bool) -> Result<(), RegisterError> {
        let held = self.shared.stack_outputs.locked().take();
        let Some((urn, outputs)) = held else {
            return Ok(());
        };
        let outputs = match (failed, self.shared.ctx.prior_outputs(&urn)) {
            (true, Some(mut prior)) => {
                prior.extend(outputs);
                prior
            }
            _ => outputs,
        };
        self.shared.ctx.register_outputs(&urn, outputs).await
    }
}

impl Shared {
    /// The deployment as [`super::construct`] needs it.
    fn deployment(&self) -> super::construct::Deployment<'_> {
        super::construct::Deployment {
            ctx: &self.ctx,
            info: &self.info,
            monitor: self.address.get().map_or("", String::as_str),
        }
    }
}

/// A registration error as a gRPC status: the SDK raises its message as
/// the program's exception.
fn status(e: &RegisterError) -> Status {
    Status::unknown(e.to_string())
}

fn invalid(e: &impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

impl Shared {
    /// Refuses secrets on a stack that cannot encrypt them.
    fn check_secrets<'a>(
        &self,
        what: impl std::fmt::Display,
        mut values: impl Iterator<Item = &'a crate::model::PropertyValue>,
        secret_outputs: bool,
    ) -> Result<(), Status> {
        if self.info.can_store_secrets || !(secret_outputs || values.any(|v| v.contains_secrets()))
        {
            return Ok(());
        }
        Err(Status::failed_precondition(format!(
            "{what}: {}",
            crate::secrets::SecretsError::NoProvider
        )))
    }
}

#[tonic::async_trait]
impl ResourceMonitor for Monitor {
    async fn get_deployment_info(
        &self,
        _request: Request<()>,
    ) -> Result<Response<pb::DeploymentInfo>, Status> {
        let s = &self.shared;
        Ok(Response::new(pb::DeploymentInfo {
            project: s.ctx.project().to_owned(),
            stack: s.ctx.stack().to_owned(),
            organization: s.info.organization.clone(),
            config: s.info.config.clone().into_iter().collect(),
            config_secret_keys: s.info.config_secret_keys.clone(),
            dry_run: s.ctx.is_preview(),
            parallel: s.info.parallel,
            supported_features: SUPPORTED_FEATURES.iter().map(|f| *f as i32).collect(),
        }))
    }

    async fn supports_feature(
        &self,
        request: Request<pb::SupportsFeatureRequest>,
    ) -> Result<Response<pb::SupportsFeatureResponse>, Status> {
        let id = request.into_inner().id;
        Ok(Response::new(pb::SupportsFeatureResponse {
            has_support: SUPPORTED_FEATURE_IDS.contains(&id.as_str()),
        }))
    }

    async fn invoke(
        &self,
        request: Request<pb::ResourceInvokeRequest>,
    ) -> Result<Response<pb::ResourceInvokeResponse>, Status> {
        let mut req = request.into_inner();
        let s = &self.shared;
        s.transforms
            .apply_invoke(&s.callbacks, &mut req)
            .await
            .map_err(|e| Status::unknown(e.to_string()))?;
        if !super::construct::is_builtin(&req.tok) {
            let d = self.shared.deployment();
            return super::construct::invoke(d, req).await.map(Response::new);
        }
        let accepts = Accepts {
            secrets: true,
            resources: req.accept_resources,
        };
        let args = convert::decode_struct(req.args, "args")
            .map_err(|e| Status::invalid_argument(format!("invoke of {}: {e}", req.tok)))?;
        let result = self
            .shared
            .ctx
            .invoke(&req.tok, args)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(pb::ResourceInvokeResponse {
            r#return: Some(convert::encode_struct(&result, accepts)),
            failures: Vec::new(),
        }))
    }

    async fn read_resource(
        &self,
        request: Request<pb::ReadResourceRequest>,
    ) -> Result<Response<pb::ReadResourceResponse>, Status> {
        let req = request.into_inner();
        let accepts = Accepts {
            secrets: req.accept_secrets,
            resources: req.accept_resources,
        };
        let goal = convert::read_goal(req).map_err(|e| invalid(&e))?;
        let r = self.shared.ctx.read(goal).await.map_err(|e| status(&e))?;
        Ok(Response::new(pb::ReadResourceResponse {
            urn: r.urn.as_str().to_owned(),
            properties: Some(convert::encode_struct(&r.outputs, accepts)),
            id: convert::wire_id(&r.id),
            ..Default::default()
        }))
    }

    async fn register_resource(
        &self,
        request: Request<pb::RegisterResourceRequest>,
    ) -> Result<Response<pb::RegisterResourceResponse>, Status> {
        let mut req = request.into_inner();
        let accepts = Accepts {
            secrets: req.accept_secrets,
            resources: req.accept_resources,
        };
        let s = &self.shared;
        let callbacks = &s.callbacks;
        s.transforms
            .apply(callbacks, &mut req)
            .await
            .map_err(|e| Status::unknown(e.to_string()))?;
        if req.remote && !req.custom {
            // A remote component, transformed, goes to its provider's
            // Construct. Known gap: its hooks binding and own transforms
            // are not passed on to its children yet.
            let d = self.shared.deployment();
            return super::construct::construct(d, req).await.map(Response::new);
        }
        let (own_transforms, parent) = (std::mem::take(&mut req.transforms), req.parent.clone());
        let binding = req.hooks.take();
        let mut goal = convert::goal(req, |cb| callbacks.migration(cb)).map_err(|e| invalid(&e))?;
        // Hooks by name, none included: the state records exactly these.
        let mut hooks = s
            .hooks
            .bind(&binding.unwrap_or_default())
            .map_err(|e| invalid(&e))?;
        hooks.by_name = true;
        goal.options.hooks = Arc::new(hooks);
        self.shared.check_secrets(
            format_args!("{}::{}", goal.ty.as_str(), goal.name),
            goal.inputs.values(),
            !goal.options.additional_secret_outputs.is_empty(),
        )?;
        let r = self
            .shared
            .ctx
            .register(goal)
            .await
            .map_err(|e| status(&e))?;
        s.transforms
            .registered(r.urn.as_str(), &parent, own_transforms);
        Ok(Response::new(pb::RegisterResourceResponse {
            urn: r.urn.as_str().to_owned(),
            id: convert::wire_id(&r.id),
            object: Some(convert::encode_struct(&r.outputs, accepts)),
            ..Default::default()
        }))
    }

    async fn register_resource_outputs(
        &self,
        request: Request<pb::RegisterResourceOutputsRequest>,
    ) -> Result<Response<()>, Status> {
        let req = request.into_inner();
        let urn = Urn::parse(&req.urn).map_err(|e| invalid(&e))?;
        let outputs = convert::decode_struct(req.outputs, "outputs")
            .map_err(|e| Status::invalid_argument(format!("outputs of {urn}: {e}")))?;
        self.shared
            .check_secrets(format_args!("outputs of {urn}"), outputs.values(), false)?;
        if &urn == self.shared.ctx.root() {
            *self.shared.stack_outputs.locked() = Some((urn, outputs));
            return Ok(Response::new(()));
        }
        self.shared
            .ctx
            .register_outputs(&urn, outputs)
            .await
            .map_err(|e| status(&e))?;
        Ok(Response::new(()))
    }

    async fn call(
        &self,
        request: Request<pb::ResourceCallRequest>,
    ) -> Result<Response<pb::CallResponse>, Status> {
        let d = self.shared.deployment();
        super::construct::call(d, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn register_stack_transform(
        &self,
        request: Request<pb::Callback>,
    ) -> Result<Response<()>, Status> {
        let s = &self.shared;
        s.transforms
            .register_stack(request.into_inner())
            .map_err(|e| invalid(&e))?;
        Ok(Response::new(()))
    }

    async fn register_stack_invoke_transform(
        &self,
        request: Request<pb::Callback>,
    ) -> Result<Response<()>, Status> {
        let s = &self.shared;
        s.transforms
            .register_invoke(request.into_inner())
            .map_err(|e| invalid(&e))?;
        Ok(Response::new(()))
    }

    async fn register_resource_hook(
        &self,
        request: Request<pb::RegisterResourceHookRequest>,
    ) -> Result<Response<()>, Status> {
        let s = &self.shared;
        s.hooks
            .register(request.into_inner())
            .map_err(|e| invalid(&e))?;
        Ok(Response::new(()))
    }

    async fn register_error_hook(
        &self,
        request: Request<pb::RegisterErrorHookRequest>,
    ) -> Result<Response<()>, Status> {
        let s = &self.shared;
        s.hooks
            .register_error(request.into_inner())
            .map_err(|e| invalid(&e))?;
        Ok(Response::new(()))
    }

    async fn signal_and_wait_for_shutdown(
        &self,
        _request: Request<()>,
    ) -> Result<Response<()>, Status> {
        // The program is done; it stays to serve the hooks of the steps
        // that run after it (deletes of what it no longer registers).
        self.shared.signaled.send_replace(true);
        self.shared.ctx.finished().await;
        Ok(Response::new(()))
    }
}

#[tonic::async_trait]
impl EngineService for Monitor {
    async fn log(&self, request: Request<pb::LogRequest>) -> Result<Response<()>, Status> {
        if let Some(e) = super::engine_log::log_event(&request.into_inner(), &self.shared.secrets) {
            self.shared.events.send(e);
        }
        Ok(Response::new(()))
    }

    async fn get_root_resource(
        &self,
        _request: Request<pb::GetRootResourceRequest>,
    ) -> Result<Response<pb::GetRootResourceResponse>, Status> {
        let urn = self.shared.root.locked().clone();
        Ok(Response::new(pb::GetRootResourceResponse { urn }))
    }

    async fn set_root_resource(
        &self,
        request: Request<pb::SetRootResourceRequest>,
    ) -> Result<Response<pb::SetRootResourceResponse>, Status> {
        let urn = request.into_inner().urn;
        *self.shared.root.locked() = urn;
        Ok(Response::new(pb::SetRootResourceResponse {}))
    }
}

/// A running monitor server on a loopback port.
#[derive(Debug)]
pub struct MonitorServer {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl MonitorServer {
    /// Starts serving `monitor` on `127.0.0.1` at a free port.
    ///
    /// # Errors
    /// The listening socket could not be opened.
    pub async fn start(monitor: Monitor) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let _ = monitor.shared.address.set(address.to_string());
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let (stop, stopped) = oneshot::channel::<()>();
        let router = tonic::transport::Server::builder()
            .add_service(
                ResourceMonitorServer::new(monitor.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .add_service(
                EngineServer::new(monitor)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            );
        let task = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
            let _ = stopped.await;
        }));
        Ok(Self {
            address,
            stop: Some(stop),
            task,
        })
    }

    /// The address SDKs connect to (`host:port`).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops accepting requests and waits for the server to end.
    ///
    /// # Errors
    /// The server failed while serving.
    pub async fn stop(mut self) -> Result<(), String> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match (&mut self.task).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Drop for MonitorServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
