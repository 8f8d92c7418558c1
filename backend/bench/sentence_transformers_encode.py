"""Reference timing for `flipside bench encode`: sentence-transformers on PyTorch (CPU or CUDA).

Reads a JSON request on stdin: {"model_dir", "sentences", "batch_size", "max_len", "threads",
"device"},
encodes the sentences with the same pipeline as Flipside (BERT -> mean pooling -> L2
normalisation, sequences truncated at max_len), and prints a JSON result on stdout.
"""

import json
import sys
import time

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
    model.encode(sentences[:batch], batch_size=batch)  # warm-up
    start = time.perf_counter()
    embeddings = model.encode(sentences, batch_size=batch, convert_to_numpy=True)
    seconds = time.perf_counter() - start  # encode() returns numpy: the GPU has finished
    print(json.dumps({
        "seconds": seconds,
        "sentences_per_second": len(sentences) / seconds,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "first_embeddings": embeddings[:8].tolist(),
    }))


if __name__ == "__main__":
    main()
