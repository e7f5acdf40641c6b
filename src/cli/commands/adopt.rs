//! `keel import TYPE NAME ID` and `keel import --file F`: adopts existing
//! cloud objects into a stack through the real engine. A one-off program
//! registers each resource with `import: ID` (an import step: the
//! provider's read, never a create); the operation targets exactly those
//! URNs, so every other resource of the stack keeps its state and the
//! stack's outputs are left alone. The file is Pulumi's import file:
//! `{"resources": [{"type", "name", "id", "parent"?, "provider"?,
//! "version"?, "logicalName"?, "component"?}], "nameTable": {name: URN}}`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Deserialize;

use super::super::args::{OutputArgs, SimArgs, StackArg};
use super::super::confirm::confirm;
use super::*;
use crate::model::{PropertyMap, TypeToken};
use crate::source::goal::{Goal, ResourceOptions};

/// `keel import`.
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// The resource's type (`aws:s3/bucket:Bucket`).
    #[arg(
        value_name = "TYPE",
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    pub ty: Option<String>,
    /// Its name in the stack.
    #[arg(requires = "ty")]
    pub name: Option<String>,
    /// The ID of the cloud object to adopt.
    #[arg(requires = "name")]
    pub id: Option<String>,
    /// Pulumi's import file (bulk import).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The parent: `URN` or `name=URN`.
    #[arg(long, value_name = "URN", conflicts_with = "file")]
    pub parent: Option<String>,
    /// The provider resource to read through: `URN` or `name=URN`
    /// (default: the package's default provider).
    #[arg(long, value_name = "URN", conflicts_with = "file")]
    pub provider: Option<String>,
    /// Mark the imported resources protected (as Pulumi does by default).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub protect: bool,
    /// The stack.
    #[command(flatten)]
    pub stack: StackArg,
    /// Proceed without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
    /// The simulated cloud.
    #[command(flatten)]
    pub sim: SimArgs,
}

/// One resource of an import file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Spec {
    #[serde(rename = "type", default)]
    ty: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    parent: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    plugin_download_url: String,
    #[serde(default)]
    properties: Vec<String>,
    #[serde(default)]
    component: bool,
    #[serde(default)]
    remote: bool,
    #[serde(default)]
    logical_name: String,
}

/// Pulumi's import file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ImportFile {
    #[serde(default)]
    name_table: BTreeMap<String, String>,
    #[serde(default)]
    resources: Vec<Spec>,
    #[serde(default)]
    provider_inputs: BTreeMap<String, serde_json::Value>,
}

/// A `name=URN` or bare `URN` flag value: (name, URN).
fn named_urn(
    flag: &'static str,
    v: &str,
    default_name: &str,
) -> Result<(String, String), CliError> {
    let (name, urn) = match v.split_once('=') {
        Some((n, u)) if !v.starts_with("urn:") => (n.to_owned(), u.to_owned()),
        _ => (default_name.to_owned(), v.to_owned()),
    };
    Urn::parse(&urn).map_err(|e| CliError::BadFlag {
        flag,
        message: format!("`{urn}` is not a URN: {e}"),
    })?;
    Ok((name, urn))
}

/// The import file the arguments describe (one resource, or `--file`).
fn import_file(a: &ImportArgs) -> Result<(ImportFile, PathBuf), CliError> {
    if let Some(path) = &a.file {
        let bytes = std::fs::read(path).map_err(|source| CliError::ReadInput {
            path: path.clone(),
            source,
        })?;
        let f: ImportFile = serde_json::from_slice(&bytes).map_err(|e| CliError::ImportFile {
            path: path.clone(),
            message: e.to_string(),
        })?;
        return Ok((f, path.clone()));
    }
    let mut f = ImportFile::default();
    let mut spec = Spec {
        ty: a.ty.clone().unwrap_or_default(),
        name: a.name.clone().unwrap_or_default(),
        id: a.id.clone().unwrap_or_default(),
        ..Spec::default()
    };
    if let Some(p) = &a.parent {
        let (n, u) = named_urn("--parent", p, "parent")?;
        f.name_table.insert(n.clone(), u);
        spec.parent = n;
    }
    if let Some(p) = &a.provider {
        let (n, u) = named_urn("--provider", p, "provider")?;
        if f.name_table.contains_key(&n) {
            return Err(CliError::BadFlag {
                flag: "--provider",
                message: format!("the provider and the parent are both named `{n}`"),
            });
        }
        f.name_table.insert(n.clone(), u);
        spec.provider = n;
    }
    f.resources.push(spec);
    Ok((f, PathBuf::from("(command line)")))
}

