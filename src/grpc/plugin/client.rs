//! keel as the client of a Pulumi resource-provider plugin.
//!
//! [`PluginProvider`] implements [`Provider`] over a connected
//! `pulumirpc.ResourceProvider` client (`proto/provider.proto`), so the
//! planner, executor, journal and migrations drive a real plugin exactly as
//! they drive the simulated cloud. It behaves on the wire as Pulumi's engine
//! does (`../shared/spec/providers.md` §2-§6, §9):
//!
//! - `Handshake` is optional: `Unimplemented` (the Python dynamic and
//!   component providers) means the protocol comes from `ConfigureResponse`.
//! - `configure` sends `CheckConfig` (unimplemented: inputs unchanged), then
//!   `Configure` with `acceptSecrets`/`acceptResources`, remembering what the
//!   plugin accepts; with unknown configuration (a preview) `Configure` is
//!   not sent and every call short-circuits as Pulumi's does.
//! - Values are marshalled per call (§5 table): unknowns kept only in a
//!   preview where allowed, secrets sent plain to a plugin that did not
//!   accept them and re-marked on the way back by key, references
//!   flattened for a plugin that did not accept them.
//! - A plugin without preview support is not called for a preview
//!   create/update (its inputs are the outputs); delete is never sent in a
//!   preview.
//! - Errors name the resource and the plugin (package and version);
//!   `Internal`/`DataLoss`/`Unknown` say the object's state is unknown; an
//!   `ErrorResourceInitFailed` detail is decoded ([`InitFailure`]) into
//!   [`ProviderError::InitFailed`], carrying the object that exists so the
//!   executor records it with its `initErrors`.
//!
//! The marshalling is in free functions (sans-IO), tested without a plugin.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use prost::Message as _;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::grpc::convert::{decode_struct, encode_struct, Accepts};
use crate::grpc::pb;
use crate::grpc::pb::resource_provider_client::ResourceProviderClient;
use crate::locks::MutexExt;
use crate::model::property::{Archive, Asset, Secret, UNKNOWN_VALUE};
use crate::model::{PropertyMap, PropertyValue, TypeToken, Urn};
use crate::provider::{
    changed_keys, CallRequest, CallResult, ConstructRequest, ConstructResult, DetailedDiff,
    DetailedKind, DiffConfigRequest, DiffKind, DiffResponse, ObjectState, Provider, ProviderError,
    ResourceRequest, Result,
};

/// The largest message keel accepts from a plugin (Pulumi's 400 MiB).
pub const MAX_MESSAGE_BYTES: usize = 400 * 1024 * 1024;

/// The engine-owned key of a provider resource's inputs that never reaches
/// the plugin (spec §3).
pub const INTERNAL_KEY: &str = "__internal";

/// The unknown sentinels of every element type (spec §5); all decode as
/// [`PropertyValue::Computed`].
pub const UNKNOWN_SENTINELS: [&str; 7] = [
    UNKNOWN_VALUE,
    "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",
    "3eeb2bf0-c639-47a8-9e75-3b44932eb421",
    "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",
    "030794c1-ac77-496b-92df-f27374a8bd58",
    "e48ece36-62e2-4504-bad9-02848725956a",
    "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",
];

/// A failure to set up a plugin (before any resource is involved).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} of {plugin} failed: {message}")]
pub struct PluginError {
    /// The plugin, as [`PluginProvider::plugin_name`] names it.
    pub plugin: String,
    /// The RPC.
    pub call: &'static str,
    /// The plugin's message (gRPC status and text).
    pub message: String,
}

/// What the plugin accepts and supports: from `Handshake`, else from
/// `ConfigureResponse`; all false until either answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Protocol {
    /// The plugin answered `Handshake` (else it was unimplemented).
    pub handshake: bool,
    /// Secrets travel as signed secret objects (else as their plain values).
    pub accept_secrets: bool,
    /// Resource references travel as signed objects (else flattened).
    pub accept_resources: bool,
    /// Output values travel as signed objects (Construct/Call only; keel
    /// sends none yet).
    pub accept_outputs: bool,
    /// Create/Update may be called with `preview = true`.
    pub supports_preview: bool,
}

/// Where `configure` left the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Configured {
    /// `configure` was not called.
    No,
    /// `Configure` succeeded.
    Yes,
    /// The configuration holds unknowns (a preview): `Configure` was not
    /// sent, and calls short-circuit (spec §3 "Unknown config").
    Unknown,
}

/// A `Create`/`Update`/`Read` failure after which the object exists:
/// Pulumi's `ErrorResourceInitFailed` detail (spec §4). Pulumi saves `id`
/// and `outputs` as the new state with `reasons` as its `initErrors`.
#[derive(Debug, Clone, PartialEq)]
pub struct InitFailure {
    /// The object's ID.
    pub id: String,
    /// Its outputs.
    pub outputs: PropertyMap,
    /// Its inputs (from a Read only).
    pub inputs: Option<PropertyMap>,
    /// Why it failed to initialise.
    pub reasons: Vec<String>,
}

/// `google.rpc.Status`, the payload of a gRPC status's details.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

/// The messages of a status's details whose type name ends `name`.
fn status_details<M: prost::Message + Default>(details: &[u8], name: &str) -> Vec<M> {
    let Ok(status) = RpcStatus::decode(details) else {
        return Vec::new();
    };
    status
        .details
        .iter()
        .filter(|a| a.type_url.rsplit('/').next() == Some(name))
        .filter_map(|a| M::decode(a.value.as_slice()).ok())
        .collect()
}

/// Decodes an `ErrorResourceInitFailed` from a status's details bytes.
pub fn init_failure(details: &[u8]) -> Option<InitFailure> {
    let f: pb::ErrorResourceInitFailed =
        status_details(details, "pulumirpc.ErrorResourceInitFailed")
            .into_iter()
            .next()?;
    Some(InitFailure {
        id: f.id,
        outputs: unmarshal(f.properties, "properties", true).unwrap_or_default(),
        inputs: f
            .inputs
            .map(|i| unmarshal(Some(i), "inputs", true).unwrap_or_default()),
        reasons: f.reasons,
    })
}

/// The missing keys a `Configure` error names in its details
/// (`ConfigureErrorMissingKeys`), as `name (description)`.
pub fn missing_config_keys(details: &[u8]) -> Vec<String> {
    status_details::<pb::ConfigureErrorMissingKeys>(details, "pulumirpc.ConfigureErrorMissingKeys")
        .into_iter()
        .flat_map(|m| m.missing_keys)
        .map(|k| {
            if k.description.is_empty() {
                k.name
            } else {
                format!("{} ({})", k.name, k.description)
            }
        })
        .collect()
}

/// True when a status means "not implemented", with Pulumi's quirks for
/// `CheckConfig`/`DiffConfig` (spec §3: `Internal` from the Node.js dynamic
/// provider, `Unknown` + "Unimplemented" from kubernetes).
pub fn is_unimplemented(status: &Status, package: &str) -> bool {
    match status.code() {
        Code::Unimplemented => true,
        Code::Internal => package == "pulumi-nodejs",
        Code::Unknown => package == "kubernetes" && status.message().contains("Unimplemented"),
        _ => false,
    }
}

/// How values are sent in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marshal {
    /// Unknowns are sent (else the key or element is dropped).
    pub keep_unknowns: bool,
    /// Assets and archives that have a hash are sent as their hash only
    /// (Diff, and the old state in Update, Read and Delete).
    pub hash_only_assets: bool,
    /// What the plugin accepts.
    pub accepts: Accepts,
}

/// A property map as a wire `Struct` (spec §5).
pub fn marshal(m: &PropertyMap, how: Marshal) -> prost_types::Struct {
    if how.keep_unknowns && !how.hash_only_assets {
        encode_struct(m, how.accepts)
    } else {
        encode_struct(&prepare_map(m, how), how.accepts)
    }
}

/// `m` without unknown values: a key (or array element) whose value is
/// unknown is dropped, as Pulumi does when a call does not keep unknowns.
pub fn drop_unknowns(m: &PropertyMap) -> PropertyMap {
    prepare_map(
        m,
        Marshal {
            keep_unknowns: false,
            hash_only_assets: false,
            accepts: Accepts {
                secrets: true,
                resources: true,
            },
        },
    )
}

fn prepare_map(m: &PropertyMap, how: Marshal) -> PropertyMap {
    m.iter()
        .filter_map(|(k, v)| prepare(v, how).map(|v| (k.clone(), v)))
        .collect()
}

fn prepare(v: &PropertyValue, how: Marshal) -> Option<PropertyValue> {
    match v {
        PropertyValue::Computed if !how.keep_unknowns => None,
        PropertyValue::Output(o) if o.value.is_none() && !how.keep_unknowns => None,
        PropertyValue::Asset(a) if how.hash_only_assets && a.hash.is_some() => {
            Some(PropertyValue::Asset(Box::new(Asset {
                hash: a.hash.clone(),
                ..Asset::default()
            })))
        }
        PropertyValue::Archive(a) if how.hash_only_assets && a.hash.is_some() => {
            Some(PropertyValue::Archive(Box::new(Archive {
                hash: a.hash.clone(),
                ..Archive::default()
            })))
        }
        PropertyValue::Array(a) => Some(PropertyValue::Array(
            a.iter().filter_map(|v| prepare(v, how)).collect(),
        )),
        PropertyValue::Object(m) => Some(PropertyValue::Object(prepare_map(m, how))),
        PropertyValue::Secret(Secret::Plaintext(p)) => {
            let inner = prepare(p.value(), how)?;
            Some(PropertyValue::Secret(Secret::plaintext(inner)))
        }
        other => Some(other.clone()),
    }
}

/// Puts back the contents of assets and archives a plugin echoed as their
/// hash only (after Read), from the same hash in `sources` (Pulumi's
/// `restoreElidedAssetContents`).
pub fn restore_elided_assets(outputs: &mut PropertyMap, sources: &[&PropertyMap]) {
    let mut full = HashMap::new();
    for m in sources {
        for v in m.values() {
            collect_assets(v, &mut full);
        }
    }
    if full.is_empty() {
        return;
    }
    for v in outputs.values_mut() {
        restore_value(v, &full);
    }
}

fn collect_assets(v: &PropertyValue, full: &mut HashMap<String, PropertyValue>) {
    match v {
        PropertyValue::Asset(a) if !is_elided_asset(a) => {
            if let Some(h) = &a.hash {
                full.insert(h.clone(), v.clone());
            }
        }
        PropertyValue::Archive(a) if !is_elided_archive(a) => {
            if let Some(h) = &a.hash {
                full.insert(h.clone(), v.clone());
            }
        }
        PropertyValue::Array(a) => a.iter().for_each(|v| collect_assets(v, full)),
        PropertyValue::Object(m) => m.values().for_each(|v| collect_assets(v, full)),
        PropertyValue::Secret(Secret::Plaintext(p)) => collect_assets(p.value(), full),
        _ => {}
    }
}

