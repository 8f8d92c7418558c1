//! `flipside retriever …`

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use flipside_shared::data::Input;

use super::args::ResumableArgs;
use super::corpus::CorpusArg;

use crate::compute::DeviceChoice;
use crate::home::Home;
use crate::model_dirs::{DEFAULT_ENCODER, resolve_model_dir};
use crate::retrieval::cfdpr::{
    RetrieverRun, SeedPair, read_pairs, sentence_pairs, train_retriever, with_reverses,
    write_training_pairs,
};
use crate::retrieval::encoders::RetrieverEncoders;
use crate::retrieval::evaluate::{
    candidate_counts, ranking_cases, ranking_score, ranks, reranked_ranks, retriever_scores,
    split_pairs,
};
use crate::retrieval::index::{SentenceIndex, embed_queries, index_dir};
use crate::retrieval::negatives::mine_paraphrases;
use crate::training::classifier::TrainOutcome;
use crate::with_backend;

#[derive(Debug, Subcommand)]
pub enum RetrieverCommand {
    /// Train a CF-DPR retriever (query and document encoders from MiniLM) on seed
    /// counterfactual pairs, with CORE's contrastive loss (Eq. 1). Defaults follow CORE's
    /// Table 9 (96 tokens, batch 16, lr 2e-5, weight decay 0.01, gradient norm 2), with fewer
    /// epochs (CPU).
    #[command(
        mut_arg("epochs", |a| a.default_value("20")),
        mut_arg("lr", |a| a.default_value("2e-5")),
        mut_arg("max_grad_norm", |a| a.default_value("2")),
        mut_arg("max_len", |a| a.default_value("96")),
        mut_arg("warmup", |a| a.default_value("0.05")),
    )]
    Train(TrainArgs),
    /// Rank each validation pair's counterfactual among random and hard negative corpus
    /// sentences (CORE Appendix A) with each retriever; report top-1 accuracy and MRR
    Eval(EvalArgs),
}

/// Which seed pairs, and which of them are held out for validation.
#[derive(Debug, Clone, Args)]
pub struct PairsArgs {
    /// Seed pairs: `printed` (the pairs printed in the CORE and LASS papers) or a JSON-lines
    /// file of {"text", "label", "counterfactual"[, "paraphrase"][, "premise"]}
    #[arg(long, default_value = "printed")]
    pub pairs: String,
    /// Keep review pairs whole instead of cutting them into the sentences the edit changed
    #[arg(long)]
    pub whole: bool,
    /// Use the pairs only in their given direction (by default each pair is also used
    /// reversed: the original is a counterfactual of its counterfactual)
    #[arg(long)]
    pub one_way: bool,
    /// Fraction of reviews (with all their sentence pairs) held out for `retriever eval`
    #[arg(long, default_value_t = 0.25)]
    pub validation: f64,
    /// Seed of the train/validation split
    #[arg(long, default_value_t = 0)]
    pub split_seed: u64,
}

impl PairsArgs {
    /// A short name of the pairs (`printed`, or the file's stem), for default model names.
    pub fn name(&self) -> String {
        std::path::Path::new(&self.pairs)
            .file_stem()
            .map_or_else(|| self.pairs.clone(), |s| s.to_string_lossy().into_owned())
    }

    /// The training and validation pairs.
    pub fn load(&self) -> Result<(Vec<SeedPair>, Vec<SeedPair>)> {
        let pairs = read_pairs(&self.pairs)?;
        let pairs = if self.whole {
            pairs
        } else {
            sentence_pairs(&pairs)
        };
        let pairs = if self.one_way {
            pairs
        } else {
            with_reverses(pairs)
        };
        Ok(split_pairs(&pairs, self.validation, self.split_seed))
    }
}

/// Where training pairs without a paraphrase get their paraphrase hard negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ParaphraseSource {
    /// The nearest sentence, under untrained MiniLM, from a corpus review with the pair's label
    Corpus,
    /// No paraphrase: the query text itself is the only hard negative
    None,
}

/// How training pairs get their hard negatives.
#[derive(Debug, Clone, Args)]
pub struct HardNegativeArgs {
    /// Paraphrase hard negatives for pairs that bring none, mined from `--corpus` (which needs
    /// a `minilm` index); CORE used a paraphrase of each query and the query itself
    #[arg(long, value_enum, default_value_t = ParaphraseSource::Corpus)]
    pub paraphrases: ParaphraseSource,
    /// The corpus (with a `minilm` index) that paraphrases are mined from
    #[command(flatten)]
    pub corpus: CorpusArg,
}