/// One resource to import, resolved.
#[derive(Debug, Clone)]
struct Planned {
    urn: Urn,
    goal: Goal,
}

/// Checks the file and resolves names, URNs and providers against the
/// stack's state `prior`.
fn plan(
    f: &ImportFile,
    path: &Path,
    stack: &str,
    project: &str,
    prior: &Deployment,
    protect: bool,
) -> Result<Vec<Planned>, CliError> {
    let bad = |message: String| CliError::ImportFile {
        path: path.to_owned(),
        message,
    };
    if f.resources.is_empty() {
        return Err(bad("it names no resources".into()));
    }
    if !f.provider_inputs.is_empty() {
        return Err(CliError::Unsupported(
            "`providerInputs` in an import file".into(),
        ));
    }
    let mut by_name: BTreeMap<String, Urn> = BTreeMap::new();
    for (n, u) in &f.name_table {
        let urn = Urn::parse(u).map_err(|e| bad(format!("nameTable `{n}`: {e}")))?;
        by_name.insert(n.clone(), urn);
    }
    let mut out: Vec<Planned> = Vec::new();
    let mut seen_urns: BTreeSet<Urn> = BTreeSet::new();
    for (i, s) in f.resources.iter().enumerate() {
        let name = if s.name.is_empty() {
            &s.logical_name
        } else {
            &s.name
        };
        let logical = if s.logical_name.is_empty() {
            &s.name
        } else {
            &s.logical_name
        };
        let what = format!("resource {i} (`{name}`)");
        if s.ty.is_empty() || name.is_empty() {
            return Err(bad(format!("{what} has no type or no name")));
        }
        if s.remote || !s.properties.is_empty() || !s.plugin_download_url.is_empty() {
            return Err(CliError::Unsupported(format!(
                "{what}: `remote`, `properties` and `pluginDownloadUrl` in an import file"
            )));
        }
        if s.component != s.id.is_empty() {
            return Err(bad(if s.component {
                format!("{what} is a component and has an ID")
            } else {
                format!("{what} has no ID")
            }));
        }
        let ty = TypeToken::parse(&s.ty).map_err(|e| bad(format!("{what}: {e}")))?;
        if ty.is_provider() || ty.is_stack() {
            return Err(bad(format!(
                "{what}: providers and stacks are not imported"
            )));
        }
        let lookup = |key: &str, n: &str| {
            by_name
                .get(n)
                .cloned()
                .ok_or_else(|| bad(format!("{what}: its {key} `{n}` has no entry in `nameTable` and is no earlier resource of the file")))
        };
        let parent = (!s.parent.is_empty())
            .then(|| lookup("parent", &s.parent))
            .transpose()?;
        if let Some(p) = &parent {
            let known = prior.find(p).is_some() || seen_urns.contains(p);
            if !known {
                return Err(CliError::NoSuchResource {
                    flag: "--parent",
                    urn: p.to_string(),
                    stack: stack.to_owned(),
                });
            }
        }
        let provider = if s.provider.is_empty() {
            None
        } else {
            let p = lookup("provider", &s.provider)?;
            let state = prior
                .find(&p)
                .filter(|r| r.ty.is_provider())
                .ok_or_else(|| CliError::NoSuchResource {
                    flag: "--provider",
                    urn: p.to_string(),
                    stack: stack.to_owned(),
                })?;
            // A default provider is the engine's to register: the
            // resource asks for it as the program's would.
            (!is_default_provider(&state.urn)).then(|| format!("{}::{}", state.urn, state.id))
        };
        let urn = Urn::derive(stack, project, parent.as_ref(), &ty, logical)
            .map_err(|e| bad(format!("{what}: {e}")))?;
        if let Some(r) = prior.find(&urn) {
            return Err(CliError::AlreadyManaged {
                stack: stack.to_owned(),
                urn: r.urn.to_string(),
                id: r.id.clone(),
            });
        }
        if let Some(r) = prior
            .resources
            .iter()
            .find(|r| !r.delete && r.custom && !s.id.is_empty() && r.id == s.id && r.ty == ty)
        {
            return Err(CliError::AlreadyManaged {
                stack: stack.to_owned(),
                urn: r.urn.to_string(),
                id: r.id.clone(),
            });
        }
        if !seen_urns.insert(urn.clone()) {
            return Err(bad(format!(
                "{what}: its URN {urn} is another resource's of the file; give it another name"
            )));
        }
        by_name.entry(name.clone()).or_insert_with(|| urn.clone());
        let goal = Goal {
            ty,
            name: logical.clone(),
            custom: !s.component,
            inputs: PropertyMap::new(),
            options: ResourceOptions {
                parent,
                provider,
                version: (!s.version.is_empty()).then(|| s.version.clone()),
                protect: protect && !s.component,
                import: (!s.component).then(|| s.id.clone()),
                ..ResourceOptions::default()
            },
        };
        out.push(Planned { urn, goal });
    }
    Ok(out)
}

