//! Readers for labelled CSV, TSV, JSONL, Parquet and Arrow files with column mapping.
//!
//! A malformed row is an error naming the file, line (in Parquet and Arrow: row) and reason, or
//! — with `skip_bad` — is skipped and counted. Rows are never silently dropped or mislabelled.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use arrow_array::RecordBatch;
use flipside_shared::data::{Dataset, Example, Input, LabelVocab};

use super::tables::{self, TableFormat};

/// A file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Comma-separated, with a header row and RFC 4180 quoting.
    Csv,
    /// Tab-separated, with a header row; quotes are ordinary characters.
    Tsv,
    /// One JSON object per line.
    Jsonl,
    /// Apache Parquet: a file, or a directory of them (`datasets`' `to_parquet`, a Hub
    /// dataset's `data/` folder).
    Parquet,
    /// Arrow IPC: a `datasets` `save_to_disk` directory, or one file.
    Arrow,
}

impl Format {
    /// The format implied by a file extension (`.csv`, `.tsv`, `.jsonl`/`.ndjson`,
    /// `.parquet`/`.pq`, `.arrow`).
    pub fn from_path(path: &Path) -> Option<Self> {
        if let Some(table) = TableFormat::from_path(path) {
            return Some(Format::from(table));
        }
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "csv" => Some(Format::Csv),
            "tsv" | "tab" => Some(Format::Tsv),
            "jsonl" | "ndjson" => Some(Format::Jsonl),
            _ => None,
        }
    }

    /// Every format, in the order `--help` lists them.
    pub const ALL: [Format; 5] = [
        Format::Csv,
        Format::Tsv,
        Format::Jsonl,
        Format::Parquet,
        Format::Arrow,
    ];

    /// The format's name (`csv`, `tsv`, `jsonl`, `parquet`, `arrow`).
    pub fn name(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Tsv => "tsv",
            Format::Jsonl => "jsonl",
            Format::Parquet => "parquet",
            Format::Arrow => "arrow",
        }
    }

    /// The format named `name` (see [`Format::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Format::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The table format of Parquet and Arrow; `None` for the text formats.
    fn table(self) -> Option<TableFormat> {
        match self {
            Format::Parquet => Some(TableFormat::Parquet),
            Format::Arrow => Some(TableFormat::Arrow),
            Format::Csv | Format::Tsv | Format::Jsonl => None,
        }
    }
}

