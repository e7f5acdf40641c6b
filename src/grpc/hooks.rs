//! Resource hooks hosted by the SDK.
//!
//! A program registers named hooks (`RegisterResourceHook`: a callback,
//! `on_dry_run`, `ignore_errors`; `RegisterErrorHook`) and binds them by
//! name in a registration's `hooks` (`ResourceHooksBinding`). Binding turns
//! the names into keel's [`ResourceHooks`] of asynchronous hooks, which the
//! executor awaits at its hook points like any other: each call sends the
//! SDK a `ResourceHookRequest` (urn, id, name, type, and the new/old inputs
//! and outputs Pulumi sends at that point, secrets kept as secrets) and
//! reads a `ResourceHookResponse`, whose `error` fails the step with its
//! message, unless the hook was registered with `ignore_errors` (then it is
//! a warning). An error hook gets an `ErrorHookRequest` and answers whether
//! to retry. The names are recorded in the state (`resourceHooks`, as Pulumi
//! records them), and [`HostedHooks::resolve`] turns them back into hooks
//! for the delete of a resource the program no longer registers, which runs
//! after the program ended (it waits in `SignalAndWaitForShutdown`).

use std::sync::Arc;

use dashmap::DashMap;
use prost::Message;

use crate::events::{EngineEvent, EventSink};
use crate::model::PropertyMap;
use crate::source::hooks::{
    AsyncErrorHook, AsyncHook, HookCall, HookFuture, HookPoint, ResourceHooks,
};
use crate::source::ProgramError;

use super::callbacks::{CallbackClients, CallbackError};
use super::convert::{encode_struct, Accepts};
use super::pb;
use super::pb::register_resource_request::ResourceHooksBinding;

/// Why a hook cannot be registered or bound.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// A second hook with a name already registered.
    #[error("a resource hook named `{0}` is already registered")]
    Duplicate(String),
    /// A registration without a callback.
    #[error("the resource hook `{0}` has no callback")]
    NoCallback(String),
    /// A binding names a hook the program did not register.
    #[error("hook `{0}` was not registered")]
    Unknown(String),
    /// The SDK answered with an error.
    #[error("{0}")]
    Raised(String),
    /// The callback failed or answered something else.
    #[error(transparent)]
    Callback(#[from] CallbackError),
}

/// A registered hook.
#[derive(Debug, Clone)]
struct Hosted {
    callback: pb::Callback,
    on_dry_run: bool,
    ignore_errors: bool,
}

/// The hooks a program registered in one operation.
#[derive(Debug, Clone)]
pub struct HostedHooks {
    hooks: Arc<DashMap<String, Hosted>>,
    error_hooks: Arc<DashMap<String, pb::Callback>>,
    clients: CallbackClients,
    events: EventSink,
}

/// Every secret stays a secret, every reference a reference.
const ALL: Accepts = Accepts {
    secrets: true,
    resources: true,
};

fn encode(m: Option<&PropertyMap>) -> Option<prost_types::Struct> {
    m.map(|m| encode_struct(m, ALL))
}

/// The request Pulumi sends a hook at `call.point`: create hooks see the
/// new inputs (and, after, outputs); update hooks the new and old ones;
/// delete hooks the old ones.
pub fn hook_request(call: &HookCall) -> pb::ResourceHookRequest {
    let mut r = pb::ResourceHookRequest {
        urn: call.urn.as_str().to_owned(),
        id: call.id.clone(),
        name: call.urn.name().to_owned(),
        r#type: call.ty.as_str().to_owned(),
        ..Default::default()
    };
    match call.point {
        HookPoint::BeforeCreate | HookPoint::AfterCreate => {
            r.new_inputs = encode(Some(&call.inputs));
            if call.point == HookPoint::AfterCreate {
                r.new_outputs = encode(call.outputs.as_ref());
            }
        }
        HookPoint::BeforeUpdate | HookPoint::AfterUpdate => {
            r.new_inputs = encode(Some(&call.inputs));
            r.old_inputs = encode(call.old_inputs.as_ref());
            r.old_outputs = encode(call.old_outputs.as_ref());
            if call.point == HookPoint::AfterUpdate {
                r.new_outputs = encode(call.outputs.as_ref());
            }
        }
        HookPoint::BeforeDelete | HookPoint::AfterDelete => {
            r.old_inputs = encode(Some(&call.inputs));
            r.old_outputs = encode(call.old_outputs.as_ref().or(call.outputs.as_ref()));
        }
    }
    r
}

