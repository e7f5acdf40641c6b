//! The one file through which the concurrency core gets its primitives.
//!
//! Normally these are the `std` types and [`arc_swap::ArcSwap`]. Under
//! `--cfg keel_loom` they are loom's model-checked types, and `ArcSwap` is a
//! stand-in (an `RwLock<Arc<T>>` inside; arc-swap does not run under loom)
//! with the methods the core and the engine use: `new`, `from_pointee`,
//! `load`, `load_full`, `store` and `swap`. Under loom `load` returns an
//! `Arc<T>` rather than arc-swap's guard, so code that must build both ways
//! uses `load_full`.
//!
//! The crate-specific cfg `keel_loom` is used rather than a Cargo feature
//! (features unify across the workspace and would put loom types into
//! ordinary test builds) or the global `loom` cfg (which changes tokio when
//! tokio is compiled in the same run).
//!
//! `Mutex::lock` returns a `LockResult` both ways (loom mirrors `std`), so
//! callers handle poisoning identically in both builds.

#[cfg(not(keel_loom))]
pub use arc_swap::ArcSwap;
#[cfg(not(keel_loom))]
pub use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(not(keel_loom))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(keel_loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
#[cfg(keel_loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The poison error of [`Mutex::lock`]; the same `std` type in both builds.
pub use std::sync::PoisonError;

/// Loom stand-in for `arc_swap::ArcSwap<T>`: an atomically replaceable
/// `Arc<T>`, modelled as an `RwLock<Arc<T>>` so that loom explores the
/// interleavings of loads and stores.
#[cfg(keel_loom)]
#[derive(Debug)]
pub struct ArcSwap<T> {
    slot: loom::sync::RwLock<Arc<T>>,
}

#[cfg(keel_loom)]
impl<T> ArcSwap<T> {
    /// Creates a cell holding `value`.
    pub fn new(value: Arc<T>) -> Self {
        Self {
            slot: loom::sync::RwLock::new(value),
        }
    }

    /// Creates a cell holding a new `Arc` of `value`.
    pub fn from_pointee(value: T) -> Self {
        Self::new(Arc::new(value))
    }

    /// Returns the current value. (arc-swap returns a guard; under loom this
    /// is the same as [`ArcSwap::load_full`].)
    pub fn load(&self) -> Arc<T> {
        self.load_full()
    }

    /// Returns a clone of the current `Arc`.
    pub fn load_full(&self) -> Arc<T> {
        Arc::clone(&self.slot.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the current value with `value`.
    pub fn store(&self, value: Arc<T>) {
        drop(self.swap(value));
    }

    /// Replaces the current value with `value`, returning the previous one.
    pub fn swap(&self, value: Arc<T>) -> Arc<T> {
        let mut slot = self.slot.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::replace(&mut *slot, value)
    }
}
