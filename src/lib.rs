//! keel: a deployment engine for infrastructure-as-code.
//!
//! Given a stack's prior state and a stream of resource registrations from a
//! program, keel plans the provider operations that reconcile them, runs them
//! in dependency order, persists every step crash-safely and can reshape
//! prior state with component state migrations.
//!
//! The crate is layered (see `ARCHITECTURE.md`):
//! - [`model`]: URNs, type tokens, property values, resource state, the
//!   snapshot, the checkpoint JSON format and the integrity verifier. Pure
//!   data and deterministic code; everything else depends on it.
//! - [`sync`]: the concurrency core (execution gate, commit) on a std/loom
//!   shim, model-checked by `loom-tests/`.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod model;
pub mod sync;
