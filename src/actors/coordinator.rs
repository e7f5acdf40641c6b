//! The MigrationCoordinator actor: runs one registration's component
//! migration (`migrations.md` §3) with the pipeline paused.
//!
//! The step generator asks it once its own continuations have drained. It
//! finds the prior root; with none, nothing runs. Otherwise it fences the
//! source, quiesces the execution gate (waiting for every chain already
//! submitted), runs the pre-callback checks, the callbacks (each with its
//! timeout) through the [`Chain`], the final checks, prepares the
//! transaction, persists it, commits it through `sync::commit` into the
//! published prior list, emits the migration event and resumes. The
//! deterministic work is in the sibling modules; this actor only sequences
//! it and does the I/O. A rejection leaves live and persisted state exactly
//! as they were.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::protocol::{CoordMsg, MigrationOutcome, MigrationRequest, PersistMsg, SourceMsg};
use crate::events::{EngineEvent, EventSink};
use crate::migrate::chain::{CallbackOutput, Chain, ChainOutcome};
use crate::migrate::check::{self, Context};
use crate::migrate::rules::MigrationError;
use crate::migrate::subtree::{find_root, has_root, Subtree};
use crate::migrate::transaction::{self, Slot};
use crate::model::step::Written;
use crate::model::step::{lock, share, StateRef};
use crate::model::{State, Urn};
use crate::persist::migration::{ListItem, MigrationMutation};
use crate::persist::{Mutation, PersistError};
use crate::source::migration::StateMigrationArgs;
use crate::sync::gate::Gate;
use crate::sync::shim::ArcSwap;
use crate::sync::{commit, CommitFields, Slot as CommitSlot, StateList, Transaction};

impl CommitFields for State {
    fn copy_commit_fields_from(&mut self, prepared: &Self) {
        transaction::copy_commit_fields(prepared, self);
    }
}

/// What the coordinator works with.
#[derive(Debug, Clone)]
pub(crate) struct CoordArgs {
    /// The source, fenced during a migration.
    pub source: ActorRef<SourceMsg>,
    /// The execution gate, quiesced during a migration.
    pub gate: Gate,
    /// The published prior list.
    pub prior: Arc<ArcSwap<StateList<State>>>,
    /// The persister.
    pub persister: ActorRef<PersistMsg>,
    /// Where the migration event goes.
    pub events: EventSink,
    /// The states this operation wrote: read once quiesced, when no chain
    /// can still be writing one (§6.5 patches).
    pub written: Arc<Written>,
}

/// The MigrationCoordinator actor.
#[derive(Debug, Default)]
pub(crate) struct CoordinatorActor;

impl Actor for CoordinatorActor {
    type Msg = CoordMsg;
    type State = CoordArgs;
    type Arguments = CoordArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<CoordMsg>,
        args: CoordArgs,
    ) -> Result<CoordArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<CoordMsg>,
        msg: CoordMsg,
        state: &mut CoordArgs,
    ) -> Result<(), ActorProcessingErr> {
        let CoordMsg::Migrate(req, reply) = msg;
        let outcome = migrate(state, *req).await;
        let _ = reply.send(outcome);
        Ok(())
    }
}

/// Runs `f` over the prior states read in place: every handle of `live`
/// locked, in list order, for one synchronous step of the migration (no
/// copy of a deployment's states is taken).
///
/// Only the coordinator writes a prior state while the pipeline is
/// quiesced; others (the persister encoding a record, the generator
/// answering a query) read one state at a time under its lock and never
/// wait on the coordinator while holding it, so holding every lock here
/// cannot deadlock: they wait for `f` to return. The guards live only in
/// this synchronous call, never across an `.await` (they are not `Send`,
/// so the compiler holds the coordinator's future to that).
fn with_prior<T>(live: &StateList<State>, f: impl FnOnce(&[&State]) -> T) -> T {
    let guards: Vec<std::sync::MutexGuard<'_, State>> = live.iter().map(lock).collect();
    let prior: Vec<&State> = guards.iter().map(|g| &**g).collect();
    f(&prior)
}

