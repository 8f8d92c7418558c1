//! The embedded engine: GGUF models run in-process by llama.cpp (through `llama-cpp-2`), on CPU,
//! or on the GPU when built with the `cuda` feature.
//!
//! One context serves requests one at a time and keeps the tokens of the last prompt in its KV
//! cache: a request that shares a prefix with the previous one (every few-shot prompt does)
//! only evaluates the tokens after it. Perplexity scores texts together, as sequences of one
//! batch: texts that differ in a few words (LASS's beam hypotheses and their source, AutoCAD's
//! candidates) evaluate their shared opening once, and the larger batch runs faster. A scorer
//! ([`Fluency::scorer`]) holds a context for texts that come one after another (LASS scores its
//! hypotheses in turn, stopping at the first that passes) and keeps each in the cache, so that
//! a later text evaluates only what comes after the opening it shares with an earlier one.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, ensure};
use flipside_shared::ops::softmax::log_sum_exp;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use serde::Serialize;

use super::{
    Abandoned, Completion, FinishReason, Fluency, LlmClient, Message, Prompt, Rejected, Request,
    Scorer, cut_at_stop, settled_len,
};

/// Engine settings.
#[derive(Debug, Clone, Copy)]
pub struct EngineOptions {
    /// Context length in tokens (prompt + completion).
    pub context: u32,
    /// Tokens per forward pass while reading the prompt.
    pub batch: u32,
    /// CPU threads (default: all cores).
    pub threads: Option<usize>,
    /// Callers served at once, each by a context of its own with `threads / contexts` threads
    /// (at least one). Scoring's small batches cost fewer CPU-seconds on one thread a context:
    /// two threads on one batch wait for each other between its operations.
    pub contexts: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            context: 4096,
            batch: 512,
            threads: None,
            contexts: 1,
        }
    }
}

/// Token counts and wall-clock times of a benchmark run.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Timings {
    pub prompt_tokens: usize,
    pub prompt_ms: f64,
    pub decode_tokens: usize,
    pub decode_ms: f64,
}

/// A loaded GGUF model with its inference contexts ([`EngineOptions::contexts`]).
pub struct LocalEngine {
    name: String,
    model: &'static LlamaModel,
    sessions: Vec<Mutex<Session>>,
    /// The session a caller tries first, in turn.
    next: AtomicUsize,
    batch: usize,
}

struct Session {
    context: LlamaContext<'static>,
    /// The tokens a generation left in the context's cache (sequence 0), in order; empty
    /// after scoring, which clears the cache.
    cached: Vec<LlamaToken>,
    /// The texts a [`ReusingScorer`] left in the cache, each a sequence of its own.
    scored: Vec<ScoredText>,
}

impl Session {
    /// Empties the cache, and forgets what it held.
    fn clear(&mut self) {
        self.context.clear_kv_cache();
        self.cached.clear();
        self.scored.clear();
    }
}

/// A scored text kept in the cache: the cells of its positions but the last (whose K and V
/// nothing of its own reads), and its tokens' log probabilities.
struct ScoredText {
    sequence: i32,
    tokens: Vec<LlamaToken>,
    log_probs: Vec<f32>,
}

/// The prefix tree of texts in token order: each node is one token at one position, on the
/// path of texts `first..=last`, depth first (a node before its children).
struct PrefixTree {
    nodes: Vec<Node>,
}

struct Node {
    token: LlamaToken,
    position: usize,
    first: usize,
    last: usize,
}

impl PrefixTree {
    /// The tree of `texts` (sorted).
    fn new(texts: &[&[LlamaToken]]) -> Self {
        let mut nodes: Vec<Node> = Vec::new();
        // The nodes of the previous text's path.
        let mut path: Vec<usize> = Vec::new();
        for (index, text) in texts.iter().enumerate() {
            let shared = match index {
                0 => 0,
                _ => common_prefix(texts[index - 1], text),
            };
            path.truncate(shared);
            for &node in &path {
                nodes[node].last = index;
            }
            for (position, &token) in text.iter().enumerate().skip(shared) {
                path.push(nodes.len());
                nodes.push(Node {
                    token,
                    position,
                    first: index,
                    last: index,
                });
            }
        }
        PrefixTree { nodes }
    }
}

