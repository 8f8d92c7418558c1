//! The counterfactual record: what every method writes (`flipside generate`'s JSON lines, a
//! server job's results, the demo's answer) and what the browser app and the review portal
//! read. Common fields — the original and the edit, labels, method, model, seed, timings and
//! the classifier's verdict — plus a typed [`Provenance`] that each method family fills with
//! what it made the edit from.
//!
//! Records written before typed provenance existed (CORE's fields at the top level, timings
//! named after CORE's stages) still load: [`Counterfactual`] deserialises either shape.

use serde::{Deserialize, Serialize};

/// One counterfactual and its full provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(from = "StoredCounterfactual")]
pub struct Counterfactual {
    /// `ITEM→TARGET`: unique in a file.
    pub key: String,
    /// The example's id in its dataset.
    pub item: String,
    /// The method's id (`core`, `llm-only`, `retrieve-only`, …).
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub premise: Option<String>,
    pub original: String,
    pub edited: String,
    pub label: String,
    pub target: String,
    /// The model that made the edit (an LLM, …); none for methods without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The attempt's seed (derived from the run's seed, the item and the attempt number).
    pub seed: u64,
    /// 1 for the first try.
    pub attempt: usize,
    pub timing: Timing,
    /// The classifier's label for the edited text.
    pub prediction: String,
    /// The classifier's probability of the target label.
    pub target_probability: f32,
    /// Whether the prediction is the target label.
    pub flipped: bool,
    /// What the method made the edit from.
    pub provenance: Provenance,
    /// How the edit was chosen among several candidates of its attempt (`--candidates`), when
    /// it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<FluencyChoice>,
}

/// The most fluent of an attempt's candidates: the one a language model found least perplexing
/// (with `--verify`, among those the classifier flips; those it flips surely first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FluencyChoice {
    /// The language model that scored them.
    pub model: String,
    /// The kept edit's perplexity under it (none when it could not score it).
    pub perplexity: Option<f64>,
    /// Candidates the editor proposed in the attempt (including ones with no usable edit).
    pub candidates: usize,
    /// Of those, the usable edits it chose among (with `--verify`: the flipped ones).
    pub eligible: usize,
    /// Every other usable edit of the attempt (passed over, or refused by the classifier), in
    /// the order proposed: what the editor wrote before any choice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<String>,
}

impl Counterfactual {
    /// The keywords the edit was guided by (CORE, retrieval-guided AutoCAD), if any.
    pub fn keywords(&self) -> &[String] {
        match &self.provenance {
            Provenance::Core(core) => &core.keywords,
            Provenance::Autocad(autocad) => &autocad.keywords,
            Provenance::Lass(_) => &[],
        }
    }
}

/// The method-specific part of a record, tagged by `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Provenance {
    /// CORE and its ablations: query sentences, retrieved helpers, keywords and the LLM prompt.
    Core(CoreProvenance),
    /// AutoCAD: the masked rationales and the infiller's fills.
    Autocad(AutocadProvenance),
    /// LASS: the parents the Dis-AE recombined, and the filters' scores.
    Lass(LassProvenance),
}

/// How a LASS edit was made: the record's original is the content parent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LassProvenance {
    /// The text whose sentiment was used (the sentiment parent); none when it was the target
    /// label's learnt vector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentiment_parent: Option<String>,
    /// How the Dis-AE decoded: `beam 4`, or nucleus sampling on later attempts.
    pub search: String,
    /// The decoder's mean log-probability per generated token.
    pub mean_log_prob: f64,
    /// Perplexity of the edit under the fluency model, when one filtered it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
}

