//! `flipside serve`

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use clap::Args;

use super::args::{InfillerArgs, LassArgs};
use super::llm::LlmArgs;
use super::values::method_prompt;
use crate::editing::retrieve::RetrievalSetup;
use crate::home::Home;
use crate::infiller::T5_TOKENIZER_ASSET;
use crate::infiller::rationales::RationaleSettings;
use crate::llm::{DEFAULT_EDITOR_MODEL, LlmClient};
use crate::methods::{EditSettings, METHODS};
use crate::model_dirs::{DEFAULT_ENCODER, resolve_model_dir};
use crate::prepare::{SMALL_CORPUS, corpus_with_index, fetch_assets, imdb_classifier};
use crate::retrieval::corpus::corpus_dir;
use crate::retrieval::encoders::RetrieverEncoders;
use crate::retrieval::index::index_dir;
use crate::server::connections::CONNECTIONS_PER_CLIENT;
use crate::server::preparation::Preparation;
use crate::server::resources::{ResourceConfig, Resources};
use crate::server::retention::parse_period;
use crate::server::{ServerConfig, serve};

/// The classifier trained on first run, and its training-set size.
const DEFAULT_CLASSIFIER_SIZE: usize = 400;
/// With `--full`: the classifier size and the corpus.
const FULL_CLASSIFIER_SIZE: usize = 2000;
const FULL_CORPUS: &str = "movies";
/// How the browser app is built for serving (what `scripts/serve` runs).
const BUILD_APP: &str = "trunk build --cargo-profile wasm-release";

/// Where the server keeps its data, shared by `serve` and `users`.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// Where uploads and job checkpoints are kept, and the SQLite database
    /// [default: HOME/server]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Database: a SQLite file, or postgres://USER:PASSWORD@HOST/DB
    /// [default: DATA_DIR/flipside.db]
    #[arg(
        long,
        env = "FLIPSIDE_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
}

impl DatabaseArgs {
    pub fn data_dir(&self, home: &Home) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| home.root().join("server"))
    }

    pub fn url(&self, home: &Home) -> String {
        self.database_url.clone().unwrap_or_else(|| {
            self.data_dir(home)
                .join("flipside.db")
                .display()
                .to_string()
        })
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free one)
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// The browser app to serve: Trunk's output directory [default: dist, if it exists]
    #[arg(long, value_name = "DIR")]
    pub static_dir: Option<PathBuf>,
    /// The app in --static-dir is still being built (`scripts/serve` builds it beside the
    /// server): until its index.html is there, the page says so and reloads itself
    #[arg(long, requires = "static_dir")]
    pub app_building: bool,
    /// Largest dataset upload, in megabytes
    #[arg(long, default_value_t = 50, value_name = "MB")]
    pub max_upload_mb: usize,
    /// The edit demo needs an account too. Datasets, jobs, review queues and the embedded LLM's
    /// OpenAI-compatible API always need one (make the first admin with `flipside users add`)
    #[arg(long)]
    pub private: bool,
    /// The most a team's uploaded datasets may take on disk, in megabytes (delete some to upload
    /// more)
    #[arg(long, default_value_t = 1024, value_name = "MB")]
    pub team_quota_mb: u64,
    /// A proxy in front (terminating TLS) sets X-Forwarded-For and X-Forwarded-Proto: sign-in
    /// limits count the client's address from it, and session cookies are marked Secure when the
    /// client came over HTTPS. Do not set it when clients reach the server directly
    #[arg(long)]
    pub behind_proxy: bool,
    /// Connections one client address may hold open; more are answered 429 and closed (not
    /// counted with --behind-proxy: limit clients in the proxy then)
    #[arg(long, default_value_t = CONNECTIONS_PER_CLIENT, value_name = "N")]
    pub max_connections_per_client: usize,
    /// Delete uploads and finished jobs (records, checkpoints) older than this, e.g. 30d, 12h;
    /// an upload stays while a job reads it [default: keep everything until deleted]
    #[arg(long, value_name = "PERIOD", value_parser = parse_period)]
    pub retention: Option<std::time::Duration>,
    /// The longest one demo edit or /v1 completion may run, e.g. 90s, 5m: it then stops, and
    /// its client gets 503 (a client that leaves stops its generation too)
    #[arg(long, default_value = "5m", value_name = "PERIOD", value_parser = parse_period)]
    pub deadline: std::time::Duration,
    /// Classifier that scores edits (a directory or a name under HOME/models)
    /// [default: imdb-400, trained on first run; imdb-2000 with --full]
    #[arg(long, value_name = "MODEL")]
    pub classifier: Option<String>,
    /// AutoCAD's infiller in jobs and the demo
    #[command(flatten)]
    pub infiller: InfillerArgs,
    /// Corpus to retrieve helpers from [default: rt (Rotten Tomatoes sentences), built and
    /// indexed on first run; movies with --full]
    #[arg(long, value_name = "NAME")]
    pub corpus: Option<String>,
    /// Retriever whose index is searched (minilm, or a trained CF-DPR name)
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub encoder: String,
    /// Prompt template of one LLM method, for jobs and the demo: a built-in id or a TOML file,
    /// as in `--prompt core=my-prompt.toml`; repeat for several methods [default: each
    /// method's own]
    #[arg(long = "prompt", value_name = "METHOD=ID|FILE", value_parser = method_prompt)]
    pub prompts: Vec<(String, String)>,
    /// First run builds the full defaults: the IMDb + Rotten Tomatoes corpus (238,203
    /// sentences; about an hour to index on 2 cores) and a classifier of 2,000 reviews
    #[arg(long)]
    pub full: bool,
    #[command(flatten)]
    pub llm: LlmArgs,
    /// The Dis-AE jobs and the demo reproduce with [default: HOME/models/dis-ae, when it exists;
    /// without one the lass method is refused]
    #[command(flatten)]
    pub lass: LassArgs,
    /// Prepare the first-run defaults (fetch the models and data, index the corpus, train the
    /// classifier) and exit without serving, e.g. while building a machine image
    #[arg(long)]
    pub prepare_only: bool,
}