/// Texts [`LocalEngine::token_log_probs_all`] evaluates in one pass, each a sequence of the
/// context's (unified) cache. Eight covers LASS's four beam hypotheses and their source.
pub const SCORED_TOGETHER: usize = 8;

/// llama.cpp, initialised once.
pub(super) fn backend() -> Result<&'static LlamaBackend> {
    static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
    if let Some(backend) = BACKEND.get() {
        return Ok(backend);
    }
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default().with_logs_enabled(false));
    let backend = LlamaBackend::init().context("cannot initialise llama.cpp")?;
    Ok(BACKEND.get_or_init(|| backend))
}

/// Models stay loaded for the life of the process (contexts borrow them); loading the same file
/// twice returns the same model.
fn load_model(path: &Path) -> Result<&'static LlamaModel> {
    static MODELS: OnceLock<Mutex<HashMap<PathBuf, &'static LlamaModel>>> = OnceLock::new();
    let backend = backend()?;
    let mut models = MODELS.get_or_init(Default::default).lock().unwrap();
    let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if let Some(model) = models.get(&key) {
        return Ok(model);
    }
    ensure!(path.is_file(), "no GGUF model at {}", path.display());
    let gpu_layers = if cfg!(feature = "cuda") { 1000 } else { 0 };
    let params = LlamaModelParams::default().with_n_gpu_layers(gpu_layers);
    let model = LlamaModel::load_from_file(backend, path, &params)
        .map_err(|e| anyhow!("cannot load {} as a GGUF model: {e}", path.display()))?;
    let model: &'static LlamaModel = Box::leak(Box::new(model));
    models.insert(key, model);
    Ok(model)
}

