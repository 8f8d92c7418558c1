"""Independent reference for Flipside's BERT encoder: a float64 numpy forward pass.

Reads an HF BERT checkpoint directory (config.json, model.safetensors, tokenizer.json),
tokenises a few sentences of different lengths with the Python `tokenizers` package, runs
BERT + mean pooling + L2 normalisation in numpy, and writes the embeddings as a JSON fixture.
It shares no code with the Rust implementation. Run once; the fixture is committed:

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install numpy tokenizers
    /tmp/ref/bin/python tools/reference/minilm_reference.py ~/.flipside/assets/minilm \
        shared/tests/fixtures/minilm_reference.json
"""

import json
import math
import struct
import sys

import numpy as np
from tokenizers import Tokenizer

SENTENCES = [
    "The acting was superb.",
    "A",
    "I rented this movie expecting little, and it turned out to be one of the most "
    "moving, funny and beautifully shot films I have seen in years; the cast is "
    "uniformly excellent.",
    "Counterfactual data flips labels with minimal edits!",
    # Long enough (> 128 word pieces) to catch a tokenizer that still truncates at 128.
    " ".join(["the plot meanders and the dialogue is wooden , yet the score soars ."] * 14),
]
MAX_LEN = 256  # sentence_bert_config.json max_seq_length

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def load_safetensors(path):
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=DTYPES[info["dtype"]])
        tensors[name] = array.reshape(info["shape"]).astype(np.float64)
    return tensors


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def linear(x, t, prefix):
    return x @ t[prefix + ".weight"].T + t[prefix + ".bias"]


def bert(t, cfg, ids, types, mask):
    eps = cfg["layer_norm_eps"]
    seq = ids.shape[1]
    h = (
        t["embeddings.word_embeddings.weight"][ids]
        + t["embeddings.position_embeddings.weight"][np.arange(seq)][None]
        + t["embeddings.token_type_embeddings.weight"][types]
    )
    h = layer_norm(h, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    heads = cfg["num_attention_heads"]
    d = cfg["hidden_size"] // heads
    bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e30)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}"

        def split(x):
            return x.reshape(x.shape[0], seq, heads, d).transpose(0, 2, 1, 3)

        q = split(linear(h, t, p + ".attention.self.query"))
        k = split(linear(h, t, p + ".attention.self.key"))
        v = split(linear(h, t, p + ".attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
        scores -= scores.max(-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(h.shape)
        a = linear(ctx, t, p + ".attention.output.dense") + h
        h = layer_norm(a, t[p + ".attention.output.LayerNorm.weight"],
                       t[p + ".attention.output.LayerNorm.bias"], eps)
        f = gelu(linear(h, t, p + ".intermediate.dense"))
        o = linear(f, t, p + ".output.dense") + h
        h = layer_norm(o, t[p + ".output.LayerNorm.weight"], t[p + ".output.LayerNorm.bias"], eps)
    return h


def main(model_dir, out_path):
    cfg = json.load(open(f"{model_dir}/config.json"))
    t = load_safetensors(f"{model_dir}/model.safetensors")
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.no_padding()
    tok.enable_truncation(MAX_LEN)
    encodings = [tok.encode(s) for s in SENTENCES]
    seq = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(SENTENCES), seq), dtype=np.int64)
    types = np.zeros_like(ids)
    mask = np.zeros((len(SENTENCES), seq))
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = e.ids
        types[row, : len(e.ids)] = e.type_ids
        mask[row, : len(e.ids)] = 1.0
    h = bert(t, cfg, ids, types, mask)
    pooled = (h * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
    emb = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    fixture = {
        "description": "all-MiniLM-L6-v2 embeddings from tools/reference/minilm_reference.py "
        "(float64 numpy, mean pooling, L2 norm, max_len 256)",
        "sentences": SENTENCES,
        "input_ids": [e.ids for e in encodings],
        "embeddings": [[round(float(x), 8) for x in row] for row in emb],
    }
    with open(out_path, "w") as f:
        json.dump(fixture, f, indent=1)
    print(f"wrote {out_path}: {len(SENTENCES)} sentences, lengths {[len(e.ids) for e in encodings]}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
