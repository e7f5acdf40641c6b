//! One chain's steps: each step's provider call bracketed by its durable
//! `begin` and end records, hooks, retries and the states it writes.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::shared::{ExecShared, Status};
use crate::actors::program::RegisterError;
use crate::events::{EngineEvent, StepFailure};
use crate::model::snapshot::OperationType;
use crate::model::state::Category;
use crate::model::step::{lock, share, StateRef, StepKind};
use crate::model::{PropertyMap, ProviderRef, State, Urn};
use crate::persist::{Change, Mutation, PersistError};
use crate::plan::step::Step;
use crate::provider::{schema, ObjectState, ProviderError, ResourceRequest};
use crate::source::goal::Registered;
use crate::source::hooks::{HookArgs, HookPoint, ResourceHooks};
use crate::sync::gate::Reservation;

/// Runs steps in order under one reservation (provider calls take pool
/// permits).
pub(super) async fn run_steps(
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
        let (category, composite) = step.entry_kind();
        let diff = if shared.events.is_active() {
            crate::plan::diff::step_diff(&step, shared.config.detailed_diffs).map(Box::new)
        } else {
            None
        };
        shared.events.send(EngineEvent::StepStarted {
            kind,
            urn: urn.clone(),
            category,
            composite,
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
                    category,
                    composite,
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
                    category,
                    composite,
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

/// A read step answered by a provider function rather than `Read`:
///
/// - an **action**: its function, the entry's type token, is invoked with
///   its inputs, and the answer recorded as its outputs once the run
///   completed. A failed run records nothing (a prior completed run's
///   entry stands). A preview does not run it: its result is unknown until
///   an update does.
/// - a **lookup** (a data source with no ID): the package's `get<Type>`
///   function ([`lookup_function`]) is invoked with the entry's inputs; its
///   answer is the observation, its `id` the entry's ID.
async fn read_through_function(
    shared: &ExecShared,
    provider: std::sync::Arc<dyn crate::provider::Provider>,
    new: State,
    old_ref: Option<StateRef>,
    preview: bool,
) -> Result<Option<Registered>, StepError> {
    if new.category() == Category::Action {
        if preview {
            return Ok(Some(registered(&new)));
        }
        let token = new.ty.as_str().to_owned();
        return through_function(shared, provider, new, old_ref, &token, false).await;
    }
    let token = lookup_function(new.ty.as_str());
    through_function(shared, provider, new, old_ref, &token, preview).await
}

/// Invokes `token` with the entry's inputs, in a `reading` pending
/// operation, and writes the answer as the entry's outputs (a data
/// source's lookup also takes its ID from the answer's `id`).
async fn through_function(
    shared: &ExecShared,
    provider: std::sync::Arc<dyn crate::provider::Provider>,
    mut new: State,
    old_ref: Option<StateRef>,
    token: &str,
    preview: bool,
) -> Result<Option<Registered>, StepError> {
    let (outputs, op) = bracket(
        shared,
        OperationType::Reading,
        &new,
        provider.invoke(token, &new.inputs, preview),
    )
    .await?;
    if new.category() != Category::Action {
        let Some(crate::model::PropertyValue::String(id)) = outputs.get("id").cloned() else {
            let _ = fail(shared, op).await;
            return Err(StepError::Other(format!(
                "looking up {} with `{token}`: the answer has no string `id`; read it by `id` instead",
                new.urn
            )));
        };
        new.id = id;
    }
    new.outputs = outputs;
    new.mark_secret_outputs();
    end_write(shared, op, old_ref, new, false, None, None, None).await
}

/// The lookup function of a type, as Pulumi's packages name them:
/// `pkg:mod:Thing` -> `pkg:mod:getThing`, `pkg:mod/thing:Thing` ->
/// `pkg:mod/getThing:getThing`.
fn lookup_function(ty: &str) -> String {
    let mut it = ty.splitn(3, ':');
    let (Some(pkg), Some(module), Some(name)) = (it.next(), it.next(), it.next()) else {
        return ty.to_owned();
    };
    match module.split_once('/') {
        Some((m, _)) => format!("{pkg}:{m}/get{name}:get{name}"),
        None => format!("{pkg}:{module}:get{name}"),
    }
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum StepError {
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error(transparent)]
    Persist(#[from] PersistError),
    #[error("{0}")]
    Other(String),
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
/// keeping it marked for deletion; the record is awaited only when an
/// after hook runs, see [`end`]), runs the after hook once that is
/// durable (told `prior`, the state before an update), and records the
/// state as written this operation.
#[allow(clippy::too_many_arguments)]
async fn end_write(
    shared: &ExecShared,
    op: Begun<'_>,
    old: Option<StateRef>,
    new: State,
    mark_old_delete: bool,
    hooks: Option<&ResourceHooks>,
    after: Option<HookPoint>,
    prior: Option<&State>,
) -> Result<Option<Registered>, StepError> {
    let reg = registered(&new);
    let urn = new.urn.clone();
    let new = share(new);
    // Marking the old state for deletion changes a shared state object
    // when the persister applies it, which later steps read: wait for it.
    let durable = mark_old_delete || (after.is_some() && hooks.is_some());
    end(
        shared,
        op,
        Change::Write {
            old,
            new: new.clone(),
            mark_old_delete,
        },
        durable,
    )
    .await?;
    if let (Some(point), Some(_)) = (after, hooks) {
        // A copy: no lock is held across the hook's await.
        let written = lock(&new).clone();
        let preview = shared.config.preview;
        hook(hooks, point, &written, Some(&reg.outputs), prior, preview).await?;
    }
    shared.news.0.insert(urn, new);
    Ok(Some(reg))
}

/// A provider operation begun: its id, and the pending slot it holds until
/// its end record is queued behind its begin record.
struct Begun<'a> {
    op: u64,
    _slot: tokio::sync::SemaphorePermit<'a>,
}

/// Brackets a provider call with `begin` and its end mutation.
async fn bracket<'a, T>(
    shared: &'a ExecShared,
    kind: OperationType,
    state: &State,
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<(T, Begun<'a>), StepError> {
    // A pending slot is taken before the begin record is queued and given
    // back once the end record is queued (records are durable in queue
    // order): a crash leaves at most `window` operations pending. The
    // provider call takes a pool permit only once its begin is durable, so
    // the wait for that fsync holds no permit, and `window` begins (not
    // only `parallel`) can share one group commit.
    let Ok(slot) = shared.pending.acquire().await else {
        return Err(StepError::Other("the executor stopped".into()));
    };
    let begun = Begun {
        op: shared.next_op.fetch_add(1, Ordering::Relaxed),
        _slot: slot,
    };
    if !shared.config.preview {
        shared
            .persist(Mutation::Begin {
                op: begun.op,
                kind,
                state: std::sync::Arc::new(state.clone()),
            })
            .await?;
    }
    let result = match shared.pool.acquire().await {
        Ok(_permit) => {
            let started = std::time::Instant::now();
            let result = call.await;
            shared.latency.record(started.elapsed());
            result
        }
        Err(_) => return Err(StepError::Other("the executor stopped".into())),
    };
    match result {
        Ok(v) => Ok((v, begun)),
        Err(e) => {
            fail(shared, begun).await?;
            Err(e.into())
        }
    }
}

/// What a create or update made: the object, and the init failure when it
/// exists but failed to initialise (its state is still written).
struct Made {
    object: ObjectState,
    init_failure: Option<ProviderError>,
}

/// [`bracket`] for a create or update: an init failure
/// ([`ProviderError::InitFailed`]) is not a failed operation but one that
/// made an object, which the caller writes with its `initErrors` before
/// failing the step.
async fn bracket_made<'a>(
    shared: &'a ExecShared,
    kind: OperationType,
    state: &State,
    call: impl std::future::Future<Output = Result<ObjectState, ProviderError>>,
) -> Result<(Made, Begun<'a>), StepError> {
    let call = async {
        match call.await {
            Ok(object) => Ok(Made {
                object,
                init_failure: None,
            }),
            Err(ProviderError::InitFailed {
                operation,
                urn,
                object,
                reasons,
                message,
            }) => Ok(Made {
                object: (*object).clone(),
                init_failure: Some(ProviderError::InitFailed {
                    operation,
                    urn,
                    object,
                    reasons,
                    message,
                }),
            }),
            Err(e) => Err(e),
        }
    };
    bracket(shared, kind, state, call).await
}

/// The reasons of an init failure (none: empty).
fn init_errors(e: Option<&ProviderError>) -> Vec<String> {
    match e {
        Some(ProviderError::InitFailed { reasons, .. }) => reasons.clone(),
        _ => Vec::new(),
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

/// Ends a begun operation with `change`. With `durable`, waits until the
/// end record is durable and applied (an after hook runs only then, and a
/// change the persister applies to a shared state object, a deletion mark
/// or a removal, is seen by the steps after it); otherwise it is
/// queued and not awaited: records are durable in queue order, so every
/// record a dependent writes, and its `begin` that its provider call waits
/// for, is durable only after this one, and a failure to write it fails
/// the operation's end (and every later record). Either way the pending
/// slot is given back once the record is queued.
async fn end(
    shared: &ExecShared,
    begun: Begun<'_>,
    change: Change,
    durable: bool,
) -> Result<(), StepError> {
    if shared.config.preview {
        drop(begun);
        shared.persist(Mutation::Apply(change)).await?;
        return Ok(());
    }
    let m = Mutation::End {
        op: begun.op,
        change,
    };
    if !durable {
        shared.record(m);
        drop(begun);
        return Ok(());
    }
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
        old_ty: old.map(|o| &o.ty).filter(|t| **t != s.ty),
        id: &s.id,
        inputs: &s.inputs,
        old_inputs: old.map(|o| &o.inputs),
        old_outputs: old.map(|o| &o.outputs),
        ignore_changes: &s.rare.ignore_changes,
        replace_on_changes: &s.rare.replace_on_changes,
        timeout: (timeout > 0.0).then(|| std::time::Duration::from_secs_f64(timeout)),
        preview,
    }
}

/// Runs a point's hooks (`old`: the prior state of an update).
pub(super) async fn hook(
    hooks: Option<&ResourceHooks>,
    point: HookPoint,
    s: &State,
    outputs: Option<&PropertyMap>,
    old: Option<&State>,
    preview: bool,
) -> Result<(), StepError> {
    let Some(h) = hooks else { return Ok(()) };
    h.run(&HookArgs {
        point,
        urn: &s.urn,
        ty: &s.ty,
        id: &s.id,
        inputs: &s.inputs,
        outputs,
        old_inputs: old.map(|o| &o.inputs),
        old_outputs: old.map(|o| &o.outputs),
        error: None,
        errors: &[],
        attempt: 0,
        preview,
    })
    .await
    .map_err(StepError::Other)
}

/// Asks the error hooks whether to retry a failed operation (`failures`:
/// the operation's failures so far, newest first, this one added): `Err`
/// gives `e` back, or an error hook's own failure.
async fn retry(
    shared: &ExecShared,
    hooks: Option<&ResourceHooks>,
    point: HookPoint,
    s: &State,
    old: Option<&State>,
    e: StepError,
    failures: &mut Vec<String>,
) -> Result<(), StepError> {
    let Some(h) = hooks else { return Err(e) };
    // Only provider failures are retried: a persistence failure is final.
    if !matches!(e, StepError::Provider(_)) {
        return Err(e);
    }
    let message = e.to_string();
    failures.insert(0, message.clone());
    let attempt = u32::try_from(failures.len()).unwrap_or(u32::MAX);
    let again = h
        .retry(&HookArgs {
            point,
            urn: &s.urn,
            ty: &s.ty,
            id: &s.id,
            inputs: &s.inputs,
            outputs: None,
            old_inputs: old.map(|o| &o.inputs),
            old_outputs: old.map(|o| &o.outputs),
            error: Some(&message),
            errors: failures,
            attempt,
            preview: false,
        })
        .await
        .map_err(StepError::Other)?;
    if !again {
        return Err(e);
    }
    let operation = match point {
        HookPoint::BeforeCreate | HookPoint::AfterCreate => "create",
        HookPoint::BeforeUpdate | HookPoint::AfterUpdate => "update",
        HookPoint::BeforeDelete | HookPoint::AfterDelete => "delete",
    };
    shared.events.send(crate::events::EngineEvent::Diagnostic {
        severity: "warning".into(),
        urn: Some(s.urn.clone()),
        message: format!(
            "retrying {operation} due to on-error hook request ({attempt}/{})",
            crate::source::hooks::MAX_ATTEMPTS - 1
        ),
    });
    Ok(())
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
            // An unchanged provider resource still configures its instance,
            // as Pulumi's registry does on `Same`: its resources' calls, and
            // the invokes and remote components using it, need it.
            if new.ty.is_provider() {
                let r = ProviderRef::new(new.urn.clone(), new.id.clone())
                    .map_err(|e| StepError::Other(e.to_string()))?;
                shared.registry.get(&r).configure(&new.inputs).await?;
            }
            // Nothing to change: keep the prior state object as it is (no
            // copy, a tiny journal record, its JSON written back verbatim).
            if let Some(o) = &old_ref {
                let unchanged = lock(o).same_fields(&new);
                if unchanged {
                    let reg = registered(&new);
                    // Queued, not awaited: no provider call depends on it,
                    // and records are durable in queue order, so anything
                    // the program does with this registration (a dependent's
                    // step) is recorded after it. A crash before it is
                    // durable leaves the prior state in the base, unchanged;
                    // a failed write fails the operation's end.
                    shared.record(Mutation::Apply(Change::Keep { old: o.clone() }));
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
                    return write(shared, old_ref, new, mark_old_delete).await;
                }
                // A component's before hooks run before its write; its after
                // hooks once its outputs are registered (`set_outputs`), as
                // Pulumi's do: they see the component's outputs.
                let Some(hooks) = step.hooks.clone() else {
                    return write(shared, old_ref, new, mark_old_delete).await;
                };
                let (before, after, prior) = match step.kind {
                    StepKind::Update => (HookPoint::BeforeUpdate, HookPoint::AfterUpdate, old),
                    _ => (HookPoint::BeforeCreate, HookPoint::AfterCreate, None),
                };
                hook(Some(&hooks), before, &new, None, prior.as_ref(), preview).await?;
                let written = new.clone();
                let reg = write(shared, old_ref, new, mark_old_delete).await?;
                if step.kind != StepKind::Same {
                    shared.component_after.insert(
                        written.urn.clone(),
                        super::shared::ComponentAfter {
                            hooks,
                            point: after,
                            kind: step.kind,
                            written,
                            prior,
                        },
                    );
                }
                return Ok(reg);
            }
            let provider = shared.provider_for(&new)?;
            // One text for the created and modified stamps (shared).
            let stamp = crate::model::SharedStr::from(shared.config.clock.now_rfc3339());
            // Rust hooks run only outside a preview, hosted ones marked
            // `on_dry_run` in a preview too (`ResourceHooks::run`).
            let hooks = step.hooks.as_deref();
            if step.kind == StepKind::Update {
                let prior_outputs = old.as_ref().map(|o| &o.outputs);
                let point = HookPoint::BeforeUpdate;
                hook(hooks, point, &new, prior_outputs, old.as_ref(), preview).await?;
                let mut failures = Vec::new();
                let (made, op) = loop {
                    let req = request(
                        &new,
                        old.as_ref(),
                        preview,
                        new.rare.custom_timeouts.update.0,
                    );
                    let call = provider.update(req);
                    match bracket_made(shared, OperationType::Updating, &new, call).await {
                        Ok(v) => break v,
                        Err(e) => {
                            let prior = old.as_ref();
                            retry(shared, hooks, point, &new, prior, e, &mut failures).await?;
                        }
                    }
                };
                new.outputs = made.object.outputs;
                new.rare
                    .edit(|r| r.init_errors = init_errors(made.init_failure.as_ref()).into());
                new.mark_secret_outputs();
                new.modified = stamp;
                schema::stamp(&*provider, &mut new);
                // After hooks run once the result is durable (not after an
                // init failure: the step failed, its object recorded).
                let after = made
                    .init_failure
                    .is_none()
                    .then_some(HookPoint::AfterUpdate);
                let prior = old.as_ref();
                let reg = end_write(shared, op, old_ref, new, false, hooks, after, prior).await?;
                return match made.init_failure {
                    Some(e) => Err(e.into()),
                    None => Ok(reg),
                };
            }
            hook(hooks, HookPoint::BeforeCreate, &new, None, None, preview).await?;
            let mut failures = Vec::new();
            // An init failure is never retried: the object exists, and a
            // second create would make another.
            let (made, op) = loop {
                let req = request(&new, None, preview, new.rare.custom_timeouts.create.0);
                let call = provider.create(req);
                match bracket_made(shared, OperationType::Creating, &new, call).await {
                    Ok(v) => break v,
                    Err(e) => {
                        let point = HookPoint::BeforeCreate;
                        retry(shared, hooks, point, &new, None, e, &mut failures).await?;
                    }
                }
            };
            new.id = made.object.id;
            new.outputs = made.object.outputs;
            new.rare
                .edit(|r| r.init_errors = init_errors(made.init_failure.as_ref()).into());
            new.mark_secret_outputs();
            schema::stamp(&*provider, &mut new);
            if !preview {
                new.created = stamp.clone();
                new.modified = stamp;
            }
            let after = made
                .init_failure
                .is_none()
                .then_some(HookPoint::AfterCreate);
            let reg = end_write(
                shared,
                op,
                old_ref,
                new,
                mark_old_delete,
                hooks,
                after,
                None,
            )
            .await?;
            match made.init_failure {
                Some(e) => Err(e.into()),
                None => Ok(reg),
            }
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
            // A delete the program did not register finds its hooks by the
            // names its prior state records, as Pulumi's does.
            let by_name = step
                .hooks
                .is_none()
                .then(|| {
                    shared
                        .config
                        .hooks_by_name
                        .resolve(&old.rare.resource_hooks)
                })
                .flatten();
            let hooks = step.hooks.as_deref().or(by_name.as_ref());
            let outputs = Some(&old.outputs);
            hook(
                hooks,
                HookPoint::BeforeDelete,
                &old,
                outputs,
                Some(&old),
                false,
            )
            .await?;
            let mut failures = Vec::new();
            let ((), op) = loop {
                let req = request(&old, Some(&old), preview, old.rare.custom_timeouts.delete.0);
                match bracket(shared, OperationType::Deleting, &old, provider.delete(req)).await {
                    Ok(v) => break v,
                    Err(e) => {
                        let point = HookPoint::BeforeDelete;
                        retry(shared, hooks, point, &old, None, e, &mut failures).await?;
                    }
                }
            };
            // Awaited: applying a removal or a `pendingReplacement` mark
            // changes the shared prior state that the rest of the chain (a
            // delete-before-replace's create) and the delete phase read.
            end(shared, op, change, true).await?;
            hook(hooks, HookPoint::AfterDelete, &old, None, Some(&old), false).await?;
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
            // A goal without inputs (`keel import`) takes the object's, as
            // Pulumi's import does; a program's inputs matched them above.
            if new.inputs.is_empty() {
                new.inputs = obj.inputs;
            }
            new.outputs = obj.outputs;
            new.mark_secret_outputs();
            schema::stamp(&*provider, &mut new);
            end_write(shared, op, old_ref, new, false, None, None, None).await
        }
        StepKind::Read => {
            let mut new = step
                .new
                .ok_or_else(|| StepError::Other("read without a goal".into()))?;
            let provider = shared.provider_for(&new)?;
            if new.category() == Category::Action || new.id.is_empty() {
                // Boxed: its future is several kilobytes, and inline it
                // would size every step's future (one per chain in flight).
                return Box::pin(read_through_function(
                    shared, provider, new, old_ref, preview,
                ))
                .await;
            }
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
            end_write(shared, op, old_ref, new, false, None, None, None).await
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
mod tests {
    #[test]
    fn lookup_functions_are_named_as_pulumis_packages_name_them() {
        for (ty, function) in [
            ("aws:ec2:Ami", "aws:ec2:getAmi"),
            ("aws:ec2/vpc:Vpc", "aws:ec2/getVpc:getVpc"),
            ("fleet:index:Image", "fleet:index:getImage"),
        ] {
            assert_eq!(super::lookup_function(ty), function);
        }
    }
}
