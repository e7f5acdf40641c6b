//! The callback chain (`migrations.md` §3 step 5, §4).
//!
//! A [`Chain`] starts from the registration URN and the prior subtree. For
//! each callback the caller serializes [`Chain::input_json`], runs the
//! callback (that part, with its timeouts and panics, is the caller's) and
//! hands its output to [`Chain::apply`], which does the per-callback
//! accounting of §4.2 against *that* callback's input (table rows in order,
//! each over the whole result), merges the callback's successors into the
//! chain's map (`conflicting-successors`), composes the map (§4.4, a loop is
//! `successor-cycle`) and rewrites the references inside the result with
//! the composed map (§8), so the next callback gets the rewritten result.
//! [`Chain::finish`] applies the end-of-chain `retained-and-mapped` check
//! and no-op detection (§4.3) and yields the [`ChainOutcome`].
//!
//! Results are taken as raw JSON so that malformed values can be told from
//! well-formed ones: a reference field (`parent`, `dependencies`, ...)
//! holding a string that is not a URN is carried through the chain as an
//! internal placeholder URN that resolves nowhere, so the structure checks
//! report it (`dangling-reference`, `not-descendant`, ...) at their place in
//! the order; callbacks see the original text.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use super::rewrite::{identity_in, rewrite, rewrite_noting, Identity, SuccessorMap, Unmapped};
use super::rules::{MigrationError, Result, Rule};
use crate::model::{State, TypeToken, Urn};

/// What one callback returned.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CallbackOutput {
    /// No change: the next callback gets the same input.
    NoChange,
    /// New state and successors, as raw JSON: `new_state` must be an array
    /// of resource objects (checked by [`Chain::apply`]); `null` means no
    /// new state.
    Changed {
        /// The returned `newState`.
        new_state: Value,
        /// The returned `successors`, old URN -> new URN, as text.
        successors: BTreeMap<String, String>,
    },
}

impl CallbackOutput {
    /// Reads a callback's JSON output: `null` (no change) or
    /// `{"newState": [...], "successors": {...}}` (both keys optional).
    /// `i` (1-based) and `n` name the callback in errors.
    ///
    /// # Errors
    /// `malformed-result` when the output has another shape.
    pub(crate) fn from_json(
        registration: &Urn,
        i: usize,
        n: usize,
        output: &Value,
    ) -> Result<Self> {
        let bad = |what: String| {
            reject(
                Rule::MalformedResult,
                registration,
                i,
                n,
                what,
                "return null (no change) or {\"newState\": [...], \"successors\": {...}}",
            )
        };
        let obj = match output {
            Value::Null => return Ok(Self::NoChange),
            Value::Object(o) => o,
            other => return Err(bad(format!("the output is {}", kind(other)))),
        };
        if let Some(k) = obj
            .keys()
            .find(|k| k.as_str() != "newState" && k.as_str() != "successors")
        {
            return Err(bad(format!("the output has an unknown key `{k}`")));
        }
        let new_state = obj.get("newState").cloned().unwrap_or(Value::Null);
        // What keel accepts it must read back: no value nested deeper than
        // a checkpoint can hold.
        for r in new_state.as_array().into_iter().flatten() {
            let props = ["inputs", "outputs"]
                .iter()
                .filter_map(|f| r.get(*f).and_then(Value::as_object).map(|m| (*f, m)));
            for (field, m) in props {
                for (k, v) in m {
                    if let Err(e) = crate::model::property::check_json_depth(k, v) {
                        let urn = r.get("urn").and_then(Value::as_str).unwrap_or("(no urn)");
                        return Err(reject(
                            Rule::MalformedResult,
                            registration,
                            i,
                            n,
                            format!("resource {urn}, {field}: {e}"),
                            "keep every property value within the limit",
                        ));
                    }
                }
            }
        }
        let successors = match obj.get("successors") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(bad(format!(
                        "the successor of `{k}` is {}, not a URN string",
                        kind(other)
                    ))),
                })
                .collect::<Result<_>>()?,
            Some(other) => {
                return Err(bad(format!(
                    "`successors` is {}, not an object",
                    kind(other)
                )))
            }
        };
        Ok(Self::Changed {
            new_state,
            successors,
        })
    }
}

/// The outcome of a whole chain.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ChainOutcome {
    /// True when the final result equals the original subtree after
    /// normalization (§4.3): nothing is validated, persisted or reported.
    pub noop: bool,
    /// The final, rewritten result, in result order.
    pub result: Vec<State>,
    /// `original -> final`, keyed by prior subtree URNs only: applied to
    /// resources outside the subtree, committed and reported (§9).
    pub original_to_final: SuccessorMap,
    /// `all -> final`, including intermediate URNs: applied only inside the
    /// result.
    pub all_to_final: SuccessorMap,
    /// URNs in the result that the prior subtree did not have, in result
    /// order (for the migration event, §11).
    pub added: Vec<Urn>,
}

