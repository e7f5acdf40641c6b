//! Component state migrations: the deterministic core (`migrations.md`).
//!
//! Everything a migration coordinator needs except running the callbacks,
//! quiescing, persisting and committing: no tokio, no I/O.
//!
//! - [`rules`]: the rule ids and [`MigrationError`].
//! - `subtree`: the prior root and the prior subtree (§1).
//! - `chain`: the callback chain: per-callback accounting, successor
//!   composition, rewriting between callbacks, no-op detection (§4).
//! - `check`: pre-callback checks (§3 step 4), context restrictions
//!   (§5.4) and the final checks (§5.1–§5.3).
//! - `rewrite`: reference rewriting (§8).
//! - `transaction`: transaction preparation, the deterministic sort, the
//!   journal layout and its replay (§6, §10).
//! - `incremental`: the sort and integrity check of a transaction in time
//!   proportional to the migration, declining to the full sort.
//! - `record`: the rewrites kept after commits, applied in commit order
//!   to later events, and `predecessor-reused` (§9).
//!
//! A coordinator runs, for one registration: `subtree::find_root` and
//! `Subtree::collect`, `check::pre_callback`, a `Chain` fed with each
//! callback's output, `Chain::finish`, `check::validate` (which skips a
//! no-op), then `transaction::prepare`, and persists and commits the
//! `Prepared` result, then records it in `Rewrites`.

pub(crate) mod chain;
pub(crate) mod check;
pub mod helpers;
pub(crate) mod incremental;
pub(crate) mod record;
pub(crate) mod rewrite;
pub mod rules;
pub(crate) mod subtree;
pub(crate) mod transaction;

#[cfg(test)]
mod tests;

pub(crate) use record::Rewrites;
pub use rules::{MigrationError, Result, Rule};
