//! The input's surface form carried over to a generated text: a model that writes lowercased,
//! normalised text (the Dis-AE's vocabulary) gives back the input's casing, punctuation and
//! spacing wherever its output copies the input's words.

use std::collections::HashMap;

use crate::diff::{Change, align};
use crate::words::word_spans;

/// `generated` with the surface of `source` where it copies it: tokens ([`word_spans`]) that
/// the longest common subsequence of both texts' lowercased tokens matches take the source's
/// spelling, and two matched tokens that are neighbours in the source take the source's
/// spacing between them. A new token takes the spelling the source gives the same word
/// elsewhere (names, acronyms), else the generated one. Sentence starts are capitalised when
/// the source's are, a mid-sentence copy of a source's capitalised sentence start is not, the
/// pronoun "i" is written "I", and "a" or "an" before a new word agrees with it ("an awful",
/// "a dull": a filled-in word may begin otherwise than the one it replaces).
pub fn copy_surface(source: &str, generated: &str) -> String {
    let source_spans = word_spans(source);
    let generated_spans = word_spans(generated);
    let Some(first) = generated_spans.first() else {
        return generated.to_string();
    };
    let lower = |text: &str, spans: &[std::ops::Range<usize>]| -> Vec<String> {
        spans
            .iter()
            .map(|s| text[s.clone()].to_lowercase())
            .collect()
    };
    let source_words = lower(source, &source_spans);
    let generated_words = lower(generated, &generated_spans);
    let source_starts = sentence_starts(&source_words);
    let capitalises = source_spans
        .iter()
        .zip(&source_starts)
        .any(|(span, &start)| start && starts_upper(&source[span.clone()]));
    // A source token's spelling, unless it is only a sentence start's capital ("The"; "NYC"
    // and a mid-sentence "Spielberg" keep theirs).
    let own_spelling = |i: usize| {
        let spelling = &source[source_spans[i].clone()];
        (!source_starts[i] || spelling != capitalised(&source_words[i])).then_some(spelling)
    };
    let mut spellings: HashMap<&str, &str> = HashMap::new();
    for (i, word) in source_words.iter().enumerate() {
        if let Some(spelling) = own_spelling(i) {
            spellings.entry(word).or_insert(spelling);
        }
    }

    let mut copied_from: Vec<Option<usize>> = vec![None; generated_words.len()];
    let mut position = 0;
    for (change, index) in align(&source_words, &generated_words) {
        match change {
            Change::Kept => {
                copied_from[position] = Some(index);
                position += 1;
            }
            Change::Added => position += 1,
            Change::Removed => {}
        }
    }

    let generated_starts = sentence_starts(&generated_words);
    let mut text = generated[..first.start].to_string();
    for (j, span) in generated_spans.iter().enumerate() {
        if j > 0 {
            let gap = match (copied_from[j - 1], copied_from[j]) {
                (Some(p), Some(q)) if q == p + 1 => {
                    &source[source_spans[p].end..source_spans[q].start]
                }
                _ => &generated[generated_spans[j - 1].end..span.start],
            };
            text.push_str(gap);
        }
        let word = &generated_words[j];
        let copied = copied_from[j].and_then(|i| {
            if generated_starts[j] {
                Some(&source[source_spans[i].clone()])
            } else {
                own_spelling(i)
            }
        });
        // An article before a new word agrees with it.
        let article = match (
            word.as_str(),
            generated_words.get(j + 1),
            copied_from.get(j + 1),
        ) {
            ("a" | "an", Some(next), Some(None)) if next.starts_with(char::is_alphabetic) => {
                Some(if takes_an(next) { "an" } else { "a" })
            }
            _ => None,
        };
        let spelling = article
            .or(copied)
            .or_else(|| spellings.get(word.as_str()).copied())
            .unwrap_or(&generated[span.clone()]);
        if is_pronoun_i(word) || (generated_starts[j] && capitalises) {
            text.push_str(&capitalised(spelling));
        } else {
            text.push_str(spelling);
        }
    }
    text.push_str(&generated[generated_spans.last().map_or(0, |s| s.end)..]);
    text
}

