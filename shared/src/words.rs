//! Word tokenisation for keywords, tagging and the counterfactual metrics.
//!
//! A token is a run of letters and digits with inner apostrophes, hyphens or dots ("it's",
//! "well-made", "3.5", "U.S"), or one other non-space character (punctuation). As in the Penn
//! Treebank, a final "n't" is its own token ("wasn't" → "was", "n't"). Case is kept; metrics
//! lower-case the tokens themselves.

use std::ops::Range;

/// The word and punctuation tokens of `text`, in order.
pub fn word_tokens(text: &str) -> Vec<&str> {
    word_spans(text)
        .into_iter()
        .map(|span| &text[span])
        .collect()
}

/// The byte ranges of [`word_tokens`] in `text`.
pub fn word_spans(text: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut start: Option<usize> = None;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (i, &(at, c)) in chars.iter().enumerate() {
        if c.is_alphanumeric() {
            start.get_or_insert(at);
            continue;
        }
        let joins = matches!(c, '\'' | '’' | '-' | '.')
            && start.is_some()
            && chars.get(i + 1).is_some_and(|&(_, n)| n.is_alphanumeric());
        if joins {
            continue;
        }
        if let Some(s) = start.take() {
            push_word(&mut spans, text, s..at);
        }
        if !c.is_whitespace() {
            spans.push(at..at + c.len_utf8());
        }
    }
    if let Some(s) = start {
        push_word(&mut spans, text, s..text.len());
    }
    spans
}

/// Pushes a word's range, splitting off a final "n't".
fn push_word(spans: &mut Vec<Range<usize>>, text: &str, word: Range<usize>) {
    let split = word.len() > 3
        && text.is_char_boundary(word.end - 3)
        && text[word.end - 3..word.end].eq_ignore_ascii_case("n't");
    if split {
        spans.push(word.start..word.end - 3);
        spans.push(word.end - 3..word.end);
    } else {
        spans.push(word);
    }
}

/// Whether a token is a word (contains a letter or digit) rather than punctuation.
pub fn is_word(token: &str) -> bool {
    token.chars().any(char::is_alphanumeric)
}

/// Lower-cased word and punctuation tokens: the tokenisation of every metric.
pub fn metric_tokens(text: &str) -> Vec<String> {
    word_tokens(text).iter().map(|t| t.to_lowercase()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_words_and_punctuation() {
        assert_eq!(
            word_tokens("Don't miss it: a well-made film (3.5/5)!"),
            vec![
                "Do",
                "n't",
                "miss",
                "it",
                ":",
                "a",
                "well-made",
                "film",
                "(",
                "3.5",
                "/",
                "5",
                ")",
                "!"
            ]
        );
        assert_eq!(word_tokens("end."), vec!["end", "."]);
        assert_eq!(word_tokens("U.S. customs"), vec!["U.S", ".", "customs"]);
        assert!(word_tokens("  ").is_empty());
    }
}
