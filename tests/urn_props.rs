//! Property tests for URNs, type tokens and provider references:
//! `parse(format(u)) == u`, parts survive, and no input makes parsing panic.

use keel::model::{ProviderRef, TypeToken, Urn};
use proptest::prelude::*;

fn ident() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9._-]{0,12}"
}

fn type_token() -> impl Strategy<Value = String> {
    (
        "[a-z][a-z0-9-]{0,8}",
        proptest::collection::vec("[a-z][a-z0-9/]{0,8}", 1..3),
        "[A-Z][A-Za-z0-9]{0,8}",
    )
        .prop_map(|(pkg, module, name)| format!("{pkg}:{}:{name}", module.join(":")))
}

proptest! {
    #[test]
    fn parse_inverts_format(
        stack in ident(),
        project in ident(),
        parents in proptest::collection::vec(type_token(), 0..3),
        ty in type_token(),
        // Names may contain `::`, `$` and any printable text.
        name in "[^\\p{C}]{1,24}",
    ) {
        let ty = TypeToken::parse(&ty).unwrap();
        let parent = (!parents.is_empty()).then(|| parents.join("$"));
        let urn = Urn::new(&stack, &project, parent.as_deref(), &ty, &name).unwrap();
        let again = Urn::parse(urn.as_str()).unwrap();
        prop_assert_eq!(&again, &urn);
        prop_assert_eq!(again.to_string(), urn.as_str());
        prop_assert_eq!(again.stack(), stack.as_str());
        prop_assert_eq!(again.project(), project.as_str());
        prop_assert_eq!(again.type_str(), ty.as_str());
        prop_assert_eq!(again.name(), name.as_str());
        prop_assert_eq!(again.parent_types().collect::<Vec<_>>(), parents.iter().map(String::as_str).collect::<Vec<_>>());
        // A child's chain extends the parent's.
        let child = again.child(&ty, "c").unwrap();
        prop_assert!(child.qualified_type().starts_with(again.qualified_type()));
        // Provider references round-trip too.
        let prov = Urn::new(&stack, &project, None, &TypeToken::provider_for("aws").unwrap(), &name).unwrap();
        let r = ProviderRef::new(prov, "id-1").unwrap();
        prop_assert_eq!(ProviderRef::parse(&r.to_string()).unwrap(), r);
    }

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC*") {
        let _ = Urn::parse(&s);
        let _ = TypeToken::parse(&s);
        let _ = ProviderRef::parse(&s);
        let _ = Urn::parse(&format!("urn:pulumi:{s}"));
        let _ = ProviderRef::parse(&format!("urn:pulumi:{s}"));
    }

    #[test]
    fn structured_garbage_is_a_typed_error(
        parts in proptest::collection::vec("[a-z:$]{0,6}", 0..6),
    ) {
        let text = format!("urn:pulumi:{}", parts.join("::"));
        if let Ok(u) = Urn::parse(&text) {
            // Anything accepted is canonical.
            prop_assert_eq!(u.as_str(), text.as_str());
            prop_assert!(TypeToken::parse(u.type_str()).is_ok());
        }
    }
}
