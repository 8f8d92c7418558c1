//! CF-DPR training (CORE §3.1, Appendix A): a query and a document encoder, both initialised
//! from MiniLM, trained so that a text's nearest documents are its label-flipped
//! counterfactuals. The counterfactual is the positive; the negatives are the other items'
//! counterfactuals in the batch and, per item, the hard negatives CORE used: a paraphrase of
//! the query (when the seed pairs carry one) and the query text itself.

use std::path::Path;

use anyhow::{Context, Result, bail};
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use flipside_shared::data::{Input, stable_hash};
use flipside_shared::models::biencoder::{BiEncoder, contrastive_loss};
use flipside_shared::models::checkpoint::save_safetensors;
use flipside_shared::sentences::split_sentences;
use flipside_shared::tokenize::TextTokenizer;
use serde::{Deserialize, Serialize};

use super::encoders::{RETRIEVER_FILE, RetrieverLayout};
use crate::compute::Compute;
use crate::model_dirs::{BertFiles, write_atomic};
use crate::training::classifier::{
    BatchOrder, Objective, TrainConfig, TrainOutcome, TrainRecord, run_training,
};

/// The seed pairs printed in the CORE and LASS papers (CORE Table 11; LASS Appendix D and
/// Table 5): human-written or human-checked minimal sentiment flips of reviews.
const PRINTED_PAIRS: &str = include_str!("../../assets/printed_pairs.jsonl");

/// Hand-written minimal positive → negative fixes of movie-review sentences, for
/// `pairs optimise-prompt` (LASS's Algorithm 1 inserts such examples into its prompt).
const FIXED_EXAMPLES: &str = include_str!("../../assets/fixed_examples.jsonl");

/// One seed counterfactual: a text, its label, and a minimal edit of it with another label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedPair {
    #[serde(default)]
    pub id: Option<String>,
    /// The original text (for NLI, the hypothesis).
    pub text: String,
    /// For NLI: the premise; the query is then premise `[SEP]` text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub premise: Option<String>,
    pub label: String,
    /// The label-flipped edit of `text`.
    pub counterfactual: String,
    /// A paraphrase of `text` (same label): a hard negative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paraphrase: Option<String>,
}

impl SeedPair {
    /// A pair of a sentiment text (no id, premise or paraphrase).
    pub fn new(text: &str, label: &str, counterfactual: &str) -> Self {
        Self {
            id: None,
            text: text.into(),
            premise: None,
            label: label.into(),
            counterfactual: counterfactual.into(),
            paraphrase: None,
        }
    }
}

/// Reads seed pairs: `printed` (the papers' pairs), `fixed` (Flipside's hand-fixed movie
/// review sentences) or a JSON-lines file of [`SeedPair`]s.
pub fn read_pairs(spec: &str) -> Result<Vec<SeedPair>> {
    let (text, origin) = match spec {
        "printed" => (PRINTED_PAIRS.to_string(), "the printed pairs".to_string()),
        "fixed" => (FIXED_EXAMPLES.to_string(), "the fixed examples".to_string()),
        _ => (
            std::fs::read_to_string(spec).with_context(|| format!("cannot read {spec}"))?,
            spec.to_string(),
        ),
    };
    let mut pairs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut pair: SeedPair = serde_json::from_str(line).with_context(|| {
            format!(
                "{origin}:{}: expected {{\"text\", \"label\", \"counterfactual\"}}",
                i + 1
            )
        })?;
        if pair.text.trim().is_empty() || pair.counterfactual.trim().is_empty() {
            bail!("{origin}:{}: empty text or counterfactual", i + 1);
        }
        pair.id.get_or_insert_with(|| format!("line-{}", i + 1));
        pairs.push(pair);
    }
    if pairs.is_empty() {
        bail!("{origin} holds no seed pairs");
    }
    Ok(pairs)
}

/// The file in a trained model's directory listing the pairs it was trained on, mined
/// paraphrases included.
pub const TRAINING_PAIRS_FILE: &str = "training-pairs.jsonl";

