//! Pulumi resource-provider plugins: keel as the client of a plugin's
//! `pulumirpc.ResourceProvider` service (the real-providers issue; the
//! contract is `../shared/spec/providers.md`).
//!
//! - [`client`]: [`client::PluginProvider`], keel's
//!   [`crate::provider::Provider`] over a connected plugin, and the sans-IO
//!   marshalling it uses.

pub mod client;
// pub mod discovery; // (plugin discovery)
// pub mod host; // (plugin processes)
