//! Planning: steps, the deterministic planner (step generation with no I/O),
//! the engine's diff rules (`ignoreChanges`, `replaceOnChanges`), default
//! provider naming, the delete-before-replace dependents walk,
//! dependency-graph helpers. No actors: the StepGenerator actor
//! (`actors::generator`) drives it.

pub(crate) mod dependents;
pub mod diff;
pub(crate) mod diffs;
pub(crate) mod generator;
pub(crate) mod graph;
pub(crate) mod providers;
pub mod saved;
pub(crate) mod step;

pub use generator::{PlanError, UpdateOptions, UrnGlob};
