//! `flipside reranker …`

use anyhow::Result;
use clap::{Args, Subcommand};

use super::retriever::{PairTrainingArgs, report_training};
use crate::home::Home;
use crate::model_dirs::resolve_model_dir;
use crate::retrieval::cfdpr::write_training_pairs;
use crate::retrieval::reranker::reranker_dataset;
use crate::training::classifier::{Head, TrainConfig, TrainRun, train_classifier};
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
    pub training: PairTrainingArgs,
    /// Negatives per pair drawn from the other pairs' counterfactuals
    #[arg(long, default_value_t = 2)]
    pub random: usize,
}

pub fn run(home: &Home, command: RerankerCommand) -> Result<()> {
    match command {
        RerankerCommand::Train(args) => train(home, args),
    }
}

fn train(home: &Home, args: TrainArgs) -> Result<()> {
    let training = &args.training;
    let (pairs, validation) = training.load_pairs(home)?;
    let out = training.out(home, "reranker");
    let data = reranker_dataset(
        &pairs,
        &format!("reranker:{}", training.pairs.pairs),
        args.random,
        training.config.seed,
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
    let run = TrainRun {
        train: &data,
        encoder_dir: &resolve_model_dir(home, &training.encoder)?,
        out: &out,
        config: TrainConfig {
            head: Head::MeanPooled,
            ..training.config.config()
        },
        pause_after: training.run.pause_after,
    };
    let outcome = with_backend!(training.run.device, train_classifier(&run))?;
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
