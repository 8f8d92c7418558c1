//! `flipside infiller …`: the T5 that AutoCAD's editor rewrites rationales with.

use std::path::PathBuf;

use anyhow::Result;
use burn::tensor::backend::Backend;
use clap::{Args, Subcommand};

use super::args::{DEFAULT_CLASSIFIER, OptimiserArgs, ResumableArgs, RetrievalArgs};
use super::classifier::report_pause;
use super::data::ReadArgs;
use super::values::Rationales;
use crate::compute::{Compute, DeviceChoice};
use crate::editing::items::{Selection, Unit, select_examples, task_of};
use crate::editing::keywords::Lexicons;
use crate::home::Home;
use crate::infiller::pretrain::{PretrainRun, default_model, default_out, default_train, pretrain};
use crate::infiller::rationales::RationaleSettings;
use crate::infiller::shipped::{infiller_dir, trained_or_shipped};
use crate::infiller::train::{
    InfillTrainRun, KeywordGuidance, default_train as infill_defaults, train_infiller,
};
use crate::infiller::{T5_TOKENIZER_ASSET, load_infiller, read_tokenizer};
use crate::methods::EditSettings;
use crate::model_dirs::resolve_model_dir;
use crate::retrieval::corpus::corpus_dir;
use crate::with_backend;

#[derive(Debug, Subcommand)]
pub enum InfillerCommand {
    /// Mean per-token log-likelihood of a target given an input (teacher forcing)
    Score(ScoreArgs),
    /// Pretrain a T5 from scratch by span corruption on corpus sentences (resumes if interrupted)
    ///
    /// Training defaults: 1 epoch, batch 32, lr 1e-3, warm-up 0.02, weight decay 0.01, max
    /// length 64, seed 42, a checkpoint every 200 steps.
    Pretrain(PretrainArgs),
    /// Train label-controlled infilling on classifier rationales, MLE + α·unlikelihood (AutoCAD)
    ///
    /// Training defaults: 3 epochs, batch 16, lr 3e-4, no warm-up, weight decay 0.1, max length
    /// 128, seed 42, a checkpoint every 100 steps; the epoch with the lowest validation loss is
    /// kept.
    Train(Box<TrainArgs>),
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Training data: imdb[:split], rotten-tomatoes, or a CSV/TSV/JSONL/Parquet file (or Parquet/Arrow directory)[:split]
    #[arg(long, default_value = "imdb:train")]
    pub data: String,
    /// Use the first N examples (after a seeded shuffle; 0: all). The default, 1,000 IMDb
    /// sentences for 3 epochs, trains in about 7 minutes (MLE) or 13 (with unlikelihood) on 2
    /// CPU cores
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub limit: usize,
    /// Skip examples with more words than this
    #[arg(long, value_name = "N")]
    pub max_words: Option<usize>,
    /// Train on whole texts, or on each review's sentence that carries its label (as `generate
    /// --unit sentence` edits; sentiment data labelled negative/positive)
    #[arg(long, value_enum, default_value_t = Unit::Sentence)]
    pub unit: Unit,
    /// The classifier whose saliency marks the rationales (a directory or a name under
    /// HOME/models); its label names are the label words
    #[arg(long, default_value = DEFAULT_CLASSIFIER, value_name = "MODEL")]
    pub classifier: String,
    /// The T5 to start from: `infiller pretrain`'s output, any Hugging Face T5 directory or a
    /// trained infiller [default: HOME/models/infiller-pretrained when it exists, else the
    /// infiller Flipside ships]
    #[arg(long, value_name = "DIR")]
    pub base: Option<String>,
    /// Which words are masked
    #[arg(long, value_enum, default_value_t = Rationales::Saliency)]
    pub rationales: Rationales,
    /// Weight of the unlikelihood loss (AutoCAD: 0.3 sentiment, 1 NLI; 0 = MLE only)
    #[arg(long, default_value_t = 0.3)]
    pub alpha: f64,
    /// Fraction of the examples held out to pick the best epoch
    #[arg(long, default_value_t = 0.1)]
    pub validation: f64,
    /// Output directory [default: HOME/models/infiller]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: ResumableArgs,
    /// Retrieval-guided infilling (for `generate --method autocad-retrieval`): an input also
    /// gets the keywords of corpus sentences retrieved for the example with its own label (all
    /// but --keyword-free of them; the options under Retrieval say how)
    #[arg(long)]
    pub retrieval: bool,
    /// Most keywords in an input (with --retrieval; keep `generate --max-keywords` the same)
    #[arg(long, default_value_t = EditSettings::default().max_keywords)]
    pub max_keywords: usize,
    /// With --retrieval, the share of examples trained without keywords, so that the infiller
    /// serves the plain autocad method too (0: every example gets keywords)
    #[arg(long, value_name = "FRACTION", default_value_t = 0.5)]
    pub keyword_free: f64,
    #[command(flatten)]
    pub retrieval_options: RetrievalArgs,
    #[command(flatten)]
    pub train: OptimiserArgs,
    #[command(flatten)]
    pub read: ReadArgs,
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// A Hugging Face T5 directory (config.json, model.safetensors; tokenizer.json optional)
    #[arg(long)]
    pub model: String,
    /// The encoder input, e.g. "the film was <extra_id_0> . negative"
    #[arg(long)]
    pub input: String,
    /// The target, e.g. "<extra_id_0> awful"
    #[arg(long)]
    pub target: String,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
}

