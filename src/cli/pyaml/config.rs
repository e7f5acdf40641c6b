//! A Pulumi YAML program's config (`pulumi-yaml.md` §6) from the stack's
//! config file: a declared key the stack sets takes the stack's value
//! (which must be compatible with the declared type; a string is parsed
//! as the type), else its `default`; `secret: true` makes it secret
//! (never stored in plaintext). A declared key with neither is an error
//! before anything runs, as is a default of another type.

use std::collections::BTreeMap;

use super::expr::Expr;
use super::template::{ConfigType, PyamlProgram};
use super::{Issue, PyamlError};
use crate::model::property::Secret;
use crate::model::PropertyValue;

/// A literal expression's value (`fn::secret` allowed).
fn literal(e: &Expr) -> Option<PropertyValue> {
    Some(match e {
        Expr::Null => PropertyValue::Null,
        Expr::Bool(b) => PropertyValue::Bool(*b),
        Expr::Number(n) => PropertyValue::Number(n.clone()),
        Expr::Text(t) => PropertyValue::String(t.clone()),
        Expr::List(l) => PropertyValue::Array(l.iter().map(literal).collect::<Option<_>>()?),
        Expr::Object(m) => PropertyValue::Object(
            m.iter()
                .map(|(k, v)| Some((k.as_text()?.to_owned(), literal(v)?)))
                .collect::<Option<_>>()?,
        ),
        Expr::Call(super::expr::Func::Secret, inner) => {
            PropertyValue::Secret(Secret::plaintext(literal(inner)?))
        }
        _ => return None,
    })
}

/// Parses a config string as Pulumi does (§6): a leading zero keeps a
/// string, then integer, bool, float, JSON, string.
fn parse_text(s: &str) -> PropertyValue {
    if s.len() > 1 && s.starts_with('0') && !s.starts_with("0.") {
        return PropertyValue::String(s.to_owned());
    }
    if let Ok(i) = s.parse::<i64>() {
        return PropertyValue::Number(i.into());
    }
    match s {
        "true" => return PropertyValue::Bool(true),
        "false" => return PropertyValue::Bool(false),
        _ => {}
    }
    if let Some(n) = s.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
        return PropertyValue::Number(n);
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(s) {
        if let Ok(v) = PropertyValue::from_json(&v) {
            return v;
        }
    }
    PropertyValue::String(s.to_owned())
}

/// `v` as `ty`, if compatible.
fn coerce(v: &PropertyValue, text: &str, ty: &ConfigType) -> Option<PropertyValue> {
    if let PropertyValue::Secret(Secret::Plaintext(p)) = v {
        return coerce(p.value(), text, ty).map(|v| PropertyValue::Secret(Secret::plaintext(v)));
    }
    let v = match (v, ty) {
        (PropertyValue::String(s), ConfigType::String) => {
            return Some(PropertyValue::String(s.clone()))
        }
        (_, ConfigType::String) => return Some(PropertyValue::String(text.to_owned())),
        (PropertyValue::String(s), _) => parse_text(s),
        (other, _) => other.clone(),
    };
    let found = ConfigType::of(&v)?;
    let ok = match (ty, &found) {
        (ConfigType::Number, ConfigType::Int | ConfigType::Number) => true,
        (ConfigType::List(_), ConfigType::List(_)) => true,
        (ConfigType::Int, ConfigType::Number) => {
            matches!(&v, PropertyValue::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0))
        }
        (a, b) => a == b,
    };
    ok.then_some(v)
}

