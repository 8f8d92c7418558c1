//! The Flipside home directory: asset cache, trained models and run outputs.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::assets::{AssetCache, Manifest};

/// Flipside's home: `--home`, else `$FLIPSIDE_HOME`, else `~/.flipside`.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
    manifest: Manifest,
}

impl Home {
    /// The home at `root` (created on first write), using the embedded asset manifest.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            manifest: Manifest::embedded(),
        }
    }

    /// `explicit` if given (the `--home` flag, which clap also fills from `FLIPSIDE_HOME`),
    /// else `~/.flipside`.
    pub fn resolve(explicit: Option<PathBuf>) -> Result<Self> {
        let root = match explicit {
            Some(root) => root,
            None => std::env::home_dir()
                .context("cannot find the home directory: set FLIPSIDE_HOME or pass --home")?
                .join(".flipside"),
        };
        Ok(Self::new(root))
    }

    /// Replaces the asset manifest (for `--manifest`).
    pub fn with_manifest(mut self, manifest: Manifest) -> Self {
        self.manifest = manifest;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The cache of fetched assets.
    pub fn asset_cache(&self) -> AssetCache {
        AssetCache::new(self.root.join("assets"))
    }

    /// The directory of fetched asset `name`, or an error saying how to fetch it.
    pub fn asset(&self, name: &str) -> Result<PathBuf> {
        self.asset_cache().require(self.manifest.get(name)?)
    }

    /// Where trained models are saved by default.
    pub fn models(&self) -> PathBuf {
        self.root.join("models")
    }
}
