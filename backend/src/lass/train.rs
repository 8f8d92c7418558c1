//! Training the Dis-AE with the shared training loop (resumable, seeded): on unpaired labelled
//! texts (reconstruction and the sentiment terms: the corpus-first stage, beyond the paper), or
//! on pairs of the same content with opposite sentiment (all of LASS's Eq. 7). [`train_lass`]
//! runs the whole of `flipside lass train`: the vocabulary, then each stage that has data.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use flipside_shared::data::{stable_hash, stable_hash_bytes};
use flipside_shared::models::dis_ae::loss::{Annealing, LabelledBatch};
use flipside_shared::models::dis_ae::reproduce::MAX_TOKENS;
use flipside_shared::models::dis_ae::vocabulary::Vocabulary;
use flipside_shared::models::dis_ae::{ContentCopy, DisAe, DisAeConfig, MASK_ID, PaddedIds};

use super::model::{
    CONFIG_FILE, LassReport, REPORT_FILE, SentimentParents, VOCABULARY_FILE, WEIGHTS_FILE,
    read_config,
};
use super::vocabulary::train_vocabulary;
use crate::compute::Compute;
use crate::editing::keywords::Lexicons;
use crate::home::Home;
use crate::model_dirs::write_atomic;
use crate::training::classifier::{
    Objective, TrainConfig, TrainOutcome, TrainRecord, run_training,
};

/// A text as vocabulary ids (`[<s>, …, </s>]`) and its sentiment class.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedText {
    pub ids: Vec<u32>,
    pub class: usize,
    /// For a copying Dis-AE: the ids with its opinion words masked.
    pub content: Option<Vec<u32>>,
}

impl EncodedText {
    /// `text` of class `class` encoded for `config`: with its copy whose `masked_words` are
    /// masked when the Dis-AE copies.
    pub fn new(
        vocabulary: &Vocabulary,
        config: &DisAeConfig,
        masked_words: &HashSet<String>,
        text: &str,
        class: usize,
    ) -> Result<Self> {
        let (ids, content) = vocabulary.encode_masking(text, masked_words, MASK_ID)?;
        Ok(Self {
            ids,
            class,
            content: config.copy.is_some().then_some(content),
        })
    }
}

/// What a run trains on.
#[derive(Debug, Clone)]
pub enum DisAeData {
    /// Unpaired texts: `L_rec + α L_emo`.
    Texts(Vec<EncodedText>),
    /// Pairs of the same content and different classes: `L_rec + α L_emo + β L_dis + γ L_cf`.
    Pairs(Vec<(EncodedText, EncodedText)>),
}

/// The Dis-AE's training objective.
pub struct DisAeObjective {
    pub config: DisAeConfig,
    pub data: DisAeData,
    pub annealing: Annealing,
    /// Weights to start from (`model.safetensors` of an earlier stage); fresh ones otherwise.
    pub base: Option<Vec<u8>>,
}

impl DisAeObjective {
    /// Checks that every class index names a label of the model and every id is in its
    /// vocabulary.
    pub fn check(&self) -> Result<()> {
        let texts: Vec<&EncodedText> = match &self.data {
            DisAeData::Texts(texts) => texts.iter().collect(),
            DisAeData::Pairs(pairs) => pairs.iter().flat_map(|(a, b)| [a, b]).collect(),
        };
        if texts.is_empty() {
            bail!("no training data");
        }
        for text in texts {
            if text.class >= self.config.labels.len() {
                bail!(
                    "class {} but the model has {} labels",
                    text.class,
                    self.config.labels.len()
                );
            }
            if text.ids.len() < 2
                || text
                    .ids
                    .iter()
                    .any(|&id| id as usize >= self.config.vocab_size)
            {
                bail!(
                    "a text's ids are not [<s>, …, </s>] in a vocabulary of {}",
                    self.config.vocab_size
                );
            }
        }
        Ok(())
    }

