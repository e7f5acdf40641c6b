//! What the resource monitor sends on to providers: invokes of package
//! functions, remote components (`RegisterResource` with `remote: true`,
//! answered by the provider's `Construct`) and their methods (`Call`).
//!
//! Each resolves its provider through [`Context::provider`]: the explicit
//! reference the SDK sent, else the package's default provider, which is
//! registered first if nothing asked for it yet and awaited until its
//! registration finished (so the instance is configured), as Pulumi's
//! engine does. Only `pulumi:pulumi:*` functions (and the rest of package
//! `pulumi`) stay with the engine's built-ins.
//!
//! A Construct runs the provider's own SDK, which registers the component
//! and its children back into the same monitor while the outer request
//! waits: the outer request holds no registration slot
//! ([`Context::provider`] releases its slot before it returns), so the
//! inner registrations proceed. The component's URN, outputs and output
//! dependencies come back from the provider and answer the program's
//! registration; keel does not register the component itself.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tonic::Status;

use crate::actors::{Context, ProviderQuery};
use crate::locks::MutexExt;
use crate::provider::{CallRequest, ConstructRequest, RemoteContext};

use super::convert::{self, Accepts};
use super::monitor::DeploymentInfo;
use super::pb;

/// The address of the operation's `pulumirpc.Engine` server, once one runs
/// (a Python program's monitor): plugins started meanwhile get it as their
/// last argument, as Pulumi's do (their SDK logs through it). Clones share
/// one cell.
#[derive(Debug, Clone, Default)]
pub struct EngineAddress(Arc<Mutex<Option<String>>>);

impl EngineAddress {
    /// A cell holding no address yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets (or, with `None`, clears) the address.
    pub fn set(&self, address: Option<String>) {
        *self.0.locked() = address;
    }

    /// The address, when an Engine server runs.
    pub fn get(&self) -> Option<String> {
        self.0.locked().clone()
    }
}

/// The package of a function, type or method token (`pkg:module:name`).
pub fn package_of(token: &str) -> &str {
    token.split(':').next().unwrap_or(token)
}

/// True for the functions the engine answers itself (package `pulumi`).
pub fn is_builtin(token: &str) -> bool {
    package_of(token) == "pulumi"
}

fn nonempty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// What the monitor's handlers share with this module.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deployment<'a> {
    /// The operation.
    pub ctx: &'a Context,
    /// What the SDK was told about the deployment.
    pub info: &'a DeploymentInfo,
    /// The monitor's own address (`host:port`).
    pub monitor: &'a str,
}

impl Deployment<'_> {
    fn remote_context(&self) -> RemoteContext {
        RemoteContext {
            project: self.ctx.project().to_owned(),
            stack: self.ctx.stack().to_owned(),
            organization: self.info.organization.clone(),
            config: self.info.config.clone(),
            config_secret_keys: self.info.config_secret_keys.clone(),
            dry_run: self.ctx.is_preview(),
            parallel: self.info.parallel,
            monitor_endpoint: self.monitor.to_owned(),
        }
    }
}

fn engine_error(e: &impl std::fmt::Display) -> Status {
    Status::unknown(e.to_string())
}

fn urn_lists<T>(
    m: HashMap<String, T>,
    urns: impl Fn(T) -> Vec<String>,
) -> BTreeMap<String, Vec<String>> {
    m.into_iter().map(|(k, v)| (k, urns(v))).collect()
}

/// `Invoke` of a package function: sent to the package's provider.
pub(super) async fn invoke(
    d: Deployment<'_>,
    req: pb::ResourceInvokeRequest,
) -> Result<pb::ResourceInvokeResponse, Status> {
    let accepts = Accepts {
        secrets: true,
        resources: req.accept_resources,
    };
    let args = convert::decode_struct(req.args, "args")
        .map_err(|e| Status::invalid_argument(format!("invoke of {}: {e}", req.tok)))?;
    let query = ProviderQuery {
        package: package_of(&req.tok).to_owned(),
        version: nonempty(req.version),
        download_url: nonempty(req.plugin_download_url),
        explicit: nonempty(req.provider),
    };
    let (_, provider) = d.ctx.provider(query).await.map_err(|e| engine_error(&e))?;
    let result = provider
        .invoke(&req.tok, &args, d.ctx.is_preview())
        .await
        .map_err(|e| engine_error(&e))?;
    Ok(pb::ResourceInvokeResponse {
        r#return: Some(convert::encode_struct(&result, accepts)),
        failures: Vec::new(),
    })
}

