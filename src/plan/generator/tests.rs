//! Planner unit tests: default provider naming, provider changes,
//! `ignoreChanges` / `replaceOnChanges` and the delete-before-replace
//! dependents walk, driven directly (the answers a provider would give are
//! written in the test).

use std::collections::BTreeSet;

use super::*;
use crate::model::step::share;
use crate::model::urn::STACK_TYPE;
use crate::model::TypeToken;
use crate::plan::step::{Chain, StepKind};
use crate::provider::{DiffKind, DiffResponse};
use crate::source::goal::Goal;
use crate::source::goal::ResourceOptions;

const STACK: &str = "urn:pulumi:dev::proj::pulumi:pulumi:Stack::proj-dev";
const BUCKET: &str = "aws:s3/bucket:Bucket";

fn urn(s: &str) -> Urn {
    Urn::parse(s).expect("urn")
}

fn bucket_urn(name: &str) -> Urn {
    urn(&format!("urn:pulumi:dev::proj::{BUCKET}::{name}"))
}

fn provider_urn_of(name: &str) -> Urn {
    urn(&format!(
        "urn:pulumi:dev::proj::pulumi:providers:aws::{name}"
    ))
}

fn inputs(v: serde_json::Value) -> PropertyMap {
    match serde_json::from_value(v).expect("value") {
        PropertyValue::Object(m) => m,
        other => panic!("{other:?}"),
    }
}

fn stack() -> State {
    State::new(
        urn(STACK),
        TypeToken::parse(STACK_TYPE).expect("type"),
        false,
    )
}

fn provider_state(name: &str, id: &str, config: serde_json::Value) -> State {
    let mut s = State::new(
        provider_urn_of(name),
        TypeToken::parse("pulumi:providers:aws").expect("type"),
        true,
    );
    s.id = id.into();
    s.inputs = inputs(config.clone());
    s.outputs = inputs(config);
    s
}

fn bucket_state(name: &str, provider: &State, v: serde_json::Value) -> State {
    let mut s = State::new(
        bucket_urn(name),
        TypeToken::parse(BUCKET).expect("type"),
        true,
    );
    s.id = format!("{name}-id");
    s.parent = urn(STACK);
    s.provider = format!("{}::{}", provider.urn, provider.id).into();
    s.inputs = inputs(v.clone());
    s.outputs = inputs(v);
    s
}

fn planner(olds: Vec<State>) -> Planner {
    let mut p = Planner::new(
        PlanOptions {
            stack: "dev".into(),
            project: "proj".into(),
            ..PlanOptions::default()
        },
        olds.into_iter().map(share).collect(),
    );
    let root = Goal::component(TypeToken::parse(STACK_TYPE).expect("type"), "proj-dev");
    let prepared = p.prepare(&root).expect("stack");
    p.decide(prepared, None, None).expect("stack");
    p
}

fn goal(name: &str, v: serde_json::Value, f: impl FnOnce(&mut ResourceOptions)) -> Goal {
    let mut g = Goal::custom(TypeToken::parse(BUCKET).expect("type"), name, inputs(v));
    f(&mut g.options);
    g
}

fn diff(kind: DiffKind, changed: &[&str], replace: &[&str], dbr: bool) -> DiffResponse {
    let set = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    DiffResponse {
        kind,
        changed_keys: set(changed),
        replace_keys: set(replace),
        delete_before_replace: dbr,
        detailed: Vec::new(),
    }
}

fn kinds(chain: &Chain) -> Vec<(StepKind, String)> {
    chain
        .steps
        .iter()
        .map(|s| (s.kind, s.urn.name().to_owned()))
        .collect()
}