/// Whether `urn` is a default provider (`pulumi:providers:<pkg>::default*`),
/// which the engine registers itself.
fn is_default_provider(urn: &Urn) -> bool {
    urn.type_str().starts_with("pulumi:providers:") && urn.name().starts_with("default")
}

/// The registrations of the prior resources the imports need registered
/// before them: their parents' chains and explicit providers (and those
/// resources' own), in state order. They are outside the operation's
/// targets, so their states are kept as they are.
fn prior_goals(prior: &Deployment, planned: &[Planned]) -> Vec<Goal> {
    let planned_urns: BTreeSet<&Urn> = planned.iter().map(|p| &p.urn).collect();
    let provider_urn = |r: &str| {
        crate::model::ProviderRef::parse(r)
            .ok()
            .map(|p| p.urn().clone())
            .filter(|u| !is_default_provider(u))
    };
    let mut todo: Vec<Urn> = Vec::new();
    for p in planned {
        todo.extend(p.goal.options.parent.clone());
        todo.extend(p.goal.options.provider.as_deref().and_then(provider_urn));
    }
    let mut needed: BTreeSet<Urn> = BTreeSet::new();
    while let Some(u) = todo.pop() {
        if planned_urns.contains(&u) || !needed.insert(u.clone()) {
            continue;
        }
        if let Some(r) = prior.find(&u) {
            if !r.parent.is_empty() {
                todo.push(r.parent.clone());
            }
            todo.extend(provider_urn(&r.provider));
        }
    }
    prior
        .resources
        .iter()
        .filter(|r| !r.delete && !r.ty.is_stack() && needed.contains(&r.urn))
        .map(|r| Goal {
            ty: r.ty.clone(),
            name: r.urn.name().to_owned(),
            custom: r.custom,
            inputs: r.inputs.clone(),
            options: ResourceOptions {
                parent: (!r.parent.is_empty()).then(|| r.parent.clone()),
                provider: (!r.provider.is_empty() && provider_urn(&r.provider).is_some())
                    .then(|| r.provider.to_string()),
                protect: r.protect,
                ..ResourceOptions::default()
            },
        })
        .collect()
}

/// `keel import`.
///
/// # Errors
/// [`CliError::ImportFile`] and [`CliError::BadFlag`] for bad input,
/// [`CliError::AlreadyManaged`] for an object or URN the stack has (exit
/// 2, nothing changed); [`CliError::Failed`] naming the resource and ID
/// when the provider cannot read it (exit 1, the stack's resources
/// unchanged); [`CliError::Backend`] for a locked stack.
pub fn import_resources(backend: &Path, a: ImportArgs) -> Result<(), CliError> {
    let stack = a.stack.name().to_owned();
    super::super::history::recorded(backend, &stack, "import", None, |rec| {
        import_recorded(backend, a, rec)
    })
}

