//! Default providers, named and configured as Pulumi does.
//!
//! A custom resource registered without a provider gets its package's
//! default provider. Which one depends on the registration's plugin
//! `version` and `pluginDownloadURL` (Pulumi's provider request): with
//! neither it is `pulumi:providers:<pkg>::default`; a version adds its
//! parts, `default_6_0_0` for `6.0.0` and
//! `default_0_0_1_alpha_1630620749_0a3b399e_dirty` for
//! `0.0.1-alpha.1630620749+0a3b399e.dirty` (major, minor, patch, then each
//! pre-release and build identifier, joined by `_`); a download URL adds
//! `_` and the URL with every character outside `[A-Za-z0-9_.-/]`
//! replaced by `_`. The provider's inputs are the package's configuration
//! (`<pkg>:<key>` config values, as strings), plus `version` and an
//! `__internal` object (holding `pluginDownloadURL`) when the request
//! carries them, exactly as Pulumi records them in its checkpoints.
//!
//! A package a declaration makes a *replacement parameterization* of a
//! base plugin (`sdks/<name>.yaml`) is named and recorded as Pulumi does:
//! the name carries the package's version, `version` is the package's
//! version, and `__internal` holds the base plugin's `name` and `version`
//! and the base64 `parameterization` value, so that an operation without
//! the program (`destroy`) can start and parameterize the same plugin
//! from the state alone ([`declaration_in`]).

use std::collections::BTreeMap;
use std::fmt;

use crate::model::{PropertyMap, PropertyValue};

/// The key under which Pulumi keeps a provider's internal settings (its
/// plugin's download URL); the engine drops it before asking a provider
/// to compare configurations.
pub(crate) const INTERNAL_KEY: &str = "__internal";
/// The provider input holding the plugin's version.
pub(crate) const VERSION_KEY: &str = "version";
/// The internal setting holding the plugin's download URL.
pub(crate) const DOWNLOAD_URL_KEY: &str = "pluginDownloadURL";
/// The internal setting holding a parameterized provider's base plugin.
pub(crate) const NAME_KEY: &str = "name";
/// The internal setting holding a parameterized provider's parameter
/// value (base64).
pub(crate) const PARAMETERIZATION_KEY: &str = "parameterization";

/// A plugin version that is not a semantic version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{version}` is not a semantic version (MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]): {reason}")]
pub struct VersionError {
    /// The text given.
    pub version: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A semantic version (semver 2.0, as Pulumi parses plugin versions: no
/// leading `v`, no leading zeros in numbers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<String>,
    build: Vec<String>,
}

impl Version {
    /// Parses a version.
    ///
    /// # Errors
    /// [`VersionError`] naming the text and what is wrong.
    pub(crate) fn parse(text: &str) -> Result<Self, VersionError> {
        let bad = |reason: &str| VersionError {
            version: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (rest, build) = match text.split_once('+') {
            Some((r, b)) => (r, Some(b)),
            None => (text, None),
        };
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (rest, None),
        };
        let numbers: Vec<&str> = core.split('.').collect();
        let [major, minor, patch] = numbers[..] else {
            return Err(bad("it needs exactly three dot-separated numbers"));
        };
        let number = |s: &str| -> Result<u64, VersionError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(&format!("`{s}` is not a number")));
            }
            if s.len() > 1 && s.starts_with('0') {
                return Err(bad(&format!("`{s}` has a leading zero")));
            }
            s.parse().map_err(|_| bad(&format!("`{s}` is too large")))
        };
        let identifiers = |s: Option<&str>, what: &str, numeric: bool| {
            let Some(s) = s else {
                return Ok(Vec::new());
            };
            s.split('.')
                .map(|id| {
                    if id.is_empty() {
                        return Err(bad(&format!("an empty {what} identifier")));
                    }
                    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                        return Err(bad(&format!(
                            "{what} identifier `{id}` may hold only ASCII letters, digits and `-`"
                        )));
                    }
                    if numeric && id.bytes().all(|b| b.is_ascii_digit()) {
                        number(id)?;
                    }
                    Ok(id.to_owned())
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            major: number(major)?,
            minor: number(minor)?,
            patch: number(patch)?,
            pre: identifiers(pre, "pre-release", true)?,
            build: identifiers(build, "build", false)?,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre.join("."))?;
        }
        if !self.build.is_empty() {
            write!(f, "+{}", self.build.join("."))?;
        }
        Ok(())
    }
}

