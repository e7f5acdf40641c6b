//! [`SharedStr`]: an immutable string that states repeating the same text
//! share.
//!
//! Every custom resource's state names its provider (`<provider URN>::<ID>`,
//! ~100 bytes), and a stack has a handful of providers: as a `String` each
//! of 20,000 states kept its own copy (a 128-byte allocation; 2.5 MB of the
//! harness's 26.5 MB deployment). The `created` and `modified` stamps
//! repeat too: every resource an operation writes in the same second has
//! the same ones, and a state made by a create holds one text for both. A
//! `SharedStr` is a reference-counted
//! `str`; decoding shares the text a recent state on the same thread
//! decoded ([`SharedStr`]'s `Deserialize` keeps the last few), and a clone
//! is a reference count. It reads as a `str` (through `Deref`), compares,
//! encodes and decodes as a string does; the empty string holds nothing.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::keys::JsonEmpty;

/// An immutable string, shared by its clones and by states that decode
/// the same text; `None` is the empty string.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SharedStr(Option<Arc<str>>);

impl SharedStr {
    /// The empty string (no allocation).
    #[must_use]
    pub const fn new() -> Self {
        Self(None)
    }

    /// The text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }

    /// Whether `self` and `other` share their text (so they are equal
    /// without a look).
    #[must_use]
    pub fn shares_with(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl Deref for SharedStr {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        if s.is_empty() {
            Self(None)
        } else {
            Self(Some(Arc::from(s)))
        }
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        if s.is_empty() {
            Self(None)
        } else {
            Self(Some(Arc::from(s)))
        }
    }
}

impl From<&String> for SharedStr {
    fn from(s: &String) -> Self {
        Self::from(s.as_str())
    }
}

impl From<SharedStr> for String {
    fn from(s: SharedStr) -> Self {
        s.as_str().to_owned()
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        self == other.as_str()
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl Serialize for SharedStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// How many recently decoded texts a thread keeps to share.
const RECENT: usize = 4;

thread_local! {
    /// The texts this thread decoded last, most recent first.
    static RECENT_TEXTS: RefCell<[Option<Arc<str>>; RECENT]> = const { RefCell::new([None, None, None, None]) };
}

impl SharedStr {
    /// `text` as a shared string: the one a recent decode or `recent` on
    /// this thread made when it has the same text, else a new one (then
    /// remembered).
    #[must_use]
    pub fn recent(text: &str) -> Self {
        if text.is_empty() {
            return Self(None);
        }
        RECENT_TEXTS.with(|recent| {
            let mut recent = recent.borrow_mut();
            // Most recent first, moved by swaps (`rotate_right` is a
            // general rotation, dear for four slots and three calls a
            // decoded state).
            let to_front = |recent: &mut [Option<Arc<str>>; RECENT], i: usize| {
                for j in (1..=i).rev() {
                    recent.swap(j, j - 1);
                }
            };
            if let Some(i) = recent.iter().position(|r| r.as_deref() == Some(text)) {
                to_front(&mut recent, i);
                return Self(recent[0].clone());
            }
            let new: Arc<str> = Arc::from(text);
            recent[RECENT - 1] = Some(new.clone());
            to_front(&mut recent, RECENT - 1);
            Self(Some(new))
        })
    }
}

impl<'de> Deserialize<'de> for SharedStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SharedStr;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SharedStr, E> {
                Ok(SharedStr::recent(v))
            }
        }
        d.deserialize_str(Visitor)
    }
}

impl JsonEmpty for SharedStr {
    fn json_empty(&self) -> bool {
        self.0.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_compares_and_encodes_as_its_text() {
        let text = "urn:pulumi:dev::p::pulumi:providers:aws::default::id";
        let s = SharedStr::from(text);
        assert_eq!(s, text);
        assert_eq!(s.len(), text.len());
        assert!(s.starts_with("urn:"));
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            "\"urn:pulumi:dev::p::pulumi:providers:aws::default::id\""
        );
        assert_eq!(SharedStr::from(String::new()), SharedStr::new());
        assert!(SharedStr::new().json_empty());
        assert_eq!(SharedStr::new().as_str(), "");
        assert_eq!(format!("{s}"), s.as_str());
        assert_eq!(format!("{s:?}"), format!("{:?}", s.as_str()));
    }

    #[test]
    fn decoding_shares_recent_texts_and_only_equal_ones() {
        let texts = [
            "a::1", "b::2", "a::1", "c::3", "d::4", "e::5", "f::6", "a::1",
        ];
        let decoded: Vec<SharedStr> = texts
            .iter()
            .map(|t| serde_json::from_str(&format!("\"{t}\"")).unwrap())
            .collect();
        for (d, t) in decoded.iter().zip(texts) {
            assert_eq!(d, t);
        }
        // The third is the first's text, decoded two texts later: shared.
        assert!(decoded[2].shares_with(&decoded[0]));
        assert!(!decoded[1].shares_with(&decoded[0]));
        // Four other texts between: no longer remembered, but equal.
        assert!(!decoded[7].shares_with(&decoded[2]));
        assert_eq!(decoded[7], decoded[2]);
        // Escapes are decoded before the text is compared.
        let escaped: SharedStr = serde_json::from_str("\"a:\\u003a1\"").unwrap();
        assert!(escaped.shares_with(&decoded[7]));
        // The least recently used text is the one forgotten: a hit
        // counts as a use.
        let texts = [
            "g::1", "h::2", "i::3", "j::4", "g::1", "k::5", "g::1", "h::2",
        ];
        let decoded: Vec<SharedStr> = texts.iter().map(|t| SharedStr::recent(t)).collect();
        assert!(decoded[4].shares_with(&decoded[0]));
        assert!(decoded[6].shares_with(&decoded[0]));
        assert!(!decoded[7].shares_with(&decoded[1]));
        assert_eq!(decoded[7], decoded[1]);
        let empty: SharedStr = serde_json::from_str("\"\"").unwrap();
        assert_eq!(empty, SharedStr::new());
        assert!(serde_json::from_str::<SharedStr>("3").is_err());
    }
}
