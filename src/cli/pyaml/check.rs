//! Checks of a Pulumi YAML program before anything runs
//! (`pulumi-yaml.md` §7, §8): names (one namespace for config, variables
//! and resources; `pulumi` reserved), every `${root}` resolves, no
//! dependency cycle, and references to resource outputs that provably do
//! not exist (a literal list too short, a property that neither the
//! resource's literal inputs nor keel's simulated cloud provide). Where
//! only a provider schema could tell, a warning says so.

use std::collections::{BTreeMap, BTreeSet};

use super::expr::{Access, Accessor, Expr, Parser, Seg};
use super::template::{Properties, PyamlProgram, ResourceDecl};

/// What a root name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A config declaration or stack config key.
    Config,
    /// A variable.
    Variable,
    /// A resource.
    Resource,
}

/// The nodes of a program by name, and their dependencies.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    /// Each node's kind.
    pub(crate) kinds: BTreeMap<String, Kind>,
    /// Each node's dependencies (roots it refers to), in order.
    pub(crate) deps: BTreeMap<String, Vec<String>>,
}

/// The node `root` refers to in `prog` (the project prefix stripped).
pub(crate) fn resolve_root(
    prog: &PyamlProgram,
    kinds: &BTreeMap<String, Kind>,
    root: &str,
) -> Option<String> {
    if kinds.contains_key(root) {
        return Some(root.to_owned());
    }
    let bare = root.strip_prefix(&format!("{}:", prog.name))?;
    kinds.contains_key(bare).then(|| bare.to_owned())
}

/// Builds the graph (used by the checks and the run).
pub(crate) fn graph(prog: &PyamlProgram) -> Graph {
    let mut g = Graph::default();
    for c in &prog.config {
        g.kinds.insert(c.key.clone(), Kind::Config);
    }
    for k in &prog.stack_keys {
        let bare = k.strip_prefix(&format!("{}:", prog.name)).unwrap_or(k);
        g.kinds.entry(bare.to_owned()).or_insert(Kind::Config);
    }
    for (n, _, _) in &prog.variables {
        g.kinds.insert(n.clone(), Kind::Variable);
    }
    for r in &prog.resources {
        g.kinds.insert(r.key.clone(), Kind::Resource);
    }
    let add = |g: &mut Graph, name: &str, exprs: &[&Expr]| {
        let mut out: Vec<String> = Vec::new();
        for e in exprs {
            for root in e.roots() {
                if let Some(r) = resolve_root(prog, &g.kinds, root) {
                    if !out.contains(&r) && r != name {
                        out.push(r);
                    }
                }
            }
        }
        g.deps.insert(name.to_owned(), out);
    };
    for c in &prog.config {
        let exprs: Vec<&Expr> = c.default.iter().collect();
        add(&mut g, &c.key, &exprs);
    }
    for (n, e, _) in &prog.variables {
        add(&mut g, n, &[e]);
    }
    for r in &prog.resources {
        let (mut edge, other) = r.expressions();
        edge.extend(other);
        add(&mut g, &r.key, &edge);
    }
    g
}

