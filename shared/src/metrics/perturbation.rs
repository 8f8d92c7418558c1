//! Perturbation types of an edit, after Polyjuice's control codes (Wu et al. 2021; CORE
//! Table 7): negation, quantifier, lexical, resemantic, insert, delete, restructure, shuffle.
//!
//! Polyjuice detects them from a word diff plus dependency parses. Flipside has no parser, so
//! this detector works on a word-level diff of [`crate::words::metric_tokens`] alone, with these
//! approximations (an edit may get several types):
//! - **shuffle**: the same tokens in another order (nothing else is reported);
//! - **negation**: a negation word (`not`, `n't`, `no`, `never`, `nothing`, `without`, …) is
//!   inserted, deleted or replaced;
//! - **quantifier**: a quantifier (`all`, `some`, `many`, `few`, `most`, …) or a number changes;
//! - **insert** / **delete**: the diff only adds / only removes tokens;
//! - **lexical**: every changed span is one word replaced by one word;
//! - **resemantic**: a replaced span is longer than one token on either side, at most half of
//!   the original changes, and nothing moved (Polyjuice checks that the replaced constituents have the same
//!   dependency label; here span length stands in for it);
//! - **restructure**: at least two kept tokens moved (they are shared by both texts but not on
//!   the longest common subsequence), or more than half of the original changed while most of
//!   its words survive (Polyjuice compares dependency trees);
//! - **unk**: none of the above, or a rewrite: more than half of the original changed and less
//!   than half of its tokens survive (then no other type is reported).

use std::collections::HashMap;

use serde::Serialize;

use crate::diff::{Change as Step, align};
use crate::words::{is_word, metric_tokens};

/// One of Polyjuice's perturbation types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Perturbation {
    Negation,
    Quantifier,
    Lexical,
    Resemantic,
    Insert,
    Delete,
    Restructure,
    Shuffle,
    Unk,
}

impl Perturbation {
    pub const ALL: [Perturbation; 9] = [
        Perturbation::Negation,
        Perturbation::Quantifier,
        Perturbation::Lexical,
        Perturbation::Resemantic,
        Perturbation::Insert,
        Perturbation::Delete,
        Perturbation::Restructure,
        Perturbation::Shuffle,
        Perturbation::Unk,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Perturbation::Negation => "negation",
            Perturbation::Quantifier => "quantifier",
            Perturbation::Lexical => "lexical",
            Perturbation::Resemantic => "resemantic",
            Perturbation::Insert => "insert",
            Perturbation::Delete => "delete",
            Perturbation::Restructure => "restructure",
            Perturbation::Shuffle => "shuffle",
            Perturbation::Unk => "unk",
        }
    }
}

const NEGATIONS: [&str; 12] = [
    "not", "n't", "no", "never", "nothing", "none", "nobody", "nowhere", "neither", "nor",
    "without", "cannot",
];

const QUANTIFIERS: [&str; 17] = [
    "all", "some", "many", "few", "every", "each", "most", "several", "any", "both", "much",
    "more", "less", "fewer", "little", "lots", "enough",
];

/// A changed span of the diff: original tokens `old` became `new`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Change {
    pub old: Vec<String>,
    pub new: Vec<String>,
}

/// The changed spans between two token sequences, from a longest common subsequence; also
/// returns the LCS length.
pub fn word_diff(original: &[String], edited: &[String]) -> (Vec<Change>, usize) {
    let mut changes = Vec::new();
    let mut current = Change::default();
    let mut common = 0;
    for (step, index) in align(original, edited) {
        match step {
            Step::Kept => {
                common += 1;
                if !current.old.is_empty() || !current.new.is_empty() {
                    changes.push(std::mem::take(&mut current));
                }
            }
            Step::Removed => current.old.push(original[index].clone()),
            Step::Added => current.new.push(edited[index].clone()),
        }
    }
    if !current.old.is_empty() || !current.new.is_empty() {
        changes.push(current);
    }
    (changes, common)
}

