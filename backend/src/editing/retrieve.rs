//! CORE's first stage for a batch of items: pick the sentences to query with, retrieve their
//! counterfactual candidates (optionally re-ranked), and keep those usable as helpers: the
//! target label when the corpus knows it, never the item's own review or the query itself.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use burn::tensor::backend::Backend;
use flipside_shared::data::Input;

use super::keywords::{Lexicons, polar_sentences};
use super::records::Excerpt;
use crate::compute::Compute;
use crate::models::load_encoder;
use crate::retrieval::encoders::RetrieverEncoders;
use crate::retrieval::index::SentenceIndex;
use crate::retrieval::reranker::Reranker;
use flipside_shared::encoder::SentenceEncoder;

/// The item to edit.
#[derive(Debug, Clone)]
pub struct Item {
    pub id: String,
    /// The text to edit (the hypothesis for NLI).
    pub text: String,
    pub premise: Option<String>,
    pub label: String,
    pub target: String,
}

impl Item {
    /// `ITEM→TARGET`, the job's key in the output.
    pub fn key(&self) -> String {
        format!("{}→{}", self.id, self.target)
    }

    /// The classifier input for `text` in this item's place.
    pub fn input(&self, text: &str) -> Input {
        Input::with_premise(self.premise.as_deref(), text)
    }
}

/// How to retrieve.
#[derive(Debug, Clone)]
pub struct RetrievalSetup {
    pub corpus_dir: PathBuf,
    pub index_dir: PathBuf,
    pub encoders: RetrieverEncoders,
    /// A re-ranker directory and how many candidates it re-orders.
    pub reranker: Option<(PathBuf, usize)>,
    /// Excerpts kept per query.
    pub per_query: usize,
    /// Queries (polarity-bearing sentences) per item.
    pub max_queries: usize,
    /// Keep only sentences whose review has the target label (when the corpus has labels).
    pub target_label_only: bool,
}

/// What retrieval found for one item.
#[derive(Debug, Clone, Default)]
pub struct Retrieval {
    pub queries: Vec<String>,
    pub excerpts: Vec<Excerpt>,
    pub millis: f64,
}

/// A retriever ready for many calls: the index, its query encoder and the optional re-ranker.
pub struct Retriever<B: Backend> {
    compute: Compute<B>,
    setup: RetrievalSetup,
    pub index: SentenceIndex,
    encoder: SentenceEncoder<B>,
    reranker: Option<Reranker<B>>,
}

impl<B: Backend> Retriever<B> {
    /// Loads the index and the models `setup` names.
    pub fn open(compute: Compute<B>, setup: RetrievalSetup) -> Result<Self> {
        let index = SentenceIndex::open(&setup.corpus_dir, &setup.index_dir, &setup.encoders)?;
        let encoder = load_encoder::<B>(&setup.encoders.query_dir, &compute.device)?;
        let reranker = match &setup.reranker {
            Some((dir, _)) => Some(Reranker::load(&compute, dir)?),
            None => None,
        };
        Ok(Self {
            compute,
            setup,
            index,
            encoder,
            reranker,
        })
    }

    /// Retrieves helpers for every item (one batch through the encoder).
    pub fn retrieve(&self, items: &[Item], lexicons: &Lexicons) -> Result<Vec<Retrieval>> {
        self.retrieve_top(items, lexicons, self.setup.per_query)
    }

    /// [`Retriever::retrieve`] keeping `per_query` helpers per query sentence.
    pub fn retrieve_top(
        &self,
        items: &[Item],
        lexicons: &Lexicons,
        per_query: usize,
    ) -> Result<Vec<Retrieval>> {
        let started = Instant::now();
        let setup = &RetrievalSetup {
            per_query,
            ..self.setup.clone()
        };
        let queries: Vec<Vec<String>> = items
            .iter()
            .map(|item| match item.premise {
                Some(_) => vec![item.text.clone()],
                None => polar_sentences(&item.text, lexicons, setup.max_queries)
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
            })
            .collect();
        let inputs: Vec<(usize, Input)> = items
            .iter()
            .zip(&queries)
            .enumerate()
            .flat_map(|(i, (item, queries))| queries.iter().map(move |q| (i, item.input(q))))
            .collect();
        let vectors = self.encoder.embed_inputs(
            &inputs.iter().map(|(_, input)| input).collect::<Vec<_>>(),
            32,
            &self.compute.batches,
            &|_| {},
        )?;
        let rerank_depth = setup.reranker.as_ref().map_or(0, |(_, k)| *k);
        let depth = (setup.per_query * 20).max(rerank_depth * 2).max(50);
        let hits = self.index.search(&vectors, depth, depth);
        let mut results: Vec<Retrieval> = queries
            .iter()
            .map(|q| Retrieval {
                queries: q.clone(),
                ..Default::default()
            })
            .collect();
        let mut query_number = vec![0usize; items.len()];
        for ((i, input), hits) in inputs.iter().zip(hits) {
            let item = &items[*i];
            let query_text = input
                .texts()
                .last()
                .map(|t| t.to_lowercase())
                .unwrap_or_default();
            let mut usable: Vec<_> = hits
                .into_iter()
                .filter(|hit| hit.sentence.doc != item.id)
                .filter(|hit| hit.sentence.text.to_lowercase() != query_text)
                .filter(|hit| {
                    !setup.target_label_only
                        || hit
                            .sentence
                            .label
                            .as_ref()
                            .is_none_or(|l| *l == item.target)
                })
                .collect();
            if let (Some(reranker), Some((_, k))) = (&self.reranker, &setup.reranker) {
                usable = reranker.rerank(input, usable, *k)?;
            }
            let q = query_number[*i];
            query_number[*i] += 1;
            results[*i]
                .excerpts
                .extend(usable.into_iter().take(setup.per_query).map(|hit| Excerpt {
                    query: q,
                    id: hit.id,
                    text: hit.sentence.text.clone(),
                    score: hit.score,
                    rerank_score: hit.rerank_score,
                    label: hit.sentence.label.clone(),
                }));
        }
        let per_item = started.elapsed().as_secs_f64() * 1e3 / items.len().max(1) as f64;
        for result in &mut results {
            result.millis = per_item;
        }
        Ok(results)
    }
}