/// Serves until interrupted, answering from the start while the defaults are prepared on
/// first run and the models load (in the background; the page shows how far it is).
pub fn run(home: &Home, args: ServeArgs) -> Result<()> {
    // Checked first: a wrong template or directory should not wait for the first-run
    // preparation.
    let settings = EditSettings {
        prompts: args.prompts.iter().cloned().collect(),
        reproduction: args.lass.settings(),
        ..EditSettings::default()
    };
    for method in METHODS.iter().filter(|m| m.uses_llm()) {
        method.check(&settings)?;
    }
    let dis_ae = Some(args.lass.dir(home)?);
    if args.prepare_only {
        let candidates = settings.most_candidates(&METHODS);
        prepare_defaults(home, &args, dis_ae.as_deref(), candidates, print_step)?;
        println!("prepared");
        return Ok(());
    }
    let static_dir = browser_app_dir(args.static_dir.as_deref(), args.app_building)?;
    // Model work yields the CPU to request handling (before anything starts rayon's pool).
    crate::server::priority::lower_rayon_pool();
    println!("Flipside home: {}", home.root().display());
    let config = ServerConfig {
        listen: args.listen,
        database_url: args.database.url(home),
        data_dir: args.database.data_dir(home),
        static_dir,
        max_upload_bytes: args.max_upload_mb << 20,
        team_quota_bytes: args.team_quota_mb << 20,
        embedded_llm: !args.llm.remote(),
        private: args.private,
        behind_proxy: args.behind_proxy,
        connections_per_client: args.max_connections_per_client,
        retention: args.retention,
        deadline: args.deadline,
    };
    let preparation = Preparation::start(STEPS[0]);
    std::thread::spawn({
        let (home, preparation) = (home.clone(), preparation.clone());
        move || {
            // Model work, like the rayon pool's: builds running beside the server go first.
            crate::server::priority::lower_this_thread();
            let result = prepare(&home, args, settings, dis_ae, &preparation);
            let failed = result.is_err();
            preparation.finish(result);
            if !failed {
                // After `finish`: whoever reads this line finds the models loaded.
                println!("ready");
            }
        }
    });
    // The I/O driver is polled every few tasks rather than every 61 (tokio's default): tasks
    // that write large downloads take long, and a new request would wait behind dozens of them.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .event_interval(4)
        .build()?;
    runtime.block_on(serve(home.clone(), config, preparation, |address| {
        // One line on stdout, so scripts and tests can find the port ("ready" follows once the
        // models are loaded).
        println!("listening on http://{address}/");
        tracing::info!(
            "the app at http://{address}/, the API at /api (OpenAPI: /api/openapi.json), the \
             LLM at /v1; preparing the models"
        );
    }))
}

/// The steps of [`prepare`], as the page shows them.
const STEPS: [&str; 4] = [
    "fetching models and data (step 1 of 4)",
    "the retrieval corpus and its index (step 2 of 4)",
    "the classifier (step 3 of 4)",
    "loading the models (step 4 of 4)",
];

/// Prints step `n` (from 0) of [`STEPS`] as it starts.
fn print_step(n: usize) {
    println!("{}. {}", n + 1, STEPS[n]);
}

