//! The StepGenerator actor: single-threaded planning around the
//! [`Planner`]. Provider checks and diffs run as spawned continuations that
//! come back as messages (counted as outstanding); decided chains go to the
//! executor; at the end of the program the deletes are planned and run.
//!
//! Three more provider conversations happen here, each as a continuation:
//! a provider resource whose configuration changed asks its provider to
//! compare configurations (`diff_config`), which decides update or
//! replace; a resource that moved to another provider resource asks the
//! new provider the same (a replace there replaces the resource); and a
//! delete-before-replace drives the planner's [`DependentWalk`], asking
//! each affected dependent's provider to diff against unknown inputs. A
//! default provider whose decision waits for its provider holds back the
//! decisions (and read chains) of the resources that use it, so its chain
//! always reaches the executor first.

use std::collections::VecDeque;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use super::executor::StopFlag;
use super::program::RegisterError;
use super::protocol::{
    CoordMsg, ExecMsg, GenMsg, MigrationOutcome, MigrationReport, MigrationRequest, ProviderAnswer,
    ProviderQuery, ProviderReady, ProviderReply, RegisterReply, Submission,
};
use crate::events::EventSink;
use crate::model::fasthash::{FastMap, FastSet};
use crate::model::step::Written;
use crate::model::Urn;
use crate::provider::{
    DiffConfigRequest, DiffKind, DiffResponse, ProviderError, ProviderRegistry, ResourceRequest,
};
use crate::source::goal::Goal;
use crate::sync::gate::Gate;

use crate::migrate::check::OperationOptions;
use crate::migrate::{MigrationError, Rewrites};
use crate::model::snapshot::Snippet;
use crate::model::step::{lock, StateRef};
use crate::model::State;
use crate::plan::dependents::{DependentReplacements, DependentWalk};
use crate::plan::generator::{PlanError, Planner, Prepared, ProviderChange};
use crate::plan::providers::config_of;
use crate::sync::gate::Reservation;
use crate::sync::shim::ArcSwap;
use crate::sync::StateList;

/// What kind of operation is planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Update or preview: registrations, then deletes.
    Update,
    /// Refresh: read every custom resource.
    Refresh,
    /// Destroy: delete everything.
    Destroy,
}

/// How the generator's work ended.
#[derive(Debug, Default)]
pub(crate) struct GenOutcome {
    /// Planning errors (each fails the operation).
    pub errors: Vec<String>,
    /// The plan recorded by a preview with `generate_plan`.
    pub plan: Option<crate::plan::saved::SavedPlan>,
    /// What each registration's migration did.
    pub migrations: Vec<MigrationReport>,
    /// Rule ids of rejected migrations.
    pub rules: Vec<crate::model::rule::Rule>,
}

/// The StepGenerator actor.
#[derive(Debug, Default)]
pub(crate) struct GeneratorActor;

/// The generator's state.
#[derive(Debug)]
pub(crate) struct GenState {
    planner: Planner,
    mode: Mode,
    registry: ProviderRegistry,
    /// The execution gate: chains are submitted under its reservations.
    gate: Gate,
    /// Stops new work (shared with the executor).
    stop: StopFlag,
    /// What this operation wrote or read (`getResource`).
    written: Arc<Written>,
    /// The executor's shared state: same steps answered here
    /// ([`super::executor::answer_same`]).
    exec: Arc<super::executor::ExecShared>,
    /// The URNs of the steps of every chain submitted (a same step waiting
    /// for one of them is not answered here until its status is done).
    submitted: FastSet<Urn>,
    /// Diagnostics go here.
    events: EventSink,
    /// Step failures the executor reported so far.
    step_failures: usize,
    executor: Option<ActorRef<ExecMsg>>,
    outstanding: usize,
    chains: usize,
    program_done: bool,
    finishing: bool,
    errors: Vec<String>,
    done: Option<oneshot::Sender<GenOutcome>>,
    preview: bool,
    coordinator: Option<ActorRef<CoordMsg>>,
    migration: MigrationEnv,
    rewrites: Rewrites,
    /// Program events held while continuations drain before a migration.
    deferred: VecDeque<GenMsg>,
    /// Chains not yet handed to the executor, in submission order (counted
    /// in `chains`): behind the window or a pending quiesce.
    gated: VecDeque<(crate::plan::step::Chain, Option<RegisterReply>)>,
    /// A task waits for a gate reservation for the first of `gated`.
    awaiting_gate: bool,
    /// Chains calling a provider in the executor (at most the window,
    /// `ExecShared::window`).
    calls_submitted: usize,
    draining: bool,
    reports: Vec<MigrationReport>,
    rules: Vec<crate::model::rule::Rule>,
    /// Default providers being decided (their provider compares
    /// configurations) -> what waits for their chain.
    held: FastMap<Urn, Vec<Held>>,
    /// Registrations waiting for the decision of a resource they name in
    /// `replaceWith` or `deletedWith` (it decides whether they are
    /// replaced) -> that resource's URN.
    awaiting: FastMap<Urn, Vec<Held>>,
    /// The actor itself, for continuations that come back as messages.
    me: Option<ActorRef<GenMsg>>,
    /// Default providers planned so far -> whether their registration
    /// finished (what an invoke or a remote component waits for).
    provider_ready: FastMap<Urn, ProviderReady>,
    /// The senders of those not decided yet.
    provider_pending: FastMap<Urn, tokio::sync::watch::Sender<Option<Result<(), RegisterError>>>>,
}

