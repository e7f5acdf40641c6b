//! The StepGenerator actor: single-threaded planning around the
//! [`Planner`]. Provider checks and diffs run as spawned continuations that
//! come back as messages (counted as outstanding); decided chains go to the
//! executor; at the end of the program the deletes are planned and run.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use crate::exec::{ExecMsg, ExecShared};
use crate::model::{PropertyMap, Urn};
use crate::provider::{DiffResponse, ProviderError, ProviderRegistry, ResourceRequest};
use crate::source::goal::{Goal, ReadGoal, Registered};
use crate::source::RegisterError;

use super::generator::{PlanError, Planner, Prepared};

/// The reply port of a registration.
pub type RegisterReply = oneshot::Sender<Result<Registered, RegisterError>>;

/// Messages to the generator.
#[derive(Debug)]
pub enum GenMsg {
    /// The executor to send chains to.
    Wire(ActorRef<ExecMsg>),
    /// A `RegisterResource`.
    Register(Box<Goal>, RegisterReply),
    /// A `ReadResource`.
    Read(Box<ReadGoal>, RegisterReply),
    /// A `RegisterResourceOutputs`.
    Outputs(Urn, PropertyMap, oneshot::Sender<Result<(), RegisterError>>),
    /// An `Invoke`.
    Invoke(
        String,
        PropertyMap,
        oneshot::Sender<Result<PropertyMap, RegisterError>>,
    ),
    /// A provider check/diff came back.
    Checked(
        Box<Prepared>,
        Result<Option<DiffResponse>, ProviderError>,
        Option<bool>,
        RegisterReply,
    ),
    /// The program finished (with its error, if any).
    ProgramDone(Option<String>),
    /// A chain finished.
    ChainDone,
    /// The end-of-program steps (deletes or refreshes) finished.
    DeletesDone,
}

/// What kind of operation is planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Update or preview: registrations, then deletes.
    Update,
    /// Refresh: read every custom resource.
    Refresh,
    /// Destroy: delete everything.
    Destroy,
}

/// How the generator's work ended.
#[derive(Debug, Default)]
pub struct GenOutcome {
    /// Planning errors (each fails the operation).
    pub errors: Vec<String>,
    /// The plan recorded by a preview with `generate_plan`.
    pub plan: Option<super::saved::SavedPlan>,
}

/// The StepGenerator actor.
#[derive(Debug, Default)]
pub struct GeneratorActor;

/// The generator's state.
#[derive(Debug)]
pub struct GenState {
    planner: Planner,
    mode: Mode,
    registry: ProviderRegistry,
    shared: Arc<ExecShared>,
    executor: Option<ActorRef<ExecMsg>>,
    outstanding: usize,
    chains: usize,
    program_done: bool,
    finishing: bool,
    errors: Vec<String>,
    done: Option<oneshot::Sender<GenOutcome>>,
    preview: bool,
}

/// The generator's start-up arguments.
#[derive(Debug)]
pub struct GenArgs {
    /// The planner over the prior states.
    pub planner: Planner,
    /// The operation.
    pub mode: Mode,
    /// Provider instances.
    pub registry: ProviderRegistry,
    /// The executor's shared state (to know whether work stopped).
    pub shared: Arc<ExecShared>,
    /// Told when everything finished.
    pub done: oneshot::Sender<GenOutcome>,
    /// A preview.
    pub preview: bool,
}

impl GenState {
    fn submit(&mut self, chain: super::step::Chain, reply: Option<RegisterReply>) {
        if let Some(exec) = &self.executor {
            self.chains += 1;
            if exec.cast(ExecMsg::Chain { chain, reply }).is_err() {
                self.chains -= 1;
                self.errors.push("the executor stopped".into());
            }
        }
    }

    fn plan_failed(&mut self, e: &PlanError) {
        self.errors.push(e.to_string());
        // A planning error fails the operation: no new work starts.
        self.shared.stop();
    }

    fn maybe_finish(&mut self) {
        if !self.program_done || self.outstanding > 0 || self.chains > 0 || self.finishing {
            return;
        }
        self.finishing = true;
        let failed = !self.errors.is_empty() || self.shared.stopped();
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
            });
        }
    }

    fn register(&mut self, myself: &ActorRef<GenMsg>, goal: &Goal, reply: RegisterReply) {
        if self.shared.stopped() {
            let _ = reply.send(Err(RegisterError::Stopped));
            return;
        }
        let prepared = match self.planner.prepare(goal) {
            Ok(p) => p,
            Err(e) => {
                self.plan_failed(&e);
                let _ = reply.send(Err(RegisterError::Plan(e)));
                return;
            }
        };
        let mut prepared = prepared;
        if let Some(chain) = prepared.provider_chain.take() {
            self.submit(chain, None);
        }
        let dbr = goal.options.delete_before_replace;
        let needs_provider = prepared.new.custom && !prepared.new.ty.is_provider();
        match (needs_provider, prepared.provider.clone()) {
            (true, Some(reference)) => {
                let provider = self.registry.get(&reference);
                let preview = self.preview;
                let mut continuation = Box::pin(async move {
                    let result = check_and_diff(provider.as_ref(), &mut prepared, preview).await;
                    (prepared, result)
                });
                // A provider that answers at once (no I/O) is decided
                // inline; otherwise the answer comes back as a message.
                if let Some((prepared, result)) =
                    futures::FutureExt::now_or_never(&mut continuation)
                {
                    return self.decide(prepared, result, dbr, reply);
                }
                let me = myself.clone();
                self.outstanding += 1;
                tokio::spawn(async move {
                    let (prepared, result) = continuation.await;
                    let _ = me.cast(GenMsg::Checked(Box::new(prepared), result, dbr, reply));
                });
            }
            _ => self.decide(prepared, Ok(None), dbr, reply),
        }
    }

    fn decide(
        &mut self,
        prepared: Prepared,
        diff: Result<Option<DiffResponse>, ProviderError>,
        dbr: Option<bool>,
        reply: RegisterReply,
    ) {
        let diff = match diff {
            Ok(d) => d,
            Err(e) => {
                self.errors.push(e.to_string());
                self.shared.stop();
                let _ = reply.send(Err(RegisterError::Provider(e)));
                return;
            }
        };
        match self.planner.decide(prepared, diff.as_ref(), dbr) {
            Ok(chain) => self.submit(chain, Some(reply)),
            Err(e) => {
                self.plan_failed(&e);
                let _ = reply.send(Err(RegisterError::Plan(e)));
            }
        }
    }
}

