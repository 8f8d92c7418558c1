//! `flipside lass …`: LASS's Dis-AE, and the options `generate` and `serve` load it with.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use flipside_shared::models::dis_ae::loss::Annealing;

use super::args::{DEFAULT_DIS_AE, FluencyArgs, OptimiserArgs, ResumableArgs, dis_ae_dir};
use super::classifier::report_pause;
use super::data::ReadArgs;
use crate::compute::DeviceChoice;
use crate::editing::items::{Selection, Unit, every_sentence, select_examples};
use crate::editing::keywords::Lexicons;
use crate::home::Home;
use crate::lass::evaluate::evaluate_dis_ae;
use crate::lass::model::read_config;
use crate::lass::train::{
    LabelledPair, LassTrainRun, corpus_train, default_model, opinion_masking, pair_train,
    train_lass,
};
use crate::model_dirs::{resolve_model_dir, write_atomic};
use crate::retrieval::cfdpr::{SeedPair, read_pairs};
use crate::with_backend;

#[derive(Debug, Subcommand)]
pub enum LassCommand {
    /// Train a Dis-AE: a subword vocabulary, the corpus-first stage on unpaired labelled texts
    /// (reconstruction and sentiment terms), then all of LASS's losses on LLM-made pairs
    /// (resumes if interrupted)
    ///
    /// Training defaults: the corpus stage 1 epoch at lr 1e-3, the pairs stage 20 epochs at lr
    /// 5e-4; batch 32, warm-up 0.01, gradient norm clipped to 5, seed 42, a checkpoint every 200
    /// steps.
    Train(Box<TrainArgs>),
    /// Evaluate a Dis-AE on held-out pairs (LASS's Table 4): ROUGE F1 of each side decoded
    /// from its own parts (reconstruction), from its content with the other side's sentiment
    /// (counterfactual reconstruction) and with the other label's vector (what `generate`
    /// decodes) against the side it should become, and the outputs' perplexity under the
    /// fluency model with the share the filter keeps
    Evaluate(EvaluateArgs),
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Unpaired labelled texts for the corpus-first stage: imdb[:split], rotten-tomatoes, or a
    /// CSV/TSV/JSONL/Parquet file (or Parquet/Arrow directory)[:split]; `none` skips the stage (the paper trains on pairs only)
    #[arg(long, default_value = "imdb:train")]
    pub data: String,
    /// Use the first N texts (after a seeded shuffle; 0: all)
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub limit: usize,
    /// Train on whole texts, or on each review's sentence that carries its label (as
    /// `generate --unit sentence` edits; sentiment data labelled negative/positive)
    #[arg(long, value_enum, default_value_t = Unit::Sentence)]
    pub unit: Unit,
    /// Skip texts with more words than this [default with --unit sentence: 40]
    #[arg(long, value_name = "N")]
    pub max_words: Option<usize>,
    /// With --unit sentence: every sentence of 6–40 words of each text, with its text's label,
    /// instead of the one that carries the label — several times more text for the
    /// autoencoder, with noisier sentiment labels (--limit counts sentences)
    #[arg(long)]
    pub every_sentence: bool,
    /// Minimal pairs of opposite sentiment: `pairs make` output (JSON lines of text, label,
    /// counterfactual), or `printed` (the papers' 22 printed pairs); without it the corpus
    /// stage's model is the result
    #[arg(long, value_name = "FILE|printed")]
    pub pairs: Option<String>,
    /// Passes over the pairs (--epochs: over the texts)
    #[arg(long, default_value_t = pair_train().epochs, value_name = "N")]
    pub pair_epochs: usize,
    /// Most ids of the subword vocabulary learnt from the texts and pairs
    #[arg(long, default_value_t = 8000, value_name = "IDS")]
    pub vocabulary: usize,
    /// Decode from the latent alone, as the paper does, instead of also attending to the
    /// content text with its opinion words (Liu and Hu's lexicons) masked
    #[arg(long)]
    pub no_copy: bool,
    /// A Gaussian posterior over the sentiment and content vectors, as Coop's BiMeanVAE:
    /// training decodes a draw and adds its KL divergence from N(0, I) (free bits 0.25, weight
    /// rising to 1 with α); generation reads the mean
    #[arg(long)]
    pub variational: bool,
    /// Texts of each label kept for `generate --sentiment parent`
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub sentiment_parents: usize,
    /// Output directory [default: HOME/models/dis-ae]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Start from a trained Dis-AE (a directory, or a name under HOME/models such as
    /// dis-ae-shipped): its vocabulary, sizes and weights, trained further on --pairs alone
    /// (with --data none)
    #[arg(long, value_name = "MODEL")]
    pub from: Option<String>,
    #[command(flatten)]
    pub run: ResumableArgs,
    #[command(flatten)]
    pub model: DisAeSizeArgs,
    #[command(flatten)]
    pub annealing: AnnealingArgs,
    #[command(flatten)]
    pub train: OptimiserArgs,
    #[command(flatten)]
    pub read: ReadArgs,
}