#[test]
fn default_providers_are_named_by_version_and_take_package_config() {
    let mut p = Planner::new(
        PlanOptions {
            stack: "dev".into(),
            project: "proj".into(),
            package_config: [
                ("aws:region".to_owned(), PropertyValue::from("us-west-2")),
                ("proj:env".to_owned(), PropertyValue::from("prod")),
            ]
            .into(),
            ..PlanOptions::default()
        },
        Vec::new(),
    );
    let a = p
        .prepare(&goal("a", serde_json::json!({}), |o| {
            o.version = Some("6.0.0".into());
        }))
        .expect("prepare");
    let provider = a.default_provider.as_ref().expect("the default provider");
    assert_eq!(provider.urn, provider_urn_of("default_6_0_0"));
    assert_eq!(
        provider.new.inputs,
        inputs(serde_json::json!({"__internal": {}, "region": "us-west-2", "version": "6.0.0"}))
    );
    assert!(a.new.provider.starts_with(provider.urn.as_str()));
    // The same request shares it; another version gets its own; none is
    // `default`.
    let b = p
        .prepare(&goal("b", serde_json::json!({}), |o| {
            o.version = Some("6.0.0".into());
        }))
        .expect("prepare");
    assert!(b.default_provider.is_none());
    assert_eq!(b.new.provider, a.new.provider);
    let c = p
        .prepare(&goal("c", serde_json::json!({}), |o| {
            o.version = Some("0.0.1-alpha.1+dirty".into());
        }))
        .expect("prepare");
    assert_eq!(
        c.default_provider.expect("another").urn,
        provider_urn_of("default_0_0_1_alpha_1_dirty")
    );
    let d = p
        .prepare(&goal("d", serde_json::json!({}), |_| {}))
        .expect("prepare");
    assert_eq!(
        d.default_provider.expect("default").urn,
        provider_urn_of("default")
    );
    // A bad version is refused before anything is registered.
    let e = p
        .prepare(&goal("e", serde_json::json!({}), |o| {
            o.version = Some("6".into())
        }))
        .expect_err("bad version");
    assert!(
        matches!(&e, PlanError::BadVersion { urn, .. } if *urn == bucket_urn("e")),
        "{e}"
    );
    assert!(!p.registered().contains(&bucket_urn("e")));
}

#[test]
fn a_provider_change_asks_the_new_provider_and_replaces_only_on_its_word() {
    let old_provider = provider_state(
        "default_6_0_0",
        "p1",
        serde_json::json!({"version": "6.0.0"}),
    );
    let a = bucket_state("a", &old_provider, serde_json::json!({"x": 1}));
    let mut p = planner(vec![stack(), old_provider.clone(), a]);
    let prepared = p
        .prepare(&goal("a", serde_json::json!({"x": 1}), |o| {
            o.version = Some("6.1.0".into());
        }))
        .expect("prepare");
    let ProviderChange::Config(config) = &prepared.provider_change else {
        panic!("{:?}", prepared.provider_change);
    };
    assert_eq!(config.provider.urn(), &provider_urn_of("default_6_1_0"));
    assert_eq!(
        config.old_inputs,
        inputs(serde_json::json!({"version": "6.0.0"}))
    );
    assert_eq!(
        config.new_inputs,
        inputs(serde_json::json!({"version": "6.1.0"}))
    );
    let provider = prepared
        .default_provider
        .clone()
        .expect("new default provider");
    let chain = p.decide(provider, None, None).expect("provider");
    assert_eq!(
        kinds(&chain),
        vec![(StepKind::Create, "default_6_1_0".into())]
    );
    // The new provider found nothing to replace: the resource's own diff
    // decides, and it moves to the new provider.
    let same = diff(DiffKind::Same, &[], &[], false);
    let chain = p
        .decide(prepared.clone(), Some(&same), None)
        .expect("decide");
    assert_eq!(kinds(&chain), vec![(StepKind::Same, "a".into())]);
    let new = chain.steps[0].new.as_ref().expect("new");
    assert!(new
        .provider
        .starts_with(provider_urn_of("default_6_1_0").as_str()));
    assert_eq!(new.id, "a-id");

    // The same move where the provider answered replace (the actor passes
    // that answer as the diff).
    let mut p = planner(vec![
        stack(),
        old_provider.clone(),
        bucket_state("a", &old_provider, serde_json::json!({"x": 1})),
    ]);
    let prepared = p
        .prepare(&goal("a", serde_json::json!({"x": 1}), |o| {
            o.version = Some("6.1.0".into());
        }))
        .expect("prepare");
    let replace = diff(DiffKind::Replace, &[], &["provider"], false);
    let chain = p.decide(prepared, Some(&replace), None).expect("decide");
    assert_eq!(
        kinds(&chain),
        vec![(StepKind::CreateReplacement, "a".into())]
    );
}

