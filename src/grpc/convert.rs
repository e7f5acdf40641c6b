//! Conversions between the wire protocol and keel's model (sans-IO).
//!
//! Property values travel as protobuf `Struct`s using the same signature-key
//! encodings as the checkpoint (`4dabf181…` with a type signature), with
//! two wire differences handled here: a secret carries its value under
//! `value` (the checkpoint stores `plaintext`, the value's JSON text), and
//! numbers are doubles (whole ones become integers again, as Pulumi's engine
//! writes them). A registration request becomes a [`Goal`] with every option
//! keel honours; a request that names a malformed URN, type or duration is
//! refused with the field it concerns.

use std::collections::BTreeMap;

use prost_types::value::Kind;
use serde_json::Value as Json;

use crate::model::property::{Secret, SIG_KEY, SIG_SECRET, UNKNOWN_VALUE};
use crate::model::state::{CustomTimeouts, Seconds};
use crate::model::urn::UNKNOWN_ID;
use crate::model::{PropertyMap, PropertyValue, TypeToken, Urn};
use crate::source::goal::{Alias, AliasParent, AliasSpec, Goal, ReadGoal, ResourceOptions};
use crate::source::migration::{MigrationCallback, StateMigrations};

use super::pb;

/// A request keel cannot turn into a registration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid `{field}` in the request for `{resource}`: {message}")]
pub struct ConvertError {
    /// The resource the request concerns (type and name as sent).
    pub resource: String,
    /// The request field.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

/// The result of a conversion.
pub type Result<T> = std::result::Result<T, ConvertError>;

/// What the receiving SDK accepts in the values it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepts {
    /// Secrets as signed objects (else their plain values).
    pub secrets: bool,
    /// Resource references as signed objects (else the ID of a custom
    /// resource, the URN of a component).
    pub resources: bool,
}

/// Decodes a protobuf `Struct` (absent: empty) into a property map.
///
/// # Errors
/// A signed object that is malformed (a secret without a value, a resource
/// reference without a URN, …) or a value nested deeper than
/// [`crate::model::property::MAX_DEPTH`]; `what` names the field for the
/// message.
pub fn decode_struct(
    s: Option<prost_types::Struct>,
    what: &str,
) -> std::result::Result<PropertyMap, String> {
    let Some(s) = s else {
        return Ok(PropertyMap::new());
    };
    s.fields
        .into_iter()
        .map(|(k, v)| {
            decode_value(v)
                .and_then(|p| p.check_depth(&k).map(|()| p).map_err(|e| e.to_string()))
                .map(|p| (k.clone(), p))
                .map_err(|e| format!("{what}.{k}: {e}"))
        })
        .collect()
}

/// Decodes one protobuf value of a request.
///
/// # Errors
/// As [`decode_struct`].
pub fn decode_value(v: prost_types::Value) -> std::result::Result<PropertyValue, String> {
    PropertyValue::from_json(&to_json(v)).map_err(|e| e.to_string())
}

/// Encodes a property map as a protobuf `Struct` for an SDK.
pub fn encode_struct(m: &PropertyMap, accepts: Accepts) -> prost_types::Struct {
    prost_types::Struct {
        fields: m
            .iter()
            .map(|(k, v)| (k.clone(), encode_value(v, accepts)))
            .collect(),
    }
}

/// Encodes one property value for an SDK.
pub fn encode_value(v: &PropertyValue, accepts: Accepts) -> prost_types::Value {
    let kind = match v {
        PropertyValue::Null => Kind::NullValue(0),
        PropertyValue::Bool(b) => Kind::BoolValue(*b),
        PropertyValue::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        PropertyValue::String(s) => Kind::StringValue(s.clone()),
        PropertyValue::Computed => Kind::StringValue(UNKNOWN_VALUE.to_owned()),
        PropertyValue::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(|i| encode_value(i, accepts)).collect(),
        }),
        PropertyValue::Object(m) => Kind::StructValue(encode_struct(m, accepts)),
        PropertyValue::Secret(Secret::Plaintext(p)) => {
            let inner = encode_value(p.value(), accepts);
            if accepts.secrets {
                return signed(SIG_SECRET, [("value", inner)]);
            }
            return inner;
        }
        PropertyValue::ResourceReference(r) if !accepts.resources => {
            // Pulumi's downgrade: a custom resource by its ID, a component
            // by its URN.
            return match &r.id {
                Some(id) if !id.is_empty() => {
                    encode_value(&PropertyValue::String(id.clone()), accepts)
                }
                _ => Kind::StringValue(r.urn.as_str().to_owned()).into(),
            };
        }
        PropertyValue::Output(o) => {
            let inner = match &o.value {
                Some(v) => encode_value(v, accepts),
                None => Kind::StringValue(UNKNOWN_VALUE.to_owned()).into(),
            };
            if o.secret == Some(true) && accepts.secrets {
                return signed(SIG_SECRET, [("value", inner)]);
            }
            return inner;
        }
        // Ciphertext (not decrypted in memory), references, assets,
        // archives and unknown signatures: their checkpoint form is the
        // wire form.
        other => return from_json(other.to_json()),
    };
    kind.into()
}

