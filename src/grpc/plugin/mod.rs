//! Pulumi resource-provider plugins (the contract is
//! `../shared/spec/providers.md`):
//!
//! - [`discovery`]: finding `pulumi-resource-<pkg>` (project entries, `PATH`,
//!   the plugin cache);
//! - [`host`]: a plugin process (start, port, channel, diagnostics,
//!   shutdown);
//! - [`client`]: [`client::PluginProvider`], keel's
//!   [`crate::provider::Provider`] over a connected plugin, and the sans-IO
//!   marshalling it uses;
//! - [`served`]: [`served::PluginServed`], a package served by a plugin
//!   started on first use and stopped when the operation ends.

pub mod client;
pub mod discovery;
pub mod host;
pub mod served;
