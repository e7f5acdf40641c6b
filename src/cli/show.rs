//! Read-only views: `keel state show` (the resources as a tree by parent)
//! and `keel cloud list` (the simulated cloud's objects). Names, types and
//! IDs are [`clean`]ed in text output; JSON output escapes them itself.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use super::display::{clean, mask_map};
use crate::model::{Deployment, State};
use crate::provider::sim::SimObject;

/// The resources of a deployment as a forest: indexes of the roots, and
/// the children of each resource, in state order. A resource whose parent
/// is not in the deployment is a root.
fn forest(d: &Deployment) -> (Vec<usize>, HashMap<usize, Vec<usize>>) {
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, r) in d.resources.iter().enumerate() {
        // The live resource wins over one marked for deletion.
        if !r.delete || !index.contains_key(r.urn.as_str()) {
            index.insert(r.urn.as_str(), i);
        }
    }
    let mut roots = Vec::new();
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, r) in d.resources.iter().enumerate() {
        match index.get(r.parent.as_str()) {
            Some(&p) if !r.parent.is_empty() && p != i => children.entry(p).or_default().push(i),
            _ => roots.push(i),
        }
    }
    (roots, children)
}

fn label(r: &State) -> String {
    let mut s = format!("{}  {}", clean(r.ty.as_str()), clean(r.urn.name()));
    if !r.id.is_empty() {
        s.push_str(&format!("  (id {})", clean(&r.id)));
    }
    let mut flags = Vec::new();
    if r.protect {
        flags.push("protected");
    }
    if r.delete {
        flags.push("pending delete");
    }
    if r.pending_replacement {
        flags.push("pending replacement");
    }
    match r.category() {
        crate::model::state::Category::Action => flags.push("action"),
        crate::model::state::Category::DataSource => flags.push("data source"),
        crate::model::state::Category::Resource if r.external => flags.push("external"),
        crate::model::state::Category::Resource => {}
    }
    if r.retain_on_delete {
        flags.push("retained on delete");
    }
    if !flags.is_empty() {
        s.push_str(&format!("  [{}]", flags.join(", ")));
    }
    s
}

struct Tree<'a> {
    d: &'a Deployment,
    children: HashMap<usize, Vec<usize>>,
    seen: HashSet<usize>,
    lines: Vec<String>,
}

impl Tree<'_> {
    fn walk(&mut self, i: usize, lead: &str, branch: &str, child_lead: &str) {
        if !self.seen.insert(i) {
            return;
        }
        self.lines
            .push(format!("{lead}{branch}{}", label(&self.d.resources[i])));
        let kids = self.children.get(&i).cloned().unwrap_or_default();
        self.walk_all(&grouped(self.d, &kids), &format!("{lead}{child_lead}"));
    }

    fn walk_all(&mut self, nodes: &[Node], lead: &str) {
        let n = nodes.len();
        for (j, node) in nodes.iter().enumerate() {
            let (b, p) = if j + 1 == n {
                ("└─ ", "   ")
            } else {
                ("├─ ", "│  ")
            };
            match node {
                Node::One(k) => self.walk(*k, lead, b, p),
                Node::Declaration(decl, members) => {
                    // Expansions by key, whatever order they were written in.
                    let mut members = members.clone();
                    members.sort_by_cached_key(|&m| {
                        crate::model::Address::parse(&self.d.resources[m].keel_address).ok()
                    });
                    self.lines.push(format!(
                        "{lead}{b}{}  [declaration, {} expansion{}]",
                        clean(decl),
                        members.len(),
                        if members.len() == 1 { "" } else { "s" }
                    ));
                    let inner: Vec<Node> = members.into_iter().map(Node::One).collect();
                    self.walk_all(&inner, &format!("{lead}{p}"));
                }
            }
        }
    }
}

/// A child in the tree: one entry, or the expansions of one iterated
/// declaration grouped under its declaration address.
enum Node {
    One(usize),
    Declaration(String, Vec<usize>),
}

/// The declaration address an entry is grouped by: that of an expansion of
/// an iterated declaration (its own last segment has a key).
fn declaration_of(r: &State) -> Option<String> {
    let a = crate::model::Address::parse(&r.keel_address).ok()?;
    a.0.last()?.key.as_ref()?;
    Some(a.declaration().to_string())
}

