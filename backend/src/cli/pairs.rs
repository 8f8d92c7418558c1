//! `flipside pairs …`: seed pairs for training retrievers, re-rankers and LASS's Dis-AE, and
//! the prompt that makes them.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

use super::args::DEFAULT_CLASSIFIER;
use super::data::ReadArgs;
use super::llm::LlmArgs;
use crate::compute::DeviceChoice;
use crate::editing::items::{Selection, Unit};
use crate::editing::keywords::Lexicons;
use crate::editing::prompt_optimisation::{OptimisationSettings, PromptOptimiser};
use crate::editing::prompts::PromptTemplate;
use crate::home::Home;
use crate::llm::Sampling;
use crate::methods::{self, EditSettings, GenerationPlan, ModelsConfig, load_models};
use crate::model_dirs::resolve_model_dir;
use crate::pipeline::store::read_repairing;
use crate::retrieval::cfdpr::{SeedPair, read_pairs};
use crate::with_backend;
use flipside_shared::metrics::levenshtein::normalised_levenshtein;
use flipside_shared::records::Counterfactual;

#[derive(Debug, Subcommand)]
pub enum PairsCommand {
    /// Seed pairs from LLM counterfactuals (`flipside generate` output): keeps the edits the
    /// classifier says flipped, as (text, label, counterfactual) pairs for `retriever train
    /// --pairs` and `reranker train --pairs`
    Make(MakeArgs),
    /// Optimise a prompt with hand-fixed examples (LASS's Algorithm 1): finds m failures and n
    /// successes of the prompt, then inserts the examples one at a time, each at the position
    /// that most raises the success rate on the rest, until the rate reaches --target-rate or
    /// an insertion gains less than --min-gain. Success: the classifier says the edit has the
    /// target label and at most --max-change of its tokens changed. Writes OUT/prompt.toml
    /// (for `generate --prompt`), OUT/trace.json and every LLM call to OUT/evaluations.jsonl
    /// (a rerun resumes from them)
    OptimisePrompt(Box<OptimiseArgs>),
}

#[derive(Debug, Args)]
pub struct OptimiseArgs {
    /// The prompt to start from: a built-in id or a TOML file
    #[arg(long, default_value = "lass-sentiment", value_name = "ID|FILE")]
    pub prompt: String,
    /// Hand-fixed examples, inserted in file order: `fixed` (Flipside's movie-review sentences)
    /// or a JSON-lines file of text, label, counterfactual (as `pairs make` writes)
    #[arg(long, default_value = "fixed", value_name = "FILE|fixed")]
    pub examples: String,
    /// Where the evaluation items come from
    #[arg(long, default_value = "imdb:train")]
    pub data: String,
    /// The label the prompt rewrites into
    #[arg(long, default_value = "negative")]
    pub target: String,
    #[arg(long, value_enum, default_value_t = Unit::Sentence)]
    pub unit: Unit,
    /// Skip items with more words than this [default with --unit sentence: 40]
    #[arg(long, value_name = "N")]
    pub max_words: Option<usize>,
    /// Failures of the starting prompt in the evaluation set (m)
    #[arg(long, default_value_t = OptimisationSettings::default().failures, value_name = "M")]
    pub failures: usize,
    /// Successes of the starting prompt in the evaluation set (n)
    #[arg(long, default_value_t = OptimisationSettings::default().successes, value_name = "N")]
    pub successes: usize,
    /// Stop when an insertion raises the success rate by less than this (ε)
    #[arg(long, default_value_t = OptimisationSettings::default().min_gain)]
    pub min_gain: f64,
    /// Stop when the success rate reaches this (δ)
    #[arg(long, default_value_t = OptimisationSettings::default().target_rate)]
    pub target_rate: f64,
    /// Most share of tokens a successful edit changes (normalised token Levenshtein)
    #[arg(long, default_value_t = OptimisationSettings::default().max_change)]
    pub max_change: f64,
    /// Classifier that judges each edit (a model directory or a name under HOME/models)
    #[arg(long, default_value = DEFAULT_CLASSIFIER, value_name = "MODEL")]
    pub classifier: String,
    /// Sampling temperature (LASS: 0.2)
    #[arg(long, default_value_t = 0.2)]
    pub temperature: f32,
    /// Most tokens per reply
    #[arg(long, default_value_t = Sampling::default().max_tokens)]
    pub max_tokens: usize,
    /// Seed of the item order and of every item's sampling
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory [default: HOME/runs/prompt-optimisation]
    #[arg(short, long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub read: ReadArgs,
}

