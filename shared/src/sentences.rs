//! Rule-based sentence splitting for reviews.
//!
//! CORE indexes review *sentences* (whole reviews retrieve badly, §4.1). A sentence ends at
//! `.`, `!`, `?` or `…` (possibly repeated and followed by closing quotes or brackets) when
//! whitespace follows and the next word does not continue it: a lower-case start after `.`
//! (`"at 3 p.m. yesterday"`), a known abbreviation (`Mr.`, `vs.`, `No.`) or a single capital
//! initial (`J. Smith`) do not end a sentence. Line breaks always end one.

use std::ops::Range;

/// Abbreviations (lower case, without their dot) after which a `.` does not end a sentence.
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "approx", "no",
    "vol", "ch", "fig", "mt", "ft", "lt", "col", "gen", "sgt", "capt", "rev", "inc", "ltd", "co",
    "corp", "dept", "est", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct",
    "nov", "dec", "u.s", "u.k", "a.k.a",
];

/// Splits `text` into trimmed, non-empty sentences (byte ranges into `text`).
pub fn sentence_spans(text: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        if c == '\n' || c == '\r' {
            push_trimmed(text, start..at, &mut spans);
            start = at + c.len_utf8();
            i += 1;
            continue;
        }
        if !is_terminal(c) {
            i += 1;
            continue;
        }
        // The run of terminal punctuation, then closing quotes and brackets.
        let mut j = i;
        while j < chars.len() && is_terminal(chars[j].1) {
            j += 1;
        }
        while j < chars.len() && is_closing(chars[j].1) {
            j += 1;
        }
        let end = chars.get(j).map_or(text.len(), |&(at, _)| at);
        let followed_by_space = j == chars.len() || chars[j].1.is_whitespace();
        let single_dot = c == '.' && j == i + 1;
        if followed_by_space && !(single_dot && continues(text, start, at, &chars[j..])) {
            push_trimmed(text, start..end, &mut spans);
            start = end;
        }
        i = j.max(i + 1);
    }
    push_trimmed(text, start..text.len(), &mut spans);
    spans
}

/// The sentences of `text`, trimmed.
pub fn split_sentences(text: &str) -> Vec<&str> {
    sentence_spans(text)
        .into_iter()
        .map(|span| &text[span])
        .collect()
}

fn is_terminal(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…')
}

fn is_closing(c: char) -> bool {
    matches!(c, '"' | '\'' | ')' | ']' | '”' | '’' | '»')
}

/// Whether a single `.` at byte `dot` (in the sentence starting at `start`) is part of the
/// sentence rather than its end, judged by the word before it and the text after it.
fn continues(text: &str, start: usize, dot: usize, after: &[(usize, char)]) -> bool {
    let before = &text[start..dot];
    let word = before
        .rsplit(|c: char| c.is_whitespace() || c == '(' || c == '"')
        .next()
        .unwrap_or("");
    let lower = word.to_lowercase();
    if ABBREVIATIONS.contains(&lower.as_str()) {
        return true;
    }
    // A single capital initial: "J. R. R. Tolkien".
    let mut letters = word.chars();
    if let (Some(first), None) = (letters.next(), letters.next())
        && first.is_uppercase()
    {
        return true;
    }
    // The next word starts in lower case: "… at 3 p.m. yesterday".
    let next = after.iter().map(|&(_, c)| c).find(|c| !c.is_whitespace());
    next.is_some_and(|c| c.is_lowercase())
}

fn push_trimmed(text: &str, span: Range<usize>, spans: &mut Vec<Range<usize>>) {
    let slice = &text[span.clone()];
    let trimmed = slice.trim();
    if trimmed.is_empty() {
        return;
    }
    let start = span.start + (slice.len() - slice.trim_start().len());
    spans.push(start..start + trimmed.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_terminal_punctuation() {
        assert_eq!(
            split_sentences("The acting was superb. The plot? A mess!! I loved it…  Really."),
            vec![
                "The acting was superb.",
                "The plot?",
                "A mess!!",
                "I loved it…",
                "Really."
            ]
        );
    }

    #[test]
    fn keeps_abbreviations_initials_and_lower_case_continuations() {
        assert_eq!(
            split_sentences(
                "Mr. Smith met Dr. Jones vs. J. R. Ewing at 3 p.m. yesterday. It was fine."
            ),
            vec![
                "Mr. Smith met Dr. Jones vs. J. R. Ewing at 3 p.m. yesterday.",
                "It was fine."
            ]
        );
    }

    #[test]
    fn closing_quotes_stay_with_their_sentence() {
        assert_eq!(
            split_sentences("He said \"go away.\" She left. (It rained.) Then..."),
            vec![
                "He said \"go away.\"",
                "She left.",
                "(It rained.)",
                "Then..."
            ]
        );
    }

    #[test]
    fn line_breaks_end_sentences_and_blank_text_gives_none() {
        assert_eq!(
            split_sentences("first line\n\nsecond line\r\nthird"),
            vec!["first line", "second line", "third"]
        );
        assert!(split_sentences("  \n ").is_empty());
    }

    #[test]
    fn no_split_inside_numbers_or_urls() {
        assert_eq!(
            split_sentences("It scored 8.5 out of 10 on imdb.com today. Go."),
            vec!["It scored 8.5 out of 10 on imdb.com today.", "Go."]
        );
    }

    #[test]
    fn spans_point_into_the_text() {
        let text = "  One.  Two!  ";
        let spans = sentence_spans(text);
        assert_eq!(spans, vec![2..6, 8..12]);
    }

    /// Generated texts: sentences are trimmed, in order, non-overlapping slices, and no
    /// character but whitespace falls between them.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok())
                    .unwrap_or(3000),
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            #[test]
            fn sentences_cover_the_text_in_order(
                text in "([A-Za-z]{1,6}|[.!?…]{1,3}|[\"'”)\\]]|Mr\\.|U\\.S\\.|[ \n\r\t]|é|😀|.){0,60}",
            ) {
                let spans = sentence_spans(&text);
                let mut end = 0;
                for span in &spans {
                    prop_assert!(span.start >= end && span.start < span.end, "{spans:?}");
                    let sentence = &text[span.clone()];
                    prop_assert_eq!(sentence, sentence.trim());
                    prop_assert!(text[end..span.start].trim().is_empty(), "{spans:?}");
                    end = span.end;
                }
                prop_assert!(text[end..].trim().is_empty(), "{spans:?}");
            }
        }
    }
}