/// The perturbation types of the edit from `original` to `edited` (sorted; `[Unk]` when none
/// applies; empty when the texts are the same).
pub fn perturbation_types(original: &str, edited: &str) -> Vec<Perturbation> {
    let (a, b) = (metric_tokens(original), metric_tokens(edited));
    let (changes, lcs) = word_diff(&a, &b);
    if changes.is_empty() {
        return Vec::new();
    }
    let (bag_a, bag_b) = (bag(&a), bag(&b));
    if bag_a == bag_b {
        return vec![Perturbation::Shuffle];
    }
    let shared: usize = bag_a
        .iter()
        .map(|(t, &c)| c.min(bag_b.get(t).copied().unwrap_or(0)))
        .sum();
    let changed_original: usize = changes.iter().map(|c| c.old.len()).sum();
    // A rewrite (most of the original changed, little of it kept) has no Polyjuice type.
    if 2 * changed_original > a.len() && 2 * shared < a.len() {
        return vec![Perturbation::Unk];
    }
    let changed_tokens = || changes.iter().flat_map(|c| c.old.iter().chain(&c.new));
    let is_negation = |t: &String| NEGATIONS.contains(&t.as_str()) || t.ends_with("n't");
    let is_quantifier =
        |t: &String| QUANTIFIERS.contains(&t.as_str()) || t.chars().all(|c| c.is_ascii_digit());

    let mut types = Vec::new();
    if changed_tokens().any(is_negation) {
        types.push(Perturbation::Negation);
    }
    if changed_tokens().any(is_quantifier) {
        types.push(Perturbation::Quantifier);
    }
    let only_inserts = changes.iter().all(|c| c.old.is_empty());
    let only_deletes = changes.iter().all(|c| c.new.is_empty());
    let replacements: Vec<&Change> = changes
        .iter()
        .filter(|c| !c.old.is_empty() && !c.new.is_empty())
        .collect();
    if only_inserts {
        types.push(Perturbation::Insert);
    } else if only_deletes {
        types.push(Perturbation::Delete);
    } else if !replacements.is_empty() {
        let one_word = |side: &[String]| side.len() == 1 && is_word(&side[0]);
        if changes.iter().all(|c| one_word(&c.old) && one_word(&c.new)) {
            types.push(Perturbation::Lexical);
        } else if 2 * changed_original <= a.len()
            && shared.saturating_sub(lcs) < 2
            && replacements
                .iter()
                .any(|c| c.old.len() > 1 || c.new.len() > 1)
        {
            types.push(Perturbation::Resemantic);
        }
    }
    let moved = shared.saturating_sub(lcs);
    let mostly_rewritten = 2 * changed_original > a.len() && 2 * shared >= a.len();
    if moved >= 2 || mostly_rewritten {
        types.push(Perturbation::Restructure);
    }
    if types.is_empty() {
        types.push(Perturbation::Unk);
    }
    types.sort();
    types
}

/// How often each token occurs.
fn bag(tokens: &[String]) -> HashMap<&str, usize> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for t in tokens {
        *counts.entry(t.as_str()).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::Perturbation::*;
    use super::*;

    #[test]
    fn diff_finds_changed_spans() {
        let t = |s: &str| metric_tokens(s);
        let (changes, lcs) = word_diff(&t("the film was good ."), &t("the movie was not good ."));
        assert_eq!(lcs, 4);
        assert_eq!(
            changes,
            vec![
                Change {
                    old: vec!["film".into()],
                    new: vec!["movie".into()]
                },
                Change {
                    old: vec![],
                    new: vec!["not".into()]
                },
            ]
        );
    }

    #[test]
    fn classifies_hand_made_edits() {
        let cases: [(&str, &str, &[Perturbation]); 11] = [
            (
                "The film was good.",
                "The film was not good.",
                &[Negation, Insert],
            ),
            (
                "The film wasn't good.",
                "The film was good.",
                &[Negation, Delete],
            ),
            (
                "All actors were good.",
                "Few actors were good.",
                &[Quantifier, Lexical],
            ),
            (
                "The acting was superb.",
                "The acting was wooden.",
                &[Lexical],
            ),
            (
                "The acting was superb and the plot clever.",
                "The acting was a total mess and the plot clever.",
                &[Resemantic],
            ),
            ("The film was good.", "The film was very good.", &[Insert]),
            (
                "The film was really very good.",
                "The film was good.",
                &[Delete],
            ),
            (
                "good acting , bad plot .",
                "bad acting , good plot .",
                &[Shuffle],
            ),
            (
                "I loved the music but the ending dragged.",
                "The ending dragged but I loved the music and more.",
                &[Quantifier, Restructure],
            ),
            (
                "A masterpiece.",
                "Two hours of my life wasted forever.",
                &[Unk],
            ),
            (
                "Not bad at all, some fun.",
                "I never want to see more of this dreck again.",
                &[Unk],
            ),
        ];
        for (original, edited, expected) in cases {
            assert_eq!(
                perturbation_types(original, edited),
                expected.to_vec(),
                "{original:?} → {edited:?}"
            );
        }
        assert!(perturbation_types("Same.", "same .").is_empty());
    }
}
