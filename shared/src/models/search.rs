//! Generating from any step-by-step decoder (T5, the Dis-AE): greedy, nucleus sampling
//! (seeded) and beam search, with banned tokens.
//!
//! As in Hugging Face's `generate`: banned tokens get −∞ after the log-softmax (their mass is not
//! redistributed); nucleus sampling divides the logits by the temperature, keeps the most likely
//! tokens until their mass reaches `top_p`, and samples among them; beam search keeps the best
//! `beams` running hypotheses by summed log-probability, sets aside those that end, and ranks
//! finished hypotheses by sum / length^`length_penalty`.
//!
//! [`SentinelOrder`] constrains every output to T5's span format (each masked span's sentinel in
//! order, each followed by a fill, nothing after the last fill but the end): tokens the format
//! forbids get −∞ like banned ones, so an infill is well formed by construction.

use std::sync::Arc;

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::ops::softmax::log_sum_exp;
use crate::random::SplitMix64;

/// How to choose each next token.
#[derive(Debug, Clone, PartialEq)]
pub enum Search {
    /// The most likely token.
    Greedy,
    /// Sample from the smallest set of tokens holding `top_p` of the probability, after dividing
    /// the logits by `temperature`. Row `r` of a batch draws from `seed + r`.
    Nucleus {
        top_p: f64,
        temperature: f64,
        seed: u64,
    },
    /// Beam search with `beams` hypotheses per input.
    Beam { beams: usize, length_penalty: f64 },
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeSettings {
    pub search: Search,
    /// Most tokens per output, `</s>` included.
    pub max_tokens: usize,
    /// Tokens never generated.
    pub banned: Vec<u32>,
    /// Added to these tokens' log-probabilities before the search (and the temperature)
    /// weighs them, as OpenAI's `logit_bias`: above 0 favours a token, below disfavours it.
    pub logit_bias: Vec<(u32, f32)>,
    /// The span format every output must follow, if any.
    pub sentinels: Option<SentinelOrder>,
}

/// T5's span format: `<s₀> fill₀ <s₁> fill₁ … </s>` with every sentinel due, in order, each fill
/// at least one and at most `max_fill` tokens, no other sentinel, and no end before the last
/// fill.
#[derive(Debug, Clone, PartialEq)]
pub struct SentinelOrder {
    /// The sentinels due, in order (one per masked span; each one of `all`).
    pub due: Vec<u32>,
    /// Every sentinel of the vocabulary: those not due are never generated.
    pub all: Vec<u32>,
    /// The most tokens one fill takes: then the next sentinel (or, after the last fill, the
    /// end) is forced, so that a fill running on (a loop of punctuation, say) cannot use up
    /// the length limit. With `max_tokens` ≥ due × (`max_fill` + 1) + 1 every output finishes.
    pub max_fill: usize,
    /// Which tokens may start a fill and which are punctuation, when fills must be worded: each
    /// fill then starts with a word, and no punctuation token follows another ("so .)..!" is
    /// not a fill).
    pub pieces: Option<FillPieces>,
}

/// What a token is to a fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceKind {
    /// Not a piece of text: a special token, a sentinel, an unused id.
    Special,
    /// Begins a word with a letter or a digit (`▁good`, `▁10`).
    WordStart,
    /// Goes on with a word (`s`, `ing`): letters or digits, no word start.
    WordPart,
    /// Joins two parts of a word: only apostrophes and hyphens (`'`, `-`).
    Joiner,
    /// No letter or digit (`.`, `▁(`, a bare `▁`).
    Punctuation,
}

/// What each token of a vocabulary is to a fill, for worded fills: a fill starts with a word
/// start; after punctuation comes a word start (or the fill ends), after a joiner a word part
/// or a word start ("so .)..!" and "film.era.s." are no fills, "film's" is).
#[derive(Debug, Clone, PartialEq)]
pub struct FillPieces {
    /// Each id's kind.
    pub kinds: Arc<[PieceKind]>,
}

