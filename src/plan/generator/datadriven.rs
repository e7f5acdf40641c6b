//! Data-driven planner tests in the raft-rs `datadriven` style: each file
//! under `src/plan/testdata/` is a script of commands, each followed by the
//! output it must produce. The script drives the real [`Planner`] through
//! its public API with no I/O (no tokio, no actors): a fake provider,
//! written here, answers the checks and diffs the StepGenerator actor would
//! ask a real one for.
//!
//! A case is a command line, optional input lines, a `----` line, then the
//! expected output up to the next blank line (an empty output is `----`
//! followed by a blank line). Lines starting with `#` between cases are
//! comments. `KEEL_REWRITE=1 cargo test --lib plan::generator::datadriven`
//! rewrites the expected blocks with what the planner produces now (review
//! the diff before committing it).
//!
//! Commands (arguments are words; `k=v`, list values comma-separated; a
//! `ref` is the name of a resource of this script, or a URN without its
//! `urn:pulumi:dev::proj::` prefix; the stack is `dev`, the project `proj`):
//!
//! - `provider [force-new=k,..] [dbr]`: how the fake provider answers. A
//!   resource's diff changes the top-level input keys whose values differ;
//!   a changed `force-new` key makes it a replace, `dbr` a
//!   delete-before-replace one. A provider configuration diff replaces
//!   when a key other than `version` changed.
//! - `options [preview] [target=ref,..] [target-dependents] [exclude=ref,..]
//!   [exclude-dependents] [replace=ref,..] [config=<pkg>:<key>=<value>]`:
//!   the operation's options (before the first registration).
//! - `prior`: one prior state per input line, in checkpoint order:
//!   `<type> <name> [id=..] [parent=ref] [deps=ref,..] [pdep:<key>=ref,..]
//!   [provider=ref] [deleted-with=ref] [replace-with=ref,..]
//!   [trigger=<value>] [component] [protect] [retain]
//!   [delete] [pending-replacement] [taint] [external] [<key>=<value> ..]`.
//!   A custom resource's ID defaults to `<name>-id`, its provider to its
//!   package's prior `default` provider. The stack state is added first.
//! - `register <type> <name> [<key>=<value> ..] [parent=ref] [deps=ref,..]
//!   [pdep:<key>=ref,..] [provider=ref] [deleted-with=ref]
//!   [replace-with=ref,..] [trigger=<value>] [component]
//!   [protect] [retain] [delete-before-replace] [version=..] [import=<id>]
//!   [alias=<name>] [alias-parent=ref|none] [alias-urn=ref]
//!   [ignore-changes=p,..] [replace-on-changes=p,..]`: a registration,
//!   prepared, checked and diffed by the fake provider, its dependents
//!   walked, then decided, as the actor does. Prints the chains: the
//!   default provider's when it is planned now, then the resource's.
//! - `read <type> <name> id=<id> [<key>=<value> ..] [parent=ref]
//!   [deps=ref,..] [provider=ref]`: a `ReadResource`.
//! - `deletes`: the end-of-program deletes, `<antichain>: <step>`.
//! - `refreshes`: the refresh steps.
//!
//! A step prints as `<kind> <urn>` and then: `id=` for providers, imports
//! and reads, `provider=` for other custom resources, the provider's
//! verdict (`changed=`, `replace-keys=`) it carries, and the flags
//! `skip-provider`, `keep-pending`, `skipped`. A chain that waits for
//! something other than the stack ends with `  (waits for ..)`. A refusal
//! prints `error: <message>`. Decided chains are taken as run only as far
//! as the planner can see it: a delete that keeps its state marks it
//! pending replacement (as the persister does). Values are JSON when they parse as JSON,
//! else strings; IDs of new providers come from [`SharedIds::counting`].

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::model::step::{lock, share, StepKind};
use crate::model::urn::STACK_TYPE;
use crate::model::{PropertyMap, PropertyValue, SharedIds, State, TypeToken, Urn};
use crate::plan::dependents::{DependentReplacements, DependentWalk};
use crate::plan::providers::config_of;
use crate::plan::step::{Chain, Step};
use crate::provider::{DiffKind, DiffResponse};
use crate::source::goal::{Alias, AliasParent, AliasSpec, Goal, ReadGoal};

