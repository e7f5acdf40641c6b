//! The Pulumi YAML template (`pulumi-yaml.md` §2, §3, §6): top-level
//! keys, config declarations, variables, resources with their options,
//! `get`, outputs, and keel's extensions (`schemas:`, `stateMigrations`,
//! `stateMigrationTimeout`, `component: true`). Record keys match without
//! regard to case (a different casing warns); unknown keys inside records
//! are errors, as are options keel cannot honour yet.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::expr::{Access, Expr, Parser, Seg};
use super::Layout;
use crate::cli::program::StateMigration;
use crate::model::PropertyValue;

/// A config type (`pulumi-yaml.md` §6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConfigType {
    /// `string`.
    String,
    /// `int` / `integer`.
    Int,
    /// `number`.
    Number,
    /// `bool` / `boolean`.
    Bool,
    /// `object`.
    Object,
    /// `list<T>`.
    List(Box<ConfigType>),
}

impl ConfigType {
    fn parse(s: &str) -> Option<Self> {
        let l = s.trim().to_ascii_lowercase();
        Some(match l.as_str() {
            "string" => Self::String,
            "int" | "integer" => Self::Int,
            "number" => Self::Number,
            "bool" | "boolean" => Self::Bool,
            "object" => Self::Object,
            _ => {
                let inner = l.strip_prefix("list<")?.strip_suffix('>')?;
                Self::List(Box::new(Self::parse(inner)?))
            }
        })
    }

    /// The type of a literal value, if it has one.
    pub(crate) fn of(v: &PropertyValue) -> Option<Self> {
        Some(match v {
            PropertyValue::String(_) => Self::String,
            PropertyValue::Bool(_) => Self::Bool,
            PropertyValue::Number(n) if n.is_i64() || n.is_u64() => Self::Int,
            PropertyValue::Number(_) => Self::Number,
            PropertyValue::Object(_) => Self::Object,
            PropertyValue::Array(a) => Self::List(Box::new(
                a.first().and_then(Self::of).unwrap_or(Self::String),
            )),
            PropertyValue::Secret(crate::model::property::Secret::Plaintext(p)) => {
                Self::of(p.value())?
            }
            _ => return None,
        })
    }
}

/// A declared config type: Pulumi YAML's (`string`, `int`, `number`,
/// `bool`, `object`, `list<T>`) or a project config schema's (`integer`,
/// `boolean`, `array` with `items: {type: ...}`, nested as deep as needed).
fn config_type(name: &str, items: Option<&Value>) -> Result<ConfigType, String> {
    if name.trim().eq_ignore_ascii_case("array") {
        let Some(Value::Object(items)) = items else {
            return Err(
                "an `array` config type needs `items: {type: ...}` naming the type of its elements"
                    .into(),
            );
        };
        let Some(Value::String(inner)) = items.get("type") else {
            return Err("`items` of an `array` config type needs a `type`".into());
        };
        return Ok(ConfigType::List(Box::new(config_type(
            inner,
            items.get("items"),
        )?)));
    }
    ConfigType::parse(name).ok_or_else(|| {
        format!("unknown config type `{name}`: use string, int (integer), number, bool (boolean), object, list<T> or array (with items)")
    })
}

impl std::fmt::Display for ConfigType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::String => f.write_str("string"),
            Self::Int => f.write_str("int"),
            Self::Number => f.write_str("number"),
            Self::Bool => f.write_str("bool"),
            Self::Object => f.write_str("object"),
            Self::List(t) => write!(f, "list<{t}>"),
        }
    }
}

/// A config declaration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConfigDecl {
    /// The name references use (the map key).
    pub(crate) key: String,
    /// The config key read (`name:`, default the map key).
    pub(crate) name: String,
    /// The declared type.
    pub(crate) ty: Option<ConfigType>,
    /// The default.
    pub(crate) default: Option<Expr>,
    /// `secret:`.
    pub(crate) secret: Option<bool>,
    /// Where it is declared.
    pub(crate) path: Vec<Seg>,
    /// Its line, once located.
    pub(crate) line: Option<usize>,
}

