//! Review of counterfactuals by people: the majority rule that turns their verdicts into an
//! item's outcome, the files of kept items ([`export`]), and the exchange with the review tools
//! teams already use ([`label_studio`], [`argilla`]).

pub mod argilla;
pub mod export;
pub mod label_studio;

use std::collections::{BTreeSet, HashMap};

use anyhow::{Result, bail};
use flipside_shared::portal::{Outcome, Verdict};
use flipside_shared::records::Counterfactual;

use export::Kept;

/// The question that takes the verdict, in both tools.
pub const VERDICT: &str = "verdict";
/// The question that takes the label a relabel gives.
pub const LABEL: &str = "label";
/// The question that takes a fix's text.
pub const TEXT: &str = "text";
/// The verdicts the tools offer: the portal's but flag and skip, which each tool has its own
/// ways for (a comment, skipping the task).
pub const VERDICTS: [Verdict; 4] = [
    Verdict::Accept,
    Verdict::Fix,
    Verdict::Relabel,
    Verdict::Reject,
];

/// One person's verdict on a counterfactual, as a review tool recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Annotation {
    /// The key (`ITEM→TARGET`) of the record the task was made from.
    pub key: String,
    pub annotator: String,
    pub verdict: Verdict,
    /// A fix's text.
    pub text: Option<String>,
    /// A relabel's label.
    pub label: Option<String>,
}

impl Annotation {
    /// An annotation from a tool's answers to the three questions, or why it is not one (no
    /// verdict, an unknown one, a fix without its text, a relabel without its label).
    pub fn from_answers(
        key: &str,
        annotator: &str,
        verdict: Option<&str>,
        text: Option<&str>,
        label: Option<&str>,
    ) -> Result<Self, String> {
        fn present(value: Option<&str>) -> Option<&str> {
            value.map(str::trim).filter(|v| !v.is_empty())
        }
        let verdict = present(verdict).ok_or("no verdict")?;
        let verdict = Verdict::parse(verdict)
            .filter(|v| VERDICTS.contains(v))
            .ok_or_else(|| format!("unknown verdict {verdict:?} (accept, fix, relabel, reject)"))?;
        let text = match verdict {
            Verdict::Fix => Some(present(text).ok_or("a fix without its text")?.to_string()),
            _ => None,
        };
        let label = match verdict {
            Verdict::Relabel => Some(
                present(label)
                    .ok_or("a relabel without its label")?
                    .to_string(),
            ),
            _ => None,
        };
        Ok(Annotation {
            key: key.to_string(),
            annotator: annotator.to_string(),
            verdict,
            text,
            label,
        })
    }
}

/// What a tool's file held: the annotations, and why each one left out was left out.
#[derive(Debug, Default)]
pub struct AnnotationsRead {
    pub annotations: Vec<Annotation>,
    /// `task KEY, ANNOTATOR: reason` for each annotation that is not one (cancelled, no verdict…).
    pub skipped: Vec<String>,
}

/// The outcome of each record with annotations, under the portal's majority rule (every
/// annotation counts, in file order: the latest of the winning verdict gives the text and label);
/// an annotation of a record not in `records` is an error.
pub fn outcomes(
    records: &[Counterfactual],
    annotations: &[Annotation],
) -> Result<Vec<(Counterfactual, Outcome)>> {
    let mut by_key: HashMap<&str, Vec<&Annotation>> = HashMap::new();
    for annotation in annotations {
        if !records.iter().any(|r| r.key == annotation.key) {
            bail!(
                "an annotation of {:?}, which is not a record of the file given (--records)",
                annotation.key
            );
        }
        by_key.entry(&annotation.key).or_default().push(annotation);
    }
    let mut decided = Vec::new();
    for record in records {
        let Some(annotations) = by_key.get(record.key.as_str()) else {
            continue;
        };
        let verdicts: Vec<(String, Option<String>, Option<String>)> = annotations
            .iter()
            .map(|a| {
                (
                    a.verdict.as_str().to_string(),
                    a.text.clone(),
                    a.label.clone(),
                )
            })
            .collect();
        if let Some(outcome) = majority(&verdicts, 1, &record.target) {
            decided.push((record.clone(), outcome));
        }
    }
    Ok(decided)
}