use super::{PlanOptions, Planner, Prepared, ProviderChange};

const URN_PREFIX: &str = "urn:pulumi:dev::proj::";
const STACK_NAME: &str = "proj-dev";

/// One command of a script, with where its expected block is.
#[derive(Debug)]
struct Case {
    /// The command line's number (1-based), for messages.
    line: usize,
    command: String,
    input: Vec<String>,
    expected: Vec<String>,
    /// Index of the first expected line in the file's lines.
    expected_at: usize,
}

fn parse(text: &str) -> Vec<Case> {
    let lines: Vec<&str> = text.lines().collect();
    let mut cases = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        if line.is_empty() || line.starts_with('#') {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        let mut input = Vec::new();
        while i < lines.len() && lines[i].trim_end() != "----" {
            input.push(lines[i].trim_end().to_owned());
            i += 1;
        }
        assert!(
            i < lines.len(),
            "line {}: `{line}` has no `----` line",
            start + 1
        );
        i += 1;
        let expected_at = i;
        let mut expected = Vec::new();
        while i < lines.len() && !lines[i].trim().is_empty() {
            expected.push(lines[i].trim_end().to_owned());
            i += 1;
        }
        cases.push(Case {
            line: start + 1,
            command: line.to_owned(),
            input,
            expected,
            expected_at,
        });
    }
    cases
}

/// The file with each case's expected block replaced by `actual`.
fn rewritten(text: &str, cases: &[Case], actual: &[Vec<String>]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (case, out) in cases.iter().zip(actual).rev() {
        lines.splice(
            case.expected_at..case.expected_at + case.expected.len(),
            out.iter().cloned(),
        );
    }
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// Runs one script; returns its mismatches (none when rewriting, which
/// writes the file instead).
fn check(path: &Path, rewrite: bool) -> Vec<String> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let cases = parse(&text);
    assert!(!cases.is_empty(), "{}: no cases", path.display());
    let mut harness = Harness::default();
    let mut actual = Vec::with_capacity(cases.len());
    let mut mismatches = Vec::new();
    for case in &cases {
        let out = harness.run(case).unwrap_or_else(|e| {
            panic!(
                "{}:{}: `{}`: bad script: {e}",
                path.display(),
                case.line,
                case.command
            )
        });
        assert!(
            out.iter().all(|l| !l.trim().is_empty()),
            "an output line is blank"
        );
        if out != case.expected {
            mismatches.push(format!(
                "{}:{}: `{}`\n--- expected\n{}\n--- actual\n{}",
                path.display(),
                case.line,
                case.command,
                case.expected.join("\n"),
                out.join("\n")
            ));
        }
        actual.push(out);
    }
    if rewrite {
        let new = rewritten(&text, &cases, &actual);
        if new != text {
            std::fs::write(path, new)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        }
        return Vec::new();
    }
    mismatches
}

/// How the fake provider answers.
#[derive(Debug, Clone, Default)]
struct FakeProvider {
    force_new: BTreeSet<String>,
    dbr: bool,
}

impl FakeProvider {
    /// A resource's diff: the top-level keys whose values differ.
    fn diff(&self, old: &PropertyMap, new: &PropertyMap) -> DiffResponse {
        let changed = changed_keys(old, new);
        let replace: BTreeSet<String> = changed.intersection(&self.force_new).cloned().collect();
        Self::response(changed, replace, self.dbr)
    }

    /// Replace when a replace key changed, else update when any key did.
    fn response(
        changed: BTreeSet<String>,
        replace: BTreeSet<String>,
        delete_before_replace: bool,
    ) -> DiffResponse {
        let kind = if !replace.is_empty() {
            DiffKind::Replace
        } else if changed.is_empty() {
            DiffKind::Same
        } else {
            DiffKind::Update
        };
        DiffResponse {
            kind,
            changed_keys: changed,
            replace_keys: replace,
            delete_before_replace,
            detailed: Vec::new(),
        }
    }

