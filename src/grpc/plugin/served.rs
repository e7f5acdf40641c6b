//! A package served by a real plugin within one operation:
//! [`PluginServed`] is a keel [`Provider`] that finds and starts its
//! plugin on first use (discovery with the provider's `version` input, or
//! a fixed launch such as the dynamic-provider server), forwards every call
//! to a [`PluginProvider`] over it, and stops it when the operation ends
//! ([`Provider::shutdown`]). Dropping it kills the plugin's process group.
//!
//! A plugin that cannot be found or started fails every call with
//! [`ProviderError::Failed`] naming the package, the version and where keel
//! looked; it is not retried within the operation.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::client::PluginProvider;
use super::discovery::{self, DiscoveryEnv, PluginKind, PluginLaunch, PluginSource};
use super::host::{Diagnostic, HostOptions, PluginProcess, Stream};
use crate::events::{EngineEvent, EventSink};
use crate::locks::MutexExt;
use crate::model::{PropertyMap, PropertyValue, TypeToken, Urn};
use crate::provider::{
    CallRequest, CallResult, ConstructRequest, ConstructResult, DiffConfigRequest, DiffResponse,
    ObjectState, Provider, ProviderError, ResourceRequest, Result, SchemaInfo, SchemaState,
};
use crate::source::migration::Redactor;

/// How long a plugin has to stop after the interrupt before it is killed.
const GRACE: Duration = Duration::from_secs(5);

/// Where the plugin comes from.
#[derive(Debug, Clone)]
enum Source {
    /// Discovered for the package (and the configured version).
    Discover(Box<DiscoveryEnv>),
    /// Always this launch.
    Fixed(Box<PluginLaunch>),
}

/// A running plugin and keel's client of it.
#[derive(Debug)]
struct Running {
    /// Taken by [`Provider::shutdown`].
    process: Mutex<Option<PluginProcess>>,
    provider: PluginProvider,
}

/// A package's provider, served by a plugin started on first use.
#[derive(Debug)]
pub struct PluginServed {
    package: String,
    source: Source,
    /// The version the provider resource asked for (its `version` input).
    version: Mutex<Option<String>>,
    /// The provider resource's environment variable remappings (`NEW ->
    /// OLD`, its `__internal.envVarMappings`), applied when the plugin
    /// starts.
    env_mappings: Mutex<Vec<(String, String)>>,
    running: OnceCell<std::result::Result<Running, String>>,
    default_urn: Urn,
    /// Where the plugin's output lines go besides tracing.
    events: Option<EventSink>,
    /// The operation's Engine server, given to the plugin when it starts.
    engine: Option<crate::grpc::construct::EngineAddress>,
    /// A package declaration that makes this package a parameterization
    /// of a base plugin (its `parameterization`): the base plugin is
    /// started and sent `Parameterize` before anything else.
    declared: Option<Box<crate::provider::package::PackageDecl>>,
    /// The plaintexts of the secrets sent to the plugin so far (its
    /// configuration's, each request's): masked as `[secret]` in its errors
    /// and in the lines it prints, which may quote them (shared with its
    /// process, which masks each line with what it holds then).
    secrets: Arc<Mutex<Redactor>>,
}

/// The property maps a resource request sends.
fn sent<'a>(req: &ResourceRequest<'a>) -> impl Iterator<Item = &'a PropertyMap> {
    [Some(req.inputs), req.old_inputs, req.old_outputs]
        .into_iter()
        .flatten()
}

impl PluginServed {
    /// `package`, served by the plugin discovery finds in `env`.
    pub fn discovered(package: impl Into<String>, env: DiscoveryEnv) -> Self {
        Self::with_source(package.into(), Source::Discover(Box::new(env)))
    }

    /// `package`, served by starting `launch`.
    pub fn fixed(package: impl Into<String>, launch: PluginLaunch) -> Self {
        Self::with_source(package.into(), Source::Fixed(Box::new(launch)))
    }

    /// Pulumi's dynamic providers (package `pulumi-python`), served as
    /// Pulumi's `pulumi-resource-pulumi-python` does: `<python> -u -m
    /// pulumi.dynamic`, with `python` the program's interpreter, in
    /// `dir` (the program's directory).
    pub fn python_dynamic(python: impl AsRef<Path>, dir: Option<&Path>) -> Self {
        let launch = PluginLaunch {
            package: DYNAMIC_PYTHON.to_owned(),
            version: None,
            found_version: None,
            program: python.as_ref().to_owned(),
            args: vec!["-u".into(), "-m".into(), "pulumi.dynamic".into()],
            dir: dir.map(Path::to_owned),
            env: Vec::new(),
            source: PluginSource::Path(python.as_ref().to_owned()),
            kind: PluginKind::Python,
        };
        Self::fixed(DYNAMIC_PYTHON, launch)
    }

