//! CF-DPR evaluation as in CORE Appendix A: each validation query's true counterfactual is
//! ranked among random and hard negatives; the score is top-1 accuracy (and mean reciprocal
//! rank). Hard negatives are the corpus sentences nearest to the query under the untrained
//! encoder (CORE used a SimCSE retriever for them, since paraphrasers cannot produce 30).

use std::path::Path;

use anyhow::Result;
use burn::tensor::backend::Backend;
use flipside_shared::data::{Input, unit_hash};
use rand::SeedableRng;
use rand::seq::index::sample;
use serde::Serialize;

use super::ann::dot;
use super::cfdpr::SeedPair;
use super::encoders::RetrieverEncoders;
use super::index::SentenceIndex;
use super::negatives::corpus_neighbours;
use super::reranker::{Reranker, reranked_order};
use crate::compute::Compute;
use crate::model_dirs::load_encoder;

/// One validation query and the candidates its counterfactual is ranked among.
#[derive(Debug, Clone, Serialize)]
pub struct RankingCase {
    pub query: Input,
    /// `candidates[0]` is the true counterfactual.
    pub candidates: Vec<String>,
}

/// Splits seed pairs into training and validation pairs by their review (the id before `#` or
/// `~`),
/// so that sentences of one review never end up on both sides. `fraction` of the reviews,
/// chosen by a hash of their id and `seed`, are for validation.
pub fn split_pairs(pairs: &[SeedPair], fraction: f64, seed: u64) -> (Vec<SeedPair>, Vec<SeedPair>) {
    pairs.iter().cloned().partition(|pair| {
        let id = pair.id.as_deref().unwrap_or(&pair.text);
        let review = id.split(['#', '~']).next().unwrap_or(id);
        unit_hash(seed, review) >= fraction
    })
}

/// Builds the ranking cases: per pair, its counterfactual, `random` random corpus sentences and
/// the `hard` corpus sentences nearest to the query in `index` (skipping the query and the
/// counterfactual themselves). `query_vectors` are the queries embedded by the index's encoder.
pub fn ranking_cases(
    pairs: &[SeedPair],
    index: &SentenceIndex,
    query_vectors: &[Vec<f32>],
    random: usize,
    hard: usize,
    seed: u64,
) -> Vec<RankingCase> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let neighbours = index.search(query_vectors, hard + 2, (hard + 2).max(64));
    pairs
        .iter()
        .zip(neighbours)
        .map(|(pair, hits)| {
            let mut candidates = vec![pair.counterfactual.clone()];
            candidates.extend(corpus_neighbours(pair, &hits, None, hard));
            let own = [pair.text.to_lowercase(), pair.counterfactual.to_lowercase()];
            let picks = sample(
                &mut rng,
                index.sentences.len(),
                random.min(index.sentences.len()),
            );
            candidates.extend(
                picks
                    .into_iter()
                    .map(|i| index.sentences[i].text.clone())
                    .filter(|t| !own.contains(&t.to_lowercase())),
            );
            RankingCase {
                query: pair.query(),
                candidates,
            }
        })
        .collect()
}

/// Top-1 accuracy and mean reciprocal rank of the true counterfactual.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct RankingScore {
    pub top1: f64,
    pub mrr: f64,
    pub queries: usize,
    pub candidates_per_query: f64,
}

/// The rank (0 = first) of candidate 0 under `scores` (one score per candidate; ties count
/// against it).
pub fn rank_of_first(scores: &[f32]) -> usize {
    scores[1..].iter().filter(|&&s| s >= scores[0]).count()
}

/// Scores ranks into top-1 accuracy and MRR.
pub fn ranking_score(ranks: &[usize], candidates: &[usize]) -> RankingScore {
    let n = ranks.len().max(1) as f64;
    RankingScore {
        top1: ranks.iter().filter(|&&r| r == 0).count() as f64 / n,
        mrr: ranks.iter().map(|&r| 1.0 / (r + 1) as f64).sum::<f64>() / n,
        queries: ranks.len(),
        candidates_per_query: candidates.iter().sum::<usize>() as f64 / n,
    }
}

