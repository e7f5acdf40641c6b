//! The engine: runs one operation (update, preview, refresh, destroy) by
//! spawning the actors of `architecture.md` §2 under a supervisor, feeding
//! the program through the Source, and collecting the summary and the new
//! snapshot.
//!
//! Every actor is spawned linked to an operation supervisor that turns a
//! failure (an error or a panic in a handler) into an operation error; an
//! unsupervised ractor actor's panic would vanish.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::{mpsc, oneshot};

use crate::actors::coordinator::{CoordArgs, CoordinatorActor};
use crate::actors::executor::{ExecConfig, ExecShared, ExecutorActor};
use crate::actors::generator::{GenArgs, GeneratorActor, MigrationEnv, Mode};
use crate::actors::persister::PersisterActor;
use crate::actors::protocol::{GenMsg, MigrationReport, PersistMsg};
use crate::actors::source::SourceActor;
use crate::actors::{Context, NullSource, Program};
use crate::events::{EngineEvent, EventSink, Summary};
use crate::model::ambient::{SharedClock, SharedIds};
use crate::model::snapshot::{Manifest, OperationType};
use crate::model::urn::STACK_TYPE;
use crate::model::{Deployment, TypeToken, Urn};
use crate::persist::{MemoryPersister, PersistError, Persister, SnapshotBuilder};
use crate::plan::generator::{PlanOptions, Planner, UpdateOptions};
use crate::provider::ProviderError;
use crate::provider::ProviderRegistry;
use crate::source::goal::Goal;
use crate::sync::gate::Gate;
use crate::sync::shim::ArcSwap;

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Steps, planning or the program failed; the outcome holds the
    /// snapshot as persisted (every resource created is in it).
    #[error("the operation failed: {}", failure_text(.0))]
    Failed(Box<Outcome>),
    /// An actor failed (an error or a panic): a bug in keel.
    #[error("internal error: {0}")]
    ActorFailed(String),
    /// An actor could not be started.
    #[error("cannot start the engine: {0}")]
    Spawn(String),
    /// The final state could not be persisted.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// The prior states could not be upgraded to their types' current
    /// schema versions (`architecture.md` §8): the operation failed before
    /// planning and nothing was changed.
    #[error(transparent)]
    Schema(Box<crate::provider::SchemaUpgradeError>),
}

impl From<crate::provider::SchemaUpgradeError> for EngineError {
    fn from(e: crate::provider::SchemaUpgradeError) -> Self {
        Self::Schema(Box::new(e))
    }
}

fn failure_text(o: &Outcome) -> String {
    let mut parts: Vec<String> = o
        .summary
        .failures
        .iter()
        .map(|f| format!("{} of {} failed: {}", f.kind, f.urn, f.message))
        .collect();
    parts.extend(o.summary.errors.iter().cloned());
    parts.join("; ")
}

/// The result type of operations.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// What an operation produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Steps per kind, failures, duration.
    pub summary: Summary,
    /// The deployment after the operation (in a preview: what the update
    /// would leave, in memory only).
    pub snapshot: Deployment,
    /// Bytes the persister wrote.
    pub bytes_written: u64,
    /// Fsyncs the persister issued.
    pub fsyncs: u64,
    /// The plan a preview recorded (`generate_plan`).
    pub plan: Option<crate::plan::saved::SavedPlan>,
    /// What each registration's component migration did.
    pub migrations: Vec<MigrationReport>,
    /// The wall time of the provider calls that act on the cloud
    /// (creates, updates, deletes, reads, imports), summed over all of
    /// them, in milliseconds: divided by `parallel`, the least time the
    /// operation could have taken with its calls as they were.
    pub provider_call_ms: f64,
}

/// The least default ceiling of the pending-operation window (when
/// [`EngineConfig::pending_window`] is 0; the default ceiling is the larger
/// of this and [`DEFAULT_WINDOW_ROUNDS`] x `parallel`): enough `begin`
/// records per fsync that an `up` at the default parallelism is not bound
/// by one fsync per `parallel` resources (BENCHMARKS.md, "Issue 20, second
/// slice B").
pub const DEFAULT_PENDING_WINDOW: usize = 64;

/// Rounds of `parallel` provider calls the default window ceiling holds.
/// The window in use stays at `parallel` unless calls are short enough
/// that the extra rounds cost a quiesce little (BENCHMARKS.md, "Issue 20,
/// tenth slice").
pub const DEFAULT_WINDOW_ROUNDS: usize = 4;

