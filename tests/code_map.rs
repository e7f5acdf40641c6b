//! ARCHITECTURE.md stays true: its code map names exactly the files under
//! `src/`, and its rule table names every migration rule id with files that
//! really raise it, and its layer table holds every import between
//! top-level modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use keel::migrate::Rule;

fn architecture() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The first fenced block after the heading `heading`.
fn fenced_after<'a>(doc: &'a str, heading: &str) -> &'a str {
    let after = doc
        .split_once(heading)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has a `{heading}` section"))
        .1;
    after
        .split_once("```\n")
        .and_then(|(_, body)| body.split_once("```"))
        .unwrap_or_else(|| panic!("`{heading}` is followed by a closed fenced block"))
        .0
}

/// The code map: the first fenced block after `## Code map`.
fn code_map(doc: &str) -> &str {
    fenced_after(doc, "## Code map")
}

/// The files a code map names: `dir/` lines open a directory for the lines
/// indented under them, `name.rs` lines name a file.
fn mapped_files(map: &str) -> BTreeSet<String> {
    let mut dirs: Vec<(usize, String)> = Vec::new();
    let mut files = BTreeSet::new();
    for line in map.lines() {
        let indent = line.len() - line.trim_start().len();
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        while dirs.last().is_some_and(|(i, _)| *i >= indent) {
            dirs.pop();
        }
        let prefix: String = dirs.iter().map(|(_, d)| d.as_str()).collect();
        if name.ends_with('/') {
            dirs.push((indent, name.to_owned()));
        } else if name.ends_with(".rs") {
            files.insert(format!("{prefix}{name}"));
        }
    }
    files
}

fn source_files(dir: &Path, root: &Path, out: &mut BTreeSet<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path: PathBuf = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("under the root");
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn the_code_map_names_every_file_under_src_and_nothing_else() {
    let doc = architecture();
    let mapped = mapped_files(code_map(&doc));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut actual = BTreeSet::new();
    source_files(&root.join("src"), root, &mut actual);
    let missing: Vec<_> = actual.difference(&mapped).collect();
    let stale: Vec<_> = mapped.difference(&actual).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ARCHITECTURE.md's code map is out of date: add {missing:?}, remove {stale:?}"
    );
}

/// `CamelCase` -> `snake_case`, the name of a rule's error constructor.
fn snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn the_rule_table_names_every_rule_and_where_it_is_raised() {
    let doc = architecture();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut problems = Vec::new();
    for rule in Rule::ALL {
        let id = rule.as_str();
        let variant = format!("{rule:?}");
        let row = doc.lines().find(|l| l.starts_with(&format!("| `{id}` |")));
        let Some(row) = row else {
            problems.push(format!("no row for `{id}`"));
            continue;
        };
        let files: Vec<&str> = row
            .split('|')
            .nth(2)
            .unwrap_or_default()
            .split(',')
            .map(|f| f.trim().trim_matches('`'))
            .filter(|f| !f.is_empty())
            .collect();
        if files.is_empty() {
            problems.push(format!("`{id}` names no file"));
        }
        let needles = [format!("Rule::{variant}"), format!("{}(", snake(&variant))];
        for f in files {
            match std::fs::read_to_string(root.join(f)) {
                Ok(text) if needles.iter().any(|n| text.contains(n.as_str())) => {}
                Ok(_) => problems.push(format!("`{id}`: {f} does not raise it")),
                Err(e) => problems.push(format!("`{id}`: {f}: {e}")),
            }
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's rule table: {problems:#?}"
    );
}

/// The top-level module a file under `src/` belongs to (`lib`, `bin` and
/// the file stem of top-level files count as their own).
fn module_of(file: &str) -> String {
    let rel = file.trim_start_matches("src/");
    match rel.split_once('/') {
        Some((dir, _)) => dir.to_owned(),
        None => rel.trim_end_matches(".rs").to_owned(),
    }
}

/// Edges `from -> to` between top-level modules: a `crate::to` path in
/// `from`'s non-test code.
fn module_edges() -> BTreeSet<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = BTreeSet::new();
    source_files(&root.join("src"), root, &mut files);
    let mut edges = BTreeSet::new();
    for f in files {
        let from = module_of(&f);
        let text = std::fs::read_to_string(root.join(&f)).expect("a source file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, _) in code.match_indices("crate::") {
            let to: String = code[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !to.is_empty() && to != from {
                edges.insert((from.clone(), to));
            }
        }
    }
    edges
}

/// The layer of each top-level module, from the `layer N  a b c` lines
/// of the fenced block after `### Module layers` in ARCHITECTURE.md.
fn layers(doc: &str) -> BTreeMap<String, usize> {
    let block = fenced_after(doc, "### Module layers");
    let mut out = BTreeMap::new();
    for line in block.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("layer") {
            continue;
        }
        let n: usize = words
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("`{line}`: a layer line is `layer N module...`"));
        for m in words {
            assert!(
                out.insert(m.to_owned(), n).is_none(),
                "`{m}` is on two layers"
            );
        }
    }
    out
}