    /// A provider configuration diff: replace unless only `version`
    /// changed (as the simulated cloud answers).
    fn config(old: &PropertyMap, new: &PropertyMap) -> DiffResponse {
        let changed = changed_keys(old, new);
        let replace: BTreeSet<String> = changed
            .iter()
            .filter(|k| k.as_str() != "version")
            .cloned()
            .collect();
        Self::response(changed, replace, false)
    }

    /// What the actor's `check_and_diff` would get for `p`.
    fn check_and_diff(&self, p: &Prepared) -> Option<DiffResponse> {
        if p.new.ty.is_provider() {
            return p
                .config_diff
                .as_ref()
                .map(|c| Self::config(&c.old_inputs, &c.new_inputs));
        }
        p.provider.as_ref()?;
        let old = lock(p.old.as_ref()?).clone();
        if let ProviderChange::Config(c) = &p.provider_change {
            if Self::config(&c.old_inputs, &c.new_inputs).kind == DiffKind::Replace {
                return Some(DiffResponse {
                    kind: DiffKind::Replace,
                    changed_keys: BTreeSet::new(),
                    replace_keys: ["provider".to_owned()].into(),
                    delete_before_replace: false,
                    detailed: Vec::new(),
                });
            }
        }
        Some(self.diff(&old.inputs, &p.new.inputs))
    }

    /// Drives a dependents walk as the actor's `drive_walk` does.
    fn drive(&self, mut walk: DependentWalk) -> DependentReplacements {
        while let Some(request) = walk.next_request() {
            let request = request.clone();
            let diff = if request.old.ty.is_provider() {
                Self::config(&config_of(&request.old.inputs), &config_of(&request.inputs))
            } else {
                self.diff(&request.old.inputs, &request.inputs)
            };
            walk.answer(&diff);
        }
        walk.finish()
    }
}

fn changed_keys(old: &PropertyMap, new: &PropertyMap) -> BTreeSet<String> {
    old.keys()
        .chain(new.keys())
        .filter(|k| old.get(*k) != new.get(*k))
        .cloned()
        .collect()
}

/// A script's state: the options and prior states until the planner is
/// built (at the first command that needs it), then the planner.
#[derive(Debug, Default)]
struct Harness {
    opts: PlanOptions,
    prior: Vec<State>,
    planner: Option<Planner>,
    fake: FakeProvider,
    /// Resource names -> URNs (the last one of a name wins).
    names: HashMap<String, Urn>,
    /// Provider URNs -> their IDs (prior, then as decided).
    provider_ids: HashMap<Urn, String>,
}

type Args<'a> = Vec<(&'a str, Option<&'a str>)>;

/// The first `n` words of a line, then its arguments (`k=v` or a flag).
fn words(line: &str, n: usize) -> (Vec<&str>, Args<'_>) {
    let mut all = line.split_whitespace();
    let positional = all.by_ref().take(n).collect();
    let args = all
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (w, None),
        })
        .collect();
    (positional, args)
}

fn value(v: &str) -> PropertyValue {
    serde_json::from_str(v).unwrap_or_else(|_| PropertyValue::from(v))
}

fn list(v: Option<&str>) -> Vec<&str> {
    v.unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .collect()
}

/// A URN without the script's constant prefix.
fn short(urn: &str) -> &str {
    urn.strip_prefix(URN_PREFIX).unwrap_or(urn)
}

fn stack_urn() -> Urn {
    Urn::parse(&format!("{URN_PREFIX}{STACK_TYPE}::{STACK_NAME}")).expect("the stack URN")
}

impl Harness {
    fn run(&mut self, case: &Case) -> Result<Vec<String>, String> {
        let command = case.command.split_whitespace().next().unwrap_or_default();
        let positional = if matches!(command, "register" | "read") {
            3
        } else {
            1
        };
        let (pos, args) = words(&case.command, positional);
        let rest = &pos[1..];
        match command {
            "provider" => self.provider(&args).map(|()| Vec::new()),
            "options" => self.options(&args).map(|()| Vec::new()),
            "prior" => {
                if self.planner.is_some() {
                    return Err("`prior` after the planner started".into());
                }
                for line in &case.input {
                    let state = self.prior_state(line)?;
                    self.prior.push(state);
                }
                Ok(Vec::new())
            }
            "register" => self.register(rest, &args),
            "read" => self.read(rest, &args),
            "deletes" => Ok(self.deletes()),
            "refreshes" => Ok(self.planner().refreshes().iter().map(step_line).collect()),
            other => Err(format!("unknown command `{other}`")),
        }
    }

