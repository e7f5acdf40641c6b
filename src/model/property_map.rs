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
use std::sync::{Arc, OnceLock};

use litemap::LiteMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::property::{PropertyValue, SIG_KEY};

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
///
/// A map read from a checkpoint may be held as its JSON text, decoded on
/// its first look (see [`with_lazy_maps`]); it reads, compares and
/// encodes exactly as the decoded map does.
#[derive(Clone, Default)]
pub struct PropertyMap(Option<Arc<Inner>>);

/// A map's shared body: its entries, and while they are unchanged the
/// JSON object they were (or will be) decoded from.
#[derive(Default)]
struct Inner {
    /// The JSON object, non-empty, checked when it was read to decode
    /// (see [`PropertyMap::from_text`]); `None` for a map built or
    /// changed in memory.
    raw: Option<Box<RawValue>>,
    /// `raw` is byte for byte what the compact encoder writes for the
    /// entries it decodes to (see [`with_raw_writes`]).
    canonical: bool,
    /// The keys of every object in `raw` are in strictly ascending order,
    /// so its tokens in text order are what encoding the entries visits
    /// (see [`with_indented_writes`]).
    ordered: bool,
    /// The entries: set at construction, or on the first look at `raw`.
    entries: OnceLock<Entries>,
}

impl Inner {
    fn built(entries: Entries) -> Self {
        Self {
            raw: None,
            canonical: false,
            ordered: false,
            entries: OnceLock::from(entries),
        }
    }

    fn entries(&self) -> &Entries {
        self.entries.get_or_init(|| match &self.raw {
            Some(raw) => decode_checked(raw.get()),
            None => Entries::new(),
        })
    }

    /// The entries by value (decoded if they never were).
    fn into_entries(mut self) -> Entries {
        match self.entries.take() {
            Some(entries) => entries,
            None => (self.raw.as_deref())
                .map(|raw| decode_checked(raw.get()))
                .unwrap_or_default(),
        }
    }
}

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
        Self(Some(Arc::new(Inner::built(LiteMap::with_capacity(n)))))
    }

    /// The number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether the map has no entries (a map still held as its text is
    /// not: the text of an empty object is never kept).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            None => true,
            Some(inner) if inner.raw.is_some() => false,
            Some(inner) => inner.entries().is_empty(),
        }
    }

    /// Whether the map may hold a signed value (a secret, an output value,
    /// a resource reference, an asset or archive) at any depth: `false`
    /// for a map kept as its text, which holds none (one that did was
    /// decoded when it was read). Walks for secrets and references skip
    /// such a map without decoding it.
    #[must_use]
    pub fn may_hold_signed(&self) -> bool {
        self.0.as_ref().is_none_or(|inner| inner.raw.is_none())
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
        match &self.0 {
            Some(inner) => inner.entries(),
            None => &EMPTY,
        }
    }

    /// The entries, mutably: copied first when another clone shares them,
    /// decoded first when they are still text (which is then dropped: it
    /// no longer says what the entries are).
    fn entries_mut(&mut self) -> &mut Entries {
        let built_alone = self.0.as_mut().is_some_and(|arc| {
            arc.raw.is_none() && arc.entries.get().is_some() && Arc::get_mut(arc).is_some()
        });
        if !built_alone {
            let entries = std::mem::take(self).into_entries();
            self.0 = Some(Arc::new(Inner::built(entries)));
        }
        match (self.0.as_mut())
            .and_then(Arc::get_mut)
            .and_then(|inner| inner.entries.get_mut())
        {
            Some(entries) => entries,
            None => unreachable!("a map's body is unique and decoded here"),
        }
    }

    /// The entries by value: taken when this handle is the only one,
    /// copied when another shares them, decoded when they are still text.
    fn into_entries(self) -> Entries {
        match self.0.map(Arc::try_unwrap) {
            Some(Ok(alone)) => alone.into_entries(),
            Some(Err(shared)) => shared.entries().clone(),
            None => Entries::new(),
        }
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
        Self(Some(Arc::new(Inner::built(
            LiteMap::from_sorted_store_unchecked(sorted),
        ))))
    }
}

impl PartialEq for PropertyMap {
    fn eq(&self, other: &Self) -> bool {
        if self.shares_with(other) {
            return true;
        }
        // The same text decodes to the same entries (no look at either).
        if let (Some(a), Some(b)) = (&self.0, &other.0) {
            if let (Some(x), Some(y)) = (&a.raw, &b.raw) {
                if x.get() == y.get() {
                    return true;
                }
            }
        }
        self.entries() == other.entries()
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
        self.into_entries().into_tuple_vec().into_iter()
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
        if let Some(inner @ Inner { raw: Some(raw), .. }) = self.0.as_deref() {
            match WRITES.with(std::cell::Cell::get) {
                Writes::Compact if inner.canonical => return raw.serialize(s),
                Writes::Compact | Writes::Indented
                    if inner.ordered && inner.entries.get().is_none() =>
                {
                    // The text's tokens, in its order, straight to the
                    // encoder: what encoding the entries would visit,
                    // without building them.
                    let mut de = serde_json::Deserializer::from_str(raw.get());
                    return serde_transcode::Transcoder::new(&mut de).serialize(s);
                }
                _ => {}
            }
        }
        s.collect_map(self.entries().iter())
    }
}

