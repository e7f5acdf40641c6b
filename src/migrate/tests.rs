//! The pure vector check: every conformance vector (`vectors.md`) in the
//! directory named by `KEEL_VECTORS` (default `../shared/vectors` from the
//! crate root) run through the deterministic core alone: subtree, canned
//! callbacks through a [`Chain`], the checks with a [`Context`] built from
//! the vector, transaction preparation, and the expectations the core
//! decides (`rule`, `noop`, `prior`, `resources`, `successors`, `journal`,
//! `callbacksCalled`, `events`). What only the engine can decide (a
//! persister without migration support) is skipped and reported.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use serde_json::{json, Value};

use super::chain::normalized_eq;
use super::chain::{CallbackOutput, Chain, ChainOutcome};
use super::check::{pre_callback, validate};
use super::check::{Context, OperationOptions};
use super::subtree::{find_root, Subtree};
use super::transaction::Prepared;
use super::*;
use crate::model::snapshot::Snippet;
use crate::model::{State, Urn};

/// The shared vectors (`$KEEL_VECTORS`, default `../shared/vectors`) and
/// keel's own (`tests/vectors/`).
fn vector_dirs() -> [PathBuf; 2] {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    [
        match std::env::var_os("KEEL_VECTORS") {
            Some(d) => PathBuf::from(d),
            None => root.join("../shared/vectors"),
        },
        root.join("tests/vectors"),
    ]
}

/// How a vector fared.
enum Verdict {
    Passed,
    Skipped(String),
}

/// What the core produced for the migrating registration: the chain's
/// outcome and the prepared transaction (`None` for a no-op), or nothing
/// when there is no prior root.
type Done = Option<(ChainOutcome, Option<Prepared>)>;

fn urn(v: &Value) -> std::result::Result<Urn, String> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("{v} is not a URN string"))?;
    Urn::parse(s).map_err(|e| e.to_string())
}

fn urns(v: Option<&Value>) -> std::result::Result<Vec<Urn>, String> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(urn).collect(),
        Some(other) => Err(format!("{other} is not a list of URNs")),
    }
}

fn states(v: &Value) -> std::result::Result<Vec<State>, String> {
    serde_json::from_value(v.clone()).map_err(|e| format!("bad resources: {e}"))
}

fn non_empty(v: &Value, key: &str) -> bool {
    v.get(key)
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

/// Runs the migrating registration of vector `v` through the core; also
/// returns how many callbacks ran.
fn run_core(
    v: &Value,
    prior: &[State],
    expect_input_failures: &mut Vec<String>,
) -> std::result::Result<(usize, Result<Done>), String> {
    let reg = urn(&v["register"]["urn"])?;
    let aliases = urns(v["register"].get("aliases"))?;
    let prior: &[&State] = &prior.iter().collect::<Vec<_>>();
    // Earlier registrations of this deployment (the harness registers the
    // stack and the top-level providers first).
    let mut registered: HashSet<Urn> = HashSet::new();
    let mut claimed: HashSet<Urn> = HashSet::new();
    for s in prior {
        let top = s
            .parent()
            .is_none_or(|p| p.type_str() == "pulumi:pulumi:Stack");
        if !s.delete && (s.ty.is_stack() || (s.ty.is_provider() && top)) {
            registered.insert(s.urn.clone());
        }
    }
    for e in v
        .get("earlier")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(r) = e.get("register") else { continue };
        let u = urn(r)?;
        let al = urns(e.get("aliases"))?;
        if let Some(m) = find_root(prior, &u, &al) {
            if let Some(a) = m.via_alias {
                claimed.insert(a);
            }
        }
        registered.insert(u);
    }
    let has_callbacks = v["callbacks"].as_array().is_some_and(|c| !c.is_empty());
    let Some(root) = find_root(prior, &reg, &aliases).filter(|_| has_callbacks) else {
        return Ok((0, Ok(None)));
    };
    let subtree = Subtree::collect(prior, root.index);
    let opts = &v["options"];
    let preview = v["operation"] == "preview";
    let options = OperationOptions {
        targeted: ["targets", "excludes", "replaces", "targetSnippets"]
            .iter()
            .any(|k| non_empty(opts, k)),
        generate_plan: opts["generatePlan"].as_bool().unwrap_or(false),
        apply_plan: opts["applyPlan"].as_bool().unwrap_or(false),
        preview,
    };
    let snippets: Vec<Snippet> = match v["prior"].get("snippets") {
        None | Some(Value::Null) => Vec::new(),
        Some(s) => serde_json::from_value(s.clone()).map_err(|e| format!("bad snippets: {e}"))?,
    };
    let extensions = v["prior"].get("extensions").cloned().unwrap_or(Value::Null);
    let ctx = Context {
        registration: &reg,
        prior,
        subtree: &subtree,
        claimed: &claimed,
        registered: &registered,
        extensions: &extensions,
        snippets: &snippets,
        pending_operations: non_empty(&v["prior"], "pending_operations"),
        options,
    };
    let mut called = 0;
    let result = (|| -> Result<Done> {
        pre_callback(&ctx)?;
        let mut chain = Chain::new(reg.clone(), subtree.states(prior));
        let callbacks = v["callbacks"].as_array().cloned().unwrap_or_default();
        let n = callbacks.len();
        for (k, cb) in callbacks.iter().enumerate() {
            called += 1;
            if let Some(expected) = cb.get("expectInput") {
                if let Err(e) = same_input(expected, &chain.input_json()) {
                    expect_input_failures.push(format!("callback {}: {e}", k + 1));
                }
            }
            let returns = cb.get("returns").unwrap_or(&Value::Null);
            if let Some(msg) = returns.get("error") {
                return Err(MigrationError::callback_failed(&reg, k + 1, n, msg));
            }
            let out = CallbackOutput::from_json(&reg, k + 1, n, returns)?;
            chain.apply(k + 1, n, out)?;
        }
        let outcome = chain.finish()?;
        validate(&ctx, &outcome)?;
        let prepared = if outcome.noop {
            None
        } else {
            Some(transaction::prepare(&reg, prior, &subtree, &outcome)?)
        };
        Ok(Some((outcome, prepared)))
    })();
    Ok((called, result))
}

