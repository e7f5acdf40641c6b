//! The state the executor's tasks share: configuration, the pool of
//! provider-call permits, the window of pending operations, chain statuses, the written states, the provider
//! cache, step counts and failures, and the stop flag.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::model::fasthash::FastDashMap;
use ractor::ActorRef;
use tokio::sync::{oneshot, watch, Semaphore};

use super::step::StepError;
use crate::actors::protocol::PersistMsg;
use crate::events::{EventSink, StepFailure};
use crate::locks::MutexExt;
use crate::model::ambient::SharedClock;
use crate::model::step::{StepKind, Written};
use crate::model::{ProviderRef, State, Urn};
use crate::persist::{Mutation, PersistError};
use crate::provider::{Provider, ProviderRegistry};
use crate::sync::gate::Gate;

/// Where a resource's chain stands in this operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Submitted, not finished.
    Pending,
    /// Finished.
    Done,
    /// Failed or skipped.
    Failed,
}

/// The executor's configuration.
#[derive(Debug, Clone)]
pub(crate) struct ExecConfig {
    /// Provider calls running at once (1 = serial): the pool of permits.
    pub parallel: usize,
    /// Operations whose `begin` may be durable at once, ahead of their
    /// calls (at least `parallel`): the most a crash can leave pending.
    pub window: usize,
    /// Keep going after a failure (skipping dependents of failed steps).
    pub continue_on_error: bool,
    /// A preview: providers compute, change nothing.
    pub preview: bool,
    /// Step events carry the changed values, not only the keys (`--diff`).
    pub detailed_diffs: bool,
    /// The clock of state timestamps.
    pub clock: SharedClock,
    /// Hooks by name, for deletes the program did not register.
    pub hooks_by_name: crate::source::hooks::HooksByName,
}

/// Set once a failure (or the end of the operation) stops new work; shared
/// by the executor, its tasks and the generator.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// Stops new work.
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// True once new work is stopped.
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// State shared by the executor's tasks.
pub(crate) struct ExecShared {
    pub(super) config: ExecConfig,
    pub(super) gate: Gate,
    /// Provider-call permits (`parallel`): taken once the call's `begin`
    /// is durable, given back when the call returns.
    pub(super) pool: Semaphore,
    /// Pending-operation slots (`window`, the ceiling): taken before a
    /// `begin` is queued, given back once its end record is queued.
    pub(super) pending: Semaphore,
    /// How long provider calls take, which sizes the window of chains the
    /// generator hands over ([`ExecShared::window`]).
    pub(super) latency: super::window::CallLatency,
    pub(super) status: FastDashMap<Urn, watch::Sender<Status>>,
    pub(super) news: Arc<Written>,
    pub(super) registry: ProviderRegistry,
    /// Provider instances by reference text (no parse per step).
    pub(super) providers: FastDashMap<String, Arc<dyn Provider>>,
    pub(super) persister: ActorRef<PersistMsg>,
    pub(super) events: EventSink,
    pub(super) stopped: StopFlag,
    pub(super) failures: Mutex<Vec<StepFailure>>,
    pub(super) counts: Mutex<BTreeMap<StepKind, usize>>,
    pub(super) next_op: AtomicU64,
    /// A component's after hooks, run when its outputs are registered
    /// (`RegisterResourceOutputs`), as Pulumi runs them.
    pub(super) component_after: FastDashMap<Urn, ComponentAfter>,
}