    fn batch<B: AutodiffBackend>(
        &self,
        texts: Vec<&EncodedText>,
        device: &B::Device,
    ) -> LabelledBatch<B> {
        let rows: Vec<Vec<u32>> = texts.iter().map(|t| t.ids.clone()).collect();
        let classes: Vec<i64> = texts.iter().map(|t| t.class as i64).collect();
        let n = classes.len();
        let pad = self.config.pad_id;
        let content: Option<Vec<Vec<u32>>> = texts.iter().map(|t| t.content.clone()).collect();
        LabelledBatch {
            tokens: match content {
                Some(content) => PaddedIds::with_content(&rows, &content, pad, device),
                None => PaddedIds::new(&rows, pad, device),
            },
            classes: Tensor::<B, 1, Int>::from_data(TensorData::new(classes, [n]), device),
        }
    }
}

impl<B: AutodiffBackend> Objective<B> for DisAeObjective {
    type Model = DisAe<B>;

    fn items(&self) -> usize {
        match &self.data {
            DisAeData::Texts(texts) => texts.len(),
            DisAeData::Pairs(pairs) => pairs.len(),
        }
    }

    fn init(&self, device: &B::Device) -> Result<Self::Model> {
        Ok(match &self.base {
            Some(weights) => self.config.load(weights.clone(), device)?,
            None => self.config.init(device),
        })
    }

    fn skeleton(&self, device: &B::Device) -> Self::Model {
        self.config.init(device)
    }

    /// Every term is a mean over texts or pairs (`L_r` a constant of the model); a
    /// variational Dis-AE draws its latents at random.
    fn item_mean(&self) -> bool {
        !self.config.variational
    }

    fn lengths(&self) -> Result<Option<Vec<usize>>> {
        Ok(Some(match &self.data {
            DisAeData::Texts(texts) => texts.iter().map(|t| t.ids.len()).collect(),
            DisAeData::Pairs(pairs) => pairs
                .iter()
                .map(|(a, b)| a.ids.len().max(b.ids.len()))
                .collect(),
        }))
    }

    fn loss(
        &self,
        model: &Self::Model,
        batch: &[usize],
        step: usize,
        device: &B::Device,
    ) -> Result<Tensor<B, 1>> {
        let weights = self.annealing.weights(step);
        let losses = match &self.data {
            DisAeData::Texts(texts) => {
                model.text_losses(&self.batch(batch.iter().map(|&i| &texts[i]).collect(), device))
            }
            DisAeData::Pairs(pairs) => {
                let a = self.batch(batch.iter().map(|&i| &pairs[i].0).collect(), device);
                let b = self.batch(batch.iter().map(|&i| &pairs[i].1).collect(), device);
                model.pair_losses(&a, &b)
            }
        };
        Ok(losses.total(weights))
    }
}

/// `lass train`'s model sizes: smaller than Coop's (256/256/256/512) so that it trains on 2
/// CPU cores and the browser downloads it quickly.
pub fn default_model() -> DisAeConfig {
    DisAeConfig {
        d_embed: 128,
        d_encoder: 256,
        d_latent: 128,
        d_decoder: 256,
        ..DisAeConfig::new(0, Vec::new(), [0, 1, 2])
    }
}

/// The copying decoder masking the opinion words of Liu and Hu's lexicons (the `lexicons`
/// asset) but [`PLOT_WORDS`].
pub fn opinion_masking(home: &Home) -> Result<ContentCopy> {
    let lexicons = Lexicons::load(home)?;
    let mut masked_words: Vec<String> = lexicons
        .positive
        .union(&lexicons.negative)
        .filter(|word| !PLOT_WORDS.contains(&word.as_str()))
        .cloned()
        .collect();
    masked_words.sort();
    Ok(ContentCopy { masked_words })
}

