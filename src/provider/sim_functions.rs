//! The functions the simulated cloud answers (`Invoke`): deterministic,
//! without I/O, so that Pulumi YAML programs that call provider functions
//! run on the simulated cloud as they would against a real provider.
//!
//! Two kinds of answer, in this order:
//!
//! 1. **The language-conformance packages.** Pulumi tests its language
//!    hosts with small test packages (`simple-invoke`, `output-only-invoke`,
//!    `multi-argument-invoke`, `scalar-returns`, `primitive`, `docs`,
//!    `any-type-function`, `config-grpc`, ...) whose functions compute
//!    their result from their arguments. [`conformance`] answers those
//!    tokens the way the test packages are specified to, including their
//!    argument checks, so that the conformance projects of
//!    `pulumi/pulumi-yaml` run unchanged on the simulated cloud.
//! 2. **Data sources** ([`lookup`]): a function named `get<Thing>` or
//!    `list<Thing>` ([`is_data_source`]) is a read of existing objects. `pkg:mod:getThing` (or
//!    `pkg:mod/getThing:getThing`) looks for objects of type
//!    `pkg:mod:Thing` that the simulated cloud holds and whose properties
//!    equal every argument the object has; the first match by ID answers,
//!    its outputs with its `id`. When the cloud holds no object of that
//!    type at all, the thing looked up lives outside what the simulated
//!    cloud models (a public machine image, an account's identity) and
//!    the answer is *synthesised*: the arguments echoed, plus an `id`
//!    derived from the token and the arguments, the same on every run.
//!    When the cloud holds objects of the type but none matches, the
//!    lookup fails, as a real data source's does. (A `list<Thing>`
//!    function is always synthesised.)
//! 3. **Actions** ([`is_action`], [`action_result`]): a function named
//!    `run` or `run<Thing>` (`command:local:run`) is a side effect, which
//!    program files call as `action:` entries. The simulated cloud runs
//!    nothing: it acknowledges the run with the arguments echoed and a
//!    `runId` derived from the token and arguments, and fails it when
//!    `--sim-fail` names the token.
//!
//! Any other function is refused: it may act, or compute what only its
//! provider knows.
//!
//! A function may return a single value rather than an object (Pulumi's
//! `returnType` that is not an object type); [`returns_scalar`] names
//! them, and the language host then unwraps the one property of the
//! result, as Pulumi's SDKs do.

use super::package::PackageDecl;
use crate::model::property::{PropertyMap, PropertyValue, Secret};

/// Why a function call was refused: the message names the argument.
pub(crate) type Failure = String;

/// The token's parts: package, module (without a `/fn` suffix) and name.
fn parts(token: &str) -> Option<(&str, &str, &str)> {
    let mut it = token.splitn(3, ':');
    let (pkg, module, name) = (it.next()?, it.next()?, it.next()?);
    let module = module.split('/').next().unwrap_or(module);
    Some((pkg, module, name))
}

/// True when the function `token` returns a single value that the
/// caller unwraps from the result's one property.
pub(crate) fn returns_scalar(token: &str) -> bool {
    matches!(
        parts(token),
        Some((
            "simple-invoke" | "output-only-invoke" | "simple-invoke-with-scalar-return",
            "index",
            "myInvokeScalar"
        )) | Some((
            "scalar-returns",
            "index",
            "invokeSecret" | "invokeArray" | "invokeMap"
        ))
    )
}

fn string(s: impl Into<String>) -> PropertyValue {
    PropertyValue::String(s.into())
}

fn secret(v: PropertyValue) -> PropertyValue {
    match v {
        PropertyValue::Secret(_) => v,
        v => PropertyValue::Secret(Secret::plaintext(v)),
    }
}

/// The value with any secret or output wrappers removed.
fn plain(v: &PropertyValue) -> &PropertyValue {
    match v {
        PropertyValue::Secret(Secret::Plaintext(p)) => plain(p.value()),
        PropertyValue::Output(o) => o.value.as_ref().map_or(v, |inner| plain(inner)),
        v => v,
    }
}

