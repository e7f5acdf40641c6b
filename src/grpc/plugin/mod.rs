//! Pulumi resource-provider plugins: discovery, processes and the gRPC client.

pub mod discovery;
pub mod host;
