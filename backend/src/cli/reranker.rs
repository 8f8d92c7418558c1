//! `flipside reranker …`

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::retriever::{HardNegativeArgs, PairsArgs, report_training, training_pairs};
use crate::compute::DeviceChoice;
use crate::home::Home;
use crate::models::{DEFAULT_ENCODER, resolve_model_dir};
use crate::retrieval::cfdpr::write_training_pairs;
use crate::retrieval::reranker::reranker_dataset;
use crate::train::{TrainConfig, TrainJob, train_classifier};
use crate::with_backend;

#[derive(Debug, Subcommand)]
pub enum RerankerCommand {
    /// Train a cross-encoder re-ranker (CORE §3.1): a binary classifier of (query, candidate)
    /// pairs on the seed pairs — the counterfactual is positive; the query itself, its
    /// paraphrase and other pairs' counterfactuals are negative. CORE trained 10 epochs at
    /// lr 2e-5 on thousands of MNLI pairs; on the ~100 printed pairs that left the re-ranker
    /// under-trained (it did not help), so the defaults are 20 epochs at 5e-5.
    #[command(
        mut_arg("epochs", |a| a.default_value("20")),
        mut_arg("lr", |a| a.default_value("5e-5")),
        mut_arg("max_len", |a| a.default_value("128")),
    )]
    Train(TrainArgs),
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub pairs: PairsArgs,
    #[command(flatten)]
    pub negatives: HardNegativeArgs,
    /// Negatives per pair drawn from the other pairs' counterfactuals
    #[arg(long, default_value_t = 2)]
    pub random: usize,
    /// The encoder the cross-encoder starts from
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub encoder: String,
    /// Output directory [default: HOME/models/reranker-PAIRS]
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Stop after this many steps (run the same command again to resume)
    #[arg(long, value_name = "STEPS")]
    pub pause_after: Option<usize>,
    #[command(flatten)]
    pub config: TrainConfig,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
}

pub fn run(home: &Home, command: RerankerCommand) -> Result<()> {
    match command {
        RerankerCommand::Train(args) => train(home, args),
    }
}

fn train(home: &Home, args: TrainArgs) -> Result<()> {
    let (pairs, validation) = training_pairs(home, &args.pairs, &args.negatives, args.device)?;
    let out = args.out.clone().unwrap_or_else(|| {
        home.models()
            .join(format!("reranker-{}", args.pairs.name()))
    });
    let data = reranker_dataset(
        &pairs,
        &format!("reranker:{}", args.pairs.pairs),
        args.random,
        args.config.seed,
    );
    let counts = data.label_counts();
    tracing::info!(
        "training a re-ranker on {} seed pairs ({} held out): {} positive and {} negative \
         (query, candidate) examples, into {}",
        pairs.len(),
        validation.len(),
        counts[1],
        counts[0],
        out.display()
    );
    let job = TrainJob {
        train: &data,
        encoder_dir: &resolve_model_dir(home, &args.encoder)?,
        out: &out,
        config: args.config.clone(),
        pause_after: args.pause_after,
    };
    let outcome = with_backend!(args.device, train_classifier(&job))?;
    if report_training(&outcome) {
        write_training_pairs(&out, &pairs)?;
        println!(
            "{}  (use it: flipside index search --rerank 10 --reranker {}; flipside retriever \
             eval --reranker {})",
            out.display(),
            out.display(),
            out.display()
        );
    }
    Ok(())
}
