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
//! - [`provider`]: the provider trait, the registry, the built-in `pulumi`
//!   provider and (feature `sim`) the simulated cloud.
//! - [`source`]: the program API and the Source actor.
//! - [`plan`]: steps, the deterministic planner and the StepGenerator actor.
//! - [`exec`]: the StepExecutor actor (bounded parallel chains).
//! - [`persist`]: mutations, the snapshot builder, persisters and the
//!   Persister actor.
//! - [`engine`]: wires the actors for one operation; [`events`]: the event
//!   stream.
//! - [`migrate`], [`secrets`], [`config`]: component migrations, secrets at
//!   rest, stack config files.
//! - `grpc` (feature `grpc`): Pulumi's resource-monitor protocol, so
//!   programs written with Pulumi's SDKs (Python) run on keel through the
//!   same [`source`] API.
//! - `cli` (feature `cli`): the `keel` command.
//!
//! # Cargo features
//!
//! All on by default; `default-features = false` leaves the engine alone
//! (no clap, indicatif, tonic or prost):
//! - `sim`: the simulated cloud (`provider::sim`, `SimCloud`,
//!   `ProviderRegistry::simulated`).
//! - `grpc`: the gRPC front end (`grpc`), compiled from `proto/` at build
//!   time.
//! - `cli`: the `keel` command (`cli`, the `keel` binary); implies `grpc`
//!   and `sim`.
//!
//! # Example
//!
//! One bucket on the simulated cloud (feature `sim`): the first update
//! creates it, the second finds nothing to do.
//!
//! ```
//! # #[cfg(not(feature = "sim"))]
//! # fn main() {}
//! # #[cfg(feature = "sim")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use keel::engine::{Engine, EngineConfig};
//! use keel::model::{Deployment, StepKind, TypeToken};
//! use keel::persist::MemoryPersister;
//! use keel::provider::{ProviderRegistry, SimCloud, SimConfig};
//! use keel::source::goal::Goal;
//! use keel::source::Context;
//!
//! let runtime = tokio::runtime::Runtime::new()?;
//! runtime.block_on(async {
//!     let cloud = SimCloud::new(SimConfig::default());
//!     let engine = Engine::new(
//!         EngineConfig::default(),
//!         ProviderRegistry::simulated(cloud.clone()),
//!     );
//!     let program = |ctx: Context| async move {
//!         let bucket = TypeToken::parse("aws:s3/bucket:Bucket")?;
//!         ctx.register(Goal::custom(bucket, "logs", Default::default()))
//!             .await?;
//!         Ok(())
//!     };
//!     let first = engine
//!         .update(Deployment::default(), program, Box::new(MemoryPersister::new()))
//!         .await?;
//!     // The stack, the default `aws` provider and the bucket.
//!     assert_eq!(first.summary.steps.get(&StepKind::Create), Some(&3));
//!     let second = engine
//!         .update(first.snapshot, program, Box::new(MemoryPersister::new()))
//!         .await?;
//!     assert_eq!(second.summary.steps.get(&StepKind::Create), None);
//!     assert_eq!(second.summary.steps.get(&StepKind::Same), Some(&3));
//!     assert_eq!(cloud.objects().len(), 1);
//!     Ok(())
//! })
//! # }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod engine;
pub mod events;
pub mod exec;
#[cfg(feature = "grpc")]
pub mod grpc;
mod locks;
pub mod migrate;
pub mod model;
pub mod persist;
pub mod plan;
pub mod provider;
pub mod secrets;
pub mod source;
pub mod sync;
