//! URNs, type tokens and provider references (`checkpoint.md` §1).
//!
//! A URN is `urn:pulumi:<stack>::<project>::<qualified type>::<name>`. The
//! qualified type is the parent's type chain joined with `$`, ending in the
//! resource's own type; the name may itself contain `::`, the other parts may
//! not. [`Urn`] keeps the text in one shared allocation plus the offsets of
//! its parts, so cloning is a reference-count bump and every accessor is a
//! slice.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// The prefix every URN starts with.
pub const URN_PREFIX: &str = "urn:pulumi:";
/// The separator between the parts of a URN.
pub const URN_SEPARATOR: &str = "::";
/// The separator between the types of a qualified type chain.
pub const TYPE_SEPARATOR: char = '$';
/// The type of the root stack resource.
pub const STACK_TYPE: &str = "pulumi:pulumi:Stack";
/// The prefix of every provider resource type.
pub const PROVIDER_TYPE_PREFIX: &str = "pulumi:providers:";
/// The ID that stands for "not known yet" (Pulumi's unknown placeholder).
pub const UNKNOWN_ID: &str = "04da6b54-80e4-46f7-96ec-b56ff0331ba9";

/// Why a URN, type token or provider reference was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrnError {
    /// The text does not start with `urn:pulumi:`.
    #[error("`{0}` is not a URN: it must start with `urn:pulumi:`")]
    MissingPrefix(String),
    /// A `::`-separated part is missing.
    #[error("`{urn}` is not a URN: it has no {part} (expected urn:pulumi:<stack>::<project>::<type>::<name>)")]
    MissingPart {
        /// The text that was parsed.
        urn: String,
        /// The missing part: `stack`, `project`, `type` or `name`.
        part: &'static str,
    },
    /// A part is empty.
    #[error("`{urn}` is not a URN: its {part} is empty")]
    EmptyPart {
        /// The text that was parsed.
        urn: String,
        /// The empty part.
        part: &'static str,
    },
    /// A type token is malformed.
    #[error("`{token}` is not a type token: {reason} (expected <package>:<module>:<Name>)")]
    BadType {
        /// The token that was parsed.
        token: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A provider reference is malformed.
    #[error("`{reference}` is not a provider reference: {reason} (expected <provider URN>::<ID>)")]
    BadProviderReference {
        /// The reference that was parsed.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The text is longer than a URN may be.
    #[error("a URN of {0} bytes is too long (at most 4 GiB)")]
    TooLong(usize),
}

/// The result type of this module.
pub type Result<T, E = UrnError> = std::result::Result<T, E>;

/// A type token `<package>:<module>:<Name>`; the module may contain `/` and
/// further `:` (`awsx:x:ec2:Vpc` has package `awsx`, module `x:ec2`, name
/// `Vpc`).
///
/// The empty token exists only as the [`Default`] (a state read from a file
/// with no `type`); [`TypeToken::parse`] never returns it.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TypeToken(Arc<str>);

impl TypeToken {
    /// Parses and validates a type token.
    ///
    /// # Errors
    /// [`UrnError::BadType`] when the token has fewer than three
    /// `:`-separated parts, an empty package or name, an empty segment, or
    /// contains `$` or whitespace.
    pub fn parse(s: &str) -> Result<Self> {
        validate_type(s)?;
        Ok(Self(Arc::from(s)))
    }

    /// The whole token.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for the empty (missing) token.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The package: the text before the first `:`.
    pub fn package(&self) -> &str {
        self.0.split(':').next().unwrap_or("")
    }

    /// The module: the text between the first and the last `:`.
    pub fn module(&self) -> &str {
        match (self.0.find(':'), self.0.rfind(':')) {
            (Some(a), Some(b)) if a < b => &self.0[a + 1..b],
            _ => "",
        }
    }

    /// The name: the text after the last `:`.
    pub fn name(&self) -> &str {
        self.0.rsplit(':').next().unwrap_or("")
    }

    /// True for `pulumi:providers:<package>` types.
    pub fn is_provider(&self) -> bool {
        self.0.starts_with(PROVIDER_TYPE_PREFIX)
    }

    /// True for the root stack type `pulumi:pulumi:Stack`.
    pub fn is_stack(&self) -> bool {
        &*self.0 == STACK_TYPE
    }

    /// For a provider type, the package it serves (`aws` for
    /// `pulumi:providers:aws`).
    pub fn provider_package(&self) -> Option<&str> {
        self.0.strip_prefix(PROVIDER_TYPE_PREFIX)
    }

    /// The provider type for a package: `pulumi:providers:<package>`.
    ///
    /// # Errors
    /// [`UrnError::BadType`] when the package name is empty or contains `:`.
    pub fn provider_for(package: &str) -> Result<Self> {
        if package.is_empty() || package.contains(':') {
            return Err(UrnError::BadType {
                token: format!("{PROVIDER_TYPE_PREFIX}{package}"),
                reason: "a provider's package must be non-empty and contain no `:`",
            });
        }
        Self::parse(&format!("{PROVIDER_TYPE_PREFIX}{package}"))
    }
}

fn validate_type(s: &str) -> Result<()> {
    let bad = |reason| {
        Err(UrnError::BadType {
            token: s.to_owned(),
            reason,
        })
    };
    if s.is_empty() {
        return bad("it is empty");
    }
    // One pass over the bytes; the checks are reported in a fixed order
    // whatever the position of the faults. `$`, `:` and ASCII whitespace
    // are single bytes that never occur inside a longer character; other
    // whitespace is looked for only in text that is not ASCII (every URN
    // a load reads is checked here; its characters need no decoding).
    let (mut dollar, mut space, mut empty_part) = (false, false, false);
    let (mut parts, mut part_len) = (1usize, 0usize);
    const SEPARATOR: u8 = TYPE_SEPARATOR as u8;
    for b in s.bytes() {
        match b {
            SEPARATOR => dollar = true,
            b':' => {
                empty_part |= part_len == 0;
                parts += 1;
                part_len = 0;
                continue;
            }
            b'\t'..=b'\r' | b' ' => space = true,
            _ => {}
        }
        part_len += 1;
    }
    empty_part |= part_len == 0;
    space = space || (!s.is_ascii() && s.chars().any(char::is_whitespace));
    if dollar {
        return bad("it contains `$`");
    }
    if space {
        return bad("it contains whitespace");
    }
    if parts < 3 {
        return bad("it has fewer than three `:`-separated parts");
    }
    if empty_part {
        return bad("it has an empty part");
    }
    Ok(())
}

/// The byte offset of the last `::` in `s` (as `str::rfind`).
pub(crate) fn rfind_separator(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut to = bytes.len();
    while let Some(at) = memchr::memrchr(b':', &bytes[..to]) {
        if at > 0 && bytes[at - 1] == b':' {
            return Some(at - 1);
        }
        to = at;
    }
    None
}

/// A provider reference's text split at its last `::` into the provider's
/// URN and ID (as `rsplit_once("::")`, without a substring searcher's
/// setup, which costs more than the search on text this short). `None`
/// without a separator.
pub(crate) fn split_reference(s: &str) -> Option<(&str, &str)> {
    rfind_separator(s).map(|i| (&s[..i], &s[i + 2..]))
}

/// The byte offset of the first `::` in `s` (a byte search for `:`, which
/// costs less than a substring searcher's setup on short text).
fn find_separator(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut from = 0;
    while let Some(i) = memchr::memchr(b':', &bytes[from..]) {
        let at = from + i;
        if bytes.get(at + 1) == Some(&b':') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

impl std::borrow::Borrow<str> for TypeToken {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TypeToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TypeToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl FromStr for TypeToken {
    type Err = UrnError;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl Serialize for TypeToken {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TypeToken {
    /// An empty string reads as the empty token (reported by the integrity
    /// verifier); anything else must be a valid token.
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        // Looked at in place: a `Cow<str>` is read as an owned `String`
        // (one allocation a state, for a token nearly always interned).
        struct V;
        impl de::Visitor<'_> for V {
            type Value = TypeToken;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a type token string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<TypeToken, E> {
                if s.is_empty() {
                    return Ok(TypeToken::default());
                }
                interned(s, |i| &mut i.types, TypeToken::parse).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A resource's URN.
///
/// Equality, ordering and hashing are those of the text. The empty URN
/// exists only as the [`Default`] (a state read with no `urn`, reported by
/// the integrity verifier); [`Urn::parse`] never returns it.
#[derive(Clone, Default)]
pub struct Urn {
    text: Arc<str>,
    /// End of the stack part (exclusive).
    stack_end: u32,
    /// End of the project part.
    project_end: u32,
    /// End of the qualified type part.
    type_end: u32,
}

impl Urn {
    /// Parses a URN.
    ///
    /// # Errors
    /// A typed [`UrnError`] naming what is missing or malformed; never
    /// panics on any input.
    pub fn parse(s: &str) -> Result<Self> {
        Self::from_arc(Arc::from(s))
    }

    fn from_arc(text: Arc<str>) -> Result<Self> {
        let s: &str = &text;
        if u32::try_from(s.len()).is_err() {
            return Err(UrnError::TooLong(s.len()));
        }
        let Some(rest) = s.strip_prefix(URN_PREFIX) else {
            return Err(UrnError::MissingPrefix(s.to_owned()));
        };
        let base = URN_PREFIX.len();
        let missing = |part| UrnError::MissingPart {
            urn: s.to_owned(),
            part,
        };
        let empty = |part| UrnError::EmptyPart {
            urn: s.to_owned(),
            part,
        };
        let stack_len = find_separator(rest).ok_or_else(|| missing("project"))?;
        let after_stack = &rest[stack_len + 2..];
        let project_len = find_separator(after_stack).ok_or_else(|| missing("type"))?;
        let after_project = &after_stack[project_len + 2..];
        let type_len = find_separator(after_project).ok_or_else(|| missing("name"))?;
        let qualified = &after_project[..type_len];
        let name = &after_project[type_len + 2..];
        if stack_len == 0 {
            return Err(empty("stack"));
        }
        if project_len == 0 {
            return Err(empty("project"));
        }
        if qualified.is_empty() {
            return Err(empty("type"));
        }
        if name.is_empty() {
            return Err(empty("name"));
        }
        for ty in qualified.split(TYPE_SEPARATOR) {
            validate_type(ty)?;
        }
        let stack_end = base + stack_len;
        let project_end = stack_end + 2 + project_len;
        let type_end = project_end + 2 + type_len;
        // The length check above makes these conversions lossless.
        Ok(Self {
            stack_end: stack_end as u32,
            project_end: project_end as u32,
            type_end: type_end as u32,
            text,
        })
    }

    /// Builds a URN from its parts. `parent_type` is the parent's qualified
    /// type (its whole chain); it is ignored when the parent is the stack
    /// resource, as in Pulumi.
    ///
    /// # Errors
    /// A typed [`UrnError`] when a part is empty, the stack or project
    /// contains `::`, or a type is malformed.
    pub fn new(
        stack: &str,
        project: &str,
        parent_type: Option<&str>,
        ty: &TypeToken,
        name: &str,
    ) -> Result<Self> {
        let qualified = match parent_type {
            Some(p) if !p.is_empty() && p != STACK_TYPE => format!("{p}{TYPE_SEPARATOR}{ty}"),
            _ => ty.to_string(),
        };
        let text = format!("{URN_PREFIX}{stack}::{project}::{qualified}::{name}");
        let urn = Self::parse(&text)?;
        // A `::` inside the stack or project would shift the parts.
        if urn.stack() != stack || urn.project() != project || urn.name() != name {
            return Err(UrnError::MissingPart {
                urn: text,
                part: "stack or project without `::`",
            });
        }
        Ok(urn)
    }

    /// Builds a URN under an (already valid) parent URN, or at the top when
    /// `parent` is `None` or the stack resource, without re-validating the
    /// parent's type chain: the planner's fast path.
    ///
    /// # Errors
    /// As [`Urn::new`].
    pub fn derive(
        stack: &str,
        project: &str,
        parent: Option<&Urn>,
        ty: &TypeToken,
        name: &str,
    ) -> Result<Self> {
        let bad_part = |part| {
            Err(UrnError::EmptyPart {
                urn: format!("{URN_PREFIX}{stack}::{project}::{ty}::{name}"),
                part,
            })
        };
        if ty.is_empty() {
            return Err(UrnError::BadType {
                token: String::new(),
                reason: "it is empty",
            });
        }
        // A `::` inside, or a trailing `:`, would shift the parts.
        let ok = |p: &str| !p.is_empty() && !p.contains(URN_SEPARATOR) && !p.ends_with(':');
        if !ok(stack) {
            return bad_part("stack (non-empty, no `::`, no trailing `:`)");
        }
        if !ok(project) {
            return bad_part("project (non-empty, no `::`, no trailing `:`)");
        }
        if name.is_empty() {
            return bad_part("name");
        }
        let parent_q = parent
            .map(Urn::qualified_type)
            .filter(|q| !q.is_empty() && *q != STACK_TYPE);
        let mut text = String::with_capacity(
            URN_PREFIX.len()
                + stack.len()
                + project.len()
                + ty.as_str().len()
                + name.len()
                + parent_q.map_or(0, |q| q.len() + 1)
                + 6,
        );
        text.push_str(URN_PREFIX);
        text.push_str(stack);
        let stack_end = text.len();
        text.push_str(URN_SEPARATOR);
        text.push_str(project);
        let project_end = text.len();
        text.push_str(URN_SEPARATOR);
        if let Some(q) = parent_q {
            text.push_str(q);
            text.push(TYPE_SEPARATOR);
        }
        text.push_str(ty.as_str());
        let type_end = text.len();
        text.push_str(URN_SEPARATOR);
        text.push_str(name);
        if u32::try_from(text.len()).is_err() {
            return Err(UrnError::TooLong(text.len()));
        }
        Ok(Self {
            text: Arc::from(text),
            stack_end: stack_end as u32,
            project_end: project_end as u32,
            type_end: type_end as u32,
        })
    }

    /// Derives a child's URN from its parent's URN (the type chain of the
    /// parent, extended with `ty`), as the step generator does.
    ///
    /// # Errors
    /// As [`Urn::new`].
    pub fn child(&self, ty: &TypeToken, name: &str) -> Result<Self> {
        Self::new(
            self.stack(),
            self.project(),
            Some(self.qualified_type()),
            ty,
            name,
        )
    }

    /// The whole URN text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True for the empty (missing) URN.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The stack name.
    pub fn stack(&self) -> &str {
        self.slice(URN_PREFIX.len(), self.stack_end)
    }

    /// The project name.
    pub fn project(&self) -> &str {
        self.slice(self.stack_end as usize + 2, self.project_end)
    }

    /// The qualified type: the parent type chain and the own type, joined
    /// with `$`.
    pub fn qualified_type(&self) -> &str {
        self.slice(self.project_end as usize + 2, self.type_end)
    }

    /// The resource's own type: the last element of the qualified type.
    pub fn type_str(&self) -> &str {
        let q = self.qualified_type();
        q.rsplit(TYPE_SEPARATOR).next().unwrap_or(q)
    }

    /// The parent types (all but the last element of the qualified type),
    /// outermost first.
    pub fn parent_types(&self) -> impl Iterator<Item = &str> {
        let q = self.qualified_type();
        let own = q.rfind(TYPE_SEPARATOR).map_or(0, |i| i);
        q[..own].split(TYPE_SEPARATOR).filter(|t| !t.is_empty())
    }

    /// The resource's name (may contain `::`).
    pub fn name(&self) -> &str {
        if self.is_empty() {
            return "";
        }
        &self.text[self.type_end as usize + 2..]
    }

    /// The same URN with another name.
    ///
    /// # Errors
    /// [`UrnError::EmptyPart`] when `name` is empty.
    pub fn with_name(&self, name: &str) -> Result<Self> {
        Self::parse(&format!("{}::{name}", &self.text[..self.type_end as usize]))
    }

    /// Whether both hold the same allocation (interning shares it).
    #[cfg(test)]
    pub(crate) fn shares_text(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.text, &other.text)
    }

    fn slice(&self, start: usize, end: u32) -> &str {
        if self.is_empty() {
            return "";
        }
        &self.text[start..end as usize]
    }
}

impl PartialEq for Urn {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Urn {}

impl PartialOrd for Urn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Urn {
    fn cmp(&self, other: &Self) -> Ordering {
        self.text.cmp(&other.text)
    }
}

impl Hash for Urn {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl std::borrow::Borrow<str> for Urn {
    fn borrow(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Urn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Urn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.text, f)
    }
}

impl FromStr for Urn {
    type Err = UrnError;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl Serialize for Urn {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Urn {
    /// An empty string reads as the empty URN (reported by the integrity
    /// verifier); anything else must parse.
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Urn;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a URN string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Urn, E> {
                if s.is_empty() {
                    return Ok(Urn::default());
                }
                interned(s, |i| &mut i.urns, Urn::parse).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// The URNs and type tokens a decode has read so far, shared by every
/// later occurrence of the same text (see [`with_interning`]).
#[derive(Default)]
struct Interner {
    urns: crate::model::fasthash::FastSet<Urn>,
    types: crate::model::fasthash::FastSet<TypeToken>,
}

thread_local! {
    static INTERNER: std::cell::RefCell<Option<Interner>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` (a decode) with URN and type-token interning on this thread:
/// each distinct URN or type text is validated and allocated once, and
/// every later occurrence (a parent, a dependency, a resource reference)
/// shares it. Values are the same as without; only the work and the
/// memory are less. Nested calls share the outer scope's table.
pub(crate) fn with_interning<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            if self.0 {
                INTERNER.with(|i| i.borrow_mut().take());
            }
        }
    }
    let outer = INTERNER.with(|i| {
        let mut slot = i.borrow_mut();
        let outer = slot.is_some();
        if !outer {
            *slot = Some(Interner::default());
        }
        outer
    });
    let _reset = Reset(!outer);
    f()
}

/// Makes room for `n` more URNs in this thread's interning table, if a
/// decode is interning (a deployment's states each bring their own URN:
/// growing the table by doubling hashes every URN again each time).
pub(crate) fn reserve_interned_urns(n: usize) {
    INTERNER.with(|i| {
        if let Some(interner) = i.borrow_mut().as_mut() {
            // Tried: without the room the table grows as it did.
            let _ = interner.urns.try_reserve(n);
        }
    });
}

/// `parse` of `s`, or the value already read for the same text while
/// interning.
fn interned<T: Clone + std::hash::Hash + Eq + std::borrow::Borrow<str>>(
    s: &str,
    table: impl Fn(&mut Interner) -> &mut crate::model::fasthash::FastSet<T>,
    parse: impl FnOnce(&str) -> Result<T>,
) -> Result<T> {
    INTERNER.with(|i| {
        let mut slot = i.borrow_mut();
        let Some(interner) = slot.as_mut() else {
            drop(slot);
            return parse(s);
        };
        let set = table(interner);
        if let Some(v) = set.get(s) {
            return Ok(v.clone());
        }
        let v = parse(s)?;
        set.insert(v.clone());
        Ok(v)
    })
}

/// A reference to a provider instance: `<provider URN>::<ID>`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderRef {
    urn: Urn,
    id: String,
}

impl ProviderRef {
    /// Builds a reference from a provider's URN and ID.
    ///
    /// # Errors
    /// [`UrnError::BadProviderReference`] when the URN's type is not a
    /// provider type or the ID is empty.
    pub fn new(urn: Urn, id: impl Into<String>) -> Result<Self> {
        let id = id.into();
        // The reference's text only for an error (a valid one costs no
        // formatting).
        let bad = |urn: &Urn, id: &str, reason: String| UrnError::BadProviderReference {
            reference: format!("{urn}::{id}"),
            reason,
        };
        // The resource's own type decides, as Pulumi's: a provider may be
        // parented to a component (`my:c:Comp$pulumi:providers:aws`).
        if !urn.type_str().starts_with(PROVIDER_TYPE_PREFIX) {
            let reason = format!("`{}` is not a provider type", urn.type_str());
            return Err(bad(&urn, &id, reason));
        }
        if id.is_empty() {
            return Err(bad(&urn, &id, "the ID is empty".into()));
        }
        Ok(Self { urn, id })
    }

    /// Parses `<provider URN>::<ID>` (the ID is after the last `::`).
    ///
    /// # Errors
    /// [`UrnError::BadProviderReference`] naming what is wrong.
    pub fn parse(s: &str) -> Result<Self> {
        let Some(i) = rfind_separator(s) else {
            return Err(UrnError::BadProviderReference {
                reference: s.to_owned(),
                reason: "it has no `::<ID>`".into(),
            });
        };
        let urn = Urn::parse(&s[..i]).map_err(|e| UrnError::BadProviderReference {
            reference: s.to_owned(),
            reason: e.to_string(),
        })?;
        Self::new(urn, &s[i + 2..])
    }

    /// The provider's URN.
    pub fn urn(&self) -> &Urn {
        &self.urn
    }

    /// The provider's ID (may be the unknown placeholder during preview).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The package the provider serves.
    pub fn package(&self) -> &str {
        self.urn
            .type_str()
            .strip_prefix(PROVIDER_TYPE_PREFIX)
            .unwrap_or("")
    }

    /// The reference's text, `urn::id` (as `to_string`, in one exact
    /// allocation).
    pub fn text(&self) -> String {
        let (urn, id) = (self.urn.as_str(), self.id.as_str());
        let mut s = String::with_capacity(urn.len() + 2 + id.len());
        s.push_str(urn);
        s.push_str("::");
        s.push_str(id);
        s
    }

    /// Whether `text` is this reference's text, without building it.
    pub fn is_text(&self, text: &str) -> bool {
        text.strip_prefix(self.urn.as_str())
            .and_then(|rest| rest.strip_prefix("::"))
            .is_some_and(|id| id == self.id)
    }
}

impl fmt::Display for ProviderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}::{}", self.urn, self.id)
    }
}

impl fmt::Debug for ProviderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

impl FromStr for ProviderRef {
    type Err = UrnError;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The type rules as first written (one scan per rule), against which
    /// the one-pass `validate_type` is checked.
    fn validate_type_by_rules(s: &str) -> std::result::Result<(), &'static str> {
        if s.is_empty() {
            return Err("it is empty");
        }
        if s.contains(TYPE_SEPARATOR) {
            return Err("it contains `$`");
        }
        if s.chars().any(char::is_whitespace) {
            return Err("it contains whitespace");
        }
        if s.split(':').count() < 3 {
            return Err("it has fewer than three `:`-separated parts");
        }
        if s.split(':').any(str::is_empty) {
            return Err("it has an empty part");
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn one_pass_type_check_agrees_with_the_rules(
            s in proptest::string::string_regex("[a:$ \t\r\u{1f}\u{85}\u{a0}\u{2003}\u{b}/é]{0,9}").unwrap()
        ) {
            let got = validate_type(&s).map_err(|e| match e {
                UrnError::BadType { reason, .. } => reason,
                other => panic!("unexpected error {other:?}"),
            });
            proptest::prop_assert_eq!(got, validate_type_by_rules(&s));
        }

        #[test]
        fn separator_search_agrees_with_str_find(
            s in proptest::string::string_regex("[a:é]{0,12}").unwrap()
        ) {
            proptest::prop_assert_eq!(find_separator(&s), s.find(URN_SEPARATOR));
            proptest::prop_assert_eq!(rfind_separator(&s), s.rfind(URN_SEPARATOR));
            proptest::prop_assert_eq!(split_reference(&s), s.rsplit_once(URN_SEPARATOR));
        }
    }

    #[test]
    fn parses_parts() {
        let u = Urn::parse("urn:pulumi:dev::app::custom:c:App$aws:s3/bucket:Bucket::a::b").unwrap();
        assert_eq!(u.stack(), "dev");
        assert_eq!(u.project(), "app");
        assert_eq!(u.qualified_type(), "custom:c:App$aws:s3/bucket:Bucket");
        assert_eq!(u.type_str(), "aws:s3/bucket:Bucket");
        assert_eq!(u.parent_types().collect::<Vec<_>>(), ["custom:c:App"]);
        assert_eq!(u.name(), "a::b");
        let t = TypeToken::parse(u.type_str()).unwrap();
        assert_eq!(
            (t.package(), t.module(), t.name()),
            ("aws", "s3/bucket", "Bucket")
        );
    }

    #[test]
    fn a_provider_parented_to_a_component_is_a_provider() {
        let r = ProviderRef::parse("urn:pulumi:dev::app::my:c:Comp$pulumi:providers:aws::p::id-1")
            .unwrap();
        assert_eq!((r.package(), r.id()), ("aws", "id-1"));
        let not = ProviderRef::parse(
            "urn:pulumi:dev::app::pulumi:providers:aws$aws:s3/bucket:Bucket::b::id-1",
        );
        assert!(
            matches!(not, Err(UrnError::BadProviderReference { .. })),
            "{not:?}"
        );
    }

    #[test]
    fn derives_children_and_skips_the_stack_type() {
        let stack = TypeToken::parse(STACK_TYPE).unwrap();
        let root = Urn::new("dev", "app", None, &stack, "app-dev").unwrap();
        let comp = TypeToken::parse("my:mod:Comp").unwrap();
        let c = Urn::new("dev", "app", Some(root.qualified_type()), &comp, "c").unwrap();
        assert_eq!(c.as_str(), "urn:pulumi:dev::app::my:mod:Comp::c");
        let leaf = c
            .child(&TypeToken::parse("aws:s3:Bucket").unwrap(), "b")
            .unwrap();
        assert_eq!(
            leaf.as_str(),
            "urn:pulumi:dev::app::my:mod:Comp$aws:s3:Bucket::b"
        );
    }

    #[test]
    fn provider_references() {
        let r = ProviderRef::parse(
            "urn:pulumi:dev::p::pulumi:providers:aws::default_2_7_0::a9067732-5453",
        )
        .unwrap();
        assert_eq!(r.urn().name(), "default_2_7_0");
        assert_eq!(r.id(), "a9067732-5453");
        assert_eq!(r.package(), "aws");
        let text = "urn:pulumi:dev::p::pulumi:providers:aws::default_2_7_0::a9067732-5453";
        assert_eq!(r.text(), text);
        assert_eq!(r.text(), r.to_string());
        assert!(r.is_text(text));
        for other in [
            "urn:pulumi:dev::p::pulumi:providers:aws::default_2_7_0::a9067732-545",
            "urn:pulumi:dev::p::pulumi:providers:aws::default_2_7_0::a9067732-54533",
            "urn:pulumi:dev::p::pulumi:providers:aws::default_2_7_0:a9067732-5453",
            "urn:pulumi:dev::p::pulumi:providers:aws::default_2_7_1::a9067732-5453",
            "",
        ] {
            assert!(!r.is_text(other), "{other}");
        }
        let not_a_provider = "urn:pulumi:dev::p::aws:s3:Bucket::b::id";
        match ProviderRef::parse(not_a_provider) {
            Err(UrnError::BadProviderReference { reference, reason }) => {
                assert_eq!(reference, not_a_provider);
                assert!(reason.contains("not a provider type"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        match ProviderRef::parse("urn:pulumi:dev::p::pulumi:providers:aws::p::") {
            Err(UrnError::BadProviderReference { reference, reason }) => {
                assert_eq!(reference, "urn:pulumi:dev::p::pulumi:providers:aws::p::");
                assert_eq!(reason, "the ID is empty");
            }
            other => panic!("{other:?}"),
        }
        assert!(ProviderRef::parse("nothing").is_err());
    }

    #[test]
    fn malformed_inputs_are_typed_errors() {
        for bad in [
            "",
            "urn:pulumi:",
            "urn:pulumi:dev",
            "urn:pulumi:dev::p",
            "urn:pulumi:dev::p::a:b:C",
            "urn:pulumi:::p::a:b:C::n",
            "urn:pulumi:d::::a:b:C::n",
            "urn:pulumi:d::p::::n",
            "urn:pulumi:d::p::a:b:C::",
            "urn:pulumi:d::p::a:b::n",
            "urn:pulumi:d::p::a:b:C$::n",
            "urn:x:d::p::a:b:C::n",
        ] {
            assert!(Urn::parse(bad).is_err(), "{bad:?} should not parse");
        }
        assert!(matches!(
            TypeToken::parse("a:b"),
            Err(UrnError::BadType { .. })
        ));
        assert!(matches!(
            TypeToken::parse("a::b"),
            Err(UrnError::BadType { .. })
        ));
    }
}
