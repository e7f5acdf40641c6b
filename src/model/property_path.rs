//! Property paths: Pulumi's syntax for naming a value nested in a resource's
//! properties (`ignoreChanges`, `replaceOnChanges`, detailed diff keys).
//!
//! A path starts with a property name or a bracketed element and continues
//! with `.name` or `[...]` accessors:
//!
//! - `tags`, `tags.Name`, `tags["Name"]`, `["key with . and \"quotes\""]`
//! - `ports[0]`, `ports[0].number`, `matrix[1][2]`
//! - `*` (every property), `tags.*`, `rules[*].cidr`
//!
//! A bare name runs up to the next `.` or `[`; a quoted name may hold any
//! character, with `\"` for a quote. `*` unquoted (or `[*]`) is a wildcard
//! matching any one key or index. keel is stricter than Pulumi's parser,
//! whose mistakes it refuses with a [`PropertyPathError`] instead of
//! guessing (Pulumi silently skips an `ignoreChanges` entry it cannot
//! parse): empty paths and names (`a..b`, `a.`), unclosed brackets and
//! quotes, indices that are not plain decimal numbers (`[-1]`, `[+1]`,
//! `[]`), and a name glued to a bracket (`a[0]b`). One deliberate
//! difference: Pulumi treats a quoted `["*"]` as the wildcard too, so a
//! property literally named `*` cannot be named; keel reads `["*"]` as
//! that literal name.
//!
//! [`PropertyPath::contains`] is Pulumi's containment (a path contains
//! itself and everything below it); [`PropertyPath::reset`] copies the
//! value at a path from old inputs into new ones (Pulumi's
//! `processIgnoreChanges`); [`changed_paths`] lists the paths at which two
//! property maps differ, for matching `replaceOnChanges` when a provider
//! reports only top-level keys.

use std::fmt;

use super::property::{PropertyMap, PropertyValue, Secret};

/// One element of a [`PropertyPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// An object key.
    Key(String),
    /// An array index.
    Index(usize),
    /// `*`: any one key or index.
    Wildcard,
}

/// A parsed property path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PropertyPath(Vec<Segment>);

/// Why a property path could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PropertyPathError {
    /// The path is empty.
    #[error("the path is empty; name a property, e.g. `tags` or `tags.Name`")]
    Empty,
    /// A name is missing (`.a`, `a.`, `a..b`).
    #[error("a property name is missing at byte {at}; write `a.b`, not `a..b`, `.a` or `a.`")]
    MissingName {
        /// The byte offset.
        at: usize,
    },
    /// A `[` has no closing `]`.
    #[error("the `[` at byte {at} is never closed; write `a[0]` or `a[\"key\"]`")]
    UnclosedBracket {
        /// The byte offset of the `[`.
        at: usize,
    },
    /// A quoted name has no closing quote.
    #[error("the quoted name at byte {at} has no closing `\"`")]
    UnclosedQuote {
        /// The byte offset of the opening quote.
        at: usize,
    },
    /// A quoted name is not followed by `]`.
    #[error("a `]` must follow the quoted name closed at byte {at}")]
    ExpectedBracket {
        /// The byte offset of the closing quote.
        at: usize,
    },
    /// A bracketed index is neither a decimal number nor `*`.
    #[error("`[{text}]` at byte {at} is not an array index: use a decimal number such as `[0]`, `[*]`, or a quoted key such as `[\"{text}\"]`")]
    BadIndex {
        /// The byte offset of the `[`.
        at: usize,
        /// What was between the brackets.
        text: String,
    },
    /// Something other than `.`, `[` or the end follows an element.
    #[error("expected `.` or `[` at byte {at}, found `{found}`")]
    ExpectedAccessor {
        /// The byte offset.
        at: usize,
        /// The character found.
        found: char,
    },
}

