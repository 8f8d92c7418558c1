//! `flipside generate`

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use serde::Serialize;

use super::args::{DEFAULT_CLASSIFIER, InfillerArgs, LassArgs, RetrievalArgs};
use super::data::ReadArgs;
use super::llm::LlmArgs;
use super::values::Rationales;
use crate::compute::DeviceChoice;
use crate::data::tables::{TableFormat, jsonl_to_parquet};
use crate::editing::items::{Selection, Unit};
use crate::editing::keywords::Lexicons;
use crate::home::Home;
use crate::infiller::rationales::RationaleSettings;
use crate::llm::Sampling;
use crate::methods::{self, EditSettings, GenerationPlan, ModelsConfig, load_models};
use crate::model_dirs::{resolve_model_dir, write_atomic};
use crate::pipeline::batch::{BatchRun, generate};
use crate::pipeline::store::config_path;
use crate::with_backend;

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Dataset: imdb[:split], rotten-tomatoes, or a CSV/TSV/JSONL/Parquet file (or Parquet/Arrow directory)[:split]
    #[arg(long, default_value = "imdb:test")]
    pub data: String,
    /// How counterfactuals are made
    #[arg(long, default_value = methods::METHODS[0].id(), value_parser = super::method_parser())]
    pub method: String,
    /// Target label, or "flip": the other label of a binary task, each other label otherwise
    #[arg(long, default_value = "flip", value_name = "LABEL|flip")]
    pub target: String,
    /// Edit only the first N items (after a seeded shuffle)
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Skip items with more words than this (e.g. 60 for short reviews)
    #[arg(long, value_name = "N")]
    pub max_words: Option<usize>,
    /// What is edited: each whole text, or from each review the one sentence whose opinion
    /// words lean furthest toward its label (sentiment data labelled negative/positive;
    /// sentences of 6 to --max-words words, 40 by default)
    #[arg(long, value_enum, default_value_t)]
    pub unit: Unit,
    /// Output: one JSON line per counterfactual (appended; a rerun resumes). Failed attempts go
    /// to OUT.failures.jsonl, the run's settings to OUT.config.json. A FILE.parquet is written
    /// when the run ends, one column per record field, from the JSON lines in FILE.jsonl (what a
    /// rerun resumes from) [default: HOME/runs/DATA-METHOD.jsonl]
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Seed of the item shuffle and of each attempt's sampling
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Items edited at once [default: 4 with a server; with the embedded model 1 for the methods
    /// that prompt it, one per core for the others, the fluency model scoring each on a context
    /// of its own]
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Tries per item before it is given up (bad or empty replies are retried)
    #[arg(long, default_value_t = EditSettings::default().max_attempts)]
    pub max_attempts: usize,
    /// Keep only verified counterfactuals: an edit the classifier does not flip is a failed
    /// attempt, retried up to --max-attempts (by default edits are kept and marked `flipped`)
    #[arg(long)]
    pub verify: bool,
    /// Candidates per attempt: the editor proposes N, and the one --fluency-model finds least
    /// perplexing is kept (with --verify, among those the classifier flips; those it flips with
    /// p ≥ 0.7 first). Worth it for the
    /// cheap editors (AutoCAD's infiller); each candidate costs an LLM call with CORE
    /// [default: 4 for AutoCAD, 1 for the other methods]
    #[arg(long, value_name = "N")]
    pub candidates: Option<usize>,
    /// Classifier that checks each edit (a model directory or a name under HOME/models); AutoCAD
    /// also takes its rationales from it
    #[arg(long, default_value = DEFAULT_CLASSIFIER, value_name = "MODEL")]
    pub classifier: String,
    #[command(flatten)]
    pub infiller: InfillerArgs,
    /// How AutoCAD picks the words it rewrites
    #[arg(long, value_enum, default_value_t = Rationales::Saliency)]
    pub rationales: Rationales,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,

    #[command(flatten)]
    pub prompt: PromptArgs,
    #[command(flatten)]
    pub retrieval: RetrievalArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub lass: LassArgs,
    #[command(flatten)]
    pub read: ReadArgs,
}