/// Words of Liu and Hu's lexicons that reviews use mostly for what a film is about or as
/// function words ("like a dream", "as well", "the right to"), not to judge it: masked, the
/// label vector would replace them ("a murder mystery" → "a brilliant mystery"), so the
/// content memory keeps them. Chosen among the lexicon's most frequent words in the movie
/// corpus whose share of positive and negative reviews is even.
pub const PLOT_WORDS: &[&str] = &[
    "like", "likes", "well", "right", "work", "works", "worked", "enough", "plot", "death", "dead",
    "die", "died", "dies", "dying", "kill", "killed", "killer", "killing", "murder", "crime",
    "evil", "hell", "prison", "suicide", "revenge", "lost", "loss", "lead", "leads", "leading",
    "mystery", "hero", "heroine", "villains", "fans", "fall", "falls", "falling", "break",
    "breaks", "breaking", "twist", "fear", "cold", "hot", "dark", "desert", "gold", "top", "fast",
    "free", "blind", "danger", "steal", "win", "lies", "luck", "faith", "trust", "ready",
    "willing", "unknown", "grace", "parody", "blow", "modern", "famous", "lover", "zombie",
    "monster", "bomb", "attack", "scream",
];

/// The corpus-first stage's optimiser (Coop: Adam lr 1e-3, gradients clipped at 5).
pub fn corpus_train() -> TrainConfig {
    TrainConfig {
        epochs: 1,
        batch_size: 32,
        lr: 1e-3,
        weight_decay: 0.0,
        warmup: 0.01,
        max_grad_norm: 5.0,
        max_len: MAX_TOKENS,
        seed: 42,
        checkpoint_every: 200,
        ..TrainConfig::default()
    }
}

/// The pairs stage's optimiser (LASS: Adam, lr 5e-4, linear schedule; our pairs are few, so
/// more epochs).
pub fn pair_train() -> TrainConfig {
    TrainConfig {
        epochs: 20,
        lr: 5e-4,
        ..corpus_train()
    }
}

/// A labelled text and its label-flipped counterpart (from `pairs make`).
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledPair {
    pub text: String,
    pub label: String,
    pub counterfactual: String,
    pub counterfactual_label: String,
}

/// What `lass train` trains.
pub struct LassTrainRun {
    /// Unpaired `(text, label)`s for the corpus-first stage (none: the stage is skipped).
    pub texts: Vec<(String, String)>,
    /// Pairs for the pairs stage (none: the corpus stage's model is the result).
    pub pairs: Vec<LabelledPair>,
    /// The model's sizes; its vocabulary size, labels and special ids are filled in here.
    pub model: DisAeConfig,
    /// Most ids of the subword vocabulary learnt from the texts and pairs.
    pub vocabulary_size: usize,
    pub corpus_train: TrainConfig,
    pub pair_train: TrainConfig,
    pub annealing: Annealing,
    /// Texts of each label kept as sentiment parents in `lass.json`.
    pub sentiment_parents: usize,
    pub out: PathBuf,
    /// Stop each stage after this many steps; running the same command again resumes.
    pub pause_after: Option<usize>,
    /// A trained Dis-AE to start from: its vocabulary, sizes and weights (then `model` and
    /// `vocabulary_size` are unused, and there is no corpus stage: only pairs).
    pub start: Option<PathBuf>,
}

/// Where a `lass train` run stands.
pub struct LassOutcome {
    /// The stage that ran last (`corpus` or `pairs`) and its outcome.
    pub stage: &'static str,
    pub outcome: TrainOutcome,
    /// What the finished model saw (none while paused).
    pub report: Option<LassReport>,
    /// Texts and pair sides left out for having more pieces than the model reads.
    pub too_long: usize,
}

/// The corpus-first stage's directory inside a run's output.
const CORPUS_STAGE: &str = "corpus-stage";

