//! [`Rare`]: a value that is empty on nearly every resource, held behind
//! one pointer that is null while it is empty.
//!
//! `State` has sixteen fields (aliases, timeouts, hooks, stack traces, the
//! `ignoreChanges`-style lists) that almost no resource sets. Each is a
//! `Rare<T>` (one word), and together they are a `StateRare` behind one
//! more `Rare` in the state (`json_object!`'s `[rare]` fields), so a state
//! that sets none of them pays one word for all sixteen. A `Rare<T>` reads
//! as a `T` (through `Deref`: an unset value reads as the shared empty
//! one), compares, encodes and decodes as its `T` does. A single field
//! ([`RareField`]) also dereferences mutably, allocating on that first
//! mutable access; a box of several fields is written only through
//! [`Rare::edit`], which keeps the box only when something in it is set.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::LazyLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::keys::JsonEmpty;
use super::property::PropertyValue;
use super::state::CustomTimeouts;
use super::urn::Urn;

/// A value type with one shared empty value, which an unset [`Rare`]
/// reads as.
pub trait RareValue: Default + PartialEq + 'static {
    /// The empty value (equal to `Default::default()`).
    fn empty() -> &'static Self;
}

/// A [`RareValue`] that is one field, so that a mutable dereference of
/// its [`Rare`] may box it. A box of several fields (a `json_object!`'s
/// rare box) is not one: it is written through [`Rare::edit`], so that a
/// write of nothing (or a walk that changes nothing) leaves every state's
/// box unallocated.
pub trait RareField: RareValue {}

macro_rules! rare_value {
    ($($t:ty => $e:expr),* $(,)?) => {$(
        impl RareValue for $t {
            fn empty() -> &'static Self {
                static EMPTY: LazyLock<$t> = LazyLock::new(|| $e);
                &EMPTY
            }
        }
        impl RareField for $t {}
    )*};
}

rare_value! {
    String => String::new(),
    Vec<String> => Vec::new(),
    Vec<Urn> => Vec::new(),
    Urn => Urn::default(),
    serde_json::Value => serde_json::Value::Null,
    PropertyValue => PropertyValue::Null,
    CustomTimeouts => CustomTimeouts::default(),
}

/// A field that is usually empty: null while empty, boxed once set.
#[derive(Clone, Default)]
pub struct Rare<T>(Option<Box<T>>);

impl<T: RareValue> Rare<T> {
    /// `v`, boxed unless it is empty.
    pub fn new(v: T) -> Self {
        if v == T::default() {
            Self(None)
        } else {
            Self(Some(Box::new(v)))
        }
    }

    /// The value.
    pub fn into_inner(self) -> T {
        self.0.map(|b| *b).unwrap_or_default()
    }

    /// The value, if it was ever set (a mutable borrow that allocates
    /// nothing when it was not).
    pub fn get_mut(&mut self) -> Option<&mut T> {
        self.0.as_deref_mut()
    }

    /// Whether the value is boxed (it was set and not tidied since).
    pub fn is_boxed(&self) -> bool {
        self.0.is_some()
    }

    /// Calls `f` on the value, and leaves it boxed only if it is then not
    /// empty: an edit that sets nothing (or clears what was set) allocates
    /// nothing and keeps nothing. A mutable dereference, by contrast,
    /// boxes the value whatever is written; for a box of several fields,
    /// `edit` is the way to write them.
    pub fn edit<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        match &mut self.0 {
            Some(b) => {
                let r = f(b);
                if **b == *T::empty() {
                    self.0 = None;
                }
                r
            }
            None => {
                let mut v = T::default();
                let r = f(&mut v);
                if v != *T::empty() {
                    self.0 = Some(Box::new(v));
                }
                r
            }
        }
    }
}

impl<T: RareValue> Deref for Rare<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self.0.as_deref() {
            Some(v) => v,
            None => T::empty(),
        }
    }
}

impl<T: RareField> DerefMut for Rare<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0.get_or_insert_with(Box::default)
    }
}

impl<'a, T> IntoIterator for &'a Rare<Vec<T>>
where
    Vec<T>: RareValue,
{
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        (**self).iter()
    }
}

impl<'a, T> IntoIterator for &'a mut Rare<Vec<T>> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;

    /// Allocates nothing when the list was never set.
    fn into_iter(self) -> Self::IntoIter {
        match self.0.as_deref_mut() {
            Some(v) => v.iter_mut(),
            None => <&mut [T]>::default().iter_mut(),
        }
    }
}

impl<T: RareValue> From<T> for Rare<T> {
    fn from(v: T) -> Self {
        Self::new(v)
    }
}

impl<T: RareValue> PartialEq for Rare<T> {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            // Both unset: both the empty value, with nothing to compare
            // (a box of several fields, unset, is compared field by field
            // after every `edit`; this keeps that a check of pointers).
            (None, None) => true,
            _ => **self == **other,
        }
    }
}

impl<T: RareValue + fmt::Debug> fmt::Debug for Rare<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: RareValue + fmt::Display> fmt::Display for Rare<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: RareValue + Serialize> Serialize for Rare<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de, T: RareValue + Deserialize<'de>> Deserialize<'de> for Rare<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Self::new)
    }
}

impl<T: RareValue + JsonEmpty> JsonEmpty for Rare<T> {
    fn json_empty(&self) -> bool {
        (**self).json_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_value_is_not_boxed_and_reads_and_compares_as_empty() {
        let unset: Rare<Vec<String>> = Rare::default();
        let empty = Rare::new(Vec::<String>::new());
        assert!(unset.0.is_none() && empty.0.is_none());
        assert_eq!(unset, empty);
        assert!(unset.is_empty());
        let mut set = Rare::new(vec!["a".to_owned()]);
        assert_ne!(set, unset);
        assert!(set.get_mut().is_some());
        set.clear();
        assert_eq!(set, unset, "equal by value, boxed or not");
        let mut grown: Rare<Vec<String>> = Rare::default();
        grown.push("b".into());
        assert_eq!(grown.into_inner(), ["b"]);
    }

    #[test]
    fn an_edit_keeps_a_box_only_for_a_value_that_is_not_empty() {
        let mut r: Rare<Vec<String>> = Rare::default();
        assert_eq!(r.edit(|v| v.len()), 0);
        assert!(!r.is_boxed(), "an edit writing nothing allocates nothing");
        r.edit(|v| v.push("a".into()));
        assert!(r.is_boxed());
        assert_eq!(*r, ["a"]);
        r.edit(|v| v.push("b".into()));
        assert_eq!(
            *r,
            ["a", "b"],
            "an edit of a boxed value changes it in place"
        );
        r.edit(Vec::clear);
        assert!(
            !r.is_boxed(),
            "an edit that empties the value drops its box"
        );
    }

    #[test]
    fn it_encodes_and_decodes_as_its_value() {
        let v: Rare<Vec<String>> = serde_json::from_str(r#"["x","y"]"#).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"["x","y"]"#);
        let e: Rare<serde_json::Value> = serde_json::from_str("null").unwrap();
        assert!(e.0.is_none());
        assert_eq!(serde_json::to_string(&e).unwrap(), "null");
    }
}
