//! Reading the edited text out of an LLM's reply, which may be chatty ("Sure! Here is the
//! edited review: …"), quoted, in markdown, or followed by more template lines.

use flipside_shared::metrics::bleu::self_bleu;
use flipside_shared::words::{is_word, metric_tokens};

/// Field names of the built-in templates: a reply line starting with one of these ends the
/// answer (the model went on to invent another example).
const FIELD_LINES: [&str; 9] = [
    "review:",
    "label:",
    "target label:",
    "list of",
    "edited review:",
    "original sentence",
    "modified sentence",
    "example:",
    "counterfactual:",
];

/// Labels a model may put before its answer, copying the template's format.
const ANSWER_LABELS: [&str; 6] = [
    "edited review:",
    "review:",
    "counterfactual:",
    "modified sentence 2:",
    "edited:",
    "answer:",
];

/// Openers of chatter lines that precede the answer.
const OPENERS: [&str; 6] = [
    "sure",
    "certainly",
    "okay",
    "ok,",
    "of course",
    "absolutely",
];

/// Words of chatter lines that announce the answer.
const ANNOUNCEMENTS: [&str; 5] = ["here is", "here's", "edited", "revised", "counterfactual"];

/// The edited text in `reply`, or why there is none. `answer_prefix` is the template's answer
/// label ("Edited Review:"); `original` is the text that was to be edited.
pub fn parse_edit(reply: &str, answer_prefix: &str, original: &str) -> Result<String, String> {
    let reply = reply.replace("\r\n", "\n");
    let prefix = answer_prefix.trim().to_lowercase();
    // After the answer label, when the model repeated it.
    let after_label = (!prefix.is_empty())
        .then(|| {
            reply
                .char_indices()
                .find_map(|(at, _)| strip_prefix_ignoring_case(&reply[at..], &prefix))
        })
        .flatten();
    let body = after_label.unwrap_or(&reply);
    let mut lines: Vec<&str> = body.lines().map(str::trim).collect();
    while lines.first().is_some_and(|l| l.is_empty()) {
        lines.remove(0);
    }
    // Chatter before the answer: "Sure! Here's the edited review:".
    while lines.first().is_some_and(|l| is_chatter(l)) {
        lines.remove(0);
        while lines.first().is_some_and(|l| l.is_empty()) {
            lines.remove(0);
        }
    }
    // The model may label its answer like the template's lines ("Review: …").
    if let Some(first) = lines.first_mut()
        && let Some(rest) = ANSWER_LABELS
            .iter()
            .find_map(|label| strip_prefix_ignoring_case(first, label))
    {
        *first = rest.trim_start();
    }
    let mut answer = Vec::new();
    for line in lines {
        let lower = line.to_lowercase();
        if line.is_empty() || FIELD_LINES.iter().any(|f| lower.starts_with(f)) {
            break;
        }
        answer.push(line);
    }
    let text = strip_decoration(&answer.join(" "));
    if text.is_empty() {
        return Err("empty reply".to_string());
    }
    if words(&text) == words(original) {
        return Err("unchanged: the reply repeats the original's words".to_string());
    }
    let kept = kept_fraction(&text, original);
    if kept < MIN_KEPT {
        return Err(format!(
            "not an edit of the original: it keeps {:.0}% of its words",
            100.0 * kept
        ));
    }
    let (words, original_words) = (
        text.split_whitespace().count(),
        original.split_whitespace().count(),
    );
    if words > 2 * original_words + 20 {
        return Err(format!(
            "too long: {words} words for an original of {original_words}"
        ));
    }
    Ok(text)
}

/// The least share of the original's words an edit must keep: below it, the reply is a new text
/// (often the model talking about the task), not a minimal edit.
const MIN_KEPT: f64 = 0.25;

/// The share of `original`'s words (with repeats) that `edit` still contains.
pub fn kept_fraction(edit: &str, original: &str) -> f64 {
    let original = words(original);
    let mut pool = words(edit);
    let mut kept = 0;
    for word in &original {
        if let Some(at) = pool.iter().position(|w| w == word) {
            pool.swap_remove(at);
            kept += 1;
        }
    }
    kept as f64 / original.len().max(1) as f64
}

