//! Program files (`cli.md` §2): YAML or JSON with the same structure,
//! decoded and validated completely before anything runs.
//!
//! [`ProgramFile::load`] reads a file, [`ProgramFile::parse`] decodes
//! bytes. Every problem found is reported at once, each naming the file,
//! the resource and the key ([`Issue`]): unknown keys at any level, values
//! of the wrong type, bad type tokens, unknown resources or config keys in
//! references and resource options, `.id` of a component, reference cycles,
//! and malformed state migrations. A file that passes is compiled onto the
//! program API by [`super::run`].
//!
//! Config values are literal (no `${...}`), and may be secrets
//! (`{"fn::secret": value}`). Resources are named by their key in
//! `resources` (no whitespace, `.`, `$`, `{`, `}`; `config` is reserved);
//! options that name resources (`parent`, `dependsOn`, `deletedWith`,
//! `provider`, an alias's `parent`) take the bare name or `${name}`, and
//! `provider` and an alias's `parent` also take a literal URN.
//!
//! `options.stateMigrations` (`cli.md` §3) is a list whose items each have
//! exactly one key: `rename: {from, to}` (a descendant's name),
//! `retype: {from, to}` (type tokens), `move: {resources: [names], under}`
//! (re-parent descendants under a component of the prior subtree) or
//! `command: [program, args...]` (an external program; a relative program
//! path, and the program's relative arguments, resolve against the program
//! file's directory, where it runs). `options.stateMigrationTimeout` (seconds,
//! or text like `"2m"`; default 30 s) bounds each callback of the resource.
//!
//! The top-level `schemas` key (`architecture.md` §8) declares the
//! simulated cloud's schema version per type token:
//! `{type: {version: N, renames: {old: new}, outputs: {key: template}}}`;
//! its migration renames the keys in inputs and outputs. `outputs` gives
//! the type outputs only a real provider would compute (templates with
//! `{id}`, `{type}`, `{inputs.KEY}`); `version` may then be left out (0).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::decode::{decode, Decode, Duplicate, Seed};
use super::template::{parse_string, Field, Reference, Template, FN_SECRET};
use crate::model::address::Key;
use crate::model::property::Secret;
use crate::model::state::{CustomTimeouts, Seconds};
use crate::model::urn::STACK_TYPE;
use crate::model::{PropertyValue, ProviderRef, TypeToken, Urn};

/// The largest program file keel reads (64 MiB): larger files, and
/// endless ones such as `/dev/zero`, are refused before they are parsed.
pub const MAX_PROGRAM_FILE: u64 = 64 << 20;

/// The top-level keys of a program file.
const TOP_KEYS: &[&str] = &["name", "config", "resources", "outputs", "schemas"];
/// The keys of one type's schema under `schemas`.
const SCHEMA_KEYS: &[&str] = &["version", "renames", "outputs"];
/// The keys of a resource.
const RESOURCE_KEYS: &[&str] = &[
    "type",
    "component",
    "read",
    "action",
    "id",
    "properties",
    "options",
    "forEach",
    "count",
];
/// The options a read or an action takes.
const READ_OPTION_KEYS: &[&str] = &[
    "parent",
    "dependsOn",
    "provider",
    "version",
    "additionalSecretOutputs",
];
/// The keys of a resource's options.
const OPTION_KEYS: &[&str] = &[
    "parent",
    "protect",
    "dependsOn",
    "aliases",
    "deleteBeforeReplace",
    "retainOnDelete",
    "deletedWith",
    "ignoreChanges",
    "replaceOnChanges",
    "customTimeouts",
    "provider",
    "version",
    "additionalSecretOutputs",
    "stateMigrations",
    "stateMigrationTimeout",
    "import",
];
/// The keys of an alias object.
const ALIAS_KEYS: &[&str] = &["name", "type", "parent", "noParent", "stack", "project"];
/// The keys of `customTimeouts`.
const TIMEOUT_KEYS: &[&str] = &["create", "update", "delete"];

/// One problem in a program file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// The resource it concerns (`None`: a top-level key).
    pub resource: Option<String>,
    /// The key, as a dotted path below the resource (or the top level).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.resource {
            Some(r) => write!(f, "resource `{r}`, key `{}`: {}", self.key, self.message),
            None => write!(f, "key `{}`: {}", self.key, self.message),
        }
    }
}

/// Why a program file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProgramFileError {
    /// The file could not be read.
    #[error("cannot read the program file {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid YAML or JSON.
    #[error("{}: invalid {format}: {message}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// `YAML` or `JSON`.
        format: &'static str,
        /// The parser's message (with the line and column).
        message: String,
    },
    /// The file is larger than [`MAX_PROGRAM_FILE`].
    #[error(
        "{}: the program file is larger than {} MiB, more than keel reads; split the program or check the path",
        .path.display(),
        MAX_PROGRAM_FILE >> 20
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A mapping has the same key twice (the parsers would silently keep
    /// the last one).
    #[error(
        "{}: line {}: duplicate key `{key}` in {} (first at line {}): keys must be unique; remove or rename one",
        .path.display(),
        line_text(*.second_line),
        if .mapping.is_empty() { "the top-level mapping".to_owned() } else { format!("`{}`", .mapping) },
        line_text(*.first_line)
    )]
    DuplicateKey {
        /// The file.
        path: PathBuf,
        /// The mapping's path (`resources.b.properties`; empty: the top
        /// level).
        mapping: String,
        /// The key.
        key: String,
        /// The line of its first occurrence, when the parser told.
        first_line: Option<usize>,
        /// The line of its second occurrence, when the parser told.
        second_line: Option<usize>,
    },
    /// The file is well-formed but invalid.
    #[error("{}", render_issues(.path, .issues))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found.
        issues: Vec<Issue>,
    },
}

fn line_text(line: Option<usize>) -> String {
    line.map_or_else(|| "?".to_owned(), |l| l.to_string())
}

fn render_issues(path: &Path, issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("{}: {i}", path.display()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A program file, decoded and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgramFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The project's name.
    pub name: String,
    /// The config values (`${config.key}`).
    pub config: BTreeMap<String, PropertyValue>,
    /// The resources, by name.
    pub resources: BTreeMap<String, ResourceSpec>,
    /// The stack's outputs.
    pub outputs: BTreeMap<String, Template>,
    /// The simulated cloud's schemas per type token (`schemas`).
    pub schemas: BTreeMap<String, crate::provider::SchemaDef>,
}

/// One resource of a program file.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceSpec {
    /// Its name (the key in `resources`).
    pub name: String,
    /// Its type.
    pub ty: TypeToken,
    /// True for a component (`component: true`).
    pub component: bool,
    /// Its input properties.
    pub properties: BTreeMap<String, Template>,
    /// Its options.
    pub options: OptionsSpec,
    /// What kind of entry it declares.
    pub entry: EntryKind,
    /// `forEach` or `count`: the declaration expands once per key.
    pub iterate: Option<Iteration>,
}

/// What a declaration of `resources` declares (its category).
#[derive(Debug, Clone, PartialEq)]
pub enum EntryKind {
    /// `type:`: a managed resource, or a component (`component: true`).
    Resource,
    /// `read: TYPE`: a data source, read by `id` or, without one, looked
    /// up by its `properties` (the package's `get<Type>` function); re-read
    /// each operation.
    Read {
        /// `id`: the physical ID to read.
        id: Option<Template>,
    },
    /// `action: FUNCTION`: a side effect, the function run with the
    /// `properties` as its arguments whenever they changed.
    Action,
}

/// How a declaration expands.
#[derive(Debug, Clone, PartialEq)]
pub enum Iteration {
    /// `forEach`: a map (key -> value), a list of strings (each its own
    /// key) or a list of objects with a string `key`.
    ForEach(Template),
    /// `count`: a non-negative integer; the keys are `0..count`.
    Count(Template),
}

/// A resource's options, with resources named as in the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OptionsSpec {
    /// `parent`: the parent resource.
    pub parent: Option<String>,
    /// `protect`.
    pub protect: bool,
    /// `dependsOn`.
    pub depends_on: Vec<String>,
    /// `aliases`.
    pub aliases: Vec<AliasEntry>,
    /// `deleteBeforeReplace`.
    pub delete_before_replace: Option<bool>,
    /// `retainOnDelete`.
    pub retain_on_delete: bool,
    /// `deletedWith`.
    pub deleted_with: Option<String>,
    /// `ignoreChanges`.
    pub ignore_changes: Vec<String>,
    /// `replaceOnChanges`.
    pub replace_on_changes: Vec<String>,
    /// `customTimeouts`.
    pub custom_timeouts: Option<CustomTimeouts>,
    /// `provider`.
    pub provider: Option<ProviderSpec>,
    /// `version`: the provider plugin's version, which picks the default
    /// provider (`default_6_0_0`).
    pub version: Option<String>,
    /// `additionalSecretOutputs`.
    pub additional_secret_outputs: Vec<String>,
    /// `stateMigrations`: the resource's migration callbacks, in order.
    pub state_migrations: Vec<StateMigration>,
    /// `stateMigrationTimeout`: how long each of them may run (default:
    /// [`crate::source::migration::DEFAULT_TIMEOUT`]).
    pub state_migration_timeout: Option<std::time::Duration>,
    /// `import`: the ID of an existing cloud object to adopt (read through
    /// the provider, never created) when the stack has no state for it.
    pub import: Option<String>,
}