/// Runs every check, reporting to `p`.
pub(crate) fn check(p: &mut Parser, prog: &PyamlProgram) {
    // One namespace.
    let mut seen: BTreeMap<String, &'static str> = BTreeMap::new();
    let mut declare = |p: &mut Parser, name: &str, what: &'static str, path: &[Seg]| {
        if name == "pulumi" {
            p.error(
                path,
                format!("{what} `pulumi` uses the reserved name pulumi"),
            );
        }
        if let Some(prev) = seen.insert(name.to_owned(), what) {
            p.error(
                path,
                format!("{what} `{name}` cannot have the same name as {prev} `{name}`"),
            );
        }
    };
    let names: Vec<(&str, &'static str, &[Seg])> = prog
        .config
        .iter()
        .map(|c| (c.key.as_str(), "config", c.path.as_slice()))
        .chain(
            prog.variables
                .iter()
                .map(|(n, _, q)| (n.as_str(), "variable", q.as_slice())),
        )
        .chain(
            prog.resources
                .iter()
                .map(|r| (r.key.as_str(), "resource", r.path.as_slice())),
        )
        .collect();
    for (n, w, q) in names {
        declare(p, n, w, q);
    }
    let g = graph(prog);
    let resources: BTreeMap<&str, &ResourceDecl> =
        prog.resources.iter().map(|r| (r.key.as_str(), r)).collect();
    // Every root resolves; accesses on resources are checked.
    let visit = |p: &mut Parser, path: &[Seg], e: &Expr| {
        e.accesses(&mut |a: &Access| {
            if a.root == "pulumi" {
                let ok = match a.path.as_slice() {
                    [] => true,
                    [Accessor::Name(n) | Accessor::Key(n)] => {
                        ["stack", "project", "organization", "cwd", "rootDirectory"]
                            .contains(&n.as_str())
                    }
                    _ => false,
                };
                if !ok {
                    p.error(
                        path,
                        format!(
                            "`{a}`: pulumi has stack, project, organization, cwd and rootDirectory"
                        ),
                    );
                }
                return;
            }
            match resolve_root(prog, &g.kinds, &a.root) {
                None => p.error(
                    path,
                    format!(
                        "`{a}`: resource, variable, or config value `{}` not found",
                        a.root
                    ),
                ),
                Some(r) => {
                    if let Some(res) = resources.get(r.as_str()) {
                        access_on_resource(p, path, prog, res, a);
                    }
                }
            }
        });
    };
    let own = format!("{}:", prog.name);
    for c in &prog.config {
        if let Some(d) = &c.default {
            if !d.roots().is_empty() {
                p.error(&c.path, "a config default must not refer to other values");
            }
        } else if c.ty.is_some() {
            let name = c.name.strip_prefix(&own).unwrap_or(&c.name);
            let set = prog
                .stack_keys
                .iter()
                .any(|k| k.strip_prefix(&own).unwrap_or(k) == name);
            if !set {
                p.error(
                    &c.path,
                    format!("missing required configuration variable `{name}`; set it with `keel config set {name} VALUE`"),
                );
            }
        }
    }
    for (_, e, q) in prog.variables.iter().chain(&prog.outputs) {
        visit(p, q, e);
    }
    for r in &prog.resources {
        let o = |k: &str| {
            let mut q = r.path.clone();
            q.push(Seg::Key(k.to_owned()));
            q
        };
        match &r.properties {
            Properties::Map(m) => {
                for (k, e) in m {
                    let mut q = o("properties");
                    q.push(Seg::Key(k.clone()));
                    visit(p, &q, e);
                }
            }
            Properties::Expr(e) => visit(p, &o("properties"), e),
        }
        let (edge, other) = r.expressions();
        let q = o("options");
        for e in edge.into_iter().chain(other) {
            if !matches!(&r.properties, Properties::Map(m) if m.iter().any(|(_, x)| std::ptr::eq(x, e)))
                && !matches!(&r.properties, Properties::Expr(x) if std::ptr::eq(x, e))
            {
                visit(p, &q, e);
            }
        }
    }
    cycles(p, prog, &g);
}

/// A reference `${res...}`: `.id` and `.urn` always exist; any other
/// output must be a literal input or an output keel's simulated cloud
/// computes (`schemas:` outputs, `arn`, `websiteEndpoint`, `domainName`).
fn access_on_resource(
    p: &mut Parser,
    path: &[Seg],
    prog: &PyamlProgram,
    r: &ResourceDecl,
    a: &Access,
) {
    let Some(first) = a.path.first() else {
        return;
    };
    let name = match first {
        Accessor::Name(n) | Accessor::Key(n) => n,
        Accessor::Index(_) => {
            p.error(
                path,
                format!("`{a}`: a resource is not a list; use `.property`"),
            );
            return;
        }
    };
    if name == "id" || name == "urn" || r.get.is_some() || r.is_provider() || r.component {
        return;
    }
    if r.ty == "pulumi:pulumi:StackReference" {
        return;
    }
    let Properties::Map(props) = &r.properties else {
        return;
    };
    let schema = prog.schemas.get(&r.ty);
    let computed = crate::provider::sim::COMPUTED_OUTPUT_KEYS.contains(&name.as_str())
        || schema.is_some_and(|s| s.outputs.contains_key(name));
    match props.iter().find(|(k, _)| k == name) {
        Some((_, e)) => {
            if computed {
                return;
            }
            literal_path(p, path, a, e, &a.path[1..]);
        }
        None if computed => {}
        None if schema.is_some() => p.error(
            path,
            format!(
                "`{a}`: resource `{}` ({}) has no property `{name}`: it is not among its inputs nor the outputs its `schemas:` entry computes",
                r.key, r.ty
            ),
        ),
        None => p.warn(
            path,
            format!(
                "`{a}`: `{name}` is not an input of `{}`; keel cannot load a schema of {} to tell whether its provider returns it (on the simulated cloud it is null unless a `schemas:` entry computes it)",
                r.key, r.ty
            ),
        ),
    }
}

