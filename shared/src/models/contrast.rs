//! Label contrast: decoding that steers each next token toward what one input makes
//! likely and away from what a contrasting input makes likely.
//!
//! AutoCAD's infiller reads the target label as the last word of its input. Sampling from
//! p(y | masked text, target) alone can write fills just as likely under the item's own label,
//! which flip nothing. [`ContrastDecoder`] decodes every input beside its contrast (the same masked text with the item's own label)
//! and scores each allowed token by
//!
//! `(1 + w) · log p(y | target) − w · log p(y | contrast)`
//!
//! over the tokens the target makes plausible, those with p(y | target) ≥ `plausibility` ×
//! the most likely token's (so that the contrast cannot promote tokens the target finds
//! absurd); the others rank below them all, by the target alone. This is classifier-free guidance (Ho and Salimans, 2022) with the label as the
//! condition, restricted as contrastive decoding (Li et al., 2023) restricts its candidates;
//! `w = 0` is plain sampling from the target.

use crate::models::search::{DecodeSettings, SpecialTokens, StepDecoder, log_softmax};

/// How strongly the contrast steers, and which tokens it may choose between.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabelContrast {
    /// `w`: 0 decodes from the target input alone.
    pub weight: f32,
    /// Tokens below this share of the target's most likely allowed token's probability rank
    /// below every other (in (0, 1]).
    pub plausibility: f32,
}

/// A decoder over pairs of inputs: rows `0..n` of `inner` are the inputs decoded, rows
/// `n..2n` their contrasts in the same order; it presents `n` rows, feeds each token to a row
/// and its contrast alike, and returns the scores of [`LabelContrast`]. Which tokens are
/// plausible is judged among those the decoding's `rules` allow (its bans and span format),
/// so it follows each row's output to apply them.
pub struct ContrastDecoder<D> {
    inner: D,
    label_contrast: LabelContrast,
    rules: DecodeSettings,
    /// Each row's output so far.
    outputs: Vec<Vec<u32>>,
    started: bool,
}

impl<D: StepDecoder> ContrastDecoder<D> {
    /// `inner` holds the inputs, then their contrasts (an even number of rows); `rules` are
    /// the settings it is decoded with.
    pub fn new(inner: D, label_contrast: LabelContrast, rules: &DecodeSettings) -> Self {
        assert!(
            inner.rows().is_multiple_of(2),
            "a contrast for every input: {} rows",
            inner.rows()
        );
        Self {
            outputs: vec![Vec::new(); inner.rows() / 2],
            inner,
            label_contrast,
            rules: rules.clone(),
            started: false,
        }
    }
}

impl<D: StepDecoder> StepDecoder for ContrastDecoder<D> {
    fn rows(&self) -> usize {
        self.inner.rows() / 2
    }

    fn special_tokens(&self) -> SpecialTokens {
        self.inner.special_tokens()
    }

    fn step(&mut self, last: &[u32]) -> Vec<Vec<f32>> {
        if self.started {
            for (output, &token) in self.outputs.iter_mut().zip(last) {
                output.push(token);
            }
        }
        self.started = true;
        let end = self.special_tokens().end;
        let both: Vec<u32> = last.iter().chain(last).copied().collect();
        let mut logits = self.inner.step(&both);
        let contrasts = logits.split_off(last.len());
        logits
            .iter()
            .zip(&contrasts)
            .zip(&self.outputs)
            .map(|((target, contrast), output)| {
                let mut target = log_softmax(target);
                self.rules.restrict(output, end, &mut target);
                contrasted(&target, &log_softmax(contrast), self.label_contrast)
            })
            .collect()
    }

    fn repeat_rows(&mut self, times: usize) {
        // Inputs then contrasts, each repeated in place: the layout stays the same.
        self.inner.repeat_rows(times);
        self.outputs = (0..self.outputs.len() * times)
            .map(|r| self.outputs[r / times].clone())
            .collect();
    }

    fn reorder(&mut self, rows: &[usize]) {
        let n = self.rows();
        let both: Vec<usize> = rows
            .iter()
            .copied()
            .chain(rows.iter().map(|&r| r + n))
            .collect();
        self.inner.reorder(&both);
        self.outputs = rows.iter().map(|&r| self.outputs[r].clone()).collect();
    }
}

/// How far below every plausible token an implausible one is put: out of reach while a
/// plausible token is allowed, yet finite, so that where the span format or a ban rules out
/// every plausible token the target's own order still chooses among the rest.
const IMPLAUSIBLE: f32 = 1e4;

