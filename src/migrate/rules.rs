//! Rule ids and the migration error (`migrations.md`).
//!
//! Every rejection of a component state migration carries a stable rule id
//! as data: a [`Rule`] whose [`Rule::as_str`] is the id written in `code`
//! style in `migrations.md` §2–§10. Tests and conformance vectors match on
//! the rule, never on the message; the message is for a person and names the
//! registration, the resources involved and what to do.

use std::fmt;
use std::str::FromStr;

use crate::model::Urn;

macro_rules! rules {
    ($( $(#[$meta:meta])* $variant:ident => $id:literal, )*) => {
        /// The stable id of a migration rule (`migrations.md`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Rule {
            $( $(#[$meta])* $variant, )*
        }

        impl Rule {
            /// Every rule, in the order `migrations.md` lists them.
            pub const ALL: &'static [Rule] = &[$(Rule::$variant),*];

            /// The rule id exactly as `migrations.md` writes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Rule::$variant => $id, )*
                }
            }
        }

        impl FromStr for Rule {
            type Err = UnknownRule;

            fn from_str(s: &str) -> std::result::Result<Self, UnknownRule> {
                match s {
                    $( $id => Ok(Rule::$variant), )*
                    _ => Err(UnknownRule(s.to_owned())),
                }
            }
        }
    };
}

rules! {
    /// §2: the persister declares no migration support.
    UnsupportedPersistence => "unsupported-persistence",
    /// §3, §9: a registration or read reuses a predecessor URN.
    PredecessorReused => "predecessor-reused",
    /// §3: the subtree holds a view, or a prior resource views a member.
    View => "view",
    /// §3: the registration or a subtree member was claimed by an alias.
    ClaimedByAlias => "claimed-by-alias",
    /// §3: a subtree member was already registered in this deployment.
    AlreadyRegistered => "already-registered",
    /// §4.1: a callback errored, panicked or timed out.
    CallbackFailed => "callback-failed",
    /// §4.2: successors without new state.
    SuccessorsWithoutState => "successors-without-state",
    /// §4.2: the result is not an array of well-typed resource objects.
    MalformedResult => "malformed-result",
    /// §4.2: a URN does not parse.
    InvalidUrn => "invalid-urn",
    /// §4.2: a returned resource carries `aliases`.
    AliasesInResult => "aliases-in-result",
    /// §4.2: a URN appears twice in the result.
    DuplicateResource => "duplicate-resource",
    /// §4.2: a resource's `type` differs from its URN's type.
    TypeMismatch => "type-mismatch",
    /// §4.2: an empty successor key or value.
    EmptySuccessor => "empty-successor",
    /// §4.2: a successor key is not in the callback's input.
    SuccessorForUnknown => "successor-for-unknown",
    /// §4.2, §4.4: a URN is both returned and mapped.
    RetainedAndMapped => "retained-and-mapped",
    /// §4.2: a successor target is not in the result.
    SuccessorMissing => "successor-missing",
    /// §4.2: an input URN is neither returned nor mapped.
    Unaccounted => "unaccounted",
    /// §4.2: a resource switches custom <-> component.
    CustomComponentFlip => "custom-component-flip",
    /// §4.2: a retained custom resource's `id` changed.
    IdChanged => "id-changed",
    /// §4.2: one URN maps to two targets across the chain.
    ConflictingSuccessors => "conflicting-successors",
    /// §4.4: the successor map loops.
    SuccessorCycle => "successor-cycle",
    /// §5.1: a provider state changed, vanished or was renamed.
    ProviderStateChanged => "provider-state-changed",
    /// §5.1: the result holds a new provider state.
    ProviderStateIntroduced => "provider-state-introduced",
    /// §5.2: a custom resource maps to a component.
    IdentityToComponent => "identity-to-component",
    /// §5.2: a successor's physical ID differs.
    PhysicalIdChanged => "physical-id-changed",
    /// §5.2: a successor's provider reference differs.
    ProviderChanged => "provider-changed",
    /// §5.2: a successor's `extensionRef` differs.
    ExtensionChanged => "extension-changed",
    /// §5.2: a successor's `external` differs.
    OwnershipChanged => "ownership-changed",
    /// §5.2: a successor's `pendingReplacement` or `taint` differs.
    LifecycleChanged => "lifecycle-changed",
    /// §5.2: a result sets `pendingReplacement` or `taint` no predecessor had.
    LifecycleForged => "lifecycle-forged",
    /// §5.2: `protect`/`retainOnDelete` is not the OR over predecessors.
    ProtectionChanged => "protection-changed",
    /// §5.2: an additional custom resource matches no prior custom.
    UnmatchedCustom => "unmatched-custom",
    /// §5.2: an additional resource disagrees with its matches.
    SplitFlagsConflict => "split-flags-conflict",
    /// §5.2: two custom resources of the result share type, id and provider.
    IdentityDuplicated => "identity-duplicated",
    /// §5.3: neither the registration URN nor the prior root is returned.
    RootMissing => "root-missing",
    /// §5.3: both the registration URN and the prior root are returned.
    RootAmbiguous => "root-ambiguous",
    /// §5.3: the root's parent changed.
    RootParentChanged => "root-parent-changed",
    /// §5.3: a returned URN has another stack or project.
    ForeignStack => "foreign-stack",
    /// §5.3: parents form a loop.
    ParentCycle => "parent-cycle",
    /// §5.3: a resource does not descend from the root.
    NotDescendant => "not-descendant",
    /// §5.3: a URN's qualified type is not the expected one.
    QualifiedTypeMismatch => "qualified-type-mismatch",
    /// §5.3: a returned URN was claimed as an alias earlier.
    ResultClaimed => "result-claimed",
    /// §5.3: a returned URN was registered earlier.
    ResultRegistered => "result-registered",
    /// §5.3: a returned resource is marked `delete`.
    ResultPendingDelete => "result-pending-delete",
    /// §5.3: a returned resource is a view.
    ResultView => "result-view",
    /// §5.3: a returned custom resource has an empty `id`.
    CustomWithoutId => "custom-without-id",
    /// §5.3: `extensionRef` names no extension of the deployment.
    UnknownExtension => "unknown-extension",
    /// §5.3: a provider reference does not parse.
    InvalidProviderRef => "invalid-provider-ref",
    /// §5.3: a provider reference resolves nowhere.
    UnknownProvider => "unknown-provider",
    /// §5.3: a dependency-like reference does not parse or resolve.
    DanglingReference => "dangling-reference",
    /// §5.4: the update is targeted.
    RestrictedTargeted => "restricted-targeted",
    /// §5.4: a saved plan is generated or applied.
    RestrictedPlan => "restricted-plan",
    /// §5.4: the prior snapshot has pending operations.
    PendingOperations => "pending-operations",
    /// §5.4: a persisted snippet references a mapped URN.
    SnippetReference => "snippet-reference",
    /// §5.4: the prior subtree holds resources pending deletion.
    PendingDelete => "pending-delete",
    /// §6: the prepared prior list cannot be sorted or fails integrity.
    InvalidSnapshot => "invalid-snapshot",
    /// §3, §10: persisting the migration failed.
    PersistenceFailed => "persistence-failed",
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rule id that `migrations.md` does not define.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a state migration rule id")]
pub struct UnknownRule(pub String);

/// A rejected component state migration: the rule broken and a message for
/// a person (naming the registration, the resources and what to do).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("state migration rejected [{rule}]: {message}")]
pub struct MigrationError {
    /// The rule that was broken.
    pub rule: Rule,
    /// What happened, to whom, and what to do about it.
    pub message: String,
}

/// The result type of the migration core.
pub type Result<T> = std::result::Result<T, MigrationError>;

impl MigrationError {
    /// An error for `rule` with `message`.
    pub fn new(rule: Rule, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
        }
    }

    /// `callback-failed`: callback `i` (1-based) of `n` of the migration of
    /// `registration` failed with `message` (an error, a panic, a timeout).
    pub fn callback_failed(
        registration: &Urn,
        i: usize,
        n: usize,
        message: impl fmt::Display,
    ) -> Self {
        Self::new(
            Rule::CallbackFailed,
            format!(
                "migration callback {i} of {n} of {registration} failed: {message}; \
                 nothing was changed: fix the callback (it must return the complete \
                 new subtree or no change) and run the update again"
            ),
        )
    }

    /// `invalid-snapshot`: the prepared prior list of the migration of
    /// `registration` cannot be sorted or fails integrity (`why`).
    pub fn invalid_snapshot(registration: &Urn, why: impl fmt::Display) -> Self {
        Self::new(
            Rule::InvalidSnapshot,
            format!(
                "the migration of {registration} would produce an invalid snapshot: {why}; \
                 nothing was changed: make the migrated subtree's references consistent \
                 with the rest of the stack"
            ),
        )
    }

    /// `persistence-failed`: persisting the migration of `registration`
    /// failed with `why`.
    pub fn persistence_failed(registration: &Urn, why: impl fmt::Display) -> Self {
        Self::new(
            Rule::PersistenceFailed,
            format!(
                "the migration of {registration} could not be persisted: {why}; \
                 the live and persisted state are unchanged: fix the backend and run \
                 the update again"
            ),
        )
    }

    /// `unsupported-persistence`: `registration` carries migrations but the
    /// persister does not support them.
    pub fn unsupported_persistence(registration: &Urn) -> Self {
        Self::new(
            Rule::UnsupportedPersistence,
            format!(
                "{registration} carries state migrations but the persistence in use \
                 does not support them: use journal or checkpoint persistence"
            ),
        )
    }

    /// `predecessor-reused`: `urn` (a registration or a read) was mapped to
    /// `successor` by the migration of `root` earlier in this deployment.
    pub fn predecessor_reused(urn: &Urn, root: &Urn, successor: &Urn) -> Self {
        Self::new(
            Rule::PredecessorReused,
            format!(
                "{urn} was migrated to {successor} by the migration of {root} earlier in \
                 this deployment and cannot be used again as a resource's URN: use \
                 {successor}, or name {urn} as an alias of it"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for rule in Rule::ALL {
            assert!(seen.insert(rule.as_str()), "{rule} twice");
            assert_eq!(rule.as_str().parse::<Rule>().unwrap(), *rule);
            assert_eq!(rule.to_string(), rule.as_str());
        }
        assert_eq!(Rule::ALL.len(), 57);
        assert!("no-such-rule".parse::<Rule>().is_err());
    }

    #[test]
    fn every_rule_of_the_spec_is_known() {
        // Every `code`-styled id in the rule tables and prose of
        // migrations.md that names a rule.
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/spec/migrations.md");
        let spec = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "the spec {} is needed to check the rule ids: {e}",
                path.display()
            )
        });
        for rule in Rule::ALL {
            assert!(
                spec.contains(&format!("`{}`", rule.as_str())),
                "{rule} is not in migrations.md"
            );
        }
        for line in spec.lines().filter(|l| l.starts_with("| `")) {
            let id = line[3..].split('`').next().unwrap();
            assert!(id.parse::<Rule>().is_ok(), "table row `{id}` has no Rule");
        }
    }

    #[test]
    fn callback_failed_names_the_callback() {
        let urn = Urn::parse("urn:pulumi:s::p::a:b:C::n").unwrap();
        let e = MigrationError::callback_failed(&urn, 2, 3, "boom");
        assert_eq!(e.rule, Rule::CallbackFailed);
        assert!(e.message.contains("2 of 3"));
        assert!(e.message.contains("boom"));
        assert!(e.to_string().contains("callback-failed"));
    }
}
