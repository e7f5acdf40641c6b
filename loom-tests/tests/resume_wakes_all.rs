//! Model: resume wakes every waiter.
//!
//! Invariant: with the gate quiesced, two threads blocked in
//! `reserve_blocking` and one task awaiting `reserve()` all get their
//! reservation after a single `resume` (loom reports a deadlock if any is
//! left asleep), and none of them holds a reservation while the gate is
//! quiesced. A second quiesce right after finds no reservation left.
//!
//! Broken twin caught here: `keel_loom_broken="wake_one"`: resume notifies
//! one blocked thread and one waiting task instead of all of them.
#![cfg(keel_loom)]

use loom::future::block_on;
use loom::thread;
use loom_tests::sync::gate::{Gate, GateCounters};
use loom_tests::sync::shim::{Arc, AtomicBool, Ordering::Relaxed};

#[test]
fn resume_wakes_every_waiter() {
    loom_tests::model(|| {
        let gate = Gate::new();
        let quiesced = Arc::new(AtomicBool::new(true));
        let token = gate.quiesce_blocking();

        let blocking = |gate: Gate, quiesced: Arc<AtomicBool>| {
            thread::spawn(move || {
                let permit = gate.reserve_blocking();
                assert!(!quiesced.load(Relaxed), "reserved while quiesced");
                drop(permit);
            })
        };
        let t1 = blocking(gate.clone(), Arc::clone(&quiesced));
        let t2 = blocking(gate.clone(), Arc::clone(&quiesced));
        let task = {
            let (gate, quiesced) = (gate.clone(), Arc::clone(&quiesced));
            thread::spawn(move || {
                block_on(async {
                    let permit = gate.reserve().await;
                    assert!(!quiesced.load(Relaxed), "reserved while quiesced");
                    drop(permit);
                });
            })
        };

        quiesced.store(false, Relaxed);
        token.resume();

        t1.join().expect("blocked thread 1");
        t2.join().expect("blocked thread 2");
        task.join().expect("waiting task");

        let again = gate.quiesce_blocking();
        assert_eq!(gate.active(), 0);
        again.resume();
        assert_eq!(gate.counters(), GateCounters::default());
    });
}
