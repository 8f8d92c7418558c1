//! Compact weights for the browser's download: every f32 matrix of a safetensors checkpoint
//! stored as int8 with one f32 scale per row (symmetric, `scale = max |w| / levels`), everything
//! else unchanged. A quarter of the bytes; each weight is off by at most half its row's scale.
//! With fewer than 8 bits (`levels = 2^(bits-1) - 1`, e.g. ±63 for 7) the values still take a
//! byte each, but they carry less information, so gzip (which the server applies) shrinks them
//! further: about one bit per weight less for each bit dropped.
//!
//! [`expand`] turns a compact checkpoint back into an ordinary f32 one, and
//! [`super::checkpoint::load_renamed`] calls it on every checkpoint it reads, so a compact file
//! loads wherever a full one does (natively and in the browser).

use std::collections::HashMap;

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

use super::checkpoint::CheckpointError;

/// The name of a model directory's compact weights, as the server offers them to the browser.
pub const COMPACT_WEIGHTS_FILE: &str = "model.int8.safetensors";

/// The header metadata key (and its value) that marks a compact checkpoint.
const MARKER: (&str, &str) = ("flipside_weights", "int8-per-row");
/// The header metadata key recording the bits per weight.
const BITS_KEY: &str = "flipside_weight_bits";
/// The suffix of the key that holds a quantised matrix's row scales.
const SCALE_SUFFIX: &str = "::row_scale";
/// Matrices smaller than this stay f32 (the savings would not pay for the error).
const MIN_QUANTISED_ELEMENTS: usize = 1024;