/// Work waiting for a default provider's chain.
#[derive(Debug)]
enum Held {
    /// A registration's decision.
    Decide(
        Box<Prepared>,
        Result<Option<DiffResponse>, ProviderError>,
        Option<bool>,
        RegisterReply,
    ),
    /// A read's chain.
    Submit(crate::plan::step::Chain, RegisterReply),
}

/// What the generator needs to run migrations.
#[derive(Debug)]
pub(crate) struct MigrationEnv {
    /// The published prior list (committed into by the coordinator).
    pub prior: Arc<ArcSwap<StateList<State>>>,
    /// Whether the persister can persist migrations.
    pub supported: bool,
    /// Whether the prior snapshot has pending operations.
    pub pending_operations: bool,
    /// The persisted snippets.
    pub snippets: Vec<Snippet>,
    /// The deployment's extensions.
    pub extensions: serde_json::Value,
    /// Keep the committed prior states in reports.
    pub report_states: bool,
}

/// The generator's start-up arguments.
#[derive(Debug)]
pub(crate) struct GenArgs {
    /// The planner over the prior states.
    pub planner: Planner,
    /// The operation.
    pub mode: Mode,
    /// Provider instances.
    pub registry: ProviderRegistry,
    /// The execution gate.
    pub gate: Gate,
    /// The flag that stops new work, shared with the executor.
    pub stop: StopFlag,
    /// What this operation wrote or read, shared with the executor.
    pub written: Arc<Written>,
    /// The executor's shared state.
    pub exec: Arc<super::executor::ExecShared>,
    /// The event stream.
    pub events: EventSink,
    /// Told when everything finished.
    pub done: oneshot::Sender<GenOutcome>,
    /// A preview.
    pub preview: bool,
    /// What migrations need.
    pub migration: MigrationEnv,
}

impl GenState {
    /// Hands a chain to the executor with its gate reservation, taken
    /// here (see [`super::executor::submit`]), in submission order. A chain
    /// that calls a provider waits here while `window` such chains are in
    /// the executor (more would only wait there for a slot, holding a
    /// reservation a quiesce must wait for: `migrations.md` §7, P8), and
    /// chains meeting a pending quiesce wait here behind one task waiting
    /// for the gate. Every chain after a waiting one waits too (FIFO), so a
    /// chain in the executor only ever waits for chains submitted before it.
    fn submit(&mut self, chain: crate::plan::step::Chain, reply: Option<RegisterReply>) {
        if self.executor.is_none() {
            return;
        }
        for step in chain.steps.iter().filter(|s| s.new.is_some()) {
            self.submitted.insert(step.urn.clone());
        }
        self.chains += 1;
        self.gated.push_back((chain, reply));
        self.pump();
    }

    /// Submits waiting chains, in order, while the window and the gate
    /// admit them.
    fn pump(&mut self) {
        if self.awaiting_gate {
            return;
        }
        let Some(exec) = self.executor.clone() else {
            return;
        };
        while let Some((chain, reply)) = self.gated.pop_front() {
            let calls = super::executor::calls_provider(&chain);
            if calls && self.calls_submitted >= self.exec.window() {
                self.gated.push_front((chain, reply));
                return;
            }
            match super::executor::submit(&exec, &self.gate, chain, reply) {
                Submission::Sent => self.calls_submitted += usize::from(calls),
                Submission::Gated(chain, reply) => {
                    self.gated.push_front((chain, reply));
                    self.awaiting_gate = true;
                    self.wait_for_gate();
                    return;
                }
                Submission::Stopped => self.executor_stopped(),
            }
        }
    }

    fn executor_stopped(&mut self) {
        self.chains -= 1;
        self.errors.push("the executor stopped".into());
    }

    /// Waits (off the actor) for a reservation for the first gated chain.
    fn wait_for_gate(&self) {
        let (Some(me), gate) = (self.me.clone(), self.gate.clone()) else {
            return;
        };
        tokio::spawn(async move {
            let reservation = gate.reserve().await;
            let _ = me.cast(GenMsg::Reserved(reservation));
        });
    }

    /// A reservation came for the first waiting chain (it fits the window:
    /// nothing was submitted since it met the gate): send it, then as many
    /// of the rest as the window and the gate admit.
    fn reserved(&mut self, reservation: Reservation) {
        self.awaiting_gate = false;
        let (Some(exec), Some((chain, reply))) = (self.executor.clone(), self.gated.pop_front())
        else {
            return;
        };
        let calls = super::executor::calls_provider(&chain);
        if super::executor::send_reserved(&exec, chain, reply, reservation) {
            self.calls_submitted += usize::from(calls);
        } else {
            self.executor_stopped();
        }
        self.pump();
    }

    /// Sends a diagnostic about a resource to the event stream.
    fn diagnostic(&self, severity: &str, urn: &Urn, message: String) {
        self.events.send(crate::events::EngineEvent::Diagnostic {
            severity: severity.to_owned(),
            urn: Some(urn.clone()),
            message,
        });
    }

    fn plan_failed(&mut self, e: &PlanError) {
        self.errors.push(e.to_string());
        // A planning error fails the operation: no new work starts.
        self.stop.set();
    }

