//! Presence-preserving JSON objects.
//!
//! A state read from a file must be written back with exactly the keys it
//! had: `null`, empty and absent stay distinct, and keys keel does not model
//! are kept. The [`json_object!`] macro declares a struct with plain Rust
//! fields (so the engine reads `state.protect`, not an `Option<Option<_>>`)
//! plus a [`KeySet`] recording which keys the source had and which were
//! `null`, and an [`Extra`] map of unmodeled keys. Serialization writes a
//! field when it is marked `always`, was present in the source, or is
//! non-empty; a field that was `null` and is still empty is written as
//! `null`. A state built by keel (empty key set) therefore omits every empty
//! field, as Pulumi does.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Visitor};

/// Keys of a JSON object that keel does not model, kept verbatim.
pub(crate) type Extra = BTreeMap<String, serde_json::Value>;

/// Which modeled keys a JSON object had, and which of them were `null`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeySet {
    present: u64,
    null: u64,
}

impl KeySet {
    /// Records key `i` as present (and `null` or not).
    pub(crate) fn mark(&mut self, i: usize, null: bool) {
        self.present |= 1 << i;
        if null {
            self.null |= 1 << i;
        } else {
            self.null &= !(1 << i);
        }
    }

    /// Whether key `i` was present.
    pub(crate) fn present(self, i: usize) -> bool {
        self.present & (1 << i) != 0
    }

    /// Whether key `i` was `null`.
    pub(crate) fn null(self, i: usize) -> bool {
        self.null & (1 << i) != 0
    }
}

/// Emptiness as the checkpoint format sees it: an empty field of a state
/// keel builds is omitted.
pub(crate) trait JsonEmpty {
    /// True when the value would be omitted from a fresh object.
    fn json_empty(&self) -> bool;
}

impl JsonEmpty for bool {
    fn json_empty(&self) -> bool {
        !*self
    }
}

impl JsonEmpty for u64 {
    fn json_empty(&self) -> bool {
        *self == 0
    }
}

impl JsonEmpty for String {
    fn json_empty(&self) -> bool {
        self.is_empty()
    }
}

impl<T> JsonEmpty for Vec<T> {
    fn json_empty(&self) -> bool {
        self.is_empty()
    }
}

impl<K, V> JsonEmpty for BTreeMap<K, V> {
    fn json_empty(&self) -> bool {
        self.is_empty()
    }
}

impl JsonEmpty for super::property::PropertyMap {
    fn json_empty(&self) -> bool {
        self.is_empty()
    }
}

impl<T> JsonEmpty for Option<T> {
    fn json_empty(&self) -> bool {
        self.is_none()
    }
}

impl JsonEmpty for serde_json::Value {
    fn json_empty(&self) -> bool {
        self.is_null()
    }
}

impl JsonEmpty for super::property::PropertyValue {
    fn json_empty(&self) -> bool {
        self.is_null()
    }
}

impl JsonEmpty for super::urn::Urn {
    fn json_empty(&self) -> bool {
        self.is_empty()
    }
}

impl JsonEmpty for super::urn::TypeToken {
    fn json_empty(&self) -> bool {
        self.is_empty()
    }
}

/// A key of a JSON object: the index of a modeled key, or the text of an
/// unmodeled one. Known keys are matched without allocating.
pub(crate) enum FieldKey {
    Known(usize),
    Unknown(String),
}

/// Deserializes a [`FieldKey`] against a list of known keys. Keys are
/// searched from `from` on (then from the start): a file written by keel or
/// Pulumi has its keys in declaration order, so the key after the last one
/// read is usually the next match.
pub(crate) struct KeySeed {
    keys: &'static [&'static str],
    from: usize,
}

impl KeySeed {
    /// A seed for `keys` that tries `keys[from..]` first.
    pub(crate) fn new(keys: &'static [&'static str], from: usize) -> Self {
        Self {
            keys,
            from: from.min(keys.len()),
        }
    }
}

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = FieldKey;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<FieldKey, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = FieldKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<FieldKey, E> {
        let (head, tail) = self.keys.split_at(self.from);
        let found = tail
            .iter()
            .position(|k| *k == s)
            .map(|i| i + self.from)
            .or_else(|| head.iter().position(|k| *k == s));
        Ok(match found {
            Some(i) => FieldKey::Known(i),
            None => FieldKey::Unknown(s.to_owned()),
        })
    }
}