/// An alias.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AliasDecl {
    /// An expression giving a URN.
    Urn(Expr),
    /// `{name, type, parent, noParent, stack, project}`.
    Spec {
        /// `name`.
        name: Option<Expr>,
        /// `type`.
        ty: Option<Expr>,
        /// `parent` (a resource or URN).
        parent: Option<Expr>,
        /// `noParent`.
        no_parent: bool,
        /// `stack`.
        stack: Option<Expr>,
        /// `project`.
        project: Option<Expr>,
    },
}

/// A resource's options.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct OptionsDecl {
    /// `additionalSecretOutputs`.
    pub(crate) additional_secret_outputs: Vec<String>,
    /// `aliases`.
    pub(crate) aliases: Vec<AliasDecl>,
    /// `customTimeouts`: create, update, delete.
    pub(crate) custom_timeouts: Option<[Option<Expr>; 3]>,
    /// `deleteBeforeReplace`.
    pub(crate) delete_before_replace: Option<bool>,
    /// `dependsOn`.
    pub(crate) depends_on: Option<Expr>,
    /// `deletedWith`.
    pub(crate) deleted_with: Option<Expr>,
    /// `ignoreChanges`.
    pub(crate) ignore_changes: Vec<String>,
    /// `import`.
    pub(crate) import: Option<String>,
    /// `parent`.
    pub(crate) parent: Option<Expr>,
    /// `pluginDownloadURL`.
    pub(crate) plugin_download_url: Option<String>,
    /// `protect`.
    pub(crate) protect: Option<Expr>,
    /// `provider`.
    pub(crate) provider: Option<Expr>,
    /// `providers`.
    pub(crate) providers: Option<Expr>,
    /// `replaceOnChanges`.
    pub(crate) replace_on_changes: Vec<String>,
    /// `replaceWith`: resources whose replacement replaces this one.
    pub(crate) replace_with: Option<Expr>,
    /// `replacementTrigger`: a value whose change replaces this resource.
    pub(crate) replacement_trigger: Option<Expr>,
    /// `hideDiffs`: property paths whose changes are not displayed.
    pub(crate) hide_diffs: Vec<String>,
    /// `envVarMappings` (a provider resource's): `NEW -> OLD`.
    pub(crate) env_var_mappings: std::collections::BTreeMap<String, String>,
    /// `retainOnDelete`.
    pub(crate) retain_on_delete: Option<bool>,
    /// `version`.
    pub(crate) version: Option<String>,
    /// keel: `stateMigrations`.
    pub(crate) state_migrations: Vec<StateMigration>,
    /// keel: `stateMigrationTimeout`.
    pub(crate) state_migration_timeout: Option<std::time::Duration>,
}

/// A resource's properties.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Properties {
    /// A map of expressions (in file order).
    Map(Vec<(String, Expr)>),
    /// One expression giving an object.
    Expr(Expr),
}

/// `get: {id, state}`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GetDecl {
    /// The ID.
    pub(crate) id: Expr,
    /// The state that helps find it.
    pub(crate) state: Vec<(String, Expr)>,
}

/// A resource.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceDecl {
    /// The key (the reference name).
    pub(crate) key: String,
    /// The logical name (`name:`, default the key).
    pub(crate) name: String,
    /// The type token as registered (`pkg:Name` is `pkg:index:Name`).
    pub(crate) ty: String,
    /// `defaultProvider: true`.
    pub(crate) default_provider: bool,
    /// keel: `component: true`.
    pub(crate) component: bool,
    /// The properties.
    pub(crate) properties: Properties,
    /// The options.
    pub(crate) options: OptionsDecl,
    /// `get`.
    pub(crate) get: Option<GetDecl>,
    /// Where it is declared.
    pub(crate) path: Vec<Seg>,
}

impl ResourceDecl {
    /// The package of its type (`X` for `pulumi:providers:X`).
    pub(crate) fn package(&self) -> &str {
        package_of(&self.ty)
    }

    /// Whether it is a provider resource.
    pub(crate) fn is_provider(&self) -> bool {
        self.ty.starts_with("pulumi:providers:")
    }

