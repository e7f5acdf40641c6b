//! Built-in migration helpers (`cli.md` §3): `rename`, `retype` and `move`
//! as ordinary [`MigrationCallback`]s, usable from Rust programs and from
//! program files alike.
//!
//! Each helper reads the prior subtree it is given (`migrations.md` §4.1),
//! decides what to change, and returns the complete new subtree with a
//! successor for every URN it changed:
//!
//! - [`rename`]: a descendant's name (its URN keeps its qualified type).
//! - [`retype`]: a type token, in the `type` of every resource of that
//!   type and in the qualified type of every URN below it.
//! - [`move_under`]: re-parents descendants under another component of the
//!   subtree; their URNs, and those of their own descendants, take the new
//!   parent's qualified type.
//!
//! The result is self-consistent: every reference to a changed URN in the
//! structural fields of the returned states (`parent`, `dependencies`,
//! `propertyDependencies`, `deletedWith`, `replaceWith`, `viewOf` and the
//! URN part of `provider`) is rewritten, and the states are ordered so that
//! a parent precedes its children. References inside `inputs` and
//! `outputs` (resource references, output dependencies) are left to the
//! engine, which rewrites them with the successor map (§8). Every returned
//! resource loses its `aliases` field, which a result may not carry (renames
//! go through successors).
//!
//! Every helper is idempotent: once the state has its final shape (or the
//! helper does not apply to it, e.g. nothing is named `from`), it returns
//! `Ok(None)`, no change, so it can stay attached to the resource. A
//! request that cannot be carried out safely is an error naming the
//! helper: an ambiguous name, a move under a missing or custom resource or
//! into its own subtree, two resources ending up with the same URN, or a
//! change to a provider state (which a migration must return unchanged).
//!
//! The helpers never change the root's name or parent: the root is the
//! registration, whose identity the program decides (a retype of the root
//! changes its type, which the registration must then have).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde_json::{Map, Value};

use crate::model::urn::{PROVIDER_TYPE_PREFIX, TYPE_SEPARATOR};
use crate::model::{ProviderRef, TypeToken, Urn};
use crate::source::migration::{
    CallbackResult, MigrationCallback, StateMigrationArgs, StateMigrationResult,
};
use crate::source::ProgramError;

/// A callback renaming the descendant named `from` (below the registration
/// root) to `to`: its URN keeps its qualified type and takes the new name,
/// with the successor `{old: new}`. Its own descendants keep their URNs
/// (their type chains do not include names) but their references to it
/// are rewritten.
///
/// No change when nothing below the root is named `from` (renamed already,
/// or not applicable) or when `from == to`. An error when several
/// descendants are named `from`, or when the new URN is taken.
pub fn rename(from: &str, to: &str) -> MigrationCallback {
    let (from, to) = (from.to_owned(), to.to_owned());
    MigrationCallback::sync(move |args| rename_state(&args, &from, &to))
}

/// A callback changing the type token `from` to `to` throughout the
/// subtree: the `type` of every resource of type `from` (typically the
/// root, whose registration has the new type and names the old one in an
/// alias) and the qualified type of its URN and of all URNs below it
/// (each chain element `from` becomes `to`), with a successor for every
/// changed URN.
///
/// No change when no resource of the subtree has type `from`. An error
/// when either token is malformed, or when the change would give two
/// resources the same URN or touch a provider state.
pub fn retype(from: &str, to: &str) -> MigrationCallback {
    let (from, to) = (from.to_owned(), to.to_owned());
    MigrationCallback::sync(move |args| retype_state(&args, &from, &to))
}

/// A callback re-parenting the descendants named in `resources` under the
/// component named `under`, which must already be in the prior subtree (a
/// migration cannot create a component whose type only the program knows).
/// A moved resource's URN becomes `under`'s qualified type, `$`, its own
/// type, and its name; the URNs of its descendants follow; every changed
/// URN gets a successor. `under` may name the root itself (moving a
/// resource back to the top of the component).
///
/// Names that match nothing are skipped, resources already under `under`
/// are left alone, and no change remains when nothing needs to move. An
/// error when a name matches several resources, when `under` is missing
/// while something would move, is a custom resource, or lies inside a
/// resource to move.
pub fn move_under(resources: &[&str], under: &str) -> MigrationCallback {
    let resources: Vec<String> = resources.iter().map(|&r| r.to_owned()).collect();
    let under = under.to_owned();
    MigrationCallback::sync(move |args| move_state(&args, &resources, &under))
}

/// One resource of the subtree.
#[derive(Debug, Clone)]
struct Node {
    /// Its checkpoint JSON.
    obj: Map<String, Value>,
    /// Its URN.
    urn: Urn,
    /// Its parent, when that is in the subtree.
    parent: Option<usize>,
}

