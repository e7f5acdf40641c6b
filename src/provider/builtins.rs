//! The `pulumi` package: what the engine answers itself, with no cloud.
//!
//! Invokes ([`invoke`]): `pulumi:pulumi:getStack` (the stack and project
//! names) and `pulumi:pulumi:getResource` (a resource's URN, ID and outputs,
//! which an SDK uses to rehydrate a resource from its URN or a resource
//! reference: the state this deployment registered or read, else the
//! stack's prior state).
//!
//! Resources ([`BuiltinProvider`], the provider of package `pulumi`):
//! `pulumi:pulumi:StackReference`, which an SDK reads (`ReadResource` with
//! the other stack's name as ID) to get another stack's outputs as
//! `{name, outputs, secretOutputNames}`. The outputs come from a
//! [`StackOutputs`] source (the CLI's: the other stack of the same
//! backend); secrets stay secrets, and are listed in `secretOutputNames`.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::{DiffKind, DiffResponse, ObjectState, Provider, ProviderError, ResourceRequest};
use crate::model::urn::UNKNOWN_ID;
use crate::model::{PropertyMap, PropertyValue, State, Urn};

/// Who the built-ins answer for.
#[derive(Debug, Clone)]
pub struct BuiltinContext {
    /// The stack's name.
    pub stack: String,
    /// The project's name.
    pub project: String,
}

/// Why an invoke failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    /// No built-in has this token, and providers do not serve invokes yet.
    #[error("unknown function `{token}`: keel's built-ins are {}", BUILTINS.join(", "))]
    Unknown {
        /// The token asked for.
        token: String,
    },
    /// An argument is missing or malformed.
    #[error("`{token}`: {message}")]
    BadArgument {
        /// The function.
        token: String,
        /// What is wrong.
        message: String,
    },
    /// `getResource` of a URN this deployment neither registered nor read,
    /// and the stack did not have.
    #[error("`pulumi:pulumi:getResource`: no resource {urn} was registered or read in this deployment, and the stack has none; check the URN (`keel state show` lists the stack's)")]
    UnknownResource {
        /// The URN asked for.
        urn: Urn,
    },
}

/// The built-in tokens.
pub const BUILTINS: &[&str] = &["pulumi:pulumi:getStack", "pulumi:pulumi:getResource"];

/// The type of stack references.
pub const STACK_REFERENCE_TYPE: &str = "pulumi:pulumi:StackReference";

/// The type of stashes (`pulumi:Stash` in Pulumi YAML): a resource whose
/// `output` keeps the `input` it was created with, while `input` follows
/// the program.
pub const STASH_TYPE: &str = "pulumi:index:Stash";

fn is_stash(req: &ResourceRequest<'_>) -> bool {
    req.ty.as_str() == STASH_TYPE
}

/// A stash's outputs: its inputs and the stashed `output`.
fn stash_outputs(inputs: &PropertyMap, output: Option<&PropertyValue>) -> PropertyMap {
    let mut out = inputs.clone();
    let stashed = output
        .cloned()
        .unwrap_or_else(|| inputs.get("input").cloned().unwrap_or_default());
    out.insert("output".into(), stashed);
    out
}

