//! Review in Label Studio and Argilla, round trip: `review export` writes a project each tool's
//! own SDK accepts (label-studio-sdk's `LabelInterface` checks the labeling config, the tasks'
//! data and the predictions; Argilla's SDK loads the settings, the dataset model and every
//! record), people's answers are made the way each tool records them, and `review import`
//! decides them as the portal does. The SDKs run where scripts/test installed them
//! (`FLIPSIDE_TEST_LABEL_STUDIO`, `FLIPSIDE_TEST_ARGILLA`).

use std::path::Path;

use serde_json::{Value, json};

use crate::common::{flipside, reference_python, success, success_stderr};

/// Four records: the first accepted, the second fixed, the third relabelled, the fourth
/// rejected by two people (a third skipped it).
fn write_records(path: &Path) {
    let record = |n: usize, original: &str, edited: &str, label: &str, target: &str| {
        json!({
            "key": format!("r{n}→{target}"), "item": format!("r{n}"), "method": "autocad",
            "original": original, "edited": edited, "label": label, "target": target,
            "attempt": 1, "timing": {"context_ms": 1.0, "edit_ms": 2.0, "judge_ms": 3.0},
            "prediction": target, "target_probability": 0.9,
            "flipped": true,
        })
        .to_string()
    };
    let lines = [
        record(
            0,
            "The acting was superb.",
            "The acting was wooden.",
            "positive",
            "negative",
        ),
        record(
            1,
            "A dull, slow plot.",
            "A gripping, slow plot.",
            "negative",
            "positive",
        ),
        record(
            2,
            "I loved the score.",
            "I noticed the score.",
            "positive",
            "negative",
        ),
        record(
            3,
            "Grand & <bold> visuals.",
            "Grand & <bold> sounds.",
            "positive",
            "negative",
        ),
    ];
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// The reviewed file's (text, label) rows, as `review import` wrote them.
fn import(
    tool: &str,
    annotations: &Path,
    records: &Path,
    out: &Path,
) -> (Vec<(String, String)>, String) {
    let said = success_stderr(
        flipside()
            .args(["review", "import", "--from", tool])
            .arg(annotations)
            .arg("--records")
            .arg(records)
            .arg("--out")
            .arg(out),
    );
    let rows = std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| {
            let row: Value = serde_json::from_str(l).unwrap();
            (
                row["text"].as_str().unwrap().to_string(),
                row["label"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (rows, said)
}

/// What every round trip must give back: the accepted edit, the fix, the relabel; not the
/// rejected one.
fn expected() -> Vec<(String, String)> {
    [
        ("The acting was wooden.", "negative"),
        ("A gripping, tense plot.", "positive"),
        ("I noticed the score.", "positive"),
    ]
    .map(|(t, l)| (t.to_string(), l.to_string()))
    .to_vec()
}

/// Checks the project with label-studio-sdk and writes a JSON export of it, annotated.
const LABEL_STUDIO: &str = r#"
import sys, json
from label_studio_sdk.label_interface import LabelInterface
project, export = sys.argv[1], sys.argv[2]
config = open(project + "/label-config.xml").read()
li = LabelInterface(config)
li.validate()
tasks = json.load(open(project + "/tasks.json"))
answers = [("accept", None, None), ("fix", "A gripping, tense plot.", None),
           ("relabel", None, "positive"), ("reject", None, None)]
exported = []
for n, (task, (verdict, text, label)) in enumerate(zip(tasks, answers)):
    assert li.validate_task({"data": task["data"]}), task
    for prediction in task["predictions"]:
        errors = li.validate_prediction(prediction, return_errors=True)
        assert errors == [], errors
    # An annotation as Label Studio stores one started from the prediction: its result ids kept.
    result = [dict(r) for r in task["predictions"][0]["result"]]
    for r in result:
        if r["from_name"] == "label" and label:
            r["value"] = {"choices": [label]}
        if r["from_name"] == "text" and text:
            r["value"] = {"text": [text]}
    result.append({"id": f"t{n}-verdict", "from_name": "verdict", "to_name": "counterfactual",
                   "type": "choices", "value": {"choices": [verdict]}})
    annotation = {"id": 10 * n + 1, "completed_by": {"id": 1, "email": "ada@lab.org"},
                  "result": result, "was_cancelled": False, "ground_truth": False}
    errors = li.validate_prediction(annotation, return_errors=True)
    assert errors == [], errors
    annotations = [annotation]
    if verdict == "reject":
        second = dict(annotation, id=10 * n + 2, completed_by=2)
        skipped = dict(annotation, id=10 * n + 3, completed_by=3, result=[], was_cancelled=True)
        annotations += [second, skipped]
    exported.append({"id": 100 + n, "data": task["data"], "annotations": annotations,
                     "predictions": [1000 + n]})
json.dump(exported, open(export, "w"))
"#;

/// Loads the dataset directory with Argilla's SDK (no server: its resources hold a client they
/// never call here), answers as two people, and writes the flattened records.
const ARGILLA: &str = r#"
import sys, json, uuid
import argilla as rg
from argilla.client import Argilla
from argilla.records._io._generic import GenericIO
class NoServer:
    def __getattr__(self, name):
        return NoServer()
    def __call__(self, *args, **kwargs):
        return NoServer()
Argilla._get_default = classmethod(lambda cls: NoServer())
project, export = sys.argv[1], sys.argv[2]
settings = rg.Settings.from_json(project + "/.argilla/settings.json")
model = rg.Dataset._load_dataset_model(path=project + "/.argilla/dataset.json")
dataset = rg.Dataset(name=model.name, settings=settings)
records = [rg.Record.from_dict(r, dataset=dataset) for r in json.load(open(project + "/records.json"))]
assert [q.name for q in settings.questions] == ["verdict", "label", "text"]
assert records[0].suggestions["label"].value == "negative"
ada, bob = uuid.uuid4(), uuid.uuid4()
answers = [("accept", None, None), ("fix", "A gripping, tense plot.", None),
           ("relabel", None, "positive"), ("reject", None, None)]
for record, (verdict, text, label) in zip(records, answers):
    record.responses.add(rg.Response("verdict", verdict, user_id=ada, status="submitted"))
    if text:
        record.responses.add(rg.Response("text", text, user_id=ada, status="submitted"))
    if label:
        record.responses.add(rg.Response("label", label, user_id=ada, status="submitted"))
    # A second person's draft is not a decision.
    record.responses.add(rg.Response("verdict", "reject", user_id=bob, status="draft"))
json.dump(GenericIO.to_list(records, flatten=True), open(export, "w"))
"#;

#[test]
fn label_studio_and_argilla_round_trip_to_training_files() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("cf.jsonl");
    write_records(&records);

    let project = dir.path().join("label-studio");
    success(
        flipside()
            .args(["review", "export", "--to", "label-studio", "--records"])
            .arg(&records)
            .arg("--out")
            .arg(&project),
    );
    let tasks: Value =
        serde_json::from_slice(&std::fs::read(project.join("tasks.json")).unwrap()).unwrap();
    assert_eq!(tasks.as_array().unwrap().len(), 4);
    assert_eq!(tasks[3]["data"]["counterfactual"], "Grand & <bold> sounds.");
    let config = std::fs::read_to_string(project.join("label-config.xml")).unwrap();
    assert!(config.contains("<Choice value=\"relabel\"/>"), "{config}");
    let exported = dir.path().join("label-studio-export.json");
    if let Some(mut python) =
        reference_python("FLIPSIDE_TEST_LABEL_STUDIO", "label-studio-sdk's checks")
    {
        success(
            python
                .args(["-c", LABEL_STUDIO])
                .arg(&project)
                .arg(&exported),
        );
        let (rows, said) = import(
            "label-studio",
            &exported,
            &records,
            &dir.path().join("ls.jsonl"),
        );
        assert_eq!(rows, expected(), "{said}");
        assert!(
            said.contains("1 skipped") && said.contains("1 rejected"),
            "{said}"
        );
        assert!(
            said.contains("skipped: task r3→negative, user 3: cancelled"),
            "{said}"
        );
    }

    let project = dir.path().join("argilla");
    success(
        flipside()
            .args(["review", "export", "--to", "argilla", "--records"])
            .arg(&records)
            .arg("--out")
            .arg(&project),
    );
    assert!(project.join(".argilla").join("settings.json").is_file());
    let exported = dir.path().join("argilla-export.json");
    if let Some(mut python) = reference_python("FLIPSIDE_TEST_ARGILLA", "Argilla's SDK checks") {
        success(python.args(["-c", ARGILLA]).arg(&project).arg(&exported));
        let (rows, said) = import("argilla", &exported, &records, &dir.path().join("rg.jsonl"));
        assert_eq!(rows, expected(), "{said}");
        assert!(
            said.contains("4 skipped") && said.contains("1 rejected"),
            "{said}"
        );
    }
}

#[test]
fn annotations_that_decide_nothing_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("cf.jsonl");
    write_records(&records);
    let export = dir.path().join("export.json");
    // JSON-MIN rows: a fix without its text, a verdict Flipside does not know, a task of
    // another file.
    std::fs::write(
        &export,
        json!([
            {"flipside_key": "r1→positive", "verdict": "fix", "annotator": "ada@lab.org"},
            {"flipside_key": "r0→negative", "verdict": "maybe", "annotator": "ada@lab.org"},
            {"flipside_key": "r2→negative", "verdict": "accept", "annotator": "bob@lab.org"},
        ])
        .to_string(),
    )
    .unwrap();
    let (rows, said) = import(
        "label-studio",
        &export,
        &records,
        &dir.path().join("out.jsonl"),
    );
    assert_eq!(
        rows,
        [("I noticed the score.".to_string(), "negative".to_string())]
    );
    assert!(
        said.contains("task r1→positive, ada@lab.org: a fix without its text"),
        "{said}"
    );
    assert!(said.contains("unknown verdict \"maybe\""), "{said}");
    std::fs::write(
        &export,
        json!([{"flipside_key": "elsewhere→x", "verdict": "accept"}]).to_string(),
    )
    .unwrap();
    let error = crate::common::failure(
        flipside()
            .args(["review", "import", "--from", "label-studio"])
            .arg(&export)
            .arg("--records")
            .arg(&records)
            .args(["--out", "/dev/null"]),
    );
    assert!(
        error.contains("\"elsewhere→x\", which is not a record"),
        "{error}"
    );
}