    fn with_source(package: String, source: Source) -> Self {
        let default_urn = Urn::parse(&format!(
            "urn:pulumi:keel::keel::pulumi:providers:{package}::default"
        ))
        .unwrap_or_else(|_| {
            Urn::parse("urn:pulumi:keel::keel::pulumi:providers:unknown::default")
                .expect("a valid URN")
        });
        Self {
            package,
            source,
            version: Mutex::new(None),
            env_mappings: Mutex::new(Vec::new()),
            running: OnceCell::new(),
            default_urn,
            events: None,
            engine: None,
            declared: None,
            secrets: Arc::default(),
        }
    }

    /// Learns the secrets among `maps`, about to be sent: the plugin's
    /// process masks them in every line it prints from now on.
    fn sending<'m>(&self, maps: impl IntoIterator<Item = &'m PropertyMap>) {
        let mut r = self.secrets.locked();
        for m in maps.into_iter().filter(|m| m.may_hold_signed()) {
            r.collect_values(m.values());
        }
    }

    /// `e` with every secret sent to the plugin so far masked.
    fn redacted(&self, e: ProviderError) -> ProviderError {
        e.redacted(&self.secrets.locked())
    }

    /// The same provider, for a package `decl` declares as a
    /// parameterization of its base plugin (a declaration without a
    /// `parameterization`, or of another package, changes nothing).
    pub fn with_declaration(mut self, decl: &crate::provider::package::PackageDecl) -> Self {
        if decl.parameterization.is_some() && decl.namespace() == self.package {
            self.declared = Some(Box::new(decl.clone()));
        }
        self
    }

    /// The same provider, learning the secrets it sends into `shared` (the
    /// operation's, which its Engine server masks plugins' logs with)
    /// instead of a redactor of its own.
    #[must_use]
    pub fn with_secrets(mut self, shared: crate::grpc::engine_log::SharedSecrets) -> Self {
        self.secrets = shared;
        self
    }

    /// The same provider, its plugin's output lines also sent to `events`
    /// as `info` diagnostics (`[pulumi-resource-<pkg>] <line>`).
    #[must_use]
    pub fn with_events(mut self, events: EventSink) -> Self {
        self.events = Some(events);
        self
    }

    /// The same provider, its plugin started with the address `engine`
    /// holds then (the operation's `pulumirpc.Engine` server) as its last
    /// argument, as Pulumi starts plugins: their SDK logs through it.
    #[must_use]
    pub fn with_engine(mut self, engine: crate::grpc::construct::EngineAddress) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Whether the plugin was started (successfully) in this operation.
    pub fn started(&self) -> bool {
        matches!(self.running.get(), Some(Ok(_)))
    }

    /// The running plugin's client, started now if need be.
    async fn provider(&self, operation: &'static str, urn: &Urn) -> Result<&PluginProvider> {
        let running = self.running.get_or_init(|| self.start()).await;
        match running {
            Ok(r) => Ok(&r.provider),
            Err(message) => Err(ProviderError::Failed {
                operation,
                urn: urn.clone(),
                message: message.clone(),
            }),
        }
    }

    async fn start(&self) -> std::result::Result<Running, String> {
        // A parameterized package is served by its base plugin, at the
        // base's declared version.
        let (plugin, version) = match &self.declared {
            Some(d) => (d.name.clone(), d.version.clone()),
            None => (self.package.clone(), self.version.locked().clone()),
        };
        let mut launch = match &self.source {
            Source::Fixed(l) => (**l).clone(),
            Source::Discover(env) => discovery::find(env, &plugin, version.as_deref())
                .map_err(|e| format!("cannot serve package `{}`: {e}", self.package))?,
        };
        // `envVarMappings`: the plugin sees OLD with NEW's value (as
        // Pulumi's `buildEnvWithMappings`), over what it would inherit.
        for (new, old) in self.env_mappings.locked().iter() {
            if let Some(value) = std::env::var_os(new) {
                launch.env.push((old.into(), value));
            }
        }
        let events = self.events.clone();
        let engine = self
            .engine
            .as_ref()
            .and_then(crate::grpc::construct::EngineAddress::get);
        // As Pulumi: a dynamic-provider plugin's lines are shown; an
        // ordinary plugin's are debug output (shown with `--debug`), such
        // as what a Python provider server prints as it is interrupted.
        let severity = if is_dynamic(&self.package) {
            "info"
        } else {
            "debug"
        };
        let diagnostics = move |d: Diagnostic| {
            if let Some(events) = &events {
                events.send(EngineEvent::Diagnostic {
                    severity: severity.into(),
                    urn: None,
                    message: format!("[{}] {}", discovery::executable_name(&d.package), d.line),
                });
            }
            log_diagnostic(d);
        };
        let process = PluginProcess::start_redacting(
            &launch,
            engine.as_deref(),
            Arc::new(diagnostics),
            HostOptions::default(),
            Arc::clone(&self.secrets),
        )
        .await
        .map_err(|e| {
            format!(
                "cannot serve package `{}`{} with {}: {e}",
                self.package,
                version.map(|v| format!(" v{v}")).unwrap_or_default(),
                launch.describe()
            )
        })?;
        let dir = launch
            .dir
            .as_deref()
            .or_else(|| launch.program.parent())
            .map(|d| d.display().to_string());
        let provider = PluginProvider::connect(
            self.package.clone(),
            process.channel(),
            engine.as_deref(),
            dir.as_deref(),
        )
        .await
        .map_err(|e| format!("cannot serve package `{}`: {e}", self.package))?;
        if let Some(p) = self
            .declared
            .as_ref()
            .and_then(|d| d.parameterization.as_ref())
        {
            provider
                .parameterize(&p.name, &p.version, &p.value)
                .await
                .map_err(|e| {
                    format!(
                        "cannot serve package `{}` (a parameterization of plugin `{plugin}`): {e}",
                        self.package
                    )
                })?;
        }
        tracing::debug!(
            "started {} for package `{}`",
            launch.describe(),
            self.package
        );
        Ok(Running {
            process: Mutex::new(Some(process)),
            provider,
        })
    }
}

