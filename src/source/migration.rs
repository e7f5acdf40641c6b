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
    /// the timeout is an error (the coordinator reports `callback-failed`);
    /// its message has the secrets of `args` redacted ([`Redactor`]) and is
    /// at most [`MAX_ERROR`] bytes long.
    ///
    /// # Errors
    /// The callback's error, its panic message, or the timeout.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the callback (a synchronous one runs to
    /// its end on the blocking pool; its answer is discarded). On a
    /// multi-threaded runtime a synchronous callback is waited for in place
    /// (`block_in_place`, up to the timeout), so the future completes
    /// without yielding: it cannot be dropped during that wait.
    pub async fn call(
        &self,
        args: StateMigrationArgs,
        timeout: Duration,
    ) -> Result<Option<StateMigrationResult>, String> {
        // The message of a failure quotes no secret it was given.
        let mut redactor = Redactor::default();
        args.old_state.iter().for_each(|s| redactor.collect(s));
        if let Self::Sync(f) = self {
            if let Ok(tokio::runtime::RuntimeFlavor::MultiThread) =
                tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor())
            {
                return call_blocking(f.clone(), args, timeout).map_err(|e| redactor.message(&e));
            }
        }
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
            Ok(r) => r.map_err(|e| redactor.message(&e)),
            Err(_) => Err(format!("it did not answer within {timeout:?}")),
        }
    }
}

/// What stands for a secret's plaintext in a callback's error message.
pub const REDACTED: &str = "[secret]";

/// The longest callback error message kept (longer ones are cut, after
/// their secrets are redacted).
pub const MAX_ERROR: usize = 8192;

/// The plaintexts of the secrets a callback was given (and, when it
/// answered JSON, returned), kept out of its error messages: a failing
/// callback's output may quote its input, which carries decrypted secrets.
///
/// A secret's string leaves are redacted as they are and in their JSON
/// escapings (once and twice: the envelope carries a secret's value as
/// JSON text); a non-string value also as its JSON text. Numbers and
/// booleans inside secrets are not searched for.
///
/// Texts are kept in the order learnt (adding one is a set insert, so an
/// operation that sends thousands of secrets pays no sort per secret); a
/// redaction replaces the texts found in its input, longest first.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    texts: Vec<String>,
    seen: std::collections::HashSet<String>,
}

impl Redactor {
    /// Adds the secrets of callback JSON: checkpoint-encoded resources
    /// (`plaintext`), wire-encoded values (`value`) and secret outputs.
    pub fn collect(&mut self, v: &serde_json::Value) {
        use crate::model::property::{SIG_KEY, SIG_OUTPUT_VALUE, SIG_SECRET};
        use serde_json::Value;
        match v {
            Value::Array(a) => a.iter().for_each(|v| self.collect(v)),
            Value::Object(m) => {
                let sig = m.get(SIG_KEY).and_then(Value::as_str);
                let secret_output = sig == Some(SIG_OUTPUT_VALUE)
                    && m.get("secret").and_then(Value::as_bool) == Some(true);
                if sig == Some(SIG_SECRET) {
                    if let Some(text) = m.get("plaintext").and_then(Value::as_str) {
                        self.add(text);
                        if let Ok(inner) = serde_json::from_str::<Value>(text) {
                            self.leaves(&inner);
                        }
                    }
                    if let Some(inner) = m.get("value") {
                        self.leaves(inner);
                        self.add(&inner.to_string());
                    }
                } else if secret_output {
                    if let Some(inner) = m.get("value") {
                        self.leaves(inner);
                        self.add(&inner.to_string());
                    }
                } else {
                    m.values().for_each(|v| self.collect(v));
                }
            }
            _ => {}
        }
    }

