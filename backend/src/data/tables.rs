//! Arrow tables on disk: Parquet files, Arrow IPC files, and directories of them as Hugging Face
//! `datasets` writes them (`to_parquet`, `save_to_disk`, a Hub dataset's `data/` folder). Read
//! as record batches, cell by cell as text; written from rows of JSON objects.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type,
    UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use crate::model_dirs::write_atomic;

/// The kind of a table file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    Parquet,
    /// Arrow IPC, as a stream (what `save_to_disk` writes) or a file.
    Arrow,
}

impl TableFormat {
    /// The format implied by a file extension (`.parquet`/`.pq`, `.arrow`).
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "parquet" | "pq" => Some(TableFormat::Parquet),
            "arrow" => Some(TableFormat::Arrow),
            _ => None,
        }
    }
}

/// The media type of a Parquet download.
pub const PARQUET_MEDIA_TYPE: &str = "application/vnd.apache.parquet";

/// Rows read in batches of this many.
const BATCH_ROWS: usize = 4096;

/// The files of a table at `path`, in row order: the file itself, or in a directory the data
/// files `save_to_disk`'s `state.json` lists, else every Parquet file (else every Arrow file) in
/// name order.
pub fn table_files(
    path: &Path,
    format: Option<TableFormat>,
) -> Result<Vec<(PathBuf, TableFormat)>> {
    if !path.is_dir() {
        let format = format
            .or_else(|| TableFormat::from_path(path))
            .with_context(|| format!("{} is not a Parquet or Arrow file", path.display()))?;
        return Ok(vec![(path.to_path_buf(), format)]);
    }
    if path.join("dataset_dict.json").is_file() {
        let mut splits: Vec<String> = std::fs::read_dir(path)?
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().is_dir())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        splits.sort();
        bail!(
            "{} holds a dataset with splits ({}): name one, e.g. {}",
            path.display(),
            splits.join(", "),
            path.join(splits.first().map_or("train", String::as_str))
                .display()
        );
    }
    let state = path.join("state.json");
    if state.is_file() {
        let state: Value = serde_json::from_slice(&std::fs::read(&state)?)
            .with_context(|| format!("cannot read {}", state.display()))?;
        let files = state["_data_files"].as_array().with_context(|| {
            format!("{} lists no _data_files", path.join("state.json").display())
        })?;
        return files
            .iter()
            .map(|file| {
                let name = file["filename"]
                    .as_str()
                    .context("a _data_files entry without a filename")?;
                Ok((path.join(name), TableFormat::Arrow))
            })
            .collect();
    }
    let mut found: Vec<(PathBuf, TableFormat)> = std::fs::read_dir(path)
        .with_context(|| format!("cannot list {}", path.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter_map(|file| TableFormat::from_path(&file).map(|format| (file, format)))
        .filter(|(file, f)| format.is_none_or(|wanted| wanted == *f) && file.is_file())
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    if found.iter().any(|(_, f)| *f == TableFormat::Parquet) {
        found.retain(|(_, f)| *f == TableFormat::Parquet);
    }
    if found.is_empty() {
        bail!(
            "{} holds no .parquet or .arrow files (nor a save_to_disk state.json)",
            path.display()
        );
    }
    Ok(found)
}

/// The schema of a table file (its first batch's, for Arrow IPC).
pub fn file_schema(file: &Path, format: TableFormat) -> Result<Arc<Schema>> {
    Ok(match format {
        TableFormat::Parquet => ParquetRecordBatchReaderBuilder::try_new(open(file)?)?
            .schema()
            .clone(),
        TableFormat::Arrow => ipc_reader(file, None)?.schema(),
    })
}

/// Calls `each` with every batch of rows of `file`, holding only `columns` (all when `None`).
pub fn for_each_batch(
    file: &Path,
    format: TableFormat,
    columns: Option<&[&str]>,
    mut each: impl FnMut(&RecordBatch) -> Result<()>,
) -> Result<()> {
    let schema = file_schema(file, format)?;
    let projection = columns
        .map(|names| {
            names
                .iter()
                .map(|name| schema.index_of(name))
                .collect::<Result<Vec<usize>, _>>()
        })
        .transpose()?;
    match format {
        TableFormat::Parquet => {
            let builder = ParquetRecordBatchReaderBuilder::try_new(open(file)?)?;
            let builder = match &projection {
                Some(roots) => {
                    let mask = parquet::arrow::ProjectionMask::roots(
                        builder.parquet_schema(),
                        roots.iter().copied(),
                    );
                    builder.with_projection(mask)
                }
                None => builder,
            };
            for batch in builder.with_batch_size(BATCH_ROWS).build()? {
                each(&batch?)?;
            }
        }
        TableFormat::Arrow => {
            for batch in ipc_reader(file, projection)? {
                each(&batch?)?;
            }
        }
    }
    Ok(())
}

fn open(file: &Path) -> Result<File> {
    File::open(file).with_context(|| format!("cannot open {}", file.display()))
}

/// An Arrow IPC reader of `file`, stream or file format (told apart by the file's magic).
fn ipc_reader(
    file: &Path,
    projection: Option<Vec<usize>>,
) -> Result<Box<dyn arrow_array::RecordBatchReader>> {
    let mut magic = [0u8; 6];
    let is_file_format = open(file)?.read_exact(&mut magic).is_ok() && &magic == b"ARROW1";
    let reader = BufReader::new(open(file)?);
    Ok(if is_file_format {
        Box::new(arrow_ipc::reader::FileReader::try_new(reader, projection)?)
    } else {
        Box::new(arrow_ipc::reader::StreamReader::try_new(
            reader, projection,
        )?)
    })
}

/// The label names a Hugging Face `ClassLabel` column declares (in the schema's `huggingface`
/// metadata, or a `save_to_disk` directory's `dataset_info.json`), in id order.
pub fn class_label_names(schema: &Schema, dir: Option<&Path>, column: &str) -> Option<Vec<String>> {
    let from_schema = schema
        .metadata()
        .get("huggingface")
        .and_then(|json| serde_json::from_str::<Value>(json).ok())
        .map(|meta| meta["info"]["features"][column].clone());
    let from_info = || {
        let info = std::fs::read(dir?.join("dataset_info.json")).ok()?;
        let info: Value = serde_json::from_slice(&info).ok()?;
        Some(info["features"][column].clone())
    };
    let feature = from_schema.filter(|f| !f.is_null()).or_else(from_info)?;
    if feature["_type"] != "ClassLabel" {
        return None;
    }
    feature["names"]
        .as_array()?
        .iter()
        .map(|name| name.as_str().map(String::from))
        .collect()
}

/// Row `row` of `array` as text: strings as they are, numbers and booleans written out; `None`
/// for a null; an error for a type a text or label cannot be (lists, structs, binary).
pub fn cell_text(array: &ArrayRef, row: usize) -> Result<Option<String>, String> {
    if array.is_null(row) {
        return Ok(None);
    }
    let text = match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(row).to_string(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).to_string(),
        DataType::Utf8View => array.as_string_view().value(row).to_string(),
        DataType::Boolean => array.as_boolean().value(row).to_string(),
        DataType::Int8 => array.as_primitive::<Int8Type>().value(row).to_string(),
        DataType::Int16 => array.as_primitive::<Int16Type>().value(row).to_string(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).to_string(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::UInt8 => array.as_primitive::<UInt8Type>().value(row).to_string(),
        DataType::UInt16 => array.as_primitive::<UInt16Type>().value(row).to_string(),
        DataType::UInt32 => array.as_primitive::<UInt32Type>().value(row).to_string(),
        DataType::UInt64 => array.as_primitive::<UInt64Type>().value(row).to_string(),
        DataType::Float16 => array.as_primitive::<Float16Type>().value(row).to_string(),
        DataType::Float32 => array.as_primitive::<Float32Type>().value(row).to_string(),
        DataType::Float64 => array.as_primitive::<Float64Type>().value(row).to_string(),
        DataType::Dictionary(_, _) => {
            let dictionary = array.as_any_dictionary();
            let key = dictionary.normalized_keys()[row];
            return cell_text(dictionary.values(), key);
        }
        other => {
            return Err(format!(
                "holds {other} values, not text, numbers or booleans"
            ));
        }
    };
    Ok(Some(text))
}

/// The keys of a JSON object in the order written (serde_json's maps sort them).
struct KeyOrder(Vec<String>);

impl<'de> Deserialize<'de> for KeyOrder {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = KeyOrder;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyOrder, A::Error> {
                let mut keys = Vec::new();
                while let Some((key, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                    keys.push(key);
                }
                Ok(KeyOrder(keys))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

/// Writes rows (each a JSON object's text) as a Parquet file (snappy-compressed, pyarrow's
/// default): one column per key, in the order keys first appear; a column of booleans, integers
/// or numbers when every value in it is one, else of text (objects and lists as their JSON).
pub fn write_parquet<'a>(
    rows: impl IntoIterator<Item = &'a str>,
    out: impl Write + Send,
) -> Result<()> {
    let mut names: Vec<String> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut objects = Vec::new();
    for row in rows {
        let KeyOrder(keys) = serde_json::from_str(row).context("a row is not a JSON object")?;
        for key in keys {
            if !index.contains_key(&key) {
                index.insert(key.clone(), names.len());
                names.push(key);
            }
        }
        let Value::Object(object) = serde_json::from_str(row)? else {
            unreachable!("parsed as an object above")
        };
        objects.push(object);
    }
    let columns: Vec<Vec<&Value>> = names
        .iter()
        .map(|name| {
            objects
                .iter()
                .map(|o| o.get(name).unwrap_or(&Value::Null))
                .collect()
        })
        .collect();
    let arrays: Vec<ArrayRef> = columns.iter().map(|values| column_array(values)).collect();
    let schema = Arc::new(Schema::new(
        names
            .iter()
            .zip(&arrays)
            .map(|(name, array)| Field::new(name, array.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer = ArrowWriter::try_new(out, schema.clone(), Some(properties))?;
    let batch = if arrays.is_empty() {
        RecordBatch::new_empty(schema)
    } else {
        RecordBatch::try_new(schema, arrays)?
    };
    writer.write(&batch)?;
    writer.close()?;
    Ok(())
}

/// One column's values as the narrowest Arrow array that holds them all.
fn column_array(values: &[&Value]) -> ArrayRef {
    let present = || values.iter().filter(|v| !v.is_null());
    if present().next().is_some() {
        if present().all(|v| v.is_boolean()) {
            return Arc::new(values.iter().map(|v| v.as_bool()).collect::<BooleanArray>());
        }
        if present().all(|v| v.is_i64()) {
            return Arc::new(values.iter().map(|v| v.as_i64()).collect::<Int64Array>());
        }
        if present().all(|v| v.is_u64()) {
            return Arc::new(values.iter().map(|v| v.as_u64()).collect::<UInt64Array>());
        }
        if present().all(|v| v.is_number()) {
            return Arc::new(values.iter().map(|v| v.as_f64()).collect::<Float64Array>());
        }
    }
    Arc::new(
        values
            .iter()
            .map(|v| match v {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            })
            .collect::<StringArray>(),
    )
}

/// Writes the JSON lines of `jsonl` (blank lines skipped) as the Parquet file `out`, atomically;
/// returns the number of rows.
pub fn jsonl_to_parquet(jsonl: &Path, out: &Path) -> Result<usize> {
    let text = std::fs::read_to_string(jsonl)
        .with_context(|| format!("cannot read {}", jsonl.display()))?;
    let rows: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut bytes = Vec::new();
    write_parquet(rows.iter().copied(), &mut bytes)
        .with_context(|| format!("cannot convert {}", jsonl.display()))?;
    write_atomic(out, &bytes)?;
    Ok(rows.len())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow_array::{Int64Array, StringArray};
    use flipside_shared::data::Input;

    use super::*;
    use crate::data::{Format, ReadOptions, read_file};

    /// `texts` and integer `labels` as a table whose label column is a Hugging Face
    /// `ClassLabel` (declared in the schema's metadata, as `datasets` writes it).
    fn class_label_batch(texts: &[Option<&str>], labels: &[i64]) -> RecordBatch {
        let features = r#"{"info": {"features": {"text": {"dtype": "string", "_type": "Value"},
            "label": {"names": ["neg", "pos"], "_type": "ClassLabel"}}}}"#;
        let schema = Schema::new(vec![
            Field::new("text", DataType::Utf8, true),
            Field::new("label", DataType::Int64, false),
        ])
        .with_metadata(HashMap::from([("huggingface".into(), features.into())]));
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from(texts.to_vec())),
                Arc::new(Int64Array::from(labels.to_vec())),
            ],
        )
        .unwrap()
    }

    fn write_parquet_batch(path: &Path, batch: &RecordBatch) {
        let mut writer =
            ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), None).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
    }

    fn texts_and_labels(path: &Path, options: &ReadOptions) -> Vec<(String, String)> {
        let dataset = read_file(path, options).unwrap().dataset;
        dataset
            .examples
            .iter()
            .map(|e| {
                let Input::Text { text } = &e.input else {
                    panic!("a pair")
                };
                (text.clone(), dataset.labels.name(e.label).to_string())
            })
            .collect()
    }

    #[test]
    fn class_labels_name_integer_labels_in_parquet_and_save_to_disk_directories() {
        let dir = tempfile::tempdir().unwrap();
        let batch = class_label_batch(&[Some("dull"), Some("grand")], &[0, 1]);
        let file = dir.path().join("train.parquet");
        write_parquet_batch(&file, &batch);
        let expected = [
            ("dull".into(), "neg".into()),
            ("grand".into(), "pos".into()),
        ];
        assert_eq!(texts_and_labels(&file, &ReadOptions::default()), expected);

        // `save_to_disk`: Arrow IPC streams listed in state.json, in its order.
        let saved = dir.path().join("saved");
        std::fs::create_dir(&saved).unwrap();
        for (name, rows) in [("data-b.arrow", 0..1), ("data-a.arrow", 1..2)] {
            let part = batch.slice(rows.start, rows.len());
            let mut writer = arrow_ipc::writer::StreamWriter::try_new(
                File::create(saved.join(name)).unwrap(),
                &part.schema(),
            )
            .unwrap();
            writer.write(&part).unwrap();
            writer.finish().unwrap();
        }
        std::fs::write(
            saved.join("state.json"),
            r#"{"_data_files": [{"filename": "data-b.arrow"}, {"filename": "data-a.arrow"}]}"#,
        )
        .unwrap();
        assert_eq!(texts_and_labels(&saved, &ReadOptions::default()), expected);

        // Given label names win over the schema's.
        let given = ReadOptions {
            labels: Some(vec!["bad".into(), "good".into()]),
            ..ReadOptions::default()
        };
        assert_eq!(texts_and_labels(&file, &given)[1].1, "good");

        // A directory of Parquet files reads them in name order; a DatasetDict names its splits.
        let parts = dir.path().join("parts");
        std::fs::create_dir(&parts).unwrap();
        write_parquet_batch(&parts.join("train-00001.parquet"), &batch.slice(1, 1));
        write_parquet_batch(&parts.join("train-00000.parquet"), &batch.slice(0, 1));
        assert_eq!(texts_and_labels(&parts, &ReadOptions::default()), expected);
        std::fs::write(
            dir.path().join("dataset_dict.json"),
            r#"{"splits": ["parts", "saved"]}"#,
        )
        .unwrap();
        let error = format!(
            "{:#}",
            read_file(dir.path(), &ReadOptions::default()).unwrap_err()
        );
        assert!(error.contains("splits (parts, saved)"), "{error}");
    }

    #[test]
    fn bad_rows_and_missing_columns_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.parquet");
        write_parquet_batch(&file, &class_label_batch(&[Some("fine"), None], &[1, 0]));
        let error = format!(
            "{:#}",
            read_file(&file, &ReadOptions::default()).unwrap_err()
        );
        assert!(
            error.contains(":2: missing value for column \"text\""),
            "{error}"
        );
        let skipping = ReadOptions {
            skip_bad: true,
            ..ReadOptions::default()
        };
        let report = read_file(&file, &skipping).unwrap();
        assert_eq!(
            (report.dataset.examples.len(), report.skipped.len()),
            (1, 1)
        );

        let mut options = ReadOptions::default();
        options.columns.text = "review".into();
        let error = format!("{:#}", read_file(&file, &options).unwrap_err());
        assert!(error.contains("no column \"review\""), "{error}");
        assert!(error.contains("(columns: text, label)"), "{error}");

        let not_table = dir.path().join("empty");
        std::fs::create_dir(&not_table).unwrap();
        let error = format!(
            "{:#}",
            read_file(&not_table, &ReadOptions::default()).unwrap_err()
        );
        assert!(
            error.contains("holds no .parquet or .arrow files"),
            "{error}"
        );
    }

    #[test]
    fn written_rows_read_back_with_their_types_and_column_order() {
        let rows = [
            r#"{"id": "a", "text": "=SUM(1)", "label": "pos", "p": 0.25, "n": 3, "ok": true, "seed": 18446744073709551615, "nested": {"k": [1]}}"#,
            r#"{"id": "b", "text": "plain", "label": "neg", "p": 1, "n": -4, "ok": null, "seed": 7, "extra": "late"}"#,
        ];
        let mut bytes = Vec::new();
        write_parquet(rows, &mut bytes).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rows.parquet");
        std::fs::write(&file, &bytes).unwrap();

        let schema = file_schema(&file, TableFormat::Parquet).unwrap();
        let columns: Vec<(&str, &DataType)> = schema
            .fields()
            .iter()
            .map(|f| (f.name().as_str(), f.data_type()))
            .collect();
        assert_eq!(
            columns,
            [
                ("id", &DataType::Utf8),
                ("text", &DataType::Utf8),
                ("label", &DataType::Utf8),
                ("p", &DataType::Float64),
                ("n", &DataType::Int64),
                ("ok", &DataType::Boolean),
                ("seed", &DataType::UInt64),
                ("nested", &DataType::Utf8),
                ("extra", &DataType::Utf8),
            ]
        );
        let mut cells = Vec::new();
        for_each_batch(&file, TableFormat::Parquet, None, |batch| {
            for row in 0..batch.num_rows() {
                for column in batch.columns() {
                    cells.push(cell_text(column, row).unwrap());
                }
            }
            Ok(())
        })
        .unwrap();
        let text = |s: &str| Some(s.to_string());
        assert_eq!(
            cells[..9],
            [
                text("a"),
                text("=SUM(1)"),
                text("pos"),
                text("0.25"),
                text("3"),
                text("true"),
                text("18446744073709551615"),
                text(r#"{"k":[1]}"#),
                None
            ]
        );
        assert_eq!(cells[14], None, "a null stays null");

        let options = ReadOptions {
            format: Some(Format::Parquet),
            ..ReadOptions::default()
        };
        let renamed = dir.path().join("rows.bin");
        std::fs::rename(&file, &renamed).unwrap();
        assert_eq!(
            texts_and_labels(&renamed, &options),
            [
                ("=SUM(1)".into(), "pos".into()),
                ("plain".into(), "neg".into())
            ]
        );
    }
}