/// The package of Pulumi's Python dynamic providers.
pub const DYNAMIC_PYTHON: &str = "pulumi-python";

/// True for the packages of dynamic providers (code in the program),
/// whose plugins' output Pulumi shows (spec §1).
fn is_dynamic(package: &str) -> bool {
    package == DYNAMIC_PYTHON || package == "pulumi-nodejs"
}

/// A plugin's output line, as a tracing event.
#[allow(clippy::needless_pass_by_value)]
fn log_diagnostic(d: Diagnostic) {
    match d.stream {
        Stream::Stderr => tracing::warn!(package = %d.package, "plugin: {}", d.line),
        Stream::Stdout => tracing::info!(package = %d.package, "plugin: {}", d.line),
    }
}

#[async_trait]
impl Provider for PluginServed {
    fn serving(&self) -> crate::provider::Serving {
        crate::provider::Serving::Plugin
    }

    fn package(&self) -> &str {
        &self.package
    }

    async fn configure(&self, inputs: &PropertyMap) -> Result<()> {
        if self.running.get().is_none() {
            if let Some(PropertyValue::String(v)) = inputs.get("version") {
                *self.version.locked() = Some(v.clone());
            }
            *self.env_mappings.locked() = crate::plan::providers::env_var_mappings(inputs);
        }
        self.sending([inputs]);
        let r = self.provider("configure", &self.default_urn).await;
        r?.configure(inputs).await.map_err(|e| self.redacted(e))
    }

    async fn check(&self, req: ResourceRequest<'_>) -> Result<PropertyMap> {
        self.sending(sent(&req));
        let r = self.provider("check", req.urn).await?.check(req).await;
        r.map_err(|e| self.redacted(e))
    }

    async fn diff(&self, req: ResourceRequest<'_>) -> Result<DiffResponse> {
        self.sending(sent(&req));
        let r = self.provider("diff", req.urn).await?.diff(req).await;
        r.map_err(|e| self.redacted(e))
    }

    async fn diff_config(&self, req: DiffConfigRequest<'_>) -> Result<DiffResponse> {
        self.sending([req.old_inputs, req.old_outputs, req.new_inputs]);
        let r = self.provider("diff", &self.default_urn).await;
        r?.diff_config(req).await.map_err(|e| self.redacted(e))
    }

