//! Pulumi resource-provider plugins (the contract is
//! `../shared/spec/providers.md`):
//!
//! - [`discovery`]: finding `pulumi-resource-<pkg>` (project entries, `PATH`,
//!   the plugin cache);
//! - [`host`]: a plugin process (start, port, channel, diagnostics,
//!   shutdown);
//! - [`client`]: [`client::PluginProvider`], keel's
//!   [`crate::provider::Provider`] over a connected plugin, and the sans-IO
//!   marshalling it uses.

pub mod client;
pub mod discovery;
pub mod host;