    fn maybe_finish(&mut self) {
        if !self.program_done
            || self.outstanding > 0
            || self.chains > 0
            || self.finishing
            || self.draining
            || !self.deferred.is_empty()
        {
            return;
        }
        self.finishing = true;
        let failed = !self.errors.is_empty() || self.stop.is_set();
        let steps = if failed {
            Ok(Vec::new())
        } else {
            match self.mode {
                Mode::Refresh => {
                    let steps = self.planner.refreshes();
                    if let Some(exec) = &self.executor {
                        if exec.cast(ExecMsg::Refreshes(steps)).is_ok() {
                            return;
                        }
                    }
                    Ok(Vec::new())
                }
                Mode::Update | Mode::Destroy => self.planner.deletes(),
            }
        };
        match steps {
            Ok(groups) if !groups.is_empty() => {
                if let Some(exec) = &self.executor {
                    if exec.cast(ExecMsg::Deletes(groups)).is_ok() {
                        return;
                    }
                }
                self.finish();
            }
            Ok(_) => self.finish(),
            Err(e) => {
                self.plan_failed(&e);
                self.finish();
            }
        }
    }

    fn finish(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(GenOutcome {
                errors: std::mem::take(&mut self.errors),
                plan: self.planner.take_saved_plan(),
                migrations: std::mem::take(&mut self.reports),
                rules: std::mem::take(&mut self.rules),
            });
        }
    }

    fn migration_failed(&mut self, e: MigrationError) -> RegisterError {
        self.errors.push(e.to_string());
        self.rules.push(e.rule);
        self.stop.set();
        RegisterError::Migration(e)
    }

    /// Applies the committed migrations' rewrites to a registration
    /// (`migrations.md` §9): its references and the references inside its
    /// inputs.
    fn normalize(&self, goal: &mut Goal) {
        self.rewrites.normalize_goal(goal);
    }

    /// Runs a registration's migration through the coordinator.
    async fn migrate(&mut self, goal: &Goal, urn: &Urn) -> Result<(), MigrationError> {
        if !self.migration.supported {
            return Err(MigrationError::unsupported_persistence(urn));
        }
        let Some(coordinator) = self.coordinator.clone() else {
            return Ok(());
        };
        let aliases = self.planner.alias_urns(goal).unwrap_or_default();
        let opts = self.planner.options();
        let request = MigrationRequest {
            registration: urn.clone(),
            aliases,
            migrations: goal.options.state_migrations.clone(),
            claimed: self.planner.alias_claims().iter().cloned().collect(),
            registered: self.planner.registered().iter().cloned().collect(),
            options: OperationOptions {
                targeted: opts.is_targeted(),
                generate_plan: opts.generate_plan,
                apply_plan: opts.apply_plan,
                preview: self.preview,
            },
            pending_operations: self.migration.pending_operations,
            snippets: self.migration.snippets.clone(),
            extensions: self.migration.extensions.clone(),
        };
        let answer = coordinator
            .call(|reply| CoordMsg::Migrate(Box::new(request), reply), None)
            .await;
        let outcome = match answer {
            Ok(ractor::rpc::CallResult::Success(o)) => o,
            other => {
                return Err(MigrationError::persistence_failed(
                    urn,
                    format!("the migration coordinator did not answer: {other:?}"),
                ))
            }
        };
        let mut report = MigrationReport {
            registration: urn.clone(),
            ..MigrationReport::default()
        };
        let result = match outcome {
            MigrationOutcome::NoRoot => return Ok(()),
            MigrationOutcome::Noop { callbacks_called } => {
                report.callbacks_called = callbacks_called;
                Ok(())
            }
            MigrationOutcome::Rejected {
                error,
                callbacks_called,
            } => {
                report.callbacks_called = callbacks_called;
                report.rule = Some(error.rule.as_str().to_owned());
                Err(error)
            }
            MigrationOutcome::Committed {
                outcome,
                root,
                added,
                callbacks_called,
                quiesce_ms,
                migrate_ms,
            } => {
                self.rewrites.record(root, &outcome);
                let list: Vec<StateRef> = self.migration.prior.load_full().to_vec();
                report.prior = list.iter().map(|s| lock(s).urn.clone()).collect();
                if self.migration.report_states {
                    report.prior_states = Some(list.iter().map(|s| lock(s).clone()).collect());
                }
                self.planner.resync(list);
                report.callbacks_called = callbacks_called;
                report.committed = true;
                report.successors = outcome.original_to_final.clone();
                report.added = added;
                report.quiesce_ms = quiesce_ms;
                report.migrate_ms = migrate_ms;
                Ok(())
            }
        };
        self.reports.push(report);
        result
    }

    /// A registration: normalized by earlier migrations, checked against
    /// their predecessors, migrated when it carries callbacks, planned.
    async fn register_goal(
        &mut self,
        myself: &ActorRef<GenMsg>,
        mut goal: Goal,
        reply: RegisterReply,
    ) {
        if self.stop.is_set() {
            let _ = reply.send(Err(RegisterError::Stopped));
            return;
        }
        self.normalize(&mut goal);
        let (mut parent, mut urn) = match self.derive_urn(&goal) {
            Ok(d) => d,
            Err(e) => {
                self.plan_failed(&e);
                let _ = reply.send(Err(RegisterError::Plan(e)));
                return;
            }
        };
        if let Err(e) = self.rewrites.check_not_predecessor(&urn) {
            let e = self.migration_failed(e);
            let _ = reply.send(Err(e));
            return;
        }
        if !goal.options.state_migrations.is_empty() && self.mode == Mode::Update {
            if self.outstanding > 0 {
                // Planning under way finishes first: hold this registration
                // (and every program event after it) until it has.
                self.draining = true;
                self.deferred
                    .push_front(GenMsg::Register(Box::new(goal), reply));
                return;
            }
            if let Err(e) = self.migrate(&goal, &urn).await {
                let e = self.migration_failed(e);
                let _ = reply.send(Err(e));
                return;
            }
            // The migration may have renamed what the goal names.
            self.normalize(&mut goal);
            (parent, urn) = match self.derive_urn(&goal) {
                Ok(d) => d,
                Err(e) => {
                    self.plan_failed(&e);
                    let _ = reply.send(Err(RegisterError::Plan(e)));
                    return;
                }
            };
        }
        self.register(myself, &goal, parent, urn, reply);
    }

    /// A goal's parent and URN.
    fn derive_urn(&self, goal: &Goal) -> Result<(Option<Urn>, Urn), PlanError> {
        let parent = self.planner.parent_of(goal);
        let urn = self
            .planner
            .urn_for(&goal.ty, &goal.name, parent.as_ref())?;
        Ok((parent, urn))
    }

    fn register(
        &mut self,
        myself: &ActorRef<GenMsg>,
        goal: &Goal,
        parent: Option<Urn>,
        urn: Urn,
        reply: RegisterReply,
    ) {
        if self.stop.is_set() {
            let _ = reply.send(Err(RegisterError::Stopped));
            return;
        }
        let mut prepared = match self.planner.prepare_at(goal, parent, urn) {
            Ok(p) => p,
            Err(e) => {
                self.plan_failed(&e);
                let _ = reply.send(Err(RegisterError::Plan(e)));
                return;
            }
        };
        for path in std::mem::take(&mut prepared.ignore_warnings) {
            self.diagnostic(
                "warning",
                &prepared.urn,
                format!(
                    "ignoreChanges `{path}`: cannot keep the old value of an element that was added or removed since; the program's value is used there"
                ),
            );
        }
        if let Some(provider) = prepared.default_provider.take() {
            self.plan_provider(myself, provider);
        }
        let dbr = goal.options.delete_before_replace;
        let needs_provider = (prepared.new.custom && !prepared.new.ty.is_provider())
            || prepared.config_diff.is_some();
        if !needs_provider {
            return self.decide(prepared, Ok(None), dbr, reply);
        }
        let registry = self.registry.clone();
        let preview = self.preview;
        // A provider that must be configured before use (a plugin) is
        // asked only once its default provider's registration finished,
        // as under Pulumi, whose resources wait for their provider's.
        let configured = prepared
            .provider
            .as_ref()
            .filter(|_| !prepared.new.ty.is_provider())
            .filter(|r| self.registry.get(r).configure_before_use())
            .and_then(|r| self.provider_ready.get(r.urn()).cloned());
        let mut continuation = Box::pin(async move {
            if let Some(ready) = configured {
                if let Err(e) = provider_configured(ready, &prepared.urn).await {
                    return (prepared, Err(e));
                }
            }
            let result = check_and_diff(&registry, &mut prepared, preview).await;
            (prepared, result)
        });
        // A provider that answers at once (no I/O) is decided inline;
        // otherwise the answer comes back as a message.
        if let Some((prepared, result)) = futures::FutureExt::now_or_never(&mut continuation) {
            return self.decide(prepared, result, dbr, reply);
        }
        let me = myself.clone();
        self.outstanding += 1;
        tokio::spawn(async move {
            let (prepared, result) = continuation.await;
            let _ = me.cast(GenMsg::Checked(prepared, result, dbr, reply));
        });
    }

    /// Plans a default provider's registration: decided at once when its
    /// configuration is unchanged (or it is new); otherwise its provider
    /// compares configurations first, and what uses it waits.
    fn plan_provider(&mut self, myself: &ActorRef<GenMsg>, provider: Box<Prepared>) {
        let (ready_tx, ready_rx) = tokio::sync::watch::channel(None);
        self.provider_ready.insert(provider.urn.clone(), ready_rx);
        self.provider_pending.insert(provider.urn.clone(), ready_tx);
        let Some(config) = provider.config_diff.clone() else {
            return self.provider_decided(provider, Ok(None));
        };
        self.held.insert(provider.urn.clone(), Vec::new());
        let instance = self.registry.get(&config.provider);
        let preview = self.preview;
        let urn = provider.urn.clone();
        let mut continuation = Box::pin(async move {
            instance
                .diff_config(DiffConfigRequest {
                    urn: &urn,
                    old_inputs: &config.old_inputs,
                    old_outputs: &config.old_outputs,
                    new_inputs: &config.new_inputs,
                    preview,
                })
                .await
                .map(Some)
        });
        if let Some(result) = futures::FutureExt::now_or_never(&mut continuation) {
            return self.provider_decided(provider, result);
        }
        let me = myself.clone();
        self.outstanding += 1;
        tokio::spawn(async move {
            let result = continuation.await;
            let _ = me.cast(GenMsg::ProviderChecked(provider, result));
        });
    }

    /// Decides a default provider and submits its chain, then what waited
    /// for it.
    fn provider_decided(
        &mut self,
        provider: Box<Prepared>,
        diff: Result<Option<DiffResponse>, ProviderError>,
    ) {
        let urn = provider.urn.clone();
        let ready = self.provider_pending.remove(&urn);
        match diff {
            Ok(diff) => match self.planner.decide(provider, diff.as_ref(), None) {
                Ok(chain) => {
                    // Its registration's outcome is what invokes and remote
                    // components using it wait for.
                    let (tx, rx) = oneshot::channel();
                    self.submit(chain, Some(tx));
                    tokio::spawn(async move {
                        let done = rx.await.unwrap_or(Err(RegisterError::Stopped));
                        if let Some(ready) = ready {
                            let _ = ready.send(Some(done.map(|_| ())));
                        }
                    });
                }
                Err(e) => {
                    self.plan_failed(&e);
                    if let Some(ready) = ready {
                        let _ = ready.send(Some(Err(RegisterError::Plan(e))));
                    }
                }
            },
            Err(e) => {
                self.errors.push(e.to_string());
                self.stop.set();
                if let Some(ready) = ready {
                    let _ = ready.send(Some(Err(RegisterError::Provider(e))));
                }
            }
        }
        // The registrations held back were prepared, so their decisions
        // come now, in order (a planner error stops their chains).
        let held = self.held.remove(&urn).unwrap_or_default();
        // `decide` needs an actor reference only to spawn walks; held
        // decisions take the same path as others.
        for h in held {
            match h {
                Held::Decide(prepared, diff, dbr, reply) => {
                    self.decide(prepared, diff, dbr, reply);
                }
                Held::Submit(chain, reply) => self.submit(chain, Some(reply)),
            }
        }
    }

    /// Answers which provider serves a function or remote component: an
    /// explicit reference as given (the program awaited its registration);
    /// else the package's default provider, planned now if no registration
    /// asked for it yet, with the signal of its registration's end.
    fn provider_for(
        &mut self,
        myself: &ActorRef<GenMsg>,
        query: ProviderQuery,
        reply: ProviderReply,
    ) {
        if self.stop.is_set() {
            let _ = reply.send(Err(RegisterError::Stopped));
            return;
        }
        if let Some(text) = query.explicit.filter(|t| !t.is_empty()) {
            let answer = crate::model::ProviderRef::parse(&text)
                .map(|reference| ProviderAnswer {
                    provider: self.registry.get(&reference),
                    reference,
                    ready: None,
                })
                .map_err(|e| RegisterError::BadProvider {
                    reference: text.clone(),
                    message: e.to_string(),
                });
            let _ = reply.send(answer);
            return;
        }
        let request = match crate::plan::providers::DefaultProviderRequest::new(
            &query.package,
            query.version.as_deref(),
            query.download_url.as_deref(),
        ) {
            Ok(r) => r,
            Err(e) => {
                let _ = reply.send(Err(RegisterError::BadProvider {
                    reference: format!("default provider of package `{}`", query.package),
                    message: e.to_string(),
                }));
                return;
            }
        };
        match self.planner.default_provider_for(&request) {
            Ok((reference, prepared)) => {
                if let Some(p) = prepared {
                    self.plan_provider(myself, p);
                }
                let ready = self.provider_ready.get(reference.urn()).cloned();
                let provider = self.registry.get(&reference);
                let _ = reply.send(Ok(ProviderAnswer {
                    reference,
                    provider,
                    ready,
                }));
            }
            Err(e) => {
                self.plan_failed(&e);
                let _ = reply.send(Err(RegisterError::Plan(e)));
            }
        }
    }

    /// True when `provider` (a provider URN) is being decided: work using
    /// it must wait.
    fn is_held(&self, provider: Option<&Urn>) -> bool {
        provider.is_some_and(|u| self.held.contains_key(u))
    }

    fn decide(
        &mut self,
        prepared: Box<Prepared>,
        diff: Result<Option<DiffResponse>, ProviderError>,
        dbr: Option<bool>,
        reply: RegisterReply,
    ) {
        if self.is_held(prepared.provider.as_ref().map(|r| r.urn())) {
            if let Some(list) = prepared
                .provider
                .as_ref()
                .and_then(|r| self.held.get_mut(r.urn()))
            {
                list.push(Held::Decide(prepared, diff, dbr, reply));
            }
            return;
        }
        if let Some(target) = self.planner.awaits_decision(&prepared) {
            self.awaiting
                .entry(target)
                .or_default()
                .push(Held::Decide(prepared, diff, dbr, reply));
            return;
        }
        self.deferred_decide(prepared, diff, dbr, reply);
    }

    /// `urn`'s registration has been decided (or failed): what waited for
    /// it is decided now (or waits for the next resource it names).
    fn decided(&mut self, urn: &Urn) {
        for held in self.awaiting.remove(urn).unwrap_or_default() {
            if let Held::Decide(prepared, diff, dbr, reply) = held {
                self.decide(prepared, diff, dbr, reply);
            }
        }
    }

    /// Decides a registration: when it is a delete-before-replace, its
    /// dependents walk first (inline when no provider needs asking or the
    /// providers answer at once, else as a continuation).
    fn deferred_decide(
        &mut self,
        prepared: Box<Prepared>,
        diff: Result<Option<DiffResponse>, ProviderError>,
        dbr: Option<bool>,
        reply: RegisterReply,
    ) {
        let diff = match diff {
            Ok(d) => d,
            Err(e) => {
                self.errors.push(e.to_string());
                self.stop.set();
                let _ = reply.send(Err(RegisterError::Provider(e)));
                self.planner.decision_failed(&prepared.urn);
                self.decided(&prepared.urn);
                return;
            }
        };
        let Some(walk) = self.planner.dependents_walk(&prepared, diff.as_ref(), dbr) else {
            return self.finish_decide(prepared, diff, dbr, None, reply);
        };
        let registry = self.registry.clone();
        let preview = self.preview;
        let mut continuation = Box::pin(drive_walk(walk, registry, preview));
        if let Some(result) = futures::FutureExt::now_or_never(&mut continuation) {
            return self.walked(prepared, diff, dbr, result, reply);
        }
        let Some(me) = self.me.clone() else {
            // No actor reference yet (cannot happen once a registration
            // arrived): decide conservatively rather than wait.
            return self.finish_decide(prepared, diff, dbr, None, reply);
        };
        self.outstanding += 1;
        tokio::spawn(async move {
            let result = continuation.await;
            let _ = me.cast(GenMsg::Walked(prepared, diff, dbr, result, reply));
        });
    }

    fn walked(
        &mut self,
        prepared: Box<Prepared>,
        diff: Option<DiffResponse>,
        dbr: Option<bool>,
        result: Result<DependentReplacements, ProviderError>,
        reply: RegisterReply,
    ) {
        match result {
            Ok(dependents) => self.finish_decide(prepared, diff, dbr, Some(dependents), reply),
            Err(e) => {
                self.errors.push(e.to_string());
                self.stop.set();
                let _ = reply.send(Err(RegisterError::Provider(e)));
                self.planner.decision_failed(&prepared.urn);
                self.decided(&prepared.urn);
            }
        }
    }

    fn finish_decide(
        &mut self,
        prepared: Box<Prepared>,
        diff: Option<DiffResponse>,
        dbr: Option<bool>,
        dependents: Option<DependentReplacements>,
        reply: RegisterReply,
    ) {
        let urn = prepared.urn.clone();
        match self
            .planner
            .decide_with(prepared, diff.as_ref(), dbr, dependents)
        {
            Ok(chain) => self.submit_or_answer(chain, reply),
            Err(e) => {
                self.plan_failed(&e);
                let _ = reply.send(Err(RegisterError::Plan(e)));
            }
        }
        self.decided(&urn);
    }

    /// Answers an unchanged `same` registration whose dependencies are
    /// done at once ([`super::executor::answer_same`]); submits any other
    /// chain. Not while chains wait for the gate: they go first.
    fn submit_or_answer(&mut self, chain: crate::plan::step::Chain, reply: RegisterReply) {
        let chain = if self.gated.is_empty() && self.executor.is_some() {
            match super::executor::answer_same(&self.exec, chain, &self.submitted) {
                Ok(r) => {
                    let _ = reply.send(r);
                    return;
                }
                Err(chain) => chain,
            }
        } else {
            chain
        };
        self.submit(chain, Some(reply));
    }
}

