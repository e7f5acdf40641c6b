//! Model: a migration commit racing two readers that hold reservations.
//!
//! Invariant: every reader, holding a reservation while it loads the prior
//! list and reads the states in it, sees either the whole old deployment or
//! the whole new one, list and fields together (every state carries the
//! generation of the list it was loaded from), and every dependency it
//! reads resolves in the list it loaded. After the commit the retained
//! state is the same `Arc` (identity by pointer) and the old list is handed
//! back.
//!
//! Broken twin caught here: `keel_loom_broken="no_drain"`: the quiescer is
//! handed its token without waiting for the reservations in flight, so the
//! commit runs unquiesced under the readers.
#![cfg(keel_loom)]

use loom::thread;
use loom_tests::support::{check_consistent, TestState};
use loom_tests::sync::commit::{commit, Slot, Transaction};
use loom_tests::sync::gate::{Gate, GateCounters};
use loom_tests::sync::shim::{Arc, ArcSwap};

#[test]
fn readers_never_see_a_half_committed_deployment() {
    loom_tests::model(|| {
        let gate = Gate::new();
        // Prior: old `a` and `b` depending on it.
        let b = TestState::shared("b", &["a"], 0);
        let prior = Arc::new(ArcSwap::from_pointee(vec![
            TestState::shared("a", &[], 0),
            Arc::clone(&b),
        ]));

        let reader = |gate: Gate, prior: Arc<ArcSwap<_>>| {
            move || {
                let permit = gate.reserve_blocking();
                check_consistent(&prior.load_full());
                drop(permit);
            }
        };
        let reader1 = thread::spawn(reader(gate.clone(), Arc::clone(&prior)));

        // The migration: `a` becomes `a2`; `b` is retained, rewritten.
        let migration = {
            let (gate, prior, b) = (gate.clone(), Arc::clone(&prior), Arc::clone(&b));
            thread::spawn(move || {
                let b_live = Arc::clone(&b);
                let token = gate.quiesce_blocking();
                let transaction = Transaction {
                    current_rewrites: Vec::new(),
                    list: vec![
                        Slot::Fresh(TestState::shared("a2", &[], 1)),
                        Slot::Retained {
                            live: b,
                            prepared: Box::new(TestState::new("b", &["a2"], 1)),
                        },
                    ],
                };
                let old = commit(&prior, &token, transaction);
                token.resume();
                // The list it replaced; `b` in it is the live (rewritten)
                // object, as identity is by pointer.
                assert_eq!(old.len(), 2);
                assert!(Arc::ptr_eq(&old[1], &b_live));
            })
        };

        reader(gate.clone(), Arc::clone(&prior))();

        reader1.join().expect("reader");
        migration.join().expect("migration");
        let now = prior.load_full();
        assert_eq!(check_consistent(&now), 1);
        assert!(Arc::ptr_eq(&now[1], &b), "retained state lost its identity");
        assert_eq!(gate.counters(), GateCounters::default());
    });
}
