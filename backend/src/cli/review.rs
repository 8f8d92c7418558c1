//! `flipside review …`: review counterfactuals in Label Studio or Argilla, and bring the
//! decisions back as the portal's export files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use flipside_shared::portal::Verdict;
use flipside_shared::records::Counterfactual;
use serde_json::Value;

use crate::data::Format;
use crate::model_dirs::write_atomic;
use crate::pipeline::store::read_complete;
use crate::review::export::{ExportKind, ExportOptions, FileFormat, render};
use crate::review::{AnnotationsRead, argilla, kept, label_studio, labels_of, outcomes};

#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// Write `generate` records as a review project: Label Studio tasks (with predictions) and
    /// their labeling config, or an Argilla dataset directory (as `rg.Dataset.to_disk` writes)
    Export(ExportArgs),
    /// Read a finished Label Studio or Argilla project back: each record's verdicts decided as
    /// the portal does (the majority; the latest of it gives the text), and the kept items
    /// written as `portal export` writes them
    Import(ImportArgs),
}

/// A review tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Tool {
    /// Label Studio: OUT/tasks.json and OUT/label-config.xml; back: the project's JSON (or
    /// JSON-MIN) export
    LabelStudio,
    /// Argilla 2.x: OUT/.argilla/{dataset,settings}.json and OUT/records.json; back: the
    /// records flattened (`records.to_list(flatten=True)` as JSON, or `to_datasets().to_json()`)
    Argilla,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[arg(long, value_enum)]
    pub to: Tool,
    /// `generate` records (JSON lines)
    #[arg(long, value_name = "FILE")]
    pub records: PathBuf,
    /// Only the records the classifier flipped
    #[arg(long)]
    pub flipped: bool,
    /// The project directory to write
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    #[arg(long, value_enum)]
    pub from: Tool,
    /// The tool's export
    pub annotations: PathBuf,
    /// The `generate` records the project was made from (`review export --records`)
    #[arg(long, value_name = "FILE")]
    pub records: PathBuf,
    /// What to write: for `classifier train` (id, text, label), `retriever train` / `reranker
    /// train` (pairs) or `experiment` (records, with the reviewed text and label)
    #[arg(long, value_enum, default_value_t = Kind::Classifier)]
    pub format: Kind,
    /// Classifier format: add each kept item's original with its own label
    #[arg(long)]
    pub originals: bool,
    /// The file to write: FILE.parquet as Parquet, FILE.csv as CSV (classifier and pairs
    /// formats), anything else as JSON lines
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// What `review import` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    Classifier,
    Pairs,
    Records,
}

pub fn run(command: ReviewCommand) -> Result<()> {
    match command {
        ReviewCommand::Export(args) => export(&args),
        ReviewCommand::Import(args) => import(&args),
    }
}

fn records(path: &Path) -> Result<Vec<Counterfactual>> {
    let records: Vec<Counterfactual> = read_complete(path)
        .with_context(|| format!("cannot read the records {}", path.display()))?;
    if records.is_empty() {
        bail!("{} holds no records", path.display());
    }
    Ok(records)
}

fn export(args: &ExportArgs) -> Result<()> {
    let mut records = records(&args.records)?;
    if args.flipped {
        records.retain(|r| r.flipped);
    }
    let labels = labels_of(&records);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let out = args.out.display();
    match args.to {
        Tool::LabelStudio => {
            let tasks = label_studio::tasks(&records);
            write_atomic(
                &args.out.join("tasks.json"),
                &serde_json::to_vec_pretty(&tasks)?,
            )?;
            let config = label_studio::label_config(&labels);
            write_atomic(&args.out.join("label-config.xml"), config.as_bytes())?;
            eprintln!(
                "{} tasks in {out}/tasks.json. In Label Studio: a new project, Labeling Setup → \
                 Code: paste {out}/label-config.xml; import tasks.json; to start each task from \
                 the counterfactual as written, turn on \"Use predictions to pre-label tasks\" \
                 (Annotation settings). When done, export the project as JSON and run `flipside \
                 review import --from label-studio EXPORT.json --records {}`.",
                records.len(),
                args.records.display()
            );
        }
        Tool::Argilla => {
            let name = args.out.file_name().map_or_else(
                || "counterfactuals".into(),
                |n| n.to_string_lossy().into_owned(),
            );
            argilla::write_dataset(&args.out, &name, &records, &labels)?;
            eprintln!(
                "{} records in {out}. In Python: `rg.Dataset.from_disk(\"{out}\", \
                 workspace=\"…\")`. When done: `json.dump(dataset.records.to_list(flatten=True), \
                 open(\"reviewed.json\", \"w\"))` and `flipside review import --from argilla \
                 reviewed.json --records {}`.",
                records.len(),
                args.records.display()
            );
        }
    }
    println!("{out}");
    Ok(())
}

fn import(args: &ImportArgs) -> Result<()> {
    let records = records(&args.records)?;
    let text = std::fs::read_to_string(&args.annotations)
        .with_context(|| format!("cannot read {}", args.annotations.display()))?;
    let json = |text: &str| -> Result<Value> {
        serde_json::from_str(text)
            .with_context(|| format!("{} is not JSON", args.annotations.display()))
    };
    let read: AnnotationsRead = match args.from {
        Tool::LabelStudio => label_studio::annotations(&json(&text)?),
        Tool::Argilla => {
            let rows = match json(&text) {
                Ok(Value::Array(rows)) => rows,
                _ => text
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(json)
                    .collect::<Result<_>>()?,
            };
            argilla::annotations(&rows)
        }
    }
    .with_context(|| format!("cannot read {}", args.annotations.display()))?;
    for reason in &read.skipped {
        eprintln!("skipped: {reason}");
    }
    let decided = outcomes(&records, &read.annotations)?;
    let count = |verdict: Verdict| decided.iter().filter(|(_, o)| o.verdict == verdict).count();
    let kept = kept(&decided);
    let options = ExportOptions {
        format: match args.format {
            Kind::Classifier => ExportKind::Classifier,
            Kind::Pairs => ExportKind::Pairs,
            Kind::Records => ExportKind::Records,
        },
        file: match Format::from_path(&args.out) {
            Some(Format::Csv) => FileFormat::Csv,
            Some(Format::Parquet) => FileFormat::Parquet,
            _ => FileFormat::Jsonl,
        },
        originals: args.originals,
    };
    options.check().map_err(anyhow::Error::msg)?;
    write_atomic(&args.out, &render(&kept, &options)?)?;
    eprintln!(
        "{} annotations ({} skipped) decided {} of {} records: {} accepted, {} fixed, {} \
         relabelled, {} rejected, {} tied (flagged, not kept); {} kept",
        read.annotations.len(),
        read.skipped.len(),
        decided.len(),
        records.len(),
        count(Verdict::Accept),
        count(Verdict::Fix),
        count(Verdict::Relabel),
        count(Verdict::Reject),
        count(Verdict::Flag),
        kept.len()
    );
    println!("{}", args.out.display());
    Ok(())
}
