//! `flipside bench dis-ae`: Dis-AE training steps per second against a PyTorch implementation
//! of the same architecture (`backend/bench/torch_dis_ae_train.py`: `nn.LSTM`s, packed
//! sequences), from the same initial weights, on the same batches, learning rates, loss weights
//! and threads, in one run; and how many cores each side keeps busy (CPU time over wall time).
//! Flipside's side is `lass train`'s own training loop; the first losses must agree.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use burn::backend::Autodiff;
use burn::module::Module;
use burn::tensor::backend::Backend;
use clap::Args;
use flipside_shared::models::dis_ae::loss::Annealing;
use flipside_shared::models::dis_ae::reproduce::MAX_TOKENS;
use flipside_shared::models::dis_ae::vocabulary::Vocabulary;
use flipside_shared::models::dis_ae::{DisAe, DisAeConfig};
use serde::Deserialize;

use super::{TorchBenchArgs, cpu_seconds, run_reference_script};
use crate::cli::data::ReadArgs;
use crate::compute::Compute;
use crate::home::Home;
use crate::lass::train::{
    DisAeData, DisAeObjective, EncodedText, corpus_train, default_model, opinion_masking,
    pair_train,
};
use crate::lass::vocabulary::train_vocabulary;
use crate::training::classifier::{
    Objective, TrainConfig, TrainRecord, initial_model, learning_rate, optimise, training_order,
};
use crate::with_backend;

const REFERENCE_SCRIPT: &str = include_str!("../../../bench/torch_dis_ae_train.py");

#[derive(Debug, Args)]
pub struct DisAeBenchArgs {
    /// Optimiser steps timed (after --warm-up more)
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    #[arg(long, default_value_t = 2)]
    pub warm_up: usize,
    /// Items per step (texts, or pairs with --pairs) [default: `lass train`'s]
    #[arg(long, default_value_t = corpus_train().batch_size)]
    pub batch_size: usize,
    /// Time the pairs stage (all of LASS's Eq. 7 on pairs of opposite sentiment, four decodes
    /// an item) instead of the corpus-first stage (reconstruction and the sentiment terms)
    #[arg(long)]
    pub pairs: bool,
    /// Time the paper's decoder (`lass train --no-copy`) instead of the copying one
    #[arg(long)]
    pub no_copy: bool,
    /// Most ids of the vocabulary learnt from the sentences [default: `lass train`'s]
    #[arg(long, default_value_t = 8000, value_name = "IDS")]
    pub vocabulary: usize,
    #[command(flatten)]
    pub sides: TorchBenchArgs,
}

#[derive(Deserialize)]
struct ReferenceResult {
    step_seconds: Vec<f64>,
    first_loss: f64,
    cpu_seconds: f64,
    wall_seconds: f64,
    torch: String,
    threads: usize,
}

/// One side's run.
struct Measured {
    step_seconds: Vec<f64>,
    first_loss: f64,
    /// CPU seconds over wall seconds of the whole run: the cores it kept busy.
    cores_busy: f64,
}

