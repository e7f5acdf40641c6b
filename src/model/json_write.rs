//! Compact JSON for keel's own encodes (journal records, base chunks):
//! byte for byte what `serde_json::to_writer` writes, with strings written
//! a word at a time.
//!
//! `serde_json` escapes a string by looking up each of its bytes, and
//! writes every quote, comma and colon through `io::Write` (a `memcpy`
//! call each); a state is about eighty strings. This writer checks eight
//! bytes at a time for the bytes JSON escapes (a quote, a backslash, a
//! control character: [`stop`]) and writes a plain string's quotes and
//! body into the buffer directly. Numbers are written by `serde_json`
//! itself, and anything this writer does not take (a key that is not a
//! string, bytes, a value's own error) abandons the attempt: [`append`]
//! then writes the whole value with `serde_json` instead. So the bytes
//! are `serde_json`'s by construction where this writer declines, and
//! proven equal by the tests below (tables and a proptest of values,
//! every fixture's states, journal entries) where it writes.
//!
//! A declined value is serialized twice. keel's `Serialize` impls have
//! one side effect, the plaintext-refusal flag a secret sets
//! (`property::refusing_plaintexts`), which the second pass sets again.

use serde::ser::{self, Serialize};

use super::property_map::stop;

/// `serde_json`'s name for the struct a `RawValue` serializes as: its
/// one field's string is written as it is (a map kept as its text). A
/// test pins it; were `serde_json` to rename it, the new name would
/// still start with [`SERDE_JSON_TOKENS`] and be declined, so the value
/// would be written by `serde_json`, only slower.
const RAW_TOKEN: &str = "$serde_json::private::RawValue";

/// How the names of `serde_json`'s own marker structs (a raw value, an
/// arbitrary-precision number) start: any other such struct is declined.
const SERDE_JSON_TOKENS: &str = "$serde_json::";

/// Appends `value`'s compact JSON to `out`: exactly what
/// `serde_json::to_writer(out, value)` appends.
///
/// # Errors
/// What `serde_json::to_writer` returns for `value` (a `Serialize` impl's
/// own error); `out` then holds what `serde_json` left.
pub(crate) fn append<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> serde_json::Result<()> {
    let start = out.len();
    if value.serialize(Writer { out }).is_ok() {
        return Ok(());
    }
    // Declined (or the value's own error, which serde_json reports the
    // same way): serde_json writes it all.
    out.truncate(start);
    serde_json::to_writer(&mut *out, value)
}

/// Why the writer stopped: [`append`] then hands the value to
/// `serde_json`, which writes it or names the error.
#[derive(Debug)]
struct Declined;

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for Declined {}

impl ser::Error for Declined {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Declined
    }
}

type Result<T = ()> = std::result::Result<T, Declined>;

/// Writes `s` as a JSON string.
#[inline]
fn string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    match stop(bytes) {
        None => {
            out.reserve(bytes.len() + 2);
            out.push(b'"');
            out.extend_from_slice(bytes);
            out.push(b'"');
        }
        Some(at) => escaped(out, bytes, at),
    }
}

/// Writes `bytes`, whose first byte to escape is at `at`, as a JSON
/// string, with `serde_json`'s escapes (`\"`, `\\`, `\b`, `\f`, `\n`,
/// `\r`, `\t`, and `\u00xx` in lowercase hex for the other control
/// characters).
#[cold]
fn escaped(out: &mut Vec<u8>, mut bytes: &[u8], mut at: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    loop {
        out.extend_from_slice(&bytes[..at]);
        let byte = bytes[at];
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]),
        }
        bytes = &bytes[at + 1..];
        match stop(bytes) {
            Some(next) => at = next,
            None => break,
        }
    }
    out.extend_from_slice(bytes);
    out.push(b'"');
}

/// A number, written by `serde_json` (its formatting, its `null` for a
/// float that is not finite).
fn number<T: Serialize>(out: &mut Vec<u8>, n: T) -> Result {
    serde_json::to_writer(out, &n).map_err(|_| Declined)
}

/// The serializer: a value into `out`.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