/// Compares a callback's input with a vector's `expectInput`, both
/// normalized (`migrations.md` §4.3).
fn same_input(expected: &Value, got: &Value) -> std::result::Result<(), String> {
    if expected["urn"] != got["urn"] {
        return Err(format!("urn {} != {}", got["urn"], expected["urn"]));
    }
    let e = states(&expected["oldState"])?;
    let g = states(&got["oldState"])?;
    if e.len() != g.len() || !e.iter().zip(&g).all(|(a, b)| normalized_eq(a, b)) {
        return Err(format!(
            "oldState differs:\n got {}\n expected {}",
            got["oldState"], expected["oldState"]
        ));
    }
    Ok(())
}

fn check_vector(v: &Value) -> std::result::Result<Verdict, String> {
    let expect = &v["expect"];
    let op = v["operation"].as_str().unwrap_or("update");
    let persistence = v["persistence"].as_str().unwrap_or("journal");
    let want_rule: Option<Rule> = match expect.get("rule") {
        None | Some(Value::Null) => None,
        Some(r) => Some(
            r.as_str()
                .ok_or("expect.rule is not a string")?
                .parse()
                .map_err(|e: rules::UnknownRule| e.to_string())?,
        ),
    };
    if op == "refresh" || op == "destroy" {
        // Migrations never run: no callback, no rule, no event.
        if want_rule.is_some() {
            return Ok(Verdict::Skipped(format!(
                "a {op} that expects a rule (engine-only)"
            )));
        }
        if expect.get("callbacksCalled").is_some_and(|c| c != 0) {
            return Err(format!("a {op} cannot call callbacks"));
        }
        if expect.get("events").is_some_and(|c| c != 0) {
            return Err(format!("a {op} emits no migration event"));
        }
        return Ok(Verdict::Passed);
    }
    if op != "update" && op != "preview" {
        return Ok(Verdict::Skipped(format!("operation `{op}`")));
    }
    let has_callbacks = v["callbacks"].as_array().is_some_and(|c| !c.is_empty());
    if persistence == "unsupported" && has_callbacks {
        // Rejected when the registration arrives, before any callback runs
        // (and before the prior root is looked up).
        if want_rule != Some(Rule::UnsupportedPersistence) {
            return Err(format!(
                "unsupported persistence rejects the registration, expected {want_rule:?}"
            ));
        }
        if expect.get("callbacksCalled").is_some_and(|c| c != 0) {
            return Err("no callback runs under unsupported persistence".into());
        }
        return Ok(Verdict::Passed);
    }
    let prior = states(&v["prior"]["resources"])?;
    let mut input_failures = Vec::new();
    let (called, run) = run_core(v, &prior, &mut input_failures)?;
    if !input_failures.is_empty() {
        return Err(format!(
            "expectInput mismatch: {}",
            input_failures.join("; ")
        ));
    }
    if let Some(c) = expect.get("callbacksCalled") {
        if c != &json!(called) {
            return Err(format!("callbacksCalled {called}, expected {c}"));
        }
    }
    let done = match run {
        Err(e) => {
            return match want_rule {
                Some(r) if r == e.rule => {
                    if expect.get("events").is_some_and(|n| n != 0) {
                        return Err("a rejected migration emits no event".into());
                    }
                    Ok(Verdict::Passed)
                }
                _ => Err(format!(
                    "failed with {} ({}), expected {want_rule:?}",
                    e.rule, e.message
                )),
            };
        }
        Ok(done) => done,
    };
    // After the commit: a later registration or read of a predecessor.
    let mut later_rule = None;
    if let Some((outcome, Some(_))) = &done {
        for l in v
            .get("later")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let u = match (l.get("register"), l.get("read")) {
                (Some(u), _) | (None, Some(u)) => urn(u)?,
                _ => continue,
            };
            if let Some(to) = outcome.original_to_final.get(&u) {
                let reg = urn(&v["register"]["urn"])?;
                later_rule = Some(MigrationError::predecessor_reused(&u, &reg, to).rule);
                break;
            }
        }
    }
    match (want_rule, later_rule) {
        (None, None) => {}
        (Some(w), Some(g)) if w == g => {}
        (Some(Rule::PersistenceFailed), None) if persistence == "failing" => {
            // Step 10 is the persister's: the core got that far.
            return Ok(Verdict::Passed);
        }
        (w, g) => return Err(format!("rule {g:?}, expected {w:?}")),
    }
    let (outcome, prepared) = match &done {
        Some((o, p)) => (Some(o), p.as_ref()),
        None => (None, None),
    };
    let migrated = prepared.is_some();
    if let Some(noop) = expect.get("noop").and_then(Value::as_bool) {
        if noop == migrated {
            return Err(format!("noop is {}, expected {noop}", !migrated));
        }
    }
    if let Some(n) = expect.get("events") {
        if n != &json!(usize::from(migrated)) {
            return Err(format!("events {}, expected {n}", usize::from(migrated)));
        }
    }
    let list: Vec<State> = match prepared {
        Some(p) => p.prior_list(&prior),
        None => prior.clone(),
    };
    if let Some(want) = expect.get("prior") {
        let got: Vec<&str> = list.iter().map(|s| s.urn.as_str()).collect();
        if &json!(got) != want {
            return Err(format!("prior {}, expected {want}", json!(got)));
        }
    }
    if let Some(want) = expect.get("successors") {
        let got: BTreeMap<&str, &str> = outcome
            .filter(|_| migrated)
            .map(|o| {
                o.original_to_final
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        if &json!(got) != want {
            return Err(format!("successors {}, expected {want}", json!(got)));
        }
    }
    if let Some(want) = expect.get("resources").and_then(Value::as_object) {
        for (u, fields) in want {
            let found = list.iter().find(|s| s.urn.as_str() == u && !s.delete);
            let absent = fields
                .get("absent")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            match (found, absent) {
                (None, true) => {}
                (Some(_), true) => return Err(format!("{u} is present, expected absent")),
                (None, false) => return Err(format!("{u} is missing")),
                (Some(s), false) => {
                    let j = serde_json::to_value(s).map_err(|e| e.to_string())?;
                    for (k, want) in fields.as_object().into_iter().flatten() {
                        let got = j.get(k).unwrap_or(&Value::Null);
                        if got != want {
                            return Err(format!("{u}.{k} is {got}, expected {want}"));
                        }
                    }
                }
            }
        }
    }
    if let Some(want) = expect.get("journal") {
        if persistence == "journal" {
            let Some(p) = prepared else {
                return Err("a journal entry is expected but nothing was migrated".into());
            };
            if let Some(layout) = want.get("layout") {
                let got = serde_json::to_value(&p.layout).map_err(|e| e.to_string())?;
                if &got != layout {
                    return Err(format!("layout {got}, expected {layout}"));
                }
            }
            if let Some(patches) = want.get("baseStatePatches") {
                if &json!(p.base_patches) != patches {
                    return Err(format!(
                        "baseStatePatches {}, expected {patches}",
                        json!(p.base_patches)
                    ));
                }
            }
            // Replay reproduces the prepared list.
            let patches: Vec<(usize, State)> = p
                .base_patch_states()
                .into_iter()
                .map(|(i, s)| (i, s.clone()))
                .collect();
            let replayed = transaction::apply_layout(&prior, &p.layout, &p.states, &patches)?;
            if replayed != list {
                return Err("replaying the journal entry does not give the prepared list".into());
            }
        }
    }
    Ok(Verdict::Passed)
}

#[test]
fn vectors_pass_through_the_pure_core() {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in vector_dirs() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list the vectors in {}: {e}", dir.display()));
        let mut here: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        assert!(!here.is_empty(), "no vectors in {}", dir.display());
        here.sort();
        files.extend(here);
    }
    let mut failures = Vec::new();
    let (mut passed, mut skipped) = (0, 0);
    for f in &files {
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let verdict = std::fs::read_to_string(f)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| e.to_string()))
            .and_then(|v| check_vector(&v));
        match verdict {
            Ok(Verdict::Passed) => {
                passed += 1;
                eprintln!("pass {name}");
            }
            Ok(Verdict::Skipped(why)) => {
                skipped += 1;
                eprintln!("skip {name}: {why}");
            }
            Err(e) => {
                eprintln!("FAIL {name}: {e}");
                failures.push(format!("{name}: {e}"));
            }
        }
    }
    eprintln!(
        "{passed} passed, {skipped} skipped, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