impl Node {
    fn custom(&self) -> bool {
        self.obj.get("custom").and_then(Value::as_bool) == Some(true)
    }

    fn is_provider(&self) -> bool {
        self.urn.type_str().starts_with(PROVIDER_TYPE_PREFIX)
    }
}

/// What a helper changes.
#[derive(Debug, Default)]
struct Edit {
    /// New names, by node.
    names: HashMap<usize, String>,
    /// New parents, by node.
    parents: HashMap<usize, usize>,
    /// A type token replaced by another.
    retype: Option<(TypeToken, TypeToken)>,
}

fn fail(what: &str, message: impl fmt::Display) -> ProgramError {
    format!("{what}: {message}").into()
}

/// Decodes the subtree (root first).
fn load(what: &str, args: &StateMigrationArgs) -> Result<Vec<Node>, ProgramError> {
    let mut nodes = Vec::with_capacity(args.old_state.len());
    let mut index: HashMap<String, usize> = HashMap::with_capacity(args.old_state.len());
    for (i, v) in args.old_state.iter().enumerate() {
        let Value::Object(obj) = v else {
            return Err(fail(
                what,
                format!("oldState[{i}] is not a resource object"),
            ));
        };
        let Some(text) = obj.get("urn").and_then(Value::as_str) else {
            return Err(fail(what, format!("oldState[{i}] has no `urn` string")));
        };
        let urn = Urn::parse(text).map_err(|e| fail(what, format!("oldState[{i}]: {e}")))?;
        index.insert(text.to_owned(), i);
        nodes.push(Node {
            obj: obj.clone(),
            urn,
            parent: None,
        });
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        n.parent = n
            .obj
            .get("parent")
            .and_then(Value::as_str)
            .and_then(|p| index.get(p).copied())
            .filter(|&p| p != i);
    }
    Ok(nodes)
}

/// The nodes named `name`, the root included or not.
fn named(nodes: &[Node], name: &str, with_root: bool) -> Vec<usize> {
    let skip = usize::from(!with_root);
    (skip..nodes.len())
        .filter(|&i| nodes[i].urn.name() == name)
        .collect()
}

fn ambiguous(what: &str, name: &str, nodes: &[Node], found: &[usize]) -> ProgramError {
    let urns: Vec<&str> = found.iter().map(|&i| nodes[i].urn.as_str()).collect();
    fail(
        what,
        format!(
            "`{name}` names {} resources of the subtree ({}); rename one of them first or write \
             a migration callback that picks the right one",
            found.len(),
            urns.join(", ")
        ),
    )
}

/// One match for `name`: `None` for none, an error for several.
fn unique(
    what: &str,
    nodes: &[Node],
    name: &str,
    with_root: bool,
) -> Result<Option<usize>, ProgramError> {
    match named(nodes, name, with_root).as_slice() {
        [] => Ok(None),
        [i] => Ok(Some(*i)),
        many => Err(ambiguous(what, name, nodes, many)),
    }
}

fn rename_state(args: &StateMigrationArgs, from: &str, to: &str) -> CallbackResult {
    let what = format!("the `rename` helper (from `{from}` to `{to}`)");
    if from.is_empty() || to.is_empty() {
        return Err(fail(&what, "`from` and `to` must be non-empty names"));
    }
    if from == to {
        return Ok(None);
    }
    let nodes = load(&what, args)?;
    let Some(i) = unique(&what, &nodes, from, false)? else {
        return Ok(None);
    };
    let mut edit = Edit::default();
    edit.names.insert(i, to.to_owned());
    apply(&what, &nodes, &edit)
}

fn retype_state(args: &StateMigrationArgs, from: &str, to: &str) -> CallbackResult {
    let what = format!("the `retype` helper (from `{from}` to `{to}`)");
    let from_t = TypeToken::parse(from).map_err(|e| fail(&what, e))?;
    let to_t = TypeToken::parse(to).map_err(|e| fail(&what, e))?;
    if from_t == to_t {
        return Ok(None);
    }
    let nodes = load(&what, args)?;
    if !nodes.iter().any(|n| n.urn.type_str() == from) {
        return Ok(None);
    }
    let edit = Edit {
        retype: Some((from_t, to_t)),
        ..Edit::default()
    };
    apply(&what, &nodes, &edit)
}

