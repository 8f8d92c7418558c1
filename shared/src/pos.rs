//! A lexicon part-of-speech tagger: each known word gets its most frequent Penn Treebank tag
//! from Brill's lexicon (as shipped by TextBlob), unknown words a tag guessed from their shape
//! and suffix, and three of Brill's contextual rules fix the commonest noun/verb confusions.
//! Tags are then mapped to coarse universal classes. Good enough to pick keyword classes and
//! perturbation types; it is not a trained tagger.

use std::collections::HashMap;

/// Coarse word classes (Universal Dependencies' UPOS, abridged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Pos {
    Noun,
    Propn,
    Verb,
    Aux,
    Adj,
    Adv,
    Adp,
    Det,
    Pron,
    Num,
    Cconj,
    Part,
    Intj,
    Punct,
    X,
}

/// Brill's lexicon, word → most frequent Penn tag.
#[derive(Debug, Clone, Default)]
pub struct PosTagger {
    lexicon: HashMap<String, String>,
}

impl PosTagger {
    /// Reads a Brill lexicon: one `word TAG [TAG…]` per line; `;;;` lines are comments.
    pub fn from_lexicon(text: &str) -> Self {
        let lexicon = text
            .lines()
            .filter(|l| !l.starts_with(";;;"))
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                Some((parts.next()?.to_string(), parts.next()?.to_string()))
            })
            .collect();
        PosTagger { lexicon }
    }

    /// Number of words in the lexicon.
    pub fn len(&self) -> usize {
        self.lexicon.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lexicon.is_empty()
    }

    /// Penn Treebank tags of `tokens` (see [`crate::words::word_tokens`]).
    pub fn penn_tags(&self, tokens: &[&str]) -> Vec<String> {
        let mut tags: Vec<String> = tokens
            .iter()
            .enumerate()
            .map(|(i, token)| self.lookup(token, i == 0))
            .collect();
        // Brill's first contextual rules: "to run" (NN→VB after TO), "the run" (VB→NN after
        // a determiner or possessive), "will run" (NN→VB after a modal).
        for i in 1..tags.len() {
            let previous = tags[i - 1].clone();
            let tag = &mut tags[i];
            if (previous == "TO" || previous == "MD") && (tag == "NN" || tag == "VBP") {
                *tag = "VB".to_string();
            } else if (previous == "DT" || previous == "PRP$") && (tag == "VB" || tag == "VBP") {
                *tag = "NN".to_string();
            }
        }
        tags
    }

    /// Coarse classes of `tokens`.
    pub fn tag(&self, tokens: &[&str]) -> Vec<Pos> {
        tokens
            .iter()
            .zip(self.penn_tags(tokens))
            .map(|(token, tag)| coarse(token, &tag))
            .collect()
    }

    fn lookup(&self, token: &str, sentence_start: bool) -> String {
        if let Some(tag) = self.lexicon.get(token) {
            return tag.clone();
        }
        let lower = token.to_lowercase();
        if let Some(tag) = self.lexicon.get(&lower) {
            return tag.clone();
        }
        guess(token, sentence_start).to_string()
    }
}

/// A tag for a word the lexicon lacks, from its shape and suffix.
fn guess(token: &str, sentence_start: bool) -> &'static str {
    if !token.chars().any(char::is_alphanumeric) {
        return "SYM";
    }
    if token
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.' || c == ',')
    {
        return "CD";
    }
    if token.chars().next().is_some_and(char::is_uppercase) && !sentence_start {
        return "NNP";
    }
    let lower = token.to_lowercase();
    let suffix_tags: [(&str, &str); 14] = [
        ("ly", "RB"),
        ("ing", "VBG"),
        ("ed", "VBN"),
        ("ness", "NN"),
        ("ment", "NN"),
        ("tion", "NN"),
        ("ity", "NN"),
        ("able", "JJ"),
        ("ible", "JJ"),
        ("ful", "JJ"),
        ("ous", "JJ"),
        ("ive", "JJ"),
        ("less", "JJ"),
        ("ic", "JJ"),
    ];
    for (suffix, tag) in suffix_tags {
        if lower.len() > suffix.len() + 2 && lower.ends_with(suffix) {
            return tag;
        }
    }
    if token.contains('-') {
        return "JJ";
    }
    if lower.len() > 3 && lower.ends_with('s') && !lower.ends_with("ss") {
        return "NNS";
    }
    "NN"
}

/// The coarse class of a Penn tag.
fn coarse(token: &str, tag: &str) -> Pos {
    let lower = token.to_lowercase();
    match tag {
        "NN" | "NNS" => Pos::Noun,
        "NNP" | "NNPS" => Pos::Propn,
        "MD" => Pos::Aux,
        t if t.starts_with("VB") => {
            let auxiliary = [
                "be", "am", "is", "are", "was", "were", "been", "being", "have", "has", "had",
                "do", "does", "did",
            ];
            if auxiliary.contains(&lower.as_str()) {
                Pos::Aux
            } else {
                Pos::Verb
            }
        }
        "JJ" | "JJR" | "JJS" => Pos::Adj,
        "RB" | "RBR" | "RBS" | "WRB" => {
            if lower == "not" || lower == "n't" || lower == "never" {
                Pos::Part
            } else {
                Pos::Adv
            }
        }
        "IN" => {
            let subordinators = [
                "that", "because", "if", "while", "although", "though", "whether",
            ];
            if subordinators.contains(&lower.as_str()) {
                Pos::Cconj
            } else {
                Pos::Adp
            }
        }
        "DT" | "PDT" | "WDT" => Pos::Det,
        "PRP" | "PRP$" | "WP" | "WP$" | "EX" => Pos::Pron,
        "CD" => Pos::Num,
        "CC" => Pos::Cconj,
        "TO" | "POS" | "RP" => Pos::Part,
        "UH" => Pos::Intj,
        "SYM" | "." | "," | ":" | "(" | ")" | "``" | "''" | "#" | "$" | "\"" => Pos::Punct,
        _ if !token.chars().any(char::is_alphanumeric) => Pos::Punct,
        _ => Pos::X,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagger() -> PosTagger {
        PosTagger::from_lexicon(
            ";;; comment\nthe DT\nacting NN VBG\nwas VBD\nsuperb JJ\nvery RB\nto TO\n\
             run VB NN\nof IN\nand CC\n. .\nwill MD\nnot RB\n",
        )
    }

    #[test]
    fn tags_known_words_from_the_lexicon() {
        let tokens = ["The", "acting", "was", "very", "superb", "and", "not", "."];
        assert_eq!(
            tagger().tag(&tokens),
            vec![
                Pos::Det,
                Pos::Noun,
                Pos::Aux,
                Pos::Adv,
                Pos::Adj,
                Pos::Cconj,
                Pos::Part,
                Pos::Punct
            ]
        );
    }

    #[test]
    fn guesses_unknown_words_and_applies_context_rules() {
        let t = tagger();
        assert_eq!(
            t.penn_tags(&["the", "run", "will", "run", "Paris", "quickly", "3"]),
            vec!["DT", "NN", "MD", "VB", "NNP", "RB", "CD"]
        );
        assert_eq!(
            t.tag(&["wonderful", "filmmaking", "tediousness"]),
            vec![Pos::Adj, Pos::Verb, Pos::Noun]
        );
    }
}