/// Children in state order, the expansions of each iterated declaration
/// gathered where the first of them is.
fn grouped(d: &Deployment, kids: &[usize]) -> Vec<Node> {
    let mut out: Vec<Node> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for &k in kids {
        match declaration_of(&d.resources[k]) {
            Some(decl) => match at.get(&decl) {
                Some(&pos) => {
                    if let Node::Declaration(_, members) = &mut out[pos] {
                        members.push(k);
                    }
                }
                None => {
                    at.insert(decl.clone(), out.len());
                    out.push(Node::Declaration(decl, vec![k]));
                }
            },
            None => out.push(Node::One(k)),
        }
    }
    out
}

/// The tree as text lines.
pub fn tree_lines(d: &Deployment) -> Vec<String> {
    let (roots, children) = forest(d);
    let mut tree = Tree {
        d,
        children,
        seen: HashSet::new(),
        lines: Vec::new(),
    };
    for r in roots {
        tree.walk(r, "", "", "");
    }
    tree.lines
}

/// The tree as JSON: an array of root nodes, each
/// `{"urn", "type", "name", "id", "custom", "category", "composite",
/// "address", "declaration", "protect", "delete", "outputs", "children"}`
/// with secrets masked (`address` and `declaration` are `null` for entries
/// no program file declared).
pub fn tree_json(d: &Deployment) -> Value {
    let (roots, children) = forest(d);
    fn node(
        d: &Deployment,
        children: &HashMap<usize, Vec<usize>>,
        i: usize,
        seen: &mut HashSet<usize>,
    ) -> Option<Value> {
        if !seen.insert(i) {
            return None;
        }
        let r = &d.resources[i];
        let kids: Vec<Value> = children
            .get(&i)
            .into_iter()
            .flatten()
            .filter_map(|&k| node(d, children, k, seen))
            .collect();
        let outputs: serde_json::Map<String, Value> = mask_map(&r.outputs)
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect();
        let address = crate::model::Address::parse(&r.keel_address).ok();
        Some(json!({
            "urn": r.urn.as_str(),
            "type": r.ty.as_str(),
            "name": r.urn.name(),
            "id": r.id,
            "custom": r.custom,
            "category": r.category().as_str(),
            "composite": r.composite(),
            "address": address.as_ref().map(ToString::to_string),
            "declaration": address.as_ref().map(|a| a.declaration().to_string()),
            "protect": r.protect,
            "delete": r.delete,
            "outputs": outputs,
            "children": kids,
        }))
    }
    let mut seen = HashSet::new();
    Value::Array(
        roots
            .into_iter()
            .filter_map(|r| node(d, &children, r, &mut seen))
            .collect(),
    )
}

/// The simulated cloud's objects as `[{"id", "type", "name", "urn",
/// "properties"}]` (an object is identified by its type and ID together;
/// properties: the outputs, in the checkpoint encoding, secrets masked).
pub fn cloud_json(objects: &[SimObject]) -> Value {
    Value::Array(
        objects
            .iter()
            .map(|o| {
                let props: serde_json::Map<String, Value> = mask_map(&o.outputs)
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect();
                json!({"id": o.id, "type": o.ty, "name": o.name, "urn": o.urn, "properties": props})
            })
            .collect(),
    )
}

/// The simulated cloud's objects as a table: ID, type (an object is
/// identified by both), the stack whose resource created it (`-` for
/// objects made outside keel) and name.
pub fn cloud_lines(objects: &[SimObject]) -> Vec<String> {
    if objects.is_empty() {
        return vec!["the simulated cloud is empty".into()];
    }
    let stack = |o: &SimObject| -> String {
        crate::model::Urn::parse(&o.urn)
            .map(|u| u.stack().to_owned())
            .unwrap_or_else(|_| "-".into())
    };
    let rows: Vec<[Cow<'_, str>; 4]> = objects
        .iter()
        .map(|o| {
            [
                clean(&o.id),
                clean(&o.ty),
                Cow::Owned(clean(&stack(o)).into_owned()),
                clean(&o.name),
            ]
        })
        .collect();
    let w_id = rows.iter().map(|r| r[0].len()).max().unwrap_or(2).max(2);
    let w_ty = rows.iter().map(|r| r[1].len()).max().unwrap_or(4).max(4);
    let w_st = rows.iter().map(|r| r[2].len()).max().unwrap_or(5).max(5);
    let mut lines = vec![format!(
        "{:<w_id$}  {:<w_ty$}  {:<w_st$}  NAME",
        "ID", "TYPE", "STACK"
    )];
    for [id, ty, st, name] in &rows {
        lines.push(format!("{id:<w_id$}  {ty:<w_ty$}  {st:<w_st$}  {name}"));
    }
    lines
}
