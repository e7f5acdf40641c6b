//! Resource hooks: closures the engine calls around a resource's
//! provider operations (before/after create, update, delete) and on a
//! failure, where an error hook may ask for a retry. Rust closures ([`Hook`],
//! [`ErrorHook`]) are synchronous and run in update operations only, never in
//! a preview; asynchronous hooks ([`AsyncHook`], [`AsyncErrorHook`]: those a
//! Pulumi program hosts and the gRPC front end calls) are awaited on the
//! executor's task, and an [`AsyncHook`] marked `on_dry_run` also runs in a
//! preview.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use crate::model::{PropertyMap, TypeToken, Urn};

use super::ProgramError;

/// Where a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPoint {
    /// Before the provider's create.
    BeforeCreate,
    /// After a successful create.
    AfterCreate,
    /// Before the provider's update.
    BeforeUpdate,
    /// After a successful update.
    AfterUpdate,
    /// Before the provider's delete.
    BeforeDelete,
    /// After a successful delete.
    AfterDelete,
}

/// What a hook is told.
#[derive(Debug, Clone, Copy)]
pub struct HookArgs<'a> {
    /// Where it runs (for an error hook: the operation that failed).
    pub point: HookPoint,
    /// The resource.
    pub urn: &'a Urn,
    /// Its type.
    pub ty: &'a TypeToken,
    /// Its ID (empty before a create).
    pub id: &'a str,
    /// Its inputs.
    pub inputs: &'a PropertyMap,
    /// Its outputs (after hooks; the prior outputs for update/delete).
    pub outputs: Option<&'a PropertyMap>,
    /// The prior inputs (update hooks).
    pub old_inputs: Option<&'a PropertyMap>,
    /// The prior outputs (update hooks).
    pub old_outputs: Option<&'a PropertyMap>,
    /// The failure (error hooks).
    pub error: Option<&'a str>,
    /// Every failure of the operation so far, newest first (error hooks).
    pub errors: &'a [String],
    /// Which attempt failed, from 1 (error hooks).
    pub attempt: u32,
    /// Whether the operation is a preview (only `on_dry_run` asynchronous
    /// hooks run then).
    pub preview: bool,
}

/// What an asynchronous hook is told: [`HookArgs`], owned.
#[derive(Debug, Clone, PartialEq)]
pub struct HookCall {
    /// Where it runs (for an error hook: the operation that failed).
    pub point: HookPoint,
    /// The resource.
    pub urn: Urn,
    /// Its type.
    pub ty: TypeToken,
    /// Its ID (empty before a create).
    pub id: String,
    /// Its inputs (for delete hooks: the prior inputs).
    pub inputs: PropertyMap,
    /// Its outputs (after hooks; the prior outputs for delete hooks).
    pub outputs: Option<PropertyMap>,
    /// The prior inputs (update hooks).
    pub old_inputs: Option<PropertyMap>,
    /// The prior outputs (update hooks).
    pub old_outputs: Option<PropertyMap>,
    /// The failure (error hooks).
    pub error: Option<String>,
    /// Every failure of the operation so far, newest first (error hooks).
    pub errors: Vec<String>,
    /// Which attempt failed, from 1 (error hooks).
    pub attempt: u32,
    /// Whether the operation is a preview.
    pub preview: bool,
}

impl HookCall {
    /// The owned copy of `args`.
    pub fn of(args: &HookArgs<'_>) -> Self {
        Self {
            point: args.point,
            urn: args.urn.clone(),
            ty: args.ty.clone(),
            id: args.id.to_owned(),
            inputs: args.inputs.clone(),
            outputs: args.outputs.cloned(),
            old_inputs: args.old_inputs.cloned(),
            old_outputs: args.old_outputs.cloned(),
            error: args.error.map(str::to_owned),
            errors: args.errors.to_vec(),
            attempt: args.attempt,
            preview: args.preview,
        }
    }
}

/// The future of an asynchronous hook.
pub type HookFuture<T> = Pin<Box<dyn Future<Output = Result<T, ProgramError>> + Send>>;

