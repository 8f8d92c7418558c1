//! `flipside data …` and the dataset options shared by every command that reads data.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use flipside_shared::data::{Dataset, Input};

use crate::data::{Columns, DatasetSpec, Format, ReadOptions, ReadReport, SplitConfig};
use crate::home::Home;
use crate::pipeline::manifest::{MANIFEST, Manifest};

/// How to read dataset files (ignored for built-ins).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Reading dataset files")]
pub struct ReadArgs {
    /// File format [default: from the extension: .csv, .tsv, .jsonl, .parquet, .arrow; a
    /// directory is read as Parquet or Arrow files (`datasets`' `save_to_disk` or `to_parquet`)]
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Column (or JSON field) holding the text
    #[arg(long, default_value = "text", value_name = "NAME")]
    pub text_col: String,
    /// Column holding the label (a name, or an integer id)
    #[arg(long, default_value = "label", value_name = "NAME")]
    pub label_col: String,
    /// Premise and hypothesis columns, for text-pair (NLI) data: --pair-cols premise,hypothesis
    #[arg(long, value_delimiter = ',', num_args = 1, value_name = "A,B")]
    pub pair_cols: Option<Vec<String>>,
    /// Column of unique example ids [default: the line number]
    #[arg(long, value_name = "NAME")]
    pub id_col: Option<String>,
    /// Label names in id order, e.g. --labels negative,positive [default: sorted labels found]
    #[arg(long, value_delimiter = ',', value_name = "A,B,…")]
    pub labels: Option<Vec<String>>,
    /// Skip and count malformed rows instead of stopping at the first
    #[arg(long)]
    pub skip_bad: bool,
    /// Rows longer than this many bytes are malformed
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    pub max_row_bytes: usize,
    /// Seed of the 80/10/10 train/dev/test split of files (`FILE:train`, `FILE:dev`, `FILE:test`)
    #[arg(long, default_value_t = 0, value_name = "SEED")]
    pub split_seed: u64,
}

impl ReadArgs {
    /// Every option at its default.
    pub fn defaults() -> Self {
        super::defaults()
    }

    fn options(&self) -> Result<ReadOptions> {
        let pair = match self.pair_cols.as_deref() {
            None => None,
            Some([premise, hypothesis]) => Some((premise.clone(), hypothesis.clone())),
            Some(other) => anyhow::bail!(
                "--pair-cols takes two column names separated by a comma, got {other:?}"
            ),
        };
        Ok(ReadOptions {
            format: self.format,
            columns: Columns {
                text: self.text_col.clone(),
                label: self.label_col.clone(),
                pair,
                id: self.id_col.clone(),
            },
            labels: self.labels.clone(),
            skip_bad: self.skip_bad,
            max_row_bytes: self.max_row_bytes,
            filter: None,
            unlabelled: false,
        })
    }

    /// Loads `spec` (`imdb`, `imdb:test`, `file.csv`, `file.csv:dev`, …), warning about
    /// skipped rows.
    pub fn load(&self, home: &Home, spec: &str) -> Result<Dataset> {
        Ok(self.load_report(home, spec, false)?.dataset)
    }

    /// Loads `spec` as [`ReadArgs::load`] does, but files without reading labels (every
    /// example of a file is [`crate::data::UNLABELLED`]; built-ins keep theirs).
    pub fn load_unlabelled(&self, home: &Home, spec: &str) -> Result<Dataset> {
        Ok(self.load_report(home, spec, true)?.dataset)
    }

    fn load_report(&self, home: &Home, spec: &str, unlabelled: bool) -> Result<ReadReport> {
        let parsed: DatasetSpec = spec.parse()?;
        let splits = SplitConfig {
            dev: 0.1,
            test: 0.1,
            seed: self.split_seed,
        };
        let options = ReadOptions {
            unlabelled,
            ..self.options()?
        };
        let mut report = parsed.load(home, &options, splits)?;
        if let Some(first) = report.skipped.first() {
            tracing::warn!(
                "skipped {} malformed row(s) of {spec}; the first: {first}",
                report.skipped.len()
            );
        }
        if parsed.split.is_some() || report.dataset.name.is_empty() {
            report.dataset.name = spec.to_string();
        }
        Ok(report)
    }
}

