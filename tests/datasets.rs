//! Hugging Face `datasets` files, both ways: what `datasets` writes (`save_to_disk` directories,
//! a `DatasetDict`'s splits, `to_parquet` files with `ClassLabel` labels) reads in Flipside with
//! its label names, and what Flipside writes as Parquet loads in `datasets` and pyarrow with every
//! row and value. The reference side runs where scripts/test installed it
//! (`FLIPSIDE_TEST_DATASETS`).

use std::path::Path;

use serde_json::Value;

use crate::common::{failure, flipside, reference_python, success};

/// `datasets` writes a `ClassLabel` sentiment dataset as a `save_to_disk` directory, a
/// `DatasetDict` (train and test) and a Parquet file.
const WRITE_WITH_DATASETS: &str = r#"
import sys, datasets, pyarrow as pa
from datasets.table import InMemoryTable
root = sys.argv[1]
features = datasets.Features({"text": datasets.Value("string"),
    "label": datasets.ClassLabel(names=["negative", "positive"])})
def dataset(texts, labels, name):
    table = pa.table(features.encode_batch({"text": texts, "label": labels}),
        schema=features.arrow_schema)
    # An explicit fingerprint: datasets 5.2's own hashing of an in-memory table fails on pyarrow 26.
    return datasets.Dataset(InMemoryTable(table), info=datasets.DatasetInfo(features=features),
        fingerprint=name)
train = dataset(["a dull film", "a grand film", "the cast was wooden", "superb, moving acting"],
    [0, 1, 0, 1], "train")
test = dataset(["flat and tired", "a joy"], [0, 1], "test")
train.save_to_disk(root + "/saved")
datasets.DatasetDict({"train": train, "test": test}).save_to_disk(root + "/dict")
train.to_parquet(root + "/train.parquet")
"#;

/// Loads a Parquet file with `datasets` and with pyarrow and prints its rows as JSON lines (the
/// two must agree), after a line with its column names.
const READ_WITH_DATASETS: &str = r#"
import sys, json, datasets, pyarrow.parquet as pq
loaded = datasets.Dataset.from_parquet(sys.argv[1])
table = pq.read_table(sys.argv[1])
assert loaded.column_names == table.column_names, (loaded.column_names, table.column_names)
assert loaded.to_list() == table.to_pylist()
print(json.dumps(loaded.column_names))
for row in loaded:
    print(json.dumps(row))
"#;

fn show(data: &Path, extra: &[&str]) -> String {
    success(
        flipside()
            .args(["data", "show"])
            .arg(data)
            .args(["--head", "4"])
            .args(extra),
    )
}

#[test]
fn datasets_files_read_with_their_label_names() {
    let Some(mut python) = reference_python("FLIPSIDE_TEST_DATASETS", "reading datasets' files")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    success(python.args(["-c", WRITE_WITH_DATASETS, root]));

    for data in [
        dir.path().join("saved"),
        dir.path().join("train.parquet"),
        dir.path().join("dict").join("train"),
    ] {
        let out = show(&data, &[]);
        assert!(out.contains("examples 4"), "{}: {out}", data.display());
        // The integer labels are the ClassLabel's names, in its order.
        assert!(
            out.lines()
                .any(|l| l.contains("negative") && l.contains("2 (50.0%)")),
            "{out}"
        );
        assert!(out.contains("superb, moving acting"), "{out}");
    }
    let out = show(&dir.path().join("dict").join("test"), &[]);
    assert!(out.contains("examples 2"), "{out}");
    let error = failure(
        flipside()
            .args(["data", "show"])
            .arg(dir.path().join("dict")),
    );
    assert!(error.contains("splits (test, train)"), "{error}");
    assert!(error.contains("dict/test"), "{error}");
}

/// Checks that `parquet` (written by Flipside) loads in `datasets` and pyarrow with the rows of
/// `jsonl`, field by field (nested values as their JSON text), and returns the column names.
pub fn check_parquet_matches_jsonl(parquet: &Path, jsonl: &Path) -> Option<Vec<String>> {
    let mut python = reference_python(
        "FLIPSIDE_TEST_DATASETS",
        "loading Flipside's Parquet in datasets",
    )?;
    let out = success(python.args(["-c", READ_WITH_DATASETS]).arg(parquet));
    let mut lines = out.lines();
    let columns: Vec<String> = serde_json::from_str(lines.next().unwrap()).unwrap();
    let loaded: Vec<Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    let written: Vec<Value> = std::fs::read_to_string(jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(loaded.len(), written.len());
    for (loaded, written) in loaded.iter().zip(&written) {
        for (field, value) in written.as_object().unwrap() {
            let expected = match value {
                Value::Object(_) | Value::Array(_) => Value::String(value.to_string()),
                other => other.clone(),
            };
            let got = &loaded[field];
            match (got.as_f64(), expected.as_f64()) {
                // f32 probabilities written as JSON numbers come back as the same f64.
                (Some(a), Some(b)) => assert!((a - b).abs() < 1e-12, "{field}: {got} ≠ {expected}"),
                _ => assert_eq!(got, &expected, "{field}"),
            }
        }
    }
    Some(columns)
}