impl ChainOutcome {
    /// The identity of the result resource with `urn`, if any.
    pub(crate) fn identity(&self, urn: &Urn) -> Option<Identity> {
        identity_in(&self.result)(urn)
    }

    /// The identity of every successor of `original_to_final` (§9: kept
    /// with the committed map to normalize later references).
    pub(crate) fn successor_identities(&self) -> BTreeMap<Urn, Identity> {
        self.original_to_final
            .values()
            .filter_map(|u| self.identity(u).map(|id| (u.clone(), id)))
            .collect()
    }

    /// Rewrites a state outside the subtree (a retained prior state, or one
    /// created or read earlier in this deployment) with `original -> final`;
    /// `None` when nothing changes.
    pub(crate) fn rewrite_outside(&self, state: &State) -> Option<State> {
        rewrite(state, &self.original_to_final, &identity_in(&self.result))
    }

    /// [`Self::rewrite_outside`] for one state of a pass over many (see
    /// [`rewrite_noting`]).
    pub(crate) fn rewrite_outside_noting<'s>(
        &self,
        state: &'s State,
        unmapped: &mut Unmapped<'s>,
    ) -> Option<State> {
        rewrite_noting(
            state,
            &self.original_to_final,
            &identity_in(&self.result),
            unmapped,
        )
    }
}

/// The callback chain of one registration (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    registration: Urn,
    original: Vec<State>,
    current: Vec<State>,
    /// Every mapping returned so far, as returned.
    merged: SuccessorMap,
    /// `merged` followed to its ends: all -> final.
    composed: SuccessorMap,
}

impl Chain {
    /// A chain for `registration` over the prior subtree `subtree` (the
    /// root first, in snapshot order, secrets decrypted).
    pub(crate) fn new(registration: Urn, subtree: Vec<State>) -> Self {
        Self {
            registration,
            current: subtree.clone(),
            original: subtree,
            merged: SuccessorMap::new(),
            composed: SuccessorMap::new(),
        }
    }

    /// The next callback's input: `{"urn": <registration>, "oldState":
    /// [<checkpoint resources>]}`.
    pub(crate) fn input_json(&self) -> Value {
        let old: Vec<Value> = self
            .current
            .iter()
            .map(|s| {
                let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
                if let Value::Object(o) = &mut v {
                    restore_unparsed(o);
                }
                v
            })
            .collect();
        serde_json::json!({ "urn": self.registration.as_str(), "oldState": old })
    }

