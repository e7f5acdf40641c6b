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
    expansion_keys, AliasEntry, AliasParentSpec, EntryKind, Iteration, OptionsSpec, ProgramFile,
    ProviderSpec, ResourceSpec, StateMigration,
};
use super::template::{instance_name, Env};
use crate::actors::{Context, Program, ProgramFuture};
use crate::migrate::helpers;
use crate::model::address::{Address, Key};
use crate::model::urn::UNKNOWN_ID;
use crate::model::{PropertyMap, PropertyValue, ProviderRef, Urn};
use crate::source::command::CommandCallback;
use crate::source::goal::{
    Alias, AliasParent, AliasSpec, Goal, ReadGoal, Registered, ResourceOptions,
};
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

/// One registered expansion of a declaration (a declaration that does not
/// expand has one).
#[derive(Debug, Clone)]
pub(crate) struct Instance {
    /// Its concrete declaration address.
    address: Address,
    /// The key and value `${each...}` gives inside it: its own, or those
    /// of the iterated component it is declared inside.
    each: Option<Each>,
    /// Its registration.
    reg: Registered,
}

/// The key and value `${each...}` gives inside an expansion.
type Each = Arc<(PropertyValue, PropertyValue)>;

/// The expansions of each declaration, by name.
type Resolved = HashMap<String, Arc<Vec<Instance>>>;
type Slot = SlotOf<Arc<Vec<Instance>>>;

