//! A small state type for the commit models and the consistency check the
//! readers run.

use crate::sync::commit::{CommitFields, StateList};
use crate::sync::shim::{Arc, Mutex};

/// A stand-in for `keel`'s resource state: a name, the names it depends on,
/// and the generation (migration count) its fields were written by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestState {
    /// The resource's name (its URN, in `keel`).
    pub name: String,
    /// Names of the resources it depends on.
    pub deps: Vec<String>,
    /// Which migration wrote these fields (0: none).
    pub generation: u32,
}

impl TestState {
    /// A state named `name` depending on `deps`, written by `generation`.
    pub fn new(name: &str, deps: &[&str], generation: u32) -> Self {
        Self {
            name: name.to_owned(),
            deps: deps.iter().map(|d| (*d).to_owned()).collect(),
            generation,
        }
    }

    /// The same, wrapped the way the deployment shares it.
    pub fn shared(name: &str, deps: &[&str], generation: u32) -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Self::new(name, deps, generation)))
    }
}

impl CommitFields for TestState {
    fn copy_commit_fields_from(&mut self, prepared: &Self) {
        self.deps.clone_from(&prepared.deps);
        self.generation = prepared.generation;
    }
}

/// Reads every state of `list` (as a step chain holding a reservation
/// would) and checks the list and the fields belong to the same
/// deployment: every state carries the same generation, and every
/// dependency names a state of this list. Returns the generation.
///
/// # Panics
///
/// Panics when the list is empty, a state mutex is poisoned, or the check
/// fails (which is what loom reports).
pub fn check_consistent(list: &StateList<TestState>) -> u32 {
    let states: Vec<TestState> = list
        .iter()
        .map(|s| s.lock().expect("state mutex").clone())
        .collect();
    let generation = states.first().expect("non-empty list").generation;
    for state in &states {
        assert_eq!(
            state.generation, generation,
            "half-committed deployment: {states:?}"
        );
        for dep in &state.deps {
            assert!(
                states.iter().any(|s| &s.name == dep),
                "dependency {dep} of {} does not resolve in the loaded list {states:?}",
                state.name
            );
        }
    }
    generation
}