impl PyamlProgram {
    /// Takes the stack's config (resolved, secure values decrypted).
    ///
    /// # Errors
    /// [`PyamlError::Invalid`] naming each declaration that has no value,
    /// or a value of another type.
    pub fn apply_config(&mut self, config: &[crate::config::Resolved]) -> Result<(), PyamlError> {
        let own = format!("{}:", self.name);
        let mut values: BTreeMap<String, PropertyValue> = BTreeMap::new();
        let mut texts: BTreeMap<String, String> = BTreeMap::new();
        self.stack.clear();
        for r in config {
            self.stack.insert(r.key.clone(), r.value.clone());
            let bare = r.key.strip_prefix(&own).unwrap_or(&r.key).to_owned();
            let v = match &r.value {
                PropertyValue::String(s) => parse_text(s),
                other => other.clone(),
            };
            values.insert(bare.clone(), v);
            texts.insert(bare, r.text.clone());
        }
        let mut issues = Vec::new();
        for d in &self.config {
            let issue = |message: String| Issue {
                file: self.path.clone(),
                line: d.line,
                key: super::expr::render(&d.path),
                message,
            };
            let name = d.name.strip_prefix(&own).unwrap_or(&d.name);
            let given = config
                .iter()
                .find(|r| r.key.strip_prefix(&own).unwrap_or(&r.key) == name);
            let value = match (given, &d.default) {
                (Some(r), _) => {
                    let v = match &d.ty {
                        Some(t) => match coerce(&r.value, &r.text, t) {
                            Some(v) => v,
                            None => {
                                issues.push(issue(format!(
                                    "config key `{name}` cannot have conflicting types: the stack sets a value that is not {t}"
                                )));
                                continue;
                            }
                        },
                        None => values.get(name).cloned().unwrap_or_default(),
                    };
                    if d.secret == Some(false) && r.secret {
                        issues.push(issue(format!(
                            "config key `{name}` is secret in the stack but declared `secret: false`"
                        )));
                        continue;
                    }
                    v
                }
                (None, Some(e)) => {
                    let Some(v) = literal(e) else {
                        issues.push(issue("the default must be a literal value".into()));
                        continue;
                    };
                    if let Some(t) = &d.ty {
                        let text = match &v {
                            PropertyValue::String(s) => s.clone(),
                            other => other.to_json().to_string(),
                        };
                        let compatible = match (&v, t) {
                            (PropertyValue::String(_), ConfigType::String) => true,
                            (_, ConfigType::String) => false,
                            _ => coerce(&v, &text, t).is_some(),
                        };
                        if !compatible {
                            issues.push(issue(format!(
                                "the default is not of the declared type {t}"
                            )));
                            continue;
                        }
                    }
                    v
                }
                (None, None) => {
                    issues.push(issue(format!(
                        "missing required configuration variable `{name}`; set it with `keel config set {name} VALUE`"
                    )));
                    continue;
                }
            };
            let value = if d.secret == Some(true) {
                match value {
                    v @ PropertyValue::Secret(_) => v,
                    v => PropertyValue::Secret(Secret::plaintext(v)),
                }
            } else {
                value
            };
            values.insert(d.key.clone(), value);
        }
        if !issues.is_empty() {
            return Err(PyamlError::Invalid(issues));
        }
        self.values = values;
        Ok(())
    }

    /// Whether the program creates secrets (a secret config value,
    /// `fn::secret`, `additionalSecretOutputs`): its stack then needs a
    /// secrets provider, checked before anything runs. Secrets that only
    /// come from providers are refused as they are registered.
    pub fn creates_secrets(&self) -> bool {
        fn has(e: &Expr) -> bool {
            match e {
                Expr::Call(super::expr::Func::Secret, _) => true,
                Expr::Call(_, a) | Expr::StackReference(_, a) => has(a),
                Expr::List(l) => l.iter().any(has),
                Expr::Object(m) => m.iter().any(|(k, v)| has(k) || has(v)),
                Expr::AssetArchive(m) => m.iter().any(|(_, v)| has(v)),
                Expr::Invoke(i) => i.arguments.as_ref().is_some_and(has),
                _ => false,
            }
        }
        let resource = |r: &super::template::ResourceDecl| {
            let (edge, other) = r.expressions();
            !r.options.additional_secret_outputs.is_empty()
                || edge.into_iter().chain(other).any(has)
        };
        self.values.values().any(PropertyValue::contains_secrets)
            || self.config.iter().any(|d| d.secret == Some(true))
            || self.variables.iter().any(|(_, e, _)| has(e))
            || self.outputs.iter().any(|(_, e, _)| has(e))
            || self.resources.iter().any(resource)
    }

    /// The stack's config values (`ns:key`), once applied.
    pub fn stack_values(&self) -> BTreeMap<String, PropertyValue> {
        self.stack.clone()
    }
}