    fn provider(&mut self, args: &Args<'_>) -> Result<(), String> {
        for (k, v) in args {
            match (*k, v) {
                ("force-new", v) => {
                    self.fake.force_new = list(*v).into_iter().map(str::to_owned).collect();
                }
                ("dbr", None) => self.fake.dbr = true,
                _ => return Err(format!("unknown argument `{k}`")),
            }
        }
        Ok(())
    }

    fn options(&mut self, args: &Args<'_>) -> Result<(), String> {
        if self.planner.is_some() {
            return Err("`options` after the planner started".into());
        }
        for &(k, v) in args {
            match (k, v) {
                ("preview", None) => self.opts.preview = true,
                ("target-dependents", None) => self.opts.update.target_dependents = true,
                ("exclude-dependents", None) => self.opts.update.exclude_dependents = true,
                ("target", v) => self.opts.update.targets = self.refs(v)?,
                ("exclude", v) => self.opts.update.excludes = self.refs(v)?,
                ("replace", v) => self.opts.update.replaces = self.refs(v)?,
                ("config", Some(v)) => {
                    let (key, val) = v.split_once('=').ok_or("config=<pkg>:<key>=<value>")?;
                    self.opts.package_config.insert(key.to_owned(), value(val));
                }
                _ => return Err(format!("unknown argument `{k}`")),
            }
        }
        Ok(())
    }

    fn resolve(&self, r: &str) -> Result<Urn, String> {
        if r.contains("::") {
            return Urn::parse(&format!("{URN_PREFIX}{r}")).map_err(|e| e.to_string());
        }
        self.names
            .get(r)
            .cloned()
            .ok_or_else(|| format!("no resource named `{r}` yet"))
    }

    fn refs(&self, v: Option<&str>) -> Result<Vec<Urn>, String> {
        list(v).into_iter().map(|r| self.resolve(r)).collect()
    }

    fn provider_ref(&self, r: &str) -> Result<String, String> {
        let urn = self.resolve(r)?;
        let id = self
            .provider_ids
            .get(&urn)
            .ok_or_else(|| format!("`{r}` is not a provider of this script"))?;
        Ok(format!("{urn}::{id}"))
    }

    fn prior_state(&mut self, line: &str) -> Result<State, String> {
        let (pos, args) = words(line, 2);
        let [ty, name] = pos[..] else {
            return Err(format!("`{line}`: want `<type> <name> ..`"));
        };
        let ty = TypeToken::parse(ty).map_err(|e| e.to_string())?;
        let component = args.contains(&("component", None));
        let custom = !component && !ty.is_stack();
        let parent = match args.iter().find(|(k, _)| *k == "parent") {
            Some((_, v)) => Some(self.resolve(v.unwrap_or_default())?),
            None if ty.is_provider() || ty.is_stack() => None,
            None => Some(stack_urn()),
        };
        let urn =
            Urn::derive("dev", "proj", parent.as_ref(), &ty, name).map_err(|e| e.to_string())?;
        let mut s = State::new(urn.clone(), ty.clone(), custom);
        s.parent = parent.unwrap_or_default();
        if custom {
            s.id = format!("{name}-id");
        }
        let mut provider = None;
        for (k, v) in &args {
            match (*k, *v) {
                ("component", None) => {}
                ("parent", _) => {}
                ("id", Some(v)) => s.id = v.to_owned(),
                ("deps", v) => s.dependencies = self.refs(v)?,
                ("provider", Some(v)) => provider = Some(self.provider_ref(v)?),
                ("deleted-with", Some(v)) => {
                    let d = self.resolve(v)?;
                    s.rare.edit(|r| r.deleted_with = d.into());
                }
                ("replace-with", v) => {
                    let list = self.refs(v)?;
                    s.rare.edit(|r| r.replace_with = list.into());
                }
                ("trigger", Some(v)) => s.rare.edit(|r| r.replacement_trigger = value(v).into()),
                ("protect", None) => s.protect = true,
                ("retain", None) => s.retain_on_delete = true,
                ("delete", None) => s.delete = true,
                ("pending-replacement", None) => s.pending_replacement = true,
                ("taint", None) => s.taint = true,
                ("external", None) => s.external = true,
                (k, v) if k.starts_with("pdep:") => {
                    let refs = self.refs(v)?;
                    for d in &refs {
                        if !s.dependencies.contains(d) {
                            s.dependencies.push(d.clone());
                        }
                    }
                    s.property_dependencies
                        .insert(k["pdep:".len()..].to_owned(), Some(refs));
                }
                (k, Some(v)) => {
                    s.inputs.insert(k.to_owned(), value(v));
                }
                (k, None) => return Err(format!("unknown flag `{k}`")),
            }
        }
        if custom && !ty.is_provider() {
            let default = format!("pulumi:providers:{}::default", ty.package());
            s.provider = match provider {
                Some(p) => p,
                None => self.provider_ref(&default).unwrap_or_default(),
            }
            .into();
        }
        s.outputs = s.inputs.clone();
        if ty.is_provider() {
            self.provider_ids.insert(urn.clone(), s.id.clone());
        }
        self.names.insert(name.to_owned(), urn);
        Ok(s)
    }

