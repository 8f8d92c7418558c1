//! What the server edits with, loaded once and shared by the demo endpoints, the portal and the
//! job runner: the models every method draws from, the editing settings, what `/api/info`
//! tells the browser about them, and the checks on the texts they are given.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use flipside_shared::api::{ClassifierInfo, CorpusInfo, DisAeInfo, Example};
use flipside_shared::data::Input;
use flipside_shared::models::classifier::ClassifierConfig;

use crate::compute::{Batches, Compute, Cpu};
use crate::editing::keywords::Lexicons;
use crate::editing::retrieve::RetrievalSetup;
use crate::home::Home;
use crate::lass::model::LassReport;
use crate::llm::{Fluency, LlmClient};
use crate::methods::{EditSettings, InfillerSetup, Models, ModelsConfig, load_models};
use crate::server::downloads::{
    CLASSIFIER_BITS, CLASSIFIER_FILES, DIS_AE_BITS, DIS_AE_FILES, ModelDownloads,
};
use crate::server::error::{ApiError, ApiResult};

/// How to load [`Resources`].
pub struct ResourceConfig {
    pub retrieval: RetrievalSetup,
    /// The corpus's name, for display.
    pub corpus: String,
    pub classifier_dir: PathBuf,
    pub llm: Arc<dyn LlmClient>,
    /// The infiller (AutoCAD), if there is one.
    pub infiller: Option<InfillerSetup>,
    /// The Dis-AE (LASS), if there is one, and the model of its perplexity filter.
    pub dis_ae: Option<PathBuf>,
    pub fluency: Option<Arc<dyn Fluency>>,
    pub settings: EditSettings,
}

/// The loaded models and the settings jobs and the demo edit with.
pub struct Resources {
    pub models: Models,
    pub settings: EditSettings,
    /// The classifier's name and labels (fixed once loaded).
    pub classifier_info: ClassifierInfo,
    pub corpus: CorpusInfo,
    /// The classifier's files for scoring in the browser.
    pub classifier_downloads: ModelDownloads,
    /// The Dis-AE's files for generating in the browser, and what the browser is told of it.
    pub dis_ae: Option<(ModelDownloads, DisAeInfo)>,
}

impl Resources {
    /// Loads everything (seconds: the index, three models, and the browser's compressed
    /// downloads).
    pub fn load(home: &Home, config: ResourceConfig) -> Result<Self> {
        let encoder = config.retrieval.encoders.name.clone();
        let dis_ae = match &config.dis_ae {
            Some(dir) => {
                let downloads = ModelDownloads::prepare("Dis-AE", dir, &DIS_AE_FILES, DIS_AE_BITS)?;
                let info = dis_ae_info(dir, &downloads)?;
                Some((downloads, info))
            }
            None => None,
        };
        let models = load_models(
            cpu(),
            ModelsConfig {
                classifier_dir: config.classifier_dir.clone(),
                retrieval: Some(config.retrieval),
                llm: Some(config.llm),
                lexicons: Arc::new(Lexicons::load(home)?),
                infiller: config.infiller,
                dis_ae: config.dis_ae,
                fluency: config.fluency,
            },
        )?;
        let corpus = CorpusInfo {
            name: config.corpus,
            sentences: models.retriever.as_ref().map_or(0, |r| r.sentences()),
            encoder,
        };
        let classifier_config = ClassifierConfig::from_json(&std::fs::read(
            config.classifier_dir.join("config.json"),
        )?)?;
        let classifier_downloads = ModelDownloads::prepare(
            "classifier",
            &config.classifier_dir,
            &CLASSIFIER_FILES,
            CLASSIFIER_BITS,
        )?;
        let classifier_info = ClassifierInfo {
            name: config
                .classifier_dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            labels: classifier_config.labels,
            max_len: classifier_config.max_len,
            download_bytes: classifier_downloads.download_bytes(),
            files: classifier_downloads.urls("/api/classifier"),
        };
        Ok(Self {
            models,
            settings: config.settings,
            classifier_info,
            classifier_downloads,
            corpus,
            dis_ae,
        })
    }

    /// The LLM's name (jobs and the demo edit with it).
    pub fn llm_name(&self) -> &str {
        self.models.llm.as_ref().map_or("", |llm| llm.model())
    }

    /// Whether `label` (a `what`: "label", "target") is one of the classifier's labels.
    pub fn check_label(&self, what: &str, label: &str) -> Result<(), String> {
        let labels = &self.classifier_info.labels;
        if labels.iter().any(|l| l == label) {
            return Ok(());
        }
        Err(format!(
            "{what} {label:?} is not one of the classifier's labels ({})",
            labels.join(", ")
        ))
    }

    /// The target of flipping `label`: `target` if given, else the other label of a binary
    /// classifier.
    pub fn target(&self, label: &str, target: Option<&str>) -> Result<String, String> {
        let labels = &self.classifier_info.labels;
        self.check_label("label", label)?;
        match target {
            Some(t) if t == label => Err(format!("the target {t:?} is the text's own label")),
            Some(t) => self.check_label("target", t).map(|()| t.to_string()),
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

/// What the browser is told of the Dis-AE in `dir`.
fn dis_ae_info(dir: &std::path::Path, downloads: &ModelDownloads) -> Result<DisAeInfo> {
    let report = LassReport::read(dir)?;
    Ok(DisAeInfo {
        name: dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned(),
        labels: report.labels,
        parameters: report.parameters,
        download_bytes: downloads.download_bytes(),
        files: downloads.urls("/api/dis-ae"),
    })
}

/// The server's models run on the CPU backend.
pub fn cpu() -> Compute<Cpu> {
    Compute {
        device: Default::default(),
        batches: Batches::Parallel,
    }
}

/// Short movie-review sentences to try in the demo. The first three flip at the first attempt
/// with the defaults (`scripts/serve`: CORE over the Rotten Tomatoes corpus, Qwen2.5-Coder 1.5B,
/// `imdb-400` judging; see the book's results).
pub fn demo_examples() -> Vec<Example> {
    [
        (
            "One of the best films of the year, with a brilliant cast.",
            "positive",
        ),
        (
            "A warm, funny film with a wonderful cast that I would gladly watch again.",
            "positive",
        ),
        (
            "The jokes fall flat and the ending drags on far too long.",
            "negative",
        ),
        (
            "The photography is gorgeous, but the plot is a confusing mess.",
            "negative",
        ),
        (
            "A dull, lifeless script and wooden performances; I nearly fell asleep.",
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

/// Most characters of a text to edit or classify.
pub const MAX_TEXT_CHARS: usize = 5_000;

/// Refuses (400) a text that is empty or longer than [`MAX_TEXT_CHARS`].
pub fn check_text(text: &str) -> ApiResult<()> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("text is empty"));
    }
    if text.chars().count() > MAX_TEXT_CHARS {
        return Err(ApiError::bad_request(format!(
            "text is longer than {MAX_TEXT_CHARS} characters"
        )));
    }
    Ok(())
}

impl Resources {
    /// The classifier's probabilities of each label for each text.
    pub fn probabilities(&self, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
        let inputs: Vec<Input> = texts.iter().map(|t| Input::with_premise(None, t)).collect();
        self.models
            .classifier
            .probabilities(&inputs.iter().collect::<Vec<_>>())
    }
}