/// The engine's configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The stack's name.
    pub stack: String,
    /// The project's name.
    pub project: String,
    /// Provider calls running at once (default 4 x cores; 1 = serial).
    pub parallel: usize,
    /// The ceiling of the pending-operation window: operations whose
    /// `begin` may be durable ahead of their provider calls, and chains
    /// calling a provider handed to the executor at once (0, the default:
    /// the larger of [`DEFAULT_PENDING_WINDOW`] and
    /// [`DEFAULT_WINDOW_ROUNDS`] x `parallel`; never less than `parallel`).
    /// A crash leaves at most this many operations pending. The window in
    /// use is `parallel` plus extra rounds of `parallel` only while
    /// provider calls are short enough that a migration's quiesce, which
    /// waits for every chain handed over, waits at most 5 ms for them
    /// (ARCHITECTURE.md, "Execution"). Wider windows let more `begin`
    /// records share an fsync and keep the permits busy between them.
    pub pending_window: usize,
    /// Keep going after a step fails, skipping its dependents.
    pub continue_on_error: bool,
    /// Where events go.
    pub events: EventSink,
    /// Registrations a program may have in flight at once (backpressure).
    pub max_in_flight_registrations: usize,
    /// The operator's controls (targets, excludes, replaces, plans).
    pub update: UpdateOptions,
    /// Keep the whole committed prior list in each migration report (tests
    /// and diagnostics; costs a copy of the state per migration).
    pub report_migration_states: bool,
    /// The program's directory, where relative asset and archive paths
    /// resolve (`None`: the current directory).
    pub program_dir: Option<std::path::PathBuf>,
    /// Step events carry the changed values with secrets masked, not only
    /// the changed keys (`--diff`).
    pub detailed_diffs: bool,
    /// Configuration of providers' packages (`<package>:<key>` -> value,
    /// Pulumi's `aws:region`): default providers take their package's
    /// keys as inputs.
    pub package_config: std::collections::BTreeMap<String, crate::model::PropertyValue>,
    /// The program's package declarations (`sdks/<name>.yaml`): a default
    /// provider of a package one declares a replacement parameterization
    /// of a base plugin is named and recorded as such.
    pub packages: Vec<crate::provider::package::PackageDecl>,
    /// Where the IDs of new default providers come from (system: unique;
    /// tests inject a counting source for stable output).
    pub ids: SharedIds,
    /// The wall clock of state timestamps (`created`, `modified`) and the
    /// manifest's time (system; tests inject a fixed one).
    pub clock: SharedClock,
    /// Asks a running operation to stop gracefully ([`Cancel`]).
    pub cancel: Cancel,
}

/// A graceful stop of a running operation (the CLI's first Ctrl-C, as
/// Pulumi's): no new step starts, in-flight steps finish and are saved,
/// the providers are told (`Provider::cancel`, a plugin's `Cancel`), and
/// the operation ends failed, saying it was cancelled. Dropping the
/// operation's future instead aborts in-flight steps (they stay pending).
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    asked: Arc<std::sync::atomic::AtomicBool>,
    notify: Arc<tokio::sync::Notify>,
}

impl Cancel {
    /// Asks the operation (or the next one using this token) to stop.
    pub fn cancel(&self) {
        self.asked.store(true, std::sync::atomic::Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether a stop was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.asked.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Completes once a stop is asked for.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future loses nothing.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self {
            stack: "dev".into(),
            project: "project".into(),
            parallel: 4 * cores,
            pending_window: 0,
            continue_on_error: false,
            events: EventSink::default(),
            max_in_flight_registrations: 4096,
            update: UpdateOptions::default(),
            report_migration_states: false,
            program_dir: None,
            detailed_diffs: false,
            package_config: std::collections::BTreeMap::new(),
            packages: Vec::new(),
            ids: SharedIds::system(),
            clock: SharedClock::system(),
            cancel: Cancel::default(),
        }
    }
}

/// Runs operations against providers from a registry.
#[derive(Debug, Clone)]
pub struct Engine {
    config: EngineConfig,
    registry: ProviderRegistry,
}

/// The operation supervisor: reports any linked actor's failure.
struct Supervisor;

impl Actor for Supervisor {
    type Msg = ();
    type State = mpsc::UnboundedSender<String>;
    type Arguments = mpsc::UnboundedSender<String>;

    async fn pre_start(
        &self,
        _myself: ActorRef<()>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<()>,
        event: SupervisionEvent,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            let name = cell.get_name().unwrap_or_else(|| "actor".into());
            tracing::error!(actor = %name, error = %err, "actor failed");
            let _ = tx.send(format!("the {name} actor failed: {err}"));
        }
        Ok(())
    }
}

impl Engine {
    /// An engine with its configuration and providers.
    pub fn new(config: EngineConfig, registry: ProviderRegistry) -> Self {
        Self { config, registry }
    }

