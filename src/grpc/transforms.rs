//! Resource and invoke transforms hosted by the SDK.
//!
//! A transform is a `Callback{target, token}` the program serves: a
//! registration's own (`RegisterResourceRequest.transforms`), or the
//! stack's (`RegisterStackTransform`, `RegisterStackInvokeTransform`). As
//! Pulumi's engine does, a registration runs its own transforms, then each
//! ancestor's (nearest first), then the stack's in the order they were
//! registered, each one seeing the properties and options the previous one
//! returned (`TransformRequest` -> `TransformResponse`); an absent answer
//! keeps what it was given. This happens on the wire message, before the
//! request is converted to a goal, so the engine sees only the result. An
//! invoke runs the stack's invoke transforms over its arguments and options
//! the same way. A transform that raises fails the registration (or the
//! invoke) with its message.

use std::sync::Mutex;

use dashmap::DashMap;
use prost::Message;

use crate::locks::MutexExt;

use super::callbacks::{CallbackClients, CallbackError};
use super::pb;

/// Why a transform could not run.
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    /// A stack transform without a target.
    #[error("a transform callback needs a target")]
    NoTarget,
    /// The callback failed or answered something else.
    #[error("transform of {resource} failed: {source}")]
    Failed {
        /// `type::name` or the invoke's token.
        resource: String,
        /// Why.
        source: CallbackError,
    },
}

/// The transforms of one operation.
#[derive(Debug, Default)]
pub struct Transforms {
    /// The stack's resource transforms, in registration order.
    stack: Mutex<Vec<pb::Callback>>,
    /// The stack's invoke transforms, in registration order.
    invoke: Mutex<Vec<pb::Callback>>,
    /// A registered resource's own transforms (only those that have any).
    own: DashMap<String, Vec<pb::Callback>>,
    /// Each registered resource's parent, for the walk up to the stack.
    parents: DashMap<String, String>,
}

fn check_target(cb: &pb::Callback) -> Result<(), TransformError> {
    if cb.target.is_empty() {
        return Err(TransformError::NoTarget);
    }
    Ok(())
}

impl Transforms {
    /// Adds a stack resource transform (it applies to later registrations).
    ///
    /// # Errors
    /// [`TransformError::NoTarget`].
    pub fn register_stack(&self, cb: pb::Callback) -> Result<(), TransformError> {
        check_target(&cb)?;
        self.stack.locked().push(cb);
        Ok(())
    }

    /// Adds a stack invoke transform (it applies to later invokes).
    ///
    /// # Errors
    /// [`TransformError::NoTarget`].
    pub fn register_invoke(&self, cb: pb::Callback) -> Result<(), TransformError> {
        check_target(&cb)?;
        self.invoke.locked().push(cb);
        Ok(())
    }

    /// Records a registered resource: its parent and its own transforms,
    /// which its descendants run after their own.
    pub fn registered(&self, urn: &str, parent: &str, own: Vec<pb::Callback>) {
        if !parent.is_empty() {
            self.parents.insert(urn.to_owned(), parent.to_owned());
        }
        if !own.is_empty() {
            self.own.insert(urn.to_owned(), own);
        }
    }

    /// The transforms a registration runs, in order: `own`, then each
    /// ancestor's of `parent`, then the stack's.
    pub fn chain(&self, own: &[pb::Callback], parent: &str) -> Vec<pb::Callback> {
        let mut chain = own.to_vec();
        let mut current = parent.to_owned();
        // The walk ends at the stack (no parent); a cycle cannot arise
        // (a parent is registered before its children), but bound it.
        for _ in 0..=self.parents.len() {
            if current.is_empty() {
                break;
            }
            if let Some(t) = self.own.get(&current) {
                chain.extend(t.iter().cloned());
            }
            current = self
                .parents
                .get(&current)
                .map(|p| p.clone())
                .unwrap_or_default();
        }
        chain.extend(self.stack.locked().iter().cloned());
        chain
    }