/// For each token, whether it starts a sentence: the first token, and any after ".", "!" or "?"
/// (but not after an ellipsis written as dots).
fn sentence_starts(words: &[String]) -> Vec<bool> {
    (0..words.len())
        .map(|i| {
            i == 0
                || match words[i - 1].as_str() {
                    "!" | "?" => true,
                    "." => i < 2 || words[i - 2] != ".",
                    _ => false,
                }
        })
        .collect()
}

fn starts_upper(word: &str) -> bool {
    word.chars().next().is_some_and(char::is_uppercase)
}

/// "i", "i'm", "i've", "i'd", "i'll".
fn is_pronoun_i(word: &str) -> bool {
    matches!(
        word,
        "i" | "i'm" | "i've" | "i'd" | "i'll" | "i’m" | "i’ve" | "i’d" | "i’ll"
    )
}

/// Whether the indefinite article before the lower-case `word` is "an": before a vowel letter
/// but for a "you" or "w" sound ("a unique", "a useful", "a one-off", "a European"), and before
/// a silent "h" ("an honest", "an hour").
fn takes_an(word: &str) -> bool {
    const VOWEL_SOUNDING_H: [&str; 4] = ["hones", "honor", "honour", "hour"];
    const CONSONANT_SOUNDING_VOWEL: [&str; 9] = [
        "uni", "use", "usu", "uti", "ura", "eu", "one", "once", "ubiq",
    ];
    if VOWEL_SOUNDING_H.iter().any(|p| word.starts_with(p)) {
        return true;
    }
    word.starts_with(['a', 'e', 'i', 'o', 'u'])
        && !CONSONANT_SOUNDING_VOWEL.iter().any(|p| word.starts_with(p))
}

/// `word` with its first character upper-cased.
fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copied_words_keep_the_sources_casing_and_punctuation() {
        assert_eq!(
            copy_surface(
                "The acting in Spielberg's film was superb, wasn't it?",
                "the acting in spielberg's film was wooden, wasn't it?"
            ),
            "The acting in Spielberg's film was wooden, wasn't it?"
        );
        // NFKC's "..." for the source's ellipsis, and its curly apostrophe, come back.
        assert_eq!(
            copy_surface("I didn’t like it… at all.", "i didn't like it... at all."),
            "I didn't like it... at all."
        );
        assert_eq!(
            copy_surface("I didn’t like it… at all.", "i didn’t like it… at all."),
            "I didn’t like it… at all."
        );
    }

    #[test]
    fn new_words_follow_the_sources_sentences_and_names() {
        // A new sentence start is capitalised; a name met elsewhere takes its spelling.
        assert_eq!(
            copy_surface(
                "A dull film. NYC deserved better, and so did Tom Hanks.",
                "a great film. it shows nyc at its best, and tom hanks too."
            ),
            "A great film. It shows NYC at its best, and Tom Hanks too."
        );
        // The source's sentence-initial "The" is not copied capitalised into mid-sentence.
        assert_eq!(
            copy_surface("The plot is thin.", "sadly the plot is thin."),
            "Sadly the plot is thin."
        );
        // A lower-case source stays lower-case, but for "I".
        assert_eq!(copy_surface("loved it", "i hated it"), "I hated it");
    }

    #[test]
    fn an_article_agrees_with_the_new_word_after_it() {
        assert_eq!(
            copy_surface(
                "Omar Epps is an outstanding actor.",
                "omar epps is an bad actor."
            ),
            "Omar Epps is a bad actor."
        );
        assert_eq!(
            copy_surface("A dull, tedious film.", "a awful, tedious film."),
            "An awful, tedious film."
        );
        assert_eq!(
            copy_surface("It was a bad hour.", "it was a honest hour."),
            "It was an honest hour."
        );
        assert_eq!(
            copy_surface("An ugly plot.", "an unique plot."),
            "A unique plot."
        );
        // Before a copied word the source's article stays, right or wrong.
        assert_eq!(
            copy_surface(
                "It is an film about a ocean.",
                "it is an film about a ocean."
            ),
            "It is an film about a ocean."
        );
    }

    #[test]
    fn nothing_to_copy_leaves_the_text() {
        assert_eq!(copy_surface("Fine.", ""), "");
        assert_eq!(copy_surface("", "good film"), "good film");
        assert_eq!(copy_surface("  ", "good film ."), "good film .");
    }
}
