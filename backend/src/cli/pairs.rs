//! `flipside pairs …`: seed pairs for training retrievers and re-rankers.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use crate::pipeline::store::read_repairing;
use crate::retrieval::cfdpr::SeedPair;
use flipside_shared::records::Counterfactual;

#[derive(Debug, Subcommand)]
pub enum PairsCommand {
    /// Seed pairs from LLM counterfactuals (`flipside generate` output): keeps the edits the
    /// classifier says flipped, as (text, label, counterfactual) pairs for `retriever train
    /// --pairs` and `reranker train --pairs`
    Make(MakeArgs),
}

#[derive(Debug, Args)]
pub struct MakeArgs {
    /// Counterfactual files written by `flipside generate`
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Keep only edits whose target label has at least this classifier probability
    #[arg(long, default_value_t = 0.5, value_name = "P")]
    pub min_probability: f32,
    /// Output JSON-lines file of seed pairs
    #[arg(short, long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(command: PairsCommand) -> Result<()> {
    let PairsCommand::Make(args) = command;
    let mut pairs = Vec::new();
    let mut seen = 0;
    for file in &args.files {
        let records: Vec<Counterfactual> = read_repairing(file)?;
        seen += records.len();
        pairs.extend(
            records
                .into_iter()
                .filter(|r| r.flipped && r.target_probability >= args.min_probability)
                .map(|r| SeedPair {
                    id: Some(r.key),
                    text: r.original,
                    premise: r.premise,
                    label: r.label,
                    counterfactual: r.edited,
                    paraphrase: None,
                }),
        );
    }
    if pairs.is_empty() {
        bail!("none of the {seen} counterfactuals flipped the classifier: no pair to write");
    }
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&args.out)
            .with_context(|| format!("cannot create {}", args.out.display()))?,
    );
    for pair in &pairs {
        serde_json::to_writer(&mut out, pair)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    eprintln!(
        "{} of {seen} counterfactuals flipped the classifier (p ≥ {}): pairs written",
        pairs.len(),
        args.min_probability
    );
    println!("{}", args.out.display());
    Ok(())
}
