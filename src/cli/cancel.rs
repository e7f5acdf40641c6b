//! `keel cancel`: asks the operation holding a stack's lock to stop
//! gracefully, the way a first Ctrl-C does (no new step starts, the steps
//! in flight finish and are saved, the lock is released).
//!
//! The request is a file, `stacks/<name>/cancel-request`, written
//! atomically; it names who asked and the lock holder it is meant for (pid
//! and host, read from the lock file). A running `up`, `refresh` or
//! `destroy` watches for it ([`watch`], every 200 ms, from when it took the
//! lock until it ends): a request for it triggers the operation's
//! [`Cancel`]; a request for another holder (left by an earlier operation
//! that ended first) is stale and removed. A request for the operation is
//! removed when it ends.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::CliError;
use crate::engine::Cancel;
use crate::persist::fs::Holder;
use crate::persist::store::Store;

/// The request file in a stack's directory.
pub use crate::persist::store::CANCEL_FILE;

/// How often a running operation looks for a request.
const POLL: Duration = Duration::from_millis(200);

/// A request to stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelRequest {
    /// The holder the request is for: its pid ...
    pub target_pid: u32,
    /// ... and host.
    pub target_host: String,
    /// Who asked (`$USER`).
    pub user: String,
    /// From which host ...
    pub host: String,
    /// ... and process.
    pub pid: u32,
    /// When (RFC 3339).
    pub asked: String,
}

/// `keel cancel [--stack] [--yes]`.
///
/// # Errors
/// [`CliError::NoStack`], [`CliError::NotRunning`] when no operation holds
/// the stack's lock, [`CliError::NeedsYes`], [`CliError::Declined`],
/// [`CliError::Persist`] when the request cannot be written.
pub fn cancel(backend: &Path, stack: &str, yes: bool) -> Result<(), CliError> {
    let b = super::commands::existing(backend, stack)?;
    let Some(h) = b.holder(stack)? else {
        return Err(CliError::NotRunning {
            stack: stack.to_owned(),
        });
    };
    let who = format!(
        "`{}` (pid {} on {}, since {})",
        h.command, h.pid, h.host, h.started
    );
    super::confirm::confirm(
        "keel cancel",
        &format!("Cancel {who} on stack `{stack}`?"),
        yes,
    )?;
    let me = Holder::me("keel cancel");
    let request = CancelRequest {
        target_pid: h.pid,
        target_host: h.host.clone(),
        user: user(),
        host: me.host,
        pid: me.pid,
        asked: me.started,
    };
    let bytes = serde_json::to_vec(&request).unwrap_or_default();
    b.set_cancel_request(stack, Some(&bytes))?;
    eprintln!("asked {who} to stop: no new step starts, the steps in flight finish and are saved, then it releases stack `{stack}`");
    Ok(())
}

/// `$USER`, else `unknown`.
fn user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "unknown".into())
}

/// A running operation's watch for cancel requests; dropping it stops the
/// watch and removes the request.
#[derive(Debug)]
pub struct Watch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    store: Store,
    stack: String,
}

/// Watches stack `stack`'s request file for this process: a request for it
/// triggers `cancel` (and says who asked); a stale one is removed.
pub fn watch(backend: &Path, stack: &str, cancel: Cancel) -> Watch {
    let store = Store::new(backend);
    let stop = Arc::new(AtomicBool::new(false));
    let me = Holder::me("");
    // A request left for an earlier holder goes now, as the lock is taken.
    let for_me = |r: &CancelRequest| r.target_pid == me.pid && r.target_host == me.host;
    if let Ok(Some(bytes)) = store.cancel_request(stack) {
        if !serde_json::from_slice::<CancelRequest>(&bytes).is_ok_and(|r| for_me(&r)) {
            let _ = store.set_cancel_request(stack, None);
        }
    }
    let (p, s, name) = (store.clone(), stop.clone(), stack.to_owned());
    let thread = std::thread::Builder::new()
        .name("keel-cancel-watch".into())
        .spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Ok(Some(bytes)) = p.cancel_request(&name) {
                    match serde_json::from_slice::<CancelRequest>(&bytes) {
                        Ok(r) if r.target_pid == me.pid && r.target_host == me.host => {
                            eprintln!(
                                "warning: cancelled by `keel cancel` ({}@{}, pid {}, at {}): no new step starts, the steps in flight finish and are saved",
                                r.user, r.host, r.pid, r.asked
                            );
                            cancel.cancel();
                            return;
                        }
                        // For an earlier holder, or unreadable: stale.
                        _ => {
                            let _ = p.set_cancel_request(&name, None);
                        }
                    }
                }
                std::thread::sleep(POLL);
            }
        })
        .ok();
    Watch {
        stop,
        thread,
        store,
        stack: stack.to_owned(),
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Only a request for this process: after the lock was released,
        // one may already be there for the next holder.
        let mine = self
            .store
            .cancel_request(&self.stack)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice::<CancelRequest>(&b).ok())
            .is_some_and(|r| r.target_pid == std::process::id());
        if mine {
            let _ = self.store.set_cancel_request(&self.stack, None);
        }
    }
}
