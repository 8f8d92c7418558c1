//! Readers for labelled CSV, TSV and JSONL files with column mapping.
//!
//! A malformed row is an error naming the file, line and reason, or — with `skip_bad` — is
//! skipped and counted. Rows are never silently dropped or mislabelled.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use flipside_shared::data::{Dataset, Example, Input, LabelVocab};

/// A file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Comma-separated, with a header row and RFC 4180 quoting.
    Csv,
    /// Tab-separated, with a header row; quotes are ordinary characters.
    Tsv,
    /// One JSON object per line.
    Jsonl,
}

impl Format {
    /// The format implied by a file extension (`.csv`, `.tsv`, `.jsonl`/`.ndjson`).
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "csv" => Some(Format::Csv),
            "tsv" | "tab" => Some(Format::Tsv),
            "jsonl" | "ndjson" => Some(Format::Jsonl),
            _ => None,
        }
    }
}

/// Which columns (or JSON fields) hold what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    /// The text column (single-text datasets).
    pub text: String,
    /// The label column.
    pub label: String,
    /// Premise and hypothesis columns; when set, examples are text pairs.
    pub pair: Option<(String, String)>,
    /// A column of unique example ids; by default an example's id is its line number.
    pub id: Option<String>,
}

impl Default for Columns {
    fn default() -> Self {
        Self {
            text: "text".into(),
            label: "label".into(),
            pair: None,
            id: None,
        }
    }
}

/// How to read a dataset file.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The format; inferred from the extension when `None`.
    pub format: Option<Format>,
    pub columns: Columns,
    /// The label names in id order. A label cell may hold a name or an integer id. When
    /// `None`, the labels found are sorted (numerically if all are integers).
    pub labels: Option<Vec<String>>,
    /// Skip and count malformed rows instead of failing on the first.
    pub skip_bad: bool,
    /// Rows longer than this are malformed.
    pub max_row_bytes: usize,
    /// Keep only rows whose column equals this value.
    pub filter: Option<(String, String)>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            format: None,
            columns: Columns::default(),
            labels: None,
            skip_bad: false,
            max_row_bytes: 1 << 20,
            filter: None,
        }
    }
}

/// A malformed row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRow {
    pub file: PathBuf,
    pub line: u64,
    pub reason: String,
}

impl fmt::Display for BadRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
    }
}

/// A dataset read from a file, with the rows skipped under `skip_bad`.
#[derive(Debug)]
pub struct ReadReport {
    pub dataset: Dataset,
    pub skipped: Vec<BadRow>,
}

/// One parsed row before its label is resolved.
struct RawRow {
    line: u64,
    id: String,
    input: Input,
    label: String,
}

/// Reads a labelled dataset file.
pub fn read_file(path: &Path, options: &ReadOptions) -> Result<ReadReport> {
    let format = match options.format.or_else(|| Format::from_path(path)) {
        Some(format) => format,
        None => bail!(
            "cannot tell the format of {} from its extension; pass --format csv|tsv|jsonl",
            path.display()
        ),
    };
    let mut file =
        File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut head = [0u8; 3];
    let n = file.read(&mut head)?;
    if head[..n.min(2)] == [0xff, 0xfe] || head[..n.min(2)] == [0xfe, 0xff] {
        bail!(
            "{} is UTF-16; Flipside reads UTF-8 (convert with: iconv -f UTF-16 -t UTF-8)",
            path.display()
        );
    }
    let mut reader = BufReader::new(File::open(path)?);
    if head[..n] == [0xef, 0xbb, 0xbf] {
        reader.consume(3);
    }

    let mut collector = Collector {
        path,
        skip_bad: options.skip_bad,
        labels: options.labels.clone().map(LabelVocab::new),
        examples: Vec::new(),
        unlabelled: Vec::new(),
        skipped: Vec::new(),
    };
    match format {
        Format::Csv | Format::Tsv => read_delimited(reader, format, options, &mut collector),
        Format::Jsonl => read_jsonl(reader, options, &mut collector),
    }
    .with_context(|| format!("cannot read {}", path.display()))?;

    let Collector {
        labels,
        mut examples,
        unlabelled,
        skipped,
        ..
    } = collector;
    // Without given label names, every label found is in the inferred vocabulary.
    let labels = labels.unwrap_or_else(|| inferred_vocab(&unlabelled));
    examples.extend(unlabelled.into_iter().map(|row| Example {
        label: resolve_label(&labels, &row.label).expect("inferred labels cover every row"),
        id: row.id,
        input: row.input,
    }));
    let dataset = Dataset {
        name: path
            .file_stem()
            .map_or_else(|| "dataset".into(), |s| s.to_string_lossy().into_owned()),
        labels,
        examples,
    };
    dataset
        .validate()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(ReadReport { dataset, skipped })
}