/// Trains (or resumes) a Dis-AE into `run.out`: a vocabulary learnt from every text, the
/// corpus-first stage on `run.texts` (into `out/corpus-stage` when pairs follow), then the
/// pairs stage from its weights.
pub fn train_lass<B: Backend>(compute: Compute<B>, run: &LassTrainRun) -> Result<LassOutcome> {
    let labels = labels_of(run)?;
    std::fs::create_dir_all(&run.out)
        .with_context(|| format!("cannot create {}", run.out.display()))?;
    let start = match &run.start {
        Some(dir) => Some(StartingModel::read(dir, &labels, run)?),
        None => None,
    };
    let vocabulary_json = match &start {
        Some(start) => start.vocabulary_json.clone(),
        None => vocabulary_for(run)?,
    };
    let vocabulary = Vocabulary::from_json(&vocabulary_json, MAX_TOKENS)?;
    let mut config = match &start {
        Some(start) => start.config.clone(),
        None => run.model.clone(),
    };
    config.vocab_size = vocabulary.size();
    config.labels = labels.clone();
    let tokens = vocabulary.special_tokens();
    (config.pad_id, config.bos_id, config.eos_id) = (tokens.pad, tokens.start, tokens.end);

    let class = |label: &str| {
        labels
            .iter()
            .position(|l| l == label)
            .expect("a known label")
    };
    let mut too_long = 0;
    let masked_words = config.masked_words();
    let mut encode = |text: &str, label: &str| -> Result<Option<EncodedText>> {
        let encoded = EncodedText::new(&vocabulary, &config, &masked_words, text, class(label))?;
        if encoded.ids.len() >= MAX_TOKENS {
            too_long += 1;
            return Ok(None);
        }
        Ok(Some(encoded))
    };
    let mut texts = Vec::new();
    for (text, label) in &run.texts {
        texts.extend(encode(text, label)?);
    }
    let mut pairs = Vec::new();
    for pair in &run.pairs {
        if let (Some(a), Some(b)) = (
            encode(&pair.text, &pair.label)?,
            encode(&pair.counterfactual, &pair.counterfactual_label)?,
        ) {
            pairs.push((a, b));
        }
    }
    if texts.is_empty() && pairs.is_empty() {
        bail!("nothing to train on: no text or pair fits in {MAX_TOKENS} pieces");
    }
    let write_model = |dir: &Path, model: DisAe<B>| -> Result<()> {
        write_atomic(&dir.join(CONFIG_FILE), &serde_json::to_vec_pretty(&config)?)?;
        write_atomic(&dir.join(VOCABULARY_FILE), &vocabulary_json)?;
        write_atomic(&dir.join(WEIGHTS_FILE), &model.to_safetensors()?)
    };
    let fingerprint = |data: &DisAeData, annealing: Annealing, start: Option<&[u8]>| {
        let identity = format!(
            "{}|{annealing:?}|{data:?}|{:016x}",
            serde_json::to_string(&config).unwrap_or_default(),
            start.map_or(0, |bytes| stable_hash_bytes(0, bytes))
        );
        format!("{:016x}", stable_hash(0, &identity))
    };
    let stage = |name: &'static str,
                 data: DisAeData,
                 train: &TrainConfig,
                 base: Option<Vec<u8>>,
                 out: &Path|
     -> Result<TrainOutcome> {
        let items = match &data {
            DisAeData::Texts(texts) => texts.len(),
            DisAeData::Pairs(pairs) => pairs.len(),
        };
        let objective = DisAeObjective {
            config: config.clone(),
            data,
            annealing: run
                .annealing
                .for_stage(items.div_ceil(train.batch_size.max(1)) * train.epochs),
            base,
        };
        objective.check()?;
        let fresh = TrainRecord::new(
            train,
            &run.out,
            name,
            fingerprint(
                &objective.data,
                objective.annealing,
                objective.base.as_deref(),
            ),
            labels.clone(),
            <DisAeObjective as Objective<Autodiff<B>>>::items(&objective),
            std::any::type_name::<B>(),
        );
        run_training::<Autodiff<B>, _>(
            &objective,
            &compute,
            fresh,
            out,
            WEIGHTS_FILE,
            run.pause_after,
            |model| write_model(out, model.valid()),
        )
    };

    let mut corpus = None;
    if !texts.is_empty() {
        let dir = match pairs.is_empty() {
            true => run.out.clone(),
            false => run.out.join(CORPUS_STAGE),
        };
        let outcome = stage(
            "corpus",
            DisAeData::Texts(texts.clone()),
            &run.corpus_train,
            None,
            &dir,
        )?;
        if outcome.paused {
            return Ok(LassOutcome {
                stage: "corpus",
                outcome,
                report: None,
                too_long,
            });
        }
        corpus = Some((dir, outcome));
    }
    let (stage_name, outcome, paired) = if pairs.is_empty() {
        let (_, outcome) = corpus.clone().expect("texts when there are no pairs");
        ("corpus", outcome, None)
    } else {
        let base = match (&corpus, &start) {
            (Some((dir, _)), _) => Some(std::fs::read(dir.join(WEIGHTS_FILE))?),
            (None, Some(start)) => Some(start.weights.clone()),
            (None, None) => None,
        };
        let outcome = stage(
            "pairs",
            DisAeData::Pairs(pairs.clone()),
            &run.pair_train,
            base,
            &run.out,
        )?;
        ("pairs", outcome.clone(), Some(outcome))
    };
    if outcome.paused {
        return Ok(LassOutcome {
            stage: stage_name,
            outcome,
            report: None,
            too_long,
        });
    }
    let epoch_losses = |outcome: &TrainOutcome| {
        outcome
            .record
            .epoch_losses(outcome.record.steps_per_epoch())
    };
    let model = config.load::<B>(std::fs::read(run.out.join(WEIGHTS_FILE))?, &compute.device)?;
    let report = LassReport {
        labels,
        vocabulary_size: config.vocab_size,
        parameters: model.num_params(),
        texts: texts.len(),
        pairs: pairs.len(),
        corpus_losses: corpus
            .as_ref()
            .map(|(_, o)| epoch_losses(o))
            .unwrap_or_default(),
        pair_losses: paired.as_ref().map(epoch_losses).unwrap_or_default(),
        corpus_seconds: corpus.as_ref().map_or(0.0, |(_, o)| o.record.train_seconds),
        pair_seconds: paired.as_ref().map_or(0.0, |o| o.record.train_seconds),
        sentiment_parents: sentiment_parents(run, run.sentiment_parents),
    };
    write_atomic(
        &run.out.join(REPORT_FILE),
        &serde_json::to_vec_pretty(&report)?,
    )?;
    Ok(LassOutcome {
        stage: stage_name,
        outcome,
        report: Some(report),
        too_long,
    })
}

