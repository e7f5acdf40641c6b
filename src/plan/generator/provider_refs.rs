//! The providers of registrations: the default provider a registration
//! asks for (planned on first use), the IDs of new provider resources, and
//! what a change of a resource's provider reference, or of a provider's own
//! configuration, means.

use crate::model::urn::UNKNOWN_ID;
use crate::model::{PropertyMap, ProviderRef, State, TypeToken, Urn};

use super::{provider_urn, ConfigDiff, PlanError, Planner, Prepared, ProviderChange, Result};
use crate::plan::providers::{config_of, DefaultProviderRequest};
use crate::plan::step::lock;

impl Planner {
    /// The ID of a new provider resource: unknown in a preview, else the
    /// next one of the operation's [`PlanOptions::ids`](super::PlanOptions::ids).
    pub(super) fn next_provider_id(&self, urn: &Urn) -> String {
        if self.opts.preview {
            return UNKNOWN_ID.to_owned();
        }
        self.opts.ids.next_id(urn)
    }

    /// Plans the default provider a registration asks for (its package,
    /// plugin version and download URL), returning its reference, the
    /// first time its registration (to decide before the resource's), and
    /// the key it is known by (that of the declared parameterization,
    /// when there is one): what a registration using it looks its decided
    /// reference up by.
    pub(super) fn default_provider(
        &mut self,
        request: &DefaultProviderRequest,
    ) -> Result<(ProviderRef, Option<Box<Prepared>>, String)> {
        // A package the program declares a parameterization of a base
        // plugin is requested as one.
        let declared;
        let request = match self.opts.packages.iter().find(|d| {
            d.parameterization
                .as_ref()
                .is_some_and(|p| p.name == request.package())
        }) {
            Some(d) => {
                declared = request.clone().declared(d).map_err(|source| {
                    PlanError::BadDeclaredVersion {
                        package: request.package().to_owned(),
                        source,
                    }
                })?;
                &declared
            }
            None => request,
        };
        let key = request.key();
        if let Some(r) = self.default_providers.get(&*key) {
            return Ok((r.clone(), None, key.into_owned()));
        }
        let key = key.into_owned();
        let name = request.name();
        let ty =
            TypeToken::provider_for(request.package()).map_err(|source| PlanError::BadUrn {
                name: name.clone(),
                ty: format!("pulumi:providers:{}", request.package()),
                source,
            })?;
        let urn = self.urn_for(&ty, &name, None)?;
        if self.registered.contains(&urn) {
            return Err(PlanError::DuplicateUrn { urn });
        }
        let old = self
            .live
            .get(&urn)
            .copied()
            .filter(|i| !self.claimed.contains_key(i));
        let mut new = State::new(urn.clone(), ty, true);
        new.inputs = request.inputs(&self.opts.package_config);
        let mut config_diff = None;
        match old {
            Some(i) => {
                self.claimed.insert(i, urn.clone());
                let o = lock(&self.olds[i]).clone();
                new.id = o.id.clone();
                new.created = o.created.clone();
                new.modified = o.modified.clone();
                new.extra.clone_from(&o.extra);
                if config_of(&o.inputs) != config_of(&new.inputs) {
                    config_diff = Some(self.own_config_diff(&o, &new.inputs)?);
                }
            }
            None => new.id = self.next_provider_id(&urn),
        }
        self.registered.insert(urn.clone());
        self.provider_inputs.insert(urn.clone(), new.inputs.clone());
        let reference = ProviderRef::new(urn.clone(), new.id.clone()).map_err(|source| {
            PlanError::BadProvider {
                urn: urn.clone(),
                source,
            }
        })?;
        self.default_providers
            .insert(key.clone(), reference.clone());
        let prepared = Box::new(Prepared {
            urn,
            old: old.map(|i| self.olds[i].clone()),
            new,
            provider: None,
            default_provider: None,
            provider_change: ProviderChange::Unchanged,
            config_diff,
            replacement_inputs: None,
            ignore_warnings: Vec::new(),
            replace_paths: Vec::new(),
            default_key: None,
            old_index: old,
            in_scope: true,
            hooks: None,
            waits_for: Vec::new(),
        });
        Ok((reference, Some(prepared), key))
    }

    /// The default provider a function or remote component of a package
    /// asks for ([`Planner::default_provider`], for callers outside the
    /// planner).
    ///
    /// # Errors
    /// As [`Planner::default_provider`].
    pub(crate) fn default_provider_for(
        &mut self,
        request: &DefaultProviderRequest,
    ) -> Result<(ProviderRef, Option<Box<Prepared>>)> {
        self.default_provider(request)
            .map(|(reference, planned, _)| (reference, planned))
    }

    /// The comparison a provider resource with prior state `old` and new
    /// inputs `inputs` is decided by.
    pub(super) fn own_config_diff(&self, old: &State, inputs: &PropertyMap) -> Result<ConfigDiff> {
        let id = if old.id.is_empty() {
            UNKNOWN_ID
        } else {
            old.id.as_str()
        };
        let provider =
            ProviderRef::new(old.urn.clone(), id).map_err(|source| PlanError::BadProvider {
                urn: old.urn.clone(),
                source,
            })?;
        Ok(ConfigDiff {
            provider,
            old_inputs: config_of(&old.inputs),
            old_outputs: old.outputs.clone(),
            new_inputs: config_of(inputs),
        })
    }

    /// What the change of a resource's provider reference from `old` to
    /// `new` means (Pulumi's `providerChanged`).
    pub(super) fn provider_change(&self, old: &str, new: &ProviderRef) -> ProviderChange {
        if new.is_text(old) {
            // The same provider resource (the common case, checked
            // without splitting the reference).
            return ProviderChange::Unchanged;
        }
        let Some(old_urn) = provider_urn(old) else {
            return ProviderChange::Replace;
        };
        if old_urn == new.urn().as_str()
            || self
                .matched
                .get(new.urn())
                .is_some_and(|from| from.as_str() == old_urn)
        {
            return ProviderChange::Unchanged;
        }
        let old_state = self.live.get(old_urn).map(|&i| {
            let s = lock(&self.olds[i]);
            (config_of(&s.inputs), s.outputs.clone())
        });
        match (old_state, self.provider_inputs.get(new.urn())) {
            (Some((old_inputs, old_outputs)), Some(inputs)) => ProviderChange::Config(ConfigDiff {
                provider: new.clone(),
                old_inputs,
                old_outputs,
                new_inputs: config_of(inputs),
            }),
            _ => ProviderChange::Replace,
        }
    }
}