impl PropertyPath {
    /// Parses a path.
    ///
    /// # Errors
    /// [`PropertyPathError`] saying what is wrong and where.
    pub fn parse(text: &str) -> Result<Self, PropertyPathError> {
        if text.is_empty() {
            return Err(PropertyPathError::Empty);
        }
        let bytes = text.as_bytes();
        let mut segments = Vec::new();
        let mut i = 0;
        // True when the next element may be a bare name (at the start or
        // after a `.`).
        let mut name_allowed = true;
        while i < bytes.len() {
            match bytes[i] {
                b'.' => {
                    if name_allowed {
                        return Err(PropertyPathError::MissingName { at: i });
                    }
                    i += 1;
                    if i == bytes.len() || bytes[i] == b'.' {
                        return Err(PropertyPathError::MissingName { at: i });
                    }
                    // `a.[0]` is tolerated, as Pulumi does (old providers
                    // write detailed diff keys that way).
                    name_allowed = true;
                }
                b'[' => {
                    let open = i;
                    if bytes.get(i + 1) == Some(&b'"') {
                        let (key, end) = quoted(text, i + 1)?;
                        if bytes.get(end) != Some(&b']') {
                            return Err(PropertyPathError::ExpectedBracket { at: end - 1 });
                        }
                        segments.push(Segment::Key(key));
                        i = end + 1;
                    } else {
                        let Some(close) = text[i..].find(']').map(|c| c + i) else {
                            return Err(PropertyPathError::UnclosedBracket { at: open });
                        };
                        let inner = &text[i + 1..close];
                        segments.push(index(inner).ok_or_else(|| PropertyPathError::BadIndex {
                            at: open,
                            text: inner.to_owned(),
                        })?);
                        i = close + 1;
                    }
                    name_allowed = false;
                }
                _ if name_allowed => {
                    let end = text[i..].find(['.', '[']).map_or(text.len(), |e| e + i);
                    let name = &text[i..end];
                    segments.push(if name == "*" {
                        Segment::Wildcard
                    } else {
                        Segment::Key(name.to_owned())
                    });
                    i = end;
                    name_allowed = false;
                }
                _ => {
                    let found = text[i..].chars().next().unwrap_or('?');
                    return Err(PropertyPathError::ExpectedAccessor { at: i, found });
                }
            }
        }
        Ok(Self(segments))
    }

    /// A one-element path naming a top-level property key as it is (no
    /// parsing: a key may contain `.` or `[`).
    pub fn key(key: &str) -> Self {
        Self(vec![Segment::Key(key.to_owned())])
    }

    /// The path's elements.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// True when this path names `other` or something `other` is inside:
    /// `tags` contains `tags` and `tags.Name`; `*` contains every path;
    /// `rules[*].cidr` contains `rules[3].cidr`. A wildcard matches one key
    /// or index.
    pub fn contains(&self, other: &PropertyPath) -> bool {
        other.0.len() >= self.0.len()
            && self.0.iter().zip(&other.0).all(|(p, o)| match (p, o) {
                (Segment::Wildcard, _) => true,
                (Segment::Key(a), Segment::Key(b)) => a == b,
                (Segment::Index(a), Segment::Index(b)) => a == b,
                _ => false,
            })
    }

    /// Sets the value at this path in `new` back to its value in `old`
    /// (removing it from `new` when `old` has none), as Pulumi does for an
    /// `ignoreChanges` entry. Intermediate objects and array slots are
    /// never created and arrays never change length. Returns false when
    /// that would be needed (the path goes through an element added or
    /// removed), leaving what it could not reach as it was. A value that
    /// was secret in `old` stays secret in `new`.
    pub fn reset(&self, old: &PropertyMap, new: &mut PropertyMap) -> bool {
        let old = PropertyValue::Object(old.clone());
        let mut wrapped = PropertyValue::Object(std::mem::take(new));
        let ok = reset(&self.0, &old, &mut wrapped, false, false);
        if let PropertyValue::Object(m) = wrapped {
            *new = m;
        }
        ok
    }
}

impl std::str::FromStr for PropertyPath {
    type Err = PropertyPathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for PropertyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Segment::Key(k) if plain(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => write!(f, "[\"{}\"]", k.replace('"', "\\\""))?,
                Segment::Index(n) => write!(f, "[{n}]")?,
                Segment::Wildcard if i == 0 => f.write_str("*")?,
                Segment::Wildcard => f.write_str("[*]")?,
            }
        }
        Ok(())
    }
}

