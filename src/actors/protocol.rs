//! The pipeline's protocol: every message the actors exchange, in one
//! place.
//!
//! The Source actor forwards program events ([`SourceMsg`]) to the step
//! generator ([`GenMsg`]), which submits chains to the step executor
//! ([`ExecMsg`]) under gate reservations and asks the migration
//! coordinator ([`CoordMsg`]) to run a registration's migration; the
//! executor and the coordinator make every change durable through the
//! persister ([`PersistMsg`]). Replies travel on the ports inside the
//! messages.

use std::collections::HashSet;

use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::oneshot;

use super::program::RegisterError;
use crate::migrate::chain::ChainOutcome;
use crate::migrate::check::OperationOptions;
use crate::migrate::MigrationError;
use crate::model::snapshot::Snippet;
use crate::model::{Deployment, PropertyMap, State, Urn};
use crate::persist::{Mutation, PersistError};
use crate::plan::dependents::DependentReplacements;
use crate::plan::generator::Prepared;
use crate::plan::step::{Chain, Step};
use crate::provider::{DiffResponse, ProviderError};
use crate::source::goal::{Goal, ReadGoal, Registered};
use crate::source::migration::StateMigrations;
use crate::sync::gate::{Reservation, Reserved};

/// Messages to the executor.
#[derive(Debug)]
pub(crate) enum ExecMsg {
    /// Run a chain; reply to the registration when it finished. Sent only
    /// by [`submit`](super::executor::submit) and [`send_reserved`](super::executor::send_reserved): the chain's gate reservation
    /// travels with it, taken before it entered the mailbox
    /// ([`Gate::submit`](crate::sync::gate::Gate::submit)).
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

/// A chain and the registration waiting for it.
#[derive(Debug)]
pub(crate) struct Submitted {
    /// The steps.
    pub chain: Chain,
    /// The registration waiting for it.
    pub reply: Option<RegisterReply>,
}

/// What [`submit`](super::executor::submit) did with a chain.
#[derive(Debug)]
pub(crate) enum Submission {
    /// In the executor's mailbox, holding its gate reservation.
    Sent,
    /// A quiesce is pending, so no reservation may be taken: the chain
    /// comes back, to be sent with [`send_reserved`](super::executor::send_reserved) (in submission order)
    /// once [`Gate::reserve`](crate::sync::gate::Gate::reserve) grants one.
    Gated(Chain, Option<RegisterReply>),
    /// The executor stopped; the reservation was released.
    Stopped,
}

/// The reply port of a registration.
pub(crate) type RegisterReply = oneshot::Sender<Result<Registered, RegisterError>>;

/// Which provider serves a function, a remote component or a method: the
/// explicit reference the program gave (`urn::id`), else the default
/// provider of `package` (of this version and download URL).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderQuery {
    /// The package (from the token).
    pub package: String,
    /// The plugin version asked for, if any.
    pub version: Option<String>,
    /// The plugin download URL asked for, if any.
    pub download_url: Option<String>,
    /// An explicit provider reference (`urn::id`), if any.
    pub explicit: Option<String>,
}

/// Whether a default provider's registration finished (`None`: not yet).
pub(crate) type ProviderReady = tokio::sync::watch::Receiver<Option<Result<(), RegisterError>>>;

/// The generator's answer to a [`ProviderQuery`]: the reference, its
/// instance, and (for a default provider) when its registration finished.
pub(crate) struct ProviderAnswer {
    /// The provider resource.
    pub reference: crate::model::ProviderRef,
    /// Its instance.
    pub provider: std::sync::Arc<dyn crate::provider::Provider>,
    /// For a default provider: whether its registration finished.
    pub ready: Option<ProviderReady>,
}

impl std::fmt::Debug for ProviderAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderAnswer")
            .field("reference", &self.reference)
            .finish_non_exhaustive()
    }
}

/// The reply port of a [`ProviderQuery`].
pub(crate) type ProviderReply = oneshot::Sender<Result<ProviderAnswer, RegisterError>>;

/// Messages to the generator.
#[derive(Debug)]
pub(crate) enum GenMsg {
    /// The executor to send chains to, and the migration coordinator.
    Wire(ActorRef<ExecMsg>, ActorRef<CoordMsg>),
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
    /// Which provider serves a function or remote component.
    Provider(ProviderQuery, ProviderReply),
    /// A provider check/diff came back.
    Checked(
        Box<Prepared>,
        Result<Option<DiffResponse>, ProviderError>,
        Option<bool>,
        RegisterReply,
    ),
    /// A default provider's configuration comparison came back.
    ProviderChecked(Box<Prepared>, Result<Option<DiffResponse>, ProviderError>),
    /// A delete-before-replace's dependents walk finished.
    Walked(
        Box<Prepared>,
        Option<DiffResponse>,
        Option<bool>,
        Result<DependentReplacements, ProviderError>,
        RegisterReply,
    ),
    /// The program finished (with its error, if any).
    ProgramDone(Option<String>),
    /// A chain finished; `failures` steps of the operation have failed
    /// so far.
    ChainDone {
        /// Step failures recorded so far.
        failures: usize,
        /// The chain calls a provider ([`calls_provider`](super::executor::calls_provider)):
        /// it held one of the generator's submission slots.
        calls: bool,
    },
    /// A gate reservation for the first chain that met a pending quiesce.
    Reserved(Reservation),
    /// The end-of-program steps (deletes or refreshes) finished.
    DeletesDone,
}