fn move_state(args: &StateMigrationArgs, resources: &[String], under: &str) -> CallbackResult {
    let what = format!(
        "the `move` helper ([{}] under `{under}`)",
        resources.join(", ")
    );
    if under.is_empty() || resources.iter().any(String::is_empty) {
        return Err(fail(&what, "names must be non-empty"));
    }
    let nodes = load(&what, args)?;
    let mut targets: Vec<(&str, usize)> = Vec::new();
    for name in resources {
        if targets.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(i) = unique(&what, &nodes, name, false)? {
            targets.push((name, i));
        }
    }
    let u = match unique(&what, &nodes, under, true)? {
        Some(u) => u,
        None if targets.is_empty() => return Ok(None),
        None => {
            return Err(fail(
                &what,
                format!(
                    "no resource of the prior subtree of {} is named `{under}`; a migration \
                     cannot create a component: register `{under}` under the component in an \
                     earlier update, then move into it",
                    nodes
                        .first()
                        .map_or_else(|| args.urn.as_str(), |n| n.urn.as_str())
                ),
            ))
        }
    };
    if nodes[u].custom() {
        return Err(fail(
            &what,
            format!(
                "`{under}` ({}) is a custom resource; resources move under components only",
                nodes[u].urn
            ),
        ));
    }
    let mut edit = Edit::default();
    for (name, i) in targets {
        if i == u {
            return Err(fail(&what, format!("`{name}` cannot move under itself")));
        }
        // Is `i` an ancestor of `under`?
        let mut cur = nodes[u].parent;
        let mut steps = 0;
        while let Some(p) = cur {
            if p == i {
                return Err(fail(
                    &what,
                    format!(
                        "`{under}` is inside `{name}`: moving `{name}` under it would make a loop"
                    ),
                ));
            }
            steps += 1;
            if steps > nodes.len() {
                break;
            }
            cur = nodes[p].parent;
        }
        if nodes[i].parent != Some(u) {
            edit.parents.insert(i, u);
        }
    }
    if edit.parents.is_empty() {
        return Ok(None);
    }
    apply(&what, &nodes, &edit)
}

/// The new URNs of the nodes.
struct Resolver<'a> {
    what: &'a str,
    nodes: &'a [Node],
    edit: &'a Edit,
    new_parent: Vec<Option<usize>>,
    urns: Vec<Option<Urn>>,
    visiting: Vec<bool>,
}

impl Resolver<'_> {
    fn urn(&mut self, i: usize) -> Result<Urn, ProgramError> {
        if let Some(u) = &self.urns[i] {
            return Ok(u.clone());
        }
        let node = &self.nodes[i];
        let old = &node.urn;
        if self.visiting[i] {
            return Err(fail(self.what, format!("the parents of {old} form a loop")));
        }
        self.visiting[i] = true;
        let own = old.type_str();
        let new_ty = match &self.edit.retype {
            Some((from, to)) if own == from.as_str() => Some(to.clone()),
            _ => None,
        };
        let name = self.edit.names.get(&i).map_or(old.name(), String::as_str);
        let reparented = self.edit.parents.contains_key(&i);
        let parent = match self.new_parent[i] {
            Some(p) => Some((p, self.urn(p)?)),
            None => None,
        };
        let chain_changed = parent
            .as_ref()
            .is_some_and(|(p, u)| u.qualified_type() != self.nodes[*p].urn.qualified_type());
        let urn = if new_ty.is_some() || reparented || chain_changed {
            let ty = match new_ty {
                Some(t) => t,
                None => TypeToken::parse(own).map_err(|e| fail(self.what, e))?,
            };
            match &parent {
                Some((_, p)) => Urn::derive(old.stack(), old.project(), Some(p), &ty, name),
                None => {
                    // The root (or a resource whose parent is outside the
                    // subtree) keeps the chain its parent gave it.
                    let q = old.qualified_type();
                    let prefix = q.rfind(TYPE_SEPARATOR).map(|k| &q[..k]);
                    Urn::new(old.stack(), old.project(), prefix, &ty, name)
                }
            }
        } else if name != old.name() {
            old.with_name(name)
        } else {
            Ok(old.clone())
        }
        .map_err(|e| fail(self.what, format!("the new URN of {old}: {e}")))?;
        self.visiting[i] = false;
        self.urns[i] = Some(urn.clone());
        Ok(urn)
    }
}

/// Replaces a URN string field when the map has it.
fn replace_field(obj: &mut Map<String, Value>, key: &str, map: &BTreeMap<String, String>) {
    if let Some(Value::String(s)) = obj.get_mut(key) {
        if let Some(n) = map.get(s.as_str()) {
            *s = n.clone();
        }
    }
}

/// Maps a list of URN strings and de-duplicates it keeping the first
/// occurrence (as the engine does, §8).
fn map_list(v: &mut Value, map: &BTreeMap<String, String>) {
    let Value::Array(items) = v else {
        return;
    };
    if !items
        .iter()
        .any(|x| x.as_str().is_some_and(|s| map.contains_key(s)))
    {
        return;
    }
    let mut seen: HashSet<String> = HashSet::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for item in items.drain(..) {
        let item = match item.as_str().and_then(|s| map.get(s)) {
            Some(n) => Value::String(n.clone()),
            None => item,
        };
        let keep = match item.as_str() {
            Some(s) => seen.insert(s.to_owned()),
            None => true,
        };
        if keep {
            out.push(item);
        }
    }
    *items = out;
}

