//! The StepExecutor actor: runs chains on a bounded pool.
//!
//! A chain takes one reservation from the execution gate (`sync::gate`)
//! when it is submitted and holds it until its last step finished, so a
//! quiescing migration waits for every chain submitted before it and no
//! chain submitted after it starts until resume. A chain first waits for
//! the chains of what it depends on, then runs its steps in order. Each
//! provider call is bracketed by a `begin` and an end mutation that the
//! persister makes durable, and holds a pool permit (default 4 x cores)
//! from its `begin` to the end of the call, so at most that many
//! operations are ever pending; waits for end records share group
//! commits. Deletes run as antichains, each in parallel, in order.

use crate::locks::MutexExt;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dashmap::DashMap;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{oneshot, watch, Semaphore};

use crate::events::{EngineEvent, EventSink, StepFailure};
use crate::model::snapshot::OperationType;
pub use crate::model::step::Written;
use crate::model::step::{lock, share, StateRef, StepKind};
use crate::model::{PropertyMap, ProviderRef, State, Urn};
use crate::persist::actor::PersistMsg;
use crate::persist::{Change, Mutation, PersistError};
use crate::plan::actor::GenMsg;
use crate::plan::step::{Chain, Step};
use crate::provider::{schema, Provider, ProviderError, ProviderRegistry, ResourceRequest};
use crate::source::goal::Registered;
use crate::source::hooks::{HookArgs, HookPoint, ResourceHooks};
use crate::source::RegisterError;
use crate::sync::gate::{Gate, Reservation, Reserved};

/// Where a resource's chain stands in this operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Submitted, not finished.
    Pending,
    /// Finished.
    Done,
    /// Failed or skipped.
    Failed,
}

/// The executor's configuration.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// Chains running at once (1 = serial).
    pub parallel: usize,
    /// Keep going after a failure (skipping dependents of failed steps).
    pub continue_on_error: bool,
    /// A preview: providers compute, change nothing.
    pub preview: bool,
    /// Step events carry the changed values, not only the keys (`--diff`).
    pub detailed_diffs: bool,
}

/// Set once a failure (or the end of the operation) stops new work; shared
/// by the executor, its tasks and the generator.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// Stops new work.
    pub fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// True once new work is stopped.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// State shared by the executor's tasks.
pub struct ExecShared {
    config: ExecConfig,
    gate: Gate,
    pool: Semaphore,
    status: DashMap<Urn, watch::Sender<Status>>,
    news: Arc<Written>,
    registry: ProviderRegistry,
    /// Provider instances by reference text (no parse per step).
    providers: DashMap<String, Arc<dyn Provider>>,
    persister: ActorRef<PersistMsg>,
    events: EventSink,
    stopped: StopFlag,
    failures: Mutex<Vec<StepFailure>>,
    counts: Mutex<BTreeMap<StepKind, usize>>,
    next_op: AtomicU64,
}