/// A hook; an error fails the step.
pub type Hook = Arc<dyn Fn(&HookArgs<'_>) -> Result<(), ProgramError> + Send + Sync>;
/// An error hook: returns true to retry the failed operation.
pub type ErrorHook = Arc<dyn Fn(&HookArgs<'_>) -> bool + Send + Sync>;

/// An asynchronous hook: awaited where a [`Hook`] is called; an error
/// fails the step.
#[derive(Clone)]
pub struct AsyncHook {
    /// Its name, in the step's error.
    pub name: String,
    /// Whether it also runs in a preview.
    pub on_dry_run: bool,
    /// The call.
    pub call: Arc<dyn Fn(HookCall) -> HookFuture<()> + Send + Sync>,
}

/// An asynchronous error hook: answers true to retry the failed operation;
/// an error fails the step. Never called in a preview.
#[derive(Clone)]
pub struct AsyncErrorHook {
    /// Its name, in the step's error.
    pub name: String,
    /// The call.
    pub call: Arc<dyn Fn(HookCall) -> HookFuture<bool> + Send + Sync>,
}

impl fmt::Debug for AsyncHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncHook")
            .field("name", &self.name)
            .field("on_dry_run", &self.on_dry_run)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for AsyncErrorHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncErrorHook")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The most attempts an error hook can ask for.
pub const MAX_ATTEMPTS: u32 = 10;

/// A resource's hooks, run in order at each point.
#[derive(Clone, Default)]
pub struct ResourceHooks {
    /// Before create.
    pub before_create: Vec<Hook>,
    /// After create.
    pub after_create: Vec<Hook>,
    /// Before update.
    pub before_update: Vec<Hook>,
    /// After update.
    pub after_update: Vec<Hook>,
    /// Before delete.
    pub before_delete: Vec<Hook>,
    /// After delete.
    pub after_delete: Vec<Hook>,
    /// On a failed create, update or delete; any returning true retries it
    /// (up to [`MAX_ATTEMPTS`] attempts).
    pub on_error: Vec<ErrorHook>,
    /// Asynchronous hooks and their points, run after a point's [`Hook`]s in
    /// order.
    pub asynchronous: Vec<(HookPoint, AsyncHook)>,
    /// Asynchronous error hooks, asked after the [`ErrorHook`]s.
    pub on_error_async: Vec<AsyncErrorHook>,
    /// True when these are a program's hooks by name (the gRPC front end):
    /// the state records exactly their names, none included, as Pulumi
    /// does; otherwise a state keeps the names it had.
    pub by_name: bool,
}

impl ResourceHooks {
    /// True when no hook is set.
    pub fn is_empty(&self) -> bool {
        self.before_create.is_empty()
            && self.after_create.is_empty()
            && self.before_update.is_empty()
            && self.after_update.is_empty()
            && self.before_delete.is_empty()
            && self.after_delete.is_empty()
            && self.on_error.is_empty()
            && self.asynchronous.is_empty()
            && self.on_error_async.is_empty()
    }

    /// The names of the asynchronous hooks, as Pulumi records them in a
    /// state's `resourceHooks` (`{"BeforeCreate": [names], ..., "OnError":
    /// [names]}`); when there are none, `null` for hooks by name (none
    /// recorded) and `None` otherwise (the state keeps what it had).
    pub fn names(&self) -> Option<serde_json::Value> {
        let mut m = serde_json::Map::new();
        let mut add = |key: String, name: &str| {
            if let serde_json::Value::Array(a) = m
                .entry(key)
                .or_insert_with(|| serde_json::Value::Array(Vec::new()))
            {
                a.push(name.into());
            }
        };
        for (p, h) in &self.asynchronous {
            add(format!("{p:?}"), &h.name);
        }
        for h in &self.on_error_async {
            add("OnError".to_owned(), &h.name);
        }
        if m.is_empty() {
            return self.by_name.then_some(serde_json::Value::Null);
        }
        Some(serde_json::Value::Object(m))
    }

    /// The hooks of a point.
    pub fn at(&self, point: HookPoint) -> &[Hook] {
        match point {
            HookPoint::BeforeCreate => &self.before_create,
            HookPoint::AfterCreate => &self.after_create,
            HookPoint::BeforeUpdate => &self.before_update,
            HookPoint::AfterUpdate => &self.after_update,
            HookPoint::BeforeDelete => &self.before_delete,
            HookPoint::AfterDelete => &self.after_delete,
        }
    }

    /// Runs the hooks of a point in order (the [`Hook`]s, then the
    /// [`AsyncHook`]s); the first error stops them. In a preview only the
    /// asynchronous hooks marked `on_dry_run` run.
    ///
    /// # Errors
    /// The hook's error, as text naming the point (and the hook's name).
    pub async fn run(&self, args: &HookArgs<'_>) -> Result<(), String> {
        if !args.preview {
            for h in self.at(args.point) {
                h(args).map_err(|e| format!("{:?} hook failed: {e}", args.point))?;
            }
        }
        let due = self
            .asynchronous
            .iter()
            .filter(|(p, h)| *p == args.point && (!args.preview || h.on_dry_run));
        for (_, h) in due {
            (h.call)(HookCall::of(args))
                .await
                .map_err(|e| format!("{:?} hook `{}` failed: {e}", args.point, h.name))?;
        }
        Ok(())
    }

    /// Asks the error hooks whether to retry (every hook is called).
    ///
    /// # Errors
    /// An asynchronous error hook failed (its message, naming it).
    pub async fn retry(&self, args: &HookArgs<'_>) -> Result<bool, String> {
        if args.attempt >= MAX_ATTEMPTS || args.preview {
            return Ok(false);
        }
        let mut retry = false;
        for h in &self.on_error {
            retry |= h(args);
        }
        for h in &self.on_error_async {
            retry |= (h.call)(HookCall::of(args))
                .await
                .map_err(|e| format!("error hook `{}` failed: {e}", h.name))?;
        }
        Ok(retry)
    }
}

/// Turns a state's `resourceHooks` names back into hooks.
pub type HookResolver = Arc<dyn Fn(&serde_json::Value) -> Option<ResourceHooks> + Send + Sync>;

/// The hooks a program hosts by name, for the steps of resources it no
/// longer registers (their deletes at the end of an update, which find their
/// hooks by the names in their prior state, as Pulumi's do). A front end that
/// hosts hooks sets the resolver once per operation; the executor asks it.
#[derive(Clone, Default)]
pub struct HooksByName(Arc<OnceLock<HookResolver>>);

impl HooksByName {
    /// Sets the resolver (the first one set stays).
    pub fn set(&self, resolver: HookResolver) {
        let _ = self.0.set(resolver);
    }

    /// The hooks `names` (a state's `resourceHooks`) name, if any.
    pub fn resolve(&self, names: &serde_json::Value) -> Option<ResourceHooks> {
        if names.is_null() {
            return None;
        }
        self.0.get().and_then(|r| r(names))
    }
}

impl fmt::Debug for HooksByName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HooksByName")
            .field(&self.0.get().is_some())
            .finish()
    }
}

