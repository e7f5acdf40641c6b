//! The commit of a migration transaction (`migrations.md` §7), generic over
//! the state type.
//!
//! The published prior list is an `ArcSwap<Vec<Arc<Mutex<S>>>>`. Identity is
//! by `Arc` pointer: a retained state keeps its `Arc` across a migration and
//! only its fields change, so every index or graph that holds the `Arc` keeps
//! pointing at the live object.
//!
//! # The invariant
//!
//! Readers (step chains) hold a [`Reservation`](super::gate::Reservation)
//! while they read the prior list and the states in it. [`commit`] demands a
//! [`Quiesced`] token, and while a token exists no reservation exists (see
//! [`gate`](super::gate)). So no reader holding a reservation ever observes a
//! half-committed deployment: not the old list with fields copied by this
//! commit, nor the new list with fields from before it. Readers without a
//! reservation get no such guarantee: the fields of retained states are
//! copied in before the list is published.

use super::gate::Quiesced;
use super::shim::{Arc, ArcSwap, Mutex, PoisonError};

/// The published prior list: every state in deployment order.
pub type StateList<S> = Vec<Arc<Mutex<S>>>;

/// Copying the fields a commit publishes from a prepared copy into the live
/// state object.
///
/// `keel`'s state type copies its reference fields here (`parent`,
/// `dependencies`, `propertyDependencies`, `deletedWith`, `replaceWith`,
/// `viewOf`, `provider`, `inputs`, `outputs`, `replacementTrigger`).
pub trait CommitFields {
    /// Overwrites this live object's commit fields with those of `prepared`.
    ///
    /// Called with the live object's mutex held and the gate quiesced; it
    /// must not panic (a panic would leave a partly applied commit).
    fn copy_commit_fields_from(&mut self, prepared: &Self);
}

/// One slot of the new prior list.
#[derive(Debug)]
pub enum Slot<S> {
    /// A prior state that stays: `prepared`'s commit fields are copied into
    /// `live`, and `live` (the same `Arc`) fills the slot.
    Retained {
        /// The live object, as held by the current prior list.
        live: Arc<Mutex<S>>,
        /// The prepared copy carrying the rewritten fields (boxed: a list of
        /// 100,000 slots, nearly all `Fresh`, stays 16 bytes a slot).
        prepared: Box<S>,
    },
    /// A state placed in the slot as it is: a state the migration produced,
    /// or a retained state whose fields did not change (the same object, not
    /// a copy).
    Fresh(Arc<Mutex<S>>),
}

/// A prepared migration transaction, ready to commit.
#[derive(Debug)]
pub struct Transaction<S> {
    /// Rewrites of states created or read earlier in this deployment
    /// (`news`/`reads`): each live object and its prepared copy. Applied
    /// first (§7 step 1).
    pub current_rewrites: Vec<(Arc<Mutex<S>>, S)>,
    /// The new prior list, sorted and verified, in order (§7 step 2).
    pub list: Vec<Slot<S>>,
}

impl<S> Default for Transaction<S> {
    fn default() -> Self {
        Self {
            current_rewrites: Vec::new(),
            list: Vec::new(),
        }
    }
}

/// Commits `transaction` into `prior` (§7 steps 1–3) and returns the list it
/// replaced, so that the caller can rebuild its indexes (step 4).
///
/// In order: copies each current rewrite into its live object; builds the new
/// list, copying each retained slot's prepared fields into its live object
/// and keeping that live `Arc` in the slot; publishes the list with one
/// atomic `swap` (a `store` that hands back the previous list).
///
/// `quiesced` is the proof that no reservation exists, which is what keeps
/// readers from seeing a half-committed deployment (see the module docs).
/// The caller must not hold the lock of any state in the transaction.
///
/// A state mutex poisoned by an earlier panic is recovered: the commit
/// overwrites the fields it owns regardless.
pub fn commit<S: CommitFields>(
    prior: &ArcSwap<StateList<S>>,
    quiesced: &Quiesced,
    transaction: Transaction<S>,
) -> Arc<StateList<S>> {
    debug_assert!(quiesced.holds_gate(), "commit without a closed gate");
    let Transaction {
        current_rewrites,
        list,
    } = transaction;
    for (live, prepared) in &current_rewrites {
        copy_into(live, prepared);
    }
    let mut committed = Vec::with_capacity(list.len());
    for slot in list {
        match slot {
            Slot::Retained { live, prepared } => {
                copy_into(&live, &prepared);
                committed.push(live);
            }
            Slot::Fresh(state) => committed.push(state),
        }
    }
    prior.swap(Arc::new(committed))
}