fn is_secret(v: &PropertyValue) -> bool {
    match v {
        PropertyValue::Secret(_) => true,
        PropertyValue::Output(o) => o.secret == Some(true),
        _ => false,
    }
}

/// The string argument `key`, or the refusal.
fn string_arg<'a>(args: &'a PropertyMap, key: &str) -> Result<&'a str, Failure> {
    match args.get(key).map(plain) {
        None | Some(PropertyValue::Null) => Err(format!("{key}: missing value")),
        Some(PropertyValue::Computed) => Err(format!("{key}: the value is unknown")),
        Some(PropertyValue::String(s)) => Ok(s),
        Some(_) => Err(format!("{key}: is not a string")),
    }
}

fn one(key: &str, v: PropertyValue) -> PropertyMap {
    [(key.to_owned(), v)].into()
}

/// The answer of a conformance package's function, or `None` when
/// `token` is not one of theirs.
/// `decl` is the package's declaration, if the program has one: the
/// parameterized test packages answer with their parameter.
pub(crate) fn conformance(
    token: &str,
    args: &PropertyMap,
    decl: Option<&PackageDecl>,
) -> Option<Result<PropertyMap, Failure>> {
    let (pkg, module, name) = parts(token)?;
    if module != "index" {
        return None;
    }
    if let Some(answer) = decl.and_then(|d| parameterized(d, name, args)) {
        return Some(answer);
    }
    let answer = match (pkg, name) {
        ("simple-invoke" | "output-only-invoke", "myInvoke") => {
            string_arg(args, "value").map(|v| one("result", string(format!("{v} world"))))
        }
        (
            "simple-invoke" | "output-only-invoke" | "simple-invoke-with-scalar-return",
            "myInvokeScalar",
        ) => string_arg(args, "value").map(|_| one("result", PropertyValue::Bool(true))),
        ("simple-invoke" | "output-only-invoke", "unit") => {
            if args.is_empty() {
                Ok(one("result", string("Hello world")))
            } else {
                Err(format!("too many properties: {}", keys(args)))
            }
        }
        ("simple-invoke" | "output-only-invoke", "secretInvoke") => secret_invoke(pkg, args),
        ("multi-argument-invoke", "multiArgumentInvoke") => {
            string_arg(args, "first").and_then(|first| {
                let mut result = first.to_owned();
                match args.get("second").map(plain) {
                    None | Some(PropertyValue::Null) => {}
                    Some(PropertyValue::String(s)) => {
                        result.push(' ');
                        result.push_str(s);
                    }
                    Some(_) => return Err("second: is not a string".to_owned()),
                }
                Ok(one("result", string(result)))
            })
        }
        ("scalar-returns", "invokeSecret") => string_arg(args, "value").map(|v| {
            let n = serde_json::Number::from(v.len());
            one("return", secret(PropertyValue::Number(n)))
        }),
        ("scalar-returns", "invokeArray") => string_arg(args, "value").map(|v| {
            let vowels = v
                .bytes()
                .map(|c| PropertyValue::Bool(b"aeiou".contains(&c)))
                .collect();
            one("thisCanBeAnything", PropertyValue::Array(vowels))
        }),
        ("scalar-returns", "invokeMap") => string_arg(args, "value").map(|v| {
            let map = PropertyValue::Object(one("value", string(format!("{v} world"))));
            one("result", if v == "secret" { secret(map) } else { map })
        }),
        ("primitive", "invoke") => primitive_invoke(args),
        ("docs", "fun") => match args.get("in").map(plain) {
            Some(PropertyValue::Bool(b)) => Ok(one("out", PropertyValue::Bool(!b))),
            _ => Err("in: is not a boolean".to_owned()),
        },
        ("any-type-function", "dynListToDyn") => match args.get("inputs").map(plain) {
            Some(PropertyValue::Array(_)) => Ok(one(
                "result",
                PropertyValue::Object(one("resultProperty", string("resultValue"))),
            )),
            None => Err("inputs: missing inputs".to_owned()),
            Some(_) => Err("inputs: is not an array".to_owned()),
        },
        ("config-grpc", "toSecret") => Ok(args
            .iter()
            .map(|(k, v)| (k.clone(), secret(v.clone())))
            .collect()),
        _ => return None,
    };
    Some(answer)
}