    /// Adds the secrets among `values` at any depth: plaintext secrets and
    /// the values of secret outputs (what a provider is sent). Returns the
    /// texts that were new.
    pub fn collect_values<'a>(
        &mut self,
        values: impl IntoIterator<Item = &'a crate::model::PropertyValue>,
    ) -> &[String] {
        use crate::model::property::Secret;
        use crate::model::PropertyValue as V;
        fn walk(r: &mut Redactor, v: &V) {
            match v {
                V::Secret(Secret::Plaintext(p)) => r.secret(&p.value().to_json()),
                V::Output(o) if o.secret == Some(true) => {
                    if let Some(v) = &o.value {
                        r.secret(&v.to_json());
                    }
                }
                V::Output(o) => {
                    if let Some(v) = &o.value {
                        walk(r, v);
                    }
                }
                V::Array(a) => a.iter().for_each(|v| walk(r, v)),
                V::Object(m) if m.may_hold_signed() => m.values().for_each(|v| walk(r, v)),
                _ => {}
            }
        }
        let before = self.texts.len();
        values.into_iter().for_each(|v| walk(self, v));
        &self.texts[before..]
    }

    /// Adds each of `texts` as it is (already with its escapings).
    pub fn add_texts(&mut self, texts: impl IntoIterator<Item = String>) {
        for t in texts {
            self.insert(t);
        }
    }

    fn insert(&mut self, t: String) {
        if !t.is_empty() && !self.seen.contains(&t) {
            self.seen.insert(t.clone());
            self.texts.push(t);
        }
    }

    /// Adds a secret's value: its string leaves, and a non-string value
    /// as its JSON text.
    fn secret(&mut self, v: &serde_json::Value) {
        self.leaves(v);
        if !v.is_string() {
            self.add(&v.to_string());
        }
    }

    /// The texts redacted, in the order learnt.
    pub fn texts(&self) -> &[String] {
        &self.texts
    }

    /// Every string inside a secret's value.
    fn leaves(&mut self, v: &serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::String(s) => self.add(s),
            Value::Array(a) => a.iter().for_each(|v| self.leaves(v)),
            Value::Object(m) => m.values().for_each(|v| self.leaves(v)),
            _ => {}
        }
    }

    /// `text` and its JSON escapings.
    fn add(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let once = serde_json::to_string(text).unwrap_or_default();
        let once = once[1..once.len() - 1].to_owned();
        let twice = serde_json::to_string(&once).unwrap_or_default();
        let twice = twice[1..twice.len() - 1].to_owned();
        for t in [text.to_owned(), once, twice] {
            self.insert(t);
        }
    }

    /// The length of the longest text redacted (0: none): a window cut
    /// out of a longer output drops this much at a cut edge, where a
    /// partial secret could stand.
    pub fn longest(&self) -> usize {
        self.texts.iter().map(String::len).max().unwrap_or(0)
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut found: Vec<&str> = self
            .texts
            .iter()
            .map(String::as_str)
            .filter(|t| text.contains(t))
            .collect();
        // Longer first, so a secret containing another goes whole.
        found.sort_by_key(|t| std::cmp::Reverse(t.len()));
        let mut out = text.to_owned();
        for t in found {
            if out.contains(t) {
                out = out.replace(t, REDACTED);
            }
        }
        out
    }

    /// An error message redacted, then cut to [`MAX_ERROR`] bytes.
    pub fn message(&self, text: &str) -> String {
        let mut out = self.redact(text);
        if out.len() > MAX_ERROR {
            let mut end = MAX_ERROR;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
            out.push_str(" [... cut]");
        }
        out
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
        Ok(p) => payload_text(p),
        Err(e) => format!("it was cancelled: {e}"),
    }
}

/// The message of a panic's payload.
fn payload_text(p: Box<dyn std::any::Any + Send>) -> String {
    match p.downcast::<String>() {
        Ok(s) => format!("it panicked: {s}"),
        Err(p) => match p.downcast::<&str>() {
            Ok(s) => format!("it panicked: {s}"),
            Err(_) => "it panicked".into(),
        },
    }
}