fn is_elided_asset(a: &Asset) -> bool {
    a.text.is_none() && a.path.is_none() && a.uri.is_none()
}

fn is_elided_archive(a: &Archive) -> bool {
    a.assets.is_none() && a.path.is_none() && a.uri.is_none()
}

fn restore_value(v: &mut PropertyValue, full: &HashMap<String, PropertyValue>) {
    let hash = match &*v {
        PropertyValue::Asset(a) if is_elided_asset(a) => a.hash.clone(),
        PropertyValue::Archive(a) if is_elided_archive(a) => a.hash.clone(),
        _ => None,
    };
    if let Some(found) = hash.and_then(|h| full.get(&h)) {
        if std::mem::discriminant(found) == std::mem::discriminant(&*v) {
            *v = found.clone();
        }
        return;
    }
    match v {
        PropertyValue::Array(a) => a.iter_mut().for_each(|v| restore_value(v, full)),
        PropertyValue::Object(m) => m.values_mut().for_each(|v| restore_value(v, full)),
        PropertyValue::Secret(Secret::Plaintext(p)) => restore_value(p.value_mut(), full),
        _ => {}
    }
}

/// A wire `Struct` from a plugin as a property map: every unknown sentinel
/// becomes [`PropertyValue::Computed`]; unknowns are refused unless
/// `allow_unknowns` (spec §5 "unknowns back").
///
/// # Errors
/// A malformed signed value, or an unknown where none is allowed; `what`
/// names the field.
pub fn unmarshal(
    s: Option<prost_types::Struct>,
    what: &str,
    allow_unknowns: bool,
) -> std::result::Result<PropertyMap, String> {
    let mut m = decode_struct(s, what)?;
    for v in m.values_mut() {
        normalize_unknowns(v);
    }
    if !allow_unknowns {
        if let Some((k, _)) = m.iter().find(|(_, v)| v.contains_unknowns()) {
            return Err(format!("{what}.{k} is unknown outside a preview"));
        }
    }
    Ok(m)
}

fn normalize_unknowns(v: &mut PropertyValue) {
    match v {
        PropertyValue::String(s) if UNKNOWN_SENTINELS.contains(&s.as_str()) => {
            *v = PropertyValue::Computed;
        }
        PropertyValue::Array(a) => a.iter_mut().for_each(normalize_unknowns),
        PropertyValue::Object(m) => m.values_mut().for_each(normalize_unknowns),
        PropertyValue::Secret(Secret::Plaintext(p)) => normalize_unknowns(p.value_mut()),
        _ => {}
    }
}

/// Re-marks as secret every output whose key was secret in the inputs, for
/// a plugin that did not accept secrets (Pulumi's `annotateSecrets`):
/// objects are followed key by key; a secret anywhere inside a non-object
/// input makes the whole output secret.
pub fn annotate_secrets(outputs: &mut PropertyMap, inputs: &PropertyMap) {
    for (k, out) in outputs.iter_mut() {
        if let Some(input) = inputs.get(k) {
            annotate_value(out, input);
        }
    }
}

fn annotate_value(out: &mut PropertyValue, input: &PropertyValue) {
    if matches!(out, PropertyValue::Secret(_)) {
        return;
    }
    match (input, &mut *out) {
        (PropertyValue::Secret(_), _) => {
            *out = PropertyValue::Secret(Secret::plaintext(std::mem::take(out)));
        }
        (PropertyValue::Object(i), PropertyValue::Object(o)) => annotate_secrets(o, i),
        (i, _) if contains_secret(i) => {
            *out = PropertyValue::Secret(Secret::plaintext(std::mem::take(out)));
        }
        _ => {}
    }
}

fn contains_secret(v: &PropertyValue) -> bool {
    match v {
        PropertyValue::Secret(_) => true,
        PropertyValue::Output(o) => o.secret == Some(true),
        PropertyValue::Array(a) => a.iter().any(contains_secret),
        PropertyValue::Object(m) => m.values().any(contains_secret),
        _ => false,
    }
}

/// The top-level key a property path starts with (`a.b[0]` → `a`,
/// `["x.y"].z` → `x.y`, `[3]` → `[3]`).
pub fn top_level_key(path: &str) -> String {
    if let Some(rest) = path.strip_prefix("[\"") {
        if let Some(end) = rest.find("\"]") {
            return rest[..end].to_owned();
        }
    }
    if path.starts_with('[') {
        return path
            .split(']')
            .next()
            .map_or_else(String::new, |s| format!("{s}]"));
    }
    path.split(['.', '[']).next().unwrap_or(path).to_owned()
}

/// A plugin's `DiffResponse` as keel's (spec §4): replacement when
/// `replaces` is non-empty or a detailed diff kind is `*_REPLACE`;
/// `DIFF_UNKNOWN` decided by comparing old and new inputs, as Pulumi's
/// engine does, and so are the changed keys of a change whose keys the
/// plugin does not name. Detailed-diff paths give the changed and replaced
/// top-level keys, and are kept whole for `--diff` ([`DiffResponse::detailed`]).
pub fn diff_response(
    resp: &pb::DiffResponse,
    old_inputs: &PropertyMap,
    new_inputs: &PropertyMap,
) -> DiffResponse {
    use pb::diff_response::DiffChanges;
    use pb::property_diff::Kind;
    let mut replace_keys: BTreeSet<String> =
        resp.replaces.iter().map(|p| top_level_key(p)).collect();
    let mut changed: BTreeSet<String> = resp.diffs.iter().map(|p| top_level_key(p)).collect();
    if resp.has_detailed_diff {
        for (path, d) in &resp.detailed_diff {
            let key = top_level_key(path);
            if matches!(
                d.kind(),
                Kind::AddReplace | Kind::DeleteReplace | Kind::UpdateReplace
            ) {
                replace_keys.insert(key.clone());
            }
            changed.insert(key);
        }
    }
    changed.extend(replace_keys.iter().cloned());
    let by_inputs = || changed_keys(old_inputs, new_inputs, &[]);
    let some = match resp.changes() {
        DiffChanges::DiffSome => true,
        DiffChanges::DiffNone => false,
        DiffChanges::DiffUnknown => !by_inputs().is_empty(),
    };
    // A plugin that says "changed" without naming keys (the Python dynamic
    // provider): the keys are those whose inputs differ.
    if some && changed.is_empty() {
        changed = by_inputs();
    }
    let kind = if !replace_keys.is_empty() {
        DiffKind::Replace
    } else if some {
        DiffKind::Update
    } else {
        DiffKind::Same
    };
    if kind == DiffKind::Same {
        changed.clear();
    }
    let mut detailed: Vec<DetailedDiff> = if resp.has_detailed_diff && kind != DiffKind::Same {
        resp.detailed_diff
            .iter()
            .map(|(path, d)| DetailedDiff {
                path: path.clone(),
                kind: match d.kind() {
                    Kind::Add | Kind::AddReplace => DetailedKind::Add,
                    Kind::Delete | Kind::DeleteReplace => DetailedKind::Delete,
                    Kind::Update | Kind::UpdateReplace => DetailedKind::Update,
                },
                replace: matches!(
                    d.kind(),
                    Kind::AddReplace | Kind::DeleteReplace | Kind::UpdateReplace
                ),
                input_diff: d.input_diff,
            })
            .collect()
    } else {
        Vec::new()
    };
    // The wire map has no order: paths sorted, for stable output.
    detailed.sort_by(|a, b| a.path.cmp(&b.path));
    DiffResponse {
        kind,
        changed_keys: changed,
        replace_keys,
        delete_before_replace: resp.delete_before_replace,
        detailed,
    }
}

/// A provider resource's inputs without the engine-owned `__internal` key.
pub fn strip_internal(inputs: &PropertyMap) -> PropertyMap {
    let mut m = inputs.clone();
    m.remove(INTERNAL_KEY);
    m
}

/// `ConfigureRequest.variables` (deprecated but still read by old
/// plugins): `<pkg>:config:<key>` → a string (non-strings as JSON, secrets
/// unwrapped), without `version` (spec §3).
pub fn config_variables(package: &str, inputs: &PropertyMap) -> HashMap<String, String> {
    inputs
        .iter()
        .filter(|(k, _)| k.as_str() != "version" && k.as_str() != INTERNAL_KEY)
        .map(|(k, v)| {
            let v = match v {
                PropertyValue::Secret(Secret::Plaintext(p)) => p.value(),
                v => v,
            };
            let text = match v {
                PropertyValue::String(s) => s.clone(),
                v => v.to_json().to_string(),
            };
            (format!("{package}:config:{k}"), text)
        })
        .collect()
}

/// True when a provider configuration holds an unknown anywhere but in
/// `version` (Configure is then not sent).
pub fn config_has_unknowns(inputs: &PropertyMap) -> bool {
    inputs
        .iter()
        .any(|(k, v)| k != "version" && v.contains_unknowns())
}

/// A status as the message of a [`ProviderError`]: the plugin, the gRPC
/// code and text, whether the object's state is unknown (`Internal`,
/// `DataLoss`, `Unknown`: the plugin failed mid-operation, spec §4), and an
/// init failure's ID and reasons.
pub fn status_message(plugin: &str, status: &Status) -> String {
    let mut msg = format!(
        "{plugin}: {:?}: {}",
        status.code(),
        status.message().trim_end()
    );
    if let Some(f) = init_failure(status.details()) {
        msg.push_str(&format!(
            "; the object exists (id `{}`) but failed to initialise: {}",
            f.id,
            f.reasons.join("; ")
        ));
    } else if matches!(
        status.code(),
        Code::Internal | Code::DataLoss | Code::Unknown
    ) {
        msg.push_str(" (the object's state is unknown)");
    }
    msg
}

fn seconds(t: Option<std::time::Duration>) -> f64 {
    t.map_or(0.0, |d| d.as_secs_f64())
}

/// What keel reads of a package schema (JSON).
#[derive(Debug, Default)]
pub(crate) struct SchemaIndex {
    /// The functions that return a single value: those whose `outputs` is
    /// a type that is not an object with `properties` (Pulumi's
    /// `ReturnTypeSpec` with a `TypeSpec`).
    scalar_functions: BTreeSet<String>,
    /// Resource and function tokens by their spelling without the module's
    /// `/suffix` (`aws:s3:Bucket` -> `aws:s3/bucket:Bucket`), where that
    /// differs and names one token.
    canonical: HashMap<String, String>,
}

