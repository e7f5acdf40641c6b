//! The crate's one mutex policy, as tokio has one: a poisoned
//! [`std::sync::Mutex`] is recovered, not propagated.
//!
//! keel's mutexes guard plain data (counters, caches, lists, one state) and
//! no critical section leaves that data half-updated across a point that can
//! panic, so a panic elsewhere while a guard was held (which the actor
//! supervisor reports on its own) leaves the data usable. Every lock in the
//! crate outside `sync/` (whose shim has its own rule for loom) goes
//! through [`MutexExt::locked`]; none is held across an `.await`. The
//! one condition variable outside `sync/` (the simulated cloud's timer)
//! waits through [`CondvarExt`], under the same policy.

#[cfg(feature = "sim")]
use std::sync::Condvar;
use std::sync::{Mutex, MutexGuard, PoisonError};
#[cfg(feature = "sim")]
use std::time::Duration;

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

/// Waiting on a condition variable without poisoning.
#[cfg(feature = "sim")]
pub(crate) trait CondvarExt {
    /// Waits for a notification, recovering a poisoned mutex's guard.
    fn wait_locked<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;

    /// Waits for a notification or `timeout`, recovering a poisoned
    /// mutex's guard.
    fn wait_timeout_locked<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> MutexGuard<'a, T>;
}

#[cfg(feature = "sim")]
impl CondvarExt for Condvar {
    fn wait_locked<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    fn wait_timeout_locked<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> MutexGuard<'a, T> {
        match self.wait_timeout(guard, timeout) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }
}