impl FillPieces {
    /// The kinds of `pieces` (a vocabulary's entries by id; `None` for an id that is no piece,
    /// such as a special token). In a SentencePiece vocabulary `▁` marks the pieces that
    /// start a word; in one without it (a word-level vocabulary) every piece is a whole word.
    pub fn new<'a>(pieces: impl IntoIterator<Item = Option<&'a str>>) -> Self {
        const MARK: char = '\u{2581}';
        let pieces: Vec<Option<&str>> = pieces.into_iter().collect();
        let marked = pieces.iter().flatten().any(|piece| piece.starts_with(MARK));
        let kind = |piece: &str| {
            let (start, word) = match piece.strip_prefix(MARK) {
                Some(word) => (true, word),
                None => (!marked, piece),
            };
            let only = |chars: &str| !word.is_empty() && word.chars().all(|c| chars.contains(c));
            if !piece.chars().any(char::is_alphanumeric) {
                match !start && only("'’-") {
                    true => PieceKind::Joiner,
                    false => PieceKind::Punctuation,
                }
            } else if start && word.chars().next().is_some_and(char::is_alphanumeric) {
                PieceKind::WordStart
            } else {
                PieceKind::WordPart
            }
        };
        Self {
            kinds: pieces
                .iter()
                .map(|piece| piece.map_or(PieceKind::Special, kind))
                .collect(),
        }
    }

    /// The kind of `id` ([`PieceKind::Special`] beyond the vocabulary).
    pub fn kind(&self, id: u32) -> PieceKind {
        self.kinds
            .get(id as usize)
            .copied()
            .unwrap_or(PieceKind::Special)
    }

    /// Rules out what cannot come next in a fill: anything but a word start right after a
    /// sentinel; after punctuation, any piece but a word start; after a joiner, punctuation and
    /// another joiner.
    fn constrain(&self, after_sentinel: bool, last: Option<u32>, log_probs: &mut [f32]) {
        use PieceKind::*;
        let allowed = |kind: PieceKind| match (after_sentinel, last.map(|id| self.kind(id))) {
            (true, _) => kind == WordStart,
            (false, Some(Punctuation)) => matches!(kind, WordStart | Special),
            (false, Some(Joiner)) => !matches!(kind, Punctuation | Joiner),
            _ => true,
        };
        for (id, value) in log_probs.iter_mut().enumerate() {
            if !allowed(self.kind(id as u32)) {
                *value = f32::NEG_INFINITY;
            }
        }
    }
}

impl SentinelOrder {
    /// Sets to −∞ every token that cannot follow `prefix` (the row's output so far); `end` is
    /// the token that ends an output. The first token is the first sentinel due, whatever its
    /// probability.
    pub fn constrain(&self, prefix: &[u32], end: u32, log_probs: &mut [f32]) {
        let emitted = prefix.iter().filter(|t| self.due.contains(t)).count();
        let next = self.due.get(emitted).copied();
        let after_sentinel = prefix.last().is_some_and(|t| self.due.contains(t));
        if prefix.is_empty()
            && let Some(first) = next
            && force(first, log_probs)
        {
            return;
        }
        let fill = prefix
            .iter()
            .rev()
            .take_while(|t| !self.due.contains(t))
            .count();
        if !prefix.is_empty()
            && fill >= self.max_fill.max(1)
            && force(next.unwrap_or(end), log_probs)
        {
            return;
        }
        let mut forbid = |token: u32| {
            if let Some(value) = log_probs.get_mut(token as usize) {
                *value = f32::NEG_INFINITY;
            }
        };
        for &sentinel in &self.all {
            if after_sentinel || Some(sentinel) != next {
                forbid(sentinel);
            }
        }
        if after_sentinel || next.is_some() {
            forbid(end);
        }
        if let Some(pieces) = &self.pieces {
            pieces.constrain(after_sentinel, prefix.last().copied(), log_probs);
        }
    }
}

/// Leaves `token` the only possible one: finite even if the model (or a ban) rules it out.
/// False (nothing changed) for a token outside the vocabulary.
fn force(token: u32, log_probs: &mut [f32]) -> bool {
    let Some(&kept) = log_probs.get(token as usize) else {
        return false;
    };
    log_probs.fill(f32::NEG_INFINITY);
    log_probs[token as usize] = if kept.is_finite() { kept } else { 0.0 };
    true
}

/// One generated output.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The generated ids, without the start token and without `</s>`.
    pub tokens: Vec<u32>,
    /// Summed log-probability of the generated tokens (`</s>` included when it ended).
    pub log_prob: f64,
    /// Whether it ended with `</s>` (otherwise it reached `max_tokens`).
    pub finished: bool,
}

/// A decoder that emits one token per row per call, keeping its own state (its cache, its
/// LSTM state) between calls.
pub trait StepDecoder {
    /// Rows being decoded.
    fn rows(&self) -> usize;
    /// The token each row starts from, the one that ends a row, and the one fed to ended rows.
    fn special_tokens(&self) -> SpecialTokens;
    /// Feeds one token per row; returns each row's next-token logits.
    fn step(&mut self, last: &[u32]) -> Vec<Vec<f32>>;
    /// Repeats every row `times` times (row r becomes rows r·times … r·times + times − 1),
    /// before the first step.
    fn repeat_rows(&mut self, times: usize);
    /// Keeps the rows `rows` in that order. A row is only ever replaced by a row of the same
    /// input, so what every copy of an input shares need not move while the row count stays;
    /// fewer rows than before drop whole inputs (finished ones), and then it moves too.
    fn reorder(&mut self, rows: &[usize]);
}

/// The tokens a [`StepDecoder`] starts, ends and pads with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialTokens {
    pub start: u32,
    pub end: u32,
    pub pad: u32,
}

/// Generates one output per row of `decoder`.
pub fn generate(decoder: &mut impl StepDecoder, settings: &DecodeSettings) -> Vec<Decoded> {
    generate_all(decoder, settings)
        .into_iter()
        .map(|mut outputs| outputs.swap_remove(0))
        .collect()
}