/// An entry of `aliases`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AliasEntry {
    /// A whole former URN (a string).
    Urn(Urn),
    /// An alias object: the parts of the former identity that differ.
    Spec {
        /// `name`.
        name: Option<String>,
        /// `type`.
        ty: Option<TypeToken>,
        /// `parent` or `noParent`.
        parent: Option<AliasParentSpec>,
        /// `stack`.
        stack: Option<String>,
        /// `project`.
        project: Option<String>,
    },
}

/// The former parent of an alias object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AliasParentSpec {
    /// `noParent: true`: it was top level.
    NoParent,
    /// A URN.
    Urn(Urn),
    /// A resource of the file.
    Resource(String),
}

/// The `provider` option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderSpec {
    /// A provider resource of the file.
    Resource(String),
    /// A literal reference `<URN>::<ID>`.
    Reference(ProviderRef),
}

/// An entry of `stateMigrations` (`cli.md` §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateMigration {
    /// `rename: {from, to}`: a descendant's name.
    Rename {
        /// The old name.
        from: String,
        /// The new name.
        to: String,
    },
    /// `retype: {from, to}`: a type.
    Retype {
        /// The old type.
        from: TypeToken,
        /// The new type.
        to: TypeToken,
    },
    /// `move: {resources, under}`: re-parent descendants.
    Move {
        /// The descendants moved.
        resources: Vec<String>,
        /// The descendant component they move under.
        under: String,
    },
    /// `command: [argv...]`: an external callback.
    Command(Vec<String>),
}

impl ResourceSpec {
    /// The resources this one waits for, each with the key that names it:
    /// its parent, `dependsOn`, `deletedWith`, a provider resource, alias
    /// parents, and every resource its properties refer to.
    pub fn dependencies(&self) -> Vec<(&str, String)> {
        let o = &self.options;
        let mut out: Vec<(&str, String)> = Vec::new();
        if let Some(p) = &o.parent {
            out.push((p, "options.parent".into()));
        }
        for (i, d) in o.depends_on.iter().enumerate() {
            out.push((d, format!("options.dependsOn[{i}]")));
        }
        if let Some(d) = &o.deleted_with {
            out.push((d, "options.deletedWith".into()));
        }
        if let Some(ProviderSpec::Resource(p)) = &o.provider {
            out.push((p, "options.provider".into()));
        }
        for (i, a) in o.aliases.iter().enumerate() {
            if let AliasEntry::Spec {
                parent: Some(AliasParentSpec::Resource(p)),
                ..
            } = a
            {
                out.push((p, format!("options.aliases[{i}].parent")));
            }
        }
        for (k, t) in &self.properties {
            for r in t.resources() {
                out.push((r, format!("properties.{k}")));
            }
        }
        if let EntryKind::Read { id: Some(t) } = &self.entry {
            for r in t.resources() {
                out.push((r, "id".into()));
            }
        }
        match &self.iterate {
            Some(Iteration::ForEach(t)) => {
                out.extend(t.resources().into_iter().map(|r| (r, "forEach".into())))
            }
            Some(Iteration::Count(t)) => {
                out.extend(t.resources().into_iter().map(|r| (r, "count".into())))
            }
            None => {}
        }
        out
    }

    /// Every template of the declaration, with its key: properties, a
    /// read's `id`, `forEach`/`count`.
    pub fn templates(&self) -> Vec<(String, &Template)> {
        let mut out: Vec<(String, &Template)> = self
            .properties
            .iter()
            .map(|(k, t)| (format!("properties.{k}"), t))
            .collect();
        if let EntryKind::Read { id: Some(t) } = &self.entry {
            out.push(("id".into(), t));
        }
        match &self.iterate {
            Some(Iteration::ForEach(t)) => out.push(("forEach".into(), t)),
            Some(Iteration::Count(t)) => out.push(("count".into(), t)),
            None => {}
        }
        out
    }

    /// The distinct names of [`ResourceSpec::dependencies`].
    pub fn dependency_names(&self) -> BTreeSet<&str> {
        self.dependencies().into_iter().map(|(d, _)| d).collect()
    }
}

impl ProgramFile {
    /// Takes the stack's config values (`Pulumi.<stack>.yaml`, resolved):
    /// they override the file's `config` (the project's keys by their bare
    /// name, other namespaces as `ns:key`), as stack config overrides a
    /// Pulumi YAML program's declared defaults.
    pub fn apply_stack_config(&mut self, config: &[crate::config::Resolved]) {
        let own = format!("{}:", self.name);
        for r in config {
            let key = r.key.strip_prefix(&own).unwrap_or(&r.key);
            self.config.insert(key.to_owned(), r.value.clone());
        }
    }

    /// Whether the program creates secrets (`fn::secret` in its config,
    /// properties or outputs, or outputs made secret by
    /// `additionalSecretOutputs`): its stack then needs a secrets provider.
    pub fn creates_secrets(&self) -> bool {
        fn template(t: &Template) -> bool {
            match t {
                Template::Secret(_) => true,
                Template::Literal(v) => v.contains_secrets(),
                Template::Interpolated(_) => false,
                Template::Array(a) => a.iter().any(template),
                Template::Object(m) => m.values().any(template),
            }
        }
        self.config.values().any(PropertyValue::contains_secrets)
            || self.resources.values().any(|r| {
                !r.options.additional_secret_outputs.is_empty()
                    || r.properties.values().any(template)
            })
            || self.outputs.values().any(template)
    }

    /// Reads and validates a program file.
    ///
    /// # Errors
    /// [`ProgramFileError`] naming the file, and for invalid content every
    /// problem with its resource and key.
    pub fn load(path: &Path) -> Result<Self, ProgramFileError> {
        Self::load_with_config(path, &BTreeSet::new())
    }

