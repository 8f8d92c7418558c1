//! `flipside assets …`

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;

use crate::assets::{AssetStatus, Clients, FetchOutcome, Manifest};
use crate::home::Home;

#[derive(Debug, Subcommand)]
pub enum AssetsCommand {
    /// Download assets into the cache (all when no name is given); present ones are skipped
    Fetch {
        /// Asset names (see `flipside assets list`)
        names: Vec<String>,
        /// Download again even if present
        #[arg(long)]
        force: bool,
        /// Use this asset manifest (TOML) instead of the built-in one
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
    },
    /// List the assets with their status and location
    List {
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
    },
    /// Re-hash fetched assets against the manifest (all fetched ones when no name is given)
    Verify {
        names: Vec<String>,
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
    },
}

fn with_manifest(home: &Home, manifest: Option<PathBuf>) -> Result<Home> {
    Ok(match manifest {
        None => home.clone(),
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            home.clone().with_manifest(
                Manifest::parse(&text).with_context(|| format!("in {}", path.display()))?,
            )
        }
    })
}

pub fn run(home: &Home, command: AssetsCommand) -> Result<()> {
    match command {
        AssetsCommand::Fetch {
            names,
            force,
            manifest,
        } => {
            let home = with_manifest(home, manifest)?;
            let cache = home.asset_cache();
            let assets = selected(&home, &names)?;
            let clients = Clients::from_env();
            for asset in assets {
                match cache.fetch(asset, &clients, force)? {
                    FetchOutcome::AlreadyPresent => {
                        println!(
                            "{:<20} already present in {}",
                            asset.name,
                            cache.dir(asset).display()
                        )
                    }
                    FetchOutcome::Fetched { bytes } => println!(
                        "{:<20} fetched {:.1} MB, sha256 verified, in {}",
                        asset.name,
                        bytes as f64 / 1e6,
                        cache.dir(asset).display()
                    ),
                }
            }
            Ok(())
        }
        AssetsCommand::List { manifest } => {
            let home = with_manifest(home, manifest)?;
            let cache = home.asset_cache();
            for asset in &home.manifest().assets {
                let status = match cache.status(asset) {
                    AssetStatus::Ready => "ready  ",
                    AssetStatus::Missing => "missing",
                };
                let packages: Vec<String> =
                    asset.packages().iter().map(|p| p.to_string()).collect();
                let source = match packages.as_slice() {
                    [one] => one.clone(),
                    many => format!("{} … ({} packages)", many[0], many.len()),
                };
                println!("{:<20} {status} {}", asset.name, asset.description);
                println!("{:<20}         from {source}", "");
                if status.starts_with("ready") {
                    println!("{:<20}         at {}", "", cache.dir(asset).display());
                }
            }
            Ok(())
        }
        AssetsCommand::Verify { names, manifest } => {
            let home = with_manifest(home, manifest)?;
            let cache = home.asset_cache();
            let assets = if names.is_empty() {
                home.manifest()
                    .assets
                    .iter()
                    .filter(|a| cache.status(a) == AssetStatus::Ready)
                    .collect()
            } else {
                selected(&home, &names)?
            };
            for asset in assets {
                cache.verify(asset)?;
                println!("{:<20} ok", asset.name);
            }
            Ok(())
        }
    }
}

fn selected<'a>(home: &'a Home, names: &[String]) -> Result<Vec<&'a crate::assets::Asset>> {
    if names.is_empty() {
        return Ok(home.manifest().assets.iter().collect());
    }
    names.iter().map(|n| home.manifest().get(n)).collect()
}