impl<'de> Deserialize<'de> for PropertyMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if LAZY.with(std::cell::Cell::get) {
            let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
            return PropertyMap::from_text(raw).map_err(serde::de::Error::custom);
        }
        d.deserialize_map(MapVisitor)
    }
}

thread_local! {
    /// Whether maps decoded on this thread are kept as text (see
    /// [`with_lazy_maps`]).
    static LAZY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// How maps encoded on this thread that are still held as text may be
    /// written (see [`with_raw_writes`]).
    static WRITES: std::cell::Cell<Writes> = const { std::cell::Cell::new(Writes::Entries) };
}

/// How a map still held as its text is encoded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// From its entries (decoded first): any encoder.
    Entries,
    /// `serde_json`'s compact writer: a canonical text as it is, an
    /// ordered one transcoded.
    Compact,
    /// `serde_json`'s indented writer: an ordered text transcoded.
    Indented,
}

/// Runs `f` with `key` set to `value` on this thread, restoring its value
/// after (also when `f` panics).
fn with_set<T, V: Copy + 'static>(
    key: &'static std::thread::LocalKey<std::cell::Cell<V>>,
    value: V,
    f: impl FnOnce() -> T,
) -> T {
    struct Restore<V: Copy + 'static>(&'static std::thread::LocalKey<std::cell::Cell<V>>, V);
    impl<V: Copy + 'static> Drop for Restore<V> {
        fn drop(&mut self) {
            self.0.with(|l| l.set(self.1));
        }
    }
    let _restore = Restore(key, key.with(|l| l.replace(value)));
    f()
}

/// Runs `f`, a decode by `serde_json` (from a string or bytes, never from
/// a `Value`), with every [`PropertyMap`] it reads kept as its JSON text
/// and decoded on its first look.
///
/// A load reads every state's inputs and outputs, and most of them are
/// never looked at before they are written again (a no-op, a targeted
/// update, `stack export`); decoded, they were two thirds of a state's
/// allocations (a key and a value string each, the entries, the map) and
/// most of the fresh memory a load faults in. The text is checked as it
/// is read with the same visits the decode makes (numbers, strings,
/// keys), so it is sure to decode later, and a map with a signed value in
/// it (a secret, an asset, a resource reference: objects whose decode
/// checks more) is decoded at once. What a decode with this scope
/// accepts, a decode without it accepts with equal values; the errors may
/// read differently, so callers that report them decode again without it.
pub(crate) fn with_lazy_maps<T>(f: impl FnOnce() -> T) -> T {
    with_set(&LAZY, true, f)
}

/// Runs `f`, an encode by `serde_json`'s compact writer, with every
/// [`PropertyMap`] still held as the text it was read from written without
/// a decode, to the same bytes: as that text when it is exactly what the
/// encoder writes for the map (compact, keys in order and unique, strings
/// without escapes, integers only), else, when its keys are in order,
/// transcoded token by token into the writer. A compaction writes every
/// state of the stack, and most of them were never looked at.
///
/// The text is written as it is, so this must not be set around an
/// indented writer (the map would not be indented) or another format.
pub(crate) fn with_raw_writes<T>(f: impl FnOnce() -> T) -> T {
    with_set(&WRITES, Writes::Compact, f)
}

/// Runs `f`, an encode by `serde_json`'s indented writer, with every
/// [`PropertyMap`] still held as text whose keys are in order transcoded
/// into the writer without a decode (the same bytes: the same tokens in
/// the same order).
pub(crate) fn with_indented_writes<T>(f: impl FnOnce() -> T) -> T {
    with_set(&WRITES, Writes::Indented, f)
}

/// How deep a map kept as text may nest (its own object included): a
/// state's maps sit at most seven levels deep in a file, and the reader
/// refuses 128, so a map the text check takes is one the whole-file
/// reader takes too. Deeper ones are refused here (the caller's careful
/// decode then decides).
const MAX_TEXT_DEPTH: usize = 100;

impl PropertyMap {
    /// The map `raw` holds: kept as text when it can only decode, decoded
    /// now when it holds a signed value, empty when it is.
    fn from_text(raw: Box<RawValue>) -> Result<Self, serde_json::Error> {
        let text = raw.get();
        let found = match Plain::check(text) {
            Some(found) => found,
            None => {
                let mut de = serde_json::Deserializer::from_str(text);
                let found = serde::Deserializer::deserialize_map(&mut de, Check { depth: 1 })?;
                de.end()?;
                found
            }
        };
        if found.signed {
            let mut de = serde_json::Deserializer::from_str(text);
            return serde::Deserializer::deserialize_map(&mut de, MapVisitor);
        }
        if !found.entries {
            return Ok(Self::new());
        }
        // The check counted every token as the encoder writes it, and
        // gave up on any it may write otherwise; the text is those tokens
        // and whatever whitespace lies between them, so a text of the
        // counted length has none: it is what the encoder writes.
        let canonical = found.encoded == Some(text.len());
        Ok(Self(Some(Arc::new(Inner {
            raw: Some(raw),
            canonical,
            ordered: found.ordered,
            entries: OnceLock::new(),
        }))))
    }
}

