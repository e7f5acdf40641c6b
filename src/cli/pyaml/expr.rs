//! Pulumi YAML expressions (`pulumi-yaml.md` §4, §5): a decoded YAML value
//! becomes an [`Expr`]. A string with no `${` is text; a string that is
//! exactly one `${access}` is a symbol (it keeps the value's type); any
//! other string with `${...}` is an interpolation (a string). `$$` is a
//! literal `$`. A one-key object whose key is a builtin (`fn::join`, ...,
//! matched without regard to case) or `fn::<pkg>:<mod>[:<fn>]` (invoke
//! shorthand) is a call; its argument's shape is checked here.
//!
//! Parse problems are collected with the path of the key they concern,
//! so that the loader can name the file's line.

use serde_json::{Map, Value};

/// One step of a path into the program file: a mapping key or an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    /// A mapping key, as written.
    Key(String),
    /// A list index.
    Index(usize),
}

/// A path into the program file.
pub(crate) type Path = Vec<Seg>;

/// Renders a path as `resources.a.properties.list[0]`.
pub(crate) fn render(path: &[Seg]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// One accessor after the root of `${root...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Accessor {
    /// `.name`.
    Name(String),
    /// `[3]`.
    Index(usize),
    /// `["key"]`.
    Key(String),
}

/// A property access: `${root.a[0]["k"]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    /// The root name (a resource, variable, config key or `pulumi`).
    pub(crate) root: String,
    /// The accessors after it.
    pub(crate) path: Vec<Accessor>,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "${{{}", self.root)?;
        for a in &self.path {
            match a {
                Accessor::Name(n) => write!(f, ".{n}")?,
                Accessor::Index(i) => write!(f, "[{i}]")?,
                Accessor::Key(k) => write!(f, "[{k:?}]")?,
            }
        }
        f.write_str("}")
    }
}

/// A piece of an interpolated string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Part {
    /// Literal text.
    Text(String),
    /// `${...}`.
    Access(Access),
}

/// The builtin functions that take one argument expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    /// `fn::join [delimiter, list]`.
    Join,
    /// `fn::split [delimiter, string]`.
    Split,
    /// `fn::select [index, list]`.
    Select,
    /// `fn::toJSON`.
    ToJson,
    /// `fn::toBase64`.
    ToBase64,
    /// `fn::fromBase64`.
    FromBase64,
    /// `fn::readFile`.
    ReadFile,
    /// `fn::filebase64`.
    FileBase64,
    /// `fn::filebase64sha256`.
    FileBase64Sha256,
    /// `fn::sha1`.
    Sha1,
    /// `fn::length`.
    Length,
    /// `fn::singleOrNone`.
    SingleOrNone,
    /// `fn::secret`.
    Secret,
    /// `fn::unsecret`.
    Unsecret,
    /// `fn::pulumiResourceName`.
    ResourceName,
    /// `fn::pulumiResourceType`.
    ResourceType,
    /// `fn::stringAsset`.
    StringAsset,
    /// `fn::fileAsset`.
    FileAsset,
    /// `fn::remoteAsset`.
    RemoteAsset,
    /// `fn::fileArchive`.
    FileArchive,
    /// `fn::remoteArchive`.
    RemoteArchive,
}

/// Builtins by canonical name.
const FUNCS: &[(&str, Func)] = &[
    ("fn::join", Func::Join),
    ("fn::split", Func::Split),
    ("fn::select", Func::Select),
    ("fn::toJSON", Func::ToJson),
    ("fn::toBase64", Func::ToBase64),
    ("fn::fromBase64", Func::FromBase64),
    ("fn::readFile", Func::ReadFile),
    ("fn::filebase64", Func::FileBase64),
    ("fn::filebase64sha256", Func::FileBase64Sha256),
    ("fn::sha1", Func::Sha1),
    ("fn::length", Func::Length),
    ("fn::singleOrNone", Func::SingleOrNone),
    ("fn::secret", Func::Secret),
    ("fn::unsecret", Func::Unsecret),
    ("fn::pulumiResourceName", Func::ResourceName),
    ("fn::pulumiResourceType", Func::ResourceType),
    ("fn::stringAsset", Func::StringAsset),
    ("fn::fileAsset", Func::FileAsset),
    ("fn::remoteAsset", Func::RemoteAsset),
    ("fn::fileArchive", Func::FileArchive),
    ("fn::remoteArchive", Func::RemoteArchive),
];

