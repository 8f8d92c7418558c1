//! Training the Dis-AE with the shared training loop (resumable, seeded): on unpaired labelled
//! texts (reconstruction and the sentiment terms: the corpus-first stage, beyond the paper), or
//! on pairs of the same content with opposite sentiment (all of LASS's Eq. 7).

use anyhow::{Result, bail};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Int, Tensor, TensorData};
use flipside_shared::models::dis_ae::loss::{Annealing, LabelledBatch};
use flipside_shared::models::dis_ae::{DisAe, DisAeConfig, PaddedIds};

use crate::train::Objective;

/// A text as vocabulary ids (`[<s>, …, </s>]`) and its sentiment class.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedText {
    pub ids: Vec<u32>,
    pub class: usize,
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
        LabelledBatch {
            tokens: PaddedIds::new(&rows, self.config.pad_id, device),
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

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::{Autodiff, Flex};
    use burn::module::AutodiffModule;

    use crate::train::{TrainConfig, TrainRecord, optimise};

    type A = Autodiff<Flex>;

    /// Training seeds the backend's random generator, which the whole process shares: these
    /// tests train one at a time.
    static TRAINING: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
        let device = Default::default();
        let _alone = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(steps) = pause {
            let (_, record) =
                optimise::<A, _>(objective, &device, fresh(), dir, Some(steps)).unwrap();
            assert_eq!(record.step, steps);
        }
        let (model, record) = optimise::<A, _>(objective, &device, fresh(), dir, None).unwrap();
        assert_eq!(record.step, 6);
        assert!(record.losses.iter().all(|l| l.is_finite()));
        model.valid().to_safetensors().unwrap()
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
