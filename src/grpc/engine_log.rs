//! The `pulumirpc.Engine` service alone, for operations that run no SDK
//! program (program files, `refresh`, `destroy`): provider plugins are
//! started with an Engine address as their last argument, as Pulumi starts
//! them, and log through it (the Python SDK's provider server refuses to
//! start without one). A Python program's monitor serves the same service
//! itself ([`super::monitor`]).
//!
//! [`log_event`] is the one mapping of a `LogRequest` to an engine event,
//! shared by both servers.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use crate::events::{EngineEvent, EventSink};
use crate::locks::MutexExt;
use crate::model::Urn;
use crate::source::migration::Redactor;

use super::callbacks::MAX_MESSAGE_BYTES;
use super::pb;
use super::pb::engine_server::{Engine as EngineService, EngineServer};

/// The operation's secrets as its plugins were sent them
/// ([`crate::grpc::plugin::served::PluginServed::with_secrets`]): a log
/// line quoting one shows `[secret]`.
pub type SharedSecrets = Arc<Mutex<Redactor>>;

/// The event a `Log` request becomes (none for an ephemeral status line),
/// every text of `secrets` in its message masked.
pub fn log_event(req: &pb::LogRequest, secrets: &Mutex<Redactor>) -> Option<EngineEvent> {
    if req.ephemeral {
        return None;
    }
    let severity = match pb::LogSeverity::try_from(req.severity) {
        // Kept as an event: the CLI shows it with `--debug` or `-v`.
        Ok(pb::LogSeverity::Debug) => "debug",
        Ok(pb::LogSeverity::Warning) => "warning",
        Ok(pb::LogSeverity::Error) => "error",
        _ => "info",
    };
    Some(EngineEvent::Diagnostic {
        severity: severity.to_owned(),
        urn: Urn::parse(&req.urn).ok(),
        message: secrets.locked().redact(req.message.trim_end()),
    })
}

/// The Engine service: logs become the operation's diagnostics.
#[derive(Debug, Clone)]
struct LogEngine {
    events: EventSink,
    root: Arc<Mutex<String>>,
    secrets: SharedSecrets,
}

#[tonic::async_trait]
impl EngineService for LogEngine {
    async fn log(&self, request: Request<pb::LogRequest>) -> Result<Response<()>, Status> {
        if let Some(e) = log_event(&request.into_inner(), &self.secrets) {
            self.events.send(e);
        }
        Ok(Response::new(()))
    }

    async fn get_root_resource(
        &self,
        _request: Request<pb::GetRootResourceRequest>,
    ) -> Result<Response<pb::GetRootResourceResponse>, Status> {
        let urn = self.root.locked().clone();
        Ok(Response::new(pb::GetRootResourceResponse { urn }))
    }

    async fn set_root_resource(
        &self,
        request: Request<pb::SetRootResourceRequest>,
    ) -> Result<Response<pb::SetRootResourceResponse>, Status> {
        *self.root.locked() = request.into_inner().urn;
        Ok(Response::new(pb::SetRootResourceResponse {}))
    }
}

/// A running Engine server on a loopback port; stopped when dropped.
#[derive(Debug)]
pub struct EngineLogServer {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl EngineLogServer {
    /// Starts serving on `127.0.0.1` at a free port; logs go to `events`,
    /// every text of `secrets` masked.
    ///
    /// # Errors
    /// The listening socket could not be opened.
    pub async fn start(events: EventSink, secrets: SharedSecrets) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let (stop, stopped) = oneshot::channel::<()>();
        let service = LogEngine {
            events,
            root: Arc::default(),
            secrets,
        };
        let router = tonic::transport::Server::builder().add_service(
            EngineServer::new(service)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        );
        tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
            let _ = stopped.await;
        }));
        Ok(Self {
            address,
            stop: Some(stop),
        })
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        self.address.to_string()
    }
}

impl Drop for EngineLogServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn logs_become_diagnostics_masked_and_ephemeral_lines_vanish() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let secrets = SharedSecrets::default();
        secrets.locked().add_texts(["hunter2".to_owned()]);
        let server = EngineLogServer::start(EventSink::new(tx), secrets)
            .await
            .unwrap();
        let mut client =
            pb::engine_client::EngineClient::connect(format!("http://{}", server.address()))
                .await
                .unwrap();
        for (message, ephemeral) in [("a status line", true), ("careful, hunter2\n", false)] {
            client
                .log(pb::LogRequest {
                    severity: pb::LogSeverity::Warning as i32,
                    message: message.into(),
                    ephemeral,
                    ..Default::default()
                })
                .await
                .unwrap();
        }
        let Some(EngineEvent::Diagnostic {
            severity, message, ..
        }) = rx.recv().await
        else {
            panic!("a diagnostic");
        };
        assert_eq!(
            (severity.as_str(), message.as_str()),
            ("warning", "careful, [secret]")
        );
        assert!(rx.try_recv().is_err(), "the ephemeral line is not an event");
        drop(server);
    }
}
