//! Declaration addresses (unobin's state model, `keelAddress`): where a
//! program file declared an entry, with the iteration key of every
//! iterated declaration on the way.
//!
//! A *concrete* address names one entry: `group["east"]/server["a"]` is
//! the expansion `"a"` of `server`, declared inside the expansion `"east"`
//! of the composite `group`; `server[0]` is an expansion of a `count`. The
//! *declaration* address removes every key and keeps the composite
//! prefixes (`group/server`); the *base* address removes only the final
//! key (`group["east"]/server`). A pattern written as any of the three
//! names the entries it is the concrete, base or declaration address of
//! ([`Address::matches`]).

use std::fmt;

/// The iteration key of one expansion.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// A `forEach` key (a map key, or a keyed list's key).
    Name(String),
    /// A `count` index.
    Index(u64),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(k) => write!(f, "[\"{k}\"]"),
            Self::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// One segment: a declaration's name and, when it is iterated, the key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Segment {
    /// The declaration's name (its key under `resources`).
    pub name: String,
    /// The expansion's key.
    pub key: Option<Key>,
}

/// An address: segments from the outermost composite to the entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address(pub Vec<Segment>);

/// Why text is not an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an address ({reason}); write `name`, `name[\"key\"]` or `name[0]`, joined by `/` (e.g. `group[\"east\"]/server`)")]
pub struct AddressError {
    /// The text.
    pub text: String,
    /// What is wrong.
    pub reason: &'static str,
}

/// Whether `key` may be an iteration key: non-empty, no quote, backslash,
/// `]`, `/`, control character or `::` (it becomes part of a URN name and
/// of addresses written in `--target`).
pub fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("it is empty")
    } else if key.contains("::") {
        Some("it contains `::`")
    } else if key
        .chars()
        .any(|c| matches!(c, '"' | '\\' | ']' | '/') || c.is_control())
    {
        Some("it contains `\"`, `\\`, `]`, `/` or a control character")
    } else {
        None
    }
}

impl Address {
    /// Parses an address (`a`, `a["k"]`, `a[0]`, joined by `/`).
    ///
    /// # Errors
    /// [`AddressError`] naming what is wrong.
    pub fn parse(text: &str) -> Result<Self, AddressError> {
        let err = |reason| AddressError {
            text: text.to_owned(),
            reason,
        };
        if text.is_empty() {
            return Err(err("it is empty"));
        }
        let mut out = Vec::new();
        let mut rest = text;
        loop {
            let end = rest.find(['[', '/']).unwrap_or(rest.len());
            let name = &rest[..end];
            if name.is_empty() {
                return Err(err("a segment has no name"));
            }
            if name
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '"' | ']' | '$' | '{' | '}'))
            {
                return Err(err("a name contains whitespace or one of `\"]${}`"));
            }
            rest = &rest[end..];
            let mut key = None;
            if let Some(r) = rest.strip_prefix("[\"") {
                let close = r
                    .find("\"]")
                    .ok_or_else(|| err("a `[\"` is not closed by `\"]`"))?;
                let k = &r[..close];
                if key_problem(k).is_some() {
                    return Err(err(
                        "a key is empty or contains `\"`, `\\`, `]`, `/` or `::`",
                    ));
                }
                key = Some(Key::Name(k.to_owned()));
                rest = &r[close + 2..];
            } else if let Some(r) = rest.strip_prefix('[') {
                let close = r
                    .find(']')
                    .ok_or_else(|| err("a `[` is not closed by `]`"))?;
                let i = r[..close]
                    .parse::<u64>()
                    .map_err(|_| err("an index is not a non-negative integer"))?;
                key = Some(Key::Index(i));
                rest = &r[close + 1..];
            }
            out.push(Segment {
                name: name.to_owned(),
                key,
            });
            match rest.strip_prefix('/') {
                Some(r) => rest = r,
                None if rest.is_empty() => break,
                None => return Err(err("a key is followed by something other than `/`")),
            }
        }
        Ok(Self(out))
    }

    /// The address of an entry declared as `name` (expansion `key`) inside
    /// this one.
    pub fn child(&self, name: &str, key: Option<Key>) -> Self {
        let mut out = self.clone();
        out.0.push(Segment {
            name: name.to_owned(),
            key,
        });
        out
    }

    /// True when some segment has a key.
    pub fn is_iterated(&self) -> bool {
        self.0.iter().any(|s| s.key.is_some())
    }

    /// The declaration address: every key removed.
    pub fn declaration(&self) -> Self {
        Self(
            self.0
                .iter()
                .map(|s| Segment {
                    name: s.name.clone(),
                    key: None,
                })
                .collect(),
        )
    }

    /// The base address: the final key removed.
    pub fn base(&self) -> Self {
        let mut out = self.clone();
        if let Some(last) = out.0.last_mut() {
            last.key = None;
        }
        out
    }

    /// Whether this pattern names `entry`: it is its concrete, base or
    /// declaration address.
    pub fn matches(&self, entry: &Self) -> bool {
        self == entry || *self == entry.base() || *self == entry.declaration()
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            f.write_str(&s.name)?;
            if let Some(k) = &s.key {
                write!(f, "{k}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, declaration: &str, base: &str) {
        let a = Address::parse(text).unwrap();
        assert_eq!(a.to_string(), text, "round trip");
        assert_eq!(a.declaration().to_string(), declaration, "{text}");
        assert_eq!(a.base().to_string(), base, "{text}");
    }

    #[test]
    fn declaration_and_base_addresses_as_unobins() {
        check(
            r#"group["east"]/server["a"]"#,
            "group/server",
            r#"group["east"]/server"#,
        );
        check("server[0]", "server", "server");
        check("group/disk", "group/disk", "group/disk");
        check(r#"a["x.y"]/b[2]/c"#, "a/b/c", r#"a["x.y"]/b[2]/c"#);
    }

    #[test]
    fn a_pattern_names_what_it_is_an_address_of() {
        let entry = Address::parse(r#"group["east"]/server["a"]"#).unwrap();
        for hit in [
            r#"group["east"]/server["a"]"#,
            r#"group["east"]/server"#,
            "group/server",
        ] {
            assert!(Address::parse(hit).unwrap().matches(&entry), "{hit}");
        }
        for miss in [
            r#"group["west"]/server"#,
            r#"group["east"]/server["b"]"#,
            "server",
            r#"group/server["a"]"#,
            "group",
        ] {
            assert!(!Address::parse(miss).unwrap().matches(&entry), "{miss}");
        }
    }

    #[test]
    fn malformed_addresses_are_errors() {
        for bad in [
            "",
            "a/",
            "/a",
            r#"a["k"#,
            r#"a[""]"#,
            "a[x]",
            "a[-1]",
            r#"a["k"]b"#,
            "a b",
            r#"a["k/l"]"#,
        ] {
            assert!(Address::parse(bad).is_err(), "{bad}");
        }
    }
}