#[test]
fn a_provider_resource_is_updated_or_replaced_as_its_provider_says() {
    let prov = provider_state("p", "p1", serde_json::json!({"region": "us"}));
    let a = bucket_state("a", &prov, serde_json::json!({}));
    let provider_goal = |region: &str| Goal {
        ty: TypeToken::parse("pulumi:providers:aws").expect("type"),
        name: "p".into(),
        custom: true,
        inputs: inputs(serde_json::json!({"region": region})),
        options: ResourceOptions::default(),
    };
    // Unchanged configuration: same, no comparison asked for.
    let mut p = planner(vec![stack(), prov.clone(), a.clone()]);
    let prepared = p.prepare(&provider_goal("us")).expect("prepare");
    assert!(prepared.config_diff.is_none());
    assert_eq!(
        kinds(&p.decide(prepared, None, None).expect("decide"))[0].0,
        StepKind::Same
    );
    // Changed: an update keeps the ID; its resource stays.
    let mut p = planner(vec![stack(), prov.clone(), a.clone()]);
    let prepared = p.prepare(&provider_goal("eu")).expect("prepare");
    let config = prepared.config_diff.clone().expect("compare");
    assert_eq!(
        config.old_inputs,
        inputs(serde_json::json!({"region": "us"}))
    );
    let update = diff(DiffKind::Update, &["region"], &[], false);
    let chain = p.decide(prepared, Some(&update), None).expect("decide");
    assert_eq!(chain.steps[0].kind, StepKind::Update);
    assert_eq!(chain.steps[0].new.as_ref().expect("new").id, "p1");
    let reference = format!("{}::p1", prov.urn);
    let prepared = p
        .prepare(&goal("a", serde_json::json!({}), |o| {
            o.provider = Some(reference.clone())
        }))
        .expect("prepare");
    assert_eq!(prepared.provider_change, ProviderChange::Unchanged);
    let same = diff(DiffKind::Same, &[], &[], false);
    assert_eq!(
        kinds(&p.decide(prepared, Some(&same), None).expect("decide"))[0].0,
        StepKind::Same
    );
    // Replaced: a new ID, and the resources it manages are replaced too.
    let mut p = planner(vec![stack(), prov.clone(), a]);
    let prepared = p.prepare(&provider_goal("eu")).expect("prepare");
    let replace = diff(DiffKind::Replace, &["region"], &["region"], false);
    let chain = p.decide(prepared, Some(&replace), None).expect("decide");
    assert_eq!(chain.steps[0].kind, StepKind::CreateReplacement);
    let new_id = chain.steps[0].new.as_ref().expect("new").id.clone();
    assert!(!new_id.is_empty() && new_id != "p1");
    let reference = format!("{}::{new_id}", prov.urn);
    let prepared = p
        .prepare(&goal("a", serde_json::json!({}), |o| {
            o.provider = Some(reference.clone())
        }))
        .expect("prepare");
    assert_eq!(
        kinds(&p.decide(prepared, Some(&same), None).expect("decide")),
        vec![(StepKind::CreateReplacement, "a".into())]
    );
}

#[test]
fn a_registration_boxes_the_rare_fields_only_when_it_sets_one() {
    let prov = provider_state("default", "p1", serde_json::json!({}));
    let old = bucket_state("a", &prov, serde_json::json!({"size": 1}));
    let mut p = planner(vec![stack(), prov, old]);
    // A new resource and one matched to its prior state, neither setting a
    // rare option: every state of a plain stack stays without the box.
    for name in ["new", "a"] {
        let prepared = p
            .prepare(&goal(name, serde_json::json!({"size": 2}), |_| {}))
            .expect("prepare");
        assert!(!prepared.new.rare.is_boxed(), "{name}");
    }
    let prepared = p
        .prepare(&goal("c", serde_json::json!({}), |o| {
            o.ignore_changes = vec!["size".into()];
        }))
        .expect("prepare");
    assert!(prepared.new.rare.is_boxed());
    assert_eq!(*prepared.new.rare.ignore_changes, ["size"]);
}

