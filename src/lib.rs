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
//! - `sync`: the concurrency core (execution gate, commit) on a std/loom
//!   shim, model-checked by `loom-tests/`.
//! - [`provider`]: the provider trait, the registry, the built-in `pulumi`
//!   provider and (feature `sim`) the simulated cloud.
//! - [`source`]: what a program asks of the engine, as data (goals,
//!   options, hooks, migration callbacks).
//! - [`plan`]: steps and the deterministic planner.
//! - [`migrate`]: the deterministic core of component migrations.
//! - [`persist`]: mutations, the snapshot builder, the journal format and
//!   persisters.
//! - [`actors`]: the actors of one operation (source, step generator, step
//!   executor, migration coordinator, persister), the messages they
//!   exchange, and the program API ([`Context`], [`Program`]).
//! - [`engine`]: wires the actors for one operation; [`events`]: the event
//!   stream.
//! - [`secrets`], [`config`]: secrets at rest, stack config files.
//! - `grpc` (feature `grpc`): Pulumi's resource-monitor protocol, so
//!   programs written with Pulumi's SDKs (Python) run on keel through the
//!   same [`Context`].
//! - `cli` (feature `cli`): the `keel` command.
//!
//! The types an embedder needs are re-exported here: [`Engine`],
//! [`EngineConfig`], [`Outcome`], [`Context`], [`Program`], [`Goal`],
//! [`Provider`], [`ProviderRegistry`], [`Persister`] and the errors.
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
//! use keel::provider::{SimCloud, SimConfig};
//! use keel::{Context, Deployment, Engine, EngineConfig, Goal, MemoryPersister};
//! use keel::{ProviderRegistry, StepKind, TypeToken};
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

pub mod actors;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod engine;
pub mod events;
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
// The concurrency core is also compiled into `loom-tests/` (by `#[path]`),
// where its items are public for the models; here it is internal, and some
// of it (blocking quiesce, counters) only the models call.
#[allow(unreachable_pub, dead_code, unused_imports)]
pub(crate) mod sync;

// The embedding surface: what a program embedding keel needs, at the root.
pub use actors::{Context, MigrationReport, NullSource, Program, RegisterError};
pub use engine::{Engine, EngineConfig, EngineError, Outcome};
pub use events::{EngineEvent, Summary};
pub use migrate::MigrationError;
pub use model::{Deployment, PropertyMap, PropertyValue, State, StepKind, TypeToken, Urn};
pub use persist::{MemoryPersister, PersistError, Persister};
pub use plan::{PlanError, UpdateOptions};
pub use provider::{Provider, ProviderError, ProviderRegistry};
pub use source::goal::{Goal, ReadGoal, Registered, ResourceOptions};
pub use source::ProgramError;
