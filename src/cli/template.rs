//! Values of program files with interpolation (`cli.md` §2).
//!
//! A [`Template`] is a property value whose strings may hold references:
//! `${res.prop}` (an output, with a dotted path into objects and arrays),
//! `${res.id}`, `${res.urn}` and `${config.key}`; `$${` writes a literal
//! `${`. A string that is exactly one reference takes the referenced value
//! as it is (an object stays an object); references embedded in a longer
//! string are converted to text. `{"fn::secret": value}` marks a secret.
//! Secrecy and unknown values (during a preview) propagate: a string built
//! from a secret is secret, one built from an unknown value is unknown.
//!
//! Templates are parsed once, when the file is validated; evaluating one
//! needs the outputs of the resources it refers to ([`Env`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use crate::model::address::{Address, Key};
use crate::model::property::Secret;
use crate::model::{PropertyMap, PropertyValue};
use crate::source::goal::Registered;

/// The key of the secret function.
pub const FN_SECRET: &str = "fn::secret";

/// What a resource reference selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// `${res.id}`: the physical ID.
    Id,
    /// `${res.urn}`: the URN.
    Urn,
    /// `${res.a.b}`: an output, then a path into it (array indexes are
    /// numbers).
    Output(Vec<String>),
}

/// One reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// `${config.key}`.
    Config(String),
    /// `${res...}`, or `${res["key"]...}` / `${res[0]...}` for one
    /// expansion of an iterated declaration.
    Resource {
        /// The resource's name in the file.
        name: String,
        /// The expansion's key (iterated declarations).
        key: Option<Key>,
        /// What is selected.
        field: Field,
    },
    /// `${each.key}` or `${each.value...}`: the expansion being declared
    /// (its own, or its iterated parent's).
    Each(EachField),
}

/// What an `${each...}` reference selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EachField {
    /// `${each.key}`: the key (a string, or a `count` index).
    Key,
    /// `${each.value}` and a path into it.
    Value(Vec<String>),
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(k) => write!(f, "${{config.{k}}}"),
            Self::Resource { name, key, field } => {
                let key = key.as_ref().map(ToString::to_string).unwrap_or_default();
                match field {
                    Field::Id => write!(f, "${{{name}{key}.id}}"),
                    Field::Urn => write!(f, "${{{name}{key}.urn}}"),
                    Field::Output(path) => write!(f, "${{{name}{key}.{}}}", path.join(".")),
                }
            }
            Self::Each(EachField::Key) => f.write_str("${each.key}"),
            Self::Each(EachField::Value(path)) if path.is_empty() => f.write_str("${each.value}"),
            Self::Each(EachField::Value(path)) => write!(f, "${{each.value.{}}}", path.join(".")),
        }
    }
}

/// A piece of an interpolated string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Literal text.
    Text(String),
    /// A reference.
    Ref(Reference),
}

/// A property value that may hold references.
#[derive(Debug, Clone, PartialEq)]
pub enum Template {
    /// A value with no references (null, booleans, numbers, plain strings).
    Literal(PropertyValue),
    /// A string with at least one reference.
    Interpolated(Vec<Part>),
    /// An array.
    Array(Vec<Template>),
    /// An object.
    Object(BTreeMap<String, Template>),
    /// `{"fn::secret": value}`.
    Secret(Box<Template>),
}

/// Why a string's interpolation could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    /// `${` with no closing `}`.
    #[error("`${{` is not closed by `}}` in `{0}`")]
    Unclosed(String),
    /// `${}`.
    #[error("empty reference `${{}}` in `{0}`")]
    Empty(String),
    /// `${res}` without a field.
    #[error("reference `${{{0}}}` names no property: use `${{{0}.id}}`, `${{{0}.urn}}` or `${{{0}.<output>}}`")]
    NoField(String),
    /// `${config}` without a key.
    #[error("reference `${{config}}` names no config key: use `${{config.<key>}}`")]
    NoConfigKey,
    /// An empty path segment (`${a..b}`).
    #[error("reference `${{{0}}}` has an empty path segment")]
    EmptySegment(String),
    /// A malformed expansion key (`${a[x].id}`).
    #[error("reference `${{{0}}}`: an expansion is named `name[\"key\"]` or `name[0]`, then `.id`, `.urn` or `.<output>`")]
    BadKey(String),
    /// `${each}` or `${each.other}`.
    #[error("reference `${{{0}}}`: use `${{each.key}}` or `${{each.value}}` (with a path)")]
    BadEach(String),
}

