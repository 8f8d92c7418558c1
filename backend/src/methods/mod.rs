//! The counterfactual methods and the one place their stages are composed into a
//! [`Pipeline`].
//!
//! [`METHODS`] is the registry: the CLI's `--method` values, the API's method ids (and the
//! OpenAPI document's enum of them) and the browser's method picker all come from it. A method
//! is a [`Method`]: what it needs loaded, and the context stage and editor it plugs into the
//! pipeline. Adding one is a new file here and one line in [`METHODS`].

pub mod autocad;
pub mod core;
pub mod lass;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, bail};
use burn::tensor::backend::Backend;
use flipside_shared::api::{MethodId, MethodInfo};
use flipside_shared::data::Dataset;

use burn::backend::Autodiff;

use crate::compute::Compute;
use crate::editing::items::{Selection, Unit, select_items, task_of};
use crate::editing::keywords::Lexicons;
use crate::editing::prompts::Task;
use crate::editing::retrieve::{RetrievalSetup, Retrieve, Retriever};
use crate::home::Home;
use crate::infiller::rationales::{FindRationale, RationaleFinder, RationaleSettings};
use crate::infiller::shipped::{infiller_dir, trained_or_shipped};
use crate::infiller::train::InfillReport;
use crate::infiller::{FILL_CONTRAST, Infill, Infiller, SharedInfiller};
use crate::lass::model::{Reproduce, SharedReproducer};
use crate::llm::{Fluency, LlmClient, Sampling};
use crate::model_dirs::load_classifier;
use crate::pipeline::judge::{Classify, FlipCheck};
use crate::pipeline::{ContextStage, Editor, Item, Pipeline, Ranking};
use flipside_shared::models::contrast::LabelContrast;
use lass::ReproductionSettings;

/// Every method, the default first.
pub static METHODS: [&dyn Method; 6] = [
    &core::Core,
    &core::LlmOnly,
    &core::RetrieveOnly,
    &autocad::Autocad,
    &autocad::AutocadRetrieval,
    &lass::Lass,
];

/// What a method is, for the command line, the API and the browser.
#[derive(Debug)]
pub struct MethodCard {
    /// The id on the command line, in the API and in records.
    pub id: &'static str,
    /// A short name for pickers.
    pub label: &'static str,
    /// One sentence for `--help` and the API.
    pub description: &'static str,
    /// Whether it retrieves helpers (needs a corpus index).
    pub retrieves: bool,
    /// Whether it prompts an LLM.
    pub uses_llm: bool,
    /// Whether keywords guide its editor (the demo lets a user replace them).
    pub uses_keywords: bool,
    /// Whether a T5 infiller edits (needs an infiller directory).
    pub infills: bool,
    /// Whether a Dis-AE reproduces (needs a `lass train` directory).
    pub reproduces: bool,
    /// Whether the classifier's flip check always filters its edits (as if `verify` were on).
    pub always_verifies: bool,
    /// Candidates per attempt by default, the most fluent kept ([`EditSettings::candidates`]):
    /// more than one for an editor cheap enough to sample several times.
    pub candidates: usize,
}

/// A way of making counterfactuals.
pub trait Method: Sync {
    fn card(&self) -> &'static MethodCard;

    fn id(&self) -> &'static str {
        self.card().id
    }
    fn retrieves(&self) -> bool {
        self.card().retrieves
    }
    fn uses_llm(&self) -> bool {
        self.card().uses_llm
    }
    /// Fails, before any model is loaded, when `settings` cannot work for it (a prompt
    /// template for another task, say).
    fn check(&self, _settings: &EditSettings) -> Result<()> {
        Ok(())
    }
    /// Fails when loaded `models` cannot serve it in a way the card does not say (an infiller
    /// trained for another input format, say); [`check_models`] checks what the card says.
    fn check_loaded(&self, _models: &Models) -> Result<()> {
        Ok(())
    }
    /// Its context stage and editor, over loaded models.
    fn stages(&self, models: &Models, settings: &EditSettings) -> Result<Stages>;
}

/// What a method plugs into the pipeline.
pub struct Stages {
    pub context: Option<Arc<dyn ContextStage>>,
    pub editor: Arc<dyn Editor>,
}

/// The method with id `id`.
pub fn method(id: &str) -> Result<&'static dyn Method> {
    match METHODS.iter().find(|m| m.id() == id) {
        Some(method) => Ok(*method),
        None => bail!(
            "no method {id:?}; the methods are {}",
            METHODS.map(|m| m.id()).join(", ")
        ),
    }
}