fn signed<const N: usize>(
    sig: &str,
    fields: [(&str, prost_types::Value); N],
) -> prost_types::Value {
    let mut s = prost_types::Struct::default();
    s.fields
        .insert(SIG_KEY.to_owned(), Kind::StringValue(sig.to_owned()).into());
    for (k, v) in fields {
        s.fields.insert(k.to_owned(), v);
    }
    Kind::StructValue(s).into()
}

/// A wire value as checkpoint JSON: whole numbers become integers and a
/// secret's `value` becomes its `plaintext` text.
fn to_json(v: prost_types::Value) -> Json {
    match v.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(b),
        Some(Kind::NumberValue(n)) => number(n),
        Some(Kind::StringValue(s)) => Json::String(s),
        Some(Kind::ListValue(l)) => Json::Array(l.values.into_iter().map(to_json).collect()),
        Some(Kind::StructValue(mut s)) => {
            let is_secret = matches!(
                s.fields.get(SIG_KEY).and_then(|v| v.kind.as_ref()),
                Some(Kind::StringValue(sig)) if sig == SIG_SECRET
            );
            if is_secret {
                if let Some(value) = s.fields.remove("value") {
                    let text = serde_json::to_string(&to_json(value)).unwrap_or_default();
                    let mut m = serde_json::Map::new();
                    m.insert(SIG_KEY.to_owned(), Json::String(SIG_SECRET.to_owned()));
                    m.insert("plaintext".to_owned(), Json::String(text));
                    return Json::Object(m);
                }
            }
            Json::Object(s.fields.into_iter().map(|(k, v)| (k, to_json(v))).collect())
        }
    }
}

/// A double as JSON: whole values within the exactly representable range
/// are integers; NaN and infinities (not JSON) are null.
fn number(n: f64) -> Json {
    if n.is_finite() && n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
        Json::Number((n as i64).into())
    } else {
        serde_json::Number::from_f64(n).map_or(Json::Null, Json::Number)
    }
}

/// Checkpoint JSON as a wire value.
fn from_json(v: Json) -> prost_types::Value {
    let kind = match v {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Kind::StringValue(s),
        Json::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.into_iter().map(from_json).collect(),
        }),
        Json::Object(m) => Kind::StructValue(prost_types::Struct {
            fields: m.into_iter().map(|(k, v)| (k, from_json(v))).collect(),
        }),
    };
    kind.into()
}

/// An ID for an SDK: the unknown ID of a preview is the empty string.
pub fn wire_id(id: &str) -> String {
    if id == UNKNOWN_ID {
        String::new()
    } else {
        id.to_owned()
    }
}

/// Parses a duration as the SDKs send them (Go syntax such as `"5m"`,
/// `"1h30m"`, `"90s"`, `"1.5h"`), in seconds.
///
/// # Errors
/// Text that is not a non-negative duration.
pub fn parse_duration(text: &str) -> std::result::Result<f64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(0.0);
    }
    let mut total = 0.0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(digits);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("`{text}` is not a duration like \"5m\" or \"1h30m\""))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" if value == 0.0 => 0.0,
            _ => {
                return Err(format!(
                    "`{text}` has an unknown unit `{unit}` (use ns, us, ms, s, m or h)"
                ))
            }
        };
        total += value * scale;
        rest = next;
    }
    Ok(total)
}

