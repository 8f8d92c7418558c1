//! Keywords for the editor (CORE §3.2) and the polarity-bearing sentences of long reviews
//! (§4.1), from the fetched word lists: stopwords, Liu & Hu's opinion lexicon and Brill's POS
//! lexicon.

use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::path::Path;

use anyhow::{Context, Result};
use flipside_shared::pos::{Pos, PosTagger};
use flipside_shared::sentences::split_sentences;
use flipside_shared::words::word_tokens;

use super::prompts::Task;
use crate::home::Home;

/// Word lists used to pick keywords and sentences.
#[derive(Debug, Clone)]
pub struct Lexicons {
    pub stopwords: HashSet<String>,
    /// Liu & Hu's positive opinion words.
    pub positive: HashSet<String>,
    /// Liu & Hu's negative opinion words.
    pub negative: HashSet<String>,
    pub tagger: PosTagger,
}

impl Lexicons {
    /// Loads the `lexicons` and `pos-lexicon` assets.
    pub fn load(home: &Home) -> Result<Self> {
        let words = home.asset("lexicons")?;
        let pos = home.asset("pos-lexicon")?;
        let read = |path: &Path| {
            std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
        };
        let list = |text: String| -> HashSet<String> {
            text.lines()
                .map(|l| l.trim().to_lowercase())
                .filter(|l| !l.is_empty() && !l.starts_with(';'))
                .collect()
        };
        Ok(Lexicons {
            stopwords: list(read(&words.join("stopwords-en.txt"))?),
            positive: list(read(&words.join("opinion-positive-en.txt"))?),
            negative: list(read(&words.join("opinion-negative-en.txt"))?),
            tagger: PosTagger::from_lexicon(&read(&pos.join("en-lexicon.txt"))?),
        })
    }

    /// The opinion words of a sentiment label, `positive` or `negative` (`None` for another).
    pub fn of_polarity(&self, label: &str) -> Option<&HashSet<String>> {
        match label {
            "positive" => Some(&self.positive),
            "negative" => Some(&self.negative),
            _ => None,
        }
    }

    /// Number of opinion words in `text`, positive or negative.
    pub fn polarity(&self, text: &str) -> usize {
        let (positive, negative) = self.opinion_counts(text);
        positive + negative
    }

    /// Positive minus negative opinion words in `text` (negation is not handled).
    pub fn sentiment(&self, text: &str) -> i64 {
        let (positive, negative) = self.opinion_counts(text);
        positive as i64 - negative as i64
    }

    fn opinion_counts(&self, text: &str) -> (usize, usize) {
        let (mut positive, mut negative) = (0, 0);
        for token in word_tokens(text) {
            let word = token.to_lowercase();
            positive += usize::from(self.positive.contains(&word));
            negative += usize::from(self.negative.contains(&word));
        }
        (positive, negative)
    }
}

/// The keywords of retrieved excerpts, in order of first appearance, lower-cased, without
/// repeats, at most `max`. Sentiment: everything but determiners, conjunctions, punctuation and
/// stopwords. NLI: adjectives, adpositions, adverbs, nouns and verbs (Table 10's lists keep
/// prepositions such as "on" and "up", so stopwords are not removed).
pub fn keywords(excerpts: &[&str], lexicons: &Lexicons, task: Task, max: usize) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for excerpt in excerpts {
        let tokens = word_tokens(excerpt);
        let tags = lexicons.tagger.tag(&tokens);
        for (token, tag) in tokens.iter().zip(tags) {
            let word = token.to_lowercase();
            let keep = match task {
                Task::Sentiment => {
                    !matches!(tag, Pos::Det | Pos::Cconj | Pos::Punct)
                        && !lexicons.stopwords.contains(&word)
                        && word.chars().any(char::is_alphabetic)
                }
                Task::Nli => matches!(tag, Pos::Adj | Pos::Adp | Pos::Adv | Pos::Noun | Pos::Verb),
            };
            if keep && seen.insert(word.clone()) {
                out.push(word);
                if out.len() == max {
                    return out;
                }
            }
        }
    }
    out
}

/// The sentences of a (long) text worth editing: the `max` with the most opinion words, in
/// text order; a text of one sentence, or one without opinion words, gives its first `max`
/// sentences.
pub fn polar_sentences<'a>(text: &'a str, lexicons: &Lexicons, max: usize) -> Vec<&'a str> {
    let sentences = split_sentences(text);
    if sentences.len() <= 1 {
        return vec![text.trim()];
    }
    let mut scored: Vec<(usize, usize)> = sentences
        .iter()
        .enumerate()
        .map(|(i, s)| (i, lexicons.polarity(s)))
        .filter(|&(_, score)| score > 0)
        .collect();
    if scored.is_empty() {
        return sentences.into_iter().take(max).collect();
    }
    scored.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(max);
    scored.sort();
    scored.into_iter().map(|(i, _)| sentences[i]).collect()
}

