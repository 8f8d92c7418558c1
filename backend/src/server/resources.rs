//! What the server edits with, loaded once: the retriever (index, encoder, re-ranker), the LLM
//! and its prompt, the classifier and the lexicons.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use flipside_shared::api::{ClassifierInfo, CorpusInfo, Example};
use flipside_shared::classifier::TextClassifier;

use crate::compute::{Batches, Compute, Cpu};
use crate::editing::keywords::Lexicons;
use crate::editing::prompts::PromptTemplate;
use crate::editing::retrieve::{RetrievalSetup, Retriever};
use crate::home::Home;
use crate::llm::Editor;
use crate::models::load_classifier;

/// How to load [`Resources`].
pub struct ResourceConfig {
    pub retrieval: RetrievalSetup,
    /// The corpus's name, for display.
    pub corpus: String,
    pub classifier_dir: PathBuf,
    pub editor: Arc<dyn Editor>,
    /// CORE's prompt template id (or TOML file).
    pub prompt: String,
}

/// The loaded models; shared by the demo endpoints and the job runner.
pub struct Resources {
    pub retriever: Mutex<Retriever<Cpu>>,
    pub retrieval: RetrievalSetup,
    pub editor: Arc<dyn Editor>,
    pub template: PromptTemplate,
    pub classifier: Mutex<TextClassifier<Cpu>>,
    pub classifier_dir: PathBuf,
    /// The classifier's name and labels (fixed once loaded).
    pub classifier_info: ClassifierInfo,
    pub lexicons: Lexicons,
    pub corpus: CorpusInfo,
}

impl Resources {
    /// Loads everything (seconds: the index and three models).
    pub fn load(home: &Home, config: ResourceConfig) -> Result<Self> {
        let compute = cpu();
        let retriever = Retriever::open(compute.clone(), config.retrieval.clone())
            .context("loading the retrieval index")?;
        let corpus = CorpusInfo {
            name: config.corpus,
            sentences: retriever.index.sentences.len(),
            encoder: config.retrieval.encoders.name.clone(),
        };
        let classifier = load_classifier::<Cpu>(&config.classifier_dir, &compute.device)?;
        let classifier_info = ClassifierInfo {
            name: config
                .classifier_dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            labels: classifier.config.labels.clone(),
            max_len: classifier.config.max_len,
        };
        Ok(Self {
            retriever: Mutex::new(retriever),
            retrieval: config.retrieval,
            editor: config.editor,
            template: PromptTemplate::load(&config.prompt)?,
            classifier: Mutex::new(classifier),
            classifier_dir: config.classifier_dir,
            classifier_info,
            lexicons: Lexicons::load(home)?,
            corpus,
        })
    }

    /// The target of flipping `label`: `target` if given, else the other label of a binary
    /// classifier.
    pub fn target(&self, label: &str, target: Option<&str>) -> Result<String, String> {
        let labels = &self.classifier_info.labels;
        if !labels.iter().any(|l| l == label) {
            return Err(format!(
                "label {label:?} is not one of the classifier's labels ({})",
                labels.join(", ")
            ));
        }
        match target {
            Some(t) if t == label => Err(format!("the target {t:?} is the text's own label")),
            Some(t) if labels.iter().any(|l| l == t) => Ok(t.to_string()),
            Some(t) => Err(format!(
                "target {t:?} is not one of the classifier's labels ({})",
                labels.join(", ")
            )),
            None => match labels.iter().filter(|l| *l != label).collect::<Vec<_>>()[..] {
                [other] => Ok(other.clone()),
                _ => Err(format!(
                    "name a target: the classifier has {} labels",
                    labels.len()
                )),
            },
        }
    }
}

/// The server's models run on the CPU backend.
pub fn cpu() -> Compute<Cpu> {
    Compute {
        device: Default::default(),
        batches: Batches::Parallel,
    }
}

/// Short movie-review sentences to try in the demo.
pub fn demo_examples() -> Vec<Example> {
    [
        (
            "The acting was superb and the story kept me gripped until the very end.",
            "positive",
        ),
        (
            "A dull, lifeless script and wooden performances; I nearly fell asleep.",
            "negative",
        ),
        (
            "The photography is gorgeous, but the plot is a confusing mess.",
            "negative",
        ),
        (
            "A warm, funny film with a wonderful cast that I would gladly watch again.",
            "positive",
        ),
        (
            "The jokes fall flat and the ending drags on far too long.",
            "negative",
        ),
    ]
    .into_iter()
    .map(|(text, label)| Example {
        text: text.into(),
        label: label.into(),
    })
    .collect()
}