/// Which default provider a registration asks for: its package, plugin
/// version and download URL, and the replacement parameterization its
/// package is (if a declaration says so).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DefaultProviderRequest {
    package: String,
    version: Option<Version>,
    download_url: Option<String>,
    replacement: Option<Replacement>,
}

/// A replacement parameterization of a base plugin: the package (named by
/// the request) is served by plugin `base` given `value`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Replacement {
    /// The base plugin.
    base: String,
    /// The package's own version.
    version: Version,
    /// The parameter value.
    value: Vec<u8>,
}

impl DefaultProviderRequest {
    /// The request of a registration of a `package` resource with these
    /// (optional, possibly empty) `version` and `pluginDownloadURL`.
    ///
    /// # Errors
    /// [`VersionError`] when the version is not a semantic version.
    pub(crate) fn new(
        package: &str,
        version: Option<&str>,
        download_url: Option<&str>,
    ) -> Result<Self, VersionError> {
        let version = version
            .filter(|v| !v.is_empty())
            .map(Version::parse)
            .transpose()?;
        let download_url = download_url
            .map(|u| u.trim_end_matches('/'))
            .filter(|u| !u.is_empty())
            .map(str::to_owned);
        Ok(Self {
            package: package.to_owned(),
            version,
            download_url,
            replacement: None,
        })
    }

    /// The same request, for a package `decl` declares a replacement
    /// parameterization of its base plugin: the base plugin's version and
    /// download URL are the declaration's (as Pulumi's package reference
    /// overrides the registration's). A declaration of another package,
    /// or without a replacement, changes nothing.
    ///
    /// # Errors
    /// [`VersionError`] when a declared version is not a semantic version.
    pub(crate) fn declared(
        mut self,
        decl: &crate::provider::package::PackageDecl,
    ) -> Result<Self, VersionError> {
        let Some(p) = &decl.parameterization else {
            return Ok(self);
        };
        if p.name != self.package {
            return Ok(self);
        }
        // The base plugin's version and URL, normalised as a
        // registration's are.
        let base = Self::new(
            &self.package,
            decl.version.as_deref(),
            decl.download_url.as_deref(),
        )?;
        self.version = base.version;
        self.download_url = base.download_url;
        self.replacement = Some(Replacement {
            base: decl.name.clone(),
            version: Version::parse(&p.version)?,
            value: p.value.clone(),
        });
        Ok(self)
    }

    /// The package's version (Pulumi's `PackageVersion`): a replacement's
    /// own, else the plugin's.
    fn package_version(&self) -> Option<&Version> {
        self.replacement
            .as_ref()
            .map(|r| &r.version)
            .or(self.version.as_ref())
    }

    /// The package.
    pub(crate) fn package(&self) -> &str {
        &self.package
    }

