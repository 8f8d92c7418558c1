//! Negation scope: an opinion word a few words after "not", "never", "n't"… says the opposite of
//! its polarity ("would not recommend", "isn't too great"). An edit that writes a target-label
//! word there has not flipped the text, even when a classifier says it has: on `bench cf`, the
//! shipped Dis-AE turned "I would not recommend this item" into "I would not love this item" and
//! "not good at all" into "not great at all", and the flip check passed both.

use std::collections::HashSet;

use flipside_shared::diff::{Change, align};
use flipside_shared::words::{is_word, metric_tokens};

/// Words that reverse the opinion words after them (lower case; "n't" is its own token).
const NEGATORS: [&str; 12] = [
    "not", "n't", "no", "never", "nor", "neither", "cannot", "hardly", "barely", "scarcely",
    "without", "nothing",
];

/// Words after a negator within which it reverses an opinion word ("not really that great").
const SCOPE: usize = 3;

/// A new opinion word under a negation, and the negator before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegatedWord {
    pub word: String,
    pub negator: String,
}

impl std::fmt::Display for NegatedWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "its new opinion word {:?} is negated ({:?} before it), so the text keeps its label",
            self.word, self.negator
        )
    }
}

/// The first word `edited` adds to `original` that is one of `opinion_words` (lower case) and
/// stands within [`SCOPE`] words after a negator, with no punctuation between them ("not only"
/// does not negate).
pub fn negated_new_word(
    original: &str,
    edited: &str,
    opinion_words: &HashSet<String>,
) -> Option<NegatedWord> {
    let before = metric_tokens(original);
    let after = metric_tokens(edited);
    align(&before, &after)
        .into_iter()
        .filter(|&(change, _)| change == Change::Added)
        .map(|(_, index)| index)
        .filter(|&index| opinion_words.contains(&after[index]))
        .find_map(|index| {
            let negator = negator_before(&after, index)?;
            Some(NegatedWord {
                word: after[index].clone(),
                negator: negator.to_string(),
            })
        })
}

/// The negator whose scope covers `tokens[index]`, if one does.
fn negator_before(tokens: &[String], index: usize) -> Option<&str> {
    let start = index.saturating_sub(SCOPE);
    for position in (start..index).rev() {
        let token = tokens[position].as_str();
        if !is_word(token) {
            return None;
        }
        if NEGATORS.contains(&token) {
            let restricts = tokens.get(position + 1).is_some_and(|next| next == "only");
            return (!restricts).then_some(token);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn negated(original: &str, edited: &str) -> Option<(String, String)> {
        let positive: HashSet<String> = ["great", "love", "good", "wonderful"]
            .map(String::from)
            .into();
        negated_new_word(original, edited, &positive).map(|n| (n.word, n.negator))
    }

    #[test]
    fn a_new_opinion_word_after_a_negator_is_negated() {
        let pair = |word: &str, negator: &str| Some((word.to_string(), negator.to_string()));
        assert_eq!(
            negated(
                "I would not recommend this item.",
                "I would not love this item."
            ),
            pair("love", "not")
        );
        // "n't" is its own token; the scope reaches over "too".
        assert_eq!(
            negated("The story isn't too bad.", "The story isn't too great."),
            pair("great", "n't")
        );
        assert_eq!(
            negated("Not good at all.", "Not great at all."),
            pair("great", "not")
        );
    }

    #[test]
    fn words_out_of_a_negation_s_scope_or_not_new_are_not_negated() {
        // Four words after the negator.
        assert_eq!(
            negated(
                "I did not expect it so bad!",
                "I did not expect it so good!"
            ),
            None
        );
        // Punctuation ends the scope.
        assert_eq!(negated("Not much, bad food.", "Not much, good food."), None);
        // "not only" restricts, it does not negate.
        assert_eq!(
            negated("It was not only bad.", "It was not only great."),
            None
        );
        // The negated word was in the original: the edit did not write it.
        assert_eq!(negated("It was not great.", "It was not great!"), None);
        // A word of the other polarity (not in the set) is not looked at.
        assert_eq!(negated("It was not good.", "It was not bad."), None);
    }
}