#[derive(Debug, Args)]
pub struct PretrainArgs {
    /// Corpus to pretrain on: a name under <home>/corpora (from `corpus build`) or a directory
    #[arg(long, default_value = "movies")]
    pub corpus: String,
    /// Pretrain on at most this many sentences (0: all). The default took 72 minutes on 2 CPU
    /// cores with the default model (held-out loss 3.65)
    #[arg(long, value_name = "N", default_value_t = 40_000)]
    pub limit: usize,
    /// Sentences held out to measure the span-corruption loss
    #[arg(long, default_value_t = 500)]
    pub held_out: usize,
    /// Output directory [default: <home>/models/infiller-pretrained]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: ResumableArgs,
    #[command(flatten)]
    pub model: ModelSizeArgs,
    #[command(flatten)]
    pub corruption: CorruptionArgs,
    #[command(flatten)]
    pub train: OptimiserArgs,
}

/// The model's size (T5 v1.1's shape; defaults: a model that pretrains on 2 CPU cores).
#[derive(Debug, Args)]
#[command(next_help_heading = "Model size")]
pub struct ModelSizeArgs {
    #[arg(long, default_value_t = default_model(32128).d_model)]
    pub d_model: usize,
    #[arg(long, default_value_t = default_model(32128).d_ff)]
    pub d_ff: usize,
    /// Encoder and decoder layers each
    #[arg(long, default_value_t = default_model(32128).num_layers)]
    pub layers: usize,
    #[arg(long, default_value_t = default_model(32128).num_heads)]
    pub heads: usize,
    #[arg(long, default_value_t = default_model(32128).d_kv)]
    pub d_kv: usize,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Span corruption")]
pub struct CorruptionArgs {
    /// Fraction of each sentence's tokens masked
    #[arg(long, default_value_t = 0.15)]
    pub noise_density: f64,
    /// Mean masked span length, in tokens
    #[arg(long, default_value_t = 3.0)]
    pub mean_span: f64,
}

pub fn run(home: &Home, command: InfillerCommand) -> Result<()> {
    match command {
        InfillerCommand::Score(args) => {
            let dir = resolve_model_dir(home, &args.model)?;
            let (mean, tokens) =
                with_backend!(args.device, score(home, &dir, &args.input, &args.target))?;
            println!("mean log-likelihood {mean:.6} over {tokens} target tokens");
            Ok(())
        }
        InfillerCommand::Pretrain(args) => run_pretrain(home, args),
        InfillerCommand::Train(args) => run_train(home, *args),
    }
}

fn score<B: Backend>(
    compute: Compute<B>,
    home: &Home,
    dir: &std::path::Path,
    input: &str,
    target: &str,
) -> Result<(f64, usize)> {
    load_infiller::<B>(home, dir, &compute.device)?.score(input, target)
}

fn run_pretrain(home: &Home, args: PretrainArgs) -> Result<()> {
    let tokenizer_json = std::fs::read(home.asset(T5_TOKENIZER_ASSET)?.join("tokenizer.json"))?;
    let mut model = default_model(32128);
    model.d_model = args.model.d_model;
    model.d_ff = args.model.d_ff;
    model.num_layers = args.model.layers;
    model.num_decoder_layers = Some(args.model.layers);
    model.num_heads = args.model.heads;
    model.d_kv = args.model.d_kv;
    let run = PretrainRun {
        corpus_dir: corpus_dir(home, &args.corpus),
        limit: (args.limit > 0).then_some(args.limit),
        held_out: args.held_out,
        model,
        train: args.train.over(default_train()),
        noise_density: args.corruption.noise_density,
        mean_span: args.corruption.mean_span,
        tokenizer_json,
        out: args.out.unwrap_or_else(|| default_out(&home.models())),
        pause_after: args.run.pause_after,
    };
    let (outcome, report) = with_backend!(args.run.device, pretrain(&run))?;
    let record = &outcome.record;
    if report_pause(&outcome) {
        return Ok(());
    }
    println!("model          {}", run.out.display());
    if let Some(report) = report {
        println!("parameters     {}", report.parameters);
        println!(
            "sentences      {} (held out {})",
            report.train_sentences, report.held_out_sentences
        );
        println!(
            "steps          {} in {:.0} s ({:.0} tokens/s)",
            record.total_steps, report.train_seconds, report.tokens_per_second
        );
        println!(
            "held-out loss  {:.3} (untrained {:.3})",
            report.held_out_loss, report.held_out_loss_initial
        );
    }
    Ok(())
}

fn run_train(home: &Home, args: TrainArgs) -> Result<()> {
    anyhow::ensure!(
        (0.0..1.0).contains(&args.keyword_free),
        "--keyword-free is the share of examples trained without keywords, at least 0 and below \
         1 (got {})",
        args.keyword_free
    );
    let dataset = args.read.load(home, &args.data)?;
    let train = args.train.over(infill_defaults());
    let selection = Selection {
        target: "flip".into(),
        limit: (args.limit > 0).then_some(args.limit),
        max_words: args.max_words,
        unit: args.unit,
        seed: train.seed,
    };
    let lexicons = std::sync::Arc::new(Lexicons::load(home)?);
    let items = select_examples(&dataset, &selection, &lexicons)?;
    let guidance = match args.retrieval {
        true => Some(KeywordGuidance {
            retrieval: args.retrieval_options.setup(home)?,
            task: task_of(&items),
            max_keywords: args.max_keywords,
            keyword_free: args.keyword_free,
        }),
        false => None,
    };
    let base = match &args.base {
        Some(base) => infiller_dir(home, base)?,
        None => trained_or_shipped(home, default_out(&home.models()))?,
    };
    let run = InfillTrainRun {
        items,
        classifier_dir: resolve_model_dir(home, &args.classifier)?,
        tokenizer_json: read_tokenizer(home, &base)?,
        base,
        rationales: RationaleSettings {
            source: args.rationales.into(),
            seed: train.seed,
            ..RationaleSettings::default()
        },
        lexicons,
        alpha: args.alpha,
        validation: args.validation,
        train,
        out: args.out.unwrap_or_else(|| home.models().join("infiller")),
        pause_after: args.run.pause_after,
        guidance,
    };
    let (outcome, report) = with_backend!(args.run.device, train_infiller(&run))?;
    let record = &outcome.record;
    if report_pause(&outcome) {
        return Ok(());
    }
    println!("model       {}", run.out.display());
    println!(
        "examples    {} train, {} validation ({} of {} items had rationales)",
        report.train_examples, report.validation_examples, report.with_rationale, report.items
    );
    println!(
        "steps       {} in {:.0} s",
        record.total_steps, record.train_seconds
    );
    let losses: Vec<String> = report
        .validation_losses
        .iter()
        .map(|l| format!("{l:.3}"))
        .collect();
    if let Some(guidance) = &report.guidance {
        println!(
            "keywords    retrieved from {} for {} of {} examples ({} drawn to go without)",
            guidance.corpus.display(),
            guidance.with_keywords,
            report.with_rationale,
            guidance.keyword_free
        );
    }
    println!(
        "validation  {} (kept epoch {})",
        losses.join(" "),
        report.best_epoch.map_or("last".into(), |e| e.to_string())
    );
    Ok(())
}
