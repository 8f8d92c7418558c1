//! The burn BERT matches an independent float64 numpy forward pass of all-MiniLM-L6-v2
//! (tools/reference/minilm_reference.py → tests/fixtures/minilm_reference.json).

use crate::common;

use flipside_backend::compute::Cpu;
use flipside_backend::model_dirs::load_encoder;
use flipside_shared::batching::Sequential;
use flipside_shared::data::Input;
use flipside_shared::models::encoder::SentenceEncoder;
use flipside_shared::ops::int8::Kernel;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    sentences: Vec<String>,
    input_ids: Vec<Vec<i64>>,
    embeddings: Vec<Vec<f32>>,
}

fn fixture() -> Fixture {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/minilm_reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn minilm_embeddings_match_the_numpy_reference_in_one_padded_batch() {
    let fixture = fixture();
    let encoder = load_encoder::<Cpu>(&common::asset("minilm"), &Default::default()).unwrap();
    let texts: Vec<&str> = fixture.sentences.iter().map(String::as_str).collect();

    let tokens = encoder.tokenizer.encode_texts(&texts).unwrap();
    let lengths = tokens.lengths();
    for (row, ids) in fixture.input_ids.iter().enumerate() {
        let ours = &tokens.input_ids[row * tokens.seq_len..row * tokens.seq_len + lengths[row]];
        assert_eq!(ours, ids.as_slice(), "token ids of sentence {row}");
    }
    // The bundled tokenizer.json pads and truncates to 128; ours must not.
    assert!(lengths.iter().any(|&n| n > 128), "{lengths:?}");
    assert_eq!(tokens.seq_len, *lengths.iter().max().unwrap());
    // What batches are sorted by: each text's tokens, special tokens included, truncated.
    assert_eq!(
        encoder.tokenizer.count_text_tokens(&texts).unwrap(),
        lengths
    );
    let long = "superb ".repeat(2 * encoder.tokenizer.max_len());
    assert_eq!(
        encoder.tokenizer.count_text_tokens(&[&long]).unwrap(),
        [encoder.tokenizer.max_len()]
    );
    // A pair past `max_len` is cut as its padded batch is (longest first, three special tokens).
    let pair = Input::with_premise(Some(long.as_str()), "the acting was superb");
    assert_eq!(
        encoder.tokenizer.count_input_tokens(&[&pair]).unwrap(),
        encoder.tokenizer.encode_inputs(&[&pair]).unwrap().lengths()
    );
    assert_eq!(
        encoder.tokenizer.count_input_tokens(&[&pair]).unwrap(),
        [encoder.tokenizer.max_len()]
    );

    let batch = encoder.embed_batch(&texts).unwrap();
    let batch: Vec<Vec<f32>> = batch
        .into_data()
        .into_vec::<f32>()
        .unwrap()
        .chunks(encoder.dim())
        .map(<[f32]>::to_vec)
        .collect();
    let diff = max_abs_diff(&batch, &fixture.embeddings);
    eprintln!("max |difference| from the numpy reference: {diff:.2e}");
    assert!(diff <= 1e-4, "max |difference| {diff:e}");

    // Each sentence alone (no padding) gives the same vector as inside the padded batch.
    let alone: Vec<Vec<f32>> = texts
        .iter()
        .map(|t| {
            encoder
                .embed_all(&[t], 1, &Sequential, &|_| {})
                .unwrap()
                .remove(0)
        })
        .collect();
    let diff = max_abs_diff(&alone, &batch);
    assert!(diff <= 1e-5, "padding changed embeddings by {diff:e}");
}

#[test]
fn int8_copies_embed_close_to_the_numpy_reference_with_every_kernel() {
    let fixture = fixture();
    let texts: Vec<&str> = fixture.sentences.iter().map(String::as_str).collect();
    let encoder = load_encoder::<Cpu>(&common::asset("minilm"), &Default::default()).unwrap();
    assert!(!Kernel::available().is_empty(), "x86-64-v3 has AVX2");
    // The page's kernels too (here as plain loops, with the encoder's portable f32 steps:
    // padded batches reach its attention's masking at MiniLM's size).
    let page_kernels = [Kernel::Simd128, Kernel::RelaxedSimd];
    for kernel in Kernel::available().into_iter().chain(page_kernels) {
        let encoder = SentenceEncoder {
            model: encoder.model.clone().with_int8_copies(kernel),
            tokenizer: encoder.tokenizer.clone(),
            device: encoder.device,
        };
        assert_eq!(encoder.model.int8_kernel(), Some(kernel));
        let embeddings = encoder.embed_all(&texts, 4, &Sequential, &|_| {}).unwrap();
        let cosines: Vec<f32> = embeddings
            .iter()
            .zip(&fixture.embeddings)
            .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum())
            .collect();
        eprintln!("{kernel:?}: cosines with the numpy reference: {cosines:?}");
        // all-MiniLM-L6-v2 in int8 measured 0.996 (AMX, VNNI) and 0.988 (AVX2, 7-bit activations)
        // at worst over 2048 Rotten Tomatoes sentences (`flipside bench encode`); a broken
        // kernel gives ~0 or NaN.
        let floor = match kernel {
            Kernel::Amx | Kernel::Vnni | Kernel::Simd128 => 0.99,
            Kernel::Avx2 | Kernel::RelaxedSimd => 0.98,
        };
        assert!(
            cosines.iter().all(|&c| c > floor),
            "{kernel:?}: {cosines:?}"
        );
        let diff = max_abs_diff(&embeddings, &fixture.embeddings);
        assert!(diff > 1e-4, "{kernel:?}: int8 is not exact");
    }
}
