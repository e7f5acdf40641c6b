//! The integrity verifier (`checkpoint.md` §4), checked on load and before
//! every save.
//!
//! One pass over the resources in order, with a map of the URNs seen so far,
//! so "appears earlier" is a lookup (or, for the target and the provider
//! reference the previous lookup found, a comparison: the maps only grow).
//! Each rule has its own typed error naming the resources involved and a
//! stable [`IntegrityError::rule`] id; when a reference is not among the
//! earlier resources the verifier tells whether it is missing altogether
//! or only comes later.

use std::collections::HashSet;

use super::fasthash::FastMap;

use super::snapshot::{Deployment, Manifest};
use super::state::{Reference, State};
use super::urn::{ProviderRef, URN_SEPARATOR};

/// A broken integrity rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntegrityError {
    /// The manifest's magic is not the SHA-256 of its version.
    #[error("the manifest's magic `{found}` does not match its version `{version}` (expected `{expected}`): the file was edited by hand or damaged")]
    BadMagic {
        /// The manifest's version.
        version: String,
        /// The magic the version calls for.
        expected: String,
        /// The magic found.
        found: String,
    },
    /// A resource has no URN.
    #[error("resource #{index} has no URN")]
    MissingUrn {
        /// Its position in the resource list.
        index: usize,
    },
    /// A resource has no type.
    #[error("resource {urn} has no type")]
    MissingType {
        /// The resource.
        urn: String,
    },
    /// `keelCategory` or `keelComposite` contradicts the Pulumi fields.
    #[error("resource {urn} says `{key}: {found}`, but its `custom`/`external` fields make it {expected}: fix or drop `{key}`")]
    CategoryMismatch {
        /// The resource.
        urn: String,
        /// The key (`keelCategory` or `keelComposite`).
        key: &'static str,
        /// The value found.
        found: String,
        /// What the Pulumi fields say.
        expected: String,
    },
    /// A component resource has an ID.
    #[error("component resource {urn} has an ID (`{id}`): only custom resources have IDs")]
    ComponentWithId {
        /// The resource.
        urn: String,
        /// The ID found.
        id: String,
    },
    /// A provider reference does not parse.
    #[error("resource {urn} has an invalid provider reference `{reference}`: {reason}")]
    BadProviderReference {
        /// The resource.
        urn: String,
        /// The reference.
        reference: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A provider reference names no provider in the snapshot.
    #[error("resource {urn} refers to unknown provider {provider}")]
    UnknownProvider {
        /// The resource.
        urn: String,
        /// The provider reference.
        provider: String,
    },
    /// A provider reference names a provider listed after the resource.
    #[error("resource {urn}'s provider {provider} comes after it")]
    ProviderAfterResource {
        /// The resource.
        urn: String,
        /// The provider reference.
        provider: String,
    },
    /// A parent is not in the snapshot.
    #[error("child resource {urn} refers to missing parent {parent}")]
    MissingParent {
        /// The child.
        urn: String,
        /// The parent's URN.
        parent: String,
    },
    /// A parent is listed after its child.
    #[error("child resource {urn}'s parent {parent} comes after it")]
    ParentAfterChild {
        /// The child.
        urn: String,
        /// The parent's URN.
        parent: String,
    },
    /// A dependency (of any kind) is not in the snapshot.
    #[error("resource {urn}'s {kind} {dependency} refers to a missing resource")]
    MissingDependency {
        /// The dependent resource.
        urn: String,
        /// The missing resource's URN.
        dependency: String,
        /// The kind of reference (`dependency`, `property dependency `k``,
        /// `deletedWith`, `replaceWith`).
        kind: String,
    },
    /// A dependency (of any kind) is listed after its dependent.
    #[error("resource {urn}'s {kind} {dependency} comes after it")]
    DependencyAfterDependent {
        /// The dependent resource.
        urn: String,
        /// The dependency's URN.
        dependency: String,
        /// The kind of reference.
        kind: String,
    },
    /// Two resources with one URN are both live (not marked `delete`).
    #[error(
        "duplicate resource {urn}: more than one resource with this URN is not marked for deletion"
    )]
    DuplicateUrn {
        /// The URN.
        urn: String,
    },
    /// A snippet has no UUID.
    #[error("snippet #{index} has no uuid")]
    MissingSnippetUuid {
        /// Its position in the snippet list.
        index: usize,
    },
    /// Two snippets share a UUID.
    #[error("duplicate snippet uuid {uuid}")]
    DuplicateSnippetUuid {
        /// The UUID.
        uuid: String,
    },
}

