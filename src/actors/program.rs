//! The program API: a [`Program`] registers resources through its
//! [`Context`].
//!
//! A program (a Rust closure here; program files and the gRPC front end
//! compile onto the same API) registers resources through a [`Context`].
//! Each call becomes an event for the Source actor; the reply comes back
//! once the resource's steps finished, so a program awaits outputs as it
//! would with an SDK; registrations that do not wait on each other proceed
//! concurrently.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ractor::ActorRef;
use tokio::sync::oneshot;

use super::protocol::{SourceEvent, SourceMsg};
use crate::events::StepFailure;
use crate::model::{PropertyMap, Urn};
use crate::plan::generator::PlanError;
use crate::provider::ProviderError;
use crate::source::assets;
use crate::source::goal::{Goal, ReadGoal, Registered};
use crate::source::ProgramError;

/// Why a registration did not complete.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegisterError {
    /// Planning refused it.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The provider's check or diff failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// Its step failed.
    #[error("{} of {} failed: {}", .0.kind, .0.urn, .0.message)]
    Step(StepFailure),
    /// Skipped because a resource it depends on failed.
    #[error("skipped: it depends on {dependency}, which failed")]
    Skipped {
        /// The failed dependency.
        dependency: Urn,
    },
    /// The operation stopped (an earlier failure) before it ran.
    #[error("not run: the operation stopped after an earlier failure")]
    Stopped,
    /// Persisting it failed.
    #[error("persisting failed: {0}")]
    Persist(Arc<crate::persist::PersistError>),
    /// An invoke failed.
    #[error(transparent)]
    Invoke(#[from] crate::provider::builtins::InvokeError),
    /// A component migration was rejected (its rule id is in the error).
    #[error(transparent)]
    Migration(#[from] crate::migrate::MigrationError),
    /// A provider reference a program gave cannot be used.
    #[error("provider reference `{reference}`: {message}")]
    BadProvider {
        /// The reference as given.
        reference: String,
        /// What is wrong.
        message: String,
    },
    /// An asset or archive in its inputs cannot be read to hash it.
    #[error("resource `{resource}`: {source}")]
    Asset {
        /// The resource (`type::name`).
        resource: String,
        /// What could not be read.
        source: assets::AssetError,
    },
}

/// A boxed program future.
pub type ProgramFuture = Pin<Box<dyn Future<Output = Result<(), ProgramError>> + Send>>;

/// A program: registers resources through its context.
pub trait Program: Send + Sync + 'static {
    /// Runs the program.
    fn run(&self, ctx: Context) -> ProgramFuture;

    /// True when the program registers the stack resource
    /// (`pulumi:pulumi:Stack`) itself, as Pulumi's SDKs do; otherwise the
    /// engine registers it before running the program.
    fn registers_root(&self) -> bool {
        false
    }
}