/// Answers a built-in invoke. `resource` finds a resource's state for
/// `getResource`: the one this deployment wrote or read, else the prior one.
///
/// # Errors
/// [`InvokeError::Unknown`] for any other token; [`InvokeError::BadArgument`]
/// and [`InvokeError::UnknownResource`] for `getResource`.
pub fn invoke(
    token: &str,
    args: &PropertyMap,
    ctx: &BuiltinContext,
    resource: &dyn Fn(&Urn) -> Option<State>,
) -> Result<PropertyMap, InvokeError> {
    match token {
        "pulumi:pulumi:getStack" => {
            let mut out = PropertyMap::new();
            out.insert("stack".into(), PropertyValue::String(ctx.stack.clone()));
            out.insert("project".into(), PropertyValue::String(ctx.project.clone()));
            Ok(out)
        }
        "pulumi:pulumi:getResource" => {
            let bad = |message: String| InvokeError::BadArgument {
                token: token.to_owned(),
                message,
            };
            let text = match args.get("urn") {
                Some(PropertyValue::String(s)) => s,
                Some(other) => {
                    return Err(bad(format!(
                        "`urn` must be a string, found {}",
                        other.to_json()
                    )))
                }
                None => return Err(bad("the `urn` argument is missing".into())),
            };
            let urn = Urn::parse(text).map_err(|e| bad(format!("`urn`: {e}")))?;
            let state = resource(&urn).ok_or(InvokeError::UnknownResource { urn: urn.clone() })?;
            // A preview's unknown ID is the empty string to an SDK.
            let id = if state.id == UNKNOWN_ID {
                String::new()
            } else {
                state.id
            };
            let mut out = PropertyMap::new();
            out.insert("urn".into(), PropertyValue::String(urn.to_string()));
            out.insert("id".into(), PropertyValue::String(id));
            out.insert("state".into(), PropertyValue::Object(state.outputs));
            Ok(out)
        }
        other => Err(InvokeError::Unknown {
            token: other.to_owned(),
        }),
    }
}

/// Where stack references find other stacks' outputs.
pub trait StackOutputs: Send + Sync + fmt::Debug + 'static {
    /// The outputs of `stack` (secrets decrypted, as secrets).
    ///
    /// # Errors
    /// A message for the user: the stack does not exist, cannot be read, or
    /// holds secrets this process cannot decrypt.
    fn stack_outputs(&self, stack: &str) -> Result<PropertyMap, String>;
}

/// The provider of the `pulumi` package: stack references.
#[derive(Debug, Clone, Default)]
pub struct BuiltinProvider {
    stacks: Option<Arc<dyn StackOutputs>>,
}

impl BuiltinProvider {
    /// A provider reading stack references from `stacks` (none: reading
    /// one fails, naming what is missing).
    pub fn new(stacks: Option<Arc<dyn StackOutputs>>) -> Self {
        Self { stacks }
    }

    fn failed(operation: &'static str, urn: &Urn, message: impl Into<String>) -> ProviderError {
        ProviderError::Failed {
            operation,
            urn: urn.clone(),
            message: message.into(),
        }
    }

    /// The stack a reference names: its `name` input, else its ID.
    fn target<'a>(req: &'a ResourceRequest<'_>) -> &'a str {
        match req.inputs.get("name") {
            Some(PropertyValue::String(s)) if !s.is_empty() => s,
            _ => req.id,
        }
    }

    /// `{name, outputs, secretOutputNames}` of the stack `name`.
    async fn read_reference(
        &self,
        operation: &'static str,
        urn: &Urn,
        name: &str,
    ) -> Result<PropertyMap, ProviderError> {
        let Some(stacks) = self.stacks.clone() else {
            return Err(Self::failed(
                operation,
                urn,
                "stack references need a backend to read other stacks from; this engine was given none",
            ));
        };
        let target = name.to_owned();
        // Reading a stack is file I/O (and a key derivation): off the
        // runtime's threads.
        let outputs = tokio::task::spawn_blocking(move || stacks.stack_outputs(&target))
            .await
            .map_err(|e| Self::failed(operation, urn, e.to_string()))?
            .map_err(|m| Self::failed(operation, urn, m))?;
        let secret_names: Vec<PropertyValue> = outputs
            .iter()
            .filter(|(_, v)| v.contains_secrets())
            .map(|(k, _)| PropertyValue::String(k.clone()))
            .collect();
        let mut out = PropertyMap::new();
        out.insert("name".into(), PropertyValue::String(name.to_owned()));
        out.insert("outputs".into(), PropertyValue::Object(outputs));
        out.insert(
            "secretOutputNames".into(),
            PropertyValue::Array(secret_names),
        );
        Ok(out)
    }

    fn only_references(
        operation: &'static str,
        req: &ResourceRequest<'_>,
    ) -> Result<(), ProviderError> {
        if req.ty.as_str() == STACK_REFERENCE_TYPE || is_stash(req) {
            Ok(())
        } else {
            Err(Self::failed(
                operation,
                req.urn,
                format!(
                    "the `pulumi` package has no resource type `{}` (keel serves {STACK_REFERENCE_TYPE} and {STASH_TYPE})",
                    req.ty
                ),
            ))
        }
    }
}

