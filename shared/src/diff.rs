//! Word-level diff of an original text and its edit: the longest common subsequence of their
//! words, shown as kept, removed and added runs.

use serde::{Deserialize, Serialize};

/// What happened to a run of words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Kept,
    Removed,
    Added,
}

/// A run of consecutive words with the same [`Change`], joined by single spaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffRun {
    pub change: Change,
    pub text: String,
}

/// The word-level diff turning `original` into `edited`. Words are whitespace-separated
/// tokens compared exactly (punctuation included); in a changed span the removed words come
/// before the added ones.
pub fn word_diff(original: &str, edited: &str) -> Vec<DiffRun> {
    let a: Vec<&str> = original.split_whitespace().collect();
    let b: Vec<&str> = edited.split_whitespace().collect();
    let mut runs: Vec<DiffRun> = Vec::new();
    for (change, index) in align(&a, &b) {
        let word = if change == Change::Added {
            b[index]
        } else {
            a[index]
        };
        match runs.last_mut() {
            Some(run) if run.change == change => {
                run.text.push(' ');
                run.text.push_str(word);
            }
            _ => runs.push(DiffRun {
                change,
                text: word.to_string(),
            }),
        }
    }
    runs
}

/// A longest-common-subsequence alignment of `a` and `b`: each element of `a` kept or removed
/// and each of `b` kept or added, with its index (into `a`, or into `b` for additions). Every
/// changed span lists its removals before its additions; ties prefer matching later elements.
pub fn align<T: PartialEq>(a: &[T], b: &[T]) -> Vec<(Change, usize)> {
    let width = b.len() + 1;
    // lcs[i * width + j]: LCS length of a[i..] and b[j..].
    let mut lcs = vec![0u32; (a.len() + 1) * width];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i * width + j] = if a[i] == b[j] {
                lcs[(i + 1) * width + j + 1] + 1
            } else {
                lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut steps = Vec::with_capacity(a.len() + b.len());
    let mut added = Vec::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            steps.append(&mut added);
            steps.push((Change::Kept, i));
            i += 1;
            j += 1;
        } else if j < b.len()
            && (i == a.len() || lcs[i * width + j + 1] >= lcs[(i + 1) * width + j])
        {
            // Held back so that a span's removals come first.
            added.push((Change::Added, j));
            j += 1;
        } else {
            steps.push((Change::Removed, i));
            i += 1;
        }
    }
    steps.append(&mut added);
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(runs: &[DiffRun]) -> String {
        runs.iter()
            .map(|r| match r.change {
                Change::Kept => r.text.clone(),
                Change::Removed => format!("[-{}-]", r.text),
                Change::Added => format!("{{+{}+}}", r.text),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn a_replaced_word_is_a_removal_then_an_addition() {
        let runs = word_diff("the acting was superb .", "the acting was wooden .");
        assert_eq!(show(&runs), "the acting was [-superb-] {+wooden+} .");
    }

    #[test]
    fn insertions_deletions_and_several_changes() {
        assert_eq!(
            show(&word_diff("a great fun film", "a film")),
            "a [-great fun-] film"
        );
        assert_eq!(
            show(&word_diff("a film", "a truly awful film")),
            "a {+truly awful+} film"
        );
        assert_eq!(
            show(&word_diff(
                "Superb cast, gripping plot and a moving ending.",
                "Wooden cast, tedious plot and a moving ending."
            )),
            "[-Superb-] {+Wooden+} cast, [-gripping-] {+tedious+} plot and a moving ending."
        );
    }

    #[test]
    fn identical_empty_and_disjoint_texts() {
        assert_eq!(show(&word_diff("same  text", "same text")), "same text");
        assert!(word_diff("", "").is_empty());
        assert_eq!(show(&word_diff("", "new")), "{+new+}");
        assert_eq!(
            show(&word_diff("old words", "new")),
            "[-old words-] {+new+}"
        );
    }

    #[test]
    fn kept_and_removed_words_rebuild_the_original_and_kept_and_added_the_edit() {
        let (a, b) = (
            "one two three four five six",
            "zero two three 3.5 five seven six",
        );
        let runs = word_diff(a, b);
        let side = |skip: Change| {
            runs.iter()
                .filter(|r| r.change != skip)
                .map(|r| r.text.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(side(Change::Added), a);
        assert_eq!(side(Change::Removed), b);
        let kept: usize = runs
            .iter()
            .filter(|r| r.change == Change::Kept)
            .map(|r| r.text.split(' ').count())
            .sum();
        assert_eq!(
            kept, 4,
            "two three five six is the longest common subsequence"
        );
    }
}