/// The training and validation pairs, the training pairs with mined paraphrases.
fn training_pairs(
    home: &Home,
    pairs: &PairsArgs,
    negatives: &HardNegativeArgs,
    device: DeviceChoice,
) -> Result<(Vec<SeedPair>, Vec<SeedPair>)> {
    let (mut train, validation) = pairs.load()?;
    if negatives.paraphrases == ParaphraseSource::None {
        return Ok((train, validation));
    }
    let corpus_dir = negatives.corpus.dir(home);
    let (index, vectors) = minilm_index_and_queries(home, &corpus_dir, &train, device)
        .map_err(|e| e.context("mining paraphrase hard negatives (or pass --paraphrases none)"))?;
    let hits = index.search(&vectors, 32, 64);
    let mined = mine_paraphrases(&mut train, &hits);
    if mined == 0
        && train
            .iter()
            .any(|p| p.paraphrase.is_none() && p.premise.is_none())
    {
        let mut labels: Vec<&str> = train.iter().map(|p| p.label.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        tracing::warn!(
            "no paraphrase mined: no sentence near the queries in {} comes from a review labelled \
             {labels:?} (only the built-in sources carry review labels)",
            corpus_dir.display()
        );
    }
    tracing::info!(
        "mined {mined} paraphrase hard negatives for {} training pairs from {}",
        train.len(),
        corpus_dir.display()
    );
    Ok((train, validation))
}

/// The `minilm` index of a corpus, and the MiniLM embeddings of the pairs' queries.
fn minilm_index_and_queries(
    home: &Home,
    corpus_dir: &std::path::Path,
    pairs: &[SeedPair],
    device: DeviceChoice,
) -> Result<(SentenceIndex, Vec<Vec<f32>>)> {
    let minilm = RetrieverEncoders::resolve(home, DEFAULT_ENCODER)?;
    let index = SentenceIndex::open(corpus_dir, &index_dir(corpus_dir, DEFAULT_ENCODER), &minilm)?;
    let queries: Vec<Input> = pairs.iter().map(SeedPair::query).collect();
    let vectors = with_backend!(
        device,
        embed_queries(&minilm, &queries.iter().collect::<Vec<_>>(), 32)
    )?;
    Ok((index, vectors))
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub pairs: PairsArgs,
    /// Retrievers to compare: model asset names, BERT directories or CF-DPR directories
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_ENCODER)]
    pub retrievers: Vec<String>,
    /// The corpus whose `minilm` index supplies random and hard negatives
    #[command(flatten)]
    pub corpus: CorpusArg,
    /// Random negatives per query
    #[arg(long, default_value_t = 30)]
    pub random: usize,
    /// Hard negatives per query (the nearest corpus sentences under untrained MiniLM)
    #[arg(long, default_value_t = 30)]
    pub hard: usize,
    /// Also rank with this re-ranker re-ordering each retriever's top `--rerank` candidates
    /// (a directory or a model name in the home's models/; `flipside reranker train`)
    #[arg(long, value_name = "MODEL")]
    pub reranker: Option<String>,
    /// Candidates the re-ranker re-orders
    #[arg(long, default_value_t = 10, value_name = "K")]
    pub rerank: usize,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub training: PairTrainingArgs,
    /// One encoder for queries and documents instead of two
    #[arg(long)]
    pub shared: bool,
    /// Inverse temperature of the loss (similarities are cosines)
    #[arg(long, default_value_t = 20.0)]
    pub scale: f32,
}

/// What every command that trains on seed pairs takes.
#[derive(Debug, Args)]
pub struct PairTrainingArgs {
    #[command(flatten)]
    pub pairs: PairsArgs,
    #[command(flatten)]
    pub negatives: HardNegativeArgs,
    /// The encoder training starts from
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub encoder: String,
    /// Output directory [default: HOME/models/KIND-PAIRS, e.g. cf-dpr-printed]
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub config: super::classifier::TrainConfigArgs,
    #[command(flatten)]
    pub run: ResumableArgs,
}

