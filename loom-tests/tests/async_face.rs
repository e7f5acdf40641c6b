//! Model: the async face of the gate.
//!
//! Invariants:
//! - `quiesce_and_reserve_tasks`: a task awaiting `quiesce()` is woken when
//!   the last reservation is released (and not before it is released); a
//!   task awaiting `reserve()` never holds its reservation while the other
//!   task holds the gate, and is woken by the resume if it had to wait.
//! - `dropped_quiesce_future_wakes_reserver`: dropping a pending quiesce
//!   future (cancellation) withdraws its request and wakes a task that was
//!   waiting behind it.
//!
//! Nobody is left asleep in either (loom reports a deadlock otherwise).
//!
//! Broken twin caught here: `keel_loom_broken="no_register"`: a future
//! returns `Pending` without registering its waker.
#![cfg(keel_loom)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};

use loom::future::block_on;
use loom::thread;
use loom_tests::sync::gate::{Gate, GateCounters};
use loom_tests::sync::shim::{Arc, AtomicBool, Ordering::Relaxed};

#[test]
fn quiesce_and_reserve_tasks() {
    loom_tests::model(|| {
        let gate = Gate::new();
        let held = gate.try_reserve().expect("open gate");
        let released = Arc::new(AtomicBool::new(false));
        let migrating = Arc::new(AtomicBool::new(false));

        let quiescer = {
            let (gate, released, migrating) =
                (gate.clone(), Arc::clone(&released), Arc::clone(&migrating));
            thread::spawn(move || {
                block_on(async {
                    let token = gate.quiesce().await;
                    assert!(released.load(Relaxed), "quiesced over a live reservation");
                    migrating.store(true, Relaxed);
                    migrating.store(false, Relaxed);
                    token.resume();
                });
            })
        };
        let reserver = {
            let (gate, migrating) = (gate.clone(), Arc::clone(&migrating));
            thread::spawn(move || {
                block_on(async {
                    let permit = gate.reserve().await;
                    assert!(!migrating.load(Relaxed), "reserved during a migration");
                    drop(permit);
                });
            })
        };

        released.store(true, Relaxed);
        drop(held);

        quiescer.join().expect("quiescing task");
        reserver.join().expect("reserving task");
        assert_eq!(gate.counters(), GateCounters::default());
    });
}

#[test]
fn dropped_quiesce_future_wakes_reserver() {
    loom_tests::model(|| {
        let gate = Gate::new();
        let held = gate.try_reserve().expect("open gate");
        // The request is recorded when the future is created.
        let mut quiesce = gate.quiesce();

        let reserver = {
            let gate = gate.clone();
            thread::spawn(move || {
                drop(block_on(gate.reserve()));
            })
        };

        // Poll it once (it must wait: a reservation is held), then cancel it.
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut quiesce).poll(&mut cx).is_pending());
        drop(quiesce);

        reserver.join().expect("reserving task");
        drop(held);
        assert_eq!(gate.counters(), GateCounters::default());
    });
}
