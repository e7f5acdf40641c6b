//! keel's resource monitor served for a test program's context, with a
//! gRPC client connected to it (the grpc tests' shared set-up; included
//! by path, since only the `grpc` test targets have the feature).

use keel::events::EventSink;
use keel::grpc::monitor::{DeploymentInfo, Monitor, MonitorServer};
use keel::grpc::pb::resource_monitor_client::ResourceMonitorClient;
use keel::{Context, ProgramError};

/// A client of the monitor.
pub(crate) type Client = ResourceMonitorClient<tonic::transport::Channel>;

/// Serves a monitor for `ctx` (organization `org`, parallel 4, secrets
/// stored) and connects a client to it.
pub(crate) async fn serve(ctx: Context) -> Result<(MonitorServer, Client), ProgramError> {
    let info = DeploymentInfo {
        organization: "org".into(),
        config: Default::default(),
        config_secret_keys: Vec::new(),
        parallel: 4,
        can_store_secrets: true,
    };
    let server = MonitorServer::start(Monitor::new(
        ctx,
        info,
        EventSink::default(),
        keel::grpc::engine_log::SharedSecrets::default(),
    ))
    .await?;
    let client = Client::connect(format!("http://{}", server.address())).await?;
    Ok((server, client))
}