/// Parses the references of a string.
///
/// # Errors
/// [`SyntaxError`] for an unclosed or malformed reference.
pub fn parse_string(s: &str) -> Result<Vec<Part>, SyntaxError> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        text.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("$${") {
            text.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after
                .find('}')
                .ok_or_else(|| SyntaxError::Unclosed(s.to_owned()))?;
            let inner = after[..end].trim();
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text)));
            }
            parts.push(Part::Ref(parse_reference(inner, s)?));
            rest = &after[end + 1..];
        } else {
            text.push('$');
            rest = &tail[1..];
        }
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

fn parse_reference(inner: &str, whole: &str) -> Result<Reference, SyntaxError> {
    if inner.is_empty() {
        return Err(SyntaxError::Empty(whole.to_owned()));
    }
    // The head ends at the first `.` or `[` (a key may hold dots).
    let split = inner.find(['.', '[']).unwrap_or(inner.len());
    let head = &inner[..split];
    let mut rest = &inner[split..];
    if head == "config" {
        return match rest.strip_prefix('.') {
            Some(k) if !k.is_empty() => Ok(Reference::Config(k.to_owned())),
            _ => Err(SyntaxError::NoConfigKey),
        };
    }
    if head.is_empty() {
        return Err(SyntaxError::EmptySegment(inner.to_owned()));
    }
    let mut key = None;
    if rest.starts_with('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| SyntaxError::BadKey(inner.to_owned()))?;
        let text = &rest[..=close];
        let parsed = Address::parse(&format!("k{text}"))
            .ok()
            .and_then(|a| a.0.into_iter().next())
            .and_then(|s| s.key)
            .ok_or_else(|| SyntaxError::BadKey(inner.to_owned()))?;
        key = Some(parsed);
        rest = &rest[close + 1..];
    }
    let path: Option<Vec<String>> = match rest {
        "" => None,
        r => match r.strip_prefix('.') {
            Some(p) => Some(p.split('.').map(str::to_owned).collect()),
            None => return Err(SyntaxError::BadKey(inner.to_owned())),
        },
    };
    if path
        .as_ref()
        .is_some_and(|p| p.iter().any(String::is_empty))
    {
        return Err(SyntaxError::EmptySegment(inner.to_owned()));
    }
    if head == "each" && key.is_none() {
        return match path.as_deref() {
            Some([k]) if k == "key" => Ok(Reference::Each(EachField::Key)),
            Some([v, p @ ..]) if v == "value" => Ok(Reference::Each(EachField::Value(p.to_vec()))),
            _ => Err(SyntaxError::BadEach(inner.to_owned())),
        };
    }
    let Some(path) = path else {
        return Err(SyntaxError::NoField(inner.to_owned()));
    };
    let field = match path.as_slice() {
        [one] if one == "id" => Field::Id,
        [one] if one == "urn" => Field::Urn,
        _ => Field::Output(path),
    };
    Ok(Reference::Resource {
        name: head.to_owned(),
        key,
        field,
    })
}