impl From<TableFormat> for Format {
    fn from(table: TableFormat) -> Self {
        match table {
            TableFormat::Parquet => Format::Parquet,
            TableFormat::Arrow => Format::Arrow,
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
    /// Read texts without labels (for corpora): the label column is ignored and every example
    /// gets the one label [`UNLABELLED`].
    pub unlabelled: bool,
}

/// The single label of a dataset read with [`ReadOptions::unlabelled`].
pub const UNLABELLED: &str = "unlabelled";

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            format: None,
            columns: Columns::default(),
            labels: None,
            skip_bad: false,
            max_row_bytes: 1 << 20,
            filter: None,
            unlabelled: false,
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

/// Reads a labelled dataset file (or a directory of Parquet or Arrow files).
pub fn read_file(path: &Path, options: &ReadOptions) -> Result<ReadReport> {
    let format = options.format.or_else(|| Format::from_path(path));
    let mut collector = Collector {
        path,
        skip_bad: options.skip_bad,
        labels: options.labels.clone().map(LabelVocab::new),
        examples: Vec::new(),
        unlabelled: Vec::new(),
        skipped: Vec::new(),
    };
    let table = format.and_then(Format::table);
    if path.is_dir() || table.is_some() {
        read_table(path, table, options, &mut collector)
            .with_context(|| format!("cannot read {}", path.display()))?;
    } else {
        let Some(format) = format else {
            bail!(
                "cannot tell the format of {} from its extension; pass --format \
                 csv|tsv|jsonl|parquet|arrow",
                path.display()
            )
        };
        read_text(path, format, options, &mut collector)?;
    }

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

/// Reads a CSV, TSV or JSONL file (UTF-8, a byte-order mark skipped) into `rows`.
fn read_text(
    path: &Path,
    format: Format,
    options: &ReadOptions,
    rows: &mut Collector<'_>,
) -> Result<()> {
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
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
    match format {
        Format::Csv | Format::Tsv => read_delimited(reader, format, options, rows),
        Format::Jsonl => read_jsonl(reader, options, rows),
        Format::Parquet | Format::Arrow => unreachable!("tables are read by read_table"),
    }
    .with_context(|| format!("cannot read {}", path.display()))
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
fn build_row(
    cells: &dyn RowCells,
    line: u64,
    options: &ReadOptions,
) -> Result<Option<RawRow>, String> {
    let required = |column: &str| -> Result<String, String> {
        cells
            .cell(column)?
            .ok_or_else(|| format!("missing value for column {column:?}"))
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
    let label = if options.unlabelled {
        UNLABELLED.to_string()
    } else {
        required(&columns.label)?.trim().to_string()
    };
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
            Some(bytes) => String::from_utf8(bytes.to_vec()).map(Some).map_err(|e| {
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
            Some(other) => Err(format!(
                "field {column:?} is not a string or number: {other}"
            )),
        }
    }
}

fn read_jsonl(
    mut reader: impl BufRead,
    options: &ReadOptions,
    rows: &mut Collector<'_>,
) -> Result<()> {
    let mut line_number = 0;
    let mut buffer = Vec::new();
    loop {
        line_number += 1;
        let line = match read_bounded_line(&mut reader, &mut buffer, options.max_row_bytes)? {
            LineRead::Eof => break,
            LineRead::TooLong(size) => {
                rows.push(Err((
                    line_number,
                    format!("line is over {size} bytes, the limit (--max-row-bytes)"),
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
            Err(e) if e.is_syntax() && std::str::from_utf8(line).is_err() => Err(
                "line is not valid UTF-8; convert the file, e.g. iconv -f latin1 -t utf-8".into(),
            ),
            Err(e) => Err(format!("invalid JSON: {e}")),
        };
        rows.push(row.map_err(|reason| (line_number, reason)))?;
    }
    Ok(())
}

/// The cells of one row of a record batch.
struct TableCells<'a> {
    batch: &'a RecordBatch,
    row: usize,
    max_bytes: usize,
}

impl RowCells for TableCells<'_> {
    fn cell(&self, column: &str) -> Result<Option<String>, String> {
        let array = self
            .batch
            .column_by_name(column)
            .expect("columns are checked against the schema");
        let text =
            tables::cell_text(array, self.row).map_err(|e| format!("column {column:?} {e}"))?;
        match text {
            Some(text) if text.len() > self.max_bytes => Err(format!(
                "column {column:?} holds {} bytes, over the limit of {} (--max-row-bytes)",
                text.len(),
                self.max_bytes
            )),
            text => Ok(text),
        }
    }
}

/// Reads a Parquet or Arrow table (a file or a directory of them) into `rows`, numbering rows
/// from 1 across its files. Integer labels of a Hugging Face `ClassLabel` column are its names
/// unless label names are given.
fn read_table(
    path: &Path,
    format: Option<TableFormat>,
    options: &ReadOptions,
    rows: &mut Collector<'_>,
) -> Result<()> {
    let mut needed = needed_columns(options);
    needed.sort_unstable();
    needed.dedup();
    let mut row_number = 0u64;
    for (file, format) in tables::table_files(path, format)? {
        let schema = tables::file_schema(&file, format)?;
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        for column in &needed {
            if !names.contains(column) {
                bail!(
                    "no column {column:?} in {} (columns: {}); map columns with --text-col, \
                     --label-col, --pair-cols or --id-col",
                    file.display(),
                    names.join(", ")
                );
            }
        }
        if row_number == 0
            && rows.labels.is_none()
            && !options.unlabelled
            && let Some(names) = tables::class_label_names(
                &schema,
                path.is_dir().then_some(path),
                &options.columns.label,
            )
        {
            rows.labels = Some(LabelVocab::new(names));
        }
        tables::for_each_batch(&file, format, Some(&needed), |batch| {
            for row in 0..batch.num_rows() {
                row_number += 1;
                let cells = TableCells {
                    batch,
                    row,
                    max_bytes: options.max_row_bytes,
                };
                let built = build_row(&cells, row_number, options);
                rows.push(built.map_err(|reason| (row_number, reason)))?;
            }
            Ok(())
        })
        .with_context(|| format!("cannot read {}", file.display()))?;
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
fn read_bounded_line(
    reader: &mut impl BufRead,
    buffer: &mut Vec<u8>,
    limit: usize,
) -> Result<LineRead> {
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
    let mut columns = Vec::new();
    if !options.unlabelled {
        columns.push(c.label.as_str());
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        (dir, path)
    }

    fn read(name: &str, bytes: &[u8], options: &ReadOptions) -> Result<ReadReport> {
        let (_dir, path) = write(name, bytes);
        read_file(&path, options)
    }

    fn error(name: &str, bytes: &[u8], options: &ReadOptions) -> String {
        format!("{:#}", read(name, bytes, options).unwrap_err())
    }

    fn texts(report: &ReadReport) -> Vec<String> {
        report
            .dataset
            .examples
            .iter()
            .map(|e| e.input.texts().join(" | "))
            .collect()
    }

    fn sentiment() -> ReadOptions {
        ReadOptions {
            labels: Some(vec!["neg".into(), "pos".into()]),
            ..ReadOptions::default()
        }
    }

    #[test]
    fn csv_with_quoting_names_and_integer_ids() {
        let csv = "text,label\n\"great, truly\",pos\n\"two\nlines\",0\nplain,1\n";
        let report = read("a.csv", csv.as_bytes(), &sentiment()).unwrap();
        assert_eq!(texts(&report), vec!["great, truly", "two\nlines", "plain"]);
        let labels: Vec<usize> = report.dataset.examples.iter().map(|e| e.label).collect();
        assert_eq!(labels, vec![1, 0, 1]);
        let ids: Vec<&str> = report
            .dataset
            .examples
            .iter()
            .map(|e| e.id.as_str())
            .collect();
        assert_eq!(ids, vec!["line-2", "line-3", "line-5"]);
    }

    #[test]
    fn inferred_labels_sort_numerically() {
        let csv = "text,label\na,10\nb,2\nc,10\n";
        let report = read("a.csv", csv.as_bytes(), &ReadOptions::default()).unwrap();
        assert_eq!(report.dataset.labels.names(), ["2", "10"]);
        assert_eq!(report.dataset.label_counts(), vec![1, 2]);
    }

    #[test]
    fn column_mapping_and_pairs() {
        let tsv = "id\tp\th\tgold\nx1\tA man sleeps.\tA man is \"awake\".\tcontradiction\n";
        let options = ReadOptions {
            columns: Columns {
                label: "gold".into(),
                pair: Some(("p".into(), "h".into())),
                id: Some("id".into()),
                ..Columns::default()
            },
            ..ReadOptions::default()
        };
        let report = read("nli.tsv", tsv.as_bytes(), &options).unwrap();
        let example = &report.dataset.examples[0];
        assert_eq!(example.id, "x1");
        assert_eq!(
            example.input,
            Input::Pair {
                premise: "A man sleeps.".into(),
                hypothesis: "A man is \"awake\".".into()
            }
        );
        assert_eq!(report.dataset.labels.names(), ["contradiction"]);
    }

    #[test]
    fn missing_column_names_the_columns() {
        let err = error("a.csv", b"review,label\nok,pos\n", &sentiment());
        assert!(
            err.contains("no column \"text\"") && err.contains("review, label"),
            "{err}"
        );
    }

    #[test]
    fn bad_rows_name_file_line_and_reason() {
        let cases: Vec<(&str, &[u8], &str)> = vec![
            (
                "short row",
                b"text,label\nfine,pos\nno label here\n",
                ":3: expected 2 fields, found 1",
            ),
            (
                "unknown label",
                b"text,label\nfine,pos\nmeh,neutral\n",
                ":3: unknown label \"neutral\"",
            ),
            (
                "label id out of range",
                b"text,label\nfine,7\n",
                ":2: unknown label \"7\"",
            ),
            ("empty text", b"text,label\n  ,pos\n", ":2: empty text"),
            ("empty label", b"text,label\nfine,\n", ":2: empty label"),
            (
                "bad encoding",
                b"text,label\ncaf\xe9 au lait,pos\n",
                ":2: column \"text\" is not valid UTF-8",
            ),
            (
                "stray quote",
                b"text,label\n\"unclosed,pos\nnext,neg\n",
                ":2: expected 2 fields, found 1",
            ),
        ];
        for (case, bytes, expected) in cases {
            let err = error("bad.csv", bytes, &sentiment());
            assert!(
                err.contains("bad.csv") && err.contains(expected),
                "{case}: {err}"
            );
            assert!(err.contains("--skip-bad"), "{case}: {err}");
        }
    }

    #[test]
    fn skip_bad_counts_and_keeps_the_good_rows() {
        let csv = b"text,label\nfine,pos\nmeh,neutral\n,neg\nalso fine,neg\ncaf\xe9,pos\n";
        let options = ReadOptions {
            skip_bad: true,
            ..sentiment()
        };
        let report = read("mixed.csv", csv, &options).unwrap();
        assert_eq!(texts(&report), vec!["fine", "also fine"]);
        let lines: Vec<u64> = report.skipped.iter().map(|b| b.line).collect();
        assert_eq!(lines, vec![3, 4, 6]);
    }

    #[test]
    fn huge_rows_are_rejected_without_loading_them_whole() {
        let options = ReadOptions {
            max_row_bytes: 1000,
            skip_bad: true,
            ..sentiment()
        };
        let mut jsonl = br#"{"text":"ok","label":"pos"}"#.to_vec();
        jsonl.extend(b"\n{\"text\":\"");
        jsonl.extend(std::iter::repeat_n(b'x', 5000));
        jsonl.extend(b"\",\"label\":\"neg\"}\n{\"text\":\"after\",\"label\":\"neg\"}\n");
        let report = read("big.jsonl", &jsonl, &options).unwrap();
        assert_eq!(texts(&report), vec!["ok", "after"]);
        assert_eq!(report.skipped[0].line, 2);
        assert!(report.skipped[0].reason.contains("--max-row-bytes"));

        let mut csv = b"text,label\n".to_vec();
        csv.extend(std::iter::repeat_n(b'y', 5000));
        csv.extend(b",pos\nsmall,neg\n");
        let report = read("big.csv", &csv, &options).unwrap();
        assert_eq!(texts(&report), vec!["small"]);
        assert!(report.skipped[0].reason.contains("over the limit of 1000"));
    }

    #[test]
    fn jsonl_errors_and_values() {
        let options = sentiment();
        let good =
            b"{\"text\":\"a\",\"label\":1}\n\n{\"text\":\"b\",\"label\":\"neg\",\"extra\":[1]}\r\n";
        let report = read("d.jsonl", good, &options).unwrap();
        assert_eq!(texts(&report), vec!["a", "b"]);
        assert_eq!(report.dataset.examples[0].label, 1);
        for (bytes, expected) in [
            (
                &b"{\"text\":\"a\",\"label\":\"pos\"}\n{\"text\": \"b\"\n"[..],
                ":2: invalid JSON",
            ),
            (b"[1,2]\n", ":1: line is not a JSON object"),
            (
                b"{\"label\":\"pos\"}\n",
                ":1: missing value for column \"text\"",
            ),
            (
                b"{\"text\":{\"a\":1},\"label\":\"pos\"}\n",
                "not a string or number",
            ),
            (
                b"{\"text\":\"caf\xe9\",\"label\":\"pos\"}\n",
                ":1: line is not valid UTF-8",
            ),
        ] {
            let err = error("d.jsonl", bytes, &options);
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn whole_file_problems() {
        let utf16 = [0xff, 0xfe, b't', 0, b'e', 0];
        assert!(error("u.csv", &utf16, &sentiment()).contains("UTF-16"));
        assert!(error("notes.txt", b"x", &sentiment()).contains("--format"));
        let dupes = "id,text,label\n1,a,pos\n1,b,neg\n";
        let options = ReadOptions {
            columns: Columns {
                id: Some("id".into()),
                ..Columns::default()
            },
            ..sentiment()
        };
        assert!(error("d.csv", dupes.as_bytes(), &options).contains("duplicate example id"));
        let bom = "\u{feff}text,label\nok,pos\n";
        assert_eq!(
            texts(&read("b.csv", bom.as_bytes(), &sentiment()).unwrap()),
            vec!["ok"]
        );
    }

    #[test]
    fn filter_keeps_matching_rows() {
        let csv = "text,label,source\na,pos,x\nb,neg,y\n";
        let options = ReadOptions {
            filter: Some(("source".into(), "y".into())),
            ..sentiment()
        };
        assert_eq!(
            texts(&read("f.csv", csv.as_bytes(), &options).unwrap()),
            vec!["b"]
        );
    }

    /// Generated files: whatever the bytes, a clear error or a valid dataset; and every text
    /// written by a standard writer reads back exactly, with its label.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Bytes that often look like a dataset: a header, then cells with quotes, separators
        /// and line breaks in odd places; or anything at all.
        fn dataset_like() -> impl Strategy<Value = Vec<u8>> {
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..300),
                "(text,label|text\tlabel|\\{\"text\":)?[a-z0-9 ,\"\t\n\r{}:\\\\é€]{0,200}"
                    .prop_map(String::into_bytes),
            ]
        }

        /// A text a reader must keep as it is: not blank, any characters.
        fn text() -> impl Strategy<Value = String> {
            "[^\\x00]{0,40}[a-zA-Z0-9é€😀][^\\x00]{0,40}"
        }

        fn write_temp(suffix: &str, bytes: &[u8]) -> tempfile::NamedTempFile {
            let mut file = tempfile::Builder::new().suffix(suffix).tempfile().unwrap();
            file.write_all(bytes).unwrap();
            file
        }

        fn read_back(report: &ReadReport) -> Vec<(String, String)> {
            report
                .dataset
                .examples
                .iter()
                .map(|e| {
                    let label = report.dataset.labels.name(e.label).to_string();
                    (e.input.texts()[0].to_string(), label)
                })
                .collect()
        }

        proptest! {
            #![proptest_config(crate::property_config(1500))]

            #[test]
            fn any_bytes_give_a_dataset_or_an_error_naming_the_file(
                bytes in dataset_like(),
                suffix in prop_oneof![Just(".csv"), Just(".tsv"), Just(".jsonl")],
                skip_bad: bool,
            ) {
                let file = write_temp(suffix, &bytes);
                let options = ReadOptions { skip_bad, ..ReadOptions::default() };
                match read_file(file.path(), &options) {
                    Ok(report) => prop_assert!(report.dataset.validate().is_ok()),
                    Err(error) => {
                        let message = format!("{error:#}");
                        let name = file.path().file_name().unwrap().to_string_lossy();
                        prop_assert!(message.contains(name.as_ref()), "{message}");
                    }
                }
            }

            #[test]
            fn csv_and_jsonl_read_back_what_was_written(
                rows in proptest::collection::vec((text(), "[a-z]{1,6}"), 1..12),
            ) {
                let mut csv = csv::Writer::from_writer(Vec::new());
                csv.write_record(["text", "label"]).unwrap();
                let mut jsonl = String::new();
                for (text, label) in &rows {
                    csv.write_record([text, label]).unwrap();
                    jsonl += &serde_json::json!({"text": text, "label": label}).to_string();
                    jsonl.push('\n');
                }
                for (suffix, bytes) in [
                    (".csv", csv.into_inner().unwrap()),
                    (".jsonl", jsonl.into_bytes()),
                ] {
                    let file = write_temp(suffix, &bytes);
                    let report = read_file(file.path(), &ReadOptions::default());
                    prop_assert!(report.is_ok(), "{suffix}: {:#}", report.unwrap_err());
                    prop_assert_eq!(read_back(&report.unwrap()), rows.clone());
                }
            }

            #[test]
            fn tsv_reads_back_texts_without_tabs_or_line_breaks(
                rows in proptest::collection::vec(
                    ("[^\\x00\t\n\r]{0,30}[a-z][^\\x00\t\n\r]{0,30}", "[a-z]{1,6}"),
                    1..12,
                ),
            ) {
                let mut tsv = String::from("text\tlabel\n");
                for (text, label) in &rows {
                    tsv += &format!("{text}\t{label}\n");
                }
                let file = write_temp(".tsv", tsv.as_bytes());
                let report = read_file(file.path(), &ReadOptions::default());
                prop_assert!(report.is_ok(), "{:#}", report.unwrap_err());
                prop_assert_eq!(read_back(&report.unwrap()), rows);
            }
        }
    }
}