/// The contrasted score of every token from the target's and the contrast's log-probabilities
/// (the target's with what may not come next at −∞).
pub fn contrasted(target: &[f32], contrast: &[f32], label_contrast: LabelContrast) -> Vec<f32> {
    let best = target.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let floor = best
        + label_contrast
            .plausibility
            .clamp(f32::MIN_POSITIVE, 1.0)
            .ln();
    let w = label_contrast.weight;
    target
        .iter()
        .zip(contrast)
        .map(|(&t, &c)| {
            if !t.is_finite() {
                f32::NEG_INFINITY
            } else if t < floor {
                t - IMPLAUSIBLE
            } else if w == 0.0 {
                t
            } else {
                (1.0 + w) * t - w * c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::search::{DecodeSettings, Search, generate};

    /// Two inputs' fixed next-token logits (the same at every step), and what was fed.
    struct Fixed {
        logits: Vec<Vec<f32>>,
        fed: Vec<Vec<u32>>,
        reordered: Vec<Vec<usize>>,
    }

    impl StepDecoder for Fixed {
        fn rows(&self) -> usize {
            self.logits.len()
        }
        fn special_tokens(&self) -> SpecialTokens {
            crate::models::search::tests::TEST_TOKENS
        }
        fn step(&mut self, last: &[u32]) -> Vec<Vec<f32>> {
            self.fed.push(last.to_vec());
            self.logits.clone()
        }
        fn repeat_rows(&mut self, times: usize) {
            self.logits = self
                .logits
                .iter()
                .flat_map(|row| std::iter::repeat_n(row.clone(), times))
                .collect();
        }
        fn reorder(&mut self, rows: &[usize]) {
            self.reordered.push(rows.to_vec());
            self.logits = rows.iter().map(|&r| self.logits[r].clone()).collect();
        }
    }

    #[test]
    fn the_contrast_prefers_what_only_the_target_makes_likely() {
        // Token 2 is likelier under both labels; token 3 is likely under the target only.
        let target = log_softmax(&[f32::NEG_INFINITY, -9.0, 2.0, 1.5, -3.0]);
        let contrast = log_softmax(&[f32::NEG_INFINITY, -9.0, 2.5, -1.0, -3.0]);
        let plain = contrasted(
            &target,
            &contrast,
            LabelContrast {
                weight: 0.0,
                plausibility: 1e-3,
            },
        );
        assert!(plain[2] > plain[3]);
        let strong = LabelContrast {
            weight: 1.0,
            plausibility: 0.1,
        };
        let scores = contrasted(&target, &contrast, strong);
        assert!(scores[3] > scores[2], "{scores:?}");
        // p(4 | target) / p(2 | target) = e^-5 < 0.1: implausible, whatever the contrast says,
        // so is the end (token 1): below every plausible token, in the target's order; the
        // token the target rules out stays ruled out.
        let lowest_plausible = scores[2].min(scores[3]);
        assert!(
            scores[4] < lowest_plausible - 1e3 && scores[1] < scores[4],
            "{scores:?}"
        );
        assert_eq!(scores[0], f32::NEG_INFINITY);
        // (1 + w)·log p_t − w·log p_c.
        assert!((scores[3] - (2.0 * target[3] - contrast[3])).abs() < 1e-5);
    }

    /// The decoder after generating with `settings` from a target and a contrast, and the
    /// tokens generated.
    fn decode(
        logits: [Vec<f32>; 2],
        setting: LabelContrast,
        settings: &DecodeSettings,
    ) -> (ContrastDecoder<Fixed>, Vec<u32>) {
        let inner = Fixed {
            logits: logits.to_vec(),
            fed: Vec::new(),
            reordered: Vec::new(),
        };
        let mut decoder = ContrastDecoder::new(inner, setting, settings);
        assert_eq!(decoder.rows(), 1);
        let decoded = generate(&mut decoder, settings).remove(0);
        (decoder, decoded.tokens)
    }

    #[test]
    fn a_row_and_its_contrast_are_fed_the_same_tokens_and_move_together() {
        let target = vec![f32::NEG_INFINITY, -5.0, 0.0, 0.1];
        let contrast = vec![f32::NEG_INFINITY, -5.0, 0.0, 3.0];
        let setting = LabelContrast {
            weight: 2.0,
            plausibility: 0.1,
        };
        let settings = DecodeSettings {
            search: Search::Greedy,
            max_tokens: 3,
            banned: Vec::new(),
            logit_bias: Vec::new(),
            sentinels: None,
        };
        // Unguided, token 3 wins (0.1 > 0); guided, the contrast's love of it hands it to 2.
        let (decoder, tokens) = decode([target.clone(), contrast.clone()], setting, &settings);
        assert_eq!(tokens, [2, 2, 2]);
        assert_eq!(decoder.inner.fed, [vec![0, 0], vec![2, 2], vec![2, 2]]);
        // The output it followed is the one generated (less the last token, never fed).
        assert_eq!(decoder.outputs, [vec![2, 2]]);
        // Beam search: rows repeat in place and a reorder moves a row's contrast with it.
        let beam = DecodeSettings {
            search: Search::Beam {
                beams: 2,
                length_penalty: 1.0,
            },
            ..settings.clone()
        };
        let (decoder, tokens) = decode([target.clone(), contrast.clone()], setting, &beam);
        assert_eq!(tokens[0], 2);
        assert!(!decoder.inner.reordered.is_empty());
        for rows in &decoder.inner.reordered {
            let (inputs, contrasts) = rows.split_at(rows.len() / 2);
            assert!(inputs.iter().all(|&r| r < 2), "{rows:?}");
            let shifted: Vec<usize> = inputs.iter().map(|&r| r + 2).collect();
            assert_eq!(contrasts, shifted.as_slice());
        }
        // Plausibility is judged among the allowed tokens: with the target's favourite (2)
        // banned, token 4 is within a tenth of the best allowed one (3), and the contrast's
        // dislike of it makes it the choice; judged against the banned token, both would be
        // implausible and the target alone would choose 3.
        let target = vec![f32::NEG_INFINITY, -9.0, 5.0, 0.0, -1.0];
        let contrast = vec![f32::NEG_INFINITY, -9.0, 0.0, 0.0, -6.0];
        let banned = DecodeSettings {
            banned: vec![2],
            logit_bias: Vec::new(),
            ..settings
        };
        let (_, tokens) = decode([target, contrast], setting, &banned);
        assert_eq!(tokens, [4, 4, 4]);
    }
}
