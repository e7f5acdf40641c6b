//! The resource model: identities, values, states and snapshots, with the
//! exact JSON encodings of Pulumi's checkpoint format (deployment schema
//! version 3) and the integrity rules every snapshot must satisfy.
//!
//! Everything here is plain data and deterministic code: no I/O beyond
//! `std::io::Read`/`Write` adapters, no async, no actors.

pub mod address;
pub mod ambient;
pub mod checkpoint;
pub(crate) mod fasthash;
pub mod integrity;
pub(crate) mod json_write;
mod keys;
pub mod property;
pub(crate) mod property_map;
pub mod property_path;
pub mod rare;
pub mod rule;
pub mod shared_str;
pub mod snapshot;
pub mod state;
pub mod step;
pub mod urn;

pub use address::Address;
pub use ambient::{Clock, IdSource, SharedClock, SharedIds};
pub use checkpoint::{CheckpointError, CheckpointFile};
pub use integrity::IntegrityError;
pub use property::{PropertyMap, PropertyValue};
pub use property_path::{PropertyPath, PropertyPathError};
pub use shared_str::SharedStr;
pub use snapshot::Deployment;
pub use state::State;
pub use step::{StateRef, StepKind};
pub use urn::{ProviderRef, TypeToken, Urn, UrnError};
