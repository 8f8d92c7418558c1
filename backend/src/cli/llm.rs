//! The LLM options shared by `generate`, `serve`, `eval cf`, `pairs make` and `bench llm`, and
//! `flipside prompts …`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use crate::editing::prompts::{BUILTIN_TEMPLATES, PromptTemplate};
use crate::home::Home;
use crate::llm::local::EngineOptions;
use crate::llm::openai::ClientOptions;
use crate::llm::{Api, DEFAULT_EDITOR_MODEL, LlmClient, LocalEngine, OpenAiClient, scoring_copy};

/// Which LLM: the embedded engine (default) or an OpenAI-compatible server.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "LLM")]
pub struct LlmArgs {
    /// Embedded model: a model asset (qwen2.5-coder-1.5b, smollm2-135m) or a GGUF file
    #[arg(long, default_value = DEFAULT_EDITOR_MODEL, value_name = "NAME|FILE")]
    pub model: String,
    /// Use an OpenAI-compatible server instead, e.g. https://api.openai.com/v1 or
    /// http://127.0.0.1:8080/v1 (`flipside serve`, vLLM, llama.cpp server, Ollama)
    #[arg(long, value_name = "URL")]
    pub api_base: Option<String>,
    /// The model name sent to the server [default: --model]
    #[arg(long, value_name = "NAME")]
    pub api_model: Option<String>,
    /// The server endpoint: chat completions or legacy text completions
    #[arg(long, value_enum, default_value = "chat")]
    pub api: Api,
    /// Environment variable holding the server's API key (never printed or saved)
    #[arg(long, default_value = "OPENAI_API_KEY", value_name = "VAR")]
    pub api_key_env: String,
    /// Seconds before a server request times out
    #[arg(long, default_value_t = 120, value_name = "S")]
    pub timeout: u64,
    /// Retries of a server request after 429, 5xx or a timeout (exponential backoff from 1 s)
    #[arg(long, default_value_t = 5)]
    pub retries: u32,
    /// Context length of the embedded model, in tokens
    #[arg(long, default_value_t = EngineOptions::default().context, value_name = "TOKENS")]
    pub context: u32,
    /// CPU threads of the embedded model [default: all cores]
    #[arg(long, env = "FLIPSIDE_LLM_THREADS", value_name = "N")]
    pub threads: Option<usize>,
}

impl LlmArgs {
    /// Whether requests go to a server.
    pub fn remote(&self) -> bool {
        self.api_base.is_some()
    }

    /// Items edited at once unless told: 4 against a server; with the embedded engine one for
    /// a method that prompts it, else one per core (the fluency model then scores each on a
    /// context of its own, [`FluencyArgs::model`](super::args::FluencyArgs::model)).
    pub fn default_concurrency(&self, prompts: bool) -> usize {
        match (self.remote(), prompts) {
            (true, _) => 4,
            (false, true) => 1,
            (false, false) => std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// The GGUF file of `--model`.
    pub fn model_path(&self, home: &Home) -> Result<PathBuf> {
        let path = PathBuf::from(&self.model);
        if path.extension().is_some_and(|e| e == "gguf") || path.is_file() {
            anyhow::ensure!(path.is_file(), "no GGUF file at {}", path.display());
            return Ok(path);
        }
        Ok(home.asset(&self.model)?.join("model.gguf"))
    }

    /// The embedded engine.
    pub fn local(&self, home: &Home) -> Result<LocalEngine> {
        self.load(&self.model_path(home)?, 1)
    }

    /// The embedded engine that scores perplexity for `callers` at once: a Q4_1 model runs
    /// from its Q8_0 copy ([`scoring_copy`]), on a context per caller ([`EngineOptions::contexts`]).
    pub fn scorer(&self, home: &Home, callers: usize) -> Result<LocalEngine> {
        self.load(&scoring_copy(&self.model_path(home)?)?, callers)
    }

    /// The engine on `path`, the file of `--model` or one made from it, named as `--model`
    /// names it (a file by its stem).
    fn load(&self, path: &Path, contexts: usize) -> Result<LocalEngine> {
        let given = Path::new(&self.model);
        let name = match given.is_file() {
            true => given
                .file_stem()
                .map_or(self.model.clone(), |s| s.to_string_lossy().into_owned()),
            false => self.model.clone(),
        };
        let spinner = crate::progress::spinner(format!("loading {name}"));
        let engine = LocalEngine::load(
            &name,
            path,
            EngineOptions {
                context: self.context,
                threads: self.threads,
                contexts,
                ..EngineOptions::default()
            },
        );
        spinner.finish_and_clear();
        engine
    }

    /// The LLM these options name.
    pub fn client(&self, home: &Home) -> Result<Arc<dyn LlmClient>> {
        let Some(base_url) = &self.api_base else {
            return Ok(Arc::new(self.local(home)?));
        };
        let api_key = std::env::var(&self.api_key_env)
            .ok()
            .filter(|k| !k.is_empty());
        let client = OpenAiClient::new(ClientOptions {
            base_url: base_url.clone(),
            model: self.api_model.clone().unwrap_or_else(|| self.model.clone()),
            api_key,
            api: self.api,
            timeout: Duration::from_secs(self.timeout),
            retries: self.retries,
            backoff: Duration::from_secs(1),
        })?;
        Ok(Arc::new(client))
    }
}

#[derive(Debug, Subcommand)]
pub enum PromptsCommand {
    /// List the built-in prompt templates
    List,
    /// Print a template (built-in id or file)
    Show { template: String },
    /// Copy the built-in templates into a directory, to edit and pass with --prompt FILE
    Export {
        #[arg(default_value = "prompts")]
        dir: PathBuf,
    },
}

pub fn prompts(command: PromptsCommand) -> Result<()> {
    match command {
        PromptsCommand::List => {
            for (_, source) in BUILTIN_TEMPLATES {
                let template = PromptTemplate::parse(source)?;
                println!(
                    "{:<20} {}  {}",
                    template.id, template.hash, template.description
                );
            }
        }
        PromptsCommand::Show { template } => {
            let loaded = PromptTemplate::load(&template)?;
            let source = BUILTIN_TEMPLATES
                .iter()
                .find(|(name, _)| name.trim_end_matches(".toml") == loaded.id)
                .filter(|_| !std::path::Path::new(&template).is_file())
                .map(|(_, source)| source.to_string());
            match source {
                Some(source) => print!("{source}"),
                None => print!("{}", std::fs::read_to_string(&template)?),
            }
        }
        PromptsCommand::Export { dir } => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for (name, source) in BUILTIN_TEMPLATES {
                let path = dir.join(name);
                if path.exists() {
                    eprintln!("{} exists: left as it is", path.display());
                    continue;
                }
                std::fs::write(&path, source)?;
                println!("{}", path.display());
            }
        }
    }
    Ok(())
}