/// A key written without quotes: ASCII letters, digits and `_`.
fn plain(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A quoted name starting at the quote at `start`: its text and the offset
/// just after the closing quote.
fn quoted(text: &str, start: usize) -> Result<(String, usize), PropertyPathError> {
    let mut key = String::new();
    let mut chars = text[start + 1..].char_indices();
    while let Some((off, c)) = chars.next() {
        match c {
            '"' => return Ok((key, start + 1 + off + 1)),
            '\\' if text[start + 1 + off + 1..].starts_with('"') => {
                chars.next();
                key.push('"');
            }
            c => key.push(c),
        }
    }
    Err(PropertyPathError::UnclosedQuote { at: start })
}

/// A bracketed element that is not quoted: `*` or a decimal index.
fn index(inner: &str) -> Option<Segment> {
    if inner == "*" {
        return Some(Segment::Wildcard);
    }
    if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    inner.parse().ok().map(Segment::Index)
}

/// The value inside any plaintext secrets, and whether there were some.
fn unwrap_secret(v: &PropertyValue) -> (&PropertyValue, bool) {
    let mut v = v;
    let mut secret = false;
    while let PropertyValue::Secret(Secret::Plaintext(p)) = v {
        v = p.value();
        secret = true;
    }
    (v, secret)
}

/// As [`unwrap_secret`], for changing the value in place.
fn unwrap_secret_mut(v: &mut PropertyValue) -> (&mut PropertyValue, bool) {
    match v {
        PropertyValue::Secret(Secret::Plaintext(p)) => (unwrap_secret_mut(p.value_mut()).0, true),
        v => (v, false),
    }
}

/// `v`, made secret when it comes from a secret context of `old` into a
/// plain context of `new`.
fn carried(v: &PropertyValue, old_secret: bool, new_secret: bool) -> PropertyValue {
    if old_secret && !new_secret && !matches!(v, PropertyValue::Secret(_)) {
        PropertyValue::Secret(Secret::plaintext(v.clone()))
    } else {
        v.clone()
    }
}

fn reset(
    path: &[Segment],
    old: &PropertyValue,
    new: &mut PropertyValue,
    old_secret: bool,
    new_secret: bool,
) -> bool {
    let (old, s) = unwrap_secret(old);
    let old_secret = old_secret || s;
    let (new, s) = unwrap_secret_mut(new);
    let new_secret = new_secret || s;
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    let leaf = rest.is_empty();
    match first {
        Segment::Index(i) => {
            let i = *i;
            match (old, new) {
                (PropertyValue::Array(o), PropertyValue::Array(n)) => {
                    if i >= o.len() && i >= n.len() {
                        // Absent on both sides: nothing differs.
                        return leaf;
                    }
                    if i >= o.len() || i >= n.len() {
                        // Resetting would add or remove an element.
                        return false;
                    }
                    if leaf {
                        n[i] = carried(&o[i], old_secret, new_secret);
                        true
                    } else {
                        reset(rest, &o[i], &mut n[i], old_secret, new_secret)
                    }
                }
                // Neither side is an array: nothing to reset there.
                (o, n) => !matches!(o, PropertyValue::Array(_)) && !is_array(n),
            }
        }
        Segment::Wildcard if leaf => match new {
            PropertyValue::Object(n) => {
                if let PropertyValue::Object(o) = old {
                    n.retain(|k, _| o.contains_key(k));
                    for (k, v) in o {
                        n.insert(k.clone(), carried(v, old_secret, new_secret));
                    }
                }
                true
            }
            PropertyValue::Array(n) => {
                if let PropertyValue::Array(o) = old {
                    for (slot, v) in n.iter_mut().zip(o) {
                        *slot = carried(v, old_secret, new_secret);
                    }
                    return o.len() == n.len();
                }
                true
            }
            _ => false,
        },
        Segment::Wildcard => match (old, new) {
            (PropertyValue::Object(o), PropertyValue::Object(n)) => {
                let mut ok = true;
                for (k, ov) in o {
                    match n.get_mut(k) {
                        Some(nv) => ok &= reset(rest, ov, nv, old_secret, new_secret),
                        None => ok = false,
                    }
                }
                ok
            }
            (PropertyValue::Array(o), PropertyValue::Array(n)) => {
                let mut ok = o.len() == n.len();
                for (ov, nv) in o.iter().zip(n.iter_mut()) {
                    ok &= reset(rest, ov, nv, old_secret, new_secret);
                }
                ok
            }
            _ => false,
        },
        Segment::Key(k) => {
            if leaf {
                let found = match old {
                    PropertyValue::Object(o) => o.get(k),
                    _ => None,
                };
                return match (found, new) {
                    (Some(v), PropertyValue::Object(n)) => {
                        n.insert(k.clone(), carried(v, old_secret, new_secret));
                        true
                    }
                    // The old value cannot be put back into a non-object.
                    (Some(_), _) => false,
                    (None, PropertyValue::Object(n)) => {
                        n.remove(k);
                        true
                    }
                    // Absent on both sides.
                    (None, _) => true,
                };
            }
            match (old, new) {
                (PropertyValue::Object(o), PropertyValue::Object(n)) => {
                    match (o.get(k), n.get_mut(k)) {
                        (Some(ov), Some(nv)) => reset(rest, ov, nv, old_secret, new_secret),
                        (None, Some(nv)) => {
                            reset(rest, &PropertyValue::Null, nv, old_secret, new_secret)
                        }
                        // The path leads into something the new inputs dropped.
                        (Some(_), None) => false,
                        (None, None) => true,
                    }
                }
                (o, n) => !matches!(o, PropertyValue::Object(_)) && !is_object(n),
            }
        }
    }
}

fn is_array(v: &PropertyValue) -> bool {
    matches!(v, PropertyValue::Array(_))
}

fn is_object(v: &PropertyValue) -> bool {
    matches!(v, PropertyValue::Object(_))
}

/// The paths at which `new` differs from `old`, among the top-level `keys`
/// (the keys a provider reported as changed): objects and arrays are
/// followed down to the values that differ; a value added or removed
/// yields its own path and the paths of everything inside it. Secrets are
/// looked through.
pub fn changed_paths<'a>(
    old: &PropertyMap,
    new: &PropertyMap,
    keys: impl IntoIterator<Item = &'a String>,
) -> Vec<PropertyPath> {
    let mut out = Vec::new();
    for k in keys {
        let mut prefix = vec![Segment::Key(k.clone())];
        diff_into(&mut prefix, old.get(k), new.get(k), &mut out);
    }
    out
}