fn msg_name(m: &GenMsg) -> &'static str {
    match m {
        GenMsg::Wire(_) => "wire",
        GenMsg::Register(..) => "register",
        GenMsg::Read(..) => "read",
        GenMsg::Outputs(..) => "outputs",
        GenMsg::Invoke(..) => "invoke",
        GenMsg::Checked(..) => "checked",
        GenMsg::ProgramDone(_) => "program-done",
        GenMsg::ChainDone => "chain-done",
        GenMsg::DeletesDone => "deletes-done",
    }
}

/// The provider's check, then (when there is prior state) its diff.
async fn check_and_diff(
    provider: &dyn crate::provider::Provider,
    p: &mut Prepared,
    preview: bool,
) -> Result<Option<DiffResponse>, ProviderError> {
    let old = p.old.as_ref().map(|o| super::step::lock(o).clone());
    let checked = {
        let req = ResourceRequest {
            urn: &p.new.urn,
            ty: &p.new.ty,
            id: "",
            inputs: &p.new.inputs,
            old_inputs: old.as_ref().map(|o| &o.inputs),
            old_outputs: None,
            ignore_changes: &p.new.ignore_changes,
            replace_on_changes: &p.new.replace_on_changes,
            timeout: None,
            preview,
        };
        provider.check(req).await?
    };
    p.new.inputs = checked;
    let Some(old) = old else { return Ok(None) };
    let req = ResourceRequest {
        urn: &p.new.urn,
        ty: &p.new.ty,
        id: &old.id,
        inputs: &p.new.inputs,
        old_inputs: Some(&old.inputs),
        old_outputs: Some(&old.outputs),
        ignore_changes: &p.new.ignore_changes,
        replace_on_changes: &p.new.replace_on_changes,
        timeout: None,
        preview,
    };
    provider.diff(req).await.map(Some)
}

impl Actor for GeneratorActor {
    type Msg = GenMsg;
    type State = GenState;
    type Arguments = GenArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(GenState {
            planner: args.planner,
            mode: args.mode,
            registry: args.registry,
            shared: args.shared,
            executor: None,
            outstanding: 0,
            chains: 0,
            program_done: false,
            finishing: false,
            errors: Vec::new(),
            done: Some(args.done),
            preview: args.preview,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _span = tracing::debug_span!("generator", msg = msg_name(&msg)).entered();
        match msg {
            GenMsg::Wire(exec) => state.executor = Some(exec),
            GenMsg::Register(goal, reply) => state.register(&myself, &goal, reply),
            GenMsg::Read(goal, reply) => {
                if state.shared.stopped() {
                    let _ = reply.send(Err(RegisterError::Stopped));
                } else {
                    match state.planner.read(&goal) {
                        Ok((provider_chain, chain)) => {
                            if let Some(p) = provider_chain {
                                state.submit(p, None);
                            }
                            state.submit(chain, Some(reply));
                        }
                        Err(e) => {
                            state.plan_failed(&e);
                            let _ = reply.send(Err(RegisterError::Plan(e)));
                        }
                    }
                }
            }
            GenMsg::Outputs(urn, outputs, reply) => {
                if let Some(exec) = &state.executor {
                    let _ = exec.cast(ExecMsg::Outputs {
                        urn,
                        outputs,
                        reply,
                    });
                }
            }
            GenMsg::Invoke(token, args, reply) => {
                let ctx = crate::provider::builtins::BuiltinContext {
                    stack: state.planner.stack().to_owned(),
                    project: state.planner.project().to_owned(),
                };
                let _ = reply.send(
                    crate::provider::builtins::invoke(&token, &args, &ctx)
                        .map_err(RegisterError::from),
                );
            }
            GenMsg::Checked(prepared, diff, dbr, reply) => {
                state.outstanding -= 1;
                state.decide(*prepared, diff, dbr, reply);
            }
            GenMsg::ProgramDone(err) => {
                if let Some(e) = err {
                    if state.shared.failures().is_empty() && state.errors.is_empty() {
                        state.errors.push(format!("the program failed: {e}"));
                    }
                    state.shared.stop();
                }
                state.program_done = true;
            }
            GenMsg::ChainDone => state.chains -= 1,
            GenMsg::DeletesDone => {
                state.finish();
                return Ok(());
            }
        }
        state.maybe_finish();
        Ok(())
    }
}