    /// [`ProgramFile::load`] for a stack whose config file defines
    /// `stack_config` (`namespace:name` keys): `${config.key}` may name
    /// them too (`key` for the project's own, `ns:key` for others).
    ///
    /// # Errors
    /// As [`ProgramFile::load`].
    pub fn load_with_config(
        path: &Path,
        stack_config: &BTreeSet<String>,
    ) -> Result<Self, ProgramFileError> {
        use std::io::Read;
        let read = |source| ProgramFileError::Read {
            path: path.to_owned(),
            source,
        };
        // Read with a bound: `/dev/zero` or a huge file is refused, not
        // read into memory.
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_PROGRAM_FILE + 1).read_to_end(&mut bytes))
            .map_err(read)?;
        if bytes.len() as u64 > MAX_PROGRAM_FILE {
            return Err(ProgramFileError::TooLarge {
                path: path.to_owned(),
            });
        }
        Self::parse_with_config(path, &bytes, stack_config)
    }

    /// Decodes and validates a program file's bytes (`path` names it in
    /// errors; a `.json` extension selects JSON, anything else YAML).
    ///
    /// # Errors
    /// As [`ProgramFile::load`].
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, ProgramFileError> {
        Self::parse_with_config(path, bytes, &BTreeSet::new())
    }

    /// [`ProgramFile::parse`] with the stack config's keys (see
    /// [`ProgramFile::load_with_config`]).
    ///
    /// # Errors
    /// As [`ProgramFile::load`].
    pub fn parse_with_config(
        path: &Path,
        bytes: &[u8],
        stack_config: &BTreeSet<String>,
    ) -> Result<Self, ProgramFileError> {
        let json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        let duplicate = |d: Duplicate| ProgramFileError::DuplicateKey {
            path: path.to_owned(),
            mapping: d.mapping,
            key: d.key,
            first_line: d.first_line,
            second_line: d.second_line,
        };
        let value: Value = if json {
            let run = |seed: Seed<'_>| {
                let mut de = serde_json::Deserializer::from_slice(bytes);
                let v = serde::de::DeserializeSeed::deserialize(seed, &mut de)?;
                de.end()?;
                Ok(v)
            };
            decode(run, |e: &serde_json::Error| Some(e.line())).map_err(|e| match e {
                Decode::Duplicate(d) => duplicate(d),
                Decode::Syntax(e) => ProgramFileError::Syntax {
                    path: path.to_owned(),
                    format: "JSON",
                    message: e.to_string(),
                },
            })?
        } else {
            let run = |seed: Seed<'_>| {
                serde::de::DeserializeSeed::deserialize(
                    seed,
                    serde_norway::Deserializer::from_slice(bytes),
                )
            };
            decode(run, |e: &serde_norway::Error| {
                e.location().map(|l| l.line())
            })
            .map_err(|e| match e {
                Decode::Duplicate(d) => duplicate(d),
                Decode::Syntax(e) => ProgramFileError::Syntax {
                    path: path.to_owned(),
                    format: "YAML",
                    message: e.to_string(),
                },
            })?
        };
        let mut c = Checker {
            stack_config: stack_config.clone(),
            ..Checker::default()
        };
        let file = c.program(path, &value);
        match file {
            Some(f) if c.issues.is_empty() => Ok(f),
            _ => Err(ProgramFileError::Invalid {
                path: path.to_owned(),
                issues: c.issues,
            }),
        }
    }

    /// The resources in an order where each comes after everything it
    /// waits for (the file is acyclic once validated).
    pub fn order(&self) -> Vec<&str> {
        let mut indegree: BTreeMap<&str, usize> = BTreeMap::new();
        let mut dependents: HashMap<&str, Vec<&str>> = HashMap::new();
        for (name, r) in &self.resources {
            let deps = r.dependency_names();
            indegree.insert(name, deps.len());
            for d in deps {
                dependents.entry(d).or_default().push(name);
            }
        }
        let mut ready: Vec<&str> = indegree
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(k, _)| *k)
            .collect();
        ready.reverse();
        let mut out = Vec::with_capacity(self.resources.len());
        while let Some(n) = ready.pop() {
            out.push(n);
            for d in dependents.get(n).into_iter().flatten() {
                if let Some(k) = indegree.get_mut(d) {
                    *k -= 1;
                    if *k == 0 {
                        ready.push(d);
                    }
                }
            }
        }
        out
    }

    /// The URNs an update of this program on `stack` registers: the stack
    /// resource, the resources, and the default providers of their
    /// packages. Used to size progress displays.
    pub fn expected_urns(&self, stack: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let Ok(stack_ty) = TypeToken::parse(STACK_TYPE) else {
            return out;
        };
        let root = Urn::derive(
            stack,
            &self.name,
            None,
            &stack_ty,
            &format!("{}-{stack}", self.name),
        );
        if let Ok(u) = &root {
            out.insert(u.as_str().to_owned());
        }
        let mut urns: HashMap<&str, Urn> = HashMap::new();
        for name in self.order() {
            let r = &self.resources[name];
            // Expansions are known only once the program runs.
            if self.expands(name) {
                continue;
            }
            let parent = r.options.parent.as_deref().and_then(|p| urns.get(p));
            if let Ok(u) = Urn::derive(stack, &self.name, parent, &r.ty, name) {
                out.insert(u.as_str().to_owned());
                urns.insert(name, u);
            }
            if !r.component && !r.ty.is_provider() && r.options.provider.is_none() {
                let request = crate::plan::providers::DefaultProviderRequest::new(
                    r.ty.package(),
                    r.options.version.as_deref(),
                    None,
                );
                if let (Ok(pty), Ok(request)) = (TypeToken::provider_for(r.ty.package()), request) {
                    if let Ok(u) = Urn::derive(stack, &self.name, None, &pty, &request.name()) {
                        out.insert(u.as_str().to_owned());
                    }
                }
            }
        }
        out
    }

    /// The declaration address of the entry `name`: the names of the
    /// components it is declared inside (`options.parent`), outermost
    /// first, then its own (`group/server`).
    pub fn declaration_address(&self, name: &str) -> crate::model::Address {
        let mut names = vec![name];
        let mut cur = self
            .resources
            .get(name)
            .and_then(|r| r.options.parent.as_deref());
        while let Some(p) = cur {
            if names.contains(&p) || names.len() > self.resources.len() {
                break;
            }
            names.push(p);
            cur = self
                .resources
                .get(p)
                .and_then(|r| r.options.parent.as_deref());
        }
        crate::model::Address(
            names
                .into_iter()
                .rev()
                .map(|n| crate::model::address::Segment {
                    name: n.to_owned(),
                    key: None,
                })
                .collect(),
        )
    }

    /// The keys of the declaration `name` when they are known before the
    /// program runs: its `forEach`/`count` refers to no resource (a
    /// literal, or config). `None` when they come from an output, when it
    /// is not iterated, or when its value is invalid (reported elsewhere).
    pub fn static_keys(&self, name: &str) -> Option<Vec<Key>> {
        let (t, count) = match &self.resources.get(name)?.iterate {
            Some(Iteration::ForEach(t)) => (t, false),
            Some(Iteration::Count(t)) => (t, true),
            None => return None,
        };
        if t.references()
            .iter()
            .any(|r| !matches!(r, super::template::Reference::Config(_)))
        {
            return None;
        }
        let resources = HashMap::new();
        let env = super::template::Env {
            config: &self.config,
            resources: &resources,
            preview: false,
            each: None,
        };
        let v = t.eval(&env).ok()?;
        let keys = if count {
            expansion_keys(None, Some(&v))
        } else {
            expansion_keys(Some(&v), None)
        };
        Some(keys.ok()?.into_iter().map(|(k, _)| k).collect())
    }

    /// Whether `address` can name an expansion of this program: its
    /// declaration exists, and every key it gives is one of its
    /// declaration's keys where those are known before the program runs.
    pub fn may_address(&self, address: &crate::model::Address) -> bool {
        let declared = self
            .resources
            .keys()
            .any(|n| self.declaration_address(n) == address.declaration());
        declared
            && address.0.iter().all(|seg| match &seg.key {
                None => true,
                Some(k) => self
                    .static_keys(&seg.name)
                    .is_none_or(|keys| keys.contains(k)),
            })
    }

    /// Whether the entry `name` expands: it, or a component it is declared
    /// inside (`options.parent`, transitively), has `forEach` or `count`.
    pub fn expands(&self, name: &str) -> bool {
        self.resources
            .get(name)
            .is_some_and(|r| r.iterate.is_some())
            || self.iterated_ancestor(name).is_some()
    }

    /// The nearest component `name` is declared inside that has `forEach`
    /// or `count` (not `name` itself).
    pub fn iterated_ancestor(&self, name: &str) -> Option<&str> {
        let mut seen = BTreeSet::new();
        let mut cur = self.resources.get(name)?.options.parent.as_deref();
        while let Some(p) = cur {
            if !seen.insert(p) {
                return None;
            }
            let spec = self.resources.get(p)?;
            if spec.iterate.is_some() {
                return Some(p);
            }
            cur = spec.options.parent.as_deref();
        }
        None
    }

    /// True when some resource declares state migrations.
    pub fn has_state_migrations(&self) -> bool {
        self.resources
            .values()
            .any(|r| !r.options.state_migrations.is_empty())
    }
}

/// keel's extensions in a Pulumi YAML program (`schemas:`, a resource's
/// `stateMigrations` and `stateMigrationTimeout`), parsed as in program
/// files: `f` receives a parser of each; problems are returned as (key,
/// message) with keys relative to what was parsed.
pub(crate) struct Extensions {
    checker: Checker,
}

impl Extensions {
    /// A parser with no problems yet.
    pub(crate) fn new() -> Self {
        Self {
            checker: Checker::default(),
        }
    }

    /// Parses `schemas:`.
    pub(crate) fn schemas(&mut self, v: &Value) -> BTreeMap<String, crate::provider::SchemaDef> {
        match self.checker.mapping("schemas", v) {
            Some(m) => self.checker.schemas(m),
            None => BTreeMap::new(),
        }
    }

    /// Parses `stateMigrations` (`key` names it in problems).
    pub(crate) fn migrations(&mut self, key: &str, v: &Value) -> Vec<StateMigration> {
        self.checker.migrations(key, v)
    }

    /// Parses `stateMigrationTimeout`.
    pub(crate) fn timeout(&mut self, key: &str, v: &Value) -> Option<std::time::Duration> {
        self.checker.seconds(key, v)
    }

    /// The problems found: (dotted key, message).
    pub(crate) fn take_problems(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.checker.issues)
            .into_iter()
            .map(|i| (i.key, i.message))
            .collect()
    }
}

/// Accumulates issues while decoding.
#[derive(Debug, Default)]
struct Checker {
    issues: Vec<Issue>,
    resource: Option<String>,
    /// Config keys the stack's config file defines (`namespace:name`).
    stack_config: BTreeSet<String>,
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The expansions of an iterated declaration: each key with its value
/// (`${each.key}`, `${each.value}`), in order, from the evaluated
/// `forEach` (a map; a list of distinct strings; a list of objects with
/// distinct string `key`s) or `count` (a non-negative integer: `0..count`,
/// each value its index). Secrets around the collection are seen through
/// for its shape (the values stay secret).
///
/// # Errors
/// A message saying what is wrong with the value.
pub fn expansion_keys(
    for_each: Option<&PropertyValue>,
    count: Option<&PropertyValue>,
) -> Result<Vec<(Key, PropertyValue)>, String> {
    fn plain(v: &PropertyValue) -> &PropertyValue {
        match v {
            PropertyValue::Secret(Secret::Plaintext(p)) => plain(p.value()),
            PropertyValue::Output(o) => o.value.as_deref().map_or(v, plain),
            other => other,
        }
    }
    let check = |k: &str| match crate::model::address::key_problem(k) {
        Some(p) => Err(format!("the key `{k}` cannot name an expansion: {p}")),
        None => Ok(()),
    };
    let mut out: Vec<(Key, PropertyValue)> = Vec::new();
    if let Some(n) = count {
        let n = match plain(n) {
            PropertyValue::Number(n) => n.as_u64(),
            _ => None,
        }
        .ok_or_else(|| {
            format!(
                "`count` must be a non-negative integer, found {}",
                super::template::kind_of(n)
            )
        })?;
        if n > 10_000 {
            return Err(format!(
                "`count` is {n}; at most 10000 expansions per declaration"
            ));
        }
        return Ok((0..n)
            .map(|i| (Key::Index(i), PropertyValue::Number(i.into())))
            .collect());
    }
    let Some(v) = for_each else {
        return Ok(out);
    };
    match plain(v) {
        PropertyValue::Object(m) => {
            for (k, v) in m {
                check(k)?;
                out.push((Key::Name(k.clone()), v.clone()));
            }
        }
        PropertyValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let key = match plain(item) {
                    PropertyValue::String(s) => s.clone(),
                    PropertyValue::Object(o) => match o.get("key").map(plain) {
                        Some(PropertyValue::String(s)) => s.clone(),
                        _ => return Err(format!("`forEach[{i}]` is an object without a string `key`: a list's items are strings, or objects with a `key`")),
                    },
                    other => return Err(format!("`forEach[{i}]` is {}: a list's items are strings, or objects with a string `key` (use `count` for numbered copies)", super::template::kind_of(other))),
                };
                check(&key)?;
                if out.iter().any(|(k, _)| *k == Key::Name(key.clone())) {
                    return Err(format!("`forEach` has the key `{key}` twice: keys name expansions and must be distinct"));
                }
                out.push((Key::Name(key), item.clone()));
            }
        }
        other => {
            return Err(format!(
                "`forEach` must be a map or a list, found {}",
                super::template::kind_of(other)
            ))
        }
    }
    Ok(out)
}

