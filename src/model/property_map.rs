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
//!
//! The entries are shared, copy-on-write: cloning a map is a reference
//! count, and the first mutation through a shared handle copies the
//! entries once ([`Arc::make_mut`]). A state's inputs and outputs pass
//! through the planner, the provider's Check and Diff, the executor and
//! the journal; each of those used to copy every key and value. An empty
//! map holds nothing at all (no allocation).

use std::fmt;
use std::ops::{Deref, DerefMut, Index};
use std::sync::Arc;

use litemap::LiteMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::property::PropertyValue;

/// The entries of a map.
type Entries = LiteMap<String, PropertyValue>;

/// What every empty map reads through.
static EMPTY: Entries = LiteMap::new_vec();

/// A map of property names to values (inputs, outputs, objects), kept
/// sorted by key; clones share the entries until one of them is changed.
///
/// It dereferences to [`LiteMap`] for the rest of the map API (`get`,
/// `insert`, `remove`, `iter`, `keys`, `len`, `entry`, `retain`, ...).
/// A mutable dereference copies entries that another clone still shares,
/// so loops that only sometimes change a map should look before they
/// take it mutably.
#[derive(Clone, Default)]
pub struct PropertyMap(Option<Arc<Entries>>);

impl PropertyMap {
    /// An empty map (no allocation).
    #[must_use]
    pub const fn new() -> Self {
        Self(None)
    }

    /// An empty map with room for `n` entries.
    #[must_use]
    pub fn with_capacity(n: usize) -> Self {
        if n == 0 {
            return Self(None);
        }
        Self(Some(Arc::new(LiteMap::with_capacity(n))))
    }

    /// The number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether the map has no entries.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    /// Whether `self` and `other` share their entries (a clone of the
    /// other, neither changed since), so they are equal without a look.
    #[must_use]
    pub fn shares_with(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The values, mutably, in key order (copying shared entries first).
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut PropertyValue> {
        self.entries_mut().iter_mut().map(|(_, v)| v)
    }

    /// The values, by value, in key order.
    pub fn into_values(self) -> impl DoubleEndedIterator<Item = PropertyValue> {
        self.into_iter().map(|(_, v)| v)
    }

    fn entries(&self) -> &Entries {
        self.0.as_deref().unwrap_or(&EMPTY)
    }

    fn entries_mut(&mut self) -> &mut Entries {
        Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }

    /// A map of `entries`, built whole (collected or decoded), kept at its
    /// size: growing one entry at a time leaves room to spare (a vector's
    /// first allocation holds four entries), and a built map is rarely
    /// grown again.
    fn from_entries(entries: Entries) -> Self {
        let mut sorted = entries.into_tuple_vec();
        sorted.shrink_to_fit();
        Self::from_sorted(sorted)
    }

    /// A map of entries already sorted by key, without duplicates, held as
    /// they are; an empty one allocates nothing.
    fn from_sorted(sorted: Vec<(String, PropertyValue)>) -> Self {
        if sorted.is_empty() {
            return Self(None);
        }
        Self(Some(Arc::new(LiteMap::from_sorted_store_unchecked(sorted))))
    }
}

impl PartialEq for PropertyMap {
    fn eq(&self, other: &Self) -> bool {
        self.shares_with(other) || self.entries() == other.entries()
    }
}

impl Deref for PropertyMap {
    type Target = Entries;

    fn deref(&self) -> &Self::Target {
        self.entries()
    }
}

impl DerefMut for PropertyMap {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.entries_mut()
    }
}

impl fmt::Debug for PropertyMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.entries().iter()).finish()
    }
}

/// `map["key"]`, as for a `BTreeMap`.
///
/// # Panics
/// When `key` is absent.
impl Index<&str> for PropertyMap {
    type Output = PropertyValue;

    fn index(&self, key: &str) -> &PropertyValue {
        match self.entries().get(key) {
            Some(v) => v,
            None => panic!("no property `{key}` in the map"),
        }
    }
}

impl FromIterator<(String, PropertyValue)> for PropertyMap {
    fn from_iter<I: IntoIterator<Item = (String, PropertyValue)>>(iter: I) -> Self {
        Self::from_entries(LiteMap::from_iter(iter))
    }
}

impl<const N: usize> From<[(String, PropertyValue); N]> for PropertyMap {
    fn from(pairs: [(String, PropertyValue); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl Extend<(String, PropertyValue)> for PropertyMap {
    fn extend<I: IntoIterator<Item = (String, PropertyValue)>>(&mut self, iter: I) {
        self.entries_mut().extend(iter);
    }
}

impl IntoIterator for PropertyMap {
    type Item = (String, PropertyValue);
    type IntoIter = std::vec::IntoIter<(String, PropertyValue)>;

    fn into_iter(self) -> Self::IntoIter {
        match self.0 {
            Some(entries) => Arc::unwrap_or_clone(entries).into_tuple_vec().into_iter(),
            None => Vec::new().into_iter(),
        }
    }
}

impl<'a> IntoIterator for &'a PropertyMap {
    type Item = (&'a String, &'a PropertyValue);
    type IntoIter = <&'a Entries as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        self.entries().iter()
    }
}

impl<'a> IntoIterator for &'a mut PropertyMap {
    type Item = (&'a String, &'a mut PropertyValue);
    type IntoIter = <&'a mut Entries as IntoIterator>::IntoIter;

    fn into_iter(self) -> Self::IntoIter {
        self.entries_mut().iter_mut()
    }
}

impl Serialize for PropertyMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.entries().iter())
    }
}