/// Receives parsed rows in file order: resolves labels, and fails on or counts bad rows.
struct Collector<'a> {
    path: &'a Path,
    skip_bad: bool,
    /// Given label names; `None` until the whole file is read when they are inferred.
    labels: Option<LabelVocab>,
    examples: Vec<Example>,
    /// Rows waiting for the inferred vocabulary.
    unlabelled: Vec<RawRow>,
    skipped: Vec<BadRow>,
}

impl Collector<'_> {
    fn push(&mut self, row: Result<Option<RawRow>, (u64, String)>) -> Result<()> {
        let row = match row {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(()),
            Err((line, reason)) => return self.bad(line, reason),
        };
        let Some(labels) = &self.labels else {
            self.unlabelled.push(row);
            return Ok(());
        };
        match resolve_label(labels, &row.label) {
            Some(label) => {
                self.examples.push(Example {
                    id: row.id,
                    input: row.input,
                    label,
                });
                Ok(())
            }
            None => {
                let reason = format!(
                    "unknown label {:?} (labels: {}; or an integer id below {})",
                    row.label,
                    labels.names().join(", "),
                    labels.len()
                );
                self.bad(row.line, reason)
            }
        }
    }

    fn bad(&mut self, line: u64, reason: String) -> Result<()> {
        let bad = BadRow {
            file: self.path.to_path_buf(),
            line,
            reason,
        };
        if !self.skip_bad {
            bail!("{bad} (pass --skip-bad to skip and count malformed rows)");
        }
        self.skipped.push(bad);
        Ok(())
    }
}

/// The cells of one row, looked up by column name.
trait RowCells {
    fn cell(&self, column: &str) -> Result<Option<String>, String>;
}

/// Builds a row from its cells, or says why it is malformed. `Ok(None)` means filtered out.
fn build_row(cells: &dyn RowCells, line: u64, options: &ReadOptions) -> Result<Option<RawRow>, String> {
    let required = |column: &str| -> Result<String, String> {
        cells.cell(column)?.ok_or_else(|| format!("missing value for column {column:?}"))
    };
    if let Some((column, value)) = &options.filter
        && &required(column)? != value
    {
        return Ok(None);
    }
    let columns = &options.columns;
    let non_empty = |column: &str| -> Result<String, String> {
        let text = required(column)?;
        if text.trim().is_empty() {
            return Err(format!("empty text in column {column:?}"));
        }
        Ok(text)
    };
    let input = match &columns.pair {
        Some((premise, hypothesis)) => Input::Pair {
            premise: non_empty(premise)?,
            hypothesis: non_empty(hypothesis)?,
        },
        None => Input::Text {
            text: non_empty(&columns.text)?,
        },
    };
    let label = required(&columns.label)?.trim().to_string();
    if label.is_empty() {
        return Err(format!("empty label in column {:?}", columns.label));
    }
    let id = match &columns.id {
        Some(column) => non_empty(column)?,
        None => format!("line-{line}"),
    };
    Ok(Some(RawRow {
        line,
        id,
        input,
        label,
    }))
}

struct DelimitedCells<'a> {
    header: &'a [String],
    record: &'a csv::ByteRecord,
}

impl RowCells for DelimitedCells<'_> {
    fn cell(&self, column: &str) -> Result<Option<String>, String> {
        let index = self
            .header
            .iter()
            .position(|h| h == column)
            .expect("columns are checked against the header");
        match self.record.get(index) {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes.to_vec())
                .map(Some)
                .map_err(|e| {
                    format!(
                        "column {column:?} is not valid UTF-8 (at byte {}); \
                         convert the file, e.g. iconv -f latin1 -t utf-8",
                        e.utf8_error().valid_up_to()
                    )
                }),
        }
    }
}

fn read_delimited(
    reader: impl Read,
    format: Format,
    options: &ReadOptions,
    rows: &mut Collector<'_>,
) -> Result<()> {
    let mut csv = csv::ReaderBuilder::new()
        .delimiter(if format == Format::Tsv { b'\t' } else { b',' })
        .quoting(format == Format::Csv)
        .flexible(true)
        .has_headers(true)
        .from_reader(reader);
    let header: Vec<String> = csv
        .byte_headers()
        .context("cannot read the header row")?
        .iter()
        .map(|h| String::from_utf8_lossy(h).trim().to_string())
        .collect();
    for column in needed_columns(options) {
        if !header.iter().any(|h| h == column) {
            bail!(
                "no column {column:?} in the header (columns: {}); map columns with \
                 --text-col, --label-col, --pair-cols or --id-col",
                header.join(", ")
            );
        }
    }
    let mut record = csv::ByteRecord::new();
    loop {
        let line = csv.position().line();
        match csv.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                rows.push(Err((line, format!("unreadable row: {e}"))))?;
                continue;
            }
        }
        let line = record.position().map_or(line, |p| p.line());
        let size = record.as_slice().len();
        let row = if size > options.max_row_bytes {
            Err(format!(
                "row is {size} bytes, over the limit of {} (--max-row-bytes); \
                 an unclosed quote can also make a row swallow the rest of the file",
                options.max_row_bytes
            ))
        } else if record.len() != header.len() {
            Err(format!(
                "expected {} fields, found {} (check the quoting)",
                header.len(),
                record.len()
            ))
        } else {
            build_row(
                &DelimitedCells {
                    header: &header,
                    record: &record,
                },
                line,
                options,
            )
        };
        rows.push(row.map_err(|reason| (line, reason)))?;
    }
    Ok(())
}

