//! How the library's option types and the method registry read on the command line: clap's
//! traits for them live here, so that the library does not depend on clap.

use clap::ValueEnum;
use clap::builder::{PossibleValue, PossibleValuesParser};

use crate::compute::DeviceChoice;
use crate::data::Format;
use crate::editing::items::Unit;
use crate::llm::Api;
use crate::methods::METHODS;

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
            DeviceChoice::Cuda => {
                PossibleValue::new("cuda").help("NVIDIA GPU (a build with --features cuda)")
            }
        })
    }
}

impl ValueEnum for Format {
    fn value_variants<'a>() -> &'a [Self] {
        &[Format::Csv, Format::Tsv, Format::Jsonl]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Format::Csv => PossibleValue::new("csv")
                .help("Comma-separated, with a header row and RFC 4180 quoting"),
            Format::Tsv => PossibleValue::new("tsv")
                .help("Tab-separated, with a header row; quotes are ordinary characters"),
            Format::Jsonl => PossibleValue::new("jsonl").help("One JSON object per line"),
        })
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