/// Runs one migration.
async fn migrate(env: &CoordArgs, req: MigrationRequest) -> MigrationOutcome {
    // Without a prior root nothing runs and nothing pauses.
    if !has_root(
        env.prior.load_full().iter().map(lock),
        &req.registration,
        &req.aliases,
    ) {
        return MigrationOutcome::NoRoot;
    }
    let started = Instant::now();
    // Quiesce: stop admitting events, then wait for every chain submitted.
    let _ = env.source.call(SourceMsg::Fence, None).await;
    let quiesced = env.gate.quiesce().await;
    let quiesce_ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut called = 0;
    // Re-read the prior list now that nothing runs.
    let live = env.prior.load_full();
    let result = run(env, &req, &quiesced, &live, &mut called).await;
    quiesced.resume();
    let _ = env.source.cast(SourceMsg::Unfence);
    let migrate_ms = started.elapsed().as_secs_f64() * 1000.0;
    match result {
        Ok(None) => MigrationOutcome::Noop {
            callbacks_called: called,
        },
        Ok(Some((outcome, root, added))) => MigrationOutcome::Committed {
            outcome: Box::new(outcome),
            root,
            added,
            callbacks_called: called,
            quiesce_ms,
            migrate_ms,
        },
        Err(error) => MigrationOutcome::Rejected {
            error,
            callbacks_called: called,
        },
    }
}

type Committed = (ChainOutcome, Urn, Vec<Urn>);

/// What the steps before the callbacks found: the prior subtree (indices
/// into the live list, which does not change while quiesced), the chain
/// over copies of its members, the prior root's URN and the subtree's URNs.
struct Begun {
    subtree: Subtree,
    chain: Chain,
    root: Urn,
    before: HashSet<Urn>,
}

/// The context of the checks over `prior`.
fn context<'a>(
    req: &'a MigrationRequest,
    prior: &'a [&'a State],
    subtree: &'a Subtree,
) -> Context<'a> {
    Context {
        registration: &req.registration,
        prior,
        subtree,
        claimed: &req.claimed,
        registered: &req.registered,
        extensions: &req.extensions,
        snippets: &req.snippets,
        pending_operations: req.pending_operations,
        options: req.options,
    }
}

/// The steps before the callbacks: the prior root, its subtree and the
/// pre-callback checks. `None`: no prior root, nothing runs.
fn begin(req: &MigrationRequest, prior: &[&State]) -> Result<Option<Begun>, MigrationError> {
    let Some(root) = find_root(prior, &req.registration, &req.aliases) else {
        return Ok(None);
    };
    let subtree = Subtree::collect(prior, root.index);
    check::pre_callback(&context(req, prior, &subtree))?;
    let chain = Chain::new(req.registration.clone(), subtree.states(prior));
    let before = subtree
        .all_sorted()
        .iter()
        .map(|&i| prior[i].urn.clone())
        .collect();
    Ok(Some(Begun {
        root: prior[root.index].urn.clone(),
        before,
        chain,
        subtree,
    }))
}

/// The persisted list, the retained states' patches and the commit's list
/// of a prepared migration.
type Planned = (
    Vec<ListItem>,
    Vec<(StateRef, State)>,
    Vec<CommitSlot<State>>,
);