impl fmt::Debug for ResourceHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceHooks")
            .field("before_create", &self.before_create.len())
            .field("after_create", &self.after_create.len())
            .field("before_update", &self.before_update.len())
            .field("after_update", &self.after_update.len())
            .field("before_delete", &self.before_delete.len())
            .field("after_delete", &self.after_delete.len())
            .field("on_error", &self.on_error.len())
            .field(
                "asynchronous",
                &self
                    .asynchronous
                    .iter()
                    .map(|(p, h)| (p, &h.name))
                    .collect::<Vec<_>>(),
            )
            .field(
                "on_error_async",
                &self
                    .on_error_async
                    .iter()
                    .map(|h| &h.name)
                    .collect::<Vec<_>>(),
            )
            .field("by_name", &self.by_name)
            .finish()
    }
}

impl PartialEq for ResourceHooks {
    fn eq(&self, other: &Self) -> bool {
        fn same<T: ?Sized>(a: &[Arc<T>], b: &[Arc<T>]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
        }
        self.by_name == other.by_name
            && same(&self.before_create, &other.before_create)
            && same(&self.after_create, &other.after_create)
            && same(&self.before_update, &other.before_update)
            && same(&self.after_update, &other.after_update)
            && same(&self.before_delete, &other.before_delete)
            && same(&self.after_delete, &other.after_delete)
            && same(&self.on_error, &other.on_error)
            && self.asynchronous.len() == other.asynchronous.len()
            && self
                .asynchronous
                .iter()
                .zip(&other.asynchronous)
                .all(|((p, a), (q, b))| p == q && Arc::ptr_eq(&a.call, &b.call))
            && self.on_error_async.len() == other.on_error_async.len()
            && self
                .on_error_async
                .iter()
                .zip(&other.on_error_async)
                .all(|(a, b)| Arc::ptr_eq(&a.call, &b.call))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::MutexExt;
    use std::sync::Mutex;

    /// An async hook recording `label` (and failing when `fail`).
    fn recording(log: &Arc<Mutex<Vec<String>>>, label: &str, dry: bool, fail: bool) -> AsyncHook {
        let (log, label2) = (log.clone(), label.to_owned());
        AsyncHook {
            name: label.to_owned(),
            on_dry_run: dry,
            call: Arc::new(move |c: HookCall| -> HookFuture<()> {
                let (log, label) = (log.clone(), label2.clone());
                Box::pin(async move {
                    log.locked().push(format!("{label} {:?}", c.point));
                    if fail {
                        return Err("boom".into());
                    }
                    Ok(())
                })
            }),
        }
    }

    fn args<'a>(
        urn: &'a Urn,
        ty: &'a TypeToken,
        m: &'a PropertyMap,
        preview: bool,
    ) -> HookArgs<'a> {
        HookArgs {
            point: HookPoint::BeforeCreate,
            urn,
            ty,
            id: "",
            inputs: m,
            outputs: None,
            old_inputs: None,
            old_outputs: None,
            error: None,
            errors: &[],
            attempt: 1,
            preview,
        }
    }

    #[tokio::test]
    async fn async_hooks_run_after_sync_ones_and_in_a_preview_only_when_on_dry_run() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sync_log = log.clone();
        let hooks = ResourceHooks {
            before_create: vec![Arc::new(move |_: &HookArgs<'_>| {
                sync_log.locked().push("sync".into());
                Ok(())
            })],
            asynchronous: vec![
                (HookPoint::BeforeCreate, recording(&log, "dry", true, false)),
                (
                    HookPoint::BeforeCreate,
                    recording(&log, "wet", false, false),
                ),
                (
                    HookPoint::AfterCreate,
                    recording(&log, "after", true, false),
                ),
            ],
            ..ResourceHooks::default()
        };
        let urn = Urn::parse("urn:pulumi:dev::p::t:index:T::r").unwrap();
        let ty = TypeToken::parse("t:index:T").unwrap();
        let m = PropertyMap::new();
        hooks.run(&args(&urn, &ty, &m, true)).await.unwrap();
        assert_eq!(*log.locked(), ["dry BeforeCreate"]);
        log.locked().clear();
        hooks.run(&args(&urn, &ty, &m, false)).await.unwrap();
        assert_eq!(
            *log.locked(),
            ["sync", "dry BeforeCreate", "wet BeforeCreate"]
        );
        assert_eq!(
            hooks.names(),
            Some(serde_json::json!({"BeforeCreate": ["dry", "wet"], "AfterCreate": ["after"]}))
        );
        assert_eq!(ResourceHooks::default().names(), None);
        let none_by_name = ResourceHooks {
            by_name: true,
            ..ResourceHooks::default()
        };
        assert_eq!(none_by_name.names(), Some(serde_json::Value::Null));
    }

    #[tokio::test]
    async fn a_failing_async_hook_stops_the_point_naming_itself() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let hooks = ResourceHooks {
            asynchronous: vec![
                (
                    HookPoint::BeforeCreate,
                    recording(&log, "first", false, true),
                ),
                (
                    HookPoint::BeforeCreate,
                    recording(&log, "second", false, false),
                ),
            ],
            on_error_async: vec![AsyncErrorHook {
                name: "again".into(),
                call: Arc::new(|c: HookCall| -> HookFuture<bool> {
                    Box::pin(async move { Ok(c.attempt < 2) })
                }),
            }],
            ..ResourceHooks::default()
        };
        let urn = Urn::parse("urn:pulumi:dev::p::t:index:T::r").unwrap();
        let ty = TypeToken::parse("t:index:T").unwrap();
        let m = PropertyMap::new();
        let e = hooks.run(&args(&urn, &ty, &m, false)).await.unwrap_err();
        assert_eq!(e, "BeforeCreate hook `first` failed: boom");
        assert_eq!(*log.locked(), ["first BeforeCreate"]);
        assert_eq!(hooks.retry(&args(&urn, &ty, &m, false)).await, Ok(true));
        let mut second = args(&urn, &ty, &m, false);
        second.attempt = 2;
        assert_eq!(hooks.retry(&second).await, Ok(false));
        assert_eq!(hooks.retry(&args(&urn, &ty, &m, true)).await, Ok(false));
    }
}