/// Writes `pairs` as JSON lines to `dir/`[`TRAINING_PAIRS_FILE`] (readable by [`read_pairs`]).
pub fn write_training_pairs(dir: &Path, pairs: &[SeedPair]) -> Result<()> {
    let mut lines = String::new();
    for pair in pairs {
        lines += &serde_json::to_string(pair)?;
        lines.push('\n');
    }
    write_atomic(&dir.join(TRAINING_PAIRS_FILE), lines.as_bytes())
}

/// Adds the reverse of every text pair: if `b` is a label-flipping minimal edit of `a`, `a` is
/// one of `b` too. The printed pairs are mostly positive → negative; without the reverses a
/// retriever would learn to flip in one direction only. A reverse's label is the other label
/// when the pairs have exactly two, otherwise `not LABEL`. Reverses keep the pair's id with a
/// `~` suffix (so a review stays on one side of a train/validation split) and carry no
/// paraphrase.
pub fn with_reverses(pairs: Vec<SeedPair>) -> Vec<SeedPair> {
    let mut labels: Vec<&str> = pairs.iter().map(|p| p.label.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    let flipped = |label: &str| match labels[..] {
        [a, b] if label == a => b.to_string(),
        [a, b] if label == b => a.to_string(),
        _ => format!("not {label}"),
    };
    let reverses: Vec<SeedPair> = pairs
        .iter()
        .filter(|p| p.premise.is_none())
        .map(|p| SeedPair {
            id: p.id.as_ref().map(|id| format!("{id}~")),
            text: p.counterfactual.clone(),
            premise: None,
            label: flipped(&p.label),
            counterfactual: p.text.clone(),
            paraphrase: None,
        })
        .collect();
    pairs.into_iter().chain(reverses).collect()
}

/// Cuts review pairs into sentence pairs, as CORE indexes and queries sentences: when a text
/// and its counterfactual have the same number of sentences, each sentence that the edit
/// changed becomes a pair of its own; otherwise the pair stays whole. NLI pairs stay whole.
pub fn sentence_pairs(pairs: &[SeedPair]) -> Vec<SeedPair> {
    let mut out = Vec::new();
    for pair in pairs {
        let (a, b) = (
            split_sentences(&pair.text),
            split_sentences(&pair.counterfactual),
        );
        if pair.premise.is_some() || a.len() != b.len() || a.len() < 2 {
            out.push(pair.clone());
            continue;
        }
        let id = pair.id.clone().unwrap_or_default();
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            if x.to_lowercase() != y.to_lowercase() {
                out.push(SeedPair {
                    id: Some(format!("{id}#{i}")),
                    text: x.to_string(),
                    premise: None,
                    label: pair.label.clone(),
                    counterfactual: y.to_string(),
                    paraphrase: None,
                });
            }
        }
    }
    out
}

impl SeedPair {
    /// What the query encoder reads.
    pub fn query(&self) -> Input {
        Input::with_premise(self.premise.as_deref(), &self.text)
    }

    /// The hard negatives, as documents: the paraphrase, and the text itself (unless the two
    /// sides share weights, where the text would be the query's own embedding).
    pub fn hard_negatives(&self, shared: bool) -> Vec<&str> {
        let mut negatives: Vec<&str> = self.paraphrase.iter().map(String::as_str).collect();
        if !shared || self.premise.is_some() {
            negatives.push(&self.text);
        }
        negatives
    }
}

/// A fingerprint of seed pairs, to tie checkpoints to their data.
fn fingerprint(pairs: &[SeedPair]) -> String {
    let mut h = 0u64;
    for pair in pairs {
        h = stable_hash(h, &serde_json::to_string(pair).expect("serialisable"));
    }
    format!("{h:016x}-{}", pairs.len())
}

/// How to train a retriever.
pub struct RetrieverRun<'a> {
    pub pairs: &'a [SeedPair],
    /// What the pairs are called in the training record.
    pub pairs_name: &'a str,
    pub encoder_dir: &'a Path,
    pub out: &'a Path,
    pub config: TrainConfig,
    /// One encoder for queries and documents instead of two.
    pub shared: bool,
    /// Inverse temperature of the contrastive loss.
    pub scale: f32,
    pub pause_after: Option<usize>,
}

