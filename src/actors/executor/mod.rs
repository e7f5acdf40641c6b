//! The StepExecutor actor: runs chains on a bounded pool.
//!
//! A chain takes one reservation from the execution gate (`sync::gate`)
//! when it is submitted and holds it until its last step finished, so a
//! quiescing migration waits for every chain submitted before it and no
//! chain submitted after it starts until resume. A chain first waits for
//! the chains of what it depends on, then runs its steps in order. Each
//! provider call is bracketed by a `begin` and an end mutation that the
//! persister makes durable. An operation holds a pending slot (the window's
//! ceiling, `Engine::pending_window`) from before its `begin` is queued until its end
//! record is queued, so at most that many operations are ever pending;
//! its provider call holds a pool permit (`parallel`, default 4 x cores)
//! only while it runs, once its `begin` is durable. The end record of a
//! create, update, import or read is queued, not awaited (unless an after
//! hook needs it durable, or the persister changes a shared state with it
//! when it applies it: deletes, deletion marks): records
//! are durable in queue order, so a dependent's `begin`, which its call
//! waits for, is durable only after it. Deletes run as antichains, each in
//! parallel, in order.

mod same;
mod shared;
mod step;
mod window;

use std::collections::HashSet;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::watch;

use super::program::RegisterError;
use super::protocol::{ExecMsg, GenMsg, RegisterReply, Submission, Submitted};
use crate::events::EngineEvent;
use crate::model::step::{lock, StateRef, StepKind};
use crate::model::{PropertyMap, Urn};
use crate::persist::{Change, Mutation};
use crate::plan::step::{Chain, Step};
use crate::source::goal::Registered;
use crate::sync::gate::{Gate, Reservation, Reserved};
pub(crate) use same::answer_same;
pub(crate) use shared::{ExecConfig, ExecShared, Status, StopFlag};
use step::run_steps;

/// Submits a chain to the executor: takes its gate reservation *now*, then
/// sends it with the message (`migrations.md` §7: a chain submitted before
/// a migration quiesces finishes before the migration runs, even while it
/// still waits in the executor's mailbox).
///
/// Never waits: with a quiesce pending the chain is handed back
/// ([`Submission::Gated`]).
pub(crate) fn submit(
    executor: &ActorRef<ExecMsg>,
    gate: &Gate,
    chain: Chain,
    reply: Option<RegisterReply>,
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

/// Whether a chain calls a provider (a create, update, delete, import,
/// read or refresh of a custom resource): such chains wait for a pending
/// slot and a pool permit, so the generator submits at most the pending
/// window of them at once (`GenState::pump`) and a quiesce waits only for
/// those, never for every chain planned before it. The rest (same steps,
/// components, provider resources, skipped creates) write without a
/// permit and are not counted.
pub(crate) fn calls_provider(chain: &Chain) -> bool {
    chain.steps.iter().any(|s| match s.kind {
        StepKind::Same => false,
        StepKind::Create | StepKind::CreateReplacement | StepKind::Update => s
            .new
            .as_ref()
            .is_some_and(|n| n.custom && !n.ty.is_provider()),
        StepKind::Delete | StepKind::DeleteReplaced | StepKind::RemovePendingReplace => {
            !s.skip_provider
        }
        StepKind::Import | StepKind::Read | StepKind::Refresh => true,
    })
}

/// Sends a chain with the reservation taken for it; false when the
/// executor stopped (the reservation is then released).
pub(crate) fn send_reserved(
    executor: &ActorRef<ExecMsg>,
    chain: Chain,
    reply: Option<RegisterReply>,
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
pub(crate) struct ExecutorActor;

/// The executor's state: shared with its tasks, plus the generator to tell.
#[derive(Debug)]
pub(crate) struct ExecutorState {
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
                let calls = calls_provider(&chain);
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
                        calls,
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
        .persist(Mutation::Apply(Change::Outputs {
            state,
            outputs: outputs.clone(),
        }))
        .await
        .map_err(|e| RegisterError::Persist(Arc::new(e)))?;
    // A component's after hooks, now that its outputs are known. Their
    // failure fails the operation, not the component's step (as Pulumi's
    // post-step errors).
    if let Some((_, after)) = shared.component_after.remove(&urn) {
        let mut written = after.written;
        written.outputs = outputs;
        let r = step::hook(
            Some(&after.hooks),
            after.point,
            &written,
            Some(&written.outputs),
            after.prior.as_ref(),
            shared.config.preview,
        )
        .await;
        if let Err(e) = r {
            let message = e.to_string();
            shared.events.send(EngineEvent::Diagnostic {
                severity: "error".into(),
                urn: Some(urn.clone()),
                message: message.clone(),
            });
            shared.fail(crate::events::StepFailure {
                urn,
                kind: after.kind,
                message,
            });
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};

    use super::*;
    use crate::actors::protocol::PersistMsg;
    use crate::events::EventSink;
    use crate::model::ambient::SharedClock;
    use crate::provider::builtins::BuiltinProvider;
    use crate::provider::{Provider, ProviderRegistry};
    use tokio::sync::oneshot;

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
                window: 1,
                continue_on_error: false,
                preview: false,
                detailed_diffs: false,
                clock: SharedClock::system(),
                hooks_by_name: Default::default(),
            },
            gate.clone(),
            // An empty chain calls no provider.
            ProviderRegistry::new(Arc::new(|_: &str| -> Arc<dyn Provider> {
                Arc::new(BuiltinProvider::new(None))
            })),
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