impl std::fmt::Debug for ExecShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecShared")
            .field("config", &self.config)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl ExecShared {
    /// Shared executor state.
    pub fn new(
        config: ExecConfig,
        gate: Gate,
        registry: ProviderRegistry,
        persister: ActorRef<PersistMsg>,
        events: EventSink,
    ) -> Arc<Self> {
        Arc::new(Self {
            pool: Semaphore::new(config.parallel.max(1)),
            config,
            gate,
            status: DashMap::new(),
            news: Arc::new(Written::default()),
            registry,
            providers: DashMap::new(),
            persister,
            events,
            stopped: StopFlag::default(),
            failures: Mutex::new(Vec::new()),
            counts: Mutex::new(BTreeMap::new()),
            next_op: AtomicU64::new(1),
        })
    }

    /// Steps completed per kind.
    pub fn counts(&self) -> BTreeMap<StepKind, usize> {
        self.counts.locked().clone()
    }

    /// Failed steps.
    pub fn failures(&self) -> Vec<StepFailure> {
        self.failures.locked().clone()
    }

    /// The states written (or read) so far in this operation, shared with
    /// the migration coordinator, which reads them once it quiesced.
    pub fn written(&self) -> Arc<Written> {
        self.news.clone()
    }

    /// The flag that stops new work, shared with the generator.
    pub fn stop_flag(&self) -> StopFlag {
        self.stopped.clone()
    }

    /// Stops new work (a failure that fails the operation).
    pub fn stop(&self) {
        self.stopped.set();
    }

    /// True once a failure stopped new work.
    pub fn stopped(&self) -> bool {
        self.stopped.is_set()
    }

    /// How many steps failed so far.
    pub fn failure_count(&self) -> usize {
        self.failures.locked().len()
    }

    /// Sends a diagnostic about a resource to the event stream.
    pub fn diagnostic(&self, severity: &str, urn: &Urn, message: String) {
        self.events.send(EngineEvent::Diagnostic {
            severity: severity.to_owned(),
            urn: Some(urn.clone()),
            message,
        });
    }

    /// The execution gate.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    fn fail(&self, f: StepFailure) {
        self.failures.locked().push(f);
        if !self.config.continue_on_error {
            self.stopped.set();
        }
    }

    fn count(&self, kind: StepKind) {
        *self.counts.locked().entry(kind).or_default() += 1;
    }

    fn set_status(&self, urn: &Urn, s: Status) {
        if let Some(tx) = self.status.get(urn) {
            tx.send_replace(s);
        }
    }

    /// Hands a mutation to the persister; the receiver answers once it is
    /// durable. Mutations are made durable in the order they are queued.
    fn queue(&self, m: Mutation) -> oneshot::Receiver<Result<(), PersistError>> {
        let (tx, rx) = oneshot::channel();
        // A stopped persister drops the sender: the receiver reports it.
        let _ = self.persister.cast(PersistMsg::Mutate(m, tx.into()));
        rx
    }

    async fn persist(&self, m: Mutation) -> Result<(), PersistError> {
        let r = self
            .persister
            .call(|reply| PersistMsg::Mutate(m, reply), None)
            .await;
        match r {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(other) => Err(PersistError::Stopped(format!("{other:?}"))),
            Err(e) => Err(PersistError::Stopped(e.to_string())),
        }
    }

    fn provider_for(&self, s: &State) -> Result<Arc<dyn Provider>, StepError> {
        if let Some(p) = self.providers.get(&s.provider) {
            return Ok(p.clone());
        }
        let r = ProviderRef::parse(&s.provider).map_err(|e| StepError::Other(e.to_string()))?;
        let p = self.registry.get(&r);
        self.providers.insert(s.provider.clone(), p.clone());
        Ok(p)
    }
}

/// Messages to the executor.
#[derive(Debug)]
pub enum ExecMsg {
    /// Run a chain; reply to the registration when it finished. Sent only
    /// by [`submit`] and [`send_reserved`]: the chain's gate reservation
    /// travels with it, taken before it entered the mailbox
    /// ([`Gate::submit`]).
    Chain(Reserved<Submitted>),
    /// Run deletes, group after group.
    Deletes(Vec<Vec<Step>>),
    /// Run refreshes in parallel.
    Refreshes(Vec<Step>),
    /// Set a registered resource's outputs once its chain finished.
    Outputs {
        /// The resource.
        urn: Urn,
        /// The outputs.
        outputs: PropertyMap,
        /// Answered when persisted.
        reply: oneshot::Sender<Result<(), RegisterError>>,
    },
}

/// Where a chain's registration waits for its outcome.
pub type ChainReply = oneshot::Sender<Result<Registered, RegisterError>>;

/// A chain and the registration waiting for it.
#[derive(Debug)]
pub struct Submitted {
    /// The steps.
    pub chain: Chain,
    /// The registration waiting for it.
    pub reply: Option<ChainReply>,
}

/// What [`submit`] did with a chain.
#[derive(Debug)]
pub enum Submission {
    /// In the executor's mailbox, holding its gate reservation.
    Sent,
    /// A quiesce is pending, so no reservation may be taken: the chain
    /// comes back, to be sent with [`send_reserved`] (in submission order)
    /// once [`Gate::reserve`] grants one.
    Gated(Chain, Option<ChainReply>),
    /// The executor stopped; the reservation was released.
    Stopped,
}

/// Submits a chain to the executor: takes its gate reservation *now*, then
/// sends it with the message (`migrations.md` §7: a chain submitted before
/// a migration quiesces finishes before the migration runs, even while it
/// still waits in the executor's mailbox).
///
/// Never waits: with a quiesce pending the chain is handed back
/// ([`Submission::Gated`]).
pub fn submit(
    executor: &ActorRef<ExecMsg>,
    gate: &Gate,
    chain: Chain,
    reply: Option<ChainReply>,
) -> Submission {
    match gate.submit(Submitted { chain, reply }) {
        Ok(reserved) => {
            if executor.cast(ExecMsg::Chain(reserved)).is_ok() {
                Submission::Sent
            } else {
                Submission::Stopped
            }
        }
        Err(Submitted { chain, reply }) => Submission::Gated(chain, reply),
    }
}

