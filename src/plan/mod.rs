//! Planning: steps, the deterministic planner (step generation with no I/O),
//! the engine's diff rules (`ignoreChanges`, `replaceOnChanges`), default
//! provider naming, the delete-before-replace dependents walk,
//! dependency-graph helpers. No actors: the StepGenerator actor
//! (`actors::generator`) drives it.

pub mod dependents;
pub mod diff;
pub mod diffs;
pub mod generator;
pub mod graph;
pub mod providers;
pub mod saved;
pub mod step;