/// The prompt and sampling.
#[derive(Debug, Clone, Args, Serialize)]
#[command(next_help_heading = "Prompt and sampling")]
pub struct PromptArgs {
    /// Prompt template: a built-in id (`flipside prompts list`) or a TOML file
    /// [default: core-sentiment / llm-only-sentiment, or the -nli ones for pairs]
    #[arg(long, value_name = "ID|FILE")]
    pub prompt: Option<String>,
    #[arg(long, default_value_t = Sampling::default().temperature)]
    pub temperature: f32,
    #[arg(long, default_value_t = Sampling::default().top_p)]
    pub top_p: f32,
    /// Most tokens per reply (each item also gets at most 2 × its words + 48)
    #[arg(long, default_value_t = Sampling::default().max_tokens)]
    pub max_tokens: usize,
    /// Most keywords in a prompt (or in a retrieval-guided infiller's input)
    #[arg(long, default_value_t = EditSettings::default().max_keywords)]
    pub max_keywords: usize,
}

/// What a run's output depends on: saved beside it and checked when it resumes.
#[derive(Debug, Serialize)]
struct RunConfig {
    data: String,
    method: String,
    target: String,
    limit: Option<usize>,
    max_words: Option<usize>,
    /// Left out for whole texts, so that runs saved before `--unit` existed still resume.
    #[serde(skip_serializing_if = "Unit::is_text")]
    unit: Unit,
    seed: u64,
    max_attempts: usize,
    verify: bool,
    classifier: String,
    prompt: Option<(String, String)>,
    model: Option<String>,
    sampling: PromptArgs,
    retrieval: Option<RetrievalArgs>,
    /// Left out for other methods, so that their earlier runs still resume.
    #[serde(skip_serializing_if = "Option::is_none")]
    lass: Option<LassArgs>,
    /// Candidates per attempt and the model that ranks them; left out for one, so that earlier
    /// runs still resume.
    #[serde(skip_serializing_if = "Option::is_none")]
    ranking: Option<(usize, String)>,
}