/// Sends a chain with the reservation taken for it; false when the
/// executor stopped (the reservation is then released).
pub fn send_reserved(
    executor: &ActorRef<ExecMsg>,
    chain: Chain,
    reply: Option<ChainReply>,
    reservation: Reservation,
) -> bool {
    executor
        .cast(ExecMsg::Chain(Reserved::new(
            Submitted { chain, reply },
            reservation,
        )))
        .is_ok()
}

/// The StepExecutor actor.
#[derive(Debug, Default)]
pub struct ExecutorActor;

/// The executor's state: shared with its tasks, plus the generator to tell.
#[derive(Debug)]
pub struct ExecutorState {
    shared: Arc<ExecShared>,
    generator: ActorRef<GenMsg>,
}

impl Actor for ExecutorActor {
    type Msg = ExecMsg;
    type State = ExecutorState;
    type Arguments = (Arc<ExecShared>, ActorRef<GenMsg>);

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        (shared, generator): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ExecutorState { shared, generator })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let shared = state.shared.clone();
        let generator = state.generator.clone();
        match msg {
            ExecMsg::Chain(reserved) => {
                let (Submitted { chain, reply }, reservation) = reserved.start();
                // The reservation was taken at submission (`submit`), so a
                // quiescer that asked while this message waited in the
                // mailbox waits for this chain.
                for step in &chain.steps {
                    if step.new.is_some() {
                        shared
                            .status
                            .insert(step.urn.clone(), watch::channel(Status::Pending).0);
                    }
                }
                tokio::spawn(async move {
                    let r = Box::pin(run_chain(&shared, chain, reservation)).await;
                    // The generator hears of the chain (and of every step
                    // failure so far) before the program can hear of its
                    // outcome and end.
                    let _ = generator.cast(GenMsg::ChainDone {
                        failures: shared.failure_count(),
                    });
                    if let Some(reply) = reply {
                        let _ = reply.send(r);
                    }
                });
            }
            ExecMsg::Deletes(groups) => {
                tokio::spawn(async move {
                    // With continue-on-error a resource whose delete failed
                    // (or was held back) keeps what it refers to: deleting
                    // its parent or a dependency would leave it dangling.
                    let mut held: HashSet<Urn> = HashSet::new();
                    let hold = |s: &StateRef, held: &mut HashSet<Urn>| {
                        held.extend(crate::persist::referents(&lock(s)));
                    };
                    for group in groups {
                        if shared.stopped() {
                            break;
                        }
                        let (run, keep): (Vec<Step>, Vec<Step>) =
                            group.into_iter().partition(|s| !held.contains(&s.urn));
                        for step in &keep {
                            if let Some(old) = &step.old {
                                hold(old, &mut held);
                            }
                            shared.events.send(EngineEvent::Diagnostic {
                                severity: "warning".into(),
                                urn: Some(step.urn.clone()),
                                message: format!(
                                    "not deleted: a resource that refers to {} failed to delete",
                                    step.urn
                                ),
                            });
                        }
                        for old in run_group(&shared, run).await {
                            hold(&old, &mut held);
                        }
                    }
                    let _ = generator.cast(GenMsg::DeletesDone);
                });
            }
            ExecMsg::Refreshes(steps) => {
                tokio::spawn(async move {
                    let _ = run_group(&shared, steps).await;
                    let _ = generator.cast(GenMsg::DeletesDone);
                });
            }
            ExecMsg::Outputs {
                urn,
                outputs,
                reply,
            } => {
                tokio::spawn(async move {
                    let _ = reply.send(set_outputs(&shared, urn, outputs).await);
                });
            }
        }
        Ok(())
    }
}