/// The options of an invoke.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct InvokeOptions {
    /// `dependsOn`.
    pub(crate) depends_on: Option<Expr>,
    /// `parent`.
    pub(crate) parent: Option<Expr>,
    /// `provider`.
    pub(crate) provider: Option<Expr>,
    /// `version`.
    pub(crate) version: Option<String>,
    /// `pluginDownloadURL`.
    pub(crate) plugin_download_url: Option<String>,
}

/// A call of `fn::invoke` (or its shorthand).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Invoke {
    /// The function token, as written.
    pub(crate) function: String,
    /// The arguments (an object expression).
    pub(crate) arguments: Option<Expr>,
    /// The options.
    pub(crate) options: InvokeOptions,
    /// The one property of the result to return.
    pub(crate) ret: Option<String>,
}

/// An expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A number.
    Number(serde_json::Number),
    /// Plain text.
    Text(String),
    /// `${access}`, keeping the value's type.
    Symbol(Access),
    /// A string with references: always a string.
    Interpolate(Vec<Part>),
    /// A list.
    List(Vec<Expr>),
    /// An object (keys may be interpolated).
    Object(Vec<(Expr, Expr)>),
    /// A builtin call.
    Call(Func, Box<Expr>),
    /// `fn::assetArchive`: path -> asset or archive.
    AssetArchive(Vec<(String, Expr)>),
    /// `fn::stackReference [stack, property]`.
    StackReference(String, Box<Expr>),
    /// `fn::invoke`.
    Invoke(Box<Invoke>),
}

impl Expr {
    /// Calls `f` on every access in the expression (including invoke
    /// options).
    pub(crate) fn accesses<'a>(&'a self, f: &mut impl FnMut(&'a Access)) {
        match self {
            Self::Null | Self::Bool(_) | Self::Number(_) | Self::Text(_) => {}
            Self::Symbol(a) => f(a),
            Self::Interpolate(parts) => {
                for p in parts {
                    if let Part::Access(a) = p {
                        f(a);
                    }
                }
            }
            Self::List(items) => items.iter().for_each(|e| e.accesses(f)),
            Self::Object(entries) => {
                for (k, v) in entries {
                    k.accesses(f);
                    v.accesses(f);
                }
            }
            Self::Call(_, e) | Self::StackReference(_, e) => e.accesses(f),
            Self::AssetArchive(entries) => entries.iter().for_each(|(_, e)| e.accesses(f)),
            Self::Invoke(i) => {
                let o = &i.options;
                for e in [&i.arguments, &o.depends_on, &o.parent, &o.provider]
                    .into_iter()
                    .flatten()
                {
                    e.accesses(f);
                }
            }
        }
    }

    /// The root names the expression refers to, in order of appearance.
    pub(crate) fn roots(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        self.accesses(&mut |a| {
            if !out.contains(&a.root.as_str()) {
                out.push(&a.root);
            }
        });
        out
    }

    /// The text of a plain string literal.
    pub(crate) fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text(t) => Some(t),
            _ => None,
        }
    }
}

/// A problem found while parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// Where.
    pub(crate) path: Path,
    /// What.
    pub(crate) message: String,
    /// A warning does not stop the program.
    pub(crate) warning: bool,
}

/// Collects problems while parsing expressions.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    /// Every problem found so far.
    pub(crate) problems: Vec<Problem>,
}

fn child(path: &[Seg], seg: Seg) -> Path {
    let mut p = path.to_vec();
    p.push(seg);
    p
}

