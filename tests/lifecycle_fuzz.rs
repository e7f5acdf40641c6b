//! The lifecycle fuzzer: seeded random sequences of program versions run
//! against one stack through the real `keel` binary, with invariant checks
//! after every step.
//!
//! Each *episode* starts from an empty backend and applies a few dozen
//! steps. A step mutates the program (creates, updates, replaces in both
//! orders, deletes, renames and re-parents through aliases, component
//! migrations that rename, move or fold several resources into a
//! sub-component, retype, and split a resource's `tier` setting out into a
//! facet resource of its own with an external `command:` migration; top-level
//! `forEach` fan-outs whose keys are added, removed and reordered, and
//! actions whose inputs change, some on the ID of a resource not yet
//! created) and runs one command: `up` (with either persister, any parallelism, injected provider failures,
//! `--continue-on-error`, `--target`, `--exclude`, or SIGKILL at a random
//! moment), `preview`, `refresh` or `destroy` (whole or targeted). After
//! every step:
//! - the stack loads and passes integrity;
//! - every cloud object is owned by exactly one state (or, when no state
//!   owns it, one pending create);
//! - no plaintext secret is in any file of the backend or in keel's output;
//! - a preview changed neither the state nor the cloud;
//! - a facet's object in the cloud has its host;
//! - a clean, untargeted `up` that exited 0 left exactly the program's
//!   resources, each with one cloud object (or, for a facet resource a
//!   split made, carried by its host; an action has none), and nothing else.
//!
//! An episode ends with `refresh` and a clean `up`, which must converge to
//! exactly the program, and a preview that plans only `same` steps.
//!
//! `KEEL_FUZZ_SEED` (default 1), `KEEL_FUZZ_STEPS` (default 300),
//! `KEEL_FUZZ_EPISODE` (steps per episode, default 30) and `KEEL_FUZZ_FROM`
//! (the first episode, default 0; episodes are independent) choose the run; the long run is documented in BENCHMARKS.md. The run ends
//! by printing how many splits were chosen and how many took effect. A failure prints
//! the seed, the step, and the transcript of the episode so far (commands,
//! exit codes and program files) and the stack's files after each step,
//! kept in a directory that is not removed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::cli::{text, Keel};
use serde_json::{json, Value};

const STACK: &str = "dev";
const PROJECT: &str = "fz";
const CUSTOM_TYPES: [&str; 2] = ["fz:store:Box", "fz:net:Link"];

/// The suffix that makes a type a facet of the simulated cloud.
const FACET_SUFFIX: &str = "Settings";

/// The split migration (`python3 split.py SPEC`): moves the `move` keys
/// out of the custom resource named `host` into a new facet resource
/// (`urn`, `type`, `parent`, `inputs` plus `host`: the host's ID) with the
/// host's ID, provider and flags; prints null once the facet exists, when
/// the host is not in the state, or when the host no longer has the keys
/// (split already: a facet destroyed since must not be brought back into
/// the state by the migration that made it, as a real split migration
/// checks what it moves; a refresh can read the moved setting back from
/// the host, so the model also takes the migration out of the program once
/// a targeted destroy removes its facet: `Model::forget_split`). The prior
/// states may record aliases of earlier renames, which a result may not
/// carry: it drops them.
const SPLIT_PY: &str = r#"import json, sys

spec = json.loads(sys.argv[1])
states = json.load(sys.stdin)["oldState"]

def name(urn):
    return urn.split("::", 3)[3]

hosts = [s for s in states if s.get("custom") and not s.get("delete") and name(s["urn"]) == spec["host"]]
if any(s["urn"] == spec["urn"] for s in states) or len(hosts) != 1:
    print("null")
    sys.exit(0)
host = hosts[0]
if not any(k in (host.get("inputs") or {}) for k in spec["move"]):
    print("null")
    sys.exit(0)
for s in states:
    s.pop("aliases", None)
for part in ("inputs", "outputs"):
    for k in spec["move"]:
        (host.get(part) or {}).pop(k, None)
props = dict(spec["inputs"], host=host["id"])
facet = {
    "urn": spec["urn"],
    "custom": True,
    "id": host["id"],
    "type": spec["type"],
    "inputs": props,
    "outputs": dict(props),
    "parent": spec["parent"],
    "dependencies": [host["urn"]],
    "propertyDependencies": {"host": [host["urn"]]},
}
for k in ("provider", "extensionRef", "protect", "retainOnDelete", "external", "taint", "pendingReplacement"):
    if k in host:
        facet[k] = host[k]
states.insert(states.index(host) + 1, facet)
print(json.dumps({"newState": states, "successors": {}}))
"#;

/// Whether a type token is a facet type of the simulated cloud.
fn is_facet(ty: &str) -> bool {
    keel::provider::SimConfig::default().is_facet(ty)
}

/// splitmix64: small, seedable, good enough to drive a test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[self.below(items.len() as u64) as usize].clone())
    }
}

/// One resource of the program.
#[derive(Debug, Clone)]
struct Res {
    ty: String,
    component: bool,
    /// The key of the parent component, if any.
    parent: Option<String>,
    size: u64,
    /// A `replaceOnChanges` key: changing it replaces the resource.
    zone: u64,
    dbr: bool,
    secret: Option<String>,
    /// Keys of custom resources whose ID this one uses.
    refs: Vec<String>,
    depends_on: Vec<String>,
    /// URNs this resource was known by (until a clean `up` applies them).
    aliases: Vec<String>,
    /// `stateMigrations` entries (components; until a clean `up`).
    migrations: Vec<Value>,
    /// A setting a split can move out into a facet.
    tier: Option<u64>,
    /// For a facet: the key of its host.
    host: Option<String>,
}