/// Drives a dependents walk, asking each dependent's provider: a custom
/// resource's to diff its prior inputs against the walk's (some unknown), a
/// provider resource's to compare configurations.
async fn drive_walk(
    mut walk: DependentWalk,
    registry: ProviderRegistry,
    preview: bool,
) -> Result<DependentReplacements, ProviderError> {
    while let Some(request) = walk.next_request() {
        let request = request.clone();
        let provider = registry.get(&request.provider);
        let old = &request.old;
        let diff = if old.ty.is_provider() {
            provider
                .diff_config(DiffConfigRequest {
                    urn: &old.urn,
                    old_inputs: &config_of(&old.inputs),
                    old_outputs: &old.outputs,
                    new_inputs: &config_of(&request.inputs),
                    preview,
                })
                .await?
        } else {
            provider
                .diff(ResourceRequest {
                    urn: &old.urn,
                    ty: &old.ty,
                    old_ty: None,
                    id: &old.id,
                    inputs: &request.inputs,
                    old_inputs: Some(&old.inputs),
                    old_outputs: Some(&old.outputs),
                    ignore_changes: &old.rare.ignore_changes,
                    replace_on_changes: &old.rare.replace_on_changes,
                    timeout: None,
                    preview,
                })
                .await?
        };
        walk.answer(&diff);
    }
    Ok(walk.finish())
}