/// The labels of the texts and pairs, sorted; exactly two (LASS flips sentiment).
fn labels_of(run: &LassTrainRun) -> Result<Vec<String>> {
    let labels: BTreeSet<&str> = run
        .texts
        .iter()
        .map(|(_, label)| label.as_str())
        .chain(
            run.pairs
                .iter()
                .flat_map(|p| [p.label.as_str(), p.counterfactual_label.as_str()]),
        )
        .collect();
    if labels.len() != 2 {
        bail!("LASS learns two sentiments; the texts and pairs have the labels {labels:?}");
    }
    Ok(labels.into_iter().map(str::to_string).collect())
}

/// A trained Dis-AE a run starts from.
struct StartingModel {
    config: DisAeConfig,
    vocabulary_json: Vec<u8>,
    weights: Vec<u8>,
}

impl StartingModel {
    /// The Dis-AE in `dir`, checked against the run: pairs only, the same two labels.
    fn read(dir: &Path, labels: &[String], run: &LassTrainRun) -> Result<Self> {
        if !run.texts.is_empty() || run.pairs.is_empty() {
            bail!(
                "starting from a trained Dis-AE trains on pairs only: give --pairs and --data none"
            );
        }
        let read = |name: &str| {
            std::fs::read(dir.join(name))
                .with_context(|| format!("no {name} in {}: not a Dis-AE", dir.display()))
        };
        let config = read_config(dir)?;
        if config.labels != labels {
            bail!(
                "the Dis-AE in {} knows the labels {:?}, the pairs have {labels:?}",
                dir.display(),
                config.labels
            );
        }
        Ok(Self {
            config,
            vocabulary_json: read(VOCABULARY_FILE)?,
            weights: read(WEIGHTS_FILE)?,
        })
    }
}

