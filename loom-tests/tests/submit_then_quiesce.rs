//! Model: chains submitted through a mailbox race a quiescer.
//!
//! The generator submits two chains with [`Gate::submit`] and puts them in
//! the executor's mailbox (a chain that meets a pending quiesce waits for a
//! reservation first, as the generator's gated queue does); the executor
//! takes them out in order and runs them; a migration quiesces meanwhile.
//!
//! Invariant: when the quiescer holds the gate, every chain whose
//! submission was admitted has already run, though it may have been sitting
//! in the mailbox when the quiesce was asked for; no chain runs while the
//! gate is held. The flags are `Relaxed` on purpose: the happens-before
//! must come from the gate and the mailbox.
//!
//! Broken twin caught here:
//! - `keel_loom_broken="late_reserve"`: [`Gate::submit`] admits the chain
//!   but leaves the reservation to the receiver, so a chain still in the
//!   mailbox does not hold the quiesce off.
#![cfg(keel_loom)]

use std::collections::VecDeque;

use loom::thread;
use loom_tests::sync::gate::{Gate, GateCounters, Reserved};
use loom_tests::sync::shim::{Arc, AtomicBool, AtomicUsize, Mutex, Ordering::Relaxed};

const CHAINS: usize = 2;

#[test]
fn a_submitted_chain_runs_before_a_later_quiesce() {
    loom_tests::model(|| {
        let gate = Gate::new();
        let mailbox: Arc<Mutex<VecDeque<Reserved<usize>>>> = Arc::new(Mutex::new(VecDeque::new()));
        let admitted = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(AtomicBool::new(false));

        let executor = {
            let (mailbox, ran, held) = (Arc::clone(&mailbox), Arc::clone(&ran), Arc::clone(&held));
            thread::spawn(move || {
                let mut done = 0;
                while done < CHAINS {
                    let next = mailbox.lock().expect("mailbox").pop_front();
                    let Some(chain) = next else {
                        thread::yield_now();
                        continue;
                    };
                    let (_, reservation) = chain.start();
                    assert!(
                        !held.load(Relaxed),
                        "a chain ran while the gate was quiesced"
                    );
                    ran.fetch_add(1, Relaxed);
                    drop(reservation);
                    done += 1;
                }
            })
        };

        let quiescer = {
            let (gate, admitted, ran, held) = (
                gate.clone(),
                Arc::clone(&admitted),
                Arc::clone(&ran),
                Arc::clone(&held),
            );
            thread::spawn(move || {
                let token = gate.quiesce_blocking();
                held.store(true, Relaxed);
                assert_eq!(
                    ran.load(Relaxed),
                    admitted.load(Relaxed),
                    "quiesced with an admitted chain not yet run (still in the mailbox)"
                );
                held.store(false, Relaxed);
                token.resume();
            })
        };

        // The generator.
        for chain in 0..CHAINS {
            let reserved = match gate.submit(chain) {
                Ok(r) => {
                    admitted.fetch_add(1, Relaxed);
                    r
                }
                Err(chain) => Reserved::new(chain, gate.reserve_blocking()),
            };
            mailbox.lock().expect("mailbox").push_back(reserved);
        }

        executor.join().expect("executor");
        quiescer.join().expect("quiescer");
        assert_eq!(ran.load(Relaxed), CHAINS);
        assert_eq!(gate.counters(), GateCounters::default());
    });
}
