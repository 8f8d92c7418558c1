//! Hard negatives from a corpus: the sentences nearest to a seed pair's query under an index
//! (in practice the untrained MiniLM one). They serve as the random-and-hard negatives of the
//! retrieval evaluation (CORE Appendix A) and, restricted to sentences of reviews with the
//! query's label, as the "paraphrase" hard negatives of CF-DPR and re-ranker training when the
//! seed pairs bring none.

use super::cfdpr::SeedPair;
use super::index::Retrieved;

/// The texts of `hits`, best first, that are neither the pair's text nor its counterfactual
/// (compared without case), keeping only sentences of reviews labelled `label` when it is
/// given, at most `n`.
pub fn corpus_neighbours(
    pair: &SeedPair,
    hits: &[Retrieved],
    label: Option<&str>,
    n: usize,
) -> Vec<String> {
    let own = [pair.text.to_lowercase(), pair.counterfactual.to_lowercase()];
    hits.iter()
        .filter(|hit| label.is_none_or(|label| hit.sentence.label.as_deref() == Some(label)))
        .map(|hit| &hit.sentence.text)
        .filter(|text| !own.contains(&text.to_lowercase()))
        .take(n)
        .cloned()
        .collect()
}

/// Gives every text pair without a paraphrase the nearest corpus sentence from a review with
/// the pair's label (`hits` are each pair's nearest sentences, in pair order). NLI pairs are
/// left alone: their corpora carry no labels. Returns how many pairs got one.
pub fn mine_paraphrases(pairs: &mut [SeedPair], hits: &[Vec<Retrieved>]) -> usize {
    let mut mined = 0;
    for (pair, hits) in pairs.iter_mut().zip(hits) {
        if pair.paraphrase.is_some() || pair.premise.is_some() {
            continue;
        }
        let label = pair.label.clone();
        if let Some(text) = corpus_neighbours(pair, hits, Some(&label), 1).pop() {
            pair.paraphrase = Some(text);
            mined += 1;
        }
    }
    mined
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::corpus::Sentence;

    fn sentence(text: &str, label: Option<&str>) -> Sentence {
        Sentence {
            text: text.into(),
            doc: "d".into(),
            pos: 0,
            label: label.map(str::to_string),
        }
    }

    fn hits(sentences: &[Sentence]) -> Vec<Retrieved<'_>> {
        sentences
            .iter()
            .enumerate()
            .map(|(id, sentence)| Retrieved {
                id,
                score: 1.0 - id as f32 / 10.0,
                source: "s",
                sentence,
                rerank_score: None,
            })
            .collect()
    }

    fn pair(text: &str, counterfactual: &str, paraphrase: Option<&str>) -> SeedPair {
        SeedPair {
            paraphrase: paraphrase.map(str::to_string),
            ..SeedPair::new(text, "positive", counterfactual)
        }
    }

    #[test]
    fn neighbours_skip_the_pair_itself_and_other_labels() {
        let sentences = [
            sentence("The acting was SUPERB.", Some("positive")),
            sentence("The acting was wooden.", Some("negative")),
            sentence("Terrible acting.", Some("negative")),
            sentence("The cast was brilliant.", Some("positive")),
            sentence("Great actors.", None),
            sentence("Fine performances.", Some("positive")),
        ];
        let hits = hits(&sentences);
        let pair = pair("The acting was superb.", "The acting was wooden.", None);
        assert_eq!(
            corpus_neighbours(&pair, &hits, None, 3),
            [
                "Terrible acting.",
                "The cast was brilliant.",
                "Great actors."
            ]
        );
        assert_eq!(
            corpus_neighbours(&pair, &hits, Some("positive"), 5),
            ["The cast was brilliant.", "Fine performances."]
        );
    }

    #[test]
    fn mining_fills_only_missing_paraphrases_of_text_pairs() {
        let sentences = [
            sentence("The acting was wooden.", Some("negative")),
            sentence("The cast was brilliant.", Some("positive")),
        ];
        let mut pairs = vec![
            pair("The acting was superb.", "The acting was wooden.", None),
            pair("Lovely music.", "Awful music.", Some("Beautiful score.")),
            SeedPair {
                premise: Some("A man plays.".into()),
                ..pair("He plays.", "He sleeps.", None)
            },
            pair("Superb.", "Dreadful.", None),
        ];
        let found = [
            hits(&sentences),
            hits(&sentences),
            hits(&sentences),
            hits(&sentences[..1]),
        ];
        assert_eq!(mine_paraphrases(&mut pairs, &found), 1);
        assert_eq!(
            pairs[0].paraphrase.as_deref(),
            Some("The cast was brilliant.")
        );
        assert_eq!(pairs[1].paraphrase.as_deref(), Some("Beautiful score."));
        assert_eq!(pairs[2].paraphrase, None);
        assert_eq!(pairs[3].paraphrase, None);
    }
}
