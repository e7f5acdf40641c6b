//! Runs a validated program file on the program API, as an SDK program
//! would: each resource waits for the resources it refers to (parent,
//! `dependsOn`, `deletedWith`, provider, alias parents, and every
//! `${res...}` in its properties), then registers with its references
//! resolved and its dependencies recorded (`dependsOn` and
//! `propertyDependencies`). Resources with nothing unresolved register
//! concurrently. When a resource fails, those that wait for it are not
//! registered and the program fails, so the engine deletes nothing.
//! Finally the stack's outputs are registered on the stack resource.
//!
//! A resource's `stateMigrations` become its migration callbacks, in order:
//! the built-in helpers of [`crate::migrate::helpers`] and external
//! programs ([`crate::source::command`]), which run in the program file's
//! directory. Each callback may run for `stateMigrationTimeout` (default
//! 30 s); an external program past it is killed and its callback fails with
//! the end of its stderr (the engine's own deadline, a second later, is
//! only a backstop).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, BoxFuture, FutureExt, Shared};

use super::program::{
    AliasEntry, AliasParentSpec, OptionsSpec, ProgramFile, ProviderSpec, ResourceSpec,
    StateMigration,
};
use super::template::Env;
use crate::actors::{Context, Program, ProgramFuture};
use crate::migrate::helpers;
use crate::model::urn::UNKNOWN_ID;
use crate::model::{PropertyMap, ProviderRef, Urn};
use crate::source::command::CommandCallback;
use crate::source::goal::{Alias, AliasParent, AliasSpec, Goal, Registered, ResourceOptions};
use crate::source::migration::{MigrationCallback, StateMigrations, DEFAULT_TIMEOUT};
use crate::source::ProgramError;

/// Why a program file's resource was not registered.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ResourceFailure {
    /// Its own registration or evaluation failed.
    #[error("resource `{resource}`: {message}")]
    Failed {
        /// The resource.
        resource: String,
        /// What went wrong.
        message: String,
    },
    /// A resource it waits for failed, so it was not registered.
    #[error("resource `{resource}` was not registered: `{dependency}` failed")]
    Skipped {
        /// The resource.
        resource: String,
        /// The failed resource it waits for.
        dependency: String,
    },
}

/// Why a program file's run failed: every resource that failed itself.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct RunError(pub Vec<ResourceFailure>);

/// A shared future of a program's node: its value, or why it failed.
pub(crate) type SlotOf<T> = Shared<BoxFuture<'static, Result<T, ResourceFailure>>>;
type Slot = SlotOf<Registered>;

/// A program file as a [`Program`].
#[derive(Debug, Clone)]
pub struct FileProgram {
    file: Arc<ProgramFile>,
}

impl FileProgram {
    /// The program of a validated file.
    pub fn new(file: ProgramFile) -> Self {
        Self {
            file: Arc::new(file),
        }
    }

    /// The file.
    pub fn file(&self) -> &ProgramFile {
        &self.file
    }
}

impl Program for FileProgram {
    fn run(&self, ctx: Context) -> ProgramFuture {
        let file = self.file.clone();
        Box::pin(async move {
            run(file, ctx)
                .await
                .map_err(|e| Box::new(e) as ProgramError)
        })
    }
}

/// The program of a command: a program file, or a Pulumi Python program
/// directory run through the resource-monitor protocol.
#[derive(Debug, Clone)]
pub enum CliProgram {
    /// A YAML or JSON program file.
    File(FileProgram),
    /// A directory with `__main__.py`.
    Python(crate::grpc::python::PythonProgram),
    /// A Pulumi YAML project.
    Yaml(super::pyaml::eval::YamlProgram),
}

impl Program for CliProgram {
    fn run(&self, ctx: Context) -> ProgramFuture {
        match self {
            Self::File(f) => f.run(ctx),
            Self::Python(p) => p.run(ctx),
            Self::Yaml(y) => y.run(ctx),
        }
    }

    fn registers_root(&self) -> bool {
        match self {
            Self::File(f) => f.registers_root(),
            Self::Python(p) => p.registers_root(),
            Self::Yaml(y) => y.registers_root(),
        }
    }
}

