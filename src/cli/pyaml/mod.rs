//! Pulumi YAML programs as written (`pulumi-yaml.md`): a project
//! directory (or its `Pulumi.yaml`) with `runtime: yaml`. The program is
//! the first of `Main.json`, `Main.yaml`, `Pulumi.yaml` in the program
//! directory (the `main:` subdirectory when set).
//!
//! Loading decodes the template ([`template`]), parses its expressions
//! ([`expr`]) and checks it completely before anything runs ([`check`]):
//! every problem is reported with the file, its line and key, exit 2.
//! [`eval`] runs the checked program on the program API.

pub(crate) mod check;
mod config;
pub(crate) mod eval;
pub(crate) mod expr;
mod locate;
pub(crate) mod template;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

pub use template::PyamlProgram;

/// The files a program directory is read from, in order.
pub const PROGRAM_FILES: [&str; 3] = ["Main.json", "Main.yaml", "Pulumi.yaml"];

/// One problem in a Pulumi YAML program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// The file.
    pub file: PathBuf,
    /// The line of its key, when known.
    pub line: Option<usize>,
    /// The key, as a dotted path.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if self.key.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": key `{}`: {}", self.key, self.message)
        }
    }
}

/// Why a Pulumi YAML program was refused.
#[derive(Debug, thiserror::Error)]
pub enum PyamlError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The program directory holds no program file.
    #[error(
        "{}: no Pulumi YAML program: none of Main.json, Main.yaml, Pulumi.yaml is there",
        .0.display()
    )]
    NoProgram(PathBuf),
    /// A file is not valid YAML or JSON.
    #[error("{}: invalid {format}: {message}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// `YAML` or `JSON`.
        format: &'static str,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The project's compiler (`runtime.options.compiler`) failed.
    #[error("the compiler `{command}` of the project: {message}")]
    Compiler {
        /// The command as written.
        command: String,
        /// What went wrong.
        message: String,
    },
    /// A package declaration (`packageDeclarationVersion: 1`) is invalid.
    #[error("{}: invalid package declaration: {message}", .path.display())]
    Package {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The program is invalid: every problem, with file, line and key.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Issue>),
}

/// Where a Pulumi YAML project's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The directory of `Pulumi.yaml` (`pulumi.rootDirectory`).
    pub root: PathBuf,
    /// The program directory (`main:`, default the root; `pulumi.cwd`).
    pub dir: PathBuf,
    /// The project's name from `Pulumi.yaml`.
    pub project: Option<String>,
    /// `runtime.options.compiler`: a command whose standard output is the
    /// template (run in the program directory).
    pub compiler: Option<String>,
}

/// The Pulumi YAML project `path` names: a directory with a `Pulumi.yaml`
/// of `runtime: yaml` (or `{name: yaml}`), or that `Pulumi.yaml` itself.
/// `Ok(None)` for anything else (a keel program file, a Python project).
///
/// # Errors
/// A `Pulumi.yaml` that is not valid YAML (unless the directory holds a
/// Python program, whose loader reports it).
pub fn layout(path: &Path) -> Result<Option<Layout>, PyamlError> {
    let (root, project_file) = if path.is_dir() {
        let Some(f) = ["Pulumi.yaml", "Pulumi.yml"]
            .iter()
            .map(|n| path.join(n))
            .find(|p| p.is_file())
        else {
            return Ok(None);
        };
        (path.to_owned(), f)
    } else {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            return Ok(None);
        };
        if name != "Pulumi.yaml" && name != "Pulumi.yml" {
            return Ok(None);
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        (dir, path.to_owned())
    };
    let text = std::fs::read_to_string(&project_file).map_err(|source| PyamlError::Read {
        path: project_file.clone(),
        source,
    })?;
    let doc: serde_json::Value = match serde_norway::from_str(&text) {
        Ok(d) => d,
        Err(_) if root.join("__main__.py").is_file() => return Ok(None),
        Err(e) => {
            return Err(PyamlError::Syntax {
                path: project_file,
                format: "YAML",
                message: e.to_string(),
            })
        }
    };
    let Some(runtime) = doc.get("runtime") else {
        return Ok(None);
    };
    let compiler = runtime
        .pointer("/options/compiler")
        .and_then(|c| c.as_str())
        .filter(|c| !c.trim().is_empty())
        .map(str::to_owned);
    let runtime = runtime
        .as_str()
        .or_else(|| runtime.get("name").and_then(|n| n.as_str()));
    if runtime != Some("yaml") {
        return Ok(None);
    }
    let dir = match doc.get("main").and_then(|m| m.as_str()) {
        Some(m) if !m.is_empty() => root.join(m),
        _ => root.clone(),
    };
    Ok(Some(Layout {
        project: doc.get("name").and_then(|n| n.as_str()).map(str::to_owned),
        root,
        dir,
        compiler,
    }))
}

