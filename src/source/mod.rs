//! Sources: what a program says, as data.
//!
//! A program (a Rust closure, a program file or a Pulumi SDK program over
//! gRPC) registers resources through a `Context` (`actors::program`); what it registers
//! is described here, free of the actors that carry it: [`goal`] (resource
//! goals and their options), [`hooks`] (resource hooks), [`migration`]
//! (component state migration callbacks), [`command`] (external
//! migration callbacks) and [`assets`] (asset and archive hashing).

pub mod assets;
pub mod command;
pub mod goal;
pub mod hooks;
pub mod migration;

/// The error a program returns (a user-callback boundary).
pub type ProgramError = Box<dyn std::error::Error + Send + Sync>;
