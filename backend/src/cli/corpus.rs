//! `flipside corpus …`

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, Subcommand};

use super::data::ReadArgs;
use crate::home::Home;
use crate::retrieval::corpus::{
    Corpus, SentenceFilter, build_corpus, corpus_dir, dataset_documents, read_text_documents,
};

/// The corpus `corpus build` makes when given no sources.
pub const DEFAULT_SOURCES: [&str; 2] = ["imdb:train", "rotten-tomatoes"];

#[derive(Debug, Subcommand)]
pub enum CorpusCommand {
    /// Split reviews into sentences and add them to a corpus (sources already in it are
    /// skipped, so re-running only adds what is new)
    Build(BuildArgs),
    /// List a corpus's sources and sizes
    Info {
        #[command(flatten)]
        corpus: CorpusArg,
    },
    /// Print sentences by id
    Show {
        #[command(flatten)]
        corpus: CorpusArg,
        /// Sentence ids
        #[arg(required = true)]
        ids: Vec<usize>,
    },
}

/// Which corpus.
#[derive(Debug, Clone, Args, serde::Serialize)]
pub struct CorpusArg {
    /// A corpus name (a directory under the Flipside home's `corpora/`) or a path
    #[arg(long, default_value = "movies")]
    pub corpus: String,
}

impl CorpusArg {
    /// The corpus directory.
    pub fn dir(&self, home: &Home) -> PathBuf {
        corpus_dir(home, &self.corpus)
    }
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Sources: `imdb[:split]`, `rotten-tomatoes`, CSV/TSV/JSONL/Parquet files (the text column; labels
    /// are not read) or plain text files (one document per line)
    /// [default: imdb:train rotten-tomatoes]
    pub sources: Vec<String>,
    #[command(flatten)]
    pub corpus: CorpusArg,
    /// Drop sentences with fewer words
    #[arg(long, default_value_t = SentenceFilter::default().min_words)]
    pub min_words: usize,
    /// Drop sentences with more words
    #[arg(long, default_value_t = SentenceFilter::default().max_words)]
    pub max_words: usize,
    #[command(flatten)]
    pub read: ReadArgs,
}

pub fn run(home: &Home, command: CorpusCommand) -> Result<()> {
    match command {
        CorpusCommand::Build(args) => build(home, args),
        CorpusCommand::Info { corpus } => {
            let corpus = Corpus::open(&corpus.dir(home))?;
            print_info(&corpus);
            Ok(())
        }
        CorpusCommand::Show { corpus, ids } => {
            let corpus = Corpus::open(&corpus.dir(home))?;
            let sentences = corpus.sentences()?;
            for id in ids {
                let Some(sentence) = sentences.get(id) else {
                    anyhow::bail!("no sentence {id}: the corpus has {}", sentences.len());
                };
                println!(
                    "{id}\t{}\t{}#{}\t{}",
                    corpus.source_of(id).unwrap_or("?"),
                    sentence.doc,
                    sentence.pos,
                    sentence.text
                );
            }
            Ok(())
        }
    }
}

/// Adds each source of `args` that the corpus does not have yet.
pub fn build(home: &Home, args: BuildArgs) -> Result<()> {
    let sources: Vec<String> = if args.sources.is_empty() {
        DEFAULT_SOURCES.iter().map(|s| s.to_string()).collect()
    } else {
        args.sources.clone()
    };
    let filter = SentenceFilter {
        min_words: args.min_words,
        max_words: args.max_words,
    };
    let read = |source: &str| {
        let path = Path::new(source);
        if path.is_file() && path.extension().is_some_and(|e| e == "txt") {
            return read_text_documents(path);
        }
        dataset_documents(&args.read.load_unlabelled(home, source)?, source)
    };
    let corpus = build_corpus(&args.corpus.dir(home), &sources, filter, read)?;
    print_info(&corpus);
    Ok(())
}

fn print_info(corpus: &Corpus) {
    println!("corpus {}", corpus.dir().display());
    println!(
        "{:<28} {:>9} {:>10} {:>10} {:>9}",
        "source", "documents", "sentences", "duplicates", "filtered"
    );
    for source in corpus.sources() {
        println!(
            "{:<28} {:>9} {:>10} {:>10} {:>9}",
            source.name, source.documents, source.sentences, source.duplicates, source.filtered
        );
    }
    println!("{:<28} {:>9} {:>10}", "total", "", corpus.len());
}