/// What one registration's migration did (for callers and tests).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MigrationReport {
    /// The registration.
    pub registration: Urn,
    /// How many callbacks ran.
    pub callbacks_called: usize,
    /// Whether a migration was committed.
    pub committed: bool,
    /// The rule id, when it was rejected.
    pub rule: Option<String>,
    /// The committed successor map (original -> final).
    pub successors: std::collections::BTreeMap<Urn, Urn>,
    /// URNs added by the migration.
    pub added: Vec<Urn>,
    /// The prior list right after the commit.
    pub prior: Vec<Urn>,
    /// The prior states right after the commit (when asked for).
    pub prior_states: Option<Vec<State>>,
    /// Milliseconds waiting for the pipeline to drain.
    pub quiesce_ms: f64,
    /// Milliseconds from quiesce to resume.
    pub migrate_ms: f64,
}

/// One registration's migration request.
#[derive(Debug)]
pub(crate) struct MigrationRequest {
    /// The registration's URN.
    pub registration: Urn,
    /// Its aliases' URNs, in order (normalized by earlier migrations).
    pub aliases: Vec<Urn>,
    /// The callbacks.
    pub migrations: StateMigrations,
    /// Prior URNs claimed through an alias earlier in this deployment.
    pub claimed: HashSet<Urn>,
    /// URNs registered earlier in this deployment.
    pub registered: HashSet<Urn>,
    /// The operation's restrictions.
    pub options: OperationOptions,
    /// Whether the prior snapshot has pending operations.
    pub pending_operations: bool,
    /// The persisted snippets.
    pub snippets: Vec<Snippet>,
    /// The deployment's extensions.
    pub extensions: serde_json::Value,
}

/// What a migration did.
#[derive(Debug)]
pub(crate) enum MigrationOutcome {
    /// No prior root: nothing ran.
    NoRoot,
    /// The callbacks changed nothing.
    Noop {
        /// How many callbacks ran.
        callbacks_called: usize,
    },
    /// The migration was committed.
    Committed {
        /// The chain's outcome (successor maps and identities).
        outcome: Box<ChainOutcome>,
        /// The prior root's URN.
        root: Urn,
        /// URNs in the result but not in the prior subtree.
        added: Vec<Urn>,
        /// How many callbacks ran.
        callbacks_called: usize,
        /// Time spent waiting for the pipeline to drain.
        quiesce_ms: f64,
        /// Time from quiesce to resume.
        migrate_ms: f64,
    },
    /// The migration was rejected; nothing changed.
    Rejected {
        /// Why.
        error: MigrationError,
        /// How many callbacks ran.
        callbacks_called: usize,
    },
}

/// Messages to the coordinator.
#[derive(Debug)]
pub(crate) enum CoordMsg {
    /// Run a registration's migration.
    Migrate(Box<MigrationRequest>, RpcReplyPort<MigrationOutcome>),
}

/// Messages to the Persister actor.
#[derive(Debug)]
pub(crate) enum PersistMsg {
    /// Make a mutation durable; the reply comes once it is.
    Mutate(Mutation, RpcReplyPort<Result<(), PersistError>>),
    /// Make a mutation durable with no reply (a same step's `Keep`): a
    /// failure to write it is kept and fails the operation's `Finish`.
    Record(Mutation),
    /// The current deployment (in memory).
    Snapshot(RpcReplyPort<Deployment>),
    /// The operation ended: record what served each package (`package` ->
    /// serving name, in the manifest), persist and return the final
    /// deployment.
    Finish(
        std::collections::BTreeMap<String, String>,
        RpcReplyPort<Result<Deployment, PersistError>>,
    ),
    /// Bytes written and fsyncs issued.
    Io(RpcReplyPort<(u64, u64)>),
}

/// An event from the program.
#[derive(Debug)]
pub(crate) enum SourceEvent {
    /// `RegisterResource`.
    Register(
        Box<Goal>,
        oneshot::Sender<Result<Registered, RegisterError>>,
    ),
    /// `ReadResource`.
    Read(
        Box<ReadGoal>,
        oneshot::Sender<Result<Registered, RegisterError>>,
    ),
    /// `RegisterResourceOutputs`.
    Outputs(Urn, PropertyMap, oneshot::Sender<Result<(), RegisterError>>),
    /// `Invoke` of a function (built-ins).
    Invoke(
        String,
        PropertyMap,
        oneshot::Sender<Result<PropertyMap, RegisterError>>,
    ),
    /// Which provider serves a function or remote component.
    Provider(ProviderQuery, ProviderReply),
    /// The program finished (with its error, if any).
    Done(Option<String>),
}

/// Messages to the Source actor.
#[derive(Debug)]
pub(crate) enum SourceMsg {
    /// An event from the program.
    Event(SourceEvent),
    /// Stop admitting events (they queue); replies when fenced.
    Fence(RpcReplyPort<()>),
    /// Admit events again, queued ones first.
    Unfence,
}