/// Loads and checks the program of `layout`; `stack_config` holds the
/// stack config's keys (`namespace:name`), which references may name.
///
/// # Errors
/// [`PyamlError`]: unreadable files, invalid YAML, or every problem of
/// the program with its file, line and key.
pub fn load(
    layout: &Layout,
    stack: &str,
    stack_config: &BTreeSet<String>,
    config: &[crate::config::Resolved],
) -> Result<PyamlProgram, PyamlError> {
    let compiled_with = layout.compiler.as_ref().map(|_| config_json(config));
    let (file, bytes, json) = match &layout.compiler {
        Some(command) => {
            let secrets: Vec<&str> = config
                .iter()
                .filter(|r| r.secret && !r.text.is_empty())
                .map(|r| r.text.as_str())
                .collect();
            let given = compiled_with.as_deref().unwrap_or("{}");
            let bytes = compile(layout, command, stack, given, &secrets)?;
            let first = command.split_whitespace().next().unwrap_or(command);
            (
                PathBuf::from(format!("<stdout of compiler {first}>")),
                bytes,
                false,
            )
        }
        None => {
            let file = PROGRAM_FILES
                .iter()
                .map(|n| layout.dir.join(n))
                .find(|p| p.is_file())
                .ok_or_else(|| PyamlError::NoProgram(layout.dir.clone()))?;
            let bytes = std::fs::read(&file).map_err(|source| PyamlError::Read {
                path: file.clone(),
                source,
            })?;
            let json = file.extension().is_some_and(|e| e == "json");
            (file, bytes, json)
        }
    };
    let value = decode(&file, &bytes, json)?;
    let mut p = template::Loader::new(layout, &file);
    let mut program = p.program(&value, stack_config);
    for c in program.iter_mut().flat_map(|p| p.config.iter_mut()) {
        c.line = locate::line(&bytes, json, &c.path);
    }
    let mut issues = Vec::new();
    let mut warnings = Vec::new();
    for problem in p.parser.problems {
        let issue = Issue {
            file: file.clone(),
            line: locate::line(&bytes, json, &problem.path),
            key: expr::render(&problem.path),
            message: problem.message,
        };
        if problem.warning {
            warnings.push(issue.to_string());
        } else {
            issues.push(issue);
        }
    }
    issues.sort_by_key(|i| i.line.unwrap_or(usize::MAX));
    match program {
        Some(mut prog) if issues.is_empty() => {
            prog.warnings = warnings;
            prog.packages = package_decls(&layout.dir)?;
            prog.compiled = compiled_with.map(|c| Box::new((layout.clone(), stack.to_owned(), c)));
            Ok(prog)
        }
        _ => Err(PyamlError::Invalid(issues)),
    }
}

/// `PULUMI_CONFIG` as Pulumi's language hosts set it: a JSON object of
/// `namespace:name` to the value as text (secure values decrypted).
pub(crate) fn config_json(config: &[crate::config::Resolved]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = config
        .iter()
        .map(|r| (r.key.clone(), serde_json::Value::String(r.text.clone())))
        .collect();
    serde_json::Value::Object(map).to_string()
}

impl PyamlProgram {
    /// The program made again by its compiler when the stack's resolved
    /// config differs from what it was made with (`None` when it was not
    /// compiled, or the config is the same). Its problems are reported as
    /// at load, before anything runs.
    ///
    /// # Errors
    /// As [`load`].
    pub fn recompiled(
        &self,
        config: &[crate::config::Resolved],
    ) -> Result<Option<PyamlProgram>, PyamlError> {
        match self.compiled.as_deref() {
            Some((layout, stack, with)) if *with != config_json(config) => {
                load(layout, stack, &self.stack_keys, config).map(Some)
            }
            _ => Ok(None),
        }
    }
}