fn msg_name(m: &GenMsg) -> &'static str {
    match m {
        GenMsg::Wire(..) => "wire",
        GenMsg::Register(..) => "register",
        GenMsg::Read(..) => "read",
        GenMsg::Outputs(..) => "outputs",
        GenMsg::Invoke(..) => "invoke",
        GenMsg::Provider(..) => "provider",
        GenMsg::Checked(..) => "checked",
        GenMsg::ProviderChecked(..) => "provider-checked",
        GenMsg::Walked(..) => "walked",
        GenMsg::ProgramDone(_) => "program-done",
        GenMsg::ChainDone { .. } => "chain-done",
        GenMsg::Reserved(_) => "reserved",
        GenMsg::DeletesDone => "deletes-done",
    }
}

/// The provider's check, then (when there is prior state) its diff. For
/// a provider resource, its provider's comparison of the configurations.
/// A resource that moved to another provider resource first asks the new
/// provider to compare configurations: a replace there is the answer.
async fn check_and_diff(
    registry: &ProviderRegistry,
    p: &mut Prepared,
    preview: bool,
) -> Result<Option<DiffResponse>, ProviderError> {
    if p.new.ty.is_provider() {
        let Some(config) = p.config_diff.clone() else {
            return Ok(None);
        };
        return registry
            .get(&config.provider)
            .diff_config(DiffConfigRequest {
                urn: &p.urn,
                old_inputs: &config.old_inputs,
                old_outputs: &config.old_outputs,
                new_inputs: &config.new_inputs,
                preview,
            })
            .await
            .map(Some);
    }
    let Some(reference) = &p.provider else {
        return Ok(None);
    };
    let provider = registry.get(reference);
    // What Check and Diff read of the prior state, taken out of its lock
    // (which is not held across the provider's awaits), and no more; the
    // maps are shared, not copied (`PropertyMap` is copy-on-write).
    let old = p.old.as_ref().map(|o| {
        let o = lock(o);
        (
            // The prior type only when it differs (a type change).
            (o.ty != p.new.ty).then(|| o.ty.clone()),
            o.id.clone(),
            o.inputs.clone(),
            o.outputs.clone(),
        )
    });
    let checked = {
        let req = ResourceRequest {
            urn: &p.new.urn,
            ty: &p.new.ty,
            old_ty: None,
            id: "",
            inputs: &p.new.inputs,
            old_inputs: old.as_ref().map(|(_, _, inputs, _)| inputs),
            old_outputs: None,
            ignore_changes: &p.new.rare.ignore_changes,
            replace_on_changes: &p.new.rare.replace_on_changes,
            timeout: None,
            preview,
        };
        provider.check(req).await?
    };
    p.new.inputs = checked;
    if let Some(raw) = p.replacement_inputs.take() {
        // What a replacement would be created from: the program's inputs,
        // checked as for a create.
        let req = ResourceRequest {
            urn: &p.new.urn,
            ty: &p.new.ty,
            old_ty: None,
            id: "",
            inputs: &raw,
            old_inputs: None,
            old_outputs: None,
            ignore_changes: &p.new.rare.ignore_changes,
            replace_on_changes: &p.new.rare.replace_on_changes,
            timeout: None,
            preview,
        };
        p.replacement_inputs = Some(provider.check(req).await?);
    }
    let Some((old_ty, old_id, old_inputs, old_outputs)) = old else {
        return Ok(None);
    };
    if let ProviderChange::Config(config) = &p.provider_change {
        let answer = registry
            .get(&config.provider)
            .diff_config(DiffConfigRequest {
                urn: config.provider.urn(),
                old_inputs: &config.old_inputs,
                old_outputs: &config.old_outputs,
                new_inputs: &config.new_inputs,
                preview,
            })
            .await?;
        if answer.kind == DiffKind::Replace {
            return Ok(Some(DiffResponse {
                kind: DiffKind::Replace,
                changed_keys: Default::default(),
                replace_keys: ["provider".to_owned()].into(),
                delete_before_replace: false,
                detailed: Vec::new(),
            }));
        }
    }
    let req = ResourceRequest {
        urn: &p.new.urn,
        ty: &p.new.ty,
        old_ty: old_ty.as_ref(),
        id: &old_id,
        inputs: &p.new.inputs,
        old_inputs: Some(&old_inputs),
        old_outputs: Some(&old_outputs),
        ignore_changes: &p.new.rare.ignore_changes,
        replace_on_changes: &p.new.rare.replace_on_changes,
        timeout: None,
        preview,
    };
    provider.diff(req).await.map(Some)
}

