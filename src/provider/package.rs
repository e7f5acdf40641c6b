//! Package declarations (Pulumi's `packageDeclarationVersion: 1` files,
//! such as a Pulumi YAML project's `sdks/<name>.yaml`): which plugin serves
//! a package, at which version, and the parameterization that turns a base
//! plugin into the package (a *replacement*, which serves the package
//! under its own name, or an *extension*, which adds to the base package
//! under the base's name).

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// A parameterization of a base plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parameterization {
    /// The parameterized package's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The parameter the plugin is given (decoded from base64).
    pub value: Vec<u8>,
}

/// A package declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageDecl {
    /// The base plugin's name.
    pub name: String,
    /// The base plugin's version.
    pub version: Option<String>,
    /// Where the plugin is downloaded from.
    pub download_url: Option<String>,
    /// A replacement parameterization.
    pub parameterization: Option<Parameterization>,
    /// An extension parameterization.
    pub extension: Option<Parameterization>,
}

impl PackageDecl {
    /// The name the package's tokens start with: the replacement's name,
    /// else the base plugin's.
    pub fn namespace(&self) -> &str {
        self.parameterization
            .as_ref()
            .map_or(&self.name, |p| &p.name)
    }

    /// The parameterization, replacement or extension.
    pub fn parameter(&self) -> Option<&Parameterization> {
        self.parameterization.as_ref().or(self.extension.as_ref())
    }

    /// Reads a declaration from the text of a YAML file: `Ok(None)` when
    /// the text is not a package declaration (not YAML, or no
    /// `packageDeclarationVersion: 1`), as Pulumi skips such files.
    ///
    /// # Errors
    /// A declaration that is invalid: no name, both a parameterization and
    /// an extension, a parameterization without name or version, or a
    /// value that is not base64.
    pub fn parse(text: &str) -> Result<Option<Self>, String> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Param {
            #[serde(default)]
            name: String,
            #[serde(default)]
            version: String,
            #[serde(default)]
            value: String,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Raw {
            package_declaration_version: Option<i64>,
            #[serde(default)]
            name: String,
            version: Option<String>,
            download_url: Option<String>,
            parameterization: Option<Param>,
            extension: Option<Param>,
        }
        let Ok(raw) = serde_norway::from_str::<Raw>(text) else {
            return Ok(None);
        };
        if raw.package_declaration_version != Some(1) {
            return Ok(None);
        }
        if raw.name.is_empty() {
            return Err("a package declaration needs a `name`".into());
        }
        if raw.parameterization.is_some() && raw.extension.is_some() {
            return Err(format!(
                "package `{}` declares both a `parameterization` and an `extension`; keep one",
                raw.name
            ));
        }
        let param = |p: Option<Param>, what: &str| -> Result<Option<Parameterization>, String> {
            let Some(p) = p else { return Ok(None) };
            if p.name.is_empty() || p.version.is_empty() {
                return Err(format!(
                    "the {what} of package `{}` needs a `name` and a `version`",
                    raw.name
                ));
            }
            let value = base64::engine::general_purpose::STANDARD
                .decode(p.value.as_bytes())
                .map_err(|e| {
                    format!(
                        "the {what} value of package `{}` is not base64: {e}",
                        raw.name
                    )
                })?;
            Ok(Some(Parameterization {
                name: p.name,
                version: p.version,
                value,
            }))
        };
        let parameterization = param(raw.parameterization, "parameterization")?;
        let extension = param(raw.extension, "extension")?;
        Ok(Some(Self {
            name: raw.name,
            version: raw.version.filter(|v| !v.is_empty()),
            download_url: raw.download_url.filter(|v| !v.is_empty()),
            parameterization,
            extension,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a text reads as: not a declaration, one with this namespace
    /// and parameter value, or an error containing this text.
    type Want<'a> = Result<Option<(&'a str, Option<&'a [u8]>)>, &'a str>;

    fn check(text: &str, want: Want<'_>) {
        let got = PackageDecl::parse(text);
        match (got, want) {
            (Ok(None), Ok(None)) => {}
            (Ok(Some(d)), Ok(Some((ns, value)))) => {
                assert_eq!(d.namespace(), ns, "{text}");
                assert_eq!(d.parameter().map(|p| p.value.as_slice()), value, "{text}");
            }
            (Err(e), Err(want)) => assert!(e.contains(want), "{e}"),
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn declarations() {
        check("name: aws\nversion: 6.0.0\n", Ok(None));
        check("not: [yaml", Ok(None));
        check(
            "packageDeclarationVersion: 1\nname: aws\n",
            Ok(Some(("aws", None))),
        );
        check(
            "packageDeclarationVersion: 1\nname: base\nparameterization:\n  name: sub\n  version: 2.0.0\n  value: SGk=\n",
            Ok(Some(("sub", Some(b"Hi")))),
        );
        check(
            "packageDeclarationVersion: 1\nname: base\nextension:\n  name: ext\n  version: 1.0.0\n  value: SGk=\n",
            Ok(Some(("base", Some(b"Hi")))),
        );
        check(
            "packageDeclarationVersion: 1\nversion: 1.0.0\n",
            Err("needs a `name`"),
        );
        check(
            "packageDeclarationVersion: 1\nname: b\nparameterization: {name: s, version: '1', value: a}\nextension: {name: e, version: '1', value: a}\n",
            Err("both"),
        );
        check(
            "packageDeclarationVersion: 1\nname: b\nparameterization: {name: s, value: SGk=}\n",
            Err("needs a `name` and a `version`"),
        );
        check(
            "packageDeclarationVersion: 1\nname: b\nextension: {name: s, version: '1', value: '!!'}\n",
            Err("not base64"),
        );
    }
}
