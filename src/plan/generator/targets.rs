//! The operation's scope (`--target`, `--exclude` and their `-dependents`
//! forms): which registrations change and which prior states may be
//! deleted. Targets and exclusions are URNs or, as Pulumi's, globs
//! ([`UrnGlob`]).

use std::collections::HashSet;

use crate::model::{TypeToken, Urn};

use super::Planner;
use crate::plan::graph;
use crate::plan::step::lock;

/// A `--target`/`--exclude` pattern, as Pulumi's `UrnTargets` reads one:
/// `**` matches any text, `*` any text without a `:`, everything else
/// itself (`urn:pulumi:**::aws:s3/bucket:Bucket::*`, `**web**`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrnGlob {
    pattern: String,
    parts: Vec<GlobPart>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum GlobPart {
    Text(char),
    /// `*`: any text without `:`.
    Star,
    /// `**`: any text.
    AnyText,
}

impl UrnGlob {
    /// The glob of `pattern`, when it has a `*` (else it is a URN).
    pub fn parse(pattern: &str) -> Option<Self> {
        if !pattern.contains('*') {
            return None;
        }
        let mut parts = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            parts.push(match c {
                '*' if chars.peek() == Some(&'*') => {
                    chars.next();
                    GlobPart::AnyText
                }
                '*' => GlobPart::Star,
                c => GlobPart::Text(c),
            });
        }
        Some(Self {
            pattern: pattern.to_owned(),
            parts,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// True when the whole of `urn` matches.
    pub fn matches(&self, urn: &Urn) -> bool {
        let text: Vec<char> = urn.as_str().chars().collect();
        // can[j]: the parts so far match text[..j].
        let mut can = vec![false; text.len() + 1];
        can[0] = true;
        for part in &self.parts {
            let mut next = vec![false; text.len() + 1];
            match part {
                GlobPart::Text(c) => {
                    for j in 0..text.len() {
                        next[j + 1] = can[j] && text[j] == *c;
                    }
                }
                GlobPart::Star | GlobPart::AnyText => {
                    let any = *part == GlobPart::AnyText;
                    for j in 0..=text.len() {
                        next[j] = can[j] || (j > 0 && next[j - 1] && (any || text[j - 1] != ':'));
                    }
                }
            }
            can = next;
        }
        can[text.len()]
    }
}

impl Planner {
    /// Whether a resource is inside the operation's scope (`--target`,
    /// `--exclude`); providers and the stack resource always are. Records
    /// the answer for its dependents.
    pub(super) fn in_scope<'a>(
        &mut self,
        urn: &Urn,
        ty: &TypeToken,
        address: &str,
        refs: impl Iterator<Item = &'a Urn>,
    ) -> bool {
        if ty.is_provider() || ty.is_stack() {
            return true;
        }
        let o = &self.opts.update;
        if o.has_targets() {
            let refs: Vec<&Urn> = refs.collect();
            let hit = o.targets.contains(urn)
                || o.target_globs.iter().any(|g| g.matches(urn))
                || addressed(&o.target_addresses, address)
                || (o.target_dependents && refs.iter().any(|d| self.targeted.contains(*d)));
            if hit {
                self.targeted.insert(urn.clone());
            }
            return hit;
        }
        if o.has_excludes() {
            let refs: Vec<&Urn> = refs.collect();
            let out = o.excludes.contains(urn)
                || o.exclude_globs.iter().any(|g| g.matches(urn))
                || addressed(&o.exclude_addresses, address)
                || (o.exclude_dependents && refs.iter().any(|d| self.excluded.contains(*d)));
            if out {
                self.excluded.insert(urn.clone());
            }
            return !out;
        }
        true
    }

    /// Which prior states the operation may delete (`--target`,
    /// `--exclude`). `--target-dependents` and `--exclude-dependents` close
    /// the set transitively over every reference a state has: parent,
    /// dependencies, property dependencies, `deletedWith`, `replaceWith`
    /// and its provider.
    pub(super) fn delete_scope(&self) -> DeleteScope {
        let o = &self.opts.update;
        let close = |mut set: HashSet<Urn>, transitive: bool| {
            let mut grew = transitive;
            while grew {
                let before = set.len();
                for s in &self.olds {
                    let s = lock(s);
                    if !set.contains(&s.urn) && graph::edges(&s).any(|d| set.contains(&d)) {
                        set.insert(s.urn.clone());
                    }
                }
                grew = set.len() > before;
            }
            set
        };
        // The prior states a glob or an address names.
        let globbed = |globs: &[UrnGlob], addresses: &[crate::model::Address]| -> Vec<Urn> {
            if globs.is_empty() && addresses.is_empty() {
                return Vec::new();
            }
            self.olds
                .iter()
                .filter_map(|s| {
                    let s = lock(s);
                    (globs.iter().any(|g| g.matches(&s.urn))
                        || addressed(addresses, &s.keel_address))
                    .then(|| s.urn.clone())
                })
                .collect()
        };
        if o.has_targets() {
            let seed = o
                .targets
                .iter()
                .chain(&self.targeted)
                .cloned()
                .chain(globbed(&o.target_globs, &o.target_addresses))
                .collect();
            return DeleteScope::Only(close(seed, o.target_dependents));
        }
        if o.has_excludes() {
            let seed = o
                .excludes
                .iter()
                .chain(&self.excluded)
                .cloned()
                .chain(globbed(&o.exclude_globs, &o.exclude_addresses))
                .collect();
            return DeleteScope::AllBut(close(seed, o.exclude_dependents));
        }
        DeleteScope::All
    }
}

/// Whether an entry with the concrete `address` (empty: none) is named by
/// one of `patterns`.
fn addressed(patterns: &[crate::model::Address], address: &str) -> bool {
    if patterns.is_empty() || address.is_empty() {
        return false;
    }
    crate::model::Address::parse(address).is_ok_and(|a| patterns.iter().any(|p| p.matches(&a)))
}

/// The prior states an operation may delete.
#[derive(Debug)]
pub(super) enum DeleteScope {
    /// Every one (no filter).
    All,
    /// Only these (`--target`).
    Only(HashSet<Urn>),
    /// All but these (`--exclude`).
    AllBut(HashSet<Urn>),
}

impl DeleteScope {
    pub(super) fn contains(&self, urn: &Urn) -> bool {
        match self {
            Self::All => true,
            Self::Only(set) => set.contains(urn),
            Self::AllBut(set) => !set.contains(urn),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::UrnGlob;
    use crate::model::Urn;

    #[test]
    fn globs_match_as_pulumis() {
        let urn = |s: &str| Urn::parse(s).unwrap();
        let bucket = urn("urn:pulumi:dev::shop::aws:s3/bucket:Bucket::site");
        let child = urn("urn:pulumi:dev::shop::my:index:Comp$aws:s3/bucket:Bucket::logs");
        for (pattern, want_bucket, want_child) in [
            ("**site**", true, false),
            ("**", true, true),
            ("urn:pulumi:dev::shop::aws:s3/bucket:Bucket::*", true, false),
            ("urn:pulumi:dev::shop::*::site", false, false),
            ("urn:pulumi:dev::shop::**::site", true, false),
            ("urn:pulumi:dev::shop::**Bucket::*", true, true),
            ("urn:pulumi:*::other::**", false, false),
            ("urn:pulumi:*::shop::**", true, true),
            ("urn:pulumi:*:**", true, true),
        ] {
            let g = UrnGlob::parse(pattern).unwrap();
            assert_eq!(g.matches(&bucket), want_bucket, "{pattern} on the bucket");
            assert_eq!(g.matches(&child), want_child, "{pattern} on the child");
        }
        assert!(UrnGlob::parse("urn:pulumi:dev::shop::a:b:C::x").is_none());
    }
}