/// Runs independent steps in parallel, each under its own reservation, and
/// waits for all of them (a delete antichain, or refreshes).
/// Returns the prior states of the steps that failed.
async fn run_group(shared: &Arc<ExecShared>, steps: Vec<Step>) -> Vec<StateRef> {
    let tasks: Vec<_> = steps
        .into_iter()
        .map(|step| {
            let shared = shared.clone();
            tokio::spawn(async move {
                let old = step.old.clone();
                let reservation = shared.gate.reserve().await;
                match Box::pin(run_steps(&shared, vec![step], reservation)).await {
                    Err(RegisterError::Step(_)) => old,
                    _ => None,
                }
            })
        })
        .collect();
    let mut failed = Vec::new();
    for t in tasks {
        if let Ok(Some(old)) = t.await {
            failed.push(old);
        }
    }
    failed
}

async fn wait_for(shared: &ExecShared, urn: &Urn) -> Status {
    let rx = shared.status.get(urn).map(|tx| tx.subscribe());
    match rx {
        None => Status::Done,
        Some(mut rx) => match rx.wait_for(|s| *s != Status::Pending).await {
            Ok(s) => *s,
            Err(_) => Status::Failed,
        },
    }
}

async fn set_outputs(
    shared: &ExecShared,
    urn: Urn,
    outputs: PropertyMap,
) -> Result<(), RegisterError> {
    if wait_for(shared, &urn).await != Status::Done {
        return Err(RegisterError::Stopped);
    }
    let state = shared
        .news
        .0
        .get(&urn)
        .map(|s| s.clone())
        .ok_or(RegisterError::Stopped)?;
    shared
        .persist(Mutation::Apply(Change::Outputs { state, outputs }))
        .await
        .map_err(|e| RegisterError::Persist(e.to_string()))
}

async fn run_chain(
    shared: &ExecShared,
    chain: Chain,
    reservation: Reservation,
) -> Result<Registered, RegisterError> {
    for dep in &chain.waits_for {
        if wait_for(shared, dep).await == Status::Failed {
            for step in &chain.steps {
                shared.set_status(&step.urn, Status::Failed);
            }
            return Err(RegisterError::Skipped {
                dependency: dep.clone(),
            });
        }
    }
    run_steps(shared, chain.steps, reservation).await
}