fn diff_into(
    prefix: &mut Vec<Segment>,
    old: Option<&PropertyValue>,
    new: Option<&PropertyValue>,
    out: &mut Vec<PropertyPath>,
) {
    if old == new {
        return;
    }
    let old = old.map(|v| unwrap_secret(v).0);
    let new = new.map(|v| unwrap_secret(v).0);
    match (old, new) {
        (Some(PropertyValue::Object(o)), Some(PropertyValue::Object(n))) => {
            let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
            keys.sort_unstable();
            keys.dedup();
            let before = out.len();
            for k in keys {
                prefix.push(Segment::Key(k.clone()));
                diff_into(prefix, o.get(k), n.get(k), out);
                prefix.pop();
            }
            if out.len() == before {
                // Only secretness changed.
                out.push(PropertyPath(prefix.clone()));
            }
        }
        (Some(PropertyValue::Array(o)), Some(PropertyValue::Array(n))) => {
            let before = out.len();
            for i in 0..o.len().max(n.len()) {
                prefix.push(Segment::Index(i));
                diff_into(prefix, o.get(i), n.get(i), out);
                prefix.pop();
            }
            if out.len() == before {
                out.push(PropertyPath(prefix.clone()));
            }
        }
        (o, n) => {
            out.push(PropertyPath(prefix.clone()));
            for v in [o, n].into_iter().flatten() {
                leaves(prefix, v, out);
            }
        }
    }
}

