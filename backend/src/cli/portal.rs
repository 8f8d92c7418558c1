//! `flipside portal …`: the team portal from scripts, with an API token.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Subcommand)]
pub enum PortalCommand {
    /// Download a queue's kept items (accepted, fixed, relabelled): for `classifier train`
    /// (text, label), `retriever train` / `reranker train` (pairs) or `experiment` (records)
    Export(ExportArgs),
}

/// What to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// {id, text, label}: for `flipside classifier train --train FILE`
    Classifier,
    /// {id, text, label, counterfactual}: for `retriever train` and `reranker train --pairs FILE`
    Pairs,
    /// Counterfactual records as `flipside generate` writes them: for `experiment` augment files
    Records,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The server, e.g. http://127.0.0.1:8080
    #[arg(long, env = "FLIPSIDE_SERVER", value_name = "URL")]
    pub server: String,
    /// An API token with the export scope (`flipside users token`, or the page's Tokens)
    #[arg(long, env = "FLIPSIDE_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The team's id
    #[arg(long)]
    pub team: String,
    /// The queue's id
    #[arg(long)]
    pub queue: String,
    #[arg(long, value_enum, default_value_t = Format::Classifier)]
    pub format: Format,
    /// Write CSV (classifier and pairs formats) whatever --out's extension
    #[arg(long)]
    pub csv: bool,
    /// Classifier format: add each kept item's original with its own label
    #[arg(long)]
    pub originals: bool,
    /// The file to write: FILE.parquet as Parquet, FILE.csv as CSV (classifier and pairs
    /// formats), anything else as JSON lines
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(command: PortalCommand) -> Result<()> {
    match command {
        PortalCommand::Export(args) => export(&args),
    }
}

fn export(args: &ExportArgs) -> Result<()> {
    let format = match args.format {
        Format::Classifier => "classifier",
        Format::Pairs => "pairs",
        Format::Records => "records",
    };
    let file = match (args.csv, crate::data::Format::from_path(&args.out)) {
        (true, _) | (false, Some(crate::data::Format::Csv)) => "csv",
        (false, Some(crate::data::Format::Parquet)) => "parquet",
        _ => "jsonl",
    };
    let url = format!(
        "{}/api/teams/{}/queues/{}/export?format={format}&as={}&originals={}",
        args.server.trim_end_matches('/'),
        args.team,
        args.queue,
        file,
        args.originals
    );
    let response = reqwest::blocking::Client::new()
        .get(&url)
        .bearer_auth(&args.token)
        .send()
        .with_context(|| format!("cannot reach {}", args.server))?;
    let status = response.status();
    let body = response.bytes().context("reading the export")?;
    if !status.is_success() {
        let message = serde_json::from_slice::<flipside_shared::api::ApiError>(&body)
            .map(|e| e.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
        bail!("the server answered {status}: {message}");
    }
    crate::model_dirs::write_atomic(&args.out, &body)?;
    let counted = match file {
        "parquet" => {
            let reader = parquet::file::reader::SerializedFileReader::new(body.clone())
                .context("the server's export is not a Parquet file")?;
            let rows = parquet::file::reader::FileReader::metadata(&reader)
                .file_metadata()
                .num_rows();
            format!("{rows} rows")
        }
        "csv" => format!("{} lines, with a header", count_lines(&body)),
        _ => format!("{} lines", count_lines(&body)),
    };
    eprintln!("wrote {} ({counted})", args.out.display());
    Ok(())
}

fn count_lines(body: &[u8]) -> usize {
    body.iter().filter(|b| **b == b'\n').count()
}