/// The request Pulumi sends an error hook after `call.point`'s operation
/// failed.
pub fn error_hook_request(call: &HookCall) -> pb::ErrorHookRequest {
    let (operation, new_inputs, old_inputs) = match call.point {
        HookPoint::BeforeCreate | HookPoint::AfterCreate => ("create", Some(&call.inputs), None),
        HookPoint::BeforeUpdate | HookPoint::AfterUpdate => {
            ("update", Some(&call.inputs), call.old_inputs.as_ref())
        }
        HookPoint::BeforeDelete | HookPoint::AfterDelete => ("delete", None, Some(&call.inputs)),
    };
    pb::ErrorHookRequest {
        urn: call.urn.as_str().to_owned(),
        id: call.id.clone(),
        name: call.urn.name().to_owned(),
        r#type: call.ty.as_str().to_owned(),
        new_inputs: encode(new_inputs),
        old_inputs: encode(old_inputs),
        old_outputs: encode(call.old_outputs.as_ref()),
        failed_operation: operation.to_owned(),
        errors: if call.errors.is_empty() {
            call.error.iter().cloned().collect()
        } else {
            call.errors.clone()
        },
    }
}

fn bad_answer(what: &'static str, e: &prost::DecodeError) -> HookError {
    HookError::Callback(CallbackError::BadAnswer {
        what,
        message: e.to_string(),
    })
}

impl HostedHooks {
    /// No hooks yet; calls go through `clients`, ignored errors to `events`.
    pub fn new(clients: CallbackClients, events: EventSink) -> Self {
        Self {
            hooks: Arc::default(),
            error_hooks: Arc::default(),
            clients,
            events,
        }
    }

    /// Registers a resource hook.
    ///
    /// # Errors
    /// [`HookError::NoCallback`], [`HookError::Duplicate`].
    pub fn register(&self, req: pb::RegisterResourceHookRequest) -> Result<(), HookError> {
        let callback = req
            .callback
            .ok_or_else(|| HookError::NoCallback(req.name.clone()))?;
        if self.hooks.contains_key(&req.name) {
            return Err(HookError::Duplicate(req.name));
        }
        self.hooks.insert(
            req.name,
            Hosted {
                callback,
                on_dry_run: req.on_dry_run,
                ignore_errors: req.ignore_errors,
            },
        );
        Ok(())
    }

    /// Registers an error hook.
    ///
    /// # Errors
    /// [`HookError::NoCallback`], [`HookError::Duplicate`].
    pub fn register_error(&self, req: pb::RegisterErrorHookRequest) -> Result<(), HookError> {
        let callback = req
            .callback
            .ok_or_else(|| HookError::NoCallback(req.name.clone()))?;
        if self.error_hooks.contains_key(&req.name) {
            return Err(HookError::Duplicate(req.name));
        }
        self.error_hooks.insert(req.name, callback);
        Ok(())
    }

    /// A registration's binding as keel hooks.
    ///
    /// # Errors
    /// [`HookError::Unknown`]: a name no hook was registered under.
    pub fn bind(&self, binding: &ResourceHooksBinding) -> Result<ResourceHooks, HookError> {
        let mut hooks = ResourceHooks::default();
        let points = [
            (HookPoint::BeforeCreate, &binding.before_create),
            (HookPoint::AfterCreate, &binding.after_create),
            (HookPoint::BeforeUpdate, &binding.before_update),
            (HookPoint::AfterUpdate, &binding.after_update),
            (HookPoint::BeforeDelete, &binding.before_delete),
            (HookPoint::AfterDelete, &binding.after_delete),
        ];
        for (point, names) in points {
            for name in names {
                let hosted = self
                    .hooks
                    .get(name)
                    .map(|h| h.clone())
                    .ok_or_else(|| HookError::Unknown(name.clone()))?;
                hooks
                    .asynchronous
                    .push((point, self.hook(name.clone(), hosted)));
            }
        }
        for name in &binding.on_error {
            let callback = self
                .error_hooks
                .get(name)
                .map(|h| h.clone())
                .ok_or_else(|| HookError::Unknown(name.clone()))?;
            hooks
                .on_error_async
                .push(self.error_hook(name.clone(), callback));
        }
        Ok(hooks)
    }