/// The functions of the parameterized test packages: a replacement of
/// `parameterized` answers `do<Value>` with its `input` followed by the
/// parameter; an extension of `extbase` answers `greet` with the
/// parameter, `", "` and the `name`.
fn parameterized(
    decl: &PackageDecl,
    name: &str,
    args: &PropertyMap,
) -> Option<Result<PropertyMap, Failure>> {
    let value = String::from_utf8_lossy(&decl.parameter()?.value).into_owned();
    match decl.name.as_str() {
        "parameterized" if decl.parameterization.is_some() => {
            let mut title = value.chars();
            let expected = title
                .next()
                .map(|c| format!("do{}{}", c.to_uppercase(), title.as_str()))?;
            (name == expected).then(|| {
                string_arg(args, "input").map(|i| one("output", string(format!("{i}{value}"))))
            })
        }
        "extbase" if decl.extension.is_some() && name == "greet" => {
            Some(string_arg(args, "name").map(|n| one("greeting", string(format!("{value}, {n}")))))
        }
        _ => None,
    }
}

fn keys(args: &PropertyMap) -> String {
    args.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// `secretInvoke`: the response is `value` + " world", secret when
/// `secretResponse` is true (or, for `simple-invoke`, when `value` is).
fn secret_invoke(pkg: &str, args: &PropertyMap) -> Result<PropertyMap, Failure> {
    let value = string_arg(args, "value")?;
    let flag = match args.get("secretResponse").map(plain) {
        None | Some(PropertyValue::Null) => return Err("secretResponse: missing value".into()),
        Some(PropertyValue::Bool(b)) => *b,
        Some(_) => return Err("secretResponse: is not a boolean".into()),
    };
    let value_secret = pkg == "simple-invoke" && args.get("value").is_some_and(is_secret);
    let response = string(format!("{value} world"));
    Ok([
        (
            "response".to_owned(),
            if flag || value_secret {
                secret(response)
            } else {
                response
            },
        ),
        ("secret".to_owned(), PropertyValue::Bool(flag)),
    ]
    .into())
}

/// `primitive:invoke`: checks the six typed arguments and echoes them.
fn primitive_invoke(args: &PropertyMap) -> Result<PropertyMap, Failure> {
    let typed = |key: &str, what: &str, ok: fn(&PropertyValue) -> bool| match args.get(key) {
        None => Err(format!("{key}: missing value")),
        Some(v) if ok(plain(v)) => Ok(()),
        Some(_) => Err(format!("{key}: value is not a {what}")),
    };
    fn number(v: &PropertyValue) -> bool {
        matches!(v, PropertyValue::Number(_))
    }
    fn array_of_numbers(v: &PropertyValue) -> bool {
        matches!(v, PropertyValue::Array(a) if a.iter().all(|e| number(plain(e))))
    }
    fn map_of_bools(v: &PropertyValue) -> bool {
        matches!(v, PropertyValue::Object(m)
            if m.values().all(|e| matches!(plain(e), PropertyValue::Bool(_))))
    }
    type Field = (&'static str, &'static str, fn(&PropertyValue) -> bool);
    let fields: [Field; 6] = [
        ("boolean", "boolean", |v| {
            matches!(v, PropertyValue::Bool(_))
        }),
        ("integer", "number", number),
        ("float", "number", number),
        ("string", "string", |v| {
            matches!(v, PropertyValue::String(_))
        }),
        ("numberArray", "array", array_of_numbers),
        ("booleanMap", "map", map_of_bools),
    ];
    for (key, what, ok) in fields {
        typed(key, what, ok)?;
    }
    if args.len() != 6 {
        return Err(format!("too many properties: {}", keys(args)));
    }
    Ok(args.clone())
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

pub(crate) use super::without_module_suffix;

/// True for a data-source function: its name is `get<Thing>` or
/// `list<Thing>` (`listStorageAccountKeys`), which read and change
/// nothing. Other functions may act or compute what only their provider
/// knows, and the simulated cloud does not pretend to answer them.
pub(crate) fn is_data_source(token: &str) -> bool {
    parts(token).is_some_and(|(_, _, name)| {
        ["get", "list"].iter().any(|p| {
            name.strip_prefix(p)
                .and_then(|rest| rest.chars().next())
                .is_some_and(|c| c.is_ascii_uppercase())
        })
    })
}

/// True for an action function: its name is `run` or `run<Thing>`.
pub(crate) fn is_action(token: &str) -> bool {
    parts(token).is_some_and(|(_, _, name)| {
        name.strip_prefix("run")
            .is_some_and(|rest| rest.chars().next().is_none_or(|c| c.is_ascii_uppercase()))
    })
}

/// The simulated cloud's acknowledgement of an action's run: the
/// arguments echoed, with `runId` (`run-{8 hex}` of the token and
/// arguments).
pub(crate) fn action_result(token: &str, args: &PropertyMap) -> PropertyMap {
    let mut out = args.clone();
    out.insert(
        "runId".to_owned(),
        string(format!("run-{:08x}", short_hash(token, args))),
    );
    out
}

/// A 32-bit hash of a token and its arguments.
fn short_hash(token: &str, args: &PropertyMap) -> u32 {
    let mut bytes = token.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend(serde_json::to_vec(args).unwrap_or_default());
    let h = fnv1a(&bytes);
    // Fold the 64-bit hash into 32 bits; the truncation is intended.
    ((h >> 32) ^ h) as u32
}

/// The resource type a data-source function reads, when its name is
/// `get<Thing>`: `pkg:mod:Thing` (objects whose type is written
/// `pkg:mod/thing:Thing` are of it too: [`without_module_suffix`]).
pub(crate) fn looked_up_type(token: &str) -> Option<String> {
    let (pkg, module, name) = parts(token)?;
    let thing = name.strip_prefix("get")?;
    thing
        .chars()
        .next()
        .filter(char::is_ascii_uppercase)
        .map(|_| format!("{pkg}:{module}:{thing}"))
}

/// The answer of a data-source function (see the module doc): the first
/// of `candidates` (objects of [`looked_up_type`], as `(id, outputs)`,
/// sorted by ID) whose properties equal every argument they have, or a
/// synthesised observation when there are no candidates.
///
/// # Errors
/// When there are candidates and none matches.
pub(crate) fn lookup(
    token: &str,
    args: &PropertyMap,
    candidates: &[(String, PropertyMap)],
) -> Result<PropertyMap, Failure> {
    if candidates.is_empty() {
        return Ok(synthesised(token, args));
    }
    let matches = |outputs: &PropertyMap| {
        args.iter().all(|(k, want)| match outputs.get(k) {
            None => true,
            Some(have) => plain(have) == plain(want),
        })
    };
    candidates
        .iter()
        .find(|(id, outputs)| {
            matches(outputs)
                && args
                    .get("id")
                    .is_none_or(|want| plain(want) == &PropertyValue::String(id.clone()))
        })
        .map(|(id, outputs)| {
            let mut out = outputs.clone();
            out.insert("id".to_owned(), string(id.clone()));
            out
        })
        .ok_or_else(|| {
            format!(
                "no object of type {} matches the arguments ({})",
                looked_up_type(token).unwrap_or_else(|| token.to_owned()),
                keys(args)
            )
        })
}

/// The arguments echoed, with a deterministic `id` (unless an `id` was
/// given): `{thing}-{8 hex}`, the hex a hash of the token and arguments.
fn synthesised(token: &str, args: &PropertyMap) -> PropertyMap {
    let mut out = args.clone();
    if !out.contains_key("id") {
        let folded = short_hash(token, args);
        let stem = parts(token)
            .map(|(_, _, n)| n.strip_prefix("get").unwrap_or(n).to_ascii_lowercase())
            .unwrap_or_default();
        out.insert("id".to_owned(), string(format!("{stem}-{folded:08x}")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_run_functions_acknowledged_with_a_stable_run_id() {
        for (token, action) in [
            ("command:local:run", true),
            ("fleet:ops:runMigration", true),
            ("fleet:ops/runMigration:runMigration", true),
            ("fleet:ops:running", false),
            ("fleet:ops:getRun", false),
            ("fleet:ops:Run", false),
        ] {
            assert_eq!(is_action(token), action, "{token}");
        }
        let a = args(r#"{"command": "echo hi"}"#);
        let first = action_result("command:local:run", &a);
        assert_eq!(first.get("command"), a.get("command"));
        assert_eq!(first, action_result("command:local:run", &a), "stable");
        let other = action_result("command:local:run", &args(r#"{"command": "echo ho"}"#));
        assert_ne!(first.get("runId"), other.get("runId"));
    }

    fn args(json: &str) -> PropertyMap {
        serde_json::from_str(json).unwrap()
    }

    fn check(token: &str, input: &str, want: Result<&str, &str>) {
        let got = conformance(token, &args(input), None)
            .unwrap_or_else(|| panic!("{token} is not a conformance function"));
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got, args(want), "{token}({input})"),
            (Err(got), Err(want)) => assert!(got.contains(want), "{token}: {got}"),
            (got, want) => panic!("{token}({input}): got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn conformance_functions_compute_from_their_arguments() {
        check(
            "simple-invoke:index:myInvoke",
            r#"{"value":"hi"}"#,
            Ok(r#"{"result":"hi world"}"#),
        );
        check("simple-invoke:index:myInvoke", "{}", Err("value: missing"));
        check(
            "simple-invoke:index:myInvoke",
            r#"{"value":1}"#,
            Err("not a string"),
        );
        check(
            "simple-invoke:index:unit",
            "{}",
            Ok(r#"{"result":"Hello world"}"#),
        );
        check("simple-invoke:index:unit", r#"{"a":1}"#, Err("too many"));
        check(
            "multi-argument-invoke:index:multiArgumentInvoke",
            r#"{"first":"a","second":"b"}"#,
            Ok(r#"{"result":"a b"}"#),
        );
        check(
            "multi-argument-invoke:index:multiArgumentInvoke",
            r#"{"first":"a"}"#,
            Ok(r#"{"result":"a"}"#),
        );
        check(
            "scalar-returns:index:invokeArray",
            r#"{"value":"tea"}"#,
            Ok(r#"{"thisCanBeAnything":[false,true,true]}"#),
        );
        check("docs:index:fun", r#"{"in":false}"#, Ok(r#"{"out":true}"#));
        check(
            "any-type-function:index:dynListToDyn",
            r#"{"inputs":[1,{}]}"#,
            Ok(r#"{"result":{"resultProperty":"resultValue"}}"#),
        );
        check(
            "primitive:index:invoke",
            r#"{"boolean":1}"#,
            Err("boolean: value is not a boolean"),
        );
        assert!(conformance("aws:ec2:getAmi", &PropertyMap::new(), None).is_none());
    }

    /// The answer of a conformance function that succeeds.
    fn answer(token: &str, input: &str) -> PropertyMap {
        conformance(token, &args(input), None)
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("{token}({input}) has no answer"))
    }

    #[test]
    fn secret_answers_are_secret() {
        let secret_invoke = "simple-invoke:index:secretInvoke";
        let got = answer(secret_invoke, r#"{"value":"a","secretResponse":true}"#);
        assert!(is_secret(&got["response"]));
        assert_eq!(got["secret"], PropertyValue::Bool(true));
        let got = answer(secret_invoke, r#"{"value":"a","secretResponse":false}"#);
        assert_eq!(got["response"], string("a world"));
        let got = answer(
            "scalar-returns:index:invokeSecret",
            r#"{"value":"goodbye"}"#,
        );
        assert!(is_secret(&got["return"]));
        assert_eq!(plain(&got["return"]), &PropertyValue::Number(7.into()));
        let got = answer("config-grpc:index:toSecret", r#"{"a":"x","b":2}"#);
        assert!(got.values().all(is_secret));
    }

    #[test]
    fn parameterized_packages_answer_with_their_parameter() {
        let decl = |text: &str| PackageDecl::parse(text).unwrap().unwrap();
        let sub = decl("packageDeclarationVersion: 1\nname: parameterized\nparameterization: {name: sub, version: '2', value: SGVsbG9Xb3JsZA==}\n");
        let got = conformance(
            "sub:index:doHelloWorld",
            &args(r#"{"input":"bye"}"#),
            Some(&sub),
        );
        assert_eq!(got, Some(Ok(args(r#"{"output":"byeHelloWorld"}"#))));
        assert!(conformance("sub:index:doOther", &args("{}"), Some(&sub)).is_none());
        let ext = decl("packageDeclarationVersion: 1\nname: extbase\nextension: {name: e, version: '2', value: SGVsbG8=}\n");
        let got = conformance(
            "extbase:index:greet",
            &args(r#"{"name":"you"}"#),
            Some(&ext),
        );
        assert_eq!(got, Some(Ok(args(r#"{"greeting":"Hello, you"}"#))));
    }

    #[test]
    fn scalar_returns_are_named() {
        assert!(returns_scalar("scalar-returns:index:invokeMap"));
        assert!(returns_scalar("simple-invoke:index:myInvokeScalar"));
        assert!(!returns_scalar("simple-invoke:index:myInvoke"));
        assert!(!returns_scalar("aws:ec2/getAmi:getAmi"));
    }

    #[test]
    fn data_sources_read_held_objects_or_synthesise_outside_ones() {
        assert_eq!(
            looked_up_type("aws:ec2/getAmi:getAmi").as_deref(),
            Some("aws:ec2:Ami")
        );
        assert_eq!(
            looked_up_type("aws:ec2:getAmi").as_deref(),
            Some("aws:ec2:Ami")
        );
        assert_eq!(looked_up_type("aws:ec2:getaway"), None);
        assert_eq!(looked_up_type("docs:index:fun"), None);
        assert!(is_data_source("aws:ec2:getAmi"));
        assert!(is_data_source(
            "azure-native:storage:listStorageAccountKeys"
        ));
        assert!(!is_data_source("aws:lambda:invoke"));
        assert!(!is_data_source("aws:index:getaway"));
        assert_eq!(
            without_module_suffix("aws:s3/bucket:Bucket"),
            "aws:s3:Bucket"
        );
        assert_eq!(without_module_suffix("aws:s3:Bucket"), "aws:s3:Bucket");

        // Nothing held: the same synthesised answer every time.
        let a = args(r#"{"owners":["1"],"mostRecent":true}"#);
        let first = lookup("aws:ec2:getAmi", &a, &[]).unwrap();
        assert_eq!(first, lookup("aws:ec2:getAmi", &a, &[]).unwrap());
        assert_eq!(first["owners"], a["owners"]);
        let PropertyValue::String(id) = &first["id"] else {
            panic!("{first:?}")
        };
        assert!(id.starts_with("ami-"), "{id}");
        let other = lookup("aws:ec2:getAmi", &args(r#"{"owners":["2"]}"#), &[]).unwrap();
        assert_ne!(other["id"], first["id"]);

        // Held objects: the first match, or a failure naming the type.
        let held = vec![
            ("b-1".to_owned(), args(r#"{"bucket":"logs","arn":"arn:1"}"#)),
            ("b-2".to_owned(), args(r#"{"bucket":"site","arn":"arn:2"}"#)),
        ];
        let got = lookup("aws:s3:getBucket", &args(r#"{"bucket":"site"}"#), &held).unwrap();
        assert_eq!(got["arn"], string("arn:2"));
        assert_eq!(got["id"], string("b-2"));
        let got = lookup("aws:s3:getBucket", &args(r#"{"id":"b-1"}"#), &held).unwrap();
        assert_eq!(got["bucket"], string("logs"));
        let e = lookup("aws:s3:getBucket", &args(r#"{"bucket":"gone"}"#), &held).unwrap_err();
        assert!(e.contains("aws:s3:Bucket"), "{e}");
    }
}