/// The result type of verification.
pub type Result<T, E = IntegrityError> = std::result::Result<T, E>;

impl IntegrityError {
    /// The stable id of the rule that was broken: `magic`, `identity`,
    /// `component-id`, `category`, `provider`, `parent`, `dependency`,
    /// `unique-urn` or `snippet`.
    pub fn rule(&self) -> &'static str {
        match self {
            Self::BadMagic { .. } => "magic",
            Self::MissingUrn { .. } | Self::MissingType { .. } => "identity",
            Self::ComponentWithId { .. } => "component-id",
            Self::CategoryMismatch { .. } => "category",
            Self::BadProviderReference { .. }
            | Self::UnknownProvider { .. }
            | Self::ProviderAfterResource { .. } => "provider",
            Self::MissingParent { .. } | Self::ParentAfterChild { .. } => "parent",
            Self::MissingDependency { .. } | Self::DependencyAfterDependent { .. } => "dependency",
            Self::DuplicateUrn { .. } => "unique-urn",
            Self::MissingSnippetUuid { .. } | Self::DuplicateSnippetUuid { .. } => "snippet",
        }
    }
}

/// Verifies every integrity rule of a deployment.
///
/// # Errors
/// The first broken rule, in resource order.
pub fn verify(d: &Deployment) -> Result<()> {
    verify_manifest(&d.manifest)?;
    verify_resources(&d.resources)?;
    verify_snippets(d)
}

/// `keelCategory` and `keelComposite`, when present, agree with `custom`
/// and `external`: a data source or an action is an external custom
/// entry, a resource is not external, and composite is `!custom`.
fn check_category(s: &State) -> Result<()> {
    use super::state::Category;
    let mismatch = |key, found: String, expected: &str| IntegrityError::CategoryMismatch {
        urn: s.urn.to_string(),
        key,
        found,
        expected: expected.to_owned(),
    };
    if let Some(c) = s.keel_category {
        let derived = if s.external {
            "a data source or an action (external)"
        } else {
            "a resource (not external)"
        };
        let ok = match c {
            Category::Resource => !s.external,
            Category::DataSource => s.external,
            Category::Action => s.external && s.custom,
        };
        if !ok {
            return Err(mismatch("keelCategory", c.to_string(), derived));
        }
    }
    if let Some(c) = s.keel_composite {
        // Composite is `!custom`: a mismatch is `c == custom`.
        if c == s.custom {
            let derived = if s.custom {
                "not composite (custom)"
            } else {
                "composite (a component)"
            };
            return Err(mismatch("keelComposite", c.to_string(), derived));
        }
    }
    Ok(())
}

fn verify_manifest(m: &Manifest) -> Result<()> {
    let expected = Manifest::magic_for(&m.version);
    if m.magic != expected {
        return Err(IntegrityError::BadMagic {
            version: m.version.clone(),
            expected,
            found: m.magic.clone(),
        });
    }
    Ok(())
}