    async fn create(&self, req: ResourceRequest<'_>) -> Result<ObjectState> {
        self.sending(sent(&req));
        let r = self.provider("create", req.urn).await?.create(req).await;
        r.map_err(|e| self.redacted(e))
    }

    async fn read(&self, req: ResourceRequest<'_>) -> Result<Option<ObjectState>> {
        self.sending(sent(&req));
        let r = self.provider("read", req.urn).await?.read(req).await;
        r.map_err(|e| self.redacted(e))
    }

    async fn update(&self, req: ResourceRequest<'_>) -> Result<ObjectState> {
        self.sending(sent(&req));
        let r = self.provider("update", req.urn).await?.update(req).await;
        r.map_err(|e| self.redacted(e))
    }

    async fn delete(&self, req: ResourceRequest<'_>) -> Result<()> {
        self.sending(sent(&req));
        let r = self.provider("delete", req.urn).await?.delete(req).await;
        r.map_err(|e| self.redacted(e))
    }

    async fn find(&self, urn: &Urn, ty: &TypeToken) -> Result<Option<ObjectState>> {
        self.provider("read", urn).await?.find(urn, ty).await
    }

    fn configure_before_use(&self) -> bool {
        true
    }

    async fn invoke(&self, token: &str, args: &PropertyMap, preview: bool) -> Result<PropertyMap> {
        self.sending([args]);
        let p = self.provider("invoke", &self.default_urn).await?;
        let r = Provider::invoke(p, token, args, preview).await;
        r.map_err(|e| self.redacted(e))
    }

    async fn returns_scalar(&self, token: &str) -> bool {
        match self.running.get() {
            Some(Ok(r)) => r.provider.returns_scalar(token).await,
            _ => false,
        }
    }

    async fn schema_token(&self, token: &str) -> Option<String> {
        match self.running.get() {
            Some(Ok(r)) => r.provider.schema_token(token).await,
            _ => None,
        }
    }

    async fn construct(&self, req: ConstructRequest) -> Result<ConstructResult> {
        self.sending([&req.inputs]);
        let r = self.provider("construct", &self.default_urn).await;
        r?.construct(req).await.map_err(|e| self.redacted(e))
    }

    async fn call(&self, req: CallRequest) -> Result<CallResult> {
        self.sending([&req.args]);
        let r = self.provider("call", &self.default_urn).await;
        match r?.call(req).await {
            // Its invalid-argument failures are its words too.
            Ok(mut result) => {
                let secrets = self.secrets.locked();
                for f in &mut result.failures {
                    *f = secrets.redact(f);
                }
                Ok(result)
            }
            Err(e) => Err(self.redacted(e)),
        }
    }

    async fn find_all(&self, urn: &Urn, ty: &TypeToken) -> Result<Vec<ObjectState>> {
        self.provider("read", urn).await?.find_all(urn, ty).await
    }

    fn schema(&self, ty: &TypeToken) -> Option<SchemaInfo> {
        // Asking would start the plugin; only a running one is asked.
        match self.running.get() {
            Some(Ok(r)) => r.provider.schema(ty),
            _ => None,
        }
    }

    async fn migrate_state(
        &self,
        urn: &Urn,
        ty: &TypeToken,
        old_version: u64,
        state: SchemaState,
    ) -> Result<SchemaState> {
        self.sending([&state.inputs, &state.outputs]);
        let r = self.provider("migrate", urn).await;
        let r = r?.migrate_state(urn, ty, old_version, state).await;
        r.map_err(|e| self.redacted(e))
    }

    async fn cancel(&self) {
        // A plugin not started has nothing to cancel.
        if let Some(Ok(r)) = self.running.get() {
            if let Err(e) = r.provider.cancel().await {
                tracing::debug!("Cancel to the plugin of `{}`: {e}", self.package);
            }
        }
    }