impl Template {
    /// Every reference in the template.
    pub fn references(&self) -> Vec<&Reference> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Reference>) {
        match self {
            Self::Literal(_) => {}
            Self::Interpolated(parts) => out.extend(parts.iter().filter_map(|p| match p {
                Part::Ref(r) => Some(r),
                Part::Text(_) => None,
            })),
            Self::Array(items) => items.iter().for_each(|t| t.collect(out)),
            Self::Object(map) => map.values().for_each(|t| t.collect(out)),
            Self::Secret(inner) => inner.collect(out),
        }
    }

    /// The value of a template with no references (a literal, or arrays
    /// and objects of them), known before the program runs.
    pub fn constant(&self) -> Option<PropertyValue> {
        Some(match self {
            Self::Literal(v) => v.clone(),
            Self::Interpolated(_) => return None,
            Self::Array(items) => {
                PropertyValue::Array(items.iter().map(Self::constant).collect::<Option<_>>()?)
            }
            Self::Object(map) => PropertyValue::Object(
                map.iter()
                    .map(|(k, t)| Some((k.clone(), t.constant()?)))
                    .collect::<Option<_>>()?,
            ),
            Self::Secret(inner) => PropertyValue::Secret(Secret::plaintext(inner.constant()?)),
        })
    }

    /// The names of the resources the template refers to.
    pub fn resources(&self) -> BTreeSet<&str> {
        self.references()
            .into_iter()
            .filter_map(|r| match r {
                Reference::Resource { name, .. } => Some(name.as_str()),
                Reference::Config(_) | Reference::Each(_) => None,
            })
            .collect()
    }

    /// Evaluates the template.
    ///
    /// # Errors
    /// [`EvalError`] when a referenced output is missing (outside a
    /// preview) or cannot be embedded in a string.
    pub fn eval(&self, env: &Env<'_>) -> Result<PropertyValue, EvalError> {
        Ok(match self {
            Self::Literal(v) => v.clone(),
            Self::Interpolated(parts) => match parts.as_slice() {
                [Part::Ref(r)] => env.lookup(r)?,
                _ => {
                    let mut text = String::new();
                    let mut secret = false;
                    for p in parts {
                        match p {
                            Part::Text(t) => text.push_str(t),
                            Part::Ref(r) => {
                                let v = env.lookup(r)?;
                                match embed(&v, &mut secret) {
                                    Embedded::Text(t) => text.push_str(&t),
                                    Embedded::Unknown => return Ok(PropertyValue::Computed),
                                    Embedded::NotText(what) => {
                                        return Err(EvalError::NotText {
                                            reference: r.to_string(),
                                            what,
                                        })
                                    }
                                }
                            }
                        }
                    }
                    wrap_secret(PropertyValue::String(text), secret)
                }
            },
            Self::Array(items) => PropertyValue::Array(
                items
                    .iter()
                    .map(|t| t.eval(env))
                    .collect::<Result<_, _>>()?,
            ),
            Self::Object(map) => PropertyValue::Object(
                map.iter()
                    .map(|(k, t)| Ok((k.clone(), t.eval(env)?)))
                    .collect::<Result<_, EvalError>>()?,
            ),
            Self::Secret(inner) => match inner.eval(env)? {
                s @ PropertyValue::Secret(_) => s,
                v => PropertyValue::Secret(Secret::plaintext(v)),
            },
        })
    }
}

fn wrap_secret(v: PropertyValue, secret: bool) -> PropertyValue {
    match v {
        PropertyValue::Secret(_) | PropertyValue::Computed => v,
        v if secret => PropertyValue::Secret(Secret::plaintext(v)),
        v => v,
    }
}

