//! Argilla (2.x): counterfactual records as a dataset directory in the layout `rg.Dataset.to_disk`
//! writes and `from_disk` reads (`.argilla/dataset.json`, `.argilla/settings.json`,
//! `records.json`), and the flattened records Argilla exports (`records.to_list(flatten=True)`,
//! `to_datasets()`: `verdict.responses`, `….users`, `….status` columns) read back as
//! annotations, counting only submitted responses.
//!
//! A record's id is the Flipside record's key; its fields are the original and the
//! counterfactual; the label question is suggested the target (scored with the filter's
//! probability) and the text question the counterfactual as written; the verdict is the
//! person's.

use std::path::Path;

use anyhow::{Context, Result, bail};
use flipside_shared::records::Counterfactual;
use serde_json::{Value, json};

use super::{Annotation, AnnotationsRead, LABEL, TEXT, VERDICT, VERDICTS, about};
use crate::model_dirs::write_atomic;

/// Writes the dataset `name` of `records` (whose labels are `labels`) into the directory `dir`.
pub fn write_dataset(
    dir: &Path,
    name: &str,
    records: &[Counterfactual],
    labels: &[String],
) -> Result<()> {
    let config = dir.join(".argilla");
    std::fs::create_dir_all(&config)
        .with_context(|| format!("cannot create {}", config.display()))?;
    let dataset = json!({
        "id": null,
        "name": name,
        "status": "draft",
        "guidelines": GUIDELINES,
        "allow_extra_metadata": false,
        "distribution": {"strategy": "overlap", "min_submitted": 1},
        "workspace_id": null,
    });
    let rows: Vec<Value> = records.iter().map(record).collect();
    write_atomic(
        &config.join("dataset.json"),
        &serde_json::to_vec_pretty(&dataset)?,
    )?;
    write_atomic(
        &config.join("settings.json"),
        &serde_json::to_vec_pretty(&settings(labels))?,
    )?;
    write_atomic(
        &dir.join("records.json"),
        &serde_json::to_vec_pretty(&rows)?,
    )
}

const GUIDELINES: &str = "Each record is an edit of the original meant to carry another label \
    (the target). verdict: accept if it is a minimal, fluent edit that carries the target; fix \
    to correct it (write the fixed text in text); relabel if it is a good text with another \
    label (choose it in label); reject otherwise.";

/// The dataset's settings, as `Settings.serialize()` writes them.
fn settings(labels: &[String]) -> Value {
    let text = json!({"type": "text", "use_markdown": false});
    let field = |name: &str, title: &str| {
        json!({"name": name, "title": title, "required": true, "description": null,
            "settings": text, "type": "text"})
    };
    let options = |values: &mut dyn Iterator<Item = &str>| -> Vec<Value> {
        values.map(|v| json!({"text": v, "value": v})).collect()
    };
    let label_question = |name: &str, title: &str, values: Vec<Value>, required: bool| {
        json!({"name": name, "title": title, "description": null, "required": required,
            "settings": {"type": "label_selection", "options": values, "visible_options": null},
            "type": "label_selection"})
    };
    let terms = |name: &str| {
        json!({"name": name, "title": name, "visible_for_annotators": true,
            "settings": {"type": "terms", "values": null, "visible_for_annotators": true}})
    };
    json!({
        "guidelines": GUIDELINES,
        "fields": [field("original", "Original"), field("counterfactual", "Counterfactual")],
        "questions": [
            label_question(VERDICT, "Verdict", options(&mut VERDICTS.iter().map(|v| v.as_str())), true),
            label_question(LABEL, "Its label (relabel)", options(&mut labels.iter().map(String::as_str)), false),
            {"name": TEXT, "title": "The fixed text (fix)", "description": null, "required": false,
                "settings": text, "type": "text"},
        ],
        "metadata": [terms("original_label"), terms("target"), terms("method"), terms("about")],
        "vectors": [],
        "allow_extra_metadata": false,
        "distribution": {"strategy": "overlap", "min_submitted": 1},
        "mapping": null,
    })
}

/// A record as `records.json` holds it (`Record.to_dict()`).
fn record(record: &Counterfactual) -> Value {
    json!({
        "id": record.key,
        "fields": {"original": record.original, "counterfactual": record.edited},
        "metadata": {"original_label": record.label, "target": record.target,
            "method": record.method, "about": about(record)},
        "suggestions": {
            LABEL: {"value": record.target, "score": record.target_probability, "agent": record.method},
            TEXT: {"value": record.edited, "agent": record.method},
        },
        "responses": {},
        "vectors": {},
        "status": "pending",
        "_server_id": null,
    })
}

/// The annotations in flattened Argilla records (a JSON list, or JSON lines as
/// `to_datasets().to_json()` writes): each user's submitted answers to the three questions.
pub fn annotations(rows: &[Value]) -> Result<AnnotationsRead> {
    let mut read = AnnotationsRead::default();
    for (n, row) in rows.iter().enumerate() {
        let key = row["id"]
            .as_str()
            .with_context(|| format!("record {} has no id", n + 1))?;
        if row.get("responses").is_some_and(Value::is_object) {
            bail!(
                "record {key:?} is nested (records.json keeps no response status): export the \
                 dataset flattened, with records.to_list(flatten=True) or to_datasets()"
            );
        }
        // Each question's responses as (user, status, value).
        let responses = |question: &str| -> Vec<(String, String, Option<String>)> {
            let list = |suffix: &str| {
                row[format!("{question}.responses{suffix}")]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            };
            let (values, users, statuses) = (list(""), list(".users"), list(".status"));
            users
                .iter()
                .zip(&statuses)
                .enumerate()
                .map(|(i, (user, status))| {
                    let value = values.get(i).and_then(Value::as_str).map(String::from);
                    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                    (text(user), text(status), value)
                })
                .collect()
        };
        let (verdicts, labels, texts) = (responses(VERDICT), responses(LABEL), responses(TEXT));
        for (user, status, verdict) in &verdicts {
            if status != "submitted" {
                read.skipped
                    .push(format!("record {key}, {user}: {status} (not submitted)"));
                continue;
            }
            let of = |answers: &[(String, String, Option<String>)]| {
                answers
                    .iter()
                    .find(|(u, s, _)| u == user && s == "submitted")
                    .and_then(|(_, _, v)| v.clone())
            };
            match Annotation::from_answers(
                key,
                user,
                verdict.as_deref(),
                of(&texts).as_deref(),
                of(&labels).as_deref(),
            ) {
                Ok(annotation) => read.annotations.push(annotation),
                Err(reason) => read.skipped.push(format!("record {key}, {user}: {reason}")),
            }
        }
    }
    Ok(read)
}
