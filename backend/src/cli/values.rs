//! How the library's option types and the method registry read on the command line: clap's
//! traits for them live here, so that the library does not depend on clap.

use clap::ValueEnum;
use clap::builder::{PossibleValue, PossibleValuesParser};

use crate::compute::DeviceChoice;
use crate::data::Format;
use crate::editing::items::Unit;
use crate::experiment::config::ModelKind;
use crate::llm::Api;
use crate::methods::METHODS;
use crate::methods::lass::SentimentSource;
use crate::training::classifier::BatchOrder;
use flipside_shared::infill::RationaleSource;

/// `--method`'s values: the registered methods, each with its description.
pub fn method_parser() -> PossibleValuesParser {
    PossibleValuesParser::new(
        METHODS
            .iter()
            .map(|m| PossibleValue::new(m.id()).help(m.card().description)),
    )
}

/// `METHOD=TEMPLATE`: a prompt template for one of the methods that prompt an LLM.
pub fn method_prompt(value: &str) -> Result<(String, String), String> {
    let (id, template) = value
        .split_once('=')
        .ok_or_else(|| format!("expected METHOD=TEMPLATE, as in core={value}"))?;
    let llm_methods: Vec<&str> = METHODS
        .iter()
        .filter(|m| m.uses_llm())
        .map(|m| m.id())
        .collect();
    if !llm_methods.contains(&id) {
        return Err(format!(
            "{id:?} is not a method that prompts an LLM ({})",
            llm_methods.join(", ")
        ));
    }
    Ok((id.to_string(), template.to_string()))
}

impl ValueEnum for DeviceChoice {
    fn value_variants<'a>() -> &'a [Self] {
        &[DeviceChoice::Cpu, DeviceChoice::Cuda]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            DeviceChoice::Cpu => PossibleValue::new("cpu"),
            DeviceChoice::Cuda => PossibleValue::new("cuda")
                .help("NVIDIA GPU (a build with --features burn-cuda or cuda)"),
        })
    }
}

impl ValueEnum for Format {
    fn value_variants<'a>() -> &'a [Self] {
        &Format::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            Format::Csv => "Comma-separated, with a header row and RFC 4180 quoting",
            Format::Tsv => "Tab-separated, with a header row; quotes are ordinary characters",
            Format::Jsonl => "One JSON object per line",
            Format::Parquet => {
                "Apache Parquet: a file, or a directory of them (Hugging Face datasets' \
                 to_parquet, a Hub dataset's data/ folder)"
            }
            Format::Arrow => {
                "Arrow IPC: a Hugging Face datasets save_to_disk directory, or one file"
            }
        };
        Some(PossibleValue::new(self.name()).help(help))
    }
}

impl ValueEnum for Unit {
    fn value_variants<'a>() -> &'a [Self] {
        &[Unit::Text, Unit::Sentence]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Unit::Text => PossibleValue::new("text"),
            Unit::Sentence => PossibleValue::new("sentence"),
        })
    }
}

impl ValueEnum for Api {
    fn value_variants<'a>() -> &'a [Self] {
        &[Api::Chat, Api::Completions]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Api::Chat => PossibleValue::new("chat")
                .help("/v1/chat/completions (prompts are sent as messages)"),
            Api::Completions => PossibleValue::new("completions")
                .help("/v1/completions (prompts are sent as text; chats are flattened)"),
        })
    }
}

impl ValueEnum for ModelKind {
    fn value_variants<'a>() -> &'a [Self] {
        &[ModelKind::Bow, ModelKind::FineTune]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            ModelKind::Bow => PossibleValue::new("bow")
                .help("Bag-of-words logistic regression: seconds per unit, for quick runs"),
            ModelKind::FineTune => PossibleValue::new("fine-tune")
                .help("A fine-tuned encoder (MiniLM by default), as `flipside classifier train`"),
        })
    }
}

impl ValueEnum for BatchOrder {
    fn value_variants<'a>() -> &'a [Self] {
        &[BatchOrder::Shuffled, BatchOrder::ByLength]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            BatchOrder::Shuffled => PossibleValue::new("shuffled")
                .help("A seeded shuffle of all examples, cut into batches"),
            BatchOrder::ByLength => PossibleValue::new("by-length").help(
                "Examples of similar token counts batched together (less padding, faster on \
                 short and mixed-length texts)",
            ),
        })
    }
}

impl ValueEnum for SentimentSource {
    fn value_variants<'a>() -> &'a [Self] {
        &[SentimentSource::Label, SentimentSource::Parent]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            SentimentSource::Label => PossibleValue::new("label")
                .help("The target label's learnt vector (deterministic under beam search)"),
            SentimentSource::Parent => PossibleValue::new("parent").help(
                "A training text with the target label, drawn by the attempt's seed (the \
                 paper's sentiment parent)",
            ),
        })
    }
}

/// `--rationales`: which words AutoCAD masks (the library's [`RationaleSource`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Rationales {
    /// The classifier's gradient saliency (AutoCAD)
    Saliency,
    /// As many words, chosen at random (the ablation)
    Random,
}

impl From<Rationales> for RationaleSource {
    fn from(choice: Rationales) -> Self {
        match choice {
            Rationales::Saliency => RationaleSource::Saliency,
            Rationales::Random => RationaleSource::Random,
        }
    }
}