/// Waits for `deps`, returning their values (registrations, or a Pulumi
/// YAML program's evaluated nodes) by name.
///
/// # Errors
/// [`ResourceFailure::Skipped`] naming the first dependency that failed.
pub(crate) async fn resolve<T: Clone>(
    resource: &str,
    deps: Vec<(String, SlotOf<T>)>,
) -> Result<HashMap<String, T>, ResourceFailure> {
    let mut out = HashMap::with_capacity(deps.len());
    for (name, slot) in deps {
        match slot.await {
            Ok(r) => {
                out.insert(name, r);
            }
            Err(_) => {
                return Err(ResourceFailure::Skipped {
                    resource: resource.to_owned(),
                    dependency: name,
                })
            }
        }
    }
    Ok(out)
}

async fn run(file: Arc<ProgramFile>, ctx: Context) -> Result<(), RunError> {
    let mut slots: HashMap<String, Slot> = HashMap::new();
    let mut order = Vec::new();
    for name in file.order() {
        let spec = &file.resources[name];
        let deps: Vec<(String, Slot)> = spec
            .dependency_names()
            .into_iter()
            .filter_map(|d| slots.get(d).map(|s| (d.to_owned(), s.clone())))
            .collect();
        let (file, ctx, name_owned) = (file.clone(), ctx.clone(), name.to_owned());
        let fut: BoxFuture<'static, Result<Registered, ResourceFailure>> = Box::pin(async move {
            let resolved = resolve(&name_owned, deps).await?;
            let spec = &file.resources[&name_owned];
            let failed = |message: String| ResourceFailure::Failed {
                resource: name_owned.clone(),
                message,
            };
            let goal = goal(&file, spec, &resolved, ctx.is_preview()).map_err(&failed)?;
            ctx.register(goal).await.map_err(|e| failed(e.to_string()))
        });
        slots.insert(name.to_owned(), fut.shared());
        order.push(name.to_owned());
    }

    // The stack's outputs wait for the resources they refer to.
    let out_deps: Vec<(String, Slot)> = {
        let mut names: Vec<&str> = file.outputs.values().flat_map(|t| t.resources()).collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .filter_map(|d| slots.get(d).map(|s| (d.to_owned(), s.clone())))
            .collect()
    };
    let outputs = {
        let (file, ctx) = (file.clone(), ctx.clone());
        async move {
            let resolved = resolve("(outputs)", out_deps).await.map_err(|_| None)?;
            let env = Env {
                config: &file.config,
                resources: &resolved,
                preview: ctx.is_preview(),
            };
            let mut map = PropertyMap::new();
            for (k, t) in &file.outputs {
                let v = t
                    .eval(&env)
                    .map_err(|e| e.to_string())
                    .and_then(|v| {
                        v.check_depth(&format!("outputs.{k}"))
                            .map(|()| v)
                            .map_err(|e| e.to_string())
                    })
                    .map_err(|e| {
                        Some(ResourceFailure::Failed {
                            resource: "(stack)".into(),
                            message: format!("key `outputs.{k}`: {e}"),
                        })
                    })?;
                map.insert(k.clone(), v);
            }
            ctx.register_outputs(ctx.root(), map).await.map_err(|e| {
                Some(ResourceFailure::Failed {
                    resource: "(stack)".into(),
                    message: format!("registering the stack's outputs failed: {e}"),
                })
            })
        }
    };

    let all = join_all(order.iter().map(|n| slots[n].clone()));
    let (results, outputs) = futures::join!(all, outputs);
    let errors: Vec<ResourceFailure> = results.into_iter().filter_map(Result::err).collect();
    // Report the resources that failed themselves; those skipped because
    // of them follow from it.
    let mut failures: Vec<ResourceFailure> = errors
        .iter()
        .filter(|f| matches!(f, ResourceFailure::Failed { .. }))
        .cloned()
        .collect();
    if failures.is_empty() {
        failures = errors;
    }
    if let Err(Some(f)) = outputs {
        failures.push(f);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(RunError(failures))
    }
}