/// Runs the project's compiler (`runtime.options.compiler`, split as a
/// shell would, not run by one) in the program directory, as Pulumi YAML
/// does, with `PULUMI_STACK`, `PULUMI_PROJECT`, `PULUMI_ORGANIZATION`,
/// `PULUMI_CONFIG` (`config`, [`config_json`]) and `PULUMI_ROOT_DIRECTORY`
/// set; its standard output is the template. `secrets` (the plaintexts of
/// secure values in `config`) are masked in what its failure quotes.
///
/// # Errors
/// [`PyamlError::Compiler`]: the command cannot be split or started, or
/// it fails (its standard error is quoted).
fn compile(
    layout: &Layout,
    command: &str,
    stack: &str,
    config: &str,
    secrets: &[&str],
) -> Result<Vec<u8>, PyamlError> {
    let fail = |message: String| PyamlError::Compiler {
        command: command.to_owned(),
        message,
    };
    let argv = shlex::split(command)
        .filter(|a| !a.is_empty())
        .ok_or_else(|| fail("it cannot be split into words (an unclosed quote?)".into()))?;
    let root = std::path::absolute(&layout.root).unwrap_or_else(|_| layout.root.clone());
    let out = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(&layout.dir)
        .env("PULUMI_STACK", stack)
        .env("PULUMI_PROJECT", layout.project.as_deref().unwrap_or_default())
        .env("PULUMI_ORGANIZATION", "organization")
        .env("PULUMI_CONFIG", config)
        .env("PULUMI_ROOT_DIRECTORY", root)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => fail(format!(
                "`{}` is not installed (not found on PATH); install it, or remove `runtime.options.compiler`",
                argv[0]
            )),
            _ => fail(format!("it could not be started: {e}")),
        })?;
    if !out.status.success() {
        // The compiler was given the decrypted config: what it says never
        // shows a secret's plaintext.
        let mut said = String::from_utf8_lossy(&out.stderr).trim_end().to_owned();
        for s in secrets {
            said = said.replace(s, "[secret]");
        }
        return Err(fail(format!(
            "it failed ({}); its standard error:\n{said}",
            out.status
        )));
    }
    Ok(out.stdout)
}

/// The package declarations under the program directory: every `.yaml`
/// file below it (hidden directories skipped, as are files that are not
/// declarations), as Pulumi YAML finds them (`sdks/<name>.yaml`).
///
/// # Errors
/// An unreadable directory or file, or an invalid declaration.
fn package_decls(dir: &Path) -> Result<Vec<crate::provider::package::PackageDecl>, PyamlError> {
    const MAX_DEPTH: usize = 8;
    let mut found = Vec::new();
    let mut pending = vec![(dir.to_owned(), 0)];
    while let Some((d, depth)) = pending.pop() {
        let read = |source| PyamlError::Read {
            path: d.clone(),
            source,
        };
        let mut entries = std::fs::read_dir(&d)
            .map_err(read)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(read)?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let path = e.path();
            let hidden = e.file_name().to_string_lossy().starts_with('.');
            let ty = e.file_type().map_err(|source| PyamlError::Read {
                path: path.clone(),
                source,
            })?;
            if ty.is_dir() && !hidden && depth < MAX_DEPTH {
                pending.push((path, depth + 1));
            } else if ty.is_file() && path.extension().is_some_and(|x| x == "yaml") {
                let text = match std::fs::read_to_string(&path) {
                    Ok(t) => t,
                    // Not text: not a declaration.
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidData => continue,
                    Err(source) => return Err(PyamlError::Read { path, source }),
                };
                match crate::provider::package::PackageDecl::parse(&text) {
                    Ok(Some(decl)) => {
                        // A replacement's versions name its default
                        // provider: refused here, before anything runs,
                        // not when its first resource registers.
                        crate::plan::providers::DefaultProviderRequest::new(
                            decl.namespace(),
                            None,
                            None,
                        )
                        .and_then(|r| r.declared(&decl))
                        .map_err(|e| PyamlError::Package {
                            path: path.clone(),
                            message: e.to_string(),
                        })?;
                        found.push(decl);
                    }
                    Ok(None) => {}
                    Err(message) => return Err(PyamlError::Package { path, message }),
                }
            }
        }
    }
    Ok(found)
}

