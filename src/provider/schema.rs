//! Schema-versioned resources (`architecture.md` §8): a provider may
//! declare, per resource type, the current version of the persisted shape
//! of its states ([`SchemaInfo`]) and migrate older states to it
//! ([`super::Provider::migrate_state`]).
//!
//! Before planning an update, a preview or a refresh, the engine calls
//! [`upgrade`]: every prior state of a versioned type whose
//! `schemaVersion` is lower than the current one is migrated in one call
//! straight to the current version (inputs and outputs together) and
//! stamped with it. A version above the current one is refused (no
//! downgrades). When anything fails, nothing is changed.

use crate::model::{PropertyMap, State, TypeToken, Urn};

use super::{ProviderError, ProviderRegistry};

/// A resource type's current persisted schema, as its provider declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchemaInfo {
    /// The current schema version; states written by a provider operation
    /// are stamped with it.
    pub version: u64,
}

/// The part of a persisted state a schema migration reshapes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SchemaState {
    /// The inputs of the last apply.
    pub inputs: PropertyMap,
    /// The outputs of the last apply.
    pub outputs: PropertyMap,
}

/// Why the prior states could not be upgraded to their types' current
/// schema versions. The operation fails before planning; nothing changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaUpgradeError {
    /// A state was written with a schema version above the current one.
    #[error("cannot use the state of {urn} (type {ty}): it has schema version {version}, above the current version {current} of provider {provider}; schema downgrades are not supported: use a provider that knows schema version {version}")]
    Downgrade {
        /// The resource.
        urn: Urn,
        /// Its type.
        ty: TypeToken,
        /// The state's schema version.
        version: u64,
        /// The provider's current version.
        current: u64,
        /// The provider reference.
        provider: String,
    },
    /// The provider's migration failed.
    #[error("cannot upgrade the state of {urn} (type {ty}) from schema version {from} to {to} with provider {provider}: {source}; nothing was changed")]
    Migrate {
        /// The resource.
        urn: Urn,
        /// Its type.
        ty: TypeToken,
        /// The state's schema version.
        from: u64,
        /// The provider's current version.
        to: u64,
        /// The provider reference.
        provider: String,
        /// The provider's error.
        source: ProviderError,
    },
}

/// Upgrades every state of `resources` whose type its provider versions
/// and whose `schemaVersion` is below the current one: one
/// [`super::Provider::migrate_state`] call per state, straight to the
/// current version, then stamped. Returns the positions of the upgraded
/// states. States without a provider reference (components, providers)
/// are left alone.
///
/// # Errors
/// [`SchemaUpgradeError`] for a state above the current version or a
/// failed migration; `resources` is then unchanged.
pub async fn upgrade(
    registry: &ProviderRegistry,
    resources: &mut [State],
) -> Result<Vec<usize>, SchemaUpgradeError> {
    let mut upgraded = Vec::new();
    // Resolved once per provider reference (a stack has few; parsing and
    // validating each state's reference again cost more than the check).
    let mut providers: std::collections::HashMap<
        &str,
        Option<std::sync::Arc<dyn super::Provider>>,
    > = std::collections::HashMap::new();
    for (i, s) in resources.iter().enumerate() {
        if !s.custom || s.ty.is_provider() {
            continue;
        }
        let provider = providers.entry(s.provider.as_str()).or_insert_with(|| {
            s.provider_ref()
                .ok()
                .flatten()
                .map(|reference| registry.get(&reference))
        });
        let Some(provider) = provider.clone() else {
            continue;
        };
        let Some(info) = provider.schema(&s.ty) else {
            continue;
        };
        if s.schema_version == info.version {
            continue;
        }
        if s.schema_version > info.version {
            return Err(SchemaUpgradeError::Downgrade {
                urn: s.urn.clone(),
                ty: s.ty.clone(),
                version: s.schema_version,
                current: info.version,
                provider: s.provider.to_string(),
            });
        }
        let prior = SchemaState {
            inputs: s.inputs.clone(),
            outputs: s.outputs.clone(),
        };
        let migrated = provider
            .migrate_state(&s.urn, &s.ty, s.schema_version, prior)
            .await
            .map_err(|source| SchemaUpgradeError::Migrate {
                urn: s.urn.clone(),
                ty: s.ty.clone(),
                from: s.schema_version,
                to: info.version,
                provider: s.provider.to_string(),
                source,
            })?;
        upgraded.push((i, info.version, migrated));
    }
    // Everything migrated: only now is anything changed.
    Ok(upgraded
        .into_iter()
        .map(|(i, version, m)| {
            let s = &mut resources[i];
            s.inputs = m.inputs;
            s.outputs = m.outputs;
            s.schema_version = version;
            i
        })
        .collect())
}

/// Stamps a state written by a provider operation with its type's current
/// schema version (when the provider versions the type).
pub fn stamp(provider: &dyn super::Provider, state: &mut State) {
    if let Some(info) = provider.schema(&state.ty) {
        state.schema_version = info.version;
    }
}