    /// A key telling requests apart (one default provider per key): the
    /// package alone (borrowed) when no version or URL is asked for.
    pub(crate) fn key(&self) -> std::borrow::Cow<'_, str> {
        if self.package_version().is_none() && self.download_url.is_none() {
            return std::borrow::Cow::Borrowed(&self.package);
        }
        let mut k = self.package.clone();
        if let Some(v) = self.package_version() {
            k.push('-');
            k.push_str(&v.to_string());
        }
        if let Some(u) = &self.download_url {
            k.push('-');
            k.push_str(u);
        }
        std::borrow::Cow::Owned(k)
    }

    /// The default provider's resource name: `default`, or with the
    /// version's parts and the download URL, as Pulumi names it.
    pub(crate) fn name(&self) -> String {
        let mut name = String::from("default");
        if let Some(v) = self.package_version() {
            name.push_str(&format!("_{}_{}_{}", v.major, v.minor, v.patch));
            for id in v.pre.iter().chain(&v.build) {
                name.push('_');
                name.push_str(id);
            }
        }
        if let Some(url) = &self.download_url {
            name.push('_');
            name.push_str(&qualified_name(url));
        }
        name
    }

    /// The default provider's inputs: the package's configuration (from
    /// `config`, whose keys are `<package>:<key>`), `version` and
    /// `__internal` as Pulumi records them.
    pub(crate) fn inputs(&self, config: &BTreeMap<String, PropertyValue>) -> PropertyMap {
        let prefix = format!("{}:", self.package);
        let mut inputs: PropertyMap = config
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(&prefix)
                    .filter(|rest| !rest.is_empty())
                    .map(|rest| (rest.to_owned(), v.clone()))
            })
            .collect();
        if self.version.is_some() || self.download_url.is_some() || self.replacement.is_some() {
            let mut internal = PropertyMap::new();
            if let Some(u) = &self.download_url {
                internal.insert(DOWNLOAD_URL_KEY.into(), PropertyValue::String(u.clone()));
            }
            if let Some(r) = &self.replacement {
                // As Pulumi's `SetProviderParameterization`: the base
                // plugin's name and version move into `__internal`, and
                // `version` is the package's.
                use base64::Engine as _;
                internal.insert(NAME_KEY.into(), PropertyValue::String(r.base.clone()));
                if let Some(v) = &self.version {
                    internal.insert(VERSION_KEY.into(), PropertyValue::String(v.to_string()));
                }
                internal.insert(
                    PARAMETERIZATION_KEY.into(),
                    PropertyValue::String(
                        base64::engine::general_purpose::STANDARD.encode(&r.value),
                    ),
                );
            }
            inputs.insert(INTERNAL_KEY.into(), PropertyValue::Object(internal));
        }
        if let Some(v) = self.package_version() {
            inputs.insert(VERSION_KEY.into(), PropertyValue::String(v.to_string()));
        }
        inputs
    }
}

/// `text` as a Pulumi qualified name: `/`-separated parts (empty ones
/// dropped) whose characters outside `[A-Za-z0-9_.-]` become `_`.
fn qualified_name(text: &str) -> String {
    let parts: Vec<String> = text
        .split('/')
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-') {
                        char::from(b)
                    } else {
                        '_'
                    }
                })
                .collect()
        })
        .collect();
    if parts.is_empty() {
        "_".into()
    } else {
        parts.join("/")
    }
}

/// The internal setting holding a provider's environment variable
/// remappings for its plugin (`envVarMappings`: `NEW -> OLD`).
pub(crate) const ENV_VAR_MAPPINGS_KEY: &str = "envVarMappings";

/// Records `mappings` in a provider resource's `__internal` inputs, as
/// Pulumi's `SetEnvironmentVariableMappings` does.
pub(crate) fn set_env_var_mappings(inputs: &mut PropertyMap, mappings: &BTreeMap<String, String>) {
    let entry = inputs
        .entry(INTERNAL_KEY.to_owned())
        .or_insert_with(|| PropertyValue::Object(PropertyMap::new()));
    if !matches!(entry, PropertyValue::Object(_)) {
        *entry = PropertyValue::Object(PropertyMap::new());
    }
    if let PropertyValue::Object(internal) = entry {
        internal.insert(
            ENV_VAR_MAPPINGS_KEY.to_owned(),
            PropertyValue::Object(
                mappings
                    .iter()
                    .map(|(new, old)| (new.clone(), PropertyValue::String(old.clone())))
                    .collect(),
            ),
        );
    }
}