#[async_trait]
impl Provider for BuiltinProvider {
    fn serving(&self) -> crate::provider::Serving {
        crate::provider::Serving::Builtin
    }

    fn package(&self) -> &str {
        "pulumi"
    }

    async fn configure(&self, _inputs: &PropertyMap) -> super::Result<()> {
        Ok(())
    }

    async fn check(&self, req: ResourceRequest<'_>) -> super::Result<PropertyMap> {
        Self::only_references("check", &req)?;
        if is_stash(&req) {
            return Ok(req.inputs.clone());
        }
        let failures: Vec<String> = req
            .inputs
            .keys()
            .filter(|k| *k != "name")
            .map(|k| format!("unknown property `{k}` (a stack reference takes `name`)"))
            .collect();
        if failures.is_empty() {
            Ok(req.inputs.clone())
        } else {
            Err(ProviderError::CheckFailed {
                urn: req.urn.clone(),
                failures,
            })
        }
    }

    async fn diff(&self, req: ResourceRequest<'_>) -> super::Result<DiffResponse> {
        Self::only_references("diff", &req)?;
        let key = if is_stash(&req) { "input" } else { "name" };
        let changed = req.old_inputs.and_then(|o| o.get(key)) != req.inputs.get(key);
        let mut d = DiffResponse {
            kind: DiffKind::Same,
            changed_keys: Default::default(),
            replace_keys: Default::default(),
            delete_before_replace: false,
            detailed: Vec::new(),
        };
        if changed && is_stash(&req) {
            d.kind = DiffKind::Update;
            d.changed_keys.insert(key.into());
        } else if changed {
            d.kind = DiffKind::Replace;
            d.changed_keys.insert("name".into());
            d.replace_keys.insert("name".into());
        }
        Ok(d)
    }

    async fn create(&self, req: ResourceRequest<'_>) -> super::Result<ObjectState> {
        Self::only_references("create", &req)?;
        if is_stash(&req) {
            return Ok(ObjectState {
                id: req.urn.name().to_owned(),
                inputs: req.inputs.clone(),
                outputs: stash_outputs(req.inputs, None),
            });
        }
        let name = Self::target(&req).to_owned();
        let outputs = self.read_reference("create", req.urn, &name).await?;
        Ok(ObjectState {
            id: name,
            inputs: req.inputs.clone(),
            outputs,
        })
    }

    async fn read(&self, req: ResourceRequest<'_>) -> super::Result<Option<ObjectState>> {
        Self::only_references("read", &req)?;
        if is_stash(&req) {
            return Ok(req.old_outputs.map(|o| ObjectState {
                id: req.id.to_owned(),
                inputs: req.inputs.clone(),
                outputs: o.clone(),
            }));
        }
        let name = Self::target(&req).to_owned();
        if name.is_empty() {
            return Err(Self::failed(
                "read",
                req.urn,
                "a stack reference names no stack (give `name`, or the stack as the ID)",
            ));
        }
        let outputs = self.read_reference("read", req.urn, &name).await?;
        let mut inputs = PropertyMap::new();
        inputs.insert("name".into(), PropertyValue::String(name.clone()));
        Ok(Some(ObjectState {
            id: req.id.to_owned(),
            inputs,
            outputs,
        }))
    }

    async fn update(&self, req: ResourceRequest<'_>) -> super::Result<ObjectState> {
        Self::only_references("update", &req)?;
        if is_stash(&req) {
            let kept = req.old_outputs.and_then(|o| o.get("output"));
            return Ok(ObjectState {
                id: req.id.to_owned(),
                inputs: req.inputs.clone(),
                outputs: stash_outputs(req.inputs, kept),
            });
        }
        let name = Self::target(&req).to_owned();
        let outputs = self.read_reference("update", req.urn, &name).await?;
        Ok(ObjectState {
            id: req.id.to_owned(),
            inputs: req.inputs.clone(),
            outputs,
        })
    }