/// [`import_resources`], recorded in the stack's history once it ran, and
/// stoppable by `keel cancel` from when it holds the lock.
fn import_recorded(
    backend: &Path,
    a: ImportArgs,
    rec: &super::super::history::Recorder,
) -> Result<(), CliError> {
    let (file, path) = import_file(&a)?;
    // An import adopts into a stack that exists (its project names URNs).
    existing(backend, a.stack.name())?;
    let stack = a.stack.name().to_owned();
    let rt = runtime()?;
    rt.block_on(async move {
        let cloud = load_cloud(backend, sim_config(&a.sim, None), true)?;
        let mut open = with_passphrase(backend, &stack)?
            .open(&stack, "keel import")
            .map_err(secrets_first)?;
        rec.opened();
        let Some(project) = stack_project(&open.deployment).map(str::to_owned) else {
            return Err(CliError::BadFlag {
                flag: "--stack",
                message: format!("stack `{stack}` has no resources, so no project to name the imported resources' URNs: run its program (`keel up`) first"),
            });
        };
        let planned = plan(&file, &path, &stack, &project, &open.deployment, a.protect)?;
        let list: Vec<String> = planned
            .iter()
            .map(|p| format!("{} (id `{}`)", p.urn, p.goal.options.import.as_deref().unwrap_or("")))
            .collect();
        confirm(
            "keel import",
            &format!("Import {} into stack `{stack}`?", list.join(", ")),
            a.yes,
        )?;
        let choice = serving::choose(
            &stack,
            explicit_serving(a.sim.providers, None)?,
            &open.deployment.recorded_serving(),
            false,
        )?;
        cloud.set_secrets(open.crypter.clone());
        let mut display = Display::new(
            Style::choose(a.output.json),
            "import",
            planned.len(),
        )
        .show_debug(a.output.show_debug());
        for w in open.warnings.iter().chain(&choice.warnings) {
            display.diagnostic("warning", w);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let mut config = engine_config(&stack, &project, None, false);
        config.events = EventSink::new(tx);
        config.update = UpdateOptions {
            targets: planned.iter().map(|p| p.urn.clone()).collect(),
            ..UpdateOptions::default()
        };
        let dir = Path::new("Pulumi.yaml")
            .is_file()
            .then(|| PathBuf::from("."));
        let served = ServedBy::new(&config.events);
        let (_plugin_engine, registry) =
            stack_providers(backend, cloud, dir, &choice, &served, &open.deployment).await?;
        let persister = open.persister(PersistenceKind::Journal, JournalOptions::default())?;
        config.cancel = rec.cancel();
        let cancel = config.cancel.clone();
        let engine = Engine::new(config, registry);
        let mut goals = prior_goals(&open.deployment, &planned);
        goals.extend(planned.iter().map(|p| p.goal.clone()));
        // Registered one after another: a parent before its children.
        // Prior resources registered outside the targets keep their state.
        let program = move |ctx: crate::actors::Context| {
            let goals = goals.clone();
            async move {
                for g in goals {
                    ctx.register(g)
                        .await
                        .map_err(|e| Box::new(e) as crate::source::ProgramError)?;
                }
                Ok(())
            }
        };
        let prior = std::mem::take(&mut open.deployment);
        let result = drive(engine.update(prior, program, persister), rx, &mut display, &cancel).await;
        rec.outcome(&result);
        drop(open);
        match result {
            Ok(outcome) => {
                display.finish(Some(&outcome.summary));
                Ok(())
            }
            Err(EngineError::Failed(outcome)) => {
                display.finish(Some(&outcome.summary));
                Err(CliError::Failed {
                    operation: "import",
                    summary: Box::new(outcome.summary),
                })
            }
            Err(e) => {
                display.finish(None);
                Err(CliError::Engine(Box::new(e)))
            }
        }
    })
}