    /// The hooks a prior state's `resourceHooks` names (`{"BeforeDelete":
    /// [names], ...}`, as Pulumi records them): a name no hook is
    /// registered under is a hook that fails, as under Pulumi.
    pub fn resolve(&self, names: &serde_json::Value) -> Option<ResourceHooks> {
        let list = |key: &str| -> Vec<String> {
            names[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut hooks = ResourceHooks::default();
        for point in [
            HookPoint::BeforeCreate,
            HookPoint::AfterCreate,
            HookPoint::BeforeUpdate,
            HookPoint::AfterUpdate,
            HookPoint::BeforeDelete,
            HookPoint::AfterDelete,
        ] {
            for name in list(&format!("{point:?}")) {
                let hook = match self.hooks.get(&name).map(|h| h.clone()) {
                    Some(hosted) => self.hook(name, hosted),
                    None => unregistered(name),
                };
                hooks.asynchronous.push((point, hook));
            }
        }
        for name in list("OnError") {
            if let Some(cb) = self.error_hooks.get(&name).map(|h| h.clone()) {
                hooks.on_error_async.push(self.error_hook(name, cb));
            }
        }
        (!hooks.is_empty()).then_some(hooks)
    }

    fn hook(&self, name: String, hosted: Hosted) -> AsyncHook {
        let this = self.clone();
        let hook_name = name.clone();
        let on_dry_run = hosted.on_dry_run;
        let hosted = Arc::new(hosted);
        AsyncHook {
            name,
            on_dry_run,
            call: Arc::new(move |call: HookCall| -> HookFuture<()> {
                let this = this.clone();
                let hosted = hosted.clone();
                let name = hook_name.clone();
                Box::pin(async move {
                    let result = this.call_hook(&hosted.callback, &call).await;
                    match result {
                        Err(e) if hosted.ignore_errors => {
                            this.events.send(EngineEvent::Diagnostic {
                                severity: "warning".to_owned(),
                                urn: Some(call.urn.clone()),
                                message: format!("{:?} hook `{name}` failed: {e}", call.point),
                            });
                            Ok(())
                        }
                        r => r.map_err(|e| Box::new(e) as ProgramError),
                    }
                })
            }),
        }
    }

    fn error_hook(&self, name: String, callback: pb::Callback) -> AsyncErrorHook {
        let this = self.clone();
        let callback = Arc::new(callback);
        AsyncErrorHook {
            name,
            call: Arc::new(move |call: HookCall| -> HookFuture<bool> {
                let this = this.clone();
                let callback = callback.clone();
                Box::pin(async move {
                    this.call_error_hook(&callback, &call)
                        .await
                        .map_err(|e| Box::new(e) as ProgramError)
                })
            }),
        }
    }

    async fn call_hook(&self, cb: &pb::Callback, call: &HookCall) -> Result<(), HookError> {
        let request = hook_request(call).encode_to_vec();
        let answer = self.clients.call(cb, request).await?;
        let r = pb::ResourceHookResponse::decode(answer.as_slice())
            .map_err(|e| bad_answer("ResourceHookResponse", &e))?;
        if r.error.is_empty() {
            Ok(())
        } else {
            Err(HookError::Raised(r.error))
        }
    }

    async fn call_error_hook(&self, cb: &pb::Callback, call: &HookCall) -> Result<bool, HookError> {
        let request = error_hook_request(call).encode_to_vec();
        let answer = self.clients.call(cb, request).await?;
        let r = pb::ErrorHookResponse::decode(answer.as_slice())
            .map_err(|e| bad_answer("ErrorHookResponse", &e))?;
        if r.error.is_empty() {
            Ok(r.retry)
        } else {
            Err(HookError::Raised(r.error))
        }
    }
}

/// A hook a state names that the program did not register: it fails.
fn unregistered(name: String) -> AsyncHook {
    let missing = name.clone();
    AsyncHook {
        name,
        on_dry_run: false,
        call: Arc::new(move |_: HookCall| -> HookFuture<()> {
            let e = HookError::Unknown(missing.clone());
            Box::pin(async move { Err(Box::new(e) as ProgramError) })
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PropertyValue, TypeToken, Urn};

    fn call(point: HookPoint) -> HookCall {
        let map = |k: &str, v: i64| PropertyMap::from([(k.to_owned(), PropertyValue::from(v))]);
        HookCall {
            point,
            urn: Urn::parse("urn:pulumi:dev::p::pkg:index:Thing::res").unwrap(),
            ty: TypeToken::parse("pkg:index:Thing").unwrap(),
            id: "id-1".into(),
            inputs: map("length", 10),
            outputs: Some(map("result", 1)),
            old_inputs: Some(map("length", 5)),
            old_outputs: Some(map("result", 0)),
            error: Some("boom".into()),
            errors: Vec::new(),
            attempt: 1,
            preview: false,
        }
    }

    #[test]
    fn each_point_sends_what_pulumi_sends() {
        let r = hook_request(&call(HookPoint::BeforeCreate));
        assert_eq!(
            (r.name.as_str(), r.r#type.as_str()),
            ("res", "pkg:index:Thing")
        );
        assert!(r.new_inputs.is_some() && r.new_outputs.is_none() && r.old_inputs.is_none());
        let r = hook_request(&call(HookPoint::AfterCreate));
        assert!(r.new_inputs.is_some() && r.new_outputs.is_some() && r.old_outputs.is_none());
        let r = hook_request(&call(HookPoint::AfterUpdate));
        assert!(r.new_inputs.is_some() && r.old_inputs.is_some());
        assert!(r.new_outputs.is_some() && r.old_outputs.is_some());
        let r = hook_request(&call(HookPoint::BeforeDelete));
        assert!(r.new_inputs.is_none() && r.new_outputs.is_none());
        let old = r.old_inputs.expect("old inputs");
        assert!(old.fields.contains_key("length"));
        let e = error_hook_request(&call(HookPoint::BeforeUpdate));
        assert_eq!(e.failed_operation, "update");
        assert_eq!(e.errors, ["boom"]);
    }

    #[test]
    fn bindings_name_registered_hooks_only() {
        let h = HostedHooks::new(CallbackClients::default(), EventSink::default());
        let cb = pb::Callback {
            target: "127.0.0.1:1".into(),
            token: "t".into(),
            ..Default::default()
        };
        h.register(pb::RegisterResourceHookRequest {
            name: "a".into(),
            callback: Some(cb.clone()),
            on_dry_run: true,
            ignore_errors: false,
        })
        .unwrap();
        let again = h.register(pb::RegisterResourceHookRequest {
            name: "a".into(),
            callback: Some(cb),
            ..Default::default()
        });
        assert!(matches!(again, Err(HookError::Duplicate(_))));
        let bound = h
            .bind(&ResourceHooksBinding {
                before_create: vec!["a".into()],
                after_delete: vec!["a".into()],
                ..Default::default()
            })
            .unwrap();
        let points: Vec<_> = bound
            .asynchronous
            .iter()
            .map(|(p, h)| (*p, h.on_dry_run))
            .collect();
        assert_eq!(
            points,
            [
                (HookPoint::BeforeCreate, true),
                (HookPoint::AfterDelete, true)
            ]
        );
        let unknown = h.bind(&ResourceHooksBinding {
            on_error: vec!["a".into()],
            ..Default::default()
        });
        assert!(matches!(unknown, Err(HookError::Unknown(n)) if n == "a"));
    }
}