/// BLEU above which an edit counts as a copy of a demonstration's answer.
const COPY_BLEU: f64 = 0.5;

/// The demonstration answer that `edit` copies, if any: small models often repeat an answer of
/// the few-shot examples instead of editing the text they were given.
pub fn copied_demonstration<'a>(edit: &str, demonstrations: &[&'a str]) -> Option<&'a str> {
    demonstrations
        .iter()
        .copied()
        .find(|demo| self_bleu(edit, demo) > COPY_BLEU)
}

/// `text` after `prefix` (lower case) when `text` starts with it in any case. Compares
/// character by character, since lower-casing can change a text's length in bytes ("İ").
fn strip_prefix_ignoring_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let mut wanted = prefix.chars();
    for (at, c) in text.char_indices() {
        let rest = wanted.as_str();
        if rest.is_empty() {
            return Some(&text[at..]);
        }
        for lower in c.to_lowercase() {
            if wanted.next() != Some(lower) {
                return None;
            }
        }
    }
    wanted.as_str().is_empty().then_some("")
}

/// A line before the answer that is talk, not text: it ends with a colon, is an opener
/// ("Sure!"), or announces the answer ("Here is the edited review.").
fn is_chatter(line: &str) -> bool {
    let lower = line.to_lowercase();
    let opener = OPENERS.iter().any(|o| lower.starts_with(o)) && line.ends_with('!');
    let announcement = ANNOUNCEMENTS.iter().any(|a| lower.contains(a)) && line.len() < 120;
    line.ends_with(':') || opener || announcement
}

/// Removes markdown emphasis, a quote marker and surrounding quotation marks.
fn strip_decoration(text: &str) -> String {
    let mut text = text.trim().trim_start_matches("> ").replace("**", "");
    for (open, close) in [('"', '"'), ('“', '”'), ('\'', '\''), ('`', '`')] {
        if text.len() >= 2 && text.starts_with(open) && text.ends_with(close) {
            let inner = &text[open.len_utf8()..text.len() - close.len_utf8()];
            if !inner.contains(open) && !inner.contains(close) {
                text = inner.trim().to_string();
            }
        }
    }
    text
}