/// Verifies the resource rules over states in order.
///
/// # Errors
/// The first broken rule.
pub fn verify_resources(resources: &[State]) -> Result<()> {
    // URN -> whether a live (not deleted) resource with it was seen.
    let mut seen: FastMap<&str, bool> =
        FastMap::with_capacity_and_hasher(resources.len(), Default::default());
    // Provider URN -> IDs of provider resources seen.
    let mut providers: FastMap<&str, Vec<&str>> = FastMap::default();
    // The last reference target and provider reference found: both maps
    // only grow, so what was found stays found, and neighbouring states
    // mostly share a parent and a provider (a comparison, not a hash).
    let (mut found_target, mut found_provider): (Option<&str>, Option<&str>) = (None, None);
    for (index, s) in resources.iter().enumerate() {
        if s.urn.is_empty() {
            return Err(IntegrityError::MissingUrn { index });
        }
        let urn = s.urn.as_str();
        if s.ty.is_empty() {
            return Err(IntegrityError::MissingType { urn: urn.into() });
        }
        if !s.custom && !s.id.is_empty() {
            return Err(IntegrityError::ComponentWithId {
                urn: urn.into(),
                id: s.id.clone(),
            });
        }
        check_category(s)?;
        if !s.provider.is_empty() && found_provider != Some(s.provider.as_str()) {
            check_provider(s, &providers, resources)?;
            found_provider = Some(&s.provider);
        }
        for (kind, target) in s.references() {
            if found_target == Some(target.as_str()) || seen.contains_key(target.as_str()) {
                found_target = Some(target.as_str());
                continue;
            }
            let later = resources[index..].iter().any(|r| r.urn == *target);
            return Err(match (kind, later) {
                (Reference::Parent, false) => IntegrityError::MissingParent {
                    urn: urn.into(),
                    parent: target.to_string(),
                },
                (Reference::Parent, true) => IntegrityError::ParentAfterChild {
                    urn: urn.into(),
                    parent: target.to_string(),
                },
                (kind, false) => IntegrityError::MissingDependency {
                    urn: urn.into(),
                    dependency: target.to_string(),
                    kind: kind.to_string(),
                },
                (kind, true) => IntegrityError::DependencyAfterDependent {
                    urn: urn.into(),
                    dependency: target.to_string(),
                    kind: kind.to_string(),
                },
            });
        }
        let live = seen.entry(urn).or_insert(false);
        if !s.delete {
            if *live {
                return Err(IntegrityError::DuplicateUrn { urn: urn.into() });
            }
            *live = true;
        }
        if s.ty.is_provider() {
            providers.entry(urn).or_default().push(&s.id);
        }
    }
    Ok(())
}

fn check_provider(
    s: &State,
    providers: &FastMap<&str, Vec<&str>>,
    resources: &[State],
) -> Result<()> {
    let reference = s.provider.as_str();
    // Fast path: the provider was seen; no parsing or allocation.
    if let Some((purn, pid)) = super::urn::rfind_separator(reference)
        .map(|i| (&reference[..i], &reference[i + URN_SEPARATOR.len()..]))
    {
        if providers.get(purn).is_some_and(|ids| ids.contains(&pid)) {
            return Ok(());
        }
    }
    let parsed =
        ProviderRef::parse(reference).map_err(|e| IntegrityError::BadProviderReference {
            urn: s.urn.to_string(),
            reference: reference.into(),
            reason: e.to_string(),
        })?;
    let later = resources
        .iter()
        .any(|r| r.urn == *parsed.urn() && r.id == parsed.id());
    Err(if later {
        IntegrityError::ProviderAfterResource {
            urn: s.urn.to_string(),
            provider: reference.into(),
        }
    } else {
        IntegrityError::UnknownProvider {
            urn: s.urn.to_string(),
            provider: reference.into(),
        }
    })
}

fn verify_snippets(d: &Deployment) -> Result<()> {
    let mut uuids = HashSet::with_capacity(d.snippets.len());
    for (index, snippet) in d.snippets.iter().enumerate() {
        if snippet.uuid.is_empty() {
            return Err(IntegrityError::MissingSnippetUuid { index });
        }
        if !uuids.insert(snippet.uuid.as_str()) {
            return Err(IntegrityError::DuplicateSnippetUuid {
                uuid: snippet.uuid.clone(),
            });
        }
    }
    Ok(())
}
