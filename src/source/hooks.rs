//! Resource hooks: Rust closures the engine calls around a resource's
//! provider operations (before/after create, update, delete) and on a
//! failure, where an error hook may ask for a retry. Hooks run in update
//! operations only, never in a preview.

use std::fmt;
use std::sync::Arc;

use crate::model::{PropertyMap, TypeToken, Urn};

use super::ProgramError;

/// Where a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPoint {
    /// Before the provider's create.
    BeforeCreate,
    /// After a successful create.
    AfterCreate,
    /// Before the provider's update.
    BeforeUpdate,
    /// After a successful update.
    AfterUpdate,
    /// Before the provider's delete.
    BeforeDelete,
    /// After a successful delete.
    AfterDelete,
}

/// What a hook is told.
#[derive(Debug, Clone, Copy)]
pub struct HookArgs<'a> {
    /// Where it runs (for an error hook: the operation that failed).
    pub point: HookPoint,
    /// The resource.
    pub urn: &'a Urn,
    /// Its type.
    pub ty: &'a TypeToken,
    /// Its inputs.
    pub inputs: &'a PropertyMap,
    /// Its outputs (after hooks; the prior outputs for update/delete).
    pub outputs: Option<&'a PropertyMap>,
    /// The failure (error hooks).
    pub error: Option<&'a str>,
    /// Which attempt failed, from 1 (error hooks).
    pub attempt: u32,
}

/// A hook; an error fails the step.
pub type Hook = Arc<dyn Fn(&HookArgs<'_>) -> Result<(), ProgramError> + Send + Sync>;
/// An error hook: returns true to retry the failed operation.
pub type ErrorHook = Arc<dyn Fn(&HookArgs<'_>) -> bool + Send + Sync>;

/// The most attempts an error hook can ask for.
pub const MAX_ATTEMPTS: u32 = 10;

/// A resource's hooks, run in order at each point.
#[derive(Clone, Default)]
pub struct ResourceHooks {
    /// Before create.
    pub before_create: Vec<Hook>,
    /// After create.
    pub after_create: Vec<Hook>,
    /// Before update.
    pub before_update: Vec<Hook>,
    /// After update.
    pub after_update: Vec<Hook>,
    /// Before delete.
    pub before_delete: Vec<Hook>,
    /// After delete.
    pub after_delete: Vec<Hook>,
    /// On a failed create, update or delete; any returning true retries it
    /// (up to [`MAX_ATTEMPTS`] attempts).
    pub on_error: Vec<ErrorHook>,
}

impl ResourceHooks {
    /// True when no hook is set.
    pub fn is_empty(&self) -> bool {
        self.before_create.is_empty()
            && self.after_create.is_empty()
            && self.before_update.is_empty()
            && self.after_update.is_empty()
            && self.before_delete.is_empty()
            && self.after_delete.is_empty()
            && self.on_error.is_empty()
    }

    /// The hooks of a point.
    pub fn at(&self, point: HookPoint) -> &[Hook] {
        match point {
            HookPoint::BeforeCreate => &self.before_create,
            HookPoint::AfterCreate => &self.after_create,
            HookPoint::BeforeUpdate => &self.before_update,
            HookPoint::AfterUpdate => &self.after_update,
            HookPoint::BeforeDelete => &self.before_delete,
            HookPoint::AfterDelete => &self.after_delete,
        }
    }

    /// Runs the hooks of a point in order; the first error stops them.
    ///
    /// # Errors
    /// The hook's error, as text naming the point.
    pub fn run(&self, args: &HookArgs<'_>) -> Result<(), String> {
        for h in self.at(args.point) {
            h(args).map_err(|e| format!("{:?} hook failed: {e}", args.point))?;
        }
        Ok(())
    }

    /// Asks the error hooks whether to retry (every hook is called).
    pub fn retry(&self, args: &HookArgs<'_>) -> bool {
        if args.attempt >= MAX_ATTEMPTS {
            return false;
        }
        let mut retry = false;
        for h in &self.on_error {
            retry |= h(args);
        }
        retry
    }
}

impl fmt::Debug for ResourceHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceHooks")
            .field("before_create", &self.before_create.len())
            .field("after_create", &self.after_create.len())
            .field("before_update", &self.before_update.len())
            .field("after_update", &self.after_update.len())
            .field("before_delete", &self.before_delete.len())
            .field("after_delete", &self.after_delete.len())
            .field("on_error", &self.on_error.len())
            .finish()
    }
}

impl PartialEq for ResourceHooks {
    fn eq(&self, other: &Self) -> bool {
        fn same<T: ?Sized>(a: &[Arc<T>], b: &[Arc<T>]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
        }
        same(&self.before_create, &other.before_create)
            && same(&self.after_create, &other.after_create)
            && same(&self.before_update, &other.before_update)
            && same(&self.after_update, &other.after_update)
            && same(&self.before_delete, &other.before_delete)
            && same(&self.after_delete, &other.after_delete)
            && same(&self.on_error, &other.on_error)
    }
}