#[derive(Debug, Args)]
pub struct MakeArgs {
    /// Counterfactual files written by `flipside generate`
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Keep only edits whose target label has at least this classifier probability
    #[arg(long, default_value_t = 0.5, value_name = "P")]
    pub min_probability: f32,
    /// Keep only minimal edits: at most this share of the tokens changed (token Levenshtein
    /// over the longer length, as `optimise-prompt --max-change` counts) [default: any]
    #[arg(long, value_name = "SHARE")]
    pub max_change: Option<f64>,
    /// Output JSON-lines file of seed pairs
    #[arg(short, long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(home: &Home, command: PairsCommand) -> Result<()> {
    match command {
        PairsCommand::Make(args) => make(args),
        PairsCommand::OptimisePrompt(args) => optimise_prompt(home, *args),
    }
}

fn optimise_prompt(home: &Home, args: OptimiseArgs) -> Result<()> {
    let base = PromptTemplate::load(&args.prompt)?;
    let examples = read_pairs(&args.examples)?;
    let dataset = args.read.load(home, &args.data)?;
    let lexicons = Arc::new(Lexicons::load(home)?);
    let selection = Selection {
        target: args.target.clone(),
        limit: None,
        max_words: args.max_words,
        unit: args.unit,
        seed: args.seed,
    };
    // The optimiser edits with LLM-only's pipeline and each candidate template.
    let plan = GenerationPlan::new(
        methods::method("llm-only")?,
        &dataset,
        &selection,
        &lexicons,
        EditSettings {
            sampling: Sampling {
                temperature: args.temperature,
                max_tokens: args.max_tokens,
                seed: args.seed,
                ..Sampling::default()
            },
            ..EditSettings::default()
        },
    )
    .with_context(|| args.data.clone())?;
    let classifier = resolve_model_dir(home, &args.classifier)?;
    let models = with_backend!(
        DeviceChoice::default(),
        load_models(ModelsConfig {
            classifier_dir: classifier,
            retrieval: None,
            llm: Some(args.llm.client(home)?),
            lexicons,
            infiller: None,
            dis_ae: None,
            fluency: None,
        })
    )?;
    let settings = OptimisationSettings {
        failures: args.failures,
        successes: args.successes,
        min_gain: args.min_gain,
        target_rate: args.target_rate,
        max_change: args.max_change,
        seed: args.seed,
    };
    let out = args
        .out
        .unwrap_or_else(|| home.root().join("runs").join("prompt-optimisation"));
    let mut optimiser = PromptOptimiser::new(&models, plan.settings, settings, &out)?;
    let bar = crate::progress::spinner("optimising the prompt");
    let calls = std::cell::Cell::new(0usize);
    let trace = optimiser.optimise(&base, &examples, &plan.items, &|| {
        calls.set(calls.get() + 1);
        bar.set_message(format!("optimising the prompt: {} LLM edits", calls.get()));
    })?;
    bar.finish_and_clear();
    let rates: Vec<String> = trace.rates.iter().map(|r| format!("{r:.3}")).collect();
    eprintln!(
        "evaluation set: {} failures and {} successes of {} (from {} items); success rates {}; \
         {} of {} examples kept; stopped: {}",
        trace.failures,
        trace.successes,
        base.id,
        trace.scanned,
        rates.join(" → "),
        trace.steps.iter().filter(|s| s.kept).count(),
        examples.len(),
        trace.stopped
    );
    println!("{}", trace.template.display());
    Ok(())
}

fn make(args: MakeArgs) -> Result<()> {
    let mut pairs = Vec::new();
    let (mut seen, mut flipped) = (0, 0);
    let minimal = |r: &Counterfactual| {
        args.max_change
            .is_none_or(|max| normalised_levenshtein(&r.edited, &r.original) <= max)
    };
    for file in &args.files {
        let records: Vec<Counterfactual> = read_repairing(file)?;
        seen += records.len();
        let records = records
            .into_iter()
            .filter(|r| r.flipped && r.target_probability >= args.min_probability);
        pairs.extend(
            records
                .inspect(|_| flipped += 1)
                .filter(minimal)
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
    if flipped == 0 {
        bail!("none of the {seen} counterfactuals flipped the classifier: no pair to write");
    }
    if let (true, Some(max)) = (pairs.is_empty(), args.max_change) {
        bail!("none of the {flipped} flipped counterfactuals changes at most {max} of the tokens");
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
    match args.max_change {
        None => eprintln!(
            "{flipped} of {seen} counterfactuals flipped the classifier (p ≥ {}): pairs written",
            args.min_probability
        ),
        Some(max) => eprintln!(
            "{flipped} of {seen} counterfactuals flipped the classifier (p ≥ {}), {} of them \
             changing at most {max} of the tokens: pairs written",
            args.min_probability,
            pairs.len()
        ),
    }
    println!("{}", args.out.display());
    Ok(())
}