/// The after hooks a component's step left for its outputs.
#[derive(Debug)]
pub(super) struct ComponentAfter {
    pub(super) hooks: Arc<crate::source::hooks::ResourceHooks>,
    pub(super) point: crate::source::hooks::HookPoint,
    pub(super) kind: StepKind,
    pub(super) written: State,
    pub(super) prior: Option<State>,
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
    pub(crate) fn new(
        config: ExecConfig,
        gate: Gate,
        registry: ProviderRegistry,
        persister: ActorRef<PersistMsg>,
        events: EventSink,
    ) -> Arc<Self> {
        Arc::new(Self {
            pool: Semaphore::new(config.parallel.max(1)),
            pending: Semaphore::new(config.window.max(config.parallel).max(1)),
            latency: super::window::CallLatency::default(),
            config,
            gate,
            status: FastDashMap::default(),
            news: Arc::new(Written::default()),
            registry,
            providers: FastDashMap::default(),
            persister,
            events,
            stopped: StopFlag::default(),
            failures: Mutex::new(Vec::new()),
            counts: Mutex::new(BTreeMap::new()),
            next_op: AtomicU64::new(1),
            component_after: FastDashMap::default(),
        })
    }

    /// How many chains that call a provider the generator may hand over
    /// at once now: `parallel`, plus as many extra rounds of it as the
    /// observed call latency lets a quiesce wait for, up to the configured
    /// window (`executor::window`).
    pub(crate) fn window(&self) -> usize {
        super::window::window(self.config.parallel, self.config.window, self.latency.get())
    }

    /// The wall time of this operation's provider calls (those holding a
    /// pool permit: creates, updates, deletes, reads, imports), summed.
    pub(crate) fn provider_time(&self) -> std::time::Duration {
        self.latency.total()
    }

    /// Steps completed per kind.
    pub(crate) fn counts(&self) -> BTreeMap<StepKind, usize> {
        self.counts.locked().clone()
    }

    /// Failed steps.
    pub(crate) fn failures(&self) -> Vec<StepFailure> {
        self.failures.locked().clone()
    }

    /// The states written (or read) so far in this operation, shared with
    /// the migration coordinator, which reads them once it quiesced.
    pub(crate) fn written(&self) -> Arc<Written> {
        self.news.clone()
    }

    /// The flag that stops new work, shared with the generator.
    pub(crate) fn stop_flag(&self) -> StopFlag {
        self.stopped.clone()
    }

    /// Stops new work (a failure that fails the operation).
    pub(crate) fn stop(&self) {
        self.stopped.set();
    }

    /// True once a failure stopped new work.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.is_set()
    }

    /// How many steps failed so far.
    pub(crate) fn failure_count(&self) -> usize {
        self.failures.locked().len()
    }

    pub(super) fn fail(&self, f: StepFailure) {
        self.failures.locked().push(f);
        if !self.config.continue_on_error {
            self.stopped.set();
        }
    }

    pub(super) fn count(&self, kind: StepKind) {
        *self.counts.locked().entry(kind).or_default() += 1;
    }

    pub(super) fn set_status(&self, urn: &Urn, s: Status) {
        if let Some(tx) = self.status.get(urn) {
            tx.send_replace(s);
        }
    }

    /// Hands a mutation to the persister; the receiver answers once it is
    /// durable. Mutations are made durable in the order they are queued.
    pub(super) fn queue(&self, m: Mutation) -> oneshot::Receiver<Result<(), PersistError>> {
        let (tx, rx) = oneshot::channel();
        // A stopped persister drops the sender: the receiver reports it.
        let _ = self.persister.cast(PersistMsg::Mutate(m, tx.into()));
        rx
    }

    /// Hands a mutation to the persister without waiting for it to be
    /// durable (it is, in queue order, before anything queued after it; a
    /// failure to write it fails the operation's end).
    pub(super) fn record(&self, m: Mutation) {
        // A stopped persister fails the operation's end anyway.
        let _ = self.persister.cast(PersistMsg::Record(m));
    }

    pub(super) async fn persist(&self, m: Mutation) -> Result<(), PersistError> {
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

    pub(super) fn provider_for(&self, s: &State) -> Result<Arc<dyn Provider>, StepError> {
        if let Some(p) = self.providers.get(s.provider.as_str()) {
            return Ok(p.clone());
        }
        let r = ProviderRef::parse(&s.provider).map_err(|e| StepError::Other(e.to_string()))?;
        let p = self.registry.get(&r);
        self.providers.insert(s.provider.to_string(), p.clone());
        Ok(p)
    }
}
