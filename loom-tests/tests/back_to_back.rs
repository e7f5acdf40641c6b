//! Model: two migrations (quiesce, commit, resume) back to back, and a
//! reader holding a reservation.
//!
//! Invariant: the two migrations never overlap (the second quiescer waits
//! for the first to resume and is then woken); each prepares its
//! transaction from the list the previous one committed, so no commit is
//! lost (the final generation is 2 and the retained state kept its `Arc`);
//! the reader sees one whole deployment (generation 0, 1 or 2) whose
//! dependencies all resolve in the list it loaded.
//!
//! Broken twin caught here: `keel_loom_broken="double_quiesce"`: a second
//! quiescer does not wait for the first to resume.
#![cfg(keel_loom)]

use loom::thread;
use loom_tests::support::{check_consistent, TestState};
use loom_tests::sync::commit::{commit, Slot, Transaction};
use loom_tests::sync::gate::{Gate, GateCounters};
use loom_tests::sync::shim::{Arc, ArcSwap, AtomicUsize, Ordering::Relaxed};

type Prior = Arc<ArcSwap<Vec<Arc<loom_tests::sync::shim::Mutex<TestState>>>>>;

/// One migration: renames the dependency target `x<g>` to `x<g+1>` and
/// rewrites the retained `y` to depend on it.
fn migrate(gate: &Gate, prior: &Prior, in_migration: &AtomicUsize) {
    let token = gate.quiesce_blocking();
    assert_eq!(in_migration.fetch_add(1, Relaxed), 0, "migrations overlap");
    let current = prior.load_full();
    let generation = check_consistent(&current) + 1;
    let x = format!("x{generation}");
    let transaction = Transaction {
        current_rewrites: Vec::new(),
        list: vec![
            Slot::Fresh(TestState::shared(&x, &[], generation)),
            Slot::Retained {
                live: Arc::clone(&current[1]),
                prepared: Box::new(TestState::new("y", &[&x], generation)),
            },
        ],
    };
    drop(current);
    let old = commit(prior, &token, transaction);
    assert_eq!(old.len(), 2, "commit handed back another list");
    in_migration.fetch_sub(1, Relaxed);
    token.resume();
}

#[test]
fn two_migrations_back_to_back() {
    loom_tests::model(|| {
        let gate = Gate::new();
        let y = TestState::shared("y", &["x0"], 0);
        let prior: Prior = Arc::new(ArcSwap::from_pointee(vec![
            TestState::shared("x0", &[], 0),
            Arc::clone(&y),
        ]));
        let in_migration = Arc::new(AtomicUsize::new(0));

        let spawn_migration = || {
            let (gate, prior, in_migration) =
                (gate.clone(), Arc::clone(&prior), Arc::clone(&in_migration));
            thread::spawn(move || migrate(&gate, &prior, &in_migration))
        };
        let m1 = spawn_migration();
        let m2 = spawn_migration();

        let permit = gate.reserve_blocking();
        check_consistent(&prior.load_full());
        drop(permit);

        m1.join().expect("migration 1");
        m2.join().expect("migration 2");
        let now = prior.load_full();
        assert_eq!(check_consistent(&now), 2, "a commit was lost");
        assert!(Arc::ptr_eq(&now[1], &y), "retained state lost its identity");
        assert_eq!(gate.counters(), GateCounters::default());
    });
}