    /// The planner, built at first use over the prior states (the stack's
    /// first) with the stack resource registered, as the engine does.
    fn planner(&mut self) -> &mut Planner {
        self.planner.get_or_insert_with(|| {
            let mut olds = std::mem::take(&mut self.prior);
            if !olds.iter().any(|s| s.ty.is_stack()) {
                let ty = TypeToken::parse(STACK_TYPE).expect("the stack type");
                olds.insert(0, State::new(stack_urn(), ty, false));
            }
            let opts = PlanOptions {
                stack: "dev".into(),
                project: "proj".into(),
                ids: SharedIds::counting(),
                ..self.opts.clone()
            };
            let mut planner = Planner::new(opts, olds.into_iter().map(share).collect());
            let stack = Goal::component(
                TypeToken::parse(STACK_TYPE).expect("the stack type"),
                STACK_NAME,
            );
            let prepared = planner.prepare(&stack).expect("the stack registers");
            planner
                .decide(prepared, None, None)
                .expect("the stack registers");
            planner
        })
    }

    fn goal(&self, pos: &[&str], args: &Args<'_>) -> Result<(Goal, Option<bool>), String> {
        let [ty, name] = pos[..] else {
            return Err("want `<type> <name> ..`".into());
        };
        let ty = TypeToken::parse(ty).map_err(|e| e.to_string())?;
        let component = args.contains(&("component", None));
        let mut goal = if component || ty.is_stack() {
            Goal::component(ty, name)
        } else {
            Goal::custom(ty, name, PropertyMap::new())
        };
        let mut dbr = None;
        let o = &mut goal.options;
        for (k, v) in args {
            match (*k, *v) {
                ("component", None) => {}
                ("parent", Some(v)) => o.parent = Some(self.resolve(v)?),
                ("deps", v) => o.depends_on = self.refs(v)?,
                ("provider", Some(v)) => o.provider = Some(self.provider_ref(v)?),
                ("deleted-with", Some(v)) => o.deleted_with = Some(self.resolve(v)?),
                ("replace-with", v) => o.replace_with = self.refs(v)?,
                ("trigger", Some(v)) => o.replacement_trigger = value(v),
                ("protect", None) => o.protect = true,
                ("retain", None) => o.retain_on_delete = true,
                ("delete-before-replace", None) => dbr = Some(true),
                ("version", Some(v)) => o.version = Some(v.to_owned()),
                ("import", Some(v)) => o.import = Some(v.to_owned()),
                ("alias", Some(v)) => o.aliases.push(Alias::Spec(AliasSpec {
                    name: Some(v.to_owned()),
                    ..AliasSpec::default()
                })),
                ("alias-parent", Some(v)) => {
                    let parent = if v == "none" {
                        AliasParent::NoParent
                    } else {
                        AliasParent::Urn(self.resolve(v)?)
                    };
                    o.aliases.push(Alias::Spec(AliasSpec {
                        parent: Some(parent),
                        ..AliasSpec::default()
                    }));
                }
                ("alias-urn", Some(v)) => o.aliases.push(Alias::Urn(self.resolve(v)?)),
                ("ignore-changes", v) => {
                    o.ignore_changes = list(v).into_iter().map(str::to_owned).collect();
                }
                ("replace-on-changes", v) => {
                    o.replace_on_changes = list(v).into_iter().map(str::to_owned).collect();
                }
                (k, v) if k.starts_with("pdep:") => {
                    o.property_dependencies
                        .insert(k["pdep:".len()..].to_owned(), self.refs(v)?);
                }
                (k, Some(v)) => {
                    goal.inputs.insert(k.to_owned(), value(v));
                }
                (k, None) => return Err(format!("unknown flag `{k}`")),
            }
        }
        Ok((goal, dbr))
    }