/// Each case's candidate scores under a retriever: cosines of query and document embeddings.
pub fn retriever_scores<B: Backend>(
    compute: Compute<B>,
    encoders: &RetrieverEncoders,
    cases: &[RankingCase],
) -> Result<Vec<Vec<f32>>> {
    let query_encoder = load_encoder::<B>(&encoders.query_dir, &compute.device)?;
    let document_encoder = if encoders.document_dir == encoders.query_dir {
        None
    } else {
        Some(load_encoder::<B>(&encoders.document_dir, &compute.device)?)
    };
    let documents = document_encoder.as_ref().unwrap_or(&query_encoder);
    let queries: Vec<&Input> = cases.iter().map(|c| &c.query).collect();
    let query_vectors = query_encoder.embed_inputs(&queries, 32, &compute.batches, &|_| {})?;
    let mut scores = Vec::new();
    for (case, query) in cases.iter().zip(&query_vectors) {
        let texts: Vec<&str> = case.candidates.iter().map(String::as_str).collect();
        let vectors = documents.embed_all(&texts, 32, &compute.batches, &|_| {})?;
        scores.push(vectors.iter().map(|v| dot(query, v)).collect());
    }
    Ok(scores)
}

/// The rank of each case's counterfactual under `scores` (see [`rank_of_first`]).
pub fn ranks(scores: &[Vec<f32>]) -> Vec<usize> {
    scores.iter().map(|s| rank_of_first(s)).collect()
}

/// The rank of each case's counterfactual when the re-ranker in `reranker_dir` re-orders the
/// top `k` candidates under the first-stage `scores`.
pub fn reranked_ranks<B: Backend>(
    compute: Compute<B>,
    reranker_dir: &Path,
    cases: &[RankingCase],
    scores: &[Vec<f32>],
    k: usize,
) -> Result<Vec<usize>> {
    let reranker = Reranker::load(&compute, reranker_dir)?;
    cases
        .iter()
        .zip(scores)
        .map(|(case, scores)| {
            let order = reranked_order(scores, k, |top| {
                let texts: Vec<&str> = top.iter().map(|&i| case.candidates[i].as_str()).collect();
                reranker.scores(&case.query, &texts)
            })?;
            Ok(order.iter().position(|&i| i == 0).expect("a permutation"))
        })
        .collect()
}

/// The candidate count of each case.
pub fn candidate_counts(cases: &[RankingCase]) -> Vec<usize> {
    cases.iter().map(|c| c.candidates.len()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_and_scores() {
        assert_eq!(rank_of_first(&[0.9, 0.1, 0.5]), 0);
        assert_eq!(rank_of_first(&[0.5, 0.9, 0.5]), 2);
        let score = ranking_score(&[0, 1, 3], &[61, 61, 58]);
        assert!((score.top1 - 1.0 / 3.0).abs() < 1e-12);
        assert!((score.mrr - (1.0 + 0.5 + 0.25) / 3.0).abs() < 1e-12);
        assert_eq!(score.candidates_per_query, 60.0);
    }

    #[test]
    fn validation_pairs_keep_reviews_together() {
        let pair = |id: &str| SeedPair {
            id: Some(id.into()),
            text: id.into(),
            premise: None,
            label: "positive".into(),
            counterfactual: "x".into(),
            paraphrase: None,
        };
        let pairs: Vec<SeedPair> = (0..40)
            .flat_map(|r| (0..3).map(move |s| pair(&format!("r{r}#{s}"))))
            .collect();
        let (train, validation) = split_pairs(&pairs, 0.25, 1);
        assert_eq!(train.len() + validation.len(), 120);
        assert!(!validation.is_empty() && !train.is_empty());
        let review = |p: &SeedPair| p.id.clone().unwrap().split('#').next().unwrap().to_string();
        for v in &validation {
            assert!(train.iter().all(|t| review(t) != review(v)));
        }
    }
}