/// The paths of everything inside a container value.
fn leaves(prefix: &mut Vec<Segment>, v: &PropertyValue, out: &mut Vec<PropertyPath>) {
    match unwrap_secret(v).0 {
        PropertyValue::Object(m) => {
            for (k, v) in m {
                prefix.push(Segment::Key(k.clone()));
                out.push(PropertyPath(prefix.clone()));
                leaves(prefix, v, out);
                prefix.pop();
            }
        }
        PropertyValue::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                prefix.push(Segment::Index(i));
                out.push(PropertyPath(prefix.clone()));
                leaves(prefix, v, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Segment {
        Segment::Key(k.into())
    }

    fn json(v: serde_json::Value) -> PropertyMap {
        match serde_json::from_value::<PropertyValue>(v).unwrap() {
            PropertyValue::Object(m) => m,
            other => panic!("not an object: {other:?}"),
        }
    }

    #[test]
    fn parses_pulumis_path_syntax() {
        use Segment::{Index, Wildcard};
        let check = |text: &str, want: Vec<Segment>| {
            let p = PropertyPath::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(p.segments(), &want[..], "{text}");
        };
        check("root", vec![key("root")]);
        check("root.nested", vec![key("root"), key("nested")]);
        check("root[\"nested\"]", vec![key("root"), key("nested")]);
        check(
            "root.double.nest",
            vec![key("root"), key("double"), key("nest")],
        );
        check(
            "root[\"double\"].nest",
            vec![key("root"), key("double"), key("nest")],
        );
        check(
            "root[\"double\"][\"nest\"]",
            vec![key("root"), key("double"), key("nest")],
        );
        check("root.array[0]", vec![key("root"), key("array"), Index(0)]);
        check(
            "root.array[100]",
            vec![key("root"), key("array"), Index(100)],
        );
        check(
            "root.array[0][1].nested",
            vec![key("root"), key("array"), Index(0), Index(1), key("nested")],
        );
        check(
            "root[\"key with \\\"escaped\\\" quotes\"]",
            vec![key("root"), key("key with \"escaped\" quotes")],
        );
        check(
            "root[\"key with a .\"]",
            vec![key("root"), key("key with a .")],
        );
        check(
            "[\"root key with a .\"][100]",
            vec![key("root key with a ."), Index(100)],
        );
        check("tags[\"Name\"]", vec![key("tags"), key("Name")]);
        check("a[0]", vec![key("a"), Index(0)]);
        check("*", vec![Wildcard]);
        check("a[*]", vec![key("a"), Wildcard]);
        check(
            "root.array[*].field",
            vec![key("root"), key("array"), Wildcard, key("field")],
        );
        check("tags.*", vec![key("tags"), Wildcard]);
        // A quoted star is a literal key (Pulumi reads it as the wildcard).
        check("a[\"*\"]", vec![key("a"), key("*")]);
        // Names run to the next `.` or `[`, as in Pulumi.
        check("foo-bar", vec![key("foo-bar")]);
        check("a/b:c", vec![key("a/b:c")]);
        // `.` before `[` is tolerated.
        check("a.[0]", vec![key("a"), Index(0)]);
        check("[0]", vec![Index(0)]);
        check("[\"\"]", vec![key("")]);
        check("é.ü", vec![key("é"), key("ü")]);
    }

    #[test]
    fn bad_paths_are_typed_errors() {
        use PropertyPathError::*;
        let check = |text: &str, want: PropertyPathError| {
            assert_eq!(PropertyPath::parse(text), Err(want.clone()), "{text}");
            assert!(!want.to_string().is_empty());
        };
        check("", Empty);
        check(".a", MissingName { at: 0 });
        check("a.", MissingName { at: 2 });
        check("a..b", MissingName { at: 2 });
        check("a[0", UnclosedBracket { at: 1 });
        check("a[", UnclosedBracket { at: 1 });
        check("a[\"b", UnclosedQuote { at: 2 });
        check("a[\"b\\\"]", UnclosedQuote { at: 2 });
        check("a[\"b\"x]", ExpectedBracket { at: 4 });
        check("a[\"b\"", ExpectedBracket { at: 4 });
        check(
            "a[]",
            BadIndex {
                at: 1,
                text: String::new(),
            },
        );
        check(
            "a[-1]",
            BadIndex {
                at: 1,
                text: "-1".into(),
            },
        );
        check(
            "a[+1]",
            BadIndex {
                at: 1,
                text: "+1".into(),
            },
        );
        check(
            "a[x]",
            BadIndex {
                at: 1,
                text: "x".into(),
            },
        );
        check(
            "a[1 ]",
            BadIndex {
                at: 1,
                text: "1 ".into(),
            },
        );
        check(
            "a[99999999999999999999999]",
            BadIndex {
                at: 1,
                text: "99999999999999999999999".into(),
            },
        );
        check("a[0]b", ExpectedAccessor { at: 4, found: 'b' });
        check("a[\"b\"]c", ExpectedAccessor { at: 6, found: 'c' });
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "a",
            "a.b",
            "a[0].b",
            "*",
            "a[*].b",
            "tags[\"Name with space\"]",
            "a[\"*\"]",
            "a[\"q\\\"uote\"]",
            "[\"x.y\"][3]",
        ] {
            let p = PropertyPath::parse(text).unwrap();
            let shown = p.to_string();
            assert_eq!(PropertyPath::parse(&shown).unwrap(), p, "{text} -> {shown}");
        }
        assert_eq!(
            PropertyPath::parse("tags[\"Name\"]").unwrap().to_string(),
            "tags.Name"
        );
        assert_eq!(PropertyPath::parse("a.*").unwrap().to_string(), "a[*]");
        assert_eq!(PropertyPath::key("a.b").to_string(), "[\"a.b\"]");
    }

    #[test]
    fn containment_matches_prefixes_and_wildcards() {
        let p = |s: &str| PropertyPath::parse(s).unwrap();
        let check = |outer: &str, inner: &str, want: bool| {
            assert_eq!(
                p(outer).contains(&p(inner)),
                want,
                "{outer} contains {inner}"
            );
        };
        check("a", "a", true);
        check("a", "a.b", true);
        check("a", "a[0]", true);
        check("a.b", "a", false);
        check("a.b", "a.c", false);
        check("a[\"b\"][1]", "a.b[1].c", true);
        check("*", "anything.at[3].all", true);
        check("a.*.c", "a.b.c.d", true);
        check("a.*.c", "a.b.d", false);
        check("a[*]", "a[7]", true);
        check("a[*]", "a.k", true);
        check("a[0]", "a[1]", false);
        check("a[0]", "a.0", false);
        check("a.0", "a[0]", false);
        check("a[\"*\"]", "a.b", false);
        check("a[\"*\"]", "a[\"*\"]", true);
    }

    #[test]
    fn reset_puts_old_values_back() {
        let check = |path: &str,
                     old: serde_json::Value,
                     new: serde_json::Value,
                     want: serde_json::Value,
                     ok: bool| {
            let (old, mut new) = (json(old), json(new));
            let got = PropertyPath::parse(path).unwrap().reset(&old, &mut new);
            assert_eq!(new, json(want), "{path}");
            assert_eq!(got, ok, "{path}");
        };
        use serde_json::json as j;
        // Top level: changed, added, removed.
        check(
            "a",
            j!({"a": 1, "b": 1}),
            j!({"a": 2, "b": 2}),
            j!({"a": 1, "b": 2}),
            true,
        );
        check("a", j!({}), j!({"a": 2}), j!({}), true);
        check("a", j!({"a": 1}), j!({}), j!({"a": 1}), true);
        check("a", j!({}), j!({}), j!({}), true);
        // Nested keys, quoted or not.
        check(
            "tags.Name",
            j!({"tags": {"Name": "x", "env": "a"}}),
            j!({"tags": {"Name": "y", "env": "b"}}),
            j!({"tags": {"Name": "x", "env": "b"}}),
            true,
        );
        check(
            "tags[\"Name\"]",
            j!({"tags": {"Name": "x"}}),
            j!({"tags": {}}),
            j!({"tags": {"Name": "x"}}),
            true,
        );
        check(
            "tags.Name",
            j!({"tags": {}}),
            j!({"tags": {"Name": "y"}}),
            j!({"tags": {}}),
            true,
        );
        // The new inputs dropped the object the path goes through.
        check(
            "tags.Name",
            j!({"tags": {"Name": "x"}}),
            j!({}),
            j!({}),
            false,
        );
        // Neither side has it.
        check("tags.Name", j!({}), j!({}), j!({}), true);
        // The old inputs had no object there: the new key goes.
        check(
            "tags.Name",
            j!({}),
            j!({"tags": {"Name": "y", "k": 1}}),
            j!({"tags": {"k": 1}}),
            true,
        );
        // Arrays: an element is reset, never added or removed.
        check(
            "a[1]",
            j!({"a": [1, 2, 3]}),
            j!({"a": [1, 5, 6]}),
            j!({"a": [1, 2, 6]}),
            true,
        );
        check(
            "a[2]",
            j!({"a": [1, 2]}),
            j!({"a": [1, 2, 3]}),
            j!({"a": [1, 2, 3]}),
            false,
        );
        check(
            "a[5]",
            j!({"a": [1]}),
            j!({"a": [1, 2]}),
            j!({"a": [1, 2]}),
            true,
        );
        check(
            "a[0].x",
            j!({"a": [{"x": 1, "y": 1}]}),
            j!({"a": [{"x": 2, "y": 2}]}),
            j!({"a": [{"x": 1, "y": 2}]}),
            true,
        );
        check("a[0]", j!({"a": 1}), j!({"a": [1]}), j!({"a": [1]}), false);
        // Wildcards.
        check(
            "*",
            j!({"a": 1, "b": 2}),
            j!({"a": 3, "c": 4}),
            j!({"a": 1, "b": 2}),
            true,
        );
        check(
            "tags.*",
            j!({"tags": {"a": 1}}),
            j!({"tags": {"a": 2, "b": 3}}),
            j!({"tags": {"a": 1}}),
            true,
        );
        check(
            "a[*]",
            j!({"a": [1, 2]}),
            j!({"a": [3, 4]}),
            j!({"a": [1, 2]}),
            true,
        );
        check(
            "a[*]",
            j!({"a": [1, 2]}),
            j!({"a": [3]}),
            j!({"a": [1]}),
            false,
        );
        check(
            "a[*].x",
            j!({"a": [{"x": 1}, {"x": 2}]}),
            j!({"a": [{"x": 5, "y": 1}, {"x": 6}]}),
            j!({"a": [{"x": 1, "y": 1}, {"x": 2}]}),
            true,
        );
        check(
            "m.*.x",
            j!({"m": {"k": {"x": 1}}}),
            j!({"m": {"k": {"x": 2}, "l": {"x": 3}}}),
            j!({"m": {"k": {"x": 1}, "l": {"x": 3}}}),
            true,
        );
        check(
            "m.*.x",
            j!({"m": {"k": {"x": 1}}}),
            j!({"m": {}}),
            j!({"m": {}}),
            false,
        );
        check("a.*", j!({}), j!({"a": 1}), j!({"a": 1}), false);
    }

    #[test]
    fn reset_keeps_old_secrets_secret() {
        let secret = |v: serde_json::Value| {
            PropertyValue::Secret(Secret::plaintext(serde_json::from_value(v).unwrap()))
        };
        // An old secret put back where the new inputs are plain stays secret.
        let old: PropertyMap = [("pw".to_owned(), secret(serde_json::json!("old")))].into();
        let mut new: PropertyMap = [("pw".to_owned(), PropertyValue::from("new"))].into();
        assert!(PropertyPath::parse("pw").unwrap().reset(&old, &mut new));
        assert_eq!(new["pw"], secret(serde_json::json!("old")));
        // Inside a secret object, the path is followed through it; a value
        // taken from a secret object into a plain one becomes secret.
        let old: PropertyMap =
            [("o".to_owned(), secret(serde_json::json!({"a": 1, "b": 1})))].into();
        let mut new = json(serde_json::json!({"o": {"a": 2, "b": 2}}));
        assert!(PropertyPath::parse("o.a").unwrap().reset(&old, &mut new));
        let PropertyValue::Object(o) = &new["o"] else {
            panic!("{new:?}")
        };
        assert_eq!(o["a"], secret(serde_json::json!(1)));
        assert_eq!(o["b"], PropertyValue::from(2i64));
        // Into a secret new object: the value is put inside it as it is.
        let old = json(serde_json::json!({"o": {"a": 1}}));
        let mut new: PropertyMap = [("o".to_owned(), secret(serde_json::json!({"a": 2})))].into();
        assert!(PropertyPath::parse("o.a").unwrap().reset(&old, &mut new));
        assert_eq!(new["o"], secret(serde_json::json!({"a": 1})));
    }

    #[test]
    fn changed_paths_follow_objects_and_arrays() {
        let check = |old: serde_json::Value, new: serde_json::Value, want: &[&str]| {
            let (old, new) = (json(old), json(new));
            let keys: Vec<String> = old.keys().chain(new.keys()).cloned().collect();
            let mut got: Vec<String> = changed_paths(&old, &new, &keys)
                .iter()
                .map(ToString::to_string)
                .collect();
            got.sort();
            got.dedup();
            let mut want: Vec<String> = want.iter().map(|s| (*s).to_owned()).collect();
            want.sort();
            assert_eq!(got, want);
        };
        use serde_json::json as j;
        check(j!({"a": 1}), j!({"a": 1}), &[]);
        check(j!({"a": 1}), j!({"a": 2}), &["a"]);
        check(
            j!({"t": {"N": 1, "M": 1}}),
            j!({"t": {"N": 2, "M": 1}}),
            &["t.N"],
        );
        check(j!({}), j!({"t": {"N": 1}}), &["t", "t.N"]);
        check(j!({"t": {"N": 1}}), j!({}), &["t", "t.N"]);
        check(j!({"l": [1, 2]}), j!({"l": [1, 3, 4]}), &["l[1]", "l[2]"]);
        check(j!({"l": [{"x": 1}]}), j!({"l": [{"x": 2}]}), &["l[0].x"]);
        check(j!({"a": "s"}), j!({"a": {"k": 1}}), &["a", "a.k"]);
    }
}
