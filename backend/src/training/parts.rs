//! A batch's loss and gradients, computed whole or in parts on the CPU's threads.
//!
//! On 2 CPU cores a small model's step leaves part of a core idle: its operations are many and
//! small, and a dozen of them (copies, broadcasts, the embedding's gradient) run on one thread
//! (`flipside bench dis-ae`: 1.6 cores busy). A batch split into one part per thread, each part
//! on its own copy of the model with its own autodiff graph, keeps every core busy; for a loss
//! that is a mean over items, the parts' losses and gradients averaged by item count are the
//! whole batch's (summed in another order). The parts' forward passes all run before their
//! backward passes: burn-autodiff 0.21 is not safe for a backward pass beside a forward pass on
//! another thread ([`loss_and_gradients`]).

use anyhow::Result;
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, Tensor};
use rayon::prelude::*;

use super::classifier::Objective;

/// Parts a batch is split into at most: each holds a gradient for every parameter until they
/// are summed, and 4 parts already keep a step's serial work off a single thread.
pub const MAX_PARTS: usize = 4;

/// The mean loss over `batch` at optimiser step `step` and its gradients, the batch in `parts`
/// parts (at most [`MAX_PARTS`] and the batch's length; sizes differing by at most one) run on
/// rayon's threads; one part: the batch whole, on the calling thread. Only for an objective
/// whose loss is a mean over items ([`Objective::item_mean`]). The parts are combined in order,
/// so the result depends on the number of parts (the training loop's: its thread count), not
/// on which thread finishes first.
pub fn loss_and_gradients<B, O>(
    objective: &O,
    model: &O::Model,
    batch: &[usize],
    step: usize,
    device: &B::Device,
    parts: usize,
) -> Result<(f64, GradientsParams)>
where
    B: AutodiffBackend,
    O: Objective<B> + Sync,
{
    // The loss's value, and its gradients by parameter.
    let gradients = |model: &O::Model, loss: Tensor<B, 1>| -> (f64, GradientsParams) {
        let value = loss.clone().into_scalar().elem::<f32>() as f64;
        (value, GradientsParams::from_grads(loss.backward(), model))
    };
    let parts = parts.min(MAX_PARTS).clamp(1, batch.len().max(1));
    if parts == 1 {
        let loss = objective.loss(model, batch, step, device)?;
        return Ok(gradients(model, loss));
    }
    let (size, longer) = (batch.len() / parts, batch.len() % parts);
    let mut rest = batch;
    let chunks: Vec<&[usize]> = (0..parts)
        .map(|part| {
            let (chunk, after) = rest.split_at(size + usize::from(part < longer));
            rest = after;
            chunk
        })
        .collect();
    // Each part's copy shares the weights' memory but is a new leaf of its own graph.
    let copies: Vec<O::Model> = chunks.iter().map(|_| model.clone().fork(device)).collect();
    // Every part's forward pass, then every part's backward pass: in burn-autodiff 0.21 a
    // backward pass frees the steps it finds unreferenced in every graph, including one another
    // thread is still building, which silently drops part of that graph's gradients
    // (tracel-ai/burn#5573; fixed in 0.22). Between the phases no graph is being built.
    let forwards: Vec<(O::Model, Result<Tensor<B, 1>>)> = copies
        .into_par_iter()
        .zip(chunks.par_iter())
        .map(|(copy, items)| {
            let loss = objective.loss(&copy, items, step, device);
            (copy, loss)
        })
        .collect();
    let results: Vec<Result<(f64, GradientsParams)>> = forwards
        .into_par_iter()
        .map(|(copy, loss)| Ok(gradients(&copy, loss?)))
        .collect();
    let mut loss = 0.0;
    let mut weighted = Vec::with_capacity(results.len());
    for (result, items) in results.into_iter().zip(&chunks) {
        let (part_loss, grads) = result?;
        let weight = items.len() as f64 / batch.len() as f64;
        loss += weight * part_loss;
        weighted.push((weight, grads));
    }
    Ok((loss, weighted_sum(model, weighted)))
}

/// `Σ wᵢ gᵢ` of each of `model`'s parameters over the weighted gradients `parts` (a parameter
/// no part has a gradient for has none).
fn weighted_sum<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    parts: Vec<(f64, GradientsParams)>,
) -> GradientsParams {
    struct Sum<B: AutodiffBackend> {
        parts: Vec<(f64, GradientsParams)>,
        sum: GradientsParams,
        _backend: std::marker::PhantomData<B>,
    }
    impl<B: AutodiffBackend> ModuleVisitor<B> for Sum<B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let id: ParamId = param.id;
            let sum = self
                .parts
                .iter_mut()
                .filter_map(|(weight, grads)| {
                    let grad = grads.remove::<B::InnerBackend, D>(id)?;
                    Some(grad.mul_scalar(*weight))
                })
                .reduce(|sum, grad| sum + grad);
            if let Some(sum) = sum {
                self.sum.register(id, sum);
            }
        }
    }
    let mut visitor = Sum::<B> {
        parts,
        sum: GradientsParams::new(),
        _backend: std::marker::PhantomData,
    };
    model.visit(&mut visitor);
    visitor.sum
}