/// The parts of a registration request that become a [`Goal`]; the
/// callbacks are built by the caller (they do I/O).
///
/// # Errors
/// [`ConvertError`] naming the field: a malformed type, parent, dependency,
/// alias, timeout or property.
pub fn goal(
    req: pb::RegisterResourceRequest,
    callback: impl Fn(pb::Callback) -> MigrationCallback,
) -> Result<Goal> {
    let resource = format!("{}::{}", req.r#type, req.name);
    let bad = |field: &'static str| {
        let resource = resource.clone();
        move |message: String| ConvertError {
            resource,
            field,
            message,
        }
    };
    let ty = TypeToken::parse(&req.r#type).map_err(|e| bad("type")(e.to_string()))?;
    let inputs = decode_struct(req.object, "object").map_err(bad("object"))?;
    let urn = |field: &'static str, s: &str| Urn::parse(s).map_err(|e| bad(field)(e.to_string()));
    let opt_urn = |field: &'static str, s: &str| {
        if s.is_empty() {
            Ok(None)
        } else {
            urn(field, s).map(Some)
        }
    };
    let mut aliases = Vec::new();
    for a in req.alias_ur_ns {
        aliases.push(Alias::Urn(urn("aliasURNs", &a)?));
    }
    for a in req.aliases {
        match a.alias {
            Some(pb::alias::Alias::Urn(u)) => aliases.push(Alias::Urn(urn("aliases", &u)?)),
            Some(pb::alias::Alias::Spec(s)) => {
                let parent = match s.parent {
                    Some(pb::alias::spec::Parent::NoParent(true)) => Some(AliasParent::NoParent),
                    Some(pb::alias::spec::Parent::ParentUrn(p)) if !p.is_empty() => {
                        Some(AliasParent::Urn(urn("aliases", &p)?))
                    }
                    _ => None,
                };
                let ty = if s.r#type.is_empty() {
                    None
                } else {
                    Some(TypeToken::parse(&s.r#type).map_err(|e| bad("aliases")(e.to_string()))?)
                };
                let some = |s: String| (!s.is_empty()).then_some(s);
                aliases.push(Alias::Spec(AliasSpec {
                    name: some(s.name),
                    ty,
                    parent,
                    stack: some(s.stack),
                    project: some(s.project),
                }));
            }
            None => {}
        }
    }
    let custom_timeouts = match req.custom_timeouts {
        None => None,
        Some(t) => {
            let secs = |s: &str| {
                parse_duration(s)
                    .map(Seconds)
                    .map_err(bad("customTimeouts"))
            };
            Some(CustomTimeouts {
                create: secs(&t.create)?,
                update: secs(&t.update)?,
                delete: secs(&t.delete)?,
                ..CustomTimeouts::default()
            })
        }
    };
    let mut depends_on = Vec::new();
    for d in &req.dependencies {
        depends_on.push(urn("dependencies", d)?);
    }
    let mut property_dependencies = BTreeMap::new();
    for (k, deps) in req.property_dependencies {
        let mut list = Vec::new();
        for d in &deps.urns {
            list.push(urn("propertyDependencies", d)?);
        }
        property_dependencies.insert(k, list);
    }
    let mut replace_with = Vec::new();
    for u in &req.replace_with {
        replace_with.push(urn("replaceWith", u)?);
    }
    let replacement_trigger = match req.replacement_trigger {
        Some(v) => decode_value(v).map_err(bad("replacementTrigger"))?,
        None => PropertyValue::Null,
    };
    let options = ResourceOptions {
        parent: opt_urn("parent", &req.parent)?,
        depends_on,
        property_dependencies,
        provider: (!req.provider.is_empty()).then_some(req.provider),
        version: (!req.version.is_empty()).then_some(req.version),
        plugin_download_url: (!req.plugin_download_url.is_empty())
            .then_some(req.plugin_download_url),
        protect: req.protect.unwrap_or(false),
        retain_on_delete: req.retain_on_delete.unwrap_or(false),
        deleted_with: opt_urn("deletedWith", &req.deleted_with)?,
        delete_before_replace: (req.delete_before_replace_defined || req.delete_before_replace)
            .then_some(req.delete_before_replace),
        aliases,
        custom_timeouts,
        ignore_changes: req.ignore_changes,
        replace_on_changes: req.replace_on_changes,
        additional_secret_outputs: req.additional_secret_outputs,
        replace_with,
        replacement_trigger,
        hide_diffs: req.hide_diffs,
        env_var_mappings: req.env_var_mappings.into_iter().collect(),
        import: (!req.import_id.is_empty()).then_some(req.import_id),
        state_migrations: StateMigrations::new(
            req.state_migrations.into_iter().map(callback).collect(),
        ),
        ..ResourceOptions::default()
    };
    Ok(Goal {
        ty,
        name: req.name,
        custom: req.custom,
        inputs,
        options,
    })
}

/// A `ReadResource` request as a [`ReadGoal`].
///
/// # Errors
/// As [`goal`].
pub fn read_goal(req: pb::ReadResourceRequest) -> Result<ReadGoal> {
    let resource = format!("{}::{}", req.r#type, req.name);
    let bad = |field: &'static str, message: String| ConvertError {
        resource: resource.clone(),
        field,
        message,
    };
    let ty = TypeToken::parse(&req.r#type).map_err(|e| bad("type", e.to_string()))?;
    let inputs = decode_struct(req.properties, "properties").map_err(|e| bad("properties", e))?;
    let parent = if req.parent.is_empty() {
        None
    } else {
        Some(Urn::parse(&req.parent).map_err(|e| bad("parent", e.to_string()))?)
    };
    let mut depends_on = Vec::new();
    for d in &req.dependencies {
        depends_on.push(Urn::parse(d).map_err(|e| bad("dependencies", e.to_string()))?);
    }
    Ok(ReadGoal {
        ty,
        name: req.name,
        id: req.id,
        inputs,
        parent,
        provider: (!req.provider.is_empty()).then_some(req.provider),
        depends_on,
        additional_secret_outputs: req.additional_secret_outputs,
        version: (!req.version.is_empty()).then_some(req.version),
        plugin_download_url: (!req.plugin_download_url.is_empty())
            .then_some(req.plugin_download_url),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wire(v: Json) -> prost_types::Value {
        from_json(v)
    }

    const ALL: Accepts = Accepts {
        secrets: true,
        resources: true,
    };

    /// One table of wire values: each decodes to the checkpoint JSON given
    /// and encodes back to the same wire value.
    fn check(wire_json: Json, checkpoint: Json) {
        let decoded = decode_value(wire(wire_json.clone())).unwrap();
        assert_eq!(decoded.to_json(), checkpoint, "decoding {wire_json}");
        assert_eq!(
            encode_value(&decoded, ALL),
            wire(wire_json.clone()),
            "encoding {wire_json}"
        );
    }

    #[test]
    fn values_round_trip_with_their_signatures() {
        let sig = SIG_KEY;
        check(json!(1.0), json!(1));
        check(json!(1.5), json!(1.5));
        check(json!("s"), json!("s"));
        check(json!(UNKNOWN_VALUE), json!(UNKNOWN_VALUE));
        check(
            json!([true, null, {"a": 2.0}]),
            json!([true, null, {"a": 2}]),
        );
        check(
            json!({sig: SIG_SECRET, "value": {"k": 1.0}}),
            json!({sig: SIG_SECRET, "plaintext": "{\"k\":1}"}),
        );
        let reference = json!({sig: "5cf8f73096256a8f31e491e813e4eb8e",
            "urn": "urn:pulumi:d::p::a:b:C::n", "id": "i-1"});
        check(reference.clone(), reference);
        let asset = json!({sig: "c44067f5952c0a294b673a41bacd8c17", "text": "hi"});
        check(asset.clone(), asset);
        let archive = json!({sig: "0def7320c3a5731c473e5ecbe6d01bc7",
            "assets": {"a": {sig: "c44067f5952c0a294b673a41bacd8c17", "path": "x"}}});
        check(archive.clone(), archive);
    }

    #[test]
    fn downgrades_for_sdks_that_do_not_accept_signatures() {
        let none = Accepts {
            secrets: false,
            resources: false,
        };
        let secret = decode_value(wire(json!({SIG_KEY: SIG_SECRET, "value": "pw"}))).unwrap();
        assert_eq!(encode_value(&secret, none), wire(json!("pw")));
        let custom = decode_value(wire(json!({SIG_KEY: "5cf8f73096256a8f31e491e813e4eb8e",
            "urn": "urn:pulumi:d::p::a:b:C::n", "id": "i-1"})))
        .unwrap();
        assert_eq!(encode_value(&custom, none), wire(json!("i-1")));
        let component = decode_value(wire(json!({SIG_KEY: "5cf8f73096256a8f31e491e813e4eb8e",
            "urn": "urn:pulumi:d::p::a:b:C::n"})))
        .unwrap();
        assert_eq!(
            encode_value(&component, none),
            wire(json!("urn:pulumi:d::p::a:b:C::n"))
        );
    }

    #[test]
    fn malformed_signed_values_are_refused() {
        let bad = wire(json!({SIG_KEY: "5cf8f73096256a8f31e491e813e4eb8e"}));
        assert!(decode_value(bad).is_err());
        let bad = wire(json!({SIG_KEY: SIG_SECRET}));
        assert!(decode_value(bad).is_err());
    }

    #[test]
    fn values_nested_deeper_than_keel_stores_are_refused() {
        use crate::model::property::MAX_DEPTH;
        let deep = |n: usize| (0..n).fold(json!(1), |v, _| json!([v]));
        let s = |v: Json| {
            Some(prost_types::Struct {
                fields: [("v".to_owned(), wire(v))].into(),
            })
        };
        assert!(decode_struct(s(deep(MAX_DEPTH)), "object").is_ok());
        let e = decode_struct(s(deep(MAX_DEPTH + 1)), "object").unwrap_err();
        assert!(e.starts_with("object.v: `v[0]"), "{e}");
        assert!(e.contains("levels deep"), "{e}");
    }

    #[test]
    fn durations_in_go_syntax() {
        assert_eq!(parse_duration("5m"), Ok(300.0));
        assert_eq!(parse_duration("1h30m"), Ok(5400.0));
        assert_eq!(parse_duration("1.5h"), Ok(5400.0));
        assert_eq!(parse_duration("250ms"), Ok(0.25));
        assert_eq!(parse_duration(""), Ok(0.0));
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("m").is_err());
    }

    fn request() -> pb::RegisterResourceRequest {
        pb::RegisterResourceRequest {
            r#type: "aws:s3/bucket:Bucket".into(),
            name: "b".into(),
            custom: true,
            parent: "urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_request_becomes_a_goal_with_its_options() {
        let mut req = request();
        req.protect = Some(true);
        req.delete_before_replace = true;
        req.delete_before_replace_defined = true;
        req.import_id = "i-9".into();
        req.custom_timeouts = Some(pb::register_resource_request::CustomTimeouts {
            create: "2m".into(),
            ..Default::default()
        });
        req.aliases = vec![pb::Alias {
            alias: Some(pb::alias::Alias::Spec(pb::alias::Spec {
                name: "old".into(),
                parent: Some(pb::alias::spec::Parent::NoParent(true)),
                ..Default::default()
            })),
        }];
        req.state_migrations = vec![pb::Callback::default(), pb::Callback::default()];
        let g = goal(req, |_| MigrationCallback::sync(|_| Ok(None))).unwrap();
        assert_eq!(g.ty.as_str(), "aws:s3/bucket:Bucket");
        assert!(g.custom && g.options.protect);
        assert_eq!(g.options.delete_before_replace, Some(true));
        assert_eq!(g.options.import.as_deref(), Some("i-9"));
        assert_eq!(g.options.custom_timeouts.unwrap().create.0, 120.0);
        assert_eq!(
            g.options.aliases,
            vec![Alias::Spec(AliasSpec {
                name: Some("old".into()),
                parent: Some(AliasParent::NoParent),
                ..AliasSpec::default()
            })]
        );
        assert_eq!(g.options.state_migrations.callbacks.len(), 2);
        assert_eq!(
            g.options.parent.unwrap().as_str(),
            "urn:pulumi:dev::p::pulumi:pulumi:Stack::p-dev"
        );
    }

    #[test]
    fn a_bad_request_names_the_field() {
        let mut req = request();
        req.parent = "not-a-urn".into();
        let e = goal(req, |_| unreachable!()).unwrap_err();
        assert_eq!(e.field, "parent");
        assert!(e.to_string().contains("aws:s3/bucket:Bucket::b"), "{e}");
        let mut req = request();
        req.custom_timeouts = Some(pb::register_resource_request::CustomTimeouts {
            delete: "soon".into(),
            ..Default::default()
        });
        assert_eq!(
            goal(req, |_| unreachable!()).unwrap_err().field,
            "customTimeouts"
        );
    }
}