/// Generates every output the search ends with for each row of `decoder`, the best first: a
/// beam search's finished hypotheses (at most `beams`, by normalised score; its best running
/// ones when none finished), or the one output of greedy decoding and sampling. Never empty.
pub fn generate_all(
    decoder: &mut impl StepDecoder,
    settings: &DecodeSettings,
) -> Vec<Vec<Decoded>> {
    match settings.search {
        Search::Beam {
            beams,
            length_penalty,
        } => beam_search(decoder, settings, beams.max(1), length_penalty),
        _ => token_by_token(decoder, settings)
            .into_iter()
            .map(|decoded| vec![decoded])
            .collect(),
    }
}

/// One step for every row: the next-token log-probabilities, with what `settings` rule out
/// given each row's output so far (`prefix(row)`) at −∞.
fn step<'a>(
    decoder: &mut impl StepDecoder,
    last: &[u32],
    settings: &DecodeSettings,
    prefix: impl Fn(usize) -> &'a [u32],
) -> Vec<Vec<f32>> {
    let end = decoder.special_tokens().end;
    let mut rows: Vec<Vec<f32>> = decoder
        .step(last)
        .iter()
        .map(|row| log_softmax(row))
        .collect();
    for (row, log_probs) in rows.iter_mut().enumerate() {
        settings.restrict(prefix(row), end, log_probs);
    }
    rows
}

impl DecodeSettings {
    /// Adds the logit biases to `log_probs`, then sets to −∞ the banned tokens and those the
    /// span format (if any) rules out after `prefix`; `end` is the token that ends an output.
    pub fn restrict(&self, prefix: &[u32], end: u32, log_probs: &mut [f32]) {
        for &(token, bias) in &self.logit_bias {
            if let Some(value) = log_probs.get_mut(token as usize) {
                *value += bias;
            }
        }
        for &token in &self.banned {
            if let Some(value) = log_probs.get_mut(token as usize) {
                *value = f32::NEG_INFINITY;
            }
        }
        if let Some(order) = &self.sentinels {
            order.constrain(prefix, end, log_probs);
        }
    }
}

/// Logits `[rows, 1, vocab]` as one vector per row.
pub fn logit_rows<B: Backend>(logits: Tensor<B, 3>) -> Vec<Vec<f32>> {
    let vocab = logits.dims()[2];
    logits
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("logits are floats")
        .chunks(vocab)
        .map(<[f32]>::to_vec)
        .collect()
}

/// Log-probabilities of `logits`.
pub(crate) fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let log_sum = log_sum_exp(logits);
    logits.iter().map(|&x| x - log_sum).collect()
}

/// The `k` largest finite values with their indices, largest first (the lower index first among
/// equal values), in one pass that keeps a sorted list of at most `k`.
fn best_tokens(values: &[f32], k: usize) -> Vec<(f32, usize)> {
    let mut best: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
    for (index, &value) in values.iter().enumerate() {
        let full = best.len() == k;
        if !value.is_finite() || k == 0 || (full && value <= best[k - 1].0) {
            continue;
        }
        let at = best.partition_point(|&(kept, _)| kept >= value);
        best.insert(at, (value, index));
        best.truncate(k);
    }
    best
}

/// The first index of the largest value.
fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, &value) in values.iter().enumerate() {
        if value > values[best] {
            best = i;
        }
    }
    best
}

/// Nucleus sampling over `log_probs` (bans already −∞) at `temperature`: the most likely tokens
/// (the lower id first among equals) until their mass reaches `top_p`, one of them drawn in
/// proportion. Only the top 64 are sorted when they hold the mass (a trained model's nucleus is a
/// few tokens), else every candidate by [`radix_sort`] (a flat distribution's holds most of the
/// vocabulary; a comparison sort of T5's 32k at every step was a tenth of its sampling time).
fn nucleus(log_probs: &[f32], top_p: f64, temperature: f64, rng: &mut SplitMix64) -> usize {
    // Dividing log-probabilities by T is dividing the logits by T (the constant cancels).
    let scaled: Vec<f64> = log_probs
        .iter()
        .map(|&lp| f64::from(lp) / temperature.max(1e-6))
        .collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scaled.iter().map(|&s| (s - max).exp()).collect();
    let target = top_p * weights.iter().sum::<f64>();
    // Positive f64s order as their bits do: the complement sorts the largest first, then by id.
    let candidates = || -> Vec<(u64, usize)> {
        (0..weights.len())
            .filter(|&i| weights[i] > 0.0)
            .map(|i| (!weights[i].to_bits(), i))
            .collect()
    };
    // The smallest head of `sorted` whose mass reaches the target, and that mass.
    let nucleus_of = |sorted: &[(u64, usize)]| {
        let (mut kept, mut mass) = (0, 0.0);
        for &(_, i) in sorted {
            if kept > 0 && mass >= target {
                break;
            }
            mass += weights[i];
            kept += 1;
        }
        (kept, mass)
    };
    let mut order = candidates();
    let head = 64.min(order.len());
    if head < order.len() {
        order.select_nth_unstable(head - 1);
    }
    order[..head].sort_unstable();
    let (mut kept, mut mass) = nucleus_of(&order[..head]);
    if mass < target && head < order.len() {
        order = candidates();
        radix_sort(&mut order);
        (kept, mass) = nucleus_of(&order);
    }
    let nucleus = &order[..kept];
    let mut draw = rng.uniform() * mass;
    for &(_, i) in nucleus {
        draw -= weights[i];
        if draw < 0.0 {
            return i;
        }
    }
    nucleus[kept - 1].1
}