struct JsonCells<'a>(&'a serde_json::Map<String, serde_json::Value>);

impl RowCells for JsonCells<'_> {
    fn cell(&self, column: &str) -> Result<Option<String>, String> {
        match self.0.get(column) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(serde_json::Value::Number(n)) => Ok(Some(n.to_string())),
            Some(serde_json::Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(other) => Err(format!("field {column:?} is not a string or number: {other}")),
        }
    }
}

fn read_jsonl(mut reader: impl BufRead, options: &ReadOptions, rows: &mut Collector<'_>) -> Result<()> {
    let mut line_number = 0;
    let mut buffer = Vec::new();
    loop {
        line_number += 1;
        let line = match read_bounded_line(&mut reader, &mut buffer, options.max_row_bytes)? {
            LineRead::Eof => break,
            LineRead::TooLong(size) => {
                rows.push(Err((
                    line_number,
                    format!(
                        "line is over {size} bytes, the limit (--max-row-bytes)"
                    ),
                )))?;
                continue;
            }
            LineRead::Line => &buffer,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let row = match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(serde_json::Value::Object(map)) => build_row(&JsonCells(&map), line_number, options),
            Ok(_) => Err("line is not a JSON object".to_string()),
            Err(e) if e.is_syntax() && std::str::from_utf8(line).is_err() => {
                Err("line is not valid UTF-8; convert the file, e.g. iconv -f latin1 -t utf-8".into())
            }
            Err(e) => Err(format!("invalid JSON: {e}")),
        };
        rows.push(row.map_err(|reason| (line_number, reason)))?;
    }
    Ok(())
}

enum LineRead {
    Eof,
    Line,
    /// The line was longer than the limit; it has been skipped.
    TooLong(usize),
}

/// Reads one line into `buffer` (without the newline), never holding more than `limit` bytes.
fn read_bounded_line(reader: &mut impl BufRead, buffer: &mut Vec<u8>, limit: usize) -> Result<LineRead> {
    buffer.clear();
    let mut too_long = false;
    let mut any = false;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            break;
        }
        any = true;
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if !too_long && buffer.len() + chunk.len() <= limit {
            buffer.extend_from_slice(chunk);
        } else {
            too_long = true;
            buffer.clear();
        }
        let consumed = done.unwrap_or(available.len());
        reader.consume(consumed);
        if done.is_some() {
            break;
        }
    }
    Ok(match (any, too_long) {
        (false, _) => LineRead::Eof,
        (true, true) => LineRead::TooLong(limit),
        (true, false) => {
            if buffer.last() == Some(&b'\r') {
                buffer.pop();
            }
            LineRead::Line
        }
    })
}

fn needed_columns(options: &ReadOptions) -> Vec<&str> {
    let c = &options.columns;
    let mut columns = vec![c.label.as_str()];
    match &c.pair {
        Some((premise, hypothesis)) => columns.extend([premise.as_str(), hypothesis.as_str()]),
        None => columns.push(&c.text),
    }
    columns.extend(c.id.as_deref());
    columns.extend(options.filter.as_ref().map(|(column, _)| column.as_str()));
    columns
}

/// The distinct labels found, sorted (numerically when all are integers).
fn inferred_vocab(rows: &[RawRow]) -> LabelVocab {
    let found: BTreeSet<&str> = rows.iter().map(|r| r.label.as_str()).collect();
    let mut names: Vec<String> = found.into_iter().map(String::from).collect();
    if names.iter().all(|n| n.parse::<i64>().is_ok()) {
        names.sort_by_key(|n| n.parse::<i64>().expect("checked"));
    }
    LabelVocab::new(names)
}

/// A label cell's id: its position as a name, else an integer id in range.
fn resolve_label(labels: &LabelVocab, cell: &str) -> Option<usize> {
    labels
        .id(cell)
        .or_else(|| cell.parse::<usize>().ok().filter(|&i| i < labels.len()))
}
