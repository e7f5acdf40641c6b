//! [`PropertyMap`]: the map of property names to values every state,
//! registration and object value holds.
//!
//! It is a flat vector sorted by key ([`litemap::LiteMap`]) behind a
//! `BTreeMap`-shaped API. Nearly every map keel holds has a handful of
//! keys; a `BTreeMap` allocates an eleven-slot leaf (about 730 bytes with
//! 40-byte values) for even one entry, so a deployment's maps were mostly
//! empty slots. Lookups are a binary search, iteration is in key order (as
//! Pulumi writes maps), and bulk construction (`collect`, `extend`,
//! decoding) sorts once, so a large map built in any order costs
//! `n log n`, never `n²`. Only one-at-a-time `insert`s out of key order
//! shift the vector; callers that build large maps use the bulk forms.

use std::fmt;
use std::ops::{Deref, DerefMut, Index};

use litemap::LiteMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::property::PropertyValue;

/// A map of property names to values (inputs, outputs, objects), kept
/// sorted by key.
///
/// It dereferences to [`LiteMap`] for the rest of the map API (`get`,
/// `insert`, `remove`, `iter`, `keys`, `len`, `entry`, `retain`, ...).
#[derive(Clone, Default, PartialEq)]
pub struct PropertyMap(LiteMap<String, PropertyValue>);

impl PropertyMap {
    /// An empty map (no allocation).
    #[must_use]
    pub const fn new() -> Self {
        Self(LiteMap::new_vec())
    }

    /// An empty map with room for `n` entries.
    #[must_use]
    pub fn with_capacity(n: usize) -> Self {
        Self(LiteMap::with_capacity(n))
    }

    /// The number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the map has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values, mutably, in key order.
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut PropertyValue> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    /// The values, by value, in key order.
    pub fn into_values(self) -> impl DoubleEndedIterator<Item = PropertyValue> {
        self.0.into_tuple_vec().into_iter().map(|(_, v)| v)
    }
}

impl Deref for PropertyMap {
    type Target = LiteMap<String, PropertyValue>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for PropertyMap {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl fmt::Debug for PropertyMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter()).finish()
    }
}

/// `map["key"]`, as for a `BTreeMap`.
///
/// # Panics
/// When `key` is absent.
impl Index<&str> for PropertyMap {
    type Output = PropertyValue;

    fn index(&self, key: &str) -> &PropertyValue {
        match self.0.get(key) {
            Some(v) => v,
            None => panic!("no property `{key}` in the map"),
        }
    }
}

impl FromIterator<(String, PropertyValue)> for PropertyMap {
    fn from_iter<I: IntoIterator<Item = (String, PropertyValue)>>(iter: I) -> Self {
        Self(LiteMap::from_iter(iter))
    }
}

impl<const N: usize> From<[(String, PropertyValue); N]> for PropertyMap {
    fn from(pairs: [(String, PropertyValue); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl Extend<(String, PropertyValue)> for PropertyMap {
    fn extend<I: IntoIterator<Item = (String, PropertyValue)>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl IntoIterator for PropertyMap {
    type Item = (String, PropertyValue);
    type IntoIter = std::vec::IntoIter<(String, PropertyValue)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_tuple_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a PropertyMap {
    type Item = (&'a String, &'a PropertyValue);
    type IntoIter = <&'a LiteMap<String, PropertyValue> as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a mut PropertyMap {
    type Item = (&'a String, &'a mut PropertyValue);
    type IntoIter = <&'a mut LiteMap<String, PropertyValue> as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl Serialize for PropertyMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter())
    }
}

impl<'de> Deserialize<'de> for PropertyMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // LiteMap's decoder appends keys that arrive in order and sorts the
        // rest in once, keeping the last of duplicate keys (as `BTreeMap`).
        LiteMap::deserialize(d).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> PropertyValue {
        PropertyValue::String(v.to_owned())
    }

    /// Builds a map by `insert`s, by `collect`, by `extend` and by decoding,
    /// each from `pairs` in the given order, and requires every form to
    /// hold `want` (sorted, last duplicate wins) and encode in key order.
    fn check(pairs: &[(&str, &str)], want: &[(&str, &str)]) {
        let owned = || pairs.iter().map(|(k, v)| ((*k).to_owned(), s(v)));
        let mut inserted = PropertyMap::new();
        for (k, v) in owned() {
            inserted.insert(k, v);
        }
        let collected: PropertyMap = owned().collect();
        let mut extended = PropertyMap::from([("zz".to_owned(), s("x"))]);
        extended.remove("zz");
        extended.extend(owned());
        let json = format!(
            "{{{}}}",
            pairs
                .iter()
                .map(|(k, v)| format!("{k:?}:{v:?}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let decoded: PropertyMap = serde_json::from_str(&json).unwrap();
        let want_map: Vec<(String, PropertyValue)> =
            want.iter().map(|(k, v)| ((*k).to_owned(), s(v))).collect();
        for (how, m) in [
            ("insert", &inserted),
            ("collect", &collected),
            ("extend", &extended),
            ("decode", &decoded),
        ] {
            let got: Vec<(String, PropertyValue)> =
                m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(got, want_map, "{how} of {pairs:?}");
            let enc = serde_json::to_string(m).unwrap();
            let want_enc = format!(
                "{{{}}}",
                want.iter()
                    .map(|(k, v)| format!("{k:?}:{v:?}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            assert_eq!(enc, want_enc, "{how} of {pairs:?} encodes");
        }
    }

    #[test]
    fn keeps_keys_sorted_and_the_last_duplicate() {
        check(&[], &[]);
        check(&[("a", "1")], &[("a", "1")]);
        check(&[("a", "1"), ("b", "2")], &[("a", "1"), ("b", "2")]);
        check(&[("b", "2"), ("a", "1")], &[("a", "1"), ("b", "2")]);
        check(
            &[("c", "3"), ("a", "1"), ("c", "4"), ("b", "2"), ("a", "0")],
            &[("a", "0"), ("b", "2"), ("c", "4")],
        );
        check(&[("k", "1"), ("k", "2")], &[("k", "2")]);
    }

    #[test]
    fn reads_like_a_btree_map() {
        let mut m = PropertyMap::from([("b".to_owned(), s("2")), ("a".to_owned(), s("1"))]);
        assert_eq!(m["a"], s("1"));
        assert_eq!(m.get("c"), None);
        assert_eq!(format!("{m:?}"), r#"{"a": String("1"), "b": String("2")}"#);
        for v in m.values_mut() {
            *v = s("x");
        }
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(m.into_values().collect::<Vec<_>>(), [s("x"), s("x")]);
    }
}