/// Waits until a default provider's registration finished; its failure
/// fails `urn`'s check.
async fn provider_configured(mut ready: ProviderReady, urn: &Urn) -> Result<(), ProviderError> {
    let failed = |message: String| ProviderError::Failed {
        operation: "check",
        urn: urn.clone(),
        message,
    };
    match ready.wait_for(Option::is_some).await.map(|r| r.clone()) {
        Ok(Some(Err(e))) => Err(failed(format!("its provider failed: {e}"))),
        Ok(_) => Ok(()),
        Err(_) => Err(failed(
            "the operation stopped before its provider was configured".into(),
        )),
    }
}

/// Events that come from the program (held while a migration drains).
fn is_program_event(m: &GenMsg) -> bool {
    matches!(
        m,
        GenMsg::Register(..)
            | GenMsg::Read(..)
            | GenMsg::Outputs(..)
            | GenMsg::Invoke(..)
            | GenMsg::Provider(..)
            | GenMsg::ProgramDone(_)
    )
}

impl GenState {
    async fn dispatch(&mut self, myself: &ActorRef<GenMsg>, msg: GenMsg) {
        match msg {
            GenMsg::Wire(exec, coordinator) => {
                self.executor = Some(exec);
                self.coordinator = Some(coordinator);
            }
            GenMsg::Register(goal, reply) => self.register_goal(myself, *goal, reply).await,
            GenMsg::Read(mut goal, reply) => {
                if self.stop.is_set() {
                    let _ = reply.send(Err(RegisterError::Stopped));
                    return;
                }
                self.rewrites.normalize_read(&mut goal);
                let parent = goal.parent.clone().or_else(|| self.planner.root().cloned());
                if let Ok(urn) = self.planner.urn_for(&goal.ty, &goal.name, parent.as_ref()) {
                    if let Err(e) = self.rewrites.check_not_predecessor(&urn) {
                        let e = self.migration_failed(e);
                        let _ = reply.send(Err(e));
                        return;
                    }
                }
                match self.planner.read(&goal) {
                    Ok((provider, chain)) => {
                        if let Some(p) = provider {
                            self.plan_provider(myself, p);
                        }
                        let provider = chain
                            .steps
                            .first()
                            .and_then(|s| s.new.as_ref())
                            .and_then(|n| crate::model::ProviderRef::parse(&n.provider).ok());
                        match provider.as_ref().and_then(|r| self.held.get_mut(r.urn())) {
                            Some(list) => list.push(Held::Submit(chain, reply)),
                            None => self.submit(chain, Some(reply)),
                        }
                    }
                    Err(e) => {
                        self.plan_failed(&e);
                        let _ = reply.send(Err(RegisterError::Plan(e)));
                    }
                }
            }
            GenMsg::Outputs(urn, mut outputs, reply) => {
                let urn = self.rewrites.normalize_outputs(&urn, &mut outputs);
                if let Some(exec) = &self.executor {
                    let _ = exec.cast(ExecMsg::Outputs {
                        urn,
                        outputs,
                        reply,
                    });
                }
            }
            GenMsg::Invoke(token, args, reply) => {
                let ctx = crate::provider::builtins::BuiltinContext {
                    stack: self.planner.stack().to_owned(),
                    project: self.planner.project().to_owned(),
                };
                // `getResource`: what this deployment wrote or read, else
                // the prior state.
                let resource = |urn: &Urn| {
                    self.written
                        .get(urn)
                        .or_else(|| self.planner.prior_state(urn))
                };
                let _ = reply.send(
                    crate::provider::builtins::invoke(&token, &args, &ctx, &resource)
                        .map_err(RegisterError::from),
                );
            }
            GenMsg::Provider(query, reply) => self.provider_for(myself, query, reply),
            GenMsg::Checked(prepared, diff, dbr, reply) => {
                self.outstanding -= 1;
                self.decide(prepared, diff, dbr, reply);
            }
            GenMsg::ProviderChecked(provider, diff) => {
                self.outstanding -= 1;
                self.provider_decided(provider, diff);
            }
            GenMsg::Walked(prepared, diff, dbr, result, reply) => {
                self.outstanding -= 1;
                self.walked(prepared, diff, dbr, result, reply);
            }
            GenMsg::ProgramDone(err) => {
                if let Some(e) = err {
                    if self.step_failures == 0 && self.errors.is_empty() {
                        self.errors.push(format!("the program failed: {e}"));
                    }
                    self.stop.set();
                }
                self.program_done = true;
            }
            GenMsg::ChainDone { failures, calls } => {
                self.chains -= 1;
                self.calls_submitted -= usize::from(calls);
                self.step_failures = self.step_failures.max(failures);
                self.pump();
            }
            GenMsg::Reserved(r) => self.reserved(r),
            GenMsg::DeletesDone => self.finish(),
        }
    }
}

