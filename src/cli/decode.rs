//! Decoding a program file's YAML or JSON into a [`serde_json::Value`]
//! while refusing duplicate keys, which both parsers would otherwise
//! resolve silently by keeping the last one (and a resource declared twice
//! would lose its first declaration, deleting it from a deployed stack).
//!
//! The parsers report positions only through their errors, so the keys are
//! checked by a visitor whose key seed fails inside the key's own
//! deserialization: the error then carries the key's line. A first pass
//! finds the first duplicate (its second occurrence); a second pass stops
//! at the first occurrence of that key in that mapping.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A key that occurs twice in one mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Duplicate {
    /// The mapping's path (`resources.b.properties`; empty: the top level).
    pub(crate) mapping: String,
    /// The key.
    pub(crate) key: String,
    /// The line of its first occurrence (1-based, when the parser told).
    pub(crate) first_line: Option<usize>,
    /// The line of its second occurrence.
    pub(crate) second_line: Option<usize>,
}

/// Why a program file's text could not be decoded.
#[derive(Debug)]
pub(crate) enum Decode<E> {
    /// The parser's own error.
    Syntax(E),
    /// A duplicate key.
    Duplicate(Duplicate),
}

/// Decodes by running `run` with the seed (once, twice for a duplicate);
/// `line` reads the line an error points at.
pub(crate) fn decode<E: de::Error>(
    run: impl Fn(Seed<'_>) -> Result<Value, E>,
    line: impl Fn(&E) -> Option<usize>,
) -> Result<Value, Decode<E>> {
    let mut walk = Walk::default();
    let err = match run(Seed { walk: &mut walk }) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let Some((mapping, key)) = walk.found.take() else {
        return Err(Decode::Syntax(err));
    };
    let second_line = line(&err);
    let mut walk = Walk {
        target: Some((mapping.clone(), key.clone())),
        ..Walk::default()
    };
    let first_line = match run(Seed { walk: &mut walk }) {
        Err(e) if walk.found.is_some() => line(&e),
        _ => None,
    };
    Err(Decode::Duplicate(Duplicate {
        mapping: render(&mapping),
        key,
        first_line,
        second_line,
    }))
}

/// One step of a path: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

fn render(path: &[Seg]) -> String {
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

/// The state of one pass.
#[derive(Debug, Default)]
struct Walk {
    /// Where the visitor is.
    path: Vec<Seg>,
    /// Second pass: the mapping and key whose first occurrence to stop at.
    target: Option<(Vec<Seg>, String)>,
    /// The duplicate found (first pass) or the target reached (second).
    found: Option<(Vec<Seg>, String)>,
}

/// The seed a pass deserializes with.
pub(crate) struct Seed<'w> {
    walk: &'w mut Walk,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            self.walk.path.push(Seg::Index(out.len()));
            let item = seq.next_element_seed(Seed { walk: self.walk })?;
            self.walk.path.pop();
            match item {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed {
            walk: self.walk,
            seen: &out,
        })? {
            self.walk.path.push(Seg::Key(key.clone()));
            let v = map.next_value_seed(Seed { walk: self.walk })?;
            self.walk.path.pop();
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping's key: fails inside the key's deserialization (so the error
/// carries its position) on a duplicate, or on the second pass's target.
struct KeySeed<'w> {
    walk: &'w mut Walk,
    seen: &'w Map<String, Value>,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_string(self)
    }
}

impl KeySeed<'_> {
    fn check<E: de::Error>(self, key: String) -> Result<String, E> {
        let stop = match &self.walk.target {
            None => self.seen.contains_key(&key),
            Some((path, k)) => *k == key && *path == self.walk.path,
        };
        if stop {
            self.walk.found = Some((self.walk.path.clone(), key.clone()));
            return Err(E::custom(format!("duplicate key `{key}`")));
        }
        Ok(key)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        self.check(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        self.check(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Result<Value, Decode<serde_norway::Error>> {
        decode(
            |seed| seed.deserialize(serde_norway::Deserializer::from_str(text)),
            |e: &serde_norway::Error| e.location().map(|l| l.line()),
        )
    }

    fn json(text: &str) -> Result<Value, Decode<serde_json::Error>> {
        decode(
            |seed| {
                let mut de = serde_json::Deserializer::from_str(text);
                let v = seed.deserialize(&mut de)?;
                de.end()?;
                Ok(v)
            },
            |e: &serde_json::Error| Some(e.line()),
        )
    }

    #[test]
    fn values_decode_as_the_parsers_do() {
        let text = "a: 1\nb: [x, 2.5, null, true]\nc: { d: -3 }\n";
        let plain: Value = serde_norway::from_str(text).unwrap();
        assert_eq!(yaml(text).unwrap(), plain);
        let text = r#"{"a": 1, "b": ["x", 2.5, null, true], "c": {"d": -3}}"#;
        let plain: Value = serde_json::from_str(text).unwrap();
        assert_eq!(json(text).unwrap(), plain);
    }

    #[test]
    fn duplicates_name_both_lines_at_any_level() {
        let text = "name: p\nresources:\n  b:\n    type: a:b:C\n  c:\n    type: a:b:C\n  b:\n    type: a:b:D\n";
        let Err(Decode::Duplicate(d)) = yaml(text) else {
            panic!("a duplicate")
        };
        assert_eq!(
            d,
            Duplicate {
                mapping: "resources".into(),
                key: "b".into(),
                first_line: Some(3),
                second_line: Some(7),
            }
        );
        let text = "{\"resources\": {\"b\": {\"properties\": [{\n\"x\": 1,\n\"x\": 2}]}}}";
        let Err(Decode::Duplicate(d)) = json(text) else {
            panic!("a duplicate")
        };
        assert_eq!(d.mapping, "resources.b.properties[0]");
        assert_eq!((d.first_line, d.second_line), (Some(2), Some(3)));
    }

    #[test]
    fn syntax_errors_stay_the_parsers() {
        assert!(matches!(yaml("a: [unclosed\n"), Err(Decode::Syntax(_))));
        assert!(matches!(json("{\"a\": "), Err(Decode::Syntax(_))));
    }
}
