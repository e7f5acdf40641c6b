//! Runs a checked Pulumi YAML program on the program API
//! (`pulumi-yaml.md` §4-§7). Every variable and resource is a shared
//! future that waits for the nodes it refers to, evaluates once, and
//! (for a resource) registers; nodes with nothing unresolved run
//! concurrently, as the reference host's registrations do. When a node
//! fails, those that wait for it are skipped and the program fails.
//! Outputs are evaluated last and registered on the stack resource.
//!
//! Values are [`PropertyValue`]s: a resource used as a value (`${res}`) is
//! a resource reference; unknown values (preview) are
//! [`PropertyValue::Computed`] and make whatever is computed from them
//! unknown; secrets make whatever is computed from them secret.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use base64::Engine as _;
use futures::future::{join_all, BoxFuture, FutureExt};

use super::check::{graph, resolve_root, Kind};
use super::expr::{Access, Accessor, Expr, Func, Invoke, Part};
use super::template::{
    canonical_token, package_of, AliasDecl, Properties, PyamlProgram, ResourceDecl,
};
use crate::actors::{Context, Program, ProgramFuture, ProviderQuery};
use crate::cli::run::{resolve, ResourceFailure, RunError};
use crate::model::property::{Archive, Asset, ResourceReference, Secret};
use crate::model::state::{CustomTimeouts, Seconds};
use crate::model::urn::UNKNOWN_ID;
use crate::model::{PropertyMap, PropertyValue, ProviderRef, TypeToken, Urn};
use crate::source::goal::{
    Alias, AliasParent, AliasSpec, Goal, ReadGoal, Registered, ResourceOptions,
};

/// A registered resource, as other nodes see it.
#[derive(Debug)]
struct Res {
    key: String,
    name: String,
    ty: String,
    registered: Registered,
    /// Its own reference `urn::id`, for a provider resource.
    own_ref: Option<String>,
    /// Providers its children inherit, by package.
    providers: BTreeMap<String, String>,
}

/// A node's value.
#[derive(Debug, Clone)]
enum Node {
    Value(PropertyValue),
    Resource(Arc<Res>),
}

type Slot = crate::cli::run::SlotOf<Node>;

/// A Pulumi YAML program as a [`Program`].
#[derive(Debug, Clone)]
pub struct YamlProgram {
    prog: Arc<PyamlProgram>,
    can_store_secrets: bool,
}

impl YamlProgram {
    /// The program of a checked template with its config applied;
    /// `can_store_secrets` false refuses registrations carrying secrets.
    pub fn new(prog: PyamlProgram, can_store_secrets: bool) -> Self {
        Self {
            prog: Arc::new(prog),
            can_store_secrets,
        }
    }
}

impl Program for YamlProgram {
    fn run(&self, ctx: Context) -> ProgramFuture {
        let rt = Arc::new(Runtime {
            prog: self.prog.clone(),
            ctx,
            can_store_secrets: self.can_store_secrets,
            stack_refs: tokio::sync::Mutex::new(HashMap::new()),
        });
        Box::pin(async move {
            run(rt)
                .await
                .map_err(|e| Box::new(e) as crate::source::ProgramError)
        })
    }
}

#[derive(Debug)]
struct Runtime {
    prog: Arc<PyamlProgram>,
    ctx: Context,
    can_store_secrets: bool,
    stack_refs: tokio::sync::Mutex<HashMap<String, Registered>>,
}

async fn run(rt: Arc<Runtime>) -> Result<(), RunError> {
    let prog = rt.prog.clone();
    let g = Arc::new(graph(&prog));
    let order = topo(&g);
    let mut slots: HashMap<String, Slot> = HashMap::new();
    for name in &order {
        let kind = g.kinds[name];
        if kind == Kind::Config {
            continue;
        }
        let deps: Vec<(String, Slot)> = g.deps[name]
            .iter()
            .filter_map(|d| slots.get(d).map(|s| (d.clone(), s.clone())))
            .collect();
        let (rt, g, name_owned) = (rt.clone(), g.clone(), name.clone());
        let fut: BoxFuture<'static, Result<Node, ResourceFailure>> = Box::pin(async move {
            let nodes = resolve(&name_owned, deps).await?;
            let env = Env::new(&rt, &g, nodes);
            let failed = |message: String| ResourceFailure::Failed {
                resource: name_owned.clone(),
                message,
            };
            if kind == Kind::Variable {
                let (_, e, _) = rt
                    .prog
                    .variables
                    .iter()
                    .find(|v| v.0 == name_owned)
                    .ok_or_else(|| failed("no such variable".into()))?;
                env.eval(e)
                    .await
                    .map(Node::Value)
                    .map_err(|m| failed(format!("variable `{name_owned}`: {m}")))
            } else {
                let r = rt
                    .prog
                    .resources
                    .iter()
                    .find(|r| r.key == name_owned)
                    .ok_or_else(|| failed("no such resource".into()))?;
                env.resource(r).await.map(Node::Resource).map_err(failed)
            }
        });
        slots.insert(name.clone(), fut.shared());
    }
    // Outputs wait for what they refer to.
    let outputs = {
        let (rt, g) = (rt.clone(), g.clone());
        let mut roots: Vec<String> = Vec::new();
        for (_, e, _) in &prog.outputs {
            for r in e.roots() {
                if let Some(n) = resolve_root(&prog, &g.kinds, r) {
                    if !roots.contains(&n) {
                        roots.push(n);
                    }
                }
            }
        }
        let deps: Vec<(String, Slot)> = roots
            .iter()
            .filter_map(|d| slots.get(d).map(|s| (d.clone(), s.clone())))
            .collect();
        async move {
            let nodes = resolve("(outputs)", deps).await.map_err(|_| Vec::new())?;
            let env = Env::new(&rt, &g, nodes);
            let mut map = PropertyMap::new();
            let mut failures = Vec::new();
            for (k, e, _) in &rt.prog.outputs {
                match env.eval(e).await {
                    Ok(v) => {
                        map.insert(k.clone(), v);
                    }
                    Err(m) => failures.push(ResourceFailure::Failed {
                        resource: "(stack)".into(),
                        message: format!("output `{k}`: {m}"),
                    }),
                }
            }
            if !rt.can_store_secrets && map.values().any(PropertyValue::contains_secrets) {
                failures.push(ResourceFailure::Failed {
                    resource: "(stack)".into(),
                    message: format!(
                        "the stack's outputs: {}",
                        crate::secrets::SecretsError::NoProvider
                    ),
                });
                return Err(failures);
            }
            if let Err(e) = rt.ctx.register_outputs(rt.ctx.root(), map).await {
                failures.push(ResourceFailure::Failed {
                    resource: "(stack)".into(),
                    message: format!("registering the stack's outputs failed: {e}"),
                });
            }
            if failures.is_empty() {
                Ok(())
            } else {
                Err(failures)
            }
        }
    };
    let all = join_all(slots.values().cloned());
    let (results, outputs) = futures::join!(all, outputs);
    let errors: Vec<ResourceFailure> = results.into_iter().filter_map(Result::err).collect();
    let mut failures: Vec<ResourceFailure> = errors
        .iter()
        .filter(|f| matches!(f, ResourceFailure::Failed { .. }))
        .cloned()
        .collect();
    if failures.is_empty() {
        failures = errors;
    }
    if let Err(f) = outputs {
        failures.extend(f);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(RunError(failures))
    }
}