/// The Dis-AE's sizes (defaults: a model that trains on 2 CPU cores and downloads quickly).
#[derive(Debug, Args)]
#[command(next_help_heading = "Model size")]
pub struct DisAeSizeArgs {
    #[arg(long, default_value_t = default_model().d_embed)]
    pub d_embed: usize,
    /// Each direction of the encoder's BiLSTM
    #[arg(long, default_value_t = default_model().d_encoder)]
    pub d_encoder: usize,
    /// The sentiment and the content vector, each
    #[arg(long, default_value_t = default_model().d_latent)]
    pub d_latent: usize,
    #[arg(long, default_value_t = default_model().d_decoder)]
    pub d_decoder: usize,
}

/// The weights of Eq. 7, annealed from 0 over the first steps of each stage.
#[derive(Debug, Args)]
#[command(next_help_heading = "Loss weights")]
pub struct AnnealingArgs {
    /// Weight of the sentiment terms (L_e + L_n + L_r)
    #[arg(long, default_value_t = Annealing::default().alpha)]
    pub alpha: f64,
    /// Weight of the disentanglement distance (pairs)
    #[arg(long, default_value_t = Annealing::default().beta)]
    pub beta: f64,
    /// Weight of the counterfactual reconstruction (pairs)
    #[arg(long, default_value_t = Annealing::default().gamma)]
    pub gamma: f64,
    /// Steps over which the weights rise from 0 (at most the first quarter of each stage)
    #[arg(long, default_value_t = Annealing::default().ramp_steps)]
    pub ramp_steps: usize,
}

/// `lass evaluate`'s options.
#[derive(Debug, Args)]
pub struct EvaluateArgs {
    /// Held-out pairs of opposite sentiment (`pairs make` output), e.g. made from test texts
    #[arg(long, value_name = "FILE")]
    pub pairs: String,
    /// The Dis-AE to evaluate [default: HOME/models/dis-ae when `lass train` has finished one
    /// there, else the Dis-AE Flipside ships]
    #[arg(long, value_name = "DIR")]
    pub dis_ae: Option<String>,
    /// Evaluate the first N pairs only
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Also write the results as JSON to this file
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
    #[command(flatten)]
    pub fluency: FluencyArgs,
}

pub fn run(home: &Home, command: LassCommand) -> Result<()> {
    match command {
        LassCommand::Train(args) => train(home, *args),
        LassCommand::Evaluate(args) => evaluate(home, args),
    }
}

fn evaluate(home: &Home, args: EvaluateArgs) -> Result<()> {
    let dir = dis_ae_dir(home, args.dis_ae.as_deref())?;
    let labels = read_config(&dir)?.labels;
    let mut pairs = labelled_pairs(read_pairs(&args.pairs)?, &labels)?;
    pairs.truncate(args.limit.unwrap_or(usize::MAX));
    let fluency = args.fluency.load(home)?;
    let threshold = args.fluency.max_perplexity;
    let evaluation = with_backend!(
        args.device,
        evaluate_dis_ae(&dir, &pairs, fluency.as_deref(), threshold)
    )?;
    println!(
        "{} pairs, both directions, beam 4 ({})",
        evaluation.pairs,
        dir.display()
    );
    println!(
        "{:<26} {:>6} {:>6} {:>6} {:>6} {:>9} {:>17} {:>7}",
        "decoding", "R-1", "R-2", "R-L", "exact", "PPL mean", "PPL quartiles", "kept"
    );
    let copy = &evaluation.copy;
    println!(
        "{:<26} {:>6.1} {:>6.1} {:>6.1}",
        "source copied (baseline)", copy.rouge1, copy.rouge2, copy.rouge_l
    );
    for (name, scores) in [
        ("reconstruction", &evaluation.reconstruction),
        ("counterfactual (parent)", &evaluation.counterfactual),
        ("counterfactual (label)", &evaluation.label),
    ] {
        let (mean, quartiles, kept) = match &scores.perplexity {
            Some(p) => (
                format!("{:.1}", p.mean),
                format!(
                    "{:.0}/{:.0}/{:.0}",
                    p.quartiles[0], p.quartiles[1], p.quartiles[2]
                ),
                format!("{:.1}%", 100.0 * p.passing),
            ),
            None => ("—".into(), "—".into(), "—".into()),
        };
        println!(
            "{name:<26} {:>6.1} {:>6.1} {:>6.1} {:>5.1}% {mean:>9} {quartiles:>17} {kept:>7}",
            scores.rouge.rouge1,
            scores.rouge.rouge2,
            scores.rouge.rouge_l,
            100.0 * scores.exact
        );
    }
    if let Some(model) = &evaluation.fluency_model {
        println!("perplexity under {model} (outputs of 10+ characters); kept: at most {threshold}");
    }
    if let Some(path) = &args.json {
        write_atomic(path, &serde_json::to_vec_pretty(&evaluation)?)?;
    }
    Ok(())
}

