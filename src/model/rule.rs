//! The stable ids of the component state migration rules
//! (`migrations.md`), as data: what a rejection carries, what a summary
//! lists and what a vector expects. The error built on them is
//! `migrate::MigrationError`.

use std::fmt;
use std::str::FromStr;

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

impl serde::Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}
