//! Resource state: the persisted record of one resource (`checkpoint.md` §3).
//!
//! Every key of Pulumi's `ResourceV3` is a plain field; which keys the source
//! JSON had (and which were `null`) is remembered, and unmodeled keys are
//! kept, so a state read from a file is written back unchanged unless keel
//! changed a field (see `keys.rs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::keys::{json_object, JsonEmpty};
use super::property::{PropertyMap, PropertyValue};
use super::rare::Rare;
use super::shared_str::SharedStr;
use super::urn::{ProviderRef, TypeToken, Urn, UrnError};

/// A number of seconds, written as an integer when it is whole (as Go's
/// encoder writes a whole `float64`), so `300` stays `300`.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Seconds(pub f64);

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        // Whole values within the exactly representable range are integers.
        if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
            s.serialize_i64(v as i64)
        } else {
            s.serialize_f64(v)
        }
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        f64::deserialize(d).map(Seconds)
    }
}

impl JsonEmpty for Seconds {
    fn json_empty(&self) -> bool {
        self.0 == 0.0
    }
}

impl Seconds {
    /// As a duration (negative and non-finite values are zero).
    pub fn as_duration(self) -> std::time::Duration {
        std::time::Duration::try_from_secs_f64(self.0).unwrap_or_default()
    }
}

json_object! {
    /// Per-operation timeouts, in seconds (zero: the provider's default).
    pub struct CustomTimeouts {
        /// Timeout for create.
        "create" => create: Seconds,
        /// Timeout for update.
        "update" => update: Seconds,
        /// Timeout for delete.
        "delete" => delete: Seconds,
    }
}

json_object! {
    /// The state of one resource.
    pub struct State {
        /// The resource's URN.
        "urn" => urn: Urn,
        /// True for custom (provider-backed) resources, false for components.
        "custom" => custom: bool [always],
        /// Marked for deletion (the old half of a create-before-delete replace).
        "delete" => delete: bool,
        /// The provider-assigned ID (empty for components).
        "id" => id: String,
        /// The type token.
        "type" => ty: TypeToken,
        /// The inputs the program gave (after the provider's check).
        "inputs" => inputs: PropertyMap,
        /// The outputs the provider returned.
        "outputs" => outputs: PropertyMap,
        /// The parent's URN.
        "parent" => parent: Urn,
        /// Protected resources are never deleted or replaced.
        "protect" => protect: bool,
        /// Tainted resources are replaced on the next update.
        "taint" => taint: bool,
        /// Read from outside the stack (`ReadResource`): never deleted.
        "external" => external: bool,
        /// Resources this one depends on.
        "dependencies" => dependencies: Vec<Urn>,
        /// Errors from a partially failed create.
        "initErrors" => init_errors: Rare<Vec<String>> [rare],
        /// The provider reference `<provider URN>::<ID>`, as written.
        "provider" => provider: SharedStr,
        /// Dependencies per input property (`null`, `[]` and absent distinct).
        "propertyDependencies" => property_dependencies: BTreeMap<String, Option<Vec<Urn>>>,
        /// Deleted as part of a delete-before-replace, awaiting its replacement.
        "pendingReplacement" => pending_replacement: bool,
        /// Output properties to treat as secret.
        "additionalSecretOutputs" => additional_secret_outputs: Rare<Vec<String>> [rare],
        /// Former URNs of this resource.
        "aliases" => aliases: Rare<Vec<Urn>> [rare],
        /// Per-operation timeouts.
        "customTimeouts" => custom_timeouts: Rare<CustomTimeouts> [rare],
        /// The ID this resource was imported from.
        "importID" => import_id: Rare<String> [rare],
        /// When set, deleting the resource leaves the physical object.
        "retainOnDelete" => retain_on_delete: bool,
        /// Skip this resource's delete when that resource is deleted too.
        "deletedWith" => deleted_with: Rare<Urn> [rare],
        /// Replace this resource when that resource is replaced.
        "replaceWith" => replace_with: Rare<Vec<Urn>> [rare],
        /// When the resource was created (RFC 3339, kept as written).
        "created" => created: SharedStr,
        /// When the resource was last modified (RFC 3339, kept as written).
        "modified" => modified: SharedStr,
        /// Where the program registered the resource.
        "sourcePosition" => source_position: String,
        /// The program's stack trace at registration (kept verbatim).
        "stackTrace" => stack_trace: Rare<serde_json::Value> [rare],
        /// Input properties whose changes are ignored.
        "ignoreChanges" => ignore_changes: Rare<Vec<String>> [rare],
        /// Properties whose diffs are hidden from display.
        "hideDiff" => hide_diff: Rare<Vec<String>> [rare],
        /// Input properties whose changes force a replace.
        "replaceOnChanges" => replace_on_changes: Rare<Vec<String>> [rare],
        /// A value whose change forces a replace.
        "replacementTrigger" => replacement_trigger: Rare<PropertyValue> [rare],
        /// Refresh this resource before updating it.
        "refreshBeforeUpdate" => refresh_before_update: bool,
        /// The resource this one is a view of.
        "viewOf" => view_of: Rare<Urn> [rare],
        /// Resource hooks bound to this resource (kept verbatim).
        "resourceHooks" => resource_hooks: Rare<serde_json::Value> [rare],
        /// Extension reference (kept verbatim).
        "extensionRef" => extension_ref: Rare<serde_json::Value> [rare],
        /// The snippet this resource was generated from.
        "snippetID" => snippet_id: Rare<String> [rare],
        /// The schema version of the type this state was written with
        /// (`architecture.md` §8); 0 is omitted.
        "schemaVersion" => schema_version: u64,
        /// keel's entry category, written only where the Pulumi fields do
        /// not already say it (an action); see [`State::category`].
        "keelCategory" => keel_category: Option<Category>,
        /// keel's composite flag as read from a `stack export`; always
        /// `!custom` (see [`State::composite`]).
        "keelComposite" => keel_composite: Option<bool>,
        /// The entry's concrete declaration address in a keel program file
        /// (`group["east"]/server["a"]`), when a program file declared it.
        "keelAddress" => keel_address: String,
    }
    /// The fields of a [`State`] that almost no resource sets (aliases,
    /// timeouts, hooks, stack traces, the `ignoreChanges`-style lists): one
    /// pointer in every state, null until one of them is set, and each of
    /// them one more (a [`Rare`]) inside it.
    rare StateRare;
}

