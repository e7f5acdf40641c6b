//! The Persister actor: the single writer of state. It folds each mutation
//! into the [`SnapshotBuilder`] and hands it to the [`Persister`], replying
//! once the mutation is durable. Blocking persisters run on the runtime's
//! blocking capacity (`block_in_place`), never stalling other tasks; one
//! that hands its records to a writer of its own
//! ([`Persister::persist_may_block`] false) is called in place, and the
//! blocking work it puts off ([`Persister::upkeep`]) runs on that capacity
//! before the next mutation.

use std::sync::{Arc, Mutex};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::protocol::PersistMsg;
use crate::model::snapshot::OperationType;
use crate::model::Urn;
use crate::persist::{Change, Mutation, PersistError, Persister, SnapshotBuilder};

/// The Persister actor.
#[derive(Debug, Default)]
pub(crate) struct PersisterActor;

/// The Persister actor's state.
pub(crate) struct PersisterState {
    builder: SnapshotBuilder,
    persister: Box<dyn Persister>,
    /// The first failure of a mutation nobody waited for
    /// ([`PersistMsg::Record`]): the operation's end reports it.
    lost: Arc<Mutex<Option<PersistError>>>,
}

impl std::fmt::Debug for PersisterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersisterState").finish_non_exhaustive()
    }
}

/// Runs blocking work without stalling the runtime's other tasks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Receives from a oneshot filled by a thread outside the runtime: on a
/// multi-threaded runtime by blocking this worker (`block_in_place`, which
/// hands its other tasks on), so the answer needs no wake-up through the
/// runtime's shared queue; elsewhere by awaiting.
///
/// # Errors
/// The sender was dropped.
pub(crate) async fn wait_off_runtime<T>(
    rx: tokio::sync::oneshot::Receiver<T>,
) -> Result<T, tokio::sync::oneshot::error::RecvError> {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
            tokio::task::block_in_place(|| rx.blocking_recv())
        }
        _ => rx.await,
    }
}

/// Persists `m` (its caller applied it to `builder` already, or applies
/// it once durable), on the blocking capacity only when the persister
/// says the call may block.
fn persist(
    persister: &mut dyn Persister,
    builder: &mut SnapshotBuilder,
    m: &crate::persist::Mutation,
    ack: crate::persist::Ack,
) {
    if persister.persist_may_block() {
        blocking(|| persister.persist(m, builder, ack));
    } else {
        persister.persist(m, builder, ack);
    }
}

/// The URN and ID of the object `m` ends the create of (`builder` before
/// applying it), when it names one: a failure to write that end leaves the
/// object recorded only by its interrupted create, and the error says
/// which object it is.
fn created(builder: &SnapshotBuilder, m: &Mutation) -> Option<(Urn, String)> {
    let Mutation::End {
        op,
        change: Change::Write { new, .. },
    } = m
    else {
        return None;
    };
    if builder.pending_kind(*op) != Some(OperationType::Creating) {
        return None;
    }
    let s = crate::model::step::lock(new);
    (!s.id.is_empty()).then(|| (s.urn.clone(), s.id.clone()))
}

/// `r`, a failure naming the object `created` when there is one.
fn naming(
    r: crate::persist::Result<()>,
    created: Option<(Urn, String)>,
) -> crate::persist::Result<()> {
    match (r, created) {
        (Err(e), Some((urn, id))) => Err(PersistError::CreateUnrecorded {
            urn,
            id,
            source: Box::new(e),
        }),
        (r, _) => r,
    }
}

/// The blocking work the persister put off, if any, before the next
/// mutation touches `builder`.
fn upkeep(persister: &mut dyn Persister, builder: &mut SnapshotBuilder) {
    if persister.upkeep_due() {
        blocking(|| persister.upkeep(builder));
    }
}

impl Actor for PersisterActor {
    type Msg = PersistMsg;
    type State = PersisterState;
    type Arguments = (SnapshotBuilder, Box<dyn Persister>);

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        (builder, persister): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(PersisterState {
            builder,
            persister,
            lost: Arc::default(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if matches!(msg, PersistMsg::Mutate(..) | PersistMsg::Record(_)) {
            upkeep(state.persister.as_mut(), &mut state.builder);
        }
        match msg {
            PersistMsg::Mutate(m @ crate::persist::Mutation::Migration(_), reply) => {
                // A migration is written first and applied only once durable:
                // a failed write leaves the state exactly as it was.
                let (tx, rx) = tokio::sync::oneshot::channel();
                let PersisterState {
                    builder, persister, ..
                } = state;
                let ack: crate::persist::Ack = Box::new(move |r| {
                    let _ = tx.send(r);
                });
                persist(persister.as_mut(), builder, &m, ack);
                // The writer's acknowledgement comes from its own thread:
                // awaited, its wake-up would queue behind every task the
                // program has ready (a migration is quiesced, so that is
                // all the runtime has to do); blocked on, it needs none.
                let r = wait_off_runtime(rx).await.unwrap_or_else(|_| {
                    Err(PersistError::Stopped(
                        "the persister dropped a write".into(),
                    ))
                });
                if r.is_ok() {
                    state.builder.apply(&m);
                }
                let _ = reply.send(r);
            }
            PersistMsg::Mutate(m, reply) => {
                let created = created(&state.builder, &m);
                state.builder.apply(&m);
                let PersisterState {
                    builder, persister, ..
                } = state;
                let ack: crate::persist::Ack = Box::new(move |r| {
                    let _ = reply.send(naming(r, created));
                });
                persist(persister.as_mut(), builder, &m, ack);
            }
            PersistMsg::Record(m) => {
                let created = created(&state.builder, &m);
                state.builder.apply(&m);
                let PersisterState {
                    builder,
                    persister,
                    lost,
                } = state;
                let lost = lost.clone();
                let ack: crate::persist::Ack = Box::new(move |r| {
                    if let Err(e) = naming(r, created) {
                        let mut slot = lost.lock().unwrap_or_else(|p| p.into_inner());
                        slot.get_or_insert(e);
                    }
                });
                persist(persister.as_mut(), builder, &m, ack);
            }
            PersistMsg::Snapshot(reply) => {
                let _ = reply.send(state.builder.snapshot());
            }
            PersistMsg::Finish(served, reply) => {
                let PersisterState {
                    builder,
                    persister,
                    lost,
                } = state;
                builder.set_served(served);
                let r = blocking(|| persister.finish(builder));
                // Finishing flushed every record: a failed unawaited one is
                // known by now.
                let lost = lost.lock().unwrap_or_else(|p| p.into_inner()).take();
                let _ = reply.send(match (lost, r) {
                    (Some(e), Ok(d)) => {
                        // The finish moved the states out of the builder;
                        // the error's caller asks for the snapshot.
                        builder.restore(d);
                        Err(e)
                    }
                    (Some(e), Err(_)) => Err(e),
                    (None, r) => r,
                });
            }
            PersistMsg::Io(reply) => {
                let _ = reply.send(state.persister.io());
            }
        }
        Ok(())
    }
}