/// Follows the rest of an access into a literal input.
fn literal_path(p: &mut Parser, path: &[Seg], a: &Access, e: &Expr, rest: &[Accessor]) {
    let Some(next) = rest.first() else {
        return;
    };
    match (e, next) {
        (Expr::List(items), Accessor::Index(i)) => {
            if *i >= items.len() {
                p.error(
                    path,
                    format!(
                        "`{a}`: list index {i} out-of-bounds for list of length {}",
                        items.len()
                    ),
                );
            } else {
                literal_path(p, path, a, &items[*i], &rest[1..]);
            }
        }
        (Expr::List(_), _) => p.error(path, format!("`{a}`: a list takes only integer subscripts")),
        (Expr::Object(entries), Accessor::Name(k) | Accessor::Key(k)) => {
            let found = entries
                .iter()
                .find(|(key, _)| key.as_text() == Some(k.as_str()));
            if let Some((_, v)) = found {
                literal_path(p, path, a, v, &rest[1..]);
            }
        }
        (Expr::Object(_), Accessor::Index(_)) => {
            p.error(path, format!("`{a}`: an object takes no integer subscript"));
        }
        (Expr::Bool(_) | Expr::Number(_) | Expr::Text(_) | Expr::Interpolate(_), _) => {
            p.error(
                path,
                format!("`{a}`: the receiver must be a list or object, not a scalar"),
            );
        }
        _ => {}
    }
}

/// Reports each dependency cycle once.
fn cycles(p: &mut Parser, prog: &PyamlProgram, g: &Graph) {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    let mut reported: BTreeSet<String> = BTreeSet::new();
    fn walk<'g>(
        n: &'g str,
        g: &'g Graph,
        marks: &mut BTreeMap<&'g str, Mark>,
        stack: &mut Vec<&'g str>,
        found: &mut Vec<Vec<&'g str>>,
    ) {
        match marks.get(n) {
            Some(Mark::Done) => return,
            Some(Mark::Open) => {
                if let Some(i) = stack.iter().position(|s| *s == n) {
                    found.push(stack[i..].to_vec());
                }
                return;
            }
            None => {}
        }
        marks.insert(n, Mark::Open);
        stack.push(n);
        for d in g.deps.get(n).into_iter().flatten() {
            walk(d, g, marks, stack, found);
        }
        stack.pop();
        marks.insert(n, Mark::Done);
    }
    let mut found = Vec::new();
    for n in g.deps.keys() {
        walk(n, g, &mut marks, &mut Vec::new(), &mut found);
    }
    for c in found {
        let mut key: Vec<&str> = c.clone();
        key.sort_unstable();
        if !reported.insert(key.join(",")) {
            continue;
        }
        let first = c[0];
        let path = prog
            .resources
            .iter()
            .find(|r| r.key == first)
            .map(|r| r.path.clone())
            .or_else(|| {
                prog.variables
                    .iter()
                    .find(|v| v.0 == first)
                    .map(|v| v.2.clone())
            })
            .unwrap_or_default();
        let mut cycle: Vec<&str> = c.clone();
        cycle.push(first);
        p.error(
            &path,
            format!(
                "circular dependency of `{first}` transitively on itself: {}",
                cycle.join(" -> ")
            ),
        );
    }
}