/// Every method, as the API describes them, each marked with why `models` cannot run it (if
/// they cannot).
pub fn method_infos(models: &Models) -> Vec<MethodInfo> {
    METHODS
        .iter()
        .map(|m| {
            let card = m.card();
            let unavailable = check_models(*m, models).err().map(|e| e.to_string());
            MethodInfo {
                id: MethodId::from(card.id),
                label: card.label.to_string(),
                description: card.description.to_string(),
                retrieves: card.retrieves,
                uses_llm: card.uses_llm,
                uses_keywords: card.uses_keywords,
                unavailable,
            }
        })
        .collect()
}

/// How methods edit; shared by `generate`, jobs and the demo. Defaults are CORE's.
#[derive(Debug, Clone, PartialEq)]
pub struct EditSettings {
    /// Prompt templates by method id (a built-in id or a TOML file); a method without one
    /// uses its own for the task.
    pub prompts: BTreeMap<String, String>,
    /// Sentiment texts or NLI pairs.
    pub task: Task,
    /// The LLM's sampling (each attempt's seed replaces `seed`).
    pub sampling: Sampling,
    /// Most keywords in a prompt.
    pub max_keywords: usize,
    /// Tries per item.
    pub max_attempts: usize,
    /// Keep only edits the classifier flips (others are failed attempts).
    pub verify: bool,
    /// Candidates per attempt; with more than one, the one the fluency model finds least
    /// perplexing is kept (with `verify`, among those that flip; those the classifier flips
    /// surely first, [`crate::pipeline::CONFIDENT_FLIP`]). None: the method's own
    /// ([`MethodCard::candidates`]).
    pub candidates: Option<usize>,
    /// How LASS reproduces.
    pub reproduction: ReproductionSettings,
}

impl EditSettings {
    /// Candidates per attempt for `method`: the ones asked for, else the method's own.
    pub fn candidates_for(&self, method: &dyn Method) -> usize {
        self.candidates.unwrap_or(method.card().candidates)
    }