/// Trains CF-DPR and saves it to `run.out` as a retriever directory: `retriever.json` and one
/// BERT directory per encoder (`query/`, `document/`), each loadable as a sentence encoder.
pub fn train_retriever<B: Backend>(
    compute: Compute<B>,
    run: &RetrieverRun,
) -> Result<TrainOutcome> {
    if run.pairs.len() < 2 {
        bail!(
            "CF-DPR needs at least 2 seed pairs (in-batch negatives), got {}",
            run.pairs.len()
        );
    }
    if run.config.batch_size < 2 {
        bail!("--batch-size must be at least 2: the other items of a batch are the negatives");
    }
    if run.config.batch_order != BatchOrder::Shuffled {
        bail!(
            "--batch-order by-length is for classifiers and re-rankers: CF-DPR's negatives are \
             the other pairs of a batch, which stay shuffled"
        );
    }
    let files = BertFiles::read(run.encoder_dir)?;
    let objective = DprObjective {
        pairs: run.pairs,
        tokenizer: files.tokenizer(run.config.max_len)?,
        files: &files,
        shared: run.shared,
        scale: run.scale,
    };
    // The data fingerprint also covers the model options, so that a checkpoint is never resumed
    // under others.
    let encoders = if run.shared { "shared" } else { "two" };
    let fresh = TrainRecord::new(
        &run.config,
        run.encoder_dir,
        run.pairs_name,
        format!("{}-{encoders}-scale{}", fingerprint(run.pairs), run.scale),
        Vec::new(),
        run.pairs.len(),
        std::any::type_name::<B>(),
    );
    run_training::<Autodiff<B>, _>(
        &objective,
        &compute,
        fresh,
        run.out,
        RETRIEVER_FILE,
        run.pause_after,
        |model| save_retriever(run.out, &model.valid(), &files),
    )
}

/// Writes `retriever.json` and the encoder directories.
fn save_retriever<B: Backend>(out: &Path, model: &BiEncoder<B>, files: &BertFiles) -> Result<()> {
    let write_encoder =
        |name: &str, bert: &flipside_shared::models::bert::BertModel<B>| -> Result<()> {
            let dir = out.join(name);
            std::fs::create_dir_all(&dir)?;
            for file in ["config.json", "tokenizer.json", "sentence_bert_config.json"] {
                let source = files.dir.join(file);
                if source.is_file() {
                    std::fs::copy(&source, dir.join(file))
                        .with_context(|| format!("cannot copy {}", source.display()))?;
                }
            }
            write_atomic(&dir.join("model.safetensors"), &save_safetensors(bert)?)
        };
    write_encoder("query", &model.query)?;
    let document = match &model.document {
        Some(document) => {
            write_encoder("document", document)?;
            "document"
        }
        None => "query",
    };
    let layout = RetrieverLayout {
        query: "query".into(),
        document: document.into(),
    };
    write_atomic(
        &out.join(RETRIEVER_FILE),
        &serde_json::to_vec_pretty(&layout)?,
    )
}

/// CORE's Eq. 1 over seed pairs.
struct DprObjective<'a> {
    pairs: &'a [SeedPair],
    tokenizer: TextTokenizer,
    files: &'a BertFiles,
    shared: bool,
    scale: f32,
}