/// The registration of one resource, with its references resolved.
fn goal(
    file: &ProgramFile,
    spec: &ResourceSpec,
    resolved: &HashMap<String, Registered>,
    preview: bool,
) -> Result<Goal, String> {
    let env = Env {
        config: &file.config,
        resources: resolved,
        preview,
    };
    let urn = |name: &str| -> Result<Urn, String> {
        resolved
            .get(name)
            .map(|r| r.urn.clone())
            .ok_or_else(|| format!("`{name}` was not registered"))
    };
    let mut inputs = PropertyMap::new();
    let mut property_dependencies = std::collections::BTreeMap::new();
    let mut depends_on: Vec<Urn> = Vec::new();
    for (k, t) in &spec.properties {
        let v = t
            .eval(&env)
            .map_err(|e| format!("key `properties.{k}`: {e}"))?;
        // A reference can put a deep output inside a literal structure.
        v.check_depth(&format!("properties.{k}"))
            .map_err(|e| format!("key `properties.{k}`: {e}"))?;
        inputs.insert(k.clone(), v);
        let refs = t.resources();
        if !refs.is_empty() {
            let urns = refs.into_iter().map(urn).collect::<Result<Vec<_>, _>>()?;
            property_dependencies.insert(k.clone(), urns);
        }
    }
    let o = &spec.options;
    for d in &o.depends_on {
        depends_on.push(urn(d)?);
    }
    for u in property_dependencies.values().flatten() {
        if !depends_on.contains(u) {
            depends_on.push(u.clone());
        }
    }
    let provider = match &o.provider {
        None => None,
        Some(ProviderSpec::Reference(r)) => Some(r.to_string()),
        Some(ProviderSpec::Resource(name)) => {
            let reg = resolved
                .get(name)
                .ok_or_else(|| format!("provider `{name}` was not registered"))?;
            let id = if reg.id.is_empty() {
                UNKNOWN_ID
            } else {
                &reg.id
            };
            let r = ProviderRef::new(reg.urn.clone(), id)
                .map_err(|e| format!("key `options.provider`: {e}"))?;
            Some(r.to_string())
        }
    };
    let mut aliases = Vec::with_capacity(o.aliases.len());
    for a in &o.aliases {
        aliases.push(match a {
            AliasEntry::Urn(u) => Alias::Urn(u.clone()),
            AliasEntry::Spec {
                name,
                ty,
                parent,
                stack,
                project,
            } => Alias::Spec(AliasSpec {
                name: name.clone(),
                ty: ty.clone(),
                parent: match parent {
                    None => None,
                    Some(AliasParentSpec::NoParent) => Some(AliasParent::NoParent),
                    Some(AliasParentSpec::Urn(u)) => Some(AliasParent::Urn(u.clone())),
                    Some(AliasParentSpec::Resource(n)) => Some(AliasParent::Urn(urn(n)?)),
                },
                stack: stack.clone(),
                project: project.clone(),
            }),
        });
    }
    Ok(Goal {
        ty: spec.ty.clone(),
        name: spec.name.clone(),
        custom: !spec.component,
        inputs,
        options: ResourceOptions {
            parent: o.parent.as_deref().map(urn).transpose()?,
            depends_on,
            property_dependencies,
            provider,
            version: o.version.clone(),
            protect: o.protect,
            retain_on_delete: o.retain_on_delete,
            deleted_with: o.deleted_with.as_deref().map(urn).transpose()?,
            delete_before_replace: o.delete_before_replace,
            aliases,
            custom_timeouts: o.custom_timeouts.clone(),
            ignore_changes: o.ignore_changes.clone(),
            replace_on_changes: o.replace_on_changes.clone(),
            additional_secret_outputs: o.additional_secret_outputs.clone(),
            state_migrations: state_migrations(file, o),
            import: o.import.clone(),
            ..ResourceOptions::default()
        },
    })
}

/// How much longer than a command's own deadline the engine waits for its
/// callback: the command's deadline, which kills the program and reports
/// its stderr, passes first.
const ENGINE_GRACE: Duration = Duration::from_secs(1);

/// A resource's `stateMigrations` as callbacks.
pub(crate) fn state_migrations(file: &ProgramFile, o: &OptionsSpec) -> StateMigrations {
    if o.state_migrations.is_empty() {
        return StateMigrations::default();
    }
    let timeout = o.state_migration_timeout.unwrap_or(DEFAULT_TIMEOUT);
    // Commands run where the program file is (`None`: the current
    // directory, for a file named without a directory).
    let dir = file
        .path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(ToOwned::to_owned);
    let callbacks: Vec<MigrationCallback> = o
        .state_migrations
        .iter()
        .map(|m| match m {
            StateMigration::Rename { from, to } => helpers::rename(from, to),
            StateMigration::Retype { from, to } => helpers::retype(from.as_str(), to.as_str()),
            StateMigration::Move { resources, under } => {
                let names: Vec<&str> = resources.iter().map(String::as_str).collect();
                helpers::move_under(&names, under)
            }
            StateMigration::Command(argv) => {
                let mut c = CommandCallback::new(argv.clone()).timeout(timeout);
                if let Some(d) = &dir {
                    c = c.in_dir(d.clone());
                }
                c.callback()
            }
        })
        .collect();
    StateMigrations {
        callbacks,
        timeout: timeout.saturating_add(ENGINE_GRACE),
    }
}
