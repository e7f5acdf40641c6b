//! The simulated cloud (`architecture.md` §4, `cli.md` §4).
//!
//! A [`SimCloud`] keeps real in-memory physical objects ([`SimObject`]) with
//! deterministic IDs, and serves any package through [`SimProvider`]. It
//! simulates per-operation latency, injects failures (by URN or name, or at
//! a seeded random rate), forces replaces when configured input keys change,
//! counts every call ([`SimCounters`]), records a log of physical operations
//! ([`SimCall`]) and can persist its objects to a file so that runs build on
//! each other.
//!
//! An object is identified by its type and ID together, as a real
//! provider's are: a read, update or delete of type `T` and ID `X` touches
//! only `T`'s object `X`, even when an object of another type has the ID
//! `X`.
//!
//! # Facets
//!
//! Some types manage a part of another object rather than an object of
//! their own, as AWS's `BucketWebsiteConfiguration` manages the website
//! settings of the bucket whose ID it shares. The simulated cloud calls
//! them *facet types*: those whose type name (the part of the token after
//! its last `:`) ends in one of [`SimConfig::facet_suffixes`]
//! (`Configuration` and `Settings` by default). A facet of type `F` and ID
//! `X` lives on its *host*, an object of a non-facet type with the ID `X`:
//! - a create names the host by the facet's `bucket` or `host` input
//!   ([`FACET_HOST_KEYS`]; `check` refuses a facet without one) and gets
//!   the host's ID; it fails when the host does not exist or already has a
//!   facet object of that type;
//! - an update or delete touches the facet only, never the host; a diff
//!   that changes the host input replaces the facet, and a facet is always
//!   replaced delete-first (two cannot coexist on one host);
//! - deleting the host (the last non-facet object with its ID) deletes its
//!   facets, out of band too;
//! - a host *carries* a facet it has no object for: the settings a split
//!   migration moves out of a resource into a facet resource (the split
//!   example) were set through the host, and the simulated cloud keeps no
//!   separate copy of them. A read of a facet with no object, whose host
//!   exists and whose request names that host, returns the facet as the
//!   request describes it (its inputs, and its prior outputs when given),
//!   and an update of it writes the facet's object. Once a facet is
//!   deleted, the cloud records that its host no longer carries it (a
//!   `facetRemoved` record), so it reads as gone until it is created again.
//!   A read of the host still returns the settings it was given, carried
//!   ones included (a refresh puts a split setting back into the host's
//!   inputs), as a provider that still reports them on the host would.
//!
//! [`SimCloud::objects`] lists facets that have an object (created or
//! updated) as objects of their own, keyed by their type and ID like any
//! other; a carried facet is not listed ([`SimCloud::has_facet`] says
//! whether a host has one).
//!
//! The file ([`SimCloud::load`], [`SimCloud::autosave_to`]) is an
//! append-only change log shared safely by several processes (see
//! `sim_file.rs`): a change appends one record under a cross-process lock
//! after catching up on the others' records. Plaintext secrets are
//! encrypted with the stack's [`Crypter`] ([`SimCloud::set_secrets`])
//! before they are written, and decrypted again for the provider's reads.
//!
//! Types may be schema-versioned ([`SimConfig::schemas`], or
//! [`SimCloud::set_schema`] to bump a version between runs): the provider
//! declares the version, its migration renames keys in inputs and outputs
//! from any older version straight to the current one (logged in
//! [`SimCloud::schema_migrations`]), and reads return objects with the keys
//! renamed.
//!
//! Physical operations are create, read, update and delete; previews of
//! create, update and delete change nothing, sleep not at all and are not
//! counted (a preview read is a real read).
//!
//! Two gates let tests observe concurrency and crashes without depending on
//! timing: a *rendezvous* ([`SimCloud::set_rendezvous`]) holds every
//! physical operation until some number of them have been in flight at
//! once (failing the operation, with the largest number seen, after a
//! generous timeout), and a *hold* ([`SimCloud::hold_from`]) keeps every
//! operation started from a given ordinal on in flight forever, so a
//! process killed while one is held was killed mid-run by construction.
//!
//! IDs are `{name}-{8 hex}`, the hex being an FNV-1a hash of the URN and a
//! per-URN generation counter: a replacement gets a new ID, and the same
//! program run twice on fresh clouds gets the same IDs whatever the order in
//! which its resources are created.

use crate::locks::MutexExt;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use super::sim_db::CloudLog;
use super::sim_db::DbLog;
use super::sim_file::{key, CloudFile, CloudState, Key, Record};
pub use super::sim_file::{CloudFileError, CloudFileStats};
use super::sim_timer::SimTimer;

/// Where the cloud's objects are kept: a file, or a log shared through a
/// database.
#[derive(Debug)]
enum Store {
    File(CloudFile),
    Db(DbLog),
}

impl Store {
    fn writable(&self) -> bool {
        match self {
            Self::File(f) => f.writable,
            Self::Db(d) => d.writable,
        }
    }

    fn stats(&self) -> CloudFileStats {
        match self {
            Self::File(f) => f.stats(),
            Self::Db(d) => d.stats(),
        }
    }
}
use super::package::PackageDecl;
use super::{
    DiffConfigRequest, DiffKind, DiffResponse, ObjectState, Provider, ProviderError,
    ResourceRequest, Result,
};
use crate::model::{Deployment, PropertyMap, PropertyValue, State, Urn};
use crate::secrets::{Crypter, SecretsError};

/// The message of an injected failure.
pub const INJECTED_FAILURE: &str = "injected failure (sim)";

/// The outputs the simulated cloud computes for every object (unless an
/// input of the same name exists): `arn`, `websiteEndpoint`, `domainName`.
pub const COMPUTED_OUTPUT_KEYS: [&str; 3] = ["arn", "websiteEndpoint", "domainName"];

/// The inputs that name a facet's host (the first present wins): `bucket`,
/// as AWS's bucket facets do, and `host`. See the module's "Facets".
pub const FACET_HOST_KEYS: [&str; 2] = ["bucket", "host"];

/// The facet suffixes of [`SimConfig::default`].
pub const DEFAULT_FACET_SUFFIXES: [&str; 2] = ["Configuration", "Settings"];

/// The simulated cloud's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SimConfig {
    /// The latency of each physical operation (create, read, update,
    /// delete).
    pub latency: Duration,
    /// The probability (0..1) that a create, update or delete fails; draws
    /// come from a generator seeded with [`SimConfig::seed`].
    pub fail_rate: f64,
    /// URNs or resource names whose creates, updates and deletes fail.
    pub fail: BTreeSet<String>,
    /// The seed of the failure generator.
    pub seed: u64,
    /// Input keys whose change forces a replace, for every type. `*` means
    /// every key.
    pub replace_on_change: BTreeSet<String>,
    /// Input keys whose change forces a replace, per type token.
    pub replace_on_change_types: BTreeMap<String, BTreeSet<String>>,
    /// Type tokens whose replaces must delete before creating.
    pub delete_before_replace_types: BTreeSet<String>,
    /// Record physical operations in the call log ([`SimCloud::call_log`]).
    pub record_calls: bool,
    /// Whether the provider can look objects up by URN
    /// ([`Provider::find`]). Off, it behaves as a Pulumi provider plugin:
    /// an interrupted create cannot be resolved by asking the cloud.
    pub lookup: bool,
    /// Schema versions per type token (`architecture.md` §8): the
    /// provider declares them, and its migration renames keys.
    pub schemas: BTreeMap<String, SchemaDef>,
    /// Suffixes of the type names of facet types (see the module's
    /// "Facets"): a type token whose name (after its last `:`) ends in one
    /// of them is a facet type. Default: [`DEFAULT_FACET_SUFFIXES`]; empty,
    /// no type is a facet.
    pub facet_suffixes: BTreeSet<String>,
    /// Package declarations by the package name their tokens use
    /// ([`PackageDecl::namespace`]): the parameterization a package's
    /// functions answer with (`sim_functions.rs`).
    #[serde(default)]
    pub packages: BTreeMap<String, PackageDecl>,
}

impl SimConfig {
    /// Whether `ty` (a type token) is a facet type: its name ends in one of
    /// [`SimConfig::facet_suffixes`].
    pub fn is_facet(&self, ty: &str) -> bool {
        let name = ty.rsplit(':').next().unwrap_or(ty);
        self.facet_suffixes
            .iter()
            .any(|s| name.ends_with(s.as_str()))
    }
}

/// The simulated cloud's schema of one resource type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SchemaDef {
    /// The current schema version.
    pub version: u64,
    /// Keys renamed since earlier versions (`old` -> `new`): a migration
    /// from any older version renames them in inputs and outputs, and reads
    /// return objects with them renamed.
    pub renames: BTreeMap<String, String>,
    /// Outputs the type computes, as a real provider would (`key` ->
    /// template): `{id}` is the object's ID, `{type}` its type token and
    /// `{inputs.KEY}` an input's value. They replace keel's own computed
    /// outputs of the same name; an input of the same name wins; in a
    /// preview they are unknown.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
}

impl SchemaDef {
    /// Renames the keys of `map` (old -> new); a new key already present
    /// wins over the old one.
    pub fn rename(&self, map: &mut PropertyMap) {
        for (old, new) in &self.renames {
            if let Some(v) = map.remove(old) {
                map.entry(new.clone()).or_insert(v);
            }
        }
    }
}

/// One schema migration the simulated cloud's provider performed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimMigration {
    /// The resource.
    pub urn: String,
    /// Its type token.
    pub ty: String,
    /// The version migrated from.
    pub old_version: u64,
    /// The version migrated to.
    pub new_version: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            fail_rate: 0.0,
            fail: BTreeSet::new(),
            seed: 0,
            replace_on_change: BTreeSet::new(),
            replace_on_change_types: BTreeMap::new(),
            delete_before_replace_types: BTreeSet::new(),
            record_calls: true,
            lookup: true,
            schemas: BTreeMap::new(),
            facet_suffixes: DEFAULT_FACET_SUFFIXES.map(str::to_owned).into(),
            packages: BTreeMap::new(),
        }
    }
}

/// A physical object in the simulated cloud.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimObject {
    /// The physical ID.
    pub id: String,
    /// The type token.
    pub ty: String,
    /// The resource name.
    pub name: String,
    /// The URN of the resource that created it.
    pub urn: String,
    /// The inputs as the cloud holds them.
    pub inputs: PropertyMap,
    /// The outputs (inputs plus computed outputs).
    pub outputs: PropertyMap,
}

/// A snapshot of the simulated cloud's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimCounters {
    /// Physical creates attempted (failed ones included; previews excluded).
    pub creates: u64,
    /// Physical updates attempted (failed ones included; previews excluded).
    pub updates: u64,
    /// Physical deletes attempted (failed ones and deletes of missing
    /// objects included; previews excluded).
    pub deletes: u64,
    /// Reads (previews included).
    pub reads: u64,
    /// Checks.
    pub checks: u64,
    /// Diffs.
    pub diffs: u64,
    /// Configures.
    pub configures: u64,
    /// Injected failures.
    pub failures: u64,
    /// Physical operations now in progress.
    pub in_flight: u64,
    /// The most physical operations ever in progress at once (since the
    /// last [`SimCloud::reset_max_in_flight`]).
    pub max_in_flight: u64,
}

/// The kind of a physical operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SimCallKind {
    /// A create.
    Create,
    /// A read.
    Read,
    /// An update.
    Update,
    /// A delete.
    Delete,
}

/// Whether a call-log entry marks the start or the end of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SimCallPhase {
    /// The operation started (before its latency).
    Start,
    /// The operation ended (successfully or not).
    End,
}

/// One entry of the call log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimCall {
    /// The entry's position in the log (0, 1, 2, ...).
    pub seq: u64,
    /// The operation.
    pub kind: SimCallKind,
    /// Start or end.
    pub phase: SimCallPhase,
    /// The resource's URN.
    pub urn: String,
    /// The physical ID (empty at the start of a create, and at the end of a
    /// failed create).
    pub id: String,
}

/// The call log and its next sequence number.
#[derive(Debug, Default)]
struct CallLog {
    next_seq: u64,
    calls: Vec<SimCall>,
}