enum Embedded {
    Text(String),
    Unknown,
    NotText(&'static str),
}

/// A value as text inside a string.
fn embed(v: &PropertyValue, secret: &mut bool) -> Embedded {
    match v {
        PropertyValue::String(s) => Embedded::Text(s.clone()),
        PropertyValue::Number(n) => Embedded::Text(n.to_string()),
        PropertyValue::Bool(b) => Embedded::Text(b.to_string()),
        PropertyValue::Computed => Embedded::Unknown,
        PropertyValue::Secret(Secret::Plaintext(p)) => {
            *secret = true;
            embed(p.value(), secret)
        }
        PropertyValue::Secret(Secret::Ciphertext(_)) => Embedded::NotText("an encrypted secret"),
        PropertyValue::Output(o) => {
            if o.secret == Some(true) {
                *secret = true;
            }
            match &o.value {
                Some(v) => embed(v, secret),
                None => Embedded::Unknown,
            }
        }
        PropertyValue::Null => Embedded::NotText("null"),
        PropertyValue::Array(_) => Embedded::NotText("an array"),
        PropertyValue::Object(_) => Embedded::NotText("an object"),
        _ => Embedded::NotText("a special value"),
    }
}

/// Why a template could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The referenced resource has no such output.
    #[error("`{reference}`: `{resource}` has no output `{key}` (it has: {available})")]
    Missing {
        /// The reference.
        reference: String,
        /// The resource.
        resource: String,
        /// The missing key (the path so far).
        key: String,
        /// The keys it has.
        available: String,
    },
    /// A path steps into a value that is not an object or array.
    #[error("`{reference}`: `{key}` is {what}, which has no `{segment}`")]
    NotContainer {
        /// The reference.
        reference: String,
        /// The path so far.
        key: String,
        /// What the value is.
        what: &'static str,
        /// The segment that could not be followed.
        segment: String,
    },
    /// A value embedded in a longer string is not a scalar.
    #[error("`{reference}` is {what}, which cannot be embedded in a string")]
    NotText {
        /// The reference.
        reference: String,
        /// What the value is.
        what: &'static str,
    },
    /// The referenced resource was not registered (a bug in the runner).
    #[error("`{0}`: the resource was not registered")]
    Unresolved(String),
    /// The referenced expansion does not exist (its key is not among the
    /// declaration's `forEach` keys or `count`).
    #[error("`{0}`: no such expansion (the key is not among its declaration's `forEach` keys, or past its `count`)")]
    NoExpansion(String),
}

fn key_of(r: &Reference) -> Option<&Key> {
    match r {
        Reference::Resource { key, .. } => key.as_ref(),
        _ => None,
    }
}

/// What references resolve against.
#[derive(Debug)]
pub struct Env<'a> {
    /// The program's config.
    pub config: &'a BTreeMap<String, PropertyValue>,
    /// The registered resources, by name in the file.
    pub resources: &'a HashMap<String, Registered>,
    /// True in a preview: missing outputs and IDs are unknown, not errors.
    pub preview: bool,
    /// The expansion being declared: its key and value (`${each...}`).
    pub each: Option<&'a (PropertyValue, PropertyValue)>,
}

/// The name an expansion is found by in [`Env::resources`]: `name` for a
/// declaration that is not iterated, `name["key"]` / `name[0]` for one.
pub fn instance_name(name: &str, key: Option<&Key>) -> String {
    match key {
        Some(k) => format!("{name}{k}"),
        None => name.to_owned(),
    }
}

pub(crate) fn kind_of(v: &PropertyValue) -> &'static str {
    match v {
        PropertyValue::Null => "null",
        PropertyValue::Bool(_) => "a boolean",
        PropertyValue::Number(_) => "a number",
        PropertyValue::String(_) => "a string",
        PropertyValue::Array(_) => "an array",
        PropertyValue::Object(_) => "an object",
        _ => "a special value",
    }
}