/// Decodes text [`PropertyMap::from_text`] kept.
///
/// # Panics
/// Never for such text: it was checked with the visits this decode makes.
/// A failure here is a bug, reported rather than read as an empty map.
fn decode_checked(raw: &str) -> Entries {
    let mut de = serde_json::Deserializer::from_str(raw);
    match serde::Deserializer::deserialize_map(&mut de, EntriesVisitor) {
        Ok(entries) => entries,
        Err(e) => panic!("a property map checked when it was read does not decode: {e}"),
    }
}

/// [`Check`]'s visits over the forms keel and Pulumi write a map in,
/// read byte by byte: strings without escapes or control characters,
/// integers of at most eighteen digits (not `-0`), `null`, `true`,
/// `false`, objects and arrays, whitespace between tokens. On such text
/// it finds exactly what [`Check`] finds (the same tokens, counted by the
/// same rules); on anything else (an escape, a float, a long or negative
/// zero integer, bad syntax, nesting at the limit) it gives up and
/// [`Check`] reads the text, also to say what is wrong with it.
///
/// A load reads every state's maps this way; through `serde`'s visits
/// the check was about a seventh of a load's instructions.
struct Plain<'t> {
    src: &'t str,
    text: &'t [u8],
    at: usize,
}

impl<'t> Plain<'t> {
    /// What [`Check`] finds in `text`, a map, or `None` when this reader
    /// gives the text to [`Check`].
    fn check(text: &'t str) -> Option<Found> {
        let mut plain = Plain {
            src: text,
            text: text.as_bytes(),
            at: 0,
        };
        plain.space();
        if plain.peek()? != b'{' {
            return None;
        }
        let found = plain.value(1)?;
        plain.space();
        (plain.at == plain.text.len()).then_some(found)
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    /// Skips JSON whitespace.
    fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Takes `byte` after any whitespace.
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.space();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// A value at `depth` (the nesting its object or array would have),
    /// whitespace before it skipped.
    fn value(&mut self, depth: usize) -> Option<Found> {
        self.space();
        match self.peek()? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(|s| Found::scalar(s.len() + 2)),
            b'n' => self.word(b"null"),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    fn word(&mut self, word: &[u8]) -> Option<Found> {
        let end = self.at + word.len();
        (self.text.get(self.at..end)? == word).then(|| {
            self.at = end;
            Found::scalar(word.len())
        })
    }

    /// An integer both readers take as one (`serde_json` reads `-0` and
    /// anything past `u64` or `i64` as a float): at most eighteen digits,
    /// no leading zero. A fraction or exponent after it is not a comma or
    /// a closing bracket, so the array or object reading it gives up.
    fn integer(&mut self) -> Option<Found> {
        let start = self.at;
        let negative = self.peek()? == b'-';
        self.at += usize::from(negative);
        let digits = self.text[self.at..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let first = self.peek()?;
        if digits == 0 || digits > 18 || (first == b'0' && (digits > 1 || negative)) {
            return None;
        }
        self.at += digits;
        Some(Found::scalar(self.at - start))
    }

    /// A string without escapes or control characters (its contents).
    fn string(&mut self) -> Option<&'t str> {
        self.at += 1;
        let start = self.at;
        let len = stop(&self.text[start..])?;
        self.at = start + len;
        if self.peek()? != b'"' {
            return None;
        }
        self.at += 1;
        // Between two ASCII quotes: on character boundaries.
        self.src.get(start..start + len)
    }

    fn array(&mut self, depth: usize) -> Option<Found> {
        let depth = Self::nested(depth)?;
        let mut found = Found::scalar("[]".len());
        if self.opens_empty(b']')? {
            return Some(found);
        }
        loop {
            found.item(&self.value(depth)?);
            if self.closes(b']')? {
                return Some(found);
            }
        }
    }

    fn object(&mut self, depth: usize) -> Option<Found> {
        let members = Self::nested(depth)?;
        let mut found = Found::scalar("{}".len());
        if self.opens_empty(b'}')? {
            return Some(found);
        }
        let mut last: Option<&str> = None;
        loop {
            self.space();
            if self.peek()? != b'"' {
                return None;
            }
            let text = self.string()?;
            self.eat(b':')?;
            let value = self.value(members)?;
            let key = Key {
                sig: text == SIG_KEY,
                text: Some(text),
            };
            found.member(last, &key, &value, depth > 1);
            last = Some(text);
            if self.closes(b'}')? {
                return Some(found);
            }
        }
    }

    /// Takes an array's or object's opening bracket; whether `close`
    /// follows at once (taken too).
    fn opens_empty(&mut self, close: u8) -> Option<bool> {
        self.at += 1;
        self.space();
        let empty = self.peek()? == close;
        self.at += usize::from(empty);
        Some(empty)
    }

    /// Takes the comma (`false`) or the `close` (`true`) after a member.
    fn closes(&mut self, close: u8) -> Option<bool> {
        self.space();
        let byte = self.peek()?;
        self.at += 1;
        match byte {
            b',' => Some(false),
            _ if byte == close => Some(true),
            _ => None,
        }
    }

    /// [`Check::nested`]: past the limit, [`Check`] gives the error.
    fn nested(depth: usize) -> Option<usize> {
        (depth < MAX_TEXT_DEPTH).then_some(depth + 1)
    }
}

/// The index of the first byte of `bytes` that ends or interrupts a
/// plain string (a quote, a backslash, a control character), if any.
///
/// Eight bytes at a time: for a word `w` and a byte value `c`,
/// `(w ^ c*) - 0x01*` borrows into the top bit of each byte that equals
/// `c` (and `w - 0x20*` of each byte below `0x20`); masked with `!w`'s top
/// bits, the lowest set one is the first such byte (a borrow only moves
/// upward, so the bytes above it may be flagged wrongly, never those
/// below). The last word is the last eight bytes, overlapping bytes
/// already found clean (which a borrow cannot reach from above).
pub(crate) fn stop(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::MAX / 0xff;
    const TOPS: u64 = ONES << 7;
    let first = |at: usize| -> Option<usize> {
        let word: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
        let w = u64::from_le_bytes(word);
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        let hits = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (w.wrapping_sub(ONES * 0x20) & !w);
        let hits = hits & TOPS;
        (hits != 0).then(|| at + (hits.trailing_zeros() / 8) as usize)
    };
    let n = bytes.len();
    if n < 8 {
        return bytes
            .iter()
            .position(|b| *b == b'"' || *b == b'\\' || *b < 0x20);
    }
    let mut at = 0;
    while at + 8 <= n {
        if let Some(hit) = first(at) {
            return Some(hit);
        }
        at += 8;
    }
    if at < n {
        return first(n - 8);
    }
    None
}

/// What [`Check`] found in a value.
#[derive(Default, Debug, PartialEq)]
struct Found {
    /// The value is an object or array with at least one member.
    entries: bool,
    /// A signed object occurs in it (below the top level).
    signed: bool,
    /// The length of the compact encoding of the decoded value when the
    /// value was read in a form the encoder writes alike (strings without
    /// escapes, integers, objects with keys in strictly ascending order);
    /// `None` when it was not.
    encoded: Option<usize>,
    /// The keys of every object in it are in strictly ascending order.
    ordered: bool,
}

impl Found {
    /// A scalar whose encoding is `len` bytes long.
    fn scalar(len: usize) -> Self {
        Self {
            encoded: Some(len),
            ordered: true,
            ..Self::default()
        }
    }

    /// A scalar the encoder may write otherwise than it was read.
    fn other() -> Self {
        Self {
            ordered: true,
            ..Self::default()
        }
    }
}

impl Found {
    /// Adds an array's next item.
    fn item(&mut self, item: &Found) {
        self.encoded = match (self.encoded, item.encoded) {
            (Some(n), Some(m)) => Some(n + m + usize::from(self.entries)),
            _ => None,
        };
        self.entries = true;
        self.signed |= item.signed;
        self.ordered &= item.ordered;
    }

    /// Adds an object's next member: `key` and its `value`, after the key
    /// `last` (`None` for the first, or one read with an escape); `below`
    /// when the object is not the map itself.
    fn member(&mut self, last: Option<&str>, key: &Key<'_>, value: &Found, below: bool) {
        // A key read without an escape, after the one before it in
        // order: written alike (`"key":value`, after a comma).
        let ordered = match (last, key.text) {
            (None, Some(_)) => true,
            (Some(before), Some(k)) => before < k,
            (_, None) => false,
        };
        self.encoded = match (self.encoded, key.text, value.encoded) {
            (Some(n), Some(k), Some(v)) if ordered => {
                Some(n + k.len() + 3 + v + usize::from(self.entries))
            }
            _ => None,
        };
        self.entries = true;
        self.ordered &= ordered && value.ordered;
        // A signature key in the map itself is a plain key (the map's
        // decode reads it as one); below, it makes the object a signed
        // value.
        self.signed |= value.signed || (key.sig && below);
    }
}

/// The number of decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Reads a property value as [`PropertyValue`]'s decode does, keeping
/// nothing: the same visits (so the same numbers and strings are taken),
/// keys compared in place. `depth` is the nesting of the value's object or
/// array, counting from the map's own.
struct Check {
    depth: usize,
}

impl<'de> serde::de::DeserializeSeed<'de> for Check {
    type Value = Found;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Check {
    type Value = Found;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a property value")
    }

    fn visit_unit<E>(self) -> Result<Found, E> {
        Ok(Found::scalar("null".len()))
    }

    fn visit_bool<E>(self, b: bool) -> Result<Found, E> {
        Ok(Found::scalar(if b { "true".len() } else { "false".len() }))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Found, E> {
        // The reader gives a negative integer here, `-0` as a float.
        Ok(Found::scalar(usize::from(n < 0) + digits(n.unsigned_abs())))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Found, E> {
        Ok(Found::scalar(digits(n)))
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Found, E> {
        // As `PropertyValue`'s decode: a number must be finite.
        match serde_json::Number::from_f64(n) {
            Some(_) => Ok(Found::other()),
            None => Err(E::custom("a number must be finite")),
        }
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Found, E> {
        // Read without an escape: the encoder escapes only quotes,
        // backslashes and control characters, none of which such a
        // string holds.
        Ok(Found::scalar(s.len() + 2))
    }

    fn visit_str<E>(self, _: &str) -> Result<Found, E> {
        // Read with an escape, which the encoder may write otherwise.
        Ok(Found::other())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        let depth = self.nested::<A::Error>()?;
        let mut found = Found::scalar("[]".len());
        while let Some(item) = seq.next_element_seed(Check { depth })? {
            found.item(&item);
        }
        Ok(found)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        let depth = self.nested::<A::Error>()?;
        let mut found = Found::scalar("{}".len());
        let mut last: Option<&'de str> = None;
        while let Some(key) = map.next_key_seed(IsSig)? {
            let value = map.next_value_seed(Check { depth })?;
            found.member(last, &key, &value, self.depth > 1);
            last = key.text;
        }
        Ok(found)
    }
}

impl Check {
    /// The depth of the members of this object or array, or an error when
    /// they would nest deeper than [`MAX_TEXT_DEPTH`].
    fn nested<E: serde::de::Error>(&self) -> Result<usize, E> {
        if self.depth >= MAX_TEXT_DEPTH {
            return Err(E::custom("a property map nests too deep to keep as text"));
        }
        Ok(self.depth + 1)
    }
}

/// An object key as [`IsSig`] read it.
struct Key<'de> {
    /// It is the signature key.
    sig: bool,
    /// The key, when it was read without an escape.
    text: Option<&'de str>,
}

/// Reads an object key and says whether it is the signature key.
struct IsSig;

impl<'de> serde::de::DeserializeSeed<'de> for IsSig {
    type Value = Key<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key<'de>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for IsSig {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
        Ok(Key {
            sig: key == SIG_KEY,
            text: Some(key),
        })
    }

    fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
        Ok(Key {
            sig: key == SIG_KEY,
            text: None,
        })
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

/// Decodes a [`PropertyMap`].
struct MapVisitor;

impl<'de> serde::de::Visitor<'de> for MapVisitor {
    type Value = PropertyMap;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        EntriesVisitor.expecting(f)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, access: A) -> Result<PropertyMap, A::Error> {
        let entries = EntriesVisitor.visit_map(access)?;
        if entries.is_empty() {
            return Ok(PropertyMap::new());
        }
        Ok(PropertyMap(Some(Arc::new(Inner::built(entries)))))
    }
}

/// Decodes a map's entries, sorted by key, in a vector of their exact
/// size (the first look at a map kept as text takes them as they are).
struct EntriesVisitor;

impl<'de> serde::de::Visitor<'de> for EntriesVisitor {
    type Value = Entries;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of property names to values")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut access: A) -> Result<Entries, A::Error> {
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
            return Ok(LiteMap::from_sorted_store_unchecked(entries));
        }
        // Out of order or with duplicate keys: sorted once, the last of
        // duplicate keys kept (as `BTreeMap`), at the size they take.
        let mut sorted = Entries::from_iter(entries).into_tuple_vec();
        sorted.shrink_to_fit();
        Ok(LiteMap::from_sorted_store_unchecked(sorted))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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

    /// Whether `m` is still held as its text.
    fn kept_as_text(m: &PropertyMap) -> bool {
        m.0.as_ref().is_some_and(|inner| inner.raw.is_some())
    }

    /// How the lazy decode took a map.
    #[derive(Debug, PartialEq)]
    enum Took {
        /// Decoded at once (or empty).
        Decoded,
        /// Kept as text, with keys out of order or twice.
        Text,
        /// Kept as text, keys in order, not what the encoder writes.
        Ordered,
        /// Kept as text, byte for byte what the compact encoder writes.
        Canonical,
    }

    /// Decodes `text` with and without [`with_lazy_maps`]: whatever the
    /// lazy decode takes, the eager one takes, with an equal map that
    /// reads, iterates and encodes the same, also with [`with_raw_writes`]
    /// and [`with_indented_writes`] (and then without a decode when the
    /// text is in order). Returns `None` when the lazy decode refused it, else how it
    /// took it.
    fn check_lazy(text: &str) -> Option<Took> {
        let checked = checked(text);
        if let Some(plain) = Plain::check(text) {
            assert_eq!(Some(&plain), checked.as_ref(), "{text}");
        }
        let eager = serde_json::from_str::<PropertyMap>(text);
        let lazy = with_lazy_maps(|| serde_json::from_str::<PropertyMap>(text));
        let lazy = match lazy {
            Ok(lazy) => lazy,
            Err(_) => return None,
        };
        let eager = eager.unwrap_or_else(|e| panic!("lazy took what eager refuses ({e}): {text}"));
        let kept = kept_as_text(&lazy);
        // Written as read only when that is what the encoder writes; and
        // then without a decode.
        let encoded = serde_json::to_string(&eager).unwrap();
        let took = match lazy.0.as_deref() {
            Some(Inner {
                raw: Some(raw),
                canonical: true,
                ordered,
                ..
            }) => {
                assert_eq!(raw.get(), encoded, "kept as canonical: {text}");
                assert!(ordered, "canonical is ordered: {text}");
                Took::Canonical
            }
            Some(Inner {
                raw: Some(_),
                ordered: true,
                ..
            }) => Took::Ordered,
            _ if kept => Took::Text,
            _ => Took::Decoded,
        };
        let looked = |m: &PropertyMap| m.0.as_ref().is_some_and(|i| i.entries.get().is_some());
        let fresh = with_lazy_maps(|| serde_json::from_str::<PropertyMap>(text)).unwrap();
        assert_eq!(
            with_raw_writes(|| serde_json::to_string(&fresh)).unwrap(),
            encoded
        );
        assert!(!kept || looked(&fresh) == (took == Took::Text), "{text}");
        let indented = serde_json::to_string_pretty(&eager).unwrap();
        let fresh = with_lazy_maps(|| serde_json::from_str::<PropertyMap>(text)).unwrap();
        assert_eq!(
            with_indented_writes(|| serde_json::to_string_pretty(&fresh)).unwrap(),
            indented
        );
        assert!(!kept || looked(&fresh) == (took == Took::Text), "{text}");
        // Once decoded, the entries are written (the same bytes).
        assert_eq!(
            with_indented_writes(|| serde_json::to_string_pretty(&lazy)).unwrap(),
            indented
        );
        // Walks for secrets and references skip a map kept as text: it
        // must hold no signed value at any depth.
        fn signed(v: &PropertyValue) -> bool {
            match v {
                PropertyValue::Array(items) => items.iter().any(signed),
                PropertyValue::Object(m) => m.values().any(signed),
                PropertyValue::Null
                | PropertyValue::Bool(_)
                | PropertyValue::Number(_)
                | PropertyValue::String(_)
                | PropertyValue::Computed => false,
                _ => true,
            }
        }
        assert_eq!(lazy.may_hold_signed(), !kept, "{text}");
        assert!(!kept || !eager.values().any(signed), "{text}");
        assert_eq!(lazy.is_empty(), eager.is_empty(), "{text}");
        assert_eq!(lazy, eager, "{text}");
        assert_eq!(
            serde_json::to_string(&lazy).unwrap(),
            serde_json::to_string(&eager).unwrap(),
            "{text}"
        );
        assert_eq!(lazy.len(), eager.len(), "{text}");
        assert!(lazy.iter().eq(eager.iter()), "{text}");
        assert_eq!(format!("{lazy:?}"), format!("{eager:?}"));
        Some(took)
    }

    /// What [`Check`] finds in `text`, or `None` when it refuses it.
    fn checked(text: &str) -> Option<Found> {
        let mut de = serde_json::Deserializer::from_str(text);
        let found = serde::Deserializer::deserialize_map(&mut de, Check { depth: 1 }).ok()?;
        de.end().ok()?;
        Some(found)
    }

    /// The byte reader takes the forms keel and Pulumi write, finding what
    /// [`Check`] finds; everything else it leaves to [`Check`].
    #[test]
    fn the_plain_reader_takes_the_common_forms_and_finds_what_check_finds() {
        let sig = super::SIG_KEY;
        let secret = super::super::property::SIG_SECRET;
        let deep = |n: usize| format!("{{\"v\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        let taken = [
            "{}".to_owned(),
            r#"{"arn":"arn:sim:x","name":"r1","n":[0,-7,123456789012345678,true,false,null]}"#
                .to_owned(),
            "{\n  \"a\": {\n    \"b\": [\n      1,\n      \"\u{e9}\"\n    ]\n  },\r\t\"c\": {}\n}"
                .to_owned(),
            r#"{"b":1,"a":{"y":[],"x":{}},"b":2}"#.to_owned(),
            format!(r#"{{"{sig}":"x","s":[{{"{sig}":"{secret}","ciphertext":"c"}}]}}"#),
            deep(MAX_TEXT_DEPTH - 2),
        ];
        for text in &taken {
            let plain = Plain::check(text);
            assert!(plain.is_some(), "not taken: {text}");
            assert_eq!(plain, checked(text), "{text}");
        }
        let left = [
            r#"{"a":"\n"}"#,
            r#"{"\u0061":1}"#,
            r#"{"a":1.5}"#,
            r#"{"a":1e3}"#,
            r#"{"a":-0}"#,
            r#"{"a":1234567890123456789}"#,
            r#"{"a":01}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":1,}"#,
            r#"{"a":[1,]}"#,
            r#"{"a" 1}"#,
            r#"{"a":1} x"#,
            r#"["a"]"#,
            r#"{"a":nul}"#,
            r#"{"a":"open"#,
        ];
        for text in left
            .iter()
            .copied()
            .chain([deep(MAX_TEXT_DEPTH - 1).as_str()])
        {
            assert_eq!(Plain::check(text), None, "taken: {text}");
        }
    }

    #[test]
    fn a_lazy_map_takes_what_the_eager_decode_takes_and_reads_the_same() {
        let sig = super::SIG_KEY;
        let secret = super::super::property::SIG_SECRET;
        let deep = |n: usize| format!("{{\"v\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        use Took::{Canonical, Decoded, Ordered, Text};
        for (text, want) in [
            ("{}", Some(Decoded)),
            ("  { }  ", Some(Decoded)),
            (
                r#"{"a":"1","b":{"c":[1,2.5,-3,true,null,{}]}}"#,
                Some(Ordered),
            ),
            (
                r#"{"a":"1","b":{"c":[1,-3,true,false,null,{},[]]}}"#,
                Some(Canonical),
            ),
            (
                r#"{"a":18446744073709551615,"b":-9223372036854775808,"c":0,"d":10}"#,
                Some(Canonical),
            ),
            (
                "{\"a\":\"x/y \u{e9}\u{1F980}\",\"b\":\"\"}",
                Some(Canonical),
            ),
            // Written otherwise than read: whitespace, escapes in
            // strings, floats; and keys out of order or twice (at any
            // depth) or escaped.
            ("{\"a\": 1}", Some(Ordered)),
            ("{\"a\":1 }", Some(Ordered)),
            // Whitespace around the map is not the map's.
            (" {\"a\":1}\n", Some(Canonical)),
            ("{\"a\":[1, 2]}", Some(Ordered)),
            ("{\"a\":[{\"c\":1,\"b\":2}]}", Some(Text)),
            (r#"{"b":"2","a":"1","b":"3"}"#, Some(Text)),
            (r#"{"a":"1","a":"1"}"#, Some(Text)),
            (r#"{"a":{"y":1,"x":2}}"#, Some(Text)),
            (r#"{"a":{"x":1,"x":2}}"#, Some(Text)),
            (r#"{"\u0061":1}"#, Some(Text)),
            (r#"{"a":"\/"}"#, Some(Ordered)),
            (r#"{"a":-0}"#, Some(Ordered)),
            (r#"{"a":1.0}"#, Some(Ordered)),
            (
                r#"{"k":1e300,"m":-0.0,"n":18446744073709551616}"#,
                Some(Ordered),
            ),
            (
                r#"{"n":18446744073709551616,"m":-0.0,"k":1e300}"#,
                Some(Text),
            ),
            (
                r#"{"u":"04da6b54-80e4-46f7-96ec-b56ff0331ba9"}"#,
                Some(Canonical),
            ),
            (r#"{"e":"\u00e9\n\"\\\ud83e\udd80"}"#, Some(Ordered)),
            // A signature key in the map itself is a plain key.
            (&format!(r#"{{"{sig}":"x"}}"#), Some(Canonical)),
            // Signed values below: decoded at once, as read.
            (
                &format!(r#"{{"s":{{"{sig}":"{secret}","ciphertext":"abc"}}}}"#),
                Some(Decoded),
            ),
            (
                &format!(
                    r#"{{"s":[{{"\u0034{}":"{secret}","plaintext":"\"x\""}}]}}"#,
                    &sig[1..]
                ),
                Some(Decoded),
            ),
            // Refused by both: a malformed signed value, a number out of
            // range, a bad escape, a raw control character, bad syntax.
            (&format!(r#"{{"s":{{"{sig}":5}}}}"#), None),
            (
                &format!(r#"{{"s":{{"{sig}":"{secret}","other":"1"}}}}"#),
                None,
            ),
            (r#"{"n":1e999}"#, None),
            (r#"{"n":-1e400}"#, None),
            (r#"{"a":"\q"}"#, None),
            ("{\"a\":\"\u{1}\"}", None),
            (r#"{"a":01}"#, None),
            (r#"{"a":1,}"#, None),
            (r#"["not a map"]"#, None),
            // Deep: kept up to the text's limit, refused past it (the
            // eager decode takes it; a caller decodes again without).
            (&deep(MAX_TEXT_DEPTH - 2), Some(Canonical)),
            (&deep(MAX_TEXT_DEPTH - 1), None),
        ] {
            assert_eq!(check_lazy(text), want, "{text}");
        }
    }

    /// The scopes nest and end with their call, also when it panics: a
    /// text copied into an indented or foreign writer would be wrong.
    #[test]
    fn the_write_and_read_scopes_end_with_their_call() {
        let text = "{\"a\":1,\"b\":{\"c\":[true]}}";
        let m = with_lazy_maps(|| serde_json::from_str::<PropertyMap>(text)).unwrap();
        let writes = || WRITES.with(std::cell::Cell::get);
        with_raw_writes(|| {
            assert!(writes() == Writes::Compact);
            with_indented_writes(|| {
                assert!(writes() == Writes::Indented);
                // An indented write inside a compact scope: still indented.
                let pretty = serde_json::to_string_pretty(&m).unwrap();
                assert!(pretty.contains("\n  \"a\": 1"), "{pretty}");
            });
            assert!(writes() == Writes::Compact);
        });
        let panicked = std::panic::catch_unwind(|| {
            with_raw_writes(|| with_lazy_maps(|| panic!("a writer failed")))
        });
        assert!(panicked.is_err());
        assert!(writes() == Writes::Entries);
        assert!(!LAZY.with(std::cell::Cell::get));
        let eager: PropertyMap = serde_json::from_str(text).unwrap();
        assert!(!kept_as_text(&eager));
    }

    #[test]
    fn a_map_kept_as_text_is_shared_changed_and_taken_apart_like_any() {
        let text = r#"{"b":{"x":"1"},"a":"2","c":[3]}"#;
        let m = with_lazy_maps(|| serde_json::from_str::<PropertyMap>(text)).unwrap();
        assert!(kept_as_text(&m));
        assert!(!m.is_empty(), "known non-empty without a decode");
        let mut changed = m.clone();
        assert!(changed.shares_with(&m));
        // Two maps read from the same text are equal without a decode.
        let again = with_lazy_maps(|| serde_json::from_str::<PropertyMap>(text)).unwrap();
        assert!(again == m && !again.shares_with(&m));
        // A look decodes and keeps the text; a change drops it, in the
        // changed copy only.
        assert_eq!(m["a"], s("2"));
        assert!(kept_as_text(&m));
        changed.insert("d".to_owned(), s("4"));
        assert!(!kept_as_text(&changed) && kept_as_text(&m));
        assert_eq!(m.len(), 3);
        assert_eq!(changed.len(), 4);
        assert_ne!(changed, m);
        changed.remove("d");
        assert_eq!(changed, m, "equal by content once changed back");
        assert_eq!(
            serde_json::to_string(&changed).unwrap(),
            r#"{"a":"2","b":{"x":"1"},"c":[3]}"#
        );
        // Taken apart by value, shared or alone, never looked at or not.
        let fresh = || with_lazy_maps(|| serde_json::from_str::<PropertyMap>(text)).unwrap();
        let keys = |m: PropertyMap| m.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(keys(fresh()), ["a", "b", "c"]);
        let kept = fresh();
        assert_eq!(keys(kept.clone()), ["a", "b", "c"]);
        assert_eq!(kept.into_values().count(), 3);
        let mut alone = fresh();
        for v in alone.values_mut() {
            *v = s("0");
        }
        assert!(alone.values().all(|v| *v == s("0")));
        // A map decoded without the scope is never text.
        let eager: PropertyMap = serde_json::from_str(text).unwrap();
        assert!(!kept_as_text(&eager));
        assert_eq!(eager, fresh());
    }

    /// A property value's JSON, of `depth` levels at most: strings with
    /// escapes and non-ASCII, numbers of every form, and objects that are
    /// now and then signed (well-formed or not).
    fn json_value(depth: u32) -> impl Strategy<Value = String> {
        let string = proptest::string::string_regex("[a-c\u{e9}\u{1F980}\"\\\\\n]{0,5}")
            .unwrap()
            .prop_map(|s| serde_json::to_string(&s).unwrap());
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            string,
            "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,3})?([eE][-+]?[0-9]{1,3})?",
            Just(format!("{:?}", super::super::property::UNKNOWN_VALUE)),
        ];
        leaf.prop_recursive(depth, 24, 4, move |inner| {
            let sig = super::SIG_KEY;
            let secret = super::super::property::SIG_SECRET;
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4)
                    .prop_map(|items| format!("[{}]", items.join(","))),
                proptest::collection::vec(("[a-c]{1,2}", inner.clone()), 0..4).prop_map(|fields| {
                    let fields: Vec<String> =
                        fields.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
                    format!("{{{}}}", fields.join(","))
                }),
                (inner, any::<bool>()).prop_map(move |(v, good)| if good {
                    format!(r#"{{"{sig}":"{secret}","ciphertext":"c"}}"#)
                } else {
                    format!(r#"{{"{sig}":"{secret}","ciphertext":{v}}}"#)
                }),
            ]
        })
    }

    proptest! {
        /// The word-at-a-time search finds the byte a byte-at-a-time one
        /// finds, wherever it sits and whatever lies around it.
        #[test]
        fn a_plain_string_stops_where_a_bytewise_search_stops(
            bytes in proptest::collection::vec(
                prop_oneof![
                    Just(b'"'), Just(b'\\'), Just(0u8), Just(0x1f), Just(0x20),
                    Just(0x21), Just(0x5b), Just(0x5d), Just(0x7f), Just(0x80), Just(0xa0), Just(0xff),
                    any::<u8>(),
                ],
                0..40,
            ),
            plain in 0usize..40,
        ) {
            // Mostly plain bytes before the first flagged one.
            let mut bytes = bytes;
            for b in bytes.iter_mut().take(plain) {
                if *b == b'"' || *b == b'\\' || *b < 0x20 {
                    *b = b'a';
                }
            }
            let want = bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
            prop_assert_eq!(stop(&bytes), want);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn lazy_and_eager_decodes_agree_on_any_map(
            fields in proptest::collection::vec(("[a-d]{1,2}", json_value(4)), 0..6),
            spaced in any::<bool>(),
        ) {
            // Compact as keel writes, or with whitespace between tokens.
            let (colon, comma) = if spaced { (": ", ",\n  ") } else { (":", ",") };
            let fields: Vec<String> =
                fields.iter().map(|(k, v)| format!("{k:?}{colon}{v}")).collect();
            let text = format!("{{{}}}", fields.join(comma));
            // Checked inside (`check_lazy` panics on any disagreement);
            // and what the lazy decode refuses, the eager one refuses
            // unless the text's nesting limit was the reason.
            if check_lazy(&text).is_none() {
                prop_assert!(serde_json::from_str::<PropertyMap>(&text).is_err(), "{}", text);
            }
        }
    }
}