/// How an AutoCAD edit was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AutocadProvenance {
    /// The text with each rationale span replaced by its sentinel (`<extra_id_k>`).
    pub masked: String,
    /// The words each span masked, in order.
    pub spans: Vec<String>,
    /// What the infiller wrote into each span, in order.
    pub fills: Vec<String>,
    /// How the rationales were chosen: `saliency` or `random`.
    pub rationales: String,
    /// The classifier's probability of the item's label when it got the item wrong or was
    /// unsure of it (AutoCAD's rule would give it no rationale; its most salient words were
    /// masked anyway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsure: Option<f32>,
    /// The infiller's generated ids decoded with sentinels, that the fills were read from.
    pub reply: String,
    /// The weight of the label contrast that steered the fills away from the item's label
    /// (none: sampled from the target label alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_contrast: Option<f32>,
    /// The retrieved keywords in the infiller's input (retrieval-guided infilling only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keywords: Vec<String>,
    /// The retrieved sentences the keywords came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retrieved: Vec<Excerpt>,
}

impl AutocadProvenance {
    /// How the rationale was chosen, for people: `saliency`, or with the classifier's doubt.
    pub fn rationale_rule(&self) -> String {
        match self.unsure {
            Some(p) => format!(
                "{}; the classifier gave the item's label p = {p:.2}",
                self.rationales
            ),
            None => self.rationales.clone(),
        }
    }
}

#[cfg(test)]
mod autocad_provenance_tests {
    use super::AutocadProvenance;

    #[test]
    fn the_rationale_rule_says_when_the_classifier_was_unsure() {
        let mut provenance = AutocadProvenance {
            rationales: "saliency".into(),
            ..AutocadProvenance::default()
        };
        assert_eq!(provenance.rationale_rule(), "saliency");
        provenance.unsure = Some(0.404);
        assert_eq!(
            provenance.rationale_rule(),
            "saliency; the classifier gave the item's label p = 0.40"
        );
    }
}

/// How a CORE-family edit was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CoreProvenance {
    /// The sentences of the original used as retrieval queries.
    #[serde(default)]
    pub queries: Vec<String>,
    #[serde(default)]
    pub retrieved: Vec<Excerpt>,
    /// The keywords the prompt was given (none for LLM-only).
    #[serde(default)]
    pub keywords: Vec<String>,
    /// The prompt template (none for retrieve-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    /// The LLM's whole reply, that the edit was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
}

/// A retrieved corpus sentence used for an edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Excerpt {
    /// Which query found it (an index into `queries`).
    pub query: usize,
    /// Its sentence id in the corpus.
    pub id: usize,
    pub text: String,
    /// Cosine similarity to the query.
    pub score: f32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank_score: Option<f32>,
    /// The label of the review it comes from, when the corpus knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// What retrieval found for one item.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Retrieval {
    /// The item's sentences used as queries.
    pub queries: Vec<String>,
    pub excerpts: Vec<Excerpt>,
    /// The excerpts' keywords (filled by the context stage that extracts them).
    pub keywords: Vec<String>,
}

/// The prompt template an edit was made with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PromptRef {
    pub id: String,
    /// First 16 hex digits of the template file's sha256.
    pub hash: String,
}

/// An LLM's sampling settings, recorded with every output.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sampling {
    /// 0 samples greedily.
    pub temperature: f32,
    pub top_p: f32,
    pub max_tokens: usize,
    pub seed: u64,
}

impl Default for Sampling {
    /// CORE's settings (App. A): temperature 0.7, top-p 1.
    fn default() -> Self {
        Sampling {
            temperature: 0.7,
            top_p: 1.0,
            max_tokens: 512,
            seed: 0,
        }
    }
}

/// Where the time of an edit went, in milliseconds, and the tokens its model read and wrote.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Timing {
    /// The context stage (retrieval and keywords).
    #[serde(alias = "retrieve_ms")]
    pub context_ms: f64,
    /// The editor (the LLM call).
    #[serde(alias = "llm_ms")]
    pub edit_ms: f64,
    /// The judges (the classifier).
    #[serde(alias = "classify_ms")]
    pub judge_ms: f64,
    #[serde(default)]
    pub prompt_tokens: usize,
    #[serde(default)]
    pub completion_tokens: usize,
}

impl Timing {
    /// Adds `other`'s times and tokens to these.
    pub fn add(&mut self, other: &Timing) {
        self.context_ms += other.context_ms;
        self.edit_ms += other.edit_ms;
        self.judge_ms += other.judge_ms;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
}

/// An attempt that produced no counterfactual.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FailedAttempt {
    pub key: String,
    pub attempt: usize,
    pub reason: String,
    /// The model's raw reply (or the rejected edit), when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// The attempt's other usable edits the classifier refused, when it had several candidates
    /// (`--candidates`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<String>,
}

