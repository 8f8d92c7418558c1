//! Files of reviewed items, as the portal's export and `review import` write them: the kept
//! counterfactuals (accepted, fixed or relabelled, by their outcome) as a labelled dataset for
//! `flipside classifier train`, as records for `flipside experiment` (the `generate` format),
//! or as (original, counterfactual) pairs for `flipside retriever train` and `reranker train`.

use std::borrow::Cow;

use flipside_shared::portal::Outcome;
use flipside_shared::records::{CoreProvenance, Counterfactual, Provenance};
use serde::{Deserialize, Serialize};

use crate::data::tables::write_parquet;

/// What to export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportKind {
    /// `{id, text, label}`: the kept counterfactuals as labelled examples.
    #[default]
    Classifier,
    /// `{id, text, label, counterfactual}`: label-flipping pairs (retriever and re-ranker).
    Pairs,
    /// Counterfactual records as `flipside generate` writes them (experiment augmentation).
    Records,
}

/// The file format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    #[default]
    Jsonl,
    /// CSV with a header (classifier and pairs formats only).
    Csv,
    /// Apache Parquet (what Hugging Face `datasets` and pandas read): one column per field.
    Parquet,
}

/// What to write: `?format=classifier|pairs|records&as=jsonl|csv|parquet&originals=true`.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct ExportOptions {
    #[serde(default)]
    pub format: ExportKind,
    #[serde(default, rename = "as")]
    pub file: FileFormat,
    /// Classifier format: add each kept item's original with its label too.
    #[serde(default)]
    pub originals: bool,
}

impl ExportOptions {
    /// Refuses what cannot be written (records as CSV).
    pub fn check(&self) -> Result<(), &'static str> {
        if self.file == FileFormat::Csv && self.format == ExportKind::Records {
            return Err("records are exported as JSON lines or Parquet, not CSV");
        }
        Ok(())
    }
}

/// One exported line of the classifier format.
#[derive(Serialize)]
struct Labelled<'a> {
    id: Cow<'a, str>,
    text: Cow<'a, str>,
    label: Cow<'a, str>,
}

/// One exported line of the pairs format (what `read_pairs` reads).
#[derive(Serialize)]
struct Pair<'a> {
    id: Cow<'a, str>,
    text: Cow<'a, str>,
    label: Cow<'a, str>,
    counterfactual: Cow<'a, str>,
}

/// The characters that make a spreadsheet read a cell as a formula (or, the control ones, let a
/// formula follow), the full-width forms included.
const FORMULA_STARTS: [char; 10] = ['=', '+', '-', '@', '\t', '\r', '＝', '＋', '－', '＠'];

/// `text` as a cell of `file`: in CSV, a cell a spreadsheet would run as a formula starts with
/// an apostrophe (OWASP's advice for CSV injection), which spreadsheets show as text; JSON lines
/// keep every text as it is.
fn cell(text: &str, file: FileFormat) -> Cow<'_, str> {
    match file {
        FileFormat::Csv if text.starts_with(FORMULA_STARTS) => Cow::Owned(format!("'{text}")),
        _ => Cow::Borrowed(text),
    }
}

/// A kept item: its id, original, label, decided counterfactual, record and outcome.
pub struct Kept {
    pub id: String,
    pub original: String,
    pub label: String,
    /// The counterfactual as decided (the fix, when fixed).
    pub counterfactual: String,
    /// The `generate` record it came from, when it did.
    pub record: Option<Counterfactual>,
    pub outcome: Outcome,
}

/// The file of `kept` items that `options` asks for.
pub fn render(kept: &[Kept], query: &ExportOptions) -> anyhow::Result<Vec<u8>> {
    let mut lines = Lines::new(query.file);
    let file = query.file;
    match query.format {
        ExportKind::Classifier => {
            let mut originals = std::collections::BTreeSet::new();
            for item in kept {
                if query.originals && originals.insert(item.original.as_str()) {
                    lines.push(&Labelled {
                        id: Cow::Owned(cell(&format!("{}-original", item.id), file).into_owned()),
                        text: cell(&item.original, file),
                        label: cell(&item.label, file),
                    })?;
                }
                lines.push(&Labelled {
                    id: cell(&item.id, file),
                    text: cell(&item.counterfactual, file),
                    label: cell(&item.outcome.label, file),
                })?;
            }
        }
        ExportKind::Pairs => {
            // A relabel to the original's own label is a paraphrase, not a flip.
            for item in kept.iter().filter(|i| i.outcome.label != i.label) {
                lines.push(&Pair {
                    id: cell(&item.id, file),
                    text: cell(&item.original, file),
                    label: cell(&item.label, file),
                    counterfactual: cell(&item.counterfactual, file),
                })?;
            }
        }
        ExportKind::Records => {
            for item in kept {
                lines.push(&reviewed_record(item))?;
            }
        }
    }
    lines.finish()
}

