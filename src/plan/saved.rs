//! Saved plans: `preview --save-plan FILE` records the steps planned for
//! every resource and its expected goal; `up --plan FILE` executes only
//! what the plan allows. A registration that deviates (other steps, other
//! inputs, a resource the plan does not know) fails before any provider call
//! for it, naming the resource and the difference.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::model::snapshot::SecretsProviders;
use crate::model::{PropertyMap, PropertyValue, State, Urn};
use crate::secrets::{Crypter, SecretsError};

use super::step::StepKind;

/// The format version of saved plans.
pub const PLAN_VERSION: u64 = 1;

/// What a plan expects of one resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedResource {
    /// The steps planned for it, in order.
    pub steps: Vec<StepKind>,
    /// Its type.
    #[serde(rename = "type")]
    pub ty: String,
    /// Custom or component.
    pub custom: bool,
    /// Its expected inputs (unknown values match anything).
    pub inputs: PropertyMap,
    /// Its parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Urn>,
    /// Its dependencies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<Urn>,
    /// Whether it is protected.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protect: bool,
}

/// A saved plan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SavedPlan {
    /// The format version.
    pub version: u64,
    /// The resources the program registers, with their planned steps.
    pub resources: BTreeMap<Urn, PlannedResource>,
    /// The resources the plan deletes.
    pub deletes: BTreeSet<Urn>,
    /// The secrets provider that encrypted the plan's secrets (the stack's,
    /// or the one the stack gets): a plan file never holds a plaintext
    /// secret.
    #[serde(
        default,
        rename = "secretsProviders",
        skip_serializing_if = "Option::is_none"
    )]
    pub secrets_providers: Option<SecretsProviders>,
}

/// Why a plan could not be read or was not followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanFileError {
    /// The plan file is not a plan.
    #[error("the plan file is invalid: {0}")]
    Invalid(String),
    /// The plan has another format version.
    #[error("the plan has format version {0}; keel reads version {PLAN_VERSION}: run `keel preview --save-plan` again")]
    Version(u64),
}

impl SavedPlan {
    /// A new empty plan.
    pub fn new() -> Self {
        Self {
            version: PLAN_VERSION,
            ..Self::default()
        }
    }

    /// Reads a plan from JSON.
    ///
    /// # Errors
    /// [`PlanFileError`] for malformed JSON or another version.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, PlanFileError> {
        let plan: Self =
            serde_json::from_slice(bytes).map_err(|e| PlanFileError::Invalid(e.to_string()))?;
        if plan.version != PLAN_VERSION {
            return Err(PlanFileError::Version(plan.version));
        }
        Ok(plan)
    }

    /// The plan as indented JSON.
    pub fn to_vec_pretty(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// The plan as indented JSON with every secret encrypted by `crypter`,
    /// whose provider the plan names.
    ///
    /// # Errors
    /// [`SecretsError::NoProvider`] (or another provider's refusal) when the
    /// plan holds secrets and `crypter` cannot encrypt them: nothing to
    /// write then.
    pub fn to_vec_encrypted(&self, crypter: &Crypter) -> Result<Vec<u8>, SecretsError> {
        let mut plan = self.clone();
        if self.has_secrets() {
            if let Some(m) = crypter.manager() {
                plan.secrets_providers = Some(SecretsProviders {
                    ty: m.provider_type().to_owned(),
                    state: m.state_json(),
                    ..SecretsProviders::default()
                });
            }
        }
        let mut v = serde_json::to_value(&plan).map_err(SecretsError::NotJson)?;
        crypter.encrypt_json(&mut v)?;
        serde_json::to_vec_pretty(&v).map_err(SecretsError::NotJson)
    }

    /// Decrypts the plan's secrets with its provider and `passphrase`.
    ///
    /// # Errors
    /// [`SecretsError`]: no or wrong passphrase, a provider keel cannot use.
    pub fn decrypt(&mut self, passphrase: Option<&str>) -> Result<(), SecretsError> {
        let Some(providers) = &self.secrets_providers else {
            return Ok(());
        };
        let crypter = Crypter::for_stack(providers, passphrase)?;
        let mut values: Vec<&mut PropertyValue> = self
            .resources
            .values_mut()
            .flat_map(|r| r.inputs.values_mut())
            .collect();
        crypter.decrypt_values(&mut values)
    }

    /// Whether any planned input holds a secret.
    fn has_secrets(&self) -> bool {
        fn secret(v: &PropertyValue) -> bool {
            match v {
                PropertyValue::Secret(_) => true,
                PropertyValue::Array(a) => a.iter().any(secret),
                PropertyValue::Object(m) => m.values().any(secret),
                PropertyValue::Output(o) => o.value.as_deref().is_some_and(secret),
                _ => false,
            }
        }
        self.resources
            .values()
            .any(|r| r.inputs.values().any(secret))
    }

    /// Records the steps planned for a resource with its goal.
    pub fn record(&mut self, goal: &State, steps: Vec<StepKind>) {
        self.resources.insert(
            goal.urn.clone(),
            PlannedResource {
                steps,
                ty: goal.ty.to_string(),
                custom: goal.custom,
                inputs: goal.inputs.clone(),
                parent: goal.parent().cloned(),
                dependencies: goal.dependencies.clone(),
                protect: goal.protect,
            },
        );
    }

    /// Checks a registration's planned steps and goal against the plan;
    /// `None` when it conforms, else the difference.
    pub fn deviation(&self, goal: &State, steps: &[StepKind]) -> Option<String> {
        let Some(p) = self.resources.get(&goal.urn) else {
            return Some(
                "the plan does not have this resource (it was not in the previewed program)".into(),
            );
        };
        if p.steps != steps {
            return Some(format!(
                "the plan has steps {:?}, the program now needs {:?}",
                names(&p.steps),
                names(steps)
            ));
        }
        if p.ty != goal.ty.as_str() || p.custom != goal.custom {
            return Some(format!(
                "the plan has type `{}`, the program `{}`",
                p.ty, goal.ty
            ));
        }
        if p.protect != goal.protect {
            return Some(format!(
                "the plan has protect {}, the program {}",
                p.protect, goal.protect
            ));
        }
        if p.parent.as_ref() != goal.parent() {
            return Some(format!(
                "the plan has parent {:?}, the program {:?}",
                p.parent,
                goal.parent()
            ));
        }
        let keys: BTreeSet<&String> = p.inputs.keys().chain(goal.inputs.keys()).collect();
        for k in keys {
            let (want, got) = (p.inputs.get(k), goal.inputs.get(k));
            let fine = match (want, got) {
                (Some(w), Some(g)) => matches_planned(w, g),
                (None, None) => true,
                _ => false,
            };
            if !fine {
                return Some(format!(
                    "input `{k}` was planned as {}, the program gives {}",
                    want.map_or("absent".into(), |v| masked(v).to_string()),
                    got.map_or("absent".into(), |v| masked(v).to_string())
                ));
            }
        }
        None
    }
}