impl<F, Fut> Program for F
where
    F: Fn(Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ProgramError>> + Send + 'static,
{
    fn run(&self, ctx: Context) -> ProgramFuture {
        Box::pin(self(ctx))
    }
}

/// The program of refresh and destroy: it registers nothing, so every prior
/// resource is refreshed (refresh) or deleted (destroy).
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSource;

impl Program for NullSource {
    fn run(&self, _ctx: Context) -> ProgramFuture {
        Box::pin(async { Ok(()) })
    }
}

/// What a program uses to talk to the engine (cheap to clone; clones share
/// the connection).
#[derive(Debug, Clone)]
pub struct Context {
    source: ActorRef<SourceMsg>,
    inner: Arc<ContextInfo>,
}

#[derive(Debug)]
struct ContextInfo {
    stack: String,
    project: String,
    preview: bool,
    root: Urn,
    /// Bounds the registrations in flight: the backpressure the source
    /// applies to the program (actor mailboxes are unbounded).
    window: tokio::sync::Semaphore,
    /// Where relative asset and archive paths resolve (the program's
    /// directory; `None`: the current directory).
    asset_root: Option<std::path::PathBuf>,
    /// The published prior list (as committed by migrations so far).
    prior: Option<Arc<crate::sync::shim::ArcSwap<crate::sync::StateList<crate::model::State>>>>,
    /// The hooks the program hosts by name (for the executor's deletes of
    /// resources the program no longer registers).
    hooks_by_name: crate::source::hooks::HooksByName,
    /// Set once every step of the operation ran.
    finished: tokio::sync::watch::Sender<bool>,
}

impl Context {
    pub(crate) fn new(
        source: ActorRef<SourceMsg>,
        stack: String,
        project: String,
        preview: bool,
        root: Urn,
        window: usize,
    ) -> Self {
        Self {
            source,
            inner: Arc::new(ContextInfo {
                stack,
                project,
                preview,
                root,
                window: tokio::sync::Semaphore::new(window.max(1)),
                asset_root: None,
                prior: None,
                hooks_by_name: crate::source::hooks::HooksByName::default(),
                finished: tokio::sync::watch::channel(false).0,
            }),
        }
    }

    pub(crate) fn with_hooks_by_name(mut self, hooks: crate::source::hooks::HooksByName) -> Self {
        if let Some(info) = Arc::get_mut(&mut self.inner) {
            info.hooks_by_name = hooks;
        }
        self
    }

    /// Lets the executor find the hooks a prior state names
    /// (`resourceHooks`) when the program no longer registers it: a front
    /// end hosting hooks by name sets it once.
    pub fn set_hook_resolver(&self, resolver: crate::source::hooks::HookResolver) {
        self.inner.hooks_by_name.set(resolver);
    }

    /// Marks the operation's steps all run ([`Context::finished`] returns).
    pub(crate) fn finish(&self) {
        self.inner.finished.send_replace(true);
    }

    /// Returns once every step of the operation ran, including those after
    /// the program ended (deletes of what it no longer registers), or the
    /// operation stopped.
    pub async fn finished(&self) {
        let mut rx = self.inner.finished.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    pub(crate) fn with_prior(
        mut self,
        prior: Arc<crate::sync::shim::ArcSwap<crate::sync::StateList<crate::model::State>>>,
    ) -> Self {
        if let Some(info) = Arc::get_mut(&mut self.inner) {
            info.prior = Some(prior);
        }
        self
    }

    pub(crate) fn with_asset_root(mut self, root: Option<std::path::PathBuf>) -> Self {
        if let Some(info) = Arc::get_mut(&mut self.inner) {
            info.asset_root = root;
        }
        self
    }

    /// The stack's prior resources as they stand now (after any migration
    /// committed so far in this operation), in order. For tooling that
    /// re-registers prior state, like `refresh --run-program` and the
    /// conformance harness.
    pub fn prior_states(&self) -> Vec<crate::model::State> {
        self.inner.prior.as_ref().map_or_else(Vec::new, |p| {
            p.load_full()
                .iter()
                .map(|s| crate::model::step::lock(s).clone())
                .collect()
        })
    }

    /// The outputs of the live prior state of `urn` (as committed by
    /// migrations so far), if the stack had one.
    pub fn prior_outputs(&self, urn: &Urn) -> Option<PropertyMap> {
        let prior = self.inner.prior.as_ref()?.load_full();
        prior.iter().find_map(|s| {
            let s = crate::model::step::lock(s);
            (s.urn == *urn && !s.delete).then(|| s.outputs.clone())
        })
    }

    /// The stack's name.
    pub fn stack(&self) -> &str {
        &self.inner.stack
    }

    /// The project's name.
    pub fn project(&self) -> &str {
        &self.inner.project
    }

    /// True during a preview (outputs of new resources are unknown).
    pub fn is_preview(&self) -> bool {
        self.inner.preview
    }

    /// The stack resource's URN (the default parent).
    pub fn root(&self) -> &Urn {
        &self.inner.root
    }

    async fn send<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, RegisterError>>) -> SourceEvent,
    ) -> Result<T, RegisterError> {
        // Safe from deadlock: a registration only refers to resources
        // registered before it, so the ones holding permits never wait on
        // one that waits for a permit.
        let _permit = self
            .inner
            .window
            .acquire()
            .await
            .map_err(|_| RegisterError::Stopped)?;
        let (tx, rx) = oneshot::channel();
        self.source
            .cast(SourceMsg::Event(make(tx)))
            .map_err(|_| RegisterError::Stopped)?;
        rx.await.unwrap_or(Err(RegisterError::Stopped))
    }

    /// Registers a resource and waits until its steps finished.
    ///
    /// # Errors
    /// [`RegisterError`] when planning refused it, its step failed, or the
    /// operation stopped.
    ///
    /// # Cancel safety
    /// Dropping the future does not withdraw the registration; it runs and
    /// its result is discarded.
    ///
    /// The assets and archives in its inputs get their content hashes first
    /// ([`assets::ensure_hashes`], on the blocking pool: it reads files).
    pub fn register(
        &self,
        goal: Goal,
    ) -> impl std::future::Future<Output = Result<Registered, RegisterError>> + Send + '_ {
        // Boxed before the future is built, so a registration waiting for
        // its steps holds a pointer, not the goal (a program has one such
        // future per resource in flight: with the goal inline, each was
        // about a kilobyte more).
        self.register_boxed(Box::new(goal))
    }

    async fn register_boxed(&self, mut goal: Box<Goal>) -> Result<Registered, RegisterError> {
        if assets::needs_hashes(&goal.inputs) {
            let root = self
                .inner
                .asset_root
                .clone()
                .unwrap_or_else(|| std::path::PathBuf::from("."));
            let mut inputs = std::mem::take(&mut goal.inputs);
            let hashed = tokio::task::spawn_blocking(move || {
                assets::ensure_hashes(&mut inputs, &root).map(|()| inputs)
            })
            .await
            .map_err(|_| RegisterError::Stopped)?;
            goal.inputs = hashed.map_err(|source| RegisterError::Asset {
                resource: format!("{}::{}", goal.ty, goal.name),
                source,
            })?;
        }
        self.send(|tx| SourceEvent::Register(goal, tx)).await
    }

    /// Reads an external resource (`ReadResource`).
    ///
    /// # Errors
    /// As [`Context::register`].
    pub async fn read(&self, goal: ReadGoal) -> Result<Registered, RegisterError> {
        self.send(|tx| SourceEvent::Read(Box::new(goal), tx)).await
    }

    /// Sets a resource's outputs (`RegisterResourceOutputs`), typically a
    /// component's.
    ///
    /// # Errors
    /// As [`Context::register`].
    pub async fn register_outputs(
        &self,
        urn: &Urn,
        outputs: PropertyMap,
    ) -> Result<(), RegisterError> {
        let urn = urn.clone();
        self.send(|tx| SourceEvent::Outputs(urn, outputs, tx)).await
    }

    /// Calls a function (`Invoke`): the built-ins such as
    /// `pulumi:pulumi:getStack`.
    ///
    /// # Errors
    /// [`RegisterError::Invoke`] for an unknown function.
    pub async fn invoke(
        &self,
        token: &str,
        args: PropertyMap,
    ) -> Result<PropertyMap, RegisterError> {
        let token = token.to_owned();
        self.send(|tx| SourceEvent::Invoke(token, args, tx)).await
    }

    /// The provider serving a function, a remote component or a method
    /// ([`ProviderQuery`]): an explicit reference as given, else the
    /// package's default provider, registered first if need be (as Pulumi
    /// does for an invoke) and awaited until its registration finished, so
    /// the instance is configured. The wait holds no registration slot:
    /// a construct in flight must not block the registrations it causes.
    ///
    /// # Errors
    /// [`RegisterError`] when the reference is malformed, the default
    /// provider cannot be planned or its registration failed, or the
    /// operation stopped.
    pub async fn provider(
        &self,
        query: super::ProviderQuery,
    ) -> Result<
        (
            crate::model::ProviderRef,
            Arc<dyn crate::provider::Provider>,
        ),
        RegisterError,
    > {
        let super::protocol::ProviderAnswer {
            reference,
            provider,
            ready,
        } = self.send(|tx| SourceEvent::Provider(query, tx)).await?;
        if let Some(mut ready) = ready {
            let done = ready
                .wait_for(Option::is_some)
                .await
                .map_err(|_| RegisterError::Stopped)?
                .clone();
            if let Some(Err(e)) = done {
                return Err(e);
            }
        }
        Ok((reference, provider))
    }

    pub(crate) fn done(&self, err: Option<String>) {
        let _ = self.source.cast(SourceMsg::Event(SourceEvent::Done(err)));
    }
}