/// Sorts `pairs` by their keys, keeping the order of pairs with equal keys: least significant
/// byte first, skipping the bytes in which no two keys differ.
fn radix_sort(pairs: &mut Vec<(u64, usize)>) {
    let Some(&(first, _)) = pairs.first() else {
        return;
    };
    let differing = pairs.iter().fold(0, |bits, &(key, _)| bits | (key ^ first));
    let mut buffer = vec![(0, 0); pairs.len()];
    for shift in (0..64).step_by(8) {
        if (differing >> shift) & 0xff == 0 {
            continue;
        }
        let byte = |key: u64| ((key >> shift) & 0xff) as usize;
        let mut starts = [0usize; 256];
        for &(key, _) in pairs.iter() {
            starts[byte(key)] += 1;
        }
        let mut sum = 0;
        for start in starts.iter_mut() {
            (*start, sum) = (sum, sum + *start);
        }
        for &pair in pairs.iter() {
            let slot = &mut starts[byte(pair.0)];
            buffer[*slot] = pair;
            *slot += 1;
        }
        std::mem::swap(pairs, &mut buffer);
    }
}

fn token_by_token(decoder: &mut impl StepDecoder, settings: &DecodeSettings) -> Vec<Decoded> {
    let rows = decoder.rows();
    let tokens = decoder.special_tokens();
    let mut rngs: Vec<SplitMix64> = (0..rows as u64)
        .map(|r| match settings.search {
            Search::Nucleus { seed, .. } => SplitMix64(seed.wrapping_add(r)),
            _ => SplitMix64(0),
        })
        .collect();
    let mut out = vec![
        Decoded {
            tokens: Vec::new(),
            log_prob: 0.0,
            finished: false,
        };
        rows
    ];
    // The rows still in the decoder, in its order: a row that ends leaves it.
    let mut live: Vec<usize> = (0..rows).collect();
    let mut last = vec![tokens.start; rows];
    for _ in 0..settings.max_tokens {
        let log_probs = step(decoder, &last, settings, |slot| &out[live[slot]].tokens);
        let (mut kept, mut next_last) = (Vec::with_capacity(live.len()), Vec::new());
        for (slot, log_probs) in log_probs.iter().enumerate() {
            let row = live[slot];
            let token = match settings.search {
                Search::Nucleus {
                    top_p, temperature, ..
                } => nucleus(log_probs, top_p, temperature, &mut rngs[row]),
                _ => argmax(log_probs),
            };
            let decoded = &mut out[row];
            decoded.log_prob += f64::from(log_probs[token]);
            if token as u32 == tokens.end {
                decoded.finished = true;
            } else {
                decoded.tokens.push(token as u32);
                kept.push(slot);
                next_last.push(token as u32);
            }
        }
        if kept.is_empty() {
            break;
        }
        if kept.len() < live.len() {
            decoder.reorder(&kept);
            live = kept.iter().map(|&slot| live[slot]).collect();
        }
        last = next_last;
    }
    out
}

/// A finished (or, at the end, unfinished) beam hypothesis and its normalised score.
struct Hypothesis {
    score: f64,
    decoded: Decoded,
}