/// The sentence of `text` that best carries its label: the one, with a word count in `words`,
/// whose opinion words lean furthest toward `label_sign` (+1 positive, -1 negative), if any
/// leans that way at all; the first such sentence on ties.
pub fn labelled_sentence<'a>(
    text: &'a str,
    lexicons: &Lexicons,
    label_sign: i64,
    words: RangeInclusive<usize>,
) -> Option<&'a str> {
    let mut best: Option<(i64, &str)> = None;
    for sentence in split_sentences(text) {
        let score = label_sign * lexicons.sentiment(sentence);
        let fits = words.contains(&sentence.split_whitespace().count());
        if fits && score > 0 && best.is_none_or(|(top, _)| score > top) {
            best = Some((score, sentence));
        }
    }
    best.map(|(_, sentence)| sentence.trim())
}

#[cfg(test)]
impl Lexicons {
    /// Word lists for tests: these opinion words, no stopwords, an empty POS lexicon.
    pub fn of_opinions(positive: &[&str], negative: &[&str]) -> Self {
        let set = |words: &[&str]| words.iter().map(|w| w.to_string()).collect();
        Lexicons {
            stopwords: HashSet::new(),
            positive: set(positive),
            negative: set(negative),
            tagger: PosTagger::from_lexicon(""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lexicons() -> Lexicons {
        let set = |words: &[&str]| words.iter().map(|w| w.to_string()).collect();
        Lexicons {
            stopwords: set(&["the", "was", "a", "is", "it", "and", "on"]),
            positive: set(&["superb", "great"]),
            negative: set(&["dull", "wooden"]),
            tagger: PosTagger::from_lexicon(
                "the DT\na DT\nand CC\nacting NN\nwas VBD\nwooden JJ\nis VBZ\nplot NN\n\
                 dull JJ\non IN\nhold VB\nefforts NNS\nare VBP\n",
            ),
        }
    }

    #[test]
    fn sentiment_keywords_drop_function_words_and_repeats() {
        let excerpts = ["The acting was wooden, and the plot dull.", "A dull plot!"];
        assert_eq!(
            keywords(&excerpts, &lexicons(), Task::Sentiment, 10),
            vec!["acting", "wooden", "plot", "dull"]
        );
        assert_eq!(
            keywords(&excerpts, &lexicons(), Task::Sentiment, 2),
            vec!["acting", "wooden"]
        );
    }

    #[test]
    fn nli_keywords_keep_content_words_and_adpositions() {
        let excerpts = ["The efforts are on hold."];
        assert_eq!(
            keywords(&excerpts, &lexicons(), Task::Nli, 10),
            vec!["efforts", "on", "hold"]
        );
    }

    #[test]
    fn picks_the_most_opinionated_sentences_in_text_order() {
        let review = "I saw it on Monday. The plot is dull. The acting was superb and great. \
                      It ran two hours.";
        assert_eq!(
            polar_sentences(review, &lexicons(), 2),
            vec!["The plot is dull.", "The acting was superb and great."]
        );
        assert_eq!(
            polar_sentences(review, &lexicons(), 1),
            vec!["The acting was superb and great."]
        );
        assert_eq!(
            polar_sentences("Just one.", &lexicons(), 3),
            vec!["Just one."]
        );
    }

    #[test]
    fn the_labelled_sentence_leans_furthest_toward_the_label() {
        let review = "A great cast. The plot was dull, dull and wooden. Superb, great music and \
                      a great ending!";
        let lexicons = lexicons();
        let sentence = |text, sign, words| labelled_sentence(text, &lexicons, sign, words);
        assert_eq!(
            sentence(review, 1, 1..=10),
            Some("Superb, great music and a great ending!")
        );
        assert_eq!(
            sentence(review, -1, 1..=10),
            Some("The plot was dull, dull and wooden.")
        );
        // Sentences outside the word range are skipped; ties go to the first.
        assert_eq!(sentence(review, 1, 1..=3), Some("A great cast."));
        assert_eq!(sentence(review, -1, 1..=5), None);
        assert_eq!(sentence("Great. Superb.", 1, 1..=5), Some("Great."));
    }
}