pub fn bench_dis_ae(home: &Home, args: DisAeBenchArgs) -> Result<()> {
    ensure!(args.steps > 0, "--steps must be at least 1");
    let threads = args.sides.threads();
    let stage = if args.pairs {
        pair_train()
    } else {
        corpus_train()
    };
    let train = TrainConfig {
        epochs: 1,
        batch_size: args.batch_size,
        // No checkpoint but the last (after the timed steps).
        checkpoint_every: usize::MAX,
        ..stage
    };
    let steps = args.steps + args.warm_up;
    let data = ReadArgs::defaults().load(home, "rotten-tomatoes:train")?;
    let vocabulary_json = train_vocabulary(
        data.examples.iter().map(|e| e.input.texts()[0]),
        args.vocabulary,
    )?;
    let vocabulary = Vocabulary::from_json(&vocabulary_json, MAX_TOKENS)?;
    let mut config = default_model();
    config.vocab_size = vocabulary.size();
    config.labels = data.labels.names().to_vec();
    let tokens = vocabulary.special_tokens();
    (config.pad_id, config.bos_id, config.eos_id) = (tokens.pad, tokens.start, tokens.end);
    if !args.no_copy {
        config.copy = Some(opinion_masking(home)?);
    }
    let masked_words = config.masked_words();

    // A seeded sample of the sentences that fit, as `lass train` encodes them.
    let mut texts = Vec::new();
    for example in data.sample(data.len(), train.seed).examples {
        let text = example.input.texts()[0];
        let encoded = EncodedText::new(&vocabulary, &config, &masked_words, text, example.label)?;
        if encoded.ids.len() < MAX_TOKENS {
            texts.push(encoded);
        }
    }
    let items = steps * args.batch_size;
    let data = if args.pairs {
        // Speed only: each pair is a text of one class beside one of the other, whatever
        // their content.
        let (first, second): (Vec<EncodedText>, Vec<EncodedText>) =
            texts.into_iter().partition(|t| t.class == 0);
        let pairs: Vec<_> = first.into_iter().zip(second).take(items).collect();
        ensure!(
            pairs.len() == items,
            "Rotten Tomatoes has only {} pairs to make; ask for fewer --steps",
            pairs.len()
        );
        DisAeData::Pairs(pairs)
    } else {
        ensure!(
            texts.len() >= items,
            "Rotten Tomatoes has only {} sentences; ask for fewer --steps",
            texts.len()
        );
        texts.truncate(items);
        DisAeData::Texts(texts)
    };
    let objective = DisAeObjective {
        config: config.clone(),
        data,
        annealing: Annealing::default().for_stage(steps),
        base: None,
    };
    objective.check()?;

    let lengths =
        <DisAeObjective as Objective<Autodiff<crate::compute::Cpu>>>::lengths(&objective)?;
    let order = training_order(&train, items, lengths.as_deref(), 0);
    let texts_per_item = if args.pairs { 2 } else { 1 };
    let pieces: usize = lengths.iter().flatten().sum::<usize>() * texts_per_item;
    let dir = tempfile::tempdir()?;
    let weights = dir.path().join("initial.safetensors");
    let parameters = with_backend!(
        args.sides.device,
        write_initial(&objective, &train, &weights)
    )?;
    println!(
        "dis-ae bench: the {} stage, Dis-AE of {parameters} parameters (embedding {}, encoder \
         2 × {}, latent 2 × {}, decoder {}, vocabulary {}), batch {} ({:.1} pieces a text on \
         average), {} timed steps after {} warm-up, {threads} threads; CPU features: {}",
        if args.pairs { "pairs" } else { "corpus-first" },
        config.d_embed,
        config.d_encoder,
        config.d_latent,
        config.d_decoder,
        config.vocab_size,
        args.batch_size,
        pieces as f64 / (items * texts_per_item) as f64,
        args.steps,
        args.warm_up,
        super::cpu_features()
    );

    let reference = match args.sides.reference_python(home)? {
        None => None,
        Some(python) => {
            let rows = |item: usize| -> Vec<&EncodedText> {
                match &objective.data {
                    DisAeData::Texts(texts) => vec![&texts[item]],
                    DisAeData::Pairs(pairs) => vec![&pairs[item].0, &pairs[item].1],
                }
            };
            let batches: Vec<serde_json::Value> = order
                .chunks(args.batch_size)
                .enumerate()
                .map(|(step, batch)| {
                    let sides: Vec<serde_json::Value> = (0..texts_per_item)
                        .map(|side| {
                            let texts: Vec<&EncodedText> =
                                batch.iter().map(|&i| rows(i)[side]).collect();
                            serde_json::json!({
                                "ids": texts.iter().map(|t| &t.ids).collect::<Vec<_>>(),
                                "content": texts.iter().map(|t| &t.content).collect::<Vec<_>>(),
                                "classes": texts.iter().map(|t| t.class).collect::<Vec<_>>(),
                            })
                        })
                        .collect();
                    let weights = objective.annealing.weights(step);
                    serde_json::json!({
                        "sides": sides,
                        "lr": learning_rate(&train, step, steps),
                        "alpha": weights.alpha,
                        "beta": weights.beta,
                        "gamma": weights.gamma,
                    })
                })
                .collect();
            let request = serde_json::json!({
                "weights": weights,
                "config": config,
                "batches": batches,
                "max_grad_norm": train.max_grad_norm,
                "threads": threads,
            });
            let stdout = run_reference_script(python, REFERENCE_SCRIPT, &request, "PyTorch")?;
            let result: ReferenceResult =
                serde_json::from_slice(&stdout).context("the reference printed no result")?;
            ensure!(
                result.step_seconds.len() == steps,
                "the reference timed {} steps, not {steps}",
                result.step_seconds.len()
            );
            Some(result)
        }
    };
    let ours = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?
        .install(|| {
            with_backend!(
                args.sides.device,
                time_flipside(&objective, &train, dir.path())
            )
        })?;

    let rate = |seconds: &[f64]| args.steps as f64 / seconds[args.warm_up..].iter().sum::<f64>();
    let ours_rate = rate(&ours.step_seconds);
    println!(
        "{:<36} {ours_rate:>7.3} steps/s  first loss {:.4}  cores busy {:.2}",
        "flipside (burn)", ours.first_loss, ours.cores_busy
    );
    if let Some(reference) = reference {
        let theirs = rate(&reference.step_seconds);
        println!(
            "{:<36} {theirs:>7.3} steps/s  first loss {:.4}  cores busy {:.2}",
            format!(
                "PyTorch ({}, {} threads)",
                reference.torch, reference.threads
            ),
            reference.first_loss,
            reference.cpu_seconds / reference.wall_seconds
        );
        let gap = (ours.first_loss - reference.first_loss).abs() / reference.first_loss.abs();
        println!(
            "ratio flipside / PyTorch: {:.2}x (first losses {:.1e} apart, relative)",
            ours_rate / theirs,
            gap
        );
        if gap > 1e-5 {
            bail!(
                "the first losses differ ({} against {}): the two sides do not compute the same \
                 model",
                ours.first_loss,
                reference.first_loss
            );
        }
    }
    Ok(())
}