impl Env<'_> {
    /// The value a reference stands for.
    ///
    /// # Errors
    /// As [`Template::eval`].
    pub fn lookup(&self, r: &Reference) -> Result<PropertyValue, EvalError> {
        let (name, field) = match r {
            Reference::Config(k) => {
                return self
                    .config
                    .get(k)
                    .cloned()
                    .ok_or_else(|| EvalError::Unresolved(r.to_string()))
            }
            Reference::Each(field) => {
                let Some((key, value)) = self.each else {
                    return Err(EvalError::Unresolved(r.to_string()));
                };
                return match field {
                    EachField::Key => Ok(key.clone()),
                    EachField::Value(path) if path.is_empty() => Ok(value.clone()),
                    EachField::Value(path) => {
                        let mut wrapped = PropertyMap::new();
                        wrapped.insert("value".to_owned(), value.clone());
                        let mut full = vec!["value".to_owned()];
                        full.extend(path.iter().cloned());
                        self.walk(r, "each", &wrapped, &full)
                    }
                };
            }
            Reference::Resource { name, key, field } => (instance_name(name, key.as_ref()), field),
        };
        let name = &name;
        let Some(reg) = self.resources.get(name) else {
            // An expansion a preview cannot know yet (its keys come from
            // an unknown output).
            if self.preview && key_of(r).is_some() {
                return Ok(PropertyValue::Computed);
            }
            return Err(match key_of(r) {
                Some(_) => EvalError::NoExpansion(r.to_string()),
                None => EvalError::Unresolved(r.to_string()),
            });
        };
        match field {
            Field::Urn => Ok(PropertyValue::String(reg.urn.as_str().to_owned())),
            Field::Id if reg.id.is_empty() || reg.id == crate::model::urn::UNKNOWN_ID => {
                Ok(if self.preview {
                    PropertyValue::Computed
                } else {
                    PropertyValue::String(reg.id.clone())
                })
            }
            Field::Id => Ok(PropertyValue::String(reg.id.clone())),
            Field::Output(path) => self.walk(r, name, &reg.outputs, path),
        }
    }

    fn walk(
        &self,
        r: &Reference,
        resource: &str,
        outputs: &PropertyMap,
        path: &[String],
    ) -> Result<PropertyValue, EvalError> {
        let mut secret = false;
        let Some((first, rest)) = path.split_first() else {
            return Err(EvalError::Unresolved(r.to_string()));
        };
        let missing = |key: String, available: Vec<&String>| {
            if self.preview {
                Ok(PropertyValue::Computed)
            } else {
                Err(EvalError::Missing {
                    reference: r.to_string(),
                    resource: resource.to_owned(),
                    key,
                    available: if available.is_empty() {
                        "no outputs".into()
                    } else {
                        available
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                })
            }
        };
        let Some(mut cur) = outputs.get(first).cloned() else {
            return missing(first.clone(), outputs.keys().collect());
        };
        let mut so_far = first.clone();
        for seg in rest {
            // See through secrets and output values.
            loop {
                match cur {
                    PropertyValue::Secret(Secret::Plaintext(p)) => {
                        secret = true;
                        cur = p.value().clone();
                    }
                    PropertyValue::Output(o) => {
                        secret |= o.secret == Some(true);
                        match o.value {
                            Some(v) => cur = *v,
                            None => return Ok(PropertyValue::Computed),
                        }
                    }
                    other => {
                        cur = other;
                        break;
                    }
                }
            }
            let next = match &cur {
                PropertyValue::Computed => return Ok(PropertyValue::Computed),
                PropertyValue::Object(m) => match m.get(seg) {
                    Some(v) => v.clone(),
                    None => return missing(format!("{so_far}.{seg}"), m.keys().collect()),
                },
                PropertyValue::Array(a) => match seg.parse::<usize>().ok().and_then(|i| a.get(i)) {
                    Some(v) => v.clone(),
                    None => return missing(format!("{so_far}.{seg}"), Vec::new()),
                },
                other => {
                    return Err(EvalError::NotContainer {
                        reference: r.to_string(),
                        key: so_far,
                        what: kind_of(other),
                        segment: seg.clone(),
                    })
                }
            };
            so_far = format!("{so_far}.{seg}");
            cur = next;
        }
        Ok(wrap_secret(cur, secret))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(name: &str, path: &[&str]) -> Part {
        Part::Ref(Reference::Resource {
            name: name.into(),
            key: None,
            field: Field::Output(path.iter().map(|s| (*s).to_owned()).collect()),
        })
    }

    #[test]
    fn parses_references() {
        assert_eq!(
            parse_string("shop-${config.env}").unwrap(),
            vec![
                Part::Text("shop-".into()),
                Part::Ref(Reference::Config("env".into()))
            ]
        );
        assert_eq!(
            parse_string("${bucket.website.index}").unwrap(),
            vec![res("bucket", &["website", "index"])]
        );
        assert_eq!(
            parse_string("${ b.id }").unwrap(),
            vec![Part::Ref(Reference::Resource {
                name: "b".into(),
                key: None,
                field: Field::Id
            })]
        );
        // Expansions: a key may hold dots; `each` refers to the expansion.
        assert_eq!(
            parse_string(r#"${s["a.b"].ip.v}"#).unwrap(),
            vec![Part::Ref(Reference::Resource {
                name: "s".into(),
                key: Some(Key::Name("a.b".into())),
                field: Field::Output(vec!["ip".into(), "v".into()]),
            })]
        );
        assert_eq!(
            parse_string("${s[3].id}").unwrap(),
            vec![Part::Ref(Reference::Resource {
                name: "s".into(),
                key: Some(Key::Index(3)),
                field: Field::Id,
            })]
        );
        assert_eq!(
            parse_string("${each.value.size}").unwrap(),
            vec![Part::Ref(Reference::Each(EachField::Value(vec![
                "size".into()
            ])))]
        );
        for bad in [
            "${s[x].id}",
            r#"${s["a"]}"#,
            r#"${s["a"]x}"#,
            "${each}",
            "${each.other}",
        ] {
            assert!(parse_string(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_string("a $${x} $ b").unwrap(),
            vec![Part::Text("a ${x} $ b".into())]
        );
        assert_eq!(
            parse_string("x${"),
            Err(SyntaxError::Unclosed("x${".into()))
        );
        assert_eq!(parse_string("${}"), Err(SyntaxError::Empty("${}".into())));
        assert_eq!(parse_string("${b}"), Err(SyntaxError::NoField("b".into())));
        assert_eq!(parse_string("${config}"), Err(SyntaxError::NoConfigKey));
        assert!(matches!(
            parse_string("${a..b}"),
            Err(SyntaxError::EmptySegment(_))
        ));
    }

    fn env_with<'a>(
        config: &'a BTreeMap<String, PropertyValue>,
        resources: &'a HashMap<String, Registered>,
        preview: bool,
    ) -> Env<'a> {
        Env {
            config,
            resources,
            preview,
            each: None,
        }
    }

    #[test]
    fn evaluates_whole_embedded_secret_and_unknown() {
        let urn = crate::model::Urn::parse("urn:pulumi:dev::p::a:b:C::b").unwrap();
        let mut outputs = PropertyMap::new();
        outputs.insert("endpoint".into(), "b.example".into());
        outputs.insert(
            "pw".into(),
            PropertyValue::Secret(Secret::plaintext("hunter2".into())),
        );
        let mut website = PropertyMap::new();
        website.insert("index".into(), "index.html".into());
        outputs.insert("website".into(), PropertyValue::Object(website.clone()));
        outputs.insert("later".into(), PropertyValue::Computed);
        let resources: HashMap<String, Registered> = [(
            "b".to_owned(),
            Registered {
                urn: urn.clone(),
                id: "b-1".into(),
                outputs,
            },
        )]
        .into();
        let config: BTreeMap<String, PropertyValue> = [("env".to_owned(), "prod".into())].into();
        let env = env_with(&config, &resources, false);
        let t = |s: &str| Template::Interpolated(parse_string(s).unwrap());
        assert_eq!(
            t("${b.website}").eval(&env).unwrap(),
            PropertyValue::Object(website)
        );
        assert_eq!(
            t("https://${b.endpoint}/${b.website.index}?${config.env}")
                .eval(&env)
                .unwrap(),
            PropertyValue::from("https://b.example/index.html?prod")
        );
        assert_eq!(t("${b.id}").eval(&env).unwrap(), "b-1".into());
        assert_eq!(t("${b.urn}").eval(&env).unwrap(), urn.as_str().into());
        assert_eq!(
            t("pw=${b.pw}").eval(&env).unwrap(),
            PropertyValue::Secret(Secret::plaintext("pw=hunter2".into()))
        );
        assert_eq!(
            t("x${b.later}").eval(&env).unwrap(),
            PropertyValue::Computed
        );
        assert!(matches!(
            t("${b.nope}").eval(&env),
            Err(EvalError::Missing { .. })
        ));
        assert!(matches!(
            t("${b.endpoint.x}").eval(&env),
            Err(EvalError::NotContainer { .. })
        ));
        assert!(matches!(
            t("x${b.website}").eval(&env),
            Err(EvalError::NotText { .. })
        ));
        let preview = env_with(&config, &resources, true);
        assert_eq!(
            t("${b.nope}").eval(&preview).unwrap(),
            PropertyValue::Computed
        );
        let secret = Template::Secret(Box::new(Template::Literal("s".into())));
        assert_eq!(
            secret.eval(&env).unwrap(),
            PropertyValue::Secret(Secret::plaintext("s".into()))
        );
    }
}