impl<B: AutodiffBackend> Objective<B> for DprObjective<'_> {
    type Model = BiEncoder<B>;

    fn items(&self) -> usize {
        self.pairs.len()
    }

    fn init(&self, device: &B::Device) -> Result<Self::Model> {
        Ok(BiEncoder {
            query: self.files.load_model(device)?,
            document: if self.shared {
                None
            } else {
                Some(self.files.load_model(device)?)
            },
        })
    }

    fn skeleton(&self, device: &B::Device) -> Self::Model {
        BiEncoder {
            query: self.files.config.init(device),
            document: (!self.shared).then(|| self.files.config.init(device)),
        }
    }

    fn loss(
        &self,
        model: &Self::Model,
        batch: &[usize],
        _step: usize,
        device: &B::Device,
    ) -> Result<Tensor<B, 1>> {
        let pairs: Vec<&SeedPair> = batch.iter().map(|&i| &self.pairs[i]).collect();
        let queries: Vec<Input> = pairs.iter().map(|p| p.query()).collect();
        let mut documents: Vec<&str> = pairs.iter().map(|p| p.counterfactual.as_str()).collect();
        documents.extend(pairs.iter().flat_map(|p| p.hard_negatives(self.shared)));
        let query_input = self
            .tokenizer
            .encode_inputs(&queries.iter().collect::<Vec<_>>())?
            .to_input::<B>(device);
        let document_input = self
            .tokenizer
            .encode_texts(&documents)?
            .to_input::<B>(device);
        Ok(contrastive_loss(
            model.embed_queries(&query_input),
            model.embed_documents(&document_input),
            self.scale,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_pairs_read_and_split_into_changed_sentences() {
        let pairs = read_pairs("printed").unwrap();
        assert_eq!(pairs.len(), 22);
        assert!(
            pairs
                .iter()
                .all(|p| p.label == "positive" || p.label == "negative")
        );
        let sentences = sentence_pairs(&pairs);
        assert!(sentences.len() > pairs.len(), "{}", sentences.len());
        // "The tank fit very well…" → "The tank didn't fit well at all…": three sentences, all
        // edited, become three pairs.
        let tank: Vec<&SeedPair> = sentences
            .iter()
            .filter(|p| {
                p.id.as_deref()
                    .is_some_and(|id| id.starts_with("printed-11#"))
            })
            .collect();
        assert_eq!(tank.len(), 3);
        assert_eq!(
            tank[0].counterfactual,
            "The tank didn't fit well at all and it was quite uncomfortable to wear."
        );
        // An unchanged sentence ("Technical skill isn't enough.") is not a pair.
        assert!(
            sentences
                .iter()
                .all(|p| p.text != "Technical skill isn't enough.")
        );
    }

    #[test]
    fn reverses_swap_text_and_counterfactual_and_keep_the_review_id() {
        let pairs = with_reverses(read_pairs("printed").unwrap());
        assert_eq!(pairs.len(), 44);
        let reverse = &pairs[22];
        assert_eq!(reverse.id.as_deref(), Some("printed-0~"));
        assert_eq!(reverse.text, pairs[0].counterfactual);
        assert_eq!(reverse.counterfactual, pairs[0].text);
        assert_eq!(pairs[0].label, "negative");
        assert_eq!(reverse.label, "positive");
        let mut three = read_pairs("printed").unwrap();
        three[1].label = "neutral".into();
        assert_eq!(with_reverses(three)[22].label, "not negative");
    }

    #[test]
    fn hard_negatives_skip_the_query_itself_when_weights_are_shared() {
        let pair = SeedPair {
            id: None,
            text: "good".into(),
            premise: None,
            label: "positive".into(),
            counterfactual: "bad".into(),
            paraphrase: Some("fine".into()),
        };
        assert_eq!(pair.hard_negatives(false), vec!["fine", "good"]);
        assert_eq!(pair.hard_negatives(true), vec!["fine"]);
    }

    #[test]
    fn training_pairs_are_written_readably() {
        let dir = tempfile::tempdir().unwrap();
        let mut pairs = with_reverses(read_pairs("printed").unwrap());
        pairs[0].paraphrase = Some("A mined paraphrase.".into());
        write_training_pairs(dir.path(), &pairs).unwrap();
        let path = dir.path().join(TRAINING_PAIRS_FILE);
        assert_eq!(read_pairs(path.to_str().unwrap()).unwrap(), pairs);
    }

    #[test]
    fn malformed_pair_files_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pairs.jsonl");
        std::fs::write(
            &path,
            "{\"text\":\"a\",\"label\":\"x\",\"counterfactual\":\"b\"}\n{\"text\":\"a\"}\n",
        )
        .unwrap();
        let error = read_pairs(path.to_str().unwrap()).unwrap_err();
        assert!(format!("{error:#}").contains(":2:"), "{error:#}");
    }
}