/// Where a compound is: `serde_json`'s states, kept so that even a
/// compound given a wrong length writes what `serde_json` writes.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    /// Opened and closed at once (a length of zero given).
    Empty,
    /// No element yet.
    First,
    /// After an element.
    Rest,
}

/// An array or object being written; `variant`: it is the value of a
/// variant's one-key object, which its end closes too.
struct Compound<'a> {
    out: &'a mut Vec<u8>,
    place: Place,
    variant: bool,
}

impl<'a> Compound<'a> {
    fn open(out: &'a mut Vec<u8>, open: u8, close: u8, len: Option<usize>, variant: bool) -> Self {
        out.push(open);
        let place = if len == Some(0) {
            out.push(close);
            Place::Empty
        } else {
            Place::First
        };
        Compound {
            out,
            place,
            variant,
        }
    }

    fn comma(&mut self) {
        if self.place != Place::First {
            self.out.push(b',');
        }
        self.place = Place::Rest;
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        self.comma();
        value.serialize(Writer { out: self.out })
    }

    fn key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result {
        self.comma();
        key.serialize(KeyWriter { out: self.out })?;
        self.out.push(b':');
        Ok(())
    }

    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        value.serialize(Writer { out: self.out })
    }

    fn close(self, close: u8) -> Result {
        if self.place != Place::Empty {
            self.out.push(close);
        }
        if self.variant {
            self.out.push(b'}');
        }
        Ok(())
    }
}