impl Parser {
    /// Records an error at `path`.
    pub(crate) fn error(&mut self, path: &[Seg], message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.to_vec(),
            message: message.into(),
            warning: false,
        });
    }

    /// Records a warning at `path`.
    pub(crate) fn warn(&mut self, path: &[Seg], message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.to_vec(),
            message: message.into(),
            warning: true,
        });
    }

    /// Parses `v` (at `path`) as an expression.
    pub(crate) fn expr(&mut self, path: &[Seg], v: &Value) -> Expr {
        match v {
            Value::Null => Expr::Null,
            Value::Bool(b) => Expr::Bool(*b),
            Value::Number(n) => Expr::Number(n.clone()),
            Value::String(s) => match parse_interpolation(s) {
                Ok(e) => e,
                Err(m) => {
                    self.error(path, m);
                    Expr::Null
                }
            },
            Value::Array(a) => Expr::List(
                a.iter()
                    .enumerate()
                    .map(|(i, v)| self.expr(&child(path, Seg::Index(i)), v))
                    .collect(),
            ),
            Value::Object(m) => {
                if m.len() == 1 {
                    if let Some((k, arg)) = m.iter().next() {
                        if let Some(e) = self.call(path, k, arg) {
                            return e;
                        }
                    }
                }
                let mut entries = Vec::with_capacity(m.len());
                for (k, v) in m {
                    let p = child(path, Seg::Key(k.clone()));
                    if is_asset_key(k) && m.len() > 1 {
                        self.error(&p, format!("`{k}` must be the only key of its object"));
                    }
                    let key = self.expr(&p, &Value::String(k.clone()));
                    entries.push((key, self.expr(&p, v)));
                }
                Expr::Object(entries)
            }
        }
    }

    /// A builtin call `{key: arg}`, or `None` when `key` names none.
    fn call(&mut self, path: &[Seg], key: &str, arg: &Value) -> Option<Expr> {
        let lower = key.to_ascii_lowercase();
        if !lower.starts_with("fn::") {
            return None;
        }
        let p = child(path, Seg::Key(key.to_owned()));
        let canonical = |name: &str, this: &mut Self| {
            if name != key {
                this.warn(
                    &p,
                    format!("`{key}` looks like a miscapitalization of `{name}`"),
                );
            }
        };
        if let Some((name, func)) = FUNCS.iter().find(|(n, _)| n.eq_ignore_ascii_case(key)) {
            canonical(name, self);
            let e = self.expr(&p, arg);
            let pair = matches!(func, Func::Join | Func::Split | Func::Select);
            if pair && !matches!(&e, Expr::List(l) if l.len() == 2) {
                self.error(&p, format!("`{name}` takes a list of two values"));
            }
            return Some(Expr::Call(*func, Box::new(e)));
        }
        if lower == "fn::invoke" {
            canonical("fn::invoke", self);
            return Some(self.invoke(&p, arg));
        }
        if lower == "fn::assetarchive" {
            canonical("fn::assetArchive", self);
            let Value::Object(m) = arg else {
                self.error(
                    &p,
                    "`fn::assetArchive` takes an object of path: asset or archive",
                );
                return Some(Expr::Null);
            };
            let mut entries = Vec::new();
            for (k, v) in m {
                let q = child(&p, Seg::Key(k.clone()));
                let ok = matches!(v, Value::Object(o) if o.len() == 1
                    && o.keys().all(|k| is_asset_key(k) || k.eq_ignore_ascii_case("fn::assetArchive")));
                if !ok {
                    self.error(&q, "each entry of `fn::assetArchive` must be an asset or archive function (`fn::fileAsset`, `fn::stringAsset`, ...)");
                    continue;
                }
                entries.push((k.clone(), self.expr(&q, v)));
            }
            return Some(Expr::AssetArchive(entries));
        }
        if lower == "fn::stackreference" {
            canonical("fn::stackReference", self);
            self.warn(
                &p,
                "`fn::stackReference` is deprecated: declare a `pulumi:pulumi:StackReference` resource",
            );
            match arg {
                Value::Array(a) if a.len() == 2 => {
                    let Some(stack) = a[0].as_str().filter(|s| !s.contains("${")) else {
                        self.error(
                            &p,
                            "the stack name of `fn::stackReference` must be a string literal",
                        );
                        return Some(Expr::Null);
                    };
                    let prop = self.expr(&child(&p, Seg::Index(1)), &a[1]);
                    return Some(Expr::StackReference(stack.to_owned(), Box::new(prop)));
                }
                _ => {
                    self.error(&p, "`fn::stackReference` takes a list of two values: a stack name and a property");
                    return Some(Expr::Null);
                }
            }
        }
        // `fn::pkg:mod[:fn]`: invoke shorthand.
        let token = &key[4..];
        let parts = token.split(':').count();
        if (2..=3).contains(&parts) && token.split(':').all(|s| !s.is_empty()) {
            let arguments = match arg {
                Value::Object(_) => Some(self.expr(&p, arg)),
                _ => None,
            };
            return Some(Expr::Invoke(Box::new(Invoke {
                function: token.to_owned(),
                arguments,
                options: InvokeOptions::default(),
                ret: None,
            })));
        }
        self.warn(&p, format!("`fn::` is a reserved prefix and `{key}` is no builtin; the object is kept as a plain object"));
        None
    }

    fn invoke(&mut self, path: &[Seg], arg: &Value) -> Expr {
        let Value::Object(m) = arg else {
            self.error(
                path,
                "`fn::invoke` takes an object with `function`, `arguments`, `options` and `return`",
            );
            return Expr::Null;
        };
        let mut function = None;
        let mut arguments = None;
        let mut options = InvokeOptions::default();
        let mut ret = None;
        for (k, v) in m {
            let p = child(path, Seg::Key(k.clone()));
            match k.to_ascii_lowercase().as_str() {
                "function" => match v.as_str() {
                    Some(s) if !s.contains("${") => function = Some(s.to_owned()),
                    _ => self.error(&p, "`function` must be a string literal (a function token)"),
                },
                "arguments" => {
                    if !v.is_object() {
                        self.error(&p, "`arguments` must be an object");
                    } else {
                        arguments = Some(self.expr(&p, v));
                    }
                }
                "return" => match v.as_str() {
                    Some(s) if !s.contains("${") => ret = Some(s.to_owned()),
                    _ => self.error(&p, "`return` must be a string literal (a property name)"),
                },
                "options" => self.invoke_options(&p, v, &mut options),
                _ => self.warn(&p, format!("unknown key `{k}` of `fn::invoke` is ignored")),
            }
        }
        let Some(function) = function else {
            self.error(path, "`fn::invoke` needs a `function`");
            return Expr::Null;
        };
        Expr::Invoke(Box::new(Invoke {
            function,
            arguments,
            options,
            ret,
        }))
    }

    fn invoke_options(&mut self, path: &[Seg], v: &Value, o: &mut InvokeOptions) {
        let Value::Object(m) = v else {
            self.error(path, "`options` must be an object");
            return;
        };
        for (k, v) in m {
            let p = child(path, Seg::Key(k.clone()));
            match k.as_str() {
                "dependsOn" => o.depends_on = Some(self.expr(&p, v)),
                "parent" => o.parent = Some(self.expr(&p, v)),
                "provider" => o.provider = Some(self.expr(&p, v)),
                "version" | "pluginDownloadURL" => match v.as_str() {
                    Some(s) if k == "version" => o.version = Some(s.to_owned()),
                    Some(s) => o.plugin_download_url = Some(s.to_owned()),
                    None => self.error(&p, format!("`{k}` must be a string")),
                },
                _ => self.warn(&p, format!("unknown invoke option `{k}` is ignored")),
            }
        }
    }
}