// Every state in memory pays this, and every copy: the fields almost no
// resource sets share one `Rare` box (one word in all) to keep it small.
const _: () = assert!(std::mem::size_of::<State>() <= 336);

/// The category of a state entry (unobin's state model): what lifecycle
/// it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    /// A managed resource (or a component, whose category is that of the
    /// resources it groups): created, updated, refreshed and deleted
    /// through its provider.
    Resource,
    /// An observation of something the stack does not manage (Pulumi's
    /// read and external resources): re-read each operation that declares
    /// it, never refreshed or deleted; dropping its declaration prunes the
    /// entry.
    DataSource,
    /// A side effect run through the provider when its inputs change,
    /// recorded once it completed: never refreshed or deleted; dropping
    /// its declaration prunes the entry.
    Action,
}

impl Category {
    /// The name as written in JSON (`resource`, `data-source`, `action`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Resource => "resource",
            Self::DataSource => "data-source",
            Self::Action => "action",
        }
    }

    /// True for the categories with a provider-side lifecycle (delete,
    /// refresh): resources only.
    pub fn has_lifecycle(self) -> bool {
        self == Self::Resource
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl State {
    /// Forgets which keys the JSON this state was read from had (its own
    /// and its custom timeouts'), as if keel had built it: the state then
    /// compares and encodes by its values alone.
    pub(crate) fn forget_keys(&mut self) {
        self.keys = Default::default();
        self.rare.edit(|r| {
            if let Some(t) = r.custom_timeouts.get_mut() {
                t.keys = Default::default();
            }
        });
    }

    /// Makes the outputs named in `additionalSecretOutputs` secrets (those
    /// that are not already), as Pulumi's engine does after every provider
    /// operation: they are then encrypted at rest, masked in output and
    /// returned to the program as secrets. Names the outputs lack are
    /// skipped.
    pub fn mark_secret_outputs(&mut self) {
        for name in &self.rare.additional_secret_outputs {
            // Looked at first: the outputs may be shared with another
            // state, and a mutable look copies them.
            let plain = self
                .outputs
                .get(name)
                .is_some_and(|v| !matches!(v, PropertyValue::Secret(_)));
            if let (true, Some(v)) = (plain, self.outputs.get_mut(name)) {
                let plain = std::mem::take(v);
                *v = PropertyValue::Secret(super::property::Secret::plaintext(plain));
            }
        }
    }

    /// The entry's category: `keelCategory` when keel recorded one (an
    /// action), else derived from Pulumi's fields as for a stack Pulumi
    /// wrote: an `external` entry is a data source, anything else a
    /// resource (a component's category is that of what it groups).
    pub fn category(&self) -> Category {
        match self.keel_category {
            Some(c) => c,
            None if self.external => Category::DataSource,
            None => Category::Resource,
        }
    }

    /// Whether the entry is composite (a component), even with no children.
    pub fn composite(&self) -> bool {
        !self.custom
    }

    /// Marks the entry as an action: an external entry (so Pulumi, reading
    /// keel's checkpoint, never deletes it either) with `keelCategory`.
    pub fn mark_action(&mut self) {
        self.external = true;
        self.keel_category = Some(Category::Action);
    }

    /// A new state with the given identity, as keel builds it.
    pub fn new(urn: Urn, ty: TypeToken, custom: bool) -> Self {
        Self {
            urn,
            ty,
            custom,
            ..Self::default()
        }
    }

    /// The parsed provider reference, if the state has one.
    ///
    /// # Errors
    /// [`UrnError::BadProviderReference`] when the reference is malformed.
    pub fn provider_ref(&self) -> Result<Option<ProviderRef>, UrnError> {
        if self.provider.is_empty() {
            return Ok(None);
        }
        ProviderRef::parse(&self.provider).map(Some)
    }

    /// The parent, if the state has one.
    pub fn parent(&self) -> Option<&Urn> {
        (!self.parent.is_empty()).then_some(&self.parent)
    }

    /// Every URN this state refers to, with the kind of reference: parent,
    /// dependencies, property dependencies, `deletedWith`, `replaceWith`.
    /// (The provider reference is separate: see [`State::provider_ref`].)
    pub fn references(&self) -> impl Iterator<Item = (Reference<'_>, &Urn)> {
        let parent = self.parent().map(|p| (Reference::Parent, p));
        let deps = self.dependencies.iter().map(|d| (Reference::Dependency, d));
        let prop = self.property_dependencies.iter().flat_map(|(k, v)| {
            v.iter()
                .flatten()
                .map(move |d| (Reference::PropertyDependency(k), d))
        });
        let deleted_with = (!self.rare.deleted_with.is_empty())
            .then_some((Reference::DeletedWith, &*self.rare.deleted_with));
        let replace_with = self
            .rare
            .replace_with
            .iter()
            .map(|d| (Reference::ReplaceWith, d));
        parent
            .into_iter()
            .chain(deps)
            .chain(prop)
            .chain(deleted_with)
            .chain(replace_with)
    }
}

/// How one resource refers to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference<'a> {
    /// `parent`.
    Parent,
    /// An entry of `dependencies`.
    Dependency,
    /// An entry of `propertyDependencies` for the named property.
    PropertyDependency(&'a str),
    /// `deletedWith`.
    DeletedWith,
    /// An entry of `replaceWith`.
    ReplaceWith,
}

impl std::fmt::Display for Reference<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Parent => f.write_str("parent"),
            Self::Dependency => f.write_str("dependency"),
            Self::PropertyDependency(k) => write!(f, "property dependency `{k}`"),
            Self::DeletedWith => f.write_str("deletedWith"),
            Self::ReplaceWith => f.write_str("replaceWith"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(j: serde_json::Value) -> serde_json::Value {
        let s: State = serde_json::from_value(j).unwrap();
        serde_json::to_value(&s).unwrap()
    }

    #[test]
    fn null_empty_and_absent_stay_distinct() {
        let j = json!({
            "urn": "urn:pulumi:d::p::a:b:C::n", "custom": true, "type": "a:b:C",
            "id": "", "protect": false, "dependencies": [], "inputs": null,
            "propertyDependencies": {"a": null, "b": [], "c": ["urn:pulumi:d::p::a:b:C::m"]},
            "customTimeouts": {"create": 300, "delete": 1.5},
            "futureKey": {"x": [1, 2]}
        });
        assert_eq!(round_trip(j.clone()), j);
    }

    #[test]
    fn the_rare_box_is_allocated_only_for_a_set_field_and_keys_keep_their_order() {
        // Rare keys between the state's own, present but empty or null.
        let text = concat!(
            r#"{"urn":"urn:pulumi:d::p::a:b:C::n","custom":true,"type":"a:b:C","#,
            r#""initErrors":[],"provider":"","aliases":null,"customTimeouts":{},"#,
            r#""created":"2026-12-06T11:00:00Z","ignoreChanges":[],"viewOf":"","#,
            r#""keelAddress":"x"}"#
        );
        let s: State = serde_json::from_str(text).unwrap();
        assert!(
            !s.rare.is_boxed(),
            "empty and null rare keys allocate nothing"
        );
        assert_eq!(serde_json::to_string(&s).unwrap(), text);
        // One set field boxes them, and is written in its place.
        let set = text.replace(
            r#""aliases":null"#,
            r#""aliases":["urn:pulumi:d::p::a:b:C::m"]"#,
        );
        let s: State = serde_json::from_str(&set).unwrap();
        assert!(s.rare.is_boxed());
        assert_eq!(s.rare.aliases.len(), 1);
        assert_eq!(serde_json::to_string(&s).unwrap(), set);
        // Emptied through an edit, the box goes and the key stays as read.
        let mut emptied = s.clone();
        emptied.rare.edit(|r| r.aliases = Rare::default());
        assert!(!emptied.rare.is_boxed());
        assert!(serde_json::to_string(&emptied)
            .unwrap()
            .contains(r#""aliases":[]"#));
        assert!(!s.same_fields(&emptied) && s.same_fields(&s.clone()));
    }

    #[test]
    fn fresh_states_omit_empty_fields() {
        let urn = Urn::parse("urn:pulumi:d::p::a:b:C::n").unwrap();
        let s = State::new(urn, TypeToken::parse("a:b:C").unwrap(), false);
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"urn": "urn:pulumi:d::p::a:b:C::n", "custom": false, "type": "a:b:C"})
        );
    }

    #[test]
    fn changed_fields_are_written() {
        let mut s: State = serde_json::from_value(json!({
            "urn": "urn:pulumi:d::p::a:b:C::n", "custom": true, "type": "a:b:C", "inputs": null
        }))
        .unwrap();
        s.protect = true;
        s.inputs.insert("k".into(), "v".into());
        let out = serde_json::to_value(&s).unwrap();
        assert_eq!(out["protect"], json!(true));
        assert_eq!(out["inputs"], json!({"k": "v"}));
    }

    #[test]
    fn neighbours_share_their_stamps_and_read_them_as_written() {
        let state = |name: &str, created: &str, modified: &str| {
            json!({
                "urn": format!("urn:pulumi:d::p::a:b:C::{name}"), "custom": true,
                "type": "a:b:C", "created": created, "modified": modified
            })
        };
        let (t1, t2) = ("2026-12-05T13:50:52Z", "2026-12-05T13:50:53.25+01:00");
        let text =
            serde_json::to_string(&[state("a", t1, t1), state("b", t1, t2), state("c", t2, t2)])
                .unwrap();
        let states: Vec<State> = serde_json::from_str(&text).unwrap();
        assert!(states[0].modified.shares_with(&states[0].created));
        assert!(states[1].created.shares_with(&states[0].created));
        assert!(states[2].modified.shares_with(&states[1].modified));
        assert!(!states[2].created.shares_with(&states[0].created));
        let read_back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_value(&states).unwrap(), read_back);
    }

    #[test]
    fn wrong_types_are_errors() {
        for bad in [
            json!({"urn": 3}),
            json!({"urn": "urn:pulumi:d::p::a:b:C::n", "custom": "yes"}),
            json!({"urn": "not a urn"}),
            json!({"dependencies": ["x"]}),
            json!([]),
        ] {
            assert!(
                serde_json::from_value::<State>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }
}