/// The registrations references resolve against, by the name a template
/// uses: `name` for a declaration that does not expand, `name["key"]` /
/// `name[0]` for each expansion of an iterated one. (References to
/// entries declared inside an iterated component are refused when the
/// file is checked.)
fn by_reference_name(file: &ProgramFile, resolved: &Resolved) -> HashMap<String, Registered> {
    let mut out = HashMap::new();
    for (name, instances) in resolved {
        let iterated = file
            .resources
            .get(name)
            .is_some_and(|r| r.iterate.is_some());
        for i in instances.iter() {
            let key = if iterated {
                i.address.0.last().and_then(|s| s.key.as_ref())
            } else {
                None
            };
            out.insert(instance_name(name, key), i.reg.clone());
        }
    }
    out
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
        let fut: BoxFuture<'static, Result<Arc<Vec<Instance>>, ResourceFailure>> =
            Box::pin(async move {
                let resolved: Resolved = resolve(&name_owned, deps).await?;
                declare(&file, &ctx, &name_owned, &resolved)
                    .await
                    .map(Arc::new)
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
            let resolved: Resolved = resolve("(outputs)", out_deps).await.map_err(|_| None)?;
            let regs = by_reference_name(&file, &resolved);
            let env = Env {
                config: &file.config,
                resources: &regs,
                preview: ctx.is_preview(),
                each: None,
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

/// Registers every expansion of the declaration `name`: one per expansion
/// of the component it is declared inside (or one), times one per key of
/// its own `forEach`/`count` (or one). An expansion's URN name is its
/// concrete address when that has a key (`server["a"]`,
/// `group["east"]/disk`), else the declaration's name; keys, not
/// positions, name expansions, so reordering a map or keyed list changes
/// no URN.
async fn declare(
    file: &ProgramFile,
    ctx: &Context,
    name: &str,
    resolved: &Resolved,
) -> Result<Vec<Instance>, ResourceFailure> {
    let spec = &file.resources[name];
    let failed = |message: String| ResourceFailure::Failed {
        resource: name.to_owned(),
        message,
    };
    let regs = by_reference_name(file, resolved);
    let parents: Vec<Option<&Instance>> = match spec.options.parent.as_deref() {
        Some(p) => resolved
            .get(p)
            .ok_or_else(|| failed(format!("parent `{p}` was not registered")))?
            .iter()
            .map(Some)
            .collect(),
        None => vec![None],
    };
    let mut planned = Vec::new();
    for parent in parents {
        let base = parent.map(|i| i.address.clone()).unwrap_or_default();
        let inherited = parent.and_then(|i| i.each.clone());
        let expansions: Vec<(Option<Key>, Option<Each>)> = match &spec.iterate {
            None => vec![(None, inherited)],
            Some(it) => {
                let env = Env {
                    config: &file.config,
                    resources: &regs,
                    preview: ctx.is_preview(),
                    each: inherited.as_deref(),
                };
                let (key, t) = match it {
                    Iteration::ForEach(t) => ("forEach", t),
                    Iteration::Count(t) => ("count", t),
                };
                let value = t
                    .eval(&env)
                    .map_err(|e| failed(format!("key `{key}`: {e}")))?;
                if value.contains_unknowns() {
                    // A preview cannot know the keys of an output yet.
                    Vec::new()
                } else {
                    let keys = match it {
                        Iteration::ForEach(_) => expansion_keys(Some(&value), None),
                        Iteration::Count(_) => expansion_keys(None, Some(&value)),
                    }
                    .map_err(|e| failed(format!("key `{key}`: {e}")))?;
                    keys.into_iter()
                        .map(|(k, v)| {
                            let kv = match &k {
                                Key::Name(s) => PropertyValue::String(s.clone()),
                                Key::Index(i) => PropertyValue::Number((*i).into()),
                            };
                            (Some(k), Some(Arc::new((kv, v))))
                        })
                        .collect()
                }
            }
        };
        for (key, each) in expansions {
            let address = base.child(&spec.name, key);
            planned.push((address, each, parent.map(|p| p.reg.urn.clone())));
        }
    }
    let registrations = planned.into_iter().map(|(address, each, parent)| {
        let regs = &regs;
        let failed = &failed;
        async move {
            let env = Env {
                config: &file.config,
                resources: regs,
                preview: ctx.is_preview(),
                each: each.as_deref(),
            };
            let urn_name = if address.is_iterated() {
                address.to_string()
            } else {
                spec.name.clone()
            };
            let shape = Shape {
                urn_name,
                address: address.to_string(),
                parent,
            };
            let reg = match &spec.entry {
                EntryKind::Resource => {
                    let goal = goal(file, spec, &env, resolved, &shape).map_err(failed)?;
                    ctx.register(goal).await
                }
                EntryKind::Read { .. } | EntryKind::Action => {
                    let read = read_goal(spec, &env, resolved, &shape).map_err(failed)?;
                    ctx.read(read).await
                }
            }
            .map_err(|e| failed(e.to_string()))?;
            Ok(Instance { address, each, reg })
        }
    });
    join_all(registrations).await.into_iter().collect()
}

/// Where one expansion goes: its URN name, concrete address and parent.
struct Shape {
    urn_name: String,
    address: String,
    parent: Option<Urn>,
}

/// The URNs of a declaration's expansions (`dependsOn`, `deletedWith`,
/// providers and alias parents name declarations).
fn urns_of(resolved: &Resolved, name: &str) -> Result<Vec<Urn>, String> {
    resolved
        .get(name)
        .map(|i| i.iter().map(|i| i.reg.urn.clone()).collect())
        .ok_or_else(|| format!("`{name}` was not registered"))
}

/// The one URN of a declaration that does not expand.
fn urn_of(resolved: &Resolved, name: &str) -> Result<Urn, String> {
    let mut urns = urns_of(resolved, name)?;
    match urns.len() {
        1 => Ok(urns.remove(0)),
        n => Err(format!(
            "`{name}` has {n} expansions where one resource is needed"
        )),
    }
}

/// Evaluates the properties of an expansion, with the URNs each refers to.
fn inputs(
    spec: &ResourceSpec,
    env: &Env<'_>,
    resolved: &Resolved,
) -> Result<(PropertyMap, std::collections::BTreeMap<String, Vec<Urn>>), String> {
    let mut inputs = PropertyMap::new();
    let mut property_dependencies = std::collections::BTreeMap::new();
    for (k, t) in &spec.properties {
        let v = t
            .eval(env)
            .map_err(|e| format!("key `properties.{k}`: {e}"))?;
        // A reference can put a deep output inside a literal structure.
        v.check_depth(&format!("properties.{k}"))
            .map_err(|e| format!("key `properties.{k}`: {e}"))?;
        inputs.insert(k.clone(), v);
        let refs = t.resources();
        if !refs.is_empty() {
            let mut urns = Vec::new();
            for r in refs {
                urns.extend(urns_of(resolved, r)?);
            }
            property_dependencies.insert(k.clone(), urns);
        }
    }
    Ok((inputs, property_dependencies))
}

/// The reference to a provider resource of the file (`options.provider`).
fn provider_ref(o: &OptionsSpec, resolved: &Resolved) -> Result<Option<String>, String> {
    Ok(match &o.provider {
        None => None,
        Some(ProviderSpec::Reference(r)) => Some(r.to_string()),
        Some(ProviderSpec::Resource(name)) => {
            let reg = resolved
                .get(name)
                .and_then(|i| i.first())
                .map(|i| &i.reg)
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
    })
}

/// An expansion's dependencies: every expansion of what `dependsOn`
/// names, then what its properties refer to.
fn depends_on(
    o: &OptionsSpec,
    resolved: &Resolved,
    property_dependencies: &std::collections::BTreeMap<String, Vec<Urn>>,
) -> Result<Vec<Urn>, String> {
    let mut out: Vec<Urn> = Vec::new();
    for d in &o.depends_on {
        out.extend(urns_of(resolved, d)?);
    }
    for u in property_dependencies.values().flatten() {
        if !out.contains(u) {
            out.push(u.clone());
        }
    }
    Ok(out)
}

/// The request of a read or an action expansion.
fn read_goal(
    spec: &ResourceSpec,
    env: &Env<'_>,
    resolved: &Resolved,
    shape: &Shape,
) -> Result<ReadGoal, String> {
    let (inputs, property_dependencies) = inputs(spec, env, resolved)?;
    let o = &spec.options;
    let depends_on = depends_on(o, resolved, &property_dependencies)?;
    let id = match &spec.entry {
        EntryKind::Read { id: Some(t) } => {
            match t.eval(env).map_err(|e| format!("key `id`: {e}"))? {
                PropertyValue::String(s) if !s.is_empty() => s,
                PropertyValue::Computed => UNKNOWN_ID.to_owned(),
                other => {
                    return Err(format!(
                        "key `id`: the ID to read must be a non-empty string, found {}",
                        super::template::kind_of(&other)
                    ))
                }
            }
        }
        _ => String::new(),
    };
    Ok(ReadGoal {
        ty: spec.ty.clone(),
        name: shape.urn_name.clone(),
        id,
        inputs,
        parent: shape.parent.clone(),
        provider: provider_ref(o, resolved)?,
        depends_on,
        additional_secret_outputs: o.additional_secret_outputs.clone(),
        version: o.version.clone(),
        plugin_download_url: None,
        address: shape.address.clone(),
        action: spec.entry == EntryKind::Action,
    })
}

/// The registration of one expansion, with its references resolved.
fn goal(
    file: &ProgramFile,
    spec: &ResourceSpec,
    env: &Env<'_>,
    resolved: &Resolved,
    shape: &Shape,
) -> Result<Goal, String> {
    let (inputs, property_dependencies) = inputs(spec, env, resolved)?;
    let o = &spec.options;
    let depends_on = depends_on(o, resolved, &property_dependencies)?;
    let provider = provider_ref(o, resolved)?;
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
                    Some(AliasParentSpec::Resource(n)) => {
                        Some(AliasParent::Urn(urn_of(resolved, n)?))
                    }
                },
                stack: stack.clone(),
                project: project.clone(),
            }),
        });
    }
    Ok(Goal {
        ty: spec.ty.clone(),
        name: shape.urn_name.clone(),
        custom: !spec.component,
        inputs,
        options: ResourceOptions {
            parent: shape.parent.clone(),
            depends_on,
            property_dependencies,
            provider,
            version: o.version.clone(),
            protect: o.protect,
            retain_on_delete: o.retain_on_delete,
            deleted_with: o
                .deleted_with
                .as_deref()
                .map(|d| urn_of(resolved, d))
                .transpose()?,
            delete_before_replace: o.delete_before_replace,
            aliases,
            custom_timeouts: o.custom_timeouts.clone(),
            ignore_changes: o.ignore_changes.clone(),
            replace_on_changes: o.replace_on_changes.clone(),
            additional_secret_outputs: o.additional_secret_outputs.clone(),
            state_migrations: state_migrations(file, o),
            import: o.import.clone(),
            address: shape.address.clone(),
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