/// Runs steps in order under one reservation (provider calls take pool
/// permits).
async fn run_steps(
    shared: &ExecShared,
    steps: Vec<Step>,
    reservation: Reservation,
) -> Result<Registered, RegisterError> {
    let _reservation = reservation;
    let urns: Vec<Urn> = steps.iter().map(|s| s.urn.clone()).collect();
    let mark = |s: Status| {
        for u in &urns {
            shared.set_status(u, s);
        }
    };
    if shared.stopped() {
        mark(Status::Failed);
        return Err(RegisterError::Stopped);
    }
    let mut last = None;
    for step in steps {
        let (kind, urn) = (step.kind, step.urn.clone());
        let diff = if shared.events.is_active() {
            crate::plan::diff::step_diff(&step, shared.config.detailed_diffs).map(Box::new)
        } else {
            None
        };
        shared.events.send(EngineEvent::StepStarted {
            kind,
            urn: urn.clone(),
            diff,
        });
        let started = Instant::now();
        let span = tracing::info_span!("step", kind = kind.as_str(), urn = %urn);
        // Boxed: a step's future holds whole states across awaits; keeping it
        // off the chain's future keeps spawned tasks small (cheap to move).
        let r = tracing::Instrument::instrument(Box::pin(execute(shared, step)), span).await;
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        match r {
            Ok(reg) => {
                shared.count(kind);
                shared.events.send(EngineEvent::StepFinished {
                    kind,
                    urn: urn.clone(),
                    duration_ms,
                    error: None,
                });
                if let Some(reg) = reg {
                    shared.set_status(&urn, Status::Done);
                    last = Some(reg);
                }
            }
            Err(e) => {
                let message = e.to_string();
                shared.events.send(EngineEvent::StepFinished {
                    kind,
                    urn: urn.clone(),
                    duration_ms,
                    error: Some(message.clone()),
                });
                let failure = StepFailure { urn, kind, message };
                shared.fail(failure.clone());
                mark(Status::Failed);
                return Err(RegisterError::Step(failure));
            }
        }
    }
    mark(Status::Done);
    last.ok_or(RegisterError::Stopped)
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Persist(#[from] PersistError),
    #[error("{0}")]
    Other(String),
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn registered(s: &State) -> Registered {
    Registered {
        urn: s.urn.clone(),
        id: s.id.clone(),
        outputs: s.outputs.clone(),
    }
}

/// Writes `new` (superseding `old`) with no provider call.
async fn write(
    shared: &ExecShared,
    old: Option<StateRef>,
    new: State,
    mark_old_delete: bool,
) -> Result<Option<Registered>, StepError> {
    let reg = registered(&new);
    let urn = new.urn.clone();
    let new = share(new);
    shared
        .persist(Mutation::Apply(Change::Write {
            old,
            new: new.clone(),
            mark_old_delete,
        }))
        .await?;
    shared.news.0.insert(urn, new);
    Ok(Some(reg))
}

/// Ends a provider operation by writing `new` (superseding `old`, or
/// keeping it marked for deletion), runs the after hook once that is
/// durable, and records the state as written this operation.
async fn end_write(
    shared: &ExecShared,
    op: Begun<'_>,
    old: Option<StateRef>,
    new: State,
    mark_old_delete: bool,
    hooks: Option<&ResourceHooks>,
    after: Option<HookPoint>,
) -> Result<Option<Registered>, StepError> {
    let reg = registered(&new);
    let urn = new.urn.clone();
    let new = share(new);
    end(
        shared,
        op,
        Change::Write {
            old,
            new: new.clone(),
            mark_old_delete,
        },
    )
    .await?;
    if let Some(point) = after {
        hook(hooks, point, &lock(&new), Some(&reg.outputs))?;
    }
    shared.news.0.insert(urn, new);
    Ok(Some(reg))
}

/// A provider operation begun: its id, and the pool permit it holds until
/// its end record is queued behind its begin record.
struct Begun<'a> {
    op: u64,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

/// Brackets a provider call with `begin` and its end mutation.
async fn bracket<'a, T>(
    shared: &'a ExecShared,
    kind: OperationType,
    state: &State,
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<(T, Begun<'a>), StepError> {
    // The begin record is written only once the step holds a pool permit,
    // just before the provider call, and the permit is released only once
    // the end record is queued (records are durable in queue order): a
    // crash leaves at most `parallel` operations pending, not every chain
    // waiting for a slot. Waits for end records share group commits.
    let Ok(permit) = shared.pool.acquire().await else {
        return Err(StepError::Other("the executor stopped".into()));
    };
    let begun = Begun {
        op: shared.next_op.fetch_add(1, Ordering::Relaxed),
        _permit: permit,
    };
    if !shared.config.preview {
        shared
            .persist(Mutation::Begin {
                op: begun.op,
                kind,
                state: Box::new(state.clone()),
            })
            .await?;
    }
    match call.await {
        Ok(v) => Ok((v, begun)),
        Err(e) => {
            fail(shared, begun).await?;
            Err(e.into())
        }
    }
}

/// Records that a begun operation failed (nothing changed).
async fn fail(shared: &ExecShared, begun: Begun<'_>) -> Result<(), PersistError> {
    if shared.config.preview {
        return Ok(());
    }
    let durable = shared.queue(Mutation::Failed { op: begun.op });
    drop(begun);
    durable
        .await
        .unwrap_or_else(|_| Err(PersistError::Stopped("the persister stopped".into())))
}

async fn end(shared: &ExecShared, begun: Begun<'_>, change: Change) -> Result<(), StepError> {
    let m = if shared.config.preview {
        Mutation::Apply(change)
    } else {
        Mutation::End {
            op: begun.op,
            change,
        }
    };
    let durable = shared.queue(m);
    drop(begun);
    durable
        .await
        .unwrap_or_else(|_| Err(PersistError::Stopped("the persister stopped".into())))?;
    Ok(())
}

fn request<'a>(
    s: &'a State,
    old: Option<&'a State>,
    preview: bool,
    timeout: f64,
) -> ResourceRequest<'a> {
    ResourceRequest {
        urn: &s.urn,
        ty: &s.ty,
        id: &s.id,
        inputs: &s.inputs,
        old_inputs: old.map(|o| &o.inputs),
        old_outputs: old.map(|o| &o.outputs),
        ignore_changes: &s.ignore_changes,
        replace_on_changes: &s.replace_on_changes,
        timeout: (timeout > 0.0).then(|| std::time::Duration::from_secs_f64(timeout)),
        preview,
    }
}

/// Runs a point's hooks.
fn hook(
    hooks: Option<&ResourceHooks>,
    point: HookPoint,
    s: &State,
    outputs: Option<&PropertyMap>,
) -> Result<(), StepError> {
    let Some(h) = hooks else { return Ok(()) };
    h.run(&HookArgs {
        point,
        urn: &s.urn,
        ty: &s.ty,
        inputs: &s.inputs,
        outputs,
        error: None,
        attempt: 0,
    })
    .map_err(StepError::Other)
}