fn is_asset_key(k: &str) -> bool {
    [
        "fn::stringAsset",
        "fn::fileAsset",
        "fn::remoteAsset",
        "fn::fileArchive",
        "fn::remoteArchive",
    ]
    .iter()
    .any(|n| n.eq_ignore_ascii_case(k))
}

/// Parses a string: text, a symbol or an interpolation.
///
/// # Errors
/// A message for an unterminated or malformed `${...}`.
pub(crate) fn parse_interpolation(s: &str) -> Result<Expr, String> {
    let mut parts: Vec<Part> = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        text.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("$$") {
            text.push('$');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let (access, used) = parse_access(after).map_err(|m| format!("{m} in `{s}`"))?;
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text)));
            }
            parts.push(Part::Access(access));
            rest = &after[used..];
        } else {
            text.push('$');
            rest = &tail[1..];
        }
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(match parts.as_slice() {
        [] => Expr::Text(String::new()),
        [Part::Text(t)] => Expr::Text(t.clone()),
        [Part::Access(a)] => Expr::Symbol(a.clone()),
        _ => Expr::Interpolate(parts),
    })
}

/// Parses the access after `${` up to and including its `}`; returns it
/// and the bytes used.
fn parse_access(s: &str) -> Result<(Access, usize), String> {
    let b = s.as_bytes();
    let mut i = 0;
    let name = |i: &mut usize| -> String {
        let start = *i;
        while *i < b.len() && !matches!(b[*i], b'.' | b'[' | b'}') {
            *i += 1;
        }
        s[start..*i].to_owned()
    };
    let quoted = |i: &mut usize| -> Result<String, String> {
        // At the opening quote.
        *i += 1;
        let mut out = String::new();
        let mut chars = s[*i..].char_indices();
        loop {
            match chars.next() {
                None => return Err("missing closing quote in property access".into()),
                Some((j, '"')) => {
                    *i += j + 1;
                    return Ok(out);
                }
                Some((_, '\\')) => match chars.next() {
                    Some((_, c)) => out.push(c),
                    None => return Err("missing closing quote in property access".into()),
                },
                Some((_, c)) => out.push(c),
            }
        }
    };
    let root = if b.first() == Some(&b'[') {
        if b.get(1) != Some(&b'"') {
            return Err("the root of a property access must be a name".into());
        }
        i = 1;
        let k = quoted(&mut i)?;
        if b.get(i) != Some(&b']') {
            return Err("missing closing bracket in property access".into());
        }
        i += 1;
        k
    } else {
        name(&mut i)
    };
    if root.is_empty() {
        if b.get(i) == Some(&b'}') {
            return Err("property access expressions cannot be empty".into());
        }
        if i >= b.len() {
            return Err("unterminated interpolation".into());
        }
        return Err("the root of a property access must be a name".into());
    }
    let mut path = Vec::new();
    loop {
        match b.get(i) {
            None => return Err("unterminated interpolation".into()),
            Some(b'}') => return Ok((Access { root, path }, i + 1)),
            Some(b'.') => {
                i += 1;
                let n = name(&mut i);
                if n.is_empty() {
                    return Err("empty property name after `.`".into());
                }
                path.push(Accessor::Name(n));
            }
            Some(b'[') => {
                i += 1;
                if b.get(i) == Some(&b'"') {
                    let k = quoted(&mut i)?;
                    path.push(Accessor::Key(k));
                } else {
                    let start = i;
                    while i < b.len() && b[i].is_ascii_digit() {
                        i += 1;
                    }
                    let n: usize = s[start..i]
                        .parse()
                        .map_err(|_| "invalid list index".to_owned())?;
                    path.push(Accessor::Index(n));
                }
                if b.get(i) != Some(&b']') {
                    return Err("missing closing bracket in property access".into());
                }
                i += 1;
            }
            Some(_) => return Err("unexpected character in property access".into()),
        }
    }
}

/// Parses `v` at `path`, returning the expression and the problems.
#[cfg(test)]
pub(crate) fn parse(v: &Value) -> (Expr, Vec<Problem>) {
    let mut p = Parser::default();
    let e = p.expr(&[], v);
    (e, p.problems)
}

/// True when `m` is a one-key object whose key is a builtin (used to tell
/// `properties: {fn::...}` from a property map).
pub(crate) fn is_call(m: &Map<String, Value>) -> bool {
    m.len() == 1 && m.keys().all(|k| k.to_ascii_lowercase().starts_with("fn::"))
}