    /// Every expression that gives the resource a dependency edge
    /// (`pulumi-yaml.md` §7), and those that do not.
    pub(crate) fn expressions(&self) -> (Vec<&Expr>, Vec<&Expr>) {
        let o = &self.options;
        let mut edge: Vec<&Expr> = Vec::new();
        match &self.properties {
            Properties::Map(m) => edge.extend(m.iter().map(|(_, e)| e)),
            Properties::Expr(e) => edge.push(e),
        }
        edge.extend(
            [&o.depends_on, &o.parent, &o.provider, &o.providers]
                .into_iter()
                .flatten(),
        );
        for a in &o.aliases {
            match a {
                AliasDecl::Urn(e) => edge.push(e),
                AliasDecl::Spec {
                    name,
                    ty,
                    parent,
                    stack,
                    project,
                    ..
                } => edge.extend([name, ty, parent, stack, project].into_iter().flatten()),
            }
        }
        let mut other: Vec<&Expr> = Vec::new();
        if let Some(g) = &self.get {
            edge.push(&g.id);
            other.extend(g.state.iter().map(|(_, e)| e));
        }
        other.extend(
            [
                &o.deleted_with,
                &o.protect,
                &o.replace_with,
                &o.replacement_trigger,
            ]
            .into_iter()
            .flatten(),
        );
        if let Some(t) = &o.custom_timeouts {
            other.extend(t.iter().flatten());
        }
        (edge, other)
    }
}

/// The package of a token (`X` for `pulumi:providers:X`).
pub(crate) fn package_of(token: &str) -> &str {
    token
        .strip_prefix("pulumi:providers:")
        .unwrap_or_else(|| token.split(':').next().unwrap_or(token))
}

/// Normalizes a type or function token that needs no schema: `pkg:Name`
/// is `pkg:index:Name`.
pub(crate) fn canonical_token(token: &str) -> Result<String, String> {
    let parts: Vec<&str> = token.split(':').collect();
    if parts.iter().any(|p| p.is_empty()) || !(2..=3).contains(&parts.len()) {
        return Err(format!(
            "invalid type token `{token}`: expected `pkg:Name` or `pkg:module:Name`"
        ));
    }
    Ok(if parts.len() == 2 {
        format!("{}:index:{}", parts[0], parts[1])
    } else {
        token.to_owned()
    })
}

/// A checked Pulumi YAML program.
#[derive(Debug, Clone)]
pub struct PyamlProgram {
    /// The template file.
    pub path: PathBuf,
    /// The program directory (`pulumi.cwd`; relative paths resolve here).
    pub dir: PathBuf,
    /// The `Pulumi.yaml` directory (`pulumi.rootDirectory`).
    pub root: PathBuf,
    /// The project name.
    pub name: String,
    /// keel's simulated-cloud schemas (`schemas:`).
    pub schemas: BTreeMap<String, crate::provider::SchemaDef>,
    /// The package declarations found under the program directory.
    pub packages: Vec<crate::provider::package::PackageDecl>,
    /// Warnings found while loading (each with file, line and key).
    pub warnings: Vec<String>,
    pub(crate) config: Vec<ConfigDecl>,
    pub(crate) variables: Vec<(String, Expr, Vec<Seg>)>,
    pub(crate) resources: Vec<ResourceDecl>,
    pub(crate) outputs: Vec<(String, Expr, Vec<Seg>)>,
    /// Config values once the stack's config is applied: by reference
    /// name (declared keys, the project's keys bare, others `ns:key`).
    pub(crate) values: BTreeMap<String, PropertyValue>,
    /// The stack config keys known at load (`ns:key`).
    pub(crate) stack_keys: BTreeSet<String>,
    /// The stack's config values once applied (`ns:key`).
    pub(crate) stack: BTreeMap<String, PropertyValue>,
    /// For a template a compiler made: what it was made from (the layout,
    /// the stack, and the `PULUMI_CONFIG` the compiler was given), so that
    /// the stack's resolved config can make it again when that differs.
    pub(crate) compiled: Option<Box<(super::Layout, String, String)>>,
}