impl SchemaIndex {
    /// Reads `schema`; an unreadable schema has nothing.
    pub(crate) fn of(schema: &str) -> Self {
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(schema) else {
            return Self::default();
        };
        let section = |name: &str| {
            doc.get(name)
                .and_then(serde_json::Value::as_object)
                .into_iter()
                .flatten()
        };
        let scalar_functions = section("functions")
            .filter(|(_, f)| {
                f.get("outputs")
                    .and_then(serde_json::Value::as_object)
                    .is_some_and(|o| !o.is_empty() && !o.contains_key("properties"))
            })
            .map(|(token, _)| token.clone())
            .collect();
        let mut canonical: HashMap<String, Option<String>> = HashMap::new();
        for (token, _) in section("resources").chain(section("functions")) {
            let short = crate::provider::without_module_suffix(token);
            if short != *token {
                canonical
                    .entry(short)
                    .and_modify(|t| *t = None)
                    .or_insert_with(|| Some(token.clone()));
            }
        }
        Self {
            scalar_functions,
            canonical: canonical
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect(),
        }
    }
}

/// A Pulumi resource-provider plugin as a keel [`Provider`].
///
/// Cheap calls share one tonic channel (a clone per call); the negotiated
/// protocol is kept behind a mutex held only to copy it.
#[derive(Debug)]
pub struct PluginProvider {
    package: String,
    version: Mutex<Option<String>>,
    provider_urn: Urn,
    client: ResourceProviderClient<Channel>,
    protocol: Mutex<Protocol>,
    configured: Mutex<Configured>,
    /// What keel reads of the plugin's schema, from `GetSchema` the first
    /// time a caller asks ([`SchemaIndex::of`]).
    schema: tokio::sync::OnceCell<SchemaIndex>,
    /// The package this plugin was parameterized into (`Parameterize`):
    /// its name and version, asked for in `GetSchema`.
    subpackage: Mutex<Option<(String, String)>>,
}

impl PluginProvider {
    /// A provider for `package` over a connected channel, with no call made
    /// yet (see [`PluginProvider::connect`]). Its provider resource is the
    /// package's default provider until [`PluginProvider::with_provider_urn`]
    /// says otherwise.
    pub fn new(package: impl Into<String>, channel: Channel) -> Self {
        let package = package.into();
        let provider_urn = Urn::parse(&format!(
            "urn:pulumi:keel::keel::pulumi:providers:{package}::default"
        ))
        .unwrap_or_else(|_| {
            Urn::parse("urn:pulumi:keel::keel::pulumi:providers:unknown::default")
                .expect("a valid URN")
        });
        Self {
            package,
            version: Mutex::new(None),
            provider_urn,
            client: ResourceProviderClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            protocol: Mutex::new(Protocol::default()),
            configured: Mutex::new(Configured::No),
            schema: tokio::sync::OnceCell::new(),
            subpackage: Mutex::new(None),
        }
    }

    /// The provider resource this plugin instance configures (sent with
    /// `CheckConfig`/`DiffConfig`).
    #[must_use]
    pub fn with_provider_urn(mut self, urn: Urn) -> Self {
        self.provider_urn = urn;
        self
    }

    /// A provider for `package` after `Handshake` (optional: unimplemented
    /// is not an error) and `GetPluginInfo` (its version names the plugin
    /// in messages). `engine_address` is keel's `pulumirpc.Engine` server,
    /// when it runs one; `plugin_dir` the directory of the plugin's binary.
    ///
    /// # Errors
    /// [`PluginError`] when `Handshake` fails other than unimplemented.
    pub async fn connect(
        package: impl Into<String>,
        channel: Channel,
        engine_address: Option<&str>,
        plugin_dir: Option<&str>,
    ) -> std::result::Result<Self, PluginError> {
        let p = Self::new(package, channel);
        p.handshake(engine_address, plugin_dir).await?;
        p.plugin_info().await;
        Ok(p)
    }

    /// Sends `Handshake`; `Ok(false)` when the plugin does not implement it.
    ///
    /// # Errors
    /// [`PluginError`] for any other failure.
    pub async fn handshake(
        &self,
        engine_address: Option<&str>,
        plugin_dir: Option<&str>,
    ) -> std::result::Result<bool, PluginError> {
        let req = pb::ProviderHandshakeRequest {
            engine_address: engine_address.unwrap_or_default().to_owned(),
            root_directory: plugin_dir.map(str::to_owned),
            program_directory: plugin_dir.map(str::to_owned),
            // Only what keel implements: no URN in Configure (the trait
            // has none), no views, no refresh-before-update.
            configure_with_urn: false,
            supports_views: false,
            supports_refresh_before_update: false,
            invoke_with_preview: true,
            accepts_byte_string: false,
        };
        match self.client.clone().handshake(req).await {
            Ok(r) => {
                let r = r.into_inner();
                *self.protocol.locked() = Protocol {
                    handshake: true,
                    accept_secrets: r.accept_secrets,
                    accept_resources: r.accept_resources,
                    accept_outputs: r.accept_outputs,
                    supports_preview: true,
                };
                Ok(true)
            }
            Err(s) if s.code() == Code::Unimplemented => Ok(false),
            Err(s) => Err(self.plugin_error("Handshake", &s)),
        }
    }

    /// Asks `GetPluginInfo` for the plugin's version and remembers it;
    /// `None` when the plugin does not say.
    pub async fn plugin_info(&self) -> Option<String> {
        let v = self
            .client
            .clone()
            .get_plugin_info(())
            .await
            .ok()
            .map(|r| r.into_inner().version)
            .filter(|v| !v.is_empty());
        if v.is_some() {
            (*self.version.locked()).clone_from(&v);
        }
        v
    }

    /// The plugin as messages name it: `pulumi-resource-<pkg> v<version>`.
    pub fn plugin_name(&self) -> String {
        match &*self.version.locked() {
            Some(v) => format!("plugin pulumi-resource-{} v{v}", self.package),
            None => format!("plugin pulumi-resource-{} (version unknown)", self.package),
        }
    }

    /// The protocol negotiated so far.
    pub fn protocol(&self) -> Protocol {
        *self.protocol.locked()
    }

    /// What keel reads of the plugin's schema, asked for once (a plugin
    /// without `GetSchema` has an empty index).
    async fn schema_index(&self) -> &SchemaIndex {
        self.schema
            .get_or_init(|| async {
                let Ok(text) = self.get_schema().await else {
                    return SchemaIndex::default();
                };
                // Schemas run to tens of megabytes: parsed off the runtime.
                tokio::task::spawn_blocking(move || SchemaIndex::of(&text))
                    .await
                    .unwrap_or_default()
            })
            .await
    }

    /// Turns the plugin into the package `name` (`Parameterize` with a
    /// value, as a package declaration's `parameterization` gives it),
    /// before it is configured; its schema is then the package's.
    ///
    /// # Errors
    /// [`PluginError`] when the plugin refuses or does not implement it.
    pub async fn parameterize(
        &self,
        name: &str,
        version: &str,
        value: &[u8],
    ) -> std::result::Result<(), PluginError> {
        let req = pb::ParameterizeRequest {
            parameters: Some(pb::parameterize_request::Parameters::Value(
                pb::parameterize_request::ParametersValue {
                    name: name.to_owned(),
                    version: version.to_owned(),
                    value: value.to_vec(),
                },
            )),
        };
        let resp = self
            .client
            .clone()
            .parameterize(req)
            .await
            .map_err(|s| self.plugin_error("Parameterize", &s))?
            .into_inner();
        let made = if resp.name.is_empty() {
            (name.to_owned(), version.to_owned())
        } else {
            (resp.name, resp.version)
        };
        *self.subpackage.locked() = Some(made);
        Ok(())
    }

    /// The plugin's schema (`GetSchema`, version 0), as JSON text.
    ///
    /// # Errors
    /// [`PluginError`] when the plugin fails or does not implement it.
    pub async fn get_schema(&self) -> std::result::Result<String, PluginError> {
        let (subpackage_name, subpackage_version) =
            self.subpackage.locked().clone().unwrap_or_default();
        self.client
            .clone()
            .get_schema(pb::GetSchemaRequest {
                version: 0,
                subpackage_name,
                subpackage_version,
            })
            .await
            .map(|r| r.into_inner().schema)
            .map_err(|s| self.plugin_error("GetSchema", &s))
    }

    /// Calls a provider function (`Invoke`). Unknowns in `args` are
    /// dropped; `Ok(Err(failures))` when the plugin refused the arguments.
    /// With a plugin that did not accept secrets, every result is secret
    /// when any argument was (spec §5).
    ///
    /// # Errors
    /// [`PluginError`] when the call fails or returns unknowns.
    pub async fn invoke(
        &self,
        token: &str,
        args: &PropertyMap,
        preview: bool,
    ) -> std::result::Result<std::result::Result<PropertyMap, Vec<String>>, PluginError> {
        let proto = self.protocol();
        if *self.configured.locked() == Configured::Unknown {
            return Ok(Ok(PropertyMap::new()));
        }
        let req = pb::InvokeRequest {
            tok: token.to_owned(),
            args: Some(marshal(args, self.how(false, false))),
            preview,
        };
        let resp = self
            .client
            .clone()
            .invoke(req)
            .await
            .map_err(|s| self.plugin_error("Invoke", &s))?
            .into_inner();
        if !resp.failures.is_empty() {
            return Ok(Err(failures(&resp.failures)));
        }
        let mut ret = unmarshal(resp.r#return, "return", false).map_err(|m| PluginError {
            plugin: self.plugin_name(),
            call: "Invoke",
            message: m,
        })?;
        if !proto.accept_secrets && args.values().any(contains_secret) {
            for v in ret.values_mut() {
                if !matches!(v, PropertyValue::Secret(_)) {
                    *v = PropertyValue::Secret(Secret::plaintext(std::mem::take(v)));
                }
            }
        }
        Ok(Ok(ret))
    }

    /// Asks the plugin to stop its work in progress (`Cancel`, advisory);
    /// unimplemented counts as acknowledged.
    ///
    /// # Errors
    /// [`PluginError`] when the call fails otherwise.
    pub async fn cancel(&self) -> std::result::Result<(), PluginError> {
        match self.client.clone().cancel(()).await {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::Unimplemented => Ok(()),
            Err(s) => Err(self.plugin_error("Cancel", &s)),
        }
    }

    fn plugin_error(&self, call: &'static str, s: &Status) -> PluginError {
        PluginError {
            plugin: self.plugin_name(),
            call,
            message: format!("{:?}: {}", s.code(), s.message().trim_end()),
        }
    }

    fn failed(&self, operation: &'static str, urn: &Urn, s: &Status) -> ProviderError {
        let message = status_message(&self.plugin_name(), s);
        if matches!(operation, "create" | "update" | "read") {
            if let Some(f) = init_failure(s.details()) {
                return ProviderError::InitFailed {
                    operation,
                    urn: urn.clone(),
                    object: Box::new(ObjectState {
                        id: f.id,
                        inputs: f.inputs.unwrap_or_default(),
                        outputs: f.outputs,
                    }),
                    reasons: f.reasons,
                    message,
                };
            }
        }
        ProviderError::Failed {
            operation,
            urn: urn.clone(),
            message: status_message(&self.plugin_name(), s),
        }
    }

    fn bad_answer(&self, operation: &'static str, urn: &Urn, message: String) -> ProviderError {
        ProviderError::Failed {
            operation,
            urn: urn.clone(),
            message: format!("{}: {message}", self.plugin_name()),
        }
    }

    /// The marshalling options of a call.
    fn how(&self, keep_unknowns: bool, hash_only_assets: bool) -> Marshal {
        let p = self.protocol();
        Marshal {
            keep_unknowns,
            hash_only_assets,
            accepts: Accepts {
                secrets: p.accept_secrets,
                resources: p.accept_resources,
            },
        }
    }

    fn unknown_config(&self) -> bool {
        *self.configured.locked() == Configured::Unknown
    }

    /// The answer to a create or update the plugin is not asked: in a
    /// preview without preview support, or with unknown configuration, the
    /// inputs stand for the outputs (with unknown configuration Pulumi
    /// answers empty outputs); outside a preview, unknown configuration is
    /// an error. `None`: send it.
    fn not_sent(
        &self,
        operation: &'static str,
        req: &ResourceRequest<'_>,
        id: &str,
    ) -> Option<Result<ObjectState>> {
        let unknown = self.unknown_config();
        if req.preview && (unknown || !self.protocol().supports_preview) {
            return Some(Ok(ObjectState {
                id: id.to_owned(),
                inputs: req.inputs.clone(),
                outputs: if unknown {
                    PropertyMap::new()
                } else {
                    req.inputs.clone()
                },
            }));
        }
        if unknown {
            return Some(Err(self.bad_answer(
                operation,
                req.urn,
                "the provider's configuration is unknown outside a preview".into(),
            )));
        }
        None
    }

    /// Decodes outputs and re-marks secrets for a plugin that took them
    /// plain.
    fn outputs(
        &self,
        s: Option<prost_types::Struct>,
        inputs: &PropertyMap,
        preview: bool,
        operation: &'static str,
        urn: &Urn,
    ) -> Result<PropertyMap> {
        let mut out =
            unmarshal(s, "properties", preview).map_err(|m| self.bad_answer(operation, urn, m))?;
        if !self.protocol().accept_secrets {
            annotate_secrets(&mut out, inputs);
        }
        Ok(out)
    }
}