/// A struct: an object, or a raw value's text.
enum Struct<'a> {
    Object(Compound<'a>),
    Raw(&'a mut Vec<u8>),
}

/// Opens a variant's one-key object: `{"variant":`.
fn variant_key(out: &mut Vec<u8>, variant: &str) {
    out.push(b'{');
    string(out, variant);
    out.push(b':');
}

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = Declined;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Struct<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result {
        number(self.out, v)
    }

    fn serialize_i16(self, v: i16) -> Result {
        number(self.out, v)
    }

    fn serialize_i32(self, v: i32) -> Result {
        number(self.out, v)
    }

    fn serialize_i64(self, v: i64) -> Result {
        number(self.out, v)
    }

    fn serialize_i128(self, v: i128) -> Result {
        number(self.out, v)
    }

    fn serialize_u8(self, v: u8) -> Result {
        number(self.out, v)
    }

    fn serialize_u16(self, v: u16) -> Result {
        number(self.out, v)
    }

    fn serialize_u32(self, v: u32) -> Result {
        number(self.out, v)
    }

    fn serialize_u64(self, v: u64) -> Result {
        number(self.out, v)
    }

    fn serialize_u128(self, v: u128) -> Result {
        number(self.out, v)
    }

    fn serialize_f32(self, v: f32) -> Result {
        number(self.out, v)
    }

    fn serialize_f64(self, v: f64) -> Result {
        number(self.out, v)
    }

    fn serialize_char(self, v: char) -> Result {
        string(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, v: &str) -> Result {
        string(self.out, v);
        Ok(())
    }

    fn serialize_bytes(self, _: &[u8]) -> Result {
        Err(Declined)
    }

    fn serialize_none(self) -> Result {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _: &'static str) -> Result {
        self.serialize_unit()
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result {
        variant_key(self.out, variant);
        value.serialize(Writer { out: self.out })?;
        self.out.push(b'}');
        Ok(())
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a>> {
        Ok(Compound::open(self.out, b'[', b']', len, false))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a>> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>> {
        variant_key(self.out, variant);
        Ok(Compound::open(self.out, b'[', b']', Some(len), true))
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a>> {
        Ok(Compound::open(self.out, b'{', b'}', len, false))
    }

    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Struct<'a>> {
        if name == RAW_TOKEN {
            return Ok(Struct::Raw(self.out));
        }
        if name.starts_with(SERDE_JSON_TOKENS) {
            return Err(Declined);
        }
        Ok(Struct::Object(Compound::open(
            self.out,
            b'{',
            b'}',
            Some(len),
            false,
        )))
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>> {
        variant_key(self.out, variant);
        Ok(Compound::open(self.out, b'{', b'}', Some(len), true))
    }
}

/// The four array-like compounds: an element each, `]` at the end.
macro_rules! array_like {
    ($($trait:ident::$method:ident),* $(,)?) => {$(
        impl ser::$trait for Compound<'_> {
            type Ok = ();
            type Error = Declined;

            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
                self.element(value)
            }

            fn end(self) -> Result {
                self.close(b']')
            }
        }
    )*};
}

array_like!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Declined;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result {
        self.key(key)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        self.value(value)
    }

    fn end(self) -> Result {
        self.close(b'}')
    }
}

impl ser::SerializeStruct for Struct<'_> {
    type Ok = ();
    type Error = Declined;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result {
        match self {
            Struct::Object(c) => {
                c.key(key)?;
                c.value(value)
            }
            Struct::Raw(out) if key == RAW_TOKEN => value.serialize(RawWriter { out }),
            Struct::Raw(_) => Err(Declined),
        }
    }

    fn end(self) -> Result {
        match self {
            Struct::Object(c) => c.close(b'}'),
            Struct::Raw(_) => Ok(()),
        }
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Declined;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result {
        self.key(key)?;
        self.value(value)
    }

    fn end(self) -> Result {
        self.close(b'}')
    }
}

/// Declines everything but what it is built for; the two serializers
/// below are this with one method each.
macro_rules! decline {
    ($($method:ident($($arg:ty),*)),* $(,)?) => {$(
        fn $method(self, $(_: $arg),*) -> Result {
            Err(Declined)
        }
    )*};
}

/// A map's key: a string (or char), written as one; anything else is
/// declined (serde_json's quoted numbers and booleans are left to it).
struct KeyWriter<'a> {
    out: &'a mut Vec<u8>,
}

/// A raw value's text, written as it is (`serde_json` checked it when it
/// made the `RawValue`).
struct RawWriter<'a, 'b> {
    out: &'a mut &'b mut Vec<u8>,
}

macro_rules! only_strings {
    ($name:ident $(<$($l:lifetime),*>)?, |$out:ident, $s:ident| $write:expr) => {
        impl$(<$($l),*>)? ser::Serializer for $name$(<$($l),*>)? {
            type Ok = ();
            type Error = Declined;
            type SerializeSeq = ser::Impossible<(), Declined>;
            type SerializeTuple = ser::Impossible<(), Declined>;
            type SerializeTupleStruct = ser::Impossible<(), Declined>;
            type SerializeTupleVariant = ser::Impossible<(), Declined>;
            type SerializeMap = ser::Impossible<(), Declined>;
            type SerializeStruct = ser::Impossible<(), Declined>;
            type SerializeStructVariant = ser::Impossible<(), Declined>;

            fn serialize_str(self, $s: &str) -> Result {
                let $out = self.out;
                $write;
                Ok(())
            }

            decline!(
                serialize_bool(bool),
                serialize_i8(i8),
                serialize_i16(i16),
                serialize_i32(i32),
                serialize_i64(i64),
                serialize_u8(u8),
                serialize_u16(u16),
                serialize_u32(u32),
                serialize_u64(u64),
                serialize_f32(f32),
                serialize_f64(f64),
                serialize_char(char),
                serialize_bytes(&[u8]),
                serialize_none(),
                serialize_unit(),
                serialize_unit_struct(&'static str),
                serialize_unit_variant(&'static str, u32, &'static str),
            );

            fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result {
                Err(Declined)
            }

            fn serialize_newtype_struct<T: Serialize + ?Sized>(
                self,
                _: &'static str,
                _: &T,
            ) -> Result {
                Err(Declined)
            }

            fn serialize_newtype_variant<T: Serialize + ?Sized>(
                self,
                _: &'static str,
                _: u32,
                _: &'static str,
                _: &T,
            ) -> Result {
                Err(Declined)
            }

            fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq> {
                Err(Declined)
            }

            fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple> {
                Err(Declined)
            }

            fn serialize_tuple_struct(
                self,
                _: &'static str,
                _: usize,
            ) -> Result<Self::SerializeTupleStruct> {
                Err(Declined)
            }

            fn serialize_tuple_variant(
                self,
                _: &'static str,
                _: u32,
                _: &'static str,
                _: usize,
            ) -> Result<Self::SerializeTupleVariant> {
                Err(Declined)
            }

            fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap> {
                Err(Declined)
            }

            fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
                Err(Declined)
            }

            fn serialize_struct_variant(
                self,
                _: &'static str,
                _: u32,
                _: &'static str,
                _: usize,
            ) -> Result<Self::SerializeStructVariant> {
                Err(Declined)
            }
        }
    };
}

only_strings!(KeyWriter<'a>, |out, s| string(out, s));
only_strings!(RawWriter<'a, 'b>, |out, s| out
    .extend_from_slice(s.as_bytes()));

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde::Serialize;

    use super::{append, Writer};

    /// `value` written here and by `serde_json`: the same bytes, or the
    /// same failure; and written by this writer itself, not declined and
    /// left to `serde_json`.
    fn check<T: Serialize + ?Sized>(value: &T) {
        let mut own = Vec::new();
        assert!(
            value.serialize(Writer { out: &mut own }).is_ok(),
            "declined: {}",
            String::from_utf8_lossy(&own)
        );
        check_declined(value);
    }

    /// `value` written by [`append`] and by `serde_json`: the same bytes,
    /// or the same failure.
    fn check_declined<T: Serialize + ?Sized>(value: &T) {
        let mut ours = b"prefix".to_vec();
        let mut theirs = b"prefix".to_vec();
        let a = append(&mut ours, value);
        let b = serde_json::to_writer(&mut theirs, value);
        assert_eq!(a.is_ok(), b.is_ok(), "{a:?} / {b:?}");
        assert_eq!(
            String::from_utf8_lossy(&ours),
            String::from_utf8_lossy(&theirs)
        );
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for s in [
            "",
            "plain",
            "eight by",
            "a longer plain string, past a word or two",
            "quote \" inside",
            "\"",
            "\\",
            "back\\slash\\",
            "\u{0}\u{1}\u{7}\u{8}\u{9}\u{a}\u{b}\u{c}\u{d}\u{e}\u{1f}",
            "\u{7f} is not escaped, nor é, ☃ or 😀",
            "tab\there, then a long run after it to cross words\n",
            "urn:pulumi:dev::proj::aws:s3/bucket:Bucket::site-bucket-0001",
        ] {
            check(s);
            check(&BTreeMap::from([(s, s)]));
        }
        check(&'"');
        check(&'\u{1}');
    }

    #[test]
    fn every_shape_of_value_is_written_as_serde_json_writes_it() {
        #[derive(Serialize)]
        enum E {
            Unit,
            New(u8),
            Tuple(u8, String),
            Struct { a: u8, b: Option<String> },
        }
        #[derive(Serialize)]
        struct Unit;
        #[derive(Serialize)]
        struct New(i64);
        #[derive(Serialize)]
        struct Tuple(u8, f64);
        #[derive(Serialize)]
        #[serde(tag = "kind", rename_all = "kebab-case")]
        enum Tagged {
            One { x: u8 },
            Two { y: Vec<u8> },
        }
        #[derive(Serialize)]
        struct Flat {
            a: u8,
            #[serde(flatten)]
            rest: BTreeMap<String, u8>,
        }
        check(&true);
        check(&false);
        check(&());
        check(&Option::<u8>::None);
        check(&Some(3u8));
        check(&[i64::MIN, -1, 0, i64::MAX]);
        check(&[u64::MAX]);
        check(&[i128::MIN]);
        check(&[u128::MAX]);
        check(&[
            0.0,
            -0.0,
            1.5,
            1e300,
            f64::MIN_POSITIVE,
            f64::NAN,
            f64::INFINITY,
        ]);
        check(&[1.5f32, f32::NEG_INFINITY]);
        check(&[E::Unit, E::New(1), E::Tuple(2, "t".into())]);
        check(&E::Struct { a: 1, b: None });
        check(&(Unit, New(-4), Tuple(1, 2.5)));
        check(&Vec::<u8>::new());
        check(&BTreeMap::<String, u8>::new());
        check(&[Tagged::One { x: 1 }, Tagged::Two { y: vec![] }]);
        check(&Flat {
            a: 1,
            rest: BTreeMap::from([("b".into(), 2), ("c".into(), 3)]),
        });
        check(&serde_json::json!({"a": [1, "b", null, {"c": 2.5e-3}], "d": {}}));
        // Declined here, written by serde_json: bytes, keys that are not
        // strings.
        check_declined(serde_bytes_like());
        check_declined(&BTreeMap::from([(1u8, "one"), (2, "two")]));
        check_declined(&BTreeMap::from([(true, 1u8)]));
    }

    /// A byte slice serialized as bytes.
    fn serde_bytes_like() -> &'static impl Serialize {
        struct Bytes;
        impl Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(b"\x00\xff")
            }
        }
        &Bytes
    }

    #[test]
    fn a_raw_value_is_written_as_its_text() {
        let raw =
            serde_json::value::RawValue::from_string(r#"{"a": [1, 2],"b":"c"}"#.into()).unwrap();
        check(&raw);
        check(&BTreeMap::from([("m", &raw)]));
        // The name serde_json gives it (were it renamed, this writer would
        // decline it, and this would fail).
        let mut out = Vec::new();
        assert!(raw.serialize(Writer { out: &mut out }).is_ok());
        assert_eq!(out, br#"{"a": [1, 2],"b":"c"}"#);
        // Another serde_json marker (a renamed one) is left to serde_json.
        struct Marker;
        impl Serialize for Marker {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                let mut m = s.serialize_struct("$serde_json::private::Renamed", 1)?;
                m.serialize_field("$serde_json::private::Renamed", "{}")?;
                m.end()
            }
        }
        assert!(Marker
            .serialize(Writer {
                out: &mut Vec::new()
            })
            .is_err());
        check_declined(&Marker);
    }

    #[test]
    fn a_values_own_error_is_serde_jsons() {
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("refused"))
            }
        }
        check_declined(&Fails);
        let mut out = Vec::new();
        let err = append(&mut out, &[Fails]).unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");
    }

    /// Every state of every Pulumi fixture, read as the engine reads it
    /// (maps kept as their text) and decoded whole, written alone and in
    /// a journal record, with maps written as text and decoded.
    #[test]
    fn every_fixtures_states_are_written_as_serde_json_writes_them() {
        use crate::model::checkpoint::CheckpointFile;
        use crate::model::property_map::with_raw_writes;
        use crate::persist::journal::{Entry, EntryState};
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/pulumi");
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        let mut states = 0;
        for path in entries.flatten().map(|e| e.path()).filter(|p| p.is_file()) {
            let bytes = std::fs::read(&path).expect("a fixture");
            let kept = CheckpointFile::from_slice(&bytes).ok();
            let decoded = serde_json::from_slice::<CheckpointFile>(&bytes).ok();
            for file in kept.iter().chain(&decoded) {
                let Some(d) = file.deployment_ref() else {
                    continue;
                };
                check(d);
                with_raw_writes(|| check(d));
                for state in &d.resources {
                    states += 1;
                    let entry = Entry::Begin {
                        seq: 1,
                        op: 2,
                        ty: crate::model::snapshot::OperationType::Creating,
                        state: EntryState::Borrowed(state),
                    };
                    check(state);
                    check(&entry);
                    with_raw_writes(|| {
                        check(state);
                        check(&entry);
                    });
                }
            }
        }
        assert!(states > 100, "the fixtures' states were read ({states})");
    }

    /// A state with every key set (null, empty or odd where a key can
    /// be) and every kind of property value, decoded and written both
    /// ways, alone and in the records a create writes.
    #[test]
    fn a_state_with_every_key_and_every_value_kind_is_written_as_serde_json_writes_it() {
        use crate::model::property::{
            SIG_ARCHIVE, SIG_ASSET, SIG_KEY, SIG_OUTPUT_VALUE, SIG_RESOURCE_REFERENCE, SIG_SECRET,
            UNKNOWN_VALUE,
        };
        use crate::model::property_map::with_raw_writes;
        use crate::model::State;
        let urn = "urn:pulumi:dev::p::aws:s3/bucket:Bucket::b";
        let values = serde_json::json!({
            "asset": {SIG_KEY: SIG_ASSET, "hash": "h", "text": "t\n\u{1}"},
            "archive": {SIG_KEY: SIG_ARCHIVE, "assets": {"a": {SIG_KEY: SIG_ASSET, "path": "p"}}},
            "big": 18446744073709551615u64,
            "computed": UNKNOWN_VALUE,
            "empty": {},
            "float": 0.1,
            "list": [1, -2, 2.5e-300, true, null, "\"quoted\""],
            "negative": -9007199254740993i64,
            "output": {SIG_KEY: SIG_OUTPUT_VALUE, "secret": true, "value": "v",
                       "dependencies": [urn]},
            "ref": {SIG_KEY: SIG_RESOURCE_REFERENCE, "urn": urn, "id": "i", "packageVersion": "1.0"},
            "secret": {SIG_KEY: SIG_SECRET, "plaintext": "\"plain\""},
            "sealed": {SIG_KEY: SIG_SECRET, "ciphertext": "v1:abc"},
            "unicode": "é ☃ 😀 \u{7f}",
        });
        let mut state = serde_json::json!({
            "urn": urn, "custom": true, "delete": true, "id": "i\t1", "type": "aws:s3/bucket:Bucket",
            "inputs": values, "outputs": values, "parent": urn, "protect": true, "taint": true,
            "external": true, "dependencies": [urn, urn], "initErrors": ["e\u{0}"],
            "provider": "urn:pulumi:dev::p::pulumi:providers:aws::default::id",
            "propertyDependencies": {"a": [urn], "b": null, "c": []},
        });
        let rest = serde_json::json!({
            "pendingReplacement": true, "additionalSecretOutputs": ["s"], "aliases": [urn],
            "customTimeouts": {"create": 300, "update": 1.5, "delete": 0},
            "importID": "imp", "retainOnDelete": true, "deletedWith": urn, "replaceWith": [urn],
            "created": "2026-12-06T09:00:00Z", "modified": null, "sourcePosition": "p.py:1",
            "stackTrace": {"frames": [{"pc": "x"}]}, "ignoreChanges": ["a"], "hideDiff": ["b"],
            "replaceOnChanges": ["c"], "replacementTrigger": values,
            "refreshBeforeUpdate": true, "viewOf": urn, "resourceHooks": {"beforeCreate": ["h"]},
            "extensionRef": null, "snippetID": "s1", "schemaVersion": 3,
            "keelCategory": "data-source", "keelComposite": false, "keelAddress": "a[\"x\"]",
            "somethingNew": {"kept": [1, "two"]},
        });
        let (Some(state_keys), serde_json::Value::Object(rest)) = (state.as_object_mut(), rest)
        else {
            unreachable!("two objects")
        };
        state_keys.extend(rest);
        let text = serde_json::to_string(&state).expect("json");
        let state: State = serde_json::from_str(&text).expect("a state");
        let entries = [
            crate::persist::journal::Entry::Begin {
                seq: 1,
                op: 2,
                ty: crate::model::snapshot::OperationType::Creating,
                state: crate::persist::journal::EntryState::Borrowed(&state),
            },
            crate::persist::journal::Entry::Success {
                seq: 2,
                op: 2,
                change: crate::persist::journal::ChangeRecord::Write {
                    old: None,
                    mark_old_delete: false,
                    state: crate::persist::journal::EntryState::Borrowed(&state),
                },
            },
        ];
        check(&state);
        check(&entries);
        with_raw_writes(|| {
            check(&state);
            check(&entries);
        });
        // Refusing plaintext secrets (as a journal's encode does), the
        // plaintext one is refused: by serde_json, the same way.
        let refused = crate::model::property::refusing_plaintexts(|| check_declined(&entries));
        assert!(refused.is_err(), "the plaintext secret is refused");
    }

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let text = prop::collection::vec(
            prop::sample::select(vec![
                'a', 'Z', ' ', '"', '\\', '/', '\u{0}', '\u{8}', '\t', '\n', '\u{c}', '\r',
                '\u{1f}', '\u{7f}', 'é', '☃', '😀',
            ]),
            0..24,
        )
        .prop_map(|c| c.into_iter().collect::<String>());
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            text.clone().prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map(text.clone(), inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_value_is_written_as_serde_json_writes_it(v in json()) {
            check(&v);
        }
    }
}