/// A provider resource's environment variable remappings (`NEW -> OLD`),
/// from its `__internal` inputs; entries that are not strings are skipped.
/// (The plugin host applies them.)
#[cfg(feature = "grpc")]
pub(crate) fn env_var_mappings(inputs: &PropertyMap) -> Vec<(String, String)> {
    match inputs.get(INTERNAL_KEY) {
        Some(PropertyValue::Object(internal)) => match internal.get(ENV_VAR_MAPPINGS_KEY) {
            Some(PropertyValue::Object(m)) => m
                .iter()
                .filter_map(|(new, old)| old.as_str().map(|o| (new.clone(), o.to_owned())))
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The declaration a provider resource of `package` records, if it is a
/// replacement parameterization of a base plugin (its `__internal` has a
/// `parameterization`, as Pulumi and keel record one): the base plugin's
/// name (`__internal.name`, else `package`), version and download URL,
/// and the parameterization (`package`, the `version` input, the decoded
/// value). `None` for any other provider, or one whose record is not
/// well formed (a value that is not base64, no `version`): such a provider
/// is served as an ordinary one, as it was before.
#[cfg(any(feature = "cli", test))]
pub(crate) fn declaration_in(
    package: &str,
    inputs: &PropertyMap,
) -> Option<crate::provider::package::PackageDecl> {
    use base64::Engine as _;
    let Some(PropertyValue::Object(internal)) = inputs.get(INTERNAL_KEY) else {
        return None;
    };
    let value = internal.get(PARAMETERIZATION_KEY)?.as_str()?;
    let value = base64::engine::general_purpose::STANDARD
        .decode(value.as_bytes())
        .ok()?;
    let version = inputs.get(VERSION_KEY)?.as_str()?.to_owned();
    let text = |k: &str| {
        internal
            .get(k)
            .and_then(PropertyValue::as_str)
            .map(str::to_owned)
    };
    Some(crate::provider::package::PackageDecl {
        name: text(NAME_KEY).unwrap_or_else(|| package.to_owned()),
        version: text(VERSION_KEY),
        download_url: text(DOWNLOAD_URL_KEY),
        parameterization: Some(crate::provider::package::Parameterization {
            name: package.to_owned(),
            version,
            value,
        }),
        extension: None,
    })
}

/// A provider's configuration as a provider is asked to compare it: its
/// inputs without `__internal`.
pub(crate) fn config_of(inputs: &PropertyMap) -> PropertyMap {
    inputs
        .iter()
        .filter(|(k, _)| k.as_str() != INTERNAL_KEY)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_pulumi() {
        let check = |version: Option<&str>, url: Option<&str>, want: &str| {
            let r = DefaultProviderRequest::new("aws", version, url).expect("request");
            assert_eq!(r.name(), want, "{version:?} {url:?}");
        };
        check(None, None, "default");
        check(Some(""), Some(""), "default");
        check(Some("6.0.0"), None, "default_6_0_0");
        check(Some("2.7.0"), None, "default_2_7_0");
        check(Some("6.56.1"), None, "default_6_56_1");
        check(
            Some("0.0.1-alpha.1630620749+0a3b399e.dirty"),
            None,
            "default_0_0_1_alpha_1630620749_0a3b399e_dirty",
        );
        check(Some("3.0.0-alpha.0+dev"), None, "default_3_0_0_alpha_0_dev");
        check(Some("1.0.0-beta-1"), None, "default_1_0_0_beta-1");
        check(
            Some("1.2.3"),
            Some("https://get.example.com/plugins/"),
            "default_1_2_3_https_/get.example.com/plugins",
        );
        check(
            None,
            Some("github://api.github.com/org"),
            "default_github_/api.github.com/org",
        );
        check(None, Some("s3://b ü"), "default_s3_/b___");
    }

    #[test]
    fn bad_versions_are_refused() {
        for v in [
            "v1.2.3",
            "1.2",
            "1.2.3.4",
            "01.2.3",
            "1.02.3",
            "1.2.x",
            "1.2.3-",
            "1.2.3+",
            "1.2.3-a..b",
            "1.2.3-01",
            "1.2.3-a_b",
            "1.2.3+a!",
            " 1.2.3",
            "1.2.3 ",
            "99999999999999999999.0.0",
        ] {
            let e = DefaultProviderRequest::new("aws", Some(v), None).expect_err(v);
            assert_eq!(e.version, v);
            assert!(e.to_string().contains(v), "{e}");
        }
        // Leading zeros are allowed in build identifiers, not pre-release ones.
        assert!(Version::parse("1.2.3+001").is_ok());
        assert!(Version::parse("1.2.3-0a.1").is_ok());
    }

    #[test]
    fn inputs_carry_config_version_and_url() {
        let config: BTreeMap<String, PropertyValue> = [
            ("aws:region".to_owned(), PropertyValue::from("us-west-2")),
            ("aws:skipChecks".to_owned(), PropertyValue::from("true")),
            ("gcp:project".to_owned(), PropertyValue::from("p")),
            ("shop:env".to_owned(), PropertyValue::from("prod")),
        ]
        .into();
        let r = DefaultProviderRequest::new("aws", None, None).expect("request");
        assert_eq!(
            r.inputs(&config),
            PropertyMap::from([
                ("region".to_owned(), PropertyValue::from("us-west-2")),
                ("skipChecks".to_owned(), PropertyValue::from("true")),
            ])
        );
        let r = DefaultProviderRequest::new("aws", Some("6.0.0"), None).expect("request");
        let inputs = r.inputs(&BTreeMap::new());
        assert_eq!(inputs["version"], PropertyValue::from("6.0.0"));
        assert_eq!(
            inputs[INTERNAL_KEY],
            PropertyValue::Object(PropertyMap::new())
        );
        assert_eq!(config_of(&inputs).len(), 1);
        let r = DefaultProviderRequest::new("aws", None, Some("https://x/")).expect("request");
        let inputs = r.inputs(&BTreeMap::new());
        assert_eq!(
            inputs[INTERNAL_KEY],
            PropertyValue::Object(PropertyMap::from([(
                DOWNLOAD_URL_KEY.to_owned(),
                PropertyValue::from("https://x")
            )]))
        );
        assert!(!inputs.contains_key("version"));
        // One provider per package, version and URL.
        let key = |v: Option<&str>| {
            DefaultProviderRequest::new("aws", v, None)
                .expect("request")
                .key()
                .into_owned()
        };
        assert_ne!(key(None), key(Some("1.0.0")));
        assert_eq!(key(Some("1.0.0")), key(Some("1.0.0")));
    }

    /// A replacement parameterization is named by the package's version
    /// and recorded as Pulumi records it; reading the record back gives
    /// the declaration again.
    #[test]
    fn parameterized_requests_round_trip_through_their_inputs() {
        use crate::provider::package::{PackageDecl, Parameterization};
        let decl = PackageDecl {
            name: "terraform-provider".into(),
            version: Some("0.8.0".into()),
            download_url: None,
            parameterization: Some(Parameterization {
                name: "netlify".into(),
                version: "2.1.0".into(),
                value: b"registry/netlify".to_vec(),
            }),
            extension: None,
        };
        // The registration's own version gives way to the declaration's.
        let r = DefaultProviderRequest::new("netlify", Some("9.9.9"), None)
            .and_then(|r| r.declared(&decl))
            .expect("request");
        assert_eq!(r.name(), "default_2_1_0");
        let inputs = r.inputs(&BTreeMap::new());
        assert_eq!(inputs["version"], PropertyValue::from("2.1.0"));
        assert_eq!(
            inputs[INTERNAL_KEY],
            PropertyValue::Object(PropertyMap::from([
                (
                    NAME_KEY.to_owned(),
                    PropertyValue::from("terraform-provider")
                ),
                (VERSION_KEY.to_owned(), PropertyValue::from("0.8.0")),
                (
                    PARAMETERIZATION_KEY.to_owned(),
                    PropertyValue::from("cmVnaXN0cnkvbmV0bGlmeQ==")
                ),
            ]))
        );
        assert_eq!(declaration_in("netlify", &inputs), Some(decl.clone()));
        // Another package's declaration, or none, changes nothing.
        let plain = DefaultProviderRequest::new("aws", Some("6.0.0"), None).expect("request");
        assert_eq!(plain.clone().declared(&decl).expect("request"), plain);
        assert_eq!(declaration_in("aws", &plain.inputs(&BTreeMap::new())), None);
        // A record that is not well formed is an ordinary provider.
        let mut broken = inputs.clone();
        if let Some(PropertyValue::Object(internal)) = broken.get_mut(INTERNAL_KEY) {
            internal.insert(PARAMETERIZATION_KEY.into(), PropertyValue::from("!!"));
        }
        assert_eq!(declaration_in("netlify", &broken), None);
        // A declared version that is not a version is an error.
        let mut bad = decl;
        bad.version = Some("latest".into());
        assert!(DefaultProviderRequest::new("netlify", None, None)
            .expect("request")
            .declared(&bad)
            .is_err());
    }
}