/// The kept items among `decided` (accepted, fixed, relabelled), as the portal exports them.
pub fn kept(decided: &[(Counterfactual, Outcome)]) -> Vec<Kept> {
    decided
        .iter()
        .filter(|(_, outcome)| outcome.verdict.keeps())
        .map(|(record, outcome)| Kept {
            id: record.key.clone(),
            original: record.original.clone(),
            label: record.label.clone(),
            counterfactual: outcome
                .text
                .clone()
                .unwrap_or_else(|| record.edited.clone()),
            record: Some(record.clone()),
            outcome: outcome.clone(),
        })
        .collect()
}

/// Every label of `records` (originals' and targets'), sorted: the choices a relabel offers.
pub fn labels_of(records: &[Counterfactual]) -> Vec<String> {
    let labels: BTreeSet<&str> = records
        .iter()
        .flat_map(|r| [r.label.as_str(), r.target.as_str()])
        .collect();
    labels.into_iter().map(String::from).collect()
}

/// One line saying who changed what, for a task's description.
fn about(record: &Counterfactual) -> String {
    format!(
        "{} → {} · {} · p({}) {:.2}",
        record.label, record.target, record.method, record.target, record.target_probability
    )
}

/// The outcome of an item's first-pass verdicts (oldest first), once there are `overlap` of
/// them: the majority; a tie is flagged for a reviewer.
pub fn majority(
    verdicts: &[(String, Option<String>, Option<String>)],
    overlap: usize,
    target: &str,
) -> Option<Outcome> {
    let decided: Vec<(Verdict, &Option<String>, &Option<String>)> = verdicts
        .iter()
        .filter_map(|(v, text, label)| Some((Verdict::parse(v)?, text, label)))
        .filter(|(v, _, _)| *v != Verdict::Skip)
        .collect();
    if decided.len() < overlap {
        return None;
    }
    let mut counts: Vec<(Verdict, usize)> = Vec::new();
    for (v, _, _) in &decided {
        match counts.iter_mut().find(|(c, _)| *c == v.agreement_class()) {
            Some((_, n)) => *n += 1,
            None => counts.push((v.agreement_class(), 1)),
        }
    }
    let best = counts.iter().map(|(_, n)| *n).max()?;
    let winners: Vec<Verdict> = counts
        .iter()
        .filter(|(_, n)| *n == best)
        .map(|(v, _)| *v)
        .collect();
    let class = if winners.len() == 1 {
        winners[0]
    } else {
        Verdict::Flag
    };
    // The latest verdict of the winning class says what text and label it keeps.
    let latest = decided
        .iter()
        .rev()
        .find(|(v, _, _)| v.agreement_class() == class);
    let verdict = latest.map_or(class, |(v, _, _)| *v);
    Some(Outcome {
        verdict,
        text: latest.and_then(|(_, text, _)| (*text).clone()),
        label: latest
            .and_then(|(_, _, label)| (*label).clone())
            .unwrap_or_else(|| target.to_string()),
        reviewed: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(verdict: &str, text: Option<&str>) -> (String, Option<String>, Option<String>) {
        (verdict.into(), text.map(str::to_string), None)
    }

    #[test]
    fn the_majority_decides_and_a_tie_is_flagged() {
        assert_eq!(majority(&[v("accept", None)], 2, "neg"), None);
        let outcome = majority(&[v("accept", None), v("fix", Some("good"))], 2, "neg").unwrap();
        assert_eq!(
            (outcome.verdict, outcome.text.as_deref()),
            (Verdict::Fix, Some("good"))
        );
        let tie = majority(&[v("accept", None), v("reject", None)], 2, "neg").unwrap();
        assert_eq!(tie.verdict, Verdict::Flag);
        let skipped = majority(&[v("skip", None), v("reject", None)], 2, "neg");
        assert_eq!(skipped, None);
        let relabel = majority(&[("relabel".into(), None, Some("pos".into()))], 1, "neg").unwrap();
        assert_eq!(relabel.label, "pos");
    }
}