    fn register(&mut self, pos: &[&str], args: &Args<'_>) -> Result<Vec<String>, String> {
        let (goal, dbr) = self.goal(pos, args)?;
        let fake = self.fake.clone();
        let mut out = Vec::new();
        let mut p = match self.planner().prepare(&goal) {
            Ok(p) => p,
            Err(e) => return Ok(vec![format!("error: {e}")]),
        };
        self.names.insert(goal.name.clone(), p.urn.clone());
        for path in std::mem::take(&mut p.ignore_warnings) {
            out.push(format!("warning: ignoreChanges `{path}` cannot be kept"));
        }
        if let Some(provider) = p.default_provider.take() {
            self.default_provider(provider, &mut out);
        }
        let diff = fake.check_and_diff(&p);
        let planner = self.planner();
        let dependents = planner
            .dependents_walk(&p, diff.as_ref(), dbr)
            .map(|walk| fake.drive(walk));
        let decided = planner.decide_with(p, diff.as_ref(), dbr, dependents);
        self.chain(decided, &mut out);
        Ok(out)
    }

    /// Decides a default provider planned now, as the actor does first.
    fn default_provider(&mut self, provider: Box<Prepared>, out: &mut Vec<String>) {
        self.names
            .insert(provider.urn.name().to_owned(), provider.urn.clone());
        let diff = provider
            .config_diff
            .as_ref()
            .map(|c| FakeProvider::config(&c.old_inputs, &c.new_inputs));
        let decided = self.planner().decide(provider, diff.as_ref(), None);
        self.chain(decided, out);
    }

    fn read(&mut self, pos: &[&str], args: &Args<'_>) -> Result<Vec<String>, String> {
        let [ty, name] = pos[..] else {
            return Err("want `<type> <name> id=..`".into());
        };
        let mut goal = ReadGoal {
            ty: TypeToken::parse(ty).map_err(|e| e.to_string())?,
            name: name.to_owned(),
            id: String::new(),
            inputs: PropertyMap::new(),
            parent: None,
            provider: None,
            depends_on: Vec::new(),
            additional_secret_outputs: Vec::new(),
            version: None,
            plugin_download_url: None,
            ..Default::default()
        };
        for (k, v) in args {
            match (*k, *v) {
                ("id", Some(v)) => goal.id = v.to_owned(),
                ("parent", Some(v)) => goal.parent = Some(self.resolve(v)?),
                ("deps", v) => goal.depends_on = self.refs(v)?,
                ("provider", Some(v)) => goal.provider = Some(self.provider_ref(v)?),
                (k, Some(v)) => {
                    goal.inputs.insert(k.to_owned(), value(v));
                }
                (k, None) => return Err(format!("unknown flag `{k}`")),
            }
        }
        let mut out = Vec::new();
        match self.planner().read(&goal) {
            Ok((provider, chain)) => {
                if let Some(provider) = provider {
                    self.default_provider(provider, &mut out);
                }
                self.names
                    .insert(goal.name.clone(), chain.steps[0].urn.clone());
                self.chain(Ok(chain), &mut out);
            }
            Err(e) => out.push(format!("error: {e}")),
        }
        Ok(out)
    }