/// A resource name: used in URNs and in `${name.field}` references.
fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("a resource name must not be empty")
    } else if name == "config" {
        Some("`config` is reserved for `${config.key}` references")
    } else if name == "each" {
        Some("`each` is reserved for `${each.key}` and `${each.value}` references")
    } else if name
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '.' | '$' | '{' | '}' | '[' | ']' | '"' | '/'))
    {
        Some("a resource name must not contain whitespace or any of `.${}[]\"/`")
    } else {
        None
    }
}

impl Checker {
    fn issue(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue {
            resource: self.resource.clone(),
            key: key.into(),
            message: message.into(),
        });
    }

    fn wrong(&mut self, key: &str, expected: &str, v: &Value) {
        self.issue(key, format!("expected {expected}, found {}", describe(v)));
    }

    fn mapping<'v>(&mut self, key: &str, v: &'v Value) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            // An empty section (`outputs:`) is an empty mapping.
            Value::Null => None,
            other => {
                self.wrong(key, "a mapping", other);
                None
            }
        }
    }

    fn known_keys(&mut self, prefix: &str, m: &Map<String, Value>, allowed: &[&str]) {
        for k in m.keys() {
            if !allowed.contains(&k.as_str()) {
                self.issue(
                    join(prefix, k),
                    format!("unknown key (expected one of: {})", allowed.join(", ")),
                );
            }
        }
    }

    fn string(&mut self, key: &str, v: &Value) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.wrong(key, "a string", other);
                None
            }
        }
    }

    /// A non-empty string.
    fn nonempty(&mut self, key: &str, v: &Value) -> Option<String> {
        let s = self.string(key, v)?;
        if s.is_empty() {
            self.issue(key, "must not be empty");
            return None;
        }
        Some(s)
    }

    fn boolean(&mut self, key: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            other => {
                self.wrong(key, "true or false", other);
                None
            }
        }
    }

    fn strings(&mut self, key: &str, v: &Value) -> Vec<String> {
        match v {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| self.string(&format!("{key}[{i}]"), item))
                .collect(),
            other => {
                self.wrong(key, "a list of strings", other);
                Vec::new()
            }
        }
    }

    /// A list of property paths (`ignoreChanges`, `replaceOnChanges`).
    fn paths(&mut self, key: &str, v: &Value) -> Vec<String> {
        let list = self.strings(key, v);
        for (i, p) in list.iter().enumerate() {
            if let Err(e) = crate::model::PropertyPath::parse(p) {
                self.issue(
                    format!("{key}[{i}]"),
                    format!("`{p}` is not a property path: {e}"),
                );
            }
        }
        list
    }

    fn type_token(&mut self, key: &str, v: &Value) -> Option<TypeToken> {
        let s = self.string(key, v)?;
        match TypeToken::parse(&s) {
            Ok(t) => Some(t),
            Err(e) => {
                self.issue(key, e.to_string());
                None
            }
        }
    }

    /// A resource named in an option: `name` or `${name}`.
    fn resource_name(&mut self, key: &str, v: &Value) -> Option<String> {
        let s = self.string(key, v)?;
        let s = s
            .strip_prefix("${")
            .and_then(|r| r.strip_suffix('}'))
            .map_or(s.as_str(), str::trim)
            .to_owned();
        if s.is_empty() {
            self.issue(key, "expected a resource name, found an empty string");
            return None;
        }
        Some(s)
    }

    fn program(&mut self, path: &Path, v: &Value) -> Option<ProgramFile> {
        let Value::Object(top) = v else {
            self.wrong("(top level)", "a mapping", v);
            return None;
        };
        self.known_keys("", top, TOP_KEYS);
        let name = match top.get("name") {
            Some(v) => self.string("name", v).and_then(|n| {
                let bad = n.is_empty()
                    || n.contains("::")
                    || n.ends_with(':')
                    || n.chars().any(char::is_whitespace);
                if bad {
                    self.issue(
                        "name",
                        format!("`{n}` is not a project name (non-empty, no whitespace, no `::`, no trailing `:`)"),
                    );
                    None
                } else {
                    Some(n)
                }
            }),
            None => {
                self.issue("name", "missing: the project's name is required");
                None
            }
        };
        let mut config = BTreeMap::new();
        if let Some(m) = top.get("config").and_then(|v| self.mapping("config", v)) {
            for (k, v) in m {
                if !self.shallow(&join("config", k), v) {
                    continue;
                }
                if let Some(value) = self.literal(&join("config", k), v) {
                    config.insert(k.clone(), value);
                }
            }
        }
        let mut resources = BTreeMap::new();
        if let Some(m) = top
            .get("resources")
            .and_then(|v| self.mapping("resources", v))
        {
            for (name, v) in m {
                self.resource = Some(name.clone());
                if let Some(problem) = name_problem(name) {
                    self.issue("(name)", problem);
                }
                if let Some(r) = self.resource_spec(name, v) {
                    resources.insert(name.clone(), r);
                }
                self.resource = None;
            }
        }
        let mut outputs = BTreeMap::new();
        if let Some(m) = top.get("outputs").and_then(|v| self.mapping("outputs", v)) {
            for (k, v) in m {
                if !self.shallow(&join("outputs", k), v) {
                    continue;
                }
                if let Some(t) = self.template(&join("outputs", k), v) {
                    outputs.insert(k.clone(), t);
                }
            }
        }
        let schemas = top
            .get("schemas")
            .and_then(|v| self.mapping("schemas", v))
            .map(|m| self.schemas(m))
            .unwrap_or_default();
        let file = ProgramFile {
            path: path.to_owned(),
            name: name.clone().unwrap_or_default(),
            config,
            resources,
            outputs,
            schemas,
        };
        // Checked even without a valid name, so every issue is reported.
        self.cross_check(&file);
        name.map(|_| file)
    }

    /// The `schemas` section: per type token, a version, key renames and
    /// computed outputs.
    fn schemas(&mut self, m: &Map<String, Value>) -> BTreeMap<String, crate::provider::SchemaDef> {
        let mut out = BTreeMap::new();
        for (ty, v) in m {
            let key = join("schemas", ty);
            if let Err(e) = TypeToken::parse(ty) {
                self.issue(&key, e.to_string());
            }
            let Value::Object(def) = v else {
                self.wrong(&key, "a mapping", v);
                continue;
            };
            self.known_keys(&key, def, SCHEMA_KEYS);
            let mut schema = crate::provider::SchemaDef::default();
            match def.get("version") {
                Some(Value::Number(n)) if n.as_u64().is_some() => {
                    schema.version = n.as_u64().unwrap_or_default();
                }
                Some(other) => self.wrong(&join(&key, "version"), "a whole number >= 0", other),
                // Computed outputs alone need no version.
                None if def.contains_key("outputs") => {}
                None => self.issue(
                    join(&key, "version"),
                    "missing: the schema version is required",
                ),
            }
            if let Some(o) = def
                .get("outputs")
                .and_then(|v| self.mapping(&join(&key, "outputs"), v))
            {
                for (name, template) in o {
                    if let Some(t) = self.nonempty(&join(&join(&key, "outputs"), name), template) {
                        schema.outputs.insert(name.clone(), t);
                    }
                }
            }
            if let Some(r) = def
                .get("renames")
                .and_then(|v| self.mapping(&join(&key, "renames"), v))
            {
                for (old, new) in r {
                    if let Some(new) = self.nonempty(&join(&join(&key, "renames"), old), new) {
                        schema.renames.insert(old.clone(), new);
                    }
                }
            }
            out.insert(ty.clone(), schema);
        }
        out
    }

    /// False (with an issue) when `v` nests deeper than keel can store.
    fn shallow(&mut self, key: &str, v: &Value) -> bool {
        match crate::model::property::check_json_depth(key, v) {
            Ok(()) => true,
            Err(e) => {
                self.issue(key, e.to_string());
                false
            }
        }
    }

    /// A config value: no references; `fn::secret` allowed.
    fn literal(&mut self, key: &str, v: &Value) -> Option<PropertyValue> {
        Some(match v {
            Value::Null => PropertyValue::Null,
            Value::Bool(b) => PropertyValue::Bool(*b),
            Value::Number(n) => PropertyValue::Number(n.clone()),
            Value::String(s) => PropertyValue::String(s.clone()),
            Value::Array(items) => PropertyValue::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.literal(&format!("{key}[{i}]"), item))
                    .collect::<Option<_>>()?,
            ),
            Value::Object(m) => match self.function(key, m)? {
                Some(inner) => PropertyValue::Secret(Secret::plaintext(
                    self.literal(&join(key, FN_SECRET), inner)?,
                )),
                None => PropertyValue::Object(
                    m.iter()
                        .map(|(k, v)| Some((k.clone(), self.literal(&join(key, k), v)?)))
                        .collect::<Option<_>>()?,
                ),
            },
        })
    }

    /// `Some(Some(arg))` for `{"fn::secret": arg}`, `Some(None)` for a
    /// plain object, `None` (with an issue) for a malformed function.
    fn function<'v>(&mut self, key: &str, m: &'v Map<String, Value>) -> Option<Option<&'v Value>> {
        let fns: Vec<&String> = m.keys().filter(|k| k.starts_with("fn::")).collect();
        match fns.as_slice() {
            [] => Some(None),
            [f] if f.as_str() == FN_SECRET && m.len() == 1 => Some(m.get(FN_SECRET)),
            [f] if f.as_str() == FN_SECRET => {
                self.issue(
                    key,
                    "`fn::secret` must be the only key of its mapping: `{\"fn::secret\": value}`",
                );
                None
            }
            _ => {
                for f in fns.iter().filter(|f| f.as_str() != FN_SECRET) {
                    self.issue(
                        join(key, f),
                        format!("unknown function `{f}` (the only function is `fn::secret`)"),
                    );
                }
                None
            }
        }
    }

    /// A property value with references.
    fn template(&mut self, key: &str, v: &Value) -> Option<Template> {
        Some(match v {
            Value::String(s) => match parse_string(s) {
                Ok(parts)
                    if parts
                        .iter()
                        .all(|p| matches!(p, super::template::Part::Text(_))) =>
                {
                    Template::Literal(PropertyValue::String(
                        parts
                            .into_iter()
                            .map(|p| match p {
                                super::template::Part::Text(t) => t,
                                super::template::Part::Ref(_) => String::new(),
                            })
                            .collect(),
                    ))
                }
                Ok(parts) => Template::Interpolated(parts),
                Err(e) => {
                    self.issue(key, e.to_string());
                    return None;
                }
            },
            Value::Array(items) => Template::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.template(&format!("{key}[{i}]"), item))
                    .collect::<Option<_>>()?,
            ),
            Value::Object(m) => match self.function(key, m)? {
                Some(inner) => {
                    Template::Secret(Box::new(self.template(&join(key, FN_SECRET), inner)?))
                }
                None => {
                    let mut out = BTreeMap::new();
                    let mut ok = true;
                    for (k, v) in m {
                        match self.template(&join(key, k), v) {
                            Some(t) => {
                                out.insert(k.clone(), t);
                            }
                            None => ok = false,
                        }
                    }
                    if !ok {
                        return None;
                    }
                    Template::Object(out)
                }
            },
            Value::Null => Template::Literal(PropertyValue::Null),
            Value::Bool(b) => Template::Literal(PropertyValue::Bool(*b)),
            Value::Number(n) => Template::Literal(PropertyValue::Number(n.clone())),
        })
    }

    fn resource_spec(&mut self, name: &str, v: &Value) -> Option<ResourceSpec> {
        let Value::Object(m) = v else {
            self.wrong("(resource)", "a mapping with `type`", v);
            return None;
        };
        self.known_keys("", m, RESOURCE_KEYS);
        let given: Vec<&str> = ["type", "read", "action"]
            .into_iter()
            .filter(|k| m.contains_key(*k))
            .collect();
        let (ty, entry) = match given.as_slice() {
            ["type"] => (self.type_token("type", &m["type"]), EntryKind::Resource),
            ["read"] => {
                let id = m.get("id").and_then(|v| self.template("id", v));
                (self.type_token("read", &m["read"]), EntryKind::Read { id })
            }
            ["action"] => (self.type_token("action", &m["action"]), EntryKind::Action),
            [] => {
                self.issue(
                    "type",
                    "missing: every entry needs a type token (`type:`), or is a read (`read: TYPE`) or an action (`action: FUNCTION`)",
                );
                (None, EntryKind::Resource)
            }
            _ => {
                self.issue(
                    given[1],
                    format!("an entry has exactly one of `type`, `read` and `action`; this one has `{}`", given.join("`, `")),
                );
                (None, EntryKind::Resource)
            }
        };
        let component = match m.get("component") {
            Some(v) => self.boolean("component", v).unwrap_or(false),
            None => false,
        };
        if m.contains_key("id") && !matches!(entry, EntryKind::Read { .. }) {
            self.issue("id", "only a read (`read: TYPE`) takes an `id`");
        }
        if component && entry != EntryKind::Resource {
            self.issue("component", "a read or an action cannot be a component");
        }
        if let Some(t) = &ty {
            if t.is_stack() {
                self.issue(
                    "type",
                    format!("`{STACK_TYPE}` is the implicit stack resource; declare other types"),
                );
            }
            if t.is_provider() && (component || entry != EntryKind::Resource) {
                self.issue(
                    given.first().copied().unwrap_or("type"),
                    "a provider resource cannot be a component, a read or an action",
                );
            }
        }
        let mut properties = BTreeMap::new();
        if let Some(props) = m
            .get("properties")
            .and_then(|v| self.mapping("properties", v))
        {
            for (k, v) in props {
                if !self.shallow(&join("properties", k), v) {
                    continue;
                }
                if let Some(t) = self.template(&join("properties", k), v) {
                    properties.insert(k.clone(), t);
                }
            }
        }
        if matches!(entry, EntryKind::Read { id: None })
            && !m.contains_key("id")
            && properties.is_empty()
        {
            self.issue(
                "read",
                "a read needs the `id` to read, or `properties` to look it up by",
            );
        }
        let options = match m.get("options").and_then(|v| self.mapping("options", v)) {
            Some(o) => {
                if entry != EntryKind::Resource {
                    for k in o.keys().filter(|k| !READ_OPTION_KEYS.contains(&k.as_str())) {
                        self.issue(
                            join("options", k),
                            format!(
                                "not an option of a read or an action (they take: {})",
                                READ_OPTION_KEYS.join(", ")
                            ),
                        );
                    }
                }
                self.options(o)
            }
            None => OptionsSpec::default(),
        };
        let iterate = match (m.get("forEach"), m.get("count")) {
            (Some(_), Some(_)) => {
                self.issue("count", "an entry has `forEach` or `count`, not both");
                None
            }
            (Some(v), None) => self.iteration("forEach", v).map(Iteration::ForEach),
            (None, Some(v)) => self.iteration("count", v).map(Iteration::Count),
            (None, None) => None,
        };
        Some(ResourceSpec {
            name: name.to_owned(),
            ty: ty?,
            component,
            properties,
            options,
            entry,
            iterate,
        })
    }

    /// `forEach` or `count`: a template; a literal one is checked now
    /// ([`expansion_keys`]).
    fn iteration(&mut self, key: &str, v: &Value) -> Option<Template> {
        let t = self.template(key, v)?;
        if let Some(value) = t.constant() {
            let value = &value;
            let result = if key == "count" {
                expansion_keys(None, Some(value))
            } else {
                expansion_keys(Some(value), None)
            };
            if let Err(e) = result {
                self.issue(key, e);
                return None;
            }
        }
        Some(t)
    }

    fn options(&mut self, m: &Map<String, Value>) -> OptionsSpec {
        self.known_keys("options", m, OPTION_KEYS);
        let mut o = OptionsSpec::default();
        for (k, v) in m {
            let key = join("options", k);
            match k.as_str() {
                "parent" => o.parent = self.resource_name(&key, v),
                "protect" => o.protect = self.boolean(&key, v).unwrap_or(false),
                "dependsOn" => match v {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            if let Some(n) = self.resource_name(&format!("{key}[{i}]"), item) {
                                o.depends_on.push(n);
                            }
                        }
                    }
                    other => self.wrong(&key, "a list of resource names", other),
                },
                "aliases" => match v {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            if let Some(a) = self.alias(&format!("{key}[{i}]"), item) {
                                o.aliases.push(a);
                            }
                        }
                    }
                    other => self.wrong(&key, "a list of aliases", other),
                },
                "deleteBeforeReplace" => o.delete_before_replace = self.boolean(&key, v),
                "retainOnDelete" => o.retain_on_delete = self.boolean(&key, v).unwrap_or(false),
                "deletedWith" => o.deleted_with = self.resource_name(&key, v),
                "ignoreChanges" => o.ignore_changes = self.paths(&key, v),
                "replaceOnChanges" => o.replace_on_changes = self.paths(&key, v),
                "version" => {
                    o.version =
                        self.string(&key, v).filter(
                            |s| match crate::plan::providers::Version::parse(s) {
                                Ok(_) => true,
                                Err(e) => {
                                    self.issue(&key, e.to_string());
                                    false
                                }
                            },
                        );
                }
                "additionalSecretOutputs" => o.additional_secret_outputs = self.strings(&key, v),
                "customTimeouts" => o.custom_timeouts = self.timeouts(&key, v),
                "provider" => {
                    o.provider = match self.string(&key, v) {
                        Some(s) if s.starts_with("urn:") => match ProviderRef::parse(&s) {
                            Ok(r) => Some(ProviderSpec::Reference(r)),
                            Err(e) => {
                                self.issue(&key, e.to_string());
                                None
                            }
                        },
                        Some(_) => self.resource_name(&key, v).map(ProviderSpec::Resource),
                        None => None,
                    }
                }
                "stateMigrations" => o.state_migrations = self.migrations(&key, v),
                "stateMigrationTimeout" => o.state_migration_timeout = self.seconds(&key, v),
                "import" => o.import = self.nonempty(&key, v),
                _ => {}
            }
        }
        o
    }

    fn alias(&mut self, key: &str, v: &Value) -> Option<AliasEntry> {
        match v {
            Value::String(s) => match Urn::parse(s) {
                Ok(u) => Some(AliasEntry::Urn(u)),
                Err(e) => {
                    self.issue(key, format!("an alias string must be a URN: {e}"));
                    None
                }
            },
            Value::Object(m) => {
                self.known_keys(key, m, ALIAS_KEYS);
                let mut get = |k: &str| m.get(k).and_then(|v| self.string(&join(key, k), v));
                let name = get("name");
                let stack = get("stack");
                let project = get("project");
                let ty = m
                    .get("type")
                    .and_then(|v| self.type_token(&join(key, "type"), v));
                let no_parent = m
                    .get("noParent")
                    .and_then(|v| self.boolean(&join(key, "noParent"), v))
                    .unwrap_or(false);
                let parent = match (m.get("parent"), no_parent) {
                    (Some(_), true) => {
                        self.issue(key, "an alias has either `parent` or `noParent`, not both");
                        None
                    }
                    (None, true) => Some(AliasParentSpec::NoParent),
                    (None, false) => None,
                    (Some(p), false) => {
                        let pk = join(key, "parent");
                        match self.string(&pk, p) {
                            Some(s) if s.starts_with("urn:") => match Urn::parse(&s) {
                                Ok(u) => Some(AliasParentSpec::Urn(u)),
                                Err(e) => {
                                    self.issue(pk, e.to_string());
                                    None
                                }
                            },
                            Some(_) => self.resource_name(&pk, p).map(AliasParentSpec::Resource),
                            None => None,
                        }
                    }
                };
                if name.is_none()
                    && ty.is_none()
                    && parent.is_none()
                    && stack.is_none()
                    && project.is_none()
                {
                    self.issue(
                        key,
                        "an alias object needs at least one of: name, type, parent, noParent, stack, project",
                    );
                    return None;
                }
                Some(AliasEntry::Spec {
                    name,
                    ty,
                    parent,
                    stack,
                    project,
                })
            }
            other => {
                self.wrong(key, "a URN string or an alias mapping", other);
                None
            }
        }
    }

    fn timeouts(&mut self, key: &str, v: &Value) -> Option<CustomTimeouts> {
        let m = self.mapping(key, v)?;
        self.known_keys(key, m, TIMEOUT_KEYS);
        let mut t = CustomTimeouts::default();
        for (k, v) in m {
            let k2 = join(key, k);
            let secs = match v {
                Value::Number(n) => n.as_f64().filter(|s| *s >= 0.0),
                Value::String(s) => humantime::parse_duration(s).ok().map(|d| d.as_secs_f64()),
                _ => None,
            };
            let Some(secs) = secs else {
                self.issue(
                    k2,
                    format!(
                        "expected a duration (seconds, or text like \"5m\"), found {}",
                        describe(v)
                    ),
                );
                continue;
            };
            match k.as_str() {
                "create" => t.create = Seconds(secs),
                "update" => t.update = Seconds(secs),
                "delete" => t.delete = Seconds(secs),
                _ => {}
            }
        }
        Some(t)
    }

    /// A positive duration: seconds, or text like `"2m"`.
    fn seconds(&mut self, key: &str, v: &Value) -> Option<std::time::Duration> {
        let d = match v {
            Value::Number(n) => n
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0 * 365.0)
                .map(std::time::Duration::from_secs_f64),
            Value::String(s) => humantime::parse_duration(s).ok().filter(|d| !d.is_zero()),
            _ => None,
        };
        if d.is_none() {
            self.issue(
                key,
                format!(
                    "expected a positive duration (seconds, or text like \"2m\"), found {}",
                    match v {
                        Value::Number(n) => n.to_string(),
                        Value::String(s) => format!("{s:?}"),
                        other => describe(other).to_owned(),
                    }
                ),
            );
        }
        d
    }

    fn migrations(&mut self, key: &str, v: &Value) -> Vec<StateMigration> {
        let Value::Array(items) = v else {
            self.wrong(key, "a list of migrations", v);
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let ik = format!("{key}[{i}]");
            let Value::Object(m) = item else {
                self.wrong(
                    &ik,
                    "a mapping with one of rename, retype, move, command",
                    item,
                );
                continue;
            };
            if m.len() != 1 {
                self.issue(
                    &ik,
                    "a migration has exactly one key: rename, retype, move or command",
                );
                continue;
            }
            let Some((kind, body)) = m.iter().next() else {
                continue;
            };
            let bk = join(&ik, kind);
            let pair = |c: &mut Self, body: &Value| -> Option<(String, String)> {
                let Some(m) = c.mapping(&bk, body) else {
                    c.issue(&bk, "needs `from` and `to`");
                    return None;
                };
                c.known_keys(&bk, m, &["from", "to"]);
                let from = m
                    .get("from")
                    .and_then(|v| c.nonempty(&join(&bk, "from"), v));
                let to = m.get("to").and_then(|v| c.nonempty(&join(&bk, "to"), v));
                if m.get("from").is_none() || m.get("to").is_none() {
                    c.issue(&bk, "needs `from` and `to`");
                }
                let (from, to) = (from?, to?);
                if from == to {
                    c.issue(&bk, format!("`from` and `to` are both `{from}`"));
                    return None;
                }
                Some((from, to))
            };
            let parsed = match kind.as_str() {
                "rename" => pair(self, body).and_then(|(from, to)| {
                    if let Some(problem) = name_problem(&to) {
                        self.issue(join(&bk, "to"), problem);
                        return None;
                    }
                    Some(StateMigration::Rename { from, to })
                }),
                "retype" => pair(self, body).and_then(|(from, to)| {
                    let parse = |c: &mut Self, k: &str, s: &str| match TypeToken::parse(s) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            c.issue(join(&bk, k), e.to_string());
                            None
                        }
                    };
                    let from = parse(self, "from", &from);
                    let to = parse(self, "to", &to);
                    Some(StateMigration::Retype {
                        from: from?,
                        to: to?,
                    })
                }),
                "move" => {
                    let Some(m) = self.mapping(&bk, body) else {
                        self.issue(&bk, "needs `resources` and `under`");
                        continue;
                    };
                    self.known_keys(&bk, m, &["resources", "under"]);
                    let rk = join(&bk, "resources");
                    let resources = m.get("resources").map(|v| {
                        let before = self.issues.len();
                        let names = self.strings(&rk, v);
                        (names, self.issues.len() == before)
                    });
                    let under = m
                        .get("under")
                        .and_then(|v| self.nonempty(&join(&bk, "under"), v));
                    if m.get("resources").is_none() || m.get("under").is_none() {
                        self.issue(&bk, "needs `resources` and `under`");
                    }
                    match (resources, under) {
                        (Some((resources, true)), Some(under)) => {
                            if resources.is_empty() {
                                self.issue(&rk, "needs at least one resource name");
                                None
                            } else if let Some(i) = resources.iter().position(String::is_empty) {
                                self.issue(
                                    format!("{rk}[{i}]"),
                                    "a resource name must not be empty",
                                );
                                None
                            } else if resources.contains(&under) {
                                self.issue(&rk, format!("`{under}` cannot move under itself"));
                                None
                            } else {
                                Some(StateMigration::Move { resources, under })
                            }
                        }
                        _ => None,
                    }
                }
                "command" => {
                    let before = self.issues.len();
                    let argv = self.strings(&bk, body);
                    if self.issues.len() != before {
                        None
                    } else if argv.first().is_none_or(String::is_empty) {
                        self.issue(
                            &bk,
                            "needs a non-empty argv list: the program, then its arguments",
                        );
                        None
                    } else {
                        Some(StateMigration::Command(argv))
                    }
                }
                other => {
                    self.issue(
                        &bk,
                        format!("unknown migration `{other}` (expected rename, retype, move or command)"),
                    );
                    None
                }
            };
            out.extend(parsed);
        }
        out
    }

    /// Checks that need the whole file: references, option targets and
    /// cycles.
    fn cross_check(&mut self, file: &ProgramFile) {
        let check_refs = |c: &mut Self, key: &str, t: &Template, from: Option<&ResourceSpec>| {
            for r in t.references() {
                match r {
                    Reference::Config(k)
                        if !file.config.contains_key(k)
                            && !c.stack_config.contains(k)
                            && !c.stack_config.contains(&format!("{}:{k}", file.name)) =>
                    {
                        c.issue(
                            key,
                            format!("`{r}` refers to config key `{k}`, which neither `config` nor the stack's config file defines"),
                        )
                    }
                    Reference::Config(_) => {}
                    Reference::Each(_) => {
                        if !from.is_some_and(|f| file.expands(&f.name)) {
                            c.issue(
                                key,
                                format!("`{r}` is only for an entry with `forEach` or `count` (or declared inside one)"),
                            );
                        }
                    }
                    Reference::Resource { name, key: k, field } => match file.resources.get(name) {
                        None => c.issue(key, format!("`{r}` refers to unknown resource `{name}`")),
                        Some(target) if target.component && *field == Field::Id => c.issue(
                            key,
                            format!("`{r}`: `{name}` is a component, which has no ID (use `${{{name}.urn}}`)"),
                        ),
                        Some(target) => {
                            if let Some(outer) = file.iterated_ancestor(name) {
                                c.issue(
                                    key,
                                    format!("`{r}`: `{name}` is declared inside the iterated `{outer}`, whose expansions each have their own; references to it are not supported yet"),
                                );
                            } else {
                                c.expansion_reference(key, r, target, k.as_ref());
                            }
                        }
                    },
                }
            }
        };
        for (name, r) in &file.resources {
            self.resource = Some(name.clone());
            for (k, t) in r.templates() {
                check_refs(self, &k, t, Some(r));
            }
            self.iteration_links(file, r);
            for (dep, key) in r.dependencies() {
                if key.starts_with("properties.") {
                    continue;
                }
                match file.resources.get(dep) {
                    None => self.issue(&key, format!("unknown resource `{dep}`")),
                    Some(target) if key == "options.provider" && !target.ty.is_provider() => self
                        .issue(
                            &key,
                            format!("`{dep}` is a `{}`, not a provider resource (`pulumi:providers:<package>`)", target.ty),
                        ),
                    Some(target)
                        if key == "options.provider"
                            && target.ty.provider_package() != Some(r.ty.package()) =>
                    {
                        self.issue(
                            &key,
                            format!(
                                "provider `{dep}` serves package `{}`, not `{}`",
                                target.ty.provider_package().unwrap_or(""),
                                r.ty.package()
                            ),
                        )
                    }
                    Some(_) => {}
                }
            }
            if r.options.import.is_some() && (r.component || r.ty.is_provider()) {
                self.issue(
                    "options.import",
                    "only custom resources (not components or providers) can be imported",
                );
            }
            if r.options.provider.is_some() && (r.component || r.ty.is_provider()) {
                self.issue(
                    "options.provider",
                    "only custom resources (not components or providers) take a provider",
                );
            }
            if r.options.version.is_some()
                && (r.component || r.ty.is_provider() || r.options.provider.is_some())
            {
                self.issue(
                    "options.version",
                    "only custom resources using their package's default provider take a version",
                );
            }
            if r.options.state_migration_timeout.is_some() && r.options.state_migrations.is_empty()
            {
                self.issue(
                    "options.stateMigrationTimeout",
                    "has no effect without `options.stateMigrations`",
                );
            }
            self.resource = None;
        }
        for (k, t) in &file.outputs {
            check_refs(self, &join("outputs", k), t, None);
        }
        self.cycles(file);
    }

    /// A reference to `target`, with or without an expansion key: it has
    /// one exactly when `target` is iterated, and a literal `forEach` or
    /// `count` must have that key.
    fn expansion_reference(
        &mut self,
        key: &str,
        r: &Reference,
        target: &ResourceSpec,
        k: Option<&Key>,
    ) {
        let name = &target.name;
        match (&target.iterate, k) {
            (None, None) => {}
            (None, Some(_)) => self.issue(
                key,
                format!("`{r}`: `{name}` has no `forEach` or `count`; refer to it as `${{{name}.<field>}}`"),
            ),
            (Some(_), None) => self.issue(
                key,
                format!("`{r}`: `{name}` has `forEach` or `count`; name one expansion, as `${{{name}[\"key\"].<field>}}` or `${{{name}[0].<field>}}`"),
            ),
            (Some(it), Some(k)) => {
                let literal = match it {
                    Iteration::ForEach(t) => t.constant().map(|v| expansion_keys(Some(&v), None)),
                    Iteration::Count(t) => t.constant().map(|v| expansion_keys(None, Some(&v))),
                };
                if let Some(Ok(keys)) = literal {
                    if !keys.iter().any(|(have, _)| have == k) {
                        let list: Vec<String> = keys.iter().map(|(k, _)| k.to_string()).collect();
                        self.issue(
                            key,
                            format!("`{r}`: `{name}` has no expansion {k} (it has: {})", if list.is_empty() { "none".to_owned() } else { list.join(", ") }),
                        );
                    }
                }
            }
        }
    }

    /// Options that name an iterated entry, or one declared inside one:
    /// `parent` expands the child per parent expansion and `dependsOn`
    /// waits for every expansion; the rest need one resource.
    fn iteration_links(&mut self, file: &ProgramFile, r: &ResourceSpec) {
        let o = &r.options;
        let single = [
            ("options.deletedWith", o.deleted_with.as_deref()),
            (
                "options.provider",
                match &o.provider {
                    Some(ProviderSpec::Resource(p)) => Some(p.as_str()),
                    _ => None,
                },
            ),
        ];
        for (key, target) in single {
            let Some(t) = target else { continue };
            if file.expands(t) {
                self.issue(
                    key,
                    format!("`{t}` has `forEach` or `count` (or is declared inside an entry that has): name one resource here"),
                );
            }
        }
        if let Some(p) = o.parent.as_deref().and_then(|p| file.resources.get(p)) {
            if p.entry != EntryKind::Resource {
                self.issue(
                    "options.parent",
                    format!(
                        "`{}` is a read or an action, which cannot be a parent",
                        p.name
                    ),
                );
            }
        }
        if r.iterate.is_some() && !r.options.state_migrations.is_empty() {
            self.issue(
                "options.stateMigrations",
                "an entry with `forEach` or `count` cannot declare state migrations yet: declare them on a component it is inside",
            );
        }
    }

    /// Reports each reference cycle once, with its path.
    fn cycles(&mut self, file: &ProgramFile) {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Active,
            Done,
        }
        let mut mark: HashMap<&str, Mark> = file
            .resources
            .keys()
            .map(|k| (k.as_str(), Mark::New))
            .collect();
        let edges: HashMap<&str, Vec<(&str, String)>> = file
            .resources
            .iter()
            .map(|(k, r)| {
                let mut deps = r.dependencies();
                deps.retain(|(d, _)| file.resources.contains_key(*d));
                (k.as_str(), deps)
            })
            .collect();
        for start in file.resources.keys() {
            if mark[start.as_str()] != Mark::New {
                continue;
            }
            // Iterative DFS: (node, next edge index); `path` mirrors the stack.
            let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
            mark.insert(start, Mark::Active);
            while let Some((node, i)) = stack.last().copied() {
                let out = &edges[node];
                if i >= out.len() {
                    mark.insert(node, Mark::Done);
                    stack.pop();
                    continue;
                }
                if let Some(top) = stack.last_mut() {
                    top.1 += 1;
                }
                let (next, key) = &out[i];
                match mark[next] {
                    Mark::New => {
                        mark.insert(next, Mark::Active);
                        stack.push((next, 0));
                    }
                    Mark::Active => {
                        let from = stack.iter().position(|(n, _)| n == next).unwrap_or(0);
                        let mut names: Vec<&str> = stack[from..].iter().map(|(n, _)| *n).collect();
                        names.push(next);
                        self.issues.push(Issue {
                            resource: Some(node.to_owned()),
                            key: key.clone(),
                            message: format!("reference cycle: {}", names.join(" -> ")),
                        });
                    }
                    Mark::Done => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_keys_of_maps_keyed_lists_and_counts() {
        let v = |j: serde_json::Value| -> PropertyValue { serde_json::from_value(j).unwrap() };
        let keys = |r: Result<Vec<(Key, PropertyValue)>, String>| -> Vec<String> {
            r.unwrap().into_iter().map(|(k, _)| k.to_string()).collect()
        };
        let map = v(serde_json::json!({"b": 1, "a": 2}));
        assert_eq!(
            keys(expansion_keys(Some(&map), None)),
            [r#"["a"]"#, r#"["b"]"#]
        );
        let list = v(serde_json::json!(["y", "x"]));
        assert_eq!(
            keys(expansion_keys(Some(&list), None)),
            [r#"["y"]"#, r#"["x"]"#]
        );
        let objects = v(serde_json::json!([{"key": "k1", "n": 1}, {"key": "k2"}]));
        let found = expansion_keys(Some(&objects), None).unwrap();
        assert_eq!(found[0].0, Key::Name("k1".into()));
        assert_eq!(found[0].1, v(serde_json::json!({"key": "k1", "n": 1})));
        assert_eq!(
            keys(expansion_keys(None, Some(&v(serde_json::json!(2))))),
            ["[0]", "[1]"]
        );
        for (for_each, count) in [
            (Some(serde_json::json!(["a", "a"])), None),
            (Some(serde_json::json!([1])), None),
            (Some(serde_json::json!([{"n": 1}])), None),
            (Some(serde_json::json!("text")), None),
            (Some(serde_json::json!(["a/b"])), None),
            (None, Some(serde_json::json!(-1))),
            (None, Some(serde_json::json!(1.5))),
            (None, Some(serde_json::json!(10_001))),
        ] {
            let (f, c) = (for_each.map(v), count.map(v));
            assert!(
                expansion_keys(f.as_ref(), c.as_ref()).is_err(),
                "{f:?} {c:?}"
            );
        }
    }

    fn parse(text: &str) -> Result<ProgramFile, ProgramFileError> {
        ProgramFile::parse(Path::new("p.yaml"), text.as_bytes())
    }

    fn issues(text: &str) -> Vec<String> {
        match parse(text) {
            Err(ProgramFileError::Invalid { issues, .. }) => {
                issues.iter().map(ToString::to_string).collect()
            }
            other => panic!("expected issues, got {other:?}"),
        }
    }

    const SPEC_EXAMPLE: &str = r#"
name: shop
config: { env: prod }
resources:
  site:
    type: shop:web:Site
    component: true
  bucket:
    type: aws:s3/bucket:Bucket
    properties:
      name: shop-${config.env}
      website: { index: index.html }
      password: { "fn::secret": hunter2 }
    options:
      parent: site
      protect: true
      dependsOn: [logs]
      aliases: [ { name: old-bucket }, "urn:pulumi:dev::shop::aws:s3/bucket:Bucket::b" ]
      deleteBeforeReplace: false
      retainOnDelete: false
      deletedWith: site
      ignoreChanges: [tags]
      replaceOnChanges: [name]
      customTimeouts: { create: 5m, delete: 30 }
      additionalSecretOutputs: [arn]
  logs: { type: aws:s3/bucket:Bucket, properties: { name: logs } }
  cdn:
    type: aws:cloudfront:Distribution
    properties: { origin: "${bucket.websiteEndpoint}" }
outputs:
  url: ${cdn.domainName}
"#;

    #[test]
    fn parses_the_spec_example() {
        let f = parse(SPEC_EXAMPLE).unwrap();
        assert_eq!(f.name, "shop");
        let b = &f.resources["bucket"];
        assert_eq!(b.options.parent.as_deref(), Some("site"));
        assert_eq!(b.options.aliases.len(), 2);
        assert_eq!(b.options.custom_timeouts.as_ref().unwrap().create.0, 300.0);
        assert!(matches!(b.properties["password"], Template::Secret(_)));
        assert!(f.resources["site"].component);
        let order = f.order();
        let pos = |n: &str| order.iter().position(|x| *x == n).unwrap();
        assert!(pos("site") < pos("bucket"));
        assert!(pos("logs") < pos("bucket"));
        assert!(pos("bucket") < pos("cdn"));
        let urns = f.expected_urns("dev");
        assert!(urns.contains("urn:pulumi:dev::shop::shop:web:Site$aws:s3/bucket:Bucket::bucket"));
        assert!(urns.contains("urn:pulumi:dev::shop::pulumi:providers:aws::default"));
        assert!(urns.contains("urn:pulumi:dev::shop::pulumi:pulumi:Stack::shop-dev"));
        // Same structure as JSON.
        let v: Value = serde_norway::from_str(SPEC_EXAMPLE).unwrap();
        let json = serde_json::to_vec(&v).unwrap();
        let g = ProgramFile::parse(Path::new("p.json"), &json).unwrap();
        assert_eq!(g.resources, f.resources);
    }

    #[test]
    fn versions_and_property_paths_are_checked() {
        let f = parse(
            r#"
name: p
resources:
  a:
    type: aws:s3/bucket:Bucket
    options:
      version: 6.0.0-beta.1
      ignoreChanges: ['tags["Name"]', "ports[*]"]
      replaceOnChanges: ["*"]
"#,
        )
        .unwrap();
        assert_eq!(
            f.resources["a"].options.version.as_deref(),
            Some("6.0.0-beta.1")
        );
        assert!(f
            .expected_urns("dev")
            .contains("urn:pulumi:dev::p::pulumi:providers:aws::default_6_0_0_beta_1"));
        let found = issues(
            r#"
name: p
resources:
  a:
    type: aws:s3/bucket:Bucket
    options: { version: v6, ignoreChanges: [ok, "a..b"], replaceOnChanges: ["x[-1]"] }
  c: { type: my:c:C, component: true, options: { version: 1.0.0 } }
"#,
        );
        let want = [
            "resource `a`, key `options.version`: `v6` is not a semantic version",
            "resource `a`, key `options.ignoreChanges[1]`: `a..b` is not a property path",
            "resource `a`, key `options.replaceOnChanges[0]`: `x[-1]` is not a property path",
            "resource `c`, key `options.version`: only custom resources using their package's default provider take a version",
        ];
        for w in want {
            assert!(found.iter().any(|f| f.contains(w)), "{w}: {found:#?}");
        }
    }

    #[test]
    fn reports_every_issue_with_resource_and_key() {
        let found = issues(
            r#"
name: p
colour: red
resources:
  a:
    type: not-a-type
    options: { protect: "yes", bogus: 1 }
  b:
    type: x:y:Z
    properties: { v: "${nope.id}", w: "${config.missing}", u: "${c.id}" }
  c: { type: x:y:C, component: true }
"#,
        );
        let want = [
            "key `colour`: unknown key",
            "resource `a`, key `type`: `not-a-type` is not a type token",
            "resource `a`, key `options.protect`: expected true or false, found a string",
            "resource `a`, key `options.bogus`: unknown key",
            "resource `b`, key `properties.v`: `${nope.id}` refers to unknown resource `nope`",
            "resource `b`, key `properties.w`: `${config.missing}` refers to config key `missing`",
            "resource `b`, key `properties.u`: `${c.id}`: `c` is a component",
        ];
        assert_issues(&found, &want);
    }

    #[test]
    fn reports_cycles() {
        let found = issues(
            r#"
name: p
resources:
  a: { type: x:y:Z, properties: { v: "${b.out}" } }
  b: { type: x:y:Z, options: { dependsOn: [c] } }
  c: { type: x:y:Z, options: { parent: a } }
  d: { type: x:y:Z, options: { parent: d } }
"#,
        );
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found
            .iter()
            .any(|f| f.contains("reference cycle: a -> b -> c -> a")));
        assert!(found
            .iter()
            .any(|f| f.contains("resource `d`, key `options.parent`: reference cycle: d -> d")));
    }

    #[test]
    fn parses_state_migrations() {
        let f = parse(
            r#"
name: p
resources:
  site:
    type: x:y:Site
    component: true
    options:
      stateMigrationTimeout: 2m
      stateMigrations:
        - rename: { from: a, to: b }
        - retype: { from: "x:y:A", to: "x:y:B" }
        - move: { resources: [a, c], under: b }
        - command: ["python3", "m.py"]
"#,
        )
        .unwrap();
        let o = &f.resources["site"].options;
        assert!(f.has_state_migrations());
        assert_eq!(
            o.state_migration_timeout,
            Some(std::time::Duration::from_secs(120))
        );
        assert_eq!(
            o.state_migrations,
            vec![
                StateMigration::Rename {
                    from: "a".into(),
                    to: "b".into()
                },
                StateMigration::Retype {
                    from: TypeToken::parse("x:y:A").unwrap(),
                    to: TypeToken::parse("x:y:B").unwrap()
                },
                StateMigration::Move {
                    resources: vec!["a".into(), "c".into()],
                    under: "b".into()
                },
                StateMigration::Command(vec!["python3".into(), "m.py".into()]),
            ]
        );
    }

    #[test]
    fn rejects_malformed_state_migrations() {
        let found = issues(
            r#"
name: p
resources:
  s:
    type: x:y:S
    options:
      stateMigrationTimeout: -1
      stateMigrations:
        - { rename: { from: a } }
        - { frob: 1 }
        - { rename: { from: a, to: a } }
        - { rename: { from: a, to: "b c" } }
        - { retype: { from: "x:y:A", to: nope } }
        - { move: { resources: [], under: t } }
        - { move: { resources: [t], under: t } }
        - { move: { resources: [1], under: t } }
        - { move: { under: t } }
        - { command: [] }
        - { command: "python3 m.py" }
        - { command: [python3, 3] }
        - { rename: { from: a, to: b }, move: { resources: [a], under: b } }
        - rename
  t:
    type: x:y:T
    options: { stateMigrationTimeout: 5 }
"#,
        );
        let want = [
            "resource `s`, key `options.stateMigrationTimeout`: expected a positive duration",
            "resource `s`, key `options.stateMigrations[0].rename`: needs `from` and `to`",
            "resource `s`, key `options.stateMigrations[1].frob`: unknown migration `frob`",
            "resource `s`, key `options.stateMigrations[2].rename`: `from` and `to` are both `a`",
            "resource `s`, key `options.stateMigrations[3].rename.to`: a resource name must not contain whitespace",
            "resource `s`, key `options.stateMigrations[4].retype.to`: `nope` is not a type token",
            "resource `s`, key `options.stateMigrations[5].move.resources`: needs at least one resource name",
            "resource `s`, key `options.stateMigrations[6].move.resources`: `t` cannot move under itself",
            "resource `s`, key `options.stateMigrations[7].move.resources[0]`: expected a string, found a number",
            "resource `s`, key `options.stateMigrations[8].move`: needs `resources` and `under`",
            "resource `s`, key `options.stateMigrations[9].command`: needs a non-empty argv list",
            "resource `s`, key `options.stateMigrations[10].command`: expected a list of strings, found a string",
            "resource `s`, key `options.stateMigrations[11].command[1]`: expected a string, found a number",
            "resource `s`, key `options.stateMigrations[12]`: a migration has exactly one key",
            "resource `s`, key `options.stateMigrations[13]`: expected a mapping with one of rename, retype, move, command, found a string",
            "resource `t`, key `options.stateMigrationTimeout`: has no effect without `options.stateMigrations`",
        ];
        assert_issues(&found, &want);
    }

    /// Every expected message is found (by prefix), and nothing else.
    fn assert_issues(found: &[String], want: &[&str]) {
        for w in want {
            assert!(
                found.iter().any(|f| f.starts_with(w)),
                "{w} not in {found:#?}"
            );
        }
        assert_eq!(found.len(), want.len(), "{found:#?}");
    }

    #[test]
    fn syntax_errors_name_the_file() {
        let e = parse("name: [unclosed").unwrap_err();
        assert!(e.to_string().starts_with("p.yaml: invalid YAML"), "{e}");
        let e = ProgramFile::parse(Path::new("p.json"), b"{").unwrap_err();
        assert!(e.to_string().starts_with("p.json: invalid JSON"), "{e}");
    }
}
