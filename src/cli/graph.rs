//! `keel stack graph FILE [--json]`: a stack's resource graph, as Pulumi's
//! `stack graph` draws it, for Graphviz (DOT) or as JSON.
//!
//! One node per resource of the state (sorted by URN, named `Resource<i>`;
//! the label is the resource's name and type). Edges go from a resource to
//! what it points at: its dependencies (its `dependencies` and any URN of
//! its `propertyDependencies` they miss; solid, the dependency colour) and
//! its parent (dashed, the parent colour). The output depends only on the
//! state's resources, not on their order (which follows the order in which
//! concurrent registrations arrived): the same resources always give the
//! same file. Nothing but URNs,
//! types and names is written: no property value, hence no secret.

use std::collections::BTreeMap;
use std::path::Path;

use super::CliError;
use crate::model::{Deployment, State, Urn};
use crate::persist::fs::{atomic_write, IoCounters};

/// Pulumi's default colour of dependency edges.
pub const DEPENDENCY_COLOR: &str = "#246C60";
/// Pulumi's default colour of parent edges.
pub const PARENT_COLOR: &str = "#AA6639";

/// How to draw the graph.
#[derive(Debug, Clone)]
pub struct GraphOptions {
    /// Leave parent edges out.
    pub ignore_parent_edges: bool,
    /// Leave dependency edges out.
    pub ignore_dependency_edges: bool,
    /// The colour of parent edges.
    pub parent_color: String,
    /// The colour of dependency edges.
    pub dependency_color: String,
    /// Label nodes with the resource's name only.
    pub short_node_name: bool,
}

impl Default for GraphOptions {
    fn default() -> Self {
        Self {
            ignore_parent_edges: false,
            ignore_dependency_edges: false,
            parent_color: PARENT_COLOR.into(),
            dependency_color: DEPENDENCY_COLOR.into(),
            short_node_name: false,
        }
    }
}

/// An edge's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeKind {
    /// From a child to its parent.
    Parent,
    /// From a resource to one it depends on.
    Dependency,
}

impl EdgeKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Parent => "parent",
            Self::Dependency => "dependency",
        }
    }
}

/// The nodes: the deployment's resources sorted by URN (a live resource
/// before the old half of its replacement, marked for deletion).
pub fn nodes(d: &Deployment) -> Vec<&State> {
    let mut v: Vec<&State> = d.resources.iter().collect();
    v.sort_by(|a, b| (a.urn.as_str(), a.delete).cmp(&(b.urn.as_str(), b.delete)));
    v
}

/// The graph's edges `(from, to, kind)` between indices of `nodes`.
pub fn edges(nodes: &[&State], options: &GraphOptions) -> Vec<(usize, usize, EdgeKind)> {
    // A URN names its live resource (the old half of a replace, marked
    // for deletion, only when it is alone).
    let mut index: BTreeMap<&Urn, usize> = BTreeMap::new();
    for (i, r) in nodes.iter().enumerate() {
        if !r.delete || !index.contains_key(&r.urn) {
            index.insert(&r.urn, i);
        }
    }
    let mut out = Vec::new();
    for (i, r) in nodes.iter().enumerate() {
        if !options.ignore_parent_edges && !r.parent.is_empty() {
            if let Some(&p) = index.get(&r.parent) {
                out.push((i, p, EdgeKind::Parent));
            }
        }
        if options.ignore_dependency_edges {
            continue;
        }
        let mut seen = std::collections::BTreeSet::new();
        let deps = r.dependencies.iter().chain(
            r.property_dependencies
                .values()
                .flatten()
                .flat_map(|v| v.iter()),
        );
        for u in deps {
            if let Some(&t) = index.get(u) {
                if t != i && seen.insert(t) {
                    out.push((i, t, EdgeKind::Dependency));
                }
            }
        }
    }
    out
}

/// A DOT string's content.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' | '\r' => o.push(' '),
            c if c.is_control() => {}
            c => o.push(c),
        }
    }
    o
}

