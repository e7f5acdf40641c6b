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
//! IDs are `{name}-{8 hex}`, the hex being an FNV-1a hash of the URN and a
//! per-URN generation counter: a replacement gets a new ID, and the same
//! program run twice on fresh clouds gets the same IDs whatever the order in
//! which its resources are created.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{
    DiffKind, DiffResponse, ObjectState, Provider, ProviderError, ResourceRequest, Result,
};
use crate::model::{PropertyMap, PropertyValue, Urn};

/// The message of an injected failure.
pub const INJECTED_FAILURE: &str = "injected failure (sim)";

/// The outputs the simulated cloud computes for every object (unless an
/// input of the same name exists): `arn`, `websiteEndpoint`, `domainName`.
pub const COMPUTED_OUTPUT_KEYS: [&str; 3] = ["arn", "websiteEndpoint", "domainName"];

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
    /// Schema versions per type token (`architecture.md` §8): the
    /// provider declares them, and its migration renames keys.
    pub schemas: BTreeMap<String, SchemaDef>,
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
            schemas: BTreeMap::new(),
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

/// The cloud's mutable contents.
#[derive(Debug, Default, Serialize, Deserialize)]
struct CloudState {
    /// Objects by ID.
    objects: BTreeMap<String, SimObject>,
    /// Per-URN generation counters (how many IDs were issued per URN).
    generations: BTreeMap<String, u64>,
}

/// The persisted form of the cloud.
#[derive(Serialize)]
struct SavedCloudRef<'a> {
    objects: Vec<&'a SimObject>,
    generations: &'a BTreeMap<String, u64>,
}

/// The persisted form of the cloud, as read.
#[derive(Deserialize)]
struct SavedCloud {
    #[serde(default)]
    objects: Vec<SimObject>,
    #[serde(default)]
    generations: BTreeMap<String, u64>,
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
}

/// The simulated cloud, shared as `Arc<SimCloud>` by all its providers.
#[derive(Debug)]
pub struct SimCloud {
    config: SimConfig,
    state: Mutex<CloudState>,
    rng: Mutex<u64>,
    log: Mutex<CallLog>,
    counters: Counters,
    autosave: Mutex<Option<std::path::PathBuf>>,
    /// Serializes saves: two concurrent saves could otherwise rename in the
    /// opposite order of their snapshots and lose an object.
    saving: Mutex<()>,
    /// The current schemas (from the configuration; see
    /// [`SimCloud::set_schema`]).
    schemas: Mutex<BTreeMap<String, SchemaDef>>,
    /// Schema migrations performed, in order.
    migrations: Mutex<Vec<SimMigration>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
}

