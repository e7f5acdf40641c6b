//! loom models of `keel`'s concurrency core.
//!
//! This crate compiles the real `src/sync/` of the `keel` package (included
//! by `#[path]`, not copied), so what loom checks is exactly what the engine
//! runs. Built normally it uses `std`/arc-swap, and `cargo test -p
//! loom-tests` runs the core's own unit tests; built with
//! `RUSTFLAGS="--cfg keel_loom"` the core runs on loom's types and the
//! models in `tests/` (each gated `#![cfg(keel_loom)]`) are explored.
//!
//! Every model runs under `model` (present under `keel_loom`), which bounds
//! preemptions to [`DEFAULT_MAX_PREEMPTIONS`] unless `LOOM_MAX_PREEMPTIONS`
//! says otherwise; within that bound each model is explored to exhaustion. See
//! `loom-tests/README.md` for the models, their broken twins, and how CI
//! runs them (`.ci/loom.sh`).

#[path = "../../src/sync/mod.rs"]
pub mod sync;

/// Preemption bound used when `LOOM_MAX_PREEMPTIONS` is not set.
pub const DEFAULT_MAX_PREEMPTIONS: usize = 3;

/// Runs `f` as a loom model, exploring every interleaving within the
/// preemption bound (`LOOM_MAX_PREEMPTIONS`, default
/// [`DEFAULT_MAX_PREEMPTIONS`]).
///
/// Prints the number of interleavings explored (shown with
/// `--nocapture`).
///
/// # Panics
///
/// Panics (failing the test) when any explored interleaving panics or
/// deadlocks, or leaks a loom object.
#[cfg(keel_loom)]
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    use std::sync::atomic::{AtomicUsize, Ordering};

    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(DEFAULT_MAX_PREEMPTIONS);
    }
    let explored = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&explored);
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom: explored {} interleavings (preemption bound {:?})",
        explored.load(Ordering::Relaxed),
        builder.preemption_bound
    );
}

pub mod support;
