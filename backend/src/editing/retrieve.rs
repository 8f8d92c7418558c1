//! CORE's first stage: pick an item's sentences to query with, retrieve their counterfactual
//! candidates (optionally re-ranked), and keep those usable as helpers: the target label when
//! the corpus knows it, never the item's own review or the query itself.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use burn::tensor::backend::Backend;
use flipside_shared::data::Input;
use flipside_shared::models::encoder::SentenceEncoder;
use flipside_shared::records::{Excerpt, Retrieval};

use super::keywords::{Lexicons, polar_sentences};
use crate::compute::Compute;
use crate::model_dirs::load_encoder;
use crate::pipeline::Item;
use crate::retrieval::encoders::RetrieverEncoders;
use crate::retrieval::index::SentenceIndex;
use crate::retrieval::reranker::Reranker;

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

/// A loaded retriever, whatever backend its encoders run on.
pub trait Retrieve: Send + Sync {
    /// Helpers for `item`: up to `per_query` excerpts for each of its query sentences (the
    /// retriever's default when `None`).
    fn retrieve(&self, item: &Item, per_query: Option<usize>) -> Result<Retrieval>;

    /// Sentences in the index.
    fn sentences(&self) -> usize;
}

impl<B: Backend> Retrieve for Mutex<Retriever<B>> {
    fn retrieve(&self, item: &Item, per_query: Option<usize>) -> Result<Retrieval> {
        let retriever = self.lock().unwrap();
        retriever.retrieve(item, per_query.unwrap_or(retriever.setup.per_query))
    }

    fn sentences(&self) -> usize {
        self.lock().unwrap().index.sentences.len()
    }
}

/// A retriever ready for many calls: the index, its query encoder and the optional re-ranker.
pub struct Retriever<B: Backend> {
    compute: Compute<B>,
    setup: RetrievalSetup,
    pub index: SentenceIndex,
    encoder: SentenceEncoder<B>,
    reranker: Option<Reranker<B>>,
    /// Opinion words, to pick the query sentences of long texts.
    lexicons: Arc<Lexicons>,
}

impl<B: Backend> Retriever<B> {
    /// Loads the index and the models `setup` names.
    pub fn open(
        compute: Compute<B>,
        setup: RetrievalSetup,
        lexicons: Arc<Lexicons>,
    ) -> Result<Self> {
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
            lexicons,
        })
    }

    /// Helpers for `item`, `per_query` per query sentence. The item's queries are encoded as
    /// one batch of their own, so its helpers do not depend on what else is being retrieved.
    pub fn retrieve(&self, item: &Item, per_query: usize) -> Result<Retrieval> {
        let setup = &RetrievalSetup {
            per_query,
            ..self.setup.clone()
        };
        let queries: Vec<String> = match item.premise {
            Some(_) => vec![item.text.clone()],
            None => polar_sentences(&item.text, &self.lexicons, setup.max_queries)
                .into_iter()
                .map(str::to_string)
                .collect(),
        };
        let inputs: Vec<Input> = queries.iter().map(|q| item.input(q)).collect();
        let vectors = self.encoder.embed_inputs(
            &inputs.iter().collect::<Vec<_>>(),
            32,
            &self.compute.batches,
            &|_| {},
        )?;
        let rerank_depth = setup.reranker.as_ref().map_or(0, |(_, k)| *k);
        let depth = (setup.per_query * 20).max(rerank_depth * 2).max(50);
        let hits = self.index.search(&vectors, depth, depth);
        let mut retrieval = Retrieval {
            queries,
            ..Retrieval::default()
        };
        for (q, (input, hits)) in inputs.iter().zip(hits).enumerate() {
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
            retrieval
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
        Ok(retrieval)
    }
}
