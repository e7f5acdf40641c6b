//! The migration callback API of the embedded program API
//! (`migrations.md` §4.1): an ordered list of callbacks per registration,
//! synchronous or asynchronous Rust closures, each given
//! `{urn, oldState}` and answering "no change" or `{newState, successors}`.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::Urn;

use super::ProgramError;

/// The default time a callback may run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What a callback receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateMigrationArgs {
    /// The registration's URN (may differ from `old_state[0].urn` when the
    /// root was found through an alias).
    pub urn: Urn,
    /// The prior subtree: the root, then its descendants in snapshot order,
    /// as checkpoint JSON resources (secrets in their decrypted envelope).
    pub old_state: Vec<serde_json::Value>,
}

/// What a callback answers when it changes the state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateMigrationResult {
    /// The new subtree, as checkpoint JSON resources.
    pub new_state: serde_json::Value,
    /// Old URN -> new URN for every input URN the result omits.
    #[serde(default)]
    pub successors: BTreeMap<String, String>,
}

/// The answer of a callback: `None` means no change.
pub type CallbackResult = Result<Option<StateMigrationResult>, ProgramError>;

/// A boxed future answering a callback.
pub type CallbackFuture = Pin<Box<dyn Future<Output = CallbackResult> + Send>>;

/// A migration callback.
#[derive(Clone)]
pub enum MigrationCallback {
    /// A synchronous closure (run on the blocking pool).
    Sync(Arc<dyn Fn(StateMigrationArgs) -> CallbackResult + Send + Sync>),
    /// An asynchronous closure.
    Async(Arc<dyn Fn(StateMigrationArgs) -> CallbackFuture + Send + Sync>),
}

impl MigrationCallback {
    /// A synchronous callback.
    pub fn sync(f: impl Fn(StateMigrationArgs) -> CallbackResult + Send + Sync + 'static) -> Self {
        Self::Sync(Arc::new(f))
    }

    /// An asynchronous callback.
    pub fn new_async<F, Fut>(f: F) -> Self
    where
        F: Fn(StateMigrationArgs) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = CallbackResult> + Send + 'static,
    {
        Self::Async(Arc::new(move |args| Box::pin(f(args))))
    }

    /// Runs the callback with a timeout. A panic, an error or running past
    /// the timeout is an error (the coordinator reports `callback-failed`).
    ///
    /// # Errors
    /// The callback's error, its panic message, or the timeout.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the callback (a synchronous one runs to
    /// its end on the blocking pool; its answer is discarded).
    pub async fn call(
        &self,
        args: StateMigrationArgs,
        timeout: Duration,
    ) -> Result<Option<StateMigrationResult>, String> {
        let run = async {
            match self {
                Self::Sync(f) => {
                    let f = f.clone();
                    match tokio::task::spawn_blocking(move || f(args)).await {
                        Ok(r) => r.map_err(|e| e.to_string()),
                        Err(e) => Err(panic_text(e)),
                    }
                }
                Self::Async(f) => {
                    // Aborted when this future is dropped (the timeout), so
                    // an async callback does not outlive its deadline.
                    let mut handle = AbortOnDrop(tokio::spawn(f(args)));
                    match (&mut handle.0).await {
                        Ok(r) => r.map_err(|e| e.to_string()),
                        Err(e) => Err(panic_text(e)),
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(r) => r,
            Err(_) => Err(format!("it did not answer within {timeout:?}")),
        }
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => match p.downcast::<String>() {
            Ok(s) => format!("it panicked: {s}"),
            Err(p) => match p.downcast::<&str>() {
                Ok(s) => format!("it panicked: {s}"),
                Err(_) => "it panicked".into(),
            },
        },
        Err(e) => format!("it was cancelled: {e}"),
    }
}

impl fmt::Debug for MigrationCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sync(_) => "MigrationCallback::Sync",
            Self::Async(_) => "MigrationCallback::Async",
        })
    }
}

impl PartialEq for MigrationCallback {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Sync(a), Self::Sync(b)) => Arc::ptr_eq(a, b),
            (Self::Async(a), Self::Async(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// The callbacks of one registration and their timeout.
#[derive(Debug, Clone, PartialEq)]
pub struct StateMigrations {
    /// The callbacks, in order.
    pub callbacks: Vec<MigrationCallback>,
    /// How long each may run.
    pub timeout: Duration,
}

impl Default for StateMigrations {
    fn default() -> Self {
        Self {
            callbacks: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl StateMigrations {
    /// Callbacks with the default timeout.
    pub fn new(callbacks: Vec<MigrationCallback>) -> Self {
        Self {
            callbacks,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// True when there is no callback.
    pub fn is_empty(&self) -> bool {
        self.callbacks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> StateMigrationArgs {
        StateMigrationArgs {
            urn: Urn::parse("urn:pulumi:d::p::a:b:C::n").unwrap(),
            old_state: vec![],
        }
    }

    #[tokio::test]
    async fn sync_async_errors_panics_and_timeouts() {
        let none = MigrationCallback::sync(|_| Ok(None));
        assert_eq!(none.call(args(), DEFAULT_TIMEOUT).await, Ok(None));
        let some = MigrationCallback::new_async(|a: StateMigrationArgs| async move {
            Ok(Some(StateMigrationResult {
                new_state: serde_json::json!([{"urn": a.urn}]),
                successors: BTreeMap::new(),
            }))
        });
        assert!(some.call(args(), DEFAULT_TIMEOUT).await.unwrap().is_some());
        let err = MigrationCallback::sync(|_| Err("boom".into()));
        assert_eq!(err.call(args(), DEFAULT_TIMEOUT).await, Err("boom".into()));
        let panics = MigrationCallback::sync(|_| panic!("kaboom"));
        assert!(panics
            .call(args(), DEFAULT_TIMEOUT)
            .await
            .unwrap_err()
            .contains("kaboom"));
        let slow = MigrationCallback::new_async(|_| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(None)
        });
        assert!(slow
            .call(args(), Duration::from_millis(20))
            .await
            .unwrap_err()
            .contains("did not answer"));
    }
}