fn failures(f: &[pb::CheckFailure]) -> Vec<String> {
    f.iter()
        .map(|f| {
            if f.property.is_empty() {
                f.reason.clone()
            } else {
                format!("{}: {}", f.property, f.reason)
            }
        })
        .collect()
}

fn name_and_type(urn: &Urn, ty: &TypeToken) -> (String, String) {
    (urn.name().to_owned(), ty.as_str().to_owned())
}

#[async_trait]
impl Provider for PluginProvider {
    fn serving(&self) -> crate::provider::Serving {
        crate::provider::Serving::Plugin
    }

    fn package(&self) -> &str {
        &self.package
    }

    /// `CheckConfig` (unimplemented: the inputs as they are), then
    /// `Configure`, unless the configuration holds unknowns.
    async fn configure(&self, inputs: &PropertyMap) -> Result<()> {
        let urn = &self.provider_urn;
        let config = strip_internal(inputs);
        let plain = Marshal {
            keep_unknowns: true,
            hash_only_assets: false,
            accepts: Accepts {
                secrets: false,
                resources: false,
            },
        };
        let req = pb::CheckRequest {
            urn: urn.as_str().to_owned(),
            olds: Some(prost_types::Struct::default()),
            news: Some(marshal(&config, plain)),
            random_seed: Vec::new(),
            name: urn.name().to_owned(),
            r#type: format!("pulumi:providers:{}", self.package),
        };
        let checked = match self.client.clone().check_config(req).await {
            Ok(r) => {
                let r = r.into_inner();
                if !r.failures.is_empty() {
                    return Err(ProviderError::CheckFailed {
                        urn: urn.clone(),
                        failures: failures(&r.failures),
                    });
                }
                let mut checked = unmarshal(r.inputs, "inputs", true)
                    .map_err(|m| self.bad_answer("configure", urn, m))?;
                annotate_secrets(&mut checked, &config);
                match (config.get("version"), checked.get("version")) {
                    (Some(v), None) => {
                        checked.insert("version".into(), v.clone());
                    }
                    (Some(v), Some(w)) if v != w => {
                        return Err(self.bad_answer(
                            "configure",
                            urn,
                            "CheckConfig changed the provider's `version`".into(),
                        ))
                    }
                    _ => {}
                }
                checked
            }
            Err(s) if is_unimplemented(&s, &self.package) => config,
            Err(s) => return Err(self.failed("check", urn, &s)),
        };
        if config_has_unknowns(&checked) {
            *self.configured.locked() = Configured::Unknown;
            return Ok(());
        }
        let req = pb::ConfigureRequest {
            variables: config_variables(&self.package, &checked),
            args: Some(marshal(
                &checked,
                Marshal {
                    keep_unknowns: true,
                    hash_only_assets: false,
                    accepts: Accepts {
                        secrets: true,
                        resources: true,
                    },
                },
            )),
            accept_secrets: true,
            accept_resources: true,
            sends_old_inputs: true,
            sends_old_inputs_to_delete: true,
            id: None,
            urn: None,
            name: None,
            r#type: None,
        };
        let resp = self.client.clone().configure(req).await.map_err(|s| {
            let missing = missing_config_keys(s.details());
            if missing.is_empty() {
                self.failed("configure", urn, &s)
            } else {
                self.bad_answer(
                    "configure",
                    urn,
                    format!(
                        "missing required configuration keys: {}",
                        missing.join(", ")
                    ),
                )
            }
        })?;
        let resp = resp.into_inner();
        {
            let mut p = self.protocol.locked();
            if !p.handshake {
                *p = Protocol {
                    handshake: false,
                    accept_secrets: resp.accept_secrets,
                    accept_resources: resp.accept_resources,
                    accept_outputs: resp.accept_outputs,
                    supports_preview: resp.supports_preview,
                };
            }
        }
        *self.configured.locked() = Configured::Yes;
        Ok(())
    }

    async fn check(&self, req: ResourceRequest<'_>) -> Result<PropertyMap> {
        if self.unknown_config() {
            return Ok(req.inputs.clone());
        }
        let (name, ty) = name_and_type(req.urn, req.ty);
        let how = self.how(req.preview, false);
        let mut seed = vec![0u8; 32];
        let _ = getrandom::fill(&mut seed);
        let call = pb::CheckRequest {
            urn: req.urn.as_str().to_owned(),
            olds: Some(marshal(req.old_inputs.unwrap_or(&PropertyMap::new()), how)),
            news: Some(marshal(req.inputs, how)),
            random_seed: seed,
            name,
            r#type: ty,
        };
        let r = self
            .client
            .clone()
            .check(call)
            .await
            .map_err(|s| self.failed("check", req.urn, &s))?
            .into_inner();
        if !r.failures.is_empty() {
            return Err(ProviderError::CheckFailed {
                urn: req.urn.clone(),
                failures: failures(&r.failures),
            });
        }
        let mut inputs = unmarshal(r.inputs, "inputs", req.preview)
            .map_err(|m| self.bad_answer("check", req.urn, m))?;
        if !self.protocol().accept_secrets {
            annotate_secrets(&mut inputs, req.inputs);
        }
        Ok(inputs)
    }

    async fn diff(&self, req: ResourceRequest<'_>) -> Result<DiffResponse> {
        let empty = PropertyMap::new();
        let old_inputs = req.old_inputs.unwrap_or(&empty);
        if self.unknown_config() {
            // Pulumi's DiffUnavailable: assume a change.
            let changed = changed_keys(old_inputs, req.inputs, &[]);
            return Ok(DiffResponse {
                kind: DiffKind::Update,
                changed_keys: changed,
                replace_keys: BTreeSet::new(),
                delete_before_replace: false,
                detailed: Vec::new(),
            });
        }
        let (name, ty) = name_and_type(req.urn, req.ty);
        let how = self.how(req.preview, true);
        let call = pb::DiffRequest {
            id: req.id.to_owned(),
            urn: req.urn.as_str().to_owned(),
            olds: Some(marshal(req.old_outputs.unwrap_or(old_inputs), how)),
            news: Some(marshal(req.inputs, how)),
            ignore_changes: req.ignore_changes.to_vec(),
            old_inputs: Some(marshal(old_inputs, how)),
            name,
            r#type: ty,
        };
        let r = self
            .client
            .clone()
            .diff(call)
            .await
            .map_err(|s| self.failed("diff", req.urn, &s))?
            .into_inner();
        Ok(diff_response(&r, old_inputs, req.inputs))
    }

    /// `DiffConfig`; unimplemented is the trait's default (never a
    /// replace), as Pulumi's engine does.
    async fn diff_config(&self, req: DiffConfigRequest<'_>) -> Result<DiffResponse> {
        let old_inputs = strip_internal(req.old_inputs);
        let new_inputs = strip_internal(req.new_inputs);
        let plain = Marshal {
            keep_unknowns: true,
            hash_only_assets: false,
            accepts: Accepts {
                secrets: false,
                resources: false,
            },
        };
        let call = pb::DiffRequest {
            id: String::new(),
            urn: req.urn.as_str().to_owned(),
            olds: Some(marshal(&strip_internal(req.old_outputs), plain)),
            news: Some(marshal(&new_inputs, plain)),
            ignore_changes: Vec::new(),
            old_inputs: Some(marshal(&old_inputs, plain)),
            name: req.urn.name().to_owned(),
            r#type: req.urn.type_str().to_owned(),
        };
        match self.client.clone().diff_config(call).await {
            Ok(r) => Ok(diff_response(&r.into_inner(), &old_inputs, &new_inputs)),
            Err(s) if is_unimplemented(&s, &self.package) => {
                let changed = changed_keys(&old_inputs, &new_inputs, &[]);
                Ok(DiffResponse {
                    kind: if changed.is_empty() {
                        DiffKind::Same
                    } else {
                        DiffKind::Update
                    },
                    changed_keys: changed,
                    replace_keys: BTreeSet::new(),
                    delete_before_replace: false,
                    detailed: Vec::new(),
                })
            }
            Err(s) => Err(self.failed("diff", req.urn, &s)),
        }
    }

    async fn create(&self, req: ResourceRequest<'_>) -> Result<ObjectState> {
        if let Some(answer) = self.not_sent("create", &req, "") {
            return answer;
        }
        let (name, ty) = name_and_type(req.urn, req.ty);
        let call = pb::CreateRequest {
            urn: req.urn.as_str().to_owned(),
            properties: Some(marshal(req.inputs, self.how(req.preview, false))),
            timeout: seconds(req.timeout),
            preview: req.preview,
            name,
            r#type: ty,
        };
        let r = self
            .client
            .clone()
            .create(call)
            .await
            .map_err(|s| self.failed("create", req.urn, &s))?
            .into_inner();
        if r.id.is_empty() && !req.preview {
            return Err(self.bad_answer("create", req.urn, "Create returned an empty ID".into()));
        }
        let outputs = self.outputs(r.properties, req.inputs, req.preview, "create", req.urn)?;
        Ok(ObjectState {
            id: r.id,
            inputs: req.inputs.clone(),
            outputs,
        })
    }