    async fn shutdown(&self) {
        if let Some(Ok(r)) = self.running.get() {
            let process = r.process.locked().take();
            if let Some(p) = process {
                let stopped = p.shutdown(GRACE).await;
                tracing::debug!("stopped the plugin of `{}`: {stopped:?}", self.package);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urn() -> Urn {
        Urn::parse("urn:pulumi:dev::p::aws:s3/bucket:Bucket::b").expect("urn")
    }

    #[tokio::test]
    async fn a_missing_plugin_fails_every_call_naming_package_version_and_places() {
        let env = DiscoveryEnv {
            path: Some(std::ffi::OsString::from("/nonexistent-keel-dir")),
            ..DiscoveryEnv::default()
        };
        let p = PluginServed::discovered("aws", env);
        let mut config = PropertyMap::new();
        config.insert("version".into(), PropertyValue::String("6.1.0".into()));
        let err = p.configure(&config).await.expect_err("no plugin");
        let text = err.to_string();
        assert!(text.contains("`aws`"), "{text}");
        assert!(text.contains("v6.1.0"), "{text}");
        assert!(text.contains("/nonexistent-keel-dir"), "{text}");
        assert!(!p.started());
        let ty = TypeToken::parse("aws:s3/bucket:Bucket").expect("type");
        let inputs = PropertyMap::new();
        let err = p
            .create(ResourceRequest::new(&urn(), &ty, "", &inputs))
            .await
            .expect_err("no plugin");
        assert!(matches!(
            err,
            ProviderError::Failed {
                operation: "create",
                ..
            }
        ));
        // Nothing runs: shutting down is a no-op.
        p.shutdown().await;
    }

    #[tokio::test]
    async fn the_secrets_a_provider_sends_are_the_operations_to_mask() {
        use crate::model::property::Secret;
        let shared = crate::grpc::engine_log::SharedSecrets::default();
        let env = DiscoveryEnv {
            path: Some(std::ffi::OsString::from("/nonexistent-keel-dir")),
            ..DiscoveryEnv::default()
        };
        let p = PluginServed::discovered("aws", env).with_secrets(shared.clone());
        let mut config = PropertyMap::new();
        let key = PropertyValue::String("sk-live-1234".into());
        config.insert(
            "secretKey".into(),
            PropertyValue::Secret(Secret::plaintext(key)),
        );
        // Learnt before the call, which fails (no plugin here).
        assert!(p.configure(&config).await.is_err());
        assert!(shared.locked().texts().iter().any(|t| t == "sk-live-1234"));
        // What a plugin logs through the operation's Engine server.
        let said = crate::grpc::pb::LogRequest {
            message: "using key sk-live-1234".into(),
            ..Default::default()
        };
        let Some(crate::events::EngineEvent::Diagnostic { message, .. }) =
            crate::grpc::engine_log::log_event(&said, &shared)
        else {
            panic!("a diagnostic");
        };
        assert_eq!(message, "using key [secret]");
    }

    /// A method's failures and errors are the plugin's words: the secrets
    /// it was sent are masked in them.
    #[tokio::test]
    async fn a_methods_failures_never_carry_the_secrets_it_was_sent() {
        use super::super::client::tests::fake;
        use crate::model::property::Secret;
        let f = fake::Fake {
            call_quotes: true,
            ..fake::Fake::default()
        };
        let provider = PluginProvider::connect("fake", fake::serve(f).await, None, None)
            .await
            .expect("connect");
        let p = PluginServed::discovered("fake", DiscoveryEnv::default());
        let running = Running {
            process: Mutex::new(None),
            provider,
        };
        assert!(p.running.set(Ok(running)).is_ok());
        let password = PropertyValue::String("hunter2-keel-secret".into());
        let mut args = PropertyMap::new();
        args.insert(
            "password".into(),
            PropertyValue::Secret(Secret::plaintext(password)),
        );
        let call = |args: PropertyMap| CallRequest {
            context: crate::provider::RemoteContext::default(),
            token: "fake:index:Thing/rotate".into(),
            args,
            arg_dependencies: std::collections::BTreeMap::new(),
        };
        let result = p.call(call(args.clone())).await.expect("answered");
        let [failure] = result.failures.as_slice() else {
            panic!("one failure: {:?}", result.failures);
        };
        assert!(failure.contains("too weak"), "{failure}");
        assert!(failure.contains("[secret]"), "{failure}");
        assert!(!failure.contains("hunter2-keel-secret"), "{failure}");
        args.insert("fail".into(), PropertyValue::Bool(true));
        let err = p.call(call(args)).await.expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("cannot call with"), "{text}");
        assert!(text.contains("[secret]"), "{text}");
        assert!(!text.contains("hunter2-keel-secret"), "{text}");
    }

    #[tokio::test]
    async fn a_plugin_that_cannot_start_names_the_launch() {
        let p = PluginServed::python_dynamic("/nonexistent-keel-python", None);
        let err = p
            .configure(&PropertyMap::new())
            .await
            .expect_err("cannot start");
        let text = err.to_string();
        assert!(text.contains("pulumi-python"), "{text}");
        assert!(text.contains("/nonexistent-keel-python"), "{text}");
    }
}