    /// The most candidates per attempt any of `methods` takes: a run that serves them loads the
    /// fluency model to rank candidates when this is more than one.
    pub fn most_candidates(&self, methods: &[&'static dyn Method]) -> usize {
        methods
            .iter()
            .map(|m| self.candidates_for(*m))
            .max()
            .unwrap_or(1)
    }
}

impl Default for EditSettings {
    fn default() -> Self {
        Self {
            prompts: BTreeMap::new(),
            task: Task::Sentiment,
            sampling: Sampling::default(),
            max_keywords: 12,
            max_attempts: 3,
            verify: false,
            candidates: None,
            reproduction: ReproductionSettings::default(),
        }
    }
}

/// The loaded models methods draw their stages from; loaded once (the server keeps them for
/// every request and job).
#[derive(Clone)]
pub struct Models {
    /// The classifier that checks flips, and its name for messages.
    pub classifier: Arc<dyn Classify>,
    pub classifier_name: String,
    /// A corpus index and its encoders (for methods that retrieve).
    pub retriever: Option<Arc<dyn Retrieve>>,
    /// The LLM (for methods that prompt one).
    pub llm: Option<Arc<dyn LlmClient>>,
    pub lexicons: Arc<Lexicons>,
    /// The T5 infiller and the classifier's rationales (AutoCAD).
    pub infiller: Option<Arc<dyn Infill>>,
    pub rationales: Option<Arc<dyn FindRationale>>,
    /// The Dis-AE (LASS), and the language model whose perplexity filters its outputs and
    /// ranks candidates (`candidates`).
    pub reproducer: Option<Arc<dyn Reproduce>>,
    pub fluency: Option<Arc<dyn Fluency>>,
}

/// Which models to load.
pub struct ModelsConfig {
    pub classifier_dir: PathBuf,
    /// The index to retrieve from; none when no method in use retrieves.
    pub retrieval: Option<RetrievalSetup>,
    pub llm: Option<Arc<dyn LlmClient>>,
    pub lexicons: Arc<Lexicons>,
    /// An infiller directory (for AutoCAD), and how its rationales are chosen.
    pub infiller: Option<InfillerSetup>,
    /// A Dis-AE directory (for LASS).
    pub dis_ae: Option<PathBuf>,
    pub fluency: Option<Arc<dyn Fluency>>,
}

/// The infiller AutoCAD edits with.
pub struct InfillerSetup {
    pub dir: PathBuf,
    /// Its `tokenizer.json` (its own, or the `t5-tokenizer` asset's).
    pub tokenizer_json: Vec<u8>,
    pub rationales: RationaleSettings,
    /// How each fill is steered away from the item's own label.
    pub label_contrast: LabelContrast,
}

impl InfillerSetup {
    /// The infiller named `name` (a directory or a name under HOME/models), else
    /// HOME/models/infiller when it exists (`infiller train`'s default output), else the one
    /// Flipside ships ([`trained_or_shipped`]).
    pub fn resolve(home: &Home, name: Option<&str>, rationales: RationaleSettings) -> Result<Self> {
        let dir = match name {
            Some(name) => infiller_dir(home, name)?,
            None => trained_or_shipped(home, home.models().join("infiller"))?,
        };
        Ok(Self {
            tokenizer_json: crate::infiller::read_tokenizer(home, &dir)
                .with_context(|| format!("the infiller {}", dir.display()))?,
            dir,
            rationales,
            label_contrast: FILL_CONTRAST,
        })
    }
}

/// Loads the classifier, the retriever, the infiller and the Dis-AE on backend `B`.
pub fn load_models<B: Backend>(compute: Compute<B>, config: ModelsConfig) -> Result<Models> {
    let device = compute.device.clone();
    let lexicons = config.lexicons;
    let classifier = load_classifier::<B>(&config.classifier_dir, &compute.device)?;
    let retriever: Option<Arc<dyn Retrieve>> = match config.retrieval {
        Some(setup) => {
            let retriever = Retriever::open(compute, setup, lexicons.clone())
                .context("loading the retrieval index")?;
            Some(Arc::new(Mutex::new(retriever)))
        }
        None => None,
    };
    let (infiller, rationales) = match config.infiller {
        Some(setup) => {
            let (infiller, finder) =
                load_infiller_setup::<B>(&device, &config.classifier_dir, setup, &lexicons)?;
            (Some(infiller), Some(finder))
        }
        None => (None, None),
    };
    let reproducer: Option<Arc<dyn Reproduce>> = match &config.dis_ae {
        Some(dir) => Some(Arc::new(SharedReproducer::<B>::load(dir, &device)?)),
        None => None,
    };
    Ok(Models {
        classifier: Arc::new(Mutex::new(classifier)),
        classifier_name: config.classifier_dir.display().to_string(),
        retriever,
        llm: config.llm,
        lexicons,
        infiller,
        rationales,
        reproducer,
        fluency: config.fluency,
    })
}

/// The infiller of `setup` and a rationale finder over the classifier in `classifier_dir`.
fn load_infiller_setup<B: Backend>(
    device: &B::Device,
    classifier_dir: &std::path::Path,
    setup: InfillerSetup,
    lexicons: &Arc<Lexicons>,
) -> Result<(Arc<dyn Infill>, Arc<dyn FindRationale>)> {
    let infiller = Infiller::<B>::from_dir(&setup.dir, setup.tokenizer_json, device)
        .with_context(|| format!("loading the infiller {}", setup.dir.display()))?;
    let classifier = load_classifier::<Autodiff<B>>(classifier_dir, device)?;
    let report = InfillReport::read(&setup.dir)?;
    let guided = report
        .as_ref()
        .and_then(|r| r.guidance.as_ref())
        .is_some_and(|g| g.with_keywords > 0);
    let infiller: Arc<dyn Infill> = Arc::new(SharedInfiller {
        name: setup.dir.display().to_string(),
        infiller: Mutex::new(infiller),
        guided,
        labels: report.map(|r| r.labels),
        label_contrast: setup.label_contrast,
    });
    let finder: Arc<dyn FindRationale> = Arc::new(Mutex::new(RationaleFinder {
        classifier,
        settings: setup.rationales,
        lexicons: lexicons.clone(),
    }));
    Ok((infiller, finder))
}

/// Fails when `models` lack what `method` needs (an LLM, an index, an infiller).
pub fn check_models(method: &dyn Method, models: &Models) -> Result<()> {
    if method.uses_llm() && models.llm.is_none() {
        bail!("the {} method needs an LLM", method.id());
    }
    if method.retrieves() && models.retriever.is_none() {
        bail!("the {} method needs an index to retrieve from", method.id());
    }
    if method.card().infills {
        let Some(infiller) = &models.infiller else {
            bail!(
                "the {} method needs an infiller (--infiller DIR)",
                method.id()
            );
        };
        let labels = models.classifier.labels();
        if let Some(trained) = infiller.labels()
            && trained != labels.as_slice()
        {
            bail!(
                "the infiller {} fills for the labels {trained:?}, the classifier {} has \
                 {labels:?}: train one for them with `flipside infiller train --classifier`",
                infiller.name(),
                models.classifier_name
            );
        }
    }
    if method.card().reproduces && models.reproducer.is_none() {
        bail!(
            "the {} method needs a Dis-AE: train one with `flipside lass train` (the server: \
             --dis-ae DIR)",
            method.id()
        );
    }
    method.check_loaded(models)
}

/// `method`'s pipeline over `models`: its stages, and the classifier's flip check.
pub fn pipeline(
    method: &'static dyn Method,
    models: &Models,
    settings: &EditSettings,
) -> Result<Pipeline> {
    check_models(method, models)?;
    let ranking = match settings.candidates_for(method) {
        0 => bail!("candidates per attempt must be at least 1"),
        1 => None,
        candidates => Some(Ranking {
            fluency: models.fluency.clone().with_context(|| {
                format!(
                    "{} keeps the most fluent of {candidates} candidates an attempt: that needs a \
                     fluency model to rank them (or --candidates 1)",
                    method.id()
                )
            })?,
            candidates,
        }),
    };
    let Stages { context, editor } = method.stages(models, settings)?;
    Ok(Pipeline {
        method: method.id(),
        context,
        editor,
        judge: Arc::new(FlipCheck {
            name: models.classifier_name.clone(),
            classifier: models.classifier.clone(),
        }),
        verify: settings.verify || method.card().always_verifies,
        max_attempts: settings.max_attempts,
        ranking,
    })
}

/// What a generation run edits and how, before any model is loaded: the items a selection picks
/// from a dataset, and the run's settings with the task those items are (NLI when they have
/// premises), checked by the method. `flipside generate`, the server's jobs and prompt
/// optimisation all start here, and [`GenerationPlan::pipeline`] then puts the method's stages
/// over the loaded models.
pub struct GenerationPlan {
    pub method: &'static dyn Method,
    pub items: Vec<Item>,
    pub settings: EditSettings,
}

impl GenerationPlan {
    /// The plan for `method` over the items `selection` picks from `dataset`; fails when it
    /// picks none (every example over the word limit, or of the target label) or the settings
    /// do not suit the method.
    pub fn new(
        method: &'static dyn Method,
        dataset: &Dataset,
        selection: &Selection,
        lexicons: &Lexicons,
        settings: EditSettings,
    ) -> Result<Self> {
        let items = select_items(dataset, selection, lexicons)?;
        if items.is_empty() {
            let mut asked = vec![format!("target {}", selection.target)];
            asked.extend(
                selection
                    .max_words
                    .map(|words| format!("at most {words} words")),
            );
            if selection.unit == Unit::Sentence {
                asked.push("a sentence that carries its label".into());
            }
            bail!(
                "no example gives an item to edit ({}): check the target label, the word limit and \
                 the unit",
                asked.join(", ")
            );
        }
        Self::for_items(method, items, settings)
    }

    /// The plan for `method` over `items` chosen elsewhere (a bench's fixed set).
    pub fn for_items(
        method: &'static dyn Method,
        items: Vec<Item>,
        settings: EditSettings,
    ) -> Result<Self> {
        let settings = EditSettings {
            task: task_of(&items),
            ..settings
        };
        method.check(&settings)?;
        Ok(Self {
            method,
            items,
            settings,
        })
    }

    /// The method's pipeline over `models`, with the plan's settings.
    pub fn pipeline(&self, models: &Models) -> Result<Pipeline> {
        pipeline(self.method, models, &self.settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_ids_are_unique_and_unknown_ones_are_refused_with_the_list() {
        let ids: std::collections::HashSet<_> = METHODS.iter().map(|m| m.id()).collect();
        assert_eq!(ids.len(), METHODS.len());
        assert_eq!(method("llm-only").unwrap().id(), "llm-only");
        let error = method("nope").map(|m| m.id()).unwrap_err().to_string();
        assert!(
            error.contains("core, llm-only, retrieve-only, autocad, autocad-retrieval, lass"),
            "{error}"
        );
        assert_eq!(METHODS[0].id(), "core", "the default method");
    }
}
