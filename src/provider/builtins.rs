//! Built-in invokes: functions the engine answers itself, with no provider
//! (`pulumi:pulumi:getStack`). New built-ins are added to [`invoke`].

use crate::model::{PropertyMap, PropertyValue};

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
}

/// The built-in tokens.
pub const BUILTINS: &[&str] = &["pulumi:pulumi:getStack"];

/// Answers a built-in invoke.
///
/// # Errors
/// [`InvokeError::Unknown`] for any other token.
pub fn invoke(
    token: &str,
    _args: &PropertyMap,
    ctx: &BuiltinContext,
) -> Result<PropertyMap, InvokeError> {
    match token {
        "pulumi:pulumi:getStack" => {
            let mut out = PropertyMap::new();
            out.insert("stack".into(), PropertyValue::String(ctx.stack.clone()));
            out.insert("project".into(), PropertyValue::String(ctx.project.clone()));
            Ok(out)
        }
        other => Err(InvokeError::Unknown {
            token: other.to_owned(),
        }),
    }
}