/// A synchronous callback on a multi-threaded runtime: run on the blocking
/// pool while this worker blocks for its answer (`block_in_place`, which
/// hands the worker's other tasks on), up to `timeout`. Awaited instead,
/// the answer would wake the coordinator through the runtime's shared
/// queue, behind every task the program has ready; a migration is
/// quiesced, so waiting here holds nothing else up. Past the timeout the
/// callback runs on to its end and its answer is discarded.
fn call_blocking(
    f: Arc<dyn Fn(StateMigrationArgs) -> CallbackResult + Send + Sync>,
    args: StateMigrationArgs,
    timeout: Duration,
) -> Result<Option<StateMigrationResult>, String> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    tokio::task::spawn_blocking(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(args)));
        let _ = tx.send(r);
    });
    match tokio::task::block_in_place(|| rx.recv_timeout(timeout)) {
        Ok(Ok(r)) => r.map_err(|e| e.to_string()),
        Ok(Err(p)) => Err(payload_text(p)),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            Err(format!("it did not answer within {timeout:?}"))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err("it was cancelled".into()),
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

    #[test]
    fn secrets_are_redacted_in_every_escaping_and_messages_capped() {
        use crate::model::property::{SIG_KEY, SIG_OUTPUT_VALUE, SIG_SECRET};
        let state = serde_json::json!([{
            "urn": "urn:pulumi:d::p::a:b:C::n",
            "inputs": {
                "pw": {SIG_KEY: SIG_SECRET, "plaintext": "\"hun\\\"ter2\""},
                "obj": {SIG_KEY: SIG_SECRET, "plaintext": "{\"k\":\"deep-secret\"}"},
                "out": {SIG_KEY: SIG_OUTPUT_VALUE, "secret": true, "value": "out-secret"},
                "plain": "visible"
            }
        }]);
        let mut r = Redactor::default();
        r.collect(&state);
        // The envelope as a callback echoes it, and the values themselves.
        let echoed = format!("{state} hun\"ter2 deep-secret out-secret visible");
        let shown = r.redact(&echoed);
        for secret in ["hun", "deep-secret", "out-secret"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("visible") && shown.contains(REDACTED),
            "{shown}"
        );
        let long = "x".repeat(MAX_ERROR * 2);
        assert!(r.message(&long).len() < MAX_ERROR + 20);

        // Learnt shortest first, a secret holding another still goes whole.
        let mut r = Redactor::default();
        r.add_texts(["pass".to_owned(), "passphrase".to_owned(), String::new()]);
        assert_eq!(r.longest(), 10);
        assert_eq!(
            r.redact("a passphrase, a pass"),
            format!("a {REDACTED}, a {REDACTED}")
        );
    }

    #[test]
    fn the_secrets_of_property_values_are_redacted_in_provider_errors() {
        use crate::model::property::{OutputValue, Secret};
        use crate::model::{PropertyMap, PropertyValue as V};
        use crate::provider::ProviderError;
        let secret = |v: V| V::Secret(Secret::plaintext(v));
        let mut nested = PropertyMap::new();
        nested.insert("pw".into(), secret(V::from("nested-pw")));
        let mut doc = PropertyMap::new();
        doc.insert("k".into(), V::from("in-a-secret-object"));
        let values = [
            V::from("visible"),
            V::Object(nested),
            V::Array(vec![secret(V::Object(doc))]),
            V::Output(Box::new(OutputValue {
                value: Some(Box::new(V::from("output-pw"))),
                secret: Some(true),
                dependencies: None,
            })),
        ];
        let mut r = Redactor::default();
        assert!(!r.collect_values(&values).is_empty());
        assert!(
            r.collect_values(&values).is_empty(),
            "nothing new the second time"
        );
        assert!(Redactor::default()
            .collect_values(&[V::from("visible")])
            .is_empty());
        let urn = Urn::parse("urn:pulumi:d::p::a:b:C::n").unwrap();
        let said = "nested-pw, in-a-secret-object, output-pw, \"nested-pw\", visible";
        let errors = [
            ProviderError::Failed {
                operation: "create",
                urn: urn.clone(),
                message: said.into(),
            },
            ProviderError::CheckFailed {
                urn: urn.clone(),
                failures: vec![said.into()],
            },
            ProviderError::InitFailed {
                operation: "create",
                urn,
                object: Box::new(crate::provider::ObjectState {
                    id: "i-1".into(),
                    inputs: PropertyMap::new(),
                    outputs: PropertyMap::new(),
                }),
                reasons: vec![said.into()],
                message: said.into(),
            },
        ];
        for e in errors {
            let e = e.redacted(&r);
            let text = format!("{e} {e:?}");
            for secret in ["nested-pw", "in-a-secret-object", "output-pw"] {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
            assert!(
                text.contains("visible") && text.contains(REDACTED),
                "{text}"
            );
        }
    }

    #[tokio::test]
    async fn a_failing_callbacks_message_quotes_no_secret_it_was_given() {
        quotes_no_secret().await;
    }

    /// The same on a multi-threaded runtime, where a synchronous callback
    /// is waited for in place.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_callbacks_message_quotes_no_secret_it_was_given_multi_threaded() {
        quotes_no_secret().await;
    }

    async fn quotes_no_secret() {
        use crate::model::property::{SIG_KEY, SIG_SECRET};
        let cb = MigrationCallback::sync(|a: StateMigrationArgs| {
            Err(format!("cannot handle {}", serde_json::Value::from(a.old_state)).into())
        });
        let mut a = args();
        a.old_state = vec![serde_json::json!({
            "inputs": {"pw": {SIG_KEY: SIG_SECRET, "plaintext": "\"s3cr3t-value\""}}
        })];
        let e = cb.call(a, Duration::from_secs(5)).await.unwrap_err();
        assert!(
            e.contains("cannot handle") && !e.contains("s3cr3t-value"),
            "{e}"
        );
    }

    fn args() -> StateMigrationArgs {
        StateMigrationArgs {
            urn: Urn::parse("urn:pulumi:d::p::a:b:C::n").unwrap(),
            old_state: vec![],
        }
    }

    #[tokio::test]
    async fn sync_async_errors_panics_and_timeouts() {
        outcomes().await;
    }

    /// The same on a multi-threaded runtime, where a synchronous callback
    /// is waited for in place.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sync_async_errors_panics_and_timeouts_multi_threaded() {
        outcomes().await;
    }

    async fn outcomes() {
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
        let slow_sync = MigrationCallback::sync(|_| {
            std::thread::sleep(Duration::from_millis(300));
            Ok(None)
        });
        assert!(slow_sync
            .call(args(), Duration::from_millis(20))
            .await
            .unwrap_err()
            .contains("did not answer"));
    }
}