/// The nodes, each after its dependencies (the graph is acyclic once
/// checked); file order otherwise.
fn topo(g: &super::check::Graph) -> Vec<String> {
    fn visit(n: &str, g: &super::check::Graph, done: &mut BTreeSet<String>, out: &mut Vec<String>) {
        if !done.insert(n.to_owned()) {
            return;
        }
        for d in g.deps.get(n).into_iter().flatten() {
            visit(d, g, done, out);
        }
        out.push(n.to_owned());
    }
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in g.deps.keys() {
        visit(n, g, &mut done, &mut out);
    }
    out
}

struct Env<'a> {
    rt: &'a Runtime,
    g: &'a super::check::Graph,
    nodes: HashMap<String, Node>,
    by_urn: HashMap<String, Arc<Res>>,
}

fn secret(v: PropertyValue) -> PropertyValue {
    match v {
        PropertyValue::Secret(_) | PropertyValue::Computed => v,
        v => PropertyValue::Secret(Secret::plaintext(v)),
    }
}

fn wrap(v: PropertyValue, is_secret: bool) -> PropertyValue {
    if is_secret {
        secret(v)
    } else {
        v
    }
}

/// The value without secret markers anywhere; true when it had one.
fn strip(v: &PropertyValue) -> (PropertyValue, bool) {
    let mut s = false;
    fn go(v: &PropertyValue, s: &mut bool) -> PropertyValue {
        match v {
            PropertyValue::Secret(Secret::Plaintext(p)) => {
                *s = true;
                go(p.value(), s)
            }
            PropertyValue::Output(o) => {
                if o.secret == Some(true) {
                    *s = true;
                }
                o.value
                    .as_deref()
                    .map_or(PropertyValue::Computed, |v| go(v, s))
            }
            PropertyValue::Array(a) => PropertyValue::Array(a.iter().map(|v| go(v, s)).collect()),
            PropertyValue::Object(m) => {
                PropertyValue::Object(m.iter().map(|(k, v)| (k.clone(), go(v, s))).collect())
            }
            other => other.clone(),
        }
    }
    let out = go(v, &mut s);
    (out, s)
}

fn kind(v: &PropertyValue) -> &'static str {
    match v {
        PropertyValue::Null => "null",
        PropertyValue::Bool(_) => "a boolean",
        PropertyValue::Number(_) => "a number",
        PropertyValue::String(_) => "a string",
        PropertyValue::Array(_) => "a list",
        PropertyValue::Object(_) => "an object",
        PropertyValue::Asset(_) => "an asset",
        PropertyValue::Archive(_) => "an archive",
        PropertyValue::ResourceReference(_) => "a resource",
        _ => "a value",
    }
}

/// Go's `%v` of a float64: `strconv`'s 'g' with the shortest digits,
/// which uses the exponent form when the exponent is below -4 or at
/// least 6 (`1e+06`).
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return "0".into();
    }
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() < (1u64 << 53) {
            return go_float(i as f64);
        }
        return i.to_string();
    }
    n.as_f64().map_or_else(|| n.to_string(), go_float)
}

/// Go's `%v` of a value.
fn go_text(v: &PropertyValue) -> String {
    match v {
        PropertyValue::Null => "<nil>".into(),
        PropertyValue::Bool(b) => b.to_string(),
        PropertyValue::Number(n) => go_number(n),
        PropertyValue::String(s) => s.clone(),
        PropertyValue::Array(a) => {
            format!("[{}]", a.iter().map(go_text).collect::<Vec<_>>().join(" "))
        }
        PropertyValue::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", go_text(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        PropertyValue::ResourceReference(r) => r.urn.as_str().to_owned(),
        other => other.to_json().to_string(),
    }
}

/// Go's `encoding/json` of a value: sorted keys, `<>&` escaped, whole
/// numbers without a fraction.
pub(crate) fn go_json(v: &PropertyValue, out: &mut String) {
    fn string(s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                    out.push_str(&format!("\\u{:04x}", c as u32))
                }
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    match v {
        PropertyValue::Null => out.push_str("null"),
        PropertyValue::Bool(b) => out.push_str(&b.to_string()),
        PropertyValue::Number(n) => {
            if n.is_i64() || n.is_u64() {
                out.push_str(&n.to_string());
            } else {
                let f = n.as_f64().unwrap_or_default();
                let abs = f.abs();
                if f.fract() == 0.0 && abs < 1e21 {
                    out.push_str(&format!("{f:.0}"));
                } else if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
                    let e = format!("{f:e}");
                    let (m, x) = e.split_once('e').unwrap_or((&e, "0"));
                    let x: i32 = x.parse().unwrap_or(0);
                    out.push_str(&format!("{m}e{}{}", if x < 0 { '-' } else { '+' }, x.abs()));
                } else {
                    out.push_str(&format!("{f}"));
                }
            }
        }
        PropertyValue::String(s) => string(s, out),
        PropertyValue::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(v, out);
            }
            out.push(']');
        }
        PropertyValue::Object(m) => {
            out.push('{');
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                string(k, out);
                out.push(':');
                go_json(v, out);
            }
            out.push('}');
        }
        other => go_json(&PropertyValue::String(go_text(other)), out),
    }
}