impl Actor for GeneratorActor {
    type Msg = GenMsg;
    type State = GenState;
    type Arguments = GenArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(GenState {
            planner: args.planner,
            mode: args.mode,
            registry: args.registry,
            gate: args.gate,
            stop: args.stop,
            written: args.written,
            exec: args.exec,
            submitted: FastSet::default(),
            events: args.events,
            step_failures: 0,
            executor: None,
            outstanding: 0,
            chains: 0,
            program_done: false,
            finishing: false,
            errors: Vec::new(),
            done: Some(args.done),
            preview: args.preview,
            coordinator: None,
            migration: args.migration,
            rewrites: Rewrites::new(),
            deferred: VecDeque::new(),
            gated: VecDeque::new(),
            awaiting_gate: false,
            calls_submitted: 0,
            draining: false,
            reports: Vec::new(),
            rules: Vec::new(),
            held: FastMap::default(),
            awaiting: FastMap::default(),
            me: Some(myself),
            provider_ready: FastMap::default(),
            provider_pending: FastMap::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("generator", msg = msg_name(&msg));
        let _span = span.enter();
        if state.draining && is_program_event(&msg) {
            state.deferred.push_back(msg);
            return Ok(());
        }
        state.dispatch(&myself, msg).await;
        // Once continuations drained, replay the held events in order (a
        // later migration may hold the rest again).
        while state.draining && state.outstanding == 0 {
            state.draining = false;
            while let Some(m) = state.deferred.pop_front() {
                state.dispatch(&myself, m).await;
                if state.draining {
                    break;
                }
            }
        }
        state.maybe_finish();
        Ok(())
    }
}