fn beam_search(
    decoder: &mut impl StepDecoder,
    settings: &DecodeSettings,
    beams: usize,
    length_penalty: f64,
) -> Vec<Vec<Decoded>> {
    let inputs = decoder.rows();
    let tokens = decoder.special_tokens();
    decoder.repeat_rows(beams);
    let normalise = |sum: f64, length: usize| sum / (length.max(1) as f64).powf(length_penalty);
    // The inputs still in the decoder, `beams` rows each, in its order: a done input leaves it.
    let mut live: Vec<usize> = (0..inputs).collect();
    // Only the first beam of each input is live at the start (the others would repeat it).
    let mut sums: Vec<f64> = (0..inputs * beams)
        .map(|i| {
            if i % beams == 0 {
                0.0
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect();
    let mut sequences: Vec<Vec<u32>> = vec![Vec::new(); inputs * beams];
    let mut finished: Vec<Vec<Hypothesis>> = (0..inputs).map(|_| Vec::new()).collect();
    let mut last = vec![tokens.start; inputs * beams];
    for _ in 0..settings.max_tokens {
        let log_probs = step(decoder, &last, settings, |row| &sequences[row]);
        let mut parents = Vec::with_capacity(live.len() * beams);
        let (mut next_sums, mut next_sequences, mut next_last) =
            (Vec::new(), Vec::new(), Vec::new());
        let mut still_live = Vec::with_capacity(live.len());
        for (slot, &input) in live.iter().enumerate() {
            let rows = slot * beams..(slot + 1) * beams;
            // The input's best 2·beams continuations are among each row's best 2·beams tokens.
            let keep = 2 * beams;
            let mut candidates: Vec<(f64, usize, usize)> = rows
                .clone()
                .filter(|&row| sums[row].is_finite())
                .flat_map(|row| {
                    let sum = sums[row];
                    best_tokens(&log_probs[row], keep)
                        .into_iter()
                        .map(move |(lp, token)| (sum + f64::from(lp), row, token))
                })
                .collect();
            candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            candidates.truncate(keep);
            let first = parents.len();
            let mut running = 0;
            for (rank, &(sum, row, token)) in candidates.iter().enumerate() {
                if token as u32 == tokens.end {
                    if rank < beams {
                        let tokens = sequences[row].clone();
                        let score = normalise(sum, tokens.len() + 1);
                        finished[input].push(Hypothesis {
                            score,
                            decoded: Decoded {
                                tokens,
                                log_prob: sum,
                                finished: true,
                            },
                        });
                    }
                    continue;
                }
                parents.push(row);
                next_sums.push(sum);
                let mut sequence = sequences[row].clone();
                sequence.push(token as u32);
                next_sequences.push(sequence);
                next_last.push(token as u32);
                running += 1;
                if running == beams {
                    break;
                }
            }
            // Too few live candidates (a tiny vocabulary, heavy bans): pad with dead beams.
            while running < beams {
                parents.push(rows.start);
                next_sums.push(f64::NEG_INFINITY);
                next_sequences.push(Vec::new());
                next_last.push(tokens.pad);
                running += 1;
            }
            let hypotheses = &mut finished[input];
            hypotheses.sort_by(|a, b| b.score.total_cmp(&a.score));
            hypotheses.truncate(beams);
            let done = hypotheses.len() == beams
                && normalise(next_sums[first], next_sequences[first].len())
                    <= hypotheses[beams - 1].score;
            if done {
                parents.truncate(first);
                next_sums.truncate(first);
                next_sequences.truncate(first);
                next_last.truncate(first);
            } else {
                still_live.push(input);
            }
        }
        if still_live.is_empty() {
            live.clear();
            break;
        }
        decoder.reorder(&parents);
        live = still_live;
        sums = next_sums;
        sequences = next_sequences;
        last = next_last;
    }
    // Inputs still running at the length limit: their running hypotheses count too.
    for (slot, &input) in live.iter().enumerate() {
        for row in slot * beams..(slot + 1) * beams {
            if sums[row].is_finite() {
                finished[input].push(Hypothesis {
                    score: normalise(sums[row], sequences[row].len()),
                    decoded: Decoded {
                        tokens: sequences[row].clone(),
                        log_prob: sums[row],
                        finished: false,
                    },
                });
            }
        }
    }
    finished
        .into_iter()
        .map(|mut hypotheses| {
            // Among equal scores the one that finished last first (as `max_by` chose it).
            hypotheses.reverse();
            hypotheses.sort_by(|a, b| b.score.total_cmp(&a.score));
            hypotheses.truncate(beams);
            if hypotheses.is_empty() {
                return vec![Decoded {
                    tokens: Vec::new(),
                    log_prob: f64::NEG_INFINITY,
                    finished: false,
                }];
            }
            hypotheses.into_iter().map(|h| h.decoded).collect()
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn logit_biases_add_to_log_probabilities_and_bans_still_win() {
        let settings = DecodeSettings {
            search: Search::Greedy,
            max_tokens: 4,
            banned: vec![2],
            logit_bias: vec![(1, 1.5), (2, 10.0), (3, -1.0), (9, 5.0)],
            sentinels: None,
        };
        let mut log_probs = vec![-1.0f32, -2.0, -0.5, -3.0];
        settings.restrict(&[], 0, &mut log_probs);
        // Token 9 is beyond the vocabulary: ignored.
        assert_eq!(log_probs, [-1.0, -0.5, f32::NEG_INFINITY, -4.0]);
    }

    #[test]
    fn nucleus_keeps_the_smallest_set_reaching_top_p() {
        // Probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps the first two only.
        let log_probs: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
        let mut rng = SplitMix64(3);
        let mut counts = [0usize; 4];
        for _ in 0..2000 {
            counts[nucleus(&log_probs, 0.7, 1.0, &mut rng)] += 1;
        }
        assert_eq!(counts[2] + counts[3], 0, "{counts:?}");
        // Renormalised over the two kept: 0.625 / 0.375.
        let share = counts[0] as f64 / 2000.0;
        assert!((share - 0.625).abs() < 0.04, "{counts:?}");
        // A banned token (−∞) is never drawn, even with top_p 1.
        let banned = [0.0f32.ln(), 0.5f32.ln(), 0.5f32.ln()];
        assert!((0..200).all(|_| nucleus(&banned, 1.0, 0.7, &mut rng) != 0));
    }

    /// The nucleus's draws are those of sorting the whole vocabulary, for a peaked distribution
    /// (a few candidates hold the mass), a flat one (every selection round) and ties.
    #[test]
    fn nucleus_draws_as_a_full_sort_would() {
        fn by_full_sort(log_probs: &[f32], top_p: f64, t: f64, rng: &mut SplitMix64) -> usize {
            let scaled: Vec<f64> = log_probs.iter().map(|&lp| f64::from(lp) / t).collect();
            let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scaled.iter().map(|&s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mut order: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0.0).collect();
            order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
            let (mut kept, mut mass) = (0, 0.0);
            for &i in &order {
                if kept > 0 && mass >= top_p * total {
                    break;
                }
                mass += weights[i];
                kept += 1;
            }
            let mut draw = rng.uniform() * mass;
            for &i in &order[..kept] {
                draw -= weights[i];
                if draw < 0.0 {
                    return i;
                }
            }
            order[kept - 1]
        }
        let vocab = 5_000;
        let peaked: Vec<f32> = (0..vocab)
            .map(|i| -((i * 37 % vocab) as f32) * 0.01)
            .collect();
        let flat: Vec<f32> = (0..vocab).map(|i| -((i * 13 % 97) as f32) * 1e-4).collect();
        let tied: Vec<f32> = (0..vocab)
            .map(|i| if i % 3 == 0 { -1.0 } else { -2.0 })
            .collect();
        // top_p 0.3 of the peaked one: the first 64 candidates hold it (one selection).
        for (log_probs, top_p) in [(&peaked, 0.9), (&peaked, 0.3), (&flat, 0.9), (&tied, 0.9)] {
            let (mut ours, mut theirs) = (SplitMix64(9), SplitMix64(9));
            for _ in 0..50 {
                assert_eq!(
                    nucleus(log_probs, top_p, 0.7, &mut ours),
                    by_full_sort(log_probs, top_p, 0.7, &mut theirs)
                );
            }
        }
    }

    #[test]
    fn radix_sort_sorts_by_key_keeping_the_order_of_equal_keys() {
        let mut pairs: Vec<(u64, usize)> = (0..3_000)
            .map(|i| (((i as u64 * 7_919) % 1_013) << (8 * (i % 7)), i))
            .collect();
        let mut expected = pairs.clone();
        expected.sort_by_key(|&(key, _)| key); // stable
        radix_sort(&mut pairs);
        assert_eq!(pairs, expected);
    }

    /// The special tokens of the test decoders: start and padding 0, end 1.
    pub(crate) const TEST_TOKENS: SpecialTokens = SpecialTokens {
        start: 0,
        end: 1,
        pad: 0,
    };

    /// The same next-token logits for every row at every step.
    struct Fixed {
        rows: usize,
        logits: Vec<f32>,
    }

    impl StepDecoder for Fixed {
        fn rows(&self) -> usize {
            self.rows
        }
        fn special_tokens(&self) -> SpecialTokens {
            TEST_TOKENS
        }
        fn step(&mut self, last: &[u32]) -> Vec<Vec<f32>> {
            vec![self.logits.clone(); last.len()]
        }
        fn repeat_rows(&mut self, times: usize) {
            self.rows *= times;
        }
        fn reorder(&mut self, rows: &[usize]) {
            self.rows = rows.len();
        }
    }

    #[test]
    fn a_beam_search_ends_with_its_finished_hypotheses_best_first() {
        // Tokens: 0 pad (banned), 1 end, 2 and 3 words; ending is likeliest, then 2, then 3.
        let logits = vec![0.0, 2.0, 1.5, 0.5];
        let settings = |search: Search| DecodeSettings {
            search,
            max_tokens: 10,
            banned: vec![0],
            logit_bias: Vec::new(),
            sentinels: None,
        };
        let beam = settings(Search::Beam {
            beams: 3,
            length_penalty: 0.0,
        });
        let run_all = |settings: &DecodeSettings| {
            let mut decoder = Fixed {
                rows: 2,
                logits: logits.clone(),
            };
            generate_all(&mut decoder, settings)
        };
        let all = run_all(&beam);
        assert_eq!(all.len(), 2);
        for outputs in &all {
            let tokens: Vec<&[u32]> = outputs.iter().map(|d| d.tokens.as_slice()).collect();
            assert_eq!(tokens, [&[][..], &[2], &[3]]);
            assert!(outputs.iter().all(|d| d.finished));
            assert!(outputs.windows(2).all(|w| w[0].log_prob > w[1].log_prob));
        }
        // One output per row is the best of them; greedy decoding ends with one.
        let mut decoder = Fixed {
            rows: 2,
            logits: logits.clone(),
        };
        assert_eq!(generate(&mut decoder, &beam), vec![all[0][0].clone(); 2]);
        assert!(
            run_all(&settings(Search::Greedy))
                .iter()
                .all(|o| o.len() == 1)
        );
    }

    #[test]
    fn the_sentinel_order_makes_every_output_a_well_formed_infill() {
        // Tokens: 0 pad (banned), 1 end, 2–5 the sentinels <s0>–<s3>, 6 and 7 words. Left
        // alone, the model ends at once, and would rather write <s2> or <s3> than <s1>.
        let logits = vec![0.0, 5.0, 0.0, 2.0, 4.0, 4.0, 1.0, 0.5];
        let order = SentinelOrder {
            due: vec![2, 3],
            all: vec![2, 3, 4, 5],
            max_fill: 20,
            pieces: None,
        };
        let settings = |search: Search, sentinels: Option<SentinelOrder>| DecodeSettings {
            search,
            max_tokens: 20,
            banned: vec![0],
            logit_bias: Vec::new(),
            sentinels,
        };
        let run_on = |logits: &[f32], settings: &DecodeSettings, rows: usize| {
            let mut decoder = Fixed {
                rows,
                logits: logits.to_vec(),
            };
            generate(&mut decoder, settings)
        };
        let run = |settings: &DecodeSettings, rows: usize| run_on(&logits, settings, rows);
        assert_eq!(
            run(&settings(Search::Greedy, None), 1)[0].tokens,
            Vec::<u32>::new()
        );
        let beam = Search::Beam {
            beams: 3,
            length_penalty: 1.0,
        };
        for search in [Search::Greedy, beam] {
            let decoded = run(&settings(search.clone(), Some(order.clone())), 1).remove(0);
            assert_eq!(decoded.tokens, [2, 6, 3, 6], "{search:?}");
            assert!(decoded.finished);
        }
        // Sampled: <s0>, one or more words, <s1>, one or more words, then the end.
        let nucleus = Search::Nucleus {
            top_p: 1.0,
            temperature: 1.0,
            seed: 5,
        };
        for decoded in run(&settings(nucleus, Some(order.clone())), 64) {
            let t = &decoded.tokens;
            let second = t.iter().position(|&x| x == 3).expect("<s1> came");
            assert!(decoded.finished && t[0] == 2 && second >= 2, "{t:?}");
            assert!(t.len() > second + 1, "{t:?}");
            let words = |part: &[u32]| part.iter().all(|&x| x >= 6);
            assert!(words(&t[1..second]) && words(&t[second + 1..]), "{t:?}");
        }
        // A model that would write word 6 forever: each fill stops at `max_fill` tokens, and
        // the output finishes well within the length limit.
        let looping = vec![0.0, -5.0, 0.0, -5.0, -5.0, -5.0, 5.0, 0.0];
        let capped = SentinelOrder {
            max_fill: 2,
            ..order
        };
        let decoded = run_on(&looping, &settings(Search::Greedy, Some(capped)), 1).remove(0);
        assert_eq!(decoded.tokens, [2, 6, 6, 3, 6, 6]);
        assert!(decoded.finished);
    }

    #[test]
    fn worded_fills_start_with_a_word_and_go_on_from_punctuation_with_a_word() {
        use PieceKind::*;
        // Tokens: 0 pad, 1 end, 2 and 3 the sentinels <s0> and <s1>, 4 "," and 5 ")" (the
        // model's favourites), 6 "▁good", 7 "s" (a word part), 8 "'" (a joiner).
        let pieces = FillPieces::new([
            None,
            None,
            None,
            None,
            Some(","),
            Some(")"),
            Some("\u{2581}good"),
            Some("s"),
            Some("'"),
        ]);
        assert_eq!(
            &*pieces.kinds,
            [
                Special,
                Special,
                Special,
                Special,
                Punctuation,
                Punctuation,
                WordStart,
                WordPart,
                Joiner
            ]
        );
        let logits = vec![0.0, 0.0, 0.0, 1.0, 6.0, 5.0, 2.0, 3.0, 4.5];
        let order = SentinelOrder {
            due: vec![2, 3],
            all: vec![2, 3],
            max_fill: 4,
            pieces: Some(pieces.clone()),
        };
        let settings = |search: Search| DecodeSettings {
            search,
            max_tokens: 11,
            banned: vec![0],
            logit_bias: Vec::new(),
            sentinels: Some(order.clone()),
        };
        let mut decoder = Fixed {
            rows: 1,
            logits: logits.clone(),
        };
        // A word first; after its "," only a word start (or the next sentinel) may come.
        let decoded = generate(&mut decoder, &settings(Search::Greedy)).remove(0);
        assert_eq!(decoded.tokens, [2, 6, 4, 6, 4, 3, 6, 4, 6, 4]);
        let nucleus = Search::Nucleus {
            top_p: 1.0,
            temperature: 1.0,
            seed: 3,
        };
        let mut decoder = Fixed { rows: 64, logits };
        let mut joined = 0;
        for decoded in generate(&mut decoder, &settings(nucleus)) {
            let t = &decoded.tokens;
            assert!(decoded.finished, "{t:?}");
            for pair in t.windows(2) {
                let next = pieces.kind(pair[1]);
                match pieces.kind(pair[0]) {
                    Special => assert_eq!(next, WordStart, "{t:?}"),
                    Punctuation => assert!(matches!(next, WordStart | Special), "{t:?}"),
                    Joiner => {
                        joined += 1;
                        assert!(!matches!(next, Punctuation | Joiner), "{t:?}");
                    }
                    _ => {}
                }
            }
        }
        assert!(joined > 0, "a joiner was drawn and followed");
    }

    #[test]
    fn argmax_takes_the_first_of_equal_maxima() {
        assert_eq!(argmax(&[0.1, 0.7, 0.7, 0.2]), 1);
    }

    #[test]
    fn best_tokens_equal_the_head_of_a_full_sort() {
        let mut rng = SplitMix64(7);
        for case in 0..200 {
            // Few distinct values, so ties are common; some tokens banned (−∞).
            let values: Vec<f32> = (0..50)
                .map(|_| match (rng.uniform() * 8.0) as u32 {
                    0 => f32::NEG_INFINITY,
                    v => -(v as f32),
                })
                .collect();
            let mut sorted: Vec<(f32, usize)> = values
                .iter()
                .copied()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, v)| (v, i))
                .collect();
            sorted.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let k = case % 9;
            sorted.truncate(k);
            assert_eq!(
                best_tokens(&values, k),
                sorted,
                "k = {k}, values {values:?}"
            );
        }
    }

    /// Each row's input wants to write `length` tokens (words 2 and 3, 3 likelier at odd steps)
    /// and then end; the decoder keeps each row's input and step, and records how many rows
    /// each step fed.
    struct Lengths {
        /// Per row: its input's length and the steps it has taken.
        rows: Vec<(usize, usize)>,
        fed: Vec<usize>,
    }

    impl StepDecoder for Lengths {
        fn rows(&self) -> usize {
            self.rows.len()
        }
        fn special_tokens(&self) -> SpecialTokens {
            TEST_TOKENS
        }
        fn step(&mut self, last: &[u32]) -> Vec<Vec<f32>> {
            assert_eq!(last.len(), self.rows.len());
            self.fed.push(last.len());
            self.rows
                .iter_mut()
                .map(|(length, steps)| {
                    *steps += 1;
                    let end = if *steps > *length { 3.0 } else { -3.0 };
                    let odd = (*steps % 2) as f32;
                    vec![-9.0, end, 1.0 - odd, 0.5 + odd]
                })
                .collect()
        }
        fn repeat_rows(&mut self, times: usize) {
            self.rows = self
                .rows
                .iter()
                .flat_map(|&row| std::iter::repeat_n(row, times))
                .collect();
        }
        fn reorder(&mut self, rows: &[usize]) {
            self.rows = rows.iter().map(|&r| self.rows[r]).collect();
        }
    }

    /// Inputs that end early leave the decoder, and each input's outputs are those it gets
    /// decoded alone.
    #[test]
    fn finished_inputs_leave_the_batch_without_changing_any_output() {
        let lengths = [2, 7, 4];
        let decoder = |lengths: &[usize]| Lengths {
            rows: lengths.iter().map(|&length| (length, 0)).collect(),
            fed: Vec::new(),
        };
        for search in [
            Search::Greedy,
            Search::Beam {
                beams: 3,
                length_penalty: 1.0,
            },
        ] {
            let settings = DecodeSettings {
                search: search.clone(),
                max_tokens: 20,
                banned: vec![0],
                logit_bias: Vec::new(),
                sentinels: None,
            };
            let mut together = decoder(&lengths);
            let outputs = generate_all(&mut together, &settings);
            for (input, &length) in lengths.iter().enumerate() {
                let alone = generate_all(&mut decoder(&[length]), &settings).remove(0);
                assert_eq!(outputs[input], alone, "{search:?}, input {input}");
                assert_eq!(alone[0].tokens.len(), length, "{search:?}");
            }
            let per_input = together.fed[0] / lengths.len();
            let fed: Vec<usize> = together.fed.iter().map(|rows| rows / per_input).collect();
            // Input 0 leaves first, then input 2; input 1 decodes alone to the end.
            assert!(fed.windows(2).all(|w| w[0] >= w[1]), "{search:?}: {fed:?}");
            assert_eq!(fed[0], 3, "{search:?}: {fed:?}");
            assert!(fed.contains(&2), "{search:?}: {fed:?}");
            assert_eq!(fed[fed.len() - 1], 1, "{search:?}: {fed:?}");
        }
    }
}