impl LocalEngine {
    /// Loads the GGUF file at `path`; `name` is recorded as the model of its outputs.
    pub fn load(name: &str, path: &Path, options: EngineOptions) -> Result<Self> {
        let model = load_model(path)?;
        let threads = options.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        let contexts = options.contexts.max(1);
        let threads = (threads / contexts).max(1) as i32;
        let context_len = options.context.min(model.n_ctx_train().max(512));
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(context_len))
            .with_n_batch(options.batch)
            .with_n_ubatch(options.batch)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            .with_n_seq_max(SCORED_TOGETHER as u32)
            .with_kv_unified(true)
            .with_no_perf(false);
        let sessions = (0..contexts)
            .map(|_| {
                let context = model
                    .new_context(backend()?, params.clone())
                    .map_err(|e| anyhow!("cannot create a llama.cpp context: {e}"))?;
                Ok(Mutex::new(Session {
                    context,
                    cached: Vec::new(),
                    scored: Vec::new(),
                }))
            })
            .collect::<Result<_>>()?;
        Ok(LocalEngine {
            name: name.to_string(),
            model,
            sessions,
            next: AtomicUsize::new(0),
            batch: options.batch as usize,
        })
    }

    /// The contexts that serve callers at once.
    pub fn contexts(&self) -> usize {
        self.sessions.len()
    }

    /// A free session, else the next one in turn once it is free.
    fn session(&self) -> MutexGuard<'_, Session> {
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let count = self.sessions.len();
        (0..count)
            .find_map(|i| self.sessions[(first + i) % count].try_lock().ok())
            .unwrap_or_else(|| self.sessions[first % count].lock().unwrap())
    }

    /// The prompt's text: chats are formatted with the model's own chat template.
    pub fn render(&self, prompt: &Prompt) -> Result<String> {
        match prompt {
            Prompt::Text(text) => Ok(text.clone()),
            Prompt::Chat(messages) => {
                let template = self
                    .model
                    .chat_template(None)
                    .map_err(|e| anyhow!("{}: no chat template: {e}", self.name))?;
                let messages = messages
                    .iter()
                    .map(|m| LlamaChatMessage::new(m.role.clone(), m.content.clone()))
                    .collect::<Result<Vec<_>, _>>()?;
                self.model
                    .apply_chat_template(&template, &messages, true)
                    .map_err(|e| anyhow!("{}: cannot apply the chat template: {e}", self.name))
            }
        }
    }

    /// The prompt's tokens. A chat's messages are read as plain text, and only the chat
    /// template's own markup becomes control tokens: a message holding `<|im_start|>system`
    /// cannot open a turn of another role. A text prompt is the caller's whole input, control
    /// tokens included.
    pub fn prompt_tokens(&self, prompt: &Prompt) -> Result<Vec<LlamaToken>> {
        let Prompt::Chat(messages) = prompt else {
            return Ok(self.tokenize(&self.render(prompt)?, true));
        };
        // The template applied to placeholders shows where each message's text goes.
        let placeholders: Vec<String> = (0..messages.len())
            .map(|i| format!("\u{F8F0}{i}\u{F8F1}"))
            .collect();
        let skeleton = self.render(&Prompt::Chat(
            messages
                .iter()
                .zip(&placeholders)
                .map(|(message, placeholder)| Message::new(&message.role, placeholder.as_str()))
                .collect(),
        ))?;
        let vocab = self.model.vocab();
        let mut tokens = Vec::new();
        let mut rest = skeleton.as_str();
        for (message, placeholder) in messages.iter().zip(&placeholders) {
            let at = rest.find(placeholder.as_str()).ok_or_else(|| {
                anyhow!(
                    "{}: the chat template rewrites messages, so their text cannot be kept \
                     apart from control tokens",
                    self.name
                )
            })?;
            let add_bos = tokens.is_empty() && vocab.should_add_bos();
            tokens.extend(vocab.tokenize(&rest.as_bytes()[..at], add_bos, true));
            tokens.extend(vocab.tokenize(message.content.as_bytes(), false, false));
            rest = &rest[at + placeholder.len()..];
        }
        tokens.extend(vocab.tokenize(rest.as_bytes(), false, true));
        Ok(tokens)
    }

    /// Token ids of `text` (with the model's start token when it wants one).
    pub fn tokenize(&self, text: &str, parse_special: bool) -> Vec<LlamaToken> {
        let vocab = self.model.vocab();
        vocab.tokenize(text.as_bytes(), vocab.should_add_bos(), parse_special)
    }

    /// The natural-log probability of each token of `text` given the ones before it (the first
    /// token, or the start token, is the context only). Used for perplexity.
    pub fn token_log_probs(&self, text: &str) -> Result<Vec<f32>> {
        self.token_log_probs_all(&[text])?.remove(0)
    }

    /// [`Self::token_log_probs`] of each of `texts`, evaluated together: up to
    /// [`SCORED_TOGETHER`] texts share a pass as sequences of one batch, and an opening several
    /// of them share (LASS's hypotheses and their source, AutoCAD's candidates) is evaluated
    /// once. A text too short or too long to score fails alone; a failing pass fails all.
    pub fn token_log_probs_all(&self, texts: &[&str]) -> Result<Vec<Result<Vec<f32>>>> {
        let mut session = self.session();
        let (tokens, scored) = self.scorable(&session, texts);
        self.score_fresh(&mut session, &tokens, scored)
    }

    /// Each of `texts`' tokens, and for each an empty row to score into, or why it cannot be
    /// scored in `session`'s context (too short or too long).
    #[allow(clippy::type_complexity)]
    fn scorable(
        &self,
        session: &Session,
        texts: &[&str],
    ) -> (Vec<Vec<LlamaToken>>, Vec<Result<Vec<f32>>>) {
        let limit = session.context.n_ctx() as usize;
        let tokens: Vec<Vec<LlamaToken>> = texts.iter().map(|t| self.tokenize(t, false)).collect();
        let scored = texts
            .iter()
            .zip(&tokens)
            .map(|(text, tokens)| {
                ensure!(tokens.len() >= 2, "too short to score: {text:?}");
                ensure!(
                    tokens.len() <= limit,
                    "{} tokens exceed the context of {limit}",
                    tokens.len()
                );
                Ok(Vec::new())
            })
            .collect();
        (tokens, scored)
    }

    /// The log probabilities of `tokens`' texts (those `scored` holds a row for), from an
    /// emptied cache, in as few passes as the cache holds.
    fn score_fresh(
        &self,
        session: &mut Session,
        tokens: &[Vec<LlamaToken>],
        mut scored: Vec<Result<Vec<f32>>>,
    ) -> Result<Vec<Result<Vec<f32>>>> {
        let limit = session.context.n_ctx() as usize;
        session.scored.clear();
        // In token order, texts sharing an opening are neighbours.
        let mut order: Vec<usize> = (0..tokens.len()).filter(|&i| scored[i].is_ok()).collect();
        order.sort_by(|&a, &b| tokens[a].cmp(&tokens[b]));
        let mut passes: Vec<(Vec<&[LlamaToken]>, Vec<usize>)> = Vec::new();
        let mut cells = 0;
        for index in order {
            let text = tokens[index].as_slice();
            // The cells `text` adds to the last pass: those after the opening it shares there.
            let added = passes.last().map_or(text.len(), |(pass, _)| {
                text.len() - common_prefix(pass.last().expect("not empty"), text)
            });
            match passes.last_mut() {
                Some((pass, indices)) if pass.len() < SCORED_TOGETHER && cells + added <= limit => {
                    cells += added;
                    pass.push(text);
                    indices.push(index);
                }
                _ => {
                    cells = text.len();
                    passes.push((vec![text], vec![index]));
                }
            }
        }
        for (pass, indices) in passes {
            for (index, log_probs) in indices.into_iter().zip(self.score_pass(session, pass)?) {
                scored[index] = Ok(log_probs);
            }
        }
        Ok(scored)
    }

    /// The log probabilities of `texts` (in token order, fitting the cache together), text
    /// `i` evaluated as sequence `i` of an emptied cache.
    fn score_pass(
        &self,
        session: &mut Session,
        texts: Vec<&[LlamaToken]>,
    ) -> Result<Vec<Vec<f32>>> {
        session.clear();
        let sequences: Vec<i32> = (0..texts.len() as i32).collect();
        let mut log_probs: Vec<Vec<f32>> = texts.iter().map(|t| vec![0.0; t.len() - 1]).collect();
        self.evaluate(
            session,
            &texts,
            &vec![0; texts.len()],
            &sequences,
            &mut log_probs,
        )?;
        Ok(log_probs)
    }

    /// Evaluates `texts` (in token order) from position `starts[i]` of text `i` on, as
    /// sequence `sequences[i]` (whose cells before its start are in the cache), into the rows
    /// of `log_probs`: an opening several texts share is evaluated once.
    fn evaluate(
        &self,
        session: &mut Session,
        texts: &[&[LlamaToken]],
        starts: &[usize],
        sequences: &[i32],
        log_probs: &mut [Vec<f32>],
    ) -> Result<()> {
        let tree = PrefixTree::new(texts);
        // A node is evaluated for the texts that start at or before it and whose next token it
        // predicts (leaves that end texts only are left out).
        let evaluated: Vec<(&Node, Vec<i32>)> = tree
            .nodes
            .iter()
            .filter_map(|node| {
                let texts: Vec<i32> = (node.first..=node.last)
                    .filter(|&t| starts[t] <= node.position && texts[t].len() > node.position + 1)
                    .map(|t| sequences[t])
                    .collect();
                (!texts.is_empty()).then_some((node, texts))
            })
            .collect();
        let mut batch = LlamaBatch::new(self.batch, SCORED_TOGETHER as i32);
        for chunk in evaluated.chunks(self.batch) {
            batch.clear();
            for (node, sequences) in chunk {
                batch.add(node.token, node.position as i32, sequences, true)?;
            }
            session.context.decode(&mut batch)?;
            for (offset, (node, _)) in chunk.iter().enumerate() {
                let logits = session.context.get_logits_ith(offset as i32);
                let normaliser = log_sum_exp(logits);
                for t in node.first..=node.last {
                    if starts[t] > node.position {
                        continue;
                    }
                    if let Some(next) = texts[t].get(node.position + 1) {
                        log_probs[t][node.position] = logits[next.0 as usize] - normaliser;
                    }
                }
            }
        }
        Ok(())
    }

    /// [`Self::token_log_probs_all`] for a [`ReusingScorer`]: each text starts from the cached
    /// text it shares the longest opening with (its cells and log probabilities up to there),
    /// and stays in the cache for the next call. Texts that do not fit beside the cached ones
    /// are scored from an emptied cache. A failure empties the cache: a pass that fails midway
    /// leaves cells in sequences no record names.
    fn score_reusing(
        &self,
        session: &mut Session,
        texts: &[&str],
    ) -> Result<Vec<Result<Vec<f32>>>> {
        let scored = self.score_from_cache(session, texts);
        if scored.is_err() {
            session.clear();
        }
        scored
    }

    /// [`Self::score_reusing`], which empties the cache if this fails.
    fn score_from_cache(
        &self,
        session: &mut Session,
        texts: &[&str],
    ) -> Result<Vec<Result<Vec<f32>>>> {
        if session.scored.is_empty() {
            // What an earlier fresh pass or a generation left is not reused.
            session.clear();
        }
        let (tokens, mut scored) = self.scorable(session, texts);
        let valid: Vec<usize> = (0..texts.len()).filter(|&i| scored[i].is_ok()).collect();
        let limit = session.context.n_ctx() as usize;
        // At most every cached and new token a cell of its own (shared openings need fewer).
        let cells: usize = session.scored.iter().map(|s| s.tokens.len()).sum::<usize>()
            + valid.iter().map(|&i| tokens[i].len()).sum::<usize>();
        if session.scored.len() + valid.len() > SCORED_TOGETHER || cells > limit {
            return self.score_fresh(session, &tokens, scored);
        }
        // Each new text's best cached text: a text that is one of them or its opening is read
        // off it; the others start one token before the shared opening ends (that token's
        // logits predict the first new one).
        // (text, first position evaluated, sequence, its log probabilities so far)
        let mut pending: Vec<(usize, usize, i32, Vec<f32>)> = Vec::new();
        let mut free = (0..SCORED_TOGETHER as i32)
            .filter(|id| session.scored.iter().all(|s| s.sequence != *id))
            .collect::<Vec<_>>()
            .into_iter();
        for &i in &valid {
            let text = &tokens[i];
            let best = session
                .scored
                .iter()
                .map(|cached| (common_prefix(&cached.tokens, text), cached))
                .max_by_key(|(shared, _)| *shared);
            let mut log_probs = vec![0.0; text.len() - 1];
            let (start, from) = match best {
                Some((shared, cached)) if shared == text.len() => {
                    log_probs.copy_from_slice(&cached.log_probs[..text.len() - 1]);
                    scored[i] = Ok(log_probs);
                    continue;
                }
                Some((shared, cached)) if shared > 1 => {
                    let start = shared - 1;
                    log_probs[..start].copy_from_slice(&cached.log_probs[..start]);
                    (start, Some(cached.sequence))
                }
                _ => (0, None),
            };
            let sequence = free.next().expect("checked: a sequence for each new text");
            if let Some(from) = from {
                session
                    .context
                    .copy_kv_cache_seq(from, sequence, Some(0), Some(start as u32))?;
            }
            pending.push((i, start, sequence, log_probs));
        }
        if pending.is_empty() {
            return Ok(scored);
        }
        pending.sort_by(|a, b| tokens[a.0].cmp(&tokens[b.0]));
        let (pending, mut rows): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .map(|(i, start, sequence, row)| ((i, start, sequence), row))
            .unzip();
        let texts: Vec<&[LlamaToken]> = pending
            .iter()
            .map(|&(i, ..)| tokens[i].as_slice())
            .collect();
        let starts: Vec<usize> = pending.iter().map(|&(_, start, _)| start).collect();
        let sequences: Vec<i32> = pending.iter().map(|&(.., sequence)| sequence).collect();
        self.evaluate(session, &texts, &starts, &sequences, &mut rows)?;
        for (&(i, _, sequence), row) in pending.iter().zip(rows) {
            session.scored.push(ScoredText {
                sequence,
                tokens: tokens[i].clone(),
                log_probs: row.clone(),
            });
            scored[i] = Ok(row);
        }
        Ok(scored)
    }

    /// Speed measurement: evaluates `prompt` from an empty cache, then decodes `decode` tokens
    /// greedily (end-of-sequence tokens included, so the count is exact). Wall-clock times.
    pub fn bench(&self, prompt: &[LlamaToken], decode: usize) -> Result<Timings> {
        let mut session = self.session();
        ensure!(
            prompt.len() + decode <= session.context.n_ctx() as usize,
            "the benchmark does not fit the context"
        );
        session.clear();
        let mut batch = LlamaBatch::new(self.batch, 1);
        let started = Instant::now();
        for (chunk_index, chunk) in prompt.chunks(self.batch).enumerate() {
            batch.clear();
            for (offset, &token) in chunk.iter().enumerate() {
                let position = chunk_index * self.batch + offset;
                batch.add(token, position as i32, &[0], position + 1 == prompt.len())?;
            }
            session.context.decode(&mut batch)?;
        }
        let prompt_ms = started.elapsed().as_secs_f64() * 1e3;
        let mut sampler = LlamaSampler::greedy();
        let started = Instant::now();
        for step in 0..decode {
            let token = sampler.sample(&session.context, -1);
            batch.clear();
            batch.add(token, (prompt.len() + step) as i32, &[0], true)?;
            session.context.decode(&mut batch)?;
        }
        let decode_ms = started.elapsed().as_secs_f64() * 1e3;
        session.context.clear_kv_cache();
        Ok(Timings {
            prompt_tokens: prompt.len(),
            prompt_ms,
            decode_tokens: decode,
            decode_ms,
        })
    }

    /// Completes `request`, handing `on_text` (if any) each settled piece of the reply as it is
    /// written.
    fn generate(
        &self,
        request: &Request,
        mut on_text: Option<&mut dyn FnMut(&str)>,
    ) -> Result<Completion> {
        let tokens = self.prompt_tokens(&request.prompt)?;
        ensure!(!tokens.is_empty(), "empty prompt");
        let mut guard = self.session();
        let session = &mut *guard;
        let limit = session.context.n_ctx() as usize;
        if tokens.len().saturating_add(request.sampling.max_tokens) > limit {
            return Err(Rejected(format!(
                "the prompt has {} tokens; with max_tokens {} that exceeds the context of {limit}",
                tokens.len(),
                request.sampling.max_tokens
            ))
            .into());
        }
        // Reuse the cached prefix; at least the last prompt token is evaluated for its logits.
        let shared = common_prefix(&session.cached, &tokens).min(tokens.len() - 1);
        if shared == 0 {
            // Also what scoring left in other sequences: the prompt may need every cell.
            session.clear();
        } else {
            session
                .context
                .clear_kv_cache_seq(Some(0), Some(shared as u32), None)?;
            session.cached.truncate(shared);
        }
        session.context.reset_timings();

        let mut batch = LlamaBatch::new(self.batch, 1);
        // The last prompt token is evaluated alone whether or not the rest came from the cache:
        // a batch's size picks llama.cpp's kernels, and so the last digits of the logits sampling
        // starts from; this way the same request gets the same reply either way.
        let pending = &tokens[shared..];
        let (opening, last) = pending.split_at(pending.len() - 1);
        let chunks = opening.chunks(self.batch).chain([last]);
        let mut position = shared;
        for chunk in chunks.filter(|chunk| !chunk.is_empty()) {
            ensure!(!request.cancel.is_cancelled(), Abandoned);
            batch.clear();
            for &token in chunk {
                batch.add(token, position as i32, &[0], position + 1 == tokens.len())?;
                position += 1;
            }
            session.context.decode(&mut batch)?;
        }
        session.cached.extend_from_slice(pending);

        let sampling = request.sampling;
        let mut sampler = if sampling.temperature <= 0.0 {
            LlamaSampler::greedy()
        } else {
            LlamaSampler::chain_simple([
                LlamaSampler::top_p(sampling.top_p, 1),
                LlamaSampler::temp(sampling.temperature),
                LlamaSampler::dist(sampling.seed as u32),
            ])
        };
        let vocab = self.model.vocab();
        let mut bytes = Vec::new();
        let mut text = String::new();
        let mut finish = FinishReason::Length;
        let mut generated = 0;
        // How much of `text` `on_text` has had.
        let mut sent = 0;
        while generated < sampling.max_tokens {
            ensure!(!request.cancel.is_cancelled(), Abandoned);
            let token = sampler.sample(&session.context, -1);
            if vocab.is_eog(token) {
                finish = FinishReason::Stop;
                break;
            }
            generated += 1;
            vocab.token_to_piece_into(token, &mut bytes, false, None);
            text = String::from_utf8_lossy(&bytes).into_owned();
            if cut_at_stop(&mut text, &request.stop) {
                finish = FinishReason::Stop;
                break;
            }
            if let Some(on_text) = on_text.as_mut() {
                let settled = settled_len(&text, &request.stop);
                if settled > sent {
                    on_text(&text[sent..settled]);
                    sent = settled;
                }
            }
            batch.clear();
            batch.add(token, session.cached.len() as i32, &[0], true)?;
            session.context.decode(&mut batch)?;
            session.cached.push(token);
        }
        if let (Some(on_text), Some(rest)) = (on_text, text.get(sent..))
            && !rest.is_empty()
        {
            on_text(rest);
        }
        Ok(Completion {
            text,
            prompt_tokens: tokens.len(),
            completion_tokens: generated,
            finish_reason: finish,
        })
    }
}