    /// Runs the registration's transforms over `req` (its own are in
    /// `req.transforms`; they are left there for [`Transforms::registered`]).
    ///
    /// # Errors
    /// [`TransformError::Failed`]: a transform raised or answered nonsense.
    pub async fn apply(
        &self,
        clients: &CallbackClients,
        req: &mut pb::RegisterResourceRequest,
    ) -> Result<(), TransformError> {
        let chain = self.chain(&req.transforms, &req.parent);
        if chain.is_empty() {
            return Ok(());
        }
        let failed = |source| TransformError::Failed {
            resource: format!("{}::{}", req.r#type, req.name),
            source,
        };
        let mut properties = req.object.take();
        let mut options = options_of(req);
        for cb in &chain {
            let request = pb::TransformRequest {
                r#type: req.r#type.clone(),
                name: req.name.clone(),
                custom: req.custom,
                parent: req.parent.clone(),
                properties: properties.clone(),
                options: Some(options.clone()),
            };
            let answer = clients
                .call(cb, request.encode_to_vec())
                .await
                .map_err(failed)?;
            let r = pb::TransformResponse::decode(answer.as_slice()).map_err(|e| {
                failed(CallbackError::BadAnswer {
                    what: "TransformResponse",
                    message: e.to_string(),
                })
            })?;
            if r.properties.is_some() {
                properties = r.properties;
            }
            if let Some(o) = r.options {
                options = o;
            }
        }
        req.object = properties;
        set_options(req, options);
        Ok(())
    }

    /// Runs the stack's invoke transforms over `req`.
    ///
    /// # Errors
    /// [`TransformError::Failed`]: a transform raised or answered nonsense.
    pub async fn apply_invoke(
        &self,
        clients: &CallbackClients,
        req: &mut pb::ResourceInvokeRequest,
    ) -> Result<(), TransformError> {
        let chain = self.invoke.locked().clone();
        let failed = |source| TransformError::Failed {
            resource: req.tok.clone(),
            source,
        };
        for cb in &chain {
            let request = pb::TransformInvokeRequest {
                token: req.tok.clone(),
                args: req.args.clone(),
                options: Some(pb::TransformInvokeOptions {
                    provider: req.provider.clone(),
                    version: req.version.clone(),
                    plugin_download_url: String::new(),
                }),
            };
            let answer = clients
                .call(cb, request.encode_to_vec())
                .await
                .map_err(failed)?;
            let r = pb::TransformInvokeResponse::decode(answer.as_slice()).map_err(|e| {
                failed(CallbackError::BadAnswer {
                    what: "TransformInvokeResponse",
                    message: e.to_string(),
                })
            })?;
            if r.args.is_some() {
                req.args = r.args;
            }
            if let Some(o) = r.options {
                req.provider = o.provider;
                req.version = o.version;
            }
        }
        Ok(())
    }
}

/// The options of a registration as a transform sees them.
pub fn options_of(req: &pb::RegisterResourceRequest) -> pb::TransformResourceOptions {
    pb::TransformResourceOptions {
        depends_on: req.dependencies.clone(),
        protect: req.protect,
        ignore_changes: req.ignore_changes.clone(),
        replace_on_changes: req.replace_on_changes.clone(),
        version: req.version.clone(),
        aliases: req
            .alias_ur_ns
            .iter()
            .map(|u| pb::Alias {
                alias: Some(pb::alias::Alias::Urn(u.clone())),
            })
            .chain(req.aliases.iter().cloned())
            .collect(),
        provider: req.provider.clone(),
        custom_timeouts: req.custom_timeouts.clone(),
        plugin_download_url: req.plugin_download_url.clone(),
        retain_on_delete: req.retain_on_delete,
        deleted_with: req.deleted_with.clone(),
        delete_before_replace: (req.delete_before_replace_defined || req.delete_before_replace)
            .then_some(req.delete_before_replace),
        additional_secret_outputs: req.additional_secret_outputs.clone(),
        providers: req.providers.clone(),
        hooks: req.hooks.clone(),
        import: req.import_id.clone(),
    }
}

/// Writes a transform's options back into the registration.
pub fn set_options(req: &mut pb::RegisterResourceRequest, o: pb::TransformResourceOptions) {
    req.dependencies = o.depends_on;
    req.protect = o.protect;
    req.ignore_changes = o.ignore_changes;
    req.replace_on_changes = o.replace_on_changes;
    req.version = o.version;
    // The aliases a transform sees are the full list: URN aliases included.
    req.alias_ur_ns.clear();
    req.aliases = o.aliases;
    req.provider = o.provider;
    req.custom_timeouts = o.custom_timeouts;
    req.plugin_download_url = o.plugin_download_url;
    req.retain_on_delete = o.retain_on_delete;
    req.deleted_with = o.deleted_with;
    req.delete_before_replace_defined = o.delete_before_replace.is_some();
    req.delete_before_replace = o.delete_before_replace.unwrap_or(false);
    req.additional_secret_outputs = o.additional_secret_outputs;
    req.providers = o.providers;
    req.hooks = o.hooks;
    req.import_id = o.import;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cb(token: &str) -> pb::Callback {
        pb::Callback {
            target: "127.0.0.1:1".into(),
            token: token.into(),
            ..Default::default()
        }
    }

    fn tokens(chain: &[pb::Callback]) -> Vec<&str> {
        chain.iter().map(|c| c.token.as_str()).collect()
    }

    #[test]
    fn the_chain_is_own_then_ancestors_nearest_first_then_the_stack() {
        let t = Transforms::default();
        t.register_stack(cb("stack-1")).unwrap();
        t.registered("root", "", vec![cb("root")]);
        t.registered("mid", "root", Vec::new());
        t.registered("leaf-parent", "mid", vec![cb("p1"), cb("p2")]);
        t.register_stack(cb("stack-2")).unwrap();
        let chain = t.chain(&[cb("own")], "leaf-parent");
        assert_eq!(
            tokens(&chain),
            ["own", "p1", "p2", "root", "stack-1", "stack-2"]
        );
        assert_eq!(tokens(&t.chain(&[], "")), ["stack-1", "stack-2"]);
        assert!(matches!(
            t.register_stack(pb::Callback::default()),
            Err(TransformError::NoTarget)
        ));
    }

    #[test]
    fn options_round_trip_through_a_transform() {
        let req = pb::RegisterResourceRequest {
            dependencies: vec!["urn:a".into()],
            protect: Some(true),
            ignore_changes: vec!["x".into()],
            version: "1.2.3".into(),
            provider: "urn:p::id".into(),
            delete_before_replace: false,
            delete_before_replace_defined: true,
            additional_secret_outputs: vec!["s".into()],
            import_id: "i-1".into(),
            hooks: Some(pb::register_resource_request::ResourceHooksBinding {
                before_create: vec!["h".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let o = options_of(&req);
        assert_eq!(o.delete_before_replace, Some(false));
        let mut back = pb::RegisterResourceRequest::default();
        set_options(&mut back, o);
        assert_eq!(back, req);
    }
}