/// Asks the error hooks whether to retry a failed operation.
fn retry(
    hooks: Option<&ResourceHooks>,
    point: HookPoint,
    s: &State,
    e: &StepError,
    attempt: u32,
) -> bool {
    let Some(h) = hooks else { return false };
    // Only provider failures are retried: a persistence failure is final.
    if !matches!(e, StepError::Provider(_)) {
        return false;
    }
    let message = e.to_string();
    h.retry(&HookArgs {
        point,
        urn: &s.urn,
        ty: &s.ty,
        inputs: &s.inputs,
        outputs: None,
        error: Some(&message),
        attempt,
    })
}

/// Describes how a program's inputs differ from an object to import
/// (`None`: they match).
fn import_mismatch(goal: &State, obj: &crate::provider::ObjectState) -> Option<String> {
    let diffs: Vec<String> = goal
        .inputs
        .iter()
        .filter(|(k, v)| obj.inputs.get(*k) != Some(*v))
        .map(|(k, v)| match obj.inputs.get(k) {
            Some(found) => format!(
                "`{k}` is {} in the cloud, {} in the program",
                found.to_json(),
                v.to_json()
            ),
            None => format!(
                "`{k}` is absent in the cloud, {} in the program",
                v.to_json()
            ),
        })
        .collect();
    (!diffs.is_empty()).then(|| diffs.join("; "))
}

