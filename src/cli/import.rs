//! Checks of `keel stack import` beyond the integrity verifier: a state
//! keel would accept but could not manage or read back. Run before
//! anything is written.

use std::collections::HashMap;

use crate::model::property::{check_depth, TooDeep};
use crate::model::snapshot::Deployment;

/// Why a verified checkpoint is refused for import.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// Two live resources claim the same cloud object: deleting or
    /// replacing one would pull it from under the other.
    #[error(
        "{first} and {second} both have the ID `{id}` (same type and provider): one cloud \
         object would be managed twice; remove one of them (or mark it `delete`) and import again"
    )]
    SharedId {
        /// The earlier resource.
        first: String,
        /// The later resource.
        second: String,
        /// The ID.
        id: String,
    },
    /// A property value nests deeper than keel stores.
    #[error("{urn}: {field}: {source}")]
    TooDeep {
        /// The resource.
        urn: String,
        /// `inputs` or `outputs`.
        field: &'static str,
        /// Where.
        source: TooDeep,
    },
}

/// Fails on the first resource of `d` keel must not import.
///
/// # Errors
/// [`ImportError`] naming the resources.
pub fn check(d: &Deployment) -> Result<(), ImportError> {
    let mut ids: HashMap<(&str, &str, &str), &str> = HashMap::new();
    for r in &d.resources {
        for (field, map) in [("inputs", &r.inputs), ("outputs", &r.outputs)] {
            check_depth(map).map_err(|source| ImportError::TooDeep {
                urn: r.urn.as_str().to_owned(),
                field,
                source,
            })?;
        }
        if !r.custom || r.delete || r.id.is_empty() {
            continue;
        }
        let key = (r.ty.as_str(), r.provider.as_str(), r.id.as_str());
        if let Some(first) = ids.insert(key, r.urn.as_str()) {
            return Err(ImportError::SharedId {
                first: first.to_owned(),
                second: r.urn.as_str().to_owned(),
                id: r.id.clone(),
            });
        }
    }
    Ok(())
}