/// One tensor of a checkpoint being written.
struct Owned {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// The compact form of safetensors `weights`: f32 tensors of two or more dimensions and at
/// least 1,024 elements become int8 rows of `bits` (2 to 8) significant bits with an f32 scale
/// each (rows = every dimension but the last); other tensors and the metadata are kept. A
/// checkpoint that is already compact is returned as it is.
pub fn compact(weights: &[u8], bits: u32) -> Result<Vec<u8>, CheckpointError> {
    if !(2..=8).contains(&bits) {
        return Err(CheckpointError::Serialise(format!(
            "{bits} bits per weight: 2 to 8 can be stored"
        )));
    }
    let levels = ((1u32 << (bits - 1)) - 1) as f32;
    let (tensors, mut metadata) = read(weights)?;
    if metadata.get(MARKER.0).is_some_and(|v| v == MARKER.1) {
        return Ok(weights.to_vec());
    }
    let mut out = Vec::new();
    for (name, view) in tensors.tensors() {
        let shape = view.shape().to_vec();
        let quantise = view.dtype() == Dtype::F32
            && shape.len() >= 2
            && shape.iter().product::<usize>() >= MIN_QUANTISED_ELEMENTS;
        if !quantise {
            out.push(Owned {
                name,
                dtype: view.dtype(),
                shape,
                data: view.data().to_vec(),
            });
            continue;
        }
        let columns = shape[shape.len() - 1];
        let values = f32s(view.data());
        let mut quantised = Vec::with_capacity(values.len());
        let mut scales = Vec::with_capacity(values.len() / columns.max(1));
        for row in values.chunks(columns.max(1)) {
            let scale = row.iter().fold(0f32, |m, w| m.max(w.abs())) / levels;
            scales.extend_from_slice(&scale.to_le_bytes());
            quantised.extend(row.iter().map(|&w| {
                let q = if scale > 0.0 {
                    (w / scale).round()
                } else {
                    0.0
                };
                q.clamp(-levels, levels) as i8 as u8
            }));
        }
        out.push(Owned {
            name: format!("{name}{SCALE_SUFFIX}"),
            dtype: Dtype::F32,
            shape: vec![scales.len() / 4],
            data: scales,
        });
        out.push(Owned {
            name,
            dtype: Dtype::I8,
            shape,
            data: quantised,
        });
    }
    metadata.insert(MARKER.0.to_string(), MARKER.1.to_string());
    metadata.insert(BITS_KEY.to_string(), bits.to_string());
    write(out, metadata)
}

/// Whether safetensors `weights` are in the compact form [`compact`] writes.
pub fn is_compact(weights: &[u8]) -> bool {
    SafeTensors::read_metadata(weights).is_ok_and(|(_, header)| {
        header
            .metadata()
            .as_ref()
            .and_then(|m| m.get(MARKER.0))
            .is_some_and(|v| v == MARKER.1)
    })
}

/// Ordinary f32 safetensors from compact `weights` (each int8 row times its scale); any other
/// checkpoint is returned as it is.
pub fn expand(weights: Vec<u8>) -> Result<Vec<u8>, CheckpointError> {
    if !is_compact(&weights) {
        return Ok(weights);
    }
    let (tensors, mut metadata) = read(&weights)?;
    metadata.remove(MARKER.0);
    metadata.remove(BITS_KEY);
    let mut out = Vec::new();
    for (name, view) in tensors.tensors() {
        if name.ends_with(SCALE_SUFFIX) {
            continue;
        }
        if view.dtype() != Dtype::I8 {
            out.push(Owned {
                name,
                dtype: view.dtype(),
                shape: view.shape().to_vec(),
                data: view.data().to_vec(),
            });
            continue;
        }
        let scales = tensors
            .tensor(&format!("{name}{SCALE_SUFFIX}"))
            .map_err(|_| CheckpointError::Mismatch(format!("{name} has no row scales")))?;
        let scales = f32s(scales.data());
        let shape = view.shape().to_vec();
        let columns = shape[shape.len() - 1].max(1);
        if scales.len() * columns != view.data().len() {
            return Err(CheckpointError::Mismatch(format!(
                "{name}: {} row scales for shape {shape:?}",
                scales.len()
            )));
        }
        let data = view
            .data()
            .chunks(columns)
            .zip(&scales)
            .flat_map(|(row, &scale)| row.iter().map(move |&q| f32::from(q as i8) * scale))
            .flat_map(f32::to_le_bytes)
            .collect();
        out.push(Owned {
            name,
            dtype: Dtype::F32,
            shape,
            data,
        });
    }
    write(out, metadata)
}

fn read(weights: &[u8]) -> Result<(SafeTensors<'_>, HashMap<String, String>), CheckpointError> {
    let invalid = |e: safetensors::SafeTensorError| {
        CheckpointError::Mismatch(format!("not a safetensors file: {e}"))
    };
    let (_, header) = SafeTensors::read_metadata(weights).map_err(invalid)?;
    let metadata = header.metadata().clone().unwrap_or_default();
    Ok((
        SafeTensors::deserialize(weights).map_err(invalid)?,
        metadata,
    ))
}

fn write(
    tensors: Vec<Owned>,
    metadata: HashMap<String, String>,
) -> Result<Vec<u8>, CheckpointError> {
    let views = tensors
        .iter()
        .map(|t| {
            TensorView::new(t.dtype, t.shape.clone(), &t.data)
                .map(|view| (t.name.clone(), view))
                .map_err(|e| CheckpointError::Serialise(format!("{}: {e}", t.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let metadata = (!metadata.is_empty()).then_some(metadata);
    safetensors::serialize(views, metadata).map_err(|e| CheckpointError::Serialise(e.to_string()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(tensors: &[(&str, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
        let owned = tensors
            .iter()
            .map(|(name, shape, values)| Owned {
                name: name.to_string(),
                dtype: Dtype::F32,
                shape: shape.clone(),
                data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            })
            .collect();
        let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
        write(owned, metadata).unwrap()
    }

    fn tensor(bytes: &[u8], name: &str) -> (Dtype, Vec<usize>, Vec<u8>) {
        let tensors = SafeTensors::deserialize(bytes).unwrap();
        let view = tensors.tensor(name).unwrap();
        (view.dtype(), view.shape().to_vec(), view.data().to_vec())
    }

    #[test]
    fn matrices_become_int8_rows_with_scales_and_the_rest_is_kept() {
        // Row 0's largest magnitude is 2.54, so its scale is 0.02 and 1.0 → round(50) = 50.
        let mut matrix = vec![0.0f32; 2 * 1024];
        matrix[0] = -2.54;
        matrix[1] = 1.0;
        matrix[1024] = 0.5; // row 1: scale 0.5 / 127, 0.5 → 127
        let bias = vec![0.25f32; 3];
        let small = vec![1.5f32; 4];
        let bytes = checkpoint(&[
            ("layer.weight", vec![2, 1024], matrix),
            ("layer.bias", vec![3], bias.clone()),
            ("small.weight", vec![2, 2], small.clone()),
        ]);
        let packed = compact(&bytes, 8).unwrap();
        assert!(is_compact(&packed) && !is_compact(&bytes));
        let (dtype, shape, data) = tensor(&packed, "layer.weight");
        assert_eq!((dtype, shape), (Dtype::I8, vec![2, 1024]));
        assert_eq!(data[..2], [(-127i8) as u8, 50]);
        assert_eq!(data[1024], 127);
        let (_, _, scales) = tensor(&packed, "layer.weight::row_scale");
        assert_eq!(f32s(&scales), [2.54 / 127.0, 0.5 / 127.0]);
        assert_eq!(f32s(&tensor(&packed, "layer.bias").2), bias);
        assert_eq!(f32s(&tensor(&packed, "small.weight").2), small);
        let (_, header) = SafeTensors::read_metadata(&packed).unwrap();
        let metadata = header.metadata().as_ref().unwrap();
        assert_eq!((&*metadata["format"], &*metadata[BITS_KEY]), ("pt", "8"));
        // Compacting twice changes nothing.
        assert_eq!(compact(&packed, 8).unwrap(), packed);
        // With 6 bits the largest magnitude maps to ±31.
        let six = compact(&bytes, 6).unwrap();
        assert_eq!(tensor(&six, "layer.weight").2[..2], [(-31i8) as u8, 12]);
        assert!(compact(&bytes, 9).is_err() && compact(&bytes, 1).is_err());
    }

    #[test]
    fn expanding_restores_every_weight_within_half_its_rows_scale() {
        let values: Vec<f32> = (0..3 * 512)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let bytes = checkpoint(&[("embedding.weight", vec![3, 512], values.clone())]);
        for (bits, levels) in [(8, 127.0), (7, 63.0), (4, 7.0)] {
            let expanded = expand(compact(&bytes, bits).unwrap()).unwrap();
            assert!(!is_compact(&expanded));
            let (dtype, shape, data) = tensor(&expanded, "embedding.weight");
            assert_eq!((dtype, shape), (Dtype::F32, vec![3, 512]));
            let restored = f32s(&data);
            for (row, restored_row) in values.chunks(512).zip(restored.chunks(512)) {
                let scale = row.iter().fold(0f32, |m, w| m.max(w.abs())) / levels;
                for (w, r) in row.iter().zip(restored_row) {
                    assert!(
                        (w - r).abs() <= scale / 2.0 + 1e-7,
                        "{bits} bits: {w} → {r}"
                    );
                }
            }
            let tensors = SafeTensors::deserialize(&expanded).unwrap();
            assert_eq!(tensors.names().len(), 1, "the scales are gone");
        }
        // An ordinary checkpoint passes through unchanged.
        assert_eq!(expand(bytes.clone()).unwrap(), bytes);
    }

    #[test]
    fn a_compact_file_without_its_scales_is_an_error() {
        let bytes = checkpoint(&[("w", vec![2, 1024], vec![1.0; 2048])]);
        let packed = compact(&bytes, 8).unwrap();
        let tensors = SafeTensors::deserialize(&packed).unwrap();
        let (_, header) = SafeTensors::read_metadata(&packed).unwrap();
        let view = tensors.tensor("w").unwrap();
        let without = safetensors::serialize([("w", view)], header.metadata().clone()).unwrap();
        let error = expand(without).unwrap_err().to_string();
        assert!(error.contains("w has no row scales"), "{error}");
    }
}