/// Executes one step. Returns what the registration learns (for steps
/// that write a state).
async fn execute(shared: &ExecShared, step: Step) -> Result<Option<Registered>, StepError> {
    let preview = shared.config.preview;
    let old_ref = step.old.clone();
    // A same step compares under the lock; every other step needs a copy.
    let old = (step.kind != StepKind::Same)
        .then(|| old_ref.as_ref().map(|o| lock(o).clone()))
        .flatten();
    match step.kind {
        StepKind::Same if step.skipped => {
            // Outside the targets and new: the program learns its goal;
            // nothing is created or written.
            let new = step
                .new
                .ok_or_else(|| StepError::Other("same step without a goal".into()))?;
            Ok(Some(registered(&new)))
        }
        StepKind::Same => {
            let new = step
                .new
                .ok_or_else(|| StepError::Other("same step without a goal".into()))?;
            let mut new = new;
            new.mark_secret_outputs();
            // Nothing to change: keep the prior state object as it is (no
            // copy, a tiny journal record, its JSON written back verbatim).
            if let Some(o) = &old_ref {
                let unchanged = lock(o).same_fields(&new);
                if unchanged {
                    let reg = registered(&new);
                    shared
                        .persist(Mutation::Apply(Change::Keep { old: o.clone() }))
                        .await?;
                    shared.news.0.insert(new.urn, o.clone());
                    return Ok(Some(reg));
                }
            }
            write(shared, old_ref, new, false).await
        }
        StepKind::Create | StepKind::CreateReplacement | StepKind::Update => {
            let mut new = step
                .new
                .ok_or_else(|| StepError::Other("step without a goal".into()))?;
            // Create-before-delete keeps the old half, marked for deletion;
            // a resource already deleted by delete-before-replace is superseded.
            let mark_old_delete = step.kind == StepKind::CreateReplacement
                && old.as_ref().is_some_and(|o| !o.pending_replacement);
            if !new.custom || new.ty.is_provider() {
                if new.ty.is_provider() {
                    let r = ProviderRef::new(new.urn.clone(), new.id.clone())
                        .map_err(|e| StepError::Other(e.to_string()))?;
                    shared.registry.get(&r).configure(&new.inputs).await?;
                }
                return write(shared, old_ref, new, mark_old_delete).await;
            }
            let provider = shared.provider_for(&new)?;
            let stamp = now();
            let hooks = step.hooks.as_deref().filter(|_| !preview);
            if step.kind == StepKind::Update {
                let prior_outputs = old.as_ref().map(|o| &o.outputs);
                hook(hooks, HookPoint::BeforeUpdate, &new, prior_outputs)?;
                let mut attempt = 0;
                let (obj, op) = loop {
                    attempt += 1;
                    let req = request(&new, old.as_ref(), preview, new.custom_timeouts.update.0);
                    match bracket(shared, OperationType::Updating, &new, provider.update(req)).await
                    {
                        Ok(v) => break v,
                        Err(e) if retry(hooks, HookPoint::BeforeUpdate, &new, &e, attempt) => {
                            continue
                        }
                        Err(e) => return Err(e),
                    }
                };
                new.outputs = obj.outputs;
                new.mark_secret_outputs();
                new.modified = stamp;
                schema::stamp(&*provider, &mut new);
                // After hooks run once the result is durable.
                return end_write(
                    shared,
                    op,
                    old_ref,
                    new,
                    false,
                    hooks,
                    Some(HookPoint::AfterUpdate),
                )
                .await;
            }
            hook(hooks, HookPoint::BeforeCreate, &new, None)?;
            let mut attempt = 0;
            let (obj, op) = loop {
                attempt += 1;
                let req = request(&new, None, preview, new.custom_timeouts.create.0);
                match bracket(shared, OperationType::Creating, &new, provider.create(req)).await {
                    Ok(v) => break v,
                    Err(e) if retry(hooks, HookPoint::BeforeCreate, &new, &e, attempt) => continue,
                    Err(e) => return Err(e),
                }
            };
            new.id = obj.id;
            new.outputs = obj.outputs;
            new.mark_secret_outputs();
            schema::stamp(&*provider, &mut new);
            if !preview {
                new.created = stamp.clone();
                new.modified = stamp;
            }
            end_write(
                shared,
                op,
                old_ref,
                new,
                mark_old_delete,
                hooks,
                Some(HookPoint::AfterCreate),
            )
            .await
        }
        StepKind::Delete | StepKind::DeleteReplaced | StepKind::RemovePendingReplace => {
            let old_ref =
                old_ref.ok_or_else(|| StepError::Other("delete without a prior state".into()))?;
            let old = old.unwrap_or_default();
            let change = if step.keep_pending {
                Change::MarkPendingReplacement { old: old_ref }
            } else {
                Change::Remove { old: old_ref }
            };
            if step.skip_provider || preview {
                shared.persist(Mutation::Apply(change)).await?;
                return Ok(None);
            }
            let provider = shared.provider_for(&old)?;
            let hooks = step.hooks.as_deref();
            hook(hooks, HookPoint::BeforeDelete, &old, Some(&old.outputs))?;
            let mut attempt = 0;
            let ((), op) = loop {
                attempt += 1;
                let req = request(&old, Some(&old), preview, old.custom_timeouts.delete.0);
                match bracket(shared, OperationType::Deleting, &old, provider.delete(req)).await {
                    Ok(v) => break v,
                    Err(e) if retry(hooks, HookPoint::BeforeDelete, &old, &e, attempt) => continue,
                    Err(e) => return Err(e),
                }
            };
            end(shared, op, change).await?;
            hook(hooks, HookPoint::AfterDelete, &old, None)?;
            Ok(None)
        }
        StepKind::Import => {
            let mut new = step
                .new
                .ok_or_else(|| StepError::Other("import without a goal".into()))?;
            let provider = shared.provider_for(&new)?;
            let (obj, op) = {
                let req = request(&new, None, preview, 0.0);
                bracket(shared, OperationType::Importing, &new, provider.read(req)).await?
            };
            let mismatch = obj.as_ref().map(|o| import_mismatch(&new, o));
            let obj = match (obj, mismatch) {
                (Some(o), Some(None)) => o,
                (found, mismatch) => {
                    fail(shared, op).await?;
                    return Err(match (found, mismatch) {
                        (None, _) => ProviderError::NotFound {
                            urn: new.urn.clone(),
                            id: new.id.clone(),
                        }
                        .into(),
                        (_, Some(Some(diff))) => StepError::Other(format!(
                            "cannot import {} (id `{}`): the program's inputs differ from the object in the cloud: {diff}; change the program to match, or drop `import`",
                            new.urn, new.id
                        )),
                        _ => StepError::Other("import failed".into()),
                    });
                }
            };
            new.id = obj.id;
            new.outputs = obj.outputs;
            new.mark_secret_outputs();
            schema::stamp(&*provider, &mut new);
            end_write(shared, op, old_ref, new, false, None, None).await
        }
        StepKind::Read => {
            let mut new = step
                .new
                .ok_or_else(|| StepError::Other("read without a goal".into()))?;
            let provider = shared.provider_for(&new)?;
            let (obj, op) = {
                let req = request(&new, None, preview, 0.0);
                bracket(shared, OperationType::Reading, &new, provider.read(req)).await?
            };
            let Some(obj) = obj else {
                let _ = fail(shared, op).await;
                return Err(ProviderError::NotFound {
                    urn: new.urn.clone(),
                    id: new.id.clone(),
                }
                .into());
            };
            new.inputs = obj.inputs;
            new.outputs = obj.outputs;
            new.mark_secret_outputs();
            schema::stamp(&*provider, &mut new);
            end_write(shared, op, old_ref, new, false, None, None).await
        }
        StepKind::Refresh => {
            let old_ref =
                old_ref.ok_or_else(|| StepError::Other("refresh without a prior state".into()))?;
            let old = old.unwrap_or_default();
            let provider = shared.provider_for(&old)?;
            let req = request(&old, Some(&old), preview, 0.0);
            let read = match shared.pool.acquire().await {
                Ok(_permit) => provider.read(req).await?,
                Err(_) => return Err(StepError::Other("the executor stopped".into())),
            };
            let new = read.map(|obj| {
                let mut s = old.clone();
                s.outputs = obj.outputs;
                s.inputs = obj.inputs;
                s.mark_secret_outputs();
                schema::stamp(&*provider, &mut s);
                Box::new(s)
            });
            shared
                .persist(Mutation::Apply(Change::Refresh { old: old_ref, new }))
                .await?;
            Ok(None)
        }
    }
}