/// The item as a `generate` record, with the reviewed text and label.
fn reviewed_record(item: &Kept) -> Counterfactual {
    let mut record = item.record.clone().unwrap_or_else(|| Counterfactual {
        key: format!("{}→{}", item.id, item.outcome.label),
        item: item.id.clone(),
        method: "human".into(),
        premise: None,
        original: item.original.clone(),
        edited: item.counterfactual.clone(),
        label: item.label.clone(),
        target: item.outcome.label.clone(),
        model: None,
        seed: 0,
        attempt: 1,
        timing: Default::default(),
        // Not scored by the classifier: a person judged it.
        prediction: item.label.clone(),
        target_probability: 0.0,
        flipped: false,
        provenance: Provenance::Core(CoreProvenance::default()),
        chosen: None,
    });
    record.edited = item.counterfactual.clone();
    record.target = item.outcome.label.clone();
    record
}

/// JSON lines, CSV rows (with a header) or a Parquet table of serialisable lines.
enum Lines {
    Jsonl(Vec<u8>),
    Csv(Box<csv::Writer<Vec<u8>>>),
    /// Each line's JSON, until the table is written.
    Parquet(Vec<String>),
}

impl Lines {
    fn new(format: FileFormat) -> Self {
        match format {
            FileFormat::Jsonl => Lines::Jsonl(Vec::new()),
            FileFormat::Csv => Lines::Csv(Box::new(csv::Writer::from_writer(Vec::new()))),
            FileFormat::Parquet => Lines::Parquet(Vec::new()),
        }
    }

    fn push(&mut self, line: &impl Serialize) -> anyhow::Result<()> {
        match self {
            Lines::Jsonl(out) => {
                serde_json::to_writer(&mut *out, line)?;
                out.push(b'\n');
            }
            Lines::Csv(writer) => writer.serialize(line)?,
            Lines::Parquet(rows) => rows.push(serde_json::to_string(line)?),
        }
        Ok(())
    }

    fn finish(self) -> anyhow::Result<Vec<u8>> {
        Ok(match self {
            Lines::Jsonl(out) => out,
            Lines::Csv(writer) => writer.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?,
            Lines::Parquet(rows) => {
                let mut out = Vec::new();
                write_parquet(rows.iter().map(String::as_str), &mut out)?;
                out
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use flipside_shared::portal::Verdict;

    use super::*;

    /// Every start a spreadsheet reads as a formula, in every cell of both CSV formats; JSON
    /// lines keep the texts as typed.
    #[test]
    fn csv_cells_that_would_run_as_formulas_start_with_an_apostrophe() {
        let kept: Vec<Kept> = FORMULA_STARTS
            .iter()
            .enumerate()
            .map(|(i, start)| Kept {
                id: format!("{start}id{i}"),
                original: format!("{start}original"),
                label: format!("{start}positive"),
                counterfactual: format!("{start}SUM(1, 1)"),
                record: None,
                outcome: Outcome {
                    verdict: Verdict::Accept,
                    text: None,
                    label: format!("{start}negative"),
                    reviewed: false,
                },
            })
            .collect();
        for format in [ExportKind::Classifier, ExportKind::Pairs] {
            let query = |file| ExportOptions {
                format,
                file,
                originals: true,
            };
            let csv = render(&kept, &query(FileFormat::Csv)).unwrap();
            let mut reader = csv::Reader::from_reader(csv.as_slice());
            let mut cells = 0;
            for record in reader.records() {
                for cell in record.unwrap().iter() {
                    assert!(cell.starts_with('\''), "{format:?}: {cell:?}");
                    assert!(cell[1..].starts_with(FORMULA_STARTS), "{cell:?}");
                    cells += 1;
                }
            }
            assert!(cells >= 3 * FORMULA_STARTS.len(), "{format:?}: {cells}");
            let jsonl = render(&kept, &query(FileFormat::Jsonl)).unwrap();
            let jsonl = String::from_utf8(jsonl).unwrap();
            assert!(jsonl.contains("\"=SUM(1, 1)\""), "{jsonl}");
            assert!(!jsonl.contains("'="), "{jsonl}");
        }
        assert_eq!(cell("plain text", FileFormat::Csv), "plain text");
    }
}
