//! The actors of one operation and the program API they serve.
//!
//! The deterministic cores (planning in [`crate::plan`], validation and
//! rewriting in [`crate::migrate`], encoding in [`crate::persist`]) know
//! nothing of actors; this module is the thin shell that moves messages
//! between them and does the I/O:
//! - [`source`]: the Source actor, fed by a [`Program`] through its
//!   [`Context`] ([`program`]);
//! - [`generator`]: the StepGenerator actor around the planner;
//! - [`executor`]: the StepExecutor actor (bounded parallel chains);
//! - [`coordinator`]: the MigrationCoordinator actor;
//! - [`persister`]: the Persister actor, the single writer of state;
//! - [`protocol`]: every message they exchange.

pub mod coordinator;
pub mod executor;
pub mod generator;
pub mod persister;
pub mod program;
pub mod protocol;
pub mod source;

pub use program::{Context, NullSource, Program, ProgramFuture, RegisterError};