/// The atomic counters.
#[derive(Debug, Default)]
struct Counters {
    creates: AtomicU64,
    updates: AtomicU64,
    deletes: AtomicU64,
    reads: AtomicU64,
    checks: AtomicU64,
    diffs: AtomicU64,
    configures: AtomicU64,
    failures: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    /// Physical operations started, whatever their end (the next one's
    /// ordinal).
    started: AtomicU64,
}

/// The test gates on physical operations (see the module doc).
#[derive(Debug)]
struct Gates {
    /// Operations whose ordinal is at least this never end (`u64::MAX`:
    /// none).
    hold_from: AtomicU64,
    /// How many operations must be in flight at once before any proceeds
    /// (0: no rendezvous), and how long an operation waits for that.
    rendezvous: Mutex<(u64, Duration)>,
    /// Whether the rendezvous was reached (it stays open once it was).
    reached: tokio::sync::watch::Sender<bool>,
}

impl Default for Gates {
    fn default() -> Self {
        Self {
            hold_from: AtomicU64::new(u64::MAX),
            rendezvous: Mutex::new((0, Duration::ZERO)),
            reached: tokio::sync::watch::Sender::new(false),
        }
    }
}

/// The simulated cloud, shared as `Arc<SimCloud>` by all its providers.
#[derive(Debug)]
pub struct SimCloud {
    config: SimConfig,
    state: Mutex<CloudState>,
    rng: Mutex<u64>,
    log: Mutex<CallLog>,
    counters: Counters,
    /// The file (or shared log) the objects are kept in, if any. Lock
    /// order: `file`, then `state`.
    file: Mutex<Option<Store>>,
    /// Encrypts the secrets written to the file and decrypts them for reads.
    secrets: Mutex<Option<Arc<Crypter>>>,
    /// The current schemas (from the configuration; see
    /// [`SimCloud::set_schema`]).
    schemas: Mutex<BTreeMap<String, SchemaDef>>,
    /// Schema migrations performed, in order.
    migrations: Mutex<Vec<SimMigration>>,
    /// The test gates.
    gates: Gates,
    /// The clock of the simulated latencies, started by the first one.
    timer: std::sync::OnceLock<SimTimer>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.locked()
}

/// The first object (by type) with this ID.
fn first_with_id<'a>(state: &'a CloudState, id: &str) -> Option<&'a SimObject> {
    state
        .objects
        .range((id.to_owned(), String::new())..)
        .next()
        .filter(|((i, _), _)| i == id)
        .map(|(_, o)| o)
}

/// The host a facet's inputs name ([`FACET_HOST_KEYS`]): `Ok(None)` when
/// no host input is present, `Err(())` when one is present but not a
/// string (unknown in a preview, say).
fn facet_host(inputs: &PropertyMap) -> std::result::Result<Option<&str>, ()> {
    match FACET_HOST_KEYS.iter().find_map(|k| inputs.get(*k)) {
        None => Ok(None),
        Some(PropertyValue::String(s)) => Ok(Some(s)),
        Some(_) => Err(()),
    }
}

/// Runs blocking I/O: off the async workers on a multi-threaded runtime.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The ID of the `generation`th object created for `urn`.
fn object_id(urn: &Urn, generation: u64) -> String {
    let h = fnv1a(
        urn.as_str()
            .bytes()
            .chain(std::iter::once(0))
            .chain(generation.to_le_bytes()),
    );
    // Fold the 64-bit hash into 32 bits; the truncation is intended.
    let folded = ((h >> 32) ^ h) as u32;
    format!("{}-{folded:08x}", urn.name())
}

/// A schema output's template expanded for the object `id` of type `ty`
/// (see [`SchemaDef::outputs`]); an unknown placeholder stays as written.
fn expand_output(template: &str, ty: &str, id: &str, inputs: &PropertyMap) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let name = &rest[start + 1..start + len];
        let value = match name {
            "id" => Some(id.to_owned()),
            "type" => Some(ty.to_owned()),
            _ => name
                .strip_prefix("inputs.")
                .and_then(|k| inputs.get(k))
                .map(|v| match v {
                    PropertyValue::String(s) => s.clone(),
                    // A secret's value never lands in a plain output.
                    PropertyValue::Secret(_) => "[secret]".to_owned(),
                    other => other.to_json().to_string(),
                }),
        };
        match value {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[start..=start + len]),
        }
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

/// Inputs plus the computed outputs for the object `id` of type `ty`.
fn outputs_for(ty: &str, id: &str, inputs: &PropertyMap) -> PropertyMap {
    let mut out = inputs.clone();
    let computed = [
        ("arn", format!("arn:sim:{ty}:{id}")),
        ("websiteEndpoint", format!("{id}.website.sim.example")),
        ("domainName", format!("{id}.cdn.sim.example")),
    ];
    for (k, v) in computed {
        out.entry(k.to_owned())
            .or_insert_with(|| PropertyValue::String(v));
    }
    out
}

/// Tracks one physical operation: in flight and logged from creation to
/// drop (so a cancelled operation still ends).
struct OpGuard<'a> {
    cloud: &'a SimCloud,
    kind: SimCallKind,
    urn: String,
    id: String,
    /// The operation's ordinal among the physical operations started.
    ordinal: u64,
}

impl<'a> OpGuard<'a> {
    fn start(cloud: &'a SimCloud, kind: SimCallKind, urn: &Urn, id: &str) -> Self {
        let c = &cloud.counters;
        let ordinal = c.started.fetch_add(1, Ordering::SeqCst);
        let now = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let target = lock(&cloud.gates.rendezvous).0;
        if target > 0 && now >= target {
            cloud.gates.reached.send_replace(true);
        }
        let guard = Self {
            cloud,
            kind,
            urn: urn.as_str().to_owned(),
            id: id.to_owned(),
            ordinal,
        };
        cloud.record(kind, SimCallPhase::Start, &guard.urn, &guard.id);
        guard
    }

    /// Passes the test gates: never returns for a held operation; waits for
    /// the rendezvous, if one is set, failing when it is not reached in
    /// time.
    async fn gates(&self, operation: &'static str, urn: &Urn) -> Result<()> {
        let gates = &self.cloud.gates;
        if self.ordinal >= gates.hold_from.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let (target, timeout) = *lock(&gates.rendezvous);
        if target == 0 {
            return Ok(());
        }
        let mut reached = gates.reached.subscribe();
        let opened = tokio::time::timeout(timeout, reached.wait_for(|r| *r))
            .await
            .is_ok_and(|r| r.is_ok());
        if opened {
            return Ok(());
        }
        Err(ProviderError::Failed {
            operation,
            urn: urn.clone(),
            message: format!(
                "the rendezvous of {target} operations in flight at once was not \
                 reached within {timeout:?} (at most {} were)",
                self.cloud.counters.max_in_flight.load(Ordering::SeqCst)
            ),
        })
    }
}

