//! The actors of one operation and the program API they serve.
//!
//! The deterministic cores (planning in [`crate::plan`], validation and
//! rewriting in [`crate::migrate`], encoding in [`crate::persist`]) know
//! nothing of actors; this module is the thin shell that moves messages
//! between them and does the I/O:
//! - `source`: the Source actor, fed by a [`Program`] through its
//!   [`Context`] ([`program`]);
//! - `generator`: the StepGenerator actor around the planner;
//! - `executor`: the StepExecutor actor (bounded parallel chains);
//! - `coordinator`: the MigrationCoordinator actor;
//! - `persister`: the Persister actor, the single writer of state;
//! - `protocol`: every message they exchange.

pub(crate) mod coordinator;
pub(crate) mod executor;
pub(crate) mod generator;
pub(crate) mod persister;
pub mod program;
pub(crate) mod protocol;
pub(crate) mod source;

pub use program::{Context, NullSource, Program, ProgramFuture, RegisterError};
pub use protocol::{MigrationReport, ProviderQuery};