/// Applies `edit`: new URNs, checks, rewritten references, parents first.
fn apply(what: &str, nodes: &[Node], edit: &Edit) -> CallbackResult {
    let n = nodes.len();
    let mut r = Resolver {
        what,
        nodes,
        edit,
        new_parent: (0..n)
            .map(|i| edit.parents.get(&i).copied().or(nodes[i].parent))
            .collect(),
        urns: vec![None; n],
        visiting: vec![false; n],
    };
    let mut urns = Vec::with_capacity(n);
    for i in 0..n {
        urns.push(r.urn(i)?);
    }
    let new_parent = r.new_parent;

    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for (node, new) in nodes.iter().zip(&urns) {
        if &node.urn != new {
            map.insert(node.urn.as_str().to_owned(), new.as_str().to_owned());
        }
    }
    let reparented = edit
        .parents
        .iter()
        .any(|(&i, &p)| nodes[i].parent != Some(p));
    if map.is_empty() && !reparented {
        return Ok(None);
    }

    // Checks the engine would otherwise reject with a less direct message.
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(n);
    for (i, u) in urns.iter().enumerate() {
        if let Some(j) = seen.insert(u.as_str(), i) {
            return Err(fail(
                what,
                format!(
                    "{} and {} would both become {u}; only one resource may have a URN",
                    nodes[j].urn, nodes[i].urn
                ),
            ));
        }
        if map.contains_key(u.as_str()) {
            return Err(fail(
                what,
                format!(
                    "{u} would be both a new URN and an old one mapped away; do the change in \
                     two steps"
                ),
            ));
        }
    }
    for (i, node) in nodes.iter().enumerate() {
        if node.is_provider() && (node.urn != urns[i] || edit.parents.contains_key(&i)) {
            return Err(fail(
                what,
                format!(
                    "it would change the provider state {}; a migration must return provider \
                     states unchanged (give the provider another parent first)",
                    node.urn
                ),
            ));
        }
    }

    let mut out: Vec<Map<String, Value>> = Vec::with_capacity(n);
    for (i, node) in nodes.iter().enumerate() {
        let mut obj = node.obj.clone();
        let new = &urns[i];
        obj.insert("urn".into(), Value::String(new.as_str().to_owned()));
        if new.type_str() != node.urn.type_str() {
            obj.insert("type".into(), Value::String(new.type_str().to_owned()));
        }
        match edit.parents.get(&i) {
            Some(&p) => {
                obj.insert("parent".into(), Value::String(urns[p].as_str().to_owned()));
            }
            None => replace_field(&mut obj, "parent", &map),
        }
        replace_field(&mut obj, "deletedWith", &map);
        replace_field(&mut obj, "viewOf", &map);
        for key in ["dependencies", "replaceWith"] {
            if let Some(v) = obj.get_mut(key) {
                map_list(v, &map);
            }
        }
        if let Some(Value::Object(pd)) = obj.get_mut("propertyDependencies") {
            for v in pd.values_mut() {
                map_list(v, &map);
            }
        }
        let provider = obj
            .get("provider")
            .and_then(Value::as_str)
            .and_then(|p| ProviderRef::parse(p).ok())
            .and_then(|p| {
                map.get(p.urn().as_str())
                    .map(|u| format!("{u}::{}", p.id()))
            });
        if let Some(p) = provider {
            obj.insert("provider".into(), Value::String(p));
        }
        // A result may not carry `aliases` (renames go through successors),
        // so every returned resource loses them, changed or not: an
        // untouched sibling renamed through an alias earlier still has its
        // old URNs there.
        obj.remove("aliases");
        out.push(obj);
    }

    // Parents first, otherwise in input order (an ordered list is kept).
    let mut order = Vec::with_capacity(n);
    let mut placed = vec![false; n];
    for i in 0..n {
        let mut path = Vec::new();
        let mut cur = Some(i);
        while let Some(c) = cur {
            if placed[c] || path.contains(&c) {
                break;
            }
            path.push(c);
            cur = new_parent[c];
        }
        for &c in path.iter().rev() {
            placed[c] = true;
            order.push(c);
        }
    }
    let mut slots: Vec<Option<Map<String, Value>>> = out.into_iter().map(Some).collect();
    let new_state: Vec<Value> = order
        .into_iter()
        .filter_map(|i| slots[i].take().map(Value::Object))
        .collect();
    Ok(Some(StateMigrationResult {
        new_state: Value::Array(new_state),
        successors: map,
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use serde_json::json;

    use super::*;
    use crate::migrate::chain::{CallbackOutput, Chain};
    use crate::migrate::check::{validate, Context, OperationOptions};
    use crate::migrate::subtree::{find_root, Subtree};
    use crate::migrate::transaction::prepare;
    use crate::model::State;

    const STACK: &str = "urn:pulumi:dev::proj::pulumi:pulumi:Stack::proj-dev";
    const PROV: &str = "urn:pulumi:dev::proj::pulumi:providers:aws::default";
    const APP: &str = "urn:pulumi:dev::proj::my:app:App::app";
    const TIER: &str = "urn:pulumi:dev::proj::my:app:App$my:app:Tier::tier";
    const DB: &str = "urn:pulumi:dev::proj::my:app:App$aws:s3/bucket:Bucket::db";
    const CACHE: &str = "urn:pulumi:dev::proj::my:app:App$aws:s3/bucket:Bucket::cache";
    const POL: &str =
        "urn:pulumi:dev::proj::my:app:App$aws:s3/bucket:Bucket$aws:s3/bucketPolicy:BucketPolicy::pol";
    const OUT: &str = "urn:pulumi:dev::proj::aws:s3/bucket:Bucket::consumer";

    type Cb = fn(&StateMigrationArgs) -> CallbackResult;

    fn custom(urn: &str, id: &str, parent: &str) -> Value {
        let ty = Urn::parse(urn).unwrap().type_str().to_owned();
        json!({
            "urn": urn, "custom": true, "id": id, "type": ty, "parent": parent,
            "provider": format!("{PROV}::prov-1"),
            "inputs": {"k": id}, "outputs": {"k": id},
        })
    }

    fn comp(urn: &str, parent: &str) -> Value {
        let ty = Urn::parse(urn).unwrap().type_str().to_owned();
        json!({"urn": urn, "custom": false, "type": ty, "parent": parent})
    }

    /// stack, provider, app{tier, db{pol}, cache -> db}, consumer -> db.
    fn prior_json() -> Vec<Value> {
        let mut cache = custom(CACHE, "c-1", APP);
        cache["dependencies"] = json!([DB]);
        cache["propertyDependencies"] = json!({"src": [DB], "none": null});
        let mut pol = custom(POL, "p-1", DB);
        pol["deletedWith"] = json!(DB);
        pol["dependencies"] = json!([DB]);
        let mut consumer = custom(OUT, "o-1", STACK);
        consumer["dependencies"] = json!([DB]);
        vec![
            json!({"urn": STACK, "custom": false, "type": "pulumi:pulumi:Stack"}),
            json!({"urn": PROV, "custom": true, "id": "prov-1", "type": "pulumi:providers:aws"}),
            comp(APP, STACK),
            comp(TIER, APP),
            custom(DB, "db-1", APP),
            pol,
            cache,
            consumer,
        ]
    }

    fn states(v: Vec<Value>) -> Vec<State> {
        serde_json::from_value(Value::Array(v)).unwrap()
    }

    fn urn(s: &str) -> Urn {
        Urn::parse(s).unwrap()
    }

    /// Runs `cbs` for `reg` (found directly or through `aliases`) through
    /// the engine's deterministic core: the chain, the final checks and
    /// transaction preparation. `Ok(None)` for a no-op, else the new prior
    /// list and the original -> final map.
    #[allow(clippy::type_complexity)]
    fn core(
        prior: &[State],
        reg: &str,
        aliases: &[&str],
        cbs: &[Cb],
    ) -> Result<Option<(Vec<State>, BTreeMap<Urn, Urn>)>, String> {
        let reg = urn(reg);
        let aliases: Vec<Urn> = aliases.iter().map(|a| urn(a)).collect();
        let prior: &[&State] = &prior.iter().collect::<Vec<_>>();
        let root = find_root(prior, &reg, &aliases).ok_or("no prior root")?;
        let subtree = Subtree::collect(prior, root.index);
        let (claimed, registered) = (HashSet::new(), HashSet::new());
        let ctx = Context {
            registration: &reg,
            prior,
            subtree: &subtree,
            claimed: &claimed,
            registered: &registered,
            extensions: &Value::Null,
            snippets: &[],
            pending_operations: false,
            options: OperationOptions::default(),
        };
        let mut chain = Chain::new(reg.clone(), subtree.states(prior));
        let n = cbs.len();
        for (i, cb) in cbs.iter().enumerate() {
            let args: StateMigrationArgs = serde_json::from_value(chain.input_json()).unwrap();
            let out = match cb(&args).map_err(|e| e.to_string())? {
                None => Value::Null,
                Some(r) => serde_json::to_value(r).unwrap(),
            };
            let out = CallbackOutput::from_json(&reg, i + 1, n, &out).map_err(|e| e.to_string())?;
            chain.apply(i + 1, n, out).map_err(|e| e.to_string())?;
        }
        let outcome = chain.finish().map_err(|e| e.to_string())?;
        if outcome.noop {
            return Ok(None);
        }
        validate(&ctx, &outcome).map_err(|e| e.to_string())?;
        let prepared = prepare(&reg, prior, &subtree, &outcome).map_err(|e| e.to_string())?;
        let list = (0..prepared.order.len())
            .map(|i| prepared.state_at(prior, i).clone())
            .collect();
        Ok(Some((list, outcome.original_to_final)))
    }

    fn find<'a>(list: &'a [State], name: &str) -> &'a State {
        list.iter().find(|s| s.urn.name() == name).unwrap()
    }

    fn args(old: Vec<Value>) -> StateMigrationArgs {
        StateMigrationArgs {
            urn: urn(APP),
            old_state: old,
        }
    }

    /// The app subtree as a callback gets it.
    fn subtree_json() -> Vec<Value> {
        prior_json()[2..7].to_vec()
    }

    fn rename_db(a: &StateMigrationArgs) -> CallbackResult {
        rename_state(a, "db", "database")
    }

    fn move_db_cache(a: &StateMigrationArgs) -> CallbackResult {
        move_state(a, &["database".into(), "cache".into(), "db".into()], "tier")
    }

    fn retype_app(a: &StateMigrationArgs) -> CallbackResult {
        retype_state(a, "my:app:App", "my:app:AppV2")
    }

    #[test]
    fn untouched_resources_with_aliases_pass_the_checks() {
        // `tier` and the root were renamed through aliases in an earlier
        // update, so their states record old URNs.
        let mut prior = prior_json();
        prior[2]["aliases"] = json!(["urn:pulumi:dev::proj::my:app:App::old-app"]);
        prior[3]["aliases"] = json!(["urn:pulumi:dev::proj::my:app:App$my:app:Tier::old-tier"]);
        let prior = states(prior);
        let v2 = APP.replace("my:app:App", "my:app:AppV2");
        let runs: [(&str, &[&str], Cb); 3] = [
            (APP, &[], rename_db),
            (APP, &[], move_db_cache),
            (&v2, &[APP], retype_app),
        ];
        for (reg, aliases, cb) in runs {
            let (list, _) = core(&prior, reg, aliases, &[cb]).unwrap().unwrap();
            let tier = list.iter().find(|s| s.urn.name() == "tier").unwrap();
            assert!(tier.rare.aliases.is_empty(), "{:?}", tier.rare.aliases);
        }
    }

    #[test]
    fn rename_renames_one_descendant_and_its_references() {
        let prior = states(prior_json());
        let (list, map) = core(&prior, APP, &[], &[rename_db]).unwrap().unwrap();
        let new = DB.replace("::db", "::database");
        assert_eq!(map, BTreeMap::from([(urn(DB), urn(&new))]));
        let db = find(&list, "database");
        assert_eq!((db.urn.as_str(), db.id.as_str()), (new.as_str(), "db-1"));
        // The policy keeps its URN (no name in the chain), not its references.
        let pol = find(&list, "pol");
        assert_eq!(pol.urn.as_str(), POL);
        assert_eq!(pol.parent.as_str(), new);
        assert_eq!(pol.rare.deleted_with.as_str(), new);
        let cache = find(&list, "cache");
        assert_eq!(cache.dependencies, vec![urn(&new)]);
        assert_eq!(
            cache.property_dependencies["src"].as_deref(),
            Some(&[urn(&new)][..])
        );
        // Outside the subtree, the engine rewrites.
        assert_eq!(find(&list, "consumer").dependencies, vec![urn(&new)]);
        // Idempotent, through the core and on its own output.
        assert_eq!(core(&list, APP, &[], &[rename_db]).unwrap(), None);
        let out = rename_state(&args(subtree_json()), "db", "database")
            .unwrap()
            .unwrap();
        let again = args(out.new_state.as_array().unwrap().clone());
        assert!(rename_state(&again, "db", "database").unwrap().is_none());
    }

    #[test]
    fn rename_is_a_no_op_or_an_error_when_it_does_not_apply() {
        let a = args(subtree_json());
        assert!(rename_state(&a, "nothing", "else").unwrap().is_none());
        assert!(rename_state(&a, "db", "db").unwrap().is_none());
        // The root is not a descendant.
        assert!(rename_state(&a, "app", "x").unwrap().is_none());
        // The new URN is taken.
        let e = rename_state(&a, "db", "cache").unwrap_err().to_string();
        assert!(
            e.contains("`rename` helper") && e.contains("would both become"),
            "{e}"
        );
        // Two resources named `db` (of different types).
        let mut old = subtree_json();
        old.push(comp(
            "urn:pulumi:dev::proj::my:app:App$my:app:Tier::db",
            APP,
        ));
        let e = rename_state(&args(old), "db", "x").unwrap_err().to_string();
        assert!(e.contains("names 2 resources"), "{e}");
        let e = rename_state(&a, "", "x").unwrap_err().to_string();
        assert!(e.contains("non-empty"), "{e}");
    }

    #[test]
    fn retype_rewrites_the_chain_of_the_whole_subtree() {
        let prior = states(prior_json());
        let reg = APP.replace("my:app:App", "my:app:AppV2");
        let (list, map) = core(&prior, &reg, &[APP], &[retype_app]).unwrap().unwrap();
        // Every member of the subtree changed URN.
        assert_eq!(map.len(), 5, "{map:#?}");
        let app = find(&list, "app");
        assert_eq!(app.urn.as_str(), reg);
        assert_eq!(app.ty.as_str(), "my:app:AppV2");
        let db = find(&list, "db");
        assert_eq!(
            db.urn.as_str(),
            "urn:pulumi:dev::proj::my:app:AppV2$aws:s3/bucket:Bucket::db"
        );
        assert_eq!(db.ty.as_str(), "aws:s3/bucket:Bucket");
        assert_eq!(db.parent.as_str(), reg);
        assert_eq!(db.id, "db-1");
        let pol = find(&list, "pol");
        assert_eq!(
            pol.urn.qualified_type(),
            "my:app:AppV2$aws:s3/bucket:Bucket$aws:s3/bucketPolicy:BucketPolicy"
        );
        assert_eq!(pol.parent, db.urn);
        assert_eq!(find(&list, "cache").dependencies, vec![db.urn.clone()]);
        assert_eq!(find(&list, "consumer").dependencies, vec![db.urn.clone()]);
        // Idempotent: the new root has nothing of type `from`.
        assert_eq!(core(&list, &reg, &[APP], &[retype_app]).unwrap(), None);
        // A type of a descendant only: the resources below it follow.
        let out = retype_state(&args(subtree_json()), "aws:s3/bucket:Bucket", "aws:s3:B2")
            .unwrap()
            .unwrap();
        let urns: Vec<&str> = out.new_state.as_array().unwrap()[..]
            .iter()
            .map(|s| s["urn"].as_str().unwrap())
            .collect();
        assert!(
            urns.contains(
                &"urn:pulumi:dev::proj::my:app:App$aws:s3:B2$aws:s3/bucketPolicy:BucketPolicy::pol"
            ),
            "{urns:?}"
        );
        assert_eq!(out.successors.len(), 3);
        assert!(retype_state(&args(subtree_json()), "x:y:Nope", "x:y:Z")
            .unwrap()
            .is_none());
        let e = retype_state(&args(subtree_json()), "nope", "x:y:Z")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`retype` helper") && e.contains("type token"),
            "{e}"
        );
    }

    #[test]
    fn retype_refuses_to_change_a_provider_state() {
        let mut old = subtree_json();
        old.push(json!({
            "urn": "urn:pulumi:dev::proj::my:app:App$pulumi:providers:aws::p",
            "custom": true, "id": "x", "type": "pulumi:providers:aws", "parent": APP,
        }));
        let e = retype_state(&args(old), "my:app:App", "my:app:AppV2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("provider state"), "{e}");
    }

    #[test]
    fn move_reparents_and_extends_the_chains() {
        let prior = states(prior_json());
        let (list, map) = core(&prior, APP, &[], &[move_db_cache]).unwrap().unwrap();
        let tier = find(&list, "tier");
        let db = find(&list, "db");
        assert_eq!(
            db.urn.as_str(),
            "urn:pulumi:dev::proj::my:app:App$my:app:Tier$aws:s3/bucket:Bucket::db"
        );
        assert_eq!(db.parent, tier.urn);
        assert_eq!(find(&list, "cache").parent, tier.urn);
        let pol = find(&list, "pol");
        assert_eq!(
            pol.urn.qualified_type(),
            "my:app:App$my:app:Tier$aws:s3/bucket:Bucket$aws:s3/bucketPolicy:BucketPolicy"
        );
        assert_eq!(pol.parent, db.urn);
        assert_eq!(map.len(), 3, "db, cache and pol: {map:#?}");
        assert_eq!(find(&list, "consumer").dependencies, vec![db.urn.clone()]);
        // Parents precede children in the new list.
        let pos = |n: &str| list.iter().position(|s| s.urn.name() == n).unwrap();
        assert!(pos("tier") < pos("db") && pos("db") < pos("pol"));
        assert_eq!(core(&list, APP, &[], &[move_db_cache]).unwrap(), None);
    }

    #[test]
    fn move_needs_an_existing_component_and_no_loop() {
        let a = args(subtree_json());
        let e = move_state(&a, &["db".into()], "ghost")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot create a component"), "{e}");
        // Nothing to move and nowhere to go: not applicable.
        assert!(move_state(&a, &["ghost".into()], "ghost2")
            .unwrap()
            .is_none());
        let e = move_state(&a, &["cache".into()], "db")
            .unwrap_err()
            .to_string();
        assert!(e.contains("custom resource"), "{e}");
        let e = move_state(&a, &["tier".into()], "tier")
            .unwrap_err()
            .to_string();
        assert!(e.contains("under itself"), "{e}");
        // A component inside the one moved.
        let mut old = subtree_json();
        old.push(comp(
            "urn:pulumi:dev::proj::my:app:App$my:app:Tier$my:app:Inner::inner",
            TIER,
        ));
        let e = move_state(&args(old), &["tier".into()], "inner")
            .unwrap_err()
            .to_string();
        assert!(e.contains("would make a loop"), "{e}");
        // Back to the root: the root may be `under`.
        let out = move_state(&a, &["pol".into()], "app").unwrap().unwrap();
        let pol = out.new_state.as_array().unwrap()[..]
            .iter()
            .find(|s| s["urn"].as_str().unwrap().ends_with("::pol"))
            .unwrap()
            .clone();
        assert_eq!(pol["parent"], json!(APP));
        assert_eq!(
            pol["urn"],
            json!("urn:pulumi:dev::proj::my:app:App$aws:s3/bucketPolicy:BucketPolicy::pol")
        );
    }

    #[test]
    fn move_between_components_of_one_type_keeps_the_urn() {
        let other = "urn:pulumi:dev::proj::my:app:App$my:app:Tier::other";
        let mut old = subtree_json();
        old.push(comp(other, APP));
        old.push(comp(
            "urn:pulumi:dev::proj::my:app:App$my:app:Tier$my:app:Leaf::leaf",
            TIER,
        ));
        let out = move_state(&args(old), &["leaf".into()], "other")
            .unwrap()
            .unwrap();
        assert!(out.successors.is_empty());
        let leaf = out.new_state.as_array().unwrap()[..]
            .iter()
            .find(|s| s["urn"].as_str().unwrap().ends_with("::leaf"))
            .unwrap()
            .clone();
        assert_eq!(leaf["parent"], json!(other));
    }

    #[test]
    fn chained_rename_then_move_then_retype() {
        let prior = states(prior_json());
        let reg = APP.replace("my:app:App", "my:app:AppV2");
        let chain: [Cb; 3] = [rename_db, move_db_cache, retype_app];
        let (list, map) = core(&prior, &reg, &[APP], &chain).unwrap().unwrap();
        let db = find(&list, "database");
        assert_eq!(
            db.urn.as_str(),
            "urn:pulumi:dev::proj::my:app:AppV2$my:app:Tier$aws:s3/bucket:Bucket::database"
        );
        assert_eq!(db.id, "db-1");
        assert_eq!(map[&urn(DB)], db.urn);
        assert_eq!(find(&list, "pol").parent, db.urn);
        assert!(!list.iter().any(|s| s.urn.name() == "db"));
        // Every helper finds the final shape and changes nothing.
        assert_eq!(core(&list, &reg, &[APP], &chain).unwrap(), None);
        // And each on its own output, directly.
        let mut old = subtree_json();
        for cb in chain {
            let a = StateMigrationArgs {
                urn: urn(&reg),
                old_state: old.clone(),
            };
            if let Some(r) = cb(&a).unwrap() {
                old = r.new_state.as_array().unwrap().clone();
            }
            let a = StateMigrationArgs {
                urn: urn(&reg),
                old_state: old.clone(),
            };
            assert!(cb(&a).unwrap().is_none());
        }
    }

    #[tokio::test]
    async fn helpers_are_ordinary_callbacks() {
        let cb = rename("db", "database");
        let out = cb
            .call(args(subtree_json()), std::time::Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert!(out.successors.contains_key(DB));
        let cb = move_under(&["db"], "ghost");
        let e = cb
            .call(args(subtree_json()), std::time::Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.contains("`move` helper"), "{e}");
        let cb = retype("x:y:A", "x:y:B");
        assert_eq!(
            cb.call(args(subtree_json()), std::time::Duration::from_secs(5))
                .await,
            Ok(None)
        );
    }
}