/// The steps after the callbacks: the final checks and the transaction,
/// as the persisted record's list and patches and the commit's list.
fn plan(
    req: &MigrationRequest,
    prior: &[&State],
    live: &StateList<State>,
    subtree: &Subtree,
    outcome: &ChainOutcome,
) -> Result<Planned, MigrationError> {
    check::validate(&context(req, prior, subtree), outcome)?;
    let transaction::Prepared { order, states, .. } =
        transaction::prepare(&req.registration, prior, subtree, outcome)?;
    // The fresh handles are shared by the persisted record and the commit.
    let fresh: Vec<StateRef> = states.into_iter().map(share).collect();
    let mut list = Vec::with_capacity(order.len());
    let mut base_patches = Vec::new();
    let mut commit_list = Vec::with_capacity(order.len());
    for slot in order {
        match slot {
            Slot::Base { index, patched } => {
                let handle = live[index].clone();
                list.push(ListItem::Retained(handle.clone()));
                match patched {
                    Some(p) => {
                        base_patches.push((handle.clone(), (*p).clone()));
                        commit_list.push(CommitSlot::Retained {
                            live: handle,
                            prepared: p,
                        });
                    }
                    None => commit_list.push(CommitSlot::Fresh(handle)),
                }
            }
            Slot::Result { index } => {
                let handle = fresh[index].clone();
                list.push(ListItem::Fresh(handle.clone()));
                commit_list.push(CommitSlot::Fresh(handle));
            }
        }
    }
    Ok((list, base_patches, commit_list))
}

async fn run(
    env: &CoordArgs,
    req: &MigrationRequest,
    quiesced: &crate::sync::gate::Quiesced,
    live: &StateList<State>,
    called: &mut usize,
) -> Result<Option<Committed>, MigrationError> {
    let Some(begun) = with_prior(live, |prior| begin(req, prior))? else {
        return Ok(None);
    };
    let Begun {
        subtree,
        mut chain,
        root: root_urn,
        before,
    } = begun;
    let n = req.migrations.callbacks.len();
    for (i, callback) in req.migrations.callbacks.iter().enumerate() {
        let input = chain.input_json();
        let args: StateMigrationArgs = serde_json::from_value(input).map_err(|e| {
            MigrationError::callback_failed(
                &req.registration,
                i + 1,
                n,
                format!("cannot build its input: {e}"),
            )
        })?;
        *called += 1;
        let answer = callback
            .call(args, req.migrations.timeout)
            .await
            .map_err(|e| MigrationError::callback_failed(&req.registration, i + 1, n, e))?;
        let output = match answer {
            None => CallbackOutput::NoChange,
            Some(r) => {
                let json = serde_json::to_value(&r).unwrap_or_default();
                CallbackOutput::from_json(&req.registration, i + 1, n, &json)?
            }
        };
        chain.apply(i + 1, n, output)?;
    }
    let outcome = chain.finish()?;
    if outcome.noop {
        return Ok(None);
    }
    let (list, base_patches, commit_list) =
        with_prior(live, |prior| plan(req, prior, live, &subtree, &outcome))?;

    // Read now, quiesced: a chain that finished during the drain wrote its
    // state, and it needs the patches as much as any other.
    let new_patches: Vec<(StateRef, State)> = env.written.patches(|s| outcome.rewrite_outside(s));

    // Persist; a failure changes nothing.
    let mutation = Mutation::Migration(Box::new(MigrationMutation {
        list,
        base_patches,
        new_patches: new_patches.clone(),
    }));
    let persisted = env
        .persister
        .call(|reply| PersistMsg::Mutate(mutation, reply), None)
        .await;
    match persisted {
        Ok(ractor::rpc::CallResult::Success(Ok(()))) => {}
        Ok(ractor::rpc::CallResult::Success(Err(e))) => {
            return Err(MigrationError::persistence_failed(&req.registration, e))
        }
        other => {
            return Err(MigrationError::persistence_failed(
                &req.registration,
                PersistError::Stopped(format!("{other:?}")),
            ))
        }
    }

    // Commit: copy fields into live handles and publish the list at once.
    commit(
        &env.prior,
        quiesced,
        Transaction {
            current_rewrites: new_patches,
            list: commit_list,
        },
    );

    let added: Vec<Urn> = outcome
        .result
        .iter()
        .map(|s| s.urn.clone())
        .filter(|u| !before.contains(u))
        .collect();
    env.events.send(EngineEvent::Migration {
        urn: req.registration.clone(),
        added: added.clone(),
        successors: outcome
            .original_to_final
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    });
    Ok(Some((outcome, root_urn, added)))
}
