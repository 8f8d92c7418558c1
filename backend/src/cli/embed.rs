//! `flipside embed` and `flipside similarity`.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use burn::tensor::backend::Backend;
use clap::Args;
use flipside_shared::models::encoder::cosine;

use crate::compute::{Compute, DeviceChoice};
use crate::home::Home;
use crate::model_dirs::{DEFAULT_ENCODER, int8_where_possible, load_encoder, resolve_model_dir};
use crate::progress;
use crate::with_backend;

#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Text file with one text per line ("-" or nothing: stdin); blank lines are skipped
    pub input: Option<PathBuf>,
    /// Write here instead of stdout: `.npy` gives a float32 matrix, anything else JSON lines
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Encoder: a model asset name or an HF BERT directory
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub model: String,
    /// Texts per forward pass
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
    /// Multiply in int8 (CPU backend; AMX or AVX-512 VNNI, or AVX2 on CPUs without AVX-512; f32
    /// elsewhere): about 2-2.5x the texts per second, embeddings within cosine 0.996 of f32
    /// (AVX2: 1.4x, 0.988; docs/src/benchmarks.md)
    #[arg(long)]
    pub int8: bool,
}

#[derive(Debug, Args)]
pub struct SimilarityArgs {
    pub a: String,
    pub b: String,
    #[arg(long, default_value = DEFAULT_ENCODER)]
    pub model: String,
    #[arg(long, value_enum, default_value_t)]
    pub device: DeviceChoice,
}

pub fn embed(home: &Home, args: EmbedArgs) -> Result<()> {
    let reader: Box<dyn BufRead> = match &args.input {
        None => Box::new(io::stdin().lock()),
        Some(p) if p.as_os_str() == "-" => Box::new(io::stdin().lock()),
        Some(path) => Box::new(BufReader::new(
            File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
        )),
    };
    let mut lines = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("line {} is not valid UTF-8", i + 1))?;
        if !line.trim().is_empty() {
            lines.push((i + 1, line));
        }
    }
    if lines.is_empty() {
        bail!("no text to embed (the input is empty)");
    }
    let dir = resolve_model_dir(home, &args.model)?;
    let texts: Vec<&str> = lines.iter().map(|(_, t)| t.as_str()).collect();
    let vectors = with_backend!(
        args.device,
        embed_texts(&dir, &texts, args.batch_size, args.int8)
    )?;
    match &args.output {
        Some(path) if path.extension().is_some_and(|e| e == "npy") => {
            write_npy(path, &vectors)?;
            tracing::info!(
                "wrote {} × {} to {}",
                vectors.len(),
                vectors[0].len(),
                path.display()
            );
        }
        output => {
            let sink: Box<dyn Write> = match output {
                Some(path) => Box::new(File::create(path)?),
                None => Box::new(io::stdout().lock()),
            };
            let mut sink = BufWriter::new(sink);
            for ((line, text), embedding) in lines.iter().zip(&vectors) {
                let record = EmbeddedLine {
                    line: *line,
                    text,
                    embedding,
                };
                writeln!(sink, "{}", serde_json::to_string(&record)?)?;
            }
            sink.flush()?;
        }
    }
    Ok(())
}

/// One line of `flipside embed`'s JSON-lines output.
#[derive(serde::Serialize)]
struct EmbeddedLine<'a> {
    /// 1-based line number in the input.
    line: usize,
    text: &'a str,
    embedding: &'a [f32],
}

pub(super) fn embed_texts<B: Backend>(
    compute: Compute<B>,
    dir: &std::path::Path,
    texts: &[&str],
    batch_size: usize,
    int8: bool,
) -> Result<Vec<Vec<f32>>> {
    let mut encoder = load_encoder::<B>(dir, &compute.device)?;
    if int8 {
        encoder.model = int8_where_possible(encoder.model, None);
    }
    let bar = progress::items(texts.len() as u64, "embedding");
    let vectors = encoder.embed_all(texts, batch_size, &compute.batches, &|n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    Ok(vectors)
}

pub fn similarity(home: &Home, args: SimilarityArgs) -> Result<()> {
    let dir = resolve_model_dir(home, &args.model)?;
    let vectors = with_backend!(
        args.device,
        embed_texts(&dir, &[args.a.as_str(), args.b.as_str()], 2, false)
    )?;
    println!("{:.4}", cosine(&vectors[0], &vectors[1]));
    Ok(())
}

/// Writes rows as a little-endian float32 `.npy` matrix (NumPy format version 1.0).
fn write_npy(path: &std::path::Path, rows: &[Vec<f32>]) -> Result<()> {
    let cols = rows.first().map_or(0, Vec::len);
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}",
        rows.len(),
        cols
    );
    // Magic (6) + version (2) + length (2) + header + newline is padded to a multiple of 64.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = BufWriter::new(File::create(path)?);
    out.write_all(b"\x93NUMPY\x01\x00")?;
    out.write_all(&(header.len() as u16).to_le_bytes())?;
    out.write_all(header.as_bytes())?;
    for value in rows.iter().flatten() {
        out.write_all(&value.to_le_bytes())?;
    }
    out.flush()?;
    Ok(())
}