    async fn read(&self, req: ResourceRequest<'_>) -> Result<Option<ObjectState>> {
        if self.unknown_config() {
            return Err(self.bad_answer(
                "read",
                req.urn,
                "the provider's configuration is unknown".into(),
            ));
        }
        let (name, ty) = name_and_type(req.urn, req.ty);
        let how = self.how(false, true);
        // As Pulumi: the prior state when there is one (refresh), none for an
        // import or a read of an existing object; the inputs as they are.
        let empty = PropertyMap::new();
        let sent = req.old_outputs.unwrap_or(&empty);
        // Which outputs are secret is known from the state, else the inputs.
        let state = req.old_outputs.unwrap_or(req.inputs);
        let call = pb::ReadRequest {
            id: req.id.to_owned(),
            urn: req.urn.as_str().to_owned(),
            properties: Some(marshal(sent, how)),
            inputs: Some(marshal(req.inputs, how)),
            name,
            r#type: ty,
            timeout: seconds(req.timeout),
        };
        let r = self
            .client
            .clone()
            .read(call)
            .await
            .map_err(|s| self.failed("read", req.urn, &s))?
            .into_inner();
        if r.id.is_empty() {
            return Ok(None);
        }
        let mut outputs = self.outputs(r.properties, state, false, "read", req.urn)?;
        restore_elided_assets(&mut outputs, &[state, req.inputs]);
        let inputs = match r.inputs {
            Some(i) if !i.fields.is_empty() => {
                let mut i = unmarshal(Some(i), "inputs", false)
                    .map_err(|m| self.bad_answer("read", req.urn, m))?;
                if !self.protocol().accept_secrets {
                    annotate_secrets(&mut i, req.inputs);
                }
                restore_elided_assets(&mut i, &[req.inputs, state]);
                i
            }
            _ => req.inputs.clone(),
        };
        Ok(Some(ObjectState {
            id: r.id,
            inputs,
            outputs,
        }))
    }

    async fn update(&self, req: ResourceRequest<'_>) -> Result<ObjectState> {
        if let Some(answer) = self.not_sent("update", &req, req.id) {
            return answer;
        }
        let (name, ty) = name_and_type(req.urn, req.ty);
        let empty = PropertyMap::new();
        let olds = self.how(false, true);
        let call = pb::UpdateRequest {
            id: req.id.to_owned(),
            urn: req.urn.as_str().to_owned(),
            olds: Some(marshal(req.old_outputs.unwrap_or(&empty), olds)),
            news: Some(marshal(req.inputs, self.how(req.preview, false))),
            timeout: seconds(req.timeout),
            ignore_changes: req.ignore_changes.to_vec(),
            preview: req.preview,
            old_inputs: Some(marshal(req.old_inputs.unwrap_or(&empty), olds)),
            name,
            r#type: ty,
        };
        let r = self
            .client
            .clone()
            .update(call)
            .await
            .map_err(|s| self.failed("update", req.urn, &s))?
            .into_inner();
        let outputs = self.outputs(r.properties, req.inputs, req.preview, "update", req.urn)?;
        Ok(ObjectState {
            id: req.id.to_owned(),
            inputs: req.inputs.clone(),
            outputs,
        })
    }

    async fn delete(&self, req: ResourceRequest<'_>) -> Result<()> {
        if req.preview {
            return Ok(());
        }
        if self.unknown_config() {
            return Err(self.bad_answer(
                "delete",
                req.urn,
                "the provider's configuration is unknown".into(),
            ));
        }
        let (name, ty) = name_and_type(req.urn, req.ty);
        let how = self.how(false, true);
        let call = pb::DeleteRequest {
            id: req.id.to_owned(),
            urn: req.urn.as_str().to_owned(),
            properties: Some(marshal(req.old_outputs.unwrap_or(req.inputs), how)),
            timeout: seconds(req.timeout),
            old_inputs: Some(marshal(req.inputs, how)),
            name,
            r#type: ty,
        };
        self.client
            .clone()
            .delete(call)
            .await
            .map_err(|s| self.failed("delete", req.urn, &s))?;
        Ok(())
    }

    async fn returns_scalar(&self, token: &str) -> bool {
        self.schema_index().await.scalar_functions.contains(token)
    }

    async fn schema_token(&self, token: &str) -> Option<String> {
        self.schema_index().await.canonical.get(token).cloned()
    }

    async fn invoke(&self, token: &str, args: &PropertyMap, preview: bool) -> Result<PropertyMap> {
        let call_failed = |message: String| ProviderError::Call {
            operation: "invoke",
            target: token.to_owned(),
            message,
        };
        match PluginProvider::invoke(self, token, args, preview).await {
            Ok(Ok(ret)) => Ok(ret),
            Ok(Err(failures)) => Err(call_failed(format!(
                "{}: {}",
                self.plugin_name(),
                failures.join("; ")
            ))),
            Err(e) => Err(call_failed(e.message)),
        }
    }

    async fn construct(&self, req: ConstructRequest) -> Result<ConstructResult> {
        let target = format!("{}::{}", req.ty, req.name);
        let failed = |message: String| ProviderError::Call {
            operation: "construct",
            target: target.clone(),
            message,
        };
        if self.unknown_config() {
            return Err(failed(format!(
                "{}: the provider's configuration is unknown",
                self.plugin_name()
            )));
        }
        let c = req.context;
        let how = self.how(c.dry_run, false);
        let wire = pb::ConstructRequest {
            project: c.project,
            stack: c.stack,
            config: c.config.into_iter().collect(),
            dry_run: c.dry_run,
            parallel: c.parallel,
            monitor_endpoint: c.monitor_endpoint,
            r#type: req.ty,
            name: req.name,
            parent: req.parent,
            inputs: Some(marshal(&req.inputs, how)),
            input_dependencies: req
                .input_dependencies
                .into_iter()
                .map(|(k, urns)| (k, pb::construct_request::PropertyDependencies { urns }))
                .collect(),
            protect: req.protect,
            providers: req.providers.into_iter().collect(),
            dependencies: req.dependencies,
            config_secret_keys: c.config_secret_keys,
            organization: c.organization,
            additional_secret_outputs: req.additional_secret_outputs,
            custom_timeouts: req
                .custom_timeouts
                .map(|t| pb::construct_request::CustomTimeouts {
                    create: t.create,
                    update: t.update,
                    delete: t.delete,
                    read: String::new(),
                }),
            deleted_with: req.deleted_with,
            delete_before_replace: req.delete_before_replace,
            ignore_changes: req.ignore_changes,
            replace_on_changes: req.replace_on_changes,
            retain_on_delete: req.retain_on_delete,
            accepts_output_values: false,
            resource_hooks: req.hooks.map(|mut h| {
                let mut take = |k: &str| h.remove(k).unwrap_or_default();
                pb::construct_request::ResourceHooksBinding {
                    before_create: take("before_create"),
                    after_create: take("after_create"),
                    before_update: take("before_update"),
                    after_update: take("after_update"),
                    before_delete: take("before_delete"),
                    after_delete: take("after_delete"),
                    on_error: take("on_error"),
                }
            }),
        };
        let resp = self
            .client
            .clone()
            .construct(wire)
            .await
            .map_err(|s| failed(status_message(&self.plugin_name(), &s)))?
            .into_inner();
        let mut state = unmarshal(resp.state, "state", c.dry_run)
            .map_err(|m| failed(format!("{}: {m}", self.plugin_name())))?;
        if !self.protocol().accept_secrets {
            annotate_secrets(&mut state, &req.inputs);
        }
        Ok(ConstructResult {
            urn: resp.urn,
            state,
            state_dependencies: resp
                .state_dependencies
                .into_iter()
                .map(|(k, d)| (k, d.urns))
                .collect(),
        })
    }

