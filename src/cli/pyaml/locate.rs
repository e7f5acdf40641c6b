//! Lines of keys in a YAML or JSON file. The parsers report positions
//! only through their errors, so a key's line is found by decoding the
//! file again with a visitor that fails inside that key's own
//! deserialization (the technique of [`super::super::decode`]); only done
//! for the keys that errors name.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::expr::Seg;

/// The 1-based line of the key at `path` (of its last key; a trailing
/// index names its list's key), when the parser tells.
pub(crate) fn line(bytes: &[u8], json: bool, path: &[Seg]) -> Option<usize> {
    let last_key = path.iter().rposition(|s| matches!(s, Seg::Key(_)))?;
    let target = &path[..=last_key];
    if json {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let r = Find {
            at: Vec::new(),
            target,
        }
        .deserialize(&mut de);
        match r {
            Err(e) => Some(e.line()),
            Ok(()) => None,
        }
    } else {
        let de = serde_norway::Deserializer::from_slice(bytes);
        match (Find {
            at: Vec::new(),
            target,
        })
        .deserialize(de)
        {
            Err(e) => e.location().map(|l| l.line()),
            Ok(()) => None,
        }
    }
}

/// A visitor that fails at the key `target`.
struct Find<'t> {
    at: Vec<Seg>,
    target: &'t [Seg],
}

impl<'de> DeserializeSeed<'de> for Find<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        // Only descend while on the way to the target.
        if self.target.starts_with(&self.at) {
            d.deserialize_any(self)
        } else {
            d.deserialize_ignored_any(IgnoredAny).map(|_| ())
        }
    }
}

impl<'de> Visitor<'de> for Find<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let mut at = self.at.clone();
            at.push(Seg::Index(i));
            let seed = Find {
                at,
                target: self.target,
            };
            if seq.next_element_seed(seed)?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        loop {
            let key = map.next_key_seed(KeyFind {
                at: &self.at,
                target: self.target,
            })?;
            let Some(key) = key else {
                return Ok(());
            };
            let mut at = self.at.clone();
            at.push(Seg::Key(key));
            map.next_value_seed(Find {
                at,
                target: self.target,
            })?;
        }
    }
}

struct KeyFind<'a> {
    at: &'a [Seg],
    target: &'a [Seg],
}

impl<'de> DeserializeSeed<'de> for KeyFind<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_string(self)
    }
}

impl KeyFind<'_> {
    fn check<E: de::Error>(self, key: String) -> Result<String, E> {
        let mut here = self.at.to_vec();
        here.push(Seg::Key(key.clone()));
        if here == self.target {
            return Err(E::custom("found"));
        }
        Ok(key)
    }
}

impl<'de> Visitor<'de> for KeyFind<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        self.check(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        self.check(v)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        self.check(v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        self.check(v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        self.check(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Seg {
        Seg::Key(s.into())
    }

    #[test]
    fn finds_nested_keys_in_yaml_and_json() {
        let y = b"name: p\nresources:\n  a:\n    type: x:y\n    options:\n      bad: 1\n";
        assert_eq!(
            line(y, false, &[k("resources"), k("a"), k("options"), k("bad")]),
            Some(6)
        );
        assert_eq!(line(y, false, &[k("resources"), k("a")]), Some(3));
        assert_eq!(line(y, false, &[k("nope")]), None);
        let j = b"{\n\"resources\": {\n  \"a\": {\"type\": \"x:y\",\n \"list\": [1,\n 2]}}}";
        assert_eq!(
            line(j, true, &[k("resources"), k("a"), k("list"), Seg::Index(1)]),
            Some(4)
        );
    }
}