/// The graph in DOT.
pub fn dot(d: &Deployment, options: &GraphOptions) -> String {
    let nodes = nodes(d);
    let mut s = String::from("strict digraph {\n");
    for (i, r) in nodes.iter().enumerate() {
        let label = if options.short_node_name {
            esc(r.urn.name())
        } else {
            format!("{}\\n{}", esc(r.urn.name()), esc(r.ty.as_str()))
        };
        s.push_str(&format!("    Resource{i} [label=\"{label}\"];\n"));
    }
    for (from, to, kind) in edges(&nodes, options) {
        let attrs = match kind {
            EdgeKind::Parent => format!("color=\"{}\", style=dashed", esc(&options.parent_color)),
            EdgeKind::Dependency => format!("color=\"{}\"", esc(&options.dependency_color)),
        };
        s.push_str(&format!("    Resource{from} -> Resource{to} [{attrs}];\n"));
    }
    s.push_str("}\n");
    s
}

/// The graph as JSON: `{"nodes": [{"id", "urn", "type", "name"}],
/// "edges": [{"from", "to", "kind"}]}` (edges name URNs; `kind` is
/// `parent` or `dependency`).
pub fn json(d: &Deployment, options: &GraphOptions) -> serde_json::Value {
    let nodes = nodes(d);
    let edges: Vec<serde_json::Value> = edges(&nodes, options)
        .into_iter()
        .map(|(f, t, k)| {
            serde_json::json!({
                "from": nodes[f].urn.as_str(),
                "to": nodes[t].urn.as_str(),
                "kind": k.as_str(),
            })
        })
        .collect();
    let nodes: Vec<serde_json::Value> = nodes
        .iter()
        .enumerate()
        .map(|(i, r)| {
            serde_json::json!({
                "id": format!("Resource{i}"),
                "urn": r.urn.as_str(),
                "type": r.ty.as_str(),
                "name": r.urn.name(),
            })
        })
        .collect();
    serde_json::json!({ "nodes": nodes, "edges": edges })
}

/// `keel stack graph FILE [--json] [--stack]`: reads the stack (no lock:
/// nothing of it changes) and writes its graph to FILE (atomically), or to
/// stdout for `-`.
///
/// # Errors
/// [`CliError::NoStack`], [`CliError::ExportIntoBackend`] for a FILE
/// inside the backend, [`CliError::Backend`] for an unreadable state,
/// [`CliError::Write`].
pub fn graph(
    backend: &Path,
    stack: &str,
    file: &Path,
    as_json: bool,
    options: &GraphOptions,
) -> Result<(), CliError> {
    let b = super::commands::existing(backend, stack)?;
    let stdout = file.as_os_str() == "-";
    if !stdout {
        super::commands::refuse_backend_file(backend, file)?;
    }
    let loaded = b.load(stack)?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let text = if as_json {
        let mut t = json(&loaded.deployment, options).to_string();
        t.push('\n');
        t
    } else {
        dot(&loaded.deployment, options)
    };
    if stdout {
        super::display::out(text.trim_end());
        return Ok(());
    }
    atomic_write(file, text.as_bytes(), false, &IoCounters::default()).map_err(|source| {
        CliError::Write {
            path: file.to_owned(),
            source,
        }
    })?;
    eprintln!(
        "wrote the graph of stack `{stack}` ({} resources) to {}",
        loaded.deployment.resources.len(),
        file.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str, parent: Option<&str>, deps: &[&str]) -> State {
        let urn = |n: &str| Urn::parse(&format!("urn:pulumi:dev::p::a:b:C::{n}")).unwrap();
        State {
            urn: urn(name),
            ty: crate::model::TypeToken::parse("a:b:C").unwrap(),
            parent: parent.map(urn).unwrap_or_default(),
            dependencies: deps.iter().map(|d| urn(d)).collect(),
            ..State::default()
        }
    }

    #[test]
    fn the_graph_does_not_depend_on_the_state_order() {
        let a = state("a", None, &[]);
        let b = state("b", None, &[]);
        let c = state("c", Some("a"), &["b"]);
        let one = Deployment {
            resources: vec![a.clone(), b.clone(), c.clone()],
            ..Deployment::default()
        };
        let two = Deployment {
            resources: vec![b, a, c],
            ..Deployment::default()
        };
        let o = GraphOptions::default();
        assert_eq!(dot(&one, &o), dot(&two, &o));
        assert_eq!(json(&one, &o), json(&two, &o));
        let text = dot(&one, &o);
        assert!(
            text.contains("Resource2 -> Resource0 [color=\"#AA6639\", style=dashed];"),
            "{text}"
        );
        assert!(
            text.contains("Resource2 -> Resource1 [color=\"#246C60\"];"),
            "{text}"
        );
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(esc("a\"b\\c\nd"), "a\\\"b\\\\c d");
    }
}