    async fn call(&self, req: CallRequest) -> Result<CallResult> {
        let failed = |message: String| ProviderError::Call {
            operation: "call",
            target: req.token.clone(),
            message,
        };
        if self.unknown_config() {
            return Ok(CallResult::default());
        }
        let c = req.context.clone();
        let how = self.how(c.dry_run, false);
        let wire = pb::CallRequest {
            tok: req.token.clone(),
            args: Some(marshal(&req.args, how)),
            arg_dependencies: req
                .arg_dependencies
                .clone()
                .into_iter()
                .map(|(k, urns)| (k, pb::call_request::ArgumentDependencies { urns }))
                .collect(),
            project: c.project,
            stack: c.stack,
            config: c.config.into_iter().collect(),
            config_secret_keys: c.config_secret_keys,
            dry_run: c.dry_run,
            parallel: c.parallel,
            monitor_endpoint: c.monitor_endpoint,
            organization: c.organization,
            accepts_output_values: false,
        };
        let resp = self
            .client
            .clone()
            .call(wire)
            .await
            .map_err(|s| failed(status_message(&self.plugin_name(), &s)))?
            .into_inner();
        let mut ret = unmarshal(resp.r#return, "return", c.dry_run)
            .map_err(|m| failed(format!("{}: {m}", self.plugin_name())))?;
        if !self.protocol().accept_secrets {
            annotate_secrets(&mut ret, &req.args);
        }
        Ok(CallResult {
            ret,
            return_dependencies: resp
                .return_dependencies
                .into_iter()
                .map(|(k, d)| (k, d.urns))
                .collect(),
            failures: failures(&resp.failures),
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::model::property::{SIG_KEY, SIG_SECRET};
    use prost_types::value::Kind;

    fn s(v: &str) -> PropertyValue {
        PropertyValue::String(v.to_owned())
    }

    fn secret(v: PropertyValue) -> PropertyValue {
        PropertyValue::Secret(Secret::plaintext(v))
    }

    fn map(pairs: Vec<(&str, PropertyValue)>) -> PropertyMap {
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }

    fn plain(keep_unknowns: bool) -> Marshal {
        Marshal {
            keep_unknowns,
            hash_only_assets: false,
            accepts: Accepts {
                secrets: false,
                resources: false,
            },
        }
    }

    fn string_of(v: &prost_types::Value) -> Option<&str> {
        match &v.kind {
            Some(Kind::StringValue(s)) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn unknowns_are_dropped_unless_kept() {
        let m = map(vec![
            ("a", PropertyValue::Computed),
            (
                "b",
                PropertyValue::Array(vec![s("x"), PropertyValue::Computed]),
            ),
            (
                "c",
                PropertyValue::Object(map(vec![("d", PropertyValue::Computed)])),
            ),
            ("e", secret(PropertyValue::Computed)),
            ("f", s("kept")),
        ]);
        let dropped = marshal(&m, plain(false));
        assert!(!dropped.fields.contains_key("a"));
        assert!(!dropped.fields.contains_key("e"));
        match &dropped.fields["b"].kind {
            Some(Kind::ListValue(l)) => assert_eq!(l.values.len(), 1),
            other => panic!("{other:?}"),
        }
        match &dropped.fields["c"].kind {
            Some(Kind::StructValue(s)) => assert!(s.fields.is_empty()),
            other => panic!("{other:?}"),
        }
        assert_eq!(string_of(&dropped.fields["f"]), Some("kept"));
        let kept = marshal(&m, plain(true));
        assert_eq!(string_of(&kept.fields["a"]), Some(UNKNOWN_VALUE));
        assert_eq!(string_of(&kept.fields["e"]), Some(UNKNOWN_VALUE));
    }

    #[test]
    fn secrets_go_plain_unless_accepted() {
        let m = map(vec![("pw", secret(s("hunter2")))]);
        let sent = marshal(&m, plain(false));
        assert_eq!(string_of(&sent.fields["pw"]), Some("hunter2"));
        let how = Marshal {
            keep_unknowns: false,
            hash_only_assets: false,
            accepts: Accepts {
                secrets: true,
                resources: true,
            },
        };
        let sent = marshal(&m, how);
        match &sent.fields["pw"].kind {
            Some(Kind::StructValue(st)) => {
                assert_eq!(string_of(&st.fields[SIG_KEY]), Some(SIG_SECRET));
                assert_eq!(string_of(&st.fields["value"]), Some("hunter2"));
            }
            other => panic!("{other:?}"),
        }
        // And a signed secret decodes back to a secret.
        let back = unmarshal(Some(sent), "properties", false).unwrap();
        assert_eq!(back["pw"], secret(s("hunter2")));
    }

    fn wire(pairs: Vec<(&str, Kind)>) -> prost_types::Struct {
        prost_types::Struct {
            fields: pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.into()))
                .collect(),
        }
    }

    #[test]
    fn every_unknown_sentinel_decodes_as_computed_and_is_refused_outside_a_preview() {
        for sentinel in UNKNOWN_SENTINELS {
            let st = wire(vec![(
                "k",
                Kind::ListValue(prost_types::ListValue {
                    values: vec![Kind::StringValue(sentinel.to_owned()).into()],
                }),
            )]);
            let m = unmarshal(Some(st.clone()), "properties", true).unwrap();
            assert_eq!(
                m["k"],
                PropertyValue::Array(vec![PropertyValue::Computed]),
                "{sentinel}"
            );
            let e = unmarshal(Some(st), "properties", false).unwrap_err();
            assert_eq!(e, "properties.k is unknown outside a preview");
        }
        assert_eq!(unmarshal(None, "properties", false), Ok(PropertyMap::new()));
    }

    #[test]
    fn outputs_are_re_marked_secret_by_key() {
        let inputs = map(vec![
            ("pw", secret(s("x"))),
            (
                "nested",
                PropertyValue::Object(map(vec![("inner", secret(s("y"))), ("open", s("z"))])),
            ),
            ("list", PropertyValue::Array(vec![s("a"), secret(s("b"))])),
            ("plain", s("p")),
        ]);
        let mut outputs = map(vec![
            ("pw", s("x")),
            (
                "nested",
                PropertyValue::Object(map(vec![("inner", s("y")), ("open", s("z"))])),
            ),
            ("list", PropertyValue::Array(vec![s("a"), s("b")])),
            ("plain", s("p")),
            ("new", s("n")),
        ]);
        annotate_secrets(&mut outputs, &inputs);
        assert_eq!(outputs["pw"], secret(s("x")));
        assert_eq!(
            outputs["nested"],
            PropertyValue::Object(map(vec![("inner", secret(s("y"))), ("open", s("z"))]))
        );
        // A secret inside a non-object taints the whole value.
        assert_eq!(
            outputs["list"],
            secret(PropertyValue::Array(vec![s("a"), s("b")]))
        );
        assert_eq!(outputs["plain"], s("p"));
        assert_eq!(outputs["new"], s("n"));
    }

    #[test]
    fn assets_go_as_their_hash_where_pulumi_elides_them_and_come_back_whole() {
        let full = PropertyValue::Asset(Box::new(Asset {
            hash: Some("abc".into()),
            text: Some("hello".into()),
            ..Asset::default()
        }));
        let elided = PropertyValue::Asset(Box::new(Asset {
            hash: Some("abc".into()),
            ..Asset::default()
        }));
        let no_hash = PropertyValue::Asset(Box::new(Asset {
            text: Some("t".into()),
            ..Asset::default()
        }));
        let m = map(vec![
            ("a", full.clone()),
            (
                "nested",
                PropertyValue::Object(map(vec![("b", full.clone())])),
            ),
            ("c", no_hash.clone()),
        ]);
        let mut how = plain(true);
        how.hash_only_assets = true;
        let sent = unmarshal(Some(marshal(&m, how)), "properties", true).unwrap();
        assert_eq!(sent["a"], elided);
        assert_eq!(
            sent["nested"],
            PropertyValue::Object(map(vec![("b", elided.clone())]))
        );
        assert_eq!(sent["c"], no_hash, "an asset without a hash goes whole");
        let whole = unmarshal(Some(marshal(&m, plain(true))), "properties", true).unwrap();
        assert_eq!(whole, m);

        let mut back = sent.clone();
        restore_elided_assets(&mut back, &[&m]);
        assert_eq!(back, m);
        // Another hash is left as it came.
        let mut other = map(vec![(
            "a",
            PropertyValue::Asset(Box::new(Asset {
                hash: Some("zzz".into()),
                ..Asset::default()
            })),
        )]);
        let before = other.clone();
        restore_elided_assets(&mut other, &[&m]);
        assert_eq!(other, before);
    }

    #[test]
    fn property_paths_reduce_to_top_level_keys() {
        assert_eq!(top_level_key("a"), "a");
        assert_eq!(top_level_key("a.b[0]"), "a");
        assert_eq!(top_level_key("tags[\"x\"]"), "tags");
        assert_eq!(top_level_key("[\"x.y\"].z"), "x.y");
        assert_eq!(top_level_key("[3]"), "[3]");
    }

    fn pdiff(kind: pb::property_diff::Kind) -> pb::PropertyDiff {
        pb::PropertyDiff {
            kind: kind as i32,
            input_diff: true,
        }
    }

    #[test]
    fn diff_responses_map_to_keels() {
        use pb::diff_response::DiffChanges;
        use pb::property_diff::Kind as K;
        let old = map(vec![("a", s("1")), ("b", s("1"))]);
        let new = map(vec![("a", s("2")), ("b", s("1"))]);
        let resp = |changes: DiffChanges| pb::DiffResponse {
            changes: changes as i32,
            ..Default::default()
        };

        let d = diff_response(&resp(DiffChanges::DiffNone), &old, &new);
        assert_eq!((d.kind, d.changed_keys.len()), (DiffKind::Same, 0));

        // Some, without keys: the inputs say which.
        let d = diff_response(&resp(DiffChanges::DiffSome), &old, &new);
        assert_eq!(d.kind, DiffKind::Update);
        assert_eq!(d.changed_keys, ["a".to_owned()].into());

        // Unknown: decided by the inputs.
        let d = diff_response(&resp(DiffChanges::DiffUnknown), &old, &new);
        assert_eq!(d.kind, DiffKind::Update);
        let d = diff_response(&resp(DiffChanges::DiffUnknown), &old, &old);
        assert_eq!(d.kind, DiffKind::Same);

        let mut r = resp(DiffChanges::DiffSome);
        r.replaces = vec!["b.c".into()];
        r.delete_before_replace = true;
        let d = diff_response(&r, &old, &new);
        assert_eq!(d.kind, DiffKind::Replace);
        assert_eq!(d.replace_keys, ["b".to_owned()].into());
        assert!(d.changed_keys.contains("b") && d.delete_before_replace);

        let mut r = resp(DiffChanges::DiffSome);
        r.detailed_diff = [
            ("x[0]".to_owned(), pdiff(K::UpdateReplace)),
            ("y".to_owned(), pdiff(K::Add)),
        ]
        .into();
        // Read only when hasDetailedDiff says so.
        let d = diff_response(&r, &old, &new);
        assert_eq!(d.kind, DiffKind::Update);
        assert_eq!(d.changed_keys, ["a".to_owned()].into());
        r.has_detailed_diff = true;
        let d = diff_response(&r, &old, &new);
        assert_eq!(d.kind, DiffKind::Replace);
        assert_eq!(d.replace_keys, ["x".to_owned()].into());
        assert_eq!(d.changed_keys, ["x".to_owned(), "y".to_owned()].into());
        // The paths themselves are kept for `--diff`.
        let kept: Vec<_> = d
            .detailed
            .iter()
            .map(|e| (e.path.as_str(), e.kind, e.replace))
            .collect();
        assert_eq!(
            kept,
            [
                ("x[0]", DetailedKind::Update, true),
                ("y", DetailedKind::Add, false)
            ]
        );
    }

    #[test]
    fn config_variables_are_namespaced_strings_without_version() {
        let inputs = map(vec![
            ("region", s("us-west-2")),
            ("retries", PropertyValue::Number(3.into())),
            ("token", secret(s("t0k"))),
            ("tags", PropertyValue::Object(map(vec![("a", s("b"))]))),
            ("version", s("6.0.0")),
            (INTERNAL_KEY, PropertyValue::Object(PropertyMap::new())),
        ]);
        let vars = config_variables("aws", &inputs);
        assert_eq!(vars.len(), 4, "{vars:?}");
        assert_eq!(vars["aws:config:region"], "us-west-2");
        assert_eq!(vars["aws:config:retries"], "3");
        assert_eq!(vars["aws:config:token"], "t0k");
        assert_eq!(vars["aws:config:tags"], r#"{"a":"b"}"#);
        assert!(!strip_internal(&inputs).contains_key(INTERNAL_KEY));
        assert!(!config_has_unknowns(&inputs));
        let mut unknown_version = inputs.clone();
        unknown_version.insert("version".into(), PropertyValue::Computed);
        assert!(!config_has_unknowns(&unknown_version));
        unknown_version.insert("region".into(), PropertyValue::Computed);
        assert!(config_has_unknowns(&unknown_version));
    }

    fn details<M: prost::Message>(name: &str, m: &M) -> Vec<u8> {
        RpcStatus {
            code: 2,
            message: "boom".into(),
            details: vec![prost_types::Any {
                type_url: format!("type.googleapis.com/{name}"),
                value: m.encode_to_vec(),
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn an_init_failure_is_decoded_from_the_status_details() {
        let f = pb::ErrorResourceInitFailed {
            id: "i-1".into(),
            properties: Some(wire(vec![("ip", Kind::StringValue("10.0.0.1".into()))])),
            reasons: vec!["health check failed".into()],
            inputs: None,
            refresh_before_update: false,
        };
        let bytes = details("pulumirpc.ErrorResourceInitFailed", &f);
        let got = init_failure(&bytes).expect("decoded");
        assert_eq!(got.id, "i-1");
        assert_eq!(got.outputs, map(vec![("ip", s("10.0.0.1"))]));
        assert_eq!(got.reasons, vec!["health check failed".to_owned()]);
        assert_eq!(got.inputs, None);

        let status = Status::with_details(Code::Unknown, "boom", bytes.into());
        let msg = status_message("plugin pulumi-resource-x v1.0.0", &status);
        assert!(
            msg.starts_with("plugin pulumi-resource-x v1.0.0: Unknown: boom"),
            "{msg}"
        );
        assert!(
            msg.contains("exists (id `i-1`)") && msg.contains("health check failed"),
            "{msg}"
        );
        assert!(!msg.contains("state is unknown"), "{msg}");

        assert_eq!(init_failure(&[]), None);
        assert_eq!(init_failure(b"\xff\xff"), None);
    }

    #[test]
    fn only_internal_dataloss_and_unknown_mean_an_unknown_state() {
        for (code, unknown) in [
            (Code::Internal, true),
            (Code::DataLoss, true),
            (Code::Unknown, true),
            (Code::InvalidArgument, false),
            (Code::NotFound, false),
            (Code::Unavailable, false),
        ] {
            let msg = status_message("p", &Status::new(code, "x"));
            assert_eq!(msg.contains("state is unknown"), unknown, "{code:?}: {msg}");
        }
    }

    #[test]
    fn missing_configuration_keys_are_named() {
        let m = pb::ConfigureErrorMissingKeys {
            missing_keys: vec![
                pb::configure_error_missing_keys::MissingKey {
                    name: "aws:region".into(),
                    description: "the region".into(),
                },
                pb::configure_error_missing_keys::MissingKey {
                    name: "aws:profile".into(),
                    description: String::new(),
                },
            ],
        };
        let bytes = details("pulumirpc.ConfigureErrorMissingKeys", &m);
        assert_eq!(
            missing_config_keys(&bytes),
            vec![
                "aws:region (the region)".to_owned(),
                "aws:profile".to_owned()
            ]
        );
        assert!(missing_config_keys(&[]).is_empty());
    }

    #[test]
    fn unimplemented_includes_pulumis_quirks() {
        let un = Status::new(Code::Unimplemented, "no");
        assert!(is_unimplemented(&un, "aws"));
        let internal = Status::new(Code::Internal, "x");
        assert!(is_unimplemented(&internal, "pulumi-nodejs"));
        assert!(!is_unimplemented(&internal, "aws"));
        let k8s = Status::new(Code::Unknown, "rpc error: Unimplemented");
        assert!(is_unimplemented(&k8s, "kubernetes"));
        assert!(!is_unimplemented(&k8s, "aws"));
        assert!(!is_unimplemented(
            &Status::new(Code::Unknown, "x"),
            "kubernetes"
        ));
    }

    /// An in-process plugin that records what keel sends: the wiring of
    /// the calls (which RPC, which fields) without a real plugin.
    /// A provider plugin served in process (also for `served`'s tests).
    pub(in crate::grpc::plugin) mod fake {
        use std::sync::{Arc, Mutex};

        use tonic::{Request, Response, Status};

        use super::super::*;
        use crate::grpc::pb::resource_provider_server::{ResourceProvider, ResourceProviderServer};

        #[derive(Default)]
        pub(in crate::grpc::plugin) struct Seen {
            pub calls: Vec<&'static str>,
            pub configure: Option<pb::ConfigureRequest>,
            pub check: Option<pb::CheckRequest>,
            pub creates: Vec<pb::CreateRequest>,
        }

        #[derive(Clone, Default)]
        pub(in crate::grpc::plugin) struct Fake {
            pub handshake: bool,
            /// `Call` answers with a failure quoting its arguments (an
            /// error when they have a `fail` key), as a careless plugin
            /// might; unimplemented otherwise.
            pub call_quotes: bool,
            /// `GetSchema`'s answer (unimplemented when `None`).
            pub schema: Option<String>,
            pub seen: Arc<Mutex<Seen>>,
        }

        fn unimplemented<T>() -> std::result::Result<Response<T>, Status> {
            Err(Status::unimplemented("not here"))
        }

        #[tonic::async_trait]
        impl ResourceProvider for Fake {
            async fn handshake(
                &self,
                _r: Request<pb::ProviderHandshakeRequest>,
            ) -> std::result::Result<Response<pb::ProviderHandshakeResponse>, Status> {
                self.seen.locked().calls.push("Handshake");
                if !self.handshake {
                    return unimplemented();
                }
                Ok(Response::new(pb::ProviderHandshakeResponse {
                    accept_secrets: true,
                    accept_resources: true,
                    ..Default::default()
                }))
            }
            async fn get_schema(
                &self,
                _r: Request<pb::GetSchemaRequest>,
            ) -> std::result::Result<Response<pb::GetSchemaResponse>, Status> {
                self.seen.locked().calls.push("GetSchema");
                match &self.schema {
                    Some(schema) => Ok(Response::new(pb::GetSchemaResponse {
                        schema: schema.clone(),
                    })),
                    None => unimplemented(),
                }
            }
            async fn parameterize(
                &self,
                r: Request<pb::ParameterizeRequest>,
            ) -> std::result::Result<Response<pb::ParameterizeResponse>, Status> {
                self.seen.locked().calls.push("Parameterize");
                match r.into_inner().parameters {
                    Some(pb::parameterize_request::Parameters::Value(v)) => {
                        Ok(Response::new(pb::ParameterizeResponse {
                            name: v.name,
                            version: v.version,
                        }))
                    }
                    _ => Err(Status::invalid_argument("a value is needed")),
                }
            }
            async fn check_config(
                &self,
                r: Request<pb::CheckRequest>,
            ) -> std::result::Result<Response<pb::CheckResponse>, Status> {
                self.seen.locked().calls.push("CheckConfig");
                // Answers the news without `version` (keel restores it).
                let mut news = r.into_inner().news.unwrap_or_default();
                news.fields.remove("version");
                Ok(Response::new(pb::CheckResponse {
                    inputs: Some(news),
                    failures: Vec::new(),
                }))
            }
            async fn diff_config(
                &self,
                _r: Request<pb::DiffRequest>,
            ) -> std::result::Result<Response<pb::DiffResponse>, Status> {
                unimplemented()
            }
            async fn configure(
                &self,
                r: Request<pb::ConfigureRequest>,
            ) -> std::result::Result<Response<pb::ConfigureResponse>, Status> {
                let mut seen = self.seen.locked();
                seen.calls.push("Configure");
                seen.configure = Some(r.into_inner());
                Ok(Response::new(pb::ConfigureResponse::default()))
            }
            async fn invoke(
                &self,
                r: Request<pb::InvokeRequest>,
            ) -> std::result::Result<Response<pb::InvokeResponse>, Status> {
                // Echoes its arguments; refuses a `bad` one.
                let args = r.into_inner().args.unwrap_or_default();
                let failures = if args.fields.contains_key("bad") {
                    vec![pb::CheckFailure {
                        property: "bad".into(),
                        reason: "no".into(),
                    }]
                } else {
                    Vec::new()
                };
                Ok(Response::new(pb::InvokeResponse {
                    r#return: Some(args),
                    failures,
                }))
            }
            async fn check(
                &self,
                r: Request<pb::CheckRequest>,
            ) -> std::result::Result<Response<pb::CheckResponse>, Status> {
                let r = r.into_inner();
                let news = r.news.clone();
                let mut seen = self.seen.locked();
                seen.calls.push("Check");
                seen.check = Some(r);
                Ok(Response::new(pb::CheckResponse {
                    inputs: news,
                    failures: Vec::new(),
                }))
            }
            async fn diff(
                &self,
                _r: Request<pb::DiffRequest>,
            ) -> std::result::Result<Response<pb::DiffResponse>, Status> {
                unimplemented()
            }
            async fn create(
                &self,
                r: Request<pb::CreateRequest>,
            ) -> std::result::Result<Response<pb::CreateResponse>, Status> {
                let r = r.into_inner();
                let props = r.properties.clone();
                let fail = props
                    .as_ref()
                    .is_some_and(|p| p.fields.contains_key("initfail"));
                let preview = r.preview;
                {
                    let mut seen = self.seen.locked();
                    seen.calls.push("Create");
                    seen.creates.push(r);
                }
                if fail {
                    let f = pb::ErrorResourceInitFailed {
                        id: "i-9".into(),
                        properties: props,
                        reasons: vec!["not healthy".into()],
                        ..Default::default()
                    };
                    let details = RpcStatus {
                        code: Code::Unknown as i32,
                        message: "init failed".into(),
                        details: vec![prost_types::Any {
                            type_url: "type.googleapis.com/pulumirpc.ErrorResourceInitFailed"
                                .into(),
                            value: f.encode_to_vec(),
                        }],
                    };
                    return Err(Status::with_details(
                        Code::Unknown,
                        "init failed",
                        details.encode_to_vec().into(),
                    ));
                }
                Ok(Response::new(pb::CreateResponse {
                    id: if preview {
                        String::new()
                    } else {
                        "id-1".into()
                    },
                    properties: props,
                    refresh_before_update: false,
                }))
            }
            async fn read(
                &self,
                _r: Request<pb::ReadRequest>,
            ) -> std::result::Result<Response<pb::ReadResponse>, Status> {
                unimplemented()
            }
            async fn update(
                &self,
                _r: Request<pb::UpdateRequest>,
            ) -> std::result::Result<Response<pb::UpdateResponse>, Status> {
                unimplemented()
            }
            async fn delete(
                &self,
                _r: Request<pb::DeleteRequest>,
            ) -> std::result::Result<Response<()>, Status> {
                self.seen.locked().calls.push("Delete");
                Ok(Response::new(()))
            }
            async fn cancel(&self, _r: Request<()>) -> std::result::Result<Response<()>, Status> {
                unimplemented()
            }
            async fn construct(
                &self,
                _r: Request<pb::ConstructRequest>,
            ) -> std::result::Result<Response<pb::ConstructResponse>, Status> {
                unimplemented()
            }
            async fn call(
                &self,
                r: Request<pb::CallRequest>,
            ) -> std::result::Result<Response<pb::CallResponse>, Status> {
                if !self.call_quotes {
                    return unimplemented();
                }
                let args = r.into_inner().args.unwrap_or_default();
                if args.fields.contains_key("fail") {
                    return Err(Status::invalid_argument(format!(
                        "cannot call with {args:?}"
                    )));
                }
                Ok(Response::new(pb::CallResponse {
                    failures: vec![pb::CheckFailure {
                        property: "password".into(),
                        reason: format!("too weak in {args:?}"),
                    }],
                    ..Default::default()
                }))
            }
            async fn get_plugin_info(
                &self,
                _r: Request<()>,
            ) -> std::result::Result<Response<pb::PluginInfo>, Status> {
                Ok(Response::new(pb::PluginInfo {
                    version: "1.2.3".into(),
                }))
            }
        }

        /// Serves `fake` on a free port; a channel to it.
        pub(in crate::grpc::plugin) async fn serve(fake: Fake) -> tonic::transport::Channel {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
                .await
                .unwrap();
            let address = listener.local_addr().unwrap();
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(ResourceProviderServer::new(fake))
                    .serve_with_incoming(incoming),
            );
            tonic::transport::Channel::from_shared(format!("http://{address}"))
                .unwrap()
                .connect()
                .await
                .unwrap()
        }
    }

    fn urn() -> Urn {
        Urn::parse("urn:pulumi:dev::p::fake:index:Thing::t").unwrap()
    }

    fn ty() -> TypeToken {
        TypeToken::parse("fake:index:Thing").unwrap()
    }

    #[tokio::test]
    async fn with_a_handshake_secrets_go_signed_and_previews_are_sent() {
        let f = fake::Fake {
            handshake: true,
            ..Default::default()
        };
        let seen = f.seen.clone();
        let p = PluginProvider::connect("fake", fake::serve(f).await, None, None)
            .await
            .unwrap();
        assert_eq!(p.plugin_name(), "plugin pulumi-resource-fake v1.2.3");
        let proto = p.protocol();
        assert!(proto.handshake && proto.accept_secrets && proto.supports_preview);

        let config = map(vec![
            ("version", s("1.2.3")),
            ("region", secret(s("r1"))),
            (INTERNAL_KEY, PropertyValue::Object(PropertyMap::new())),
        ]);
        p.configure(&config).await.unwrap();
        {
            let seen = seen.locked();
            assert_eq!(seen.calls, ["Handshake", "CheckConfig", "Configure"]);
            let c = seen.configure.as_ref().unwrap();
            assert!(c.accept_secrets && c.accept_resources);
            let args = c.args.as_ref().unwrap();
            // `version` restored after CheckConfig dropped it; `__internal`
            // never sent; the secret signed in `args`.
            assert_eq!(string_of(&args.fields["version"]), Some("1.2.3"));
            assert!(!args.fields.contains_key(INTERNAL_KEY));
            assert!(matches!(
                args.fields["region"].kind,
                Some(Kind::StructValue(_))
            ));
            assert_eq!(c.variables.len(), 1);
            assert_eq!(c.variables["fake:config:region"], "r1");
        }

        let (urn, ty) = (urn(), ty());
        let inputs = map(vec![
            ("pw", secret(s("x"))),
            ("later", PropertyValue::Computed),
        ]);
        let mut r = ResourceRequest::new(&urn, &ty, "", &inputs);
        r.preview = true;
        let checked = p.check(r).await.unwrap();
        assert_eq!(checked, inputs);
        {
            let seen = seen.locked();
            let c = seen.check.as_ref().unwrap();
            // `olds` is `{}`, never absent; the secret is signed; the
            // unknown kept in a preview.
            assert_eq!(c.olds, Some(prost_types::Struct::default()));
            let news = c.news.as_ref().unwrap();
            assert!(matches!(news.fields["pw"].kind, Some(Kind::StructValue(_))));
            assert_eq!(string_of(&news.fields["later"]), Some(UNKNOWN_VALUE));
            assert_eq!(c.random_seed.len(), 32);
        }

        let mut r = ResourceRequest::new(&urn, &ty, "", &inputs);
        r.preview = true;
        let preview = p.create(r).await.unwrap();
        assert_eq!(preview.outputs["later"], PropertyValue::Computed);

        let known = map(vec![("pw", secret(s("x")))]);
        let mut r = ResourceRequest::new(&urn, &ty, "", &known);
        r.timeout = Some(std::time::Duration::from_secs(90));
        let created = p.create(r).await.unwrap();
        assert_eq!(created.id, "id-1");
        assert_eq!(created.outputs, known);
        {
            let seen = seen.locked();
            let (pre, real) = (&seen.creates[0], &seen.creates[1]);
            assert!(pre.preview && !real.preview);
            assert_eq!(real.timeout, 90.0);
            assert_eq!(
                (real.name.as_str(), real.r#type.as_str()),
                ("t", "fake:index:Thing")
            );
        }

        let mut r = ResourceRequest::new(&urn, &ty, "id-1", &known);
        r.preview = true;
        p.delete(r).await.unwrap();
        assert!(
            !seen.locked().calls.contains(&"Delete"),
            "a preview delete was sent"
        );
        p.delete(ResourceRequest::new(&urn, &ty, "id-1", &known))
            .await
            .unwrap();
        assert!(seen.locked().calls.contains(&"Delete"));
    }

    #[tokio::test]
    async fn an_init_failure_carries_the_object_that_exists() {
        let f = fake::Fake::default();
        let p = PluginProvider::connect("fake", fake::serve(f).await, None, None)
            .await
            .unwrap();
        p.configure(&PropertyMap::new()).await.unwrap();
        let (urn, ty) = (urn(), ty());
        let inputs = map(vec![("initfail", s("yes"))]);
        let e = p
            .create(ResourceRequest::new(&urn, &ty, "", &inputs))
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains(urn.as_str()), "{text}");
        assert!(
            text.contains("plugin pulumi-resource-fake v1.2.3"),
            "{text}"
        );
        assert!(
            text.contains("exists (id `i-9`)") && text.contains("not healthy"),
            "{text}"
        );
        let ProviderError::InitFailed {
            object, reasons, ..
        } = e
        else {
            panic!("an init failure, not {e:?}")
        };
        assert_eq!((object.id.as_str(), &object.outputs), ("i-9", &inputs));
        assert!(
            reasons.iter().any(|r| r.contains("not healthy")),
            "{reasons:?}"
        );
    }

    #[tokio::test]
    async fn invoke_results_are_secret_when_a_plain_sent_argument_was() {
        let f = fake::Fake::default();
        let p = PluginProvider::connect("fake", fake::serve(f).await, None, None)
            .await
            .unwrap();
        p.configure(&PropertyMap::new()).await.unwrap();
        assert!(!p.protocol().accept_secrets);
        let args = map(vec![
            ("key", secret(s("k"))),
            ("n", PropertyValue::Number(1.into())),
            ("later", PropertyValue::Computed),
        ]);
        let ret = p
            .invoke("fake:index:get", &args, false)
            .await
            .unwrap()
            .unwrap();
        // Sent plain (the echo is not signed), unknowns dropped; every
        // result re-marked secret.
        assert_eq!(
            ret,
            map(vec![
                ("key", secret(s("k"))),
                ("n", secret(PropertyValue::Number(1.into()))),
            ])
        );
        let refused = map(vec![("bad", s("x"))]);
        assert_eq!(
            p.invoke("fake:index:get", &refused, false).await.unwrap(),
            Err(vec!["bad: no".to_owned()])
        );
        let e = p.get_schema().await.unwrap_err();
        assert_eq!(e.call, "GetSchema");
        assert!(
            e.to_string().contains("plugin pulumi-resource-fake v1.2.3"),
            "{e}"
        );
    }

    #[test]
    fn the_schema_index_knows_scalar_functions_and_canonical_tokens() {
        let schema = r#"{"name": "p", "functions": {
            "p:index:number": {"outputs": {"type": "number"}},
            "p:index:list": {"outputs": {"type": "array", "items": {"type": "boolean"}}},
            "p:index:object": {"outputs": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "p:index:nothing": {"outputs": {}},
            "p:index:none": {},
            "p:ec2/getAmi:getAmi": {}
        }, "resources": {
            "p:s3/bucket:Bucket": {},
            "p:index:Plain": {},
            "p:x/one:Twin": {},
            "p:x/two:Twin": {}
        }}"#;
        let index = SchemaIndex::of(schema);
        let found: Vec<&String> = index.scalar_functions.iter().collect();
        assert_eq!(found, ["p:index:list", "p:index:number"]);
        let canonical = |t: &str| index.canonical.get(t).map(String::as_str);
        assert_eq!(canonical("p:s3:Bucket"), Some("p:s3/bucket:Bucket"));
        assert_eq!(canonical("p:ec2:getAmi"), Some("p:ec2/getAmi:getAmi"));
        assert_eq!(canonical("p:index:Plain"), None, "already canonical");
        assert_eq!(canonical("p:x:Twin"), None, "ambiguous");
        let empty = SchemaIndex::of("not json");
        assert!(empty.scalar_functions.is_empty() && empty.canonical.is_empty());
    }

    #[tokio::test]
    async fn a_plugin_is_asked_for_its_schema_once_to_know_scalar_functions() {
        let f = fake::Fake {
            schema: Some(
                r#"{"functions": {"fake:index:count": {"outputs": {"type": "integer"}}}}"#.into(),
            ),
            ..fake::Fake::default()
        };
        let seen = f.seen.clone();
        let p = PluginProvider::connect("fake", fake::serve(f).await, None, None)
            .await
            .unwrap();
        assert!(Provider::returns_scalar(&p, "fake:index:count").await);
        assert!(!Provider::returns_scalar(&p, "fake:index:get").await);
        assert_eq!(Provider::schema_token(&p, "fake:index:count").await, None);
        let asked = seen
            .locked()
            .calls
            .iter()
            .filter(|c| **c == "GetSchema")
            .count();
        assert_eq!(asked, 1, "the schema is read once");
        // A plugin without GetSchema has no scalar functions.
        let bare =
            PluginProvider::connect("fake", fake::serve(fake::Fake::default()).await, None, None)
                .await
                .unwrap();
        assert!(!Provider::returns_scalar(&bare, "fake:index:count").await);
    }

    #[tokio::test]
    async fn unknown_configuration_skips_configure_and_short_circuits() {
        let f = fake::Fake::default();
        let seen = f.seen.clone();
        let p = PluginProvider::connect("fake", fake::serve(f).await, None, None)
            .await
            .unwrap();
        let config = map(vec![("region", PropertyValue::Computed)]);
        p.configure(&config).await.unwrap();
        let (urn, ty) = (urn(), ty());
        let inputs = map(vec![("a", s("1"))]);
        let mut r = ResourceRequest::new(&urn, &ty, "", &inputs);
        r.preview = true;
        assert_eq!(p.check(r.clone()).await.unwrap(), inputs);
        let created = p.create(r).await.unwrap();
        assert!(created.outputs.is_empty());
        assert!(p
            .create(ResourceRequest::new(&urn, &ty, "", &inputs))
            .await
            .is_err());
        assert_eq!(seen.locked().calls, ["Handshake", "CheckConfig"]);
    }
}
