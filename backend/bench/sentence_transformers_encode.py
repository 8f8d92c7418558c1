"""Reference timing for `flipside bench encode`: sentence-transformers on PyTorch (CPU or CUDA).

Reads a JSON request on stdin: {"model_dir", "sentences", "batch_size", "max_len", "threads",
"device", "int8"},
encodes the sentences with the same pipeline as Flipside (BERT -> mean pooling -> L2
normalisation, sequences truncated at max_len), twice in sentence-transformers' own batches and
once in batches sorted by token count as Flipside's, and prints a JSON result on stdout. With "int8"
(CPU only) it also times the model after PyTorch's dynamic int8 quantisation of its linear layers
(int8 weights, activations quantised per call), the counterpart of Flipside's int8 encoding, in
its own batches and in the token-sorted ones.
"""

import json
import sys
import time
import warnings

import torch
from sentence_transformers import SentenceTransformer, models


def main():
    request = json.load(sys.stdin)
    torch.set_num_threads(request["threads"])
    transformer = models.Transformer(request["model_dir"], max_seq_length=request["max_len"])
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device=request["device"])
    sentences = request["sentences"]
    batch = request["batch_size"]
    # Two passes over the same sentences, both timed, as Flipside's side does.
    start = time.perf_counter()
    model.encode(sentences, batch_size=batch, convert_to_numpy=True)
    first_pass_seconds = time.perf_counter() - start
    start = time.perf_counter()
    embeddings = model.encode(sentences, batch_size=batch, convert_to_numpy=True)
    seconds = time.perf_counter() - start  # encode() returns numpy: the GPU has finished
    # Again in batches sorted by token count, as Flipside batches (sentence-transformers
    # sorts by characters, so its batches pad more): the ratio at equal padding.
    lengths = [len(ids) for ids in transformer.tokenizer(
        sentences, truncation=True, max_length=request["max_len"])["input_ids"]]
    order = sorted(range(len(sentences)), key=lambda i: -lengths[i])

    def token_sorted_seconds(model):
        """Two passes in those batches, the second timed, as above (the lengths are counted
        before the timer; Flipside counts inside its timed pass)."""
        for _ in range(2):
            start = time.perf_counter()
            for first in range(0, len(order), batch):
                model.encode([sentences[i] for i in order[first:first + batch]],
                             batch_size=batch, convert_to_numpy=True)
            seconds = time.perf_counter() - start
        return seconds

    f32_token_sorted_seconds = token_sorted_seconds(model)
    int8_seconds = int8_token_sorted_seconds = None
    if request.get("int8") and request["device"] == "cpu":
        warnings.filterwarnings("ignore")  # torch.ao.quantization is deprecated, still shipped
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        model.encode(sentences[:batch], batch_size=batch)
        start = time.perf_counter()
        model.encode(sentences, batch_size=batch, convert_to_numpy=True)
        int8_seconds = time.perf_counter() - start
        int8_token_sorted_seconds = token_sorted_seconds(model)
    print(json.dumps({
        "seconds": seconds,
        "first_pass_seconds": first_pass_seconds,
        "token_sorted_seconds": f32_token_sorted_seconds,
        "int8_seconds": int8_seconds,
        "int8_token_sorted_seconds": int8_token_sorted_seconds,
        "sentences_per_second": len(sentences) / seconds,
        "torch": f"{torch.__version__}, {torch.backends.cpu.get_cpu_capability()} kernels",
        "threads": torch.get_num_threads(),
        "first_embeddings": embeddings[:8].tolist(),
    }))


if __name__ == "__main__":
    main()