impl Drop for OpGuard<'_> {
    fn drop(&mut self) {
        self.cloud
            .record(self.kind, SimCallPhase::End, &self.urn, &self.id);
        self.cloud.counters.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl SimCloud {
    /// An empty cloud.
    pub fn new(config: SimConfig) -> Arc<Self> {
        Arc::new(Self::with_state(config, CloudState::default()))
    }

    fn with_state(config: SimConfig, state: CloudState) -> Self {
        // xorshift64* must not start at zero.
        let seed = config.seed ^ 0x9e37_79b9_7f4a_7c15;
        let seed = if seed == 0 {
            0x2545_f491_4f6c_dd1d
        } else {
            seed
        };
        Self {
            schemas: Mutex::new(config.schemas.clone()),
            migrations: Mutex::new(Vec::new()),
            config,
            state: Mutex::new(state),
            rng: Mutex::new(seed),
            log: Mutex::new(CallLog::default()),
            counters: Counters::default(),
            file: Mutex::new(None),
            secrets: Mutex::new(None),
            gates: Gates::default(),
            timer: std::sync::OnceLock::new(),
        }
    }

    /// Sets a rendezvous for the physical operations started from now on:
    /// each waits, after it starts, until `operations` have been in flight
    /// at once (then the rendezvous stays open), and fails naming the
    /// largest number seen if that does not happen within `timeout`. A
    /// test shows that an engine runs `operations` at once this way,
    /// whatever the machine's speed. `0` removes the rendezvous.
    pub fn set_rendezvous(&self, operations: u64, timeout: Duration) {
        *lock(&self.gates.rendezvous) = (operations, timeout);
        let now = self.counters.in_flight.load(Ordering::SeqCst);
        self.gates
            .reached
            .send_replace(operations > 0 && now >= operations);
    }

    /// Holds every physical operation whose ordinal (its position among
    /// those this cloud started, from 0) is at least `ordinal`: it stays in
    /// flight, never reaching the cloud, until its future is dropped. A
    /// crash test that holds the last operation of a run kills the process
    /// mid-run whenever it kills it.
    pub fn hold_from(&self, ordinal: u64) {
        self.gates.hold_from.store(ordinal, Ordering::SeqCst);
    }

    /// Keeps the cloud in the file at `path` from now on: every change
    /// (create, update, delete, and the out-of-band changes) is appended to
    /// it before the call returns, so objects survive the process being
    /// killed and other processes sharing the file see them. When the cloud
    /// was not [loaded](Self::load) from `path`, the file's objects (if it
    /// exists) replace the ones in memory at the next access; a missing
    /// file is written with the objects in memory at the first change.
    pub fn autosave_to(&self, path: impl Into<std::path::PathBuf>) {
        let path = path.into();
        let mut file = lock(&self.file);
        match file.as_mut() {
            Some(Store::File(f)) if f.path() == path => f.writable = true,
            _ => *file = Some(Store::File(CloudFile::new(path, true))),
        }
    }

    /// Opens the cloud kept in the shared `log` (a database's): reading
    /// it, and writing every change to it before the call returns when
    /// `writable`. Processes on any machine sharing the log see one cloud.
    /// Blocking.
    ///
    /// # Errors
    /// [`CloudFileError`]: the log cannot be read or holds a damaged record.
    pub fn open_log(
        log: Arc<dyn CloudLog>,
        config: SimConfig,
        writable: bool,
    ) -> std::result::Result<Arc<Self>, CloudFileError> {
        let cloud = Self::new(config);
        *lock(&cloud.file) = Some(Store::Db(DbLog::new(log, writable)));
        cloud.refresh_from_file()?;
        Ok(cloud)
    }

    /// The stack's secrets: plaintext secrets are encrypted with it before
    /// they reach the file, and an object's encrypted secrets are decrypted
    /// with it for the provider's reads.
    pub fn set_secrets(&self, crypter: Arc<Crypter>) {
        *lock(&self.secrets) = Some(crypter);
    }

    /// The work counters of the file (zero when there is none).
    pub fn file_stats(&self) -> CloudFileStats {
        lock(&self.file)
            .as_ref()
            .map(Store::stats)
            .unwrap_or_default()
    }

    /// Makes a change: `plan` looks at the state (caught up with the file,
    /// under its lock) and says what to return and which records to write;
    /// they are applied once written. Blocking I/O runs off the async
    /// workers.
    fn change<R>(
        &self,
        mut plan: impl FnMut(&CloudState) -> (R, Vec<Record>),
    ) -> std::result::Result<R, CloudFileError> {
        let persistent = lock(&self.file).as_ref().is_some_and(Store::writable);
        if !persistent {
            let mut state = lock(&self.state);
            let (r, records) = plan(&state);
            records.into_iter().for_each(|rec| state.apply(rec));
            return Ok(r);
        }
        blocking(|| {
            let mut file = lock(&self.file);
            let crypter = lock(&self.secrets).clone();
            match file.as_mut() {
                Some(Store::File(f)) => {
                    let _locked = f.lock(true)?;
                    let mut state = lock(&self.state);
                    f.catch_up(&mut state)?;
                    let (r, records) = plan(&state);
                    f.append(&mut state, records, crypter.as_deref())?;
                    Ok(r)
                }
                Some(Store::Db(d)) => {
                    d.change(&mut lock(&self.state), crypter.as_deref(), &mut plan)
                }
                None => unreachable!("the file is never detached"),
            }
        })
    }

    /// Catches up with the file, if any (what other processes changed).
    fn refresh_from_file(&self) -> std::result::Result<(), CloudFileError> {
        if lock(&self.file).is_none() {
            return Ok(());
        }
        blocking(|| {
            let mut file = lock(&self.file);
            match file.as_mut() {
                Some(Store::File(f)) => {
                    let _locked = f.lock(false)?;
                    f.catch_up(&mut lock(&self.state))
                }
                Some(Store::Db(d)) => d.catch_up(&mut lock(&self.state)),
                None => Ok(()),
            }
        })
    }

    /// [`Self::refresh_from_file`] for views that cannot fail: an error is
    /// logged and the objects in memory are shown.
    fn refresh_view(&self) {
        if let Err(e) = self.refresh_from_file() {
            tracing::warn!("{e}");
        }
    }

    /// The object a resource's URN was created as, if any.
    pub fn find_by_urn(&self, urn: &str) -> Option<SimObject> {
        self.refresh_view();
        lock(&self.state)
            .objects
            .values()
            .find(|o| o.urn == urn)
            .cloned()
    }

    /// A provider serving `package` from this cloud.
    pub fn provider(self: &Arc<Self>, package: &str) -> Arc<dyn Provider> {
        Arc::new(SimProvider::new(Arc::clone(self), package))
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Declares (or changes) the schema of a type token: the provider's
    /// next operations see the new version (a provider upgrade).
    pub fn set_schema(&self, ty: &str, schema: SchemaDef) {
        lock(&self.schemas).insert(ty.to_owned(), schema);
    }

    /// The current schema of a type token, if it is versioned.
    pub fn schema(&self, ty: &str) -> Option<SchemaDef> {
        lock(&self.schemas).get(ty).cloned()
    }

    /// Adds the type's schema outputs ([`SchemaDef::outputs`]) to
    /// `outputs` for the object `id` (none: unknown, as in a preview),
    /// over keel's own computed keys; an input of the same name wins.
    fn schema_outputs(
        &self,
        ty: &str,
        id: Option<&str>,
        inputs: &PropertyMap,
        outputs: &mut PropertyMap,
    ) {
        let schemas = lock(&self.schemas);
        let Some(schema) = schemas.get(ty) else {
            return;
        };
        for (k, template) in &schema.outputs {
            // Over keel's own computed keys, never over an input.
            if inputs.contains_key(k) {
                continue;
            }
            let v = match id {
                Some(id) => PropertyValue::String(expand_output(template, ty, id, inputs)),
                None => PropertyValue::Computed,
            };
            outputs.insert(k.clone(), v);
        }
    }

    /// The schema migrations performed so far, in order.
    pub fn schema_migrations(&self) -> Vec<SimMigration> {
        lock(&self.migrations).clone()
    }

    /// An object as the type's current schema shows it (renamed keys),
    /// its secrets decrypted.
    fn current_shape(&self, o: SimObject) -> std::result::Result<ObjectState, SecretsError> {
        let o = self.revealed(o)?;
        let mut found = ObjectState {
            id: o.id,
            inputs: o.inputs,
            outputs: o.outputs,
        };
        if let Some(schema) = self.schema(&o.ty) {
            schema.rename(&mut found.inputs);
            schema.rename(&mut found.outputs);
        }
        Ok(found)
    }

    /// The object with its encrypted secrets (as read from the file)
    /// decrypted with the stack's secrets.
    fn revealed(&self, mut o: SimObject) -> std::result::Result<SimObject, SecretsError> {
        let sealed = |s: &crate::model::property::Secret| {
            matches!(s, crate::model::property::Secret::Ciphertext(_))
        };
        let mut d = Deployment::default();
        d.resources.push(State {
            inputs: std::mem::take(&mut o.inputs),
            outputs: std::mem::take(&mut o.outputs),
            ..State::default()
        });
        if crate::secrets::any_secret(&d, &sealed) {
            let crypter = lock(&self.secrets).clone().unwrap_or_default();
            crypter.decrypt_deployment(&mut d)?;
        }
        let holder = d.resources.pop().unwrap_or_default();
        o.inputs = holder.inputs;
        o.outputs = holder.outputs;
        Ok(o)
    }

    /// A snapshot of the counters.
    pub fn counters(&self) -> SimCounters {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        SimCounters {
            creates: get(&c.creates),
            updates: get(&c.updates),
            deletes: get(&c.deletes),
            reads: get(&c.reads),
            checks: get(&c.checks),
            diffs: get(&c.diffs),
            configures: get(&c.configures),
            failures: get(&c.failures),
            in_flight: get(&c.in_flight),
            max_in_flight: get(&c.max_in_flight),
        }
    }

    /// Resets `max_in_flight` to the number of operations now in flight.
    pub fn reset_max_in_flight(&self) {
        let now = self.counters.in_flight.load(Ordering::SeqCst);
        self.counters.max_in_flight.store(now, Ordering::SeqCst);
    }

    /// The call log (empty unless [`SimConfig::record_calls`]).
    pub fn call_log(&self) -> Vec<SimCall> {
        lock(&self.log).calls.clone()
    }

    /// Empties the call log (sequence numbers continue).
    pub fn clear_call_log(&self) {
        lock(&self.log).calls.clear();
    }

    /// All objects, sorted by ID (then type). Objects read from a file
    /// keep their secrets encrypted.
    pub fn objects(&self) -> Vec<SimObject> {
        self.refresh_view();
        lock(&self.state).objects.values().cloned().collect()
    }

    /// The object with this ID, of any type (the first by type when
    /// objects of several types share it); see [`Self::object_of`].
    pub fn object(&self, id: &str) -> Option<SimObject> {
        self.refresh_view();
        first_with_id(&lock(&self.state), id).cloned()
    }

    /// The object of type `ty` with this ID.
    pub fn object_of(&self, ty: &str, id: &str) -> Option<SimObject> {
        self.refresh_view();
        lock(&self.state).objects.get(&key(id, ty)).cloned()
    }

    /// The host of the facets with ID `id`: the first object of a
    /// non-facet type with that ID.
    fn host<'a>(&self, state: &'a CloudState, id: &str) -> Option<&'a SimObject> {
        state
            .objects
            .range((id.to_owned(), String::new())..)
            .take_while(|((i, _), _)| i == id)
            .map(|(_, o)| o)
            .find(|o| !self.config.is_facet(&o.ty))
    }

    /// Whether the host with ID `id` carries a facet of type `ty` that has
    /// no object of its own (see the module's "Facets").
    fn carried(&self, state: &CloudState, ty: &str, id: &str) -> bool {
        let k = key(id, ty);
        self.config.is_facet(ty)
            && !state.objects.contains_key(&k)
            && !state.removed_facets.contains(&k)
            && self.host(state, id).is_some()
    }

    /// Whether a request for the facet `ty` `id` finds it carried by its
    /// host: it has no object, the host carries it and the request's
    /// inputs name that host.
    fn carried_for(&self, state: &CloudState, req: &ResourceRequest<'_>) -> bool {
        self.carried(state, req.ty.as_str(), req.id) && facet_host(req.inputs) == Ok(Some(req.id))
    }

    /// The records that delete the object of type `ty` with ID `id`: a
    /// facet's removal from its host (which then no longer carries it), or
    /// an object's delete with, for the last host of that ID, its facets'.
    /// None when there is nothing to delete.
    fn delete_records(&self, state: &CloudState, ty: &str, id: &str) -> Vec<Record> {
        let k = key(id, ty);
        let exists = state.objects.contains_key(&k);
        let (ty, id) = (ty.to_owned(), id.to_owned());
        if self.config.is_facet(&ty) {
            let hosted = self.host(state, &id).is_some();
            return if hosted && (exists || !state.removed_facets.contains(&k)) {
                vec![Record::FacetRemoved { ty, id }]
            } else if exists {
                vec![Record::Delete { ty, id }]
            } else {
                Vec::new()
            };
        }
        if !exists {
            return Vec::new();
        }
        let with_id = || {
            state
                .objects
                .range((id.clone(), String::new())..)
                .take_while(|(k, _)| k.0 == id)
                .map(|(k, _)| k)
        };
        let other_host = with_id().any(|k| k.1 != ty && !self.config.is_facet(&k.1));
        let mut records = vec![Record::Delete {
            ty: ty.clone(),
            id: id.clone(),
        }];
        if !other_host {
            // The host's facets go with it (records of removed ones too).
            let removed = state
                .removed_facets
                .range((id.clone(), String::new())..)
                .take_while(|k| k.0 == id);
            let facets: BTreeSet<&Key> = with_id()
                .filter(|k| self.config.is_facet(&k.1))
                .chain(removed)
                .collect();
            records.extend(facets.into_iter().map(|(i, t)| Record::Delete {
                ty: t.clone(),
                id: i.clone(),
            }));
        }
        records
    }

    /// Whether the object with ID `id` has a facet of type `ty`: an object
    /// of its own, or one its host carries (see the module's "Facets").
    /// False when `ty` is not a facet type.
    pub fn has_facet(&self, ty: &str, id: &str) -> bool {
        self.refresh_view();
        let state = lock(&self.state);
        self.config.is_facet(ty)
            && (state.objects.contains_key(&key(id, ty)) || self.carried(&state, ty, id))
    }

    /// The facets deleted from their hosts, as (type, ID), sorted by ID:
    /// the hosts no longer carry them.
    pub fn removed_facets(&self) -> Vec<(String, String)> {
        self.refresh_view();
        lock(&self.state)
            .removed_facets
            .iter()
            .map(|(id, ty)| (ty.clone(), id.clone()))
            .collect()
    }

    /// Makes an out-of-band change; false when `plan` wrote nothing or the
    /// file could not be written (logged).
    fn out_of_band(&self, mut plan: impl FnMut(&CloudState) -> Vec<Record>) -> bool {
        match self.change(|state| {
            let records = plan(state);
            (!records.is_empty(), records)
        }) {
            Ok(changed) => changed,
            Err(e) => {
                tracing::warn!("{e}");
                false
            }
        }
    }

    /// Removes the object with this ID (of any type, as
    /// [`Self::object`] finds it) behind keel's back, as a delete would (a
    /// host's facets go with it); false when there was none.
    pub fn remove_object(&self, id: &str) -> bool {
        self.out_of_band(|state| match first_with_id(state, id) {
            Some(o) => self.delete_records(state, &o.ty, &o.id),
            None => Vec::new(),
        })
    }

    /// Removes the object of type `ty` with this ID behind keel's back, as
    /// a delete would (a host's facets go with it; a carried facet is
    /// removed from its host); false when there was none.
    pub fn remove_object_of(&self, ty: &str, id: &str) -> bool {
        self.out_of_band(|state| self.delete_records(state, ty, id))
    }

    /// Changes a property behind keel's back (drift) of the object with
    /// this ID (of any type, as [`Self::object`] finds it): sets `key` in
    /// the outputs, and in the inputs unless it is a computed output that
    /// is not an input. False when the object does not exist.
    pub fn set_property(&self, id: &str, key: &str, value: PropertyValue) -> bool {
        self.out_of_band(|state| {
            let Some(obj) = first_with_id(state, id) else {
                return Vec::new();
            };
            let mut obj = obj.clone();
            if obj.inputs.contains_key(key) || !COMPUTED_OUTPUT_KEYS.contains(&key) {
                obj.inputs.insert(key.to_owned(), value.clone());
            }
            obj.outputs.insert(key.to_owned(), value.clone());
            vec![Record::Put {
                object: obj,
                next_generation: None,
            }]
        })
    }

    /// Adds (or replaces) an object that exists outside keel.
    pub fn insert_object(&self, object: SimObject) {
        self.out_of_band(|_| {
            vec![Record::Put {
                object: object.clone(),
                next_generation: None,
            }]
        });
    }

    /// Adds an object made outside keel (for `import` and `get` to find),
    /// unless one of its type and ID exists: true when it was added.
    ///
    /// # Errors
    /// [`CloudFileError`] when the cloud's file or database could not be
    /// written; nothing was added.
    pub fn add_object(&self, object: SimObject) -> std::result::Result<bool, CloudFileError> {
        self.change(|state| {
            if state.objects.contains_key(&key(&object.id, &object.ty)) {
                return (false, Vec::new());
            }
            let record = Record::Put {
                object: object.clone(),
                next_generation: None,
            };
            (true, vec![record])
        })
    }

    /// Writes the cloud's objects and generation counters to `path` as a
    /// log [`SimCloud::load`] reads, atomically and durably (temporary
    /// file, fsync, rename, fsync of the directory). Blocking.
    ///
    /// # Errors
    /// [`CloudFileError`].
    pub fn save(&self, path: &Path) -> std::result::Result<(), CloudFileError> {
        self.refresh_from_file()?;
        let crypter = lock(&self.secrets).clone();
        let state = lock(&self.state);
        super::sim_file::write_snapshot(path, &state, crypter.as_deref()).map(|_| ())
    }

    /// Opens the cloud kept in the file at `path` for reading (a missing
    /// file is an empty cloud); [`Self::autosave_to`] the same path makes
    /// its changes persist. It sees what other processes write to the file.
    /// Reads both the change log and the whole-JSON form of earlier
    /// versions. Blocking.
    ///
    /// # Errors
    /// [`CloudFileError`]: I/O, or a file that is not a simulated cloud.
    pub fn load(path: &Path, config: SimConfig) -> std::result::Result<Arc<Self>, CloudFileError> {
        let cloud = Self::new(config);
        *lock(&cloud.file) = Some(Store::File(CloudFile::new(path.to_owned(), false)));
        cloud.refresh_from_file()?;
        Ok(cloud)
    }

    fn record(&self, kind: SimCallKind, phase: SimCallPhase, urn: &str, id: &str) {
        if !self.config.record_calls {
            return;
        }
        let mut log = lock(&self.log);
        let seq = log.next_seq;
        log.next_seq += 1;
        log.calls.push(SimCall {
            seq,
            kind,
            phase,
            urn: urn.to_owned(),
            id: id.to_owned(),
        });
    }

    async fn sleep(&self) {
        self.wait(self.config.latency).await;
    }

    /// Waits `duration` on the simulated cloud's own timer, which keeps
    /// the configured latency (tokio's rounds it up by a millisecond).
    async fn wait(&self, duration: Duration) {
        if !duration.is_zero() {
            self.timer
                .get_or_init(SimTimer::start)
                .sleep(duration)
                .await;
        }
    }

    /// Sleeps the operation's latency, honoring the resource's
    /// `customTimeouts`: an operation slower than its timeout fails after
    /// the timeout, as a real provider's would.
    async fn sleep_within(
        &self,
        operation: &'static str,
        urn: &Urn,
        timeout: Option<std::time::Duration>,
    ) -> Result<()> {
        match timeout {
            Some(t) if self.config.latency > t => {
                self.wait(t).await;
                self.counters.failures.fetch_add(1, Ordering::SeqCst);
                Err(ProviderError::Failed {
                    operation,
                    urn: urn.clone(),
                    message: format!("timed out after {:?} (customTimeouts)", t),
                })
            }
            _ => {
                self.sleep().await;
                Ok(())
            }
        }
    }

    /// The next draw in [0, 1) of the seeded xorshift64* generator.
    fn draw(&self) -> f64 {
        let mut x = lock(&self.rng);
        *x ^= *x >> 12;
        *x ^= *x << 25;
        *x ^= *x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (r >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Fails the operation when failure injection says so.
    fn inject(&self, operation: &'static str, urn: &Urn) -> Result<()> {
        let named =
            self.config.fail.contains(urn.as_str()) || self.config.fail.contains(urn.name());
        let fail = named || (self.config.fail_rate > 0.0 && self.draw() < self.config.fail_rate);
        if fail {
            self.counters.failures.fetch_add(1, Ordering::SeqCst);
            return Err(ProviderError::Failed {
                operation,
                urn: urn.clone(),
                message: INJECTED_FAILURE.to_owned(),
            });
        }
        Ok(())
    }

    /// Plans a new object for `urn`: the next free ID of its generation
    /// counter.
    fn plan_new(state: &CloudState, urn: &Urn, ty: &str, inputs: &PropertyMap) -> (SimObject, u64) {
        let mut generation = state.generations.get(urn.as_str()).copied().unwrap_or(0);
        let id = loop {
            let id = object_id(urn, generation);
            generation += 1;
            if !state.objects.contains_key(&key(&id, ty)) {
                break id;
            }
        };
        let obj = SimObject {
            outputs: outputs_for(ty, &id, inputs),
            id,
            ty: ty.to_owned(),
            name: urn.name().to_owned(),
            urn: urn.as_str().to_owned(),
            inputs: inputs.clone(),
        };
        (obj, generation)
    }

    /// Plans a facet's object on the host its inputs name (see the
    /// module's "Facets").
    fn plan_facet(
        &self,
        state: &CloudState,
        req: &ResourceRequest<'_>,
    ) -> std::result::Result<SimObject, ProviderError> {
        let ty = req.ty.as_str();
        let failed = |message: String| ProviderError::Failed {
            operation: "create",
            urn: req.urn.clone(),
            message,
        };
        let Ok(Some(host)) = facet_host(req.inputs) else {
            return Err(failed(format!(
                "{ty} is a facet type of the simulated cloud: give it a `bucket` or `host` input naming the ID of the object it configures"
            )));
        };
        if self.host(state, host).is_none() {
            return Err(failed(format!(
                "its host `{host}` does not exist: a facet ({ty}) is created on an existing object, the one its `bucket` or `host` input names"
            )));
        }
        if let Some(other) = state.objects.get(&key(host, ty)) {
            return Err(failed(format!(
                "`{host}` already has a {ty} (made by {}): a host has one facet of each type; delete that resource first, or import this facet",
                if other.urn.is_empty() { "someone outside keel" } else { &other.urn }
            )));
        }
        Ok(SimObject {
            outputs: outputs_for(ty, host, req.inputs),
            id: host.to_owned(),
            ty: ty.to_owned(),
            name: req.urn.name().to_owned(),
            urn: req.urn.as_str().to_owned(),
            inputs: req.inputs.clone(),
        })
    }

    fn diff_inputs(&self, req: &ResourceRequest<'_>) -> DiffResponse {
        let empty = PropertyMap::new();
        let old = req.old_inputs.unwrap_or(&empty);
        let new = req.inputs;
        // `ignoreChanges` and `replaceOnChanges` are the engine's: it puts
        // ignored values back before asking, and turns a change of a
        // replace-on-change path into a replace after answering.
        let changed_keys: BTreeSet<String> = old
            .keys()
            .chain(new.keys())
            .filter(|k| old.get(*k) != new.get(*k))
            .cloned()
            .collect();
        let ty = req.ty.as_str();
        let facet = self.config.is_facet(ty);
        let per_type = self.config.replace_on_change_types.get(ty);
        let forces = |k: &str| {
            let in_set = |s: &BTreeSet<String>| s.contains(k) || s.contains("*");
            in_set(&self.config.replace_on_change)
                || per_type.is_some_and(in_set)
                // A facet lives on its host: another host is another facet.
                || (facet && FACET_HOST_KEYS.contains(&k))
        };
        let replace_keys: BTreeSet<String> =
            changed_keys.iter().filter(|k| forces(k)).cloned().collect();
        let kind = if changed_keys.is_empty() {
            DiffKind::Same
        } else if replace_keys.is_empty() {
            DiffKind::Update
        } else {
            DiffKind::Replace
        };
        DiffResponse {
            kind,
            changed_keys,
            replace_keys,
            // Two facets of a type cannot coexist on one host.
            delete_before_replace: facet || self.config.delete_before_replace_types.contains(ty),
            detailed: Vec::new(),
        }
    }
}

/// A provider serving one package from a [`SimCloud`].
#[derive(Debug, Clone)]
pub struct SimProvider {
    cloud: Arc<SimCloud>,
    package: String,
}

impl SimProvider {
    /// A provider serving `package` from `cloud`.
    pub fn new(cloud: Arc<SimCloud>, package: impl Into<String>) -> Self {
        Self {
            cloud,
            package: package.into(),
        }
    }

    /// The cloud it serves from.
    pub fn cloud(&self) -> &Arc<SimCloud> {
        &self.cloud
    }
}

#[async_trait]
impl Provider for SimProvider {
    fn serving(&self) -> crate::provider::Serving {
        crate::provider::Serving::Simulated
    }

    fn package(&self) -> &str {
        &self.package
    }

    async fn configure(&self, _inputs: &PropertyMap) -> Result<()> {
        self.cloud
            .counters
            .configures
            .fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn check(&self, req: ResourceRequest<'_>) -> Result<PropertyMap> {
        self.cloud.counters.checks.fetch_add(1, Ordering::SeqCst);
        if self.cloud.config.is_facet(req.ty.as_str()) && facet_host(req.inputs) == Ok(None) {
            return Err(ProviderError::CheckFailed {
                urn: req.urn.clone(),
                failures: vec![format!(
                    "{} is a facet type of the simulated cloud: give it a `bucket` or `host` input naming the ID of the object it configures",
                    req.ty
                )],
            });
        }
        Ok(req.inputs.clone())
    }

    async fn diff(&self, req: ResourceRequest<'_>) -> Result<DiffResponse> {
        self.cloud.counters.diffs.fetch_add(1, Ordering::SeqCst);
        Ok(self.cloud.diff_inputs(&req))
    }

    /// Two configurations of a simulated provider manage the same objects
    /// only when they are equal apart from the plugin's `version`: any
    /// other difference (a region, an account) is a replace.
    async fn diff_config(&self, req: DiffConfigRequest<'_>) -> Result<DiffResponse> {
        self.cloud.counters.diffs.fetch_add(1, Ordering::SeqCst);
        let changed_keys = super::changed_keys(req.old_inputs, req.new_inputs, &["version"]);
        Ok(DiffResponse {
            kind: if changed_keys.is_empty() {
                DiffKind::Same
            } else {
                DiffKind::Replace
            },
            replace_keys: changed_keys.clone(),
            changed_keys,
            delete_before_replace: false,
            detailed: Vec::new(),
        })
    }

    async fn create(&self, req: ResourceRequest<'_>) -> Result<ObjectState> {
        let cloud = &*self.cloud;
        if req.preview {
            let mut outputs = req.inputs.clone();
            for k in COMPUTED_OUTPUT_KEYS {
                outputs
                    .entry(k.to_owned())
                    .or_insert(PropertyValue::Computed);
            }
            cloud.schema_outputs(req.ty.as_str(), None, req.inputs, &mut outputs);
            return Ok(ObjectState {
                id: String::new(),
                inputs: req.inputs.clone(),
                outputs,
            });
        }
        cloud.counters.creates.fetch_add(1, Ordering::SeqCst);
        let mut guard = OpGuard::start(cloud, SimCallKind::Create, req.urn, "");
        guard.gates("create", req.urn).await?;
        cloud.sleep_within("create", req.urn, req.timeout).await?;
        cloud.inject("create", req.urn)?;
        let obj = cloud
            .change(|state| {
                let (mut obj, next) = if cloud.config.is_facet(req.ty.as_str()) {
                    match cloud.plan_facet(state, &req) {
                        Ok(obj) => (obj, None),
                        Err(e) => return (Err(e), Vec::new()),
                    }
                } else {
                    let (obj, next) =
                        SimCloud::plan_new(state, req.urn, req.ty.as_str(), req.inputs);
                    (obj, Some(next))
                };
                cloud.schema_outputs(&obj.ty, Some(&obj.id), &obj.inputs, &mut obj.outputs);
                let record = Record::Put {
                    object: obj.clone(),
                    next_generation: next,
                };
                (Ok(obj), vec![record])
            })
            .map_err(|e| cloud_io("create", req.urn, &e))??;
        guard.id.clone_from(&obj.id);
        drop(guard);
        Ok(ObjectState {
            id: obj.id,
            inputs: obj.inputs,
            outputs: obj.outputs,
        })
    }

    async fn read(&self, req: ResourceRequest<'_>) -> Result<Option<ObjectState>> {
        let cloud = &*self.cloud;
        cloud.counters.reads.fetch_add(1, Ordering::SeqCst);
        let guard = OpGuard::start(cloud, SimCallKind::Read, req.urn, req.id);
        guard.gates("read", req.urn).await?;
        cloud.sleep().await;
        cloud
            .refresh_from_file()
            .map_err(|e| cloud_io("read", req.urn, &e))?;
        let (found, carried) = {
            let state = lock(&cloud.state);
            let found = state.objects.get(&key(req.id, req.ty.as_str())).cloned();
            let carried = found.is_none() && cloud.carried_for(&state, &req);
            (found, carried)
        };
        let found = found
            .map(|o| cloud.current_shape(o))
            .transpose()
            .map_err(|e| cloud_secrets("read", req.urn, &e))?;
        // A facet its host carries reads as the request describes it.
        let found = found.or_else(|| {
            carried.then(|| ObjectState {
                id: req.id.to_owned(),
                inputs: req.inputs.clone(),
                outputs: req
                    .old_outputs
                    .cloned()
                    .unwrap_or_else(|| outputs_for(req.ty.as_str(), req.id, req.inputs)),
            })
        });
        drop(guard);
        Ok(found)
    }

    async fn update(&self, req: ResourceRequest<'_>) -> Result<ObjectState> {
        let cloud = &*self.cloud;
        if req.preview {
            let mut outputs = req.inputs.clone();
            for k in COMPUTED_OUTPUT_KEYS {
                if outputs.contains_key(k) {
                    continue;
                }
                let v = req
                    .old_outputs
                    .and_then(|o| o.get(k))
                    .cloned()
                    .unwrap_or(PropertyValue::Computed);
                outputs.insert(k.to_owned(), v);
            }
            return Ok(ObjectState {
                id: req.id.to_owned(),
                inputs: req.inputs.clone(),
                outputs,
            });
        }
        cloud.counters.updates.fetch_add(1, Ordering::SeqCst);
        let guard = OpGuard::start(cloud, SimCallKind::Update, req.urn, req.id);
        guard.gates("update", req.urn).await?;
        cloud.sleep_within("update", req.urn, req.timeout).await?;
        cloud.inject("update", req.urn)?;
        let updated = cloud
            .change(|state| {
                let existing = state.objects.get(&key(req.id, req.ty.as_str())).cloned();
                // A resource re-typed through a type alias keeps its object,
                // which the update re-types.
                let retyped = existing
                    .is_none()
                    .then_some(req.old_ty)
                    .flatten()
                    .and_then(|t| state.objects.get(&key(req.id, t.as_str())).cloned());
                let mut records = Vec::new();
                if let Some(o) = &retyped {
                    records.push(Record::Delete {
                        ty: o.ty.clone(),
                        id: o.id.clone(),
                    });
                }
                let existing = existing.or(retyped.map(|o| SimObject {
                    ty: req.ty.as_str().to_owned(),
                    ..o
                }));
                // A facet its host carries gets an object of its own.
                let carried = || {
                    cloud.carried_for(state, &req).then(|| SimObject {
                        id: req.id.to_owned(),
                        ty: req.ty.as_str().to_owned(),
                        name: req.urn.name().to_owned(),
                        urn: req.urn.as_str().to_owned(),
                        inputs: PropertyMap::new(),
                        outputs: PropertyMap::new(),
                    })
                };
                let Some(mut obj) = existing.or_else(carried) else {
                    let missing = ProviderError::NotFound {
                        urn: req.urn.clone(),
                        id: req.id.to_owned(),
                    };
                    return (Err(missing), Vec::new());
                };
                obj.inputs = req.inputs.clone();
                obj.outputs = outputs_for(&obj.ty, &obj.id, req.inputs);
                cloud.schema_outputs(&obj.ty, Some(&obj.id), req.inputs, &mut obj.outputs);
                let updated = ObjectState {
                    id: obj.id.clone(),
                    inputs: obj.inputs.clone(),
                    outputs: obj.outputs.clone(),
                };
                records.push(Record::Put {
                    object: obj,
                    next_generation: None,
                });
                (Ok(updated), records)
            })
            .map_err(|e| cloud_io("update", req.urn, &e))??;
        drop(guard);
        Ok(updated)
    }

    async fn delete(&self, req: ResourceRequest<'_>) -> Result<()> {
        let cloud = &*self.cloud;
        if req.preview {
            return Ok(());
        }
        cloud.counters.deletes.fetch_add(1, Ordering::SeqCst);
        let guard = OpGuard::start(cloud, SimCallKind::Delete, req.urn, req.id);
        guard.gates("delete", req.urn).await?;
        cloud.sleep_within("delete", req.urn, req.timeout).await?;
        cloud.inject("delete", req.urn)?;
        cloud
            .change(|state| ((), cloud.delete_records(state, req.ty.as_str(), req.id)))
            .map_err(|e| cloud_io("delete", req.urn, &e))?;
        drop(guard);
        Ok(())
    }

    async fn find(&self, urn: &Urn, ty: &crate::model::TypeToken) -> Result<Option<ObjectState>> {
        Ok(self.find_all(urn, ty).await?.into_iter().next())
    }

    async fn find_all(&self, urn: &Urn, ty: &crate::model::TypeToken) -> Result<Vec<ObjectState>> {
        let cloud = &*self.cloud;
        if !cloud.config.lookup {
            return Err(ProviderError::CannotLookUp { urn: urn.clone() });
        }
        cloud
            .refresh_from_file()
            .map_err(|e| cloud_io("read", urn, &e))?;
        let found: Vec<SimObject> = lock(&cloud.state)
            .objects
            .values()
            .filter(|o| o.urn == urn.as_str() && o.ty == ty.as_str())
            .cloned()
            .collect();
        found
            .into_iter()
            .map(|o| cloud.current_shape(o))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| cloud_secrets("read", urn, &e))
    }

    /// Answers the language-conformance packages' functions, and any other
    /// function as a data source over the cloud's objects
    /// (`sim_functions.rs`). A preview answers the same: a function reads,
    /// it changes nothing.
    async fn invoke(&self, token: &str, args: &PropertyMap, _preview: bool) -> Result<PropertyMap> {
        let fail = |message: String| ProviderError::Call {
            operation: "invoke",
            target: token.to_owned(),
            message,
        };
        let package = token.split(':').next().unwrap_or_default();
        let decl = self.cloud.config.packages.get(package);
        if let Some(answer) = super::sim_functions::conformance(token, args, decl) {
            return answer.map_err(fail);
        }
        if super::sim_functions::is_action(token) {
            if self.cloud.config.fail.contains(token) {
                return Err(fail("injected failure (`--sim-fail`)".into()));
            }
            return Ok(super::sim_functions::action_result(token, args));
        }
        let cloud = &*self.cloud;
        let Some(ty) = super::sim_functions::looked_up_type(token) else {
            if super::sim_functions::is_data_source(token) {
                return super::sim_functions::lookup(token, args, &[]).map_err(fail);
            }
            return Err(fail(format!(
                "the simulated cloud answers only data sources (`get...` and `list...` functions), actions (`run...`) and the language-conformance packages' functions; serve package `{package}` by its plugin (`--providers plugins`) to call this one"
            )));
        };
        cloud.counters.reads.fetch_add(1, Ordering::SeqCst);
        cloud
            .refresh_from_file()
            .map_err(|e| fail(format!("the simulated cloud could not be read: {e}")))?;
        let held: Vec<SimObject> = lock(&cloud.state)
            .objects
            .values()
            .filter(|o| super::sim_functions::without_module_suffix(&o.ty) == ty)
            .cloned()
            .collect();
        let mut candidates = Vec::with_capacity(held.len());
        for o in held {
            let o = cloud
                .current_shape(o)
                .map_err(|e| fail(format!("the simulated cloud's secrets: {e}")))?;
            candidates.push((o.id, o.outputs));
        }
        candidates.sort_by(|a, b| a.0.cmp(&b.0));
        super::sim_functions::lookup(token, args, &candidates).map_err(fail)
    }

    async fn returns_scalar(&self, token: &str) -> bool {
        super::sim_functions::returns_scalar(token)
    }

    fn schema(&self, ty: &crate::model::TypeToken) -> Option<super::SchemaInfo> {
        self.cloud
            .schema(ty.as_str())
            .map(|s| super::SchemaInfo { version: s.version })
    }

    async fn migrate_state(
        &self,
        urn: &Urn,
        ty: &crate::model::TypeToken,
        old_version: u64,
        state: super::SchemaState,
    ) -> Result<super::SchemaState> {
        let fail = |message: String| ProviderError::Migrate {
            urn: urn.clone(),
            ty: ty.clone(),
            old_version,
            message,
        };
        let schema = self
            .cloud
            .schema(ty.as_str())
            .ok_or_else(|| fail("the type has no schema version".into()))?;
        if old_version >= schema.version {
            return Err(fail(format!(
                "the current schema version is {}",
                schema.version
            )));
        }
        let mut state = state;
        schema.rename(&mut state.inputs);
        schema.rename(&mut state.outputs);
        lock(&self.cloud.migrations).push(SimMigration {
            urn: urn.as_str().to_owned(),
            ty: ty.as_str().to_owned(),
            old_version,
            new_version: schema.version,
        });
        Ok(state)
    }
}

fn cloud_io(operation: &'static str, urn: &Urn, e: &CloudFileError) -> ProviderError {
    ProviderError::Failed {
        operation,
        urn: urn.clone(),
        message: e.to_string(),
    }
}

fn cloud_secrets(operation: &'static str, urn: &Urn, e: &SecretsError) -> ProviderError {
    ProviderError::Failed {
        operation,
        urn: urn.clone(),
        message: format!(
            "the simulated cloud's object holds secrets this stack cannot decrypt: {e}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TypeToken;

    const TY: &str = "aws:s3/bucket:Bucket";

    fn urn(name: &str) -> Urn {
        Urn::parse(&format!("urn:pulumi:dev::proj::{TY}::{name}")).expect("urn")
    }

    fn ty() -> TypeToken {
        TypeToken::parse(TY).expect("type")
    }

    fn props(pairs: &[(&str, &str)]) -> PropertyMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), PropertyValue::String((*v).to_owned())))
            .collect()
    }

    fn req<'a>(
        urn: &'a Urn,
        ty: &'a TypeToken,
        id: &'a str,
        inputs: &'a PropertyMap,
    ) -> ResourceRequest<'a> {
        ResourceRequest::new(urn, ty, id, inputs)
    }

    #[tokio::test]
    async fn lifecycle_with_counters_and_log() {
        let cloud = SimCloud::new(SimConfig::default());
        let p = cloud.provider("aws");
        assert_eq!(p.package(), "aws");
        let (u, t) = (urn("site"), ty());
        let inputs = props(&[("index", "index.html")]);

        p.configure(&PropertyMap::new()).await.expect("configure");
        let checked = p.check(req(&u, &t, "", &inputs)).await.expect("check");
        assert_eq!(checked, inputs);

        let created = p.create(req(&u, &t, "", &inputs)).await.expect("create");
        assert!(created.id.starts_with("site-"));
        assert_eq!(created.id.len(), "site-".len() + 8);
        assert_eq!(created.inputs, inputs);
        assert_eq!(
            created.outputs.get("arn"),
            Some(&PropertyValue::String(format!(
                "arn:sim:{TY}:{}",
                created.id
            )))
        );
        assert_eq!(
            created.outputs.get("websiteEndpoint"),
            Some(&PropertyValue::String(format!(
                "{}.website.sim.example",
                created.id
            )))
        );
        assert_eq!(cloud.objects().len(), 1);

        let read = p
            .read(req(&u, &t, &created.id, &inputs))
            .await
            .expect("read")
            .expect("exists");
        assert_eq!(read, created);

        let new_inputs = props(&[("index", "home.html")]);
        let mut r = req(&u, &t, &created.id, &new_inputs);
        r.old_inputs = Some(&inputs);
        r.old_outputs = Some(&created.outputs);
        let updated = p.update(r).await.expect("update");
        assert_eq!(updated.id, created.id);
        assert_eq!(updated.inputs, new_inputs);
        assert_eq!(updated.outputs.get("arn"), created.outputs.get("arn"));
        let obj = cloud.object(&created.id).expect("object");
        assert_eq!(obj.inputs, new_inputs);
        assert_eq!(obj.name, "site");
        assert_eq!(obj.ty, TY);

        p.delete(req(&u, &t, &created.id, &new_inputs))
            .await
            .expect("delete");
        assert!(cloud.objects().is_empty());
        assert!(p
            .read(req(&u, &t, &created.id, &new_inputs))
            .await
            .expect("read")
            .is_none());
        // Deleting again is fine (idempotent) but counted.
        p.delete(req(&u, &t, &created.id, &new_inputs))
            .await
            .expect("delete again");

        // Updating a missing object fails.
        let err = p
            .update(req(&u, &t, &created.id, &new_inputs))
            .await
            .expect_err("missing");
        assert!(matches!(err, ProviderError::NotFound { .. }));

        let c = cloud.counters();
        assert_eq!(
            c,
            SimCounters {
                creates: 1,
                updates: 2,
                deletes: 2,
                reads: 2,
                checks: 1,
                diffs: 0,
                configures: 1,
                failures: 0,
                in_flight: 0,
                max_in_flight: 1,
            }
        );

        let log = cloud.call_log();
        assert_eq!(log.len(), 14);
        assert!(log.iter().enumerate().all(|(i, c)| c.seq == i as u64));
        assert_eq!(log[0].kind, SimCallKind::Create);
        assert_eq!(log[0].phase, SimCallPhase::Start);
        assert_eq!(log[0].id, "");
        assert_eq!(log[1].phase, SimCallPhase::End);
        assert_eq!(log[1].id, created.id);
        assert_eq!(log[1].urn, u.as_str());
        assert_eq!(log[6].kind, SimCallKind::Delete);
    }

    #[tokio::test]
    async fn ids_are_deterministic_and_replacements_get_new_ids() {
        let (a, b, t) = (urn("a"), urn("b"), ty());
        let inputs = PropertyMap::new();
        let c1 = SimCloud::new(SimConfig::default());
        let c2 = SimCloud::new(SimConfig::default());
        let (p1, p2) = (c1.provider("aws"), c2.provider("aws"));
        // Different creation orders.
        let a1 = p1.create(req(&a, &t, "", &inputs)).await.expect("a1");
        let b1 = p1.create(req(&b, &t, "", &inputs)).await.expect("b1");
        let b2 = p2.create(req(&b, &t, "", &inputs)).await.expect("b2");
        let a2 = p2.create(req(&a, &t, "", &inputs)).await.expect("a2");
        assert_eq!(a1.id, a2.id);
        assert_eq!(b1.id, b2.id);
        assert_ne!(a1.id, b1.id);
        assert_eq!(c1.objects(), c2.objects());

        // A replacement (create before delete) gets a fresh ID.
        let a1b = p1.create(req(&a, &t, "", &inputs)).await.expect("replace");
        assert_ne!(a1b.id, a1.id);
        assert!(a1b.id.starts_with("a-"));
        assert_eq!(c1.objects().len(), 3);
    }

    #[tokio::test]
    async fn diff_kinds_and_replace_on_change() {
        let mut config = SimConfig::default();
        config.replace_on_change.insert("region".to_owned());
        config
            .replace_on_change_types
            .insert(TY.to_owned(), BTreeSet::from(["bucketName".to_owned()]));
        config.delete_before_replace_types.insert(TY.to_owned());
        let cloud = SimCloud::new(config);
        let p = cloud.provider("aws");
        let old = props(&[("index", "a"), ("region", "us"), ("bucketName", "x")]);

        async fn diff(p: &Arc<dyn Provider>, old: &PropertyMap, new: PropertyMap) -> DiffResponse {
            let (u, t) = (urn("site"), ty());
            let mut r = req(&u, &t, "id", &new);
            r.old_inputs = Some(old);
            p.diff(r).await.expect("diff")
        }

        let same = diff(&p, &old, old.clone()).await;
        assert_eq!(same.kind, DiffKind::Same);
        assert!(same.changed_keys.is_empty());

        let upd = diff(
            &p,
            &old,
            props(&[
                ("index", "b"),
                ("region", "us"),
                ("bucketName", "x"),
                ("tag", "t"),
            ]),
        )
        .await;
        assert_eq!(upd.kind, DiffKind::Update);
        assert_eq!(
            upd.changed_keys,
            BTreeSet::from(["index".to_owned(), "tag".to_owned()])
        );
        assert!(upd.replace_keys.is_empty());

        let rep = diff(&p, &old, props(&[("index", "a"), ("bucketName", "x")])).await;
        assert_eq!(rep.kind, DiffKind::Replace);
        assert_eq!(rep.replace_keys, BTreeSet::from(["region".to_owned()]));
        assert!(rep.delete_before_replace);

        let rep = diff(
            &p,
            &old,
            props(&[("index", "a"), ("region", "us"), ("bucketName", "y")]),
        )
        .await;
        assert_eq!(rep.kind, DiffKind::Replace);
        assert_eq!(rep.replace_keys, BTreeSet::from(["bucketName".to_owned()]));

        // An unknown value (a dependency being replaced) is a change.
        let mut unknown = old.clone();
        unknown.insert("index".into(), PropertyValue::Computed);
        assert_eq!(diff(&p, &old, unknown).await.kind, DiffKind::Update);
        unknown = old.clone();
        unknown.insert("region".into(), PropertyValue::Computed);
        assert_eq!(diff(&p, &old, unknown).await.kind, DiffKind::Replace);
        assert_eq!(cloud.counters().diffs, 6);
    }

    #[tokio::test]
    async fn diff_config_replaces_unless_only_the_version_differs() {
        let cloud = SimCloud::new(SimConfig::default());
        let p = cloud.provider("aws");
        let u = urn("default_6_0_0");
        let check = |old: PropertyMap, new: PropertyMap| {
            let p = p.clone();
            let u = u.clone();
            async move {
                p.diff_config(DiffConfigRequest {
                    urn: &u,
                    old_inputs: &old,
                    old_outputs: &old,
                    new_inputs: &new,
                    preview: false,
                })
                .await
                .expect("diff config")
            }
        };
        let d = check(
            props(&[("version", "6.0.0")]),
            props(&[("version", "6.1.0")]),
        )
        .await;
        assert_eq!(d.kind, DiffKind::Same);
        let d = check(
            props(&[("version", "6.0.0"), ("region", "us")]),
            props(&[("region", "us")]),
        )
        .await;
        assert_eq!(d.kind, DiffKind::Same);
        let d = check(props(&[("region", "us")]), props(&[("region", "eu")])).await;
        assert_eq!(d.kind, DiffKind::Replace);
        assert_eq!(d.replace_keys, BTreeSet::from(["region".to_owned()]));
        let d = check(PropertyMap::new(), props(&[("region", "eu")])).await;
        assert_eq!(d.kind, DiffKind::Replace);
    }

    #[tokio::test]
    async fn failure_injection_by_name_and_urn() {
        let mut config = SimConfig::default();
        config.fail.insert("bad".to_owned());
        config.fail.insert(urn("worse").as_str().to_owned());
        let cloud = SimCloud::new(config);
        let p = cloud.provider("aws");
        let t = ty();
        let inputs = PropertyMap::new();
        for name in ["bad", "worse"] {
            let u = urn(name);
            let err = p.create(req(&u, &t, "", &inputs)).await.expect_err("fails");
            match err {
                ProviderError::Failed {
                    operation,
                    urn: e_urn,
                    message,
                } => {
                    assert_eq!(operation, "create");
                    assert_eq!(e_urn, u);
                    assert_eq!(message, INJECTED_FAILURE);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        let good = urn("good");
        p.create(req(&good, &t, "", &inputs)).await.expect("good");
        assert_eq!(cloud.objects().len(), 1);
        let c = cloud.counters();
        assert_eq!((c.creates, c.failures, c.in_flight), (3, 2, 0));
        // The failed creates still end in the log.
        let log = cloud.call_log();
        assert_eq!(log.len(), 6);
        assert_eq!(log[1].phase, SimCallPhase::End);
        assert_eq!(log[1].id, "");
    }

    #[tokio::test]
    async fn fail_rate_is_seeded() {
        let run = |seed: u64| async move {
            let cloud = SimCloud::new(SimConfig {
                fail_rate: 0.5,
                seed,
                ..SimConfig::default()
            });
            let p = cloud.provider("aws");
            let t = ty();
            let inputs = PropertyMap::new();
            let mut outcomes = Vec::new();
            for i in 0..32 {
                let u = urn(&format!("r{i}"));
                outcomes.push(p.create(req(&u, &t, "", &inputs)).await.is_ok());
            }
            outcomes
        };
        let a = run(7).await;
        assert_eq!(a, run(7).await);
        assert!(a.iter().any(|ok| *ok));
        assert!(a.iter().any(|ok| !*ok));
    }

    #[tokio::test]
    async fn preview_changes_nothing() {
        let mut config = SimConfig::default();
        config.fail.insert("site".to_owned());
        let cloud = SimCloud::new(config);
        let p = cloud.provider("aws");
        let (u, t) = (urn("site"), ty());
        let inputs = props(&[("arn", "mine")]);
        let mut r = req(&u, &t, "", &inputs);
        r.preview = true;
        let s = p.create(r).await.expect("preview create");
        assert_eq!(s.id, "");
        assert_eq!(
            s.outputs.get("arn"),
            Some(&PropertyValue::String("mine".to_owned()))
        );
        assert_eq!(
            s.outputs.get("websiteEndpoint"),
            Some(&PropertyValue::Computed)
        );

        let old_out = props(&[("domainName", "d")]);
        let mut r = req(&u, &t, "x", &inputs);
        r.preview = true;
        r.old_outputs = Some(&old_out);
        let s = p.update(r).await.expect("preview update");
        assert_eq!(
            s.outputs.get("domainName"),
            Some(&PropertyValue::String("d".to_owned()))
        );
        let mut r = req(&u, &t, "x", &inputs);
        r.preview = true;
        p.delete(r).await.expect("preview delete");

        assert!(cloud.objects().is_empty());
        assert_eq!(cloud.counters(), SimCounters::default());
        assert!(cloud.call_log().is_empty());
    }

    #[tokio::test]
    async fn max_in_flight_counts_concurrent_creates() {
        let cloud = SimCloud::new(SimConfig::default());
        // No create ends before all eight are in flight, whatever the
        // scheduling.
        cloud.set_rendezvous(8, Duration::from_secs(60));
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let p = cloud.provider("aws");
                tokio::spawn(async move {
                    let (u, t) = (urn(&format!("r{i}")), ty());
                    let inputs = PropertyMap::new();
                    p.create(req(&u, &t, "", &inputs)).await.map(|s| s.id)
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("join").expect("create");
        }
        let c = cloud.counters();
        assert_eq!((c.creates, c.in_flight, c.max_in_flight), (8, 0, 8));
        assert_eq!(cloud.objects().len(), 8);
        cloud.reset_max_in_flight();
        assert_eq!(cloud.counters().max_in_flight, 0);
    }

    #[tokio::test]
    async fn an_unreached_rendezvous_fails_the_operation_naming_the_largest_number_seen() {
        let cloud = SimCloud::new(SimConfig::default());
        // Only one create ever runs: two are never in flight at once.
        cloud.set_rendezvous(2, Duration::from_millis(10));
        let p = cloud.provider("aws");
        let (u, t, inputs) = (urn("alone"), ty(), PropertyMap::new());
        let e = p.create(req(&u, &t, "", &inputs)).await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("rendezvous of 2") && text.contains("at most 1"),
            "{text}"
        );
        assert!(cloud.objects().is_empty());
        assert_eq!(cloud.counters().in_flight, 0);
        // Without the rendezvous the same create succeeds.
        cloud.set_rendezvous(0, Duration::ZERO);
        p.create(req(&u, &t, "", &inputs)).await.unwrap();
    }

    #[tokio::test]
    async fn held_operations_stay_in_flight_until_dropped() {
        use futures::FutureExt;
        let cloud = SimCloud::new(SimConfig::default());
        cloud.hold_from(1);
        let p = cloud.provider("aws");
        let t = ty();
        let inputs = PropertyMap::new();
        let (first, second) = (urn("first"), urn("second"));
        // Ordinal 0 is not held: with no latency it ends at its first poll.
        let made = p.create(req(&first, &t, "", &inputs)).now_or_never();
        assert!(matches!(made, Some(Ok(_))), "{made:?}");
        // Ordinal 1 is held: polled, it is in flight and never reaches the
        // cloud.
        let mut held = Box::pin(p.create(req(&second, &t, "", &inputs)));
        assert!((&mut held).now_or_never().is_none());
        assert!((&mut held).now_or_never().is_none());
        assert_eq!(cloud.counters().in_flight, 1);
        assert_eq!(cloud.objects().len(), 1);
        drop(held);
        assert_eq!(cloud.counters().in_flight, 0);
        assert_eq!(cloud.objects().len(), 1);
    }

    #[tokio::test]
    async fn out_of_band_changes() {
        let cloud = SimCloud::new(SimConfig::default());
        let p = cloud.provider("aws");
        let (u, t) = (urn("site"), ty());
        let inputs = props(&[("index", "a")]);
        let s = p.create(req(&u, &t, "", &inputs)).await.expect("create");
        let v = PropertyValue::String("drifted".to_owned());
        assert!(cloud.set_property(&s.id, "index", v.clone()));
        assert!(cloud.set_property(&s.id, "arn", v.clone()));
        assert!(!cloud.set_property("nope", "index", v.clone()));
        let o = cloud.object(&s.id).expect("object");
        assert_eq!(o.inputs.get("index"), Some(&v));
        assert_eq!(o.outputs.get("arn"), Some(&v));
        assert!(!o.inputs.contains_key("arn"));

        let foreign = SimObject {
            id: "legacy-1".to_owned(),
            ty: TY.to_owned(),
            name: "legacy".to_owned(),
            urn: String::new(),
            inputs: inputs.clone(),
            outputs: inputs.clone(),
        };
        cloud.insert_object(foreign.clone());
        let lu = urn("legacy");
        let read = p
            .read(req(&lu, &t, "legacy-1", &PropertyMap::new()))
            .await
            .expect("read")
            .expect("exists");
        assert_eq!(read.inputs, foreign.inputs);

        assert!(cloud.remove_object(&s.id));
        assert!(!cloud.remove_object(&s.id));
        assert_eq!(cloud.objects(), vec![foreign]);
    }

    #[tokio::test]
    async fn save_load_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cloud.json");
        let missing = SimCloud::load(&path, SimConfig::default()).expect("missing file");
        assert!(missing.objects().is_empty());

        let cloud = SimCloud::new(SimConfig::default());
        let p = cloud.provider("aws");
        let (u, t) = (urn("site"), ty());
        let inputs = props(&[("index", "a")]);
        let first = p.create(req(&u, &t, "", &inputs)).await.expect("create");
        p.delete(req(&u, &t, &first.id, &inputs))
            .await
            .expect("delete");
        let second = p.create(req(&u, &t, "", &inputs)).await.expect("create");
        cloud.save(&path).expect("save");

        let loaded = SimCloud::load(&path, SimConfig::default()).expect("load");
        assert_eq!(loaded.objects(), cloud.objects());
        // Generation counters survive: the next ID continues the sequence.
        let lp = loaded.provider("aws");
        let third = lp.create(req(&u, &t, "", &inputs)).await.expect("create");
        let next = p.create(req(&u, &t, "", &inputs)).await.expect("create");
        assert_eq!(third.id, next.id);
        assert_ne!(third.id, first.id);
        assert_ne!(third.id, second.id);

        std::fs::write(&path, b"not json").expect("write");
        let err = SimCloud::load(&path, SimConfig::default()).expect_err("bad file");
        assert!(
            matches!(err, CloudFileError::Corrupt { offset: 0, .. }),
            "{err}"
        );
    }

    /// `path`'s (device, inode) and length.
    fn file_id(path: &Path) -> ((u64, u64), u64) {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).expect("metadata");
        ((m.dev(), m.ino()), m.len())
    }

    /// A cloud kept in `path`, as a CLI process opens it.
    fn persistent(path: &Path) -> Arc<SimCloud> {
        let cloud = SimCloud::load(path, SimConfig::default()).expect("load");
        cloud.autosave_to(path);
        cloud
    }

    #[tokio::test]
    async fn objects_are_identified_by_type_and_id() {
        // Not a facet type: two objects of their own sharing an ID.
        const OTHER: &str = "aws:s3/bucketPolicy:BucketPolicy";
        let cloud = SimCloud::new(SimConfig::default());
        let p = cloud.provider("aws");
        let (u, t) = (urn("site"), ty());
        let other_t = TypeToken::parse(OTHER).expect("type");
        let inputs = props(&[("index", "a")]);
        let bucket = p.create(req(&u, &t, "", &inputs)).await.expect("create");
        // A second resource manages the same physical ID under another type.
        cloud.insert_object(SimObject {
            id: bucket.id.clone(),
            ty: OTHER.to_owned(),
            name: "site-website".to_owned(),
            urn: String::new(),
            inputs: inputs.clone(),
            outputs: inputs.clone(),
        });
        assert_eq!(cloud.objects().len(), 2);

        // Reads, updates and deletes of one type leave the other's object.
        let new_inputs = props(&[("index", "b")]);
        p.update(req(&u, &other_t, &bucket.id, &new_inputs))
            .await
            .expect("update");
        assert_eq!(
            cloud.object_of(TY, &bucket.id).expect("bucket").inputs,
            inputs
        );
        p.delete(req(&u, &other_t, &bucket.id, &inputs))
            .await
            .expect("delete");
        assert!(cloud.object_of(OTHER, &bucket.id).is_none());
        let read = p
            .read(req(&u, &t, &bucket.id, &inputs))
            .await
            .expect("read");
        assert_eq!(read.expect("the bucket is still there").id, bucket.id);
        assert!(p
            .read(req(&u, &other_t, &bucket.id, &inputs))
            .await
            .expect("read")
            .is_none());
        let err = p
            .update(req(&u, &other_t, &bucket.id, &inputs))
            .await
            .expect_err("missing");
        assert!(matches!(err, ProviderError::NotFound { .. }), "{err}");
        assert_eq!(cloud.objects().len(), 1);
    }

    const FACET: &str = "aws:s3/bucketWebsiteConfiguration:BucketWebsiteConfiguration";

    fn facet_ty() -> TypeToken {
        TypeToken::parse(FACET).expect("type")
    }

    fn facet_urn(name: &str) -> Urn {
        Urn::parse(&format!("urn:pulumi:dev::proj::{FACET}::{name}")).expect("urn")
    }

    /// Facet inputs on the host `id`.
    fn facet_props(id: &str, index: &str) -> PropertyMap {
        props(&[("bucket", id), ("index", index)])
    }

    #[test]
    fn facet_types_are_named_by_their_suffix() {
        let c = SimConfig::default();
        let check = |ty: &str, facet: bool| assert_eq!(c.is_facet(ty), facet, "{ty}");
        check(FACET, true);
        check("azure:web:AppSettings", true);
        check("fz:store:BoxSettings", true);
        check(TY, false);
        // The module part does not count.
        check("fz:settings:Box", false);
        check("fz:fooConfiguration:Box", false);
        let none = SimConfig {
            facet_suffixes: BTreeSet::new(),
            ..SimConfig::default()
        };
        assert!(!none.is_facet(FACET));
    }

    #[tokio::test]
    async fn a_facet_is_created_on_its_host_and_changed_alone() {
        let cloud = SimCloud::new(SimConfig::default());
        let p = cloud.provider("aws");
        let (u, t, fu, ft) = (urn("site"), ty(), facet_urn("site-web"), facet_ty());
        let host_inputs = props(&[("name", "site")]);
        let host = p.create(req(&u, &t, "", &host_inputs)).await.expect("host");
        let x = host.id.clone();

        // The host is named by an input; check refuses a facet without one.
        let err = p
            .check(req(&fu, &ft, "", &props(&[("index", "a")])))
            .await
            .expect_err("no host input");
        assert!(
            matches!(&err, ProviderError::CheckFailed { .. }) && err.to_string().contains("`host`"),
            "{err}"
        );
        let err = p
            .create(req(&fu, &ft, "", &facet_props("nope", "a")))
            .await
            .expect_err("no such host");
        assert!(err.to_string().contains("`nope` does not exist"), "{err}");

        let inputs = facet_props(&x, "a");
        let facet = p.create(req(&fu, &ft, "", &inputs)).await.expect("create");
        assert_eq!(facet.id, x, "a facet has its host's ID");
        assert!(cloud.has_facet(FACET, &x));
        let objects = cloud.objects();
        assert_eq!(objects.len(), 2);
        assert_eq!(cloud.object_of(FACET, &x).expect("facet").urn, fu.as_str());
        // One facet of a type per host.
        let other = facet_urn("other");
        let err = p
            .create(req(&other, &ft, "", &inputs))
            .await
            .expect_err("taken");
        assert!(err.to_string().contains(fu.as_str()), "{err}");

        // An update changes the facet only.
        let host_before = cloud.object_of(TY, &x).expect("host");
        let changed = facet_props(&x, "b");
        let updated = p.update(req(&fu, &ft, &x, &changed)).await.expect("update");
        assert_eq!(updated.inputs, changed);
        assert_eq!(cloud.object_of(FACET, &x).expect("facet").inputs, changed);
        assert_eq!(cloud.object_of(TY, &x), Some(host_before.clone()));

        // A delete removes the facet only; it is gone for reads and
        // updates, and can be created again.
        p.delete(req(&fu, &ft, &x, &changed)).await.expect("delete");
        assert_eq!(cloud.objects(), vec![host_before.clone()]);
        assert!(!cloud.has_facet(FACET, &x));
        assert_eq!(cloud.removed_facets(), vec![(FACET.to_owned(), x.clone())]);
        let read = p.read(req(&fu, &ft, &x, &changed)).await.expect("read");
        assert_eq!(read, None);
        let err = p
            .update(req(&fu, &ft, &x, &changed))
            .await
            .expect_err("gone");
        assert!(matches!(err, ProviderError::NotFound { .. }), "{err}");
        p.create(req(&fu, &ft, "", &inputs))
            .await
            .expect("created again");
        assert!(cloud.removed_facets().is_empty());
        assert!(cloud.has_facet(FACET, &x));

        // Deleting the host deletes its facets.
        p.delete(req(&u, &t, &x, &host_inputs))
            .await
            .expect("delete host");
        assert!(cloud.objects().is_empty());
        assert!(!cloud.has_facet(FACET, &x));
    }

    #[tokio::test]
    async fn a_split_off_facet_is_carried_by_its_host() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cloud.json");
        let cloud = persistent(&path);
        let p = cloud.provider("aws");
        let (u, t, fu, ft) = (urn("assets"), ty(), facet_urn("assets-website"), facet_ty());
        let host_inputs = props(&[("name", "shop"), ("index", "a")]);
        let host = p.create(req(&u, &t, "", &host_inputs)).await.expect("host");
        let x = host.id.clone();
        let host_object = cloud.object_of(TY, &x).expect("host");

        // A split gave a resource of the facet type the host's ID: the
        // cloud has no object for it, and reads it as the request says.
        let inputs = facet_props(&x, "a");
        let outputs = inputs.clone();
        let mut r = req(&fu, &ft, &x, &inputs);
        r.old_outputs = Some(&outputs);
        let read = p.read(r).await.expect("read").expect("carried");
        assert_eq!(
            (read.id.as_str(), &read.inputs, &read.outputs),
            (x.as_str(), &inputs, &outputs)
        );
        assert!(cloud.has_facet(FACET, &x));
        assert_eq!(cloud.objects(), vec![host_object.clone()]);
        // A request that does not name the host finds nothing.
        let stray = props(&[("index", "a")]);
        assert_eq!(p.read(req(&fu, &ft, &x, &stray)).await.expect("read"), None);
        let elsewhere = facet_props("other-1", "a");
        assert_eq!(
            p.read(req(&fu, &ft, &x, &elsewhere)).await.expect("read"),
            None
        );
        // Another process of the stack sees the same.
        let other = SimCloud::load(&path, SimConfig::default()).expect("load");
        assert!(other.has_facet(FACET, &x));

        // An update writes the facet's object, leaving the host.
        let changed = facet_props(&x, "b");
        let updated = p.update(req(&fu, &ft, &x, &changed)).await.expect("update");
        assert_eq!(updated.inputs, changed);
        let object = cloud.object_of(FACET, &x).expect("the facet's object");
        assert_eq!(
            (object.urn.as_str(), object.name.as_str()),
            (fu.as_str(), "assets-website")
        );
        assert_eq!(cloud.object_of(TY, &x), Some(host_object.clone()));
        assert_eq!(cloud.objects().len(), 2);

        // A delete removes it and leaves the host, in the file too.
        p.delete(req(&fu, &ft, &x, &changed)).await.expect("delete");
        assert_eq!(cloud.objects(), vec![host_object.clone()]);
        for c in [
            SimCloud::load(&path, SimConfig::default()).expect("load"),
            {
                cloud.save(&path).expect("compact");
                SimCloud::load(&path, SimConfig::default()).expect("load")
            },
        ] {
            assert!(!c.has_facet(FACET, &x));
            let r = req(&fu, &ft, &x, &changed);
            assert_eq!(c.provider("aws").read(r).await.expect("read"), None);
        }

        // A carried facet deleted (never written) stays gone as well.
        let (v, vt) = (
            Urn::parse("urn:pulumi:dev::proj::aws:s3/v:VersioningSettings::v").expect("urn"),
            TypeToken::parse("aws:s3/v:VersioningSettings").expect("type"),
        );
        let vin = props(&[("host", &x), ("on", "yes")]);
        assert!(p
            .read(req(&v, &vt, &x, &vin))
            .await
            .expect("read")
            .is_some());
        p.delete(req(&v, &vt, &x, &vin)).await.expect("delete");
        assert_eq!(p.read(req(&v, &vt, &x, &vin)).await.expect("read"), None);
        assert_eq!(cloud.removed_facets().len(), 2);
        assert_eq!(cloud.objects(), vec![host_object]);

        // Removing the host behind keel's back forgets its facets.
        assert!(cloud.remove_object_of(TY, &x));
        assert!(cloud.objects().is_empty());
        assert!(cloud.removed_facets().is_empty());
    }

    #[tokio::test]
    async fn a_facet_on_another_host_is_replaced_delete_first() {
        let cloud = SimCloud::new(SimConfig::default());
        let p = cloud.provider("aws");
        let (fu, ft) = (facet_urn("web"), facet_ty());
        let old = facet_props("a-1", "x");
        let diff = |new: PropertyMap| {
            let p = p.clone();
            let (fu, ft, old) = (fu.clone(), ft.clone(), old.clone());
            async move {
                let mut r = req(&fu, &ft, "a-1", &new);
                r.old_inputs = Some(&old);
                p.diff(r).await.expect("diff")
            }
        };
        let d = diff(facet_props("a-1", "y")).await;
        assert_eq!(d.kind, DiffKind::Update);
        let d = diff(facet_props("b-2", "x")).await;
        assert_eq!(d.kind, DiffKind::Replace);
        assert_eq!(d.replace_keys, BTreeSet::from(["bucket".to_owned()]));
        assert!(d.delete_before_replace);
        let mut unknown = facet_props("a-1", "x");
        unknown.insert("bucket".into(), PropertyValue::Computed);
        assert_eq!(diff(unknown).await.kind, DiffKind::Replace);
    }

    #[tokio::test]
    async fn without_facet_suffixes_every_type_makes_objects_of_its_own() {
        let cloud = SimCloud::new(SimConfig {
            facet_suffixes: BTreeSet::new(),
            ..SimConfig::default()
        });
        let p = cloud.provider("aws");
        let (fu, ft) = (facet_urn("web"), facet_ty());
        let host = p
            .create(req(&urn("site"), &ty(), "", &PropertyMap::new()))
            .await
            .expect("host");
        let inputs = facet_props(&host.id, "a");
        let made = p.create(req(&fu, &ft, "", &inputs)).await.expect("create");
        assert!(made.id.starts_with("web-"), "{}", made.id);
        assert_eq!(
            p.read(req(&fu, &ft, &host.id, &inputs))
                .await
                .expect("read"),
            None
        );
    }

    #[tokio::test]
    async fn a_change_appends_one_record_whatever_the_number_of_objects() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cloud.json");
        let cloud = persistent(&path);
        let p = cloud.provider("aws");
        let t = ty();
        let inputs = props(&[("index", "index.html")]);
        let mut growth = Vec::new();
        let mut replaced = 0;
        let mut last: Option<((u64, u64), u64)> = None;
        for i in 0..1200 {
            let u = urn(&format!("r{i:05}"));
            p.create(req(&u, &t, "", &inputs)).await.expect("create");
            let now = file_id(&path);
            if let Some((id, len)) = last {
                if id == now.0 {
                    growth.push(now.1 - len);
                } else {
                    replaced += 1;
                }
            }
            last = Some(now);
        }
        // The file is appended to, not rewritten: each create adds one
        // record of the same size with 10 objects as with 1,000.
        assert_eq!(replaced, 0, "the file was rewritten");
        let (first, at_1000) = (growth[10], growth[1000]);
        assert!(
            at_1000 <= first + 8,
            "{first} bytes at 10, {at_1000} at 1000"
        );
        assert!(first < 1024, "{first} bytes for one object");
        let stats = cloud.file_stats();
        assert_eq!(stats.appended_records, 1200);
        assert!(stats.appended_bytes < 1200 * 1024, "{stats:?}");
    }

    #[tokio::test]
    async fn compaction_keeps_the_file_near_its_live_objects() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cloud.json");
        let cloud = persistent(&path);
        let p = cloud.provider("aws");
        let (u, t) = (urn("site"), ty());
        let obj = p
            .create(req(&u, &t, "", &props(&[("n", "0")])))
            .await
            .expect("create");
        for i in 0..5000 {
            let inputs = props(&[("n", &i.to_string())]);
            p.update(req(&u, &t, &obj.id, &inputs))
                .await
                .expect("update");
        }
        let stats = cloud.file_stats();
        assert!(stats.rewrites >= 2, "{stats:?}");
        let (_, len) = file_id(&path);
        assert!(len < 2048 * 400, "{len} bytes for one object");
        // A fresh reader sees the last update.
        let again = SimCloud::load(&path, SimConfig::default()).expect("load");
        assert_eq!(
            again.object_of(TY, &obj.id).expect("object").inputs,
            props(&[("n", "4999")])
        );
    }

    #[tokio::test]
    async fn clouds_sharing_a_file_see_each_others_changes() {
        // Two handles on one file stand for two keel processes.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cloud.json");
        let (a, b) = (persistent(&path), persistent(&path));
        let (pa, pb) = (a.provider("aws"), b.provider("aws"));
        let t = ty();
        let inputs = PropertyMap::new();
        let x = pa.create(req(&urn("x"), &t, "", &inputs)).await.expect("x");
        let y = pb.create(req(&urn("y"), &t, "", &inputs)).await.expect("y");
        let z = pa.create(req(&urn("z"), &t, "", &inputs)).await.expect("z");
        pb.delete(req(&urn("x"), &t, &x.id, &inputs))
            .await
            .expect("delete x");
        let ids = |c: &SimCloud| c.objects().into_iter().map(|o| o.id).collect::<Vec<_>>();
        let mut both = vec![y.id.clone(), z.id.clone()];
        both.sort();
        assert_eq!(ids(&a), both);
        assert_eq!(ids(&b), both);
        let fresh = SimCloud::load(&path, SimConfig::default()).expect("load");
        assert_eq!(ids(&fresh), both);

        // One handle compacts (rewrites the file); the other notices the
        // new file and reads it whole.
        a.save(&path).expect("rewrite");
        let w = pb.create(req(&urn("w"), &t, "", &inputs)).await.expect("w");
        assert!(a.object_of(TY, &w.id).is_some());
        assert_eq!(ids(&a).len(), 3);
        assert_eq!(
            ids(&SimCloud::load(&path, SimConfig::default()).expect("load")).len(),
            3
        );
    }

    #[tokio::test]
    async fn whole_json_files_are_read_and_rewritten_as_a_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cloud.json");
        let legacy = serde_json::json!({
            "objects": [{
                "id": "old-1", "ty": TY, "name": "old", "urn": urn("old").as_str(),
                "inputs": {"index": "a"}, "outputs": {"index": "a"}
            }],
            "generations": {urn("old").as_str(): 1}
        });
        std::fs::write(&path, serde_json::to_vec_pretty(&legacy).expect("json")).expect("write");
        let cloud = persistent(&path);
        assert_eq!(cloud.objects().len(), 1);
        let p = cloud.provider("aws");
        p.create(req(&urn("new"), &ty(), "", &PropertyMap::new()))
            .await
            .expect("create");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with("{\"keelSimCloud\":1}\n"), "{text}");
        let again = SimCloud::load(&path, SimConfig::default()).expect("load");
        assert_eq!(again.objects().len(), 2);
        assert!(again.object_of(TY, "old-1").is_some());
    }

    #[tokio::test]
    async fn a_torn_last_record_is_no_change_and_a_damaged_one_is_refused() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cloud.json");
        let cloud = persistent(&path);
        let p = cloud.provider("aws");
        p.create(req(&urn("a"), &ty(), "", &PropertyMap::new()))
            .await
            .expect("create");
        let good = std::fs::read(&path).expect("read");
        // A writer killed in the middle of its record.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        f.write_all(b"{\"put\":{\"object\":{\"id\":\"half")
            .expect("write");
        drop(f);
        let next = persistent(&path);
        assert_eq!(next.objects().len(), 1);
        next.provider("aws")
            .create(req(&urn("b"), &ty(), "", &PropertyMap::new()))
            .await
            .expect("create after a torn record");
        assert_eq!(
            SimCloud::load(&path, SimConfig::default())
                .expect("load")
                .objects()
                .len(),
            2
        );
        // A damaged record followed by others is refused with its offset.
        let mut bad = good.clone();
        bad.extend_from_slice(b"garbage\n");
        bad.extend_from_slice(&good[good.iter().position(|b| *b == b'\n').expect("header") + 1..]);
        std::fs::write(&path, &bad).expect("write");
        let err = SimCloud::load(&path, SimConfig::default()).expect_err("damaged");
        assert!(
            matches!(err, CloudFileError::Corrupt { offset, .. } if offset == good.len() as u64),
            "{err}"
        );
        assert!(err.to_string().contains("cloud.json"), "{err}");
    }

    #[tokio::test]
    async fn secrets_are_encrypted_in_the_file_and_read_back() {
        use crate::model::property::Secret;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cloud.json");
        let (u, t) = (urn("db"), ty());
        let mut inputs = props(&[("engine", "pg")]);
        let secret = PropertyValue::Secret(Secret::plaintext(PropertyValue::String(
            "hunter2-plain".to_owned(),
        )));
        inputs.insert("password".to_owned(), secret.clone());

        // Without the stack's secrets nothing is written.
        let bare = persistent(&path);
        let err = bare
            .provider("aws")
            .create(req(&u, &t, "", &inputs))
            .await
            .expect_err("no crypter");
        assert!(err.to_string().contains("KEEL_CONFIG_PASSPHRASE"), "{err}");
        assert!(bare.objects().is_empty());

        let crypter =
            Arc::new(Crypter::for_stack(&Default::default(), Some("pw")).expect("crypter"));
        let cloud = persistent(&path);
        cloud.set_secrets(crypter.clone());
        let created = cloud
            .provider("aws")
            .create(req(&u, &t, "", &inputs))
            .await
            .expect("create");
        cloud.save(&path).expect("rewrite");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(!text.contains("hunter2-plain"), "{text}");
        assert!(text.contains("ciphertext"), "{text}");

        // Another process of the stack reads the value back.
        let other = SimCloud::load(&path, SimConfig::default()).expect("load");
        other.set_secrets(crypter);
        let read = other
            .provider("aws")
            .read(req(&u, &t, &created.id, &inputs))
            .await
            .expect("read")
            .expect("exists");
        assert_eq!(read.inputs.get("password"), Some(&secret));
        assert_eq!(read, created);
        // Without the key, a read fails rather than leak or lose it.
        let stranger = SimCloud::load(&path, SimConfig::default()).expect("load");
        assert!(stranger
            .provider("aws")
            .read(req(&u, &t, &created.id, &inputs))
            .await
            .is_err());
    }
}
