//! Real or simulated, never by accident: which packages of an operation
//! the simulated cloud serves and which their Pulumi plugins serve.
//!
//! The choice is explicit: the `--providers` flag, else the config key
//! `keel:providers` (the stack's `Pulumi.<stack>.yaml` over the program's
//! own `config:`), each `sim` or `plugins`. With no explicit choice, a
//! package the stack's state records ([`Deployment::recorded_serving`])
//! stays served as recorded, and a new one is simulated (the embedded
//! default of the README's first command). The engine records what served
//! each package in the state and shows it in the summary.
//!
//! Switching a recorded package between the two is refused: the simulated
//! cloud does not hold a plugin's real objects (an update would fail, a
//! refresh would drop them from state and orphan them), and a plugin
//! cannot act on simulated IDs. A preview changes nothing, so there it is
//! a warning and the explicit choice is previewed.
//!
//! Deterministic, without I/O: [`choose`] is tested directly.

use std::collections::BTreeMap;

use super::args::Providers;
use super::CliError;

/// The config key of the setting.
pub const SETTING: &str = "keel:providers";

/// Where an explicit choice came from (named in errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The `--providers` flag.
    Flag,
    /// The config key [`SETTING`] (stack or program).
    Setting,
}

/// What serves the packages of one operation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Choice {
    /// For packages the state does not record.
    pub default: Providers,
    /// Per package, as recorded or as chosen over the record (preview).
    pub packages: BTreeMap<String, Providers>,
    /// Warnings to show (a preview over a recorded choice).
    pub warnings: Vec<String>,
}

impl Choice {
    /// The serving of `package`.
    pub fn of(&self, package: &str) -> Providers {
        self.packages.get(package).copied().unwrap_or(self.default)
    }
}

/// Reads the setting's value (`sim` or `plugins`).
///
/// # Errors
/// [`CliError::BadFlag`] naming the key for any other value.
pub fn parse_setting(value: &str) -> Result<Providers, CliError> {
    match value.trim() {
        "sim" => Ok(Providers::Sim),
        "plugins" => Ok(Providers::Plugins),
        other => Err(CliError::BadFlag {
            flag: SETTING,
            message: format!(
                "`{other}` is not a way to serve packages: use `sim` (the simulated cloud) or `plugins` (each package's Pulumi plugin)"
            ),
        }),
    }
}

fn describe(p: Providers) -> &'static str {
    match p {
        Providers::Sim => "the simulated cloud",
        Providers::Plugins => "its plugin (real objects)",
    }
}

fn flag_value(p: Providers) -> &'static str {
    match p {
        Providers::Sim => "sim",
        Providers::Plugins => "plugins",
    }
}

/// The choice for an operation on `stack` whose state records `recorded`
/// (package -> serving name), given an explicit choice, if any.
///
/// # Errors
/// [`CliError::ServingConflict`] when an explicit choice contradicts what
/// the state records for a package, except in a `preview`.
pub fn choose(
    stack: &str,
    explicit: Option<(Providers, Origin)>,
    recorded: &BTreeMap<String, String>,
    preview: bool,
) -> Result<Choice, CliError> {
    let mut choice = Choice {
        default: explicit.map_or(Providers::Sim, |(p, _)| p),
        ..Choice::default()
    };
    for (package, how) in recorded {
        let was = match how.as_str() {
            "simulated" => Providers::Sim,
            "plugin" => Providers::Plugins,
            // Built-in and embedded packages are not the flag's to choose.
            _ => continue,
        };
        match explicit {
            Some((asked, origin)) if asked != was => {
                let by = match origin {
                    Origin::Flag => format!("--providers {}", flag_value(asked)),
                    Origin::Setting => format!("{SETTING}: {}", flag_value(asked)),
                };
                if preview {
                    choice.warnings.push(format!(
                        "package `{package}` of stack `{stack}` is recorded as served by {}, but this preview uses {} ({by}): what it shows is not what an update would do",
                        describe(was),
                        describe(asked)
                    ));
                    choice.packages.insert(package.clone(), asked);
                } else {
                    return Err(CliError::ServingConflict {
                        stack: stack.to_owned(),
                        package: package.clone(),
                        recorded: describe(was),
                        asked: format!("{} ({by})", describe(asked)),
                        keep: flag_value(was),
                    });
                }
            }
            _ => {
                choice.packages.insert(package.clone(), was);
            }
        }
    }
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn without_a_choice_recorded_packages_keep_their_serving_and_new_ones_are_simulated() {
        let c = choose(
            "dev",
            None,
            &rec(&[
                ("aws", "plugin"),
                ("random", "simulated"),
                ("pulumi", "builtin"),
            ]),
            false,
        )
        .unwrap();
        assert_eq!(c.of("aws"), Providers::Plugins);
        assert_eq!(c.of("random"), Providers::Sim);
        assert_eq!(c.of("gcp"), Providers::Sim);
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn an_explicit_choice_serves_new_packages_and_agrees_with_records() {
        let c = choose(
            "dev",
            Some((Providers::Plugins, Origin::Setting)),
            &rec(&[("aws", "plugin")]),
            false,
        )
        .unwrap();
        assert_eq!(c.of("aws"), Providers::Plugins);
        assert_eq!(c.of("gcp"), Providers::Plugins);
    }

    #[test]
    fn switching_a_recorded_package_is_refused_naming_it_and_what_to_do() {
        let e = choose(
            "prod",
            Some((Providers::Sim, Origin::Flag)),
            &rec(&[("aws", "plugin")]),
            false,
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("`aws`"), "{text}");
        assert!(text.contains("`prod`"), "{text}");
        assert!(text.contains("--providers sim"), "{text}");
        assert!(text.contains("--providers plugins"), "{text}");
        assert_eq!(e.exit_code(), 2);
        let e = choose(
            "prod",
            Some((Providers::Plugins, Origin::Setting)),
            &rec(&[("random", "simulated")]),
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("keel:providers: plugins"), "{e}");
    }

    #[test]
    fn a_preview_over_a_record_warns_and_previews_the_choice() {
        let c = choose(
            "prod",
            Some((Providers::Sim, Origin::Flag)),
            &rec(&[("aws", "plugin")]),
            true,
        )
        .unwrap();
        assert_eq!(c.of("aws"), Providers::Sim);
        assert_eq!(c.warnings.len(), 1);
        assert!(c.warnings[0].contains("`aws`"), "{:?}", c.warnings);
    }

    #[test]
    fn the_setting_takes_only_sim_or_plugins() {
        assert_eq!(parse_setting("plugins").unwrap(), Providers::Plugins);
        assert_eq!(parse_setting(" sim ").unwrap(), Providers::Sim);
        let e = parse_setting("real").unwrap_err();
        assert!(e.to_string().contains("keel:providers"), "{e}");
    }
}