/// Copies `prepared`'s commit fields into the object behind `live`.
fn copy_into<S: CommitFields>(live: &Mutex<S>, prepared: &S) {
    live.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .copy_commit_fields_from(prepared);
}

#[cfg(all(test, not(keel_loom)))]
mod tests {
    use super::super::gate::Gate;
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct TestState {
        name: String,
        deps: Vec<String>,
        touched: u32,
    }

    impl TestState {
        fn new(name: &str, deps: &[&str]) -> Self {
            Self {
                name: name.to_owned(),
                deps: deps.iter().map(|d| (*d).to_owned()).collect(),
                touched: 0,
            }
        }
    }

    impl CommitFields for TestState {
        fn copy_commit_fields_from(&mut self, prepared: &Self) {
            self.deps.clone_from(&prepared.deps);
            self.touched += 1;
        }
    }

    fn shared(state: TestState) -> Arc<Mutex<TestState>> {
        Arc::new(Mutex::new(state))
    }

    fn names(list: &StateList<TestState>) -> Vec<String> {
        list.iter()
            .map(|s| s.lock().expect("state").name.clone())
            .collect()
    }

    #[test]
    fn commit_keeps_identity_copies_fields_and_returns_old_list() {
        let a = shared(TestState::new("a", &[]));
        let b = shared(TestState::new("b", &["a"]));
        let tail = shared(TestState::new("tail", &["b"]));
        let news = shared(TestState::new("new", &["a"]));
        let prior = ArcSwap::from_pointee(vec![a.clone(), b.clone(), tail.clone()]);
        let gate = Gate::new();
        let token = gate.quiesce_blocking();

        let a2 = shared(TestState::new("a2", &[]));
        let transaction = Transaction {
            current_rewrites: vec![(news.clone(), TestState::new("new", &["a2"]))],
            list: vec![
                Slot::Fresh(a2.clone()),
                Slot::Retained {
                    live: b.clone(),
                    prepared: Box::new(TestState::new("b", &["a2"])),
                },
                Slot::Fresh(tail.clone()),
            ],
        };
        let old = commit(&prior, &token, transaction);
        token.resume();

        assert_eq!(names(&old), ["a", "b", "tail"]);
        let now = prior.load_full();
        assert_eq!(names(&now), ["a2", "b", "tail"]);
        assert!(Arc::ptr_eq(&now[0], &a2));
        assert!(Arc::ptr_eq(&now[1], &b), "retained state keeps its Arc");
        assert!(Arc::ptr_eq(&now[2], &tail));
        assert_eq!(b.lock().expect("b").deps, ["a2"]);
        assert_eq!(b.lock().expect("b").touched, 1);
        assert_eq!(
            tail.lock().expect("tail").touched,
            0,
            "fresh slot untouched"
        );
        assert_eq!(news.lock().expect("news").deps, ["a2"]);
        assert_eq!(a.lock().expect("a").touched, 0);
    }

    #[test]
    fn empty_transaction_publishes_empty_list() {
        let prior = ArcSwap::from_pointee(vec![shared(TestState::new("x", &[]))]);
        let gate = Gate::new();
        let token = gate.quiesce_blocking();
        let old = commit(&prior, &token, Transaction::default());
        assert_eq!(old.len(), 1);
        assert!(prior.load_full().is_empty());
    }
}