#[cfg(test)]
#[cfg(feature = "sim")]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};

    use super::*;
    use crate::provider::{SimCloud, SimConfig};

    /// Stands in for the persister and the generator: takes every message.
    struct Sink<M>(std::marker::PhantomData<fn() -> M>);

    impl<M: ractor::Message> Actor for Sink<M> {
        type Msg = M;
        type State = ();
        type Arguments = ();

        async fn pre_start(
            &self,
            _myself: ActorRef<M>,
            _args: (),
        ) -> Result<(), ActorProcessingErr> {
            Ok(())
        }
    }

    async fn sink<M: ractor::Message>() -> ActorRef<M> {
        Actor::spawn(None, Sink(std::marker::PhantomData), ())
            .await
            .expect("a sink actor starts")
            .0
    }

    /// A chain submitted before a quiesce, still in the executor's mailbox
    /// when the quiesce is asked for, holds the quiesce off until it ran
    /// (`migrations.md` §7). On one thread nothing runs until this task
    /// yields, so the chain is certainly still in the mailbox.
    #[tokio::test(flavor = "current_thread")]
    async fn a_chain_in_the_mailbox_holds_off_a_later_quiesce() {
        let gate = Gate::new();
        let shared = ExecShared::new(
            ExecConfig {
                parallel: 1,
                continue_on_error: false,
                preview: false,
                detailed_diffs: false,
            },
            gate.clone(),
            ProviderRegistry::simulated(SimCloud::new(SimConfig::default())),
            sink::<PersistMsg>().await,
            EventSink::default(),
        );
        let (executor, _) = Actor::spawn(None, ExecutorActor, (shared, sink::<GenMsg>().await))
            .await
            .expect("the executor starts");

        let (tx, mut rx) = oneshot::channel();
        let chain = Chain {
            steps: Vec::new(),
            waits_for: Vec::new(),
        };
        let submitted = submit(&executor, &gate, chain, Some(tx));
        assert!(matches!(submitted, Submission::Sent), "{submitted:?}");

        // The migration asks to quiesce before the executor saw the chain.
        let mut quiesce = pin!(gate.quiesce());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            quiesce.as_mut().poll(&mut cx).is_pending(),
            "a quiesce asked for after a chain's submission must wait for that chain"
        );
        assert_eq!(gate.counters().active, 1);
        assert!(rx.try_recv().is_err(), "the chain has not run yet");

        // A chain submitted now meets the pending quiesce and comes back.
        let late = Chain {
            steps: Vec::new(),
            waits_for: Vec::new(),
        };
        assert!(matches!(
            submit(&executor, &gate, late, None),
            Submission::Gated(..)
        ));

        let quiesced = quiesce.await;
        assert!(
            rx.try_recv().is_ok(),
            "the chain submitted first finished before the gate closed"
        );
        quiesced.resume();
        executor.stop(None);
    }
}