#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Read a dataset and summarise it: size, labels, splits, first examples
    Show {
        /// `imdb`, `rotten-tomatoes`, or a CSV/TSV/JSONL/Parquet file (or a directory of
        /// Parquet or Arrow files, as Hugging Face `datasets` saves them); add `:train`, `:dev` or `:test`
        dataset: String,
        #[command(flatten)]
        read: ReadArgs,
        /// How many examples to print
        #[arg(long, default_value_t = 3)]
        head: usize,
        /// Also list the malformed rows that --skip-bad skipped
        #[arg(long)]
        show_bad: bool,
    },
    /// Write DIR/manifest.json for released counterfactuals: each `generate` output in DIR with
    /// its counts and saved settings (method, models, prompt, seed, filter), and every file's
    /// sha256; with --check, verify DIR against it instead
    Manifest {
        dir: PathBuf,
        /// Check the files against the manifest (fails on a changed, missing or extra file)
        #[arg(long)]
        check: bool,
    },
}

pub fn run(home: &Home, command: DataCommand) -> Result<()> {
    match command {
        DataCommand::Show {
            dataset,
            read,
            head,
            show_bad,
        } => {
            let report = read.load_report(home, &dataset, false)?;
            print_summary(&report.dataset, head);
            if !report.skipped.is_empty() {
                println!("skipped  {} malformed row(s)", report.skipped.len());
            }
            if show_bad {
                for bad in &report.skipped {
                    println!("bad row  {}", printable(&bad.to_string()));
                }
            }
            Ok(())
        }
        DataCommand::Manifest { dir, check } => {
            let manifest = if check {
                Manifest::check(&dir)?
            } else {
                Manifest::write(&dir)?
            };
            for (file, run) in &manifest.runs {
                println!(
                    "{file:<24} {:>6} records ({} flipped) of {} items, {} failed attempts",
                    run.records, run.flipped, run.items, run.failed_attempts
                );
            }
            let verb = if check { "match" } else { "listed in" };
            println!(
                "{} files {verb} {}",
                manifest.sha256.len(),
                dir.join(MANIFEST).display()
            );
            Ok(())
        }
    }
}

fn print_summary(data: &Dataset, head: usize) {
    println!("dataset  {}", printable(&data.name));
    println!("examples {}", data.len());
    for (name, count) in data.labels.names().iter().zip(data.label_counts()) {
        println!(
            "label    {:<12} {count:>7} ({:.1}%)",
            printable(name),
            100.0 * count as f64 / data.len().max(1) as f64
        );
    }
    for example in data.examples.iter().take(head) {
        let text = match &example.input {
            Input::Text { text } => text.clone(),
            Input::Pair {
                premise,
                hypothesis,
            } => format!("{premise} ⟂ {hypothesis}"),
        };
        let short: String = text.chars().take(100).collect();
        let ellipsis = if text.chars().count() > 100 {
            "…"
        } else {
            ""
        };
        println!(
            "example  {} [{}] {}{ellipsis}",
            printable(&example.id),
            printable(data.labels.name(example.label)),
            printable(&short)
        );
    }
}

/// `text` safe to print to a terminal: control characters (escape sequences that would move the
/// cursor, recolour or retitle it) and the bidirectional overrides that reorder what is shown
/// become escapes (`\u{1b}`); everything else, quotes included, is kept.
fn printable(text: &str) -> String {
    let hidden =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    text.chars()
        .map(|c| match c {
            c if hidden(c) => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_are_shown_not_obeyed() {
        assert_eq!(
            printable("a\u{1b}[31mred\u{7}\t\u{202e}x \"quoted\" é"),
            "a\\u{1b}[31mred\\u{7}\\u{9}\\u{202e}x \"quoted\" é"
        );
    }
}