/// SHA-1 (FIPS 180-4), for `fn::sha1`.
pub(crate) fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([
                chunk[4 * i],
                chunk[4 * i + 1],
                chunk[4 * i + 2],
                chunk[4 * i + 3],
            ]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// The number of user-perceived characters of `s`, approximating Unicode
/// grapheme clusters: combining marks, variation selectors, emoji
/// modifiers and tags extend the character before them, a zero-width
/// joiner joins the next one to it, and regional indicators pair up.
pub(crate) fn graphemes(s: &str) -> usize {
    let extends = |c: char| {
        matches!(c as u32,
            0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF
            | 0xFE00..=0xFE0F | 0xFE20..=0xFE2F | 0x1F3FB..=0x1F3FF | 0xE0020..=0xE007F | 0x200C)
    };
    let regional = |c: char| (0x1F1E6..=0x1F1FF).contains(&(c as u32));
    let mut count = 0;
    let mut join_next = false;
    let mut open_regional = false;
    for c in s.chars() {
        if c == '\u{200D}' {
            join_next = true;
            continue;
        }
        if join_next || (count > 0 && extends(c)) {
            join_next = false;
            continue;
        }
        if regional(c) {
            if open_regional {
                open_regional = false;
                continue;
            }
            open_regional = true;
        } else {
            open_regional = false;
        }
        count += 1;
    }
    count
}

/// Applies a builtin to a known, secret-free argument.
pub(crate) fn apply(
    func: Func,
    arg: PropertyValue,
    dir: &std::path::Path,
) -> Result<PropertyValue, String> {
    use PropertyValue as V;
    let text = |v: &V, what: &str| -> Result<String, String> {
        match v {
            V::String(s) => Ok(s.clone()),
            other => Err(format!("{what} must be a string, not {}", kind(other))),
        }
    };
    let pair = |v: V| -> Result<(V, V), String> {
        match v {
            V::Array(mut a) if a.len() == 2 => {
                let b = a.pop().unwrap_or_default();
                Ok((a.pop().unwrap_or_default(), b))
            }
            _ => Err("takes a list of two values".into()),
        }
    };
    let read = |v: &V| -> Result<Vec<u8>, String> {
        let p = text(v, "the path")?;
        let path = dir.join(&p);
        std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    Ok(match func {
        Func::Join => {
            let (d, list) = pair(arg)?;
            let d = match d {
                V::Null => String::new(),
                d => text(&d, "the delimiter")?,
            };
            let V::Array(items) = list else {
                return Err(format!("`fn::join` joins a list, not {}", kind(&list)));
            };
            let items: Result<Vec<String>, String> = items
                .iter()
                .map(|i| text(i, "every element of `fn::join`'s list"))
                .collect();
            V::String(items?.join(&d))
        }
        Func::Split => {
            let (d, s) = pair(arg)?;
            let (d, s) = (text(&d, "the delimiter")?, text(&s, "the string to split")?);
            V::Array(
                s.split(d.as_str())
                    .map(|p| V::String(p.to_owned()))
                    .collect(),
            )
        }
        Func::Select => {
            let (i, list) = pair(arg)?;
            let idx = match &i {
                V::Number(n) => n.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0),
                _ => None,
            };
            let Some(idx) = idx else {
                return Err(format!(
                    "the index of `fn::select` must be a non-negative whole number, not {}",
                    go_text(&i)
                ));
            };
            let V::Array(items) = list else {
                return Err(format!(
                    "`fn::select` selects from a list, not {}",
                    kind(&list)
                ));
            };
            let n = items.len();
            items
                .into_iter()
                .nth(idx as usize)
                .ok_or_else(|| format!("list index {idx} out-of-bounds for list of length {n}"))?
        }
        Func::ToJson => {
            let mut s = String::new();
            go_json(&arg, &mut s);
            V::String(s)
        }
        Func::ToBase64 => V::String(b64.encode(text(&arg, "the argument of `fn::toBase64`")?)),
        Func::FromBase64 => {
            let bytes = b64
                .decode(text(&arg, "the argument of `fn::fromBase64`")?)
                .map_err(|e| format!("invalid base64: {e}"))?;
            V::String(
                String::from_utf8(bytes)
                    .map_err(|_| "the decoded bytes are not UTF-8 text".to_owned())?,
            )
        }
        Func::ReadFile => V::String(String::from_utf8_lossy(&read(&arg)?).into_owned()),
        Func::FileBase64 => V::String(b64.encode(read(&arg)?)),
        Func::FileBase64Sha256 => {
            use sha2::Digest;
            V::String(b64.encode(sha2::Sha256::digest(read(&arg)?)))
        }
        Func::Sha1 => V::String(hex::encode(sha1(
            text(&arg, "the argument of `fn::sha1`")?.as_bytes(),
        ))),
        Func::Length => {
            let n = match &arg {
                V::String(s) => graphemes(s),
                V::Array(a) => a.len(),
                V::Object(m) => m.len(),
                other => {
                    return Err(format!(
                        "`fn::length` takes a string, list or object, not {}",
                        kind(other)
                    ))
                }
            };
            V::Number((n as u64).into())
        }
        Func::SingleOrNone => match arg {
            V::Array(mut a) if a.len() <= 1 => a.pop().unwrap_or(V::Null),
            V::Array(a) => {
                return Err(format!(
                    "`fn::singleOrNone` found {} elements, expected at most one",
                    a.len()
                ))
            }
            other => {
                return Err(format!(
                    "`fn::singleOrNone` takes a list, not {}",
                    kind(&other)
                ))
            }
        },
        Func::StringAsset => V::Asset(Box::new(Asset {
            text: Some(text(&arg, "the text of `fn::stringAsset`")?),
            ..Asset::default()
        })),
        Func::FileAsset => V::Asset(Box::new(Asset {
            path: Some(text(&arg, "the path of `fn::fileAsset`")?),
            ..Asset::default()
        })),
        Func::RemoteAsset => V::Asset(Box::new(Asset {
            uri: Some(text(&arg, "the URI of `fn::remoteAsset`")?),
            ..Asset::default()
        })),
        Func::FileArchive => V::Archive(Box::new(Archive {
            path: Some(text(&arg, "the path of `fn::fileArchive`")?),
            ..Archive::default()
        })),
        Func::RemoteArchive => V::Archive(Box::new(Archive {
            uri: Some(text(&arg, "the URI of `fn::remoteArchive`")?),
            ..Archive::default()
        })),
        Func::Secret | Func::Unsecret | Func::ResourceName | Func::ResourceType => arg,
    })
}

impl<'a> Env<'a> {
    fn new(rt: &'a Runtime, g: &'a super::check::Graph, nodes: HashMap<String, Node>) -> Self {
        let mut by_urn = HashMap::new();
        for n in nodes.values() {
            if let Node::Resource(r) = n {
                by_urn.insert(r.registered.urn.as_str().to_owned(), r.clone());
            }
        }
        Self {
            rt,
            g,
            nodes,
            by_urn,
        }
    }

    fn preview(&self) -> bool {
        self.rt.ctx.is_preview()
    }

    fn res_of(&self, v: &PropertyValue, what: &str) -> Result<Arc<Res>, String> {
        match v {
            PropertyValue::ResourceReference(r) => self
                .by_urn
                .get(r.urn.as_str())
                .cloned()
                .ok_or_else(|| format!("{what}: `{}` is not a resource of this program", r.urn)),
            PropertyValue::Computed => Err(format!("{what} must be a resource, known before the resource registers; an unknown value was given")),
            other => Err(format!("{what} must be a resource (`${{name}}`), not {}", kind(other))),
        }
    }

    fn resources_of(&self, v: &PropertyValue, what: &str) -> Result<Vec<Arc<Res>>, String> {
        match v {
            PropertyValue::Array(a) => a.iter().map(|x| self.res_of(x, what)).collect(),
            PropertyValue::Null => Ok(Vec::new()),
            other => Ok(vec![self.res_of(other, what)?]),
        }
    }

    fn eval<'e>(&'e self, e: &'e Expr) -> BoxFuture<'e, Result<PropertyValue, String>> {
        async move {
            Ok(match e {
                Expr::Null => PropertyValue::Null,
                Expr::Bool(b) => PropertyValue::Bool(*b),
                Expr::Number(n) => PropertyValue::Number(n.clone()),
                Expr::Text(t) => PropertyValue::String(t.clone()),
                Expr::Symbol(a) => self.access(a)?,
                Expr::Interpolate(parts) => {
                    let mut out = String::new();
                    let mut is_secret = false;
                    for p in parts {
                        match p {
                            Part::Text(t) => out.push_str(t),
                            Part::Access(a) => {
                                let v = self.access(a)?;
                                if v.contains_unknowns() {
                                    return Ok(PropertyValue::Computed);
                                }
                                let (v, s) = strip(&v);
                                is_secret |= s;
                                out.push_str(&go_text(&v));
                            }
                        }
                    }
                    wrap(PropertyValue::String(out), is_secret)
                }
                Expr::List(items) => {
                    let mut out = Vec::with_capacity(items.len());
                    for i in items {
                        out.push(self.eval(i).await?);
                    }
                    PropertyValue::Array(out)
                }
                Expr::Object(entries) => {
                    let mut out = PropertyMap::new();
                    for (k, v) in entries {
                        let key = match self.eval(k).await? {
                            PropertyValue::String(s) => s,
                            PropertyValue::Computed => return Ok(PropertyValue::Computed),
                            other => return Err(format!("object keys must be strings, not {}", kind(&other))),
                        };
                        out.insert(key, self.eval(v).await?);
                    }
                    PropertyValue::Object(out)
                }
                Expr::Call(func, arg) => self.call(*func, arg).await?,
                Expr::AssetArchive(entries) => {
                    let mut assets = PropertyMap::new();
                    for (k, v) in entries {
                        let v = self.eval(v).await?;
                        if v.contains_unknowns() {
                            return Ok(PropertyValue::Computed);
                        }
                        assets.insert(k.clone(), v);
                    }
                    PropertyValue::Archive(Box::new(Archive { assets: Some(assets), ..Archive::default() }))
                }
                Expr::StackReference(stack, prop) => {
                    let prop = self.eval(prop).await?;
                    let PropertyValue::String(prop) = prop else {
                        return Err("the property of `fn::stackReference` must be a string".into());
                    };
                    let reg = self.stack_reference(stack).await?;
                    let outputs = reg.outputs.get("outputs").and_then(PropertyValue::as_object);
                    let secret_names = reg.outputs.get("secretOutputNames");
                    let is_secret = matches!(secret_names, Some(PropertyValue::Array(a)) if a.iter().any(|n| n.as_str() == Some(prop.as_str())));
                    let v = outputs.and_then(|o| o.get(&prop)).cloned().unwrap_or(PropertyValue::Null);
                    wrap(v, is_secret)
                }
                Expr::Invoke(i) => self.invoke(i).await?,
            })
        }
        .boxed()
    }

    async fn stack_reference(&self, stack: &str) -> Result<Registered, String> {
        let mut refs = self.rt.stack_refs.lock().await;
        if let Some(r) = refs.get(stack) {
            return Ok(r.clone());
        }
        let goal = ReadGoal {
            ty: TypeToken::parse(crate::provider::builtins::STACK_REFERENCE_TYPE)
                .map_err(|e| e.to_string())?,
            name: stack.to_owned(),
            id: stack.to_owned(),
            inputs: [("name".to_owned(), PropertyValue::String(stack.to_owned()))].into(),
            parent: None,
            provider: None,
            depends_on: Vec::new(),
            additional_secret_outputs: Vec::new(),
            version: None,
            plugin_download_url: None,
            ..Default::default()
        };
        let r = self.rt.ctx.read(goal).await.map_err(|e| e.to_string())?;
        refs.insert(stack.to_owned(), r.clone());
        Ok(r)
    }

    async fn call(&self, func: Func, arg: &Expr) -> Result<PropertyValue, String> {
        let v = self.eval(arg).await?;
        match func {
            Func::Secret => return Ok(secret(v)),
            Func::Unsecret => return Ok(strip(&v).0),
            Func::ResourceName | Func::ResourceType => {
                let r = self.res_of(&v, "the argument")?;
                return Ok(PropertyValue::String(if func == Func::ResourceName {
                    r.name.clone()
                } else {
                    r.ty.clone()
                }));
            }
            _ => {}
        }
        if v.contains_unknowns() {
            return Ok(PropertyValue::Computed);
        }
        let (plain, is_secret) = strip(&v);
        apply(func, plain, &self.rt.prog.dir).map(|r| wrap(r, is_secret))
    }

    async fn invoke(&self, i: &Invoke) -> Result<PropertyValue, String> {
        let args = match &i.arguments {
            Some(a) => self.eval(a).await?,
            None => PropertyValue::Object(PropertyMap::new()),
        };
        if args.contains_unknowns() {
            return Ok(PropertyValue::Computed);
        }
        let (args, is_secret) = strip(&args);
        let PropertyValue::Object(args) = args else {
            return Err(format!(
                "the arguments of `{}` must be an object",
                i.function
            ));
        };
        let token = canonical_token(&i.function)?;
        let o = &i.options;
        if let Some(d) = &o.depends_on {
            let v = self.eval(d).await?;
            self.resources_of(&v, "invoke option `dependsOn`")?;
        }
        let explicit = match &o.provider {
            Some(p) => {
                let v = self.eval(p).await?;
                let r = self.res_of(&v, "invoke option `provider`")?;
                Some(
                    r.own_ref
                        .clone()
                        .ok_or_else(|| format!("`{}` was not a provider resource", r.key))?,
                )
            }
            None => self.default_provider_ref(package_of(&token)),
        };
        let result = if package_of(&token) == "pulumi" {
            self.rt
                .ctx
                .invoke(&token, args)
                .await
                .map_err(|e| e.to_string())?
        } else {
            let query = ProviderQuery {
                package: package_of(&token).to_owned(),
                version: o.version.clone(),
                download_url: o.plugin_download_url.clone(),
                explicit,
            };
            let (_, provider) = self
                .rt
                .ctx
                .provider(query)
                .await
                .map_err(|e| e.to_string())?;
            // `aws:ec2:getAmi` is `aws:ec2/getAmi:getAmi` in the schema.
            let token = provider
                .schema_token(&token)
                .await
                .unwrap_or_else(|| token.clone());
            let result = provider
                .invoke(&token, &args, self.preview())
                .await
                .map_err(|e| format!("invoke of {token}: {e}"))?;
            // A function returning a single value answers with an object of
            // one property; without `return`, the value itself is meant.
            if i.ret.is_none() && result.len() == 1 && provider.returns_scalar(&token).await {
                let v = result.into_values().next().unwrap_or_default();
                return Ok(wrap(v, is_secret));
            }
            result
        };
        let v = match &i.ret {
            Some(r) => result
                .get(r)
                .cloned()
                .ok_or_else(|| format!("invoke of {token}: the result has no property `{r}`"))?,
            None => PropertyValue::Object(result),
        };
        Ok(wrap(v, is_secret))
    }

    /// The provider schema's spelling of a custom resource's type, as
    /// Pulumi YAML resolves types against the schema (`aws:s3:Bucket` is
    /// `aws:s3/bucket:Bucket`); the type as written when it already names
    /// its module's suffix, when the provider has no schema or no other
    /// spelling (the simulated cloud), or when the provider cannot be had
    /// (the registration then reports why).
    async fn schema_type(
        &self,
        ty: &str,
        explicit: Option<String>,
        version: Option<String>,
        download_url: Option<String>,
    ) -> String {
        let package = package_of(ty);
        let suffixed = ty.split(':').nth(1).is_some_and(|m| m.contains('/'));
        if suffixed || package == "pulumi" {
            return ty.to_owned();
        }
        let query = ProviderQuery {
            package: package.to_owned(),
            version,
            download_url,
            explicit,
        };
        match self.rt.ctx.provider(query).await {
            Ok((_, p)) => p.schema_token(ty).await.unwrap_or_else(|| ty.to_owned()),
            Err(_) => ty.to_owned(),
        }
    }

    /// The reference of the `defaultProvider: true` provider of `pkg`, once
    /// registered (it is a dependency of whatever uses it).
    fn default_provider_ref(&self, pkg: &str) -> Option<String> {
        let key = self
            .rt
            .prog
            .resources
            .iter()
            .find(|r| r.default_provider && r.is_provider() && r.package() == pkg)?;
        match self.nodes.get(&key.key) {
            Some(Node::Resource(r)) => r.own_ref.clone(),
            _ => None,
        }
    }

    fn access(&self, a: &Access) -> Result<PropertyValue, String> {
        if a.root == "pulumi" {
            let info = |n: &str| -> Option<String> {
                let p = &self.rt.prog;
                Some(match n {
                    "stack" => self.rt.ctx.stack().to_owned(),
                    "project" => self.rt.ctx.project().to_owned(),
                    "organization" => "organization".to_owned(),
                    "cwd" => abs(&p.dir),
                    "rootDirectory" => abs(&p.root),
                    _ => return None,
                })
            };
            return match a.path.as_slice() {
                [] => Ok(PropertyValue::Object(
                    ["stack", "project", "organization", "cwd", "rootDirectory"]
                        .iter()
                        .filter_map(|k| {
                            info(k).map(|v| ((*k).to_owned(), PropertyValue::String(v)))
                        })
                        .collect(),
                )),
                [Accessor::Name(n) | Accessor::Key(n)] => info(n)
                    .map(PropertyValue::String)
                    .ok_or_else(|| format!("`{a}`: unknown")),
                _ => Err(format!("`{a}`: pulumi's properties are strings")),
            };
        }
        let root = resolve_root(&self.rt.prog, &self.g.kinds, &a.root).ok_or_else(|| {
            format!(
                "`{a}`: resource, variable, or config value `{}` not found",
                a.root
            )
        })?;
        match self.nodes.get(&root) {
            Some(Node::Resource(r)) => self.resource_access(a, r),
            Some(Node::Value(v)) => walk(v, &a.path, a),
            None => match self.rt.prog.values.get(&root) {
                Some(v) => walk(v, &a.path, a),
                None => Err(format!(
                    "`{a}`: missing required configuration variable `{root}`"
                )),
            },
        }
    }

    fn resource_access(&self, a: &Access, r: &Res) -> Result<PropertyValue, String> {
        let reg = &r.registered;
        let unknown_id = reg.id.is_empty() || reg.id == UNKNOWN_ID;
        let Some(first) = a.path.first() else {
            return Ok(PropertyValue::ResourceReference(Box::new(
                ResourceReference {
                    urn: reg.urn.clone(),
                    id: (!unknown_id).then(|| reg.id.clone()),
                    package_version: None,
                },
            )));
        };
        let name = match first {
            Accessor::Name(n) | Accessor::Key(n) => n,
            Accessor::Index(_) => return Err(format!("`{a}`: a resource is not a list")),
        };
        let v = match name.as_str() {
            "id" if unknown_id && self.preview() => PropertyValue::Computed,
            "id" => PropertyValue::String(reg.id.clone()),
            "urn" => PropertyValue::String(reg.urn.as_str().to_owned()),
            _ => match reg.outputs.get(name) {
                Some(v) => v.clone(),
                None if self.preview() => PropertyValue::Computed,
                None => PropertyValue::Null,
            },
        };
        walk(&v, &a.path[1..], a)
    }

    /// Registers (or reads) a resource.
    async fn resource(&self, r: &ResourceDecl) -> Result<Arc<Res>, String> {
        let o = &r.options;
        let ctx = &self.rt.ctx;
        let parent = match &o.parent {
            Some(e) => Some(self.res_of(&self.eval(e).await?, "option `parent`")?),
            None => None,
        };
        let mut providers: BTreeMap<String, String> = parent
            .as_ref()
            .map(|p| p.providers.clone())
            .unwrap_or_default();
        if let Some(e) = &o.providers {
            let v = self.eval(e).await?;
            let list: Vec<Arc<Res>> = match &v {
                PropertyValue::Object(m) => m
                    .values()
                    .map(|x| self.res_of(x, "option `providers`"))
                    .collect::<Result<_, _>>()?,
                other => self.resources_of(other, "option `providers`")?,
            };
            for p in list {
                let rf = p.own_ref.clone().ok_or_else(|| {
                    format!(
                        "option `providers`: `{}` was not a provider resource",
                        p.key
                    )
                })?;
                providers.insert(package_of(&p.ty).to_owned(), rf);
            }
        }
        let mut provider = None;
        if let Some(e) = &o.provider {
            let p = self.res_of(&self.eval(e).await?, "option `provider`")?;
            let rf = p.own_ref.clone().ok_or_else(|| {
                format!("option `provider`: `{}` was not a provider resource", p.key)
            })?;
            providers.insert(package_of(&p.ty).to_owned(), rf.clone());
            provider = Some(rf);
        }
        let custom = !r.component;
        if custom && !r.is_provider() && provider.is_none() {
            provider = providers.get(r.package()).cloned();
        }
        let mut depends_on: Vec<Urn> = Vec::new();
        if let Some(e) = &o.depends_on {
            for d in self.resources_of(&self.eval(e).await?, "option `dependsOn`")? {
                depends_on.push(d.registered.urn.clone());
            }
        }
        let deleted_with = match &o.deleted_with {
            Some(e) => Some(
                self.res_of(&self.eval(e).await?, "option `deletedWith`")?
                    .registered
                    .urn
                    .clone(),
            ),
            None => None,
        };
        let mut replace_with: Vec<Urn> = Vec::new();
        if let Some(e) = &o.replace_with {
            for d in self.resources_of(&self.eval(e).await?, "option `replaceWith`")? {
                replace_with.push(d.registered.urn.clone());
            }
        }
        let replacement_trigger = match &o.replacement_trigger {
            Some(e) => self.eval(e).await?,
            None => PropertyValue::Null,
        };
        let protect = match &o.protect {
            None => false,
            Some(e) => match strip(&self.eval(e).await?).0 {
                PropertyValue::Bool(b) => b,
                other => {
                    return Err(format!(
                        "option `protect` must be true or false, not {}",
                        kind(&other)
                    ))
                }
            },
        };
        let custom_timeouts = match &o.custom_timeouts {
            None => None,
            Some(t) => {
                let mut secs = [Seconds(0.0), Seconds(0.0), Seconds(0.0)];
                for (i, e) in t.iter().enumerate() {
                    if let Some(e) = e {
                        let v = self.eval(e).await?;
                        let PropertyValue::String(s) = v else {
                            return Err(format!("customTimeouts values must be duration strings such as \"5m\", not {}", kind(&v)));
                        };
                        secs[i] = Seconds(
                            crate::grpc::convert::parse_duration(&s)
                                .map_err(|e| format!("option `customTimeouts`: {e}"))?,
                        );
                    }
                }
                let [create, update, delete] = secs;
                Some(CustomTimeouts {
                    create,
                    update,
                    delete,
                    ..CustomTimeouts::default()
                })
            }
        };
        let mut aliases = Vec::new();
        for a in &o.aliases {
            aliases.push(self.alias(a).await?);
        }
        // Inputs, with the resources each depends on.
        let mut inputs = PropertyMap::new();
        let mut property_dependencies: BTreeMap<String, Vec<Urn>> = BTreeMap::new();
        match &r.properties {
            Properties::Map(m) => {
                for (k, e) in m {
                    let v = self
                        .eval(e)
                        .await
                        .map_err(|m| format!("property `{k}`: {m}"))?;
                    v.check_depth(k).map_err(|e| e.to_string())?;
                    inputs.insert(k.clone(), v);
                    let deps = self.resource_deps(e);
                    if !deps.is_empty() {
                        property_dependencies.insert(k.clone(), deps);
                    }
                }
            }
            Properties::Expr(e) => match self.eval(e).await? {
                PropertyValue::Object(m) => {
                    let deps = self.resource_deps(e);
                    for (k, v) in m {
                        if !deps.is_empty() {
                            property_dependencies.insert(k.clone(), deps.clone());
                        }
                        inputs.insert(k, v);
                    }
                }
                other => {
                    return Err(format!(
                        "properties must be a plain object, not {}",
                        kind(&other)
                    ))
                }
            },
        }
        for u in property_dependencies.values().flatten() {
            if !depends_on.contains(u) {
                depends_on.push(u.clone());
            }
        }
        let ty = if custom && !r.is_provider() {
            self.schema_type(
                &r.ty,
                provider.clone(),
                o.version.clone(),
                o.plugin_download_url.clone(),
            )
            .await
        } else {
            r.ty.clone()
        };
        let ty = TypeToken::parse(&ty).map_err(|e| e.to_string())?;
        if !self.rt.can_store_secrets
            && (inputs.values().any(PropertyValue::contains_secrets)
                || !o.additional_secret_outputs.is_empty())
        {
            return Err(crate::secrets::SecretsError::NoProvider.to_string());
        }
        let read_id = if let Some(g) = &r.get {
            let id = match strip(&self.eval(&g.id).await?).0 {
                PropertyValue::String(s) => s,
                PropertyValue::Computed => UNKNOWN_ID.to_owned(),
                other => return Err(format!("`get.id` must be a string, not {}", kind(&other))),
            };
            for (k, e) in &g.state {
                inputs.insert(k.clone(), self.eval(e).await?);
            }
            Some(id)
        } else if r.ty == crate::provider::builtins::STACK_REFERENCE_TYPE {
            let name = match inputs.get("name") {
                Some(PropertyValue::String(s)) => s.clone(),
                _ => r.name.clone(),
            };
            inputs.insert("name".into(), PropertyValue::String(name.clone()));
            Some(name)
        } else {
            None
        };
        let parent_urn = parent.as_ref().map(|p| p.registered.urn.clone());
        let registered = if let Some(id) = read_id {
            ctx.read(ReadGoal {
                ty,
                name: r.name.clone(),
                id,
                inputs,
                parent: parent_urn,
                provider: provider.clone(),
                depends_on,
                additional_secret_outputs: o.additional_secret_outputs.clone(),
                version: o.version.clone(),
                plugin_download_url: o.plugin_download_url.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?
        } else {
            let goal = Goal {
                ty,
                name: r.name.clone(),
                custom,
                inputs,
                options: ResourceOptions {
                    parent: parent_urn,
                    depends_on,
                    property_dependencies,
                    provider: provider.clone(),
                    version: o.version.clone(),
                    plugin_download_url: o.plugin_download_url.clone(),
                    protect,
                    retain_on_delete: o.retain_on_delete.unwrap_or(false),
                    deleted_with,
                    delete_before_replace: o.delete_before_replace,
                    aliases,
                    custom_timeouts,
                    ignore_changes: o.ignore_changes.clone(),
                    replace_on_changes: o.replace_on_changes.clone(),
                    additional_secret_outputs: o.additional_secret_outputs.clone(),
                    replace_with,
                    replacement_trigger,
                    hide_diffs: o.hide_diffs.clone(),
                    env_var_mappings: o.env_var_mappings.clone(),
                    import: o.import.clone(),
                    state_migrations: self.state_migrations(r),
                    ..ResourceOptions::default()
                },
            };
            ctx.register(goal).await.map_err(|e| e.to_string())?
        };
        let own_ref = if r.is_provider() {
            let id = if registered.id.is_empty() {
                UNKNOWN_ID
            } else {
                &registered.id
            };
            Some(
                ProviderRef::new(registered.urn.clone(), id)
                    .map_err(|e| e.to_string())?
                    .to_string(),
            )
        } else {
            None
        };
        if let Some(p) = &provider {
            providers.insert(r.package().to_owned(), p.clone());
        }
        Ok(Arc::new(Res {
            key: r.key.clone(),
            name: r.name.clone(),
            ty: r.ty.clone(),
            registered,
            own_ref,
            providers,
        }))
    }

    fn state_migrations(&self, r: &ResourceDecl) -> crate::source::migration::StateMigrations {
        let o = &r.options;
        if o.state_migrations.is_empty() {
            return crate::source::migration::StateMigrations::default();
        }
        let file = crate::cli::program::ProgramFile {
            path: self.rt.prog.path.clone(),
            name: self.rt.prog.name.clone(),
            config: BTreeMap::new(),
            resources: BTreeMap::new(),
            outputs: BTreeMap::new(),
            schemas: BTreeMap::new(),
        };
        let spec = crate::cli::program::OptionsSpec {
            state_migrations: o.state_migrations.clone(),
            state_migration_timeout: o.state_migration_timeout,
            ..crate::cli::program::OptionsSpec::default()
        };
        crate::cli::run::state_migrations(&file, &spec)
    }

    async fn alias(&self, a: &AliasDecl) -> Result<Alias, String> {
        let text = |v: PropertyValue, what: &str| -> Result<String, String> {
            match strip(&v).0 {
                PropertyValue::String(s) => Ok(s),
                other => Err(format!(
                    "alias `{what}` must be a string, not {}",
                    kind(&other)
                )),
            }
        };
        Ok(match a {
            AliasDecl::Urn(e) => {
                let s = text(self.eval(e).await?, "urn")?;
                Alias::Urn(Urn::parse(&s).map_err(|e| format!("alias: {e}"))?)
            }
            AliasDecl::Spec {
                name,
                ty,
                parent,
                no_parent,
                stack,
                project,
            } => {
                let opt = |e: &Option<Expr>, what: &'static str| {
                    let e = e.clone();
                    async move {
                        match e {
                            Some(e) => self.eval(&e).await.and_then(|v| text(v, what)).map(Some),
                            None => Ok(None),
                        }
                    }
                };
                let name = opt(name, "name").await?;
                let ty = match opt(ty, "type").await? {
                    Some(t) => {
                        Some(TypeToken::parse(&canonical_token(&t)?).map_err(|e| e.to_string())?)
                    }
                    None => None,
                };
                let stack = opt(stack, "stack").await?;
                let project = opt(project, "project").await?;
                let parent = if *no_parent {
                    Some(AliasParent::NoParent)
                } else {
                    match parent {
                        None => None,
                        Some(e) => match self.eval(e).await? {
                            PropertyValue::String(s) => Some(AliasParent::Urn(
                                Urn::parse(&s).map_err(|e| format!("alias parent: {e}"))?,
                            )),
                            v => Some(AliasParent::Urn(
                                self.res_of(&v, "alias `parent`")?.registered.urn.clone(),
                            )),
                        },
                    }
                };
                Alias::Spec(AliasSpec {
                    name,
                    ty,
                    parent,
                    stack,
                    project,
                })
            }
        })
    }

    /// The URNs of the resources an expression depends on (through
    /// variables too).
    fn resource_deps(&self, e: &Expr) -> Vec<Urn> {
        let mut names = BTreeSet::new();
        let mut stack: Vec<String> = e
            .roots()
            .into_iter()
            .filter_map(|r| resolve_root(&self.rt.prog, &self.g.kinds, r))
            .collect();
        let mut seen = BTreeSet::new();
        while let Some(n) = stack.pop() {
            if !seen.insert(n.clone()) {
                continue;
            }
            match self.g.kinds.get(&n) {
                Some(Kind::Resource) => {
                    names.insert(n);
                }
                Some(Kind::Variable) => {
                    stack.extend(self.g.deps.get(&n).into_iter().flatten().cloned())
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        for n in names {
            // Only direct dependencies are in `nodes`; a variable's are
            // looked up in its own resolution, which registered them.
            if let Some(Node::Resource(r)) = self.nodes.get(&n) {
                out.push(r.registered.urn.clone());
            } else if let Some(r) = self.by_urn.values().find(|r| r.key == n) {
                out.push(r.registered.urn.clone());
            }
        }
        out
    }
}

fn abs(p: &std::path::Path) -> String {
    std::fs::canonicalize(p)
        .unwrap_or_else(|_| p.to_owned())
        .display()
        .to_string()
}

/// Follows accessors into a value (secrets on the way make the result
/// secret; unknown values make it unknown).
fn walk(v: &PropertyValue, path: &[Accessor], a: &Access) -> Result<PropertyValue, String> {
    let mut cur = v.clone();
    let mut is_secret = false;
    for acc in path {
        loop {
            match cur {
                PropertyValue::Secret(Secret::Plaintext(p)) => {
                    is_secret = true;
                    cur = p.value().clone();
                }
                PropertyValue::Output(o) => {
                    if o.secret == Some(true) {
                        is_secret = true;
                    }
                    match o.value {
                        Some(v) => cur = *v,
                        None => return Ok(PropertyValue::Computed),
                    }
                }
                _ => break,
            }
        }
        cur = match (cur, acc) {
            (PropertyValue::Computed, _) => return Ok(PropertyValue::Computed),
            (PropertyValue::Null, _) => return Ok(wrap(PropertyValue::Null, is_secret)),
            (PropertyValue::Object(mut m), Accessor::Name(k) | Accessor::Key(k)) => {
                m.remove(k).unwrap_or(PropertyValue::Null)
            }
            (PropertyValue::Object(_), Accessor::Index(i)) => {
                return Err(format!(
                    "`{a}`: cannot index an object with [{i}]; use a key"
                ))
            }
            (PropertyValue::Array(mut l), Accessor::Index(i)) => {
                let n = l.len();
                if *i >= n {
                    return Err(format!(
                        "`{a}`: list index {i} out-of-bounds for list of length {n}"
                    ));
                }
                l.swap_remove(*i)
            }
            (PropertyValue::Array(_), _) => {
                return Err(format!("`{a}`: a list takes only integer subscripts"))
            }
            (other, _) => {
                return Err(format!(
                    "`{a}`: the receiver must be a list or object, not {}",
                    kind(&other)
                ))
            }
        };
    }
    Ok(wrap(cur, is_secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_count_graphemes() {
        for (s, n) in [
            ("hello", 5),
            ("café-thé", 8),
            ("\u{1F47E}-\u{1F579}\u{FE0F}", 3),
            (
                "\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}\u{200D}\u{1F466}-family-\u{1F476}",
                10,
            ),
            ("\u{1F1EB}\u{1F1F7}\u{1F1E9}\u{1F1EA}", 2),
            ("e\u{301}", 1),
        ] {
            assert_eq!(graphemes(s), n, "{s}");
        }
    }

    #[test]
    fn sha1_of_known_texts() {
        assert_eq!(
            hex::encode(sha1(b"")),
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
        assert_eq!(
            hex::encode(sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }

    #[test]
    fn floats_print_as_go_does() {
        for (f, want) in [
            (1.0, "1"),
            (1e6, "1e+06"),
            (123456.0, "123456"),
            (1.5, "1.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
        ] {
            assert_eq!(go_float(f), want, "{f}");
        }
    }
}