impl PairTrainingArgs {
    /// The output directory: `--out`, or `HOME/models/KIND-PAIRS`.
    pub fn out(&self, home: &Home, kind: &str) -> PathBuf {
        self.out
            .clone()
            .unwrap_or_else(|| home.models().join(format!("{kind}-{}", self.pairs.name())))
    }

    /// The training pairs (with mined paraphrases) and the held-out validation pairs.
    pub fn load_pairs(&self, home: &Home) -> Result<(Vec<SeedPair>, Vec<SeedPair>)> {
        training_pairs(home, &self.pairs, &self.negatives, self.run.device)
    }
}

pub fn run(home: &Home, command: RetrieverCommand) -> Result<()> {
    match command {
        RetrieverCommand::Train(args) => train(home, args),
        RetrieverCommand::Eval(args) => eval(home, args),
    }
}

fn eval(home: &Home, args: EvalArgs) -> Result<()> {
    let (_, validation) = args.pairs.load()?;
    if validation.is_empty() {
        bail!("no validation pairs: raise --validation");
    }
    let corpus_dir = args.corpus.dir(home);
    let (index, vectors) = minilm_index_and_queries(home, &corpus_dir, &validation, args.device)?;
    let cases = ranking_cases(
        &validation,
        &index,
        &vectors,
        args.random,
        args.hard,
        args.seed,
    );
    println!(
        "{} validation pairs of {}, each counterfactual ranked among up to {} random and {} hard \
         negatives from {}",
        cases.len(),
        args.pairs.pairs,
        args.random,
        args.hard,
        corpus_dir.display()
    );
    let reranker = args
        .reranker
        .as_deref()
        .map(|name| resolve_model_dir(home, name))
        .transpose()?;
    println!("\n| retriever | top-1 | MRR | queries | candidates |\n|---|---:|---:|---:|---:|");
    let row = |name: &str, ranks: &[usize]| {
        let score = ranking_score(ranks, &candidate_counts(&cases));
        println!(
            "| {name} | {:.3} | {:.3} | {} | {:.1} |",
            score.top1, score.mrr, score.queries, score.candidates_per_query
        );
    };
    for name in &args.retrievers {
        let encoders = RetrieverEncoders::resolve(home, name)?;
        let scores = with_backend!(args.device, retriever_scores(&encoders, &cases))?;
        row(name, &ranks(&scores));
        if let Some(dir) = &reranker {
            let reranked = with_backend!(
                args.device,
                reranked_ranks(dir, &cases, &scores, args.rerank)
            )?;
            row(
                &format!("{name} + re-ranker (top {})", args.rerank),
                &reranked,
            );
        }
    }
    Ok(())
}

fn train(home: &Home, args: TrainArgs) -> Result<()> {
    let training = &args.training;
    let (pairs, validation) = training.load_pairs(home)?;
    let source = &training.pairs.pairs;
    let out = training.out(home, "cf-dpr");
    let encoder_dir = resolve_model_dir(home, &training.encoder)?;
    tracing::info!(
        "training CF-DPR on {} seed pairs from {source} ({} held out for validation) into {}",
        pairs.len(),
        validation.len(),
        out.display()
    );
    let run = RetrieverRun {
        pairs: &pairs,
        pairs_name: source,
        encoder_dir: &encoder_dir,
        out: &out,
        config: training.config.config(),
        shared: args.shared,
        scale: args.scale,
        pause_after: training.run.pause_after,
    };
    let outcome = with_backend!(training.run.device, train_retriever(&run))?;
    if report_training(&outcome) {
        write_training_pairs(&out, &pairs)?;
        println!(
            "{}  (index a corpus with it: flipside index build --encoder {})",
            out.display(),
            out.display()
        );
    }
    Ok(())
}

/// Logs how a training run ended; returns whether it finished (rather than paused).
pub(super) fn report_training(outcome: &TrainOutcome) -> bool {
    let record = &outcome.record;
    if outcome.paused {
        tracing::info!(
            "paused at step {} of {}; run the same command to continue",
            record.step,
            record.total_steps
        );
        return false;
    }
    let epochs = record.epoch_losses(record.steps_per_epoch());
    tracing::info!(
        "trained in {:.0} s; loss per epoch: first {:.3}, last {:.3}",
        record.train_seconds,
        epochs.first().copied().unwrap_or_default(),
        epochs.last().copied().unwrap_or_default()
    );
    true
}
