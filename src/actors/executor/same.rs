//! Same steps answered by the step generator itself: a registration whose
//! only step is `same`, that leaves its prior state unchanged and whose
//! dependencies are already done needs no chain task, no gate reservation,
//! no pool permit and no status channel. Its events are those the
//! executor would send, its `keep` record is queued as the executor
//! queues it, and it gets no status (a URN no chain was submitted for
//! reads as done).

use crate::model::fasthash::FastSet;

use crate::actors::program::RegisterError;
use crate::events::EngineEvent;
use crate::model::step::{lock, StepKind};
use crate::model::Urn;
use crate::persist::{Change, Mutation};
use crate::plan::step::Chain;
use crate::source::goal::Registered;

use super::shared::{ExecShared, Status};

/// Answers `chain` at once when it is one `same` step that keeps its
/// prior state unchanged (or a skipped one, outside the targets), is not
/// a provider resource (its instance is configured on the executor), and
/// everything it waits for is done; the answer is the registration's.
///
/// A dependency still in flight hands the chain back: it must wait, and
/// its `keep` record must follow the dependency's record (records are
/// durable in queue order, which keeps the snapshot's order valid).
///
/// # Errors
/// The chain, untouched but for its goal's secret outputs marked, when
/// the executor must run it.
pub(crate) fn answer_same(
    shared: &ExecShared,
    mut chain: Chain,
    submitted: &FastSet<Urn>,
) -> Result<Result<Registered, RegisterError>, Chain> {
    if chain.steps.len() != 1
        || shared.stopped()
        || !chain.waits_for.iter().all(|u| done(shared, submitted, u))
    {
        return Err(chain);
    }
    let step = &mut chain.steps[0];
    let answerable = match (&mut step.new, &step.old) {
        (Some(new), _) if step.kind == StepKind::Same && !new.ty.is_provider() => {
            if step.skipped {
                true
            } else if let Some(old) = &step.old {
                new.mark_secret_outputs();
                lock(old).same_fields(new)
            } else {
                false
            }
        }
        _ => false,
    };
    if !answerable {
        return Err(chain);
    }
    let step = chain.steps.remove(0);
    let (category, composite) = step.entry_kind();
    let diff = if shared.events.is_active() {
        crate::plan::diff::step_diff(&step, shared.config.detailed_diffs).map(Box::new)
    } else {
        None
    };
    shared.events.send(EngineEvent::StepStarted {
        kind: StepKind::Same,
        urn: step.urn.clone(),
        category,
        composite,
        diff,
    });
    let reg = step.new.map(|new| {
        if let (false, Some(old)) = (step.skipped, step.old) {
            // As the executor does (`step::execute`): queued, not awaited.
            shared.record(Mutation::Apply(Change::Keep { old: old.clone() }));
            shared.news.0.insert(new.urn.clone(), old);
        }
        Registered {
            urn: new.urn,
            id: new.id,
            outputs: new.outputs,
        }
    });
    shared.count(StepKind::Same);
    shared.events.send(EngineEvent::StepFinished {
        kind: StepKind::Same,
        urn: step.urn,
        category,
        composite,
        duration_ms: 0.0,
        error: None,
    });
    Ok(reg.ok_or(RegisterError::Stopped))
}

/// True when `urn` has no chain in this operation (`submitted` holds the
/// URNs of every chain the generator submitted) or its chain finished. A
/// submitted chain the executor has not taken yet has no status: it is
/// not done.
fn done(shared: &ExecShared, submitted: &FastSet<Urn>, urn: &Urn) -> bool {
    !submitted.contains(urn)
        || shared
            .status
            .get(urn)
            .is_some_and(|tx| *tx.borrow() == Status::Done)
}
