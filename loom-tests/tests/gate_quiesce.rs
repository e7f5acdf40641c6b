//! Model: quiesce with one chain running and one queued.
//!
//! Invariant: the quiescer's token is handed out only after BOTH chains
//! (the running one and the queued one, each holding a reservation since
//! submission) have finished; a chain submitted after the quiesce request
//! was recorded does not start until the quiescer resumed (a waiting
//! quiescer is never overtaken); nobody is left blocked (no lost wake-up:
//! loom reports a deadlock otherwise). The flags are `Relaxed` on purpose:
//! the happens-before must come from the gate itself.
//!
//! Broken twins caught here:
//! - `keel_loom_broken="overtake"`: a reservation asked for while a quiescer
//!   waits is granted (only a closed gate stops it);
//! - `keel_loom_broken="lost_wakeup"`: the blocking quiescer checks the
//!   count and starts waiting under two separate lock acquisitions.
#![cfg(keel_loom)]

use loom::thread;
use loom_tests::sync::gate::{Gate, GateCounters};
use loom_tests::sync::shim::{Arc, AtomicBool, AtomicUsize, Ordering::Relaxed};

#[test]
fn quiesce_waits_for_running_and_queued_chains() {
    loom_tests::model(|| {
        let gate = Gate::new();
        let finished = Arc::new(AtomicUsize::new(0));
        let resumed = Arc::new(AtomicBool::new(false));

        // Both chains were submitted, so both hold reservations.
        let running = gate.try_reserve().expect("open gate");
        let queued = gate.try_reserve().expect("open gate");

        // A pool of one worker: the queued chain starts when the running
        // one has finished.
        let worker = {
            let finished = Arc::clone(&finished);
            thread::spawn(move || {
                finished.fetch_add(1, Relaxed);
                drop(running);
                finished.fetch_add(1, Relaxed);
                drop(queued);
            })
        };

        let quiescer = {
            let (gate, finished, resumed) =
                (gate.clone(), Arc::clone(&finished), Arc::clone(&resumed));
            thread::spawn(move || {
                let token = gate.quiesce_blocking();
                assert_eq!(finished.load(Relaxed), 2, "quiesced with a chain in flight");
                assert_eq!(gate.active(), 0);
                resumed.store(true, Relaxed);
                token.resume();
            })
        };

        // A chain submitted now: if the quiesce request is already recorded,
        // it must not start before the quiescer resumed.
        let submitted_after_request = gate.quiesce_requested();
        let late = gate.reserve_blocking();
        if submitted_after_request {
            assert!(
                resumed.load(Relaxed),
                "a chain submitted after the quiesce request overtook the quiescer"
            );
        }
        drop(late);

        worker.join().expect("worker");
        quiescer.join().expect("quiescer");
        assert_eq!(gate.counters(), GateCounters::default());
    });
}