/// Either shape of a stored record: today's, or the one before typed provenance.
#[derive(Deserialize)]
struct StoredCounterfactual {
    key: String,
    item: String,
    method: String,
    #[serde(default)]
    premise: Option<String>,
    original: String,
    edited: String,
    label: String,
    target: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
    attempt: usize,
    timing: Timing,
    prediction: String,
    target_probability: f32,
    flipped: bool,
    #[serde(default)]
    provenance: Option<Provenance>,
    #[serde(default)]
    chosen: Option<FluencyChoice>,
    // CORE's provenance at the top level, as records had it before `provenance`.
    #[serde(default)]
    queries: Vec<String>,
    #[serde(default)]
    retrieved: Vec<Excerpt>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    prompt: Option<PromptRef>,
    #[serde(default)]
    sampling: Option<Sampling>,
}

impl From<StoredCounterfactual> for Counterfactual {
    fn from(stored: StoredCounterfactual) -> Self {
        let seed = stored
            .seed
            .or(stored.sampling.map(|s| s.seed))
            .unwrap_or_default();
        let provenance = stored
            .provenance
            .unwrap_or(Provenance::Core(CoreProvenance {
                queries: stored.queries,
                retrieved: stored.retrieved,
                keywords: stored.keywords,
                prompt: stored.prompt,
                sampling: stored.sampling,
                reply: None,
            }));
        Counterfactual {
            key: stored.key,
            item: stored.item,
            method: stored.method,
            premise: stored.premise,
            original: stored.original,
            edited: stored.edited,
            label: stored.label,
            target: stored.target,
            model: stored.model,
            seed,
            attempt: stored.attempt,
            timing: stored.timing,
            prediction: stored.prediction,
            target_probability: stored.target_probability,
            flipped: stored.flipped,
            provenance,
            chosen: stored.chosen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records `flipside generate` 0.1.0 wrote, before typed provenance: CORE, LLM-only and
    /// retrieve-only.
    const BEFORE_PROVENANCE: &str = include_str!("../../tests/fixtures/records-0.1.0.jsonl");

    #[test]
    fn records_from_before_typed_provenance_load_and_save_in_todays_shape() {
        let records: Vec<Counterfactual> = BEFORE_PROVENANCE
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let methods: Vec<&str> = records.iter().map(|r| r.method.as_str()).collect();
        assert_eq!(
            methods,
            [
                "core",
                "llm-only",
                "llm-only",
                "retrieve-only",
                "retrieve-only",
                "retrieve-only",
                "retrieve-only"
            ]
        );
        let core = &records[0];
        assert_eq!(core.seed, 1310785090);
        assert_eq!(core.keywords()[..2], ["dialogue", "painfully"]);
        assert!((core.timing.context_ms - 10.92126175).abs() < 1e-9);
        assert!((core.timing.edit_ms - 541.6608689999999).abs() < 1e-9);
        assert_eq!(core.timing.prompt_tokens, 367);
        let Provenance::Core(provenance) = &core.provenance else {
            panic!("a CORE record");
        };
        assert_eq!(provenance.retrieved.len(), 3);
        assert_eq!(provenance.prompt.as_ref().unwrap().id, "core-sentiment");
        assert_eq!(provenance.sampling.unwrap().seed, core.seed);
        assert!(records[1].keywords().is_empty());
        assert_eq!(records[3].seed, 0, "retrieve-only sampled nothing");
        assert_eq!(records[3].model, None);

        for record in &records {
            let saved = serde_json::to_value(record).unwrap();
            assert_eq!(saved["provenance"]["kind"], "core");
            assert!(saved.get("keywords").is_none(), "{saved}");
            assert!(saved["timing"]["context_ms"].is_number(), "{saved}");
            let again: Counterfactual = serde_json::from_value(saved).unwrap();
            assert_eq!(&again, record);
        }
    }
}