impl LlmClient for LocalEngine {
    fn model(&self) -> &str {
        &self.name
    }

    fn complete(&self, request: &Request) -> Result<Completion> {
        self.generate(request, None)
    }

    fn complete_streaming(
        &self,
        request: &Request,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Completion> {
        self.generate(request, Some(on_text))
    }
}

impl Fluency for LocalEngine {
    fn model(&self) -> &str {
        &self.name
    }

    fn perplexity(&self, text: &str) -> Result<f64> {
        self.perplexities(&[text]).remove(0)
    }

    fn perplexities(&self, texts: &[&str]) -> Vec<Result<f64>> {
        perplexities(self.token_log_probs_all(texts), texts.len())
    }

    /// Holds one of the engine's contexts until dropped.
    fn scorer(&self) -> Box<dyn Scorer + '_> {
        let mut session = self.session();
        session.clear();
        Box::new(ReusingScorer {
            engine: self,
            session,
        })
    }
}

/// Scores texts one call after another in one context, each call reusing what the earlier
/// ones evaluated of their openings ([`LocalEngine::score_reusing`]).
struct ReusingScorer<'a> {
    engine: &'a LocalEngine,
    session: MutexGuard<'a, Session>,
}

impl Scorer for ReusingScorer<'_> {
    fn perplexities(&mut self, texts: &[&str]) -> Vec<Result<f64>> {
        let scored = self.engine.score_reusing(&mut self.session, texts);
        perplexities(scored, texts.len())
    }
}