impl<'de> Deserialize<'de> for PropertyMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MapVisitor)
    }
}

/// The most entries a thread's decoding scratch keeps room for between
/// maps (a larger one is freed after use).
const SCRATCH_KEEP: usize = 1 << 10;

thread_local! {
    /// Where a decoded map's entries gather before they move into one
    /// allocation of the exact size (a state's maps are decoded by the
    /// tens of thousands; growing each vector from empty cost a `realloc`
    /// or two per map, and a shrink after).
    static SCRATCH: std::cell::Cell<Vec<(String, PropertyValue)>> =
        const { std::cell::Cell::new(Vec::new()) };
}

struct MapVisitor;

impl<'de> serde::de::Visitor<'de> for MapVisitor {
    type Value = PropertyMap;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of property names to values")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut access: A,
    ) -> Result<PropertyMap, A::Error> {
        // A nested object's visitor finds the scratch taken (empty) and
        // gathers in a vector of its own.
        let mut scratch = SCRATCH.with(std::cell::Cell::take);
        let read = loop {
            match access.next_entry::<String, PropertyValue>() {
                Ok(Some(entry)) => scratch.push(entry),
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        // Moved out into the exact size; the scratch keeps its room.
        let entries = read.map(|()| {
            let mut exact = Vec::with_capacity(scratch.len());
            exact.append(&mut scratch);
            exact
        });
        scratch.clear();
        if scratch.capacity() <= SCRATCH_KEEP {
            SCRATCH.with(|s| s.set(scratch));
        }
        let entries = entries?;
        if entries.windows(2).all(|w| w[0].0 < w[1].0) {
            // In key order, as keel and Pulumi write maps: kept as read.
            return Ok(PropertyMap::from_sorted(entries));
        }
        // Out of order or with duplicate keys: sorted once, the last of
        // duplicate keys kept (as `BTreeMap`).
        Ok(entries.into_iter().collect())
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
    fn clones_share_until_one_is_changed() {
        let a = PropertyMap::from([("k".to_owned(), s("1")), ("l".to_owned(), s("2"))]);
        let mut b = a.clone();
        assert!(b.shares_with(&a), "a clone shares the entries");
        assert_eq!(a, b);
        // A read-only look keeps the sharing; a change copies, once.
        assert_eq!(b.get("k"), Some(&s("1")));
        assert!(b.shares_with(&a));
        b.insert("k".to_owned(), s("changed"));
        assert!(!b.shares_with(&a));
        assert_eq!(a["k"], s("1"), "the original is untouched");
        assert_eq!(b["k"], s("changed"));
        assert_ne!(a, b);
        for v in b.values_mut() {
            *v = s("1");
        }
        b.insert("k".to_owned(), s("1"));
        b.insert("l".to_owned(), s("2"));
        assert_eq!(a, b, "equal by content once the values match again");
        // Every form of empty is equal and encodes the same.
        let mut emptied = a.clone();
        emptied.retain(|_, _| false);
        for e in [PropertyMap::new(), PropertyMap::with_capacity(4), emptied] {
            assert_eq!(e, PropertyMap::default());
            assert!(e.is_empty());
            assert_eq!(serde_json::to_string(&e).unwrap(), "{}");
        }
        let decoded: PropertyMap = serde_json::from_str("{}").unwrap();
        assert!(!decoded.shares_with(&PropertyMap::new()));
        assert_eq!(decoded, PropertyMap::new());
        // Taking a shared map apart by value leaves the other intact.
        let values: Vec<PropertyValue> = a.clone().into_values().collect();
        assert_eq!(values, [s("1"), s("2")]);
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn decodes_nested_maps_and_recovers_from_a_bad_one() {
        let text = r#"{"b":{"y":"1","x":"2","y":"3"},"a":{"k":{"z":"9"}},"c":{}}"#;
        let m: PropertyMap = serde_json::from_str(text).unwrap();
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"a":{"k":{"z":"9"}},"b":{"x":"2","y":"3"},"c":{}}"#
        );
        let PropertyValue::Object(b) = &m["b"] else {
            panic!("b is an object: {m:?}");
        };
        assert_eq!(b.keys().collect::<Vec<_>>(), ["x", "y"]);
        // A map that fails part-way leaves nothing behind for the next.
        assert!(serde_json::from_str::<PropertyMap>(r#"{"p":"1","q":{"r":}}"#).is_err());
        let next: PropertyMap = serde_json::from_str(r#"{"s":"1"}"#).unwrap();
        assert_eq!(next, PropertyMap::from([("s".to_owned(), s("1"))]));
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