    async fn delete(&self, _req: ResourceRequest<'_>) -> super::Result<()> {
        // A stack reference owns nothing.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::property::Secret;
    use crate::model::TypeToken;

    fn ctx() -> BuiltinContext {
        BuiltinContext {
            stack: "dev".into(),
            project: "p".into(),
        }
    }

    const BUCKET: &str = "urn:pulumi:dev::p::aws:s3/bucket:Bucket::b";

    fn lookup(urn: &Urn) -> Option<State> {
        (urn.as_str() == BUCKET).then(|| {
            let mut s = State::new(
                urn.clone(),
                TypeToken::parse("aws:s3/bucket:Bucket").unwrap(),
                true,
            );
            s.id = "b-1".into();
            s.outputs.insert("arn".into(), "arn:b".into());
            s
        })
    }

    fn args(urn: PropertyValue) -> PropertyMap {
        [("urn".to_owned(), urn)].into()
    }

    #[test]
    fn get_resource_answers_urn_id_and_outputs() {
        let out = invoke(
            "pulumi:pulumi:getResource",
            &args(BUCKET.into()),
            &ctx(),
            &lookup,
        )
        .unwrap();
        assert_eq!(out["urn"], PropertyValue::from(BUCKET));
        assert_eq!(out["id"], PropertyValue::from("b-1"));
        assert_eq!(
            out["state"],
            PropertyValue::Object([("arn".to_owned(), "arn:b".into())].into())
        );
    }

    #[test]
    fn get_resource_refuses_what_it_cannot_answer() {
        let other = "urn:pulumi:dev::p::aws:s3/bucket:Bucket::other";
        let cases: [(PropertyMap, &str); 4] = [
            (
                args(other.into()),
                "no resource urn:pulumi:dev::p::aws:s3/bucket:Bucket::other",
            ),
            (args("not a urn".into()), "`urn`:"),
            (args(PropertyValue::Bool(true)), "must be a string"),
            (PropertyMap::new(), "is missing"),
        ];
        for (a, says) in cases {
            let e = invoke("pulumi:pulumi:getResource", &a, &ctx(), &lookup).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[derive(Debug)]
    struct Stacks;

    impl StackOutputs for Stacks {
        fn stack_outputs(&self, stack: &str) -> Result<PropertyMap, String> {
            match stack {
                "net" => Ok([
                    ("vpc".to_owned(), PropertyValue::from("vpc-1")),
                    (
                        "key".to_owned(),
                        PropertyValue::Secret(Secret::plaintext("k".into())),
                    ),
                ]
                .into()),
                other => Err(format!("no stack {other}")),
            }
        }
    }

    fn request<'a>(
        urn: &'a Urn,
        ty: &'a TypeToken,
        id: &'a str,
        inputs: &'a PropertyMap,
    ) -> ResourceRequest<'a> {
        ResourceRequest::new(urn, ty, id, inputs)
    }

    #[tokio::test]
    async fn a_stack_reference_reads_the_other_stacks_outputs_keeping_secrets() {
        let p = BuiltinProvider::new(Some(Arc::new(Stacks)));
        let urn = Urn::parse("urn:pulumi:dev::p::pulumi:pulumi:StackReference::net").unwrap();
        let ty = TypeToken::parse(STACK_REFERENCE_TYPE).unwrap();
        let inputs: PropertyMap = [("name".to_owned(), PropertyValue::from("net"))].into();
        let got = p
            .read(request(&urn, &ty, "net", &inputs))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.id, "net");
        let outputs = got.outputs["outputs"].as_object().unwrap();
        assert_eq!(outputs["vpc"], PropertyValue::from("vpc-1"));
        assert!(matches!(outputs["key"], PropertyValue::Secret(_)));
        assert_eq!(
            got.outputs["secretOutputNames"],
            PropertyValue::Array(vec!["key".into()])
        );
        let empty = PropertyMap::new();
        let e = p
            .read(request(&urn, &ty, "gone", &empty))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no stack gone"), "{e}");
        let none = BuiltinProvider::new(None);
        assert!(none.read(request(&urn, &ty, "net", &inputs)).await.is_err());
    }
}