impl Drop for ReusingScorer<'_> {
    /// The context goes back with an empty cache.
    fn drop(&mut self) {
        self.session.clear();
    }
}

/// Perplexities from the log probabilities of `count` texts (a failure of the whole: each
/// text's).
fn perplexities(scored: Result<Vec<Result<Vec<f32>>>>, count: usize) -> Vec<Result<f64>> {
    match scored {
        Ok(scored) => scored
            .into_iter()
            .map(|log_probs| Ok(perplexity(&log_probs?)))
            .collect(),
        Err(error) => (0..count).map(|_| Err(anyhow!("{error:#}"))).collect(),
    }
}

/// `exp` of the mean negative log probability.
fn perplexity(log_probs: &[f32]) -> f64 {
    let mean = log_probs.iter().map(|&l| f64::from(l)).sum::<f64>() / log_probs.len() as f64;
    (-mean).exp()
}

fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_tree_has_a_node_per_distinct_opening_depth_first() {
        let t = |v: &[i32]| v.iter().map(|&i| LlamaToken(i)).collect::<Vec<_>>();
        let texts = [
            t(&[1, 2, 3]),
            t(&[1, 2, 4, 5]),
            t(&[1, 2, 4, 6]),
            t(&[7, 8]),
        ];
        let texts: Vec<&[LlamaToken]> = texts.iter().map(Vec::as_slice).collect();
        // (token, position, first text, last text)
        let nodes: Vec<_> = PrefixTree::new(&texts)
            .nodes
            .iter()
            .map(|n| (n.token.0, n.position, n.first, n.last))
            .collect();
        let expected = [
            (1, 0, 0, 2),
            (2, 1, 0, 2),
            (3, 2, 0, 0),
            (4, 2, 1, 2),
            (5, 3, 1, 1),
            (6, 3, 2, 2),
            (7, 0, 3, 3),
            (8, 1, 3, 3),
        ];
        assert_eq!(nodes, expected);
    }

    #[test]
    fn common_prefix_counts_equal_leading_tokens() {
        let t = |v: &[i32]| v.iter().map(|&i| LlamaToken(i)).collect::<Vec<_>>();
        assert_eq!(common_prefix(&t(&[1, 2, 3]), &t(&[1, 2, 4, 5])), 2);
        assert_eq!(common_prefix(&t(&[]), &t(&[1])), 0);
    }
}
