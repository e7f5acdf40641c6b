//! The integrity verifier: one typed error per rule, each naming the
//! resources involved, checked on small deployments built here.

use keel::model::integrity::verify;
use keel::model::snapshot::{Deployment, Manifest, Snippet};
use keel::model::{IntegrityError, State, TypeToken, Urn};

fn urn(name: &str, ty: &str) -> Urn {
    Urn::parse(&format!("urn:pulumi:dev::proj::{ty}::{name}")).unwrap()
}

fn state(name: &str, ty: &str, custom: bool) -> State {
    let mut s = State::new(urn(name, ty), TypeToken::parse(ty).unwrap(), custom);
    if custom {
        s.id = format!("{name}-id");
    }
    s
}

fn provider() -> State {
    state("default", "pulumi:providers:aws", true)
}

fn bucket(name: &str) -> State {
    let mut s = state(name, "aws:s3:Bucket", true);
    s.provider = format!("{}::default-id", provider().urn).into();
    s
}

fn deployment(resources: Vec<State>) -> Deployment {
    let mut d = Deployment::new("2026-12-01T00:00:00Z".into());
    d.resources = resources;
    d
}

/// Verifies `resources` and checks the outcome with `expect`.
fn check(what: &str, resources: Vec<State>, expect: impl Fn(&Result<(), IntegrityError>) -> bool) {
    let r = verify(&deployment(resources));
    assert!(expect(&r), "{what}: unexpected {r:?}");
    if let Err(e) = &r {
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn a_well_formed_deployment_passes() {
    let stack = state("proj-dev", "pulumi:pulumi:Stack", false);
    let mut comp = state("c", "my:mod:Comp", false);
    comp.parent = stack.urn.clone();
    let mut b = bucket("b");
    b.parent = comp.urn.clone();
    let mut o = bucket("o");
    o.dependencies = vec![b.urn.clone()];
    o.property_dependencies
        .insert("x".into(), Some(vec![b.urn.clone()]));
    o.rare.edit(|r| r.deleted_with = b.urn.clone().into());
    let mut old_o = o.clone();
    old_o.delete = true;
    check(
        "valid",
        vec![stack, comp, provider(), b, old_o, o],
        Result::is_ok,
    );
}

#[test]
fn each_rule_has_its_error() {
    let mut no_type = bucket("b");
    no_type.ty = TypeToken::default();
    check(
        "missing type",
        vec![provider(), no_type],
        |r| matches!(r, Err(IntegrityError::MissingType { urn }) if urn.ends_with("::b")),
    );

    let mut no_urn = bucket("b");
    no_urn.urn = Urn::default();
    check("missing urn", vec![provider(), no_urn], |r| {
        matches!(r, Err(IntegrityError::MissingUrn { index: 1 }))
    });

    let mut comp = state("c", "my:mod:Comp", false);
    comp.id = "i".into();
    check(
        "component id",
        vec![comp],
        |r| matches!(r, Err(e @ IntegrityError::ComponentWithId { .. }) if e.rule() == "component-id"),
    );

    // keel's category keys must agree with Pulumi's fields.
    use keel::model::state::Category;
    for (what, category, external, composite) in [
        (
            "a resource marked external",
            Some(Category::Resource),
            true,
            None,
        ),
        (
            "a data source not external",
            Some(Category::DataSource),
            false,
            None,
        ),
        (
            "an action not external",
            Some(Category::Action),
            false,
            None,
        ),
        (
            "a custom resource marked composite",
            None,
            false,
            Some(true),
        ),
    ] {
        let mut b = bucket("b");
        b.keel_category = category;
        b.external = external;
        b.keel_composite = composite;
        check(
            what,
            vec![provider(), b],
            |r| matches!(r, Err(e @ IntegrityError::CategoryMismatch { urn, .. }) if e.rule() == "category" && urn.ends_with("::b")),
        );
    }
    let mut action = bucket("a");
    action.mark_action();
    action.keel_composite = Some(false);
    check("an action", vec![provider(), action], Result::is_ok);

    let mut bad_ref = bucket("b");
    bad_ref.provider = "not-a-reference".into();
    check("bad provider ref", vec![provider(), bad_ref], |r| {
        matches!(r, Err(IntegrityError::BadProviderReference { .. }))
    });

    check(
        "unknown provider",
        vec![bucket("b")],
        |r| matches!(r, Err(IntegrityError::UnknownProvider { urn, .. }) if urn.ends_with("::b")),
    );

    check("provider after", vec![bucket("b"), provider()], |r| {
        matches!(r, Err(IntegrityError::ProviderAfterResource { .. }))
    });

    let mut wrong_id = bucket("b");
    wrong_id.provider = format!("{}::other-id", provider().urn).into();
    check("provider id mismatch", vec![provider(), wrong_id], |r| {
        matches!(r, Err(IntegrityError::UnknownProvider { .. }))
    });

    let comp = state("c", "my:mod:Comp", false);
    let mut child = bucket("b");
    child.parent = comp.urn.clone();
    check(
        "parent after child",
        vec![provider(), child.clone(), comp],
        |r| matches!(r, Err(IntegrityError::ParentAfterChild { urn, parent }) if urn.ends_with("::b") && parent.ends_with("::c")),
    );
    check(
        "missing parent",
        vec![provider(), child],
        |r| matches!(r, Err(e @ IntegrityError::MissingParent { .. }) if e.rule() == "parent"),
    );

    let a = bucket("a");
    let mut b = bucket("b");
    b.dependencies = vec![a.urn.clone()];
    check(
        "dependency after",
        vec![provider(), b.clone(), a.clone()],
        |r| matches!(r, Err(IntegrityError::DependencyAfterDependent { kind, .. }) if kind == "dependency"),
    );
    check(
        "missing dependency",
        vec![provider(), b],
        |r| matches!(r, Err(IntegrityError::MissingDependency { dependency, .. }) if dependency.ends_with("::a")),
    );

    let mut p = bucket("p");
    p.property_dependencies
        .insert("k".into(), Some(vec![a.urn.clone()]));
    check(
        "missing property dependency",
        vec![provider(), p],
        |r| matches!(r, Err(IntegrityError::MissingDependency { kind, .. }) if kind.contains("`k`")),
    );
    let mut dw = bucket("d");
    dw.rare.edit(|r| r.deleted_with = a.urn.clone().into());
    check(
        "missing deletedWith",
        vec![provider(), dw],
        |r| matches!(r, Err(IntegrityError::MissingDependency { kind, .. }) if kind == "deletedWith"),
    );
    let mut rw = bucket("r");
    rw.rare
        .edit(|r| r.replace_with = vec![a.urn.clone()].into());
    check(
        "replaceWith after",
        vec![provider(), rw, a.clone()],
        |r| matches!(r, Err(IntegrityError::DependencyAfterDependent { kind, .. }) if kind == "replaceWith"),
    );

    // An empty dependency is missing, also where nothing was found yet to
    // compare it with.
    let mut e = bucket("e");
    e.dependencies = vec![Urn::default()];
    check("empty dependency", vec![provider(), e], |r| {
        matches!(r, Err(IntegrityError::MissingDependency { .. }))
    });
    // A dependency found for one state is checked again for the next only
    // by comparison: the next one's, different, is still missing.
    let (mut f, mut g) = (bucket("f"), bucket("g"));
    f.dependencies = vec![a.urn.clone()];
    g.dependencies = vec![bucket("h").urn];
    check(
        "second state's dependency missing",
        vec![provider(), a.clone(), f, g],
        |r| matches!(r, Err(IntegrityError::MissingDependency { dependency, .. }) if dependency.ends_with("::h")),
    );

    check(
        "duplicate urn",
        vec![provider(), bucket("b"), bucket("b")],
        |r| matches!(r, Err(e @ IntegrityError::DuplicateUrn { .. }) if e.rule() == "unique-urn"),
    );
}

#[test]
fn magic_and_snippets() {
    let mut d = deployment(vec![]);
    d.manifest.magic = "00".into();
    assert!(matches!(verify(&d), Err(IntegrityError::BadMagic { .. })));
    d.manifest = Manifest::default();
    assert!(verify(&d).is_ok(), "an empty version has an empty magic");

    let snippet = |uuid: &str| {
        let mut s = Snippet::default();
        s.uuid = uuid.into();
        s
    };
    let mut d = deployment(vec![]);
    d.snippets = vec![snippet("u1"), snippet("")];
    assert!(matches!(
        verify(&d),
        Err(IntegrityError::MissingSnippetUuid { index: 1 })
    ));
    d.snippets = vec![snippet("u1"), snippet("u1")];
    assert!(matches!(
        verify(&d),
        Err(IntegrityError::DuplicateSnippetUuid { .. })
    ));
}
