//! The gRPC front end: real Pulumi programs on keel.
//!
//! A Pulumi language SDK (the `pulumi` Python package) talks to its engine
//! over two gRPC services, `ResourceMonitor` and `Engine`. This module
//! serves the subset those SDKs use and feeds every request into the same
//! [`crate::actors::Context`] the embedded API uses, so registrations from
//! Python go through the very actors, planner, migration coordinator and
//! persister as every other program:
//!
//! - [`pb`]: the protocol messages, generated at build time from
//!   `proto/pulumirpc.proto` and `proto/provider.proto` (hand-written
//!   subsets) by protox and tonic-prost-build;
//! - [`convert`]: protobuf `Struct` <-> [`crate::model::PropertyValue`] and
//!   request -> [`crate::source::goal::Goal`] (pure, tested directly);
//! - [`callbacks`]: state-migration callbacks that call back into the SDK's
//!   `Callbacks` service (its connections serve every callback);
//! - [`transforms`]: resource and invoke transforms the SDK hosts, run on
//!   a request before it reaches the engine;
//! - [`hooks`]: resource hooks the SDK hosts, bound to keel's hook points;
//! - [`monitor`]: the two services and the server's lifetime;
//! - [`engine_log`]: the Engine service alone, for plugins of operations
//!   that run no SDK program;
//! - [`construct`]: what the monitor sends on to providers (invokes of
//!   package functions, remote components, component methods);
//! - [`plugin`]: the other direction, keel as the client of a provider
//!   plugin's `ResourceProvider` service (`proto/provider.proto`);
//! - [`python`]: a Python program directory as a [`crate::actors::Program`]
//!   (starts the interpreter with keel's runner);
//! - [`plugin`]: Pulumi resource-provider plugins (finding and starting them).

pub mod callbacks;
pub mod construct;
pub mod convert;
pub mod engine_log;
pub mod hooks;
pub mod monitor;
pub mod plugin;
pub mod python;
pub mod transforms;

/// The generated protocol messages and service stubs (package `pulumirpc`).
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    rustdoc::all
)]
pub mod pb {
    tonic::include_proto!("pulumirpc");
}