/// A value for an error message, with every secret masked.
fn masked(v: &PropertyValue) -> serde_json::Value {
    match v {
        PropertyValue::Secret(_) => "[secret]".into(),
        PropertyValue::Array(a) => a.iter().map(masked).collect(),
        PropertyValue::Object(m) => m.iter().map(|(k, v)| (k.clone(), masked(v))).collect(),
        PropertyValue::Output(o) if o.secret == Some(true) => "[secret]".into(),
        PropertyValue::Output(o) => o.value.as_deref().map_or_else(|| v.to_json(), masked),
        other => other.to_json(),
    }
}

fn names(steps: &[StepKind]) -> Vec<&'static str> {
    steps.iter().map(|s| s.as_str()).collect()
}

/// A planned value matches an actual one when equal, or when the plan did
/// not know it yet (computed during the preview).
fn matches_planned(planned: &PropertyValue, actual: &PropertyValue) -> bool {
    match (planned, actual) {
        (PropertyValue::Computed, _) => true,
        (PropertyValue::Output(o), _) if o.value.is_none() => true,
        (PropertyValue::Array(a), PropertyValue::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| matches_planned(x, y))
        }
        (PropertyValue::Object(a), PropertyValue::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, v)| b.get(k).is_some_and(|w| matches_planned(v, w)))
        }
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TypeToken;

    fn goal(size: PropertyValue) -> State {
        let ty = TypeToken::parse("a:b:C").unwrap();
        let mut s = State::new(Urn::parse("urn:pulumi:d::p::a:b:C::n").unwrap(), ty, true);
        s.inputs.insert("size".into(), size);
        s
    }

    #[test]
    fn plans_round_trip_and_detect_deviations() {
        let mut plan = SavedPlan::new();
        plan.record(&goal(PropertyValue::Computed), vec![StepKind::Create]);
        let plan = SavedPlan::from_slice(&plan.to_vec_pretty()).unwrap();
        assert_eq!(
            plan.deviation(&goal("1".into()), &[StepKind::Create]),
            None,
            "unknowns match"
        );
        assert!(plan
            .deviation(&goal("1".into()), &[StepKind::Update])
            .unwrap()
            .contains("steps"));
        let mut exact = SavedPlan::new();
        exact.record(&goal("1".into()), vec![StepKind::Create]);
        assert!(exact
            .deviation(&goal("2".into()), &[StepKind::Create])
            .unwrap()
            .contains("`size`"));
        assert!(matches!(
            SavedPlan::from_slice(br#"{"version": 9, "resources": {}, "deletes": []}"#),
            Err(PlanFileError::Version(9))
        ));
    }
}