#[test]
fn ignore_changes_keeps_old_values_and_replace_on_changes_replaces() {
    let prov = provider_state("default", "p1", serde_json::json!({}));
    let old = bucket_state(
        "a",
        &prov,
        serde_json::json!({"tags": {"Name": "old", "env": "x"}, "size": 1}),
    );
    let mut p = planner(vec![stack(), prov, old]);
    let prepared = p
        .prepare(&goal(
            "a",
            serde_json::json!({"tags": {"Name": "new", "env": "y"}, "size": 2}),
            |o| {
                o.ignore_changes = vec!["tags.Name".into()];
                o.replace_on_changes = vec!["tags[\"env\"]".into()];
            },
        ))
        .expect("prepare");
    assert_eq!(
        prepared.new.inputs,
        inputs(serde_json::json!({"tags": {"Name": "old", "env": "y"}, "size": 2}))
    );
    assert_eq!(
        prepared.replacement_inputs,
        Some(inputs(
            serde_json::json!({"tags": {"Name": "new", "env": "y"}, "size": 2})
        ))
    );
    // The provider saw an update of `tags` and `size`; `tags.env` is a
    // replace-on-change path: a replace, created from the program's inputs.
    let update = diff(DiffKind::Update, &["size", "tags"], &[], false);
    let chain = p.decide(prepared, Some(&update), None).expect("decide");
    assert_eq!(
        kinds(&chain),
        vec![(StepKind::CreateReplacement, "a".into())]
    );
    assert_eq!(
        chain.steps[0].new.as_ref().expect("new").inputs["tags"],
        inputs(serde_json::json!({"t": {"Name": "new", "env": "y"}}))["t"]
    );
    // Bad paths are refused, naming the resource, the option and the path.
    let e = p
        .prepare(&goal("b", serde_json::json!({}), |o| {
            o.replace_on_changes = vec!["tags[".into()];
        }))
        .expect_err("bad path");
    assert!(
        matches!(&e, PlanError::BadPropertyPath { urn, option: "replaceOnChanges", path, .. }
            if *urn == bucket_urn("b") && path == "tags["),
        "{e}"
    );
    assert!(
        e.to_string().contains("replaceOnChanges")
            && e.to_string().contains(bucket_urn("b").as_str())
    );
}

#[test]
fn delete_before_replace_walks_dependents_and_replaces_only_those_that_must_go() {
    let prov = provider_state("default", "p1", serde_json::json!({}));
    let a = bucket_state("a", &prov, serde_json::json!({"name": "a"}));
    let with = |name: &str, f: &dyn Fn(&mut State)| {
        let mut s = bucket_state(name, &prov, serde_json::json!({"name": name, "size": 1}));
        f(&mut s);
        s
    };
    let pdep = |key: &str, on: &str| {
        let (key, on) = (key.to_owned(), bucket_urn(on));
        move |s: &mut State| {
            s.dependencies.push(on.clone());
            s.property_dependencies
                .insert(key.clone(), Some(vec![on.clone()]));
        }
    };
    let b = with("b", &|s| s.dependencies.push(bucket_urn("a")));
    let c = with("c", &pdep("size", "a"));
    let d = with("d", &pdep("name", "a"));
    let e = with("e", &pdep("size", "d"));
    let f = with("f", &|s| s.dependencies.push(bucket_urn("d")));
    let mut g = with("g", &pdep("name", "a"));
    g.rare
        .edit(|r| r.ignore_changes = vec!["name".into()].into());
    let mut i = with("i", &pdep("size", "a"));
    i.rare
        .edit(|r| r.replace_on_changes = vec!["size".into()].into());
    let mut k = with("k", &pdep("size", "c"));
    k.rare.edit(|r| r.deleted_with = bucket_urn("d").into());
    let mut p = planner(vec![stack(), prov.clone(), a, b, c, d, e, f, g, i, k]);
    let prepared = p
        .prepare(&goal("a", serde_json::json!({"name": "a2"}), |_| {}))
        .expect("prepare");
    let replace = diff(DiffKind::Replace, &["name"], &["name"], true);
    let mut walk = p
        .dependents_walk(&prepared, Some(&replace), None)
        .expect("a delete-before-replace walks its dependents");
    // The provider is asked about c, d, e, g and i (in prior order); here
    // a `name` change replaces, a `size` change updates.
    let mut asked = Vec::new();
    while let Some(request) = walk.next_request() {
        let name = request.old.urn.name().to_owned();
        let unknown: Vec<&String> = request
            .inputs
            .iter()
            .filter(|(_, v)| **v == PropertyValue::Computed)
            .map(|(k, _)| k)
            .collect();
        asked.push((
            name,
            unknown.iter().map(|k| (*k).clone()).collect::<Vec<_>>(),
        ));
        let answer = if unknown.iter().any(|k| *k == "name") {
            diff(DiffKind::Replace, &["name"], &["name"], false)
        } else if unknown.is_empty() {
            diff(DiffKind::Same, &[], &[], false)
        } else {
            diff(DiffKind::Update, &["size"], &[], false)
        };
        walk.answer(&answer);
    }
    assert_eq!(
        asked,
        vec![
            ("c".to_owned(), vec!["size".to_owned()]),
            ("d".to_owned(), vec!["name".to_owned()]),
            ("e".to_owned(), vec!["size".to_owned()]),
            // `g` ignores its name: nothing unknown is left.
            ("g".to_owned(), vec![]),
            ("i".to_owned(), vec!["size".to_owned()]),
        ]
    );
    let chain = p
        .decide_with(prepared, Some(&replace), None, Some(walk.finish()))
        .expect("decide");
    let steps = kinds(&chain);
    let deleted: BTreeSet<&str> = steps
        .iter()
        .filter(|(k, _)| *k == StepKind::DeleteReplaced)
        .map(|(_, n)| n.as_str())
        .collect();
    // d (its name), i (replaceOnChanges), k (deletedWith d); b, c, e, f
    // and g stay.
    assert_eq!(deleted, BTreeSet::from(["a", "d", "i", "k"]), "{steps:?}");
    let at = |n: &str| steps.iter().position(|(_, s)| s == n).expect(n);
    assert!(
        at("k") < at("d") && at("d") < at("a") && at("i") < at("a"),
        "{steps:?}"
    );
    assert_eq!(
        steps.last(),
        Some(&(StepKind::CreateReplacement, "a".to_owned()))
    );

    // Without the providers' answers, every dependent that would need one
    // is taken as replaced (the conservative fallback of `decide`).
    let mut p = planner(vec![
        stack(),
        prov.clone(),
        bucket_state("a", &prov, serde_json::json!({"name": "a"})),
        with("b", &|s| s.dependencies.push(bucket_urn("a"))),
        with("c", &pdep("size", "a")),
    ]);
    let prepared = p
        .prepare(&goal("a", serde_json::json!({"name": "a2"}), |_| {}))
        .expect("prepare");
    let chain = p.decide(prepared, Some(&replace), None).expect("decide");
    let names: Vec<String> = kinds(&chain).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["c", "a", "a"]);
}