/// The run's vocabulary: the one already in `out` (a resumed run), else one learnt from every
/// text and pair side.
fn vocabulary_for(run: &LassTrainRun) -> Result<Vec<u8>> {
    let path = run.out.join(VOCABULARY_FILE);
    if let Ok(bytes) = std::fs::read(&path) {
        return Ok(bytes);
    }
    let texts = run.texts.iter().map(|(text, _)| text.as_str()).chain(
        run.pairs
            .iter()
            .flat_map(|p| [p.text.as_str(), p.counterfactual.as_str()]),
    );
    let json = train_vocabulary(texts, run.vocabulary_size)?;
    write_atomic(&path, &json)?;
    Ok(json)
}

/// Up to `per_label` texts of each label: pair sides first, then unpaired texts.
fn sentiment_parents(run: &LassTrainRun, per_label: usize) -> SentimentParents {
    let mut parents = SentimentParents::new();
    let sides = run.pairs.iter().flat_map(|p| {
        [
            (&p.text, &p.label),
            (&p.counterfactual, &p.counterfactual_label),
        ]
    });
    for (text, label) in sides.chain(run.texts.iter().map(|(t, l)| (t, l))) {
        let texts = parents.entry(label.clone()).or_default();
        if texts.len() < per_label && !texts.contains(text) {
            texts.push(text.clone());
        }
    }
    parents
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::module::{AutodiffModule, ModuleVisitor, Param};
    use burn::optim::GradientsParams;

    use crate::compute::Batches;
    use crate::training::classifier::{TrainConfig, TrainRecord, initial_model, optimise};
    use crate::training::parts::loss_and_gradients;
    use crate::training::train_alone;

    type A = Autodiff<Flex>;

    fn objective(data: DisAeData) -> DisAeObjective {
        let labels = vec!["negative".into(), "positive".into()];
        let mut config = DisAeConfig::new(12, labels, [0, 1, 2]);
        (
            config.d_embed,
            config.d_encoder,
            config.d_latent,
            config.d_decoder,
        ) = (8, 8, 4, 16);
        DisAeObjective {
            config,
            data,
            annealing: Annealing {
                ramp_steps: 4,
                ..Annealing::default()
            },
            base: None,
        }
    }

    fn text(words: &[u32], class: usize) -> EncodedText {
        EncodedText {
            ids: [&[1], words, &[2]].concat(),
            class,
            content: None,
        }
    }

    fn pairs() -> DisAeData {
        DisAeData::Pairs(vec![
            (text(&[3, 4, 5], 1), text(&[3, 4, 6], 0)),
            (text(&[7, 8, 5], 1), text(&[7, 8, 6], 0)),
            (text(&[9, 10, 11, 5], 1), text(&[9, 10, 11, 6], 0)),
        ])
    }

    /// Runs `objective` for 3 epochs of 2 steps into `dir`, pausing after `pause` steps first
    /// if given; returns the final weights.
    fn run(objective: &DisAeObjective, dir: &std::path::Path, pause: Option<usize>) -> Vec<u8> {
        let config = TrainConfig {
            epochs: 3,
            batch_size: 2,
            lr: 5e-3,
            weight_decay: 0.0,
            checkpoint_every: 1,
            ..TrainConfig::default()
        };
        let fresh = || {
            TrainRecord::new(
                &config,
                dir,
                "pairs",
                "f".into(),
                objective.config.labels.clone(),
                3,
                "flex",
            )
        };
        let compute = Compute {
            device: Default::default(),
            batches: Batches::Parallel,
        };
        let _alone = train_alone();
        if let Some(steps) = pause {
            let (_, record) =
                optimise::<A, _>(objective, &compute, fresh(), dir, Some(steps)).unwrap();
            assert_eq!(record.step, steps);
        }
        let (model, record) = optimise::<A, _>(objective, &compute, fresh(), dir, None).unwrap();
        assert_eq!(record.step, 6);
        assert!(record.losses.iter().all(|l| l.is_finite()));
        model.valid().to_safetensors().unwrap()
    }

    /// Each parameter's gradient in `grads`, flattened, in the model's order.
    fn gradients(model: &DisAe<A>, grads: &GradientsParams) -> Vec<Vec<f32>> {
        struct Collect<'a>(&'a GradientsParams, Vec<Vec<f32>>);
        impl ModuleVisitor<A> for Collect<'_> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<A, D>>) {
                let grad = self
                    .0
                    .get::<Flex, D>(param.id)
                    .expect("every parameter learns");
                self.1.push(grad.into_data().to_vec().unwrap());
            }
        }
        let mut collect = Collect(grads, Vec::new());
        model.visit(&mut collect);
        collect.1
    }

    #[test]
    fn a_batch_in_parts_has_the_whole_batch_s_loss_and_gradients() {
        // Pairs with the paper's decoder; texts with the copying one (a word of each masked).
        let mut copying = objective(DisAeData::Texts(
            [(&[3, 4, 5][..], 1), (&[7, 8, 6, 9], 0), (&[10, 11, 5], 1)]
                .iter()
                .map(|&(words, class)| EncodedText {
                    content: Some([&[1], &words[..words.len() - 1], &[MASK_ID, 2]].concat()),
                    ..text(words, class)
                })
                .collect(),
        ));
        copying.config.copy = Some(ContentCopy {
            masked_words: vec!["great".into()],
        });
        let device = Default::default();
        let _alone = train_alone();
        for objective in [objective(pairs()), copying] {
            objective.check().unwrap();
            let model = initial_model::<A, _>(&objective, &device, 7).unwrap();
            let batch = [2, 0, 1];
            let (loss, grads) =
                loss_and_gradients(&objective, &model, &batch, 5, &device, 1).unwrap();
            let whole = gradients(&model, &grads);
            for parts in [2, 3] {
                let (in_parts, grads) =
                    loss_and_gradients(&objective, &model, &batch, 5, &device, parts).unwrap();
                assert!(
                    (in_parts - loss).abs() <= 1e-5 * loss.abs(),
                    "{in_parts} against {loss}"
                );
                for (part, all) in gradients(&model, &grads).iter().zip(&whole) {
                    for (a, b) in part.iter().zip(all) {
                        assert!((a - b).abs() <= 1e-5 + 1e-4 * b.abs(), "{a} against {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_resumed_run_ends_with_the_same_weights() {
        let objective = objective(pairs());
        objective.check().unwrap();
        let (once, twice) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assert_eq!(
            run(&objective, once.path(), None),
            run(&objective, twice.path(), Some(3))
        );
    }

    #[test]
    fn texts_train_and_bad_data_is_refused() {
        let texts = DisAeData::Texts(vec![
            text(&[3, 4, 5], 1),
            text(&[3, 4, 6], 0),
            text(&[7, 6], 0),
        ]);
        let texts = objective(texts);
        texts.check().unwrap();
        let dir = tempfile::tempdir().unwrap();
        run(&texts, dir.path(), None);
        let cases = [
            (
                DisAeData::Texts(vec![text(&[3], 2)]),
                "class 2 but the model has 2 labels",
            ),
            (DisAeData::Texts(vec![text(&[30], 0)]), "vocabulary of 12"),
            (DisAeData::Pairs(Vec::new()), "no training data"),
        ];
        for (data, expected) in cases {
            let error = objective(data).check().unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }
}