    /// Applies the output of callback `i` (1-based) of `n` (§4.2, §4.4,
    /// §8).
    ///
    /// # Errors
    /// The first failing row of §4.2 (against this callback's input),
    /// `conflicting-successors` or `successor-cycle`. The chain is left
    /// unchanged on error.
    pub(crate) fn apply(&mut self, i: usize, n: usize, output: CallbackOutput) -> Result<()> {
        let (new_state, successors) = match output {
            CallbackOutput::NoChange => return Ok(()),
            CallbackOutput::Changed {
                new_state,
                successors,
            } => (new_state, successors),
        };
        let reg = &self.registration;
        let err = |rule, what: String, hint: &str| reject(rule, reg, i, n, what, hint);
        if new_state.is_null() {
            if successors.is_empty() {
                return Ok(());
            }
            return Err(err(
                Rule::SuccessorsWithoutState,
                format!(
                    "it returned successors ({}) but no new state",
                    successors.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
                "return the complete new subtree with the successors, or no change",
            ));
        }
        let input = &self.current;
        let input_by_urn: HashMap<&str, &State> =
            input.iter().map(|s| (s.urn.as_str(), s)).collect();

        // malformed-result
        let Value::Array(items) = new_state else {
            return Err(err(
                Rule::MalformedResult,
                format!("its newState is {}, not an array", kind(&new_state)),
                "return newState as an array of checkpoint resources",
            ));
        };
        let mut decoded: Vec<Decoded> = Vec::with_capacity(items.len());
        for (k, item) in items.into_iter().enumerate() {
            let d = decode(item, k, &input_by_urn)
                .map_err(|what| err(Rule::MalformedResult, what, MALFORMED_HINT))?;
            decoded.push(d);
        }

        // invalid-urn
        for d in &decoded {
            if let Some(why) = &d.bad_urn {
                return Err(err(
                    Rule::InvalidUrn,
                    format!(
                        "returned resource #{} has an invalid urn: {why}",
                        d.position
                    ),
                    "give every resource a URN urn:pulumi:<stack>::<project>::<type>::<name>",
                ));
            }
        }
        for (k, v) in &successors {
            for (what, text) in [("key", k), ("target", v)] {
                if text.is_empty() {
                    continue; // empty-successor, below
                }
                if let Err(e) = Urn::parse(text) {
                    return Err(err(
                        Rule::InvalidUrn,
                        format!("successor {what} `{text}` is not a URN: {e}"),
                        "map old URNs to new URNs",
                    ));
                }
            }
        }

        // aliases-in-result
        for d in &decoded {
            if !d.state.rare.aliases.is_empty() {
                return Err(err(
                    Rule::AliasesInResult,
                    format!("returned resource {} carries aliases", d.state.urn),
                    "remove `aliases` from the result; express renames as successors",
                ));
            }
        }

        // duplicate-resource
        let mut result_urns: HashSet<&Urn> = HashSet::with_capacity(decoded.len());
        for d in &decoded {
            if !result_urns.insert(&d.state.urn) {
                return Err(err(
                    Rule::DuplicateResource,
                    format!("{} appears twice in the returned state", d.state.urn),
                    "return each resource once",
                ));
            }
        }

        // type-mismatch
        for d in &decoded {
            let urn_type = d.state.urn.type_str();
            let ty = d
                .bad_type
                .clone()
                .unwrap_or_else(|| d.state.ty.as_str().to_owned());
            if ty != urn_type {
                return Err(err(
                    Rule::TypeMismatch,
                    format!(
                        "returned resource {} has type `{ty}` but its URN says `{urn_type}`",
                        d.state.urn
                    ),
                    "keep `type` equal to the last type of the URN's qualified type",
                ));
            }
        }

        // empty-successor
        for (k, v) in &successors {
            if k.is_empty() || v.is_empty() {
                return Err(err(
                    Rule::EmptySuccessor,
                    format!("successor `{k}` -> `{v}` has an empty side"),
                    "map each omitted URN to the URN of a returned resource",
                ));
            }
        }
        let map: SuccessorMap = successors
            .iter()
            .filter_map(|(k, v)| Some((Urn::parse(k).ok()?, Urn::parse(v).ok()?)))
            .collect();

        // successor-for-unknown
        for k in map.keys() {
            if !input_by_urn.contains_key(k.as_str()) {
                return Err(err(
                    Rule::SuccessorForUnknown,
                    format!("it maps {k}, which is not in its input"),
                    "map only URNs of the callback's input (oldState)",
                ));
            }
        }
        // retained-and-mapped
        for k in map.keys() {
            if result_urns.contains(k) {
                return Err(err(
                    Rule::RetainedAndMapped,
                    format!("{k} is both returned and mapped to {}", map[k]),
                    "either keep the resource or map it to its successor, not both",
                ));
            }
        }
        // successor-missing
        for (k, v) in &map {
            if !result_urns.contains(v) {
                return Err(err(
                    Rule::SuccessorMissing,
                    format!("{k} is mapped to {v}, which is not in the returned state"),
                    "return every successor in newState",
                ));
            }
        }
        // unaccounted
        for s in input {
            if !result_urns.contains(&s.urn) && !map.contains_key(&s.urn) {
                return Err(err(
                    Rule::Unaccounted,
                    format!("{} is neither returned nor mapped to a successor", s.urn),
                    "return it, or map it to the resource that replaces it",
                ));
            }
        }
        // custom-component-flip
        for d in &decoded {
            if let Some(old) = input_by_urn.get(d.state.urn.as_str()) {
                if old.custom != d.state.custom {
                    return Err(err(
                        Rule::CustomComponentFlip,
                        format!(
                            "{} switches from {} to {}",
                            d.state.urn,
                            kind_of(old.custom),
                            kind_of(d.state.custom)
                        ),
                        "keep `custom` as it was; a resource of another kind needs another URN",
                    ));
                }
            }
        }
        // id-changed
        for d in &decoded {
            if let Some(old) = input_by_urn.get(d.state.urn.as_str()) {
                if old.custom && d.state.custom && old.id != d.state.id {
                    return Err(err(
                        Rule::IdChanged,
                        format!(
                            "{} changes its id from `{}` to `{}`",
                            d.state.urn, old.id, d.state.id
                        ),
                        "a migration cannot change a managed resource's physical ID",
                    ));
                }
            }
        }
        // conflicting-successors
        for (k, v) in &map {
            if let Some(w) = self.merged.get(k) {
                if w != v {
                    return Err(err(
                        Rule::ConflictingSuccessors,
                        format!(
                            "{k} is mapped to {w} by an earlier callback and to {v} by this one"
                        ),
                        "map each URN to one successor across the chain",
                    ));
                }
            }
        }
        let mut merged = self.merged.clone();
        merged.extend(map);
        let composed = compose(&merged).map_err(|cycle| {
            err(
                Rule::SuccessorCycle,
                format!(
                    "the successor map loops: {}",
                    cycle
                        .iter()
                        .map(Urn::as_str)
                        .collect::<Vec<_>>()
                        .join(" -> ")
                ),
                "successors must lead to a resource of the final result",
            )
        })?;

        let mut result: Vec<State> = decoded.into_iter().map(|d| d.state).collect();
        let rewritten: Vec<Option<State>> = {
            let identity = identity_in(&result);
            result
                .iter()
                .map(|s| rewrite(s, &composed, &identity))
                .collect()
        };
        for (slot, new) in result.iter_mut().zip(rewritten) {
            if let Some(new) = new {
                *slot = new;
            }
        }
        self.merged = merged;
        self.composed = composed;
        self.current = result;
        Ok(())
    }

    /// Ends the chain: the end-of-chain `retained-and-mapped` check (§4.4),
    /// then no-op detection (§4.3).
    ///
    /// # Errors
    /// `retained-and-mapped` when a URN of the final result is a key of the
    /// composed map.
    pub(crate) fn finish(self) -> Result<ChainOutcome> {
        for s in &self.current {
            if let Some(to) = self.composed.get(&s.urn) {
                return Err(MigrationError::new(
                    Rule::RetainedAndMapped,
                    format!(
                        "the migration of {}: {} was mapped to {to} by one callback and \
                         returned again by a later one; either keep the resource or map it \
                         to its successor, not both",
                        self.registration, s.urn
                    ),
                ));
            }
        }
        let noop = self.current.len() == self.original.len()
            && self
                .current
                .iter()
                .zip(&self.original)
                .all(|(a, b)| normalized_eq(a, b));
        let original_urns: HashSet<&Urn> = self.original.iter().map(|s| &s.urn).collect();
        let original_to_final = self
            .composed
            .iter()
            .filter(|(k, _)| original_urns.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let added = self
            .current
            .iter()
            .filter(|s| !original_urns.contains(&s.urn))
            .map(|s| s.urn.clone())
            .collect();
        Ok(ChainOutcome {
            noop,
            result: self.current,
            original_to_final,
            all_to_final: self.composed,
            added,
        })
    }
}

/// Whether two states are equal after normalization (§4.3): decoded into
/// keel's model, so key order, an absent key versus an empty value and the
/// encoding of a secret's plaintext do not matter; unmodeled fields compare
/// verbatim.
pub(crate) fn normalized_eq(a: &State, b: &State) -> bool {
    normalize(a) == normalize(b)
}

/// A copy of `s` with its key presence forgotten (as keel would build it).
fn normalize(s: &State) -> State {
    let mut c = s.clone();
    c.forget_keys();
    c
}

/// Follows every mapping of `merged` to its end (§4.4).
///
/// # Errors
/// The URNs of a loop, when the map has one.
pub(crate) fn compose(merged: &SuccessorMap) -> std::result::Result<SuccessorMap, Vec<Urn>> {
    let mut out = SuccessorMap::new();
    for (k, v) in merged {
        let mut path = vec![k];
        let mut cur = v;
        while let Some(next) = merged.get(cur) {
            if let Some(at) = path.iter().position(|p| *p == cur) {
                let mut cycle: Vec<Urn> = path[at..].iter().map(|u| (*u).clone()).collect();
                cycle.push(cur.clone());
                return Err(cycle);
            }
            path.push(cur);
            cur = next;
        }
        out.insert(k.clone(), cur.clone());
    }
    Ok(out)
}

const MALFORMED_HINT: &str = "return checkpoint resources with the field types of the \
     checkpoint format, and no fields keel does not know unless the input resource had them";

/// The placeholder URN prefix for reference strings that are not URNs.
const UNPARSED_PREFIX: &str = "urn:pulumi:keel-unparsed::keel-unparsed::keel:migrate:Unparsed::";

/// The original text of a placeholder URN standing for an unparseable
/// reference, or `None` for a real URN.
pub(crate) fn unparsed_text(urn: &Urn) -> Option<&str> {
    urn.as_str().strip_prefix(UNPARSED_PREFIX)
}

const SINGLE_REFS: [&str; 4] = ["urn", "parent", "deletedWith", "viewOf"];
const LIST_REFS: [&str; 3] = ["dependencies", "replaceWith", "aliases"];

/// Applies `f` to every string in a URN-typed field of a resource object.
fn for_each_ref(obj: &mut Map<String, Value>, f: &dyn Fn(&mut String)) {
    let each = |v: &mut Value| {
        if let Value::String(s) = v {
            f(s);
        }
    };
    for key in SINGLE_REFS {
        if let Some(v) = obj.get_mut(key) {
            each(v);
        }
    }
    for key in LIST_REFS {
        if let Some(Value::Array(a)) = obj.get_mut(key) {
            a.iter_mut().for_each(each);
        }
    }
    if let Some(Value::Object(m)) = obj.get_mut("propertyDependencies") {
        for v in m.values_mut() {
            if let Value::Array(a) = v {
                a.iter_mut().for_each(each);
            }
        }
    }
}

/// Replaces reference strings that are not URNs by placeholders.
fn hide_unparsed(obj: &mut Map<String, Value>) {
    for_each_ref(obj, &|s: &mut String| {
        if !s.is_empty() && Urn::parse(s).is_err() {
            *s = format!("{UNPARSED_PREFIX}{s}");
        }
    });
}

/// Puts the original text back in place of placeholders.
fn restore_unparsed(obj: &mut Map<String, Value>) {
    for_each_ref(obj, &|s: &mut String| {
        if let Some(t) = s.strip_prefix(UNPARSED_PREFIX) {
            *s = t.to_owned();
        }
    });
}

/// One decoded resource of a callback's result.
struct Decoded {
    state: State,
    /// Its position in the result (0-based).
    position: usize,
    /// Why its `urn` is invalid, if it is.
    bad_urn: Option<String>,
    /// Its `type`, when that is a string that is not a type token.
    bad_type: Option<String>,
}

/// Decodes resource `k` of a result; the error is the malformed-result
/// detail.
fn decode(
    item: Value,
    k: usize,
    input_by_urn: &HashMap<&str, &State>,
) -> std::result::Result<Decoded, String> {
    let Value::Object(mut obj) = item else {
        return Err(format!(
            "returned resource #{k} is {}, not an object",
            kind(&item)
        ));
    };
    let urn_text = match obj.get("urn") {
        Some(Value::String(s)) => s.clone(),
        None => return Err(format!("returned resource #{k} has no `urn`")),
        Some(other) => {
            return Err(format!(
                "returned resource #{k}'s `urn` is {}, not a string",
                kind(other)
            ))
        }
    };
    let bad_urn = match Urn::parse(&urn_text) {
        Ok(_) => None,
        Err(_) if urn_text.is_empty() => Some("it is empty".to_owned()),
        Err(e) => Some(e.to_string()),
    };
    let name = if urn_text.is_empty() {
        format!("#{k}")
    } else {
        urn_text.clone()
    };
    let bad_type = match obj.get("type") {
        Some(Value::String(t)) if !t.is_empty() && TypeToken::parse(t).is_err() => {
            let t = t.clone();
            obj.insert("type".into(), Value::String(String::new()));
            Some(t)
        }
        _ => None,
    };
    hide_unparsed(&mut obj);
    let state: State = serde_json::from_value(Value::Object(obj))
        .map_err(|e| format!("returned resource {name} is malformed: {e}"))?;
    let known = input_by_urn.get(urn_text.as_str()).map(|s| &s.extra);
    if let Some(key) = state
        .extra
        .keys()
        .find(|key| known.is_none_or(|e| !e.contains_key(*key)))
    {
        return Err(format!(
            "returned resource {name} has a field `{key}` that keel does not model and its \
             input did not carry"
        ));
    }
    Ok(Decoded {
        state,
        position: k,
        bad_urn,
        bad_type,
    })
}

/// A per-callback rejection naming the callback.
fn reject(rule: Rule, reg: &Urn, i: usize, n: usize, what: String, hint: &str) -> MigrationError {
    MigrationError::new(
        rule,
        format!("migration callback {i} of {n} of {reg}: {what}; {hint}"),
    )
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn kind_of(custom: bool) -> &'static str {
    if custom {
        "custom"
    } else {
        "component"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const S: &str = "urn:pulumi:s::p::";

    fn u(rest: &str) -> String {
        format!("{S}{rest}")
    }

    fn urn(rest: &str) -> Urn {
        Urn::parse(&u(rest)).unwrap()
    }

    fn root() -> Value {
        json!({"urn": u("m:m:Comp::c"), "custom": false, "type": "m:m:Comp"})
    }

    fn child(name: &str, id: &str) -> Value {
        json!({"urn": u(&format!("m:m:Comp$a:b:T::{name}")), "custom": true, "id": id,
               "type": "a:b:T", "parent": u("m:m:Comp::c")})
    }

    fn states(v: Vec<Value>) -> Vec<State> {
        v.into_iter()
            .map(|j| serde_json::from_value(j).unwrap())
            .collect()
    }

    fn chain() -> Chain {
        Chain::new(
            urn("m:m:Comp::c"),
            states(vec![root(), child("a", "id-a"), child("b", "id-b")]),
        )
    }

    fn out(new: Vec<Value>, succ: &[(&str, &str)]) -> CallbackOutput {
        CallbackOutput::Changed {
            new_state: Value::Array(new),
            successors: succ
                .iter()
                .map(|(k, v)| {
                    (
                        u(&format!("m:m:Comp$a:b:T::{k}")),
                        u(&format!("m:m:Comp$a:b:T::{v}")),
                    )
                })
                .collect(),
        }
    }

    fn rule_of(r: Result<()>) -> Rule {
        r.unwrap_err().rule
    }

    #[test]
    fn no_change_and_echo_are_noops() {
        let mut c = chain();
        c.apply(1, 2, CallbackOutput::NoChange).unwrap();
        let echo = c.input_json()["oldState"].as_array().unwrap().clone();
        c.apply(2, 2, out(echo, &[])).unwrap();
        let o = c.finish().unwrap();
        assert!(o.noop);
        assert!(o.original_to_final.is_empty());
    }

    #[test]
    fn rename_is_composed_and_rewritten() {
        let mut c = chain();
        let mut b = child("b", "id-b");
        b["dependencies"] = json!([u("m:m:Comp$a:b:T::a")]);
        c.apply(
            1,
            2,
            out(vec![root(), child("x", "id-a"), b], &[("a", "x")]),
        )
        .unwrap();
        let input = c.input_json();
        assert_eq!(
            input["oldState"][2]["dependencies"],
            json!([u("m:m:Comp$a:b:T::x")])
        );
        let mut b = input["oldState"][2].clone();
        b["dependencies"] = json!([u("m:m:Comp$a:b:T::x")]);
        c.apply(
            2,
            2,
            out(vec![root(), child("y", "id-a"), b], &[("x", "y")]),
        )
        .unwrap();
        let o = c.finish().unwrap();
        assert!(!o.noop);
        assert_eq!(
            o.original_to_final,
            [(urn("m:m:Comp$a:b:T::a"), urn("m:m:Comp$a:b:T::y"))].into()
        );
        assert_eq!(o.all_to_final.len(), 2);
        assert_eq!(o.added, vec![urn("m:m:Comp$a:b:T::y")]);
        assert_eq!(o.result[2].dependencies, vec![urn("m:m:Comp$a:b:T::y")]);
    }

    #[test]
    fn accounting_rows() {
        let r =
            |new: Vec<Value>, succ: &[(&str, &str)]| rule_of(chain().apply(1, 1, out(new, succ)));
        assert_eq!(
            rule_of(chain().apply(
                1,
                1,
                CallbackOutput::Changed {
                    new_state: Value::Null,
                    successors: [(u("x"), u("y"))].into()
                }
            )),
            Rule::SuccessorsWithoutState
        );
        assert_eq!(
            rule_of(chain().apply(
                1,
                1,
                CallbackOutput::Changed {
                    new_state: json!({}),
                    successors: BTreeMap::new()
                }
            )),
            Rule::MalformedResult
        );
        let mut typo = child("a", "id-a");
        typo["protcet"] = json!(true);
        assert_eq!(
            r(vec![root(), typo, child("b", "id-b")], &[]),
            Rule::MalformedResult
        );
        let mut wrong = child("a", "id-a");
        wrong["protect"] = json!("yes");
        assert_eq!(
            r(vec![root(), wrong, child("b", "id-b")], &[]),
            Rule::MalformedResult
        );
        let mut bad = child("a", "id-a");
        bad["urn"] = json!("nope");
        assert_eq!(
            r(vec![root(), bad, child("b", "id-b")], &[]),
            Rule::InvalidUrn
        );
        let mut al = child("a", "id-a");
        al["aliases"] = json!([u("a:b:T::old")]);
        assert_eq!(
            r(vec![root(), al, child("b", "id-b")], &[]),
            Rule::AliasesInResult
        );
        assert_eq!(
            r(
                vec![
                    root(),
                    child("a", "id-a"),
                    child("a", "id-a"),
                    child("b", "id-b")
                ],
                &[]
            ),
            Rule::DuplicateResource
        );
        let mut ty = child("a", "id-a");
        ty["type"] = json!("a:b:Other");
        assert_eq!(
            r(vec![root(), ty, child("b", "id-b")], &[]),
            Rule::TypeMismatch
        );
        assert_eq!(
            rule_of(chain().apply(
                1,
                1,
                CallbackOutput::Changed {
                    new_state: json!([root(), child("a", "id-a"), child("b", "id-b")]),
                    successors: [(String::new(), u("m:m:Comp$a:b:T::a"))].into()
                }
            )),
            Rule::EmptySuccessor
        );
        assert_eq!(
            r(
                vec![
                    root(),
                    child("a", "id-a"),
                    child("b", "id-b"),
                    child("z", "id-a")
                ],
                &[("q", "z")]
            ),
            Rule::SuccessorForUnknown
        );
        assert_eq!(
            r(
                vec![root(), child("a", "id-a"), child("b", "id-b")],
                &[("a", "b")]
            ),
            Rule::RetainedAndMapped
        );
        assert_eq!(
            r(vec![root(), child("b", "id-b")], &[("a", "z")]),
            Rule::SuccessorMissing
        );
        assert_eq!(r(vec![root(), child("b", "id-b")], &[]), Rule::Unaccounted);
        let mut flip = child("a", "");
        flip["custom"] = json!(false);
        flip.as_object_mut().unwrap().remove("id");
        assert_eq!(
            r(vec![root(), flip, child("b", "id-b")], &[]),
            Rule::CustomComponentFlip
        );
        assert_eq!(
            r(
                vec![root(), child("a", "id-other"), child("b", "id-b")],
                &[]
            ),
            Rule::IdChanged
        );
    }

    #[test]
    fn conflicts_and_cycles_across_callbacks() {
        let mut c = chain();
        c.apply(
            1,
            2,
            out(
                vec![root(), child("x", "id-a"), child("b", "id-b")],
                &[("a", "x")],
            ),
        )
        .unwrap();
        assert_eq!(
            rule_of(c.clone().apply(
                2,
                2,
                out(
                    vec![root(), child("a", "id-a"), child("b", "id-b")],
                    &[("x", "a")]
                )
            )),
            Rule::SuccessorCycle
        );
        // Returning `a` again: checked at the end of the chain.
        c.apply(
            2,
            3,
            out(
                vec![
                    root(),
                    child("x", "id-a"),
                    child("a", "id-a"),
                    child("b", "id-b"),
                ],
                &[],
            ),
        )
        .unwrap();
        assert_eq!(
            rule_of(c.clone().apply(
                3,
                3,
                out(
                    vec![
                        root(),
                        child("x", "id-a"),
                        child("z", "id-a"),
                        child("b", "id-b")
                    ],
                    &[("a", "z")]
                )
            )),
            Rule::ConflictingSuccessors
        );
        assert_eq!(c.finish().unwrap_err().rule, Rule::RetainedAndMapped);
    }

    #[test]
    fn unparseable_references_survive_to_the_next_callback() {
        let mut c = chain();
        let mut a = child("a", "id-a");
        a["dependencies"] = json!(["not a urn"]);
        c.apply(1, 1, out(vec![root(), a, child("b", "id-b")], &[]))
            .unwrap();
        assert_eq!(
            c.input_json()["oldState"][1]["dependencies"],
            json!(["not a urn"])
        );
        let o = c.finish().unwrap();
        assert_eq!(
            unparsed_text(&o.result[1].dependencies[0]),
            Some("not a urn")
        );
    }

    #[test]
    fn outputs_are_read_from_json() {
        let reg = urn("m:m:Comp::c");
        assert_eq!(
            CallbackOutput::from_json(&reg, 1, 1, &Value::Null).unwrap(),
            CallbackOutput::NoChange
        );
        assert!(matches!(
            CallbackOutput::from_json(
                &reg,
                1,
                1,
                &json!({"newState": [], "successors": {"a": "b"}})
            )
            .unwrap(),
            CallbackOutput::Changed { .. }
        ));
        for bad in [
            json!(3),
            json!({"newstate": []}),
            json!({"successors": {"a": 1}}),
            // Deeper than a checkpoint can hold.
            json!({"newState": [{"urn": "u", "outputs": {
                "v": (0..=crate::model::property::MAX_DEPTH).fold(json!(1), |v, _| json!([v]))
            }}]}),
        ] {
            assert_eq!(
                CallbackOutput::from_json(&reg, 1, 1, &bad)
                    .unwrap_err()
                    .rule,
                Rule::MalformedResult
            );
        }
    }

    #[test]
    fn secrets_encoding_does_not_matter_for_noops() {
        let sig = crate::model::property::SIG_KEY;
        let mut a = child("a", "id-a");
        a["inputs"] =
            json!({"p": {sig: "1b47061264138c4ac30d75fd1eb44270", "plaintext": "\"shh\""}});
        let mut c = Chain::new(urn("m:m:Comp::c"), states(vec![root(), a.clone()]));
        let mut a2 = a.clone();
        a2["inputs"]["p"]["plaintext"] = json!(" \"shh\" ");
        a2["protect"] = json!(false);
        c.apply(1, 1, out(vec![root(), a2], &[])).unwrap();
        assert!(c.finish().unwrap().noop);
    }
}

/// Property tests: [`compose`] follows every mapping to its end or names a
/// loop, and a chain of renaming callbacks composes its successor maps step
/// by step into each original's last URN, rewriting stale references.
#[cfg(test)]
mod props {
    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    const NODES: usize = 8;

    fn node(i: usize) -> Urn {
        Urn::parse(&format!("urn:pulumi:s::p::a:b:T::n{i}")).unwrap()
    }

    /// Follows `map` from `k` one mapping at a time: its end, or `None`
    /// when a node comes back.
    fn follow(map: &SuccessorMap, k: &Urn) -> Option<Urn> {
        let mut seen = BTreeSet::from([k.clone()]);
        let mut cur = map.get(k)?.clone();
        while let Some(next) = map.get(&cur) {
            if !seen.insert(cur.clone()) {
                return None;
            }
            cur = next.clone();
        }
        Some(cur)
    }

    /// A map whose keys map to later nodes only: no loop.
    fn acyclic() -> impl Strategy<Value = SuccessorMap> {
        proptest::collection::vec(proptest::option::of(1..=NODES), NODES).prop_map(|targets| {
            targets
                .into_iter()
                .enumerate()
                .filter_map(|(k, t)| t.map(|t| (node(k), node((k + t).min(NODES)))))
                .filter(|(k, v)| k != v)
                .collect()
        })
    }

    /// Any map over the nodes, self-mappings and loops included.
    fn any_map() -> impl Strategy<Value = SuccessorMap> {
        proptest::collection::vec(proptest::option::of(0..NODES), NODES).prop_map(|targets| {
            targets
                .into_iter()
                .enumerate()
                .filter_map(|(k, t)| t.map(|t| (node(k), node(t))))
                .collect()
        })
    }

    const ROOT: &str = "urn:pulumi:s::p::m:m:Comp::c";

    fn child_urn(name: &str) -> String {
        format!("urn:pulumi:s::p::m:m:Comp$a:b:T::{name}")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn compose_follows_every_mapping_to_its_end(map in acyclic()) {
            let out = compose(&map).unwrap();
            prop_assert_eq!(out.keys().collect::<Vec<_>>(), map.keys().collect::<Vec<_>>());
            for (k, end) in &out {
                prop_assert_eq!(Some(end.clone()), follow(&map, k), "{}", k);
                // Ends are final: composing again changes nothing.
                prop_assert!(!map.contains_key(end), "{} ends at a key {}", k, end);
            }
            prop_assert_eq!(compose(&out).unwrap(), out);
        }

        #[test]
        fn compose_names_a_loop_exactly_when_there_is_one(map in any_map()) {
            let looping = map.keys().any(|k| follow(&map, k).is_none());
            match compose(&map) {
                Ok(out) => {
                    prop_assert!(!looping);
                    for (k, end) in &out {
                        prop_assert_eq!(Some(end.clone()), follow(&map, k));
                    }
                }
                Err(cycle) => {
                    prop_assert!(looping);
                    // `a -> ... -> a`, every step a mapping of `map` (a
                    // self-mapping is the loop `[a, a]`).
                    prop_assert!(cycle.len() >= 2);
                    prop_assert_eq!(cycle.first(), cycle.last());
                    for w in cycle.windows(2) {
                        prop_assert_eq!(map.get(&w[0]), Some(&w[1]));
                    }
                }
            }
        }

        #[test]
        fn a_chain_composes_its_callbacks_renames_step_by_step(
            n in 1usize..5,
            depends in proptest::collection::vec(any::<bool>(), 5),
            steps in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 5), 1..5),
        ) {
            // Child `i` (id `id-i`) depends on child `i - 1` when asked.
            let children: Vec<Value> = (0..n)
                .map(|i| {
                    let mut c = json!({"urn": child_urn(&format!("c{i}")), "custom": true,
                        "id": format!("id-{i}"), "type": "a:b:T", "parent": ROOT});
                    if i > 0 && depends[i] {
                        c["dependencies"] = json!([child_urn(&format!("c{}", i - 1))]);
                    }
                    c
                })
                .collect();
            let root = json!({"urn": ROOT, "custom": false, "type": "m:m:Comp"});
            let subtree: Vec<State> = std::iter::once(root)
                .chain(children)
                .map(|v| serde_json::from_value(v).unwrap())
                .collect();
            let mut chain = Chain::new(Urn::parse(ROOT).unwrap(), subtree);
            // The model: every name each child has had, in order.
            let mut names: Vec<Vec<String>> = (0..n).map(|i| vec![format!("c{i}")]).collect();
            for (s, renames) in steps.iter().enumerate() {
                // The callback renames some children and leaves the others'
                // references as they were in its input.
                let mut result = chain.input_json()["oldState"].as_array().unwrap().clone();
                let mut successors = BTreeMap::new();
                for i in (0..n).filter(|&i| renames[i]) {
                    let old = child_urn(names[i].last().unwrap());
                    let name = format!("c{i}s{s}");
                    result[1 + i]["urn"] = json!(child_urn(&name));
                    successors.insert(old, child_urn(&name));
                    names[i].push(name);
                }
                chain
                    .apply(s + 1, steps.len(), CallbackOutput::Changed {
                        new_state: Value::Array(result),
                        successors,
                    })
                    .unwrap();
            }
            let o = chain.finish().unwrap();
            let urn = |name: &str| Urn::parse(&child_urn(name)).unwrap();
            let last = |i: usize| urn(names[i].last().unwrap());
            let renamed: Vec<usize> = (0..n).filter(|&i| names[i].len() > 1).collect();
            prop_assert_eq!(o.noop, renamed.is_empty());
            let original_to_final: SuccessorMap =
                renamed.iter().map(|&i| (urn(&names[i][0]), last(i))).collect();
            prop_assert_eq!(&o.original_to_final, &original_to_final);
            let all_to_final: SuccessorMap = renamed
                .iter()
                .flat_map(|&i| names[i][..names[i].len() - 1].iter().map(move |m| (m, i)))
                .map(|(m, i)| (urn(m), last(i)))
                .collect();
            prop_assert_eq!(&o.all_to_final, &all_to_final);
            prop_assert_eq!(compose(&o.all_to_final).unwrap(), o.all_to_final.clone());
            prop_assert_eq!(o.added, renamed.iter().map(|&i| last(i)).collect::<Vec<_>>());
            prop_assert_eq!(o.result.len(), n + 1);
            for (i, s) in o.result[1..].iter().enumerate() {
                prop_assert_eq!(&s.urn, &last(i));
                prop_assert_eq!(&s.id, &format!("id-{i}"));
                // A reference to a renamed child names its last URN.
                let deps = if i > 0 && depends[i] { vec![last(i - 1)] } else { Vec::new() };
                prop_assert_eq!(&s.dependencies, &deps, "child {}", i);
            }
        }
    }
}
