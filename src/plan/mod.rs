//! Planning: steps, the deterministic planner (step generation with no I/O),
//! dependency-graph helpers, and the StepGenerator actor around them.

pub mod actor;
pub mod diff;
pub mod generator;
pub mod graph;
pub mod saved;
pub mod step;