/// The lower-cased words of `text`, without punctuation: an edit that only re-spaces or
/// re-punctuates the original changes none of them.
fn words(text: &str) -> Vec<String> {
    metric_tokens(text)
        .into_iter()
        .filter(|t| is_word(t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "Edited Review:";
    const ORIGINAL: &str = "The acting was superb.";

    #[test]
    fn plain_and_chatty_replies_give_the_edit() {
        let cases = [
            " The acting was wooden.",
            "The acting was wooden.\n\nReview: another invented example",
            "Sure! Here is the edited review:\n\nThe acting was wooden.",
            "Edited Review: The acting was wooden.\nLabel: Negative",
            "\"The acting was wooden.\"",
            "**The acting was wooden.**",
            "Here's the edit:\n> The acting was wooden.",
            "Certainly!\nThe acting was wooden.",
            "Here is the edited review.\nThe acting was wooden.",
            "Review: The acting was wooden.\nLabel: Negative",
        ];
        for reply in cases {
            assert_eq!(
                parse_edit(reply, PREFIX, ORIGINAL).as_deref(),
                Ok("The acting was wooden."),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn answers_that_open_like_chatter_are_kept() {
        let reply = "Okay acting, nothing more.\nThe end.";
        assert_eq!(
            parse_edit(reply, PREFIX, ORIGINAL).unwrap(),
            "Okay acting, nothing more. The end."
        );
    }

    #[test]
    fn kept_fraction_counts_surviving_words_by_hand() {
        // 3 of the original's 5 words survive; punctuation does not count.
        assert_eq!(
            kept_fraction("The acting was wooden!", "the acting was really superb."),
            0.6
        );
        assert_eq!(kept_fraction("a a b", "a a a c"), 0.5);
        assert_eq!(kept_fraction("anything", ""), 0.0);
    }

    #[test]
    fn copies_of_demonstration_answers_are_detected() {
        let demos = [
            "I don't know why I hate this movie so much, now I am tired of watching it.",
            "Perfect, clean, interesting.",
        ];
        let copy = "I don't know why I hate this movie so much, now I hate it.";
        assert_eq!(copied_demonstration(copy, &demos), Some(demos[0]));
        assert_eq!(copied_demonstration("The acting was wooden.", &demos), None);
    }

    #[test]
    fn multi_line_answers_are_joined() {
        let reply = "The acting was wooden,\nthe plot dull.\n\nThat's it!";
        assert_eq!(
            parse_edit(reply, PREFIX, ORIGINAL).unwrap(),
            "The acting was wooden, the plot dull."
        );
    }

    #[test]
    fn bad_replies_are_failures_with_reasons() {
        assert_eq!(
            parse_edit("  \n", PREFIX, ORIGINAL),
            Err("empty reply".into())
        );
        assert_eq!(
            parse_edit("Label: Negative", PREFIX, ORIGINAL),
            Err("empty reply".into())
        );
        // Only an announcement, cut off before the answer.
        assert_eq!(
            parse_edit("To edit the review, I'll make 5 changes:", PREFIX, ORIGINAL),
            Err("empty reply".into())
        );
        for same_words in ["the acting  was SUPERB.", "The acting was superb!"] {
            assert!(
                parse_edit(same_words, PREFIX, ORIGINAL)
                    .unwrap_err()
                    .starts_with("unchanged"),
                "{same_words}"
            );
        }
        let talk = "I'm glad I could find a review that has a positive sentiment.";
        assert!(
            parse_edit(talk, PREFIX, "The plot was dull and the jokes painful.")
                .unwrap_err()
                .starts_with("not an edit of the original: it keeps 0%")
        );
        let rambling = "the acting was ".repeat(15);
        assert!(
            parse_edit(&rambling, PREFIX, ORIGINAL)
                .unwrap_err()
                .starts_with("too long")
        );
    }

    /// Generated replies: reading one never fails but with a reason, and an edit wrapped in
    /// chatter, labels and odd letters ("İ", whose lower case is longer) comes out whole.
    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Reply-like text: template labels, chatter, quotes, markdown and line breaks.
        fn reply() -> impl Strategy<Value = String> {
            let marks = proptest::sample::select(vec![
                "Edited Review:",
                "EDITED REVIEW:",
                "Review: ",
                "Label: Negative",
                "Sure! Here is the edited review:",
                "\n",
                "\r\n",
                "**",
                "\"",
                "“",
                "> ",
                "İ",
                "ẞ",
            ]);
            let piece = prop_oneof![marks.prop_map(String::from), ".{0,12}"];
            proptest::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
        }

        proptest! {
            #![proptest_config(crate::property_config(1500))]

            #[test]
            fn any_reply_gives_an_edit_or_a_reason(
                reply in reply(),
                prefix in prop_oneof![Just("Edited Review:".to_string()), ".{0,10}"],
                original in prop_oneof![Just(ORIGINAL.to_string()), ".{0,40}"],
            ) {
                match parse_edit(&reply, &prefix, &original) {
                    Ok(edit) => {
                        prop_assert!(!edit.trim().is_empty());
                        prop_assert!(!edit.contains('\n'), "{edit:?}");
                        prop_assert!(words(&edit) != words(&original));
                    }
                    Err(reason) => prop_assert!(!reason.is_empty()),
                }
            }

            #[test]
            fn an_edit_after_chatter_and_its_label_is_read_whole(
                tokens in proptest::collection::vec("[a-z]{2,8}", 3..12),
                at in any::<proptest::sample::Index>(),
                before in "[İẞé a-zA-Z!]{0,20}",
                label_case in any::<bool>(),
            ) {
                let original = tokens.join(" ") + ".";
                let mut edited = tokens.clone();
                edited[at.index(tokens.len())] = "qqwooden".to_string();
                let edit = edited.join(" ") + ".";
                let label = if label_case { "EDITED review:" } else { "Edited Review:" };
                let reply = format!("{before}\n{label} {edit}\nLabel: negative");
                prop_assert_eq!(parse_edit(&reply, PREFIX, &original), Ok(edit));
            }
        }
    }
}