/// A top-level entry outside the mutations of [`Res`]: a custom resource
/// expanded by `forEach`, or an action.
#[derive(Debug, Clone)]
enum Extra {
    /// `forEach: keys`, each expansion's `zone` its key.
    Fanout {
        ty: String,
        keys: Vec<String>,
        size: u64,
    },
    /// `action: fz:ops:runJob` with `size` as its argument and, when
    /// `on` is set, the ID of that custom resource (the action waits for
    /// it; a targeted `up` that skips its create must refuse the action).
    Action { size: u64, on: Option<String> },
}

/// The function the fuzzer's actions run (the simulated cloud answers
/// `run<Thing>`).
const ACTION_FN: &str = "fz:ops:runJob";

/// The program as the fuzzer means it.
#[derive(Debug, Clone, Default)]
struct Model {
    res: BTreeMap<String, Res>,
    extras: BTreeMap<String, Extra>,
    next: u64,
    secrets: bool,
    /// Every secret plaintext ever used.
    plaintexts: BTreeSet<String>,
    /// The split migration's script.
    split_script: String,
    /// Splits chosen.
    splits: u64,
    /// Facets of splits not yet applied by a clean `up`.
    pending_splits: Vec<String>,
}

impl Model {
    fn qualified_type(&self, key: &str) -> String {
        let mut chain = Vec::new();
        let mut at = Some(key.to_owned());
        while let Some(k) = at {
            let r = &self.res[&k];
            chain.push(r.ty.clone());
            at = r.parent.clone();
        }
        chain.reverse();
        chain.join("$")
    }

    fn urn(&self, key: &str) -> String {
        format!(
            "urn:pulumi:{STACK}::{PROJECT}::{}::{key}",
            self.qualified_type(key)
        )
    }