/// The weights both sides start from, as `optimise` draws them; their parameter count.
fn write_initial<B: Backend>(
    compute: Compute<B>,
    objective: &DisAeObjective,
    train: &TrainConfig,
    path: &Path,
) -> Result<usize> {
    let model: DisAe<Autodiff<B>> = initial_model(objective, &compute.device, train.seed)?;
    std::fs::write(path, model.to_safetensors()?)?;
    Ok(model.num_params())
}

/// `lass train`'s training loop on `objective`, checkpointing into `dir` only at the end.
fn time_flipside<B: Backend>(
    compute: Compute<B>,
    objective: &DisAeObjective,
    train: &TrainConfig,
    dir: &Path,
) -> Result<Measured> {
    let config: &DisAeConfig = &objective.config;
    let items = <DisAeObjective as Objective<Autodiff<B>>>::items(objective);
    let fresh = TrainRecord::new(
        train,
        dir,
        "dis-ae bench",
        "bench".into(),
        config.labels.clone(),
        items,
        std::any::type_name::<B>(),
    );
    let (cpu_before, wall) = (cpu_seconds(), Instant::now());
    let (_, record) =
        optimise::<Autodiff<B>, _>(objective, &compute, fresh, &dir.join("state"), None)?;
    let cores_busy = (cpu_seconds() - cpu_before) / wall.elapsed().as_secs_f64();
    Ok(Measured {
        first_loss: record.losses.first().copied().unwrap_or(f64::NAN),
        step_seconds: record.step_seconds,
        cores_busy,
    })
}
