//! The concurrency core: the execution gate and the commit of a migration.
//!
//! This module is the part of `keel` that loom model-checks
//! (`architecture.md` §5). It is built only on [`shim`], which hands out
//! `std`/`arc-swap` primitives normally and `loom` primitives (plus an
//! `ArcSwap` stand-in) when compiled with `--cfg keel_loom`. It has no tokio
//! and no ractor in it, and nothing in it refers to the rest of the crate:
//! the `loom-tests` workspace member includes these very files with
//! `#[path]`, so the code the engine runs is the code loom checks.
//!
//! - [`gate`]: the execution gate. Every step chain holds a [`Reservation`]
//!   from submission until its last step finishes; a migration takes the gate
//!   with [`Gate::quiesce`] / [`Gate::quiesce_blocking`], which waits for the
//!   reservations in flight to drain and is never overtaken by a reservation
//!   asked for after it. [`Quiesced::resume`] reopens the gate and wakes every
//!   waiter. The async face (the futures the executor awaits) and the blocking
//!   face share one mutex-protected state, so neither can lose a wake-up.
//! - [`mod@commit`]: publishing a prepared migration transaction
//!   (`migrations.md` §7) into the published prior list, generic over the
//!   state type through [`CommitFields`]. It demands a [`Quiesced`] token, so
//!   no reader holding a reservation can observe a half-committed
//!   deployment.
//!
//! # Fault injection
//!
//! Under `--cfg keel_loom_broken="NAME"` one deliberate fault is compiled
//! into this code, giving the broken twins that the loom models must catch
//! (see `loom-tests/README.md`). A fault is active only together with
//! `--cfg keel_loom`, so it can never reach an engine build. The faulty
//! branches are selected with `cfg!` rather than `#[cfg]`, so they are
//! type-checked (and cannot rot) in every build and folded away in all but
//! their twin's.

/// Whether the fault `$name` is injected: true only under both
/// `--cfg keel_loom` and `--cfg keel_loom_broken="$name"`.
macro_rules! fault {
    ($name:tt) => {
        cfg!(all(keel_loom, keel_loom_broken = $name))
    };
}

pub mod commit;
pub mod gate;
pub mod shim;

pub use commit::{commit, CommitFields, Slot, StateList, Transaction};
pub use gate::{Gate, GateCounters, QuiesceFuture, Quiesced, Reservation, ReserveFuture, Reserved};
