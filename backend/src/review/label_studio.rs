//! Label Studio: counterfactual records as a task import (JSON with predictions) with the
//! labeling config it needs, and a project's JSON (or JSON-MIN) export read back as
//! annotations.
//!
//! A task's `data` holds the record's key (`flipside_key`, what an export is joined on: Label
//! Studio gives tasks its own ids), the original, the counterfactual, both labels and a line
//! about them. Its prediction pre-fills the label question with the target and the text question
//! with the counterfactual as written; the verdict is left for the person (a suggested verdict
//! would be counted as their work).

use anyhow::{Context, Result, bail};
use flipside_shared::records::Counterfactual;
use serde_json::{Value, json};

use super::{Annotation, AnnotationsRead, LABEL, TEXT, VERDICT, VERDICTS, about};

/// The object tag the questions are about.
const COUNTERFACTUAL: &str = "counterfactual";

/// The labeling config (XML) for tasks of records whose labels are `labels`.
pub fn label_config(labels: &[String]) -> String {
    let choices = |values: &mut dyn Iterator<Item = &str>| -> String {
        values
            .map(|v| format!("    <Choice value=\"{}\"/>\n", xml_escape(v)))
            .collect()
    };
    format!(
        "<View>\n\
         \x20 <Header value=\"Original\"/>\n\
         \x20 <Text name=\"original\" value=\"$original\"/>\n\
         \x20 <Header value=\"Counterfactual\"/>\n\
         \x20 <Text name=\"{COUNTERFACTUAL}\" value=\"$counterfactual\"/>\n\
         \x20 <Text name=\"about\" value=\"$about\"/>\n\
         \x20 <Header value=\"Is it a minimal edit that carries the target label?\"/>\n\
         \x20 <Choices name=\"{VERDICT}\" toName=\"{COUNTERFACTUAL}\" choice=\"single-radio\" \
         required=\"true\" showInline=\"true\">\n{}\x20 </Choices>\n\
         \x20 <Header value=\"Its label (relabel)\"/>\n\
         \x20 <Choices name=\"{LABEL}\" toName=\"{COUNTERFACTUAL}\" choice=\"single-radio\" \
         showInline=\"true\">\n{}\x20 </Choices>\n\
         \x20 <Header value=\"The fixed text (fix)\"/>\n\
         \x20 <TextArea name=\"{TEXT}\" toName=\"{COUNTERFACTUAL}\" editable=\"true\" \
         maxSubmissions=\"1\" rows=\"3\"/>\n\
         </View>\n",
        choices(&mut VERDICTS.iter().map(|v| v.as_str())),
        choices(&mut labels.iter().map(String::as_str)),
    )
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The task import: one task per record.
pub fn tasks(records: &[Counterfactual]) -> Value {
    let tasks: Vec<Value> = records
        .iter()
        .enumerate()
        .map(|(n, record)| {
            let result = |name: &str, kind: &str, value: Value| {
                json!({
                    "id": format!("t{n}-{name}"),
                    "from_name": name,
                    "to_name": COUNTERFACTUAL,
                    "type": kind,
                    "value": value,
                })
            };
            json!({
                "data": {
                    "flipside_key": record.key,
                    "original": record.original,
                    COUNTERFACTUAL: record.edited,
                    "original_label": record.label,
                    "target": record.target,
                    "about": about(record),
                },
                "predictions": [{
                    "model_version": format!("flipside {}", record.method),
                    "score": record.target_probability,
                    "result": [
                        result(LABEL, "choices", json!({"choices": [record.target]})),
                        result(TEXT, "textarea", json!({"text": [record.edited]})),
                    ],
                }],
            })
        })
        .collect();
    Value::Array(tasks)
}

/// The annotations in a project's export: the JSON export (every annotation of every task;
/// cancelled ones are skipped) or JSON-MIN (one row per finished annotation).
pub fn annotations(export: &Value) -> Result<AnnotationsRead> {
    let tasks = export
        .as_array()
        .context("a Label Studio export is a JSON list of tasks")?;
    let mut read = AnnotationsRead::default();
    for (n, task) in tasks.iter().enumerate() {
        if task.get("annotations").is_some() || task.get("data").is_some() {
            let key = task["data"]["flipside_key"]
                .as_str()
                .with_context(|| format!("task {} has no data.flipside_key", n + 1))?;
            for annotation in task["annotations"].as_array().into_iter().flatten() {
                let annotator = annotator(&annotation["completed_by"]);
                if annotation["was_cancelled"].as_bool() == Some(true) {
                    read.skipped
                        .push(format!("task {key}, {annotator}: cancelled"));
                    continue;
                }
                let answer = |name: &str| -> Option<String> {
                    let result = annotation["result"]
                        .as_array()?
                        .iter()
                        .find(|r| r["from_name"] == name)?;
                    let values = match result["type"].as_str()? {
                        "textarea" => &result["value"]["text"],
                        _ => &result["value"]["choices"],
                    };
                    joined(values)
                };
                push(&mut read, key, &annotator, answer);
            }
        } else if let Some(key) = task["flipside_key"].as_str() {
            let annotator = annotator(&task["annotator"]);
            // JSON-MIN writes a single choice or text as a string, more as a list.
            let answer = |name: &str| match &task[name] {
                Value::String(s) => Some(s.clone()),
                values => joined(values),
            };
            push(&mut read, key, &annotator, answer);
        } else {
            bail!(
                "item {} of the export is neither a task (data, annotations) nor a JSON-MIN row \
                 with flipside_key; export the project as JSON",
                n + 1
            );
        }
    }
    Ok(read)
}

/// The strings of a JSON list, one per line.
fn joined(values: &Value) -> Option<String> {
    let parts: Vec<&str> = values
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    Some(parts.join("\n"))
}

/// Adds the annotation `answer` gives (each question's answer by its name) to `read`, or the
/// reason it is not one to its skipped.
fn push(
    read: &mut AnnotationsRead,
    key: &str,
    annotator: &str,
    answer: impl Fn(&str) -> Option<String>,
) {
    let (verdict, text, label) = (answer(VERDICT), answer(TEXT), answer(LABEL));
    match Annotation::from_answers(
        key,
        annotator,
        verdict.as_deref(),
        text.as_deref(),
        label.as_deref(),
    ) {
        Ok(annotation) => read.annotations.push(annotation),
        Err(reason) => read
            .skipped
            .push(format!("task {key}, {annotator}: {reason}")),
    }
}

/// Who made an annotation: `completed_by` as an email, else `user N`.
fn annotator(completed_by: &Value) -> String {
    match completed_by {
        Value::String(email) => email.clone(),
        Value::Number(id) => format!("user {id}"),
        Value::Object(user) => user.get("email").and_then(Value::as_str).map_or_else(
            || format!("user {}", user.get("id").unwrap_or(&Value::Null)),
            String::from,
        ),
        _ => "unknown".into(),
    }
}