/// Fetches what is missing, builds the default corpus and classifier when they are missing, and
/// loads the models (with the Dis-AE in `dis_ae`, if any), telling `preparation` each step.
fn prepare(
    home: &Home,
    args: ServeArgs,
    settings: EditSettings,
    dis_ae: Option<PathBuf>,
    preparation: &Preparation,
) -> Result<Resources> {
    let step = |n: usize| {
        print_step(n);
        preparation.step(STEPS[n]);
    };
    let candidates = settings.most_candidates(&METHODS);
    let Defaults {
        corpus,
        retrieval,
        classifier_dir,
    } = prepare_defaults(home, &args, dis_ae.as_deref(), candidates, step)?;

    step(3);
    let llm: Arc<dyn LlmClient> = if args.llm.remote() {
        args.llm.client(home)?
    } else {
        Arc::new(args.llm.local(home)?)
    };
    let fluency = args
        .lass
        .fluency
        .for_run(home, dis_ae.is_some(), candidates, 1)?;
    Resources::load(
        home,
        ResourceConfig {
            retrieval,
            corpus,
            classifier_dir,
            llm,
            settings,
            infiller: match args.infiller.setup(home, RationaleSettings::default()) {
                Ok(setup) => Some(setup),
                // The shipped one could not be written (a full disk, say): AutoCAD is off, the
                // rest runs.
                Err(error) if args.infiller.name.is_none() => {
                    tracing::warn!("no infiller, so no AutoCAD: {error:#}");
                    None
                }
                Err(error) => return Err(error),
            },
            dis_ae,
            fluency,
        },
    )
}

/// What the first three steps of [`prepare`] leave ready to load.
struct Defaults {
    corpus: String,
    retrieval: RetrievalSetup,
    classifier_dir: PathBuf,
}

/// Steps 1–3 of [`prepare`] (fetching, the corpus and its index, the classifier), each skipped
/// where its result exists; `step(n)` is called as step `n` (from 0) starts. The fluency model
/// is fetched when a method ranks `candidates` (> 1) an attempt or LASS filters.
fn prepare_defaults(
    home: &Home,
    args: &ServeArgs,
    dis_ae: Option<&Path>,
    candidates: usize,
    step: impl Fn(usize),
) -> Result<Defaults> {
    step(0);
    let mut assets = vec![
        "minilm",
        "movie-reviews",
        "lexicons",
        "pos-lexicon",
        T5_TOKENIZER_ASSET,
    ];
    if !args.llm.remote() && args.llm.model == DEFAULT_EDITOR_MODEL {
        assets.push(DEFAULT_EDITOR_MODEL);
    }
    let fluency_asset = home
        .manifest()
        .get(&args.lass.fluency.fluency_model)
        .is_ok();
    let filters = dis_ae.is_some() && args.lass.fluency.max_perplexity > 0.0;
    if (filters || candidates > 1) && fluency_asset {
        assets.push(args.lass.fluency.fluency_model.as_str());
    }
    fetch_assets(home, &assets)?;

    step(1);
    let (corpus, corpus_dir) = match (&args.corpus, args.full) {
        (Some(name), _) => (name.as_str(), corpus_dir(home, name)),
        (None, false) => (
            SMALL_CORPUS,
            corpus_with_index(home, SMALL_CORPUS, &["rotten-tomatoes"])?,
        ),
        (None, true) => (
            FULL_CORPUS,
            corpus_with_index(home, FULL_CORPUS, &["imdb:train", "rotten-tomatoes"])?,
        ),
    };
    let retrieval = RetrievalSetup {
        index_dir: index_dir(&corpus_dir, &args.encoder),
        corpus_dir,
        encoders: RetrieverEncoders::resolve(home, &args.encoder)?,
        reranker: None,
        per_query: 3,
        max_queries: 3,
        target_label_only: true,
    };

    step(2);
    let classifier_dir = match &args.classifier {
        Some(name) => resolve_model_dir(home, name)?,
        None if args.full => imdb_classifier(home, FULL_CLASSIFIER_SIZE)?,
        None => imdb_classifier(home, DEFAULT_CLASSIFIER_SIZE)?,
    };
    println!("   {}", classifier_dir.display());
    Ok(Defaults {
        corpus: corpus.to_string(),
        retrieval,
        classifier_dir,
    })
}

/// The browser app's directory: `explicit` (which must hold an `index.html` unless the app is
/// `building`), else `dist` when it has one, else none (the API is served alone, with a
/// warning).
fn browser_app_dir(explicit: Option<&Path>, building: bool) -> Result<Option<PathBuf>> {
    let dir = match explicit {
        Some(dir) => {
            anyhow::ensure!(
                building || dir.join("index.html").is_file(),
                "{} has no index.html: build the app with `{BUILD_APP}`",
                dir.display()
            );
            Some(dir.to_path_buf())
        }
        None => Some(PathBuf::from("dist")).filter(|d| d.join("index.html").is_file()),
    };
    if dir.is_none() {
        tracing::warn!("no browser app to serve (build it with `{BUILD_APP}`): API only");
    }
    Ok(dir)
}