/// A package the program declares a parameterization of a base plugin
/// gets its default provider under the declaration's key; a resource of
/// it takes the reference that provider was decided with (here a new ID,
/// the provider replaced), not the one it was prepared with.
#[test]
fn a_parameterized_default_provider_replaced_is_the_one_its_resources_name() {
    use crate::provider::package::{PackageDecl, Parameterization};
    let old_provider = provider_state(
        "default_6_0_0",
        "p1",
        serde_json::json!({"stale": "config"}),
    );
    let mut p = Planner::new(
        PlanOptions {
            stack: "dev".into(),
            project: "proj".into(),
            packages: vec![PackageDecl {
                name: "terraform-provider".into(),
                version: Some("0.1.0".into()),
                download_url: None,
                parameterization: Some(Parameterization {
                    name: "aws".into(),
                    version: "6.0.0".into(),
                    value: b"aws".to_vec(),
                }),
                extension: None,
            }],
            ..PlanOptions::default()
        },
        vec![share(stack()), share(old_provider)],
    );
    let root = Goal::component(TypeToken::parse(STACK_TYPE).expect("type"), "proj-dev");
    let prepared = p.prepare(&root).expect("stack");
    p.decide(prepared, None, None).expect("stack");
    let mut prepared = p
        .prepare(&goal("a", serde_json::json!({"x": 1}), |_| {}))
        .expect("prepare");
    let provider = prepared.default_provider.take().expect("default provider");
    assert_eq!(provider.urn, provider_urn_of("default_6_0_0"));
    assert!(provider.config_diff.is_some(), "its configuration changed");
    assert!(
        prepared.new.provider.ends_with("::p1"),
        "{}",
        prepared.new.provider
    );
    let replace = diff(DiffKind::Replace, &["stale"], &["stale"], false);
    let chain = p.decide(provider, Some(&replace), None).expect("provider");
    let replaced_id = chain
        .steps
        .iter()
        .find_map(|s| s.new.as_ref().map(|n| n.id.clone()))
        .expect("the provider's new state");
    assert_ne!(replaced_id, "p1");
    let chain = p.decide(prepared, None, None).expect("decide");
    let new = chain.steps[0].new.as_ref().expect("new");
    assert_eq!(
        new.provider,
        format!("{}::{replaced_id}", provider_urn_of("default_6_0_0"))
    );
}