const TOP: &[&str] = &[
    "name",
    "runtime",
    "description",
    "config",
    "configuration",
    "variables",
    "resources",
    "outputs",
    "pulumi",
    "schemas",
];
const RESOURCE: &[&str] = &[
    "type",
    "name",
    "defaultProvider",
    "properties",
    "options",
    "get",
    "condition",
    "metadata",
    "component",
];
const OPTIONS: &[&str] = &[
    "additionalSecretOutputs",
    "aliases",
    "customTimeouts",
    "deleteBeforeReplace",
    "dependsOn",
    "deletedWith",
    "ignoreChanges",
    "import",
    "parent",
    "pluginDownloadURL",
    "protect",
    "provider",
    "providers",
    "replaceOnChanges",
    "replaceWith",
    "replacementTrigger",
    "hideDiffs",
    "envVarMappings",
    "retainOnDelete",
    "version",
    "stateMigrations",
    "stateMigrationTimeout",
];

fn key(path: &[Seg], k: &str) -> Vec<Seg> {
    let mut p = path.to_vec();
    p.push(Seg::Key(k.to_owned()));
    p
}

/// Turns a dotted key of [`crate::cli::program::Extensions`] into a path.
fn dotted(prefix: &[Seg], k: &str) -> Vec<Seg> {
    let mut p = prefix.to_vec();
    for part in k.split('.') {
        let (name, rest) = part.split_once('[').unwrap_or((part, ""));
        if !name.is_empty() {
            p.push(Seg::Key(name.to_owned()));
        }
        for idx in rest.split('[') {
            if let Ok(i) = idx.trim_end_matches(']').parse() {
                p.push(Seg::Index(i));
            }
        }
    }
    p
}

/// Builds a [`PyamlProgram`] from a decoded template.
#[derive(Debug)]
pub(crate) struct Loader {
    /// The problems.
    pub(crate) parser: Parser,
    layout: Layout,
    file: PathBuf,
}

impl Loader {
    /// A loader for `file` of `layout`.
    pub(crate) fn new(layout: &Layout, file: &Path) -> Self {
        Self {
            parser: Parser::default(),
            layout: layout.clone(),
            file: file.to_owned(),
        }
    }