/// Decodes a file, refusing duplicate keys (with both lines).
fn decode(path: &Path, bytes: &[u8], json: bool) -> Result<serde_json::Value, PyamlError> {
    use super::decode::{decode, Decode, Seed};
    let dup = |d: super::decode::Duplicate| {
        let key = if d.mapping.is_empty() {
            d.key.clone()
        } else {
            format!("{}.{}", d.mapping, d.key)
        };
        PyamlError::Invalid(vec![Issue {
            file: path.to_owned(),
            line: d.second_line,
            key,
            message: format!(
                "duplicate key (first at line {}): keys must be unique; remove or rename one",
                d.first_line
                    .map_or_else(|| "?".to_owned(), |l| l.to_string())
            ),
        }])
    };
    if json {
        let run = |seed: Seed<'_>| {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let v = serde::de::DeserializeSeed::deserialize(seed, &mut de)?;
            de.end()?;
            Ok(v)
        };
        decode(run, |e: &serde_json::Error| Some(e.line())).map_err(|e| match e {
            Decode::Duplicate(d) => dup(d),
            Decode::Syntax(e) => PyamlError::Syntax {
                path: path.to_owned(),
                format: "JSON",
                message: e.to_string(),
            },
        })
    } else {
        let run = |seed: Seed<'_>| {
            serde::de::DeserializeSeed::deserialize(
                seed,
                serde_norway::Deserializer::from_slice(bytes),
            )
        };
        decode(run, |e: &serde_norway::Error| {
            e.location().map(|l| l.line())
        })
        .map_err(|e| match e {
            Decode::Duplicate(d) => dup(d),
            Decode::Syntax(e) => PyamlError::Syntax {
                path: path.to_owned(),
                format: "YAML",
                message: e.to_string(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::eval::apply;
    use super::expr::{parse, Expr, Func};
    use crate::model::property::Secret;
    use crate::model::PropertyValue;

    /// Evaluates an expression that refers to nothing (the builtins'
    /// rules: secret arguments make a secret result).
    fn constant(e: &Expr) -> Result<PropertyValue, String> {
        Ok(match e {
            Expr::Null => PropertyValue::Null,
            Expr::Bool(b) => PropertyValue::Bool(*b),
            Expr::Number(n) => PropertyValue::Number(n.clone()),
            Expr::Text(t) => PropertyValue::String(t.clone()),
            Expr::List(l) => {
                PropertyValue::Array(l.iter().map(constant).collect::<Result<_, _>>()?)
            }
            Expr::Object(m) => PropertyValue::Object(
                m.iter()
                    .map(|(k, v)| Ok((k.as_text().unwrap_or_default().to_owned(), constant(v)?)))
                    .collect::<Result<_, String>>()?,
            ),
            Expr::Call(Func::Secret, a) => PropertyValue::Secret(Secret::plaintext(constant(a)?)),
            Expr::Call(f, a) => {
                let v = constant(a)?;
                let secret = v.contains_secrets();
                let plain = match v {
                    PropertyValue::Secret(Secret::Plaintext(p)) => p.value().clone(),
                    v => v,
                };
                let out = apply(*f, plain, std::path::Path::new("."))?;
                if *f == Func::Unsecret || !secret {
                    out
                } else {
                    PropertyValue::Secret(Secret::plaintext(out))
                }
            }
            other => return Err(format!("not constant: {other:?}")),
        })
    }

    /// One case: a YAML expression and its value as JSON (a secret as
    /// `{"secret": value}`), or the text of its parse or evaluation error.
    fn check(yaml: &str, want: Result<serde_json::Value, &str>) {
        fn shown(v: &PropertyValue) -> serde_json::Value {
            match v {
                PropertyValue::Secret(Secret::Plaintext(p)) => {
                    serde_json::json!({"secret": shown(p.value())})
                }
                other => other.to_json(),
            }
        }
        let value: serde_json::Value = serde_norway::from_str(yaml).expect("YAML");
        let (e, problems) = parse(&value);
        let errors: Vec<String> = problems
            .iter()
            .filter(|p| !p.warning)
            .map(|p| p.message.clone())
            .collect();
        let got = if errors.is_empty() {
            constant(&e).map(|v| shown(&v))
        } else {
            Err(errors.join("; "))
        };
        match (got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "{yaml}"),
            (Err(g), Err(w)) => assert!(g.contains(w), "{yaml}: `{w}` not in `{g}`"),
            (g, w) => panic!("{yaml}: got {g:?}, want {w:?}"),
        }
    }

    #[test]
    fn expressions_and_builtins() {
        use serde_json::json;
        let cases: &[(&str, Result<serde_json::Value, &str>)] = &[
            ("plain text", Ok(json!("plain text"))),
            ("'$${x} costs $5'", Ok(json!("${x} costs $5"))),
            ("'${}'", Err("cannot be empty")),
            ("'${a.b'", Err("unterminated interpolation")),
            ("'${a[x]}'", Err("invalid list index")),
            ("'${a[\"k}'", Err("missing closing quote")),
            ("'x ${a.b[0] y'", Err("unexpected character")),
            ("'${a.b[0'", Err("missing closing bracket")),
            ("{fn::join: ['-', [a, b, c]]}", Ok(json!("a-b-c"))),
            ("{fn::join: [null, [a, b]]}", Ok(json!("ab"))),
            ("{fn::join: ['-', [a, 1]]}", Err("must be a string")),
            ("{fn::join: ['-']}", Err("takes a list of two values")),
            ("{fn::split: [',', 'a,,b']}", Ok(json!(["a", "", "b"]))),
            ("{fn::select: [1, [x, y]]}", Ok(json!("y"))),
            (
                "{fn::select: [2, [x, y]]}",
                Err("list index 2 out-of-bounds for list of length 2"),
            ),
            ("{fn::select: [-1, [x]]}", Err("non-negative whole number")),
            (
                "{fn::toJSON: {b: '<&>', a: [1, 2.5, true, null]}}",
                Ok(json!(r#"{"a":[1,2.5,true,null],"b":"\u003c\u0026\u003e"}"#)),
            ),
            ("{fn::toBase64: hello}", Ok(json!("aGVsbG8="))),
            ("{fn::fromBase64: aGVsbG8=}", Ok(json!("hello"))),
            ("{fn::fromBase64: '!!'}", Err("invalid base64")),
            ("{fn::fromBase64: /w==}", Err("not UTF-8")),
            (
                "{fn::sha1: abc}",
                Ok(json!("a9993e364706816aba3e25717850c26c9cd0d89d")),
            ),
            ("{fn::length: [a, b]}", Ok(json!(2))),
            ("{fn::length: héllo}", Ok(json!(5))),
            ("{fn::singleOrNone: []}", Ok(json!(null))),
            ("{fn::singleOrNone: [a]}", Ok(json!("a"))),
            ("{fn::singleOrNone: [a, b]}", Err("at most one")),
            ("{fn::secret: s}", Ok(json!({"secret": "s"}))),
            (
                "{fn::toBase64: {fn::secret: s}}",
                Ok(json!({"secret": "cw=="})),
            ),
            ("{fn::unsecret: {fn::secret: s}}", Ok(json!("s"))),
            ("{fn::ToBase64: a}", Ok(json!("YQ=="))),
            (
                "{fn::stringAsset: hi}",
                Ok(
                    json!({"4dabf18193072939515e22adb298388d": "c44067f5952c0a294b673a41bacd8c17", "text": "hi"}),
                ),
            ),
            ("{fn::invoke: {arguments: {}}}", Err("needs a `function`")),
            (
                "{fn::invoke: {function: 'a:b:c', return: '${x}'}}",
                Err("`return` must be a string literal"),
            ),
            (
                "{fn::assetArchive: {a: b}}",
                Err("must be an asset or archive"),
            ),
            ("{fn::fileAsset: a, other: b}", Err("must be the only key")),
            ("{fn::nope: 1}", Ok(json!({"fn::nope": 1}))),
        ];
        for (yaml, want) in cases {
            check(yaml, want.clone());
        }
    }

    #[test]
    fn symbols_keep_access_paths() {
        let value = serde_json::json!("${res.list[0][\"a.b\"].c}");
        let (e, problems) = parse(&value);
        assert!(problems.is_empty());
        let Expr::Symbol(a) = e else {
            panic!("a symbol: {e:?}")
        };
        assert_eq!(a.root, "res");
        assert_eq!(a.to_string(), "${res.list[0][\"a.b\"].c}");
        let (e, _) = parse(&serde_json::json!("x-${a}-${b.c}"));
        assert_eq!(e.roots(), vec!["a", "b"]);
    }
}