/// Declares a presence-preserving JSON object type (see the module doc).
///
/// Each field is `"jsonKey" => rust_name: Type`, optionally followed by
/// `[always]` for keys that are written even when empty, by
/// `[seed EXPR]` for a field read through a `DeserializeSeed` whose value
/// is `Option<Type>` (`null` is `None`), or by `[rare]` for a field kept in
/// the object's rare box. Field types need `Default`, `Serialize`,
/// `Deserialize` and [`JsonEmpty`].
///
/// An object with rare fields names the box's type after its fields
/// (`rare StateRare;`): the fields almost no object sets live there, behind
/// one [`Rare`](super::rare::Rare) pointer named `rare` that is null until
/// one of them is set, so they cost the object one word. The JSON is the
/// same either way: keys are written and read in the declared order,
/// wherever a field lives.
macro_rules! json_object {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($fields:tt)*
        }
        $( $(#[$rmeta:meta])* rare $rname:ident; )?
    ) => {
        $crate::model::keys::json_object!(@split
            [$(#[$meta])* $vis struct $name] [$($(#[$rmeta])* $rname)?] [] [] []
            $($fields)*
        );
    };
    // Sorts the fields into the object's own and the rare box's, keeping
    // every field's key, type, attributes and place in one list.
    (@split $head:tt $rare:tt [$($own:tt)*] [$($boxed:tt)*] [$($all:tt)*]
        $(#[$fmeta:meta])* $key:literal => $field:ident : $ty:ty [rare], $($rest:tt)*
    ) => {
        $crate::model::keys::json_object!(@split $head $rare
            [$($own)*]
            [$($boxed)* $(#[$fmeta])* pub $field: $ty,]
            [$($all)* ($key, $field, $ty, [], rare)]
            $($rest)*
        );
    };
    (@split $head:tt $rare:tt [$($own:tt)*] [$($boxed:tt)*] [$($all:tt)*]
        $(#[$fmeta:meta])* $key:literal => $field:ident : $ty:ty $([$($attr:tt)*])?, $($rest:tt)*
    ) => {
        $crate::model::keys::json_object!(@split $head $rare
            [$($own)* $(#[$fmeta])* pub $field: $ty,]
            [$($boxed)*]
            [$($all)* ($key, $field, $ty, [$($($attr)*)?], )]
            $($rest)*
        );
    };
    (@split [$(#[$meta:meta])* $vis:vis struct $name:ident] [$($(#[$rmeta:meta])* $rname:ident)?]
        [$($own:tt)*] $boxed:tt [$($all:tt)*]
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq)]
        $vis struct $name {
            $($own)*
            $(
                /// The fields almost no object sets, in one box (null while
                /// every one of them is empty).
                pub rare: $crate::model::rare::Rare<$rname>,
            )?
            /// Which keys the JSON this was read from had, and which were null.
            pub(crate) keys: $crate::model::keys::KeySet,
            /// Keys keel does not model, kept verbatim and written back.
            pub extra: $crate::model::keys::Extra,
        }
        $( $crate::model::keys::json_object!(@box $(#[$rmeta])* $vis $rname $boxed); )?
        $crate::model::keys::json_object!(@impl $name $($all)*);
    };
    // The rare box's type: its fields, and its shared empty value.
    (@box $(#[$rmeta:meta])* $vis:vis $rname:ident [$($boxed:tt)*]) => {
        $(#[$rmeta])*
        #[derive(Clone, Debug, Default, PartialEq)]
        $vis struct $rname {
            $($boxed)*
        }

        impl $crate::model::rare::RareValue for $rname {
            fn empty() -> &'static Self {
                static EMPTY: std::sync::LazyLock<$rname> = std::sync::LazyLock::new(Default::default);
                &EMPTY
            }
        }
    };
    (@impl $name:ident $(($key:literal, $field:ident, $ty:ty, [$($attr:tt)*], $($at:ident)?))*) => {
        const _: () = {
            use serde::ser::SerializeMap as _;
            use $crate::model::keys::{FieldKey, JsonEmpty, KeySeed};

            #[allow(non_camel_case_types, clippy::enum_variant_names)]
            #[derive(Clone, Copy)]
            enum Field { $($field,)* }

            const KEYS: &[&str] = &[$($key),*];
            assert!(KEYS.len() <= 64, "a json_object! has at most 64 keys");

            impl $name {
                /// Whether every field (and every unmodeled key) is equal,
                /// regardless of which keys the source JSON had.
                pub fn same_fields(&self, other: &Self) -> bool {
                    $( self.$($at.)?$field == other.$($at.)?$field && )* self.extra == other.extra
                }
            }

            impl JsonEmpty for $name {
                fn json_empty(&self) -> bool {
                    $( self.$($at.)?$field.json_empty() && )* self.extra.is_empty()
                }
            }

            impl serde::Serialize for $name {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    let mut m = s.serialize_map(None)?;
                    $(
                        let i = Field::$field as usize;
                        let always = $crate::model::keys::json_object!(@always $($attr)*);
                        let empty = self.$($at.)?$field.json_empty();
                        if always || self.keys.present(i) || !empty {
                            if empty && self.keys.null(i) {
                                m.serialize_entry($key, &())?;
                            } else {
                                m.serialize_entry($key, &self.$($at.)?$field)?;
                            }
                        }
                    )*
                    for (k, v) in &self.extra {
                        m.serialize_entry(k, v)?;
                    }
                    m.end()
                }
            }

            impl<'de> serde::Deserialize<'de> for $name {
                fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    struct V;
                    impl<'de> serde::de::Visitor<'de> for V {
                        type Value = $name;
                        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                            f.write_str(concat!("an object (", stringify!($name), ")"))
                        }
                        fn visit_map<A: serde::de::MapAccess<'de>>(
                            self,
                            mut map: A,
                        ) -> Result<$name, A::Error> {
                            let mut out = $name::default();
                            let mut next = 0;
                            while let Some(k) = map.next_key_seed(KeySeed::new(KEYS, next))? {
                                match k {
                                    FieldKey::Known(i) => {
                                        next = i + 1;
                                        $(
                                            if i == Field::$field as usize {
                                                match $crate::model::keys::json_object!(@value map, $ty, $($attr)*) {
                                                    Some(v) => {
                                                        $crate::model::keys::json_object!(@set out, $field, v, $($at)?);
                                                        out.keys.mark(i, false);
                                                    }
                                                    None => {
                                                        $crate::model::keys::json_object!(@set out, $field, Default::default(), $($at)?);
                                                        out.keys.mark(i, true);
                                                    }
                                                }
                                                continue;
                                            }
                                        )*
                                    }
                                    FieldKey::Unknown(name) => {
                                        let v: serde_json::Value = map.next_value()?;
                                        out.extra.insert(name, v);
                                    }
                                }
                            }
                            Ok(out)
                        }
                    }
                    d.deserialize_map(V)
                }
            }
        };
    };
    (@always always) => { true };
    (@always seed $seed:expr) => { false };
    (@always) => { false };
    // A field read through a `DeserializeSeed` whose value is
    // `Option<$ty>` (`null` is `None`).
    (@value $map:ident, $ty:ty, seed $seed:expr) => { $map.next_value_seed($seed)? };
    (@value $map:ident, $ty:ty, $($attr:tt)*) => { $map.next_value::<Option<$ty>>()? };
    // A field of the object itself.
    (@set $out:ident, $field:ident, $v:expr, ) => { $out.$field = $v };
    // A field of the rare box, written through `Rare::edit`: an empty
    // value leaves the box unallocated (the key set still records that the
    // key was there).
    (@set $out:ident, $field:ident, $v:expr, $at:ident) => {
        $out.$at.edit(|r| r.$field = $v)
    };
}

pub(crate) use json_object;