    fn deletes(&mut self) -> Vec<String> {
        match self.planner().deletes() {
            Ok(groups) => groups
                .iter()
                .enumerate()
                .flat_map(|(i, g)| {
                    g.iter()
                        .map(move |s| format!("{}: {}", i + 1, step_line(s)))
                })
                .collect(),
            Err(e) => vec![format!("error: {e}")],
        }
    }

    /// Prints a decided chain (or the refusal) and learns the IDs of the
    /// providers it plans.
    fn chain(&mut self, decided: super::Result<Chain>, out: &mut Vec<String>) {
        let chain = match decided {
            Ok(chain) => chain,
            Err(e) => return out.push(format!("error: {e}")),
        };
        for step in &chain.steps {
            if let Some(old) = step.old.as_ref().filter(|_| step.keep_pending) {
                // The chain is taken as run: the persister marks a state
                // its delete keeps pending replacement.
                let mut s = lock(old);
                s.pending_replacement = true;
                s.delete = false;
            }
            if let Some(new) = step.new.as_ref().filter(|n| n.ty.is_provider()) {
                self.provider_ids.insert(step.urn.clone(), new.id.clone());
            }
            out.push(step_line(step));
        }
        let stack = stack_urn();
        let waits: Vec<&str> = chain
            .waits_for
            .iter()
            .filter(|u| **u != stack)
            .map(|u| short(u.as_str()))
            .collect();
        if !waits.is_empty() {
            out.push(format!("  (waits for {})", waits.join(", ")));
        }
    }
}

fn step_line(step: &Step) -> String {
    let mut line = format!("{} {}", step.kind.as_str(), short(step.urn.as_str()));
    if let Some(new) = &step.new {
        let shows_id =
            new.ty.is_provider() || matches!(step.kind, StepKind::Import | StepKind::Read);
        if shows_id && !new.id.is_empty() {
            line.push_str(&format!(" id={}", new.id));
        } else if new.custom && !new.provider.is_empty() {
            line.push_str(&format!(" provider={}", short(&new.provider)));
        }
    }
    if let Some(d) = &step.provider_diff {
        let join = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(",");
        if !d.changed_keys.is_empty() {
            line.push_str(&format!(" changed={}", join(&d.changed_keys)));
        }
        if !d.replace_keys.is_empty() {
            line.push_str(&format!(" replace-keys={}", join(&d.replace_keys)));
        }
    }
    for (on, flag) in [
        (step.skip_provider, "skip-provider"),
        (step.keep_pending, "keep-pending"),
        (step.skipped, "skipped"),
    ] {
        if on {
            line.push(' ');
            line.push_str(flag);
        }
    }
    line
}

fn scripts() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/plan/testdata");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
}

#[test]
fn planner_scripts() {
    let rewrite = std::env::var("KEEL_REWRITE").is_ok_and(|v| v == "1");
    let files = scripts();
    assert!(
        files.len() >= 8,
        "the planner scripts are missing: {files:?}"
    );
    let mismatches: Vec<String> = files.iter().flat_map(|f| check(f, rewrite)).collect();
    assert!(
        mismatches.is_empty(),
        "{} planner script case(s) differ (KEEL_REWRITE=1 rewrites them):\n\n{}",
        mismatches.len(),
        mismatches.join("\n\n")
    );
}

#[test]
fn the_script_parser_reads_and_rewrites_expected_blocks() {
    let text = "# a comment\nprior\nx y\n----\n\nderegister\n----\nold\nlines\n\nlast\n----\n";
    let cases = parse(text);
    let got: Vec<(usize, &str, Vec<String>, Vec<String>)> = cases
        .iter()
        .map(|c| {
            (
                c.line,
                c.command.as_str(),
                c.input.clone(),
                c.expected.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (2, "prior", vec!["x y".to_owned()], vec![]),
            (
                6,
                "deregister",
                vec![],
                vec!["old".to_owned(), "lines".to_owned()]
            ),
            (11, "last", vec![], vec![]),
        ]
    );
    let actual = vec![vec!["a".to_owned()], vec!["new".to_owned()], vec![]];
    assert_eq!(
        rewritten(text, &cases, &actual),
        "# a comment\nprior\nx y\n----\na\n\nderegister\n----\nnew\n\nlast\n----\n"
    );
}