pub fn run(home: &Home, args: GenerateArgs) -> Result<()> {
    let method = methods::method(&args.method)?;
    let dataset = args.read.load(home, &args.data)?;
    let lexicons = Arc::new(Lexicons::load(home)?);
    let selection = Selection {
        target: args.target.clone(),
        limit: args.limit,
        max_words: args.max_words,
        unit: args.unit,
        seed: args.seed,
    };
    let settings = EditSettings {
        prompts: args
            .prompt
            .prompt
            .iter()
            .map(|template| (method.id().to_string(), template.clone()))
            .collect(),
        sampling: Sampling {
            temperature: args.prompt.temperature,
            top_p: args.prompt.top_p,
            max_tokens: args.prompt.max_tokens,
            seed: args.seed,
        },
        max_keywords: args.prompt.max_keywords,
        max_attempts: args.max_attempts,
        verify: args.verify,
        candidates: args.candidates,
        reproduction: args.lass.settings(),
        ..EditSettings::default()
    };
    let plan = GenerationPlan::new(method, &dataset, &selection, &lexicons, settings)
        .with_context(|| args.data.clone())?;
    let retrieval = if method.retrieves() {
        Some(args.retrieval.setup(home)?)
    } else {
        None
    };
    let classifier = resolve_model_dir(home, &args.classifier).map_err(|e| {
        e.context(format!(
            "no classifier to check the edits: run scripts/quickstart (it trains {DEFAULT_CLASSIFIER}), \
             train one with `flipside classifier train`, or pass --classifier"
        ))
    })?;
    let requested = args.out.clone().unwrap_or_else(|| {
        home.root().join("runs").join(format!(
            "{}-{}.jsonl",
            args.data.replace([':', '/'], "-"),
            method.id()
        ))
    });
    let parquet = (TableFormat::from_path(&requested) == Some(TableFormat::Parquet))
        .then(|| requested.clone());
    let output = match &parquet {
        Some(table) => table.with_extension("jsonl"),
        None => requested,
    };
    let llm = if method.uses_llm() {
        Some(args.llm.client(home)?)
    } else {
        None
    };
    let infiller = if method.card().infills {
        let rationales = RationaleSettings {
            source: args.rationales.into(),
            seed: args.seed,
            ..RationaleSettings::default()
        };
        Some(args.infiller.setup(home, rationales)?)
    } else {
        None
    };
    let reproduces = method.card().reproduces;
    let dis_ae = match reproduces {
        true => Some(args.lass.dir(home)?),
        false => None,
    };
    let candidates = plan.settings.candidates_for(method);
    let concurrency = args
        .concurrency
        .unwrap_or(args.llm.default_concurrency(method.uses_llm()));
    let fluency = args
        .lass
        .fluency
        .for_run(home, reproduces, candidates, concurrency)?;
    let models = with_backend!(
        args.device,
        load_models(ModelsConfig {
            classifier_dir: classifier.clone(),
            retrieval,
            llm,
            lexicons,
            infiller,
            dis_ae,
            fluency,
        })
    )?;
    let pipeline = plan.pipeline(&models)?;
    let config = RunConfig {
        data: args.data.clone(),
        method: method.id().to_string(),
        target: args.target.clone(),
        limit: args.limit,
        max_words: args.max_words,
        unit: args.unit,
        seed: args.seed,
        max_attempts: args.max_attempts,
        verify: args.verify,
        classifier: classifier.display().to_string(),
        prompt: pipeline.editor.prompt().map(|p| (p.id, p.hash)),
        model: pipeline.editor.model().map(str::to_string),
        sampling: args.prompt.clone(),
        retrieval: method.retrieves().then(|| args.retrieval.clone()),
        lass: reproduces.then(|| args.lass.clone()),
        ranking: (candidates > 1).then(|| (candidates, args.lass.fluency.fluency_model.clone())),
    };
    check_config(&output, &config)?;

    let run = BatchRun {
        pipeline: &pipeline,
        items: plan.items,
        seed: args.seed,
        concurrency,
        output: output.clone(),
    };
    let bar = crate::progress::items(run.items.len() as u64, "editing");
    let summary = generate(&run, &|_| {
        bar.inc(1);
        std::ops::ControlFlow::Continue(())
    })?;
    bar.finish_and_clear();
    let rate = |n: usize, of: usize| 100.0 * n as f64 / of.max(1) as f64;
    eprintln!(
        "{} of {} items done before this run; {} counterfactuals written, {} flipped ({:.1}%); \
         {} failed attempts; {} items given up",
        summary.already_done,
        summary.items,
        summary.written,
        summary.flipped,
        rate(summary.flipped, summary.written),
        summary.failed_attempts,
        summary.given_up
    );
    match parquet {
        Some(table) => {
            let rows = jsonl_to_parquet(&output, &table)?;
            eprintln!(
                "{rows} records as Parquet; a rerun resumes from their JSON lines in {}",
                output.display()
            );
            println!("{}", table.display());
        }
        None => println!("{}", output.display()),
    }
    Ok(())
}

/// Saves the run's settings beside its output, or checks that a resumed run uses the same
/// (but for `--limit`).
fn check_config(output: &std::path::Path, config: &RunConfig) -> Result<()> {
    let path = config_path(output);
    let value = serde_json::to_value(config)?;
    if let Ok(saved) = std::fs::read(&path) {
        let mut saved: serde_json::Value = serde_json::from_slice(&saved)?;
        // A larger --limit extends a run: the items come in the same seeded order.
        saved["limit"] = value["limit"].clone();
        if saved != value && output.exists() {
            let differs: Vec<String> = value
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(key, v)| saved.get(key.as_str()) != Some(v))
                .map(|(key, v)| {
                    format!(
                        "{key}: {} → {v}",
                        saved.get(key.as_str()).unwrap_or(&serde_json::Value::Null)
                    )
                })
                .collect();
            bail!(
                "{} was made with other settings ({}); continue it with the same options, or \
                 write to another file with --out",
                output.display(),
                differs.join("; ")
            );
        }
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    write_atomic(&path, &serde_json::to_vec_pretty(&value)?)
}
