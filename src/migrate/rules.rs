//! Rule ids and the migration error (`migrations.md`).
//!
//! Every rejection of a component state migration carries a stable rule id
//! as data: a [`Rule`] whose [`Rule::as_str`] is the id written in `code`
//! style in `migrations.md` §2–§10. Tests and conformance vectors match on
//! the rule, never on the message; the message is for a person and names the
//! registration, the resources involved and what to do.

use std::fmt;

use crate::model::Urn;

pub use crate::model::rule::{Rule, UnknownRule};

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
