//! The crate's one mutex policy, as tokio has one: a poisoned
//! [`std::sync::Mutex`] is recovered, not propagated.
//!
//! keel's mutexes guard plain data (counters, caches, lists, one state) and
//! no critical section leaves that data half-updated across a point that can
//! panic, so a panic elsewhere while a guard was held (which the actor
//! supervisor reports on its own) leaves the data usable. Every lock in the
//! crate outside `sync/` (whose shim has its own rule for loom) goes
//! through [`MutexExt::locked`]; none is held across an `.await`.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locking without poisoning.
pub(crate) trait MutexExt<T> {
    /// Locks, recovering the data of a poisoned mutex.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> MutexExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