    /// The same engine with other operator controls (targets, excludes,
    /// replaces, plans) for the next operation.
    pub fn with_options(&self, update: UpdateOptions) -> Self {
        let mut e = self.clone();
        e.config.update = update;
        e
    }

    /// The ceiling of the pending-operation window: `pending_window` (0:
    /// the larger of [`DEFAULT_PENDING_WINDOW`] and
    /// [`DEFAULT_WINDOW_ROUNDS`] x `parallel`), at least `parallel`.
    pub fn pending_window(&self) -> usize {
        let w = match self.config.pending_window {
            0 => DEFAULT_PENDING_WINDOW
                .max(DEFAULT_WINDOW_ROUNDS.saturating_mul(self.config.parallel)),
            w => w,
        };
        w.max(self.config.parallel).max(1)
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The stack resource's URN.
    ///
    /// # Errors
    /// [`EngineError::Spawn`] when the stack or project name cannot form a
    /// URN.
    pub fn root_urn(&self) -> Result<Urn> {
        let ty = TypeToken::parse(STACK_TYPE).map_err(|e| EngineError::Spawn(e.to_string()))?;
        let name = format!("{}-{}", self.config.project, self.config.stack);
        Urn::new(&self.config.stack, &self.config.project, None, &ty, &name)
            .map_err(|e| EngineError::Spawn(e.to_string()))
    }

    /// Runs the program and reconciles the stack with it.
    ///
    /// # Errors
    /// [`EngineError::Failed`] with the persisted outcome when a step,
    /// planning or the program failed; other variants for internal errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the operation as a crash would, without
    /// leaking anything: no further step starts, the program's task is
    /// aborted and every actor of the operation stops. A provider call
    /// already under way finishes in the background, unrecorded; its
    /// `begin` record stays as a pending operation, which the next
    /// operation on the stack recovers as after a kill.
    pub async fn update(
        &self,
        prior: Deployment,
        program: impl Program,
        persister: Box<dyn Persister>,
    ) -> Result<Outcome> {
        self.run(
            Mode::Update,
            false,
            prior,
            Some(Arc::new(program)),
            persister,
        )
        .await
    }

    /// Plans the update without changing anything.
    ///
    /// # Errors
    /// As [`Engine::update`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the operation as a crash would, without
    /// leaking anything: no further step starts, the program's task is
    /// aborted and every actor of the operation stops. A provider call
    /// already under way finishes in the background, unrecorded; its
    /// `begin` record stays as a pending operation, which the next
    /// operation on the stack recovers as after a kill.
    pub async fn preview(&self, prior: Deployment, program: impl Program) -> Result<Outcome> {
        self.run(
            Mode::Update,
            true,
            prior,
            Some(Arc::new(program)),
            Box::new(MemoryPersister::new()),
        )
        .await
    }

    /// Reconciles the state with the cloud.
    ///
    /// # Errors
    /// As [`Engine::update`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the operation as a crash would, without
    /// leaking anything: no further step starts, the program's task is
    /// aborted and every actor of the operation stops. A provider call
    /// already under way finishes in the background, unrecorded; its
    /// `begin` record stays as a pending operation, which the next
    /// operation on the stack recovers as after a kill.
    pub async fn refresh(
        &self,
        prior: Deployment,
        persister: Box<dyn Persister>,
    ) -> Result<Outcome> {
        self.run(
            Mode::Refresh,
            false,
            prior,
            Some(Arc::new(NullSource)),
            persister,
        )
        .await
    }

    /// Deletes every resource of the stack.
    ///
    /// # Errors
    /// As [`Engine::update`]; protected resources block it before anything
    /// is deleted.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the operation as a crash would, without
    /// leaking anything: no further step starts, the program's task is
    /// aborted and every actor of the operation stops. A provider call
    /// already under way finishes in the background, unrecorded; its
    /// `begin` record stays as a pending operation, which the next
    /// operation on the stack recovers as after a kill.
    pub async fn destroy(
        &self,
        prior: Deployment,
        persister: Box<dyn Persister>,
    ) -> Result<Outcome> {
        self.run(
            Mode::Destroy,
            false,
            prior,
            Some(Arc::new(NullSource)),
            persister,
        )
        .await
    }

    /// Runs one operation, then ends its providers (plugin processes
    /// stop), whether it succeeded or not.
    async fn run(
        &self,
        mode: Mode,
        preview: bool,
        prior: Deployment,
        program: Option<Arc<dyn Program>>,
        persister: Box<dyn Persister>,
    ) -> Result<Outcome> {
        let r = self.operate(mode, preview, prior, program, persister).await;
        self.registry.shutdown().await;
        // The summary is the operation's last event: what the plugins said
        // as they stopped comes before it.
        let summary = match &r {
            Ok(o) => Some(&o.summary),
            Err(EngineError::Failed(o)) => Some(&o.summary),
            Err(_) => None,
        };
        if let Some(summary) = summary {
            self.config
                .events
                .send(EngineEvent::Summary(summary.clone()));
        }
        r
    }

    async fn operate(
        &self,
        mode: Mode,
        preview: bool,
        mut prior: Deployment,
        program: Option<Arc<dyn Program>>,
        persister: Box<dyn Persister>,
    ) -> Result<Outcome> {
        let started = Instant::now();
        let spawn_err = |e: ractor::SpawnErr| EngineError::Spawn(e.to_string());
        let root = self.root_urn()?;
        let recovered = self
            .resolve_pending(&mut prior, mode == Mode::Refresh)
            .await;
        // Recovery changed the prior state: it becomes the persisted base
        // before any journal entry names a state by its position.
        let rebase = !recovered.is_empty() && !preview;
        for warning in recovered {
            tracing::warn!("{warning}");
            self.config.events.send(EngineEvent::Diagnostic {
                severity: "warning".into(),
                urn: None,
                message: warning,
            });
        }
        // Migrations are restricted by the pending operations of the prior
        // state after recovery (`migrations.md` §5.4): those it resolved
        // restrict nothing.
        let pending_operations = !prior.pending_operations.is_empty();
        let pending_creates: std::collections::HashSet<Urn> = prior
            .pending_operations
            .iter()
            .filter(|op| op.ty == OperationType::Creating)
            .map(|op| op.resource.urn.clone())
            .collect();
        // Schema upgrades, before planning and before any component
        // migration callback sees the state. A failure changes nothing.
        let upgraded = match mode {
            Mode::Destroy => Vec::new(),
            _ => crate::provider::schema::upgrade(&self.registry, &mut prior.resources).await?,
        };
        // What served each package, as recorded, carried into this
        // operation's manifest (a crash keeps the record).
        prior.record_serving(&BTreeMap::new());
        let served_before = std::mem::take(&mut prior.manifest.plugins);
        let olds = SnapshotBuilder::share_resources(&mut prior);
        let upgrades: Vec<_> = upgraded
            .iter()
            .map(|&i| {
                let s = olds[i].clone();
                let contents = Box::new(crate::model::step::lock(&s).clone());
                (s, contents)
            })
            .collect();
        let snippets = prior.snippets.clone();
        let extensions = prior.extensions.clone();
        prior.manifest = Manifest::keel(self.config.clock.now_rfc3339());
        prior.manifest.plugins = served_before;
        let builder = SnapshotBuilder::new(prior, olds.clone());
        let (builder, persister) = if rebase {
            let (r, builder, persister) = tokio::task::spawn_blocking(move || {
                let (mut builder, mut persister) = (builder, persister);
                let r = persister.rebase(&mut builder);
                (r, builder, persister)
            })
            .await
            .map_err(|e| EngineError::Persist(PersistError::Stopped(e.to_string())))?;
            r.map_err(EngineError::Persist)?;
            (builder, persister)
        } else {
            (builder, persister)
        };

        let (fail_tx, mut fail_rx) = mpsc::unbounded_channel();
        let supported = persister.supports_migrations();
        let migration_env = MigrationEnv {
            prior: Arc::new(ArcSwap::from_pointee(olds.clone())),
            supported,
            pending_operations,
            snippets: snippets.clone(),
            extensions: extensions.clone(),
            report_states: self.config.report_migration_states,
        };
        let published = migration_env.prior.clone();
        let published_for_ctx = migration_env.prior.clone();
        let published_at_end = migration_env.prior.clone();
        let (sup, sup_handle) = Actor::spawn(None, Supervisor, fail_tx)
            .await
            .map_err(spawn_err)?;
        let cell = sup.get_cell();
        // Dropped on every return, and when this future is dropped: stops
        // whatever of the operation still runs.
        let mut guard = RunGuard::new(cell.clone());
        let (persist, _) = Actor::spawn_linked(
            Some(actor_name("persister")),
            PersisterActor,
            (builder, persister),
            cell.clone(),
        )
        .await
        .map_err(spawn_err)?;
        guard.actors.push(persist.get_cell());
        // The upgraded entries are persisted first, as one mutation (a
        // preview persists nothing).
        if !preview && !upgrades.is_empty() {
            let m = crate::persist::Mutation::Apply(crate::persist::Change::Upgrade {
                states: upgrades,
            });
            let r = match persist
                .call(|reply| PersistMsg::Mutate(m, reply), None)
                .await
            {
                Ok(ractor::rpc::CallResult::Success(r)) => r,
                Ok(other) => Err(PersistError::Stopped(format!("{other:?}"))),
                Err(e) => Err(PersistError::Stopped(e.to_string())),
            };
            if let Err(e) = r {
                stop_all(&[persist.get_cell()]);
                sup.stop(None);
                let _ = sup_handle.await;
                return Err(EngineError::Persist(e));
            }
        }
        let gate = Gate::new();
        let hooks_by_name = crate::source::hooks::HooksByName::default();
        let shared = ExecShared::new(
            ExecConfig {
                parallel: self.config.parallel,
                window: self.pending_window(),
                continue_on_error: self.config.continue_on_error,
                preview,
                detailed_diffs: self.config.detailed_diffs,
                clock: self.config.clock.clone(),
                hooks_by_name: hooks_by_name.clone(),
            },
            gate.clone(),
            self.registry.clone(),
            persist.clone(),
            self.config.events.clone(),
        );
        guard.shared = Some(shared.clone());
        // A graceful stop: no new step, providers told; in-flight steps
        // finish and are saved.
        {
            let (cancel, shared, registry) = (
                self.config.cancel.clone(),
                shared.clone(),
                self.registry.clone(),
            );
            let watcher = tokio::spawn(async move {
                cancel.cancelled().await;
                shared.stop();
                registry.cancel().await;
            });
            guard.tasks.push(watcher.abort_handle());
        }
        let planner = Planner::new(
            PlanOptions {
                stack: self.config.stack.clone(),
                project: self.config.project.clone(),
                preview,
                update: self.config.update.clone(),
                package_config: self.config.package_config.clone(),
                packages: self.config.packages.clone(),
                ids: self.config.ids.clone(),
                pending_creates,
            },
            olds,
        );
        let (done_tx, done_rx) = oneshot::channel();
        let (generator, _) = Actor::spawn_linked(
            Some(actor_name("generator")),
            GeneratorActor,
            GenArgs {
                planner,
                mode,
                registry: self.registry.clone(),
                gate: gate.clone(),
                stop: shared.stop_flag(),
                written: shared.written(),
                exec: shared.clone(),
                events: self.config.events.clone(),
                done: done_tx,
                preview,
                migration: migration_env,
            },
            cell.clone(),
        )
        .await
        .map_err(spawn_err)?;
        guard.actors.push(generator.get_cell());
        let (executor, _) = Actor::spawn_linked(
            Some(actor_name("executor")),
            ExecutorActor,
            (shared.clone(), generator.clone()),
            cell.clone(),
        )
        .await
        .map_err(spawn_err)?;
        guard.actors.push(executor.get_cell());
        let (source, _) = Actor::spawn_linked(
            Some(actor_name("source")),
            SourceActor,
            generator.clone(),
            cell.clone(),
        )
        .await
        .map_err(spawn_err)?;
        guard.actors.push(source.get_cell());
        let (coordinator, _) = Actor::spawn_linked(
            Some(actor_name("coordinator")),
            CoordinatorActor,
            CoordArgs {
                source: source.clone(),
                gate,
                prior: published,
                persister: persist.clone(),
                events: self.config.events.clone(),
                written: shared.written(),
            },
            cell.clone(),
        )
        .await
        .map_err(spawn_err)?;
        guard.actors.push(coordinator.get_cell());
        // Every actor of the operation, for shutdown on any path.
        let cells = [
            source.get_cell(),
            executor.get_cell(),
            generator.get_cell(),
            persist.get_cell(),
            coordinator.get_cell(),
        ];
        generator
            .cast(GenMsg::Wire(executor.clone(), coordinator.clone()))
            .map_err(|e| EngineError::Spawn(e.to_string()))?;

        let ctx = Context::new(
            source.clone(),
            self.config.stack.clone(),
            self.config.project.clone(),
            preview,
            root.clone(),
            self.config.max_in_flight_registrations,
        )
        .with_prior(published_for_ctx)
        .with_asset_root(self.config.program_dir.clone())
        .with_hooks_by_name(hooks_by_name);
        // Told when every step ran (a program hosting hooks waits for it).
        let finish = ctx.clone();
        match program {
            Some(program) => {
                // An update's program runs under the stack resource, which
                // the engine registers first (as an SDK does); refresh and
                // destroy run the null source, which registers nothing.
                let register_root = mode == Mode::Update && !program.registers_root();
                let stack = Goal::component(
                    TypeToken::parse(STACK_TYPE).unwrap_or_default(),
                    root.name().to_owned(),
                );
                let run_ctx = ctx.clone();
                let task = tokio::spawn(async move {
                    if register_root {
                        run_ctx.register(stack).await.map_err(|e| e.to_string())?;
                    }
                    program.run(run_ctx).await.map_err(|e| e.to_string())
                });
                guard.tasks.push(task.abort_handle());
                let watcher = tokio::spawn(async move {
                    let err = match task.await {
                        Ok(Ok(())) => None,
                        Ok(Err(e)) => Some(e),
                        Err(e) => Some(format!("the program panicked: {e}")),
                    };
                    ctx.done(err);
                });
                guard.tasks.push(watcher.abort_handle());
            }
            None => ctx.done(None),
        }

        let gen_outcome = tokio::select! {
            outcome = done_rx => outcome.ok(),
            failure = fail_rx.recv() => {
                finish.finish();
                let msg = failure.unwrap_or_else(|| "the supervisor stopped".into());
                stop_all(&cells);
                sup.stop(None);
                return Err(EngineError::ActorFailed(msg));
            }
        };
        finish.finish();
        let (gen_errors, plan, migrations, rules) = match gen_outcome {
            Some(o) => (Some(o.errors), o.plan, o.migrations, o.rules),
            None => (None, None, Vec::new(), Vec::new()),
        };
        let mut errors = gen_errors.unwrap_or_else(|| vec!["the step generator stopped".into()]);
        if self.config.cancel.is_cancelled() {
            errors.push("cancelled by the operator: no step started after it, the steps in flight finished and were saved; run the operation again to go on".into());
        }
        let served: BTreeMap<String, String> = self
            .registry
            .served()
            .into_iter()
            .map(|(pkg, how)| (pkg, how.as_str().to_owned()))
            .collect();
        let finish = served.clone();
        // Every step ran: release the other actors' handles to the states
        // (the published prior list, the written index, the generator's
        // and the executor's own), so that the persister's final
        // compaction moves them into the outcome instead of copying every
        // one. An actor that does not stop in time only costs that copy.
        published_at_end.store(Arc::new(Vec::new()));
        shared.written().clear();
        for actor in [
            &source.get_cell(),
            &coordinator.get_cell(),
            &executor.get_cell(),
            &generator.get_cell(),
        ] {
            let _ = actor
                .stop_and_wait(None, Some(std::time::Duration::from_secs(2)))
                .await;
        }
        let snapshot = match persist
            .call(|reply| PersistMsg::Finish(finish, reply), None)
            .await
        {
            Ok(ractor::rpc::CallResult::Success(Ok(s))) => s,
            Ok(ractor::rpc::CallResult::Success(Err(e))) => {
                errors.push(e.to_string());
                call_snapshot(&persist).await.unwrap_or_default()
            }
            other => {
                stop_all(&cells);
                sup.stop(None);
                return Err(EngineError::ActorFailed(format!(
                    "the persister did not answer: {other:?}"
                )));
            }
        };
        let (bytes_written, fsyncs) = match persist.call(PersistMsg::Io, None).await {
            Ok(ractor::rpc::CallResult::Success(io)) => io,
            _ => (0, 0),
        };
        stop_all(&cells);
        sup.stop(None);
        let _ = sup_handle.await;

        let failures = shared.failures();
        let summary = Summary {
            result: if failures.is_empty() && errors.is_empty() {
                "succeeded".into()
            } else {
                "failed".into()
            },
            steps: shared.counts(),
            failures,
            errors,
            rules,
            served,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        };
        let outcome = Outcome {
            summary,
            snapshot,
            bytes_written,
            fsyncs,
            plan,
            migrations,
            provider_call_ms: shared.provider_time().as_secs_f64() * 1000.0,
        };
        if outcome.summary.succeeded() {
            Ok(outcome)
        } else {
            Err(EngineError::Failed(Box::new(outcome)))
        }
    }
}

impl Engine {
    /// Resolves the operations an interrupted run left pending, so that
    /// every object in the cloud is owned by exactly one state:
    /// - a create whose object exists (`Provider::find_all`, an object of
    ///   its URN no state holds) is adopted: as the resource when no live
    ///   state has its URN (or the live one is pending its replacement,
    ///   its object already deleted), otherwise as the new state of the
    ///   interrupted create-before-delete replacement, the old one kept
    ///   marked for deletion (as the step would have ended);
    /// - a delete whose object is gone removes the resource, and the
    ///   references other states hold to it are dropped (as refresh does);
    /// - the rest are cleared.
    ///
    /// Returns one summarized warning per outcome.
    async fn resolve_pending(&self, prior: &mut Deployment, refresh: bool) -> Vec<String> {
        let mut adopted = Vec::new();
        let mut replacements = Vec::new();
        let mut removed = Vec::new();
        let mut cleared = Vec::new();
        let mut unknown = Vec::new();
        let mut kept = Vec::new();
        let mut cleared_blind = Vec::new();
        let mut gone = std::collections::HashMap::new();
        let mut imported = Vec::new();
        let mut not_found = Vec::new();
        let mut dropped = Vec::new();
        let opts = &self.config.update;
        let unmatched: Vec<String> = opts
            .import_pending_creates
            .iter()
            .filter(|(urn, _)| {
                !prior
                    .pending_operations
                    .iter()
                    .any(|op| op.ty == OperationType::Creating && op.resource.urn == *urn)
            })
            .map(|(urn, _)| urn.to_string())
            .collect();
        for op in std::mem::take(&mut prior.pending_operations) {
            // `refresh --import-pending-creates URN ID`: the operator found
            // the object; it is read by its ID and adopted (as Pulumi turns
            // the create into an import).
            let import = opts
                .import_pending_creates
                .iter()
                .find(|(urn, _)| *urn == op.resource.urn)
                .map(|(_, id)| id.clone());
            if let (OperationType::Creating, true, Some(id)) = (op.ty, refresh, import) {
                let found = match crate::model::ProviderRef::parse(&op.resource.provider) {
                    Ok(r) => {
                        let s = &op.resource;
                        let req =
                            crate::provider::ResourceRequest::new(&s.urn, &s.ty, &id, &s.inputs);
                        self.registry
                            .get(&r)
                            .read(req)
                            .await
                            .map_err(|e| e.to_string())
                    }
                    Err(e) => Err(e.to_string()),
                };
                match found {
                    Ok(Some(obj)) => {
                        adopt(prior, adopted_state(&op.resource, obj));
                        imported.push(format!("{} (id {id})", op.resource.urn));
                        continue;
                    }
                    Ok(None) => not_found.push(format!("{} (id {id})", op.resource.urn)),
                    Err(e) => not_found.push(format!("{} (id {id}: {e})", op.resource.urn)),
                }
                kept.push(op);
                continue;
            }
            if op.ty == OperationType::Creating {
                // A create the provider cannot look up stays pending, as
                // Pulumi keeps it: its object may exist, and clearing the
                // record would orphan it. Only the operator clears it
                // (`refresh --clear-pending-creates`).
                if let Some(p) = crate::model::ProviderRef::parse(&op.resource.provider)
                    .ok()
                    .map(|r| self.registry.get(&r))
                {
                    if let Err(e) = p.find_all(&op.resource.urn, &op.resource.ty).await {
                        if refresh && opts.clear_pending_creates {
                            dropped.push(op.resource.urn.to_string());
                            continue;
                        }
                        match e {
                            ProviderError::CannotLookUp { .. } => {
                                unknown.push(op.resource.urn.to_string());
                            }
                            e => cleared_blind.push(format!("{} ({e})", op.resource.urn)),
                        }
                        kept.push(op);
                        continue;
                    }
                }
            }
            let s = op.resource;
            let provider = crate::model::ProviderRef::parse(&s.provider)
                .ok()
                .map(|r| self.registry.get(&r));
            match (op.ty, provider) {
                (OperationType::Creating, Some(p)) => {
                    // Looked up above: an error there kept the record.
                    let Ok(found) = p.find_all(&s.urn, &s.ty).await else {
                        continue;
                    };
                    let owned =
                        |id: &str| prior.resources.iter().any(|r| r.urn == s.urn && r.id == id);
                    let Some(obj) = found.into_iter().find(|o| !owned(&o.id)) else {
                        cleared.push(s.urn.to_string());
                        continue;
                    };
                    let mut new = adopted_state(&s, obj);
                    crate::provider::schema::stamp(&*p, &mut new);
                    let line = format!("{} (id {})", s.urn, new.id);
                    if adopt(prior, new) {
                        replacements.push(line);
                    } else {
                        adopted.push(line);
                    }
                }
                (OperationType::Deleting, Some(p)) => {
                    let req = crate::provider::ResourceRequest {
                        urn: &s.urn,
                        ty: &s.ty,
                        old_ty: None,
                        id: &s.id,
                        inputs: &s.inputs,
                        old_inputs: None,
                        old_outputs: Some(&s.outputs),
                        ignore_changes: &[],
                        replace_on_changes: &[],
                        timeout: None,
                        preview: false,
                    };
                    match p.read(req).await {
                        Ok(None) => {
                            prior
                                .resources
                                .retain(|r| !(r.urn == s.urn && r.id == s.id));
                            gone.insert(s.urn.clone(), s.parent.clone());
                            removed.push(s.urn.to_string());
                        }
                        _ => cleared.push(s.urn.to_string()),
                    }
                }
                (ty, _) => cleared.push(format!("{ty:?} {}", s.urn)),
            }
        }
        // A resource pending its replacement may still depend on one whose
        // delete went through: drop such references, as refresh does.
        crate::persist::drop_vanished(&mut prior.resources, &gone);
        let mut warnings = Vec::new();
        let mut say = |list: &[String], what: &str, text: &str| {
            if !list.is_empty() {
                let s = crate::events::summarize(what, list);
                warnings.push(format!("{s}: {text}"));
            }
        };
        say(&adopted, "interrupted create", "adopted: the objects had been made, so they are in the state now and not created again");
        say(&replacements, "interrupted create-replacement", "adopted as the new states: the objects had been made; the replaced ones are marked for deletion and deleted at the end of this update (or the next)");
        say(
            &removed,
            "interrupted delete",
            "the objects are gone, so the resources left the state",
        );
        say(
            &cleared,
            "interrupted operation",
            "cleared: the cloud holds nothing of them that the state does not",
        );
        say(&unknown, "interrupted create", "kept pending: the provider cannot tell whether the objects exist; check the cloud, then `keel refresh --import-pending-creates URN ID` adopts an object that was made, or `keel refresh --clear-pending-creates` drops the records of those that were not");
        say(&cleared_blind, "interrupted create", "kept pending: the cloud could not be asked whether the objects exist; `keel refresh --import-pending-creates URN ID` adopts one that was made, `--clear-pending-creates` drops the records");
        say(
            &imported,
            "pending create",
            "imported: read by the ID given and adopted into the state",
        );
        say(
            &not_found,
            "pending create",
            "kept pending: no object has the ID given",
        );
        say(
            &unmatched,
            "URN",
            "given to --import-pending-creates, but no interrupted create has it: nothing imported",
        );
        say(
            &dropped,
            "pending create",
            "cleared (--clear-pending-creates): if an object was made, it is no longer tracked",
        );
        prior.pending_operations = kept;
        warnings
    }
}

/// The state of an interrupted create's resource `s` holding the object
/// `obj` that was found (adopted by recovery or imported by the operator).
fn adopted_state(
    s: &crate::model::State,
    obj: crate::provider::ObjectState,
) -> crate::model::State {
    let mut new = s.clone();
    new.id = obj.id;
    new.inputs = obj.inputs;
    new.outputs = obj.outputs;
    new.delete = false;
    new.pending_replacement = false;
    new
}

/// Puts an adopted state into `prior` as its interrupted step would have
/// ended: in place of a live state pending its replacement (delete-before-
/// replace: the old object is gone), beside a live one then marked for
/// deletion (create-before-delete; true is returned), else as a new
/// resource.
fn adopt(prior: &mut Deployment, new: crate::model::State) -> bool {
    let live = prior
        .resources
        .iter()
        .position(|r| r.urn == new.urn && !r.delete);
    match live {
        Some(i) if prior.resources[i].pending_replacement => {
            prior.resources[i] = new;
            false
        }
        Some(i) => {
            prior.resources[i].delete = true;
            prior.resources.push(new);
            true
        }
        None => {
            prior.resources.push(new);
            false
        }
    }
}

fn actor_name(role: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("keel-{role}-{n}")
}

/// Everything an operation started that must not outlive it: its actors,
/// the program's task and the executor's work. Dropping the guard (on any
/// return of [`Engine::run`], or when the caller drops the operation's
/// future) stops the executor from starting steps, aborts the program task
/// and stops every actor and the supervisor.
struct RunGuard {
    supervisor: ractor::ActorCell,
    actors: Vec<ractor::ActorCell>,
    tasks: Vec<tokio::task::AbortHandle>,
    shared: Option<Arc<ExecShared>>,
}

impl RunGuard {
    fn new(supervisor: ractor::ActorCell) -> Self {
        Self {
            supervisor,
            actors: Vec::new(),
            tasks: Vec::new(),
            shared: None,
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            shared.stop();
        }
        for t in &self.tasks {
            t.abort();
        }
        stop_all(&self.actors);
        self.supervisor.stop(None);
    }
}

fn stop_all(cells: &[ractor::ActorCell]) {
    for c in cells {
        c.stop(None);
    }
}

async fn call_snapshot(persist: &ActorRef<PersistMsg>) -> Option<Deployment> {
    match persist.call(PersistMsg::Snapshot, None).await {
        Ok(ractor::rpc::CallResult::Success(s)) => Some(s),
        _ => None,
    }
}
