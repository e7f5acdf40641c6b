//! State-migration callbacks hosted by the SDK.
//!
//! A registration's `state_migrations` are `Callback{target, token}` pairs:
//! the SDK serves a `Callbacks` gRPC service at `target`. Each becomes a
//! [`MigrationCallback::Async`] that sends `Callbacks.Invoke` with a
//! serialized `StateMigrationRequest{urn, old_state}` (the old subtree as
//! checkpoint JSON bytes) and reads a `StateMigrationResponse{new_state,
//! successors}` back; empty `new_state` bytes mean "no change". Being an
//! ordinary callback, it runs under the coordinator's chain, timeout and
//! error rules: a Python exception (the SDK answers with an error status)
//! becomes `callback-failed` carrying its message.

use std::sync::Arc;

use dashmap::DashMap;
use prost::Message;
use tonic::transport::{Channel, Endpoint};

use crate::source::migration::{MigrationCallback, StateMigrationArgs, StateMigrationResult};
use crate::source::ProgramError;

use super::pb;
use super::pb::callbacks_client::CallbacksClient;

/// The largest message keel sends or accepts (a migration's old state can
/// be large; Pulumi uses the same bound).
pub const MAX_MESSAGE_BYTES: usize = 400 * 1024 * 1024;

/// Connections to the SDK's callback servers, one per target, shared by
/// every callback of an operation.
#[derive(Debug, Clone, Default)]
pub struct CallbackClients {
    channels: Arc<DashMap<String, Channel>>,
}

/// Why a callback could not be called or answered.
#[derive(Debug, thiserror::Error)]
pub enum CallbackError {
    /// The target is not an address.
    #[error("the callback target `{target}` is not an address: {message}")]
    BadTarget {
        /// The target as sent.
        target: String,
        /// Why.
        message: String,
    },
    /// The SDK answered with an error (a raised exception).
    #[error("{0}")]
    Raised(String),
    /// The answer is not a state-migration response.
    #[error("the callback's answer is not a StateMigrationResponse: {0}")]
    BadResponse(String),
    /// The answer is not the message the call expects (a transform's or a
    /// hook's), or a value in it is malformed.
    #[error("the callback's answer is not a {what}: {message}")]
    BadAnswer {
        /// The message expected.
        what: &'static str,
        /// Why.
        message: String,
    },
}

impl CallbackClients {
    /// A callback calling `cb` on the SDK's callback server.
    pub fn migration(&self, cb: pb::Callback) -> MigrationCallback {
        let clients = self.clone();
        let cb = Arc::new(cb);
        MigrationCallback::new_async(move |args: StateMigrationArgs| {
            let clients = clients.clone();
            let cb = cb.clone();
            async move {
                clients
                    .invoke_migration(&cb, args)
                    .await
                    .map_err(|e| Box::new(e) as ProgramError)
            }
        })
    }

    fn channel(&self, target: &str) -> Result<Channel, CallbackError> {
        if let Some(c) = self.channels.get(target) {
            return Ok(c.clone());
        }
        let bad = |message: String| CallbackError::BadTarget {
            target: target.to_owned(),
            message,
        };
        let uri = if target.contains("://") {
            target.to_owned()
        } else {
            format!("http://{target}")
        };
        // Lazy: connects on the first call (and reconnects if needed).
        let channel = Endpoint::from_shared(uri)
            .map_err(|e| bad(e.to_string()))?
            .connect_lazy();
        self.channels.insert(target.to_owned(), channel.clone());
        Ok(channel)
    }

    async fn invoke_migration(
        &self,
        cb: &pb::Callback,
        args: StateMigrationArgs,
    ) -> Result<Option<StateMigrationResult>, CallbackError> {
        let old_state = serde_json::to_vec(&args.old_state)
            .map_err(|e| CallbackError::BadResponse(e.to_string()))?;
        let request = pb::StateMigrationRequest {
            urn: args.urn.as_str().to_owned(),
            old_state,
        };
        let answer = self.call(cb, request.encode_to_vec()).await?;
        decode_response(&answer)
    }

    /// Calls `cb` with an encoded request and returns the encoded answer
    /// (transforms and resource hooks use it with their own messages).
    ///
    /// # Errors
    /// [`CallbackError::BadTarget`], or [`CallbackError::Raised`] with the
    /// SDK's message when the callback raised or could not be reached.
    pub async fn call(
        &self,
        cb: &pb::Callback,
        request: Vec<u8>,
    ) -> Result<Vec<u8>, CallbackError> {
        let mut client = CallbacksClient::new(self.channel(&cb.target)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let answer = client
            .invoke(pb::CallbackInvokeRequest {
                token: cb.token.clone(),
                request,
            })
            .await
            .map_err(|status| CallbackError::Raised(raised_message(&status, &cb.token)))?;
        Ok(answer.into_inner().response)
    }
}

/// The user's message from an SDK error status: the SDK prefixes it with
/// `Invoke callback <token> error: `, which says nothing to the user.
fn raised_message(status: &tonic::Status, token: &str) -> String {
    let m = status.message();
    let prefix = format!("Invoke callback {token} error: ");
    match m.strip_prefix(&prefix) {
        Some(rest) => rest.trim_end().to_owned(),
        None if m.is_empty() => format!("the callback failed ({:?})", status.code()),
        None => m.trim_end().to_owned(),
    }
}

/// A `StateMigrationResponse` as the engine's callback result.
///
/// # Errors
/// [`CallbackError::BadResponse`] when the bytes are not the message or its
/// `new_state` is not JSON.
pub fn decode_response(bytes: &[u8]) -> Result<Option<StateMigrationResult>, CallbackError> {
    let r = pb::StateMigrationResponse::decode(bytes)
        .map_err(|e| CallbackError::BadResponse(e.to_string()))?;
    if r.new_state.is_empty() {
        return Ok(None);
    }
    let new_state: serde_json::Value = serde_json::from_slice(&r.new_state)
        .map_err(|e| CallbackError::BadResponse(format!("its new_state is not JSON: {e}")))?;
    Ok(Some(StateMigrationResult {
        new_state,
        successors: r.successors.into_iter().collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_decode_to_no_change_or_a_result() {
        assert!(decode_response(&[]).unwrap().is_none());
        let r = pb::StateMigrationResponse {
            new_state: br#"[{"urn": "u"}]"#.to_vec(),
            successors: [("a".to_owned(), "b".to_owned())].into(),
        };
        let got = decode_response(&r.encode_to_vec()).unwrap().unwrap();
        assert_eq!(got.new_state, serde_json::json!([{"urn": "u"}]));
        assert_eq!(got.successors.get("a").map(String::as_str), Some("b"));
        let r = pb::StateMigrationResponse {
            new_state: b"{not json".to_vec(),
            ..Default::default()
        };
        assert!(matches!(
            decode_response(&r.encode_to_vec()),
            Err(CallbackError::BadResponse(_))
        ));
        assert!(decode_response(&[0xff, 0xff]).is_err());
    }

    #[test]
    fn the_sdk_prefix_is_dropped_from_raised_messages() {
        let s = tonic::Status::unknown("Invoke callback t1 error: boom: ValueError\n  File x\n");
        assert_eq!(raised_message(&s, "t1"), "boom: ValueError\n  File x");
        assert_eq!(
            raised_message(&tonic::Status::unavailable("conn refused"), "t1"),
            "conn refused"
        );
    }
}