fn train(home: &Home, args: TrainArgs) -> Result<()> {
    let train = |defaults| args.train.over(defaults);
    let texts = match args.data.as_str() {
        "none" => Vec::new(),
        spec if args.every_sentence => {
            if args.unit != Unit::Sentence {
                bail!("--every-sentence reads sentences: give --unit sentence (the default)");
            }
            let dataset = args.read.load(home, spec)?;
            let limit = (args.limit > 0).then_some(args.limit);
            every_sentence(&dataset, args.max_words, limit, train(corpus_train()).seed)
        }
        spec => {
            let dataset = args.read.load(home, spec)?;
            let selection = Selection {
                target: "flip".into(),
                limit: (args.limit > 0).then_some(args.limit),
                max_words: args.max_words,
                unit: args.unit,
                seed: train(corpus_train()).seed,
            };
            select_examples(&dataset, &selection, &Lexicons::load(home)?)?
                .into_iter()
                .map(|item| (item.text, item.label))
                .collect()
        }
    };
    let start = args
        .from
        .as_deref()
        .map(|model| resolve_model_dir(home, model))
        .transpose()?;
    let pairs = match &args.pairs {
        Some(spec) => {
            let pairs = read_pairs(spec)?;
            // The Dis-AE started from knows both labels when the pairs name one.
            let start_labels = match (&start, &args.read.labels) {
                (Some(dir), None) => Some(read_config(dir)?.labels),
                _ => None,
            };
            let known = args.read.labels.as_deref().or(start_labels.as_deref());
            let labels = pair_labels(&pairs, &texts, known);
            labelled_pairs(pairs, &labels)?
        }
        None => Vec::new(),
    };
    if texts.is_empty() && pairs.is_empty() {
        bail!("nothing to train on: give --pairs, or --data other than none");
    }
    let mut model = default_model();
    model.d_embed = args.model.d_embed;
    model.d_encoder = args.model.d_encoder;
    model.d_latent = args.model.d_latent;
    model.d_decoder = args.model.d_decoder;
    model.variational = args.variational;
    if !args.no_copy {
        model.copy = Some(opinion_masking(home)?);
    }
    let run = LassTrainRun {
        texts,
        pairs,
        model,
        vocabulary_size: args.vocabulary,
        corpus_train: train(corpus_train()),
        // --epochs is the corpus stage's; the pairs stage has --pair-epochs.
        pair_train: crate::training::classifier::TrainConfig {
            epochs: args.pair_epochs,
            ..train(pair_train())
        },
        annealing: Annealing {
            alpha: args.annealing.alpha,
            beta: args.annealing.beta,
            gamma: args.annealing.gamma,
            ramp_steps: args.annealing.ramp_steps,
            ..Annealing::default()
        },
        sentiment_parents: args.sentiment_parents,
        out: args
            .out
            .unwrap_or_else(|| home.models().join(DEFAULT_DIS_AE)),
        pause_after: args.run.pause_after,
        start,
    };
    let outcome = with_backend!(args.run.device, train_lass(&run))?;
    if report_pause(&outcome.outcome) {
        println!("(stage: {})", outcome.stage);
        return Ok(());
    }
    println!("model       {}", run.out.display());
    if let Some(report) = &outcome.report {
        println!(
            "parameters  {} (vocabulary {})",
            report.parameters, report.vocabulary_size
        );
        println!(
            "data        {} texts, {} pairs; {} texts or pair sides left out as longer than the model reads",
            report.texts, report.pairs, outcome.too_long
        );
        let losses = |losses: &[f64]| {
            losses
                .iter()
                .map(|l| format!("{l:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        if report.texts > 0 {
            println!(
                "corpus      {:.0} s, loss by epoch {}",
                report.corpus_seconds,
                losses(&report.corpus_losses)
            );
        }
        if report.pairs > 0 {
            println!(
                "pairs       {:.0} s, loss by epoch {}",
                report.pair_seconds,
                losses(&report.pair_losses)
            );
        }
    }
    Ok(())
}

/// The labels of `texts` and `pairs`, or `labels` if given, sorted.
fn pair_labels(
    pairs: &[SeedPair],
    texts: &[(String, String)],
    labels: Option<&[String]>,
) -> Vec<String> {
    let known: std::collections::BTreeSet<String> = match labels {
        Some(labels) => labels.iter().cloned().collect(),
        None => texts
            .iter()
            .map(|(_, label)| label.clone())
            .chain(pairs.iter().map(|p| p.label.clone()))
            .collect(),
    };
    known.into_iter().collect()
}

/// `pairs` with both sides' labels, of the two `labels`: the counterfactual's label is the
/// other one.
fn labelled_pairs(pairs: Vec<SeedPair>, labels: &[String]) -> Result<Vec<LabelledPair>> {
    let [a, b] = labels else {
        bail!(
            "LASS learns two sentiments, but the labels are {labels:?}; name both with --labels \
             A,B"
        );
    };
    pairs
        .into_iter()
        .map(|pair| {
            let other = match pair.label.as_str() {
                label if label == a.as_str() => b,
                label if label == b.as_str() => a,
                label => bail!("a pair has the label {label:?}, not {a:?} or {b:?}"),
            };
            Ok(LabelledPair {
                counterfactual_label: other.clone(),
                text: pair.text,
                label: pair.label,
                counterfactual: pair.counterfactual,
            })
        })
        .collect()
}