    fn keys(&self, f: impl Fn(&Res) -> bool) -> Vec<String> {
        self.res
            .iter()
            .filter(|(_, r)| f(r))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Is `key` at or below `ancestor`?
    fn below(&self, key: &str, ancestor: &str) -> bool {
        let mut at = Some(key.to_owned());
        while let Some(k) = at {
            if k == ancestor {
                return true;
            }
            at = self.res[&k].parent.clone();
        }
        false
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    /// Re-keys `old` as `new` everywhere (parents, references).
    fn rekey(&mut self, old: &str, new: &str) {
        let r = self.res.remove(old).expect("rekey of a known resource");
        self.res.insert(new.to_owned(), r);
        for k in &mut self.pending_splits {
            if k == old {
                *k = new.to_owned();
            }
        }
        for r in self.res.values_mut() {
            for k in r
                .refs
                .iter_mut()
                .chain(r.depends_on.iter_mut())
                .chain(r.parent.iter_mut())
                .chain(r.host.iter_mut())
            {
                if k == old {
                    *k = new.to_owned();
                }
            }
        }
        for e in self.extras.values_mut() {
            if let Extra::Action { on: Some(k), .. } = e {
                if k == old {
                    *k = new.to_owned();
                }
            }
        }
    }

    fn program(&self) -> Value {
        let mut resources = serde_json::Map::new();
        for (k, r) in &self.res {
            let mut body = json!({ "type": r.ty });
            let mut options = serde_json::Map::new();
            if r.component {
                body["component"] = json!(true);
            } else {
                let mut props = json!({ "size": r.size, "zone": format!("z{}", r.zone) });
                for (i, dep) in r.refs.iter().enumerate() {
                    props[format!("ref{i}")] = json!(format!("${{{dep}.id}}"));
                }
                if let Some(t) = r.tier {
                    props["tier"] = json!(t);
                }
                if let Some(h) = &r.host {
                    props["host"] = json!(format!("${{{h}.id}}"));
                }
                if let Some(s) = &r.secret {
                    props["token"] = json!({ "fn::secret": s });
                }
                body["properties"] = props;
                options.insert("replaceOnChanges".into(), json!(["zone"]));
                if r.dbr {
                    options.insert("deleteBeforeReplace".into(), json!(true));
                }
            }
            if let Some(p) = &r.parent {
                options.insert("parent".into(), json!(p));
            }
            if !r.depends_on.is_empty() {
                options.insert("dependsOn".into(), json!(r.depends_on));
            }
            if !r.aliases.is_empty() {
                options.insert("aliases".into(), json!(r.aliases));
            }
            if !r.migrations.is_empty() {
                options.insert("stateMigrations".into(), json!(r.migrations));
            }
            if !options.is_empty() {
                body["options"] = Value::Object(options);
            }
            resources.insert(k.clone(), body);
        }
        for (k, e) in &self.extras {
            let body = match e {
                Extra::Fanout { ty, keys, size } => json!({
                    "type": ty,
                    "forEach": keys,
                    "properties": { "size": size, "zone": "${each.key}" },
                }),
                Extra::Action { size, on } => {
                    let mut props = json!({ "size": size });
                    if let Some(k) = on {
                        props["on"] = json!(format!("${{{k}.id}}"));
                    }
                    json!({ "action": ACTION_FN, "properties": props })
                }
            };
            resources.insert(k.clone(), body);
        }
        json!({ "name": PROJECT, "resources": resources })
    }

    /// What a clean `up` must leave: the URN of every program resource and
    /// whether it is custom.
    fn expected(&self) -> BTreeMap<String, bool> {
        let mut out: BTreeMap<String, bool> = self
            .res
            .iter()
            .map(|(k, r)| (self.urn(k), !r.component))
            .collect();
        for (k, e) in &self.extras {
            match e {
                Extra::Fanout { ty, keys, .. } => {
                    for key in keys {
                        out.insert(
                            format!("urn:pulumi:{STACK}::{PROJECT}::{ty}::{k}[\"{key}\"]"),
                            true,
                        );
                    }
                }
                Extra::Action { .. } => {
                    out.insert(
                        format!("urn:pulumi:{STACK}::{PROJECT}::{ACTION_FN}::{k}"),
                        true,
                    );
                }
            }
        }
        out
    }

    /// Forgets aliases and migrations once a clean `up` applied them.
    fn settle(&mut self) {
        for r in self.res.values_mut() {
            r.aliases.clear();
            r.migrations.clear();
        }
        self.pending_splits.clear();
    }

    /// Forgets the migrations (not the aliases), which the state no
    /// longer fits.
    fn drop_migrations(&mut self) {
        for r in self.res.values_mut() {
            r.migrations.clear();
        }
        self.pending_splits.clear();
    }

    /// A targeted destroy removed the facet `urn` from the state; returns
    /// whether its split was still pending. The split migration that made
    /// it stays in the program until a clean `up` settles it, and its guard
    /// (the host still has the moved setting) no longer holds once a
    /// refresh has read the setting back from the host, which still carries
    /// it (as Pulumi does, a refresh takes the inputs a read returns): the
    /// migration would split the facet into the state again with no object
    /// behind it, every time. A team whose split has run takes the migration
    /// out; so does the model, and the program's facet is then created on
    /// its host. It is the only migration in the program: `migrate` adds
    /// none while one is pending.
    fn forget_split(&mut self, urn: &str) -> bool {
        // A facet the program has dropped since has no URN to compare.
        let pending = self
            .pending_splits
            .iter()
            .any(|f| self.res.contains_key(f) && self.urn(f) == urn);
        if pending {
            self.drop_migrations();
        }
        pending
    }

    fn pending_renames(&self) -> bool {
        self.res
            .values()
            .any(|r| !r.aliases.is_empty() || !r.migrations.is_empty())
    }
}

/// One mutation of the program; returns what it did, for the transcript.
fn mutate(m: &mut Model, rng: &mut Rng) -> String {
    if rng.chance(10) {
        return mutate_extra(m, rng);
    }
    let customs = m.keys(|r| !r.component);
    let components = m.keys(|r| r.component);
    let choice = if m.res.len() < 3 { 0 } else { rng.below(100) };
    match choice {
        0..=24 => {
            let key = m.fresh("r");
            let parent = if rng.chance(50) {
                rng.pick(&components)
            } else {
                None
            };
            let mut refs = Vec::new();
            for _ in 0..rng.below(3) {
                if let Some(d) = rng.pick(&customs) {
                    if !refs.contains(&d) {
                        refs.push(d);
                    }
                }
            }
            let depends_on = if rng.chance(20) {
                rng.pick(&m.keys(|_| true)).into_iter().collect()
            } else {
                Vec::new()
            };
            let secret = (m.secrets && rng.chance(40)).then(|| format!("pw-{:016x}", rng.next()));
            if let Some(s) = &secret {
                m.plaintexts.insert(s.clone());
            }
            m.res.insert(
                key.clone(),
                Res {
                    ty: rng.pick(&CUSTOM_TYPES).unwrap().to_owned(),
                    component: false,
                    parent,
                    size: rng.below(10),
                    zone: 0,
                    dbr: rng.chance(30),
                    secret,
                    refs,
                    depends_on,
                    aliases: Vec::new(),
                    migrations: Vec::new(),
                    tier: rng.chance(50).then(|| rng.below(5)),
                    host: None,
                },
            );
            // An action on a resource not yet created: a targeted `up`
            // that skips the create must refuse the action.
            if rng.chance(15) {
                let x = m.fresh("x");
                let what = format!("add custom {key} and action {x} on it");
                m.extras.insert(
                    x,
                    Extra::Action {
                        size: 0,
                        on: Some(key),
                    },
                );
                return what;
            }
            format!("add custom {key}")
        }
        25..=34 => {
            let key = m.fresh("c");
            let parent = if rng.chance(40) {
                rng.pick(&components)
            } else {
                None
            };
            let ty = format!("fz:app:G{}", m.next);
            m.res.insert(
                key.clone(),
                Res {
                    ty,
                    component: true,
                    parent,
                    size: 0,
                    zone: 0,
                    dbr: false,
                    secret: None,
                    refs: Vec::new(),
                    depends_on: Vec::new(),
                    aliases: Vec::new(),
                    migrations: Vec::new(),
                    tier: None,
                    host: None,
                },
            );
            format!("add component {key}")
        }
        35..=49 => match rng.pick(&customs) {
            Some(k) => {
                m.res.get_mut(&k).unwrap().size += 1;
                format!("update {k}")
            }
            None => "nothing".into(),
        },
        50..=61 => match rng.pick(&customs) {
            Some(k) => {
                let flip = rng.chance(50);
                let r = m.res.get_mut(&k).unwrap();
                r.zone += 1;
                if flip {
                    r.dbr = !r.dbr;
                }
                format!("replace {k} (deleteBeforeReplace {})", r.dbr)
            }
            None => "nothing".into(),
        },
        62..=73 => {
            let Some(k) = rng.pick(&m.keys(|_| true)) else {
                return "nothing".into();
            };
            // A facet goes with its host.
            let gone: BTreeSet<String> = m
                .keys(|_| true)
                .into_iter()
                .filter(|x| {
                    m.below(x, &k) || m.res[x].host.as_ref().is_some_and(|h| m.below(h, &k))
                })
                .collect();
            for g in &gone {
                m.res.remove(g);
            }
            for r in m.res.values_mut() {
                r.refs.retain(|x| !gone.contains(x));
                r.depends_on.retain(|x| !gone.contains(x));
            }
            for e in m.extras.values_mut() {
                if let Extra::Action { on, .. } = e {
                    if on.as_ref().is_some_and(|x| gone.contains(x)) {
                        *on = None;
                    }
                }
            }
            format!("delete {k} and below ({} resources)", gone.len())
        }
        74..=81 => {
            // Rename through an alias (components too: children's URNs
            // hold types, not names).
            let Some(k) = rng.pick(&m.keys(|r| r.migrations.is_empty())) else {
                return "nothing".into();
            };
            let old = m.urn(&k);
            let new = m.fresh(if m.res[&k].component { "c" } else { "r" });
            m.rekey(&k, &new);
            m.res.get_mut(&new).unwrap().aliases.push(old);
            format!("rename {k} -> {new} (alias)")
        }
        82..=87 => {
            // Re-parent a custom resource through an alias.
            let Some(k) = rng.pick(&customs) else {
                return "nothing".into();
            };
            let old = m.urn(&k);
            let to = if rng.chance(30) {
                None
            } else {
                rng.pick(&components)
            };
            if to == m.res[&k].parent {
                return "nothing".into();
            }
            let r = m.res.get_mut(&k).unwrap();
            r.parent = to.clone();
            r.aliases.push(old);
            format!("re-parent {k} under {to:?} (alias)")
        }
        _ => migrate(m, rng),
    }
}

/// A fan-out or an action: added, its keys added, removed or reordered,
/// its inputs changed (an action then runs again), or removed.
fn mutate_extra(m: &mut Model, rng: &mut Rng) -> String {
    const KEYS: [&str; 4] = ["a", "b", "c", "d"];
    let existing: Vec<String> = m.extras.keys().cloned().collect();
    let Some(k) = rng.pick(&existing).filter(|_| !rng.chance(30)) else {
        if rng.chance(50) {
            let key = m.fresh("f");
            let keys: Vec<String> = KEYS
                .iter()
                .filter(|_| rng.chance(50))
                .map(|s| (*s).to_owned())
                .collect();
            let ty = rng.pick(&CUSTOM_TYPES).unwrap().to_owned();
            let what = format!("add fan-out {key} over {keys:?}");
            m.extras.insert(key, Extra::Fanout { ty, keys, size: 0 });
            return what;
        }
        let key = m.fresh("x");
        let on = if rng.chance(50) {
            rng.pick(&m.keys(|r| !r.component))
        } else {
            None
        };
        let what = format!("add action {key} on {on:?}");
        m.extras.insert(key, Extra::Action { size: 0, on });
        return what;
    };
    if rng.chance(15) {
        m.extras.remove(&k);
        return format!("remove {k}");
    }
    match m.extras.get_mut(&k).unwrap() {
        Extra::Action { size, .. } => {
            *size += 1;
            format!("change action {k}'s input (it runs again)")
        }
        Extra::Fanout { keys, size, .. } => match rng.below(4) {
            0 => {
                let add = rng.pick(&KEYS).unwrap().to_owned();
                if keys.contains(&add) {
                    return "nothing".into();
                }
                keys.push(add.clone());
                format!("fan-out {k}: add key {add}")
            }
            1 => {
                let Some(gone) = rng.pick(keys) else {
                    return "nothing".into();
                };
                keys.retain(|x| *x != gone);
                format!("fan-out {k}: remove key {gone}")
            }
            2 => {
                keys.reverse();
                format!("fan-out {k}: reorder to {keys:?}")
            }
            _ => {
                *size += 1;
                format!("fan-out {k}: update every expansion")
            }
        },
    }
}

/// A component migration: rename, move, retype or split.
///
/// A facet keeps its URN through migrations other than retype (which it
/// follows only with its host): should the migration be dropped (see
/// `converge`), a facet under a new URN would be a second facet on its
/// host, which the simulated cloud refuses (a real provider would
/// overwrite the old one and then delete it with the old resource).
fn migrate(m: &mut Model, rng: &mut Rng) -> String {
    if m.pending_renames() {
        return "nothing (a rename is pending)".into();
    }
    let components = m.keys(|r| r.component);
    let Some(c) = rng.pick(&components) else {
        return "nothing".into();
    };
    let below: Vec<String> = m
        .keys(|_| true)
        .into_iter()
        .filter(|k| k != &c && m.below(k, &c))
        .collect();
    match rng.below(5) {
        3 | 4 => split(m, rng, &c, &below),
        0 => {
            let customs: Vec<String> = below
                .iter()
                .filter(|k| !m.res[*k].component && m.res[*k].host.is_none())
                .cloned()
                .collect();
            let Some(x) = rng.pick(&customs) else {
                return "nothing".into();
            };
            let y = m.fresh("r");
            m.rekey(&x, &y);
            m.res.get_mut(&c).unwrap().migrations = vec![json!({"rename": {"from": x, "to": y}})];
            format!("migration on {c}: rename {x} -> {y}")
        }
        1 => {
            let targets: Vec<String> = below
                .iter()
                .filter(|k| m.res[*k].component)
                .cloned()
                .collect();
            let Some(d) = rng.pick(&targets) else {
                return "nothing".into();
            };
            let movable: Vec<String> = below
                .iter()
                .filter(|k| {
                    let r = &m.res[*k];
                    !r.component && r.host.is_none() && r.parent.as_deref() != Some(d.as_str())
                })
                .cloned()
                .collect();
            // One resource moves; several fold into `d`.
            let mut moved: Vec<String> = Vec::new();
            for _ in 0..=rng.below(3) {
                if let Some(x) = rng.pick(&movable) {
                    if !moved.contains(&x) {
                        moved.push(x);
                    }
                }
            }
            if moved.is_empty() {
                return "nothing".into();
            }
            for x in &moved {
                m.res.get_mut(x).unwrap().parent = Some(d.clone());
            }
            m.res.get_mut(&c).unwrap().migrations =
                vec![json!({"move": {"resources": moved, "under": d}})];
            format!("migration on {c}: move {moved:?} under {d}")
        }
        _ => {
            // Without an alias, the subtree is created anew and the old
            // one deleted: a facet whose host stays would be made twice.
            let stays = |k: &String| m.res[k].host.as_ref().is_some_and(|h| !below.contains(h));
            if let Some(f) = below.iter().find(|k| stays(k)) {
                return format!("nothing (a retype of {c} would make facet {f} anew on its host)");
            }
            m.next += 1;
            let to = format!("fz:app:G{}", m.next);
            let r = m.res.get_mut(&c).unwrap();
            let from = std::mem::replace(&mut r.ty, to.clone());
            r.migrations = vec![json!({"retype": {"from": from, "to": to}})];
            format!("migration on {c}: retype {from} -> {to}")
        }
    }
}

/// A split migration on `c`: a custom resource under it (`below`) with a
/// `tier` moves it into a new facet resource of type `<its type>Settings`
/// with the same ID and provider, a sibling of it referring to it by its
/// `host` input, through an external command.
fn split(m: &mut Model, rng: &mut Rng, c: &str, below: &[String]) -> String {
    let hosts: Vec<String> = below
        .iter()
        .filter(|k| {
            let r = &m.res[*k];
            !r.component && r.tier.is_some() && !is_facet(&r.ty)
        })
        .cloned()
        .collect();
    let Some(x) = rng.pick(&hosts) else {
        return "nothing".into();
    };
    m.splits += 1;
    let f = m.fresh("r");
    let host = m.res.get_mut(&x).unwrap();
    let tier = host.tier.take();
    let facet = Res {
        ty: format!("{}{FACET_SUFFIX}", host.ty),
        component: false,
        parent: host.parent.clone(),
        size: 0,
        zone: 0,
        dbr: false,
        secret: None,
        refs: Vec::new(),
        depends_on: Vec::new(),
        aliases: Vec::new(),
        migrations: Vec::new(),
        tier,
        host: Some(x.clone()),
    };
    let parent = facet
        .parent
        .clone()
        .expect("a resource below a component has a parent");
    let ty = facet.ty.clone();
    m.res.insert(f.clone(), facet);
    let spec = json!({
        "host": x,
        "urn": m.urn(&f),
        "parent": m.urn(&parent),
        "type": ty,
        "inputs": {"size": 0, "zone": "z0", "tier": tier},
        "move": ["tier"],
    });
    m.res.get_mut(c).unwrap().migrations = vec![json!({
        "command": ["python3", m.split_script, spec.to_string()]
    })];
    m.pending_splits.push(f.clone());
    format!("migration on {c}: split {x}'s tier into facet {f} ({ty})")
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Code(i32),
    Killed,
}

/// What the checks read of the world.
struct World {
    state: Value,
    cloud: Vec<Value>,
    /// Facets deleted from hosts that still exist, as (type, ID).
    removed_facets: BTreeSet<(String, String)>,
}

impl World {
    /// Whether the cloud has an object of `ty` with `id`.
    fn has(&self, ty: &Value, id: &Value) -> bool {
        self.cloud
            .iter()
            .any(|o| &o["type"] == ty && &o["id"] == id)
    }

    /// Whether a host (an object of a non-facet type) has `id`.
    fn has_host(&self, id: &Value) -> bool {
        self.cloud
            .iter()
            .any(|o| &o["id"] == id && !is_facet(o["type"].as_str().unwrap_or_default()))
    }

    /// Whether the state resource `r` is a facet its host carries: no
    /// object of its own, its host there and the facet not removed from it.
    fn carried(&self, r: &Value) -> bool {
        let (ty, id) = (&r["type"], &r["id"]);
        let (t, i) = (
            ty.as_str().unwrap_or_default(),
            id.as_str().unwrap_or_default(),
        );
        is_facet(t)
            && !self.has(ty, id)
            && self.has_host(id)
            && !self.removed_facets.contains(&(t.to_owned(), i.to_owned()))
    }
}

struct Fuzz {
    keel: Keel,
    rng: Rng,
    model: Model,
    seed: u64,
    transcript: Vec<String>,
    keep: PathBuf,
    program_no: usize,
    episode: u64,
    /// The global number of the episode's first step.
    first_step: usize,
    /// Splits whose facet a clean `up` found carried by its host.
    splits_applied: u64,
}

impl Fuzz {
    fn new(seed: u64, episode: u64, first_step: usize) -> Self {
        let mut rng = Rng(seed ^ episode.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let mut keel = Keel::new();
        let secrets = rng.chance(25);
        if secrets {
            keel.passphrase = Some("fuzz passphrase".into());
        }
        let keep = keel.path().join("transcript");
        std::fs::create_dir_all(&keep).unwrap();
        let script = keep.join("split.py");
        std::fs::write(&script, SPLIT_PY).unwrap();
        Self {
            keel,
            rng,
            model: Model {
                secrets,
                split_script: script.display().to_string(),
                ..Model::default()
            },
            seed,
            transcript: Vec::new(),
            keep,
            program_no: 0,
            episode,
            first_step,
            splits_applied: 0,
        }
    }

    fn write_program(&mut self) -> String {
        self.program_no += 1;
        let p = self
            .keep
            .join(format!("program-{:03}.json", self.program_no));
        std::fs::write(
            &p,
            serde_json::to_vec_pretty(&self.model.program()).unwrap(),
        )
        .unwrap();
        p.display().to_string()
    }

    /// Runs keel; with `kill_after`, SIGKILLs it after that long.
    fn run(&mut self, args: &[String], kill_after: Option<Duration>) -> (Exit, String) {
        let mut c = Command::new(env!("CARGO_BIN_EXE_keel"));
        c.current_dir(self.keel.path()).env_remove("KEEL_BACKEND");
        for var in ["KEEL_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE"] {
            c.env_remove(var).env_remove(format!("{var}_FILE"));
        }
        if let Some(p) = &self.keel.passphrase {
            c.env("KEEL_CONFIG_PASSPHRASE", p);
        }
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = std::time::Instant::now();
        let (exit, output) = match kill_after {
            None => {
                let o = c.output().expect("run keel");
                let code = o.status.code().map_or(Exit::Killed, Exit::Code);
                (code, format!("{}{}", text(&o.stdout), text(&o.stderr)))
            }
            Some(d) => {
                let mut child = c.spawn().expect("spawn keel");
                std::thread::sleep(d);
                let _ = child.kill();
                let o = child.wait_with_output().expect("wait for keel");
                let exit = o.status.code().map_or(Exit::Killed, Exit::Code);
                (exit, format!("{}{}", text(&o.stdout), text(&o.stderr)))
            }
        };
        self.transcript.push(format!(
            "keel {} -> {exit:?} ({} ms)",
            args.join(" "),
            started.elapsed().as_millis()
        ));
        (exit, output)
    }

    fn fail(&mut self, step: usize, why: &str) -> ! {
        let log = self.keep.join("transcript.txt");
        std::fs::write(&log, self.transcript.join("\n")).unwrap();
        // Keep the directory for inspection.
        let dir = std::mem::replace(&mut self.keel.dir, tempfile::tempdir().unwrap());
        let kept = dir.keep();
        panic!(
            "lifecycle fuzzer: seed {seed}, step {step}: {why}\n\
             reproduce: KEEL_FUZZ_SEED={seed} KEEL_FUZZ_FROM={episode} KEEL_FUZZ_STEPS={n} cargo test --release --test lifecycle_fuzz -- --nocapture\n\
             backend and program files kept in {dir}\ntranscript:\n{t}",
            seed = self.seed,
            episode = self.episode,
            n = step + 1 - self.first_step,
            dir = kept.display(),
            t = self.transcript.join("\n")
        );
    }

    fn world(&mut self, step: usize) -> World {
        let backend = keel::persist::backend::Backend::new(self.keel.backend());
        let loaded = match backend.load(STACK) {
            Ok(l) => l,
            Err(e) => self.fail(step, &format!("the stack does not load: {e}")),
        };
        if let Err(e) = keel::model::integrity::verify(&loaded.deployment) {
            self.fail(step, &format!("the stack fails integrity: {e}"));
        }
        let state = serde_json::to_value(&loaded.deployment).unwrap();
        let (exit, out) = self.run(&["cloud".into(), "list".into(), "--json".into()], None);
        if exit != Exit::Code(0) {
            self.fail(step, &format!("cloud list failed: {out}"));
        }
        let cloud: Vec<Value> = match serde_json::from_str(&out) {
            Ok(Value::Array(a)) => a,
            _ => self.fail(step, &format!("cloud list is not a JSON array: {out}")),
        };
        let path = self.keel.backend().join("cloud.json");
        let removed_facets = match keel::provider::SimCloud::load(&path, Default::default()) {
            Ok(c) => c.removed_facets().into_iter().collect(),
            Err(e) => self.fail(step, &format!("the cloud does not load: {e}")),
        };
        World {
            state,
            cloud,
            removed_facets,
        }
    }

    /// Keeps a copy of the stack's files after `step`, for a post-mortem.
    fn snapshot_files(&self, step: usize) {
        let stack = self.keel.backend().join("stacks").join(STACK);
        let Ok(entries) = std::fs::read_dir(&stack) else {
            return;
        };
        let to = self.keep.join(format!("state-{step:05}"));
        std::fs::create_dir_all(&to).unwrap();
        for e in entries.flatten() {
            if e.path().is_file() && e.file_name() != "lock" {
                let _ = std::fs::copy(e.path(), to.join(e.file_name()));
            }
        }
    }

    /// The invariants that hold after every step.
    fn check(&mut self, step: usize, output: &str) -> World {
        self.snapshot_files(step);
        if output.contains("panicked") {
            self.fail(step, &format!("keel panicked:\n{output}"));
        }
        let w = self.world(step);
        let resources = w.state["resources"].as_array().cloned().unwrap_or_default();
        let pending = w.state["pending_operations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for o in &w.cloud {
            let (ty, id, name) = (&o["type"], &o["id"], &o["name"]);
            let owners = resources
                .iter()
                .filter(|r| r["custom"] == true && &r["type"] == ty && &r["id"] == id)
                .count();
            let creating = pending
                .iter()
                .filter(|p| {
                    let r = &p["resource"];
                    &r["type"] == ty
                        && (&r["id"] == id
                            || (r["id"].as_str().unwrap_or_default().is_empty()
                                && r["urn"]
                                    .as_str()
                                    .is_some_and(|u| u.rsplit("::").next() == name.as_str())))
                })
                .count();
            if !(owners == 1 || owners == 0 && creating == 1) {
                self.fail(
                    step,
                    &format!(
                        "cloud object {ty} {id} has {owners} owning states and {creating} pending operations\nstate: {:#}",
                        w.state
                    ),
                );
            }
        }
        for o in &w.cloud {
            if is_facet(o["type"].as_str().unwrap_or_default()) && !w.has_host(&o["id"]) {
                self.fail(
                    step,
                    &format!("facet {} {} has no host", o["type"], o["id"]),
                );
            }
        }
        let plaintexts: Vec<String> = self.model.plaintexts.iter().cloned().collect();
        for s in &plaintexts {
            if output.contains(s.as_str()) {
                self.fail(step, &format!("secret {s} in keel's output:\n{output}"));
            }
        }
        if !plaintexts.is_empty() {
            for (path, bytes) in self.keel.files() {
                for s in &plaintexts {
                    if bytes.windows(s.len()).any(|w| w == s.as_bytes()) {
                        self.fail(
                            step,
                            &format!("secret {s} in plaintext in {}", path.display()),
                        );
                    }
                }
            }
        }
        w
    }

    /// After a clean `up`: exactly the program, nothing else.
    fn exact(&mut self, step: usize, w: &World) {
        let expected = self.model.expected();
        let resources = w.state["resources"].as_array().cloned().unwrap_or_default();
        if !w.state["pending_operations"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            self.fail(step, "pending operations after a clean up");
        }
        let mut live: BTreeMap<String, Value> = BTreeMap::new();
        let mut carried = 0;
        for r in &resources {
            let urn = r["urn"].as_str().unwrap_or_default().to_owned();
            let ty = r["type"].as_str().unwrap_or_default();
            if r["delete"] == true {
                self.fail(
                    step,
                    &format!("{urn} still pending deletion after a clean up"),
                );
            }
            if ty == "pulumi:pulumi:Stack" || ty.starts_with("pulumi:providers:") {
                continue;
            }
            if !expected.contains_key(&urn) {
                self.fail(
                    step,
                    &format!("{urn} is in the state but not in the program"),
                );
            }
            if r["custom"] == true && r["external"] != true && !w.has(&r["type"], &r["id"]) {
                if !w.carried(r) {
                    self.fail(step, &format!("{urn} has no cloud object"));
                }
                carried += 1;
            }
            live.insert(urn, r.clone());
        }
        for (urn, custom) in &expected {
            match live.get(urn) {
                None => self.fail(step, &format!("{urn} of the program is not in the state")),
                Some(r) if r["custom"] != *custom => {
                    self.fail(step, &format!("{urn} has the wrong custom flag"))
                }
                _ => {}
            }
        }
        // Actions (external entries) have no cloud object.
        let actions = resources.iter().filter(|r| r["external"] == true).count();
        let customs = expected.values().filter(|c| **c).count() - actions;
        if w.cloud.len() + carried != customs {
            self.fail(
                step,
                &format!(
                    "the cloud holds {} objects (and its hosts carry {carried} facets) for {customs} custom resources: {:#}",
                    w.cloud.len(),
                    Value::Array(w.cloud.clone())
                ),
            );
        }
    }

    fn base_args(&mut self, command: &str, program: Option<&str>) -> Vec<String> {
        let mut a = vec![command.to_owned()];
        if let Some(p) = program {
            a.extend(["--program".into(), p.to_owned()]);
        }
        if command != "preview" {
            a.push("--yes".into());
        }
        if command != "preview" && self.rng.chance(50) {
            a.extend(["--persistence".into(), "checkpoint".into()]);
        }
        if self.rng.chance(30) {
            a.push("--json".into());
        }
        a.extend(["--parallel".into(), (1 + self.rng.below(8)).to_string()]);
        a
    }

    /// A random URN of the program or the state.
    fn some_urn(&mut self) -> Option<String> {
        let keys = self.model.keys(|_| true);
        self.rng.pick(&keys).map(|k| self.model.urn(&k))
    }

    /// One step: mutate, run a command, check.
    fn step(&mut self, step: usize) {
        let mut did = Vec::new();
        for _ in 0..=self.rng.below(3) {
            did.push(mutate(&mut self.model, &mut self.rng));
        }
        let program = self.write_program();
        self.transcript.push(format!(
            "step {step}: {} -> {}",
            did.join("; "),
            Path::new(&program).file_name().unwrap().to_string_lossy()
        ));
        let roll = self.rng.below(100);
        let mut clean_up = false;
        let mut kill = None;
        let mut lenient = false;
        let mut destroyed = None;
        let (args, preview_before) = match roll {
            0..=5 => {
                let a = self.base_args("preview", Some(&program));
                (a, Some(self.world(step)))
            }
            6..=10 => (self.base_args("refresh", Some(&program)), None),
            11..=13 => (self.base_args("destroy", Some(&program)), None),
            14..=16 => {
                let mut a = self.base_args("destroy", Some(&program));
                if let Some(u) = self.some_urn() {
                    a.extend(["--target".into(), u.clone()]);
                    destroyed = Some(u);
                }
                lenient = true;
                (a, None)
            }
            _ => {
                let mut a = self.base_args("up", Some(&program));
                let extra = self.rng.below(100);
                match extra {
                    0..=11 => {
                        if let Some(k) = self.rng.pick(&self.model.keys(|r| !r.component)) {
                            a.extend(["--sim-fail".into(), k]);
                        }
                    }
                    12..=19 => {
                        a.extend([
                            "--sim-fail-rate".into(),
                            "0.3".into(),
                            "--sim-seed".into(),
                            self.rng.below(1000).to_string(),
                        ]);
                    }
                    20..=37 => {
                        let latency = 1 + self.rng.below(8);
                        a.extend(["--sim-latency-ms".into(), latency.to_string()]);
                        let span = 30 + latency * 3 * (self.model.res.len() as u64 + 1);
                        kill = Some(Duration::from_millis(self.rng.below(span)));
                    }
                    38..=43 => {
                        if let Some(u) = self.some_urn() {
                            a.extend(["--target".into(), u]);
                            lenient = true;
                        }
                    }
                    44..=47 => {
                        if let Some(u) = self.some_urn() {
                            a.extend(["--exclude".into(), u]);
                            lenient = true;
                        }
                    }
                    _ => clean_up = true,
                }
                if extra <= 19 && self.rng.chance(50) {
                    a.push("--continue-on-error".into());
                }
                (a, None)
            }
        };
        // Before the first up there is no stack to refresh or destroy.
        let no_stack = !self.keel.backend().join("stacks").join(STACK).exists();
        let (exit, output) = self.run(&args, kill);
        match exit {
            Exit::Code(0) | Exit::Code(1) | Exit::Killed => {}
            Exit::Code(2) if lenient || no_stack => {}
            Exit::Code(c) => self.fail(step, &format!("exit {c}:\n{output}")),
        }
        if clean_up && exit != Exit::Code(0) && !output.contains("state migration rejected") {
            self.fail(step, &format!("a clean up failed:\n{output}"));
        }
        let w = self.check(step, &output);
        if let Some(u) = destroyed {
            if self.model.forget_split(&u) {
                self.transcript.push(format!(
                    "(the split migration that made {u} leaves the program)"
                ));
            }
        }
        if let Some(before) = preview_before {
            if before.state["resources"] != w.state["resources"] || before.cloud != w.cloud {
                self.fail(step, "a preview changed the state or the cloud");
            }
        }
        if clean_up && exit == Exit::Code(0) {
            self.exact(step, &w);
            self.count_splits(&w);
            self.model.settle();
        }
    }

    /// Counts the pending splits that took effect: their facets are in the
    /// state, carried by their hosts (a facet created afresh, when the
    /// split did not apply, has an object of its own).
    fn count_splits(&mut self, w: &World) {
        let resources = w.state["resources"].as_array().cloned().unwrap_or_default();
        for f in std::mem::take(&mut self.model.pending_splits) {
            if !self.model.res.contains_key(&f) {
                continue; // deleted since
            }
            let urn = self.model.urn(&f);
            if resources
                .iter()
                .any(|r| r["urn"] == urn.as_str() && r["delete"] != true && w.carried(r))
            {
                self.splits_applied += 1;
            }
        }
    }

    /// The end of an episode: refresh and a clean up converge, and then a
    /// preview plans nothing.
    fn converge(&mut self, step: usize) {
        let program = self.write_program();
        self.transcript.push(format!("converge with {program}"));
        let refresh = self.base_args("refresh", Some(&program));
        let (exit, out) = self.run(&refresh, None);
        if exit != Exit::Code(0) {
            self.fail(step, &format!("the final refresh failed:\n{out}"));
        }
        self.check(step, &out);
        let up = vec![
            "up".to_owned(),
            "--program".into(),
            program.clone(),
            "--yes".into(),
        ];
        let (mut exit, mut out) = self.run(&up, None);
        if exit == Exit::Code(1) && out.contains("state migration rejected [") {
            // A migration the state no longer fits (deletions a failed
            // update left pending, a `move` under a component whose create
            // failed) is refused, changing nothing; as its message says, the
            // program then runs without it (its resources are replaced, not
            // renamed; aliases stay: a facet renamed through one cannot be
            // made anew on its host while its old self holds it).
            self.model.drop_migrations();
            let program = self.write_program();
            let up = vec!["up".to_owned(), "--program".into(), program, "--yes".into()];
            (exit, out) = self.run(&up, None);
        }
        if exit != Exit::Code(0) {
            self.fail(step, &format!("the final up failed:\n{out}"));
        }
        let w = self.check(step, &out);
        self.exact(step, &w);
        self.count_splits(&w);
        self.model.settle();
        let program = self.write_program();
        let preview = vec![
            "preview".to_owned(),
            "--program".into(),
            program,
            "--json".into(),
        ];
        let (exit, out) = self.run(&preview, None);
        if exit != Exit::Code(0) {
            self.fail(step, &format!("the final preview failed:\n{out}"));
        }
        let summary = out
            .lines()
            .last()
            .and_then(|l| serde_json::from_str::<Value>(l).ok());
        let changes: Vec<String> = summary
            .as_ref()
            .and_then(|s| s["steps"].as_object())
            .map(|o| o.keys().filter(|k| *k != "same").cloned().collect())
            .unwrap_or_else(|| vec!["no summary".into()]);
        if !changes.is_empty() {
            self.fail(
                step,
                &format!("after convergence a preview plans {changes:?}:\n{out}"),
            );
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} must be a number"))
        })
        .unwrap_or(default)
}

/// Runs the episodes of the chosen run that fall to `lane` of `LANES`:
/// the run's episodes are cut into `LANES` contiguous shares, one per test
/// function, so that the test harness runs them on all cores at once (the
/// episodes are independent; together the lanes run exactly the run).
fn run_lane(lane: u64) {
    let seed = env_u64("KEEL_FUZZ_SEED", 1);
    let steps = env_u64("KEEL_FUZZ_STEPS", 300);
    let per_episode = env_u64("KEEL_FUZZ_EPISODE", 30).max(1);
    let first = env_u64("KEEL_FUZZ_FROM", 0);
    let end = first * per_episode + steps;
    let episodes = steps.div_ceil(per_episode);
    let share = episodes.div_ceil(LANES);
    let mut episode = first + lane * share;
    let last = (first + (lane + 1) * share).min(first + episodes);
    eprintln!("lifecycle fuzzer: seed {seed}, lane {lane}: episodes {episode}..{last}");
    let (mut splits, mut applied) = (0, 0);
    while episode < last {
        let start = (episode * per_episode) as usize;
        let n = (per_episode as usize).min(end as usize - start);
        let mut f = Fuzz::new(seed, episode, start);
        for i in 0..n {
            f.step(start + i);
        }
        f.converge(start + n - 1);
        splits += f.model.splits;
        applied += f.splits_applied;
        if std::env::var_os("KEEL_FUZZ_VERBOSE").is_some() {
            eprintln!("episode {episode}:\n{}", f.transcript.join("\n"));
        } else {
            eprintln!(
                "lifecycle fuzzer: seed {seed}: episode {episode} clean up to step {}",
                start + n
            );
        }
        episode += 1;
    }
    eprintln!(
        "lifecycle fuzzer: seed {seed}, lane {lane}: {splits} splits chosen, {applied} found carried by their hosts after a clean up"
    );
}

/// How many test functions share a run.
const LANES: u64 = 2;

#[test]
fn lifecycle_fuzz_first_half() {
    run_lane(0);
}

#[test]
fn lifecycle_fuzz_second_half() {
    run_lane(1);
}
