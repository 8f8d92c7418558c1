//! `flipside compact`

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::home::Home;
use crate::model_dirs::{compact_model_dir, resolve_model_dir};

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// The model: a directory, a model in HOME/models, or a model asset
    #[arg(long)]
    pub model: String,
    /// Where the compact copy goes (created if missing; files of the same names are replaced)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Significant bits per weight (2–8): each still takes a byte, but fewer compress better
    /// under gzip (the server sends the classifier with 7, the Dis-AE with 8)
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=8))]
    pub bits: u32,
}

/// Writes the compact copy and says how much smaller its weights are.
pub fn run(home: &Home, args: CompactArgs) -> Result<()> {
    let from = resolve_model_dir(home, &args.model)?;
    let done = compact_model_dir(&from, &args.out, args.bits)?;
    let (full, small) = done.weights_bytes;
    println!(
        "{} → {}: model.safetensors {:.1} MB → {:.1} MB (int8 rows of {} bits with f32 scales; \
         {} other files copied)",
        from.display(),
        args.out.display(),
        full as f64 / 1e6,
        small as f64 / 1e6,
        args.bits,
        done.copied
    );
    Ok(())
}