/// The top-level modules form the DAG ARCHITECTURE.md draws: every import
/// between them goes to a lower layer, so no cycle can start.
#[test]
fn imports_between_modules_go_down_the_layers() {
    let layers = layers(&architecture());
    let edges = module_edges();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut modules = BTreeSet::new();
    let mut files = BTreeSet::new();
    source_files(&root.join("src"), root, &mut files);
    for f in &files {
        let m = module_of(f);
        if m != "lib" && m != "bin" {
            modules.insert(m);
        }
    }
    let unlayered: Vec<_> = modules
        .iter()
        .filter(|m| !layers.contains_key(*m))
        .collect();
    assert!(
        unlayered.is_empty(),
        "modules missing from ARCHITECTURE.md's layer table: {unlayered:?}"
    );
    let stale: Vec<_> = layers.keys().filter(|m| !modules.contains(*m)).collect();
    assert!(
        stale.is_empty(),
        "the layer table names modules that do not exist: {stale:?}"
    );
    let mut wrong = Vec::new();
    for (from, to) in &edges {
        if to.starts_with(|c: char| c.is_ascii_uppercase()) {
            wrong.push(format!(
                "{from} names the root re-export `crate::{to}`: use its module's path"
            ));
            continue;
        }
        let (Some(a), Some(b)) = (layers.get(from), layers.get(to)) else {
            continue;
        };
        if b >= a {
            wrong.push(format!(
                "{from} (layer {a}) imports {to} (layer {b}): imports must go to a lower layer"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The checker above sees an edge that goes up: a guard against a checker
/// that would pass anything.
#[test]
fn the_layer_check_sees_an_upward_import() {
    let layers = layers(&architecture());
    assert!(layers["model"] < layers["plan"]);
    assert!(layers["plan"] < layers["actors"]);
    assert!(layers["actors"] < layers["engine"]);
    let edges = module_edges();
    assert!(
        edges.contains(&("actors".to_owned(), "plan".to_owned())),
        "the edge scan finds the actors' imports of the planner"
    );
}

/// One mutex policy (`src/locks.rs`): outside it and the loom-checked
/// `sync/` core, no code handles poisoning its own way.
#[test]
fn every_mutex_goes_through_the_one_policy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = BTreeSet::new();
    source_files(&root.join("src"), root, &mut files);
    let mut offenders = Vec::new();
    for f in files {
        if f == "src/locks.rs" || f.starts_with("src/sync/") {
            continue;
        }
        let text = std::fs::read_to_string(root.join(&f)).expect("a source file");
        for needle in [
            "PoisonError",
            ".lock().unwrap()",
            ".lock().expect(",
            ".lock().ok()",
        ] {
            if text.contains(needle) {
                offenders.push(format!("{f}: {needle}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "lock through `MutexExt::locked` (src/locks.rs): {offenders:?}"
    );
}