/// `RegisterResource` with `remote: true`: the provider's `Construct`.
pub(super) async fn construct(
    d: Deployment<'_>,
    req: pb::RegisterResourceRequest,
) -> Result<pb::RegisterResourceResponse, Status> {
    let accepts = Accepts {
        secrets: req.accept_secrets,
        resources: req.accept_resources,
    };
    let what = format!("{}::{}", req.r#type, req.name);
    let inputs = convert::decode_struct(req.object, "object")
        .map_err(|e| Status::invalid_argument(format!("{what}: {e}")))?;
    let query = ProviderQuery {
        package: package_of(&req.r#type).to_owned(),
        version: nonempty(req.version),
        download_url: nonempty(req.plugin_download_url),
        explicit: nonempty(req.provider),
    };
    let (_, provider) = d.ctx.provider(query).await.map_err(|e| engine_error(&e))?;
    let parent = if req.parent.is_empty() {
        d.ctx.root().as_str().to_owned()
    } else {
        req.parent
    };
    let request = ConstructRequest {
        context: d.remote_context(),
        ty: req.r#type,
        name: req.name,
        parent,
        inputs,
        input_dependencies: urn_lists(req.property_dependencies, |p| p.urns),
        providers: req.providers.into_iter().collect(),
        dependencies: req.dependencies,
        protect: req.protect,
        additional_secret_outputs: req.additional_secret_outputs,
        custom_timeouts: req
            .custom_timeouts
            .map(|t| crate::provider::remote::RemoteTimeouts {
                create: t.create,
                update: t.update,
                delete: t.delete,
            }),
        deleted_with: req.deleted_with,
        delete_before_replace: req
            .delete_before_replace_defined
            .then_some(req.delete_before_replace),
        ignore_changes: req.ignore_changes,
        replace_on_changes: req.replace_on_changes,
        retain_on_delete: req.retain_on_delete,
        hooks: req.hooks.map(|h| {
            BTreeMap::from([
                ("before_create", h.before_create),
                ("after_create", h.after_create),
                ("before_update", h.before_update),
                ("after_update", h.after_update),
                ("before_delete", h.before_delete),
                ("after_delete", h.after_delete),
                ("on_error", h.on_error),
            ])
        }),
    };
    let result = provider
        .construct(request)
        .await
        .map_err(|e| engine_error(&e))?;
    Ok(pb::RegisterResourceResponse {
        urn: result.urn,
        object: Some(convert::encode_struct(&result.state, accepts)),
        property_dependencies: result
            .state_dependencies
            .into_iter()
            .map(|(k, urns)| {
                (
                    k,
                    pb::register_resource_response::PropertyDependencies { urns },
                )
            })
            .collect(),
        ..Default::default()
    })
}

/// `Call` of a component method: the provider's `Call`.
pub(super) async fn call(
    d: Deployment<'_>,
    req: pb::ResourceCallRequest,
) -> Result<pb::CallResponse, Status> {
    let args = convert::decode_struct(req.args, "args")
        .map_err(|e| Status::invalid_argument(format!("call of {}: {e}", req.tok)))?;
    let query = ProviderQuery {
        package: package_of(&req.tok).to_owned(),
        version: nonempty(req.version),
        download_url: nonempty(req.plugin_download_url),
        explicit: nonempty(req.provider),
    };
    let (_, provider) = d.ctx.provider(query).await.map_err(|e| engine_error(&e))?;
    let request = CallRequest {
        context: d.remote_context(),
        token: req.tok,
        args,
        arg_dependencies: urn_lists(req.arg_dependencies, |a| a.urns),
    };
    let result = provider.call(request).await.map_err(|e| engine_error(&e))?;
    let accepts = Accepts {
        secrets: true,
        resources: true,
    };
    Ok(pb::CallResponse {
        r#return: Some(convert::encode_struct(&result.ret, accepts)),
        return_dependencies: result
            .return_dependencies
            .into_iter()
            .map(|(k, urns)| (k, pb::call_response::ReturnDependencies { urns }))
            .collect(),
        failures: result
            .failures
            .into_iter()
            .map(|reason| pb::CheckFailure {
                property: String::new(),
                reason,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_their_package() {
        assert_eq!(package_of("aws:ec2/getAmi:getAmi"), "aws");
        assert_eq!(
            package_of("testcomponent:index:Component/getMessage"),
            "testcomponent"
        );
        assert!(is_builtin("pulumi:pulumi:getStack"));
        assert!(!is_builtin("pulumi-python:dynamic:Resource"));
        assert!(!is_builtin("random:index/getRandom:getRandom"));
    }

    #[test]
    fn the_engine_address_is_shared_by_clones() {
        let a = EngineAddress::new();
        let b = a.clone();
        assert_eq!(b.get(), None);
        a.set(Some("127.0.0.1:1".into()));
        assert_eq!(b.get().as_deref(), Some("127.0.0.1:1"));
        a.set(None);
        assert_eq!(b.get(), None);
    }
}