impl<'a> OpGuard<'a> {
    fn start(cloud: &'a SimCloud, kind: SimCallKind, urn: &Urn, id: &str) -> Self {
        let c = &cloud.counters;
        let now = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        c.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let guard = Self {
            cloud,
            kind,
            urn: urn.as_str().to_owned(),
            id: id.to_owned(),
        };
        cloud.record(kind, SimCallPhase::Start, &guard.urn, &guard.id);
        guard
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
            autosave: Mutex::new(None),
            saving: Mutex::new(()),
        }
    }

    /// Saves the cloud to `path` after every change (create, update,
    /// delete), so its objects survive the process being killed: the CLI's
    /// cloud and crash tests use this.
    pub fn autosave_to(&self, path: impl Into<std::path::PathBuf>) {
        *lock(&self.autosave) = Some(path.into());
    }

    /// Saves now when autosave is on (blocking I/O, off the async workers).
    fn changed(&self) -> std::io::Result<()> {
        let path = lock(&self.autosave).clone();
        match path {
            Some(p) => match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                    tokio::task::block_in_place(|| self.save(&p))
                }
                _ => self.save(&p),
            },
            None => Ok(()),
        }
    }

    /// The object a resource's URN was created as, if any.
    pub fn find_by_urn(&self, urn: &str) -> Option<SimObject> {
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

    /// The schema migrations performed so far, in order.
    pub fn schema_migrations(&self) -> Vec<SimMigration> {
        lock(&self.migrations).clone()
    }

    /// An object as the type's current schema shows it (renamed keys).
    fn current_shape(&self, o: SimObject) -> ObjectState {
        let mut found = ObjectState {
            id: o.id,
            inputs: o.inputs,
            outputs: o.outputs,
        };
        if let Some(schema) = self.schema(&o.ty) {
            schema.rename(&mut found.inputs);
            schema.rename(&mut found.outputs);
        }
        found
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

    /// All objects, sorted by ID.
    pub fn objects(&self) -> Vec<SimObject> {
        lock(&self.state).objects.values().cloned().collect()
    }

    /// The object with this ID.
    pub fn object(&self, id: &str) -> Option<SimObject> {
        lock(&self.state).objects.get(id).cloned()
    }

    /// Removes an object behind keel's back; false when there was none.
    pub fn remove_object(&self, id: &str) -> bool {
        lock(&self.state).objects.remove(id).is_some()
    }

    /// Changes a property behind keel's back (drift): sets `key` in the
    /// outputs, and in the inputs unless it is a computed output that is not
    /// an input. False when the object does not exist.
    pub fn set_property(&self, id: &str, key: &str, value: PropertyValue) -> bool {
        let mut state = lock(&self.state);
        let Some(obj) = state.objects.get_mut(id) else {
            return false;
        };
        if obj.inputs.contains_key(key) || !COMPUTED_OUTPUT_KEYS.contains(&key) {
            obj.inputs.insert(key.to_owned(), value.clone());
        }
        obj.outputs.insert(key.to_owned(), value);
        true
    }

    /// Adds (or replaces) an object that exists outside keel.
    pub fn insert_object(&self, object: SimObject) {
        lock(&self.state).objects.insert(object.id.clone(), object);
    }

    /// Writes the cloud's objects and generation counters to `path` as
    /// JSON, atomically and durably (temporary file, fsync, rename, fsync of
    /// the directory). Blocking.
    ///
    /// # Errors
    /// Any I/O error.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let _saving = lock(&self.saving);
        let json = {
            let state = lock(&self.state);
            let saved = SavedCloudRef {
                objects: state.objects.values().collect(),
                generations: &state.generations,
            };
            serde_json::to_vec_pretty(&saved).map_err(std::io::Error::other)?
        };
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(&json)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        #[cfg(unix)]
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
    }

    /// Reads a cloud saved by [`SimCloud::save`]; a missing file is an empty
    /// cloud. Blocking.
    ///
    /// # Errors
    /// I/O errors, and [`std::io::ErrorKind::InvalidData`] when the file is
    /// not a saved cloud.
    pub fn load(path: &Path, config: SimConfig) -> std::io::Result<Arc<Self>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::new(config)),
            Err(e) => return Err(e),
        };
        let saved: SavedCloud = serde_json::from_slice(&bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let state = CloudState {
            objects: saved
                .objects
                .into_iter()
                .map(|o| (o.id.clone(), o))
                .collect(),
            generations: saved.generations,
        };
        Ok(Arc::new(Self::with_state(config, state)))
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
        if !self.config.latency.is_zero() {
            tokio::time::sleep(self.config.latency).await;
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
                tokio::time::sleep(t).await;
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

    /// Stores a new object for `urn`, returning it.
    fn store_new(&self, urn: &Urn, ty: &str, inputs: &PropertyMap) -> SimObject {
        let mut state = lock(&self.state);
        let CloudState {
            objects,
            generations,
        } = &mut *state;
        let generation = generations.entry(urn.as_str().to_owned()).or_insert(0);
        let id = loop {
            let id = object_id(urn, *generation);
            *generation += 1;
            if !objects.contains_key(&id) {
                break id;
            }
        };
        let obj = SimObject {
            outputs: outputs_for(ty, &id, inputs),
            id: id.clone(),
            ty: ty.to_owned(),
            name: urn.name().to_owned(),
            urn: urn.as_str().to_owned(),
            inputs: inputs.clone(),
        };
        objects.insert(id, obj.clone());
        obj
    }

    fn diff_inputs(&self, req: &ResourceRequest<'_>) -> DiffResponse {
        let empty = PropertyMap::new();
        let old = req.old_inputs.unwrap_or(&empty);
        let new = req.inputs;
        let ignored = |k: &str| req.ignore_changes.iter().any(|i| i == k);
        let changed_keys: BTreeSet<String> = old
            .keys()
            .chain(new.keys())
            .filter(|k| !ignored(k) && old.get(*k) != new.get(*k))
            .cloned()
            .collect();
        let ty = req.ty.as_str();
        let per_type = self.config.replace_on_change_types.get(ty);
        let forces = |k: &str| {
            let in_set = |s: &BTreeSet<String>| s.contains(k) || s.contains("*");
            in_set(&self.config.replace_on_change)
                || per_type.is_some_and(in_set)
                || req.replace_on_changes.iter().any(|r| r == k || r == "*")
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
            delete_before_replace: self.config.delete_before_replace_types.contains(ty),
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
        Ok(req.inputs.clone())
    }

    async fn diff(&self, req: ResourceRequest<'_>) -> Result<DiffResponse> {
        self.cloud.counters.diffs.fetch_add(1, Ordering::SeqCst);
        Ok(self.cloud.diff_inputs(&req))
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
            return Ok(ObjectState {
                id: String::new(),
                inputs: req.inputs.clone(),
                outputs,
            });
        }
        cloud.counters.creates.fetch_add(1, Ordering::SeqCst);
        let mut guard = OpGuard::start(cloud, SimCallKind::Create, req.urn, "");
        cloud.sleep_within("create", req.urn, req.timeout).await?;
        cloud.inject("create", req.urn)?;
        let obj = cloud.store_new(req.urn, req.ty.as_str(), req.inputs);
        guard.id.clone_from(&obj.id);
        cloud
            .changed()
            .map_err(|e| cloud_io("create", req.urn, &e))?;
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
        cloud.sleep().await;
        let found = cloud.object(req.id).map(|o| cloud.current_shape(o));
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
        cloud.sleep_within("update", req.urn, req.timeout).await?;
        cloud.inject("update", req.urn)?;
        let updated = {
            let mut state = lock(&cloud.state);
            let Some(obj) = state.objects.get_mut(req.id) else {
                return Err(ProviderError::NotFound {
                    urn: req.urn.clone(),
                    id: req.id.to_owned(),
                });
            };
            obj.inputs = req.inputs.clone();
            obj.outputs = outputs_for(&obj.ty, &obj.id, req.inputs);
            ObjectState {
                id: obj.id.clone(),
                inputs: obj.inputs.clone(),
                outputs: obj.outputs.clone(),
            }
        };
        cloud
            .changed()
            .map_err(|e| cloud_io("update", req.urn, &e))?;
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
        cloud.sleep_within("delete", req.urn, req.timeout).await?;
        cloud.inject("delete", req.urn)?;
        lock(&cloud.state).objects.remove(req.id);
        cloud
            .changed()
            .map_err(|e| cloud_io("delete", req.urn, &e))?;
        drop(guard);
        Ok(())
    }

    async fn find(&self, urn: &Urn, _ty: &crate::model::TypeToken) -> Result<Option<ObjectState>> {
        Ok(self
            .cloud
            .find_by_urn(urn.as_str())
            .map(|o| self.cloud.current_shape(o)))
    }

    async fn find_all(&self, urn: &Urn, _ty: &crate::model::TypeToken) -> Result<Vec<ObjectState>> {
        Ok(self
            .cloud
            .objects()
            .into_iter()
            .filter(|o| o.urn == urn.as_str())
            .map(|o| self.cloud.current_shape(o))
            .collect())
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

fn cloud_io(operation: &'static str, urn: &Urn, e: &std::io::Error) -> ProviderError {
    ProviderError::Failed {
        operation,
        urn: urn.clone(),
        message: format!("the simulated cloud could not save its objects: {e}"),
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
        ResourceRequest {
            urn,
            ty,
            id,
            inputs,
            old_inputs: None,
            old_outputs: None,
            ignore_changes: &[],
            replace_on_changes: &[],
            timeout: None,
            preview: false,
        }
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

        async fn diff(
            p: &Arc<dyn Provider>,
            old: &PropertyMap,
            new: PropertyMap,
            rep: &[String],
        ) -> DiffResponse {
            let (u, t) = (urn("site"), ty());
            let mut r = req(&u, &t, "id", &new);
            r.old_inputs = Some(old);
            r.replace_on_changes = rep;
            p.diff(r).await.expect("diff")
        }

        let same = diff(&p, &old, old.clone(), &[]).await;
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
            &[],
        )
        .await;
        assert_eq!(upd.kind, DiffKind::Update);
        assert_eq!(
            upd.changed_keys,
            BTreeSet::from(["index".to_owned(), "tag".to_owned()])
        );
        assert!(upd.replace_keys.is_empty());

        let rep = diff(&p, &old, props(&[("index", "a"), ("bucketName", "x")]), &[]).await;
        assert_eq!(rep.kind, DiffKind::Replace);
        assert_eq!(rep.replace_keys, BTreeSet::from(["region".to_owned()]));
        assert!(rep.delete_before_replace);

        let rep = diff(
            &p,
            &old,
            props(&[("index", "a"), ("region", "us"), ("bucketName", "y")]),
            &[],
        )
        .await;
        assert_eq!(rep.kind, DiffKind::Replace);
        assert_eq!(rep.replace_keys, BTreeSet::from(["bucketName".to_owned()]));

        let rep_keys = ["index".to_owned()];
        let rep = diff(
            &p,
            &old,
            props(&[("index", "b"), ("region", "us"), ("bucketName", "x")]),
            &rep_keys,
        )
        .await;
        assert_eq!(rep.kind, DiffKind::Replace);
        assert_eq!(rep.replace_keys, BTreeSet::from(["index".to_owned()]));
        assert_eq!(cloud.counters().diffs, 5);
    }

    #[tokio::test]
    async fn ignore_changes_skips_keys() {
        let mut config = SimConfig::default();
        config.replace_on_change.insert("region".to_owned());
        let cloud = SimCloud::new(config);
        let p = cloud.provider("aws");
        let (u, t) = (urn("site"), ty());
        let old = props(&[("index", "a"), ("region", "us")]);
        let new = props(&[("index", "b"), ("region", "eu")]);
        let ignore = ["region".to_owned()];
        let mut r = req(&u, &t, "id", &new);
        r.old_inputs = Some(&old);
        r.ignore_changes = &ignore;
        let d = p.diff(r).await.expect("diff");
        assert_eq!(d.kind, DiffKind::Update);
        assert_eq!(d.changed_keys, BTreeSet::from(["index".to_owned()]));
        assert!(!d.delete_before_replace);

        let ignore = ["region".to_owned(), "index".to_owned()];
        let mut r = req(&u, &t, "id", &new);
        r.old_inputs = Some(&old);
        r.ignore_changes = &ignore;
        assert_eq!(p.diff(r).await.expect("diff").kind, DiffKind::Same);
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
        let cloud = SimCloud::new(SimConfig {
            latency: Duration::from_millis(100),
            ..SimConfig::default()
        });
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
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }
}
