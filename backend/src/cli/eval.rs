//! `flipside eval …`

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use flipside_shared::metrics::zstat::plot_svg;
use serde_json::json;

use super::llm::LlmArgs;
use crate::compute::DeviceChoice;
use crate::editing::evaluate::{CfMetrics, cf_metrics, flip_rate_under, record_labels};
use crate::home::Home;
use crate::llm::{LocalEngine, SCORED_TOGETHER};
use crate::model_dirs::resolve_model_dir;
use crate::pipeline::store::read_repairing;
use crate::with_backend;
use flipside_shared::records::Counterfactual;

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// Intrinsic metrics of counterfactual files (from `flipside generate`): flip rate,
    /// self-BLEU, Levenshtein, distinct-n, perplexity, token–label z-statistics and
    /// perturbation types
    Cf(EvalCfArgs),
}

#[derive(Debug, Args)]
pub struct EvalCfArgs {
    /// JSON-lines files of counterfactuals; one table row each
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Skip perplexity (it runs the local LLM over every edit)
    #[arg(long)]
    pub no_ppl: bool,
    /// Print one JSON object per file instead of tables
    #[arg(long)]
    pub json: bool,
    /// Also report the flip rate under this classifier (a model directory or a name under
    /// HOME/models): one independent of the classifier that checked the edits
    #[arg(long, value_name = "MODEL")]
    pub classifier: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
    /// The embedded model scoring perplexity (--api-base is not used)
    #[command(flatten)]
    pub llm: LlmArgs,
}

/// CORE's Table 6 figures for its IMDb counterfactuals, printed beside ours.
const PAPER_CORE: (f64, f64) = (0.445, 0.506);

pub fn run(home: &Home, command: EvalCommand) -> Result<()> {
    let EvalCommand::Cf(args) = command;
    let engine = if args.no_ppl {
        None
    } else {
        Some(args.llm.scorer(home, 1)?)
    };
    let classifier = match &args.classifier {
        Some(name) => Some(resolve_model_dir(home, name)?),
        None => None,
    };
    let mut rows = Vec::new();
    for file in &args.files {
        let records: Vec<Counterfactual> = read_repairing(file)?;
        if records.is_empty() {
            bail!("{} holds no counterfactual", file.display());
        }
        let labels = record_labels(&records);
        let (metrics, z) = cf_metrics(&records, &labels);
        let perplexity = match &engine {
            Some(engine) => Some(perplexity(engine, &records)?),
            None => None,
        };
        let reflip = match &classifier {
            Some(dir) => Some(with_backend!(args.device, flip_rate_under(dir, &records))?),
            None => None,
        };
        let plot = file.with_extension("zstat.svg");
        let title = format!(
            "{}: originals + counterfactuals ({} tokens over the line)",
            file.file_name().unwrap_or_default().to_string_lossy(),
            z.significant().len()
        );
        std::fs::write(&plot, plot_svg(&z, &labels, &title))?;
        if args.json {
            let mut value = serde_json::to_value(&metrics)?;
            value["file"] = json!(file);
            value["perplexity"] = json!(perplexity);
            value["flip_rate_under"] = json!(
                classifier
                    .as_ref()
                    .zip(reflip)
                    .map(|(dir, rate)| json!({ "classifier": dir, "flip_rate": rate }))
            );
            value["zstat_plot"] = json!(plot);
            value["zstat_top"] = json!(z.significant().iter().take(20).collect::<Vec<_>>());
            println!("{value}");
        }
        rows.push(Row {
            file: file.clone(),
            metrics,
            perplexity,
            reflip,
            plot,
        });
    }
    if !args.json {
        print_tables(
            &rows,
            engine.as_ref().map(crate::llm::LlmClient::model),
            classifier.as_deref(),
        );
    }
    Ok(())
}

/// Perplexity of the edits: exp of the mean negative log-likelihood per token, over all
/// edits' tokens together.
fn perplexity(engine: &LocalEngine, records: &[Counterfactual]) -> Result<f64> {
    let bar = crate::progress::items(records.len() as u64, "perplexity");
    let (mut nll, mut tokens) = (0.0f64, 0usize);
    for chunk in records.chunks(SCORED_TOGETHER) {
        let texts: Vec<&str> = chunk.iter().map(|r| r.edited.as_str()).collect();
        for log_probs in engine.token_log_probs_all(&texts)?.into_iter().flatten() {
            nll -= log_probs.iter().map(|&l| f64::from(l)).sum::<f64>();
            tokens += log_probs.len();
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok((nll / tokens.max(1) as f64).exp())
}

/// One file's results.
struct Row {
    file: PathBuf,
    metrics: CfMetrics,
    perplexity: Option<f64>,
    /// The flip rate under `--classifier`.
    reflip: Option<f64>,
    plot: PathBuf,
}

fn print_tables(rows: &[Row], ppl_model: Option<&str>, classifier: Option<&Path>) {
    println!(
        "{:<28} {:>6} {:>6} {:>7} {:>9} {:>11} {:>6} {:>6} {:>6} {:>6} {:>8} {:>7}",
        "file",
        "n",
        "flip",
        "flip@2",
        "self-BLEU",
        "Levenshtein",
        "dist-1",
        "dist-2",
        "dist-3",
        "dist-4",
        "PPL",
        "s/item"
    );
    let optional = |value: Option<f64>, decimals: usize| {
        value.map_or("-".to_string(), |v| format!("{v:.decimals$}"))
    };
    for row in rows {
        let m = &row.metrics;
        println!(
            "{:<28} {:>6} {:>6.3} {:>7} {:>9.3} {:>11.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>8} {:>7.2}",
            short_name(&row.file),
            m.records,
            m.flip_rate,
            optional(row.reflip, 3),
            m.self_bleu,
            m.levenshtein,
            m.distinct[0],
            m.distinct[1],
            m.distinct[2],
            m.distinct[3],
            optional(row.perplexity, 1),
            m.seconds_per_item
        );
    }
    println!(
        "{:<28} {:>6} {:>6} {:>7} {:>9.3} {:>11.3}   (CORE, Dixit et al. 2022, Table 6)",
        "paper: CORE on IMDb", "", "", "", PAPER_CORE.0, PAPER_CORE.1
    );
    println!("flip: under the classifier each record names (the one generate used)");
    if let Some(dir) = classifier {
        println!("flip@2: under {}", dir.display());
    }
    if let Some(model) = ppl_model {
        println!("perplexity under {model}");
    }
    println!();
    println!(
        "{:<28} {}",
        "perturbation types",
        rows[0]
            .metrics
            .perturbations
            .iter()
            .map(|(k, _)| format!("{k:>12}"))
            .collect::<String>()
    );
    for row in rows {
        println!(
            "{:<28} {}",
            short_name(&row.file),
            row.metrics
                .perturbations
                .iter()
                .map(|(_, v)| format!("{v:>12}"))
                .collect::<String>()
        );
    }
    println!();
    println!("token–label z-statistics (α = 0.01, Bonferroni; tokens in ≥ 5 examples):");
    for row in rows {
        println!(
            "{:<28} {} significant tokens in the originals, {} with the counterfactuals; plot: {}",
            short_name(&row.file),
            row.metrics.z_significant_originals,
            row.metrics.z_significant_augmented,
            row.plot.display()
        );
    }
}

fn short_name(path: &std::path::Path) -> String {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    if name.chars().count() > 28 {
        format!(
            "…{}",
            name.chars()
                .rev()
                .take(27)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<String>()
        )
    } else {
        name.into_owned()
    }
}