    /// The record's entries, matched to `known` keys without regard to
    /// case: (canonical key, written key, value); unknown keys go to
    /// `unknown`.
    fn record<'v>(
        &mut self,
        path: &[Seg],
        m: &'v Map<String, Value>,
        known: &[&'static str],
        unknown: &mut dyn FnMut(&mut Self, &str, &'v Value),
    ) -> Vec<(&'static str, Vec<Seg>, &'v Value)> {
        let mut out = Vec::new();
        for (k, v) in m {
            let p = key(path, k);
            match known.iter().find(|n| n.eq_ignore_ascii_case(k)) {
                Some(n) => {
                    if *n != k {
                        self.parser
                            .warn(&p, format!("`{k}` looks like a miscapitalization of `{n}`"));
                    }
                    out.push((*n, p, v));
                }
                None => unknown(self, k, v),
            }
        }
        out
    }

    fn object<'v>(
        &mut self,
        path: &[Seg],
        v: &'v Value,
        what: &str,
    ) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            Value::Null => None,
            _ => {
                self.parser.error(path, format!("{what} must be an object"));
                None
            }
        }
    }

    fn literal_string(&mut self, path: &[Seg], v: &Value) -> Option<String> {
        let text = match v {
            Value::String(s) => super::expr::parse_interpolation(s).ok(),
            _ => None,
        };
        match text {
            Some(Expr::Text(t)) => Some(t),
            _ => {
                self.parser.error(path, "must be a string literal");
                None
            }
        }
    }

    fn literal_bool(&mut self, path: &[Seg], v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            _ => {
                self.parser
                    .error(path, "must be a boolean value (true or false)");
                None
            }
        }
    }

    fn literal_strings(&mut self, path: &[Seg], v: &Value) -> Vec<String> {
        match v {
            Value::Array(a) => a
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let mut p = path.to_vec();
                    p.push(Seg::Index(i));
                    self.literal_string(&p, s)
                })
                .collect(),
            _ => {
                self.parser.error(path, "must be a list of string literals");
                Vec::new()
            }
        }
    }

    /// The whole program, or `None` when the top level is unusable.
    pub(crate) fn program(
        &mut self,
        v: &Value,
        stack_keys: &BTreeSet<String>,
    ) -> Option<PyamlProgram> {
        let empty = Map::new();
        let top = match v {
            Value::Null => &empty,
            Value::Object(m) => m,
            _ => {
                self.parser
                    .error(&[], "the program must be a mapping of top-level keys");
                return None;
            }
        };
        let mut prog = PyamlProgram {
            path: self.file.clone(),
            dir: self.layout.dir.clone(),
            root: self.layout.root.clone(),
            name: self.layout.project.clone().unwrap_or_default(),
            schemas: BTreeMap::new(),
            packages: Vec::new(),
            warnings: Vec::new(),
            config: Vec::new(),
            variables: Vec::new(),
            resources: Vec::new(),
            outputs: Vec::new(),
            values: BTreeMap::new(),
            stack_keys: stack_keys.clone(),
            stack: BTreeMap::new(),
            compiled: None,
        };
        let entries = self.record(&[], top, TOP, &mut |this, k, _| match k {
            "components" => this.parser.error(
                &[Seg::Key(k.into())],
                "components are only supported in plugins, not in programs",
            ),
            "namespace" => this.parser.error(
                &[Seg::Key(k.into())],
                "namespace is only supported in component plugins",
            ),
            // Other top-level keys (`main`, `template`, ...) are the
            // project file's; Pulumi ignores them.
            _ => {}
        });
        let mut ext = crate::cli::program::Extensions::new();
        let mut configuration = Vec::new();
        let mut config = Vec::new();
        for (k, p, v) in entries {
            match k {
                "name" => {
                    if let Some(n) = self.literal_string(&p, v) {
                        if prog.name.is_empty() {
                            prog.name = n;
                        }
                    }
                }
                "configuration" => {
                    self.parser
                        .warn(&p, "`configuration` is deprecated: use `config`");
                    configuration = self.config(&p, v, false);
                }
                "config" => config = self.config(&p, v, true),
                "variables" => {
                    if let Some(m) = self.object(&p, v, "variables") {
                        for (name, e) in m {
                            let q = key(&p, name);
                            let e = self.parser.expr(&q, e);
                            prog.variables.push((name.clone(), e, q));
                        }
                    }
                }
                "resources" => {
                    if let Some(m) = self.object(&p, v, "resources") {
                        for (name, r) in m {
                            let q = key(&p, name);
                            if let Some(r) = self.resource(&q, name, r, &mut ext) {
                                prog.resources.push(r);
                            }
                        }
                    }
                }
                "outputs" => {
                    if let Some(m) = self.object(&p, v, "outputs") {
                        for (name, e) in m {
                            let q = key(&p, name);
                            let e = self.parser.expr(&q, e);
                            prog.outputs.push((name.clone(), e, q));
                        }
                    }
                }
                "pulumi" => {
                    if let Some(m) = self.object(&p, v, "pulumi") {
                        for (k, v) in m {
                            let q = key(&p, k);
                            if k == "requiredVersion" {
                                if !v.is_string() {
                                    self.parser.error(&q, "must be a string");
                                }
                            } else {
                                self.parser
                                    .warn(&q, format!("unknown key `{k}` is ignored"));
                            }
                        }
                    }
                }
                "schemas" => prog.schemas = ext.schemas(v),
                _ => {}
            }
        }
        for (k, m) in ext.take_problems() {
            self.parser.error(&dotted(&[], &k), m);
        }
        // `config` wins over `configuration` on duplicate keys.
        for c in configuration {
            if !config.iter().any(|d: &ConfigDecl| d.key == c.key) {
                config.push(c);
            }
        }
        prog.config = config;
        if prog.name.is_empty() {
            prog.name = super::super::config::project_name(&self.layout.root);
        }
        self.default_providers(&mut prog);
        super::check::check(&mut self.parser, &prog);
        Some(prog)
    }

    /// The declarations of `config` (`project`: Pulumi's project config,
    /// where a key may be untyped, its value taken as the stack sets it)
    /// or of the older `configuration` (a type or a default is required,
    /// as Pulumi YAML requires).
    fn config(&mut self, path: &[Seg], v: &Value, project: bool) -> Vec<ConfigDecl> {
        let Some(m) = self.object(path, v, "config") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in m {
            let p = key(path, k);
            let mut d = ConfigDecl {
                key: k.clone(),
                name: k.clone(),
                ty: None,
                default: None,
                secret: None,
                path: p.clone(),
                line: None,
            };
            let Value::Object(decl) = v else {
                // A bare value: Pulumi stores it and never reads it.
                self.parser.warn(
                    &p,
                    "a bare config value is not read; declare `{type, default}`",
                );
                continue;
            };
            let entries = self.record(
                &p,
                decl,
                &["type", "name", "secret", "default", "items"],
                &mut |this, k, _| {
                    this.parser.warn(
                        &key(&p, k),
                        format!("unknown key `{k}` of a config declaration is ignored"),
                    );
                },
            );
            let items = decl.get("items");
            for (k, q, v) in entries {
                match k {
                    "type" => {
                        if let Some(t) = self.literal_string(&q, v) {
                            match config_type(&t, items) {
                                Ok(t) => d.ty = Some(t),
                                Err(e) => self.parser.error(&q, e),
                            }
                        }
                    }
                    "name" => d.name = self.literal_string(&q, v).unwrap_or(d.name),
                    "secret" => d.secret = self.literal_bool(&q, v),
                    "default" => d.default = Some(self.parser.expr(&q, v)),
                    _ => {}
                }
            }
            if d.ty.is_none() && d.default.is_none() && !project {
                self.parser.error(
                    &p,
                    "unable to infer type: either `default` or `type` is required",
                );
            }
            out.push(d);
        }
        out
    }

    fn resource(
        &mut self,
        path: &[Seg],
        name: &str,
        v: &Value,
        ext: &mut crate::cli::program::Extensions,
    ) -> Option<ResourceDecl> {
        let Value::Object(m) = v else {
            self.parser
                .error(path, format!("resources.{name} must be an object"));
            return None;
        };
        let entries = self.record(path, m, RESOURCE, &mut |this, k, _| {
            this.parser.error(&key(path, k), format!("unknown resource key `{k}`: a resource has type, name, properties, options, get (and defaultProvider on a provider); resource options go under `options`"));
        });
        let mut r = ResourceDecl {
            key: name.to_owned(),
            name: name.to_owned(),
            ty: String::new(),
            default_provider: false,
            component: false,
            properties: Properties::Map(Vec::new()),
            options: OptionsDecl::default(),
            get: None,
            path: path.to_vec(),
        };
        let mut has_properties = None;
        let mut dp_path = None;
        for (k, p, v) in entries {
            match k {
                "type" => {
                    if let Some(t) = self.literal_string(&p, v) {
                        match canonical_token(&t) {
                            Ok(t) => r.ty = t,
                            Err(e) => self.parser.error(&p, e),
                        }
                    }
                }
                "name" => r.name = self.literal_string(&p, v).unwrap_or(r.name),
                "defaultProvider" => {
                    r.default_provider = self.literal_bool(&p, v).unwrap_or(false);
                    dp_path = Some(p);
                }
                "component" => r.component = self.literal_bool(&p, v).unwrap_or(false),
                "properties" => {
                    has_properties = Some(p.clone());
                    r.properties = match v {
                        Value::Object(m) if !super::expr::is_call(m) => Properties::Map(
                            m.iter()
                                .map(|(k, e)| (k.clone(), self.parser.expr(&key(&p, k), e)))
                                .collect(),
                        ),
                        Value::Null => Properties::Map(Vec::new()),
                        other => Properties::Expr(self.parser.expr(&p, other)),
                    };
                }
                "options" => {
                    if let Some(o) = self.object(&p, v, "options") {
                        r.options = self.options(&p, o, ext);
                    }
                }
                "get" => {
                    if let Some(g) = self.object(&p, v, "get") {
                        r.get = self.get(&p, g);
                    }
                }
                // Accepted and unused, as in Pulumi.
                _ => {}
            }
        }
        if r.ty.is_empty() {
            if !m.keys().any(|k| k.eq_ignore_ascii_case("type")) {
                self.parser.error(
                    path,
                    format!("required field `type` is missing on resource `{name}`"),
                );
            }
            return None;
        }
        if let (Some(p), Some(_)) = (&has_properties, &r.get) {
            self.parser.error(
                p,
                "a resource with `get` reads an existing resource and cannot have `properties`",
            );
        }
        if r.default_provider && !r.is_provider() {
            if let Some(p) = dp_path {
                self.parser
                    .error(&p, "cannot set defaultProvider on non-provider resource");
            }
        }
        if r.component && r.get.is_some() {
            self.parser
                .error(path, "a component cannot be read with `get`");
        }
        Some(r)
    }

    fn get(&mut self, path: &[Seg], m: &Map<String, Value>) -> Option<GetDecl> {
        let mut id = None;
        let mut state = Vec::new();
        let entries = self.record(path, m, &["id", "state"], &mut |this, k, _| {
            this.parser.warn(
                &key(path, k),
                format!("unknown key `{k}` of `get` is ignored"),
            );
        });
        for (k, p, v) in entries {
            match k {
                "id" => id = Some(self.parser.expr(&p, v)),
                _ => {
                    if let Some(s) = self.object(&p, v, "get.state") {
                        state = s
                            .iter()
                            .map(|(k, e)| (k.clone(), self.parser.expr(&key(&p, k), e)))
                            .collect();
                    }
                }
            }
        }
        match id {
            Some(id) => Some(GetDecl { id, state }),
            None => {
                self.parser.error(path, "`get` needs an `id`");
                None
            }
        }
    }

    fn options(
        &mut self,
        path: &[Seg],
        m: &Map<String, Value>,
        ext: &mut crate::cli::program::Extensions,
    ) -> OptionsDecl {
        let mut o = OptionsDecl::default();
        let entries = self.record(path, m, OPTIONS, &mut |this, k, _| {
            let p = key(path, k);
            this.parser
                .error(&p, format!("unknown resource option `{k}`"));
        });
        for (k, p, v) in entries {
            match k {
                "additionalSecretOutputs" => {
                    o.additional_secret_outputs = self.literal_strings(&p, v)
                }
                "ignoreChanges" => o.ignore_changes = self.literal_strings(&p, v),
                "replaceOnChanges" => o.replace_on_changes = self.literal_strings(&p, v),
                "hideDiffs" => o.hide_diffs = self.literal_strings(&p, v),
                "envVarMappings" => {
                    if let Some(m) = self.object(&p, v, "envVarMappings") {
                        for (k, x) in m {
                            match x {
                                Value::String(s) => {
                                    o.env_var_mappings.insert(k.clone(), s.clone());
                                }
                                _ => self.parser.error(
                                    &key(&p, k),
                                    "an envVarMappings entry names an environment variable: a string",
                                ),
                            }
                        }
                    }
                }
                "replaceWith" => o.replace_with = Some(self.parser.expr(&p, v)),
                "replacementTrigger" => o.replacement_trigger = Some(self.parser.expr(&p, v)),
                "deleteBeforeReplace" => o.delete_before_replace = self.literal_bool(&p, v),
                "retainOnDelete" => o.retain_on_delete = self.literal_bool(&p, v),
                "import" => o.import = self.literal_string(&p, v),
                "version" => o.version = self.literal_string(&p, v),
                "pluginDownloadURL" => o.plugin_download_url = self.literal_string(&p, v),
                "dependsOn" => o.depends_on = Some(self.parser.expr(&p, v)),
                "deletedWith" => o.deleted_with = Some(self.parser.expr(&p, v)),
                "parent" => o.parent = Some(self.parser.expr(&p, v)),
                "protect" => o.protect = Some(self.parser.expr(&p, v)),
                "provider" => o.provider = Some(self.parser.expr(&p, v)),
                "providers" => o.providers = Some(self.parser.expr(&p, v)),
                "customTimeouts" => {
                    if let Some(t) = self.object(&p, v, "customTimeouts") {
                        let mut out: [Option<Expr>; 3] = [None, None, None];
                        let entries = self.record(
                            &p,
                            t,
                            &["create", "update", "delete", "read"],
                            &mut |this, k, _| {
                                this.parser.warn(
                                    &key(&p, k),
                                    format!("unknown key `{k}` of customTimeouts is ignored"),
                                );
                            },
                        );
                        for (k, q, v) in entries {
                            let e = self.parser.expr(&q, v);
                            match k {
                                "create" => out[0] = Some(e),
                                "update" => out[1] = Some(e),
                                "delete" => out[2] = Some(e),
                                _ => self
                                    .parser
                                    .warn(&q, "keel has no read timeout; `read` is ignored"),
                            }
                        }
                        o.custom_timeouts = Some(out);
                    }
                }
                "aliases" => match v {
                    Value::Array(items) => {
                        for (i, item) in items.iter().enumerate() {
                            let mut q = p.clone();
                            q.push(Seg::Index(i));
                            if let Some(a) = self.alias(&q, item) {
                                o.aliases.push(a);
                            }
                        }
                    }
                    _ => self.parser.error(&p, "aliases must be a list"),
                },
                "stateMigrations" => {
                    o.state_migrations = ext.migrations("stateMigrations", v);
                    for (k, m) in ext.take_problems() {
                        self.parser.error(&dotted(path, &k), m);
                    }
                }
                "stateMigrationTimeout" => {
                    o.state_migration_timeout = ext.timeout("stateMigrationTimeout", v);
                    for (k, m) in ext.take_problems() {
                        self.parser.error(&dotted(path, &k), m);
                    }
                }
                _ => {}
            }
        }
        o
    }

    fn alias(&mut self, path: &[Seg], v: &Value) -> Option<AliasDecl> {
        let Value::Object(m) = v else {
            return Some(AliasDecl::Urn(self.parser.expr(path, v)));
        };
        if super::expr::is_call(m) {
            return Some(AliasDecl::Urn(self.parser.expr(path, v)));
        }
        let mut a = (None, None, None, false, None, None);
        let entries = self.record(
            path,
            m,
            &[
                "urn", "name", "type", "parent", "noParent", "stack", "project",
            ],
            &mut |this, k, _| {
                this.parser
                    .error(&key(path, k), format!("unknown alias key `{k}`"));
            },
        );
        let mut urn = None;
        for (k, p, v) in entries {
            match k {
                "urn" => urn = Some(self.parser.expr(&p, v)),
                "name" => a.0 = Some(self.parser.expr(&p, v)),
                "type" => a.1 = Some(self.parser.expr(&p, v)),
                "parent" => a.2 = Some(self.parser.expr(&p, v)),
                "noParent" => a.3 = self.literal_bool(&p, v).unwrap_or(false),
                "stack" => a.4 = Some(self.parser.expr(&p, v)),
                _ => a.5 = Some(self.parser.expr(&p, v)),
            }
        }
        if let Some(u) = urn {
            return Some(AliasDecl::Urn(u));
        }
        Some(AliasDecl::Spec {
            name: a.0,
            ty: a.1,
            parent: a.2,
            no_parent: a.3,
            stack: a.4,
            project: a.5,
        })
    }

    /// `defaultProvider: true`: the provider of every resource of its
    /// package that names none.
    fn default_providers(&mut self, prog: &mut PyamlProgram) {
        let defaults: Vec<(String, String, Option<String>)> = prog
            .resources
            .iter()
            .filter(|r| r.default_provider && r.is_provider())
            .map(|r| {
                (
                    r.package().to_owned(),
                    r.key.clone(),
                    r.options.version.clone(),
                )
            })
            .collect();
        for (pkg, key, version) in defaults {
            for r in &mut prog.resources {
                if r.is_provider()
                    || r.package() != pkg
                    || r.options.provider.is_some()
                    || r.component
                {
                    continue;
                }
                if r.options.version.is_some() && r.options.version != version {
                    let p = {
                        let mut p = r.path.clone();
                        p.push(Seg::Key("options".into()));
                        p
                    };
                    self.parser.error(
                        &p,
                        format!("version conflicts with the default provider `{key}`'s version"),
                    );
                }
                r.options.provider = Some(Expr::Symbol(Access {
                    root: key.clone(),
                    path: Vec::new(),
                }));
            }
        }
    }
}
